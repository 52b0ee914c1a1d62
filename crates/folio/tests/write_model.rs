//! Property test of the write side (issue 14, done-when 1; DESIGN.md §8) against a model:
//! the file is a `Vec<u8>`, and random sequences of operations run on both folio and the
//! model:
//!
//! - `write_at` at any offset (unaligned, in a hole past the end) of 1 B to ~300 KiB,
//!   through a writable handle (a read-only one must refuse it and change nothing);
//! - `read_at` through any handle, read-only or not, at any offset and length (up to
//!   3 MiB, so readahead brings large folios in that later writes overwrite in part):
//!   the bytes and the count, short at the end of the file, equal the model's;
//! - `get_page` (a pinned view, which the writers then copy on write around): its bytes
//!   equal the model's when taken and never change while it is held;
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
//! (default `CASES_DEFAULT`, 128: about 20 s for both in `--release` on a loaded 2-core
//! machine; `PROPTEST_CASES=2000` for a longer hunt). A case that does not finish within
//! `CASE_TIMEOUT` (a writer throttled forever, a sync that never returns) fails with its
//! configuration instead of hanging the run. Of 128 cases per backend (one run, counted),
//! about a quarter throttled their writers, a fifth evicted, 7% copied on write and 7%
//! forgot the file after its last close, and 12% still held a large folio at byte 0 at
//! their end.
//!
//! After the model, the regressions it found (and one found reading the code it runs),
//! each a test of its own that fails on the code before its fix.

mod common;

use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use folio::{Advice, BackendKind, Cache, File, PageRef, PAGE_BYTES};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// The initial file's salt (`common::pattern`); writes use their own data.
const SALT: u64 = 0x3a11;

/// The most handles open at once.
const HANDLES_MAX: usize = 4;

/// Offsets and lengths are drawn below this (the model stays a few MiB).
const SPAN_BYTES: u64 = 4 << 20;

/// How long one case may take before it counts as a hang.
const CASE_TIMEOUT: Duration = Duration::from_secs(60);

/// Cases per backend unless `PROPTEST_CASES` says otherwise.
const CASES_DEFAULT: u32 = 128;

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
    Read {
        handle: usize,
        offset: u64,
        len: usize,
    },
    /// `get_page(offset)`, held (replacing the one held before).
    Pin {
        handle: usize,
        offset: u64,
    },
    Unpin,
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

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 0..64u64 << 10,
        3 => 0..SPAN_BYTES,
        2 => (0..SPAN_BYTES / PAGE_BYTES as u64).prop_map(|p| p * PAGE_BYTES as u64),
        1 => (0..SPAN_BYTES / PAGE_BYTES as u64, 1..PAGE_BYTES as u64)
            .prop_map(|(p, back)| (p + 1) * PAGE_BYTES as u64 - back),
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

fn op() -> impl Strategy<Value = Op> {
    let handle = 0..HANDLES_MAX;
    let sync_kind = prop_oneof![
        2 => Just(SyncKind::Data),
        1 => Just(SyncKind::All),
        2 => (offset(), range_len()).prop_map(|(o, l)| SyncKind::Range(o, l)),
        1 => Just(SyncKind::AllFiles),
    ];
    prop_oneof![
        30 => (handle.clone(), offset(), write_len(), any::<u64>())
            .prop_map(|(handle, offset, len, seed)| Op::Write { handle, offset, len, seed }),
        24 => (handle.clone(), offset(), prop_oneof![1usize..64, 1usize..20_000, 1usize..3 << 20])
            .prop_map(|(handle, offset, len)| Op::Read { handle, offset, len }),
        3 => (handle.clone(), offset()).prop_map(|(handle, offset)| Op::Pin { handle, offset }),
        2 => Just(Op::Unpin),
        5 => (handle.clone(), prop_oneof![0..64u64 << 10, 0..SPAN_BYTES])
            .prop_map(|(handle, len)| Op::SetLen { handle, len }),
        8 => (handle.clone(), sync_kind).prop_map(|(handle, kind)| Op::Sync { handle, kind }),
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

fn case(backend: BackendKind) -> impl Strategy<Value = (Config, Initial, Vec<Op>)> {
    let config =
        (0..3usize, any::<bool>(), 2u64..16).prop_map(move |(size, racing, limit_pages)| {
            let (capacity_bytes, dirty_limit_bytes) = match size {
                0 => (
                    64 * PAGE_BYTES as u64,
                    Some(limit_pages * PAGE_BYTES as u64),
                ),
                1 => (4 << 20, Some(64 * PAGE_BYTES as u64)),
                _ => (32 << 20, None),
            };
            // Derived from the values drawn (not drawn itself), so that the saved seeds
            // still replay their cases: the small cache writes behind every 2 pages (or
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
        });
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
    (config, initial, ops)
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

/// folio's side and the model, as a case runs.
struct World {
    config: Config,
    path: PathBuf,
    /// `None` only while it is being replaced.
    cache: Option<Cache>,
    handles: Vec<Handle>,
    /// A pinned view and its bytes when it was taken (dropped before its handle's cache).
    pinned: Option<(PageRef, Vec<u8>)>,
    model: Vec<u8>,
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

    /// Handle `i` (modulo the handles open); opens a writable one if none is.
    fn handle(&mut self, i: usize) -> Result<&Handle, TestCaseError> {
        if self.handles.is_empty() {
            self.open(Access::ReadWrite)?;
        }
        Ok(&self.handles[i % self.handles.len()])
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

    fn check_pinned(&self) -> Result<(), TestCaseError> {
        if let Some((page, bytes)) = &self.pinned {
            check(page[..] == bytes[..], || {
                format!(
                    "the pinned page at {} changed under its holder",
                    page.offset_bytes()
                )
            })?;
        }
        Ok(())
    }

    fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Write {
                handle,
                offset,
                len,
                seed,
            } => {
                let data = write_data(seed, len);
                let h = self.handle(handle)?;
                let result = h.file.write_at(&data, offset);
                match h.access {
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
                        let end = offset as usize + len;
                        if self.model.len() < end {
                            self.model.resize(end, 0);
                        }
                        self.model[offset as usize..end].copy_from_slice(&data);
                    }
                }
                let len_now = self.handle(handle)?.file.len();
                check(len_now == self.model.len() as u64, || {
                    format!("after write_at({offset}, {len}) the file says {len_now} bytes, the model {}", self.model.len())
                })?;
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
            Op::Pin { handle, offset } => {
                self.pinned = None;
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
                        check(
                            self.model.get(start..start + page.len()) == Some(&page[..]),
                            || {
                                format!("get_page({offset}) differs from the model (page at {start} of {} bytes)", page.len())
                            },
                        )?;
                        let bytes = page.to_vec();
                        self.pinned = Some((page, bytes));
                    }
                    Err(e) => check(
                        offset >= self.model.len() as u64 && e.kind() == ErrorKind::UnexpectedEof,
                        || {
                            format!(
                                "get_page({offset}) in a file of {} bytes: {e}",
                                self.model.len()
                            )
                        },
                    )?,
                }
            }
            Op::Unpin => {
                self.check_pinned()?;
                self.pinned = None;
            }
            Op::SetLen { handle, len } => {
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
                let file = &self.handle(handle)?.file;
                let result = match kind {
                    SyncKind::Data => file.sync_data(),
                    SyncKind::All => file.sync_all(),
                    SyncKind::Range(offset, len) => file.sync_range(offset, len),
                    SyncKind::AllFiles => self.cache().sync_all_files(),
                };
                io_ok(result, || format!("{kind:?}"))?;
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
                self.check_pinned()?;
                self.pinned = None;
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

/// Runs one case: the initial file, the operations, then a final sync and the cache's
/// drop, each leaving the model on disk.
fn run_case(config: Config, initial: Initial, ops: &[Op]) -> Result<(), TestCaseError> {
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
        pinned: None,
        model,
    };
    for (i, op) in ops.iter().enumerate() {
        world
            .run(op)
            .map_err(|e| TestCaseError::fail(format!("operation {i}, {op:?}: {e}")))?;
    }
    world.pinned = None;
    world.run(&Op::Sync {
        handle: 0,
        kind: SyncKind::All,
    })?;
    world.handles.clear();
    drop(world.cache.take());
    world.check_disk("the end")?;
    drop(dir);
    Ok(())
}

/// `run_case` on its own thread, failing if it does not finish within `CASE_TIMEOUT`
/// (the thread is left behind: the test fails anyway).
fn run_case_timed(config: Config, initial: Initial, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let (tx, rx) = mpsc::channel();
    let described = format!("{config:?}, {initial:?}");
    std::thread::spawn(move || {
        let _ = tx.send(run_case(config, initial, &ops));
    });
    match rx.recv_timeout(CASE_TIMEOUT) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(TestCaseError::fail(format!(
            "the case did not finish within {CASE_TIMEOUT:?} (a hang): {described}"
        ))),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(TestCaseError::fail(format!(
            "the case panicked: {described}"
        ))),
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(CASES_DEFAULT)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn writes_reads_and_syncs_match_the_model_io_uring((config, initial, ops) in case(BackendKind::IoUring)) {
        run_case_timed(config, initial, ops)?;
    }

    #[test]
    fn writes_reads_and_syncs_match_the_model_pread((config, initial, ops) in case(BackendKind::Pread)) {
        run_case_timed(config, initial, ops)?;
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
    let started = std::time::Instant::now();
    while cache.stats().dirty_pages + cache.stats().writeback_pages > 0 {
        assert!(
            started.elapsed() < CASE_TIMEOUT,
            "the writeback never ended"
        );
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
