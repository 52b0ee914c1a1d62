//! `limits`: the machine's ceilings, measured in the same run as the workloads they bound.
//! A cache hit cannot be faster than copying the bytes (`memcpy`); a miss cannot be
//! faster than the disk read with O_DIRECT at a deep queue (`odirect-qd32`). This is a
//! measurement tool, not the cache: it talks to the kernel directly.
//!
//! Systems: `memcpy` (one thread copies 8 KiB blocks out of a large buffer into a small
//! one: the per-thread ceiling of a hit), `odirect-qd32` (one thread keeps `--queue-depth`
//! O_DIRECT reads of `--block-kib` in flight through io_uring, or through a pool of
//! `--queue-depth` threads calling `pread` where io_uring is refused), and, for the same
//! cold sequential read with the same 1 MiB requests, `kernel` (buffered `pread`) and
//! `folio` (`File::read_at`): how close each cache gets to the device with large reads.
//!
//! Design: every byte read from the file is verified (on the submitting thread, while
//! the other reads are in flight); the copies of `memcpy` are not reads of the file and
//! are not verified (checking them would halve the ceiling being measured). One copy in
//! `SAMPLE_EVERY` is timed. `Limits` (memcpy GB/s, O_DIRECT MB/s, medians of the runs)
//! are what every other workload's JSON carries.
//!
//! Limits: a virtio disk's host may cache what it served (repeated runs can get faster);
//! `memcpy` is one thread, not the memory bus.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde_json::json;

use super::{mib, secs, Env, Limits, Metric, Report, Row, Scale, System, Workload};
use crate::data;
use crate::kernel::{self, AlignedBuf};
use crate::measure::{self, Bound, RunResult, SAMPLE_EVERY};

const COPY_BYTES: usize = 8192;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// MiB of the file read with O_DIRECT [default: 512; --quick 128]
    #[arg(long)]
    pub file_mib: Option<u64>,
    /// KiB per O_DIRECT read [default: 1024]
    #[arg(long)]
    pub block_kib: Option<u64>,
    /// O_DIRECT reads in flight [default: 32]
    #[arg(long)]
    pub queue_depth: Option<usize>,
    /// MiB of the buffer memcpy copies out of [default: 1024; --quick 256]
    #[arg(long)]
    pub memcpy_mib: Option<u64>,
    /// Seconds of memcpy per run [default: 1; --quick 0.3]
    #[arg(long)]
    pub memcpy_secs: Option<f64>,
}

struct Resolved {
    file_bytes: u64,
    block_bytes: usize,
    queue_depth: usize,
    memcpy_bytes: u64,
    memcpy_secs: f64,
}

impl Args {
    fn resolve(&self, scale: Scale) -> Resolved {
        Resolved {
            file_bytes: mib(self.file_mib.unwrap_or(scale.pick(128, 512))),
            block_bytes: (self.block_kib.unwrap_or(1024).max(4) << 10) as usize,
            queue_depth: self.queue_depth.unwrap_or(32).max(1),
            memcpy_bytes: mib(self.memcpy_mib.unwrap_or(scale.pick(256, 1024))).max(1 << 20),
            memcpy_secs: self.memcpy_secs.unwrap_or(scale.pick(0.3, 1.0)),
        }
    }
}

impl Workload for Args {
    fn name(&self) -> &'static str {
        "limits"
    }

    fn run(&self, env: &Env) -> io::Result<Report> {
        let p = self.resolve(env.scale);
        let path = env.data_file("limits.dat", p.file_bytes)?;
        let mut report = Report::new(self.name(), Metric::MbPerSec);
        params(&mut report, &p);
        let systems = [
            System::Memcpy,
            System::ODirectQd32,
            System::Folio,
            System::Kernel,
        ];
        let bar = env.bar(self.name(), (env.runs * systems.len()) as u64);
        let mut runs: Vec<Vec<RunResult>> = vec![Vec::new(); systems.len()];
        let mut odirect_engine = "";
        for run in 0..env.runs {
            for (si, system) in systems.iter().enumerate() {
                bar.set_message(format!("{system} run {}/{}", run + 1, env.runs));
                let r = match *system {
                    System::Memcpy => memcpy(&p)?,
                    System::ODirectQd32 => {
                        let (r, engine) = odirect(&path, &p)?;
                        odirect_engine = engine;
                        r
                    }
                    System::Folio => {
                        kernel::make_cold(std::slice::from_ref(&path), env.cold)?;
                        let cache = env.folio_cache(p.file_bytes + (32 << 20))?;
                        let file = cache.open(&path)?;
                        let mut r =
                            sequential(p.block_bytes, p.file_bytes, |b, at| file.read_at(b, at))?;
                        r.pages_inserted = Some(cache.stats().pages_inserted);
                        r
                    }
                    System::Kernel => {
                        kernel::make_cold(std::slice::from_ref(&path), env.cold)?;
                        let file = File::open(&path)?;
                        let mut r =
                            sequential(p.block_bytes, p.file_bytes, |b, at| file.read_at(b, at))?;
                        r.pages_inserted = Some(kernel::resident_pages(&path)?.resident);
                        r
                    }
                    other => unreachable!("limits measures no {other}"),
                };
                runs[si].push(r);
                bar.inc(1);
            }
        }
        bar.finish_and_clear();
        for (si, &system) in systems.iter().enumerate() {
            let row = Row::from_runs(system, 1, &runs[si], report.ratio_of);
            report.rows.push(row);
        }
        report.fill_ratios();
        let limits = Limits {
            memcpy_gb_per_sec: report.rows[0].mb_per_sec / 1000.0,
            odirect_seq_mb_per_sec: report.rows[1].mb_per_sec,
        };
        env.set_limits(limits);
        report.limits = limits;
        report.note(format!(
            "odirect-qd32: {odirect_engine}, {} KiB reads, {} in flight, every byte verified",
            p.block_bytes >> 10,
            p.queue_depth
        ));
        report.note("memcpy: one thread, 8 KiB copies out of the buffer in order; copies are not verified (not file reads)");
        report.note(format!(
            "folio and kernel: one thread, cold sequential {} KiB reads; cold: {}",
            p.block_bytes >> 10,
            env.cold.describe()
        ));
        Ok(report)
    }
}

fn params(report: &mut Report, p: &Resolved) {
    report.param("file_bytes", p.file_bytes);
    report.param("block_bytes", p.block_bytes);
    report.param("queue_depth", p.queue_depth);
    report.param("memcpy_buffer_bytes", p.memcpy_bytes);
    report.param("memcpy_copy_bytes", COPY_BYTES);
    report.param("memcpy_secs", p.memcpy_secs);
}

/// The ceilings alone (memcpy and O_DIRECT, medians of `env.runs`), for the other
/// workloads' reports.
pub fn measure_ceilings(env: &Env, args: &Args) -> io::Result<Limits> {
    let p = args.resolve(env.scale);
    let path = env.data_file("limits.dat", p.file_bytes)?;
    let bar = env.bar("limits", (env.runs * 2) as u64);
    let (mut copies, mut reads) = (Vec::new(), Vec::new());
    for run in 0..env.runs {
        bar.set_message(format!("memcpy run {}/{}", run + 1, env.runs));
        copies.push(memcpy(&p)?);
        bar.inc(1);
        bar.set_message(format!("odirect-qd32 run {}/{}", run + 1, env.runs));
        reads.push(odirect(&path, &p)?.0);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(Limits {
        memcpy_gb_per_sec: measure::median(&copies, RunResult::mb_per_sec)
            .0
            .mb_per_sec()
            / 1000.0,
        odirect_seq_mb_per_sec: measure::median(&reads, RunResult::mb_per_sec)
            .0
            .mb_per_sec(),
    })
}

fn memcpy(p: &Resolved) -> io::Result<RunResult> {
    let mut src = vec![0u8; p.memcpy_bytes as usize];
    data::fill(&mut src, 0);
    let blocks = src.len() / COPY_BYTES;
    let bound = Bound::Duration {
        warmup: secs(p.memcpy_secs / 10.0),
        measure: secs(p.memcpy_secs),
    };
    let mut r = measure::run_threads(1, bound, |_, c, rec| {
        let mut dst = vec![0u8; COPY_BYTES];
        let mut block = 0usize;
        while !c.stopped() {
            let measuring = c.measuring();
            let started = Instant::now();
            for k in 0..SAMPLE_EVERY {
                let at = block * COPY_BYTES;
                dst.copy_from_slice(&src[at..at + COPY_BYTES]);
                std::hint::black_box(&mut dst);
                if k == 0 && measuring {
                    rec.latency(started.elapsed());
                }
                if measuring {
                    rec.op(0, 0);
                }
                block = if block + 1 == blocks { 0 } else { block + 1 };
            }
        }
        Ok(())
    })?;
    r.bytes_moved = Some(r.ops * COPY_BYTES as u64);
    Ok(r)
}

/// One thread reads the file from start to end in `block` reads through `read`,
/// verifying every byte.
fn sequential(
    block: usize,
    file_bytes: u64,
    read: impl Fn(&mut [u8], u64) -> io::Result<usize> + Sync,
) -> io::Result<RunResult> {
    measure::run_threads(1, Bound::Work { cap: None }, |_, _, rec| {
        let mut buf = vec![0u8; block];
        let mut at = 0u64;
        while at < file_bytes {
            let started = Instant::now();
            let n = read(&mut buf, at)?;
            if n == 0 {
                break;
            }
            rec.latency(started.elapsed());
            rec.op(n as u64, data::verify(&buf[..n], at)?);
            at += n as u64;
        }
        Ok(())
    })
}

/// O_DIRECT sequential reads at queue depth: io_uring, else a pool of pread threads.
/// Returns the run and the engine used.
fn odirect(path: &Path, p: &Resolved) -> io::Result<(RunResult, &'static str)> {
    let file = kernel::open_direct(path)?;
    match io_uring::IoUring::new(p.queue_depth.next_power_of_two() as u32) {
        Ok(ring) => Ok((odirect_uring(ring, &file, p)?, "io_uring")),
        Err(_) => Ok((
            odirect_pool(&file, p)?,
            "pread thread pool (io_uring refused)",
        )),
    }
}

/// The reads in flight: one aligned buffer per slot, its file offset and start time.
struct Slots {
    bufs: Vec<AlignedBuf>,
    offsets: Vec<u64>,
    started: Vec<Instant>,
}

fn odirect_uring(mut ring: io_uring::IoUring, file: &File, p: &Resolved) -> io::Result<RunResult> {
    use io_uring::{opcode, types};
    let len = file.metadata()?.len();
    let depth = p.queue_depth;
    let block = p.block_bytes;
    let fd = types::Fd(file.as_raw_fd());
    let mut slots = Slots {
        bufs: (0..depth).map(|_| AlignedBuf::new(block)).collect(),
        offsets: vec![0; depth],
        started: vec![Instant::now(); depth],
    };
    // Queues the read of the next block into `slot`; false at the end of the file.
    let submit = |ring: &mut io_uring::IoUring,
                  slots: &mut Slots,
                  slot: usize,
                  next: &mut u64|
     -> io::Result<bool> {
        if *next >= len {
            return Ok(false);
        }
        slots.offsets[slot] = *next;
        slots.started[slot] = Instant::now();
        let sqe = opcode::Read::new(fd, slots.bufs[slot].as_mut_ptr(), block as u32)
            .offset(*next)
            .build()
            .user_data(slot as u64);
        // SAFETY: the buffer of `slot` lives in `slots`, which outlives the ring's use
        // (the loop below reaps every completion before returning), and nothing touches
        // it until the completion for `slot` is reaped: a slot is only resubmitted after.
        unsafe { ring.submission().push(&sqe) }
            .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        *next += block as u64;
        Ok(true)
    };
    let mut r = measure::run_here(|rec| {
        let mut next = 0u64;
        let mut in_flight = 0usize;
        let mut pump = || -> io::Result<()> {
            for slot in 0..depth {
                in_flight += usize::from(submit(&mut ring, &mut slots, slot, &mut next)?);
            }
            while in_flight > 0 {
                wait_one(&ring)?;
                let done: Vec<(u64, i32)> = ring
                    .completion()
                    .map(|c| (c.user_data(), c.result()))
                    .collect();
                for (slot, res) in done {
                    let slot = slot as usize;
                    in_flight -= 1;
                    if res < 0 {
                        return Err(io::Error::from_raw_os_error(-res));
                    }
                    let n = res as usize;
                    let at = slots.offsets[slot];
                    rec.latency(slots.started[slot].elapsed());
                    rec.op(n as u64, data::verify(&slots.bufs[slot][..n], at)?);
                    if n < block && at + (n as u64) < len {
                        return Err(io::Error::other(format!("short O_DIRECT read at {at}")));
                    }
                    in_flight += usize::from(submit(&mut ring, &mut slots, slot, &mut next)?);
                }
            }
            Ok(())
        };
        let outcome = pump();
        // On an error, reap every read still in flight before the buffers can go.
        while in_flight > 0 {
            wait_one(&ring)?;
            in_flight -= ring.completion().count();
        }
        outcome
    })?;
    r.extra.insert("queue_depth".into(), json!(depth));
    Ok(r)
}

/// Submits what is queued and waits for one completion, retrying when interrupted.
fn wait_one(ring: &io_uring::IoUring) -> io::Result<()> {
    loop {
        match ring.submit_and_wait(1) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other.map(|_| ()),
        }
    }
}

fn odirect_pool(file: &File, p: &Resolved) -> io::Result<RunResult> {
    let len = file.metadata()?.len();
    let next = AtomicU64::new(0);
    let mut r = measure::run_threads(p.queue_depth, Bound::Work { cap: None }, |_, _, rec| {
        let mut buf = AlignedBuf::new(p.block_bytes);
        loop {
            let at = next.fetch_add(p.block_bytes as u64, Ordering::Relaxed);
            if at >= len {
                return Ok(());
            }
            let started = Instant::now();
            let n = file.read_at(&mut buf[..p.block_bytes], at)?;
            rec.latency(started.elapsed());
            rec.op(n as u64, data::verify(&buf[..n], at)?);
        }
    })?;
    r.extra.insert("queue_depth".into(), json!(p.queue_depth));
    Ok(r)
}
