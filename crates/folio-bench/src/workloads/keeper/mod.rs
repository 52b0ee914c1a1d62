//! `keeper` (issue 31): how long a persistent cache's keeper takes, from the death of the
//! cache's owner, to make everything the owner left dirty durable; beside the kernel's
//! figure for the same dirty data, the time `fsync` takes to write back what buffered
//! writes left in its page cache.
//!
//! Systems: `folio` (an owner process, this binary's hidden `keeper-owner` command, builds
//! a persistent cache, writes the data with `File::write_at` and never syncs; this process
//! SIGKILLs it and waits for its keeper to exit), `kernel` (this process writes the same
//! data with buffered `pwrite`, then `fsync`s every file).
//!
//! The worst case, on purpose: the owner's cache holds everything it wrote dirty at the
//! kill. Its capacity is four times the dirty data, its dirty limit and background
//! threshold are the whole capacity, its dirty expiry an hour and write-behind off, so no
//! page is written before the kill; the owner checks that (its `Stats`: every page dirty,
//! nothing written back) before it says it is ready, and the run fails otherwise. The
//! kernel's dirty data stays below its background threshold (10% of the memory here) and
//! is younger than its expiry (30 s), so its `fsync` finds it all dirty too.
//!
//! Shapes (`--shapes`), the same for both systems:
//! - `seq`: `--files` NEW files, each written whole in 1 MiB writes, one file after the
//!   other (a log, an SST file being built).
//! - `rand`: the same files, existing and durable (written and `fsync`ed before the
//!   measurement, then dropped from the kernel's cache), every 4 KiB block overwritten once
//!   in a random order across all the files (a database's pages): the writeback cannot
//!   merge what the order scatters unless it sorts.
//!
//! What is timed: `folio`, from just before `kill(SIGKILL)` to the segment's removal, which
//! the keeper does once it wrote every dirty block and `fsync`ed every file (`keeper`
//! module of the library, step 4): the owner's death (its memory torn down), the keeper
//! noticing it (pidfd), its scan of the side table, the writes and the syncs. The removal
//! is seen by a look at the path every millisecond. The keeper's exit comes after (it
//! unmaps the segment and frees its memory: 0.2 s for 1 GiB here) and is reported beside
//! (`keeper_exit_ms`). `kernel`, the `fsync` calls only. Each run's time, their median
//! (p50) and their maximum are reported; the rows' MB/s is the dirty data over the time
//! (the rate at which the data became durable), and the ratio is folio's over the kernel's.
//!
//! Checks: the keeper must remove its segment and exit with status 0 (this process is a child subreaper during
//! the workload, so the keeper, orphaned at its start, is its child) and leave no segment;
//! then, for both systems, the kernel's cache of the files is dropped and every byte of
//! every file is read back with `std::fs` and checked against the data rule, keyed per
//! measurement and file (`data::fill_keyed`), so a block missing (the old contents of a
//! `rand` file), misplaced or from another measurement fails the run; the length too.
//!
//! Order: in each run folio and the kernel take turns, swapping every other run; before
//! every measurement `sync` and the page cache dropped (`kernel::make_cold`), so no earlier
//! dirty data is written during it. The owner's and the kernel's write times are reported
//! beside (not in) the figure: the owner's is the first touch of the segment's shared
//! memory, the kernel's the first touch of its page cache.
//!
//! Files: this one, the workload's definition, its data, the kernel side and the report;
//! `owner.rs`, the folio side (the owner role and the wait for its keeper). The process
//! handling (roles, the subreaper, the keeper's pidfd) is `workloads/process.rs`.
//!
//! Limits: one owner, one cache, one device; the keeper writes file by file, each block
//! run synchronously, so its figure is a lower bound on what several owners dying at once
//! would see. `--persistent` does not apply (the folio side is persistent by definition).

mod owner;

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::ValueEnum;
use serde_json::{json, Value};

pub use owner::{owner_main, OwnerArgs};

use super::process::Subreaper;
use super::{mib, paired_median, Env, Metric, Report, Row, System, Workload};
use crate::data;
use crate::kernel;
use crate::measure::{self, RunResult};

/// Bytes of one write of the `seq` shape.
pub const SEQ_WRITE_BYTES: usize = 1 << 20;
/// Bytes of one write of the `rand` shape: a block.
pub const RAND_WRITE_BYTES: usize = 4096;
/// How long the keeper may take before the run fails (a keeper that hangs).
const KEEPER_TIMEOUT: Duration = Duration::from_secs(600);
const SYSTEMS: [System; 2] = [System::Folio, System::Kernel];

/// How the dirty data is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Shape {
    /// New files, each written whole in 1 MiB writes, one after the other.
    Seq,
    /// Existing files, every 4 KiB block overwritten once in a random order across them.
    Rand,
}

impl Shape {
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::Seq => "seq",
            Shape::Rand => "rand",
        }
    }

    fn describe(self, files: u64, file_bytes: u64) -> String {
        match self {
            Shape::Seq => format!(
                "seq: {files} new files of {} MiB, each written whole in 1 MiB writes, one \
                 file after the other",
                file_bytes >> 20
            ),
            Shape::Rand => format!(
                "rand: {files} existing files of {} MiB (durable, not cached), every 4 KiB \
                 block overwritten once in a random order across the files",
                file_bytes >> 20
            ),
        }
    }
}

#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// MiB left dirty at the kill, over all files [default: 256; --quick 32]
    #[arg(long)]
    pub dirty_mib: Option<u64>,
    /// Files the dirty data is spread over [default: 4]
    #[arg(long)]
    pub files: Option<u64>,
    /// MiB of the owner's cache [default: 4x the dirty data, at least 64]
    #[arg(long)]
    pub cache_mib: Option<u64>,
    /// Shapes of the writes, comma-separated [default: seq,rand]
    #[arg(long, value_enum, value_delimiter = ',')]
    pub shapes: Option<Vec<Shape>>,
}

/// The key of file `file`'s bytes in measurement `generation` (0: the contents a `rand`
/// file has before it is overwritten). Keys differ per file and measurement, so every
/// word of a file differs between any two of them.
fn file_key(generation: u64, file: u64) -> u64 {
    generation.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (file + 1).wrapping_mul(0xd6e8_feb8_6659_fd93)
}

fn file_path(dir: &Path, file: u64) -> PathBuf {
    dir.join(format!("keeper-{file}.dat"))
}

/// What the workload writes, the same for both systems.
#[derive(Clone, Copy, Debug)]
struct Plan {
    shape: Shape,
    files: u64,
    file_bytes: u64,
}

impl Plan {
    fn total_bytes(&self) -> u64 {
        self.files * self.file_bytes
    }

    /// A measurement as a run: the dirty data, written once, made durable in `synced`.
    fn synced_run(&self, synced: Duration) -> RunResult {
        RunResult {
            ops: 1,
            bytes_written: self.total_bytes(),
            bytes_moved: Some(self.total_bytes()),
            elapsed_secs: synced.as_secs_f64(),
            ..RunResult::default()
        }
    }

    fn paths(&self, dir: &Path) -> Vec<PathBuf> {
        (0..self.files).map(|f| file_path(dir, f)).collect()
    }

    /// Calls `write(file, bytes, offset)` for every write of the shape, in order, with the
    /// bytes of measurement `generation`.
    fn write_all(
        &self,
        generation: u64,
        mut write: impl FnMut(usize, &[u8], u64) -> io::Result<()>,
    ) -> io::Result<()> {
        match self.shape {
            Shape::Seq => {
                let mut buf = vec![0u8; SEQ_WRITE_BYTES];
                for f in 0..self.files {
                    let mut at = 0;
                    while at < self.file_bytes {
                        let len = (self.file_bytes - at).min(SEQ_WRITE_BYTES as u64) as usize;
                        data::fill_keyed(&mut buf[..len], at, file_key(generation, f));
                        write(f as usize, &buf[..len], at)?;
                        at += len as u64;
                    }
                }
            }
            Shape::Rand => {
                let per_file = self.file_bytes / RAND_WRITE_BYTES as u64;
                let mut order: Vec<u64> = (0..self.files * per_file).collect();
                let mut rng = measure::Rng::new(generation);
                for i in (1..order.len()).rev() {
                    let j = rng.below(i as u64 + 1) as usize;
                    order.swap(i, j);
                }
                let mut buf = [0u8; RAND_WRITE_BYTES];
                for block in order {
                    let (f, at) = (block / per_file, block % per_file * RAND_WRITE_BYTES as u64);
                    data::fill_keyed(&mut buf, at, file_key(generation, f));
                    write(f as usize, &buf, at)?;
                }
            }
        }
        Ok(())
    }

    /// The files as a measurement starts: gone (`seq`), or holding generation 0 and
    /// durable (`rand`); then nothing of them (nor anything dirty) in the kernel's cache.
    fn prepare(&self, env: &Env) -> io::Result<()> {
        let paths = self.paths(&env.dir);
        for path in &paths {
            remove_if_there(path)?;
        }
        if self.shape == Shape::Rand {
            let mut buf = vec![0u8; SEQ_WRITE_BYTES];
            for (f, path) in paths.iter().enumerate() {
                let file = OpenOptions::new().write(true).create_new(true).open(path)?;
                let mut at = 0;
                while at < self.file_bytes {
                    let len = (self.file_bytes - at).min(SEQ_WRITE_BYTES as u64) as usize;
                    data::fill_keyed(&mut buf[..len], at, file_key(0, f as u64));
                    file.write_all_at(&buf[..len], at)?;
                    at += len as u64;
                }
                file.sync_all()?;
            }
        }
        let existing: Vec<PathBuf> = paths.into_iter().filter(|p| p.exists()).collect();
        kernel::make_cold(&existing, env.cold)
    }

    /// Drops the files from the kernel's cache and reads every byte back with `std::fs`,
    /// checking it against generation `generation`. Returns the bytes checked.
    fn verify(&self, env: &Env, generation: u64, system: System) -> io::Result<u64> {
        let paths = self.paths(&env.dir);
        kernel::make_cold(&paths, env.cold)?;
        let mut buf = vec![0u8; SEQ_WRITE_BYTES];
        let mut checked = 0;
        for (f, path) in paths.iter().enumerate() {
            let file = File::open(path)?;
            let len = file.metadata()?.len();
            if len != self.file_bytes {
                return Err(io::Error::other(format!(
                    "keeper {system}: {} is {len} bytes after the run, not {}",
                    path.display(),
                    self.file_bytes
                )));
            }
            let mut at = 0;
            while at < len {
                let want = (len - at).min(SEQ_WRITE_BYTES as u64) as usize;
                file.read_exact_at(&mut buf[..want], at)?;
                data::verify_keyed(&buf[..want], at, file_key(generation, f as u64)).map_err(
                    |m| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("keeper {system}: {} after the run: {m}", path.display()),
                        )
                    },
                )?;
                at += want as u64;
            }
            checked += len;
        }
        Ok(checked)
    }
}

fn remove_if_there(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

impl Workload for Args {
    fn name(&self) -> &'static str {
        "keeper"
    }

    fn runs_default(&self) -> usize {
        5
    }

    fn run(&self, env: &Env) -> io::Result<Report> {
        let files = self.files.unwrap_or(4).max(1);
        let dirty_bytes = mib(self.dirty_mib.unwrap_or(env.scale.pick(32, 256)).max(1));
        // Whole MiB per file: both shapes' writes then tile every file.
        let file_bytes = mib(((dirty_bytes / files) >> 20).max(1));
        let cache_bytes = mib(self
            .cache_mib
            .unwrap_or(((4 * files * file_bytes) >> 20).max(64)));
        if cache_bytes < 2 * files * file_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "keeper: --cache-mib must be at least twice the dirty data, so that none of \
                 it has to be written back before the kill",
            ));
        }
        let shapes = match &self.shapes {
            Some(s) if !s.is_empty() => s.clone(),
            _ => vec![Shape::Seq, Shape::Rand],
        };

        let mut report = Report::new(self.name(), Metric::MbPerSec);
        report.param("threads", vec![1]);
        report.param("files", files);
        report.param("file_bytes", file_bytes);
        report.param("dirty_bytes", files * file_bytes);
        report.param("cache_bytes", cache_bytes);
        report.param(
            "shapes",
            shapes.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        );
        report.param("seq_write_bytes", SEQ_WRITE_BYTES);
        report.param("rand_write_bytes", RAND_WRITE_BYTES);
        report.param("runs", env.runs);

        let _reaper = Subreaper::become_one()?;
        let mut generation = 0;
        for &shape in &shapes {
            let plan = Plan {
                shape,
                files,
                file_bytes,
            };
            let bar = env.bar(
                &format!("keeper {}", shape.as_str()),
                (env.runs * SYSTEMS.len()) as u64,
            );
            let mut runs: [Vec<RunResult>; 2] = [Vec::new(), Vec::new()];
            for run in 0..env.runs {
                let mut order = [0, 1];
                if run % 2 == 1 {
                    order.reverse();
                }
                for si in order {
                    generation += 1;
                    bar.set_message(format!("{} run {}/{}", SYSTEMS[si], run + 1, env.runs));
                    plan.prepare(env)?;
                    let mut r = match SYSTEMS[si] {
                        System::Folio => owner::run_folio(env, &plan, cache_bytes, generation)?,
                        _ => run_kernel(env, &plan, generation)?,
                    };
                    let verified = plan.verify(env, generation, SYSTEMS[si])?;
                    r.bytes_read = verified;
                    r.bytes_verified = verified;
                    runs[si].push(r);
                    bar.inc(1);
                }
            }
            bar.finish_and_clear();
            for path in plan.paths(&env.dir) {
                remove_if_there(&path)?;
            }
            let first = report.rows.len();
            for (si, system) in SYSTEMS.into_iter().enumerate() {
                let mut row = Row::from_runs(system, 1, &runs[si], Metric::MbPerSec);
                let ms: Vec<f64> = runs[si].iter().map(|r| r.elapsed_secs * 1e3).collect();
                row.extra.insert("shape".into(), json!(shape.as_str()));
                row.extra.insert("synced_ms_runs".into(), json!(ms));
                row.extra.insert(
                    "synced_ms_p50".into(),
                    json!(measure::lower_median(ms.iter().copied())),
                );
                row.extra.insert(
                    "synced_ms_max".into(),
                    json!(ms.iter().copied().fold(0.0, f64::max)),
                );
                let exits: Vec<f64> = runs[si]
                    .iter()
                    .filter_map(|r| r.extra.get("keeper_exit_ms").and_then(Value::as_f64))
                    .collect();
                if !exits.is_empty() {
                    row.extra.insert(
                        "keeper_exit_ms_p50".into(),
                        json!(measure::lower_median(exits.iter().copied())),
                    );
                    row.extra.insert("keeper_exit_ms_runs".into(), json!(exits));
                }
                let writes: Vec<Value> = runs[si]
                    .iter()
                    .map(|r| r.extra.get("write_secs").cloned().unwrap_or(Value::Null))
                    .collect();
                row.extra
                    .insert("write_secs_runs".into(), Value::Array(writes));
                report.rows.push(row);
            }
            let folio_mb = &report.rows[first].runs_mb_per_sec;
            let kernel_mb = &report.rows[first + 1].runs_mb_per_sec;
            report.rows[first].vs_kernel = paired_median(folio_mb, kernel_mb);
            report.note(plan.shape.describe(files, file_bytes));
        }
        report.note(format!(
            "folio: an owner process builds a persistent cache of {} MiB (segment in /dev/shm), \
             dirty limit and background threshold = the capacity, dirty expiry 1 h, \
             write-behind off: the worst case, everything still dirty at the kill (checked: \
             every page dirty, none written back); writes, never syncs; SIGKILLed",
            cache_bytes >> 20
        ));
        report.note(
            "folio synced: from just before kill(SIGKILL) to the keeper's exit (status 0, \
             segment removed: every dirty block written, every file fsynced); kernel synced: \
             fsync of every file after the same writes, buffered",
        );
        report.note(
            "before every measurement: sync, page cache dropped; after it: page cache dropped, \
             every byte of every file read back with std::fs and checked (bytes_verified)",
        );
        report.limits = env.limits()?;
        Ok(report)
    }
}

/// The kernel side: the same writes, buffered, then `fsync` of every file, timed.
fn run_kernel(env: &Env, plan: &Plan, generation: u64) -> io::Result<RunResult> {
    let files: Vec<File> = plan
        .paths(&env.dir)
        .iter()
        .map(|path| match plan.shape {
            Shape::Seq => OpenOptions::new().write(true).create_new(true).open(path),
            Shape::Rand => OpenOptions::new().write(true).open(path),
        })
        .collect::<io::Result<_>>()?;
    let t = Instant::now();
    plan.write_all(generation, |f, bytes, at| files[f].write_all_at(bytes, at))?;
    let write_secs = t.elapsed().as_secs_f64();
    let dirty_before = kernel::meminfo_bytes("Dirty");
    let start = Instant::now();
    for file in &files {
        file.sync_all()?;
    }
    let synced = start.elapsed();
    let mut r = plan.synced_run(synced);
    r.extra.insert("write_secs".into(), json!(write_secs));
    r.extra.insert(
        "meminfo_dirty_bytes_before_fsync".into(),
        json!(dirty_before),
    );
    Ok(r)
}
