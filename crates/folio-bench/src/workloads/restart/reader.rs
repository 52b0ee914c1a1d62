//! The reader role of `restart` (the hidden `restart-reader` command): builds its cache
//! (folio, persistent under the name it is given, adopting a segment left by the reader
//! before it) or opens the files (the kernel), then does its steps in order (a first
//! window, the fill, a warm window, then a clean exit or reads until it is killed) and
//! says each as one JSON line on stdout.
//!
//! Protection: the window's read counts, one per thread on its own cache line, and its
//! stop flag are atomics (relaxed: the sampler reads a count at most a read late); each
//! thread owns its buffer, generator and histogram.
//!
//! Limits: one read in `TIME_EVERY` is timed.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use super::{file_key, Plan, Side, FILL_READ_BYTES, READ_BYTES, TIME_EVERY};
use crate::data;
use crate::measure;
use crate::workloads::process::{self, RoleCache};

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
    #[command(flatten)]
    pub cache: RoleCache,
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
    process::report_line(&v);
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
    // A parent that dies kills the reader (a folio reader's keeper then finishes).
    process::die_with_parent();
    let plan = Plan {
        dir: args.dir.clone(),
        files: args.files,
        file_bytes: args.file_bytes,
    };
    let start = Instant::now();
    let source = match args.system {
        Side::Folio => {
            let mut builder = args
                .cache
                .apply(folio::Cache::builder())
                .capacity_bytes(args.capacity_bytes.max(folio::CAPACITY_BYTES_MIN))
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
