//! The workloads, and what they share: the run environment (`Env`), the result of one
//! workload (`Report`, the JSON shape of issue 7), and the trait each workload implements.
//!
//! Design: a workload is one module with an `Args` struct (its clap options, every size
//! optional so that `--quick` and the full run pick their own defaults) that implements
//! [`Workload`]. It measures every system at every thread count `env.runs` times through
//! [`measure_systems`], which interleaves folio and the kernel within a run (swapping
//! them every other run, and measuring reference systems after them) so that drift on a
//! noisy machine hits both alike, and keeps the median run of each (`measure::median`). Adding a workload is one
//! module, one variant of the command enum in `main.rs`, and (if `compare` should run it)
//! one line in `compare.rs`.
//!
//! A `Report` carries the fields (`workload`, `params`, `rows`, `limits`) and
//! extras: per row the bytes read and verified over all runs, each run's ops/s, and the
//! ratio to the kernel at the same thread count; per report the notes (how the kernel was
//! made cold or warm, what could not be done) and the targets of issue 7 with their
//! verdicts.

pub mod compare;
pub mod db_bench;
pub mod keeper;
pub mod limits;
pub mod miss_cost;
pub mod pread_scale;
pub mod pressure;
pub mod process;
pub mod randread;
pub mod randrw;
pub mod randwrite;
pub mod readahead_storm;
pub mod readseq;
pub mod restart;
pub mod rw;
pub mod scale;
pub mod scan_mix;
pub mod writeseq;

use std::cell::RefCell;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::data;
use crate::kernel::{ColdMethod, WarmMethod};
use crate::measure::{self, RunResult};

/// Repetitions of each measurement when neither `--runs` nor the workload says otherwise.
pub const RUNS_DEFAULT: usize = 3;

/// A workload: options in, one report out.
pub trait Workload {
    /// The name on the command line and in the JSON (`"readseq"`).
    fn name(&self) -> &'static str;
    /// Repetitions of each measurement unless `--runs` says otherwise.
    fn runs_default(&self) -> usize {
        RUNS_DEFAULT
    }
    fn run(&self, env: &Env) -> io::Result<Report>;
}

/// Everything a workload runs in: where its data lives, how often to repeat, how the
/// kernel is made cold and warm, which folio backend, and the machine's limits (measured
/// once, on first use).
pub struct Env {
    pub dir: PathBuf,
    pub runs: usize,
    pub scale: Scale,
    pub cold: ColdMethod,
    pub warm: WarmMethod,
    pub backend: folio::BackendKind,
    /// folio's maximum readahead window for every cache the workloads build.
    pub readahead_max_bytes: u64,
    /// The pages of every cache's arena (`--arena-pages`; the library's default unless set).
    pub arena_pages: folio::ArenaPages,
    /// Whether every cache's arena lives in a shared-memory segment watched by a keeper
    /// process (`--persistent`, `CacheBuilder::persistent`; off, the library's default,
    /// unless set).
    pub persistent: bool,
    pub progress: MultiProgress,
    pub limits_args: limits::Args,
    limits: RefCell<Option<Limits>>,
}

impl Env {
    pub fn new(
        dir: PathBuf,
        runs: usize,
        scale: Scale,
        warm: WarmMethod,
        backend: folio::BackendKind,
    ) -> Env {
        Env {
            dir,
            runs: runs.max(1),
            scale,
            cold: ColdMethod::detect(),
            warm,
            backend,
            readahead_max_bytes: folio::READAHEAD_MAX_BYTES_DEFAULT,
            arena_pages: folio::ArenaPages::default(),
            persistent: false,
            progress: MultiProgress::new(),
            limits_args: limits::Args::default(),
            limits: RefCell::new(None),
        }
    }

    /// A fresh (cold) folio cache of `capacity_bytes` on the chosen backend, with the
    /// readahead window of `--readahead-kib` (the library's by default), its arena in a
    /// segment under `--persistent`, and every other option at the library's default: its arena grows lazily, populated ahead of the
    /// allocator in the background (issue 13: a default that only the benchmark overrides
    /// is a bug). readseq measures the same scan with `Prefault::AtBuild` beside it.
    pub fn folio_cache(&self, capacity_bytes: u64) -> io::Result<folio::Cache> {
        self.folio_cache_prefault(capacity_bytes, folio::Prefault::default())
    }

    /// [`Env::folio_cache`] with its arena faulted in as `prefault` says.
    pub fn folio_cache_prefault(
        &self,
        capacity_bytes: u64,
        prefault: folio::Prefault,
    ) -> io::Result<folio::Cache> {
        folio::Cache::builder()
            .capacity_bytes(capacity_bytes.max(folio::CAPACITY_BYTES_MIN))
            .backend(self.backend)
            .readahead_max_bytes(self.readahead_max_bytes)
            .prefault(prefault)
            .arena_pages(self.arena_pages)
            .persistent(self.persistent)
            .build()
    }

    /// The machine's ceilings (memcpy, O_DIRECT at queue depth 32), measured on first use.
    pub fn limits(&self) -> io::Result<Limits> {
        if let Some(l) = *self.limits.borrow() {
            return Ok(l);
        }
        let l = limits::measure_ceilings(self, &self.limits_args)?;
        *self.limits.borrow_mut() = Some(l);
        Ok(l)
    }

    /// Records limits measured by the `limits` workload itself.
    pub fn set_limits(&self, l: Limits) {
        *self.limits.borrow_mut() = Some(l);
    }

    /// A data file `name` of `len_bytes` in the data directory (written or reused).
    pub fn data_file(&self, name: &str, len_bytes: u64) -> io::Result<PathBuf> {
        let bar = self.progress.add(ProgressBar::new_spinner());
        bar.set_message(format!("data: {name} ({} MiB)", len_bytes >> 20));
        bar.enable_steady_tick(Duration::from_millis(100));
        let result = data::ensure_file(&self.dir, name, len_bytes);
        bar.finish_and_clear();
        // A freshly written file sits in the page cache: every cold run drops it first.
        Ok(result?.0)
    }

    /// A progress bar over `measurements` measurements of `workload`.
    pub fn bar(&self, workload: &str, measurements: u64) -> ProgressBar {
        let bar = self.progress.add(ProgressBar::new(measurements));
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>16} [{bar:30}] {pos}/{len} {elapsed:>4} {wide_msg}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar.set_prefix(workload.to_string());
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    }
}

/// The machine's ceilings: of a hit (memory copy) and of a miss (O_DIRECT, queue depth 32).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Limits {
    pub memcpy_gb_per_sec: f64,
    pub odirect_seq_mb_per_sec: f64,
}

/// Which throughput the ratio column compares.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    OpsPerSec,
    MbPerSec,
}

impl Metric {
    pub fn of(self, row: &Row) -> f64 {
        match self {
            Metric::OpsPerSec => row.ops_per_sec,
            Metric::MbPerSec => row.mb_per_sec,
        }
    }
}

/// How big a run is: `--quick` shrinks sizes and durations (not the number of runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// `--quick`: a smoke run, `compare --quick` in about two minutes.
    Quick,
    /// The sizes and durations the README's results are measured with.
    Full,
}

impl Scale {
    /// `quick` at [`Scale::Quick`], `full` at [`Scale::Full`]: a default of each.
    pub fn pick<T>(self, quick: T, full: T) -> T {
        match self {
            Scale::Quick => quick,
            Scale::Full => full,
        }
    }
}

/// What a workload measures: folio, or a reference to hold it against. [`System::as_str`]
/// is its name in the tables and the JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    /// folio, copying into the caller's buffer (`File::read_at`).
    Folio,
    /// folio, reading through a pinned page (`File::get_page`).
    FolioPinned,
    /// folio's future (`File::read_at_async`), polled to completion on the reading
    /// thread: a hit is ready on the first poll.
    FolioAsync,
    /// folio without a hint its row is compared with (`scan-mix`: the scan read with no
    /// `Advice::NoReuse`).
    FolioNoHint,
    /// folio with its arena faulted in at build (`Prefault::AtBuild`), beside the
    /// library's default (`Prefault::Lazy`) in the same run.
    FolioPrefault,
    /// The kernel's page cache: buffered reads.
    Kernel,
    /// O_DIRECT reads (writes in `writeseq`), no cache.
    Direct,
    /// memcpy from memory: the copy's limit.
    Memcpy,
    /// O_DIRECT reads of 1 MiB, 32 deep: the grid point earlier reports called the
    /// disk's limit.
    ODirectQd32,
    /// The best point of the `limits` O_DIRECT grid (block size x depth x page size): the
    /// disk's limit.
    ODirectBest,
    /// The whole `limits` O_DIRECT grid, one turn of it (not a row: its points are
    /// `odirect-qd32` and `odirect-best`).
    ODirectGrid,
    /// The first write to each page of fresh anonymous memory on 4 KiB pages: how fast
    /// the machine hands a cache in user space memory it has not touched yet.
    Fresh4k,
    /// The same on transparent huge pages.
    FreshHuge,
    /// folio whose cache is full before the clock: every miss evicts a page and reuses
    /// its memory (`miss-cost`: the steady state, no first touch).
    FolioFull,
    /// folio with a cache of each process's own, beside `folio` sharing a domain
    /// (`db-bench readonly`: P processes on one database).
    FolioPrivate,
}

impl System {
    pub const ALL: [System; 15] = [
        System::Folio,
        System::FolioPinned,
        System::FolioAsync,
        System::FolioNoHint,
        System::FolioPrefault,
        System::Kernel,
        System::Direct,
        System::Memcpy,
        System::ODirectQd32,
        System::ODirectBest,
        System::ODirectGrid,
        System::Fresh4k,
        System::FreshHuge,
        System::FolioFull,
        System::FolioPrivate,
    ];

    /// The system's name in the tables and the JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            System::Folio => "folio",
            System::FolioPinned => "folio-pinned",
            System::FolioAsync => "folio-async",
            System::FolioNoHint => "folio-no-hint",
            System::FolioPrefault => "folio-prefault",
            System::Kernel => "kernel",
            System::Direct => "direct",
            System::Memcpy => "memcpy",
            System::ODirectQd32 => "odirect-qd32",
            System::ODirectBest => "odirect-best",
            System::ODirectGrid => "odirect-grid",
            System::Fresh4k => "fresh-4k",
            System::FreshHuge => "fresh-huge",
            System::FolioFull => "folio-full",
            System::FolioPrivate => "folio-private",
        }
    }

    /// The system named `name` (a row's `system`), if it is one of these.
    pub fn named(name: &str) -> Option<System> {
        System::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl std::fmt::Display for System {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One system at one thread count: the median of its runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub system: String,
    pub threads: u32,
    pub ops_per_sec: f64,
    pub mb_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub pages_inserted: Option<u64>,
    /// This row's throughput (`Report::ratio_of`) over the kernel's at the same threads:
    /// the median of the per-run ratios (run i of this system over run i of the kernel,
    /// measured next to each other), which drift on a busy machine disturbs least.
    pub vs_kernel: Option<f64>,
    /// Every run's ops/s and MB/s, in run order (the row is the median one).
    pub runs_ops_per_sec: Vec<f64>,
    pub runs_mb_per_sec: Vec<f64>,
    /// Bytes read over all runs, and bytes checked against the data rule: equal, or the
    /// benchmark would have stopped with a mismatch.
    pub bytes_read: u64,
    pub bytes_verified: u64,
    /// Bytes written over all runs (the write workloads; absent from the JSON of the
    /// others).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bytes_written: u64,
    /// The median run's syncs and their latency (the write workloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_p50_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_p99_us: Option<f64>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Row {
    /// The run of `runs` with the median `metric`, as a row.
    pub fn from_runs(system: System, threads: usize, runs: &[RunResult], metric: Metric) -> Row {
        let (m, all) = measure::median(runs, |r| match metric {
            Metric::OpsPerSec => r.ops_per_sec(),
            Metric::MbPerSec => r.mb_per_sec(),
        });
        Row {
            system: system.as_str().to_string(),
            threads: threads as u32,
            ops_per_sec: m.ops_per_sec(),
            mb_per_sec: m.mb_per_sec(),
            p50_us: m.p50_us,
            p99_us: m.p99_us,
            pages_inserted: m.pages_inserted,
            vs_kernel: None,
            runs_ops_per_sec: all,
            runs_mb_per_sec: runs.iter().map(RunResult::mb_per_sec).collect(),
            bytes_read: runs.iter().map(|r| r.bytes_read).sum(),
            bytes_verified: runs.iter().map(|r| r.bytes_verified).sum(),
            bytes_written: runs.iter().map(|r| r.bytes_written).sum(),
            sync_p50_us: m.sync_p50_us,
            sync_p99_us: m.sync_p99_us,
            extra: m.extra,
        }
    }
}

/// A target of issue 7 and whether this run met it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Target {
    pub what: String,
    pub measured: Option<f64>,
    pub required: f64,
    pub met: bool,
}

impl Target {
    /// `measured >= required` (a missing measurement is a miss).
    pub fn at_least(what: impl Into<String>, measured: Option<f64>, required: f64) -> Target {
        Target {
            what: what.into(),
            measured,
            required,
            met: measured.is_some_and(|m| m >= required),
        }
    }

    /// `measured <= required` (a missing measurement is a miss); `what` says "at most".
    pub fn at_most(what: impl Into<String>, measured: Option<f64>, required: f64) -> Target {
        Target {
            what: what.into(),
            measured,
            required,
            met: measured.is_some_and(|m| m <= required),
        }
    }

    /// `measured == required`, for page counts.
    pub fn equal(what: impl Into<String>, measured: Option<u64>, required: u64) -> Target {
        Target {
            what: what.into(),
            measured: measured.map(|m| m as f64),
            required: required as f64,
            met: measured == Some(required),
        }
    }
}

/// The result of one workload: the JSON object of issue 7, plus extras.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub workload: String,
    pub params: Map<String, Value>,
    pub rows: Vec<Row>,
    pub limits: Limits,
    pub ratio_of: Metric,
    pub notes: Vec<String>,
    pub targets: Vec<Target>,
}

impl Report {
    pub fn new(workload: &str, ratio_of: Metric) -> Report {
        Report {
            workload: workload.to_string(),
            params: Map::new(),
            rows: Vec::new(),
            limits: Limits::default(),
            ratio_of,
            notes: Vec::new(),
            targets: Vec::new(),
        }
    }

    pub fn param(&mut self, key: &str, value: impl Into<Value>) {
        self.params.insert(key.to_string(), value.into());
    }

    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// The row of `system` at `threads`.
    pub fn row(&self, system: System, threads: u32) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.system == system.as_str() && r.threads == threads)
    }

    /// `system`'s throughput over the kernel's at `threads`.
    pub fn ratio(&self, system: System, threads: u32) -> Option<f64> {
        self.row(system, threads)?.vs_kernel
    }

    /// `system`'s throughput (`ratio_of`) over `other`'s at `threads`: the median of the
    /// per-run ratios (run i over run i), as `fill_ratios` does against the kernel.
    pub fn ratio_between(&self, system: System, other: System, threads: u32) -> Option<f64> {
        let of = self.row(system, threads)?;
        let to = self.row(other, threads)?;
        paired_median(&self.runs_of(of), &self.runs_of(to))
    }

    /// Every run's `ratio_of` figure of `row`, in run order.
    fn runs_of(&self, row: &Row) -> Vec<f64> {
        match self.ratio_of {
            Metric::OpsPerSec => row.runs_ops_per_sec.clone(),
            Metric::MbPerSec => row.runs_mb_per_sec.clone(),
        }
    }

    /// Fills every row's ratio to the kernel row of the same thread count: the median of
    /// the ratios of runs taken side by side.
    pub fn fill_ratios(&mut self) {
        let kernel: Vec<(u32, Vec<f64>)> = self
            .rows
            .iter()
            .filter(|r| r.system == System::Kernel.as_str())
            .map(|r| (r.threads, self.runs_of(r)))
            .collect();
        let ratios: Vec<Option<f64>> = self
            .rows
            .iter()
            .map(|row| {
                let (_, k) = kernel.iter().find(|(t, _)| *t == row.threads)?;
                paired_median(&self.runs_of(row), k)
            })
            .collect();
        for (row, ratio) in self.rows.iter_mut().zip(ratios) {
            row.vs_kernel = ratio;
        }
    }
}

/// The median (lower middle) of `xs[i] / of[i]` over the runs where `of[i] > 0`; `None`
/// for none.
pub(crate) fn paired_median(xs: &[f64], of: &[f64]) -> Option<f64> {
    let mut paired: Vec<f64> = xs
        .iter()
        .zip(of)
        .filter(|(_, o)| **o > 0.0)
        .map(|(x, o)| x / o)
        .collect();
    paired.sort_by(f64::total_cmp);
    paired.get(paired.len().checked_sub(1)? / 2).copied()
}

/// One measurement `measure_systems` asks for.
#[derive(Clone, Copy, Debug)]
pub struct Turn {
    pub system: System,
    pub threads: usize,
    /// From 0 to `env.runs - 1`.
    pub run: usize,
}

/// Measures each of `systems` at each of `threads`, `env.runs` times, with `measure`, and
/// adds one row per (system, threads) to `report`, ratios filled.
///
/// Order: first the compared systems (folio, folio-prefault and the kernel, those of
/// them in `systems`), run by run (and within a run thread count by thread count), their
/// order reversed every other run; then the other systems (references such as O_DIRECT
/// without a cache) the same way. The disk's state carries over from one measurement to
/// the next: a cold scan right after readseq's O_DIRECT run reads 30-50% slower here
/// (docs/readahead.md), which would hit whichever system followed it. So the compared
/// systems only ever follow each other, and one unmeasured turn of the first of them
/// comes before run 0: the first scan after the limits measurement (an O_DIRECT scan
/// too) is as slow, and would otherwise land on run 0's first system in every set.
pub fn measure_systems(
    env: &Env,
    report: &mut Report,
    systems: &[System],
    threads: &[usize],
    mut measure: impl FnMut(Turn) -> io::Result<RunResult>,
) -> io::Result<()> {
    let bar = env.bar(
        &report.workload,
        (env.runs * threads.len() * systems.len()) as u64,
    );
    let mut runs: Vec<Vec<RunResult>> = vec![Vec::new(); threads.len() * systems.len()];
    let compared: Vec<usize> = [System::Folio, System::FolioPrefault, System::Kernel]
        .iter()
        .filter_map(|compared| systems.iter().position(|s| s == compared))
        .collect();
    let others: Vec<usize> = (0..systems.len())
        .filter(|si| !compared.contains(si))
        .collect();
    if let (Some(&si), Some(&t)) = (compared.first(), threads.first()) {
        bar.set_message(format!("{} threads={t} warm-up turn", systems[si]));
        measure(Turn {
            system: systems[si],
            threads: t,
            run: 0,
        })?;
    }
    for group in [compared, others] {
        for run in 0..env.runs {
            let mut order = group.clone();
            if run % 2 == 1 {
                order.reverse();
            }
            for (ti, &t) in threads.iter().enumerate() {
                for &si in &order {
                    let system = systems[si];
                    bar.set_message(format!("{system} threads={t} run {}/{}", run + 1, env.runs));
                    let result = measure(Turn {
                        system,
                        threads: t,
                        run,
                    })?;
                    runs[ti * systems.len() + si].push(result);
                    bar.inc(1);
                }
            }
        }
    }
    bar.finish_and_clear();
    for (ti, &t) in threads.iter().enumerate() {
        for (si, &system) in systems.iter().enumerate() {
            let row = Row::from_runs(system, t, &runs[ti * systems.len() + si], report.ratio_of);
            report.rows.push(row);
        }
    }
    report.fill_ratios();
    Ok(())
}

/// The thread counts of `--threads`, or `default`.
pub fn threads_or(list: &Option<Vec<usize>>, default: &[usize]) -> Vec<usize> {
    match list {
        Some(l) if !l.is_empty() => l.iter().map(|&t| t.max(1)).collect(),
        _ => default.to_vec(),
    }
}

/// Pages of 4 KiB in `bytes`.
pub fn pages_of(bytes: u64) -> u64 {
    bytes.div_ceil(folio::PAGE_BYTES as u64)
}

/// MiB to bytes.
pub fn mib(n: u64) -> u64 {
    n << 20
}

/// Seconds as a `Duration` (negative or NaN as zero).
pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(if s.is_finite() { s.max(0.0) } else { 0.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names are the JSON's and the tables' `system` values, which earlier results
    /// files hold: they must not change.
    #[test]
    fn system_names_are_the_json_names() {
        let names: Vec<&str> = System::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            names,
            [
                "folio",
                "folio-pinned",
                "folio-async",
                "folio-no-hint",
                "folio-prefault",
                "kernel",
                "direct",
                "memcpy",
                "odirect-qd32",
                "odirect-best",
                "odirect-grid",
                "fresh-4k",
                "fresh-huge",
                "folio-full",
                "folio-private"
            ]
        );
        for system in System::ALL {
            assert_eq!(System::named(system.as_str()), Some(system));
            assert_eq!(system.to_string(), system.as_str());
        }
        assert_eq!(System::named("spdk"), None);
    }

    fn row_of(system: System, runs_ops_per_sec: &[f64]) -> Row {
        Row {
            system: system.as_str().to_string(),
            threads: 1,
            ops_per_sec: 0.0,
            mb_per_sec: 0.0,
            p50_us: 0.0,
            p99_us: 0.0,
            pages_inserted: None,
            vs_kernel: None,
            runs_ops_per_sec: runs_ops_per_sec.to_vec(),
            runs_mb_per_sec: Vec::new(),
            bytes_read: 0,
            bytes_verified: 0,
            bytes_written: 0,
            sync_p50_us: None,
            sync_p99_us: None,
            extra: Map::new(),
        }
    }

    /// Ratios pair run i with run i (not medians with medians) and skip empty runs.
    #[test]
    fn ratios_pair_runs_taken_side_by_side() {
        let mut report = Report::new("t", Metric::OpsPerSec);
        report.rows.push(row_of(System::Folio, &[10.0, 30.0, 20.0]));
        report
            .rows
            .push(row_of(System::FolioPrefault, &[20.0, 10.0, 0.0]));
        report.rows.push(row_of(System::Kernel, &[5.0, 10.0, 40.0]));
        report.fill_ratios();
        // folio / kernel per run: 2, 3, 0.5 -> median 2.
        assert_eq!(report.ratio(System::Folio, 1), Some(2.0));
        // folio / folio-prefault per run: 0.5, 3 (run 2 has no prefault figure) -> 0.5.
        assert_eq!(
            report.ratio_between(System::Folio, System::FolioPrefault, 1),
            Some(0.5)
        );
        assert_eq!(report.ratio_between(System::Folio, System::Direct, 1), None);
        assert_eq!(report.ratio_between(System::Folio, System::Kernel, 2), None);
    }

    #[test]
    fn scale_picks_its_own_default() {
        assert_eq!(Scale::Quick.pick(64, 256), 64);
        assert_eq!(Scale::Full.pick(64, 256), 256);
    }
}
