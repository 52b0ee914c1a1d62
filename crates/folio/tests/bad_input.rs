//! Every case of DESIGN.md §6 that applies to reads gets a clear error and loses nothing.
//! (A closed or dangling handle cannot be expressed in Rust: `File` is closed by dropping
//! it, and the borrow checker rejects a use after that; the C ABI tests those cases.)

mod common;

use std::io::ErrorKind;
use std::time::Duration;

use folio::Cache;

const SALT: u64 = 42;

fn cache() -> Cache {
    Cache::builder().capacity_bytes(8 << 20).build().unwrap()
}

#[test]
fn missing_file_is_not_found() {
    let dir = common::test_dir();
    let err = cache().open(dir.path().join("nope")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

#[test]
fn a_path_through_a_file_is_an_error() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 100);
    let err = cache().open(path.join("child")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTDIR));
}

#[test]
fn unreadable_file_is_permission_denied() {
    let dir = common::test_dir();
    let path = dir.path().join("secret");
    common::write_pattern_file(&path, SALT, 100);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
    // Root reads anything: the case only exists for other users.
    if std::fs::File::open(&path).is_ok() {
        eprintln!("running as root: permission checks do not apply");
        return;
    }
    assert_eq!(
        cache().open(&path).unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
}

#[test]
fn a_directory_is_refused() {
    let dir = common::test_dir();
    let err = cache().open(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::IsADirectory);
    assert!(err.to_string().contains("is a directory"));
}

#[test]
fn a_capacity_below_the_minimum_is_refused() {
    let err = Cache::builder().capacity_bytes(4096).build().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("minimum"), "{err}");
    assert!(Cache::builder()
        .capacity_bytes(folio::CAPACITY_BYTES_MIN)
        .build()
        .is_ok());
}

#[test]
fn a_zero_length_read_returns_zero_and_does_no_io() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 10_000);
    let cache = cache();
    let file = cache.open(&path).unwrap();
    assert_eq!(file.read_at(&mut [], 0).unwrap(), 0);
    assert_eq!(file.read_at(&mut [], u64::MAX).unwrap(), 0);
    assert_eq!(cache.stats().io_requests, 0);
}

#[test]
fn reads_past_the_end_are_short_then_zero() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 10_000);
    let file = cache().open(&path).unwrap();
    let mut buf = vec![0u8; 5000];
    assert_eq!(file.read_at(&mut buf, 8000).unwrap(), 2000);
    common::check_pattern(SALT, 8000, &buf[..2000]).unwrap();
    assert_eq!(file.read_at(&mut buf, 10_000).unwrap(), 0);
    assert_eq!(file.read_at(&mut buf, 1 << 40).unwrap(), 0);
    assert_eq!(
        file.get_page(10_000).unwrap_err().kind(),
        ErrorKind::UnexpectedEof
    );
    let empty = dir.path().join("empty");
    std::fs::File::create(&empty).unwrap();
    let file = cache().open(&empty).unwrap();
    assert!(file.is_empty());
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), 0);
}

#[test]
fn an_overflowing_length_is_invalid_input() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 10_000);
    let file = cache().open(&path).unwrap();
    let mut buf = vec![0u8; 100];
    let err = file.read_at(&mut buf, u64::MAX - 10).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("overflows"));
    // Nothing was lost: the handle still reads.
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), 100);
}

#[test]
fn a_file_that_shrinks_underneath_never_returns_stale_bytes() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 1 << 20);
    let cache = cache();
    let file = cache.open(&path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    // Cache the first half only (no readahead past it: a page cached before the
    // truncation is only found stale by a size check, `refresh_len` or a reopen).
    file.advise(0, 0, folio::Advice::Random).unwrap();
    assert_eq!(file.read_at(&mut buf[..512 << 10], 0).unwrap(), 512 << 10);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(300_000)
        .unwrap();
    // A miss past the new end finds the file shorter: the read is short, not stale.
    let n = file.read_at(&mut buf[..4096], 700_000).unwrap();
    assert_eq!(n, 0, "nothing exists past the new end");
    assert_eq!(file.len(), 300_000, "the mapping adopted the new size");
    // The cached pages past the new end were dropped: no stale byte comes back.
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), 300_000);
    assert_eq!(file.read_at(&mut buf[..100], 400_000).unwrap(), 0);
    common::check_pattern(SALT, 0, &buf[..300_000]).unwrap();
    assert!(cache.stats().invalidated_pages > 0);
    // The file grows again with new bytes: none of the old bytes past 300,000 survive.
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(&vec![0xEE; 200_000]).unwrap();
    }
    assert_eq!(file.refresh_len().unwrap(), 500_000);
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), 500_000);
    common::check_pattern(SALT, 0, &buf[..300_000]).unwrap();
    assert!(
        buf[300_000..500_000].iter().all(|&b| b == 0xEE),
        "appended bytes, not stale ones"
    );
}

#[test]
fn a_shrink_of_a_fully_cached_file_is_seen_by_refresh_and_reopen() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 100_000);
    let cache = cache();
    let file = cache.open(&path).unwrap();
    let mut buf = vec![0u8; 100_000];
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), 100_000);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(50_000)
        .unwrap();
    assert_eq!(file.refresh_len().unwrap(), 50_000);
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), 50_000);
    // Rewritten with new content and a new size: a reopen drops every old page.
    std::thread::sleep(Duration::from_millis(20));
    common::write_pattern_file(&path, SALT + 1, 80_000);
    let again = cache.open(&path).unwrap();
    assert_eq!(again.len(), 80_000);
    assert_eq!(again.read_at(&mut buf, 0).unwrap(), 80_000);
    common::check_pattern(SALT + 1, 0, &buf[..80_000]).unwrap();
}

#[test]
fn two_opens_of_one_file_share_its_pages() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 1 << 20);
    let cache = cache();
    let a = cache.open(&path).unwrap();
    let b = cache.open(&path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    a.read_at(&mut buf, 0).unwrap();
    let before = cache.stats();
    b.read_at(&mut buf, 0).unwrap();
    let after = cache.stats();
    assert_eq!(
        after.io_requests, before.io_requests,
        "the second handle hits"
    );
    assert!(after.hits > before.hits);
    common::check_pattern(SALT, 0, &buf).unwrap();
}

#[test]
fn a_cache_dropped_while_files_live_keeps_them_working() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 1 << 20);
    let cache = cache();
    let file = cache.open(&path).unwrap();
    drop(cache);
    let mut buf = vec![0u8; 4096];
    assert_eq!(file.read_at(&mut buf, 12_345).unwrap(), 4096);
    common::check_pattern(SALT, 12_345, &buf).unwrap();
}
