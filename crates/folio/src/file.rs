//! A file handle: reads through the cache, and the path of a read.
//!
//! `read_at` first tries the optimistic hit path (`version`): look the page up without a
//! lock, copy its bytes with atomic per-word loads, validate the version. No atomic
//! read-modify-write happens on that path: the hit is counted in a per-thread counter and
//! the CLOCK bit is stored only if it is not already set.
//!
//! Otherwise it takes the pinned path: `Mapping::find_get` (refcount protocol), waits for
//! in-flight I/O on the parked wait table, and copies from the pinned folio. A page that
//! is not in the index is read: the missing run up to the next cached page (or the end of
//! the request) is allocated as the largest aligned folios that fit, inserted in one walk
//! under one hold of the index lock, and submitted as one read per contiguous run.
//!
//! The completion (`complete_read`, on a backend thread) publishes each folio's bytes
//! (version, UPTODATE, unlock, wake), or on failure removes the folios from the index,
//! records the errno for their waiters and wakes them: an error is never cached, and the
//! next read of the page retries. A read that comes back short before the known end of the
//! file is completed with a synchronous `pread`; if the file really shrank, the mapping
//! adopts the new size and drops the pages past it.

use std::fs::File as StdFile;
use std::io;
use std::ops::Deref;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crossbeam_epoch as epoch;

use crate::cache::{AllocMode, CacheInner, Core};
use crate::index::{Entry, Leave, NewFolio};
use crate::io::{FrameBuf, ReadRequest, READ_BYTES_MAX};
use crate::mapping::{Mapping, Pinned};
use crate::refcount::{PutOutcome, ERROR, LOCKED, REFERENCED, UPTODATE};
use crate::stats;
use crate::types::{FrameId, Order, PageIndex, PAGE_BYTES};
use crate::wait;

/// Short reads completed by a synchronous retry before the read is declared failed.
const SHORT_READ_RETRIES_MAX: u32 = 3;

/// An open file, read through its cache. Safe to share between threads (`&File` is all a
/// read needs); RocksDB-style engines share one handle among all their reader threads.
pub struct File {
    cache: Arc<CacheInner>,
    mapping: Arc<Mapping>,
    fd: Arc<StdFile>,
    direct: bool,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("mapping", &self.mapping.id)
            .field("len", &self.len())
            .field("direct", &self.direct)
            .finish()
    }
}

impl File {
    pub(crate) fn new(
        cache: Arc<CacheInner>,
        mapping: Arc<Mapping>,
        fd: Arc<StdFile>,
        direct: bool,
    ) -> File {
        File {
            cache,
            mapping,
            fd,
            direct,
        }
    }

    /// The file's length in bytes, as the cache knows it (from open, lowered when a read
    /// finds the file shorter).
    pub fn len(&self) -> u64 {
        self.mapping.size_bytes()
    }

    /// Re-reads the file's length from the kernel (`fstat`) and adopts it: cached pages
    /// past a smaller length are dropped, so no byte past the new end is ever returned;
    /// a larger length makes appended bytes readable. Returns the new length.
    ///
    /// Context: any thread; one system call; takes the index lock if pages are dropped.
    pub fn refresh_len(&self) -> io::Result<u64> {
        let size = self.fd.metadata()?.len();
        self.mapping.resize(self.core(), size);
        Ok(size)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether reads bypass the kernel's page cache (false where the file system refused
    /// O_DIRECT and the file was opened buffered).
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    fn core(&self) -> &Core {
        &self.cache.core
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
        if buf.is_empty() {
            return Ok(0);
        }
        let request_end = checked_end(offset, buf.len())?;
        let core = self.core();
        let last_page = PageIndex::ceil(request_end);
        let mut done = 0usize;
        loop {
            let end = request_end.min(self.mapping.size_bytes());
            let pos = offset + done as u64;
            if pos >= end {
                return Ok(done);
            }
            let page = PageIndex::containing(pos);
            if let Some(n) = self.read_optimistic(page, pos, end, &mut buf[done..]) {
                core.counters.hit();
                done += n;
                continue;
            }
            let Some(folio) = self.get_uptodate(page, last_page)? else {
                continue; // the file shrank: `end` drops on the next turn
            };
            let end = request_end.min(self.mapping.size_bytes());
            if pos >= end {
                return Ok(done);
            }
            let in_folio = (pos - folio.head.offset_bytes()) as usize;
            let n = (folio.order.bytes() - in_folio).min((end - pos) as usize);
            let bytes = core.arena.pinned_bytes(folio.frame, folio.order);
            buf[done..done + n].copy_from_slice(&bytes[in_folio..in_folio + n]);
            done += n;
        }
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
    ) -> Option<usize> {
        let core = self.core();
        let guard = epoch::pin();
        let Entry::Folio { frame, order, head } = self.mapping.index.lookup(page, &guard) else {
            return None;
        };
        drop(guard);
        let meta = core.arena.meta(frame);
        let version = meta.version.begin_read()?;
        if meta.identity() != (self.mapping.id, head, order) {
            return None;
        }
        let in_folio = (pos - head.offset_bytes()) as usize;
        let n = (order.bytes() - in_folio).min((end - pos) as usize);
        core.arena.copy_out(frame, order, in_folio, &mut dst[..n]);
        if !meta.version.validate(version) {
            stats::bump(&core.counters.optimistic_retries);
            return None;
        }
        meta.state.set_flags(REFERENCED);
        Some(n)
    }

    /// A pinned, zero-copy view of the folio that holds byte `offset`. The folio stays in
    /// memory (it cannot be evicted) until the `PageRef` is dropped, so hold it briefly.
    ///
    /// Errors: `UnexpectedEof` at or past the end of the file; as `read_at` otherwise.
    ///
    /// Context: any thread; may sleep waiting for I/O or memory.
    pub fn get_page(&self, offset: u64) -> io::Result<PageRef> {
        loop {
            let size = self.mapping.size_bytes();
            if offset >= size {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "folio: offset {offset} is at or past the end of the file ({size} bytes)"
                    ),
                ));
            }
            let page = PageIndex::containing(offset);
            let Some(folio) = self.get_uptodate(page, page.add(1))? else {
                continue;
            };
            let (frame, order, head) = folio.into_raw();
            let valid = (self
                .mapping
                .size_bytes()
                .saturating_sub(head.offset_bytes()) as usize)
                .min(order.bytes());
            return Ok(PageRef {
                core: self.cache.core.clone(),
                frame,
                order,
                offset_bytes: head.offset_bytes(),
                len_bytes: valid,
            });
        }
    }

    /// A pinned, uptodate folio covering `page`, reading it (and the missing pages after
    /// it up to `read_end`) if needed. `None` if `page` is past the end of the file.
    fn get_uptodate(&self, page: PageIndex, read_end: PageIndex) -> io::Result<Option<Pinned<'_>>> {
        let core = self.core();
        loop {
            if page.offset_bytes() >= self.mapping.size_bytes() {
                return Ok(None);
            }
            let found = self.mapping.find_get(core, page, &epoch::pin());
            let folio = match found {
                Ok(folio) => folio,
                Err(_) => {
                    stats::bump(&core.counters.misses);
                    self.read_missing(page, read_end)?;
                    continue;
                }
            };
            let meta = core.arena.meta(folio.frame);
            if meta.state.load() & LOCKED != 0 {
                stats::bump(&core.counters.waits_on_io);
                wait::wait_unlocked(meta);
            } else {
                stats::bump(&core.counters.pinned_hits);
            }
            let state = meta.state.load();
            if state & UPTODATE != 0 {
                meta.state.set_flags(REFERENCED);
                return Ok(Some(folio));
            }
            if state & ERROR != 0 {
                let errno = meta.errno();
                drop(folio);
                if page.offset_bytes() >= self.mapping.size_bytes() {
                    return Ok(None);
                }
                return Err(io::Error::from_raw_os_error(errno));
            }
        }
    }

    /// Reads the missing pages from `page` up to the next cached page or `read_end`:
    /// allocate, insert as one run, submit one read per contiguous run. Returns once
    /// submitted; the caller waits on the folio.
    ///
    /// Context: no lock held, no folio pinned by the caller. May sleep in allocation.
    fn read_missing(&self, page: PageIndex, read_end: PageIndex) -> io::Result<()> {
        let core = self.core();
        let size_pages = PageIndex::ceil(self.mapping.size_bytes());
        // One run never takes more than an eighth of the cache, so that concurrent
        // readers always find memory.
        let run_pages_max = (u64::from(core.arena.frame_count()) / 8).clamp(1, 512);
        let mut end = read_end
            .min(size_pages)
            .min(page.add(run_pages_max))
            .max(page.add(1));
        let guard = epoch::pin();
        for p in page.0 + 1..end.0 {
            if matches!(
                self.mapping.index.lookup(PageIndex(p), &guard),
                Entry::Folio { .. }
            ) {
                end = PageIndex(p);
                break;
            }
        }
        drop(guard);
        let mut run: Vec<NewFolio> = Vec::new();
        let mut at = page;
        while at < end {
            let want = Order::largest_fitting(at, end.0 - at.0, core.folio_order_max);
            let mode = if run.is_empty() {
                AllocMode::Wait
            } else {
                AllocMode::NoWait
            };
            let (frame, order) = match core.alloc_folio(want, mode) {
                Ok(got) => got,
                Err(e) if run.is_empty() => return Err(e),
                Err(_) => break,
            };
            core.arena
                .meta(frame)
                .set_identity(self.mapping.id, at, order);
            run.push(NewFolio {
                frame,
                order,
                head: at,
            });
            at = at.add(order.pages());
        }
        self.insert_and_submit(run);
        Ok(())
    }

    /// Inserts a run of LOCKED folios in one walk under one hold of the index lock, gives
    /// back those a racing reader placed first, and submits the rest.
    fn insert_and_submit(&self, run: Vec<NewFolio>) {
        let core = self.core();
        let pages: u64 = run.iter().map(|f| f.order.pages()).sum();
        let outcome = self.mapping.index.lock_for_insert(pages).insert_run(&run);
        stats::add(&core.counters.refaults, outcome.shadows.len() as u64);
        let mut runs: Vec<Vec<NewFolio>> = Vec::new();
        let mut next_head = None;
        for (folio, inserted) in run.into_iter().zip(outcome.inserted) {
            if !inserted {
                stats::bump(&core.counters.insert_conflicts);
                if core.arena.meta(folio.frame).state.abandon_locked() == PutOutcome::Free {
                    core.arena.free(folio.frame, folio.order);
                }
                next_head = None;
                continue;
            }
            stats::add(&core.counters.pages_inserted, folio.order.pages());
            let run_bytes: usize = runs
                .last()
                .map_or(0, |r| r.iter().map(|f| f.order.bytes()).sum());
            if next_head == Some(folio.head) && run_bytes + folio.order.bytes() <= READ_BYTES_MAX {
                runs.last_mut().expect("a run is open").push(folio);
            } else {
                runs.push(vec![folio]);
            }
            next_head = Some(folio.head.add(folio.order.pages()));
        }
        let requests = runs.into_iter().map(|run| self.request_for(run)).collect();
        self.cache.backend.submit(requests);
    }

    fn request_for(&self, run: Vec<NewFolio>) -> ReadRequest {
        let core = self.cache.core.clone();
        let mapping = self.mapping.clone();
        let file = self.fd.clone();
        let offset_bytes = run[0].head.offset_bytes();
        let bufs: Vec<FrameBuf> = run
            .iter()
            .map(|f| core.arena.io_buf(f.frame, f.order))
            .collect();
        let len_bytes: usize = bufs.iter().map(|b| b.len_bytes()).sum();
        stats::bump(&core.counters.io_requests);
        stats::add(&core.counters.io_bytes, len_bytes as u64);
        let done_file = file.clone();
        let done_bufs = bufs.clone();
        ReadRequest {
            file,
            offset_bytes,
            bufs,
            done: Box::new(move |result| {
                complete_read(
                    &core,
                    &mapping,
                    &done_file,
                    offset_bytes,
                    &run,
                    &done_bufs,
                    result,
                )
            }),
        }
    }
}

fn checked_end(offset: u64, len: usize) -> io::Result<u64> {
    offset.checked_add(len as u64).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("folio: offset {offset} + length {len} overflows a 64-bit file offset"),
        )
    })
}

/// The completion of one read of a run of folios (module docs).
///
/// Context: a backend thread; no lock held. Takes the index lock on failure.
fn complete_read(
    core: &Core,
    mapping: &Mapping,
    file: &StdFile,
    offset_bytes: u64,
    run: &[NewFolio],
    bufs: &[FrameBuf],
    result: io::Result<usize>,
) {
    let total: usize = bufs.iter().map(|b| b.len_bytes()).sum();
    let result =
        result.and_then(|n| finish_short_read(core, file, offset_bytes, bufs, n.min(total)));
    let n = match result {
        Ok(n) => n,
        Err(e) => {
            stats::bump(&core.counters.io_errors);
            fail_folios(core, mapping, run, e.raw_os_error().unwrap_or(libc::EIO));
            return;
        }
    };
    let mut failed = Vec::new();
    let mut at = 0usize;
    for folio in run {
        let bytes = folio.order.bytes();
        let valid = n.saturating_sub(at).min(bytes);
        if valid == 0 {
            // Past the end of the file, which shrank since the mapping's size was read.
            failed.push(*folio);
        } else {
            if valid < bytes {
                core.arena.zero_tail(folio.frame, folio.order, valid);
            }
            let meta = core.arena.meta(folio.frame);
            meta.version.publish();
            meta.state.finish_read_ok();
            wait::wake_all(meta);
        }
        at += bytes;
    }
    if n < total && offset_bytes + (n as u64) < mapping.size_bytes() {
        // The file is shorter than the mapping believed: it shrank. Learn its real size
        // (it may have shrunk below this read's offset, past pages already cached) and
        // drop everything past it.
        let real = file.metadata().map_or(u64::MAX, |m| m.len());
        mapping.shrink_to(core, real.min(offset_bytes + n as u64));
    }
    if !failed.is_empty() {
        fail_folios(core, mapping, &failed, libc::ESTALE);
    }
}

/// Completes a read that came back short before the end of its buffers with synchronous
/// `pread`s; returns the bytes finally read (short only at the real end of the file).
fn finish_short_read(
    core: &Core,
    file: &StdFile,
    offset_bytes: u64,
    bufs: &[FrameBuf],
    mut n: usize,
) -> io::Result<usize> {
    let total: usize = bufs.iter().map(|b| b.len_bytes()).sum();
    let mut tries = 0;
    // An unaligned count is the end of the file (O_DIRECT reads whole blocks otherwise).
    while n < total && n % PAGE_BYTES == 0 && tries < SHORT_READ_RETRIES_MAX {
        tries += 1;
        stats::bump(&core.counters.short_read_retries);
        let (buf, skip) = locate(bufs, n);
        let part = buf.tail(skip);
        // SAFETY: the buffer is arena memory of LOCKED folios that this read owns (the
        // backend has completed, so nothing else writes it); their version is odd, so no
        // optimistic reader copies from it.
        let dst = unsafe { std::slice::from_raw_parts_mut(part.as_ptr(), part.len_bytes()) };
        let got = file.read_at(dst, offset_bytes + n as u64)?;
        if got == 0 {
            break;
        }
        n += got;
    }
    if n < total && n % PAGE_BYTES == 0 && tries == SHORT_READ_RETRIES_MAX {
        let size = file.metadata()?.len();
        if offset_bytes + (n as u64) < size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("folio: read at {offset_bytes} stayed short at {n} of {total} bytes"),
            ));
        }
    }
    Ok(n)
}

/// The buffer that holds byte `at` of a request, and the offset in it.
fn locate(bufs: &[FrameBuf], mut at: usize) -> (FrameBuf, usize) {
    for buf in bufs {
        if at < buf.len_bytes() {
            return (*buf, at);
        }
        at -= buf.len_bytes();
    }
    unreachable!("offset past the request's buffers")
}

/// A read failed: remove its folios from the index (one lock hold), record the errno,
/// unlock and wake every waiter. The folios' frames go back when the last waiter lets go.
fn fail_folios(core: &Core, mapping: &Mapping, run: &[NewFolio], errno: i32) {
    let mut w = mapping.index.lock();
    for folio in run {
        let removed = w.remove_folio(folio.head, folio.frame, Leave::Empty);
        debug_assert!(removed, "a LOCKED folio left the index");
    }
    drop(w);
    for folio in run {
        let meta = core.arena.meta(folio.frame);
        meta.set_errno(errno);
        let outcome = meta.state.finish_read_err();
        wait::wake_all(meta);
        if outcome == PutOutcome::Free {
            core.arena.free(folio.frame, folio.order);
        }
    }
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
        &self.core.arena.pinned_bytes(self.frame, self.order)[..self.len_bytes]
    }
}

impl Drop for PageRef {
    fn drop(&mut self) {
        self.core.put_folio(self.frame, self.order);
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
