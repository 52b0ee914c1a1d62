//! Reclaim: frees folios when an allocation finds the arena full. A plain CLOCK for now.
//!
//! Design: a hand sweeps the arena's frames in order. A frame that is free, LOCKED (I/O
//! in flight) or pinned (count above the index's one) is skipped, never freed. A folio
//! with REFERENCED set gets a second chance (the bit is cleared). Otherwise it is a
//! victim: under its mapping's index lock, the slot is checked to still hold this frame,
//! the folio is frozen (`refcount` step A, one CAS) and replaced by a shadow entry carrying
//! the eviction clock. Victims are freed to the arena after every index lock is dropped
//! (side effects outside locks).
//!
//! Protection: the hand is under its own mutex; one sweep at a time. Lock order: hand ->
//! a mapping's index lock -> the arena's free lists (never the other way round).
//!
//! Limits: a sweep looks at most twice at every frame. If it frees nothing, it reports
//! why (everything pinned, or I/O in flight) and the allocator decides whether to wait.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::cache::Core;
use crate::index::{Entry, Leave};
use crate::refcount::{count, DEAD, LOCKED, PREFETCHED, REFERENCED};
use crate::stats;
use crate::types::{FrameId, Order};

/// What a sweep found when it freed less than asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub freed_pages: u64,
    /// Folios skipped because I/O was in flight: waiting helps.
    pub locked: u64,
    /// Folios skipped because someone pinned them.
    pub pinned: u64,
}

#[derive(Debug, Default)]
pub struct Clock {
    hand: Mutex<u32>,
    /// Evictions so far: the value stored in shadow entries.
    eviction_clock: AtomicU64,
}

impl Clock {
    /// Frees at least `want_pages` pages if it can, looking at each frame at most twice.
    ///
    /// Context: no index lock held by the caller (this takes them). May block on the hand
    /// mutex and on index locks; does no I/O.
    pub fn sweep(&self, core: &Core, want_pages: u64) -> SweepReport {
        let mut report = SweepReport::default();
        let mut victims: Vec<(FrameId, Order)> = Vec::new();
        {
            let mut hand = self.hand.lock().unwrap_or_else(|e| e.into_inner());
            let frames = core.arena.frame_count();
            let mut scanned = 0u64;
            while report.freed_pages < want_pages && scanned < 2 * u64::from(frames) {
                let frame = FrameId(*hand);
                let meta = core.arena.meta(frame);
                let state = meta.state.load();
                let (mapping_id, head, order) = meta.identity();
                let step = if state & DEAD == 0 {
                    order.pages() as u32
                } else {
                    1
                };
                *hand = (*hand + step.max(1)) % frames;
                scanned += u64::from(step.max(1));
                if state & DEAD != 0 {
                    continue;
                }
                if state & LOCKED != 0 {
                    report.locked += 1;
                    continue;
                }
                if count(state) > 1 {
                    report.pinned += 1;
                    continue;
                }
                if meta.state.test_and_clear(REFERENCED) {
                    continue;
                }
                let Some(mapping) = core.mapping(mapping_id) else {
                    continue;
                };
                let mut w = mapping.index.lock();
                let holds = matches!(w.get(head), Entry::Folio { frame: f, .. } if f == frame);
                if !holds || !meta.state.try_freeze() {
                    continue;
                }
                let shadow = self.eviction_clock.fetch_add(1, Ordering::Relaxed);
                let removed = w.remove_folio(head, frame, Leave::Shadow(shadow));
                assert!(removed, "a frozen folio was not in its slot");
                drop(w);
                victims.push((frame, order));
                report.freed_pages += order.pages();
                if state & PREFETCHED != 0 {
                    stats::add(&core.counters.readahead_wasted_pages, order.pages());
                }
            }
        }
        for &(frame, order) in &victims {
            core.arena.free(frame, order);
        }
        stats::add(&core.counters.evicted_folios, victims.len() as u64);
        stats::add(&core.counters.evicted_pages, report.freed_pages);
        report
    }
}
