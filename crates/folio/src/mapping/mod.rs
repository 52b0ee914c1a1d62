//! A mapping: the cached pages of one file (device and inode), shared by every handle.
//!
//! Two `Cache::open`s of the same file share one mapping, as two `struct file`s share an
//! `address_space` in the kernel: one index, one set of folios; each handle keeps its own
//! readahead state. A reopen compares the file's stamp (size, modification time and birth
//! time, `FileStamp`) and drops the pages of a file that changed.
//!
//! Its parts: this module, the mapping and the lookup of its pages; `domain`, when a file
//! may be read through the cache's domain (this process holds no newer bytes); `invalidate`, dropping
//! pages whose bytes are wrong or unwanted (a truncation, a file that changed or
//! shrank, `DontNeed`); `table`, every mapping of a cache and the lifetime protocol that
//! removes unused ones (with a deleted file's pages).
//!
//! Lifetime: a mapping lives while a handle has it open or its index holds a folio
//! (`table`).
//!
//! Protection: `index` has its own writer lock; `size_bytes` is an atomic that only grows
//! by `resize` and shrinks by `shrink_to` (truncation detected), both of which then
//! invalidate what lies past the new end (`invalidate`), or is moved by writes under the
//! file's writer lock (`extend_to`, `set_size`); `stamp` is under its mutex; `handles`,
//! `folios_closed` and `unlinked`: see `MappingTable`.
//!
//! The lookup protocol (`find_get`), the reader's side of `refcount`'s protocol:
//!   1. Load the slot of the page (a lock-free walk of type-stable nodes, `index`).
//!   2. `try_get` on the folio found; DEAD: a freezer holds the index lock and is removing
//!      it, so take and drop the lock (sleeping, not spinning, until it is done) and retry.
//!   3. Re-load the slot and check the folio's identity (stable under the reference):
//!      if the slot no longer holds this frame, or the frame holds another page, it was
//!      freed and reused (the ABA case) or the walk raced with a writer; `put` and retry.

mod domain;
mod invalidate;
mod table;

use domain::DomainUse;
pub(crate) use domain::{Attached, DomainAdmission, Kind, RangeWait, Rejoin};
pub use invalidate::Invalidate;
use table::Handles;
pub use table::{MappingTable, MaybeUnused};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::folio_meta::MappingId;
use crate::index::{Entry, Index};
use crate::memory::Memory;
use crate::refcount::GetOutcome;
use crate::segment::layout::FileSlot;
use crate::segment::Segment;
use crate::types::{FrameId, Order, PageIndex};
use crate::write::state::WriteState;

/// What identifies a file's version: size, modification time, and when the inode was
/// made.
///
/// `born_ns` is the part users cannot set, so that a file deleted and replaced by another
/// of the same length and modification time (`cp -p`, `rsync -t`, `tar x`), which ext4
/// often gives the old inode number, still has another stamp: the birth time (`statx`
/// `STATX_BTIME`, ext4, xfs, btrfs) where the file system has one, which no link, rename,
/// `chmod` or `chown` moves (a RocksDB checkpoint hard-links every SST). Where it has none,
/// the change time (ctime), which `utimes` moves to now, but so do a link, a rename,
/// `chmod` and `chown`: the next open then drops the file's cached pages although its
/// bytes did not change, the price of never serving a stale byte. folio's own writes move
/// the change time too; a file folio has written keeps its mapping while it is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    pub size_bytes: u64,
    pub mtime_ns: i128,
    /// The birth time, or the change time where the file system keeps no birth time.
    pub born_ns: i128,
}

impl FileStamp {
    /// The stamp of a file as `fstat` (`statx`) describes it.
    pub fn of(meta: &std::fs::Metadata) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        let ns = |sec: i64, nsec: i64| i128::from(sec) * 1_000_000_000 + i128::from(nsec);
        FileStamp {
            size_bytes: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            born_ns: meta
                .created()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or_else(
                    || ns(meta.ctime(), meta.ctime_nsec()),
                    |d| d.as_nanos() as i128,
                ),
        }
    }
}

/// `repr(C)` and line-aligned: the hit reads `size_bytes`, `id` and the index's head (its
/// id, for the root hint) and nothing else of the mapping, so they come first, in one
/// cache line (with thousands of files open, each line the hit touches is a cache miss).
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Mapping {
    size_bytes: AtomicU64,
    pub id: MappingId,
    pub index: Index,
    /// The file's (device, inode): its key in the table.
    inode: (u64, u64),
    /// Moves on every truncating invalidation. A read records it when its folios are
    /// inserted; its completion, under the index lock, publishes only if it has not moved
    /// (else the bytes may predate the file's change: the folios are failed, and their
    /// readers retry).
    generation: AtomicU64,
    stamp: Mutex<FileStamp>,
    /// Open `File`s of this mapping, and how many opens there were: raised only under the
    /// table's lock (read), and read under its write lock by a removal (`MappingTable`).
    handles: Handles,
    /// While `handles` is 0: the folios in the index, counted under the index lock when a
    /// removal found some, and lowered under the index lock by every removal of a folio
    /// (`folio_removed`: reclaim, invalidation, a failed read's completion). When it
    /// reaches 0 the mapping may be unused and a removal is tried, which recounts. A hint,
    /// never trusted for the removal itself: too low when left from an earlier closed
    /// spell (a wasted walk).
    folios_closed: AtomicU64,
    /// The file was deleted (`Cache::remove_file`) while handles had it open: the last
    /// close forgets it (`forget_deleted`), as the kernel drops an unlinked inode's pages
    /// with its last descriptor. Set once, never cleared (no path reaches the file again).
    unlinked: AtomicBool,
    /// The write side: writer lock, error sequence, sizes, writebacks (DESIGN.md §8).
    pub write: WriteState,
    /// This process's writable handles and domain handles of the file (`domain`: the
    /// rule in one process for a cache with a domain).
    domain: DomainUse,
    /// The segment whose slot of this mapping's id keeps the logical size for the keeper,
    /// in a cache that outlives the process (DESIGN.md §9).
    segment: Option<Arc<Segment>>,
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
    fn new(
        id: MappingId,
        inode: (u64, u64),
        stamp: FileStamp,
        segment: Option<Arc<Segment>>,
    ) -> Mapping {
        Mapping {
            id,
            inode,
            index: Index::default(),
            generation: AtomicU64::new(0),
            size_bytes: AtomicU64::new(stamp.size_bytes),
            stamp: Mutex::new(stamp),
            handles: Handles::opened_once(),
            folios_closed: AtomicU64::new(0),
            unlinked: AtomicBool::new(false),
            write: WriteState::new(stamp.size_bytes),
            domain: DomainUse::default(),
            segment,
        }
    }

    /// A mapping a restart adopted, with no handle and `folios` folios about to be
    /// inserted (`MappingTable::adopt`).
    fn adopted(
        id: MappingId,
        inode: (u64, u64),
        stamp: FileStamp,
        segment: Option<Arc<Segment>>,
        folios: u64,
    ) -> Mapping {
        let mapping = Mapping {
            handles: table::Handles::closed(),
            ..Mapping::new(id, inode, stamp, segment)
        };
        mapping.folios_closed.store(folios, Ordering::Relaxed);
        mapping
    }

    /// See the field's docs.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes.load(Ordering::Acquire)
    }

    /// Makes the file's size on disk its logical size, if folio wrote it: writeback writes
    /// whole 4 KiB blocks, so writing the tail block carries the file past its end, and
    /// a failed `set_len` leaves it where it was. A sync does this before its flush, and
    /// a cache's drop for every file (and `MappingTable::remove_if_unused` for a mapping
    /// that leaves the table), or the next mapping of the file, in this cache or another,
    /// would adopt the padded length. A failure is recorded in the error sequence (the
    /// next sync reports it).
    ///
    /// Context: no lock held; takes the file's writer lock (so the logical size is the one
    /// writers left, and nothing past it on disk is anyone's data); `fstat` and maybe
    /// `ftruncate`. The mapping must be the file's mapping in its table (or the table's
    /// last): a stale one would cut what a newer mapping of the file wrote.
    pub fn settle_size(&self) {
        let _writer = self.write.lock_writer();
        self.settle_size_unlocked();
    }

    /// `settle_size` without the writer lock. Context: no writer can run (no handle is
    /// open, and none can open: `MappingTable::remove_if_unused` holds the table's lock).
    fn settle_size_unlocked(&self) {
        let Some(fd) = self.write.fd() else {
            return; // never opened for writing: the size is the file's own
        };
        if self.size_elsewhere() {
            return; // another process writes the file now (domain.rs, F3): its size
        }
        let size = self.size_bytes();
        let on_disk = fd.metadata().map(|m| m.len());
        if on_disk.as_ref().ok() != Some(&size) {
            if let Err(e) = on_disk.and_then(|_| crate::io::sync::set_len(&fd, size)) {
                self.write
                    .errseq()
                    .record(e.raw_os_error().unwrap_or(libc::EIO));
            }
        }
    }

    /// A write reached `end_bytes`: the file is at least that long now.
    ///
    /// Context: the file's writer lock held.
    pub fn extend_to(&self, end_bytes: u64) {
        let before = self.size_bytes.fetch_max(end_bytes, Ordering::AcqRel);
        if let Some(slot) = self.segment_slot() {
            // The file's size, not the write's end: a write inside the file (the slot's
            // first one, whose size was unknown until now) must not make it shorter.
            slot.extend_to(before.max(end_bytes));
        }
    }

    /// `File::set_len`: the logical size is `size_bytes` now. Pages past it are the
    /// caller's to drop (`invalidate` with `Shrink`).
    ///
    /// Context: the file's writer lock held.
    pub fn set_size(&self, size_bytes: u64) {
        self.size_bytes.store(size_bytes, Ordering::Release);
        if let Some(slot) = self.segment_slot() {
            slot.set_size(size_bytes);
        }
    }

    /// Another process writes the file now (domain.rs, F3): a persistent cache's keeper
    /// or recovery must not set the file's size to ours, which is stale from now on (its
    /// slot's size unknown: it writes dirty blocks only, and this process has none).
    /// `set_size` gives the slot a size again when this process takes the role back.
    pub(crate) fn forget_size_on_disk(&self) {
        if let Some(slot) = self.segment_slot() {
            slot.set_size(crate::segment::layout::SIZE_UNKNOWN);
        }
    }

    /// This mapping's slot in the segment, in a cache that outlives the process.
    fn segment_slot(&self) -> Option<&FileSlot> {
        self.segment.as_ref()?.slot(self.id)
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
            let meta = mem.arena().meta(frame);
            match meta.state.try_get() {
                GetOutcome::Got => {}
                GetOutcome::Dead => {
                    drop(self.index.lock());
                    continue;
                }
                GetOutcome::DeadFree => {
                    mem.arena().free(frame);
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
}
