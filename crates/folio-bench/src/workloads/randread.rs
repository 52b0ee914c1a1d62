//! `randread` (seed 003): J jobs read random 4 KiB pages of a file twice the size of the
//! cache, as fio's `randread` does. Half of the file fits: this measures the miss path
//! under steady eviction (insertion, reclaim, refault bookkeeping) at equal memory.
//!
//! Systems: `folio` (a cache of `--cache-mib`, every job its own `File` advised `Random`)
//! and `kernel` (buffered `pread`, every job its own fd advised `POSIX_FADV_RANDOM`, as
//! fio does), the kernel's page cache held to the same size by a memory cgroup.
//!
//! Design: the cgroup limits a process, so the kernel side runs in a child process — this
//! same binary's hidden `kernel-randread` command — that the parent moves into a fresh
//! cgroup (v1 `memory.limit_in_bytes`, or v2 `memory.max`) before telling it to start
//! (one line on its stdin); the child prints its `RunResult` as JSON. When no cgroup can
//! be made (not root, no memory controller) the child runs unlimited and the report says
//! so: that kernel row is then NOT at equal memory. Both sides start cold, warm up for
//! `--warmup-secs` unrecorded (the cache fills), then are measured for `--duration-secs`.
//! Every read is verified. `disk_bytes` (whole run, warm-up included) is folio's
//! `Stats::io_bytes` and the child's `read_bytes` of `/proc/self/io`.
//!
//! Limits: the cgroup also charges the child's own memory (a few MiB of stacks and heap),
//! so the kernel's page cache gets slightly less than folio's arena; folio's metadata
//! (under 1%) is outside its capacity. Offsets are uniform (no hot set).

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufRead};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::json;

use super::{
    measure_systems, mib, pages_of, secs, threads_or, Env, Metric, Report, System, Target, Workload,
};
use crate::data;
use crate::kernel;
use crate::measure::{self, Bound, Rng, RunResult};

/// Bytes of one random read.
pub const READ_BYTES: usize = 4096;
const SYSTEMS: [System; 2] = [System::Folio, System::Kernel];

#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// Job (thread) counts, comma-separated [default: 16]
    #[arg(long, value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// MiB of cache for each side; the file is twice this [default: 256; --quick 64]
    #[arg(long)]
    pub cache_mib: Option<u64>,
    /// Seconds measured per run [default: 5; --quick 1.5]
    #[arg(long)]
    pub duration_secs: Option<f64>,
    /// Seconds of unrecorded warm-up per run [default: 2; --quick 1]
    #[arg(long)]
    pub warmup_secs: Option<f64>,
}

impl Workload for Args {
    fn name(&self) -> &'static str {
        "randread"
    }

    fn run(&self, env: &Env) -> io::Result<Report> {
        let threads = threads_or(&self.threads, &[16]);
        let cache_bytes = mib(self.cache_mib.unwrap_or(env.scale.pick(64, 256)));
        let file_bytes = 2 * cache_bytes;
        let duration = self.duration_secs.unwrap_or(env.scale.pick(1.5, 5.0));
        let warmup = self.warmup_secs.unwrap_or(env.scale.pick(1.0, 2.0));
        let path = env.data_file("randread.dat", file_bytes)?;

        let mut report = Report::new(self.name(), Metric::OpsPerSec);
        report.param("threads", threads.clone());
        report.param("read_bytes", READ_BYTES);
        report.param("cache_bytes", cache_bytes);
        report.param("file_bytes", file_bytes);
        report.param("file_pages", pages_of(file_bytes));
        report.param("duration_secs", duration);
        report.param("warmup_secs", warmup);
        report.param("runs", env.runs);

        let mut cgroup_problem: Option<String> = None;
        let mut cgroup_used: Option<String> = None;
        measure_systems(env, &mut report, &SYSTEMS, &threads, |turn| {
            let (t, seed) = (turn.threads, 0x5eed_0000 + turn.run as u64);
            kernel::make_cold(std::slice::from_ref(&path), env.cold)?;
            if turn.system == System::Folio {
                return run_folio(env, &path, t, cache_bytes, warmup, duration, seed);
            }
            let (r, cgroup) = run_kernel_child(&path, t, cache_bytes, warmup, duration, seed)?;
            match cgroup {
                Ok(name) => cgroup_used = Some(name),
                Err(why) => cgroup_problem = Some(why),
            }
            Ok(r)
        })?;
        match (&cgroup_problem, &cgroup_used) {
            (None, Some(name)) => {
                report.param("kernel_memory_limit_bytes", cache_bytes);
                report.note(format!(
                    "kernel: a child process of this binary in {name}, limited to {} MiB \
                     (page cache and the child's own memory)",
                    cache_bytes >> 20
                ));
            }
            (Some(why), _) => {
                report.param("kernel_memory_limit_bytes", serde_json::Value::Null);
                report.note(format!(
                    "kernel: NO memory cgroup could be made ({why}); the kernel ran with \
                     all the machine's memory, NOT at equal memory"
                ));
            }
            (None, None) => {}
        }
        report.note(format!(
            "cold: before every measurement, {}; then mincore: 0% resident",
            env.cold.describe()
        ));
        report.note("both: fadvise/advise Random per job; warm-up unrecorded");
        for &t in &threads {
            report.targets.push(Target::at_least(
                format!("randread {t} jobs: folio / kernel ops/s at equal memory"),
                report
                    .ratio(System::Folio, t as u32)
                    .filter(|_| cgroup_problem.is_none()),
                1.0,
            ));
        }
        report.limits = env.limits()?;
        Ok(report)
    }
}

fn run_folio(
    env: &Env,
    path: &Path,
    threads: usize,
    cache_bytes: u64,
    warmup: f64,
    duration: f64,
    seed: u64,
) -> io::Result<RunResult> {
    let cache = env.folio_cache(cache_bytes)?;
    let files: Vec<folio::File> = (0..threads)
        .map(|_| {
            let f = cache.open(path)?;
            f.advise(0, 0, folio::Advice::Random)?;
            Ok(f)
        })
        .collect::<io::Result<_>>()?;
    let file_bytes = files[0].len();
    let mut r = random_reads(threads, warmup, duration, seed, file_bytes, |i, buf, at| {
        files[i].read_at(buf, at)
    })?;
    let s = cache.stats();
    r.pages_inserted = Some(s.pages_inserted);
    r.extra.insert("disk_bytes".into(), json!(s.io_bytes));
    r.extra.insert(
        "folio".into(),
        json!({
            "backend": s.backend, "hits": s.hits, "misses": s.misses,
            "hit_ratio": s.hits as f64 / (s.hits + s.misses).max(1) as f64,
            "evicted_pages": s.evicted_pages, "refaults": s.refaults,
            "waits_on_io": s.waits_on_io, "alloc_failures": s.alloc_failures,
            "readahead_pages": s.readahead_pages,
        }),
    );
    Ok(r)
}

/// Runs the kernel side in a child process inside a memory cgroup. Returns the child's
/// result and the cgroup's description, or why there was none.
fn run_kernel_child(
    path: &Path,
    threads: usize,
    cache_bytes: u64,
    warmup: f64,
    duration: f64,
    seed: u64,
) -> io::Result<(RunResult, Result<String, String>)> {
    let args: Vec<OsString> = vec![
        "kernel-randread".into(),
        "--file".into(),
        path.into(),
        "--threads".into(),
        threads.to_string().into(),
        "--warmup-secs".into(),
        warmup.to_string().into(),
        "--duration-secs".into(),
        duration.to_string().into(),
        "--seed".into(),
        seed.to_string().into(),
    ];
    let out = kernel::run_in_cgroup(&args, cache_bytes)?;
    let mut r: RunResult = serde_json::from_slice(&out.stdout)
        .map_err(|e| io::Error::other(format!("kernel-randread child output: {e}")))?;
    if let Some(peak) = out.cgroup_peak_bytes {
        r.extra.insert("cgroup_peak_bytes".into(), json!(peak));
    }
    Ok((r, out.cgroup))
}

/// Options of the hidden child command.
#[derive(clap::Args, Debug, Clone)]
pub struct ChildArgs {
    #[arg(long)]
    pub file: PathBuf,
    #[arg(long)]
    pub threads: usize,
    #[arg(long)]
    pub warmup_secs: f64,
    #[arg(long)]
    pub duration_secs: f64,
    #[arg(long)]
    pub seed: u64,
}

/// The child: waits for "go" on stdin (the parent has placed it in the cgroup by then),
/// runs the kernel's random reads, prints the result as JSON on stdout.
pub fn child_main(args: &ChildArgs) -> io::Result<()> {
    let mut line = String::new();
    io::stdin().lock().read_line(&mut line)?;
    let files: Vec<File> = (0..args.threads.max(1))
        .map(|_| {
            let f = File::open(&args.file)?;
            kernel::fadvise(&f, 0, 0, libc::POSIX_FADV_RANDOM)?;
            Ok(f)
        })
        .collect::<io::Result<_>>()?;
    let file_bytes = files[0].metadata()?.len();
    let disk_before = kernel::proc_self_io("read_bytes");
    let mut r = random_reads(
        files.len(),
        args.warmup_secs,
        args.duration_secs,
        args.seed,
        file_bytes,
        |i, buf, at| files[i].read_at(buf, at),
    )?;
    if let (Some(before), Some(after)) = (disk_before, kernel::proc_self_io("read_bytes")) {
        r.extra.insert("disk_bytes".into(), json!(after - before));
    }
    r.pages_inserted = None;
    let json = serde_json::to_string(&r).map_err(io::Error::other)?;
    println!("{json}");
    Ok(())
}

/// `threads` jobs of random page-aligned 4 KiB reads, each verified.
fn random_reads(
    threads: usize,
    warmup: f64,
    duration: f64,
    seed: u64,
    file_bytes: u64,
    read: impl Fn(usize, &mut [u8], u64) -> io::Result<usize> + Sync,
) -> io::Result<RunResult> {
    let pages = (file_bytes / READ_BYTES as u64).max(1);
    let bound = Bound::Duration {
        warmup: secs(warmup),
        measure: secs(duration),
    };
    measure::run_threads(threads, bound, |i, c, rec| {
        let mut rng = Rng::new(seed.wrapping_mul(1000).wrapping_add(i as u64));
        let mut buf = vec![0u8; READ_BYTES];
        while !c.stopped() {
            let at = rng.below(pages) * READ_BYTES as u64;
            let started = Instant::now();
            let n = read(i, &mut buf, at)?;
            let took = started.elapsed();
            let verified = data::verify(&buf[..n], at)?;
            if n != READ_BYTES.min((file_bytes - at) as usize) {
                return Err(io::Error::other(format!("short read of {n} bytes at {at}")));
            }
            if c.measuring() {
                rec.latency(took);
                rec.op(n as u64, verified);
            }
        }
        Ok(())
    })
}
