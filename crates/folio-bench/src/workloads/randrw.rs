//! `randrw` (issue 14): J jobs, each operation a random 4 KiB read (70%) or overwrite
//! (30%) of a file twice the size of the cache, each job syncing after every 1,000 of its
//! writes — an OLTP engine's mix. Half the file fits: this measures reads that miss,
//! writes that must read their page first (a partial page is not written blind; a whole
//! 4 KiB page is), writeback and reclaim of dirty pages under steady eviction, at equal
//! memory.
//!
//! Systems: `folio` (a fresh cache of `--cache-mib` at the library's defaults, each job its
//! own handle advised `Random`) and `kernel` (buffered `pread`/`pwrite` + `fdatasync`, each
//! job its own fd advised `POSIX_FADV_RANDOM`, as fio does), in a child process held by a
//! memory cgroup to the same size, as `randread` does.
//!
//! Design: the jobs, the content model and the checks are `rw`'s: every read is checked
//! (any version ever written to the block, or the original), and after every folio run
//! its file is read back with O_DIRECT and the blocks written in the run checked exactly
//! (the others by the rule). Both sides start cold (the kernel's cache of the file
//! dropped and checked 0% resident), warm up for `--warmup-secs` unrecorded, then are
//! measured for `--duration-secs`. Ops and bytes count reads and writes together; p50/p99
//! are of both; sync p50/p99 of the syncs.
//!
//! Limits: as `randread`'s (the cgroup charges the child's own few MiB; offsets uniform).

use std::io;

use super::rw::{self, EqualMemory, JobAdvice, Spec, Warm};
use super::{
    measure_systems, mib, pages_of, threads_or, Env, Metric, Report, System, Target, Workload,
};
use crate::kernel;
use crate::stamped::BLOCK_BYTES;

const SYSTEMS: [System; 2] = [System::Folio, System::Kernel];
/// Percent of operations that are reads.
pub const READ_PERCENT: u32 = 70;
/// Writes per job between its syncs.
pub const SYNC_EVERY_WRITES: u64 = 1000;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// Job (thread) counts, comma-separated [default: 16]
    #[arg(long, value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// MiB of cache for each side; the file is twice this [default: 256; --quick 64]
    #[arg(long)]
    pub cache_mib: Option<u64>,
    /// Writes each job makes between its syncs [default: 1000]
    #[arg(long)]
    pub sync_every_writes: Option<u64>,
    /// Seconds measured per run [default: 5; --quick 1]
    #[arg(long)]
    pub duration_secs: Option<f64>,
    /// Seconds of unrecorded warm-up per run [default: 2; --quick 0.5]
    #[arg(long)]
    pub warmup_secs: Option<f64>,
}

impl Workload for Args {
    fn name(&self) -> &'static str {
        "randrw"
    }

    fn run(&self, env: &Env) -> io::Result<Report> {
        let threads = threads_or(&self.threads, &[16]);
        let cache_bytes = mib(self.cache_mib.unwrap_or(env.scale.pick(64, 256)).max(1));
        let file_bytes = 2 * cache_bytes;
        let duration = self.duration_secs.unwrap_or(env.scale.pick(1.0, 5.0));
        let warmup = self.warmup_secs.unwrap_or(env.scale.pick(0.5, 2.0));
        let path = env.data_file("randrw.dat", file_bytes)?;

        let mut report = Report::new(self.name(), Metric::OpsPerSec);
        report.param("threads", threads.clone());
        report.param("block_bytes", BLOCK_BYTES);
        report.param("read_percent", READ_PERCENT);
        let sync_every = self.sync_every_writes.unwrap_or(SYNC_EVERY_WRITES).max(1);
        report.param("sync_every_writes", sync_every);
        report.param("cache_bytes", cache_bytes);
        report.param("file_bytes", file_bytes);
        report.param("file_pages", pages_of(file_bytes));
        report.param("duration_secs", duration);
        report.param("warmup_secs", warmup);
        report.param("runs", env.runs);

        let mut turn = 0u16;
        let mut memory = EqualMemory::default();
        measure_systems(env, &mut report, &SYSTEMS, &threads, |t| {
            turn += 1;
            let spec = Spec {
                threads: t.threads,
                turn,
                warmup_secs: warmup,
                duration_secs: duration,
                read_percent: READ_PERCENT,
                sync_every_writes: sync_every,
                warm: Warm::Cold,
                advice: JobAdvice::Random,
            };
            kernel::make_cold(std::slice::from_ref(&path), env.cold)?;
            if t.system == System::Folio {
                return rw::run_folio(env, &path, &spec, cache_bytes);
            }
            let (r, cgroup) = rw::run_kernel(&path, &spec, cache_bytes)?;
            memory.record(cgroup);
            Ok(r)
        })?;
        memory.describe(&mut report, cache_bytes);
        report.note(format!(
            "cold: before every measurement, {}; then mincore: 0% resident",
            env.cold.describe()
        ));
        report.note(format!(
            "both: {READ_PERCENT}% reads, every read checked; each job syncs after \
             {sync_every} of its writes; advice Random per job; warm-up unrecorded; \
             p50/p99: reads and writes; sync p50/p99: one sync"
        ));
        report.note(
            "folio: after each run the file is read back with O_DIRECT, the blocks written \
             checked exactly (disk_verified_bytes); kernel: torn_reads_reread counts buffered \
             reads torn by a racing write of the page, read again",
        );
        for &t in &threads {
            report.targets.push(Target::at_least(
                format!("randrw {t} jobs: folio / kernel ops/s at equal memory"),
                report
                    .ratio(System::Folio, t as u32)
                    .filter(|_| memory.held()),
                1.0,
            ));
        }
        report.limits = env.limits()?;
        Ok(report)
    }
}
