//! `limits`: the machine's ceilings, measured in the same run as the workloads they bound.
//! A cache hit cannot be faster than copying the bytes (`memcpy`); a miss cannot be
//! faster than the disk read with O_DIRECT at a deep queue. This is a measurement tool,
//! not the cache: it talks to the kernel directly.
//!
//! Systems: `memcpy` (one thread copies 8 KiB blocks out of a large buffer into a small
//! one: the per-thread ceiling of a hit); the O_DIRECT ceiling measured the way fio
//! measures it: one thread keeps `depth` O_DIRECT reads of `block` bytes in flight through
//! io_uring, sequentially over the whole cold file, for every shape of a grid of block
//! sizes and depths (`--grid-block-kib`, `--grid-depths`); `odirect-qd32` is the 1 MiB x 32
//! point of that grid (fio's usual shape) and `odirect-best` the best point, whose rate is
//! the ceiling (`Limits::odirect_seq_mb_per_sec`); and, for the same cold sequential read
//! with 1 MiB requests, `kernel` (buffered `pread`) and `folio` (`File::read_at`), each
//! also reported as a fraction of the ceiling (`of_odirect_ceiling`). Where `fio` is on
//! PATH (and `--fio auto`), fio itself reads the same file in the same run
//! (`--ioengine=io_uring --direct=1 --rw=read`, 1 MiB x 32 and 4 MiB x 4) and the report
//! carries fio's best and the ratio of ours to it (the target: >= 0.95). And what a
//! miss into memory never touched before costs besides the disk: `fresh-4k` and
//! `fresh-huge`, one thread writing one byte to each 4 KiB page of a fresh anonymous
//! mapping as large as the file (4 KiB pages, then huge pages advised). A cache in user
//! space pays that once for every page it caches into a fresh arena, and the kernel's
//! page cache never does (its pages are filled by DMA, not zeroed). It is a cost per page,
//! not a ceiling: folio's populator and its readers pay it on two CPUs at once.
//!
//! Design: the O_DIRECT timed loop does no verification (as fio): each read lands in its
//! own slot of a landing area as large as the file (up to `LANDING_BYTES_MAX`), which is
//! faulted in and poisoned (one word per 4 KiB page) before the clock starts; after the
//! clock stops every slot is verified against the offset it was read from, so every byte
//! read is still checked when the file fits the landing area. Each grid point starts from
//! a cold file (`posix_fadvise(DONTNEED)` on it, checked 0% resident by mincore: O_DIRECT
//! bypasses the page cache, so the machine-wide drop is not needed). The reads of
//! `folio`, `kernel` and `memcpy` are as before: every byte read verified on the reading
//! thread; the copies of `memcpy` are not reads of the file and are not verified
//! (checking them would halve the ceiling being measured); one copy in `SAMPLE_EVERY` is
//! timed. `Limits` (memcpy GB/s, the O_DIRECT ceiling in MB/s, medians of the runs) are
//! what every other workload's JSON carries.
//!
//! Limits: a virtio disk's host may cache what it served (repeated runs can get faster);
//! on a VM whose host backs memory lazily, the fresh rows depend on what ran before them
//! (memory another mapping just gave back is cheaper to touch again: they run last in each
//! run, after folio's cache is gone);
//! `memcpy` is one thread, not the memory bus. Where io_uring is refused, the O_DIRECT
//! reads fall back to a pool of `depth` threads calling `pread` (verified inline), and the
//! notes say so. A file larger than the landing area has only its last
//! `LANDING_BYTES_MAX` bytes of reads verified (the rows' `bytes_verified` say so).

mod grid;

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::{json, Value};

use crate::mapped::{Mapped, Pages};

use super::{mib, secs, Env, Limits, Metric, Report, Row, Scale, System, Target, Workload};
use crate::data;
use crate::kernel;
use crate::measure::{self, Bound, RunResult, SAMPLE_EVERY};
use grid::Grid;

const COPY_BYTES: usize = 8192;
/// The largest landing area of the O_DIRECT reads (each read gets its own slot up to this).
pub const LANDING_BYTES_MAX: u64 = 1 << 30;
/// fio's shapes for the cross-check: fio's usual one, and the best on this kind of
/// machine (BASELINES.md: 4 MiB x QD4 2,299 MB/s).
const FIO_SHAPES: [Shape; 2] = [
    Shape {
        block_bytes: 1 << 20,
        depth: 32,
        pages: Pages::Base,
    },
    Shape {
        block_bytes: 4 << 20,
        depth: 4,
        pages: Pages::Base,
    },
];
/// Ours over fio's best that the ceiling must reach (issue 13).
pub const FIO_RATIO_MIN: f64 = 0.95;

/// Whether the limits run fio beside their own O_DIRECT reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum FioCheck {
    /// Run fio if it is on PATH.
    #[default]
    Auto,
    /// Never run fio.
    Off,
}

#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// MiB of the file read with O_DIRECT [default: 512; --quick 128]
    #[arg(long)]
    pub file_mib: Option<u64>,
    /// KiB per read of the folio and kernel cold scans [default: 1024]
    #[arg(long)]
    pub block_kib: Option<u64>,
    /// Depth of the `odirect-qd32` row, which must be one of --grid-depths [default: 32]
    #[arg(long)]
    pub queue_depth: Option<usize>,
    /// KiB per O_DIRECT read, the block sizes of the grid
    /// [default: 128,1024,2048,4096; --quick 1024,4096]
    #[arg(long, value_delimiter = ',')]
    pub grid_block_kib: Option<Vec<u64>>,
    /// O_DIRECT reads in flight, the depths of the grid [default: 4,8,32,64; --quick 4,32]
    #[arg(long, value_delimiter = ',')]
    pub grid_depths: Option<Vec<usize>>,
    /// Run fio on the same file as a cross-check where it is on PATH
    #[arg(long, value_enum, default_value_t = FioCheck::Auto)]
    pub fio: FioCheck,
    /// MiB of the buffer memcpy copies out of [default: 1024; --quick 256]
    #[arg(long)]
    pub memcpy_mib: Option<u64>,
    /// Seconds of memcpy per run [default: 1; --quick 0.3]
    #[arg(long)]
    pub memcpy_secs: Option<f64>,
}

impl Pages {
    fn describe(self) -> &'static str {
        match self {
            Pages::Base => "4 KiB pages",
            Pages::Huge => "huge pages",
        }
    }
}

/// One O_DIRECT shape: bytes per read, reads in flight, and the pages they land in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub block_bytes: usize,
    pub depth: usize,
    pub pages: Pages,
}

impl Shape {
    fn describe(self) -> String {
        format!(
            "{} KiB x QD{} ({})",
            self.block_bytes >> 10,
            self.depth,
            self.pages.describe()
        )
    }

    fn to_json(self) -> Value {
        json!({"block_bytes": self.block_bytes, "queue_depth": self.depth, "pages": self.pages})
    }
}

struct Resolved {
    file_bytes: u64,
    block_bytes: usize,
    queue_depth: usize,
    grid: Vec<Shape>,
    fio: FioCheck,
    memcpy_bytes: u64,
    memcpy_secs: f64,
}

impl Args {
    fn resolve(&self, scale: Scale) -> Resolved {
        let blocks: Vec<u64> = match &self.grid_block_kib {
            Some(b) if !b.is_empty() => b.clone(),
            _ => scale.pick(vec![1024, 4096], vec![128, 1024, 2048, 4096]),
        };
        let depths: Vec<usize> = match &self.grid_depths {
            Some(d) if !d.is_empty() => d.clone(),
            _ => scale.pick(vec![4, 32], vec![4, 8, 32, 64]),
        };
        let queue_depth = self.queue_depth.unwrap_or(32).max(1);
        let mut grid: Vec<Shape> = Vec::new();
        for pages in [Pages::Base, Pages::Huge] {
            for &kib in &blocks {
                for &depth in &depths {
                    let shape = Shape {
                        block_bytes: (kib.max(4).next_multiple_of(4) << 10) as usize,
                        depth: depth.max(1),
                        pages,
                    };
                    if !grid.contains(&shape) {
                        grid.push(shape);
                    }
                }
            }
        }
        // The `odirect-qd32` row is a point of the grid: 1 MiB at --queue-depth.
        let qd32 = Shape {
            block_bytes: 1 << 20,
            depth: queue_depth,
            pages: Pages::Base,
        };
        if !grid.contains(&qd32) {
            grid.push(qd32);
        }
        Resolved {
            file_bytes: mib(self.file_mib.unwrap_or(scale.pick(128, 512))),
            block_bytes: (self.block_kib.unwrap_or(1024).max(4) << 10) as usize,
            queue_depth,
            grid,
            fio: self.fio,
            memcpy_bytes: mib(self.memcpy_mib.unwrap_or(scale.pick(256, 1024))).max(1 << 20),
            memcpy_secs: self.memcpy_secs.unwrap_or(scale.pick(0.3, 1.0)),
        }
    }
}

impl Resolved {
    fn qd32(&self) -> Shape {
        Shape {
            block_bytes: 1 << 20,
            depth: self.queue_depth,
            pages: Pages::Base,
        }
    }
}

impl Workload for Args {
    fn name(&self) -> &'static str {
        "limits"
    }

    fn run(&self, env: &Env) -> io::Result<Report> {
        let p = self.resolve(env.scale);
        let path = env.data_file("limits.dat", p.file_bytes)?;
        let mut report = Report::new(self.name(), Metric::MbPerSec);
        params(&mut report, &p);
        let fio = match p.fio {
            FioCheck::Auto if on_path("fio") => Some("fio"),
            _ => None,
        };
        let systems = [
            System::Memcpy,
            System::ODirectGrid,
            System::Folio,
            System::Kernel,
            System::Fresh4k,
            System::FreshHuge,
        ];
        let steps = env.runs * (5 + p.grid.len() + fio.map_or(0, |_| FIO_SHAPES.len()));
        let bar = env.bar(self.name(), steps as u64);
        let mut runs: Vec<Vec<RunResult>> = vec![Vec::new(); systems.len()];
        let mut grid = Grid::new(&p)?;
        let mut fio_runs: Vec<Vec<f64>> = vec![Vec::new(); FIO_SHAPES.len()];
        for run in 0..env.runs {
            for (si, system) in systems.iter().enumerate() {
                bar.set_message(format!("{system} run {}/{}", run + 1, env.runs));
                let r = match *system {
                    System::Memcpy => memcpy(&p)?,
                    System::ODirectGrid => {
                        grid.measure(&path, &p, &bar)?;
                        if let Some(program) = fio {
                            for (fi, shape) in FIO_SHAPES.iter().enumerate() {
                                bar.set_message(format!("fio {}", shape.describe()));
                                fio_runs[fi].push(run_fio(program, &path, *shape)?);
                                bar.inc(1);
                            }
                        }
                        continue;
                    }
                    System::Folio => {
                        kernel::make_cold(std::slice::from_ref(&path), env.cold)?;
                        let cache = env.folio_cache(p.file_bytes + (32 << 20))?;
                        let file = cache.open(&path)?;
                        let mut r =
                            sequential(p.block_bytes, p.file_bytes, |b, at| file.read_at(b, at))?;
                        r.pages_inserted = Some(cache.stats().pages_inserted);
                        r
                    }
                    System::Kernel => {
                        kernel::make_cold(std::slice::from_ref(&path), env.cold)?;
                        let file = File::open(&path)?;
                        let mut r =
                            sequential(p.block_bytes, p.file_bytes, |b, at| file.read_at(b, at))?;
                        r.pages_inserted = Some(kernel::resident_pages(&path)?.resident);
                        r
                    }
                    System::Fresh4k => fresh(p.file_bytes, Pages::Base)?,
                    System::FreshHuge => fresh(p.file_bytes, Pages::Huge)?,
                    other => unreachable!("limits measures no {other}"),
                };
                runs[si].push(r);
                bar.inc(1);
            }
        }
        bar.finish_and_clear();
        let (best, best_runs) = grid.best();
        let ceiling = measure::median(best_runs, RunResult::mb_per_sec)
            .0
            .mb_per_sec();
        report
            .rows
            .push(Row::from_runs(System::Memcpy, 1, &runs[0], report.ratio_of));
        report.rows.push(Row::from_runs(
            System::ODirectQd32,
            1,
            grid.runs_of(p.qd32()),
            report.ratio_of,
        ));
        let mut best_row = Row::from_runs(System::ODirectBest, 1, best_runs, report.ratio_of);
        best_row
            .extra
            .insert("block_bytes".into(), json!(best.block_bytes));
        best_row
            .extra
            .insert("queue_depth".into(), json!(best.depth));
        report.rows.push(best_row);
        for (si, &system) in systems.iter().enumerate().skip(2) {
            let mut row = Row::from_runs(system, 1, &runs[si], report.ratio_of);
            if matches!(system, System::Folio | System::Kernel) {
                row.extra.insert(
                    "of_odirect_ceiling".into(),
                    json!(row.mb_per_sec / ceiling.max(1e-9)),
                );
            }
            report.rows.push(row);
        }
        report.fill_ratios();
        let limits = Limits {
            memcpy_gb_per_sec: report.rows[0].mb_per_sec / 1000.0,
            odirect_seq_mb_per_sec: ceiling,
        };
        env.set_limits(limits);
        report.limits = limits;
        report.param("odirect_grid", grid.to_json());
        report.param("odirect_landing", grid.landing_json());
        report.param("odirect_ceiling_mb_per_sec", ceiling);
        report.param("odirect_ceiling_shape", best.to_json());
        report.note(format!(
            "O_DIRECT ceiling: {ceiling:.0} MB/s, the best median of the grid ({}), at {}; \
             {}; each grid point reads the whole cold file sequentially, one thread, no \
             verification in the timed loop, every slot verified after the clock stops",
            p.grid
                .iter()
                .map(|s| s.describe())
                .collect::<Vec<_>>()
                .join(", "),
            best.describe(),
            grid.engine
        ));
        let base_best = grid.best_of(Pages::Base);
        let fio_best = fio_summary(&mut report, &fio_runs, ceiling, base_best, p.fio);
        report.note("memcpy: one thread, 8 KiB copies out of the buffer in order; copies are not verified (not file reads)");
        let of_ceiling = |system: System| {
            report
                .row(system, 1)
                .map_or(0.0, |r| 100.0 * r.mb_per_sec / ceiling.max(1e-9))
        };
        report.note(format!(
            "folio and kernel: one thread, cold sequential {} KiB reads, every byte verified \
             inline; cold: {}; folio reached {:.0}% of the O_DIRECT ceiling, the kernel {:.0}%",
            p.block_bytes >> 10,
            env.cold.describe(),
            of_ceiling(System::Folio),
            of_ceiling(System::Kernel)
        ));
        let mb_of = |system: System| report.row(system, 1).map_or(0.0, |r| r.mb_per_sec);
        let fresh_note = format!(
            "fresh-4k and fresh-huge: one thread writes a byte to each 4 KiB page of a fresh \
             anonymous mapping of the file's size (4 KiB pages; huge pages advised), p50/p99 \
             per 2 MiB; it is what a cache in user space pays for each page it first caches, \
             and the kernel's page cache does not (DMA fills its pages, unzeroed): \
             {:.2} / {:.2} us per 4 KiB page; folio's cold scan ran at {:.0}% of fresh-huge's \
             rate (its populator and its reads share the cost on the machine's CPUs)",
            folio::PAGE_BYTES as f64 / mb_of(System::Fresh4k).max(1e-9),
            folio::PAGE_BYTES as f64 / mb_of(System::FreshHuge).max(1e-9),
            100.0 * mb_of(System::Folio) / mb_of(System::FreshHuge).max(1e-9)
        );
        report.note(fresh_note);
        if let Some(fio_best) = fio_best {
            report.targets.push(Target::at_least(
                "limits: O_DIRECT ceiling / fio's best on the same file, same run",
                Some(ceiling / fio_best.max(1e-9)),
                FIO_RATIO_MIN,
            ));
        }
        Ok(report)
    }
}

fn params(report: &mut Report, p: &Resolved) {
    report.param("file_bytes", p.file_bytes);
    report.param("block_bytes", p.block_bytes);
    report.param("queue_depth", p.queue_depth);
    report.param("memcpy_buffer_bytes", p.memcpy_bytes);
    report.param("memcpy_copy_bytes", COPY_BYTES);
    report.param("memcpy_secs", p.memcpy_secs);
}

/// Adds fio's results to the report; returns fio's best median MB/s, if fio ran.
fn fio_summary(
    report: &mut Report,
    fio_runs: &[Vec<f64>],
    ceiling: f64,
    base_best: f64,
    check: FioCheck,
) -> Option<f64> {
    if fio_runs.iter().all(Vec::is_empty) {
        report.param("fio", Value::Null);
        report.note(match check {
            FioCheck::Off => "fio cross-check: off (--fio off)",
            FioCheck::Auto => "fio cross-check: skipped, no fio on PATH (Debian package `fio`)",
        });
        return None;
    }
    let mut shapes = Vec::new();
    let mut best: Option<(Shape, f64)> = None;
    for (shape, runs) in FIO_SHAPES.iter().zip(fio_runs) {
        let mb = median_of(runs);
        if best.is_none_or(|(_, b)| mb > b) {
            best = Some((*shape, mb));
        }
        let mut v = shape.to_json();
        v["mb_per_sec"] = json!(mb);
        v["runs_mb_per_sec"] = json!(runs);
        shapes.push(v);
    }
    let (shape, mb) = best?;
    report.param(
        "fio",
        json!({"shapes": shapes, "best_mb_per_sec": mb, "best_shape": shape.to_json(),
               "ceiling_over_fio_best": ceiling / mb.max(1e-9),
               "base_pages_best_mb_per_sec": base_best,
               "base_pages_best_over_fio_best": base_best / mb.max(1e-9)}),
    );
    report.note(format!(
        "fio on the same file in the same run (--ioengine=io_uring --direct=1 --rw=read \
         --readonly, one job, fio's own 4 KiB-page buffers; {}): best {mb:.0} MB/s at {}; \
         our ceiling / fio's best = {:.2}; our best into 4 KiB pages as fio's ({base_best:.0} \
         MB/s) / fio's best = {:.2}",
        FIO_SHAPES
            .iter()
            .zip(fio_runs)
            .map(|(s, r)| format!("{} {:.0} MB/s", s.describe(), median_of(r)))
            .collect::<Vec<_>>()
            .join(", "),
        shape.describe(),
        ceiling / mb.max(1e-9),
        base_best / mb.max(1e-9)
    ));
    Some(mb)
}

/// The median (lower middle) of `xs`; 0 for none.
fn median_of(xs: &[f64]) -> f64 {
    crate::measure::lower_median(xs.iter().copied()).unwrap_or(0.0)
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Runs fio once over `path` at `shape`; returns its read MB/s (10^6 bytes per second).
fn run_fio(program: &str, path: &Path, shape: Shape) -> io::Result<f64> {
    let out = Command::new(program)
        .arg("--name=ceiling")
        .arg(format!("--filename={}", path.display()))
        .arg("--readonly")
        .arg("--ioengine=io_uring")
        .arg("--direct=1")
        .arg("--rw=read")
        .arg(format!("--bs={}k", shape.block_bytes >> 10))
        .arg(format!("--iodepth={}", shape.depth))
        .arg("--numjobs=1")
        .arg("--output-format=json")
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "fio {} failed ({}): {}",
            shape.describe(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    parse_fio(&String::from_utf8_lossy(&out.stdout)).ok_or_else(|| {
        io::Error::other(format!(
            "fio {}: no jobs[0].read.bw_bytes in its JSON output",
            shape.describe()
        ))
    })
}

/// fio's `--output-format=json`: the first job's read bandwidth, in MB/s.
pub fn parse_fio(stdout: &str) -> Option<f64> {
    // fio may print notes before the JSON object.
    let json: Value = serde_json::from_str(&stdout[stdout.find('{')?..]).ok()?;
    let bw = json["jobs"][0]["read"]["bw_bytes"].as_f64()?;
    Some(bw / 1e6)
}

/// The ceilings alone (memcpy and the best O_DIRECT grid point, medians of `env.runs`),
/// for the other workloads' reports.
pub fn measure_ceilings(env: &Env, args: &Args) -> io::Result<Limits> {
    let p = args.resolve(env.scale);
    let path = env.data_file("limits.dat", p.file_bytes)?;
    let bar = env.bar("limits", (env.runs * (1 + p.grid.len())) as u64);
    let mut copies = Vec::new();
    let mut grid = Grid::new(&p)?;
    for run in 0..env.runs {
        bar.set_message(format!("memcpy run {}/{}", run + 1, env.runs));
        copies.push(memcpy(&p)?);
        bar.inc(1);
        grid.measure(&path, &p, &bar)?;
    }
    bar.finish_and_clear();
    let (_, best_runs) = grid.best();
    Ok(Limits {
        memcpy_gb_per_sec: measure::median(&copies, RunResult::mb_per_sec)
            .0
            .mb_per_sec()
            / 1000.0,
        odirect_seq_mb_per_sec: measure::median(best_runs, RunResult::mb_per_sec)
            .0
            .mb_per_sec(),
    })
}

fn memcpy(p: &Resolved) -> io::Result<RunResult> {
    let mut src = vec![0u8; p.memcpy_bytes as usize];
    data::fill(&mut src, 0);
    let blocks = src.len() / COPY_BYTES;
    let bound = Bound::Duration {
        warmup: secs(p.memcpy_secs / 10.0),
        measure: secs(p.memcpy_secs),
    };
    let mut r = measure::run_threads(1, bound, |_, c, rec| {
        let mut dst = vec![0u8; COPY_BYTES];
        let mut block = 0usize;
        while !c.stopped() {
            let measuring = c.measuring();
            let started = Instant::now();
            for k in 0..SAMPLE_EVERY {
                let at = block * COPY_BYTES;
                dst.copy_from_slice(&src[at..at + COPY_BYTES]);
                std::hint::black_box(&mut dst);
                if k == 0 && measuring {
                    rec.latency(started.elapsed());
                }
                if measuring {
                    rec.op(0, 0);
                }
                block = if block + 1 == blocks { 0 } else { block + 1 };
            }
        }
        Ok(())
    })?;
    r.bytes_moved = Some(r.ops * COPY_BYTES as u64);
    Ok(r)
}

/// One thread writes a zero to each 4 KiB page of a fresh `bytes` mapping on `pages`,
/// in order: the first touch of memory the process never had (the kernel faults each
/// page in and zeroes it). One op per 2 MiB; `huge_bytes` says what the kernel gave.
fn fresh(bytes: u64, pages: Pages) -> io::Result<RunResult> {
    const STEP_BYTES: usize = 2 << 20;
    let map = Mapped::new((bytes as usize).next_multiple_of(STEP_BYTES), pages)?;
    // An address, not a pointer, to cross into the measuring thread (a raw pointer is not
    // `Sync`); its provenance is exposed here and taken back there.
    let (base, len) = (map.as_mut_ptr().expose_provenance(), map.len());
    let mut r = measure::run_threads(1, Bound::Work { cap: None }, |_, _, rec| {
        let base = std::ptr::with_exposed_provenance_mut::<u8>(base);
        for step in (0..len).step_by(STEP_BYTES) {
            let started = Instant::now();
            for page in (step..step + STEP_BYTES).step_by(folio::PAGE_BYTES) {
                // SAFETY: `page < len` (`len` is a multiple of STEP_BYTES), so the write is
                // inside the mapping, which nothing else references; `map` is dropped only
                // after `run_threads` has joined this thread. Volatile, so that the touch is
                // not optimised away.
                unsafe { base.add(page).write_volatile(0) };
            }
            rec.latency(started.elapsed());
            rec.op(0, 0);
        }
        Ok(())
    })?;
    r.bytes_moved = Some(len as u64);
    r.extra.insert("huge_bytes".into(), json!(map.huge_bytes()));
    Ok(r)
}

/// One thread reads the file from start to end in `block` reads through `read`,
/// verifying every byte.
fn sequential(
    block: usize,
    file_bytes: u64,
    read: impl Fn(&mut [u8], u64) -> io::Result<usize> + Sync,
) -> io::Result<RunResult> {
    measure::run_threads(1, Bound::Work { cap: None }, |_, _, rec| {
        let mut buf = vec![0u8; block];
        let mut at = 0u64;
        while at < file_bytes {
            let started = Instant::now();
            let n = read(&mut buf, at)?;
            if n == 0 {
                break;
            }
            rec.latency(started.elapsed());
            rec.op(n as u64, data::verify(&buf[..n], at)?);
            at += n as u64;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fio_json() {
        let out = "note: both iodepth >= 1 and synchronous I/O engine are selected\n{\n \
                   \"fio version\" : \"fio-3.33\",\n \"jobs\" : [ { \"jobname\" : \"ceiling\",\n \
                   \"read\" : { \"io_bytes\" : 1073741824, \"bw_bytes\" : 2182000000 } } ] }\n";
        assert_eq!(parse_fio(out), Some(2182.0));
        assert_eq!(parse_fio("no json"), None);
        assert_eq!(parse_fio("{\"jobs\": []}"), None);
    }

    #[test]
    fn the_grid_holds_the_qd32_point_once() {
        let p = Args {
            grid_block_kib: Some(vec![1024, 128]),
            grid_depths: Some(vec![32, 8]),
            ..Args::default()
        }
        .resolve(Scale::Full);
        assert_eq!(p.grid.len(), 8, "2 blocks x 2 depths x 2 kinds of pages");
        assert!(p.grid.contains(&p.qd32()));
        let p = Args {
            grid_block_kib: Some(vec![128]),
            grid_depths: Some(vec![8]),
            ..Args::default()
        }
        .resolve(Scale::Quick);
        assert_eq!(
            p.grid.len(),
            3,
            "1 MiB x 32 is added for the odirect-qd32 row"
        );
    }

    #[test]
    fn median_of_is_the_lower_middle() {
        assert_eq!(median_of(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median_of(&[4.0, 2.0]), 2.0);
        assert_eq!(median_of(&[]), 0.0);
    }
}
