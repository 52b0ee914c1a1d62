//! A file handle: the API of a read, and its hit path.
//!
//! `read_at` first tries the optimistic hit path (`version`): look the page up without a
//! lock, copy its bytes with a byte-wise atomic memcpy, validate the version. No atomic
//! read-modify-write happens on that path once a folio is hot: the hit is counted in a
//! per-thread counter; the access frequency that eviction reads (S3-FIFO, LRU) is raised
//! by one CAS only while below its maximum (so at most three times per folio); the
//! readahead marker and the prefetched bit are read with one load (`StateWord`) and
//! cleared only when set (once per folio).
//!
//! Otherwise it takes the pinned path: `Mapping::find_get` (refcount protocol), waits for
//! in-flight I/O on the parked wait table, and copies from the pinned folio. A miss asks
//! the readahead policy (`readahead`) whether to open a window, then reads through the
//! miss path (`filemap`).
//!
//! Each handle has its own readahead state (`RaCell`), shared by every thread that reads
//! through the handle and updated only by CAS; its maximum window is lowered to the
//! cache-wide limit (`readahead::ReadaheadLimit`) when a window is decided, never on a hit.

mod async_read;
mod read_many;
mod write;

pub use async_read::{GetPageFuture, ReadAtFuture};
pub use read_many::ReadManyFuture;

use std::fs::File as StdFile;
use std::io;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use crate::eviction::ReadHint;
use crate::filemap::{Fill, Waiter, Window};
use crate::folio::FolioMeta;
use crate::index::{Entry, RootHint};
use crate::mapping::{Invalidate, Mapping, Pinned};
use crate::pagecache::{Core, Engine};
use crate::readahead::{self, Decision, MissRequest, RaCell};
use crate::refcount::{PREFETCHED, READAHEAD};
use crate::stats::{self, FileStats, HandleCounters};
use crate::types::{FrameId, Order, PageIndex, PAGE_BYTES};
use crate::wait;
use crate::write::errseq::Since;

/// Forced readahead (`File::readahead`, `Advice::WillNeed`) goes in chunks of this many
/// pages (2 MiB).
const FORCED_CHUNK_PAGES: u64 = 512;

/// A handle's readahead window (`File::readahead_window`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadaheadWindow {
    pub start_bytes: u64,
    pub size_bytes: u64,
    pub async_bytes: u64,
    /// The handle's maximum window now (the cache-wide limit may lower what a window
    /// gets while several streams read ahead: `readahead` module docs).
    pub max_bytes: u64,
}

/// What a handle's reader expects of its access pattern (`posix_fadvise`'s advice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// The default: on-demand readahead with the cache's maximum window.
    Normal,
    /// Long sequential scans: twice the maximum window.
    Sequential,
    /// Random access: no readahead at all, reads read what they ask.
    Random,
    /// The range will be read soon: read it ahead now (chunks of at most 2 MiB).
    WillNeed,
    /// The range will not be read again: drop its cached folios that nobody holds.
    DontNeed,
    /// The handle's reads will not be reused (the kernel's `POSIX_FADV_NOREUSE`): they
    /// read as `ReadHint::NoReuse` until `Normal` (the range is ignored). `Sequential`
    /// and `Random` keep it.
    NoReuse,
}

/// How a file's descriptor reads: around the kernel's page cache or through it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpenMode {
    /// O_DIRECT: the kernel's page cache is bypassed.
    Direct,
    /// Buffered, where the file system refuses O_DIRECT (tmpfs).
    Buffered,
}

/// Whether a handle may write (`Cache::open` is read-only; `Cache::open_options` says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    ReadOnly,
    ReadWrite,
}

/// An open file, read (and, opened for it, written) through its cache. Safe to share
/// between threads (`&File` is all a read or a write needs); RocksDB-style engines share
/// one handle among all their reader threads.
pub struct File {
    cache: Arc<Engine>,
    mapping: Arc<Mapping>,
    fd: Arc<StdFile>,
    mode: OpenMode,
    access: Access,
    ra: RaCell,
    /// The index's root as this handle last saw it: the hit path's walk starts there
    /// without waiting for the mapping's line (`index::RootHint`).
    root_hint: RootHint,
    /// The maximum window of `Advice::Normal`, in pages.
    ra_pages_normal: std::sync::atomic::AtomicU32,
    /// The file's error sequence as this handle last reported it (`errseq`): each sync
    /// reports a writeback error once per handle.
    since: Mutex<Since>,
    /// What this handle's misses and readahead read from the device (`stats`).
    counters: HandleCounters,
    /// `Advice::NoReuse` in force: reads are `ReadHint::NoReuse`.
    no_reuse: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("mapping", &self.mapping.id)
            .field("len", &self.len())
            .field("mode", &self.mode)
            .field("access", &self.access)
            .finish()
    }
}

#[cfg(test)]
impl File {
    /// The cache's core and backend and the file's mapping: the writeback tests drive the
    /// protocol's steps by hand (`writeback::tests`).
    pub(crate) fn parts_for_test(&self) -> (&Arc<Core>, &dyn crate::io::Backend, &Arc<Mapping>) {
        (&self.cache.core, &*self.cache.backend, &self.mapping)
    }
}

impl File {
    pub(crate) fn new(
        cache: Arc<Engine>,
        mapping: Arc<Mapping>,
        fd: Arc<StdFile>,
        mode: OpenMode,
        access: Access,
        ra_pages: u32,
    ) -> File {
        if access == Access::ReadWrite {
            mapping.write.adopt_fd(&fd);
        }
        let since = Mutex::new(mapping.write.errseq().sample());
        let root_hint = RootHint::new(&mapping.index);
        mapping.index.refresh_hint(&root_hint);
        File {
            cache,
            mapping,
            fd,
            mode,
            access,
            ra: RaCell::new(ra_pages),
            root_hint,
            ra_pages_normal: std::sync::atomic::AtomicU32::new(ra_pages),
            since,
            counters: HandleCounters::default(),
            no_reuse: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// What this handle caused since it was opened: the device reads of its misses and
    /// of the readahead it started. A storage engine that reopens a file it has just
    /// written reads it back with no I/O while its pages stay cached: this says so.
    pub fn stats(&self) -> FileStats {
        self.counters.snapshot()
    }

    /// The file's length in bytes, as the cache knows it (from open, lowered when a read
    /// finds the file shorter; for a file folio writes, its logical length: what writes
    /// and `set_len` made it, ahead of the disk until a sync).
    pub fn len(&self) -> u64 {
        self.mapping.size_bytes()
    }

    /// Re-reads the file's length from the kernel (`fstat`) and adopts it: cached pages
    /// past a smaller length are dropped, so no byte past the new end is ever returned;
    /// a larger length makes appended bytes readable. Returns the new length. A file that
    /// folio has written keeps the length folio gave it (its writes are the newest bytes).
    ///
    /// Context: any thread; one system call; takes the index lock if pages are dropped.
    pub fn refresh_len(&self) -> io::Result<u64> {
        let size = self.fd.metadata()?.len();
        self.mapping.resize(&self.core().mem, size);
        Ok(self.mapping.size_bytes())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether reads bypass the kernel's page cache (false where the file system refused
    /// O_DIRECT and the file was opened buffered).
    pub fn is_direct(&self) -> bool {
        self.mode == OpenMode::Direct
    }

    fn core(&self) -> &Core {
        &self.cache.core
    }

    /// The miss path's view of this handle, inserting as the handle's advice says.
    fn fill(&self) -> Fill<'_> {
        self.fill_for(self.hint())
    }

    /// The miss path's view of this handle, inserting under `hint`.
    fn fill_for(&self, hint: ReadHint) -> Fill<'_> {
        Fill {
            cache: &self.cache,
            mapping: &self.mapping,
            fd: &self.fd,
            handle: &self.counters,
            reuse: hint,
        }
    }

    /// The hint of this handle's reads: `NoReuse` after `Advice::NoReuse`, until
    /// `Advice::Normal`.
    #[inline]
    pub fn hint(&self) -> ReadHint {
        if self.no_reuse.load(std::sync::atomic::Ordering::Relaxed) {
            ReadHint::NoReuse
        } else {
            ReadHint::Normal
        }
    }

    /// Reads up to `buf.len()` bytes at `offset` into `buf`. Any offset and length: the
    /// result is short only at the end of the file (0 at or past it, and for an empty
    /// `buf`).
    ///
    /// Errors: `InvalidInput` if `offset + buf.len()` overflows; the I/O error of the read
    /// of a missing page (every reader waiting for that page gets it; a later read
    /// retries); `OutOfMemory` if every folio stays pinned (see `CacheBuilder::alloc_wait`).
    /// Bytes already copied into `buf` when an error occurs are not reported.
    ///
    /// Context: any thread; may sleep waiting for I/O or memory.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.read_at_hint(buf, offset, self.hint())
    }

    /// `read_at` under `hint`, whatever the handle's advice: `ReadHint::NoReuse` for a
    /// read that will not come back (a one-time scan, a compaction's input): the pages it
    /// brings in leave the cache before the working set, and the cached pages it reads are
    /// not counted as used (`eviction::noreuse`).
    ///
    /// Errors and context: as `read_at`.
    pub fn read_at_hint(&self, buf: &mut [u8], offset: u64, hint: ReadHint) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let request_end = checked_end(offset, buf.len())?;
        let core = self.core();
        let last_page = PageIndex::ceil(request_end);
        let mut done = 0usize;
        // Whether a page of this read missed or waited: only such reads record where they
        // ended for the sequential test (`MissRequest::prev_index`), so that hits write
        // nothing shared.
        let mut slow = false;
        let result = loop {
            let end = request_end.min(self.mapping.size_bytes());
            let pos = offset + done as u64;
            if pos >= end {
                break Ok(done);
            }
            let page = PageIndex::containing(pos);
            if let Some((n, frame, head)) =
                self.read_optimistic(page, pos, end, &mut buf[done..], hint)
            {
                core.mem.counters.hit();
                self.note_access(core.mem.arena.meta(frame), page, head, hint);
                done += n;
                continue;
            }
            slow = true;
            let folio = match self.get_uptodate(page, last_page, hint) {
                Ok(Some(folio)) => folio,
                Ok(None) => continue, // the file shrank: `end` drops on the next turn
                Err(e) => break Err(e),
            };
            let end = request_end.min(self.mapping.size_bytes());
            if pos >= end {
                break Ok(done);
            }
            self.note_access(core.mem.arena.meta(folio.frame), page, folio.head, hint);
            let in_folio = (pos - folio.head.offset_bytes()) as usize;
            let n = (folio.order.bytes() - in_folio).min((end - pos) as usize);
            let bytes = core.mem.arena.pinned_bytes(folio.frame, folio.order);
            buf[done..done + n].copy_from_slice(&bytes[in_folio..in_folio + n]);
            done += n;
        };
        if slow && done > 0 {
            self.ra
                .set_prev_index(PageIndex::containing(offset + done as u64 - 1));
        }
        result
    }

    /// A read touched a folio: clears its prefetched bit, and if it carries the readahead
    /// marker, starts the next window. One load when neither is set (the common hit).
    #[inline]
    fn note_access(&self, meta: &FolioMeta, page: PageIndex, head: PageIndex, hint: ReadHint) {
        let state = meta.state.load();
        if !state.is_prefetched() && !state.is_readahead() {
            return;
        }
        meta.state.test_and_clear(PREFETCHED);
        if state.is_readahead() && meta.state.test_and_clear(READAHEAD) {
            let (_, _, order) = meta.identity();
            self.async_readahead(page, head, head.add(order.pages()), hint);
        }
    }

    /// The marker was hit: ramp the window (or restart it after the next hole) and read it
    /// ahead, without waiting for anything.
    fn async_readahead(
        &self,
        page: PageIndex,
        head: PageIndex,
        folio_end: PageIndex,
        hint: ReadHint,
    ) {
        let core = self.core();
        // The walk's answer, and the page it was asked from: a retry that looks from
        // another page (the state changed under the CAS) walks again.
        let mut next_miss: Option<(PageIndex, Option<PageIndex>)> = None;
        let installed = self.update_window(|state, max_pages| {
            // The marker may sit anywhere in a large folio, and the read may touch the
            // folio before reaching the marker page: the window's own marker, if it is in
            // this folio, is the page the policy expects (the kernel compares the folio's
            // index with the marker rounded down to the folio).
            let marker = state.marker();
            let at = if marker >= head.0 && marker < folio_end.0 {
                PageIndex(marker)
            } else {
                page
            };
            let miss = match next_miss {
                Some((from, miss)) if from == at => miss,
                _ => {
                    // The first page the index does not hold, at most a maximum window on.
                    let end = at.add(u64::from(max_pages).max(1));
                    let miss = self.mapping.index.next_miss(at, end);
                    next_miss = Some((at, miss));
                    miss
                }
            };
            self.within_file(readahead::decide_on_marker(state, at, miss, max_pages))
        });
        if let Some(window) = installed {
            stats::bump(&core.mem.counters.readahead_async);
            self.read_ahead(window, hint);
        }
    }

    /// Installs the window `decide` makes from the handle's state (`RaCell::update`), with
    /// the handle's maximum lowered to the cache-wide limit (`readahead::ReadaheadLimit`:
    /// the share of each active stream, lower while readahead thrashes), and counts the
    /// handle as an active stream.
    fn update_window(
        &self,
        mut decide: impl FnMut(readahead::RaState, u32) -> Decision,
    ) -> Option<readahead::RaState> {
        let limit = &self.core().mem.readahead_limit;
        let limit_pages = limit.limit_pages();
        let installed = self
            .ra
            .update(|state, max_pages| decide(state, max_pages.min(limit_pages)));
        if installed.is_some() {
            limit.note_window(&self.ra);
        }
        installed
    }

    /// Reads the gaps of the window the policy installed, and counts what it read ahead
    /// toward the cache-wide limit (`readahead::ReadaheadLimit`). Returns the pages
    /// inserted.
    ///
    /// Context: as `Fill::read_window`: no lock held, never waits for memory.
    fn read_ahead(&self, window: readahead::RaState, hint: ReadHint) -> u64 {
        let pages = self.fill_for(hint).read_window(window_of(window));
        let limit = &self.core().mem.readahead_limit;
        limit.note_read_ahead(pages, window.size);
        pages
    }

    /// A window that starts at or past the end of the file reads nothing: not installed.
    fn within_file(&self, decision: Decision) -> Decision {
        match decision {
            Decision::Window(w)
                if PageIndex(w.start) >= PageIndex::ceil(self.mapping.size_bytes()) =>
            {
                Decision::None
            }
            other => other,
        }
    }

    /// A miss: open a readahead window if the policy says so (and read it, including the
    /// page), else read the missing run up to `read_end`.
    ///
    /// Context: no lock held, no folio pinned by the caller. May sleep in allocation.
    fn on_miss(
        &self,
        page: PageIndex,
        read_end: PageIndex,
        waiter: Waiter,
        hint: ReadHint,
    ) -> io::Result<()> {
        let pages = read_end.0.saturating_sub(page.0).max(1);
        let mut req = MissRequest {
            index: page,
            pages,
            prev_index: self.ra.prev_index(),
            cached_before: 0,
        };
        if !req.is_sequential() {
            // The pages right before `page` that the index holds without a gap, counted up
            // to `pages + 1`: the policy only asks whether there are more than `pages`.
            let floor = PageIndex(page.0.saturating_sub(pages + 1));
            let run_start = match self.mapping.index.prev_miss(page, floor) {
                Some(miss) => miss.0 + 1,
                None => floor.0,
            };
            req.cached_before = page.0 - run_start;
        }
        let installed = self.update_window(|state, max_pages| {
            self.within_file(readahead::decide_on_miss(state, req, max_pages))
        });
        if let Some(window) = installed {
            stats::bump(&self.core().mem.counters.readahead_sync);
            if self.read_ahead(window, hint) > 0 {
                return Ok(());
            }
        }
        self.fill_for(hint).read_missing(page, read_end, waiter)
    }

    /// Reads `[offset, offset + len)` ahead, asynchronously: returns at once, and never
    /// reads a page that is cached or in flight. Goes in chunks of at most 2 MiB; stops
    /// early (it is a hint) when memory is short. Past the end of the file, nothing.
    ///
    /// Errors: `InvalidInput` if `offset + len` overflows.
    ///
    /// Context: any thread; does not wait for I/O or memory.
    pub fn readahead(&self, offset: u64, len: u64) -> io::Result<()> {
        let end = offset
            .checked_add(len)
            .ok_or_else(|| overflow(offset, len))?;
        let end = PageIndex::ceil(end.min(self.mapping.size_bytes()));
        let mut at = PageIndex::containing(offset);
        stats::bump(&self.core().mem.counters.readahead_forced);
        while at < end {
            let chunk_end = end.min(at.add(FORCED_CHUNK_PAGES));
            let pages = self.fill().read_window(Window {
                start: at,
                end: chunk_end,
                marker: None,
                order_cap: Order::MAX,
            });
            // Read ahead too (its pages can be wasted), but not by a window the limit
            // bounds.
            self.core().mem.readahead_limit.note_read_ahead(pages, 0);
            at = chunk_end;
        }
        Ok(())
    }

    /// Tells the cache how this handle will read (`posix_fadvise`): `Normal`,
    /// `Sequential` and `Random` set the handle's readahead (the range is ignored, as the
    /// kernel does); `WillNeed` reads the range ahead; `DontNeed` drops the range's cached
    /// folios that nobody holds (pinned or in-flight ones stay).
    ///
    /// Errors: `InvalidInput` if `offset + len` overflows.
    ///
    /// Context: any thread; does not wait for I/O; `DontNeed` takes the index lock.
    pub fn advise(&self, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
        let end = offset
            .checked_add(len)
            .ok_or_else(|| overflow(offset, len))?;
        let normal = self
            .ra_pages_normal
            .load(std::sync::atomic::Ordering::Relaxed);
        match advice {
            Advice::Normal => {
                self.ra.set_max_pages(normal);
                self.no_reuse
                    .store(false, std::sync::atomic::Ordering::Relaxed);
            }
            Advice::NoReuse => self
                .no_reuse
                .store(true, std::sync::atomic::Ordering::Relaxed),
            Advice::Sequential => self.ra.set_max_pages(
                normal
                    .saturating_mul(2)
                    .min(self.core().readahead_pages_limit()),
            ),
            Advice::Random => {
                self.ra.set_max_pages(0);
                self.ra.reset();
            }
            Advice::WillNeed => self.readahead(offset, len)?,
            Advice::DontNeed => {
                let (start, end) = (PageIndex::ceil(offset), PageIndex::containing(end));
                // Whole pages only, as the kernel: a partial page at either end stays.
                if start < end {
                    self.mapping
                        .invalidate(&self.core().mem, start, end, Invalidate::Unpinned);
                }
            }
        }
        Ok(())
    }

    /// This handle's current readahead window, for diagnostics: (start, size, async
    /// size) in bytes; the marker is at `start + size - async size`.
    pub fn readahead_window(&self) -> ReadaheadWindow {
        let state = self.ra.load();
        ReadaheadWindow {
            start_bytes: state.start * PAGE_BYTES as u64,
            size_bytes: u64::from(state.size) * PAGE_BYTES as u64,
            async_bytes: u64::from(state.async_size) * PAGE_BYTES as u64,
            max_bytes: u64::from(self.ra.max_pages()) * PAGE_BYTES as u64,
        }
    }

    /// Sets this handle's maximum readahead window (rounded down to pages; 0 turns
    /// readahead off; at most 32 MiB and an eighth of the cache). `Advice::Sequential`
    /// doubles it, within the same limits.
    pub fn set_readahead_max_bytes(&self, bytes: u64) {
        let pages = self.core().readahead_pages_for(bytes);
        self.ra_pages_normal
            .store(pages, std::sync::atomic::Ordering::Relaxed);
        self.ra.set_max_pages(pages);
    }

    /// The hit path: copies the bytes of `[pos, end)` that lie in the folio of `page`
    /// without taking a reference; `None` if the folio is absent, not uptodate, or changed
    /// during the copy.
    #[inline]
    fn read_optimistic(
        &self,
        page: PageIndex,
        pos: u64,
        end: u64,
        dst: &mut [u8],
        hint: ReadHint,
    ) -> Option<(usize, FrameId, PageIndex)> {
        let core = self.core();
        let index = &self.mapping.index;
        let Entry::Folio { frame, order, head } = index.lookup_hinted(&self.root_hint, page) else {
            // A miss, or a stale hint: the slow path walks from the root.
            index.refresh_hint(&self.root_hint);
            return None;
        };
        let in_folio = (pos - head.offset_bytes()) as usize;
        let n = (order.bytes() - in_folio).min((end - pos) as usize);
        // The data's first lines load while the version does (two cache misses at once).
        core.mem.arena.prefetch(frame, in_folio, n);
        let meta = core.mem.arena.meta(frame);
        let version = meta.version.begin_read()?;
        if meta.identity() != (self.mapping.id, head, order) {
            index.refresh_hint(&self.root_hint);
            return None;
        }
        core.mem
            .arena
            .copy_out(frame, order, in_folio, &mut dst[..n]);
        if !meta.version.validate(version) {
            stats::bump(&core.mem.counters.optimistic_retries);
            return None;
        }
        if hint == ReadHint::Normal {
            meta.state.touch();
        }
        Some((n, frame, head))
    }

    /// A pinned, zero-copy view of the folio that holds byte `offset`. The folio stays in
    /// memory (it cannot be evicted) until the `PageRef` is dropped, so hold it briefly.
    ///
    /// Errors: `UnexpectedEof` at or past the end of the file; as `read_at` otherwise.
    ///
    /// Context: any thread; may sleep waiting for I/O or memory.
    pub fn get_page(&self, offset: u64) -> io::Result<PageRef> {
        loop {
            self.check_page_offset(offset)?;
            let page = PageIndex::containing(offset);
            if let Some(folio) = self.get_uptodate(page, page.add(1), self.hint())? {
                return Ok(self.page_ref(folio));
            }
        }
    }

    /// `get_page`'s error for an offset at or past the end of the file.
    fn check_page_offset(&self, offset: u64) -> io::Result<()> {
        let size = self.mapping.size_bytes();
        if offset >= size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("folio: offset {offset} is at or past the end of the file ({size} bytes)"),
            ));
        }
        Ok(())
    }

    /// The `PageRef` that keeps `folio`'s reference.
    fn page_ref(&self, folio: Pinned<'_>) -> PageRef {
        let (frame, order, head) = folio.into_raw();
        let valid = (self
            .mapping
            .size_bytes()
            .saturating_sub(head.offset_bytes()) as usize)
            .min(order.bytes());
        PageRef {
            core: self.cache.core.clone(),
            frame,
            order,
            offset_bytes: head.offset_bytes(),
            len_bytes: valid,
        }
    }

    /// A pinned, uptodate folio covering `page`, reading it (and the missing pages after
    /// it up to `read_end`) if needed. `None` if `page` is past the end of the file.
    fn get_uptodate(
        &self,
        page: PageIndex,
        read_end: PageIndex,
        hint: ReadHint,
    ) -> io::Result<Option<Pinned<'_>>> {
        // Whether this access missed: then the folio found next is the one it read (or a
        // racing reader's), which is neither a hit nor a use that raises its frequency
        // (a new folio starts at 0, as eviction policies count).
        let mut missed = false;
        loop {
            let (folio, came) =
                match self.find_for_read(page, read_end, &mut missed, Waiter::Thread, hint)? {
                    Found::PastEnd => return Ok(None),
                    Found::NoMemory => unreachable!("a thread waits for memory in the allocator"),
                    Found::Cached(folio, came) => (folio, came),
                    Found::InFlight(folio, came) => {
                        wait::wait_unlocked(self.core().mem.arena.meta(folio.frame));
                        (folio, came)
                    }
                };
            match self.settle(page, folio, came, hint)? {
                Settled::Uptodate(folio) => return Ok(Some(folio)),
                Settled::PastEnd => return Ok(None),
                Settled::Again => {}
            }
        }
    }

    /// The look-up of a read's slow path: finds the folio of `page` and pins it, reading
    /// it (and the missing pages after it up to `read_end`) if absent; `waiter` says who
    /// will wait for that read. `missed` is the caller's record, over its retries of the
    /// same page, of whether the page was missing.
    ///
    /// Context: no lock held; may sleep in allocation (and, for `Waiter::Thread`, in
    /// the read).
    pub(super) fn find_for_read(
        &self,
        page: PageIndex,
        read_end: PageIndex,
        missed: &mut bool,
        waiter: Waiter,
        hint: ReadHint,
    ) -> io::Result<Found<'_>> {
        let core = self.core();
        loop {
            if page.offset_bytes() >= self.mapping.size_bytes() {
                return Ok(Found::PastEnd);
            }
            let folio = match self.mapping.find_get(&core.mem, page) {
                Ok(folio) => folio,
                Err(_) => {
                    if !*missed {
                        stats::bump(&core.mem.counters.misses);
                        *missed = true;
                    }
                    match self.on_miss(page, read_end, waiter, hint) {
                        Ok(()) => continue,
                        // Every folio pinned or in flight: a future polls again later.
                        Err(e)
                            if waiter == Waiter::Future
                                && e.kind() == io::ErrorKind::OutOfMemory =>
                        {
                            return Ok(Found::NoMemory);
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            let meta = core.mem.arena.meta(folio.frame);
            if !meta.state.load().is_locked() {
                let came = if *missed { Came::Missed } else { Came::Cached };
                return Ok(Found::Cached(folio, came));
            }
            if !*missed {
                stats::bump(&core.mem.counters.waits_on_io);
            }
            // A reader that catches up with an async window reaches its marker while
            // the window is still in flight: start the next window now, before
            // waiting, so the disk has two windows queued and never idles between
            // them (the kernel's filemap_get_pages does the same).
            self.note_access(meta, page, folio.head, hint);
            let came = if *missed {
                Came::Missed
            } else {
                Came::WaitedForIo
            };
            return Ok(Found::InFlight(folio, came));
        }
    }

    /// What a folio that is no longer LOCKED holds for a read of `page`: its bytes
    /// (counted as `came` says), the end of the file, or nothing yet (the file changed
    /// during its read, or the folio left the index: look again).
    ///
    /// Errors: the folio's read failed (every reader waiting for it gets the error).
    ///
    /// Context: no lock held; never sleeps.
    pub(super) fn settle<'c>(
        &'c self,
        page: PageIndex,
        folio: Pinned<'c>,
        came: Came,
        hint: ReadHint,
    ) -> io::Result<Settled<'c>> {
        let core = self.core();
        let meta = core.mem.arena.meta(folio.frame);
        let state = meta.state.load();
        if state.is_uptodate() {
            let touch = hint == ReadHint::Normal;
            match came {
                Came::Missed => {}
                Came::WaitedForIo if touch => meta.state.touch(),
                Came::WaitedForIo => {}
                Came::Cached => {
                    stats::bump(&core.mem.counters.pinned_hits);
                    if touch {
                        meta.state.touch();
                    }
                }
            }
            return Ok(Settled::Uptodate(folio));
        }
        if state.is_error() {
            let errno = meta.errno();
            drop(folio);
            if page.offset_bytes() >= self.mapping.size_bytes() {
                return Ok(Settled::PastEnd);
            }
            if errno == libc::ESTALE {
                return Ok(Settled::Again); // the file changed during the read: read it again
            }
            return Err(io::Error::from_raw_os_error(errno));
        }
        Ok(Settled::Again)
    }
}

/// What `File::find_for_read` found: a folio to read from now, one whose read is in
/// flight (wait until it is not LOCKED, then `settle`), the end of the file, or (for a
/// future only) no memory to read the page into yet.
pub(super) enum Found<'c> {
    Cached(Pinned<'c>, Came),
    InFlight(Pinned<'c>, Came),
    PastEnd,
    NoMemory,
}

/// How a read came by its folio, which decides what `settle` counts: a miss counts
/// nothing more and leaves a new folio's frequency at 0; a wait for another reader's
/// I/O raises the frequency; a pinned hit counts as a hit too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Came {
    Missed,
    WaitedForIo,
    Cached,
}

/// What `File::settle` says of a folio that is no longer LOCKED.
pub(super) enum Settled<'c> {
    Uptodate(Pinned<'c>),
    PastEnd,
    Again,
}

impl Drop for File {
    /// Gives the handle back to the mapping: the last one may forget it
    /// (`MappingTable::close`). Reads this handle submitted keep their own references.
    fn drop(&mut self) {
        let core = self.core();
        core.mappings.close(&core.mem, &self.mapping);
    }
}

/// The window the policy installed, as pages to read.
fn window_of(state: readahead::RaState) -> Window {
    Window {
        start: PageIndex(state.start),
        end: PageIndex(state.end()),
        marker: Some(PageIndex(state.marker())),
        order_cap: Order::new(state.folio_order()),
    }
}

fn overflow(offset: u64, len: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("folio: offset {offset} + length {len} overflows a 64-bit file offset"),
    )
}

fn checked_end(offset: u64, len: usize) -> io::Result<u64> {
    offset.checked_add(len as u64).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("folio: offset {offset} + length {len} overflows a 64-bit file offset"),
        )
    })
}

/// A pinned, zero-copy view of one folio of a file: its bytes up to the end of the file.
/// The folio cannot be evicted while this lives; dropping it unpins the folio.
pub struct PageRef {
    core: Arc<Core>,
    frame: FrameId,
    order: Order,
    offset_bytes: u64,
    len_bytes: usize,
}

impl PageRef {
    /// The file offset of the first byte of this view (the folio's start, 4 KiB aligned).
    pub fn offset_bytes(&self) -> u64 {
        self.offset_bytes
    }

    /// The folio's size: 4 KiB to 2 MiB (its bytes past the end of the file excluded).
    pub fn len_bytes(&self) -> usize {
        self.len_bytes
    }
}

impl Deref for PageRef {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.core.mem.arena.pinned_bytes(self.frame, self.order)[..self.len_bytes]
    }
}

impl Drop for PageRef {
    fn drop(&mut self) {
        self.core.mem.put_folio(self.frame);
    }
}

impl std::fmt::Debug for PageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageRef")
            .field("offset_bytes", &self.offset_bytes)
            .field("len_bytes", &self.len_bytes)
            .finish()
    }
}
