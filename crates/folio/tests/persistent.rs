//! A persistent cache (`CacheBuilder::persistent`, DESIGN.md §9) end to end, each case in
//! a child process (this test binary run again with `FOLIO_PERSIST_CHILD` naming the case)
//! so that its death is a real one: writes that returned and were never synced reach the
//! disk after a SIGKILL through the keeper; a clean drop leaves no segment and no keeper;
//! a keeper killed before its work is done leaves the segment to `recover_segment`.
//! The crash test with random kills is `keeper_crash.rs`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD: &str = "FOLIO_PERSIST_CHILD";
const DIR: &str = "FOLIO_PERSIST_DIR";
/// A segment directory for the child's cache (default: the user's home).
const SEGMENT_DIR: &str = "FOLIO_PERSIST_SEGMENT_DIR";

/// Bytes of record `i`: distinct per record and offset.
fn record(i: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (i.wrapping_mul(131).wrapping_add(k as u64 * 7) % 251) as u8)
        .collect()
}

/// Records per file and their size: small (3,000 bytes: unaligned, some crossing pages)
/// for most cases, 64 MiB of 1 MiB records per file for "kill-big", so that the keeper
/// has work that lasts.
fn shape(case: &str) -> (u64, usize) {
    if case == "kill-big" {
        (64, 1 << 20)
    } else {
        (64, 3000)
    }
}

/// The child's body: a persistent cache (its segment in `/dev/shm`), three files written
/// with records and never synced (nothing written back before the kill: a large dirty
/// limit, no write-behind, no expiry); prints `ready <segment> <keeper pid>`, then ends as
/// `case` says.
fn child(case: &str, dir: &Path) {
    let mut builder = folio::Cache::builder()
        .capacity_bytes(512 << 20)
        .dirty_limit_bytes(400 << 20)
        .write_behind_bytes(0)
        .dirty_expire(Duration::from_secs(600))
        .persistent(true);
    if let Some(segment_dir) = std::env::var_os(SEGMENT_DIR) {
        builder = builder.segment_dir(segment_dir);
    }
    let cache = builder.build().unwrap();
    let (records, len) = shape(case);
    let mut handles = Vec::new();
    for f in 0..3 {
        let file = cache
            .open_options()
            .write(true)
            .create(true)
            .open(dir.join(format!("data{f}")))
            .unwrap();
        for i in 0..records {
            file.write_at(&record(f * 1000 + i, len), i * len as u64)
                .unwrap();
        }
        handles.push(file);
    }
    println!(
        "ready {} {}",
        cache.segment_path().unwrap().display(),
        cache.keeper_pid().unwrap()
    );
    match case {
        "kill" | "kill-big" => {
            // SAFETY: raise has no preconditions; SIGKILL ends the process here.
            unsafe { libc::raise(libc::SIGKILL) };
        }
        "drop" => {
            drop(handles);
            drop(cache);
        }
        "wait" => std::thread::sleep(Duration::from_secs(60)),
        _ => panic!("unknown case {case}"),
    }
}

struct Started {
    segment: PathBuf,
    keeper: u32,
    status: std::process::ExitStatus,
}

fn run_child(case: &str, dir: &Path) -> Started {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD, case)
        .env(DIR, dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut ready = None;
    for line in out.lines() {
        let line = line.unwrap();
        // libtest prints "test child_entry ... " before the child's first line.
        if let Some((_, rest)) = line.split_once("ready ") {
            let (segment, keeper) = rest.split_once(' ').unwrap();
            ready = Some((PathBuf::from(segment), keeper.parse().unwrap()));
        }
    }
    let status = child.wait().unwrap();
    let (segment, keeper) = ready.expect("the child never got ready");
    Started {
        segment,
        keeper,
        status,
    }
}

/// Starts the child's "wait" case (files written, nothing synced, then it sleeps) with its
/// segment in `segment_dir` (default: the home), and reads its `ready` line: the child,
/// its segment and its keeper's pid.
fn spawn_waiting(dir: &Path, segment_dir: Option<&Path>) -> (std::process::Child, PathBuf, u32) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD, "wait")
        .env(DIR, dir)
        .stdout(Stdio::piped());
    if let Some(segment_dir) = segment_dir {
        command.env(SEGMENT_DIR, segment_dir);
    }
    let mut child = command.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("ready ") {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the child never got ready"
        );
    }
    let (_, rest) = line.trim_end().split_once("ready ").unwrap();
    let (segment, keeper) = rest.split_once(' ').unwrap();
    (child, PathBuf::from(segment), keeper.parse().unwrap())
}

fn alive(pid: u32) -> bool {
    // A keeper is not our child: it is gone when signal 0 cannot reach it (or a zombie
    // of a subreaper, which /proc shows as state Z).
    let status = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !status.is_empty() && !status.contains(") Z ")
}

fn wait_gone(pid: u32, segment: &Path) {
    let start = Instant::now();
    while alive(pid) || segment.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the keeper {pid} did not finish (segment {} exists: {})",
            segment.display(),
            segment.exists()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn check_files(dir: &Path, case: &str) {
    let (records, len) = shape(case);
    for f in 0..3u64 {
        let bytes = std::fs::read(dir.join(format!("data{f}"))).unwrap();
        assert_eq!(bytes.len(), records as usize * len, "file {f}'s size");
        for i in 0..records {
            let at = i as usize * len;
            assert!(
                bytes[at..at + len] == record(f * 1000 + i, len)[..],
                "file {f} record {i} is not what was written"
            );
        }
    }
}

#[test]
fn child_entry() {
    if let (Ok(case), Ok(dir)) = (std::env::var(CHILD), std::env::var(DIR)) {
        child(&case, Path::new(&dir));
    }
}

#[test]
fn writes_that_returned_survive_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let started = run_child("kill", dir.path());
    assert!(!started.status.success(), "the child was to be killed");
    wait_gone(started.keeper, &started.segment);
    check_files(dir.path(), "kill");
}

#[test]
fn a_cache_built_after_a_crash_waits_for_the_keeper() {
    let dir = tempfile::tempdir().unwrap();
    let started = run_child("kill-big", dir.path());
    assert!(!started.status.success(), "the child was to be killed");
    // At once, as a restarted process would: the build waits for the keeper's writeback
    // of 192 MiB, so that what the dead process wrote is on disk when it returns.
    let cache = folio::Cache::builder().persistent(true).build().unwrap();
    assert!(!started.segment.exists(), "the keeper was waited for");
    check_files(dir.path(), "kill-big");
    drop(cache);
}

#[test]
fn a_killed_keeper_s_work_is_finished_by_the_next_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, segment, keeper) = spawn_waiting(dir.path(), None);
    let keeper = keeper as i32;
    // The keeper dies first (it never wrote anything), then its owner.
    // SAFETY: kill with a pid this test read from the child; SIGKILL ends it.
    unsafe {
        libc::kill(keeper, libc::SIGKILL);
        libc::kill(child.id() as i32, libc::SIGKILL);
    }
    child.wait().unwrap();
    // A SIGKILL is delivered, not done: the keeper holds the segment until it is gone.
    let start = Instant::now();
    while alive(keeper as u32) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the killed keeper lives"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(segment.exists(), "nobody wrote the segment back yet");
    let report = folio::recover_segment(&segment);
    // Another test's new cache may have recovered it first, or be recovering it now
    // (they share the default home): then it removes it.
    if let Err(e) = &report {
        assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::WouldBlock
            ),
            "{e}"
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while segment.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    assert!(!segment.exists(), "the recovery removed the segment");
    check_files(dir.path(), "wait");
}

/// SIGSTOPs `pid` and waits until it is stopped.
fn stop(pid: u32) {
    // SAFETY: kill takes integers.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSTOP) }, 0);
    let start = Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if matches!(
            stat.rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next()),
            Some('T' | 't')
        ) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{pid} never stopped"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until `path` has been opened `opens` times since `watch` started watching it
/// (inotify's IN_OPEN): the test's lever to know that a cache's build is in its wait for
/// a keeper, which looks at the segment again every few milliseconds.
fn wait_for_opens(watch: &std::fs::File, opens: usize) {
    use std::io::Read;
    let mut seen = 0;
    let mut buf = [0u8; 4096];
    let start = Instant::now();
    while seen < opens {
        // Each event is an inotify_event of 16 bytes (no name: a watch on the file).
        match (&*watch).read(&mut buf) {
            Ok(n) => seen += n / 16,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("read inotify events: {e}"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the build never waited for the keeper ({seen} opens of the segment seen)"
        );
    }
}

#[test]
fn a_keeper_killed_while_a_new_cache_waits_for_it_is_finished_by_that_cache() {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::FromRawFd;
    let dir = tempfile::tempdir().unwrap();
    // A directory of its own: no other test's cache settles it.
    let segments = tempfile::tempdir_in("/dev/shm").unwrap();
    let (mut child, segment, keeper) = spawn_waiting(dir.path(), Some(segments.path()));
    // The keeper is stopped before the owner dies: it holds the segment, its writeback
    // not started, as a keeper busy writing would.
    stop(keeper);
    child.kill().unwrap();
    child.wait().unwrap();
    // SAFETY: inotify_init1 and inotify_add_watch with a NUL-terminated path; the
    // descriptor is checked and then owned by the File.
    let watch = unsafe {
        let fd = libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK);
        assert!(fd >= 0);
        let path = std::ffi::CString::new(segment.as_os_str().as_bytes()).unwrap();
        assert!(libc::inotify_add_watch(fd, path.as_ptr(), libc::IN_OPEN) >= 0);
        std::fs::File::from_raw_fd(fd)
    };
    let build = std::thread::spawn({
        let segments = segments.path().to_owned();
        move || {
            folio::Cache::builder()
                .persistent(true)
                .segment_dir(segments)
                .build()
        }
    });
    // The build's look at the directory, then its wait's looks at the segment.
    wait_for_opens(&watch, 4);
    // The keeper dies while the build waits for it, before it wrote anything.
    // SAFETY: kill takes integers; the keeper's pid is not reused while it is stopped.
    unsafe { libc::kill(keeper as i32, libc::SIGKILL) };
    let cache = build
        .join()
        .unwrap()
        .expect("the build after the keeper's death");
    assert!(
        !segment.exists(),
        "the build that waited for the killed keeper left its segment unrecovered"
    );
    check_files(dir.path(), "wait");
    drop(cache);
}

#[test]
fn a_clean_drop_leaves_no_segment_and_no_keeper() {
    let dir = tempfile::tempdir().unwrap();
    let started = run_child("drop", dir.path());
    assert!(started.status.success());
    assert!(!started.segment.exists(), "the segment was removed");
    wait_gone(started.keeper, &started.segment);
    check_files(dir.path(), "drop");
}

/// A tmpfs of `mib` MiB mounted in `dir` for the life of the value (root only).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, mib: u64) -> Option<Tmpfs> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={mib}m,mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_segment_file_system_costs_cache_room_never_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let Some(shm) = Tmpfs::mount(&dir.path().join("shm"), 24) else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    let too_big = folio::Cache::builder()
        .capacity_bytes(64 << 20)
        .persistent(true)
        .segment_dir(&shm.0)
        .build()
        .unwrap_err();
    assert_eq!(too_big.kind(), std::io::ErrorKind::StorageFull, "{too_big}");
    // A capacity the builder chooses (the machine's) fits in the room instead.
    let machine = folio::Cache::builder()
        .capacity_policy(folio::CapacityPolicy::FollowMachine)
        .persistent(true)
        .segment_dir(&shm.0)
        .build()
        .unwrap();
    assert!(machine.capacity_max_bytes() <= 24 << 20);
    drop(machine);
    let cache = folio::Cache::builder()
        .capacity_bytes(16 << 20)
        .persistent(true)
        .segment_dir(&shm.0)
        .build()
        .unwrap();
    // Another user of the file system takes all of its room but 6 MiB (two chunks and
    // their side table fit; the capacity, 16 MiB, does not).
    let filler = shm.0.join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        while f.write_all(&[7u8; 1 << 20]).is_ok() {}
        let len = f.metadata().unwrap().len();
        f.set_len(len.saturating_sub(6 << 20)).unwrap();
    }
    let data = dir.path().join("data");
    let len = 48u64 << 20;
    let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    std::fs::write(&data, &bytes).unwrap();
    let file = cache.open_options().write(true).open(&data).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    for pass in 0..2 {
        for at in (0..len).step_by(buf.len()) {
            let n = file.read_at(&mut buf, at).unwrap();
            assert!(
                buf[..n] == bytes[at as usize..at as usize + n],
                "pass {pass}: bytes at {at} differ"
            );
        }
    }
    file.write_at(b"still writes", 4096 * 3).unwrap();
    file.sync_data().unwrap();
    drop(file);
    drop(cache);
    let back = std::fs::read(&data).unwrap();
    assert_eq!(&back[4096 * 3..4096 * 3 + 12], b"still writes");
    std::fs::remove_file(&filler).unwrap();
}
