//! The write side of a file handle (DESIGN.md §8): `write_at`, `set_len`, the syncs and
//! `writeback`.
//!
//! # The write protocol (one folio)
//!
//! W1. Under the file's writer lock (writers of one file go one at a time, as under the
//!     kernel's inode lock), pin the folio of the page, waiting for a read in flight. A
//!     page that is not cached is read first when the write covers only part of it and the
//!     rest holds bytes of the file; otherwise a new folio is filled with zeros and the
//!     written bytes, and inserted dirty (no read).
//! W2. Wait while the folio is under WRITEBACK (stable pages: the device reads it).
//! W3. `try_lock_for_write`: one CAS takes LOCKED if only the index and this writer hold
//!     the folio. Whether the folio was dirty (`Prior`: are its mask words valid, must
//!     W4 set the index mark?) is read from the word that CAS replaced, never from an
//!     earlier load: a writeback may start and end, or fail, in between. If someone else holds a pin (a reader copying out of it, a `PageRef`),
//!     copy on write: a new folio takes its bytes and dirty blocks and replaces it in the
//!     index (`Fill::replace_for_write`); the holders keep the old bytes, as the holders
//!     of a truncated page do. So no shared borrow of a folio's bytes ever sees them change.
//! W4. Move the version odd, copy with atomic stores, move it even (optimistic readers
//!     that overlap retry, `version`); extend the file's size to the end of the bytes
//!     written; mark the written blocks (`BlockMask::mark`) and, if the folio was clean,
//!     its index `Dirty` mark. The size moves before W5, as the kernel's
//!     `generic_write_end` moves `i_size` before it unlocks the folio: writeback does not
//!     write blocks past the end (B2), so a writeback that took the folio after W5 and
//!     read the old size would clean it without writing the new bytes.
//! W5. DIRTY set and LOCKED cleared in one step; waiters woken.
//!
//! A write holds its bytes for the whole call (`WriteState::lock_range`: a write that
//! overlaps waits, so each is applied whole). If it extends the file past what is
//! reserved on disk it first reserves space (`fallocate`), so ENOSPC reaches the writer;
//! then, piece by piece (a few pages), it reserves the piece's pages in the dirty budget
//! (waiting there while the cache is at its dirty limit: the throttle) and takes the
//! writer lock for W1-W5 of the piece only, so no writer holds it while throttled.
//! The interplay with writeback is in `writeback`'s module docs; both are model-checked
//! in `tests/loom_models.rs` (`write_vs_optimistic_read`, `write_vs_writeback*`,
//! `dirty_folio_vs_reclaim_*`).
//!
//! Protection: the write's byte range (`WriteState::lock_range`) for the whole call, the
//! whole file for `set_len`; the file's writer lock (`WriteState::lock_writer`) for W1-W5
//! and `set_len`; the state word for the rest.

use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{checked_end, overflow, Access, File};
use crate::arena::FolioUse;
use crate::dirty::{BlockMask, Blocks, Prior};
use crate::eviction::ReadHint;
use crate::filemap::Replaced;
use crate::index::NewFolio;
use crate::io::{sync, FlushKind};
use crate::mapping::{Invalidate, Pinned};
use crate::pagecache::AllocMode;
use crate::refcount::WriteLock;
use crate::stats;
use crate::types::{FrameId, Order, PageIndex, PAGE_BYTES};
use crate::wait;
use crate::writeback::{self, Take};

/// Space reserved on disk past the end of a write that extends the file: an eighth of the
/// file's size, within these bounds.
const RESERVE_AHEAD_MIN_BYTES: u64 = 1 << 20;
const RESERVE_AHEAD_MAX_BYTES: u64 = 64 << 20;

/// Times a writer retries taking a folio that someone pins before it copies on write.
const PINNED_RETRIES: u32 = 3;

/// Files larger than this cannot be written (the page index is 52 bits).
const FILE_BYTES_MAX: u64 = 1 << 62;

/// A folio that W3 gave the writer.
struct Locked {
    frame: FrameId,
    order: Order,
    head: PageIndex,
    prior: Prior,
    /// Whether the folio is a copy that was never published (its version is odd).
    fresh: Fresh,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fresh {
    /// A folio readers have seen: version moved around the copy.
    Published,
    /// A copy made by W3 (or a new page): published when the writer is done.
    Copy,
}

/// Whether a writer's change dirtied the folio.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// Bytes of the file changed, up to `end_bytes`: the file's size reaches it before
    /// W5 sets DIRTY (module docs, W4).
    Dirtied { end_bytes: u64 },
    /// Only bytes past the end of the file were zeroed (`set_len`): the dirty state
    /// stays as it was.
    PastEnd,
}

/// Which sync a handle asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SyncKind {
    Data,
    All,
}

impl File {
    /// Whether this handle may write (opened with `Cache::open_options().write(true)`).
    pub fn is_writable(&self) -> bool {
        self.access == Access::ReadWrite
    }

    fn check_writable(&self) -> io::Result<()> {
        if !self.is_writable() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "folio: the file was opened read-only (use Cache::open_options().write(true))",
            ));
        }
        if let Some(errno) = self.mapping.write.failed() {
            return Err(failed_error(errno));
        }
        Ok(())
    }

    /// Writes all of `buf` at `offset` into the cache and returns `buf.len()`: any offset
    /// and length; past the end the file grows (a hole between reads as zeros). Every
    /// handle of the file reads the new bytes once this returns. Nothing is durable before
    /// a sync (`sync_data`, `sync_all`, `sync_range`); the background writeback writes
    /// dirty pages older than the cache's expiry.
    ///
    /// Errors: `PermissionDenied` on a read-only handle; `InvalidInput` if `offset +
    /// buf.len()` overflows; `FileTooLarge` past 2^62 bytes; ENOSPC if the file system
    /// cannot hold the extension; the error a file was given up with after its writeback
    /// kept failing; the error of reading the rest of a partly written page; `OutOfMemory`
    /// as for reads. On an error, bytes before the failed page may have been written.
    ///
    /// Context: any thread; may sleep: throttled at the dirty limit, for a writeback of
    /// the same page, for other writers of the file, for a read or for memory.
    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.check_writable()?;
        if buf.is_empty() {
            return Ok(0);
        }
        let end = checked_end(offset, buf.len())?;
        if end > FILE_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("folio: a write up to byte {end} is past the 2^62-byte file limit"),
            ));
        }
        let core = self.core();
        let counters = &core.mem.counters;
        let write = &self.mapping.write;
        // The whole call holds its bytes: a write that overlaps waits, and is applied
        // after this one, whole (`range_lock`).
        let _range = write.lock_range(offset, end);
        #[cfg(any(debug_assertions, feature = "invariants"))]
        let _audit = AuditedWrite::start(write, offset, end);
        write.note_written();
        let size_before = self.mapping.size_bytes();
        self.reserve_space(offset, end)?;
        let piece_pages = core.mem.dirty.charge_max_pages();
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let page = PageIndex::containing(pos);
            let piece_end = end.min(page.add(piece_pages).offset_bytes());
            let pages = PageIndex::ceil(piece_end).0 - page.0;
            let waited = core.mem.dirty.charge(pages, &|| core.dirty_files.kick());
            if waited > Duration::ZERO {
                stats::bump(&counters.throttled_writers);
                stats::add(&counters.throttled_ns, waited.as_nanos() as u64);
            }
            let len = (piece_end - pos) as usize;
            self.wait_for_writeback(page, PageIndex::ceil(piece_end));
            let writer = write.lock_writer();
            let result = self.write_piece(&buf[done..done + len], pos);
            drop(writer);
            let newly = *result.as_ref().unwrap_or(&0);
            core.mem.dirty.uncharge(pages.saturating_sub(newly));
            if newly > 0 {
                core.dirty_files.note_dirty(&self.mapping);
            }
            result?;
            done += len;
        }
        stats::bump(&counters.write_requests);
        stats::add(&counters.write_bytes, buf.len() as u64);
        if core.mem.dirty.over_background() {
            core.dirty_files.kick();
        }
        self.write_behind(offset, end, size_before);
        Ok(buf.len())
    }

    /// Write-behind (`CacheBuilder::write_behind_bytes`): an append (a write from at or
    /// before the end of the file, `size_before`, to past it) leaves whole pages behind it
    /// that the writer will not touch again. Once `Core::write_behind_pages` of them have
    /// gathered since the last time, the writeback thread is handed their range and starts
    /// their writeback (B1-B2 with `Take::Dirty`, as `File::writeback`), and the writer
    /// goes on: its next sync then finds most of what it must make durable written or in
    /// flight, and waits for the device only for the rest. The submission is the
    /// writeback thread's, not the writer's: ext4 cannot issue an O_DIRECT write that
    /// extends the file without blocking, so io_uring tries it inline and then hands it
    /// to a worker, and submitted from the writer that put an append's p99 at 150 us
    /// (reference VM). The folio the writer is still filling (the one that holds byte
    /// `end`) is left out, so that the next append never waits for its write (stable
    /// pages, W2). A write inside the file is not an append (a random overwrite that
    /// touches the last page, a file grown by `set_len` being filled); a write past the
    /// end leaves a hole and starts a new run of appends at its first page.
    ///
    /// Measured (writeseq, 8 KiB appends, a sync every 1 MiB): see docs/writes.md.
    ///
    /// Context: no lock held; does not wait for I/O.
    fn write_behind(&self, offset: u64, end: u64, size_before: u64) {
        let core = self.core();
        let pages = core.write_behind_pages;
        let behind = &self.mapping.write.behind;
        if pages == 0 || end <= size_before {
            return; // off, or not an append
        }
        if offset > size_before {
            behind.store(PageIndex::containing(offset).0, Ordering::Relaxed);
            return; // a hole: appends start again here
        }
        let from = behind.load(Ordering::Relaxed);
        let mut to = PageIndex::containing(end);
        // Only `to` lowered by the folio below can change the answer, so most appends
        // (short of the threshold) return before the index look-up.
        if to.0 < from.saturating_add(pages) {
            return;
        }
        if let crate::index::Entry::Folio { head, order, .. } =
            self.mapping.index.lookup(PageIndex(to.0.saturating_sub(1)))
        {
            if head.add(order.pages()) > to {
                to = head; // a large folio the writer is still filling
            }
        }
        if to.0 < from.saturating_add(pages)
            || behind
                .compare_exchange(from, to.0, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        core.dirty_files
            .write_behind(&self.mapping, PageIndex(from), to);
    }

    /// W2 ahead of the writer lock: waits for the writebacks in flight on `[start, end)`,
    /// so that a writer does not wait for the device while holding the file's writer lock
    /// (every other writer of the file would wait too). A writeback that starts after this
    /// is waited for under the lock (W2), which is rare.
    ///
    /// Context: no lock held; may sleep for writes in flight.
    fn wait_for_writeback(&self, start: PageIndex, end: PageIndex) {
        let arena = &self.core().mem.arena;
        let mut page = start;
        while page < end {
            let crate::index::Entry::Folio { frame, order, head } = self.mapping.index.lookup(page)
            else {
                page = page.add(1);
                continue;
            };
            // No pin: a folio under writeback cannot leave the index, and a stale look
            // at a reused frame only waits for another folio's write.
            wait::wait_writeback_done(arena.meta(frame));
            page = head.add(order.pages()).max(page.add(1));
        }
    }

    /// Reserves disk space up to `end` (and some ahead) when a write goes past what is
    /// reserved, so that ENOSPC is the writer's error, not a later writeback's.
    fn reserve_space(&self, offset: u64, end: u64) -> io::Result<()> {
        let write = &self.mapping.write;
        let reserved = write.reserved_bytes.load(Ordering::Acquire);
        if end <= reserved {
            return Ok(());
        }
        let from = offset.max(reserved) & !(PAGE_BYTES as u64 - 1);
        let ahead = (end / 8).clamp(RESERVE_AHEAD_MIN_BYTES, RESERVE_AHEAD_MAX_BYTES);
        let to = end.saturating_add(ahead).min(FILE_BYTES_MAX);
        let result = sync::allocate(&self.fd, from, to - from)
            .map(|()| to)
            .or_else(|e| match e.raw_os_error() {
                // Not enough for the reserve ahead: the write's own bytes may still fit.
                Some(libc::ENOSPC) => sync::allocate(&self.fd, from, end - from).map(|()| end),
                _ => Err(e),
            });
        match result {
            Ok(reserved_to) => {
                write
                    .reserved_bytes
                    .fetch_max(reserved_to, Ordering::AcqRel);
                Ok(())
            }
            // A file system without `fallocate`: writeback reports ENOSPC, as the kernel's
            // delayed allocation can.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
                ) =>
            {
                write.reserved_bytes.store(u64::MAX, Ordering::Release);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// W1-W5 for `src` at `pos`, folio by folio. Returns the pages newly dirtied.
    ///
    /// Context: the file's writer lock held.
    fn write_piece(&self, src: &[u8], pos: u64) -> io::Result<u64> {
        let mut newly = 0;
        let mut at = 0usize;
        while at < src.len() {
            let p = pos + at as u64;
            let page = PageIndex::containing(p);
            let in_page = (p - page.offset_bytes()) as usize;
            let page_len = (PAGE_BYTES - in_page).min(src.len() - at);
            let n = match self.lock_for_write(page, in_page, page_len, &src[at..at + page_len])? {
                Prepared::Written(n) => {
                    newly += 1;
                    n
                }
                Prepared::Locked(locked) => {
                    let in_folio = (p - locked.head.offset_bytes()) as usize;
                    let n = (locked.order.bytes() - in_folio).min(src.len() - at);
                    let end_bytes = p + n as u64;
                    newly += self.change(
                        &locked,
                        in_folio,
                        Some(&src[at..at + n]),
                        n,
                        Change::Dirtied { end_bytes },
                    );
                    n
                }
            };
            at += n;
        }
        Ok(newly)
    }

    /// W1-W3 for the folio of `page`: a folio locked for writing, or (for a new page that
    /// needs no read) the page written and inserted whole, `page_src` being the bytes for
    /// it from `in_page` on.
    ///
    /// Context: the file's writer lock held; may sleep for I/O or memory.
    fn lock_for_write(
        &self,
        page: PageIndex,
        in_page: usize,
        page_len: usize,
        page_src: &[u8],
    ) -> io::Result<Prepared> {
        let core = self.core();
        let mut pinned_tries = 0;
        loop {
            let folio = match self.mapping.find_get(&core.mem, page) {
                Ok(folio) => folio,
                Err(_) => {
                    let size = self.mapping.size_bytes();
                    let start = page.offset_bytes();
                    let rest_is_file = start < size
                        && !(in_page == 0
                            && (page_len == PAGE_BYTES || start + page_len as u64 >= size));
                    if rest_is_file {
                        // Read it (the miss path), then write into what was read.
                        match self.get_uptodate(page, page.add(1), ReadHint::Normal)? {
                            Some(folio) => drop(folio),
                            None => continue,
                        }
                        continue;
                    }
                    match self.write_new_page(page, in_page, page_src)? {
                        Some(n) => return Ok(Prepared::Written(n)),
                        None => continue, // a reader inserted the page first
                    }
                }
            };
            let meta = core.mem.arena.meta(folio.frame);
            if meta.state.load().is_locked() {
                wait::wait_unlocked(meta);
            }
            if !meta.state.load().is_uptodate() {
                // The read failed: `get_uptodate` returns its error (or reads it again).
                drop(folio);
                self.get_uptodate(page, page.add(1), ReadHint::Normal)?;
                continue;
            }
            match meta.state.try_lock_for_write() {
                WriteLock::Locked(was) => {
                    // The dirty state from the word W3 replaced: a writeback may have
                    // started and ended, or failed, since any earlier load.
                    let (frame, order, head) = folio.into_raw();
                    return Ok(Prepared::Locked(Locked {
                        frame,
                        order,
                        head,
                        prior: Prior::of(was),
                        fresh: Fresh::Published,
                    }));
                }
                WriteLock::Writeback => {
                    wait::wait_writeback_done(meta);
                }
                WriteLock::Pinned if pinned_tries < PINNED_RETRIES => {
                    pinned_tries += 1;
                    drop(folio);
                    std::thread::yield_now();
                }
                WriteLock::Pinned => {
                    if let Some(locked) = self.copy_on_write(&folio)? {
                        // The writer keeps its pin on the old folio until here; the
                        // index's reference moved to the copy.
                        drop(folio);
                        return Ok(Prepared::Locked(locked));
                    }
                }
            }
        }
    }

    /// W1 for a page that needs no read: a new order-0 folio with zeros and the written
    /// bytes, inserted dirty. Returns the bytes written, or `None` if the page was
    /// inserted by someone else first.
    fn write_new_page(
        &self,
        page: PageIndex,
        in_page: usize,
        src: &[u8],
    ) -> io::Result<Option<usize>> {
        let core = self.core();
        let arena = &core.mem.arena;
        let (frame, order) = core.alloc_folio(Order::ZERO, FolioUse::Request, AllocMode::Wait)?;
        let meta = arena.meta(frame);
        meta.set_identity(self.mapping.id, page, order);
        arena.zero_range(frame, order, 0, in_page);
        arena.copy_in(frame, order, in_page, src);
        arena.zero_range(frame, order, in_page + src.len(), PAGE_BYTES);
        let folio = NewFolio {
            frame,
            order,
            head: page,
        };
        if !self.fill().insert_written(folio) {
            if meta.state.abandon_locked() == crate::refcount::PutOutcome::Free {
                arena.free(frame);
            }
            return Ok(None);
        }
        // W4's size rule: before DIRTY, while LOCKED keeps writeback off the folio.
        self.mapping
            .extend_to(page.offset_bytes() + (in_page + src.len()) as u64);
        meta.version.publish();
        meta.state.finish_fill_dirty();
        wait::wake_all(meta);
        Ok(Some(src.len()))
    }

    /// W3's copy on write: a new folio of the same size with `old`'s bytes, in its place
    /// in the index, locked for the writer. `None`: nothing changed, try again (the old
    /// folio's I/O started, or memory had no block of that size: then after a pause).
    fn copy_on_write(&self, old: &Pinned<'_>) -> io::Result<Option<Locked>> {
        let core = self.core();
        let arena = &core.mem.arena;
        let (frame, order) = core.alloc_folio(old.order, FolioUse::Request, AllocMode::Wait)?;
        let give_back = |frame: FrameId| {
            if arena.meta(frame).state.abandon_locked() == crate::refcount::PutOutcome::Free {
                arena.free(frame);
            }
        };
        if order != old.order {
            give_back(frame);
            std::thread::sleep(Duration::from_micros(100));
            return Ok(None);
        }
        let meta = arena.meta(frame);
        meta.set_identity(self.mapping.id, old.head, order);
        arena.copy_in(frame, order, 0, arena.pinned_bytes(old.frame, old.order));
        let new = NewFolio {
            frame,
            order,
            head: old.head,
        };
        match self.fill().replace_for_write(old.frame, new) {
            Replaced::Done(prior) => {
                stats::bump(&core.mem.counters.write_copies);
                Ok(Some(Locked {
                    frame,
                    order,
                    head: old.head,
                    prior,
                    fresh: Fresh::Copy,
                }))
            }
            Replaced::Retry => {
                give_back(frame);
                let old_meta = arena.meta(old.frame);
                wait::wait_writeback_done(old_meta);
                wait::wait_unlocked(old_meta);
                Ok(None)
            }
        }
    }

    /// W4-W5: copies `src` (or zeroes, for `None`) into `len` bytes of the locked folio
    /// from `in_folio`, then releases it. Returns the pages newly dirtied.
    fn change(
        &self,
        locked: &Locked,
        in_folio: usize,
        src: Option<&[u8]>,
        len: usize,
        change: Change,
    ) -> u64 {
        let core = self.core();
        let arena = &core.mem.arena;
        let meta = arena.meta(locked.frame);
        if locked.fresh == Fresh::Published {
            meta.version.begin_write();
        }
        match src {
            Some(src) => arena.copy_in(locked.frame, locked.order, in_folio, src),
            None => arena.zero_range(locked.frame, locked.order, in_folio, in_folio + len),
        }
        let mut newly = 0;
        if let Change::Dirtied { end_bytes } = change {
            // Still LOCKED: a writeback's B1 cannot take the folio before the size covers
            // the bytes just written (it writes no block past the end).
            self.mapping.extend_to(end_bytes);
            let first = (in_folio / PAGE_BYTES) as u64;
            let last = (in_folio + len).div_ceil(PAGE_BYTES) as u64;
            let blocks = Blocks::range(first, last - first);
            newly = BlockMask::of(arena, locked.frame, locked.order).mark(&blocks, locked.prior);
            if locked.prior == Prior::Clean {
                self.mapping
                    .index
                    .lock()
                    .set_mark(locked.head, crate::index::Mark::Dirty);
            }
        }
        match (locked.fresh, change, locked.prior) {
            (Fresh::Published, Change::Dirtied { .. }, _) => {
                meta.version.end_write();
                meta.state.unlock_dirty();
            }
            (Fresh::Published, Change::PastEnd, _) => {
                meta.version.end_write();
                meta.state.unlock_written_clean();
            }
            (Fresh::Copy, Change::PastEnd, Prior::Clean) => {
                meta.version.publish();
                meta.state.finish_read_ok();
            }
            (Fresh::Copy, _, _) => {
                meta.version.publish();
                meta.state.finish_fill_dirty();
            }
        }
        wait::wake_all(meta);
        // The pin W1 took (kept through `into_raw`, or the copy's own reference, which
        // became the index's: a copy holds none of the writer's).
        if locked.fresh == Fresh::Published {
            core.mem.put_folio(locked.frame);
        }
        newly
    }

    /// Sets the file's length (`ftruncate`): shorter drops the cached pages past the end
    /// (and their dirty state: they will not be written) and cuts the file; longer makes
    /// a hole that reads as zeros. On disk at once; durable after `sync_all`.
    ///
    /// Errors: as `write_at`'s, and the `ftruncate` error (the cache already has the new
    /// length then; the next sync sets it on disk).
    ///
    /// Context: any thread; takes the file's writer lock; may sleep for writebacks of the
    /// pages it drops.
    pub fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        if len > FILE_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("folio: a length of {len} bytes is past the 2^62-byte file limit"),
            ));
        }
        let core = self.core();
        let write = &self.mapping.write;
        let (whole_start, whole_end) = crate::range_lock::WHOLE_FILE;
        let _range = write.lock_range(whole_start, whole_end);
        write.note_written();
        let _writer = write.lock_writer();
        let old = self.mapping.size_bytes();
        if len < old {
            write
                .behind
                .fetch_min(len / PAGE_BYTES as u64, Ordering::AcqRel);
            self.mapping.set_size(len);
            self.zero_past_end(len)?;
            self.mapping.invalidate(
                &core.mem,
                PageIndex::ceil(len),
                PageIndex::ceil(old),
                Invalidate::Shrink,
            );
        } else {
            self.mapping.set_size(len);
        }
        sync::set_len(&self.fd, len)
    }

    /// `set_len` down to `len`: the cached folio that holds the new last byte is zeroed
    /// past it, so a later extension reads zeros there.
    fn zero_past_end(&self, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let last = PageIndex::containing(len - 1);
        let core = self.core();
        let Ok(folio) = self.mapping.find_get(&core.mem, last) else {
            return Ok(()); // not cached: the disk's bytes past `len` go with `ftruncate`
        };
        let folio_end = folio.head.offset_bytes() + folio.order.bytes() as u64;
        if folio_end <= len {
            return Ok(());
        }
        drop(folio);
        let Prepared::Locked(locked) = self.lock_for_write(last, 0, 0, &[])? else {
            unreachable!("a cached page is locked, not written new");
        };
        let in_folio = (len - locked.head.offset_bytes()) as usize;
        let n = locked.order.bytes() - in_folio;
        self.change(&locked, in_folio, None, n, Change::PastEnd);
        Ok(())
    }

    /// Writes the file's dirty bytes and makes them durable with `fdatasync`, with the
    /// size if it changed. Returns the first writeback or flush error since this handle
    /// last synced, once (every handle of the file is told: `errseq`).
    ///
    /// Context: any thread; sleeps until the writes and the flush complete.
    pub fn sync_data(&self) -> io::Result<()> {
        self.sync(0, u64::MAX, SyncKind::Data)
    }

    /// As `sync_data`, with `fsync`: the file's metadata too.
    pub fn sync_all(&self) -> io::Result<()> {
        self.sync(0, u64::MAX, SyncKind::All)
    }

    /// As `sync_data` for the dirty bytes of `[offset, offset + len)` only (the flush is
    /// the whole file's, as `fdatasync` is).
    ///
    /// Errors: `InvalidInput` if `offset + len` overflows; as `sync_data`.
    pub fn sync_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let end = offset
            .checked_add(len)
            .ok_or_else(|| overflow(offset, len))?;
        self.sync(offset, end, SyncKind::Data)
    }

    fn sync(&self, offset: u64, end: u64, kind: SyncKind) -> io::Result<()> {
        let started = Instant::now();
        let (start, end) = (
            PageIndex::containing(offset),
            PageIndex::ceil(end.min(FILE_BYTES_MAX)),
        );
        let flush = match kind {
            SyncKind::Data => FlushKind::Data,
            SyncKind::All => FlushKind::All,
        };
        #[cfg(any(debug_assertions, feature = "invariants"))]
        let audit_from = self.mapping.write.audit.sync_started();
        writeback::sync(
            &self.cache.core,
            &*self.cache.backend,
            &self.mapping,
            start,
            end,
            flush,
        );
        let counters = &self.core().mem.counters;
        stats::bump(&counters.syncs);
        stats::add(&counters.sync_ns, started.elapsed().as_nanos() as u64);
        self.report_errors()?;
        #[cfg(any(debug_assertions, feature = "invariants"))]
        if self.mapping.write.failures.load(Ordering::Acquire) == 0 {
            // The sync's postcondition (`audit`): nothing it promised is still dirty.
            self.mapping.write.audit.check_synced(
                &self.core().mem,
                &self.mapping,
                audit_from,
                start,
                end,
            );
        }
        Ok(())
    }

    /// The errseq check (DESIGN.md §8): an error recorded since this handle last looked,
    /// once; then the failure a given-up file keeps returning.
    fn report_errors(&self) -> io::Result<()> {
        let write = &self.mapping.write;
        let mut since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(errno) = write.errseq.check_and_advance(&mut since) {
            return Err(io::Error::from_raw_os_error(errno));
        }
        if let Some(errno) = write.failed() {
            return Err(failed_error(errno));
        }
        Ok(())
    }

    /// Starts writing back the dirty bytes of `[offset, offset + len)` and returns without
    /// waiting (`sync_file_range(SYNC_FILE_RANGE_WRITE)`): nothing is promised durable.
    ///
    /// Errors: `InvalidInput` if `offset + len` overflows.
    ///
    /// Context: any thread; takes the index lock per batch; does not wait for I/O.
    pub fn writeback(&self, offset: u64, len: u64) -> io::Result<()> {
        let end = offset
            .checked_add(len)
            .ok_or_else(|| overflow(offset, len))?;
        writeback::start(
            &self.cache.core,
            &*self.cache.backend,
            &self.mapping,
            PageIndex::containing(offset),
            PageIndex::ceil(end.min(FILE_BYTES_MAX)),
            Take::Dirty,
        );
        Ok(())
    }
}

/// A `write_at`'s pages, told to the sync audit when it starts and when it returns, on
/// every path (`audit`).
#[cfg(any(debug_assertions, feature = "invariants"))]
struct AuditedWrite<'a> {
    write: &'a crate::dirty::WriteState,
    start: PageIndex,
    end: PageIndex,
}

#[cfg(any(debug_assertions, feature = "invariants"))]
impl<'a> AuditedWrite<'a> {
    fn start(write: &'a crate::dirty::WriteState, offset: u64, end: u64) -> AuditedWrite<'a> {
        let (start, end) = (PageIndex::containing(offset), PageIndex::ceil(end));
        write.audit.write_started(start, end);
        AuditedWrite { write, start, end }
    }
}

#[cfg(any(debug_assertions, feature = "invariants"))]
impl Drop for AuditedWrite<'_> {
    fn drop(&mut self) {
        self.write.audit.write_ended(self.start, self.end);
    }
}

/// What W1-W3 prepared.
enum Prepared {
    /// A new page was written whole and inserted (no folio to copy into): its bytes.
    Written(usize),
    Locked(Locked),
}

/// The error of a file given up after its writeback kept failing (`writeback` module
/// docs): the errno its last failed write got, kept as a raw OS error so that the C ABI
/// returns it as is (a `Context` message would lose it).
fn failed_error(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}
