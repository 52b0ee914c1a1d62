//! The cache's memory and who decides what leaves it: the arena of frames, the eviction
//! policy, the counters, the dirty budget, and how much readahead the memory holds
//! without thrashing (the cache-wide readahead limit, which reclaim tells when it evicts
//! pages read ahead and never read), shared by every part below the page cache (mapping,
//! reclaim) without them knowing the page cache itself.
//!
//! Protection: each part has its own (arena: free-list mutex; policy: its mutex;
//! counters: atomics; readahead limit: two atomic words, CAS).

use crate::arena::Arena;
use crate::eviction::{Admission, EvictionPolicy, Isolated};
use crate::readahead::ReadaheadLimit;
use crate::refcount::PutOutcome;
use crate::stats::Counters;
use crate::types::FrameId;
use crate::write::budget::DirtyBudget;

/// The cache's memory as the layers below the page cache see it. Its parts are private:
/// callers reach the arena, the counters, the dirty budget and the readahead limit through
/// the methods below, and the eviction policy through verbs that pass it the arena.
#[derive(Debug)]
pub(crate) struct Memory {
    arena: Arena,
    policy: Box<dyn EvictionPolicy>,
    counters: Counters,
    /// Pages that writes keep from reclaim, and the writers throttled by it.
    dirty: DirtyBudget,
    /// The cache-wide maximum readahead window: each active stream's share, lowered while
    /// readahead thrashes (`readahead` module docs).
    readahead_limit: ReadaheadLimit,
}

impl Memory {
    /// The memory of a cache of `frames` frames now over `arena`, with fresh counters.
    pub fn new(
        arena: Arena,
        policy: Box<dyn EvictionPolicy>,
        dirty: DirtyBudget,
        readahead_limit: ReadaheadLimit,
    ) -> Memory {
        Memory {
            arena,
            policy,
            counters: Counters::default(),
            dirty,
            readahead_limit,
        }
    }

    /// The frames and their side table.
    #[inline]
    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    /// The cache's event counters (`stats::bump` them).
    #[inline]
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The dirty budget: charged by writes, uncharged as pages are written or dropped.
    #[inline]
    pub fn dirty_budget(&self) -> &DirtyBudget {
        &self.dirty
    }

    /// The cache-wide readahead limit.
    #[inline]
    pub fn readahead_limit(&self) -> &ReadaheadLimit {
        &self.readahead_limit
    }

    /// The eviction policy's name (`Stats::eviction`).
    pub fn eviction_name(&self) -> &'static str {
        self.policy.name()
    }

    /// Hands a folio just inserted in its index to the eviction policy (`shadow`: the
    /// evicted page's shadow entry it replaced, for refault detection).
    ///
    /// Context: the folio's index lock held.
    pub fn make_evictable(&self, frame: FrameId, pages: u64, shadow: Option<u64>) -> Admission {
        self.policy.insert(&self.arena, frame, pages, shadow)
    }

    /// As `make_evictable`, for a page read under `ReadHint::NoReuse`: evicted first, no
    /// refault credit.
    pub fn make_evictable_first(&self, frame: FrameId, pages: u64) {
        self.policy.insert_no_reuse(&self.arena, frame, pages);
    }

    /// Takes a folio leaving its index out of the eviction policy.
    ///
    /// Context: the folio's index lock held.
    pub fn forget_evictable(&self, frame: FrameId, pages: u64) {
        self.policy.remove(&self.arena, frame, pages);
    }

    /// Isolates up to `want_pages` of victims into `out`; returns how many were busy.
    ///
    /// Context: no index lock held (reclaim).
    pub fn isolate_victims(&self, want_pages: u64, out: &mut Vec<Isolated>) -> u64 {
        self.policy.isolate(&self.arena, want_pages, out)
    }

    /// Gives an isolated victim that could not be evicted back to the policy.
    pub fn put_back_victim(&self, victim: Isolated) {
        self.policy.putback(&self.arena, victim);
    }

    /// Resizes what is drawn from the capacity here: the eviction queues and the
    /// readahead share (the dirty budget's limits are set by the capacity's control).
    pub fn resize(&self, frames: u64) {
        self.policy.resize(frames);
        self.readahead_limit
            .set_frames(u32::try_from(frames).expect("frames fit the arena"));
    }

    /// Drops a reference; frees the folio if it was the last one.
    #[inline]
    pub fn put_folio(&self, frame: FrameId) {
        if self.arena.meta(frame).state.put() == PutOutcome::Free {
            self.arena.free(frame);
        }
    }
}
