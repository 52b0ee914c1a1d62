//! Eviction policies: which folios reclaim drops, behind one trait.
//!
//! Two policies, on the same mechanism so they can be compared on the same trace
//! (`folio-trace`):
//! - [`s3fifo`]: S3-FIFO (Yang et al., SOSP 2023), the default: a small FIFO that new
//!   folios enter, a main FIFO for those that proved themselves, and a ghost queue that is
//!   the index's shadow entries.
//! - [`lru`]: the kernel's two lists (inactive, active) with refault distance
//!   (mm/workingset.c's idea).
//!
//! Mechanism shared by both: the queues are intrusive lists over the arena's link words
//! (`crate::list`), under the policy's one mutex. A hit never takes that mutex: it raises the
//! folio's 2-bit frequency in its state word (`FolioState::touch`), and only when the
//! count changes. The policy reads the frequency when a folio reaches the end of a queue.
//! Evicted folios leave a shadow entry in the index whose value the policy chose; when the
//! page comes back, the insertion hands that value back to the policy, which decides if it
//! is a refault within the workingset.
//!
//! Busy folios (pinned, or LOCKED for I/O) cannot be evicted now, but they must not hide
//! those that can. `isolate` sets each busy folio it meets aside, on a list of its own for
//! the rest of the call, and puts it back at its queue's tail at the end (`put_back_busy`),
//! where rotating it would have put it. While set aside it still counts in its queue's
//! size, so it changes where the policy finds victims, not how it balances its queues;
//! but a queue whose every folio was found busy is empty for the rest of the call, and
//! the policy turns to its other queue (S3-FIFO: small -> main; LRU: deactivation). Found
//! by the simulation: a small queue all pinned (seed 96), an inactive list all pinned
//! (seed 2062) stopped reclaim while most of the cache could be evicted.
//!
//! Lock order: a mapping's index lock -> the policy's mutex. Insertion and removal happen
//! with the index lock held, so a folio is on a queue exactly while it is in the index;
//! isolation takes only the policy's mutex.

pub mod lru;
pub mod noreuse;
pub mod s3fifo;

use crate::arena::Arena;
use crate::list::List;
use crate::types::FrameId;

/// Which eviction policy a cache uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EvictionKind {
    /// S3-FIFO (SOSP 2023): a small FIFO for new folios, a main FIFO, and a ghost queue
    /// made of the index's shadow entries.
    #[default]
    S3Fifo,
    /// The kernel's two lists (inactive, active) with refault distance.
    TwoListLru,
}

/// What a read says about its pages' future (`File::read_at_hint`, `Advice::NoReuse`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadHint {
    /// Pages the cache keeps by its eviction policy.
    #[default]
    Normal,
    /// A read that will not come back: pages it brings in are evicted first (before
    /// anything the eviction policy holds), and pages it finds cached are not counted as
    /// used, so a scan of any size never displaces the working set.
    NoReuse,
}

/// A folio taken off its queue for eviction, with a reference held by the isolation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Isolated {
    pub frame: FrameId,
    pub pages: u64,
    /// The shadow entry to leave in the index if it is evicted.
    pub shadow: u64,
}

/// What `insert` learned from the shadow entry a folio replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// A page not seen recently (no shadow, or one too old).
    Cold,
    /// A refault within the workingset: the page was evicted recently and came back.
    Refault,
}

/// An eviction policy. Both sides' duties:
///
/// The caller (the cache) guarantees:
/// - `insert` is called once for each folio it puts in an index, while it holds that
///   index's lock, with the shadow value the insertion replaced (if any); `remove` is
///   called while it holds the lock, when a folio leaves the index by any way other than
///   the eviction of an isolated folio.
/// - For each folio returned by `isolate`, it either evicts it (freezes it, leaves the
///   folio's `shadow` in the index, frees it) or, under the index lock and only if the
///   folio is still in the index, hands it back with `putback`; then drops the isolation
///   reference.
///
/// The implementation must:
/// - Keep each folio it was given on exactly one of its queues, or isolated, until it is
///   removed; never touch the link words of frames it was not given.
/// - In `isolate`, take a reference (`FolioState::try_get`) on every folio it returns,
///   skip (and keep) folios that are LOCKED or pinned, and do bounded work (each queue
///   entry looked at a bounded number of times per call). A busy folio is skipped, never
///   a reason to stop: the call goes on with the policy's other folios, and returns
///   nothing only when every folio it looked at was busy or earned another round.
/// - Never free or write back anything itself, and never take an index lock.
pub trait EvictionPolicy: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;

    /// A folio of `pages` entered an index, replacing `shadow`.
    fn insert(&self, arena: &Arena, frame: FrameId, pages: u64, shadow: Option<u64>) -> Admission;

    /// A folio of `pages` entered an index under `ReadHint::NoReuse` (a one-time scan):
    /// it should leave before the working set. `noreuse::NoReuseFirst` queues it apart;
    /// a policy alone takes it as a cold insert.
    fn insert_no_reuse(&self, arena: &Arena, frame: FrameId, pages: u64) {
        self.insert(arena, frame, pages, None);
    }

    /// A folio left its index other than by eviction.
    fn remove(&self, arena: &Arena, frame: FrameId, pages: u64);

    /// Isolates victims worth about `want_pages` pages, appending them to `out`. Returns
    /// how many folios it skipped because they were pinned or locked.
    fn isolate(&self, arena: &Arena, want_pages: u64, out: &mut Vec<Isolated>) -> u64;

    /// An isolated folio could not be evicted and is still in its index: back on a queue.
    fn putback(&self, arena: &Arena, victim: Isolated);

    /// A shadow value that gives its page no refault credit (a page evicted unused).
    fn shadow_cold(&self) -> u64;

    /// The cache's capacity is now `capacity_pages`: a policy with sizes drawn from it
    /// (queue targets, how far back a shadow counts) takes the new ones. Evicts nothing.
    fn resize(&self, _capacity_pages: u64) {}
}

/// Builds the policy for a cache of `frames` frames, behind the no-reuse queue.
pub fn new_policy(kind: EvictionKind, frames: u64) -> Box<dyn EvictionPolicy> {
    let policy: Box<dyn EvictionPolicy> = match kind {
        EvictionKind::S3Fifo => Box::new(s3fifo::S3Fifo::new(frames)),
        EvictionKind::TwoListLru => Box::new(lru::TwoListLru::new()),
    };
    Box::new(noreuse::NoReuseFirst::new(policy))
}

/// Whether a queued folio cannot be evicted now (I/O in flight, someone holds it, or it
/// is dirty or under writeback: written back first, DESIGN.md §8).
fn busy(arena: &Arena, frame: FrameId) -> bool {
    let state = arena.meta(frame).state.load();
    state.is_locked() || state.count() > 1 || state.is_dirty() || state.is_writeback()
}

/// Takes the isolation reference; false if the folio is dying (it will be removed).
fn isolate_ref(arena: &Arena, frame: FrameId) -> bool {
    match arena.meta(frame).state.try_get() {
        crate::refcount::GetOutcome::Got => true,
        crate::refcount::GetOutcome::Dead => false,
        crate::refcount::GetOutcome::DeadFree => {
            // Cannot happen for a folio on a queue (it holds the index's reference), but
            // if it did, the frame is ours to free.
            arena.free(frame);
            false
        }
    }
}

/// The pages of the folio at `frame` (its order is stable while it is cached).
fn pages_of(arena: &Arena, frame: FrameId) -> u64 {
    arena.meta(frame).identity().2.pages()
}

/// Ends an isolation: the folios set aside on `busy` go back to the tail of `queue`, in
/// the order they were met.
///
/// Context: the policy's mutex held (by the `isolate` that set them aside).
fn put_back_busy(arena: &Arena, busy: &mut List, queue: &mut List) {
    while let Some(frame) = busy.pop_front(&arena.links, |f| pages_of(arena, f)) {
        queue.push_back(&arena.links, frame, pages_of(arena, frame));
    }
}

/// What the policies' unit tests build on: folios in the states the cache gives them.
#[cfg(test)]
mod testing {
    use super::{Admission, EvictionPolicy};
    use crate::arena::{Arena, FolioUse};
    use crate::folio_meta::MappingId;
    use crate::refcount::GetOutcome;
    use crate::types::{FrameId, Order, PageIndex};

    /// An uptodate order-0 folio for `page`, holding only the index's reference, inserted
    /// in `policy` as the cache inserts it: over `shadow`, if the page had one.
    pub(super) fn cached(
        arena: &Arena,
        policy: &dyn EvictionPolicy,
        page: u64,
        shadow: Option<u64>,
    ) -> (FrameId, Admission) {
        let order = Order::new(0);
        let frame = arena.alloc(order, FolioUse::Request).expect("a free frame");
        let meta = arena.meta(frame);
        meta.set_identity(MappingId(0), PageIndex(page), order);
        meta.state.finish_read_ok();
        (frame, policy.insert(arena, frame, order.pages(), shadow))
    }

    /// A reader's reference: the folio is busy until it is dropped.
    pub(super) fn pin(arena: &Arena, frame: FrameId) {
        assert_eq!(arena.meta(frame).state.try_get(), GetOutcome::Got);
    }
}
