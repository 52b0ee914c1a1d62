//! Index nodes: the slot encoding, the node type, the root, and the type-stable node pool.
//!
//! This is the only module of the index with `unsafe`: every node pointer is turned into a
//! reference here, and nodes are allocated and freed here. The rest of the index walks
//! and changes the tree through the safe API below, whose references carry the lifetime
//! of the borrow of the index they came from.
//!
//! Why a node reference is valid for as long as the index is borrowed (the one invariant
//! every `unsafe` block below relies on, called "type-stable nodes" in their `SAFETY:`):
//! - A node is allocated by `Node::alloc` (a leaked `Box`) and owned by one index: it is
//!   linked in that index's tree, or held in that index's `NodePool`, from allocation
//!   until the index is dropped. A node that leaves the tree goes to the pool of the same
//!   index (`IndexWriteGuard::retire_node`), never back to the heap.
//! - Every node pointer stored in a slot or in the root of an index points at a node of
//!   that index: the only pointers ever stored come from `IndexWriteGuard::new_node` or
//!   from `Node::get`/`Root::get` of the same index. A `RootHint` holds a copy of one
//!   index's root and lends it only to that index (it checks the index's unique id).
//! - Nodes are freed in two places only: `Index::drop` (`&mut Index`: nobody borrows the
//!   index) and, for fresh nodes that were never linked (no reader can have loaded them),
//!   when the write guard drops (`NodePool::free_fresh`).
//!
//! So a reference loaded from the root of an index, or from a slot of a node of that
//! index, lives at most as long as the borrow of the index and points at a valid `Node`
//! for all of it, whatever writers do meanwhile; a stale reader may see the node reset
//! and reused elsewhere in the tree (module docs of `index`), never freed memory.
//!
//! Protection: slots, `used` and `shift` change only under the index's lock (writers
//! hold an `IndexWriteGuard`); readers load them with Acquire, writers store with Release.
//! The pool is inside the index's mutex.
//!
//! Limits: a slot is one machine word, so frame ids below 2^20 on 32-bit targets (a
//! sibling holds its folio's frame above 12 bits) and shadow values below 2^62.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::{Index, IndexWriteGuard, Mark, MARKS};
use crate::types::{FrameId, Order};

pub(super) const SLOT_SHIFT: u32 = 6;
pub(super) const SLOTS: usize = 1 << SLOT_SHIFT;
pub(super) const SLOT_MASK: u64 = SLOTS as u64 - 1;
/// The root's shift never exceeds this: 64 << 54 pages = 2^60 pages.
pub(super) const SHIFT_MAX: u32 = 54;

const TAG_MASK: usize = 3;
const TAG_NODE: usize = 0;
const TAG_FOLIO: usize = 1;
const TAG_SHADOW: usize = 2;
const TAG_SIBLING: usize = 3;

/// A raw slot value: what writers store, and what they compare.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Raw(usize);

/// A slot value decoded; a node pointer comes out as a reference that lives as long as
/// the borrow it was loaded through (module docs).
#[derive(Clone, Copy)]
pub(super) enum Decoded<'a> {
    Empty,
    Node(&'a Node),
    Folio(FrameId, Order),
    Shadow(u64),
    /// A tail slot of a large folio: the slot of its head, in the same node, and the
    /// folio the head held when the sibling was stored (so that a look-up needs no
    /// second load; a stale reader's copy is validated like a stale head).
    Sibling {
        head: usize,
        frame: FrameId,
        order: Order,
    },
}

impl Raw {
    pub(super) const EMPTY: Raw = Raw(0);

    pub(super) fn folio(frame: FrameId, order: Order) -> Raw {
        Raw(((frame.0 as usize) << 6) | ((order.get() as usize) << 2) | TAG_FOLIO)
    }

    pub(super) fn shadow(value: u64) -> Raw {
        assert!(value < 1 << 62, "shadow value out of range");
        Raw(((value as usize) << 2) | TAG_SHADOW)
    }

    /// A tail slot of the folio `frame` of `order` whose head is at `head_slot`:
    /// frame << 12 | order << 8 | head slot << 2.
    pub(super) fn sibling(head_slot: usize, frame: FrameId, order: Order) -> Raw {
        debug_assert!(head_slot < SLOTS);
        Raw(((frame.0 as usize) << 12)
            | ((order.get() as usize) << 8)
            | (head_slot << 2)
            | TAG_SIBLING)
    }

    /// A node pointer as a slot value. Slots are plain words (they also hold folios,
    /// shadows and siblings), so the pointer's provenance is exposed here and taken back
    /// in `decode`, as strict provenance asks of pointer tagging through integers.
    pub(super) fn node(node: &Node) -> Raw {
        let addr = (node as *const Node).expose_provenance();
        debug_assert!(addr & TAG_MASK == 0);
        Raw(addr)
    }

    /// The node this value points at, if it is a node pointer: a walk's step down, one
    /// test of the tag instead of the full `decode`. Private, as `decode`.
    #[inline]
    fn as_node<'a>(self) -> Option<&'a Node> {
        if self.0 & TAG_MASK != TAG_NODE || self.0 == 0 {
            return None;
        }
        let ptr: *const Node = std::ptr::with_exposed_provenance(self.0);
        // SAFETY: type-stable nodes (module docs): a node pointer in a slot or the root of
        // an index points at a node of that index, valid until the index is dropped; the
        // callers bound 'a by a borrow of that index.
        Some(unsafe { &*ptr })
    }

    /// Decodes the value. Private: the lifetime of the node reference is only justified
    /// for a value loaded from a slot or the root of the index (`Node::get`, `Root::get`).
    fn decode<'a>(self) -> Decoded<'a> {
        if let Some(node) = self.as_node() {
            return Decoded::Node(node);
        }
        match self.0 & TAG_MASK {
            // Zero; any other value of the node tag is a node, taken above.
            TAG_NODE => Decoded::Empty,
            TAG_FOLIO => Decoded::Folio(
                FrameId((self.0 >> 6) as u32),
                Order::clamped(((self.0 >> 2) & 0xf) as u8),
            ),
            TAG_SHADOW => Decoded::Shadow((self.0 >> 2) as u64),
            _ => Decoded::Sibling {
                head: (self.0 >> 2) & (SLOTS - 1),
                frame: FrameId((self.0 >> 12) as u32),
                order: Order::clamped(((self.0 >> 8) & 0xf) as u8),
            },
        }
    }
}

pub(super) struct Node {
    /// 6 x the level above the leaves. Written when a pooled node is reused (under the
    /// lock); readers that hold a stale reference may see it change, hence an atomic.
    shift: AtomicU32,
    /// Non-empty slots; written under the lock only.
    used: AtomicU32,
    /// Per mark, a bit per slot (`mark`): written under the lock only.
    marks: [AtomicU64; MARKS],
    slots: [AtomicUsize; SLOTS],
}

/// Bytes of one index node, for memory accounting.
pub const NODE_BYTES: usize = std::mem::size_of::<Node>();

// The layout the `index` docs count on: the two counters, the mark bitmaps, the slots.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(NODE_BYTES == 8 + 8 * MARKS + 8 * SLOTS);

impl Node {
    /// A new node on the heap, owned by the index that links or pools it (freed in
    /// `Index::drop`, or with the guard if it stays fresh).
    fn alloc(shift: u32) -> NonNull<Node> {
        let node = Box::new(Node {
            shift: AtomicU32::new(shift),
            used: AtomicU32::new(0),
            marks: std::array::from_fn(|_| AtomicU64::new(0)),
            slots: std::array::from_fn(|_| AtomicUsize::new(0)),
        });
        NonNull::from(Box::leak(node))
    }

    /// Makes a pooled node new again. Context: the index's lock is held and the node is
    /// not linked; stale readers may still load from it (they see empty slots).
    fn reset(&self, shift: u32) {
        for slot in &self.slots {
            slot.store(0, Ordering::Release);
        }
        for bits in &self.marks {
            bits.store(0, Ordering::Release);
        }
        self.used.store(0, Ordering::Relaxed);
        self.shift.store(shift, Ordering::Release);
    }

    pub(super) fn shift(&self) -> u32 {
        self.shift.load(Ordering::Acquire)
    }

    /// The raw value of `slot`, for comparisons.
    pub(super) fn load(&self, slot: usize) -> Raw {
        Raw(self.slots[slot].load(Ordering::Acquire))
    }

    /// What `slot` holds; a child node comes as a reference bounded by this node's borrow.
    #[inline]
    pub(super) fn get(&self, slot: usize) -> Decoded<'_> {
        self.load(slot).decode()
    }

    /// The child node in `slot`, or the slot's value decoded if it holds none: the walks'
    /// step down (`Index::lookup`, and the hit's `lookup_candidate`), with the common case
    /// tested first.
    #[inline(always)]
    pub(super) fn child(&self, slot: usize) -> Result<&Node, Decoded<'_>> {
        let raw = self.load(slot);
        raw.as_node().ok_or_else(|| raw.decode())
    }

    /// Context: the index's lock is held.
    pub(super) fn store(&self, slot: usize, value: Raw) {
        let old = Raw(self.slots[slot].swap(value.0, Ordering::Release));
        match (old == Raw::EMPTY, value == Raw::EMPTY) {
            (true, false) => {
                self.used.fetch_add(1, Ordering::Relaxed);
            }
            (false, true) => {
                self.used.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    pub(super) fn used(&self) -> u32 {
        self.used.load(Ordering::Relaxed)
    }

    /// The slots whose `mark` bit is set, one bit per slot.
    #[inline]
    pub(super) fn marks(&self, mark: Mark) -> u64 {
        self.marks[mark as usize].load(Ordering::Acquire)
    }

    /// Whether any slot has the `mark` bit.
    pub(super) fn is_marked(&self, mark: Mark) -> bool {
        self.marks(mark) != 0
    }

    /// Sets `slot`'s `mark` bit; returns whether it was set already.
    /// Context: the index's lock is held.
    pub(super) fn set_mark(&self, slot: usize, mark: Mark) -> bool {
        let bit = 1u64 << slot;
        self.marks[mark as usize].fetch_or(bit, Ordering::Release) & bit != 0
    }

    /// Clears `slot`'s `mark` bit. Context: the index's lock is held.
    pub(super) fn clear_mark(&self, slot: usize, mark: Mark) {
        self.marks[mark as usize].fetch_and(!(1u64 << slot), Ordering::Release);
    }

    /// The pages this node covers.
    pub(super) fn span_pages(&self) -> u64 {
        1u64 << (self.shift() + SLOT_SHIFT)
    }
}

/// The root slot of an index: empty, or a node of that index.
#[derive(Default)]
pub(super) struct Root(AtomicUsize);

impl Root {
    /// The root node, if any (Acquire: it is filled before it is stored).
    #[inline]
    pub(super) fn get(&self) -> Option<&Node> {
        match Raw(self.0.load(Ordering::Acquire)).decode() {
            Decoded::Node(node) => Some(node),
            _ => None,
        }
    }

    /// Context: the index's lock is held; `node` is a node of this index, filled.
    pub(super) fn set(&self, node: &Node) {
        self.0.store(Raw::node(node).0, Ordering::Release);
    }
}

/// Ids of indexes, unique for the life of the process: a `RootHint` names the index it was
/// made for by one, so that it can never lend a node of another index.
static NEXT_INDEX_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh index's id.
pub(super) fn next_index_id() -> u64 {
    NEXT_INDEX_ID.fetch_add(1, Ordering::Relaxed)
}

/// A reader's copy of one index's root (`Index::lookup_candidate`): the hit path walks from
/// it without loading the root first, so the walk's first node load no longer waits for
/// the line that holds the root (a cache miss when many files are open). It may be stale:
/// the node may since have become a child, or be pooled and reused elsewhere in the same
/// tree; the walk then answers like any stale walk, validated by its caller.
///
/// Safety: it holds a node of its own index only (`Index::refresh_hint` stores that
/// index's root, and `owner` is the index's unique id, checked before the node is used),
/// and nodes of an index are freed only when the index is dropped, so a node it names is
/// valid for as long as the index is borrowed.
pub struct RootHint {
    owner: u64,
    raw: AtomicUsize,
    /// The node's shift when it was the root. The walk counts its levels from it without
    /// checking it against the node's: a wrong one makes a stale candidate
    /// (`Index::lookup_candidate`).
    shift: AtomicU32,
}

impl RootHint {
    /// A hint for `index`, empty until `Index::refresh_hint` fills it.
    pub fn new(index: &Index) -> RootHint {
        RootHint {
            owner: index.id,
            raw: AtomicUsize::new(0),
            shift: AtomicU32::new(0),
        }
    }

    /// The node the hint names and the shift it had as the root, if the hint is
    /// `index`'s and names one (Acquire: the node was filled before the root named it,
    /// and the root before the hint). The two are loaded apart and may be of two
    /// refreshes: the walk's candidate is then stale, and its caller's validation turns
    /// it away.
    #[inline]
    pub(super) fn node<'a>(&self, index: &'a Index) -> Option<(&'a Node, u32)> {
        if self.owner != index.id {
            return None;
        }
        let shift = self.shift.load(Ordering::Relaxed);
        match Raw(self.raw.load(Ordering::Acquire)).decode() {
            // The node belongs to `index` (type docs): 'a is bounded by its borrow.
            Decoded::Node(node) => Some((node, shift)),
            _ => None,
        }
    }

    /// Stores `index`'s current root if the hint is `index`'s and holds another: a store
    /// only when the root moved, so that readers sharing a handle write nothing otherwise.
    pub(super) fn refresh(&self, index: &Index) {
        if self.owner != index.id {
            return;
        }
        let root = index.root.0.load(Ordering::Acquire);
        if self.raw.load(Ordering::Relaxed) == root {
            return;
        }
        if let Decoded::Node(node) = Raw(root).decode() {
            self.shift.store(node.shift(), Ordering::Relaxed);
        }
        self.raw.store(root, Ordering::Release);
    }
}

/// Nodes owned by an index but not linked in its tree. Raw pointers, not boxes: stale
/// readers may still be loading from a retired node, so nothing may claim it uniquely.
/// A fresh node was never linked, so no reader has seen it.
#[derive(Default)]
pub(super) struct NodePool {
    retired: Vec<NonNull<Node>>,
    fresh: Vec<NonNull<Node>>,
}

// SAFETY: the pointers are to heap nodes owned by the index; they are only dereferenced
// as shared references to atomics, valid from any thread while the index lives.
unsafe impl Send for NodePool {}

impl NodePool {
    pub(super) fn len(&self) -> usize {
        self.retired.len() + self.fresh.len()
    }

    pub(super) fn retired_len(&self) -> usize {
        self.retired.len()
    }

    /// `count` new nodes, allocated before the lock is taken (`Index::lock_for_insert`).
    pub(super) fn alloc_fresh(count: usize) -> Vec<NonNull<Node>> {
        (0..count).map(|_| Node::alloc(0)).collect()
    }

    pub(super) fn add_fresh(&mut self, nodes: Vec<NonNull<Node>>) {
        self.fresh.extend(nodes);
    }

    /// Frees the fresh nodes: none was linked (`new_node` takes a node out of the pool
    /// before it links it). Context: the index's lock is held.
    pub(super) fn free_fresh(&mut self) {
        for node in self.fresh.drain(..) {
            // SAFETY: a fresh node came from `Node::alloc` and was never linked in the
            // tree, so no reader can hold it; it is in the pool once.
            drop(unsafe { Box::from_raw(node.as_ptr()) });
        }
    }
}

impl<'a> IndexWriteGuard<'a> {
    /// The root node, if any. Under the lock, a node in the tree stays in it.
    pub(super) fn root(&self) -> Option<&'a Node> {
        self.index.root.get()
    }

    /// A node for the tree, reset to `shift`: a retired one, else a fresh one, else new.
    /// The caller fills it and links it.
    pub(super) fn new_node(&mut self, shift: u32) -> &'a Node {
        let node = match self.pool.retired.pop().or_else(|| self.pool.fresh.pop()) {
            Some(node) => {
                // SAFETY: type-stable nodes (module docs): a pooled node of this index is
                // valid while the index lives, and the guard borrows the index for 'a.
                let node = unsafe { node.as_ref() };
                node.reset(shift);
                node
            }
            None => {
                let node = Node::alloc(shift);
                // SAFETY: as above; the node is owned by this index from now on (linked
                // by the caller, or retired to the pool).
                unsafe { node.as_ref() }
            }
        };
        self.index.pooled.store(self.pool.len(), Ordering::Relaxed);
        self.index.nodes.fetch_add(1, Ordering::Relaxed);
        node
    }

    /// Takes back a node the caller unlinked from the tree: into the pool, not freed,
    /// since readers that reached it before the unlink may still be loading from it.
    pub(super) fn retire_node(&mut self, node: &'a Node) {
        self.index.nodes.fetch_sub(1, Ordering::Relaxed);
        // Kept as the pointer its slot held (exposed when it was linked), as `Index::drop`
        // frees the nodes of the tree, rather than one derived from a reference.
        let ptr: *mut Node = std::ptr::with_exposed_provenance_mut(Raw::node(node).0);
        self.pool
            .retired
            .push(NonNull::new(ptr).expect("nodes are non-null"));
        self.index.pooled.store(self.pool.len(), Ordering::Relaxed);
    }
}

impl Drop for IndexWriteGuard<'_> {
    /// Frees the fresh nodes this hold of the lock did not link (`index` module docs).
    fn drop(&mut self) {
        if self.pool.fresh.is_empty() {
            return;
        }
        self.pool.free_fresh();
        self.index
            .pooled
            .store(self.pool.retired_len(), Ordering::Relaxed);
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        /// Frees the subtree under a slot value. Through the slot's own pointer (its
        /// exposed provenance, as `decode` takes it back), not a reference to the node.
        fn free(raw: Raw) {
            if raw == Raw::EMPTY || raw.0 & TAG_MASK != TAG_NODE {
                return;
            }
            let ptr: *mut Node = std::ptr::with_exposed_provenance_mut(raw.0);
            // SAFETY: `&mut Index` proves no reader or writer exists; every node in the
            // tree came from `Node::alloc` (a leaked Box) and is linked once, so it is
            // freed once, here.
            let node = unsafe { Box::from_raw(ptr) };
            for slot in 0..SLOTS {
                free(node.load(slot));
            }
        }
        free(Raw(*self.root.0.get_mut()));
        let pool = self.lock.get_mut().unwrap_or_else(|e| e.into_inner());
        for node in pool.retired.drain(..).chain(pool.fresh.drain(..)) {
            // SAFETY: pooled nodes are not linked in the tree (retired nodes are unlinked
            // first), came from `Node::alloc`, and are in the pool once.
            drop(unsafe { Box::from_raw(node.as_ptr()) });
        }
    }
}
