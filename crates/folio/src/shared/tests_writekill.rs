//! Writers, readers and the steward killed across processes (issue 45, done-when 4;
//! docs/sharing.md "Writes seen across processes", "The kill test with writers").
//!
//! `FILES` files are written, each by one writer process at a time (a persistent `Cache`
//! with the domain: its keeper writes back what a killed writer left dirty), and read
//! by `READERS` reader processes (a `Cache` with the domain, two threads each) and by
//! the test itself (a member, through `SharedReader`). Every process is a run of this
//! test binary's `child` role (a cache's build starts threads and forks its keeper, which
//! a `fork` of the threaded harness must not). They talk through a **board**: a file of
//! words every process maps `MAP_SHARED`:
//! - a writer stores, per file, STARTED = k before its k-th write and RETURNED = k after
//!   it returned (release stores); a writer restarted on the file goes on at RETURNED + 1
//!   (the op in flight at the death is written again: the same bytes at the same place),
//!   so the file's content after op k is a function of the seed alone (`Model`);
//! - a reader loads RETURNED before a read and STARTED after it (acquire), and checks
//!   that the page it read is, whole, the page of one version between the two;
//! - the test asks a writer to stop itself (`SIGSTOP`) after a chosen op (STOP_AT: the
//!   writer's lever), so that it can check a quiet file or kill it at a known point.
//!
//! What is killed, each round (draws of the seed, `FOLIO_SEED`): a writer at a random
//! instant (once it returned a random number of further writes), sometimes with the
//! steward's lever armed (the steward stops at a step of its sweep of the dead writer and
//! is killed there); a writer stopped after a write that left a page dirty, with its keeper
//! stopped (`SIGSTOP`) before the kill: the steward sweeps it, the test reclaims every
//! frame it can and reads the file through the domain: every returned write must still be
//! there (the dead writer's frames HELD until its keeper ended); a reader at a random
//! instant; the steward at a random instant. The killed are started again (a writer once
//! the steward swept its predecessor: it must become the file's writer again). Every
//! round ends with the writers stopped after a returned write and the files read whole
//! through the domain by a fresh reader; every fifth round, every child is killed, and once
//! the keepers are done the domain checks (`check_all`) and every file on disk holds every
//! returned write (the op in flight at a death whole or not at all, page by page).
//! Survivors must keep working (each round waits for every writer's and reader's progress;
//! a deadline fails it, never a sleep) and, at the end, exit 0. No assertion depends on
//! timing. `FOLIO_WRITE_KILL_ROUNDS` sets the rounds (default 20: about 100 kills).
//!
//! **Two writers** (docs/sharing.md "Two writing processes"): the same rounds with two
//! writer processes per file (`FOLIO_TWO_WRITER_KILL_ROUNDS`, default 6). They write the
//! file's one op sequence in turns: the board's TURN names the writer whose turn it is,
//! which writes a burst of 1 to `BURST_MAX` ops and passes the turn, so the writer role
//! moves between the two processes (mapping/domain.rs, F2-F3) at every pass, and a writer
//! killed at a random instant may be the holder, the requester, or the holder in the
//! middle of its hand-over. A write's wait for the role is within the write: each round
//! waits for every writer's progress (the deadline fails a wait that never ends), and the
//! longest write is a figure. Deterministic levers for the hand-over's two deaths
//! (terms.rs `Step::Yielding`, `Step::Requested`; the child's stop lever, set by its
//! environment): the holder stopped after its write-out and before its release, and the
//! requester stopped with its request in the record while the holder is stopped (so it
//! cannot have handed over); each killed there, the survivors must get the role, write,
//! and read right, and the end's checks hold.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::attach::{Member, Patience};
use super::domain::Domain;
use super::read::SharedReader;
use super::slot::SlotState;
use super::terms::stop_lever::STOP_LEVER_ENV;
use super::tests::{seed_from_env, wait_for, DomainHome, Rng};
use super::tests_domain::{is_stopped, sigkill};
use super::tests_read::{check_all, config, reclaim_everything};
use super::SlotIndex;
use crate::Cache;

const ROLE: &str = "FOLIO_TEST_WKILL_ROLE";
const HOME: &str = "FOLIO_TEST_WKILL_HOME";
const NAME: &str = "FOLIO_TEST_WKILL_NAME";
const DATA: &str = "FOLIO_TEST_WKILL_DATA";
const WHICH: &str = "FOLIO_TEST_WKILL_WHICH";
const SEED: &str = "FOLIO_TEST_WKILL_SEED";
/// Which of its file's writers a writer child is (`PEN`), and how many the file has.
const PEN: &str = "FOLIO_TEST_WKILL_PEN";
const WRITERS: &str = "FOLIO_TEST_WKILL_WRITERS";
const ROUNDS_ENV: &str = "FOLIO_WRITE_KILL_ROUNDS";
const TWO_ROUNDS_ENV: &str = "FOLIO_TWO_WRITER_KILL_ROUNDS";
/// The most random events a round has (default: 3 to 5).
const EVENTS_ENV: &str = "FOLIO_WRITE_KILL_EVENTS";

const FILES: usize = 3;
const READERS: usize = 2;
const READER_THREADS: usize = 2;
const PAGE: u64 = 4096;
/// A file's most pages: its writes stay within them.
const PAGES_MAX: u64 = 12;
const FIRST_LEN: u64 = 3 * PAGE + 100;
/// A writer syncs after every op k with k % SYNC_EVERY == 0 (its writeback unmarks the
/// domain's frames, which reclaim may then take: the readers' misses read the disk).
const SYNC_EVERY: u64 = 4;
/// The domain's frames: the files' 36 pages, their trees' nodes and the members'
/// magazines leave little room: reclaim runs.
const FRAMES: u32 = 56;
/// The longest wait for anything a child does.
const DEADLINE: Duration = Duration::from_secs(60);

// The board's words: per file f at FILE_WORDS f (its writer w's at FILE_WORDS f +
// WRITER_BASE + 4 w), per reader r at READER_BASE + 8 r.
const FILE_WORDS: usize = 24;
const STARTED: usize = 0;
const RETURNED: usize = 1;
/// 0, or an op: the writer stops itself after the first op at or past it (with `DIRTY`:
/// the first such op it did not sync after).
const STOP_AT: usize = 2;
const DIRTY: u64 = 1 << 62;
/// Pages a reader read whole in no version but byte by byte in the versions of its read
/// (a killed writer's op in flight, read in part from the disk: `compare`).
const MIXED: usize = 5;
/// Which writer's turn it is to write the file (two writers: `writer`'s bursts).
const TURN: usize = 6;
/// 1: the test passes the turn (the levers' tests), not the writers.
const TURN_BY_TEST: usize = 7;
/// The turns passed from one writer to the other.
const PASSES: usize = 8;
/// The longest write, in microseconds (a follower's waits for the role within it).
const WRITE_US_MAX: usize = 9;
const WRITER_BASE: usize = 12;
/// A writer's keeper's pid.
const KEEPER: usize = 0;
/// The pid of the writer once it opened the file (the first writer: its writer in the
/// domain) and is writing.
const READY: usize = 1;
/// The ops this writer returned.
const WROTE: usize = 2;
/// The most ops a writer of a file with two writes before it passes the turn.
const BURST_MAX: u64 = 4;
const READER_BASE: usize = 128;
const CHECKS: usize = 0;
const WRONG: usize = 1;
const READER_READY: usize = 2;
const _: () = assert!(
    WRITER_BASE + 4 * 2 <= FILE_WORDS
        && FILE_WORDS * FILES <= READER_BASE
        && READER_BASE + 8 * READERS <= QUIT
);
/// 1: every child leaves cleanly (its cache dropped: written back, detached).
const QUIT: usize = 200;
const BOARD_WORDS: usize = 512;

/// The board (module docs): `BOARD_WORDS` words of a file, mapped shared.
struct Board {
    words: &'static [AtomicU64],
}

impl Board {
    fn create(path: &Path) -> Board {
        std::fs::write(path, vec![0u8; BOARD_WORDS * 8]).unwrap();
        Board::open(path)
    }

    fn open(path: &Path) -> Board {
        use std::os::unix::io::AsRawFd;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        // SAFETY: a shared mapping of a file of BOARD_WORDS words we just opened; it
        // lives as long as the process (never unmapped), and is only read and written
        // through atomics.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BOARD_WORDS * 8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "the board's mapping");
        // SAFETY: BOARD_WORDS words of a mapping never unmapped (so `'static`),
        // page-aligned, of a file of zeros or of words stored through atomics.
        let words = unsafe { std::slice::from_raw_parts(base.cast::<AtomicU64>(), BOARD_WORDS) };
        Board { words }
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        &self.words[i]
    }

    fn file(&self, f: usize, w: usize) -> &AtomicU64 {
        self.word(FILE_WORDS * f + w)
    }

    /// Word `w` of file `f`'s writer `pen`.
    fn writer(&self, f: usize, pen: usize, w: usize) -> &AtomicU64 {
        self.word(FILE_WORDS * f + WRITER_BASE + 4 * pen + w)
    }

    fn reader(&self, r: usize, w: usize) -> &AtomicU64 {
        self.word(READER_BASE + 8 * r + w)
    }
}

/// Op `k`'s (offset, length) on file `f` of `len` bytes: an append now and then, else an
/// overwrite of 1 byte to two pages at any offset (sometimes past the end), within
/// `PAGES_MAX` pages.
fn op_of(seed: u64, f: usize, k: u64, len: u64) -> (u64, u64) {
    let mut rng = Rng(seed
        ^ (f as u64 + 1).wrapping_mul(0xa076_1d64_78bd_642f)
        ^ k.wrapping_mul(0xe703_7ed1_a0b4_28db));
    let max = PAGES_MAX * PAGE;
    if len + 3000 < max && rng.below(3) == 0 {
        (len, 1 + rng.below(3000))
    } else {
        let offset = rng.below(len + 100).min(max - 1);
        (offset, (1 + rng.below(2 * PAGE + 10)).min(max - offset))
    }
}

/// The byte at `at` of file `f` as op `k` wrote it (0: the first content): a page read
/// from another file, page, place or op is seen.
fn stamp(f: usize, at: u64, k: u64) -> u8 {
    ((at / PAGE).wrapping_mul(131)
        ^ k.wrapping_mul(29)
        ^ (k >> 8).wrapping_mul(13)
        ^ (at % PAGE).wrapping_mul(7)
        ^ (f as u64).wrapping_mul(17)) as u8
}

/// File `f`'s content after each op (module docs), computed on demand: each op's place
/// (cheap: a draw per op), and a byte at version `v` from the last op at or before `v`
/// that wrote it, found walking back from `v` (a page's bytes are all rewritten within a
/// few dozen ops, so a page costs those, however many ops there were: a reader started
/// late does not replay the file's history).
struct Model {
    seed: u64,
    f: usize,
    /// Op k's (offset, length) at `ops[k - 1]`.
    ops: Vec<(u64, u64)>,
    /// The length after op k at `lens[k]`.
    lens: Vec<u64>,
}

impl Model {
    fn new(seed: u64, f: usize) -> Model {
        Model {
            seed,
            f,
            ops: Vec::new(),
            lens: vec![FIRST_LEN],
        }
    }

    fn upto(&mut self, v: u64) {
        while (self.ops.len() as u64) < v {
            let k = self.ops.len() as u64 + 1;
            let len = *self.lens.last().unwrap();
            let (offset, n) = op_of(self.seed, self.f, k, len);
            self.ops.push((offset, n));
            self.lens.push(len.max(offset + n));
        }
    }

    fn op(&mut self, k: u64) -> (u64, u64) {
        self.upto(k);
        self.ops[k as usize - 1]
    }

    fn len(&mut self, v: u64) -> u64 {
        self.upto(v);
        self.lens[v as usize]
    }

    /// Bytes `start..end` (within the length at `v`) as version `v` has them.
    fn bytes(&mut self, v: u64, start: u64, end: u64) -> Vec<u8> {
        self.upto(v);
        let n = (end - start) as usize;
        let mut bytes = vec![0u8; n];
        let mut known = vec![false; n];
        let mut left = n;
        for k in (1..=v).rev() {
            if left == 0 {
                break;
            }
            let (offset, len) = self.ops[k as usize - 1];
            for at in offset.max(start)..(offset + len).min(end) {
                let i = (at - start) as usize;
                if !known[i] {
                    known[i] = true;
                    bytes[i] = stamp(self.f, at, k);
                    left -= 1;
                }
            }
        }
        for (i, byte) in bytes.iter_mut().enumerate() {
            let at = start + i as u64;
            if !known[i] && at < FIRST_LEN {
                *byte = stamp(self.f, at, 0);
            }
        }
        bytes
    }

    /// Page `p` at version `v` (short at the end, empty past it).
    fn page(&mut self, p: u64, v: u64) -> Vec<u8> {
        let len = self.len(v);
        let start = (p * PAGE).min(len);
        self.bytes(v, start, (start + PAGE).min(len))
    }

    fn file(&mut self, v: u64) -> Vec<u8> {
        let len = self.len(v);
        self.bytes(v, 0, len)
    }

    /// Whether `got`, read at page `p` by a read that began with `from` returned and
    /// ended with at most `to` started, is one version's page, whole, and one version's
    /// length (a read racing an extending write may load the size before the write
    /// raised it: tests_write.rs).
    fn fits(&mut self, p: u64, from: u64, to: u64, got: &[u8]) -> bool {
        let mut whole = false;
        let mut sized = false;
        for v in from..=to.max(from) {
            let want = self.page(p, v);
            whole |= got.len() <= want.len() && got == &want[..got.len()];
            sized |= got.len() == want.len();
        }
        whole && sized
    }
}

impl Model {
    /// Whether each byte of `got` (page `p`) is some version's in `from..=to` (not
    /// necessarily one version's), and its length one version's.
    fn fits_bytewise(&mut self, p: u64, from: u64, to: u64, got: &[u8]) -> bool {
        let versions: Vec<Vec<u8>> = (from..=to.max(from)).map(|v| self.page(p, v)).collect();
        versions.iter().any(|v| v.len() == got.len())
            && (0..got.len()).all(|i| versions.iter().any(|v| v.get(i) == Some(&got[i])))
    }
}

fn data_file(data: &Path, f: usize) -> PathBuf {
    data.join(format!("f{f}"))
}

/// The child roles (run only by the test below).
#[test]
#[ignore]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    // No child outlives a failed or killed test (its keeper is its own process).
    if !super::tests::die_with_parent() {
        return;
    }
    let home = PathBuf::from(std::env::var(HOME).unwrap());
    let data = PathBuf::from(std::env::var(DATA).unwrap());
    let name = std::env::var(NAME).unwrap();
    let which: usize = std::env::var(WHICH).unwrap().parse().unwrap();
    let seed: u64 = std::env::var(SEED).unwrap().parse().unwrap();
    let board = Board::open(&data.join("board"));
    match role.as_str() {
        "writer" => {
            let pen: usize = std::env::var(PEN).unwrap().parse().unwrap();
            let writers: usize = std::env::var(WRITERS).unwrap().parse().unwrap();
            let pen = Pen {
                f: which,
                pen,
                writers,
            };
            writer(&board, pen, seed, &home, &name, &data);
        }
        "reader" => reader(&board, which, seed, &home, &name, &data),
        other => panic!("no role {other}"),
    }
}

/// A writer child: of file `f`, its writer `pen` of `writers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pen {
    f: usize,
    pen: usize,
    writers: usize,
}

/// A writer of file `f` (module docs): goes on from the op after the last returned one
/// until told to quit, stopping itself where the board says. With two writers per file,
/// it writes only in its turn (`TURN`): bursts of 1 to `BURST_MAX` ops, the turn then
/// passed to the other (unless the test passes it: `TURN_BY_TEST`), so that the file's
/// ops stay one sequence (`Model`) and the writer role moves between the two processes
/// (mapping/domain.rs, F2-F3) at every pass.
fn writer(board: &Board, pen: Pen, seed: u64, home: &Path, name: &str, data: &Path) {
    let Pen { f, pen: w, writers } = pen;
    let cache = Cache::builder()
        .capacity_bytes(1 << 20)
        .segment_dir(home)
        .persistent(true)
        .domain(name)
        .build()
        .unwrap();
    let file = cache
        .open_options()
        .write(true)
        .open(data_file(data, f))
        .unwrap();
    board
        .writer(f, w, KEEPER)
        .store(u64::from(cache.keeper_pid().unwrap()), Ordering::Release);
    let mut model = Model::new(seed, f);
    let mut rng = Rng(seed ^ u64::from(std::process::id()).wrapping_mul(0x9e37_79b9));
    board
        .writer(f, w, READY)
        .store(u64::from(std::process::id()), Ordering::Release);
    let quit = || board.word(QUIT).load(Ordering::Acquire) != 0;
    let my_turn = || board.file(f, TURN).load(Ordering::Acquire) as usize == w;
    'turns: while !quit() {
        if !my_turn() {
            // The other's turn: its writes, or the test's kill or stop of it, end it.
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        let burst = if writers == 1 {
            u64::MAX
        } else {
            1 + rng.below(BURST_MAX)
        };
        for _ in 0..burst {
            if quit() {
                break 'turns;
            }
            if !my_turn() {
                // The test took the turn while we were stopped.
                continue 'turns;
            }
            let k = board.file(f, RETURNED).load(Ordering::Acquire) + 1;
            let (offset, n) = model.op(k);
            let bytes: Vec<u8> = (offset..offset + n).map(|at| stamp(f, at, k)).collect();
            board.file(f, STARTED).store(k, Ordering::Release);
            let began = Instant::now();
            assert_eq!(file.write_at(&bytes, offset).unwrap(), n as usize);
            let took_us = began.elapsed().as_micros() as u64;
            board.file(f, RETURNED).store(k, Ordering::Release);
            board.writer(f, w, WROTE).fetch_add(1, Ordering::AcqRel);
            board
                .file(f, WRITE_US_MAX)
                .fetch_max(took_us, Ordering::AcqRel);
            let synced = k % SYNC_EVERY == 0;
            if synced {
                file.sync_data().unwrap();
            }
            let stop_at = board.file(f, STOP_AT).load(Ordering::Acquire);
            if stop_at != 0 && k >= stop_at & !DIRTY && !(stop_at & DIRTY != 0 && synced) {
                // SAFETY: raise has no memory-safety preconditions.
                unsafe { libc::raise(libc::SIGSTOP) };
            }
        }
        if board.file(f, TURN_BY_TEST).load(Ordering::Acquire) == 0 {
            board
                .file(f, TURN)
                .store(((w + 1) % writers) as u64, Ordering::Release);
            board.file(f, PASSES).fetch_add(1, Ordering::AcqRel);
        }
    }
    drop(file);
    drop(cache);
}

/// A reader (module docs): `READER_THREADS` threads read single pages of every file
/// through the domain until told to quit, each checked against the versions the board
/// allows; counts on the board.
fn reader(board: &Board, r: usize, seed: u64, home: &Path, name: &str, data: &Path) {
    let cache = Cache::builder()
        .capacity_bytes(1 << 20)
        .segment_dir(home)
        .domain(name)
        .build()
        .unwrap();
    let files: Vec<_> = (0..FILES)
        .map(|f| cache.open(data_file(data, f)).unwrap())
        .collect();
    for (f, file) in files.iter().enumerate() {
        if !file.is_domain_file() {
            eprintln!("reader {r}: file {f} is not a domain file");
            board.reader(r, WRONG).fetch_add(1, Ordering::AcqRel);
        }
    }
    board
        .reader(r, READER_READY)
        .store(u64::from(std::process::id()), Ordering::Release);
    std::thread::scope(|scope| {
        for t in 0..READER_THREADS {
            let files = &files;
            scope.spawn(move || {
                let mut rng = Rng(seed ^ (1000 * r + t) as u64 ^ u64::from(std::process::id()));
                let mut models: Vec<Model> = (0..FILES).map(|f| Model::new(seed, f)).collect();
                let mut buf = vec![0u8; PAGE as usize];
                while board.word(QUIT).load(Ordering::Acquire) == 0 {
                    let f = rng.below(FILES as u64) as usize;
                    let p = rng.below(PAGES_MAX + 1);
                    let from = board.file(f, RETURNED).load(Ordering::Acquire);
                    let got = files[f].read_at(&mut buf, p * PAGE).unwrap();
                    let to = board.file(f, STARTED).load(Ordering::Acquire);
                    if !models[f].fits(p, from, to, &buf[..got])
                        && models[f].fits_bytewise(p, from, to, &buf[..got])
                    {
                        // The op a killed writer had in flight, read from the disk in
                        // part (`compare`).
                        board.file(f, MIXED).fetch_add(1, Ordering::AcqRel);
                    } else if !models[f].fits(p, from, to, &buf[..got]) {
                        board.reader(r, WRONG).fetch_add(1, Ordering::AcqRel);
                        let first = (from..=to.max(from))
                            .map(|v| {
                                let want = models[f].page(p, v);
                                (
                                    v,
                                    want.len(),
                                    (0..got.min(want.len())).find(|&i| buf[i] != want[i]),
                                )
                            })
                            .collect::<Vec<_>>();
                        eprintln!(
                            "reader {r}.{t}: file {f} page {p}: {got} bytes, not a version \
                             {from}..={to} (version, length, first wrong byte: {first:?})"
                        );
                    }
                    board.reader(r, CHECKS).fetch_add(1, Ordering::AcqRel);
                }
            });
        }
    });
    let stats = cache.domain_stats().unwrap();
    eprintln!("reader {r} (pid {}): {stats:?}", std::process::id());
    drop(files);
    drop(cache);
}

/// A child the test started: its pid, and what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// File `f`'s writer `pen`.
    Writer(usize, usize),
    Reader(usize),
}

/// The test's children and their figures; kills every child (and continues every keeper
/// it stopped) if the test fails.
struct Children<'a> {
    home: &'a Path,
    data: &'a Path,
    name: &'a str,
    seed: u64,
    board: Board,
    /// Writers per file: 1, or 2 (the two writers' tests).
    writers: usize,
    /// A child started with its stop lever (at its first start only).
    armed: Option<(Role, super::Step)>,
    running: Vec<(Role, u32)>,
    stopped_keepers: Vec<u32>,
    started: u64,
}

impl Drop for Children<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for &keeper in &self.stopped_keepers {
                // SAFETY: continues a keeper this test stopped.
                unsafe { libc::kill(keeper as libc::pid_t, libc::SIGCONT) };
            }
            for &(_, pid) in &self.running {
                sigkill(pid);
                let mut status = 0;
                // SAFETY: reaps our own child.
                unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
            }
        }
    }
}

impl Children<'_> {
    fn start(&mut self, role: Role) {
        let lever = match self.armed {
            Some((armed, step)) if armed == role => {
                self.armed = None;
                Some(step)
            }
            _ => None,
        };
        self.start_armed(role, lever);
    }

    /// Starts `role`, its process stopped at `lever`'s step if it has one (terms.rs
    /// `stop_lever`: `Step::Requested`, `Step::Yielding`).
    fn start_armed(&mut self, role: Role, lever: Option<super::Step>) {
        let (what, which, pen) = match role {
            Role::Writer(f, pen) => {
                self.board.writer(f, pen, READY).store(0, Ordering::Release);
                ("writer", f, pen)
            }
            Role::Reader(r) => {
                self.board
                    .reader(r, READER_READY)
                    .store(0, Ordering::Release);
                ("reader", r, 0)
            }
        };
        let lever = lever.map(|step| format!("{step:?}")).unwrap_or_default();
        // Reaped by pid (`tests::wait_for`), which the kills and the stops need, not by
        // `Child::wait`.
        #[allow(clippy::zombie_processes)]
        let child = Command::new(std::env::current_exe().unwrap())
            .args([
                "shared::tests_writekill::child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, what)
            .env(HOME, self.home)
            .env(NAME, self.name)
            .env(DATA, self.data)
            .env(WHICH, which.to_string())
            .env(PEN, pen.to_string())
            .env(WRITERS, self.writers.to_string())
            .env(STOP_LEVER_ENV, lever)
            .env(SEED, self.seed.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        self.running.push((role, child.id()));
        self.started += 1;
    }

    fn pid(&self, role: Role) -> u32 {
        self.running.iter().find(|(r, _)| *r == role).unwrap().1
    }

    /// SIGKILLs `role`'s process and reaps it.
    fn kill(&mut self, role: Role) {
        let pid = self.pid(role);
        sigkill(pid);
        wait_for(pid as libc::pid_t, 0);
        self.running.retain(|(r, _)| *r != role);
    }

    /// Every file's writers and every reader started, each waited for (each file's first
    /// writer: the file's writer in the domain, at its open or, if the open followed the
    /// record, at its first write). Returns the stewards killed meanwhile (`until`).
    fn start_all(&mut self, parent: &Member) -> u64 {
        let mut killed = 0;
        for (f, pen) in self.pens().collect::<Vec<_>>() {
            self.start(Role::Writer(f, pen));
            self.wait_ready(Role::Writer(f, pen), parent);
            if pen == 0 {
                killed += until_held(parent, self.data, f);
            }
        }
        for r in 0..READERS {
            self.start(Role::Reader(r));
            self.wait_ready(Role::Reader(r), parent);
        }
        killed
    }

    /// Every writer: its file and pen.
    fn pens(&self) -> impl Iterator<Item = (usize, usize)> {
        let writers = self.writers;
        (0..FILES).flat_map(move |f| (0..writers).map(move |pen| (f, pen)))
    }

    /// The ops writer `pen` of file `f` returned (every process in its place).
    fn wrote(&self, f: usize, pen: usize) -> u64 {
        self.board.writer(f, pen, WROTE).load(Ordering::Acquire)
    }

    /// Waits until a writer of file `f` stopped itself (`STOP_AT`); returns its pen.
    fn wait_stopped(&self, parent: &Member, f: usize, figures: &mut Figures) -> usize {
        let mut pen = None;
        figures.stewards_killed_by_lever += until(parent, "a writer stopped", || {
            pen = (0..self.writers).find(|&w| stopped(self.pid(Role::Writer(f, w))));
            pen.is_some()
        });
        pen.unwrap()
    }

    /// Waits until `role` is ready (a writer: it opened the file).
    fn wait_ready(&self, role: Role, parent: &Member) {
        let word = match role {
            Role::Writer(f, pen) => self.board.writer(f, pen, READY),
            Role::Reader(r) => self.board.reader(r, READER_READY),
        };
        let pid = u64::from(self.pid(role));
        until(parent, &format!("{role:?} ready"), || {
            word.load(Ordering::Acquire) == pid
        });
    }
}

/// Waits for `done`, making sure a steward runs meanwhile and killing a steward its lever
/// stopped; fails after `DEADLINE` of patience. Returns the stewards killed there.
fn until(parent: &Member, what: &str, done: impl FnMut() -> bool) -> u64 {
    until_said(parent, || what.to_string(), done)
}

/// `until`, with a failure that says what `what` says then (a wait for several
/// processes names those it still waits for).
///
/// The deadline is patience (attach.rs, "Patience"), not the clock's time: this thread's
/// waits for a CPU do not count. The test's processes share this one's scheduling group,
/// and on a machine loaded far past its cores every one of them may wait seconds for a
/// CPU (seen: 20 s) while nothing is wrong.
fn until_said(parent: &Member, what: impl Fn() -> String, mut done: impl FnMut() -> bool) -> u64 {
    let mut patience = Patience::new(DEADLINE);
    let mut killed = 0;
    loop {
        if done() {
            return killed;
        }
        killed += kill_stopped_steward(parent.domain());
        let _ = parent.ensure_steward();
        assert!(patience.lasts(), "never: {}", what());
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Kills the steward if its lever stopped it: 1 if it did.
fn kill_stopped_steward(domain: &Domain) -> u64 {
    let steward = domain.steward();
    if steward.pid != 0 && is_stopped(steward) {
        sigkill(steward.pid);
        return 1;
    }
    0
}

/// Whether the process `pid` is stopped (`/proc/<pid>/stat`'s state `T`).
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

/// The record's id of file `f` (its identity looked up in the table).
fn record_of(domain: &Domain, data: &Path, f: usize) -> Option<super::files::FileId> {
    let meta = std::fs::metadata(data_file(data, f)).unwrap();
    domain
        .files()
        .lookup(&super::read::key_of(&meta))
        .map(|found| found.id)
}

/// Whether file `f`'s record has a live writer (its `WRITER` a slot).
fn has_writer(domain: &Domain, data: &Path, f: usize) -> bool {
    record_of(domain, data, f).is_some_and(|id| domain.files().writer(id).is_some())
}

/// Compares `got`, file `f` as read by `what`, with versions `a` and `b` byte by byte:
/// each byte must be one of the two versions' (0 past a version's end), and the length
/// between theirs. `a` == `b`: exactly version `a`. `b` = `a` + 1 when a killed writer had
/// op `b` in flight: the disk may hold it whole, in part or not at all (docs/persistence.md,
/// the promise), and a page the domain read from the disk then too. Returns the wrong
/// bytes (and 1 for a wrong length).
fn compare(what: &str, f: usize, got: &[u8], model: &mut Model, a: u64, b: u64) -> u64 {
    let (va, vb) = (model.file(a), model.file(b));
    let (lo, hi) = (va.len().min(vb.len()), va.len().max(vb.len()));
    let mut wrong = 0;
    if got.len() < lo || got.len() > hi {
        eprintln!(
            "{what}: file {f}: {} bytes, versions {a} and {b} have {} and {}",
            got.len(),
            va.len(),
            vb.len()
        );
        wrong += 1;
    }
    let byte = |v: &[u8], i: usize| v.get(i).copied().unwrap_or(0);
    let bad: Vec<usize> = (0..got.len())
        .filter(|&i| got[i] != byte(&va, i) && got[i] != byte(&vb, i))
        .collect();
    if let Some(&first) = bad.first() {
        eprintln!(
            "{what}: file {f}: {} bytes are neither version {a}'s nor {b}'s, the first at {first} \
             (page {})",
            bad.len(),
            first as u64 / PAGE
        );
        wrong += bad.len() as u64;
    }
    wrong
}

/// Reads every file whole through the domain as a fresh reader (a new open, by the test's
/// member) and compares it with versions `a[f]` and `b[f]` (`compare`). Returns the wrong
/// bytes.
fn read_fresh(parent: &Member, data: &Path, models: &mut [Model], a: &[u64], b: &[u64]) -> u64 {
    let reader = SharedReader::new(parent, parent, 1);
    let mut wrong = 0;
    for (f, model) in models.iter_mut().enumerate() {
        let file = reader.open(&data_file(data, f)).unwrap();
        let mut buf = vec![0u8; (PAGES_MAX * PAGE) as usize];
        let got = reader.read_at(&file, &mut buf, 0).unwrap();
        reader.close(file).unwrap();
        wrong += compare("a fresh read", f, &buf[..got], model, a[f], b[f]);
    }
    wrong
}

/// The files on disk compared with versions `a[f]` and `b[f]` (`compare`). Returns the
/// wrong bytes.
fn check_disk(data: &Path, models: &mut [Model], a: &[u64], b: &[u64]) -> u64 {
    let mut wrong = 0;
    for (f, model) in models.iter_mut().enumerate() {
        let disk = std::fs::read(data_file(data, f)).unwrap();
        wrong += compare("the disk", f, &disk, model, a[f], b[f]);
    }
    wrong
}

/// Whether every slot is free but `parent`'s and the steward's (every dead child swept,
/// every keeper waited for), the steward alive.
fn quiet(domain: &Domain, parent: &Member) -> bool {
    super::tests_domain::is_quiet(domain, parent.holder())
}

/// The figures of a run.
#[derive(Debug, Default)]
struct Figures {
    writers_killed: u64,
    writers_killed_keeper_stopped: u64,
    readers_killed: u64,
    stewards_killed: u64,
    stewards_killed_by_lever: u64,
    everything_killed: u64,
    fresh_reads: u64,
    disk_checks: u64,
    reader_checks: u64,
    /// Reader pages of a killed writer's op in flight read in part (`MIXED`).
    reader_pages_mixed: u64,
    writes_returned: u64,
    /// Two writers: the turns passed (each a move of the writer role).
    turns_passed: u64,
    /// The longest write (a follower's wait for the role within it).
    write_ms_max: u64,
}

impl Figures {
    fn kills(&self) -> u64 {
        self.writers_killed
            + self.writers_killed_keeper_stopped
            + self.readers_killed
            + self.stewards_killed
            + self.stewards_killed_by_lever
    }
}

/// The kill test with writers (module docs).
#[test]
fn writers_readers_and_the_steward_killed_at_random_lose_no_returned_write() {
    kill_at_random(1, ROUNDS_ENV, 20, "write-kill");
}

/// The kill test with two writing processes per file (module docs, "Two writers"): each
/// file written in turns by two processes (the writer role moving between them at every
/// pass), everything else as the kill test with one. 6 rounds by default (about 30
/// kills); more with `FOLIO_TWO_WRITER_KILL_ROUNDS`. It found the stale size a keeper
/// set after a hand-over (docs/sharing.md "Two writing processes").
#[test]
fn two_writers_per_file_readers_and_the_steward_killed_at_random_lose_no_returned_write() {
    kill_at_random(2, TWO_ROUNDS_ENV, 6, "two-write-kill");
}

/// Lever (a) of the two writers' tests (module docs, "Two writers"): the holder of file
/// 0's role, asked for it, stopped by its lever after its write-out and before its
/// release (`Step::Yielding`) and killed there: the requester, whose write waited (it
/// returned nothing meanwhile), gets the role once the holder is swept and writes; a
/// third process, started in the dead one's place, and the requester then write in
/// turns; every read checked, and the end's checks.
#[test]
fn a_holder_killed_between_its_write_out_and_its_release_leaves_the_role_to_its_requester() {
    killed_in_a_hand_over(Victim::Holder);
}

/// Lever (b) of the two writers' tests (module docs, "Two writers"): a follower of file 0
/// stopped by its lever once its request of the role is in the record (`WANTED` names
/// it: `Step::Requested`) while the holder is stopped (it cannot have handed over), and
/// killed there: the holder, continued, writes on (the dead one's request swept, or
/// handed the role to and taken back once it is), then a third process, started in the
/// dead one's place, and the holder write in turns; every read checked, and the end's
/// checks.
#[test]
fn a_requester_killed_while_its_request_is_set_leaves_the_role_to_the_survivors() {
    killed_in_a_hand_over(Victim::Requester);
}

/// Which writer of file 0 a lever test of the hand-over kills.
#[derive(Clone, Copy, Debug)]
enum Victim {
    /// The holder, at `Step::Yielding`.
    Holder,
    /// The requester, at `Step::Requested`.
    Requester,
}

/// The levers' tests: file 0's holder (writer 0) writes, stops after a returned write
/// with the turn passed to the requester (writer 1); `victim` stops at its lever's step
/// and is killed there; the survivor writes on; a process started in the victim's place
/// and the survivor write in turns (`both_write_then_read`).
fn killed_in_a_hand_over(victim: Victim) {
    let (f, holder, requester) = (0, 0, 1);
    let (pen, step, name) = match victim {
        Victim::Holder => (holder, super::Step::Yielding, "yield-kill"),
        Victim::Requester => (requester, super::Step::Requested, "request-kill"),
    };
    let what = format!("the {victim:?} killed at {step:?}");
    let armed = Some((Role::Writer(f, pen), step));
    with_children(
        2,
        name,
        armed,
        &what,
        |children, parent, models, figures| {
            until_wrote(children, parent, f, holder, 3, figures);
            let quiet_pen = stop_file(children, parent, f, figures);
            assert_eq!(quiet_pen, holder, "the turn is the holder's");
            let turn = |children: &Children<'_>, pen: usize| {
                children
                    .board
                    .file(f, TURN)
                    .store(pen as u64, Ordering::Release)
            };
            turn(children, requester);
            if let Victim::Holder = victim {
                // The requester's write asks; the holder's writeback thread hands over, and
                // its lever stops it there.
                continue_writer(children, f, holder);
            }
            let pid = children.pid(Role::Writer(f, pen));
            figures.stewards_killed_by_lever +=
                until(parent, &format!("{what}: stopped"), || stopped(pid));
            assert_eq!(
                children.wrote(f, requester),
                0,
                "the requester wrote while the holder held the role"
            );
            children.kill(Role::Writer(f, pen));
            figures.writers_killed += 1;
            let survivor = match victim {
                Victim::Holder => requester,
                Victim::Requester => {
                    turn(children, holder);
                    continue_writer(children, f, holder);
                    holder
                }
            };
            let wrote = children.wrote(f, survivor);
            until_wrote(children, parent, f, survivor, wrote + 3, figures);
            children.start(Role::Writer(f, pen));
            children.wait_ready(Role::Writer(f, pen), parent);
            both_write_then_read(children, parent, models, f, figures);
        },
    );
}

/// Waits until writer `pen` of file `f` returned `ops` ops in all.
fn until_wrote(
    children: &Children<'_>,
    parent: &Member,
    f: usize,
    pen: usize,
    ops: u64,
    figures: &mut Figures,
) {
    figures.stewards_killed_by_lever +=
        until(parent, &format!("writer {pen} of file {f} writes"), || {
            children.wrote(f, pen) >= ops
        });
}

/// File `f`'s writing stopped after its next returned write (`stop_writers`' for one
/// file): returns the writer stopped, which stays stopped (`continue_writer`).
fn stop_file(children: &Children<'_>, parent: &Member, f: usize, figures: &mut Figures) -> usize {
    let board = &children.board;
    let next = board.file(f, RETURNED).load(Ordering::Acquire) + 1;
    board.file(f, STOP_AT).store(next, Ordering::Release);
    let pen = children.wait_stopped(parent, f, figures);
    board.file(f, STOP_AT).store(0, Ordering::Release);
    assert_eq!(
        board.file(f, STARTED).load(Ordering::Acquire),
        board.file(f, RETURNED).load(Ordering::Acquire)
    );
    pen
}

fn continue_writer(children: &Children<'_>, f: usize, pen: usize) {
    // SAFETY: continues our own stopped child.
    unsafe {
        libc::kill(
            children.pid(Role::Writer(f, pen)) as libc::pid_t,
            libc::SIGCONT,
        )
    };
}

/// The levers' tests' end: file `f`'s turn passed by its writers again, both write (the
/// role moving between them), then every file read whole by a fresh reader.
fn both_write_then_read(
    children: &mut Children<'_>,
    parent: &Member,
    models: &mut [Model],
    f: usize,
    figures: &mut Figures,
) {
    children
        .board
        .file(f, TURN_BY_TEST)
        .store(0, Ordering::Release);
    let wrote: Vec<u64> = (0..2).map(|pen| children.wrote(f, pen)).collect();
    for (pen, wrote) in wrote.into_iter().enumerate() {
        until_wrote(children, parent, f, pen, wrote + 3, figures);
    }
    let returned = stop_writers(children, parent, figures);
    let wrong = read_fresh(parent, children.data, models, &returned, &returned);
    assert_eq!(wrong, 0, "pages a fresh reader read wrong");
    figures.fresh_reads += 1;
    continue_writers(children);
}

/// The kill test's rounds (module docs) with `writers` writers per file, `rounds_env`'s
/// rounds (`rounds` by default).
fn kill_at_random(writers: usize, rounds_env: &str, rounds: u64, name: &str) {
    let rounds: u64 = std::env::var(rounds_env)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(rounds);
    let what = format!("{rounds} rounds");
    with_children(
        writers,
        name,
        None,
        &what,
        |children, parent, models, figures| {
            kill_rounds(children, parent, models, figures, rounds);
        },
    );
}

/// The kill tests' frame: the files and the board made, the domain's member attached,
/// every writer (`writers` per file; `armed` started with its stop lever) and reader
/// started; then `body`; then the end: everyone leaves cleanly, and the disk and a fresh
/// reader read every returned write, the readers read no wrong page, the domain checks.
fn with_children(
    writers: usize,
    name: &str,
    armed: Option<(Role, super::Step)>,
    what: &str,
    body: impl FnOnce(&mut Children<'_>, &Member, &mut [Model], &mut Figures),
) {
    let seed = seed_from_env("writers killed");
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    for f in 0..FILES {
        let first: Vec<u8> = (0..FIRST_LEN).map(|at| stamp(f, at, 0)).collect();
        std::fs::write(data_file(data.path(), f), first).unwrap();
    }
    let mut config = config(home.path(), name, super::queue::PIN_SLOTS, FRAMES);
    config.linger = Duration::from_secs(2);
    let parent = Member::attach(&config).unwrap();
    let domain = parent.domain();
    let mut children = Children {
        home: home.path(),
        data: data.path(),
        name,
        seed,
        board: Board::create(&data.path().join("board")),
        writers,
        armed,
        running: Vec::new(),
        stopped_keepers: Vec::new(),
        started: 0,
    };
    let mut models: Vec<Model> = (0..FILES).map(|f| Model::new(seed, f)).collect();
    let mut figures = Figures::default();
    let started = Instant::now();
    if let Some((Role::Writer(f, _), _)) = armed {
        // The armed writer's file: its turn passed by the test (the levers' tests).
        children
            .board
            .file(f, TURN_BY_TEST)
            .store(1, Ordering::Release);
    }
    figures.stewards_killed_by_lever += children.start_all(&parent);
    body(&mut children, &parent, &mut models, &mut figures);
    let board = |children: &Children<'_>, f: usize, w: usize| {
        children.board.file(f, w).load(Ordering::Acquire)
    };
    // The end: everyone leaves cleanly (a writer's drop writes back and detaches).
    children.board.word(QUIT).store(1, Ordering::Release);
    for (role, pid) in std::mem::take(&mut children.running) {
        let status = wait_for(pid as libc::pid_t, 0);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{role:?} (a survivor) failed: status {status:#x}"
        );
    }
    until(&parent, "quiet at the end", || quiet(domain, &parent));
    let returned: Vec<u64> = (0..FILES).map(|f| board(&children, f, RETURNED)).collect();
    let started_ops: Vec<u64> = (0..FILES).map(|f| board(&children, f, STARTED)).collect();
    assert_eq!(
        returned, started_ops,
        "a clean exit leaves no write in flight"
    );
    assert_eq!(
        check_disk(data.path(), &mut models, &returned, &returned),
        0,
        "the disk"
    );
    assert_eq!(
        read_fresh(&parent, data.path(), &mut models, &returned, &returned),
        0,
        "the domain at the end"
    );
    check_all(domain);
    figures.writes_returned = returned.iter().sum();
    figures.reader_checks += (0..READERS)
        .map(|r| children.board.reader(r, CHECKS).load(Ordering::Acquire))
        .sum::<u64>();
    figures.reader_pages_mixed = (0..FILES).map(|f| board(&children, f, MIXED)).sum();
    figures.turns_passed = (0..FILES).map(|f| board(&children, f, PASSES)).sum();
    figures.write_ms_max = (0..FILES)
        .map(|f| board(&children, f, WRITE_US_MAX))
        .max()
        .unwrap_or(0)
        / 1000;
    let wrong: u64 = (0..READERS)
        .map(|r| children.board.reader(r, WRONG).load(Ordering::Acquire))
        .sum();
    eprintln!(
        "writers killed: FOLIO_SEED={seed}, {what}, {} kills in {:.1} s, {} processes \
         started: {figures:?}",
        figures.kills(),
        started.elapsed().as_secs_f64(),
        children.started
    );
    assert_eq!(wrong, 0, "wrong pages read by the readers");
    if writers > 1 {
        assert!(
            (0..FILES).all(|f| board(&children, f, PASSES) > 0),
            "a file's turn never passed: {figures:?}"
        );
    }
    reclaim_everything(domain, parent.holder());
    parent.detach();
}

/// `rounds` rounds of kills at random instants (module docs).
fn kill_rounds(
    children: &mut Children<'_>,
    parent: &Member,
    models: &mut [Model],
    figures: &mut Figures,
    rounds: u64,
) {
    let (seed, writers) = (children.seed, children.writers);
    let domain = parent.domain();
    let data = children.data;
    let mut rng = Rng(seed);
    let started = Instant::now();
    let board = |children: &Children<'_>, f: usize, w: usize| {
        children.board.file(f, w).load(Ordering::Acquire)
    };
    for round in 1..=rounds {
        // Survivors keep working: every writer returns writes, every reader checks reads.
        let writes: Vec<u64> = (0..FILES).map(|f| board(children, f, RETURNED)).collect();
        let wrote: Vec<u64> = children.pens().map(|(f, w)| children.wrote(f, w)).collect();
        let reads: Vec<u64> = (0..READERS)
            .map(|r| children.board.reader(r, CHECKS).load(Ordering::Acquire))
            .collect();
        let lagging = || {
            let files = (0..FILES)
                .filter(|&f| board(children, f, RETURNED) < writes[f] + 2)
                .map(|f| format!("file {f}'s writes"));
            let pens = children
                .pens()
                .zip(&wrote)
                .filter(|((f, w), &wrote)| children.wrote(*f, *w) <= wrote)
                .map(|((f, w), _)| format!("writer {w} of file {f}"));
            let readers = (0..READERS)
                .filter(|&r| {
                    children.board.reader(r, CHECKS).load(Ordering::Acquire) < reads[r] + 20
                })
                .map(|r| format!("reader {r}"));
            files.chain(pens).chain(readers).collect::<Vec<_>>()
        };
        figures.stewards_killed_by_lever += until_said(
            parent,
            || format!("round {round}: progress of {:?}", lagging()),
            || lagging().is_empty(),
        );
        let events = 3 + rng.below(3);
        // `FOLIO_WRITE_KILL_EVENTS=0`: the rounds' stops, checks and restarts of
        // everything only (a failure without random kills is not theirs).
        let events = std::env::var(EVENTS_ENV)
            .ok()
            .and_then(|s| s.parse().ok())
            .map_or(events, |most: u64| events.min(most));
        for _ in 0..events {
            match rng.below(10) {
                0..=3 => {
                    // A writer at a random instant (once it returned a few more writes),
                    // the steward's lever armed now and then.
                    let f = rng.below(FILES as u64) as usize;
                    let w = rng.below(writers as u64) as usize;
                    let target = board(children, f, RETURNED) + 1 + rng.below(4);
                    if rng.below(3) == 0 {
                        domain.set_steward_stop_at(1 + rng.below(4));
                    }
                    figures.stewards_killed_by_lever += until(parent, "a writer's writes", || {
                        board(children, f, RETURNED) >= target
                    });
                    eprintln!("round {round}: writer {w} of file {f} killed after op {target}");
                    children.kill(Role::Writer(f, w));
                    figures.writers_killed += 1;
                    restart_writer(children, parent, (f, w), figures);
                    domain.set_steward_stop_at(0);
                }
                4..=5 => {
                    let f = rng.below(FILES as u64) as usize;
                    eprintln!("round {round}: a writer of file {f} killed, its keeper stopped");
                    kill_with_keeper_stopped(children, parent, models, f, figures);
                }
                6..=7 => {
                    let r = rng.below(READERS as u64) as usize;
                    let target =
                        children.board.reader(r, CHECKS).load(Ordering::Acquire) + rng.below(200);
                    figures.stewards_killed_by_lever += until(parent, "a reader's reads", || {
                        children.board.reader(r, CHECKS).load(Ordering::Acquire) >= target
                    });
                    eprintln!("round {round}: reader {r} killed");
                    children.kill(Role::Reader(r));
                    figures.readers_killed += 1;
                    children.start(Role::Reader(r));
                    children.wait_ready(Role::Reader(r), parent);
                }
                _ => {
                    // The steward at a random instant; a member's wait or the next attach
                    // starts the next one.
                    let steward = domain.steward();
                    if steward.pid != 0 && steward.open().is_some() {
                        eprintln!("round {round}: the steward killed");
                        sigkill(steward.pid);
                        figures.stewards_killed += 1;
                    }
                }
            }
        }
        // The round's end: every writer stopped after a returned write, every file read
        // whole through the domain by a fresh reader.
        let returned = stop_writers(children, parent, figures);
        let wrong = read_fresh(parent, data, models, &returned, &returned);
        assert_eq!(
            wrong, 0,
            "round {round}: pages a fresh reader read wrong (FOLIO_SEED={seed})"
        );
        figures.fresh_reads += 1;
        continue_writers(children);
        if round % 5 == 0 {
            everything_killed(children, parent, data, models, figures, round);
        }
        let wrong: u64 = (0..READERS)
            .map(|r| children.board.reader(r, WRONG).load(Ordering::Acquire))
            .sum();
        assert_eq!(
            wrong, 0,
            "round {round}: wrong pages read by the readers (FOLIO_SEED={seed})"
        );
        if round % 10 == 0 {
            eprintln!(
                "writers killed: round {round}, {} kills in {:.1} s",
                figures.kills(),
                started.elapsed().as_secs_f64()
            );
        }
    }
}

/// Starts writer `pen` of file `f` again. The only writer of its file: once the steward
/// swept the killed one (its record no longer names a live writer), and it must become
/// the file's writer (at its open, or, while the dead one's keeper writes, at its first
/// write once the keeper is done). One of two: at once (the other may hold the role, or
/// take it; the restarted one follows, and asks for it at its first write).
fn restart_writer(
    children: &mut Children<'_>,
    parent: &Member,
    (f, pen): (usize, usize),
    figures: &mut Figures,
) {
    let data = children.data;
    if children.writers == 1 {
        figures.stewards_killed_by_lever += until(parent, "the killed writer swept", || {
            !has_writer(parent.domain(), data, f)
        });
    }
    children.start(Role::Writer(f, pen));
    children.wait_ready(Role::Writer(f, pen), parent);
    if children.writers == 1 {
        figures.stewards_killed_by_lever += until_held(parent, data, f);
    }
}

/// Waits until a writer holds file `f`'s record. Returns the stewards killed meanwhile
/// (`until`).
fn until_held(parent: &Member, data: &Path, f: usize) -> u64 {
    until(parent, &format!("a writer holds file {f}'s record"), || {
        has_writer(parent.domain(), data, f)
    })
}

/// The deterministic kill (module docs): writer `f` stopped after a write it did not sync,
/// its keeper stopped, the writer killed; once the steward swept it, every frame reclaim
/// can take is reclaimed, and a fresh reader must read every returned write (the dead
/// writer's frames still HELD: its keeper has not written them). Then the keeper goes on
/// and the writer is started again.
fn kill_with_keeper_stopped(
    children: &mut Children<'_>,
    parent: &Member,
    models: &mut [Model],
    f: usize,
    figures: &mut Figures,
) {
    let board = &children.board;
    let next = board.file(f, RETURNED).load(Ordering::Acquire) + 1;
    board
        .file(f, STOP_AT)
        .store(next | DIRTY, Ordering::Release);
    let pen = children.wait_stopped(parent, f, figures);
    board.file(f, STOP_AT).store(0, Ordering::Release);
    let v = board.file(f, RETURNED).load(Ordering::Acquire);
    assert_eq!(board.file(f, STARTED).load(Ordering::Acquire), v);
    let keeper = board.writer(f, pen, KEEPER).load(Ordering::Acquire) as u32;
    // SAFETY: stops the keeper of our own child.
    let signalled = unsafe { libc::kill(keeper as libc::pid_t, libc::SIGSTOP) };
    assert_eq!(signalled, 0);
    children.stopped_keepers.push(keeper);
    children.kill(Role::Writer(f, pen));
    figures.writers_killed_keeper_stopped += 1;
    let data = children.data;
    figures.stewards_killed_by_lever += until(parent, "the killed writer swept", || {
        !has_writer(parent.domain(), data, f)
    });
    // Every frame reclaim can take, taken (the others are HELD or pinned).
    let domain = parent.domain();
    let slots = domain.slots();
    let indexes = domain.indexes();
    domain
        .queue()
        .reclaim(
            FRAMES,
            super::queue::Shares::NONE,
            parent.holder(),
            indexes.as_slice(),
            &slots,
            parent,
        )
        .unwrap();
    let wrong = read_one_fresh(parent, data, models, f, v);
    assert_eq!(
        wrong, 0,
        "file {f}: a fresh reader lost returned writes of a writer killed with its keeper \
         stopped"
    );
    // SAFETY: continues the keeper we stopped.
    let signalled = unsafe { libc::kill(keeper as libc::pid_t, libc::SIGCONT) };
    assert_eq!(signalled, 0);
    children.stopped_keepers.retain(|&k| k != keeper);
    children.start(Role::Writer(f, pen));
    children.wait_ready(Role::Writer(f, pen), parent);
    // The restarted writer follows the `ORPHANED` record until the keeper, continued, is
    // done, and claims the role at its next write; with two writers the other may have
    // asked first (`WANTED`). Either way a writer holds it soon.
    figures.stewards_killed_by_lever += until_held(parent, data, f);
}

/// `read_fresh` of file `f` alone, exactly at version `v`.
fn read_one_fresh(parent: &Member, data: &Path, models: &mut [Model], f: usize, v: u64) -> u64 {
    let reader = SharedReader::new(parent, parent, 1);
    let file = reader.open(&data_file(data, f)).unwrap();
    let mut buf = vec![0u8; (PAGES_MAX * PAGE) as usize];
    let got = reader.read_at(&file, &mut buf, 0).unwrap();
    reader.close(file).unwrap();
    compare("a fresh read", f, &buf[..got], &mut models[f], v, v)
}

/// Stops each file's writing after its next returned write (the writer that returned it
/// stopped; another waits for its turn); returns each file's version then.
fn stop_writers(children: &Children<'_>, parent: &Member, figures: &mut Figures) -> Vec<u64> {
    let board = &children.board;
    for f in 0..FILES {
        let next = board.file(f, RETURNED).load(Ordering::Acquire) + 1;
        board.file(f, STOP_AT).store(next, Ordering::Release);
    }
    for f in 0..FILES {
        children.wait_stopped(parent, f, figures);
    }
    (0..FILES)
        .map(|f| {
            let v = board.file(f, RETURNED).load(Ordering::Acquire);
            assert_eq!(board.file(f, STARTED).load(Ordering::Acquire), v);
            v
        })
        .collect()
}

fn continue_writers(children: &Children<'_>) {
    for f in 0..FILES {
        children.board.file(f, STOP_AT).store(0, Ordering::Release);
    }
    for (f, pen) in children.pens() {
        // SAFETY: continues our own stopped child (a running one ignores it).
        unsafe {
            libc::kill(
                children.pid(Role::Writer(f, pen)) as libc::pid_t,
                libc::SIGCONT,
            )
        };
    }
}

/// Every child killed at once (at random instants of their work); once the keepers are
/// done and the steward swept everyone, the domain checks, the disk holds every returned
/// write (the op in flight at a death: whole or not, page by page), and so does the
/// domain; then everyone is started again.
fn everything_killed(
    children: &mut Children<'_>,
    parent: &Member,
    data: &Path,
    models: &mut [Model],
    figures: &mut Figures,
    round: u64,
) {
    let roles: Vec<Role> = children.running.iter().map(|(role, _)| *role).collect();
    for &role in &roles {
        children.kill(role);
        match role {
            Role::Writer(..) => figures.writers_killed += 1,
            Role::Reader(_) => figures.readers_killed += 1,
        }
    }
    figures.everything_killed += 1;
    let domain = parent.domain();
    figures.stewards_killed_by_lever += until(parent, "quiet after everything killed", || {
        quiet(domain, parent)
    });
    let returned: Vec<u64> = (0..FILES)
        .map(|f| children.board.file(f, RETURNED).load(Ordering::Acquire))
        .collect();
    let in_flight: Vec<u64> = (0..FILES)
        .map(|f| children.board.file(f, STARTED).load(Ordering::Acquire))
        .collect();
    let dead_marks: u32 = (0..domain.slots().slot_count())
        .map(|s| {
            let (state, holder) = domain.slots().state(SlotIndex(s));
            if state == SlotState::Free {
                domain.queue().marks_of(holder)
            } else {
                0
            }
        })
        .sum();
    assert_eq!(dead_marks, 0, "round {round}: marks of free slots left");
    check_all(domain);
    let wrong = check_disk(data, models, &returned, &in_flight);
    assert_eq!(
        wrong, 0,
        "round {round}: pages on disk without their returned writes"
    );
    let wrong = read_fresh(parent, data, models, &returned, &in_flight);
    assert_eq!(
        wrong, 0,
        "round {round}: pages in the domain without their returned writes"
    );
    figures.disk_checks += 1;
    figures.stewards_killed_by_lever += children.start_all(parent);
}
