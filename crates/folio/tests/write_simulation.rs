//! Deterministic simulation of writes and power loss (issue 14, done-when 3b): for each
//! seed, writer threads (one per file, one to three files) run random operations through
//! one small cache over the fault backend, the power is cut at a random point, and the
//! files are read back with `std::fs` and checked against what was acknowledged.
//!
//! The seed draws the cache (capacity 64 KiB-1 MiB, largest folio 4 KiB-2 MiB, eviction
//! policy, dirty expiry 1 ms-5 s, dirty limits, pread or io_uring), the backend's faults
//! (short reads and writes, delays, reordered completions: the fault backend's seeded
//! simulation, without EIO), each file's first contents (empty or up to 300 KiB), one to
//! three epochs, and each thread's operations: `write_at` (appends, overwrites anywhere,
//! past the end), `read_at` and `get_page` (checked against the model), `sync_data`,
//! `sync_all`, `sync_range`, `writeback`, `set_len` (down and up), the handle closed and
//! reopened, a read-only handle's reads. In a quarter of the seeds, thread 0 also opens a
//! fault window: the writes over a range and (half the time) every flush fail with EIO for
//! a few operations, then the faults are cleared (a file may be given up after repeated
//! failures).
//!
//! An epoch ends with the power cut: at a drawn operation of thread 0, every later write
//! and flush fails (the backend stops reaching the disk), the threads stop, the cache is
//! dropped (its last writeback fails too), and `FaultControl::power_loss(seed)` rewinds
//! the files to what a cut could leave: each write since its file's last flush kept, lost
//! or torn at 4 KiB (`io/fault/power.rs`). The next epoch starts a new cache on what is
//! on disk.
//!
//! What each seed proves:
//! - after each power loss, every byte a sync that returned Ok vouched for is on disk
//!   with its synced value, unless a later write covered it (then it is one of those
//!   writes' bytes); no byte is one nobody wrote (the file's first bytes, a write's, or
//!   zeros); the file is at least as long as the last sync left it (`set_len` aside) and
//!   no longer than it ever was, rounded to 4 KiB (`common/durability.rs`; the model has
//!   no size, so a length is only checked that far);
//! - every read returns exactly the model's bytes and length (the latest write of every
//!   byte), through every handle, pinned pages included; once a fault window opened or the
//!   power was cut, a read may also return bytes the disk may hold (a given-up file
//!   re-reads evicted pages from the disk), never bytes nobody wrote;
//! - no operation fails unless a fault window is open or was (an error surfaces once per
//!   handle at a later sync) or the power is cut; no seed runs longer than
//!   `SEED_TIME_MAX` (a hang is a failure).
//!
//! Environment: `FOLIO_WSIM_SEEDS=n` runs seeds 0..n (default 1000), `FOLIO_WSIM_FIRST=k`
//! starts at seed k, `FOLIO_WSIM_SEED=s` runs seed s only and prints what it did,
//! `FOLIO_WSIM_REPEAT=r` runs each seed r times, `FOLIO_SIM_DIR` puts the files elsewhere
//! (default: the target directory, where O_DIRECT works).

mod common;
#[path = "common/durability.rs"]
mod durability;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use durability::{History, Stored};
use folio::io::fault::{FaultBackend, FaultControl, PowerLoss, SimConfig};
use folio::io::pread::PreadBackend;
use folio::io::uring::{UringBackend, QUEUE_DEPTH};
use folio::io::Backend;
use folio::{Cache, EvictionKind, File};

const SEEDS_DEFAULT: u64 = 1000;
/// A seed that runs longer than this has hung.
const SEED_TIME_MAX: Duration = Duration::from_secs(60);
/// Seeds run side by side: each waits for syncs most of its time.
const WORKERS: usize = 4;
const PAGE: u64 = 4096;
/// Writes stay below this offset (appends become overwrites).
const FILE_BYTES_MAX: u64 = 768 << 10;

/// SplitMix64: a seed-driven generator whose every output depends on the seed alone.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5752_4954_4553_494D)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, choices: &[T]) -> T {
        choices[self.below(choices.len() as u64) as usize]
    }

    fn chance_per_mille(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    /// `n` bytes drawn from the generator.
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(n + 8);
        while bytes.len() < n {
            bytes.extend_from_slice(&self.next().to_le_bytes());
        }
        bytes.truncate(n);
        bytes
    }
}

/// What one seed set up, for the replay output.
#[derive(Debug)]
struct Setup {
    sim: SimConfig,
    capacity_bytes: u64,
    folio_order_max: u8,
    eviction: EvictionKind,
    backend: &'static str,
    dirty_expire: Duration,
    /// (limit, background) in bytes; `None`: the defaults.
    dirty_bytes: Option<(u64, u64)>,
    /// Each file's first length (one writer thread per file).
    first_lens: Vec<u64>,
    epochs: usize,
    ops_per_thread: usize,
    /// Thread 0's fault window, if any: (first op, last op, fail flushes too).
    fault_window: Option<(usize, usize, bool)>,
}

fn draw_setup(rng: &mut Rng) -> Setup {
    let sim = SimConfig {
        eio_per_mille: 0,
        short_per_mille: rng.pick(&[0, 100, 300]),
        delay_max: Duration::from_micros(rng.pick(&[0, 20, 200])),
        reorder: rng.pick(&[0, 0, 2, 4]),
        hold_max: Duration::from_micros(rng.pick(&[100, 500])),
    };
    let capacity_bytes = PAGE * rng.pick(&[16, 32, 64, 256]);
    let files = 1 + rng.below(3) as usize;
    let first_lens = (0..files)
        .map(|_| match rng.below(3) {
            0 => 0,
            1 => rng.below(300 << 10),
            _ => PAGE * rng.below(64),
        })
        .collect();
    let ops_per_thread = 10 + rng.below(40) as usize;
    let fault_window = rng.chance_per_mille(250).then(|| {
        let first = rng.below(ops_per_thread as u64) as usize;
        let last = first + 1 + rng.below(8) as usize;
        (first, last, rng.chance_per_mille(500))
    });
    Setup {
        sim,
        capacity_bytes,
        folio_order_max: rng.pick(&[0, 2, 4, 9]),
        eviction: rng.pick(&[EvictionKind::S3Fifo, EvictionKind::TwoListLru]),
        backend: rng.pick(&["pread", "pread", "io_uring"]),
        dirty_expire: Duration::from_millis(rng.pick(&[1, 10, 5000])),
        dirty_bytes: rng
            .chance_per_mille(500)
            .then(|| (capacity_bytes / 2, capacity_bytes / rng.pick(&[4, 16]))),
        first_lens,
        epochs: 1 + rng.below(3) as usize,
        ops_per_thread,
        fault_window,
    }
}

fn inner_backend(name: &str) -> Box<dyn Backend> {
    if name == "io_uring" {
        if let Ok(uring) = UringBackend::new(QUEUE_DEPTH) {
            return Box::new(uring);
        }
    }
    Box::new(PreadBackend::new(2).expect("a pread pool"))
}

/// How much a seed's run says on stderr: a replay of one seed says everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verbosity {
    Quiet,
    Verbose,
}

/// What one seed did (or, summed, what a run did).
#[derive(Debug, Default)]
struct Outcome {
    seeds: u64,
    epochs: u64,
    ops: u64,
    writes: u64,
    /// Syncs that returned Ok.
    acks: u64,
    bytes_read: u64,
    /// Reads checked loosely (after a fault or the cut) that differed from the model.
    loose_reads: u64,
    /// Operations that failed while faults were planned.
    errors: u64,
    fault_windows: u64,
    short_injected: u64,
    reordered: u64,
    blocks_kept: u64,
    blocks_lost: u64,
    bytes_checked: u64,
}

impl Outcome {
    fn add(&mut self, other: &Outcome) {
        self.seeds += other.seeds;
        self.epochs += other.epochs;
        self.ops += other.ops;
        self.writes += other.writes;
        self.acks += other.acks;
        self.bytes_read += other.bytes_read;
        self.loose_reads += other.loose_reads;
        self.errors += other.errors;
        self.fault_windows += other.fault_windows;
        self.short_injected += other.short_injected;
        self.reordered += other.reordered;
        self.blocks_kept += other.blocks_kept;
        self.blocks_lost += other.blocks_lost;
        self.bytes_checked += other.bytes_checked;
    }
}

/// What every thread of an epoch shares.
struct Shared<'a> {
    cache: &'a Cache,
    control: &'a FaultControl,
    /// Set (before the faults are planned) when a fault window opens or the power is cut:
    /// from then on an operation may fail and a read may be a disk's bytes.
    faulted: AtomicBool,
    /// Set when the power is cut: the threads stop.
    cut: AtomicBool,
    /// The seed's simulation, to start again when a fault window closes.
    sim_seed: u64,
    sim: SimConfig,
    verbosity: Verbosity,
}

/// One seed, start to end. `Err` describes the first thing that went wrong.
fn run_seed(seed: u64, base_dir: &Path, verbosity: Verbosity) -> Result<Outcome, String> {
    let mut rng = Rng::new(seed);
    let setup = draw_setup(&mut rng);
    let started = Instant::now();
    if verbosity == Verbosity::Verbose {
        eprintln!("seed {seed}: {setup:#?}");
    }
    let dir = tempfile::Builder::new()
        .prefix(&format!("wsim-{seed}-"))
        .tempdir_in(base_dir)
        .map_err(|e| format!("a directory for the seed: {e}"))?;
    let paths: Vec<PathBuf> = (0..setup.first_lens.len())
        .map(|i| dir.path().join(format!("file{i}")))
        .collect();
    let mut contents: Vec<Vec<u8>> = Vec::new();
    for (path, &len) in paths.iter().zip(&setup.first_lens) {
        let bytes = rng.bytes(len as usize);
        write_durably(path, &bytes).map_err(|e| format!("writing {}: {e}", path.display()))?;
        contents.push(bytes);
    }
    let mut outcome = Outcome {
        seeds: 1,
        ..Outcome::default()
    };
    for epoch in 0..setup.epochs {
        let epoch_seed = rng.next();
        let thread_seeds: Vec<u64> = paths.iter().map(|_| rng.next()).collect();
        let cut_at = rng.below(setup.ops_per_thread as u64 + 1) as usize;
        let histories = run_epoch(
            &setup,
            epoch_seed,
            &paths,
            &contents,
            &thread_seeds,
            cut_at,
            verbosity,
            &mut outcome,
        )
        .map_err(|e| format!("epoch {epoch}: {e}"))?;
        for (i, (path, (history, trace))) in paths.iter().zip(&histories).enumerate() {
            let disk =
                std::fs::read(path).map_err(|e| format!("epoch {epoch}: reading file {i}: {e}"))?;
            history.check(&disk).map_err(|e| {
                format!(
                    "epoch {epoch}, file {i} after the power loss: {e}\n  its thread did:\n    {}",
                    trace.join("\n    ")
                )
            })?;
            outcome.bytes_checked += disk.len() as u64;
            contents[i] = disk;
        }
        outcome.epochs += 1;
    }
    if verbosity == Verbosity::Verbose {
        eprintln!("seed {seed}: {outcome:?} in {:?}", started.elapsed());
    }
    Ok(outcome)
}

/// Writes `bytes` as the whole of `path`, synced.
fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut file = std::fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// One epoch: a cache over the files holding `contents`, the threads, the cut, the power
/// loss. Returns each file's history since `contents`.
#[allow(clippy::too_many_arguments)]
fn run_epoch(
    setup: &Setup,
    epoch_seed: u64,
    paths: &[PathBuf],
    contents: &[Vec<u8>],
    thread_seeds: &[u64],
    cut_at: usize,
    verbosity: Verbosity,
    outcome: &mut Outcome,
) -> Result<Vec<(History, Vec<String>)>, String> {
    let (backend, control) =
        FaultBackend::seeded(inner_backend(setup.backend), epoch_seed, setup.sim);
    let mut builder = Cache::builder()
        .capacity_bytes(setup.capacity_bytes)
        .folio_order_max(setup.folio_order_max)
        .eviction(setup.eviction)
        .dirty_expire(setup.dirty_expire)
        .alloc_wait(Duration::from_secs(10));
    if let Some((limit, background)) = setup.dirty_bytes {
        builder = builder
            .dirty_limit_bytes(limit)
            .dirty_background_bytes(background);
    }
    let cache = builder
        .build_with_backend(Box::new(backend))
        .map_err(|e| format!("building the cache: {e}"))?;
    let shared = Shared {
        cache: &cache,
        control: &control,
        faulted: AtomicBool::new(false),
        cut: AtomicBool::new(false),
        sim_seed: epoch_seed,
        sim: setup.sim,
        verbosity,
    };
    let results: Vec<Result<Finished, String>> = std::thread::scope(|s| {
        let writers: Vec<_> = paths
            .iter()
            .zip(contents)
            .zip(thread_seeds)
            .enumerate()
            .map(|(t, ((path, content), &seed))| {
                let shared = &shared;
                std::thread::Builder::new()
                    .name(format!("wsim-{t}"))
                    .spawn_scoped(s, move || {
                        let role = Role {
                            cut_at: (t == 0).then_some(cut_at),
                            fault_window: setup.fault_window.filter(|_| t == 0),
                        };
                        Writer::new(shared, path, content.clone(), seed, role)?
                            .run(setup.ops_per_thread)
                    })
                    .expect("a writer thread")
            })
            .collect();
        writers
            .into_iter()
            .enumerate()
            .map(|(t, writer)| {
                writer
                    .join()
                    .unwrap_or_else(|panic| {
                        Err(format!("a writer panicked: {}", panic_text(&panic)))
                    })
                    .map_err(|e| format!("thread {t}: {e}"))
            })
            .collect()
    });
    // The cut, if thread 0 ended before its drawn point.
    cut_power(&shared);
    outcome.short_injected += control.short_injected();
    outcome.reordered += control.reordered();
    // The cache's last writeback fails; then nothing is in flight.
    drop(cache);
    let loss: PowerLoss = control
        .power_loss(epoch_seed)
        .map_err(|e| format!("the power loss: {e}"))?;
    outcome.blocks_kept += loss.blocks_kept;
    outcome.blocks_lost += loss.blocks_lost;
    if verbosity == Verbosity::Verbose {
        eprintln!("power loss: {loss:?}");
    }
    let mut histories = Vec::new();
    for result in results {
        let Finished {
            history,
            outcome: thread,
            trace,
        } = result?;
        outcome.add(&Outcome { seeds: 0, ..thread });
        histories.push((history, trace));
    }
    Ok(histories)
}

/// Cuts the power: from now on no write or flush reaches the disk (module docs).
fn cut_power(shared: &Shared<'_>) {
    shared.faulted.store(true, Ordering::SeqCst);
    shared.cut.store(true, Ordering::SeqCst);
    shared.control.fail_writes(0..u64::MAX, libc::EIO);
    shared.control.fail_flushes(libc::EIO);
}

/// What a thread does besides its file's operations: thread 0 cuts the power and opens
/// the fault window.
#[derive(Clone, Copy, Debug)]
struct Role {
    cut_at: Option<usize>,
    fault_window: Option<(usize, usize, bool)>,
}

/// What a writer thread hands back.
struct Finished {
    history: History,
    outcome: Outcome,
    trace: Vec<String>,
}

/// One writer thread: its file, its model and its history.
struct Writer<'a> {
    shared: &'a Shared<'a>,
    path: &'a Path,
    handle: Option<File>,
    /// The file's bytes as every read must return them (the latest write of each byte).
    model: Vec<u8>,
    history: History,
    rng: Rng,
    role: Role,
    outcome: Outcome,
    /// What the thread did, one line per operation, for a failure's report.
    trace: Vec<String>,
}

impl<'a> Writer<'a> {
    fn new(
        shared: &'a Shared<'a>,
        path: &'a Path,
        content: Vec<u8>,
        seed: u64,
        role: Role,
    ) -> Result<Self, String> {
        let mut writer = Writer {
            shared,
            path,
            handle: None,
            model: content.clone(),
            history: History::new(content),
            rng: Rng::new(seed),
            role,
            outcome: Outcome::default(),
            trace: Vec::new(),
        };
        writer.reopen()?;
        Ok(writer)
    }

    fn reopen(&mut self) -> Result<(), String> {
        self.trace.push("  reopen".to_owned());
        self.handle = None;
        let handle = self
            .shared
            .cache
            .open_options()
            .write(true)
            .open(self.path)
            .map_err(|e| format!("open: {e}"))?;
        let len = handle.len();
        if len != self.model.len() as u64 && !self.faulted() {
            return Err(format!(
                "opened with a length of {len}, the model has {}",
                self.model.len()
            ));
        }
        self.handle = Some(handle);
        Ok(())
    }

    fn file(&self) -> &File {
        self.handle
            .as_ref()
            .expect("a handle is open between operations")
    }

    fn faulted(&self) -> bool {
        self.shared.faulted.load(Ordering::SeqCst)
    }

    fn run(mut self, ops: usize) -> Result<Finished, String> {
        for op in 0..ops {
            if self.shared.cut.load(Ordering::SeqCst) {
                break;
            }
            if self.role.cut_at == Some(op) {
                if self.shared.verbosity == Verbosity::Verbose {
                    eprintln!("the power is cut before operation {op} of thread 0");
                }
                self.trace.push(format!("{op}: the power is cut"));
                cut_power(self.shared);
                break;
            }
            if let Some((first, last, flushes)) = self.role.fault_window {
                if op == first {
                    self.open_fault_window(flushes);
                } else if op == last {
                    self.trace.push(format!("{op}: the fault window closes"));
                    self.shared.control.clear();
                    self.shared
                        .control
                        .simulate(self.shared.sim_seed ^ 0xC1EA, self.shared.sim);
                }
            }
            self.trace.push(format!("{op}:"));
            if let Err(e) = self.step() {
                return Err(format!(
                    "operation {op}: {e}\n  the thread did:\n    {}",
                    self.trace.join("\n    ")
                ));
            }
            self.outcome.ops += 1;
        }
        self.handle = None;
        Ok(Finished {
            history: self.history,
            outcome: self.outcome,
            trace: self.trace,
        })
    }

    fn open_fault_window(&mut self, flushes: bool) {
        self.outcome.fault_windows += 1;
        self.shared.faulted.store(true, Ordering::SeqCst);
        let start = PAGE * self.rng.below(FILE_BYTES_MAX / PAGE);
        let len = PAGE * (1 + self.rng.below(32));
        if self.shared.verbosity == Verbosity::Verbose {
            eprintln!(
                "fault window: writes over [{start}, {}) fail, flushes too: {flushes}",
                start + len
            );
        }
        self.trace.push(format!(
            "  fault window: writes over [{start}, {}) fail, flushes too: {flushes}",
            start + len
        ));
        self.shared
            .control
            .fail_writes(start..start + len, libc::EIO);
        if flushes {
            self.shared.control.fail_flushes(libc::EIO);
        }
    }

    /// An operation failed: fine only once faults were planned.
    fn failed(&mut self, what: String, error: std::io::Error) -> Result<(), String> {
        if !self.faulted() {
            return Err(format!("{what}: {error}, with no fault planned"));
        }
        if self.shared.verbosity == Verbosity::Verbose {
            eprintln!("{what}: {error}");
        }
        self.outcome.errors += 1;
        self.trace.push(format!("  {what}: {error}"));
        Ok(())
    }

    fn step(&mut self) -> Result<(), String> {
        let len = self.model.len() as u64;
        match self.rng.below(100) {
            0..=37 => self.write(len),
            38..=54 => {
                let offset = self.rng.below(len + PAGE);
                let most = self.rng.pick(&[100, 5000, 70_000]);
                let n = 1 + self.rng.below(most);
                self.read(offset, n as usize, Through::Writer)
            }
            55..=59 => {
                let offset = self.rng.below(len + PAGE);
                let n = 1 + self.rng.below(20_000);
                self.read(offset, n as usize, Through::Reader)
            }
            60..=64 => self.get_page(len),
            65..=72 => self.sync(Sync::Data, 0, u64::MAX),
            73..=76 => self.sync(Sync::All, 0, u64::MAX),
            77..=82 => {
                let start = self.rng.below(len + 1);
                let n = 1 + self.rng.below(len - start + PAGE);
                self.sync(Sync::Range, start, n)
            }
            83..=86 => {
                let start = self.rng.below(len + 1);
                let n = 1 + self.rng.below(256 << 10);
                self.trace.push(format!("  writeback [{start}, +{n})"));
                self.file()
                    .writeback(start, n)
                    .map_err(|e| format!("writeback({start}, {n}): {e}"))
            }
            87..=93 => self.set_len(len),
            _ => self.reopen(),
        }
    }

    fn write(&mut self, len: u64) -> Result<(), String> {
        let n = match self.rng.below(10) {
            0..=3 => 1 + self.rng.below(64),
            4..=6 => 1 + self.rng.below(6000),
            7 => PAGE * (1 + self.rng.below(4)),
            _ => 1 + self.rng.below(70_000),
        };
        let mut offset = match self.rng.below(10) {
            0..=3 => len,
            4..=5 if len >= PAGE => PAGE * self.rng.below(len / PAGE),
            4..=7 if len > 0 => self.rng.below(len),
            _ => len + 1 + self.rng.below(3 * PAGE),
        };
        if offset + n > FILE_BYTES_MAX {
            offset = self.rng.below(len.min(FILE_BYTES_MAX - n) + 1);
        }
        let bytes = self.rng.bytes(n as usize);
        self.history.write(offset, bytes.clone(), Stored::Maybe);
        self.trace.push(format!(
            "  write #{} [{offset}, {})",
            self.history.writes() - 1,
            offset + n
        ));
        self.outcome.writes += 1;
        match self.file().write_at(&bytes, offset) {
            Ok(written) if written == bytes.len() => {
                self.history.settle_last(Stored::Yes);
                let end = (offset + n) as usize;
                if self.model.len() < end {
                    self.model.resize(end, 0);
                }
                self.model[offset as usize..end].copy_from_slice(&bytes);
                Ok(())
            }
            Ok(written) => Err(format!("write_at({offset}, {n}) returned {written}")),
            Err(e) => {
                self.failed(format!("write_at({offset}, {n})"), e)?;
                // Some pages may be written: the length is the file's now.
                let now = self.file().len() as usize;
                self.model.resize(now, 0);
                Ok(())
            }
        }
    }

    fn sync(&mut self, kind: Sync, offset: u64, n: u64) -> Result<(), String> {
        let writes_before = self.history.writes();
        let size = self.file().len();
        let file = self.file();
        let result = match kind {
            Sync::Data => file.sync_data(),
            Sync::All => file.sync_all(),
            Sync::Range => file.sync_range(offset, n),
        };
        match result {
            Ok(()) => {
                let end = offset.saturating_add(n);
                self.history.ack(writes_before, offset..end, size);
                self.outcome.acks += 1;
                self.trace.push(format!(
                    "  {kind:?} of [{offset}, +{n}) Ok: {writes_before} writes, size {size}"
                ));
                Ok(())
            }
            Err(e) => {
                // The writes before it may be lost (a given-up file drops its dirty data):
                // no later sync vouches for them.
                self.history.error(writes_before);
                self.failed(format!("{kind:?} of [{offset}, +{n})"), e)
            }
        }
    }

    fn set_len(&mut self, len: u64) -> Result<(), String> {
        let new = match self.rng.below(3) {
            0 => self.rng.below(len + 1),
            1 => len.saturating_sub(self.rng.below(2 * PAGE)),
            _ => (len + self.rng.below(3 * PAGE)).min(FILE_BYTES_MAX),
        };
        // The cut is a write of zeros (for the model); it returns once the file is cut.
        match self.file().set_len(new) {
            Ok(()) => {
                self.history.set_len(len, new);
                self.trace.push(format!("  set_len({new}) from {len}"));
                self.model.resize(new as usize, 0);
                Ok(())
            }
            Err(e) => {
                self.failed(format!("set_len({new})"), e)?;
                // The cache may have cut or grown the file before the error.
                if new < len {
                    self.history
                        .write(new, vec![0; (len - new) as usize], Stored::Maybe);
                }
                self.history.set_len(len, new.max(len));
                let now = self.file().len() as usize;
                self.model.resize(now, 0);
                Ok(())
            }
        }
    }

    fn read(&mut self, offset: u64, n: usize, through: Through) -> Result<(), String> {
        self.trace
            .push(format!("  read [{offset}, +{n}) {through:?}"));
        let mut buf = vec![0xA5u8; n];
        let result = match through {
            Through::Writer => self.file().read_at(&mut buf, offset),
            Through::Reader => self
                .shared
                .cache
                .open(self.path)
                .and_then(|reader| reader.read_at(&mut buf, offset)),
        };
        let got = match result {
            Ok(got) => got,
            Err(e) => return self.failed(format!("read_at({offset}, {n}) {through:?}"), e),
        };
        let len = self.model.len() as u64;
        let want = len.saturating_sub(offset).min(n as u64) as usize;
        if got != want {
            return Err(format!(
                "read_at({offset}, {n}) {through:?} of a {len}-byte file returned {got}, want {want}"
            ));
        }
        self.outcome.bytes_read += got as u64;
        self.check_bytes(offset, &buf[..got])
            .map_err(|e| format!("read_at({offset}, {n}) {through:?}: {e}"))
    }

    fn get_page(&mut self, len: u64) -> Result<(), String> {
        if len == 0 {
            return Ok(());
        }
        let offset = self.rng.below(len);
        self.trace.push(format!("  get_page({offset})"));
        let page = match self.file().get_page(offset) {
            Ok(page) => page,
            Err(e) => return self.failed(format!("get_page({offset})"), e),
        };
        let start = page.offset_bytes();
        if start > offset || offset >= start + page.len() as u64 || start + page.len() as u64 > len
        {
            return Err(format!(
                "get_page({offset}) of a {len}-byte file: {} bytes at {start}",
                page.len()
            ));
        }
        self.outcome.bytes_read += page.len() as u64;
        self.check_bytes(start, &page)
            .map_err(|e| format!("get_page({offset}): {e}"))
    }

    /// `got`, read at `offset`, is the model's (or, once faulted, bytes the disk may hold).
    fn check_bytes(&mut self, offset: u64, got: &[u8]) -> Result<(), String> {
        if got.is_empty() {
            return Ok(());
        }
        let want = &self.model[offset as usize..offset as usize + got.len()];
        if got == want {
            return Ok(());
        }
        let first = got
            .iter()
            .zip(want)
            .position(|(a, b)| a != b)
            .expect("a difference");
        if !self.faulted() {
            let at = offset + first as u64;
            let last = (first..got.len())
                .rev()
                .find(|&i| got[i] != want[i])
                .expect("a difference");
            let disk = std::fs::read(self.path).unwrap_or_default();
            return Err(format!(
                "byte {:#04x} at offset {at}, the model has {:#04x} (wrong through offset {}; the file on disk has {:?} there, and is {} bytes long)",
                got[first],
                want[first],
                offset + last as u64,
                disk.get(at as usize),
                disk.len()
            ));
        }
        self.outcome.loose_reads += 1;
        self.history.check_read_loosely(offset, got)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sync {
    Data,
    All,
    Range,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Through {
    /// The writer's own handle.
    Writer,
    /// A read-only handle opened for the read.
    Reader,
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a non-text panic".to_owned())
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
    })
}

fn replay_command(seed: u64) -> String {
    format!("FOLIO_WSIM_SEED={seed} cargo test -p folio --release --test write_simulation -- --nocapture")
}

/// Runs `seed` on its own thread, so that a hang is reported (with its replay command)
/// instead of hanging the test run.
fn run_bounded(seed: u64, base_dir: PathBuf, verbosity: Verbosity) -> Result<Outcome, String> {
    let (sender, result) = mpsc::channel();
    std::thread::Builder::new()
        .name(format!("wsim-{seed}"))
        .spawn(move || {
            let outcome = std::panic::catch_unwind(|| run_seed(seed, &base_dir, verbosity))
                .unwrap_or_else(|panic| Err(format!("panicked: {}", panic_text(&panic))));
            let _ = sender.send(outcome);
        })
        .expect("a seed thread");
    result
        .recv_timeout(SEED_TIME_MAX)
        .unwrap_or_else(|_| Err(format!("hung: still running after {SEED_TIME_MAX:?}")))
}

#[test]
fn seeds() {
    let repeat = env_u64("FOLIO_WSIM_REPEAT").unwrap_or(1).max(1);
    let (seeds, verbosity): (Vec<u64>, Verbosity) = match env_u64("FOLIO_WSIM_SEED") {
        Some(seed) => (vec![seed; repeat as usize], Verbosity::Verbose),
        None => {
            let first = env_u64("FOLIO_WSIM_FIRST").unwrap_or(0);
            let count = env_u64("FOLIO_WSIM_SEEDS").unwrap_or(SEEDS_DEFAULT);
            let seeds = (first..first + count)
                .flat_map(|seed| std::iter::repeat_n(seed, repeat as usize))
                .collect();
            (seeds, Verbosity::Quiet)
        }
    };
    let dir = match std::env::var_os("FOLIO_SIM_DIR") {
        Some(base) => tempfile::Builder::new()
            .prefix("folio-wsim-")
            .tempdir_in(base)
            .expect("a directory under FOLIO_SIM_DIR"),
        None => common::test_dir(),
    };
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let total = Mutex::new((Outcome::default(), Vec::<(u64, String)>::new()));
    std::thread::scope(|s| {
        for _ in 0..WORKERS.min(seeds.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&seed) = seeds.get(i) else {
                    return;
                };
                let result = run_bounded(seed, dir.path().to_owned(), verbosity);
                let mut total = total.lock().unwrap();
                match result {
                    Ok(outcome) => total.0.add(&outcome),
                    Err(error) => {
                        eprintln!(
                            "write simulation seed {seed} failed: {error}\n  replay: {}",
                            replay_command(seed)
                        );
                        total.1.push((seed, error));
                        // Stop handing out seeds: the first failures are what matter.
                        next.store(seeds.len(), Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let (sum, failures) = total.into_inner().unwrap();
    eprintln!(
        "write simulation: {} of {} seed runs passed in {:.1?}: {sum:?}",
        sum.seeds,
        seeds.len(),
        started.elapsed()
    );
    if let Some((seed, error)) = failures.first() {
        panic!(
            "seed {seed} failed: {error}\nreplay: {}",
            replay_command(*seed)
        );
    }
    if verbosity == Verbosity::Verbose {
        return;
    }
    // The seeds must exercise what they claim to.
    assert!(
        sum.acks > 0 && sum.writes > 0 && sum.bytes_read > 0,
        "{sum:?}"
    );
    assert!(sum.blocks_kept > 0 && sum.blocks_lost > 0, "{sum:?}");
    assert!(sum.short_injected > 0 && sum.reordered > 0, "{sum:?}");
    assert!(sum.fault_windows > 0 && sum.errors > 0, "{sum:?}");
}

/// The durability model itself (`common/durability.rs`) rejects what it must: without
/// these, a model that accepts everything would pass every seed.
#[test]
fn the_model_rejects_lost_acknowledged_bytes_and_bytes_nobody_wrote() {
    // base "aaaa", write "bb" at 1, sync, write "cc" at 2 (not synced).
    let mut history = History::new(b"aaaa".to_vec());
    history.write(1, b"bb".to_vec(), Stored::Yes);
    history.ack(1, 0..u64::MAX, 4);
    history.write(2, b"cc".to_vec(), Stored::Yes);
    assert_eq!(history.check(b"abba"), Ok(()));
    assert_eq!(history.check(b"abca"), Ok(()), "a later write may land");
    assert_eq!(history.check(b"abcc"), Ok(()));
    assert!(history.check(b"aaba").is_err(), "an acknowledged byte lost");
    assert!(history.check(b"abbz").is_err(), "a byte nobody wrote");
    assert!(history.check(b"abb").is_err(), "shorter than acknowledged");
    assert!(history.check(&[b'a'; 4097]).is_err(), "longer than ever");
    // Before any acknowledgement, the base or any write.
    let mut history = History::new(b"aaaa".to_vec());
    history.write(0, b"xy".to_vec(), Stored::Yes);
    assert_eq!(history.check(b"xaaa"), Ok(()));
    assert!(
        history.check(b"yaaa").is_err(),
        "a write's byte at another offset"
    );
    // A failed write vouches for nothing; a range acknowledgement only for its range.
    let mut history = History::new(b"aaaa".to_vec());
    history.write(0, b"bbbb".to_vec(), Stored::Maybe);
    history.write(2, b"cc".to_vec(), Stored::Yes);
    history.ack(2, 2..3, 4);
    assert_eq!(history.check(b"abca"), Ok(()));
    assert_eq!(history.check(b"bbcb"), Ok(()));
    assert!(history.check(b"aaba").is_err(), "the range's byte lost");
    // A cut is a write of zeros: after it and a sync, zeros are vouched for.
    let mut history = History::new(b"aaaa".to_vec());
    history.set_len(4, 2);
    history.set_len(2, 4);
    history.ack(1, 0..u64::MAX, 4);
    assert_eq!(history.check(b"aa\0\0"), Ok(()));
    assert!(
        history.check(b"aaaa").is_err(),
        "cut bytes came back after a sync"
    );
    // A reported error: the writes before it are vouched for only by the syncs before it.
    let mut history = History::new(b"aaaa".to_vec());
    history.write(0, b"b".to_vec(), Stored::Yes);
    history.ack(1, 0..u64::MAX, 4);
    history.write(1, b"c".to_vec(), Stored::Yes);
    history.error(2);
    history.write(2, b"d".to_vec(), Stored::Yes);
    history.ack(3, 0..u64::MAX, 4);
    assert_eq!(
        history.check(b"bada"),
        Ok(()),
        "the write before the error lost"
    );
    assert_eq!(history.check(b"bcda"), Ok(()));
    assert!(
        history.check(b"aada").is_err(),
        "a write acknowledged before the error lost"
    );
    assert!(
        history.check(b"bcaa").is_err(),
        "a write acknowledged after the error lost"
    );
    // Loose reads follow the same rule.
    let mut history = History::new(b"aaaa".to_vec());
    history.write(1, b"bb".to_vec(), Stored::Yes);
    history.ack(1, 0..u64::MAX, 4);
    assert_eq!(history.check_read_loosely(1, b"b"), Ok(()));
    assert!(history.check_read_loosely(1, b"a").is_err());
}
