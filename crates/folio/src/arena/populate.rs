//! The populator: a background thread that faults chunks in ahead of the allocator, so
//! that a miss rarely pays a first touch; and `prefault`, which populates all of them.
//!
//! Design: a fresh anonymous page is faulted in and zeroed by the kernel on first touch
//! (on this VM also faulted in by the host: 0.35-2.6 GB/s), and with transparent huge
//! pages advised a first touch may compact memory for a 2 MiB page; when that first
//! touch is an O_DIRECT read into the frame, the miss pays it. So a thread
//! (`populate_ahead`, started by the page cache for caches of at least
//! `POPULATE_AHEAD_CACHE_BYTES_MIN`) claims the next chunks, populates them (a write to
//! each page, outside every lock) and lists them (`chunk`), keeping `populate_lead`
//! populated frames listed ahead of the allocator (as many as are allocated, from 8 MiB
//! up to `lead_frames`). It sleeps while the lead is full; the allocation that takes the
//! lead below it wakes it (`wake_populator`), once per sleep. An allocation that outruns
//! it grows the arena itself, unpopulated, and waits for it only when it holds the
//! arena's last chunks (`chunk`). Memory resident before it is needed is bounded by the
//! lead.
//!
//! Protection: `lead_frames` is fixed at build. `stop` (the mutex) holds the stop flag
//! and is held by the populator from its last look at the lead until its wait begins,
//! and by a waker while it notifies `wake`; `idle` is set by the populator under `stop`
//! and taken by one allocation, with a `SeqCst` fence on each side (`wake_populator`).
//!
//! Limits: one populator per arena; it sleeps at most `POPULATE_POLL` without a
//! wake-up; it never gives memory back.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::types::{FrameId, PAGE_BYTES};

use super::{Arena, CHUNK_FRAMES};

/// Populated free memory the background thread keeps ahead of the allocator, at most: a
/// cold scan at 3 GB/s takes about 20 ms to eat it, and populating 2 MiB takes 0.1-0.3 ms,
/// so the thread stays ahead on a loaded 2-core machine. Capped at an eighth of the cache.
const POPULATE_LEAD_BYTES_MAX: usize = 64 << 20;
/// The populator's lead before the arena has grown (it then grows with what is allocated,
/// up to the lead at most): 4 chunks, 8 MiB.
const POPULATE_LEAD_FRAMES_MIN: u64 = 4 * CHUNK_FRAMES as u64;
/// Caches below this size get no background thread: growing them on demand leaves fewer
/// than 64 chunks for their reads to fault in, and small caches (tests, tools) are built
/// often.
pub const POPULATE_AHEAD_CACHE_BYTES_MIN: usize = 128 << 20;
/// The populator's longest sleep without a wake-up.
const POPULATE_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// The populator's state (module docs).
#[derive(Debug)]
pub(super) struct Populator {
    /// The most populated free frames it keeps listed (`populate_lead`).
    lead_frames: u32,
    /// Its wake-up: `true` in the mutex means stop.
    stop: Mutex<bool>,
    wake: Condvar,
    /// Set by the populator, under `stop`, when it is about to sleep; taken by the one
    /// allocation that wakes it. So a growing arena makes one wake-up (a system call)
    /// per sleep of the populator, not one per allocation below the lead.
    idle: AtomicBool,
}

impl Populator {
    pub(super) fn new(frame_count: u32) -> Populator {
        let lead_frames = (POPULATE_LEAD_BYTES_MAX / PAGE_BYTES).min(frame_count as usize / 8);
        Populator {
            lead_frames: lead_frames as u32,
            stop: Mutex::new(false),
            wake: Condvar::new(),
            idle: AtomicBool::new(false),
        }
    }

    fn lock_stop(&self) -> MutexGuard<'_, bool> {
        self.stop.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Arena {
    /// Grows the arena over the whole capacity now: every frame under it populated and
    /// listed, the capacity resident from the start, as a database's buffer pool would
    /// be. Without it the arena grows in chunks as it is allocated from, populated ahead
    /// of the allocator where the page cache runs the populator (module docs).
    ///
    /// Under `ArenaPages::Auto` it is all huge pages: what 4 KiB pages save is the cost of
    /// a first touch, which a prefault pays at build anyway, and huge pages read large
    /// folios faster and hit with fewer TLB misses.
    ///
    /// Context: right after `new`; `&mut self` proves that no frame is referenced yet.
    pub fn prefault(&mut self) {
        self.prefault_pages();
        // The capacity, not the largest one reserved (`quota`).
        while self.below_capacity() {
            let Some(chunk) = self.claim_chunk() else {
                break;
            };
            self.populate_chunk(&chunk);
            self.list_chunk(chunk);
        }
    }

    /// The background populator's body: keeps `populate_lead` populated frames listed
    /// ahead of the allocator until `stop_populating`. Run on its own thread by
    /// the page cache (`POPULATE_AHEAD_CACHE_BYTES_MIN`).
    ///
    /// Context: sleeps between chunks' worth of demand; populates outside every lock.
    pub fn populate_ahead(&self) {
        let mut stop = self.populator.lock_stop();
        loop {
            if *stop {
                return;
            }
            // Idle unless the look below finds work (`wake_populator`).
            self.populator.idle.store(true, Ordering::Relaxed);
            std::sync::atomic::fence(Ordering::SeqCst);
            if self.listed_free_frames() < self.populate_lead() && self.below_capacity() {
                self.populator.idle.store(false, Ordering::Relaxed);
                drop(stop);
                let Some(chunk) = self.claim_chunk() else {
                    if self.claimed_frames() >= self.frame_count {
                        return; // fully claimed: nothing left to do, ever
                    }
                    // The segment's file system is short of room: try again later.
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    stop = self.populator.lock_stop();
                    continue;
                };
                self.populate_chunk(&chunk);
                self.list_chunk(chunk);
                stop = self.populator.lock_stop();
                continue;
            }
            // An allocation that takes `idle` notifies under `stop`, which this
            // holds until the wait begins; the timeout bounds any other miss (and an
            // allocator that outruns us meanwhile grows the arena itself).
            stop = self
                .populator
                .wake
                .wait_timeout(stop, POPULATE_POLL)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Ends `populate_ahead` (it returns after the chunk it is populating, if any).
    pub fn stop_populating(&self) {
        *self.populator.lock_stop() = true;
        self.populator.wake.notify_all();
    }

    /// Wakes the populator if it sleeps while the listed free frames are below its lead
    /// and chunks are left to claim (a grown arena allocates below the lead for good).
    /// A notify is a system call: only the allocation that takes `Populator::idle` makes
    /// it, under the populator's mutex, so it cannot fall between the populator's last
    /// look and its wait (which releases that mutex).
    pub(super) fn wake_populator(&self) {
        // Pairs with the populator's fence between its store of `idle` and its
        // look at the free frames: either it sees this allocation's frames gone, or this
        // sees it idle.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.populator.idle.load(Ordering::Relaxed)
            && self.claimed_frames() < self.frame_count
            && self.listed_free_frames() < self.populate_lead()
            && self.below_capacity()
            && self.populator.idle.swap(false, Ordering::AcqRel)
        {
            let _stop = self.populator.lock_stop();
            self.populator.wake.notify_one();
        }
    }

    /// The populated free frames the populator keeps listed now: as many as are allocated,
    /// between `POPULATE_LEAD_FRAMES_MIN` and `Populator::lead_frames`. So the lead doubles
    /// as the arena grows: little memory is made resident ahead of a demand that has not
    /// shown yet, and under `ArenaPages::Auto` the chunks decided before any allocation
    /// (on no demand: small) are few. A racy figure, for the populator's decisions.
    fn populate_lead(&self) -> u64 {
        let allocated = self.allocated_frames();
        allocated.clamp(
            POPULATE_LEAD_FRAMES_MIN.min(u64::from(self.populator.lead_frames)),
            u64::from(self.populator.lead_frames),
        )
    }

    /// Free frames on the lists now (free frames less those of unlisted chunks): what an
    /// allocation finds without growing. A racy snapshot, for the populator's decisions
    /// and the give-back's (`quota`).
    pub(super) fn listed_free_frames(&self) -> u64 {
        let unlisted = u64::from(self.frame_count - self.listed_frames());
        let unallocated = u64::from(self.frame_count) - self.allocated_frames();
        unallocated.saturating_sub(unlisted)
    }

    /// Whether the listed frames are below the capacity, so that a chunk populated now
    /// could be allocated (`quota`): the populator grows no memory a smaller capacity
    /// forbids.
    fn below_capacity(&self) -> bool {
        u64::from(self.listed_frames()) < self.capacity_frames()
    }

    /// Faults a claimed chunk in, before it is listed, and notes what that cost
    /// (`note_first_touch`: the page kinds `ArenaPages::Auto` chooses).
    fn populate_chunk(&self, chunk: &Range<u32>) {
        let began = std::time::Instant::now();
        // SAFETY: the chunk lies inside the arena and is claimed by the caller, so nobody
        // references its memory: never allocated, never listed (`chunk`'s invariants).
        unsafe {
            populate(
                self.frame_ptr(FrameId(chunk.start)),
                (chunk.end - chunk.start) as usize * PAGE_BYTES,
            )
        };
        self.note_first_touch(
            FrameId(chunk.start),
            chunk.end - chunk.start,
            began.elapsed(),
        );
    }
}

/// Faults `[base, base + bytes)` in (the kernel zeroes each page) by writing a zero to
/// each 4 KiB page. With huge pages advised, the first write to a 2 MiB chunk faults the
/// whole huge page in and the rest find it.
///
/// Why writes and not `MADV_POPULATE_WRITE`: that call faults pages in without an
/// exception per page (1.0 against 1.5 us per 4 KiB page alone, docs/benchmarks.md
/// "Arena pages"), but it holds the process's `mmap_lock` for the range it is given,
/// while a write's fault takes only the arena mapping's own lock (Linux 6.4 and up). A
/// storage engine's malloc resizes its heaps with `mprotect` under that lock (db_bench
/// `readrandom`: 64 K calls per run), which then queued behind the populator. In two
/// sets of eight alternating rounds of that run, writes were ahead in 15 rounds of 16
/// against 64 KiB `MADV_POPULATE_WRITE` calls: in the second set 86.0 K against 81.1 K
/// reads per second (medians), with 5.6% less CPU.
///
/// # Safety
/// The range must lie inside the arena's mapping and nobody may reference its memory.
unsafe fn populate(base: *mut u8, bytes: usize) {
    for page in (0..bytes).step_by(PAGE_BYTES) {
        // SAFETY: in bounds and unreferenced (the caller's guarantee), and a zero is what
        // the fresh anonymous page already holds.
        unsafe { base.add(page).write_volatile(0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::{ArenaPages, FolioUse};
    use crate::types::Order;

    #[test]
    fn the_populator_keeps_its_lead_and_no_more() {
        // 64 chunks (128 MiB); the lead is an eighth: 16 MiB, 8 chunks, and before
        // anything is allocated 4 chunks.
        let arena = std::sync::Arc::new(Arena::new(CHUNK_FRAMES * 64, ArenaPages::Small).unwrap());
        let lead = u64::from(arena.populator.lead_frames);
        assert_eq!(lead, u64::from(CHUNK_FRAMES) * 8);
        let lead_min = POPULATE_LEAD_FRAMES_MIN;
        let thread = {
            let arena = arena.clone();
            std::thread::spawn(move || arena.populate_ahead())
        };
        let settled = |arena: &Arena, lead: u64| {
            for _ in 0..2000 {
                if arena.listed_free_frames() >= lead {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            panic!("the populator did not reach its lead");
        };
        settled(&arena, lead_min);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(
            u64::from(arena.listed_frames()),
            lead_min,
            "populated beyond its first lead"
        );
        assert_eq!(arena.chunks_unpopulated(), 0);
        // Allocate a full lead's worth: the lead grows to it, and the populator catches
        // up to one lead ahead, and no further.
        let mut held = Vec::new();
        for _ in 0..lead / 512 {
            held.push(arena.alloc(Order::MAX, FolioUse::Request).unwrap());
        }
        settled(&arena, lead);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let grown = u64::from(arena.listed_frames());
        assert!(grown >= 2 * lead && grown <= 2 * lead + u64::from(CHUNK_FRAMES));
        arena.stop_populating();
        thread.join().unwrap();
        for frame in held {
            arena.meta(frame).state.finish_read_ok();
            assert!(arena.meta(frame).state.try_freeze());
            arena.free(frame);
        }
    }
}
