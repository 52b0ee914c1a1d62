//! `restart` (issue 32): the first seconds of random 4 KiB reads after a process restart,
//! against the same process's warm rate, beside the kernel (whose page cache also stays
//! warm across a restart) and beside a cold start.
//!
//! Every reader is a child process: this binary's hidden `restart-reader` command, which
//! builds its cache (folio) or opens the files (the kernel), then does what it is told in
//! order: a first window of random reads timed from the start (`--first-secs`), a read of
//! the whole data set (`--fill`), a warm window (`--warm-secs`), and then either exits
//! cleanly (folio: the cache dropped, its final writeback done) or keeps reading until
//! this process SIGKILLs it (`--linger`). It says what it did as JSON lines on stdout: the
//! build (its time, the keeper's pid, what `Cache::adoption` says), each window's reads per
//! second, the fill, the drop.
//!
//! One round, every process started as soon as the one before it is gone:
//! - kernel cold: the page cache dropped (`kernel::make_cold`), then the first window.
//! - folio cold: a persistent cache under a name no segment has, the first window.
//! - folio: P1 builds a persistent cache named for the round (`segment_name`, in a private
//!   segment directory made for the run under `/dev/shm`, capacity the data set and an
//!   eighth), reads the whole data set, measures its warm window and exits cleanly. P2
//!   builds with the same name (adopting the segment), measures its first window
//!   (`restart-clean`), reads the whole set, measures its own warm window
//!   (`warm-before-kill`) and keeps reading until it is SIGKILLed; its keeper writes back
//!   and leaves the segment. P3 builds with the same name once the keeper is done and
//!   measures its first window (`restart-kill`). This process waits for each keeper to be
//!   done with the segment (by pidfd, and the segment's holder: a named segment's keeper
//!   stays as its steward once its writeback is over, and leaves when the next reader
//!   adopts it; this process is a child subreaper, so a keeper that exits is its child and
//!   is reaped) before it starts the next reader: the time is reported (`keeper_ms`).
//! - kernel: the page cache dropped; K1 reads the whole set and measures its warm window;
//!   K2 its first window, the fill, its warm window, then it is SIGKILLed while it reads;
//!   K3 its first window. This machine pages out page-cache pages left idle for ~30 s, so
//!   every reader starts at once; the residency of the files at K2's and K3's start
//!   (`mincore`) is in their rows.
//!
//! Rounds (`--runs`) alternate which of folio and the kernel goes first. Rows: one per
//! system and phase (`warm`, `restart-clean`, `warm-before-kill`, `restart-kill`, `cold`),
//! the median round; each carries every round's reads per second (`per_sec_runs`). The
//! ratios are medians of per-round ratios: `vs_warm` a restart over the warm window of the
//! process before it (restart-clean over warm, restart-kill over warm-before-kill; cold
//! over warm), `vs_kernel` folio over the kernel in the same phase. Targets (issue 32): a
//! folio restart's first window at least 0.9x its warm rate and at least 1.0x the kernel's
//! restart.
//!
//! Checks: every byte read is checked against the data rule, keyed per file
//! (`data::verify_keyed`), so a page served from the wrong file or a stale frame fails the
//! run. Reads are 4 KiB at 4 KiB-aligned offsets, uniform over every page of every file,
//! each thread with its own generator; one read in 16 is timed (p50, p99).
//!
//! Files: this one, the workload's definition, its rows, targets and notes; `rounds.rs`,
//! the parent's rounds of reader processes and the wait for their keepers (`after_exit`);
//! `reader.rs`, the reader role. Starting, killing and reaping processes and watching a
//! keeper are `workloads/process.rs`'s.
//!
//! Limits: a window counts reads from its start after the build; the build (folio's
//! adoption: mapping the segment, rebuilding the index) is reported beside (`build_ms`),
//! not in the rate. The data set must fit the segment directory's room and the memory
//! twice (folio's segment and the kernel's page cache).

mod reader;
mod rounds;

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::ValueEnum;
use serde_json::{json, Value};

pub use reader::{reader_main, ReaderArgs};
use rounds::Ctx;

use super::process::Subreaper;
use super::{mib, paired_median, Env, Metric, Report, Row, System, Target, Workload};
use crate::data;
use crate::kernel;
use crate::measure::RunResult;

/// Bytes of one read.
pub const READ_BYTES: usize = 4096;
/// Bytes of one read of the fill (the whole set read once, in order).
const FILL_READ_BYTES: usize = 256 << 10;
/// One read in this many is timed.
const TIME_EVERY: u64 = 16;
/// How long a keeper may take to be done before the run fails.
const KEEPER_TIMEOUT: Duration = Duration::from_secs(300);
/// The targets of issue 32.
pub const RESTART_OVER_WARM_MIN: f64 = 0.9;
pub const RESTART_OVER_KERNEL_MIN: f64 = 1.0;

/// The reading side of a child.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Side {
    Folio,
    Kernel,
}

impl Side {
    fn system(self) -> System {
        match self {
            Side::Folio => System::Folio,
            Side::Kernel => System::Kernel,
        }
    }
}

/// What a window measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The warm window of a process that read the whole set, then exits cleanly.
    Warm,
    /// The first window of the process started after that clean exit.
    RestartClean,
    /// The warm window of that second process, which is then SIGKILLed while it reads.
    WarmBeforeKill,
    /// The first window of the process started after the kill.
    RestartKill,
    /// The first window of a process that starts with nothing cached.
    Cold,
}

impl Phase {
    pub const ALL: [Phase; 5] = [
        Phase::Warm,
        Phase::RestartClean,
        Phase::WarmBeforeKill,
        Phase::RestartKill,
        Phase::Cold,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Warm => "warm",
            Phase::RestartClean => "restart-clean",
            Phase::WarmBeforeKill => "warm-before-kill",
            Phase::RestartKill => "restart-kill",
            Phase::Cold => "cold",
        }
    }

    /// The warm phase this phase is held against (`vs_warm`).
    fn warm_of(self) -> Option<Phase> {
        match self {
            Phase::RestartClean | Phase::Cold => Some(Phase::Warm),
            Phase::RestartKill => Some(Phase::WarmBeforeKill),
            Phase::Warm | Phase::WarmBeforeKill => None,
        }
    }
}

#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// MiB of the data set over all files [default: 2048; --quick 64]
    #[arg(long)]
    pub data_mib: Option<u64>,
    /// Files the data set is spread over [default: 4]
    #[arg(long)]
    pub files: Option<u64>,
    /// Reading threads of every process [default: 4]
    #[arg(long)]
    pub threads: Option<usize>,
    /// Seconds of the first window after a start (restart, cold) [default: 10; --quick 1]
    #[arg(long)]
    pub first_secs: Option<f64>,
    /// Seconds of the warm window [default: 5; --quick 1]
    #[arg(long)]
    pub warm_secs: Option<f64>,
}

/// The data set: `files` files of `file_bytes`, file `i` keyed with `file_key(i)`.
#[derive(Clone, Debug)]
struct Plan {
    dir: PathBuf,
    files: u64,
    file_bytes: u64,
}

fn file_key(file: u64) -> u64 {
    (file + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

impl Plan {
    fn path(&self, file: u64) -> PathBuf {
        self.dir.join(format!("restart-{file}.dat"))
    }

    fn paths(&self) -> Vec<PathBuf> {
        (0..self.files).map(|f| self.path(f)).collect()
    }

    fn total_bytes(&self) -> u64 {
        self.files * self.file_bytes
    }

    fn pages(&self) -> u64 {
        self.total_bytes() / READ_BYTES as u64
    }

    /// File and offset of page `page` of the whole set.
    fn locate(&self, page: u64) -> (usize, u64) {
        let per_file = self.file_bytes / READ_BYTES as u64;
        (
            (page / per_file) as usize,
            page % per_file * READ_BYTES as u64,
        )
    }
}

impl Workload for Args {
    fn name(&self) -> &'static str {
        "restart"
    }

    /// One round: a round is about 2.5 min at the default size on the reference machine
    /// (its windows alone 80 s); `--runs 3` gives medians.
    fn runs_default(&self) -> usize {
        1
    }

    fn run(&self, env: &Env) -> io::Result<Report> {
        let files = self.files.unwrap_or(4).max(1);
        let data_bytes = mib(self.data_mib.unwrap_or(env.scale.pick(64, 2048)).max(1));
        // Whole MiB per file: the pages of every file tile it.
        let file_bytes = mib(((data_bytes / files) >> 20).max(1));
        let threads = self.threads.unwrap_or(4).max(1);
        let first_secs = self.first_secs.unwrap_or(env.scale.pick(1.0, 10.0));
        let warm_secs = self.warm_secs.unwrap_or(env.scale.pick(1.0, 5.0));
        if !(first_secs > 0.0 && warm_secs > 0.0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "restart: --first-secs and --warm-secs must be above 0",
            ));
        }
        let plan = Plan {
            dir: env.dir.clone(),
            files,
            file_bytes,
        };
        let capacity_bytes = plan.total_bytes() + plan.total_bytes() / 8 + mib(64);
        // A private segment directory, so that no other cache's segment is in the way
        // (and nothing of ours is left in /dev/shm if the run fails).
        let segment_base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let segment_dir = tempfile::Builder::new()
            .prefix("folio-bench-restart-")
            .tempdir_in(&segment_base)?;
        let room = folio::segment_room_capacity_bytes(segment_dir.path())?;
        if room < capacity_bytes {
            return Err(io::Error::other(format!(
                "restart: the segment directory {} has room for a cache of {} MiB, the data \
                 set needs {} MiB: lower --data-mib",
                segment_base.display(),
                room >> 20,
                capacity_bytes >> 20
            )));
        }

        let bar = env.progress.add(indicatif::ProgressBar::new_spinner());
        bar.set_message(format!(
            "restart: data ({files} files, {} MiB)",
            plan.total_bytes() >> 20
        ));
        bar.enable_steady_tick(Duration::from_millis(100));
        for f in 0..files {
            data::ensure_keyed_file(
                &env.dir,
                &format!("restart-{f}.dat"),
                file_bytes,
                file_key(f),
            )?;
        }
        bar.finish_and_clear();

        let mut report = Report::new(self.name(), Metric::OpsPerSec);
        report.param("threads", vec![threads]);
        report.param("files", files);
        report.param("file_bytes", file_bytes);
        report.param("data_bytes", plan.total_bytes());
        report.param("read_bytes", READ_BYTES);
        report.param("first_secs", first_secs);
        report.param("warm_secs", warm_secs);
        report.param("folio_capacity_bytes", capacity_bytes);
        report.param("segment_dir", segment_base.display().to_string());
        report.param("runs", env.runs);

        let _reaper = Subreaper::become_one()?;
        let ctx = Ctx {
            env,
            plan: &plan,
            threads,
            first_secs,
            warm_secs,
            capacity_bytes,
            segment_dir: segment_dir.path(),
        };
        let bar = env.bar("restart", env.runs as u64 * 10);
        // [system][phase] -> one run per round.
        let mut runs: Vec<Vec<Vec<RunResult>>> = vec![vec![Vec::new(); Phase::ALL.len()]; 2];
        for round in 0..env.runs {
            let sides = if round % 2 == 0 {
                [Side::Folio, Side::Kernel]
            } else {
                [Side::Kernel, Side::Folio]
            };
            kernel::make_cold(&plan.paths(), env.cold)?;
            bar.set_message(format!("kernel cold, round {}/{}", round + 1, env.runs));
            let cold = ctx.cold(Side::Kernel, round)?;
            runs[1][Phase::Cold as usize].push(cold);
            bar.inc(1);
            for side in sides {
                let si = side as usize;
                bar.set_message(format!(
                    "{side:?} restarts, round {}/{}",
                    round + 1,
                    env.runs
                ));
                if side == Side::Folio {
                    let cold = ctx.cold(Side::Folio, round)?;
                    runs[si][Phase::Cold as usize].push(cold);
                    bar.inc(1);
                }
                kernel::make_cold(&plan.paths(), env.cold)?;
                for (phase, run) in ctx.restarts(side, round, &bar)? {
                    runs[si][phase as usize].push(run);
                }
            }
        }
        bar.finish_and_clear();

        for side in [Side::Folio, Side::Kernel] {
            for phase in Phase::ALL {
                let these = &runs[side as usize][phase as usize];
                let mut row = Row::from_runs(side.system(), threads, these, Metric::OpsPerSec);
                row.extra.insert("phase".into(), json!(phase.as_str()));
                row.extra.insert(
                    "per_sec_runs".into(),
                    json!(these
                        .iter()
                        .map(|r| r.extra.get("per_sec").cloned().unwrap_or(Value::Null))
                        .collect::<Vec<_>>()),
                );
                for key in ["build_ms", "keeper_ms", "fill_secs"] {
                    let all: Vec<Value> = these
                        .iter()
                        .map(|r| r.extra.get(key).cloned().unwrap_or(Value::Null))
                        .collect();
                    if all.iter().any(|v| !v.is_null()) {
                        row.extra.insert(format!("{key}_runs"), json!(all));
                    }
                }
                let ops =
                    |rs: &[RunResult]| rs.iter().map(RunResult::ops_per_sec).collect::<Vec<_>>();
                if let Some(warm) = phase.warm_of() {
                    let vs = paired_median(&ops(these), &ops(&runs[side as usize][warm as usize]));
                    row.extra.insert("vs_warm".into(), json!(vs));
                }
                if side == Side::Folio {
                    row.vs_kernel = paired_median(
                        &ops(these),
                        &ops(&runs[Side::Kernel as usize][phase as usize]),
                    );
                }
                report.rows.push(row);
            }
        }

        let row_of = |side: Side, phase: Phase| {
            report.rows.iter().find(|r| {
                r.system == side.system().as_str()
                    && r.extra.get("phase").and_then(Value::as_str) == Some(phase.as_str())
            })
        };
        let mut targets = Vec::new();
        for (phase, what) in [
            (Phase::RestartClean, "after a clean exit"),
            (Phase::RestartKill, "after SIGKILL"),
        ] {
            let folio = row_of(Side::Folio, phase);
            targets.push(Target::at_least(
                format!("restart {what}: folio's first {first_secs} s / its warm rate"),
                folio.and_then(|r| r.extra.get("vs_warm")?.as_f64()),
                RESTART_OVER_WARM_MIN,
            ));
            targets.push(Target::at_least(
                format!("restart {what}: folio's first {first_secs} s / the kernel's"),
                folio.and_then(|r| r.vs_kernel),
                RESTART_OVER_KERNEL_MIN,
            ));
        }
        report.targets = targets;

        report.note(format!(
            "{threads} threads of random {READ_BYTES}-byte reads over {files} files of {} MiB, \
             every byte checked; every reader a process of its own (restart-reader)",
            file_bytes >> 20
        ));
        report.note(format!(
            "folio: persistent caches of {} MiB named per round in a private segment directory \
             under {}; the backend, arena pages and readahead as this run's options; P1 fill + \
             warm {warm_secs} s + clean exit; P2 adopts: first {first_secs} s, fill, warm \
             {warm_secs} s, SIGKILL while reading; P3 adopts after the keeper is done: first \
             {first_secs} s; cold: a name no segment has",
            capacity_bytes >> 20,
            segment_base.display()
        ));
        report.note(format!(
            "kernel: buffered pread; K1 fill + warm, K2 first window, fill, warm, SIGKILL, K3 \
             first window, each started at once (this machine pages out page cache idle ~30 s); \
             cold: {} first",
            env.cold.describe()
        ));
        report.note(
            "rates count reads after the build (folio's build_ms, the adoption, beside); \
             vs_warm: the restart's first window over the warm window of the process before \
             it, per round; folio/kernel: the same phase, per round; rows: the median round",
        );
        report.limits = env.limits()?;
        Ok(report)
    }
}
