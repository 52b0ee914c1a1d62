//! The shared buddy allocator and the magazines (issue 45 step 4, buddy.rs, magazine.rs):
//! against a model (proptest), with a death at every step in one process, and across
//! real processes `SIGKILL`ed at lever-chosen steps. The loom model of the same code is
//! in `tests/loom_shared.rs`; the cost of a pair against `arena/buddy.rs` is
//! `an_order_0_pair_costs` (ignored: run it by hand, docs/sharing.md).

use super::attach::{DomainConfig, Member};
use super::buddy::{Census, Order, SharedBuddy, ORDER_MAX};
use super::domain::Geometry;
use super::futex::Parked;
use super::magazine::Magazine;
use super::slot::{SlotState, SlotTable};
use super::stack::Frame;
use super::terms::Unkillable;
use super::tests::{fork, DomainHome, SharedRegion};
use super::tests::{seed_from_env, MemberLever, Rng, StopAt};
use super::tests::{Death, DieAt};
use super::{Died, Flaw, Holder, Run, Step, Word};
use crate::primitive::AtomicU64;
use proptest::prelude::*;
use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

const SLOTS: u16 = 16;
/// The allocator's words start after the slot table (and its park words), on a line.
const BUDDY: Word = Word(SlotTable::words(SLOTS).next_multiple_of(8));

fn region_for(frames: u32) -> Vec<AtomicU64> {
    (0..BUDDY.0 + SharedBuddy::words(frames))
        .map(|_| AtomicU64::new(0))
        .collect()
}

fn views(region: &[AtomicU64], frames: u32) -> (SlotTable<'_>, SharedBuddy<'_>) {
    (
        SlotTable::new(region, Word(0), SLOTS),
        SharedBuddy::new(region, BUDDY, frames),
    )
}

fn free_census(frames: u32) -> Census {
    Census {
        free_frames: frames,
        leased: Vec::new(),
        cached: Vec::new(),
        nodes: Vec::new(),
    }
}

#[test]
fn a_split_and_a_merge_restore_the_largest_blocks() {
    let region = region_for(1024);
    let (slots, buddy) = views(&region, 1024);
    buddy.format();
    let me = slots.attach(Flaw::None).unwrap();
    let run = &Unkillable;
    assert_eq!(buddy.check(&slots), Ok(free_census(1024)));
    let a = buddy.alloc(Order(0), me, &slots, run).unwrap().unwrap();
    let b = buddy.alloc(Order(3), me, &slots, run).unwrap().unwrap();
    assert_eq!(b.0 % 8, 0, "order-3 blocks are aligned");
    let census = buddy.check(&slots).unwrap();
    assert_eq!(census.free_frames, 1024 - 9);
    assert_eq!(
        census.leased,
        vec![(a, Order(0), me), (b, Order(3), me)],
        "in frame order"
    );
    buddy.free(a, Order(0), me, &slots, run).unwrap();
    buddy.free(b, Order(3), me, &slots, run).unwrap();
    assert_eq!(buddy.check(&slots), Ok(free_census(1024)));
    // Everything merged back: two order-9 blocks are available again.
    let x = buddy.alloc(Order(ORDER_MAX), me, &slots, run).unwrap();
    let y = buddy.alloc(Order(ORDER_MAX), me, &slots, run).unwrap();
    assert!(x.is_some() && y.is_some());
    assert_eq!(buddy.alloc(Order(0), me, &slots, run), Ok(None));
}

#[test]
fn a_ragged_end_is_listed_in_aligned_blocks() {
    let frames = 1000; // 512 + 256 + 128 + 64 + 32 + 8
    let region = region_for(frames);
    let (slots, buddy) = views(&region, frames);
    buddy.format();
    assert_eq!(buddy.check(&slots), Ok(free_census(frames)));
    let me = slots.attach(Flaw::None).unwrap();
    let run = &Unkillable;
    let mut got = Vec::new();
    while let Some(frame) = buddy.alloc(Order(3), me, &slots, run).unwrap() {
        got.push(frame);
    }
    assert_eq!(got.len(), 125);
    for frame in got {
        buddy.free(frame, Order(3), me, &slots, run).unwrap();
    }
    assert_eq!(buddy.check(&slots), Ok(free_census(frames)));
}

#[test]
fn a_magazine_leases_and_returns_in_batches() {
    let frames = 64;
    let region = region_for(frames);
    let (slots, buddy) = views(&region, frames);
    buddy.format();
    let me = slots.attach(Flaw::None).unwrap();
    let run = &Unkillable;
    let mut magazine = Magazine::new(me, 8);
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(magazine.alloc(&buddy, &slots, run).unwrap().unwrap());
    }
    // Three batches of 8 leased, 20 handed out, 4 still in the magazine.
    assert_eq!(magazine.len(), 4);
    assert_eq!(buddy.check(&slots).unwrap().free_frames, 64 - 24);
    for frame in held.drain(..) {
        magazine.free(frame, &buddy, &slots, run).unwrap();
    }
    // Full at 16: one batch of 8 returned each time it filled.
    assert!(magazine.len() <= 16);
    assert_eq!(
        buddy.check(&slots).unwrap().free_frames,
        64 - magazine.len() as u32
    );
    magazine.drain(&buddy, &slots, run).unwrap();
    assert_eq!(buddy.check(&slots), Ok(free_census(frames)));
}

/// The model: which frames are allocated. An allocation of order k must succeed exactly
/// when an aligned run of 2^k free frames exists (merging is eager), and return one.
#[test]
fn alloc_and_free_follow_the_model() {
    proptest!(ProptestConfig::with_cases(128), |(frames in 1u32..300, ops in proptest::collection::vec((0u8..3, 0u8..=ORDER_MAX, 0usize..64), 1..200))| {
        let region = region_for(frames);
        let (slots, buddy) = views(&region, frames);
        buddy.format();
        let me = slots.attach(Flaw::None).unwrap();
        let run = &Unkillable;
        let mut used = vec![false; frames as usize];
        let mut blocks: Vec<(Frame, Order)> = Vec::new();
        for (op, order, pick) in ops {
            if op < 2 || blocks.is_empty() {
                let order = Order(order % (ORDER_MAX + 1));
                let size = 1usize << order.0;
                let fits = (0..frames as usize)
                    .step_by(size)
                    .any(|f| f + size <= frames as usize && used[f..f + size].iter().all(|u| !u));
                let got = buddy.alloc(order, me, &slots, run).unwrap();
                prop_assert_eq!(got.is_some(), fits, "order {}", order.0);
                if let Some(frame) = got {
                    let f = frame.0 as usize;
                    prop_assert_eq!(f % size, 0);
                    prop_assert!(used[f..f + size].iter().all(|u| !u));
                    used[f..f + size].iter_mut().for_each(|u| *u = true);
                    blocks.push((frame, order));
                }
            } else {
                let (frame, order) = blocks.swap_remove(pick % blocks.len());
                buddy.free(frame, order, me, &slots, run).unwrap();
                let f = frame.0 as usize;
                used[f..f + (1 << order.0)].iter_mut().for_each(|u| *u = false);
            }
            let census = buddy.check(&slots);
            prop_assert!(census.is_ok(), "{:?}", census);
            let census = census.unwrap();
            prop_assert_eq!(census.free_frames as usize, used.iter().filter(|u| !**u).count());
            prop_assert_eq!(census.leased.len(), blocks.len());
        }
    });
}

const SCRIPT_FRAMES: u32 = 64;

/// The dying process's work in one process's test: splits and merges of several
/// orders, and a magazine that leases a carved batch and returns it.
fn script<R: Run>(
    buddy: &SharedBuddy<'_>,
    me: Holder,
    slots: &SlotTable<'_>,
    run: &R,
) -> Result<(), Died> {
    let a = buddy.alloc(Order(0), me, slots, run)?.expect("free");
    let b = buddy.alloc(Order(2), me, slots, run)?.expect("free");
    let mut magazine = Magazine::new(me, 4);
    let c = magazine.alloc(buddy, slots, run)?.expect("free");
    let d = magazine.alloc(buddy, slots, run)?.expect("free");
    buddy.free(a, Order(0), me, slots, run)?;
    magazine.free(c, buddy, slots, run)?;
    buddy.free(b, Order(2), me, slots, run)?;
    magazine.free(d, buddy, slots, run)?;
    magazine.drain(buddy, slots, run)
}

/// Another process's work after the death: it may find the lock held by the dead one.
fn other_work<R: Run>(
    buddy: &SharedBuddy<'_>,
    me: Holder,
    slots: &SlotTable<'_>,
    run: &R,
) -> Result<(), Died> {
    let x = buddy.alloc(Order(1), me, slots, run)?.expect("free");
    let y = buddy.alloc(Order(0), me, slots, run)?.expect("free");
    buddy.free(x, Order(1), me, slots, run)?;
    buddy.free(y, Order(0), me, slots, run)
}

/// A `Run` that notes whether it took a lock over.
struct Noted {
    took_over: Cell<bool>,
    flaw: Flaw,
}

impl Run for Noted {
    fn at(&self, step: Step) -> Result<(), Died> {
        if step == Step::TookOver {
            self.took_over.set(true);
        }
        Ok(())
    }

    fn wait(&self, holder: Holder) {
        Unkillable.wait(holder)
    }

    fn flaw(&self) -> Flaw {
        self.flaw
    }
}

/// Who works first after a death, in `in_one_process`.
#[derive(Clone, Copy, PartialEq)]
enum First {
    /// Another process (it takes the dead one's lock over), then the steward's sweep.
    Other,
    /// The steward's sweep (it takes the lock over), then another process.
    Steward,
}

/// In one process: the dying process P stops at each step of `script` in turn (a live
/// process Q holds an order-3 block throughout); then either another process R works
/// first (taking P's lock over if P held it: the last primitive redone, the block in
/// flight freed) and the steward sweeps P after, or the steward first. At every step the
/// allocator ends with only Q's block leased and every other frame free.
fn in_one_process(flaw: Flaw) -> Result<(), String> {
    let mut took_over = 0;
    let mut swept = 0;
    let mut steps = 0;
    for first in [First::Other, First::Steward] {
        for at in 0.. {
            let region = region_for(SCRIPT_FRAMES);
            let (slots, buddy) = views(&region, SCRIPT_FRAMES);
            buddy.format();
            let steward = slots.attach(Flaw::None).unwrap();
            let q = slots.attach(Flaw::None).unwrap();
            let kept = buddy
                .alloc(Order(3), q, &slots, &Unkillable)
                .unwrap()
                .unwrap();
            let p = slots.attach(Flaw::None).unwrap();
            if script(
                &buddy,
                p,
                &slots,
                &DieAt::new(Some(at), Death::Return, flaw),
            )
            .is_ok()
            {
                break;
            }
            steps += 1;
            assert!(slots.mark_dead(p));
            let held = buddy.lock_line().holder() == Some(p);
            let r = slots.attach(Flaw::None).unwrap();
            let noted = Noted {
                took_over: Cell::new(false),
                flaw,
            };
            let sweep = |run: &Noted| buddy.sweep(p, steward, &slots, run).unwrap();
            if first == First::Steward {
                swept += sweep(&noted);
                other_work(&buddy, r, &slots, &noted).unwrap();
            } else {
                other_work(&buddy, r, &slots, &noted).unwrap();
                swept += sweep(&noted);
            }
            assert_eq!(noted.took_over.get(), held, "step {at}");
            took_over += u32::from(held);
            slots.free_dead(p);
            slots.detach(r);
            let census = buddy.check(&slots).map_err(|e| format!("step {at}: {e}"))?;
            let want = Census {
                free_frames: SCRIPT_FRAMES - 8,
                leased: vec![(kept, Order(3), q)],
                cached: Vec::new(),
                nodes: Vec::new(),
            };
            if census != want {
                return Err(format!("step {at}: {census:?}"));
            }
        }
    }
    eprintln!("{flaw:?}: {steps} deaths, {took_over} take-overs, {swept} frames swept");
    assert!(
        took_over > 100 && swept > 0,
        "took over {took_over}, swept {swept}"
    );
    Ok(())
}

#[test]
fn a_death_at_every_step_leaves_a_working_allocator() {
    in_one_process(Flaw::None).unwrap();
}

/// Runs `in_one_process` with `flaw`, which must fail (on the allocator's assertions or
/// its check).
fn must_fail(flaw: Flaw) {
    let failed = std::panic::catch_unwind(|| in_one_process(flaw));
    assert!(
        !matches!(failed, Ok(Ok(()))),
        "the flawed protocol {flaw:?} passed"
    );
    if let Ok(Err(e)) = failed {
        eprintln!("{flaw:?} caught: {e}");
    }
}

#[test]
fn a_death_at_every_step_broken_intent_after_mutation() {
    must_fail(Flaw::IntentAfterMutation);
}

#[test]
fn a_death_at_every_step_broken_in_flight_forgotten() {
    must_fail(Flaw::InFlightForgotten);
}

const KILL_FRAMES: u32 = 512;
const KILL_CHILDREN: usize = 4;
const KILL_ROUNDS: u32 = 40;
const KILL_OPS: u32 = 60;
/// Blocks a child holds at most (besides its magazine).
const KILL_HELD: usize = 6;
const KILL_DEADLINE: Duration = Duration::from_secs(60);

/// A child's work in the kill test: `KILL_OPS` random allocations (order 0 through the
/// magazine, orders 1-4 directly) and frees, then everything returned and a detach.
/// `held` and `magazine` were allocated before the fork (no allocation in the child).
fn child_work<R: Run>(
    buddy: &SharedBuddy<'_>,
    slots: &SlotTable<'_>,
    me: Holder,
    seed: u64,
    held: &mut Vec<(Frame, Order)>,
    magazine: &mut Magazine,
    run: &R,
) -> Result<(), Died> {
    let mut rng = Rng(seed);
    for _ in 0..KILL_OPS {
        if held.len() < KILL_HELD && rng.below(3) != 0 {
            let order = Order(rng.below(5) as u8);
            let got = if order.0 == 0 {
                magazine.alloc(buddy, slots, run)?
            } else {
                buddy.alloc(order, me, slots, run)?
            };
            if let Some(frame) = got {
                held.push((frame, order));
            }
        } else if !held.is_empty() {
            let (frame, order) = held.swap_remove(rng.below(held.len() as u64) as usize);
            if order.0 == 0 {
                magazine.free(frame, buddy, slots, run)?;
            } else {
                buddy.free(frame, order, me, slots, run)?;
            }
        }
    }
    for (frame, order) in held.drain(..) {
        if order.0 == 0 {
            magazine.free(frame, buddy, slots, run)?;
        } else {
            buddy.free(frame, order, me, slots, run)?;
        }
    }
    magazine.drain(buddy, slots, run)?;
    slots.detach(me);
    Ok(())
}

/// A forked child of the kill test.
struct Child {
    pid: libc::pid_t,
    holder: Holder,
    done: bool,
}

/// The test process as the steward: kills a child that stopped itself, marks it dead
/// and (later) sweeps it; while its sweep waits for a lock, it looks at the children
/// (the holder may be stopped, waiting for the steward: as steward.rs's `wait`).
struct Steward<'a> {
    slots: &'a SlotTable<'a>,
    buddy: &'a SharedBuddy<'a>,
    me: Holder,
    children: RefCell<Vec<Child>>,
    dead: RefCell<Vec<Holder>>,
    killed: Cell<u32>,
    killed_holding_the_lock: Cell<u32>,
    started: Instant,
}

impl Steward<'_> {
    /// Reaps what each child did since the last look: a stop is killed and marked dead,
    /// an exit must be a success.
    fn look(&self) {
        for child in self.children.borrow_mut().iter_mut().filter(|c| !c.done) {
            let mut status = 0;
            // SAFETY: waits for our own child, without blocking.
            let got =
                unsafe { libc::waitpid(child.pid, &mut status, libc::WUNTRACED | libc::WNOHANG) };
            if got == 0 {
                continue;
            }
            assert_eq!(got, child.pid, "waitpid");
            child.done = true;
            if libc::WIFSTOPPED(status) {
                if self.buddy.lock_line().holder() == Some(child.holder) {
                    self.killed_holding_the_lock
                        .set(self.killed_holding_the_lock.get() + 1);
                }
                // SAFETY: kills and reaps our own stopped child.
                unsafe {
                    libc::kill(child.pid, libc::SIGKILL);
                    libc::waitpid(child.pid, &mut status, 0);
                }
                assert!(libc::WIFSIGNALED(status), "status {status:#x}");
                self.killed.set(self.killed.get() + 1);
                assert!(self.slots.mark_dead(child.holder));
                self.dead.borrow_mut().push(child.holder);
            } else {
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                    "child {} failed: status {status:#x}",
                    child.pid
                );
            }
        }
        assert!(
            self.started.elapsed() < KILL_DEADLINE,
            "the round passed its deadline"
        );
    }

    fn bury(&self) {
        loop {
            let next = self.dead.borrow_mut().pop();
            let Some(dead) = next else {
                return;
            };
            self.buddy
                .sweep(dead, self.me, self.slots, self)
                .expect("the steward never dies");
            self.slots.free_dead(dead);
        }
    }
}

impl Run for Steward<'_> {
    fn at(&self, _step: Step) -> Result<(), Died> {
        Ok(())
    }

    fn wait(&self, holder: Holder) {
        self.look();
        Unkillable.wait(holder)
    }

    /// After each park (it times out: `Park::DEFAULT`), looks for stopped children as a
    /// wait does: a holder stopped by its lever is killed and marked dead only here (the
    /// merge with step 3's parking hung this test: the steward parked again and again on
    /// a stopped holder it never looked at).
    fn parked(&self, _holder: Holder, _outcome: Parked) {
        self.look();
    }
}

impl Drop for Steward<'_> {
    fn drop(&mut self) {
        for child in self.children.borrow().iter().filter(|c| !c.done) {
            let mut status = 0;
            // SAFETY: kills and reaps our own child (a failure's cleanup).
            unsafe {
                libc::kill(child.pid, libc::SIGKILL);
                libc::waitpid(child.pid, &mut status, 0);
            }
        }
    }
}

/// Across real processes: `KILL_ROUNDS` rounds of `KILL_CHILDREN` forked processes that
/// allocate and free blocks of orders 0-4 (order 0 through magazines of 8) in one
/// allocator; about half of them stop themselves at a step the seeded generator chose
/// (`SIGSTOP`; the test `SIGKILL`s them there: no sleep decides what is covered) while
/// the others keep working, waiting for a lock a stopped one holds until the test, as
/// the steward, marks it dead. The steward sweeps each dead one. After every round every
/// frame is free and `check` holds; every child not killed exited 0; most kills hold the
/// lock (nearly every step is a store under it), so the take-over and the block in
/// flight are exercised in every round. `FOLIO_SEED=<n>` replays a run.
#[test]
fn processes_killed_at_random_steps_leave_every_frame_accounted_for() {
    let seed = seed_from_env("buddy kill test");
    let mut rng = Rng(seed);
    let words = (BUDDY.0 + SharedBuddy::words(KILL_FRAMES)) as usize;
    let shared = SharedRegion::new(words);
    let region = shared.words();
    let (slots, buddy) = views(region, KILL_FRAMES);
    buddy.format();
    let me = slots.attach(Flaw::None).unwrap();
    let (mut killed, mut holding) = (0, 0);
    for round in 0..KILL_ROUNDS {
        let steward = Steward {
            slots: &slots,
            buddy: &buddy,
            me,
            children: RefCell::new(Vec::new()),
            dead: RefCell::new(Vec::new()),
            killed: Cell::new(0),
            killed_holding_the_lock: Cell::new(0),
            started: Instant::now(),
        };
        for _ in 0..KILL_CHILDREN {
            let holder = slots.attach(Flaw::None).unwrap();
            // About 25 steps per operation: die somewhere in the first ~half of the work.
            let die_at = (rng.below(2) == 0).then(|| rng.below(u64::from(KILL_OPS) * 12) as u32);
            let child_seed = rng.next();
            let mut held = Vec::with_capacity(KILL_HELD);
            let mut magazine = Magazine::new(holder, 8);
            let (slots, buddy) = (&slots, &buddy);
            let pid = fork(move || {
                let run = DieAt::new(die_at, Death::Stop, Flaw::None);
                child_work(
                    buddy,
                    slots,
                    holder,
                    child_seed,
                    &mut held,
                    &mut magazine,
                    &run,
                )
                .expect("a stopped child is killed, never continued");
            });
            steward.children.borrow_mut().push(Child {
                pid,
                holder,
                done: false,
            });
        }
        while steward.children.borrow().iter().any(|c| !c.done) {
            steward.look();
            steward.bury();
            std::thread::sleep(Duration::from_micros(200));
        }
        steward.bury();
        assert_eq!(
            buddy.check(&slots),
            Ok(free_census(KILL_FRAMES)),
            "round {round} (FOLIO_SEED={seed})"
        );
        killed += steward.killed.get();
        holding += steward.killed_holding_the_lock.get();
    }
    eprintln!("buddy kill test: {killed} killed, {holding} holding the lock");
    assert!(
        killed >= KILL_ROUNDS && holding >= KILL_ROUNDS / 2,
        "too few kills: {killed}, {holding}"
    );
}

/// The allocator wired into a domain: forked members attach, allocate blocks of several
/// orders and fill a magazine, and stop themselves at a step spread over their work
/// (`SIGKILL`ed there by the test); the domain's steward, told of each death by its
/// pidfd, sweeps the allocator too (steward.rs's `bury`), taking its lock over when the
/// member died holding it: once the slot is free again, every frame is free.
#[test]
fn the_domains_steward_sweeps_a_dead_members_blocks() {
    let home = DomainHome::new();
    let config = DomainConfig {
        dir: home.path().to_path_buf(),
        name: "buddy-test".into(),
        geometry: Geometry {
            slots: 4,
            frames: 256,
        },
        linger: Duration::from_millis(100),
        memory_files: None,
        weight: super::record::Weight::DEFAULT,
    };
    let parent = Member::attach(&config).unwrap();
    let domain = parent.domain();
    let slots = domain.slots();
    let buddy = domain.buddy();
    let mut held_the_lock = 0;
    // The member's work is about 170 steps: a death at every ninth.
    for die_at in (0..180).step_by(9) {
        let config = &config;
        let child = fork(move || {
            let member = Member::attach(config).expect("attach");
            let run = MemberLever::new(&member, StopAt::new(Some(die_at)));
            let (slots, buddy) = (member.domain().slots(), member.domain().buddy());
            let me = member.holder();
            let mut magazine = Magazine::new(me, 8);
            for order in [3, 0, 5, 1] {
                buddy
                    .alloc(Order(order), me, &slots, &run)
                    .unwrap()
                    .expect("free");
            }
            for _ in 0..3 {
                magazine.alloc(&buddy, &slots, &run).unwrap().expect("free");
            }
            // Everything held is the sweep's to return: stop here if the lever did not.
            // SAFETY: raise has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
        });
        let status = super::tests::wait_for(child, libc::WUNTRACED);
        assert!(libc::WIFSTOPPED(status), "status {status:#x}");
        let holder = (0..slots.slot_count())
            .map(|i| slots.state(super::SlotIndex(i)))
            .find(|(state, h)| {
                *state == SlotState::Live
                    && *h != parent.holder()
                    && domain.records().read(*h) != Some(domain.steward())
            })
            .map(|(_, h)| h)
            .expect("the member's slot");
        held_the_lock += u32::from(buddy.lock_line().holder() == Some(holder));
        // SAFETY: kills and reaps our own stopped child.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, &mut 0, 0);
        }
        let deadline = Instant::now() + KILL_DEADLINE;
        while slots.state(holder.slot) != (SlotState::Free, holder) {
            assert!(
                Instant::now() < deadline,
                "the steward never swept {holder:?}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            buddy.check(&slots),
            Ok(free_census(256)),
            "a death at step {die_at}"
        );
    }
    assert!(
        held_the_lock >= 10,
        "held the lock at {held_the_lock} deaths"
    );
    parent.detach();
}

// The cost of an order-0 alloc+free pair in one process (docs/sharing.md, "Figures"):
// through a magazine (no shared lock but once per batch), through the shared lock (one
// alloc, one free, each a lock hold), and today's `arena/buddy.rs` pair beside them.
// `cargo test --release -p folio --lib shared::tests_buddy::an_order_0_pair_costs --
// --ignored --nocapture`.
#[test]
#[ignore]
fn an_order_0_pair_costs() {
    use crate::arena::{Arena, ArenaPages, FolioUse};
    use crate::types::Order as ArenaOrder;
    const PAIRS: u32 = 1_000_000;
    let frames = 1 << 16;
    let region = region_for(frames);
    let (slots, buddy) = views(&region, frames);
    buddy.format();
    let me = slots.attach(Flaw::None).unwrap();
    let run = &Unkillable;
    let per_pair = |started: Instant| started.elapsed().as_nanos() as f64 / f64::from(PAIRS);

    // Every frame free: each alloc splits an order-9 block 9 times, each free merges it
    // back 9 times (the worst case).
    let started = Instant::now();
    for _ in 0..PAIRS {
        let f = buddy.alloc(Order(0), me, &slots, run).unwrap().unwrap();
        buddy.free(f, Order(0), me, &slots, run).unwrap();
    }
    let split = per_pair(started);

    // Frame 0 kept: each alloc takes frame 1 off list 0, each free lists it back (its
    // buddy is leased): no split, no merge (the best case).
    let keep = buddy.alloc(Order(0), me, &slots, run).unwrap().unwrap();
    let started = Instant::now();
    for _ in 0..PAIRS {
        let f = buddy.alloc(Order(0), me, &slots, run).unwrap().unwrap();
        buddy.free(f, Order(0), me, &slots, run).unwrap();
    }
    let locked = per_pair(started);

    let mut magazine = Magazine::new(me, 16);
    let started = Instant::now();
    for _ in 0..PAIRS {
        let f = magazine.alloc(&buddy, &slots, run).unwrap().unwrap();
        magazine.free(f, &buddy, &slots, run).unwrap();
    }
    let hot = per_pair(started);

    // 64 frames out, then 64 back: the magazine (batch 16) leases a batch (one carved
    // order-4 block) every 16 frames out and returns one (16 frees, merging) every 16
    // back once it is full: one lock hold per 16 operations.
    let mut out = Vec::with_capacity(64);
    let started = Instant::now();
    for _ in 0..PAIRS / 64 {
        for _ in 0..64 {
            out.push(magazine.alloc(&buddy, &slots, run).unwrap().unwrap());
        }
        for f in out.drain(..) {
            magazine.free(f, &buddy, &slots, run).unwrap();
        }
    }
    let batched = per_pair(started);
    magazine.drain(&buddy, &slots, run).unwrap();
    buddy.free(keep, Order(0), me, &slots, run).unwrap();

    let arena = Arena::new(frames, ArenaPages::Small).unwrap();
    let arena_pairs = || {
        let started = Instant::now();
        for _ in 0..PAIRS {
            let f = arena.alloc(ArenaOrder::new(0), FolioUse::Request).unwrap();
            arena.meta(f).state.finish_read_ok();
            assert!(arena.meta(f).state.try_freeze());
            arena.free(f);
        }
        per_pair(started)
    };
    // As above: every frame free (split and merge 9 orders), then frame 0 kept.
    let today_split = arena_pairs();
    let keep = arena.alloc(ArenaOrder::new(0), FolioUse::Request).unwrap();
    let today = arena_pairs();
    let _ = keep;

    // The sweep's scan: 1 M frames (4 GiB of 4 KiB frames), a dead holder with nothing.
    let big = 1 << 20;
    let region = region_for(big);
    let (slots, buddy) = views(&region, big);
    buddy.format();
    let steward = slots.attach(Flaw::None).unwrap();
    let dead = slots.attach(Flaw::None).unwrap();
    let mut magazine = Magazine::new(dead, 64);
    for _ in 0..1000 {
        let f = magazine.alloc(&buddy, &slots, run).unwrap().unwrap();
        let _ = f;
    }
    assert!(slots.mark_dead(dead));
    let started = Instant::now();
    let swept = buddy.sweep(dead, steward, &slots, run).unwrap();
    let sweep = started.elapsed();
    assert_eq!(swept, 1024);
    assert_eq!(buddy.check(&slots), Ok(free_census(big)));
    eprintln!(
        "order-0 pair: shared lock {split:.1} ns splitting and merging 9 orders, \
         {locked:.1} ns with no split; magazine hot {hot:.1} ns, magazine 64 out/64 back \
         (batch 16) {batched:.1} ns; arena/buddy.rs today {today_split:.1} ns splitting and \
         merging, {today:.1} ns with no split; sweep of 1 M \
         frames (1024 leased) {sweep:?}"
    );
}

/// The hand-over (issue 45 step 6): a block its lessee handed to the cache (the queue's
/// ADD makes this store under its own lock: queue.rs) is the cache's: the steward's sweep
/// of the dead lessee leaves it, and only `free_cached` frees it.
#[test]
fn a_block_handed_to_the_cache_outlives_its_lessees_sweep() {
    let frames = 16;
    let region = region_for(frames);
    let (slots, buddy) = views(&region, frames);
    buddy.format();
    let steward = slots.attach(Flaw::None).unwrap();
    let p = slots.attach(Flaw::None).unwrap();
    let run = &Unkillable;
    let kept = buddy.alloc(Order(0), p, &slots, run).unwrap().unwrap();
    let handed = buddy.alloc(Order(0), p, &slots, run).unwrap().unwrap();
    let (word, value) = buddy.hand_over_store(handed, Order(0));
    word.store(value, crate::primitive::Ordering::Release);
    assert!(buddy.is_cached(handed, Order(0)));
    assert!(!buddy.is_cached(kept, Order(0)));
    let census = buddy.check(&slots).unwrap();
    assert_eq!(census.leased, vec![(kept, Order(0), p)]);
    assert_eq!(census.cached, vec![(handed, Order(0))]);
    assert!(slots.mark_dead(p));
    assert_eq!(
        buddy.sweep(p, steward, &slots, run),
        Ok(1),
        "only the lease"
    );
    slots.free_dead(p);
    let census = buddy.check(&slots).unwrap();
    assert_eq!(census.free_frames, frames - 1);
    assert_eq!(census.cached, vec![(handed, Order(0))]);
    assert_eq!(
        buddy.free_cached(handed, Order(0), steward, &slots, run),
        Ok(true)
    );
    assert_eq!(
        buddy.free_cached(handed, Order(0), steward, &slots, run),
        Ok(false)
    );
    assert_eq!(buddy.check(&slots), Ok(free_census(frames)));
}
