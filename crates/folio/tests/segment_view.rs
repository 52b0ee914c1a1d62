//! A persistent cache seen from outside (`SegmentView`, `segments_in`, `remove_segment`):
//! the counters read back from the segment are the ones `Cache::publish_stats` returned,
//! each file's pages are what was read and written, the last figures stay after the drop,
//! and a segment is listed, refused while in use, and removed once nobody holds it. Each
//! cache has a segment directory of its own, so no other test's keeper is waited for.

mod common;

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use folio::{Cache, SegmentHolder, SegmentState, SegmentView};

/// A private segment directory in /dev/shm (a tmpfs, as segments want).
fn segment_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("folio-view-test-")
        .tempdir_in("/dev/shm")
        .expect("a directory in /dev/shm")
}

/// A persistent cache that keeps what it writes dirty (no write-behind, no expiry).
fn persistent_cache(dir: &Path) -> Cache {
    Cache::builder()
        .capacity_bytes(64 << 20)
        .dirty_limit_bytes(32 << 20)
        .write_behind_bytes(0)
        .dirty_expire(Duration::from_secs(600))
        .persistent(true)
        .segment_dir(dir)
        .build()
        .unwrap()
}

/// Reads `read` (a file of 2 MiB, whole) and writes `written` (1 MiB, left dirty) through
/// `cache`; returns the handles.
fn read_and_write(cache: &Cache, read: &Path, written: &Path) -> Vec<folio::File> {
    let data = common::pattern(7, 0, 2 << 20);
    std::fs::write(read, &data).unwrap();
    let reader = cache.open(read).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    for offset in [0, 1 << 20, 0] {
        reader.read_at(&mut buf, offset).unwrap();
    }
    let writer = cache
        .open_options()
        .write(true)
        .create(true)
        .open(written)
        .unwrap();
    writer.write_at(&vec![5u8; 1 << 20], 0).unwrap();
    vec![reader, writer]
}

/// Waits until the keeper is done with the segment at `path`: it exited (nobody holds the
/// segment), or stays as a kept segment's steward.
fn wait_for_nobody(path: &Path) {
    let started = Instant::now();
    while !matches!(
        SegmentView::open(path).unwrap().holder(),
        SegmentHolder::Nobody | SegmentHolder::Steward
    ) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the keeper never exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_view_shows_what_the_cache_published_and_each_file_s_pages() {
    let data = common::test_dir();
    let dir = segment_dir();
    let cache = persistent_cache(dir.path());
    let (read, written) = (data.path().join("read"), data.path().join("written"));
    let handles = read_and_write(&cache, &read, &written);
    let segment = cache.segment_path().unwrap();

    let view = SegmentView::open(&segment).unwrap();
    assert_eq!(view.state(), Some(SegmentState::Live));
    assert_eq!(view.holder(), SegmentHolder::Owner);
    assert_eq!(view.owner_pid(), std::process::id());
    assert_eq!(Some(view.keeper_pid()), cache.keeper_pid());
    assert_eq!(view.capacity_max_bytes(), cache.capacity_max_bytes());

    let stats = cache.publish_stats();
    let published = view.stats().unwrap().expect("published");
    assert_eq!(published.stats, stats, "the view reads what was published");
    assert!(published.missing.is_empty() && published.unknown.is_empty());
    assert_eq!(published.publisher_pid, std::process::id());
    assert_eq!(stats.dirty_pages, 256);
    assert!(stats.hits > 0 && stats.misses > 0);

    let files = view.files();
    let find = |path: &Path| {
        let path = path.canonicalize().unwrap();
        files
            .iter()
            .find(|f| f.path.as_deref() == Some(path.as_path()))
            .unwrap_or_else(|| panic!("{} in {files:?}", path.display()))
            .clone()
    };
    let (r, w) = (find(&read), find(&written));
    assert_eq!(
        (r.cached_pages, r.dirty_pages, r.writeback_pages),
        (512, 0, 0)
    );
    assert_eq!((w.cached_pages, w.dirty_pages), (256, 256));
    assert_eq!(w.size_bytes, Some(1 << 20));
    assert_eq!(files.len(), 2);
    assert_eq!(files[0].path, r.path, "most cached first");
    let cached: u64 = files.iter().map(|f| f.cached_pages).sum();
    assert_eq!(cached * folio::PAGE_BYTES as u64, stats.cached_bytes);

    // The writeback thread publishes on its own, about once a second.
    let before = published.publishes;
    let started = Instant::now();
    while view.stats().unwrap().unwrap().publishes == before {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no periodic publish"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // The drop publishes the figures after its final writeback; a view still mapping
    // the segment (removed by the clean drop) reads them.
    let at_exit = cache.stats();
    drop(handles);
    drop(cache);
    let last = view.stats().unwrap().unwrap().stats;
    assert_eq!((last.hits, last.misses), (at_exit.hits, at_exit.misses));
    assert_eq!(last.dirty_pages, 0);
    assert_eq!(last.pages_written_back, at_exit.pages_written_back + 256);
    assert!(!segment.exists(), "a clean drop removes an unnamed segment");
}

#[test]
fn segments_are_listed_refused_in_use_and_removed_when_nobody_holds_them() {
    let data = common::test_dir();
    let dir = segment_dir();
    let cache = persistent_cache(dir.path());
    let handles = read_and_write(&cache, &data.path().join("r"), &data.path().join("w"));
    let segment = cache.segment_path().unwrap();
    // A second name for the segment outlives the drop's removal of the first: a segment
    // nobody holds, written, with the last figures.
    let kept = dir.path().join("kept");
    std::fs::hard_link(&segment, &kept).unwrap();

    let listed = folio::segments_in(dir.path()).unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    for info in &listed {
        assert_eq!(info.holder, SegmentHolder::Owner);
        assert_eq!(info.state, Some(SegmentState::Live));
        assert_eq!(info.owner_pid, std::process::id());
        assert!(info.unreadable.is_none());
        assert!(info.resident_bytes > 0 && info.size_bytes >= info.resident_bytes);
    }
    let e = folio::remove_segment(&segment).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}");
    assert!(segment.exists());

    let at_exit = {
        drop(handles);
        let stats = cache.stats();
        drop(cache);
        stats
    };
    wait_for_nobody(&kept);
    let listed = folio::segments_in(dir.path()).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].holder, listed[0].state),
        (SegmentHolder::Nobody, Some(SegmentState::Written))
    );
    let view = SegmentView::open(&kept).unwrap();
    let last = view.stats().unwrap().unwrap().stats;
    assert_eq!((last.hits, last.misses), (at_exit.hits, at_exit.misses));
    assert!(view.files().iter().all(|f| f.dirty_pages == 0));
    drop(view);
    folio::remove_segment(&kept).unwrap();
    assert!(!kept.exists());
    assert!(folio::segments_in(dir.path()).unwrap().is_empty());
}

#[test]
fn what_is_not_one_of_our_segments_is_refused_with_its_reason() {
    let dir = segment_dir();
    let path = |name: &str| -> PathBuf { dir.path().join(name) };
    let kind = |p: &Path| SegmentView::open(p).unwrap_err().kind();

    assert_eq!(kind(&path("missing")), io::ErrorKind::NotFound);
    std::fs::write(path("garbage"), vec![0xabu8; 8192]).unwrap();
    std::fs::set_permissions(path("garbage"), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(kind(&path("garbage")), io::ErrorKind::InvalidData);
    let e = folio::remove_segment(path("garbage")).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "not a segment: kept");
    assert!(path("garbage").exists());

    // A live segment reached through a symlink, or made readable by others.
    let other = segment_dir();
    let cache = persistent_cache(other.path());
    let segment = cache.segment_path().unwrap();
    std::os::unix::fs::symlink(&segment, path("link")).unwrap();
    assert_eq!(kind(&path("link")), io::ErrorKind::PermissionDenied);
    assert_eq!(
        folio::remove_segment(path("link")).unwrap_err().kind(),
        io::ErrorKind::PermissionDenied
    );
    std::fs::set_permissions(&segment, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(kind(&segment), io::ErrorKind::PermissionDenied);
    std::fs::set_permissions(&segment, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(SegmentView::open(&segment).is_ok());
    // Another user's (root can give it away; others cannot, and skip this step).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(&segment, Some(4242), None).unwrap();
        assert_eq!(kind(&segment), io::ErrorKind::PermissionDenied);
        std::os::unix::fs::chown(&segment, Some(0), None).unwrap();
    }
    drop(cache);
}

#[test]
fn a_named_segment_left_by_a_clean_drop_shows_the_figures_at_exit() {
    let data = common::test_dir();
    let dir = segment_dir();
    let build = || {
        Cache::builder()
            .capacity_bytes(64 << 20)
            .persistent(true)
            .segment_dir(dir.path())
            .segment_name("db")
            .kept_memory(folio::KeptMemory {
                steward: true,
                ..folio::KeptMemory::default()
            })
            .build()
            .unwrap()
    };
    let cache = build();
    let handles = read_and_write(&cache, &data.path().join("r"), &data.path().join("w"));
    drop(handles);
    let at_exit = cache.stats();
    drop(cache);
    let segment = dir.path().join("db");
    wait_for_nobody(&segment);
    let view = SegmentView::open(&segment).unwrap();
    assert_eq!(view.state(), Some(SegmentState::Written));
    assert_eq!(
        view.holder(),
        SegmentHolder::Steward,
        "a kept segment's keeper stays"
    );
    let last = view.stats().unwrap().unwrap().stats;
    assert_eq!((last.hits, last.misses), (at_exit.hits, at_exit.misses));
    assert_eq!(last.dirty_pages, 0);
    assert!(view.files().iter().all(|f| f.dirty_pages == 0));
    drop(view);
    // The next cache of the name adopts it, and publishes its own figures.
    let cache = build();
    assert_eq!(
        SegmentView::open(&segment).unwrap().holder(),
        SegmentHolder::Owner
    );
    let stats = cache.publish_stats();
    let view = SegmentView::open(&segment).unwrap();
    assert_eq!(view.stats().unwrap().unwrap().stats, stats);
    assert_eq!(
        folio::remove_segment(&segment).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    drop(cache);
    wait_for_nobody(&segment);
    // The first cache's steward holds its lock until it sees the adoption (its next tick),
    // so the second keeper may still be taking over: removal waits for it.
    let started = Instant::now();
    while let Err(e) = folio::remove_segment(&segment) {
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}");
        assert!(started.elapsed() < Duration::from_secs(30), "{e}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
