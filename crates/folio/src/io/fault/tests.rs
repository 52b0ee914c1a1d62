use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::io::pread::PreadBackend;
use crate::io::testing::*;
use crate::io::uring::{UringBackend, QUEUE_DEPTH};
use crate::io::{FlushKind, FrameBuf};

const REQUEST_BYTES: usize = 4 * PAGE_BYTES;

fn fault_over_pread() -> (FaultBackend, FaultControl) {
    FaultBackend::new(Box::new(PreadBackend::new(2).unwrap()))
}

/// Submits one `REQUEST_BYTES` read per offset, in one batch, and returns each result
/// with its buffer.
fn read_pages(
    backend: &dyn Backend,
    test_file: &TestFile,
    offsets: &[u64],
) -> Vec<(io::Result<usize>, AlignedBuf)> {
    let bufs: Vec<AlignedBuf> = offsets
        .iter()
        .map(|_| AlignedBuf::new(REQUEST_BYTES))
        .collect();
    let (sender, reports) = channel();
    let batch = offsets
        .iter()
        .zip(&bufs)
        .enumerate()
        .map(|(index, (&offset, buf))| {
            read_request(
                &test_file.file,
                offset,
                buf.frame_buf(),
                report_to(&sender, index),
            )
        })
        .collect();
    backend.submit(batch);
    wait_reports(&reports, offsets.len())
        .into_iter()
        .zip(bufs)
        .map(|((_, result), buf)| (result, buf))
        .collect()
}

fn assert_eio(result: &io::Result<usize>) {
    let error = result.as_ref().expect_err("expected an injected EIO");
    assert_eq!(error.raw_os_error(), Some(libc::EIO));
}

/// Without faults the wrapper is transparent: every scenario of a plain backend passes.
#[test]
fn without_faults_it_is_the_inner_backend() {
    let test_file = test_file();
    let (backend, control) = fault_over_pread();
    assert_eq!(backend.name(), "fault(pread)");
    run_full_read(&backend, &test_file);
    run_end_of_file_reads(&backend, &test_file);
    run_kernel_error(&backend, &test_file);
    run_vectored_reads(&backend, &test_file);
    run_concurrent_reads(&backend, &test_file);
    let backend: Arc<dyn Backend> = Arc::new(backend);
    run_resubmitting_chains(&backend, &test_file, 16, 32);
    assert_eq!(
        (
            control.eio_injected(),
            control.short_injected(),
            control.delayed()
        ),
        (0, 0, 0)
    );
}

/// Exactly the requests overlapping a failed range complete with EIO, from another
/// thread than the submitter's, and leave their buffers untouched.
#[test]
fn fail_range_fails_overlapping_requests() {
    let test_file = test_file();
    let (backend, control) = fault_over_pread();
    let bad_byte = 5 * PAGE_BYTES as u64 + 17;
    control.fail_range(bad_byte..bad_byte + 1);
    // [0,4p) clean, [2p,6p) and [4p,8p) overlap, [8p,12p) clean, [6p,10p) clean: the
    // range end is exclusive and 6p > bad_byte.
    let offsets = [0, 2, 4, 8, 6].map(|page| page * PAGE_BYTES as u64);
    let submitter = std::thread::current().id();
    let (sender, reports) = mpsc::channel();
    let buf = AlignedBuf::new(REQUEST_BYTES);
    backend.submit(smallvec::smallvec![read_request(
        &test_file.file,
        4 * PAGE_BYTES as u64,
        buf.frame_buf(),
        Completion::new(move |result| {
            let _ = sender.send((std::thread::current().id(), result));
        }),
    )]);
    let (completer, result) = reports.recv_timeout(COMPLETION_WAIT).unwrap();
    assert_eio(&result);
    assert_ne!(
        completer, submitter,
        "an injected error must not complete inside submit"
    );
    assert!(buf.bytes().iter().all(|&byte| byte == 0));

    let results = read_pages(&backend, &test_file, &offsets);
    for (index, (result, buf)) in results.iter().enumerate() {
        if index == 1 || index == 2 {
            assert_eio(result);
        } else {
            assert_eq!(*result.as_ref().unwrap(), REQUEST_BYTES);
            assert_file_bytes(buf.bytes(), offsets[index]);
        }
    }
    assert_eq!(control.eio_injected(), 3);

    // Ranges accumulate.
    control.fail_range(0..1);
    let results = read_pages(&backend, &test_file, &offsets);
    assert_eio(&results[0].0);
    assert_eq!(control.eio_injected(), 6);
}

/// The next `count` long requests come back cut to 4096 bytes; short requests do not use
/// up the count; afterwards reads are whole again.
#[test]
fn short_reads_cut_the_next_long_requests() {
    let test_file = test_file();
    let (backend, control) = fault_over_pread();
    control.short_reads(2);
    let short_buf = AlignedBuf::new(PAGE_BYTES);
    let (sender, reports) = channel();
    backend.submit(smallvec::smallvec![read_request(
        &test_file.file,
        0,
        short_buf.frame_buf(),
        report_to(&sender, 0),
    )]);
    assert_eq!(
        wait_reports(&reports, 1)[0].1.as_ref().unwrap(),
        &PAGE_BYTES
    );
    assert_eq!(control.short_injected(), 0);

    let offsets = [0, 16, 32].map(|page| page * PAGE_BYTES as u64);
    let results = read_pages(&backend, &test_file, &offsets);
    for (index, (result, buf)) in results.iter().enumerate() {
        let len = *result.as_ref().unwrap();
        let expected = if index < 2 {
            SHORT_READ_BYTES
        } else {
            REQUEST_BYTES
        };
        assert_eq!(len, expected, "request {index}");
        assert_file_bytes(&buf.bytes()[..len], offsets[index]);
        assert!(buf.bytes()[len..].iter().all(|&byte| byte == 0));
    }
    assert_eq!(control.short_injected(), 2);
}

/// A cut vectored request keeps the buffers (or the part of one) that hold its first
/// 4096 bytes; the later buffers are left untouched.
#[test]
fn short_reads_cut_vectored_requests() {
    let test_file = test_file();
    let (backend, control) = fault_over_pread();
    control.short_reads(2);
    let one_then_three = [AlignedBuf::new(PAGE_BYTES), AlignedBuf::new(3 * PAGE_BYTES)];
    let two_then_two = [
        AlignedBuf::new(2 * PAGE_BYTES),
        AlignedBuf::new(2 * PAGE_BYTES),
    ];
    let (sender, reports) = channel();
    backend.submit(
        [&one_then_three, &two_then_two]
            .iter()
            .enumerate()
            .map(|(index, bufs)| {
                vectored_request(
                    &test_file.file,
                    0,
                    bufs.iter().map(AlignedBuf::frame_buf).collect(),
                    report_to(&sender, index),
                )
            })
            .collect(),
    );
    for (index, result) in wait_reports(&reports, 2) {
        assert_eq!(result.unwrap(), SHORT_READ_BYTES, "request {index}");
    }
    for bufs in [&one_then_three, &two_then_two] {
        let bytes: Vec<u8> = bufs.iter().flat_map(|buf| buf.bytes().to_vec()).collect();
        assert_file_bytes(&bytes[..SHORT_READ_BYTES], 0);
        assert!(bytes[SHORT_READ_BYTES..].iter().all(|&byte| byte == 0));
    }
    assert_eq!(control.short_injected(), 2);
}

/// The cache's retry path: completions that resubmit the rest of a short read still read
/// every byte while every long request is cut short.
#[test]
fn resubmitting_after_short_reads_reads_everything() {
    let test_file = test_file();
    let (backend, control) = fault_over_pread();
    control.short_reads(u32::MAX);
    let backend: Arc<dyn Backend> = Arc::new(backend);
    const CHUNKS: usize = 8;
    let bufs: Vec<AlignedBuf> = (0..CHUNKS)
        .map(|_| AlignedBuf::new(REQUEST_BYTES))
        .collect();
    let (sender, reports) = channel();
    for (chunk, buf) in bufs.iter().enumerate() {
        let offset = (chunk * REQUEST_BYTES) as u64;
        read_until_full(
            &backend,
            &test_file.file,
            offset,
            buf.frame_buf(),
            0,
            &sender,
            chunk,
        );
    }
    for (chunk, result) in wait_reports(&reports, CHUNKS) {
        assert_eq!(result.unwrap(), REQUEST_BYTES);
        assert_file_bytes(bufs[chunk].bytes(), (chunk * REQUEST_BYTES) as u64);
    }
    // Each chunk of 4 pages is cut with 4, 3 and 2 pages left, and whole with 1 left.
    assert_eq!(control.short_injected(), 3 * CHUNKS as u64);
}

/// Reads `whole` from `offset`, resubmitting the rest after each short count from inside
/// the completion (as the cache does), and reports the total under `tag`.
fn read_until_full(
    backend: &Arc<dyn Backend>,
    file: &Arc<std::fs::File>,
    offset: u64,
    whole: FrameBuf,
    read_bytes: usize,
    reports: &mpsc::Sender<Report>,
    tag: usize,
) {
    let again = (Arc::clone(backend), Arc::clone(file), reports.clone());
    let done = Completion::new(move |result: io::Result<usize>| {
        let (backend, file, reports) = again;
        match result {
            Ok(len) if len > 0 && read_bytes + len < whole.len_bytes() => {
                let read_bytes = read_bytes + len;
                read_until_full(&backend, &file, offset, whole, read_bytes, &reports, tag);
            }
            other => {
                let _ = reports.send((tag, other.map(|len| read_bytes + len)));
            }
        }
    });
    let rest = whole.tail(read_bytes);
    backend.submit(smallvec::smallvec![read_request(
        file,
        offset + read_bytes as u64,
        rest,
        done,
    )]);
}

/// Every completion arrives at least `delay` late, `submit` does not wait for it, and
/// delays of one batch overlap instead of adding up.
#[test]
fn delay_postpones_every_completion() {
    let test_file = test_file();
    let (backend, control) = fault_over_pread();
    let delay = Duration::from_millis(200);
    control.delay(delay);
    control.fail_range(0..1);
    const REQUESTS: usize = 8;
    let bufs: Vec<AlignedBuf> = (0..REQUESTS).map(|_| AlignedBuf::new(PAGE_BYTES)).collect();
    let (sender, reports) = mpsc::channel();
    let started = Instant::now();
    let batch = bufs
        .iter()
        .enumerate()
        .map(|(index, buf)| {
            let sender = sender.clone();
            let done = Completion::new(move |result| {
                let _ = sender.send((index, result, started.elapsed()));
            });
            read_request(
                &test_file.file,
                (index * PAGE_BYTES) as u64,
                buf.frame_buf(),
                done,
            )
        })
        .collect();
    backend.submit(batch);
    assert!(started.elapsed() < delay, "submit waited for the delay");
    for _ in 0..REQUESTS {
        let (index, result, elapsed) = reports.recv_timeout(COMPLETION_WAIT).unwrap();
        assert!(
            elapsed >= delay,
            "request {index} completed after {elapsed:?}"
        );
        if index == 0 {
            assert_eio(&result);
        } else {
            assert_eq!(result.unwrap(), PAGE_BYTES);
            assert_file_bytes(bufs[index].bytes(), (index * PAGE_BYTES) as u64);
        }
    }
    assert!(
        started.elapsed() < delay * REQUESTS as u32 / 2,
        "delays ran one after another: {:?}",
        started.elapsed()
    );
    assert_eq!(control.delayed(), REQUESTS as u64);
    assert_eq!(control.eio_injected(), 1);
}

/// `clear` removes every fault at once and keeps the counters.
#[test]
fn clear_removes_every_fault() {
    let test_file = test_file();
    let (backend, control) = fault_over_pread();
    control.fail_range(0..u64::MAX);
    control.short_reads(10);
    control.delay(Duration::from_millis(50));
    let results = read_pages(&backend, &test_file, &[0]);
    assert_eio(&results[0].0);

    control.clear();
    let started = Instant::now();
    let offsets = [0, 8, 16].map(|page| page * PAGE_BYTES as u64);
    let results = read_pages(&backend, &test_file, &offsets);
    assert!(
        started.elapsed() < Duration::from_millis(50),
        "the delay is still on"
    );
    for (index, (result, buf)) in results.iter().enumerate() {
        assert_eq!(*result.as_ref().unwrap(), REQUEST_BYTES);
        assert_file_bytes(buf.bytes(), offsets[index]);
    }
    assert_eq!(
        (
            control.eio_injected(),
            control.short_injected(),
            control.delayed()
        ),
        (1, 0, 1)
    );
}

/// `drop` waits out the delays: every accepted completion has run when it returns.
#[test]
fn drop_completes_delayed_requests() {
    let test_file = test_file();
    let (backend, control) = fault_over_pread();
    control.delay(Duration::from_millis(20));
    control.fail_range(0..PAGE_BYTES as u64);
    run_drop_completes_everything_but_page_zero(Box::new(backend), &test_file);

    let (backend, _control) = fault_over_pread();
    run_drop_completes_everything(Box::new(backend), &test_file);
}

/// `run_drop_completes_everything`, with page 0 failing.
fn run_drop_completes_everything_but_page_zero(backend: Box<dyn Backend>, test_file: &TestFile) {
    const REQUESTS: usize = 64;
    let bufs: Vec<AlignedBuf> = (0..REQUESTS).map(|_| AlignedBuf::new(PAGE_BYTES)).collect();
    let (sender, reports) = channel();
    let batch = bufs
        .iter()
        .enumerate()
        .map(|(index, buf)| {
            read_request(
                &test_file.file,
                (index * PAGE_BYTES) as u64,
                buf.frame_buf(),
                report_to(&sender, index),
            )
        })
        .collect();
    backend.submit(batch);
    drop(backend);
    let mut received: Vec<Report> = reports.try_iter().collect();
    received.sort_by_key(|(index, _)| *index);
    assert_eq!(
        received.len(),
        REQUESTS,
        "drop returned before every completion ran"
    );
    assert_eio(&received[0].1);
    for (index, result) in received.into_iter().skip(1) {
        assert_eq!(result.unwrap(), PAGE_BYTES);
        assert_file_bytes(bufs[index].bytes(), (index * PAGE_BYTES) as u64);
    }
}

/// The last handle dropped inside a completion: on the delivery thread (with a delay),
/// or on the inner backend's worker (without).
#[test]
fn dropped_from_inside_a_completion() {
    let test_file = test_file();
    for delay_ms in [0, 5] {
        let (backend, control) = fault_over_pread();
        control.delay(Duration::from_millis(delay_ms));
        run_dropped_from_inside_a_completion(Arc::new(backend), &test_file);
    }
}

/// The faults over io_uring, where the kernel allows it.
#[test]
fn faults_over_io_uring() {
    let Ok(inner) = UringBackend::new(QUEUE_DEPTH) else {
        eprintln!("io_uring unavailable here; skipping");
        return;
    };
    let test_file = test_file();
    let (backend, control) = FaultBackend::new(Box::new(inner));
    assert_eq!(backend.name(), "fault(io_uring)");
    control.fail_range(0..1);
    control.short_reads(1);
    control.delay(Duration::from_millis(10));
    let offsets = [0, 4, 8].map(|page| page * PAGE_BYTES as u64);
    let results = read_pages(&backend, &test_file, &offsets);
    assert_eio(&results[0].0);
    assert_eq!(*results[1].0.as_ref().unwrap(), SHORT_READ_BYTES);
    assert_file_bytes(&results[1].1.bytes()[..SHORT_READ_BYTES], offsets[1]);
    assert_eq!(*results[2].0.as_ref().unwrap(), REQUEST_BYTES);
    assert_file_bytes(results[2].1.bytes(), offsets[2]);
    control.clear();
    run_concurrent_reads(&backend, &test_file);
}

/// The seed's draw is a pure function of (seed, offset, length, ordinal), its rates
/// are close to the configured ones, and its short reads and delays stay in bounds.
#[test]
fn draws_are_pure_and_within_bounds() {
    let config = SimConfig {
        eio_per_mille: 100,
        short_per_mille: 300,
        delay_max: Duration::from_micros(500),
        reorder: 4,
        hold_max: Duration::from_millis(1),
    };
    const DRAWS: u32 = 20_000;
    let (mut eio, mut short, mut long) = (0u32, 0u32, 0u32);
    for n in 0..DRAWS {
        let offset = u64::from(n % 97) * PAGE_BYTES as u64;
        let len_bytes = (1 + (n as usize % 9)) * PAGE_BYTES;
        let ordinal = n / 97;
        let draw = config.draw(7, Op::Read, offset, len_bytes, ordinal);
        assert_eq!(
            draw,
            config.draw(7, Op::Read, offset, len_bytes, ordinal),
            "pure"
        );
        assert!(draw.delay <= config.delay_max);
        eio += u32::from(draw.eio);
        if len_bytes > PAGE_BYTES && !draw.eio {
            long += 1;
        }
        if let Some(cut) = draw.short_bytes {
            assert!(!draw.eio, "a media error excludes a short read");
            assert!(cut >= PAGE_BYTES && cut < len_bytes && cut % PAGE_BYTES == 0);
            short += 1;
        }
    }
    let eio_per_mille = eio * 1000 / DRAWS;
    let short_per_mille = short * 1000 / long;
    assert!((80..120).contains(&eio_per_mille), "{eio_per_mille}");
    assert!((270..330).contains(&short_per_mille), "{short_per_mille}");
    // Another seed, another ordinal: other faults.
    let differs = (0..64u64).any(|page| {
        let offset = page * PAGE_BYTES as u64;
        config.draw(7, Op::Read, offset, 4 * PAGE_BYTES, 0)
            != config.draw(8, Op::Read, offset, 4 * PAGE_BYTES, 0)
    });
    assert!(differs);
    // A write draws from streams of its own, within the same bounds.
    let (mut write_eio, mut write_differs) = (0u32, false);
    for n in 0..DRAWS {
        let offset = u64::from(n % 97) * PAGE_BYTES as u64;
        let len_bytes = (1 + (n as usize % 9)) * PAGE_BYTES;
        let write = config.draw(7, Op::Write, offset, len_bytes, n / 97);
        let read = config.draw(7, Op::Read, offset, len_bytes, n / 97);
        write_differs |= write != read;
        write_eio += u32::from(write.eio);
        assert!(write.delay <= config.delay_max);
        if let Some(cut) = write.short_bytes {
            assert!(!write.eio && cut >= PAGE_BYTES && cut < len_bytes && cut % PAGE_BYTES == 0);
        }
    }
    assert!(write_differs);
    assert!(
        (80..120).contains(&(write_eio * 1000 / DRAWS)),
        "{write_eio}"
    );
}

/// A read's draw is what it was before writes joined the simulation, so a seed recorded
/// then (docs/reliability.md) still replays the same faults.
#[test]
fn read_draws_are_unchanged_by_writes_joining() {
    let config = SimConfig {
        eio_per_mille: 500,
        short_per_mille: 500,
        delay_max: Duration::from_micros(1000),
        reorder: 4,
        hold_max: Duration::from_millis(1),
    };
    for (ordinal, expected) in READ_DRAWS_1234.iter().enumerate() {
        let draw = config.draw(
            1234,
            Op::Read,
            8 * PAGE_BYTES as u64,
            4 * PAGE_BYTES,
            ordinal as u32,
        );
        let delay_ns = u64::try_from(draw.delay.as_nanos()).unwrap();
        assert_eq!(
            (draw.eio, draw.short_bytes, delay_ns, draw.rank),
            *expected,
            "ordinal {ordinal}"
        );
    }
}

/// The outcome of each request of a seeded backend depends on its range and ordinal,
/// not on the order of submission: two runs submitting the same requests in opposite
/// orders (keeping the order of each range's own requests) meet the same faults.
#[test]
fn a_seed_replays_the_same_faults_in_any_submission_order() {
    let test_file = test_file();
    let config = SimConfig {
        eio_per_mille: 250,
        short_per_mille: 400,
        delay_max: Duration::from_micros(300),
        reorder: 3,
        hold_max: Duration::from_micros(500),
    };
    // 24 ranges, each requested twice: (range, ordinal) -> result.
    let ranges: Vec<(u64, usize)> = (0..24)
        .map(|i| {
            (
                (i * 9 % 64) as u64 * PAGE_BYTES as u64,
                (1 + i % 4) * PAGE_BYTES,
            )
        })
        .collect();
    let run = |order: &[usize]| {
        let (backend, control) =
            FaultBackend::seeded(Box::new(PreadBackend::new(2).unwrap()), 99, config);
        // outcomes[ordinal][range]
        let mut outcomes = vec![vec![None; ranges.len()]; 2];
        for round in outcomes.iter_mut() {
            let bufs: Vec<AlignedBuf> = order
                .iter()
                .map(|&i| AlignedBuf::new(ranges[i].1))
                .collect();
            let (sender, reports) = channel();
            let batch = order
                .iter()
                .zip(&bufs)
                .map(|(&i, buf)| {
                    read_request(
                        &test_file.file,
                        ranges[i].0,
                        buf.frame_buf(),
                        report_to(&sender, i),
                    )
                })
                .collect();
            backend.submit(batch);
            for (i, result) in wait_reports(&reports, order.len()) {
                let outcome = match result {
                    Ok(len) => Ok(len),
                    Err(error) => Err(error.raw_os_error()),
                };
                round[i] = Some(outcome);
            }
            for (&i, buf) in order.iter().zip(&bufs) {
                if let Some(Ok(len)) = round[i] {
                    assert_file_bytes(&buf.bytes()[..len], ranges[i].0);
                }
            }
        }
        (outcomes, control.eio_injected(), control.short_injected())
    };
    let forward: Vec<usize> = (0..ranges.len()).collect();
    let backward: Vec<usize> = forward.iter().rev().copied().collect();
    let (first, eio, short) = run(&forward);
    let (second, eio_again, short_again) = run(&backward);
    assert_eq!(first, second);
    assert_eq!((eio, short), (eio_again, short_again));
    assert!(
        eio > 0 && short > 0,
        "the rates make both faults: {eio} {short}"
    );
    let failed = first
        .iter()
        .flatten()
        .filter(|outcome| **outcome == Some(Err(Some(libc::EIO))))
        .count();
    assert_eq!(failed as u64, eio);
}

/// Held completions come out in rank order, not arrival order, and none waits longer
/// than the hold: every completion of a batch arrives.
#[test]
fn the_pen_reorders_completions_and_releases_them_all() {
    let test_file = test_file();
    let config = SimConfig {
        reorder: 4,
        hold_max: Duration::from_millis(20),
        ..SimConfig::default()
    };
    let mut reordered = 0;
    for seed in 0..4 {
        let (backend, control) =
            FaultBackend::seeded(Box::new(PreadBackend::new(1).unwrap()), seed, config);
        const REQUESTS: usize = 12;
        let bufs: Vec<AlignedBuf> = (0..REQUESTS).map(|_| AlignedBuf::new(PAGE_BYTES)).collect();
        let (sender, reports) = channel();
        let started = Instant::now();
        backend.submit(
            bufs.iter()
                .enumerate()
                .map(|(i, buf)| {
                    read_request(
                        &test_file.file,
                        (i * PAGE_BYTES) as u64,
                        buf.frame_buf(),
                        report_to(&sender, i),
                    )
                })
                .collect(),
        );
        for (i, result) in wait_reports(&reports, REQUESTS) {
            assert_eq!(result.unwrap(), PAGE_BYTES);
            assert_file_bytes(bufs[i].bytes(), (i * PAGE_BYTES) as u64);
        }
        assert!(started.elapsed() < Duration::from_secs(5));
        reordered += control.reordered();
        drop(backend);
    }
    assert!(reordered > 0, "ranks never overtook arrival order");
}

/// At a rate of 1000 per mille every request fails; `clear` ends the simulation.
#[test]
fn clear_ends_the_simulation() {
    let test_file = test_file();
    let config = SimConfig {
        eio_per_mille: 1000,
        ..SimConfig::default()
    };
    let (backend, control) =
        FaultBackend::seeded(Box::new(PreadBackend::new(2).unwrap()), 1, config);
    let offsets = [0, 8, 16].map(|page| page * PAGE_BYTES as u64);
    for (result, _) in read_pages(&backend, &test_file, &offsets) {
        assert_eio(&result);
    }
    control.clear();
    for (index, (result, buf)) in read_pages(&backend, &test_file, &offsets)
        .iter()
        .enumerate()
    {
        assert_eq!(*result.as_ref().unwrap(), REQUEST_BYTES);
        assert_file_bytes(buf.bytes(), offsets[index]);
    }
    assert_eq!(control.eio_injected(), 3);
}

/// Draining a backend whose pen holds completions (a long hold) releases them at once.
#[test]
fn drop_releases_the_pen() {
    let test_file = test_file();
    let config = SimConfig {
        reorder: 64,
        hold_max: Duration::from_secs(60),
        delay_max: Duration::from_micros(200),
        ..SimConfig::default()
    };
    let (backend, _control) =
        FaultBackend::seeded(Box::new(PreadBackend::new(2).unwrap()), 5, config);
    let started = Instant::now();
    run_drop_completes_everything(Box::new(backend), &test_file);
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// `read_draws_are_unchanged_by_writes_joining`'s draws, ordinals 0 to 5: (EIO, short
/// length, delay in ns, rank), computed by the simulation as it was when it drew reads
/// only (commit a81f574).
const READ_DRAWS_1234: [(bool, Option<usize>, u64, u64); 6] = [
    (false, Some(4096), 550_188, 16_767_991_628_859_886_739),
    (true, None, 880_027, 3_516_229_363_879_996_551),
    (false, None, 241_207, 882_783_006_828_346_028),
    (false, Some(4096), 550_702, 18_157_854_630_727_128_515),
    (false, Some(12288), 386_061, 1_130_152_315_912_081_670),
    (true, None, 491_986, 9_944_362_887_252_073_824),
];

/// Without faults, writes pass through to the inner backend: every write scenario passes,
/// over the pread pool and over io_uring where the kernel allows it.
#[test]
fn without_faults_writes_pass_through() {
    let test_file = test_file();
    let (backend, control) = fault_over_pread();
    run_writes_read_back(&backend);
    run_write_error(&backend, &test_file);
    run_concurrent_writes(&backend, &test_file);
    assert_eq!(
        (
            control.eio_injected(),
            control.short_injected(),
            control.delayed()
        ),
        (0, 0, 0)
    );
    assert!(!control.take_writes().is_empty());
    if let Ok(inner) = UringBackend::new(QUEUE_DEPTH) {
        let (backend, _control) = FaultBackend::new(Box::new(inner));
        run_writes_read_back(&backend);
        run_concurrent_writes(&backend, &test_file);
    }
}

/// Submits one write of `pages` pages at each of `first_pages` of `scratch`, in one batch,
/// and returns the results in that order.
fn write_pages(
    backend: &dyn Backend,
    scratch: &ScratchFile,
    first_pages: &[u64],
    pages: usize,
) -> Vec<io::Result<usize>> {
    let bufs: Vec<AlignedBuf> = first_pages
        .iter()
        .map(|&page| written_buf(page * PAGE_BYTES as u64, pages * PAGE_BYTES))
        .collect();
    let (sender, reports) = channel();
    let batch = first_pages
        .iter()
        .zip(&bufs)
        .enumerate()
        .map(|(index, (&page, buf))| {
            write_request(
                &scratch.file,
                page * PAGE_BYTES as u64,
                buf.frame_buf(),
                report_to(&sender, index),
            )
        })
        .collect();
    backend.submit(batch);
    wait_reports(&reports, first_pages.len())
        .into_iter()
        .map(|(_, result)| result)
        .collect()
}

/// The planned faults apply to writes: a failed range fails an overlapping write with EIO
/// and leaves the file's bytes there untouched; `short_writes` cuts the next long write to
/// its first 4096 bytes, which alone reach the file, and uses up no short read (nor
/// `short_reads` a write); a delay postpones a write's completion. The logs keep reads and
/// writes apart.
#[test]
fn writes_meet_the_planned_faults() {
    let test_file = test_file();
    let scratch = scratch_file();
    let (backend, control) = fault_over_pread();
    control.fail_range(9 * PAGE_BYTES as u64..9 * PAGE_BYTES as u64 + 1);
    control.short_writes(1);
    control.short_reads(1);
    let results = write_pages(&backend, &scratch, &[8, 0, 16], 4);
    assert_eio(&results[0]);
    assert_eq!(*results[1].as_ref().unwrap(), SHORT_READ_BYTES);
    assert_eq!(*results[2].as_ref().unwrap(), REQUEST_BYTES);
    let on_disk = std::fs::read(&scratch.path).unwrap();
    let page = |p: usize| &on_disk[p * PAGE_BYTES..(p + 1) * PAGE_BYTES];
    assert!(
        (8..12).all(|p| page(p).iter().all(|&b| b == 0)),
        "failed write"
    );
    assert!(page(0)
        .iter()
        .enumerate()
        .all(|(at, &b)| b == written_byte(at as u64)));
    assert!(
        (1..4).all(|p| page(p).iter().all(|&b| b == 0)),
        "short write"
    );
    assert!((16..20).all(|p| page(p)
        .iter()
        .enumerate()
        .all(|(at, &b)| b == written_byte((p * PAGE_BYTES + at) as u64))));
    // The short read is still there for the next long read.
    let read = read_pages(&backend, &test_file, &[0]);
    assert_eq!(*read[0].0.as_ref().unwrap(), SHORT_READ_BYTES);
    assert_eq!((control.eio_injected(), control.short_injected()), (1, 2));
    assert_eq!(
        control.take_writes(),
        [8u64, 0, 16].map(|p| (p * PAGE_BYTES as u64, REQUEST_BYTES))
    );
    assert_eq!(control.take_requests(), [(0, REQUEST_BYTES)]);

    control.clear();
    let delay = Duration::from_millis(100);
    control.delay(delay);
    let started = Instant::now();
    let results = write_pages(&backend, &scratch, &[24], 4);
    assert_eq!(*results[0].as_ref().unwrap(), REQUEST_BYTES);
    assert!(started.elapsed() >= delay, "the write completed early");
    assert_eq!(control.delayed(), 1);
}

/// A seeded simulation fails, cuts and delays writes at its rates, and a cut write stored
/// exactly its drawn prefix.
#[test]
fn a_seed_draws_faults_for_writes() {
    let config = SimConfig {
        eio_per_mille: 200,
        short_per_mille: 400,
        delay_max: Duration::from_micros(200),
        ..SimConfig::default()
    };
    let scratch = scratch_file();
    let (backend, control) =
        FaultBackend::seeded(Box::new(PreadBackend::new(2).unwrap()), 17, config);
    let first_pages: Vec<u64> = (0..16).map(|i| i * 4).collect();
    let results = write_pages(&backend, &scratch, &first_pages, 4);
    let on_disk = std::fs::read(&scratch.path).unwrap();
    let (mut failed, mut short) = (0, 0);
    for (&first, result) in first_pages.iter().zip(&results) {
        let offset = first as usize * PAGE_BYTES;
        let stored = match result {
            Err(error) => {
                assert_eq!(error.raw_os_error(), Some(libc::EIO));
                failed += 1;
                0
            }
            Ok(len) => {
                short += usize::from(*len < REQUEST_BYTES);
                *len
            }
        };
        for at in 0..REQUEST_BYTES {
            let byte = on_disk.get(offset + at).copied().unwrap_or(0);
            let expected = if at < stored {
                written_byte((offset + at) as u64)
            } else {
                0
            };
            assert_eq!(byte, expected, "write at page {first}, byte {at}");
        }
    }
    assert_eq!(failed as u64, control.eio_injected());
    assert_eq!(short as u64, control.short_injected());
    assert!(failed > 0 && short > 0, "the rates make both faults");
}

/// Flushes pass through, over the pread pool and io_uring where the kernel allows it,
/// and meet no fault when none is planned.
#[test]
fn without_faults_flushes_pass_through() {
    let (backend, control) = fault_over_pread();
    run_flushes(&backend);
    run_flushes(&Waited(&backend));
    assert_eq!(
        (control.eio_injected(), control.other_errors_injected()),
        (0, 0)
    );
    if let Ok(inner) = UringBackend::new(QUEUE_DEPTH) {
        let (backend, _control) = FaultBackend::new(Box::new(inner));
        run_flushes(&backend);
    }
}

/// Submits a flush of `file` and returns its result.
fn flush_file(
    backend: &dyn Backend,
    file: &Arc<std::fs::File>,
    kind: FlushKind,
) -> io::Result<usize> {
    let (sender, reports) = channel();
    backend.submit(smallvec::smallvec![IoRequest::flush(
        Arc::clone(file),
        kind,
        report_to(&sender, 0),
    )]);
    wait_reports(&reports, 1).remove(0).1
}

/// `fail_flushes` fails every later flush with its errno, of either kind, delayed like
/// any completion; `clear` ends it.
#[test]
fn a_flush_error_reaches_the_completion() {
    let scratch = scratch_file();
    let (backend, control) = fault_over_pread();
    assert_eq!(
        flush_file(&backend, &scratch.file, FlushKind::Data).unwrap(),
        0
    );
    control.fail_flushes(libc::EIO);
    control.delay(Duration::from_millis(20));
    for kind in [FlushKind::Data, FlushKind::All] {
        assert_eio(&flush_file(&backend, &scratch.file, kind));
    }
    control.fail_flushes(libc::ENOSPC);
    let error = flush_file(&backend, &scratch.file, FlushKind::Data).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
    assert_eq!(
        (control.eio_injected(), control.other_errors_injected()),
        (2, 1)
    );
    control.clear();
    assert_eq!(
        flush_file(&backend, &scratch.file, FlushKind::All).unwrap(),
        0
    );
}

/// `fail_writes(range, ENOSPC)` fails the writes overlapping the range with ENOSPC and
/// stores nothing of them; other writes, and reads of the range, go through.
#[test]
fn enospc_on_a_write_range_reaches_the_completion() {
    let scratch = scratch_file();
    let (backend, control) = fault_over_pread();
    let range_start = 10 * PAGE_BYTES as u64;
    control.fail_writes(range_start..range_start + PAGE_BYTES as u64, libc::ENOSPC);
    control.fail_writes(range_start..range_start + 1, libc::EIO);
    let results = write_pages(&backend, &scratch, &[8, 12, 0], 4);
    assert_eq!(
        results[0].as_ref().unwrap_err().raw_os_error(),
        Some(libc::ENOSPC),
        "the first overlapping range's errno"
    );
    assert_eq!(*results[1].as_ref().unwrap(), REQUEST_BYTES);
    assert_eq!(*results[2].as_ref().unwrap(), REQUEST_BYTES);
    let on_disk = std::fs::read(&scratch.path).unwrap();
    let bytes = |page: usize| &on_disk[page * PAGE_BYTES..(page + 4) * PAGE_BYTES];
    assert!(
        bytes(8).iter().all(|&b| b == 0),
        "a failed write stored bytes"
    );
    assert!(bytes(12)
        .iter()
        .enumerate()
        .all(|(at, &b)| b == written_byte((12 * PAGE_BYTES + at) as u64)));
    let (sender, reports) = channel();
    let buf = AlignedBuf::new(REQUEST_BYTES);
    backend.submit(smallvec::smallvec![read_request(
        &scratch.file,
        8 * PAGE_BYTES as u64,
        buf.frame_buf(),
        report_to(&sender, 0),
    )]);
    assert_eq!(
        wait_reports(&reports, 1)[0].1.as_ref().unwrap(),
        &REQUEST_BYTES
    );
    assert_eq!(
        (control.eio_injected(), control.other_errors_injected()),
        (0, 1)
    );
}

/// The byte a power-loss scenario's write number `generation` stores at `offset`: each
/// generation different, never zero.
fn generation_byte(generation: u8, offset: u64) -> u8 {
    (written_byte(offset) ^ generation.wrapping_mul(0x3B)).max(1)
}

/// Writes `pages` pages of generation `generation` at `first_page` of `scratch`, waits.
fn write_generation(
    backend: &dyn Backend,
    scratch: &ScratchFile,
    generation: u8,
    first_page: u64,
    pages: usize,
) {
    let offset = first_page * PAGE_BYTES as u64;
    let buf = AlignedBuf::filled(pages * PAGE_BYTES, |at| {
        generation_byte(generation, offset + at as u64)
    });
    let (sender, reports) = channel();
    backend.submit(smallvec::smallvec![write_request(
        &scratch.file,
        offset,
        buf.frame_buf(),
        report_to(&sender, 0),
    )]);
    assert_eq!(
        wait_reports(&reports, 1)[0].1.as_ref().unwrap(),
        &(pages * PAGE_BYTES)
    );
}

/// Which generation block `page` of `on_disk` holds: 0 for zeros, `None` for anything
/// else (bytes nobody wrote there, or a block mixing two).
fn generation_of(on_disk: &[u8], page: usize, generations: &[u8]) -> Option<u8> {
    let block = &on_disk[page * PAGE_BYTES..(page + 1) * PAGE_BYTES];
    if block.iter().all(|&b| b == 0) {
        return Some(0);
    }
    generations.iter().copied().find(|&generation| {
        block
            .iter()
            .enumerate()
            .all(|(at, &b)| b == generation_byte(generation, (page * PAGE_BYTES + at) as u64))
    })
}

/// The power-loss model, over 64 seeds: a write followed by a successful flush survives
/// every power loss; an un-flushed write leaves each of its 4 KiB blocks old or new, never
/// anything else; an overwrite after a flush falls back to the flushed bytes, not to what
/// was there before them; a failed flush vouches for nothing. Across the seeds, writes
/// are kept, lost and torn (some blocks kept, others lost), and a seed replays: the same
/// writes and seed leave the same file.
#[test]
fn power_loss_keeps_flushed_writes_and_leaves_old_or_new_blocks() {
    // One run: returns the file after the power loss and the loss's summary.
    let run = |seed: u64| -> (Vec<u8>, PowerLoss) {
        let scratch = scratch_file();
        let (backend, control) = fault_over_pread();
        // Pages 0..8: generation 1, flushed. Pages 4..12: generation 2, flushed; then
        // pages 6..10 generation 3, not flushed. Pages 16..24: generation 4, not flushed
        // (the flush fails). Pages 32..36 and 40..44: generations 5 and 6, not flushed.
        write_generation(&backend, &scratch, 1, 0, 8);
        assert_eq!(
            flush_file(&backend, &scratch.file, FlushKind::Data).unwrap(),
            0
        );
        write_generation(&backend, &scratch, 2, 4, 8);
        assert_eq!(
            flush_file(&backend, &scratch.file, FlushKind::All).unwrap(),
            0
        );
        write_generation(&backend, &scratch, 3, 6, 4);
        write_generation(&backend, &scratch, 4, 16, 8);
        control.fail_flushes(libc::EIO);
        assert_eio(&flush_file(&backend, &scratch.file, FlushKind::Data));
        control.clear();
        write_generation(&backend, &scratch, 5, 32, 4);
        write_generation(&backend, &scratch, 6, 40, 4);
        let loss = control.power_loss(seed).unwrap();
        drop(backend);
        (std::fs::read(&scratch.path).unwrap(), loss)
    };
    let (mut kept, mut lost, mut torn) = (0, 0, 0);
    for seed in 0..64 {
        let (on_disk, loss) = run(seed);
        assert_eq!(
            on_disk.len(),
            SCRATCH_PAGES as usize * PAGE_BYTES,
            "seed {seed}"
        );
        let generation = |page| generation_of(&on_disk, page, &[1, 2, 3, 4, 5, 6]);
        for page in 0..4 {
            assert_eq!(
                generation(page),
                Some(1),
                "seed {seed} page {page}: flushed"
            );
        }
        for page in (4..6).chain(10..12) {
            assert_eq!(
                generation(page),
                Some(2),
                "seed {seed} page {page}: flushed"
            );
        }
        for page in 6..10 {
            let found = generation(page);
            assert!(
                matches!(found, Some(2 | 3)),
                "seed {seed} page {page}: the flushed bytes or the new, not {found:?}"
            );
        }
        let mut blocks_new = 0;
        for (first, new) in [(16, 4), (32, 5), (40, 6)] {
            let pages = if new == 4 { 8 } else { 4 };
            let found: Vec<Option<u8>> = (first..first + pages).map(generation).collect();
            assert!(
                found
                    .iter()
                    .all(|g| matches!(g, Some(0)) || *g == Some(new)),
                "seed {seed} pages {first}..: old or new, not {found:?}"
            );
            let new_blocks = found.iter().filter(|g| **g == Some(new)).count();
            blocks_new += new_blocks;
            match new_blocks {
                0 => lost += 1,
                n if n == pages => kept += 1,
                _ => torn += 1,
            }
        }
        assert_eq!(
            loss.blocks_kept + loss.blocks_lost,
            4 + 8 + 4 + 4,
            "seed {seed}: the un-flushed blocks"
        );
        let blocks_new_6_to_10 = (6..10).filter(|&page| generation(page) == Some(3)).count();
        assert_eq!(
            loss.blocks_kept as usize,
            blocks_new + blocks_new_6_to_10,
            "seed {seed}"
        );
    }
    assert!(kept > 0 && lost > 0 && torn > 0, "{kept} {lost} {torn}");
    for seed in [3, 41] {
        assert!(run(seed) == run(seed), "seed {seed} does not replay");
    }
}

/// After a power loss the record is empty: a second power loss changes nothing. A power
/// loss with a write in flight (passed on, not completed) is refused.
#[test]
fn power_loss_forgets_and_refuses_writes_in_flight() {
    let scratch = scratch_file();
    let (backend, control) = fault_over_pread();
    write_generation(&backend, &scratch, 1, 0, 4);
    let first = control.power_loss(9).unwrap();
    assert_eq!(first.blocks_kept + first.blocks_lost, 4);
    let on_disk = std::fs::read(&scratch.path).unwrap();
    assert_eq!(control.power_loss(10).unwrap(), PowerLoss::default());
    assert!(std::fs::read(&scratch.path).unwrap() == on_disk);

    let held = Held::default();
    let (backend, control) = FaultBackend::new(Box::new(held.clone()));
    let buf = written_buf(0, PAGE_BYTES);
    let (sender, reports) = channel();
    backend.submit(smallvec::smallvec![write_request(
        &scratch.file,
        0,
        buf.frame_buf(),
        report_to(&sender, 0),
    )]);
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| control.power_loss(1)));
    assert!(
        refused.is_err(),
        "a power loss with a write in flight must be refused"
    );
    held.release();
    assert_eq!(
        wait_reports(&reports, 1)[0].1.as_ref().unwrap(),
        &PAGE_BYTES
    );
    let loss = control.power_loss(1).unwrap();
    assert_eq!(loss.blocks_kept + loss.blocks_lost, 1);
}

/// An inner backend that holds its requests until `release` performs them (on the
/// caller's thread); dropping it performs what is left.
#[derive(Clone, Default)]
struct Held(Arc<std::sync::Mutex<Vec<IoRequest>>>);

impl Held {
    fn release(&self) {
        let requests = std::mem::take(&mut *self.0.lock().unwrap());
        for request in requests {
            crate::io::sync::perform(request);
        }
    }
}

impl Backend for Held {
    fn name(&self) -> &str {
        "held"
    }

    fn submit(&self, batch: IoBatch) {
        self.0.lock().unwrap().extend(batch);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.release();
    }
}

/// A seed draws flush errors at its EIO rate, from streams of their own (a flush's
/// draws differ from a read's at the same key); a failed range, which names file bytes,
/// never fails a flush.
#[test]
fn a_seed_draws_flush_errors() {
    let config = SimConfig {
        eio_per_mille: 500,
        ..SimConfig::default()
    };
    let scratch = scratch_file();
    let (backend, control) =
        FaultBackend::seeded(Box::new(PreadBackend::new(1).unwrap()), 23, config);
    control.fail_range(0..u64::MAX);
    const FLUSHES: usize = 40;
    let failed = (0..FLUSHES)
        .filter(
            |_| match flush_file(&backend, &scratch.file, FlushKind::Data) {
                Ok(len) => {
                    assert_eq!(len, 0);
                    false
                }
                Err(error) => {
                    assert_eq!(error.raw_os_error(), Some(libc::EIO));
                    true
                }
            },
        )
        .count();
    assert!(
        0 < failed && failed < FLUSHES,
        "{failed} of {FLUSHES} failed"
    );
    assert_eq!(control.eio_injected(), failed as u64);
    let flush = |ordinal| {
        config.draw(
            23,
            Op::Flush {
                kind: FlushKind::Data,
            },
            0,
            0,
            ordinal,
        )
    };
    let read = |ordinal| config.draw(23, Op::Read, 0, 0, ordinal);
    assert!((0..16).any(|ordinal| flush(ordinal) != read(ordinal)));
}

/// An inner backend that passes reads and writes to a pread backend at once and, after
/// `hold`, holds flushes, counting them, until `release` passes them on.
#[derive(Clone)]
struct FlushGate {
    pread: Arc<PreadBackend>,
    /// `None`: flushes pass.
    held: Arc<std::sync::Mutex<Option<Vec<IoRequest>>>>,
}

impl FlushGate {
    fn new() -> FlushGate {
        FlushGate {
            pread: Arc::new(PreadBackend::new(2).unwrap()),
            held: Arc::default(),
        }
    }

    fn hold(&self) {
        *self.held.lock().unwrap() = Some(Vec::new());
    }

    fn held(&self) -> usize {
        self.held.lock().unwrap().as_ref().map_or(0, Vec::len)
    }

    fn release(&self) {
        let flushes: IoBatch = self
            .held
            .lock()
            .unwrap()
            .take()
            .into_iter()
            .flatten()
            .collect();
        if !flushes.is_empty() {
            self.pread.submit(flushes);
        }
    }
}

impl Backend for FlushGate {
    fn name(&self) -> &str {
        "flush-gate"
    }

    fn submit(&self, batch: IoBatch) {
        let mut held = self.held.lock().unwrap();
        let Some(flushes) = held.as_mut() else {
            drop(held);
            return self.pread.submit(batch);
        };
        let (held_now, passed): (Vec<IoRequest>, Vec<IoRequest>) = batch
            .into_iter()
            .partition(|request| matches!(request.op, Op::Flush { .. }));
        flushes.extend(held_now);
        drop(held);
        if !passed.is_empty() {
            self.pread.submit(passed.into_iter().collect());
        }
    }
}

/// Waits (polling, up to a generous bound) until `done` holds: an event, not a duration.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Issue 42 (the seed-757 write simulation failure): a short write's remainder, which the
/// cache writes itself (`writeback::finish_short_write`, through `io::sync::transfer`),
/// must reach the power model like every other write. Block 1 is written with A and
/// written back (no flush); blocks 0-1 with B as one 8 KiB run cut short after block 0
/// (the cache writes block 1's B itself); a `sync_range` of page 0 submits a flush that
/// the gate holds; C is written to block 1 and written back; the flush is released and
/// the sync returns Ok. B reached the file before the flush was submitted, so after any
/// power cut block 1 holds B or C. A model that never saw the remainder kept A as block
/// 1's durable bytes, and a cut that lost C rewound the block to A.
#[test]
fn a_short_writes_remainder_is_durable_after_a_later_flush() {
    const A: u8 = 0xA1;
    const B: u8 = 0xB2;
    const C: u8 = 0xC3;
    let dir = temp_dir();
    let path = dir.path().join("short-remainder");
    std::fs::write(&path, vec![0u8; 2 * PAGE_BYTES]).unwrap();
    let mut rewound = Vec::new();
    for seed in 0..256u64 {
        let gate = FlushGate::new();
        let (backend, control) = FaultBackend::new(Box::new(gate.clone()));
        let cache = crate::Cache::builder()
            .capacity_bytes(1 << 20)
            .folio_order_max(0)
            .dirty_expire(Duration::from_secs(3600))
            .build_with_backend(Box::new(backend))
            .unwrap();
        let file = cache.open_options().write(true).open(&path).unwrap();
        let written_back = || {
            wait_until("the writeback ended", || {
                let stats = cache.stats();
                stats.dirty_pages == 0 && stats.writeback_pages == 0
            })
        };
        let page = PAGE_BYTES as u64;
        file.write_at(&[A; PAGE_BYTES], page).unwrap();
        file.writeback(page, page).unwrap();
        written_back();
        control.take_writes();

        file.write_at(&[B; 2 * PAGE_BYTES], 0).unwrap();
        control.short_writes(1);
        file.writeback(0, 2 * page).unwrap();
        written_back();
        assert_eq!(control.short_injected(), 1);
        assert_eq!(
            control.take_writes(),
            vec![(0, 2 * PAGE_BYTES)],
            "one 8 KiB run"
        );

        gate.hold();
        std::thread::scope(|s| {
            let sync = s.spawn(|| file.sync_range(0, page));
            wait_until("the sync's flush was submitted", || gate.held() == 1);
            file.write_at(&[C; PAGE_BYTES], page).unwrap();
            file.writeback(page, page).unwrap();
            written_back();
            gate.release();
            sync.join().unwrap().expect("the sync returns Ok");
        });
        drop(file);
        drop(cache);
        control.power_loss(seed).unwrap();
        let on_disk = std::fs::read(&path).unwrap();
        assert!(
            on_disk[..PAGE_BYTES].iter().all(|&b| b == B),
            "seed {seed}: block 0"
        );
        let block_1 = &on_disk[PAGE_BYTES..2 * PAGE_BYTES];
        if block_1.iter().all(|&b| b == A) {
            rewound.push(seed);
        } else {
            assert!(
                block_1.iter().all(|&b| b == B) || block_1.iter().all(|&b| b == C),
                "seed {seed}: block 1 holds bytes nobody wrote last"
            );
        }
    }
    assert!(
        rewound.is_empty(),
        "a power cut rewound block 1 to A, older than a flushed write, for seeds {rewound:?}"
    );
}

/// `hold_completions` keeps every request passed on in flight until
/// `release_completions`, however long the test takes; released completions run, and
/// a request completing after the release runs at once. Dropping the backend releases
/// what is held.
#[test]
fn held_completions_wait_for_the_release() {
    let test_file = test_file();
    let (backend, control) = fault_over_pread();
    control.hold_completions();
    let bufs: Vec<AlignedBuf> = (0..3).map(|_| AlignedBuf::new(PAGE_BYTES)).collect();
    let (sender, reports) = channel();
    let batch = bufs
        .iter()
        .enumerate()
        .map(|(i, buf)| {
            read_request(
                &test_file.file,
                i as u64 * PAGE_BYTES as u64,
                buf.frame_buf(),
                report_to(&sender, i),
            )
        })
        .collect();
    backend.submit(batch);
    let deadline = Instant::now() + Duration::from_secs(30);
    while control.held_completions() < 3 {
        assert!(Instant::now() < deadline, "the reads were never held");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        reports.try_recv().is_err(),
        "a held completion ran before the release"
    );
    control.release_completions();
    let done = wait_reports(&reports, 3);
    assert!(done
        .iter()
        .all(|(_, result)| result.as_ref().unwrap() == &PAGE_BYTES));
    assert_file_bytes(bufs[2].bytes(), 2 * PAGE_BYTES as u64);

    control.hold_completions();
    let buf = AlignedBuf::new(PAGE_BYTES);
    backend.submit(smallvec::smallvec![read_request(
        &test_file.file,
        0,
        buf.frame_buf(),
        report_to(&sender, 0),
    )]);
    while control.held_completions() < 1 {
        assert!(Instant::now() < deadline, "the read was never held");
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(backend);
    assert_eq!(
        wait_reports(&reports, 1)[0].1.as_ref().unwrap(),
        &PAGE_BYTES
    );
}
