//! One file's index in the shared region (issue 45, step 5; docs/sharing.md): the 64-way
//! radix tree of `index/` rebuilt over region words, its nodes in frames of the domain's
//! buddy allocator (`buddy.rs`), named by a number (never by pointer: each process maps
//! the region at its own address), read lock-free by any process, changed under a holder
//! lock (`lock.rs`) by a writer that may die at any store.
//!
//! # Layout
//!
//! ```text
//!   base + 0..8      the lock line: lock, intent, 4 args, ROOT (word 6: a link, as a slot
//!                    holds one, or 0 for an empty tree), WORKING (word 7: the page whose
//!                    change is under way, + 1, or 0)
//!   base + 8         POOL: the pool's head (a node, or 0)
//!   base + 9         FRAMES: the first of the tree's node frames (frame + 1, or 0)
//!   base + 10        RELEASING: 0, or RELEASE_ALL (bit 63) | the frame being freed + 1
//!   base + 11..16    unused
//!   data + 512 f     frame f of the buddy, when it is one of this tree's node frames:
//!                    7 nodes of 72 words, then CHAIN (word 504: the tree's next node
//!                    frame + 1, or 0), 7 unused
//!   a node           INFO (count | offset in parent << 8 | shift << 16, or POOLED),
//!                    PARENT (a node, or 0 for the root), NEXT (the pool's next node, or
//!                    0), 5 unused, then its 64 slots
//! ```
//!
//! # Nodes in frames
//!
//! A node is named by `Node`: `f * 512 + (k + 1) * 72` for node k (0..7) of frame f, the
//! word just past it in the data area, never 0 (0 is "none" in every linking word). A
//! tree's frames are the buddy's NODES(tree) frames (`SharedBuddy::nodes_store`): adopted
//! one at a time when its pool runs dry (R1-R3), given back only when the whole tree is
//! released (D1-D4). While the tree lives, a node leaves the tree only to its pool and the
//! pool gives only its nodes: type-stable, as a fixed pool was. A tree whose pages were
//! all reclaimed keeps its frames (its peak, about one frame per 448 cached pages) until
//! its file record drops it.
//!
//!   R1. Lease an order-0 frame from the buddy (`alloc`, under this tree's lock: the lock
//!       order is the eviction queue's, a tree's, then the buddy's; nobody takes a tree's
//!       lock holding the buddy's, nor the queue's holding a tree's). It is LEASED to
//!       us: a death leaves it to the steward's sweep.
//!   R2. Clear its nodes' slots (our frame: no other writer; no reader reaches it before a
//!       primitive links one of its nodes, with a release store).
//!   R3. ADOPT (below): the nodes pooled, the frame chained and made the tree's by one
//!       store inside the intent, so that a death leaves it its lessee's or the tree's.
//!       The steward recovers (takes the lock of) each tree a dead process held before
//!       the buddy's sweep, which would otherwise free a frame a redone ADOPT adopts.
//!
//!   D1. `release`: take the lock (finishing any release a death cut short), RESET.
//!   D2. While FRAMES names a frame f: UNCHAIN (RELEASING names f, FRAMES = f's CHAIN).
//!   D3. `SharedBuddy::free_nodes(f)` (under the buddy's lock, its own intents: freed only
//!       if still the tree's, so a repeat is harmless), then RELEASING = RELEASE_ALL.
//!   D4. RELEASING = 0: an empty tree with no frame, usable again.
//!   A taker that finds RELEASING set finishes D2-D4 (a death anywhere leaks no frame).
//!   The caller's contract: the tree's file record is dropped, so no process opens it and
//!   no reader walks it, and no folio left in it is still named by the eviction queue.
//!
//! A slot holds (as `index/mod.rs`'s, with node *numbers* for pointers):
//!
//! ```text
//!   0                        empty
//!   node << 8 | shift << 2 | 0   the next level down, with its shift (ROOT holds
//!                            the root's link the same way)
//!   frame << 6 | order << 2 | 1     the head slot of a folio
//!   value << 2 | 2           a shadow (what eviction left in the head slot of an order < 6
//!                            folio; a removed folio of order >= 6 leaves its slots empty)
//!   frame << 12 | order << 8 | head slot << 2 | 3   a tail slot of a large folio
//! ```
//!
//! A folio of order k (0..=9) lives in the node of shift `6 * (k / 6)`, in `2^(k % 6)`
//! slots aligned to their count: its head slot then siblings, as today.
//!
//! # Readers (`lookup`, `gaps`)
//!
//! Lock-free, any process: ROOT and one slot per level loaded with Acquire (a link carries
//! the child's shift: no node header is loaded); at most `MAX_LEVELS` levels; every word
//! read is untrusted input (another process wrote it): a link naming a word past the data
//! area, a child whose shift is not its parent's minus 6, or a folio whose order does not
//! fit its node ends the walk with `Entry::Absent`, never an out-of-bounds access or a
//! panic. The walk indexes one slice, the data area, with one bounds check per level, no
//! multiplication and no division (docs/sharing.md measures it against today's walk). It
//! does not test that a link names a node's start, nor a frame of this tree: a scribbled
//! link sends it to some word of the data area (another tree's node, a data page), whose
//! value the next test judges, and what it finds is a hint its caller validates, as for a
//! stale node. Nodes are type-stable while the tree lives (above), so a reader racing a
//! writer reads a stale node of this tree, never another's: as today, what it finds is a
//! hint its caller validates (the frame's identity and version). While the tree only
//! grows, a page that is present stays found: every node is filled before the slot or
//! root that links it is stored (release), and growth puts the old root under the new one before the root word
//! names the new one (the loom model `index_insert_races_a_lookup` checks this).
//!
//! # Writers: the primitives, each one intent
//!
//! Under the tree's holder lock, a change is a sequence of primitives; each publishes its
//! intent (M1: op and 4 args), makes its stores (M2: each the absolute value the intent
//! names, so a redo repeats them harmlessly), and clears it (M3):
//! - GROW [n, old root + 1, shift, pool's next]: node n off the pool becomes the root of
//!   `shift`, the old root (if any) in its slot 0. Stores: n's INFO, PARENT, slot 0; the
//!   old root's PARENT; the pool's head; ROOT.
//! - EXTEND [m, parent, offset | m's shift << 8 | parent's new INFO << 16, pool's next]:
//!   node m off the pool linked at `parent`'s slot `offset` (empty before). Stores: m's
//!   INFO and PARENT, the parent's slot and INFO, the pool's head.
//! - STORE [n, offset | order << 8 | n's new INFO << 16, frame, 0]: a folio into n's slots
//!   (empty or shadows before; or, a writer's `put`, an order-0 folio in place of another,
//!   INFO unchanged). Stores: the head slot, the siblings, n's INFO.
//! - REMOVE [n, offset | order << 8 | n's new INFO << 16, head slot's new word, 0]: a
//!   folio out. Stores: the siblings (0), the head slot (a shadow or 0), n's INFO.
//! - PRUNE [n, parent or 0, offset | parent's new INFO << 16, pool's head]: the
//!   empty node n unlinked (from its parent's slot, or from ROOT) and pooled. Stores: the
//!   parent's slot and INFO (or ROOT), n's INFO (POOLED), PARENT, NEXT, the pool's head.
//! - ADOPT [f, pool's head, FRAMES, 0]: frame f's 7 nodes pooled ahead of the pool. Stores:
//!   each node's INFO (POOLED), PARENT, NEXT; f's CHAIN; f's buddy state NODES(tree) (the
//!   adoption); FRAMES; the pool's head.
//! - RESET [0, 0, 0, 0]: the tree emptied for its release. Stores: ROOT, the pool's head,
//!   RELEASING (RELEASE_ALL).
//! - UNCHAIN [f, f's CHAIN, 0, 0]: f off the chain, named in RELEASING. Stores:
//!   RELEASING, FRAMES.
//!
//! A node taken off the pool is linked by the same primitive that takes it: its intent
//! names it, so a death cannot leak it (a redo links it). A node frame is pooled and made
//! the tree's by one primitive (ADOPT), and leaves the chain only named in RELEASING.
//!
//! # A folio's change, and the invariant between primitives
//!
//!   W1. Store WORKING = page + 1 (the page this change is about).
//!   W2. GROW while the root does not cover the page; EXTEND down to the folio's level.
//!   W3. STORE (insert) or REMOVE (remove).
//!   W4. Tidy: PRUNE the empty nodes on the page's path, bottom up (an empty root too).
//!   W5. Store WORKING = 0.
//!
//! Between two primitives the tree is a valid tree (every count right, every parent link
//! right, every node in the tree or the pool), except that nodes on WORKING's path may be
//! empty (extended but not filled yet, or emptied and not pruned yet). A taker (lock.rs
//! T1-T3) redoes the dead holder's last primitive, then, WORKING being set, tidies its path
//! (W4, W5): the folio's change is then done (W3 was) or not done (it was not), and the
//! tree holds no empty node. A run (`insert_run`) is a sequence of such changes: a death
//! leaves a prefix of it inserted.
//!
//! Protection: every word by the tree's lock (writers), a node frame's buddy state too
//! while it is the tree's; readers load with Acquire and validate. Limits: pages below
//! 2^60; up to 2^32 - 1 frames; an insertion that finds the pool empty and the buddy
//! without a free frame stops (`Full`); a tree keeps its peak frames until released;
//! shadows only of order < 6 folios, in their head slot; a larger folio in the way of a
//! node of smaller ones is a conflict (no collapse of shadow-only subtrees, unlike today's).

use super::buddy::{Order, SharedBuddy};
use super::lock::{Held, HolderLock, Intent};
use super::slot::SlotTable;
use super::stack::Frame;
use super::{Died, Flaw, Holder, Run, Word};
use crate::primitive::{AtomicU64, Ordering};

const ROOT: u32 = 6;
const WORKING: u32 = 7;
const POOL: u32 = 8;
/// The tree's node frames, chained through their `CHAIN` words (frame + 1, or 0).
const FRAMES: u32 = 9;
/// A release under way (`RELEASE_ALL`), with the frame being freed (+ 1, or 0).
const RELEASING: u32 = 10;
/// A tree's words: the lock line and the line of POOL, FRAMES and RELEASING.
const TREE_WORDS: u32 = 16;
const RELEASE_ALL: u64 = 1 << 63;
/// Words per node: 8 header words, 64 slots.
const NODE_WORDS: u32 = 72;
/// Words per frame of the data area (4 KiB).
const FRAME_WORDS: u64 = 512;
/// Nodes per frame: 7 of 72 words, then 8 words of which the first is `CHAIN`.
const NODES_PER_FRAME: u32 = 7;
/// A node frame's word naming the tree's next node frame (+ 1, or 0).
const CHAIN: u64 = (NODES_PER_FRAME * NODE_WORDS) as u64;
const INFO: u32 = 0;
const PARENT: u32 = 1;
const NEXT: u32 = 2;
const SLOTS_AT: u32 = 8;
const FANOUT: u32 = 64;
/// `walk`'s word index of slot `s` of the node a link names: `node - LINK_BIAS + s`
/// (`Node`: the word just past the node, minus its 64 slots).
const LINK_BIAS: u64 = (NODE_WORDS - SLOTS_AT) as u64;
/// Bit `s` set for each shift `s` a level has (0, 6, .., 54).
const LEVEL_SHIFTS: u64 = {
    let mut bits = 0;
    let mut shift = 0;
    while shift < 6 * MAX_LEVELS {
        bits |= 1 << shift;
        shift += 6;
    }
    bits
};
/// A pooled node's INFO.
const POOLED: u64 = 1 << 40;
/// The deepest tree: shifts 0..=54 cover pages below 2^60.
pub(crate) const MAX_LEVELS: u32 = 10;
/// The largest order.
pub(crate) const ORDER_MAX: u8 = 9;

const GROW: u64 = 1;
const EXTEND: u64 = 2;
const STORE: u64 = 3;
const REMOVE: u64 = 4;
const PRUNE: u64 = 5;
const ADOPT: u64 = 6;
const RESET: u64 = 7;
const UNCHAIN: u64 = 8;

const TAG_NODE: u64 = 0;
const TAG_FOLIO: u64 = 1;
const TAG_SHADOW: u64 = 2;
const TAG_SIBLING: u64 = 3;

/// A page's index in its file.
pub(crate) type Page = u64;

/// What a look-up finds at a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    Absent,
    /// The folio covering the page: its first frame and its order.
    Folio {
        frame: u64,
        order: u8,
    },
    /// What eviction left at the page (the head page of an evicted folio of order < 6).
    Shadow(u64),
}

/// What `lookup_named` found: an order-0 folio's frame, the slot word that named it, and
/// that slot (in the tree's node: loaded again by the optimistic hit).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Named<'r> {
    pub(crate) frame: u64,
    pub(crate) word: u64,
    pub(crate) slot: &'r AtomicU64,
}

/// A folio to insert: its first frame and its order (0..=9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Folio {
    pub(crate) frame: u64,
    pub(crate) order: u8,
}

/// What a writer's `put` found at its page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Put {
    /// No folio: inserted.
    Inserted,
    /// This folio was there: replaced.
    Replaced(Folio),
    /// No node frame to be had: nothing changed.
    Full,
}

/// What `insert_run` did with one folio.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Placed {
    /// Inserted; the shadows it replaced, with their pages.
    Inserted(Vec<(Page, u64)>),
    /// Another folio (or, for order >= 6, a node of smaller entries) is in the way.
    Conflict,
    /// The node pool is empty.
    Full,
}

/// Whether a removal leaves a shadow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Leave {
    Empty,
    Shadow(u64),
}

/// A node: its frame f and its place k (0..7) in it, as the one number that links, PARENT,
/// NEXT, the pool's head and intents hold: `f * 512 + (k + 1) * 72`, the word just past
/// the node in the data area. Never 0 (0 means none); a reader finds slot `s` at word
/// `node - 64 + s` with no multiplication (`walk`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Node(u64);

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = (self.0 % FRAME_WORDS) / u64::from(NODE_WORDS);
        write!(f, "{}.{}", self.frame(), k.wrapping_sub(1))
    }
}

impl Node {
    fn new(frame: u32, k: u32) -> Node {
        assert!(k < NODES_PER_FRAME, "no node {k} in a frame");
        Node(u64::from(frame) * FRAME_WORDS + u64::from(k + 1) * u64::from(NODE_WORDS))
    }

    /// The node `word` names, if it names one of a frame below `frames` (a writer's and
    /// `check`'s test; a reader's walk only bounds the word it loads).
    fn of(word: u64, frames: u32) -> Option<Node> {
        let within = word % FRAME_WORDS;
        let sane = word / FRAME_WORDS < u64::from(frames)
            && within != 0
            && within % u64::from(NODE_WORDS) == 0;
        sane.then_some(Node(word))
    }

    fn frame(self) -> u32 {
        (self.0 / FRAME_WORDS) as u32
    }

    /// Its first word in the data area.
    fn first(self) -> usize {
        (self.0 - u64::from(NODE_WORDS)) as usize
    }
}

/// A node's header, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Info {
    count: u32,
    offset: u32,
    shift: u32,
}

impl Info {
    fn word(self) -> u64 {
        u64::from(self.count) | u64::from(self.offset) << 8 | u64::from(self.shift) << 16
    }

    fn of(word: u64) -> Option<Info> {
        if word >> 24 != 0 {
            return None;
        }
        let info = Info {
            count: (word & 0xff) as u32,
            offset: ((word >> 8) & 0xff) as u32,
            shift: ((word >> 16) & 0xff) as u32,
        };
        let sane = info.count <= FANOUT
            && info.offset < FANOUT
            && info.shift % 6 == 0
            && info.shift < 6 * MAX_LEVELS;
        sane.then_some(info)
    }
}

fn folio_word(frame: u64, order: u8) -> u64 {
    frame << 6 | u64::from(order) << 2 | TAG_FOLIO
}

fn sibling_word(frame: u64, order: u8, head: u32) -> u64 {
    frame << 12 | u64::from(order) << 8 | u64::from(head) << 2 | TAG_SIBLING
}

/// A link to a node (a slot, or ROOT): the node and its shift, so that a reader needs no
/// load of the node's INFO (another cache line) to know its level.
fn node_word(node: Node, shift: u32) -> u64 {
    node.0 << 8 | u64::from(shift) << 2 | TAG_NODE
}

/// The shift of the node a folio of `order` lives in, and how many slots it takes there.
fn placement(order: u8) -> (u32, u32) {
    (6 * (u32::from(order) / 6), 1 << (order % 6))
}

/// One tree at `base` of a region, its nodes in frames of `buddy` whose data lies at
/// `data` (frame f's 512 words at `data + f * 512`). A view: its clones are the same
/// tree.
#[derive(Clone, Debug)]
pub(crate) struct SharedIndex<'r> {
    region: &'r [AtomicU64],
    /// The frames' data area (`FRAME_WORDS` per frame): the one slice a reader's walk
    /// indexes, so that each level costs one bounds check.
    area: &'r [AtomicU64],
    /// The tree's ROOT word.
    root_word: &'r AtomicU64,
    lock: HolderLock<'r>,
    base: Word,
    /// Where node frames come from and go back to.
    buddy: SharedBuddy<'r>,
}

impl<'r> SharedIndex<'r> {
    /// The words a tree takes at its base (its nodes live in the buddy's frames).
    pub(crate) fn words() -> u32 {
        TREE_WORDS
    }

    /// A view of the tree at `base` (8-word aligned), as `format` left it, its nodes in
    /// frames of `buddy` (in the same region) whose data area starts at `data`.
    pub(crate) fn new(
        region: &'r [AtomicU64],
        base: Word,
        buddy: &SharedBuddy<'r>,
        data: Word,
    ) -> SharedIndex<'r> {
        assert!(buddy.lies_in(region), "the buddy lies in another region");
        assert!(
            base.index() + TREE_WORDS as usize <= region.len(),
            "the index lies past the region"
        );
        let area_words = FRAME_WORDS as usize * buddy.frames() as usize;
        assert!(
            data.index() + area_words <= region.len(),
            "the data area lies past the region"
        );
        SharedIndex {
            region,
            area: &region[data.index()..data.index() + area_words],
            root_word: &region[base.at(ROOT).index()],
            lock: HolderLock::new(region, base),
            base,
            buddy: buddy.clone(),
        }
    }

    /// An empty tree with no node frame, the lock free.
    ///
    /// Context: the region's maker, before any other process sees it (a tree that holds
    /// frames gives them back by `release`).
    pub(crate) fn format(&self) {
        for offset in 0..TREE_WORDS {
            self.region[self.base.at(offset).index()].store(0, Ordering::Release);
        }
    }

    fn line(&self, offset: u32) -> &AtomicU64 {
        &self.region[self.base.at(offset).index()]
    }

    /// A node's header word; `node` checked by the caller (writers assert, readers test).
    fn header(&self, node: Node, word: u32) -> &AtomicU64 {
        assert!(word < SLOTS_AT, "no header word {word}");
        &self.area[node.first() + word as usize]
    }

    fn slot(&self, node: Node, slot: u32) -> &AtomicU64 {
        assert!(slot < FANOUT, "no slot {node:?}.{slot}");
        &self.area[node.first() + (SLOTS_AT + slot) as usize]
    }

    /// A node frame's `CHAIN` word.
    fn chain(&self, frame: u32) -> &AtomicU64 {
        &self.area[(u64::from(frame) * FRAME_WORDS + CHAIN) as usize]
    }

    /// The node a linking word (PARENT, the pool's head, NEXT) names, if it names one of
    /// a frame of the area.
    fn named(&self, word: u64) -> Option<Node> {
        Node::of(word, self.buddy.frames())
    }

    /// The node and shift a link (`node_word`) names, if the node is one of a frame of
    /// the area and the shift a level's.
    fn linked(&self, word: u64) -> Option<(Node, u32)> {
        let node = self.named(word >> 8)?;
        let shift = ((word >> 2) & 0x3f) as u32;
        (shift % 6 == 0 && shift < 6 * MAX_LEVELS).then_some((node, shift))
    }

    fn root(&self) -> Option<Node> {
        self.linked(self.line(ROOT).load(Ordering::Relaxed))
            .map(|(node, _)| node)
    }

    /// The lock (diagnostics, tests).
    pub(crate) fn lock_line(&self) -> &HolderLock<'r> {
        &self.lock
    }

    // ---------------------------------------------------------------- readers

    /// The walk down to `page`'s deepest slot: the last slot word loaded, the shift of its
    /// node and that slot, or `None` when the tree is empty or does
    /// not span `page`, or a word is nonsense (a root whose shift is not a level's, a link
    /// naming a word past the area).
    ///
    /// Each level is one Acquire load of one slot (a link carries the child's shift: no
    /// node header is loaded), found in `self.area` with one bounds check: the word index
    /// is `node - 64 + slot` (`Node`), which cannot overflow (a link's node field is below
    /// 2^56), a field below 64 wraps past the area, and an index past the area ends the
    /// walk. A node number that another process scribbled reads some word of the area
    /// (module docs: harmless, a hint), whose value the next check judges. A slot is
    /// followed down only if its low byte is a link's to the level below (tag 0, the
    /// child's shift, which is the parent's minus 6) and it names a node: the shift falls
    /// by 6 per level from at most 54, so the walk ends within `MAX_LEVELS` levels, at the
    /// leaves at the latest.
    ///
    /// Context: any process, lock-free; never panics on what it reads.
    #[inline(always)]
    fn walk(&self, page: Page) -> Option<(u64, u32, &'r AtomicU64)> {
        let mut link = self.root_word.load(Ordering::Acquire);
        let mut shift = ((link >> 2) & 0x3f) as u32;
        // One test for "a multiple of 6 below 60": shift < 64 here.
        if link & 3 != TAG_NODE || (LEVEL_SHIFTS >> shift) & 1 == 0 || page >> (shift + 6) != 0 {
            return None;
        }
        loop {
            let at = (page >> shift) & 63;
            let word = (link >> 8).wrapping_add(at).wrapping_sub(LINK_BIAS);
            let area: &'r [AtomicU64] = self.area;
            let word = area.get(usize::try_from(word).ok()?)?;
            let slot = word.load(Ordering::Acquire);
            if shift != 0 && slot as u8 == ((shift - 6) << 2) as u8 && slot > 0xff {
                link = slot;
                shift -= 6;
                continue;
            }
            return match slot & 3 {
                _ if slot == 0 => Some((0, shift, word)),
                TAG_NODE => None,
                _ => Some((slot, shift, word)),
            };
        }
    }

    /// The entry a walk's last slot word names (`walk`): its folio if its order fits the
    /// node's shift, its shadow, or `Absent`.
    #[inline(always)]
    fn entry(slot: u64, shift: u32) -> Entry {
        let (frame, order) = match slot & 3 {
            TAG_FOLIO => (slot >> 6, ((slot >> 2) & 0xf) as u8),
            TAG_SIBLING => (slot >> 12, ((slot >> 8) & 0xf) as u8),
            TAG_SHADOW => return Entry::Shadow(slot >> 2),
            _ => return Entry::Absent,
        };
        // `placement(order).0`, without the division: orders 0..=5 in the leaves, 6..=9
        // one level up.
        let fits = if order < 6 { shift == 0 } else { shift == 6 };
        if order > ORDER_MAX || !fits {
            return Entry::Absent;
        }
        Entry::Folio { frame, order }
    }

    /// The entry at `page`, and the first page after `page` that the same answer covers
    /// (the end of its folio, or of the empty slot the walk stopped at).
    ///
    /// Context: any process, lock-free; never panics on what it reads.
    fn probe(&self, page: Page) -> (Entry, Page) {
        let next = page.saturating_add(1);
        if self
            .linked(self.root_word.load(Ordering::Relaxed))
            .is_none()
        {
            // An empty tree (or a nonsense root): no folio anywhere.
            return (Entry::Absent, Page::MAX);
        }
        let Some((slot, shift, _)) = self.walk(page) else {
            return (Entry::Absent, next);
        };
        if slot == 0 {
            return (Entry::Absent, ((page >> shift) + 1) << shift);
        }
        let entry = Self::entry(slot, shift);
        let end = match entry {
            Entry::Folio { order, .. } => ((page >> order) + 1) << order,
            _ => next,
        };
        (entry, end)
    }

    /// Who holds the tree's lock, as its word is (`SharedQueue::locked_by`).
    pub(crate) fn lock_holder(&self) -> Option<Holder> {
        self.lock.holder()
    }

    /// The entry at `page` (the hit path).
    ///
    /// Context: any process, lock-free: bounded by the tree's height; an impossible word
    /// reads as `Absent`.
    #[inline]
    pub(crate) fn lookup(&self, page: Page) -> Entry {
        match self.walk(page) {
            Some((slot, shift, _)) => Self::entry(slot, shift),
            None => Entry::Absent,
        }
    }

    /// The optimistic hit's look-up (queue.rs, "The optimistic hit"): the frame of the
    /// order-0 folio at `page` and the slot that named it (`Named`), to be loaded again in
    /// place of a second walk, or `None` (absent, a shadow, a larger folio).
    ///
    /// Context: as `lookup`. What the slot names later is a hint its caller validates: a
    /// node the slot lies in may have been pruned and linked again elsewhere in the tree
    /// meanwhile (for another page: the caller checks the frame's page).
    #[inline]
    pub(crate) fn lookup_named(&self, page: Page) -> Option<Named<'r>> {
        let (slot, shift, named) = self.walk(page)?;
        match Self::entry(slot, shift) {
            Entry::Folio { frame, order: 0 } => Some(Named {
                frame,
                word: slot,
                slot: named,
            }),
            _ => None,
        }
    }

    /// The runs of pages in `[start, end)` that no folio covers (absent or shadows), in
    /// order, as `(first, end)` (the miss path's question).
    ///
    /// Context: as `lookup`; a hint (a writer may change the tree meanwhile).
    pub(crate) fn gaps(&self, start: Page, end: Page) -> Vec<(Page, Page)> {
        let mut gaps: Vec<(Page, Page)> = Vec::new();
        let mut page = start;
        while page < end {
            let (entry, after) = self.probe(page);
            let after = after.clamp(page + 1, end);
            if !matches!(entry, Entry::Folio { .. }) {
                match gaps.last_mut() {
                    Some(last) if last.1 == page => last.1 = after,
                    _ => gaps.push((page, after)),
                }
            }
            page = after;
        }
        gaps
    }

    // ---------------------------------------------------------------- writers

    /// The stores of one primitive, in order, each through `store` (the holder's steps;
    /// a redo's are none).
    fn apply(
        &self,
        intent: &Intent,
        flaw: Flaw,
        mut store: impl FnMut(&AtomicU64, u64) -> Result<(), Died>,
    ) -> Result<(), Died> {
        let [a, b, c, d] = intent.args;
        let frames = self.buddy.frames();
        let node = |word: u64| Node::of(word, frames).expect("an intent names a node");
        match intent.op {
            GROW => {
                let n = node(a);
                let shift = c as u32;
                let child = self.named(b);
                let info = Info {
                    count: u32::from(child.is_some()),
                    offset: 0,
                    shift,
                };
                if link_before_fill(flaw) {
                    store(self.line(ROOT), node_word(n, shift))?;
                }
                store(self.header(n, INFO), info.word())?;
                store(self.header(n, PARENT), 0)?;
                store(self.header(n, NEXT), 0)?;
                if let Some(child) = child {
                    store(self.slot(n, 0), node_word(child, shift - 6))?;
                    store(self.header(child, PARENT), n.0)?;
                }
                store(self.line(POOL), d)?;
                store(self.line(ROOT), node_word(n, shift))
            }
            EXTEND => {
                let (m, parent) = (node(a), node(b));
                let info = Info {
                    count: 0,
                    offset: (c & 0xff) as u32,
                    shift: ((c >> 8) & 0xff) as u32,
                };
                store(self.header(m, INFO), info.word())?;
                store(self.header(m, PARENT), parent.0)?;
                store(self.header(m, NEXT), 0)?;
                store(self.slot(parent, info.offset), node_word(m, info.shift))?;
                store(self.header(parent, INFO), c >> 16)?;
                store(self.line(POOL), d)
            }
            STORE => {
                let n = node(a);
                let offset = (b & 0xff) as u32;
                let order = ((b >> 8) & 0xff) as u8;
                let (_, slots) = placement(order);
                store(self.slot(n, offset), folio_word(c, order))?;
                for s in offset + 1..offset + slots {
                    store(self.slot(n, s), sibling_word(c, order, offset))?;
                }
                store(self.header(n, INFO), b >> 16)
            }
            REMOVE => {
                let n = node(a);
                let offset = (b & 0xff) as u32;
                let order = ((b >> 8) & 0xff) as u8;
                let (_, slots) = placement(order);
                for s in (offset + 1..offset + slots).rev() {
                    store(self.slot(n, s), 0)?;
                }
                store(self.slot(n, offset), c)?;
                store(self.header(n, INFO), b >> 16)
            }
            PRUNE => {
                let n = node(a);
                match self.named(b) {
                    Some(parent) => {
                        store(self.slot(parent, (c & 0xff) as u32), 0)?;
                        store(self.header(parent, INFO), c >> 16)?;
                    }
                    None => store(self.line(ROOT), 0)?,
                }
                store(self.header(n, INFO), POOLED)?;
                store(self.header(n, PARENT), 0)?;
                store(self.header(n, NEXT), d)?;
                store(self.line(POOL), n.0)
            }
            ADOPT => {
                // a: the frame, b: the pool's head, c: the chain's head (FRAMES).
                let frame = u32::try_from(a).expect("an intent names a frame");
                for k in 0..NODES_PER_FRAME {
                    let n = Node::new(frame, k);
                    let next = if k + 1 < NODES_PER_FRAME {
                        Node::new(frame, k + 1).0
                    } else {
                        b
                    };
                    store(self.header(n, INFO), POOLED)?;
                    store(self.header(n, PARENT), 0)?;
                    store(self.header(n, NEXT), next)?;
                }
                store(self.chain(frame), c)?;
                if !adopt_outside_intent(flaw) {
                    let (word, nodes) = self.buddy.nodes_store(Frame(frame), self.base);
                    store(word, nodes)?;
                }
                store(self.line(FRAMES), a + 1)?;
                store(self.line(POOL), Node::new(frame, 0).0)
            }
            RESET => {
                store(self.line(ROOT), 0)?;
                store(self.line(POOL), 0)?;
                store(self.line(RELEASING), RELEASE_ALL)
            }
            UNCHAIN => {
                // a: the frame, b: its CHAIN (the next frame + 1, or 0).
                let named = if unchain_unnamed(flaw) { 0 } else { a + 1 };
                store(self.line(RELEASING), RELEASE_ALL | named)?;
                store(self.line(FRAMES), b)
            }
            op => panic!("an index intent with an unknown operation {op}"),
        }
    }

    /// A dead holder's primitive finished (lock.rs T2).
    fn redo(&self, intent: &Intent) {
        let redone = self.apply(intent, Flaw::None, |word, value| {
            word.store(value, Ordering::Release);
            Ok(())
        });
        assert_eq!(redone, Ok(()));
    }

    /// One primitive by the holder of `held`: M1, M2, M3 (under
    /// `Flaw::IntentAfterMutation`, the stores before the intent).
    fn change<R: Run>(&self, held: &Held<'_, '_>, intent: &Intent, run: &R) -> Result<(), Died> {
        held.change(intent, run, |store| self.apply(intent, run.flaw(), store))
    }

    /// Takes the lock (over from a dead holder: its last primitive redone, then its
    /// folio's path tidied, W4-W5).
    fn take<R: Run>(
        &self,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Held<'_, 'r>, Died> {
        let held = self.lock.lock(me, slots, run, |intent| self.redo(intent))?;
        let working = self.line(WORKING).load(Ordering::Acquire);
        if working != 0 {
            if !tidy_forgotten(run) {
                self.tidy(&held, working - 1, run)?;
            }
            held.store(self.line(WORKING), 0, run)?;
        }
        if self.line(RELEASING).load(Ordering::Acquire) != 0 {
            self.finish_release(&held, slots, run)?;
        }
        Ok(held)
    }

    /// A node off the pool (not taken yet: the primitive that links it takes it) and the
    /// pool's head after it; an empty pool first refilled from the buddy (`refill`).
    /// `None` when the pool is empty and the buddy has no free frame.
    fn pool_take<R: Run>(
        &self,
        held: &Held<'_, '_>,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Option<(Node, u64)>, Died> {
        if let Some(next) = self.pool_next() {
            return Ok(Some(next));
        }
        if !self.refill(held, slots, run)? {
            return Ok(None);
        }
        Ok(Some(self.pool_next().expect("a refilled pool")))
    }

    /// R1-R3 (module docs): a frame leased from the buddy, its slots cleared, and adopted
    /// (ADOPT): its 7 nodes pooled, the frame the tree's. Whether the buddy had a frame.
    fn refill<R: Run>(
        &self,
        held: &Held<'_, '_>,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<bool, Died> {
        let me = held.holder();
        // R1 (the lock order: this tree's, then the buddy's).
        let Some(frame) = self.buddy.alloc(Order(0), me, slots, run)? else {
            return Ok(false);
        };
        // R2: the frame is ours (LEASED to us): no one else writes it, and no reader of
        // this tree reaches it before a primitive links one of its nodes (release).
        for k in 0..NODES_PER_FRAME {
            for s in 0..FANOUT {
                self.slot(Node::new(frame.0, k), s)
                    .store(0, Ordering::Relaxed);
            }
        }
        // R3.
        let intent = Intent {
            op: ADOPT,
            args: [
                u64::from(frame.0),
                self.line(POOL).load(Ordering::Relaxed),
                self.line(FRAMES).load(Ordering::Relaxed),
                0,
            ],
        };
        self.change(held, &intent, run)?;
        if adopt_outside_intent(run.flaw()) {
            let (word, nodes) = self.buddy.nodes_store(frame, self.base);
            held.store(word, nodes, run)?;
        }
        Ok(true)
    }

    /// D2-D4 (module docs): frees the frame RELEASING names (a dead releaser's), then
    /// every frame on the chain, one UNCHAIN and one buddy free each, then clears
    /// RELEASING. How many frames it freed.
    fn finish_release<R: Run>(
        &self,
        held: &Held<'_, '_>,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<u32, Died> {
        let me = held.holder();
        let mut freed = 0;
        loop {
            let named = self.line(RELEASING).load(Ordering::Relaxed) & !RELEASE_ALL;
            if named != 0 {
                let frame = Frame(u32::try_from(named - 1).expect("RELEASING names a frame"));
                freed += u32::from(self.buddy.free_nodes(frame, self.base, me, slots, run)?);
                held.store(self.line(RELEASING), RELEASE_ALL, run)?;
            }
            let head = self.line(FRAMES).load(Ordering::Relaxed);
            if head == 0 {
                break;
            }
            let frame = u32::try_from(head - 1).expect("FRAMES names a frame");
            assert!(
                self.buddy.is_nodes_of(Frame(frame), self.base),
                "chained frame {frame} is not the tree's"
            );
            let intent = Intent {
                op: UNCHAIN,
                args: [
                    u64::from(frame),
                    self.chain(frame).load(Ordering::Relaxed),
                    0,
                    0,
                ],
            };
            self.change(held, &intent, run)?;
            if unchain_unnamed(run.flaw()) {
                freed +=
                    u32::from(
                        self.buddy
                            .free_nodes(Frame(frame), self.base, me, slots, run)?,
                    );
            }
        }
        held.store(self.line(RELEASING), 0, run)?;
        Ok(freed)
    }

    fn info(&self, node: Node) -> Info {
        let word = self.header(node, INFO).load(Ordering::Relaxed);
        Info::of(word).unwrap_or_else(|| panic!("node {node} in the tree has INFO {word:#x}"))
    }

    /// The node (not the pool's head word) that the pool would give next, and the head
    /// after it.
    fn pool_next(&self) -> Option<(Node, u64)> {
        let node = self.named(self.line(POOL).load(Ordering::Relaxed))?;
        assert_eq!(
            self.header(node, INFO).load(Ordering::Relaxed),
            POOLED,
            "pool node {node} is not pooled"
        );
        Some((node, self.header(node, NEXT).load(Ordering::Relaxed)))
    }

    /// W4: prune the empty nodes on `page`'s path, bottom up.
    fn tidy<R: Run>(&self, held: &Held<'_, '_>, page: Page, run: &R) -> Result<(), Died> {
        let mut path = Vec::new();
        let mut at = self.root();
        while let Some(node) = at {
            path.push(node);
            let info = self.info(node);
            if info.shift + 6 < 64 && page >> (info.shift + 6) != 0 && path.len() == 1 {
                break;
            }
            let slot = self
                .slot(node, ((page >> info.shift) & 63) as u32)
                .load(Ordering::Relaxed);
            at = if slot != 0 && slot & 3 == TAG_NODE {
                self.named(slot >> 8)
            } else {
                None
            };
        }
        while let Some(node) = path.pop() {
            if self.info(node).count != 0 {
                break;
            }
            let pool = self.line(POOL).load(Ordering::Relaxed);
            let (parent, c) = match path.last() {
                Some(&parent) => {
                    let mut info = self.info(parent);
                    let offset = self.info(node).offset;
                    info.count -= 1;
                    (parent.0, u64::from(offset) | info.word() << 16)
                }
                None => (0, 0),
            };
            let intent = Intent {
                op: PRUNE,
                args: [node.0, parent, c, pool],
            };
            self.change(held, &intent, run)?;
        }
        Ok(())
    }

    /// W2: the node of `shift` on `page`'s path, grown and extended as needed; `None`
    /// when the pool is empty; `Err(Conflict)` when a folio (or, at the target level, a
    /// node) is in the way.
    fn reach<R: Run>(
        &self,
        held: &Held<'_, '_>,
        page: Page,
        shift: u32,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Result<Node, Placed>, Died> {
        loop {
            let root = self.root();
            let covered = match root {
                Some(r) => {
                    let s = self.info(r).shift;
                    s >= shift && (s + 6 >= 64 || page >> (s + 6) == 0)
                }
                None => false,
            };
            if covered {
                break;
            }
            let Some((n, next)) = self.pool_take(held, slots, run)? else {
                return Ok(Err(Placed::Full));
            };
            let new_shift = match root {
                Some(r) => self.info(r).shift + 6,
                None => {
                    let mut s = shift;
                    while s + 6 < 64 && page >> (s + 6) != 0 {
                        s += 6;
                    }
                    s
                }
            };
            let intent = Intent {
                op: GROW,
                args: [n.0, root.map_or(0, |r| r.0), u64::from(new_shift), next],
            };
            self.change(held, &intent, run)?;
        }
        let mut node = self.root().expect("a root after growth");
        loop {
            let info = self.info(node);
            if info.shift == shift {
                return Ok(Ok(node));
            }
            let at = ((page >> info.shift) & 63) as u32;
            let slot = self.slot(node, at).load(Ordering::Relaxed);
            if slot != 0 && slot & 3 == TAG_NODE {
                node = self.named(slot >> 8).expect("a slot names a node");
                continue;
            }
            if slot != 0 {
                return Ok(Err(Placed::Conflict));
            }
            let Some((m, next)) = self.pool_take(held, slots, run)? else {
                return Ok(Err(Placed::Full));
            };
            let mut parent = info;
            parent.count += 1;
            let c = u64::from(at) | u64::from(info.shift - 6) << 8 | parent.word() << 16;
            let intent = Intent {
                op: EXTEND,
                args: [m.0, node.0, c, next],
            };
            self.change(held, &intent, run)?;
            node = m;
        }
    }

    /// W1-W5 for one folio at `page` (aligned to its order).
    fn insert_one<R: Run>(
        &self,
        held: &Held<'_, '_>,
        page: Page,
        folio: Folio,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Placed, Died> {
        assert!(folio.order <= ORDER_MAX, "order {} too large", folio.order);
        assert_eq!(
            page % (1 << folio.order),
            0,
            "a folio is aligned to its order"
        );
        assert!(
            page < 1 << 60 && folio.frame < 1 << 50,
            "page or frame too large"
        );
        held.store(self.line(WORKING), page + 1, run)?;
        let (shift, width) = placement(folio.order);
        let placed = match self.reach(held, page, shift, slots, run)? {
            Err(placed) => placed,
            Ok(node) => {
                let offset = ((page >> shift) & 63) as u32;
                let mut shadows = Vec::new();
                let mut occupied = 0;
                let mut conflict = false;
                for s in offset..offset + width {
                    let slot = self.slot(node, s).load(Ordering::Relaxed);
                    match slot & 3 {
                        _ if slot == 0 => {}
                        TAG_SHADOW => {
                            occupied += 1;
                            let at = (page >> shift & !63 | u64::from(s)) << shift;
                            shadows.push((at, slot >> 2));
                        }
                        _ => conflict = true,
                    }
                }
                if conflict {
                    Placed::Conflict
                } else {
                    let mut info = self.info(node);
                    info.count = info.count - occupied + width;
                    let intent = Intent {
                        op: STORE,
                        args: [
                            node.0,
                            u64::from(offset) | u64::from(folio.order) << 8 | info.word() << 16,
                            folio.frame,
                            0,
                        ],
                    };
                    self.change(held, &intent, run)?;
                    Placed::Inserted(shadows)
                }
            }
        };
        if !matches!(placed, Placed::Inserted(_)) {
            self.tidy(held, page, run)?;
        }
        held.store(self.line(WORKING), 0, run)?;
        Ok(placed)
    }

    /// Inserts a run of folios, the first at `page`, each after the one before (each
    /// aligned to its order), in one hold of the lock: what each became.
    ///
    /// Context: `me` is LIVE in `slots`; takes the tree's lock (spins while a live holder
    /// holds it). A death leaves a prefix of the run inserted.
    pub(crate) fn insert_run<R: Run>(
        &self,
        me: Holder,
        page: Page,
        folios: &[Folio],
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Vec<Placed>, Died> {
        let held = self.take(me, slots, run)?;
        let mut placed = Vec::with_capacity(folios.len());
        let mut at = page;
        for folio in folios {
            placed.push(self.insert_one(&held, at, *folio, slots, run)?);
            at += 1 << folio.order;
        }
        held.unlock(run)?;
        Ok(placed)
    }

    /// A writer's put (queue.rs, "Writes"): the order-0 `folio` at `page` in place of
    /// what the slot holds: a folio of order 0 there is replaced by one STORE whose INFO is
    /// the node's unchanged (the slot's one store: a reader's walk finds the old folio or
    /// the new one), else the folio is inserted (W1-W5). What was there.
    ///
    /// Context: as `insert_run`; the caller holds the eviction queue's lock (the old folio
    /// leaves the index: only queue holders take a cached frame out of an index).
    pub(crate) fn put<R: Run>(
        &self,
        me: Holder,
        page: Page,
        folio: Folio,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Put, Died> {
        assert_eq!(folio.order, 0, "a writer's put is of one page");
        let held = self.take(me, slots, run)?;
        let put = match self.lookup(page) {
            Entry::Folio { frame, order: 0 } => {
                held.store(self.line(WORKING), page + 1, run)?;
                let mut node = self.root().expect("a root");
                while self.info(node).shift != 0 {
                    let info = self.info(node);
                    let slot = self
                        .slot(node, ((page >> info.shift) & 63) as u32)
                        .load(Ordering::Relaxed);
                    node = self.named(slot >> 8).expect("a path to a folio");
                }
                let info = self.info(node);
                let intent = Intent {
                    op: STORE,
                    args: [node.0, (page & 63) | info.word() << 16, folio.frame, 0],
                };
                self.change(&held, &intent, run)?;
                held.store(self.line(WORKING), 0, run)?;
                Put::Replaced(Folio { frame, order: 0 })
            }
            Entry::Folio { .. } => panic!("a larger folio at page {page} of a shared tree"),
            _ => match self.insert_one(&held, page, folio, slots, run)? {
                Placed::Inserted(_) => Put::Inserted,
                Placed::Full => Put::Full,
                Placed::Conflict => panic!("a conflict at page {page} under the tree's lock"),
            },
        };
        held.unlock(run)?;
        Ok(put)
    }

    /// Removes the folio covering `page` (eviction), leaving `leave` in its head slot if
    /// its order is below 6 (else empty); prunes the nodes it empties. The folio removed.
    ///
    /// Context: as `insert_run`.
    pub(crate) fn remove<R: Run>(
        &self,
        me: Holder,
        page: Page,
        leave: Leave,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Option<Folio>, Died> {
        let held = self.take(me, slots, run)?;
        let removed = self.remove_locked(&held, page, leave, run)?;
        held.unlock(run)?;
        Ok(removed)
    }

    /// `remove` of the order-0 folio of `frame` at `page` only if the slot names it once
    /// the lock is ours (a dead holder's change redone first: queue.rs E4).
    ///
    /// Context: as `insert_run`.
    pub(crate) fn remove_named<R: Run>(
        &self,
        me: Holder,
        page: Page,
        frame: u64,
        leave: Leave,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Option<Folio>, Died> {
        let held = self.take(me, slots, run)?;
        let removed = if self.lookup(page) == (Entry::Folio { frame, order: 0 }) {
            self.remove_locked(&held, page, leave, run)?
        } else {
            None
        };
        held.unlock(run)?;
        Ok(removed)
    }

    fn remove_locked<R: Run>(
        &self,
        held: &Held<'_, '_>,
        page: Page,
        leave: Leave,
        run: &R,
    ) -> Result<Option<Folio>, Died> {
        let Entry::Folio { frame, order } = self.lookup(page) else {
            return Ok(None);
        };
        let (shift, slots) = placement(order);
        let head = page >> order << order;
        held.store(self.line(WORKING), head + 1, run)?;
        let mut node = self.root().expect("a root");
        while self.info(node).shift != shift {
            let info = self.info(node);
            let slot = self
                .slot(node, ((head >> info.shift) & 63) as u32)
                .load(Ordering::Relaxed);
            node = self.named(slot >> 8).expect("a path to a folio");
        }
        let offset = ((head >> shift) & 63) as u32;
        let word = match leave {
            Leave::Shadow(value) if order < 6 => {
                assert!(value < 1 << 62, "a shadow value below 2^62");
                value << 2 | TAG_SHADOW
            }
            _ => 0,
        };
        let mut info = self.info(node);
        info.count = info.count - slots + u32::from(word != 0);
        let intent = Intent {
            op: REMOVE,
            args: [
                node.0,
                u64::from(offset) | u64::from(order) << 8 | info.word() << 16,
                word,
                0,
            ],
        };
        self.change(held, &intent, run)?;
        self.tidy(held, head, run)?;
        held.store(self.line(WORKING), 0, run)?;
        Ok(Some(Folio { frame, order }))
    }

    /// Takes the lock and lets it go: a dead holder's change finished (the steward's sweep
    /// of a dead process, or a test's taker).
    ///
    /// Context: as `insert_run`.
    pub(crate) fn recover<R: Run>(
        &self,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        let held = self.take(me, slots, run)?;
        held.unlock(run)
    }

    /// Drops the whole tree (D1-D4, module docs): its entries forgotten and every node
    /// frame given back to the buddy, each under the buddy's lock with the frame named in
    /// RELEASING first, so that a death leaks none (whoever takes the tree's lock next
    /// finishes the release). The tree is then empty and may be used again. How many frames
    /// this call freed.
    ///
    /// Context: as `insert_run`, and the caller's contract: the tree's file record is
    /// being dropped (nobody has it open and nobody can open it: its table's lock is held,
    /// files.rs R1), so no reader walks it but reclaim's look-up of a queued frame left in
    /// no index (queue.rs E4), which reads any word as a hint and removes nothing it does
    /// not find again under this lock; and no folio is left in it that another structure
    /// (the eviction queue) still names as in this tree.
    pub(crate) fn release<R: Run>(
        &self,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<u32, Died> {
        let held = self.take(me, slots, run)?;
        let intent = Intent {
            op: RESET,
            args: [0; 4],
        };
        self.change(&held, &intent, run)?;
        let freed = self.finish_release(&held, slots, run)?;
        held.unlock(run)?;
        Ok(freed)
    }

    /// Every folio the tree names (its head page, the folio), read under its lock (a dead
    /// holder's change finished first): exact when read. A file record's drop
    /// (`SharedQueue::drop_file`) takes each out through the eviction queue.
    ///
    /// Context: as `insert_run`.
    pub(crate) fn folios<R: Run>(
        &self,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Vec<(Page, Folio)>, Died> {
        let held = self.take(me, slots, run)?;
        let folios = self
            .entries()
            .into_iter()
            .filter_map(|(page, entry)| match entry {
                Entry::Folio { frame, order } => Some((page, Folio { frame, order })),
                _ => None,
            })
            .collect();
        held.unlock(run)?;
        Ok(folios)
    }

    /// One refill (R1-R3) in one hold of the lock, for its cost's measure: whether the
    /// buddy had a frame.
    ///
    /// Context: as `insert_run` (tests).
    #[cfg(test)]
    pub(crate) fn refill_once<R: Run>(
        &self,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<bool, Died> {
        let held = self.take(me, slots, run)?;
        let refilled = self.refill(&held, slots, run)?;
        held.unlock(run)?;
        Ok(refilled)
    }

    /// The tree's node frames, by the chain (tests, diagnostics).
    ///
    /// Context: a quiet tree.
    pub(crate) fn node_frames(&self) -> Vec<Frame> {
        let mut frames = Vec::new();
        let mut at = self.line(FRAMES).load(Ordering::Acquire);
        while at != 0 && frames.len() <= self.buddy.frames() as usize {
            let frame = (at - 1) as u32;
            frames.push(Frame(frame));
            if frame >= self.buddy.frames() {
                break;
            }
            at = self.chain(frame).load(Ordering::Relaxed);
        }
        frames
    }

    // ---------------------------------------------------------------- checks

    /// Every entry of the tree, by page (a folio at its head page; a shadow at its page).
    ///
    /// Context: a quiet tree (tests, or its lock held: `folios`).
    pub(crate) fn entries(&self) -> Vec<(Page, Entry)> {
        let mut out = Vec::new();
        if let Some(root) = self.root() {
            self.collect(root, 0, &mut out);
        }
        out
    }

    fn collect(&self, node: Node, first: Page, out: &mut Vec<(Page, Entry)>) {
        let shift = self.info(node).shift;
        for s in 0..FANOUT {
            let slot = self.slot(node, s).load(Ordering::Acquire);
            let page = first + (u64::from(s) << shift);
            match slot & 3 {
                _ if slot == 0 => {}
                TAG_NODE => self.collect(self.named(slot >> 8).unwrap(), page, out),
                TAG_FOLIO => out.push((
                    page,
                    Entry::Folio {
                        frame: slot >> 6,
                        order: ((slot >> 2) & 0xf) as u8,
                    },
                )),
                TAG_SHADOW => out.push((page, Entry::Shadow(slot >> 2))),
                _ => {}
            }
        }
    }

    /// The invariant, on a quiet tree (lock free, no intent, WORKING 0): each node's
    /// count its non-empty slots, never 0; each child's PARENT, offset and shift right;
    /// each folio in the node of its order, aligned, its siblings right; every node either
    /// in the tree once or in the pool once. Returns the nodes in the tree.
    ///
    /// Context: nobody changes the tree meanwhile.
    pub(crate) fn check(&self) -> Result<u32, String> {
        if let Some(holder) = self.lock.holder() {
            return Err(format!("the lock is held by {holder:?}"));
        }
        if self.lock.intent_published() {
            return Err("an intent is published".into());
        }
        if self.line(WORKING).load(Ordering::Acquire) != 0 {
            return Err("a change is under way".into());
        }
        if self.line(RELEASING).load(Ordering::Acquire) != 0 {
            return Err("a release is under way".into());
        }
        let chained = self.node_frames();
        let mut frames = std::collections::BTreeSet::new();
        for frame in &chained {
            if !self.buddy.is_nodes_of(*frame, self.base) {
                return Err(format!("chained frame {} is not the tree's", frame.0));
            }
            if !frames.insert(frame.0) {
                return Err(format!("frame {} is chained twice", frame.0));
            }
        }
        let owned: std::collections::BTreeSet<u32> =
            self.buddy.nodes_of(self.base).iter().map(|f| f.0).collect();
        if owned != frames {
            return Err(format!(
                "the buddy gives the tree frames {owned:?}, its chain {frames:?}"
            ));
        }
        let mut seen = std::collections::HashSet::new();
        let mut in_tree = 0;
        let root = self.line(ROOT).load(Ordering::Acquire);
        if root != 0 {
            let (root, shift) = self
                .linked(root)
                .ok_or_else(|| format!("ROOT names {root:#x}"))?;
            if self.header(root, PARENT).load(Ordering::Relaxed) != 0 {
                return Err(format!("root {root} has a parent"));
            }
            let info = Info::of(self.header(root, INFO).load(Ordering::Relaxed))
                .ok_or_else(|| format!("root {root} has no INFO"))?;
            if info.offset != 0 || info.shift != shift {
                return Err(format!("root {root} has {info:?}, ROOT says shift {shift}"));
            }
            in_tree = self.check_node(root, info.shift, &frames, &mut seen)?;
        }
        let mut pooled = 0;
        let mut at = self.line(POOL).load(Ordering::Acquire);
        while at != 0 {
            let node = self
                .named(at)
                .filter(|n| frames.contains(&n.frame()))
                .ok_or_else(|| format!("the pool names {at}"))?;
            if !seen.insert(node) {
                return Err(format!(
                    "node {node} is pooled and in the tree, or pooled twice"
                ));
            }
            if self.header(node, INFO).load(Ordering::Relaxed) != POOLED {
                return Err(format!("pooled node {node} is not marked pooled"));
            }
            for s in 0..FANOUT {
                if self.slot(node, s).load(Ordering::Relaxed) != 0 {
                    return Err(format!("pooled node {node} has slot {s} set"));
                }
            }
            pooled += 1;
            at = self.header(node, NEXT).load(Ordering::Relaxed);
        }
        let nodes = NODES_PER_FRAME * frames.len() as u32;
        if in_tree + pooled != nodes {
            return Err(format!(
                "{in_tree} nodes in the tree and {pooled} pooled of {nodes}: leaked"
            ));
        }
        Ok(in_tree)
    }

    fn check_node(
        &self,
        node: Node,
        shift: u32,
        frames: &std::collections::BTreeSet<u32>,
        seen: &mut std::collections::HashSet<Node>,
    ) -> Result<u32, String> {
        if !frames.contains(&node.frame()) {
            return Err(format!("node {node:?} lies in a frame not the tree's"));
        }
        if !seen.insert(node) {
            return Err(format!("node {node} is in the tree twice"));
        }
        let info = Info::of(self.header(node, INFO).load(Ordering::Relaxed))
            .ok_or_else(|| format!("node {node} has no INFO"))?;
        if info.shift != shift {
            return Err(format!("node {node} has shift {}, not {shift}", info.shift));
        }
        let mut count = 0;
        let mut nodes = 1;
        let mut s = 0;
        while s < FANOUT {
            let slot = self.slot(node, s).load(Ordering::Relaxed);
            if slot != 0 {
                count += 1;
            }
            match slot & 3 {
                _ if slot == 0 => {}
                TAG_NODE => {
                    let child = self
                        .named(slot >> 8)
                        .ok_or_else(|| format!("node {node} slot {s} names {slot:#x}"))?;
                    if shift == 0 || self.linked(slot).map(|l| l.1) != Some(shift - 6) {
                        return Err(format!("node {node} (shift {shift}) links {slot:#x}"));
                    }
                    if self.header(child, PARENT).load(Ordering::Relaxed) != node.0 {
                        return Err(format!("node {child}'s parent is not {node}"));
                    }
                    let child_info = Info::of(self.header(child, INFO).load(Ordering::Relaxed));
                    if child_info.map(|i| i.offset) != Some(s) {
                        return Err(format!("node {child} is at {s}, its INFO says otherwise"));
                    }
                    nodes += self.check_node(child, shift - 6, frames, seen)?;
                }
                TAG_FOLIO => {
                    let (frame, order) = (slot >> 6, ((slot >> 2) & 0xf) as u8);
                    let (at, slots) = placement(order);
                    if order > ORDER_MAX || at != shift || s % slots != 0 {
                        return Err(format!("folio {slot:#x} misplaced at {node}.{s}"));
                    }
                    for t in s + 1..s + slots {
                        if self.slot(node, t).load(Ordering::Relaxed)
                            != sibling_word(frame, order, s)
                        {
                            return Err(format!("node {node} slot {t}: not a sibling of {s}"));
                        }
                    }
                    count += slots - 1;
                    s += slots;
                    continue;
                }
                TAG_SHADOW => {
                    if shift != 0 {
                        return Err(format!("a shadow at {node}.{s}, shift {shift}"));
                    }
                }
                _ => return Err(format!("a stray sibling at {node}.{s}")),
            }
            s += 1;
        }
        if count == 0 {
            return Err(format!("node {node} is empty"));
        }
        if info.count != count {
            return Err(format!("node {node} counts {}, holds {count}", info.count));
        }
        Ok(nodes)
    }
}

/// Whether `run`'s flaw is a taker that does not tidy the dead holder's path.
fn tidy_forgotten(run: &impl Run) -> bool {
    match run.flaw() {
        #[cfg(test)]
        Flaw::TidyForgotten => true,
        _ => false,
    }
}

/// Whether `flaw` links a new root before filling it (a reader then walks an unfilled
/// node).
fn link_before_fill(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::LinkBeforeFill => true,
        _ => false,
    }
}

/// Whether `flaw` makes ADOPT's adoption store after its intent is cleared.
fn adopt_outside_intent(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::AdoptOutsideIntent => true,
        _ => false,
    }
}

/// Whether `flaw` unchains a frame without naming it in RELEASING (freed right after).
fn unchain_unnamed(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::UnchainUnnamed => true,
        _ => false,
    }
}

// A link's node field (`node_word`: bits 8..64) holds every node of the largest domain.
const _: () = assert!((super::domain::FRAMES_MAX as u64 + 1) * FRAME_WORDS < 1 << 56);

#[cfg(test)]
mod tests {
    use super::super::domain::FRAMES_MAX;
    use super::*;

    /// The words that name a frame or a node keep the largest domain's (domain.rs,
    /// `FRAMES_MAX`): a folio's head and tail slots, a link to its last frame's last node.
    #[test]
    fn a_slots_words_keep_the_largest_domains_frames_and_nodes() {
        for frame in [(1 << 20) + 1, FRAMES_MAX - 1] {
            let head = folio_word(u64::from(frame), 0);
            assert_eq!(
                SharedIndex::entry(head, 0),
                Entry::Folio {
                    frame: u64::from(frame),
                    order: 0
                }
            );
            let tail = sibling_word(u64::from(frame - 1), 5, 3);
            assert_eq!(
                SharedIndex::entry(tail, 0),
                Entry::Folio {
                    frame: u64::from(frame - 1),
                    order: 5
                }
            );
            let node = Node::new(frame, NODES_PER_FRAME - 1);
            assert_eq!(Node::of(node.0, FRAMES_MAX), Some(node));
            assert_eq!(node.frame(), frame);
            let link = node_word(node, 54);
            assert_eq!(Node::of(link >> 8, FRAMES_MAX), Some(node));
            assert_eq!((link >> 2) & 0x3f, 54);
        }
    }
}
