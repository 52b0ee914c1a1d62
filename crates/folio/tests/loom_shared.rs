//! Loom models of the protocol by which processes sharing a cache change a shared
//! structure while any of them may die (issue 45, docs/sharing.md), compiled from the very
//! source files the library uses (`src/shared/{terms,slot,lock,stack,record,buddy,magazine}.rs`) against loom's
//! atomics: this file supplies the `primitive` module they name their atomics through.
//!
//! Loom cannot kill a thread, so a death is a step: the dying process's thread stops at
//! its `d`-th step (`Run::at` returns `Died` there and the operation returns at once,
//! leaving whatever it held) and the liveness oracle flips: the same thread then plays the
//! steward, which has seen the death (its pidfd), marks the slot dead, sweeps the stack
//! (taking the lock over if the dead process held it, returning its leases), frees the
//! slot, and plays the next process attached in that slot, which leases and returns a
//! frame. Meanwhile another process (the main thread) leases and returns a frame: it may
//! wait for the dying holder, find it dead and take its lock over itself, racing the
//! steward. Every `d` of the dying process's 15 steps is a model of its own, and so is
//! no death.
//!
//! What `shared_stack_death_at_every_step` proves, over the interleavings loom explores:
//! no assertion of the library fails (a free lock with an intent, a listed frame leased, a
//! push of a frame the pusher does not lease, an unlock of a lock someone else holds), and
//! at the end every frame is listed exactly once, the lock free, no intent left.
//!
//! Broken, and caught (each must fail):
//! - `shared_stack_broken_intent_after_mutation`: the intent record published after the
//!   change's stores: a death between them leaves a half-made change that nobody redoes.
//! - `shared_stack_broken_no_generation`: a slot's attach keeps its generation, so the
//!   lock word of the dead process and of the next process in its slot are the same: a
//!   waiter that found the dead holder, then lost the processor while the steward took
//!   the lock over, swept and freed the slot and the next process locked it, takes the
//!   live holder's lock (the ABA that the generation prevents).
//!
//! The admission of an attach by the steward and a new steward's census of the slots
//! (`record.rs`) are modelled below (`admission_death_at_every_step`, and its broken
//! variant `admission_broken_answer_before_record`), with the old steward's death at each
//! step of the admission.
//!
//! The shared buddy allocator (`buddy.rs`, `magazine.rs`) is modelled at the end
//! (`buddy_death_at_every_step`, and its broken variants `buddy_broken_intent_after_mutation`
//! and `buddy_broken_in_flight_forgotten`).
//!
//! The shared index (`index.rs`) is modelled last (`index_insert_races_a_lookup`, and its
//! broken variants `index_broken_intent_after_mutation` and `index_broken_tidy_forgotten`).
//!
//! Bounds: 2 frames, 3 slots, up to `PREEMPTIONS` preemptions (`BUDDY_PREEMPTIONS` for
//! the allocator's longer operations; the whole file runs in a few seconds on this
//! machine: see docs/sharing.md). Run with
//! `cargo test --release -p folio --test loom_shared` (part of the workspace's tests).

mod primitive {
    pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
}

// The library's `shared/` rooms at this crate's root: their `super::` is this root, which
// names what `shared/mod.rs` re-exports.
#[allow(dead_code)]
#[path = "../src/shared/buddy.rs"]
mod buddy;
#[allow(dead_code)]
#[path = "../src/shared/index.rs"]
mod index;
#[allow(dead_code)]
#[path = "../src/shared/lock.rs"]
mod lock;
#[allow(dead_code)]
#[path = "../src/shared/magazine.rs"]
mod magazine;
#[allow(dead_code)]
#[path = "../src/shared/record.rs"]
mod record;
#[allow(dead_code)]
#[path = "../src/shared/slot.rs"]
mod slot;
#[allow(dead_code)]
#[path = "../src/shared/stack.rs"]
mod stack;
#[allow(dead_code)]
#[path = "../src/shared/terms.rs"]
mod terms;

use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use slot::SlotTable;
use stack::{Census, FrameStack};
use std::cell::Cell;
#[allow(unused_imports)]
use terms::{Died, Flaw, Holder, ProcessId, Run, SlotIndex, Step, Word};

const SLOTS: u16 = 3;
const FRAMES: u32 = 2;
const STACK: Word = Word(8);
const WORDS: usize = 8 + 8 + 2 * FRAMES as usize;
/// The steps of one lease and its return: a pop's 7, a push's 8.
const STEPS: u32 = 15;
/// Loom's preemption bound: the models explore every interleaving with at most this
/// many preemptions (`LOOM_MAX_PREEMPTIONS` overrides it). The ABA of
/// `shared_stack_broken_no_generation` needs 4: the waiter preempted before its read of
/// the lock, after its look at the slot, and the steward preempted twice.
const PREEMPTIONS: usize = 4;

/// A process in the model: dies at its `die_at`-th step, if any; waits by yielding.
struct ModelRun {
    die_at: Option<u32>,
    count: Cell<u32>,
    flaw: Flaw,
}

impl ModelRun {
    fn dying_at(step: u32, flaw: Flaw) -> ModelRun {
        ModelRun {
            die_at: Some(step),
            count: Cell::new(0),
            flaw,
        }
    }

    fn living(flaw: Flaw) -> ModelRun {
        ModelRun {
            die_at: None,
            count: Cell::new(0),
            flaw,
        }
    }
}

/// How many take-overs the models made (std's atomic: outside loom's model, a tally of
/// every execution it explored), so that a model can show that it covered one.
static TAKE_OVERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Run for ModelRun {
    fn at(&self, step: Step) -> Result<(), Died> {
        if step == Step::TookOver {
            TAKE_OVERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let n = self.count.get();
        self.count.set(n + 1);
        if Some(n) == self.die_at {
            return Err(Died);
        }
        Ok(())
    }

    fn wait(&self, _holder: Holder) {
        loom::thread::yield_now();
    }

    fn flaw(&self) -> Flaw {
        self.flaw
    }
}

fn views(region: &[AtomicU64]) -> (SlotTable<'_>, FrameStack<'_>) {
    (
        SlotTable::new(region, Word(0), SLOTS),
        FrameStack::new(region, STACK, FRAMES),
    )
}

/// One lease of a frame, and its return.
fn lease(
    stack: &FrameStack<'_>,
    me: Holder,
    slots: &SlotTable<'_>,
    run: &ModelRun,
) -> Result<(), Died> {
    let frame = stack.pop(me, slots, run)?.expect("a frame is listed");
    stack.push(me, frame, slots, run)
}

fn model(die_at: u32, flaw: Flaw) {
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        builder.preemption_bound = Some(PREEMPTIONS);
    }
    builder.check(move || {
        let region: Arc<Vec<AtomicU64>> = Arc::new((0..WORDS).map(|_| AtomicU64::new(0)).collect());
        let (steward, dying, other) = {
            let (slots, stack) = views(&region);
            stack.format();
            let steward = slots.attach(flaw).unwrap();
            (
                steward,
                slots.attach(flaw).unwrap(),
                slots.attach(flaw).unwrap(),
            )
        };
        let a = {
            let region = region.clone();
            loom::thread::spawn(move || {
                let (slots, stack) = views(&region);
                match lease(&stack, dying, &slots, &ModelRun::dying_at(die_at, flaw)) {
                    Ok(()) => slots.detach(dying),
                    Err(Died) => {
                        // The death, as the steward sees it (the kernel told it).
                        assert!(slots.mark_dead(dying));
                        stack
                            .sweep(dying, steward, &slots, &ModelRun::living(flaw))
                            .unwrap();
                        slots.free_dead(dying);
                        // The next process attached in the dead one's slot.
                        let next = slots.attach(flaw).unwrap();
                        assert_eq!(next.slot, dying.slot);
                        lease(&stack, next, &slots, &ModelRun::living(flaw)).unwrap();
                        slots.detach(next);
                    }
                }
            })
        };
        let (slots, stack) = views(&region);
        lease(&stack, other, &slots, &ModelRun::living(flaw)).unwrap();
        slots.detach(other);
        a.join().unwrap();
        assert_eq!(
            stack.check(),
            Ok(Census {
                listed: FRAMES,
                leased: Vec::new()
            }),
            "every frame listed once at the end"
        );
    });
}

#[test]
fn shared_stack_death_at_every_step() {
    for die_at in 0..=STEPS {
        model(die_at, Flaw::None);
    }
}

/// Runs the flawed protocol with a death at each step in turn until a model fails, and
/// returns the failure's message.
fn first_failure(flaw: Flaw) -> String {
    for die_at in 0..=STEPS {
        if let Err(payload) = std::panic::catch_unwind(|| model(die_at, flaw)) {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            eprintln!("{flaw:?}: caught with a death at step {die_at}: {message}");
            return message;
        }
    }
    panic!("{flaw:?}: no model failed");
}

/// The failures of the library's own assertions or of the final check, not of loom.
const INVARIANT_BROKEN: &[&str] = &[
    "detach of a slot not live",
    "every frame listed once",
    "is leased",
    "does not lease",
    "someone else holds",
    "a free lock with a published intent",
    "a frame is listed",
    "listed twice",
    "a push onto a full stack",
];

fn assert_invariant_broken(message: &str) {
    assert!(
        INVARIANT_BROKEN.iter().any(|m| message.contains(m)),
        "failed, but not on an invariant: {message}"
    );
}

#[test]
fn shared_stack_broken_intent_after_mutation() {
    assert_invariant_broken(&first_failure(Flaw::IntentAfterMutation));
}

#[test]
fn shared_stack_broken_no_generation() {
    assert_invariant_broken(&first_failure(Flaw::NoGeneration));
}

// The steward's admission of an attach and a new steward's census (`record.rs`).
//
// The old steward admits process P (R1 the slot, R2 the record, R3 the answer) and dies at
// its `d`-th step (each of its 4, and no death); at its death the kernel closes P's
// connection (an answer not sent by then never comes). The same thread then plays the new
// steward, elected after the death: the census (`record::find`, P alive: its pid and
// start time are the record's), its own slot, the sweep and free of every slot the census
// returned. P (the main thread), once answered, leases and returns a frame and detaches;
// unanswered, it would attach again elsewhere (it stops here). At the end every frame is
// listed once, and no library assertion failed (a push of a frame P no longer leases, a
// detach of a slot marked dead under P).
//
// Broken, and caught: `admission_broken_answer_before_record` (R3 before R2: a death in
// R2 leaves P working in a slot whose record is incomplete; the census marks it dead and
// sweeps P's lease while P uses it).

/// The steps of an admission: R1's CAS, R2's three stores.
const ADMISSION_STEPS: u32 = 4;
const RECORDS: Word = Word(8);
const ADMISSION_STACK: Word = Word(32);
const ANSWER: usize = 48;
const ADMISSION_WORDS: usize = 56;
/// The answer word once the connection closed with no answer.
const CLOSED: u64 = u64::MAX;
const P: ProcessId = ProcessId { pid: 7, start: 70 };

fn admission_views(region: &[AtomicU64]) -> (SlotTable<'_>, record::Records<'_>, FrameStack<'_>) {
    (
        SlotTable::new(region, Word(0), SLOTS),
        record::Records::new(region, RECORDS, SLOTS),
        FrameStack::new(region, ADMISSION_STACK, FRAMES),
    )
}

fn admission_model(die_at: u32, flaw: Flaw) {
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        builder.preemption_bound = Some(PREEMPTIONS);
    }
    builder.check(move || {
        let region: Arc<Vec<AtomicU64>> =
            Arc::new((0..ADMISSION_WORDS).map(|_| AtomicU64::new(0)).collect());
        admission_views(&region).2.format();
        let steward = {
            let region = region.clone();
            loom::thread::spawn(move || {
                let (slots, records, stack) = admission_views(&region);
                let answer = &region[ANSWER];
                let run = ModelRun::dying_at(die_at, flaw);
                let admitted = record::admit(&slots, &records, P, &run, |holder| {
                    answer.store(holder.word(), loom::sync::atomic::Ordering::Release)
                });
                if admitted.is_ok() {
                    return;
                }
                // The death: the kernel closes P's connection.
                let _ = answer.compare_exchange(
                    0,
                    CLOSED,
                    loom::sync::atomic::Ordering::AcqRel,
                    loom::sync::atomic::Ordering::Acquire,
                );
                // The new steward.
                let dead = record::find(&slots, &records, |_, id| id == P);
                let me = slots.attach(Flaw::None).unwrap();
                for holder in dead {
                    stack
                        .sweep(holder, me, &slots, &ModelRun::living(Flaw::None))
                        .unwrap();
                    slots.free_dead(holder);
                }
            })
        };
        let (slots, _, stack) = admission_views(&region);
        let answer = loop {
            match region[ANSWER].load(loom::sync::atomic::Ordering::Acquire) {
                0 => loom::thread::yield_now(),
                word => break word,
            }
        };
        if answer != CLOSED {
            let me = Holder::from_word(answer);
            lease(&stack, me, &slots, &ModelRun::living(Flaw::None)).unwrap();
            slots.detach(me);
        }
        steward.join().unwrap();
        assert_eq!(
            stack.check(),
            Ok(Census {
                listed: FRAMES,
                leased: Vec::new()
            }),
            "every frame listed once at the end"
        );
    });
}

#[test]
fn admission_death_at_every_step() {
    for die_at in 0..=ADMISSION_STEPS {
        admission_model(die_at, Flaw::None);
    }
}

#[test]
fn admission_broken_answer_before_record() {
    let mut caught = None;
    for die_at in 0..=ADMISSION_STEPS {
        if let Err(payload) =
            std::panic::catch_unwind(|| admission_model(die_at, Flaw::AnswerBeforeRecord))
        {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            eprintln!("AnswerBeforeRecord: caught with a death at step {die_at}: {message}");
            caught = Some(message);
            break;
        }
    }
    assert_invariant_broken(&caught.expect("AnswerBeforeRecord: no model failed"));
}

// The shared buddy allocator (`buddy.rs`, issue 45 step 4).
//
// Two frames, one free block of order 1. The dying process allocates an order-0 frame
// (TAKE the order-1 block, SPLIT it, ASSIGN the low half) and frees it (RELEASE, MERGE
// with its buddy if that is free, LIST), or does the same through a magazine of batch 1
// (CARVE for ASSIGN, `return_batch` for the free), dying at its `d`-th step (each of its steps, and
// no death); then its thread plays the steward (marks the slot dead, sweeps: takes the
// lock over if the dead one held it, redoes its last primitive, frees the block in flight
// and every block leased to it; frees the slot) and the next process in the slot, which
// allocates and frees an order-0 frame. Meanwhile another process (the main thread)
// allocates and frees an order-0 frame, racing both for the lock: it may take the dead
// holder's lock over itself. At the end both frames are free and merged into the order-1
// block, the lock free, nothing in flight; no library assertion failed.
//
// Broken, and caught: `buddy_broken_intent_after_mutation` (a primitive's stores made
// before its intent: a death between leaves a half-made list change nobody redoes) and
// `buddy_broken_in_flight_forgotten` (a taker does not free the block in flight: a death
// between TAKE and ASSIGN, or inside the merge chain, loses it).

const BUDDY_FRAMES: u32 = 2;
const BUDDY: Word = Word(8);
const BUDDY_WORDS: usize = 8 + (24 + 3 * BUDDY_FRAMES) as usize;
/// The dying process's steps when nobody else takes the lock between its operations:
/// more than enough to cover every step (a death past its last step is no death).
const BUDDY_STEPS: u32 = 40;
/// The buddy model's preemption bound (its operations are longer than the stack's).
const BUDDY_PREEMPTIONS: usize = 3;

fn buddy_views(region: &[AtomicU64]) -> (SlotTable<'_>, buddy::SharedBuddy<'_>) {
    (
        SlotTable::new(region, Word(0), SLOTS),
        buddy::SharedBuddy::new(region, BUDDY, BUDDY_FRAMES),
    )
}

/// How the dying process allocates its frame.
#[derive(Clone, Copy, Debug)]
enum Through {
    /// `SharedBuddy::alloc` and `free`: TAKE, SPLIT, ASSIGN; RELEASE, MERGE, LIST.
    Buddy,
    /// A magazine of batch 1: `lease_batch` (TAKE, SPLIT, CARVE), then `drain`
    /// (`return_batch`: RELEASE, MERGE, LIST).
    Magazine,
}

/// The dying process's frame allocated and freed, `through` one way or the other.
fn dying_work(
    buddy: &buddy::SharedBuddy<'_>,
    me: Holder,
    slots: &SlotTable<'_>,
    run: &ModelRun,
    through: Through,
) -> Result<(), Died> {
    match through {
        Through::Buddy => alloc_and_free(buddy, me, slots, run),
        Through::Magazine => {
            let mut magazine = magazine::Magazine::new(me, 1);
            let frame = magazine
                .alloc(buddy, slots, run)?
                .expect("a frame is free (none lost)");
            magazine.free(frame, buddy, slots, run)?;
            magazine.drain(buddy, slots, run)
        }
    }
}

/// An order-0 frame allocated and freed.
fn alloc_and_free(
    buddy: &buddy::SharedBuddy<'_>,
    me: Holder,
    slots: &SlotTable<'_>,
    run: &ModelRun,
) -> Result<(), Died> {
    let frame = buddy
        .alloc(buddy::Order(0), me, slots, run)?
        .expect("a frame is free (none lost)");
    buddy.free(frame, buddy::Order(0), me, slots, run)
}

fn buddy_model(die_at: u32, flaw: Flaw, through: Through) {
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        builder.preemption_bound = Some(BUDDY_PREEMPTIONS);
    }
    builder.check(move || {
        let region: Arc<Vec<AtomicU64>> =
            Arc::new((0..BUDDY_WORDS).map(|_| AtomicU64::new(0)).collect());
        let (steward, dying, other) = {
            let (slots, buddy) = buddy_views(&region);
            buddy.format();
            (
                slots.attach(Flaw::None).unwrap(),
                slots.attach(Flaw::None).unwrap(),
                slots.attach(Flaw::None).unwrap(),
            )
        };
        let a = {
            let region = region.clone();
            loom::thread::spawn(move || {
                let (slots, buddy) = buddy_views(&region);
                let run = ModelRun::dying_at(die_at, flaw);
                match dying_work(&buddy, dying, &slots, &run, through) {
                    Ok(()) => slots.detach(dying),
                    Err(Died) => {
                        assert!(slots.mark_dead(dying));
                        buddy
                            .sweep(dying, steward, &slots, &ModelRun::living(flaw))
                            .unwrap();
                        slots.free_dead(dying);
                        let next = slots.attach(Flaw::None).unwrap();
                        assert_eq!(next.slot, dying.slot);
                        alloc_and_free(&buddy, next, &slots, &ModelRun::living(flaw)).unwrap();
                        slots.detach(next);
                    }
                }
            })
        };
        let (slots, buddy) = buddy_views(&region);
        alloc_and_free(&buddy, other, &slots, &ModelRun::living(flaw)).unwrap();
        slots.detach(other);
        a.join().unwrap();
        let census = buddy.check(&slots);
        assert!(
            census
                == Ok(buddy::Census {
                    free_frames: BUDDY_FRAMES,
                    leased: Vec::new()
                }),
            "every frame free at the end: {census:?}"
        );
    });
}

#[test]
fn buddy_death_at_every_step() {
    for through in [Through::Buddy, Through::Magazine] {
        let before = TAKE_OVERS.load(std::sync::atomic::Ordering::Relaxed);
        for die_at in 0..=BUDDY_STEPS {
            buddy_model(die_at, Flaw::None, through);
        }
        let took_over = TAKE_OVERS.load(std::sync::atomic::Ordering::Relaxed) - before;
        eprintln!("buddy {through:?}: {took_over} take-overs explored");
        assert!(took_over > 0, "no model took a dead holder's lock over");
    }
}

fn buddy_first_failure(flaw: Flaw) -> String {
    for die_at in 0..=BUDDY_STEPS {
        if let Err(payload) = std::panic::catch_unwind(|| buddy_model(die_at, flaw, Through::Buddy))
        {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            eprintln!("buddy {flaw:?}: caught with a death at step {die_at}: {message}");
            return message;
        }
    }
    panic!("buddy {flaw:?}: no model failed");
}

/// The buddy allocator's own assertions and the model's final check.
const BUDDY_INVARIANT_BROKEN: &[&str] = &[
    "every frame free at the end",
    "does not lease",
    "is not free at its order",
    "the block in flight is not moving",
    "a frame is free (none lost)",
    "someone else holds",
    "a free lock with a published intent",
];

fn assert_buddy_invariant_broken(message: &str) {
    assert!(
        BUDDY_INVARIANT_BROKEN.iter().any(|m| message.contains(m)),
        "failed, but not on an invariant: {message}"
    );
}

#[test]
fn buddy_broken_intent_after_mutation() {
    assert_buddy_invariant_broken(&buddy_first_failure(Flaw::IntentAfterMutation));
}

#[test]
fn buddy_broken_in_flight_forgotten() {
    assert_buddy_invariant_broken(&buddy_first_failure(Flaw::InFlightForgotten));
}

// The shared index (`index.rs`).
//
// A tree of one leaf (the root, shift 0) holds page 0. The dying process inserts page 64,
// which grows the tree (GROW: a new root of shift 6, the leaf in its slot 0), extends it
// (EXTEND: a new leaf at slot 1) and stores the folio (STORE), and dies at each of its
// steps in turn (or not at all); its thread then plays the steward, which takes the lock
// over (redoing its last primitive, tidying its path) and frees the slot. Meanwhile another
// process (the main thread) looks up page 0 and page 64 lock-free, then takes the lock
// (racing the steward for the take-over) and looks again. What a look-up may see:
// page 0 (present throughout) is always found, with its frame; page 64 is absent or
// its folio, never anything else. At the end the tree passes `check()` (no node leaked
// or empty) and holds page 0, and page 64 exactly when the STORE was made.
//
// Broken, and caught: `index_broken_intent_after_mutation` (a half-made GROW or EXTEND
// leaks a node), `index_broken_tidy_forgotten` (a death after EXTEND leaves an empty
// leaf). Not caught here: GROW naming the new root before filling it (`Flaw::LinkBeforeFill`:
// a reader then misses page 0); this model passes with it at preemption bounds 3 to 5
// (why was not found in the time; `tests_index::a_root_linked_before_it_is_filled_hides_a_page`
// shows the flaw's effect step by step in one process).

const INDEX_NODES: u32 = 3;
const INDEX_BASE: Word = Word(8);
const INDEX_WORDS: usize = 8 + (16 + 72 * INDEX_NODES) as usize;
/// The dying process's steps (lock, WORKING, GROW 9, EXTEND 8, STORE 4, WORKING, unlock:
/// 25); one more is no death.
const INDEX_STEPS: u32 = 25;
const INDEX_PREEMPTIONS: usize = 3;

fn index_views(region: &[AtomicU64]) -> (SlotTable<'_>, index::SharedIndex<'_>) {
    (
        SlotTable::new(region, Word(0), SLOTS),
        index::SharedIndex::new(region, INDEX_BASE, INDEX_NODES),
    )
}

fn index_model(die_at: u32, flaw: Flaw) {
    use index::{Entry, Folio};
    const OLD: Entry = Entry::Folio {
        frame: 100,
        order: 0,
    };
    const NEW: Entry = Entry::Folio {
        frame: 200,
        order: 0,
    };
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        builder.preemption_bound = Some(INDEX_PREEMPTIONS);
    }
    // Formatting the pool and checking the tree load and store each of its ~240 words: more
    // branch points than loom's default bound, though none of them races.
    builder.max_branches = 20_000;
    builder.check(move || {
        let region: Arc<Vec<AtomicU64>> =
            Arc::new((0..INDEX_WORDS).map(|_| AtomicU64::new(0)).collect());
        let (steward, dying, other) = {
            let (slots, index) = index_views(&region);
            index.format();
            let steward = slots.attach(Flaw::None).unwrap();
            let old = Folio {
                frame: 100,
                order: 0,
            };
            index
                .insert_run(steward, 0, &[old], &slots, &ModelRun::living(Flaw::None))
                .unwrap();
            (
                steward,
                slots.attach(Flaw::None).unwrap(),
                slots.attach(Flaw::None).unwrap(),
            )
        };
        let a = {
            let region = region.clone();
            loom::thread::spawn(move || {
                let (slots, index) = index_views(&region);
                let run = ModelRun::dying_at(die_at, flaw);
                let new = Folio {
                    frame: 200,
                    order: 0,
                };
                match index.insert_run(dying, 64, &[new], &slots, &run) {
                    Ok(_) => slots.detach(dying),
                    Err(Died) => {
                        assert!(slots.mark_dead(dying));
                        index
                            .recover(steward, &slots, &ModelRun::living(flaw))
                            .unwrap();
                        slots.free_dead(dying);
                    }
                }
            })
        };
        let (slots, index) = index_views(&region);
        assert_eq!(index.lookup(0), OLD, "a present page is found");
        let seen = index.lookup(64);
        assert!(
            seen == Entry::Absent || seen == NEW,
            "page 64 reads {seen:?}"
        );
        index
            .recover(other, &slots, &ModelRun::living(flaw))
            .unwrap();
        assert_eq!(index.lookup(0), OLD, "a present page is found");
        slots.detach(other);
        a.join().unwrap();
        let checked = index.check();
        assert!(checked.is_ok(), "the tree checks at the end: {checked:?}");
        let entries = index.entries();
        let stored = entries.len() == 2;
        assert_eq!(entries[0], (0, OLD), "the tree checks at the end");
        if stored {
            assert_eq!(entries[1], (64, NEW), "the tree checks at the end");
        }
        assert_eq!(index.lookup(64), if stored { NEW } else { Entry::Absent });
    });
}

#[test]
fn index_insert_races_a_lookup() {
    let before = TAKE_OVERS.load(std::sync::atomic::Ordering::Relaxed);
    for die_at in 0..=INDEX_STEPS {
        index_model(die_at, Flaw::None);
    }
    let took_over = TAKE_OVERS.load(std::sync::atomic::Ordering::Relaxed) - before;
    eprintln!("index: {took_over} take-overs explored");
    assert!(took_over > 0, "no model took a dead holder's lock over");
}

fn index_first_failure(flaw: Flaw) -> String {
    for die_at in 0..=INDEX_STEPS {
        if let Err(payload) = std::panic::catch_unwind(|| index_model(die_at, flaw)) {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            eprintln!("index {flaw:?}: caught with a death at step {die_at}: {message}");
            return message;
        }
    }
    panic!("index {flaw:?}: no model failed");
}

fn assert_index_broken(message: &str, expected: &str) {
    assert!(
        message.contains(expected),
        "failed, but not as expected: {message}"
    );
}

#[test]
fn index_broken_intent_after_mutation() {
    assert_index_broken(
        &index_first_failure(Flaw::IntentAfterMutation),
        "the tree checks at the end",
    );
}

#[test]
fn index_broken_tidy_forgotten() {
    assert_index_broken(
        &index_first_failure(Flaw::TidyForgotten),
        "the tree checks at the end",
    );
}
