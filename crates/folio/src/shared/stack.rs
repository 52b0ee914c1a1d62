//! A stack of frames in shared words, each frame listed or leased to one process: the
//! shape of a shared free list, and the first structure changed under a `HolderLock`.
//!
//! ```text
//!   base + 0..8          the lock line (lock.rs): lock, intent, 4 args, head, count
//!   base + 8..8+F        next[f]: the frame under f on the stack (NIL at the bottom)
//!   base + 8+F..8+2F     owner[f]: 0 while f is listed, else the word of the holder
//!                        that leased it (`Holder::word`)
//! ```
//!
//! Invariant (when no change is in flight, `check`): following `next` from `head` lists
//! `count` distinct frames, each with owner 0; every other frame has a non-zero owner.
//!
//! The changes, each under the lock, its intent published before its first store, its
//! stores absolute values (so `redo` may repeat any of them):
//! - `pop` (a lease): intent POP [f = head, next[f], count - 1, me]; stores owner[f] = me,
//!   head = next[f], count = count - 1.
//! - `push` (a lease returned): intent PUSH [f, head, count + 1]; stores next[f] = head,
//!   owner[f] = 0, head = f, count = count + 1.
//! - `sweep` (the steward, after a death): every frame leased to the dead holder pushed
//!   back, each push its own intent, under one hold.
//!
//! A frame is never lost nor listed twice, whoever dies where: a death with the lock
//! held is finished by the next holder (`lock.rs`), a death holding a lease by the sweep.
//!
//! Protection: every word by the lock. Limits: up to 2^32 - 1 frames; the sweep walks
//! every owner word (a death is rare; a real free list would keep each slot's leases on
//! a list of its own).

use super::lock::{Held, HolderLock, Intent, LINE_FREE_WORDS, LINE_WORDS};
use super::slot::SlotTable;
use super::{Died, Holder, Run, Word};
use crate::primitive::{AtomicU64, Ordering};

/// No frame: the bottom of the stack.
const NIL: u64 = u64::MAX;

const POP: u64 = 1;
const PUSH: u64 = 2;

/// A frame's number in the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Frame(pub(crate) u32);

/// A stack of `frames` frames at `base` of a region.
#[derive(Debug)]
pub(crate) struct FrameStack<'r> {
    region: &'r [AtomicU64],
    lock: HolderLock<'r>,
    base: Word,
    frames: u32,
}

/// What `check` found: the frames listed, and each leased frame with its holder.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Census {
    pub(crate) listed: u32,
    pub(crate) leased: Vec<(Frame, Holder)>,
}

impl<'r> FrameStack<'r> {
    /// The words a stack of `frames` takes.
    pub(crate) fn words(frames: u32) -> u32 {
        LINE_WORDS + 2 * frames
    }

    /// A view of the stack at `base` (8-word aligned), as `format` left it.
    pub(crate) fn new(region: &'r [AtomicU64], base: Word, frames: u32) -> FrameStack<'r> {
        assert!(frames < u32::MAX, "too many frames");
        assert!(
            base.index() + Self::words(frames) as usize <= region.len(),
            "the stack lies past the region"
        );
        FrameStack {
            region,
            lock: HolderLock::new(region, base),
            base,
            frames,
        }
    }

    /// Lists every frame (0 on top), the lock free.
    ///
    /// Context: the region's maker, before any other process sees it.
    pub(crate) fn format(&self) {
        for offset in 0..LINE_WORDS {
            self.region[self.base.at(offset).index()].store(0, Ordering::Relaxed);
        }
        for f in 0..self.frames {
            let next = if f + 1 < self.frames {
                u64::from(f + 1)
            } else {
                NIL
            };
            self.next(f).store(next, Ordering::Relaxed);
            self.owner(f).store(0, Ordering::Relaxed);
        }
        let head = if self.frames > 0 { 0 } else { NIL };
        self.head().store(head, Ordering::Relaxed);
        self.count()
            .store(u64::from(self.frames), Ordering::Release);
    }

    fn head(&self) -> &AtomicU64 {
        &self.region[self.base.at(LINE_FREE_WORDS[0]).index()]
    }

    fn count(&self) -> &AtomicU64 {
        &self.region[self.base.at(LINE_FREE_WORDS[1]).index()]
    }

    fn next(&self, frame: u32) -> &AtomicU64 {
        assert!(frame < self.frames, "no frame {frame}");
        &self.region[self.base.at(LINE_WORDS + frame).index()]
    }

    fn owner(&self, frame: u32) -> &AtomicU64 {
        assert!(frame < self.frames, "no frame {frame}");
        &self.region[self.base.at(LINE_WORDS + self.frames + frame).index()]
    }

    /// The lock (diagnostics, tests).
    pub(crate) fn lock_line(&self) -> &HolderLock<'r> {
        &self.lock
    }

    /// The stores of a change, in order, each followed by `step` (the holder's steps; a
    /// redo's are none).
    fn apply(
        &self,
        intent: &Intent,
        mut store: impl FnMut(&AtomicU64, u64) -> Result<(), Died>,
    ) -> Result<(), Died> {
        let [frame, a, b, c] = intent.args;
        let frame = u32::try_from(frame).expect("an intent names a frame");
        match intent.op {
            POP => {
                // a: the new head, b: the new count, c: the lessee.
                store(self.owner(frame), c)?;
                store(self.head(), a)?;
                store(self.count(), b)
            }
            PUSH => {
                // a: the old head, b: the new count.
                store(self.next(frame), a)?;
                store(self.owner(frame), 0)?;
                store(self.head(), u64::from(frame))?;
                store(self.count(), b)
            }
            op => panic!("an intent with an unknown operation {op}"),
        }
    }

    /// A dead holder's change finished (T2 of `lock.rs`).
    fn redo(&self, intent: &Intent) {
        let redone = self.apply(intent, |word, value| {
            word.store(value, Ordering::Release);
            Ok(())
        });
        assert_eq!(redone, Ok(()));
    }

    /// The change `intent` made by the holder of `held`: published (M1), stored (M2),
    /// cleared (M3); under `Flaw::IntentAfterMutation`, stored before it is published.
    fn change<R: Run>(&self, held: &Held<'_, '_>, intent: &Intent, run: &R) -> Result<(), Died> {
        held.change(intent, run, |store| self.apply(intent, store))
    }

    fn take<R: Run>(
        &self,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Held<'_, 'r>, Died> {
        self.lock.lock(me, slots, run, |intent| self.redo(intent))
    }

    /// Leases the top frame to `me`, or `None` if none is listed.
    ///
    /// Context: `me` is LIVE in `slots`; takes the stack's lock (spins while a live
    /// holder holds it).
    pub(crate) fn pop<R: Run>(
        &self,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Option<Frame>, Died> {
        let held = self.take(me, slots, run)?;
        let head = self.head().load(Ordering::Acquire);
        if head == NIL {
            assert_eq!(
                self.count().load(Ordering::Relaxed),
                0,
                "an empty stack counts frames"
            );
            held.unlock(run)?;
            return Ok(None);
        }
        let frame = u32::try_from(head).expect("a head names a frame");
        let count = self.count().load(Ordering::Relaxed);
        assert!(count > 0, "a listed frame {frame} with a count of 0");
        assert_eq!(
            self.owner(frame).load(Ordering::Relaxed),
            0,
            "a listed frame {frame} is leased"
        );
        let next = self.next(frame).load(Ordering::Relaxed);
        let intent = Intent {
            op: POP,
            args: [head, next, count - 1, me.word()],
        };
        self.change(&held, &intent, run)?;
        held.unlock(run)?;
        Ok(Some(Frame(frame)))
    }

    /// Returns `frame`, leased to `me`, to the stack.
    ///
    /// Context: as `pop`.
    pub(crate) fn push<R: Run>(
        &self,
        me: Holder,
        frame: Frame,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        let held = self.take(me, slots, run)?;
        self.push_locked(&held, frame, me, run)?;
        held.unlock(run)
    }

    fn push_locked<R: Run>(
        &self,
        held: &Held<'_, '_>,
        frame: Frame,
        lessee: Holder,
        run: &R,
    ) -> Result<(), Died> {
        assert_eq!(
            self.owner(frame.0).load(Ordering::Relaxed),
            lessee.word(),
            "a push of frame {} that {lessee:?} does not lease",
            frame.0
        );
        let head = self.head().load(Ordering::Relaxed);
        let count = self.count().load(Ordering::Relaxed);
        assert!(count < u64::from(self.frames), "a push onto a full stack");
        let intent = Intent {
            op: PUSH,
            args: [u64::from(frame.0), head, count + 1, 0],
        };
        self.change(held, &intent, run)
    }

    /// The steward's sweep of a dead process: takes the lock (over from `dead`, if it
    /// held it), and pushes back every frame leased to `dead`. Returns how many.
    ///
    /// Context: the steward (`me`), after `SlotTable::mark_dead(dead)`, before
    /// `free_dead(dead)`.
    pub(crate) fn sweep<R: Run>(
        &self,
        dead: Holder,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<u32, Died> {
        assert!(!slots.is_live(dead), "a sweep of a live process {dead:?}");
        let held = self.take(me, slots, run)?;
        let mut returned = 0;
        for f in 0..self.frames {
            if self.owner(f).load(Ordering::Relaxed) == dead.word() {
                self.push_locked(&held, Frame(f), dead, run)?;
                returned += 1;
            }
        }
        held.unlock(run)?;
        Ok(returned)
    }

    /// The invariant, checked on a quiet stack (no lock held, no intent published).
    ///
    /// Context: nobody changes the stack meanwhile (a test, or the steward alone).
    pub(crate) fn check(&self) -> Result<Census, String> {
        if let Some(holder) = self.lock.holder() {
            return Err(format!("the lock is held by {holder:?}"));
        }
        if self.lock.intent_published() {
            return Err("an intent is published".into());
        }
        let mut listed_at = vec![false; self.frames as usize];
        let mut at = self.head().load(Ordering::Acquire);
        let mut listed = 0u32;
        while at != NIL {
            let frame = u32::try_from(at).ok().filter(|f| *f < self.frames);
            let Some(frame) = frame else {
                return Err(format!("the stack names frame {at}"));
            };
            if std::mem::replace(&mut listed_at[frame as usize], true) {
                return Err(format!("frame {frame} is listed twice"));
            }
            let owner = self.owner(frame).load(Ordering::Relaxed);
            if owner != 0 {
                return Err(format!(
                    "listed frame {frame} is leased to {:?}",
                    Holder::from_word(owner)
                ));
            }
            listed += 1;
            at = self.next(frame).load(Ordering::Relaxed);
        }
        let count = self.count().load(Ordering::Relaxed);
        if count != u64::from(listed) {
            return Err(format!("the count says {count}, the stack lists {listed}"));
        }
        let mut leased = Vec::new();
        for (f, listed) in listed_at.iter().enumerate() {
            if !listed {
                let owner = self.owner(f as u32).load(Ordering::Relaxed);
                if owner == 0 {
                    return Err(format!("frame {f} is neither listed nor leased: lost"));
                }
                leased.push((Frame(f as u32), Holder::from_word(owner)));
            }
        }
        Ok(Census { listed, leased })
    }
}
