//! A mapping: the cached pages of one file (device and inode), shared by every handle.
//!
//! Two `Cache::open`s of the same file share one mapping, as two `struct file`s share an
//! `address_space` in the kernel: one index, one set of folios; each handle keeps its own
//! readahead state. A mapping lives as long as the cache (its pages stay cached when the
//! last handle closes); a reopen checks the file's size and modification time and drops
//! the pages of a file that changed.
//!
//! Protection: `index` has its own writer lock; `size_bytes` is an atomic that only grows
//! by `refresh` and shrinks by `shrink_to` (truncation detected), both of which then
//! invalidate what lies past the new end; `stamp` is under its mutex.
//!
//! The lookup protocol (`find_get`), the reader's side of `refcount`'s protocol:
//!   1. Load the slot of the page (a lock-free walk of type-stable nodes, `index`).
//!   2. `try_get` on the folio found; DEAD: a freezer holds the index lock and is removing
//!      it, so take and drop the lock (sleeping, not spinning, until it is done) and retry.
//!   3. Re-load the slot and check the folio's identity (stable under the reference):
//!      if the slot no longer holds this frame, or the frame holds another page, it was
//!      freed and reused (the ABA case) or the walk raced with a writer; `put` and retry.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::folio::MappingId;
use crate::index::{Entry, Index, Leave};
use crate::memory::Memory;
use crate::refcount::{GetOutcome, PutOutcome, LOCKED};
use crate::stats;
use crate::types::{FrameId, Order, PageIndex};

/// What identifies a file's version: size and modification time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    pub size_bytes: u64,
    pub mtime_ns: i128,
}

#[derive(Debug)]
pub struct Mapping {
    pub id: MappingId,
    pub index: Index,
    /// Moves on every truncating invalidation. A read records it when its folios are
    /// inserted; its completion, under the index lock, publishes only if it has not moved
    /// (else the bytes may predate the file's change: the folios are failed, and their
    /// readers retry).
    generation: AtomicU64,
    size_bytes: AtomicU64,
    stamp: Mutex<FileStamp>,
}

/// A folio the caller holds a reference on; the reference is dropped with it.
pub struct Pinned<'c> {
    mem: &'c Memory,
    pub frame: FrameId,
    pub order: Order,
    pub head: PageIndex,
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        self.mem.put_folio(self.frame);
    }
}

impl<'c> Pinned<'c> {
    /// Keeps the reference past this value's life; the caller must `put_folio` it.
    pub fn into_raw(self) -> (FrameId, Order, PageIndex) {
        let raw = (self.frame, self.order, self.head);
        std::mem::forget(self);
        raw
    }
}

impl Mapping {
    pub fn new(id: MappingId, stamp: FileStamp) -> Mapping {
        Mapping {
            id,
            index: Index::default(),
            generation: AtomicU64::new(0),
            size_bytes: AtomicU64::new(stamp.size_bytes),
            stamp: Mutex::new(stamp),
        }
    }

    /// See the field's docs.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes.load(Ordering::Acquire)
    }

    /// Lookup protocol steps 1-3 (module docs): a pinned folio covering `page`, or the
    /// entry found there if it is not a folio.
    ///
    /// Context: any thread, no lock held (step 2 may take the index lock). Does not wait
    /// for I/O: the folio may be LOCKED. A miss (`Err`) may be stale; the miss path
    /// re-checks under the lock.
    pub fn find_get<'c>(&self, mem: &'c Memory, page: PageIndex) -> Result<Pinned<'c>, Entry> {
        loop {
            let entry = self.index.lookup(page);
            let Entry::Folio { frame, order, head } = entry else {
                return Err(entry);
            };
            let meta = mem.arena.meta(frame);
            match meta.state.try_get() {
                GetOutcome::Got => {}
                GetOutcome::Dead => {
                    drop(self.index.lock());
                    continue;
                }
                GetOutcome::DeadFree => {
                    mem.arena.free(frame);
                    continue;
                }
            }
            let pinned = Pinned {
                mem,
                frame,
                order,
                head,
            };
            // Under our reference the folio's identity is stable: it must be this page's
            // (a walk that raced with a writer may have come back with another folio).
            let still_there = matches!(self.index.lookup(page), Entry::Folio { frame: again, .. } if again == frame);
            if still_there && meta.identity() == (self.id, head, order) {
                return Ok(pinned);
            }
            drop(pinned);
        }
    }

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
        self.size_bytes.store(now.size_bytes, Ordering::Release);
        drop(stamp);
        self.invalidate(
            mem,
            PageIndex(0),
            PageIndex(u64::MAX >> 12),
            Invalidate::Truncate,
        );
    }

    /// Adopts a size learned from `fstat`: pages past a smaller size are dropped; a larger
    /// size makes the new bytes readable. Bytes rewritten in place are not detected here
    /// (a reopen compares the modification time).
    pub fn resize(&self, mem: &Memory, size_bytes: u64) {
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
    /// says. A folio with I/O in flight is left in place; for `Truncate`, the generation
    /// moves first, so its completion fails it instead of publishing bytes read before.
    /// Returns the pages dropped.
    ///
    /// Context: no lock held; takes the index lock once per folio. May not sleep.
    pub fn invalidate(
        &self,
        mem: &Memory,
        start: PageIndex,
        end: PageIndex,
        how: Invalidate,
    ) -> u64 {
        let mut found = Vec::new();
        // A large folio that starts before `start` but covers it goes too.
        if let Entry::Folio { frame, order, head } = self.index.lookup(start) {
            if head < start {
                found.push((head, frame, order));
            }
        }
        self.index.visit(start, end, &mut |head, entry| {
            if let Entry::Folio { frame, order, .. } = entry {
                found.push((head, frame, order));
            }
        });
        let mut dropped = 0;
        if how == Invalidate::Truncate {
            // Reads in flight now must not publish what they read (`generation`).
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        for (head, frame, _) in found {
            let meta = mem.arena.meta(frame);
            let mut w = self.index.lock();
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
            if meta.state.load() & LOCKED != 0 {
                continue; // its completion sees the generation move and drops it
            }
            if how == Invalidate::Unpinned && !meta.state.try_freeze() {
                continue;
            }
            w.remove_folio(head, frame, Leave::Empty);
            mem.policy.remove(&mem.arena, frame, order.pages());
            drop(w);
            let free = match how {
                Invalidate::Unpinned => true,
                // The index's reference goes; the last holder frees the frame.
                Invalidate::Truncate => meta.state.put() == PutOutcome::Free,
            };
            dropped += order.pages();
            if free {
                mem.arena.free(frame);
            }
        }
        stats::add(&mem.counters.invalidated_pages, dropped);
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
}

/// Every mapping of a cache, by id (for reclaim, which finds a folio's mapping from its
/// metadata) and by inode (for open).
///
/// Protection: one reader-writer lock; open takes it for writing only to add a mapping.
#[derive(Debug, Default)]
pub struct MappingTable {
    maps: RwLock<Maps>,
}

#[derive(Debug, Default)]
struct Maps {
    by_id: HashMap<MappingId, Arc<Mapping>>,
    by_inode: HashMap<(u64, u64), MappingId>,
    next_id: u32,
}

impl MappingTable {
    pub fn get(&self, id: MappingId) -> Option<Arc<Mapping>> {
        self.read().by_id.get(&id).cloned()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Maps> {
        self.maps.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The mapping of inode `(dev, ino)`, made if new; an existing one is revalidated
    /// against `stamp` (its pages dropped if the file changed).
    ///
    /// Context: takes the table's lock, then (after dropping it) the mapping's.
    pub fn get_or_insert(
        &self,
        mem: &Memory,
        dev: u64,
        ino: u64,
        stamp: FileStamp,
    ) -> io::Result<Arc<Mapping>> {
        let found = |maps: &Maps| {
            maps.by_inode
                .get(&(dev, ino))
                .and_then(|id| maps.by_id.get(id).cloned())
        };
        let existing = found(&self.read());
        let mapping = match existing {
            Some(mapping) => mapping,
            None => {
                let mut maps = self.maps.write().unwrap_or_else(|e| e.into_inner());
                match found(&maps) {
                    Some(mapping) => mapping,
                    None => {
                        let id = MappingId(maps.next_id);
                        maps.next_id = maps.next_id.checked_add(1).ok_or_else(|| {
                            io::Error::new(
                                io::ErrorKind::OutOfMemory,
                                "folio: more than 2^32 files opened",
                            )
                        })?;
                        let mapping = Arc::new(Mapping::new(id, stamp));
                        maps.by_id.insert(id, mapping.clone());
                        maps.by_inode.insert((dev, ino), id);
                        return Ok(mapping);
                    }
                }
            }
        };
        mapping.revalidate(mem, stamp);
        Ok(mapping)
    }

    /// Index nodes of every mapping (in trees and pools), for the memory figure in stats.
    pub fn index_nodes(&self) -> usize {
        self.read()
            .by_id
            .values()
            .map(|m| m.index.nodes_allocated())
            .sum()
    }
}
