//! The folio state word: a reference count with a dedicated DEAD bit, and the flags.
//!
//! This is the only module that touches the state word's atomic, and the only one that
//! knows its bits: everything else calls the named operations below, whose protocol is
//! written here once, and tests flags on a snapshot (`StateWord`, the kernel's
//! `folio_test_*` family: `is_locked`, `is_uptodate`, ...).
//!
//! # Layout (one `u64` per folio, in the frame's metadata)
//!
//! ```text
//!  63   44  43 42 41 40 39  38  37  36  35  34  33  32 31                         0
//! +------+---+---+-----+---+---+---+---+---+---+---+---+----------------------------+
//! |unused|WB | - |FREQ |PF |WS |DTY|RA |ERR|UTD|LCK|DEAD|  reference count (u32)     |
//! +------+---+---+-----+---+---+---+---+---+---+---+---+----------------------------+
//! ```
//!
//! - count: one reference for the index while the folio is in it, one per pin
//!   (`PageRef`, a waiter, the reclaimer's verification). Never above `COUNT_MAX`.
//! - DEAD: the folio is frozen (being evicted) or its frame is free. A getter that sees it
//!   fails. Set with the count at 0, so counts are never lost under it.
//! - LOCKED: I/O in flight. The folio is in the index, its bytes are not valid yet. A
//!   writer also holds LOCKED on an uptodate folio for its copy (`try_lock_for_write`,
//!   DESIGN.md §8): readers that pinned it wait, as for a read.
//! - DIRTY: its bytes (some 4 KiB blocks of it: `write::mask::BlockMask`) are newer than the
//!   file's. WRITEBACK: a write of those bytes is in flight (the device reads the frame;
//!   a writer waits for it to end). Neither is ever frozen: reclaim, `DontNeed` and the
//!   freeze of a truncation all refuse them. The write side's use of them is
//!   model-checked in `tests/loom_models.rs` (`write_vs_writeback*`,
//!   `dirty_folio_vs_reclaim_*`, `truncation_vs_writeback*`).
//! - UPTODATE, ERROR: outcome of the read. READAHEAD: the async-readahead marker.
//!   FREQ: the access count eviction reads (0..=3). WORKINGSET: the folio refaulted
//!   within the workingset. PREFETCHED: read ahead and not read yet (wasted readahead
//!   if evicted so).
//! - The reclaimer's isolation of a victim is a reference too (`try_get`), so an isolated
//!   folio cannot be freed under it; it freezes with `try_freeze_isolated` (count 2).
//!
//! # Protocol
//!
//! Getter, `try_get` (a lock-free lookup found the folio in the index):
//!   1. `fetch_add(1)` on the state word. One atomic, no CAS loop (seed 004).
//!   2. If the old value has DEAD, `fetch_sub(1)` to back out and fail: the folio is
//!      frozen or free. The caller retries its lookup. (If the frame was revived and
//!      released again meanwhile, the back-out can be its last reference: then it runs
//!      the releaser's CAS below, and frees the frame if it wins.)
//!   3. Otherwise the caller holds a reference to whatever incarnation of the frame is
//!      there now, and must re-check that the index slot still holds this frame
//!      (`Mapping::find_get`); if not, it `put`s the reference and retries.
//!
//! Freezer, `try_freeze` (reclaim, invalidation; holds the mapping's write lock and has
//! checked that the slot holds this frame):
//!   A. One CAS from "count == 1 (the index's reference), not LOCKED, not DEAD" to
//!      "count 0, DEAD, same flags". It fails if anyone holds a pin or I/O is in flight.
//!   B. Remove the entry from the index (a shadow takes its place), drop the lock.
//!   C. Retire the version (`version::Version::retire`), then give the frame to the
//!      allocator (`mark_free`, flags cleared, DEAD and any transient count kept).
//!
//! Releaser, `put`: `fetch_sub(1)`. If that took the count to 0 (only possible after the
//! index dropped its reference, on the I/O error path), the releaser tries one CAS from
//! that exact value to the same value with DEAD; the winner frees the frame. If the CAS
//! fails, a getter's transient increment (step 1) got in between, and that getter's own
//! `put` will see the count reach 0 again and try the CAS itself.
//!
//! Allocator, `revive_locked`: a frame leaves the free list with DEAD set and a count of
//! `n` transient getters that are between steps 1 and 2. An atomic read-modify-write
//! (never a plain store) turns it into "count n + 1, LOCKED": the transient getters' own
//! back-outs then leave exactly the new owner's reference.
//!
//! # The interleavings that matter
//!
//! Getter against freezer: if the getter's step 1 comes first, the count is 2 and the
//! freezer's CAS (A) fails: the folio stays. If A comes first, the getter sees DEAD and
//! backs out: it never holds a reference to a folio being evicted. There is no window in
//! which the count reads 0 without DEAD, which is why a plain `fetch_add` is enough.
//!
//! The freed-and-reused frame (the ABA case of the kernel's review of seed 004): a getter
//! loads the slot (frame F), stalls; F is frozen, freed and reallocated to another file's
//! page; the getter's step 1 now succeeds on the new incarnation. Two things keep this
//! safe. First, the allocator revives with a read-modify-write (never a plain store), so the
//! getter's increment is neither lost nor doubled: had it used `store(ONE | LOCKED)`, the
//! getter's later back-out would have taken the new owner's count to 0 and freed a frame
//! in use. Second, the getter's step 3 re-checks the index slot, sees that it no longer
//! holds F (or that F now holds another page), puts its reference and retries: it never
//! reads the other page's bytes. Both are model-checked in `tests/loom_models.rs`.
//!
//! # Limits
//!
//! The count is 32 bits; each thread holds at most a handful of references, so it cannot
//! reach `COUNT_MAX` (asserted in debug builds when pinning).

use crate::primitive::{AtomicU64, Ordering};

/// One reference.
pub const ONE: u64 = 1;
pub const COUNT_MASK: u64 = (1 << 32) - 1;
pub const COUNT_MAX: u64 = 1 << 30;

pub const DEAD: u64 = 1 << 32;
pub const LOCKED: u64 = 1 << 33;
pub const UPTODATE: u64 = 1 << 34;
pub const ERROR: u64 = 1 << 35;
/// The async-readahead marker: a read that touches this folio starts the next window.
pub const READAHEAD: u64 = 1 << 36;
/// Brought in by readahead and not read yet (counted as wasted if evicted so).
pub const PREFETCHED: u64 = 1 << 39;
/// The access frequency that eviction reads: a 2-bit counter (0..=3) that hits raise.
pub const FREQ_SHIFT: u32 = 40;
pub const FREQ_MASK: u64 = 3 << FREQ_SHIFT;
pub const FREQ_ONE: u64 = 1 << FREQ_SHIFT;
/// The folio refaulted within the workingset (a recent eviction came back).
pub const WORKINGSET: u64 = 1 << 38;
/// Its bytes are newer than the file's (DESIGN.md §8).
pub const DIRTY: u64 = 1 << 37;
/// A write of its dirty bytes is in flight.
pub const WRITEBACK: u64 = 1 << 43;
/// The folio left its index (invalidated, or replaced by a copy on write) while holders
/// still pin it: its bytes may be older than the file's, and a restart that finds it in a
/// segment never adopts it (`adopt`). Set under the index lock before the folio leaves;
/// cleared when the frame is allocated again.
pub const DETACHED: u64 = 1 << 44;
/// What a freeze refuses: pins aside, a folio with any of these cannot leave the index.
const UNFREEZABLE: u64 = DEAD | LOCKED | ERROR | DIRTY | WRITEBACK;

const _: () = assert!(COUNT_MAX < COUNT_MASK && DEAD == COUNT_MASK + 1);

/// What `try_get` got.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum GetOutcome {
    /// A reference (the caller re-checks the index slot).
    Got,
    /// The folio is frozen or free; retry the lookup.
    Dead,
    /// As `Dead`, and the caller must free the frame (see `try_get`).
    DeadFree,
}

/// What `try_lock_for_write` found.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum WriteLock {
    /// LOCKED is the writer's: copy, then `unlock_dirty`. With the word the CAS replaced:
    /// whether the folio was DIRTY when the writer locked it (`write::mask::Prior`) must be
    /// read from it, not from an earlier load, as a writeback may start and end (clean)
    /// or fail (dirty again) between that load and the CAS.
    Locked(StateWord),
    /// A writeback is in flight: wait for it (stable pages), then try again.
    Writeback,
    /// Someone else holds a pin (or the folio is not uptodate): copy on write.
    Pinned,
}

/// Whether `end_writeback` makes the folio dirty again (the write failed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Redirty {
    Yes,
    No,
}

/// What a `put` left behind.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum PutOutcome {
    /// Others still hold references.
    Alive,
    /// This was the last reference and the caller won the right to free the frame.
    Free,
}

/// The state word of one folio. See the module docs for the protocol.
#[derive(Debug)]
#[repr(transparent)]
pub struct FolioState(AtomicU64);

impl Default for FolioState {
    fn default() -> Self {
        Self::new_free()
    }
}

/// The reference count of a raw state value.
fn count(state: u64) -> u64 {
    state & COUNT_MASK
}

/// A snapshot of a folio's state word (`FolioState::load`), with read-only tests in the
/// kernel's `folio_test_*` family: the only way code outside this module reads the
/// flags. A plain `u64`: every test is one mask on a value already loaded, no atomic.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(transparent)]
pub struct StateWord(u64);

impl StateWord {
    /// I/O in flight: the folio is in the index, its bytes are not valid yet.
    #[inline]
    pub fn is_locked(self) -> bool {
        self.0 & LOCKED != 0
    }

    /// The read succeeded: the bytes are valid.
    #[inline]
    pub fn is_uptodate(self) -> bool {
        self.0 & UPTODATE != 0
    }

    /// The read failed (the folio has left the index; `FolioMeta::errno` says why).
    #[inline]
    pub fn is_error(self) -> bool {
        self.0 & ERROR != 0
    }

    /// Frozen (being evicted) or free: a getter fails.
    #[inline]
    pub fn is_dead(self) -> bool {
        self.0 & DEAD != 0
    }

    /// Carries the async-readahead marker.
    #[inline]
    pub fn is_readahead(self) -> bool {
        self.0 & READAHEAD != 0
    }

    /// Read ahead and not read yet.
    #[inline]
    pub fn is_prefetched(self) -> bool {
        self.0 & PREFETCHED != 0
    }

    /// Newer than the file.
    #[inline]
    pub fn is_dirty(self) -> bool {
        self.0 & DIRTY != 0
    }

    /// A write of its dirty bytes is in flight.
    #[inline]
    pub fn is_writeback(self) -> bool {
        self.0 & WRITEBACK != 0
    }

    /// Refaulted within the workingset.
    #[inline]
    pub fn is_detached(self) -> bool {
        self.0 & DETACHED != 0
    }

    #[inline]
    pub fn is_workingset(self) -> bool {
        self.0 & WORKINGSET != 0
    }

    /// The reference count.
    #[inline]
    pub fn count(self) -> u64 {
        count(self.0)
    }

    /// The access frequency (0..=3).
    #[inline]
    pub fn freq(self) -> u64 {
        (self.0 & FREQ_MASK) >> FREQ_SHIFT
    }

    /// The whole value: for comparing a snapshot with an exact expected word in tests
    /// (the loom models among them). Flags are tested with the methods above.
    #[cfg(test)]
    pub fn bits(self) -> u64 {
        self.0
    }
}

impl std::fmt::Debug for StateWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StateWord({:#x}: count {}", self.0, self.count())?;
        for (set, name) in [
            (self.is_dead(), "DEAD"),
            (self.is_locked(), "LOCKED"),
            (self.is_uptodate(), "UPTODATE"),
            (self.is_error(), "ERROR"),
            (self.is_readahead(), "READAHEAD"),
            (self.is_workingset(), "WORKINGSET"),
            (self.is_prefetched(), "PREFETCHED"),
            (self.is_dirty(), "DIRTY"),
            (self.is_writeback(), "WRITEBACK"),
        ] {
            if set {
                write!(f, " {name}")?;
            }
        }
        write!(f, " freq {})", self.freq())
    }
}

impl FolioState {
    /// A free frame: DEAD, no references.
    pub fn new_free() -> Self {
        FolioState(AtomicU64::new(DEAD))
    }

    /// A state word holding `bits` as they are: a segment's side table read back holds any
    /// bits (`fuzzing::adoption_scan`).
    #[cfg(any(fuzzing, test))]
    pub fn from_bits(bits: u64) -> Self {
        FolioState(AtomicU64::new(bits))
    }

    /// Stores `bits` as they are (a hostile segment forged in place:
    /// `fuzzing::hostile_segment`).
    #[cfg(any(fuzzing, test))]
    pub fn store_bits(&self, bits: u64) {
        self.0.store(bits, Ordering::Relaxed);
    }

    /// Stores what `new_free` makes, into a state word nobody else uses (a virgin frame's).
    pub fn reset_free(&self) {
        self.0.store(DEAD, Ordering::Relaxed);
    }

    /// The folio is leaving its index while holders may still pin it (`DETACHED`).
    /// Release: a later store that takes it out (seen in the segment after a kill) comes
    /// after this.
    ///
    /// Context: the index lock held, the folio still in its slot.
    pub fn mark_detached(&self) {
        self.0.fetch_or(DETACHED, Ordering::Release);
    }

    /// Makes a folio a restart found in its segment a cached, uptodate folio with one
    /// reference (its index's), keeping its access frequency and workingset bit; every
    /// other flag goes (the page's bytes are the file's: `adopt`).
    ///
    /// Context: the adoption, before the cache is shared: nobody else uses the frame.
    pub fn adopt_clean(&self) {
        let kept = self.0.load(Ordering::Relaxed) & (FREQ_MASK | WORKINGSET);
        self.0.store(ONE | UPTODATE | kept, Ordering::Release);
    }

    /// A snapshot of the word, for flag tests (`StateWord`). Acquire: a reader that sees
    /// UPTODATE sees the bytes the read wrote.
    #[inline]
    pub fn load(&self) -> StateWord {
        StateWord(self.0.load(Ordering::Acquire))
    }

    /// Protocol steps 1-2: take a reference unless the folio is DEAD. One `fetch_add`.
    /// On `Got`, the caller must re-check the index slot (step 3). On `DeadFree`, the
    /// back-out was the last reference of an incarnation that was revived and released
    /// while this getter was between steps 1 and 2: the caller frees the frame.
    pub fn try_get(&self) -> GetOutcome {
        let old = self.0.fetch_add(ONE, Ordering::Acquire);
        debug_assert!(count(old) < COUNT_MAX, "folio reference count overflow");
        if old & DEAD == 0 {
            return GetOutcome::Got;
        }
        let new = self.0.fetch_sub(ONE, Ordering::AcqRel).wrapping_sub(ONE);
        if new & DEAD == 0 && count(new) == 0 && self.win_release(new) {
            return GetOutcome::DeadFree;
        }
        GetOutcome::Dead
    }

    /// The one CAS that turns an incarnation whose count reached 0 DEAD; true if this
    /// caller won it and must free the frame.
    fn win_release(&self, zero: u64) -> bool {
        self.0
            .compare_exchange(zero, zero | DEAD, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Drops one reference. `PutOutcome::Free` hands the frame to the caller, who must
    /// retire its version and return it to the allocator.
    pub fn put(&self) -> PutOutcome {
        self.put_many(ONE)
    }

    /// Drops `refs` references and clears `flags` (known set) in one atomic step. The I/O
    /// error path uses it to drop the index's reference and LOCKED together, so no
    /// freezer can ever see the index's reference without LOCKED after the folio left the
    /// index.
    fn put_many(&self, delta: u64) -> PutOutcome {
        let old = self.0.fetch_sub(delta, Ordering::AcqRel);
        let new = old.wrapping_sub(delta);
        debug_assert!(old & DEAD == 0, "put on a dead folio");
        if count(new) != 0 {
            return PutOutcome::Alive;
        }
        // The count reached 0 without DEAD: only the one CAS of `win_release` may turn
        // this incarnation DEAD. If a getter incremented in between, its own put or
        // back-out will reach 0 again and try the same CAS.
        if self.win_release(new) {
            PutOutcome::Free
        } else {
            PutOutcome::Alive
        }
    }

    /// Protocol step A: freeze a folio that only the index references and that has no
    /// I/O in flight. One CAS. (A failed folio has left the index already: refused too.) The caller holds the mapping's write lock and has checked
    /// that the index slot holds this frame.
    pub fn try_freeze(&self) -> bool {
        let cur = self.0.load(Ordering::Relaxed);
        if count(cur) != 1 || cur & UNFREEZABLE != 0 {
            return false;
        }
        self.0
            .compare_exchange(
                cur,
                (cur - ONE) | DEAD,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Allocator: turn a free frame into a LOCKED folio owned by the caller (one
    /// reference, which becomes the index's on insertion). The count of transient
    /// getters is kept (module docs, the ABA case), and stray hint bits that a late
    /// optimistic reader set on the free frame (FREQ) are dropped. A CAS loop, not
    /// a `fetch_add`, for that reason; it is off the hit path.
    pub fn revive_locked(&self) {
        let mut cur = self.0.load(Ordering::Relaxed);
        loop {
            assert!(
                cur & DEAD != 0,
                "revived a frame that was not free: {cur:#x}"
            );
            let new = (count(cur) + ONE) | LOCKED;
            match self
                .0
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(seen) => cur = seen,
            }
        }
    }

    /// Protocol step C: the frame goes back to the allocator. Clears every flag but DEAD;
    /// transient counts stay (they back themselves out).
    pub fn mark_free(&self) {
        let old = self.0.fetch_and(DEAD | COUNT_MASK, Ordering::Release);
        assert!(old & DEAD != 0, "freed a folio that was not dead: {old:#x}");
    }

    /// Completion of a successful read: UPTODATE, then unlock. The caller wakes waiters.
    pub fn finish_read_ok(&self) {
        self.0.fetch_or(UPTODATE, Ordering::Release);
        let old = self.0.fetch_and(!LOCKED, Ordering::Release);
        debug_assert!(old & LOCKED != 0);
    }

    /// A folio a writer made (a whole-page write, or a page past the end of the file: no
    /// read): its bytes are the writer's, so it becomes UPTODATE and DIRTY as LOCKED is
    /// cleared, in one step. The caller wakes waiters.
    pub fn finish_fill_dirty(&self) {
        let old = self
            .0
            .fetch_update(Ordering::Release, Ordering::Relaxed, |cur| {
                Some((cur | UPTODATE | DIRTY) & !LOCKED)
            })
            .expect("the closure always answers");
        debug_assert!(old & LOCKED != 0);
    }

    /// Completion of a failed read, after the folio left the index: ERROR, then drop the
    /// index's reference and LOCKED in one step. The caller wakes waiters; if this
    /// returns `Free` (no waiters), the caller frees the frame.
    pub fn finish_read_err(&self) -> PutOutcome {
        self.0.fetch_or(ERROR, Ordering::Release);
        self.put_many(ONE + LOCKED)
    }

    /// A LOCKED folio that never made it into the index (its slot was taken by a racing
    /// insertion) is given up by its allocator: drop its reference and LOCKED together.
    pub fn abandon_locked(&self) -> PutOutcome {
        self.put_many(ONE + LOCKED)
    }

    /// Sets flags that may already be set; stores only when something changes, so a hot
    /// folio's cache line is not written on every hit.
    pub fn set_flags(&self, flags: u64) {
        if self.0.load(Ordering::Relaxed) & flags != flags {
            self.0.fetch_or(flags, Ordering::Relaxed);
        }
    }

    /// A hit: raises the access frequency by one, up to 3. Stores only below 3, so a hot
    /// folio's cache line is not written on every hit; one CAS attempt, so a race loses a
    /// count, never corrupts the word.
    #[inline]
    pub fn touch(&self) {
        let cur = self.0.load(Ordering::Relaxed);
        if cur & FREQ_MASK != FREQ_MASK {
            let _ =
                self.0
                    .compare_exchange(cur, cur + FREQ_ONE, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// The access frequency (0..=3).
    pub fn freq(&self) -> u64 {
        (self.0.load(Ordering::Relaxed) & FREQ_MASK) >> FREQ_SHIFT
    }

    /// Lowers the frequency by one if above 0 (S3-FIFO's main queue); returns what it was.
    pub fn decay_freq(&self) -> u64 {
        let old = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |cur| {
                (cur & FREQ_MASK != 0).then(|| cur - FREQ_ONE)
            });
        match old {
            Ok(cur) | Err(cur) => (cur & FREQ_MASK) >> FREQ_SHIFT,
        }
    }

    /// Forgets the access frequency (a folio changes queue). Stores only if it is set.
    pub fn clear_freq(&self) {
        if self.0.load(Ordering::Relaxed) & FREQ_MASK != 0 {
            self.0.fetch_and(!FREQ_MASK, Ordering::Relaxed);
        }
    }

    /// The reclaimer froze a folio it isolated: CAS from "count 2 (the index's and the
    /// isolation's), not LOCKED, DEAD, ERROR, DIRTY or WRITEBACK" to DEAD, dropping both. Context: as
    /// `try_freeze`, plus the caller holds the isolation reference.
    pub fn try_freeze_isolated(&self) -> bool {
        let cur = self.0.load(Ordering::Relaxed);
        if count(cur) != 2 || cur & UNFREEZABLE != 0 {
            return false;
        }
        self.0
            .compare_exchange(
                cur,
                (cur - 2 * ONE) | DEAD,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Write protocol W3 (DESIGN.md §8, `write::into_folio`): the writer, holding one pin
    /// besides the index's, takes LOCKED for its copy. One CAS from "count 2, uptodate,
    /// not LOCKED, not WRITEBACK, not DEAD". A concurrent pin (a pinned reader, a
    /// `PageRef`) makes it fail with `Pinned`: the writer then copies on write instead
    /// of changing bytes someone may be reading through a shared borrow. Because the
    /// CAS covers the count, a getter whose pin comes after it sees LOCKED and waits.
    pub fn try_lock_for_write(&self) -> WriteLock {
        let cur = self.0.load(Ordering::Relaxed);
        if cur & WRITEBACK != 0 {
            return WriteLock::Writeback;
        }
        if count(cur) != 2 || cur & (DEAD | LOCKED | ERROR) != 0 || cur & UPTODATE == 0 {
            return WriteLock::Pinned;
        }
        match self
            .0
            .compare_exchange(cur, cur | LOCKED, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => WriteLock::Locked(StateWord(cur)),
            Err(now) if now & WRITEBACK != 0 => WriteLock::Writeback,
            Err(_) => WriteLock::Pinned,
        }
    }

    /// A writer that changed no dirty state (it zeroed bytes past a new end of file)
    /// clears LOCKED. The caller wakes waiters.
    pub fn unlock_written_clean(&self) {
        let old = self.0.fetch_and(!LOCKED, Ordering::Release);
        debug_assert!(old & LOCKED != 0, "unlocked a folio that was not locked");
    }

    /// Write protocol W5: the copy is done; DIRTY set and LOCKED cleared in one step.
    /// Returns whether the folio was clean before. The caller wakes waiters.
    pub fn unlock_dirty(&self) -> bool {
        let old = self
            .0
            .fetch_update(Ordering::Release, Ordering::Relaxed, |cur| {
                Some((cur | DIRTY) & !LOCKED)
            })
            .expect("the closure always answers");
        debug_assert!(old & LOCKED != 0, "unlocked a folio that was not locked");
        old & DIRTY == 0
    }

    /// Writeback protocol B1 (`writeback`): DIRTY -> WRITEBACK, refused while a writer
    /// holds LOCKED or a writeback is in flight. A CAS loop: a reader's pin or unpin moves
    /// the count between the load and the CAS, and only retries it (one CAS that failed
    /// on it made a sync skip a dirty folio: issue 28, `tests/sync_stress.rs`). The
    /// caller holds the index lock with the slot checked (so the folio is this one), and
    /// takes the dirty blocks next.
    pub fn try_start_writeback(&self) -> bool {
        self.clear_dirty_unless(LOCKED | WRITEBACK | DEAD, WRITEBACK, Ordering::Acquire)
    }

    /// Writeback protocol B3: the write ended. `Redirty::Yes` (it failed) sets DIRTY
    /// again in the same step, so there is no instant at which the folio is clean and
    /// unwritten (reclaim would free it). The caller wakes waiters.
    pub fn end_writeback(&self, redirty: Redirty) {
        let set = if redirty == Redirty::Yes { DIRTY } else { 0 };
        let old = self
            .0
            .fetch_update(Ordering::Release, Ordering::Relaxed, |cur| {
                Some((cur | set) & !WRITEBACK)
            })
            .expect("the closure always answers");
        debug_assert!(
            old & WRITEBACK != 0,
            "ended a writeback that was not running"
        );
    }

    /// Truncation (or a file given up as failed) discards a folio's dirty state: the
    /// bytes will never be written. Context: the mapping's writer lock held, so no
    /// writer holds LOCKED; the caller waited for WRITEBACK to end. Returns whether the
    /// folio was dirty.
    pub fn discard_dirty(&self) -> bool {
        self.test_and_clear(DIRTY)
    }

    /// A given-up file's dirty state is dropped (`writeback::give_up`): DIRTY cleared
    /// from "DIRTY, not LOCKED, not WRITEBACK", so that it never races a writer's copy
    /// (whose W5 would leave the folio dirty with no index mark) or a writeback. A CAS
    /// loop, as `try_start_writeback`'s. False, changing nothing, if either holds the
    /// folio or it is clean.
    pub fn try_discard_dirty(&self) -> bool {
        self.clear_dirty_unless(LOCKED | WRITEBACK, 0, Ordering::AcqRel)
    }

    /// DIRTY cleared and `set` set in one step, unless the folio is clean or has one of
    /// `refused`: false then, changing nothing. Retries while only other bits (the count,
    /// the eviction hints) moved under it.
    fn clear_dirty_unless(&self, refused: u64, set: u64, success: Ordering) -> bool {
        let mut cur = self.0.load(Ordering::Relaxed);
        loop {
            if cur & DIRTY == 0 || cur & refused != 0 {
                return false;
            }
            match self.0.compare_exchange_weak(
                cur,
                (cur & !DIRTY) | set,
                success,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// Clears flags; returns whether any of them was set. Stores only when one is set.
    pub fn test_and_clear(&self, flags: u64) -> bool {
        if self.0.load(Ordering::Relaxed) & flags == 0 {
            return false;
        }
        self.0.fetch_and(!flags, Ordering::Relaxed) & flags != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle_of_a_folio() {
        crate::primitive::model(|| {
            let s = FolioState::new_free();
            assert_eq!(s.try_get(), GetOutcome::Dead, "a free frame cannot be got");
            s.revive_locked();
            assert_eq!(s.load().bits(), ONE | LOCKED);
            assert!(!s.try_freeze(), "locked folios are never frozen");
            s.finish_read_ok();
            assert_eq!(s.load().bits(), ONE | UPTODATE);
            assert_eq!(s.try_get(), GetOutcome::Got);
            assert!(!s.try_freeze(), "pinned folios are never frozen");
            assert_eq!(s.put(), PutOutcome::Alive);
            assert!(s.try_freeze());
            assert_eq!(s.try_get(), GetOutcome::Dead);
            s.mark_free();
            assert_eq!(s.load().bits(), DEAD);
        });
    }

    #[test]
    fn revive_keeps_transient_getters() {
        crate::primitive::model(|| {
            let s = FolioState::new_free();
            // A getter's step 1 lands on the free frame...
            s.0.fetch_add(ONE, Ordering::Relaxed);
            // ...the allocator revives it...
            s.revive_locked();
            // ...and the getter backs out (step 2): the new owner's reference is intact.
            s.0.fetch_sub(ONE, Ordering::Relaxed);
            assert_eq!(s.load().bits(), ONE | LOCKED);
        });
    }

    #[test]
    fn a_late_back_out_frees_a_released_incarnation() {
        crate::primitive::model(|| {
            let s = FolioState::new_free();
            s.0.fetch_add(ONE, Ordering::Relaxed); // getter step 1 on the free frame
            s.revive_locked();
            assert_eq!(
                s.abandon_locked(),
                PutOutcome::Alive,
                "the getter still counts"
            );
            // The getter's back-out is the last reference: it must free the frame.
            let new = s.0.fetch_sub(ONE, Ordering::AcqRel) - ONE;
            assert!(s.win_release(new));
            assert!(s.load().is_dead());
        });
    }

    #[test]
    fn error_path_frees_with_last_waiter() {
        crate::primitive::model(|| {
            let s = FolioState::new_free();
            s.revive_locked();
            assert_eq!(
                s.try_get(),
                GetOutcome::Got,
                "a waiter pins the locked folio"
            );
            assert_eq!(s.finish_read_err(), PutOutcome::Alive);
            assert!(s.load().is_error());
            assert!(!s.try_freeze());
            assert_eq!(s.put(), PutOutcome::Free);
            assert!(s.load().is_dead());
        });
    }

    /// Each test of a snapshot reads its own bit, and only it.
    #[test]
    fn state_word_tests_read_one_flag_each() {
        type Test = fn(StateWord) -> bool;
        let tests: [(u64, Test); 7] = [
            (DEAD, StateWord::is_dead),
            (LOCKED, StateWord::is_locked),
            (UPTODATE, StateWord::is_uptodate),
            (ERROR, StateWord::is_error),
            (READAHEAD, StateWord::is_readahead),
            (WORKINGSET, StateWord::is_workingset),
            (PREFETCHED, StateWord::is_prefetched),
        ];
        let all = COUNT_MASK | FREQ_MASK | tests.iter().map(|(flag, _)| flag).fold(0, |a, f| a | f);
        for (flag, test) in tests {
            assert!(test(StateWord(flag | 5)), "{flag:#x} set");
            assert!(
                !test(StateWord(all & !flag)),
                "{flag:#x} clear, every other bit set"
            );
        }
        let word = StateWord(DEAD | UPTODATE | (2 * FREQ_ONE) | 3);
        assert_eq!((word.count(), word.freq()), (3, 2));
        assert_eq!(
            format!("{word:?}"),
            "StateWord(0x20500000003: count 3 DEAD UPTODATE freq 2)"
        );
    }

    #[test]
    fn flags_store_only_on_change() {
        crate::primitive::model(|| {
            let s = FolioState::new_free();
            s.revive_locked();
            s.set_flags(PREFETCHED);
            s.set_flags(PREFETCHED);
            assert!(s.test_and_clear(PREFETCHED));
            assert!(!s.test_and_clear(PREFETCHED));
            for _ in 0..5 {
                s.touch();
            }
            assert_eq!(s.freq(), 3, "the frequency saturates at 3");
            assert_eq!(s.decay_freq(), 3);
            assert_eq!(s.freq(), 2);
            assert_eq!(s.load().count(), 1, "frequency bits never touch the count");
        });
    }
}
