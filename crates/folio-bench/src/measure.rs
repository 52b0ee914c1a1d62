//! The measuring harness: N worker threads started together, a clock around them, a
//! latency histogram per thread, and the median of repeated runs.
//!
//! Design: workers wait on a barrier; the clock starts when it opens. A run is either
//! bounded by a duration (the controller flips a phase word: warm-up, measure, stop) or by
//! its work (each worker scans to its end; a cap can stop it early). Workers read the
//! phase word with a relaxed load (a read-only shared line: no traffic between cores)
//! and record into their own `Recorder` (no shared counter on the hot path); the
//! controller merges the recorders when every worker has returned. The elapsed time ends
//! at the last worker's own end stamp, so the controller's wake-up latency is not counted.
//!
//! Latency: each recorded operation's duration in nanoseconds goes into an hdrhistogram
//! (3 significant digits). Operations too short for a clock read to be negligible
//! (pread-scale's ~50 ns hits) are timed one in `SAMPLE_EVERY`; the others every time.
//! The write workloads also time each sync (`sync_data`, `fdatasync`) into a second
//! histogram of its own, so that a run's sync latency is not mixed into its writes'.
//!
//! Limits: the median of an even number of runs is the lower middle run (a real run, not
//! a mean); percentiles come from that run alone.

use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// One operation in this many is timed where timing every one would cost too much.
pub const SAMPLE_EVERY: u64 = 64;

const PHASE_WARMUP: u8 = 0;
const PHASE_MEASURE: u8 = 1;
const PHASE_STOP: u8 = 2;

/// Where a run is: a worker records only in `Measure`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Warmup,
    Measure,
    Stop,
}

/// What a worker consults: whether to record, whether to stop.
#[derive(Debug)]
pub struct Control {
    phase: AtomicU8,
}

impl Control {
    /// The run's phase now.
    #[inline]
    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            PHASE_WARMUP => Phase::Warmup,
            PHASE_MEASURE => Phase::Measure,
            _ => Phase::Stop,
        }
    }

    #[inline]
    pub fn measuring(&self) -> bool {
        self.phase.load(Ordering::Relaxed) == PHASE_MEASURE
    }

    #[inline]
    pub fn stopped(&self) -> bool {
        self.phase.load(Ordering::Relaxed) == PHASE_STOP
    }
}

/// One worker's tallies.
pub struct Recorder {
    hist: Histogram<u64>,
    sync_hist: Histogram<u64>,
    pub ops: u64,
    pub bytes_read: u64,
    pub bytes_verified: u64,
    pub bytes_written: u64,
    end: Option<Instant>,
}

impl Recorder {
    fn new() -> Recorder {
        Recorder {
            hist: Histogram::new(3).expect("3 significant digits is valid"),
            sync_hist: Histogram::new(3).expect("3 significant digits is valid"),
            ops: 0,
            bytes_read: 0,
            bytes_verified: 0,
            bytes_written: 0,
            end: None,
        }
    }

    /// Records one operation's latency.
    #[inline]
    pub fn latency(&mut self, took: Duration) {
        // Auto-resizing histogram: a record only fails for values beyond u64.
        let _ = self.hist.record((took.as_nanos() as u64).max(1));
    }

    /// Counts one operation that read `bytes_read` and verified `bytes_verified` bytes.
    #[inline]
    pub fn op(&mut self, bytes_read: u64, bytes_verified: u64) {
        self.ops += 1;
        self.bytes_read += bytes_read;
        self.bytes_verified += bytes_verified;
    }

    /// Counts one operation that wrote `bytes_written` bytes.
    #[inline]
    pub fn write_op(&mut self, bytes_written: u64) {
        self.ops += 1;
        self.bytes_written += bytes_written;
    }

    /// Records one sync's latency (not an operation: syncs are not counted in `ops`).
    #[inline]
    pub fn sync_latency(&mut self, took: Duration) {
        let _ = self.sync_hist.record((took.as_nanos() as u64).max(1));
    }
}

/// The result of one run of one system at one thread count.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunResult {
    pub ops: u64,
    pub bytes_read: u64,
    pub bytes_verified: u64,
    /// Bytes written (the write workloads), counted in the throughput with those read.
    #[serde(default)]
    pub bytes_written: u64,
    pub elapsed_secs: f64,
    /// The time `bytes_read` took, where it is not `elapsed_secs` (a workload whose
    /// operations and bytes are timed over different spans).
    #[serde(default)]
    pub bytes_secs: Option<f64>,
    /// The bytes the throughput counts, where they are not bytes read from a file (the
    /// memory copies of `limits`).
    #[serde(default)]
    pub bytes_moved: Option<u64>,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Syncs recorded, and their latency (the write workloads; `None` where none was).
    #[serde(default)]
    pub syncs: u64,
    #[serde(default)]
    pub sync_p50_us: Option<f64>,
    #[serde(default)]
    pub sync_p99_us: Option<f64>,
    /// Pages the system brought into its cache (folio: `Stats::pages_inserted`; the
    /// kernel: resident pages counted by mincore), where the workload defines it.
    pub pages_inserted: Option<u64>,
    /// Free-form facts of this run (hit ratio, cgroup peak ...), merged into the row.
    #[serde(default)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl RunResult {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed_secs.max(1e-9)
    }

    /// Megabytes (10^6 bytes) read and written per second.
    pub fn mb_per_sec(&self) -> f64 {
        self.bytes_moved
            .unwrap_or(self.bytes_read + self.bytes_written) as f64
            / 1e6
            / self.bytes_secs.unwrap_or(self.elapsed_secs).max(1e-9)
    }
}

/// How a run ends.
#[derive(Clone, Copy, Debug)]
pub enum Bound {
    /// Workers run until stopped: `warmup` unrecorded, then `measure` recorded.
    Duration { warmup: Duration, measure: Duration },
    /// Workers run to the end of their work; stopped at `cap` if they take longer.
    Work { cap: Option<Duration> },
}

/// Runs `threads` workers of `worker(thread_index, control, recorder)` together and
/// merges what they recorded.
///
/// Context: spawns and joins `threads` threads; the first worker error is returned after
/// all have stopped.
pub fn run_threads<F>(threads: usize, bound: Bound, worker: F) -> io::Result<RunResult>
where
    F: Fn(usize, &Control, &mut Recorder) -> io::Result<()> + Sync,
{
    let control = Control {
        phase: AtomicU8::new(match bound {
            Bound::Duration { warmup, .. } if !warmup.is_zero() => PHASE_WARMUP,
            _ => PHASE_MEASURE,
        }),
    };
    let barrier = Barrier::new(threads + 1);
    let done = (Mutex::new(0usize), Condvar::new());
    let (results, measure_start) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (control, barrier, done, worker) = (&control, &barrier, &done, &worker);
                s.spawn(move || {
                    let mut rec = Recorder::new();
                    barrier.wait();
                    let result = worker(i, control, &mut rec);
                    rec.end = Some(Instant::now());
                    if result.is_err() {
                        control.phase.store(PHASE_STOP, Ordering::Relaxed);
                    }
                    *done.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                    done.1.notify_all();
                    result.map(|()| rec)
                })
            })
            .collect();
        barrier.wait();
        let mut measure_start = Instant::now();
        let wait_done_until = |deadline: Option<Instant>| {
            let mut count = done.0.lock().unwrap_or_else(|e| e.into_inner());
            while *count < threads {
                match deadline {
                    None => count = done.1.wait(count).unwrap_or_else(|e| e.into_inner()),
                    Some(at) => {
                        let now = Instant::now();
                        if now >= at {
                            return;
                        }
                        count = done
                            .1
                            .wait_timeout(count, at - now)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                }
            }
        };
        match bound {
            Bound::Duration { warmup, measure } => {
                if !warmup.is_zero() {
                    wait_done_until(Some(measure_start + warmup));
                    control.phase.store(PHASE_MEASURE, Ordering::Relaxed);
                    measure_start = Instant::now();
                }
                wait_done_until(Some(measure_start + measure));
                control.phase.store(PHASE_STOP, Ordering::Relaxed);
            }
            Bound::Work { cap } => {
                wait_done_until(cap.map(|c| measure_start + c));
                control.phase.store(PHASE_STOP, Ordering::Relaxed);
            }
        }
        let results: Vec<io::Result<Recorder>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        (results, measure_start)
    });
    let recorders = results.into_iter().collect::<io::Result<Vec<_>>>()?;
    Ok(summarize(recorders, measure_start))
}

/// Runs `work` on the calling thread, timed from now to its return: for workloads that
/// drive their own concurrency (an io_uring queue) from one thread.
pub fn run_here(work: impl FnOnce(&mut Recorder) -> io::Result<()>) -> io::Result<RunResult> {
    let mut rec = Recorder::new();
    let start = Instant::now();
    work(&mut rec)?;
    rec.end = Some(Instant::now());
    Ok(summarize(vec![rec], start))
}

/// Merges recorders into one run that started at `start` and ended with the last of them.
fn summarize(recorders: Vec<Recorder>, start: Instant) -> RunResult {
    let mut merged = Recorder::new();
    let mut end = start;
    for rec in recorders {
        merged.hist.add(&rec.hist).expect("histograms of one kind");
        merged
            .sync_hist
            .add(&rec.sync_hist)
            .expect("histograms of one kind");
        merged.ops += rec.ops;
        merged.bytes_read += rec.bytes_read;
        merged.bytes_verified += rec.bytes_verified;
        merged.bytes_written += rec.bytes_written;
        end = end.max(rec.end.unwrap_or(end));
    }
    let quantile_us = |hist: &Histogram<u64>, q: f64| {
        if hist.is_empty() {
            0.0
        } else {
            hist.value_at_quantile(q) as f64 / 1000.0
        }
    };
    let sync_us =
        |q: f64| (!merged.sync_hist.is_empty()).then(|| quantile_us(&merged.sync_hist, q));
    RunResult {
        ops: merged.ops,
        bytes_read: merged.bytes_read,
        bytes_verified: merged.bytes_verified,
        bytes_written: merged.bytes_written,
        elapsed_secs: (end - start).as_secs_f64(),
        bytes_secs: None,
        bytes_moved: None,
        p50_us: quantile_us(&merged.hist, 0.50),
        p99_us: quantile_us(&merged.hist, 0.99),
        syncs: merged.sync_hist.len(),
        sync_p50_us: sync_us(0.50),
        sync_p99_us: sync_us(0.99),
        pages_inserted: None,
        extra: serde_json::Map::new(),
    }
}

/// The median of `xs`, the lower middle one for an even count; `None` for none.
pub fn lower_median(xs: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = xs.into_iter().collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len().saturating_sub(1) / 2).copied()
}

/// The run with the median `by` (the lower middle one for an even count), and every
/// run's ops/s in run order.
pub fn median(runs: &[RunResult], by: impl Fn(&RunResult) -> f64) -> (RunResult, Vec<f64>) {
    assert!(!runs.is_empty(), "median of no runs");
    let all: Vec<f64> = runs.iter().map(RunResult::ops_per_sec).collect();
    let keys: Vec<f64> = runs.iter().map(by).collect();
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&a, &b| keys[a].total_cmp(&keys[b]));
    (runs[order[(runs.len() - 1) / 2]].clone(), all)
}

/// A small fast generator for random offsets (splitmix64): reproducible per seed, no
/// shared state between threads.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), by multiply-shift.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_bound_run_counts_every_op_and_stops() {
        let r = run_threads(3, Bound::Work { cap: None }, |_, _, rec| {
            for _ in 0..100 {
                rec.latency(Duration::from_micros(2));
                rec.op(10, 10);
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(r.ops, 300);
        assert_eq!(r.bytes_verified, 3000);
        assert!((r.p50_us - 2.0).abs() < 0.01);
    }

    #[test]
    fn writes_and_syncs_are_counted_apart_from_reads() {
        let r = run_threads(2, Bound::Work { cap: None }, |_, _, rec| {
            rec.write_op(4096);
            rec.latency(Duration::from_micros(3));
            rec.sync_latency(Duration::from_micros(500));
            rec.op(100, 100);
            Ok(())
        })
        .unwrap();
        assert_eq!((r.ops, r.bytes_written, r.bytes_read), (4, 8192, 200));
        assert_eq!(r.syncs, 2);
        assert!((r.sync_p99_us.unwrap() - 500.0).abs() < 1.0, "{r:?}");
        assert!(
            (r.p50_us - 3.0).abs() < 0.01,
            "syncs are not in the ops' histogram"
        );
        let none = run_threads(1, Bound::Work { cap: None }, |_, _, rec| {
            rec.op(1, 1);
            Ok(())
        })
        .unwrap();
        assert_eq!((none.syncs, none.sync_p50_us), (0, None));
    }

    #[test]
    fn duration_bound_run_stops_workers() {
        let started = Instant::now();
        let r = run_threads(
            2,
            Bound::Duration {
                warmup: Duration::from_millis(20),
                measure: Duration::from_millis(50),
            },
            |_, c, rec| {
                while !c.stopped() {
                    if c.measuring() {
                        rec.op(1, 1);
                    }
                    std::thread::yield_now();
                }
                Ok(())
            },
        )
        .unwrap();
        assert!(r.ops > 0);
        assert!(r.elapsed_secs >= 0.05 && started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn median_is_a_real_run() {
        let run = |ops| RunResult {
            ops,
            elapsed_secs: 1.0,
            ..RunResult::default()
        };
        let (m, all) = median(&[run(5), run(1), run(3)], RunResult::ops_per_sec);
        assert_eq!(m.ops, 3);
        assert_eq!(all, vec![5.0, 1.0, 3.0]);
        assert_eq!(median(&[run(4), run(2)], RunResult::ops_per_sec).0.ops, 2);
    }
}
