//! A handle's readahead state: its window in one atomic word (`RaCell`), replaced by
//! compare-and-swap, and the hints beside it (the previous read, the maximum window, the
//! stream epoch).
//!
//! # Concurrency (seed 002, Jan Kara's objection)
//!
//! Many threads share one handle. The window lives in ONE atomic word (`RaState` packed),
//! replaced by compare-and-swap: a thread computes its decision from the word it loaded,
//! and if the CAS fails another thread moved the window first, so it reloads and decides
//! again (bounded; after `CAS_TRIES_MAX` losses it gives up readahead, never writes stale
//! values). The word is checked on every update: it never holds an impossible window.
//! Model-checked in `tests/loom_models.rs` (`readahead_marker_race`, `readahead_miss_race`).
//! `prev_index` is a separate hint word: a torn interleaving of it only makes a read look
//! random or sequential, never corrupts the window. Hits do not write it (a store per hit
//! would bounce its cache line between every thread of the handle and stop two threads'
//! hits from scaling: 12 M against 39 M reads/s in `pread-scale`); a sequential reader
//! that misses after hits is recognised by the cached pages before the miss instead.
//!
//! The word holds `start` (36 bits), `size` (14), and in its last 14 bits either the sync
//! part of a window opened on a miss (`size - async_size`, tagged) or the `order` of a
//! window that is all async: a window opened on a miss always has order 0, one started at
//! a marker has no sync part, so neither needs both.
//!
//! Protection: the window word is replaced by CAS only; `prev_index`, the handle's maximum
//! and its stream epoch are single words (hints).
//!
//! Limits: what the word holds: windows of at most `WINDOW_PAGES_LIMIT` pages that start
//! below `START_PAGES_LIMIT` (`window`); `update` gives up after `CAS_TRIES_MAX` losses.

use super::window::{Decision, RaState, START_PAGES_LIMIT, WINDOW_PAGES_LIMIT};
use crate::primitive::{AtomicU32, AtomicU64, Ordering};
use crate::types::{PageIndex, ORDER_MAX};

/// Losses of the state CAS after which a thread gives up readahead for this read.
pub const CAS_TRIES_MAX: u32 = 4;

/// The packed start: a page below `START_PAGES_LIMIT`.
const START_BITS: u32 = START_PAGES_LIMIT.trailing_zeros();
const SIZE_BITS: u32 = 14;
/// The low field after `start` and `size`: a window opened on a miss stores its sync part
/// (`size - async_size`, 1..`WINDOW_PAGES_LIMIT`) under this tag; a window that is all
/// async stores its `order` (its sync part is 0, and its order is what the next window
/// aligns to).
const SYNC_TAG: u64 = 1 << (SIZE_BITS - 1);
const _: () = assert!(
    START_PAGES_LIMIT.is_power_of_two()
        && WINDOW_PAGES_LIMIT < 1 << SIZE_BITS
        && WINDOW_PAGES_LIMIT as u64 <= SYNC_TAG
        && (ORDER_MAX as u64) < SYNC_TAG
        && START_BITS + 2 * SIZE_BITS == 64
);

/// A window's place in the handle's word.
impl RaState {
    /// The word: `start`, `size`, then either the sync part under `SYNC_TAG` or the order
    /// (`is_possible` windows only: an empty state packs to 0).
    fn pack(self) -> u64 {
        let low = if self.async_size < self.size {
            SYNC_TAG | u64::from(self.size - self.async_size)
        } else {
            u64::from(self.order)
        };
        self.start | (u64::from(self.size) << START_BITS) | (low << (START_BITS + SIZE_BITS))
    }

    fn unpack(word: u64) -> RaState {
        let mask = (1u64 << SIZE_BITS) - 1;
        let size = ((word >> START_BITS) & mask) as u32;
        let low = (word >> (START_BITS + SIZE_BITS)) & mask;
        let (async_size, order) = if low & SYNC_TAG != 0 {
            let sync = (low & (SYNC_TAG - 1)) as u32;
            (size.saturating_sub(sync), 0)
        } else {
            (size, low as u8)
        };
        RaState {
            start: word & (START_PAGES_LIMIT - 1),
            size,
            async_size,
            order,
        }
    }
}

/// A handle's readahead state: the window word and the previous-read hint.
#[derive(Debug)]
pub struct RaCell {
    word: AtomicU64,
    /// The page after the last one read, plus one (0: nothing read yet).
    prev: AtomicU64,
    max_pages: AtomicU64,
    /// The last epoch of the cache's stream count this handle was counted in
    /// (`ReadaheadLimit::note_window`; `u32::MAX`: none, no epoch has that number).
    stream_epoch: AtomicU32,
}

impl RaCell {
    pub fn new(max_pages: u32) -> RaCell {
        RaCell {
            word: AtomicU64::new(0),
            prev: AtomicU64::new(0),
            max_pages: AtomicU64::new(u64::from(max_pages.min(WINDOW_PAGES_LIMIT))),
            stream_epoch: AtomicU32::new(u32::MAX),
        }
    }

    pub fn max_pages(&self) -> u32 {
        self.max_pages.load(Ordering::Relaxed) as u32
    }

    pub fn set_max_pages(&self, pages: u32) {
        self.max_pages
            .store(u64::from(pages.min(WINDOW_PAGES_LIMIT)), Ordering::Relaxed);
    }

    pub fn load(&self) -> RaState {
        RaState::unpack(self.word.load(Ordering::Acquire))
    }

    pub fn prev_index(&self) -> Option<PageIndex> {
        match self.prev.load(Ordering::Relaxed) {
            0 => None,
            p => Some(PageIndex(p - 1)),
        }
    }

    pub fn set_prev_index(&self, index: PageIndex) {
        self.prev.store(index.0 + 1, Ordering::Relaxed);
    }

    /// Runs `decide` against the current state and installs its window with one CAS,
    /// retrying from a fresh state when another thread got there first. Returns the
    /// window this thread installed (and must read), or `None`.
    pub fn update(&self, mut decide: impl FnMut(RaState, u32) -> Decision) -> Option<RaState> {
        for _ in 0..CAS_TRIES_MAX {
            let word = self.word.load(Ordering::Acquire);
            let max_pages = self.max_pages();
            let Decision::Window(next) = decide(RaState::unpack(word), max_pages) else {
                return None;
            };
            assert!(
                next.is_possible(max_pages),
                "impossible readahead window {next:?} (max {max_pages})"
            );
            if self
                .word
                .compare_exchange(word, next.pack(), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Some(next);
            }
        }
        None
    }

    /// Forgets the window (advice changed).
    pub fn reset(&self) {
        self.word.store(0, Ordering::Release);
    }

    /// Records that the cache's stream count counted this handle in epoch `epoch`
    /// (`ReadaheadLimit::note_window`): whether it had not yet (one load when it had; the
    /// swap makes one of two racing threads the first).
    pub fn enter_epoch(&self, epoch: u32) -> bool {
        self.stream_epoch.load(Ordering::Relaxed) != epoch
            && self.stream_epoch.swap(epoch, Ordering::Relaxed) != epoch
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::w;
    use super::*;

    #[test]
    fn the_packed_word_round_trips() {
        for s in [
            RaState::default(),
            w(START_PAGES_LIMIT - 1, WINDOW_PAGES_LIMIT, 17, 0),
            w(START_PAGES_LIMIT - 1, WINDOW_PAGES_LIMIT, 1, 0),
            w(
                START_PAGES_LIMIT - 1,
                WINDOW_PAGES_LIMIT,
                WINDOW_PAGES_LIMIT,
                ORDER_MAX,
            ),
            w(0, 4, 3, 0),
            w(12, 4, 4, 2),
            w(7, 1, 1, 0),
        ] {
            assert!(s.is_possible(WINDOW_PAGES_LIMIT), "{s:?}");
            assert_eq!(RaState::unpack(s.pack()), s);
        }
        assert_eq!(RaState::default().pack(), 0, "a new cell holds no window");
        for (impossible, max) in [
            (w(0, 4, 5, 0), 32),  // more async than the window
            (w(0, 64, 5, 0), 32), // larger than the maximum
            (w(0, 4, 0, 0), 32),  // no marker
            (w(0, 4, 3, 1), 32),  // an order on a window opened on a miss
            (w(0, 4, 4, 3), 32),  // folios larger than the window
            (w(0, 4096, 4096, ORDER_MAX + 1), 4096),
        ] {
            assert!(!impossible.is_possible(max), "{impossible:?}");
        }
    }
}
