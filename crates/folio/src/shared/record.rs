//! The slot records: which process holds each LIVE slot, so that a new steward finds the
//! live processes again after the old one died (steward.rs, step 3), and the two
//! protocols that use them: the steward's admission of an attach (`admit`) and a new
//! steward's census of the slots (`find`).
//!
//! ```text
//!   one line (8 words) per slot:  generation · pid · start time · keeper pid ·
//!                                 keeper start time · owned · weight · (1 unused)
//! ```
//!
//! **The keeper** (docs/sharing.md "Writes seen across processes", "Death"): a process
//! whose cache is persistent names its keeper in its own record once it has one (K1 the
//! keeper's start time, K2 its pid, a release store), before its first write can put a
//! page into the domain; R2 clears it for the slot's next process (the pid 0 before the
//! generation). The steward reads it (`keeper`, the pid by an acquire load, then the start
//! time) once the process died: a death between K1 and K2 leaves no keeper named, and
//! nothing of the process's is HELD yet.
//!
//! # Protocol
//!
//! Admission (the steward, for a process `id` that asked to attach):
//!   R1. Slot CAS FREE(g-1) -> LIVE(g) (`SlotTable::attach`).
//!   R2. The record: pid, then start time, then the generation g (release): a record
//!       whose generation is the slot's is complete.
//!   R3. The answer (the process learns its slot only now, and only now uses it).
//!
//! Census (a new steward, elected after the old one's death, so it sees every store the
//! old one made): a LIVE(g) slot whose record is complete for g names its process; if that
//! process is alive (the caller's `watch`: pid and start time, steward.rs) it is watched,
//! else the slot is marked dead. A LIVE(g) slot whose record is not complete is marked
//! dead too: the old steward died in R1-R2, before R3, so no process uses it. DEAD slots
//! (the old steward died in a sweep) are returned to sweep.
//!
//! Why R3 comes last: a process answered before its record is complete (the model's
//! `Flaw::AnswerBeforeRecord`) works in its slot; the old steward dies before R2 ends;
//! the census finds the record incomplete and marks a live process's slot dead, and its
//! leases are swept while it uses them (`tests/loom_shared.rs`,
//! `admission_broken_answer_before_record` catches it). A death between R2 and R3 leaves
//! a complete record of a process that never got its answer: it is watched as live (its
//! slot holds nothing: the process attaches again, to another slot) and freed at its
//! death: a slot lost for a process's life, never a wrong one.
//!
//! **owned** (word 5) is not the record's: the eviction queue keeps there how many queued
//! frames the slot's member owns (queue.rs, "Owners and shares"), under the queue's lock.
//! **weight** (word 6): the member's share weight, from its attach request (R2, with the
//! pid: `Weight`); 0 for the steward's own slot, which owns no frame and has no share.
//!
//! Protection: the records by the election (one steward writes them at a time); owned by
//! the queue's lock; the slot words by their CAS. Limits: a record names one process; pids up to 2^32.

use super::slot::{SlotState, SlotTable};
use super::{Died, Flaw, Holder, ProcessId, Run, SlotIndex, Step, Word};
use crate::primitive::{AtomicU64, Ordering};

/// The words of one record.
const LINE: u32 = 8;
const GENERATION: u32 = 0;
const PID: u32 = 1;
const START: u32 = 2;
const KEEPER_PID: u32 = 3;
const KEEPER_START: u32 = 4;
const OWNED: u32 = 5;
const WEIGHT: u32 = 6;

/// A member's weight in the division of the domain's quota into shares (queue.rs, "Owners
/// and shares"): its share is the quota times its weight over the weights of every member
/// attached. `DEFAULT` for every member that does not ask for another: equal shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Weight(u32);

impl Weight {
    /// Every member's unless it asks otherwise.
    pub(crate) const DEFAULT: Weight = Weight(100);
    /// The least and the most a member may ask for (a share 10,000 times another's).
    pub(crate) const MIN: u32 = 1;
    pub(crate) const MAX: u32 = 10_000;

    /// `weight`, if it is within `MIN..=MAX`.
    pub(crate) fn new(weight: u32) -> Option<Weight> {
        (Self::MIN..=Self::MAX)
            .contains(&weight)
            .then_some(Weight(weight))
    }

    pub(crate) const fn get(self) -> u32 {
        self.0
    }
}

/// The records of `slots` slots at `base` of a region.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Records<'r> {
    region: &'r [AtomicU64],
    base: Word,
    slots: u16,
}

impl<'r> Records<'r> {
    /// The words the records of `slots` slots take.
    pub(crate) fn words(slots: u16) -> u32 {
        u32::from(slots) * LINE
    }

    /// A view of the records at `base` (8-word aligned; zeroed: no record complete, since
    /// every LIVE slot's generation is at least 1).
    pub(crate) fn new(region: &'r [AtomicU64], base: Word, slots: u16) -> Records<'r> {
        assert_eq!(base.0 % LINE, 0, "records start a cache line");
        assert!(
            base.index() + Self::words(slots) as usize <= region.len(),
            "the records lie past the region"
        );
        Records {
            region,
            base,
            slots,
        }
    }

    fn word(&self, slot: SlotIndex, word: u32) -> &AtomicU64 {
        assert!(slot.0 < self.slots, "no slot {}", slot.0);
        &self.region[self.base.at(u32::from(slot.0) * LINE + word).index()]
    }

    /// The word counting the queued frames `slot`'s member owns (queue.rs, "Owners and
    /// shares").
    ///
    /// Context: changed only under the eviction queue's lock; read by anyone as a hint.
    pub(crate) fn owned(&self, slot: SlotIndex) -> &'r AtomicU64 {
        assert!(slot.0 < self.slots, "no slot {}", slot.0);
        &self.region[self.base.at(u32::from(slot.0) * LINE + OWNED).index()]
    }

    /// The weight `slot`'s member attached with (0: the steward's slot, a FREE one's, or a
    /// record being written).
    ///
    /// Context: any process; a hint without the queue's lock (a slot's record changes only
    /// at its admission).
    pub(crate) fn weight(&self, slot: SlotIndex) -> u32 {
        self.word(slot, WEIGHT).load(Ordering::Relaxed) as u32
    }

    /// How many slots the records have.
    pub(crate) fn slot_count(&self) -> u16 {
        self.slots
    }

    /// R2: `holder`'s record names `id`, attached with `weight` (`None`: the steward's
    /// own slot, which has no share).
    ///
    /// Context: the steward, after R1 gave `id` the slot.
    pub(crate) fn write<R: Run>(
        &self,
        holder: Holder,
        id: ProcessId,
        weight: Option<Weight>,
        run: &R,
    ) -> Result<(), Died> {
        // The slot's last process's keeper is not this one's (module docs, "The keeper").
        self.word(holder.slot, KEEPER_PID)
            .store(0, Ordering::Relaxed);
        self.word(holder.slot, WEIGHT)
            .store(weight.map_or(0, |w| u64::from(w.get())), Ordering::Relaxed);
        self.word(holder.slot, PID)
            .store(u64::from(id.pid), Ordering::Relaxed);
        run.at(Step::Recorded)?;
        self.word(holder.slot, START)
            .store(id.start, Ordering::Relaxed);
        run.at(Step::Recorded)?;
        self.word(holder.slot, GENERATION)
            .store(u64::from(holder.generation), Ordering::Release);
        run.at(Step::Recorded)
    }

    /// The process `holder`'s record names, if it is complete for `holder`'s generation.
    ///
    /// Context: a steward (or a test on a quiet domain).
    pub(crate) fn read(&self, holder: Holder) -> Option<ProcessId> {
        let generation = self.word(holder.slot, GENERATION).load(Ordering::Acquire);
        if generation != u64::from(holder.generation) {
            return None;
        }
        let pid = self.word(holder.slot, PID).load(Ordering::Relaxed);
        let start = self.word(holder.slot, START).load(Ordering::Relaxed);
        Some(ProcessId {
            pid: u32::try_from(pid).ok()?,
            start,
        })
    }
}

impl Records<'_> {
    /// K1-K2 (module docs, "The keeper"): `holder`'s record names `keeper` as the process
    /// that writes back what `holder`'s process leaves dirty at its death.
    ///
    /// Context: `holder`'s own process, LIVE in its slot, before its first install.
    pub(crate) fn set_keeper(&self, holder: Holder, keeper: ProcessId) {
        self.word(holder.slot, KEEPER_START)
            .store(keeper.start, Ordering::Relaxed);
        self.word(holder.slot, KEEPER_PID)
            .store(u64::from(keeper.pid), Ordering::Release);
    }

    /// The keeper `holder`'s record names, if its process named one (`set_keeper`).
    ///
    /// Context: the steward, after `holder` died (its stores seen: the kernel's report),
    /// before its slot is freed.
    pub(crate) fn keeper(&self, holder: Holder) -> Option<ProcessId> {
        let pid = self.word(holder.slot, KEEPER_PID).load(Ordering::Acquire);
        let pid = u32::try_from(pid).ok().filter(|&pid| pid != 0)?;
        let start = self.word(holder.slot, KEEPER_START).load(Ordering::Relaxed);
        Some(ProcessId { pid, start })
    }
}

/// R1-R3 for the process `id`, attached with `weight` (`None`: the steward itself): its
/// slot, or `None` when every slot is taken. `answer` tells the process its slot (R3;
/// under `Flaw::AnswerBeforeRecord`, before R2).
///
/// Context: the steward (the only one writing records).
pub(crate) fn admit<R: Run>(
    slots: &SlotTable<'_>,
    records: &Records<'_>,
    id: ProcessId,
    weight: Option<Weight>,
    run: &R,
    answer: impl FnOnce(Holder),
) -> Result<Option<Holder>, Died> {
    let Some(holder) = slots.attach(run.flaw()) else {
        return Ok(None);
    };
    run.at(Step::Attached)?;
    let answer_first = is_answer_first(run.flaw());
    let mut answer = Some(answer);
    if answer_first {
        (answer.take().expect("answered once"))(holder);
    }
    records.write(holder, id, weight, run)?;
    if let Some(answer) = answer {
        answer(holder);
    }
    Ok(Some(holder))
}

/// The census (module docs): calls `watch` for each LIVE slot with a complete record
/// (it returns whether that process is alive, and then watches it); marks dead every
/// other LIVE slot. Returns the slots to sweep: those it marked dead and those it found
/// DEAD.
///
/// Context: a new steward, before it admits anyone.
pub(crate) fn find(
    slots: &SlotTable<'_>,
    records: &Records<'_>,
    mut watch: impl FnMut(Holder, ProcessId) -> bool,
) -> Vec<Holder> {
    let mut dead = Vec::new();
    for index in 0..slots.slot_count() {
        let (state, holder) = slots.state(SlotIndex(index));
        match state {
            SlotState::Free => {}
            SlotState::Dead => dead.push(holder),
            SlotState::Live => {
                let alive = records.read(holder).is_some_and(|id| watch(holder, id));
                // A slot detached meanwhile (LIVE -> FREE by its process) fails the CAS.
                if !alive && slots.mark_dead(holder) {
                    dead.push(holder);
                }
            }
        }
    }
    dead
}

/// Whether `flaw` answers before the record.
fn is_answer_first(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::AnswerBeforeRecord => true,
        _ => false,
    }
}
