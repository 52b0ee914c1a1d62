//! The kernel's two-list LRU with refault distance (mm/vmscan.c and mm/workingset.c's
//! ideas, in folio's words), for comparison with S3-FIFO.
//!
//! ```text
//!   insert ──> inactive ──(hit twice: activate)──> active
//!                 ^  │ hit once: second chance,      │ when active > inactive: the
//!                 │  │ back to the tail              │ oldest unreferenced folio;
//!                 │  v not hit: evict,               │ when inactive has nothing
//!                 │    shadow = eviction clock       │ left to scan: the oldest
//!                 └────────────(deactivate)──────────┘
//! ```
//!
//! - The eviction clock (`nonresident_age`) advances by a folio's pages at each eviction
//!   and each activation. A shadow entry records the clock when its page was evicted.
//! - Refault distance: when an evicted page comes back, `clock now - shadow` is how many
//!   pages were evicted or activated since. If that is at most the active list's size,
//!   the page would have stayed cached had the inactive list been that much larger: it
//!   is part of the workingset, and enters the active list directly (WORKINGSET).
//! - A hit sets the folio's frequency (the kernel's PG_referenced then PG_active as one
//!   2-bit counter): 1 = referenced, 2 or more = to be activated at the next scan.
//! - Deactivation keeps the active list no larger than the inactive one (the kernel's
//!   `inactive_is_low` with the ratio of small memories, 1), counting busy inactive folios
//!   too. It also refills an inactive list that cannot supply victims: busy folios are
//!   set aside for the rest of the call (`super` module docs), and once every inactive
//!   folio was, the active list's oldest folio is deactivated even if it was referenced
//!   (as the kernel's `shrink_active_list` deactivates referenced file folios), then
//!   scanned. Seed 2062 of the simulation: an inactive list all pinned stopped reclaim.
//!
//! Protection: both lists and the clock are under one mutex.

use std::sync::Mutex;

use super::{busy, isolate_ref, pages_of, put_back_busy, Admission, EvictionPolicy, Isolated};
use crate::arena::Arena;
use crate::list::{List, QueueId};
use crate::refcount::WORKINGSET;
use crate::types::FrameId;

const QUEUE_INACTIVE: QueueId = 3;
const QUEUE_ACTIVE: QueueId = 4;
/// Where `isolate` sets aside the busy inactive folios until it returns.
const QUEUE_INACTIVE_BUSY: QueueId = 7;

#[derive(Debug)]
struct Lists {
    inactive: List,
    active: List,
    nonresident_age: u64,
}

#[derive(Debug)]
pub struct TwoListLru {
    lists: Mutex<Lists>,
}

impl Default for TwoListLru {
    fn default() -> Self {
        Self::new()
    }
}

impl TwoListLru {
    pub fn new() -> TwoListLru {
        TwoListLru {
            lists: Mutex::new(Lists {
                inactive: List::new(QUEUE_INACTIVE),
                active: List::new(QUEUE_ACTIVE),
                nonresident_age: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lists> {
        self.lists.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl EvictionPolicy for TwoListLru {
    fn name(&self) -> &'static str {
        "lru"
    }

    fn insert(&self, arena: &Arena, frame: FrameId, pages: u64, shadow: Option<u64>) -> Admission {
        let mut l = self.lock();
        let refault = shadow.is_some_and(|s| l.nonresident_age.wrapping_sub(s) <= l.active.pages());
        if refault {
            arena.meta(frame).state.set_flags(WORKINGSET);
            l.active.push_back(&arena.links, frame, pages);
            l.nonresident_age += pages;
            Admission::Refault
        } else {
            l.inactive.push_back(&arena.links, frame, pages);
            Admission::Cold
        }
    }

    fn remove(&self, arena: &Arena, frame: FrameId, pages: u64) {
        let mut l = self.lock();
        let l = &mut *l;
        let _ = l.inactive.remove(&arena.links, frame, pages)
            || l.active.remove(&arena.links, frame, pages);
    }

    fn isolate(&self, arena: &Arena, want_pages: u64, out: &mut Vec<Isolated>) -> u64 {
        let mut l = self.lock();
        let l = &mut *l;
        let mut inactive_busy = List::new(QUEUE_INACTIVE_BUSY);
        let mut got = 0;
        let mut skipped = 0;
        let mut budget = 2 * (l.inactive.len() + l.active.len()) + 2;
        while got < want_pages && budget > 0 && !(l.inactive.is_empty() && l.active.is_empty()) {
            budget -= 1;
            // Keep the active list no larger than the inactive one (the kernel's balance
            // for small memories), and refill an inactive list whose folios were all busy:
            // deactivate the active list's oldest (unreferenced, unless inactive is empty).
            let inactive_pages = l.inactive.pages() + inactive_busy.pages();
            if l.active.pages() > inactive_pages || l.inactive.is_empty() {
                let frame = l
                    .active
                    .pop_front(&arena.links, |f| pages_of(arena, f))
                    .expect("active is not empty");
                let pages = pages_of(arena, frame);
                let state = &arena.meta(frame).state;
                if state.freq() > 0 && !l.inactive.is_empty() {
                    state.clear_freq();
                    l.active.push_back(&arena.links, frame, pages);
                } else {
                    state.clear_freq();
                    l.inactive.push_back(&arena.links, frame, pages);
                }
                continue;
            }
            let frame = l
                .inactive
                .pop_front(&arena.links, |f| pages_of(arena, f))
                .expect("inactive is not empty");
            let pages = pages_of(arena, frame);
            if busy(arena, frame) {
                skipped += 1;
                inactive_busy.push_back(&arena.links, frame, pages);
                continue;
            }
            let state = &arena.meta(frame).state;
            match state.freq() {
                0 => {}
                1 => {
                    state.clear_freq();
                    l.inactive.push_back(&arena.links, frame, pages);
                    continue;
                }
                _ => {
                    state.clear_freq();
                    l.active.push_back(&arena.links, frame, pages);
                    l.nonresident_age += pages;
                    continue;
                }
            }
            if !isolate_ref(arena, frame) {
                // Being removed right now: set aside like a busy folio, it is back on its
                // list when its remover (waiting for this mutex) looks for it.
                inactive_busy.push_back(&arena.links, frame, pages);
                continue;
            }
            let shadow = l.nonresident_age;
            l.nonresident_age += pages;
            out.push(Isolated {
                frame,
                pages,
                shadow,
            });
            got += pages;
        }
        put_back_busy(arena, &mut inactive_busy, &mut l.inactive);
        skipped
    }

    fn putback(&self, arena: &Arena, victim: Isolated) {
        let mut l = self.lock();
        l.inactive
            .push_back(&arena.links, victim.frame, victim.pages);
    }

    fn shadow_cold(&self) -> u64 {
        // A clock value far ahead (shadows hold 62 bits): until the clock gets there,
        // which takes 2^61 evicted pages, its refault distance wraps around to more than
        // any active list.
        (self.lock().nonresident_age + (1 << 61)) & ((1 << 62) - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::testing::{cached, pin};

    /// A cache of 16 frames whose active list holds `active` folios (refaults within the
    /// refault distance) and whose inactive list holds the `inactive` next ones.
    fn filled(active: u64, inactive: u64) -> (Arena, TwoListLru, Vec<FrameId>, Vec<FrameId>) {
        let arena = Arena::new(16, crate::arena::ArenaPages::Small).unwrap();
        let policy = TwoListLru::new();
        let on_active = (0..active)
            .map(|page| {
                let (frame, admission) = cached(&arena, &policy, page, Some(0));
                assert_eq!(admission, Admission::Refault);
                frame
            })
            .collect();
        let on_inactive = (active..active + inactive)
            .map(|page| cached(&arena, &policy, page, None).0)
            .collect();
        (arena, policy, on_active, on_inactive)
    }

    fn frames(victims: &[Isolated]) -> Vec<FrameId> {
        victims.iter().map(|v| v.frame).collect()
    }

    /// Seed 2062 of the simulation: an inactive list all pinned, no smaller than the
    /// active one, used to stop isolation (no deactivation) while active was evictable.
    #[test]
    fn an_inactive_list_all_busy_is_refilled_from_active() {
        let (arena, policy, active, inactive) = filled(8, 8);
        for &frame in &inactive {
            pin(&arena, frame);
        }
        let mut out = Vec::new();
        let skipped = policy.isolate(&arena, 4, &mut out);
        assert_eq!(skipped, 8, "each busy folio is looked at once");
        assert_eq!(frames(&out), active[..4]);
        let l = policy.lock();
        assert_eq!((l.inactive.len(), l.active.len()), (8, 4));
        assert_eq!(
            l.inactive.front(),
            Some(inactive[0]),
            "the busy folios keep their order"
        );
    }

    /// Busy inactive folios still count in the balance: with the lists even, a pinned
    /// head of inactive does not deactivate anything while inactive has other victims.
    #[test]
    fn busy_folios_still_count_in_the_balance() {
        let (arena, policy, _active, inactive) = filled(8, 8);
        pin(&arena, inactive[0]);
        pin(&arena, inactive[1]);
        let mut out = Vec::new();
        assert_eq!(policy.isolate(&arena, 1, &mut out), 2);
        assert_eq!(frames(&out), [inactive[2]]);
        let l = policy.lock();
        assert_eq!((l.inactive.len(), l.active.len()), (7, 8));
    }

    /// The whole cache pinned: nothing, each folio looked at once on the inactive list
    /// (the active ones after their deactivation), every folio still listed.
    #[test]
    fn a_cache_all_busy_gives_nothing_and_keeps_every_folio() {
        let (arena, policy, active, inactive) = filled(8, 8);
        for &frame in active.iter().chain(&inactive) {
            pin(&arena, frame);
        }
        let mut out = Vec::new();
        assert_eq!(policy.isolate(&arena, 32, &mut out), 16);
        assert!(out.is_empty());
        let l = policy.lock();
        assert_eq!(l.inactive.len() + l.active.len(), 16);
        assert_eq!(l.inactive.front(), Some(inactive[0]));
    }
}
