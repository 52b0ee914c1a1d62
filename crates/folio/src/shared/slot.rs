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
//! **Park words** (issue 45 step 3, lock.rs "Waiting"): after the `slots` slot words come
//! `slots` park words, one per slot: the waiters for any lock held by that slot's process
//! sleep on it (its low half is a futex word: futex.rs). It holds a sequence that only
//! grows (wrapping), bumped by the slot's process when it unlocks a lock with waiters and
//! by `mark_dead` when it dies; each bump is followed by a wake of every waiter on it.
//! Waiters are keyed by their holder, not their lock, so that the steward, which does not
//! know which locks a dead process held, wakes exactly their waiters (they find the holder
//! dead and take its locks over at once, not after a timeout). Waiters of two locks held
//! by one process share a word: a wake of one lock's waiters wakes the other's too, which
//! look again and sleep again.
//!
//! Protection: each word by CAS; the steward alone marks a slot dead and frees it. A park
//! word by its bumps (atomic adds). Limits: up to 2^16 slots; a slot's generation wraps
//! after 2^32 attaches (asserted); a sequence wraps after 2^32 bumps (a waiter that slept
//! through exactly 2^32 of them would miss one wake, until its park's timeout).

use super::futex;
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
    /// The words the table takes: a slot word and a park word per slot.
    pub(crate) const fn words(slots: u16) -> u32 {
        2 * slots as u32
    }

    /// A view of the table at `base` (formatted by whoever made the region: zeroed words
    /// are free slots of generation 0).
    pub(crate) fn new(region: &'r [AtomicU64], base: Word, slots: u16) -> SlotTable<'r> {
        assert!(
            base.index() + Self::words(slots) as usize <= region.len(),
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

    /// The steward saw `holder`'s process die: from now on its locks may be taken over,
    /// and every waiter parked on one of them is woken to do so (module docs, park
    /// words). Returns false if the slot had already left that generation's life.
    ///
    /// Context: the steward, after the kernel reported the death (the release store here
    /// makes every store of the dead process visible to whoever sees the slot dead).
    /// Makes one system call (the wake).
    pub(crate) fn mark_dead(&self, holder: Holder) -> bool {
        let marked = self.mark_dead_without_wake(holder);
        if marked {
            // After the mark: a waiter that read the sequence before this bump and looked
            // at the slot after the mark does not sleep; one that looked before it sleeps
            // on the old sequence and is woken here (lock.rs, P2-P4).
            wake(self.park_word(holder.slot));
        }
        marked
    }

    /// `mark_dead` without its wake: a steward that forgets to wake (the models' broken
    /// variant, which must leave a waiter asleep for ever).
    pub(crate) fn mark_dead_without_wake(&self, holder: Holder) -> bool {
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

    /// The park word of `slot` (module docs): where the waiters for the locks its process
    /// holds sleep.
    pub(crate) fn park_word(&self, slot: SlotIndex) -> &'r AtomicU64 {
        &self.region[self.park_index(slot).index()]
    }

    /// The park word's place in the region.
    pub(crate) fn park_index(&self, slot: SlotIndex) -> Word {
        assert!(slot.0 < self.slots, "no slot {}", slot.0);
        self.base.at(u32::from(self.slots) + u32::from(slot.0))
    }

    /// Whether this table's words lie in `region` (a lock's: the holder's park word is
    /// named by its index there).
    pub(crate) fn is_in(&self, region: &[AtomicU64]) -> bool {
        std::ptr::eq(self.region, region)
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

/// Bumps the sequence of the park word `park` and wakes every waiter sleeping on it (the
/// unlocker of a lock with waiters, U2-U3 of lock.rs; `mark_dead`).
///
/// Context: after the store the waiters wait for (the unlock, or the mark); one system
/// call.
pub(crate) fn wake(park: &AtomicU64) {
    // Release: a waiter that reads the new sequence sees the unlock or the mark before it.
    park.fetch_add(1, Ordering::AcqRel);
    futex::wake(park);
}
