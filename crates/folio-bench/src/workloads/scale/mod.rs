//! `scale` (issue 13): how the cost of a 4 KiB cache hit grows with the number of open
//! files, with the size of the cache, and with threads (oversubscribed on this machine's
//! 2 cores), for folio beside the kernel's page cache and beside the ceiling of a hit, a
//! 4 KiB `memcpy` from the same spots.
//!
//! Systems, at every point of every axis, over the same data and the same random spots:
//! `folio` (`File::read_at` of 4 KiB, page aligned, every page cached: a fresh cache
//! filled by reading every file once), `kernel` (`pread` of 4 KiB on a buffered descriptor
//! per file, the files warmed right before each run — read end to end through those
//! descriptors — and checked 100% cached by `cachestat(2)` (mincore where it is missing),
//! then checked again after the run), `memcpy` (a 4 KiB copy out of one anonymous buffer
//! holding the same bytes as the files laid end to end, on huge pages, or on 4 KiB pages
//! under `--arena-pages small` as folio's arena then is: the same address pattern over
//! the same working set).
//!
//! Axes (`--axes`): `files`: 1 thread reads over N files of 64 KiB (N up to what the
//! descriptor limit allows: RLIMIT_NOFILE is raised to its hard limit; each system holds
//! N descriptors at a time); `cache`: 1 thread reads over C bytes of data, in files of
//! the smallest C, with a folio cache of C plus slack (no eviction: every read a hit);
//! `threads`: T threads read over `--threads-files` files of 64 KiB.
//!
//! Design: each thread draws its spots (file, page) from its own generator, seeded by its
//! index, so every system reads the same spots in the same order. A thread works in
//! batches of `BATCH` reads: it draws the batch's spots, starts the clock, reads the batch
//! into `BATCH` separate 4 KiB buffers checking each read's length and first word (which
//! holds the page's offset xor its file's key: a wrong file or page is caught), stops the
//! clock, then verifies one whole buffer of the batch (a different one each batch) against
//! the data rule, outside the clock. `ns_per_read` is the thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`, user and system) inside the batches per read, less the
//! clock's own cost (calibrated per run: `cpu_clock_overhead_ns`): what a read costs,
//! whatever else the machine runs (on a loaded machine, or with threads oversubscribed,
//! a batch's wall time also holds other threads' time slices). `wall_ns_per_read` is
//! the wall time inside the batches per read (equal to `ns_per_read` on an idle machine
//! at one thread); ops/s counts reads over the measured wall time, so it includes the
//! drawing and the sampled verification, alike for every system. p50/p99 are of the
//! mean wall time per read of each batch.
//! At each point the systems are measured interleaved, one run each per round (the order
//! alternating from point to point), where three copies of the data fit in half the
//! available memory: each round's ratio then compares the same minutes, and
//! `cost_over_memcpy` is the median of those ratios. Where they do not fit (8 GiB), one
//! system after another (all runs of one, then the next), one copy of the data in memory
//! at a time besides the files' page cache; rows say which (`interleaved`).
//!
//! Limits: with 2 cores, more than 2 threads measures time-slicing. The kernel's warm
//! pages are paged out by this machine's host when idle for ~30 s: a run that found fewer
//! than all pages resident afterwards says so in its row (`resident_after`). `memcpy` has
//! its huge pages only where the kernel could give them (`memcpy_huge_bytes`).

mod setup;

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde_json::{json, Value};

use super::{mib, secs, Env, Metric, Report, Row, System, Target, Workload};
use crate::data;
use crate::kernel::{self, WarmMethod};
use crate::mapped::{Mapped, Pages};
use crate::measure::{self, Bound, Control, Recorder, Rng, RunResult};
use setup::measure_point;

/// Bytes of one read: a page.
pub const READ_BYTES: usize = 4096;
/// Bytes of each file of the `files` and `threads` axes (the hand measurement's 64 KiB).
pub const SMALL_FILE_BYTES: u64 = 64 << 10;
/// Reads per clocked batch.
const BATCH: usize = 64;
/// Descriptors kept free for everything else (stdio, io_uring, the data directory ...).
const SPARE_FDS: u64 = 64;
/// The target: at 8,000 open files a hit costs at most this many memcpys.
pub const HIT_OVER_MEMCPY_MAX: f64 = 1.5;
const TARGET_FILES: usize = 8000;
const SYSTEMS: [System; 3] = [System::Folio, System::Kernel, System::Memcpy];

/// One axis of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Axis {
    Files,
    Cache,
    Threads,
}

impl Axis {
    fn name(self) -> &'static str {
        match self {
            Axis::Files => "files",
            Axis::Cache => "cache",
            Axis::Threads => "threads",
        }
    }
}

#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// Which axes to measure [default: files,cache,threads]
    #[arg(long, value_enum, value_delimiter = ',')]
    pub axes: Option<Vec<Axis>>,
    /// Open-file counts of the `files` axis (those the descriptor limit allows)
    /// [default: 1,10,100,1000,8000,16000; --quick 1,100,8000]
    #[arg(long, value_delimiter = ',')]
    pub files: Option<Vec<usize>>,
    /// Cache sizes in MiB of the `cache` axis [default: 64,256,1024,4096,8192;
    /// --quick 64,256]
    #[arg(long, value_delimiter = ',')]
    pub cache_mib: Option<Vec<u64>>,
    /// Thread counts of the `threads` axis [default: 1,2,4,8,16,32,64; --quick 1,2,64]
    #[arg(long, value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// Files of 64 KiB the `threads` axis reads over [default: 1000]
    #[arg(long)]
    pub threads_files: Option<usize>,
    /// Seconds measured per run, after a tenth of it unmeasured [default: 1; --quick 0.1]
    #[arg(long)]
    pub duration_secs: Option<f64>,
}

/// One point of one axis: the files read, by how many threads.
struct Point {
    axis: Axis,
    /// The point's value on its axis: files, bytes of data, or threads.
    x: u64,
    files: Vec<PathBuf>,
    file_bytes: u64,
    threads: usize,
}

impl Point {
    fn data_bytes(&self) -> u64 {
        self.files.len() as u64 * self.file_bytes
    }

    fn pages_per_file(&self) -> u64 {
        self.file_bytes / READ_BYTES as u64
    }
}

impl Workload for Args {
    fn name(&self) -> &'static str {
        "scale"
    }

    fn run(&self, env: &Env) -> io::Result<Report> {
        let axes = match &self.axes {
            Some(a) if !a.is_empty() => a.clone(),
            _ => vec![Axis::Files, Axis::Cache, Axis::Threads],
        };
        let duration = self.duration_secs.unwrap_or(env.scale.pick(0.1, 1.0));
        let bound = Bound::Duration {
            warmup: secs(duration / 10.0),
            measure: secs(duration),
        };
        let nofile = raise_nofile();
        let fds_max = nofile.after_soft.saturating_sub(SPARE_FDS) as usize;
        let mut report = Report::new(self.name(), Metric::OpsPerSec);

        let wanted_files = match &self.files {
            Some(f) if !f.is_empty() => f.clone(),
            _ => env.scale.pick(
                vec![1, 100, TARGET_FILES],
                vec![1, 10, 100, 1000, TARGET_FILES, 16_000],
            ),
        };
        let files_axis: Vec<usize> = wanted_files
            .iter()
            .map(|&n| n.max(1))
            .filter(|&n| n <= fds_max)
            .collect();
        let left_out: Vec<usize> = wanted_files
            .iter()
            .copied()
            .filter(|&n| n > fds_max)
            .collect();
        if !left_out.is_empty() && axes.contains(&Axis::Files) {
            report.note(format!(
                "files axis: left out {left_out:?}: the descriptor limit ({}) allows {fds_max}",
                nofile.after_soft
            ));
        }
        let cache_axis: Vec<u64> = match &self.cache_mib {
            Some(c) if !c.is_empty() => c.iter().map(|&m| mib(m.max(1))).collect(),
            _ => env.scale.pick(
                vec![mib(64), mib(256)],
                vec![mib(64), mib(256), mib(1024), mib(4096), mib(8192)],
            ),
        };
        let threads_axis: Vec<usize> = match &self.threads {
            Some(t) if !t.is_empty() => t.iter().map(|&t| t.max(1)).collect(),
            _ => env.scale.pick(vec![1, 2, 64], vec![1, 2, 4, 8, 16, 32, 64]),
        };
        let threads_files = self.threads_files.unwrap_or(1000).clamp(1, fds_max.max(1));

        // The data: small files for the files and threads axes, large ones for the cache axis.
        let dir = env.dir.join("scale");
        let mut small_count = 0;
        if axes.contains(&Axis::Files) {
            small_count = files_axis.iter().copied().max().unwrap_or(0);
        }
        if axes.contains(&Axis::Threads) {
            small_count = small_count.max(threads_files);
        }
        let small = ensure_files(env, &dir, "small", small_count, SMALL_FILE_BYTES)?;
        let big_file_bytes = cache_axis
            .iter()
            .copied()
            .min()
            .unwrap_or(mib(64))
            .next_multiple_of(READ_BYTES as u64);
        let big_count = if axes.contains(&Axis::Cache) {
            cache_axis
                .iter()
                .map(|c| c.div_ceil(big_file_bytes) as usize)
                .max()
                .unwrap_or(0)
        } else {
            0
        };
        let big = ensure_files(env, &dir, "big", big_count, big_file_bytes)?;

        let mut points = Vec::new();
        for &axis in &axes {
            match axis {
                Axis::Files => points.extend(files_axis.iter().map(|&n| Point {
                    axis,
                    x: n as u64,
                    files: small[..n].to_vec(),
                    file_bytes: SMALL_FILE_BYTES,
                    threads: 1,
                })),
                Axis::Cache => points.extend(cache_axis.iter().map(|&c| {
                    let n = c.div_ceil(big_file_bytes) as usize;
                    Point {
                        axis,
                        x: n as u64 * big_file_bytes,
                        files: big[..n].to_vec(),
                        file_bytes: big_file_bytes,
                        threads: 1,
                    }
                })),
                Axis::Threads => points.extend(threads_axis.iter().map(|&t| Point {
                    axis,
                    x: t as u64,
                    files: small[..threads_files].to_vec(),
                    file_bytes: SMALL_FILE_BYTES,
                    threads: t,
                })),
            }
        }

        report.param("axes", axes.iter().map(|a| a.name()).collect::<Vec<_>>());
        report.param("files", files_axis.clone());
        report.param("cache_bytes", cache_axis.clone());
        report.param("threads", threads_axis.clone());
        report.param("threads_files", threads_files);
        report.param("read_bytes", READ_BYTES);
        report.param("small_file_bytes", SMALL_FILE_BYTES);
        report.param("cache_axis_file_bytes", big_file_bytes);
        report.param("batch_reads", BATCH);
        report.param("duration_secs", duration);
        report.param("runs", env.runs);
        report.param(
            "rlimit_nofile",
            json!({"soft_before": nofile.before_soft, "hard": nofile.hard,
                   "soft_after": nofile.after_soft}),
        );

        let bar = env.bar(
            self.name(),
            (points.len() * SYSTEMS.len() * env.runs) as u64,
        );
        for (pi, point) in points.iter().enumerate() {
            let mut order = SYSTEMS.to_vec();
            if pi % 2 == 1 {
                order.reverse();
            }
            let mut rows: Vec<Row> = Vec::new();
            bar.set_message(format!(
                "{} {}",
                point.axis.name(),
                describe_x(point.axis, point.x)
            ));
            let (all_runs, interleaved) = measure_point(env, point, &order, bound, &bar)?;
            let ns_of = |r: &RunResult| r.extra.get("ns_per_read").and_then(Value::as_f64);
            let memcpy_runs = order
                .iter()
                .position(|&s| s == System::Memcpy)
                .map(|i| &all_runs[i]);
            // A system's cost over memcpy's: interleaved, the median of each round's ratio
            // (the pair measured in the same minutes); else the ratio of the medians.
            let cost_over_memcpy = |runs: &[RunResult]| {
                let memcpy_runs = memcpy_runs?;
                Some(if interleaved {
                    median(
                        runs.iter()
                            .zip(memcpy_runs)
                            .filter_map(|(own, m)| Some(ns_of(own)? / ns_of(m)?.max(1e-9))),
                    )
                } else {
                    median(runs.iter().filter_map(ns_of))
                        / median(memcpy_runs.iter().filter_map(ns_of)).max(1e-9)
                })
            };
            for (&system, runs) in order.iter().zip(&all_runs) {
                let mut row = Row::from_runs(system, point.threads, runs, report.ratio_of);
                row.extra.insert("interleaved".into(), json!(interleaved));
                if let Some(cost) = cost_over_memcpy(runs) {
                    row.extra.insert("cost_over_memcpy".into(), json!(cost));
                }
                row.extra.insert("axis".into(), json!(point.axis.name()));
                row.extra.insert("x".into(), json!(point.x));
                row.extra.insert("files".into(), json!(point.files.len()));
                row.extra
                    .insert("data_bytes".into(), json!(point.data_bytes()));
                let median_of =
                    |key: &str| median(runs.iter().filter_map(|r| r.extra.get(key)?.as_f64()));
                row.extra
                    .insert("ns_per_read_median".into(), json!(median_of("ns_per_read")));
                row.extra.insert(
                    "wall_ns_per_read_median".into(),
                    json!(median_of("wall_ns_per_read")),
                );
                rows.push(row);
            }
            rows.sort_by_key(|r| SYSTEMS.iter().position(|s| s.as_str() == r.system));
            let kernel_ops = rows
                .iter()
                .find(|r| r.system == System::Kernel.as_str())
                .map(|r| r.ops_per_sec);
            for row in &mut rows {
                if row.system != System::Memcpy.as_str() {
                    row.vs_kernel = kernel_ops.map(|k| row.ops_per_sec / k.max(1e-9));
                }
            }
            report.rows.extend(rows);
        }
        bar.finish_and_clear();

        report.note(format!(
            "every read: 4 KiB at a page-aligned offset of a random file, length and first \
             word checked inside the clock; one whole 4 KiB buffer of every {BATCH} reads \
             verified outside it (bytes_verified counts both)"
        ));
        report.note(format!(
            "folio: a fresh cache per point (data + 1/16 + 16 MiB: no eviction), every file \
             read once before the runs; kernel: {} right before each run, checked again \
             after it; memcpy: one buffer of the data, paged like folio's arena (--arena-pages)",
            env.warm.describe()
        ));
        report.note(
            "ns_per_read: thread CPU time per read inside the clocked batches (less the CPU \
             clock's own cost); wall_ns_per_read: wall time per read inside them (adds other \
             threads' time slices on a busy machine); folio/kernel: ops/s of the median runs; \
             cost_over_memcpy: ns_per_read over memcpy's at the same point (interleaved: the \
             median of each round's ratio; else the ratio of the medians)",
        );
        report.note(
            "at each point the systems run interleaved, one run each per round, where three \
             copies of the data fit in half the available memory (interleaved: true); else one \
             after another (all runs of one, then the next), one copy in memory at a time",
        );
        if let Some(ratio) = report
            .rows
            .iter()
            .find(|r| {
                r.system == System::Folio.as_str()
                    && r.extra.get("axis") == Some(&json!("files"))
                    && r.extra.get("x") == Some(&json!(TARGET_FILES))
            })
            .and_then(|r| r.extra.get("cost_over_memcpy")?.as_f64())
        {
            report.targets.push(Target {
                what: format!(
                    "scale {TARGET_FILES} open files: folio ns per 4 KiB hit / memcpy's, at most"
                ),
                measured: Some(ratio),
                required: HIT_OVER_MEMCPY_MAX,
                met: ratio <= HIT_OVER_MEMCPY_MAX,
            });
        }
        report.limits = env.limits()?;
        Ok(report)
    }
}

/// `8000`, `256 MiB`, `64 threads`: a point's value for people.
pub fn describe_x(axis: Axis, x: u64) -> String {
    match axis {
        Axis::Files => format!("{x} files"),
        Axis::Cache if x >= 1 << 30 && x % (1 << 30) == 0 => format!("{} GiB", x >> 30),
        Axis::Cache => format!("{} MiB", x >> 20),
        Axis::Threads => format!("{x} threads"),
    }
}

/// The median of `xs` (lower middle); 0 for none.
fn median(xs: impl Iterator<Item = f64>) -> f64 {
    crate::measure::lower_median(xs).unwrap_or(0.0)
}

/// The key of file `index` of a set: files differ at every word, so a read served from
/// the wrong file fails its check.
fn key_of(index: usize) -> u64 {
    (index as u64 + 1) << 40
}

/// Descriptor limits before and after raising the soft limit to the hard one.
struct NoFile {
    before_soft: u64,
    hard: u64,
    after_soft: u64,
}

fn raise_nofile() -> NoFile {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given, which lives on this stack.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    if !got {
        return NoFile {
            before_soft: 1024,
            hard: 1024,
            after_soft: 1024,
        };
    }
    let before_soft = lim.rlim_cur;
    let raised = libc::rlimit {
        rlim_cur: lim.rlim_max,
        rlim_max: lim.rlim_max,
    };
    // SAFETY: setrlimit reads the struct it is given; raising the soft limit up to the
    // hard one needs no privilege.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0;
    NoFile {
        before_soft,
        hard: lim.rlim_max,
        after_soft: if set { lim.rlim_max } else { before_soft },
    }
}

/// `count` keyed data files `dir/PREFIX-NNNNN.dat` of `file_bytes` (written, or reused
/// when their length and first and last words check out), synced once at the end.
///
/// Context: writes up to `count * file_bytes` bytes; one `syncfs` instead of an fsync per
/// file (thousands of files).
fn ensure_files(
    env: &Env,
    dir: &Path,
    prefix: &str,
    count: usize,
    file_bytes: u64,
) -> io::Result<Vec<PathBuf>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    std::fs::create_dir_all(dir)?;
    let bar = env.progress.add(indicatif::ProgressBar::new(count as u64));
    bar.set_message(format!(
        "data: {count} files of {} KiB in {}",
        file_bytes >> 10,
        dir.display()
    ));
    let mut chunk = vec![0u8; file_bytes.min(1 << 20) as usize];
    let mut wrote = false;
    let mut paths = Vec::with_capacity(count);
    for i in 0..count {
        let path = dir.join(format!("{prefix}-{i:05}.dat"));
        let key = key_of(i);
        if !reusable(&path, file_bytes, key) {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)?;
            let mut at = 0u64;
            while at < file_bytes {
                let n = (file_bytes - at).min(chunk.len() as u64) as usize;
                data::fill_keyed(&mut chunk[..n], at, key);
                file.write_all(&chunk[..n])?;
                at += n as u64;
            }
            wrote = true;
        }
        paths.push(path);
        bar.inc(1);
    }
    if wrote {
        let d = File::open(dir)?;
        // SAFETY: a plain system call on an open descriptor.
        if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    bar.finish_and_clear();
    Ok(paths)
}

fn reusable(path: &Path, file_bytes: u64, key: u64) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    if file.metadata().map(|m| m.len()).ok() != Some(file_bytes) || file_bytes < 8 {
        return false;
    }
    let last = (file_bytes - 8) & !7;
    let mut word = [0u8; 8];
    [0, last].iter().all(|&at| {
        file.read_exact_at(&mut word, at).is_ok() && u64::from_le_bytes(word) == at ^ key
    })
}

/// The CPU time of the calling thread, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given, which lives on this stack.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The CPU time a pair of back-to-back `thread_cpu_ns` calls measures between them (the
/// clock's own cost inside a measured span; the least of 200 tries).
fn cpu_clock_overhead_ns() -> u64 {
    (0..200)
        .map(|_| {
            let a = thread_cpu_ns();
            thread_cpu_ns().saturating_sub(a)
        })
        .min()
        .unwrap_or(0)
}

/// What every thread of a run adds up besides its recorder: wall and CPU nanoseconds
/// inside the clocked batches.
#[derive(Default)]
struct Tally {
    wall_ns: AtomicU64,
    cpu_ns: AtomicU64,
}

/// Runs `point.threads` threads of 4 KiB hits through `read(file, offset, buf)` and
/// returns the run with `ns_per_read` (CPU) and `wall_ns_per_read` in its extras.
fn hits<R>(point: &Point, bound: Bound, read: R) -> io::Result<RunResult>
where
    R: Fn(usize, u64, &mut [u8]) -> io::Result<usize> + Sync,
{
    let tally = Tally::default();
    let files = point.files.len() as u64;
    let pages = point.pages_per_file();
    let clock_ns = cpu_clock_overhead_ns();
    let mut r = measure::run_threads(point.threads, bound, |t, control, rec| {
        let spots = Spots {
            thread: t,
            files,
            pages,
            clock_ns,
        };
        batches(&spots, control, rec, &tally, &read)
    })?;
    let reads = r.ops.max(1) as f64;
    let wall = tally.wall_ns.load(Ordering::Relaxed) as f64;
    let cpu = tally.cpu_ns.load(Ordering::Relaxed) as f64;
    r.extra.insert("ns_per_read".into(), json!(cpu / reads));
    r.extra
        .insert("wall_ns_per_read".into(), json!(wall / reads));
    r.extra
        .insert("cpu_clock_overhead_ns".into(), json!(clock_ns));
    Ok(r)
}

/// Where one thread reads: its generator's seed, the files and pages it draws from, and
/// the CPU clock's own cost to take off each batch.
struct Spots {
    thread: usize,
    files: u64,
    pages: u64,
    clock_ns: u64,
}

/// One thread's loop: batches of `BATCH` reads at spots of its own generator, clocked
/// (wall and thread CPU time); each read's length and first word checked inside the
/// clock, one whole buffer per batch verified outside it.
fn batches<R>(
    at: &Spots,
    control: &Control,
    rec: &mut Recorder,
    tally: &Tally,
    read: &R,
) -> io::Result<()>
where
    R: Fn(usize, u64, &mut [u8]) -> io::Result<usize>,
{
    let mut rng = Rng::new(0x5ca1e + at.thread as u64);
    let mut bufs = vec![[0u8; READ_BYTES]; BATCH];
    let mut spots = [(0usize, 0u64); BATCH];
    let (mut wall_ns, mut cpu_ns) = (0u64, 0u64);
    let mut batch = 0usize;
    while !control.stopped() {
        let measuring = control.measuring();
        for spot in spots.iter_mut() {
            *spot = (
                rng.below(at.files) as usize,
                rng.below(at.pages) * READ_BYTES as u64,
            );
        }
        let cpu_started = thread_cpu_ns();
        let started = Instant::now();
        for (buf, &(file, offset)) in bufs.iter_mut().zip(&spots) {
            let n = read(file, offset, buf)?;
            let first = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
            if n != READ_BYTES || first != offset ^ key_of(file) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "file {file} offset {offset}: read {n} bytes, first word {first:#x}, \
                         expected {READ_BYTES} bytes and {:#x}",
                        offset ^ key_of(file)
                    ),
                ));
            }
        }
        let took = started.elapsed();
        let cpu_took = thread_cpu_ns()
            .saturating_sub(cpu_started)
            .saturating_sub(at.clock_ns);
        let k = batch % BATCH;
        let (file, offset) = spots[k];
        let verified = data::verify_keyed(&bufs[k], offset, key_of(file))?;
        batch += 1;
        if measuring {
            wall_ns += took.as_nanos() as u64;
            cpu_ns += cpu_took;
            rec.latency(took / BATCH as u32);
            rec.ops += BATCH as u64;
            rec.bytes_read += (BATCH * READ_BYTES) as u64;
            rec.bytes_verified += verified + 8 * (BATCH as u64 - 1);
        }
    }
    tally.wall_ns.fetch_add(wall_ns, Ordering::Relaxed);
    tally.cpu_ns.fetch_add(cpu_ns, Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_make_files_differ() {
        assert_ne!(key_of(0), key_of(1));
        assert_eq!(
            key_of(0) & ((1 << 40) - 1),
            0,
            "offsets stay below the key's bits"
        );
    }

    #[test]
    fn points_are_described_with_units() {
        assert_eq!(describe_x(Axis::Files, 8000), "8000 files");
        assert_eq!(describe_x(Axis::Cache, 8 << 30), "8 GiB");
        assert_eq!(describe_x(Axis::Cache, 64 << 20), "64 MiB");
        assert_eq!(describe_x(Axis::Threads, 64), "64 threads");
    }

    #[test]
    fn written_files_are_reused_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let env = Env::new(
            dir.path().to_path_buf(),
            1,
            crate::workloads::Scale::Quick,
            kernel::WarmMethod::Read,
            folio::BackendKind::Pread,
        );
        let files = ensure_files(&env, dir.path(), "t", 3, 3 * READ_BYTES as u64).unwrap();
        assert_eq!(files.len(), 3);
        for (i, path) in files.iter().enumerate() {
            let bytes = std::fs::read(path).unwrap();
            assert_eq!(
                data::verify_keyed(&bytes, 0, key_of(i)).unwrap(),
                bytes.len() as u64
            );
            assert!(reusable(path, 3 * READ_BYTES as u64, key_of(i)));
            assert!(!reusable(path, 3 * READ_BYTES as u64, key_of(i + 1)));
        }
    }
}
