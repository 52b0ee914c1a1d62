//! The cache's memory and who decides what leaves it: the arena of frames, the eviction
//! policy, the counters and the dirty budget, shared by every part below the page cache (mapping,
//! reclaim) without them knowing the page cache itself.
//!
//! Protection: each part has its own (arena: free-list mutex; policy: its mutex;
//! counters: atomics).

use crate::arena::Arena;
use crate::dirty::DirtyBudget;
use crate::eviction::EvictionPolicy;
use crate::refcount::PutOutcome;
use crate::stats::Counters;
use crate::types::FrameId;

#[derive(Debug)]
pub(crate) struct Memory {
    pub arena: Arena,
    pub policy: Box<dyn EvictionPolicy>,
    pub counters: Counters,
    /// Pages that writes keep from reclaim, and the writers throttled by it.
    pub dirty: DirtyBudget,
}

impl Memory {
    /// Drops a reference; frees the folio if it was the last one.
    pub fn put_folio(&self, frame: FrameId) {
        if self.arena.meta(frame).state.put() == PutOutcome::Free {
            self.arena.free(frame);
        }
    }
}
