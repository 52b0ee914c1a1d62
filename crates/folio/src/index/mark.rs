//! The index's marks, the xarray's: a bit per slot per mark in every node, so that a walk
//! finds the marked folios (dirty ones, those a sync must write) without visiting clean
//! subtrees. For the write side (issue 14, DESIGN.md §8); nothing calls them yet but the
//! tests.
//!
//! Design: a folio's marks live in its head slot's bits (a large folio's sibling slots
//! carry none). A slot that holds a child node has a mark's bit set exactly when some slot
//! of the child has it: `set_mark` sets the bits from the folio up to the root, stopping
//! at the first ancestor that had it; `clear_mark` clears them upwards while the node it
//! leaves has no bit of that mark. `marked_walk` follows set bits only, in index order, so
//! it never descends into a subtree without the mark. `tag_range` is the kernel's
//! `tag_pages_for_writeback`: every folio of a range marked `from` is marked `to` too,
//! in one walk of the `from` bits, so a sync writes exactly what was dirty when it began
//! even while writers keep dirtying the file.
//!
//! Invariants (checked by `check_invariants`): a mark's bit is set only on a slot that
//! holds a folio's head or a child node, and on a node slot exactly when the child has a
//! bit of that mark set. Removing a folio clears its marks (`remove_folio`); shadows,
//! siblings and empty slots never carry marks; growing the tree carries the old root's
//! marks into the new root's slot 0.
//!
//! Protection: bits change only under the index's lock (the write guard), with Release;
//! `marked_walk` takes no lock and loads them with Acquire, so without the lock its answer
//! is a hint like every lock-free walk's (`lookup` module docs): a folio marked or
//! unmarked during the walk may be missed or reported. Called while the caller holds the
//! write guard, it is exact.
//!
//! Limits: `MARKS` marks (two: `Dirty`, `Towrite`), 8 bytes each per node.

use std::ops::ControlFlow;

use super::node::{Decoded, Node, SHIFT_MAX, SLOTS, SLOT_SHIFT};
use super::{Index, IndexWriteGuard, Mark};
use crate::types::{FrameId, Order, PageIndex};

/// A marked folio a walk found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MarkedFolio {
    pub head: PageIndex,
    pub frame: FrameId,
    pub order: Order,
}

/// The bits of slots `first..last` (empty if `first >= last`; `last <= 64`).
fn slot_range(first: usize, last: usize) -> u64 {
    if first >= last {
        return 0;
    }
    (u64::MAX >> (SLOTS - (last - first))) << first
}

/// The slots of `node` (shift `shift`, slot 0 at page `base`) whose `mark` bit is set and
/// whose range meets `[start, end)`, as bits; a large folio that starts before `start`
/// counts by its head slot (the range may begin in one of its siblings).
fn marked_slots(node: &Node, base: u64, start: u64, end: u64, mark: Mark, shift: u32) -> u64 {
    let slot_pages = 1u64 << shift;
    let first = ((start.max(base) - base) >> shift) as usize;
    let last = (end.saturating_sub(base).div_ceil(slot_pages)).min(SLOTS as u64) as usize;
    if first >= SLOTS {
        return 0;
    }
    let marks = node.marks(mark);
    let mut bits = marks & slot_range(first, last);
    if first < last {
        if let Decoded::Sibling { head, .. } = node.get(first) {
            if head < first && marks & (1 << head) != 0 {
                bits |= 1 << head;
            }
        }
    }
    bits
}

impl Index {
    /// Calls `f` for every folio marked `mark` that meets `[start, end)` (its head may be
    /// before `start`), in index order, until `f` breaks. Visits only the nodes whose
    /// parent's slot has the mark (module docs). Lock-free: a hint unless the caller holds
    /// the write guard.
    ///
    /// Context: any thread; takes no lock; does not sleep (but `f` may).
    pub(crate) fn marked_walk(
        &self,
        start: PageIndex,
        end: PageIndex,
        mark: Mark,
        f: &mut dyn FnMut(MarkedFolio) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let mut visited = 0;
        self.marked_walk_counted(start, end, mark, f, &mut visited)
    }

    /// `marked_walk`, counting the nodes it visits.
    fn marked_walk_counted(
        &self,
        start: PageIndex,
        end: PageIndex,
        mark: Mark,
        f: &mut dyn FnMut(MarkedFolio) -> ControlFlow<()>,
        visited: &mut u32,
    ) -> ControlFlow<()> {
        let Some(root) = self.root.get() else {
            return ControlFlow::Continue(());
        };
        let shift = root.shift();
        if shift > SHIFT_MAX || start >= end {
            return ControlFlow::Continue(());
        }
        let span = 1u64 << (shift + SLOT_SHIFT);
        if start.0 >= span {
            return ControlFlow::Continue(());
        }
        let mut walk = MarkedWalk {
            end: end.0.min(span),
            mark,
            f,
            visited: 0,
        };
        let flow = walk.node(root, 0, start.0, shift);
        *visited = walk.visited;
        flow
    }
}

/// One `marked_walk`: what stays the same from node to node.
struct MarkedWalk<'f> {
    end: u64,
    mark: Mark,
    f: &'f mut dyn FnMut(MarkedFolio) -> ControlFlow<()>,
    /// Nodes visited, for the tests.
    visited: u32,
}

impl MarkedWalk<'_> {
    /// The marked folios of `node` (slot 0 at page `base`; a consistent walk expects its
    /// shift to be `shift`) from page `start` on.
    fn node(&mut self, node: &Node, base: u64, start: u64, shift: u32) -> ControlFlow<()> {
        if node.shift() != shift {
            return ControlFlow::Continue(()); // reused at another level: a stale walk
        }
        self.visited += 1;
        let mut bits = marked_slots(node, base, start, self.end, self.mark, shift);
        while bits != 0 {
            let slot = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let lo = base + ((slot as u64) << shift);
            match node.get(slot) {
                Decoded::Node(child) if shift > 0 => {
                    self.node(child, lo, start.max(lo), shift - SLOT_SHIFT)?
                }
                Decoded::Folio(frame, order) => (self.f)(MarkedFolio {
                    head: PageIndex(lo),
                    frame,
                    order,
                })?,
                // The entry changed since the bit was loaded (lock-free only).
                _ => {}
            }
        }
        ControlFlow::Continue(())
    }
}

impl IndexWriteGuard<'_> {
    /// Marks the folio that covers page `index` with `mark` (on its head slot, and every
    /// ancestor's slot up to the first that had it). Returns false, changing nothing, if
    /// no folio covers the page.
    ///
    /// Context: the lock is held (this guard); does not sleep.
    pub(crate) fn set_mark(&mut self, index: PageIndex, mark: Mark) -> bool {
        let path = self.path_to(index.0);
        let Some(&(node, head)) = path.last() else {
            return false;
        };
        if !matches!(node.get(head), Decoded::Folio(..)) {
            return false;
        }
        for &(node, slot) in path.iter().rev() {
            if node.set_mark(slot, mark) {
                break; // it was set already: so are the ancestors' (module docs)
            }
        }
        true
    }

    /// Clears `mark` of the folio that covers page `index`, and the ancestors' bits that
    /// no longer cover a marked slot. Returns false, changing nothing, if no folio covers
    /// the page.
    ///
    /// Context: the lock is held (this guard); does not sleep.
    pub(crate) fn clear_mark(&mut self, index: PageIndex, mark: Mark) -> bool {
        let path = self.path_to(index.0);
        let Some(&(node, head)) = path.last() else {
            return false;
        };
        if !matches!(node.get(head), Decoded::Folio(..)) {
            return false;
        }
        Self::clear_mark_on_path(&path, mark);
        true
    }

    /// Clears `mark` on the last slot of `path` (a folio's head slot), then upwards while
    /// the node just cleared has no bit of it left.
    pub(super) fn clear_mark_on_path(path: &[(&Node, usize)], mark: Mark) {
        for &(node, slot) in path.iter().rev() {
            node.clear_mark(slot, mark);
            if node.is_marked(mark) {
                break;
            }
        }
    }

    /// Whether the folio that covers page `index` is marked `mark` (false if no folio
    /// covers it). Exact: the lock is held.
    ///
    /// Context: the lock is held (this guard); does not sleep.
    pub(crate) fn is_marked(&self, index: PageIndex, mark: Mark) -> bool {
        let path = self.path_to(index.0);
        let Some(&(node, head)) = path.last() else {
            return false;
        };
        matches!(node.get(head), Decoded::Folio(..)) && node.marks(mark) & (1 << head) != 0
    }

    /// Marks `to` every folio that meets `[start, end)` and is marked `from`, in one walk
    /// of the `from` bits (the kernel's `tag_pages_for_writeback`, with `Dirty` and
    /// `Towrite`). Returns the folios marked `from` it found.
    ///
    /// Context: the lock is held (this guard); does not sleep. The walk holds the lock
    /// for its whole length: callers bound the range, or tag in batches.
    pub(crate) fn tag_range(
        &mut self,
        start: PageIndex,
        end: PageIndex,
        from: Mark,
        to: Mark,
    ) -> u64 {
        let Some(root) = self.root() else {
            return 0;
        };
        let shift = root.shift();
        let span = root.span_pages();
        if start >= end || start.0 >= span {
            return 0;
        }
        let mut tag = TagRange {
            end: end.0.min(span),
            from,
            to,
            found: 0,
        };
        tag.node(root, 0, start.0, shift);
        tag.found
    }
}

/// One `tag_range`: what stays the same from node to node.
struct TagRange {
    end: u64,
    from: Mark,
    to: Mark,
    /// Folios marked `from` found in the range.
    found: u64,
}

impl TagRange {
    /// Tags within `node` (slot 0 at page `base`, shift `shift`) from page `start` on;
    /// afterwards the slots of `node` that lead to a folio it marked have the `to` bit, so
    /// the caller marks its own slot if `node.is_marked(to)`. Context: the lock is held.
    fn node(&mut self, node: &Node, base: u64, start: u64, shift: u32) {
        let mut bits = marked_slots(node, base, start, self.end, self.from, shift);
        while bits != 0 {
            let slot = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let lo = base + ((slot as u64) << shift);
            match node.get(slot) {
                Decoded::Node(child) => {
                    self.node(child, lo, start.max(lo), shift - SLOT_SHIFT);
                    if child.is_marked(self.to) {
                        node.set_mark(slot, self.to);
                    }
                }
                Decoded::Folio(..) => {
                    node.set_mark(slot, self.to);
                    self.found += 1;
                }
                _ => debug_assert!(false, "a mark on a slot without a folio or a node"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::folio;
    use super::super::{Leave, NewFolio};
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn p(page: u64) -> PageIndex {
        PageIndex(page)
    }

    /// The heads of the folios `marked_walk` reports, and the nodes it visited.
    fn walk(index: &Index, start: u64, end: u64, mark: Mark) -> (Vec<u64>, u32) {
        let mut heads = Vec::new();
        let mut visited = 0;
        let _ = index.marked_walk_counted(
            p(start),
            p(end),
            mark,
            &mut |found| {
                heads.push(found.head.0);
                ControlFlow::Continue(())
            },
            &mut visited,
        );
        (heads, visited)
    }

    fn insert(index: &Index, new: &[NewFolioArgs]) {
        for &(frame, order, head) in new {
            let f = folio(frame, order, head);
            let out = index
                .lock_for_insert(f.head, f.order.pages())
                .insert_run(&[f]);
            assert_eq!(out.inserted[..], [true], "{f:?}");
        }
    }

    type NewFolioArgs = (u32, u8, u64);

    #[test]
    fn marks_propagate_to_the_root_and_clear_back() {
        let index = Index::default();
        insert(&index, &[(1, 0, 3), (2, 0, 1 << 20)]);
        let mut w = index.lock();
        assert!(!w.set_mark(p(4), Mark::Dirty), "no folio at page 4");
        assert!(w.set_mark(p(1 << 20), Mark::Dirty));
        assert!(w.is_marked(p(1 << 20), Mark::Dirty));
        assert!(
            !w.is_marked(p(1 << 20), Mark::Towrite),
            "marks are independent"
        );
        assert!(!w.is_marked(p(3), Mark::Dirty));
        w.check_invariants();
        drop(w);
        assert_eq!(walk(&index, 0, u64::MAX, Mark::Dirty).0, vec![1 << 20]);
        assert!(index.lock().set_mark(p(3), Mark::Dirty));
        assert_eq!(walk(&index, 0, u64::MAX, Mark::Dirty).0, vec![3, 1 << 20]);
        assert_eq!(
            walk(&index, 4, 1 << 20, Mark::Dirty).0,
            vec![],
            "end is exclusive"
        );
        let mut w = index.lock();
        assert!(w.clear_mark(p(1 << 20), Mark::Dirty));
        assert!(w.clear_mark(p(3), Mark::Dirty));
        w.check_invariants();
        drop(w);
        assert_eq!(
            walk(&index, 0, u64::MAX, Mark::Dirty),
            (vec![], 1),
            "the root alone: no bit left anywhere"
        );
    }

    #[test]
    fn a_marked_walk_never_descends_into_clean_subtrees() {
        let index = Index::default();
        let run: Vec<NewFolio> = (0..4096).map(|i| folio(i as u32, 0, i)).collect();
        assert!(index
            .lock_for_insert(run[0].head, 4096)
            .insert_run(&run)
            .inserted
            .iter()
            .all(|&ok| ok));
        let mut w = index.lock();
        for page in [2000, 2001, 3000] {
            assert!(w.set_mark(p(page), Mark::Dirty));
        }
        drop(w);
        assert_eq!(
            walk(&index, 0, 4096, Mark::Dirty),
            (vec![2000, 2001, 3000], 3),
            "the root and the two leaves with marks, of 65 nodes"
        );
        assert_eq!(walk(&index, 0, 4096, Mark::Towrite), (vec![], 1));
        // A walk that breaks stops there.
        let mut seen = Vec::new();
        let flow = index.marked_walk(p(0), p(4096), Mark::Dirty, &mut |found| {
            seen.push(found.head.0);
            if seen.len() == 2 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        assert_eq!((flow, seen), (ControlFlow::Break(()), vec![2000, 2001]));
    }

    #[test]
    fn large_folios_carry_their_marks_on_the_head_slot() {
        let index = Index::default();
        insert(&index, &[(1, 9, 512), (2, 2, 4), (3, 6, 64)]);
        let mut w = index.lock();
        assert!(w.set_mark(p(700), Mark::Dirty), "a page in a sibling slot");
        assert!(w.set_mark(p(6), Mark::Dirty));
        assert!(w.is_marked(p(512), Mark::Dirty) && w.is_marked(p(1023), Mark::Dirty));
        w.check_invariants();
        drop(w);
        assert_eq!(walk(&index, 0, 2000, Mark::Dirty).0, vec![4, 512]);
        // A range that starts in a tail slot still finds the folio, by its head.
        assert_eq!(walk(&index, 600, 650, Mark::Dirty).0, vec![512]);
        assert_eq!(walk(&index, 5, 6, Mark::Dirty).0, vec![4]);
        assert_eq!(walk(&index, 8, 512, Mark::Dirty).0, vec![]);
        assert_eq!(walk(&index, 1024, 1 << 30, Mark::Dirty).0, vec![]);
        let found = {
            let mut found = None;
            let _ = index.marked_walk(p(1000), p(1001), Mark::Dirty, &mut |f| {
                found = Some(f);
                ControlFlow::Break(())
            });
            found
        };
        assert_eq!(
            found,
            Some(MarkedFolio {
                head: p(512),
                frame: FrameId(1),
                order: Order::new(9)
            })
        );
    }

    #[test]
    fn removal_clears_the_marks_and_growth_keeps_them() {
        let index = Index::default();
        insert(&index, &[(1, 0, 0), (2, 9, 512)]);
        let mut w = index.lock();
        assert!(w.set_mark(p(0), Mark::Dirty));
        assert!(w.set_mark(p(0), Mark::Towrite));
        assert!(w.set_mark(p(512), Mark::Dirty));
        drop(w);
        // The tree grows by levels above the marked root: the marks come along.
        insert(&index, &[(3, 0, 1 << 40)]);
        index.lock().check_invariants();
        assert_eq!(walk(&index, 0, u64::MAX, Mark::Dirty).0, vec![0, 512]);
        assert_eq!(walk(&index, 0, u64::MAX, Mark::Towrite).0, vec![0]);
        let mut w = index.lock();
        assert!(w.remove_folio(p(0), FrameId(1), Leave::Shadow(5)));
        assert!(w.remove_folio(p(600), FrameId(2), Leave::Empty));
        w.check_invariants();
        drop(w);
        assert_eq!(walk(&index, 0, u64::MAX, Mark::Dirty), (vec![], 1));
        assert_eq!(walk(&index, 0, u64::MAX, Mark::Towrite), (vec![], 1));
        // A folio placed where a marked one was starts clean.
        insert(&index, &[(4, 0, 0)]);
        assert!(!index.lock().is_marked(p(0), Mark::Dirty));
    }

    #[test]
    fn tag_range_marks_towrite_what_is_dirty_in_the_range() {
        let index = Index::default();
        let run: Vec<NewFolio> = (0..200).map(|i| folio(i as u32, 0, i)).collect();
        index.lock_for_insert(run[0].head, 200).insert_run(&run);
        insert(&index, &[(300, 9, 512)]);
        let mut w = index.lock();
        for page in [1, 3, 5, 70, 150, 600] {
            assert!(w.set_mark(p(page), Mark::Dirty));
        }
        assert_eq!(w.tag_range(p(2), p(151), Mark::Dirty, Mark::Towrite), 4);
        // Dirtied after the tagging: not for this sync.
        assert!(w.set_mark(p(2), Mark::Dirty));
        // The range starts in the large folio's tail.
        assert_eq!(w.tag_range(p(700), p(701), Mark::Dirty, Mark::Towrite), 1);
        w.check_invariants();
        drop(w);
        assert_eq!(
            walk(&index, 0, u64::MAX, Mark::Towrite).0,
            vec![3, 5, 70, 150, 512]
        );
        assert_eq!(
            walk(&index, 0, u64::MAX, Mark::Dirty).0,
            vec![1, 2, 3, 5, 70, 150, 512]
        );
        assert_eq!(
            index
                .lock()
                .tag_range(p(9), p(9), Mark::Dirty, Mark::Towrite),
            0
        );
        assert_eq!(
            Index::default()
                .lock()
                .tag_range(p(0), p(9), Mark::Dirty, Mark::Towrite),
            0
        );
    }

    #[test]
    fn random_operations_match_a_model_of_marks() {
        use proptest::prelude::*;
        let cases = if cfg!(miri) { 2 } else { 64 };
        proptest!(ProptestConfig::with_cases(cases), |(ops in proptest::collection::vec((0u8..6, 0u64..8192, 0u8..10, 0u64..3000), 1..120))| {
            let index = Index::default();
            // Folios by head: (frame, order, marks); and the head of every page covered.
            let mut folios: BTreeMap<u64, (u32, u8, BTreeSet<usize>)> = BTreeMap::new();
            let mut covered: BTreeMap<u64, u64> = BTreeMap::new();
            let mut next_frame = 0u32;
            for (op, page, order, len) in ops {
                let mark = Mark::ALL[(len % 2) as usize];
                match op {
                    0 => {
                        let order = Order::new(order);
                        let head = PageIndex(page).align_down(order).0;
                        next_frame += 1;
                        let free = (head..head + order.pages()).all(|q| !covered.contains_key(&q));
                        let out = index.lock_for_insert(PageIndex(head), order.pages()).insert_run(&[folio(next_frame, order.get(), head)]);
                        prop_assert_eq!(out.inserted[0], free);
                        if free {
                            folios.insert(head, (next_frame, order.get(), BTreeSet::new()));
                            covered.extend((head..head + order.pages()).map(|q| (q, head)));
                        }
                    }
                    1 => {
                        if let Some(&head) = covered.get(&page) {
                            let (frame, order, _) = folios.remove(&head).expect("a folio");
                            let leave = if len % 2 == 0 { Leave::Empty } else { Leave::Shadow(len) };
                            prop_assert!(index.lock().remove_folio(PageIndex(page), FrameId(frame), leave));
                            for q in head..head + (1u64 << order) {
                                covered.remove(&q);
                            }
                        }
                    }
                    2 => {
                        let set = index.lock().set_mark(PageIndex(page), mark);
                        prop_assert_eq!(set, covered.contains_key(&page));
                        if let Some(head) = covered.get(&page) {
                            folios.get_mut(head).expect("a folio").2.insert(mark as usize);
                        }
                    }
                    3 => {
                        let cleared = index.lock().clear_mark(PageIndex(page), mark);
                        prop_assert_eq!(cleared, covered.contains_key(&page));
                        if let Some(head) = covered.get(&page) {
                            folios.get_mut(head).expect("a folio").2.remove(&(mark as usize));
                        }
                    }
                    4 => {
                        let end = page + len;
                        let tagged = index.lock().tag_range(PageIndex(page), PageIndex(end), Mark::Dirty, Mark::Towrite);
                        let mut want = 0;
                        for (&head, (_, order, marks)) in folios.iter_mut() {
                            let meets = head < end && head + (1u64 << *order) > page;
                            if meets && marks.contains(&(Mark::Dirty as usize)) {
                                marks.insert(Mark::Towrite as usize);
                                want += 1;
                            }
                        }
                        prop_assert_eq!(tagged, want);
                    }
                    _ => {
                        let end = page + len;
                        let want: Vec<MarkedFolio> = folios
                            .iter()
                            .filter(|(&head, (_, order, marks))| {
                                head < end && head + (1u64 << *order) > page && marks.contains(&(mark as usize))
                            })
                            .map(|(&head, &(frame, order, _))| MarkedFolio { head: PageIndex(head), frame: FrameId(frame), order: Order::new(order) })
                            .collect();
                        let mut got = Vec::new();
                        let _ = index.marked_walk(PageIndex(page), PageIndex(end), mark, &mut |found| {
                            got.push(found);
                            ControlFlow::Continue(())
                        });
                        prop_assert_eq!(got, want);
                    }
                }
                index.lock().check_invariants();
            }
            for mark in Mark::ALL {
                let w = index.lock();
                for (&head, (_, _, marks)) in &folios {
                    prop_assert_eq!(w.is_marked(PageIndex(head), mark), marks.contains(&(mark as usize)));
                }
                drop(w);
                let want: Vec<u64> = folios.iter().filter(|(_, (_, _, m))| m.contains(&(mark as usize))).map(|(&h, _)| h).collect();
                prop_assert_eq!(walk(&index, 0, u64::MAX, mark).0, want);
            }
        });
    }
}
