//! A buddy allocator in shared words (issue 45 step 4, docs/sharing.md "The free lists"):
//! blocks of 2^k frames, k in 0..=`ORDER_MAX`, on per-order free lists, split on
//! allocation and merged on free (the shapes of `arena/buddy.rs`, the kernel's `expand`
//! and `__free_one_page`), every change under one `HolderLock` and finishable from its
//! intent record by whoever takes the lock over from a dead holder. Each allocated block's
//! head names its lessee (a `Holder` word), so the steward's `sweep` of a dead process
//! frees every block it held.
//!
//! ```text
//!   base + 0..8        the lock line (lock.rs): lock, intent, 4 args, IN_FLIGHT (6), -
//!   base + 8..24       head[k], k in 0..=ORDER_MAX: the first block of free list k (NIL);
//!                      word 23 (`FRONTIER`): the first frame never reached (below)
//!   base + 24..+F      next[f]: the next block on f's free list (NIL at the end)
//!   then F words       prev[f]: the previous block on f's list (NIL for the first)
//!   then F words       state[f]: the frame's state word (below)
//! ```
//!
//! A frame's state word: `kind << 62 | order << 56 | owner`:
//! - TAIL (kind 0, the word 0): a frame inside a block, not its head.
//! - FREE(k): the head of a free block of order k, on list k.
//! - LEASED(k, owner): the head of an allocated block of order k; `owner` is the lessee's
//!   `Holder::word` (never 0).
//! - MOVING(k): the head of the block in flight (below): on no list and leased to nobody.
//! - CACHED(k): LEASED(k, `CACHE`), `CACHE` = 1, a word no `Holder::word` is (those are
//!   at least 2^32): the block holds cached data every process may read, and belongs to
//!   the cache, not to a process (issue 45 step 6, "whose is a frame in the index").
//!
//! - NODES(tree): LEASED(0, `tree | 2`), `tree` the `Word` of a shared index's lock line
//!   (8-aligned, below 2^32: never a `Holder::word`, never `CACHE`): a frame whose data
//!   holds 7 nodes of that tree (index.rs, "Nodes in frames"). It belongs to the tree, not
//!   to a process: no sweep touches it; it returns to the lists only through
//!   `free_nodes`, when the tree is released.
//!
//! **Frames never reached** (`FRONTIER`, docs/sharing.md "The domain's memory as used"):
//! a domain of the machine's size is mostly frames nobody has used yet, and its three
//! words a frame (and the queue's eight) would be resident memory if they were written at
//! the format. So the format lists nothing: the frames from `FRONTIER` on are *virgin*:
//! free, on no list, every word of theirs 0 (the region file's holes: no page behind
//! them). The virgin frames are cut, in order, into the blocks a format of the whole area
//! would make (`fresh_order`: the largest aligned block that fits; 2 MiB blocks of
//! `ORDER_MAX` but for a shorter last chunk), and an allocation that finds no listed
//! block large enough takes the next one (`FRESH`: `FRONTIER` past it, the block in
//! flight at its order, then split down as a listed one). A virgin block never merges
//! with anything (its head's state is TAIL, which no merge takes), nor does a block reach
//! past `FRONTIER` by merging (fresh blocks are whole 2 MiB blocks or the format's tail
//! blocks, whose buddies lie past the area or are smaller). `FRONTIER` never goes back.
//! Every scan of the frames' words (the sweep, `free_blocks`, `check`, the queue's pins)
//! stops at `FRONTIER`: past it there is nothing, and nothing to touch.
//!
//! **The hand-over** (LEASED(k, me) -> CACHED(k)) is not a change of this allocator: it
//! is one store of the eviction queue's ADD (queue.rs), made under the queue's lock as
//! one of that intent's stores, so that a death leaves the block either its lessee's
//! (not queued: the sweep frees it) or the cache's (queued: reclaim frees it). Nobody but
//! the lessee changes a LEASED block's state word while the lessee lives, so the store
//! needs no lock of this allocator; after the lessee's death a taker of the queue's lock
//! may redo it, which is why the steward sweeps the queue (queue.rs `sweep`) before this
//! allocator. A CACHED block returns to the lists only through `free_cached` (reclaim,
//! under the queue's lock: the lock order is queue, then this allocator).
//!
//! **The adoption** (LEASED(0, me) -> NODES(tree)) is the same kind of store, made by a
//! shared index's ADOPT under the tree's lock (`nodes_store`); a NODES frame returns to
//! the lists only through `free_nodes` (the tree's release, under the tree's lock: the
//! lock order is tree, then this allocator). The steward recovers the trees whose lock a
//! dead process held before it sweeps this allocator, as it does the queue.
//!
//! **The block in flight.** A split or merge chain changes more words than one intent
//! holds (the lock line has 4 argument words), so it is a sequence of intents, one per
//! list primitive, and between two of them one block may be on no list: taken off list j
//! and not yet split down, or being merged up. The lock line's word 6 (`IN_FLIGHT`) names
//! it (`1 << 63 | k << 32 | frame`, 0 for none), and every primitive's intent sets it
//! along with its other stores, so that after any primitive the words say exactly which
//! block is in flight. A holder that takes the lock over (or anyone who takes it: after
//! `L1` it is 0) finishes the dead holder's last primitive from its intent (lock.rs's T2),
//! then **frees the block in flight** (the merge chain below, as its own change): an
//! allocation cut short is undone (its lessee died before it got the block), a free cut
//! short is finished.
//!
//! # Protocol
//!
//! Every primitive is one change under the lock (lock.rs M1-M3: its intent published,
//! then its stores, each an absolute value, then the intent cleared); the invariant below
//! holds between primitives.
//!
//! Allocation of order k (`alloc`, and each block of `lease_batch`):
//!   A1. TAKE(j): j the smallest order >= k whose list is not empty, b its first block:
//!       head[j] = next[b], prev[next[b]] = NIL, state[b] = MOVING(j), IN_FLIGHT = (b, j).
//!   A2. SPLIT(j), while j > k: h = b + 2^(j-1) listed first on list j-1 as FREE(j-1)
//!       (next[h], prev[h], state[h], prev[old head], head[j-1]), state[b] = MOVING(j-1),
//!       IN_FLIGHT = (b, j-1); j -= 1.
//!   A3. ASSIGN: state[b] = LEASED(k, lessee), IN_FLIGHT = 0 (or CARVE, for a batch of
//!       order-0 frames: state[b + i] = LEASED(0, lessee) for each of its 2^k frames).
//! Free of a block (b, k) leased to `owner` (`free`, `return_batch`, `sweep`):
//!   F1. RELEASE: state[b] = MOVING(k), IN_FLIGHT = (b, k).
//!   F2. MERGE(k), while k < ORDER_MAX and the buddy c = b ^ 2^k is FREE(k): c unlinked
//!       from list k (next[prev[c]] or head[k], prev[next[c]]), state[max(b, c)] = TAIL,
//!       state[min(b, c)] = MOVING(k+1), IN_FLIGHT = (min(b, c), k+1); b = min, k += 1.
//!   F3. LIST: b listed first on list k as FREE(k), IN_FLIGHT = 0.
//! Take-over: T1-T3 of lock.rs (T2 redoes the last primitive), then, if IN_FLIGHT names a
//! block (b, k), F2 and F3 for it.
//! A1 from the frontier (`take_block`, when no list of order >= k holds a block):
//!   A1'. FRESH(j): b = FRONTIER, j = `fresh_order(b)`: FRONTIER = b + 2^j,
//!        state[b] = MOVING(j), IN_FLIGHT = (b, j); then A2 (j >= k) or F3 (j < k: the
//!        area's shorter last chunk, listed, and the allocation looks again).
//!   A death after FRESH leaves the block in flight like a TAKE's: the taker lists it.
//!
//! **Invariant** (between primitives): every frame from `FRONTIER` on is virgin (its
//! words 0); every frame below it is in exactly one block: a free block
//! on the list of its order, an allocated block whose head names its lessee, or the one
//! block IN_FLIGHT names (at most one, its head MOVING(k)); a block of order k starts at
//! a multiple of 2^k; every frame but a block's head is TAIL, except inside a carved
//! batch, whose frames are each an order-0 block. When no change is in flight (`check`,
//! on a quiet allocator): IN_FLIGHT is 0, and no free block of order k < ORDER_MAX has a
//! free buddy of order k (merging is eager, as the kernel's), so an aligned run of 2^k
//! free frames is always inside one free block of order >= k: an allocation fails only
//! when no such run exists.
//!
//! Why no frame is lost whoever dies where: a death before a primitive's intent is
//! published leaves the words as the last primitive left them (the invariant, with the
//! block in flight named); a death after it leaves a change the taker redoes (absolute
//! stores); the taker then frees the block in flight. A death after A3 or after F3
//! leaves nothing in flight: the block is leased (the sweep frees it) or listed. A death
//! of the process that leased a block (holding no lock) leaves a LEASED block naming it:
//! the steward's sweep frees it. A CACHED block names no process: no sweep touches it.
//!
//! Protection: every word by the lock, one lock for all orders (a miss takes it once per
//! magazine batch: magazine.rs); the state word of a LEASED block is read without the
//! lock by its lessee only (no one else changes it while the lessee lives), and stored
//! CACHED by its hand-over under the queue's lock instead of this one; a CACHED block's
//! state word is changed only under the queue's lock (`free_cached` takes this one too).
//!
//! Limits: up to 2^32 - 1 frames (a domain has at most 2^28: domain.rs `FRAMES_MAX`);
//! `ORDER_MAX` = 9 (2 MiB blocks of 4 KiB frames, as `arena/buddy.rs`). The sweep scans
//! every reached frame's state word (1.3-6 ms per M frames: see docs/sharing.md's
//! figures); a frame's three words are 24 bytes (0.6% of a 4 KiB frame).

use super::lock::{Held, HolderLock, Intent, LINE_FREE_WORDS, LINE_WORDS};
use super::slot::SlotTable;
use super::stack::Frame;
use super::{Died, Flaw, Holder, Run, Word};
use crate::primitive::{fence, AtomicU64, Ordering};

/// The largest order: blocks of up to 2^9 frames.
pub(crate) const ORDER_MAX: u8 = 9;

/// No block: the end of a list.
const NIL: u64 = u64::MAX;

/// The lock line's word naming the block in flight.
const IN_FLIGHT: u32 = LINE_FREE_WORDS[0];
/// The words of the list heads, after the lock line (ORDER_MAX + 1, rounded to lines).
const HEADS: u32 = LINE_WORDS;
const HEAD_WORDS: u32 = 16;
/// The word naming the first frame never reached (module docs, "Frames never reached"):
/// the heads' line's last.
const FRONTIER: u32 = HEADS + HEAD_WORDS - 1;
const FRAMES_AT: u32 = HEADS + HEAD_WORDS;

const _: () = assert!((ORDER_MAX as u32) < HEAD_WORDS - 1);

// The state word's kinds.
const TAIL: u64 = 0;
const FREE: u64 = 1;
const LEASED: u64 = 2;
const MOVING: u64 = 3;
const OWNER_MASK: u64 = (1 << 56) - 1;
/// The owner of a CACHED block: never a `Holder::word` (those are >= 2^32), never 0.
const CACHE: u64 = 1;
/// The low bits of a NODES frame's owner (`tree | NODES`, the tree's word 8-aligned).
const NODES: u64 = 2;

/// The owner word of a tree's node frames (module docs, NODES(tree)).
fn nodes_owner(tree: Word) -> u64 {
    assert_eq!(tree.0 % 8, 0, "a tree's lock line is 8-aligned");
    u64::from(tree.0) | NODES
}

// The intents' operation codes (the order in bits 8..16).
const TAKE: u64 = 1;
const SPLIT: u64 = 2;
const ASSIGN: u64 = 3;
const CARVE: u64 = 4;
const RELEASE: u64 = 5;
const MERGE: u64 = 6;
const LIST: u64 = 7;
const FRESH: u64 = 8;

/// A block's order: it holds 2^order frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Order(pub(crate) u8);

impl Order {
    fn frames(self) -> u32 {
        1 << self.0
    }
}

/// Where `take_block` may take a block from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reach {
    /// The free lists only.
    ListedOnly,
    /// The free lists, else the frontier's next block (module docs, "Frames never
    /// reached").
    OrFresh,
}

/// A frame's state word, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Tail,
    Free(Order),
    Leased(Order, u64),
    Moving(Order),
}

impl State {
    fn word(self) -> u64 {
        let (kind, order, owner) = match self {
            State::Tail => (TAIL, 0, 0),
            State::Free(k) => (FREE, k.0, 0),
            State::Leased(k, owner) => (LEASED, k.0, owner),
            State::Moving(k) => (MOVING, k.0, 0),
        };
        debug_assert!(owner <= OWNER_MASK);
        (kind << 62) | (u64::from(order) << 56) | owner
    }

    fn of(word: u64) -> State {
        let order = Order(((word >> 56) & 0x3f) as u8);
        match word >> 62 {
            TAIL => State::Tail,
            FREE => State::Free(order),
            LEASED => State::Leased(order, word & OWNER_MASK),
            _ => State::Moving(order),
        }
    }
}

fn in_flight_word(frame: u32, order: Order) -> u64 {
    (1 << 63) | (u64::from(order.0) << 32) | u64::from(frame)
}

fn op(code: u64, order: Order) -> u64 {
    code | (u64::from(order.0) << 8)
}

/// What `check` found: the free frames, each allocated block with its lessee, and each
/// block handed to the cache.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Census {
    pub(crate) free_frames: u32,
    pub(crate) leased: Vec<(Frame, Order, Holder)>,
    pub(crate) cached: Vec<(Frame, Order)>,
    /// The frames holding index nodes, with their tree (the `Word` of its lock line).
    pub(crate) nodes: Vec<(Frame, Word)>,
}

/// A buddy allocator of `frames` frames at `base` of a region (module docs).
#[derive(Clone, Debug)]
pub(crate) struct SharedBuddy<'r> {
    region: &'r [AtomicU64],
    lock: HolderLock<'r>,
    base: Word,
    frames: u32,
}

impl<'r> SharedBuddy<'r> {
    /// The words an allocator of `frames` takes.
    pub(crate) fn words(frames: u32) -> u32 {
        FRAMES_AT + 3 * frames
    }

    /// A view of the allocator at `base` (8-word aligned), as `format` left it.
    pub(crate) fn new(region: &'r [AtomicU64], base: Word, frames: u32) -> SharedBuddy<'r> {
        assert!(frames < u32::MAX, "too many frames");
        assert!(
            base.index() + Self::words(frames) as usize <= region.len(),
            "the allocator lies past the region"
        );
        SharedBuddy {
            region,
            lock: HolderLock::new(region, base),
            base,
            frames,
        }
    }

    /// Every frame free and virgin (module docs, "Frames never reached"): the lists
    /// empty, `FRONTIER` 0, the lock free. Touches no frame's words: they are 0 already
    /// (a new region file reads as zeros), which is what a virgin frame's words are.
    ///
    /// Context: the region's maker, before any other process sees it, on a zeroed region.
    pub(crate) fn format(&self) {
        for offset in 0..FRAMES_AT {
            let value = if (HEADS..FRONTIER).contains(&offset) {
                NIL
            } else {
                0
            };
            self.word(offset).store(value, Ordering::Relaxed);
        }
        self.word(IN_FLIGHT).store(0, Ordering::Release);
    }

    /// The order of the virgin block at `frame` (module docs): the largest aligned block
    /// that fits in the area, at most `ORDER_MAX`.
    fn fresh_order(&self, frame: u32) -> Order {
        let mut k = ORDER_MAX;
        while frame % (1 << k) != 0 || u64::from(frame) + (1u64 << k) > u64::from(self.frames) {
            k -= 1;
        }
        Order(k)
    }

    /// The first frame never reached (module docs): every frame from it on is virgin.
    /// Read without the lock: it only grows, so a scan bounded by it may miss only frames
    /// reached after the load (exact under the lock).
    pub(crate) fn reached(&self) -> u32 {
        let frontier = self.word(FRONTIER).load(Ordering::Acquire);
        u32::try_from(frontier).map_or(self.frames, |f| f.min(self.frames))
    }

    fn word(&self, offset: u32) -> &AtomicU64 {
        &self.region[self.base.at(offset).index()]
    }

    fn head(&self, order: Order) -> &AtomicU64 {
        assert!(order.0 <= ORDER_MAX, "no order {}", order.0);
        self.word(HEADS + u32::from(order.0))
    }

    fn next(&self, frame: u32) -> &AtomicU64 {
        assert!(frame < self.frames, "no frame {frame}");
        self.word(FRAMES_AT + frame)
    }

    fn prev(&self, frame: u32) -> &AtomicU64 {
        assert!(frame < self.frames, "no frame {frame}");
        self.word(FRAMES_AT + self.frames + frame)
    }

    fn state(&self, frame: u32) -> &AtomicU64 {
        assert!(frame < self.frames, "no frame {frame}");
        self.word(FRAMES_AT + 2 * self.frames + frame)
    }

    fn state_of(&self, frame: u32) -> State {
        State::of(self.state(frame).load(Ordering::Acquire))
    }

    /// Who holds the allocator's lock, as its word is (`SharedQueue::locked_by`).
    pub(crate) fn lock_holder(&self) -> Option<Holder> {
        self.lock.holder()
    }

    /// How many frames the allocator has.
    pub(crate) fn frames(&self) -> u32 {
        self.frames
    }

    /// The lock (diagnostics, tests).
    pub(crate) fn lock_line(&self) -> &HolderLock<'r> {
        &self.lock
    }

    /// The stores of a primitive, in order (module docs), each through `store`: the
    /// holder's (a step after each) or a redo's.
    fn apply(
        &self,
        intent: &Intent,
        mut store: impl FnMut(&AtomicU64, u64) -> Result<(), Died>,
    ) -> Result<(), Died> {
        let code = intent.op & 0xff;
        let order = Order(((intent.op >> 8) & 0xff) as u8);
        let [b, x, y, z] = intent.args;
        let b = frame_of(b);
        match code {
            TAKE => {
                // x: next[b].
                store(self.head(order), x)?;
                if x != NIL {
                    store(self.prev(frame_of(x)), NIL)?;
                }
                store(self.state(b), State::Moving(order).word())?;
                store(self.word(IN_FLIGHT), in_flight_word(b, order))
            }
            SPLIT => {
                // x: the old head of list order - 1.
                let lower = Order(order.0 - 1);
                let high = b + lower.frames();
                self.list_stores(high, lower, x, &mut store)?;
                store(self.state(b), State::Moving(lower).word())?;
                store(self.word(IN_FLIGHT), in_flight_word(b, lower))
            }
            ASSIGN => {
                // x: the lessee.
                store(self.state(b), State::Leased(order, x).word())?;
                store(self.word(IN_FLIGHT), 0)
            }
            CARVE => {
                // x: the lessee.
                for f in b..b + order.frames() {
                    store(self.state(f), State::Leased(Order(0), x).word())?;
                }
                store(self.word(IN_FLIGHT), 0)
            }
            RELEASE => {
                store(self.state(b), State::Moving(order).word())?;
                store(self.word(IN_FLIGHT), in_flight_word(b, order))
            }
            MERGE => {
                // b: the buddy unlinked, x: its prev, y: its next, z: the block in flight.
                let moving = frame_of(z);
                if x == NIL {
                    store(self.head(order), y)?;
                } else {
                    store(self.next(frame_of(x)), y)?;
                }
                if y != NIL {
                    store(self.prev(frame_of(y)), x)?;
                }
                let (low, high) = (b.min(moving), b.max(moving));
                let upper = Order(order.0 + 1);
                store(self.state(high), State::Tail.word())?;
                store(self.state(low), State::Moving(upper).word())?;
                store(self.word(IN_FLIGHT), in_flight_word(low, upper))
            }
            LIST => {
                // x: the old head of list order.
                self.list_stores(b, order, x, &mut store)?;
                store(self.word(IN_FLIGHT), 0)
            }
            FRESH => {
                // b: the frontier's block, x: the frontier past it.
                store(self.word(FRONTIER), x)?;
                store(self.state(b), State::Moving(order).word())?;
                store(self.word(IN_FLIGHT), in_flight_word(b, order))
            }
            code => panic!("an intent with an unknown operation {code}"),
        }
    }

    /// The stores that list `frame` first on list `order` as FREE, `head` the list's old
    /// head.
    fn list_stores(
        &self,
        frame: u32,
        order: Order,
        head: u64,
        store: &mut impl FnMut(&AtomicU64, u64) -> Result<(), Died>,
    ) -> Result<(), Died> {
        store(self.next(frame), head)?;
        store(self.prev(frame), NIL)?;
        store(self.state(frame), State::Free(order).word())?;
        if head != NIL {
            store(self.prev(frame_of(head)), u64::from(frame))?;
        }
        store(self.head(order), u64::from(frame))
    }

    /// A dead holder's last primitive finished (lock.rs's T2).
    fn redo(&self, intent: &Intent) {
        let redone = self.apply(intent, |word, value| {
            word.store(value, Ordering::Release);
            Ok(())
        });
        assert_eq!(redone, Ok(()));
    }

    /// One primitive made by the holder of `held` (M1-M3); under
    /// `Flaw::IntentAfterMutation`, its stores are made before its intent is published.
    fn change<R: Run>(&self, held: &Held<'_, '_>, intent: &Intent, run: &R) -> Result<(), Died> {
        held.change(intent, run, |store| self.apply(intent, store))
    }

    /// Takes the lock (over from a dead holder: its last primitive redone), then frees
    /// the block in flight, if any (module docs, "Take-over").
    fn take<R: Run>(
        &self,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Held<'_, 'r>, Died> {
        let held = self.lock.lock(me, slots, run, |intent| self.redo(intent))?;
        let moving = self.word(IN_FLIGHT).load(Ordering::Acquire);
        if moving != 0 && !matches!(flaw_kind(run.flaw()), Broken::InFlightForgotten) {
            let frame = frame_of(moving & 0xffff_ffff);
            let order = Order(((moving >> 32) & 0xff) as u8);
            assert_eq!(
                self.state_of(frame),
                State::Moving(order),
                "the block in flight is not moving"
            );
            self.merge_and_list(&held, frame, order, run)?;
        }
        Ok(held)
    }

    /// F2 and F3 for the block in flight (b, k).
    fn merge_and_list<R: Run>(
        &self,
        held: &Held<'_, '_>,
        mut frame: u32,
        mut order: Order,
        run: &R,
    ) -> Result<(), Died> {
        while order.0 < ORDER_MAX {
            let buddy = frame ^ order.frames();
            if buddy >= self.frames || self.state_of(buddy) != State::Free(order) {
                break;
            }
            let prev = self.prev(buddy).load(Ordering::Relaxed);
            let next = self.next(buddy).load(Ordering::Relaxed);
            let intent = Intent {
                op: op(MERGE, order),
                args: [u64::from(buddy), prev, next, u64::from(frame)],
            };
            self.change(held, &intent, run)?;
            frame = frame.min(buddy);
            order = Order(order.0 + 1);
        }
        let head = self.head(order).load(Ordering::Relaxed);
        let intent = Intent {
            op: op(LIST, order),
            args: [u64::from(frame), head, 0, 0],
        };
        self.change(held, &intent, run)
    }

    /// A1-A2: a block of `order` taken off the lists (or, under `Reach::OrFresh`, when
    /// no list holds one that large, the frontier's next block: A1') and split down, left
    /// in flight; or `None` if there is none.
    fn take_block<R: Run>(
        &self,
        held: &Held<'_, '_>,
        order: Order,
        reach: Reach,
        run: &R,
    ) -> Result<Option<u32>, Died> {
        let (frame, mut j) = loop {
            if let Some(j) = (order.0..=ORDER_MAX)
                .map(Order)
                .find(|j| self.head(*j).load(Ordering::Relaxed) != NIL)
            {
                let frame = frame_of(self.head(j).load(Ordering::Relaxed));
                assert_eq!(
                    self.state_of(frame),
                    State::Free(j),
                    "a listed block {frame} is not free at its order"
                );
                let next = self.next(frame).load(Ordering::Relaxed);
                let intent = Intent {
                    op: op(TAKE, j),
                    args: [u64::from(frame), next, 0, 0],
                };
                self.change(held, &intent, run)?;
                break (frame, j);
            }
            if reach == Reach::ListedOnly {
                return Ok(None);
            }
            let frontier = self.reached();
            if frontier >= self.frames {
                return Ok(None);
            }
            let j = self.fresh_order(frontier);
            let intent = Intent {
                op: op(FRESH, j),
                args: [u64::from(frontier), u64::from(frontier + j.frames()), 0, 0],
            };
            self.change(held, &intent, run)?;
            if j >= order {
                break (frontier, j);
            }
            // The area's shorter last chunk: a block too small for this allocation,
            // listed (F3; it has no free buddy: module docs), and the lists looked at again.
            self.merge_and_list(held, frontier, j, run)?;
        };
        while j > order {
            let head = self.head(Order(j.0 - 1)).load(Ordering::Relaxed);
            let intent = Intent {
                op: op(SPLIT, j),
                args: [u64::from(frame), head, 0, 0],
            };
            self.change(held, &intent, run)?;
            j = Order(j.0 - 1);
        }
        Ok(Some(frame))
    }

    /// Allocates a block of `order` leased to `me`: its first frame, or `None` if no
    /// free block is that large.
    ///
    /// Context: `me` is LIVE in `slots`; takes the lock (spins while a live holder holds
    /// it).
    pub(crate) fn alloc<R: Run>(
        &self,
        order: Order,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Option<Frame>, Died> {
        assert!(order.0 <= ORDER_MAX, "no order {}", order.0);
        let held = self.take(me, slots, run)?;
        let got = self.take_block(&held, order, Reach::OrFresh, run)?;
        if let Some(frame) = got {
            let intent = Intent {
                op: op(ASSIGN, order),
                args: [u64::from(frame), me.word(), 0, 0],
            };
            self.change(&held, &intent, run)?;
        }
        held.unlock(run)?;
        lessee_fence(run);
        Ok(got.map(Frame))
    }

    /// Frees the block of `order` at `frame`, leased to `me`.
    ///
    /// Context: as `alloc`; the block is `me`'s (asserted).
    pub(crate) fn free<R: Run>(
        &self,
        frame: Frame,
        order: Order,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        let held = self.take(me, slots, run)?;
        self.free_locked(&held, frame.0, order, me.word(), run)?;
        held.unlock(run)
    }

    /// F1-F3 for a block leased to `owner`.
    fn free_locked<R: Run>(
        &self,
        held: &Held<'_, '_>,
        frame: u32,
        order: Order,
        owner: u64,
        run: &R,
    ) -> Result<(), Died> {
        assert_eq!(
            self.state_of(frame),
            State::Leased(order, owner),
            "a free of block {frame} of order {} that {owner:#x} does not lease",
            order.0,
        );
        let intent = Intent {
            op: op(RELEASE, order),
            args: [u64::from(frame), 0, 0, 0],
        };
        self.change(held, &intent, run)?;
        self.merge_and_list(held, frame, order, run)
    }

    /// Leases up to `want` order-0 frames to `me` in one hold of the lock, appended to
    /// `into`: a block of 2^k frames (the largest k with 2^k <= `want` that is free)
    /// carved into frames (A1, A2, CARVE), then frame by frame. Returns how many.
    ///
    /// Context: as `alloc`; `into` has room for `want` more (no allocation here).
    pub(crate) fn lease_batch<R: Run>(
        &self,
        want: u32,
        me: Holder,
        into: &mut Vec<Frame>,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<u32, Died> {
        let held = self.take(me, slots, run)?;
        let mut got = 0;
        'batch: while got < want {
            let left = want - got;
            let top = Order((31 - left.leading_zeros()).min(u32::from(ORDER_MAX)) as u8);
            // The listed blocks first, of any order (frames freed before are used again
            // before the frontier moves: module docs), then the frontier's.
            for reach in [Reach::ListedOnly, Reach::OrFresh] {
                for k in (0..=top.0).rev() {
                    let order = Order(k);
                    if let Some(frame) = self.take_block(&held, order, reach, run)? {
                        let intent = Intent {
                            op: op(CARVE, order),
                            args: [u64::from(frame), me.word(), 0, 0],
                        };
                        self.change(&held, &intent, run)?;
                        into.extend((frame..frame + order.frames()).map(Frame));
                        got += order.frames();
                        continue 'batch;
                    }
                }
            }
            break;
        }
        held.unlock(run)?;
        lessee_fence(run);
        Ok(got)
    }

    /// The steward's give-back while members are attached (steward.rs, "The quota"), its
    /// three steps:
    ///
    /// - G1. Lease to `me` every listed free block (`Reach::ListedOnly`: never the frontier's
    ///   virgin frames, which a member may FRESH meanwhile), up to `most` frames, in holds of
    ///   the lock of at most `ORDER_MAX`'s frames, carved into frames appended to `leased`.
    /// - G2. Call `punch` with each run of consecutive leased frames, with no lock held: its
    ///   memory is given back (`Domain::punch_data`). A frame leased to `me` is in no
    ///   member's magazine, read or index, and no member can lease it, so no page is punched
    ///   under a member's `pread`, copy or pin.
    /// - G3. Return them (`return_batch`, merging), then clear `leased`.
    ///
    /// A death anywhere leaves the frames leased to `me`: the next steward's census finds
    /// this one dead and its sweep (`sweep`) returns them, punched or not. Returns how many
    /// frames were leased (and so punched).
    ///
    /// Context: `me` is LIVE in `slots` (the steward); takes the lock a few times;
    /// `leased` is the caller's room (allocated by it, reused).
    pub(crate) fn give_back_listed<R: Run>(
        &self,
        most: u32,
        me: Holder,
        leased: &mut Vec<Frame>,
        slots: &SlotTable<'_>,
        run: &R,
        mut punch: impl FnMut(std::ops::Range<u32>),
    ) -> Result<u32, Died> {
        leased.clear();
        #[cfg(test)]
        if matches!(run.flaw(), Flaw::PunchUnleased) {
            // Broken (the loom model's variant): what looks free, punched unleased.
            for block in self.free_blocks() {
                if block.end <= self.reached() {
                    punch(block);
                }
            }
            return Ok(0);
        }
        // G1.
        while (leased.len() as u32) < most {
            let held = self.take(me, slots, run)?;
            let want = (most - leased.len() as u32).min(Order(ORDER_MAX).frames());
            let top = Order((31 - want.leading_zeros()) as u8);
            let mut got = None;
            for k in (0..=top.0).rev() {
                if let Some(frame) = self.take_block(&held, Order(k), Reach::ListedOnly, run)? {
                    got = Some((frame, Order(k)));
                    break;
                }
            }
            if let Some((frame, order)) = got {
                let intent = Intent {
                    op: op(CARVE, order),
                    args: [u64::from(frame), me.word(), 0, 0],
                };
                self.change(&held, &intent, run)?;
                leased.extend((frame..frame + order.frames()).map(Frame));
            }
            held.unlock(run)?;
            if got.is_none() {
                break;
            }
        }
        // G2: the runs in frame order (each block's frames are ascending).
        leased.sort_unstable_by_key(|f| f.0);
        let mut run_of: Option<std::ops::Range<u32>> = None;
        for frame in leased.iter() {
            run_of = match run_of {
                Some(r) if r.end == frame.0 => Some(r.start..frame.0 + 1),
                Some(r) => {
                    punch(r);
                    Some(frame.0..frame.0 + 1)
                }
                None => Some(frame.0..frame.0 + 1),
            };
        }
        if let Some(r) = run_of {
            punch(r);
        }
        // G3.
        let count = leased.len() as u32;
        if count > 0 {
            self.return_batch(leased, me, slots, run)?;
        }
        leased.clear();
        Ok(count)
    }

    /// Frees the order-0 `frames`, each leased to `me`, in one hold of the lock.
    ///
    /// Context: as `free`.
    pub(crate) fn return_batch<R: Run>(
        &self,
        frames: &[Frame],
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        let held = self.take(me, slots, run)?;
        for frame in frames {
            self.free_locked(&held, frame.0, Order(0), me.word(), run)?;
        }
        held.unlock(run)
    }

    /// Whether `frame` heads a block of `order` leased to `holder` (a lessee's look at
    /// its own block: no one else changes it while the lessee lives).
    pub(crate) fn is_leased(&self, frame: Frame, order: Order, holder: Holder) -> bool {
        self.state_of(frame.0) == State::Leased(order, holder.word())
    }

    /// Whether `frame` heads a block of `order` handed to the cache (CACHED).
    ///
    /// Context: any; exact under the queue's lock (only its holder changes a CACHED word).
    pub(crate) fn is_cached(&self, frame: Frame, order: Order) -> bool {
        frame.0 < self.frames && self.state_of(frame.0) == State::Leased(order, CACHE)
    }

    /// The hand-over's store (module docs): the state word of `frame` and the CACHED(order)
    /// value the queue's ADD stores in it, as one of its intent's stores.
    ///
    /// Context: the caller, `me`, leases the block (asserted) or redoes a dead lessee's ADD
    /// (then the block is LEASED to a dead holder or already CACHED, and the steward has
    /// not swept the lessee yet: queue.rs's sweep comes first).
    pub(crate) fn hand_over_store(&self, frame: Frame, order: Order) -> (&AtomicU64, u64) {
        (self.state(frame.0), State::Leased(order, CACHE).word())
    }

    /// The adoption's store (module docs): the state word of the order-0 `frame` and the
    /// NODES(`tree`) value a shared index's ADOPT stores in it, as one of its intent's
    /// stores.
    ///
    /// Context: the caller leases the frame, or redoes a dead lessee's ADOPT (as
    /// `hand_over_store`: the steward recovers the tree before it sweeps this allocator).
    pub(crate) fn nodes_store(&self, frame: Frame, tree: Word) -> (&AtomicU64, u64) {
        (
            self.state(frame.0),
            State::Leased(Order(0), nodes_owner(tree)).word(),
        )
    }

    /// Whether `frame` is one of `tree`'s node frames.
    ///
    /// Context: any; exact under the tree's lock (only its holder adopts or frees one).
    pub(crate) fn is_nodes_of(&self, frame: Frame, tree: Word) -> bool {
        frame.0 < self.frames
            && self.state_of(frame.0) == State::Leased(Order(0), nodes_owner(tree))
    }

    /// Every node frame of `tree` (a scan of every frame's state word: checks, tests).
    pub(crate) fn nodes_of(&self, tree: Word) -> Vec<Frame> {
        let owner = State::Leased(Order(0), nodes_owner(tree)).word();
        (0..self.reached())
            .filter(|f| self.state(*f).load(Ordering::Acquire) == owner)
            .map(Frame)
            .collect()
    }

    /// Frees `tree`'s node frame `frame` if it is still the tree's once the lock is held
    /// (a dead holder's free of it is finished by the take-over): whether this call freed
    /// it. Harmless to repeat: a frame freed and leased again is no longer the tree's.
    ///
    /// Context: `me` is LIVE in `slots`; the caller holds the tree's lock (the lock order:
    /// tree, then this allocator), so nobody adopts the frame for it meanwhile.
    pub(crate) fn free_nodes<R: Run>(
        &self,
        frame: Frame,
        tree: Word,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<bool, Died> {
        self.free_if_owned(frame, Order(0), nodes_owner(tree), me, slots, run)
    }

    /// Frees the block of `order` at `frame` if, once the lock is held, it is still LEASED
    /// to the structure word `owner` (the cache's, a tree's): `free_cached`'s and
    /// `free_nodes`' one step. Whether this call freed it.
    fn free_if_owned<R: Run>(
        &self,
        frame: Frame,
        order: Order,
        owner: u64,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<bool, Died> {
        let held = self.take(me, slots, run)?;
        let owned = frame.0 < self.frames && self.state_of(frame.0) == State::Leased(order, owner);
        if owned {
            self.free_locked(&held, frame.0, order, owner, run)?;
        }
        held.unlock(run)?;
        Ok(owned)
    }

    /// Whether `region` is the one this allocator lies in (a tree's nodes must be).
    pub(crate) fn lies_in(&self, region: &[AtomicU64]) -> bool {
        std::ptr::eq(self.region, region)
    }

    /// Frees the CACHED block of `order` at `frame` (reclaim's last step: it is in no
    /// index and no queue), if it is still CACHED once the lock is held: a dead holder's
    /// free of it (a reclaimer that died inside this call) is finished by the take-over,
    /// which leaves it free. Whether this call freed it.
    ///
    /// Context: `me` is LIVE in `slots`; the caller holds the queue's lock (the lock
    /// order: queue, then this allocator), so nobody hands the frame over again meanwhile.
    pub(crate) fn free_cached<R: Run>(
        &self,
        frame: Frame,
        order: Order,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<bool, Died> {
        self.free_if_owned(frame, order, CACHE, me, slots, run)
    }

    /// A hint, read without the lock: whether a whole free block of `ORDER_MAX` starts at
    /// `frame` (a chunk the allocator has not begun: populate.rs). Racy: the answer may be
    /// stale by the time it is returned.
    pub(crate) fn seems_whole(&self, frame: Frame) -> bool {
        frame.0 < self.frames
            && State::of(self.state(frame.0).load(Ordering::Relaxed))
                == State::Free(Order(ORDER_MAX))
    }

    /// A hint, read without the lock: the first blocks on the free list of `order`, at
    /// most `most`, in the order the allocator takes them (`take_block` takes a list's
    /// first block). Racy: a walk that meets a list being changed may return blocks no
    /// longer free or stop early; every frame returned is one of this allocator's
    /// (bounded). For the populator (populate.rs), to which a wrong answer costs only work.
    pub(crate) fn listed_first(&self, order: Order, most: usize) -> Vec<Frame> {
        let mut found = Vec::with_capacity(most);
        let mut at = self.head(order).load(Ordering::Relaxed);
        while found.len() < most {
            let Some(frame) = u32::try_from(at).ok().filter(|&f| f < self.frames) else {
                break; // NIL, or a word read mid-change
            };
            found.push(Frame(frame));
            at = self.next(frame).load(Ordering::Relaxed);
        }
        found
    }

    /// The free blocks, in frame order, read without the lock, and last the virgin
    /// frames (from `FRONTIER` on, if any: the lead the steward populated there): what the
    /// steward gives back when nobody is attached (steward.rs, "Alone").
    ///
    /// Context: a quiet allocator (the steward alone in its domain: nobody else leases or
    /// frees); on a busy one the answer may be stale.
    pub(crate) fn free_blocks(&self) -> Vec<std::ops::Range<u32>> {
        let mut blocks = Vec::new();
        let reached = self.reached();
        let mut f = 0;
        while f < reached {
            let (order, free) = match self.state_of(f) {
                State::Free(order) => (order, true),
                State::Leased(order, _) => (order, false),
                State::Tail | State::Moving(_) => (Order(0), false),
            };
            let end = f
                .saturating_add(Order(order.0.min(ORDER_MAX)).frames())
                .min(self.frames);
            if free {
                blocks.push(f..end);
            }
            f = end;
        }
        if reached < self.frames {
            blocks.push(reached..self.frames);
        }
        blocks
    }

    /// The steward's sweep of a dead process: takes the lock (over from `dead`, if it
    /// held it, finishing its change) and frees every block leased to `dead`, merging.
    /// Returns how many frames it freed.
    ///
    /// Context: the steward (`me`), after `SlotTable::mark_dead(dead)`, before
    /// `free_dead(dead)`. Scans every reached frame's state word (under the lock: exact).
    pub(crate) fn sweep<R: Run>(
        &self,
        dead: Holder,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<u32, Died> {
        assert!(!slots.is_live(dead), "a sweep of a live process {dead:?}");
        let held = self.take(me, slots, run)?;
        let dead_word = dead.word();
        let mut freed = 0;
        let reached = self.reached();
        let mut f = 0;
        while f < reached {
            let word = self.state(f).load(Ordering::Relaxed);
            if word & OWNER_MASK == dead_word {
                if let State::Leased(order, _) = State::of(word) {
                    self.free_locked(&held, f, order, dead_word, run)?;
                    freed += order.frames();
                    f += order.frames();
                    continue;
                }
            }
            f += 1;
        }
        held.unlock(run)?;
        Ok(freed)
    }

    /// The invariant (module docs), checked on a quiet allocator: no lock held, nothing
    /// in flight; every frame in exactly one block, free blocks on the list of their
    /// order and merged with their buddies, every allocated block's lessee alive.
    ///
    /// Context: nobody changes the allocator meanwhile (a test, or the steward alone).
    pub(crate) fn check(&self, slots: &SlotTable<'_>) -> Result<Census, String> {
        if let Some(holder) = self.lock.holder() {
            return Err(format!("the lock is held by {holder:?}"));
        }
        if self.lock.intent_published() {
            return Err("an intent is published".into());
        }
        let moving = self.word(IN_FLIGHT).load(Ordering::Acquire);
        if moving != 0 {
            return Err(format!("a block is in flight: {moving:#x}"));
        }
        let mut listed = std::collections::HashMap::new();
        for k in 0..=ORDER_MAX {
            let order = Order(k);
            let mut prev = NIL;
            let mut at = self.head(order).load(Ordering::Acquire);
            while at != NIL {
                let frame = u32::try_from(at).ok().filter(|f| *f < self.frames);
                let Some(frame) = frame else {
                    return Err(format!("list {k} names frame {at}"));
                };
                if listed.insert(frame, order).is_some() {
                    return Err(format!("block {frame} is listed twice"));
                }
                if self.prev(frame).load(Ordering::Relaxed) != prev {
                    return Err(format!("block {frame}'s prev is not {prev}"));
                }
                prev = at;
                at = self.next(frame).load(Ordering::Relaxed);
            }
        }
        let frontier = self.word(FRONTIER).load(Ordering::Acquire);
        let reached = u32::try_from(frontier)
            .ok()
            .filter(|&r| r <= self.frames)
            .ok_or_else(|| format!("the frontier is {frontier}"))?;
        let mut boundary = 0;
        while boundary < reached {
            boundary += self.fresh_order(boundary).frames();
        }
        if boundary != reached {
            return Err(format!(
                "the frontier {reached} is not a fresh block's head"
            ));
        }
        for f in reached..self.frames {
            let words = [self.next(f), self.prev(f), self.state(f)];
            if words.iter().any(|w| w.load(Ordering::Relaxed) != 0) {
                return Err(format!("virgin frame {f} has a word set"));
            }
        }
        // Every virgin frame is free (on no list: module docs).
        let mut free_frames = self.frames - reached;
        let mut leased = Vec::new();
        let mut cached = Vec::new();
        let mut nodes = Vec::new();
        let mut f = 0;
        while f < reached {
            let (order, state) = match self.state_of(f) {
                State::Free(order) => {
                    if listed.remove(&f) != Some(order) {
                        return Err(format!(
                            "free block {f} of order {} not on its list",
                            order.0
                        ));
                    }
                    free_frames += order.frames();
                    (order, State::Free(order))
                }
                State::Leased(order, CACHE) => {
                    cached.push((Frame(f), order));
                    (order, State::Leased(order, CACHE))
                }
                State::Leased(Order(0), owner) if owner < 1 << 32 && owner & 7 == NODES => {
                    nodes.push((Frame(f), Word((owner & !7) as u32)));
                    (Order(0), State::Leased(Order(0), owner))
                }
                State::Leased(order, owner) => {
                    if owner < 1 << 32 || !slots.is_live(Holder::from_word(owner)) {
                        return Err(format!("block {f} is leased to a dead holder {owner:#x}"));
                    }
                    leased.push((Frame(f), order, Holder::from_word(owner)));
                    (order, State::Leased(order, owner))
                }
                state => return Err(format!("frame {f} is in no block: {state:?}: lost")),
            };
            if order.0 > ORDER_MAX
                || f % order.frames() != 0
                || u64::from(f) + u64::from(order.frames()) > u64::from(reached)
            {
                return Err(format!("block {f} of order {} is misplaced", order.0));
            }
            for tail in f + 1..f + order.frames() {
                if self.state_of(tail) != State::Tail {
                    return Err(format!("frame {tail} inside block {f} is not a tail"));
                }
            }
            if let State::Free(order) = state {
                let buddy = f ^ order.frames();
                if order.0 < ORDER_MAX
                    && buddy < self.frames
                    && self.state_of(buddy) == State::Free(order)
                {
                    return Err(format!(
                        "free buddies {f} and {buddy} of order {} unmerged",
                        order.0
                    ));
                }
            }
            f += order.frames();
        }
        if let Some((frame, _)) = listed.iter().next() {
            return Err(format!("listed block {frame} is not a free block's head"));
        }
        Ok(Census {
            free_frames,
            leased,
            cached,
            nodes,
        })
    }
}

fn frame_of(word: u64) -> u32 {
    u32::try_from(word).expect("a word names a frame")
}

/// The flaws this allocator knows how to break itself with.
enum Broken {
    None,
    IntentAfter,
    InFlightForgotten,
}

fn flaw_kind(flaw: Flaw) -> Broken {
    match flaw {
        #[cfg(test)]
        Flaw::IntentAfterMutation => Broken::IntentAfter,
        #[cfg(test)]
        Flaw::InFlightForgotten => Broken::InFlightForgotten,
        _ => Broken::None,
    }
}

/// The lessee's release fence after a lease, before it writes the frames (the writer's
/// side of the optimistic hit's seqlock, queue.rs "The optimistic hit"): an optimistic
/// reader whose byte-wise load reads one of the lessee's writes and then fences (acquire)
/// synchronizes with it, so it sees the reuse generation that reclaim raised before the
/// free this lease's lock acquire read. Free on x86-64 (no instruction). A broken variant
/// (`Flaw::NoLesseeFence`) leaves it out.
fn lessee_fence<R: Run>(run: &R) {
    match run.flaw() {
        #[cfg(test)]
        Flaw::NoLesseeFence => {}
        _ => fence(Ordering::Release),
    }
}

#[cfg(test)]
mod tests {
    use super::super::domain::{FRAMES_MAX, SLOTS_MAX};
    use super::super::SlotIndex;
    use super::*;

    /// The state word and the block in flight keep the largest domain's frames and
    /// owners (domain.rs, `FRAMES_MAX`, `SLOTS_MAX`): a frame in the low 32 bits of
    /// IN_FLIGHT, a lessee's `Holder::word` (slot + 1 << 32 | generation) below 2^56.
    #[test]
    fn a_blocks_words_keep_the_largest_domains_frames_and_owners() {
        let holder = Holder {
            slot: SlotIndex(SLOTS_MAX - 1),
            generation: u32::MAX,
        };
        for order in [Order(0), Order(ORDER_MAX)] {
            for owner in [holder.word(), CACHE, nodes_owner(Word(u32::MAX - 7))] {
                let state = State::Leased(order, owner);
                assert_eq!(State::of(state.word()), state);
            }
            for state in [State::Free(order), State::Moving(order)] {
                assert_eq!(State::of(state.word()), state);
            }
            for frame in [(1 << 20) + 512, FRAMES_MAX - order.frames()] {
                let moving = in_flight_word(frame, order);
                assert_eq!(frame_of(moving & 0xffff_ffff), frame);
                assert_eq!(Order(((moving >> 32) & 0xff) as u8), order);
            }
        }
    }
}
