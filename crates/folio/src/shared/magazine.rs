//! A process's magazine of order-0 frames (issue 45 step 4, docs/sharing.md "The free
//! lists"): frames the process has leased from the shared allocator (buddy.rs) in a batch
//! and not handed out yet, so that a miss takes the shared lock once per batch, not once
//! per frame.
//!
//! The magazine is the process's own memory (a `Vec` of frame numbers, allocated once):
//! nothing in the shared region changes when a frame goes in or out of it. Each frame in
//! it is LEASED(0, me) in the allocator's state words, as a frame handed out is, so the
//! steward's sweep of a dead process returns its magazine with everything else it held:
//! there is no separate lease log to keep consistent.
//!
//! - `alloc`: the last frame put in; an empty magazine first leases `batch` frames in one
//!   hold of the lock (`SharedBuddy::lease_batch`: one block of up to `batch` frames
//!   carved, when one is free).
//! - `free`: the frame goes in; a full magazine (2 x `batch`) first returns its oldest
//!   `batch` frames in one hold (`return_batch`), keeping the most recently used.
//! - `drain`: every frame returned (a clean detach).
//!
//! Protection: the magazine by its owner (`&mut self`, one thread; a process with many
//! threads keeps one per thread or a lock around it); the shared words by the
//! allocator's lock. Limits: order 0 only (larger orders go to `SharedBuddy::alloc`);
//! frames in a magazine are held from the others until they are returned (at most 2 x
//! `batch` per magazine).

use super::buddy::{Order, SharedBuddy};
use super::slot::SlotTable;
use super::stack::Frame;
use super::{Died, Holder, Run};

/// A process's order-0 frames (module docs).
#[derive(Debug)]
pub(crate) struct Magazine {
    me: Holder,
    frames: Vec<Frame>,
    batch: u32,
}

impl Magazine {
    /// An empty magazine of `me`'s that leases and returns `batch` frames at a time.
    ///
    /// Context: any; allocates its room once, here.
    pub(crate) fn new(me: Holder, batch: u32) -> Magazine {
        assert!(batch >= 1, "a batch of no frames");
        Magazine {
            me,
            frames: Vec::with_capacity(2 * batch as usize),
            batch,
        }
    }

    /// How many frames the magazine holds.
    pub(crate) fn len(&self) -> usize {
        self.frames.len()
    }

    /// The frames the magazine holds (the next one `alloc` hands out last).
    pub(crate) fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// An order-0 frame leased to `me`, or `None` if the magazine is empty and the
    /// allocator has no free frame.
    ///
    /// Context: `me` is LIVE in `slots`; may take the allocator's lock once.
    pub(crate) fn alloc<R: Run>(
        &mut self,
        buddy: &SharedBuddy<'_>,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Option<Frame>, Died> {
        if self.frames.is_empty() {
            buddy.lease_batch(self.batch, self.me, &mut self.frames, slots, run)?;
        }
        Ok(self.frames.pop())
    }

    /// Takes back `frame`, an order-0 frame leased to `me` (asserted).
    ///
    /// Context: as `alloc`.
    pub(crate) fn free<R: Run>(
        &mut self,
        frame: Frame,
        buddy: &SharedBuddy<'_>,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        assert!(
            buddy.is_leased(frame, Order(0), self.me),
            "a free of frame {} that {:?} does not lease at order 0",
            frame.0,
            self.me
        );
        if self.frames.len() >= 2 * self.batch as usize {
            let batch = self.batch as usize;
            buddy.return_batch(&self.frames[..batch], self.me, slots, run)?;
            self.frames.drain(..batch);
        }
        self.frames.push(frame);
        Ok(())
    }

    /// Returns every frame in the magazine.
    ///
    /// Context: as `alloc`.
    pub(crate) fn drain<R: Run>(
        &mut self,
        buddy: &SharedBuddy<'_>,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        if !self.frames.is_empty() {
            buddy.return_batch(&self.frames, self.me, slots, run)?;
            self.frames.clear();
        }
        Ok(())
    }
}
