//! The reader role of `pressure` (the hidden `pressure-reader` command): fills its cache
//! with the data file, says `ready`, then reads random pages, paced, every byte verified,
//! until the parent says `stop` on its stdin; a sampler thread prints the cache's size and
//! the machine's memory all along.
//!
//! Protection: the read count, the phase and the stop flag are atomics (relaxed: a sample
//! may lag a read by a batch of `COUNT_BATCH`); each thread owns its handle, buffer and
//! histogram.
//!
//! Limits: the kernel's cache of a file over 1 GiB is estimated from 256 ranges of it
//! (`KernelCount::Estimate`), exact only at the fill's end.

use std::io::{self, BufRead};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use super::lines::{ReaderFinal, ReaderLine, Ready, Sample};
use super::{
    COUNT_BATCH, FILL_PASSES_MAX, FILL_READ_BYTES, HELD_PERCENT, PACE_BACKLOG_SECS, READ_BYTES,
};
use crate::data;
use crate::kernel;
use crate::measure::Rng;
use crate::workloads::process::{self, mono_secs, RoleCache};

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
    #[command(flatten)]
    pub cache: RoleCache,
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
                let cache = args
                    .cache
                    .apply(folio::Cache::builder())
                    .capacity_policy(folio::CapacityPolicy::FollowMachine)
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
                process::report_line(&ReaderLine::Sample(sample));
                std::thread::sleep(Duration::from_millis(args.sample_ms));
            }
            Ok(())
        });
        let phases = || -> io::Result<ReaderFinal> {
            let passes = fill(&side, threads, file_bytes)?;
            side.advise_random()?;
            process::report_line(&ReaderLine::Ready(Ready {
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
        process::report_line(&ReaderLine::Final(totals));
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

    #[test]
    fn pressure_lines_give_avg10_and_total() {
        let text = "some avg10=12.50 avg60=3.00 avg300=0.10 total=12345\n\
                    full avg10=7.00 avg60=1.00 avg300=0.00 total=999\n";
        assert_eq!(psi_line(text, "some"), (12.5, 12345));
        assert_eq!(psi_line(text, "full"), (7.0, 999));
        assert_eq!(psi_line("", "some"), (0.0, 0));
    }
}
