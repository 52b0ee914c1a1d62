//! Eviction through the real cache: both policies recognise a refault within the
//! workingset, S3-FIFO keeps a hot set through a scan that LRU lets go, shadow entries
//! stay under their cap, and the background reclaimer keeps memory free.

mod common;

use folio::io::null::NullBackend;
use folio::{Advice, Cache, EvictionKind, File, ReadHint};

const PAGE: u64 = 4096;

/// A cache of `pages` 4 KiB folios over the null backend, without readahead: what it
/// keeps is the policy's choice alone.
fn cache(kind: EvictionKind, pages: u64) -> Cache {
    Cache::builder()
        .capacity_bytes(pages * PAGE)
        .eviction(kind)
        .folio_order_max(0)
        .readahead_max_bytes(0)
        .build_with_backend(Box::new(NullBackend::new()))
        .unwrap()
}

fn sparse_file(dir: &tempfile::TempDir, pages: u64) -> std::path::PathBuf {
    let path = dir.path().join("sparse");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(pages * PAGE)
        .unwrap();
    path
}

fn touch(file: &File, page: u64) {
    let mut buf = [0u8; 8];
    assert_eq!(file.read_at(&mut buf, page * PAGE).unwrap(), 8);
}

#[test]
fn s3fifo_recognises_a_refault_from_its_ghost() {
    let dir = common::test_dir();
    let path = sparse_file(&dir, 10_000);
    let cache = cache(EvictionKind::S3Fifo, 256);
    let file = cache.open(&path).unwrap();
    file.advise(0, 0, Advice::Random).unwrap();
    for page in 0..300 {
        touch(&file, page);
    }
    let before = cache.stats();
    assert!(before.evicted_pages >= 44, "{before:?}");
    assert_eq!(before.eviction, "s3fifo");
    // Page 5 was evicted from the small queue moments ago: it is in the ghost.
    touch(&file, 5);
    let after = cache.stats();
    assert_eq!(after.refaults, before.refaults + 1);
    assert_eq!(
        after.workingset_refaults,
        before.workingset_refaults + 1,
        "{after:?}"
    );
}

#[test]
fn lru_recognises_a_refault_within_the_refault_distance() {
    let dir = common::test_dir();
    let path = sparse_file(&dir, 10_000);
    let cache = cache(EvictionKind::TwoListLru, 256);
    let file = cache.open(&path).unwrap();
    file.advise(0, 0, Advice::Random).unwrap();
    for page in 0..256 {
        touch(&file, page);
    }
    // The older half is hit twice more: the next scan activates it, then evicts from
    // the younger half.
    for _ in 0..2 {
        for page in 0..128 {
            touch(&file, page);
        }
    }
    for page in 256..300 {
        touch(&file, page);
    }
    let before = cache.stats();
    assert_eq!(before.eviction, "lru");
    assert!(before.evicted_pages > 0);
    // Page 130 was evicted recently: its refault distance is below the active list's size.
    touch(&file, 130);
    let after = cache.stats();
    assert_eq!(after.refaults, before.refaults + 1);
    assert_eq!(
        after.workingset_refaults,
        before.workingset_refaults + 1,
        "{after:?}"
    );
    // A page evicted long ago (more evictions since than the active list holds, fewer
    // than the shadow cap) is a refault, but not within the workingset.
    for page in 300..480 {
        touch(&file, page);
    }
    let before = cache.stats();
    touch(&file, 131);
    let after = cache.stats();
    assert_eq!(after.refaults, before.refaults + 1);
    assert_eq!(after.workingset_refaults, before.workingset_refaults);
}

/// A hot set hit over and over, then a long scan of pages read once: both policies keep
/// the hot set (S3-FIFO: the scan passes through its small queue; the two-list LRU: the
/// hot set is on the active list). A plain LRU would lose all of it.
#[test]
fn both_policies_keep_a_hot_set_through_a_scan() {
    let dir = common::test_dir();
    let path = sparse_file(&dir, 100_000);
    let mut kept = Vec::new();
    for kind in [EvictionKind::S3Fifo, EvictionKind::TwoListLru] {
        let cache = cache(kind, 1000);
        let file = cache.open(&path).unwrap();
        file.advise(0, 0, Advice::Random).unwrap();
        for _ in 0..3 {
            for page in 0..500 {
                touch(&file, page);
            }
        }
        for page in 10_000..20_000 {
            touch(&file, page);
        }
        let before = cache.stats();
        for page in 0..500 {
            touch(&file, page);
        }
        let hits = cache.stats().hits - before.hits;
        kept.push(hits);
    }
    assert!(kept[0] >= 450, "S3-FIFO kept {} of 500 hot pages", kept[0]);
    assert!(
        kept[1] >= 450,
        "the two-list LRU kept {} of 500 hot pages",
        kept[1]
    );
}

/// A working set read once (so not yet proven to either policy: S3-FIFO's small queue,
/// LRU's inactive list), then a scan of ten times the cache. Read as a normal scan, it
/// pushes the working set out; read under `ReadHint::NoReuse` (per read, or the handle's
/// `Advice::NoReuse`), it evicts only its own pages and the whole working set stays. A
/// NoReuse scan over the working set's own pages does not count as a use either.
#[test]
fn a_no_reuse_scan_leaves_the_cache_to_the_working_set() {
    let dir = common::test_dir();
    let path = sparse_file(&dir, 100_000);
    for kind in [EvictionKind::S3Fifo, EvictionKind::TwoListLru] {
        let mut kept = Vec::new();
        for how in ["normal", "hint", "advice"] {
            let cache = cache(kind, 1000);
            let file = cache.open(&path).unwrap();
            file.advise(0, 0, Advice::Random).unwrap();
            for page in 0..800 {
                touch(&file, page);
            }
            let scan = cache.open(&path).unwrap();
            scan.advise(0, 0, Advice::Random).unwrap();
            if how == "advice" {
                scan.advise(0, 0, Advice::NoReuse).unwrap();
                assert_eq!(scan.hint(), ReadHint::NoReuse);
            }
            let mut buf = [0u8; 8];
            for page in (0..800).chain(10_000..20_000) {
                let n = match how {
                    "hint" => scan.read_at_hint(&mut buf, page * PAGE, ReadHint::NoReuse),
                    _ => scan.read_at(&mut buf, page * PAGE),
                };
                assert_eq!(n.unwrap(), 8);
            }
            let before = cache.stats();
            for page in 0..800 {
                touch(&file, page);
            }
            kept.push(cache.stats().hits - before.hits);
            assert!(cache.stats().cached_bytes <= 1000 * PAGE);
        }
        assert!(
            kept[0] < 400,
            "{kind:?}: a normal scan kept {} of 800",
            kept[0]
        );
        assert_eq!(
            kept[1], 800,
            "{kind:?}: a NoReuse scan (read_at_hint) kept {}",
            kept[1]
        );
        assert_eq!(
            kept[2], 800,
            "{kind:?}: a NoReuse scan (advice) kept {}",
            kept[2]
        );
    }
}

#[test]
fn shadow_entries_stay_under_their_cap() {
    let dir = common::test_dir();
    let path = sparse_file(&dir, 50_000);
    for kind in [EvictionKind::S3Fifo, EvictionKind::TwoListLru] {
        let cache = cache(kind, 64);
        let file = cache.open(&path).unwrap();
        file.advise(0, 0, Advice::Random).unwrap();
        for page in 0..20_000 {
            touch(&file, page);
        }
        let s = cache.stats();
        assert!(s.shadows <= 64, "{s:?}");
        assert!(s.shadows_dropped >= 20_000 - 64 - 64, "{s:?}");
        // The index holds few nodes: memory for shadows is bounded too.
        assert!(s.metadata_bytes < 64 * 40 + 20 * 600, "{s:?}");
    }
}

#[test]
fn the_background_reclaimer_keeps_memory_free() {
    let dir = common::test_dir();
    let path = sparse_file(&dir, 50_000);
    let cache = cache(EvictionKind::S3Fifo, 8192);
    let file = cache.open(&path).unwrap();
    file.advise(0, 0, Advice::Random).unwrap();
    for page in 0..30_000 {
        touch(&file, page);
    }
    // The thread the allocations woke gets to run when the machine lets it: wait for
    // what it must do, not for a duration (a loaded machine once ran it after 100 ms).
    let started = std::time::Instant::now();
    let s = loop {
        let s = cache.stats();
        if s.background_reclaims > 0 && s.capacity_bytes - s.cached_bytes >= 40 * PAGE {
            break s;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the background reclaimer never brought the cache above its low watermark: {s:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    assert!(s.background_reclaims > 0, "{s:?}");
}
