//! The arena's capacity: how many of its frames may be allocated now, and memory given
//! back to the system when the capacity shrinks.
//!
//! Design: the arena reserves its largest size at build (`frame_count`, the cache's
//! maximum capacity) and never moves a frame; the capacity (`capacity_frames`) is how
//! many of them may be allocated at once, set at any time (`set_capacity_frames`).
//! Allocation refuses a block past it (`buddy`), so the caller reclaims; `free_frames`,
//! what reclaim and the watermarks see, is the room left under it. Lowering it frees
//! nothing by itself: the page cache evicts down to it (`Core::set_capacity`), then calls
//! `give_back`, which takes free resident blocks off the lists, largest first, advises
//! their memory `MADV_DONTNEED` outside every lock and lists them on the returned lists.
//!
//! Why `MADV_DONTNEED`: on a private anonymous mapping it frees the pages at once (the
//! resident set falls before the call returns, which is what a process short of memory
//! needs) and leaves the range mapped: a later touch faults in a zeroed page. So an
//! optimistic reader that raced with the block's free and reads its memory afterwards
//! reads zeros and fails its version check, as it would on reused memory; it never
//! faults. `MADV_FREE` frees lazily, only when the kernel is short of memory, so the
//! memory stays counted resident (and in a cgroup's `memory.current`) until then;
//! `MADV_REMOVE` is for shared mappings; unmapping would make a racing optimistic reader
//! fault.
//!
//! Invariants: a block on a returned list was advised after it was freed, and no frame of
//! it was allocated since (a returned block that is allocated or merged with a resident
//! buddy leaves the returned count). `resident_frames` is an upper bound of the arena's
//! resident memory: listed frames less the returned ones (listed chunks not yet touched
//! and merged returned halves count resident).
//!
//! Protection: `capacity_frames` is an atomic, read under the lists' lock by `alloc`; a
//! give-back owns the blocks it took off the lists until it lists them again.
//!
//! Limits: a shrink returns only free memory: a pinned folio, or a dirty one not yet
//! written back, stays resident until its holder lets go (then reclaim frees it and the
//! next `give_back` returns it). Growing back faults pages in again, 4 KiB pages at about
//! 1 us each (`populate`).

use std::sync::atomic::Ordering;

use crate::types::{FrameId, ORDER_MAX, PAGE_BYTES};

use super::buddy::Residence;
use super::Arena;

/// Blocks a give-back takes off the lists per hold of the lists' lock: 64 MiB at most, so
/// that allocators wait for one lock hold, never for the system calls.
const GIVE_BACK_BATCH_FRAMES: u64 = 16 << 10;

impl Arena {
    /// The most frames that may be allocated now.
    pub fn capacity_frames(&self) -> u64 {
        self.buddy.capacity_frames.load(Ordering::Relaxed)
    }

    /// Sets the most frames that may be allocated, at most the arena's frames. Frees
    /// nothing: frames allocated past a lower capacity stay until reclaimed (module docs).
    pub fn set_capacity_frames(&self, frames: u64) {
        assert!(
            frames <= u64::from(self.frame_count),
            "a capacity of {frames} frames is past the arena's {}",
            self.frame_count
        );
        // Under the lists' lock, so that no allocation checks the old capacity after this
        // returns.
        let _lists = self.buddy.lock();
        self.buddy.capacity_frames.store(frames, Ordering::Relaxed);
    }

    /// Frames allocated now (a relaxed look).
    pub fn allocated_frames(&self) -> u64 {
        u64::from(self.frame_count) - self.buddy.unallocated.load(Ordering::Relaxed)
    }

    /// Frames that may still be allocated under the capacity: what reclaim and the
    /// watermarks see as free. A relaxed look.
    pub fn free_frames(&self) -> u64 {
        self.capacity_frames()
            .saturating_sub(self.allocated_frames())
    }

    /// Frames on the returned lists: memory given back and not taken again.
    pub fn returned_frames(&self) -> u64 {
        self.buddy.returned.load(Ordering::Relaxed)
    }

    /// Frames allocated from the returned lists since build: memory given back and
    /// faulted in again.
    pub fn regrown_frames(&self) -> u64 {
        self.buddy.regrown.load(Ordering::Relaxed)
    }

    /// An upper bound of the frames resident now (module invariants).
    pub fn resident_frames(&self) -> u64 {
        u64::from(self.listed_frames()).saturating_sub(self.returned_frames())
    }

    /// Free resident frames on the lists (a relaxed look).
    fn resident_free_frames(&self) -> u64 {
        self.listed_free_frames()
            .saturating_sub(self.returned_frames())
    }

    /// Gives the memory of free resident blocks back to the system until at most
    /// `keep_frames` free frames stay resident; returns the frames it advised. Blocks go
    /// largest first, so the last one may take the free resident frames below
    /// `keep_frames` by up to one 2 MiB block.
    ///
    /// Context: any thread; takes the lists' lock once per batch of blocks and makes one
    /// `madvise` per block outside it. Safe against every reader (module docs).
    pub fn give_back(&self, keep_frames: u64) -> u64 {
        let mut given = 0;
        let mut batch: Vec<(u32, u8)> = Vec::new();
        loop {
            {
                let mut lists = self.buddy.lock();
                let mut excess = self.resident_free_frames().saturating_sub(keep_frames);
                let mut taken = 0;
                'take: for k in (0..=ORDER_MAX).rev() {
                    while excess > 0 && taken < GIVE_BACK_BATCH_FRAMES {
                        let Some(head) =
                            lists.resident[k as usize].pop_front(&self.links, |_| 1 << k)
                        else {
                            continue 'take;
                        };
                        batch.push((head.0, k));
                        excess = excess.saturating_sub(1 << k);
                        taken += 1 << k;
                    }
                    if excess == 0 || taken >= GIVE_BACK_BATCH_FRAMES {
                        break;
                    }
                }
            }
            if batch.is_empty() {
                return given;
            }
            for &(head, k) in &batch {
                // SAFETY: the block lies inside the arena and is ours: off every list, not
                // allocated, so no owner reads or writes it; an optimistic reader that
                // touches it reads zeros and fails its version check (module docs).
                unsafe { self.release_frames(head, 1 << k) };
                given += 1 << k;
            }
            let mut lists = self.buddy.lock();
            for (head, k) in batch.drain(..) {
                self.merge_and_list(&mut lists, head, k, Residence::Returned);
            }
        }
    }
}

impl Arena {
    /// Frees the memory of frames `[first, first + count)`: `MADV_DONTNEED` of anonymous
    /// memory, `MADV_REMOVE` of a segment's (a shared mapping keeps its pages in the file
    /// otherwise). Either way the frames stay mapped and read as zeros.
    ///
    /// # Safety
    /// Nobody holds a reference to the frames' bytes.
    unsafe fn release_frames(&self, first: u32, count: u32) {
        match self.segment() {
            // SAFETY: the caller's guarantee.
            Some(segment) => unsafe { segment.remove_frames(first, count) },
            // SAFETY: inside the arena (frame_ptr asserts the first frame; the block is
            // inside it), unreferenced (the caller).
            None => unsafe {
                dont_need(self.frame_ptr(FrameId(first)), count as usize * PAGE_BYTES)
            },
        }
    }
}

/// Frees the pages of `[base, base + bytes)`; the range stays mapped and reads as zeros.
/// A failure (none is expected on a private anonymous mapping) leaves the memory
/// resident, which is harmless, so the result is ignored on purpose.
///
/// # Safety
/// The range lies inside the arena's mapping and nobody holds a reference to its bytes.
unsafe fn dont_need(base: *mut u8, bytes: usize) {
    // SAFETY: the caller guarantees the range is inside our mapping and unreferenced.
    unsafe { libc::madvise(base.cast::<libc::c_void>(), bytes, libc::MADV_DONTNEED) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::{ArenaPages, FolioUse};
    use crate::types::Order;

    fn free(arena: &Arena, frame: FrameId) {
        arena.meta(frame).state.finish_read_ok();
        assert!(arena.meta(frame).state.try_freeze());
        arena.free(frame);
    }

    #[test]
    fn allocation_stops_at_the_capacity_and_resumes_when_it_grows() {
        let arena = Arena::new(1024, ArenaPages::Small).unwrap();
        arena.set_capacity_frames(100);
        assert_eq!(arena.free_frames(), 100);
        let mut got = Vec::new();
        while let Some(frame) = arena.alloc(Order::ZERO, FolioUse::Request) {
            got.push(frame);
        }
        assert_eq!(got.len(), 100);
        assert_eq!(arena.free_frames(), 0);
        assert!(arena.alloc(Order::new(3), FolioUse::Request).is_none());
        arena.set_capacity_frames(108);
        assert!(arena.alloc(Order::new(3), FolioUse::Request).is_some());
        // Shrinking below what is allocated leaves no room, and frees nothing.
        arena.set_capacity_frames(50);
        assert_eq!(arena.free_frames(), 0);
        assert_eq!(arena.allocated_frames(), 108);
        for frame in got.drain(..60) {
            free(&arena, frame);
        }
        assert_eq!(arena.free_frames(), 2);
    }

    #[test]
    fn given_back_memory_leaves_the_resident_set_and_is_allocated_again() {
        // 8 chunks, populated: 16 MiB resident.
        let frames = 8 * super::super::CHUNK_FRAMES;
        let mut arena = Arena::new(frames, ArenaPages::Small).unwrap();
        arena.prefault();
        let rss_before = rss_of_range(&arena);
        assert!(rss_before >= 15 << 20, "prefaulted: {rss_before}");
        let held: Vec<_> = (0..100)
            .map(|_| arena.alloc(Order::ZERO, FolioUse::Request).unwrap())
            .collect();
        arena.set_capacity_frames(1024);
        let given = arena.give_back(0);
        assert_eq!(given, u64::from(frames) - 100);
        assert_eq!(arena.returned_frames(), given);
        assert_eq!(arena.resident_frames(), 100);
        let rss_after = rss_of_range(&arena);
        assert!(
            rss_after <= 1 << 20,
            "given back, yet {rss_after} bytes resident"
        );
        // A second give-back finds nothing resident to give.
        assert_eq!(arena.give_back(0), 0);
        // Allocation takes returned blocks (zeroed pages) once no resident one fits.
        let mut again = Vec::new();
        while let Some(frame) = arena.alloc(Order::new(4), FolioUse::Request) {
            again.push(frame);
        }
        assert_eq!(again.len() as u64, (1024 - 100) / 16);
        assert_eq!(arena.free_frames(), (1024 - 100) % 16);
        for frame in held.into_iter().chain(again) {
            free(&arena, frame);
        }
        // Every block merged back whatever its residence: whole chunks allocate again.
        arena.set_capacity_frames(u64::from(frames));
        for _ in 0..8 {
            assert!(arena.alloc(Order::MAX, FolioUse::Request).is_some());
        }
    }

    /// Resident bytes of the arena's frames, by `mincore`.
    fn rss_of_range(arena: &Arena) -> u64 {
        let bytes = arena.frame_count() as usize * PAGE_BYTES;
        let mut pages = vec![0u8; bytes / PAGE_BYTES];
        // SAFETY: the range is the arena's mapping, page aligned; `pages` has one byte per
        // page of it.
        let rc = unsafe {
            libc::mincore(
                arena.frame_ptr(FrameId(0)).cast::<libc::c_void>(),
                bytes,
                pages.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        pages.iter().filter(|&&p| p & 1 != 0).count() as u64 * PAGE_BYTES as u64
    }
}
