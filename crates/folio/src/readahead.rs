//! Readahead: the kernel's on-demand window, as a pure policy, and its per-handle state.
//!
//! # DOC: Readahead overview
//!
//! A handle remembers one readahead window. Its pages are read ahead of the reader; one
//! folio in it carries the READAHEAD marker, and a read that reaches the marker starts
//! the next window before the reader gets there, so the disk stays busy while the
//! application consumes the previous window:
//!
//! ```text
//!                         |<------------ size ------------>|
//!                         |              |<-- async_size -->|
//!     ... ===============[#######################################]
//!                         ^start         ^marker            ^start + size = next start
//!
//!     reading reaches the marker  =>  next window: start' = start + size,
//!                                     size' = ramp(size), async_size' = size'
//! ```
//!
//! - A miss at the start of the file, right after the previous read of this handle that
//!   missed or waited, or right after more cached pages than it asks for (the trace a
//!   sequential stream leaves in the index: the kernel's context readahead), opens an
//!   initial window at the missed page: the request rounded up to a power of two,
//!   x4 if at most max/32, x2 if at most max/4, else max; `async_size` is the part past the
//!   request, so the marker falls on the first page the reader has not asked for yet.
//! - A read that touches the marker starts the next window at `start + size`, all of it
//!   async: its size ramps x4 while under max/16, x2 while at most max/2, then stays max.
//!   If the marker is not where this handle's window put it (interleaved streams), the new
//!   window starts at the first page missing after the reader.
//! - Any other miss is random: the request is read as it is and the state stays.
//! - `File::readahead` and `Advice::WillNeed` force a window over a range (chunks of at
//!   most 2 MiB); `Advice::Random` turns readahead off for the handle.
//! - Folios grow with the window: a window of `n` pages is read with folios of order up
//!   to log2(n) - 2, so a ramped-up scan uses 2 MiB folios (the kernel's large folio
//!   readahead).
//!
//! # Concurrency (seed 002, Jan Kara's objection)
//!
//! Many threads share one handle. The window lives in ONE atomic word (`RaState` packed),
//! replaced by compare-and-swap: a thread computes its decision from the word it loaded,
//! and if the CAS fails another thread moved the window first, so it reloads and decides
//! again (bounded; after `CAS_TRIES_MAX` losses it gives up readahead, never writes stale
//! values). The word is checked on every update: it never holds an impossible window.
//! Model-checked in `tests/loom_models.rs` (`readahead_state_update`).
//! `prev_index` is a separate hint word: a torn interleaving of it only makes a read look
//! random or sequential, never corrupts the window. Hits do not write it (a store per hit
//! would bounce its cache line between every thread of the handle and stop two threads'
//! hits from scaling: 12 M against 39 M reads/s in `pread-scale`); a sequential reader
//! that misses after hits is recognised by the cached pages before the miss instead.
//!
//! The policy (`decide_on_miss`, `decide_on_marker`, `initial_size`, `ramp`) is a pure
//! function of (state, request, what the index holds): no I/O, no lock, no clock.
//!
//! Limits: windows of at most `WINDOW_PAGES_LIMIT` pages (32 MiB); files of at most
//! `START_PAGES_LIMIT` pages (2^36 pages, 256 TiB) for readahead (pages beyond are read
//! without it).

use crate::primitive::{AtomicU64, Ordering};

use crate::types::PageIndex;

/// The largest window a handle uses: 32 MiB, a power of two (so ramped-up windows stay
/// aligned to the largest folio), below the 14 bits the packed state has for a size.
pub const WINDOW_PAGES_LIMIT: u32 = 1 << 13;
/// Readahead describes pages below this index only (the 36 bits of the packed start).
pub const START_PAGES_LIMIT: u64 = 1 << START_BITS;
/// Losses of the state CAS after which a thread gives up readahead for this read.
pub const CAS_TRIES_MAX: u32 = 4;

const START_BITS: u32 = 36;
const SIZE_BITS: u32 = 14;
const _: () = assert!(WINDOW_PAGES_LIMIT < 1 << SIZE_BITS && START_BITS + 2 * SIZE_BITS == 64);

/// One readahead window: pages `[start, start + size)`, the last `async_size` of them read
/// ahead of need; the marker at `start + size - async_size`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RaState {
    pub start: u64,
    pub size: u32,
    pub async_size: u32,
}

impl RaState {
    /// Whether this is a window the policy could have made with maximum `max_pages`.
    pub fn is_possible(&self, max_pages: u32) -> bool {
        self.size <= max_pages.min(WINDOW_PAGES_LIMIT)
            && self.async_size <= self.size
            && self.start < START_PAGES_LIMIT
            && (self.size > 0 || (self.start == 0 && self.async_size == 0))
    }

    pub fn marker(&self) -> u64 {
        self.start + u64::from(self.size - self.async_size)
    }

    pub fn end(&self) -> u64 {
        self.start + u64::from(self.size)
    }

    fn pack(self) -> u64 {
        self.start
            | (u64::from(self.size) << START_BITS)
            | (u64::from(self.async_size) << (START_BITS + SIZE_BITS))
    }

    fn unpack(word: u64) -> RaState {
        let mask = (1u64 << SIZE_BITS) - 1;
        RaState {
            start: word & (START_PAGES_LIMIT - 1),
            size: ((word >> START_BITS) & mask) as u32,
            async_size: ((word >> (START_BITS + SIZE_BITS)) & mask) as u32,
        }
    }
}

/// What a read asks of the readahead policy on a miss.
#[derive(Clone, Copy, Debug)]
pub struct MissRequest {
    /// The page that missed.
    pub index: PageIndex,
    /// Pages the read still wants from `index` on.
    pub pages: u64,
    /// The last page this handle read before (the sequential test), if any. Only reads
    /// that missed or waited record it: a store per hit would bounce one cache line
    /// between every thread reading through the handle.
    pub prev_index: Option<PageIndex>,
    /// Contiguous pages right before `index` that the index holds (what the index
    /// holds; the caller may stop counting once it exceeds `pages`). A miss right after
    /// more cached pages than it asks for is the trace a sequential stream leaves, as
    /// in the kernel's context readahead.
    pub cached_before: u64,
}

impl MissRequest {
    /// Whether the miss continues a sequential stream: the start of the file, the page
    /// at or after this handle's previous read, or a page right after a cached run
    /// longer than the request.
    pub fn is_sequential(&self) -> bool {
        let index = self.index.0;
        index == 0
            || self
                .prev_index
                .is_some_and(|prev| index == prev.0 || index == prev.0 + 1)
            || self.cached_before > self.pages
    }
}

/// What the policy decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Read only what was asked; the state stays.
    None,
    /// Read the window `state` (its gaps), marking the folio at `state.marker()`.
    Window(RaState),
}

/// The initial window for a request of `req_pages` (kernel: get_init_ra_size).
pub fn initial_size(req_pages: u64, max_pages: u32) -> u32 {
    let max = u64::from(max_pages);
    let size = req_pages.max(1).next_power_of_two();
    let size = if size <= max / 32 {
        size * 4
    } else if size <= max / 4 {
        size * 2
    } else {
        max
    };
    size.min(max) as u32
}

/// The next window after one of `cur` pages (kernel: get_next_ra_size).
pub fn ramp(cur: u32, max_pages: u32) -> u32 {
    if cur < max_pages / 16 {
        cur * 4
    } else if cur <= max_pages / 2 {
        cur * 2
    } else {
        max_pages
    }
    .clamp(1, max_pages.max(1))
}

/// A miss: open an initial window if the read is sequential, else read just the request.
pub fn decide_on_miss(state: RaState, req: MissRequest, max_pages: u32) -> Decision {
    if max_pages == 0 || req.index.0 >= START_PAGES_LIMIT {
        return Decision::None;
    }
    let index = req.index.0;
    if state.size != 0 && index >= state.start && index < state.end() {
        // Inside the current window: another thread of this handle opened it and its
        // reads are in flight (or were evicted): nothing new to decide.
        return Decision::None;
    }
    if !req.is_sequential() {
        return Decision::None;
    }
    let size = initial_size(req.pages, max_pages);
    let pages = req.pages.min(u64::from(size)) as u32;
    let async_size = if size > pages { size - pages } else { size };
    Decision::Window(RaState {
        start: index,
        size,
        async_size,
    })
}

/// A read touched the READAHEAD marker at `index`. `next_miss` is the first page at or
/// after `index` that the index does not hold (what the index holds), at most `max_pages`
/// away; `None` if every page up to that distance is present.
pub fn decide_on_marker(
    state: RaState,
    index: PageIndex,
    next_miss: Option<PageIndex>,
    max_pages: u32,
) -> Decision {
    if max_pages == 0 {
        return Decision::None;
    }
    let index = index.0;
    if state.size != 0 && (index == state.marker() || index == state.end()) {
        if state.end() >= START_PAGES_LIMIT {
            return Decision::None; // past the pages readahead can describe
        }
        let size = ramp(state.size, max_pages);
        return Decision::Window(RaState {
            start: state.end(),
            size,
            async_size: size,
        });
    }
    // The marker belongs to a window this handle does not remember (another handle's,
    // or interleaved streams): start from the first hole after the reader.
    let Some(start) = next_miss else {
        return Decision::None;
    };
    if start.0 >= START_PAGES_LIMIT {
        return Decision::None;
    }
    let present = (start.0 - index) as u32;
    let size = ramp(present.max(1), max_pages);
    Decision::Window(RaState {
        start: start.0,
        size,
        async_size: size,
    })
}

/// The largest folio order to read a window of `size` pages with.
pub fn folio_order_cap(size: u32) -> u8 {
    (31 - size.max(1).leading_zeros())
        .saturating_sub(2)
        .min(u32::from(crate::types::ORDER_MAX)) as u8
}

/// A handle's readahead state: the window word and the previous-read hint.
#[derive(Debug)]
pub struct RaCell {
    word: AtomicU64,
    /// The page after the last one read, plus one (0: nothing read yet).
    prev: AtomicU64,
    max_pages: AtomicU64,
}

impl RaCell {
    pub fn new(max_pages: u32) -> RaCell {
        RaCell {
            word: AtomicU64::new(0),
            prev: AtomicU64::new(0),
            max_pages: AtomicU64::new(u64::from(max_pages.min(WINDOW_PAGES_LIMIT))),
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
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX_128K: u32 = 32;

    /// Replays a sequential scan in `read_pages`-page reads the way `File` drives the
    /// policy, and returns the windows in order.
    fn scan(pages_total: u64, read_pages: u64, max: u32) -> Vec<RaState> {
        let mut state = RaState::default();
        let mut present_until = 0u64; // pages [0, present_until) are cached or in flight
        let mut marker: Option<u64> = None;
        let mut prev = None;
        let mut windows = Vec::new();
        let mut index = 0;
        while index < pages_total {
            for page in index..index + read_pages {
                let decision = if page >= present_until {
                    decide_on_miss(
                        state,
                        MissRequest {
                            index: PageIndex(page),
                            pages: index + read_pages - page,
                            prev_index: prev,
                            cached_before: page.min(present_until),
                        },
                        max,
                    )
                } else if marker == Some(page) {
                    marker = None;
                    decide_on_marker(state, PageIndex(page), Some(PageIndex(present_until)), max)
                } else {
                    Decision::None
                };
                match decision {
                    Decision::Window(w) => {
                        assert!(w.is_possible(max));
                        assert_eq!(w.start, present_until, "windows are contiguous");
                        state = w;
                        present_until = w.end();
                        marker = Some(w.marker());
                        windows.push(w);
                    }
                    Decision::None if page >= present_until => present_until = page + 1,
                    Decision::None => {}
                }
                prev = Some(PageIndex(page));
            }
            index += read_pages;
        }
        windows
    }

    #[test]
    fn sequential_4k_reads_ramp_like_the_kernel_with_a_128k_max() {
        let windows = scan(200, 1, MAX_128K);
        let sizes_kib: Vec<u64> = windows.iter().map(|w| u64::from(w.size) * 4).collect();
        assert_eq!(&sizes_kib[..7], &[16, 32, 64, 128, 128, 128, 128]);
        // The initial window: the marker right after the page asked for.
        assert_eq!(
            windows[0],
            RaState {
                start: 0,
                size: 4,
                async_size: 3
            }
        );
        assert_eq!(windows[0].marker(), 1);
        // Ramped windows are all async: the marker is their first page.
        assert_eq!(
            windows[1],
            RaState {
                start: 4,
                size: 8,
                async_size: 8
            }
        );
        assert_eq!(
            windows[2],
            RaState {
                start: 12,
                size: 16,
                async_size: 16
            }
        );
        assert_eq!(
            windows[3],
            RaState {
                start: 28,
                size: 32,
                async_size: 32
            }
        );
    }

    #[test]
    fn larger_maxima_and_requests_ramp_the_same_way() {
        // 8 MiB max (this disk's read_ahead_kb): 16K, 64K, 256K, 1M, 2M, 4M, 8M...
        let sizes: Vec<u32> = scan(6000, 1, 2048).iter().map(|w| w.size).collect();
        assert_eq!(&sizes[..8], &[4, 16, 64, 256, 512, 1024, 2048, 2048]);
        // 8 KiB records: 2 pages is above max/32, so the initial window is x2.
        let windows = scan(100, 2, MAX_128K);
        assert_eq!(
            windows[0],
            RaState {
                start: 0,
                size: 4,
                async_size: 2
            }
        );
    }

    #[test]
    fn initial_and_ramp_sizes() {
        assert_eq!(initial_size(1, 32), 4);
        assert_eq!(initial_size(2, 32), 4, "2 > 32/32: x2");
        assert_eq!(initial_size(8, 32), 16);
        assert_eq!(initial_size(9, 32), 32);
        assert_eq!(initial_size(100, 32), 32);
        assert_eq!(ramp(1, 32), 4);
        assert_eq!(ramp(16, 32), 32);
        assert_eq!(ramp(32, 32), 32);
    }

    #[test]
    fn random_reads_leave_the_state_alone() {
        let state = RaState {
            start: 100,
            size: 8,
            async_size: 8,
        };
        let req = MissRequest {
            index: PageIndex(5000),
            pages: 1,
            prev_index: Some(PageIndex(17)),
            cached_before: 1,
        };
        assert_eq!(decide_on_miss(state, req, MAX_128K), Decision::None);
        // No previous read and not at the start: random too.
        let req = MissRequest {
            index: PageIndex(77),
            pages: 1,
            prev_index: None,
            cached_before: 0,
        };
        assert_eq!(
            decide_on_miss(RaState::default(), req, MAX_128K),
            Decision::None
        );
    }

    #[test]
    fn a_read_at_the_start_of_the_file_opens_a_window() {
        let req = MissRequest {
            index: PageIndex(0),
            pages: 1,
            prev_index: Some(PageIndex(900)),
            cached_before: 0,
        };
        assert_eq!(
            decide_on_miss(
                RaState {
                    start: 800,
                    size: 32,
                    async_size: 32
                },
                req,
                MAX_128K
            ),
            Decision::Window(RaState {
                start: 0,
                size: 4,
                async_size: 3
            })
        );
        // Readahead off (max 0): nothing.
        assert_eq!(decide_on_miss(RaState::default(), req, 0), Decision::None);
    }

    #[test]
    fn a_stray_marker_restarts_from_the_next_hole() {
        let state = RaState {
            start: 0,
            size: 4,
            async_size: 3,
        };
        // 8 pages are present after the reader: the next window ramps from 8.
        let d = decide_on_marker(state, PageIndex(500), Some(PageIndex(508)), MAX_128K);
        assert_eq!(
            d,
            Decision::Window(RaState {
                start: 508,
                size: 16,
                async_size: 16
            })
        );
        assert_eq!(
            decide_on_marker(state, PageIndex(500), None, MAX_128K),
            Decision::None
        );
    }

    #[test]
    fn the_packed_word_round_trips() {
        let s = RaState {
            start: START_PAGES_LIMIT - 1,
            size: WINDOW_PAGES_LIMIT,
            async_size: 17,
        };
        assert_eq!(RaState::unpack(s.pack()), s);
        assert!(!RaState {
            start: 0,
            size: 4,
            async_size: 5
        }
        .is_possible(32));
        assert!(!RaState {
            start: 0,
            size: 64,
            async_size: 5
        }
        .is_possible(32));
    }

    #[test]
    fn folio_orders_grow_with_the_window() {
        assert_eq!(folio_order_cap(4), 0);
        assert_eq!(folio_order_cap(16), 2);
        assert_eq!(folio_order_cap(2048), 9);
    }

    #[test]
    fn the_policy_never_makes_an_impossible_window() {
        use proptest::prelude::*;
        proptest!(ProptestConfig::with_cases(if cfg!(miri) { 3 } else { 256 }), |(start in 0u64..1 << 30, size in 0u32..64, asz in 0u32..64, index in 0u64..1 << 30, pages in 1u64..5000, prev in proptest::option::of(0u64..1 << 30), cached_before in 0u64..6000, max in 0u32..4096)| {
            let size = size.min(max);
            let state = RaState { start, size, async_size: asz.min(size) };
            let req = MissRequest { index: PageIndex(index), pages, prev_index: prev.map(PageIndex), cached_before: cached_before.min(index) };
            if let Decision::Window(w) = decide_on_miss(state, req, max) {
                prop_assert!(w.is_possible(max) && w.size > 0);
                prop_assert_eq!(w.start, index);
            }
            if let Decision::Window(w) = decide_on_marker(state, PageIndex(index), Some(PageIndex(index + 3)), max) {
                prop_assert!(w.is_possible(max) && w.size > 0 && w.async_size == w.size);
            }
        });
    }
}
