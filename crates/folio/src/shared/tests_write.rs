//! Writes seen across processes (docs/sharing.md "Writes seen across processes"): a
//! process writing a file through its domain cache and another reading it through the
//! same domain. The writer (W) and the reader (R) are runs of this test binary's `child`
//! role (as tests_cache.rs starts them: a cache's build starts threads, which a `fork` of
//! the threaded harness must not); the test relays their turns through their stdin and
//! stdout (W: "wrote k" after its k-th `write_at` returned; R: "ok k" after it checked).
//! No sleep decides what is covered: R checks after every returned write, by the pipe.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::attach::Member;
use super::files::Request;
use super::read::SharedReader;
use super::tests::{
    failure_of, fork, kill, wait_for, AtStep, DomainHome, MemberLever, Rng, SharedRegion,
};
use super::tests_read::{
    check_all, config, domain_cache, reclaim_everything, reclaim_reclaimable, stamped,
};
use super::tests_readkill::{
    cached_folios, flight_member, wait_until, Flight, FlightWorld, FLIGHT_LEN, FLIGHT_WORDS,
};
use super::{Died, Flaw, Run, Step};
use crate::types::OpenMode;
use crate::Cache;

const ROLE: &str = "FOLIO_TEST_WRITE_ROLE";
const HOME: &str = "FOLIO_TEST_WRITE_HOME";
const NAME: &str = "FOLIO_TEST_WRITE_NAME";
const DATA: &str = "FOLIO_TEST_WRITE_DATA";
const ROUNDS_ENV: &str = "FOLIO_TEST_WRITE_ROUNDS";
/// The prefix of every line a child says to the test.
const SAY: &str = "xproc:";

const SLOTS: u16 = super::queue::PIN_SLOTS;
/// Threads of R reading the file the whole time.
const READERS: usize = 8;
/// The file's first length (before round 1).
const FIRST_LEN: u64 = 5 * 4096 + 300;
const PAGE: u64 = 4096;

/// The byte at `at` as round `round` wrote it: each page's bytes stamped with its page and
/// the round (a torn page mixes two rounds' stamps).
fn stamp(at: u64, round: u64) -> u8 {
    let page = at / PAGE;
    (page.wrapping_mul(131) ^ round.wrapping_mul(29) ^ (at % PAGE).wrapping_mul(7)) as u8
}

/// Round `round`'s write on a file of `len` bytes (the schedule both children replay from
/// one seed): an append (partial pages) on even rounds, an overwrite elsewhere on odd
/// ones (1 byte to two pages, at any offset, sometimes past the end).
fn write_of(rng: &mut Rng, round: u64, len: u64) -> (u64, u64) {
    if round % 2 == 0 {
        (len, 1 + rng.below(5000))
    } else {
        let offset = rng.below(len + 100);
        (offset, 1 + rng.below(2 * PAGE + 10))
    }
}

/// The file's bytes after each round: `versions[k]` after round k (0: the first).
fn versions(rounds: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng(45);
    let mut file: Vec<u8> = (0..FIRST_LEN).map(|at| stamp(at, 0)).collect();
    let mut all = vec![file.clone()];
    for round in 1..=rounds {
        let (offset, len) = write_of(&mut rng, round, file.len() as u64);
        let end = (offset + len) as usize;
        if file.len() < end {
            file.resize(end, 0);
        }
        for at in offset..offset + len {
            file[at as usize] = stamp(at, round);
        }
        all.push(file.clone());
    }
    all
}

fn say(what: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{SAY} {what}").unwrap();
    out.flush().unwrap();
}

fn hear(input: &mut impl BufRead) -> String {
    let mut line = String::new();
    input.read_line(&mut line).unwrap();
    line.trim().to_string()
}

/// The child roles (run only by the tests below): "writer" writes the schedule, one round
/// per turn; "reader" checks the whole file after each round, with `READERS` threads
/// reading single pages the whole time and checking each is whole: a version of the page
/// no older than the last round told.
#[test]
#[ignore]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    // A reader's threads read until told to stop: a child whose test failed (or was
    // killed) would otherwise spin on forever.
    if !super::tests::die_with_parent() {
        return;
    }
    let home = PathBuf::from(std::env::var(HOME).unwrap());
    let path = PathBuf::from(std::env::var(DATA).unwrap()).join("w");
    let rounds: u64 = std::env::var(ROUNDS_ENV).unwrap().parse().unwrap();
    let cache = domain_cache(&home, &std::env::var(NAME).unwrap(), 1 << 20);
    let mut stdin = std::io::stdin().lock();
    match role.as_str() {
        "writer" => {
            let file = cache.open_options().write(true).open(&path).unwrap();
            let mut rng = Rng(45);
            let mut len = FIRST_LEN;
            say(format_args!("ready"));
            for round in 1..=rounds {
                let (offset, n) = write_of(&mut rng, round, len);
                let bytes: Vec<u8> = (offset..offset + n).map(|at| stamp(at, round)).collect();
                assert_eq!(file.write_at(&bytes, offset).unwrap(), n as usize);
                len = len.max(offset + n);
                if round % 4 == 0 {
                    // Writeback now and then: its completions unmark the domain's frames,
                    // which reclaim may then take (R reads the disk's newest bytes).
                    file.sync_data().unwrap();
                }
                say(format_args!("wrote {round}"));
                assert_eq!(hear(&mut stdin), "go");
            }
            let stats = cache.domain_stats().unwrap();
            eprintln!("writer: {stats:?}");
            say(format_args!(
                "result 0 {} {}",
                stats.installs + stats.appends_in_place,
                stats.reclaimed_frames
            ));
        }
        "twin-0" | "twin-1" => twin(&cache, &path, rounds, &mut stdin),
        "slicer-0" | "slicer-1" => {
            let process = u64::from(role.ends_with('1'));
            slicer(&cache, &path, process, rounds, &mut stdin);
        }
        "appender" => {
            let file = cache.open_options().write(true).open(&path).unwrap();
            let mut rng = Rng(46);
            let mut len = file.len();
            say(format_args!("ready"));
            assert_eq!(hear(&mut stdin), "go");
            for n in 1..=rounds {
                let size = 1 + rng.below(APPEND_BYTES_MAX);
                let bytes: Vec<u8> = (len..len + size).map(appended).collect();
                assert_eq!(file.write_at(&bytes, len).unwrap(), size as usize);
                len += size;
                if n % 64 == 0 {
                    // Its completions unmark the frames: the next append to such a page
                    // installs a copy (queue.rs, "Appends in place", A1 refused).
                    file.sync_data().unwrap();
                }
            }
            let stats = cache.domain_stats().unwrap();
            eprintln!("appender: {stats:?}");
            say(format_args!(
                "result {len} {} {}",
                stats.installs, stats.appends_in_place
            ));
        }
        "tail-reader" => {
            let file = cache.open(&path).unwrap();
            assert!(file.is_domain_file(), "the reader's open is a domain file");
            let stop = AtomicBool::new(false);
            let wrong = AtomicUsize::new(0);
            let checked = AtomicU64::new(0);
            std::thread::scope(|scope| {
                for _ in 0..READERS {
                    let (file, stop, wrong, checked) = (&file, &stop, &wrong, &checked);
                    scope.spawn(move || {
                        let mut buf = vec![0u8; PAGE as usize];
                        while !stop.load(Ordering::Acquire) {
                            // The file's last page, as far as it goes: every byte below
                            // the size the read loaded is the appender's.
                            let page = file.len().saturating_sub(1) / PAGE;
                            let got = file.read_at(&mut buf, page * PAGE).unwrap();
                            let at = page * PAGE;
                            if let Some(i) = (0..got).find(|&i| buf[i] != appended(at + i as u64)) {
                                if wrong.fetch_add(1, Ordering::Relaxed) < 5 {
                                    eprintln!(
                                        "page {page}: byte {i} of {got} is {}, not {}",
                                        buf[i],
                                        appended(at + i as u64)
                                    );
                                }
                            }
                            checked.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
                say(format_args!("ready"));
                assert_eq!(hear(&mut stdin), "stop");
                stop.store(true, Ordering::Release);
            });
            let len = file.len();
            let mut whole = vec![0u8; len as usize];
            let got = file.read_at(&mut whole, 0).unwrap();
            let right = got as u64 == len
                && whole
                    .iter()
                    .enumerate()
                    .all(|(at, &b)| b == appended(at as u64));
            say(format_args!(
                "result {} {} {len}",
                wrong.load(Ordering::Relaxed) + usize::from(!right),
                checked.load(Ordering::Relaxed)
            ));
        }
        "reader" => {
            let all = versions(rounds);
            let file = cache.open(&path).unwrap();
            assert!(file.is_domain_file(), "the reader's open is a domain file");
            let told = AtomicU64::new(0);
            let stop = AtomicBool::new(false);
            let torn = AtomicUsize::new(0);
            let checked = AtomicU64::new(0);
            let mut wrong = 0;
            std::thread::scope(|scope| {
                for t in 0..READERS {
                    let (file, all, told, stop, torn, checked) =
                        (&file, &all, &told, &stop, &torn, &checked);
                    scope.spawn(move || {
                        let mut rng = Rng(1000 + t as u64);
                        let mut buf = vec![0u8; PAGE as usize];
                        while !stop.load(Ordering::Acquire) {
                            let from = told.load(Ordering::Acquire) as usize;
                            let pages = all[from].len() as u64 / PAGE + 1;
                            let page = rng.below(pages);
                            let got = file.read_at(&mut buf, page * PAGE).unwrap();
                            // W is at most one round ahead of what R was told at the end.
                            let to = (told.load(Ordering::Acquire) as usize + 1).min(all.len() - 1);
                            // The bytes: one round's version of the page, whole; the
                            // length: one round's size (a read racing an extending write
                            // may load the size before the write raised it, as the
                            // kernel's read loads i_size before it copies the pages).
                            let in_page = |k: usize| {
                                let v = &all[k];
                                let start = ((page * PAGE) as usize).min(v.len());
                                (start, (start + PAGE as usize).min(v.len()))
                            };
                            let bytes_whole = (from..=to).any(|k| {
                                let (start, end) = in_page(k);
                                got <= end - start && buf[..got] == all[k][start..start + got]
                            });
                            let sized = (from..=to).any(|k| {
                                let (start, end) = in_page(k);
                                got == end - start
                            });
                            if !bytes_whole || !sized {
                                torn.fetch_add(1, Ordering::Relaxed);
                                let lens: Vec<_> = (from..=to).map(|k| in_page(k).1 - in_page(k).0).collect();
                                eprintln!("page {page}: {got} bytes, not a version of rounds {from}..={to} (their lengths {lens:?}; bytes whole {bytes_whole})");
                            }
                            checked.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
                say(format_args!("ready"));
                let mut whole = vec![0u8; 1 << 20];
                for round in 1..=rounds {
                    assert_eq!(hear(&mut stdin), format!("check {round}"));
                    told.store(round, Ordering::Release);
                    let want = &all[round as usize];
                    let got = file.read_at(&mut whole, 0).unwrap();
                    // The handle's length is the writer's too (what the C ABI's reads and
                    // a RocksDB secondary's WAL reads stop at), not the length at open.
                    if file.len() != want.len() as u64 {
                        eprintln!(
                            "round {round}: len() {}, {} written",
                            file.len(),
                            want.len()
                        );
                        wrong += 1;
                    }
                    if got != want.len() || whole[..got] != want[..] {
                        let first = (0..got.min(want.len())).find(|&i| whole[i] != want[i]);
                        eprintln!(
                            "round {round}: {got} bytes read, {} written; first wrong byte {first:?}",
                            want.len()
                        );
                        wrong += 1;
                    }
                    say(format_args!("ok {round}"));
                }
                stop.store(true, Ordering::Release);
            });
            let s = cache.domain_stats().unwrap();
            eprintln!(
                "reader: {} page reads checked, {} torn; {s:?}",
                checked.load(Ordering::Relaxed),
                torn.load(Ordering::Relaxed)
            );
            say(format_args!(
                "result {} {} {}",
                wrong + torn.load(Ordering::Relaxed),
                checked.load(Ordering::Relaxed),
                s.preads
            ));
        }
        other => panic!("no role {other}"),
    }
}

/// A child of `two_writing_processes_read_each_others_writes`: one of two processes that
/// write the file in turns, replaying the schedule (`write_of`) from one seed. Told
/// "write k", it writes round k's bytes; "check k", it reads the whole file through its
/// writable handle and checks it is round k's; "sync k", it syncs; "end", its counts.
fn twin(cache: &Cache, path: &Path, rounds: u64, stdin: &mut impl BufRead) {
    let all = versions(rounds);
    let file = cache.open_options().write(true).open(path).unwrap();
    let mut rng = Rng(45);
    let mut len = FIRST_LEN;
    let mut schedule = (1..=rounds).map(move |round| {
        let (offset, n) = write_of(&mut rng, round, len);
        len = len.max(offset + n);
        (offset, n)
    });
    let mut whole = vec![0u8; 1 << 20];
    let mut wrong = 0;
    say(format_args!("ready"));
    loop {
        let told = hear(stdin);
        let (what, round) = told.split_once(' ').unwrap_or((told.as_str(), "0"));
        let round: u64 = round.parse().unwrap();
        match what {
            "write" => {
                let (offset, n) = schedule.next().unwrap();
                let bytes: Vec<u8> = (offset..offset + n).map(|at| stamp(at, round)).collect();
                assert_eq!(file.write_at(&bytes, offset).unwrap(), n as usize);
                say(format_args!("wrote {round}"));
            }
            "skip" => {
                schedule.next().unwrap();
                say(format_args!("skipped {round}"));
            }
            "check" => {
                let want = &all[round as usize];
                let got = file.read_at(&mut whole, 0).unwrap();
                if file.len() != want.len() as u64 || whole[..got] != want[..] {
                    let first = (0..got.min(want.len())).find(|&i| whole[i] != want[i]);
                    eprintln!(
                        "round {round}: len() {}, {got} bytes read, {} written; first wrong byte {first:?}",
                        file.len(),
                        want.len()
                    );
                    wrong += 1;
                }
                say(format_args!("ok {round}"));
            }
            "sync" => {
                file.sync_data().unwrap();
                say(format_args!("synced {round}"));
            }
            "end" => break,
            other => panic!("a twin told {other}"),
        }
    }
    let stats = cache.domain_stats().unwrap();
    eprintln!("twin: {stats:?}");
    say(format_args!(
        "result {wrong} {} {} {}",
        stats.installs, stats.preads, stats.roles_taken
    ));
}

/// The slices test's file: `SLICE_PAGES` pages of `SLICES_PER_PAGE` slices each, slice
/// `i` owned by writer thread `i % SLICERS` (threads `SLICER_THREADS * process + t`), so
/// that every page has slices of both processes' threads.
const SLICE_PAGES: u64 = 32;
const SLICES_PER_PAGE: u64 = 8;
const SLICE_BYTES: u64 = PAGE / SLICES_PER_PAGE;
const SLICER_THREADS: u64 = 4;
const SLICERS: u64 = 2 * SLICER_THREADS;

/// Writer thread `thread`'s writes, replayed by the test from one seed: each is a range
/// within one of its slices and the byte it writes there (the write's number, stamped
/// with the thread).
fn slice_writes(thread: u64, writes: u64) -> Vec<(u64, u64, u8)> {
    let mut rng = Rng(7000 + thread);
    let slices = SLICE_PAGES * SLICES_PER_PAGE / SLICERS;
    (0..writes)
        .map(|n| {
            let slice = (rng.below(slices) * SLICERS + thread) * SLICE_BYTES;
            let start = rng.below(SLICE_BYTES);
            let len = 1 + rng.below(SLICE_BYTES - start);
            (
                slice + start,
                len,
                (n as u8).wrapping_mul(16) ^ thread as u8,
            )
        })
        .collect()
}

/// The file's bytes once every write of `slice_writes` is applied.
fn sliced_file(writes: u64) -> Vec<u8> {
    let mut file = vec![0u8; (SLICE_PAGES * PAGE) as usize];
    for thread in 0..SLICERS {
        for (at, len, byte) in slice_writes(thread, writes) {
            file[at as usize..(at + len) as usize].fill(byte);
        }
    }
    file
}

/// A child of `two_writing_processes_with_threads_keep_each_others_bytes`: process
/// `process`'s `SLICER_THREADS` threads, each writing its own slices (`slice_writes`)
/// through one writable handle, and after each write reading its slice back (it must be
/// the thread's model: no write of the other process, whose slices share the page, may
/// have put an older copy of it back), syncing every 25 writes. Told "go", it writes;
/// then its result: the wrong reads, the writes.
fn slicer(cache: &Cache, path: &Path, process: u64, writes: u64, stdin: &mut impl BufRead) {
    let file = cache.open_options().write(true).open(path).unwrap();
    say(format_args!("ready"));
    assert_eq!(hear(stdin), "go");
    let wrong = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for t in 0..SLICER_THREADS {
            let (file, wrong) = (&file, &wrong);
            scope.spawn(move || {
                let thread = process * SLICER_THREADS + t;
                let mut model = vec![0u8; (SLICE_PAGES * PAGE) as usize];
                let mut back = vec![0u8; SLICE_BYTES as usize];
                for (n, (at, len, byte)) in slice_writes(thread, writes).into_iter().enumerate() {
                    let bytes = vec![byte; len as usize];
                    assert_eq!(file.write_at(&bytes, at).unwrap(), len as usize);
                    model[at as usize..(at + len) as usize].fill(byte);
                    let slice = at / SLICE_BYTES * SLICE_BYTES;
                    assert_eq!(file.read_at(&mut back, slice).unwrap(), back.len());
                    let want = &model[slice as usize..(slice + SLICE_BYTES) as usize];
                    if back != want && wrong.fetch_add(1, Ordering::Relaxed) < 5 {
                        let first = (0..back.len()).find(|&i| back[i] != want[i]);
                        eprintln!("thread {thread}, write {n}: slice at {slice} wrong from byte {first:?}");
                    }
                    if n % 25 == 24 {
                        file.sync_data().unwrap();
                    }
                }
            });
        }
    });
    file.sync_data().unwrap();
    let roles = cache.domain_stats().unwrap().roles_taken;
    say(format_args!(
        "result {} {} {roles}",
        wrong.load(Ordering::Relaxed),
        SLICER_THREADS * writes
    ));
}

/// Two writing processes with 4 writer threads each on one file (docs/sharing.md "Two
/// writing processes"): every page holds 512-byte slices of threads of both processes,
/// each thread writes parts of its own slices at random (150 writes, a sync every 25)
/// and reads each slice back after its write. So most writes are partial pages whose
/// other bytes the other process wrote last: the role moves between the processes at
/// almost every write, while the other threads of both wait for it or write. Checked:
/// every read-back is the thread's own model (a write based on a stale private page, or
/// a hand-over racing a write of the same process, puts an older slice back), and the
/// disk at the end is every thread's last bytes.
#[test]
fn two_writing_processes_with_threads_keep_each_others_bytes() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let writes = 150;
    let path = data.path().join("w");
    std::fs::write(&path, vec![0u8; (SLICE_PAGES * PAGE) as usize]).unwrap();
    let name = "two-writers-threads";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 128)).unwrap();
    let mut slicers = [
        Talker::start("slicer-0", home.path(), name, data.path(), writes),
        Talker::start("slicer-1", home.path(), name, data.path(), writes),
    ];
    for slicer in &mut slicers {
        assert_eq!(slicer.next(), "ready");
    }
    let started = Instant::now();
    for slicer in &mut slicers {
        slicer.tell("go");
    }
    let [a, b] = slicers.map(Talker::finish);
    let took = started.elapsed();
    eprintln!("{writes} writes a thread in {took:?}: process A {a:?}, process B {b:?}");
    assert_eq!((a[0], b[0]), (0, 0), "slices read back wrong");
    // The role moved back and forth (a move needs both processes writing at once).
    assert!(a[2] + b[2] >= 20, "roles taken: {a:?} {b:?}");
    let disk = std::fs::read(&path).unwrap();
    let want = sliced_file(writes);
    let first = (0..want.len()).find(|&i| disk[i] != want[i]);
    assert!(
        first.is_none(),
        "the disk differs from the writes from byte {first:?}"
    );
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// Two writing processes on one file (docs/sharing.md "Two writing processes"): A and B,
/// each a `Cache` with one domain, write the file in turns (round k by A if k is odd, by
/// B if even: appends of partial pages and overwrites of 1 byte to 2 pages, as
/// `a_write_that_returned_is_read_by_another_process` writes them). After each returned
/// write, both read the whole file through their writable handles and a third process,
/// a reader with 8 threads reading pages the whole time, reads it through the domain:
/// every byte and the length must be the round's. Every fifth round the process that
/// did not write syncs, and the test reads the disk: the round's bytes (its sync covered
/// the other's returned writes). Each round's writer is the follower of the other's role
/// (mapping/domain.rs, F2, F3): the role moves every round.
#[test]
fn two_writing_processes_read_each_others_writes() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let rounds = 40;
    let all = versions(rounds);
    std::fs::write(data.path().join("w"), &all[0]).unwrap();
    let name = "two-writers";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 64)).unwrap();
    let mut twins = [
        Talker::start("twin-0", home.path(), name, data.path(), rounds),
        Talker::start("twin-1", home.path(), name, data.path(), rounds),
    ];
    for twin in &mut twins {
        assert_eq!(twin.next(), "ready");
    }
    let mut r = Talker::start("reader", home.path(), name, data.path(), rounds);
    assert_eq!(r.next(), "ready");
    let started = Instant::now();
    for round in 1..=rounds {
        let (w, o) = ((round % 2) as usize, (1 - round % 2) as usize);
        twins[w].tell(&format!("write {round}"));
        assert_eq!(twins[w].next(), format!("wrote {round}"));
        twins[o].tell(&format!("skip {round}"));
        assert_eq!(twins[o].next(), format!("skipped {round}"));
        for who in [o, w] {
            twins[who].tell(&format!("check {round}"));
            assert_eq!(twins[who].next(), format!("ok {round}"));
        }
        r.tell(&format!("check {round}"));
        assert_eq!(r.next(), format!("ok {round}"));
        if round % 5 == 0 {
            twins[o].tell(&format!("sync {round}"));
            assert_eq!(twins[o].next(), format!("synced {round}"));
            let disk = std::fs::read(data.path().join("w")).unwrap();
            assert!(
                disk == all[round as usize],
                "round {round}: the disk after the other process's sync: {} bytes, {} written",
                disk.len(),
                all[round as usize].len()
            );
        }
    }
    let took = started.elapsed();
    for twin in &mut twins {
        twin.tell("end");
    }
    let [a, b] = twins.map(Talker::finish);
    let read = r.finish();
    eprintln!("{rounds} rounds in {took:?}; twin A: {a:?}, twin B: {b:?}, reader: {read:?}");
    assert_eq!((a[0], b[0]), (0, 0), "rounds a twin read wrong");
    assert_eq!(read[0], 0, "wrong rounds and torn pages the reader read");
    assert!(
        a[1] > 0 && b[1] > 0,
        "a twin installed nothing: {a:?} {b:?}"
    );
    // The role moved at every round but the first (the first write's twin held it).
    assert!(a[3] + b[3] >= rounds - 1, "roles taken: {a:?} {b:?}");
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

struct Talker {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
    what: &'static str,
}

impl Talker {
    fn start(role: &'static str, home: &Path, name: &str, data: &Path, rounds: u64) -> Talker {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "shared::tests_write::child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, role)
            .env(HOME, home)
            .env(NAME, name)
            .env(DATA, data)
            .env(ROUNDS_ENV, rounds.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        Talker {
            input: child.stdin.take().unwrap(),
            output: BufReader::new(child.stdout.take().unwrap()),
            child,
            what: role,
        }
    }

    /// The child's next line to the test (its harness's lines skipped).
    fn next(&mut self) -> String {
        loop {
            let mut line = String::new();
            let n = self.output.read_line(&mut line).unwrap();
            assert!(n > 0, "{} ended: {:?}", self.what, self.child.wait());
            if let Some((_, said)) = line.split_once(SAY) {
                return said.trim().to_string();
            }
        }
    }

    fn tell(&mut self, what: &str) {
        writeln!(self.input, "{what}").unwrap();
        self.input.flush().unwrap();
    }

    /// The result line's numbers, once the child exited 0 (within two minutes).
    fn finish(mut self) -> Vec<u64> {
        let said = self.next();
        let numbers = said
            .strip_prefix("result ")
            .unwrap_or_else(|| panic!("{}: {said}", self.what))
            .split_whitespace()
            .map(|w| w.parse().unwrap())
            .collect();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "{}: {status}", self.what);
                return numbers;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("{}: never exited", self.what);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The most bytes of one of the appender's appends.
const APPEND_BYTES_MAX: u64 = 1000;

/// The byte at `at` of the appender's file: never 0 (a byte not stored yet reads 0).
fn appended(at: u64) -> u8 {
    1 + (at.wrapping_mul(7) % 251) as u8
}

/// Appends in place (queue.rs, "Appends in place") read from another process while they
/// are made: W (the appender) appends 1-1,000 bytes at a time to a file through its
/// domain cache, 10,000 times, syncing every 64 (so some appends find their page's mark released
/// and install a copy); meanwhile 8 threads of R read the file's last page as far as the
/// size each read loads, and check every byte: one not stored yet would read 0, never a
/// byte of the file. Checked to fail with A2 and A3 swapped (the size raised before the
/// bytes are stored). Then R reads the whole file: every byte right. At this length (5 MB
/// through 64 frames) it also fails on an install that reclaimed one frame a try (`write_at`:
/// "no frame of the domain", every run, before `SharedReader::install` made room for two).
#[test]
fn appends_in_place_are_read_whole_by_another_process() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let appends = 10_000;
    let first: Vec<u8> = (0..1000).map(appended).collect();
    std::fs::write(data.path().join("w"), &first).unwrap();
    let name = "write-append";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 64)).unwrap();
    let mut w = Talker::start("appender", home.path(), name, data.path(), appends);
    assert_eq!(w.next(), "ready");
    let mut r = Talker::start("tail-reader", home.path(), name, data.path(), appends);
    assert_eq!(r.next(), "ready");
    w.tell("go");
    let written = w.finish();
    r.tell("stop");
    let read = r.finish();
    eprintln!("appender: {written:?}, reader: {read:?}");
    assert!(written[2] > appends / 2, "appends in place: {written:?}");
    assert!(written[1] > 0, "copies installed: {written:?}");
    assert_eq!(read[0], 0, "wrong bytes read");
    assert!(read[1] > 0, "the reader's threads read nothing");
    assert_eq!(read[2], written[0], "the reader's length");
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// An append in place stores only past every size the writer published (queue.rs,
/// "Appends in place"): after a truncation, a reader that loaded the older, larger size
/// may still be copying up to it, so appends below it install copies; past it, in place
/// again. Counted by the writer's stats.
#[test]
fn an_append_below_a_size_once_published_installs_a_copy() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let name = "write-shrunk";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 64)).unwrap();
    let cache = domain_cache(home.path(), name, 8 << 20);
    let path = data.path().join("f");
    std::fs::write(&path, b"").unwrap();
    let file = cache.open_options().write(true).open(&path).unwrap();
    let counts = || {
        let s = cache.domain_stats().unwrap();
        (s.installs, s.appends_in_place)
    };
    file.write_at(&[1; 1000], 0).unwrap();
    assert_eq!(counts(), (1, 0), "a new page is installed");
    file.write_at(&[2; 100], 1000).unwrap();
    assert_eq!(counts(), (1, 1), "an append to it is made in place");
    file.write_at(&[3; 10], 20).unwrap();
    assert_eq!(counts(), (2, 1), "an overwrite is installed");
    file.write_at(&[4; 100], 1100).unwrap();
    assert_eq!(
        counts(),
        (2, 2),
        "an append to the overwrite's frame is made in place"
    );
    file.set_len(500).unwrap();
    assert_eq!(counts(), (3, 2), "the cut page is installed");
    file.write_at(&[5; 100], 500).unwrap();
    file.write_at(&[6; 600], 600).unwrap();
    assert_eq!(
        counts(),
        (5, 2),
        "appends below the size once published are installed"
    );
    file.write_at(&[7; 100], 1200).unwrap();
    assert_eq!(counts(), (5, 3), "past it, in place again");
    drop(file);
    drop(cache);
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// W appends and overwrites (partial pages) a file through its domain cache, and after
/// each `write_at` returned R reads the whole file through the same domain: every byte
/// and the size are the writes' (R's reads of pages W's writes made are hits, never the
/// disk's stale page); meanwhile 8 threads of R read single pages and each is a whole
/// version of the page, never a mix. W syncs every 4 rounds, so frames are unmarked and
/// reclaimed (a domain of 32 frames for a file that grows to 42 pages) and R's misses read the disk's newest bytes. Then,
/// both gone (W's drop detached it: every mark cleared), the domain checks and a reclaim
/// frees every frame.
#[test]
fn a_write_that_returned_is_read_by_another_process() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let rounds = 120;
    std::fs::write(data.path().join("w"), &versions(0)[0]).unwrap();
    let name = "write-pingpong";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 32)).unwrap();
    let mut w = Talker::start("writer", home.path(), name, data.path(), rounds);
    assert_eq!(w.next(), "ready");
    let mut r = Talker::start("reader", home.path(), name, data.path(), rounds);
    assert_eq!(r.next(), "ready");
    for round in 1..=rounds {
        assert_eq!(w.next(), format!("wrote {round}"));
        r.tell(&format!("check {round}"));
        assert_eq!(r.next(), format!("ok {round}"));
        w.tell("go");
    }
    let written = w.finish();
    let read = r.finish();
    eprintln!("writer: {written:?}, reader: {read:?}");
    assert!(written[1] >= rounds, "the writer's installs: {written:?}");
    assert_eq!(read[0], 0, "wrong rounds and torn pages read");
    assert!(read[1] > 0, "the reader's threads read nothing");
    // Frames were reclaimed once written back, and the reader read the disk then.
    assert!(written[2] + read[2] > 0, "no reclaim, no read of the disk");
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// What a write pays for the domain (docs/sharing.md "Writes seen across processes",
/// "Measured"): a 4 KiB overwrite of a cached page and a 100-byte append, through a
/// `Cache` with a domain (the private write, then the page put into the domain) beside a
/// private `Cache` (today's path), in one process, the two alternated round by round.
/// Medians of the rounds' per-write times. Run by hand:
/// `cargo test --release -p folio --lib shared::tests_write::a_write_costs -- --ignored
/// --nocapture`.
#[test]
#[ignore]
fn a_write_costs() {
    const WRITES: u64 = 2_000;
    const ROUNDS: usize = 7;
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let name = "write-costs";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 4096)).unwrap();
    let build = |domain: bool| {
        let builder = Cache::builder()
            .capacity_bytes(64 << 20)
            .segment_dir(home.path());
        let builder = if domain {
            builder.domain(name)
        } else {
            builder
        };
        builder.build().unwrap()
    };
    let caches = [build(false), build(true)];
    let page = vec![0x5au8; 4096];
    let small = vec![0xa5u8; 100];
    let mut times: [[Vec<f64>; 2]; 2] = Default::default();
    for round in 0..ROUNDS {
        for (c, cache) in caches.iter().enumerate() {
            let path = data.path().join(format!("r{round}-{c}"));
            std::fs::write(&path, vec![0u8; 64 * 4096]).unwrap();
            let file = cache.open_options().write(true).open(&path).unwrap();
            let mut whole = vec![0u8; 64 * 4096];
            file.read_at(&mut whole, 0).unwrap();
            let mut rng = Rng(round as u64 + 1);
            let started = Instant::now();
            for _ in 0..WRITES {
                let at = rng.below(64) * 4096;
                file.write_at(&page, at).unwrap();
            }
            times[0][c].push(started.elapsed().as_nanos() as f64 / WRITES as f64);
            let mut end = 64 * 4096;
            let started = Instant::now();
            for _ in 0..WRITES {
                file.write_at(&small, end).unwrap();
                end += 100;
            }
            times[1][c].push(started.elapsed().as_nanos() as f64 / WRITES as f64);
            file.sync_data().unwrap();
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    for (what, t) in ["4 KiB overwrite", "100-byte append"]
        .iter()
        .zip(times.iter_mut())
    {
        let (mut private, mut domain) = (t[0].clone(), t[1].clone());
        let (p, d) = (median(&mut private), median(&mut domain));
        eprintln!(
            "{what}: private {p:.0} ns, with the domain {d:.0} ns (x{:.2}); rounds: private {:?}, domain {:?}",
            d / p,
            private.iter().map(|x| *x as u64).collect::<Vec<_>>(),
            domain.iter().map(|x| *x as u64).collect::<Vec<_>>()
        );
    }
    let stats = caches[1].domain_stats().unwrap();
    let (installs, in_place) = (stats.installs, stats.appends_in_place);
    eprintln!("{installs} installs, {in_place} appends in place");
    assert!(
        installs + in_place >= 2 * WRITES * ROUNDS as u64,
        "{installs} installs, {in_place} appends in place"
    );
    drop(caches);
    parent.detach();
}

/// `OpenOptions::private` on a writable open (a storage engine's table, read by nobody
/// until it is synced): its writes are not put into the domain (no install), and the
/// domain's record is retired, so that another process's next open reads the disk; a
/// writable open without it installs each written page.
#[test]
fn a_private_writable_open_keeps_its_writes_out_of_the_domain() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let name = "write-private";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 64)).unwrap();
    let cache = domain_cache(home.path(), name, 1 << 20);
    let page = vec![7u8; 4096];
    let private = cache
        .open_options()
        .write(true)
        .create(true)
        .private(true)
        .open(data.path().join("table"))
        .unwrap();
    private.write_at(&page, 0).unwrap();
    private.write_at(&page, 4096).unwrap();
    assert_eq!(
        cache.domain_stats().unwrap().installs,
        0,
        "a private handle's writes"
    );
    // And its own reads are its writes (the private path's).
    let mut back = vec![0u8; 8192];
    assert_eq!(private.read_at(&mut back, 0).unwrap(), 8192);
    assert!(back.iter().all(|&b| b == 7));
    let shared = cache
        .open_options()
        .write(true)
        .create(true)
        .open(data.path().join("wal"))
        .unwrap();
    shared.write_at(&page, 0).unwrap();
    assert_eq!(
        cache.domain_stats().unwrap().installs,
        1,
        "a shared handle's write"
    );
    drop((private, shared));
    drop(cache);
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// A member's lever that holds its reader's thread once, at its `point`, until the test
/// lets it go (`go`): no sleep decides the order.
struct Hold {
    point: HoldPoint,
    /// The reader is at its point.
    held: AtomicBool,
    go: AtomicBool,
}

/// Where a `Hold` holds its reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HoldPoint {
    /// Its first `Step::Reading`: its miss's window inserted in flight, not read (under
    /// `Flaw::ReadBeforeInsertion`, read and not inserted).
    Reading,
    /// The end of its first hand-over: the first `Step::Unlocked` at which the queue holds
    /// one frame more than `queued_before` (tests_readkill's `StopBeforeInsertion`, for a
    /// thread): its frame queued in flight, neither inserted nor read, the size of the
    /// file loaded at its read's start.
    BeforeInsertion { queued_before: u32 },
}

impl Hold {
    fn new(point: HoldPoint) -> Hold {
        Hold {
            point,
            held: AtomicBool::new(false),
            go: AtomicBool::new(false),
        }
    }
}

impl AtStep for Hold {
    fn at(&self, member: &Member, step: Step) -> Result<(), Died> {
        let here = match self.point {
            HoldPoint::Reading => step == Step::Reading,
            HoldPoint::BeforeInsertion { queued_before } => {
                step == Step::Unlocked && member.domain().queue().count() == queued_before + 1
            }
        };
        if here && !self.held.swap(true, Ordering::AcqRel) {
            wait_until("the test lets the reader go", || {
                self.go.load(Ordering::Acquire)
            });
        }
        Ok(())
    }
}

/// The pages W writes over R's window: R's first window at page 0 is 2 pages (tests_readkill,
/// the in-flight tests), within these.
const RACED_PAGES: u64 = 4;

/// The window a miss's `pread` once had against a write (docs/sharing.md, "Writes seen
/// across processes", Limits, before the in-flight protocol): reader R (a thread, member
/// R) misses page 0 of a 64-page file and its lever holds it at `Step::Reading` (its
/// window, the page and a page read ahead, inserted in flight, not read); W (a `Cache` of
/// the same domain, the file's writer) writes pages 0-3 with new bytes, its write returns
/// (its frames replace R's in the index: R's are in no index now), W's `sync_data` writes
/// them to the disk and releases their marks, and every frame reclaim may take is reclaimed
/// (W's: the pages name no frame); then R goes on. Asserted: R's own read is the old page
/// or the new one, whole; every later read of pages 0-3, by R again and by a third member,
/// is the new bytes; the structures check, and a reclaim of everything frees every frame.
/// Its broken variant (`a_miss_that_reads_before_it_inserts_...`) fails on "a later read
/// returns the older page".
#[test]
fn a_miss_in_flight_never_inserts_a_page_older_than_a_returned_write() {
    miss_against_a_write(Flaw::None);
}

/// The test above with the miss's order before the in-flight protocol
/// (`Flaw::ReadBeforeInsertion`: it reads its pages, then inserts them): R reads the old
/// bytes before W's write and inserts them after W's pages are written back and reclaimed,
/// so the later reads hit the older page, and the test fails on it.
#[test]
fn a_miss_that_reads_before_it_inserts_inserts_a_page_older_than_a_returned_write() {
    let message = failure_of("the miss that read before its insertion passed", || {
        miss_against_a_write(Flaw::ReadBeforeInsertion)
    });
    eprintln!("read before insertion: caught: {message}");
    assert!(
        message.contains("a later read returns the older page"),
        "failed otherwise: {message}"
    );
}

/// The test of a miss against a write, R's miss as `flaw` says.
fn miss_against_a_write(flaw: Flaw) {
    let world = FlightWorld::new("write-window");
    let (config, path) = (&world.config, &world.path);
    let old = stamped(0, FLIGHT_LEN);
    let new = stamped(1, RACED_PAGES * PAGE);
    let (r, third) = (
        Member::attach(config).unwrap(),
        Member::attach(config).unwrap(),
    );
    let writer = domain_cache(&config.dir, &config.name, 1 << 20);
    let w = writer.open_options().write(true).open(path).unwrap();
    let lever = Hold::new(HoldPoint::Reading);
    let r_run = MemberLever::new(&r, &lever).with_flaw(flaw);
    let r_reader = SharedReader::new(&r, &r_run, 4);
    let r_file = r_reader.open(path).unwrap();
    r_file.set_readahead_pages(16);
    let queue = r.domain().queue();
    // The frames the index names at the raced pages.
    let raced = || -> Vec<(u64, u64)> {
        let folios = cached_folios(&r);
        let raced = folios.iter().filter(|f| f.1 < RACED_PAGES);
        raced.map(|f| (f.1, f.2)).collect()
    };
    let frame = |frame: u64| super::stack::Frame(frame as u32);
    let first_read = std::thread::scope(|s| {
        let first = s.spawn(|| {
            let mut buf = vec![0u8; PAGE as usize];
            r_reader.read_at(&r_file, &mut buf, 0).unwrap();
            buf
        });
        wait_until("R is at Step::Reading", || {
            lever.held.load(Ordering::Acquire)
        });
        let window = raced();
        if flaw == Flaw::None {
            // The protocol: R's window in its index, in flight (read.rs, "Miss", M3).
            assert!(window.len() >= 2, "R's window, page 0 and more: {window:?}");
            assert!(window.iter().all(|&(_, f)| queue.is_in_flight(frame(f))));
        } else {
            assert_eq!(window, Vec::new(), "the old order inserts after the read");
        }
        let installs = writer.domain_stats().unwrap().installs;
        assert_eq!(w.write_at(&new, 0).unwrap(), new.len());
        assert_eq!(
            writer.domain_stats().unwrap().installs,
            installs + RACED_PAGES,
            "W put each page it wrote into the domain"
        );
        // W's frames replaced R's (queue.rs, "In flight", "Writers and truncation"): R's are
        // in no index, and each raced page names a frame HELD by W's mark.
        let written = raced();
        assert_eq!(written.len() as u64, RACED_PAGES, "{written:?}");
        for &(page, f) in &written {
            assert!(
                !window.iter().any(|&(_, mine)| mine == f),
                "page {page}: R's frame"
            );
            assert_ne!(queue.held_mark(frame(f)), 0, "page {page}: not HELD");
        }
        w.sync_data().unwrap();
        for &(page, f) in &written {
            assert_eq!(
                queue.held_mark(frame(f)),
                0,
                "page {page}: HELD after its writeback"
            );
        }
        let freed = reclaim_reclaimable(r.domain(), r.holder());
        assert!(freed >= RACED_PAGES as u32, "{freed} reclaimed");
        assert_eq!(raced(), Vec::new(), "a raced page still names a frame");
        lever.go.store(true, Ordering::Release);
        first.join().unwrap()
    });
    let own = &first_read[..];
    assert!(
        own == &old[..PAGE as usize] || own == &new[..PAGE as usize],
        "R's own read is neither the old page 0 nor the new one, whole"
    );
    let third_reader = SharedReader::new(&third, &third, 4);
    let third_file = third_reader.open(path).unwrap();
    let own_new = own == &new[..PAGE as usize];
    assert_later_reads_new("R", &r_reader, &r_file, &old, &new, own_new);
    assert_later_reads_new(
        "the third member",
        &third_reader,
        &third_file,
        &old,
        &new,
        own_new,
    );
    eprintln!(
        "a miss against a write: R's own read {}; R {:?}; third {:?}",
        if own_new { "new" } else { "old" },
        r_reader.counters(),
        third_reader.counters()
    );
    check_all(r.domain());
    r_reader.close(r_file).unwrap();
    third_reader.close(third_file).unwrap();
    drop((r_reader, third_reader, w, writer));
    third.detach();
    reclaim_everything(r.domain(), r.holder());
    r.detach();
}

/// As `a_miss_in_flight_never_...`, with R's death as the step after the write: R (a
/// forked member) is stopped by its lever at `Step::Reading` (its window inserted in
/// flight), W's write returns (its HELD frames replace R's), and R is killed there. The
/// steward's sweep of R (queue.rs, "In flight", D1-D3) takes out of its index only a frame
/// the index names: W's frames stay. Asserted: once the sweep dropped R's pins, every frame
/// reclaim may take is reclaimed (R's, in no index) and the raced pages still name W's
/// frames; a third member reads the new bytes from them; after W's `sync_data` and a
/// reclaim of W's frames it reads the new bytes from the disk; the structures check, and a
/// reclaim of everything frees every frame.
#[test]
fn a_reader_killed_in_flight_under_a_write_leaves_the_written_pages() {
    let world = FlightWorld::new("write-window-kill");
    let (config, path) = (&world.config, &world.path);
    let new = stamped(1, RACED_PAGES * PAGE);
    let (parent, third) = (
        Member::attach(config).unwrap(),
        Member::attach(config).unwrap(),
    );
    let words = SharedRegion::new(FLIGHT_WORDS);
    // Forked before the writer's cache starts its threads.
    let r = fork(|| flight_member(config, path, words.words(), Flight::StopAtReading));
    let status = wait_for(r, libc::WUNTRACED);
    assert!(libc::WIFSTOPPED(status), "R: status {status:#x}");
    let queue = parent.domain().queue();
    let raced = || -> Vec<(u64, u64)> {
        let folios = cached_folios(&parent);
        let raced = folios.iter().filter(|f| f.1 < RACED_PAGES);
        raced.map(|f| (f.1, f.2)).collect()
    };
    let frame = |frame: u64| super::stack::Frame(frame as u32);
    let window = raced();
    assert!(window.len() >= 2, "R's window, page 0 and more: {window:?}");
    assert!(window.iter().all(|&(_, f)| queue.is_in_flight(frame(f))));
    let writer = domain_cache(&config.dir, &config.name, 1 << 20);
    let w = writer.open_options().write(true).open(path).unwrap();
    assert_eq!(w.write_at(&new, 0).unwrap(), new.len());
    let written = raced();
    assert_eq!(written.len() as u64, RACED_PAGES, "{written:?}");
    assert!(written.iter().all(|&(_, f)| queue.held_mark(frame(f)) != 0));
    kill(r);
    wait_until("the steward's sweep of R dropped its pins", || {
        queue.pins_by_slot().iter().all(|&pins| pins == 0)
    });
    let freed = reclaim_reclaimable(parent.domain(), parent.holder());
    assert!(
        freed >= window.len() as u32,
        "R's frames: {freed} reclaimed"
    );
    assert_eq!(raced(), written, "the sweep of R took W's pages out");
    assert_eq!(
        queue.count() as u64,
        RACED_PAGES,
        "only W's frames are left"
    );
    let reader = SharedReader::new(&third, &third, 4);
    let file = reader.open(path).unwrap();
    let old = stamped(0, FLIGHT_LEN);
    assert_later_reads_new("the third member", &reader, &file, &old, &new, false);
    w.sync_data().unwrap();
    reclaim_reclaimable(parent.domain(), parent.holder());
    assert_eq!(raced(), Vec::new(), "a raced page still names a frame");
    assert_later_reads_new("the third member", &reader, &file, &old, &new, false);
    check_all(parent.domain());
    reader.close(file).unwrap();
    drop((reader, w, writer));
    third.detach();
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// Where `a_miss_inserted_after_a_truncations_removal_...` cuts the file, in pages.
const CUT_PAGES: u64 = 8;
/// The page R misses there, past the cut.
const PAST_CUT: u64 = 40;

/// A miss against a truncation: reader R (a thread, member R, readahead off) misses page
/// 40 of a 64-page file, and its lever holds it after its hand-over, before its insertion
/// (it loaded the file's size, 64 pages, at its read's start); W (member W, the record's
/// writer) cuts the file to 8 pages as `File::set_len` does, its domain's part first (the
/// record's size, then its pages past the cut taken out: none is there yet); R goes on,
/// inserts page 40 after that removal and reads it, and only then W's `ftruncate` reaches
/// the disk (`set_len` makes it last); then W extends the file back to 64 pages (the
/// domain's size, then the disk's: zeros past the cut). Asserted: R's own read is the old
/// page 40 or zeros, whole; every later read of page 40, by R again and by a third member,
/// is zeros (never the older page, read before the cut reached the disk); the structures
/// check, and a reclaim of everything frees every frame.
#[test]
fn a_miss_inserted_after_a_truncations_removal_never_caches_a_page_past_the_size() {
    let world = FlightWorld::new("write-cut");
    let (config, path) = (&world.config, &world.path);
    let old = stamped(0, FLIGHT_LEN);
    let page_bytes = PAGE as usize;
    let old_page = &old[PAST_CUT as usize * page_bytes..][..page_bytes];
    let zeros = vec![0u8; page_bytes];
    let (r, w, third) = (
        Member::attach(config).unwrap(),
        Member::attach(config).unwrap(),
        Member::attach(config).unwrap(),
    );
    let queued_before = r.domain().queue().count();
    let lever = Hold::new(HoldPoint::BeforeInsertion { queued_before });
    let r_run = MemberLever::new(&r, &lever);
    let r_reader = SharedReader::new(&r, &r_run, 4);
    let r_file = r_reader.open(path).unwrap();
    let w_reader = SharedReader::new(&w, &w, 4);
    let disk = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let (w_file, request) = w_reader
        .open_writer(disk.try_clone().unwrap(), OpenMode::Buffered)
        .unwrap()
        .expect("W's open of the record");
    assert_eq!(request, Request::Claimed, "W is the record's writer");
    // `File::set_len`'s steps: the domain's (`DomainWriter::truncate`), then the disk's.
    let set_len = |pages: u64, disk_too: bool| {
        w_reader.truncate(&w_file, pages * PAGE, pages).unwrap();
        if disk_too {
            disk.set_len(pages * PAGE).unwrap();
        }
    };
    let own = std::thread::scope(|s| {
        let first = s.spawn(|| {
            let mut buf = vec![0u8; page_bytes];
            let got = r_reader
                .read_at(&r_file, &mut buf, PAST_CUT * PAGE)
                .unwrap();
            assert_eq!(got, page_bytes, "R loaded the size before the cut");
            buf
        });
        wait_until("R handed its frame over", || {
            lever.held.load(Ordering::Acquire)
        });
        assert_eq!(cached_folios(&r), Vec::new(), "R inserted before its hold");
        set_len(CUT_PAGES, false);
        lever.go.store(true, Ordering::Release);
        first.join().unwrap()
    });
    assert!(
        own == old_page || own == zeros,
        "R's own read is neither the old page {PAST_CUT} nor zeros, whole"
    );
    disk.set_len(CUT_PAGES * PAGE).unwrap();
    set_len(FLIGHT_LEN / PAGE, true);
    let third_reader = SharedReader::new(&third, &third, 4);
    let third_file = third_reader.open(path).unwrap();
    let (mut again, mut third_read) = (vec![0u8; page_bytes], vec![0u8; page_bytes]);
    let reads = [
        (
            "R",
            r_reader.read_at(&r_file, &mut again, PAST_CUT * PAGE),
            &again,
        ),
        (
            "the third member",
            third_reader.read_at(&third_file, &mut third_read, PAST_CUT * PAGE),
            &third_read,
        ),
    ];
    for (who, got, buf) in reads {
        assert_eq!(got.unwrap(), page_bytes, "{who}: the extended size");
        assert!(
            buf != old_page,
            "{who}: a later read returns the older page {PAST_CUT}, cut by a returned set_len"
        );
        assert!(*buf == zeros, "{who}: page {PAST_CUT} is not zeros");
    }
    eprintln!(
        "a miss against a cut: R {:?}; third {:?}",
        r_reader.counters(),
        third_reader.counters()
    );
    check_all(r.domain());
    let meta = w_file.metadata().unwrap();
    let mtime_ns = (meta.mtime() as u64) * 1_000_000_000 + meta.mtime_nsec() as u64;
    w_reader.detach_writer(w_file, mtime_ns).unwrap();
    r_reader.close(r_file).unwrap();
    third_reader.close(third_file).unwrap();
    drop((r_reader, w_reader, third_reader));
    third.detach();
    w.detach();
    reclaim_everything(r.domain(), r.holder());
    r.detach();
}

/// Reads the pages `new` covers through `reader`'s `file` (after the write of `new`
/// returned): each must be `new`'s, failing first on "a later read returns the older
/// page" (`old`'s), then on any other bytes. `own_new`: what R's own read returned.
fn assert_later_reads_new<R: Run>(
    who: &str,
    reader: &SharedReader<'_, R>,
    file: &super::read::SharedFile<'_>,
    old: &[u8],
    new: &[u8],
    own_new: bool,
) {
    for (page, new) in new.chunks(PAGE as usize).enumerate() {
        let at = page * PAGE as usize;
        let mut buf = vec![0u8; new.len()];
        assert_eq!(
            reader.read_at(file, &mut buf, at as u64).unwrap(),
            buf.len()
        );
        let own = if own_new { "new" } else { "old" };
        assert!(
            buf != old[at..at + buf.len()],
            "{who}: a later read returns the older page {page} (R's own read: {own})"
        );
        assert!(buf == new, "{who}: page {page} is not the written bytes");
    }
}
