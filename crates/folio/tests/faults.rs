//! Fault injection through the fault-injecting backend (a real backend of the library):
//! an I/O error reaches every reader waiting for the folio and is never cached; short
//! reads are completed; a cache whose folios are all pinned fails a read cleanly.

mod common;

use std::io::ErrorKind;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use folio::io::fault::{FaultBackend, FaultControl};
use folio::io::pread::PreadBackend;
use folio::Cache;

const SALT: u64 = 0xabcd;

fn faulty_cache(capacity_bytes: u64) -> (Cache, FaultControl) {
    let (backend, control) = FaultBackend::new(Box::new(PreadBackend::new(4).unwrap()));
    let cache = Cache::builder()
        .capacity_bytes(capacity_bytes)
        .alloc_wait(Duration::from_millis(300))
        .build_with_backend(Box::new(backend))
        .unwrap();
    (cache, control)
}

#[test]
fn eio_reaches_every_waiter_and_is_not_cached() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 1 << 20);
    let (cache, control) = faulty_cache(4 << 20);
    let file = Arc::new(cache.open(&path).unwrap());
    // The first page fails, slowly, so that the other readers find it in flight.
    control.fail_range(0..4096);
    control.delay(Duration::from_millis(300));
    let readers = 8;
    let barrier = Arc::new(Barrier::new(readers));
    let handles: Vec<_> = (0..readers)
        .map(|_| {
            let (file, barrier) = (file.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut buf = [0u8; 100];
                file.read_at(&mut buf, 10)
            })
        })
        .collect();
    for h in handles {
        let err = h.join().unwrap().expect_err("the read must fail");
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    }
    let s = cache.stats();
    assert!(
        s.waits_on_io >= 1,
        "some readers waited on the failing folio: {s:?}"
    );
    assert!(s.io_errors >= 1);
    assert!(control.eio_injected() >= 1);
    // The error is not cached: once the fault is gone, the same read succeeds.
    control.clear();
    let mut buf = [0u8; 100];
    assert_eq!(file.read_at(&mut buf, 10).unwrap(), 100);
    common::check_pattern(SALT, 10, &buf).unwrap();
    // And the pages around it were never affected.
    let page = file.get_page(8192).unwrap();
    common::check_pattern(SALT, 8192, &page).unwrap();
}

#[test]
fn eio_in_the_middle_of_a_run_fails_only_that_read() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 1 << 20);
    let (cache, control) = faulty_cache(4 << 20);
    let file = cache.open(&path).unwrap();
    control.fail_range(300_000..300_001);
    let mut buf = vec![0u8; 1 << 20];
    let err = file
        .read_at(&mut buf, 0)
        .expect_err("the run holding the bad byte fails");
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    control.clear();
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), 1 << 20);
    common::check_pattern(SALT, 0, &buf).unwrap();
}

#[test]
fn short_reads_are_completed() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    let len = (3 << 20) + 123;
    common::write_pattern_file(&path, SALT, len);
    let (cache, control) = faulty_cache(16 << 20);
    let file = cache.open(&path).unwrap();
    control.short_reads(1000);
    let mut buf = vec![0u8; len as usize + 10];
    let n = file
        .read_at(&mut buf, 0)
        .unwrap_or_else(|e| panic!("{e}: {:?}", cache.stats()));
    assert_eq!(n as u64, len);
    common::check_pattern(SALT, 0, &buf[..n]).unwrap();
    assert!(control.short_injected() > 0);
    let s = cache.stats();
    assert!(s.short_read_retries > 0, "{s:?}");
    assert_eq!(s.io_errors, 0);
}

#[test]
fn delayed_completions_return_the_right_bytes() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 2 << 20);
    let (cache, control) = faulty_cache(1 << 20);
    let file = Arc::new(cache.open(&path).unwrap());
    control.delay(Duration::from_millis(5));
    let handles: Vec<_> = (0..8u64)
        .map(|t| {
            let file = file.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 20_000];
                for i in 0..20u64 {
                    let offset = (t * 7919 + i * 104_729) % (2 << 20);
                    let n = file.read_at(&mut buf, offset).unwrap();
                    common::check_pattern(SALT, offset, &buf[..n]).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(control.delayed() > 0);
}

#[test]
fn an_all_pinned_cache_fails_a_read_instead_of_deadlocking() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 1 << 20);
    let capacity = folio::CAPACITY_BYTES_MIN;
    let (cache, _control) = faulty_cache(capacity);
    let file = cache.open(&path).unwrap();
    let pages = capacity / 4096;
    let pins: Vec<_> = (0..pages)
        .map(|p| file.get_page(p * 4096).unwrap())
        .collect();
    assert_eq!(cache.stats().cached_bytes, capacity);
    let started = Instant::now();
    let mut buf = [0u8; 10];
    let err = file
        .read_at(&mut buf, 900_000)
        .expect_err("no memory can be had");
    assert_eq!(err.kind(), ErrorKind::OutOfMemory, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the wait is bounded"
    );
    assert!(
        err.to_string().contains("pinned"),
        "the error says why: {err}"
    );
    // The pinned pages are intact, and once they are released the read succeeds.
    for (p, pin) in pins.iter().enumerate() {
        common::check_pattern(SALT, p as u64 * 4096, pin).unwrap();
    }
    drop(pins);
    assert_eq!(file.read_at(&mut buf, 900_000).unwrap(), 10);
    common::check_pattern(SALT, 900_000, &buf).unwrap();
    assert_eq!(cache.stats().alloc_failures, 1);
}
