//! The names the shared structures use (a holder, a word's place) and how an operation
//! runs (`Run`: where it may die, how it waits), with the flaws the models prove they
//! catch. No protocol here: `slot.rs`, `lock.rs`, `stack.rs` and `record.rs` hold them.

use super::futex::Parked;
use std::time::Duration;

/// A word's place in the region: its index, not an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Word(pub(crate) u32);

impl Word {
    pub(crate) fn at(self, offset: u32) -> Word {
        Word(self.0 + offset)
    }

    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }
}

/// A process slot's index in the slot table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotIndex(pub(crate) u16);

/// One process's tenure of a slot: the slot, and the generation its attach gave it (each
/// attach of a slot gets a new one, so a lock held by a dead process is never mistaken
/// for one held by the next process in its slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) slot: SlotIndex,
    pub(crate) generation: u32,
}

impl Holder {
    /// The word that names this holder in a lock word or an owner word: never 0, which
    /// means "nobody".
    pub(crate) fn word(self) -> u64 {
        ((u64::from(self.slot.0) + 1) << 32) | u64::from(self.generation)
    }

    /// The holder a non-zero word names.
    pub(crate) fn from_word(word: u64) -> Holder {
        let slot = word >> 32;
        assert!(
            (1..=1 << 16).contains(&slot),
            "not a holder's word: {word:#x}"
        );
        Holder {
            slot: SlotIndex((slot - 1) as u16),
            generation: word as u32,
        }
    }
}

/// A process, named so that a reused pid is not mistaken for it: its pid and its start
/// time (`/proc/<pid>/stat` field 22, clock ticks since boot; domain.rs reads it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcessId {
    pub(crate) pid: u32,
    pub(crate) start: u64,
}

/// The operation stopped at a step because its process "died" there: only a model's or a
/// test's `Run` returns it (loom cannot kill a thread, so a model's dying thread returns
/// this from the step and stops). Production's `Unkillable` never does.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Died;

/// The named points of a protocol where a process may die: every store to shared words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The lock word now names us (acquired free).
    Locked,
    /// We took the lock over from a dead holder.
    TookOver,
    /// A dead holder's intent redone, its record not cleared yet.
    Redone,
    /// Our intent record is published.
    Published,
    /// One store of the change is done.
    Stored,
    /// The intent record is cleared (the change is complete).
    Cleared,
    /// The lock word is free again.
    Unlocked,
    /// The steward's attach CAS gave a process a slot (record.rs, R1).
    Attached,
    /// One word of a slot record is written (record.rs, R2).
    Recorded,
    /// A read holds a frame pinned for its copy (read.rs): no store, a place to die
    /// holding a pin.
    Copying,
    /// An optimistic hit found its frame and read its generation, and has not copied yet
    /// (queue.rs): no store; a test's lever reclaims and reuses the frame here, so that
    /// the copy reads the reused frame.
    Found,
    /// An optimistic hit walked the index to its frame and has loaded nothing of the frame
    /// yet (queue.rs): no store; a test's lever moves the frame to another page here.
    Walked,
    /// A miss's frames are in their index, in flight (queue.rs, "In flight", M3), and its
    /// `preadv` has not started (M4): no store; a test's lever stops or kills the reader
    /// here, so that another reader finds the pages in flight, or a writer's install
    /// replaces them. (Under `Flaw::ReadBeforeInsertion`: read, not yet inserted.)
    Reading,
    /// A follower's request of a file's writer role is in the record (`WANTED` names it,
    /// files.rs `request_writer`) and the holder has not handed the role over: no store;
    /// a test's lever stops the requester here and kills it (its request is swept).
    Requested,
    /// A holder handing the writer role over wrote its dirty pages back and has not let
    /// the role go (mapping/domain.rs, F3, `yield_role`): no store; a test's lever stops
    /// the holder here and kills it (the requester claims the role once it is swept).
    Yielding,
}

/// The process's stop lever (tests only): the first `Step` it names, met by this
/// process's `Member` (attach.rs), stops the process (`SIGSTOP`), once; the test then
/// kills it there. Set from `STOP_LEVER_ENV` (a `Step`'s `Debug` name) at the first
/// look, so that a child a test starts is armed before its first step.
#[cfg(test)]
#[allow(unsafe_code)]
pub(crate) mod stop_lever {
    use super::Step;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;

    /// The variable naming the step (`Requested`, `Yielding`) a child stops at.
    pub(crate) const STOP_LEVER_ENV: &str = "FOLIO_TEST_STOP_AT_STEP";

    static ARMED: OnceLock<Option<Step>> = OnceLock::new();
    static FIRED: AtomicBool = AtomicBool::new(false);

    /// Stops this process if the lever names `step` and has not fired yet.
    pub(crate) fn at(step: Step) {
        let armed = ARMED.get_or_init(|| {
            let name = std::env::var(STOP_LEVER_ENV).ok()?;
            [Step::Requested, Step::Yielding]
                .into_iter()
                .find(|s| format!("{s:?}") == name)
        });
        if *armed == Some(step) && !FIRED.swap(true, Ordering::AcqRel) {
            // SAFETY: raise has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
    }
}

/// A protocol known to be wrong, which the models run to prove that they catch it. Only
/// tests build anything but `Flaw::None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flaw {
    None,
    /// The intent record is published after the change's stores, not before.
    #[cfg(test)]
    IntentAfterMutation,
    /// An attach does not give the slot a new generation: a lock held by a dead process
    /// and one held by the next process in its slot look the same.
    #[cfg(test)]
    NoGeneration,
    /// The steward answers an attach before the slot's record is complete.
    #[cfg(test)]
    AnswerBeforeRecord,
    /// A waiter reads its park word's sequence after it looked at the lock again, not
    /// before: an unlock between the two is missed, and the waiter sleeps on the new
    /// sequence (lock.rs, P2 and P3).
    #[cfg(test)]
    SequenceAfterRecheck,
    /// An unlocker looks for waiters (and wakes them) before it frees the lock, not after:
    /// a waiter that announces itself in between is never woken (lock.rs, U1 and U2).
    #[cfg(test)]
    WakeBeforeUnlock,
    /// The shared buddy allocator's taker does not free the block a dead holder left in
    /// flight (buddy.rs): a death mid-split or mid-merge loses it.
    #[cfg(test)]
    InFlightForgotten,
    /// The steward's give-back with members attached punches the free blocks it sees
    /// without leasing them first (buddy.rs, `give_back_listed`): a member that leased one
    /// meanwhile has its page punched under its read.
    #[cfg(test)]
    PunchUnleased,
    /// The shared index's taker does not tidy the path of the dead holder's change
    /// (index.rs, W4): a death between two primitives leaves an empty node in the tree.
    #[cfg(test)]
    TidyForgotten,
    /// The shared index's growth stores the new root before filling it: a lock-free
    /// reader walks a node that does not hold the old root yet.
    #[cfg(test)]
    LinkBeforeFill,
    /// The eviction queue's ADD links the frame under its intent but makes the hand-over
    /// (the frame's buddy state CACHED) as a store after it (queue.rs): a death between
    /// leaves a queued frame its dead lessee's, which the sweep frees.
    #[cfg(test)]
    HandOverOutsideIntent,
    /// The shared index's ADOPT links a frame's nodes into the tree's pool under its
    /// intent but makes the adoption (the frame's buddy state NODES) as a store after it
    /// (index.rs): a death between leaves pooled nodes in a frame its dead lessee holds,
    /// which the buddy's sweep frees.
    #[cfg(test)]
    AdoptOutsideIntent,
    /// The shared index's release takes a node frame off the tree's chain without naming
    /// it in RELEASING (index.rs): a death before its free leaves a frame nobody frees.
    #[cfg(test)]
    UnchainUnnamed,
    /// Reclaim unfreezes and frees its victim before it takes it out of its index
    /// (queue.rs, E5-E6 before E4): the index names a free frame meanwhile.
    #[cfg(test)]
    FreeBeforeIndexRemoval,
    /// Reclaim freezes its victim without looking at its pins (queue.rs, E2): a pinned
    /// frame is freed under its reader.
    #[cfg(test)]
    EvictPinned,
    /// Reclaim raises its victim's reuse generation after it frees the frame (queue.rs, E5
    /// after E6): a new lessee writes the frame under an optimistic reader whose
    /// generation it has already read raised.
    #[cfg(test)]
    RaiseAfterFree,
    /// The optimistic hit does not load the generation again after its copy (queue.rs):
    /// a copy of a frame reused meanwhile validates.
    #[cfg(test)]
    NoRecheck,
    /// The optimistic hit loads the walk's last slot again but does not check the frame's
    /// file and page (queue.rs, (3)): a node pruned and linked again for other pages
    /// meanwhile names the frame reused for another page in the same slot.
    #[cfg(test)]
    NoPageCheck,
    /// A lessee writes a leased frame without the release fence after its lease (buddy.rs):
    /// an optimistic reader that read its bytes may still load the old generation.
    #[cfg(test)]
    NoLesseeFence,
    /// A writer's install takes the page's old frame out of the queue and frees it before
    /// it swaps the slot to the new frame (queue.rs, "Writes", I2 before I3): the index
    /// names a freed frame meanwhile, and a death between leaves the page with no frame (a
    /// reader then reads the disk's stale page).
    #[cfg(test)]
    OldFreedBeforeSwap,
    /// A writer's append in place raises the file's size before it stores the bytes
    /// (queue.rs, "Appends in place", A3 before A2): a reader that loads the new size
    /// copies the bytes not yet stored.
    #[cfg(test)]
    SizeBeforeBytes,
    /// A writer's append in place keeps its frame's mark instead of moving it to a new
    /// one (queue.rs, A1): a writeback of the earlier bytes then unmarks the frame, which
    /// holds newer bytes than the disk, and reclaim frees it.
    #[cfg(test)]
    MarkKept,
    /// Reclaim protects no member's share or floor (queue.rs, "Owners and shares"): a
    /// member scanning far more than the quota evicts another's working set.
    #[cfg(test)]
    NoFloors,
    /// The eviction queue's DETACH lowers its frame's owner's count by a store after its
    /// intent, not in it (queue.rs, "Owners and shares"): a death between leaves the count
    /// one above the frames the owner owns.
    #[cfg(test)]
    CountOutsideIntent,
    /// The steward's sweep of a dead process keeps its request of a writer role (files.rs,
    /// `WANTED`) instead of clearing it: nobody else can claim the role any more.
    #[cfg(test)]
    RequestKept,
    /// A request of a writer role to write claims a dead holder's `ORPHANED` record
    /// (files.rs, `Ask::ToWrite`) before its keeper is done: the keeper's write of the dead
    /// one's older bytes lands over the claimant's.
    #[cfg(test)]
    OrphanClaimed,
    /// A reader's `drop_unplaced` checks only what `remove` does (its frame still caches
    /// the page), not that the frame is unpinned, unmarked and named by no index
    /// (queue.rs): a frame reclaimed, freed and installed again at the same page by a
    /// writer meanwhile (HELD, indexed) is taken out of the index, the writer's newest
    /// bytes with it.
    #[cfg(test)]
    DropUnchecked,
    /// A hit does not look at its frame's FLIGHT (queue.rs, "In flight"): it copies a
    /// frame another reader's `preadv` has not filled yet.
    #[cfg(test)]
    NoFlightCheck,
    /// The steward's sweep leaves a dead reader's in-flight frames in their index
    /// (queue.rs, "In flight", the death): a reader waiting for one waits for ever.
    #[cfg(test)]
    FlightNotSwept,
    /// The steward's sweep clears a dead reader's FLIGHT when it takes the frame out of
    /// its index, instead of leaving it: a reader that pinned the frame before the
    /// removal then copies the dead reader's partial bytes.
    #[cfg(test)]
    FlightCleared,
    /// A miss's unwind guard does nothing (read.rs, "Unwinding"): a thread that panics
    /// with its frames in their index in flight, its process alive, leaves them there, and
    /// a reader of their pages parks `FLIGHT_PARKS_MAX` times (about 10 s) before it reads
    /// the page uncached.
    #[cfg(test)]
    UnwindUnguarded,
    /// A writeback's release of a page's mark (queue.rs, `release_page`: W3) clears
    /// whatever mark the page's frame holds, not only the one it wrote: a newer install of
    /// the page by the same writer (copy on write) is unmarked while its bytes are newer
    /// than the disk's, and reclaim frees it.
    #[cfg(test)]
    ReleaseUnchecked,
    /// A miss reads its pages (M4) before it inserts their frames into the index (M3), as
    /// every miss did before the in-flight protocol (read.rs, "Miss"), with its
    /// `Step::Reading` between the two: a write installed, written back and reclaimed
    /// between them leaves the reader to insert the page's older bytes.
    #[cfg(test)]
    ReadBeforeInsertion,
}

/// When and how long a waiter sleeps in the kernel (lock.rs, P1-P4) instead of spinning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Park {
    /// The waits (`Run::wait`: a spin and a yield each) before the first park.
    pub(crate) after_waits: u32,
    /// How long one park may last (`None`: until woken). A finite one bounds what a wake
    /// lost to a dead steward costs (nobody else wakes a waiter whose holder died).
    pub(crate) timeout: Option<Duration>,
}

impl Park {
    /// The library's: spin and yield twice (a holder running on the other core releases
    /// within that: a few stores), then park for up to 100 ms at a time.
    pub(crate) const DEFAULT: Park = Park {
        after_waits: 2,
        timeout: Some(Duration::from_millis(100)),
    };
}

/// How an operation runs: where it may die, how it waits for a live holder. The library
/// runs `Unkillable`; the tests run levers that kill the process at a chosen step
/// (`SIGKILL` across processes) or stop a model's thread there.
pub(crate) trait Run {
    /// Called right after each `Step`; `Err(Died)` ends the operation there.
    fn at(&self, step: Step) -> Result<(), Died>;

    /// Called when the lock is held by a live holder, before looking again, until
    /// `park`'s `after_waits` waits are done; after them the waiter parks instead.
    fn wait(&self, holder: Holder);

    /// Whether (and when, and for how long) a waiter parks in the kernel; `None`: it only
    /// ever `wait`s (spins and yields).
    fn park(&self) -> Option<Park> {
        Some(Park::DEFAULT)
    }

    /// Called after each park on `holder`'s lock with how it ended (a member looks at its
    /// steward after a timeout: attach.rs; the steward at the holder's pidfd: steward.rs).
    fn parked(&self, _holder: Holder, _outcome: Parked) {}

    /// The protocol's flaw, if a model asks for one.
    fn flaw(&self) -> Flaw {
        Flaw::None
    }

    /// Whether a panic's unwind that drops a held lock aborts the process (lock.rs, "A
    /// panic under the lock"). The library's `Run`s answer yes; models and tests that
    /// catch a panic under a lock (a broken variant's assertion) answer no.
    fn abort_on_unwind(&self) -> bool {
        false
    }
}

/// The library's `Run`: never dies, spins a little then yields while a live holder holds
/// the lock, then parks (`Park::DEFAULT`).
#[derive(Debug, Default)]
pub(crate) struct Unkillable;

impl Run for Unkillable {
    #[inline]
    fn at(&self, _step: Step) -> Result<(), Died> {
        Ok(())
    }

    fn abort_on_unwind(&self) -> bool {
        true
    }

    fn wait(&self, _holder: Holder) {
        for _ in 0..64 {
            std::hint::spin_loop();
        }
        std::thread::yield_now();
    }
}
