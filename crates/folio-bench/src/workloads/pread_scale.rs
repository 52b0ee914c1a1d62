//! `pread-scale` (seed 004): N threads read 64 bytes at offset 0 of one cached file, as
//! fast as they can. It measures the cost of a cache hit and how it scales with threads:
//! the kernel's `pread` takes a reference on the folio with an atomic on a shared cache
//! line; folio's `read_at` copies under an optimistic version check with no atomic
//! read-modify-write; `folio-pinned` (`get_page` + copy) takes the reference path.
//!
//! Systems: `folio` (`File::read_at`), `folio-pinned` (`File::get_page`, copy 64 B, drop),
//! `folio-async` (`File::read_at_async`, polled on the reading thread with a no-op
//! waker: a hit is ready on the first poll; one that is not would wait on a thread
//! waker), `kernel` (`pread(2)` on a buffered descriptor of the warm file).
//!
//! Design: one 64 KiB data file; folio reads it once before measuring (a cached file);
//! the kernel's copy is warmed right before each run (`Env::warm`, checked 100% resident
//! by mincore) because this machine pages out idle page cache. Every read's 64 bytes are
//! verified. One operation in `SAMPLE_EVERY` is timed (a clock read costs about as much
//! as the hit itself); the first 10% of each run is an unrecorded warm-up.
//!
//! Limits: with 2 cores, more than 2 threads measures time-slicing, not scaling.

use std::fs::File;
use std::future::Future;
use std::io;
use std::os::unix::fs::FileExt;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use super::{measure_systems, secs, threads_or, Env, Metric, Report, System, Target, Workload};
use crate::data;
use crate::kernel;
use crate::measure::{self, Bound, Control, Phase, Recorder, SAMPLE_EVERY};

/// Bytes each read asks for.
pub const READ_BYTES: usize = 64;
const FILE_BYTES: u64 = 64 << 10;
const SYSTEMS: [System; 4] = [
    System::Folio,
    System::FolioPinned,
    System::FolioAsync,
    System::Kernel,
];

#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// Thread counts, comma-separated [default: 1,2]
    #[arg(long, value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// Seconds measured per run [default: 2; --quick 0.5]
    #[arg(long)]
    pub duration_secs: Option<f64>,
}

impl Workload for Args {
    fn name(&self) -> &'static str {
        "pread-scale"
    }

    fn run(&self, env: &Env) -> io::Result<Report> {
        let threads = threads_or(&self.threads, &[1, 2]);
        let duration = self.duration_secs.unwrap_or(env.scale.pick(0.5, 2.0));
        let bound = Bound::Duration {
            warmup: secs(duration / 10.0),
            measure: secs(duration),
        };
        let path = env.data_file("pread-scale.dat", FILE_BYTES)?;
        let mut report = Report::new(self.name(), Metric::OpsPerSec);
        report.param("threads", threads.clone());
        report.param("read_bytes", READ_BYTES);
        report.param("offset_bytes", 0);
        report.param("file_bytes", FILE_BYTES);
        report.param("duration_secs", duration);
        report.param("runs", env.runs);
        report.param("latency_sampled_one_in", SAMPLE_EVERY);

        let cache = env.folio_cache(16 << 20)?;
        let file = Arc::new(cache.open(&path)?);
        let mut first = [0u8; READ_BYTES];
        file.read_at(&mut first, 0)?;
        data::verify(&first, 0)?;
        let kernel_file = File::open(&path)?;

        measure_systems(env, &mut report, &SYSTEMS, &threads, |turn| {
            let t = turn.threads;
            Ok(match turn.system {
                System::Folio => measure::run_threads(t, bound, |_, c, rec| {
                    hammer(c, rec, |buf| file.read_at(buf, 0))
                })?,
                System::FolioPinned => measure::run_threads(t, bound, |_, c, rec| {
                    hammer(c, rec, |buf| {
                        let page = file.get_page(0)?;
                        buf.copy_from_slice(&page[..READ_BYTES]);
                        Ok(READ_BYTES)
                    })
                })?,
                System::FolioAsync => measure::run_threads(t, bound, |_, c, rec| {
                    hammer(c, rec, |buf| block_on(file.read_at_async(buf, 0)))
                })?,
                System::Kernel => {
                    let _warm = kernel::warm(std::slice::from_ref(&path), env.warm)?;
                    measure::run_threads(t, bound, |_, c, rec| {
                        hammer(c, rec, |buf| kernel_file.read_at(buf, 0))
                    })?
                }
                other => unreachable!("pread-scale measures no {other}"),
            })
        })?;
        report.note(format!("kernel: {}", env.warm.describe()));
        report.note("folio: one 16 MiB cache; the file is read once before measuring");
        report.targets.push(Target::at_least(
            "pread-scale 1 thread: folio / kernel ops/s",
            report.ratio(System::Folio, 1),
            10.0,
        ));
        let own = match (report.row(System::Folio, 2), report.row(System::Folio, 1)) {
            (Some(two), Some(one)) if one.ops_per_sec > 0.0 => {
                Some(two.ops_per_sec / one.ops_per_sec)
            }
            _ => None,
        };
        if own.is_some() {
            report.targets.push(Target::at_least(
                "pread-scale 2 threads: folio / folio at 1 thread",
                own,
                1.8,
            ));
        }
        for t in &threads {
            let ratio = match (
                report.row(System::FolioAsync, *t as u32),
                report.row(System::Folio, *t as u32),
            ) {
                (Some(a), Some(f)) if f.ops_per_sec > 0.0 => Some(a.ops_per_sec / f.ops_per_sec),
                _ => None,
            };
            if ratio.is_some() {
                report.targets.push(Target::at_least(
                    format!("pread-scale {t} threads: folio-async / folio ops/s (hits)"),
                    ratio,
                    0.8,
                ));
            }
        }
        report.limits = env.limits()?;
        Ok(report)
    }
}

/// Polls `fut` to completion on this thread: first with a no-op waker (a hit is ready
/// at once, as an executor's first poll finds it), then, if it is pending, parking the
/// thread until its waker unparks it.
fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    if let Poll::Ready(out) = fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        return out;
    }
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

/// Reads 64 B at offset 0 through `read` until stopped, verifying every read; times the
/// first of every `SAMPLE_EVERY` reads.
fn hammer(
    control: &Control,
    rec: &mut Recorder,
    mut read: impl FnMut(&mut [u8]) -> io::Result<usize>,
) -> io::Result<()> {
    let mut buf = [0u8; READ_BYTES];
    while !control.stopped() {
        let phase = control.phase();
        let started = Instant::now();
        one(&mut read, &mut buf, rec, phase)?;
        if phase == Phase::Measure {
            rec.latency(started.elapsed());
        }
        for _ in 1..SAMPLE_EVERY {
            one(&mut read, &mut buf, rec, phase)?;
        }
    }
    Ok(())
}

#[inline(always)]
fn one(
    read: &mut impl FnMut(&mut [u8]) -> io::Result<usize>,
    buf: &mut [u8; READ_BYTES],
    rec: &mut Recorder,
    phase: Phase,
) -> io::Result<()> {
    let n = read(buf)?;
    if n != READ_BYTES {
        return Err(io::Error::other(format!(
            "short read of {n} bytes at offset 0"
        )));
    }
    let verified = data::verify(buf, 0)?;
    if phase == Phase::Measure {
        rec.op(n as u64, verified);
    }
    Ok(())
}
