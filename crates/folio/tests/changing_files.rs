//! Files that change while reads of them are in flight (found in review): a read in
//! flight across a reopen that revalidates the mapping must not cache the old bytes (the
//! mapping's generation fails it); a short read that completes after `refresh_len` saw
//! the file grow must not shrink it back; a sequential read across page 2^40 must not
//! panic in the readahead state.

mod common;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use folio::io::fault::{FaultBackend, FaultControl};
use folio::io::pread::PreadBackend;
use folio::Cache;

fn faulty_cache() -> (Cache, FaultControl) {
    let (backend, control) = FaultBackend::new(Box::new(PreadBackend::new(2).unwrap()));
    let cache = Cache::builder()
        .capacity_bytes(4 << 20)
        .readahead_max_bytes(0)
        .build_with_backend(Box::new(backend))
        .unwrap();
    (cache, control)
}

/// Finding: `Mapping::invalidate(Truncate)` skips LOCKED folios. A read that fetched the
/// OLD bytes of a page before the file was rewritten, and completes after a reopen has
/// revalidated the mapping, publishes those old bytes; every later read (through the new
/// handle, issued after the reopen returned) gets stale bytes, forever.
#[test]
fn in_flight_read_survives_revalidate_and_caches_stale_bytes() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, 0xAAAA, 64 << 10);
    let (cache, control) = faulty_cache();
    let old = Arc::new(cache.open(&path).unwrap());
    // The read of page 0 is performed at once, its completion runs 500 ms later.
    control.delay(Duration::from_millis(500));
    let reader = {
        let old = old.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            old.read_at(&mut buf, 0).unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(150)); // the pread has read version 1
    std::thread::sleep(Duration::from_millis(20)); // a distinct mtime
    common::write_pattern_file(&path, 0xBBBB, 64 << 10); // rewritten in place
    control.delay(Duration::ZERO);
    let new = cache.open(&path).unwrap(); // revalidate: size same, mtime changed
    reader.join().unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(new.read_at(&mut buf, 0).unwrap(), 64);
    assert_eq!(
        common::check_pattern(0xBBBB, 0, &buf),
        Ok(()),
        "a read issued after the reopen returned bytes of the old file version"
    );
}

/// Finding: `ReadCompletion::complete`'s shrink detection compares a short read with the
/// mapping's CURRENT size. `refresh_len` grows the mapping while a read of the old last
/// (partial) page is in flight; the completion sees `offset + n < size`, concludes the
/// file shrank, and `shrink_to(min(fstat, offset + n))` rolls the size back to the OLD
/// length. The stamp keeps the new size, so a reopen does not repair it either.
#[test]
fn refresh_len_growth_is_rolled_back_by_an_in_flight_short_read() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    let old_len = 4096 + 100;
    common::write_pattern_file(&path, 7, old_len);
    let (cache, control) = faulty_cache();
    let file = Arc::new(cache.open(&path).unwrap());
    control.delay(Duration::from_millis(500));
    let reader = {
        let file = file.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 100];
            file.read_at(&mut buf, 4096).unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(150)); // the short read (100 B) is done
    let grown = old_len + 8192;
    {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(&common::pattern(7, old_len, 8192)).unwrap();
        f.sync_all().unwrap();
    }
    control.delay(Duration::ZERO);
    assert_eq!(file.refresh_len().unwrap(), grown);
    assert_eq!(reader.join().unwrap(), 100);
    let mut buf = vec![0u8; 8192];
    let n = file.read_at(&mut buf, old_len).unwrap();
    assert_eq!(
        (file.len(), n),
        (grown, 8192),
        "refresh_len said {grown} bytes, but the cache rolled the length back"
    );
}

/// Finding: `decide_on_marker` builds `start = state.end()` without the `START_BITS`
/// check its other branch has; `RaCell::update` then asserts `is_possible` and panics
/// inside `read_at`. A sequential read across page 2^40 (byte 4 PiB) of a large sparse
/// file (tmpfs, XFS) panics the reader.
#[test]
fn sequential_read_across_page_2_pow_40_does_not_panic() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("sparse");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(1 << 53).unwrap(); // 8 PiB, all hole
    drop(f);
    let cache = Cache::builder().capacity_bytes(16 << 20).build().unwrap();
    let file = cache.open(&path).unwrap();
    let mut buf = vec![0u8; 4096];
    let first = (1u64 << 40) - 2;
    for page in first..first + 8 {
        assert_eq!(file.read_at(&mut buf, page * 4096).unwrap(), 4096);
    }
}
