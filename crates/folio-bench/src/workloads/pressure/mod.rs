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
//! clock, from its start to its last touch: the "finishes within 1.2x") and
//! its wall time (spawn to exit, holding and freeing included), how it ended, the OOM
//! kills the kernel counted (`/proc/vmstat` `oom_kill`, and the cgroup's), reads/s before,
//! during and after the allocation, and the cache's size before, at its lowest, at the
//! allocator's exit and at the end. folio's growth after the exit is checked against the
//! reads that needed it: of the pages folio inserted after the allocator exited, the
//! share that stayed (not evicted) is ~1 when the cache grows as reads need, ~0 when it
//! stays at the shrunk capacity and evicts to make room.
//!
//! Files: this one, the workload's definition, its rows, targets and notes; `side_run.rs`,
//! the parent's run of one side (starting, listening to, reaping and killing the roles
//! through `workloads/process.rs`); `analysis.rs`, the figures of a side's run;
//! `reader.rs` and `alloc.rs`, the two roles; `lines.rs`, what the roles print.
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

mod alloc;
mod analysis;
mod lines;
mod reader;
mod side_run;

use std::io;

use serde_json::{json, Value};

pub(crate) use alloc::hold_memory;
pub use alloc::{alloc_main, AllocArgs};
pub use reader::{reader_main, ReaderArgs};
use side_run::{run_side, SideRun};

use super::{mib, Env, Metric, Report, Row, System, Target, Workload};
use crate::kernel::{self, CgroupVersion};
use crate::measure::RunResult;

/// Bytes of one random read.
pub const READ_BYTES: usize = 4096;
/// Bytes of one read of the fill.
const FILL_READ_BYTES: usize = 1 << 20;
/// Sequential passes of the fill, at most, before the one that refreshes every page.
const FILL_PASSES_MAX: u32 = 3;
/// The share of the file a cache holds, at least, to count as holding it.
const HELD_PERCENT: u64 = 99;
/// The bound on the allocator's time beside folio over beside the kernel.
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
