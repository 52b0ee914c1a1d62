//! The write side (DESIGN.md §8) as a user sees it: writes read back through every handle,
//! partial pages, holes, extension, `set_len`, syncs that leave the file on disk right,
//! copy on write under a pinned page, per-block writeback of large folios, and the
//! dirty limit.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{pattern, test_dir, wait_for_stats, write_pattern_file};
use folio::Cache;

fn cache(capacity: u64) -> Cache {
    Cache::builder().capacity_bytes(capacity).build().unwrap()
}

/// What the file holds on disk, read without folio.
fn on_disk(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[test]
fn writes_read_back_and_reach_the_disk_after_sync() {
    let dir = test_dir();
    let path = dir.path().join("f");
    let cache = cache(16 << 20);
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&path)
        .unwrap();
    assert_eq!(file.len(), 0);
    let data = pattern(7, 0, 10_000);
    assert_eq!(file.write_at(&data, 0).unwrap(), data.len());
    assert_eq!(file.len(), 10_000);
    let mut buf = vec![0u8; 12_000];
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), 10_000);
    assert!(buf[..10_000] == data[..]);
    // A read-only handle of the same file sees the write at once.
    let reader = cache.open(&path).unwrap();
    assert_eq!(reader.len(), 10_000);
    let mut buf2 = vec![0u8; 10_000];
    assert_eq!(reader.read_at(&mut buf2, 0).unwrap(), 10_000);
    assert!(buf2 == data);
    file.sync_data().unwrap();
    assert_eq!(on_disk(&path), data, "the file on disk after sync_data");
    let s = cache.stats();
    assert_eq!(s.dirty_pages, 0, "{s:?}");
    assert!(s.pages_written_back >= 3, "{s:?}");
}

/// What a storage engine does after a flush: it writes a file, syncs and closes it, then
/// opens it again and reads it back. Cache on write means that read costs no I/O, and the
/// handle's own stats say so; a file folio never saw costs its size.
#[test]
fn a_file_written_through_the_cache_reads_back_with_no_io() {
    let dir = test_dir();
    let written = dir.path().join("written");
    let cold = dir.path().join("cold");
    let len: usize = (1 << 20) + 1234;
    write_pattern_file(&cold, 5, len as u64);
    let data = pattern(9, 0, len);
    let cache = cache(16 << 20);
    let writer = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&written)
        .unwrap();
    for (i, chunk) in data.chunks(64 << 10).enumerate() {
        writer.write_at(chunk, (i * (64 << 10)) as u64).unwrap();
    }
    writer.sync_data().unwrap();
    assert_eq!(writer.stats().read_io_bytes, 0, "appends read nothing");
    drop(writer);

    let reader = cache.open(&written).unwrap();
    let mut buf = vec![0u8; len];
    assert_eq!(reader.read_at(&mut buf, 0).unwrap(), len);
    assert!(buf == data);
    assert_eq!(
        reader.stats(),
        folio::FileStats::default(),
        "read back from the cache"
    );

    let other = cache.open(&cold).unwrap();
    assert_eq!(other.read_at(&mut buf, 0).unwrap(), len);
    assert!(buf == pattern(5, 0, len));
    let s = other.stats();
    assert!(s.read_io_requests >= 1, "{s:?}");
    assert!(
        s.read_io_bytes >= len as u64,
        "every page read once at least: {s:?}"
    );
    assert_eq!(
        reader.stats().read_io_bytes,
        0,
        "another handle's I/O is its own"
    );
}

#[test]
fn partial_overwrites_read_the_page_once_and_keep_the_rest() {
    let dir = test_dir();
    let path = dir.path().join("f");
    let len = 1 << 20;
    write_pattern_file(&path, 3, len);
    let cache = cache(16 << 20);
    let file = cache.open_options().write(true).open(&path).unwrap();
    let mut model = pattern(3, 0, len as usize);
    for (offset, n) in [
        (100u64, 10usize),
        (4090, 20),
        (8192, 4096),
        (500_000, 70_000),
        (len - 5, 5),
    ] {
        let bytes: Vec<u8> = (0..n).map(|i| (i * 31 + offset as usize) as u8).collect();
        file.write_at(&bytes, offset).unwrap();
        model[offset as usize..offset as usize + n].copy_from_slice(&bytes);
    }
    let mut buf = vec![0u8; len as usize];
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), len as usize);
    assert!(buf == model, "the cache holds the model");
    file.sync_all().unwrap();
    assert!(on_disk(&path) == model, "the disk holds the model");
    drop(file);
    drop(cache);
    // A new cache reads what the disk holds.
    let cache = self::cache(16 << 20);
    let file = cache.open(&path).unwrap();
    let mut again = vec![0u8; len as usize];
    assert_eq!(file.read_at(&mut again, 0).unwrap(), len as usize);
    assert!(again == model);
}

#[test]
fn writes_past_the_end_leave_holes_of_zeros_and_set_len_cuts_and_grows() {
    let dir = test_dir();
    let path = dir.path().join("f");
    write_pattern_file(&path, 5, 6000);
    let cache = cache(16 << 20);
    let file = cache.open_options().write(true).open(&path).unwrap();
    let mut model = pattern(5, 0, 6000);
    file.write_at(b"tail", 100_000).unwrap();
    model.resize(100_000, 0);
    model.extend_from_slice(b"tail");
    assert_eq!(file.len(), 100_004);
    let mut buf = vec![1u8; model.len()];
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), model.len());
    assert!(buf == model, "a hole reads as zeros");
    file.set_len(5000).unwrap();
    model.truncate(5000);
    file.set_len(9000).unwrap();
    model.resize(9000, 0);
    let mut buf = vec![1u8; 9000];
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), 9000);
    assert!(
        buf == model,
        "bytes past a cut read as zeros after growing again"
    );
    file.sync_all().unwrap();
    assert!(on_disk(&path) == model);
    // Truncating on open goes through the cache.
    drop(file);
    let file = cache
        .open_options()
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    assert_eq!(file.len(), 0);
    let mut one = [0u8; 1];
    assert_eq!(file.read_at(&mut one, 0).unwrap(), 0);
}

#[test]
fn a_pinned_page_keeps_its_bytes_while_a_writer_copies_on_write() {
    let dir = test_dir();
    let path = dir.path().join("f");
    write_pattern_file(&path, 9, 8192);
    let cache = cache(16 << 20);
    let file = cache.open_options().write(true).open(&path).unwrap();
    let page = file.get_page(0).unwrap();
    let before = page.to_vec();
    file.write_at(&[0xAB; 100], 10).unwrap();
    assert!(page[..] == before[..], "a PageRef never sees bytes change");
    drop(page);
    let mut buf = [0u8; 120];
    file.read_at(&mut buf, 0).unwrap();
    assert!(buf[10..110].iter().all(|&b| b == 0xAB));
    assert!(cache.stats().write_copies >= 1);
    file.sync_data().unwrap();
    assert!(on_disk(&path)[10..110].iter().all(|&b| b == 0xAB));
}

#[test]
fn small_overwrites_of_large_folios_write_only_their_blocks() {
    let dir = test_dir();
    let path = dir.path().join("f");
    let len = 8 << 20;
    write_pattern_file(&path, 11, len);
    let cache = cache(64 << 20);
    let file = cache.open_options().write(true).open(&path).unwrap();
    // Read it all (readahead brings it in as large folios), then overwrite 4 KiB blocks.
    let mut buf = vec![0u8; len as usize];
    file.read_at(&mut buf, 0).unwrap();
    let before = cache.stats();
    for i in 0..256u64 {
        let offset = (i * 7919 * 4096) % len;
        file.write_at(&[i as u8; 4096], offset).unwrap();
    }
    file.sync_data().unwrap();
    let s = cache.stats();
    let written = s.writeback_bytes - before.writeback_bytes;
    let dirtied = s.write_bytes - before.write_bytes;
    assert!(
        written as f64 <= 1.1 * dirtied as f64,
        "write amplification {written} / {dirtied}: {s:?}"
    );
}

#[test]
fn many_writers_stay_under_the_dirty_limit_and_read_back_right() {
    let dir = test_dir();
    let path = dir.path().join("f");
    let len: u64 = 32 << 20;
    let cache = Cache::builder()
        .capacity_bytes(16 << 20)
        .dirty_limit_bytes(1 << 20)
        .dirty_background_bytes(512 << 10)
        .build()
        .unwrap();
    let file = Arc::new(
        cache
            .open_options()
            .write(true)
            .create(true)
            .open(&path)
            .unwrap(),
    );
    file.set_len(len).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let cache = cache.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut max = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let s = cache.stats();
                max = max.max(s.dirty_pages + s.writeback_pages);
                std::thread::sleep(Duration::from_millis(1));
            }
            max
        })
    };
    let writers: Vec<_> = (0..32u64)
        .map(|t| {
            let file = file.clone();
            std::thread::spawn(move || {
                // Each writer owns a 1 MiB slice and writes it in 8 KiB records.
                let base = t * (1 << 20);
                for r in 0..128u64 {
                    let offset = base + r * 8192;
                    file.write_at(&pattern(t, offset, 8192), offset).unwrap();
                }
                let mut buf = vec![0u8; 1 << 20];
                assert_eq!(file.read_at(&mut buf, base).unwrap(), 1 << 20);
                common::check_pattern(t, base, &buf).unwrap();
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let max = sampler.join().unwrap();
    assert!(
        max <= 256,
        "dirty + writeback pages reached {max} > the limit of 256"
    );
    file.sync_data().unwrap();
    let disk = on_disk(&path);
    for t in 0..32u64 {
        let base = (t << 20) as usize;
        common::check_pattern(t, base as u64, &disk[base..base + (1 << 20)]).unwrap();
    }
}

#[test]
fn removing_a_closed_file_drops_its_pages_and_its_dirty_state() {
    let dir = test_dir();
    let path = dir.path().join("f");
    // Without write-behind: the 1 MiB append would be on its way to the disk at once.
    let cache = Cache::builder()
        .capacity_bytes(16 << 20)
        .write_behind_bytes(0)
        .build()
        .unwrap();
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&path)
        .unwrap();
    file.write_at(&vec![7u8; 1 << 20], 0).unwrap();
    drop(file);
    assert!(cache.stats().dirty_pages > 0);
    let mappings = cache.stats().mappings;
    cache.remove_file(&path).unwrap();
    assert!(!path.exists());
    let s = cache.stats();
    assert_eq!(
        s.dirty_pages, 0,
        "a deleted file's dirty pages are discarded: {s:?}"
    );
    assert_eq!(
        s.mappings,
        mappings - 1,
        "the deleted file is forgotten: {s:?}"
    );
    assert_eq!(s.cached_bytes, 0, "{s:?}");
    // A new file at the same path starts empty.
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&path)
        .unwrap();
    assert_eq!(file.len(), 0);
    assert!(cache.remove_file(dir.path().join("missing")).is_err());
}

/// RocksDB deletes a compaction's inputs while its table cache still has them open: the
/// open handles keep reading the file as before, and its pages go with the last close
/// (as the kernel's go with the last descriptor), not when eviction finds them.
#[test]
fn removing_an_open_file_drops_its_pages_at_the_last_close() {
    let dir = test_dir();
    let path = dir.path().join("f");
    let keep = dir.path().join("keep");
    let len: usize = 1 << 20;
    let cache = cache(16 << 20);
    let writer = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&path)
        .unwrap();
    writer.write_at(&pattern(4, 0, len), 0).unwrap();
    writer.sync_data().unwrap();
    drop(writer);
    let other = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&keep)
        .unwrap();
    other.write_at(&pattern(6, 0, 8192), 0).unwrap();
    let readers = [cache.open(&path).unwrap(), cache.open(&path).unwrap()];
    let mappings = cache.stats().mappings;
    cache.remove_file(&path).unwrap();
    assert!(!path.exists());
    let mut buf = vec![0u8; len];
    for r in &readers {
        assert_eq!(r.read_at(&mut buf, 0).unwrap(), len);
        assert!(
            buf == pattern(4, 0, len),
            "an open handle still reads the deleted file"
        );
    }
    let s = cache.stats();
    assert!(
        s.cached_bytes >= len as u64,
        "pages stay while handles are open: {s:?}"
    );
    let [first, second] = readers;
    drop(first);
    assert!(
        cache.stats().cached_bytes >= len as u64,
        "one handle is still open"
    );
    drop(second);
    let s = cache.stats();
    assert_eq!(
        s.mappings,
        mappings - 1,
        "the deleted file is forgotten: {s:?}"
    );
    assert_eq!(
        s.cached_bytes, 8192,
        "only the other file's pages stay: {s:?}"
    );
    assert_eq!(other.read_at(&mut buf[..8192], 0).unwrap(), 8192);
    assert!(buf[..8192] == pattern(6, 0, 8192)[..]);
}

/// An expiry past 2^64 ns (584 years) means "never", not its nanoseconds modulo 2^64 (the
/// background writeback took `as_nanos() as u64`, which made this one 1 µs).
#[test]
fn an_expiry_past_u64_nanoseconds_never_expires() {
    let dir = test_dir();
    let path = dir.path().join("f");
    let expire = Duration::new(18_446_744_073, 709_552_616); // 2^64 ns + 1 µs
    let cache = Cache::builder()
        .capacity_bytes(16 << 20)
        .dirty_expire(expire)
        .build()
        .unwrap();
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&path)
        .unwrap();
    file.write_at(&pattern(5, 0, 8192), 0).unwrap();
    // Several passes of the background writeback (every 100 ms); below the background
    // threshold, only expiry could write the file.
    std::thread::sleep(Duration::from_millis(500));
    let s = cache.stats();
    assert_eq!(s.pages_written_back, 0, "{s:?}");
    assert_eq!(s.dirty_pages, 2, "{s:?}");
}

/// A cache whose background writeback never writes by expiry during a test: what reaches
/// the disk before a sync is write-behind's alone.
fn cache_without_expiry(write_behind_bytes: u64) -> Cache {
    Cache::builder()
        .capacity_bytes(64 << 20)
        .dirty_expire(Duration::from_secs(3600))
        .write_behind_bytes(write_behind_bytes)
        .build()
        .unwrap()
}

/// Appends `len` bytes of `pattern(seed, ..)` in 8 KiB records from `from`, as a log does.
fn append(file: &folio::File, seed: u64, from: u64, len: u64) {
    let mut at = from;
    while at < from + len {
        let n = (8 << 10).min(from + len - at);
        file.write_at(&pattern(seed, at, n as usize), at).unwrap();
        at += n;
    }
}

/// Write-behind: an appending writer's whole pages go to the device in 256 KiB steps
/// without a sync, and the bytes on disk are the written ones; the page the writer is
/// still filling stays dirty, and the sync writes the rest.
#[test]
fn appends_are_written_behind_before_any_sync() {
    let dir = test_dir();
    let path = dir.path().join("log");
    let cache = cache_without_expiry(256 << 10);
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&path)
        .unwrap();
    let len = (1 << 20) + 5000; // the last page is partial
    append(&file, 3, 0, len);
    // Every whole page up to the last 256 KiB step is written behind: 1 MiB of 1 MiB + 5000.
    let s = wait_for_stats(&cache, "write-behind", |s| s.pages_written_back >= 256);
    assert!(s.pages_written_back >= 256, "{s:?}");
    assert!(
        s.dirty_pages >= 2,
        "the last whole page and the partial one: {s:?}"
    );
    let disk = on_disk(&path);
    assert!(disk.len() >= 1 << 20, "{} bytes on disk", disk.len());
    assert!(
        disk[..1 << 20] == pattern(3, 0, 1 << 20)[..],
        "written-behind bytes"
    );
    file.sync_data().unwrap();
    assert_eq!(
        on_disk(&path),
        pattern(3, 0, len as usize),
        "after sync_data"
    );
    assert_eq!(cache.stats().dirty_pages, 0);
}

/// `write_behind_bytes(0)` turns it off, and writes that do not pass the end of the file
/// are never written behind: their pages wait for a sync, as the kernel's do.
#[test]
fn overwrites_and_a_cache_without_write_behind_leave_pages_dirty() {
    let dir = test_dir();
    let off = dir.path().join("off");
    let cache = cache_without_expiry(0);
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&off)
        .unwrap();
    append(&file, 4, 0, 2 << 20);
    std::thread::sleep(Duration::from_millis(200));
    let s = cache.stats();
    assert_eq!(s.pages_written_back, 0, "write-behind off: {s:?}");
    assert_eq!(s.dirty_pages, 512, "{s:?}");

    let inside = dir.path().join("inside");
    write_pattern_file(&inside, 5, 4 << 20);
    let cache = cache_without_expiry(256 << 10);
    let file = cache.open_options().write(true).open(&inside).unwrap();
    // 2 MiB of overwrites that end before the end of the file.
    append(&file, 6, 1 << 20, 2 << 20);
    std::thread::sleep(Duration::from_millis(200));
    let s = cache.stats();
    assert_eq!(s.pages_written_back, 0, "overwrites inside the file: {s:?}");
    file.sync_data().unwrap();
    let mut want = pattern(5, 0, 4 << 20);
    want[1 << 20..3 << 20].copy_from_slice(&pattern(6, 1 << 20, 2 << 20));
    assert!(on_disk(&inside) == want, "after sync_data");

    // A file grown by set_len, then filled: its last write ends at the end of the file
    // but does not pass it, so it is not an append either.
    let grown = dir.path().join("grown");
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&grown)
        .unwrap();
    file.set_len(2 << 20).unwrap();
    let before = cache.stats().pages_written_back;
    append(&file, 7, 0, 2 << 20);
    std::thread::sleep(Duration::from_millis(200));
    let s = cache.stats();
    assert_eq!(s.pages_written_back, before, "filling a grown file: {s:?}");
    file.sync_data().unwrap();
    assert!(on_disk(&grown) == pattern(7, 0, 2 << 20), "after sync_data");
}

/// Cutting the file back with `set_len` moves write-behind back with it: appends after
/// the cut are written behind again, and the file on disk is the model's.
#[test]
fn write_behind_follows_the_end_back_after_set_len() {
    let dir = test_dir();
    let path = dir.path().join("log");
    let cache = cache_without_expiry(256 << 10);
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&path)
        .unwrap();
    append(&file, 7, 0, 1 << 20);
    let before =
        wait_for_stats(&cache, "write-behind", |s| s.pages_written_back >= 192).pages_written_back;
    assert!(before >= 192, "{before} pages written behind");
    file.set_len(64 << 10).unwrap();
    append(&file, 8, 64 << 10, 1 << 20);
    let s = wait_for_stats(&cache, "write-behind after the cut", |s| {
        s.pages_written_back >= before + 192
    });
    assert!(s.pages_written_back >= before + 192, "after the cut: {s:?}");
    file.sync_data().unwrap();
    let mut want = pattern(7, 0, 64 << 10);
    want.extend_from_slice(&pattern(8, 64 << 10, 1 << 20));
    assert!(on_disk(&path) == want, "after sync_data");
}
