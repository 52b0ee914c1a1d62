//! The process slots: one word per process that may attach to a shared cache, saying who
//! holds it (its generation) and whether that process is alive.
//!
//! ```text
//!  63                                   2  1 0
//! +--------------------------------------+----+
//! |            generation                |state|   state: FREE 0, LIVE 1, DEAD 2
//! +--------------------------------------+----+
//! ```
//!
//! A slot's life, each arrow one CAS of the whole word:
//!
//! ```text
//!   FREE(g) ──attach──> LIVE(g+1) ──detach (a clean exit: it holds nothing)──> FREE(g+1)
//!                           │
//!                           └──mark_dead (the steward, having seen the death)──> DEAD(g+1)
//!                                ──free_dead (the steward, after its sweep)──> FREE(g+1)
//! ```
//!
//! `is_live(holder)` is one acquire load: the slot is LIVE *with the holder's generation*.
//! A holder whose slot is DEAD, FREE or LIVE with another generation is dead, and what it
//! holds may be taken over (`lock.rs`). A slot is freed only after the steward swept what
//! its dead process held, so a dead generation's locks and leases are never confused with
//! its successor's; the generation covers the other race, a waiter that read the lock
//! word before the sweep and acts after the next attach (the ABA that the model
//! `taken_over_twice_broken_no_generation` catches).
//!
//! Protection: each word by CAS; the steward alone marks a slot dead and frees it.
//! Limits: up to 2^16 slots; a slot's generation wraps after 2^32 attaches (asserted).

use super::{Flaw, Holder, SlotIndex, Word};
use crate::primitive::{AtomicU64, Ordering};

const FREE: u64 = 0;
const LIVE: u64 = 1;
const DEAD: u64 = 2;
const STATE_MASK: u64 = 3;

fn pack(generation: u32, state: u64) -> u64 {
    (u64::from(generation) << 2) | state
}

/// A slot's state, as `SlotTable::state` reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotState {
    Free,
    Live,
    Dead,
}

/// The slot table, a view of `slots` words of a region from `base`.
#[derive(Debug)]
pub(crate) struct SlotTable<'r> {
    region: &'r [AtomicU64],
    base: Word,
    slots: u16,
}

impl<'r> SlotTable<'r> {
    /// The words the table takes.
    pub(crate) fn words(slots: u16) -> u32 {
        u32::from(slots)
    }

    /// A view of the table at `base` (formatted by whoever made the region: zeroed words
    /// are free slots of generation 0).
    pub(crate) fn new(region: &'r [AtomicU64], base: Word, slots: u16) -> SlotTable<'r> {
        assert!(
            base.index() + usize::from(slots) <= region.len(),
            "the slot table lies past the region"
        );
        SlotTable {
            region,
            base,
            slots,
        }
    }

    fn word(&self, slot: SlotIndex) -> &AtomicU64 {
        assert!(slot.0 < self.slots, "no slot {}", slot.0);
        &self.region[self.base.index() + usize::from(slot.0)]
    }

    /// Takes the first free slot, with a new generation (the same one under
    /// `Flaw::NoGeneration`). `None` when every slot is taken.
    ///
    /// Context: any process; lock-free.
    pub(crate) fn attach(&self, flaw: Flaw) -> Option<Holder> {
        for index in 0..self.slots {
            let slot = SlotIndex(index);
            let word = self.word(slot);
            let mut current = word.load(Ordering::Acquire);
            while current & STATE_MASK == FREE {
                let old = (current >> 2) as u32;
                let generation = match flaw {
                    #[cfg(test)]
                    Flaw::NoGeneration => old.max(1),
                    _ => old.checked_add(1).expect("a slot's generations wrapped"),
                };
                match word.compare_exchange(
                    current,
                    pack(generation, LIVE),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Some(Holder { slot, generation }),
                    Err(seen) => current = seen,
                }
            }
        }
        None
    }

    /// A clean exit: `me` holds no lock and no lease any more.
    ///
    /// Context: the process `me` itself.
    pub(crate) fn detach(&self, me: Holder) {
        let freed = self.word(me.slot).compare_exchange(
            pack(me.generation, LIVE),
            pack(me.generation, FREE),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        assert!(
            freed.is_ok(),
            "detach of a slot not live with this generation: {me:?}"
        );
    }

    /// The steward saw `holder`'s process die: from now on its locks may be taken over.
    /// Returns false if the slot had already left that generation's life.
    ///
    /// Context: the steward, after the kernel reported the death (the release store here
    /// makes every store of the dead process visible to whoever sees the slot dead).
    pub(crate) fn mark_dead(&self, holder: Holder) -> bool {
        self.word(holder.slot)
            .compare_exchange(
                pack(holder.generation, LIVE),
                pack(holder.generation, DEAD),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// The steward has swept what the dead `holder` held: the slot is free for the next
    /// attach.
    ///
    /// Context: the steward, after `mark_dead(holder)` and the sweeps.
    pub(crate) fn free_dead(&self, holder: Holder) {
        let freed = self.word(holder.slot).compare_exchange(
            pack(holder.generation, DEAD),
            pack(holder.generation, FREE),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        assert!(
            freed.is_ok(),
            "free of a slot not dead with this generation: {holder:?}"
        );
    }

    /// How many slots the table has.
    pub(crate) fn slot_count(&self) -> u16 {
        self.slots
    }

    /// Slot `slot` as it is now: its state and the holder of its current generation
    /// (the steward's view when it looks for live and dead processes).
    ///
    /// Context: any process; one acquire load.
    pub(crate) fn state(&self, slot: SlotIndex) -> (SlotState, Holder) {
        let word = self.word(slot).load(Ordering::Acquire);
        let state = match word & STATE_MASK {
            FREE => SlotState::Free,
            LIVE => SlotState::Live,
            DEAD => SlotState::Dead,
            _ => panic!("slot {} has no state: {word:#x}", slot.0),
        };
        let holder = Holder {
            slot,
            generation: (word >> 2) as u32,
        };
        (state, holder)
    }

    /// Whether `holder`'s process is alive: its slot is LIVE with its generation.
    ///
    /// Context: any process; one acquire load.
    pub(crate) fn is_live(&self, holder: Holder) -> bool {
        self.word(holder.slot).load(Ordering::Acquire) == pack(holder.generation, LIVE)
    }
}
