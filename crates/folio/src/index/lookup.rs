//! The index's lock-free walks: `lookup` (one page) and `lookup_candidate` (one page, for
//! the hit path), `visit` (every entry
//! of a range), and the walks the miss path and the readahead policy ask: `next_present`,
//! `next_miss`, `prev_miss` and `gaps`.
//!
//! A page is present when a folio covers it (its head slot, or a sibling slot whose head
//! holds a folio); an empty slot, a shadow, a page beyond the root's span and an empty
//! tree are all misses. On a tree no writer changes, each walk answers exactly what a
//! page-by-page `lookup` would (the unit tests check them against a model).
//!
//! Validation (`index` module docs): a walk takes no lock and pins nothing; it loads each
//! slot once with Acquire, so it may come back with a stale answer if a writer raced with
//! it, never with freed memory (type-stable nodes). Callers treat the answer as a hint:
//! the hit path validates the folio's identity and version, `Mapping::find_get` re-checks
//! the slot under its reference, and the miss path's insertion re-checks every slot under
//! the lock (a page found missing that is present by then is reported as a conflict).
//! Every walk is bounded: a step down must reach a node whose shift is its parent's
//! minus 6 (`visit`: lower than its parent's; `lookup_candidate` counts the levels
//! instead), and a subtree reached through a node that fails the check reads as missing;
//! range walks move forward by at least one page per answer. `lookup` computes each
//! level's slot from the shift the level must have and checks the node's own shift after
//! loading the slot, so the two loads go out together.
//!
//! The hit path walks with `lookup_candidate`, from a root hint (`RootHint`, one per
//! `File`): the root node as the handle last saw it, with its shift, so that the walk's
//! first loads wait for nothing but the handle. It skips the shift checks above (its own
//! count of levels bounds it): each level touches one line, the slot's, and what it names
//! is only a candidate, which the hit path confirms by the folio's identity and version.
//! A hint goes stale when the tree grows (its node now a child: pages beyond it read as
//! missing) or empties (its node pooled, maybe reused: candidates whose identity the hit
//! path rejects); the hit path refreshes it whenever it gets no valid folio from it, with
//! a store only if the root moved.
//!
//! Protection: none taken; see above. Limits: page indexes below 2^60 (pages past the
//! root's span are missing).

use super::node::{Decoded, Node, SHIFT_MAX, SLOTS, SLOT_MASK, SLOT_SHIFT};
use super::{Entry, Index, RootHint};
use crate::types::PageIndex;

/// What a range walk looks for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Held {
    /// A page a folio covers.
    Present,
    /// A page no folio covers (empty, shadow, beyond the tree).
    Missing,
}

/// How a walk of one subtree ended.
enum Walk {
    Found(u64),
    NotFound,
    /// The node was reused at another level while the walk reached it: its range reads
    /// as missing.
    Stale,
}

impl Index {
    /// What the slot of page `index` holds. Lock-free; the answer may be stale if a
    /// writer raced with the walk (module docs): callers validate it.
    ///
    /// Context: any thread, no lock; does not sleep.
    #[inline]
    pub fn lookup(&self, index: PageIndex) -> Entry {
        match self.root.get() {
            Some(root) => Self::lookup_below(root, root.shift(), index),
            None => Entry::Empty,
        }
    }

    /// The folio that may hold page `index`, walked from the root `hint` remembers: the
    /// hit path's lookup, which starts without waiting for the mapping's line. A candidate,
    /// not an answer: the walk checks no node's shift (only its own count of levels bounds
    /// it), so a stale walk (a node reused while the walk reached it, a hint whose node and
    /// shift are of two refreshes, a hint of a tree that has since emptied) may name
    /// another page's folio. The caller confirms the folio's identity and version, as it
    /// must for any lock-free answer; each level then touches only the line of its slot.
    /// `Entry::Empty` for a page that is missing, a shadow, a page past the hint's span,
    /// and an empty hint or another index's (the caller refreshes it, and takes the slow
    /// path).
    ///
    /// Context: any thread, no lock; does not sleep.
    #[inline(always)]
    pub fn lookup_candidate(&self, hint: &RootHint, index: PageIndex) -> Entry {
        let Some((mut node, mut shift)) = hint.node(self) else {
            return Entry::Empty;
        };
        // A hint's shift is a root's (or 0, before its first refresh).
        debug_assert!(shift <= SHIFT_MAX);
        if (index.0 >> shift) >> SLOT_SHIFT != 0 {
            return Entry::Empty;
        }
        loop {
            match node.child(((index.0 >> shift) & SLOT_MASK) as usize) {
                Ok(child) if shift >= SLOT_SHIFT => {
                    node = child;
                    shift -= SLOT_SHIFT;
                }
                Err(Decoded::Folio(frame, order) | Decoded::Sibling { frame, order, .. }) => {
                    return Entry::Folio {
                        frame,
                        order,
                        head: index.align_down(order),
                    }
                }
                // A node below the leaves (a stale walk), an empty slot or a shadow.
                Ok(_) | Err(_) => return Entry::Empty,
            }
        }
    }

    /// Points `hint` at this index's root, if it moved (`RootHint::refresh`).
    pub fn refresh_hint(&self, hint: &RootHint) {
        hint.refresh(self);
    }

    /// The walk of `lookup`, from `root`, expected at `root_shift`, down. Each level's
    /// slot is computed from the shift the level must have (the root's, then its parent's
    /// minus 6) and the node's own shift is checked after the slot is loaded: the two
    /// loads go out together, one cache miss per level rather than two in a row. A node
    /// found at another shift was reused while the walk reached it: the page reads as
    /// missing (a stale walk; the tree's height bounds the loop).
    fn lookup_below(root: &Node, root_shift: u32, index: PageIndex) -> Entry {
        if root_shift > SHIFT_MAX || (index.0 >> root_shift) >> SLOT_SHIFT != 0 {
            return Entry::Empty;
        }
        let mut node = root;
        let mut shift = root_shift;
        loop {
            let slot = ((index.0 >> shift) & SLOT_MASK) as usize;
            let step = node.child(slot);
            if node.shift() != shift {
                return Entry::Empty;
            }
            let entry = match step {
                Ok(child) if shift >= SLOT_SHIFT => {
                    node = child;
                    shift -= SLOT_SHIFT;
                    continue;
                }
                Ok(_) => return Entry::Empty,
                Err(entry) => entry,
            };
            match entry {
                Decoded::Node(_) | Decoded::Empty => return Entry::Empty,
                Decoded::Shadow(v) => return Entry::Shadow(v),
                Decoded::Folio(frame, order) | Decoded::Sibling { frame, order, .. } => {
                    return Entry::Folio {
                        frame,
                        order,
                        head: index.align_down(order),
                    }
                }
            }
        }
    }

    /// Calls `f` for every folio and shadow whose head lies in `[start, end)`, in index
    /// order. Lock-free: entries may change during the walk (each is read once, and may be
    /// stale: a hint that callers re-check under the lock).
    ///
    /// Context: any thread, no lock; does not sleep.
    pub fn visit(&self, start: PageIndex, end: PageIndex, f: &mut dyn FnMut(PageIndex, Entry)) {
        if let Some(root) = self.root.get() {
            Self::visit_node(root, 0, start.0, end.0, u32::MAX, f);
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
            match node.get(slot) {
                Decoded::Node(child) => Self::visit_node(child, lo, start, end, shift, f),
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

    /// The first page in `[start, end)` that a folio covers (a hint: module docs).
    ///
    /// Context: any thread, no lock; does not sleep.
    pub fn next_present(&self, start: PageIndex, end: PageIndex) -> Option<PageIndex> {
        self.first(start.0, end.0, Held::Present).map(PageIndex)
    }

    /// The first page in `[start, end)` that no folio covers: an empty slot, a shadow,
    /// or a page beyond the tree (a hint: module docs).
    ///
    /// Context: any thread, no lock; does not sleep.
    pub fn next_miss(&self, start: PageIndex, end: PageIndex) -> Option<PageIndex> {
        self.first(start.0, end.0, Held::Missing).map(PageIndex)
    }

    /// The last page in `[floor, page)` that no folio covers, found by walking back from
    /// `page` over whole folios, one `lookup` each (a hint: module docs). `None` if folios
    /// cover every page of the range.
    ///
    /// Context: any thread, no lock; does not sleep.
    pub fn prev_miss(&self, page: PageIndex, floor: PageIndex) -> Option<PageIndex> {
        let mut at = page.0;
        // Each turn moves back by at least one page: a folio covering `at - 1` has its
        // head at or below it.
        while at > floor.0 {
            match self.lookup(PageIndex(at - 1)) {
                Entry::Folio { head, .. } => at = head.0,
                _ => return Some(PageIndex(at - 1)),
            }
        }
        None
    }

    /// Nodes that inserting `pages` pages from `first` would link, as the tree stands: the
    /// levels missing on the path down to the leaf of `first` when the run lies within one
    /// leaf's span under the root (the common miss: a block or a readahead window), else
    /// the bound `Index::lock_for_insert` used to allocate every time (a path from the
    /// root, a leaf per 64 pages and one more). A hint (module docs): a writer may change
    /// the path meanwhile, and an insertion that needs more nodes allocates them under the
    /// lock (`IndexWriteGuard::new_node`).
    ///
    /// Context: any thread, no lock; does not sleep.
    pub(super) fn nodes_needed(&self, first: PageIndex, pages: u64) -> usize {
        let last = first.0 + pages.max(1) - 1;
        let root = self.root.get();
        let levels = root.map_or(1, |root| (root.shift() / SLOT_SHIFT + 1) as usize);
        let bound = pages as usize / SLOTS + 1 + levels;
        let Some(root) = root else {
            return bound;
        };
        let mut shift = root.shift();
        if shift > SHIFT_MAX
            || (last >> shift) >> SLOT_SHIFT != 0
            || first.0 >> SLOT_SHIFT != last >> SLOT_SHIFT
        {
            return bound; // the tree grows, or the run spans leaves
        }
        let mut node = root;
        loop {
            let entry = node.get(((first.0 >> shift) & SLOT_MASK) as usize);
            if node.shift() != shift {
                return bound; // a stale walk
            }
            match entry {
                Decoded::Node(child) if shift >= SLOT_SHIFT => {
                    node = child;
                    shift -= SLOT_SHIFT;
                }
                // A large folio holds the slot: the insertion meets a conflict.
                Decoded::Folio(..) | Decoded::Sibling { .. } => return 0,
                // One node per level below this one (a shadow is split as the kernel's
                // `xas_split` does, `index` module docs).
                _ => return (shift / SLOT_SHIFT) as usize,
            }
        }
    }

    /// The runs `[gap_start, gap_end)` of pages in `[start, end)` that no folio covers, in
    /// order (a hint: module docs). Two walks from the root per run.
    ///
    /// Context: any thread, no lock; does not sleep.
    pub fn gaps(&self, start: PageIndex, end: PageIndex) -> Vec<(PageIndex, PageIndex)> {
        let mut gaps = Vec::new();
        let mut at = start;
        while let Some(miss) = self.next_miss(at, end) {
            // From the page after the miss: the walk moves on even if a writer filled
            // the miss meanwhile.
            let present = self.next_present(miss.add(1), end).unwrap_or(end);
            gaps.push((miss, present));
            at = present;
        }
        gaps
    }

    /// The first page in `[start, end)` that is `want`.
    fn first(&self, start: u64, end: u64, want: Held) -> Option<u64> {
        if start >= end {
            return None;
        }
        let missing = (want == Held::Missing).then_some(start);
        let Some(root) = self.root.get() else {
            return missing;
        };
        let shift = root.shift();
        if shift > SHIFT_MAX {
            return missing; // a stale root (reused while loaded)
        }
        let span = 1u64 << (shift + SLOT_SHIFT);
        if start < span {
            match Self::first_in(root, 0, start, end.min(span), want, shift) {
                Walk::Found(page) => return Some(page),
                Walk::NotFound => {}
                Walk::Stale => return missing,
            }
        }
        // Pages beyond the root's span are missing.
        (want == Held::Missing && end > span).then_some(start.max(span))
    }

    /// The first page in `[start, end)` that is `want`, within `node` (whose slot 0 is at
    /// page `base`, and whose shift a consistent walk expects to be `shift`).
    fn first_in(node: &Node, base: u64, start: u64, end: u64, want: Held, shift: u32) -> Walk {
        if node.shift() != shift {
            return Walk::Stale;
        }
        let slot_pages = 1u64 << shift;
        let first = ((start.max(base) - base) >> shift) as usize;
        for slot in first..SLOTS {
            let lo = base + slot as u64 * slot_pages;
            if lo >= end {
                break;
            }
            let from = lo.max(start);
            let held = match node.get(slot) {
                Decoded::Node(child) if shift > 0 => {
                    match Self::first_in(child, lo, from, end, want, shift - SLOT_SHIFT) {
                        Walk::Found(page) => return Walk::Found(page),
                        Walk::NotFound => continue,
                        Walk::Stale => Held::Missing,
                    }
                }
                Decoded::Folio(..) => Held::Present,
                Decoded::Sibling { head, .. } if matches!(node.get(head), Decoded::Folio(..)) => {
                    Held::Present
                }
                // A node in a leaf's slot can only be a stale read.
                Decoded::Node(_)
                | Decoded::Sibling { .. }
                | Decoded::Empty
                | Decoded::Shadow(_) => Held::Missing,
            };
            if held == want {
                return Walk::Found(from);
            }
        }
        Walk::NotFound
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::folio;
    use super::super::Leave;
    use super::*;
    use crate::types::FrameId;
    use std::collections::BTreeSet;

    fn p(page: u64) -> PageIndex {
        PageIndex(page)
    }

    /// Pages 0..4 (order 2), 8 (order 0), 512..1024 (order 9), a shadow at 9, and page
    /// 1 << 20 (order 0), far away in another subtree.
    fn sample() -> Index {
        let index = Index::default();
        for new in [
            folio(1, 2, 0),
            folio(2, 0, 8),
            folio(3, 0, 9),
            folio(4, 9, 512),
            folio(5, 0, 1 << 20),
        ] {
            let out = index
                .lock_for_insert(new.head, new.order.pages())
                .insert_run(&[new]);
            assert_eq!(out.inserted[..], [true]);
        }
        assert!(index
            .lock()
            .remove_folio(p(9), FrameId(3), Leave::Shadow(1)));
        index
    }

    /// The miss path's allocation before the lock: only the nodes missing on the run's
    /// path, so an insertion into a leaf that is there allocates nothing.
    #[test]
    fn nodes_needed_counts_the_missing_path() {
        let index = sample(); // height 4: pages up to 1 << 20
        assert_eq!(index.nodes_needed(p(5), 1), 0, "leaf 0..64 is there");
        assert_eq!(index.nodes_needed(p(10), 3), 0, "a block within the leaf");
        assert_eq!(
            index.nodes_needed(p(600), 2),
            0,
            "inside the order-9 folio: a conflict"
        );
        assert_eq!(
            index.nodes_needed(p(70), 1),
            1,
            "a new leaf under node 0..4096"
        );
        assert_eq!(
            index.nodes_needed(p(5000), 1),
            2,
            "a new level-1 node and leaf"
        );
        // Runs over two leaves, or past the root's span: the old bound.
        assert_eq!(index.nodes_needed(p(60), 8), 8 / SLOTS + 1 + 4);
        assert_eq!(index.nodes_needed(p(1 << 24), 1), 1 + 4);
        assert_eq!(Index::default().nodes_needed(p(0), 1), 2);

        let allocated = index.nodes_allocated();
        let out = index
            .lock_for_insert(p(20), 2)
            .insert_run(&[folio(9, 1, 20)]);
        assert_eq!(out.inserted[..], [true]);
        assert_eq!(
            index.nodes_allocated(),
            allocated,
            "nothing allocated, nothing freed"
        );
        let out = index
            .lock_for_insert(p(70), 1)
            .insert_run(&[folio(10, 0, 70)]);
        assert_eq!(out.inserted[..], [true]);
        assert_eq!(index.nodes_allocated(), allocated + 1, "the one new leaf");
        index.lock().check_invariants();
    }

    #[test]
    fn a_root_hint_fills_goes_stale_as_the_tree_grows_and_is_refreshed() {
        let index = Index::default();
        let hint = RootHint::new(&index);
        assert_eq!(
            index.lookup_candidate(&hint, p(0)),
            Entry::Empty,
            "an empty tree"
        );
        index
            .lock_for_insert(PageIndex(3), 1)
            .insert_run(&[folio(1, 0, 3)]);
        assert_eq!(
            index.lookup_candidate(&hint, p(3)),
            Entry::Empty,
            "an empty hint names nothing until it is refreshed"
        );
        index.refresh_hint(&hint);
        assert!(hint.node(&index).is_some(), "filled");
        assert_eq!(index.lookup_candidate(&hint, p(3)), index.lookup(p(3)));
        // The tree grows twice: the old root (pages 0..64) goes under the new one.
        index
            .lock_for_insert(PageIndex(5000), 1)
            .insert_run(&[folio(2, 0, 5000)]);
        assert!(matches!(
            index.lookup_candidate(&hint, p(3)),
            Entry::Folio {
                frame: FrameId(1),
                ..
            }
        ));
        assert_eq!(
            index.lookup_candidate(&hint, p(5000)),
            Entry::Empty,
            "past the stale root's span: a miss, for the slow path"
        );
        index.refresh_hint(&hint);
        for page in [3, 5000, 64, 0] {
            assert_eq!(
                index.lookup_candidate(&hint, p(page)),
                index.lookup(p(page)),
                "{page}"
            );
        }
        // A hint of another index is never walked, whatever it holds.
        let other = sample();
        let foreign = RootHint::new(&other);
        other.refresh_hint(&foreign);
        for page in [3, 5000, 0, 512] {
            assert_eq!(index.lookup_candidate(&foreign, p(page)), Entry::Empty);
        }
        index.refresh_hint(&foreign);
        assert!(
            foreign.node(&index).is_none(),
            "not filled from another index"
        );
    }

    #[test]
    fn a_candidate_is_the_folio_of_its_page_and_never_a_shadow() {
        let index = sample();
        let hint = RootHint::new(&index);
        index.refresh_hint(&hint);
        for page in (0..1100).chain([1 << 20, (1 << 20) + 1]) {
            let want = match index.lookup(p(page)) {
                Entry::Shadow(_) => Entry::Empty,
                other => other,
            };
            assert_eq!(index.lookup_candidate(&hint, p(page)), want, "{page}");
        }
    }

    #[test]
    fn next_present_and_next_miss_skip_over_whole_entries() {
        let index = sample();
        assert_eq!(index.next_present(p(0), p(100)), Some(p(0)));
        assert_eq!(
            index.next_present(p(1), p(100)),
            Some(p(1)),
            "inside a folio"
        );
        assert_eq!(index.next_present(p(4), p(100)), Some(p(8)));
        assert_eq!(index.next_present(p(9), p(100)), None, "a shadow is a miss");
        assert_eq!(index.next_present(p(9), p(513)), Some(p(512)));
        assert_eq!(
            index.next_present(p(700), p(2000)),
            Some(p(700)),
            "a sibling slot"
        );
        assert_eq!(index.next_present(p(1024), p(1 << 21)), Some(p(1 << 20)));
        assert_eq!(
            index.next_present(p(1024), p(1 << 20)),
            None,
            "end is exclusive"
        );
        assert_eq!(index.next_present(p(5), p(5)), None, "an empty range");

        assert_eq!(index.next_miss(p(0), p(100)), Some(p(4)));
        assert_eq!(
            index.next_miss(p(8), p(100)),
            Some(p(9)),
            "a shadow is a miss"
        );
        assert_eq!(index.next_miss(p(512), p(1024)), None);
        assert_eq!(index.next_miss(p(600), p(1025)), Some(p(1024)));
        assert_eq!(
            index.next_miss(p(1 << 20), p(1 << 21)),
            Some(p((1 << 20) + 1))
        );
        // Beyond the root's span (1 << 24 pages for this tree): missing.
        assert_eq!(index.next_miss(p(1 << 30), p(1 << 31)), Some(p(1 << 30)));
        assert_eq!(index.next_present(p(1 << 30), p(1 << 31)), None);
        assert_eq!(
            Index::default().next_miss(p(7), p(8)),
            Some(p(7)),
            "an empty tree"
        );
        assert_eq!(Index::default().next_present(p(0), p(1 << 40)), None);
    }

    #[test]
    fn prev_miss_walks_back_over_whole_folios() {
        let index = sample();
        assert_eq!(
            index.prev_miss(p(4), p(0)),
            None,
            "pages 0..4 are one folio"
        );
        assert_eq!(index.prev_miss(p(9), p(0)), Some(p(7)));
        assert_eq!(index.prev_miss(p(9), p(8)), None);
        assert_eq!(index.prev_miss(p(1024), p(100)), Some(p(511)));
        assert_eq!(
            index.prev_miss(p(1024), p(600)),
            None,
            "the floor is inside a folio"
        );
        assert_eq!(index.prev_miss(p(3), p(3)), None, "an empty range");
        assert_eq!(index.prev_miss(p(11), p(0)), Some(p(10)));
    }

    #[test]
    fn gaps_are_the_missing_runs_in_order() {
        let index = sample();
        assert_eq!(
            index.gaps(p(0), p(2048)),
            vec![(p(4), p(8)), (p(9), p(512)), (p(1024), p(2048))]
        );
        assert_eq!(index.gaps(p(512), p(1024)), vec![], "all present");
        assert_eq!(index.gaps(p(2), p(3)), vec![]);
        assert_eq!(index.gaps(p(700), p(1030)), vec![(p(1024), p(1030))]);
        assert_eq!(
            index.gaps(p((1 << 20) - 1), p((1 << 20) + 2)),
            vec![
                (p((1 << 20) - 1), p(1 << 20)),
                (p((1 << 20) + 1), p((1 << 20) + 2))
            ]
        );
        assert_eq!(
            Index::default().gaps(p(3), p(10)),
            vec![(p(3), p(10))],
            "an empty tree"
        );
    }

    #[test]
    fn walks_match_a_page_by_page_model() {
        use proptest::prelude::*;
        let cases = if cfg!(miri) { 2 } else { 64 };
        proptest!(ProptestConfig::with_cases(cases), |(
            folios in proptest::collection::vec((0u64..2048, 0u8..10), 0..40),
            shadows in proptest::collection::vec(0u64..2048, 0..10),
            queries in proptest::collection::vec((0u64..2200, 0u64..600), 1..20),
        )| {
            let index = Index::default();
            let mut present = BTreeSet::new();
            for (i, &(page, order)) in folios.iter().enumerate() {
                let order = crate::types::Order::new(order);
                let head = PageIndex(page).align_down(order).0;
                let out = index
                    .lock_for_insert(PageIndex(head), order.pages())
                    .insert_run(&[folio(i as u32 + 1, order.get(), head)]);
                if out.inserted[0] {
                    present.extend(head..head + order.pages());
                }
            }
            // Shadows: a folio of order 0 inserted then evicted, where the page is free.
            for (i, &page) in shadows.iter().enumerate() {
                let frame = FrameId(1000 + i as u32);
                let out = index.lock_for_insert(PageIndex(page), 1).insert_run(&[folio(frame.0, 0, page)]);
                if out.inserted[0] {
                    prop_assert!(index.lock().remove_folio(p(page), frame, Leave::Shadow(i as u64)));
                }
            }
            for (start, len) in queries {
                let end = start + len;
                let range = start..end;
                let want_present = range.clone().find(|q| present.contains(q)).map(p);
                let want_miss = range.clone().find(|q| !present.contains(q)).map(p);
                let want_prev = range.clone().rev().find(|q| !present.contains(q)).map(p);
                prop_assert_eq!(index.next_present(p(start), p(end)), want_present);
                prop_assert_eq!(index.next_miss(p(start), p(end)), want_miss);
                prop_assert_eq!(index.prev_miss(p(end), p(start)), want_prev);
                let mut want_gaps: Vec<(PageIndex, PageIndex)> = Vec::new();
                for q in range.filter(|q| !present.contains(q)) {
                    match want_gaps.last_mut() {
                        Some(gap) if gap.1 == p(q) => gap.1 = p(q + 1),
                        _ => want_gaps.push((p(q), p(q + 1))),
                    }
                }
                prop_assert_eq!(index.gaps(p(start), p(end)), want_gaps);
            }
        });
    }
}
