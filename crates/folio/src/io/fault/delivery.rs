//! The fault backend's delivery thread ("folio-fault"): runs the completions the fault
//! backend holds back (delayed ones, injected errors, ranked ones) when they are due, and
//! the reorder pen that lets later completions overtake earlier ones.
//!
//! Design: `schedule` pushes a completion with its result and due time on a min-heap. The
//! thread pops the earliest due one; without a rank it runs at once, with a rank it enters
//! the pen. The pen releases its lowest rank (then the earliest scheduled) when a new
//! arrival makes it overflow `Hold::pen_max`, when its oldest member has waited
//! `Hold::wait_max`, or when the backend drains.
//!
//! ```text
//!   schedule(at, done, result, hold) ──> [ due: min-heap on (at, sequence) ]
//!                                           │ due, no rank ──────────────> done.run(result)
//!                                           │ due, ranked ──> [ pen ] ──lowest rank──┘
//! ```
//!
//! Protection: `Delivery::state` (one mutex) protects the heap, the pen and the phase;
//! `reordered` is an atomic counter. The lock is never held while a completion runs, so a
//! completion may schedule (or submit) again.
//!
//! Invariants:
//! - The pen never holds more than `pen_max` completions once the thread has released; a
//!   held completion waits at most `wait_max` after the oldest one in the pen entered it,
//!   so no completion waits forever.
//! - Nothing is scheduled once the phase is `Draining` (asserted): the backend drops its
//!   inner backend, whose completions are the last to schedule, before it drains.
//! - Draining runs everything still scheduled and releases the pen at once, lowest rank
//!   first; then the thread exits.
//!
//! Limits: the heap and the pen are unbounded, bounded in practice by the requests the
//! cache has in flight.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::io::backend::Completion;

/// A completion's place in the reorder pen: its rank and the pen's limits.
#[derive(Clone, Copy, Debug)]
pub(super) struct Hold {
    /// The order of release from the pen: lowest first.
    pub rank: u64,
    pub pen_max: usize,
    pub wait_max: Duration,
}

/// The delivery thread's queue of completions that are not due yet, and the reorder pen.
pub(super) struct Delivery {
    state: Mutex<DeliveryState>,
    /// Signalled when a completion is scheduled or the phase changes.
    changed: Condvar,
    /// Completions the pen released ahead of an earlier arrival (`FaultControl::reordered`).
    reordered: AtomicU64,
}

struct DeliveryState {
    due: BinaryHeap<Due>,
    /// Due completions with a rank, held back in arrival order. At most `Hold::pen_max`
    /// after each release.
    pen: Vec<Penned>,
    /// Breaks ties between equal due times: first scheduled, first run.
    next_sequence: u64,
    phase: Phase,
}

/// A completion in the reorder pen, and when it entered it.
struct Penned {
    due: Due,
    hold: Hold,
    since: Instant,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Running,
    /// The backend is being dropped: run what is scheduled, then exit.
    Draining,
}

/// A completion with its result, to run at `at`.
struct Due {
    at: Instant,
    sequence: u64,
    done: Completion,
    result: io::Result<usize>,
    /// Whether it goes through the reorder pen once due.
    hold: Option<Hold>,
}

// `BinaryHeap` is a max-heap: order `Due`s so that the earliest (then first scheduled) is
// the greatest.
impl Ord for Due {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.at, other.sequence).cmp(&(self.at, self.sequence))
    }
}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}

impl Eq for Due {}

impl Delivery {
    /// A delivery with nothing scheduled, and its thread.
    ///
    /// Panics if the thread cannot be started (the fault backend is for tests).
    pub fn start() -> (Arc<Delivery>, JoinHandle<()>) {
        let delivery = Arc::new(Delivery {
            state: Mutex::new(DeliveryState {
                due: BinaryHeap::new(),
                pen: Vec::new(),
                next_sequence: 0,
                phase: Phase::Running,
            }),
            changed: Condvar::new(),
            reordered: AtomicU64::new(0),
        });
        let thread_delivery = Arc::clone(&delivery);
        let thread = thread::Builder::new()
            .name("folio-fault".to_owned())
            .spawn(move || thread_delivery.run())
            .expect("starting the fault backend's delivery thread");
        (delivery, thread)
    }

    fn lock_state(&self) -> MutexGuard<'_, DeliveryState> {
        // The only panic under this lock is `schedule`'s phase assertion, which fires before
        // anything changes, so a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Completions the pen released ahead of one that entered it earlier.
    pub fn reordered(&self) -> u64 {
        self.reordered.load(Ordering::Relaxed)
    }

    /// Runs `done.run(result)` on the delivery thread at `at` (at once if `at` has passed),
    /// through the reorder pen if `hold` is set.
    ///
    /// Context: any thread; takes the state lock briefly; never blocks on a completion.
    pub fn schedule(
        &self,
        at: Instant,
        done: Completion,
        result: io::Result<usize>,
        hold: Option<Hold>,
    ) {
        let mut state = self.lock_state();
        // Everything that schedules (`submit`, the inner backend's completions) has
        // finished before `drop` sets `Draining`.
        assert_eq!(
            state.phase,
            Phase::Running,
            "completion scheduled after drop"
        );
        let sequence = state.next_sequence;
        state.next_sequence += 1;
        state.due.push(Due {
            at,
            sequence,
            done,
            result,
            hold,
        });
        drop(state);
        self.changed.notify_all();
    }

    /// Stops accepting completions: the thread runs what is scheduled, releases the pen,
    /// and exits.
    ///
    /// Context: the backend's `drop`, after its inner backend has finished every request.
    pub fn begin_draining(&self) {
        self.lock_state().phase = Phase::Draining;
        self.changed.notify_all();
    }

    /// The delivery thread's loop; also run by a `drop` that happens on the delivery
    /// thread itself, after `begin_draining`, to run what is left.
    ///
    /// Context: blocks until each completion is due; runs completions with no lock held.
    pub fn run(&self) {
        while let Some(due) = self.next_due() {
            let Due { done, result, .. } = due;
            done.run(result);
        }
    }

    /// The next completion to run, once it may: a due one without a rank, or the pen's
    /// lowest rank when the pen overflows, its oldest has waited `wait_max`, or the
    /// backend is draining. Blocks until then. `None` when the backend is draining and
    /// nothing is scheduled or held.
    fn next_due(&self) -> Option<Due> {
        let mut state = self.lock_state();
        loop {
            let now = Instant::now();
            if state.due.peek().is_some_and(|first| first.at <= now) {
                let due = state.due.pop().expect("peeked");
                let Some(hold) = due.hold else {
                    return Some(due);
                };
                state.pen.push(Penned {
                    due,
                    hold,
                    since: now,
                });
                if state.pen.len() > hold.pen_max {
                    return Some(self.release(&mut state));
                }
                continue;
            }
            let pen_deadline = state
                .pen
                .first()
                .map(|oldest| oldest.since + oldest.hold.wait_max);
            if pen_deadline.is_some_and(|at| at <= now || state.phase == Phase::Draining) {
                return Some(self.release(&mut state));
            }
            let wake_at = match (state.due.peek().map(|first| first.at), pen_deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            state = match wake_at {
                Some(at) => {
                    self.changed
                        .wait_timeout(state, at - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None if state.phase == Phase::Draining => return None,
                None => self
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }

    /// Takes the lowest-ranked completion out of the (non-empty) pen.
    fn release(&self, state: &mut DeliveryState) -> Due {
        let lowest = (0..state.pen.len())
            .min_by_key(|&i| (state.pen[i].hold.rank, state.pen[i].due.sequence))
            .expect("the pen holds a completion");
        if lowest != 0 {
            self.reordered.fetch_add(1, Ordering::Relaxed);
        }
        state.pen.remove(lowest).due
    }
}
