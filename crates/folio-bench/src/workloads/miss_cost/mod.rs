//! `miss-cost` (issue 33): what one miss and one hit cost the CPU, beside a direct read of
//! the same block and the kernel's page cache. One thread reads `--misses` distinct random
//! 4 KiB blocks of a cold file, then `--hits` random 64 B reads of the blocks it has just
//! read, and the process's own accounts say what each read cost: wall time, the reading
//! thread's user and system time, the whole process's CPU (folio's background threads
//! included: its populator zeroing fresh pages, its reclaimer), and context switches,
//! voluntary and not, of the thread and of the process (`getrusage`).
//!
//! Systems:
//! - `direct`: `pread` with O_DIRECT into an aligned buffer: the floor a miss is measured
//!   against (a storage engine's own direct reads).
//! - `kernel`: buffered `pread`, the file advised `POSIX_FADV_RANDOM` (what RocksDB does
//!   with a table file), from a cold page cache.
//! - `folio`: a fresh cache (every option at the library's default; the capacity the file
//!   plus 64 MiB, so nothing is evicted), the file advised `Advice::Random`: every miss
//!   takes a page of fresh memory.
//! - `folio-full`: a cache of `--full-cache-mib`, filled before the clock by reading other
//!   blocks of the file, so that every measured miss evicts a page and reuses its memory:
//!   the steady state of a cache smaller than its data, with no first touch.
//!
//! Instructions: with `--callgrind auto` (the default) and `valgrind` on PATH, this same
//! binary's hidden `miss-cost-probe` runs each system's reads again under
//! `valgrind --tool=callgrind --toggle-collect=...`, which counts the instructions (user
//! space only: the kernel's are not seen) executed inside the one function that does a
//! miss (`read_miss`) or a hit (`read_hit`), and nothing else (the verification runs
//! outside them). Hardware counters are not needed.
//!
//! Design: each miss lands in its own 4 KiB slot of a landing buffer faulted in before
//! the clock, and every slot is verified against the file after the clock stops: every
//! byte read is checked, and the check costs none of the measured time. The timed hits
//! fold their 64 bytes into a sum; an untimed pass then reads the same offsets again,
//! verifies each and must reach the same sum. Rounds (`--runs`) rotate the systems'
//! order; rows are each system's median round by misses per second, and every per-miss
//! figure is the median of the rounds' figures.
//!
//! Limits: a round is one thread, on purpose: a lone synchronous miss. A virtio disk's host
//! may cache blocks it served (the file is larger than any round reads, and each round
//! reads blocks from a fresh random permutation). `ru_nvcsw` counts every sleep, a futex
//! wait as much as a disk wait. Callgrind serializes the threads and slows them ~50x:
//! its runs count instructions only, never time.

mod probe;

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{json, Map, Value};

use super::{mib, Env, Metric, Report, Row, System, Target, Workload};
use crate::data;
use crate::kernel::{self, AlignedBuf};
use crate::measure::{lower_median, Rng, RunResult};
use probe::{count_instructions, valgrind_on_path};
pub use probe::{probe_main, ProbeArgs};

/// Bytes of one miss (a storage engine's small block, the page size).
pub const MISS_BYTES: usize = 4096;
/// Bytes of one hit (pread-scale's read: a key or a small record).
pub const HIT_BYTES: usize = 64;

/// At most this many instructions for a 64 B hit, its copy included (issue 33).
pub const HIT_INSTRUCTIONS_MAX: f64 = 250.0;
/// folio's CPU per miss, all threads, at most this much above direct reads' (issue 33).
pub const CPU_ABOVE_DIRECT_MAX_US: f64 = 1.0;

const SYSTEMS: [System; 4] = [
    System::Direct,
    System::Kernel,
    System::Folio,
    System::FolioFull,
];

/// Whether the instructions are counted under callgrind.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Callgrind {
    /// Where `valgrind` is on PATH (the report says when it is not).
    #[default]
    Auto,
    Off,
}

#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// MiB of the data file [default: 2048; --quick 256]
    #[arg(long)]
    pub file_mib: Option<u64>,
    /// Distinct 4 KiB blocks read per round (each a miss) [default: 20000; --quick 2000]
    #[arg(long)]
    pub misses: Option<u64>,
    /// 64 B hits per round [default: 1000000; --quick 100000]
    #[arg(long)]
    pub hits: Option<u64>,
    /// MiB of folio-full's cache (filled before the clock) [default: 64]
    #[arg(long)]
    pub full_cache_mib: Option<u64>,
    /// Count instructions per miss and hit under valgrind's callgrind
    #[arg(long, value_enum, default_value_t = Callgrind::Auto)]
    pub callgrind: Callgrind,
}

impl Workload for Args {
    fn name(&self) -> &'static str {
        "miss-cost"
    }

    fn run(&self, env: &Env) -> io::Result<Report> {
        run(self, env)
    }
}

/// What one round asks of one system.
#[derive(Clone, Debug)]
pub struct Plan {
    pub path: PathBuf,
    /// The blocks read as misses, in order (distinct).
    pub misses: Vec<u64>,
    /// Blocks read before the clock to fill folio-full's cache (none of `misses`).
    pub fill: Vec<u64>,
    /// Offsets of the hits (within the last blocks of `misses`, which are cached).
    pub hits: Vec<u64>,
    pub file_bytes: u64,
    pub full_cache_bytes: u64,
}

impl Plan {
    /// A round's blocks from a permutation of the file's blocks seeded by `seed`.
    pub fn new(
        path: &Path,
        file_bytes: u64,
        misses: u64,
        hits: u64,
        full_cache_bytes: u64,
        seed: u64,
    ) -> Plan {
        let blocks = file_bytes / MISS_BYTES as u64;
        // The fill: a quarter more than the cache holds, so that it is full and evicting.
        let fill_blocks = full_cache_bytes / MISS_BYTES as u64 * 5 / 4;
        let wanted = (misses + fill_blocks).min(blocks);
        let mut rng = Rng::new(seed);
        let mut order: Vec<u64> = (0..blocks).collect();
        for i in 0..wanted as usize {
            let j = i + rng.below(blocks - i as u64) as usize;
            order.swap(i, j);
        }
        let misses = misses.min(wanted) as usize;
        let miss_blocks = order[..misses].to_vec();
        let fill = order[misses..wanted as usize].to_vec();
        // Hits land in the blocks read last: a full cache still holds them.
        let recent = miss_blocks
            .len()
            .min((full_cache_bytes / MISS_BYTES as u64 / 2) as usize);
        let recent = &miss_blocks[miss_blocks.len() - recent.max(1)..];
        let hits = (0..hits)
            .map(|_| {
                let block = recent[rng.below(recent.len() as u64) as usize];
                block * MISS_BYTES as u64
                    + rng.below((MISS_BYTES / HIT_BYTES) as u64) * HIT_BYTES as u64
            })
            .collect();
        Plan {
            path: path.to_path_buf(),
            misses: miss_blocks,
            fill,
            hits,
            file_bytes,
            full_cache_bytes,
        }
    }
}

/// One system's reader. One per system, so its size does not matter; a boxed folio
/// handle would add a load to every read the probe counts.
#[allow(clippy::large_enum_variant)]
enum Reader {
    Direct(File),
    Kernel(File),
    Folio {
        file: folio::File,
        cache: folio::Cache,
    },
}

impl Reader {
    /// Opens `system`'s reader; folio-full's cache is filled before this returns.
    fn open(env: &Env, system: System, plan: &Plan) -> io::Result<Reader> {
        match system {
            System::Direct => Ok(Reader::Direct(kernel::open_direct(&plan.path)?)),
            System::Kernel => {
                let file = File::open(&plan.path)?;
                kernel::fadvise(&file, 0, 0, libc::POSIX_FADV_RANDOM)?;
                Ok(Reader::Kernel(file))
            }
            System::Folio | System::FolioFull => {
                let capacity = if system == System::Folio {
                    plan.file_bytes + mib(64)
                } else {
                    plan.full_cache_bytes
                };
                let cache = env.folio_cache(capacity)?;
                let file = cache.open(&plan.path)?;
                file.advise(0, 0, folio::Advice::Random)?;
                let reader = Reader::Folio { file, cache };
                if system == System::FolioFull {
                    let mut buf = vec![0u8; MISS_BYTES];
                    for &block in &plan.fill {
                        let offset = block * MISS_BYTES as u64;
                        fill_read(&reader, &mut buf, offset)?;
                        data::verify(&buf, offset)?;
                    }
                }
                Ok(reader)
            }
            other => Err(io::Error::other(format!("miss-cost has no system {other}"))),
        }
    }

    /// folio's counters now (`None` for the other systems).
    fn folio_stats(&self) -> Option<folio::Stats> {
        match self {
            Reader::Folio { cache, .. } => Some(cache.stats()),
            _ => None,
        }
    }
}

/// `buf.len()` bytes at `offset`, whole: the read of a miss and of a hit alike.
#[inline(always)]
fn read_whole(reader: &Reader, buf: &mut [u8], offset: u64) -> io::Result<()> {
    match reader {
        Reader::Direct(f) | Reader::Kernel(f) => f.read_exact_at(buf, offset),
        Reader::Folio { file, .. } => whole(file.read_at(buf, offset)?, buf.len(), offset),
    }
}

/// A folio read of `n` bytes where `len` were asked: whole, or an error.
fn whole(n: usize, len: usize, offset: u64) -> io::Result<()> {
    if n == len {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "short read: {n} of {len} at {offset}"
        )))
    }
}

/// One read of folio-full's fill, before the clock, by `File::get_page` (its page pinned,
/// copied out, unpinned): the same miss path, but not through `File::read_at`, so that a
/// callgrind run that counts folio's reads (`probe::toggles`) counts the measured reads
/// only.
fn fill_read(reader: &Reader, buf: &mut [u8], offset: u64) -> io::Result<()> {
    match reader {
        Reader::Folio { file, .. } => {
            let page = file.get_page(offset)?;
            let at = (offset - page.offset_bytes()) as usize;
            let bytes = page.get(at..at + buf.len()).ok_or_else(|| {
                io::Error::other(format!(
                    "short page: {} bytes from {} at {offset}",
                    page.len_bytes(),
                    page.offset_bytes()
                ))
            })?;
            buf.copy_from_slice(bytes);
            Ok(())
        }
        _ => read_whole(reader, buf, offset),
    }
}

/// One measured miss. Never inlined, and called for nothing else: callgrind counts the
/// instructions inside it (`--toggle-collect`).
#[inline(never)]
fn read_miss(reader: &Reader, buf: &mut [u8], offset: u64) -> io::Result<()> {
    read_whole(reader, buf, offset)
}

/// One hit, as `read_miss`.
#[inline(never)]
fn read_hit(reader: &Reader, buf: &mut [u8; HIT_BYTES], offset: u64) -> io::Result<()> {
    read_whole(reader, buf, offset)
}

/// The 64 bytes of a hit folded into a word: what the timed pass keeps of each hit, for
/// the untimed pass to check.
fn fold(buf: &[u8; HIT_BYTES]) -> u64 {
    buf.chunks_exact(8).fold(0u64, |sum, w| {
        sum.rotate_left(5) ^ u64::from_le_bytes(w.try_into().expect("8 bytes"))
    })
}

/// What `getrusage` says of a thread or a process: CPU time and context switches.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Account {
    user_us: f64,
    sys_us: f64,
    vcsw: i64,
    ivcsw: i64,
    /// Minor page faults (a page of fresh memory touched, or mapped again).
    minflt: i64,
}

impl Account {
    fn of(who: libc::c_int) -> io::Result<Account> {
        // SAFETY: rusage is plain old data; zeroed is a valid value to be overwritten.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `usage` is a live out-pointer on this stack.
        if unsafe { libc::getrusage(who, &mut usage) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
        Ok(Account {
            user_us: us(usage.ru_utime),
            sys_us: us(usage.ru_stime),
            vcsw: usage.ru_nvcsw,
            ivcsw: usage.ru_nivcsw,
            minflt: usage.ru_minflt,
        })
    }
}

/// The accounts of the reading thread and of its process at one instant.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    thread: Account,
    process: Account,
}

impl Usage {
    fn now() -> io::Result<Usage> {
        Ok(Usage {
            thread: Account::of(libc::RUSAGE_THREAD)?,
            process: Account::of(libc::RUSAGE_SELF)?,
        })
    }
}

/// What `ops` reads cost between two `Usage`s, per read.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PerOp {
    pub wall_us: f64,
    pub user_us: f64,
    pub sys_us: f64,
    /// The whole process's user + system time (every thread).
    pub process_cpu_us: f64,
    pub vcsw: f64,
    pub ivcsw: f64,
    pub process_vcsw: f64,
    pub process_ivcsw: f64,
    /// Minor page faults of the thread and of the process.
    pub minflt: f64,
    pub process_minflt: f64,
}

impl PerOp {
    fn between(a: &Usage, b: &Usage, wall_secs: f64, ops: u64) -> PerOp {
        let n = ops.max(1) as f64;
        let cpu = |u: &Account| u.user_us + u.sys_us;
        PerOp {
            wall_us: wall_secs * 1e6 / n,
            user_us: (b.thread.user_us - a.thread.user_us) / n,
            sys_us: (b.thread.sys_us - a.thread.sys_us) / n,
            process_cpu_us: (cpu(&b.process) - cpu(&a.process)) / n,
            vcsw: (b.thread.vcsw - a.thread.vcsw) as f64 / n,
            ivcsw: (b.thread.ivcsw - a.thread.ivcsw) as f64 / n,
            process_vcsw: (b.process.vcsw - a.process.vcsw) as f64 / n,
            process_ivcsw: (b.process.ivcsw - a.process.ivcsw) as f64 / n,
            minflt: (b.thread.minflt - a.thread.minflt) as f64 / n,
            process_minflt: (b.process.minflt - a.process.minflt) as f64 / n,
        }
    }

    fn to_json(self) -> Value {
        json!({
            "wall_us": self.wall_us,
            "user_us": self.user_us,
            "sys_us": self.sys_us,
            "process_cpu_us": self.process_cpu_us,
            "vcsw": self.vcsw,
            "ivcsw": self.ivcsw,
            "process_vcsw": self.process_vcsw,
            "process_ivcsw": self.process_ivcsw,
            "minflt": self.minflt,
            "process_minflt": self.process_minflt,
        })
    }
}

/// One system's round: its misses, then (but for `direct`, whose every read is a miss)
/// its hits.
#[derive(Clone, Debug)]
pub struct Pass {
    pub misses: PerOp,
    pub hits: Option<PerOp>,
    pub bytes_verified: u64,
    /// folio's backend ("io_uring", "pread").
    pub backend: Option<String>,
    /// The misses folio counted during the timed misses (as many as were read).
    pub folio_misses: Option<u64>,
    /// The pages folio evicted during them (folio-full: one per miss, or about).
    pub folio_evictions: Option<u64>,
}

/// Runs one system's round of `plan`. The caller makes the file cold first where it
/// matters (the kernel's misses; folio and direct read with O_DIRECT).
///
/// Context: the calling thread is the reading thread; any folio cache is built and
/// dropped inside.
pub fn pass(env: &Env, system: System, plan: &Plan) -> io::Result<Pass> {
    let reader = Reader::open(env, system, plan)?;
    let mut landing = AlignedBuf::new(plan.misses.len() * MISS_BYTES);
    // Faulted in before the clock: the misses pay for their reads only.
    landing.fill(0x5a);
    let stats_before = reader.folio_stats();
    let before = (Usage::now()?, Instant::now());
    for (slot, &block) in landing.chunks_exact_mut(MISS_BYTES).zip(&plan.misses) {
        read_miss(&reader, slot, block * MISS_BYTES as u64)?;
    }
    let misses = PerOp::between(
        &before.0,
        &Usage::now()?,
        before.1.elapsed().as_secs_f64(),
        plan.misses.len() as u64,
    );
    let stats_after = reader.folio_stats();
    let mut verified = 0;
    for (slot, &block) in landing.chunks_exact(MISS_BYTES).zip(&plan.misses) {
        verified += data::verify(slot, block * MISS_BYTES as u64)?;
    }
    let hits = if system == System::Direct {
        None
    } else {
        let mut buf = [0u8; HIT_BYTES];
        let mut timed = 0u64;
        let before = (Usage::now()?, Instant::now());
        for &offset in &plan.hits {
            read_hit(&reader, &mut buf, offset)?;
            timed = timed.wrapping_add(fold(&buf));
        }
        let hits = PerOp::between(
            &before.0,
            &Usage::now()?,
            before.1.elapsed().as_secs_f64(),
            plan.hits.len() as u64,
        );
        let mut checked = 0u64;
        for &offset in &plan.hits {
            read_hit(&reader, &mut buf, offset)?;
            verified += data::verify(&buf, offset)?;
            checked = checked.wrapping_add(fold(&buf));
        }
        if checked != timed {
            return Err(io::Error::other(format!(
                "{system}: the timed hits read other bytes than the verified ones"
            )));
        }
        Some(hits)
    };
    let delta = |f: fn(&folio::Stats) -> u64| {
        stats_before
            .as_ref()
            .zip(stats_after.as_ref())
            .map(|(a, b)| f(b) - f(a))
    };
    Ok(Pass {
        misses,
        hits,
        bytes_verified: verified,
        backend: stats_after.as_ref().map(|s| s.backend.clone()),
        folio_misses: delta(|s| s.misses),
        folio_evictions: delta(|s| s.evicted_pages),
    })
}

pub fn run(args: &Args, env: &Env) -> io::Result<Report> {
    let file_bytes = mib(args.file_mib.unwrap_or(env.scale.pick(256, 2048)));
    let misses = args.misses.unwrap_or(env.scale.pick(2000, 20_000)).max(1);
    let hits = args
        .hits
        .unwrap_or(env.scale.pick(100_000, 1_000_000))
        .max(1);
    let full_cache_bytes = mib(args.full_cache_mib.unwrap_or(64));
    let path = env.data_file("miss-cost.dat", file_bytes)?;

    let mut report = Report::new("miss-cost", Metric::OpsPerSec);
    report.param("file_bytes", file_bytes);
    report.param("misses_per_round", misses);
    report.param("hits_per_round", hits);
    report.param("miss_bytes", MISS_BYTES);
    report.param("hit_bytes", HIT_BYTES);
    report.param("folio_full_cache_bytes", full_cache_bytes);
    report.param("rounds", env.runs);
    report.param("threads", 1);

    let bar = env.bar("miss-cost", (env.runs * SYSTEMS.len()) as u64);
    let mut passes: Vec<Vec<Pass>> = vec![Vec::new(); SYSTEMS.len()];
    for round in 0..env.runs {
        let plan = Plan::new(
            &path,
            file_bytes,
            misses,
            hits,
            full_cache_bytes,
            round as u64 + 1,
        );
        for k in 0..SYSTEMS.len() {
            let si = (round + k) % SYSTEMS.len();
            bar.set_message(format!("{} round {}/{}", SYSTEMS[si], round + 1, env.runs));
            kernel::make_cold(std::slice::from_ref(&path), env.cold)?;
            passes[si].push(pass(env, SYSTEMS[si], &plan)?);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();

    for (si, &system) in SYSTEMS.iter().enumerate() {
        let runs: Vec<RunResult> = passes[si].iter().map(|p| run_result(p, misses)).collect();
        let mut row = Row::from_runs(system, 1, &runs, Metric::OpsPerSec);
        row.extra
            .insert("miss".into(), medians(passes[si].iter().map(|p| p.misses)));
        let hits: Vec<PerOp> = passes[si].iter().filter_map(|p| p.hits).collect();
        if !hits.is_empty() {
            row.extra.insert("hit".into(), medians(hits.into_iter()));
        }
        report.rows.push(row);
    }
    report.fill_ratios();

    let callgrind = match args.callgrind {
        Callgrind::Off => None,
        Callgrind::Auto if valgrind_on_path() => Some(count_instructions(env, args, &path)?),
        Callgrind::Auto => {
            report
                .note("instructions: not counted (no valgrind on PATH; apt-get install valgrind)");
            None
        }
    };
    if let Some(counts) = &callgrind {
        for (system, phase, per_op) in counts {
            if let Some(row) = report.rows.iter_mut().find(|r| r.system == system.as_str()) {
                row.extra
                    .insert(format!("{phase}_instructions"), json!(per_op));
            }
        }
    }

    add_notes_and_targets(&mut report, args);
    if callgrind.is_some() {
        add_instructions(&mut report);
    }
    report.limits = env.limits()?;
    Ok(report)
}

fn run_result(p: &Pass, misses: u64) -> RunResult {
    let mut extra = Map::new();
    extra.insert("miss_round".into(), p.misses.to_json());
    if let Some(h) = p.hits {
        extra.insert("hit_round".into(), h.to_json());
    }
    if let Some(b) = &p.backend {
        extra.insert("folio_backend".into(), json!(b));
    }
    if let Some(m) = p.folio_misses {
        extra.insert("folio_misses_counted".into(), json!(m));
    }
    if let Some(e) = p.folio_evictions {
        extra.insert("folio_evictions".into(), json!(e));
    }
    RunResult {
        ops: misses,
        bytes_read: misses * MISS_BYTES as u64,
        bytes_verified: p.bytes_verified,
        elapsed_secs: p.misses.wall_us * misses as f64 / 1e6,
        p50_us: p.misses.wall_us,
        p99_us: f64::NAN,
        extra,
        ..RunResult::default()
    }
}

/// Each field's median over the rounds.
fn medians(rounds: impl Iterator<Item = PerOp>) -> Value {
    let rounds: Vec<PerOp> = rounds.collect();
    let m = |f: fn(&PerOp) -> f64| lower_median(rounds.iter().map(f)).unwrap_or(f64::NAN);
    PerOp {
        wall_us: m(|p| p.wall_us),
        user_us: m(|p| p.user_us),
        sys_us: m(|p| p.sys_us),
        process_cpu_us: m(|p| p.process_cpu_us),
        vcsw: m(|p| p.vcsw),
        ivcsw: m(|p| p.ivcsw),
        process_vcsw: m(|p| p.process_vcsw),
        process_ivcsw: m(|p| p.process_ivcsw),
        minflt: m(|p| p.minflt),
        process_minflt: m(|p| p.process_minflt),
    }
    .to_json()
}

fn figure(report: &Report, system: System, key: &str, field: &str) -> Option<f64> {
    report
        .rows
        .iter()
        .find(|r| r.system == system.as_str())?
        .extra
        .get(key)?
        .get(field)?
        .as_f64()
}

fn add_notes_and_targets(report: &mut Report, args: &Args) {
    let rows = report.clone();
    let rows = &rows;
    let line = |r: &Report, s: System, key: &str| {
        let f = |field| figure(r, s, key, field).unwrap_or(f64::NAN);
        format!(
            "{s}: wall {:.2}, thread user {:.2} + sys {:.2}, process CPU {:.2} us; context \
             switches thread {:.2} + {:.2} involuntary, process {:.2} + {:.2}; minor faults \
             thread {:.2}, process {:.2}",
            f("wall_us"),
            f("user_us"),
            f("sys_us"),
            f("process_cpu_us"),
            f("vcsw"),
            f("ivcsw"),
            f("process_vcsw"),
            f("process_ivcsw"),
            f("minflt"),
            f("process_minflt")
        )
    };
    let mut notes = vec![
        "per miss (medians of the rounds; one thread, distinct random 4 KiB blocks of a \
         cold file, every byte verified after the clock):"
            .to_string(),
    ];
    notes.extend(
        SYSTEMS
            .iter()
            .map(|&s| format!("  {}", line(report, s, "miss"))),
    );
    notes.push("per 64 B hit (the same blocks, now cached; folded into a sum, checked by an untimed pass):".into());
    notes.extend(
        SYSTEMS
            .iter()
            .filter(|&&s| s != System::Direct)
            .map(|&s| format!("  {}", line(report, s, "hit"))),
    );
    for n in notes {
        report.note(n);
    }
    let direct = |field| figure(rows, System::Direct, "miss", field);
    for folio in [System::Folio, System::FolioFull] {
        let cpu = figure(rows, folio, "miss", "process_cpu_us");
        report.targets.push(Target::at_most(
            format!("miss-cost: {folio} CPU per miss (all threads) minus direct's, us"),
            cpu.zip(direct("process_cpu_us")).map(|(f, d)| f - d),
            CPU_ABOVE_DIRECT_MAX_US,
        ));
        let switches = |s| {
            let v = figure(rows, s, "miss", "process_vcsw")?;
            Some(v + figure(rows, s, "miss", "process_ivcsw")?)
        };
        report.targets.push(Target::at_most(
            format!("miss-cost: {folio} context switches per miss (process) minus direct's"),
            switches(folio)
                .zip(switches(System::Direct))
                .map(|(f, d)| f - d),
            0.0,
        ));
    }
    report.note(format!(
        "folio: every option at the library's default, the file advised Random; folio's \
         cache holds the file (+64 MiB), folio-full's {} MiB is filled before the clock so \
         that every miss evicts; kernel: buffered pread, POSIX_FADV_RANDOM, cold; direct: \
         O_DIRECT pread into an aligned buffer",
        args.full_cache_mib.unwrap_or(64)
    ));
}

/// The instructions' note and the hit's target, once callgrind has counted them.
fn add_instructions(report: &mut Report) {
    let rows = report.clone();
    let rows = &rows;
    let get = |s: System, key: &str| {
        rows.rows
            .iter()
            .find(|r| r.system == s.as_str())
            .and_then(|r| r.extra.get(key)?.as_f64())
    };
    report.note(format!(
        "instructions (callgrind, user space only, inside the reads: folio's \
         File::read_private, the others' pread): per miss direct {:.0}, kernel {:.0}, folio \
         {:.0}, folio-full {:.0}; per 64 B hit kernel {:.0}, folio {:.0}, folio-full {:.0}",
        get(System::Direct, "miss_instructions").unwrap_or(f64::NAN),
        get(System::Kernel, "miss_instructions").unwrap_or(f64::NAN),
        get(System::Folio, "miss_instructions").unwrap_or(f64::NAN),
        get(System::FolioFull, "miss_instructions").unwrap_or(f64::NAN),
        get(System::Kernel, "hit_instructions").unwrap_or(f64::NAN),
        get(System::Folio, "hit_instructions").unwrap_or(f64::NAN),
        get(System::FolioFull, "hit_instructions").unwrap_or(f64::NAN),
    ));
    report.targets.push(Target::at_most(
        "miss-cost: folio instructions per 64 B hit, its copy included",
        get(System::Folio, "hit_instructions"),
        HIT_INSTRUCTIONS_MAX,
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_reads_distinct_blocks_and_hits_recent_ones() {
        // 2,048 blocks; a 1 MiB full cache holds 256: the fill reads 320, the hits land in
        // the last 128 misses (half the cache), which it still holds.
        let plan = Plan::new(Path::new("/x"), mib(8), 400, 1000, mib(1), 7);
        let blocks = mib(8) / MISS_BYTES as u64;
        assert_eq!(plan.misses.len(), 400);
        assert_eq!(plan.fill.len(), 320);
        let mut seen: Vec<u64> = plan.misses.iter().chain(&plan.fill).copied().collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 720, "misses and fill are distinct blocks");
        assert!(seen.iter().all(|&b| b < blocks));
        let recent = &plan.misses[400 - 128..];
        assert_eq!(plan.hits.len(), 1000);
        for &h in &plan.hits {
            assert_eq!(h % HIT_BYTES as u64, 0);
            assert!(
                recent.contains(&(h / MISS_BYTES as u64)),
                "hit {h} not in the last blocks read"
            );
        }
        let distinct: std::collections::HashSet<u64> =
            plan.hits.iter().map(|h| h / MISS_BYTES as u64).collect();
        assert!(distinct.len() > 100, "hits spread over the recent blocks");
    }

    #[test]
    fn per_op_divides_the_differences() {
        let mut a = Usage::default();
        let mut b = Usage::default();
        a.thread.user_us = 100.0;
        b.thread.user_us = 1100.0;
        b.thread.sys_us = 1e6;
        b.process.user_us = 2e6;
        b.thread.vcsw = 10;
        let p = PerOp::between(&a, &b, 0.5, 10);
        assert_eq!(p.user_us, 100.0);
        assert_eq!(p.sys_us, 100_000.0);
        assert_eq!(p.process_cpu_us, 200_000.0);
        assert_eq!(p.vcsw, 1.0);
        assert_eq!(p.wall_us, 50_000.0);
    }
}
