//! Kept memory given back like page cache (docs/persistence.md, "Kept memory"): a named
//! segment left by a clean drop is held by its steward (the owner's keeper, staying), which
//! punches its coldest clean pages out past a bound or under memory pressure, removes it
//! after an idle time, and leaves when a new cache adopts it. Each lever is deterministic:
//! a tiny bound, a simulated machine's memory files, a test-sized idle time, or a direct
//! trim (`folio::trim_kept_segment`); the tests wait for what must happen, never for a
//! time.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use folio::{Cache, KeptMemory, SegmentHolder, SegmentView};

const NAME: &str = "kept";
const READ_BYTES: usize = 12 << 20;
const WRITTEN_BYTES: usize = 4 << 20;

/// `len` bytes, distinct per `seed` and offset.
fn content(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (seed.wrapping_mul(131).wrapping_add(k as u64 * 7) % 251) as u8)
        .collect()
}

fn builder(segments: &Path, kept: KeptMemory) -> folio::CacheBuilder {
    Cache::builder()
        .capacity_bytes(64 << 20)
        .persistent(true)
        .segment_dir(segments)
        .segment_name(NAME)
        .kept_memory(kept)
}

/// A segment directory on tmpfs (as the default one is) and a data directory.
fn dirs() -> (tempfile::TempDir, tempfile::TempDir) {
    let segments = tempfile::Builder::new()
        .prefix("folio-kept-test")
        .tempdir_in("/dev/shm")
        .unwrap();
    std::fs::set_permissions(segments.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    (segments, tempfile::tempdir().unwrap())
}

fn read_all(cache: &Cache, path: &Path) -> Vec<u8> {
    let file = cache.open(path).unwrap();
    let mut buf = vec![0u8; file.len() as usize];
    let n = file.read_at(&mut buf, 0).unwrap();
    buf.truncate(n);
    buf
}

/// A first cache that reads `read` (made by `std::fs`) and writes `written`, then is
/// dropped cleanly. Returns its segment's path and its keeper's pid.
fn first_life(segments: &Path, data: &Path, kept: KeptMemory) -> (PathBuf, u32) {
    std::fs::write(data.join("read"), content(1, READ_BYTES)).unwrap();
    let cache = builder(segments, kept).build().unwrap();
    assert_eq!(read_all(&cache, &data.join("read")), content(1, READ_BYTES));
    let w = cache
        .open_options()
        .write(true)
        .create(true)
        .open(data.join("written"))
        .unwrap();
    w.write_at(&content(2, WRITTEN_BYTES), 0).unwrap();
    drop(w);
    let path = cache.segment_path().unwrap();
    let keeper = cache.keeper_pid().unwrap();
    drop(cache);
    (path, keeper)
}

fn allocated_bytes(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.blocks() * 512)
}

fn cached_pages(path: &Path) -> u64 {
    SegmentView::open(path)
        .unwrap()
        .files()
        .iter()
        .map(|f| f.cached_pages)
        .sum()
}

/// Waits for `done`, failing after a minute (it must happen; only how soon depends on
/// the machine).
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never happened: {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

/// The next cache of the name adopts what is left and serves every byte as `std::fs`
/// reads it.
fn adopt_and_compare(segments: &Path, data: &Path, pages_left: u64) -> folio::Adoption {
    let cache = builder(segments, KeptMemory::default()).build().unwrap();
    let adoption = cache.adoption().expect("the segment was adopted").clone();
    assert_eq!(adoption.pages_kept, pages_left, "{adoption:?}");
    for name in ["read", "written"] {
        let path = data.join(name);
        assert!(
            read_all(&cache, &path) == std::fs::read(&path).unwrap(),
            "{name}: the cache serves the file's bytes"
        );
    }
    adoption
}

#[test]
fn past_its_bound_a_kept_segment_gives_its_coldest_clean_pages_back() {
    let (segments, data) = dirs();
    let bound = 8 << 20;
    let kept = KeptMemory {
        bound_bytes: Some(bound),
        steward: true,
        ..KeptMemory::default()
    };
    let all_pages = ((READ_BYTES + WRITTEN_BYTES) / 4096) as u64;
    let (path, keeper) = first_life(segments.path(), data.path(), kept);
    wait_for("the steward trims to its bound", || {
        allocated_bytes(&path) <= bound
    });
    let view = SegmentView::open(&path).unwrap();
    assert_eq!(view.holder(), SegmentHolder::Steward, "the keeper stays");
    assert_eq!(view.keeper_pid(), keeper);
    drop(view);
    let left = cached_pages(&path);
    assert!(
        left > 0 && left < all_pages,
        "{left} of {all_pages} pages left"
    );
    let adoption = adopt_and_compare(segments.path(), data.path(), left);
    assert!(adoption.pages_kept < all_pages, "{adoption:?}");
    wait_for("the steward leaves an adopted segment", || gone(keeper));
}

#[test]
fn a_direct_trim_punches_clean_pages_and_adoption_keeps_the_rest() {
    let (segments, data) = dirs();
    let kept = KeptMemory {
        steward: false,
        ..KeptMemory::default()
    };
    let (path, keeper) = first_life(segments.path(), data.path(), kept);
    wait_for("the keeper exits after the clean drop", || gone(keeper));
    let before = allocated_bytes(&path);
    let pages_before = cached_pages(&path);
    assert!(pages_before >= ((READ_BYTES + WRITTEN_BYTES) / 4096) as u64);
    // Another test's keeper, forked from this process, holds copies of its descriptors
    // (this segment's among them) until it closes them: the segment is busy that long.
    let mut trimmed = None;
    wait_for("the segment is free to trim", || {
        match folio::trim_kept_segment(&path, 6 << 20) {
            Ok(t) => trimmed = Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
        trimmed.is_some()
    });
    let trimmed = trimmed.unwrap();
    assert!(trimmed.pages >= (6 << 20) / 4096, "{trimmed:?}");
    assert_eq!(
        trimmed.pages - trimmed.free_pages + trimmed.pages_left,
        pages_before
    );
    let after = allocated_bytes(&path);
    assert!(
        after + trimmed.pages * 4096 <= before,
        "the file's blocks shrank by the punched pages: {before} -> {after}"
    );
    assert_eq!(cached_pages(&path), trimmed.pages_left);
    adopt_and_compare(segments.path(), data.path(), trimmed.pages_left);
}

#[test]
fn under_memory_pressure_the_steward_gives_everything_back() {
    let (segments, data) = dirs();
    // A simulated machine: 8 GiB, 100 MiB available (below two reserves of 256 MiB).
    let machine = tempfile::tempdir().unwrap();
    std::fs::write(
        machine.path().join("meminfo"),
        "MemTotal:        8388608 kB\nMemFree:          102400 kB\nMemAvailable:     102400 kB\n",
    )
    .unwrap();
    let kept = KeptMemory {
        memory_files: Some(machine.path().to_path_buf()),
        steward: true,
        ..KeptMemory::default()
    };
    let (path, keeper) = first_life(segments.path(), data.path(), kept);
    wait_for("the segment is given back and removed", || !path.exists());
    wait_for("the steward exits", || gone(keeper));
    // The next cache of the name starts cold, and reads the files right.
    let cache = builder(segments.path(), KeptMemory::default())
        .build()
        .unwrap();
    assert!(cache.adoption().is_none());
    assert_eq!(
        read_all(&cache, &data.path().join("written")),
        content(2, WRITTEN_BYTES)
    );
}

#[test]
fn a_kept_segment_untouched_past_the_idle_time_is_removed() {
    let (segments, data) = dirs();
    let kept = KeptMemory {
        idle_remove_after: Duration::from_millis(100),
        steward: true,
        ..KeptMemory::default()
    };
    let (path, keeper) = first_life(segments.path(), data.path(), kept);
    wait_for("the idle segment is removed", || !path.exists());
    wait_for("its steward exits", || gone(keeper));
}

#[test]
fn a_steward_without_pressure_keeps_everything_for_the_next_cache() {
    let (segments, data) = dirs();
    // The steward is on by default.
    let kept = KeptMemory::default();
    assert!(kept.steward);
    let (path, keeper) = first_life(segments.path(), data.path(), kept);
    wait_for("the keeper becomes the steward", || {
        SegmentView::open(&path).unwrap().holder() == SegmentHolder::Steward
    });
    let pages = cached_pages(&path);
    assert!(pages >= ((READ_BYTES + WRITTEN_BYTES) / 4096) as u64);
    adopt_and_compare(segments.path(), data.path(), pages);
    wait_for("the steward leaves an adopted segment", || gone(keeper));
}

#[test]
fn a_killed_steward_leaves_the_segment_adoptable_with_every_page() {
    let (segments, data) = dirs();
    let (path, keeper) = first_life(segments.path(), data.path(), KeptMemory::default());
    wait_for("the keeper becomes the steward", || {
        SegmentView::open(&path).unwrap().holder() == SegmentHolder::Steward
    });
    let pages = cached_pages(&path);
    // SAFETY: kill with a pid and a signal; the steward is alive (its record lock is held),
    // so the pid is still its own.
    let killed = unsafe { libc::kill(keeper as libc::pid_t, libc::SIGKILL) };
    assert_eq!(killed, 0);
    wait_for("the steward is gone", || gone(keeper));
    // Nothing lost: the next cache adopts every page, every byte right.
    adopt_and_compare(segments.path(), data.path(), pages);
}
