//! Writeback (DESIGN.md §8): finding a file's dirty folios through the index's marks,
//! writing their dirty blocks as large merged O_DIRECT writes, the writes' completions,
//! the data-integrity sync, and the background thread that writes back expired and
//! excess dirty data.
//!
//! # Protocol (with the write protocol in `file::write` and the block mask in `dirty`)
//!
//! B1. Take the batch's in-flight ticket (`InFlight::begin`). Then, under the file's
//!     index lock, walk the folios marked `Dirty` (background, or a range) or `Towrite`
//!     (a sync, which first tags `Dirty` as `Towrite` over its range:
//!     `IndexWriteGuard::tag_range`, so a writer that keeps dirtying the file cannot make
//!     it run forever). For each, one CAS DIRTY -> WRITEBACK (`try_start_writeback`). A
//!     writer's LOCKED makes it fail: background writeback skips the folio, a sync waits
//!     for the writer's copy and tries again.
//! B2. Still under the lock: take the folio's dirty blocks (`BlockMask::take`), clear both
//!     marks. Drop the lock. Merge the blocks of the whole batch, in index order, into
//!     writes of at most `IO_BYTES_MAX` and submit them, under the batch's ticket, through
//!     the backend (a batch that took nothing gives its ticket back). No lock is held
//!     across the I/O.
//! B3. When the batch's last write completes: blocks that failed get their bits back and
//!     the folio its `Dirty` mark, then `end_writeback` clears WRITEBACK (setting DIRTY
//!     again in the same step if any block failed), waiters are woken; the blocks written
//!     leave the dirty budget; a failure is recorded in the file's error sequence.
//!
//! Why the ticket comes first: a sync waits for every ticket handed out before it has
//! walked the file (`InFlight::wait_through`). A batch that took a folio before that walk
//! (so that the walk no longer finds it) took its ticket earlier still, so the sync waits
//! for its write. With the ticket taken after the walk, a sync could run between the two,
//! find nothing to write or wait for, flush and return Ok before the write completed
//! (found by `tests/write_simulation.rs`; regression test
//! `a_sync_waits_for_a_writeback_that_took_its_folios_before_it`).
//!
//! Why no update is lost: a writer changes a folio's bytes only under LOCKED taken by a
//! CAS that refuses WRITEBACK, and B1's CAS refuses LOCKED, so the device never reads
//! bytes that change during the write, and a write that comes after B1 sets DIRTY again
//! (and the mark), which the next writeback finds. A folio is never clean and unwritten:
//! DIRTY goes only with WRITEBACK set, and WRITEBACK goes only with the bytes on the
//! device or DIRTY back; the only blocks dropped unwritten lie past the end of the file,
//! whose size B2 reads after its CAS saw DIRTY (a writer extends the size before it sets
//! DIRTY, so its new blocks are never past it). Model-checked in `tests/loom_models.rs` (`write_vs_writeback_*`).
//!
//! Errors (better than the kernel): a failed write keeps its data dirty and readable, and
//! every handle's next sync reports it once (`errseq`). After `WRITEBACK_FAILURES_MAX`
//! failed batches in a row the file is given up: its dirty state is discarded (the data
//! stays cached and readable until evicted), its writes and syncs fail with the errno, so
//! memory never fills with pages that cannot be written.
//!
//! Protection: the index lock for B1-B2 and for B3's marks; the state word for the rest.
//!
//! Limits: a batch takes at most `BATCH_PAGES_MAX` pages (then the walk goes on from
//! where it stopped).

use std::fs::File as StdFile;
use std::io;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use crate::dirty::{BlockMask, Blocks, WRITEBACK_FAILURES_MAX};
use crate::index::Mark;
use crate::io::{sync, Backend, Completion, FlushKind, FrameBuf, IoRequest, Op, IO_BYTES_MAX};
use crate::mapping::Mapping;
use crate::pagecache::Core;
use crate::refcount::Redirty;
use crate::stats;
use crate::types::{FrameId, Order, PageIndex, PAGE_BYTES};
use crate::wait;

/// Pages one batch takes at most (32 MiB): a batch's folios stay under writeback until
/// its last write completes.
const BATCH_PAGES_MAX: u64 = 8192;

/// How often the background thread looks for expired dirty files.
const BACKGROUND_PERIOD: Duration = Duration::from_millis(100);

/// Which folios a writeback takes (B1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Take {
    /// Those dirty now; a folio a writer holds is skipped (background, `File::writeback`).
    Dirty,
    /// Those a sync tagged; a folio a writer holds is waited for.
    Tagged,
}

/// A folio of a batch, and the blocks it writes.
struct BatchFolio {
    frame: FrameId,
    order: Order,
    head: PageIndex,
    blocks: Blocks,
}

/// One batch in flight (B3 runs when `remaining` reaches 0).
struct Batch {
    core: Arc<Core>,
    mapping: Arc<Mapping>,
    ticket: u64,
    folios: Vec<BatchFolio>,
    /// Per folio, the blocks whose write failed, and the errno.
    failed: Mutex<(Vec<Blocks>, i32)>,
    remaining: AtomicUsize,
}

/// One write of a batch: consecutive blocks, maybe of several folios.
struct Run {
    offset_bytes: u64,
    bufs: Vec<FrameBuf>,
    /// (folio's place in the batch, its first block here, blocks), in file order.
    parts: Vec<(usize, u64, u64)>,
}

/// Starts writeback of `mapping`'s folios in `[start, end)` that `take` says. Returns
/// without waiting for the writes; the file's `in_flight` tickets say when they end.
///
/// Context: no lock held; takes the index lock per batch. `Take::Tagged` may sleep while a
/// writer finishes its copy.
pub(crate) fn start(
    core: &Arc<Core>,
    backend: &dyn Backend,
    mapping: &Arc<Mapping>,
    start: PageIndex,
    end: PageIndex,
    take: Take,
) {
    let Some(fd) = mapping.write.fd() else {
        return; // never opened for writing: nothing can be dirty
    };
    let mark = match take {
        Take::Dirty => Mark::Dirty,
        Take::Tagged => Mark::Towrite,
    };
    let in_flight = &mapping.write.in_flight;
    let mut from = start;
    loop {
        // The ticket before the folios (B1): a sync that finds no folio to take because
        // this batch took it finds this batch's ticket to wait for.
        let ticket = in_flight.begin();
        let (batch, locked, next) = collect(core, mapping, from, end, mark);
        if batch.is_empty() {
            in_flight.end(ticket);
        } else {
            submit(core, backend, mapping, &fd, batch, ticket);
        }
        match next {
            Some(next) => from = next,
            None if take == Take::Tagged && !locked.is_empty() => {
                // Writers hold these: their copies are short. Wait, then walk again.
                for frame in locked {
                    wait::wait_unlocked(core.mem.arena.meta(frame));
                }
                from = start;
            }
            None => return,
        }
    }
}

/// B1-B2 for one batch from `from`: the folios taken, those a writer held (LOCKED), and
/// where the next batch starts (`None`: the walk reached `end`).
fn collect(
    core: &Core,
    mapping: &Mapping,
    from: PageIndex,
    end: PageIndex,
    mark: Mark,
) -> (Vec<BatchFolio>, Vec<FrameId>, Option<PageIndex>) {
    let arena = &core.mem.arena;
    let mut w = mapping.index.lock();
    let mut found = Vec::new();
    let mut pages = 0;
    let mut next = None;
    let _ = mapping.index.marked_walk(from, end, mark, &mut |folio| {
        if pages >= BATCH_PAGES_MAX {
            next = Some(folio.head.max(from));
            return ControlFlow::Break(());
        }
        pages += folio.order.pages();
        found.push(folio);
        ControlFlow::Continue(())
    });
    let mut batch = Vec::with_capacity(found.len());
    let mut locked = Vec::new();
    let mut dropped_pages = 0;
    for folio in found {
        let meta = arena.meta(folio.frame);
        if !meta.state.try_start_writeback() {
            if meta.state.load().is_locked() {
                locked.push(folio.frame);
            }
            continue;
        }
        // Blocks at or past the end of the file are not written (truncation zeroed them).
        // The size is read after the CAS that saw DIRTY: a writer extends the size
        // before it sets DIRTY (`file::write`), so a block it wrote past the old end is
        // below the size read here. (Read before the walk, a page appended meanwhile
        // lost its block and was left clean, never written.)
        let size_pages = PageIndex::ceil(mapping.size_bytes());
        let taken = BlockMask::of(arena, folio.frame, folio.order).take();
        let blocks = taken.below(size_pages.0.saturating_sub(folio.head.0));
        // Their dirty charge goes with them.
        dropped_pages += taken.count() - blocks.count();
        w.clear_mark(folio.head, Mark::Dirty);
        w.clear_mark(folio.head, Mark::Towrite);
        batch.push(BatchFolio {
            frame: folio.frame,
            order: folio.order,
            head: folio.head,
            blocks,
        });
    }
    drop(w);
    core.mem.dirty.uncharge(dropped_pages);
    (batch, locked, next)
}

/// B2's submission under `ticket` (taken in B1): the batch's blocks merged into runs, one
/// write per run.
fn submit(
    core: &Arc<Core>,
    backend: &dyn Backend,
    mapping: &Arc<Mapping>,
    fd: &Arc<StdFile>,
    folios: Vec<BatchFolio>,
    ticket: u64,
) {
    let arena = &core.mem.arena;
    let mut runs: Vec<Run> = Vec::new();
    let mut taken_pages = 0;
    for (i, folio) in folios.iter().enumerate() {
        taken_pages += folio.blocks.count();
        for (first, count) in folio.blocks.runs() {
            let page = folio.head.add(first);
            let buf = arena.io_buf_pages(folio.frame, folio.order, first, count);
            let bytes = count as usize * PAGE_BYTES;
            match runs.last_mut() {
                Some(run)
                    if run.offset_bytes + run.len_bytes() as u64 == page.offset_bytes()
                        && run.len_bytes() + bytes <= IO_BYTES_MAX =>
                {
                    run.bufs.push(buf);
                    run.parts.push((i, first, count));
                }
                _ => runs.push(Run {
                    offset_bytes: page.offset_bytes(),
                    bufs: vec![buf],
                    parts: vec![(i, first, count)],
                }),
            }
        }
    }
    core.mem.dirty.note_writeback(taken_pages, true);
    let counters = &core.mem.counters;
    stats::add(&counters.writeback_requests, runs.len() as u64);
    let batch = Arc::new(Batch {
        core: core.clone(),
        mapping: mapping.clone(),
        ticket,
        failed: Mutex::new((vec![Blocks::default(); folios.len()], 0)),
        remaining: AtomicUsize::new(runs.len()),
        folios,
    });
    if runs.is_empty() {
        // Every taken block lay past the end of the file: nothing to write.
        batch.finish();
        return;
    }
    let requests = runs
        .into_iter()
        .map(|run| {
            let batch = batch.clone();
            let file = fd.clone();
            let (offset, bufs) = (run.offset_bytes, run.bufs.clone());
            IoRequest::write(
                fd.clone(),
                offset,
                bufs,
                Completion::new(move |result| batch.run_done(&file, run, result)),
            )
        })
        .collect();
    backend.submit(requests);
}

impl Run {
    fn len_bytes(&self) -> usize {
        self.bufs.iter().map(FrameBuf::len_bytes).sum()
    }
}

impl Batch {
    /// One run's write completed with `result`: finish a short write synchronously, record
    /// what failed; the last run finishes the batch (B3).
    ///
    /// Context: a backend thread (or the submitter's); no lock held; may block in
    /// `pwritev` (a short write's rest).
    fn run_done(&self, file: &StdFile, run: Run, result: io::Result<usize>) {
        let len = run.len_bytes();
        let result = result.and_then(|n| finish_short_write(file, &run, n.min(len)));
        let written = match result {
            Ok(n) => n,
            Err(ref e) => {
                let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
                failed.1 = e.raw_os_error().unwrap_or(libc::EIO);
                0
            }
        };
        let counters = &self.core.mem.counters;
        stats::add(&counters.writeback_bytes, written as u64);
        if written < len {
            if result.is_ok() {
                // No byte more could be written and no error said why: the device is full.
                let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
                failed.1 = libc::ENOSPC;
            }
            let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
            let mut at = 0u64;
            let written_blocks = (written / PAGE_BYTES) as u64;
            for &(i, first, count) in &run.parts {
                let bad_from = written_blocks.saturating_sub(at).min(count);
                if bad_from < count {
                    let bad = Blocks::range(first + bad_from, count - bad_from);
                    failed.0[i] = failed.0[i].union(&bad);
                }
                at += count;
            }
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.finish();
        }
    }

    /// B3 (module docs).
    fn finish(&self) {
        let core = &self.core;
        let arena = &core.mem.arena;
        let write = &self.mapping.write;
        let (failed, errno) = std::mem::take(&mut *self.failed.lock().unwrap_or_else(|e| e.into_inner()));
        let failed_any = failed.iter().any(|b| !b.is_empty());
        if failed_any {
            let mut w = self.mapping.index.lock();
            for (folio, bad) in self.folios.iter().zip(&failed) {
                if !bad.is_empty() {
                    BlockMask::of(arena, folio.frame, folio.order).restore(bad);
                    w.set_mark(folio.head, Mark::Dirty);
                }
            }
        }
        let mut cleaned = 0;
        let mut taken = 0;
        for (folio, bad) in self.folios.iter().zip(&failed) {
            let meta = arena.meta(folio.frame);
            taken += folio.blocks.count();
            let redirty = if bad.is_empty() {
                Redirty::No
            } else {
                Redirty::Yes
            };
            cleaned += folio.blocks.minus(bad).count();
            meta.state.end_writeback(redirty);
            wait::wake_all(meta);
        }
        core.mem.dirty.note_writeback(taken, false);
        core.mem.dirty.uncharge(cleaned);
        let counters = &core.mem.counters;
        stats::add(&counters.pages_written_back, cleaned);
        if failed_any {
            stats::bump(&counters.writeback_errors);
            write.errseq.record(errno);
            let failures = write.failures.fetch_add(1, Ordering::AcqRel) + 1;
            if failures >= WRITEBACK_FAILURES_MAX {
                give_up(core, &self.mapping, errno);
            } else {
                core.dirty_files.note_dirty(&self.mapping);
            }
        } else {
            write.failures.store(0, Ordering::Release);
        }
        write.in_flight.end(self.ticket);
    }
}

/// Completes a write that moved `n` of its bytes by writing the rest on this thread.
/// Returns the bytes written in all: short only if the file system took no more (full).
fn finish_short_write(file: &StdFile, run: &Run, n: usize) -> io::Result<usize> {
    let len = run.len_bytes();
    let mut done = n;
    while done < len {
        let now = sync::transfer(file, Op::Write, run.offset_bytes, &run.bufs, done)?;
        if now == done {
            break;
        }
        done = now;
    }
    Ok(done)
}

/// A file whose writes keep failing is given up (module docs): its dirty state is
/// discarded, its writes and syncs fail with `errno` from now on.
///
/// Context: no lock held; takes the index lock.
fn give_up(core: &Core, mapping: &Mapping, errno: i32) {
    mapping
        .write
        .failed_errno
        .compare_exchange(0, errno.max(1), Ordering::AcqRel, Ordering::Acquire)
        .ok();
    let arena = &core.mem.arena;
    let mut w = mapping.index.lock();
    let mut found = Vec::new();
    let _ = mapping.index.marked_walk(
        PageIndex(0),
        PageIndex(u64::MAX >> 12),
        Mark::Dirty,
        &mut |folio| {
            found.push(folio);
            ControlFlow::Continue(())
        },
    );
    let mut discarded = 0;
    for folio in found {
        let meta = arena.meta(folio.frame);
        let state = meta.state.load();
        if state.is_writeback() || state.is_locked() {
            continue; // its own completion (or the writer's next write) sees the failure
        }
        let pages = BlockMask::of(arena, folio.frame, folio.order).peek().count();
        if meta.state.discard_dirty() {
            discarded += pages;
        }
        w.clear_mark(folio.head, Mark::Dirty);
        w.clear_mark(folio.head, Mark::Towrite);
    }
    drop(w);
    core.mem.dirty.uncharge(discarded);
}

/// A data-integrity sync of `[start, end)` (B1 with `Take::Tagged`): tag, write what was
/// tagged, wait for it and for every writeback of the file submitted before, then make
/// the file's size right and flush with `kind`. The caller checks the error sequence.
///
/// Context: no lock held; sleeps until the writes and the flush complete.
pub(crate) fn sync(
    core: &Arc<Core>,
    backend: &dyn Backend,
    mapping: &Arc<Mapping>,
    start: PageIndex,
    end: PageIndex,
    kind: FlushKind,
) {
    let Some(fd) = mapping.write.fd() else {
        return;
    };
    mapping
        .index
        .lock()
        .tag_range(start, end, Mark::Dirty, Mark::Towrite);
    self::start(core, backend, mapping, start, end, Take::Tagged);
    let write = &mapping.write;
    write.in_flight.wait_through(write.in_flight.last());
    {
        let _writer = write.lock_writer();
        if let Err(e) = trim_to_size(mapping, &fd) {
            write.errseq.record(e.raw_os_error().unwrap_or(libc::EIO));
        }
    }
    if let Err(e) = flush(backend, &fd, kind) {
        write.errseq.record(e.raw_os_error().unwrap_or(libc::EIO));
    }
}

/// Gives the file on disk its logical size, as writers leave it: writeback writes the tail
/// block whole, which carries the file past it (to a multiple of 4 KiB), and a `set_len`
/// may have failed. A sync does this before its flush; so must anything after which the
/// logical size is forgotten (a written file's mapping leaving the table, the cache's
/// drop), else the file keeps zeros past its end and the next open reads them.
///
/// Context: the caller holds the file's writer lock (writers extend the size under it);
/// `fstat`, and `ftruncate` if the lengths differ.
pub(crate) fn trim_to_size(mapping: &Mapping, fd: &StdFile) -> io::Result<()> {
    let size = mapping.size_bytes();
    if fd.metadata()?.len() != size {
        sync::set_len(fd, size)?;
    }
    Ok(())
}

/// A flush of `fd` through the backend (the fault backend's power model must see it),
/// waited for.
///
/// Context: no lock held; sleeps until the device has flushed.
fn flush(backend: &dyn Backend, fd: &Arc<StdFile>, kind: FlushKind) -> io::Result<()> {
    let (tx, rx) = mpsc::sync_channel(1);
    backend.submit_waited(vec![IoRequest::flush(
        fd.clone(),
        kind,
        Completion::new(move |result| {
            let _ = tx.send(result.map(|_| ()));
        }),
    )]);
    rx.recv()
        .unwrap_or_else(|_| Err(io::Error::other("folio: a flush was dropped unfinished")))
}

/// The background writeback thread's body: every `BACKGROUND_PERIOD` (or when woken),
/// writes back every dirty file while the cache is above the background threshold, and
/// otherwise the files dirty for longer than the expiry. Returns when the cache stops.
///
/// Context: its own thread ("folio-writeback").
pub(crate) fn background(core: Arc<Core>, backend: Arc<dyn Backend>) {
    while core.dirty_files.wait(BACKGROUND_PERIOD) {
        write_back_due(&core, &*backend);
    }
}

/// One pass of the background thread (and of the cache's final flush with `everything`).
pub(crate) fn write_back_due(core: &Arc<Core>, backend: &dyn Backend) {
    for mapping in core.dirty_files.due(core.mem.dirty.over_background()) {
        start(
            core,
            backend,
            &mapping,
            PageIndex(0),
            PageIndex(u64::MAX >> 12),
            Take::Dirty,
        );
        core.dirty_files.requeue_if_dirty(&mapping);
    }
}

/// Writes back every dirty page of the cache and waits for it (no flush), then gives every
/// written file its logical size (`trim_to_size`): the cache's last act, so that dropping
/// it loses nothing a process exit would not. A file that cannot be cut stays as it is:
/// no handle is left to report the error to.
///
/// Context: no lock held (and no handle left: nobody holds a writer lock); sleeps until
/// the writes complete.
pub(crate) fn write_back_all(core: &Arc<Core>, backend: &dyn Backend) {
    let (start_page, end_page) = (PageIndex(0), PageIndex(u64::MAX >> 12));
    for mapping in core.dirty_files.all() {
        mapping
            .index
            .lock()
            .tag_range(start_page, end_page, Mark::Dirty, Mark::Towrite);
        start(core, backend, &mapping, start_page, end_page, Take::Tagged);
        let write = &mapping.write;
        write.in_flight.wait_through(write.in_flight.last());
    }
    for mapping in core.mappings.all() {
        if let Some(fd) = mapping.write.fd().filter(|_| mapping.write.is_written()) {
            let _writer = mapping.write.lock_writer();
            let _ = trim_to_size(&mapping, &fd);
        }
    }
}
