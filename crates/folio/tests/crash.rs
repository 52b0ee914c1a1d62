//! The kill test (issue 14, done-when 3a): a child process writes checksummed records
//! through folio and syncs at random points, telling this process each sync that returned
//! Ok; this process SIGKILLs it at a random moment, 200 times, and after each kill reads
//! the file with `std::fs` and checks that every acknowledged byte is on disk.
//!
//! The child is this test binary run again (`std::env::current_exe`) with
//! `FOLIO_CRASH_CHILD` set, which makes `main` run the child instead of the test: the test
//! has no harness (`harness = false` in Cargo.toml; `common/harness.rs`) so that no
//! placeholder test stands in for the child. There is one test, `kill_and_check`.
//!
//! The child draws from its seed a cache (capacity 2-16 MiB, largest folio 4 KiB-2 MiB,
//! dirty expiry 2 ms-5 s, background threshold, io_uring or the pread pool) and then,
//! until it is killed: appends a record at the end, overwrites a record anywhere in the
//! file (already synced bytes included), writes one past the end (a hole), `sync_data`,
//! `sync_all`, `sync_range` over a random range, or `writeback` (starts writeback,
//! promises nothing). A record is a 24-byte header (magic, length, sequence number, a
//! checksum of the rest) and a payload drawn from its sequence number, 24 bytes to
//! 256 KiB long; the file stays under 4 MiB (past it, records only overwrite).
//!
//! Beside the writer, 1-2 reader threads of the child (`pin_the_tail`) pin the folio that
//! holds the file's last byte with `get_page`, hold it 5-50 µs and rest up to 20 µs,
//! again and again (issue 28): the writer appending into a pinned tail copies the folio on
//! write (`write::into_folio` W3) while syncs tag, write and wait for it, so the kill test
//! covers copy on write too. A reader checks that the tail page's bytes do not change
//! while it holds the pin; an error or a change ends the child with 101. A seed replays
//! the writer's operations, not which folios are copied (that is the threads' timing).
//!
//! The protocol, one line per event on the child's stdout, each written before the next
//! step: `ready`; `w <offset> <len> <seq>` before each `write_at`; `a <writes> <start>
//! <end> <size> <copies>` after each sync that returned Ok: the first `<writes>` writes
//! returned before it started, it covered `[start, end)`, the file was `<size>` bytes
//! long, and the cache had copied `<copies>` folios on write so far (the test fails if no
//! child ever did: the readers would not be doing their part). Any error in the child
//! panics it (exit 101: the test fails).
//!
//! What each kill proves (`common/durability.rs`): every byte an acknowledgement vouches
//! for is on disk with its acknowledged value unless a later write covered it (then it is
//! one of those writes' bytes: a write after the last sync may be on disk whole, torn or
//! not at all); no byte is one nobody wrote (the file's old bytes, a write's, or zeros);
//! the file is at least as long as the last acknowledged size; and every acknowledged
//! record no later write overlapped parses with its checksum. Each round continues from
//! what the last one left (the child reopens it, as a restarted database would: a tail
//! block written whole past the size, records torn by the kill), and every 20th round
//! starts from an empty file. The kill lands 10-100 ms after the child's first
//! acknowledgement: each child starts with a record written at the end of the file, the
//! same record written again while the child holds a view of its page (a copy on write,
//! whatever its readers' timing), and a `sync_data`; this process waits for that `a`
//! before the delay, so every round has an acknowledgement and a copy on write to check
//! on any machine (the coverage assertions hold by construction, issue 42).
//!
//! Each round works on a copy of what the last round left (written by this process, a new
//! inode), not on the killed child's file itself: a killed process's io_uring writes can
//! land after `waitpid` has returned (the kernel tears a dead process's rings down in the
//! background, and an O_DIRECT write already issued cannot be cancelled), so the dead
//! child's file may still change while the next child runs. This test first saw it
//! (docs/reliability.md, "Crash tests"): a record of round 126's child appeared in round
//! 127's file, after the check of round 126 had read it without. The check itself reads
//! the file once; a write landing later is one the child never had acknowledged.
//!
//! Environment: `FOLIO_CRASH_ROUNDS=n` (default 200); `FOLIO_CRASH_SEED=s` draws the
//! children's seeds and the kill delays from `s` (default: from the clock, printed; the
//! same seed replays the children's operations, not where the kills land).

mod common;
#[path = "common/durability.rs"]
mod durability;
#[path = "common/harness.rs"]
mod harness;
#[path = "common/records.rs"]
mod records;
#[path = "common/seeded.rs"]
mod seeded;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use durability::{History, Stored};
use folio::{BackendKind, Cache, File, PAGE_BYTES};
use harness::{say, Child};
use records::{parse, record, HEADER_BYTES};
use seeded::{env_u64, Rng};

const TEST_NAME: &str = "kill_and_check";
const CHILD_ENV: &str = "FOLIO_CRASH_CHILD";
const ROUNDS_DEFAULT: u64 = 200;
/// Every this many rounds, the file starts empty (module docs).
const FRESH_EVERY: u64 = 20;
/// The kill lands this long after `ready`: the least, and the spread above it.
const RUN_MIN: Duration = Duration::from_millis(10);
const RUN_SPREAD_MS: u64 = 90;
/// A child that does not say `ready` within this has failed.
const READY_WAIT_MAX: Duration = Duration::from_secs(30);
/// A child runs at most this long (if the parent died without killing it).
const CHILD_LIFE_MAX: Duration = Duration::from_secs(60);
/// Records are appended while the file is under this; past it they overwrite.
const FILE_BYTES_MAX: u64 = 4 << 20;

/// The child's readers that pin the tail page (module docs): how many, how long each pin
/// is held, and how long a reader rests between pins, at most.
const TAIL_READERS_MIN: u64 = 1;
const TAIL_READERS_MAX: u64 = 2;
const TAIL_HOLD_US_MIN: u64 = 5;
const TAIL_HOLD_US_MAX: u64 = 50;
const TAIL_REST_US_MAX: u64 = 20;

const RECORD_BYTES_MAX: u64 = 256 << 10;

fn main() {
    harness::main(&[(TEST_NAME, kill_and_check)], CHILD_ENV, child);
}

// ---------------------------------------------------------------------------------------
// The child.

/// The child (module docs): `spec` is "<path> <seed> <first seq>".
fn child(spec: &str) {
    let mut parts = spec.rsplitn(3, ' ');
    let first_seq: u64 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .expect("a first seq");
    let seed: u64 = parts.next().and_then(|s| s.parse().ok()).expect("a seed");
    let path = PathBuf::from(parts.next().expect("a path"));
    let mut rng = Rng(seed);
    let capacity: u64 = rng.pick(&[2 << 20, 4 << 20, 16 << 20]);
    let cache = Cache::builder()
        .capacity_bytes(capacity)
        .folio_order_max(rng.pick(&[0, 2, 4, 9]))
        .backend(rng.pick(&[BackendKind::IoUring, BackendKind::Pread]))
        .pread_threads(4)
        .dirty_expire(Duration::from_millis(rng.pick(&[2, 20, 5000])))
        .dirty_background_bytes(capacity / rng.pick(&[4, 10, 50]))
        .build()
        .expect("the child's cache");
    let file = Arc::new(
        cache
            .open_options()
            .write(true)
            .create(true)
            .open(&path)
            .expect("the child opens the file"),
    );
    for _ in 0..rng.between(TAIL_READERS_MIN, TAIL_READERS_MAX) {
        let (file, rng) = (file.clone(), Rng(rng.next()));
        std::thread::spawn(move || pin_the_tail(&file, rng));
    }
    say("ready");
    let born = Instant::now();
    let mut seq = first_seq;
    let mut writes = 0usize;
    // The first operations (module docs): a copy on write and an acknowledgement in every
    // child, whatever the timing of its readers.
    let offset = file.len().min(FILE_BYTES_MAX - HEADER_BYTES as u64);
    for pinned in [None, Some(())] {
        let view = pinned.map(|()| {
            file.get_page(offset)
                .unwrap_or_else(|e| panic!("child: get_page({offset}): {e}"))
        });
        say(&format!("w {offset} {HEADER_BYTES} {seq}"));
        let bytes = record(seq, HEADER_BYTES);
        let n = file
            .write_at(&bytes, offset)
            .unwrap_or_else(|e| panic!("child: write_at({offset}, {HEADER_BYTES}): {e}"));
        assert_eq!(n, bytes.len());
        writes += 1;
        seq += 1;
        drop(view);
    }
    file.sync_data()
        .unwrap_or_else(|e| panic!("child: the first sync_data: {e}"));
    let copies = cache.stats().write_copies;
    assert!(
        copies > 0,
        "child: a write into a pinned page did not copy it"
    );
    say(&format!(
        "a {writes} 0 {} {} {copies}",
        u64::MAX,
        file.len()
    ));
    while born.elapsed() < CHILD_LIFE_MAX {
        let len = file.len();
        let choice = rng.below(100);
        if choice < 78 {
            let size = match rng.below(100) {
                0..=49 => HEADER_BYTES as u64 + rng.below(500),
                50..=84 => HEADER_BYTES as u64 + rng.below(8192),
                _ => HEADER_BYTES as u64 + rng.below(RECORD_BYTES_MAX),
            };
            let mut offset = match choice {
                0..=44 => len,
                45..=54 if len > 4096 => rng.below(len / 4096) * 4096,
                45..=73 if len > 0 => rng.below(len),
                _ => len + 1 + rng.below(100_000),
            };
            if offset + size > FILE_BYTES_MAX {
                offset = rng.below(len.min(FILE_BYTES_MAX - size) + 1);
            }
            say(&format!("w {offset} {size} {seq}"));
            let bytes = record(seq, size as usize);
            let n = file
                .write_at(&bytes, offset)
                .unwrap_or_else(|e| panic!("child: write_at({offset}, {size}): {e}"));
            assert_eq!(n, bytes.len());
            writes += 1;
            seq += 1;
            continue;
        }
        let (start, end, result) = match choice {
            78..=87 => (0, u64::MAX, file.sync_data()),
            88..=91 => (0, u64::MAX, file.sync_all()),
            92..=97 => {
                let start = rng.below(len + 1);
                let n = 1 + rng.below(len - start + 4096);
                (start, start + n, file.sync_range(start, n))
            }
            _ => {
                let start = rng.below(len + 1);
                file.writeback(start, 1 + rng.below(1 << 20))
                    .expect("child: writeback");
                continue;
            }
        };
        result.unwrap_or_else(|e| panic!("child: sync of [{start}, {end}): {e}"));
        let copies = cache.stats().write_copies;
        say(&format!("a {writes} {start} {end} {} {copies}", file.len()));
    }
    std::process::exit(3);
}

/// A reader of the child (module docs): pins the folio that holds the file's last byte
/// for a short while, again and again, so the writer appending there copies it on write;
/// the page's bytes must not change while it is pinned. Runs until the child is killed;
/// an error ends the child with 101, as a panic of the main thread would.
fn pin_the_tail(file: &File, mut rng: Rng) {
    common::precise_sleeps();
    loop {
        let len = file.len();
        if len == 0 {
            std::thread::sleep(Duration::from_micros(TAIL_REST_US_MAX));
            continue;
        }
        let view = file.get_page(len - 1).unwrap_or_else(|e| {
            eprintln!("child: get_page({}) of the tail: {e}", len - 1);
            std::process::exit(101);
        });
        // The page that holds the tail, within the folio (up to 2 MiB): compared whole
        // after the hold.
        let page = ((len - 1 - view.offset_bytes()) as usize / PAGE_BYTES) * PAGE_BYTES;
        let page = page..(page + PAGE_BYTES).min(view.len());
        let seen = view[page.clone()].to_vec();
        std::thread::sleep(Duration::from_micros(
            rng.between(TAIL_HOLD_US_MIN, TAIL_HOLD_US_MAX),
        ));
        if view[page.clone()] != seen[..] {
            eprintln!(
                "child: the bytes of the tail page at {} changed under a pin",
                view.offset_bytes() + page.start as u64
            );
            std::process::exit(101);
        }
        drop(view);
        std::thread::sleep(Duration::from_micros(rng.below(TAIL_REST_US_MAX + 1)));
    }
}

// ---------------------------------------------------------------------------------------
// The parent.

/// What a run of rounds did, summed.
#[derive(Debug, Default)]
struct Totals {
    rounds: u64,
    writes: u64,
    acks: u64,
    /// Rounds killed with a write issued after the last acknowledgement.
    killed_with_unsynced_writes: u64,
    /// Acknowledged records found intact by their checksum.
    records_intact: u64,
    /// Bytes on disk that are a write's the last sync did not vouch for.
    bytes_checked: u64,
    /// Folios the children copied on write (as of their last acknowledgement), which the
    /// tail's readers make them do.
    copies_on_write: u64,
}

/// What one child said: its writes (offset, length, seq), each with whether a later line
/// proves it returned, and its acknowledgements.
#[derive(Debug, Default)]
struct Said {
    ready: bool,
    writes: Vec<(u64, usize, u64)>,
    acks: Vec<(usize, u64, u64, u64)>,
    /// Folios the cache had copied on write, as of the last acknowledgement.
    copies_on_write: u64,
    /// For each acknowledgement, the writes said before it (its place among the events).
    order: Vec<Event>,
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Write(usize),
    Ack(usize),
}

fn parse_line(said: &mut Said, line: &str) {
    let fields: Vec<&str> = line.split(' ').collect();
    let num = |i: usize| -> u64 {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .unwrap_or_else(|| panic!("a bad line from the child: {line:?}"))
    };
    match fields[0] {
        "ready" => said.ready = true,
        "w" => {
            said.order.push(Event::Write(said.writes.len()));
            said.writes.push((num(1), num(2) as usize, num(3)));
        }
        "a" => {
            said.order.push(Event::Ack(said.acks.len()));
            said.acks.push((num(1) as usize, num(2), num(3), num(4)));
            said.copies_on_write = num(5);
        }
        _ => panic!("a bad line from the child: {line:?}"),
    }
}

/// Runs one child on `path` and kills it `run` after it is ready; returns what it said.
fn run_child(path: &Path, seed: u64, first_seq: u64, run: Duration) -> Said {
    let spec = format!("{} {seed} {first_seq}", path.display());
    let mut child = Child::spawn(CHILD_ENV, &spec);
    let mut said = Said::default();
    parse_line(&mut said, &child.next_line(READY_WAIT_MAX, "ready"));
    assert!(said.ready, "the child's first line was not `ready`");
    // The child's first acknowledgement, after its copy on write (module docs): the kill
    // lands after both, on any machine.
    while said.acks.is_empty() {
        parse_line(&mut said, &child.next_line(READY_WAIT_MAX, "its first `a`"));
    }
    std::thread::sleep(run);
    child.kill();
    for line in child.rest_of_lines() {
        parse_line(&mut said, &line);
    }
    said
}

/// The history of one round: the records the child said it wrote, over `base`.
fn history_of(said: &Said, base: Vec<u8>) -> History {
    let mut history = History::new(base);
    for event in &said.order {
        match *event {
            Event::Write(j) => {
                let (offset, len, seq) = said.writes[j];
                // A write returned if the child said anything after it.
                let stored =
                    if j + 1 < said.writes.len() || said.acks.last().is_some_and(|a| a.0 > j) {
                        Stored::Yes
                    } else {
                        Stored::Maybe
                    };
                history.write(offset, record(seq, len), stored);
            }
            Event::Ack(i) => {
                let (writes, start, end, size) = said.acks[i];
                history.ack(writes, start..end, size);
            }
        }
    }
    history
}

/// The acknowledged records that no later write overlapped: they must parse whole.
fn check_records(said: &Said, disk: &[u8]) -> Result<u64, String> {
    let mut intact = 0;
    for (j, &(offset, len, seq)) in said.writes.iter().enumerate() {
        let end = offset + len as u64;
        let acked = said
            .acks
            .iter()
            .any(|&(writes, start, ack_end, _)| writes > j && start <= offset && end <= ack_end);
        let overwritten = said.writes[j + 1..]
            .iter()
            .any(|&(o, l, _)| o < end && offset < o + l as u64);
        if !acked || overwritten {
            continue;
        }
        match disk.get(offset as usize..).and_then(parse) {
            Some((s, l)) if (s, l) == (seq, len) => intact += 1,
            found => {
                return Err(format!(
                    "acknowledged record {seq} ({len} bytes at {offset}) does not parse: found {found:?}"
                ))
            }
        }
    }
    Ok(intact)
}

fn kill_and_check() {
    let seed = seeded::seed_from_env_or_clock("FOLIO_CRASH_SEED");
    let rounds = env_u64("FOLIO_CRASH_ROUNDS").unwrap_or(ROUNDS_DEFAULT);
    eprintln!("crash: {rounds} kills, FOLIO_CRASH_SEED={seed}");
    let dir = common::test_dir();
    let mut rng = Rng(seed);
    let mut totals = Totals::default();
    let started = Instant::now();
    // What the last round left on disk (module docs: each round works on a copy).
    let mut left = Vec::new();
    for round in 0..rounds {
        if round % FRESH_EVERY == 0 {
            left.clear();
        }
        let path = dir.path().join(format!("records-{round}"));
        let mut copy = std::fs::File::create(&path).expect("create the round's file");
        copy.write_all(&left)
            .and_then(|()| copy.sync_all())
            .expect("write the round's file");
        drop(copy);
        let base = std::mem::take(&mut left);
        let child_seed = rng.next();
        let run = RUN_MIN + Duration::from_millis(rng.below(RUN_SPREAD_MS));
        let said = run_child(&path, child_seed, round << 32, run);
        let disk = std::fs::read(&path).expect("read the file after the kill");
        // The dead child's io_uring writes may still land in it (module docs).
        std::fs::remove_file(&path).expect("remove the round's file");
        let history = history_of(&said, base);
        let fail = |what: String| -> ! {
            // Beside the test directory, which goes when the panic unwinds.
            let kept = dir.path().with_extension(format!("round{round}"));
            let _ = std::fs::write(&kept, &disk);
            panic!(
                "round {round} (child seed {child_seed}, killed {run:?} after ready, {} writes, {} acknowledgements): {what}\n  the file is kept at {}\n  FOLIO_CRASH_SEED={seed} runs the same children",
                said.writes.len(),
                said.acks.len(),
                kept.display()
            )
        };
        if let Err(what) = history.check(&disk) {
            fail(what);
        }
        match check_records(&said, &disk) {
            Ok(intact) => totals.records_intact += intact,
            Err(what) => fail(what),
        }
        totals.rounds += 1;
        totals.writes += said.writes.len() as u64;
        totals.acks += said.acks.len() as u64;
        totals.copies_on_write += said.copies_on_write;
        totals.bytes_checked += disk.len() as u64;
        let last_acked = said.acks.last().map_or(0, |a| a.0);
        if said.writes.len() > last_acked {
            totals.killed_with_unsynced_writes += 1;
        }
        left = disk;
    }
    eprintln!("crash: {totals:?} in {:.1?}", started.elapsed());
    // The kills must land where they matter: after acknowledged syncs, and with writes
    // the last sync did not cover.
    assert!(totals.acks >= totals.rounds, "{totals:?}");
    assert!(totals.records_intact > 0, "{totals:?}");
    assert!(totals.copies_on_write > 0, "{totals:?}");
    assert!(
        totals.killed_with_unsynced_writes >= totals.rounds / 4,
        "{totals:?}"
    );
}
