//! Intrusive doubly linked lists of frames: the buddy allocator's free lists and the
//! eviction policies' queues, in one array of link words (8 bytes per frame, like the
//! `lru` list head of the kernel's `struct page`, at half its size).
//!
//! Each frame has one link word: `prev` (28 bits), `next` (28 bits) and the id of the
//! list it is on (8 bits; `QUEUE_NONE` when on none). A frame is on at most one list at a
//! time: a free list while free (owned by the arena), a policy's queue while cached (owned
//! by the policy), none while being allocated, isolated for eviction, or removed.
//!
//! Protection: a `List` (its head, tail and counts) belongs to one owner and is changed
//! under that owner's lock; the link words of the frames on it are changed only by that
//! owner, under the same lock. A frame moves from one owner to another only through a
//! hand-off that orders the two locks (it leaves the free lists under the arena lock,
//! then enters a queue under the policy lock, on the same thread). The words are atomics
//! accessed with Relaxed ordering, so the hand-off needs no unsafe code; the locks give
//! the ordering.
//!
//! Limits: at most 2^28 - 1 frames (1 TiB of cache).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::types::FrameId;

const INDEX_BITS: u32 = 28;
const NIL: u64 = (1 << INDEX_BITS) - 1;
const INDEX_MASK: u64 = NIL;
const NEXT_SHIFT: u32 = INDEX_BITS;
const QUEUE_SHIFT: u32 = 2 * INDEX_BITS;

/// The largest frame count the link words can address.
pub const FRAMES_MAX: u32 = (NIL - 1) as u32;

/// The id of the list a frame is on.
pub type QueueId = u8;
/// On no list.
pub const QUEUE_NONE: QueueId = 0;

pub struct Links {
    words: Box<[AtomicU64]>,
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Links")
            .field("frames", &self.words.len())
            .finish()
    }
}

fn pack(prev: u64, next: u64, queue: QueueId) -> u64 {
    prev | (next << NEXT_SHIFT) | (u64::from(queue) << QUEUE_SHIFT)
}

impl Links {
    /// Link words for `frames` frames, every one on no list (the tests' lists).
    #[cfg(test)]
    pub fn new(frames: u32) -> Links {
        let links = Links::over_zeroed((0..frames).map(|_| AtomicU64::new(0)).collect());
        for frame in 0..frames {
            links.reset(frame);
        }
        links
    }

    /// Link words over `words`, one per frame, that are not written yet: zeroed memory
    /// the kernel has not faulted in (the arena allocates it: a 4 GiB arena's 8 MiB of
    /// links cost nothing until used). A zero word says "on no list" (`QUEUE_NONE`), but
    /// its neighbours are not `NIL`: `reset` each frame before it is put on a list (the
    /// arena does, as it grows).
    pub fn over_zeroed(words: Box<[AtomicU64]>) -> Links {
        assert!(
            words.len() <= FRAMES_MAX as usize,
            "more frames than the link words can address"
        );
        Links { words }
    }

    /// Makes `frame`'s word what a frame on no list has.
    ///
    /// Context: nobody else uses the frame (it is virgin arena memory, or the caller owns it).
    pub fn reset(&self, frame: u32) {
        self.store(u64::from(frame), NIL, NIL, QUEUE_NONE);
    }

    fn load(&self, frame: u64) -> (u64, u64, QueueId) {
        let w = self.words[frame as usize].load(Ordering::Relaxed);
        (
            w & INDEX_MASK,
            (w >> NEXT_SHIFT) & INDEX_MASK,
            (w >> QUEUE_SHIFT) as QueueId,
        )
    }

    fn store(&self, frame: u64, prev: u64, next: u64, queue: QueueId) {
        self.words[frame as usize].store(pack(prev, next, queue), Ordering::Relaxed);
    }

    fn set_prev(&self, frame: u64, prev: u64) {
        let (_, next, queue) = self.load(frame);
        self.store(frame, prev, next, queue);
    }

    fn set_next(&self, frame: u64, next: u64) {
        let (prev, _, queue) = self.load(frame);
        self.store(frame, prev, next, queue);
    }

    /// The list `frame` is on. Context: the caller holds the lock of the owner that
    /// could have put it there, or accepts a stale answer.
    pub fn queue(&self, frame: FrameId) -> QueueId {
        self.load(u64::from(frame.0)).2
    }
}

/// One list: its ends and how much it holds. Owned by one owner, under its lock.
#[derive(Debug)]
pub struct List {
    id: QueueId,
    head: u64,
    tail: u64,
    len: u64,
    /// Pages of the folios on the list (a folio of order k counts 2^k).
    pages: u64,
}

impl List {
    pub fn new(id: QueueId) -> List {
        assert_ne!(id, QUEUE_NONE);
        List {
            id,
            head: NIL,
            tail: NIL,
            len: 0,
            pages: 0,
        }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Appends `frame` (holding `pages`) at the tail. It must be on no list.
    pub fn push_back(&mut self, links: &Links, frame: FrameId, pages: u64) {
        let f = u64::from(frame.0);
        assert_eq!(
            links.load(f).2,
            QUEUE_NONE,
            "frame {} is on list {} already",
            frame.0,
            links.load(f).2
        );
        links.store(f, self.tail, NIL, self.id);
        if self.tail == NIL {
            self.head = f;
        } else {
            links.set_next(self.tail, f);
        }
        self.tail = f;
        self.len += 1;
        self.pages += pages;
    }

    /// The frame at the head (the oldest), if any.
    pub fn front(&self) -> Option<FrameId> {
        (self.head != NIL).then_some(FrameId(self.head as u32))
    }

    /// Removes `frame`, which holds `pages`, from this list. Returns false (changing
    /// nothing) if it is not on this list.
    pub fn remove(&mut self, links: &Links, frame: FrameId, pages: u64) -> bool {
        let f = u64::from(frame.0);
        let (prev, next, queue) = links.load(f);
        if queue != self.id {
            return false;
        }
        if prev == NIL {
            self.head = next;
        } else {
            links.set_next(prev, next);
        }
        if next == NIL {
            self.tail = prev;
        } else {
            links.set_prev(next, prev);
        }
        links.store(f, NIL, NIL, QUEUE_NONE);
        self.len -= 1;
        self.pages -= pages;
        true
    }

    /// Removes and returns the head, whose size the caller gives through `pages_of`.
    pub fn pop_front(
        &mut self,
        links: &Links,
        pages_of: impl Fn(FrameId) -> u64,
    ) -> Option<FrameId> {
        let frame = self.front()?;
        let removed = self.remove(links, frame, pages_of(frame));
        debug_assert!(removed);
        Some(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_keep_order_and_membership() {
        let links = Links::new(16);
        let mut a = List::new(1);
        let mut b = List::new(2);
        for f in [3, 5, 7] {
            a.push_back(&links, FrameId(f), 1);
        }
        b.push_back(&links, FrameId(9), 4);
        assert_eq!(links.queue(FrameId(5)), 1);
        assert!(!b.remove(&links, FrameId(5), 1), "not on b");
        assert!(a.remove(&links, FrameId(5), 1));
        assert_eq!(links.queue(FrameId(5)), QUEUE_NONE);
        assert_eq!(a.pop_front(&links, |_| 1), Some(FrameId(3)));
        assert_eq!(a.pop_front(&links, |_| 1), Some(FrameId(7)));
        assert_eq!(a.pop_front(&links, |_| 1), None);
        assert_eq!((a.len(), a.pages(), b.len(), b.pages()), (0, 0, 1, 4));
        a.push_back(&links, FrameId(3), 1);
        assert_eq!(a.front(), Some(FrameId(3)));
    }

    #[test]
    #[should_panic(expected = "on list")]
    fn a_frame_is_on_one_list_at_a_time() {
        let links = Links::new(4);
        let mut a = List::new(1);
        let mut b = List::new(2);
        a.push_back(&links, FrameId(1), 1);
        b.push_back(&links, FrameId(1), 1);
    }
}
