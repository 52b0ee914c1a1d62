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
//!   sibling        (tag 11)   head slot << 2: a tail slot of a large folio, in the same node
//! ```
//!
//! A folio of order k lives in the node whose shift is `6 * (k / 6)`, in `2^(k % 6 ...)`
//! consecutive slots: the head slot holds the folio, the others hold siblings that point
//! at it. So an order-9 folio (512 pages) is 8 slots of a level-1 node, an order-2 folio 4
//! slots of a leaf.
//!
//! Readers (`lookup`, `visit`) take no lock and pin nothing: they walk loading each slot
//! with Acquire. Writers serialise on the index's mutex, held through an
//! `IndexWriteGuard` that every mutating method is defined on, so no function can be called
//! "with the lock maybe held".
//!
//! Node memory is type-stable (the kernel's `SLAB_TYPESAFE_BY_RCU` idea, without the RCU):
//! a node that leaves the tree goes to the index's node pool and is only ever reused as a
//! node of the same index; nodes are freed when the index is dropped. So every pointer a
//! reader loads points at a valid `Node` for as long as it can hold it (it borrows the
//! index), whatever writers do meanwhile, and a walk needs no epoch guard. A reader that
//! raced with a writer may walk a node that was unlinked or reused elsewhere and come back
//! with a stale entry, never with freed memory: callers validate what they found (the hit
//! path checks the folio's identity and version; `Mapping::find_get` re-checks the slot
//! and the identity under its reference; writers re-check under the lock), and a walk is
//! bounded by the tree's height. This replaces the epoch-based reclamation DESIGN.md §2
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
//! Nodes are allocated before the lock is taken (`Index::lock_for_insert`), from an
//! estimate (the tree's height now, and the run's length); a walk that needs more
//! allocates under the lock, which only happens when the tree grows new levels. Those
//! fresh nodes that the insertion did not link are freed when the guard drops: no reader
//! can have seen them, and a reserve kept per index would cost every small cached file
//! several nodes (about 6 KiB each, docs/reliability.md finding 7).
//!
//! What a reader may see while a writer changes the tree, transition by transition (each
//! store is a Release that the reader's Acquire load pairs with):
//! - A node is filled (shadows copied in, or a pooled node reset) before its pointer is
//!   stored in its parent or the root: a reader that loads the pointer sees it filled.
//! - A folio's head slot is stored before its siblings: a reader that finds a sibling
//!   finds the head. One that loads a tail slot before its sibling is stored sees what
//!   the slot held (empty, or the shadow the folio is replacing) and takes the miss path,
//!   which finds the folio under the lock. A shadow from `lookup` is only ever a miss:
//!   shadow values are consumed from `insert_run`'s outcome, under the lock.
//! - A node unlinked (pruned, collapsed, or an empty root replaced) goes to the pool and
//!   may be reused anywhere in this index while a reader still walks it: the reader gets
//!   a stale entry, or an empty one, and validates it (above); the shift checks bound the
//!   walk.
//!
//! Invariants (checked by `check_invariants` in tests):
//! - A node's `used` counts its non-empty slots; a non-root node is never empty after an
//!   operation (removals prune, growth replaces an empty root).
//! - Sibling slots point at a head slot of the same node that holds a folio, and follow it
//!   contiguously; a folio's slots are aligned to its size.
//! - Slots change only under the lock; the root's shift only grows while the index lives
//!   (an empty root is replaced by a higher one, never by a lower one).
//!
//! Limits: page indexes below 2^60 (files below 4 EiB); shadow values below 2^62.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::types::{FrameId, Order, PageIndex};

const SLOT_SHIFT: u32 = 6;
const SLOTS: usize = 1 << SLOT_SHIFT;
const SLOT_MASK: u64 = SLOTS as u64 - 1;
/// The root's shift never exceeds this: 64 << 54 pages = 2^60 pages.
const SHIFT_MAX: u32 = 54;

const TAG_MASK: usize = 3;
const TAG_NODE: usize = 0;
const TAG_FOLIO: usize = 1;
const TAG_SHADOW: usize = 2;
const TAG_SIBLING: usize = 3;

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

/// A raw slot value.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Raw(usize);

enum Decoded {
    Empty,
    Node(*const Node),
    Folio(FrameId, Order),
    Shadow(u64),
    Sibling(usize),
}

impl Raw {
    const EMPTY: Raw = Raw(0);

    fn folio(frame: FrameId, order: Order) -> Raw {
        Raw(((frame.0 as usize) << 6) | ((order.get() as usize) << 2) | TAG_FOLIO)
    }

    fn shadow(value: u64) -> Raw {
        assert!(value < 1 << 62, "shadow value out of range");
        Raw(((value as usize) << 2) | TAG_SHADOW)
    }

    fn sibling(head_slot: usize) -> Raw {
        Raw((head_slot << 2) | TAG_SIBLING)
    }

    /// A node pointer as a slot value. Slots are plain words (they also hold folios,
    /// shadows and siblings), so the pointer's provenance is exposed here and taken back
    /// in `decode`, as strict provenance asks of pointer tagging through integers.
    fn node(node: *const Node) -> Raw {
        let addr = node.expose_provenance();
        debug_assert!(addr & TAG_MASK == 0);
        Raw(addr)
    }

    fn decode(self) -> Decoded {
        match self.0 & TAG_MASK {
            _ if self.0 == 0 => Decoded::Empty,
            TAG_NODE => Decoded::Node(std::ptr::with_exposed_provenance(self.0)),
            TAG_FOLIO => Decoded::Folio(
                FrameId((self.0 >> 6) as u32),
                Order::clamped(((self.0 >> 2) & 0xf) as u8),
            ),
            TAG_SHADOW => Decoded::Shadow((self.0 >> 2) as u64),
            _ => Decoded::Sibling(self.0 >> 2),
        }
    }
}

struct Node {
    /// 6 x the level above the leaves. Written when a pooled node is reused (under the
    /// lock); readers that hold a stale pointer may see it change, hence an atomic.
    shift: AtomicU32,
    /// Non-empty slots; written under the lock only.
    used: AtomicU32,
    slots: [AtomicUsize; SLOTS],
}

impl Node {
    /// A new node on the heap, owned by the index that links it (freed in `Index::drop`).
    fn alloc(shift: u32) -> NonNull<Node> {
        let node = Box::new(Node {
            shift: AtomicU32::new(shift),
            used: AtomicU32::new(0),
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
        self.used.store(0, Ordering::Relaxed);
        self.shift.store(shift, Ordering::Release);
    }

    fn shift(&self) -> u32 {
        self.shift.load(Ordering::Acquire)
    }

    fn load(&self, slot: usize) -> Raw {
        Raw(self.slots[slot].load(Ordering::Acquire))
    }

    /// Context: the index's lock is held.
    fn store(&self, slot: usize, value: Raw) {
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

    fn used(&self) -> u32 {
        self.used.load(Ordering::Relaxed)
    }

    /// The pages this node covers.
    fn span_pages(&self) -> u64 {
        1u64 << (self.shift() + SLOT_SHIFT)
    }
}

/// The shift of the node level that holds folios of `order`.
fn level_shift(order: Order) -> u32 {
    SLOT_SHIFT * (u32::from(order.get()) / SLOT_SHIFT)
}

/// The shift of a root that covers page `last` and is at least `shift_min`: the lowest.
fn root_shift_for(last: u64, shift_min: u32) -> u32 {
    let mut shift = shift_min;
    while (last >> shift) >> SLOT_SHIFT != 0 {
        assert!(
            shift < SHIFT_MAX,
            "page index {last} beyond the index's range"
        );
        shift += SLOT_SHIFT;
    }
    shift
}

/// Bytes of one index node, for memory accounting.
pub const NODE_BYTES: usize = std::mem::size_of::<Node>();

/// A run of folios to insert: consecutive, each aligned to its own size.
#[derive(Clone, Copy, Debug)]
pub struct NewFolio {
    pub frame: FrameId,
    pub order: Order,
    pub head: PageIndex,
}

/// What `insert_run` did.
#[derive(Debug, Default)]
pub struct InsertOutcome {
    /// For each folio of the run, whether it went in (false: a conflict).
    pub inserted: Vec<bool>,
    /// Shadow entries that the inserted folios replaced: (first page covered, value).
    pub shadows: Vec<(PageIndex, u64)>,
    /// Tree walks from the root that the insertion made (1 + node changes): for tests.
    pub walks: u32,
}

pub struct Index {
    root: AtomicUsize,
    /// The writer lock, and the pool of nodes not in the tree: retired ones (kept while
    /// the index lives), and fresh ones allocated before the lock was taken (freed with
    /// the guard if unused).
    lock: Mutex<NodePool>,
    /// Nodes in the tree.
    nodes: AtomicUsize,
    /// Nodes in the pool, readable without the lock.
    pooled: AtomicUsize,
}

/// Nodes owned by an index but not linked in its tree. Raw pointers, not boxes: stale
/// readers may still be loading from a retired node, so nothing may claim it uniquely.
/// A fresh node was never linked, so no reader has seen it.
#[derive(Default)]
struct NodePool {
    retired: Vec<NonNull<Node>>,
    fresh: Vec<NonNull<Node>>,
}

impl NodePool {
    fn len(&self) -> usize {
        self.retired.len() + self.fresh.len()
    }
}

// SAFETY: the pointers are to heap nodes owned by the index; they are only dereferenced
// as shared references to atomics, valid from any thread while the index lives.
unsafe impl Send for NodePool {}

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
            root: AtomicUsize::new(0),
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
    pub fn lock(&self) -> IndexWriteGuard<'_> {
        IndexWriteGuard {
            index: self,
            pool: self.lock.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }

    /// Takes the writer lock with enough nodes allocated beforehand (outside the lock)
    /// for inserting `pages` pages below the tree's current root: a path from the root
    /// down, plus a leaf node per 64 pages and one more for a run that straddles two.
    pub fn lock_for_insert(&self, pages: u64) -> IndexWriteGuard<'_> {
        let levels = match Raw(self.root.load(Ordering::Acquire)).decode() {
            // SAFETY: a node pointer loaded from the root is a node of this index, which
            // lives as long as `self` (type-stable nodes); only its shift is read.
            Decoded::Node(root) => (unsafe { &*root }.shift() / SLOT_SHIFT + 1) as usize,
            _ => 1,
        };
        let want = pages as usize / SLOTS + 1 + levels;
        let have = self.pooled.load(Ordering::Relaxed);
        let extra: Vec<NonNull<Node>> = (have..want).map(|_| Node::alloc(0)).collect();
        let mut guard = self.lock();
        guard.pool.fresh.extend(extra);
        self.pooled.store(guard.pool.len(), Ordering::Relaxed);
        guard
    }

    /// What the slot of page `index` holds. Lock-free; the answer may be stale if a
    /// writer raced with the walk (module docs): callers validate it.
    ///
    /// Context: any thread, no lock; does not sleep.
    #[inline]
    pub fn lookup(&self, index: PageIndex) -> Entry {
        let mut raw = Raw(self.root.load(Ordering::Acquire));
        let mut parent_shift = u32::MAX;
        // A consistent walk goes down one level per node; a stale one is cut off at the
        // tree's greatest height.
        for _ in 0..=SHIFT_MAX / SLOT_SHIFT + 1 {
            let Decoded::Node(ptr) = raw.decode() else {
                return Entry::Empty;
            };
            // SAFETY: every node pointer ever stored in this index points at a node that
            // lives until the index is dropped (type-stable nodes, module docs), and the
            // index outlives this borrow of it.
            let node = unsafe { &*ptr };
            let shift = node.shift();
            if shift >= parent_shift
                || (parent_shift == u32::MAX && (index.0 >> shift) >> SLOT_SHIFT != 0)
            {
                return Entry::Empty;
            }
            parent_shift = shift;
            let slot = ((index.0 >> shift) & SLOT_MASK) as usize;
            raw = node.load(slot);
            if let Decoded::Sibling(head) = raw.decode() {
                raw = node.load(head);
            }
            match raw.decode() {
                Decoded::Node(_) => continue,
                Decoded::Empty | Decoded::Sibling(_) => return Entry::Empty,
                Decoded::Shadow(v) => return Entry::Shadow(v),
                Decoded::Folio(frame, order) => {
                    return Entry::Folio {
                        frame,
                        order,
                        head: index.align_down(order),
                    }
                }
            }
        }
        Entry::Empty
    }

    /// Calls `f` for every folio and shadow whose head lies in `[start, end)`, in index
    /// order. Lock-free: entries may change during the walk (each is read once, and may be
    /// stale: a hint that callers re-check under the lock).
    ///
    /// Context: any thread, no lock; does not sleep.
    pub fn visit(&self, start: PageIndex, end: PageIndex, f: &mut dyn FnMut(PageIndex, Entry)) {
        let raw = Raw(self.root.load(Ordering::Acquire));
        if let Decoded::Node(ptr) = raw.decode() {
            // SAFETY: as in `lookup`.
            let node = unsafe { &*ptr };
            Self::visit_node(node, 0, start.0, end.0, u32::MAX, f);
        }
    }

    fn visit_node(
        node: &Node,
        base: u64,
        start: u64,
        end: u64,
        parent_shift: u32,
        f: &mut dyn FnMut(PageIndex, Entry),
    ) {
        let shift = node.shift();
        if shift >= parent_shift || shift > SHIFT_MAX {
            return; // a stale walk through a reused node
        }
        let slot_pages = 1u64 << shift;
        for slot in 0..SLOTS {
            let lo = base + slot as u64 * slot_pages;
            let hi = lo + slot_pages;
            if hi <= start || lo >= end {
                continue;
            }
            match node.load(slot).decode() {
                Decoded::Node(child) => {
                    // SAFETY: as in `lookup`.
                    Self::visit_node(unsafe { &*child }, lo, start, end, shift, f)
                }
                Decoded::Folio(frame, order) if lo >= start => f(
                    PageIndex(lo),
                    Entry::Folio {
                        frame,
                        order,
                        head: PageIndex(lo),
                    },
                ),
                Decoded::Shadow(v) if lo >= start => f(PageIndex(lo), Entry::Shadow(v)),
                _ => {}
            }
        }
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        fn free(raw: Raw) {
            if let Decoded::Node(ptr) = raw.decode() {
                // SAFETY: `&mut Index` proves no reader or writer exists; every node in
                // the tree came from `Node::alloc` (a leaked Box) and is linked once, so
                // it is freed once, here.
                let node = unsafe { Box::from_raw(ptr as *mut Node) };
                for slot in 0..SLOTS {
                    free(node.load(slot));
                }
            }
        }
        free(Raw(*self.root.get_mut()));
        let pool = self.lock.get_mut().unwrap_or_else(|e| e.into_inner());
        for node in pool.retired.drain(..).chain(pool.fresh.drain(..)) {
            // SAFETY: pooled nodes are not linked in the tree (retired nodes are unlinked
            // first), came from `Node::alloc`, and are in the pool once.
            drop(unsafe { Box::from_raw(node.as_ptr()) });
        }
    }
}

/// The index's writer lock, held. Every mutation of the tree is a method of this guard.
pub struct IndexWriteGuard<'a> {
    index: &'a Index,
    /// The pool of unlinked nodes (retired, or allocated before the lock was taken).
    pool: MutexGuard<'a, NodePool>,
}

impl Drop for IndexWriteGuard<'_> {
    /// Frees the fresh nodes this hold of the lock did not link (module docs).
    fn drop(&mut self) {
        if self.pool.fresh.is_empty() {
            return;
        }
        for node in self.pool.fresh.drain(..) {
            // SAFETY: a fresh node came from `Node::alloc` in `lock_for_insert` and was
            // never linked in the tree (`new_node` takes it out of `fresh` before linking),
            // so no reader can hold it; it is in the pool once.
            drop(unsafe { Box::from_raw(node.as_ptr()) });
        }
        self.index
            .pooled
            .store(self.pool.retired.len(), Ordering::Relaxed);
    }
}

/// Where a walk stopped: a node, the slot in it, and the page of that node's slot 0.
struct Cursor {
    node: *const Node,
    base: u64,
}

impl<'a> IndexWriteGuard<'a> {
    fn new_node(&mut self, shift: u32) -> *const Node {
        let node = match self.pool.retired.pop().or_else(|| self.pool.fresh.pop()) {
            Some(node) => {
                // SAFETY: pooled nodes live until the index drops (type-stable nodes).
                unsafe { node.as_ref() }.reset(shift);
                node
            }
            None => Node::alloc(shift),
        };
        self.index.pooled.store(self.pool.len(), Ordering::Relaxed);
        self.index.nodes.fetch_add(1, Ordering::Relaxed);
        node.as_ptr()
    }

    /// Takes back a node the caller unlinked from the tree: into the pool, not freed,
    /// since readers that reached it before the unlink may still be loading from it.
    fn retire_node(&mut self, node: *const Node) {
        self.index.nodes.fetch_sub(1, Ordering::Relaxed);
        self.pool
            .retired
            .push(NonNull::new(node as *mut Node).expect("nodes are non-null"));
        self.index.pooled.store(self.pool.len(), Ordering::Relaxed);
    }

    fn root(&self) -> Option<&'a Node> {
        match Raw(self.index.root.load(Ordering::Relaxed)).decode() {
            // SAFETY: under the lock, a node in the tree is not freed.
            Decoded::Node(ptr) => Some(unsafe { &*ptr }),
            _ => None,
        }
    }

    /// Grows the tree until the root covers page `last` and its shift is at least
    /// `shift_min` (the level a large folio lives at). A root with entries is pushed down
    /// under a new root, one level at a time; an empty root is replaced (module docs).
    fn extend(&mut self, last: u64, shift_min: u32) {
        loop {
            match self.root() {
                None => {
                    let node = self.new_node(root_shift_for(last, shift_min));
                    self.index.root.store(Raw::node(node).0, Ordering::Release);
                    return;
                }
                Some(root)
                    if (last >> root.shift()) >> SLOT_SHIFT == 0 && root.shift() >= shift_min =>
                {
                    return
                }
                Some(root) if root.used() == 0 => {
                    // Pushed down, this root would stay as an empty non-root node (nothing
                    // would ever prune it). A reader still walking it sees empty slots,
                    // then whatever the pool reuses it for: a retired node (module docs).
                    let shift = root_shift_for(last, shift_min);
                    debug_assert!(shift > root.shift(), "the root's shift only grows");
                    let node = self.new_node(shift);
                    self.index.root.store(Raw::node(node).0, Ordering::Release);
                    self.retire_node(root);
                    return;
                }
                Some(root) => {
                    assert!(
                        root.shift() < SHIFT_MAX,
                        "page index {last} beyond the index's range"
                    );
                    let node = self.new_node(root.shift() + SLOT_SHIFT);
                    // SAFETY: `node` is new and not yet visible to anyone.
                    unsafe { &*node }.store(0, Raw::node(root));
                    self.index.root.store(Raw::node(node).0, Ordering::Release);
                }
            }
        }
    }

    /// Inserts a run of consecutive folios in one walk (module docs). Folios whose slots
    /// hold a folio already are skipped (`inserted[i] == false`); the caller keeps them.
    ///
    /// Context: the lock is held (this guard). Does not sleep; allocates only when the
    /// reserve of `Index::lock_for_insert` runs out.
    pub fn insert_run(&mut self, run: &[NewFolio]) -> InsertOutcome {
        let mut out = InsertOutcome {
            inserted: Vec::with_capacity(run.len()),
            ..Default::default()
        };
        let Some(last) = run.last() else {
            return out;
        };
        let shift_max = run.iter().map(|f| level_shift(f.order)).max().unwrap_or(0);
        self.extend(last.head.0 + last.order.pages() - 1, shift_max);
        let mut cursor: Option<Cursor> = None;
        for folio in run {
            debug_assert_eq!(folio.head.0 % folio.order.pages(), 0, "unaligned folio");
            let target_shift = level_shift(folio.order);
            let reuse = cursor.as_ref().is_some_and(|c| {
                // SAFETY: cursor nodes are in the tree and the lock is held.
                let node = unsafe { &*c.node };
                node.shift() == target_shift
                    && folio.head.0 >= c.base
                    && folio.head.0 < c.base + node.span_pages()
            });
            if !reuse {
                out.walks += 1;
                cursor = self.descend_creating(folio.head.0, target_shift);
            }
            let ok = match &cursor {
                Some(c) => self.place(c, folio, &mut out.shadows),
                None => false,
            };
            out.inserted.push(ok);
        }
        out
    }

    /// Walks from the root to the node of `target_shift` that covers `index`, creating
    /// nodes on the way. A shadow in the way is split: its node gets the shadow in every
    /// slot (module docs), and `place` collects it from the slots the folio takes. `None`
    /// if a larger folio covers `index`.
    fn descend_creating(&mut self, index: u64, target_shift: u32) -> Option<Cursor> {
        let mut node = self.root().expect("extend made a root");
        let mut base = 0u64;
        while node.shift() > target_shift {
            let slot = ((index >> node.shift()) & SLOT_MASK) as usize;
            let slot_base = base + ((slot as u64) << node.shift());
            let child = match node.load(slot).decode() {
                // SAFETY: under the lock, nodes in the tree stay valid.
                Decoded::Node(child) => unsafe { &*child },
                Decoded::Folio(..) | Decoded::Sibling(_) => return None,
                Decoded::Shadow(value) => self.link_child(node, slot, Raw::shadow(value)),
                Decoded::Empty => self.link_child(node, slot, Raw::EMPTY),
            };
            node = child;
            base = slot_base;
        }
        Some(Cursor { node, base })
    }

    /// Links a new node one level below `parent` in `slot`, every slot of it holding
    /// `fill` (what `slot` held: empty, or a shadow that now covers each of its pages).
    /// The node is filled before it is linked, so a reader that finds it sees the shadow
    /// on every page, as it did through `slot`.
    fn link_child(&mut self, parent: &Node, slot: usize, fill: Raw) -> &'a Node {
        let child = self.new_node(parent.shift() - SLOT_SHIFT);
        // SAFETY: a new node is valid while the index lives (type-stable nodes); the
        // lock is held.
        let child = unsafe { &*child };
        if fill != Raw::EMPTY {
            for at in 0..SLOTS {
                child.store(at, fill);
            }
        }
        parent.store(slot, Raw::node(child));
        child
    }

    /// Stores one folio in the cursor's node if its slots are free of folios.
    fn place(
        &mut self,
        cursor: &Cursor,
        folio: &NewFolio,
        shadows: &mut Vec<(PageIndex, u64)>,
    ) -> bool {
        // SAFETY: cursor nodes are in the tree and the lock is held.
        let node = unsafe { &*cursor.node };
        let first = ((folio.head.0 >> node.shift()) & SLOT_MASK) as usize;
        let count = (folio.order.pages() >> node.shift()).max(1) as usize;
        let slot_pages = 1u64 << node.shift();
        // Conflict check first: nothing is changed unless the whole folio fits.
        for slot in first..first + count {
            match node.load(slot).decode() {
                Decoded::Folio(..) | Decoded::Sibling(_) => return false,
                // SAFETY: under the lock, nodes in the tree stay valid.
                Decoded::Node(child) if Self::holds_folio(unsafe { &*child }) => return false,
                _ => {}
            }
        }
        for slot in first..first + count {
            let lo = cursor.base + slot as u64 * slot_pages;
            match node.load(slot).decode() {
                Decoded::Shadow(v) => shadows.push((PageIndex(lo), v)),
                Decoded::Node(child) => {
                    // SAFETY: under the lock; the subtree holds only shadows.
                    self.collapse(unsafe { &*child }, lo, shadows);
                    node.store(slot, Raw::EMPTY);
                    self.retire_node(child);
                }
                _ => {}
            }
        }
        // Head first (module docs): a reader that finds a sibling finds the head; one that
        // loads a tail slot before its sibling is stored sees the old entry (empty, or a
        // shadow) and takes the miss path, which then finds the folio under the lock.
        node.store(first, Raw::folio(folio.frame, folio.order));
        for slot in first + 1..first + count {
            node.store(slot, Raw::sibling(first));
        }
        true
    }

    fn holds_folio(node: &Node) -> bool {
        (0..SLOTS).any(|slot| match node.load(slot).decode() {
            Decoded::Folio(..) | Decoded::Sibling(_) => true,
            // SAFETY: under the lock, nodes in the tree stay valid.
            Decoded::Node(child) => Self::holds_folio(unsafe { &*child }),
            _ => false,
        })
    }

    /// Collects the shadows of a shadow-only subtree and frees its descendants (the
    /// caller unlinks and retires `node` itself).
    fn collapse(&mut self, node: &Node, base: u64, shadows: &mut Vec<(PageIndex, u64)>) {
        for slot in 0..SLOTS {
            let lo = base + ((slot as u64) << node.shift());
            match node.load(slot).decode() {
                Decoded::Shadow(v) => shadows.push((PageIndex(lo), v)),
                Decoded::Node(child) => {
                    // SAFETY: under the lock, nodes in the tree stay valid.
                    self.collapse(unsafe { &*child }, lo, shadows);
                    self.retire_node(child);
                }
                _ => {}
            }
        }
    }

    /// The path from the root to the node whose slot holds page `index`'s entry (after
    /// following a sibling to its head): (node, slot) pairs, deepest last.
    fn path_to(&self, index: u64) -> Vec<(&'a Node, usize)> {
        let mut path = Vec::with_capacity(10);
        let Some(mut node) = self.root() else {
            return path;
        };
        if (index >> node.shift()) >> SLOT_SHIFT != 0 {
            return path;
        }
        loop {
            let slot = ((index >> node.shift()) & SLOT_MASK) as usize;
            match node.load(slot).decode() {
                Decoded::Node(child) => {
                    path.push((node, slot));
                    // SAFETY: under the lock, nodes in the tree stay valid.
                    node = unsafe { &*child };
                }
                Decoded::Sibling(head) => {
                    path.push((node, head));
                    return path;
                }
                _ => {
                    path.push((node, slot));
                    return path;
                }
            }
        }
    }

    /// The entry of page `index`, as `Index::lookup` sees it now (exact: the lock is
    /// held, so no writer races with the walk).
    pub fn get(&self, index: PageIndex) -> Entry {
        self.index.lookup(index)
    }

    /// Removes the folio at `frame` that covers page `index`, leaving a shadow (or empty
    /// slots) in every slot it covered. Returns false, changing
    /// nothing, if that slot does not hold `frame`.
    ///
    /// Context: the lock is held; the caller froze the folio or owns it LOCKED.
    pub fn remove_folio(&mut self, index: PageIndex, frame: FrameId, leave: Leave) -> bool {
        let path = self.path_to(index.0);
        let Some(&(node, head)) = path.last() else {
            return false;
        };
        let Decoded::Folio(found, order) = node.load(head).decode() else {
            return false;
        };
        if found != frame {
            return false;
        }
        let count = (order.pages() >> node.shift()).max(1) as usize;
        // Every slot the folio covered gets the shadow, so a refault of any of its pages
        // is recognised and a smaller folio placed later collects only its own part.
        let value = match leave {
            Leave::Shadow(v) => Raw::shadow(v),
            Leave::Empty => Raw::EMPTY,
        };
        for slot in (head..head + count).rev() {
            node.store(slot, value);
        }
        if leave == Leave::Empty {
            self.prune(&path);
        }
        true
    }

    /// Removes the shadow entries with `value` that a folio of `order` at `head` left,
    /// if they are still there. Returns the slots emptied.
    pub fn remove_shadows(&mut self, head: PageIndex, order: Order, value: u64) -> u64 {
        let mut removed = 0;
        let mut at = head.0;
        while at < head.0 + order.pages() {
            let path = self.path_to(at);
            let Some(&(node, slot)) = path.last() else {
                return removed;
            };
            let slot_pages = 1u64 << node.shift();
            if node.load(slot) == Raw::shadow(value) {
                node.store(slot, Raw::EMPTY);
                self.prune(&path);
                removed += 1;
            }
            at = (at / slot_pages + 1) * slot_pages;
        }
        removed
    }

    /// Unlinks nodes left empty at the end of `path`, bottom up (never the root).
    fn prune(&mut self, path: &[(&'a Node, usize)]) {
        for depth in (1..path.len()).rev() {
            let (node, _) = path[depth];
            if node.used() != 0 {
                return;
            }
            let (parent, slot) = path[depth - 1];
            parent.store(slot, Raw::EMPTY);
            self.retire_node(node);
        }
    }

    /// Checks the structural invariants of the module docs; panics on a violation.
    /// Returns (folios, shadows). For tests.
    #[cfg(any(test, fuzzing))]
    pub fn check_invariants(&self) -> (usize, usize) {
        fn walk(node: &Node, is_root: bool, counts: &mut (usize, usize), nodes: &mut usize) {
            *nodes += 1;
            let mut used = 0;
            let mut slot = 0;
            while slot < SLOTS {
                let raw = node.load(slot);
                if raw != Raw::EMPTY {
                    used += 1;
                }
                match raw.decode() {
                    Decoded::Folio(_, order) => {
                        counts.0 += 1;
                        let count = (order.pages() >> node.shift()).max(1) as usize;
                        assert!(
                            u32::from(order.get()) >= node.shift()
                                && u32::from(order.get()) < node.shift() + SLOT_SHIFT,
                            "folio of order {} in a node of shift {}",
                            order.get(),
                            node.shift()
                        );
                        assert_eq!(slot % count, 0, "unaligned folio");
                        for tail in slot + 1..slot + count {
                            let t = node.load(tail);
                            assert!(
                                matches!(t.decode(), Decoded::Sibling(h) if h == slot),
                                "broken sibling"
                            );
                            used += 1;
                        }
                        slot += count;
                        continue;
                    }
                    Decoded::Sibling(_) => panic!("orphan sibling at slot {slot}"),
                    Decoded::Shadow(_) => counts.1 += 1,
                    Decoded::Node(child) => {
                        // SAFETY: under the lock, nodes in the tree stay valid.
                        let child = unsafe { &*child };
                        assert_eq!(child.shift() + SLOT_SHIFT, node.shift(), "child level");
                        walk(child, false, counts, nodes);
                    }
                    Decoded::Empty => {}
                }
                slot += 1;
            }
            assert_eq!(used, node.used(), "node used count");
            assert!(is_root || used > 0, "empty non-root node");
        }
        let mut counts = (0, 0);
        let mut nodes = 0;
        if let Some(root) = self.root() {
            walk(root, true, &mut counts, &mut nodes);
        }
        assert_eq!(nodes, self.index.node_count(), "node count");
        counts
    }
}

/// What a removed folio leaves in its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leave {
    /// A shadow entry with this value (eviction).
    Shadow(u64),
    /// Nothing (I/O error, invalidation).
    Empty,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn folio(frame: u32, order: u8, head: u64) -> NewFolio {
        NewFolio {
            frame: FrameId(frame),
            order: Order::new(order),
            head: PageIndex(head),
        }
    }

    fn lookup(index: &Index, page: u64) -> Entry {
        index.lookup(PageIndex(page))
    }

    #[test]
    fn run_of_small_folios_takes_one_walk_per_leaf() {
        let index = Index::default();
        let run: Vec<NewFolio> = (0..128).map(|i| folio(i as u32, 0, 1000 + i)).collect();
        let out = index.lock_for_insert(128).insert_run(&run);
        assert!(out.inserted.iter().all(|&ok| ok));
        // Pages 1000..1128 touch three leaves (960.., 1024.., 1088..).
        assert_eq!(out.walks, 3);
        for i in 0..128 {
            assert_eq!(
                lookup(&index, 1000 + i),
                Entry::Folio {
                    frame: FrameId(i as u32),
                    order: Order::ZERO,
                    head: PageIndex(1000 + i)
                }
            );
        }
        assert_eq!(lookup(&index, 999), Entry::Empty);
        assert_eq!(lookup(&index, 1 << 40), Entry::Empty);
        assert_eq!(index.lock().check_invariants(), (128, 0));
    }

    #[test]
    fn large_folios_cover_their_pages_with_siblings() {
        let index = Index::default();
        let run = [folio(0, 9, 512), folio(600, 2, 1024), folio(700, 6, 1088)];
        let out = index.lock_for_insert(600).insert_run(&run);
        assert_eq!(out.inserted, vec![true, true, true]);
        for page in [512, 700, 1023] {
            assert!(matches!(
                lookup(&index, page),
                Entry::Folio {
                    frame: FrameId(0),
                    head: PageIndex(512),
                    ..
                }
            ));
        }
        assert!(matches!(
            lookup(&index, 1027),
            Entry::Folio {
                frame: FrameId(600),
                head: PageIndex(1024),
                ..
            }
        ));
        assert_eq!(lookup(&index, 1028), Entry::Empty);
        assert!(matches!(
            lookup(&index, 1151),
            Entry::Folio {
                frame: FrameId(700),
                ..
            }
        ));
        // Overlaps conflict, whatever their size.
        let out =
            index
                .lock()
                .insert_run(&[folio(9, 0, 513), folio(10, 9, 1024), folio(11, 0, 1028)]);
        assert_eq!(out.inserted, vec![false, false, true]);
        assert_eq!(index.lock().check_invariants(), (4, 0));
    }

    #[test]
    fn eviction_leaves_shadows_that_insertion_collects() {
        let index = Index::default();
        index
            .lock_for_insert(600)
            .insert_run(&[folio(1, 9, 0), folio(2, 0, 512)]);
        let mut w = index.lock();
        assert!(
            !w.remove_folio(PageIndex(3), FrameId(2), Leave::Shadow(7)),
            "wrong frame"
        );
        assert!(w.remove_folio(PageIndex(3), FrameId(1), Leave::Shadow(7)));
        assert!(w.remove_folio(PageIndex(512), FrameId(2), Leave::Shadow(8)));
        assert_eq!(
            w.check_invariants(),
            (0, 9),
            "8 slots of the large folio, 1 small"
        );
        drop(w);
        assert_eq!(lookup(&index, 0), Entry::Shadow(7));
        // Small folios inside the large shadow split it: each collects the shadow at its
        // own page, and the other pages of the split slot keep it.
        let out = index
            .lock_for_insert(1)
            .insert_run(&[folio(3, 0, 70), folio(4, 0, 71)]);
        assert_eq!(out.inserted, vec![true, true]);
        assert_eq!(out.shadows, vec![(PageIndex(70), 7), (PageIndex(71), 7)]);
        assert_eq!(lookup(&index, 64), Entry::Shadow(7));
        assert_eq!(lookup(&index, 127), Entry::Shadow(7));
        // A large folio over a leaf of shadows collapses it, collecting each.
        let mut w = index.lock();
        assert!(w.remove_folio(PageIndex(70), FrameId(3), Leave::Shadow(9)));
        assert!(w.remove_folio(PageIndex(71), FrameId(4), Leave::Shadow(10)));
        drop(w);
        let out = index.lock_for_insert(512).insert_run(&[folio(5, 9, 0)]);
        assert_eq!(out.inserted, vec![true]);
        let mut want = vec![(PageIndex(0), 7)];
        want.extend((64..70).map(|page| (PageIndex(page), 7)));
        want.extend([(PageIndex(70), 9), (PageIndex(71), 10)]);
        want.extend((72..128).map(|page| (PageIndex(page), 7)));
        want.extend((2..8).map(|slot| (PageIndex(slot * 64), 7)));
        assert_eq!(out.shadows, want);
        assert_eq!(lookup(&index, 512), Entry::Shadow(8));
        assert_eq!(index.lock().check_invariants(), (1, 1));
    }

    #[test]
    fn removal_prunes_empty_nodes() {
        let index = Index::default();
        index.lock_for_insert(1).insert_run(&[folio(1, 0, 1 << 30)]);
        assert!(index.node_count() > 3);
        let mut w = index.lock();
        assert!(w.remove_folio(PageIndex(1 << 30), FrameId(1), Leave::Empty));
        w.check_invariants();
        drop(w);
        assert_eq!(index.node_count(), 1, "only the root remains");
    }

    /// Finding 4 of docs/reliability.md (`fuzz/regressions/index/empty-non-root-node`): an
    /// emptied root is replaced when the tree grows, not pushed down as an empty node.
    #[test]
    fn an_empty_root_is_replaced_when_the_tree_grows() {
        let index = Index::default();
        index.lock_for_insert(256).insert_run(&[folio(1, 8, 0)]);
        assert!(index
            .lock()
            .remove_folio(PageIndex(0), FrameId(1), Leave::Empty));
        assert_eq!(index.node_count(), 1, "an empty root");
        let allocated = index.nodes_allocated();
        // Beyond the root's span: the tree grows to its greatest height.
        let far = (1u64 << 60) - (1 << 14);
        let out = index.lock_for_insert(0).insert_run(&[folio(2, 0, far)]);
        assert_eq!(out.inserted, vec![true]);
        assert_eq!(index.lock().check_invariants(), (1, 0));
        assert_eq!(index.node_count(), 10, "one node per level, none empty");
        assert_eq!(
            index.nodes_allocated(),
            allocated.max(10),
            "the old root went back to the pool"
        );
        assert_eq!(lookup(&index, 0), Entry::Empty);
        assert!(matches!(
            lookup(&index, far),
            Entry::Folio {
                frame: FrameId(2),
                ..
            }
        ));
        // The same when it grows for a large folio's level (shift 6) beside slot 0.
        let index = Index::default();
        index.lock_for_insert(1).insert_run(&[folio(1, 0, 0)]);
        assert!(index
            .lock()
            .remove_folio(PageIndex(0), FrameId(1), Leave::Empty));
        index.lock_for_insert(512).insert_run(&[folio(2, 9, 512)]);
        assert_eq!(index.lock().check_invariants(), (1, 0));
        assert_eq!(index.node_count(), 1);
        // And a root with entries is still pushed down under the new one.
        index.lock_for_insert(0).insert_run(&[folio(3, 0, 1 << 20)]);
        assert_eq!(index.lock().check_invariants(), (2, 0));
        assert!(matches!(
            lookup(&index, 600),
            Entry::Folio {
                frame: FrameId(2),
                ..
            }
        ));
    }

    /// Finding 5 of docs/reliability.md (`fuzz/regressions/index/split-shadow-slot`): a
    /// small folio inserted under the shadow of an evicted order-9 folio splits one 64-page
    /// slot, and the other 63 pages keep the shadow (as the kernel's `xas_split` copies
    /// the entry); the shadow log's `remove_shadows` still expires every copy.
    #[test]
    fn a_split_shadow_keeps_the_workingset_of_every_page() {
        let index = Index::default();
        index
            .lock_for_insert(544)
            .insert_run(&[folio(1, 9, 0), folio(2, 5, 512)]);
        assert!(index
            .lock()
            .remove_folio(PageIndex(0), FrameId(1), Leave::Shadow(7)));
        let out = index.lock_for_insert(1).insert_run(&[folio(3, 0, 0)]);
        assert_eq!(out.inserted, vec![true]);
        assert_eq!(
            out.shadows,
            vec![(PageIndex(0), 7)],
            "reported once, at page 0"
        );
        for page in 1..512 {
            assert_eq!(lookup(&index, page), Entry::Shadow(7), "page {page}");
        }
        // 63 in the new leaf, 7 in the level-1 node.
        assert_eq!(index.lock().check_invariants(), (2, 70));
        // A folio at the end of the split slot collects the copy at its own page.
        let out = index.lock_for_insert(1).insert_run(&[folio(4, 2, 60)]);
        assert_eq!(
            out.shadows,
            (60..64).map(|p| (PageIndex(p), 7)).collect::<Vec<_>>()
        );
        assert_eq!(index.lock().check_invariants(), (3, 66));
        // The shadow log's expiry of the order-9 folio finds every copy, and the leaf,
        // which keeps its folios, stays.
        let removed = index.lock().remove_shadows(PageIndex(0), Order::new(9), 7);
        assert_eq!(removed, 66);
        for page in (1..60).chain(64..512) {
            assert_eq!(lookup(&index, page), Entry::Empty, "page {page}");
        }
        assert_eq!(index.lock().check_invariants(), (3, 0));
        let mut w = index.lock();
        assert!(w.remove_folio(PageIndex(0), FrameId(3), Leave::Empty));
        assert!(w.remove_folio(PageIndex(60), FrameId(4), Leave::Empty));
        assert!(w.remove_folio(PageIndex(512), FrameId(2), Leave::Empty));
        assert_eq!(w.check_invariants(), (0, 0));
        drop(w);
        assert_eq!(index.node_count(), 1, "pruned to the root");
    }

    #[test]
    fn random_operations_match_a_btreemap_model() {
        use proptest::prelude::*;
        proptest!(ProptestConfig::with_cases(if cfg!(miri) { 3 } else { 64 }), |(ops in proptest::collection::vec((0u8..3, 0u64..4096, 0u8..10), 1..200))| {
            let index = Index::default();
            // page -> (frame, head, order) for every page a folio covers.
            let mut model: BTreeMap<u64, (u32, u64, u8)> = BTreeMap::new();
            let mut next_frame = 0u32;
            for (op, page, order) in ops {
                let order = Order::new(order);
                let head = PageIndex(page).align_down(order).0;
                match op {
                    0 | 1 => {
                        next_frame += 1;
                        let free = (head..head + order.pages()).all(|p| !model.contains_key(&p));
                        let out = index.lock_for_insert(order.pages()).insert_run(&[folio(next_frame, order.get(), head)]);
                        prop_assert_eq!(out.inserted[0], free);
                        if free {
                            for p in head..head + order.pages() {
                                model.insert(p, (next_frame, head, order.get()));
                            }
                        }
                    }
                    _ => {
                        if let Some(&(frame, head, order)) = model.get(&page) {
                            prop_assert!(index.lock().remove_folio(PageIndex(page), FrameId(frame), Leave::Empty));
                            for p in head..head + (1u64 << order) {
                                model.remove(&p);
                            }
                        }
                    }
                }
                index.lock().check_invariants();
            }
            for page in 0..4096u64 {
                let want = model.get(&page).map(|&(f, h, o)| Entry::Folio { frame: FrameId(f), order: Order::new(o), head: PageIndex(h) });
                prop_assert_eq!(lookup(&index, page), want.unwrap_or(Entry::Empty));
            }
        });
    }
}
