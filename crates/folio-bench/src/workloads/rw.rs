//! What `randwrite` and `randrw` share: J jobs of random 4 KiB reads and writes of one
//! file, each job syncing every N of its writes, run the same way through folio (in this
//! process) and through the kernel's page cache (buffered `pread`/`pwrite` + `fdatasync`
//! in a child process of this binary, the hidden `kernel-rw` command, inside a memory
//! cgroup of folio's capacity: equal memory, as `randread` does).
//!
//! Design: the file holds stamped blocks (`stamped`): job j of J writes only its own
//! blocks (b % J == j), each write a new stamp, so every read is checked by the rule
//! (a version once written to that block, or the original) wherever it lands, and folio's
//! file is checked exactly on disk after every run: the blocks written hold the last
//! stamp their job gave them, the others a valid version (the blocks a warm read-through
//! saw hold exactly what it saw). The on-disk check reads the file with O_DIRECT after
//! folio's cache was synced and dropped, outside the clock.
//!
//! A run: optionally a read-through of the whole file first (`Warm::ReadThrough`: the
//! file cached before the clock, every block checked; the kernel child does it inside
//! its cgroup so the pages are charged there), then `warmup_secs` unrecorded and
//! `duration_secs` recorded of the jobs, then one `sync_data`/`fdatasync` outside the
//! clock. Each operation is timed into the run's histogram (reads and writes alike),
//! each sync into its sync histogram; ops and bytes count reads and writes.
//!
//! The kernel may tear a buffered read that races a buffered write of the same page (it
//! copies a cached page without the page lock; POSIX asks otherwise): the child re-reads
//! such a block (up to 3 times) and counts it (`torn_reads_reread`); folio promises
//! untorn pages, so a torn folio read stops the run.
//!
//! Protection: the jobs share only the handles (the systems' own locking), the `Model`
//! (stamped's rule: one writer per block) and a relaxed counter of torn reads.
//!
//! Limits: at most 255 jobs; the file must have at least one block per job. The stamps'
//! turn is 16 bits (65,535 measurements per invocation).

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde_json::{json, Map, Value};

use super::{secs, Env, Report};
use crate::kernel::{self, AlignedBuf};
use crate::measure::{self, Bound, Rng, RunResult};
use crate::stamped::{self, Model, Stamp, BLOCK_BYTES};

/// Bytes of one read of a read-through and of the on-disk check.
const SCAN_BYTES: usize = 1 << 20;

/// Times the kernel child re-reads a block that fails the check before it gives up.
const TORN_REREADS_MAX: u32 = 3;

/// Whether a run first reads the whole file into the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Warm {
    /// Start from a cold cache.
    Cold,
    /// Read the file end to end first (not timed; every block checked).
    ReadThrough,
}

/// The access-pattern advice each job's handle gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum JobAdvice {
    /// None (the default readahead).
    Normal,
    /// `Advice::Random` for folio, `POSIX_FADV_RANDOM` for the kernel (fio's randread does).
    Random,
}

/// What a block that fails the check means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Torn {
    /// An error: the system promised untorn pages (folio).
    Fails,
    /// Re-read it: the kernel's buffered reads may race a write of the page.
    Reread,
}

/// One measurement of the jobs.
#[derive(clap::Args, Clone, Debug)]
pub struct Spec {
    #[arg(long)]
    pub threads: usize,
    /// The stamps' turn: unique per measurement of one invocation (from 1).
    #[arg(long)]
    pub turn: u16,
    #[arg(long)]
    pub warmup_secs: f64,
    #[arg(long)]
    pub duration_secs: f64,
    /// Percent of operations that are reads (the rest are writes).
    #[arg(long)]
    pub read_percent: u32,
    /// Each job syncs after this many of its writes.
    #[arg(long)]
    pub sync_every_writes: u64,
    #[arg(long, value_enum)]
    pub warm: Warm,
    #[arg(long, value_enum)]
    pub advice: JobAdvice,
}

impl Spec {
    /// The file's blocks, checked against what the jobs need.
    fn blocks_of(&self, file_bytes: u64) -> io::Result<u64> {
        let blocks = file_bytes / BLOCK_BYTES as u64;
        if self.threads == 0 || self.threads > 255 || blocks < self.threads as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} jobs over {blocks} blocks: 1 to 255 jobs, at most one per block",
                    self.threads
                ),
            ));
        }
        if file_bytes % BLOCK_BYTES as u64 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a file of {file_bytes} bytes is not whole 4 KiB blocks"),
            ));
        }
        Ok(blocks)
    }

    /// The child's command line for this spec.
    fn child_args(&self, path: &Path) -> Vec<OsString> {
        let value = |v: clap::builder::PossibleValue| v.get_name().to_string().into();
        use clap::ValueEnum;
        vec![
            "kernel-rw".into(),
            "--file".into(),
            path.into(),
            "--threads".into(),
            self.threads.to_string().into(),
            "--turn".into(),
            self.turn.to_string().into(),
            "--warmup-secs".into(),
            self.warmup_secs.to_string().into(),
            "--duration-secs".into(),
            self.duration_secs.to_string().into(),
            "--read-percent".into(),
            self.read_percent.to_string().into(),
            "--sync-every-writes".into(),
            self.sync_every_writes.to_string().into(),
            "--warm".into(),
            value(self.warm.to_possible_value().expect("a named value")),
            "--advice".into(),
            value(self.advice.to_possible_value().expect("a named value")),
        ]
    }
}

/// The jobs of `spec` over a file of `blocks` blocks, through `read`, `write` and `sync`
/// (each given the job's index). Writes are recorded in `model` where given. Returns the
/// run and the torn reads re-read.
///
/// Context: spawns and joins `spec.threads` threads; sleeps in the systems' I/O.
fn run_jobs(
    spec: &Spec,
    blocks: u64,
    model: Option<&Model>,
    torn: Torn,
    read: impl Fn(usize, &mut [u8], u64) -> io::Result<usize> + Sync,
    write: impl Fn(usize, &[u8], u64) -> io::Result<()> + Sync,
    sync: impl Fn(usize) -> io::Result<()> + Sync,
) -> io::Result<(RunResult, u64)> {
    let torn_rereads = AtomicU64::new(0);
    let bound = Bound::Duration {
        warmup: secs(spec.warmup_secs),
        measure: secs(spec.duration_secs),
    };
    let jobs = spec.threads as u8;
    let r = measure::run_threads(spec.threads, bound, |i, c, rec| {
        let job = i as u8;
        let mut rng = Rng::new(u64::from(spec.turn) << 16 | i as u64);
        let mut rbuf = vec![0u8; BLOCK_BYTES];
        let mut wbuf = vec![0u8; BLOCK_BYTES];
        let mut seq = 0u32;
        let mut since_sync = 0u64;
        while !c.stopped() {
            if rng.below(100) < u64::from(spec.read_percent) {
                let block = rng.below(blocks);
                let at = block * BLOCK_BYTES as u64;
                let started = Instant::now();
                let n = read(i, &mut rbuf, at)?;
                let took = started.elapsed();
                if let Err(e) = stamped::check(&rbuf[..n], block, blocks) {
                    match torn {
                        Torn::Fails => return Err(e),
                        Torn::Reread => {
                            reread(&read, i, &mut rbuf, block, blocks, e)?;
                            torn_rereads.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                if c.measuring() {
                    rec.latency(took);
                    rec.op(n as u64, n as u64);
                }
            } else {
                let stamp = Stamp::new(spec.turn, jobs, job, seq);
                seq = seq.checked_add(1).ok_or_else(|| {
                    io::Error::other("more than 2^32 writes in one job: the stamps ran out")
                })?;
                let block = stamp
                    .block(blocks)
                    .expect("every job owns a block (Spec::blocks_of)");
                stamped::fill(&mut wbuf, block, stamp);
                let started = Instant::now();
                write(i, &wbuf, block * BLOCK_BYTES as u64)?;
                let took = started.elapsed();
                if let Some(model) = model {
                    model.set(block, stamp);
                }
                if c.measuring() {
                    rec.latency(took);
                    rec.write_op(BLOCK_BYTES as u64);
                }
                since_sync += 1;
                if since_sync == spec.sync_every_writes {
                    since_sync = 0;
                    let started = Instant::now();
                    sync(i)?;
                    if c.measuring() {
                        rec.sync_latency(started.elapsed());
                    }
                }
            }
        }
        Ok(())
    })?;
    Ok((r, torn_rereads.into_inner()))
}

/// Re-reads a block that failed the check until it passes (a read torn by a racing
/// write), or returns the first error.
fn reread(
    read: &impl Fn(usize, &mut [u8], u64) -> io::Result<usize>,
    job: usize,
    buf: &mut [u8],
    block: u64,
    blocks: u64,
    first: io::Error,
) -> io::Result<()> {
    for _ in 0..TORN_REREADS_MAX {
        let n = read(job, buf, block * BLOCK_BYTES as u64)?;
        if stamped::check(&buf[..n], block, blocks).is_ok() {
            return Ok(());
        }
    }
    Err(first)
}

/// Reads the whole file in 1 MiB reads, checking every block by the rule and recording
/// what each holds in `model` where given. Returns the bytes read.
pub fn read_through(
    mut read: impl FnMut(&mut [u8], u64) -> io::Result<usize>,
    blocks: u64,
    model: Option<&Model>,
) -> io::Result<u64> {
    let mut buf = vec![0u8; SCAN_BYTES];
    let file_bytes = blocks * BLOCK_BYTES as u64;
    let mut at = 0u64;
    while at < file_bytes {
        let want = (file_bytes - at).min(SCAN_BYTES as u64) as usize;
        let n = read(&mut buf[..want], at)?;
        if n != want {
            return Err(io::Error::other(format!(
                "short read of {n} of {want} bytes at {at}"
            )));
        }
        let first = at / BLOCK_BYTES as u64;
        for (i, chunk) in buf[..n].chunks(BLOCK_BYTES).enumerate() {
            let stamp = stamped::check(chunk, first + i as u64, blocks)?;
            if let Some(model) = model {
                model.set(first + i as u64, stamp);
            }
        }
        at += n as u64;
    }
    Ok(at)
}

/// Checks the file on disk against `model` (O_DIRECT reads: not the kernel's cache).
/// Returns the bytes checked.
///
/// Context: reads the whole file; run it after every cache of the file was synced.
pub fn verify_on_disk(path: &Path, model: &Model, blocks: u64) -> io::Result<u64> {
    let file = kernel::open_direct(path)?;
    let len = file.metadata()?.len();
    if len != blocks * BLOCK_BYTES as u64 {
        return Err(io::Error::other(format!(
            "{} is {len} bytes on disk, not {}",
            path.display(),
            blocks * BLOCK_BYTES as u64
        )));
    }
    let mut buf = AlignedBuf::new(SCAN_BYTES);
    let mut at = 0u64;
    while at < len {
        let want = (len - at).min(SCAN_BYTES as u64) as usize;
        let n = file.read_at(&mut buf[..want], at)?;
        if n != want {
            return Err(io::Error::other(format!("short O_DIRECT read at {at}")));
        }
        model
            .check_blocks(&buf[..n], at / BLOCK_BYTES as u64)
            .map_err(|e| io::Error::new(e.kind(), format!("on disk after the run: {e}")))?;
        at += n as u64;
    }
    Ok(at)
}

/// The folio sizes a sample of 64 offsets spread over `file_bytes` sit in: (smallest,
/// largest, share of the sample in 2 MiB folios). The pages are pinned only for the look.
pub fn folio_sizes(file: &folio::File, file_bytes: u64) -> io::Result<(usize, usize, f64)> {
    let (mut min, mut max, mut huge) = (usize::MAX, 0, 0u32);
    for i in 0..64u64 {
        let at = file_bytes / 64 * i;
        let bytes = file.get_page(at)?.len_bytes();
        min = min.min(bytes);
        max = max.max(bytes);
        huge += u32::from(bytes == 2 << 20);
    }
    Ok((min, max, f64::from(huge) / 64.0))
}

/// One folio measurement of `spec` over `path` with a fresh cache of `cache_bytes` (every
/// other option at the library's default), its file checked on disk afterwards.
///
/// Context: reads and writes the file; needs it not cached dirty elsewhere.
pub fn run_folio(env: &Env, path: &Path, spec: &Spec, cache_bytes: u64) -> io::Result<RunResult> {
    let cache = env.folio_cache(cache_bytes)?;
    let open = || cache.open_options().write(true).open(path);
    let first = open()?;
    let file_bytes = first.len();
    let blocks = spec.blocks_of(file_bytes)?;
    let model = Model::unknown(blocks);
    let mut extra = Map::new();
    if spec.warm == Warm::ReadThrough {
        let started = Instant::now();
        read_through(|buf, at| first.read_at(buf, at), blocks, Some(&model))?;
        extra.insert("warm_secs".into(), json!(started.elapsed().as_secs_f64()));
        let (min, max, huge) = folio_sizes(&first, file_bytes)?;
        extra.insert(
            "folio_bytes_sampled".into(),
            json!({"min": min, "max": max, "share_2mib": huge}),
        );
    }
    let mut files = vec![first];
    while files.len() < spec.threads {
        files.push(open()?);
    }
    if spec.advice == JobAdvice::Random {
        for f in &files {
            f.advise(0, 0, folio::Advice::Random)?;
        }
    }
    let before = cache.stats();
    let (mut r, torn) = run_jobs(
        spec,
        blocks,
        Some(&model),
        Torn::Fails,
        |i, buf, at| files[i].read_at(buf, at),
        |i, buf, at| {
            let n = files[i].write_at(buf, at)?;
            check_written(n, buf.len(), at)
        },
        |i| files[i].sync_data(),
    )?;
    debug_assert_eq!(torn, 0);
    let started = Instant::now();
    files[0].sync_data()?;
    extra.insert(
        "final_sync_ms".into(),
        json!(started.elapsed().as_secs_f64() * 1e3),
    );
    let s = cache.stats();
    let written = s.write_bytes - before.write_bytes;
    let written_back = s.writeback_bytes - before.writeback_bytes;
    extra.insert(
        "write_amplification".into(),
        json!(written_back as f64 / written.max(1) as f64),
    );
    extra.insert(
        "folio".into(),
        json!({
            "backend": s.backend, "hits": s.hits - before.hits,
            "misses": s.misses - before.misses,
            "write_bytes": written, "writeback_bytes": written_back,
            "writeback_requests": s.writeback_requests - before.writeback_requests,
            "pages_written_back": s.pages_written_back - before.pages_written_back,
            "writeback_errors": s.writeback_errors - before.writeback_errors,
            "write_copies": s.write_copies - before.write_copies,
            "throttled_writers": s.throttled_writers - before.throttled_writers,
            "throttled_ms": (s.throttled_ns - before.throttled_ns) as f64 / 1e6,
            "syncs": s.syncs - before.syncs,
            "evicted_pages": s.evicted_pages - before.evicted_pages,
            "dirty_pages_after_sync": s.dirty_pages,
        }),
    );
    if s.writeback_errors > before.writeback_errors {
        return Err(io::Error::other(format!(
            "folio: {} writeback errors during the run",
            s.writeback_errors - before.writeback_errors
        )));
    }
    drop(files);
    drop(cache);
    let started = Instant::now();
    let verified = verify_on_disk(path, &model, blocks)?;
    extra.insert("disk_verified_bytes".into(), json!(verified));
    extra.insert("disk_known_blocks".into(), json!(model.known()));
    extra.insert(
        "disk_verify_secs".into(),
        json!(started.elapsed().as_secs_f64()),
    );
    r.extra.extend(extra);
    Ok(r)
}

fn check_written(n: usize, len: usize, at: u64) -> io::Result<()> {
    if n == len {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "a write of {len} bytes at {at} wrote {n}"
        )))
    }
}

/// The kernel side of `spec` over `path`: the child `kernel-rw` inside a memory cgroup of
/// `limit_bytes`. Returns its run and the cgroup's description, or why there was none.
///
/// Context: blocks until the child exits (its warm-up, run and final sync).
pub fn run_kernel(
    path: &Path,
    spec: &Spec,
    limit_bytes: u64,
) -> io::Result<(RunResult, Result<String, String>)> {
    let out = kernel::run_in_cgroup(&spec.child_args(path), limit_bytes)?;
    let mut r: RunResult = serde_json::from_slice(&out.stdout)
        .map_err(|e| io::Error::other(format!("kernel-rw child output: {e}")))?;
    if let Some(peak) = out.cgroup_peak_bytes {
        r.extra.insert("cgroup_peak_bytes".into(), json!(peak));
    }
    Ok((r, out.cgroup))
}

/// Options of the hidden `kernel-rw` command.
#[derive(clap::Args, Debug, Clone)]
pub struct ChildArgs {
    #[arg(long)]
    pub file: PathBuf,
    #[command(flatten)]
    pub spec: Spec,
}

/// The child: waits for "go" on stdin (the parent has placed it in the cgroup by then),
/// warms the file if asked, runs the jobs with buffered `pread`/`pwrite` and `fdatasync`,
/// syncs once more, and prints its `RunResult` as JSON on stdout.
pub fn child_main(args: &ChildArgs) -> io::Result<()> {
    let mut line = String::new();
    io::stdin().lock().read_line(&mut line)?;
    let spec = &args.spec;
    let open = || OpenOptions::new().read(true).write(true).open(&args.file);
    let first = open()?;
    let blocks = spec.blocks_of(first.metadata()?.len())?;
    let mut extra = Map::new();
    if spec.warm == Warm::ReadThrough {
        let started = Instant::now();
        read_through(|buf, at| first.read_at(buf, at), blocks, None)?;
        extra.insert("warm_secs".into(), json!(started.elapsed().as_secs_f64()));
        let r = kernel::resident_pages(&args.file)?;
        extra.insert(
            "resident_after_warm".into(),
            json!(r.resident as f64 / r.total.max(1) as f64),
        );
    }
    let mut files: Vec<File> = vec![first];
    while files.len() < spec.threads {
        files.push(open()?);
    }
    if spec.advice == JobAdvice::Random {
        for f in &files {
            kernel::fadvise(f, 0, 0, libc::POSIX_FADV_RANDOM)?;
        }
    }
    let written_before = kernel::proc_self_io("write_bytes");
    let (mut r, torn) = run_jobs(
        spec,
        blocks,
        None,
        Torn::Reread,
        |i, buf, at| files[i].read_at(buf, at),
        |i, buf, at| files[i].write_all_at(buf, at),
        |i| files[i].sync_data(),
    )?;
    let started = Instant::now();
    files[0].sync_data()?;
    extra.insert(
        "final_sync_ms".into(),
        json!(started.elapsed().as_secs_f64() * 1e3),
    );
    extra.insert("torn_reads_reread".into(), json!(torn));
    if let (Some(before), Some(after)) = (written_before, kernel::proc_self_io("write_bytes")) {
        extra.insert("proc_io_write_bytes".into(), json!(after - before));
    }
    r.extra.extend(extra);
    let json = serde_json::to_string(&r).map_err(io::Error::other)?;
    println!("{json}");
    Ok(())
}

/// Where the kernel ran: in a cgroup (at equal memory) or not, over a workload's turns.
#[derive(Debug, Default)]
pub struct EqualMemory {
    used: Option<String>,
    problem: Option<String>,
}

impl EqualMemory {
    /// Notes one kernel turn's cgroup (or why it had none).
    pub fn record(&mut self, cgroup: Result<String, String>) {
        match cgroup {
            Ok(name) => self.used = Some(name),
            Err(why) => self.problem = Some(why),
        }
    }

    /// Whether every kernel turn ran limited.
    pub fn held(&self) -> bool {
        self.problem.is_none() && self.used.is_some()
    }

    /// The report's `kernel_memory_limit_bytes` and its note.
    pub fn describe(&self, report: &mut Report, limit_bytes: u64) {
        match (&self.problem, &self.used) {
            (None, Some(name)) => {
                report.param("kernel_memory_limit_bytes", limit_bytes);
                report.note(format!(
                    "kernel: a child process of this binary in {name}, limited to {} MiB \
                     (page cache and the child's own memory); folio: a cache of the same size",
                    limit_bytes >> 20
                ));
            }
            (Some(why), _) => {
                report.param("kernel_memory_limit_bytes", Value::Null);
                report.note(format!(
                    "kernel: NO memory cgroup could be made ({why}); the kernel ran with \
                     all the machine's memory, NOT at equal memory"
                ));
            }
            (None, None) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(threads: usize, read_percent: u32) -> Spec {
        Spec {
            threads,
            turn: 1,
            warmup_secs: 0.0,
            duration_secs: 0.05,
            read_percent,
            sync_every_writes: 10,
            warm: Warm::Cold,
            advice: JobAdvice::Normal,
        }
    }

    /// The jobs over an in-memory file: every write lands where its stamp says, reads
    /// check, the model ends equal to the file, and syncs come every N writes per job.
    #[test]
    fn jobs_write_their_own_blocks_and_the_model_follows() {
        let blocks = 64u64;
        let mut mem = vec![0u8; blocks as usize * BLOCK_BYTES];
        crate::data::fill(&mut mem, 0);
        let file = std::sync::Mutex::new(mem);
        let syncs = AtomicU64::new(0);
        let model = Model::unknown(blocks);
        let s = spec(4, 50);
        let (r, torn) = run_jobs(
            &s,
            blocks,
            Some(&model),
            Torn::Fails,
            |_, buf, at| {
                let f = file.lock().unwrap();
                buf.copy_from_slice(&f[at as usize..at as usize + buf.len()]);
                Ok(buf.len())
            },
            |_, buf, at| {
                file.lock().unwrap()[at as usize..at as usize + buf.len()].copy_from_slice(buf);
                Ok(())
            },
            |_| {
                syncs.fetch_add(1, Ordering::Relaxed);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(torn, 0);
        assert!(r.bytes_written > 0 && r.bytes_read > 0, "{r:?}");
        assert_eq!(r.bytes_read, r.bytes_verified);
        assert!(syncs.load(Ordering::Relaxed) >= r.syncs);
        let file = file.into_inner().unwrap();
        assert_eq!(model.check_blocks(&file, 0).unwrap(), file.len() as u64);
        assert!(model.known() > 0);
    }

    /// A write path that loses writes is caught by the model; a torn folio read stops
    /// the jobs.
    #[test]
    fn lost_writes_and_torn_reads_are_caught() {
        let blocks = 32u64;
        let mut mem = vec![0u8; blocks as usize * BLOCK_BYTES];
        crate::data::fill(&mut mem, 0);
        let model = Model::unknown(blocks);
        run_jobs(
            &spec(2, 0),
            blocks,
            Some(&model),
            Torn::Fails,
            |_, _, _| unreachable!("no reads"),
            |_, _, _| Ok(()), // drops every write
            |_| Ok(()),
        )
        .unwrap();
        assert!(model.check_blocks(&mem, 0).is_err());
        let err = run_jobs(
            &spec(1, 100),
            blocks,
            None,
            Torn::Fails,
            |_, buf, _| {
                buf.fill(0xee);
                Ok(buf.len())
            },
            |_, _, _| Ok(()),
            |_| Ok(()),
        )
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    }

    #[test]
    fn the_child_command_line_parses_back_to_the_spec() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(subcommand)]
            command: Command,
        }
        #[derive(clap::Subcommand)]
        enum Command {
            KernelRw(ChildArgs),
        }
        let mut s = spec(16, 70);
        s.warm = Warm::ReadThrough;
        s.advice = JobAdvice::Random;
        let mut argv: Vec<OsString> = vec!["folio-bench".into()];
        argv.extend(s.child_args(Path::new("/x/y.dat")));
        let Command::KernelRw(back) = Cli::parse_from(argv).command;
        assert_eq!(back.file, Path::new("/x/y.dat"));
        assert_eq!(format!("{:?}", back.spec), format!("{s:?}"));
    }
}
