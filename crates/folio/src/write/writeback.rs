//! Writeback (DESIGN.md §8): finding a file's dirty folios through the index's marks,
//! writing their dirty blocks as large merged O_DIRECT writes, the writes' completions,
//! and giving up a file that keeps failing. The data-integrity sync that drives it is
//! `write::integrity`'s; the thread that writes back expired and excess dirty data,
//! `write::thread`'s.
//!
//! # Protocol (with the write protocol in `write::into_folio` and the block mask in
//! `write::mask`)
//!
//! B0. Take the batch's ticket (`InFlight::begin`), before any folio: a sync waits for
//!     every ticket up to the last one when it has walked, so a batch that took a folio
//!     the sync would have taken is one it waits for.
//! B1. Under the file's index lock, walk the folios marked `Dirty` (background, or a
//!     range) or `Towrite` (a sync, which first tags `Dirty` as `Towrite` over its range:
//!     `IndexWriteGuard::tag_range`, so a writer that keeps dirtying the file cannot make
//!     it run forever). For each, DIRTY -> WRITEBACK by a CAS loop (`try_start_writeback`). A
//!     writer's LOCKED makes it fail: background writeback skips the folio, a sync waits
//!     for the writer's copy and tries again.
//! B2. Still under the lock: take the folio's dirty blocks (`BlockMask::take`), clear both
//!     marks. Drop the lock. Merge the blocks of the whole batch, in index order, into
//!     writes of at most `IO_BYTES_MAX` and submit them, under the batch's ticket,
//!     through the backend. No lock is held across the I/O. Dirty blocks at or past the
//!     end of the file are not written; their pages leave the dirty budget here.
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
//! Why a sync re-walks what is still tagged after its wait: under the background
//! threshold, the writeback thread leaves dirty the block that the end of the file cuts
//! of a folio no sync tagged (no padding on disk before a sync; `Selection::Background`). When it took the folio before a sync tagged it, the sync's walk finds the folio
//! under writeback and waits for that batch, which does not write the tail. So the folio
//! is still tagged after the wait, and the sync takes it then (`wait_for_tagged`; the
//! cache's final writeback does the same for the files it tagged). A folio that is already
//! tagged is written whole by the background (found by `tests/write_model.rs`: the file
//! differed from the model at its last page after `sync_all`; the seed is in
//! `write_model.proptest-regressions`).
//!
//! Why no update is lost: a writer changes a folio's bytes only under LOCKED taken by a
//! CAS that refuses WRITEBACK, and B1's CAS refuses LOCKED, so the device never reads
//! bytes that change during the write, and a write that comes after B1 sets DIRTY again
//! (and the mark), which the next writeback finds. A folio is never clean and unwritten:
//! DIRTY goes only with WRITEBACK set, and WRITEBACK goes only with the bytes on the
//! device or DIRTY back. Model-checked in `tests/loom_models.rs` (`write_vs_writeback*`:
//! the device never reads a block a writer copies into, and every block ends on disk or
//! dirty, in its mask and marked; `truncation_vs_writeback*`, `dirty_folio_vs_reclaim_*`).
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
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::mask::{BlockMask, Blocks};
use super::state::WRITEBACK_FAILURES_MAX;
use crate::index::{Mark, MarkedFolio};
use crate::io::{sync, Backend, Completion, FrameBuf, FrameBufs, IoRequest, Op, IO_BYTES_MAX};
use crate::mapping::Mapping;
use crate::pagecache::Core;
use crate::refcount::Redirty;
use crate::stats;
use crate::types::{FrameId, Order, PageIndex, PAGE_BYTES};
use crate::wait;

/// Pages one batch takes at most (32 MiB): a batch's folios stay under writeback until
/// its last write completes.
const BATCH_PAGES_MAX: u64 = 8192;

/// Which folios a writeback takes (B1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Selection {
    /// Those dirty now; a folio a writer holds is skipped (`File::writeback`).
    Dirty,
    /// As `Dirty`, but the block the end of the file cuts stays dirty (the writeback
    /// thread: no padding appears on disk that no one asked for; `collect`).
    Background,
    /// Those dirty when the call begins: `start` tags them `Towrite` first (a sync); a
    /// folio a writer holds is waited for.
    Tagged,
}

/// A folio of a batch, and the blocks it writes.
struct BatchFolio {
    frame: FrameId,
    order: Order,
    head: PageIndex,
    blocks: Blocks,
    /// Dirty blocks this writeback left in the folio (the block the end of the file cuts,
    /// for a sync): the folio stays dirty.
    keeps: Blocks,
    /// Its pages' marks in the domain (mapping/domain.rs, A4), read once the folio was
    /// under writeback: released when it ends clean (docs/sharing.md "Writes seen across
    /// processes", W3).
    marks: Vec<(PageIndex, u64)>,
}

/// One batch in flight (B3 runs when `remaining` reaches 0).
struct Batch {
    core: Arc<Core>,
    mapping: Arc<Mapping>,
    ticket: u64,
    folios: Vec<BatchFolio>,
    failed: Mutex<Failed>,
    /// Per folio, its runs not completed yet.
    pending: Vec<AtomicU32>,
    remaining: AtomicUsize,
}

/// One write of a batch: consecutive blocks, maybe of several folios.
struct Run {
    offset_bytes: u64,
    bufs: FrameBufs,
    /// Its folios' blocks, in file order.
    parts: Vec<Part>,
}

/// Of a run, the consecutive blocks of one folio of the batch.
#[derive(Clone, Copy, Debug)]
struct Part {
    /// The folio's place in the batch.
    folio: usize,
    /// Its first block in this run.
    first: u64,
    count: u64,
}

/// What a batch's writes failed to write: per folio, the blocks, and the last errno.
#[derive(Debug)]
struct Failed {
    blocks: Vec<Blocks>,
    errno: i32,
}

/// Starts writeback of `mapping`'s folios in `[start, end)` that `take` says. Returns
/// without waiting for the writes; the file's `in_flight` tickets say when they end.
///
/// Context: no lock held; takes the index lock per batch. `Selection::Tagged` may sleep while a
/// writer finishes its copy.
pub(crate) fn start(
    core: &Arc<Core>,
    backend: &dyn Backend,
    mapping: &Arc<Mapping>,
    start: PageIndex,
    end: PageIndex,
    take: Selection,
) {
    let Some(fd) = mapping.write.fd() else {
        return; // never opened for writing: nothing can be dirty
    };
    if take == Selection::Tagged {
        // What is dirty now, and nothing dirtied later (module docs, B1).
        mapping
            .index
            .lock()
            .tag_range(start, end, Mark::Dirty, Mark::Towrite);
    }
    walk(core, backend, mapping, &fd, start, end, take);
}

/// `start`'s batches over `[start, end)`, after any tagging.
pub(super) fn walk(
    core: &Arc<Core>,
    backend: &dyn Backend,
    mapping: &Arc<Mapping>,
    fd: &Arc<StdFile>,
    start: PageIndex,
    end: PageIndex,
    take: Selection,
) {
    let mut from = start;
    loop {
        // The ticket comes before B1's CAS: a sync that finds a folio already under
        // writeback (so does not take it) must find this batch among those it waits for.
        let ticket = mapping.write.in_flight.begin();
        let (batch, locked, next) = collect(core, mapping, from, end, take);
        if batch.is_empty() {
            mapping.write.in_flight.end(ticket);
        } else {
            submit(core, backend, mapping, fd, batch, ticket);
        }
        match next {
            Some(next) => from = next,
            None if take == Selection::Tagged && !locked.is_empty() => {
                // Writers hold these: their copies are short. Wait, then walk again.
                for frame in locked {
                    wait::wait_unlocked(core.arena().meta(frame));
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
    take: Selection,
) -> (Vec<BatchFolio>, Vec<FrameId>, Option<PageIndex>) {
    let mark = match take {
        Selection::Dirty | Selection::Background => Mark::Dirty,
        Selection::Tagged => Mark::Towrite,
    };
    let arena = core.arena();
    let domain = mapping.domain_writer();
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
    let mut past_end_pages = 0;
    for folio in found {
        let meta = arena.meta(folio.frame);
        if !meta.state.try_start_writeback() {
            if meta.state.load().is_locked() {
                locked.push(folio.frame);
            }
            continue;
        }
        // The submission side of the write's assertions (B3 checks the same): the slot
        // was read under the lock, so the folio is this page's.
        assert_eq!(
            meta.identity(),
            (mapping.id, folio.head, folio.order),
            "a writeback took a folio that is not the slot's"
        );
        // The size is read after the CAS: a writer extends it before W5 makes the folio
        // DIRTY, so it covers every block this folio's writers wrote.
        let tagged = if w.is_marked(folio.head, Mark::Towrite) {
            Tagged::Yes
        } else {
            Tagged::No
        };
        let mask = BlockMask::of(arena, folio.frame, folio.order);
        let split = split_at_end(take, tagged, mapping.size_bytes(), &folio, mask.take());
        past_end_pages += split.past_end.count();
        if !split.kept.is_empty() {
            // The block the end cuts waits for a sync: back in the mask, the folio stays
            // dirty and marked.
            mask.restore(&split.kept);
            if split.write.is_empty() {
                meta.state.end_writeback(Redirty::Yes);
                wait::wake_all(meta);
                continue;
            }
        } else {
            w.clear_mark(folio.head, Mark::Dirty);
            w.clear_mark(folio.head, Mark::Towrite);
        }
        // After WRITEBACK was set: the folio's bytes stay what the device reads, and each
        // page's last install is of these bytes or older (an install follows its write).
        let marks = match &domain {
            Some(writer) => (0..folio.order.pages())
                .map(|i| folio.head.add(i))
                .map(|page| (page, writer.mark_of(page.0)))
                .filter(|&(_, mark)| mark != 0)
                .collect(),
            None => Vec::new(),
        };
        batch.push(BatchFolio {
            frame: folio.frame,
            order: folio.order,
            head: folio.head,
            blocks: split.write,
            keeps: split.kept,
            marks,
        });
    }
    drop(w);
    // Dirty blocks wholly past the end will never be written: they leave the budget.
    core.dirty_budget().uncharge(past_end_pages);
    (batch, locked, next)
}

/// Whether a sync tagged a folio `Towrite`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tagged {
    Yes,
    No,
}

/// A folio's taken dirty blocks against the end of the file.
struct EndSplit {
    /// Written now.
    write: Blocks,
    /// The block the end of the file cuts, left dirty for a sync.
    kept: Blocks,
    /// Wholly past the end: never written (truncation zeroed them), out of the budget.
    past_end: Blocks,
}

/// The tail-block rule, in one place: which of a folio's `taken` dirty blocks a
/// writeback of kind `take` writes, given the file's logical size.
///
/// Blocks wholly past the end are never written. A block the end of the file cuts is
/// written whole (O_DIRECT), which carries the file on disk to the block's end until a
/// sync (or the cache's drop, or forgetting the file) sets the size
/// (`Mapping::settle_size`). So under the background threshold the writeback thread
/// (`Selection::Background`) leaves it dirty, and no padding appears on disk that nobody asked
/// for; syncs, `File::writeback`, write-behind and the thread over the threshold
/// (`Selection::Dirty`: left dirty, a few files' tails could fill a small budget and throttle
/// writers that nothing would release) write it.
///
/// Not when a sync tagged the folio: the sync waits for this batch instead of taking the
/// folio, so the tail must be written here (else the sync returned without it), and it
/// counts as inside the file (with the background's own bound it would count as past the
/// end, and the folio would end clean with its last block unwritten: found by
/// `tests/write_model.rs` once write-behind woke the writeback thread right before syncs).
fn split_at_end(
    take: Selection,
    tagged: Tagged,
    size_bytes: u64,
    folio: &MarkedFolio,
    taken: Blocks,
) -> EndSplit {
    let in_folio = |page: PageIndex| page.0.saturating_sub(folio.head.0);
    let inside = taken.below(in_folio(PageIndex::ceil(size_bytes)));
    let past_end = taken.minus(&inside);
    let tail_page = PageIndex::containing(size_bytes);
    let keeps_tail = take == Selection::Background
        && tagged == Tagged::No
        && size_bytes % PAGE_BYTES as u64 != 0
        && tail_page >= folio.head
        && tail_page < folio.head.add(folio.order.pages())
        && inside.contains(in_folio(tail_page));
    let kept = if keeps_tail {
        Blocks::range(in_folio(tail_page), 1)
    } else {
        Blocks::default()
    };
    EndSplit {
        write: inside.minus(&kept),
        kept,
        past_end,
    }
}

/// B2's submission under `ticket` (taken before B1): the batch's blocks merged into
/// runs, one write per run.
fn submit(
    core: &Arc<Core>,
    backend: &dyn Backend,
    mapping: &Arc<Mapping>,
    fd: &Arc<StdFile>,
    folios: Vec<BatchFolio>,
    ticket: u64,
) {
    let arena = core.arena();
    let mut runs: Vec<Run> = Vec::new();
    let mut taken_pages = 0;
    for (i, folio) in folios.iter().enumerate() {
        assert!(
            folio
                .blocks
                .minus(&folio.blocks.below(folio.order.pages()))
                .is_empty(),
            "a writeback's blocks pass its folio's end"
        );
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
                    run.parts.push(Part {
                        folio: i,
                        first,
                        count,
                    });
                }
                _ => runs.push(Run {
                    offset_bytes: page.offset_bytes(),
                    bufs: smallvec::smallvec![buf],
                    parts: vec![Part {
                        folio: i,
                        first,
                        count,
                    }],
                }),
            }
        }
    }
    core.dirty_budget().writeback_started(taken_pages);
    let counters = &core.counters();
    stats::add(&counters.writeback_requests, runs.len() as u64);
    let mut pending = vec![0u32; folios.len()];
    for run in &runs {
        let mut last = usize::MAX;
        for &Part { folio: i, .. } in &run.parts {
            if i != last {
                pending[i] += 1;
            }
            last = i;
        }
    }
    let batch = Arc::new(Batch {
        pending: pending.into_iter().map(AtomicU32::new).collect(),
        core: core.clone(),
        mapping: mapping.clone(),
        ticket,
        failed: Mutex::new(Failed {
            blocks: vec![Blocks::default(); folios.len()],
            errno: 0,
        }),
        remaining: AtomicUsize::new(runs.len()),
        folios,
    });
    // Folios with no block to write (all past the end, or kept for a sync) end now.
    for (i, pending) in batch.pending.iter().enumerate() {
        if pending.load(Ordering::Relaxed) == 0 {
            batch.finish_folio(i);
        }
    }
    if runs.is_empty() {
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
        self.check_run(&run);
        let len = run.len_bytes();
        let result = result.and_then(|n| finish_short_write(file, &run, n.min(len)));
        let written = match result {
            Ok(n) => n,
            Err(ref e) => {
                let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
                failed.errno = e.raw_os_error().unwrap_or(libc::EIO);
                0
            }
        };
        let counters = &self.core.counters();
        stats::add(&counters.writeback_bytes, written as u64);
        if written < len {
            if result.is_ok() {
                // No byte more could be written and no error said why: the device is full.
                let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
                failed.errno = libc::ENOSPC;
            }
            let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
            let mut at = 0u64;
            let written_blocks = (written / PAGE_BYTES) as u64;
            for &Part {
                folio: i,
                first,
                count,
            } in &run.parts
            {
                let bad_from = written_blocks.saturating_sub(at).min(count);
                if bad_from < count {
                    let bad = Blocks::range(first + bad_from, count - bad_from);
                    failed.blocks[i] = failed.blocks[i].union(&bad);
                }
                at += count;
            }
        }
        // A folio's writeback ends with the last of its runs, not the batch's: a writer
        // waiting for it (stable pages) waits for its own write only.
        let mut last = usize::MAX;
        for &Part { folio: i, .. } in &run.parts {
            if i != last && self.pending[i].fetch_sub(1, Ordering::AcqRel) == 1 {
                self.finish_folio(i);
            }
            last = i;
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.finish();
        }
    }

    /// The completion side of a write's assertions: the run covers, in file order, the
    /// blocks its folios' parts name, each inside its folio and among the blocks the
    /// batch took, and each folio is still the page's and under writeback (nothing may
    /// remove, free or write a folio under WRITEBACK).
    fn check_run(&self, run: &Run) {
        let mut offset_bytes = run.offset_bytes;
        for &Part {
            folio: i,
            first,
            count,
        } in &run.parts
        {
            let folio = &self.folios[i];
            let blocks = Blocks::range(first, count);
            assert!(
                first + count <= folio.order.pages() && blocks.minus(&folio.blocks).is_empty(),
                "a write's run names blocks its folio did not give"
            );
            assert_eq!(
                folio.head.add(first).offset_bytes(),
                offset_bytes,
                "a write's run is not contiguous in the file"
            );
            offset_bytes += count * PAGE_BYTES as u64;
            self.check_folio(folio);
        }
    }

    /// The folio is still `folio.head`'s of this file, and under writeback.
    fn check_folio(&self, folio: &BatchFolio) {
        let meta = self.core.arena().meta(folio.frame);
        assert!(
            meta.state.load().is_writeback(),
            "a write completed for a folio not under writeback"
        );
        assert_eq!(
            meta.identity(),
            (self.mapping.id, folio.head, folio.order),
            "a folio under writeback changed identity"
        );
    }

    /// B3 for folio `i` of the batch (module docs), once its last run completed.
    fn finish_folio(&self, i: usize) {
        let core = &self.core;
        let arena = core.arena();
        let folio = &self.folios[i];
        self.check_folio(folio);
        let bad = self.failed.lock().unwrap_or_else(|e| e.into_inner()).blocks[i];
        if !bad.is_empty() {
            let mut w = self.mapping.index.lock();
            BlockMask::of(arena, folio.frame, folio.order).restore(&bad);
            w.set_mark(folio.head, Mark::Dirty);
        }
        let redirty = if bad.is_empty() && folio.keeps.is_empty() {
            Redirty::No
        } else {
            Redirty::Yes
        };
        if redirty == Redirty::No && !folio.marks.is_empty() {
            // The domain's frames of these bytes may be reclaimed now (W3).
            if let Some(writer) = self.mapping.domain_writer() {
                for &(page, mark) in &folio.marks {
                    writer.written(page.0, mark);
                }
            }
        }
        let meta = arena.meta(folio.frame);
        meta.state.end_writeback(redirty);
        wait::wake_all(meta);
        let cleaned = folio.blocks.minus(&bad).count();
        core.dirty_budget().writeback_ended(folio.blocks.count());
        core.dirty_budget().uncharge(cleaned);
        stats::add(&core.counters().pages_written_back, cleaned);
    }

    /// B3 for the batch, once its last run completed (every folio finished): the error
    /// sequence, the file's failure count, the ticket.
    fn finish(&self) {
        let core = &self.core;
        let write = &self.mapping.write;
        let (failed, errno) = {
            let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
            (failed.blocks.iter().any(|b| !b.is_empty()), failed.errno)
        };
        if failed {
            stats::bump(&core.counters().writeback_errors);
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
        // A writer of the domain whose file is clean now, with no writable handle open,
        // detaches (mapping/domain.rs, A5).
        self.mapping.settle_writer();
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
    let arena = core.arena();
    let mut w = mapping.index.lock();
    let mut found = Vec::new();
    let _ = mapping
        .index
        .marked_walk(PageIndex(0), PageIndex::END, Mark::Dirty, &mut |folio| {
            found.push(folio);
            ControlFlow::Continue(())
        });
    let mut discarded = 0;
    for folio in found {
        let meta = arena.meta(folio.frame);
        // Read before the CAS, which fails if a writer or a writeback took the folio
        // meanwhile (neither changes the mask otherwise).
        let pages = BlockMask::of(arena, folio.frame, folio.order)
            .peek()
            .count();
        if !meta.state.try_discard_dirty() {
            // A writer holds it (its W5 leaves it dirty and marked: the next writeback
            // fails and discards it), or a writeback does (its completion sees the
            // failure).
            continue;
        }
        discarded += pages;
        w.clear_mark(folio.head, Mark::Dirty);
        w.clear_mark(folio.head, Mark::Towrite);
    }
    drop(w);
    core.dirty_budget().uncharge(discarded);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cache;
    use std::time::Duration;

    /// A sync tags the file's dirty folios, then walks them; the writeback thread may run
    /// between the two and find the folio that the end of the file cuts already tagged.
    /// It must then write that block whole: the sync leaves the folio to its batch. It
    /// used to count the block as past the end, and the folio ended clean with its last
    /// bytes never written (found by `tests/write_model.rs`).
    #[test]
    fn the_background_writes_a_tail_block_a_sync_tagged() {
        let dir = crate::io::testing::temp_dir();
        let path = dir.path().join("f");
        let cache = Cache::builder()
            .capacity_bytes(16 << 20)
            .dirty_expire(Duration::from_secs(3600))
            .build()
            .unwrap();
        let file = cache
            .open_options()
            .write(true)
            .create(true)
            .open(&path)
            .unwrap();
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8 + 1).collect();
        file.write_at(&data, 0).unwrap();
        let (core, backend, mapping) = file.parts_for_test();
        let all = PageIndex::END;
        // The sync's tagging (B1), then a background pass before the sync's walk.
        mapping
            .index
            .lock()
            .tag_range(PageIndex(0), all, Mark::Dirty, Mark::Towrite);
        start(
            core,
            backend,
            mapping,
            PageIndex(0),
            all,
            Selection::Background,
        );
        let write = &mapping.write;
        write.in_flight.wait_through(write.in_flight.last());
        let disk = std::fs::read(&path).unwrap();
        assert!(
            disk.len() >= data.len() && disk[..data.len()] == data[..],
            "the file on disk: {} bytes",
            disk.len()
        );
        let s = cache.stats();
        assert_eq!((s.dirty_pages, s.writeback_pages), (0, 0), "{s:?}");
    }
}
