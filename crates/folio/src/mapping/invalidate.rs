//! Invalidation: dropping a mapping's pages whose bytes are wrong (a truncation, a file
//! that changed or shrank under the cache) or unwanted (`Advice::DontNeed`).
//!
//! Design: one walk finds the folios of a range without a lock; each is then dropped
//! under the index lock, after its slot is read again (the walk may be stale). A folio
//! with a read in flight stays: a truncating invalidation moves the mapping's
//! `generation` first, so that read's completion fails it instead of publishing bytes
//! read before. `Truncate` and `Shrink` wait for a writeback in flight and discard a
//! dirty folio's dirty state (its blocks leave the dirty budget); `Unpinned` drops only
//! what it can freeze, never a dirty folio nor one under writeback. The index's reference goes; the last holder
//! frees the frame, so a holder keeps a valid view until it lets go.
//!
//! Protection: the index lock, taken once per folio; `size_bytes` grows by `resize` and
//! shrinks by `shrink_to`, each of which then invalidates what lies past the new end
//! (neither moves the size of a file folio wrote: writers own it); the stamp under its
//! mutex (`revalidate`).
//!
//! Limits: one lock hold per folio dropped; a range's walk takes time in proportion to
//! its entries.

use std::sync::atomic::Ordering;

use super::{FileStamp, Mapping};
use crate::index::{Entry, Leave};
use crate::memory::Memory;
use crate::refcount::PutOutcome;
use crate::stats;
use crate::types::PageIndex;
use crate::wait;
use crate::write::mask::BlockMask;

impl Mapping {
    /// Whether `(size, mtime)` still describes the file; if not, drops every cached page
    /// (the file was replaced or rewritten) and adopts the new stamp.
    ///
    /// Context: `Cache::open`; takes the stamp mutex and the index lock.
    pub fn revalidate(&self, mem: &Memory, now: FileStamp) {
        let mut stamp = self.stamp.lock().unwrap_or_else(|e| e.into_inner());
        if *stamp == now {
            return;
        }
        *stamp = now;
        if self.write.is_written() {
            // folio's own writes moved the stamp: its pages (dirty ones among them) are
            // the file's newest bytes. Other processes' writes to a file folio writes are
            // not seen (O_DIRECT semantics, DESIGN.md §8).
            return;
        }
        self.size_bytes.store(now.size_bytes, Ordering::Release);
        drop(stamp);
        self.invalidate(mem, PageIndex(0), PageIndex::END, Invalidate::Truncate);
    }

    /// Adopts a size learned from `fstat`: pages past a smaller size are dropped; a larger
    /// size makes the new bytes readable. Bytes rewritten in place are not detected here
    /// (a reopen compares the modification time).
    pub fn resize(&self, mem: &Memory, size_bytes: u64) {
        if self.write.is_written() {
            return; // folio's size is the file's logical size (`refresh_len`)
        }
        if size_bytes < self.size_bytes() {
            self.shrink_to(mem, size_bytes);
        } else {
            let old = self.size_bytes.fetch_max(size_bytes, Ordering::AcqRel);
            if size_bytes > old {
                // The folio that held the old end has zeros where the new bytes are.
                let end = PageIndex::containing(old);
                self.invalidate(mem, end, end.add(1), Invalidate::Truncate);
            }
        }
        self.stamp
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .size_bytes = size_bytes;
    }

    /// The file turned out shorter than the mapping believed (a read came back short):
    /// adopt the new size and drop the pages past it, so no byte past the new end is
    /// ever returned.
    pub fn shrink_to(&self, mem: &Memory, size_bytes: u64) {
        if self.write.is_written() {
            return; // a short read found a hole below the logical size, not a shorter file
        }
        let old = self.size_bytes.fetch_min(size_bytes, Ordering::AcqRel);
        if size_bytes < old {
            // From the page holding the new end: a folio straddling it holds bytes of the
            // old content past the end, which a later growth of the file must not expose.
            self.invalidate(
                mem,
                PageIndex::containing(size_bytes),
                PageIndex::ceil(old),
                Invalidate::Truncate,
            );
        }
    }

    /// Drops the folios that cover any page of `[start, end)` from the index, as `how`
    /// says. A folio with a read in flight is left in place; for `Truncate`, the
    /// generation moves first, so its completion fails it instead of publishing bytes read
    /// before. `Truncate` discards dirty folios' dirty state (their pages leave the dirty
    /// budget) after waiting for their writeback; `Unpinned` leaves dirty folios alone.
    /// Returns the pages dropped.
    ///
    /// Context: no lock held; takes the index lock once per folio. `Truncate` of a file
    /// with dirty pages is called only with the file's writer lock held (`File::set_len`),
    /// so no writer holds a folio LOCKED, and may sleep waiting for a writeback; otherwise
    /// it does not sleep.
    pub fn invalidate(
        &self,
        mem: &Memory,
        start: PageIndex,
        end: PageIndex,
        how: Invalidate,
    ) -> u64 {
        if how != Invalidate::Unpinned {
            // Reads in flight now must not publish what they read (`generation`). Before
            // the walk: a read inserted after the walk and completed before a later bump
            // would publish its stale folio, and nothing would ever drop it.
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        let mut found = Vec::new();
        // A large folio that starts before `start` but covers it goes too (but for `Shrink`).
        if let Entry::Folio { frame, order, head } = self.index.lookup(start) {
            if head < start && how != Invalidate::Shrink {
                found.push((head, frame, order));
            }
        }
        self.index.visit(start, end, &mut |head, entry| {
            if let Entry::Folio { frame, order, .. } = entry {
                found.push((head, frame, order));
            }
        });
        let mut dropped = 0;
        for (head, frame, _) in found {
            let meta = mem.arena().meta(frame);
            let mut w = self.index.lock();
            if how != Invalidate::Unpinned {
                // A writeback in flight reads these frames, and its completion may make the
                // folio dirty again: wait for it. No new one starts on a page past the end.
                loop {
                    let holds = matches!(w.get(head), Entry::Folio { frame: f, .. } if f == frame);
                    if !holds || !meta.state.load().is_writeback() {
                        break;
                    }
                    drop(w);
                    wait::wait_writeback_done(meta);
                    w = self.index.lock();
                }
            }
            // The walk may be stale: the folio and its size are taken from the slot, read
            // under the lock, not from the walk.
            let order = match w.get(head) {
                Entry::Folio {
                    frame: f,
                    order,
                    head: h,
                } if f == frame && h == head => order,
                _ => continue,
            };
            if meta.state.load().is_locked() {
                continue; // its completion sees the generation move and drops it
            }
            if how == Invalidate::Unpinned && !meta.state.try_freeze() {
                continue;
            }
            if how != Invalidate::Unpinned {
                // Holders may keep it past the file's change: never adopted after a kill.
                meta.state.mark_detached();
            }
            if how != Invalidate::Unpinned && meta.state.load().is_dirty() {
                let pages = BlockMask::of(mem.arena(), frame, order).peek().count();
                if meta.state.discard_dirty() {
                    mem.dirty_budget().uncharge(pages);
                }
            }
            w.remove_folio(head, frame, Leave::Empty);
            mem.forget_evictable(frame, order.pages());
            // With no handle open (a completion found the file shorter), the completion
            // tries the removal once it is done (`filemap::ReadCompletion::complete`).
            self.folio_removed(&w);
            drop(w);
            let free = match how {
                Invalidate::Unpinned => true,
                // The index's reference goes; the last holder frees the frame.
                Invalidate::Truncate | Invalidate::Shrink => meta.state.put() == PutOutcome::Free,
            };
            dropped += order.pages();
            if free {
                mem.arena().free(frame);
            }
        }
        stats::add(&mem.counters().invalidated_pages, dropped);
        dropped
    }
}

/// How `Mapping::invalidate` treats folios that someone holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalidate {
    /// The bytes are wrong now (truncation, a changed file): drop every folio from the
    /// index; holders keep a valid view until they let go.
    Truncate,
    /// A hint (`Advice::DontNeed`): drop only folios nobody holds.
    Unpinned,
    /// `File::set_len` down: as `Truncate`, but a large folio that starts before the
    /// range stays (it holds bytes below the new end; the caller zeroed the rest).
    Shrink,
}
