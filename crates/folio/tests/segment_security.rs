//! A persistent cache's segment is refused where it is not safe (DESIGN.md §9, issue 31):
//! each refusal is an error that says what is wrong and changes nothing.
//!
//! - `unsafe_segment_dirs_are_refused`: building a persistent cache fails in a segment
//!   directory that is a symlink, that others may write (sticky or not), or (as root)
//!   that another user owns (sticky or not); no segment appears. A directory of ours that
//!   only we can write is used.
//! - `the_default_home_is_private`: a persistent cache's segment goes to
//!   `/dev/shm/folio-<uid>`, mode 0700, ours; a file another user put at the segment's
//!   name in `/dev/shm` is not in the way. As root: a user whose home another user made
//!   first (fork + setuid) gets `PermissionDenied` saying so, and nothing is made in it.
//! - `hostile_dirs_are_refused_at_adoption_and_recovery`: a named segment of ours is
//!   neither adopted, recovered, listed nor removed through a symlinked directory, a
//!   symlink in a middle component, or its directory made writable by others; it is
//!   adopted again once the directory is safe.
//! - `disk_dirs_and_bad_names_are_refused`: a `segment_dir` on a disk file system fails
//!   with `Unsupported` unless `DiskDir::Allowed`; names with a newline, a leading `-`,
//!   a `/`, or over 255 bytes fail with `InvalidInput` and create nothing.
//! - `unsafe_segments_are_not_recovered`: a child leaves a real segment behind with dirty
//!   pages (its keeper killed first, then the child), and `folio::recover_segment` refuses
//!   it while it is in use, through a symlink, readable by others (mode 0644), owned by
//!   another user (as root; skipped otherwise), with another layout version, and refuses a
//!   truncated copy and a file of garbage; none of these changes the segment, the copies or
//!   the data file. Then the segment as it was is recovered, and the data file holds what
//!   the child wrote: the refusals were the changes', not the segment's.
//!
//! The child is this test binary run again with `FOLIO_SEGMENT_SECURITY_CHILD` set
//! (`common/harness.rs`); it says `ready <segment path> <keeper pid>` once its writes
//! returned, and then waits to be killed.

mod common;
#[path = "common/harness.rs"]
mod harness;

use std::hash::Hasher as _;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use folio::Cache;
use harness::{say, Child};

const CHILD_ENV: &str = "FOLIO_SEGMENT_SECURITY_CHILD";
const READY_WAIT_MAX: Duration = Duration::from_secs(30);
const KEEPER_WAIT_MAX: Duration = Duration::from_secs(30);
/// What the child writes: this many bytes of the pattern, salted (`common::pattern`).
const DATA_BYTES: u64 = (1 << 20) + 1000;
const SALT: u64 = 0x5e65_3e47;
/// The segment header's layout version: a u32 after the 8-byte magic
/// (`segment::layout::Header`).
const VERSION_OFFSET: u64 = 8;
/// The uid and gid of `nobody`.
const NOBODY: u32 = 65534;

fn main() {
    harness::main(
        &[
            (
                "unsafe_segment_dirs_are_refused",
                unsafe_segment_dirs_are_refused,
            ),
            (
                "unsafe_segments_are_not_recovered",
                unsafe_segments_are_not_recovered,
            ),
            ("the_default_home_is_private", the_default_home_is_private),
            (
                "hostile_dirs_are_refused_at_adoption_and_recovery",
                hostile_dirs_are_refused_at_adoption_and_recovery,
            ),
            (
                "disk_dirs_and_bad_names_are_refused",
                disk_dirs_and_bad_names_are_refused,
            ),
        ],
        CHILD_ENV,
        child,
    );
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).expect("chown");
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn entries(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .expect("read a directory")
        .map(|e| e.expect("an entry").file_name())
        .collect();
    names.sort();
    names
}

fn persistent_in(dir: &Path) -> io::Result<Cache> {
    Cache::builder()
        .capacity_bytes(4 << 20)
        .persistent(true)
        .segment_dir(dir)
        .build()
}

/// `build` in `dir` must fail with `kind`, and leave `dir` as it was.
fn refused_dir(dir: &Path, kind: io::ErrorKind, what: &str) {
    let before = std::fs::read_dir(dir).ok().map(|_| entries(dir));
    let error = match persistent_in(dir) {
        Ok(cache) => panic!(
            "a segment directory {what} was used: {:?}",
            cache.segment_path()
        ),
        Err(e) => e,
    };
    eprintln!("segment directory {what}: {error}");
    assert_eq!(error.kind(), kind, "{what}: {error}");
    assert!(
        error.to_string().contains(&*dir.to_string_lossy()),
        "{what}: the error does not name the directory: {error}"
    );
    let after = std::fs::read_dir(dir).ok().map(|_| entries(dir));
    assert_eq!(before, after, "{what}: the directory changed");
}

fn unsafe_segment_dirs_are_refused() {
    harness::become_subreaper();
    let base = tempfile::Builder::new()
        .prefix("folio-segment-security-")
        .tempdir_in("/dev/shm")
        .expect("a directory in /dev/shm");
    let good = base.path().join("good");
    std::fs::create_dir(&good).unwrap();
    set_mode(&good, 0o700);

    let link = base.path().join("link");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    refused_dir(&link, io::ErrorKind::PermissionDenied, "that is a symlink");
    assert!(
        entries(&good).is_empty(),
        "a segment appeared behind the symlink"
    );

    let open = base.path().join("open");
    std::fs::create_dir(&open).unwrap();
    set_mode(&open, 0o777);
    refused_dir(
        &open,
        io::ErrorKind::PermissionDenied,
        "writable by all, not sticky",
    );
    set_mode(&open, 0o770);
    refused_dir(
        &open,
        io::ErrorKind::PermissionDenied,
        "writable by its group, not sticky",
    );
    set_mode(&open, 0o1777);
    refused_dir(
        &open,
        io::ErrorKind::PermissionDenied,
        "writable by all, sticky (as /dev/shm)",
    );

    if is_root() {
        let theirs = base.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        set_mode(&theirs, 0o755);
        chown(&theirs, NOBODY);
        refused_dir(
            &theirs,
            io::ErrorKind::PermissionDenied,
            "of another user, not sticky",
        );
        let sticky = base.path().join("sticky-theirs");
        std::fs::create_dir(&sticky).unwrap();
        set_mode(&sticky, 0o1777);
        chown(&sticky, NOBODY);
        refused_dir(
            &sticky,
            io::ErrorKind::PermissionDenied,
            "of another user, sticky (its owner could rename or remove our segment)",
        );
    } else {
        eprintln!("not root: a directory of another user is not tried");
    }

    // The control: a directory of ours that only we can write is used (others may read
    // and search it), and a cache dropped with nothing dirty removes its segment (and
    // dismisses its keeper).
    set_mode(&open, 0o755);
    let cache = persistent_in(&open).expect("a directory only we can write is used");
    let segment = cache.segment_path().expect("a segment");
    let keeper = cache.keeper_pid().expect("a keeper");
    assert!(segment.starts_with(&open) && segment.exists());
    // A name of its own, so that killing the owner by its name spares the keeper.
    let comm = std::fs::read_to_string(format!("/proc/{keeper}/comm")).unwrap();
    assert_eq!(comm.trim_end(), "folio-keeper");
    drop(cache);
    let status = harness::wait_for_exit(keeper, KEEPER_WAIT_MAX, "the keeper of a dropped cache");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the keeper of a cache dropped clean ended with wait status {status:#x}"
    );
    assert!(!segment.exists(), "a cache dropped clean left its segment");
}

// ---------------------------------------------------------------------------------------
// The recovery's refusals.

/// The child: `spec` is "<segment dir> <data path>". Writes the pattern into the data file
/// through a persistent cache that writes nothing back on its own, says `ready`, and
/// waits to be killed.
fn child(spec: &str) {
    let (segment_dir, data) = spec.split_once(' ').expect("child: a spec");
    let cache = Cache::builder()
        .capacity_bytes(16 << 20)
        .dirty_limit_bytes(8 << 20)
        .dirty_background_bytes(8 << 20)
        .dirty_expire(Duration::from_secs(600))
        .write_behind_bytes(0)
        .persistent(true)
        .segment_dir(segment_dir)
        .build()
        .expect("child: a persistent cache");
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(data)
        .expect("child: open the data file");
    let bytes = common::pattern(SALT, 0, DATA_BYTES as usize);
    for (i, chunk) in bytes.chunks(100_000).enumerate() {
        file.write_at(chunk, i as u64 * 100_000)
            .expect("child: write_at");
    }
    say(&format!(
        "ready {} {}",
        cache.segment_path().expect("a segment").display(),
        cache.keeper_pid().expect("a keeper")
    ));
    std::thread::sleep(Duration::from_secs(60));
    std::process::exit(3);
}

/// A segment's stats area (`segment/layout.rs`: `STATS_OFFSET`, `STATS_BYTES`).
const STATS_START: usize = 4096;
const STATS_END: usize = STATS_START + (64 << 10);

/// What a refusal must not change: a file's bytes (hashed, a segment's stats area left
/// out) and who it is.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    len: u64,
    mode: u32,
    uid: u32,
    ino: u64,
    bytes_hash: u64,
}

fn snapshot(path: &Path) -> Snapshot {
    let meta = std::fs::symlink_metadata(path).expect("stat");
    let mut bytes = std::fs::read(path).expect("read");
    // A live owner publishes its counters in its segment's stats area (after the 4 KiB
    // header, 64 KiB) about once a second: those bytes move by themselves.
    if bytes.starts_with(b"FOLIOSEG") && bytes.len() >= STATS_END {
        bytes[STATS_START..STATS_END].fill(0);
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    hasher.write(&bytes);
    Snapshot {
        len: meta.len(),
        mode: meta.mode(),
        uid: meta.uid(),
        ino: meta.ino(),
        bytes_hash: hasher.finish(),
    }
}

/// `recover_segment(path)` must fail with `kind`, naming what is wrong, and change none
/// of `untouched`.
fn refused(path: &Path, kind: io::ErrorKind, what: &str, untouched: &[&Path]) {
    let before: Vec<Snapshot> = untouched.iter().map(|p| snapshot(p)).collect();
    let error = match folio::recover_segment(path) {
        Ok(recovered) => panic!("a segment {what} was recovered: {recovered:?}"),
        Err(e) => e,
    };
    eprintln!("segment {what}: {error}");
    assert_eq!(error.kind(), kind, "{what}: {error}");
    let after: Vec<Snapshot> = untouched.iter().map(|p| snapshot(p)).collect();
    assert_eq!(
        before, after,
        "{what}: a refused recovery changed {untouched:?}"
    );
    assert!(path.exists() || std::fs::symlink_metadata(path).is_ok());
}

fn unsafe_segments_are_not_recovered() {
    harness::become_subreaper();
    let dir = common::test_dir();
    let segment_dir = tempfile::Builder::new()
        .prefix("folio-segment-security-")
        .tempdir_in("/dev/shm")
        .expect("a directory in /dev/shm");
    let data = dir.path().join("data");
    let mut child = Child::spawn(
        CHILD_ENV,
        &format!("{} {}", segment_dir.path().display(), data.display()),
    );
    let line = child.next_line(READY_WAIT_MAX, "ready");
    let (segment, keeper) = line
        .strip_prefix("ready ")
        .and_then(|rest| rest.rsplit_once(' '))
        .map(|(path, pid)| (PathBuf::from(path), pid.parse::<u32>().expect("a pid")))
        .unwrap_or_else(|| panic!("a bad line from the child: {line:?}"));
    let untouched = [segment.as_path(), data.as_path()];

    // In use: by the owner and its keeper, then by the owner alone.
    refused(
        &segment,
        io::ErrorKind::WouldBlock,
        "in use by its owner and keeper",
        &untouched,
    );
    // SAFETY: kill takes integers; the keeper is this process's child (a subreaper's),
    // so its pid is not reused before it is reaped.
    unsafe { libc::kill(keeper as libc::pid_t, libc::SIGKILL) };
    harness::wait_for_exit(keeper, KEEPER_WAIT_MAX, "the killed keeper");
    refused(
        &segment,
        io::ErrorKind::WouldBlock,
        "in use by its owner",
        &untouched,
    );
    child.kill();
    child.rest_of_lines();
    assert!(
        segment.exists(),
        "the segment went with its owner and keeper"
    );

    let link = segment_dir.path().join("link");
    std::os::unix::fs::symlink(&segment, &link).unwrap();
    refused(
        &link,
        io::ErrorKind::PermissionDenied,
        "that is a symlink",
        &untouched,
    );
    std::fs::remove_file(&link).unwrap();

    // The mode as the keeper left it (its vouch mark, `S_ISVTX`, set at its start), put
    // back after the loose modes below.
    let left = std::fs::metadata(&segment).unwrap().permissions().mode() & 0o7777;
    assert_eq!(
        left, 0o1600,
        "a killed keeper's segment: vouched for, not finished"
    );
    set_mode(&segment, 0o644);
    refused(
        &segment,
        io::ErrorKind::PermissionDenied,
        "readable by others (0644)",
        &untouched,
    );
    set_mode(&segment, 0o640);
    refused(
        &segment,
        io::ErrorKind::PermissionDenied,
        "readable by its group (0640)",
        &untouched,
    );
    set_mode(&segment, left);

    if is_root() {
        chown(&segment, NOBODY);
        refused(
            &segment,
            io::ErrorKind::PermissionDenied,
            "of another user",
            &untouched,
        );
        chown(&segment, 0);
    } else {
        eprintln!("not root: a segment of another user is not tried");
    }

    let version = read_u32(&segment, VERSION_OFFSET);
    write_u32(&segment, VERSION_OFFSET, version + 1);
    refused(
        &segment,
        io::ErrorKind::InvalidData,
        "of another layout version",
        &untouched,
    );
    write_u32(&segment, VERSION_OFFSET, version);

    // A truncated copy (a header and slots, no frames) and garbage, mode 0600.
    let truncated = segment_dir.path().join("truncated");
    let head = read_head(&segment, 1 << 20);
    write_private(&truncated, &head);
    let short = segment_dir.path().join("short");
    write_private(&short, &head[..100]);
    let garbage = segment_dir.path().join("garbage");
    let noise: Vec<u8> = (0..64 << 10)
        .map(|i: u64| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
        .collect();
    write_private(&garbage, &noise);
    let all = [
        segment.as_path(),
        data.as_path(),
        &truncated,
        &short,
        &garbage,
    ];
    refused(&truncated, io::ErrorKind::InvalidData, "truncated", &all);
    refused(
        &short,
        io::ErrorKind::InvalidData,
        "shorter than a header",
        &all,
    );
    refused(&garbage, io::ErrorKind::InvalidData, "of garbage", &all);
    for p in [&truncated, &short, &garbage] {
        std::fs::remove_file(p).unwrap();
    }

    // The segment as the child left it is recovered.
    let recovered = folio::recover_segment(&segment).expect("recover the segment as it was");
    eprintln!("the segment as it was: {recovered:?}");
    assert!(!segment.exists(), "a recovered segment is removed");
    let bytes = std::fs::read(&data).expect("read the data file");
    assert_eq!(bytes.len() as u64, DATA_BYTES, "the data file's length");
    if let Err(at) = common::check_pattern(SALT, 0, &bytes) {
        panic!("the recovered data file is wrong at offset {at}");
    }
    assert!(entries(segment_dir.path()).is_empty());
}

fn read_u32(path: &Path, offset: u64) -> u32 {
    use std::os::unix::fs::FileExt;
    let mut word = [0u8; 4];
    let file = std::fs::File::open(path).expect("open the segment");
    file.read_exact_at(&mut word, offset).expect("read");
    u32::from_le_bytes(word)
}

fn write_u32(path: &Path, offset: u64, value: u32) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open the segment");
    file.write_all_at(&value.to_le_bytes(), offset)
        .expect("write");
}

fn read_head(path: &Path, len: usize) -> Vec<u8> {
    use std::io::Read;
    let mut head = Vec::with_capacity(len);
    std::fs::File::open(path)
        .expect("open the segment")
        .take(len as u64)
        .read_to_end(&mut head)
        .expect("read");
    head
}

fn write_private(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).expect("write");
    set_mode(path, 0o600);
}

// ---------------------------------------------------------------------------------------
// Where segments live (issue 42): the private home, and the checks at every use.

/// Runs `body` in a forked child as user `uid` (its gid too), and returns whether it
/// returned without panicking. As root only.
fn as_user(uid: u32, body: impl FnOnce()) -> bool {
    // SAFETY: fork; the child runs `body` (system calls and allocation, which glibc's fork
    // makes safe) and ends with _exit, never returning into the test.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY: setgid/setuid in the child only; checked.
        let dropped = unsafe { libc::setgid(uid) == 0 && libc::setuid(uid) == 0 };
        let ok = dropped && std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).is_ok();
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

fn the_default_home_is_private() {
    harness::become_subreaper();
    let home = folio::segment_home();
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    assert_eq!(home, PathBuf::from(format!("/dev/shm/folio-{me}")));
    // A file another user put in /dev/shm under the name the cache asks for (the
    // predictable name of the plugin's segment_name=auto) is not in the way: the home is
    // another directory.
    let name = format!("folio-{me}-db-security-{}", std::process::id());
    let squatted = Path::new("/dev/shm").join(&name);
    if is_root() {
        let at = squatted.clone();
        assert!(as_user(NOBODY, move || {
            std::fs::write(&at, b"not a segment").unwrap();
        }));
    }
    let cache = Cache::builder()
        .capacity_bytes(4 << 20)
        .persistent(true)
        .segment_name(&name)
        .kept_memory(folio::KeptMemory {
            steward: false,
            ..folio::KeptMemory::default()
        })
        .build()
        .expect("a persistent cache in the default home");
    let segment = cache.segment_path().expect("a segment").to_path_buf();
    assert_eq!(segment, home.join(&name));
    let meta = std::fs::symlink_metadata(&home).unwrap();
    assert!(meta.is_dir() && meta.uid() == me, "{meta:?}");
    assert_eq!(
        meta.mode() & 0o077,
        0,
        "the home is private: {:o}",
        meta.mode()
    );
    drop_and_wait(cache);
    folio::remove_segment(&segment).expect("remove the test's segment");
    if is_root() {
        assert_eq!(
            std::fs::read(&squatted).unwrap(),
            b"not a segment",
            "the other user's file was touched"
        );
        std::fs::remove_file(&squatted).unwrap();
    } else {
        eprintln!("not root: no other user tried");
        return;
    }

    // Another user made the home of user NOBODY first (as NOBODY - 1): NOBODY's
    // persistent build fails, says why, and makes nothing there.
    let victim = NOBODY;
    let other = NOBODY - 1;
    let victims_home = PathBuf::from(format!("/dev/shm/folio-{victim}"));
    let _ = std::fs::remove_dir_all(&victims_home);
    let at = victims_home.clone();
    assert!(as_user(other, move || {
        std::fs::create_dir(&at).unwrap();
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o777)).unwrap();
    }));
    let at = victims_home.clone();
    let refused = as_user(victim, move || {
        for name in [None, Some("named")] {
            let mut builder = Cache::builder().capacity_bytes(4 << 20).persistent(true);
            if let Some(name) = name {
                builder = builder.segment_name(name);
            }
            let e = builder
                .build()
                .expect_err("a home another user made is used");
            eprintln!("a home another user made ({name:?}): {e}");
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
            assert!(e.to_string().contains("another user"), "{e}");
            assert!(e.to_string().contains(&*at.to_string_lossy()), "{e}");
        }
        // A cache that is not persistent is still there for it.
        Cache::builder()
            .capacity_bytes(4 << 20)
            .build()
            .expect("a cache that is not persistent");
    });
    assert!(
        refused,
        "the victim's builds were not refused as they should be"
    );
    assert!(
        entries(&victims_home).is_empty(),
        "something was made in it"
    );
    std::fs::remove_dir_all(&victims_home).unwrap();

    // Its own home, made by itself, is used.
    let ok = as_user(victim, || {
        let cache = Cache::builder()
            .capacity_bytes(4 << 20)
            .persistent(true)
            .build()
            .expect("a home of its own");
        assert!(cache
            .segment_path()
            .unwrap()
            .starts_with(format!("/dev/shm/folio-{NOBODY}")));
    });
    assert!(ok, "a user's own home was not used");
    let _ = std::fs::remove_dir_all(&victims_home);
}

/// Drops `cache` and waits for its keeper to be gone (it holds the segment until then).
fn drop_and_wait(cache: Cache) {
    let keeper = cache.keeper_pid().expect("a keeper");
    drop(cache);
    harness::wait_for_exit(keeper, KEEPER_WAIT_MAX, "the keeper of a dropped cache");
}

/// A persistent cache in `dir` with segment `name`.
fn named_in(dir: &Path, name: &str) -> io::Result<Cache> {
    Cache::builder()
        .capacity_bytes(4 << 20)
        .persistent(true)
        .segment_dir(dir)
        .segment_name(name)
        // `drop_and_wait` waits for the keeper to exit: no steward stays (the steward is
        // kept_memory.rs's).
        .kept_memory(folio::KeptMemory {
            steward: false,
            ..folio::KeptMemory::default()
        })
        .build()
}

fn hostile_dirs_are_refused_at_adoption_and_recovery() {
    harness::become_subreaper();
    let base = tempfile::Builder::new()
        .prefix("folio-segment-security-")
        .tempdir_in("/dev/shm")
        .expect("a directory in /dev/shm");
    let good = base.path().join("good");
    std::fs::create_dir(&good).unwrap();
    set_mode(&good, 0o700);
    let data_dir = common::test_dir();
    let data = data_dir.path().join("read");
    std::fs::write(&data, common::pattern(SALT, 0, 1 << 20)).unwrap();
    {
        let cache = named_in(&good, "kept").expect("a named cache in a good directory");
        let f = cache.open(&data).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < buf.len() {
            let n = f.read_at(&mut buf[at..], at as u64).unwrap();
            assert!(n > 0, "a short file");
            at += n;
        }
        drop(f);
        drop_and_wait(cache);
    }
    let segment = good.join("kept");
    assert!(segment.exists(), "a named segment stays after its cache");
    let digest = |path: &Path| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        h.write(&std::fs::read(path).unwrap());
        h.finish()
    };
    let before = digest(&segment);

    // Each way to the directory that is not safe: the build, the recovery, the listing and
    // the removal refuse it, and the segment stays as it was.
    let link = base.path().join("link");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    let middle = base.path().join("middle");
    std::os::unix::fs::symlink(base.path(), &middle).unwrap();
    let through_middle = middle.join("good");
    for (dir, what) in [
        (&link, "a symlinked segment_dir"),
        (&through_middle, "a symlink in a middle component"),
    ] {
        refuse_everywhere(dir, what);
        assert_eq!(digest(&segment), before, "{what}: the segment changed");
    }
    set_mode(&good, 0o777);
    refuse_everywhere(&good, "its directory made writable by all");
    set_mode(&good, 0o1777);
    refuse_everywhere(&good, "its directory made writable by all, sticky");
    if is_root() {
        set_mode(&good, 0o700);
        chown(&good, NOBODY);
        refuse_everywhere(&good, "its directory given to another user");
        chown(&good, 0);
    }
    assert_eq!(digest(&segment), before, "the segment changed");

    // Safe again: adopted, its pages kept.
    set_mode(&good, 0o700);
    let cache = named_in(&good, "kept").expect("adopted from a safe directory");
    let adoption = cache.adoption().expect("an adoption");
    assert!(adoption.pages_kept > 0, "{adoption:?}");
    drop_and_wait(cache);
    folio::remove_segment(&segment).unwrap();
}

/// The named segment "kept" reached through `dir` is refused by every way in.
fn refuse_everywhere(dir: &Path, what: &str) {
    let e = named_in(dir, "kept").expect_err(what);
    eprintln!("{what}: build: {e}");
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{what}: {e}");
    let e = folio::recover_segment(&dir.join("kept")).expect_err(what);
    assert_eq!(
        e.kind(),
        io::ErrorKind::PermissionDenied,
        "{what}: recover: {e}"
    );
    let e = folio::segments_in(dir).expect_err(what);
    assert_eq!(
        e.kind(),
        io::ErrorKind::PermissionDenied,
        "{what}: list: {e}"
    );
    let e = folio::remove_segment(dir.join("kept")).expect_err(what);
    assert_eq!(
        e.kind(),
        io::ErrorKind::PermissionDenied,
        "{what}: remove: {e}"
    );
    let e = folio::SegmentView::open(dir.join("kept")).expect_err(what);
    assert_eq!(
        e.kind(),
        io::ErrorKind::PermissionDenied,
        "{what}: view: {e}"
    );
}

fn disk_dirs_and_bad_names_are_refused() {
    harness::become_subreaper();
    // A directory on the root file system (a disk one here; skipped if it is tmpfs).
    let disk = tempfile::Builder::new()
        .prefix("folio-segment-security-")
        .tempdir_in("/var/tmp")
        .expect("a directory in /var/tmp");
    // SAFETY: all-zero is a valid statfs; filled by the call.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    let c_path = std::ffi::CString::new(disk.path().as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path and a live out-pointer.
    assert_eq!(unsafe { libc::statfs(c_path.as_ptr(), &mut fs) }, 0);
    if fs.f_type == libc::TMPFS_MAGIC {
        eprintln!("/var/tmp is tmpfs here: the disk case is not tried");
    } else {
        refused_dir(
            disk.path(),
            io::ErrorKind::Unsupported,
            "on a disk file system",
        );
        let cache = Cache::builder()
            .capacity_bytes(4 << 20)
            .persistent(true)
            .segment_dir(disk.path())
            .segment_dir_on_disk(folio::DiskDir::Allowed)
            .build()
            .expect("a disk directory allowed explicitly");
        assert!(cache.segment_path().unwrap().starts_with(disk.path()));
    }

    let dir = tempfile::Builder::new()
        .prefix("folio-segment-security-")
        .tempdir_in("/dev/shm")
        .expect("a directory in /dev/shm");
    let long = "n".repeat(256);
    for name in ["a\nb", "-rf", "a/b", "..", "", "tab\there", long.as_str()] {
        let e = named_in(dir.path(), name).expect_err(name);
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{name:?}: {e}");
        assert!(e.to_string().contains("plain file name"), "{name:?}: {e}");
    }
    assert!(entries(dir.path()).is_empty(), "a bad name made something");
    let fine = "n".repeat(255);
    drop_and_wait(named_in(dir.path(), &fine).expect("a 255-byte name"));
    folio::remove_segment(dir.path().join(&fine)).unwrap();
}
