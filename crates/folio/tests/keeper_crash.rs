//! The keeper's crash test (issue 31, done-when 2): a returned `write_at` outlives the
//! process that made it, with no sync, as a write into the kernel's page cache does
//! (DESIGN.md §9). A child process writes records through a persistent cache
//! (`CacheBuilder::persistent`) into several files and never syncs; this process SIGKILLs
//! it at a random instant, waits until its keeper has written back what the child left
//! dirty, synced the files, removed the segment and exited, and then reads every file with
//! `std::fs`: every byte of every `write_at` that returned is there, and no byte is one
//! nobody wrote.
//!
//! Two tests, each a run of rounds (one child, one kill, one check):
//! - `owner_killed` (200 rounds): only the child is killed; its keeper must finish alone,
//!   exit 0 and leave no segment behind.
//! - `keeper_killed_too` (50 rounds): its keeper is killed too. In rounds 0, 1, 4, 5, ...
//!   (two in four) this process stops the keeper (SIGSTOP, waiting until it is stopped)
//!   before it kills the child, and then kills the stopped keeper: the keeper never
//!   starts, whatever the machine's speed, so a recovery always has the whole segment to
//!   finish. In the other rounds the keeper is killed 0-30 ms after the child, most
//!   often during its writeback (or after it finished: then there is nothing left to
//!   finish). This process then finishes the segment, if the keeper left it, and checks
//!   the same promise. It finishes it with `folio::recover_segment` in even rounds, and
//!   in odd ones by building a persistent cache in the same directory (which finishes
//!   the segments it finds abandoned there), then dropping it. (On a fast machine every
//!   keeper once finished within the 0-30 ms, and the coverage assertion that a recovery
//!   ran failed, issue 42: the stopped keepers make it hold by construction.)
//!
//! The child is this test binary run again with `FOLIO_KEEPER_CRASH_CHILD` set
//! (`common/harness.rs`: no libtest harness, so no placeholder test stands in for it). It
//! draws from its seed a small cache under a small dirty limit, so that writeback is
//! under way when the kill lands: capacity 2-16 MiB, dirty limit an eighth to a quarter of
//! it, background threshold half or a quarter of that, dirty expiry 2 ms-5 s,
//! write-behind off or on, largest folio 4 KiB-2 MiB, io_uring or the pread pool; its
//! segment in this test's own directory under /dev/shm (not /dev/shm itself, where a
//! persistent cache another test builds would finish a segment this one abandoned on
//! purpose, and the other way round). It opens 2-4 files (each round starts from copies of what the
//! last round left: restarted programs reopening their files; every 10th round from
//! empty files) and runs one writer thread per file, 1-3 reader threads and a thread that
//! reports the cache's dirty pages.
//!
//! Writer 0 starts with a record written at offset 0 twice, the second time while it
//! holds a view of the page (`copy_on_write_once`): a copy on write in every child that
//! lives past it. A writer, until it is killed: writes of 1 byte to 1 MiB (a tenth shorter than a
//! record header, a tenth whole pages, an eighth over 256 KiB), appended at the end,
//! over a page-aligned or any offset inside the file, across a 16 KiB, 64 KiB or 2 MiB
//! boundary (a folio's, where the cache has folios that large), or past the end (a hole);
//! `set_len` down into the file or its last page, or up; `writeback` of a random range
//! (it promises nothing). A write's bytes are a record (`common/records.rs`), or the
//! start of one for a write shorter than a header; each file stays under 4 MiB (past
//! it, writes only overwrite). A reader pins the page that holds a file's last byte (or,
//! two times in five, any page) with `get_page`, holds it 5-50 µs and rests up to 20 µs,
//! so that writers into a pinned folio copy it on write; the page's bytes must not change
//! while it is pinned.
//!
//! The protocol, one line per event on the child's stdout (`harness::say`), each written
//! before the child goes on: `ready <segment path> <keeper pid>` first; `w <file> <offset>
//! <len> <seq>` before each `write_at`; `t <file> <old len> <new len> <seq>` before each
//! `set_len`; `r <seq>` after either returned; `s <dirty pages> <writeback pages>
//! <copies on write>` from the cache's stats every 2 ms. Any error in the child panics it
//! (the test fails: it was not killed).
//!
//! What each round proves, per file (`common/durability.rs`, a history whose one
//! acknowledgement comes after every operation that returned): every byte an operation
//! that returned left is on disk unless a later operation covered it (then it may be that
//! operation's: the one in flight at the kill may be on disk whole, torn or not at all); no
//! byte is one nobody wrote (the file's old bytes, a write's, or zeros of a hole or a
//! cut); the file is at least as long as the operations that returned left it and no
//! longer than it ever was (exactly: the keeper sets the size, so no tail block reaches
//! past it); and every record that returned and that no later operation overlapped parses
//! whole. The keeper exits 0 (`owner_killed`), the segment is gone, and a recovery
//! (`keeper_killed_too`) reports no file it could not find or write.
//!
//! Writes still in flight after a death (DESIGN.md §9): a dead process's io_uring writes
//! can land after it is reaped. Each round's files are read again at the end of the next
//! round, and must not have changed since they were checked: a write landing
//! after the keeper (or the recovery) finished would be an older write over a newer one.
//!
//! The kill lands 5-400 ms after `ready` (log-uniform: most of them early), or in a tenth
//! of the rounds within its first 5 ms. After the 5-400 ms, the kill waits for the
//! child's next report (`s`, read fresh: every older line is read first) that shows
//! dirty pages, or in one round in four pages under writeback, and writer 0's copy on
//! write made (at most `AIM_WAIT_MAX`):
//! the rounds are killed where the keeper has work by construction, not by the
//! machine's speed, and the coverage counts come from that report. The keeper gets 30 s
//! to finish.
//!
//! Environment: `FOLIO_KEEPER_CRASH_ROUNDS=n` (default 200) and
//! `FOLIO_KEEPER_CRASH_KEEPER_ROUNDS=n` (default 50); `FOLIO_KEEPER_CRASH_SEED=s` draws the
//! children's seeds and the kill instants from `s` (default: from the clock, printed; the
//! same seed replays each child's first operations and its cache, not where the kills
//! land nor the threads' interleaving).

mod common;
#[path = "common/durability.rs"]
mod durability;
#[path = "common/harness.rs"]
mod harness;
#[path = "common/ops.rs"]
mod ops;
#[path = "common/records.rs"]
mod records;
#[path = "common/seeded.rs"]
mod seeded;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use folio::{BackendKind, Cache, File, PAGE_BYTES};
use harness::{say, Child};
use ops::{OpKind, OpLog};
use records::{parse, record_bytes, HEADER_BYTES};
use seeded::{env_u64, Rng};

const CHILD_ENV: &str = "FOLIO_KEEPER_CRASH_CHILD";
const OWNER_ROUNDS_DEFAULT: u64 = 200;
const KEEPER_ROUNDS_DEFAULT: u64 = 50;
/// Every this many rounds, the files start empty (module docs).
const FRESH_EVERY: u64 = 10;
const FILES_MIN: u64 = 2;
const FILES_MAX: u64 = 4;
/// Writes append while a file is under this; past it they overwrite.
const FILE_BYTES_MAX: u64 = 4 << 20;

/// The kill lands this long after `ready`: early (a tenth of the rounds) within
/// `KILL_EARLY_MS`, otherwise log-uniform in `[KILL_EARLY_MS, KILL_LATE_MS]`.
const KILL_EARLY_MS: f64 = 5.0;
const KILL_LATE_MS: f64 = 400.0;
/// The longest a kill waits for a report that shows the work it aims at (module docs).
const AIM_WAIT_MAX: Duration = Duration::from_secs(10);
/// `keeper_killed_too` kills the keeper up to this long after the owner.
const KEEPER_KILL_MS_MAX: u64 = 30;

/// A child that does not say `ready` within this has failed.
const READY_WAIT_MAX: Duration = Duration::from_secs(30);
/// The keeper must have finished this long after the owner's death.
const KEEPER_WAIT_MAX: Duration = Duration::from_secs(30);
/// A child runs at most this long (if the parent died without killing it).
const CHILD_LIFE_MAX: Duration = Duration::from_secs(60);
/// How often the child reports the cache's dirty pages.
const STATS_EVERY: Duration = Duration::from_millis(2);

/// A failed check shows the file's last this many operations.
const OPS_SHOWN: usize = 20;

/// The child's readers (module docs): how many, how long a pin is held, and how long a
/// reader rests between pins, at most.
const READERS_MIN: u64 = 1;
const READERS_MAX: u64 = 3;
const HOLD_US_MIN: u64 = 5;
const HOLD_US_MAX: u64 = 50;
const REST_US_MAX: u64 = 20;

fn main() {
    harness::main(
        &[
            ("owner_killed", owner_killed),
            ("keeper_killed_too", keeper_killed_too),
        ],
        CHILD_ENV,
        child,
    );
}

fn owner_killed() {
    let rounds = env_u64("FOLIO_KEEPER_CRASH_ROUNDS").unwrap_or(OWNER_ROUNDS_DEFAULT);
    run_rounds(Kill::Owner, rounds);
}

fn keeper_killed_too() {
    let rounds = env_u64("FOLIO_KEEPER_CRASH_KEEPER_ROUNDS").unwrap_or(KEEPER_ROUNDS_DEFAULT);
    run_rounds(Kill::OwnerThenKeeper, rounds);
}

// ---------------------------------------------------------------------------------------
// The child.

/// The child (module docs): `spec` is "<seed> <first seq> <files> <segment dir> <dir>".
fn child(spec: &str) {
    let mut parts = spec.splitn(5, ' ');
    let mut num = |what: &str| -> u64 {
        parts
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("child: no {what} in {spec:?}"))
    };
    let seed = num("seed");
    let first_seq = num("first seq");
    let files = num("file count") as usize;
    let segment_dir = parts.next().expect("child: a segment directory");
    let dir = PathBuf::from(parts.next().expect("child: a directory"));
    let mut rng = Rng(seed);
    let capacity: u64 = rng.pick(&[2 << 20, 4 << 20, 8 << 20, 16 << 20]);
    let dirty_limit = capacity / rng.pick(&[4, 8]);
    let cache = Cache::builder()
        .capacity_bytes(capacity)
        .folio_order_max(rng.pick(&[0, 0, 2, 4, 9]))
        .backend(rng.pick(&[BackendKind::IoUring, BackendKind::Pread]))
        .pread_threads(4)
        .dirty_limit_bytes(dirty_limit)
        .dirty_background_bytes(dirty_limit / rng.pick(&[2, 4]))
        .dirty_expire(Duration::from_millis(rng.pick(&[2, 50, 5000])))
        .write_behind_bytes(rng.pick(&[0, 64 << 10, 256 << 10]))
        .persistent(true)
        .segment_dir(segment_dir)
        .build()
        .expect("child: the persistent cache");
    let segment = cache
        .segment_path()
        .expect("child: a persistent cache's segment");
    let keeper = cache
        .keeper_pid()
        .expect("child: a persistent cache's keeper");
    let files: Arc<Vec<File>> = Arc::new(
        (0..files)
            .map(|i| {
                cache
                    .open_options()
                    .write(true)
                    .create(true)
                    .open(dir.join(file_name(i)))
                    .unwrap_or_else(|e| panic!("child: open file {i}: {e}"))
            })
            .collect(),
    );
    say(&format!("ready {} {keeper}", segment.display()));
    let seqs = Arc::new(AtomicU64::new(first_seq));
    for i in 0..files.len() {
        let (files, seqs, rng) = (files.clone(), seqs.clone(), Rng(rng.next()));
        std::thread::spawn(move || write_file(i, &files[i], &seqs, rng));
    }
    for _ in 0..rng.between(READERS_MIN, READERS_MAX) {
        let (files, rng) = (files.clone(), Rng(rng.next()));
        std::thread::spawn(move || pin_pages(&files, rng));
    }
    let born = Instant::now();
    while born.elapsed() < CHILD_LIFE_MAX {
        let s = cache.stats();
        say(&format!(
            "s {} {} {}",
            s.dirty_pages, s.writeback_pages, s.write_copies
        ));
        std::thread::sleep(STATS_EVERY);
    }
    std::process::exit(3);
}

/// Writes `bytes` as the file at `path`, synced, and leaves none of it in the kernel's
/// page cache. The child, its keeper and a recovery write the file with O_DIRECT; a page
/// of the kernel's still dirty or under writeback in a direct write's range makes the
/// kernel's invalidation after that write fail, which it reports as EIO at the file's next
/// fsync ("Page cache invalidation failure on direct I/O" in dmesg): under load, an
/// unsynced file made a recovery's sync fail about once in ten runs of 50 rounds.
fn write_uncached(path: &Path, bytes: &[u8]) {
    use std::os::unix::io::AsRawFd;
    std::fs::write(path, bytes).expect("write a file");
    let file = std::fs::File::open(path).expect("open the file written");
    file.sync_all().expect("sync the file written");
    // SAFETY: posix_fadvise on our own open descriptor; no memory is passed.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "drop the file's cached pages");
}

fn file_name(i: usize) -> String {
    format!("f{i}")
}

/// A writer of the child (module docs): file `f`, until the child is killed.
fn write_file(f: usize, file: &File, seqs: &AtomicU64, mut rng: Rng) {
    if f == 0 {
        copy_on_write_once(f, file, seqs);
    }
    loop {
        let len = file.len();
        let choice = rng.below(100);
        if choice < 2 {
            let new_len = match rng.below(3) {
                0 if len > 0 => rng.below(len),
                1 if len > 0 => len - 1 - rng.below(len.min(PAGE_BYTES as u64)),
                _ => (len + rng.below(64 << 10)).min(FILE_BYTES_MAX),
            };
            let seq = seqs.fetch_add(1, Ordering::Relaxed);
            say(&format!("t {f} {len} {new_len} {seq}"));
            file.set_len(new_len)
                .unwrap_or_else(|e| panic!("child: set_len({new_len}) of file {f}: {e}"));
            say(&format!("r {seq}"));
            continue;
        }
        if choice < 4 {
            let start = rng.below(len + 1);
            file.writeback(start, 1 + rng.below(1 << 20))
                .expect("child: writeback");
            continue;
        }
        let size = match rng.below(100) {
            0..=9 => 1 + rng.below(HEADER_BYTES as u64 - 1),
            10..=49 => HEADER_BYTES as u64 + rng.below(1000),
            50..=74 => HEADER_BYTES as u64 + rng.below(16 << 10),
            75..=84 => PAGE_BYTES as u64 * rng.between(1, 16),
            85..=96 => HEADER_BYTES as u64 + rng.below(256 << 10),
            _ => (256 << 10) + rng.below(768 << 10),
        };
        let mut offset = match rng.below(100) {
            0..=39 => len,
            40..=54 if len > PAGE_BYTES as u64 => {
                rng.below(len / PAGE_BYTES as u64) * PAGE_BYTES as u64
            }
            55..=64 => {
                // Across a boundary: the write starts 1 to size - 1 bytes before it.
                let unit: u64 = rng.pick(&[16 << 10, 64 << 10, 2 << 20]);
                let boundary = unit * rng.between(1, (len / unit).max(1));
                boundary - 1 - rng.below((size - 1).clamp(1, boundary))
            }
            65..=89 if len > 0 => rng.below(len),
            _ => len + 1 + rng.below(100_000),
        };
        if offset + size > FILE_BYTES_MAX {
            offset = rng.below(len.min(FILE_BYTES_MAX - size) + 1);
        }
        let seq = seqs.fetch_add(1, Ordering::Relaxed);
        let bytes = record_bytes(seq, size as usize);
        say(&format!("w {f} {offset} {size} {seq}"));
        let n = file
            .write_at(&bytes, offset)
            .unwrap_or_else(|e| panic!("child: write_at({offset}, {size}) of file {f}: {e}"));
        assert_eq!(n, bytes.len(), "child: a short write_at");
        say(&format!("r {seq}"));
    }
}

/// Writer 0's first operations (module docs): a record written at offset 0, then again
/// while this thread holds a view of its page, which the write must copy on write: every
/// child that lives past them has made a copy, whatever the timing of its readers.
fn copy_on_write_once(f: usize, file: &File, seqs: &AtomicU64) {
    let size = HEADER_BYTES + 100;
    for round in 0..2 {
        let view = (round == 1).then(|| {
            file.get_page(0)
                .unwrap_or_else(|e| panic!("child: get_page(0) of file {f}: {e}"))
        });
        let seq = seqs.fetch_add(1, Ordering::Relaxed);
        let bytes = record_bytes(seq, size);
        say(&format!("w {f} 0 {size} {seq}"));
        file.write_at(&bytes, 0)
            .unwrap_or_else(|e| panic!("child: write_at(0, {size}) of file {f}: {e}"));
        say(&format!("r {seq}"));
        drop(view);
    }
}

/// A reader of the child (module docs): pins a page of a file for a short while, again
/// and again, so that writers into it copy its folio on write; the page's bytes must not
/// change while it is pinned. Runs until the child is killed; an error ends the child
/// with 101, as a panic of the main thread would.
fn pin_pages(files: &[File], mut rng: Rng) {
    common::precise_sleeps();
    loop {
        let file = &files[rng.below(files.len() as u64) as usize];
        let len = file.len();
        if len == 0 {
            std::thread::sleep(Duration::from_micros(REST_US_MAX));
            continue;
        }
        let offset = if rng.below(5) < 3 {
            len - 1
        } else {
            rng.below(len)
        };
        let view = match file.get_page(offset) {
            Ok(view) => view,
            // A writer's `set_len` cut the file since its length was read.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => continue,
            Err(e) => {
                eprintln!("child: get_page({offset}): {e}");
                std::process::exit(101);
            }
        };
        let page = ((offset - view.offset_bytes()) as usize / PAGE_BYTES) * PAGE_BYTES;
        let page = page..(page + PAGE_BYTES).min(view.len());
        let seen = view[page.clone()].to_vec();
        std::thread::sleep(Duration::from_micros(rng.between(HOLD_US_MIN, HOLD_US_MAX)));
        if view[page.clone()] != seen[..] {
            eprintln!(
                "child: the bytes of the page at {} changed under a pin",
                view.offset_bytes() + page.start as u64
            );
            std::process::exit(101);
        }
        drop(view);
        std::thread::sleep(Duration::from_micros(rng.below(REST_US_MAX + 1)));
    }
}

// ---------------------------------------------------------------------------------------
// The parent.

/// Whom a round kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kill {
    /// The owner; its keeper finishes.
    Owner,
    /// The owner, then its keeper shortly after; a recovery finishes.
    OwnerThenKeeper,
}

/// What one child said.
#[derive(Debug, Default)]
struct Said {
    segment: PathBuf,
    keeper: u32,
    log: OpLog,
    /// The last `s` line: dirty pages, pages under writeback, copies on write so far.
    stats: Option<(u64, u64, u64)>,
}

fn parse_line(said: &mut Said, line: &str) {
    let bad = || -> ! { panic!("a bad line from the child: {line:?}") };
    if said.log.take_line(line) {
        return;
    }
    if let Some(rest) = line.strip_prefix("ready ") {
        let (path, pid) = rest.rsplit_once(' ').unwrap_or_else(|| bad());
        said.segment = PathBuf::from(path);
        said.keeper = pid.parse().unwrap_or_else(|_| bad());
        return;
    }
    let fields: Vec<u64> = line
        .split(' ')
        .skip(1)
        .map(|f| f.parse().unwrap_or_else(|_| bad()))
        .collect();
    match (line.split(' ').next(), fields.as_slice()) {
        (Some("s"), &[dirty, writeback, copies]) => said.stats = Some((dirty, writeback, copies)),
        _ => bad(),
    }
}

/// The records of file `f` that returned and that no later operation overlapped: they
/// must parse whole. Returns how many did.
fn check_records(said: &Said, f: usize, disk: &[u8]) -> Result<u64, String> {
    let ops = said.log.of_file(f);
    let mut intact = 0;
    for (i, op) in ops.iter().enumerate() {
        let OpKind::Write { offset, len } = op.kind else {
            continue;
        };
        let end = offset + len as u64;
        let overlapped = ops[i + 1..].iter().any(|later| match later.kind {
            OpKind::Write { offset: o, len: l } => o < end && offset < o + l as u64,
            OpKind::SetLen { new, .. } => new < end,
        });
        if !op.returned || len < HEADER_BYTES || overlapped {
            continue;
        }
        match disk.get(offset as usize..).and_then(parse) {
            Some(found) if found == (op.seq, len) => intact += 1,
            found => {
                return Err(format!(
                "record {} ({len} bytes at {offset}) returned but does not parse: found {found:?}",
                op.seq
            ))
            }
        }
    }
    Ok(intact)
}

/// What a run of rounds did, summed.
#[derive(Debug, Default)]
struct Totals {
    rounds: u64,
    files: u64,
    writes_returned: u64,
    set_lens_returned: u64,
    /// Operations in flight at the kill (each file's last, if it had not returned).
    in_flight: u64,
    /// Rounds whose last report before the kill had dirty pages, and pages under
    /// writeback: the keeper had work.
    killed_dirty: u64,
    killed_under_writeback: u64,
    /// Copies on write the children had made by their last report.
    copies_on_write: u64,
    records_intact: u64,
    bytes_checked: u64,
    /// `keeper_killed_too`: segments the killed keeper left, which a recovery finished,
    /// and what it wrote; and those a new cache's build finished.
    recovered: u64,
    recovered_folios: u64,
    recovered_bytes: u64,
    finished_by_build: u64,
    /// `keeper_killed_too`: keepers stopped before the owner's kill (module docs).
    keepers_stopped: u64,
    keeper_wait_ms_max: u64,
}

fn run_rounds(kill: Kill, rounds: u64) {
    harness::become_subreaper();
    let seed = seeded::seed_from_env_or_clock("FOLIO_KEEPER_CRASH_SEED");
    eprintln!("keeper_crash {kill:?}: {rounds} rounds, FOLIO_KEEPER_CRASH_SEED={seed}");
    let dir = common::test_dir();
    let segment_dir = tempfile::Builder::new()
        .prefix("folio-keeper-crash-")
        .tempdir_in("/dev/shm")
        .expect("a segment directory in /dev/shm");
    let mut rng = Rng(seed);
    let mut totals = Totals::default();
    let started = Instant::now();
    // What the last round left in each file, and where (checked again at the end of the
    // next round: module docs).
    let mut left: Vec<Vec<u8>> = vec![Vec::new(); FILES_MAX as usize];
    let mut last_round: Option<(PathBuf, Vec<Vec<u8>>)> = None;
    for round in 0..rounds {
        if round % FRESH_EVERY == 0 {
            left.iter_mut().for_each(Vec::clear);
        }
        let files = rng.between(FILES_MIN, FILES_MAX) as usize;
        let round_dir = dir.path().join(format!("round-{round}"));
        std::fs::create_dir(&round_dir).expect("create the round's directory");
        for (i, bytes) in left.iter().enumerate().take(files) {
            write_uncached(&round_dir.join(file_name(i)), bytes);
        }
        let child_seed = rng.next();
        let (run, early) = kill_delay(&mut rng);
        let aim = match (early, round % 4) {
            (true, _) => Aim::Anywhere,
            (false, 3) => Aim::UnderWriteback,
            (false, _) => Aim::Dirty,
        };
        let stop_keeper_first = kill == Kill::OwnerThenKeeper && round % 4 < 2;
        let keeper_run = Duration::from_millis(rng.below(KEEPER_KILL_MS_MAX + 1));
        let spec = format!(
            "{child_seed} {} {files} {} {}",
            round << 40,
            segment_dir.path().display(),
            round_dir.display()
        );
        let context = format!(
            "round {round} (child seed {child_seed}, {files} files, killed {run:?} after ready{}; FOLIO_KEEPER_CRASH_SEED={seed} runs the same children)",
            match kill {
                Kill::Owner => String::new(),
                Kill::OwnerThenKeeper => format!(", its keeper {keeper_run:?} later"),
            }
        );
        let mut child = Child::spawn(CHILD_ENV, &spec);
        let mut said = Said::default();
        parse_line(&mut said, &child.next_line(READY_WAIT_MAX, "ready"));
        assert!(
            said.keeper != 0,
            "{context}: the child's first line was not `ready`"
        );
        let context = format!(
            "{context}, child pid {}, keeper pid {}",
            child.pid(),
            said.keeper
        );
        std::thread::sleep(run);
        let at_kill = wait_for_aim(&mut child, &mut said, aim);
        if stop_keeper_first {
            harness::stop_and_wait(said.keeper, &format!("{context}: the keeper"));
        }
        child.kill();
        let killed_at = Instant::now();
        if kill == Kill::OwnerThenKeeper {
            if !stop_keeper_first {
                std::thread::sleep(keeper_run);
            }
            // SAFETY: kill takes integers. The keeper is this process's child (a
            // subreaper's), so its pid is not reused before it is reaped below.
            unsafe { libc::kill(said.keeper as libc::pid_t, libc::SIGKILL) };
        }
        let status = harness::wait_for_exit(
            said.keeper,
            KEEPER_WAIT_MAX,
            &format!("{context}: the keeper"),
        );
        for line in child.rest_of_lines() {
            parse_line(&mut said, &line);
        }
        match kill {
            Kill::Owner => {
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                    "{context}: the keeper {} ended with wait status {status:#x} (exit code {}, signal {})",
                    said.keeper,
                    libc::WEXITSTATUS(status),
                    libc::WTERMSIG(status)
                );
            }
            Kill::OwnerThenKeeper if said.segment.exists() && round % 2 == 1 => {
                let cache = Cache::builder()
                    .capacity_bytes(2 << 20)
                    .persistent(true)
                    .segment_dir(segment_dir.path())
                    .build()
                    .unwrap_or_else(|e| {
                        panic!(
                            "{context}: a persistent cache in the killed keeper's directory: {e}"
                        )
                    });
                let keeper = cache.keeper_pid().expect("a persistent cache's keeper");
                drop(cache);
                let status = harness::wait_for_exit(
                    keeper,
                    KEEPER_WAIT_MAX,
                    &format!("{context}: the keeper of the cache that finished the segment"),
                );
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                    "{context}: the keeper of a cache dropped clean ended with wait status {status:#x}"
                );
                totals.finished_by_build += 1;
            }
            Kill::OwnerThenKeeper if said.segment.exists() => {
                let recovered = folio::recover_segment(&said.segment).unwrap_or_else(|e| {
                    panic!(
                        "{context}: recover_segment({}) after the keeper was killed: {e}",
                        said.segment.display()
                    )
                });
                assert!(
                    recovered.files_not_found == 0
                        && recovered.written.failed_files == 0
                        && recovered.written.folios_without_file == 0,
                    "{context}: the recovery left pages unwritten: {recovered:?}"
                );
                totals.recovered += 1;
                totals.recovered_folios += recovered.written.folios;
                totals.recovered_bytes += recovered.written.bytes;
            }
            Kill::OwnerThenKeeper => {}
        }
        if kill == Kill::OwnerThenKeeper {
            let killed = libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL;
            let done = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
            assert!(
                killed || done,
                "{context}: the keeper {} ended with wait status {status:#x} before it was killed",
                said.keeper
            );
        }
        assert!(
            !said.segment.exists(),
            "{context}: the segment {} is still there after the keeper{} finished ({})",
            said.segment.display(),
            match kill {
                Kill::Owner => "",
                Kill::OwnerThenKeeper => " and the recovery",
            },
            match folio::SegmentView::open(&said.segment) {
                Ok(view) => format!("held by {:?}, state {:?}", view.holder(), view.state()),
                Err(e) => format!("not readable: {e}"),
            }
        );
        totals.keeper_wait_ms_max = totals
            .keeper_wait_ms_max
            .max(killed_at.elapsed().as_millis() as u64);

        let mut disks = Vec::new();
        for (f, base) in left.iter().enumerate().take(files) {
            let path = round_dir.join(file_name(f));
            let disk = std::fs::read(&path).expect("read a file after the keeper");
            let inode = std::os::unix::fs::MetadataExt::ino(
                &std::fs::metadata(&path).expect("stat a file"),
            );
            let fail = |what: String| -> ! {
                // Beside the test directory, which goes when the panic unwinds.
                let kept = dir
                    .path()
                    .with_extension(format!("round{round}-{}", file_name(f)));
                let _ = std::fs::write(&kept, &disk);
                let ops = said.log.of_file(f);
                let all: String = ops.iter().map(|op| format!("{op:?}\n")).collect();
                let _ = std::fs::write(format!("{}.ops", kept.display()), all);
                let _ = std::fs::write(format!("{}.base", kept.display()), base);
                let last: Vec<String> = ops[ops.len().saturating_sub(OPS_SHOWN)..]
                    .iter()
                    .map(|op| format!("{op:?}"))
                    .collect();
                panic!(
                    "{context}: file {f} (inode {inode}, {} bytes before the round, {} operations): {what}\n  its last operations:\n    {}\n  the file is kept at {} (its operations in .ops beside it, what it held before the round in .base)",
                    base.len(),
                    ops.len(),
                    last.join("\n    "),
                    kept.display()
                )
            };
            if let Err(what) = said.log.history(f, base.clone()).check(&disk) {
                fail(what);
            }
            match check_records(&said, f, &disk) {
                Ok(intact) => totals.records_intact += intact,
                Err(what) => fail(what),
            }
            totals.bytes_checked += disk.len() as u64;
            disks.push(disk);
        }
        if let Some((last_dir, checked)) = last_round.take() {
            check_unchanged(&last_dir, &checked, &format!("round {}", round - 1));
        }
        totals.rounds += 1;
        totals.files += files as u64;
        for (f, _) in left.iter().enumerate().take(files) {
            let last = said.log.ops.iter().rfind(|op| op.file == f);
            totals.in_flight += u64::from(last.is_some_and(|op| !op.returned));
        }
        for op in said.log.ops.iter().filter(|op| op.returned) {
            match op.kind {
                OpKind::Write { .. } => totals.writes_returned += 1,
                OpKind::SetLen { .. } => totals.set_lens_returned += 1,
            }
        }
        if let Some((dirty, writeback, _)) = at_kill {
            totals.killed_dirty += u64::from(dirty > 0);
            totals.killed_under_writeback += u64::from(writeback > 0);
        }
        if let Some((_, _, copies)) = said.stats {
            totals.copies_on_write += copies;
        }
        totals.keepers_stopped += u64::from(stop_keeper_first);
        for (f, disk) in disks.iter().enumerate() {
            left[f].clone_from(disk);
        }
        last_round = Some((round_dir, disks));
    }
    if let Some((last_dir, checked)) = last_round.take() {
        std::thread::sleep(Duration::from_millis(100));
        check_unchanged(&last_dir, &checked, "the last round");
    }
    let strays: Vec<_> = std::fs::read_dir(segment_dir.path())
        .expect("read the segment directory")
        .map(|e| e.expect("a directory entry").file_name())
        .collect();
    assert!(
        strays.is_empty(),
        "segments left in {}: {strays:?}",
        segment_dir.path().display()
    );
    eprintln!(
        "keeper_crash {kill:?}: {totals:?} in {:.1?}",
        started.elapsed()
    );
    // The kills must land where they matter: with dirty pages and writebacks in flight,
    // with operations in flight, after copies on write; and records must have survived.
    assert!(totals.records_intact > 0, "{totals:?}");
    assert!(totals.killed_dirty >= totals.rounds / 2, "{totals:?}");
    assert!(totals.killed_under_writeback > 0, "{totals:?}");
    assert!(totals.in_flight > 0, "{totals:?}");
    assert!(totals.copies_on_write > 0, "{totals:?}");
    assert!(totals.set_lens_returned > 0, "{totals:?}");
    if kill == Kill::OwnerThenKeeper && rounds >= 2 {
        // Rounds 0 and 1 stopped their keepers before the kill: a recovery and a build
        // each finished a whole segment, whatever the machine's speed.
        assert!(
            totals.recovered > 0 && totals.finished_by_build > 0,
            "no keeper was killed before it finished: {totals:?}"
        );
    }
}

/// What a kill waits for after its delay (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Aim {
    /// Nothing: an early kill lands wherever the child is.
    Anywhere,
    /// A report with dirty pages, after writer 0's copy on write.
    Dirty,
    /// A report with pages under writeback, after writer 0's copy on write.
    UnderWriteback,
}

/// Reads every line the child said so far, then, unless `aim` is `Anywhere`, its next
/// lines until a report shows what `aim` asks (at most `AIM_WAIT_MAX`). Returns the last
/// report read: the state the kill that follows lands in, within a report's period.
fn wait_for_aim(child: &mut Child, said: &mut Said, aim: Aim) -> Option<(u64, u64, u64)> {
    for line in child.lines_so_far() {
        parse_line(said, &line);
    }
    let hit = |stats: Option<(u64, u64, u64)>| match (aim, stats) {
        (Aim::Anywhere, _) => true,
        (_, None) => false,
        (Aim::Dirty, Some((dirty, _, copies))) => dirty > 0 && copies > 0,
        (Aim::UnderWriteback, Some((_, writeback, copies))) => writeback > 0 && copies > 0,
    };
    let deadline = Instant::now() + AIM_WAIT_MAX;
    if aim != Aim::Anywhere {
        // Fresh reports only: the one read last may be older than a period.
        said.stats = None;
    }
    while !hit(said.stats) && Instant::now() < deadline {
        let line = child.next_line(READY_WAIT_MAX, "its next line");
        parse_line(said, &line);
    }
    said.stats
}

/// How long a child runs before the kill, and whether it is an early kill (module docs).
fn kill_delay(rng: &mut Rng) -> (Duration, bool) {
    let unit = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    let early = rng.below(10) == 0;
    let ms = if early {
        unit * KILL_EARLY_MS
    } else {
        KILL_EARLY_MS * (KILL_LATE_MS / KILL_EARLY_MS).powf(unit)
    };
    (Duration::from_secs_f64(ms / 1000.0), early)
}

/// The files of a round, read again: they must hold what was checked (module docs). The
/// kernel's cache of them stays true to the device: an O_DIRECT write drops the cached
/// pages it covers. Removes the round's directory.
fn check_unchanged(dir: &Path, checked: &[Vec<u8>], round: &str) {
    for (f, bytes) in checked.iter().enumerate() {
        let path = dir.join(file_name(f));
        let now = std::fs::read(&path).expect("read a file again");
        if now != *bytes {
            let first = now
                .iter()
                .zip(bytes)
                .position(|(a, b)| a != b)
                .unwrap_or(now.len().min(bytes.len()));
            panic!(
                "{round}: file {f} changed after it was checked (a write landed after the keeper finished): {} bytes then, {} now, first difference at offset {first}",
                bytes.len(),
                now.len()
            );
        }
    }
    std::fs::remove_dir_all(dir).expect("remove a round's directory");
}
