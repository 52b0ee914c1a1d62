//! The arena's growth: its frames reach the free lists one 2 MiB chunk at a time, in
//! address order; a chunk's life and its bookkeeping.
//!
//! Design: a chunk is one huge page's worth of frames (`CHUNK_FRAMES`), aligned to the
//! largest order, so that no buddy block spans two chunks; the arena's last chunk may be
//! shorter. A chunk's life:
//!
//! ```text
//! virgin ──claim_chunk (a CAS on claimed_frames; its pages advised, `pages`)──> claimed
//!   ──populate_chunk (the populator, outside every lock; an allocation skips it)──>
//!   ──list_chunk (metadata reset, carved into the free lists, `buddy`)──> listed
//! ```
//!
//! The populator (`populate`) claims, populates and lists chunks ahead of the allocator.
//! An allocation that finds the lists empty claims the next chunk itself and lists it at
//! once, unpopulated (`grow_unpopulated`, counted in `chunks_unpopulated`): its read then
//! faults the pages in. Once every chunk is claimed, an allocation that finds nothing
//! parks until another thread lists a chunk it claimed (`wait_for_listing`).
//!
//! Invariants:
//! - Frames at or above `claimed_frames` are virgin: on no list, never allocated, their
//!   side-table entry and link word unwritten (zeroed memory, not yet faulted in) and
//!   read by nobody. A claimed chunk is owned by its claimer until it lists it; then its
//!   frames are the allocator's. `listed_frames` counts the frames of listed chunks.
//! - A chunk's pages are advised, and its bit in `pages` set, before it is listed.
//!
//! Protection: `claimed_frames` moves by a CAS (a claim); `listed_frames` under the free
//! lists' lock (`buddy`), so that an allocator that saw the lists without a chunk sees the
//! count move; `unpopulated` is a relaxed counter; `listed_lock` and `listed_wake` are
//! where allocators wait for the last chunks.
//!
//! Limits: chunks are claimed and listed in address order, and no chunk is unlisted: a
//! capacity that falls gives free blocks back at any order (`quota`), not chunks.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use crate::types::FrameId;

use super::buddy::Residence;
use super::{Arena, CHUNK_FRAMES};

/// The arena's chunk bookkeeping (module docs).
#[derive(Debug, Default)]
pub(super) struct Chunks {
    /// Frames below it belong to claimed chunks; the rest is virgin (module docs).
    claimed_frames: AtomicU32,
    /// Frames of the chunks on the free lists (listed), populated or not.
    listed_frames: AtomicU32,
    /// Chunks listed unpopulated, because an allocation outran the populator (or none
    /// runs).
    unpopulated: AtomicU64,
    /// Allocators that found every chunk claimed but not all listed wait here for
    /// `list_chunk` (with `listed_lock`), never spinning.
    listed_lock: Mutex<()>,
    listed_wake: Condvar,
    /// A segment arena claims under it, so that a chunk its file system has no room for
    /// can be unclaimed (`claim_chunk`).
    claim_lock: Mutex<()>,
    /// The last claim found no room in the segment's file system: allocations fail at
    /// once (the caller reclaims) instead of waiting for a chunk.
    no_room: AtomicBool,
}

impl Arena {
    /// Claims the next virgin chunk: its frames are the caller's to initialise and list,
    /// its memory advised for the pages it gets (`ArenaPages::Auto`) before anything
    /// touches it. `None` when the arena is fully claimed.
    /// In a segment arena, `None` also when the segment's file system has no room for the
    /// chunk (`no_room`): the chunk stays virgin, for a later claim.
    pub(super) fn claim_chunk(&self) -> Option<Range<u32>> {
        if self.segment().is_none() {
            let chunk = self.claim_chunk_range()?;
            self.advise_chunk(&chunk);
            return Some(chunk);
        }
        let _claims = self
            .chunks
            .claim_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let chunk = self.claim_chunk_range()?;
        if !self.reserve_chunk(chunk.clone()) {
            // Every claim takes the lock, so the chunk is still the last claimed.
            self.chunks
                .claimed_frames
                .store(chunk.start, Ordering::Release);
            self.chunks.no_room.store(true, Ordering::Relaxed);
            return None;
        }
        self.chunks.no_room.store(false, Ordering::Relaxed);
        self.advise_chunk(&chunk);
        Some(chunk)
    }

    /// Whether the last claim found the segment's file system short of room.
    pub fn no_room(&self) -> bool {
        self.chunks.no_room.load(Ordering::Relaxed)
    }

    fn claim_chunk_range(&self) -> Option<Range<u32>> {
        let mut start = self.chunks.claimed_frames.load(Ordering::Relaxed);
        loop {
            if start >= self.frame_count {
                return None;
            }
            let end = (start + CHUNK_FRAMES).min(self.frame_count);
            match self.chunks.claimed_frames.compare_exchange_weak(
                start,
                end,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(start..end),
                Err(now) => start = now,
            }
        }
    }

    /// Initialises a claimed chunk's metadata and hands its frames to the free lists.
    pub(super) fn list_chunk(&self, chunk: Range<u32>) {
        for frame in chunk.clone() {
            self.meta(FrameId(frame)).reset();
            self.links.reset(frame);
        }
        self.list_free_blocks(chunk.clone(), || {
            // Under the lists' lock: an allocator that saw the lists without this chunk
            // sees the count move, and looks again.
            self.chunks
                .listed_frames
                .fetch_add(chunk.end - chunk.start, Ordering::Release);
        });
        if self.chunks.claimed_frames.load(Ordering::Acquire) == self.frame_count {
            // Every chunk is claimed: an allocator may be waiting for this one
            // (`wait_for_listing`).
            let _guard = self
                .chunks
                .listed_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.chunks.listed_wake.notify_all();
        }
    }

    /// The arena of a restart that adopts folios from its segment (`adopt`): every chunk up
    /// to the last that holds one of `used` (head frame and order, sorted by frame, none
    /// overlapping) is claimed and listed at once, its other frames carved into the free
    /// lists (resident where the segment holds their memory, returned where it is a
    /// hole); the used heads' side-table entries are left for the caller, their tail
    /// frames reset. Returns the frames used.
    ///
    /// Context: the build, before the arena is shared or its populator runs.
    pub fn list_adopted(&self, used: &[(FrameId, crate::types::Order)]) -> u64 {
        let Some(high) = used
            .iter()
            .map(|(frame, order)| frame.0 + order.pages() as u32)
            .max()
        else {
            return 0;
        };
        let high = high.next_multiple_of(CHUNK_FRAMES).min(self.frame_count);
        self.chunks.claimed_frames.store(high, Ordering::Release);
        let mut chunk_start = 0;
        while chunk_start < high {
            self.advise_chunk(&(chunk_start..(chunk_start + CHUNK_FRAMES).min(high)));
            chunk_start += CHUNK_FRAMES;
        }
        let mut free = Vec::new();
        let mut at = 0u32;
        let mut used_frames = 0u64;
        for &(head, order) in used {
            assert!(head.0 >= at, "adopted folios overlap or are unsorted");
            free.push(at..head.0);
            let end = head.0 + order.pages() as u32;
            for tail in head.0 + 1..end {
                self.meta(FrameId(tail)).reset();
            }
            for frame in head.0..end {
                self.links.reset(frame);
            }
            used_frames += order.pages();
            at = end;
        }
        free.push(at..high);
        let resident = self
            .segment()
            .map(|segment| segment.resident_frames(0..high));
        for range in free.into_iter().filter(|r| !r.is_empty()) {
            for frame in range.clone() {
                self.meta(FrameId(frame)).reset();
                self.links.reset(frame);
            }
            for (part, residence) in split_by_residence(range, resident.as_deref()) {
                self.list_free_blocks_as(part, residence);
            }
        }
        self.chunks.listed_frames.store(high, Ordering::Release);
        self.buddy
            .unallocated
            .fetch_sub(used_frames, Ordering::Relaxed);
        used_frames
    }

    /// Grows the arena by the next virgin chunk, listed at once and unpopulated: for an
    /// allocation that found the lists empty (its read then faults the pages in). False
    /// when every chunk is claimed.
    pub(super) fn grow_unpopulated(&self) -> bool {
        let Some(chunk) = self.claim_chunk() else {
            return false;
        };
        self.chunks.unpopulated.fetch_add(1, Ordering::Relaxed);
        self.list_chunk(chunk);
        true
    }

    /// Parks until a chunk is listed after the caller saw `listed_before` frames listed,
    /// for 1 ms at most (a wake-up sent before the wait begins is late by that much).
    ///
    /// Context: every chunk is claimed, not all are listed; takes `listed_lock`.
    pub(super) fn wait_for_listing(&self, listed_before: u32) {
        let guard = self
            .chunks
            .listed_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if self.listed_frames() != listed_before {
            return;
        }
        let _ = self
            .chunks
            .listed_wake
            .wait_timeout(guard, std::time::Duration::from_millis(1));
    }

    /// Frames of the claimed chunks (a relaxed look).
    pub(super) fn claimed_frames(&self) -> u32 {
        self.chunks.claimed_frames.load(Ordering::Relaxed)
    }

    /// Frames of the chunks listed so far (the rest is virgin or being populated).
    pub fn listed_frames(&self) -> u32 {
        self.chunks.listed_frames.load(Ordering::Acquire)
    }

    /// Chunks an allocation listed unpopulated because the populator was behind (or the
    /// cache runs none): each is up to 2 MiB of reads that faulted their pages in.
    pub fn chunks_unpopulated(&self) -> u64 {
        self.chunks.unpopulated.load(Ordering::Relaxed)
    }
}

/// `range` cut where the memory of its frames is allocated (`resident`, sorted ranges;
/// `None`: all of it) and where it is not.
fn split_by_residence(
    range: Range<u32>,
    resident: Option<&[Range<u32>]>,
) -> Vec<(Range<u32>, Residence)> {
    let Some(resident) = resident else {
        return vec![(range, Residence::Resident)];
    };
    let mut parts = Vec::new();
    let mut at = range.start;
    for r in resident {
        let (start, end) = (r.start.max(at), r.end.min(range.end));
        if start >= end {
            continue;
        }
        if at < start {
            parts.push((at..start, Residence::Returned));
        }
        parts.push((start..end, Residence::Resident));
        at = end;
    }
    if at < range.end {
        parts.push((at..range.end, Residence::Returned));
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::{ArenaPages, FolioUse};
    use crate::types::Order;

    #[test]
    fn odd_sizes_are_carved_and_exhausted() {
        let mut arena = Arena::new(13, ArenaPages::Small).unwrap();
        arena.prefault();
        let mut got = 0;
        while arena.alloc(Order::ZERO, FolioUse::Request).is_some() {
            got += 1;
        }
        assert_eq!(got, 13);
        assert_eq!(arena.free_frames(), 0);
    }

    #[test]
    fn the_arena_grows_in_chunks_as_it_is_allocated_from() {
        // 2.5 chunks: two whole order-9 chunks and a tail of 256 frames.
        let frames = CHUNK_FRAMES * 2 + CHUNK_FRAMES / 2;
        let arena = Arena::new(frames, ArenaPages::Small).unwrap();
        assert_eq!(arena.listed_frames(), 0, "nothing is listed at build");
        assert_eq!(
            arena.free_frames(),
            u64::from(frames),
            "virgin frames count as free"
        );
        let mut got = Vec::new();
        while let Some(frame) = arena.alloc(Order::new(4), FolioUse::Request) {
            assert!(
                frame.0 + 16 <= arena.listed_frames(),
                "a frame past the grown part was handed out: {frame:?}"
            );
            // Growth is one chunk at a time, never ahead of need without the populator.
            assert!(arena.listed_frames() <= (frame.0 / CHUNK_FRAMES + 1) * CHUNK_FRAMES);
            got.push(frame);
        }
        assert_eq!(got.len() as u32, frames / 16);
        assert_eq!(arena.listed_frames(), frames);
        assert_eq!(
            arena.chunks_unpopulated(),
            3,
            "no populator: every chunk by an allocation"
        );
        assert_eq!(arena.free_frames(), 0);
        for frame in got {
            arena.meta(frame).state.finish_read_ok();
            assert!(arena.meta(frame).state.try_freeze());
            arena.free(frame);
        }
        assert_eq!(arena.free_frames(), u64::from(frames));
        assert!(
            arena.alloc(Order::MAX, FolioUse::Request).is_some()
                && arena.alloc(Order::MAX, FolioUse::Request).is_some()
        );
    }
}
