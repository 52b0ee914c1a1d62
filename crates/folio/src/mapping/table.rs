//! The mapping table: every mapping of a cache, and the lifetime protocol that removes
//! unused ones (`MappingTable`: steps O, C and R, with their interleavings).
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
//! A deleted file's pages go with its last handle (`MappingTable::unlink` against
//! `MappingTable::close`, one of which always sees the other: their SeqCst fences).
//!
//! Protection: the table's reader-writer lock (`MappingTable`); a mapping's handle word
//! (`Handles`) is raised only under it and compared under its write lock by a removal;
//! `folios_closed` is lowered under the index lock; `unlinked` is set once, with a fence.
//!
//! Limits: at most 2^32 mappings at once, and 2^32 handles open on one file.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::RwLock;

use super::{FileStamp, Invalidate, Mapping};
use crate::folio_meta::MappingId;
use crate::index::{Entry, IndexWriteGuard};
use crate::memory::Memory;
use crate::segment::link::KeeperLink;
use crate::stats;
use crate::types::PageIndex;

/// The lifetime protocol's side of a mapping.
impl Mapping {
    /// Whether the file was deleted (`MappingTable::unlink`; read SeqCst, to pair with its
    /// fence).
    pub fn is_unlinked(&self) -> bool {
        self.unlinked.load(Ordering::SeqCst)
    }

    /// Open handles now (a snapshot).
    pub fn handles(&self) -> u32 {
        self.handles.load().open()
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

    /// Whether `now` is another file than the one folio wrote through this mapping: its
    /// inode was freed and given to a new file (another birth time). Such a mapping keeps
    /// serving its own handles and writeback; the new file gets a mapping of its own
    /// (`MappingTable::get_or_insert`).
    fn is_replaced_by(&self, now: &FileStamp) -> bool {
        self.write.is_written()
            && self.stamp.lock().unwrap_or_else(|e| e.into_inner()).born_ns != now.born_ns
    }
}

/// A mapping's handle word: open handles in the low 32 bits, opens ever (modulo 2^32) in
/// the high 32. One atomic, so that a removal can tell "no handle now, and none opened
/// since I looked" from "no handle now": a handle opened and closed in between (which may
/// have inserted folios) leaves the count where it was but moves the opens.
#[derive(Debug)]
pub(super) struct Handles(AtomicU64);

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
    pub(super) fn opened_once() -> Handles {
        Handles(AtomicU64::new(OPEN))
    }

    /// The word of a mapping a restart adopted: cached, no handle open (`adopt`).
    pub(super) fn closed() -> Handles {
        Handles(AtomicU64::new(0))
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
    /// A persistent cache's line to its keeper (DESIGN.md §9, `segment::link`), which
    /// keeps a copy of the ids this table hands out: told the descriptor of each file a
    /// mapping writes (`register_writer`) and each id freed, before its reuse (step R).
    keeper: Option<KeeperLink>,
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
    /// An empty table; `keeper`: a persistent cache's line to its keeper.
    pub fn new(keeper: Option<KeeperLink>) -> MappingTable {
        MappingTable {
            maps: RwLock::default(),
            keeper,
        }
    }

    /// A persistent cache's line to its keeper.
    pub fn keeper(&self) -> Option<&KeeperLink> {
        self.keeper.as_ref()
    }

    /// `mapping` was opened for writing `fd`, a descriptor it keeps (`WriteState::adopt_fd`):
    /// a persistent cache's keeper gets a copy, to write the file after this process's
    /// death.
    ///
    /// Context: before the handle's first write.
    pub fn register_writer(&self, mapping: &Mapping, fd: std::os::unix::io::RawFd) {
        if let Some(keeper) = &self.keeper {
            keeper.register(mapping.id, fd);
        }
    }

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
    /// existing one is revalidated against the file's stamp (its pages dropped if the
    /// file changed). The caller owns the handle and gives it back with `close`.
    ///
    /// `stamp_now` stats the file (`fstat` of the caller's descriptor). A new mapping
    /// takes its stamp from a call made under the table's lock: the removal of the file's
    /// last mapping settles the size on disk under that lock (`remove_if_unused`), so a
    /// stamp taken before it may hold a size the file no longer has (issue 42: a tail
    /// block's padding, or a length short of writes that landed since).
    ///
    /// Context: takes the table's lock, then (after dropping it) the mapping's; calls
    /// `stamp_now` with and without the table's lock.
    pub fn get_or_insert(
        &self,
        mem: &Memory,
        dev: u64,
        ino: u64,
        stamp_now: &dyn Fn() -> io::Result<FileStamp>,
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
                        let stamp = stamp_now()?;
                        let id = maps.new_id()?;
                        let segment = mem.arena().segment().cloned();
                        let mapping = Arc::new(Mapping::new(id, (dev, ino), stamp, segment));
                        maps.by_id.insert(id, mapping.clone());
                        maps.by_inode.insert((dev, ino), id);
                        return Ok(mapping);
                    }
                }
            }
        };
        let stamp = match stamp_now() {
            Ok(stamp) => stamp,
            Err(e) => {
                self.close(mem, &mapping);
                return Err(e);
            }
        };
        if mapping.is_replaced_by(&stamp) {
            let mut maps = self.write();
            if maps.by_inode.get(&(dev, ino)) == Some(&mapping.id) {
                maps.by_inode.remove(&(dev, ino));
            }
            drop(maps);
            self.close(mem, &mapping);
            return self.get_or_insert(mem, dev, ino, stamp_now);
        }
        mapping.revalidate(mem, stamp);
        Ok(mapping)
    }

    /// The last name of `mapping`'s file was unlinked: drops its pages now if no handle
    /// has it open, else when the last one closes (`MappingTable::close`). One of the two
    /// sees the other (the fences): the pages never outlive both.
    ///
    /// Context: no lock held; may take the file's writer lock and index lock, and sleep
    /// for writebacks in flight (`forget_deleted`).
    pub fn unlink(&self, mem: &Memory, mapping: &Mapping) {
        mapping.unlinked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if mapping.handles() == 0 {
            self.forget_deleted(mem, mapping);
        }
    }

    /// The file of `mapping` was deleted and no handle has it open: drops every cached
    /// page, dirty ones too (their bytes belong to no file any more), and the kept
    /// descriptor (ours, and the keeper's), so the file system frees the inode's blocks as
    /// it would without folio. Returns the pages dropped.
    ///
    /// Context: no lock held; takes the file's writer lock and the index lock; may sleep
    /// for writebacks in flight.
    fn forget_deleted(&self, mem: &Memory, mapping: &Mapping) -> u64 {
        debug_assert!(
            mapping.unlinked.load(Ordering::Relaxed),
            "forgets only a deleted file"
        );
        let _writer = mapping.write.lock_writer();
        mapping.write.note_written();
        let dropped = mapping.invalidate(mem, PageIndex(0), PageIndex::END, Invalidate::Truncate);
        mapping.write.forget_fd();
        if let Some(keeper) = &self.keeper {
            keeper.forget(mapping.id);
        }
        dropped
    }

    /// Step C: gives back a handle `get_or_insert` gave; the last one tries removal.
    ///
    /// Context: `File`'s drop; no lock held. Walks the mapping's index when it was the
    /// last handle (time in proportion to its entries).
    pub fn close(&self, mem: &Memory, mapping: &Arc<Mapping>) {
        if mapping.handles.close().open() == 0 {
            // Pairs with `MappingTable::unlink`'s fence: an unlink that saw this handle open
            // is seen here.
            fence(Ordering::SeqCst);
            if mapping.unlinked.load(Ordering::SeqCst) {
                self.forget_deleted(mem, mapping);
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
            // The keeper forgets the id before it can be reused (`segment::link`).
            if let Some(keeper) = &self.keeper {
                keeper.forget(mapping.id);
            }
            maps.free_ids.push(mapping.id);
        }
        drop(maps);
        if removed.is_some() {
            stats::bump(&mem.counters().mappings_removed);
        }
        // `removed` drops here, outside the lock; the index goes with the last `Arc`.
        Unused::Removed
    }

    /// Adds the mapping of a file a restart found cached in its segment, under the id its
    /// slot and folios carry, with no handle open (a closed file's cached pages); the
    /// caller then inserts its `folios` and the mapping lives while they do. Ids below the
    /// highest adopted one that no adopted mapping took are handed out first.
    ///
    /// Context: the build, before the cache is shared (`adopt`).
    pub fn adopt(
        &self,
        id: MappingId,
        inode: (u64, u64),
        stamp: FileStamp,
        segment: Option<Arc<crate::segment::Segment>>,
        folios: u64,
    ) -> Arc<Mapping> {
        let mut maps = self.write();
        let mapping = Arc::new(Mapping::adopted(id, inode, stamp, segment, folios));
        assert!(
            maps.by_id.insert(id, mapping.clone()).is_none()
                && maps.by_inode.insert(inode, id).is_none(),
            "a mapping id or inode adopted twice"
        );
        if id.0 >= maps.next_id {
            let skipped = (maps.next_id..id.0).map(MappingId);
            maps.free_ids.extend(skipped.collect::<Vec<_>>());
            maps.next_id = id.0 + 1;
        }
        maps.free_ids.retain(|&free| free != id);
        mapping
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
        Memory::new(
            crate::arena::Arena::new(64, crate::arena::ArenaPages::Small).unwrap(),
            crate::eviction::new_policy(crate::eviction::EvictionKind::default(), 64),
            crate::write::budget::DirtyBudget::new(8, 4),
            crate::readahead::ReadaheadLimit::new(crate::readahead::LimitBounds::for_cache(64)),
        )
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
        let old = table
            .get_or_insert(&mem, 1, 42, &|| Ok(stamp(100)))
            .unwrap();
        old.write.note_written();
        // The same file again (its own writes moved the mtime): the same mapping.
        let again = table
            .get_or_insert(&mem, 1, 42, &|| {
                Ok(FileStamp {
                    mtime_ns: 2,
                    ..stamp(100)
                })
            })
            .unwrap();
        assert!(Arc::ptr_eq(&old, &again));
        // Another birth time: another file on the same inode.
        let new = table
            .get_or_insert(&mem, 1, 42, &|| Ok(stamp(200)))
            .unwrap();
        assert!(
            !Arc::ptr_eq(&old, &new),
            "a new file got a deleted file's mapping"
        );
        assert_eq!(old.handles(), 2, "the probe's handle was given back");
        assert_eq!(new.handles(), 1);
        // A file folio never wrote is revalidated in place, as before.
        let read_only = table
            .get_or_insert(&mem, 1, 43, &|| Ok(stamp(100)))
            .unwrap();
        let replaced = table
            .get_or_insert(&mem, 1, 43, &|| Ok(stamp(200)))
            .unwrap();
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
