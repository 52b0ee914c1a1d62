//! Write errors (issue 14, done-when 4; DESIGN.md §8, "Errors"): what a failed writeback,
//! a full disk, a disk that keeps failing, a short write and a failed flush do to the
//! handles of the file, to its data and to the cache, through the fault backend (a real
//! backend of the library, over the pread pool) and, for ENOSPC, a small tmpfs.
//!
//! - A writeback EIO is reported by the next sync of every handle open at the time, of a
//!   handle opened after it while nobody had reported it, and of a handle opened after
//!   every handle closed (the mapping outlives its pages while it holds the unreported
//!   error) — once each: their second sync is Ok. Meanwhile the data stays dirty and
//!   readable, and a sync after the fault is gone leaves the file on disk right.
//! - ENOSPC on extension reaches the writer (`write_at` fails, nothing of that write is
//!   taken), and nothing acknowledged before is lost.
//! - A file whose writes keep failing is given up after `WRITEBACK_FAILURES_MAX` failed
//!   batches: a writer pushing more than the dirty limit into it gets an error instead of
//!   hanging at the throttle, its syncs fail, its cached data stays readable, and its
//!   dirty pages leave the budget.
//! - Short writes are completed: the file is right after the sync.
//! - A failed flush is a failed sync, reported once per handle like a writeback error.
//!
//! Why through the public API only: these are the promises a storage engine builds on
//! (PostgreSQL lost acknowledged data in 2018 to a kernel that broke the first one).
//! Every wait is bounded (`WAIT_MAX`; a wait for stats by `common::STATS_WAIT_MAX`), so a
//! hang fails the test instead of the run.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use common::{pattern, test_dir, wait_for_stats, write_pattern_file};
use folio::io::fault::{FaultBackend, FaultControl};
use folio::io::pread::PreadBackend;
use folio::{Advice, Cache, CacheBuilder};

const SALT: u64 = 0xe770;

/// The longest any step may take before the test calls it a hang.
const WAIT_MAX: Duration = Duration::from_secs(30);

/// A cache over the fault backend (over the pread pool), built by `builder`.
fn faulty_cache(builder: CacheBuilder) -> (Cache, FaultControl) {
    let (backend, control) = FaultBackend::new(Box::new(PreadBackend::new(4).unwrap()));
    let cache = builder.build_with_backend(Box::new(backend)).unwrap();
    (cache, control)
}

/// A cache whose background writeback leaves the test's dirty pages alone (a long
/// expiry, thresholds far above what the tests dirty), so that only the test's calls
/// write back.
fn quiet_builder() -> CacheBuilder {
    Cache::builder()
        .capacity_bytes(32 << 20)
        .dirty_limit_bytes(16 << 20)
        .dirty_background_bytes(16 << 20)
        .dirty_expire(Duration::from_secs(600))
}

/// Runs `f` on a thread of its own and returns its result, failing the test if it takes
/// longer than `WAIT_MAX` (a writer throttled forever; the thread is left behind).
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(WAIT_MAX) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what} did not finish within {WAIT_MAX:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what} panicked"),
    }
}

fn assert_errno(result: std::io::Result<()>, errno: i32, what: &str) {
    let err = result.expect_err(what);
    assert_eq!(err.raw_os_error(), Some(errno), "{what}: {err}");
}

/// The file's bytes, read with `std::fs`.
fn on_disk(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// (a), (b): a writeback EIO reaches every handle's next sync once — those open, one
/// opened after the error, and (the second part) one opened after all were closed — the
/// data stays readable while writes fail, and a sync after the fault is gone makes the
/// file on disk right.
#[test]
fn a_writeback_eio_reaches_every_handle_once_and_the_data_survives() {
    let dir = test_dir();
    let path = dir.path().join("f");
    let len = 1 << 20;
    write_pattern_file(&path, SALT, len);
    let (cache, control) = faulty_cache(quiet_builder());
    let writer = cache.open_options().write(true).open(&path).unwrap();
    let other_writer = cache.open_options().write(true).open(&path).unwrap();
    let reader = cache.open(&path).unwrap();
    let mut model = pattern(SALT, 0, len as usize);
    let data = vec![0x5a; 40_000];
    writer.write_at(&data, 100_000).unwrap();
    model[100_000..140_000].copy_from_slice(&data);

    // The writeback of every block of the write fails.
    control.fail_writes(100_000..140_000, libc::EIO);
    writer.writeback(0, u64::MAX).unwrap();
    let s = wait_for_stats(&cache, "the failed writeback", |s| s.writeback_errors >= 1);
    assert!(s.dirty_pages >= 10, "the data stays dirty: {s:?}");
    assert!(control.eio_injected() >= 1);
    // Readable from the cache through every handle, as written.
    for file in [&writer, &other_writer, &reader] {
        let mut buf = vec![0u8; len as usize];
        assert_eq!(file.read_at(&mut buf, 0).unwrap(), len as usize);
        assert!(buf == model, "the cache still holds the written bytes");
    }
    // A handle opened after the error, before any handle reported it, gets it too.
    let late = cache.open(&path).unwrap();

    // With the fault still there, the first handle's sync retries the write, which fails
    // again: an error, once.
    assert_errno(
        writer.sync_data(),
        libc::EIO,
        "the first sync after the error",
    );
    control.clear();
    writer
        .sync_data()
        .expect("the second sync: the error was reported, the retry works");
    assert!(
        on_disk(&path) == model,
        "the retry made the file on disk right"
    );
    assert_eq!(cache.stats().dirty_pages, 0);
    // Every other handle reports the error once, though the data is now on disk.
    assert_errno(
        other_writer.sync_all(),
        libc::EIO,
        "another writable handle",
    );
    other_writer.sync_all().expect("once only");
    assert_errno(reader.sync_data(), libc::EIO, "a read-only handle");
    reader.sync_range(0, 10).expect("once only");
    assert_errno(
        late.sync_range(0, 1),
        libc::EIO,
        "the handle opened after the error",
    );
    late.sync_data().expect("once only");
    // A handle opened after the error was reported does not see it.
    let later = cache.open(&path).unwrap();
    later
        .sync_data()
        .expect("an error already reported is not new to a new handle");

    // After every handle closed: the error is kept with the file, not with the handles
    // nor the pages.
    drop((writer, other_writer, reader, late, later));
    let writer = cache.open_options().write(true).open(&path).unwrap();
    writer.write_at(&[0xc3; 5000], 3000).unwrap();
    model[3000..8000].fill(0xc3);
    control.fail_writes(0..8192, libc::EIO);
    let errors_before = cache.stats().writeback_errors;
    writer.writeback(0, u64::MAX).unwrap();
    wait_for_stats(&cache, "the second failed writeback", |s| {
        s.writeback_errors > errors_before
    });
    // Once the writes work again, the pages are cleaned by a writeback that reports
    // nothing (only syncs report), and dropped: nothing but the error holds the mapping.
    control.clear();
    writer.writeback(0, u64::MAX).unwrap();
    wait_for_stats(&cache, "the clean writeback", |s| {
        s.dirty_pages + s.writeback_pages == 0
    });
    writer.advise(0, u64::MAX / 2, Advice::DontNeed).unwrap();
    assert_eq!(
        cache.stats().cached_bytes,
        0,
        "no page of the file is cached"
    );
    drop(writer);
    assert_eq!(
        cache.stats().mappings,
        1,
        "the unreported error keeps the file's mapping"
    );
    let reopened = cache.open(&path).unwrap();
    assert_errno(
        reopened.sync_data(),
        libc::EIO,
        "a handle opened after all were closed",
    );
    reopened.sync_data().expect("once only");
    assert!(on_disk(&path) == model);
    drop(reopened);
    assert_eq!(
        cache.stats().mappings,
        0,
        "reported, the error no longer holds the mapping"
    );
}

/// A small tmpfs mounted for one test, unmounted when dropped.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it), or `None` if this machine
    /// does not let the test mount (not root, a container).
    fn mount(size: &str) -> Option<SmallFs> {
        let dir = tempfile::tempdir().ok()?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .ok()?;
        status.success().then_some(SmallFs { dir })
    }

    fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// (c): writing past what the file system holds fails the write with ENOSPC (folio
/// reserves the blocks of an extension before it takes the write, so the error is the
/// writer's, not a later writeback's); every write acknowledged before is synced intact,
/// and overwriting them still works.
#[test]
fn enospc_on_extension_reaches_the_writer_and_loses_nothing() {
    let Some(fs) = SmallFs::mount("2m") else {
        println!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let path = fs.path().join("f");
    let cache = Cache::builder().capacity_bytes(16 << 20).build().unwrap();
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&path)
        .unwrap();
    let record = 100_000usize;
    let mut model = Vec::new();
    // A second handle of the file, for the writer's thread.
    let writer = cache.open_options().write(true).open(&path).unwrap();
    let (written, error) = within("writing until the file system is full", move || {
        let mut written = Vec::new();
        for i in 0..100u64 {
            let data = pattern(i, written.len() as u64, record);
            match writer.write_at(&data, written.len() as u64) {
                Ok(n) => {
                    assert_eq!(n, record);
                    written.extend_from_slice(&data);
                }
                Err(e) => return (written, Some(e)),
            }
        }
        (written, None)
    });
    model.extend_from_slice(&written);
    let error = error.expect("a 2 MiB file system cannot take 10 MB");
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{error}");
    assert!(
        model.len() >= 1 << 20 && model.len() <= 2 << 20,
        "the writes before the error took {} bytes",
        model.len()
    );
    assert_eq!(
        file.len(),
        model.len() as u64,
        "the failed write took nothing"
    );
    // Everything acknowledged is written back and synced: its blocks were reserved.
    file.sync_all().expect("the acknowledged writes fit");
    assert!(
        on_disk(&path) == model,
        "the file holds every acknowledged write"
    );
    // Overwrites of what exists need no new space.
    file.write_at(&[0xee; 10_000], 5000).unwrap();
    model[5000..15_000].fill(0xee);
    file.sync_data().unwrap();
    assert!(on_disk(&path) == model);
    let mut buf = vec![0u8; model.len()];
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), model.len());
    assert!(buf == model);
    drop(file);
    drop(cache);
}

/// (d): a file whose every write fails is given up after bounded retries: a writer
/// pushing more than the dirty limit into it gets an error instead of hanging at the
/// throttle, the file's syncs and writes fail from then on, its cached data stays
/// readable, and its dirty pages leave the budget (the cache is not left full of pages it
/// cannot write).
#[test]
fn a_file_that_keeps_failing_is_given_up_without_filling_the_cache() {
    let dir = test_dir();
    let path = dir.path().join("f");
    let len = 4 << 20;
    write_pattern_file(&path, SALT, len);
    let dirty_limit_bytes = 256 << 10;
    // The short expiry: a writer admitted just before the give-up may still dirty its
    // record (below the background threshold); the next writeback, which fails again
    // and so discards it, then comes within 50 ms, not 5 s.
    let (cache, control) = faulty_cache(
        Cache::builder()
            .capacity_bytes(32 << 20)
            .dirty_limit_bytes(dirty_limit_bytes)
            .dirty_background_bytes(128 << 10)
            .dirty_expire(Duration::from_millis(50)),
    );
    let file = cache.open_options().write(true).open(&path).unwrap();
    let other = cache.open(&path).unwrap();
    control.fail_writes(0..u64::MAX, libc::EIO);
    // Write up to 16 times the dirty limit, in 16 KiB records: the writer must meet an
    // error long before the end.
    let writer = cache.open_options().write(true).open(&path).unwrap();
    let (written, error) = within("writing into a failing file", move || {
        let mut written: Vec<(u64, Vec<u8>)> = Vec::new();
        let record = 16 << 10;
        for i in 0..(16 * dirty_limit_bytes / record) {
            let offset = i * record;
            let data = vec![(i % 250) as u8 + 1; record as usize];
            match writer.write_at(&data, offset) {
                Ok(_) => written.push((offset, data)),
                Err(e) => return (written, Some(e)),
            }
        }
        (written, None)
    });
    let error = error.expect("a writer of a file that cannot be written gets an error");
    assert_eq!(
        error.kind(),
        std::io::Error::from_raw_os_error(libc::EIO).kind(),
        "{error}"
    );
    assert_eq!(
        error.raw_os_error(),
        Some(libc::EIO),
        "the errno of the failed writes, as is (C callers get it): {error}"
    );
    assert!(
        (written.len() as u64) < 16 * dirty_limit_bytes / (16 << 10),
        "the error came before the end"
    );
    // From now on: writes and syncs of every handle fail; the errseq error is reported
    // once, the given-up state every time.
    assert!(file.write_at(b"x", 0).is_err(), "a write after the give-up");
    assert!(file.set_len(1).is_err(), "set_len after the give-up");
    assert!(file.sync_data().is_err());
    assert!(
        file.sync_data().is_err(),
        "a given-up file's syncs keep failing"
    );
    assert!(other.sync_all().is_err());
    // The dirty pages leave the budget (a writer that raced the give-up may leave a few,
    // which the next failed batch discards).
    let s = wait_for_stats(&cache, "the dirty pages to leave", |s| {
        s.dirty_pages + s.writeback_pages == 0
    });
    assert!(s.writeback_errors >= 3, "{s:?}");
    // Cached data stays readable: what the acknowledged writes left, the rest as on disk.
    let mut model = pattern(SALT, 0, len as usize);
    for (offset, data) in &written {
        model[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
    }
    let mut buf = vec![0u8; len as usize];
    assert_eq!(other.read_at(&mut buf, 0).unwrap(), len as usize);
    assert!(
        buf == model,
        "reads serve the cached bytes of the given-up file"
    );
    // And nothing reached the disk.
    control.clear();
    assert!(on_disk(&path) == pattern(SALT, 0, len as usize));
}

/// (e): writes cut short by the device are completed; the sync leaves the file right
/// and reports nothing.
#[test]
fn short_writes_are_completed_and_the_file_is_right_after_sync() {
    let dir = test_dir();
    let path = dir.path().join("f");
    let len = 3 << 20;
    write_pattern_file(&path, SALT, len);
    let (cache, control) = faulty_cache(quiet_builder());
    let file = cache.open_options().write(true).open(&path).unwrap();
    let mut model = pattern(SALT, 0, len as usize);
    control.short_writes(1000);
    // Long runs of dirty blocks (merged into writes of many pages), and an extension.
    for (offset, n) in [
        (0u64, 600_000usize),
        (1_000_000, 300_000),
        (2_500_000, 900_000),
    ] {
        let data = pattern(offset ^ 0xff, offset, n);
        file.write_at(&data, offset).unwrap();
        let end = offset as usize + n;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[offset as usize..end].copy_from_slice(&data);
    }
    file.sync_data().expect("short writes are not errors");
    assert!(control.short_injected() >= 3, "{control:?}");
    assert!(on_disk(&path) == model, "the file on disk after the sync");
    let s = cache.stats();
    assert_eq!((s.writeback_errors, s.dirty_pages), (0, 0), "{s:?}");
}

/// (f): a failed flush fails the sync — of every handle, once — and a later sync that
/// flushes makes the data durable.
#[test]
fn a_failed_flush_is_reported_by_the_sync() {
    let dir = test_dir();
    let path = dir.path().join("f");
    write_pattern_file(&path, SALT, 100_000);
    let (cache, control) = faulty_cache(quiet_builder());
    let file = cache.open_options().write(true).open(&path).unwrap();
    let other = cache.open(&path).unwrap();
    let mut model = pattern(SALT, 0, 100_000);
    file.write_at(&[9u8; 20_000], 50_000).unwrap();
    model[50_000..70_000].fill(9);
    control.fail_flushes(libc::EIO);
    assert_errno(file.sync_data(), libc::EIO, "a sync whose flush failed");
    assert_errno(
        file.sync_data(),
        libc::EIO,
        "a sync whose flush failed again: a new error",
    );
    control.clear();
    assert_errno(other.sync_all(), libc::EIO, "another handle's next sync");
    other.sync_data().expect("reported once");
    file.sync_all().expect("the flush works again");
    assert!(on_disk(&path) == model);
    // And with fsync (sync_all) failing too.
    file.write_at(&[8u8; 10], 0).unwrap();
    control.fail_flushes(libc::EIO);
    assert_errno(file.sync_all(), libc::EIO, "a sync_all whose flush failed");
    control.clear();
    file.sync_all().unwrap();
}
