//! A folio's dirty blocks (DESIGN.md §8): which 4 KiB blocks of a folio are newer than
//! the file, so that writeback writes only the blocks a writer touched.
//!
//! A large folio tracks dirtiness per 4 KiB block, so that writeback writes only the blocks
//! a writer touched (a 4 KiB overwrite of a 2 MiB folio writes 4 KiB, not 2 MiB). The bits
//! live in the `place` words of the folio's first tail frames (`FolioMeta::tail_mask_word`,
//! 64 blocks a word, 8 words for 2 MiB): a large folio uses only its head's metadata, so no
//! memory is allocated for the mask. An order-0 folio has no tail: its one block is dirty
//! exactly when the folio is DIRTY.
//!
//! Who touches the words:
//! - W4, the writer, holding the folio LOCKED for its copy: if the folio was not DIRTY the
//!   words are stale (whatever the tail frames held before) and are zeroed first; then the
//!   written blocks are set (`BlockMask::mark`).
//! - B2, writeback, right after its CAS DIRTY -> WRITEBACK (`try_start_writeback`, which
//!   a writer's LOCKED refuses, and which makes writers wait): takes the bits and zeroes the
//!   words (`take`).
//! - B3, a failed writeback's completion, before it clears WRITEBACK: puts the bits back
//!   (`restore`); writers are still waiting for WRITEBACK to end.
//! - Truncation (the mapping's writer lock held, writeback waited for): reads them.
//!
//! These exclude each other through the state word, so the words need no lock; they are
//! atomics only because the tail frames' metadata is shared memory. They are named through
//! `primitive` (`MaskWord`), so the loom models of the write side (`tests/loom_models.rs`:
//! `write_vs_writeback_*`, `dirty_folio_vs_reclaim_*`, `truncation_vs_writeback_*`) run
//! this very code against the state word's protocol.
//!
//! Protection: the mask words by the state word's protocol (above). Limits: a folio has
//! at most 512 blocks (2 MiB).

use std::sync::atomic::Ordering;

use crate::arena::Arena;
use crate::refcount::StateWord;
use crate::types::{FrameId, Order};

/// Words of the largest folio's mask (512 blocks).
const MASK_WORDS: usize = 8;

/// One word of a block mask: std's `AtomicU64` (the tail frame's `place` word), loom's in
/// the loom models (module docs).
type MaskWord = crate::primitive::AtomicU64;

/// Blocks of the largest folio (2 MiB).
const BLOCKS_MAX: u64 = 64 * MASK_WORDS as u64;

/// `count` bits from bit `from` of a word (`from + count <= 64`).
fn word_bits(from: u64, count: u64) -> u64 {
    let ones = if count >= 64 {
        u64::MAX
    } else {
        (1u64 << count) - 1
    };
    ones << from
}

/// A set of a folio's 4 KiB blocks, by index within the folio.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Blocks {
    words: [u64; MASK_WORDS],
}

impl std::fmt::Debug for Blocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.runs()).finish()
    }
}

impl Blocks {
    /// Blocks `[first, first + count)` (clipped to the largest folio's 512).
    pub fn range(first: u64, count: u64) -> Blocks {
        let mut blocks = Blocks::default();
        let end = first.saturating_add(count).min(BLOCKS_MAX);
        for (i, word) in blocks.words.iter_mut().enumerate() {
            let (lo, hi) = (i as u64 * 64, i as u64 * 64 + 64);
            let (from, to) = (first.max(lo), end.min(hi));
            if from < to {
                *word = word_bits(from - lo, to - from);
            }
        }
        blocks
    }

    pub fn count(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    pub fn contains(&self, block: u64) -> bool {
        self.words[(block / 64) as usize] & (1 << (block % 64)) != 0
    }

    pub fn union(&self, other: &Blocks) -> Blocks {
        let mut out = *self;
        for (w, o) in out.words.iter_mut().zip(other.words) {
            *w |= o;
        }
        out
    }

    /// The blocks of `self` not in `other`.
    pub fn minus(&self, other: &Blocks) -> Blocks {
        let mut out = *self;
        for (w, o) in out.words.iter_mut().zip(other.words) {
            *w &= !o;
        }
        out
    }

    /// Only the blocks below `end`.
    pub fn below(&self, end: u64) -> Blocks {
        self.minus(&Blocks::range(end, BLOCKS_MAX.saturating_sub(end)))
    }

    /// The runs of consecutive blocks, as `(first, count)`, in order. A word at a time:
    /// a sync walks every dirty folio's blocks, most of them order-0 folios with one.
    pub fn runs(&self) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for (i, &word) in self.words.iter().enumerate() {
            let mut rest = word;
            while rest != 0 {
                let at = u64::from(rest.trailing_zeros());
                let len = u64::from((rest >> at).trailing_ones());
                let first = i as u64 * 64 + at;
                match runs.last_mut() {
                    Some((f, c)) if *f + *c == first => *c += len,
                    _ => runs.push((first, len)),
                }
                rest = if at + len >= 64 {
                    0
                } else {
                    rest & !(word_bits(at, len))
                };
            }
        }
        runs
    }
}

/// Whether a folio was dirty before a writer's change (then its mask words are valid).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prior {
    Clean,
    Dirty,
}

impl Prior {
    pub fn of(state: StateWord) -> Prior {
        if state.is_dirty() {
            Prior::Dirty
        } else {
            Prior::Clean
        }
    }
}

/// The dirty-block mask of one folio (module docs): a view, no storage of its own.
pub struct BlockMask<'a> {
    arena: &'a Arena,
    frame: FrameId,
    order: Order,
}

impl<'a> BlockMask<'a> {
    pub fn of(arena: &'a Arena, frame: FrameId, order: Order) -> BlockMask<'a> {
        BlockMask {
            arena,
            frame,
            order,
        }
    }

    fn words(&self) -> usize {
        (self.order.pages() as usize).div_ceil(64).min(MASK_WORDS)
    }

    fn word(&self, i: usize) -> &MaskWord {
        self.arena
            .meta(FrameId(self.frame.0 + 1 + i as u32))
            .tail_mask_word()
    }

    /// W4: marks `blocks` dirty; `prior` is whether the folio was dirty when the writer
    /// locked it. Returns how many of them were clean (the pages this write newly
    /// dirtied).
    ///
    /// Context: the caller holds the folio LOCKED for writing, or owns it new.
    pub fn mark(&self, blocks: &Blocks, prior: Prior) -> u64 {
        if self.order == Order::ZERO {
            return u64::from(prior == Prior::Clean && !blocks.is_empty());
        }
        let mut newly = 0;
        for i in 0..self.words() {
            let word = self.word(i);
            let old = if prior == Prior::Dirty {
                word.load(Ordering::Relaxed)
            } else {
                0
            };
            let new = old | blocks.words[i];
            newly += u64::from((new & !old).count_ones());
            word.store(new, Ordering::Relaxed);
        }
        newly
    }

    /// The dirty blocks now, without taking them. Context: the folio is DIRTY and its
    /// state cannot change under the caller (writer lock held, no writeback in flight).
    pub fn peek(&self) -> Blocks {
        if self.order == Order::ZERO {
            return Blocks::range(0, 1);
        }
        let mut blocks = Blocks::default();
        for i in 0..self.words() {
            blocks.words[i] = self.word(i).load(Ordering::Relaxed);
        }
        blocks
    }

    /// B2: takes the dirty blocks, leaving none. Context: the caller's CAS just moved the
    /// folio from DIRTY to WRITEBACK.
    pub fn take(&self) -> Blocks {
        if self.order == Order::ZERO {
            return Blocks::range(0, 1);
        }
        let mut blocks = Blocks::default();
        for i in 0..self.words() {
            blocks.words[i] = self.word(i).swap(0, Ordering::Relaxed);
        }
        blocks
    }

    /// B3: puts back blocks a failed write did not write. Context: the folio is still
    /// under WRITEBACK (writers wait), and `end_writeback(Redirty::Yes)` follows.
    pub fn restore(&self, blocks: &Blocks) {
        if self.order == Order::ZERO {
            return;
        }
        for i in 0..self.words() {
            self.word(i).fetch_or(blocks.words[i], Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_runs_and_set_operations() {
        let a = Blocks::range(3, 4).union(&Blocks::range(10, 1));
        assert_eq!(a.runs(), vec![(3, 4), (10, 1)]);
        assert_eq!(a.count(), 5);
        assert_eq!(
            a.minus(&Blocks::range(4, 2)).runs(),
            vec![(3, 1), (6, 1), (10, 1)]
        );
        assert_eq!(a.below(5).runs(), vec![(3, 2)]);
        let edge = Blocks::range(62, 4);
        assert_eq!(edge.runs(), vec![(62, 4)]);
        assert_eq!(Blocks::range(0, 512).count(), 512);
        assert!(Blocks::default().is_empty());
    }

    /// The word-at-a-time `range`, `below` and `runs` against a bit-by-bit reading, over
    /// every edge of the words and masks of every density.
    #[test]
    fn blocks_word_operations_match_a_bit_by_bit_reading() {
        let bits = |b: &Blocks| {
            (0..BLOCKS_MAX)
                .filter(|&i| b.contains(i))
                .collect::<Vec<_>>()
        };
        let edges = [
            0u64, 1, 2, 31, 62, 63, 64, 65, 127, 128, 300, 447, 448, 510, 511, 512,
        ];
        for &first in &edges {
            for &count in &edges {
                let want: Vec<u64> = (first..(first + count).min(BLOCKS_MAX)).collect();
                assert_eq!(
                    bits(&Blocks::range(first, count)),
                    want,
                    "range({first}, {count})"
                );
            }
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for density in [1u32, 2, 4, 16, 63, 64] {
            for _ in 0..64 {
                let mut blocks = Blocks::default();
                for word in blocks.words.iter_mut() {
                    for _ in 0..density {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        *word |= 1 << (seed % 64);
                    }
                }
                let mut want: Vec<(u64, u64)> = Vec::new();
                for b in bits(&blocks) {
                    match want.last_mut() {
                        Some((f, c)) if *f + *c == b => *c += 1,
                        _ => want.push((b, 1)),
                    }
                }
                assert_eq!(blocks.runs(), want);
                for &end in &edges {
                    let below: Vec<u64> = bits(&blocks).into_iter().filter(|&b| b < end).collect();
                    assert_eq!(bits(&blocks.below(end)), below, "below({end})");
                }
            }
        }
        assert_eq!(Blocks::range(0, 512).runs(), vec![(0, 512)]);
    }
}
