//! Reclaim: keeps memory free by evicting the folios the eviction policy picks.
//!
//! Design:
//! - Watermarks: a background thread ("folio-reclaim") sleeps while at least `low_pages`
//!   frames are free; an allocation that leaves fewer wakes it, and it evicts until
//!   `high_pages` are free. An allocation that finds nothing free reclaims directly, in
//!   batches (`Reclaimer::reclaim`). Small caches (below 1,600 frames) have no watermarks:
//!   only direct reclaim, so no memory idles.
//! - Eviction of one batch: the policy isolates victims under its own lock, each with a
//!   reference (`EvictionPolicy::isolate`). Then, file by file, under one hold of its
//!   index lock, per victim: check the slot still holds it, freeze it
//!   (`try_freeze_isolated`, one CAS: only the index and the isolation hold it, no I/O
//!   in flight) and leave its shadow entry.
//!   A victim that cannot be frozen (someone pinned it meanwhile) goes back to the policy,
//!   if it is still in the index. Frames are freed after every lock is dropped (side
//!   effects outside locks).
//! - Never freed: a pinned folio (count above the index's and the isolation's), a LOCKED
//!   one (I/O in flight), a DIRTY or WRITEBACK one (its bytes are not on disk yet). `FolioState` enforces it: the
//!   freeze CAS fails.
//! - Shadow entries are bounded: each eviction that leaves one is logged; past
//!   `shadows_max` (the capacity in pages) the oldest still in place is removed. Cost per
//!   shadow: 8 B in its index slot (plus its share of the node) and 24 B in the log.
//! - A folio read ahead and evicted before anyone read it (PREFETCHED) is wasted
//!   readahead: counted, and told to the cache-wide readahead limit once per batch
//!   (`readahead::ReadaheadLimit`), which shrinks the windows of every stream while too
//!   much of what they read ahead is evicted unread.
//! - Evicting the last folio of a file that no handle has open forgets the file: after
//!   the batch, with every lock dropped, `MappingTable::remove_if_unused` removes its
//!   mapping, whose shadows go with its index. Their records stay in the log until they
//!   expire, naming an id the table no longer has (skipped), or one it gave to a file opened since
//!   (ids are reused: `MappingTable`): its look-up then finds no folio of that
//!   generation and the record only expires.
//!
//! Protection: the shadow log under its mutex; the wake flag under its mutex with a
//! condvar. Lock order: (policy's mutex, alone) ; then a mapping's index lock -> the
//! policy's mutex (putback) ; the shadow log's mutex alone, then an index lock after it
//! is dropped.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use crate::eviction::Isolated;
use crate::folio_meta::MappingId;
use crate::index::{Entry, Leave, Mark};
use crate::mapping::{MappingTable, MaybeUnused};
use crate::memory::Memory;
use crate::stats;
use crate::types::{FrameId, Order, PageIndex};

/// Pages evicted per batch of direct reclaim (at least what the allocation needs).
pub const BATCH_PAGES: u64 = 32;
/// Caches below this many frames keep no free reserve (no background reclaim).
const WATERMARK_FRAMES_MIN: u32 = 1600;

/// What a reclaim pass found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReclaimReport {
    pub freed_pages: u64,
    /// Folios skipped because they were pinned or had I/O in flight: waiting helps.
    pub busy: u64,
}

/// One evicted folio's shadow, as logged.
#[derive(Clone, Copy, Debug)]
struct ShadowRecord {
    mapping: MappingId,
    head: PageIndex,
    order: Order,
    value: u64,
}

pub struct Reclaimer {
    /// The watermarks, in free pages under the capacity (`resize`).
    low_pages: AtomicU64,
    high_pages: AtomicU64,
    shadows: Mutex<VecDeque<ShadowRecord>>,
    /// Shadows logged at most: the capacity in pages.
    shadows_max: AtomicU64,
    wake: Mutex<bool>,
    wake_cv: Condvar,
    stop: AtomicBool,
}

impl std::fmt::Debug for Reclaimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reclaimer")
            .field("low_pages", &self.low_pages())
            .field("high_pages", &self.high_pages())
            .finish()
    }
}

impl Reclaimer {
    /// A reclaimer for a capacity of `frames`.
    pub fn new(frames: u64) -> Reclaimer {
        let reclaimer = Reclaimer {
            low_pages: AtomicU64::new(0),
            high_pages: AtomicU64::new(0),
            shadows: Mutex::new(VecDeque::new()),
            shadows_max: AtomicU64::new(0),
            wake: Mutex::new(false),
            wake_cv: Condvar::new(),
            stop: AtomicBool::new(false),
        };
        reclaimer.resize(frames);
        reclaimer
    }

    /// Sizes the watermarks and the shadow log for a capacity of `frames` (at build, and
    /// when the capacity changes). The log shrinks at its next eviction.
    pub fn resize(&self, frames: u64) {
        let low_pages = if frames < u64::from(WATERMARK_FRAMES_MIN) {
            0
        } else {
            (frames / 200).clamp(8, 4096)
        };
        self.low_pages.store(low_pages, Ordering::Relaxed);
        self.high_pages.store(low_pages * 2, Ordering::Relaxed);
        self.shadows_max.store(frames, Ordering::Relaxed);
    }

    /// Free pages below which an allocation wakes the background thread.
    pub fn low_pages(&self) -> u64 {
        self.low_pages.load(Ordering::Relaxed)
    }

    /// Free pages the background thread evicts up to.
    pub fn high_pages(&self) -> u64 {
        self.high_pages.load(Ordering::Relaxed)
    }

    /// Called after an allocation: wakes the background thread below the low watermark.
    pub fn note_alloc(&self, free_pages: u64) {
        if free_pages < self.low_pages() {
            let mut wake = self.wake.lock().unwrap_or_else(|e| e.into_inner());
            if !*wake {
                *wake = true;
                self.wake_cv.notify_one();
            }
        }
    }

    /// Evicts folios worth at least `want_pages` if it can (one isolation pass).
    ///
    /// Context: no lock held (this takes the policy's and index locks). Does no I/O.
    pub fn reclaim(&self, mem: &Memory, mappings: &MappingTable, want_pages: u64) -> ReclaimReport {
        let mut isolated = Vec::new();
        let busy = mem.isolate_victims(want_pages, &mut isolated);
        let mut report = ReclaimReport {
            freed_pages: 0,
            busy,
        };
        let mut to_free: Vec<(FrameId, Order)> = Vec::with_capacity(isolated.len());
        let mut to_release: Vec<(FrameId, Order)> = Vec::new();
        let mut logged: Vec<ShadowRecord> = Vec::with_capacity(isolated.len());
        // Mappings with no handle whose last counted folio this pass evicted.
        let mut maybe_unused = Vec::new();
        // Pages read ahead that this pass evicted before anyone read them.
        let mut wasted_pages = 0;
        // By file, then page: each file's victims under one hold of its index lock (a
        // lock round trip per victim made the reader's insertions and this pass wait on
        // each other). The identity is stable: the isolation's reference keeps the frame.
        let mut victims: Vec<(Isolated, MappingId, PageIndex, Order)> = isolated
            .into_iter()
            .map(|victim| {
                let (mapping_id, head, order) = mem.arena().meta(victim.frame).identity();
                (victim, mapping_id, head, order)
            })
            .collect();
        victims.sort_unstable_by_key(|&(_, mapping_id, head, _)| (mapping_id, head));
        for file in victims.chunk_by(|a, b| a.1 == b.1) {
            let mapping_id = file[0].1;
            let Some(mapping) = mappings.get(mapping_id) else {
                to_release.extend(
                    file.iter()
                        .map(|&(victim, _, _, order)| (victim.frame, order)),
                );
                continue;
            };
            let mut w = mapping.index.lock();
            for &(victim, _, head, order) in file {
                let meta = mem.arena().meta(victim.frame);
                let holds =
                    matches!(w.get(head), Entry::Folio { frame, .. } if frame == victim.frame);
                if holds && meta.state.try_freeze_isolated() {
                    // Frozen, so clean (DIRTY and WRITEBACK refuse the freeze): no mark
                    // leaves with it that a writeback still needed.
                    debug_assert!(!w.is_marked(head, Mark::Dirty), "reclaim took a dirty slot");
                    let removed = w.remove_folio(head, victim.frame, Leave::Shadow(victim.shadow));
                    assert!(removed, "a frozen folio was not in its slot");
                    if mapping.folio_removed(&w) == MaybeUnused::Yes {
                        maybe_unused.push(mapping.clone());
                    }
                    if meta.state.load().is_prefetched() {
                        wasted_pages += victim.pages;
                    }
                    logged.push(ShadowRecord {
                        mapping: mapping_id,
                        head,
                        order,
                        value: victim.shadow,
                    });
                    to_free.push((victim.frame, order));
                    report.freed_pages += victim.pages;
                    continue;
                }
                if holds {
                    report.busy += 1;
                    mem.put_back_victim(victim);
                }
                to_release.push((victim.frame, order));
            }
        }
        for &(frame, _) in &to_free {
            mem.arena().free(frame);
        }
        for (frame, _) in to_release {
            mem.put_folio(frame);
        }
        stats::add(&mem.counters().evicted_folios, to_free.len() as u64);
        stats::add(&mem.counters().evicted_pages, report.freed_pages);
        if wasted_pages > 0 {
            stats::add(&mem.counters().readahead_wasted_pages, wasted_pages);
            // Readahead thrashes: the cache-wide maximum window may have to shrink.
            mem.readahead_limit().note_wasted(wasted_pages);
        }
        self.log_shadows(mem, mappings, logged);
        // Every lock dropped: a closed file whose last folio went is forgotten, and its
        // shadows with it (`MappingTable` docs).
        for mapping in maybe_unused {
            mappings.remove_if_unused(mem, &mapping);
        }
        report
    }

    /// Records new shadows and removes the oldest past the cap.
    fn log_shadows(&self, mem: &Memory, mappings: &MappingTable, new: Vec<ShadowRecord>) {
        if new.is_empty() {
            return;
        }
        let expired: Vec<ShadowRecord> = {
            let mut log = self.shadows.lock().unwrap_or_else(|e| e.into_inner());
            log.extend(new);
            let max = self.shadows_max.load(Ordering::Relaxed) as usize;
            let excess = log.len().saturating_sub(max);
            log.drain(..excess).collect()
        };
        let mut dropped = 0;
        for record in expired {
            if let Some(mapping) = mappings.get(record.mapping) {
                let mut w = mapping.index.lock();
                dropped += w.remove_shadows(record.head, record.order, record.value);
            }
        }
        stats::add(&mem.counters().shadows_dropped, dropped);
    }

    /// Shadow entries logged (an upper bound of those in the indexes).
    pub fn shadows_logged(&self) -> u64 {
        self.shadows.lock().unwrap_or_else(|e| e.into_inner()).len() as u64
    }

    /// Whether a cache whose capacity may reach `frames_max` wants a background thread
    /// (it may have watermarks).
    pub fn wants_background(frames_max: u64) -> bool {
        frames_max >= u64::from(WATERMARK_FRAMES_MIN)
    }

    /// The background thread's body: sleeps until an allocation goes below the low
    /// watermark, then evicts up to the high one. Returns after `stop`.
    ///
    /// Context: its own thread; takes the policy's and index locks while evicting.
    pub fn background(&self, mem: &Memory, mappings: &MappingTable) {
        loop {
            {
                let mut wake = self.wake.lock().unwrap_or_else(|e| e.into_inner());
                while !*wake && !self.stop.load(Ordering::Acquire) {
                    wake = self.wake_cv.wait(wake).unwrap_or_else(|e| e.into_inner());
                }
                *wake = false;
            }
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            // Evict up to the high watermark; give up on a pass that frees nothing (all
            // busy): the next allocation below the low mark wakes us again.
            loop {
                let (free, high) = (mem.arena().free_frames(), self.high_pages());
                if free >= high || self.stop.load(Ordering::Acquire) {
                    break;
                }
                let want = (high - free).min(4 * BATCH_PAGES);
                if self.reclaim(mem, mappings, want).freed_pages == 0 {
                    break;
                }
                stats::bump(&mem.counters().background_reclaims);
            }
        }
    }

    /// Asks the background thread to end; the caller joins it.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _wake = self.wake.lock().unwrap_or_else(|e| e.into_inner());
        self.wake_cv.notify_all();
    }
}
