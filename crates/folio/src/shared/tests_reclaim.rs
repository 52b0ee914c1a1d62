//! The eviction queue and reclaim (issue 45 step 6, queue.rs): against a model
//! (proptest), a pin against reclaim, and a death at every step of a process that caches,
//! reclaims and removes pages while another holds one pinned. The loom model of a hit
//! racing reclaim and the reclaimer's death is in `tests/loom_shared.rs`; the costs are
//! `costs_beside_todays_queue` (ignored: run it by hand, docs/sharing.md).

use super::buddy::{Order, SharedBuddy};
use super::index::{Entry, Folio, Page, Placed, SharedIndex};
use super::queue::{FileNo, PinHit, Removed, SharedQueue, Unpinnable, SHADOW_VALUE};
use super::slot::SlotTable;
use super::stack::Frame;
use super::terms::Unkillable;
use super::{Died, Flaw, Holder, Run, Step, Word};
use crate::primitive::AtomicU64;
use proptest::prelude::*;
use std::cell::Cell;
use std::collections::BTreeMap;

const SLOTS: u16 = 16;
const FILES: usize = 2;
/// The frames of the indexes' nodes: an allocator of their own, so that the tests' data
/// frames are the queue's alone.
const NODE_FRAMES: u32 = 8;
/// The allocator's words start after the slot table (and its park words), on a line.
const BUDDY: Word = Word(SlotTable::words(SLOTS).next_multiple_of(8));

fn queue_at(frames: u32) -> Word {
    Word((BUDDY.0 + SharedBuddy::words(frames)).next_multiple_of(8))
}

fn index_at(frames: u32, file: usize) -> Word {
    let first = (queue_at(frames).0 + SharedQueue::words(frames)).next_multiple_of(8);
    Word(first + file as u32 * SharedIndex::words().next_multiple_of(8))
}

fn node_buddy_at(frames: u32) -> Word {
    index_at(frames, FILES)
}

fn node_data_at(frames: u32) -> Word {
    Word((node_buddy_at(frames).0 + SharedBuddy::words(NODE_FRAMES)).next_multiple_of(8))
}

fn region_for(frames: u32) -> Vec<AtomicU64> {
    (0..node_data_at(frames).0 + 512 * NODE_FRAMES)
        .map(|_| AtomicU64::new(0))
        .collect()
}

/// The slots, the allocator and the files' indexes over `region`, formatted if asked.
fn parts(
    region: &[AtomicU64],
    frames: u32,
) -> (SlotTable<'_>, SharedBuddy<'_>, Vec<SharedIndex<'_>>) {
    let slots = SlotTable::new(region, Word(0), SLOTS);
    let buddy = SharedBuddy::new(region, BUDDY, frames);
    let indexes = (0..FILES)
        .map(|file| {
            SharedIndex::new(
                region,
                index_at(frames, file),
                &SharedBuddy::new(region, node_buddy_at(frames), NODE_FRAMES),
                node_data_at(frames),
            )
        })
        .collect();
    (slots, buddy, indexes)
}

fn format(
    region: &[AtomicU64],
    frames: u32,
    buddy: &SharedBuddy<'_>,
    queue: &SharedQueue<'_>,
    indexes: &[SharedIndex<'_>],
) {
    buddy.format();
    SharedBuddy::new(region, node_buddy_at(frames), NODE_FRAMES).format();
    queue.format();
    for index in indexes {
        index.format();
    }
}

/// A miss's caching of `page` of `file`: a frame leased, handed to the cache (pinned),
/// inserted into the file's index, unpinned. The frame, or `None` if none is free; a
/// conflict leaves the frame queued and in no index (reclaim frees it).
#[allow(clippy::too_many_arguments)]
fn cache<R: Run>(
    queue: &SharedQueue<'_>,
    buddy: &SharedBuddy<'_>,
    indexes: &[SharedIndex<'_>],
    me: Holder,
    file: usize,
    page: Page,
    slots: &SlotTable<'_>,
    run: &R,
) -> Result<Option<Frame>, Died> {
    let Some(frame) = buddy.alloc(Order(0), me, slots, run)? else {
        return Ok(None);
    };
    queue.hand_over(frame, FileNo(file as u64), page, me, indexes, slots, run)?;
    let folio = Folio {
        frame: u64::from(frame.0),
        order: 0,
    };
    let placed = indexes[file].insert_run(me, page, &[folio], slots, run)?;
    assert_ne!(
        placed,
        vec![Placed::Full],
        "the test's pools are large enough"
    );
    queue.unpin(frame, me);
    Ok(Some(frame))
}

/// A truncation's drop of `page` of `file`: what `SharedQueue::remove` said, or `None`
/// if no frame caches it.
fn drop_page<R: Run>(
    queue: &SharedQueue<'_>,
    indexes: &[SharedIndex<'_>],
    me: Holder,
    file: usize,
    page: Page,
    slots: &SlotTable<'_>,
    run: &R,
) -> Result<Option<Removed>, Died> {
    let Entry::Folio { frame, order: 0 } = indexes[file].lookup(page) else {
        return Ok(None);
    };
    let frame = Frame(frame as u32);
    queue
        .remove(frame, FileNo(file as u64), page, me, indexes, slots, run)
        .map(Some)
}

#[test]
fn a_pinned_frame_is_skipped_and_a_frozen_one_refuses_a_pin() {
    let frames = 8;
    let region = region_for(frames);
    let (slots, buddy, indexes) = parts(&region, frames);
    let queue = SharedQueue::new(&region, queue_at(frames), buddy.clone());
    format(&region, frames, &buddy, &queue, &indexes);
    let me = slots.attach(Flaw::None).unwrap();
    let reader = slots.attach(Flaw::None).unwrap();
    let run = &Unkillable;
    let a = cache(&queue, &buddy, &indexes, me, 0, 10, &slots, run)
        .unwrap()
        .unwrap();
    let b = cache(&queue, &buddy, &indexes, me, 0, 11, &slots, run)
        .unwrap()
        .unwrap();
    let pinned = queue.pin_hit(&indexes[0], 10, reader).expect("a hit");
    assert_eq!(pinned.0, a);
    assert_eq!(queue.pin_hit(&indexes[0], 12, reader), None, "a miss");
    // `a` is the head but pinned: it goes to the tail; `b` is taken.
    assert_eq!(
        queue.reclaim(2, super::queue::Shares::NONE, me, &indexes[..], &slots, run),
        Ok(1)
    );
    assert_eq!(indexes[0].lookup(11), Entry::Shadow(SHADOW_VALUE));
    assert_eq!(
        drop_page(&queue, &indexes, me, 0, 10, &slots, run),
        Ok(Some(Removed::Pinned))
    );
    queue.unpin(pinned.0, reader);
    assert_eq!(queue.check(&slots).unwrap().queued.len(), 1);
    assert_eq!(
        queue.reclaim(1, super::queue::Shares::NONE, me, &indexes[..], &slots, run),
        Ok(1)
    );
    assert_eq!(indexes[0].lookup(10), Entry::Shadow(SHADOW_VALUE));
    assert!(queue.check(&slots).unwrap().queued.is_empty());
    assert_eq!(buddy.check(&slots).unwrap().free_frames, frames);
    let _ = b;
}

/// The lever of `a_pin_this_process_holds_is_refused_and_a_hand_over_waits_for_it`: at
/// the hand-over's wait it unpins the frame, as the sibling thread whose passing pin held
/// our bit would (its second look-up failed), and counts the waits.
struct SiblingUnpinsAtWait<'q, 'r> {
    queue: &'q SharedQueue<'r>,
    frame: Frame,
    me: Holder,
    waits: Cell<u32>,
}

impl Run for SiblingUnpinsAtWait<'_, '_> {
    fn at(&self, _step: Step) -> Result<(), Died> {
        Ok(())
    }

    fn wait(&self, holder: Holder) {
        assert_eq!(holder, self.me, "only the pin's wait, not a lock's");
        self.waits.set(self.waits.get() + 1);
        self.queue.unpin(self.frame, self.me);
    }
}

/// A process's threads share its pin bit (queue.rs, "Threads"): a pin that finds it set
/// already is refused (`Unpinnable::Ours`, `PinHit::Ours`), never taken as made (before,
/// it was: the first unpin would have dropped both); and a miss's hand-over of a frame a
/// sibling thread pins in passing waits for that unpin (a lever unpins at the wait:
/// deterministic), then pins the frame itself, so that reclaim skips it until the miss
/// unpins.
#[test]
fn a_pin_this_process_holds_is_refused_and_a_hand_over_waits_for_it() {
    let frames = 8;
    let region = region_for(frames);
    let (slots, buddy, indexes) = parts(&region, frames);
    let queue = SharedQueue::new(&region, queue_at(frames), buddy.clone());
    format(&region, frames, &buddy, &queue, &indexes);
    let me = slots.attach(Flaw::None).unwrap();
    let run = &Unkillable;
    let a = cache(&queue, &buddy, &indexes, me, 0, 10, &slots, run)
        .unwrap()
        .unwrap();
    // A sibling thread holds `a` by our bit.
    queue.pin(a, me).unwrap();
    assert_eq!(queue.pin(a, me), Err(Unpinnable::Ours));
    assert_eq!(queue.try_pin_hit(&indexes[0], 10, me), PinHit::Ours);
    assert_eq!(queue.pin_hit(&indexes[0], 10, me), None);
    queue.unpin(a, me);
    match queue.try_pin_hit(&indexes[0], 10, me) {
        PinHit::Pinned(pinned) => {
            assert_eq!(pinned.0, a);
            queue.unpin(a, me);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(queue.try_pin_hit(&indexes[0], 12, me), PinHit::Missed);
    // A miss: a frame leased, which a sibling pins in passing before the hand-over.
    let f = buddy.alloc(Order(0), me, &slots, run).unwrap().unwrap();
    queue.pin(f, me).unwrap();
    let lever = SiblingUnpinsAtWait {
        queue: &queue,
        frame: f,
        me,
        waits: Cell::new(0),
    };
    queue
        .hand_over(f, FileNo(0), 11, me, &indexes[..], &slots, &lever)
        .unwrap();
    assert_eq!(lever.waits.get(), 1, "the hand-over waited for the unpin");
    assert_eq!(
        queue.pin(f, me),
        Err(Unpinnable::Ours),
        "pinned by the miss"
    );
    let folio = Folio {
        frame: u64::from(f.0),
        order: 0,
    };
    let placed = indexes[0]
        .insert_run(me, 11, &[folio], &slots, run)
        .unwrap();
    assert!(matches!(placed[..], [Placed::Inserted(_)]), "{placed:?}");
    // Pinned: reclaim rotates it and takes `a` only.
    assert_eq!(
        queue.reclaim(2, super::queue::Shares::NONE, me, &indexes[..], &slots, run),
        Ok(1)
    );
    assert_eq!(indexes[0].lookup(10), Entry::Shadow(SHADOW_VALUE));
    queue.unpin(f, me);
    assert_eq!(
        queue.reclaim(1, super::queue::Shares::NONE, me, &indexes[..], &slots, run),
        Ok(1)
    );
    assert!(queue.check(&slots).unwrap().queued.is_empty());
    assert_eq!(buddy.check(&slots).unwrap().free_frames, frames);
}

/// What the model of one queue knows: the queue's frames in order, each with its page
/// (`None`: queued after a conflict, in no index), the referenced ones, and the pages.
#[derive(Default)]
struct Model {
    queue: Vec<(Frame, usize, Page, bool)>,
    referenced: Vec<Frame>,
    pinned: Vec<Frame>,
    entries: [BTreeMap<Page, Entry>; FILES],
}

impl Model {
    /// CLOCK as queue.rs's `reclaim` does it: the frames freed, in order.
    fn reclaim(&mut self, want: u32) -> Vec<Frame> {
        let mut freed = Vec::new();
        let mut looks = 2 * self.queue.len();
        while (freed.len() as u32) < want && looks > 0 && !self.queue.is_empty() {
            looks -= 1;
            let (head, file, page, indexed) = self.queue[0];
            let referenced = self.referenced.contains(&head);
            let pinned = self.pinned.contains(&head);
            if (referenced || pinned) && self.queue.len() > 1 {
                let entry = self.queue.remove(0);
                self.queue.push(entry);
                self.referenced.retain(|f| *f != head);
                continue;
            }
            if referenced {
                self.referenced.retain(|f| *f != head);
                continue;
            }
            if pinned {
                continue;
            }
            self.queue.remove(0);
            if indexed {
                self.entries[file].insert(page, Entry::Shadow(SHADOW_VALUE));
            }
            freed.push(head);
        }
        freed
    }
}

#[derive(Clone, Debug)]
enum Op {
    Cache(usize, Page),
    Hit(usize, Page),
    PinHold(usize, Page),
    Unpin(usize),
    Remove(usize, Page),
    Reclaim(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..FILES, 0u64..6).prop_map(|(f, p)| Op::Cache(f, p)),
        3 => (0..FILES, 0u64..6).prop_map(|(f, p)| Op::Hit(f, p)),
        1 => (0..FILES, 0u64..6).prop_map(|(f, p)| Op::PinHold(f, p)),
        1 => (0usize..4).prop_map(Op::Unpin),
        1 => (0..FILES, 0u64..6).prop_map(|(f, p)| Op::Remove(f, p)),
        2 => (1u32..4).prop_map(Op::Reclaim),
    ]
}

/// The model: after every operation the queue's frames (in order, with their pages), the
/// indexes' entries and the free frames are the model's, and `check` holds.
#[test]
fn add_touch_remove_reclaim_follow_the_model() {
    proptest!(ProptestConfig::with_cases(128), |(frames in 1u32..10, ops in proptest::collection::vec(op(), 1..120))| {
        let region = region_for(frames);
        let (slots, buddy, indexes) = parts(&region, frames);
        let queue = SharedQueue::new(&region, queue_at(frames), buddy.clone());
        format(&region, frames, &buddy, &queue, &indexes);
        let me = slots.attach(Flaw::None).unwrap();
        let reader = slots.attach(Flaw::None).unwrap();
        let run = &Unkillable;
        let mut model = Model::default();
        for op in ops {
            match op {
                Op::Cache(file, page) => {
                    let got = cache(&queue, &buddy, &indexes, me, file, page, &slots, run).unwrap();
                    prop_assert_eq!(got.is_some(), model.queue.len() < frames as usize);
                    if let Some(frame) = got {
                        let indexed = !matches!(model.entries[file].get(&page), Some(Entry::Folio { .. }));
                        if indexed {
                            model.entries[file].insert(page, Entry::Folio { frame: u64::from(frame.0), order: 0 });
                        }
                        model.queue.push((frame, file, page, indexed));
                    }
                }
                Op::Hit(file, page) | Op::PinHold(file, page) => {
                    let want = match model.entries[file].get(&page) {
                        Some(Entry::Folio { frame, .. }) => Some(Frame(*frame as u32)),
                        _ => None,
                    };
                    let want = want.filter(|f| !model.pinned.contains(f));
                    let got = if want.is_none() && matches!(model.entries[file].get(&page), Some(Entry::Folio { .. })) {
                        // Already pinned by this process (one pin per frame): a touch only.
                        if let Some(Entry::Folio { frame, .. }) = model.entries[file].get(&page) {
                            let frame = Frame(*frame as u32);
                            queue.touch(frame);
                            model.referenced.push(frame);
                        }
                        None
                    } else {
                        queue.pin_hit(&indexes[file], page, reader)
                    };
                    prop_assert_eq!(got.as_ref().map(|p| p.0), want);
                    if let Some(pinned) = got {
                        model.referenced.push(pinned.0);
                        if matches!(op, Op::PinHold(..)) {
                            model.pinned.push(pinned.0);
                        } else {
                            queue.unpin(pinned.0, reader);
                        }
                    }
                }
                Op::Unpin(n) => {
                    if !model.pinned.is_empty() {
                        let frame = model.pinned.remove(n % model.pinned.len());
                        queue.unpin(frame, reader);
                    }
                }
                Op::Remove(file, page) => {
                    let got = drop_page(&queue, &indexes, me, file, page, &slots, run).unwrap();
                    match model.entries[file].get(&page) {
                        Some(Entry::Folio { frame, .. }) => {
                            let frame = Frame(*frame as u32);
                            if model.pinned.contains(&frame) {
                                prop_assert_eq!(got, Some(Removed::Pinned));
                            } else {
                                prop_assert_eq!(got, Some(Removed::Freed));
                                model.entries[file].remove(&page);
                                model.queue.retain(|e| e.0 != frame);
                                model.referenced.retain(|f| *f != frame);
                            }
                        }
                        _ => prop_assert_eq!(got, None),
                    }
                }
                Op::Reclaim(want) => {
                    let freed = model.reclaim(want);
                    let got = queue.reclaim(want, super::queue::Shares::NONE, me, &indexes[..], &slots, run).unwrap();
                    prop_assert_eq!(got as usize, freed.len());
                }
            }
            let census = queue.check(&slots);
            prop_assert!(census.is_ok(), "{:?}", census);
            let queued: Vec<_> = census.unwrap().queued.into_iter().map(|(f, file, page)| (f, file.0 as usize, page)).collect();
            let want: Vec<_> = model.queue.iter().map(|(f, file, page, _)| (*f, *file, *page)).collect();
            prop_assert_eq!(queued, want);
            for (file, index) in indexes.iter().enumerate() {
                prop_assert!(index.check().is_ok());
                let entries: BTreeMap<_, _> = index.entries().into_iter().collect();
                prop_assert_eq!(&entries, &model.entries[file]);
            }
            let free = buddy.check(&slots).unwrap().free_frames;
            prop_assert_eq!(free as usize, frames as usize - model.queue.len());
        }
    });
}

/// A `Run` that returns `Died` at its `at`-th step, and notes take-overs.
struct DieAt {
    at: Option<u32>,
    count: Cell<u32>,
    took_over: Cell<u32>,
    flaw: Flaw,
}

impl DieAt {
    fn new(at: Option<u32>, flaw: Flaw) -> DieAt {
        DieAt {
            at,
            count: Cell::new(0),
            took_over: Cell::new(0),
            flaw,
        }
    }
}

impl Run for DieAt {
    fn at(&self, step: Step) -> Result<(), Died> {
        if step == Step::TookOver {
            self.took_over.set(self.took_over.get() + 1);
        }
        let n = self.count.get();
        self.count.set(n + 1);
        if Some(n) == self.at {
            return Err(Died);
        }
        Ok(())
    }

    fn wait(&self, holder: Holder) {
        panic!("one process's test waits for nobody, but {holder:?} holds a lock");
    }

    fn flaw(&self) -> Flaw {
        self.flaw
    }
}

const SCRIPT_FRAMES: u32 = 16;
/// Every page the script touches, by file.
const PAGES: [(usize, Page); 6] = [(0, 0), (0, 1), (0, 7), (1, 3), (1, 5), (1, 9)];

/// The dying process's work: caches three pages, touches one, reclaims two (one
/// referenced frame rotated, the other process's pinned frame too), caches a page
/// already cached (a conflict: queued, not indexed), removes a page, caches another,
/// reclaims one (the unindexed frame).
fn script<R: Run>(
    queue: &SharedQueue<'_>,
    buddy: &SharedBuddy<'_>,
    indexes: &[SharedIndex<'_>],
    me: Holder,
    slots: &SlotTable<'_>,
    run: &R,
) -> Result<(), Died> {
    cache(queue, buddy, indexes, me, 0, 0, slots, run)?.expect("free");
    let b = cache(queue, buddy, indexes, me, 0, 1, slots, run)?.expect("free");
    cache(queue, buddy, indexes, me, 1, 5, slots, run)?.expect("free");
    queue.touch(b);
    assert_eq!(
        queue.reclaim(2, super::queue::Shares::NONE, me, indexes, slots, run)?,
        2
    );
    cache(queue, buddy, indexes, me, 0, 1, slots, run)?.expect("free");
    assert_eq!(
        drop_page(queue, indexes, me, 0, 1, slots, run)?,
        Some(Removed::Freed)
    );
    cache(queue, buddy, indexes, me, 0, 7, slots, run)?.expect("free");
    assert_eq!(
        queue.reclaim(1, super::queue::Shares::NONE, me, indexes, slots, run)?,
        1
    );
    Ok(())
}

/// Who works first after a death.
#[derive(Clone, Copy, PartialEq, Debug)]
enum First {
    /// Another process (taking the dead one's locks over), then the steward's sweep.
    Other,
    /// The steward's sweep, then another process.
    Steward,
}

/// No index names a frame that is not CACHED: what a lock-free reader relies on, at any
/// instant (here: right after a death, before anyone takes over).
fn no_index_names_an_uncached_frame(
    buddy: &SharedBuddy<'_>,
    indexes: &[SharedIndex<'_>],
) -> Result<(), String> {
    for (file, page) in PAGES {
        if let Entry::Folio { frame, .. } = indexes[file].lookup(page) {
            if !buddy.is_cached(Frame(frame as u32), Order(0)) {
                return Err(format!(
                    "file {file} page {page} names frame {frame}, not CACHED"
                ));
            }
        }
    }
    Ok(())
}

/// In one process: the dying process P stops at each step of `script` in turn, while a
/// live process Q holds a page of its own pinned; right then no index may name a frame
/// that is not CACHED. Then another process R caches a page and reclaims one (taking
/// P's locks over), and the steward sweeps P (the queue, P's pins, the allocator), or
/// the steward first. Then: `check` holds; every index entry's frame is queued; and once
/// Q unpins, a reclaim of everything frees every frame (none leaked) and leaves the
/// indexes only shadows.
fn in_one_process(flaw: Flaw) -> Result<(u32, u32), String> {
    let mut took_over = 0;
    let mut steps = 0;
    for first in [First::Other, First::Steward] {
        for at in 0.. {
            let region = region_for(SCRIPT_FRAMES);
            let (slots, buddy, indexes) = parts(&region, SCRIPT_FRAMES);
            let queue = SharedQueue::new(&region, queue_at(SCRIPT_FRAMES), buddy.clone());
            format(&region, SCRIPT_FRAMES, &buddy, &queue, &indexes);
            let steward = slots.attach(Flaw::None).unwrap();
            let q = slots.attach(Flaw::None).unwrap();
            let run = &Unkillable;
            cache(&queue, &buddy, &indexes, q, 1, 3, &slots, run)
                .unwrap()
                .unwrap();
            let q_pin = queue.pin_hit(&indexes[1], 3, q).expect("Q's hit");
            let p = slots.attach(Flaw::None).unwrap();
            let dying = DieAt::new(Some(at), flaw);
            if script(&queue, &buddy, &indexes, p, &slots, &dying).is_ok() {
                break;
            }
            steps += 1;
            no_index_names_an_uncached_frame(&buddy, &indexes)
                .map_err(|e| format!("{first:?}, step {at}, at the death: {e}"))?;
            assert!(slots.mark_dead(p));
            let r = slots.attach(Flaw::None).unwrap();
            let living = DieAt::new(None, flaw);
            let other = || -> Result<(), Died> {
                cache(&queue, &buddy, &indexes, r, 1, 9, &slots, &living)?;
                queue.reclaim(
                    1,
                    super::queue::Shares::NONE,
                    r,
                    &indexes[..],
                    &slots,
                    &living,
                )?;
                Ok(())
            };
            if first == First::Steward {
                queue
                    .sweep(p, steward, &indexes[..], &slots, &living)
                    .unwrap();
                other().unwrap();
            } else {
                other().unwrap();
                queue
                    .sweep(p, steward, &indexes[..], &slots, &living)
                    .unwrap();
            }
            took_over += living.took_over.get();
            slots.free_dead(p);
            slots.detach(r);
            let fail = |e: String| format!("{first:?}, step {at}: {e}");
            no_index_names_an_uncached_frame(&buddy, &indexes).map_err(fail)?;
            let census = queue.check(&slots).map_err(fail)?;
            for (file, index) in indexes.iter().enumerate() {
                index
                    .check()
                    .map_err(|e| fail(format!("file {file}: {e}")))?;
                for (page, entry) in index.entries() {
                    if let Entry::Folio { frame, .. } = entry {
                        if !census
                            .queued
                            .iter()
                            .any(|(f, _, _)| u64::from(f.0) == frame)
                        {
                            return Err(fail(format!(
                                "file {file} page {page}: frame {frame} not queued"
                            )));
                        }
                    }
                }
            }
            queue.unpin(q_pin.0, q);
            let all = queue.count();
            let freed = queue
                .reclaim(
                    SCRIPT_FRAMES,
                    super::queue::Shares::NONE,
                    steward,
                    &indexes[..],
                    &slots,
                    run,
                )
                .unwrap();
            if freed != all {
                return Err(fail(format!("reclaimed {freed} of {all}")));
            }
            queue.check(&slots).map_err(fail)?;
            let free = buddy.check(&slots).map_err(fail)?.free_frames;
            if free != SCRIPT_FRAMES {
                return Err(fail(format!(
                    "{free} of {SCRIPT_FRAMES} frames free: leaked"
                )));
            }
            for index in &indexes {
                index.check().map_err(fail)?;
                if let Some((page, entry)) = index
                    .entries()
                    .into_iter()
                    .find(|(_, e)| !matches!(e, Entry::Shadow(_)))
                {
                    return Err(fail(format!("page {page} still holds {entry:?}")));
                }
            }
        }
    }
    Ok((steps, took_over))
}

#[test]
fn a_death_at_every_step_leaves_every_frame_in_one_place() {
    let (steps, took_over) = in_one_process(Flaw::None).unwrap();
    eprintln!("{steps} deaths, {took_over} take-overs");
    assert!(
        steps > 200 && took_over > 100,
        "{steps} deaths, {took_over} take-overs"
    );
}

/// Runs `in_one_process` with `flaw`, which must fail (on the library's assertions or
/// the test's checks).
fn must_fail(flaw: Flaw) {
    let failed = std::panic::catch_unwind(|| in_one_process(flaw));
    match failed {
        Ok(Ok(_)) => panic!("the flawed protocol {flaw:?} passed"),
        Ok(Err(e)) => eprintln!("{flaw:?} caught: {e}"),
        Err(_) => eprintln!("{flaw:?} caught by an assertion"),
    }
}

#[test]
fn a_death_at_every_step_broken_hand_over_outside_intent() {
    must_fail(Flaw::HandOverOutsideIntent);
}

#[test]
fn a_death_at_every_step_broken_free_before_index_removal() {
    must_fail(Flaw::FreeBeforeIndexRemoval);
}

#[test]
fn a_death_at_every_step_broken_intent_after_mutation() {
    must_fail(Flaw::IntentAfterMutation);
}

/// The costs docs/sharing.md quotes, beside today's (`refcount.rs`'s `touch`, `try_get`
/// and `put` on a cached folio's state word). One process, so no line moves between
/// processes. Run by hand:
/// `cargo test --release -p folio --lib shared::tests_reclaim::costs_beside_todays_queue
/// -- --ignored --nocapture`.
#[test]
#[ignore]
fn costs_beside_todays_queue() {
    use crate::arena::{Arena, ArenaPages, FolioUse};
    use crate::types::Order as ArenaOrder;
    use std::hint::black_box;
    use std::time::Instant;
    const N: u32 = 4_000_000;
    const BATCH: u32 = 32;
    const ROUNDS: u32 = 20_000;
    let frames = 64;
    let region = region_for(frames);
    let (slots, buddy, indexes) = parts(&region, frames);
    let queue = SharedQueue::new(&region, queue_at(frames), buddy.clone());
    format(&region, frames, &buddy, &queue, &indexes);
    let me = slots.attach(Flaw::None).unwrap();
    let run = &Unkillable;
    let per = |started: Instant, n: u32| started.elapsed().as_nanos() as f64 / f64::from(n);

    let frame = cache(&queue, &buddy, &indexes, me, 0, 0, &slots, run)
        .unwrap()
        .unwrap();
    let started = Instant::now();
    for _ in 0..N {
        queue.touch(black_box(frame));
    }
    let touch = per(started, N);
    let started = Instant::now();
    for _ in 0..N {
        queue.pin(black_box(frame), me).unwrap();
        queue.unpin(frame, me);
    }
    let pin = per(started, N);
    let started = Instant::now();
    for _ in 0..N {
        let pinned = queue.pin_hit(&indexes[0], black_box(0), me).unwrap();
        queue.unpin(pinned.0, me);
    }
    let hit = per(started, N);
    assert_eq!(
        queue.reclaim(1, super::queue::Shares::NONE, me, &indexes[..], &slots, run),
        Ok(1)
    );

    let (mut caching, mut reclaiming) = (0.0, 0.0);
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for page in 0..u64::from(BATCH) {
            cache(&queue, &buddy, &indexes, me, 0, page, &slots, run)
                .unwrap()
                .unwrap();
        }
        caching += per(started, BATCH);
        let started = Instant::now();
        assert_eq!(
            queue.reclaim(
                BATCH,
                super::queue::Shares::NONE,
                me,
                &indexes[..],
                &slots,
                run
            ),
            Ok(BATCH)
        );
        reclaiming += per(started, 1);
    }
    let (caching, reclaiming) = (caching / f64::from(ROUNDS), reclaiming / f64::from(ROUNDS));

    let arena = Arena::new(64, ArenaPages::Small).unwrap();
    let f = arena.alloc(ArenaOrder::new(0), FolioUse::Request).unwrap();
    let state = &arena.meta(f).state;
    state.finish_read_ok();
    let started = Instant::now();
    for _ in 0..N {
        black_box(state).touch();
    }
    let today_touch = per(started, N);
    let started = Instant::now();
    for _ in 0..N {
        let _ = black_box(state).try_get();
        let _ = state.put();
    }
    let today_pin = per(started, N);
    eprintln!(
        "touch {touch:.1} ns (today {today_touch:.1}); pin + unpin {pin:.1} ns (today's \
         try_get + put {today_pin:.1}); pin_hit (two look-ups, pin, touch) + unpin {hit:.1} ns; \
         one page cached (alloc, hand-over, insert, unpin) {caching:.0} ns; reclaim of {BATCH} \
         frames {reclaiming:.0} ns ({:.0} ns a frame)",
        reclaiming / f64::from(BATCH)
    );
}

/// A writer's install (queue.rs, "Writes"), killed at each of its steps in turn, or not
/// at all: page 0 of file 0 (cached by another process, an old frame) is replaced by the
/// writer's new frame, and page 2 (absent) gets one. Right at the death, and after another
/// process caches and reclaims (taking the dead writer's locks over) and the steward
/// sweeps it (its marks cleared), or the steward first: page 0 names the old frame or the
/// new one (never nothing, never a frame not CACHED), page 2 its new frame or nothing; an
/// install that returned left the new frames there; the queue and the indexes check, and
/// a reclaim of everything frees every frame (the replaced frame and the dead writer's
/// marked frames included: nothing leaked). Returns the deaths.
fn install_killed_at_every_step(flaw: Flaw) -> Result<u32, String> {
    use super::queue::{held_mark, Installed};
    let mut steps = 0;
    for first in [First::Other, First::Steward] {
        for at in 0.. {
            let region = region_for(SCRIPT_FRAMES);
            let (slots, buddy, indexes) = parts(&region, SCRIPT_FRAMES);
            let queue = SharedQueue::new(&region, queue_at(SCRIPT_FRAMES), buddy.clone());
            format(&region, SCRIPT_FRAMES, &buddy, &queue, &indexes);
            let steward = slots.attach(Flaw::None).unwrap();
            let q = slots.attach(Flaw::None).unwrap();
            let run = &Unkillable;
            let old = cache(&queue, &buddy, &indexes, q, 0, 0, &slots, run)
                .unwrap()
                .unwrap();
            let w = slots.attach(Flaw::None).unwrap();
            let dying = DieAt::new(Some(at), flaw);
            let mut new = Vec::new();
            let script = |new: &mut Vec<Frame>| -> Result<(), Died> {
                for (page, seq) in [(0, 1), (2, 2)] {
                    let frame = buddy.alloc(Order(0), w, &slots, &dying)?.expect("free");
                    new.push(frame);
                    let mark = held_mark(w, seq);
                    let installed = queue.install(
                        frame,
                        FileNo(0),
                        page,
                        mark,
                        &indexes[0],
                        w,
                        &indexes[..],
                        &slots,
                        &dying,
                    )?;
                    assert_ne!(
                        installed,
                        Installed::Full,
                        "the test's pools are large enough"
                    );
                }
                Ok(())
            };
            let done = script(&mut new).is_ok();
            let fail = |e: String| format!("{first:?}, step {at}: {e}");
            let pages_right = |done: bool| -> Result<(), String> {
                let names = |page: Page, frame: Option<&Frame>| {
                    frame.is_some_and(|f| {
                        indexes[0].lookup(page)
                            == Entry::Folio {
                                frame: u64::from(f.0),
                                order: 0,
                            }
                    })
                };
                if !(names(0, Some(&old)) && !done || names(0, new.first())) {
                    return Err(format!("page 0 holds {:?}", indexes[0].lookup(0)));
                }
                if done && !names(2, new.get(1)) {
                    return Err(format!("page 2 holds {:?}", indexes[0].lookup(2)));
                }
                no_index_names_an_uncached_frame(&buddy, &indexes)
            };
            pages_right(done).map_err(fail)?;
            if done {
                break;
            }
            let new_put = new.first().is_some_and(|f| {
                indexes[0].lookup(0)
                    == Entry::Folio {
                        frame: u64::from(f.0),
                        order: 0,
                    }
            });
            steps += 1;
            assert!(slots.mark_dead(w));
            let r = slots.attach(Flaw::None).unwrap();
            let living = DieAt::new(None, flaw);
            let other = || -> Result<(), Died> {
                cache(&queue, &buddy, &indexes, r, 1, 9, &slots, &living)?;
                queue.reclaim(
                    1,
                    super::queue::Shares::NONE,
                    r,
                    &indexes[..],
                    &slots,
                    &living,
                )?;
                Ok(())
            };
            if first == First::Steward {
                queue
                    .sweep(w, steward, &indexes[..], &slots, &living)
                    .unwrap();
                // The steward's end of the sweep (no keeper: at once).
                queue.release_marks(w);
                other().unwrap();
            } else {
                other().unwrap();
                queue
                    .sweep(w, steward, &indexes[..], &slots, &living)
                    .unwrap();
                // The steward's end of the sweep (no keeper: at once).
                queue.release_marks(w);
            }
            slots.free_dead(w);
            slots.detach(r);
            // Once the dead writer's marks are cleared its frames are reclaimable like any
            // (the other process's reclaim may take the page); a page the dead writer put
            // stays its new frame while marked (the other process first).
            let g = new.first().map(|f| Entry::Folio {
                frame: u64::from(f.0),
                order: 0,
            });
            if new_put && first == First::Other && Some(indexes[0].lookup(0)) != g {
                return Err(fail(format!(
                    "a marked page reclaimed: page 0 holds {:?}",
                    indexes[0].lookup(0)
                )));
            }
            no_index_names_an_uncached_frame(&buddy, &indexes).map_err(fail)?;
            queue.check(&slots).map_err(fail)?;
            for index in &indexes {
                index.check().map_err(fail)?;
            }
            let all = queue.count();
            let freed = queue
                .reclaim(
                    SCRIPT_FRAMES,
                    super::queue::Shares::NONE,
                    steward,
                    &indexes[..],
                    &slots,
                    run,
                )
                .unwrap();
            if freed != all {
                return Err(fail(format!("reclaimed {freed} of {all} (a mark left?)")));
            }
            let free = buddy.check(&slots).map_err(fail)?.free_frames;
            if free != SCRIPT_FRAMES {
                return Err(fail(format!(
                    "{free} of {SCRIPT_FRAMES} frames free: leaked"
                )));
            }
        }
    }
    Ok(steps)
}

#[test]
fn a_writers_install_killed_at_every_step_leaves_the_old_page_or_the_new() {
    let steps = install_killed_at_every_step(Flaw::None).unwrap();
    eprintln!("{steps} deaths");
    assert!(steps > 40, "{steps} deaths");
}

#[test]
fn a_writers_install_killed_at_every_step_broken_old_freed_before_swap() {
    match std::panic::catch_unwind(|| install_killed_at_every_step(Flaw::OldFreedBeforeSwap)) {
        Ok(Ok(steps)) => panic!("the flawed install passed ({steps} deaths)"),
        Ok(Err(e)) => eprintln!("caught: {e}"),
        Err(_) => eprintln!("caught by an assertion"),
    }
}
