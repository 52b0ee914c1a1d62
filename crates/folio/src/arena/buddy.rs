//! The buddy allocator: the arena's free frames on per-order lists, allocation by
//! splitting a larger block, freeing by merging with the block's buddy.
//!
//! Design: orders 0..=9 (4 KiB to 2 MiB), one intrusive `List` per order, threaded
//! through the arena's link words; a free block's head carries its list's id
//! (`FREE_LIST_BASE + k`) in its link word, so `free` tells from a buddy's link word alone
//! whether it is free and at which order. `alloc` takes the first block of the smallest
//! listed order that fits, keeps its low half and lists the high halves down to the order
//! asked for (the kernel's `expand`); `free` merges the block with its buddy (`frame ^
//! 2^k`) while that is free at the same order, up to order 9 (the kernel's
//! `__free_one_page`). When no listed block fits, `alloc` grows the arena by a chunk
//! (`chunk`) and looks again.
//!
//! Invariants:
//! - A free block of order k starts at a frame that is a multiple of 2^k, its head is on
//!   free list k (its link word says so) and every frame in it is DEAD in the side table.
//! - `free_frames` equals the frames in the free lists plus the frames of chunks not
//!   listed yet (virgin or being populated), so watermarks see them as free; allocated
//!   frames never exceed the capacity (there is nothing else to allocate from).
//!
//! Protection: the free lists, the link words of free frames, and `free_frames` change
//! under one mutex (`lists`), as do the chunks' `listed_frames` (`chunk`) and the demand
//! `ArenaPages::Auto` counts (`pages`); `free_frames` is an atomic so that stats and the
//! populator read it without the lock.
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
/// The list id of the free list of order k is `FREE_LIST_BASE + k` (ids below it are the
/// eviction policies' queues).
const FREE_LIST_BASE: QueueId = 0x40;

/// The order of the free block `frame` heads, read from its link word.
fn free_order(links: &Links, frame: u32) -> Option<u8> {
    let id = links.queue(FrameId(frame));
    (FREE_LIST_BASE..=FREE_LIST_BASE + ORDER_MAX)
        .contains(&id)
        .then(|| id - FREE_LIST_BASE)
}

/// The free lists and their count (module docs).
#[derive(Debug)]
pub(super) struct Buddy {
    /// The free lists, by order.
    lists: Mutex<Vec<List>>,
    free_frames: AtomicU64,
}

impl Buddy {
    /// Empty lists, and every frame of the arena counted free (none is listed yet).
    pub(super) fn new(frame_count: u32) -> Buddy {
        Buddy {
            lists: Mutex::new(
                (0..=ORDER_MAX)
                    .map(|k| List::new(FREE_LIST_BASE + k))
                    .collect(),
            ),
            free_frames: AtomicU64::new(u64::from(frame_count)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<List>> {
        self.lists.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Arena {
    /// Takes a free block of exactly `order`, splitting a larger one if needed, growing
    /// the arena by a chunk when no listed block is large enough and virgin memory
    /// remains. The block's head frame is revived LOCKED with one reference
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
            if self.listed_frames() == self.frame_count {
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

    /// `alloc` from the free lists only.
    fn alloc_listed(&self, order: Order, use_: FolioUse) -> Option<FrameId> {
        let want = order.get() as usize;
        let head = {
            let mut lists = self.buddy.lock();
            let have = (want..=ORDER_MAX as usize).find(|&k| !lists[k].is_empty())?;
            let head = lists[have]
                .pop_front(&self.links, |_| 1 << have)
                .expect("list is not empty");
            // Split: keep the low half, free the high halves down to the wanted order.
            for k in (want..have).rev() {
                lists[k].push_back(&self.links, FrameId(head.0 + (1 << k)), 1 << k);
            }
            // Under the lock, so that `free_frames` always equals the free lists.
            let free = self
                .buddy
                .free_frames
                .fetch_sub(order.pages(), Ordering::Relaxed);
            assert!(free >= order.pages(), "free memory below zero");
            self.note_allocated(order, use_);
            head.0
        };
        let frame = FrameId(head);
        self.meta(frame).state.revive_locked();
        // Its size, for `free`, until the owner records the page it will hold.
        self.meta(frame).set_identity(
            crate::folio::MappingId(u32::MAX),
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
        let mut head = frame.0;
        let mut k = order.get();
        let mut lists = self.buddy.lock();
        while k < ORDER_MAX {
            let buddy_frame = head ^ (1 << k);
            if buddy_frame >= self.frame_count || free_order(&self.links, buddy_frame) != Some(k) {
                break;
            }
            let removed = lists[k as usize].remove(&self.links, FrameId(buddy_frame), 1 << k);
            debug_assert!(removed);
            head = head.min(buddy_frame);
            k += 1;
        }
        lists[k as usize].push_back(&self.links, FrameId(head), 1 << k);
        self.buddy
            .free_frames
            .fetch_add(order.pages(), Ordering::Relaxed);
    }

    /// Free frames: those on the lists and those of the chunks not listed yet (module
    /// invariants). A relaxed look.
    pub fn free_frames(&self) -> u64 {
        self.buddy.free_frames.load(Ordering::Relaxed)
    }

    /// Hands the free frames `frames` to the lists, carved into the largest aligned
    /// blocks (one order-9 block but at the arena's odd-sized end), then calls
    /// `while_locked` before the lists' lock is released.
    ///
    /// Context: the caller owns the frames (a chunk it claimed, `chunk`), their
    /// side-table entries and link words reset. Chunks are aligned to the largest order,
    /// so no block has a listed buddy outside its chunk.
    pub(super) fn list_free_blocks(&self, frames: Range<u32>, while_locked: impl FnOnce()) {
        let mut lists = self.buddy.lock();
        let mut frame = frames.start;
        while frame < frames.end {
            let mut order = ORDER_MAX;
            while frame % (1 << order) != 0 || frame + (1 << order) > frames.end {
                order -= 1;
            }
            lists[order as usize].push_back(&self.links, FrameId(frame), 1 << order);
            frame += 1 << order;
        }
        while_locked();
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
