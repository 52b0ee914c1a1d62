//! folio's readahead against the kernel's, read by read: a cold file is scanned in 4 KiB
//! reads over its first 8 MiB, once with buffered `pread`s while cachestat(2) counts the
//! pages the kernel's page cache holds past the reader after every read, and once through
//! folio (same maximum window) while its stats count the pages inserted past the reader.
//! In both, a page whose read is in flight counts: the kernel inserts a readahead folio in
//! the page cache before it submits the read, folio inserts it in the index. At every read
//! folio must hold at least as many pages ahead as the kernel.
//!
//! Two maxima: 128 KiB (the kernel's default), on an ext4 file system in a loop device
//! whose `read_ahead_kb` is set to 128 (needs root and loop devices; skipped with a
//! message otherwise), and the test directory's own device's `read_ahead_kb` (8 MiB on the
//! reference machine), on the test directory itself (or, if its device has no readahead
//! setting to read, such as an overlay, on a loop device set to 8 MiB).
//!
//! The kernel's side is the kernel this runs on (Linux 6.18 on the reference machine);
//! cachestat needs Linux 6.5 (the test says so and passes on an older one). A host that
//! evicts idle page cache only lowers the kernel's counts; reading 8 MiB takes milliseconds.

mod common;

use std::fs::File as StdFile;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use folio::Cache;

const SALT: u64 = 0x7ace;
const PAGE_BYTES: u64 = 4096;
const KIB: u64 = 1024;
/// The first 8 MiB, one page per read.
const READS: u64 = 2048;
/// Larger than what is scanned, so that readahead is never cut by the end of the file.
const FILE_BYTES: u64 = 32 << 20;
/// Large enough that nothing is evicted (and that a window is never limited to an eighth
/// of the cache below the maximum traced).
const CACHE_BYTES: u64 = 512 << 20;
/// Reads whose counts the test prints: the first windows, and the reads around the
/// markers of the ramp at both maxima.
const READS_SHOWN: [u64; 14] = [1, 2, 5, 13, 17, 25, 33, 49, 65, 81, 97, 321, 769, 1537];
/// The largest maximum window folio takes (`readahead::WINDOW_PAGES_LIMIT`).
const FOLIO_MAX_BYTES_LIMIT: u64 = 32 << 20;

/// cachestat(2): the same number on every architecture (the syscall table is unified).
const SYS_CACHESTAT: libc::c_long = 451;

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// The pages of `file` from `offset_bytes` to its end that the kernel's page cache holds
/// (in flight included).
fn kernel_cached_pages(file: &StdFile, offset_bytes: u64) -> io::Result<u64> {
    let range = CachestatRange {
        off: offset_bytes,
        len: 0, // to the end of the file
    };
    let mut stat = Cachestat::default();
    // SAFETY: cachestat reads `range` and writes `stat`, both live, properly sized repr(C)
    // structs for the duration of the call; the descriptor is open (borrowed from `file`).
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat.nr_cache)
}

/// The kernel's side: drop the file's cached pages, then read its first `READS` pages one
/// by one with `pread`, and after each read count the pages cached past it.
/// `Ok(None)`: cachestat is not available on this kernel.
fn kernel_pages_ahead(path: &Path) -> io::Result<Option<Vec<u64>>> {
    let file = StdFile::open(path)?;
    file.sync_all()?;
    // SAFETY: a plain syscall on an open descriptor; no memory is passed.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise(DONTNEED)");
    match kernel_cached_pages(&file, 0) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => return Ok(None),
        Err(e) => return Err(e),
        Ok(0) => {}
        Ok(n) => panic!(
            "{n} pages of {} still cached after DONTNEED",
            path.display()
        ),
    }
    let mut buf = vec![0u8; PAGE_BYTES as usize];
    let mut ahead = Vec::with_capacity(READS as usize);
    for read in 0..READS {
        let offset = read * PAGE_BYTES;
        assert_eq!(file.read_at(&mut buf, offset)?, buf.len());
        common::check_pattern(SALT, offset, &buf).unwrap();
        ahead.push(kernel_cached_pages(&file, offset + PAGE_BYTES)?);
    }
    Ok(Some(ahead))
}

/// folio's side: a fresh cache with the same maximum window reads the same pages through
/// one handle; after each read, the pages it holds past the reader are the pages inserted
/// so far less those read (nothing is evicted, each page is inserted once).
fn folio_pages_ahead(path: &Path, readahead_max_bytes: u64) -> Vec<u64> {
    let cache = Cache::builder()
        .capacity_bytes(CACHE_BYTES)
        .readahead_max_bytes(readahead_max_bytes)
        .build()
        .unwrap();
    let file = cache.open(path).unwrap();
    assert_eq!(file.readahead_window().max_bytes, readahead_max_bytes);
    let mut buf = vec![0u8; PAGE_BYTES as usize];
    let mut ahead = Vec::with_capacity(READS as usize);
    for read in 0..READS {
        let offset = read * PAGE_BYTES;
        assert_eq!(file.read_at(&mut buf, offset).unwrap(), buf.len());
        common::check_pattern(SALT, offset, &buf).unwrap();
        let stats = cache.stats();
        assert_eq!(stats.evicted_pages, 0, "the cache holds the whole scan");
        assert_eq!(
            stats.insert_conflicts, 0,
            "one reader inserts each page once"
        );
        ahead.push(stats.pages_inserted - (read + 1));
    }
    ahead
}

/// Traces both on the file at `path` (written here) with the kernel's maximum
/// `max_bytes`, prints the reads of `READS_SHOWN`, and asserts folio is never behind.
fn compare(path: &Path, max_bytes: u64, label: &str) {
    if max_bytes > FOLIO_MAX_BYTES_LIMIT || max_bytes % PAGE_BYTES != 0 {
        println!("{label}: SKIPPED: folio cannot take this maximum window ({max_bytes} bytes)");
        return;
    }
    common::write_pattern_file(path, SALT, FILE_BYTES);
    let Some(kernel) = kernel_pages_ahead(path).unwrap() else {
        println!("{label}: SKIPPED: this kernel has no cachestat(2) (Linux 6.5 or later)");
        return;
    };
    let folio = folio_pages_ahead(path, max_bytes);
    println!("{label}: pages cached past the reader after read N (4 KiB reads)");
    println!("{:>6} {:>7} {:>7}", "read", "kernel", "folio");
    for read in READS_SHOWN {
        let i = (read - 1) as usize;
        println!("{read:>6} {:>7} {:>7}", kernel[i], folio[i]);
    }
    let equal = kernel.iter().zip(&folio).filter(|(k, f)| k == f).count();
    let behind: Vec<(usize, u64, u64)> = kernel
        .iter()
        .zip(&folio)
        .enumerate()
        .filter(|(_, (k, f))| f < k)
        .map(|(i, (&k, &f))| (i + 1, k, f))
        .collect();
    println!(
        "{label}: equal at {equal} of {READS} reads, folio behind at {}",
        behind.len()
    );
    assert!(
        behind.is_empty(),
        "{label}: folio had fewer pages ahead than the kernel at {} of {READS} reads \
         (read, kernel, folio), first ones: {:?}",
        behind.len(),
        &behind[..behind.len().min(20)]
    );
}

/// The `read_ahead_kb` of the block device that holds `dir` (its partition's disk for a
/// partition), in bytes; `None` if the device has none (an overlay, tmpfs, ...).
fn device_readahead_bytes(dir: &Path) -> Option<u64> {
    let dev = std::fs::metadata(dir).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    [
        sys.join("queue/read_ahead_kb"),
        sys.join("../queue/read_ahead_kb"),
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())
    .and_then(|kb| kb.trim().parse::<u64>().ok())
    .map(|kb| kb * KIB)
}

fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{program} {args:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// An ext4 file system on a loop device whose readahead maximum is set, mounted in a
/// temporary directory; unmounted and detached when dropped.
struct LoopMount {
    dir: tempfile::TempDir,
    device: String,
    mounted: bool,
}

impl LoopMount {
    /// Context: root; runs mkfs.ext4, losetup, blockdev and mount.
    fn new(readahead_bytes: u64) -> Result<LoopMount, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root (a loop device needs root)".into());
        }
        let dir = common::test_dir();
        let image = dir.path().join("ext4.img");
        let image_str = image.to_str().ok_or("a non-UTF-8 test path")?.to_string();
        StdFile::create(&image)
            .and_then(|f| f.set_len(FILE_BYTES * 2 + (32 << 20)))
            .map_err(|e| format!("create {image_str}: {e}"))?;
        run("mkfs.ext4", &["-q", "-F", &image_str])?;
        let device = run("losetup", &["--find", "--show", &image_str])?;
        let mut mount = LoopMount {
            dir,
            device,
            mounted: false,
        };
        let sectors = (readahead_bytes / 512).to_string();
        run("blockdev", &["--setra", &sectors, &mount.device])?;
        let point = mount.dir.path().join("mnt");
        std::fs::create_dir(&point).map_err(|e| e.to_string())?;
        let point_str = point.to_str().ok_or("a non-UTF-8 test path")?.to_string();
        run("mount", &["-t", "ext4", &mount.device, &point_str])?;
        mount.mounted = true;
        let got = device_readahead_bytes(&point);
        if got != Some(readahead_bytes) {
            return Err(format!(
                "{} reads ahead {got:?} bytes after blockdev --setra {sectors}",
                mount.device
            ));
        }
        Ok(mount)
    }

    fn file(&self) -> PathBuf {
        self.dir.path().join("mnt").join("f")
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        if self.mounted {
            let point = self.dir.path().join("mnt");
            if let Err(e) = run("umount", &[point.to_str().unwrap_or_default()]) {
                eprintln!("readahead_trace: {e}");
            }
        }
        if let Err(e) = run("losetup", &["-d", &self.device]) {
            eprintln!("readahead_trace: {e}");
        }
    }
}

#[test]
fn folio_is_never_behind_the_kernel_at_a_128_kib_maximum() {
    let max_bytes = 128 * KIB;
    match LoopMount::new(max_bytes) {
        Ok(mount) => compare(&mount.file(), max_bytes, "128 KiB (loop device)"),
        Err(why) => println!("128 KiB: SKIPPED: no loop device with read_ahead_kb 128: {why}"),
    }
}

#[test]
fn folio_is_never_behind_the_kernel_at_the_disks_maximum() {
    let dir = common::test_dir();
    match device_readahead_bytes(dir.path()) {
        Some(max_bytes) => {
            let label = format!("{} KiB (the test directory's device)", max_bytes / KIB);
            compare(&dir.path().join("f"), max_bytes, &label);
        }
        None => {
            // The reference machine's disk: read_ahead_kb 8192.
            let max_bytes = 8 << 20;
            println!(
                "the test directory's device has no read_ahead_kb; a loop device at 8 MiB \
                 stands in"
            );
            match LoopMount::new(max_bytes) {
                Ok(mount) => compare(&mount.file(), max_bytes, "8 MiB (loop device)"),
                Err(why) => println!("8 MiB: SKIPPED: {why}"),
            }
        }
    }
}
