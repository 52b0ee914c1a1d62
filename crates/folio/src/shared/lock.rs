//! A lock word that names its holder, with the intent record of the change it makes: the
//! lock a shared structure is changed under when any process may die holding it.
//!
//! One cache line (8 words), from `base`:
//!
//! ```text
//!   word 0   lock    0 (free) or the holder's word (`Holder::word`: slot + 1, generation),
//!                    with `WAITERS` (bit 63) set once a waiter may sleep on it
//!   word 1   intent  0 (none) or the change's operation code, published last
//!   word 2-5 args    the change's absolute values (`INTENT_ARGS`)
//!   word 6-7         the structure's own (a stack's head and count): the line a change
//!                    writes anyway, so the intent costs no other line
//! ```
//!
//! # Protocol
//!
//! Holder (`lock`, then the structure's change through `Held`):
//!   L1. CAS lock 0 -> me (acquire and release: a reader of our word sees our slot
//!       LIVE). On failure, read the holder (acquire); if it is live
//!       (`SlotTable::is_live`: its slot LIVE with its generation), wait and retry L1;
//!       if it is dead, T1.
//!   M1. Write the args, then the intent's operation code (`publish`): before any store
//!       of the change.
//!   M2. The change's stores (`store`, each a release store so that no store of the
//!       change is ever made before the intent, by the compiler either).
//!   M3. Clear the intent (`clear`).
//!   U1. Swap lock 0 (release); the old word says whether `WAITERS` was set.
//!   U2. Only if it was: bump the holder's park word's sequence (slot.rs), then
//!   U3. wake every waiter sleeping on it. An uncontended unlock makes no system call,
//!       and adds no atomic and no fence to the swap it always made.
//!
//! Take-over (a waiter, or the steward sweeping a dead process's locks):
//!   T1. CAS lock dead -> me, comparing the whole word, slot *and* generation: of all who
//!       found the same dead holder exactly one wins; one who read the word before the
//!       slot was swept, freed and attached again fails, since the new holder's word has
//!       a new generation. A loser retries L1.
//!   T2. If the intent is published, redo the change from it (the structure's `redo`:
//!       absolute stores, harmless if some or all were made), then clear it.
//!   T3. Hold the lock as after L1.
//!
//! A death anywhere leaves one of: nothing held (before L1, after U1); the lock held and
//! no intent (between L1 and M1: no store of the change made, nothing to redo); the lock
//! held and the intent published (M1 to M3: redo finishes the change); the lock held, the
//! change complete (after M3). A taker dying in T2 leaves the intent published under a
//! lock word naming it, dead: the next taker redoes it again.
//!
//! Why the dead holder's stores are visible to the taker: the steward marks its slot dead
//! only after the kernel reported the death (`SlotTable::mark_dead`, a release store),
//! and the taker read the slot dead with an acquire load before T1.
//!
//! # Waiting (issue 45 step 3)
//!
//! A waiter that found a live holder `H` waits (`Run::wait`: a spin and a yield) a few
//! times (`Park::after_waits`), then parks, keyed by its holder: on `H`'s slot's park word
//! (slot.rs), which `H` bumps when it unlocks a lock with waiters and the steward bumps
//! when it marks `H` dead.
//!   P1. Announce: CAS lock H -> H | WAITERS (nothing if the bit is set; a failed CAS:
//!       the lock changed, look again).
//!   P2. Read the sequence s of H's park word (acquire).
//!   P3. Look again: the lock word still H | WAITERS and H's slot still LIVE, else do not
//!       park (look again from L1).
//!   P4. `FUTEX_WAIT` on the park word while it holds s, for up to `Park::timeout`.
//!
//! No lost wake-up: an unlock after P1 sees the bit (P1 and U1 are read-modify-writes of
//! one word: one is first) and bumps after its swap; if P2 read that bump, the swap is
//! visible to P3, which sees the lock changed; if P2 read an older sequence, the bump
//! comes after P2 and the kernel compares at P4 under its queue's lock: the waiter either
//! sees the new sequence and does not sleep, or sleeps first and is woken by U3. The same
//! holds for a death: `mark_dead`'s CAS, then its bump and wake, against P2 and P3's look
//! at the slot. Read P2 after P3 (`Flaw::SequenceAfterRecheck`) and a bump between them
//! is slept through; look for waiters before U1 (`Flaw::WakeBeforeUnlock`) and a waiter
//! announcing in between is never woken: the models in `tests/loom_shared.rs` catch both.
//! A waiter that dies parked leaves its bit, which costs the holder's next unlock one
//! wake nobody needs, and nothing else (the bit is cleared by every unlock and take-over);
//! a wake lost to a dead unlocker between U1 and U3 is made by `mark_dead` at its death.
//! The timeout bounds only a wake lost to a dead steward (nobody marks the holder dead;
//! a member looks at its steward after a timeout: attach.rs).
//!
//! # A panic under the lock
//!
//! A thread that panics while it holds the lock (a bug's assertion in the structure's
//! change, a bound checked on a corrupt word) in a process that lives on (a caller's
//! `catch_unwind`, a thread pool that catches its tasks' panics, the C ABI, which turns a
//! panic into `-ENOTRECOVERABLE`) is no death: nobody sweeps, the lock word names a live
//! holder for ever, and every process of the domain that needs the structure waits on it
//! until this one exits, its own other threads among them. So `Held`'s drop by an unwind
//! aborts the process (`Run::abort_on_unwind`: the library's members and steward ask for
//! it), which turns the panic into the death the protocol is built for: the steward marks
//! the slot dead, a taker redoes the published intent (T1-T3) and the sweep mends what
//! else the process held. The change may be half-made: going on in the panicking process
//! with the lock let go would expose it, and redoing the intent from a live process is a
//! take-over of a live holder, which the protocol never makes. Costs the lock a load of
//! the runtime's panic count and a flag. A steward that aborts so leaves its panic's
//! report on its stderr (`/dev/null`), not in its trace: the next attach starts another. Tested by crossing it: `tests_life.rs`,
//! `a_panic_under_a_domain_lock_aborts_and_the_domain_goes_on` (a real child process).
//!
//! Protection: the intent and the structure's words by the lock; the lock word by CAS
//! (and U1's swap). Limits: `INTENT_ARGS` values per change; a holder holds the lock for
//! a few stores, never across a wait of its own; a wake wakes every waiter of the holder
//! (few: a thread or so per process, the holder's own process's threads among them: a
//! process's threads share its holder word), and all but one sleep again.

use super::futex::{self, Parked};
use super::slot::{self, SlotTable};
use super::{Died, Flaw, Holder, Run, Step, Word};
use crate::primitive::{AtomicU64, Ordering};
use std::time::Duration;

/// The values an intent record holds.
pub(crate) const INTENT_ARGS: usize = 4;

/// The words of a lock's line that the structure may use for its own fields (6 and 7).
pub(crate) const LINE_FREE_WORDS: [u32; 2] = [6, 7];

/// The words of a lock's line.
pub(crate) const LINE_WORDS: u32 = 8;

const LOCK: u32 = 0;
const INTENT: u32 = 1;
const ARGS: u32 = 2;

/// The lock word's bit saying that a waiter may sleep on the holder's park word (module
/// docs, P1): a holder's word never sets it (`Holder::word`: slot + 1 < 2^17 above bit 32).
const WAITERS: u64 = 1 << 63;

/// A change, as its intent record holds it: a non-zero operation code the structure
/// chose, and its absolute values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Intent {
    pub(crate) op: u64,
    pub(crate) args: [u64; INTENT_ARGS],
}

/// A lock line at `base` of a region.
#[derive(Clone, Debug)]
pub(crate) struct HolderLock<'r> {
    region: &'r [AtomicU64],
    base: Word,
}

/// Proof that `me` holds the lock: what the structure changes its words through. Not
/// released on drop: a holder that stops (dies) keeps the lock, as a killed process does.
/// Dropped by a panic's unwind, it aborts the process when its `Run` asks for that
/// (module docs, "A panic under the lock").
#[derive(Debug)]
#[must_use = "a held lock must be unlocked"]
pub(crate) struct Held<'l, 'r> {
    lock: &'l HolderLock<'r>,
    me: Holder,
    /// `me`'s park word, in the lock's region (U2).
    park: Word,
    /// Whether an unwind that drops this hold aborts the process: the holder's `Run` asks
    /// for it (`Run::abort_on_unwind`) and its thread was not unwinding already when it
    /// took the lock (a panic's clean-up that takes a lock, `read::FillGuard`, and meets a
    /// second panic there is aborted by the runtime anyway).
    abort_on_unwind: bool,
}

impl<'r> HolderLock<'r> {
    /// A view of the lock line at `base` (8-word aligned, zeroed by whoever made the
    /// region: free, no intent).
    pub(crate) fn new(region: &'r [AtomicU64], base: Word) -> HolderLock<'r> {
        assert_eq!(base.0 % LINE_WORDS, 0, "a lock line starts a cache line");
        assert!(
            base.index() + LINE_WORDS as usize <= region.len(),
            "the lock line lies past the region"
        );
        HolderLock { region, base }
    }

    fn word(&self, offset: u32) -> &AtomicU64 {
        &self.region[self.base.at(offset).index()]
    }

    /// The lock word as it is (diagnostics, tests).
    pub(crate) fn holder(&self) -> Option<Holder> {
        match self.word(LOCK).load(Ordering::Acquire) & !WAITERS {
            0 => None,
            word => Some(Holder::from_word(word)),
        }
    }

    /// Whether a waiter announced itself on the lock as it is (tests: a waiter parks).
    pub(crate) fn has_waiters(&self) -> bool {
        self.word(LOCK).load(Ordering::Acquire) & WAITERS != 0
    }

    /// Whether an intent is published (tests: the structure is quiet).
    pub(crate) fn intent_published(&self) -> bool {
        self.word(INTENT).load(Ordering::Acquire) != 0
    }

    /// Takes the lock for `me` (L1), or over from a dead holder (T1-T3: `redo` finishes
    /// the dead holder's published change).
    ///
    /// Context: `me` is LIVE in `slots`, which lie in this lock's region; this thread holds
    /// no lock of this line (another thread of this process may: we wait for it). While a
    /// live holder holds it: waits (`run.wait`), then parks (module docs, P1-P4: a system
    /// call) as `run.park` says.
    pub(crate) fn lock<R: Run>(
        &self,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
        redo: impl Fn(&Intent),
    ) -> Result<Held<'_, 'r>, Died> {
        debug_assert!(
            slots.is_in(self.region),
            "the slots lie in the lock's region"
        );
        // L1. Release too: whoever reads our word here must see our slot LIVE (the
        // attach before), or it could take a live holder's lock for a dead one's (the
        // model `shared_stack_death_at_every_step` found that with an acquire-only
        // CAS: a reader saw the new holder's word and the slot's old, dead state).
        match self
            .word(LOCK)
            .compare_exchange(0, me.word(), Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => self.locked(me, slots, run),
            Err(current) => self.lock_contended(current, me, slots, run, redo),
        }
    }

    /// After L1 succeeded.
    #[inline]
    fn locked<R: Run>(
        &self,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Held<'_, 'r>, Died> {
        let held = Held::new(self, me, slots, run);
        run.at(Step::Locked)?;
        assert_eq!(
            self.word(INTENT).load(Ordering::Relaxed),
            0,
            "a free lock with a published intent"
        );
        Ok(held)
    }

    /// L1 failed, finding `current`: waits, parks, takes over, retries L1 (out of line:
    /// the uncontended lock is the CAS and `locked`).
    #[cold]
    #[inline(never)]
    fn lock_contended<R: Run>(
        &self,
        mut current: u64,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
        redo: impl Fn(&Intent),
    ) -> Result<Held<'_, 'r>, Died> {
        let mine = me.word();
        let lock = self.word(LOCK);
        let mut waits = 0u32;
        loop {
            let holder = Holder::from_word(current & !WAITERS);
            // `holder == me`: another thread of this process holds it (a process's threads
            // share its holder: `shared::reader`); it is live as we are, so we wait for its
            // unlock like any other (never a take-over). A thread that takes a lock it
            // already holds waits forever here: the protocols never nest one lock.
            if slots.is_live(holder) {
                waits += 1;
                match run.park() {
                    Some(park) if waits > park.after_waits => {
                        let outcome = self.park(current, holder, slots, park.timeout, run.flaw());
                        run.parked(holder, outcome);
                    }
                    _ => run.wait(holder),
                }
            } else if lock
                .compare_exchange(current, mine, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                // T1 done: the whole word, generation too (and the waiters' bit: the dead
                // holder's waiters were woken by its mark, and look again).
                let held = Held::new(self, me, slots, run);
                run.at(Step::TookOver)?;
                // T2.
                let op = self.word(INTENT).load(Ordering::Acquire);
                if op != 0 {
                    let mut args = [0; INTENT_ARGS];
                    for (i, arg) in args.iter_mut().enumerate() {
                        *arg = self.word(ARGS + i as u32).load(Ordering::Relaxed);
                    }
                    redo(&Intent { op, args });
                    run.at(Step::Redone)?;
                    self.word(INTENT).store(0, Ordering::Release);
                    run.at(Step::Cleared)?;
                }
                // T3.
                return Ok(held);
            }
            // L1 again (as in `lock`).
            current = match lock.compare_exchange(0, mine, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return self.locked(me, slots, run),
                Err(seen) => seen,
            };
        }
    }

    /// P1-P4 (module docs): sleeps on the park word of `holder`, who held the lock as
    /// `current` and was live, unless the lock or the holder changed first.
    fn park(
        &self,
        current: u64,
        holder: Holder,
        slots: &SlotTable<'_>,
        timeout: Option<Duration>,
        flaw: Flaw,
    ) -> Parked {
        let lock = self.word(LOCK);
        let announced = current | WAITERS;
        // P1.
        if current & WAITERS == 0
            && lock
                .compare_exchange(current, announced, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return Parked::Changed;
        }
        let park = slots.park_word(holder.slot);
        let sequence_after_recheck = is_sequence_after_recheck(flaw);
        // P2.
        let mut sequence = park.load(Ordering::Acquire) as u32;
        // P3.
        if lock.load(Ordering::Acquire) != announced || !slots.is_live(holder) {
            return Parked::Changed;
        }
        if sequence_after_recheck {
            sequence = park.load(Ordering::Acquire) as u32;
        }
        // P4.
        futex::wait(park, sequence, timeout)
    }
}

impl<'l, 'r> Held<'l, 'r> {
    /// The hold `me` just took of `lock` (L1 or T1), before any step that may unwind.
    #[inline]
    fn new<R: Run>(
        lock: &'l HolderLock<'r>,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Held<'l, 'r> {
        Held {
            lock,
            me,
            park: slots.park_index(me.slot),
            abort_on_unwind: run.abort_on_unwind() && !std::thread::panicking(),
        }
    }

    /// Who holds it.
    pub(crate) fn holder(&self) -> Holder {
        self.me
    }

    /// M1: the change's intent, before any of its stores.
    ///
    /// Context: no intent published.
    pub(crate) fn publish<R: Run>(&self, intent: &Intent, run: &R) -> Result<(), Died> {
        assert_ne!(intent.op, 0, "an intent's operation code is not 0");
        let line = self.lock;
        debug_assert_eq!(
            line.word(INTENT).load(Ordering::Relaxed),
            0,
            "an intent already published"
        );
        for (i, arg) in intent.args.iter().enumerate() {
            line.word(ARGS + i as u32).store(*arg, Ordering::Relaxed);
        }
        line.word(INTENT).store(intent.op, Ordering::Release);
        run.at(Step::Published)
    }

    /// M2: one store of the change, to any word of the region (release: it is never made
    /// before the intent it follows).
    pub(crate) fn store<R: Run>(&self, word: &AtomicU64, value: u64, run: &R) -> Result<(), Died> {
        word.store(value, Ordering::Release);
        run.at(Step::Stored)
    }

    /// M1-M3 in one: `intent` published, its stores made by `apply` (each through
    /// `store`), the intent cleared. Under `Flaw::IntentAfterMutation` (a model's broken
    /// variant) the stores come before the intent is published.
    pub(crate) fn change<R: Run>(
        &self,
        intent: &Intent,
        run: &R,
        apply: impl FnOnce(&mut dyn FnMut(&AtomicU64, u64) -> Result<(), Died>) -> Result<(), Died>,
    ) -> Result<(), Died> {
        let intent_first = !intent_after_mutation(run.flaw());
        if intent_first {
            self.publish(intent, run)?;
        }
        apply(&mut |word, value| self.store(word, value, run))?;
        if !intent_first {
            self.publish(intent, run)?;
        }
        self.clear(run)
    }

    /// M3: the change is complete.
    pub(crate) fn clear<R: Run>(&self, run: &R) -> Result<(), Died> {
        self.lock.word(INTENT).store(0, Ordering::Release);
        run.at(Step::Cleared)
    }

    /// U1-U3: frees the lock, and wakes its waiters if one announced itself (a system
    /// call only then).
    ///
    /// Context: no intent published (cleared, or none).
    pub(crate) fn unlock<R: Run>(self, run: &R) -> Result<(), Died> {
        let line = self.lock;
        assert_eq!(
            line.word(INTENT).load(Ordering::Relaxed),
            0,
            "unlock with an intent published"
        );
        let lock = line.word(LOCK);
        let (me, park_word) = (self.me, self.park);
        // The park word is looked up only when it is woken: the uncontended unlock is the
        // swap, a mask and a test of its result.
        let park = || &line.region[park_word.index()];
        let wake_before = is_wake_before_unlock(run.flaw());
        if wake_before && lock.load(Ordering::Acquire) & WAITERS != 0 {
            slot::wake(park());
        }
        // U1.
        let was = lock.swap(0, Ordering::Release);
        // Unlocked: an unwind from here on is no panic under the lock (Drop).
        std::mem::forget(self);
        assert_eq!(
            was & !WAITERS,
            me.word(),
            "unlock of a lock someone else holds"
        );
        // U2, U3.
        if was & WAITERS != 0 && !wake_before {
            slot::wake(park());
        }
        run.at(Step::Unlocked)
    }
}

impl Drop for Held<'_, '_> {
    /// A hold dropped without its unlock: a `Died` (a model's or a test's death, which
    /// keeps the lock as a killed process does) or a panic's unwind. The latter aborts the
    /// process when `abort_on_unwind` says so (module docs, "A panic under the lock").
    fn drop(&mut self) {
        if self.abort_on_unwind && std::thread::panicking() {
            eprintln!(
                "folio: a panic while this process held a lock of its domain (its structure \
                 may be half-changed): aborting, so that the domain's steward mends it as \
                 after a death"
            );
            std::process::abort();
        }
    }
}

/// Whether `flaw` reads the park word's sequence after the look again (P3).
fn is_sequence_after_recheck(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::SequenceAfterRecheck => true,
        _ => false,
    }
}

/// Whether `flaw` looks for waiters before the unlock's swap (U1).
fn is_wake_before_unlock(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::WakeBeforeUnlock => true,
        _ => false,
    }
}

/// Whether a model asks for the intent published after the stores (`Held::change`).
fn intent_after_mutation(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::IntentAfterMutation => true,
        _ => false,
    }
}
