//! `readahead-storm` (seed 002): N threads call readahead on the same ranges of one file,
//! at the same time, through one shared handle — RocksDB's prefetch calls when many
//! reader threads share a table file. Done right, every page is inserted once and a call
//! over a range that is cached or in flight costs nothing; the kernel before the seed's
//! patch allocated and tried to insert every page again, contending on one lock.
//!
//! Systems: `folio` (`File::readahead` on one shared `File`) and `kernel` (`readahead(2)`
//! on one shared fd).
//!
//! Design: each thread walks the file from its start in `--range-kib` ranges and asks for
//! each one; all threads start together (a barrier), so they collide on every range. A
//! run is the storm (timed) and then a read-back of the whole file in 1 MiB reads (timed,
//! every byte verified, waits for whatever the storm left in flight). Between the two,
//! untimed, the pages the storm inserted are counted: folio's `Stats::pages_inserted`;
//! the kernel's page cache by `cachestat(2)` (which counts pages still under I/O), or,
//! where the kernel lacks it, by mincore once residency stops changing.
//! `ops_per_sec` is readahead calls per second of the storm alone; `mb_per_sec` is the
//! file's bytes over the whole run (storm + read-back): the rate at which the storm got
//! the file cached and read. The ratio column compares `mb_per_sec`.
//!
//! Limits: the kernel can never insert a page twice (its insertion fails on a present
//! page); its wasted work (allocations and lock round trips that fail) is not visible from
//! user space, only in its time. Unique pages = the file's pages (the ranges cover it).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{
    measure_systems, mib, pages_of, threads_or, Env, Metric, Report, System, Target, Workload,
};
use crate::data;
use crate::kernel;
use crate::measure::{self, Bound, RunResult};

const SYSTEMS: [System; 2] = [System::Folio, System::Kernel];
const READ_BACK_BYTES: usize = 1 << 20;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// Thread counts, comma-separated [default: 2,32]
    #[arg(long, value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// MiB of the file [default: 256; --quick 64]
    #[arg(long)]
    pub file_mib: Option<u64>,
    /// KiB asked for by each readahead call [default: 512]
    #[arg(long)]
    pub range_kib: Option<u64>,
}

impl Workload for Args {
    fn name(&self) -> &'static str {
        "readahead-storm"
    }

    fn run(&self, env: &Env) -> io::Result<Report> {
        let threads = threads_or(&self.threads, &[2, 32]);
        let file_bytes = mib(self.file_mib.unwrap_or(env.scale.pick(64, 256)));
        let range_bytes = self.range_kib.unwrap_or(512).max(4) << 10;
        let path = env.data_file("readahead-storm.dat", file_bytes)?;
        let file_pages = pages_of(file_bytes);

        let mut report = Report::new(self.name(), Metric::MbPerSec);
        report.param("threads", threads.clone());
        report.param("file_bytes", file_bytes);
        report.param("file_pages", file_pages);
        report.param("unique_pages", file_pages);
        report.param("range_bytes", range_bytes);
        report.param("calls_per_thread", file_bytes.div_ceil(range_bytes));
        report.param("runs", env.runs);

        let mut kernel_count = "";
        measure_systems(env, &mut report, &SYSTEMS, &threads, |turn| {
            let t = turn.threads;
            kernel::make_cold(std::slice::from_ref(&path), env.cold)?;
            if turn.system == System::Folio {
                return storm_folio(env, &path, t, range_bytes);
            }
            let (r, how) = storm_kernel(&path, t, range_bytes)?;
            kernel_count = how;
            Ok(r)
        })?;
        report.note(format!(
            "cold: before every measurement, {}; then mincore: 0% resident",
            env.cold.describe()
        ));
        report.note(format!(
            "pages_inserted: folio = Stats::pages_inserted after the storm; kernel = {kernel_count}"
        ));
        report.note("ops/s = readahead calls per second of the storm; MB/s = file bytes / (storm + verified read-back)");
        for &t in &threads {
            report.targets.push(Target::equal(
                format!("readahead-storm {t} threads: folio pages inserted == unique pages"),
                report
                    .row(System::Folio, t as u32)
                    .and_then(|r| r.pages_inserted),
                file_pages,
            ));
        }
        report.limits = env.limits()?;
        Ok(report)
    }
}

fn storm_folio(env: &Env, path: &Path, threads: usize, range_bytes: u64) -> io::Result<RunResult> {
    let cache = env.folio_cache(std::fs::metadata(path)?.len() + (32 << 20))?;
    let file = cache.open(path)?;
    let file_bytes = file.len();
    let storm = storm(threads, file_bytes, range_bytes, |at, len| {
        file.readahead(at, len)
    })?;
    let inserted = cache.stats().pages_inserted;
    let started = Instant::now();
    let (read, verified) = read_back(file_bytes, |buf, at| file.read_at(buf, at))?;
    let read_back = started.elapsed();
    let s = cache.stats();
    let mut r = finish(storm, read_back, read, verified);
    r.pages_inserted = Some(inserted);
    r.extra.insert(
        "folio".into(),
        json!({
            "pages_inserted_after_read_back": s.pages_inserted,
            "insert_conflicts": s.insert_conflicts, "readahead_forced": s.readahead_forced,
            "io_requests": s.io_requests, "io_bytes": s.io_bytes, "waits_on_io": s.waits_on_io,
            "backend": s.backend,
        }),
    );
    Ok(r)
}

/// Returns the run and how its pages were counted.
fn storm_kernel(
    path: &Path,
    threads: usize,
    range_bytes: u64,
) -> io::Result<(RunResult, &'static str)> {
    let file = File::open(path)?;
    let file_bytes = file.metadata()?.len();
    let storm = storm(threads, file_bytes, range_bytes, |at, len| {
        kernel::readahead(&file, at, len)
    })?;
    let (inserted, how) = match kernel::cached_pages(path)? {
        Some(n) => (
            n,
            "pages in the page cache right after the storm (cachestat)",
        ),
        None => (
            kernel::settled_residency(&[path.to_path_buf()], Duration::from_secs(10))?.resident,
            "pages resident once the storm's I/O settled (mincore)",
        ),
    };
    let started = Instant::now();
    let (read, verified) = read_back(file_bytes, |buf, at| file.read_at(buf, at))?;
    let mut r = finish(storm, started.elapsed(), read, verified);
    r.pages_inserted = Some(inserted);
    Ok((r, how))
}

/// N threads each call `readahead(at, range)` over the whole file, together.
fn storm(
    threads: usize,
    file_bytes: u64,
    range_bytes: u64,
    readahead: impl Fn(u64, u64) -> io::Result<()> + Sync,
) -> io::Result<RunResult> {
    measure::run_threads(threads, Bound::Work { cap: None }, |_, c, rec| {
        let mut at = 0u64;
        while at < file_bytes && !c.stopped() {
            let started = Instant::now();
            readahead(at, range_bytes)?;
            rec.latency(started.elapsed());
            rec.op(0, 0);
            at += range_bytes;
        }
        Ok(())
    })
}

/// Reads the whole file in 1 MiB reads, verifying every byte.
fn read_back(
    file_bytes: u64,
    read: impl Fn(&mut [u8], u64) -> io::Result<usize>,
) -> io::Result<(u64, u64)> {
    let mut buf = vec![0u8; READ_BACK_BYTES];
    let (mut at, mut verified) = (0u64, 0u64);
    while at < file_bytes {
        let n = read(&mut buf, at)?;
        if n == 0 {
            return Err(io::Error::other(format!(
                "read-back ended at {at} of {file_bytes} bytes"
            )));
        }
        verified += data::verify(&buf[..n], at)?;
        at += n as u64;
    }
    Ok((at, verified))
}

/// The storm's calls and latencies, with the read-back's bytes and time: ops/s counts the
/// storm alone, MB/s the whole run (see the module doc).
fn finish(mut storm: RunResult, read_back: Duration, read: u64, verified: u64) -> RunResult {
    let storm_secs = storm.elapsed_secs;
    let total_secs = storm_secs + read_back.as_secs_f64();
    storm.bytes_read = read;
    storm.bytes_verified = verified;
    storm.extra.insert("storm_secs".into(), json!(storm_secs));
    storm.extra.insert("total_secs".into(), json!(total_secs));
    storm.bytes_secs = Some(total_secs);
    storm
}
