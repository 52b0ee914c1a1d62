//! S3-FIFO: three static FIFO queues (Yang, Zhang, Qiu, Yue, Rashmi: "FIFO queues are
//! all you need for cache eviction", SOSP 2023).
//!
//! ```text
//!   insert ──(shadow in ghost)──────────────────────────┐
//!      │                                                 v
//!      └──> small FIFO (10%) ──freq >= 2──────────> main FIFO (90%) ──┐
//!                │                                   ^   │ freq > 0: freq -= 1,│
//!                │ freq < 2: evict,                  └───┘ back to the tail    │
//!                v shadow = ghost stamp                        freq == 0: evict
//!           ghost (the index's shadow entries whose stamp is recent enough)
//! ```
//!
//! - New folios enter the small queue, unless their page's shadow entry is still in the
//!   ghost: then they go straight to main (a refault within the workingset).
//! - The small queue is evicted from while it holds at least 10% of the cache: its oldest
//!   folio moves to main if it was hit at least twice (`MOVE_TO_MAIN_FREQ`), else it is
//!   evicted and its shadow gets a ghost stamp.
//! - The main queue's oldest folio is reinserted at the tail with its frequency lowered
//!   if it was hit since, else evicted (its shadow holds no stamp).
//! - Busy folios are skipped (set aside for the rest of the call, `super` module docs):
//!   when every folio of the small queue is busy, victims come from main although small
//!   holds its target, and when every folio of main is busy, from small although it is
//!   below it. A call looks at each small folio once (it leaves small, or is set aside),
//!   and at most twice as many folios in all as are queued.
//! - The ghost has no list of its own: a stamp is the number of pages that had entered
//!   the ghost before it, and a shadow is in the ghost while fewer than `ghost_pages`
//!   pages entered after it (a FIFO of that size, counted instead of stored).
//!
//! Parameters follow libCacheSim's S3FIFO (small queue 10% of the cache, ghost the size
//! of the main queue, move to main at a frequency of 2), so that miss ratios can be
//! compared with it on the same trace (docs/eviction.md).
//!
//! Protection: the queues and the ghost counter are under one mutex; frequencies live in
//! the folios' state words (hits raise them without this mutex).

use std::sync::Mutex;

use super::{busy, isolate_ref, pages_of, put_back_busy, Admission, EvictionPolicy, Isolated};
use crate::arena::Arena;
use crate::list::{List, QueueId};
use crate::types::FrameId;

const QUEUE_SMALL: QueueId = 1;
const QUEUE_MAIN: QueueId = 2;
/// Where `isolate` sets aside the busy folios of each queue until it returns.
const QUEUE_SMALL_BUSY: QueueId = 5;
const QUEUE_MAIN_BUSY: QueueId = 6;

/// A folio leaves the small queue for main when hit at least this often.
pub const MOVE_TO_MAIN_FREQ: u64 = 2;
/// The small queue's share of the cache, in percent.
pub const SMALL_PERCENT: u64 = 10;

/// Shadow values: bit 0 says whether the value holds a ghost stamp (evicted from small).
const GHOST_TAG: u64 = 1;

#[derive(Debug)]
struct Queues {
    small: List,
    main: List,
    /// Pages that entered the ghost so far: the next stamp.
    ghost_clock: u64,
    /// The sizes, from the capacity (`EvictionPolicy::resize`).
    small_target_pages: u64,
    ghost_pages: u64,
}

#[derive(Debug)]
pub struct S3Fifo {
    queues: Mutex<Queues>,
}

impl S3Fifo {
    pub fn new(capacity_pages: u64) -> S3Fifo {
        let policy = S3Fifo {
            queues: Mutex::new(Queues {
                small: List::new(QUEUE_SMALL),
                main: List::new(QUEUE_MAIN),
                ghost_clock: 0,
                small_target_pages: 0,
                ghost_pages: 0,
            }),
        };
        policy.resize(capacity_pages);
        policy
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn in_ghost(&self, q: &Queues, shadow: u64) -> bool {
        shadow & GHOST_TAG != 0 && q.ghost_clock - (shadow >> 1) < q.ghost_pages
    }
}

impl EvictionPolicy for S3Fifo {
    fn name(&self) -> &'static str {
        "s3fifo"
    }

    fn insert(&self, arena: &Arena, frame: FrameId, pages: u64, shadow: Option<u64>) -> Admission {
        let mut q = self.lock();
        if shadow.is_some_and(|s| self.in_ghost(&q, s)) {
            q.main.push_back(&arena.links, frame, pages);
            Admission::Refault
        } else {
            q.small.push_back(&arena.links, frame, pages);
            Admission::Cold
        }
    }

    fn remove(&self, arena: &Arena, frame: FrameId, pages: u64) {
        let mut q = self.lock();
        let q = &mut *q;
        let _ =
            q.small.remove(&arena.links, frame, pages) || q.main.remove(&arena.links, frame, pages);
    }

    fn isolate(&self, arena: &Arena, want_pages: u64, out: &mut Vec<Isolated>) -> u64 {
        let mut q = self.lock();
        let q = &mut *q;
        let mut small_busy = List::new(QUEUE_SMALL_BUSY);
        let mut main_busy = List::new(QUEUE_MAIN_BUSY);
        let mut got = 0;
        let mut skipped = 0;
        // Two looks per queued folio (a main folio can come round again after its
        // frequency dropped; a busy one is set aside at its first look).
        let mut budget = 2 * (q.small.len() + q.main.len()) + 2;
        while got < want_pages && budget > 0 {
            budget -= 1;
            // The small queue's size counts its busy folios: they are still cached.
            let small_pages = q.small.pages() + small_busy.pages();
            let from_small = match (q.small.is_empty(), q.main.is_empty()) {
                (true, true) => break,
                (false, true) => true,
                (true, false) => false,
                (false, false) => small_pages >= q.small_target_pages,
            };
            let (list, busy_list) = if from_small {
                (&mut q.small, &mut small_busy)
            } else {
                (&mut q.main, &mut main_busy)
            };
            let frame = list
                .pop_front(&arena.links, |f| pages_of(arena, f))
                .expect("queue is not empty");
            let pages = pages_of(arena, frame);
            if busy(arena, frame) {
                skipped += 1;
                busy_list.push_back(&arena.links, frame, pages);
                continue;
            }
            let state = &arena.meta(frame).state;
            if from_small {
                if state.freq() >= MOVE_TO_MAIN_FREQ {
                    state.clear_freq();
                    q.main.push_back(&arena.links, frame, pages);
                    continue;
                }
            } else if state.decay_freq() > 0 {
                q.main.push_back(&arena.links, frame, pages);
                continue;
            }
            if !isolate_ref(arena, frame) {
                // Being removed right now: set aside like a busy folio, it is back on its
                // queue when its remover (waiting for this mutex) looks for it.
                busy_list.push_back(&arena.links, frame, pages);
                continue;
            }
            let shadow = if from_small {
                let stamp = q.ghost_clock;
                q.ghost_clock += pages;
                (stamp << 1) | GHOST_TAG
            } else {
                0
            };
            out.push(Isolated {
                frame,
                pages,
                shadow,
            });
            got += pages;
        }
        put_back_busy(arena, &mut small_busy, &mut q.small);
        put_back_busy(arena, &mut main_busy, &mut q.main);
        skipped
    }

    fn putback(&self, arena: &Arena, victim: Isolated) {
        let mut q = self.lock();
        // Busy after all: it goes to main's tail, a second chance like a hit's.
        q.main.push_back(&arena.links, victim.frame, victim.pages);
    }

    fn resize(&self, capacity_pages: u64) {
        let mut q = self.lock();
        q.small_target_pages = (capacity_pages * SMALL_PERCENT / 100).max(1);
        q.ghost_pages = capacity_pages.saturating_sub(q.small_target_pages);
    }

    fn shadow_cold(&self) -> u64 {
        0 // no ghost stamp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::testing::{cached, pin};

    /// 32 frames: the small queue's target is 3 pages.
    const FRAMES: u64 = 32;

    /// A cache whose main queue holds `main` folios (refaults: their shadow is in the
    /// ghost) and whose small queue holds the `small` next ones.
    fn filled(main: u64, small: u64) -> (Arena, S3Fifo, Vec<FrameId>, Vec<FrameId>) {
        let arena = Arena::new(FRAMES as u32, crate::arena::ArenaPages::Small).unwrap();
        let policy = S3Fifo::new(FRAMES);
        assert_eq!(policy.lock().small_target_pages, 3);
        let in_main = (0..main)
            .map(|page| {
                let (frame, admission) = cached(&arena, &policy, page, Some(GHOST_TAG));
                assert_eq!(admission, Admission::Refault);
                frame
            })
            .collect();
        let in_small = (main..main + small)
            .map(|page| cached(&arena, &policy, page, None).0)
            .collect();
        (arena, policy, in_main, in_small)
    }

    fn frames(victims: &[Isolated]) -> Vec<FrameId> {
        victims.iter().map(|v| v.frame).collect()
    }

    /// Seed 96 of the simulation: a small queue at its target, all pinned, used to stop
    /// isolation (it rotated them until its budget ran out) while main was evictable.
    #[test]
    fn a_small_queue_all_busy_is_passed_over_for_main() {
        let (arena, policy, main, small) = filled(29, 3);
        for &frame in &small {
            pin(&arena, frame);
        }
        let mut out = Vec::new();
        let skipped = policy.isolate(&arena, 4, &mut out);
        assert_eq!(skipped, 3, "each busy folio is looked at once");
        assert_eq!(frames(&out), main[..4]);
        assert!(
            out.iter().all(|v| v.shadow & GHOST_TAG == 0),
            "main's victims get no stamp"
        );
        let q = policy.lock();
        assert_eq!((q.small.len(), q.main.len()), (3, 25));
        assert_eq!(
            q.small.front(),
            Some(small[0]),
            "the busy folios keep their order"
        );
    }

    /// The other way round: main all pinned, small below its target.
    #[test]
    fn a_main_queue_all_busy_is_passed_over_for_small() {
        let (arena, policy, main, small) = filled(29, 2);
        for &frame in &main {
            pin(&arena, frame);
        }
        let mut out = Vec::new();
        let skipped = policy.isolate(&arena, 2, &mut out);
        assert_eq!(skipped, 29);
        assert_eq!(frames(&out), small);
        assert!(
            out.iter().all(|v| v.shadow & GHOST_TAG != 0),
            "small's victims get a stamp"
        );
        let q = policy.lock();
        assert_eq!((q.small.len(), q.main.len()), (0, 29));
        assert_eq!(q.main.front(), Some(main[0]));
    }

    /// Busy folios still count in their queue's size: a small queue above its target
    /// with a pinned head gives its next folio, not main's.
    #[test]
    fn busy_folios_still_count_toward_the_small_target() {
        let (arena, policy, _main, small) = filled(28, 4);
        pin(&arena, small[0]);
        pin(&arena, small[1]);
        let mut out = Vec::new();
        assert_eq!(policy.isolate(&arena, 1, &mut out), 2);
        assert_eq!(frames(&out), [small[2]]);
    }

    /// The whole cache pinned: nothing, after looking at each folio once, and every folio
    /// still queued where it was.
    #[test]
    fn a_cache_all_busy_gives_nothing_and_keeps_every_folio() {
        let (arena, policy, main, small) = filled(29, 3);
        for &frame in main.iter().chain(&small) {
            pin(&arena, frame);
        }
        let mut out = Vec::new();
        assert_eq!(policy.isolate(&arena, FRAMES, &mut out), FRAMES);
        assert!(out.is_empty());
        let q = policy.lock();
        assert_eq!((q.small.len(), q.main.len()), (3, 29));
        assert_eq!(
            (q.small.front(), q.main.front()),
            (Some(small[0]), Some(main[0]))
        );
    }
}
