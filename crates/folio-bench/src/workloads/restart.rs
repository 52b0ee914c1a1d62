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
//! Limits: a window counts reads from its start after the build; the build (folio's
//! adoption: mapping the segment, rebuilding the index) is reported beside (`build_ms`),
//! not in the rate. The data set must fit the segment directory's room and the memory
//! twice (folio's segment and the kernel's page cache).

use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::ValueEnum;
use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use super::keeper::{reap, PidFd, Subreaper};
use super::{mib, paired_median, Env, Metric, Report, Row, System, Target, Workload};
use crate::data;
use crate::kernel;
use crate::measure::{self, RunResult};
use crate::{Backend, Pages};

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

/// What every round's processes share.
struct Ctx<'a> {
    env: &'a Env,
    plan: &'a Plan,
    threads: usize,
    first_secs: f64,
    warm_secs: f64,
    capacity_bytes: u64,
    segment_dir: &'a Path,
}

/// What a reader is told to do, in order.
#[derive(Clone, Debug, Default)]
struct Steps {
    first_secs: f64,
    fill: bool,
    warm_secs: f64,
    linger: bool,
    segment_name: Option<String>,
}

impl Ctx<'_> {
    /// A cold start of `side`: folio under a fresh name, the kernel after its cache was
    /// dropped (by the caller).
    fn cold(&self, side: Side, round: usize) -> io::Result<RunResult> {
        let steps = Steps {
            first_secs: self.first_secs,
            segment_name: (side == Side::Folio).then(|| format!("cold-{round}")),
            ..Steps::default()
        };
        let mut child = self.spawn(side, &steps, round as u64 * 16 + 1)?;
        let said = child.finish()?;
        self.after_exit(side, &said)?;
        let mut run = said.window("first")?;
        run.extra.insert("build_ms".into(), json!(said.build_ms()));
        if side == Side::Folio {
            run.extra
                .insert("adoption".into(), said.adoption().unwrap_or(Value::Null));
        }
        if side == Side::Folio {
            // The cold cache's segment (left by its clean exit once caches adopt) is of no
            // further use.
            remove_segments(self.segment_dir, "cold-")?;
        }
        Ok(run)
    }

    /// The three processes of a restart chain of `side`: warm + clean exit, restart +
    /// warm + SIGKILL, restart.
    fn restarts(
        &self,
        side: Side,
        round: usize,
        bar: &indicatif::ProgressBar,
    ) -> io::Result<Vec<(Phase, RunResult)>> {
        let name = (side == Side::Folio).then(|| format!("restart-{round}"));
        let seed = round as u64 * 16;
        let mut out = Vec::new();

        // 1: fill, warm, clean exit.
        let steps = Steps {
            fill: true,
            warm_secs: self.warm_secs,
            segment_name: name.clone(),
            ..Steps::default()
        };
        let mut p1 = self.spawn(side, &steps, seed + 2)?;
        let said = p1.finish()?;
        let keeper_ms = self.after_exit(side, &said)?;
        let mut warm = said.window("warm")?;
        warm.extra.insert("build_ms".into(), json!(said.build_ms()));
        warm.extra
            .insert("fill_secs".into(), json!(said.fill_secs()));
        out.push((Phase::Warm, warm));
        bar.inc(1);

        // 2: restart, fill, warm, SIGKILL while reading.
        let residency = self.residency(side)?;
        let steps = Steps {
            first_secs: self.first_secs,
            fill: true,
            warm_secs: self.warm_secs,
            linger: true,
            segment_name: name.clone(),
        };
        let mut p2 = self.spawn(side, &steps, seed + 3)?;
        let said = p2.until_lingering()?;
        let keeper = match said.keeper_pid() {
            Some(pid) => Some(PidFd::open(pid).map(|fd| (pid, fd))?),
            None => None,
        };
        let segment = said.segment();
        // Kill while it reads: a moment into its lingering reads.
        std::thread::sleep(Duration::from_millis(200));
        let killed = Instant::now();
        p2.kill()?;
        let kill_keeper_ms = match keeper {
            Some((pid, fd)) => Some(wait_keeper(pid, &fd, segment.as_deref(), killed)?),
            None => None,
        };
        let first = restart_window(&said, side, keeper_ms, residency)?;
        out.push((Phase::RestartClean, first));
        let mut warm = said.window("warm")?;
        warm.extra
            .insert("fill_secs".into(), json!(said.fill_secs()));
        out.push((Phase::WarmBeforeKill, warm));
        bar.inc(2);

        // 3: restart after the kill.
        let residency = self.residency(side)?;
        let steps = Steps {
            first_secs: self.first_secs,
            segment_name: name,
            ..Steps::default()
        };
        let mut p3 = self.spawn(side, &steps, seed + 4)?;
        let said = p3.finish()?;
        self.after_exit(side, &said)?;
        let first = restart_window(&said, side, kill_keeper_ms, residency)?;
        out.push((Phase::RestartKill, first));
        bar.inc(1);
        remove_segments(self.segment_dir, "restart-")?;
        Ok(out)
    }

    /// The kernel's resident share of the data set (`mincore`), for the kernel side.
    fn residency(&self, side: Side) -> io::Result<Option<f64>> {
        if side != Side::Kernel {
            return Ok(None);
        }
        let r = kernel::resident_pages_all(&self.plan.paths())?;
        Ok(Some(r.resident as f64 / r.total.max(1) as f64))
    }

    /// After a folio reader's clean exit: waits for its keeper to be done (`wait_keeper`);
    /// its time in ms.
    fn after_exit(&self, side: Side, said: &Said) -> io::Result<Option<f64>> {
        if side != Side::Folio {
            return Ok(None);
        }
        let Some(pid) = said.keeper_pid() else {
            return Ok(None);
        };
        let start = Instant::now();
        // The keeper may be gone already: then there is no pidfd to open, and it was
        // reaped (or is a zombie child of ours) by now.
        match PidFd::open(pid) {
            Ok(fd) => Ok(Some(wait_keeper(
                pid,
                &fd,
                said.segment().as_deref(),
                start,
            )?)),
            Err(_) => {
                reap(pid);
                Ok(Some(0.0))
            }
        }
    }

    fn spawn(&self, side: Side, steps: &Steps, seed: u64) -> io::Result<Reader> {
        let env = self.env;
        let mut args: Vec<String> = vec![
            "restart-reader".into(),
            "--system".into(),
            match side {
                Side::Folio => "folio".into(),
                Side::Kernel => "kernel".into(),
            },
            "--dir".into(),
            self.plan.dir.display().to_string(),
            "--files".into(),
            self.plan.files.to_string(),
            "--file-bytes".into(),
            self.plan.file_bytes.to_string(),
            "--threads".into(),
            self.threads.to_string(),
            "--first-secs".into(),
            steps.first_secs.to_string(),
            "--warm-secs".into(),
            steps.warm_secs.to_string(),
            "--seed".into(),
            seed.to_string(),
            "--capacity-bytes".into(),
            self.capacity_bytes.to_string(),
            "--readahead-max-bytes".into(),
            env.readahead_max_bytes.to_string(),
            "--segment-dir".into(),
            self.segment_dir.display().to_string(),
        ];
        if steps.fill {
            args.push("--fill".into());
        }
        if steps.linger {
            args.push("--linger".into());
        }
        if let Some(name) = &steps.segment_name {
            args.push("--segment-name".into());
            args.push(name.clone());
        }
        for (flag, value) in [
            ("--backend", Backend::from(env.backend).to_possible_value()),
            (
                "--arena-pages",
                Pages::from(env.arena_pages).to_possible_value(),
            ),
        ] {
            if let Some(v) = value {
                args.push(flag.into());
                args.push(v.get_name().into());
            }
        }
        let mut child = Command::new(std::env::current_exe()?)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let out = BufReader::new(child.stdout.take().expect("piped stdout"));
        Ok(Reader {
            child,
            out,
            said: Said::default(),
            what: format!("restart-reader {}", args[2..].join(" ")),
        })
    }
}

/// Waits for keeper `pid` (our child: we are a subreaper) to exit, and reaps it, or to
/// stay as the steward of `segment` (its writeback over: `SegmentHolder::Steward`); the
/// time since `since` in ms.
fn wait_keeper(pid: u32, fd: &PidFd, segment: Option<&Path>, since: Instant) -> io::Result<f64> {
    let stewards = || {
        segment.is_some_and(|path| {
            folio::SegmentView::open(path)
                .is_ok_and(|view| view.holder() == folio::SegmentHolder::Steward)
        })
    };
    while !fd.wait_exit(Duration::from_millis(10))? {
        if stewards() {
            return Ok(since.elapsed().as_secs_f64() * 1e3);
        }
        if since.elapsed() > KEEPER_TIMEOUT {
            return Err(io::Error::other(format!(
                "restart: keeper {pid} did not exit within {} s",
                KEEPER_TIMEOUT.as_secs()
            )));
        }
    }
    let ms = since.elapsed().as_secs_f64() * 1e3;
    if let Some(code) = reap(pid) {
        if code != 0 {
            return Err(io::Error::other(format!(
                "restart: keeper {pid} exited with status {code}"
            )));
        }
    }
    Ok(ms)
}

/// Removes the segments whose names start with `prefix` from our private directory.
fn remove_segments(dir: &Path, prefix: &str) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(prefix) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// A running reader and what it said so far.
struct Reader {
    child: Child,
    out: BufReader<ChildStdout>,
    said: Said,
    what: String,
}

/// A restart's first window, with what came before it: the build (and, for folio, what it
/// adopted), how long the last process's keeper took, and the kernel's resident share at
/// the start.
fn restart_window(
    said: &Said,
    side: Side,
    keeper_ms: Option<f64>,
    residency: Option<f64>,
) -> io::Result<RunResult> {
    let mut first = said.window("first")?;
    first
        .extra
        .insert("build_ms".into(), json!(said.build_ms()));
    first.extra.insert("keeper_ms".into(), json!(keeper_ms));
    if side == Side::Folio {
        first
            .extra
            .insert("adoption".into(), said.adoption().unwrap_or(Value::Null));
    }
    if let Some(r) = residency {
        first
            .extra
            .insert("kernel_resident_at_start".into(), json!(r));
    }
    Ok(first)
}

/// The JSON lines of a reader, by their key.
#[derive(Debug, Default)]
struct Said {
    lines: Map<String, Value>,
}

impl Said {
    fn get(&self, key: &str) -> Option<&Value> {
        self.lines.get(key)
    }

    fn build_ms(&self) -> Option<f64> {
        self.get("built")?.get("ms")?.as_f64()
    }

    fn segment(&self) -> Option<PathBuf> {
        self.get("built")?
            .get("segment")?
            .as_str()
            .map(PathBuf::from)
    }

    fn keeper_pid(&self) -> Option<u32> {
        self.get("built")?
            .get("keeper_pid")?
            .as_u64()
            .map(|p| p as u32)
    }

    fn adoption(&self) -> Option<Value> {
        self.get("built")?.get("adoption").cloned()
    }

    fn fill_secs(&self) -> Option<f64> {
        self.get("fill")?.get("secs")?.as_f64()
    }

    /// Window `name` (`first`, `warm`) as a run, its reads per second in `per_sec`.
    fn window(&self, name: &str) -> io::Result<RunResult> {
        let w = self.get(name).ok_or_else(|| {
            io::Error::other(format!("restart: the reader said no {name} window"))
        })?;
        let f = |k: &str| w.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        let ops = w.get("ops").and_then(Value::as_u64).unwrap_or(0);
        let mut extra = Map::new();
        extra.insert(
            "per_sec".into(),
            w.get("per_sec").cloned().unwrap_or(Value::Null),
        );
        for key in [
            "folio_misses",
            "folio_io_bytes",
            "folio_cached_bytes_at_start",
            "minor_faults",
        ] {
            if let Some(v) = w.get(key) {
                extra.insert(key.into(), v.clone());
            }
        }
        let bytes = ops * READ_BYTES as u64;
        Ok(RunResult {
            ops,
            bytes_read: bytes,
            bytes_verified: w.get("bytes_verified").and_then(Value::as_u64).unwrap_or(0),
            elapsed_secs: f("secs"),
            p50_us: f("p50_us"),
            p99_us: f("p99_us"),
            extra,
            ..RunResult::default()
        })
    }
}

impl Reader {
    /// Reads lines until `stop` says so or the output ends.
    fn read_until(&mut self, stop: impl Fn(&str) -> bool) -> io::Result<bool> {
        loop {
            let mut line = String::new();
            if self.out.read_line(&mut line)? == 0 {
                return Ok(false);
            }
            let v: Value = serde_json::from_str(line.trim()).map_err(|e| {
                io::Error::other(format!("restart: {}: a bad line {line:?}: {e}", self.what))
            })?;
            let Value::Object(map) = v else {
                continue;
            };
            let mut stopped = false;
            for (k, v) in map {
                stopped |= stop(&k);
                self.said.lines.insert(k, v);
            }
            if stopped {
                return Ok(true);
            }
        }
    }

    /// Reads to the end and waits for a clean exit.
    fn finish(&mut self) -> io::Result<Said> {
        self.read_until(|_| false)?;
        let status = self.child.wait()?;
        if !status.success() {
            return Err(io::Error::other(format!(
                "restart: {} failed ({status})",
                self.what
            )));
        }
        Ok(std::mem::take(&mut self.said))
    }

    /// Reads until the reader says it is lingering (reading until killed).
    fn until_lingering(&mut self) -> io::Result<Said> {
        if !self.read_until(|k| k == "lingering")? {
            let status = self.child.wait()?;
            return Err(io::Error::other(format!(
                "restart: {} ended before lingering ({status})",
                self.what
            )));
        }
        Ok(std::mem::take(&mut self.said))
    }

    /// SIGKILLs the reader (by its own handle) and reaps it.
    fn kill(&mut self) -> io::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        // A reader left running by an error: ends only this child, by its own handle.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Options of the hidden `restart-reader` command.
#[derive(clap::Args, Debug, Clone)]
pub struct ReaderArgs {
    #[arg(long, value_enum)]
    pub system: Side,
    #[arg(long)]
    pub dir: PathBuf,
    #[arg(long)]
    pub files: u64,
    #[arg(long)]
    pub file_bytes: u64,
    #[arg(long)]
    pub threads: usize,
    /// Seconds of random reads right after the build (0: none)
    #[arg(long, default_value_t = 0.0)]
    pub first_secs: f64,
    /// Read the whole data set once, after the first window
    #[arg(long)]
    pub fill: bool,
    /// Seconds of random reads after the fill (0: none)
    #[arg(long, default_value_t = 0.0)]
    pub warm_secs: f64,
    /// Keep reading after the warm window until killed
    #[arg(long)]
    pub linger: bool,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long)]
    pub segment_dir: Option<PathBuf>,
    /// The persistent segment's name (folio); none: not persistent
    #[arg(long)]
    pub segment_name: Option<String>,
    #[arg(long, default_value_t = 0)]
    pub capacity_bytes: u64,
    #[arg(long, default_value_t = folio::READAHEAD_MAX_BYTES_DEFAULT)]
    pub readahead_max_bytes: u64,
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    #[arg(long, value_enum, default_value_t = Pages::Auto)]
    pub arena_pages: Pages,
}

/// The files a reader reads, through folio or the kernel.
enum Source {
    Folio(folio::Cache, Vec<folio::File>),
    Kernel(Vec<std::fs::File>),
}

impl Source {
    /// Reads `buf.len()` bytes of file `f` at `offset`, whole.
    fn read(&self, f: usize, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match self {
            Source::Folio(_, files) => {
                let mut at = 0;
                while at < buf.len() {
                    let n = files[f].read_at(&mut buf[at..], offset + at as u64)?;
                    if n == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("folio read 0 bytes at {} of file {f}", offset + at as u64),
                        ));
                    }
                    at += n;
                }
                Ok(())
            }
            Source::Kernel(files) => {
                use std::os::unix::fs::FileExt;
                files[f].read_exact_at(buf, offset)
            }
        }
    }

    fn stats(&self) -> Option<folio::Stats> {
        match self {
            Source::Folio(cache, _) => Some(cache.stats()),
            Source::Kernel(_) => None,
        }
    }
}

/// Prints one JSON line and flushes it (the parent waits on it).
fn say(v: Value) {
    use std::io::Write;
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// What `Cache::adoption` says of a build, as JSON (null: nothing adopted, the segment
/// was new).
fn adoption_of(cache: &folio::Cache) -> Value {
    let Some(a) = cache.adoption() else {
        return Value::Null;
    };
    json!({
        "pages_kept": a.pages_kept,
        "pages_dropped": a.pages_dropped,
        "pages_of_changed_files": a.pages_of_changed_files,
        "pages_unproven": a.pages_unproven,
        "pages_over_capacity": a.pages_over_capacity,
        "files_kept": a.files_kept,
        "files_dropped": a.files_dropped,
        "bytes_written_back": a.bytes_written_back,
        "replaced": a.replaced,
    })
}

/// The reader (`restart-reader`): builds, then its steps in order; JSON lines on stdout.
pub fn reader_main(args: &ReaderArgs) -> io::Result<()> {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number; no memory is passed. A
    // parent that dies kills the reader (a folio reader's keeper then finishes).
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let plan = Plan {
        dir: args.dir.clone(),
        files: args.files,
        file_bytes: args.file_bytes,
    };
    let start = Instant::now();
    let source = match args.system {
        Side::Folio => {
            let mut builder = folio::Cache::builder()
                .capacity_bytes(args.capacity_bytes.max(folio::CAPACITY_BYTES_MIN))
                .backend(args.backend.into())
                .arena_pages(args.arena_pages.into())
                .readahead_max_bytes(args.readahead_max_bytes);
            if let Some(name) = &args.segment_name {
                builder = builder.persistent(true).segment_name(name.clone());
                if let Some(dir) = &args.segment_dir {
                    builder = builder.segment_dir(dir);
                }
            }
            let cache = builder.build()?;
            let files = plan
                .paths()
                .iter()
                .map(|p| cache.open(p))
                .collect::<io::Result<Vec<_>>>()?;
            Source::Folio(cache, files)
        }
        Side::Kernel => Source::Kernel(
            plan.paths()
                .iter()
                .map(std::fs::File::open)
                .collect::<io::Result<Vec<_>>>()?,
        ),
    };
    let build_ms = start.elapsed().as_secs_f64() * 1e3;
    let (keeper_pid, segment, adoption, cached) = match &source {
        Source::Folio(cache, _) => (
            cache.keeper_pid(),
            cache.segment_path().map(|p| p.display().to_string()),
            adoption_of(cache),
            Some(cache.stats().cached_bytes),
        ),
        Source::Kernel(_) => (None, None, Value::Null, None),
    };
    say(json!({"built": {
        "ms": build_ms,
        "keeper_pid": keeper_pid,
        "segment": segment,
        "adoption": adoption,
        "folio_cached_bytes": cached,
    }}));
    let source = Arc::new(source);
    if args.first_secs > 0.0 {
        let w = window(&source, &plan, args.threads, args.first_secs, args.seed)?;
        say(json!({ "first": w }));
    }
    if args.fill {
        let t = Instant::now();
        let bytes = fill(&source, &plan, args.threads)?;
        say(json!({"fill": {"secs": t.elapsed().as_secs_f64(), "bytes": bytes}}));
    }
    if args.warm_secs > 0.0 {
        let w = window(
            &source,
            &plan,
            args.threads,
            args.warm_secs,
            args.seed ^ 0x5555,
        )?;
        say(json!({ "warm": w }));
    }
    if args.linger {
        for i in 0..args.threads {
            let (source, plan) = (Arc::clone(&source), plan.clone());
            std::thread::spawn(move || {
                let mut rng = measure::Rng::new(0xdead ^ i as u64);
                let mut buf = vec![0u8; READ_BYTES];
                loop {
                    let (f, at) = plan.locate(rng.below(plan.pages()));
                    if source.read(f, &mut buf, at).is_err()
                        || data::verify_keyed(&buf, at, file_key(f as u64)).is_err()
                    {
                        std::process::exit(3);
                    }
                }
            });
        }
        say(json!({"lingering": true}));
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    let t = Instant::now();
    drop(source);
    say(json!({"exit": {"drop_ms": t.elapsed().as_secs_f64() * 1e3}}));
    Ok(())
}

/// One thread's count of reads, on its own cache line.
#[repr(align(128))]
#[derive(Default)]
struct Count(AtomicU64);

/// Random reads by `threads` threads for `secs`: the reads of every second, the total,
/// the latency of one read in `TIME_EVERY`, folio's misses and I/O during it.
fn window(
    source: &Arc<Source>,
    plan: &Plan,
    threads: usize,
    secs: f64,
    seed: u64,
) -> io::Result<Value> {
    let counts: Vec<Count> = (0..threads).map(|_| Count::default()).collect();
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(threads + 1);
    let before = source.stats();
    let faults_before = minor_faults();
    let (results, samples, elapsed) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (counts, stop, barrier, source) = (&counts, &stop, &barrier, &source);
                s.spawn(move || -> io::Result<(Histogram<u64>, u64)> {
                    let mut hist = Histogram::<u64>::new(3).expect("3 digits is valid");
                    let mut rng = measure::Rng::new(seed.wrapping_mul(1000) + i as u64);
                    let mut buf = vec![0u8; READ_BYTES];
                    let mut n = 0u64;
                    let mut verified = 0u64;
                    barrier.wait();
                    let result = (|| {
                        while !stop.load(Ordering::Relaxed) {
                            let (f, at) = plan.locate(rng.below(plan.pages()));
                            if n % TIME_EVERY == 0 {
                                let t = Instant::now();
                                source.read(f, &mut buf, at)?;
                                let _ = hist.record((t.elapsed().as_nanos() as u64).max(1));
                            } else {
                                source.read(f, &mut buf, at)?;
                            }
                            verified += data::verify_keyed(&buf, at, file_key(f as u64))?;
                            n += 1;
                            counts[i].0.store(n, Ordering::Relaxed);
                        }
                        Ok(())
                    })();
                    if result.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    result.map(|()| (hist, verified))
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let total = || {
            counts
                .iter()
                .map(|c| c.0.load(Ordering::Relaxed))
                .sum::<u64>()
        };
        let mut samples: Vec<(f64, u64)> = Vec::new();
        let whole = secs.ceil().max(1.0) as u64;
        for k in 1..=whole {
            let at = start + Duration::from_secs_f64((k as f64).min(secs));
            let now = Instant::now();
            if at > now {
                std::thread::sleep(at - now);
            }
            samples.push((start.elapsed().as_secs_f64(), total()));
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        let elapsed = start.elapsed().as_secs_f64();
        let results: Vec<io::Result<(Histogram<u64>, u64)>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        (results, samples, elapsed)
    });
    let mut hist = Histogram::<u64>::new(3).expect("3 digits is valid");
    let mut verified = 0;
    for r in results {
        let (h, v) = r?;
        hist.add(&h).expect("histograms of one kind");
        verified += v;
    }
    // The reads of the window: those counted at its last sample (the ones after it,
    // until every thread saw the stop, are checked but not counted).
    let (secs_measured, ops) = samples.last().copied().unwrap_or((elapsed, 0));
    let mut per_sec = Vec::new();
    let mut last = (0.0, 0u64);
    for &(t, n) in &samples {
        per_sec.push((n - last.1) as f64 / (t - last.0).max(1e-9));
        last = (t, n);
    }
    let q = |q: f64| {
        if hist.is_empty() {
            0.0
        } else {
            hist.value_at_quantile(q) as f64 / 1e3
        }
    };
    let mut w = json!({
        "secs": secs_measured,
        "ops": ops,
        "ops_per_sec": ops as f64 / secs_measured.max(1e-9),
        "per_sec": per_sec,
        "p50_us": q(0.5),
        "p99_us": q(0.99),
        "bytes_verified": verified.min(ops * READ_BYTES as u64),
    });
    w["minor_faults"] = json!(minor_faults().saturating_sub(faults_before));
    if let (Some(b), Some(a)) = (before, source.stats()) {
        w["folio_misses"] = json!(a.misses - b.misses);
        w["folio_io_bytes"] = json!(a.io_bytes - b.io_bytes);
        w["folio_cached_bytes_at_start"] = json!(b.cached_bytes);
    }
    Ok(w)
}

/// The process's minor page faults so far (`getrusage`): an adopted segment's pages are
/// in memory but not yet mapped into the new process, and each first touch is one.
fn minor_faults() -> u64 {
    // SAFETY: rusage is plain old data; zeroed is a valid value to be overwritten.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a live out-pointer on this stack.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    usage.ru_minflt as u64
}

/// Reads the whole data set once, in order, `threads` threads each a share of the pages;
/// every byte checked. Returns the bytes read.
fn fill(source: &Arc<Source>, plan: &Plan, threads: usize) -> io::Result<u64> {
    let chunks_per_file = plan.file_bytes.div_ceil(FILL_READ_BYTES as u64);
    let chunks = plan.files * chunks_per_file;
    let next = AtomicU64::new(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let next = &next;
                s.spawn(move || -> io::Result<u64> {
                    let mut buf = vec![0u8; FILL_READ_BYTES];
                    let mut bytes = 0;
                    loop {
                        let c = next.fetch_add(1, Ordering::Relaxed);
                        if c >= chunks {
                            return Ok(bytes);
                        }
                        let (f, at) = (
                            c / chunks_per_file,
                            c % chunks_per_file * FILL_READ_BYTES as u64,
                        );
                        let len = (plan.file_bytes - at).min(FILL_READ_BYTES as u64) as usize;
                        source.read(f as usize, &mut buf[..len], at)?;
                        data::verify_keyed(&buf[..len], at, file_key(f))?;
                        bytes += len as u64;
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .sum()
    })
}
