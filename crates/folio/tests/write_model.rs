//! Property test of the write side (issue 14, done-when 1; DESIGN.md §8) against a model:
//! the file is a `Vec<u8>`, and random sequences of operations run on both folio and the
//! model:
//!
//! - `write_at` at any offset (unaligned, in a hole past the end) of 1 B to ~300 KiB,
//!   through a writable handle (a read-only one must refuse it and change nothing);
//! - `read_at` through any handle, read-only or not, at any offset and length (up to
//!   3 MiB, so readahead brings large folios in that later writes overwrite in part):
//!   the bytes and the count, short at the end of the file, equal the model's;
//! - pinned pages (issue 28): `Pin` takes a `get_page` view and keeps it, up to
//!   `PINS_MAX` at once (past that the oldest goes), of a page anywhere or again of a page
//!   a held view shows (which pins the folio there now: a copy, if a write copied on write
//!   since); `Unpin` drops any of them; `WritePinned` writes into a held view's page, so
//!   the writer copies on write whenever the folio there is still one a view pins. Each
//!   view's bytes equal the model's when it is taken and never change while it is held
//!   (checked after every operation, and when it is dropped);
//! - `set_len` down and up; `writeback` of a range; `advise(DontNeed)` and
//!   `advise(WillNeed)`; opening and closing handles (all of them, too); dropping the
//!   whole cache and opening the file in a new one;
//! - `sync_data`, `sync_all`, `sync_range` and `Cache::sync_all_files`: after each, the
//!   file on disk, read with `std::fs`, equals the model, its length too, and no page is
//!   left dirty or under writeback (`Stats`: none lost track of or counted twice); after
//!   `sync_range`, its bytes in the range do, and its length (or, if a writeback of a
//!   page outside the range wrote the tail block whole since, up to the next 4 KiB of
//!   zeros).
//!
//! Why a model: every byte folio returns or writes is compared with a byte computed
//! without folio, across eviction, readahead, copy on write, truncation, background
//! writeback and throttling interleaving in whatever order the sequence gives them. The
//! caches come in three sizes: 64 pages with a dirty limit of a few pages (eviction,
//! throttling and writeback all the time, folios of at most 16 KiB), 4 MiB (folios up to
//! 256 KiB) and 32 MiB with the default dirty limit (2 MiB folios); half the cases write
//! back expired pages after 1 ms, so the background writeback races the operations.
//!
//! Each backend gets its own test (`io_uring`, `pread`) of `PROPTEST_CASES` cases
//! (default `CASES_DEFAULT`, 128; `PROPTEST_CASES=2000` for a longer hunt, which sets the
//! concurrent syncs' count below too; the whole file takes about 20 s in `--release` on a
//! loaded 2-core machine). A case that makes no progress (no operation and no sync
//! completed) for `CASE_STALL` (a writer throttled forever, a sync that never returns)
//! fails with its configuration instead of hanging the run; a case that is only slow (a
//! loaded machine: CI beside a CPU hog once took a case past a 60 s bound on its whole
//! run) goes on. Of 128 cases per backend (one run, counted, before pinned
//! pages came in), about a quarter throttled their writers, a fifth evicted, 7% copied
//! on write and 7% forgot the file after its last close, and 12% still held a large folio
//! at byte 0 at their end. With pinned pages (one run, 2026-11-27), 61% of the cases
//! copied on write, 12 copies a case on average.
//!
//! # Concurrent syncs (issue 28)
//!
//! The bug: a sync returned Ok while bytes written before it began were still only in the
//! cache, when a writer copied on write (someone held the folio pinned) between the sync's
//! tagging and its walk, or while the sync waited for the folio (the copy lost the tag);
//! none of these tests had a sync run while a write did. A second pair of tests
//! (`concurrent_syncs_*`, `PROPTEST_CASES` cases per backend, default
//! `SYNCED_CASES_DEFAULT`, 32) runs threads beside the operations, each with its own
//! handle, started together by a barrier and stopped when the operations end:
//!
//! - one or two syncers, each running its syncs (`sync_data`, `sync_all`, `sync_range`,
//!   `Cache::sync_all_files`) in turn, with or without a pause, while the operations run;
//!   after each it reads the file with O_DIRECT and checks that every write that had
//!   returned before the sync began is there over what the sync covered: each byte is the
//!   model's as those writes left it, or the byte of a write issued since (which may have
//!   reached the disk or not), and the file is at least that long;
//! - in three cases of four, a pinner: `get_page` of the page the main thread is writing
//!   (three views in four) and of each of the case's pages in turn, each held 0 (a pin
//!   and an unpin: the refcount moves under the writeback's CAS), 5 or 30 us, whose bytes
//!   must not change while it holds them.
//!
//! The main thread is the only writer: it records each write in a journal before it
//! issues it and again when it returns, which is what the syncers check against. Its
//! operations stay within `HOT_BYTES` so that pins, writes and syncs meet on the same
//! folios: mostly bursts (`Op::Burst`: a folio written in place, then pinned and written
//! again, a copy on write, up to 200 times in a row) and writes into pinned pages; no
//! `set_len` and no new cache (the syncers' view of the file's length would need their
//! order against its syncs). Its own syncs are checked as in the model, exactly. One run
//! (2026-11-27, counted): about 1,200 copies on write and 54 syncer syncs a case, 84% of
//! them with a write issued while they ran. On the code issue 28 was filed against, 9 of
//! 10 runs failed (and 6 of 6 with 48 cases per backend; the first failure at the 1st to
//! 36th case: a syncer's sync left 60-4,073 bytes of writes that returned before it only
//! in the cache, some of them pages of zeros never written); on the fixed code, 300 cases
//! per backend passed, and 5 runs of the default. A failure depends on thread timing, so
//! these tests keep no seeds (`write_model.proptest-regressions` holds the model's) and
//! shrink little (`synced_config`).
//!
//! After the model, the regressions it found (and one found reading the code it runs),
//! each a test of its own that fails on the code before its fix.

mod common;

use std::io::ErrorKind;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use folio::{Advice, BackendKind, Cache, File, PageRef, PAGE_BYTES};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// The initial file's salt (`common::pattern`); writes use their own data.
const SALT: u64 = 0x3a11;

/// The most handles open at once.
const HANDLES_MAX: usize = 4;

/// The most pages held pinned at once (`Op::Pin`).
const PINS_MAX: usize = 4;

/// The length of a burst's writes into the folio it pins (`Op::Burst`).
const BURST_RECORD_BYTES: usize = 64;

/// Offsets and lengths are drawn below this (the model stays a few MiB).
const SPAN_BYTES: u64 = 4 << 20;

/// A case with a syncer keeps its offsets below this: a few pages that pins, writes and
/// syncs meet on.
const HOT_BYTES: u64 = 64 << 10;

/// How long a case may go without completing an operation or a sync before it counts as
/// a hang (one operation is at most a few MiB of writes, reads or a sync: well under a
/// second here, and the case's threads are few).
const CASE_STALL: Duration = Duration::from_secs(60);

/// Cases per backend unless `PROPTEST_CASES` says otherwise.
const CASES_DEFAULT: u32 = 128;

/// Cases with a syncer per backend unless `PROPTEST_CASES` says otherwise.
const SYNCED_CASES_DEFAULT: u32 = 32;

/// The most syncs a syncer runs in one case (it goes on while the operations run).
const SYNCER_SYNCS_MAX: usize = 400;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    ReadOnly,
    ReadWrite,
}

#[derive(Clone, Copy, Debug)]
enum SyncKind {
    Data,
    All,
    /// `sync_range(offset, len)`.
    Range(u64, u64),
    /// `Cache::sync_all_files`.
    AllFiles,
}

impl SyncKind {
    /// Runs this sync through `file` (of `cache`).
    fn run(self, cache: &Cache, file: &File) -> std::io::Result<()> {
        match self {
            SyncKind::Data => file.sync_data(),
            SyncKind::All => file.sync_all(),
            SyncKind::Range(offset, len) => file.sync_range(offset, len),
            SyncKind::AllFiles => cache.sync_all_files(),
        }
    }

    /// The bytes it makes durable.
    fn covers(self) -> Range<u64> {
        match self {
            SyncKind::Range(offset, len) => offset..offset.saturating_add(len),
            _ => 0..u64::MAX,
        }
    }
}

/// Which page a `Pin` takes.
#[derive(Clone, Copy, Debug)]
enum PinPage {
    /// The page that holds this byte.
    At(u64),
    /// The page held view `i` (modulo those held) shows, again: the folio there now, a
    /// copy if a write copied on write since that view was taken.
    Held(usize),
}

#[derive(Clone, Debug)]
enum Op {
    /// `write_at` of `len` bytes made from `seed` at `offset`, through handle `handle`
    /// (modulo the handles open).
    Write {
        handle: usize,
        offset: u64,
        len: usize,
        seed: u64,
    },
    /// `Pin` of the page held view `pin` shows (modulo those held; with none held, of the
    /// page at `at`), then `Write` at byte `at` (modulo its length) of that page: into a
    /// folio someone pins, so always a copy on write.
    WritePinned {
        handle: usize,
        pin: usize,
        at: u64,
        len: usize,
        seed: u64,
    },
    /// A writer that keeps one folio busy, `count` times over: a write of `len` bytes at
    /// `offset` (in place, unless someone else pins the folio), then a `Pin` of the page
    /// at `offset` and a write of `BURST_RECORD_BYTES` into it, at a place that moves on
    /// each time (a copy on write). The writes' bytes are made from `seed` and their
    /// number.
    Burst {
        handle: usize,
        offset: u64,
        count: usize,
        len: usize,
        seed: u64,
    },
    Read {
        handle: usize,
        offset: u64,
        len: usize,
    },
    /// `get_page`, held (past `PINS_MAX` views, the oldest is dropped).
    Pin {
        handle: usize,
        page: PinPage,
    },
    /// Drops held view `pin` (modulo those held).
    Unpin {
        pin: usize,
    },
    SetLen {
        handle: usize,
        len: u64,
    },
    Sync {
        handle: usize,
        kind: SyncKind,
    },
    Writeback {
        handle: usize,
        offset: u64,
        len: u64,
    },
    DontNeed {
        handle: usize,
        offset: u64,
        len: u64,
    },
    WillNeed {
        handle: usize,
        offset: u64,
        len: u64,
    },
    Open {
        access: Access,
    },
    Close {
        handle: usize,
    },
    /// Drop every handle and the cache, then open the file in a new cache.
    ReopenCache {
        access: Access,
    },
}

/// A cache configuration a case runs with.
#[derive(Clone, Copy, Debug)]
struct Config {
    backend: BackendKind,
    capacity_bytes: u64,
    dirty_limit_bytes: Option<u64>,
    dirty_expire: Duration,
    /// Write-behind's step (`CacheBuilder::write_behind_bytes`; 0: off).
    write_behind_bytes: u64,
}

impl Config {
    fn build(&self) -> Cache {
        let mut builder = Cache::builder()
            .capacity_bytes(self.capacity_bytes)
            .backend(self.backend)
            .dirty_expire(self.dirty_expire)
            .write_behind_bytes(self.write_behind_bytes);
        if let Some(limit) = self.dirty_limit_bytes {
            builder = builder
                .dirty_limit_bytes(limit)
                .dirty_background_bytes(limit / 2);
        }
        builder.build().expect("build the cache")
    }
}

/// How the file starts.
#[derive(Clone, Copy, Debug)]
enum Initial {
    /// A pattern file of this length, written with `std::fs`.
    Existing(u64),
    /// No file: folio creates it.
    Created,
}

/// The threads that run beside a case's operations (module docs).
#[derive(Clone, Debug)]
struct Beside {
    /// One or two syncers, each with its own handle: syncs of one file from two threads
    /// at once, as well as against the writer.
    syncers: Vec<SyncerPlan>,
    pinner: Option<PinnerPlan>,
}

/// What a syncer thread does.
#[derive(Clone, Debug)]
struct SyncerPlan {
    /// Its syncs, in turn; from the first again while the operations still run.
    syncs: Vec<SyncKind>,
    /// Its pause after each sync, in microseconds.
    pause_us: u64,
}

/// What a pinner thread does: `get_page` of the page the main thread writes now and of
/// each of the case's pages in turn, one after the other, each view held this long (0:
/// dropped at once, the pinner yielding after it).
#[derive(Clone, Copy, Debug)]
struct PinnerPlan {
    hold_us: u64,
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 0..64u64 << 10,
        3 => 0..SPAN_BYTES,
        2 => (0..SPAN_BYTES / PAGE_BYTES as u64).prop_map(|p| p * PAGE_BYTES as u64),
        1 => (0..SPAN_BYTES / PAGE_BYTES as u64, 1..PAGE_BYTES as u64)
            .prop_map(|(p, back)| (p + 1) * PAGE_BYTES as u64 - back),
    ]
}

/// An offset among a case with a syncer's few pages.
fn hot_offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 0..HOT_BYTES,
        1 => (0..HOT_BYTES / PAGE_BYTES as u64).prop_map(|p| p * PAGE_BYTES as u64),
    ]
}

fn write_len() -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => 1usize..64,
        3 => 1usize..10_000,
        2 => (1usize..17).prop_map(|pages| pages * PAGE_BYTES),
        1 => 1usize..300 << 10,
    ]
}

/// A write's length in a case with a syncer: small, so that it stays on its pages.
fn hot_write_len() -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => 1usize..64,
        2 => 1usize..6_000,
        1 => (1usize..4).prop_map(|pages| pages * PAGE_BYTES),
    ]
}

fn range_len() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => 0..64u64 << 10,
        2 => 0..SPAN_BYTES,
        1 => Just(u64::MAX / 2),
    ]
}

fn access() -> impl Strategy<Value = Access> {
    prop_oneof![2 => Just(Access::ReadWrite), 1 => Just(Access::ReadOnly)]
}

fn sync_kind() -> impl Strategy<Value = SyncKind> {
    prop_oneof![
        2 => Just(SyncKind::Data),
        1 => Just(SyncKind::All),
        2 => (offset(), range_len()).prop_map(|(o, l)| SyncKind::Range(o, l)),
        1 => Just(SyncKind::AllFiles),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let handle = 0..HANDLES_MAX;
    prop_oneof![
        30 => (handle.clone(), offset(), write_len(), any::<u64>())
            .prop_map(|(handle, offset, len, seed)| Op::Write { handle, offset, len, seed }),
        6 => (handle.clone(), 0..PINS_MAX, 0..2u64 << 20, write_len(), any::<u64>())
            .prop_map(|(handle, pin, at, len, seed)| Op::WritePinned { handle, pin, at, len, seed }),
        2 => (handle.clone(), offset(), 1usize..50, write_len(), any::<u64>())
            .prop_map(|(handle, offset, count, len, seed)| Op::Burst { handle, offset, count, len, seed }),
        24 => (handle.clone(), offset(), prop_oneof![1usize..64, 1usize..20_000, 1usize..3 << 20])
            .prop_map(|(handle, offset, len)| Op::Read { handle, offset, len }),
        3 => (handle.clone(), offset())
            .prop_map(|(handle, offset)| Op::Pin { handle, page: PinPage::At(offset) }),
        2 => (handle.clone(), 0..PINS_MAX)
            .prop_map(|(handle, i)| Op::Pin { handle, page: PinPage::Held(i) }),
        3 => (0..PINS_MAX).prop_map(|pin| Op::Unpin { pin }),
        5 => (handle.clone(), prop_oneof![0..64u64 << 10, 0..SPAN_BYTES])
            .prop_map(|(handle, len)| Op::SetLen { handle, len }),
        8 => (handle.clone(), sync_kind()).prop_map(|(handle, kind)| Op::Sync { handle, kind }),
        4 => (handle.clone(), offset(), range_len())
            .prop_map(|(handle, offset, len)| Op::Writeback { handle, offset, len }),
        4 => (handle.clone(), offset(), range_len())
            .prop_map(|(handle, offset, len)| Op::DontNeed { handle, offset, len }),
        2 => (handle.clone(), offset(), range_len())
            .prop_map(|(handle, offset, len)| Op::WillNeed { handle, offset, len }),
        4 => access().prop_map(|access| Op::Open { access }),
        3 => handle.prop_map(|handle| Op::Close { handle }),
        1 => access().prop_map(|access| Op::ReopenCache { access }),
    ]
}

/// An operation of a case with a syncer: on its few pages, mostly writes into pinned
/// pages and pins of the pages written; no `set_len` and no new cache (module docs).
fn synced_op() -> impl Strategy<Value = Op> {
    let handle = 0..HANDLES_MAX;
    prop_oneof![
        12 => (handle.clone(), hot_offset(), hot_write_len(), any::<u64>())
            .prop_map(|(handle, offset, len, seed)| Op::Write { handle, offset, len, seed }),
        16 => (handle.clone(), 0..PINS_MAX, 0..HOT_BYTES, hot_write_len(), any::<u64>())
            .prop_map(|(handle, pin, at, len, seed)| Op::WritePinned { handle, pin, at, len, seed }),
        16 => (handle.clone(), hot_offset(), 1usize..200, hot_write_len(), any::<u64>())
            .prop_map(|(handle, offset, count, len, seed)| Op::Burst { handle, offset, count, len, seed }),
        4 => (handle.clone(), hot_offset(), prop_oneof![1usize..64, 1usize..20_000, 1usize..128 << 10])
            .prop_map(|(handle, offset, len)| Op::Read { handle, offset, len }),
        6 => (handle.clone(), hot_offset())
            .prop_map(|(handle, offset)| Op::Pin { handle, page: PinPage::At(offset) }),
        10 => (handle.clone(), 0..PINS_MAX)
            .prop_map(|(handle, i)| Op::Pin { handle, page: PinPage::Held(i) }),
        6 => (0..PINS_MAX).prop_map(|pin| Op::Unpin { pin }),
        2 => (handle.clone(), sync_kind()).prop_map(|(handle, kind)| Op::Sync { handle, kind }),
        3 => (handle.clone(), hot_offset(), range_len())
            .prop_map(|(handle, offset, len)| Op::Writeback { handle, offset, len }),
        2 => (handle.clone(), hot_offset(), range_len())
            .prop_map(|(handle, offset, len)| Op::DontNeed { handle, offset, len }),
        2 => access().prop_map(|access| Op::Open { access }),
        1 => handle.prop_map(|handle| Op::Close { handle }),
    ]
}

fn config(backend: BackendKind) -> impl Strategy<Value = Config> {
    (0..3usize, any::<bool>(), 2u64..16).prop_map(move |(size, racing, limit_pages)| {
        let (capacity_bytes, dirty_limit_bytes) = match size {
            0 => (
                64 * PAGE_BYTES as u64,
                Some(limit_pages * PAGE_BYTES as u64),
            ),
            1 => (4 << 20, Some(64 * PAGE_BYTES as u64)),
            _ => (32 << 20, None),
        };
        // Derived from the values drawn (not drawn itself), so that the saved seeds still
        // replay their configurations: the small cache writes behind every 2 pages (or
        // never), the others every 16 pages and at the default.
        let write_behind_bytes = match size {
            0 => (limit_pages % 2) * 2 * PAGE_BYTES as u64,
            1 => 16 * PAGE_BYTES as u64,
            _ => folio::WRITE_BEHIND_BYTES_DEFAULT,
        };
        Config {
            backend,
            capacity_bytes,
            dirty_limit_bytes,
            write_behind_bytes,
            dirty_expire: if racing {
                Duration::from_millis(1)
            } else {
                Duration::from_secs(60)
            },
        }
    })
}

fn case(backend: BackendKind) -> impl Strategy<Value = (Config, Initial, Vec<Op>)> {
    let initial = prop_oneof![
        1 => Just(Initial::Created),
        1 => Just(Initial::Existing(0)),
        2 => (1u64..10_000).prop_map(Initial::Existing),
        3 => (1u64..3 << 20).prop_map(Initial::Existing),
    ];
    // Most cases read the file whole first, so that readahead caches it in large folios
    // which the writes then change in part.
    let ops = (any::<bool>(), proptest::collection::vec(op(), 1..60)).prop_map(
        |(read_first, mut ops)| {
            if read_first {
                ops.insert(
                    0,
                    Op::Read {
                        handle: 0,
                        offset: 0,
                        len: 3 << 20,
                    },
                );
            }
            ops
        },
    );
    (config(backend), initial, ops)
}

fn synced_case(backend: BackendKind) -> impl Strategy<Value = (Config, Initial, Vec<Op>, Beside)> {
    let initial = prop_oneof![
        1 => Just(Initial::Created),
        3 => (1u64..2 * HOT_BYTES).prop_map(Initial::Existing),
    ];
    let syncer = (
        proptest::collection::vec(
            prop_oneof![
                4 => Just(SyncKind::Data),
                2 => Just(SyncKind::All),
                2 => (hot_offset(), 1..HOT_BYTES).prop_map(|(o, l)| SyncKind::Range(o, l)),
                1 => Just(SyncKind::AllFiles),
            ],
            1..8,
        ),
        prop_oneof![3 => Just(0u64), 1 => 1..200u64],
    )
        .prop_map(|(syncs, pause_us)| SyncerPlan { syncs, pause_us });
    let pinner = prop_oneof![
        1 => Just(None),
        1 => Just(Some(PinnerPlan { hold_us: 0 })),
        2 => prop_oneof![Just(5u64), Just(30)]
            .prop_map(|hold_us| Some(PinnerPlan { hold_us })),
    ];
    let beside = (proptest::collection::vec(syncer, 1..=2), pinner)
        .prop_map(|(syncers, pinner)| Beside { syncers, pinner });
    (
        config(backend),
        initial,
        proptest::collection::vec(synced_op(), 20..120),
        beside,
    )
}

/// The bytes a write with `seed` stores: a xorshift stream, unlike the initial pattern.
fn write_data(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

struct Handle {
    file: File,
    access: Access,
}

/// A held view and the model's bytes of its range when it was taken (equal to its own
/// bytes then: checked).
struct Pinned {
    page: PageRef,
    bytes: Vec<u8>,
}

/// The writes of a case with a syncer, in the order they were issued (the main thread is
/// the only writer): what the syncer checks the disk against.
#[derive(Default)]
struct Journal {
    /// (offset, bytes) of each write through a writable handle.
    writes: Vec<(u64, Arc<[u8]>)>,
    /// The first `returned` of them have returned.
    returned: usize,
}

/// Where the main thread writes now (the offset of its latest write), for a pinner to aim
/// at: a page it pins while the main thread writes it.
#[derive(Default)]
struct Writing(std::sync::atomic::AtomicU64);

/// What a case has completed so far (operations, and a syncer's syncs), counted by each of
/// its threads, so that `run_case_timed` tells a slow case from a hung one.
#[derive(Default)]
struct Progress(std::sync::atomic::AtomicU64);

impl Progress {
    fn step(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn steps(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// folio's side and the model, as a case runs.
struct World {
    config: Config,
    path: PathBuf,
    /// `None` only while it is being replaced.
    cache: Option<Cache>,
    handles: Vec<Handle>,
    /// The views held, oldest first (dropped before their handles' cache).
    pinned: Vec<Pinned>,
    model: Vec<u8>,
    /// With a syncer beside the operations: where the writes are recorded for it.
    journal: Option<Arc<Mutex<Journal>>>,
    /// With a pinner beside them: where it aims.
    writing: Arc<Writing>,
    /// Counted after each operation.
    progress: Arc<Progress>,
}

/// Fails the case with `what` unless `cond`.
fn check(cond: bool, what: impl FnOnce() -> String) -> Result<(), TestCaseError> {
    if cond {
        Ok(())
    } else {
        Err(TestCaseError::fail(what()))
    }
}

fn io_ok<T>(result: std::io::Result<T>, what: impl FnOnce() -> String) -> Result<T, TestCaseError> {
    result.map_err(|e| TestCaseError::fail(format!("{}: {e}", what())))
}

/// The first offset where `a` and `b` differ, for messages.
fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())))
}

impl World {
    fn cache(&self) -> &Cache {
        self.cache.as_ref().expect("a cache")
    }

    fn open(&mut self, access: Access) -> Result<(), TestCaseError> {
        let cache = self.cache();
        let file = match access {
            Access::ReadOnly => cache.open(&self.path),
            Access::ReadWrite => cache.open_options().write(true).open(&self.path),
        };
        let file = io_ok(file, || format!("open {access:?}"))?;
        check(file.len() == self.model.len() as u64, || {
            format!(
                "a new {access:?} handle says {} bytes, the model {}",
                file.len(),
                self.model.len()
            )
        })?;
        self.handles.push(Handle { file, access });
        Ok(())
    }

    /// The index of handle `i` (modulo the handles open); opens a writable one if none is.
    fn handle_index(&mut self, i: usize) -> Result<usize, TestCaseError> {
        if self.handles.is_empty() {
            self.open(Access::ReadWrite)?;
        }
        Ok(i % self.handles.len())
    }

    /// Handle `i` (modulo the handles open); opens a writable one if none is.
    fn handle(&mut self, i: usize) -> Result<&Handle, TestCaseError> {
        let i = self.handle_index(i)?;
        Ok(&self.handles[i])
    }

    /// The file on disk, read with `std::fs`, must equal the model.
    fn check_disk(&self, after: &str) -> Result<(), TestCaseError> {
        let disk = io_ok(std::fs::read(&self.path), || {
            "read the file with std::fs".into()
        })?;
        check(disk == self.model, || {
            format!(
                "after {after}: the file on disk ({} bytes) differs from the model ({} bytes) first at byte {:?}",
                disk.len(),
                self.model.len(),
                first_difference(&disk, &self.model)
            )
        })
    }

    /// After a whole-file sync of the only file: nothing dirty, nothing in flight.
    fn check_clean(&self, after: &str) -> Result<(), TestCaseError> {
        let s = self.cache().stats();
        check(s.dirty_pages == 0 && s.writeback_pages == 0, || {
            format!(
                "after {after}: {} dirty and {} writeback pages left: {s:?}",
                s.dirty_pages, s.writeback_pages
            )
        })
    }

    /// Every held view still shows the bytes it was taken with.
    fn check_pinned(&self) -> Result<(), TestCaseError> {
        self.pinned.iter().try_for_each(check_view)
    }

    /// Drops held view `i`, checked.
    fn unpin(&mut self, i: usize) -> Result<(), TestCaseError> {
        let view = self.pinned.remove(i);
        check_view(&view)
    }

    /// Drops every held view, checked.
    fn unpin_all(&mut self) -> Result<(), TestCaseError> {
        self.pinned.drain(..).try_for_each(|view| check_view(&view))
    }

    /// `write_at(data, offset)` through handle `handle` (modulo those open), on folio and
    /// on the model; recorded in the journal, if the case has one, before it is issued and
    /// again when it returns.
    fn write(&mut self, handle: usize, offset: u64, data: &[u8]) -> Result<(), TestCaseError> {
        let len = data.len();
        let i = self.handle_index(handle)?;
        let access = self.handles[i].access;
        self.writing.0.store(offset, Ordering::Relaxed);
        let journal = self
            .journal
            .as_ref()
            .filter(|_| access == Access::ReadWrite);
        if let Some(journal) = journal {
            let mut journal = journal.lock().unwrap();
            journal.writes.push((offset, Arc::from(data)));
        }
        let result = self.handles[i].file.write_at(data, offset);
        match access {
            Access::ReadOnly => {
                let err = result.err();
                check(
                    err.as_ref().map(|e| e.kind()) == Some(ErrorKind::PermissionDenied),
                    || format!("write_at through a read-only handle: {err:?}"),
                )?;
            }
            Access::ReadWrite => {
                let n = io_ok(result, || format!("write_at({offset}, {len})"))?;
                check(n == len, || {
                    format!("write_at({offset}, {len}) returned {n}")
                })?;
                if let Some(journal) = &self.journal {
                    let mut journal = journal.lock().unwrap();
                    journal.returned = journal.writes.len();
                }
                let end = offset as usize + len;
                if self.model.len() < end {
                    self.model.resize(end, 0);
                }
                self.model[offset as usize..end].copy_from_slice(data);
            }
        }
        let len_now = self.handles[i].file.len();
        check(len_now == self.model.len() as u64, || {
            format!(
                "after write_at({offset}, {len}) the file says {len_now} bytes, the model {}",
                self.model.len()
            )
        })
    }

    /// `get_page` of `page`, held (the oldest view dropped past `PINS_MAX`); returns the
    /// bytes it views, if the page is in the file.
    fn pin(&mut self, handle: usize, page: PinPage) -> Result<Option<Range<u64>>, TestCaseError> {
        let offset = match page {
            PinPage::At(offset) => offset,
            PinPage::Held(_) if self.pinned.is_empty() => return Ok(None),
            PinPage::Held(i) => self.pinned[i % self.pinned.len()].page.offset_bytes(),
        };
        let h = self.handle(handle)?;
        match h.file.get_page(offset) {
            Ok(page) => {
                let start = page.offset_bytes() as usize;
                check(offset < self.model.len() as u64, || {
                    format!("get_page({offset}) past the end succeeded")
                })?;
                check(
                    start <= offset as usize && offset as usize - start < page.len(),
                    || {
                        format!(
                            "get_page({offset}) gave the page at {start} of {} bytes",
                            page.len()
                        )
                    },
                )?;
                let bytes = self.model[start..].get(..page.len()).map(<[u8]>::to_vec);
                check(bytes.as_deref() == Some(&page[..]), || {
                    format!(
                        "get_page({offset}) differs from the model (page at {start} of {} bytes)",
                        page.len()
                    )
                })?;
                if self.pinned.len() == PINS_MAX {
                    self.unpin(0)?;
                }
                let viewed = start as u64..(start + page.len()) as u64;
                self.pinned.push(Pinned {
                    page,
                    bytes: bytes.expect("checked"),
                });
                Ok(Some(viewed))
            }
            Err(e) => {
                check(
                    offset >= self.model.len() as u64 && e.kind() == ErrorKind::UnexpectedEof,
                    || {
                        format!(
                            "get_page({offset}) in a file of {} bytes: {e}",
                            self.model.len()
                        )
                    },
                )?;
                Ok(None)
            }
        }
    }

    fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Write {
                handle,
                offset,
                len,
                seed,
            } => self.write(handle, offset, &write_data(seed, len))?,
            Op::WritePinned {
                handle,
                pin,
                at,
                len,
                seed,
            } => {
                // Pin the folio there now (a copy, if a write copied on write since the
                // view was taken): the write copies on write again.
                let page = match self.pinned.len() {
                    0 => PinPage::At(at),
                    _ => PinPage::Held(pin),
                };
                let offset = match self.pin(handle, page)? {
                    Some(view) => view.start + at % (view.end - view.start),
                    None => at,
                };
                self.write(handle, offset, &write_data(seed, len))?;
            }
            Op::Burst {
                handle,
                offset,
                count,
                len,
                seed,
            } => {
                for i in 0..count as u64 {
                    self.write(handle, offset, &write_data(seed ^ (2 * i), len))?;
                    let Some(view) = self.pin(handle, PinPage::At(offset))? else {
                        continue;
                    };
                    let room = (view.end - view.start).saturating_sub(BURST_RECORD_BYTES as u64);
                    let at = view.start + (i * BURST_RECORD_BYTES as u64) % (room + 1);
                    let record = write_data(seed ^ (2 * i + 1), BURST_RECORD_BYTES);
                    self.write(handle, at, &record)?;
                }
            }
            Op::Read {
                handle,
                offset,
                len,
            } => {
                let mut got = vec![0xA5u8; len];
                let h = self.handle(handle)?;
                let n = io_ok(h.file.read_at(&mut got, offset), || {
                    format!("read_at({offset}, {len})")
                })?;
                let want = self
                    .model
                    .get(offset as usize..)
                    .map_or(&[][..], |rest| &rest[..rest.len().min(len)]);
                check(n == want.len(), || {
                    format!(
                        "read_at({offset}, {len}) returned {n} bytes, the model {} (file of {})",
                        want.len(),
                        self.model.len()
                    )
                })?;
                check(got[..n] == *want, || {
                    format!(
                        "read_at({offset}, {len}) through a {:?} handle differs from the model first at byte {:?}",
                        self.handles[handle % self.handles.len()].access,
                        first_difference(&got[..n], want).map(|d| offset + d as u64)
                    )
                })?;
            }
            Op::Pin { handle, page } => {
                self.pin(handle, page)?;
            }
            Op::Unpin { pin } => {
                if !self.pinned.is_empty() {
                    self.unpin(pin % self.pinned.len())?;
                }
            }
            Op::SetLen { handle, len } => {
                check(self.journal.is_none(), || {
                    "set_len in a case with a syncer (module docs)".into()
                })?;
                let h = self.handle(handle)?;
                let result = h.file.set_len(len);
                match h.access {
                    Access::ReadOnly => check(result.is_err(), || {
                        "set_len through a read-only handle succeeded".into()
                    })?,
                    Access::ReadWrite => {
                        io_ok(result, || format!("set_len({len})"))?;
                        self.model.resize(len as usize, 0);
                    }
                }
            }
            Op::Sync { handle, kind } => {
                let i = self.handle_index(handle)?;
                io_ok(kind.run(self.cache(), &self.handles[i].file), || {
                    format!("{kind:?}")
                })?;
                match kind {
                    SyncKind::Range(offset, len) => {
                        // Its length is the model's, but dirty pages outside the range may
                        // be written back meanwhile, the tail block whole: up to the next
                        // 4 KiB, with zeros.
                        let disk = io_ok(std::fs::read(&self.path), || {
                            "read the file with std::fs".into()
                        })?;
                        let padded = self.model.len().next_multiple_of(PAGE_BYTES);
                        check(
                            (self.model.len()..=padded).contains(&disk.len())
                                && disk[self.model.len()..].iter().all(|&b| b == 0),
                            || {
                                format!(
                                    "after {kind:?} the file on disk has {} bytes, the model {}",
                                    disk.len(),
                                    self.model.len()
                                )
                            },
                        )?;
                        let start = (offset as usize).min(self.model.len());
                        let end = (offset.saturating_add(len) as usize).min(self.model.len());
                        check(disk[start..end] == self.model[start..end], || {
                            format!(
                                "after {kind:?} the file on disk differs from the model in the range first at byte {:?}",
                                first_difference(&disk[start..end], &self.model[start..end]).map(|d| start + d)
                            )
                        })?;
                    }
                    _ => {
                        self.check_disk(&format!("{kind:?}"))?;
                        self.check_clean(&format!("{kind:?}"))?;
                    }
                }
            }
            Op::Writeback {
                handle,
                offset,
                len,
            } => {
                let h = self.handle(handle)?;
                io_ok(h.file.writeback(offset, len), || {
                    format!("writeback({offset}, {len})")
                })?;
            }
            Op::DontNeed {
                handle,
                offset,
                len,
            } => {
                let h = self.handle(handle)?;
                io_ok(h.file.advise(offset, len, Advice::DontNeed), || {
                    format!("advise({offset}, {len}, DontNeed)")
                })?;
            }
            Op::WillNeed {
                handle,
                offset,
                len,
            } => {
                let h = self.handle(handle)?;
                let len = len.min(SPAN_BYTES);
                io_ok(h.file.advise(offset, len, Advice::WillNeed), || {
                    format!("advise({offset}, {len}, WillNeed)")
                })?;
            }
            Op::Open { access } => {
                if self.handles.len() < HANDLES_MAX {
                    self.open(access)?;
                }
            }
            Op::Close { handle } => {
                if !self.handles.is_empty() {
                    let i = handle % self.handles.len();
                    self.handles.remove(i);
                }
            }
            Op::ReopenCache { access } => {
                check(self.journal.is_none(), || {
                    "a new cache in a case with a syncer (module docs)".into()
                })?;
                self.unpin_all()?;
                self.handles.clear();
                // Dropping the cache writes back what is dirty: the file on disk is the
                // model then, as after a process exit with the kernel's page cache.
                drop(self.cache.take());
                self.check_disk("dropping the cache")?;
                self.cache = Some(self.config.build());
                self.open(access)?;
            }
        }
        self.check_pinned()
    }
}

/// A held view's bytes are those it was taken with.
fn check_view(view: &Pinned) -> Result<(), TestCaseError> {
    check(view.page[..] == view.bytes[..], || {
        format!(
            "the pinned page at {} ({} bytes) changed under its holder first at byte {:?}",
            view.page.offset_bytes(),
            view.page.len(),
            first_difference(&view.page, &view.bytes).map(|d| view.page.offset_bytes() + d as u64)
        )
    })
}

/// The syncer's side of a case (module docs).
struct Syncer<'a> {
    cache: &'a Cache,
    /// Its own handle.
    file: &'a File,
    path: &'a Path,
    journal: &'a Mutex<Journal>,
    plan: &'a SyncerPlan,
    /// Passed by both threads before they start.
    barrier: &'a Barrier,
    /// Set when the main thread's operations are done.
    ops_done: &'a AtomicBool,
    /// Counted after each sync.
    progress: &'a Progress,
}

impl Syncer<'_> {
    /// After the barrier, runs the plan's syncs until the operations are done and at least
    /// once through the plan, and after each checks the file on disk against the writes
    /// that had returned before it began, over `model`, the file's first bytes.
    fn run(&self, mut model: Vec<u8>) -> Result<(), String> {
        self.barrier.wait();
        let mut applied = 0;
        for (n, &kind) in self.plan.syncs.iter().cycle().enumerate() {
            let ops_done = self.ops_done.load(Ordering::Acquire);
            if n == SYNCER_SYNCS_MAX || (n >= self.plan.syncs.len() && ops_done) {
                break;
            }
            let returned = self.journal.lock().unwrap().returned;
            kind.run(self.cache, self.file)
                .map_err(|e| format!("the syncer's sync {n}, {kind:?}: {e}"))?;
            self.progress.step();
            let disk = common::read_direct(self.path)
                .map_err(|e| format!("reading the file with O_DIRECT: {e}"))?;
            let (settled, since) = {
                let journal = self.journal.lock().unwrap();
                (
                    journal.writes[applied..returned].to_vec(),
                    journal.writes[returned..].to_vec(),
                )
            };
            for (offset, bytes) in &settled {
                let (start, end) = (*offset as usize, *offset as usize + bytes.len());
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[start..end].copy_from_slice(bytes);
            }
            applied = returned;
            check_promised(&disk, &model, &since, kind.covers()).map_err(|e| {
                format!(
                    "the syncer's sync {n}, {kind:?}, begun after {returned} writes had returned: {e}"
                )
            })?;
            if self.plan.pause_us > 0 {
                std::thread::sleep(Duration::from_micros(self.plan.pause_us));
            }
        }
        Ok(())
    }
}

/// The pinner's side of a case (module docs).
struct Pinner<'a> {
    /// Its own handle, read-only.
    file: &'a File,
    plan: PinnerPlan,
    writing: &'a Writing,
    barrier: &'a Barrier,
    ops_done: &'a AtomicBool,
}

impl Pinner<'_> {
    /// After the barrier, until the operations are done: a view of the page being
    /// written, then of the next of the case's pages, and so on, each held for the plan's
    /// time, whose bytes must not change meanwhile (a writer copies on write around it).
    fn run(&self) -> Result<(), String> {
        self.barrier.wait();
        let pages = HOT_BYTES / PAGE_BYTES as u64;
        let mut page = 0;
        for n in 0u64.. {
            if self.ops_done.load(Ordering::Acquire) {
                break;
            }
            let offset = match n % 4 {
                0..=2 => self.writing.0.load(Ordering::Relaxed),
                _ => {
                    page = (page + 1) % pages;
                    page * PAGE_BYTES as u64
                }
            };
            let view = match self.file.get_page(offset) {
                Ok(view) => view,
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                    page = 0;
                    std::thread::yield_now();
                    continue;
                }
                Err(e) => return Err(format!("the pinner's get_page({offset}): {e}")),
            };
            let bytes = view.to_vec();
            match self.plan.hold_us {
                0 => std::thread::yield_now(),
                us => std::thread::sleep(Duration::from_micros(us)),
            }
            if view[..] != bytes[..] {
                return Err(format!(
                    "the pinner's view of the page at {} ({} bytes) changed while it held it, first at byte {:?}",
                    view.offset_bytes(),
                    view.len(),
                    first_difference(&view, &bytes).map(|d| view.offset_bytes() + d as u64)
                ));
            }
        }
        Ok(())
    }
}

/// `disk` holds, over `range`, every byte of `model` (the file as the writes a sync vouches
/// for left it), or the byte of a write issued since (`since`, which the disk may hold or
/// not); and is at least as long as `model` there.
fn check_promised(
    disk: &[u8],
    model: &[u8],
    since: &[(u64, Arc<[u8]>)],
    range: Range<u64>,
) -> Result<(), String> {
    let end = range.end.min(model.len() as u64) as usize;
    let start = (range.start.min(model.len() as u64) as usize).min(end);
    if disk.len() < end {
        return Err(format!(
            "the file on disk has {} bytes, the writes before the sync {}",
            disk.len(),
            model.len()
        ));
    }
    if disk[start..end] == model[start..end] {
        return Ok(());
    }
    let later = |b: usize| {
        since.iter().any(|(offset, bytes)| {
            let offset = *offset as usize;
            (offset..offset + bytes.len()).contains(&b) && bytes[b - offset] == disk[b]
        })
    };
    let stale: Vec<usize> = (start..end)
        .filter(|&b| disk[b] != model[b] && !later(b))
        .collect();
    match stale.first() {
        None => Ok(()),
        Some(&b) => Err(format!(
            "{} bytes on disk are neither what the writes before it left nor a later write's; the first at byte {b} (page {}): {:#04x} on disk, {:#04x} written ({} writes issued since)",
            stale.len(),
            b / PAGE_BYTES,
            disk[b],
            model[b],
            since.len()
        )),
    }
}

/// Runs one case: the initial file, the operations (with threads beside them, if
/// `beside`), then a final sync and the cache's drop, each leaving the model on disk.
fn run_case(
    config: Config,
    initial: Initial,
    ops: &[Op],
    beside: Option<&Beside>,
    progress: Arc<Progress>,
) -> Result<(), TestCaseError> {
    let dir = common::test_dir();
    let path = dir.path().join("data");
    let cache = config.build();
    let model = match initial {
        Initial::Existing(len) => {
            common::write_pattern_file(&path, SALT, len);
            common::pattern(SALT, 0, len as usize)
        }
        Initial::Created => Vec::new(),
    };
    let first = io_ok(
        cache.open_options().write(true).create(true).open(&path),
        || "create or open the file".into(),
    )?;
    let mut world = World {
        config,
        path,
        cache: Some(cache),
        handles: vec![Handle {
            file: first,
            access: Access::ReadWrite,
        }],
        pinned: Vec::new(),
        model,
        journal: beside.map(|_| Arc::default()),
        writing: Arc::default(),
        progress,
    };
    match beside {
        None => run_ops(&mut world, ops)?,
        Some(beside) => run_ops_beside(&mut world, ops, beside)?,
    }
    world.unpin_all()?;
    world.run(&Op::Sync {
        handle: 0,
        kind: SyncKind::All,
    })?;
    world.progress.step();
    world.handles.clear();
    drop(world.cache.take());
    world.check_disk("the end")?;
    drop(dir);
    Ok(())
}

fn run_ops(world: &mut World, ops: &[Op]) -> Result<(), TestCaseError> {
    ops.iter().enumerate().try_for_each(|(i, op)| {
        world
            .run(op)
            .map_err(|e| TestCaseError::fail(format!("operation {i}, {op:?}: {e}")))?;
        world.progress.step();
        Ok(())
    })
}

/// `run_ops` with `beside`'s threads beside them (module docs), each with its own handle;
/// they start together (a barrier) and stop once the operations are done.
fn run_ops_beside(world: &mut World, ops: &[Op], beside: &Beside) -> Result<(), TestCaseError> {
    let cache = world.cache().clone();
    let syncer_files = (0..beside.syncers.len())
        .map(|_| {
            io_ok(cache.open_options().write(true).open(&world.path), || {
                "open a syncer's handle".into()
            })
        })
        .collect::<Result<Vec<File>, _>>()?;
    let pinner_file = io_ok(cache.open(&world.path), || {
        "open the pinner's handle".into()
    })?;
    let (path, first_bytes) = (world.path.clone(), world.model.clone());
    let journal = world
        .journal
        .clone()
        .expect("a case with threads beside has a journal");
    let writing = world.writing.clone();
    let progress = world.progress.clone();
    let barrier = Barrier::new(1 + beside.syncers.len() + usize::from(beside.pinner.is_some()));
    let ops_done = AtomicBool::new(false);
    let (ops_result, beside_results) = std::thread::scope(|s| {
        let mut threads: Vec<_> = beside
            .syncers
            .iter()
            .zip(&syncer_files)
            .map(|(plan, file)| {
                let syncer = Syncer {
                    cache: &cache,
                    file,
                    path: &path,
                    journal: &journal,
                    plan,
                    barrier: &barrier,
                    ops_done: &ops_done,
                    progress: &progress,
                };
                let first_bytes = first_bytes.clone();
                s.spawn(move || syncer.run(first_bytes))
            })
            .collect();
        if let Some(plan) = beside.pinner {
            let pinner = Pinner {
                file: &pinner_file,
                plan,
                writing: &writing,
                barrier: &barrier,
                ops_done: &ops_done,
            };
            threads.push(s.spawn(move || pinner.run()));
        }
        barrier.wait();
        let ops_result = run_ops(world, ops);
        ops_done.store(true, Ordering::Release);
        let beside_results: Vec<Result<(), String>> = threads
            .into_iter()
            .map(|thread| {
                thread
                    .join()
                    .unwrap_or_else(|_| Err("a thread beside the operations panicked".into()))
            })
            .collect();
        (ops_result, beside_results)
    });
    beside_results
        .into_iter()
        .try_for_each(|result| result.map_err(TestCaseError::fail))?;
    ops_result
}

/// `run_case` on its own thread, failing if it completes no operation and no sync for
/// `CASE_STALL` (the thread is left behind: the test fails anyway).
fn run_case_timed(
    config: Config,
    initial: Initial,
    ops: Vec<Op>,
    beside: Option<Beside>,
) -> Result<(), TestCaseError> {
    let (tx, rx) = mpsc::channel();
    let described = format!("{config:?}, {initial:?}, {beside:?}");
    let progress = Arc::new(Progress::default());
    let theirs = progress.clone();
    let started = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(run_case(config, initial, &ops, beside.as_ref(), theirs));
    });
    let (mut seen, mut since) = (progress.steps(), Instant::now());
    loop {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(result) => return result,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(TestCaseError::fail(format!(
                    "the case panicked: {described}"
                )))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let steps = progress.steps();
        if steps != seen {
            (seen, since) = (steps, Instant::now());
        } else if since.elapsed() >= CASE_STALL {
            return Err(TestCaseError::fail(format!(
                "the case completed nothing for {CASE_STALL:?} (a hang), after {steps} operations and syncs in {:?}: {described}",
                started.elapsed()
            )));
        }
    }
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The cases with a syncer: no saved seeds (a failure depends on thread timing, a seed
/// would not replay it), and a short shrink (each step a run that may pass by chance).
fn synced_config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(SYNCED_CASES_DEFAULT),
        failure_persistence: None,
        max_shrink_iters: 64,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(CASES_DEFAULT), ..ProptestConfig::default() })]

    #[test]
    fn writes_reads_and_syncs_match_the_model_io_uring((config, initial, ops) in case(BackendKind::IoUring)) {
        run_case_timed(config, initial, ops, None)?;
    }

    #[test]
    fn writes_reads_and_syncs_match_the_model_pread((config, initial, ops) in case(BackendKind::Pread)) {
        run_case_timed(config, initial, ops, None)?;
    }
}

proptest! {
    #![proptest_config(synced_config())]

    #[test]
    fn concurrent_syncs_find_every_write_returned_before_them_on_disk_io_uring(
        (config, initial, ops, beside) in synced_case(BackendKind::IoUring)
    ) {
        run_case_timed(config, initial, ops, Some(beside))?;
    }

    #[test]
    fn concurrent_syncs_find_every_write_returned_before_them_on_disk_pread(
        (config, initial, ops, beside) in synced_case(BackendKind::Pread)
    ) {
        run_case_timed(config, initial, ops, Some(beside))?;
    }
}

// Regressions: what the model test (or reading the code it runs) found.

/// A dropped cache leaves every file it wrote at its logical length: writeback writes the
/// tail block whole (padding the file on disk to 4 KiB), and the cache's drop must cut
/// it back as a sync does (found by the model: `ReopenCache` after a write that was not
/// synced). So must the removal of a closed file's mapping: the next open of the file
/// learns its length from the disk.
#[test]
fn a_dropped_cache_or_a_forgotten_file_leaves_no_padded_tail() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    let cache = Cache::builder().capacity_bytes(4 << 20).build().unwrap();
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&path)
        .unwrap();
    file.write_at(&[7u8; 100], 0).unwrap();
    drop(file);
    drop(cache);
    let disk = std::fs::read(&path).unwrap();
    assert!(
        disk == [7u8; 100],
        "after the cache's drop the file has {} bytes",
        disk.len()
    );

    let cache = Cache::builder().capacity_bytes(4 << 20).build().unwrap();
    let file = cache.open_options().write(true).open(&path).unwrap();
    file.write_at(&[8u8; 50], 100).unwrap();
    // Written back (the tail block whole), not synced; then the page leaves the cache and
    // the last handle closes, so the mapping goes.
    file.writeback(0, u64::MAX).unwrap();
    let started = Instant::now();
    while cache.stats().dirty_pages + cache.stats().writeback_pages > 0 {
        assert!(started.elapsed() < CASE_STALL, "the writeback never ended");
        std::thread::sleep(Duration::from_millis(1));
    }
    file.advise(0, u64::MAX / 2, Advice::DontNeed).unwrap();
    drop(file);
    assert_eq!(cache.stats().mappings, 0, "the file was forgotten");
    let file = cache.open(&path).unwrap();
    assert_eq!(file.len(), 150, "a new mapping's length, from the disk");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 150);
}

/// `set_len` down keeps the large folio that straddles the new end; its dirty blocks past
/// the end are not written, and must leave the dirty budget all the same (found by the
/// model: two pages stayed "dirty" after a sync, and a cache with a small dirty limit
/// would throttle its writers forever).
#[test]
fn dirty_blocks_cut_off_by_set_len_leave_the_dirty_budget() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    common::write_pattern_file(&path, SALT, 1 << 20);
    let cache = Cache::builder().capacity_bytes(32 << 20).build().unwrap();
    let file = cache.open_options().write(true).open(&path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    file.read_at(&mut buf, 0).unwrap(); // readahead: large folios
    assert!(
        file.get_page(0).unwrap().len() > PAGE_BYTES,
        "a large folio holds byte 0"
    );
    file.write_at(&[1u8; 4096], 61_441).unwrap(); // blocks 15 and 16 of it
    file.set_len(1).unwrap();
    file.sync_all().unwrap();
    let s = cache.stats();
    assert_eq!((s.dirty_pages, s.writeback_pages), (0, 0), "{s:?}");
    assert_eq!(std::fs::read(&path).unwrap(), common::pattern(SALT, 0, 1));
}

/// A writer extends the file's size before its folio turns DIRTY (W4), and writeback
/// reads the size after taking the folio: before, a writeback that took an appended page
/// between the two dropped its blocks as "past the end" and cleaned it unwritten (lost
/// writes, and pages kept in the dirty budget forever; found reading the code the model
/// runs: this test failed in 3 runs of 4 before the fix).
#[test]
fn appends_racing_writeback_all_reach_the_disk() {
    let dir = common::test_dir();
    let path = dir.path().join("f");
    let cache = Cache::builder().capacity_bytes(64 << 20).build().unwrap();
    let file = std::sync::Arc::new(
        cache
            .open_options()
            .write(true)
            .create(true)
            .open(&path)
            .unwrap(),
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flusher = {
        let (file, stop) = (file.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                file.writeback(0, u64::MAX).unwrap();
            }
        })
    };
    let mut model = Vec::new();
    for i in 0..20_000u64 {
        let record = write_data(i, 4096);
        file.write_at(&record, model.len() as u64).unwrap();
        model.extend_from_slice(&record);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    flusher.join().unwrap();
    file.sync_data().unwrap();
    let disk = std::fs::read(&path).unwrap();
    assert_eq!(first_difference(&disk, &model), None, "appended bytes lost");
    let s = cache.stats();
    assert_eq!((s.dirty_pages, s.writeback_pages), (0, 0), "{s:?}");
}

/// A sync waits for a writeback that took its pages before it looked: a batch takes its
/// ticket before it takes any folio (B0). Before, a batch that had taken the folio but not
/// yet its ticket was neither walked nor waited for by the sync, which then flushed and
/// returned Ok with the page not on disk. The window is short: before the fix this
/// stress found 2 such syncs of 2,000 in one run, and 160 of 3,000 with a 1 ms pause put
/// in the window; it may pass on broken code, never fail on right code.
#[test]
fn a_sync_waits_for_the_writeback_that_took_its_pages() {
    use std::os::unix::fs::FileExt;
    let dir = common::test_dir();
    let path = dir.path().join("f");
    let pages = 64u64;
    common::write_pattern_file(&path, SALT, pages * PAGE_BYTES as u64);
    let cache = Cache::builder().capacity_bytes(16 << 20).build().unwrap();
    let file = std::sync::Arc::new(cache.open_options().write(true).open(&path).unwrap());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flusher = {
        let (file, stop) = (file.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                file.writeback(0, u64::MAX).unwrap();
            }
        })
    };
    let disk = std::fs::File::open(&path).unwrap();
    let mut stale = 0;
    for i in 0..2_000u64 {
        let offset = (i * 7 % pages) * PAGE_BYTES as u64;
        let record = write_data(i, PAGE_BYTES);
        file.write_at(&record, offset).unwrap();
        file.sync_data().unwrap();
        let mut got = vec![0u8; PAGE_BYTES];
        disk.read_exact_at(&mut got, offset).unwrap();
        stale += u32::from(got != record);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    flusher.join().unwrap();
    assert_eq!(
        stale, 0,
        "syncs that returned Ok with their page not on disk"
    );
}
