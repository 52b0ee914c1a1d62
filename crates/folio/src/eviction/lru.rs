//! The kernel's two-list LRU with refault distance (mm/vmscan.c and mm/workingset.c's
//! ideas, in folio's words), for comparison with S3-FIFO.
//!
//! ```text
//!   insert ──> inactive ──(hit twice: activate)──> active
//!                 ^  │ hit once: second chance,      │ when active > inactive:
//!                 │  │ back to the tail              │ oldest unreferenced folio
//!                 │  v not hit: evict,               │ is deactivated
//!                 │    shadow = eviction clock       │
//!                 └──────────────────────────────────┘
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
//!
//! Protection: both lists and the clock are under one mutex.

use std::sync::Mutex;

use super::{busy, isolate_ref, pages_of, Admission, EvictionPolicy, Isolated};
use crate::arena::Arena;
use crate::list::{List, QueueId};
use crate::refcount::WORKINGSET;
use crate::types::FrameId;

const QUEUE_INACTIVE: QueueId = 3;
const QUEUE_ACTIVE: QueueId = 4;

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
        let mut got = 0;
        let mut skipped = 0;
        let mut budget = 2 * (l.inactive.len() + l.active.len()) + 2;
        while got < want_pages && budget > 0 && !(l.inactive.is_empty() && l.active.is_empty()) {
            budget -= 1;
            // Keep the active list no larger than the inactive one (the kernel's balance
            // for small memories): deactivate its oldest unreferenced folio.
            if l.active.pages() > l.inactive.pages() || l.inactive.is_empty() {
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
                l.inactive.push_back(&arena.links, frame, pages);
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
                l.inactive.push_back(&arena.links, frame, pages);
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
        skipped
    }

    fn putback(&self, arena: &Arena, victim: Isolated) {
        let mut l = self.lock();
        l.inactive
            .push_back(&arena.links, victim.frame, victim.pages);
    }
}
