//! The index: one mapping's pages, a 64-way radix tree in the shape of the kernel's xarray.
//!
//! Design: each node has 64 slots and a `shift` (6 x its level above the leaves); a slot
//! of a node with shift `s` covers `64^(s/6)` pages. A slot holds one of:
//!
//! ```text
//!   0                         empty
//!   node pointer   (tag 00)   the next level down
//!   folio          (tag 01)   frame << 6 | order << 2: the head slot of a folio
//!   shadow value   (tag 10)   value << 2: what eviction left behind (workingset)
//!   sibling        (tag 11)   frame << 12 | order << 8 | head slot << 2: a tail slot of a
//!                             large folio, in the same node (the folio repeated, so that
//!                             a look-up of a tail page needs no second load)
//! ```
//!
//! A folio of order k lives in the node whose shift is `6 * (k / 6)`, in `2^(k % 6 ...)`
//! consecutive slots: the head slot holds the folio, the others hold siblings that point
//! at it. So an order-9 folio (512 pages) is 8 slots of a level-1 node, an order-2 folio 4
//! slots of a leaf.
//!
//! The parts, one file each:
//! - `node`: the slot encoding, the node, the root and the type-stable node pool; all of
//!   the index's `unsafe` is there, behind an API whose node references are bounded by
//!   the borrow of the index.
//! - `lookup`: the lock-free walks, every one a method of `Index`: `lookup` (one page, the
//!   hit path), `visit` (the entries of a range), `next_present`, `next_miss`,
//!   `prev_miss` and `gaps` (what the miss path and the readahead policy ask).
//! - `guard`: the write guard's methods: run insertion, removal, shadows, growth, pruning.
//! - `mark`: the xarray's marks for the write side (`Mark::Dirty`, `Mark::Towrite`): set
//!   and cleared under the guard, propagated up to the root, walked without descending
//!   into unmarked subtrees (`marked_walk`), and `tag_range` (the kernel's
//!   `tag_pages_for_writeback`). A folio's marks are on its head slot; removal clears them.
//!   Memory: a 64-bit bitmap per mark per node, 16 bytes of a node's 536 (3%).
//!
//! Readers take no lock and pin nothing: they walk loading each slot with Acquire.
//! Writers serialise on the index's mutex, held through an `IndexWriteGuard` that every
//! mutating method is defined on, so no function can be called "with the lock maybe
//! held".
//!
//! Node memory is type-stable (the kernel's `SLAB_TYPESAFE_BY_RCU` idea, without the RCU):
//! a node that leaves the tree goes to the index's node pool and is only ever reused as a
//! node of the same index; nodes are freed when the index is dropped. So every pointer a
//! reader loads points at a valid `Node` for as long as it can hold it (it borrows the
//! index), whatever writers do meanwhile, and a walk needs no epoch guard. A reader that
//! raced with a writer may walk a node that was unlinked or reused elsewhere and come back
//! with a stale entry, never with freed memory: callers validate what they found (the hit
//! path checks the folio's identity and version; `Mapping::find_get` re-checks the slot
//! and the identity under its reference; the range walks are hints that the insertion
//! re-checks slot by slot under the lock), and a walk is bounded by the tree's height. This replaces the epoch-based reclamation DESIGN.md §2
//! asks for, because it measured worse on the hit path: a crossbeam-epoch `pin()` per
//! read (a SeqCst fence and a thread-local look-up) took 16-18 ns of a 62 ns 64-byte hit
//! here, and with it gone (and the hit counter's look-up shortened) a hit went from 470 to
//! 328 instructions (callgrind). The price: a mapping keeps its peak number of nodes until
//! it is dropped (`Index::nodes_allocated`, counted in `Stats::metadata_bytes`).
//!
//! Insertion of a contiguous run (seeds 000/001 and 003): `IndexWriteGuard::insert_run`
//! places a whole run of folios in ONE hold of the lock and ONE walk: a cursor keeps the
//! current node while consecutive folios fall in it, each folio's slots are checked for
//! conflicts (a folio or sibling already there), shadow entries in the way are collected
//! with the page they covered, and the folio is stored. A conflicting folio is skipped and
//! reported; the others go in. A subtree holding only shadows in the way of a larger folio
//! is collapsed (its shadows are collected).
//!
//! Shadows of large folios: eviction leaves the shadow value in every slot the folio held
//! (no siblings: a shadow has no head to point at), so an evicted order-9 folio is the
//! same shadow in 8 slots of a level-1 node, each covering 64 pages. A smaller folio
//! inserted under such a slot splits it as the kernel's `xas_split` does: the new node
//! gets the shadow in all 64 of its slots before it is linked, and the folio then
//! collects the shadow from its own slots (reported at its own pages, where `filemap`
//! looks for it). The pages it does not cover keep their shadow, so their refaults are
//! still recognised, and the shadow log still expires every copy: `remove_shadows` walks
//! the evicted folio's pages and empties whichever slot holds each one, at any level.
//!
//! Growing the tree (`extend`): a root that holds entries goes down into slot 0 of a new
//! root one level up, as often as needed. An empty root (every entry was removed) is not
//! pushed down, where it would stay as an empty non-root node: it is replaced by a new
//! root of the shift needed and retired to the pool like a pruned node.
//!
//! Nodes are allocated before the lock is taken (`Index::lock_for_insert`), as many as a
//! lock-free walk finds missing on the run's path (`nodes_needed`: none when its leaf is
//! there, as it is for most misses of a file already read); an insertion that needs more
//! (a writer changed the path meanwhile) allocates under the lock. Those
//! fresh nodes that the insertion did not link are freed when the guard drops: no reader
//! can have seen them, and a reserve kept per index would cost every small cached file
//! several nodes (about 6 KiB each, docs/reliability.md finding 7).
//!
//! What a reader may see while a writer changes the tree, transition by transition (each
//! store is a Release that the reader's Acquire load pairs with):
//! - A node is filled (shadows copied in, or a pooled node reset) before its pointer is
//!   stored in its parent or the root: a reader that loads the pointer sees it filled.
//! - A folio's head slot is stored before its siblings, and removal clears the siblings
//!   before the head: a range walk that finds a sibling finds the head. `lookup` takes
//!   the folio from the sibling itself, which repeats it: a sibling of a folio being
//!   removed is a stale entry like its head, turned away by the hit path's identity
//!   check or `find_get`'s re-check. A reader that loads a tail slot before its sibling
//!   is stored sees what the slot held (empty, or the shadow the folio is replacing) and
//!   takes the miss path, which finds the folio under the lock. A shadow from `lookup`
//!   is only ever a miss: shadow values are consumed from `insert_run`'s outcome, under
//!   the lock.
//! - A node unlinked (pruned, collapsed, or an empty root replaced) goes to the pool and
//!   may be reused anywhere in this index while a reader still walks it: the reader gets
//!   a stale entry, or an empty one, and validates it (above); the shift checks bound the
//!   walk.
//!
//! Invariants (checked by `check_invariants` in tests):
//! - A node's `used` counts its non-empty slots; a non-root node is never empty after an
//!   operation (removals prune, growth replaces an empty root).
//! - Sibling slots point at a head slot of the same node that holds a folio, carry that
//!   folio's frame and order, and follow it contiguously; a folio's slots are aligned to
//!   its size.
//! - Slots change only under the lock; the root's shift only grows while the index lives
//!   (an empty root is replaced by a higher one, never by a lower one).
//!
//! Protection: the root and every slot change only under the index's mutex (held by an
//! `IndexWriteGuard`), with Release stores; readers load them lock-free with Acquire.
//! Node memory is protected by type stability (`node`), not by a guard or a count. The
//! node pool is inside the mutex; `nodes` and `pooled` are counters written under it.
//!
//! Limits: page indexes below 2^60 (files below 4 EiB); shadow values below 2^62.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use smallvec::SmallVec;

use crate::types::{FrameId, Order, PageIndex};

mod lookup;
// The marks are for the write side (issue 14): until it lands only the tests use them.
#[allow(dead_code)]
mod mark;
// All of the index's `unsafe` (type-stable node references): the crate denies it elsewhere.
mod guard;
#[allow(unsafe_code)]
mod node;

pub(crate) use mark::MarkedFolio;
use node::{NodePool, Root};
pub use node::{RootHint, NODE_BYTES};

/// What a page's slot holds, as seen by a reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    Empty,
    /// The folio that covers the page, with its head's page index.
    Folio {
        frame: FrameId,
        order: Order,
        head: PageIndex,
    },
    /// The page was evicted; the value is what eviction stored (its eviction clock).
    Shadow(u64),
}

/// A run of folios to insert: consecutive, each aligned to its own size.
#[derive(Clone, Copy, Debug)]
pub struct NewFolio {
    pub frame: FrameId,
    pub order: Order,
    pub head: PageIndex,
}

/// For each folio of a run, whether it went in: inline for the runs a miss inserts (the
/// miss path allocates nothing it can avoid; `filemap`'s `Run`).
pub type Inserted = SmallVec<[bool; 8]>;

/// Shadow entries a run's folios replaced: (first page covered, value).
pub type Shadows = SmallVec<[(PageIndex, u64); 4]>;

/// What `insert_run` did.
#[derive(Debug, Default)]
pub struct InsertOutcome {
    /// For each folio of the run, whether it went in (false: a conflict).
    pub inserted: Inserted,
    /// Shadow entries that the inserted folios replaced: (first page covered, value).
    pub shadows: Shadows,
    /// Tree walks from the root that the insertion made (1 + node changes): for tests.
    pub walks: u32,
}

/// A mark of the index (the xarray's marks, `mark` module docs): a bit per slot per node,
/// set on a folio's head slot and propagated up to the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mark {
    /// The folio holds bytes not written back yet.
    Dirty = 0,
    /// A data-integrity sync must write the folio (set from `Dirty` by `tag_range`).
    Towrite = 1,
}

impl Mark {
    pub(crate) const ALL: [Mark; MARKS] = [Mark::Dirty, Mark::Towrite];
}

/// Marks per node.
const MARKS: usize = 2;

/// What a removed folio leaves in its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leave {
    /// A shadow entry with this value (eviction).
    Shadow(u64),
    /// Nothing (I/O error, invalidation).
    Empty,
}

/// `repr(C)`: the root and the id first, the fields a lookup reads (`Mapping` keeps them
/// in the line the hit reads).
#[repr(C)]
pub struct Index {
    root: Root,
    /// Unique for the life of the process: what a `RootHint` checks it belongs to.
    id: u64,
    /// The writer lock, and the pool of nodes not in the tree: retired ones (kept while
    /// the index lives), and fresh ones allocated before the lock was taken (freed with
    /// the guard if unused).
    lock: Mutex<NodePool>,
    /// Nodes in the tree.
    nodes: AtomicUsize,
    /// Nodes in the pool, readable without the lock.
    pooled: AtomicUsize,
}

impl fmt::Debug for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Index")
            .field("nodes", &self.node_count())
            .finish()
    }
}

impl Default for Index {
    fn default() -> Self {
        Index {
            root: Root::default(),
            id: node::next_index_id(),
            lock: Mutex::new(NodePool::default()),
            nodes: AtomicUsize::new(0),
            pooled: AtomicUsize::new(0),
        }
    }
}

impl Index {
    /// Nodes in the tree.
    pub fn node_count(&self) -> usize {
        self.nodes.load(Ordering::Relaxed)
    }

    /// Nodes the index holds memory for: in the tree and in its pool.
    pub fn nodes_allocated(&self) -> usize {
        self.node_count() + self.pooled.load(Ordering::Relaxed)
    }

    /// Takes the writer lock.
    ///
    /// Context: any thread; blocks while another writer holds the lock (never across
    /// I/O or a wait for memory).
    pub fn lock(&self) -> IndexWriteGuard<'_> {
        IndexWriteGuard {
            index: self,
            pool: self.lock.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }

    /// Takes the writer lock with the nodes that inserting `pages` pages from `first`
    /// needs allocated beforehand, outside the lock (`nodes_needed`: usually none, when
    /// the leaf is there already), less those the pool holds.
    ///
    /// Context: as `lock`; allocates before it takes the lock.
    pub fn lock_for_insert(&self, first: PageIndex, pages: u64) -> IndexWriteGuard<'_> {
        let want = self.nodes_needed(first, pages);
        let have = self.pooled.load(Ordering::Relaxed);
        let extra = NodePool::alloc_fresh(want.saturating_sub(have));
        let mut guard = self.lock();
        guard.pool.add_fresh(extra);
        self.pooled.store(guard.pool.len(), Ordering::Relaxed);
        guard
    }
}

/// The index's writer lock, held. Every mutation of the tree is a method of this guard
/// (`guard`); node allocation and retirement are in `node`.
pub struct IndexWriteGuard<'a> {
    index: &'a Index,
    /// The pool of unlinked nodes (retired, or allocated before the lock was taken).
    pool: MutexGuard<'a, NodePool>,
}

#[cfg(test)]
mod testing {
    use super::NewFolio;
    use crate::types::{FrameId, Order, PageIndex};

    /// A folio of `order` at page `head` in frame `frame`.
    pub(super) fn folio(frame: u32, order: u8, head: u64) -> NewFolio {
        NewFolio {
            frame: FrameId(frame),
            order: Order::new(order),
            head: PageIndex(head),
        }
    }
}
