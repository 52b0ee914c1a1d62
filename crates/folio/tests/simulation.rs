//! Deterministic simulation: for each seed, a small cache over a few pattern files, read by
//! several threads at once through a fault backend whose faults the seed draws (EIO,
//! short reads, delayed and reordered completions; `folio::io::fault`, "Seeded
//! simulation"). The seed also draws the cache (capacity 64-256 KiB, folio sizes,
//! eviction policy, readahead window, backend) and every thread's operations: `read_at`
//! anywhere (past the end too), sequential scans, `get_page` (some held across later
//! operations: together, up to all of the cache but one frame per reader,
//! `pinned_bytes_max`), `readahead`, `advise`, handles opened and dropped.
//!
//! What each seed proves:
//! - every successful read returns exactly the file's bytes, and exactly as many as
//!   exist; a pinned page keeps its bytes while it is held;
//! - every error is an injected EIO (never another error, never a panic), and no seed runs
//!   longer than `SEED_TIME_MAX` (a hang is a failure);
//! - the readahead window of every handle is possible: `async <= size`, within the file;
//! - every injected fault is accounted for: the cache counted exactly as many failed
//!   reads as EIOs were injected, no operation failed when none was, each injected EIO
//!   failed at most one operation per thread (the readers waiting on it) and the clean
//!   pass, and short reads completed by a retry are injected ones;
//! - errors are never cached: once the faults are cleared, every page of every file reads
//!   correctly (a first pass may still meet failures of reads submitted before the
//!   clear; a second pass must not fail at all); the cache stayed within its capacity.
//!
//! A failing seed prints the command that replays it. The faults of each request replay
//! exactly (they depend on the seed and the request's range, not on timing); the threads'
//! interleavings do not, so `FOLIO_SIM_REPEAT` runs a replayed seed many times.
//!
//! Environment: `FOLIO_SIM_SEEDS=n` runs seeds 0..n (default 1000), `FOLIO_SIM_FIRST=k`
//! starts at seed k, `FOLIO_SIM_SEED=s` runs seed s only and prints what it did,
//! `FOLIO_SIM_REPEAT=r` runs each seed r times, `FOLIO_SIM_DIR` puts the files elsewhere
//! (default: the target directory, where O_DIRECT works; a tmpfs runs buffered).

mod common;

use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use folio::io::fault::{FaultBackend, FaultControl, SimConfig};
use folio::io::pread::PreadBackend;
use folio::io::uring::{UringBackend, QUEUE_DEPTH};
use folio::io::Backend;
use folio::{Advice, Cache, EvictionKind, File, PageRef};

const SEEDS_DEFAULT: u64 = 1000;
/// A seed that runs longer than this has hung (a seed takes milliseconds).
const SEED_TIME_MAX: Duration = Duration::from_secs(30);
/// Seeds run side by side: each spends most of its time waiting for I/O and delays.
const WORKERS: usize = 4;
const PAGE: u64 = 4096;
/// The most bytes one of `threads` readers keeps pinned across operations: together they
/// leave one frame per reader that nobody pins. That is what their reads need to make
/// progress: a read needs one free frame (its first folio falls back to order 0 when the
/// free memory is fragmented; the rest of its run and any readahead take only what is
/// free), and every other folio is evictable or has I/O in flight that completes. So an
/// `OutOfMemory` here is a bug: a policy hiding evictable folios from reclaim, as
/// S3-FIFO's small queue (seed 96) and the LRU's inactive list (seed 2062) did when all
/// pinned (`tests/regressions.rs`). Pinning more makes `OutOfMemory` a correct answer
/// (the whole cache pinned: `tests/faults.rs`). The same rule for both policies.
fn pinned_bytes_max(capacity_bytes: u64, threads: u64) -> u64 {
    (capacity_bytes / PAGE).saturating_sub(threads) / threads * PAGE
}

/// The memory a pinned view holds: its folio, which ends with the file's last page when
/// the view is cut short by the end of the file (no folio reaches past that page).
fn pinned_bytes(page: &PageRef) -> u64 {
    (page.len() as u64).next_multiple_of(PAGE)
}

/// The files every seed chooses from: (length, salt). Empty, under a page, a partial last
/// page, whole pages, and more than the largest cache.
const FILES: [(u64, u64); 6] = [
    (0, 0x11),
    (3000, 0x22),
    (5 * PAGE + 123, 0x33),
    (64 * PAGE, 0x44),
    (200_000, 0x55),
    (700_000, 0x66),
];

struct SimFile {
    path: PathBuf,
    len: u64,
    salt: u64,
}

/// The files, written once per test process.
fn files() -> &'static [SimFile] {
    static FILES_MADE: OnceLock<(Option<tempfile::TempDir>, Vec<SimFile>)> = OnceLock::new();
    let (_dir, files) = FILES_MADE.get_or_init(|| {
        let (dir, base) = match std::env::var_os("FOLIO_SIM_DIR") {
            Some(base) => {
                let dir = tempfile::Builder::new()
                    .prefix("folio-sim-")
                    .tempdir_in(base)
                    .expect("a directory under FOLIO_SIM_DIR");
                let path = dir.path().to_owned();
                (dir, path)
            }
            None => {
                let dir = common::test_dir();
                let path = dir.path().to_owned();
                (dir, path)
            }
        };
        let files = FILES
            .iter()
            .enumerate()
            .map(|(i, &(len, salt))| {
                let path = base.join(format!("file{i}"));
                common::write_pattern_file(&path, salt, len);
                SimFile { path, len, salt }
            })
            .collect();
        (Some(dir), files)
    });
    files
}

/// SplitMix64: a seed-driven generator whose every output depends on the seed alone.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5151_5151_5151_5151)
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
}

/// What one seed set up, for the replay output.
#[derive(Debug)]
struct Setup {
    sim: SimConfig,
    capacity_bytes: u64,
    folio_order_max: u8,
    readahead_max_bytes: u64,
    eviction: EvictionKind,
    backend: &'static str,
    files: Vec<usize>,
    threads: usize,
    ops_per_thread: usize,
}

/// What one seed did (or, summed, what a run did).
#[derive(Debug, Default)]
struct Outcome {
    seeds: u64,
    ops: u64,
    bytes_checked: u64,
    errors_surfaced: u64,
    eio_injected: u64,
    short_injected: u64,
    reordered: u64,
    /// Folios held across operations (`get_page` results kept).
    pins_kept: u64,
}

fn draw_setup(rng: &mut Rng) -> Setup {
    let delay_max_us = rng.pick(&[0u64, 20, 100, 400]);
    let sim = SimConfig {
        eio_per_mille: rng.pick(&[0, 10, 50, 150, 400]),
        short_per_mille: rng.pick(&[0, 100, 300]),
        delay_max: Duration::from_micros(delay_max_us),
        reorder: rng.pick(&[0, 0, 2, 4]),
        hold_max: Duration::from_micros(rng.pick(&[100, 300, 1000])),
    };
    let file_count = 1 + rng.below(3) as usize;
    let mut chosen: Vec<usize> = Vec::new();
    while chosen.len() < file_count {
        let file = rng.below(FILES.len() as u64) as usize;
        if !chosen.contains(&file) {
            chosen.push(file);
        }
    }
    Setup {
        sim,
        capacity_bytes: PAGE * rng.pick(&[16, 24, 32, 64]),
        folio_order_max: rng.pick(&[0, 2, 4, 9]),
        readahead_max_bytes: rng.pick(&[0, 32 << 10, 128 << 10, 2 << 20]),
        eviction: rng.pick(&[EvictionKind::S3Fifo, EvictionKind::TwoListLru]),
        backend: rng.pick(&["pread", "pread", "io_uring"]),
        files: chosen,
        threads: 2 + rng.below(3) as usize,
        ops_per_thread: 10 + rng.below(30) as usize,
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

/// One seed, start to end. `Err` describes the first thing that went wrong.
fn run_seed(seed: u64, verbosity: Verbosity) -> Result<Outcome, String> {
    let files = files();
    let mut rng = Rng::new(seed);
    let setup = draw_setup(&mut rng);
    let started = Instant::now();
    if verbosity == Verbosity::Verbose {
        eprintln!("seed {seed}: {setup:#?}");
    }
    let (backend, control) = FaultBackend::seeded(inner_backend(setup.backend), seed, setup.sim);
    let cache = Cache::builder()
        .capacity_bytes(setup.capacity_bytes)
        .folio_order_max(setup.folio_order_max)
        .readahead_max_bytes(setup.readahead_max_bytes)
        .eviction(setup.eviction)
        .alloc_wait(Duration::from_secs(10))
        .build_with_backend(Box::new(backend))
        .map_err(|e| format!("building the cache: {e}"))?;
    let chosen: Vec<&SimFile> = setup.files.iter().map(|&i| &files[i]).collect();
    let shared: Vec<Arc<File>> = chosen
        .iter()
        .map(|f| cache.open(&f.path).map(Arc::new))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("open: {e}"))?;
    let thread_seeds: Vec<u64> = (0..setup.threads).map(|_| rng.next()).collect();
    let results: Vec<Result<Outcome, String>> = std::thread::scope(|s| {
        let readers: Vec<_> = thread_seeds
            .iter()
            .enumerate()
            .map(|(t, &thread_seed)| {
                let (cache, chosen, shared) = (&cache, &chosen, &shared);
                let ops = setup.ops_per_thread;
                let pinned_bytes_max = pinned_bytes_max(setup.capacity_bytes, setup.threads as u64);
                std::thread::Builder::new()
                    .name(format!("sim-{seed}-{t}"))
                    .spawn_scoped(s, move || {
                        Reader::new(
                            cache,
                            chosen,
                            shared,
                            thread_seed,
                            pinned_bytes_max,
                            verbosity,
                        )
                        .run(t, ops)
                    })
                    .expect("a reader thread")
            })
            .collect();
        readers
            .into_iter()
            .map(|reader| {
                reader.join().unwrap_or_else(|panic| {
                    Err(format!("a reader panicked: {}", panic_text(&panic)))
                })
            })
            .collect()
    });
    let mut outcome = Outcome::default();
    for result in results {
        let reader = result?;
        outcome.ops += reader.ops;
        outcome.bytes_checked += reader.bytes_checked;
        outcome.errors_surfaced += reader.errors_surfaced;
        outcome.pins_kept += reader.pins_kept;
    }
    check_accounting(&cache, &control, &chosen, &setup, &mut outcome)?;
    if verbosity == Verbosity::Verbose {
        eprintln!(
            "seed {seed}: {outcome:?} in {:?}\n{:?}",
            started.elapsed(),
            cache.stats()
        );
    }
    Ok(outcome)
}

/// After the readers: clear the faults, read everything twice, and check the counters.
fn check_accounting(
    cache: &Cache,
    control: &FaultControl,
    chosen: &[&SimFile],
    setup: &Setup,
    outcome: &mut Outcome,
) -> Result<(), String> {
    control.clear();
    for pass in 0..2 {
        for file in chosen {
            let handle = cache.open(&file.path).map_err(|e| format!("reopen: {e}"))?;
            let mut buf = vec![0u8; 64 << 10];
            let mut at = 0;
            while at < file.len {
                match handle.read_at(&mut buf, at) {
                    Ok(n) => {
                        let want = (file.len - at).min(buf.len() as u64) as usize;
                        if n != want {
                            return Err(format!("clean pass {pass}: read_at({at}) = {n}, want {want}"));
                        }
                        common::check_pattern(file.salt, at, &buf[..n]).map_err(|bad| {
                            format!("clean pass {pass}: wrong byte at offset {bad} of {}", file.path.display())
                        })?;
                        outcome.bytes_checked += n as u64;
                        at += n as u64;
                    }
                    // A read submitted before the clear may still fail; after one whole
                    // pass, every such read has completed.
                    Err(e) if pass == 0 && e.raw_os_error() == Some(libc::EIO) => {
                        outcome.errors_surfaced += 1;
                    }
                    Err(e) => {
                        return Err(format!(
                            "clean pass {pass}: read_at({at}) failed after the faults were cleared (an error was cached?): {e}"
                        ))
                    }
                }
            }
        }
    }
    let stats = cache.stats();
    outcome.eio_injected = control.eio_injected();
    outcome.short_injected = control.short_injected();
    outcome.reordered = control.reordered();
    if stats.io_errors != outcome.eio_injected {
        return Err(format!(
            "{} EIOs injected but the cache counted {} failed reads",
            outcome.eio_injected, stats.io_errors
        ));
    }
    if outcome.errors_surfaced > outcome.eio_injected * (setup.threads as u64 + 1) {
        return Err(format!(
            "{} errors surfaced from {} injected EIOs and {} threads",
            outcome.errors_surfaced, outcome.eio_injected, setup.threads
        ));
    }
    if stats.short_read_retries > outcome.short_injected {
        return Err(format!(
            "{} short reads retried but only {} injected",
            stats.short_read_retries, outcome.short_injected
        ));
    }
    if stats.cached_bytes > stats.capacity_bytes {
        return Err(format!("cache over capacity: {stats:?}"));
    }
    Ok(())
}

/// One reader thread: its own generator, handles and pins.
struct Reader<'a> {
    cache: &'a Cache,
    files: &'a [&'a SimFile],
    shared: &'a [Arc<File>],
    /// Handles this thread opened itself (one per file, opened lazily).
    own: Vec<Option<File>>,
    /// Sequential cursors, one per file.
    cursors: Vec<u64>,
    /// Pages held across operations, re-checked before they are dropped.
    pins: Vec<(usize, PageRef)>,
    /// The most bytes this thread keeps pinned (`pinned_bytes_max`): every reader must
    /// always find memory (a cache whose every folio is pinned fails reads with
    /// `OutOfMemory`, by design).
    pinned_bytes_max: u64,
    rng: Rng,
    verbosity: Verbosity,
    outcome: Outcome,
}

impl<'a> Reader<'a> {
    fn new(
        cache: &'a Cache,
        files: &'a [&'a SimFile],
        shared: &'a [Arc<File>],
        seed: u64,
        pinned_bytes_max: u64,
        verbosity: Verbosity,
    ) -> Reader<'a> {
        Reader {
            cache,
            files,
            shared,
            own: files.iter().map(|_| None).collect(),
            cursors: vec![0; files.len()],
            pins: Vec::new(),
            pinned_bytes_max,
            rng: Rng::new(seed),
            verbosity,
            outcome: Outcome::default(),
        }
    }

    fn run(mut self, thread: usize, ops: usize) -> Result<Outcome, String> {
        for op in 0..ops {
            self.step()
                .map_err(|e| format!("thread {thread}, operation {op}: {e}"))?;
            self.outcome.ops += 1;
        }
        for (file, pin) in std::mem::take(&mut self.pins) {
            self.check_pin(file, &pin)?;
        }
        Ok(self.outcome)
    }

    /// The handle an operation uses: the shared one, or this thread's own.
    fn handle(&mut self, file: usize) -> Result<&File, String> {
        if self.rng.chance_per_mille(600) {
            return Ok(&self.shared[file]);
        }
        if self.own[file].is_none() {
            let opened = self
                .cache
                .open(&self.files[file].path)
                .map_err(|e| format!("open: {e}"))?;
            self.own[file] = Some(opened);
        }
        Ok(self.own[file].as_ref().expect("opened above"))
    }

    fn step(&mut self) -> Result<(), String> {
        let file = self.rng.below(self.files.len() as u64) as usize;
        let len = self.files[file].len;
        let choice = self.rng.below(100);
        let result = match choice {
            0..=29 => {
                // Anywhere, past the end too, of any small length.
                let offset = self.rng.below(len + 3 * PAGE);
                let n = self.rng.pick(&[1u64, 100, 4096, 9000, 40_000]);
                let n = 1 + self.rng.below(n);
                self.read_at(file, offset, n as usize)
            }
            30..=54 => {
                // A sequential scan: the reads that open and ramp readahead windows.
                let chunk = self.rng.pick(&[4096usize, 8192, 16_384, 5000]);
                let offset = self.cursors[file];
                self.cursors[file] = if offset + chunk as u64 >= len {
                    0
                } else {
                    offset + chunk as u64
                };
                self.read_at(file, offset, chunk)
            }
            55..=69 => self.get_page(file),
            70..=77 => {
                let offset = self.rng.below(len + PAGE);
                let n = self.rng.below(256 << 10);
                let handle = self.handle(file)?;
                handle
                    .readahead(offset, n)
                    .map_err(|e| format!("readahead({offset}, {n}): {e}"))
            }
            78..=89 => {
                let advice = self.rng.pick(&[
                    Advice::Normal,
                    Advice::Sequential,
                    Advice::Random,
                    Advice::WillNeed,
                    Advice::DontNeed,
                    Advice::DontNeed,
                ]);
                let offset = self.rng.below(len + PAGE);
                let n = self.rng.below(len + PAGE);
                let handle = self.handle(file)?;
                handle
                    .advise(offset, n, advice)
                    .map_err(|e| format!("advise({offset}, {n}, {advice:?}): {e}"))
            }
            90..=93 => {
                let bytes = self.rng.pick(&[0u64, 16 << 10, 64 << 10, 1 << 20]);
                self.handle(file)?.set_readahead_max_bytes(bytes);
                Ok(())
            }
            94..=96 => {
                // Close this thread's handle (a new one opens on next use).
                self.own[file] = None;
                Ok(())
            }
            _ => {
                // Let go of the pins, checking them first.
                for (file, pin) in std::mem::take(&mut self.pins) {
                    self.check_pin(file, &pin)?;
                }
                Ok(())
            }
        };
        result?;
        self.check_windows(file)
    }

    fn read_at(&mut self, file: usize, offset: u64, n: usize) -> Result<(), String> {
        let (len, salt) = (self.files[file].len, self.files[file].salt);
        let mut buf = vec![0xA5u8; n];
        let handle = self.handle(file)?;
        match handle.read_at(&mut buf, offset) {
            Ok(got) => {
                let want = len.saturating_sub(offset).min(n as u64) as usize;
                if got != want {
                    return Err(format!(
                        "read_at({offset}, {n}) of a {len}-byte file returned {got}, want {want}"
                    ));
                }
                common::check_pattern(salt, offset, &buf[..got])
                    .map_err(|bad| format!("read_at({offset}, {n}): wrong byte at offset {bad}"))?;
                self.outcome.bytes_checked += got as u64;
                Ok(())
            }
            Err(e) => self.injected(e, || format!("read_at({offset}, {n})")),
        }
    }

    fn get_page(&mut self, file: usize) -> Result<(), String> {
        let len = self.files[file].len;
        let offset = self.rng.below(len + PAGE);
        let keep = self.rng.chance_per_mille(300);
        let handle = self.handle(file)?;
        match handle.get_page(offset) {
            Ok(page) => {
                let start = page.offset_bytes();
                if offset >= len
                    || start % PAGE != 0
                    || start > offset
                    || offset >= start + page.len() as u64
                    || start + page.len() as u64 > len
                {
                    return Err(format!(
                        "get_page({offset}) of a {len}-byte file: a page of {} bytes at {start}",
                        page.len()
                    ));
                }
                self.check_pin(file, &page)?;
                let pinned: u64 = self.pins.iter().map(|(_, pin)| pinned_bytes(pin)).sum();
                if keep && pinned + pinned_bytes(&page) <= self.pinned_bytes_max {
                    self.pins.push((file, page));
                    self.outcome.pins_kept += 1;
                }
                Ok(())
            }
            Err(e) if offset >= len && e.kind() == ErrorKind::UnexpectedEof => Ok(()),
            Err(e) => self.injected(e, || format!("get_page({offset})")),
        }
    }

    /// A page's bytes are the file's, from the moment it is returned until it is dropped.
    fn check_pin(&mut self, file: usize, page: &PageRef) -> Result<(), String> {
        let salt = self.files[file].salt;
        common::check_pattern(salt, page.offset_bytes(), page).map_err(|bad| {
            format!(
                "pinned page at {}: wrong byte at offset {bad}",
                page.offset_bytes()
            )
        })?;
        self.outcome.bytes_checked += page.len() as u64;
        Ok(())
    }

    /// An error is acceptable only if it is an injected EIO.
    fn injected(&mut self, error: std::io::Error, what: impl Fn() -> String) -> Result<(), String> {
        if error.raw_os_error() != Some(libc::EIO) {
            return Err(format!("{}: {error} is not an injected EIO", what()));
        }
        if self.verbosity == Verbosity::Verbose {
            eprintln!("{}: {error}", what());
        }
        self.outcome.errors_surfaced += 1;
        Ok(())
    }

    /// Every window a handle reports is one the policy could have made, within the file.
    fn check_windows(&self, file: usize) -> Result<(), String> {
        let len = self.files[file].len;
        let handles = std::iter::once(&*self.shared[file]).chain(self.own[file].as_ref());
        for handle in handles {
            let w = handle.readahead_window();
            let possible = w.async_bytes <= w.size_bytes
                && w.size_bytes <= 16 << 20
                && w.start_bytes % PAGE == 0
                && (w.size_bytes == 0 || w.start_bytes < len.div_ceil(PAGE) * PAGE);
            if !possible {
                return Err(format!(
                    "impossible readahead window {w:?} in a {len}-byte file"
                ));
            }
        }
        Ok(())
    }
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
    format!("FOLIO_SIM_SEED={seed} cargo test -p folio --release --test simulation -- --nocapture")
}

/// Runs `seed` on its own thread, so that a hang is reported (with its replay command)
/// instead of hanging the test run.
fn run_bounded(seed: u64, verbosity: Verbosity) -> Result<Outcome, String> {
    let (sender, result) = mpsc::channel();
    std::thread::Builder::new()
        .name(format!("sim-{seed}"))
        .spawn(move || {
            let outcome = std::panic::catch_unwind(|| run_seed(seed, verbosity))
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
    let repeat = env_u64("FOLIO_SIM_REPEAT").unwrap_or(1).max(1);
    let (seeds, verbosity): (Vec<u64>, Verbosity) = match env_u64("FOLIO_SIM_SEED") {
        Some(seed) => (vec![seed; repeat as usize], Verbosity::Verbose),
        None => {
            let first = env_u64("FOLIO_SIM_FIRST").unwrap_or(0);
            let count = env_u64("FOLIO_SIM_SEEDS").unwrap_or(SEEDS_DEFAULT);
            let seeds = (first..first + count)
                .flat_map(|seed| std::iter::repeat_n(seed, repeat as usize))
                .collect();
            (seeds, Verbosity::Quiet)
        }
    };
    files();
    let started = Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let total = std::sync::Mutex::new((Outcome::default(), Vec::<(u64, String)>::new()));
    std::thread::scope(|s| {
        for _ in 0..WORKERS.min(seeds.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&seed) = seeds.get(i) else {
                    return;
                };
                let result = run_bounded(seed, verbosity);
                let mut total = total.lock().unwrap();
                match result {
                    Ok(outcome) => {
                        let sum = &mut total.0;
                        sum.seeds += 1;
                        sum.ops += outcome.ops;
                        sum.bytes_checked += outcome.bytes_checked;
                        sum.errors_surfaced += outcome.errors_surfaced;
                        sum.eio_injected += outcome.eio_injected;
                        sum.short_injected += outcome.short_injected;
                        sum.reordered += outcome.reordered;
                        sum.pins_kept += outcome.pins_kept;
                    }
                    Err(error) => {
                        eprintln!(
                            "simulation seed {seed} failed: {error}\n  replay: {}",
                            replay_command(seed)
                        );
                        total.1.push((seed, error));
                        // Stop handing out seeds: the first failures are what matter.
                        next.store(seeds.len(), std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let (sum, failures) = total.into_inner().unwrap();
    eprintln!(
        "simulation: {} of {} seed runs passed in {:.1?}: {} operations, {} bytes checked, {} EIOs injected, {} errors surfaced, {} short reads, {} completions reordered, {} folios held across operations",
        sum.seeds,
        seeds.len(),
        started.elapsed(),
        sum.ops,
        sum.bytes_checked,
        sum.eio_injected,
        sum.errors_surfaced,
        sum.short_injected,
        sum.reordered,
        sum.pins_kept
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
    assert!(sum.eio_injected > 0 && sum.errors_surfaced > 0, "{sum:?}");
    assert!(sum.short_injected > 0 && sum.reordered > 0, "{sum:?}");
    assert!(sum.pins_kept > 0, "{sum:?}");
}
