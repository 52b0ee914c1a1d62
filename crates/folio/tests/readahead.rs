//! Readahead through the real cache: the windows a sequential reader's I/O follows (seen
//! through the fault backend's request log), the advice, forced readahead that never
//! duplicates work, and 32 threads sharing one handle: every page inserted exactly once,
//! every byte checked, the window never impossible.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use folio::io::fault::{FaultBackend, FaultControl};
use folio::io::pread::PreadBackend;
use folio::{Advice, BackendKind, Cache};

const SALT: u64 = 0x7777;
const KIB: u64 = 1024;

fn recorded_cache(capacity_bytes: u64, readahead_max_bytes: u64) -> (Cache, FaultControl) {
    let (backend, control) = FaultBackend::new(Box::new(PreadBackend::new(4).unwrap()));
    let cache = Cache::builder()
        .capacity_bytes(capacity_bytes)
        .readahead_max_bytes(readahead_max_bytes)
        .build_with_backend(Box::new(backend))
        .unwrap();
    (cache, control)
}

#[test]
fn a_sequential_reader_issues_one_read_per_window_and_the_windows_ramp() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 4 << 20);
    let (cache, control) = recorded_cache(64 << 20, 128 * KIB);
    let file = cache.open(&path).unwrap();
    let mut buf = [0u8; 4096];
    for offset in (0..(1 << 20)).step_by(4096) {
        assert_eq!(file.read_at(&mut buf, offset).unwrap(), 4096);
        common::check_pattern(SALT, offset, &buf).unwrap();
    }
    let requests = control.take_requests();
    let sizes_kib: Vec<u64> = requests.iter().map(|&(_, len)| len as u64 / KIB).collect();
    // The kernel's sequence for a 128 KiB maximum (Linux 6.18, traced with cachestat in
    // `readahead_trace.rs`): windows end on multiples of their folios, so the ramp runs
    // 16, 32, 16, 32, 32, 64, 64, 128, 128, ... KiB, ending at pages 4, 12, 16, 24, 32,
    // 48, 64, 96, 128, ...
    assert_eq!(
        &sizes_kib[..9],
        &[16, 32, 16, 32, 32, 64, 64, 128, 128],
        "{requests:?}"
    );
    assert!(sizes_kib[7..].iter().all(|&s| s == 128));
    // One read per window, back to back.
    let mut expect = 0;
    for &(offset, len) in &requests {
        assert_eq!(offset, expect, "windows are contiguous: {requests:?}");
        expect += len as u64;
    }
    let s = cache.stats();
    assert_eq!(s.readahead_sync, 1, "one window opened on the first miss");
    assert_eq!(
        s.readahead_async as usize,
        requests.len() - 1,
        "all others async"
    );
    assert_eq!(s.misses, 1);
    // The marker of the first window sits on the page after the one read.
    let w = file.readahead_window();
    assert_eq!(w.size_bytes, 128 * KIB);
    assert_eq!(w.async_bytes, 128 * KIB);
}

#[test]
fn with_an_8_mib_maximum_windows_ramp_to_2_mib_folios() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 32 << 20);
    let (cache, control) = recorded_cache(128 << 20, 8 << 20);
    let file = cache.open(&path).unwrap();
    let mut buf = vec![0u8; 8192];
    for offset in (0..(24 << 20)).step_by(8192) {
        file.read_at(&mut buf, offset).unwrap();
        common::check_pattern(SALT, offset, &buf).unwrap();
    }
    let requests = control.take_requests();
    // Each read is at most 2 MiB (one order-9 folio); the windows reach 8 MiB.
    assert!(requests.iter().all(|&(_, len)| len <= 2 << 20));
    // Windows end on multiples of their folios: once they are 2 MiB, so are the reads'
    // offsets (the kernel's large folios, each on a multiple of its size).
    assert!(
        requests
            .iter()
            .filter(|&&(_, len)| len == 2 << 20)
            .all(|&(offset, _)| offset % (2 << 20) == 0),
        "{requests:?}"
    );
    assert!(
        requests.iter().filter(|&&(_, len)| len == 2 << 20).count() >= 8,
        "{requests:?}"
    );
    assert_eq!(file.readahead_window().size_bytes, 8 << 20);
}

/// A read that touches the marked folio before its marker page ramps the window as the
/// kernel does, from the window's size: 400 KiB reads at an 8 MiB maximum open a window of
/// 256 pages read as 64-page folios, its marker on page 100, inside the folio at 64, which
/// the first read touches at page 64. (Taken for another stream's marker, the next window
/// ramped from the 192 pages after that folio's head: 384 pages where the kernel reads 512.)
#[test]
fn a_read_that_reaches_the_marked_folio_before_its_marker_ramps_the_window() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 8 << 20);
    let (cache, _control) = recorded_cache(128 << 20, 8 << 20);
    let file = cache.open(&path).unwrap();
    let mut buf = vec![0u8; 100 * 4096];
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), buf.len());
    common::check_pattern(SALT, 0, &buf).unwrap();
    let w = file.readahead_window();
    assert_eq!(
        (
            w.start_bytes / 4096,
            w.size_bytes / 4096,
            w.async_bytes / 4096
        ),
        (256, 512, 512),
        "the second window: the kernel's ramp of 256 pages"
    );
    assert_eq!(cache.stats().readahead_async, 1);
}

#[test]
fn the_window_stays_within_an_eighth_of_the_cache_and_the_state_word_limit() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 1 << 20);
    let max_of = |cache: &Cache| cache.open(&path).unwrap().readahead_window().max_bytes;

    // The default (16 MiB) on a cache that holds it 8 times over; Sequential doubles it.
    let (big, _) = recorded_cache(256 << 20, folio::READAHEAD_MAX_BYTES_DEFAULT);
    assert_eq!(max_of(&big), 16 << 20);
    let file = big.open(&path).unwrap();
    file.advise(0, 0, Advice::Sequential).unwrap();
    assert_eq!(file.readahead_window().max_bytes, 32 << 20);
    file.set_readahead_max_bytes(1 << 30);
    assert_eq!(
        file.readahead_window().max_bytes,
        32 << 20,
        "the word's limit"
    );

    // A 16 MiB cache: windows of at most 2 MiB, whatever is asked.
    let (small, _) = recorded_cache(16 << 20, 64 << 20);
    assert_eq!(max_of(&small), 2 << 20);
    let file = small.open(&path).unwrap();
    file.advise(0, 0, Advice::Sequential).unwrap();
    assert_eq!(file.readahead_window().max_bytes, 2 << 20);
    file.set_readahead_max_bytes(1 << 20);
    assert_eq!(file.readahead_window().max_bytes, 1 << 20);

    // A 24 MiB cache: an eighth is 3 MiB, rounded down to a power of two.
    let (odd, _) = recorded_cache(24 << 20, 64 << 20);
    assert_eq!(max_of(&odd), 2 << 20);
}

#[test]
fn advice_random_turns_readahead_off() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 1 << 20);
    let (cache, control) = recorded_cache(16 << 20, 128 * KIB);
    let file = cache.open(&path).unwrap();
    file.advise(0, 0, Advice::Random).unwrap();
    let mut buf = [0u8; 4096];
    for offset in (0..(256 * KIB)).step_by(4096) {
        file.read_at(&mut buf, offset).unwrap();
    }
    let requests = control.take_requests();
    assert_eq!(requests.len(), 64, "one read per page: {requests:?}");
    assert!(requests.iter().all(|&(_, len)| len == 4096));
    assert_eq!(cache.stats().readahead_pages, 0);
    // Back to normal: readahead resumes on the next sequential miss.
    file.advise(0, 0, Advice::Normal).unwrap();
    file.read_at(&mut buf, 256 * KIB).unwrap();
    file.read_at(&mut buf, 260 * KIB).unwrap();
    assert!(cache.stats().readahead_pages > 0);
}

/// Hits record nothing in the handle (no shared store per hit), so a reader that scans
/// cached pages and then misses is recognised as sequential by the cached run before the
/// miss: it gets a window, where a miss after no cached pages reads just its page.
#[test]
fn a_miss_after_a_cached_run_opens_a_window() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 4 << 20);
    let (cache, control) = recorded_cache(64 << 20, 128 * KIB);
    // Another handle caches the first 64 KiB (pages 0..16) and nothing else.
    let warm = cache.open(&path).unwrap();
    warm.readahead(0, 64 * KIB).unwrap();
    let mut buf = [0u8; 4096];
    warm.read_at(&mut buf, 60 * KIB).unwrap();
    drop(warm);
    control.take_requests();

    // A random miss far from any cached page reads just its page.
    let file = cache.open(&path).unwrap();
    file.read_at(&mut buf, 2 << 20).unwrap();
    common::check_pattern(SALT, 2 << 20, &buf).unwrap();
    assert_eq!(control.take_requests(), vec![(2 << 20, 4096)]);

    // Scanning the cached pages is all hits and no I/O; the first miss after them opens
    // a window at page 16 that reaches past the page asked for.
    for offset in (0..64 * KIB).step_by(4096) {
        file.read_at(&mut buf, offset).unwrap();
        common::check_pattern(SALT, offset, &buf).unwrap();
    }
    assert!(control.take_requests().is_empty());
    let sync_before = cache.stats().readahead_sync;
    file.read_at(&mut buf, 64 * KIB).unwrap();
    common::check_pattern(SALT, 64 * KIB, &buf).unwrap();
    let requests = control.take_requests();
    assert_eq!(requests[0].0, 64 * KIB, "{requests:?}");
    assert!(requests[0].1 > 4096, "a window, not one page: {requests:?}");
    assert_eq!(cache.stats().readahead_sync, sync_before + 1);
}

#[test]
fn advice_dontneed_empties_the_range_and_willneed_fills_it() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 8 << 20);
    // 64 MiB: large enough for 2 MiB folios (a cache keeps 16 of its largest).
    let (cache, control) = recorded_cache(64 << 20, 128 * KIB);
    let file = cache.open(&path).unwrap();
    // WillNeed reads 4 MiB ahead as two 2 MiB folios; reading it then costs no I/O.
    file.advise(0, 4 << 20, Advice::WillNeed).unwrap();
    let mut buf = vec![0u8; 4 << 20];
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), 4 << 20);
    common::check_pattern(SALT, 0, &buf).unwrap();
    assert_eq!(control.take_requests().len(), 2);
    assert_eq!(cache.stats().cached_bytes, 4 << 20);
    // DontNeed over all of it drops the folio nobody holds and keeps the pinned one.
    let pinned = file.get_page(3 << 20).unwrap();
    assert_eq!(pinned.offset_bytes(), 2 << 20);
    file.advise(0, 4 << 20, Advice::DontNeed).unwrap();
    let s = cache.stats();
    assert_eq!(s.cached_bytes, 2 << 20, "the unpinned folio went: {s:?}");
    assert_eq!(s.invalidated_pages, 512);
    common::check_pattern(SALT, pinned.offset_bytes(), &pinned).unwrap();
    // The dropped range is read again from the file; the pinned one is still a hit.
    assert_eq!(file.read_at(&mut buf[..4096], 1 << 20).unwrap(), 4096);
    common::check_pattern(SALT, 1 << 20, &buf[..4096]).unwrap();
    assert!(
        !control.take_requests().is_empty(),
        "a dropped page is read again"
    );
    assert_eq!(file.read_at(&mut buf[..4096], 3 << 20).unwrap(), 4096);
    assert!(
        control.take_requests().is_empty(),
        "the pinned folio stayed cached"
    );
    drop(pinned);
}

#[test]
fn forced_readahead_returns_at_once_and_never_duplicates_work() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 8 << 20);
    let (cache, control) = recorded_cache(32 << 20, 128 * KIB);
    // Every read stays in flight until the release below: a hint that waited for one
    // would never return (a lever, not a duration a loaded machine can outlast).
    control.hold_completions();
    let file = cache.open(&path).unwrap();
    std::thread::scope(|s| {
        let (returned, wait) = std::sync::mpsc::channel();
        let file = &file;
        s.spawn(move || {
            file.readahead(0, 5 << 20).unwrap();
            returned.send(()).unwrap();
        });
        let hint = wait.recv_timeout(std::time::Duration::from_secs(30));
        if hint.is_err() {
            control.release_completions();
        }
        assert!(hint.is_ok(), "a hint does not wait for its reads");
    });
    let first = control.take_requests();
    assert_eq!(
        first.iter().map(|&(_, len)| len as u64).sum::<u64>(),
        5 << 20
    );
    assert!(
        first.iter().all(|&(_, len)| len <= 2 << 20),
        "chunks of at most 2 MiB"
    );
    // The same range again, while in flight (held) and after: nothing new.
    file.readahead(0, 5 << 20).unwrap();
    file.readahead(1 << 20, 1 << 20).unwrap();
    assert!(control.take_requests().is_empty());
    control.release_completions();
    let mut buf = vec![0u8; 5 << 20];
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), 5 << 20);
    common::check_pattern(SALT, 0, &buf).unwrap();
    file.readahead(0, 5 << 20).unwrap();
    assert!(control.take_requests().is_empty());
    assert_eq!(cache.stats().pages_inserted, (5 << 20) / 4096);
    // Past the end of the file, and an overflowing range.
    file.readahead(100 << 20, 1 << 20).unwrap();
    assert!(control.take_requests().is_empty());
    assert_eq!(
        file.readahead(u64::MAX, 2).unwrap_err().kind(),
        std::io::ErrorKind::InvalidInput
    );
}

/// 32 threads share ONE handle and each scans the same 256 MiB file from the start in
/// 8 KiB records: every page is inserted exactly once, every byte is checked, and a
/// watcher asserts the handle's window is never impossible.
#[test]
fn thirty_two_threads_sharing_one_handle_insert_each_page_once() {
    const FILE_BYTES: u64 = 256 << 20;
    const THREADS: usize = 32;
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, FILE_BYTES);
    let cache = Cache::builder()
        .capacity_bytes(FILE_BYTES + (64 << 20))
        .backend(BackendKind::IoUring)
        .build()
        .unwrap();
    let file = Arc::new(cache.open(&path).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (file, stop) = (file.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut looks = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let w = file.readahead_window();
                assert!(w.size_bytes <= w.max_bytes, "window above max: {w:?}");
                assert!(
                    w.async_bytes <= w.size_bytes,
                    "async part above the window: {w:?}"
                );
                assert!(
                    w.size_bytes == 0 || w.start_bytes < FILE_BYTES,
                    "window past the end: {w:?}"
                );
                looks += 1;
                std::thread::yield_now();
            }
            looks
        })
    };
    let barrier = Arc::new(Barrier::new(THREADS));
    let readers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (file, barrier) = (file.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut buf = vec![0u8; 8192];
                let mut offset = 0;
                while offset < FILE_BYTES {
                    let n = file.read_at(&mut buf, offset).unwrap();
                    assert_eq!(n, 8192);
                    common::check_pattern(SALT, offset, &buf)
                        .unwrap_or_else(|at| panic!("wrong byte at {at}"));
                    offset += n as u64;
                }
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let looks = watcher.join().unwrap();
    let s = cache.stats();
    println!("{looks} window checks; {s:?}");
    assert_eq!(
        s.pages_inserted,
        FILE_BYTES / 4096,
        "every page inserted exactly once"
    );
    assert_eq!(s.evicted_pages, 0);
    assert!(s.readahead_async > 0);
    assert_eq!(s.io_bytes, FILE_BYTES, "every byte read from the file once");
}

/// Sixteen sequential streams through a cache that holds a quarter of one window of each
/// at the default maximum (issue 16: fio's cold `read` job, 16 jobs): each thread scans
/// its own 64 MiB file in 16 KiB reads through one 64 MiB cache built with the default
/// options. The windows' sum must not thrash the cache: readahead pages evicted before
/// anyone read them stay under a tenth of the pages read ahead, so the files are read from
/// disk about once. Every byte is checked.
#[test]
fn sixteen_streams_through_a_small_cache_do_not_thrash_its_readahead() {
    const STREAMS: u64 = 16;
    const FILE_BYTES: u64 = 64 << 20;
    const READ_BYTES: usize = 16 << 10;
    let dir = common::test_dir();
    let paths: Vec<_> = (0..STREAMS)
        .map(|i| {
            let path = dir.path().join(format!("f{i}"));
            common::write_pattern_file(&path, SALT + i, FILE_BYTES);
            path
        })
        .collect();
    let cache = Cache::builder().capacity_bytes(64 << 20).build().unwrap();
    let barrier = Arc::new(Barrier::new(STREAMS as usize));
    std::thread::scope(|scope| {
        for (i, path) in paths.iter().enumerate() {
            let (cache, barrier) = (&cache, barrier.clone());
            scope.spawn(move || {
                let file = cache.open(path).unwrap();
                let salt = SALT + i as u64;
                let mut buf = vec![0u8; READ_BYTES];
                barrier.wait();
                let mut offset = 0;
                while offset < FILE_BYTES {
                    let n = file.read_at(&mut buf, offset).unwrap();
                    assert_eq!(n, READ_BYTES);
                    common::check_pattern(salt, offset, &buf)
                        .unwrap_or_else(|at| panic!("file {i}: wrong byte at {at}"));
                    offset += n as u64;
                }
            });
        }
    });
    let s = cache.stats();
    println!(
        "readahead_pages={} readahead_wasted_pages={} io_bytes={} misses={} waits_on_io={}",
        s.readahead_pages, s.readahead_wasted_pages, s.io_bytes, s.misses, s.waits_on_io
    );
    assert!(s.readahead_pages > 0, "{s:?}");
    let data_bytes = STREAMS * FILE_BYTES;
    assert!(
        s.io_bytes < data_bytes + data_bytes / 4,
        "{} bytes read from disk for {data_bytes} ({s:?})",
        s.io_bytes
    );
    assert!(
        s.readahead_wasted_pages * 10 < s.readahead_pages,
        "readahead thrashed: {} of {} pages read ahead were evicted unread ({s:?})",
        s.readahead_wasted_pages,
        s.readahead_pages
    );
}
