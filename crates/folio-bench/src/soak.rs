//! `folio-bench soak`: a long randomized run of everything at once against one small cache
//! whose reads fail on purpose, ending with an account of every byte and every fault.
//!
//! Design: a handful of keyed data files (empty, tiny, unaligned, a few MiB, and one
//! bigger than the cache; `data`'s keyed pattern, so a byte of the wrong file or offset is
//! caught) are read through ONE cache over the fault backend in its seeded simulation mode
//! (`folio::io::fault`: EIO, short reads, delays and reordered completions, each drawn from
//! a hash of the seed and the request). Reader threads, many more than cores, each loop
//! over weighted random operations until the deadline:
//!
//! ```text
//!   read_at anywhere (past the end too) · sequential scans · get_page, some held a while
//!   readahead · advise (all five) · set_readahead_max_bytes · close and reopen a handle
//! ```
//!
//! Every successful read is checked byte for byte and must be exactly as long as the file
//! allows; every failure must be an injected EIO (anything else is "unexplained"). Once
//! the readers stop, the faults are cleared and every file is read twice: the first pass
//! may still meet an EIO drawn before the clear, the second must not fail at all (an error
//! must never be cached). Then the account: the cache counted exactly the EIOs the backend
//! injected (each reached the cache once, nothing else failed), no more short-read
//! retries than short reads injected, surfaced errors within what the injected EIOs and
//! their waiters explain, and the cache never above its capacity (sampled every 10 ms).
//!
//! The verdict is a pass only if all of that holds; the process exits 1 otherwise.
//!
//! Limits: the files do not change during the soak (`tests/resources.rs` and
//! `tests/changing_files.rs` cover files that do); `--seed` replays the faults a request
//! meets, not the threads' interleaving.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use folio::io::fault::{FaultBackend, FaultControl, SimConfig};
use folio::{Advice, Cache, EvictionKind, File, PageRef};
use serde_json::json;

use crate::data;
use crate::measure::Rng;

/// Options of `folio-bench soak`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// How long the readers run, in seconds
    #[arg(long, default_value_t = 60.0)]
    seconds: f64,
    /// Reader threads (many more than cores, so that every race gets its chance)
    #[arg(long, default_value_t = 16)]
    threads: usize,
    /// MiB of folio memory: small, so that eviction runs all the time
    #[arg(long, default_value_t = 8)]
    cache_mib: u64,
    /// The simulation's seed [default: from the clock; printed, to replay the faults]
    #[arg(long)]
    seed: Option<u64>,
    /// Reads, per thousand, that fail with EIO
    #[arg(long, default_value_t = 10)]
    eio_per_mille: u32,
    /// Reads longer than a page, per thousand, that come back short
    #[arg(long, default_value_t = 30)]
    short_per_mille: u32,
    /// The longest completion delay, in microseconds
    #[arg(long, default_value_t = 2000)]
    delay_max_us: u64,
    /// Completions held back at once to be released out of order (0: none)
    #[arg(long, default_value_t = 8)]
    reorder: usize,
    /// folio's eviction policy
    #[arg(long, value_enum, default_value_t = Policy::S3fifo)]
    eviction: Policy,
    /// folio's I/O engine under the fault backend
    #[arg(long, value_enum, default_value_t = crate::Backend::Auto)]
    backend: crate::Backend,
    /// Directory for the data files (kept and reused); default: a fresh temporary
    /// directory, removed at exit
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write the summary as JSON to PATH
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Policy {
    S3fifo,
    Lru,
}

/// The data files: (name, length). Every case of a file's end: empty, under a page, an
/// unaligned tail, whole pages, large folios, and more than the default cache holds.
const FILES: [(&str, u64); 6] = [
    ("empty", 0),
    ("tiny", 100),
    ("unaligned", 3 * 4096 + 17),
    ("one-mib", 1 << 20),
    ("six-mib-odd", (6 << 20) + 4095),
    ("bigger-than-cache", 24 << 20),
];

/// The largest single `read_at` a reader makes.
const READ_BYTES_MAX: u64 = 256 << 10;
/// Pages a reader holds at most at once (`get_page`).
const HELD_MAX: usize = 4;
/// The share of the cache all readers together may hold pinned: pinned folios cannot be
/// evicted, and a cache pinned full rightly fails reads with `OutOfMemory`.
const HELD_SHARE_DIVISOR: u64 = 4;
/// Distinct errors kept for the report.
const ERRORS_KEPT: usize = 10;

/// One data file of the soak.
struct SoakFile {
    path: PathBuf,
    len: u64,
    key: u64,
}

/// Counters every reader adds to.
struct Tally {
    operations: AtomicU64,
    reads: AtomicU64,
    pages_got: AtomicU64,
    readaheads: AtomicU64,
    advises: AtomicU64,
    reopens: AtomicU64,
    bytes_verified: AtomicU64,
    wrong_bytes: AtomicU64,
    eio_surfaced: AtomicU64,
    unexplained: AtomicU64,
    /// Bytes of the pages all readers hold now, and the most they may hold.
    held_bytes: AtomicU64,
    held_bytes_max: u64,
    /// The first few failures, for the report.
    errors: Mutex<Vec<String>>,
}

impl Tally {
    fn new(held_bytes_max: u64) -> Tally {
        Tally {
            operations: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            pages_got: AtomicU64::new(0),
            readaheads: AtomicU64::new(0),
            advises: AtomicU64::new(0),
            reopens: AtomicU64::new(0),
            bytes_verified: AtomicU64::new(0),
            wrong_bytes: AtomicU64::new(0),
            eio_surfaced: AtomicU64::new(0),
            unexplained: AtomicU64::new(0),
            held_bytes: AtomicU64::new(0),
            held_bytes_max,
            errors: Mutex::new(Vec::new()),
        }
    }

    /// Takes `bytes` of the budget for held pages; false if it would go over.
    fn try_hold(&self, bytes: u64) -> bool {
        self.held_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held + bytes <= self.held_bytes_max).then_some(held + bytes)
            })
            .is_ok()
    }

    fn release(&self, bytes: u64) {
        self.held_bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn fail(&self, counter: &AtomicU64, n: u64, what: String) {
        Tally::add(counter, n);
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        if errors.len() < ERRORS_KEPT {
            errors.push(what);
        }
    }
}

/// Runs the soak, prints its summary, writes the JSON; `Ok(false)` if it failed.
pub fn run(args: &Args) -> io::Result<bool> {
    let seed = args.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let (dir, _temp) = crate::data_dir(args.dir.as_deref())?;
    let files = make_files(&dir)?;
    let config = SimConfig {
        eio_per_mille: args.eio_per_mille.min(1000),
        short_per_mille: args.short_per_mille.min(1000),
        delay_max: Duration::from_micros(args.delay_max_us),
        reorder: args.reorder,
        hold_max: Duration::from_micros(args.delay_max_us.max(100)),
    };
    let inner = folio::io::open_backend(args.backend.into(), 4)?;
    let (backend, control) = FaultBackend::seeded(inner, seed, config);
    let cache = Cache::builder()
        .capacity_bytes((args.cache_mib << 20).max(folio::CAPACITY_BYTES_MIN))
        .eviction(match args.eviction {
            Policy::S3fifo => EvictionKind::S3Fifo,
            Policy::Lru => EvictionKind::TwoListLru,
        })
        .alloc_wait(Duration::from_secs(10))
        .build_with_backend(Box::new(backend))?;
    let stats = cache.stats();
    println!(
        "soak: {:.0} s, {} threads, seed {seed}, cache {} MiB ({}, {}), faults: {config:?}",
        args.seconds, args.threads, args.cache_mib, stats.eviction, stats.backend
    );
    println!("data in {} ({} files)", dir.display(), files.len());

    let tally = Tally::new(stats.capacity_bytes / HELD_SHARE_DIVISOR);
    let over_capacity = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.seconds.max(0.0));
    thread::scope(|s| {
        for t in 0..args.threads {
            let (cache, files, tally, stop) = (&cache, &files, &tally, &stop);
            let thread_seed = seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            s.spawn(move || Reader::new(cache, files, tally, thread_seed).run(stop));
        }
        let mut last_report = Instant::now();
        while Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
            let st = cache.stats();
            if st.cached_bytes > st.capacity_bytes {
                over_capacity.fetch_add(1, Ordering::Relaxed);
            }
            if last_report.elapsed() >= Duration::from_secs(10) {
                last_report = Instant::now();
                println!(
                    "  {:>4.0} s: {} operations, {:.2} GB verified, {} EIOs injected, {} surfaced, {} wrong bytes",
                    started.elapsed().as_secs_f64(),
                    Tally::get(&tally.operations),
                    Tally::get(&tally.bytes_verified) as f64 / 1e9,
                    control.eio_injected(),
                    Tally::get(&tally.eio_surfaced),
                    Tally::get(&tally.wrong_bytes)
                );
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let readers_secs = started.elapsed().as_secs_f64();
    let clean = clean_passes(&cache, &control, &files, &tally);
    let account = settle_account(&cache, &control, &tally, args.threads);
    report(
        args,
        seed,
        readers_secs,
        &cache,
        &control,
        &tally,
        &over_capacity,
        clean,
        account,
    )
}

/// Writes (or reuses) the keyed data files in `dir`.
fn make_files(dir: &Path) -> io::Result<Vec<SoakFile>> {
    fs::create_dir_all(dir)?;
    FILES
        .iter()
        .enumerate()
        .map(|(i, &(name, len))| {
            // A key in the top byte: offsets stay below 2^56, so files differ everywhere.
            let key = (i as u64 + 1) << 56;
            let (path, _) = data::ensure_keyed_file(dir, &format!("soak-{name}.dat"), len, key)?;
            Ok(SoakFile { path, len, key })
        })
        .collect()
}

/// One reader thread: its generator, its handles (one per file, reopened now and then),
/// its sequential cursors and the pages it holds.
struct Reader<'a> {
    cache: &'a Cache,
    files: &'a [SoakFile],
    tally: &'a Tally,
    rng: Rng,
    handles: Vec<File>,
    cursors: Vec<u64>,
    held: Vec<(usize, PageRef)>,
    buf: Vec<u8>,
}

impl<'a> Reader<'a> {
    fn new(cache: &'a Cache, files: &'a [SoakFile], tally: &'a Tally, seed: u64) -> Reader<'a> {
        let handles = files
            .iter()
            .map(|f| cache.open(&f.path).expect("opening a soak file"))
            .collect();
        Reader {
            cache,
            files,
            tally,
            rng: Rng::new(seed),
            handles,
            cursors: vec![0; files.len()],
            held: Vec::new(),
            buf: vec![0; READ_BYTES_MAX as usize],
        }
    }

    fn run(mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            self.step();
            Tally::add(&self.tally.operations, 1);
        }
        while !self.held.is_empty() {
            self.let_go(0);
        }
    }

    /// One weighted random operation on a random file.
    fn step(&mut self) {
        let f = self.rng.below(self.files.len() as u64) as usize;
        let len = self.files[f].len;
        match self.rng.below(100) {
            0..=34 => {
                // Anywhere, past the end too, any length.
                let offset = self.rng.below(len + 3 * 4096);
                let n = 1 + self.rng.below(READ_BYTES_MAX);
                self.read(f, offset, n as usize);
            }
            35..=64 => {
                // The next record of this reader's scan of the file, from the start again
                // at its end.
                let n = [4096, 8192, 16384, 65536][self.rng.below(4) as usize];
                let at = self.cursors[f];
                self.read(f, at, n);
                self.cursors[f] = if at + n as u64 >= len {
                    0
                } else {
                    at + n as u64
                };
            }
            65..=76 => self.get_page(f),
            77..=84 => {
                let offset = self.rng.below(len + 4096);
                let n = self.rng.below(4 << 20);
                Tally::add(&self.tally.readaheads, 1);
                if let Err(e) = self.handles[f].readahead(offset, n) {
                    self.unexplained(format!("readahead({offset}, {n}): {e}"));
                }
            }
            85..=91 => {
                let advice = [
                    Advice::Normal,
                    Advice::Sequential,
                    Advice::Random,
                    Advice::WillNeed,
                    Advice::DontNeed,
                ][self.rng.below(5) as usize];
                let offset = self.rng.below(len + 4096);
                let n = self.rng.below(len + 4096);
                Tally::add(&self.tally.advises, 1);
                if let Err(e) = self.handles[f].advise(offset, n, advice) {
                    self.unexplained(format!("advise({offset}, {n}, {advice:?}): {e}"));
                }
            }
            92..=95 => {
                let kib = [0, 16, 128, 2048, 8192][self.rng.below(5) as usize];
                self.handles[f].set_readahead_max_bytes(kib << 10);
            }
            _ => {
                Tally::add(&self.tally.reopens, 1);
                match self.cache.open(&self.files[f].path) {
                    Ok(handle) => self.handles[f] = handle,
                    Err(e) => self.unexplained(format!("open: {e}")),
                }
            }
        }
    }

    /// `read_at(offset, n)`: exactly the bytes the file has there, or an injected EIO.
    fn read(&mut self, f: usize, offset: u64, n: usize) {
        let file = &self.files[f];
        Tally::add(&self.tally.reads, 1);
        match self.handles[f].read_at(&mut self.buf[..n], offset) {
            Ok(got) => {
                let want = file.len.saturating_sub(offset).min(n as u64) as usize;
                if got != want {
                    let what = format!(
                        "read_at({offset}, {n}) of {} returned {got} bytes, not {want}",
                        file.path.display()
                    );
                    self.tally.fail(&self.tally.unexplained, 1, what);
                    return;
                }
                self.check(f, offset, got);
            }
            Err(e) => self.error(e, || format!("read_at({offset}, {n})")),
        }
    }

    /// `get_page` at a random offset: the page's bytes checked, the page sometimes held
    /// across later operations (and checked again when let go).
    fn get_page(&mut self, f: usize) {
        let len = self.files[f].len;
        let offset = self.rng.below(len + 4096);
        Tally::add(&self.tally.pages_got, 1);
        match self.handles[f].get_page(offset) {
            Ok(page) => {
                if offset >= len {
                    self.unexplained(format!("get_page({offset}) past the end of {len} bytes"));
                    return;
                }
                self.check_page(f, &page);
                if self.rng.below(4) == 0 {
                    if self.held.len() == HELD_MAX {
                        self.let_go(0);
                    }
                    if self.tally.try_hold(held_bytes(&page)) {
                        self.held.push((f, page));
                    }
                }
            }
            Err(e) if offset >= len && e.kind() == io::ErrorKind::UnexpectedEof => {}
            Err(e) => self.error(e, || format!("get_page({offset})")),
        }
    }

    /// Checks the held page at `i` once more and drops it.
    fn let_go(&mut self, i: usize) {
        let (f, page) = self.held.remove(i);
        self.check_page(f, &page);
        self.tally.release(held_bytes(&page));
    }

    fn check_page(&self, f: usize, page: &PageRef) {
        let file = &self.files[f];
        let start = page.offset_bytes();
        let want = file.len.saturating_sub(start).min(page.len_bytes() as u64);
        if start % folio::PAGE_BYTES as u64 != 0 || page.len_bytes() as u64 != want {
            let what = format!(
                "get_page of {}: {} bytes at {start}, want {want} page-aligned",
                file.path.display(),
                page.len_bytes()
            );
            self.tally.fail(&self.tally.unexplained, 1, what);
            return;
        }
        self.verify(f, start, page);
    }

    fn check(&self, f: usize, offset: u64, n: usize) {
        self.verify(f, offset, &self.buf[..n]);
    }

    fn verify(&self, f: usize, offset: u64, bytes: &[u8]) {
        let file = &self.files[f];
        match data::verify_keyed(bytes, offset, file.key) {
            Ok(n) => Tally::add(&self.tally.bytes_verified, n),
            Err(bad) => {
                let wrong = wrong_bytes(bytes, offset, file.key);
                let what = format!("{}: {bad} ({wrong} wrong bytes)", file.path.display());
                self.tally.fail(&self.tally.wrong_bytes, wrong, what);
            }
        }
    }

    /// A failed read: an injected EIO is expected, anything else is not.
    fn error(&self, e: io::Error, what: impl Fn() -> String) {
        if e.raw_os_error() == Some(libc::EIO) {
            Tally::add(&self.tally.eio_surfaced, 1);
        } else {
            self.unexplained(format!("{}: {e}", what()));
        }
    }

    fn unexplained(&self, what: String) {
        self.tally.fail(&self.tally.unexplained, 1, what);
    }
}

/// What a held page counts against the budget: its bytes, rounded up to whole pages.
fn held_bytes(page: &PageRef) -> u64 {
    (page.len_bytes() as u64).next_multiple_of(folio::PAGE_BYTES as u64)
}

/// The bytes of `bytes` that differ from the file's.
fn wrong_bytes(bytes: &[u8], offset: u64, key: u64) -> u64 {
    let mut want = vec![0u8; bytes.len()];
    data::fill_keyed(&mut want, offset, key);
    bytes.iter().zip(&want).filter(|(a, b)| a != b).count() as u64
}

/// What the two passes after the clear found.
struct Clean {
    bytes_verified: u64,
    eio_first_pass: u64,
    failures: Vec<String>,
}

/// Clears the faults and reads every file twice through a fresh handle, checking every
/// byte; the first pass may meet an EIO drawn before the clear, the second none.
fn clean_passes(cache: &Cache, control: &FaultControl, files: &[SoakFile], tally: &Tally) -> Clean {
    control.clear();
    let mut clean = Clean {
        bytes_verified: 0,
        eio_first_pass: 0,
        failures: Vec::new(),
    };
    let mut buf = vec![0u8; 1 << 20];
    for pass in 0..2 {
        for file in files {
            let handle = match cache.open(&file.path) {
                Ok(h) => h,
                Err(e) => {
                    clean.failures.push(format!("pass {pass}: open: {e}"));
                    continue;
                }
            };
            let mut at = 0;
            while at < file.len {
                match handle.read_at(&mut buf, at) {
                    Ok(n) => {
                        let want = (file.len - at).min(buf.len() as u64) as usize;
                        if n != want {
                            clean
                                .failures
                                .push(format!("pass {pass}: read_at({at}) = {n}, want {want}"));
                            break;
                        }
                        if let Err(bad) = data::verify_keyed(&buf[..n], at, file.key) {
                            let wrong = wrong_bytes(&buf[..n], at, file.key);
                            tally.fail(
                                &tally.wrong_bytes,
                                wrong,
                                format!("clean pass {pass}: {bad}"),
                            );
                        }
                        clean.bytes_verified += n as u64;
                        at += n as u64;
                    }
                    Err(e) if pass == 0 && e.raw_os_error() == Some(libc::EIO) => {
                        clean.eio_first_pass += 1;
                    }
                    Err(e) => {
                        clean.failures.push(format!(
                            "pass {pass}: read_at({at}) of {} failed with the faults cleared: {e}",
                            file.path.display()
                        ));
                        break;
                    }
                }
            }
        }
    }
    clean
}

/// The fault account, once every read has completed.
struct Account {
    eio_injected: u64,
    io_errors: u64,
    short_injected: u64,
    short_retries: u64,
    surfaced_bound: u64,
    problems: Vec<String>,
}

/// Waits (up to 10 s) for the reads still in flight to land, then checks the account.
fn settle_account(cache: &Cache, control: &FaultControl, tally: &Tally, threads: usize) -> Account {
    let settle_until = Instant::now() + Duration::from_secs(10);
    while cache.stats().io_errors != control.eio_injected() && Instant::now() < settle_until {
        thread::sleep(Duration::from_millis(10));
    }
    let stats = cache.stats();
    let mut account = Account {
        eio_injected: control.eio_injected(),
        io_errors: stats.io_errors,
        short_injected: control.short_injected(),
        short_retries: stats.short_read_retries,
        // Each failed read fails its submitter and everyone waiting on its folios: at
        // most every reader and the clean pass.
        surfaced_bound: control.eio_injected() * (threads as u64 + 1),
        problems: Vec::new(),
    };
    if account.io_errors != account.eio_injected {
        account.problems.push(format!(
            "{} EIOs injected but the cache counted {} failed reads",
            account.eio_injected, account.io_errors
        ));
    }
    if account.short_retries > account.short_injected {
        account.problems.push(format!(
            "{} short reads retried but only {} injected",
            account.short_retries, account.short_injected
        ));
    }
    if Tally::get(&tally.eio_surfaced) > account.surfaced_bound {
        account.problems.push(format!(
            "{} EIOs surfaced, more than {} injected EIOs can explain",
            Tally::get(&tally.eio_surfaced),
            account.eio_injected
        ));
    }
    account
}

#[allow(clippy::too_many_arguments)]
fn report(
    args: &Args,
    seed: u64,
    readers_secs: f64,
    cache: &Cache,
    control: &FaultControl,
    tally: &Tally,
    over_capacity: &AtomicU64,
    clean: Clean,
    account: Account,
) -> io::Result<bool> {
    let st = cache.stats();
    let get = Tally::get;
    let over = over_capacity.load(Ordering::Relaxed);
    let errors = tally
        .errors
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let pass = get(&tally.wrong_bytes) == 0
        && get(&tally.unexplained) == 0
        && clean.failures.is_empty()
        && account.problems.is_empty()
        && over == 0;
    println!("\n== soak ==");
    println!(
        "operations        {} in {readers_secs:.1} s ({} reads, {} get_page, {} readahead, {} advise, {} reopen)",
        get(&tally.operations),
        get(&tally.reads),
        get(&tally.pages_got),
        get(&tally.readaheads),
        get(&tally.advises),
        get(&tally.reopens)
    );
    println!(
        "bytes verified    {} by the readers, {} by the clean passes; wrong bytes: {}",
        get(&tally.bytes_verified),
        clean.bytes_verified,
        get(&tally.wrong_bytes)
    );
    println!(
        "faults injected   {} EIO, {} short reads, {} delayed, {} reordered completions",
        account.eio_injected,
        account.short_injected,
        control.delayed(),
        control.reordered()
    );
    println!(
        "faults accounted  the cache counted {} failed reads (= EIOs injected: {}), {} short-read retries (<= short reads injected: {})",
        account.io_errors,
        account.io_errors == account.eio_injected,
        account.short_retries,
        account.short_retries <= account.short_injected
    );
    println!(
        "errors surfaced   {} EIO to readers (+{} in the first clean pass; at most {} explained), {} unexplained",
        get(&tally.eio_surfaced),
        clean.eio_first_pass,
        account.surfaced_bound,
        get(&tally.unexplained)
    );
    println!(
        "cache             {} pages evicted, {} refaults, {} readahead pages ({} wasted), over capacity in {} of the 10 ms samples",
        st.evicted_pages, st.refaults, st.readahead_pages, st.readahead_wasted_pages, over
    );
    println!(
        "clean passes      {}",
        if clean.failures.is_empty() {
            "every file read twice with the faults cleared: no error".to_string()
        } else {
            clean.failures.join("; ")
        }
    );
    for e in errors.iter().chain(&account.problems) {
        println!("  problem: {e}");
    }
    println!("verdict           {}", if pass { "PASS" } else { "FAIL" });
    if let Some(path) = &args.json {
        let v = json!({
            "workload": "soak",
            "pass": pass,
            "params": {
                "seconds": args.seconds, "threads": args.threads, "cache_mib": args.cache_mib,
                "seed": seed, "eio_per_mille": args.eio_per_mille,
                "short_per_mille": args.short_per_mille, "delay_max_us": args.delay_max_us,
                "reorder": args.reorder, "eviction": st.eviction, "backend": st.backend,
            },
            "operations": get(&tally.operations),
            "bytes_verified": get(&tally.bytes_verified) + clean.bytes_verified,
            "wrong_bytes": get(&tally.wrong_bytes),
            "eio_injected": account.eio_injected,
            "eio_counted_by_cache": account.io_errors,
            "short_reads_injected": account.short_injected,
            "short_read_retries": account.short_retries,
            "delayed": control.delayed(),
            "reordered": control.reordered(),
            "eio_surfaced": get(&tally.eio_surfaced) + clean.eio_first_pass,
            "unexplained_errors": get(&tally.unexplained),
            "evicted_pages": st.evicted_pages,
            "over_capacity_samples": over,
            "problems": errors.iter().chain(&account.problems).chain(&clean.failures).collect::<Vec<_>>(),
        });
        fs::write(path, serde_json::to_string_pretty(&v)? + "\n")?;
        println!("JSON written to {}", path.display());
    }
    Ok(pass)
}
