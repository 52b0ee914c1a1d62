//! Warm restart (DESIGN.md §9, docs/persistence.md): a cache built with the name of a
//! segment a previous cache left adopts its clean pages, and drops every page of a file
//! that changed meanwhile, in each way a file can change. Each case builds, drops and
//! builds again in this process (the clean exit); kills are `adoption_kill.rs`'s.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use folio::{Cache, Unusable};

const NAME: &str = "restart";

fn builder(segments: &Path) -> folio::CacheBuilder {
    Cache::builder()
        .capacity_bytes(64 << 20)
        .persistent(true)
        .segment_dir(segments)
        .segment_name(NAME)
}

/// `len` bytes, distinct per `seed` and offset.
fn content(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (seed.wrapping_mul(131).wrapping_add(k as u64 * 7) % 251) as u8)
        .collect()
}

fn read_all(cache: &Cache, path: &Path) -> Vec<u8> {
    let file = cache.open(path).unwrap();
    let mut buf = vec![0u8; file.len() as usize];
    let n = file.read_at(&mut buf, 0).unwrap();
    buf.truncate(n);
    buf
}

/// Two files cached by a first cache: `read` (written by `std::fs`, read through the
/// cache) and `written` (written through the cache). Returns the data directory.
fn first_life(segments: &Path, data: &Path) {
    // Read just after it is made: its stamp at open is in the clock tick of its last
    // change, and proves nothing until the drop confirms it (`Segment::confirm_stamps`).
    std::fs::write(data.join("read"), content(1, 1 << 20)).unwrap();
    let cache = builder(segments).build().unwrap();
    assert!(cache.adoption().is_none(), "a new segment adopts nothing");
    assert_eq!(read_all(&cache, &data.join("read")), content(1, 1 << 20));
    let w = cache
        .open_options()
        .write(true)
        .create(true)
        .open(data.join("written"))
        .unwrap();
    w.write_at(&content(2, 300_000), 0).unwrap();
    drop(w);
    drop(cache);
    // A clean drop leaves a named segment.
    assert!(segments.join(NAME).exists(), "the named segment stays");
}

/// A persistent cache without a name in the same directory: its build settles the
/// directory (`settle_dir`), as any new cache there does.
fn another_cache(segments: &Path) -> Cache {
    Cache::builder()
        .capacity_bytes(16 << 20)
        .persistent(true)
        .segment_dir(segments)
        .build()
        .unwrap()
}

/// A private segment directory on tmpfs (as segment directories must be), and a data
/// directory.
fn dirs() -> (tempfile::TempDir, tempfile::TempDir) {
    let segments = tempfile::Builder::new()
        .prefix("folio-adoption-test-")
        .tempdir_in("/dev/shm")
        .unwrap();
    std::fs::set_permissions(segments.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    (segments, tempfile::tempdir().unwrap())
}

#[test]
fn a_restart_finds_its_pages_cached() {
    let (segments, data) = dirs();
    first_life(segments.path(), data.path());
    let cache = builder(segments.path()).build().unwrap();
    let adoption = cache.adoption().expect("the segment was adopted").clone();
    let pages = (1u64 << 20) / 4096 + 300_000u64.div_ceil(4096);
    assert_eq!(adoption.pages_kept, pages, "{adoption:?}");
    assert_eq!(adoption.files_kept, 2);
    assert_eq!(adoption.pages_dropped, 0, "{adoption:?}");
    let before = cache.stats();
    assert_eq!(
        read_all(&cache, &data.path().join("read")),
        content(1, 1 << 20)
    );
    assert_eq!(
        read_all(&cache, &data.path().join("written")),
        content(2, 300_000)
    );
    let after = cache.stats();
    assert_eq!(
        after.misses, before.misses,
        "every byte came from the adopted pages"
    );
}

/// How a file changes between two caches, and the bytes it then holds.
fn change(how: &str, path: &Path) -> Vec<u8> {
    match how {
        "written-in-place" => {
            let new = content(9, 4096);
            std::fs::File::options()
                .write(true)
                .open(path)
                .unwrap()
                .write_all_at(&new, 8192)
                .unwrap();
            let mut all = std::fs::read(path).unwrap();
            all.truncate(all.len());
            all
        }
        "truncated" => {
            let f = OpenOptions::new().write(true).open(path).unwrap();
            f.set_len(10_000).unwrap();
            std::fs::read(path).unwrap()
        }
        "extended" => {
            let mut f = OpenOptions::new().append(true).open(path).unwrap();
            f.write_all(&content(8, 5000)).unwrap();
            std::fs::read(path).unwrap()
        }
        "replaced-by-rename" => {
            let tmp = path.with_extension("tmp");
            let len = std::fs::metadata(path).unwrap().len() as usize;
            std::fs::write(&tmp, content(7, len)).unwrap();
            std::fs::rename(&tmp, path).unwrap();
            content(7, len)
        }
        "deleted-and-recreated-same-size-and-mtime" => {
            // ext4 often gives the new file the old inode number.
            let meta = std::fs::metadata(path).unwrap();
            let len = meta.len() as usize;
            std::fs::remove_file(path).unwrap();
            std::fs::write(path, content(6, len)).unwrap();
            let f = std::fs::File::options().write(true).open(path).unwrap();
            f.set_modified(meta.modified().unwrap()).unwrap();
            content(6, len)
        }
        "restored-with-old-mtime" => {
            let meta = std::fs::metadata(path).unwrap();
            let f = std::fs::File::options().write(true).open(path).unwrap();
            f.write_all_at(&[0xAB; 100], 0).unwrap();
            f.set_modified(meta.modified().unwrap()).unwrap();
            std::fs::read(path).unwrap()
        }
        _ => unreachable!(),
    }
}

#[test]
fn a_file_changed_between_two_caches_loses_its_pages() {
    for how in [
        "written-in-place",
        "truncated",
        "extended",
        "replaced-by-rename",
        "deleted-and-recreated-same-size-and-mtime",
        "restored-with-old-mtime",
    ] {
        for target in ["read", "written"] {
            let (segments, data) = dirs();
            first_life(segments.path(), data.path());
            let path = data.path().join(target);
            let now = change(how, &path);
            let cache = builder(segments.path()).build().unwrap();
            let adoption = cache.adoption().unwrap().clone();
            assert_eq!(
                (adoption.files_kept, adoption.files_dropped),
                (1, 1),
                "{how} {target}: {adoption:?}"
            );
            assert_eq!(read_all(&cache, &path), now, "{how} {target}: stale bytes");
        }
    }
}

#[test]
fn a_deleted_file_loses_its_pages_and_the_other_stays() {
    let (segments, data) = dirs();
    first_life(segments.path(), data.path());
    std::fs::remove_file(data.path().join("read")).unwrap();
    let cache = builder(segments.path()).build().unwrap();
    let adoption = cache.adoption().unwrap();
    assert_eq!((adoption.files_kept, adoption.files_dropped), (1, 1));
    assert_eq!(adoption.pages_of_changed_files, 256);
}

#[test]
fn a_segment_in_use_is_refused_and_one_of_another_layout_replaced_or_refused() {
    let (segments, data) = dirs();
    let live = builder(segments.path()).build().unwrap();
    let e = builder(segments.path()).build().unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
    drop(live);
    // Damage the header: another layout.
    let seg = segments.path().join(NAME);
    let f = std::fs::File::options().write(true).open(&seg).unwrap();
    f.write_all_at(&[0xFF; 16], 8).unwrap();
    drop(f);
    let e = builder(segments.path())
        .unusable_segment(Unusable::Refuse)
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
    assert!(seg.exists(), "a refused segment stays as it was");
    let cache = builder(segments.path()).build().unwrap();
    assert!(cache.adoption().unwrap().replaced);
    std::fs::write(data.path().join("x"), content(3, 8192)).unwrap();
    assert_eq!(read_all(&cache, &data.path().join("x")), content(3, 8192));
}

#[test]
fn garbage_a_symlink_or_a_loose_mode_is_never_adopted() {
    let (segments, _data) = dirs();
    for name in ["..", "sub/x", ""] {
        let e = builder(segments.path())
            .segment_name(name)
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{name:?}: {e}");
    }
    let seg = segments.path().join(NAME);
    std::fs::write(&seg, vec![0x5Au8; 1 << 20]).unwrap();
    std::fs::set_permissions(&seg, std::fs::Permissions::from_mode(0o600)).unwrap();
    let cache = builder(segments.path()).build().unwrap();
    assert!(cache.adoption().unwrap().replaced, "garbage is replaced");
    drop(cache);
    std::fs::set_permissions(&seg, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = builder(segments.path()).build().unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    std::fs::set_permissions(&seg, std::fs::Permissions::from_mode(0o600)).unwrap();
    let real = segments.path().join("real");
    std::fs::rename(&seg, &real).unwrap();
    std::os::unix::fs::symlink(&real, &seg).unwrap();
    let e = builder(segments.path()).build().unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
}

#[test]
fn a_smaller_or_larger_cache_keeps_what_fits() {
    let (segments, data) = dirs();
    std::fs::write(data.path().join("big"), content(4, 40 << 20)).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let cache = builder(segments.path()).build().unwrap();
    assert_eq!(read_all(&cache, &data.path().join("big")).len(), 40 << 20);
    drop(cache);
    let small = builder(segments.path())
        .capacity_bytes(16 << 20)
        .build()
        .unwrap();
    let adoption = small.adoption().unwrap().clone();
    assert!(
        adoption.pages_kept > 0 && adoption.pages_kept <= 4096,
        "{adoption:?}"
    );
    assert_eq!(
        read_all(&small, &data.path().join("big")),
        content(4, 40 << 20)
    );
    drop(small);
    let large = builder(segments.path())
        .capacity_bytes(256 << 20)
        .build()
        .unwrap();
    assert!(large.adoption().unwrap().pages_kept > 0);
    assert_eq!(
        read_all(&large, &data.path().join("big")),
        content(4, 40 << 20)
    );
    drop(large);
    std::thread::sleep(Duration::from_millis(10));
}

#[test]
fn a_slot_a_kill_left_torn_costs_its_pages_only() {
    let (segments, data) = dirs();
    first_life(segments.path(), data.path());
    // Slot 0 (the first file opened) as a kill mid-update leaves it: its sequence odd.
    let slots_offset = 4096 + (64 << 10);
    let seg = std::fs::File::options()
        .read(true)
        .write(true)
        .open(segments.path().join(NAME))
        .unwrap();
    let mut seq = [0u8; 8];
    seg.read_exact_at(&mut seq, slots_offset).unwrap();
    let odd = (u64::from_le_bytes(seq) | 1).to_le_bytes();
    seg.write_all_at(&odd, slots_offset).unwrap();
    drop(seg);
    let cache = builder(segments.path()).build().unwrap();
    let adoption = cache.adoption().unwrap().clone();
    assert_eq!(
        (adoption.files_kept, adoption.files_dropped),
        (1, 1),
        "{adoption:?}"
    );
    assert_eq!(
        read_all(&cache, &data.path().join("read")),
        content(1, 1 << 20)
    );
    assert_eq!(
        read_all(&cache, &data.path().join("written")),
        content(2, 300_000)
    );
}

/// A named cache that never opened a file (its owner died, or left, before the first
/// open) leaves a segment that names no file: no database of it was deleted, so the next
/// cache in the directory keeps it, and the next cache of its name adopts it (found by the
/// kill test: a kill 0-5 ms after the build).
#[test]
fn a_kept_segment_that_names_no_file_stays_for_the_next_cache_of_its_name() {
    let (segments, _data) = dirs();
    drop(builder(segments.path()).build().unwrap());
    let other = another_cache(segments.path());
    assert!(
        segments.path().join(NAME).exists(),
        "it names no file, so none of its files is gone: it stays"
    );
    drop(other);
    let again = builder(segments.path()).build().unwrap();
    let adoption = again
        .adoption()
        .expect("the next cache of its name adopts it");
    assert_eq!((adoption.pages_kept, adoption.files_kept), (0, 0));
}

#[test]
fn a_kept_segment_whose_files_are_all_gone_is_removed_by_the_next_cache_in_its_dir() {
    let (segments, data) = dirs();
    first_life(segments.path(), data.path());
    std::fs::remove_file(data.path().join("read")).unwrap();
    let other = another_cache(segments.path());
    assert!(
        segments.path().join(NAME).exists(),
        "one of its files is left: it stays"
    );
    drop(other);
    std::fs::remove_file(data.path().join("written")).unwrap();
    let other = another_cache(segments.path());
    assert!(
        !segments.path().join(NAME).exists(),
        "its database is gone: so is its memory"
    );
    drop(other);
}
