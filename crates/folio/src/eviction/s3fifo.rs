//! S3-FIFO: three static FIFO queues (Yang, Zhang, Qiu, Yue, Rashmi: "FIFO queues are
//! all you need for cache eviction", SOSP 2023).
//!
//! ```text
//!   insert ──(shadow in ghost)──────────────────────────┐
//!      │                                                 v
//!      └──> small FIFO (10%) ──freq >= 2──────────> main FIFO (90%) ──┐
//!                │                                   ^   │ freq > 0: freq -= 1,│
//!                │ freq < 2: evict,                  └───┘ back to the tail    │
//!                v shadow = ghost ticket                        freq == 0: evict
//!           ghost (the index's shadow entries whose ticket is recent enough)
//! ```
//!
//! - New folios enter the small queue, unless their page's shadow entry is still in the
//!   ghost: then they go straight to main (a refault within the workingset).
//! - The small queue is evicted from while it holds at least 10% of the cache: its oldest
//!   folio moves to main if it was hit at least twice (`MOVE_TO_MAIN_FREQ`), else it is
//!   evicted and its shadow gets a ghost ticket.
//! - The main queue's oldest folio is reinserted at the tail with its frequency lowered
//!   if it was hit since, else evicted (its shadow holds no ticket).
//! - The ghost has no list of its own: a ticket is the number of pages that had entered
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

use super::{busy, isolate_ref, pages_of, Admission, EvictionPolicy, Isolated};
use crate::arena::Arena;
use crate::list::{List, QueueId};
use crate::types::FrameId;

const QUEUE_SMALL: QueueId = 1;
const QUEUE_MAIN: QueueId = 2;

/// A folio leaves the small queue for main when hit at least this often.
pub const MOVE_TO_MAIN_FREQ: u64 = 2;
/// The small queue's share of the cache, in percent.
pub const SMALL_PERCENT: u64 = 10;

/// Shadow values: bit 0 says whether the value holds a ghost ticket (evicted from small).
const GHOST_TAG: u64 = 1;

#[derive(Debug)]
struct Queues {
    small: List,
    main: List,
    /// Pages that entered the ghost so far: the next ticket.
    ghost_clock: u64,
}

#[derive(Debug)]
pub struct S3Fifo {
    queues: Mutex<Queues>,
    small_target_pages: u64,
    ghost_pages: u64,
}

impl S3Fifo {
    pub fn new(capacity_pages: u64) -> S3Fifo {
        let small_target_pages = (capacity_pages * SMALL_PERCENT / 100).max(1);
        S3Fifo {
            queues: Mutex::new(Queues {
                small: List::new(QUEUE_SMALL),
                main: List::new(QUEUE_MAIN),
                ghost_clock: 0,
            }),
            small_target_pages,
            ghost_pages: capacity_pages - small_target_pages,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn in_ghost(&self, q: &Queues, shadow: u64) -> bool {
        shadow & GHOST_TAG != 0 && q.ghost_clock - (shadow >> 1) < self.ghost_pages
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
        let mut got = 0;
        let mut skipped = 0;
        // Every queued folio is looked at most twice per call (a main folio can come
        // round again after its frequency dropped).
        let mut budget = 2 * (q.small.len() + q.main.len()) + 2;
        while got < want_pages && budget > 0 && !(q.small.is_empty() && q.main.is_empty()) {
            budget -= 1;
            let from_small = q.small.pages() >= self.small_target_pages || q.main.is_empty();
            let list = if from_small {
                &mut q.small
            } else {
                &mut q.main
            };
            let frame = list
                .pop_front(&arena.links, |f| pages_of(arena, f))
                .expect("queue is not empty");
            let pages = pages_of(arena, frame);
            if busy(arena, frame) {
                skipped += 1;
                list.push_back(&arena.links, frame, pages);
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
                // Being removed right now: its remover will find it gone from the queue.
                list.push_back(&arena.links, frame, pages);
                continue;
            }
            let shadow = if from_small {
                let ticket = q.ghost_clock;
                q.ghost_clock += pages;
                (ticket << 1) | GHOST_TAG
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
        skipped
    }

    fn putback(&self, arena: &Arena, victim: Isolated) {
        let mut q = self.lock();
        // Busy after all: it goes to main's tail, a second chance like a hit's.
        q.main.push_back(&arena.links, victim.frame, victim.pages);
    }
}
