//! The index's write side: every mutation of the tree, as a method of the write guard
//! (`IndexWriteGuard`, the index's lock held): growing the tree, run insertion with its
//! shadow collection, splits and collapses, folio removal, shadow expiry, pruning.
//!
//! The algorithms and the order of their stores are in the `index` module docs (run
//! insertion, shadows of large folios, growing the tree, what a reader may see); node
//! allocation and retirement are in `node`. Nothing here is `unsafe`: node references
//! come from `node`'s API, bounded by the guard's borrow of the index.
//!
//! Protection: the index's mutex, held by the guard for its whole life. Readers run
//! concurrently (lock-free); every store here is ordered for them (module docs of
//! `index`). Limits: page indexes below 2^60; a run is inserted in one hold of the lock,
//! so its length bounds the hold.

use super::node::{Decoded, Node, Raw, SHIFT_MAX, SLOTS, SLOT_MASK, SLOT_SHIFT};
use super::{Entry, IndexWriteGuard, InsertOutcome, Inserted, Leave, Mark, NewFolio, Shadows};
use crate::types::{FrameId, Order, PageIndex};

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

/// Where a walk stopped: a node, and the page of that node's slot 0.
struct Cursor<'a> {
    node: &'a Node,
    base: u64,
}

impl<'a> IndexWriteGuard<'a> {
    /// Grows the tree until the root covers page `last` and its shift is at least
    /// `shift_min` (the level a large folio lives at). A root with entries is pushed down
    /// under a new root, one level at a time; an empty root is replaced (module docs).
    fn extend(&mut self, last: u64, shift_min: u32) {
        loop {
            match self.root() {
                None => {
                    let node = self.new_node(root_shift_for(last, shift_min));
                    self.index.root.set(node);
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
                    self.index.root.set(node);
                    self.retire_node(root);
                    return;
                }
                Some(root) => {
                    assert!(
                        root.shift() < SHIFT_MAX,
                        "page index {last} beyond the index's range"
                    );
                    // Filled (the old root in slot 0, with its marks) before it is
                    // visible to anyone.
                    let node = self.new_node(root.shift() + SLOT_SHIFT);
                    for mark in Mark::ALL {
                        if root.is_marked(mark) {
                            node.set_mark(0, mark);
                        }
                    }
                    node.store(0, Raw::node(root));
                    self.index.root.set(node);
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
            inserted: Inserted::with_capacity(run.len()),
            ..Default::default()
        };
        let Some(last) = run.last() else {
            return out;
        };
        let shift_max = run.iter().map(|f| level_shift(f.order)).max().unwrap_or(0);
        self.extend(last.head.0 + last.order.pages() - 1, shift_max);
        let mut cursor: Option<Cursor<'a>> = None;
        for folio in run {
            debug_assert_eq!(folio.head.0 % folio.order.pages(), 0, "unaligned folio");
            let target_shift = level_shift(folio.order);
            let reuse = cursor.as_ref().is_some_and(|c| {
                c.node.shift() == target_shift
                    && folio.head.0 >= c.base
                    && folio.head.0 < c.base + c.node.span_pages()
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
    fn descend_creating(&mut self, index: u64, target_shift: u32) -> Option<Cursor<'a>> {
        let mut node = self.root().expect("extend made a root");
        let mut base = 0u64;
        while node.shift() > target_shift {
            let slot = ((index >> node.shift()) & SLOT_MASK) as usize;
            let slot_base = base + ((slot as u64) << node.shift());
            let child = match node.get(slot) {
                Decoded::Node(child) => child,
                Decoded::Folio(..) | Decoded::Sibling { .. } => return None,
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
        if fill != Raw::EMPTY {
            for at in 0..SLOTS {
                child.store(at, fill);
            }
        }
        parent.store(slot, Raw::node(child));
        child
    }

    /// Stores one folio in the cursor's node if its slots are free of folios.
    fn place(&mut self, cursor: &Cursor<'a>, folio: &NewFolio, shadows: &mut Shadows) -> bool {
        let node = cursor.node;
        let first = ((folio.head.0 >> node.shift()) & SLOT_MASK) as usize;
        let count = (folio.order.pages() >> node.shift()).max(1) as usize;
        let slot_pages = 1u64 << node.shift();
        // Conflict check first: nothing is changed unless the whole folio fits.
        for slot in first..first + count {
            match node.get(slot) {
                Decoded::Folio(..) | Decoded::Sibling { .. } => return false,
                Decoded::Node(child) if Self::holds_folio(child) => return false,
                _ => {}
            }
        }
        for slot in first..first + count {
            let lo = cursor.base + slot as u64 * slot_pages;
            match node.get(slot) {
                Decoded::Shadow(v) => shadows.push((PageIndex(lo), v)),
                Decoded::Node(child) => {
                    // The subtree holds only shadows (checked above).
                    self.collapse(child, lo, shadows);
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
            node.store(slot, Raw::sibling(first, folio.frame, folio.order));
        }
        true
    }

    fn holds_folio(node: &Node) -> bool {
        (0..SLOTS).any(|slot| match node.get(slot) {
            Decoded::Folio(..) | Decoded::Sibling { .. } => true,
            Decoded::Node(child) => Self::holds_folio(child),
            _ => false,
        })
    }

    /// Collects the shadows of a shadow-only subtree and frees its descendants (the
    /// caller unlinks and retires `node` itself).
    fn collapse(&mut self, node: &'a Node, base: u64, shadows: &mut Shadows) {
        for slot in 0..SLOTS {
            let lo = base + ((slot as u64) << node.shift());
            match node.get(slot) {
                Decoded::Shadow(v) => shadows.push((PageIndex(lo), v)),
                Decoded::Node(child) => {
                    self.collapse(child, lo, shadows);
                    self.retire_node(child);
                }
                _ => {}
            }
        }
    }

    /// The path from the root to the node whose slot holds page `index`'s entry (after
    /// following a sibling to its head): (node, slot) pairs, deepest last.
    pub(super) fn path_to(&self, index: u64) -> Vec<(&'a Node, usize)> {
        let mut path = Vec::with_capacity(10);
        let Some(mut node) = self.root() else {
            return path;
        };
        if (index >> node.shift()) >> SLOT_SHIFT != 0 {
            return path;
        }
        loop {
            let slot = ((index >> node.shift()) & SLOT_MASK) as usize;
            match node.get(slot) {
                Decoded::Node(child) => {
                    path.push((node, slot));
                    node = child;
                }
                Decoded::Sibling { head, .. } => {
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
    ///
    /// Context: the lock is held (this guard); does not sleep.
    pub fn get(&self, index: PageIndex) -> Entry {
        self.index.lookup(index)
    }

    /// Removes the folio at `frame` that covers page `index`, leaving a shadow (or empty
    /// slots) in every slot it covered. Its marks go with it: the caller proves the folio
    /// clean (frozen by reclaim, a failed read's) or has discarded its dirty state
    /// (truncation); a folio whose bytes move to another frame keeps its slot and marks
    /// (`replace_folio`). Returns false, changing nothing, if that slot does not hold
    /// `frame`.
    ///
    /// Context: the lock is held; the caller froze the folio or owns it LOCKED.
    pub fn remove_folio(&mut self, index: PageIndex, frame: FrameId, leave: Leave) -> bool {
        let path = self.path_to(index.0);
        let Some(&(node, head)) = path.last() else {
            return false;
        };
        let Decoded::Folio(found, order) = node.get(head) else {
            return false;
        };
        if found != frame {
            return false;
        }
        let count = (order.pages() >> node.shift()).max(1) as usize;
        // Its marks go first: a shadow or an empty slot never carries one.
        for mark in Mark::ALL {
            if node.marks(mark) & (1 << head) != 0 {
                Self::clear_mark_on_path(&path, mark);
            }
        }
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

    /// Puts `new` in the slots of the folio `old` (same head, same order) in place, for
    /// copy on write (`FolioWriter::replace_for_write`). The slots' marks stay: they belong to
    /// the pages, so a folio that a sync tagged `Towrite` is still tagged as its copy, and
    /// a dirty one still `Dirty` (a removal and a re-insertion cleared them, and a sync
    /// then returned without the copy's bytes: issue 28). Head first, then the siblings,
    /// as `place` stores them: a lock-free reader sees the old folio or the new one, never
    /// a hole, and one that pinned the old folio through a sibling not yet stored finds
    /// the head changed when it checks again (`Mapping::find_get`'s step 3). Returns
    /// false, changing nothing, if the slot does not hold `old` at that head and order.
    ///
    /// Context: the lock is held (this guard); does not sleep.
    pub fn replace_folio(&mut self, old: FrameId, new: NewFolio) -> bool {
        let path = self.path_to(new.head.0);
        let Some(&(node, first)) = path.last() else {
            return false;
        };
        if !matches!(node.get(first), Decoded::Folio(frame, order) if frame == old && order == new.order)
        {
            return false;
        }
        let count = (new.order.pages() >> node.shift()).max(1) as usize;
        node.store(first, Raw::folio(new.frame, new.order));
        for slot in first + 1..first + count {
            node.store(slot, Raw::sibling(first, new.frame, new.order));
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
            debug_assert!(
                Mark::ALL.iter().all(|&mark| !node.is_marked(mark)),
                "an empty node with marks"
            );
            parent.store(slot, Raw::EMPTY);
            self.retire_node(node);
        }
    }

    /// Checks the structural invariants of the module docs; panics on a violation.
    /// Returns (folios, shadows). For tests.
    #[cfg(any(test, fuzzing))]
    pub fn check_invariants(&self) -> (usize, usize) {
        /// Where a node sits: only the root may be empty.
        #[derive(Clone, Copy, PartialEq, Eq)]
        enum Level {
            Root,
            Inner,
        }
        fn walk(node: &Node, level: Level, counts: &mut (usize, usize), nodes: &mut usize) {
            *nodes += 1;
            let mut used = 0;
            let mut slot = 0;
            while slot < SLOTS {
                if node.load(slot) != Raw::EMPTY {
                    used += 1;
                }
                match node.get(slot) {
                    Decoded::Folio(frame, order) => {
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
                            assert!(
                                matches!(
                                    node.get(tail),
                                    Decoded::Sibling { head, frame: f, order: o }
                                        if head == slot && f == frame && o == order
                                ),
                                "broken sibling"
                            );
                            used += 1;
                        }
                        slot += count;
                        continue;
                    }
                    Decoded::Sibling { .. } => panic!("orphan sibling at slot {slot}"),
                    Decoded::Shadow(_) => counts.1 += 1,
                    Decoded::Node(child) => {
                        assert_eq!(child.shift() + SLOT_SHIFT, node.shift(), "child level");
                        walk(child, Level::Inner, counts, nodes);
                    }
                    Decoded::Empty => {}
                }
                slot += 1;
            }
            assert_eq!(used, node.used(), "node used count");
            // Marks (`mark` module docs): on a folio's head slot, or on a node slot exactly
            // when the child has the mark.
            for mark in Mark::ALL {
                for slot in 0..SLOTS {
                    let bit = node.marks(mark) & (1 << slot) != 0;
                    match node.get(slot) {
                        Decoded::Folio(..) => {}
                        Decoded::Node(child) => assert_eq!(
                            bit,
                            child.is_marked(mark),
                            "{mark:?} of slot {slot} and its child disagree"
                        ),
                        _ => assert!(!bit, "{mark:?} on slot {slot} without a folio"),
                    }
                }
            }
            assert!(level == Level::Root || used > 0, "empty non-root node");
        }
        let mut counts = (0, 0);
        let mut nodes = 0;
        if let Some(root) = self.root() {
            walk(root, Level::Root, &mut counts, &mut nodes);
        }
        assert_eq!(nodes, self.index.node_count(), "node count");
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::folio;
    use super::super::Index;
    use super::*;
    use std::collections::BTreeMap;

    fn lookup(index: &Index, page: u64) -> Entry {
        index.lookup(PageIndex(page))
    }

    #[test]
    fn run_of_small_folios_takes_one_walk_per_leaf() {
        let index = Index::default();
        let run: Vec<NewFolio> = (0..128).map(|i| folio(i as u32, 0, 1000 + i)).collect();
        let out = index.lock_for_insert(run[0].head, 128).insert_run(&run);
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
        let out = index.lock_for_insert(run[0].head, 600).insert_run(&run);
        assert_eq!(out.inserted[..], [true, true, true]);
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
        assert_eq!(out.inserted[..], [false, false, true]);
        assert_eq!(index.lock().check_invariants(), (4, 0));
    }

    #[test]
    fn eviction_leaves_shadows_that_insertion_collects() {
        let index = Index::default();
        index
            .lock_for_insert(PageIndex(0), 600)
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
            .lock_for_insert(PageIndex(70), 1)
            .insert_run(&[folio(3, 0, 70), folio(4, 0, 71)]);
        assert_eq!(out.inserted[..], [true, true]);
        assert_eq!(out.shadows[..], [(PageIndex(70), 7), (PageIndex(71), 7)]);
        assert_eq!(lookup(&index, 64), Entry::Shadow(7));
        assert_eq!(lookup(&index, 127), Entry::Shadow(7));
        // A large folio over a leaf of shadows collapses it, collecting each.
        let mut w = index.lock();
        assert!(w.remove_folio(PageIndex(70), FrameId(3), Leave::Shadow(9)));
        assert!(w.remove_folio(PageIndex(71), FrameId(4), Leave::Shadow(10)));
        drop(w);
        let out = index
            .lock_for_insert(PageIndex(0), 512)
            .insert_run(&[folio(5, 9, 0)]);
        assert_eq!(out.inserted[..], [true]);
        let mut want = vec![(PageIndex(0), 7)];
        want.extend((64..70).map(|page| (PageIndex(page), 7)));
        want.extend([(PageIndex(70), 9), (PageIndex(71), 10)]);
        want.extend((72..128).map(|page| (PageIndex(page), 7)));
        want.extend((2..8).map(|slot| (PageIndex(slot * 64), 7)));
        assert_eq!(out.shadows[..], want[..]);
        assert_eq!(lookup(&index, 512), Entry::Shadow(8));
        assert_eq!(index.lock().check_invariants(), (1, 1));
    }

    #[test]
    fn removal_prunes_empty_nodes() {
        let index = Index::default();
        index
            .lock_for_insert(PageIndex(1 << 30), 1)
            .insert_run(&[folio(1, 0, 1 << 30)]);
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
        index
            .lock_for_insert(PageIndex(0), 256)
            .insert_run(&[folio(1, 8, 0)]);
        assert!(index
            .lock()
            .remove_folio(PageIndex(0), FrameId(1), Leave::Empty));
        assert_eq!(index.node_count(), 1, "an empty root");
        let allocated = index.nodes_allocated();
        // Beyond the root's span: the tree grows to its greatest height.
        let far = (1u64 << 60) - (1 << 14);
        let out = index
            .lock_for_insert(PageIndex(far), 0)
            .insert_run(&[folio(2, 0, far)]);
        assert_eq!(out.inserted[..], [true]);
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
        index
            .lock_for_insert(PageIndex(0), 1)
            .insert_run(&[folio(1, 0, 0)]);
        assert!(index
            .lock()
            .remove_folio(PageIndex(0), FrameId(1), Leave::Empty));
        index
            .lock_for_insert(PageIndex(512), 512)
            .insert_run(&[folio(2, 9, 512)]);
        assert_eq!(index.lock().check_invariants(), (1, 0));
        assert_eq!(index.node_count(), 1);
        // And a root with entries is still pushed down under the new one.
        index
            .lock_for_insert(PageIndex(1 << 20), 0)
            .insert_run(&[folio(3, 0, 1 << 20)]);
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
            .lock_for_insert(PageIndex(0), 544)
            .insert_run(&[folio(1, 9, 0), folio(2, 5, 512)]);
        assert!(index
            .lock()
            .remove_folio(PageIndex(0), FrameId(1), Leave::Shadow(7)));
        let out = index
            .lock_for_insert(PageIndex(0), 1)
            .insert_run(&[folio(3, 0, 0)]);
        assert_eq!(out.inserted[..], [true]);
        assert_eq!(
            out.shadows[..],
            [(PageIndex(0), 7)],
            "reported once, at page 0"
        );
        for page in 1..512 {
            assert_eq!(lookup(&index, page), Entry::Shadow(7), "page {page}");
        }
        // 63 in the new leaf, 7 in the level-1 node.
        assert_eq!(index.lock().check_invariants(), (2, 70));
        // A folio at the end of the split slot collects the copy at its own page.
        let out = index
            .lock_for_insert(PageIndex(60), 1)
            .insert_run(&[folio(4, 2, 60)]);
        assert_eq!(
            out.shadows[..],
            (60..64).map(|p| (PageIndex(p), 7)).collect::<Vec<_>>()[..]
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
                        let out = index.lock_for_insert(PageIndex(head), order.pages()).insert_run(&[folio(next_frame, order.get(), head)]);
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
