//! `File::read_many`: a batch of ranges read with one submission.
//!
//! What each test proves:
//! - `sixty_four_scattered_cold_ranges_are_one_submission`: 64 scattered 4 KiB ranges of a
//!   cold file go to the device as 64 reads in one `Backend::submit` (the fault backend
//!   over io_uring records each submission), every byte checked; read again, they hit
//!   and submit nothing.
//! - `odd_ranges_read_as_read_at_reads_them`: unaligned, overlapping, adjacent, empty,
//!   past-the-end and overflowing ranges give `read_at`'s results; overlapping ranges read
//!   their shared page once and adjacent ones in one read.
//! - `a_failing_range_fails_alone`: EIO on one range's pages is that range's error; the
//!   others are read.
//! - `the_async_batch_is_one_submission_and_safe_to_drop`: `read_many_async` on a
//!   current-thread tokio runtime sends 64 scattered cold ranges in one submission and
//!   gives `read_many`'s results for odd ranges; a batch dropped after its first poll
//!   leaves its reads to land in the cache (read again: no submission, every byte right)
//!   and nothing parked or pinned.
//! - `batches_race_readers_and_eviction`: threads reading batches (`read_many` and
//!   `read_many_async`), threads reading with `read_at` and a thread dropping the file's
//!   pages, over a cache an eighth of the file: every byte of every range checked.

mod common;

use std::future::Future;
use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{check_pattern, test_dir, write_pattern_file};
use folio::io::fault::{FaultBackend, FaultControl};
use folio::io::pread::PreadBackend;
use folio::io::uring::UringBackend;
use folio::io::Backend;
use folio::{Advice, Cache};

const SALT: u64 = 0x5eed_0017;

fn recording_cache(capacity_bytes: u64) -> (Cache, FaultControl) {
    // io_uring where the kernel allows it (the batch is one io_uring_enter), else the pool.
    let inner: Box<dyn Backend> = match UringBackend::new(64) {
        Ok(uring) => Box::new(uring),
        Err(_) => Box::new(PreadBackend::new(4).unwrap()),
    };
    let (backend, control) = FaultBackend::new(inner);
    let cache = Cache::builder()
        .capacity_bytes(capacity_bytes)
        .alloc_wait(Duration::from_millis(500))
        .build_with_backend(Box::new(backend))
        .unwrap();
    (cache, control)
}

/// A pattern file of `len` bytes in a fresh directory, opened through a
/// `recording_cache` of `capacity_bytes`. The directory lives as long as the returned guard.
fn recorded_file(
    len: u64,
    capacity_bytes: u64,
) -> (tempfile::TempDir, Cache, FaultControl, folio::File) {
    let dir = test_dir();
    let path = dir.path().join("f");
    write_pattern_file(&path, SALT, len);
    let (cache, control) = recording_cache(capacity_bytes);
    let file = cache.open(&path).unwrap();
    (dir, cache, control, file)
}

/// A batch for `read_many`: each offset with its buffer.
fn batch(offsets: impl Iterator<Item = u64>, bufs: &mut [Vec<u8>]) -> Vec<(u64, &mut [u8])> {
    offsets
        .zip(bufs.iter_mut().map(Vec::as_mut_slice))
        .collect()
}

#[test]
fn sixty_four_scattered_cold_ranges_are_one_submission() {
    let (_dir, cache, control, file) = recorded_file(64 << 20, 32 << 20);
    control.take_read_batches();
    control.take_requests();

    // Every 256th page, from the back: scattered, not sorted.
    let offsets = scattered(1);
    let mut bufs = vec![vec![0u8; 4096]; 64];
    let mut reads = batch(offsets.iter().copied(), &mut bufs);
    let results = file.read_many(&mut reads);
    for ((offset, buf), result) in reads.iter().zip(&results) {
        assert_eq!(*result.as_ref().unwrap(), 4096, "at {offset}");
        check_pattern(SALT, *offset, buf).unwrap();
    }
    assert_eq!(
        control.take_read_batches(),
        vec![64],
        "one submission of 64 reads"
    );
    let requests = control.take_requests();
    assert_eq!(requests.len(), 64);
    assert!(requests.iter().all(|&(_, n)| n == 4096), "{requests:?}");
    assert_eq!(cache.stats().misses, 64);

    // Cached now: nothing is submitted.
    let results = file.read_many(&mut reads);
    assert!(results.iter().all(|r| *r.as_ref().unwrap() == 4096));
    assert!(control.take_read_batches().is_empty());
}

/// 64 scattered 4 KiB ranges, every 256th page from `first` on, from the back.
fn scattered(first: u64) -> Vec<u64> {
    (0..64u64).rev().map(|i| (first + i * 256) * 4096).collect()
}

#[test]
fn the_async_batch_is_one_submission_and_safe_to_drop() {
    let len: u64 = 64 << 20;
    let (_dir, cache, control, file) = recorded_file(len, 32 << 20);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    control.take_read_batches();
    control.take_requests();

    let offsets = scattered(1);
    let mut bufs = vec![vec![0u8; 4096]; 64];
    let mut reads = batch(offsets.iter().copied(), &mut bufs);
    let results = runtime.block_on(file.read_many_async(&mut reads));
    assert_eq!(results.len(), 64);
    for (&offset, (result, buf)) in offsets.iter().zip(results.iter().zip(&bufs)) {
        assert_eq!(*result.as_ref().unwrap(), 4096, "at {offset}");
        check_pattern(SALT, offset, buf).unwrap();
    }
    assert_eq!(
        control.take_read_batches(),
        vec![64],
        "one submission of 64 reads"
    );
    control.take_requests();

    // Odd ranges: read_many's results, one submission.
    let ranges: Vec<(u64, usize)> = vec![
        (100, 5000),
        (len - 100, 4096),
        (len + 10, 10),
        (u64::MAX - 5, 100),
    ];
    let mut bufs: Vec<Vec<u8>> = ranges.iter().map(|&(_, n)| vec![0u8; n]).collect();
    let mut reads = batch(ranges.iter().map(|&(o, _)| o), &mut bufs);
    let results = runtime.block_on(file.read_many_async(&mut reads));
    assert_eq!(*results[0].as_ref().unwrap(), 5000);
    check_pattern(SALT, 100, &bufs[0]).unwrap();
    assert_eq!(*results[1].as_ref().unwrap(), 100);
    check_pattern(SALT, len - 100, &bufs[1][..100]).unwrap();
    assert_eq!(*results[2].as_ref().unwrap(), 0);
    assert_eq!(
        results[3].as_ref().unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(control.take_read_batches().len(), 1, "one submission");
    control.take_requests();

    // Dropped after its first poll: the batch is submitted, then nobody waits for it.
    let offsets = scattered(2);
    let mut bufs = vec![vec![0u8; 4096]; 64];
    let mut reads = batch(offsets.iter().copied(), &mut bufs);
    {
        let mut batch = std::pin::pin!(file.read_many_async(&mut reads));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let _ = batch.as_mut().poll(&mut cx);
    }
    drop(reads);
    assert_eq!(
        control.take_read_batches(),
        vec![64],
        "submitted before the drop"
    );
    // What it submitted lands in the cache: read again, nothing is submitted.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut bufs = vec![vec![0u8; 4096]; 64];
    let mut reads = batch(offsets.iter().copied(), &mut bufs);
    let results = file.read_many(&mut reads);
    for (&offset, (result, buf)) in offsets.iter().zip(results.iter().zip(&bufs)) {
        assert_eq!(*result.as_ref().unwrap(), 4096, "at {offset}");
        check_pattern(SALT, offset, buf).unwrap();
    }
    assert!(
        control.take_read_batches().is_empty(),
        "read by the dropped batch"
    );
    while cache.stats().futures_parked != 0 {
        assert!(Instant::now() < deadline, "a waker left parked");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Nothing stays pinned: dropping the whole file leaves nothing cached.
    file.advise(0, len, Advice::DontNeed).unwrap();
    let s = cache.stats();
    assert_eq!(
        s.cached_bytes, 0,
        "a dropped batch kept a folio pinned: {s:?}"
    );
}

#[test]
fn odd_ranges_read_as_read_at_reads_them() {
    let len: u64 = (4 << 20) + 1234;
    let (_dir, _cache, control, file) = recorded_file(len, 32 << 20);
    control.take_read_batches();
    control.take_requests();

    let ranges: Vec<(u64, usize)> = vec![
        (100, 5000),         // unaligned, two pages (0-1)
        (4096 + 17, 3000),   // overlaps the first's second page
        (40 * 4096, 4096),   // pages 40..41 and the adjacent
        (41 * 4096, 8192),   // 41..43: one read with the one before
        (len - 100, 4096),   // short at the end
        (len + 10, 10),      // past the end
        (7, 0),              // empty
        (u64::MAX - 5, 100), // overflows
    ];
    let mut bufs: Vec<Vec<u8>> = ranges.iter().map(|&(_, n)| vec![0u8; n]).collect();
    let mut reads = batch(ranges.iter().map(|&(o, _)| o), &mut bufs);
    let results = file.read_many(&mut reads);
    let expected: [Option<usize>; 8] = [
        Some(5000),
        Some(3000),
        Some(4096),
        Some(8192),
        Some(100),
        Some(0),
        Some(0),
        None,
    ];
    for (i, (result, want)) in results.iter().zip(expected).enumerate() {
        match want {
            Some(n) => {
                assert_eq!(*result.as_ref().unwrap(), n, "range {i}");
                check_pattern(SALT, reads[i].0, &reads[i].1[..n]).unwrap();
            }
            None => assert_eq!(result.as_ref().unwrap_err().kind(), ErrorKind::InvalidInput),
        }
    }
    assert_eq!(control.take_read_batches().len(), 1, "one submission");
    let mut requests = control.take_requests();
    requests.sort_unstable();
    // Pages 0-1 once, 40-42 in one read, the last page once.
    assert_eq!(
        requests,
        vec![(0, 8192), (40 * 4096, 3 * 4096), (len / 4096 * 4096, 4096)]
    );
}

#[test]
fn a_failing_range_fails_alone() {
    let (_dir, _cache, control, file) = recorded_file(1 << 20, 16 << 20);
    control.fail_range(20 * 4096..21 * 4096);
    let mut a = vec![0u8; 4096];
    let mut b = vec![0u8; 4096];
    let mut c = vec![0u8; 4096];
    let mut reads: Vec<(u64, &mut [u8])> = vec![
        (0, a.as_mut_slice()),
        (20 * 4096, b.as_mut_slice()),
        (200 * 4096, c.as_mut_slice()),
    ];
    let results = file.read_many(&mut reads);
    assert_eq!(*results[0].as_ref().unwrap(), 4096);
    assert_eq!(
        results[1].as_ref().unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    assert_eq!(*results[2].as_ref().unwrap(), 4096);
    check_pattern(SALT, 0, reads[0].1).unwrap();
    check_pattern(SALT, 200 * 4096, reads[2].1).unwrap();
    // The error is not cached: once the fault is gone, the range reads.
    control.clear();
    let results = file.read_many(&mut reads[1..2]);
    assert_eq!(*results[0].as_ref().unwrap(), 4096);
    check_pattern(SALT, 20 * 4096, reads[1].1).unwrap();
}

/// xorshift64*: a deterministic stream per thread.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

#[test]
fn batches_race_readers_and_eviction() {
    let dir = test_dir();
    let path = dir.path().join("f");
    let len: u64 = 64 << 20;
    write_pattern_file(&path, SALT, len);
    let cache = Cache::builder().capacity_bytes(8 << 20).build().unwrap();
    let file = Arc::new(cache.open(&path).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut threads = Vec::new();
    for t in 0..12u64 {
        let (file, stop) = (file.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut rng = 0x9E37_79B9 ^ ((t + 1) * 0x1234_5678_9ABC);
            let mut batches = 0u64;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            while !stop.load(Ordering::Relaxed) {
                match t % 4 {
                    // Batches of 1-64 ranges of 1 B-20 KiB, some of them overlapping:
                    // `read_many`, and `read_many_async` on the thread's own runtime.
                    0 | 1 => {
                        let n = 1 + next(&mut rng) % 64;
                        let ranges: Vec<(u64, usize)> = (0..n)
                            .map(|_| {
                                let size = 1 + (next(&mut rng) % (20 << 10)) as usize;
                                (next(&mut rng) % (len - size as u64), size)
                            })
                            .collect();
                        let mut bufs: Vec<Vec<u8>> =
                            ranges.iter().map(|&(_, s)| vec![0u8; s]).collect();
                        let mut reads = batch(ranges.iter().map(|&(o, _)| o), &mut bufs);
                        let results = if t % 4 == 0 {
                            file.read_many(&mut reads)
                        } else {
                            runtime.block_on(file.read_many_async(&mut reads))
                        };
                        for (i, r) in results.into_iter().enumerate() {
                            let (offset, size) = ranges[i];
                            assert_eq!(r.expect("a batch read"), size);
                            if let Err(at) = check_pattern(SALT, offset, reads[i].1) {
                                panic!("wrong byte at {at} (range {offset}+{size})");
                            }
                        }
                        batches += 1;
                    }
                    // Single reads of the same file.
                    2 => {
                        let size = 1 + (next(&mut rng) % 8192) as usize;
                        let offset = next(&mut rng) % (len - size as u64);
                        let mut buf = vec![0u8; size];
                        assert_eq!(file.read_at(&mut buf, offset).unwrap(), size);
                        check_pattern(SALT, offset, &buf).unwrap();
                    }
                    // Dropping ranges of cached pages under the readers.
                    _ => {
                        let offset = next(&mut rng) % len;
                        file.advise(offset, 1 << 20, Advice::DontNeed).unwrap();
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
                if Instant::now() > deadline {
                    stop.store(true, Ordering::Relaxed);
                }
            }
            batches
        }));
    }
    let batches: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(batches > 20, "{batches} batches");
    let s = cache.stats();
    assert!(s.cached_bytes <= s.capacity_bytes, "{s:?}");
}
