//! `pressure` (issue 30): a cache that holds a data set while another process allocates
//! most of the machine's memory. Does the cache give memory back in time (the other
//! process is never killed, and is not much slower than beside the kernel's page cache),
//! and does it grow back once that process has exited?
//!
//! Systems: `folio` (a cache built with `CapacityPolicy::FollowMachine` and every other
//! option at the library's default, every reader its own `File` advised `Random`) and
//! `kernel` (buffered `pread`, every reader its own fd advised `POSIX_FADV_RANDOM`).
//!
//! Design: three processes per side, all of this binary. The parent (this module's
//! [`Workload::run`]) measures nothing itself: it starts
//! - the reader (hidden command `pressure-reader`, [`reader_main`]): fills its cache with
//!   the data file (sequential 1 MiB reads by every thread, pass after pass until the
//!   cache holds the file, then one more pass so that every page is recently used: the
//!   machine pages out page cache idle for ~30 s), says `ready`, then reads random 4 KiB
//!   pages, every byte verified, paced at `--reads-per-sec` over all its threads, until
//!   the parent says `stop` on its stdin. A sampler thread prints a JSON line every
//!   `--sample-ms`: the reads so far, the cache's size (folio: `Stats::cached_bytes`,
//!   `capacity_bytes`, `resident_bytes`; the kernel: the file's pages in the page cache,
//!   by `cachestat(2)`, estimated from ranges of a large file: `KernelCount`), the
//!   machine's `MemAvailable` and memory pressure stall information;
//! - `--before-secs` after `ready`, the allocator (hidden command `pressure-alloc`,
//!   [`alloc_main`]): allocates `--alloc-mib` in chunks of `--chunk-mib`, writing a byte
//!   into every 4 KiB page (the first touch is what takes memory), prints its progress
//!   after each chunk, holds it all for `--hold-secs`, and exits;
//!
//! then waits for the allocator's end (its exit status says whether a signal, the OOM
//! killer's SIGKILL, ended it), keeps the reader reading for `--after-secs` (folio grows
//! back when its cache is full and evicted pages come back: refaults, the policy's
//! rule), and stops it. Every line carries `CLOCK_MONOTONIC`, one clock for the
//! three processes; the report puts 0 at the allocator's start. Per run the two sides go
//! one after the other, their order swapped every other run; before each, the page cache
//! is dropped and the file checked 0% resident.
//!
//! With `--cgroup-max-mib` (the default of `--quick`: 3 GiB for 2 GiB of data and
//! 1.5 GiB allocated) both children of a side run inside a fresh memory cgroup of that
//! size, so that a small run creates real pressure. folio's policy reads the group's
//! limit, v2 (`memory.max`) or v1 (`memory.limit_in_bytes`, through
//! `hierarchical_memory_limit`). The parent stays outside the group: an OOM kill inside
//! it ends a child, never the measurement.
//!
//! Figures, per side: the allocator's time to allocate and touch everything (its own
//! clock, from its start to its last touch: the issue's "finishes within 1.2x") and
//! its wall time (spawn to exit, holding and freeing included), how it ended, the OOM
//! kills the kernel counted (`/proc/vmstat` `oom_kill`, and the cgroup's), reads/s before,
//! during and after the allocation, and the cache's size before, at its lowest, at the
//! allocator's exit and at the end. folio's growth after the exit is checked against the
//! reads that needed it: of the pages folio inserted after the allocator exited, the
//! share that stayed (not evicted) is ~1 when the cache grows as reads need, ~0 when it
//! stays at the shrunk capacity and evicts to make room.
//!
//! Protection: in the reader, the read count, the phase and the stop flag are atomics
//! (relaxed: a sample may lag a read by a batch of `COUNT_BATCH`); each thread owns its
//! handle, buffer and histogram. The parent's state is its own thread's, fed by one
//! channel from the threads that read the children's stdout.
//!
//! Limits: the machine's page-cache reclaim (pages idle ~30 s) also shrinks the kernel's
//! cache while the pages of a large data set wait for their next random read, so the
//! kernel's curve after the allocation is its regrowth net of that. The allocator is one
//! thread; the readers are paced so that they leave it CPU (0 lifts the pacing: then
//! the allocator's time says as much about CPU as about memory on a 2-core machine).
//! A cgroup charges the reader's own few MiB too. The machine frees memory to its host
//! (virtio-balloon free page reporting, 2 MiB blocks free for ~2 s): touching such
//! memory again costs a fault in the host, for the allocator and for a cache that grows
//! back alike.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::{mib, Env, Metric, Report, Row, System, Target, Workload};
use crate::data;
use crate::kernel::{self, Cgroup, CgroupVersion};
use crate::measure::{Rng, RunResult};
use crate::{Backend, Pages};

/// Bytes of one random read.
pub const READ_BYTES: usize = 4096;
/// Bytes of one read of the fill.
const FILL_READ_BYTES: usize = 1 << 20;
/// Sequential passes of the fill, at most, before the one that refreshes every page.
const FILL_PASSES_MAX: u32 = 3;
/// The share of the file a cache holds, at least, to count as holding it.
const HELD_PERCENT: u64 = 99;
/// The issue's bound on the allocator's time beside folio over beside the kernel.
pub const ALLOC_TIME_RATIO_MAX: f64 = 1.2;
/// The share of the pages folio brought in after the allocator exited that must stay.
pub const STAYED_SHARE_MIN: f64 = 0.9;
/// Reads a reader counts locally before adding them to the shared count.
const COUNT_BATCH: u64 = 16;
/// The longest backlog a paced reader catches up on, in seconds of its rate.
const PACE_BACKLOG_SECS: f64 = 0.1;

const SYSTEMS: [System; 2] = [System::Folio, System::Kernel];

#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// MiB of data the cache holds and the readers read [default: 16384; --quick 2048]
    #[arg(long)]
    pub data_mib: Option<u64>,
    /// MiB the other process allocates and touches [default: 14336; --quick 1536]
    #[arg(long)]
    pub alloc_mib: Option<u64>,
    /// MiB the other process allocates at a time, reporting its progress after each
    /// [default: 64]
    #[arg(long)]
    pub chunk_mib: Option<u64>,
    /// Reader threads [default: 4]
    #[arg(long)]
    pub threads: Option<usize>,
    /// Random 4 KiB reads per second over all readers; 0: as fast as they go [default:
    /// 100000]
    #[arg(long)]
    pub reads_per_sec: Option<u64>,
    /// Seconds of random reads before the allocation starts [default: 3; --quick 2]
    #[arg(long)]
    pub before_secs: Option<f64>,
    /// Seconds of random reads after the allocating process exits [default: 30; --quick 8]
    #[arg(long)]
    pub after_secs: Option<f64>,
    /// Seconds the allocating process holds its memory before it exits [default: 1]
    #[arg(long)]
    pub hold_secs: Option<f64>,
    /// Run each side's reader and allocator in a fresh memory cgroup of this many MiB (0:
    /// none) [default: none; --quick 3072]
    #[arg(long)]
    pub cgroup_max_mib: Option<u64>,
    /// Seconds after which an allocating process still running is killed (the run
    /// fails its target) [default: 600]
    #[arg(long)]
    pub alloc_timeout_secs: Option<f64>,
    /// Milliseconds between samples [default: 100]
    #[arg(long)]
    pub sample_ms: Option<u64>,
}

/// The sizes and times of a run, defaults resolved.
#[derive(Clone, Debug)]
struct Plan {
    data_bytes: u64,
    alloc_bytes: u64,
    chunk_bytes: u64,
    threads: usize,
    reads_per_sec: u64,
    before_secs: f64,
    after_secs: f64,
    hold_secs: f64,
    cgroup_limit_bytes: Option<u64>,
    alloc_timeout_secs: f64,
    sample_ms: u64,
}

impl Plan {
    fn of(args: &Args, env: &Env) -> Plan {
        Plan {
            data_bytes: mib(args.data_mib.unwrap_or(env.scale.pick(2048, 16384)).max(1)),
            alloc_bytes: mib(args.alloc_mib.unwrap_or(env.scale.pick(1536, 14336)).max(1)),
            chunk_bytes: mib(args.chunk_mib.unwrap_or(64).max(1)),
            threads: args.threads.unwrap_or(4).max(1),
            reads_per_sec: args.reads_per_sec.unwrap_or(100_000),
            before_secs: args
                .before_secs
                .unwrap_or(env.scale.pick(2.0, 3.0))
                .max(0.0),
            after_secs: args
                .after_secs
                .unwrap_or(env.scale.pick(8.0, 30.0))
                .max(0.0),
            hold_secs: args.hold_secs.unwrap_or(1.0).max(0.0),
            cgroup_limit_bytes: args
                .cgroup_max_mib
                .or(env.scale.pick(Some(3072), None))
                .filter(|&m| m > 0)
                .map(mib),
            alloc_timeout_secs: args.alloc_timeout_secs.unwrap_or(600.0).max(1.0),
            sample_ms: args.sample_ms.unwrap_or(100).max(10),
        }
    }
}

impl Workload for Args {
    fn name(&self) -> &'static str {
        "pressure"
    }

    fn run(&self, env: &Env) -> io::Result<Report> {
        let plan = Plan::of(self, env);
        let path = env.data_file("pressure.dat", plan.data_bytes)?;
        let mut report = Report::new(self.name(), Metric::OpsPerSec);
        report.param("data_bytes", plan.data_bytes);
        report.param("file_pages", super::pages_of(plan.data_bytes));
        report.param("alloc_bytes", plan.alloc_bytes);
        report.param("chunk_bytes", plan.chunk_bytes);
        report.param("threads", plan.threads);
        report.param("read_bytes", READ_BYTES);
        report.param("reads_per_sec_target", plan.reads_per_sec);
        report.param("before_secs", plan.before_secs);
        report.param("after_secs", plan.after_secs);
        report.param("hold_secs", plan.hold_secs);
        report.param("sample_ms", plan.sample_ms);
        report.param("runs", env.runs);
        report.param("machine_memory_bytes", kernel::meminfo_bytes("MemTotal"));
        report.param(
            "folio_cache",
            "CapacityPolicy::FollowMachine, every other option at the library's default",
        );

        let bar = env.bar("pressure", (env.runs * SYSTEMS.len()) as u64);
        let mut runs: Vec<Vec<SideRun>> = vec![Vec::new(); SYSTEMS.len()];
        let mut cgroup_version: Option<CgroupVersion> = None;
        for run in 0..env.runs {
            let mut order: Vec<usize> = (0..SYSTEMS.len()).collect();
            if run % 2 == 1 {
                order.reverse();
            }
            for si in order {
                let system = SYSTEMS[si];
                bar.set_message(format!("{system} run {}/{}", run + 1, env.runs));
                let side = run_side(env, &plan, &path, system, 0x9e55_0000 + run as u64)?;
                cgroup_version = cgroup_version.or(side.cgroup_version);
                runs[si].push(side);
                bar.inc(1);
            }
        }
        bar.finish_and_clear();

        report.param(
            "cgroup_limit_bytes",
            plan.cgroup_limit_bytes.map_or(Value::Null, Value::from),
        );
        report.param(
            "cgroup_version",
            match cgroup_version {
                Some(CgroupVersion::V1) => json!("v1"),
                Some(CgroupVersion::V2) => json!("v2"),
                None => Value::Null,
            },
        );
        for (si, &system) in SYSTEMS.iter().enumerate() {
            let results: Vec<RunResult> = runs[si].iter().map(|r| r.run_result(&plan)).collect();
            let mut row = Row::from_runs(system, plan.threads, &results, Metric::OpsPerSec);
            let alloc_secs: Vec<Option<f64>> = runs[si].iter().map(|r| r.alloc_secs()).collect();
            row.extra
                .insert("alloc_secs_runs".into(), json!(alloc_secs));
            row.extra.insert(
                "alloc_outcome_runs".into(),
                json!(runs[si]
                    .iter()
                    .map(|r| r.alloc_outcome.describe())
                    .collect::<Vec<_>>()),
            );
            report.rows.push(row);
        }
        report.fill_ratios();
        add_targets(&mut report, &runs[0], &runs[1]);
        add_notes(&mut report, &plan, env, cgroup_version);
        report.limits = env.limits()?;
        Ok(report)
    }
}

/// The targets of issue 30, from the runs of each side (paired run by run).
fn add_targets(report: &mut Report, folio: &[SideRun], kernel: &[SideRun]) {
    let ratios: Vec<f64> = folio
        .iter()
        .zip(kernel)
        .filter_map(|(f, k)| Some(f.alloc_secs()? / k.alloc_secs()?.max(1e-9)))
        .collect();
    let every_run_measured = ratios.len() == folio.len();
    let ratio = crate::measure::lower_median(ratios).filter(|_| every_run_measured);
    report.param("alloc_time_ratio", ratio.map_or(Value::Null, Value::from));
    report.targets.push(Target::at_most(
        "pressure: allocator's time beside folio / beside the kernel (median of runs)",
        ratio,
        ALLOC_TIME_RATIO_MAX,
    ));
    let killed = folio
        .iter()
        .filter(|r| r.alloc_outcome.is_signalled())
        .count();
    report.targets.push(Target::equal(
        "pressure: allocating processes killed beside folio",
        Some(killed as u64),
        0,
    ));
    let readers_killed = folio
        .iter()
        .filter(|r| r.reader_outcome.is_signalled())
        .count();
    report.targets.push(Target::equal(
        "pressure: folio readers killed",
        Some(readers_killed as u64),
        0,
    ));
    let stayed = crate::measure::lower_median(folio.iter().filter_map(SideRun::stayed_share));
    report.targets.push(Target::at_least(
        "pressure: folio after the allocator exited: pages read in that stayed",
        stayed.filter(|_| folio.iter().all(|r| r.stayed_share().is_some())),
        STAYED_SHARE_MIN,
    ));
}

fn add_notes(report: &mut Report, plan: &Plan, env: &Env, version: Option<CgroupVersion>) {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    report.note(format!(
        "{:.1} GiB of data, {:.1} GiB allocated in {} MiB chunks (a byte written per 4 KiB \
         page); {} readers of random 4 KiB pages, {}, every byte verified; {:.0} s of reads \
         before the allocation, {:.0} s after the allocator exits (it holds its memory {:.0} \
         s first)",
        gib(plan.data_bytes),
        gib(plan.alloc_bytes),
        plan.chunk_bytes >> 20,
        plan.threads,
        if plan.reads_per_sec == 0 {
            "unpaced".to_string()
        } else {
            format!("paced at {} reads/s in all", plan.reads_per_sec)
        },
        plan.before_secs,
        plan.after_secs,
        plan.hold_secs,
    ));
    match (plan.cgroup_limit_bytes, version) {
        (None, _) => report.note(
            "no cgroup: the machine's memory is the limit (its MemAvailable is what folio's \
             policy reads)",
        ),
        (Some(limit), Some(CgroupVersion::V2)) => report.note(format!(
            "each side's reader and allocator ran in a fresh cgroup v2 with memory.max = {} \
             MiB (what makes a small run real pressure); folio's policy reads that limit",
            limit >> 20
        )),
        (Some(limit), _) => report.note(format!(
            "each side's reader and allocator ran in a fresh cgroup v1 memory group limited \
             to {} MiB (what makes a small run real pressure); folio's policy reads that \
             limit (hierarchical_memory_limit) and the group's usage",
            limit >> 20
        )),
    }
    report.note(
        "folio's policy (crates/folio/src/capacity/follow.rs, docs/memory.md), every 50 ms: \
         reserve = the limit / 32 within [128 MiB, 1 GiB]; afforded = folio's resident + \
         the room (MemAvailable, or the cgroup's room) - 1.5 reserves; room < reserve, or \
         memory stalls over 10% of the tick with the room below two reserves: shrink to the \
         afforded (and an eighth below resident under stalls, once a second at most), \
         evicting and giving memory back (MADV_DONTNEED); capacity > afforded + reserve/4: \
         lower it; cache full, refaults since the last tick and afforded > capacity + \
         reserve/4: grow to the afforded",
    );
    report.note(format!(
        "cache: folio's Stats::resident_bytes (memory held; capacity beside it) and \
         cached_bytes; the kernel's: the data file's pages in the page cache by cachestat \
         (a file over 1 GiB: over 256 ranges of 1 MiB spread evenly, scaled to the file, as \
         the whole file costs 0.3-0.7 s of system time per call at 16 GiB; exact at the \
         fill's end); reads stalled: time in which no read completed; PSI: \
         /proc/pressure/memory's stall time over the random reads; before each side {}, \
         then mincore: 0% resident; the fill reads sequentially until \
         the cache holds {HELD_PERCENT}% of the file (at most {FILL_PASSES_MAX} passes), then \
         once more",
        env.cold.describe()
    ));
    report.note(
        "allocator time: its own clock from its start to its last page touched; wall: \
         spawn to exit as the parent saw it (holding and freeing included); killed: ended \
         by a signal (the OOM killer's is SIGKILL); the machine's page-cache reclaim pages \
         out page cache idle ~30 s, which the kernel's curve after the allocation includes",
    );
}

// ---------------------------------------------------------------------------------------
// The parent: one side of one run.

/// How a child process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Not started (the reader had died before the allocation).
    NotRun,
    Exited(i32),
    Signalled(i32),
    /// Still running at its deadline: killed by this parent.
    TimedOut,
}

impl Outcome {
    fn of(status: ExitStatus) -> Outcome {
        match (status.code(), status.signal()) {
            (Some(code), _) => Outcome::Exited(code),
            (None, Some(signal)) => Outcome::Signalled(signal),
            (None, None) => Outcome::Exited(-1),
        }
    }

    fn is_signalled(self) -> bool {
        matches!(self, Outcome::Signalled(_))
    }

    fn describe(self) -> String {
        match self {
            Outcome::NotRun => "not run".into(),
            Outcome::Exited(code) => format!("exit {code}"),
            Outcome::Signalled(libc::SIGKILL) => "killed (SIGKILL: the OOM killer's)".into(),
            Outcome::Signalled(signal) => format!("killed by signal {signal}"),
            Outcome::TimedOut => "timed out (killed by folio-bench)".into(),
        }
    }
}

/// One side of one run, times relative to the allocator's start.
#[derive(Clone, Debug)]
struct SideRun {
    system: System,
    samples: Vec<Sample>,
    /// (time, bytes touched) after each chunk.
    progress: Vec<(f64, u64)>,
    ready: Option<Ready>,
    /// The allocator's own time from its start to its last touch.
    touch_secs: Option<f64>,
    alloc_outcome: Outcome,
    /// Spawn to exit, as the parent saw it.
    alloc_wall_secs: Option<f64>,
    /// When the allocator exited (relative).
    alloc_exit_t: Option<f64>,
    reader_outcome: Outcome,
    reader_final: Option<ReaderFinal>,
    /// Processes the machine's OOM killer killed during the side (`/proc/vmstat`).
    oom_kills_machine: Option<u64>,
    oom_kills_cgroup: Option<u64>,
    cgroup_peak_bytes: Option<u64>,
    cgroup_version: Option<CgroupVersion>,
}

/// A line from a child, or its end.
enum Event {
    Reader(ReaderLine),
    ReaderEnd,
    Alloc(AllocLine),
    AllocEnd,
}

/// Forwards the JSON lines of `from` as events until it closes.
fn forward<T: for<'de> Deserialize<'de> + 'static>(
    from: impl io::Read + Send + 'static,
    to: mpsc::Sender<Event>,
    wrap: fn(T) -> Event,
    end: Event,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            match serde_json::from_str::<T>(&line) {
                Ok(parsed) => {
                    if to.send(wrap(parsed)).is_err() {
                        return;
                    }
                }
                Err(e) => eprintln!("folio-bench: pressure: a child printed `{line}` ({e})"),
            }
        }
        let _ = to.send(end);
    });
}

/// This binary with `args`, its stdout piped (stdin too if asked), in `group` if any.
fn spawn_self(args: &[String], group: Option<&Cgroup>, stdin: Stdio) -> io::Result<Child> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(args)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(g) = group {
        g.enter_at_exec(&mut cmd)?;
    }
    cmd.spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("pressure: cannot start {args:?}: {e}")))
}

/// What the parent has heard from the children of a side.
struct Heard {
    samples: Vec<Sample>,
    progress: Vec<(f64, u64)>,
    ready: Option<Ready>,
    touch_secs: Option<f64>,
    reader_final: Option<ReaderFinal>,
    reader_open: bool,
    alloc_open: bool,
}

impl Heard {
    /// Takes events until `deadline` (monotonic seconds) or until `enough` says so.
    fn until(
        &mut self,
        rx: &mpsc::Receiver<Event>,
        deadline: f64,
        enough: impl Fn(&Heard) -> bool,
    ) {
        while !enough(self) {
            let left = deadline - mono_secs();
            if left <= 0.0 {
                return;
            }
            match rx.recv_timeout(Duration::from_secs_f64(left.min(0.05))) {
                Ok(event) => self.take(event),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn take(&mut self, event: Event) {
        match event {
            Event::Reader(ReaderLine::Sample(s)) => self.samples.push(s),
            Event::Reader(ReaderLine::Ready(r)) => self.ready = Some(r),
            Event::Reader(ReaderLine::Final(f)) => self.reader_final = Some(f),
            Event::ReaderEnd => self.reader_open = false,
            Event::Alloc(AllocLine::Progress { t, touched_bytes }) => {
                self.progress.push((t, touched_bytes))
            }
            Event::Alloc(AllocLine::Done { touch_secs, .. }) => self.touch_secs = Some(touch_secs),
            Event::AllocEnd => self.alloc_open = false,
        }
    }
}

/// Reaps `child`, killing it first if it is still running at `deadline` (monotonic).
fn reap(child: &mut Child, deadline: f64) -> io::Result<Outcome> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Outcome::of(status));
        }
        if mono_secs() >= deadline {
            // Ends only the child this process started, by its own handle.
            child.kill()?;
            child.wait()?;
            return Ok(Outcome::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Tells the reader to stop (one line on its stdin, then EOF).
fn stop_reader(stdin: Option<ChildStdin>) {
    if let Some(mut stdin) = stdin {
        // A reader that died already cannot read it: nothing to do then.
        let _ = writeln!(stdin, "stop");
    }
}

fn run_side(env: &Env, plan: &Plan, path: &Path, system: System, seed: u64) -> io::Result<SideRun> {
    kernel::make_cold(&[path.to_path_buf()], env.cold)?;
    let group = plan.cgroup_limit_bytes.map(Cgroup::create).transpose()?;
    let oom_before = kernel::vmstat("oom_kill");
    let (tx, rx) = mpsc::channel();
    let mut reader_args: Vec<String> = vec![
        "pressure-reader".into(),
        "--system".into(),
        if system == System::Folio {
            "folio"
        } else {
            "kernel"
        }
        .into(),
        "--file".into(),
        path.display().to_string(),
        "--threads".into(),
        plan.threads.to_string(),
        "--reads-per-sec".into(),
        plan.reads_per_sec.to_string(),
        "--seed".into(),
        seed.to_string(),
        "--sample-ms".into(),
        plan.sample_ms.to_string(),
        "--readahead-kib".into(),
        (env.readahead_max_bytes >> 10).to_string(),
    ];
    for (flag, value) in [
        ("--backend", Backend::from(env.backend).to_possible_value()),
        (
            "--arena-pages",
            Pages::from(env.arena_pages).to_possible_value(),
        ),
    ] {
        if let Some(v) = value {
            reader_args.push(flag.into());
            reader_args.push(v.get_name().into());
        }
    }
    if env.persistent {
        reader_args.push("--persistent".into());
    }
    let mut reader = spawn_self(&reader_args, group.as_ref(), Stdio::piped())?;
    let reader_stdin = reader.stdin.take();
    let out = reader.stdout.take().expect("piped stdout");
    forward(out, tx.clone(), Event::Reader, Event::ReaderEnd);
    let mut heard = Heard {
        samples: Vec::new(),
        progress: Vec::new(),
        ready: None,
        touch_secs: None,
        reader_final: None,
        reader_open: true,
        alloc_open: false,
    };
    // The fill: as long as it takes (a dead reader ends it).
    heard.until(&rx, f64::INFINITY, |h| h.ready.is_some() || !h.reader_open);
    let mut alloc_outcome = Outcome::NotRun;
    let (mut alloc_start, mut alloc_wall_secs, mut alloc_exit) = (None, None, None);
    if heard.ready.is_some() {
        heard.until(&rx, mono_secs() + plan.before_secs, |h| !h.reader_open);
        let alloc_args: Vec<String> = vec![
            "pressure-alloc".into(),
            "--bytes".into(),
            plan.alloc_bytes.to_string(),
            "--chunk-bytes".into(),
            plan.chunk_bytes.to_string(),
            "--hold-secs".into(),
            plan.hold_secs.to_string(),
        ];
        let started = mono_secs();
        let mut alloc = spawn_self(&alloc_args, group.as_ref(), Stdio::null())?;
        alloc_start = Some(started);
        heard.alloc_open = true;
        let out = alloc.stdout.take().expect("piped stdout");
        forward(out, tx.clone(), Event::Alloc, Event::AllocEnd);
        let deadline = started + plan.alloc_timeout_secs;
        // Listen while it runs, then reap it.
        heard.until(&rx, deadline, |h| !h.alloc_open);
        alloc_outcome = reap(&mut alloc, deadline)?;
        let ended = mono_secs();
        alloc_wall_secs = Some(ended - started);
        alloc_exit = Some(ended - started);
        heard.until(&rx, ended + plan.after_secs, |h| !h.reader_open);
    }
    stop_reader(reader_stdin);
    heard.until(&rx, mono_secs() + 120.0, |h| !h.reader_open);
    let reader_outcome = reap(&mut reader, mono_secs() + 10.0)?;
    drop(tx);
    while let Ok(event) = rx.try_recv() {
        heard.take(event);
    }
    if let Outcome::Exited(code) = reader_outcome {
        if code != 0 {
            return Err(io::Error::other(format!(
                "pressure: the {system} reader failed (exit {code}; its error is above)"
            )));
        }
    }
    let oom_kills_machine = match (oom_before, kernel::vmstat("oom_kill")) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    let zero = alloc_start.unwrap_or_else(|| heard.ready.map_or(0.0, |r| r.t));
    let samples = heard
        .samples
        .iter()
        .map(|s| Sample {
            t: s.t - zero,
            ..*s
        })
        .collect();
    let progress = heard
        .progress
        .iter()
        .map(|&(t, bytes)| (t - zero, bytes))
        .collect();
    Ok(SideRun {
        system,
        samples,
        progress,
        ready: heard.ready.map(|r| Ready { t: r.t - zero, ..r }),
        touch_secs: heard.touch_secs,
        alloc_outcome,
        alloc_wall_secs,
        alloc_exit_t: alloc_exit,
        reader_outcome,
        reader_final: heard.reader_final,
        oom_kills_machine,
        oom_kills_cgroup: group.as_ref().and_then(Cgroup::oom_kills),
        cgroup_peak_bytes: group.as_ref().and_then(Cgroup::peak_bytes),
        cgroup_version: group.as_ref().map(Cgroup::version),
    })
}

impl SideRun {
    /// The allocator's time, if it finished on its own.
    fn alloc_secs(&self) -> Option<f64> {
        (self.alloc_outcome == Outcome::Exited(0))
            .then_some(self.touch_secs)
            .flatten()
    }

    /// Reads per second over `[from, to]`, from the samples that span it: the last at or
    /// before `from` and the first at or after `to` (the nearest ones inside where the
    /// reads began later or ended earlier). A window shorter than a sample interval (a
    /// tiny allocation) gets the rate of the interval around it.
    fn reads_per_sec(&self, from: f64, to: f64) -> Option<f64> {
        let reading: Vec<&Sample> = self.samples.iter().filter(|s| s.reading).collect();
        let a = reading
            .iter()
            .rev()
            .find(|s| s.t <= from)
            .or(reading.first())?;
        let b = reading.iter().find(|s| s.t >= to).or(reading.last())?;
        (b.t > a.t).then(|| (b.reads - a.reads) as f64 / (b.t - a.t))
    }

    /// The cache's size (`Sample::held_bytes`) of the last sample at or before `t`.
    fn held_at(&self, t: f64) -> Option<u64> {
        self.samples
            .iter()
            .rev()
            .find(|s| s.t <= t)
            .map(Sample::held_bytes)
    }

    /// Of the pages folio inserted after the allocator exited, the share not evicted
    /// again by the end (folio only).
    fn stayed_share(&self) -> Option<f64> {
        if self.reader_outcome != Outcome::Exited(0) {
            return None; // a reader that died read nothing after the exit
        }
        let exit = self.alloc_exit_t?;
        let from = self.samples.iter().rev().find(|s| s.t <= exit)?;
        let to = self.samples.last()?;
        let inserted = to.pages_inserted?.saturating_sub(from.pages_inserted?);
        let evicted = to.evicted_pages?.saturating_sub(from.evicted_pages?);
        if inserted == 0 {
            // Nothing was missing after the exit (the cache never lost the data).
            return Some(1.0);
        }
        Some(1.0 - evicted.min(inserted) as f64 / inserted as f64)
    }

    /// Seconds of the random reads in which no read completed: the sum of the sample
    /// intervals whose read count did not move (every reader stuck for the interval).
    fn stalled_secs(&self) -> f64 {
        let reading: Vec<&Sample> = self.samples.iter().filter(|s| s.reading).collect();
        reading
            .windows(2)
            .filter(|w| w[1].reads == w[0].reads)
            // From +0.0: a sum of no f64 is -0.0, which prints as "-0.00".
            .fold(0.0, |sum, w| sum + (w[1].t - w[0].t))
    }

    /// The run as a row's run: reads while the allocator ran, with every figure of the
    /// side in `extra` (the samples as columns, for the chart).
    fn run_result(&self, plan: &Plan) -> RunResult {
        let window = self.alloc_exit_t.unwrap_or(0.0);
        let reads_during = self.reads_per_sec(0.0, window).unwrap_or(0.0);
        let ops = (reads_during * window) as u64;
        let bytes = ops * READ_BYTES as u64;
        let last_t = self.samples.last().map_or(0.0, |s| s.t);
        let min_after_start = self
            .samples
            .iter()
            .filter(|s| s.t >= 0.0)
            .map(Sample::held_bytes)
            .min();
        let mut extra = Map::new();
        extra.insert("alloc_secs".into(), json!(self.alloc_secs()));
        extra.insert("alloc_touch_secs".into(), json!(self.touch_secs));
        extra.insert("alloc_wall_secs".into(), json!(self.alloc_wall_secs));
        extra.insert("alloc_outcome".into(), json!(self.alloc_outcome.describe()));
        extra.insert(
            "alloc_killed".into(),
            json!(self.alloc_outcome.is_signalled()),
        );
        extra.insert(
            "alloc_touched_bytes".into(),
            json!(self.progress.last().map_or(0, |p| p.1)),
        );
        extra.insert(
            "reader_outcome".into(),
            json!(self.reader_outcome.describe()),
        );
        extra.insert(
            "reader_killed".into(),
            json!(self.reader_outcome.is_signalled()),
        );
        extra.insert("oom_kills_machine".into(), json!(self.oom_kills_machine));
        extra.insert("oom_kills_cgroup".into(), json!(self.oom_kills_cgroup));
        extra.insert("cgroup_peak_bytes".into(), json!(self.cgroup_peak_bytes));
        extra.insert("fill_secs".into(), json!(self.ready.map(|r| r.fill_secs)));
        extra.insert("fill_passes".into(), json!(self.ready.map(|r| r.passes)));
        extra.insert(
            "held_at_ready_bytes".into(),
            json!(self.ready.map(|r| r.held_bytes)),
        );
        extra.insert("cache_before_bytes".into(), json!(self.held_at(-1e-9)));
        extra.insert("cache_min_bytes".into(), json!(min_after_start));
        extra.insert(
            "cache_at_alloc_exit_bytes".into(),
            json!(self.alloc_exit_t.and_then(|t| self.held_at(t))),
        );
        extra.insert(
            "cache_end_bytes".into(),
            json!(self.samples.last().map(Sample::held_bytes)),
        );
        extra.insert(
            "reads_per_sec_before".into(),
            json!(self.reads_per_sec(-plan.before_secs, 0.0)),
        );
        extra.insert("reads_per_sec_during".into(), json!(reads_during));
        extra.insert(
            "reads_per_sec_after".into(),
            json!(self
                .alloc_exit_t
                .and_then(|exit| self.reads_per_sec(exit, last_t))),
        );
        extra.insert("stayed_share_after".into(), json!(self.stayed_share()));
        extra.insert("reads_stalled_secs".into(), json!(self.stalled_secs()));
        let psi = |pick: fn(&Sample) -> u64| {
            let first = self.samples.iter().find(|s| s.reading)?;
            let last = self.samples.last()?;
            Some(pick(last).saturating_sub(pick(first)) as f64 / 1e6)
        };
        extra.insert(
            "psi_some_stall_secs".into(),
            json!(psi(|s| s.psi_some_total_us)),
        );
        extra.insert(
            "psi_full_stall_secs".into(),
            json!(psi(|s| s.psi_full_total_us)),
        );
        if let Some(f) = &self.reader_final {
            if let Some(folio) = &f.folio {
                extra.insert("folio".into(), Value::Object(folio.clone()));
            }
        }
        extra.insert("samples".into(), self.columns());
        RunResult {
            ops,
            bytes_read: bytes,
            bytes_verified: bytes,
            elapsed_secs: window,
            p50_us: self.reader_final.as_ref().map_or(0.0, |f| f.p50_us),
            p99_us: self.reader_final.as_ref().map_or(0.0, |f| f.p99_us),
            pages_inserted: self
                .samples
                .last()
                .and_then(|s| s.pages_inserted)
                .filter(|_| self.system == System::Folio),
            extra,
            ..RunResult::default()
        }
    }

    /// The samples as columns (seconds since the allocator started): what the chart
    /// draws.
    fn columns(&self) -> Value {
        let reading: Vec<&Sample> = self.samples.iter().filter(|s| s.reading).collect();
        let rate: Vec<Option<f64>> = reading
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let prev = reading.get(i.checked_sub(1)?)?;
                (s.t > prev.t).then(|| (s.reads - prev.reads) as f64 / (s.t - prev.t))
            })
            .collect();
        json!({
            "t_secs": reading.iter().map(|s| s.t).collect::<Vec<_>>(),
            "cache_bytes": reading.iter().map(|s| s.cache_bytes).collect::<Vec<_>>(),
            "resident_bytes": reading.iter().map(|s| s.resident_bytes).collect::<Vec<_>>(),
            "capacity_bytes": reading.iter().map(|s| s.capacity_bytes).collect::<Vec<_>>(),
            "reads_per_sec": rate,
            "mem_available_bytes": reading.iter().map(|s| s.mem_available_bytes).collect::<Vec<_>>(),
            "misses": reading.iter().map(|s| s.misses).collect::<Vec<_>>(),
            "rss_bytes": reading.iter().map(|s| s.rss_bytes).collect::<Vec<_>>(),
            "anon_huge_bytes": reading.iter().map(|s| s.anon_huge_bytes).collect::<Vec<_>>(),
            "psi_some_avg10": reading.iter().map(|s| s.psi_some_avg10).collect::<Vec<_>>(),
            "psi_some_total_us": reading.iter().map(|s| s.psi_some_total_us).collect::<Vec<_>>(),
            "psi_full_total_us": reading.iter().map(|s| s.psi_full_total_us).collect::<Vec<_>>(),
            // From (0, 0): the allocator's start.
            "alloc_t_secs": std::iter::once(0.0).chain(self.progress.iter().map(|p| p.0)).collect::<Vec<_>>(),
            "alloc_touched_bytes": std::iter::once(0).chain(self.progress.iter().map(|p| p.1)).collect::<Vec<_>>(),
            "alloc_exit_secs": self.alloc_exit_t,
        })
    }
}

// ---------------------------------------------------------------------------------------
// What the children print.

/// One sample of a reader.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Sample {
    /// `CLOCK_MONOTONIC` seconds (relative to the allocator's start once the parent has
    /// it).
    pub t: f64,
    /// Whether the random reads had begun (else: the fill).
    pub reading: bool,
    /// Random reads done so far.
    pub reads: u64,
    /// Bytes of the data file the cache holds (folio: `cached_bytes`; the kernel: the
    /// file's pages in the page cache).
    pub cache_bytes: u64,
    /// folio's capacity, resident memory and page counts; `None` for the kernel.
    pub capacity_bytes: Option<u64>,
    pub resident_bytes: Option<u64>,
    pub pages_inserted: Option<u64>,
    pub evicted_pages: Option<u64>,
    /// folio's misses so far.
    pub misses: Option<u64>,
    /// The machine's `MemAvailable` and `Cached`.
    pub mem_available_bytes: u64,
    pub page_cache_bytes: u64,
    /// The machine's memory pressure (`/proc/pressure/memory`): the `some` line's avg10
    /// (percent) and the `some` and `full` lines' totals (microseconds of stall so far).
    pub psi_some_avg10: f64,
    pub psi_some_total_us: u64,
    pub psi_full_total_us: u64,
    /// The reader process's resident memory (`VmRSS`) and the machine's anonymous memory
    /// on transparent huge pages (`AnonHugePages`): what folio gives back shows here
    /// when the kernel really frees it.
    pub rss_bytes: u64,
    pub anon_huge_bytes: u64,
}

impl Sample {
    /// The memory the cache holds: folio's resident memory, the kernel's cached pages.
    pub fn held_bytes(&self) -> u64 {
        self.resident_bytes.unwrap_or(self.cache_bytes)
    }
}

/// The fill's end.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Ready {
    pub t: f64,
    pub fill_secs: f64,
    /// Sequential passes until the cache held the file (the refreshing pass not counted).
    pub passes: u32,
    /// What the cache held of the file at the end of the fill.
    pub held_bytes: u64,
}

/// The reader's totals over its random reads.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReaderFinal {
    pub reads: u64,
    pub read_secs: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// folio's stats at the end (the kernel: none).
    pub folio: Option<Map<String, Value>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ReaderLine {
    Sample(Sample),
    Ready(Ready),
    Final(ReaderFinal),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AllocLine {
    Progress { t: f64, touched_bytes: u64 },
    Done { t: f64, touch_secs: f64 },
}

/// `CLOCK_MONOTONIC` in seconds: the same clock in every process of the machine.
pub fn mono_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn print_line<T: Serialize>(line: &T) {
    // One `println!` holds the stdout lock for the whole line: lines never interleave.
    match serde_json::to_string(line) {
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("folio-bench: pressure: unprintable line: {e}"),
    }
}

// ---------------------------------------------------------------------------------------
// The allocator.

/// Options of the hidden `pressure-alloc` command.
#[derive(clap::Args, Debug, Clone)]
pub struct AllocArgs {
    #[arg(long)]
    pub bytes: u64,
    #[arg(long)]
    pub chunk_bytes: u64,
    #[arg(long, default_value_t = 0.0)]
    pub hold_secs: f64,
}

/// The allocator: allocates `bytes` in chunks, writes a byte into every 4 KiB page of each
/// (the first touch is what takes the memory), prints its progress after each chunk,
/// holds everything for `hold_secs`, exits.
pub fn alloc_main(args: &AllocArgs) -> io::Result<()> {
    let started = mono_secs();
    let chunk = args.chunk_bytes.max(4096) as usize;
    let mut held: Vec<Vec<u8>> = Vec::new();
    let mut touched = 0u64;
    while touched < args.bytes {
        let n = chunk.min((args.bytes - touched) as usize);
        // Zeroed allocations this large are fresh mappings: nothing is resident until
        // written.
        let mut block = vec![0u8; n];
        for at in (0..n).step_by(4096) {
            block[at] = 1;
        }
        // The writes must happen: nothing reads them back.
        std::hint::black_box(&mut block);
        held.push(block);
        touched += n as u64;
        print_line(&AllocLine::Progress {
            t: mono_secs(),
            touched_bytes: touched,
        });
    }
    let done = mono_secs();
    print_line(&AllocLine::Done {
        t: done,
        touch_secs: done - started,
    });
    std::thread::sleep(super::secs(args.hold_secs));
    drop(std::hint::black_box(held));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The reader.

/// Which cache a reader reads through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReaderSystem {
    Folio,
    Kernel,
}

/// Options of the hidden `pressure-reader` command.
#[derive(clap::Args, Debug, Clone)]
pub struct ReaderArgs {
    #[arg(long, value_enum)]
    pub system: ReaderSystem,
    #[arg(long)]
    pub file: PathBuf,
    #[arg(long)]
    pub threads: usize,
    #[arg(long)]
    pub reads_per_sec: u64,
    #[arg(long)]
    pub seed: u64,
    #[arg(long)]
    pub sample_ms: u64,
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    #[arg(long, value_enum, default_value_t = Pages::Auto)]
    pub arena_pages: Pages,
    #[arg(long, default_value_t = folio::READAHEAD_MAX_BYTES_DEFAULT >> 10)]
    pub readahead_kib: u64,
    /// The reader's cache in a segment with a keeper (`--persistent` of the workload).
    #[arg(long)]
    pub persistent: bool,
}

/// A reader's cache: folio's (a handle per thread) or the kernel's (an fd per thread).
enum Side {
    Folio {
        cache: folio::Cache,
        files: Vec<folio::File>,
    },
    Kernel {
        files: Vec<std::fs::File>,
        path: PathBuf,
    },
}

impl Side {
    fn open(args: &ReaderArgs) -> io::Result<Side> {
        let threads = args.threads.max(1);
        match args.system {
            ReaderSystem::Folio => {
                let cache = folio::Cache::builder()
                    .capacity_policy(folio::CapacityPolicy::FollowMachine)
                    .backend(args.backend.into())
                    .arena_pages(args.arena_pages.into())
                    .readahead_max_bytes(args.readahead_kib << 10)
                    .persistent(args.persistent)
                    .build()?;
                let files = (0..threads)
                    .map(|_| cache.open(&args.file))
                    .collect::<io::Result<_>>()?;
                Ok(Side::Folio { cache, files })
            }
            ReaderSystem::Kernel => Ok(Side::Kernel {
                files: (0..threads)
                    .map(|_| std::fs::File::open(&args.file))
                    .collect::<io::Result<_>>()?,
                path: args.file.clone(),
            }),
        }
    }

    fn read_at(&self, thread: usize, buf: &mut [u8], at: u64) -> io::Result<usize> {
        match self {
            Side::Folio { files, .. } => files[thread].read_at(buf, at),
            Side::Kernel { files, .. } => files[thread].read_at(buf, at),
        }
    }

    /// Advises every handle of random reads (after the fill, which reads in order).
    fn advise_random(&self) -> io::Result<()> {
        match self {
            Side::Folio { files, .. } => {
                for f in files {
                    f.advise(0, 0, folio::Advice::Random)?;
                }
            }
            Side::Kernel { files, .. } => {
                for f in files {
                    kernel::fadvise(f, 0, 0, libc::POSIX_FADV_RANDOM)?;
                }
            }
        }
        Ok(())
    }

    /// A sample now (`reads` and `reading` left for the caller); the kernel's cache
    /// estimated from a sample of the file's ranges ([`kernel_cached_pages`]).
    fn sample(&self) -> io::Result<Sample> {
        self.sample_with(KernelCount::Estimate)
    }

    fn sample_with(&self, count: KernelCount) -> io::Result<Sample> {
        let psi = std::fs::read_to_string("/proc/pressure/memory").unwrap_or_default();
        let (psi_some_avg10, psi_some_total_us) = psi_line(&psi, "some");
        let (_, psi_full_total_us) = psi_line(&psi, "full");
        let mut s = Sample {
            t: mono_secs(),
            mem_available_bytes: kernel::meminfo_bytes("MemAvailable").unwrap_or(0),
            page_cache_bytes: kernel::meminfo_bytes("Cached").unwrap_or(0),
            psi_some_avg10,
            psi_some_total_us,
            psi_full_total_us,
            rss_bytes: vm_rss_bytes().unwrap_or(0),
            anon_huge_bytes: kernel::meminfo_bytes("AnonHugePages").unwrap_or(0),
            ..Sample::default()
        };
        match self {
            Side::Folio { cache, .. } => {
                let st = cache.stats();
                s.cache_bytes = st.cached_bytes;
                s.capacity_bytes = Some(st.capacity_bytes);
                s.resident_bytes = Some(st.resident_bytes);
                s.pages_inserted = Some(st.pages_inserted);
                s.evicted_pages = Some(st.evicted_pages);
                s.misses = Some(st.misses);
            }
            Side::Kernel { files, path } => {
                let pages = match kernel_cached_pages(&files[0], count)? {
                    Some(pages) => pages,
                    // No cachestat(2) (before Linux 6.5): mincore, slower.
                    None => kernel::resident_pages(path)?.resident,
                };
                s.cache_bytes = pages * folio::PAGE_BYTES as u64;
            }
        }
        Ok(s)
    }

    /// folio's figures at the end (the kernel: none).
    fn final_stats(&self) -> Option<Map<String, Value>> {
        let Side::Folio { cache, .. } = self else {
            return None;
        };
        let s = cache.stats();
        let value = json!({
            "backend": s.backend, "hits": s.hits, "misses": s.misses,
            "pages_inserted": s.pages_inserted, "evicted_pages": s.evicted_pages,
            "refaults": s.refaults, "workingset_refaults": s.workingset_refaults,
            "capacity_changes": s.capacity_changes, "bytes_given_back": s.bytes_given_back,
            "pressure_events": s.pressure_events, "capacity_bytes": s.capacity_bytes,
            "capacity_max_bytes": s.capacity_max_bytes, "resident_bytes": s.resident_bytes,
            "returned_bytes": s.returned_bytes, "bytes_regrown": s.bytes_regrown,
            "cached_bytes": s.cached_bytes, "alloc_failures": s.alloc_failures,
            "metadata_bytes": s.metadata_bytes,
        });
        match value {
            Value::Object(map) => Some(map),
            _ => None,
        }
    }
}

/// How the kernel's cached pages of the file are counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KernelCount {
    /// `cachestat(2)` over the whole file: exact, but a 16 GiB file of 4 KiB pages costs
    /// 0.3-0.7 s of system time per call here, which a sampler every 100 ms cannot pay
    /// (it would take a core from the side it measures).
    Exact,
    /// Over `ESTIMATE_RANGES` ranges of `ESTIMATE_RANGE_BYTES` spread evenly over the
    /// file, scaled to its size (files up to `ESTIMATE_MIN_FILE_BYTES`: exact). Random
    /// reads fill the file evenly and reclaim of evenly read pages empties it evenly, so
    /// the ranges stand for the whole within about a percent.
    Estimate,
}

const ESTIMATE_RANGES: u64 = 256;
const ESTIMATE_RANGE_BYTES: u64 = 1 << 20;
const ESTIMATE_MIN_FILE_BYTES: u64 = 1 << 30;

/// The file's pages in the kernel's page cache, as `count` says.
fn kernel_cached_pages(file: &std::fs::File, count: KernelCount) -> io::Result<Option<u64>> {
    let len = file.metadata()?.len();
    if count == KernelCount::Exact || len <= ESTIMATE_MIN_FILE_BYTES {
        return kernel::cached_pages_of(file);
    }
    let mut cached = 0u64;
    for i in 0..ESTIMATE_RANGES {
        let at = (len - ESTIMATE_RANGE_BYTES) / (ESTIMATE_RANGES - 1) * i / 4096 * 4096;
        match kernel::cached_pages_in(file, at, ESTIMATE_RANGE_BYTES)? {
            Some(pages) => cached += pages,
            None => return Ok(None),
        }
    }
    let sampled_pages = ESTIMATE_RANGES * ESTIMATE_RANGE_BYTES / 4096;
    Ok(Some(
        (cached as f64 / sampled_pages as f64 * len.div_ceil(4096) as f64).round() as u64,
    ))
}

/// This process's resident memory (`/proc/self/status` `VmRSS`), in bytes.
fn vm_rss_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib << 10)
}

/// The avg10 (percent) and the total (microseconds) of the `name` line of a pressure
/// file; zeros where it is missing.
fn psi_line(text: &str, name: &str) -> (f64, u64) {
    let Some(line) = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
    else {
        return (0.0, 0);
    };
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
    };
    (
        field("avg10").and_then(|v| v.parse().ok()).unwrap_or(0.0),
        field("total").and_then(|v| v.parse().ok()).unwrap_or(0),
    )
}

/// The reader: fill, `ready`, random reads until told to stop, samples all along, then
/// its totals.
pub fn reader_main(args: &ReaderArgs) -> io::Result<()> {
    let side = Side::open(args)?;
    let file_bytes = std::fs::metadata(&args.file)?.len();
    let threads = args.threads.max(1);
    let reads = AtomicU64::new(0);
    let reading = AtomicBool::new(false);
    let sampling = AtomicBool::new(true);
    let stop = AtomicBool::new(false);
    let started = mono_secs();
    std::thread::scope(|s| -> io::Result<()> {
        let sampler = s.spawn(|| -> io::Result<()> {
            while sampling.load(Ordering::Relaxed) {
                let mut sample = side.sample()?;
                sample.reading = reading.load(Ordering::Relaxed);
                sample.reads = reads.load(Ordering::Relaxed);
                print_line(&ReaderLine::Sample(sample));
                std::thread::sleep(Duration::from_millis(args.sample_ms));
            }
            Ok(())
        });
        let phases = || -> io::Result<ReaderFinal> {
            let passes = fill(&side, threads, file_bytes)?;
            side.advise_random()?;
            print_line(&ReaderLine::Ready(Ready {
                t: mono_secs(),
                fill_secs: mono_secs() - started,
                passes,
                held_bytes: side.sample_with(KernelCount::Exact)?.cache_bytes,
            }));
            reading.store(true, Ordering::Relaxed);
            let read_started = Instant::now();
            let workers: Vec<_> = (0..threads)
                .map(|i| {
                    let (side, reads, stop) = (&side, &reads, &stop);
                    let rate = args.reads_per_sec as f64 / threads as f64;
                    let seed = args.seed.wrapping_mul(1000).wrapping_add(i as u64);
                    s.spawn(move || random_reads(side, i, file_bytes, rate, seed, reads, stop))
                })
                .collect();
            // Until the parent says stop (or goes away).
            let mut line = String::new();
            let _ = io::stdin().lock().read_line(&mut line);
            stop.store(true, Ordering::Relaxed);
            let mut hist = Histogram::<u64>::new(3).expect("3 significant digits is valid");
            let mut first_error = None;
            for w in workers {
                match w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)) {
                    Ok(h) => hist.add(&h).expect("histograms of one kind"),
                    Err(e) => first_error = first_error.or(Some(e)),
                }
            }
            if let Some(e) = first_error {
                return Err(e);
            }
            let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
            Ok(ReaderFinal {
                reads: reads.load(Ordering::Relaxed),
                read_secs: read_started.elapsed().as_secs_f64(),
                p50_us: us(0.5),
                p99_us: us(0.99),
                folio: side.final_stats(),
            })
        };
        let result = phases();
        sampling.store(false, Ordering::Relaxed);
        let sampled = sampler
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        let totals = result?;
        sampled?;
        print_line(&ReaderLine::Final(totals));
        Ok(())
    })
}

/// Reads the file in order, every thread its share in 1 MiB reads, pass after pass until
/// the cache holds it (at most `FILL_PASSES_MAX`), then once more: every page recent.
/// Returns the passes it took.
fn fill(side: &Side, threads: usize, file_bytes: u64) -> io::Result<u32> {
    let pass = || -> io::Result<()> {
        std::thread::scope(|s| {
            let parts: Vec<_> = (0..threads)
                .map(|i| {
                    let from = file_bytes * i as u64 / threads as u64 / 4096 * 4096;
                    let to = if i + 1 == threads {
                        file_bytes
                    } else {
                        file_bytes * (i + 1) as u64 / threads as u64 / 4096 * 4096
                    };
                    s.spawn(move || -> io::Result<()> {
                        let mut buf = vec![0u8; FILL_READ_BYTES];
                        let mut at = from;
                        while at < to {
                            let want = FILL_READ_BYTES.min((to - at) as usize);
                            let n = side.read_at(i, &mut buf[..want], at)?;
                            if n == 0 {
                                return Err(io::Error::other(format!("no bytes at {at}")));
                            }
                            data::verify(&buf[..n], at)?;
                            at += n as u64;
                        }
                        Ok(())
                    })
                })
                .collect();
            parts
                .into_iter()
                .try_for_each(|p| p.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
        })
    };
    let held = || -> io::Result<bool> {
        Ok(side.sample_with(KernelCount::Exact)?.cache_bytes * 100 >= file_bytes * HELD_PERCENT)
    };
    let mut passes = 0;
    while passes < FILL_PASSES_MAX {
        pass()?;
        passes += 1;
        if held()? {
            break;
        }
    }
    pass()?;
    Ok(passes)
}

/// One thread's random 4 KiB reads, each verified, paced at `rate` per second (0: not
/// paced), until `stop`; returns their latency.
fn random_reads(
    side: &Side,
    thread: usize,
    file_bytes: u64,
    rate: f64,
    seed: u64,
    reads: &AtomicU64,
    stop: &AtomicBool,
) -> io::Result<Histogram<u64>> {
    let pages = (file_bytes / READ_BYTES as u64).max(1);
    let mut rng = Rng::new(seed);
    let mut buf = vec![0u8; READ_BYTES];
    let mut hist = Histogram::<u64>::new(3).expect("3 significant digits is valid");
    let started = Instant::now();
    let (mut done, mut uncounted) = (0u64, 0u64);
    let backlog = (rate * PACE_BACKLOG_SECS).max(1.0) as u64;
    while !stop.load(Ordering::Relaxed) {
        if rate > 0.0 {
            let due = (started.elapsed().as_secs_f64() * rate) as u64;
            if done >= due {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            // A reader held up (misses) catches up on a short backlog only.
            done = done.max(due.saturating_sub(backlog));
        }
        let at = rng.below(pages) * READ_BYTES as u64;
        let t0 = Instant::now();
        let n = side.read_at(thread, &mut buf, at)?;
        let _ = hist.record((t0.elapsed().as_nanos() as u64).max(1));
        if n != READ_BYTES.min((file_bytes - at) as usize) {
            return Err(io::Error::other(format!("short read of {n} bytes at {at}")));
        }
        data::verify(&buf[..n], at)?;
        done += 1;
        uncounted += 1;
        if uncounted == COUNT_BATCH {
            reads.fetch_add(uncounted, Ordering::Relaxed);
            uncounted = 0;
        }
    }
    reads.fetch_add(uncounted, Ordering::Relaxed);
    Ok(hist)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: f64, reads: u64, cache: u64) -> Sample {
        Sample {
            t,
            reading: true,
            reads,
            cache_bytes: cache,
            ..Sample::default()
        }
    }

    fn side(samples: Vec<Sample>) -> SideRun {
        SideRun {
            system: System::Folio,
            samples,
            progress: vec![(1.0, 1 << 30), (2.0, 2 << 30)],
            ready: None,
            touch_secs: Some(2.0),
            alloc_outcome: Outcome::Exited(0),
            alloc_wall_secs: Some(3.0),
            alloc_exit_t: Some(3.0),
            reader_outcome: Outcome::Exited(0),
            reader_final: None,
            oom_kills_machine: Some(0),
            oom_kills_cgroup: None,
            cgroup_peak_bytes: None,
            cgroup_version: None,
        }
    }

    #[test]
    fn rates_and_sizes_come_from_the_samples_around_a_window() {
        let run = side(vec![
            sample(-2.0, 0, 10),
            sample(-1.0, 100, 10),
            sample(0.0, 200, 10),
            sample(1.0, 250, 4),
            sample(3.0, 350, 2),
            sample(5.0, 550, 6),
        ]);
        assert_eq!(run.reads_per_sec(-2.0, 0.0), Some(100.0));
        assert_eq!(run.reads_per_sec(0.0, 3.0), Some(50.0));
        assert_eq!(run.reads_per_sec(3.0, 5.0), Some(100.0));
        // A window inside one interval gets that interval's rate.
        assert_eq!(run.reads_per_sec(1.2, 1.4), Some(50.0));
        assert_eq!(run.held_at(-1e-9), Some(10));
        assert_eq!(run.held_at(3.0), Some(2));
        assert_eq!(run.alloc_secs(), Some(2.0));
        let r = run.run_result(&Plan {
            data_bytes: 1,
            alloc_bytes: 1,
            chunk_bytes: 1,
            threads: 1,
            reads_per_sec: 0,
            before_secs: 2.0,
            after_secs: 2.0,
            hold_secs: 0.0,
            cgroup_limit_bytes: None,
            alloc_timeout_secs: 1.0,
            sample_ms: 100,
        });
        assert_eq!(r.ops, 150);
        assert_eq!(r.extra["cache_min_bytes"], json!(2));
        assert_eq!(r.extra["cache_end_bytes"], json!(6));
        assert_eq!(r.extra["samples"]["t_secs"].as_array().unwrap().len(), 6);
    }

    #[test]
    fn a_killed_allocator_has_no_time() {
        let mut run = side(Vec::new());
        run.alloc_outcome = Outcome::Signalled(libc::SIGKILL);
        assert_eq!(run.alloc_secs(), None);
        assert!(run.alloc_outcome.is_signalled());
        assert!(run.alloc_outcome.describe().contains("OOM"));
    }

    #[test]
    fn stayed_share_counts_evictions_after_the_exit() {
        let mut samples = vec![sample(2.0, 0, 0), sample(3.0, 0, 0), sample(6.0, 0, 0)];
        for (s, (inserted, evicted)) in samples.iter_mut().zip([(0, 0), (100, 50), (300, 70)]) {
            s.pages_inserted = Some(inserted);
            s.evicted_pages = Some(evicted);
        }
        let run = side(samples);
        // After the exit (t = 3): 200 inserted, 20 evicted.
        assert_eq!(run.stayed_share(), Some(0.9));
    }

    #[test]
    fn pressure_lines_give_avg10_and_total() {
        let text = "some avg10=12.50 avg60=3.00 avg300=0.10 total=12345\n\
                    full avg10=7.00 avg60=1.00 avg300=0.00 total=999\n";
        assert_eq!(psi_line(text, "some"), (12.5, 12345));
        assert_eq!(psi_line(text, "full"), (7.0, 999));
        assert_eq!(psi_line("", "some"), (0.0, 0));
    }

    #[test]
    fn stalls_are_intervals_without_a_read() {
        let run = side(vec![
            sample(0.0, 10, 0),
            sample(0.1, 10, 0),
            sample(0.3, 10, 0),
            sample(0.4, 20, 0),
        ]);
        assert!((run.stalled_secs() - 0.3).abs() < 1e-9);
    }

    #[test]
    fn lines_round_trip() {
        let line = ReaderLine::Ready(Ready {
            t: 1.5,
            fill_secs: 1.0,
            passes: 1,
            held_bytes: 4096,
        });
        let text = serde_json::to_string(&line).unwrap();
        assert!(text.contains("\"kind\":\"ready\""), "{text}");
        assert!(matches!(
            serde_json::from_str::<ReaderLine>(&text).unwrap(),
            ReaderLine::Ready(Ready { passes: 1, .. })
        ));
        let alloc: AllocLine =
            serde_json::from_str(r#"{"kind":"progress","t":2.0,"touched_bytes":64}"#).unwrap();
        assert!(matches!(
            alloc,
            AllocLine::Progress {
                touched_bytes: 64,
                ..
            }
        ));
    }
}
