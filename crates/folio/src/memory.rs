//! The cache's memory and who decides what leaves it: the arena of frames, the eviction
//! policy, the counters, the dirty budget, and how much readahead the memory holds
//! without thrashing (the cache-wide readahead limit, which reclaim tells when it evicts
//! pages read ahead and never read), shared by every part below the page cache (mapping,
//! reclaim) without them knowing the page cache itself.
//!
//! Protection: each part has its own (arena: free-list mutex; policy: its mutex;
//! counters: atomics; readahead limit: two atomic words, CAS).

use crate::arena::Arena;
use crate::eviction::EvictionPolicy;
use crate::readahead::ReadaheadLimit;
use crate::refcount::PutOutcome;
use crate::stats::Counters;
use crate::types::FrameId;
use crate::write::budget::DirtyBudget;

#[derive(Debug)]
pub(crate) struct Memory {
    pub arena: Arena,
    pub policy: Box<dyn EvictionPolicy>,
    pub counters: Counters,
    /// Pages that writes keep from reclaim, and the writers throttled by it.
    pub dirty: DirtyBudget,
    /// The cache-wide maximum readahead window: each active stream's share, lowered while
    /// readahead thrashes (`readahead` module docs).
    pub readahead_limit: ReadaheadLimit,
}

impl Memory {
    /// Drops a reference; frees the folio if it was the last one.
    pub fn put_folio(&self, frame: FrameId) {
        if self.arena.meta(frame).state.put() == PutOutcome::Free {
            self.arena.free(frame);
        }
    }
}
