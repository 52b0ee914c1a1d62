//! A write's steps on one folio (DESIGN.md §8): finding or making the folio of a page,
//! locking it for the copy (or copying it on write when others pin it), the copy, and
//! dirtying it; with the index's half of a write (a new page inserted dirty, a copy put
//! in its folio's slot).
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
//!     index (`FolioWriter::replace_for_write`); the holders keep the old bytes, as the holders
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
//! Protection: the file's writer lock for every step here (`WriteState::lock_writer`,
//! taken by the caller per piece); the index lock inside the index steps; the state word
//! for the rest.

use std::io;
use std::time::Duration;

use super::mask::{BlockMask, Blocks, Prior};
use crate::arena::FolioUse;
use crate::filemap::MissPath;
use crate::index::{Entry, Mark, NewFolio};
use crate::mapping::Pinned;
use crate::pagecache::AllocMode;
use crate::refcount::{PutOutcome, WriteLock};
use crate::stats;
use crate::types::{FrameId, Order, PageIndex, PAGE_BYTES};
use crate::wait;

/// Times a writer retries taking a folio that someone pins before it copies on write.
const PINNED_RETRIES: u32 = 3;

/// A folio that W3 gave the writer.
struct Locked {
    frame: FrameId,
    order: Order,
    head: PageIndex,
    prior: Prior,
    /// Whether readers may have seen the folio (then its version moves around the copy).
    publication: Publication,
}

/// Whether a locked folio was ever published to readers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Publication {
    /// A folio in the index that readers have seen: its version moves around the copy.
    Published,
    /// A copy made by W3 (or a new page), its version odd: published when the writer is
    /// done.
    Unpublished,
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

/// What W1-W3 prepared.
enum Prepared {
    /// A new page was written whole and inserted (no folio to copy into): its bytes.
    Written(usize),
    Locked(Locked),
}

/// What copy on write's index step did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Replaced {
    /// The copy is in the slot; whether the old folio was dirty.
    Done(Prior),
    /// The old folio left its slot, or a writeback or a read holds it: wait, start over.
    Retry,
}

/// The folio-level steps of one handle's write: the miss path's view of the handle (to
/// insert and allocate), and how to read a page that a write covers only in part (the
/// read path's, which lives above this room).
pub(crate) struct FolioWriter<'a> {
    pub fill: MissPath<'a>,
    /// Reads `page` into the cache and waits for it (or finds it past the end).
    pub read_page: &'a dyn Fn(PageIndex) -> io::Result<()>,
}

impl FolioWriter<'_> {
    /// W1-W5 for `src` at `pos`, folio by folio. Returns the pages newly dirtied.
    ///
    /// Context: the file's writer lock held.
    pub fn write_piece(&self, src: &[u8], pos: u64) -> io::Result<u64> {
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
        let core = self.fill.core();
        let mut pinned_tries = 0;
        loop {
            let folio = match self.fill.mapping.find_get(core.memory(), page) {
                Ok(folio) => folio,
                Err(_) => {
                    let size = self.fill.mapping.size_bytes();
                    let start = page.offset_bytes();
                    let rest_is_file = start < size
                        && !(in_page == 0
                            && (page_len == PAGE_BYTES || start + page_len as u64 >= size));
                    if rest_is_file {
                        // Read it (the miss path), then write into what was read.
                        (self.read_page)(page)?;
                        continue;
                    }
                    match self.write_new_page(page, in_page, page_src)? {
                        Some(n) => return Ok(Prepared::Written(n)),
                        None => continue, // a reader inserted the page first
                    }
                }
            };
            let meta = core.arena().meta(folio.frame);
            if meta.state.load().is_locked() {
                wait::wait_unlocked(meta);
            }
            if !meta.state.load().is_uptodate() {
                // The read failed: `read_page` returns its error (or reads it again).
                drop(folio);
                (self.read_page)(page)?;
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
                        publication: Publication::Published,
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
        let core = self.fill.core();
        let arena = core.arena();
        let (frame, order) = core.alloc_folio(Order::ZERO, FolioUse::Request, AllocMode::Wait)?;
        let meta = arena.meta(frame);
        meta.set_identity(self.fill.mapping.id, page, order);
        arena.zero_range(frame, order, 0, in_page);
        arena.copy_in(frame, order, in_page, src);
        arena.zero_range(frame, order, in_page + src.len(), PAGE_BYTES);
        let folio = NewFolio {
            frame,
            order,
            head: page,
        };
        if !self.insert_written(folio) {
            if meta.state.abandon_locked() == crate::refcount::PutOutcome::Free {
                arena.free(frame);
            }
            return Ok(None);
        }
        // W4's size rule: before DIRTY, while LOCKED keeps writeback off the folio.
        self.fill
            .mapping
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
        let core = self.fill.core();
        let arena = core.arena();
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
        meta.set_identity(self.fill.mapping.id, old.head, order);
        arena.copy_in(frame, order, 0, arena.pinned_bytes(old.frame, old.order));
        let new = NewFolio {
            frame,
            order,
            head: old.head,
        };
        match self.replace_for_write(old.frame, new) {
            Replaced::Done(prior) => {
                stats::bump(&core.counters().write_copies);
                Ok(Some(Locked {
                    frame,
                    order,
                    head: old.head,
                    prior,
                    publication: Publication::Unpublished,
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
        let core = self.fill.core();
        let arena = core.arena();
        let meta = arena.meta(locked.frame);
        if locked.publication == Publication::Published {
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
            self.fill.mapping.extend_to(end_bytes);
            let first = (in_folio / PAGE_BYTES) as u64;
            let last = (in_folio + len).div_ceil(PAGE_BYTES) as u64;
            let blocks = Blocks::range(first, last - first);
            newly = BlockMask::of(arena, locked.frame, locked.order).mark(&blocks, locked.prior);
            if locked.prior == Prior::Clean {
                self.fill
                    .mapping
                    .index
                    .lock()
                    .set_mark(locked.head, crate::index::Mark::Dirty);
            }
        }
        match (locked.publication, change, locked.prior) {
            (Publication::Published, Change::Dirtied { .. }, _) => {
                meta.version.end_write();
                meta.state.unlock_dirty();
            }
            (Publication::Published, Change::PastEnd, _) => {
                meta.version.end_write();
                meta.state.unlock_written_clean();
            }
            (Publication::Unpublished, Change::PastEnd, Prior::Clean) => {
                meta.version.publish();
                meta.state.finish_read_ok();
            }
            (Publication::Unpublished, _, _) => {
                meta.version.publish();
                meta.state.finish_fill_dirty();
            }
        }
        wait::wake_all(meta);
        // The pin W1 took (kept through `into_raw`, or the copy's own reference, which
        // became the index's: a copy holds none of the writer's).
        if locked.publication == Publication::Published {
            core.put_folio(locked.frame);
        }
        newly
    }

    /// `set_len` down to `len`: the cached folio that holds the new last byte is zeroed
    /// past it, so a later extension reads zeros there.
    pub fn zero_past_end(&self, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let last = PageIndex::containing(len - 1);
        let core = self.fill.core();
        let Ok(folio) = self.fill.mapping.find_get(core.memory(), last) else {
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

    /// Inserts a folio a writer filled (a new page: no read), marked dirty, in one lock
    /// hold; false if a reader's insertion came first (the writer gives it back and
    /// writes into that one).
    ///
    /// Context: the file's writer lock held; `folio` is LOCKED and owned by the caller.
    fn insert_written(&self, folio: NewFolio) -> bool {
        let mut w = self
            .fill
            .mapping
            .index
            .lock_for_insert(folio.head, folio.order.pages());
        let inserted = self.fill.insert_admit(&mut w, &[folio])[0];
        if inserted {
            w.set_mark(folio.head, Mark::Dirty);
            stats::add(
                &self.fill.core().counters().pages_inserted,
                folio.order.pages(),
            );
        }
        inserted
    }

    /// Copy on write (W3): puts `new` (LOCKED, holding `old`'s bytes) in
    /// the index in place of `old`, which others hold pinned, and moves `old`'s dirty
    /// blocks to it; the slot's marks stay (`IndexWriteGuard::replace_folio`). `Retry` if `old` left its slot, or a writeback or a read holds it
    /// (the caller waits and starts over). The holders of `old` keep its bytes; its frame
    /// goes back with the last of them.
    ///
    /// Context: the file's writer lock held, `old` pinned by the caller; takes the index
    /// lock.
    fn replace_for_write(&self, old: FrameId, new: NewFolio) -> Replaced {
        let core = self.fill.core();
        let arena = core.arena();
        let old_meta = arena.meta(old);
        let mut w = self.fill.mapping.index.lock();
        let holds = matches!(w.get(new.head), Entry::Folio { frame, order, head }
            if frame == old && order == new.order && head == new.head);
        let state = old_meta.state.load();
        if !holds || state.is_writeback() || state.is_locked() {
            return Replaced::Retry;
        }
        // The old folio keeps its pinned holders past the write: a restart that finds it
        // in the segment after a kill must not take its bytes for the file's.
        old_meta.state.mark_detached();
        let prior = Prior::of(state);
        if prior == Prior::Dirty {
            let blocks = BlockMask::of(arena, old, new.order).peek();
            BlockMask::of(arena, new.frame, new.order).mark(&blocks, Prior::Clean);
            // DIRTY on the copy (still LOCKED) before the old folio is cleaned: at no
            // instant are the dirty blocks in no dirty folio, which a keeper writing back
            // a killed owner's segment would see (`keeper::orphan`).
            arena
                .meta(new.frame)
                .state
                .set_flags(crate::refcount::DIRTY);
            old_meta.state.discard_dirty();
        }
        // In place: the slot keeps its marks (`Dirty`, and a sync's `Towrite`).
        let replaced = w.replace_folio(old, new);
        assert!(replaced, "the slot checked under the lock changed");
        core.memory().forget_evictable(old, new.order.pages());
        self.fill.admit(&new, None);
        debug_assert!(
            prior == Prior::Clean || w.is_marked(new.head, Mark::Dirty),
            "a dirty folio's copy lost its Dirty mark"
        );
        drop(w);
        // The index's reference goes; the caller's pin keeps the frame.
        let outcome = old_meta.state.put();
        debug_assert_eq!(outcome, PutOutcome::Alive);
        Replaced::Done(prior)
    }
}
