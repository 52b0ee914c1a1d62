//! The write side of a file handle (DESIGN.md §8): `write_at`, `set_len`, the syncs and
//! `writeback`.
//!
//! The folio-level steps (W1-W5) are `write::into_folio`'s; this room holds the API, its
//! checks, the write's byte range, disk reservation, the dirty budget's charge per piece
//! and write-behind.
//!
//! Protection: the write's byte range (`WriteState::lock_range`) for the whole call, the
//! whole file for `set_len`; the file's writer lock (`WriteState::lock_writer`) for W1-W5
//! and `set_len`; the state word for the rest.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{checked_end, overflow, Access, File};
use crate::eviction::ReadHint;
use crate::io::FlushKind;
use crate::mapping::{Invalidate, Kind, RangeWait};
use crate::shared::queue::Appended;
use crate::shared::reader::{DomainWriter, Settle};
use crate::stats;
use crate::types::{PageIndex, PAGE_BYTES};
use crate::wait;
use crate::write::integrity;
use crate::write::into_folio::FolioWriter;
use crate::write::range_lock::{RangeGuard, WHOLE_FILE};
use crate::write::state::FILE_BYTES_MAX;
use crate::write::thread::write_behind;
use crate::write::writeback::{self, Selection};

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

    /// Bytes `[start, end)` of the file held for a write or `set_len` (`range_lock`) with
    /// this process the writer of the file's record in the domain, if it has a part in
    /// it (mapping/domain.rs, "Two writing processes"): a follower takes the role first
    /// (F2); a writer another process asked for the role hands it over first (F3) and
    /// takes it back. The role is looked at once the range is held: a hand-over holds the
    /// whole file's range, so none comes while the caller holds it, and the writer
    /// returned is the role's until the range is let go (the one look at the role a
    /// holder's write pays).
    ///
    /// Context: no lock of the file held; may sleep for the role, and as `lock_range`.
    /// Errors: `take_role`'s.
    fn lock_range_with_role(&self, start: u64, end: u64) -> io::Result<Held<'_>> {
        loop {
            if self.mapping.role_kind() == Kind::Follower {
                self.take_role()?;
            }
            let range = self.mapping.write.lock_range(start, end);
            match self.mapping.role_kind() {
                Kind::None => {
                    return Ok(Held {
                        _range: range,
                        writer: None,
                    })
                }
                // Another thread handed the role over before the range was ours.
                Kind::Follower => continue,
                Kind::Holder => {}
            }
            let writer = self.mapping.domain_writer();
            if !writer.as_ref().is_some_and(|w| w.wanted_by_other()) {
                return Ok(Held {
                    _range: range,
                    writer,
                });
            }
            // The hand-over takes the whole file's range, and its release is the
            // writer's drop: both let go first.
            drop((range, writer));
            self.yield_role(RangeWait::Wait);
            self.take_role()?;
        }
    }

    /// F2 (mapping/domain.rs): this follower takes the writer role, and the writeback
    /// thread looks at it from then on (F3's hand-over when another process asks).
    ///
    /// Errors: `Mapping::take_role`'s.
    fn take_role(&self) -> io::Result<()> {
        self.mapping.take_role(self.core().memory())?;
        if self.mapping.role_kind() == Kind::Holder {
            self.core().dirty_files.note_role(&self.mapping);
        }
        Ok(())
    }

    /// F3 (mapping/domain.rs): the role handed over, this process's dirty pages of the
    /// file written back first.
    fn yield_role(&self, wait: RangeWait) {
        let (core, backend) = (&self.cache.core, &*self.cache.backend);
        self.mapping.yield_role(core.memory(), wait, || {
            integrity::write_out(core, backend, &self.mapping);
        });
    }

    /// Reads `page` into the cache and waits for it, for a write that covers it in part
    /// (the rest of the page holds bytes of the file); a page past the end reads nothing.
    fn read_for_write(&self, page: PageIndex) -> io::Result<()> {
        self.get_uptodate(page, page.add(1), ReadHint::Normal)
            .map(drop)
    }

    /// Writes all of `buf` at `offset` into the cache and returns `buf.len()`: any offset
    /// and length; past the end the file grows (a hole between reads as zeros). Every
    /// handle of the file reads the new bytes once this returns. Nothing is durable before
    /// a sync (`sync_data`, `sync_all`, `sync_range`); the background writeback writes
    /// dirty pages older than the cache's expiry, every dirty page while the cache is over
    /// its background threshold, and an append's whole pages (write-behind).
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
        debug_assert!(end > offset);
        if end > FILE_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("folio: a write up to byte {end} is past the 2^62-byte file limit"),
            ));
        }
        let core = self.core();
        let counters = &core.counters();
        let write = &self.mapping.write;
        // The whole call holds its bytes: a write that overlaps waits, and is applied
        // after this one, whole (`range_lock`); taken with the file's writer role in the
        // domain (`lock_range_with_role`).
        let held = self.lock_range_with_role(offset, end)?;
        #[cfg(any(debug_assertions, feature = "invariants"))]
        let _audit = write.audit().write(offset, end);
        write.note_written();
        let size_before = self.mapping.size_bytes();
        write.reserve(&self.fd, offset, end)?;
        let read_page = |page: PageIndex| self.read_for_write(page);
        let folios = FolioWriter {
            fill: self.fill(),
            read_page: &read_page,
        };
        let piece_pages = core.dirty_budget().charge_max_pages();
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let page = PageIndex::containing(pos);
            let piece_end = end.min(page.add(piece_pages).offset_bytes());
            debug_assert!(piece_end > pos, "a piece that writes nothing at {pos}");
            let pages = PageIndex::ceil(piece_end).0 - page.0;
            // A piece is at least a page and at most what one charge may take.
            debug_assert!(
                (1..=piece_pages).contains(&pages),
                "a piece of {pages} pages"
            );
            let waited = core
                .dirty_budget()
                .charge(pages, &|| core.dirty_files.kick());
            if waited > Duration::ZERO {
                stats::bump(&counters.throttled_writers);
                stats::add(&counters.throttled_ns, waited.as_nanos() as u64);
            }
            let len = (piece_end - pos) as usize;
            self.wait_for_writeback(page, PageIndex::ceil(piece_end));
            let writer = write.lock_writer();
            let mut result = folios.write_piece(&buf[done..done + len], pos);
            if result.is_ok() {
                // The domain's pages of the piece made these bytes before the call returns
                // (mapping/domain.rs, A4), under the writer lock: in the order of the writes.
                if let Err(e) = self.publish(held.writer.as_deref(), &buf[done..done + len], pos) {
                    result = Err(e);
                }
            }
            drop(writer);
            let newly = *result.as_ref().unwrap_or(&0);
            // The pages the piece newly dirtied were charged for it: no more than those.
            assert!(
                newly <= pages,
                "{newly} pages newly dirty of {pages} charged"
            );
            core.dirty_budget().uncharge(pages.saturating_sub(newly));
            if newly > 0 {
                core.dirty_files.note_dirty(&self.mapping);
            }
            result?;
            done += len;
        }
        // Post: every byte copied in, and the file at least as long as the write (its
        // range is still held, so no truncation can have come in between).
        debug_assert_eq!(done, buf.len());
        assert!(
            self.mapping.size_bytes() >= end,
            "a write up to {end} left the file at {} bytes",
            self.mapping.size_bytes()
        );
        stats::bump(&counters.write_requests);
        stats::add(&counters.write_bytes, buf.len() as u64);
        if core.dirty_budget().over_background() {
            core.dirty_files.kick();
        }
        write_behind(core, &self.mapping, offset, end, size_before);
        Ok(buf.len())
    }

    /// The pages `written` (just written at `pos`) touched put into the domain as this
    /// process's mapping holds them now, then the record's size raised to their end
    /// (docs/sharing.md "Writes seen across processes", W2 and W5). Per page: an append
    /// to the page's frame in place when it can be (the write starts at the domain's size
    /// and the frame still holds our mark: `DomainWriter::append_in_place`); else a copy
    /// installed, made of the written bytes alone when they cover every byte of the page
    /// the file has (zeros past its end), else the page read back from the mapping.
    /// Nothing without a domain writer.
    ///
    /// Context: the file's writer lock held (so the pages are the newest writes', and
    /// installs go in the order of the writes), and the write's range with `writer` (the
    /// role's, `lock_range_with_role`); the pages were just written (cached, dirty: the
    /// private reads are hits). Errors: the private read's, the install's.
    fn publish(&self, writer: Option<&DomainWriter>, written: &[u8], pos: u64) -> io::Result<()> {
        let Some(writer) = writer else {
            return Ok(());
        };
        writer.settle(Settle::Suspects, |page| self.written_back(PageIndex(page)));
        let end = pos + written.len() as u64;
        let size = self.mapping.size_bytes();
        let mut page = PageIndex::containing(pos);
        while page.offset_bytes() < end {
            let (start, page_end) = (page.offset_bytes(), page.add(1).offset_bytes());
            let from = pos.max(start);
            let to = end.min(page_end);
            let bytes = &written[(from - pos) as usize..(to - pos) as usize];
            if writer.append_in_place(page.0, from, bytes)? == Appended::InPlace {
                page = page.add(1);
                continue;
            }
            let whole_page;
            let bytes = if from == start && to >= size.min(page_end) {
                bytes
            } else {
                let mut whole = [0u8; PAGE_BYTES];
                self.private_page(page, size, &mut whole)?;
                whole_page = whole;
                &whole_page[..]
            };
            if writer.install(page.0, bytes).is_err() {
                // No frame: the domain full of HELD frames. Ours whose bytes are on disk
                // are released (`DomainWriter::settle`), then once more.
                writer.settle(Settle::Every, |page| self.written_back(PageIndex(page)));
                writer.install(page.0, bytes)?;
            }
            page = page.add(1);
        }
        writer.extend_size(end);
        Ok(())
    }

    /// Whether this process's mapping holds page `page` written back: its folio neither
    /// dirty nor under writeback, or not cached (a folio is evicted only clean).
    ///
    /// Context: the file's writer lock held (`DomainWriter::settle`'s).
    fn written_back(&self, page: PageIndex) -> bool {
        match self.mapping.index.lookup(page) {
            crate::index::Entry::Folio { frame, .. } => {
                let state = self.core().arena().meta(frame).state.load();
                !state.is_dirty() && !state.is_writeback()
            }
            _ => true,
        }
    }

    /// Page `page` of this process's mapping into `bytes` (a page), zeros past `size`.
    fn private_page(&self, page: PageIndex, size: u64, bytes: &mut [u8]) -> io::Result<()> {
        let valid = size
            .saturating_sub(page.offset_bytes())
            .min(bytes.len() as u64) as usize;
        let mut got = 0;
        while got < valid {
            let n = self.read_at(&mut bytes[got..valid], page.offset_bytes() + got as u64)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        bytes[got..].fill(0);
        Ok(())
    }

    /// W2 ahead of the writer lock: waits for the writebacks in flight on `[start, end)`,
    /// so that a writer does not wait for the device while holding the file's writer lock
    /// (every other writer of the file would wait too). A writeback that starts after this
    /// is waited for under the lock (W2), which is rare.
    ///
    /// Context: no lock held; may sleep for writes in flight.
    fn wait_for_writeback(&self, start: PageIndex, end: PageIndex) {
        let arena = &self.core().arena();
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
        let (whole_start, whole_end) = WHOLE_FILE;
        let held = self.lock_range_with_role(whole_start, whole_end)?;
        write.note_written();
        let _writer = write.lock_writer();
        let old = self.mapping.size_bytes();
        if len < old {
            write.rewind_write_behind(PageIndex::containing(len));
            self.mapping.set_size(len);
            let read_page = |page: PageIndex| self.read_for_write(page);
            let folios = FolioWriter {
                fill: self.fill(),
                read_page: &read_page,
            };
            folios.zero_past_end(len)?;
            self.mapping.invalidate(
                core.memory(),
                PageIndex::ceil(len),
                PageIndex::ceil(old),
                Invalidate::Shrink,
            );
        } else {
            self.mapping.set_size(len);
        }
        if let Some(writer) = &held.writer {
            // The domain's size first (its readers stop short of the cut), then its pages
            // past the end dropped, and the page the end cuts made this process's
            // (zeros past the end): W5.
            writer.truncate(len, PageIndex::ceil(len).0)?;
            if len % PAGE_BYTES as u64 != 0 {
                let page = PageIndex::containing(len);
                let mut bytes = [0u8; PAGE_BYTES];
                self.private_page(page, len, &mut bytes)?;
                writer.install(page.0, &bytes)?;
            }
        }
        // Post: the cache's size is the new one (the whole file's range and the writer
        // lock are held: nothing else moves it).
        assert_eq!(self.mapping.size_bytes(), len);
        crate::io::sync::set_len(&self.fd, len)
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
        debug_assert!(offset <= end, "a sync of [{offset}, {end})");
        let started = Instant::now();
        // A follower's sync covers the writer's returned writes: the role taken, the
        // writer wrote them back first (mapping/domain.rs, F2, F3).
        if self.mapping.role_kind() == Kind::Follower {
            self.take_role()?;
        }
        let (start, end) = (
            PageIndex::containing(offset),
            PageIndex::ceil(end.min(FILE_BYTES_MAX)),
        );
        let flush = match kind {
            SyncKind::Data => FlushKind::Data,
            SyncKind::All => FlushKind::All,
        };
        #[cfg(any(debug_assertions, feature = "invariants"))]
        let audit_from = self.mapping.write.audit().sync_started();
        integrity::sync(
            &self.cache.core,
            &*self.cache.backend,
            &self.mapping,
            start,
            end,
            flush,
        );
        let counters = &self.core().counters();
        stats::bump(&counters.syncs);
        stats::add(&counters.sync_ns, started.elapsed().as_nanos() as u64);
        self.report_errors()?;
        #[cfg(any(debug_assertions, feature = "invariants"))]
        if self.mapping.write.failures() == 0 {
            // The sync's postcondition (`audit`): nothing it promised is still dirty.
            integrity::check_promised(self.core().memory(), &self.mapping, audit_from, start, end);
        }
        Ok(())
    }

    /// The errseq check (DESIGN.md §8): an error recorded since this handle last looked,
    /// once; then the failure a given-up file keeps returning.
    fn report_errors(&self) -> io::Result<()> {
        let write = &self.mapping.write;
        let mut since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(errno) = write.errseq().check_and_advance(&mut since) {
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
            Selection::Dirty,
        );
        Ok(())
    }
}

/// The error of a file given up after its writeback kept failing (`writeback` module
/// docs): the errno its last failed write got, kept as a raw OS error so that the C ABI
/// returns it as is (a `Context` message would lose it).
fn failed_error(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

/// A write's or `set_len`'s bytes held, with this process's writer role in the domain's
/// record of the file, if it holds one (`File::lock_range_with_role`).
struct Held<'a> {
    /// Dropped before the range (fields drop in order): a hand-over waiting for the
    /// range drops the role's last hold, whose drop is the record's release.
    writer: Option<Arc<DomainWriter>>,
    _range: RangeGuard<'a>,
}
