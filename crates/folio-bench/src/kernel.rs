//! The kernel side of every comparison: making its page cache cold or warm and proving
//! it, counting resident pages, limiting it with a memory cgroup, and the raw calls
//! (`readahead(2)`, `posix_fadvise`, O_DIRECT buffers) the workloads need.
//!
//! Design:
//! - Cold: `sync`, then `3 > /proc/sys/vm/drop_caches` when root, else
//!   `posix_fadvise(DONTNEED)` on each file ([`ColdMethod`], reported in the output). Either
//!   way every file is then checked with `mincore` to hold 0 resident pages; a file that
//!   stays resident after three tries is an error, not a footnote.
//! - Warm: this machine pages out page-cache pages idle for ~30 s, so a warm kernel file is
//!   warmed right before it is measured: read once end to end ([`WarmMethod::Read`]), or
//!   pinned by a `vmtouch -l` child that lives for the measurement
//!   ([`WarmMethod::Vmtouch`]). Either way every file is checked to be 100% resident.
//! - Residency is `mincore(2)` over a read-only shared mapping of the file; it counts
//!   uptodate pages only (pages still under I/O are not counted).
//! - Memory limit: a cgroup v1 `memory` group (or a v2 group where the v2 hierarchy has the
//!   memory controller), created under a unique name, removed on drop. A cgroup limits a
//!   process, so a kernel side at equal memory runs as a child process of this binary
//!   (a hidden command), moved into the group before it touches its file
//!   ([`run_in_cgroup`]); an external program (db_bench) moves itself in between fork and
//!   exec ([`Cgroup::enter_at_exec`]). folio's memory policy reads a v2 limit only: a
//!   v1 group limits a folio process without folio knowing it ([`CgroupVersion::V1`]).
//!
//! Limits: `mincore` maps the whole file (address space only, nothing is faulted in);
//! `drop_caches` drops the whole machine's clean page cache, not just ours.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How the kernel's page cache is emptied before a cold run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColdMethod {
    /// `sync; echo 3 > /proc/sys/vm/drop_caches` (needs root).
    DropCaches,
    /// `posix_fadvise(POSIX_FADV_DONTNEED)` on each file (written data files are already
    /// fsynced, so no page is dirty).
    FadviseDontNeed,
}

impl ColdMethod {
    /// `DropCaches` if this process may write `/proc/sys/vm/drop_caches`.
    pub fn detect() -> ColdMethod {
        match OpenOptions::new()
            .write(true)
            .open("/proc/sys/vm/drop_caches")
        {
            Ok(_) => ColdMethod::DropCaches,
            Err(_) => ColdMethod::FadviseDontNeed,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            ColdMethod::DropCaches => "sync + echo 3 > /proc/sys/vm/drop_caches",
            ColdMethod::FadviseDontNeed => {
                "posix_fadvise(DONTNEED) per file (data files are fsynced when written)"
            }
        }
    }
}

/// How a warm kernel file is kept warm for its measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WarmMethod {
    /// Read the whole file right before the measurement.
    Read,
    /// Pin the file with a `vmtouch -l` child for the measurement.
    Vmtouch,
}

impl WarmMethod {
    pub fn describe(self) -> &'static str {
        match self {
            WarmMethod::Read => "read end to end right before each run (mincore: 100% resident)",
            WarmMethod::Vmtouch => {
                "pinned by `vmtouch -l` during each run (mincore: 100% resident)"
            }
        }
    }
}

/// Empties the kernel's cache of `files` and checks they hold no resident page.
///
/// Context: may take seconds (`sync`, dropping a large page cache).
pub fn make_cold(files: &[PathBuf], method: ColdMethod) -> io::Result<()> {
    for attempt in 0..3 {
        match (method, attempt) {
            (ColdMethod::DropCaches, 0) => {
                // SAFETY: sync(2) takes no arguments and cannot fail.
                unsafe { libc::sync() };
                std::fs::write("/proc/sys/vm/drop_caches", "3\n")?;
            }
            _ => {
                for path in files {
                    fadvise(&File::open(path)?, 0, 0, libc::POSIX_FADV_DONTNEED)?;
                }
            }
        }
        if resident_pages_all(files)?.resident == 0 {
            return Ok(());
        }
    }
    let r = resident_pages_all(files)?;
    Err(io::Error::other(format!(
        "cold run impossible: {} of {} pages of the data files stay resident after {}",
        r.resident,
        r.total,
        method.describe()
    )))
}

/// Pages of a file in the kernel's page cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Residency {
    pub resident: u64,
    pub total: u64,
}

/// `mincore` residency of one file.
pub fn resident_pages(path: &Path) -> io::Result<Residency> {
    let file = File::open(path)?;
    let len = file.metadata()?.len() as usize;
    if len == 0 {
        return Ok(Residency::default());
    }
    let page = page_bytes();
    let pages = len.div_ceil(page);
    // SAFETY: a fresh read-only shared mapping of an open file; the kernel picks the
    // address; nothing else knows it. Checked for MAP_FAILED below.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let mut vec = vec![0u8; pages];
    // SAFETY: `addr..addr+len` is the mapping made above; `vec` has one byte per page of it
    // as mincore requires. mincore only reads page tables and the page cache.
    let rc = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
    let err = io::Error::last_os_error();
    // SAFETY: unmaps exactly the mapping made above; no reference into it exists.
    unsafe { libc::munmap(addr, len) };
    if rc != 0 {
        return Err(err);
    }
    Ok(Residency {
        resident: vec.iter().filter(|b| *b & 1 != 0).count() as u64,
        total: pages as u64,
    })
}

/// The sum of [`resident_pages`] over `files`.
pub fn resident_pages_all(files: &[PathBuf]) -> io::Result<Residency> {
    let mut sum = Residency::default();
    for path in files {
        let r = resident_pages(path)?;
        sum.resident += r.resident;
        sum.total += r.total;
    }
    Ok(sum)
}

/// Waits until the residency of `files` stops changing (in-flight readahead finished):
/// unchanged for three polls 20 ms apart, or `limit` elapsed.
pub fn settled_residency(files: &[PathBuf], limit: Duration) -> io::Result<Residency> {
    let started = Instant::now();
    let mut last = resident_pages_all(files)?;
    let mut same = 0;
    while same < 3 && started.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(20));
        let now = resident_pages_all(files)?;
        if now == last {
            same += 1;
        } else {
            same = 0;
            last = now;
        }
    }
    Ok(last)
}

/// Keeps files warm for as long as it lives (the `vmtouch` child, if any).
#[derive(Debug)]
pub struct WarmGuard {
    pinner: Option<Child>,
}

impl Drop for WarmGuard {
    fn drop(&mut self) {
        if let Some(child) = &mut self.pinner {
            // Ends only the child this process started, by its own handle.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Makes `files` 100% resident right now (and, with `Vmtouch`, keeps them so until the
/// guard drops); checks it with `mincore`.
///
/// Context: reads every byte of `files` (`Read`), or waits for `vmtouch` to lock them.
pub fn warm(files: &[PathBuf], method: WarmMethod) -> io::Result<WarmGuard> {
    let guard = match method {
        WarmMethod::Read => {
            for _ in 0..3 {
                for path in files {
                    read_through(path)?;
                }
                if is_fully_resident(files)? {
                    break;
                }
            }
            WarmGuard { pinner: None }
        }
        WarmMethod::Vmtouch => {
            let child = Command::new("vmtouch")
                .arg("-l")
                .arg("-q")
                .args(files)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot run vmtouch (Debian package `vmtouch`): {e}"),
                    )
                })?;
            let guard = WarmGuard {
                pinner: Some(child),
            };
            let started = Instant::now();
            while !is_fully_resident(files)? && started.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(10));
            }
            guard
        }
    };
    let r = resident_pages_all(files)?;
    if r.resident != r.total {
        return Err(io::Error::other(format!(
            "warm run impossible: only {} of {} pages resident after warming",
            r.resident, r.total
        )));
    }
    Ok(guard)
}

fn is_fully_resident(files: &[PathBuf]) -> io::Result<bool> {
    let r = resident_pages_all(files)?;
    Ok(r.resident == r.total)
}

/// Reads a file end to end through the page cache (not measured, not verified).
fn read_through(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    loop {
        let n = file.read_at(&mut buf, at)?;
        if n == 0 {
            return Ok(());
        }
        at += n as u64;
    }
}

/// `posix_fadvise(fd, offset, len, advice)`.
pub fn fadvise(file: &File, offset: u64, len: u64, advice: libc::c_int) -> io::Result<()> {
    // SAFETY: a plain system call on an open descriptor; no memory is passed.
    let rc = unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            offset as libc::off_t,
            len as libc::off_t,
            advice,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// `readahead(2)`: asks the kernel to read `[offset, offset + len)` into its page cache.
pub fn readahead(file: &File, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: a plain system call on an open descriptor; no memory is passed.
    let rc = unsafe { libc::readahead(file.as_raw_fd(), offset as libc::off64_t, len as usize) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A field of `/proc/self/io` (`read_bytes`: bytes this process caused to be read from
/// storage; `write_bytes`: bytes it caused to be written, counted when pages are dirtied).
pub fn proc_self_io(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/io").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(": "))?
        .trim()
        .parse()
        .ok()
}

/// What a child run by [`run_in_cgroup`] left: its stdout, the cgroup's description (or
/// why there was none: the child then ran with all the machine's memory), and the
/// group's peak memory where the kernel reports it.
#[derive(Debug)]
pub struct ChildOutput {
    pub stdout: Vec<u8>,
    pub cgroup: Result<String, String>,
    pub cgroup_peak_bytes: Option<u64>,
}

/// Runs this binary with `args` (a hidden child command that waits for one line on its
/// stdin before it starts) inside a fresh memory cgroup limited to `limit_bytes`: the
/// child is started, moved into the group, then told to go. Fails if the child fails.
///
/// Context: blocks until the child exits.
pub fn run_in_cgroup(args: &[OsString], limit_bytes: u64) -> io::Result<ChildOutput> {
    let group = Cgroup::create(limit_bytes);
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let placed = match &group {
        Ok(g) => match g.add(child.id()) {
            Ok(()) => Ok(g.describe()),
            Err(e) => Err(format!("cannot move the child into {}: {e}", g.describe())),
        },
        Err(e) => Err(e.to_string()),
    };
    {
        let mut stdin = child.stdin.take().expect("piped stdin");
        writeln!(stdin, "go")?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "the child `{}` failed: {}",
            args.first()
                .map_or(std::borrow::Cow::Borrowed(""), |a| a.to_string_lossy()),
            out.status
        )));
    }
    let cgroup_peak_bytes = group.as_ref().ok().and_then(Cgroup::peak_bytes);
    drop(group);
    Ok(ChildOutput {
        stdout: out.stdout,
        cgroup: placed,
        cgroup_peak_bytes,
    })
}

/// Opens `path` read-only with O_DIRECT (no fallback: the `direct` system means it).
pub fn open_direct(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot open {} with O_DIRECT ({e}); use a --dir on a disk file system",
                    path.display()
                ),
            )
        })
}

/// The alignment O_DIRECT buffers get (covers 512 B and 4 KiB logical blocks).
pub const DIRECT_ALIGN_BYTES: usize = 4096;

/// A zeroed heap buffer aligned for O_DIRECT.
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Box<[u8]>.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// `len` bytes (rounded up to the alignment, at least one block).
    pub fn new(len: usize) -> AlignedBuf {
        let len = len.max(1).next_multiple_of(DIRECT_ALIGN_BYTES);
        let layout = std::alloc::Layout::from_size_align(len, DIRECT_ALIGN_BYTES)
            .expect("aligned buffer layout");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr =
            std::ptr::NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is a live, initialised (zeroed) allocation of `len` bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, DIRECT_ALIGN_BYTES)
            .expect("aligned buffer layout");
        // SAFETY: allocated in `new` with this very layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}

fn page_bytes() -> usize {
    // SAFETY: sysconf has no memory arguments.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// Whether `path` is on tmpfs (where O_DIRECT and the page cache comparison mean nothing).
pub fn is_tmpfs(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs is plain old data; zeroed is a valid value to be overwritten.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid out-pointer.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    // f_type and the magic constants differ in type between architectures.
    #[allow(clippy::unnecessary_cast)]
    let tmpfs = st.f_type as i64 == libc::TMPFS_MAGIC as i64;
    rc == 0 && tmpfs
}

/// A memory cgroup that limits the page cache of the processes put in it; removed on drop.
#[derive(Debug)]
pub struct Cgroup {
    dir: PathBuf,
    version: CgroupVersion,
}

/// Which cgroup hierarchy holds the memory controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupVersion {
    /// cgroup v1 (`memory.limit_in_bytes`): folio's memory policy reads it through the
    /// group's `hierarchical_memory_limit`.
    V1,
    /// cgroup v2 (`memory.max`): folio's memory policy reads the limit.
    V2,
}

/// Groups made by this process so far: each gets its own name.
static CGROUPS_MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Cgroup {
    /// Creates a group limited to `limit_bytes` of memory (page cache included).
    ///
    /// Errors: no memory controller mounted, or no permission (not root) — the caller
    /// reports it and runs without the limit.
    pub fn create(limit_bytes: u64) -> io::Result<Cgroup> {
        let made = CGROUPS_MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("folio-bench-{}-{made}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let v2_controllers = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers");
        let (dir, version) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(&name), CgroupVersion::V1)
        } else if v2_controllers.is_ok_and(|c| c.split_whitespace().any(|w| w == "memory")) {
            (Path::new("/sys/fs/cgroup").join(&name), CgroupVersion::V2)
        } else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "no memory cgroup controller is mounted (neither v1 /sys/fs/cgroup/memory \
                 nor v2 with the memory controller)",
            ));
        };
        std::fs::create_dir(&dir).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display()))
        })?;
        let group = Cgroup { dir, version };
        let knob = match version {
            CgroupVersion::V1 => "memory.limit_in_bytes",
            CgroupVersion::V2 => "memory.max",
        };
        std::fs::write(group.dir.join(knob), limit_bytes.to_string())?;
        Ok(group)
    }

    /// Moves process `pid` into the group.
    pub fn add(&self, pid: u32) -> io::Result<()> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
    }

    /// Makes the program `cmd` starts run inside the group from its first instruction:
    /// the forked child moves itself in (writes `0`, "this process", to `cgroup.procs`)
    /// before it executes the program, so that nothing it allocates or reads is charged
    /// elsewhere. If the move fails the child exits before the program runs (spawn
    /// reports the error).
    pub fn enter_at_exec(&self, cmd: &mut Command) -> io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::process::CommandExt;
        let procs = std::ffi::CString::new(self.dir.join("cgroup.procs").as_os_str().as_bytes())
            .map_err(io::Error::other)?;
        // SAFETY: the closure runs in the forked child before exec, where only
        // async-signal-safe calls are allowed: it calls open, write and close on a path
        // allocated before the fork, and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = io::Error::last_os_error();
                libc::close(fd);
                if written == 1 {
                    Ok(())
                } else {
                    Err(err)
                }
            });
        }
        Ok(())
    }

    /// Which hierarchy the group is in (whether folio's memory policy can see its limit).
    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    /// Processes of the group the kernel's OOM killer killed so far (v1
    /// `memory.oom_control`, v2 `memory.events`: their `oom_kill` line).
    pub fn oom_kills(&self) -> Option<u64> {
        let file = match self.version {
            CgroupVersion::V1 => "memory.oom_control",
            CgroupVersion::V2 => "memory.events",
        };
        let text = std::fs::read_to_string(self.dir.join(file)).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
    }

    /// The group's peak memory use, where the kernel reports it.
    pub fn peak_bytes(&self) -> Option<u64> {
        let knob = match self.version {
            CgroupVersion::V1 => "memory.max_usage_in_bytes",
            CgroupVersion::V2 => "memory.peak",
        };
        std::fs::read_to_string(self.dir.join(knob))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    pub fn describe(&self) -> String {
        format!(
            "cgroup {} {}",
            match self.version {
                CgroupVersion::V1 => "v1",
                CgroupVersion::V2 => "v2",
            },
            self.dir.display()
        )
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // The child has exited: the group is empty; its page cache is reparented.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("folio-bench: could not remove {}", self.dir.display());
    }
}

/// Pages of `path` in the kernel's page cache, counting pages still under I/O, by
/// `cachestat(2)` (Linux 6.5+); `None` where the kernel lacks it.
pub fn cached_pages(path: &Path) -> io::Result<Option<u64>> {
    cached_pages_of(&File::open(path)?)
}

/// [`cached_pages`] of an open file.
pub fn cached_pages_of(file: &File) -> io::Result<Option<u64>> {
    cached_pages_in(file, 0, 0)
}

/// Pages of `[offset, offset + len)` of an open file in the page cache (`len` 0: to the
/// end), by `cachestat(2)`; `None` where the kernel lacks it.
///
/// Context: the kernel walks the range's entries: about 0.1 s per million cached pages
/// on the reference machine, more once memory is fragmented (a 16 GiB file of 4 KiB
/// pages took 0.3-0.7 s).
pub fn cached_pages_in(file: &File, offset: u64, len: u64) -> io::Result<Option<u64>> {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = Range { off: offset, len };
    let mut stat = Stat::default();
    // SAFETY: cachestat(fd, *const range, *mut stat, flags = 0) reads `range` and writes
    // `stat`, both live and of the kernel's layout (struct cachestat_range / cachestat).
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const Range,
            &mut stat as *mut Stat,
            0u32,
        )
    };
    if rc == 0 {
        return Ok(Some(stat.nr_cache));
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ENOSYS) | Some(libc::EPERM) => Ok(None),
        _ => Err(err),
    }
}

/// The growth of the machine's page cache (`/proc/meminfo`'s `Cached`, which includes
/// dirty pages) over its value at `start`, sampled every 100 ms on a thread until `stop`:
/// how much memory the kernel's page cache took for a run, to set beside folio's
/// capacity. Other processes' file I/O counts too (the benchmark runs alone).
pub struct PageCachePeak {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sampler: std::thread::JoinHandle<u64>,
}

impl PageCachePeak {
    pub fn start() -> PageCachePeak {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let sampler = std::thread::spawn(move || {
            let base = meminfo_bytes("Cached").unwrap_or(0);
            let mut peak = 0u64;
            loop {
                let now = meminfo_bytes("Cached").unwrap_or(0);
                peak = peak.max(now.saturating_sub(base));
                if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    return peak;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        PageCachePeak { stop, sampler }
    }

    /// The peak growth in bytes.
    pub fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.sampler.join().unwrap_or(0)
    }
}

/// A counter of `/proc/vmstat` (`oom_kill`: processes the OOM killer killed since boot).
pub fn vmstat(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/vmstat").ok()?;
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(' ')?;
        (name == field).then(|| value.trim().parse().ok())?
    })
}

/// A `/proc/meminfo` field in bytes (its figures are KiB).
pub fn meminfo_bytes(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * 1024)
    })
}
