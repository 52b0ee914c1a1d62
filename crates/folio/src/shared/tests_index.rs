//! The shared index (`index.rs`) against a model (proptest, one process, its nodes refilled
//! from a small buddy and released back), and killed at every step of a writer's work and
//! of a release in one process with a taker finishing it (and broken protocols that must
//! fail).

use super::buddy::{Census, SharedBuddy};
use super::index::{Entry, Folio, Leave, Page, Placed, SharedIndex};
use super::slot::SlotTable;
use super::terms::Unkillable;
use super::tests::{Death, DieAt};
use super::{Died, Flaw, Holder, Run, Step, Word};
use crate::primitive::AtomicU64;
use proptest::prelude::*;
use std::cell::Cell;
use std::collections::BTreeMap;

const SLOTS: u16 = 4;
const INDEX: Word = Word(8);
/// A second tree on the same buddy (the fuzz body's).
const OTHER_INDEX: Word = Word(24);
const BUDDY: Word = Word(40);

/// Where the frames' data (the nodes) starts, after the buddy of `frames`.
fn data_at(frames: u32) -> Word {
    Word((BUDDY.0 + SharedBuddy::words(frames)).next_multiple_of(8))
}

fn words(frames: u32) -> usize {
    (data_at(frames).0 + 512 * frames) as usize
}

fn region(frames: u32) -> Vec<AtomicU64> {
    (0..words(frames)).map(|_| AtomicU64::new(0)).collect()
}

/// The slots, the buddy of `frames` and the tree at `at` over `region`.
fn views(
    region: &[AtomicU64],
    frames: u32,
    at: Word,
) -> (SlotTable<'_>, SharedBuddy<'_>, SharedIndex<'_>) {
    let slots = SlotTable::new(region, Word(0), SLOTS);
    let buddy = SharedBuddy::new(region, BUDDY, frames);
    let index = SharedIndex::new(region, at, &buddy, data_at(frames));
    (slots, buddy, index)
}

/// The frames `census` gives trees, by tree.
fn node_frames(census: &Census, tree: Word) -> usize {
    census.nodes.iter().filter(|(_, t)| *t == tree).count()
}

/// A `Run` that never dies, notes whether it took a lock over, with a flaw.
struct Taker {
    flaw: Flaw,
    took_over: Cell<bool>,
}

impl Run for Taker {
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

/// The model: folios by head page, shadows by page.
#[derive(Default, Clone, Debug, PartialEq)]
struct Model {
    folios: BTreeMap<Page, Folio>,
    shadows: BTreeMap<Page, u64>,
}

impl Model {
    fn covering(&self, page: Page) -> Option<(Page, Folio)> {
        let (&head, &folio) = self.folios.range(..=page).next_back()?;
        (page < head + (1 << folio.order)).then_some((head, folio))
    }

    fn lookup(&self, page: Page) -> Entry {
        if let Some((_, f)) = self.covering(page) {
            return Entry::Folio {
                frame: f.frame,
                order: f.order,
            };
        }
        match self.shadows.get(&page) {
            Some(&v) => Entry::Shadow(v),
            None => Entry::Absent,
        }
    }

    fn insert(&mut self, page: Page, folio: Folio) -> Placed {
        let end = page + (1 << folio.order);
        let overlaps = self
            .folios
            .range(..end)
            .next_back()
            .is_some_and(|(&h, f)| h + (1 << f.order) > page);
        let shadows: Vec<(Page, u64)> = self
            .shadows
            .range(page..end)
            .map(|(&p, &v)| (p, v))
            .collect();
        if overlaps || (folio.order >= 6 && !shadows.is_empty()) {
            return Placed::Conflict;
        }
        for (p, _) in &shadows {
            self.shadows.remove(p);
        }
        self.folios.insert(page, folio);
        Placed::Inserted(shadows)
    }

    fn remove(&mut self, page: Page, leave: Leave) -> Option<Folio> {
        let (head, folio) = self.covering(page)?;
        self.folios.remove(&head);
        if let (Leave::Shadow(v), true) = (leave, folio.order < 6) {
            self.shadows.insert(head, v);
        }
        Some(folio)
    }

    fn entries(&self) -> Vec<(Page, Entry)> {
        let mut all: BTreeMap<Page, Entry> = self
            .shadows
            .iter()
            .map(|(&p, &v)| (p, Entry::Shadow(v)))
            .collect();
        for (&p, f) in &self.folios {
            all.insert(
                p,
                Entry::Folio {
                    frame: f.frame,
                    order: f.order,
                },
            );
        }
        all.into_iter().collect()
    }

    fn gaps(&self, start: Page, end: Page) -> Vec<(Page, Page)> {
        let mut gaps: Vec<(Page, Page)> = Vec::new();
        for page in start..end {
            if self.covering(page).is_none() {
                match gaps.last_mut() {
                    Some(last) if last.1 == page => last.1 = page + 1,
                    _ => gaps.push((page, page + 1)),
                }
            }
        }
        gaps
    }
}

#[derive(Clone, Debug)]
enum Op {
    Insert {
        page: Page,
        order: u8,
        count: usize,
    },
    Remove {
        page: Page,
        shadow: Option<u64>,
    },
    Lookup(Page),
    Gaps(Page, u64),
    /// The whole tree dropped, its node frames back to the buddy.
    Release,
}

fn page_in(pick: u8, seed: u64) -> Page {
    match pick {
        0 => seed % 256,
        1 => seed % 65_536,
        _ => (1 << 36) + seed % 4096,
    }
}

fn op_strategy() -> impl Strategy<Value = (bool, Op)> {
    (
        0u8..41,
        0u8..3,
        any::<u64>(),
        0u8..=9,
        1usize..4,
        0u8..2,
        any::<bool>(),
    )
        .prop_map(|(kind, pick, seed, order, count, shadow, other)| {
            let page = page_in(pick, seed);
            let op = match kind / 10 {
                _ if kind == 40 => Op::Release,
                0 => Op::Insert {
                    page: page >> order << order,
                    order,
                    count,
                },
                1 => Op::Remove {
                    page,
                    shadow: (shadow == 1).then_some(seed % 1000),
                },
                2 => Op::Lookup(page),
                _ => Op::Gaps(page, seed % 1200),
            };
            (other, op)
        })
}

/// The fuzz body: two trees on one small buddy (6 frames: 42 nodes, fewer than the
/// operations need, so that nodes run out and come back): random runs inserted, folios
/// removed (a shadow left or not), look-ups, gaps and releases, each against the model; a
/// `Full` only when the buddy has no free frame left. After each operation `check()` of
/// both trees, every entry, and the buddy's census: every frame free or one tree's.
#[test]
fn the_index_follows_the_model() {
    const FRAMES: u32 = 6;
    proptest!(ProptestConfig::with_cases(96), |(ops in proptest::collection::vec(op_strategy(), 1..120))| {
        let region = region(FRAMES);
        let (slots, buddy, first) = views(&region, FRAMES, INDEX);
        let (_, _, second) = views(&region, FRAMES, OTHER_INDEX);
        buddy.format();
        first.format();
        second.format();
        let trees = [&first, &second];
        let me = slots.attach(Flaw::None).unwrap();
        let mut models = [Model::default(), Model::default()];
        let mut frame = 1u64;
        for (other, op) in ops {
            let index = trees[usize::from(other)];
            let model = &mut models[usize::from(other)];
            match op {
                Op::Insert { page, order, count } => {
                    let folios: Vec<Folio> = (0..count)
                        .map(|i| Folio { frame: frame + ((i as u64) << 9), order })
                        .collect();
                    frame += (count as u64) << 9;
                    let placed = index.insert_run(me, page, &folios, &slots, &Unkillable).unwrap();
                    let mut at = page;
                    for (folio, got) in folios.iter().zip(placed) {
                        if got == Placed::Full {
                            prop_assert_eq!(buddy.check(&slots).unwrap().free_frames, 0);
                        } else {
                            prop_assert_eq!(got, model.insert(at, *folio), "insert at {}", at);
                        }
                        at += 1 << folio.order;
                    }
                }
                Op::Remove { page, shadow } => {
                    let leave = shadow.map_or(Leave::Empty, Leave::Shadow);
                    let got = index.remove(me, page, leave, &slots, &Unkillable).unwrap();
                    prop_assert_eq!(got, model.remove(page, leave));
                }
                Op::Lookup(page) => prop_assert_eq!(index.lookup(page), model.lookup(page)),
                Op::Gaps(page, len) => {
                    prop_assert_eq!(index.gaps(page, page + len), model.gaps(page, page + len));
                }
                Op::Release => {
                    let held = index.node_frames().len() as u32;
                    prop_assert_eq!(index.release(me, &slots, &Unkillable), Ok(held));
                    *model = Model::default();
                }
            }
            for (tree, model) in trees.iter().zip(&models) {
                prop_assert_eq!(tree.check().map(|_| ()), Ok(()));
                prop_assert_eq!(tree.entries(), model.entries());
            }
            let census = buddy.check(&slots).unwrap();
            prop_assert!(census.leased.is_empty() && census.cached.is_empty());
            prop_assert_eq!(
                census.free_frames as usize + census.nodes.len(),
                FRAMES as usize
            );
            prop_assert_eq!(node_frames(&census, INDEX), first.node_frames().len());
            prop_assert_eq!(node_frames(&census, OTHER_INDEX), second.node_frames().len());
        }
    });
}

/// The fuzz body's shape does run the buddy dry and back: one tree, inserts spread over
/// 2^36 pages until a `Full`, then a release gives every frame back.
#[test]
fn nodes_run_out_and_come_back() {
    const FRAMES: u32 = 3;
    let region = region(FRAMES);
    let (slots, buddy, index) = views(&region, FRAMES, INDEX);
    buddy.format();
    index.format();
    let me = slots.attach(Flaw::None).unwrap();
    let mut full_at = None;
    for i in 0..64u64 {
        let folio = Folio { frame: i, order: 0 };
        let placed = index
            .insert_run(me, i << 30, &[folio], &slots, &Unkillable)
            .unwrap();
        index.check().unwrap();
        if placed == vec![Placed::Full] {
            full_at = Some(i);
            break;
        }
    }
    assert!(full_at.is_some(), "the 21 nodes never ran out");
    let census = buddy.check(&slots).unwrap();
    assert_eq!((census.free_frames, census.nodes.len()), (0, 3));
    assert_eq!(index.release(me, &slots, &Unkillable), Ok(3));
    index.check().unwrap();
    assert!(index.entries().is_empty());
    let census = buddy.check(&slots).unwrap();
    assert_eq!((census.free_frames, census.nodes.len()), (3, 0));
    // And the tree works again, refilled.
    let folio = Folio { frame: 9, order: 3 };
    assert_eq!(
        index
            .insert_run(me, 64, &[folio], &slots, &Unkillable)
            .unwrap(),
        vec![Placed::Inserted(Vec::new())]
    );
    assert_eq!(index.lookup(70), Entry::Folio { frame: 9, order: 3 });
    index.check().unwrap();
}

/// Reads of impossible words (a region another process scribbled on) answer `Absent` or
/// some entry, never panic nor read out of bounds.
#[test]
fn a_reader_survives_a_scribbled_tree() {
    let frames = 2;
    let region = region(frames);
    let (slots, buddy, index) = views(&region, frames, INDEX);
    buddy.format();
    index.format();
    let me = slots.attach(Flaw::None).unwrap();
    let folio = Folio { frame: 7, order: 0 };
    index
        .insert_run(me, 70_000, &[folio], &slots, &Unkillable)
        .unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..20_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        // The tree's words, the buddy's and the frames' (its nodes).
        let word = (state % (words(frames) - INDEX.index()) as u64) as usize;
        let value = match state >> 60 {
            0 => u64::MAX,
            1 => 0,
            2 => (state >> 8) << 2,
            _ => state.rotate_left(17),
        };
        region[INDEX.index() + word].store(value, crate::primitive::Ordering::Relaxed);
        let page = state.rotate_left(31) % (1 << 20);
        let _ = index.lookup(page);
        let _ = index.gaps(page, page + 300);
    }
}

/// The dying writer's work: a run that grows the tree three levels (a leaf root to shift
/// 18; the first frame's 7 nodes all in the tree then), a folio at 2^24 that grows and
/// extends it past them (a refill: a frame leased and adopted), a large folio that extends
/// two levels, a removal that leaves a shadow and an
/// insertion that replaces it, then removals that prune back to a leaf. Each item is one
/// folio's change.
fn work() -> Vec<(Page, Option<Folio>, Leave)> {
    let f = |frame, order| Some(Folio { frame, order });
    vec![
        (262_144, f(10, 2), Leave::Empty),
        (262_148, f(11, 0), Leave::Empty),
        (262_149, f(12, 0), Leave::Empty),
        (262_150, f(13, 1), Leave::Empty),
        (1 << 24, f(30, 0), Leave::Empty),
        (512, f(20, 9), Leave::Empty),
        (5, None, Leave::Shadow(77)),
        (4, f(40, 2), Leave::Empty),
        (262_144, None, Leave::Empty),
        (262_148, None, Leave::Shadow(9)),
        (262_149, None, Leave::Empty),
        (262_150, None, Leave::Empty),
        (1 << 24, None, Leave::Empty),
        (512, None, Leave::Empty),
        (4, None, Leave::Empty),
    ]
}

/// The runs the dying writer makes of `work()`: the first four folios in one run.
fn do_work<R: Run>(
    index: &SharedIndex<'_>,
    me: Holder,
    slots: &SlotTable<'_>,
    run: &R,
) -> Result<(), Died> {
    let items = work();
    let run_folios: Vec<Folio> = items[..4].iter().map(|i| i.1.unwrap()).collect();
    index.insert_run(me, items[0].0, &run_folios, slots, run)?;
    for &(page, folio, leave) in &items[4..] {
        match folio {
            Some(folio) => drop(index.insert_run(me, page, &[folio], slots, run)?),
            None => drop(index.remove(me, page, leave, slots, run)?),
        }
    }
    Ok(())
}

/// The tree's entries after each prefix of `work()` (the setup's folio at page 5 first).
fn prefix_states() -> Vec<Vec<(Page, Entry)>> {
    let mut model = Model::default();
    model.insert(
        5,
        Folio {
            frame: 500,
            order: 0,
        },
    );
    let mut states = vec![model.entries()];
    for (page, folio, leave) in work() {
        match folio {
            Some(folio) => drop(model.insert(page, folio)),
            None => drop(model.remove(page, leave)),
        }
        states.push(model.entries());
    }
    states
}

/// Dies at each step of `do_work` in turn; a taker takes the lock over (redoes the last
/// primitive, tidies the path), and the tree must be one of the prefix states, `check()`
/// clean (no node leaked, none empty), and still work. Returns (deaths, take-overs).
fn in_one_process(flaw: Flaw) -> (u32, u32) {
    let states = prefix_states();
    let frames = 4;
    let mut took_over = 0;
    for at in 0.. {
        let region = region(frames);
        let (slots, buddy, index) = views(&region, frames, INDEX);
        buddy.format();
        index.format();
        let setup = slots.attach(Flaw::None).unwrap();
        index
            .insert_run(
                setup,
                5,
                &[Folio {
                    frame: 500,
                    order: 0,
                }],
                &slots,
                &Unkillable,
            )
            .unwrap();
        let p = slots.attach(Flaw::None).unwrap();
        let dying = DieAt::new(Some(at), Death::Return, flaw);
        if do_work(&index, p, &slots, &dying).is_ok() {
            assert_eq!(index.entries(), *states.last().unwrap());
            assert_eq!(
                index.check(),
                Ok(5),
                "a path of 5 nodes to the shadow at 262148"
            );
            assert_eq!(
                index.node_frames().len(),
                2,
                "one frame adopted by the work"
            );
            return (at, took_over);
        }
        assert!(slots.mark_dead(p));
        let held = index.lock_line().holder() == Some(p);
        let q = slots.attach(Flaw::None).unwrap();
        let taker = Taker {
            flaw,
            took_over: Cell::new(false),
        };
        // The steward's order: the tree first (a redone ADOPT makes a frame the tree's),
        // then the buddy's sweep of what the dead process still leases.
        index.recover(q, &slots, &taker).unwrap();
        assert_eq!(
            taker.took_over.get(),
            held,
            "step {at}: a take-over exactly when held"
        );
        took_over += u32::from(held);
        buddy.sweep(p, q, &slots, &Unkillable).unwrap();
        slots.free_dead(p);
        if let Err(e) = index.check() {
            panic!("step {at}: {e}");
        }
        match buddy.check(&slots) {
            Ok(census) if census.leased.is_empty() && census.cached.is_empty() => {
                assert_eq!(census.nodes.len(), index.node_frames().len(), "step {at}");
                assert_eq!(census.free_frames as usize + census.nodes.len(), 4);
            }
            other => panic!("step {at}: the buddy: {other:?}"),
        }
        let entries = index.entries();
        assert!(
            states.contains(&entries),
            "step {at}: the tree is no prefix of the work: {entries:?}"
        );
        // The survivor goes on: its own insertion and removal work.
        let placed = index
            .insert_run(
                q,
                1 << 30,
                &[Folio {
                    frame: 900,
                    order: 3,
                }],
                &slots,
                &Unkillable,
            )
            .unwrap();
        assert_eq!(placed, vec![Placed::Inserted(Vec::new())]);
        assert_eq!(
            index.lookup((1 << 30) + 7),
            Entry::Folio {
                frame: 900,
                order: 3
            }
        );
        index
            .remove(q, 1 << 30, Leave::Empty, &slots, &Unkillable)
            .unwrap();
        assert_eq!(index.entries(), entries, "step {at}");
        if let Err(e) = index.check() {
            panic!("step {at}, after the survivor's work: {e}");
        }
    }
    unreachable!()
}

#[test]
fn a_death_at_every_step_leaves_a_working_index() {
    let (steps, took_over) = in_one_process(Flaw::None);
    println!("{steps} steps, {took_over} take-overs");
    assert!(
        steps > 100 && took_over > steps / 2,
        "{steps} steps, {took_over} take-overs"
    );
}

/// Runs the flawed protocol, which must fail at a death (a message naming its step).
fn must_fail(flaw: Flaw) {
    let failed = std::panic::catch_unwind(|| in_one_process(flaw));
    let payload = failed.expect_err("the flawed protocol passed");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    println!("{flaw:?}: {message}");
    assert!(
        message.starts_with("step "),
        "failed, but not at a death: {message}"
    );
}

/// The intent published after its primitive's stores: a death between leaves a half-made
/// primitive nobody redoes (a node off the pool and never linked: leaked).
#[test]
fn a_death_at_every_step_broken_intent_after_mutation() {
    must_fail(Flaw::IntentAfterMutation);
}

/// The taker does not tidy the dead holder's path: a death between EXTEND and STORE
/// leaves an empty node in the tree.
#[test]
fn a_death_at_every_step_broken_tidy_forgotten() {
    must_fail(Flaw::TidyForgotten);
}

/// ADOPT's adoption (the frame's buddy state NODES) stored after its intent: a death
/// between leaves pooled nodes in a frame the dead process still leases, which the buddy's
/// sweep frees (the tree's chain names a frame that is not the tree's).
#[test]
fn a_death_at_every_step_broken_adopt_outside_intent() {
    must_fail(Flaw::AdoptOutsideIntent);
}

/// A tree of three node frames (three pages 2^30 apart: 16 nodes), released by a process
/// that dies at each step in turn; a taker of the tree's lock finishes the release, the
/// buddy sweeps the dead process. The tree is whole (the release not begun) or released,
/// never between; `check()` passes; then the survivor's own release gives every frame back.
/// Returns the deaths.
fn release_in_one_process(flaw: Flaw) -> u32 {
    let frames = 4;
    for at in 0.. {
        let region = region(frames);
        let (slots, buddy, index) = views(&region, frames, INDEX);
        buddy.format();
        index.format();
        let setup = slots.attach(Flaw::None).unwrap();
        for i in 0..3 {
            let folio = Folio { frame: i, order: 0 };
            index
                .insert_run(setup, i << 30, &[folio], &slots, &Unkillable)
                .unwrap();
        }
        assert_eq!(index.node_frames().len(), 3);
        let whole = index.entries();
        let p = slots.attach(Flaw::None).unwrap();
        let dying = DieAt::new(Some(at), Death::Return, flaw);
        if let Ok(freed) = index.release(p, &slots, &dying) {
            assert_eq!(freed, 3);
            assert_eq!(index.check(), Ok(0));
            assert_eq!(buddy.check(&slots).unwrap().free_frames, frames);
            return at;
        }
        assert!(slots.mark_dead(p));
        let q = slots.attach(Flaw::None).unwrap();
        index.recover(q, &slots, &Unkillable).unwrap();
        buddy.sweep(p, q, &slots, &Unkillable).unwrap();
        slots.free_dead(p);
        if let Err(e) = index.check() {
            panic!("step {at}: {e}");
        }
        let entries = index.entries();
        let frames_left = index.node_frames().len();
        assert!(
            (entries == whole && frames_left == 3) || (entries.is_empty() && frames_left == 0),
            "step {at}: half released: {entries:?}, {frames_left} frames"
        );
        index.release(q, &slots, &Unkillable).unwrap();
        let census = buddy.check(&slots).unwrap();
        if census.free_frames != frames {
            panic!("step {at}: frames lost: {census:?}");
        }
        index.check().unwrap();
    }
    unreachable!()
}

#[test]
fn a_death_at_every_step_of_a_release_leaks_no_frame() {
    let steps = release_in_one_process(Flaw::None);
    println!("{steps} steps");
    assert!(steps > 30, "{steps} steps");
}

/// A frame unchained without being named in RELEASING: a death before its free leaks it.
#[test]
fn a_death_at_every_step_of_a_release_broken_unchain_unnamed() {
    let failed = std::panic::catch_unwind(|| release_in_one_process(Flaw::UnchainUnnamed));
    let payload = failed.expect_err("the flawed release passed");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    println!("{message}");
    assert!(
        message.starts_with("step "),
        "failed, but not at a death: {message}"
    );
}

/// What the loom model's broken variant `index_broken_link_before_fill` relies on, step by
/// step: a root linked before it is filled hides a present page from a reader.
#[test]
fn a_root_linked_before_it_is_filled_hides_a_page() {
    for (flaw, seen) in [
        (
            Flaw::None,
            Entry::Folio {
                frame: 100,
                order: 0,
            },
        ),
        (Flaw::LinkBeforeFill, Entry::Absent),
    ] {
        let region = region(1);
        let (slots, buddy, index) = views(&region, 1, INDEX);
        buddy.format();
        index.format();
        let me = slots.attach(Flaw::None).unwrap();
        let old = Folio {
            frame: 100,
            order: 0,
        };
        index
            .insert_run(me, 0, &[old], &slots, &Unkillable)
            .unwrap();
        let p = slots.attach(Flaw::None).unwrap();
        // Stops right after GROW's first store (lock, WORKING, publish, store).
        let dying = DieAt::new(Some(3), Death::Return, flaw);
        let new = Folio {
            frame: 200,
            order: 0,
        };
        assert_eq!(index.insert_run(p, 64, &[new], &slots, &dying), Err(Died));
        assert_eq!(index.lookup(0), seen, "{flaw:?}");
        assert!(slots.mark_dead(p));
        index.recover(me, &slots, &Unkillable).unwrap();
        assert_eq!(
            index.lookup(0),
            Entry::Folio {
                frame: 100,
                order: 0
            }
        );
        assert_eq!(
            index.check(),
            Ok(2),
            "{flaw:?}: the grown root stays, holding the leaf"
        );
    }
}

/// The costs docs/sharing.md reports: an insertion of a run of 32 order-0 folios (building
/// a tree of 1 M pages, nodes taken as needed) and a look-up of a random page of that warm
/// tree, here and in today's `index::Index`. One process; run by hand:
/// `cargo test --release -p folio --lib shared::tests_index::costs_beside_todays_index --
/// --ignored --nocapture`. The machine is shared and loaded, so both indexes are timed in
/// alternating rounds (insertions: 32 rounds of 1,024 runs; look-ups: 40 rounds of 100,000
/// pages, the same pages for both) and each round's ratio is kept: the medians of the
/// rounds, and the median of the paired ratios, are the figures (a load change hits both
/// sides of a round alike).
#[test]
#[ignore]
fn costs_beside_todays_index() {
    use crate::index::{Index, NewFolio};
    use crate::types::{FrameId, Order, PageIndex};
    use std::hint::black_box;
    use std::time::Instant;
    const PAGES: u64 = 1 << 20;
    const RUN: u64 = 32;
    const INSERT_ROUNDS: u64 = 32;
    const LOOKUP_ROUNDS: u64 = 40;
    const LOOKUPS: u64 = 100_000;
    let frames = ((PAGES / 64 + PAGES / 4096 + 64) / 7 + 1) as u32;
    let region = region(frames);
    let (slots, buddy, shared) = views(&region, frames, INDEX);
    buddy.format();
    shared.format();
    let me = slots.attach(Flaw::None).unwrap();
    let today = Index::default();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (mut shared_insert, mut today_insert, mut insert_ratio) = (vec![], vec![], vec![]);
    let per_round = PAGES / INSERT_ROUNDS;
    for round in 0..INSERT_ROUNDS {
        let pages = round * per_round..(round + 1) * per_round;
        let started = Instant::now();
        for first in pages.clone().step_by(RUN as usize) {
            let run: Vec<Folio> = (0..RUN)
                .map(|i| Folio {
                    frame: first + i,
                    order: 0,
                })
                .collect();
            shared
                .insert_run(me, first, &run, &slots, &Unkillable)
                .unwrap();
        }
        let here = started.elapsed().as_nanos() as f64 / (per_round / RUN) as f64;
        let started = Instant::now();
        for first in pages.step_by(RUN as usize) {
            let run: Vec<NewFolio> = (0..RUN)
                .map(|i| NewFolio {
                    frame: FrameId((first + i) as u32),
                    order: Order::new(0),
                    head: PageIndex(first + i),
                })
                .collect();
            let mut guard = today.lock_for_insert(PageIndex(first), RUN);
            black_box(guard.insert_run(&run));
        }
        let there = started.elapsed().as_nanos() as f64 / (per_round / RUN) as f64;
        shared_insert.push(here);
        today_insert.push(there);
        insert_ratio.push(here / there);
    }
    let pages = |mut state: u64| {
        (0..LOOKUPS).map(move |_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % PAGES
        })
    };
    let (mut shared_lookup, mut today_lookup, mut lookup_ratio) = (vec![], vec![], vec![]);
    for round in 0..LOOKUP_ROUNDS {
        let seed = 0x9e37_79b9_7f4a_7c15 ^ round;
        let started = Instant::now();
        let mut found = 0u64;
        for page in pages(seed) {
            if let Entry::Folio { frame, .. } = shared.lookup(black_box(page)) {
                found += frame & 1;
            }
        }
        let here = started.elapsed().as_nanos() as f64 / LOOKUPS as f64;
        let started = Instant::now();
        let mut found_today = 0u64;
        for page in pages(seed) {
            if let crate::index::Entry::Folio { frame, .. } =
                today.lookup(PageIndex(black_box(page)))
            {
                found_today += u64::from(frame.0) & 1;
            }
        }
        let there = started.elapsed().as_nanos() as f64 / LOOKUPS as f64;
        assert_eq!(found, found_today);
        shared_lookup.push(here);
        today_lookup.push(there);
        lookup_ratio.push(here / there);
    }
    println!(
        "insert_run of {RUN} order-0 folios (1 M pages), median of {INSERT_ROUNDS} rounds: \
         shared {:.0} ns, today {:.0} ns, paired ratio {:.2}; \
         look-up of a random page, median of {LOOKUP_ROUNDS} rounds: shared {:.1} ns \
         (fastest round {:.1}), today {:.1} ns (fastest {:.1}), paired ratio {:.2}; \
         {} shared nodes",
        median(shared_insert),
        median(today_insert),
        median(insert_ratio),
        median(shared_lookup.clone()),
        shared_lookup.iter().copied().fold(f64::MAX, f64::min),
        median(today_lookup.clone()),
        today_lookup.iter().copied().fold(f64::MAX, f64::min),
        median(lookup_ratio),
        shared.check().unwrap()
    );
}

/// Instructions per look-up, for `valgrind --tool=callgrind` (docs/sharing.md, "The
/// index", Measured): builds the 1 M-page tree of `costs_beside_todays_index` in one index
/// only (`FOLIO_INDEX=shared` or `today`), then looks up `FOLIO_LOOKUPS` random pages
/// (default 0) and nothing else, so that the difference of two runs' totals divided by the
/// difference of their look-ups is one look-up's count (the page generator's few
/// instructions included, the same for both). Run by hand, e.g.:
/// `FOLIO_INDEX=shared FOLIO_LOOKUPS=1000000 valgrind --tool=callgrind
/// target/release/deps/folio-HASH --ignored --exact
/// shared::tests_index::lookups_for_callgrind`.
#[test]
#[ignore]
fn lookups_for_callgrind() {
    use crate::index::{Index, NewFolio};
    use crate::types::{FrameId, Order, PageIndex};
    use std::hint::black_box;
    const PAGES: u64 = 1 << 20;
    const RUN: u64 = 32;
    let which = std::env::var("FOLIO_INDEX").unwrap_or_else(|_| "shared".into());
    let lookups: u64 = std::env::var("FOLIO_LOOKUPS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut page = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % PAGES
    };
    let mut found = 0u64;
    if which == "today" {
        let today = Index::default();
        for first in (0..PAGES).step_by(RUN as usize) {
            let run: Vec<NewFolio> = (0..RUN)
                .map(|i| NewFolio {
                    frame: FrameId((first + i) as u32),
                    order: Order::new(0),
                    head: PageIndex(first + i),
                })
                .collect();
            let mut guard = today.lock_for_insert(PageIndex(first), RUN);
            black_box(guard.insert_run(&run));
        }
        for _ in 0..lookups {
            if let crate::index::Entry::Folio { frame, .. } =
                today.lookup(PageIndex(black_box(page())))
            {
                found += u64::from(frame.0) & 1;
            }
        }
    } else {
        let frames = ((PAGES / 64 + PAGES / 4096 + 64) / 7 + 1) as u32;
        let region = region(frames);
        let (slots, buddy, shared) = views(&region, frames, INDEX);
        buddy.format();
        shared.format();
        let me = slots.attach(Flaw::None).unwrap();
        for first in (0..PAGES).step_by(RUN as usize) {
            let run: Vec<Folio> = (0..RUN)
                .map(|i| Folio {
                    frame: first + i,
                    order: 0,
                })
                .collect();
            shared
                .insert_run(me, first, &run, &slots, &Unkillable)
                .unwrap();
        }
        for _ in 0..lookups {
            if let Entry::Folio { frame, .. } = shared.lookup(black_box(page())) {
                found += frame & 1;
            }
        }
    }
    println!("{which}: {lookups} look-ups, {found} odd frames");
}

/// A refill's cost (docs/sharing.md, "The index", Measured): `FRAMES` refills of one
/// tree from a buddy of `FRAMES` frames (each: an order-0 lease, 448 slots cleared, one
/// ADOPT), timed in 8 rounds, the median round's time per refill; then one release of
/// them all. Run by hand: `cargo test --release -p folio --lib
/// shared::tests_index::refill_cost -- --ignored --nocapture` (or under callgrind with
/// `FOLIO_REFILLS=0` and the default, the difference divided by the refills).
#[test]
#[ignore]
fn refill_cost() {
    use std::time::Instant;
    const FRAMES: u32 = 4096;
    let refills: u32 = std::env::var("FOLIO_REFILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(FRAMES);
    let region = region(FRAMES);
    let (slots, buddy, index) = views(&region, FRAMES, INDEX);
    let me = slots.attach(Flaw::None).unwrap();
    let mut rounds = Vec::new();
    for _ in 0..8 {
        buddy.format();
        index.format();
        let started = Instant::now();
        for _ in 0..refills {
            assert!(index.refill_once(me, &slots, &Unkillable).unwrap());
        }
        rounds.push(started.elapsed().as_nanos() as f64 / f64::from(refills.max(1)));
        assert_eq!(index.check(), Ok(0));
    }
    rounds.sort_by(f64::total_cmp);
    let started = Instant::now();
    assert_eq!(index.release(me, &slots, &Unkillable), Ok(refills));
    let release = started.elapsed().as_nanos() as f64 / f64::from(refills.max(1));
    println!(
        "{refills} refills: median {:.0} ns each (fastest round {:.0}); release {:.0} ns per frame",
        rounds[4], rounds[0], release
    );
}

/// Whether a reader may see `entry` at `page` while `work()` runs (after the setup's folio
/// at page 5): absent, a shadow the work leaves, or a folio inserted over the page.
fn may_see(page: Page, entry: Entry) -> bool {
    let mut inserted: Vec<(Page, Folio)> = vec![(
        5,
        Folio {
            frame: 500,
            order: 0,
        },
    )];
    inserted.extend(work().into_iter().filter_map(|(p, f, _)| f.map(|f| (p, f))));
    match entry {
        Entry::Absent => true,
        Entry::Shadow(v) => (page, v) == (5, 77) || (page, v) == (262_148, 9),
        Entry::Folio { frame, order } => inserted.iter().any(|&(head, f)| {
            f == Folio { frame, order } && head <= page && page < head + (1 << order)
        }),
    }
}

/// Across real processes: a forked writer does `work()` and stops itself (`SIGSTOP`) at a
/// step (every eighth of its 328); the test `SIGKILL`s it there, marks it dead and, as the
/// steward, takes the lock over (redo, tidy). Meanwhile a forked reader looks up the
/// work's pages lock-free without pause and checks every entry it finds against what was
/// inserted (it exits 1 on a wrong one). After each death `check()` passes and the tree is
/// one of the work's prefix states. No sleep decides what is covered: the step is the
/// lever's, and the reader's check holds whatever it races.
#[test]
fn a_writer_killed_at_steps_leaves_readers_right_and_the_tree_whole() {
    use super::tests::{fork, wait_for, SharedRegion};
    let states = prefix_states();
    let frames = 4;
    let stop_word = words(frames);
    let pages: Vec<Page> = vec![
        4, 5, 6, 7, 262_144, 262_147, 262_148, 262_149, 262_150, 262_151, 512, 700, 1023, 100_000,
    ];
    let mut held = 0;
    for die_at in (0..330).step_by(8) {
        let shared = SharedRegion::new(stop_word + 1);
        let region = shared.words();
        let (slots, buddy, index) = views(region, frames, INDEX);
        buddy.format();
        index.format();
        let steward = slots.attach(Flaw::None).unwrap();
        index
            .insert_run(
                steward,
                5,
                &[Folio {
                    frame: 500,
                    order: 0,
                }],
                &slots,
                &Unkillable,
            )
            .unwrap();
        let writer = slots.attach(Flaw::None).unwrap();
        let reader = fork(|| {
            let mut rounds = 0u64;
            while region[stop_word].load(crate::primitive::Ordering::Acquire) == 0 || rounds == 0 {
                for &page in &pages {
                    let entry = index.lookup(page);
                    assert!(may_see(page, entry), "page {page}: {entry:?}");
                }
                rounds += 1;
            }
        });
        let child = fork(|| {
            let stop = DieAt::new(Some(die_at), Death::Stop, Flaw::None);
            let _ = do_work(&index, writer, &slots, &stop);
            // SAFETY: raise has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
        });
        let status = wait_for(child, libc::WUNTRACED);
        assert!(libc::WIFSTOPPED(status), "status {status:#x}");
        held += u32::from(index.lock_line().holder() == Some(writer));
        // SAFETY: kills and reaps our own stopped child.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, &mut 0, 0);
        }
        assert!(slots.mark_dead(writer));
        index.recover(steward, &slots, &Unkillable).unwrap();
        slots.free_dead(writer);
        if let Err(e) = index.check() {
            panic!("a death at step {die_at}: {e}");
        }
        assert!(
            states.contains(&index.entries()),
            "a death at step {die_at}: no prefix state"
        );
        region[stop_word].store(1, crate::primitive::Ordering::Release);
        let status = wait_for(reader, 0);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the reader saw a wrong entry (death at step {die_at}): status {status:#x}"
        );
    }
    assert!(held > 30, "the writer held the lock at {held} of 42 deaths");
}
