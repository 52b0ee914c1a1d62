//! Regressions: each test replays something the simulation or a fuzz target found, and
//! the inputs saved for the fuzz targets on the public API replay through the very code
//! of those targets (`fuzz/src/`, included here), so that `cargo test` runs them without
//! a fuzzer. (The targets on private parts replay in `folio::fuzzing`'s unit tests.)

mod common;

#[path = "../../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod fuzz_bodies;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use folio::{Cache, EvictionKind};

const PAGE: u64 = 4096;

/// The fuzz bodies' pattern files go to a temporary directory of this test run.
fn fuzz_files() {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(common::test_dir);
    fuzz_bodies::files::use_dir(dir.path().join("fuzz-files"));
}

/// The saved inputs of a fuzz target: `fuzz/regressions/<target>/*` (crashes found and
/// fixed) and `fuzz/seeds/<target>/*`.
fn saved_inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut found = Vec::new();
    for kind in ["regressions", "seeds"] {
        let Ok(entries) = std::fs::read_dir(root.join(kind).join(target)) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.path().is_file() {
                found.push((entry.path(), std::fs::read(entry.path()).unwrap()));
            }
        }
    }
    found.sort();
    found
}

/// Pseudo-random inputs (xorshift), so that the bodies run in `cargo test` beyond the
/// saved inputs.
fn random_inputs(count: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count)
        .map(|_| {
            let len = (next() % 400) as usize;
            (0..len).map(|_| next() as u8).collect()
        })
        .collect()
}

#[test]
fn fuzz_api_inputs_replay() {
    fuzz_files();
    for (path, bytes) in saved_inputs("api") {
        eprintln!("replaying {}", path.display());
        fuzz_bodies::api::run(&bytes);
    }
    for bytes in random_inputs(150, 0xa91) {
        fuzz_bodies::api::run(&bytes);
    }
}

#[test]
fn fuzz_readahead_inputs_replay() {
    fuzz_files();
    for (path, bytes) in saved_inputs("readahead") {
        eprintln!("replaying {}", path.display());
        fuzz_bodies::readahead::run(&bytes);
    }
    for bytes in random_inputs(100, 0x4ead) {
        fuzz_bodies::readahead::run(&bytes);
    }
}

/// Found by the simulation (seed 96: 24-page cache, S3-FIFO, threads holding pages
/// across reads): when every folio of S3-FIFO's small queue is pinned and the small queue
/// holds at least its target (10% of the cache), reclaim only ever looked at the small
/// queue, so a read failed with `OutOfMemory` while the main queue was full of folios
/// nobody held. Fixed: `isolate` sets busy folios aside for the rest of its pass, and an
/// exhausted small queue sends it to main (`eviction::s3fifo`).
#[test]
fn s3fifo_reclaims_from_main_when_every_small_folio_is_pinned() {
    // 29 folios hit twice go to main when small is evicted from; the last three frames,
    // pinned, are all small holds (3 pages, its target).
    read_with_the_cold_queue_pinned(EvictionKind::S3Fifo, 32, 29);
}

/// Found by the simulation (seed 2062: 16-page cache, two-list LRU, four threads pinning
/// up to half of it): when every folio of the inactive list is pinned and the active list
/// is no larger than the inactive one, reclaim only ever looked at the inactive list, so a
/// read failed with `OutOfMemory` while the active list held folios nobody held. Fixed:
/// `isolate` sets busy folios aside for the rest of its pass, and deactivates when the
/// inactive list has nothing left to scan (`eviction::lru`).
#[test]
fn lru_deactivates_when_every_inactive_folio_is_pinned() {
    // 8 folios hit twice are activated; the other 8 frames, pinned, are all inactive holds.
    read_with_the_cold_queue_pinned(EvictionKind::TwoListLru, 16, 8);
}

/// A cache of `frames` one-page folios: pages `0..hot` read three times (so the policy
/// promotes them), the remaining frames filled by pinned pages (so the queue new folios
/// enter holds only busy ones), then eight reads of new pages, each of which must evict a
/// promoted folio instead of failing with `OutOfMemory`.
fn read_with_the_cold_queue_pinned(eviction: EvictionKind, frames: u64, hot: u64) {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, 7, 64 * PAGE);
    let cache = Cache::builder()
        .capacity_bytes(frames * PAGE)
        .folio_order_max(0)
        .readahead_max_bytes(0)
        .eviction(eviction)
        .alloc_wait(Duration::from_millis(200))
        .build()
        .unwrap();
    let file = cache.open(&path).unwrap();
    let mut buf = vec![0u8; PAGE as usize];
    for _ in 0..3 {
        for page in 0..hot {
            file.read_at(&mut buf, page * PAGE).unwrap();
        }
    }
    let pins: Vec<_> = (hot..frames)
        .map(|page| file.get_page(page * PAGE).unwrap())
        .collect();
    assert_eq!(cache.stats().cached_bytes, frames * PAGE);
    for page in 40..48 {
        let n = file
            .read_at(&mut buf, page * PAGE)
            .unwrap_or_else(|e| panic!("read of page {page}: {e}; {:?}", cache.stats()));
        assert_eq!(n, PAGE as usize);
        common::check_pattern(7, page * PAGE, &buf).unwrap();
    }
    drop(pins);
}

/// Waits (up to 10 s) until `cache` has nothing dirty or under writeback.
fn wait_written_back(cache: &Cache) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = cache.stats();
        if s.dirty_pages == 0 && s.writeback_pages == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "writeback never ended: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `tests/write_simulation.rs` (seeds 93 and 99, issue 14): writeback writes a file's tail
/// block whole, so the file on disk grows to a multiple of 4 KiB until a sync cuts it to
/// the logical size. A closed file whose pages were then all evicted was forgotten with
/// its logical size, and the next open took the padded length from `fstat`: reads
/// returned zeros past the end that was written.
#[test]
fn a_written_file_forgotten_after_writeback_keeps_its_length() {
    let dir = common::test_dir();
    let path = dir.path().join("written");
    let other = dir.path().join("other");
    common::write_pattern_file(&other, 3, 1 << 20);
    let cache = Cache::builder()
        .capacity_bytes(64 << 10)
        .folio_order_max(0)
        .build()
        .unwrap();
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&path)
        .unwrap();
    file.write_at(&[7u8; 100], 0).unwrap();
    file.writeback(0, PAGE).unwrap();
    wait_written_back(&cache);
    drop(file);
    // Another file's pages push the clean one out, and its mapping goes with it.
    let reader = cache.open(&other).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    assert_eq!(reader.read_at(&mut buf, 0).unwrap(), 1 << 20);
    drop(reader);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        100,
        "the length on disk"
    );
    let file = cache.open(&path).unwrap();
    assert_eq!(file.len(), 100, "the length a new open sees");
    let mut back = [0u8; 200];
    assert_eq!(file.read_at(&mut back, 0).unwrap(), 100);
    assert!(back[..100].iter().all(|&b| b == 7));
}

/// The same tail block when the cache is dropped without a sync: its last writeback wrote
/// the block whole and nothing cut the file back to its length.
#[test]
fn a_cache_dropped_without_a_sync_leaves_written_files_their_length() {
    let dir = common::test_dir();
    let path = dir.path().join("written");
    let cache = Cache::builder().capacity_bytes(1 << 20).build().unwrap();
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&path)
        .unwrap();
    file.write_at(&[9u8; 5000], 0).unwrap();
    drop(file);
    drop(cache);
    let disk = std::fs::read(&path).unwrap();
    assert_eq!(disk.len(), 5000, "the length on disk");
    assert!(disk.iter().all(|&b| b == 9));
}

/// `tests/write_simulation.rs` (seed 0, about one run in thirty, issue 14): a sync returned
/// Ok while a writeback of bytes written before it had not completed. A writeback took
/// its folios (DIRTY to WRITEBACK, marks cleared, under the index lock) and only then its
/// in-flight ticket; a sync in between found no folio to write and no ticket to wait for,
/// flushed and returned, and the write completed after the flush: a power cut could lose
/// bytes a sync had vouched for. Here three threads start writebacks without pause while
/// another writes and syncs; after each sync the power is cut (the fault backend's model:
/// writes that completed after the last flush may be lost) and the file must still hold
/// what was synced.
#[test]
fn a_sync_waits_for_a_writeback_that_took_its_folios_before_it() {
    use folio::io::fault::FaultBackend;
    use folio::io::pread::PreadBackend;
    use std::sync::atomic::{AtomicBool, Ordering};

    let dir = common::test_dir();
    let path = dir.path().join("written");
    let (backend, control) = FaultBackend::new(Box::new(PreadBackend::new(4).unwrap()));
    let cache = Cache::builder()
        .capacity_bytes(16 << 20)
        .folio_order_max(0)
        .build_with_backend(Box::new(backend))
        .unwrap();
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&path)
        .unwrap();
    let len = 256 * PAGE as usize;
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let mut disk = vec![0u8; len];
    let mut rounds = 0u64;
    while std::time::Instant::now() < deadline {
        rounds += 1;
        let byte = (rounds % 255 + 1) as u8;
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        file.writeback(0, u64::MAX).unwrap();
                    }
                });
            }
            file.write_at(&vec![byte; len], 0).unwrap();
            file.sync_data().unwrap();
            stop.store(true, Ordering::Relaxed);
        });
        // Nothing in flight any more: cut the power.
        wait_written_back(&cache);
        control.power_loss(rounds).unwrap();
        let std_file = std::fs::File::open(&path).unwrap();
        std::os::unix::fs::FileExt::read_exact_at(&std_file, &mut disk, 0).unwrap();
        if let Some(at) = disk.iter().position(|&b| b != byte) {
            panic!(
                "round {rounds}: after a sync and a power cut, byte {at} on disk is {} instead of {byte}",
                disk[at]
            );
        }
    }
}

/// `a_sync_waits_for_a_writeback_that_took_its_folios_before_it` (one run in about
/// thirteen) and the write simulation (seed 4233, issue 14): a page written past the end
/// of the file was never written back, and read back as zeros once evicted. The writer
/// published the new page dirty before extending the file's size over it; a writeback
/// that took the page in between (with the size it had read before) wrote only the
/// blocks below that size, dropped the page's block, and left the page clean: its bytes
/// never reached the disk, a sync returned Ok without them, and their dirty charge
/// stayed forever. Here a writer appends page after page while three threads start
/// writebacks without pause; after each sync nothing may be dirty, and the disk must
/// hold every page.
#[test]
fn an_append_racing_a_writeback_reaches_the_disk() {
    use std::sync::atomic::{AtomicBool, Ordering};

    let dir = common::test_dir();
    let path = dir.path().join("written");
    let cache = Cache::builder()
        .capacity_bytes(16 << 20)
        .folio_order_max(0)
        .build()
        .unwrap();
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&path)
        .unwrap();
    let pages = 64u64;
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let mut round = 0u64;
    while std::time::Instant::now() < deadline {
        round += 1;
        let byte = (round % 255 + 1) as u8;
        file.set_len(0).unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        file.writeback(0, u64::MAX).unwrap();
                    }
                });
            }
            for page in 0..pages {
                file.write_at(&vec![byte; PAGE as usize], page * PAGE)
                    .unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
        file.sync_data().unwrap();
        let s = cache.stats();
        assert_eq!(
            s.dirty_pages + s.writeback_pages,
            0,
            "round {round}: dirty after a sync: {s:?}"
        );
        let disk = std::fs::read(&path).unwrap();
        assert_eq!(disk.len() as u64, pages * PAGE, "round {round}");
        if let Some(at) = disk.iter().position(|&b| b != byte) {
            panic!(
                "round {round}: after a sync, byte {at} on disk is {} instead of {byte}",
                disk[at]
            );
        }
    }
}

/// Found by `keeper_crash.rs` (issue 31), not fixed yet: `set_len` down to the middle of a
/// page, while another thread reads that page (here `get_page` of the new last byte, as a
/// reader of a log's tail does), can leave the page cached with the bytes the disk held
/// past the new end before the cut. `set_len` zeroes what lies past the end only in a
/// folio already cached (`zero_past_end`); a read of the page that starts before the
/// `ftruncate` (or is in flight across it) brings the old bytes in after. Once the file
/// grows past them again (a write further on leaves a hole), they read back through the
/// cache instead of zeros, and writeback puts them on disk (it writes the block whole).
/// Without the reader the same steps leave zeros.
#[test]
fn a_cut_racing_a_read_of_its_last_page_leaves_zeros_past_the_end() {
    use std::sync::atomic::{AtomicBool, Ordering};

    let dir = common::test_dir();
    let path = dir.path().join("cut");
    let old_bytes: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8 | 1).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let mut round = 0u64;
    while std::time::Instant::now() < deadline {
        round += 1;
        std::fs::write(&path, &old_bytes).unwrap();
        let cache = Cache::builder().capacity_bytes(4 << 20).build().unwrap();
        let file = cache.open_options().write(true).open(&path).unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let len = file.len();
                    if let Ok(view) = file.get_page(len.saturating_sub(1)) {
                        std::hint::black_box(&view[..]);
                    }
                }
            });
            for cut in 0..40u64 {
                // Each cut lands in old bytes, in the middle of a page.
                let len = old_bytes.len() as u64 - 20_000 * (cut + 1) - (cut * 7919) % PAGE;
                file.set_len(len).unwrap();
                file.write_at(&[7; 8], len).unwrap();
                file.write_at(&[9; 8], len + 5000).unwrap();
                let mut hole = vec![0u8; 4992];
                file.read_at(&mut hole, len + 8).unwrap();
                if let Some(at) = hole.iter().position(|&b| b != 0) {
                    stop.store(true, Ordering::Relaxed);
                    panic!(
                        "round {round}, cut {cut} to {len}: byte {} of the hole reads {:#04x} (before the cut: {:#04x})",
                        len + 8 + at as u64,
                        hole[at],
                        old_bytes[(len + 8) as usize + at]
                    );
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
    }
}
