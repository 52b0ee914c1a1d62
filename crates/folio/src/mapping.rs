//! A mapping: the cached pages of one file (device and inode), shared by every handle.
//!
//! Two `Cache::open`s of the same file share one mapping, as two `struct file`s share an
//! `address_space` in the kernel: one index, one set of folios; each handle keeps its own
//! readahead state. A reopen compares the file's stamp (size, modification time and birth
//! time, `FileStamp`) and drops the pages of a file that changed.
//!
//! Lifetime: a mapping lives while a handle has it open or its index holds a folio. When
//! the last handle closes, its folios stay cached and a reopen finds them; once no handle
//! is open and the last folio leaves (evicted, invalidated, or there was none), the
//! mapping leaves the table (`MappingTable::remove_if_unused`), its shadow entries with it,
//! and its index memory goes with the last `Arc` (the index's nodes are freed only when the
//! index is dropped: `index` module docs). The next open of the file makes a new mapping.
//! The kernel keeps an inode's pages until the inode is evicted; a user-space cache cannot
//! see the inode's life, so it keeps a closed file's pages while memory allows, which is
//! what the kernel's inode cache amounts to for a file whose pages are cached.
//!
//! Protection: `index` has its own writer lock; `size_bytes` is an atomic that only grows
//! by `refresh` and shrinks by `shrink_to` (truncation detected), both of which then
//! invalidate what lies past the new end; `stamp` is under its mutex; `handles` and
//! `folios_closed`: see `MappingTable`.
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
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::folio::MappingId;
use crate::index::{Entry, Index, IndexWriteGuard, Leave};
use crate::memory::Memory;
use crate::refcount::{GetOutcome, PutOutcome};
use crate::stats;
use crate::types::{FrameId, Order, PageIndex};
use crate::wait;
use crate::write::mask::BlockMask;
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

#[derive(Debug)]
pub struct Mapping {
    pub id: MappingId,
    /// The file's (device, inode): its key in the table.
    inode: (u64, u64),
    pub index: Index,
    /// Moves on every truncating invalidation. A read records it when its folios are
    /// inserted; its completion, under the index lock, publishes only if it has not moved
    /// (else the bytes may predate the file's change: the folios are failed, and their
    /// readers retry).
    generation: AtomicU64,
    size_bytes: AtomicU64,
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
    fn new(id: MappingId, inode: (u64, u64), stamp: FileStamp) -> Mapping {
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
        }
    }

    /// Open handles now (a snapshot).
    pub fn handles(&self) -> u32 {
        self.handles.load().open()
    }

    /// The file's last name was unlinked: drops its pages now if no handle has it open,
    /// else when the last one closes (`MappingTable::close`). One of the two sees the
    /// other (the fences): the pages never outlive both.
    ///
    /// Context: no lock held; may take the file's writer lock and index lock, and sleep
    /// for writebacks in flight (`forget_deleted`).
    pub fn unlink(&self, mem: &Memory) {
        self.unlinked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.handles() == 0 {
            self.forget_deleted(mem);
        }
    }

    /// A folio of this mapping left its index under `_w`, this index's lock: counts it
    /// down while no handle is open. Returns `MaybeUnused::Yes` when that was the last
    /// folio counted, and the caller should try `MappingTable::remove_if_unused` (after
    /// dropping the lock).
    ///
    /// Context: the index lock held (the guard proves it).
    pub fn folio_removed(&self, _w: &IndexWriteGuard<'_>) -> MaybeUnused {
        if self.handles() != 0 {
            return MaybeUnused::No;
        }
        let before = self
            .folios_closed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .unwrap_or(0);
        if before <= 1 {
            MaybeUnused::Yes
        } else {
            MaybeUnused::No
        }
    }

    /// Counts the folios in the index (those in flight included) by one walk.
    ///
    /// Context: the index lock held (the walk is then exact). Takes time in proportion to
    /// the entries of the index.
    fn count_folios(&self, _w: &IndexWriteGuard<'_>) -> u64 {
        let mut folios = 0;
        self.index
            .visit(PageIndex(0), PageIndex::END, &mut |_, entry| {
                if let Entry::Folio { .. } = entry {
                    folios += 1;
                }
            });
        folios
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
        self.size_bytes.fetch_max(end_bytes, Ordering::AcqRel);
    }

    /// `File::set_len`: the logical size is `size_bytes` now. Pages past it are the
    /// caller's to drop (`invalidate` with `Shrink`).
    ///
    /// Context: the file's writer lock held.
    pub fn set_size(&self, size_bytes: u64) {
        self.size_bytes.store(size_bytes, Ordering::Release);
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

    /// Whether `now` is another file than the one folio wrote through this mapping: its
    /// inode was freed and given to a new file (another birth time). Such a mapping keeps
    /// serving its own handles and writeback; the new file gets a mapping of its own
    /// (`MappingTable::get_or_insert`).
    fn is_replaced_by(&self, now: &FileStamp) -> bool {
        self.write.is_written()
            && self.stamp.lock().unwrap_or_else(|e| e.into_inner()).born_ns != now.born_ns
    }

    /// The file was deleted and no handle has it open: drops every cached page, dirty ones
    /// too (their bytes belong to no file any more), and the kept descriptor, so the file
    /// system frees the inode's blocks as it would without folio. Returns the pages dropped.
    ///
    /// Context: no lock held; takes the file's writer lock and the index lock; may sleep
    /// for writebacks in flight.
    pub fn forget_deleted(&self, mem: &Memory) -> u64 {
        let _writer = self.write.lock_writer();
        self.write.note_written();
        let dropped = self.invalidate(mem, PageIndex(0), PageIndex::END, Invalidate::Truncate);
        self.write.forget_fd();
        dropped
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
            let meta = mem.arena.meta(frame);
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
            if how != Invalidate::Unpinned && meta.state.load().is_dirty() {
                let pages = BlockMask::of(&mem.arena, frame, order).peek().count();
                if meta.state.discard_dirty() {
                    mem.dirty.uncharge(pages);
                }
            }
            w.remove_folio(head, frame, Leave::Empty);
            mem.policy.remove(&mem.arena, frame, order.pages());
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
    /// `File::set_len` down: as `Truncate`, but a large folio that starts before the
    /// range stays (it holds bytes below the new end; the caller zeroed the rest).
    Shrink,
}

/// A mapping's handle word: open handles in the low 32 bits, opens ever (modulo 2^32) in
/// the high 32. One atomic, so that a removal can tell "no handle now, and none opened
/// since I looked" from "no handle now": a handle opened and closed in between (which may
/// have inserted folios) leaves the count where it was but moves the opens.
#[derive(Debug)]
struct Handles(AtomicU64);

/// A snapshot of `Handles`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HandleWord(u64);

/// What `Handles::open` adds: one handle, one open.
const OPEN: u64 = (1 << 32) | 1;

impl HandleWord {
    fn open(self) -> u32 {
        self.0 as u32
    }
}

impl Handles {
    /// The word of a mapping made by an open.
    fn opened_once() -> Handles {
        Handles(AtomicU64::new(OPEN))
    }

    fn load(&self) -> HandleWord {
        HandleWord(self.0.load(Ordering::Acquire))
    }

    /// Context: the table's lock held (read or write), so no removal runs meanwhile.
    fn open(&self) {
        let before = self.0.fetch_add(OPEN, Ordering::AcqRel);
        assert!(
            HandleWord(before).open() < u32::MAX,
            "folio: 2^32 handles open on one file"
        );
    }

    /// Drops a handle; returns the word it left.
    fn close(&self) -> HandleWord {
        let before = self.0.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(HandleWord(before).open() > 0, "a handle closed twice");
        HandleWord(before - 1)
    }
}

/// Whether a mapping may have become unused (`Mapping::folio_removed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaybeUnused {
    Yes,
    No,
}

/// What `MappingTable::remove_if_unused` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unused {
    /// It left the table (or had left already).
    Removed,
    /// A handle has it open, or was opened meanwhile.
    Open,
    /// Its index holds folios; the removal of the last one tries again.
    Cached,
}

/// Every mapping of a cache, by id (for reclaim, which finds a folio's mapping from its
/// metadata) and by inode (for open), and the protocol that removes unused ones.
///
/// Protection: one reader-writer lock over the maps; open takes it for reading (for
/// writing only to add a mapping), a removal for writing, briefly (for a file folio wrote,
/// across an `fstat` and maybe an `ftruncate`, R4). It is never held while another lock
/// is taken (but the leaf mutex of a written file's descriptor, R4), nor taken under one.
///
/// The lifetime protocol, the only code that touches `Mapping::handles`:
///   O. Open (`get_or_insert`): under the table's lock, find the mapping by inode and
///      raise its handles and opens (`Handles::open`), or add a new one with one handle.
///   C. Close (`close`, `File`'s drop): lower the handles; the close that leaves none
///      tries R.
///   R. Removal (`remove_if_unused`), tried on C and when the last counted folio leaves
///      (`Mapping::folio_removed`: reclaim; and a completion that failed or invalidated
///      folios of a mapping with no handle, `filemap::ReadCompletion::complete`):
///      1. Load the handle word; if a handle is open, stop.
///      2. Under the index lock, count the folios (one walk), those in flight included.
///         If there are some, store the count in `folios_closed` (the removal of the last
///         one, by reclaim or by its own failed read, tries R again), and stop.
///      3. Drop the index lock; take the table's lock for writing.
///      4. If the handle word is still the one loaded in 1 and the mapping is still in
///         the table, make the file's size on disk its logical size if folio wrote it
///         (`Mapping::settle_size`: the next mapping learns the size from the disk; under
///         this lock, so no newer mapping of the file exists whose writes it could cut),
///         remove it and give its id back; its `Arc` goes after the lock is dropped.
///
/// The interleavings that matter (model: `loom_models::mapping_lifetime_*`):
/// - O against R4: O raises the word under the read lock, R4 compares it under the write
///   lock. Either O came first (R4 sees the change and stops) or R4 did (O no longer
///   finds the mapping and makes a new one): an open never gets a mapping that left the
///   table, and two mappings of one inode never coexist in it.
/// - O, insertion and C between R1 and R4: folios enter the index only through a `File`,
///   so only after an O. R4 compares the whole word, opens included, so a handle opened,
///   used and closed in that window (which leaves the handle count at 0 again) still
///   stops R4. Without a handle since R1, nothing entered the index since R2's walk, and
///   removals only take folios out: the index still holds none at R4.
/// - Two removals of one mapping: R4 checks the slot still holds this very mapping.
///
/// After R4 nothing can reach the mapping's index but the `Arc`s still held: reclaim's
/// and the shadow log's look-ups (which find nothing to do: no folio, and shadows that
/// go with the index), and a completion that removed the last folios. The index's nodes
/// are freed when the last of them drops (`Index`'s drop: type-stable nodes until then).
///
/// Ids are reused: a removed mapping's id goes to the next new mapping (else a cache
/// that opens and closes files for days would run out of 2^32 ids). That is safe
/// because nothing reaches a frame by its id: lookups go through the new mapping's own
/// index, which holds only its own folios, and every holder of a frame still naming the
/// old mapping (a pinned page of a truncated file, a victim in the policy's queue)
/// checks that the slot of its page holds that very frame before it acts. A shadow
/// record of the old mapping that expires later removes a shadow of the new one only if
/// the value matches too (values carry the eviction clock): at worst one refault is not
/// recognised.
///
/// Limits: at most 2^32 mappings at once.
#[derive(Debug, Default)]
pub struct MappingTable {
    maps: RwLock<Maps>,
}

#[derive(Debug, Default)]
struct Maps {
    by_id: HashMap<MappingId, Arc<Mapping>>,
    by_inode: HashMap<(u64, u64), MappingId>,
    /// Ids of removed mappings, handed out again before `next_id`.
    free_ids: Vec<MappingId>,
    next_id: u32,
}

impl Maps {
    fn new_id(&mut self) -> io::Result<MappingId> {
        if let Some(id) = self.free_ids.pop() {
            return Ok(id);
        }
        let id = MappingId(self.next_id);
        self.next_id = self.next_id.checked_add(1).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                "folio: more than 2^32 files cached at once",
            )
        })?;
        Ok(id)
    }
}

impl MappingTable {
    pub fn get(&self, id: MappingId) -> Option<Arc<Mapping>> {
        self.read().by_id.get(&id).cloned()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Maps> {
        self.maps.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Maps> {
        self.maps.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Step O: the mapping of inode `(dev, ino)` with one more handle, made if new; an
    /// existing one is revalidated against `stamp` (its pages dropped if the file
    /// changed). The caller owns the handle and gives it back with `close`.
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
            let mapping = maps
                .by_inode
                .get(&(dev, ino))
                .and_then(|id| maps.by_id.get(id))?;
            mapping.handles.open();
            Some(mapping.clone())
        };
        let existing = found(&self.read());
        let mapping = match existing {
            Some(mapping) => mapping,
            None => {
                let mut maps = self.write();
                match found(&maps) {
                    Some(mapping) => mapping,
                    None => {
                        let id = maps.new_id()?;
                        let mapping = Arc::new(Mapping::new(id, (dev, ino), stamp));
                        maps.by_id.insert(id, mapping.clone());
                        maps.by_inode.insert((dev, ino), id);
                        return Ok(mapping);
                    }
                }
            }
        };
        if mapping.is_replaced_by(&stamp) {
            let mut maps = self.write();
            if maps.by_inode.get(&(dev, ino)) == Some(&mapping.id) {
                maps.by_inode.remove(&(dev, ino));
            }
            drop(maps);
            self.close(mem, &mapping);
            return self.get_or_insert(mem, dev, ino, stamp);
        }
        mapping.revalidate(mem, stamp);
        Ok(mapping)
    }

    /// Step C: gives back a handle `get_or_insert` gave; the last one tries removal.
    ///
    /// Context: `File`'s drop; no lock held. Walks the mapping's index when it was the
    /// last handle (time in proportion to its entries).
    pub fn close(&self, mem: &Memory, mapping: &Arc<Mapping>) {
        if mapping.handles.close().open() == 0 {
            // Pairs with `Mapping::unlink`'s fence: an unlink that saw this handle open
            // is seen here.
            fence(Ordering::SeqCst);
            if mapping.unlinked.load(Ordering::SeqCst) {
                mapping.forget_deleted(mem);
            }
            self.remove_if_unused(mem, mapping);
        }
    }

    /// Step R (type docs): removes `mapping` from the table if no handle has it open and
    /// its index holds no folio.
    ///
    /// Context: no lock held; takes the index lock, then (after dropping it) the table's
    /// for writing. Walks the index.
    pub fn remove_if_unused(&self, mem: &Memory, mapping: &Arc<Mapping>) -> Unused {
        let word = mapping.handles.load();
        if word.open() != 0 {
            return Unused::Open;
        }
        if mapping.write.errseq().has_unseen() {
            // The next open must find the error (DESIGN.md §8): the mapping stays.
            return Unused::Cached;
        }
        let w = mapping.index.lock();
        let folios = mapping.count_folios(&w);
        mapping.folios_closed.store(folios, Ordering::Release);
        drop(w);
        if folios > 0 {
            return Unused::Cached;
        }
        let mut maps = self.write();
        if mapping.handles.load() != word {
            return Unused::Open;
        }
        let held = matches!(maps.by_id.get(&mapping.id), Some(held) if Arc::ptr_eq(held, mapping));
        if held {
            // The next open makes a new mapping, which learns the size from the disk: make
            // it the logical one. Under the table's lock, so that no newer mapping of the
            // file exists yet whose writes this could cut.
            mapping.settle_size_unlocked();
            if mapping.write.errseq().has_unseen() {
                return Unused::Cached; // the settling failed: the next sync reports it
            }
        }
        let removed = if held {
            maps.by_id.remove(&mapping.id)
        } else {
            None
        };
        if removed.is_some() {
            if maps.by_inode.get(&mapping.inode) == Some(&mapping.id) {
                maps.by_inode.remove(&mapping.inode);
            }
            maps.free_ids.push(mapping.id);
        }
        drop(maps);
        if removed.is_some() {
            stats::bump(&mem.counters.mappings_removed);
        }
        // `removed` drops here, outside the lock; the index goes with the last `Arc`.
        Unused::Removed
    }

    /// The mapping of inode `(dev, ino)`, if the cache knows the file (no handle taken).
    pub fn find(&self, dev: u64, ino: u64) -> Option<Arc<Mapping>> {
        let maps = self.read();
        maps.by_inode
            .get(&(dev, ino))
            .and_then(|id| maps.by_id.get(id))
            .cloned()
    }

    /// Every mapping in the table now (`Cache::sync_all_files`).
    pub fn all(&self) -> Vec<Arc<Mapping>> {
        self.read().by_id.values().cloned().collect()
    }

    /// Mappings in the table.
    pub fn len(&self) -> usize {
        self.read().by_id.len()
    }

    /// Index nodes of every mapping in the table (in trees and pools), for the memory
    /// figure in stats.
    pub fn index_nodes(&self) -> usize {
        self.read()
            .by_id
            .values()
            .map(|m| m.index.nodes_allocated())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory() -> Memory {
        Memory {
            arena: crate::arena::Arena::new(64, crate::arena::ArenaPages::Small).unwrap(),
            policy: crate::eviction::new_policy(crate::eviction::EvictionKind::default(), 64),
            counters: crate::stats::Counters::default(),
            dirty: crate::write::budget::DirtyBudget::new(8, 4),
            readahead_limit: crate::readahead::ReadaheadLimit::new(
                crate::readahead::LimitBounds::for_cache(64),
            ),
        }
    }

    /// A file folio wrote is deleted and its inode given to a new file (ext4 reuses
    /// inode numbers): the new file must get a mapping of its own, never the old pages.
    #[test]
    fn a_reused_inode_of_a_written_file_gets_a_new_mapping() {
        let mem = memory();
        let table = MappingTable::default();
        let stamp = |born_ns| FileStamp {
            size_bytes: 8192,
            mtime_ns: 1,
            born_ns,
        };
        let old = table.get_or_insert(&mem, 1, 42, stamp(100)).unwrap();
        old.write.note_written();
        // The same file again (its own writes moved the mtime): the same mapping.
        let again = table
            .get_or_insert(
                &mem,
                1,
                42,
                FileStamp {
                    mtime_ns: 2,
                    ..stamp(100)
                },
            )
            .unwrap();
        assert!(Arc::ptr_eq(&old, &again));
        // Another birth time: another file on the same inode.
        let new = table.get_or_insert(&mem, 1, 42, stamp(200)).unwrap();
        assert!(
            !Arc::ptr_eq(&old, &new),
            "a new file got a deleted file's mapping"
        );
        assert_eq!(old.handles(), 2, "the probe's handle was given back");
        assert_eq!(new.handles(), 1);
        // A file folio never wrote is revalidated in place, as before.
        let read_only = table.get_or_insert(&mem, 1, 43, stamp(100)).unwrap();
        let replaced = table.get_or_insert(&mem, 1, 43, stamp(200)).unwrap();
        assert!(Arc::ptr_eq(&read_only, &replaced));
    }

    #[test]
    fn ids_of_removed_mappings_are_handed_out_again_first() {
        let mut maps = Maps::default();
        assert_eq!(maps.new_id().unwrap(), MappingId(0));
        assert_eq!(maps.new_id().unwrap(), MappingId(1));
        maps.free_ids.push(MappingId(0));
        assert_eq!(maps.new_id().unwrap(), MappingId(0));
        assert_eq!(maps.new_id().unwrap(), MappingId(2));
        maps.next_id = u32::MAX;
        assert_eq!(
            maps.new_id().unwrap_err().kind(),
            io::ErrorKind::OutOfMemory
        );
        maps.free_ids.push(MappingId(1));
        assert_eq!(
            maps.new_id().unwrap(),
            MappingId(1),
            "a freed id still serves"
        );
    }
}
