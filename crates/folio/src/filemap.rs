//! The miss path: reading pages into the cache, and the completion of those reads.
//!
//! A page that is not in the index is read with the run of missing pages after it (up to
//! the next cached page, the end of the request, or the readahead window): the run is
//! allocated as the largest aligned folios that fit, inserted in ONE walk under ONE hold
//! of the index lock (`IndexWriteGuard::insert_run`), and submitted as one vectored read
//! per contiguous run of inserted folios. Folios that a racing reader placed first are
//! given back; each page is inserted once.
//!
//! A readahead window (`read_window`) first walks the index lock-free over its range
//! (`Index::gaps`): if every page is present (uptodate or in flight) it costs nothing: no
//! lock, no allocation. Only the gaps are allocated, without waiting for memory
//! (readahead is a hint), and inserted as runs.
//!
//! The completion is a value, [`ReadCompletion`], built with the request and run once by
//! the backend (`ReadCompletion::complete`, on a backend thread or the reader's). It
//! publishes each folio's bytes (version, UPTODATE, unlock, wake), or on failure removes
//! the folios from the index, records the errno for their waiters and wakes them: an error
//! is never cached, and the next read of the page retries. A read that comes back short
//! before the known end of the file is completed synchronously (`io::sync::finish_read`:
//! the byte moving is io's, the decision to retry is this module's); if the file really
//! shrank, the mapping adopts the new size and drops the pages past it.

use std::fs::File as StdFile;
use std::io;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::arena::FolioUse;
use crate::eviction::{Admission, ReadHint};
use crate::index::{IndexWriteGuard, Inserted, Leave, Mark, NewFolio};
use crate::io::sync::finish_read;
use crate::io::{Completion, FrameBufs, IoBatch, IoRequest, IO_BYTES_MAX};
use crate::mapping::Mapping;
use crate::pagecache::{AllocMode, Core, Engine};
use crate::refcount::{PutOutcome, PREFETCHED, READAHEAD};
use crate::stats::{self, HandleCounters};
use crate::types::{Order, PageIndex, PAGE_BYTES};
use crate::wait;

/// A run of folios for one read, inline up to a storage engine's block (16 KiB of 4 KiB
/// folios): the miss path allocates nothing for it (every heap allocation there competed
/// with the engine's own for malloc's locks; docs/benchmarks.md, "db-bench readrandom").
type Run = SmallVec<[NewFolio; 4]>;

/// Pages `[start, end)` to read ahead, the page whose folio gets the READAHEAD marker, and
/// the largest folio order to use.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    pub start: PageIndex,
    pub end: PageIndex,
    pub marker: Option<PageIndex>,
    pub order_cap: Order,
}

/// What the miss path of one handle works with: the cache (its core and backend), the
/// file's mapping, and the handle's open file.
pub(crate) struct MissPath<'a> {
    pub cache: &'a Engine,
    pub mapping: &'a Arc<Mapping>,
    pub fd: &'a Arc<StdFile>,
    /// The handle's own counters: its reads are counted there too.
    pub handle: &'a HandleCounters,
    /// How the folios it inserts enter the eviction policy (`ReadHint::NoReuse`: the
    /// no-reuse queue, evicted first).
    pub reuse: ReadHint,
}

/// Who waits for a miss's read, which decides how it is submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waiter {
    /// A thread that sleeps until the read is done: the backend may do the read on it
    /// (`Backend::submit_waited`).
    Thread,
    /// A future (`File::read_at_async`): the thread must not block, the read goes to the
    /// backend's own threads or the kernel (`Backend::submit`).
    Future,
}

impl MissPath<'_> {
    pub(crate) fn core(&self) -> &Core {
        &self.cache.core
    }

    /// Reads the missing pages from `page` up to the next cached page or `read_end`:
    /// allocate, insert as one run, submit one read per contiguous run. Returns once
    /// submitted (`Waiter::Thread`: the backend may have read them on this thread); the
    /// caller waits on the folio.
    ///
    /// Errors: `OutOfMemory` when no folio can be allocated: for `Waiter::Thread` after
    /// waiting `CacheBuilder::alloc_wait` for pinned folios, for `Waiter::Future` at once.
    ///
    /// Context: no lock held, no folio pinned by the caller. `Waiter::Thread` may sleep in
    /// allocation (only while every folio is pinned); `Waiter::Future` never sleeps.
    pub(crate) fn read_missing(
        &self,
        page: PageIndex,
        read_end: PageIndex,
        waiter: Waiter,
    ) -> io::Result<()> {
        let core = self.core();
        let size_pages = PageIndex::ceil(self.mapping.size_bytes());
        // One run never takes more than an eighth of the cache, so that concurrent
        // readers always find memory.
        let run_pages_max = (core.arena().capacity_frames() / 8).clamp(1, 512);
        let mut end = read_end
            .min(size_pages)
            .min(page.add(run_pages_max))
            .max(page.add(1));
        if let Some(present) = self.mapping.index.next_present(page.add(1), end) {
            end = present;
        }
        // A future must not sleep: it waits for memory by polling again (`Found::NoMemory`).
        let first = match waiter {
            Waiter::Thread => AllocMode::Wait,
            Waiter::Future => AllocMode::NoWait,
        };
        let run = self.alloc_run(page, end, core.folio_order_max, FolioUse::Request, first)?;
        let mut requests = IoBatch::new();
        self.insert_run(run, &mut requests);
        match waiter {
            // The caller waits for these pages: the backend may read them on this thread.
            Waiter::Thread => self.cache.backend.submit_waited(requests),
            Waiter::Future => self.cache.backend.submit(requests),
        }
        Ok(())
    }

    /// Reads the gaps of a batch of reads (`File::read_many`), sorted and disjoint, with
    /// one submission: each gap allocated in folios (the first in `first` mode: `Wait`
    /// for a thread's own batch, `NoWait` for a future's; the rest without waiting, since
    /// the caller then holds LOCKED folios), inserted gap by gap, and every read submitted
    /// in one `Backend::submit`. Stops at an allocation that fails, or at an eighth of the
    /// cache (as one miss's run): the callers' own misses read the rest. Returns the
    /// pages inserted.
    ///
    /// Context: no lock held, no folio pinned by the caller. May sleep in the first
    /// allocation (`AllocMode::Wait`); does not wait for the reads.
    pub(crate) fn read_gaps(&self, gaps: &[(PageIndex, PageIndex)], mut first: AllocMode) -> u64 {
        let core = self.core();
        let mut budget_pages = (core.arena().capacity_frames() / 8).max(1);
        let mut requests = IoBatch::new();
        let mut inserted = 0;
        for &(start, end) in gaps {
            let end = end.min(start.add(budget_pages));
            let run = self
                .alloc_run(start, end, core.folio_order_max, FolioUse::Request, first)
                .unwrap_or_default();
            first = AllocMode::NoWait;
            let short = run_end(&run, start) < end;
            budget_pages -= run.iter().map(|f| f.order.pages()).sum::<u64>();
            inserted += self.insert_run(run, &mut requests);
            if short || budget_pages == 0 {
                break;
            }
        }
        if !requests.is_empty() {
            self.cache.backend.submit(requests);
        }
        inserted
    }

    /// LOCKED folios for `[start, end)` of this file, in order, each the largest that
    /// fits (up to `order_cap`) or that memory gives, allocated for `use_`: the first in
    /// `first` mode, the rest without waiting (the caller then holds LOCKED folios: waiting
    /// with them is how every reader ends up waiting for every other). Stops at the first allocation
    /// that fails: the run is shorter than asked, or, if it was the first, the error.
    ///
    /// Context: no lock held; may sleep in the first allocation (`AllocMode::Wait`).
    fn alloc_run(
        &self,
        start: PageIndex,
        end: PageIndex,
        order_cap: Order,
        use_: FolioUse,
        first: AllocMode,
    ) -> io::Result<Run> {
        let core = self.core();
        let mut run = Run::new();
        let mut at = start;
        while at < end {
            let want = Order::largest_fitting(at, end.0 - at.0, order_cap);
            let mode = if run.is_empty() {
                first
            } else {
                AllocMode::NoWait
            };
            let (frame, order) = match core.alloc_folio(want, use_, mode) {
                Ok(got) => got,
                Err(e) if run.is_empty() => return Err(e),
                Err(_) => break,
            };
            core.arena()
                .meta(frame)
                .set_identity(self.mapping.id, at, order);
            run.push(NewFolio {
                frame,
                order,
                head: at,
            });
            at = at.add(order.pages());
        }
        Ok(run)
    }

    /// Inserts a run of LOCKED folios in one walk under one hold of the index lock, gives
    /// back those a racing reader placed first, and returns the reads for the rest: one
    /// per contiguous run, at most `IO_BYTES_MAX` each. Returns the pages inserted too.
    ///
    /// Context: no lock held; takes the index lock once.
    fn insert_run(&self, run: Run, requests: &mut IoBatch) -> u64 {
        let core = self.core();
        let pages: u64 = run.iter().map(|f| f.order.pages()).sum();
        let first = run.first().map_or(PageIndex(0), |f| f.head);
        let mut w = self.mapping.index.lock_for_insert(first, pages);
        let inserted = self.insert_admit(&mut w, &run);
        // Under the lock: an invalidation that has not bumped it yet will see these folios.
        let generation = self.mapping.generation();
        drop(w);
        // The inserted folios, cut into reads: contiguous (a conflict leaves a gap), at
        // most IO_BYTES_MAX each.
        let mut read = Run::new();
        let mut inserted_pages = 0;
        for (folio, inserted) in run.into_iter().zip(inserted) {
            if !inserted {
                stats::bump(&core.counters().insert_conflicts);
                if core.arena().meta(folio.frame).state.abandon_locked() == PutOutcome::Free {
                    core.arena().free(folio.frame);
                }
                continue;
            }
            inserted_pages += folio.order.pages();
            if let Some(start) = read.first().map(|f| f.head) {
                let end = folio.head.add(folio.order.pages());
                if run_end(&read, start) != folio.head
                    || (end.offset_bytes() - start.offset_bytes()) as usize > IO_BYTES_MAX
                {
                    requests.push(self.request_for(std::mem::take(&mut read), generation));
                }
            }
            read.push(folio);
        }
        if !read.is_empty() {
            requests.push(self.request_for(read, generation));
        }
        stats::add(&core.counters().pages_inserted, inserted_pages);
        inserted_pages
    }

    /// Inserts `run` (LOCKED folios) under the held lock `w` and admits each inserted one
    /// to the eviction policy with the shadow it replaced; returns which were inserted.
    ///
    /// Context: the index lock held (a folio is on an eviction queue exactly while it is
    /// in the index: eviction's lock order is index -> policy).
    pub(crate) fn insert_admit(&self, w: &mut IndexWriteGuard<'_>, run: &[NewFolio]) -> Inserted {
        let core = self.core();
        let outcome = w.insert_run(run);
        let mut shadows = outcome.shadows.iter().peekable();
        for (folio, _) in run.iter().zip(&outcome.inserted).filter(|(_, &ok)| ok) {
            let end = folio.head.add(folio.order.pages());
            // The shadows this folio replaced (collected in index order); the policy
            // judges the first.
            while shadows.next_if(|(page, _)| *page < folio.head).is_some() {}
            let mut shadow = None;
            while let Some((_, value)) = shadows.next_if(|(page, _)| *page < end) {
                shadow.get_or_insert(*value);
            }
            if shadow.is_some() {
                stats::bump(&core.counters().refaults);
            }
            self.admit(folio, shadow);
        }
        outcome.inserted
    }

    /// Puts a folio just placed in the index on the eviction policy's queues, as this
    /// handle's reads ask (`ReadHint`), judged by the shadow its slot held, if any.
    ///
    /// Context: the index lock held (as `insert_admit`).
    pub(crate) fn admit(&self, folio: &NewFolio, shadow: Option<u64>) {
        let core = self.core();
        let mem = core.memory();
        if self.reuse == ReadHint::NoReuse {
            // A scan's page: no refault credit, evicted first.
            mem.make_evictable_first(folio.frame, folio.order.pages());
            return;
        }
        let admission = mem.make_evictable(folio.frame, folio.order.pages(), shadow);
        if admission == Admission::Refault {
            stats::bump(&core.counters().workingset_refaults);
        }
    }

    /// Reads the gaps of a readahead window. Returns the pages it inserted.
    ///
    /// Context: no lock held, no folio pinned by the caller; never waits for memory.
    pub(crate) fn read_window(&self, window: Window) -> u64 {
        let core = self.core();
        let end = window.end.min(PageIndex::ceil(self.mapping.size_bytes()));
        let gaps = self.mapping.index.gaps(window.start, end);
        if gaps.is_empty() {
            return 0;
        }
        let order_cap = window.order_cap.min(core.folio_order_max);
        let mut requests = IoBatch::new();
        let mut inserted = 0;
        for (gap_start, gap_end) in gaps {
            let run = self
                .alloc_run(
                    gap_start,
                    gap_end,
                    order_cap,
                    FolioUse::Readahead,
                    AllocMode::NoWait,
                )
                .unwrap_or_default();
            for f in &run {
                let covers_marker = window
                    .marker
                    .is_some_and(|m| m >= f.head && m < f.head.add(f.order.pages()));
                core.arena()
                    .meta(f.frame)
                    .state
                    .set_flags(if covers_marker {
                        PREFETCHED | READAHEAD
                    } else {
                        PREFETCHED
                    });
            }
            let short = run_end(&run, gap_start) < gap_end;
            inserted += self.insert_run(run, &mut requests);
            if short {
                break; // out of memory: readahead never waits for it
            }
        }
        stats::add(&core.counters().readahead_pages, inserted);
        self.cache.backend.submit(requests);
        inserted
    }

    /// The read of one run of inserted LOCKED folios, with its completion.
    fn request_for(&self, run: Run, generation: u64) -> IoRequest {
        let core = self.cache.core.clone();
        let offset_bytes = run[0].head.offset_bytes();
        let bufs = frame_bufs(&core, &run);
        let len_bytes: usize = bufs.iter().map(|b| b.len_bytes()).sum();
        stats::bump(&core.counters().io_requests);
        stats::add(&core.counters().io_bytes, len_bytes as u64);
        self.handle.read_submitted(len_bytes as u64);
        let completion = ReadCompletion {
            core,
            mapping: self.mapping.clone(),
            file: self.fd.clone(),
            offset_bytes,
            generation,
            run,
        };
        IoRequest::read(
            self.fd.clone(),
            offset_bytes,
            bufs,
            Completion::new(move |result| completion.complete(result)),
        )
    }
}

/// The frames of `run`'s folios, in order: the buffers of its read.
fn frame_bufs(core: &Core, run: &[NewFolio]) -> FrameBufs {
    run.iter()
        .map(|f| core.arena().io_buf(f.frame, f.order))
        .collect()
}

/// What the completion of one read of a run of folios needs, built at submission (module
/// docs): the read's folios and buffers, where it read from, and the mapping generation
/// it was submitted under.
pub(crate) struct ReadCompletion {
    core: Arc<Core>,
    mapping: Arc<Mapping>,
    file: Arc<StdFile>,
    offset_bytes: u64,
    /// The mapping's generation when the folios were inserted: a truncating invalidation
    /// bumps it, and a read that straddled one must not publish what it read.
    generation: u64,
    /// The LOCKED folios this read fills, in file order, contiguous from `offset_bytes`
    /// (their frames are the read's buffers, `frame_bufs`).
    run: Run,
}

impl ReadCompletion {
    /// Ends the read with the backend's `result` (module docs): completes a short read,
    /// then publishes the folios, or fails them.
    ///
    /// Context: a backend thread (or the reader's, for a waited read); no lock held; may
    /// block in a synchronous read (a short read's rest). Takes the index lock to publish
    /// (so a truncating invalidation cannot slip between the generation check and the
    /// publication), and to fail folios.
    pub(crate) fn complete(self, result: io::Result<usize>) {
        let ReadCompletion {
            core,
            mapping,
            file,
            offset_bytes,
            generation,
            run,
        } = &self;
        // What the submission promised: these folios are still this read's.
        for folio in run {
            assert_eq!(
                core.arena().meta(folio.frame).identity(),
                (mapping.id, folio.head, folio.order),
                "a read's folio changed identity before its completion"
            );
        }
        let total: usize = run.iter().map(|f| f.order.bytes()).sum();
        let result = result.and_then(|n| self.finish_short_read(n.min(total), total));
        let n = match result {
            Ok(n) => n,
            Err(e) => {
                stats::bump(&core.counters().io_errors);
                fail_folios(core, mapping, run, e.raw_os_error().unwrap_or(libc::EIO));
                forget_if_unused(core, mapping);
                return;
            }
        };
        // A short read ends at the file's end, as the kernel sees it now. If the file is
        // longer than what was read (it grew during the read), the partial folio's zeros
        // are not the file's bytes: it is failed and read again. If it is shorter than the
        // mapping believed, the mapping shrinks to it.
        let mut grew = false;
        let mut shrink = None;
        if n < total {
            let real = file.metadata().map_or(u64::MAX, |m| m.len());
            if real > offset_bytes + n as u64 {
                grew = true;
            } else if real < mapping.size_bytes() {
                shrink = Some(real);
            }
        }
        // A file folio writes has its size in the mapping (it may be longer than on disk
        // until a sync): what a read finds missing below that size is a hole, zeros.
        let holes = mapping.write.is_written();
        // And past that size the disk may still hold bytes a `set_len` cut (a read of the
        // new last page between its `set_size` and its `ftruncate`): zeros too. A cut
        // after this look moves the generation (or finds the folio and zeroes it itself).
        let logical = holes.then(|| mapping.size_bytes());
        let mut publish = Run::new();
        let mut failed = Run::new();
        let mut at = 0usize;
        for folio in run {
            let bytes = folio.order.bytes();
            let mut valid = n.saturating_sub(at).min(bytes);
            if let Some(size) = logical {
                let start = folio.head.offset_bytes();
                valid = valid.min(usize::try_from(size.saturating_sub(start)).unwrap_or(bytes));
            }
            if !holes && (valid == 0 || (grew && valid < bytes)) {
                failed.push(*folio);
            } else {
                if valid < bytes {
                    core.arena().zero_tail(folio.frame, folio.order, valid);
                }
                publish.push(*folio);
            }
            at += bytes;
        }
        let w = mapping.index.lock();
        if mapping.generation() == *generation {
            for folio in &publish {
                let meta = core.arena().meta(folio.frame);
                meta.version.publish();
                meta.state.finish_read_ok();
            }
        } else {
            // A truncating invalidation ran while this read was in flight: what it read
            // may be the file's old bytes.
            failed.append(&mut publish);
        }
        drop(w);
        for folio in &publish {
            wait::wake_all(core.arena().meta(folio.frame));
        }
        if let Some(size) = shrink {
            mapping.shrink_to(core.memory(), size);
        }
        if !failed.is_empty() {
            // Readers of these pages retry (ESTALE), or find them past the end of the file.
            fail_folios(core, mapping, &failed, libc::ESTALE);
        }
        if shrink.is_some() || !failed.is_empty() {
            forget_if_unused(core, mapping);
        }
    }

    /// Completes a read that came back with `n` bytes, short before the end of its
    /// buffers, by reading the rest synchronously (`io::sync::finish_read`); returns the
    /// bytes finally read (short only at the real end of the file). An unaligned count is
    /// the end of the file already: O_DIRECT reads whole blocks otherwise.
    ///
    /// Context: as `complete`; may block in `preadv`.
    fn finish_short_read(&self, n: usize, total: usize) -> io::Result<usize> {
        if n >= total || n % PAGE_BYTES != 0 {
            return Ok(n);
        }
        stats::bump(&self.core.counters().short_read_retries);
        let bufs = frame_bufs(&self.core, &self.run);
        finish_read(&self.file, self.offset_bytes, &bufs, n)
    }
}

/// A completion took folios out of `mapping`'s index: if no handle has the file open,
/// that may have been its last, and the mapping leaves the table (`MappingTable` docs).
/// The page after `run`'s last folio (`start` for an empty run).
fn run_end(run: &[NewFolio], start: PageIndex) -> PageIndex {
    run.last().map_or(start, |f| f.head.add(f.order.pages()))
}

fn forget_if_unused(core: &Core, mapping: &Arc<Mapping>) {
    if mapping.handles() == 0 {
        core.mappings.remove_if_unused(core.memory(), mapping);
    }
}

/// A read failed: remove its folios from the index (one lock hold), record the errno,
/// unlock and wake every waiter. The folios' frames go back when the last waiter lets go.
fn fail_folios(core: &Core, mapping: &Mapping, run: &[NewFolio], errno: i32) {
    let mut w = mapping.index.lock();
    for folio in run {
        // A read's folios are LOCKED and were never dirty: no writer took them.
        debug_assert!(
            !w.is_marked(folio.head, Mark::Dirty),
            "a failed read's folio is dirty"
        );
        if w.remove_folio(folio.head, folio.frame, Leave::Empty) {
            core.memory()
                .forget_evictable(folio.frame, folio.order.pages());
            mapping.folio_removed(&w);
        } else {
            debug_assert!(false, "a LOCKED folio left the index");
        }
    }
    drop(w);
    for folio in run {
        let meta = core.arena().meta(folio.frame);
        meta.set_errno(errno);
        let outcome = meta.state.finish_read_err();
        wait::wake_all(meta);
        if outcome == PutOutcome::Free {
            core.arena().free(folio.frame);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use crate::io::fault::FaultBackend;
    use crate::io::pread::PreadBackend;
    use crate::Cache;

    /// A read cut short by the backend is finished inside its completion
    /// (`ReadCompletion::finish_short_read`): every page is inserted once, and none is
    /// failed for its readers to read again (which would insert it twice).
    #[test]
    fn short_reads_are_finished_by_the_completion() {
        let dir = tempfile::Builder::new()
            .prefix("folio-filemap-test-")
            .tempdir_in("/var/tmp")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let path = dir.path().join("f");
        let len_bytes = (1 << 20) + 123;
        let content: Vec<u8> = (0..len_bytes).map(|i| (i % 251) as u8).collect();
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&content)
            .unwrap();
        let (backend, control) = FaultBackend::new(Box::new(PreadBackend::new(2).unwrap()));
        let cache = Cache::builder()
            .capacity_bytes(16 << 20)
            .build_with_backend(Box::new(backend))
            .unwrap();
        let file = cache.open(&path).unwrap();
        control.short_reads(8);
        let mut buf = vec![0u8; len_bytes + 10];
        assert_eq!(file.read_at(&mut buf, 0).unwrap(), len_bytes);
        assert!(buf[..len_bytes] == content[..]);
        let stats = cache.stats();
        assert!(control.short_injected() > 0);
        assert!(stats.short_read_retries > 0, "{stats:?}");
        assert_eq!(stats.io_errors, 0);
        assert_eq!(
            stats.pages_inserted,
            len_bytes.div_ceil(crate::PAGE_BYTES) as u64,
            "a page was inserted twice: {stats:?}"
        );
    }
}
