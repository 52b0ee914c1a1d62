//! The buddy allocator: the arena's free frames on per-order lists, allocation by
//! splitting a larger block, freeing by merging with the block's buddy.
//!
//! Design: orders 0..=9 (4 KiB to 2 MiB), two intrusive `List`s per order, threaded
//! through the arena's link words: blocks whose memory is resident, and blocks whose
//! memory was given back to the system (`quota`), which an allocation takes only when
//! no resident block fits (their pages fault in again on first touch). A free block's
//! head carries its list's id (`RESIDENT_LIST_BASE + k` or `RETURNED_LIST_BASE + k`) in
//! its link word, so `free` tells from a buddy's link word alone whether it is free, at
//! which order and on which kind of list. `alloc` takes the first block of the smallest
//! listed order that fits, keeps its low half and lists the high halves down to the order
//! asked for (the kernel's `expand`); `free` merges the block with its buddy (`frame ^
//! 2^k`) while that is free at the same order, up to order 9 (the kernel's
//! `__free_one_page`); a block merged with a returned buddy is listed resident (its
//! returned half is then counted resident until given back again: the count of returned
//! frames errs low, never high). When no listed block fits, `alloc` grows the arena by a
//! chunk (`chunk`) and looks again. No allocation takes the allocated frames past the
//! capacity (`quota`): the check is made under the lists' lock, so it is exact.
//!
//! Invariants:
//! - A free block of order k starts at a frame that is a multiple of 2^k, its head is on
//!   free list k (its link word says so) and every frame in it is DEAD in the side table.
//! - `unallocated` equals the frames in the free lists plus the frames of chunks not
//!   listed yet (virgin or being populated) plus the blocks a give-back holds off the
//!   lists while it advises them; `returned` counts frames on the returned lists.
//! - Allocated frames (the arena's frames less `unallocated`) never exceed
//!   `capacity_frames` as it was when they were allocated (a shrink leaves the excess
//!   for reclaim).
//!
//! Protection: the free lists, the link words of free frames, `unallocated` and
//! `returned` change under one mutex (`lists`), as do the chunks' `listed_frames`
//! (`chunk`) and the demand `ArenaPages::Auto` counts (`pages`); the counts are atomics
//! so that stats, reclaim and the populator read them without the lock;
//! `capacity_frames` is stored by `Arena::set_capacity_frames` and read under the lock.
//!
//! Limits: one mutex for the free lists (no per-thread caches yet: allocation is on the
//! miss path only, next to an I/O that costs 100x more); no block spans two chunks, so
//! none is larger than a chunk.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::list::{Links, List, QueueId};
use crate::types::{FrameId, Order, ORDER_MAX};

use super::{Arena, FolioUse};

/// How many 1 ms waits an allocation makes for the last chunks to be listed.
const LISTING_WAITS_MAX: u32 = 1000;
/// The list id of the resident free list of order k is `RESIDENT_LIST_BASE + k` (ids
/// below it are the eviction policies' queues)...
const RESIDENT_LIST_BASE: QueueId = 0x40;
/// ... and of the returned one, `RETURNED_LIST_BASE + k`.
const RETURNED_LIST_BASE: QueueId = 0x50;

/// Whether a free block's memory is resident or was given back to the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Residence {
    Resident,
    Returned,
}

/// The order and residence of the free block `frame` heads, read from its link word.
fn free_block(links: &Links, frame: u32) -> Option<(u8, Residence)> {
    let id = links.queue(FrameId(frame));
    if (RESIDENT_LIST_BASE..=RESIDENT_LIST_BASE + ORDER_MAX).contains(&id) {
        Some((id - RESIDENT_LIST_BASE, Residence::Resident))
    } else if (RETURNED_LIST_BASE..=RETURNED_LIST_BASE + ORDER_MAX).contains(&id) {
        Some((id - RETURNED_LIST_BASE, Residence::Returned))
    } else {
        None
    }
}

/// The free lists, by order: resident blocks and returned ones (module docs).
#[derive(Debug)]
pub(super) struct FreeLists {
    pub(super) resident: Vec<List>,
    pub(super) returned: Vec<List>,
}

impl FreeLists {
    pub(super) fn of(&mut self, residence: Residence) -> &mut Vec<List> {
        match residence {
            Residence::Resident => &mut self.resident,
            Residence::Returned => &mut self.returned,
        }
    }
}

/// The free lists and their counts (module docs).
#[derive(Debug)]
pub(super) struct Buddy {
    lists: Mutex<FreeLists>,
    /// Frames not allocated: listed, unlisted, or held by a give-back (invariants).
    pub(super) unallocated: AtomicU64,
    /// Frames on the returned lists.
    pub(super) returned: AtomicU64,
    /// Frames allocated from the returned lists, since build.
    pub(super) regrown: AtomicU64,
    /// The most frames that may be allocated: the cache's capacity now
    /// (`Arena::set_capacity_frames`), at most the arena's frames.
    pub(super) capacity_frames: AtomicU64,
}

impl Buddy {
    /// Empty lists, every frame of the arena counted unallocated (none is listed yet),
    /// and all of them allowed.
    pub(super) fn new(frame_count: u32) -> Buddy {
        let lists = |base: QueueId| (0..=ORDER_MAX).map(|k| List::new(base + k)).collect();
        Buddy {
            lists: Mutex::new(FreeLists {
                resident: lists(RESIDENT_LIST_BASE),
                returned: lists(RETURNED_LIST_BASE),
            }),
            unallocated: AtomicU64::new(u64::from(frame_count)),
            returned: AtomicU64::new(0),
            regrown: AtomicU64::new(0),
            capacity_frames: AtomicU64::new(u64::from(frame_count)),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, FreeLists> {
        self.lists.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Arena {
    /// Takes a free block of exactly `order`, splitting a larger one if needed, growing
    /// the arena by a chunk when no listed block is large enough and virgin memory
    /// remains. `None` at once when the block would take the allocated frames past the
    /// capacity (`quota`). The block's head frame is revived LOCKED with one reference
    /// (`refcount`), and its version is still odd. `None` when no block of that order or
    /// larger is free.
    ///
    /// Context: takes the lists' lock. Grows the arena itself rather than wait for the
    /// populator (a chunk it grows is listed unpopulated); only once every chunk is
    /// claimed does it wait, parked, for another thread to list the last ones: an
    /// allocator lists its chunk at once, the populator after populating it. `None` too
    /// when that wait lasts `LISTING_WAITS_MAX` ms.
    pub fn alloc(&self, order: Order, use_: FolioUse) -> Option<FrameId> {
        let mut waits = 0;
        loop {
            if self.free_frames() < order.pages() {
                return None; // at the capacity: reclaim first
            }
            let listed_before = self.listed_frames();
            if let Some(frame) = self.alloc_listed(order, use_) {
                self.wake_populator();
                return Some(frame);
            }
            if self.listed_frames() != listed_before {
                continue; // a chunk was listed since our look at the lists
            }
            if self.grow_unpopulated() {
                continue;
            }
            if self.listed_frames() == self.frame_count || self.no_room() {
                return None; // fully grown, and nothing of this order is free
            }
            // Another thread holds the last chunks: an allocator lists its chunk at once,
            // the populator right after populating it (milliseconds here). Park until a
            // chunk is listed (`wait_for_listing`), for at most a second: a thread that
            // died holding a chunk lists nothing more, and then this allocation fails
            // like a full cache.
            waits += 1;
            if waits > LISTING_WAITS_MAX {
                return None;
            }
            self.wait_for_listing(listed_before);
        }
    }

    /// `alloc` from the free lists only: a resident block if one fits, else a returned
    /// one; `None` past the capacity.
    fn alloc_listed(&self, order: Order, use_: FolioUse) -> Option<FrameId> {
        let want = order.get() as usize;
        let (head, residence) = {
            let mut lists = self.buddy.lock();
            let unallocated = self.buddy.unallocated.load(Ordering::Relaxed);
            let allocated = u64::from(self.frame_count) - unallocated;
            if allocated + order.pages() > self.buddy.capacity_frames.load(Ordering::Relaxed) {
                return None;
            }
            let (residence, have) = [Residence::Resident, Residence::Returned]
                .into_iter()
                .find_map(|residence| {
                    let kind = lists.of(residence);
                    let have = (want..=ORDER_MAX as usize).find(|&k| !kind[k].is_empty())?;
                    Some((residence, have))
                })?;
            let kind = lists.of(residence);
            let head = kind[have]
                .pop_front(&self.links, |_| 1 << have)
                .expect("list is not empty");
            // Split: keep the low half, free the high halves down to the wanted order, on
            // the lists of the block's residence.
            for k in (want..have).rev() {
                kind[k].push_back(&self.links, FrameId(head.0 + (1 << k)), 1 << k);
            }
            if residence == Residence::Returned {
                self.buddy
                    .returned
                    .fetch_sub(order.pages(), Ordering::Relaxed);
                self.buddy
                    .regrown
                    .fetch_add(order.pages(), Ordering::Relaxed);
            }
            // Under the lock, so that `unallocated` always equals the free lists.
            self.buddy
                .unallocated
                .store(unallocated - order.pages(), Ordering::Relaxed);
            self.note_allocated(order, use_);
            (head.0, residence)
        };
        if residence == Residence::Returned && !self.reserve_frames(head..head + (1 << want)) {
            // A segment's file system without room for the block's memory again: back on
            // the returned lists, and the caller reclaims (`Arena::reserve`).
            let mut lists = self.buddy.lock();
            self.merge_and_list(&mut lists, head, want as u8, Residence::Returned);
            self.buddy
                .unallocated
                .fetch_add(order.pages(), Ordering::Relaxed);
            self.buddy
                .regrown
                .fetch_sub(order.pages(), Ordering::Relaxed);
            return None;
        }
        let frame = FrameId(head);
        self.meta(frame).state.revive_locked();
        // Its size, for `free`, until the owner records the page it will hold.
        self.meta(frame).set_identity(
            crate::folio_meta::MappingId(u32::MAX),
            crate::types::PageIndex(0),
            order,
        );
        // The new owner's writes to this frame (the read that fills it) come after this
        // fence, which pairs with the Acquire fence of an optimistic reader's `validate`.
        std::sync::atomic::fence(Ordering::Release);
        Some(frame)
    }

    /// Returns a folio's frames. Context: the caller won the frame (`try_freeze` or a
    /// `put` that returned `Free`), so its state is DEAD; this retires its version if it
    /// held valid bytes. Never called under a mapping's lock (side effects outside locks).
    ///
    /// The folio's size comes from its own metadata (recorded at allocation), never from
    /// the caller: a caller's order may come from a lock-free walk that raced with the
    /// frame's reuse at another order, and freeing by it would corrupt the free lists.
    pub fn free(&self, frame: FrameId) {
        let meta = self.meta(frame);
        let order = meta.identity().2;
        let state = meta.state.load();
        assert!(
            state.is_dead() && !state.is_locked() && !state.is_dirty() && !state.is_writeback(),
            "freed a folio that is not dead, has I/O in flight, or is dirty: {state:?}"
        );
        if meta.version.is_valid() {
            meta.version.retire();
        }
        meta.state.mark_free();
        let (head, k) = (frame.0, order.get());
        let mut lists = self.buddy.lock();
        self.merge_and_list(&mut lists, head, k, Residence::Resident);
        self.buddy
            .unallocated
            .fetch_add(order.pages(), Ordering::Relaxed);
    }

    /// Lists the free block of order `k` at `head`, merged with its buddy while that is
    /// free at the same order. The merged block keeps `residence` only if every block it
    /// took shares it; otherwise it is resident (module docs).
    ///
    /// Context: under the lists' lock; the caller owns the block.
    pub(super) fn merge_and_list(
        &self,
        lists: &mut FreeLists,
        mut head: u32,
        mut k: u8,
        mut residence: Residence,
    ) {
        while k < ORDER_MAX {
            let buddy_frame = head ^ (1 << k);
            if buddy_frame >= self.frame_count {
                break;
            }
            let Some((buddy_k, buddy_residence)) = free_block(&self.links, buddy_frame) else {
                break;
            };
            if buddy_k != k {
                break;
            }
            let removed = lists.of(buddy_residence)[k as usize].remove(
                &self.links,
                FrameId(buddy_frame),
                1 << k,
            );
            debug_assert!(removed);
            if buddy_residence == Residence::Returned {
                self.buddy.returned.fetch_sub(1 << k, Ordering::Relaxed);
            }
            if buddy_residence != residence {
                // Half of it resident: listed resident, and the count of returned frames
                // errs low.
                residence = Residence::Resident;
            }
            head = head.min(buddy_frame);
            k += 1;
        }
        if residence == Residence::Returned {
            self.buddy.returned.fetch_add(1 << k, Ordering::Relaxed);
        }
        lists.of(residence)[k as usize].push_back(&self.links, FrameId(head), 1 << k);
    }

    /// Hands the free frames `frames` to the lists, carved into the largest aligned
    /// blocks (one order-9 block but at the arena's odd-sized end), then calls
    /// `while_locked` before the lists' lock is released.
    ///
    /// Context: the caller owns the frames (a chunk it claimed, `chunk`), their
    /// side-table entries and link words reset. Chunks are aligned to the largest order,
    /// so no block has a listed buddy outside its chunk.
    pub(super) fn list_free_blocks(&self, frames: Range<u32>, while_locked: impl FnOnce()) {
        self.list_blocks(frames, Residence::Resident);
        while_locked();
    }

    /// `list_free_blocks` onto the lists of `residence` (a restart's adopted arena,
    /// `list_adopted`, whose free frames may be holes in its segment).
    pub(super) fn list_free_blocks_as(&self, frames: Range<u32>, residence: Residence) {
        self.list_blocks(frames, residence);
    }

    fn list_blocks(&self, frames: Range<u32>, residence: Residence) {
        let mut lists = self.buddy.lock();
        let mut frame = frames.start;
        while frame < frames.end {
            let mut order = ORDER_MAX;
            while frame % (1 << order) != 0 || frame + (1 << order) > frames.end {
                order -= 1;
            }
            lists.of(residence)[order as usize].push_back(&self.links, FrameId(frame), 1 << order);
            if residence == Residence::Returned {
                self.buddy.returned.fetch_add(1 << order, Ordering::Relaxed);
            }
            frame += 1 << order;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::ArenaPages;

    #[test]
    fn buddy_splits_and_merges() {
        let arena = Arena::new(1024, ArenaPages::Small).unwrap();
        assert_eq!(arena.free_frames(), 1024);
        let a = arena.alloc(Order::new(0), FolioUse::Request).unwrap();
        let b = arena.alloc(Order::new(3), FolioUse::Request).unwrap();
        assert_eq!(b.0 % 8, 0, "order-3 blocks are aligned");
        assert_eq!(arena.free_frames(), 1024 - 9);
        for frame in [a, b] {
            arena.meta(frame).state.finish_read_ok();
            assert!(arena.meta(frame).state.try_freeze());
            arena.free(frame);
        }
        assert_eq!(arena.free_frames(), 1024);
        // Everything merged back: two order-9 blocks are available again.
        assert!(arena.alloc(Order::MAX, FolioUse::Request).is_some());
        assert!(arena.alloc(Order::MAX, FolioUse::Request).is_some());
        assert!(arena.alloc(Order::ZERO, FolioUse::Request).is_none());
    }
}
