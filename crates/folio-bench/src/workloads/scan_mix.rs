//! `scan-mix` (issue 17): point reads beside a recurring one-time scan, the scan read
//! with and without `Advice::NoReuse`, over a cache a tenth of the data.
//!
//! Systems: `folio` (the scan's handle advised `NoReuse`: its pages are evicted first and
//! its reads of cached pages do not count as uses) and `folio-no-hint` (the same scan with
//! no hint), same run, alternating from run to run. The row's ops/s, P50 and P99 are the
//! point reads'; the scan's own MB/s is the row's `scan_mb_per_sec`.
//!
//! Design: one data file (`--data-mib`); a cache of `--cache-percent` of it. `--threads`
//! point readers read 4 KiB pages chosen from a Zipf distribution over a working set of
//! `--hot-percent` of the file's pages (half the cache by default: the case the hint is
//! for, a working set that fits and that a scan must not displace; `--hot-percent 100`
//! spreads the reads over every page, and then a quarter of them miss whatever the scan
//! does) with `--zipf-theta` (YCSB's 0.99 by default; ranks scattered over the whole file
//! by a multiplicative hash, so the hot pages are not neighbours and the scan passes over
//! them), each reader with its own handle advised `Random` (no readahead). One scanner reads the file from start to end
//! in 256 KiB reads, over and over (a recurring one-time scan: a backup, a compaction's
//! input, an analytics query), through a handle with the default readahead, paced to
//! `--scan-mib-per-sec` (the same in both systems: a scan that ran faster in one would
//! take CPU from its point readers, and the rows would compare CPU, not caching). Each run
//! starts from a fresh cache (the kernel's copy dropped), warms up `--warmup-secs`
//! unrecorded (point reads and scan alike), then measures `--duration-secs`. Every read is
//! verified.
//!
//! Limits: the kernel is not a row (its equal-memory runs need the cgroup child of
//! `randread`, and its `POSIX_FADV_NOREUSE` depends on the kernel's LRU generation
//! support); the point-read mix is one distribution.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use serde_json::json;

use super::{mib, pages_of, secs, threads_or, Env, Metric, Report, Row, System, Target, Workload};
use crate::data;
use crate::kernel;
use crate::measure::{self, Bound, Rng, RunResult};

/// Bytes of one point read.
pub const READ_BYTES: usize = 4096;
/// Bytes of one scan read.
pub const SCAN_READ_BYTES: usize = 256 << 10;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// Point-reader thread counts, comma-separated [default: 4]
    #[arg(long, value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// MiB of data [default: 2048; --quick 512]
    #[arg(long)]
    pub data_mib: Option<u64>,
    /// The cache's size, in percent of the data [default: 10]
    #[arg(long)]
    pub cache_percent: Option<u64>,
    /// The point reads' Zipf exponent [default: 0.99]
    #[arg(long)]
    pub zipf_theta: Option<f64>,
    /// The point reads' working set: the pages they choose from, in percent of the data
    /// [default: half of --cache-percent]
    #[arg(long)]
    pub hot_percent: Option<f64>,
    /// Seconds measured per run [default: 6; --quick 2]
    #[arg(long)]
    pub duration_secs: Option<f64>,
    /// Seconds of unrecorded warm-up per run [default: 4; --quick 1.5]
    #[arg(long)]
    pub warmup_secs: Option<f64>,
    /// MiB/s the scan reads at most, the same for both systems, so that it takes the
    /// same share of the machine in both and the point reads differ by what the cache
    /// kept [default: 256; 0: unlimited]
    #[arg(long)]
    pub scan_mib_per_sec: Option<u64>,
}

impl Workload for Args {
    fn name(&self) -> &'static str {
        "scan-mix"
    }

    fn run(&self, env: &Env) -> io::Result<Report> {
        let threads = threads_or(&self.threads, &[4]);
        let data_bytes = mib(self.data_mib.unwrap_or(env.scale.pick(512, 2048)));
        let cache_percent = self.cache_percent.unwrap_or(10).clamp(1, 100);
        let cache_bytes = data_bytes * cache_percent / 100;
        let theta = self.zipf_theta.unwrap_or(0.99);
        let duration = self.duration_secs.unwrap_or(env.scale.pick(2.0, 6.0));
        let warmup = self.warmup_secs.unwrap_or(env.scale.pick(1.5, 4.0));
        let path = env.data_file("scan-mix.dat", data_bytes)?;
        let hot_percent = self
            .hot_percent
            .unwrap_or(cache_percent as f64 / 2.0)
            .clamp(0.01, 100.0);
        let hot_pages = ((pages_of(data_bytes) as f64 * hot_percent / 100.0) as u64).max(1);
        let zipf = Zipf::new(hot_pages, theta);
        let scan_rate = self.scan_mib_per_sec.unwrap_or(256);

        let mut report = Report::new(self.name(), Metric::OpsPerSec);
        report.param("threads", threads.clone());
        report.param("data_bytes", data_bytes);
        report.param("cache_bytes", cache_bytes);
        report.param("zipf_theta", theta);
        report.param("hot_percent", hot_percent);
        report.param("read_bytes", READ_BYTES);
        report.param("scan_read_bytes", SCAN_READ_BYTES);
        report.param("duration_secs", duration);
        report.param("warmup_secs", warmup);
        report.param("scan_mib_per_sec", scan_rate);
        report.param("runs", env.runs);

        let systems = [System::FolioNoHint, System::Folio];
        let bar = env.bar(
            self.name(),
            (env.runs * threads.len() * systems.len()) as u64,
        );
        for &t in &threads {
            let mut runs: Vec<Vec<RunResult>> = vec![Vec::new(); systems.len()];
            for run in 0..env.runs {
                let order: Vec<usize> = if run % 2 == 0 { vec![0, 1] } else { vec![1, 0] };
                for si in order {
                    bar.set_message(format!(
                        "{} threads={t} run {}/{}",
                        systems[si],
                        run + 1,
                        env.runs
                    ));
                    kernel::make_cold(std::slice::from_ref(&path), env.cold)?;
                    let scan = Scan {
                        advice: match systems[si] {
                            System::Folio => folio::Advice::NoReuse,
                            _ => folio::Advice::Normal,
                        },
                        mib_per_sec: scan_rate,
                    };
                    let seed = 0x5ca7_0000 + run as u64;
                    runs[si].push(run_once(
                        env,
                        &path,
                        cache_bytes,
                        t,
                        &zipf,
                        scan,
                        warmup,
                        duration,
                        seed,
                    )?);
                    bar.inc(1);
                }
            }
            for (si, &system) in systems.iter().enumerate() {
                let mut row = Row::from_runs(system, t, &runs[si], report.ratio_of);
                let median_of = |key: &str| {
                    measure::lower_median(
                        runs[si].iter().filter_map(|r| r.extra.get(key)?.as_f64()),
                    )
                };
                for key in ["scan_mb_per_sec", "hit_ratio"] {
                    row.extra.insert(key.into(), json!(median_of(key)));
                }
                report.rows.push(row);
            }
        }
        bar.finish_and_clear();

        for &t in &threads {
            let t = t as u32;
            let (Some(with), Some(without)) = (
                report.row(System::Folio, t),
                report.row(System::FolioNoHint, t),
            ) else {
                continue;
            };
            let (with, without) = (with.clone(), without.clone());
            report.note(format!(
                "{t} point readers: hit ratio {:.3} with NoReuse on the scan, {:.3} without; \
                 the scan read {:.0} and {:.0} MB/s",
                with.extra["hit_ratio"].as_f64().unwrap_or(f64::NAN),
                without.extra["hit_ratio"].as_f64().unwrap_or(f64::NAN),
                with.extra["scan_mb_per_sec"].as_f64().unwrap_or(f64::NAN),
                without.extra["scan_mb_per_sec"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
            ));
            report.targets.push(Target::at_least(
                format!("scan-mix {t} threads: point reads/s, NoReuse scan / plain scan"),
                Some(with.ops_per_sec / without.ops_per_sec.max(1e-9)),
                1.3,
            ));
            report.targets.push(Target::at_most(
                format!("scan-mix {t} threads: point-read P99, NoReuse scan / plain scan"),
                Some(with.p99_us / without.p99_us.max(1e-9)),
                0.7,
            ));
        }
        report.note(format!(
            "folio: a cache of {cache_percent}% of the data, the library's defaults \
             (S3-FIFO); point readers: Zipf({theta}) over {hot_percent}% of the pages, \
             scattered, advice Random; the \
             scan: 256 KiB reads start to end, over and over, default readahead, at most \
             {scan_rate} MiB/s; folio: the scan's handle advised NoReuse, folio-no-hint: not"
        ));
        report.note(format!(
            "cold: before every run, {}; warm-up unrecorded; every read verified",
            env.cold.describe()
        ));
        report.limits = env.limits()?;
        Ok(report)
    }
}

/// How the scanner reads: its handle's advice, and its rate (0: unlimited).
#[derive(Clone, Copy)]
struct Scan {
    advice: folio::Advice,
    mib_per_sec: u64,
}

/// One run: a fresh cache, the point readers and the scanner for `warmup + duration`.
#[allow(clippy::too_many_arguments)]
fn run_once(
    env: &Env,
    path: &Path,
    cache_bytes: u64,
    threads: usize,
    zipf: &Zipf,
    scan: Scan,
    warmup: f64,
    duration: f64,
    seed: u64,
) -> io::Result<RunResult> {
    let cache = env.folio_cache(cache_bytes)?;
    let readers: Vec<folio::File> = (0..threads)
        .map(|_| {
            let f = cache.open(path)?;
            f.advise(0, 0, folio::Advice::Random)?;
            Ok(f)
        })
        .collect::<io::Result<_>>()?;
    let scanner = cache.open(path)?;
    scanner.advise(0, 0, scan.advice)?;
    let file_bytes = scanner.len();
    let pages = pages_of(file_bytes);
    let done = AtomicBool::new(false);
    let scanned = AtomicU64::new(0);
    let measuring = AtomicBool::new(false);
    let mut scan_secs = 0.0;
    let before = std::sync::Mutex::new(None);
    let result = std::thread::scope(|s| -> io::Result<RunResult> {
        let scanning = s.spawn(|| -> io::Result<()> {
            let mut buf = vec![0u8; SCAN_READ_BYTES];
            let mut at = 0u64;
            let started = Instant::now();
            let mut read_total = 0u64;
            while !done.load(Ordering::Relaxed) {
                if scan.mib_per_sec > 0 {
                    // Paced: never ahead of the rate (sleeping off what it is ahead by).
                    let due = secs(read_total as f64 / (scan.mib_per_sec << 20) as f64);
                    if let Some(ahead) = due.checked_sub(started.elapsed()) {
                        std::thread::sleep(ahead);
                    }
                }
                let n = scanner.read_at(&mut buf, at)?;
                data::verify(&buf[..n], at)?;
                if measuring.load(Ordering::Relaxed) {
                    scanned.fetch_add(n as u64, Ordering::Relaxed);
                }
                at += n as u64;
                read_total += n as u64;
                if at >= file_bytes {
                    at = 0;
                }
            }
            Ok(())
        });
        let bound = Bound::Duration {
            warmup: secs(warmup),
            measure: secs(duration),
        };
        let started = Instant::now();
        let r = measure::run_threads(threads, bound, |i, c, rec| {
            let mut rng = Rng::new(seed.wrapping_mul(1000).wrapping_add(i as u64));
            let mut buf = vec![0u8; READ_BYTES];
            let mut was_measuring = false;
            while !c.stopped() {
                if i == 0 && !was_measuring && c.measuring() {
                    was_measuring = true;
                    measuring.store(true, Ordering::Relaxed);
                    *before.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some((Instant::now(), point_read_ios(&readers)));
                }
                let page = scatter(zipf.sample(&mut rng), pages);
                let at = page * READ_BYTES as u64;
                let t0 = Instant::now();
                let n = readers[i].read_at(&mut buf, at)?;
                let took = t0.elapsed();
                let verified = data::verify(&buf[..n], at)?;
                if c.measuring() {
                    rec.latency(took);
                    rec.op(n as u64, verified);
                }
            }
            Ok(())
        });
        done.store(true, Ordering::Relaxed);
        scanning.join().expect("the scanner panicked")?;
        let from = before.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((t0, _)) = &from {
            scan_secs = t0.elapsed().as_secs_f64();
        } else {
            scan_secs = started.elapsed().as_secs_f64();
        }
        let mut r = r?;
        if let Some((_, ios_before)) = from {
            // The point readers' own device reads (one per missed page: advice Random)
            // over their reads, during the measurement.
            let misses = point_read_ios(&readers) - ios_before;
            r.extra.insert(
                "hit_ratio".into(),
                json!(1.0 - misses as f64 / r.ops.max(1) as f64),
            );
        }
        r.pages_inserted = Some(cache.stats().pages_inserted);
        Ok(r)
    })?;
    let mut r = result;
    r.extra.insert(
        "scan_mb_per_sec".into(),
        json!(scanned.load(Ordering::Relaxed) as f64 / scan_secs.max(1e-9) / 1e6),
    );
    Ok(r)
}

/// The device reads the point readers' handles caused so far.
fn point_read_ios(readers: &[folio::File]) -> u64 {
    readers.iter().map(|f| f.stats().read_io_requests).sum()
}

/// Rank `rank` of the Zipf distribution as a page: a multiplicative hash spreads the hot
/// ranks over the file (a bijection of `[0, pages)` when `pages` is a power of two, a
/// near one otherwise: a few pages take two ranks).
fn scatter(rank: u64, pages: u64) -> u64 {
    rank.wrapping_mul(0x9E37_79B9_7F4A_7C15) % pages
}

/// A Zipf distribution over ranks `[0, n)` with exponent `theta`, sampled by inverting
/// its cumulative weights (a table of `n` f64s, built once).
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: u64, theta: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n as usize);
        let mut sum = 0.0;
        for k in 1..=n.max(1) {
            sum += 1.0 / (k as f64).powf(theta);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        Zipf { cdf }
    }

    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_favours_low_ranks_and_stays_in_range() {
        let z = Zipf::new(1000, 0.99);
        let mut rng = Rng::new(7);
        let mut first_ten = 0;
        for _ in 0..10_000 {
            let r = z.sample(&mut rng);
            assert!(r < 1000);
            if r < 10 {
                first_ten += 1;
            }
        }
        // Ranks 1-10 of Zipf(0.99) over 1000 hold about 39% of the weight.
        assert!((3_000..5_000).contains(&first_ten), "{first_ten}");
    }
}
