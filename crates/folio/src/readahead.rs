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
//!                                     order' = order + 2 (the folio order reached),
//!                                     end' = start' + ramp(size), rounded down to a
//!                                            multiple of 2^min(order', tz(max)),
//!                                     size' = async_size' = end' - start'
//! ```
//!
//! - A miss at the start of the file, right after the previous read of this handle that
//!   missed or waited, or right after more cached pages than it asks for (the trace a
//!   sequential stream leaves in the index: the kernel's context readahead), opens an
//!   initial window at the missed page: the request rounded up to a power of two,
//!   x4 if at most max/32, x2 if at most max/4, else max; `async_size` is the part past the
//!   request, so the marker falls on the first page the reader has not asked for yet. Its
//!   `order` is 0.
//! - A read that touches the marker starts the next window at `start + size`, all of it
//!   async: its size ramps x4 while under max/16, x2 while at most max/2, then stays max.
//!   If the marker is not where this handle's window put it (interleaved streams), the new
//!   window starts at the first page missing after the reader.
//! - **Alignment (the kernel's rule since large-folio readahead, Linux 6.18 here).** A
//!   window started at a marker raises `order` by 2 and ends on a multiple of
//!   2^min(order, tz(max)) (tz: trailing zero bits, so a maximum that is not a power of
//!   two still divides into whole blocks); if rounding the end down would leave the
//!   window empty, it keeps its ramped end. Then `order` is capped by the largest folio
//!   (`ORDER_MAX`) and by log2 of the window's size, and the window is read with folios of
//!   at most that order. So windows end where the folios they are read with end, each
//!   folio starts on a multiple of its own size, and the window after a short aligned one
//!   ramps from the short size: the kernel's windows, page for page. With a 128 KiB
//!   maximum (32 pages) and 4 KiB reads, the windows and their orders (`o`), then windows
//!   of 32 pages, order 5, at 64, 96, 128, ...:
//!
//! ```text
//!     page 0   4       12  16      24      32              48              64
//!          |o0-|o2-----|o2-|o3-----|o3-----|o4-------------|o4-------------|o5 ...
//! ```
//!
//!   and with 8 MiB (2,048 pages): 0+4, 4+16, 20+60, 80+240, 320+448, 768+256, 1024+512,
//!   1536+512, 2048+1024, 3072+1024, 4096+2048, then 2,048 at a time
//!   (`tests/readahead_trace.rs` checks them against the kernel, read by read). Without
//!   the alignment the ramp ran 0+4, 4+16, 20+64, 84+256, ... (and 4, 12, 28, 60, 92, ...
//!   at 128 KiB): the 4 pages of the initial window shifted every later window past the
//!   kernel's, so its markers came later, and until the reader reached them fewer pages
//!   were ahead than in the kernel: at 1,748 of the first 2,048 reads at 128 KiB (43 vs
//!   47 after read 49), and at 24 at 8 MiB (259 vs 687 after read 81).
//! - Any other miss is random: the request is read as it is and the state stays.
//! - `File::readahead` and `Advice::WillNeed` force a window over a range (chunks of at
//!   most 2 MiB); `Advice::Random` turns readahead off for the handle.
//! - Folios grow with the window: a window started at a marker is read with folios of at
//!   most its `order` (above), so a ramped-up scan uses 2 MiB folios (the kernel's large
//!   folio readahead); a window opened on a miss with folios of order up to log2(size) - 2
//!   (the kernel reads it in single pages; folio keeps fewer, larger folios, which only
//!   changes how the same pages are grouped).
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
//! The policy (`decide_on_miss`, `decide_on_marker`, `initial_size`, `ramp`) is a pure
//! function of (state, request, what the index holds): no I/O, no lock, no clock.
//!
//! # The cache-wide limit: many streams in one cache (issue 16)
//!
//! Each stream keeps a window and the next one ahead of its reader, so n streams hold
//! about 2n windows of pages read ahead and not read yet. When that is more than the
//! cache keeps for them, the eviction policy takes pages read ahead before their readers
//! reach them (wasted readahead, counted by reclaim), the readers miss, and the disk reads
//! the same bytes twice: 16 streams at the 16 MiB default in a 256 MiB cache read 2.1 GB
//! for 1 GiB (docs/fio.md). How much the cache keeps is the eviction policy's affair:
//! S3-FIFO evicts unread folios from its small queue, a tenth of the cache, so there even
//! one stream with 8 MiB windows wastes pages in a 64 MiB cache. So every handle's maximum
//! is lowered to one cache-wide limit (`ReadaheadLimit`), the smaller of two:
//!
//! - **Each active stream's share** (`Streams`): a quarter of the cache divided by the
//!   streams that read ahead recently, rounded down to a power of two, so that their
//!   windows and the next ones take at most half of it. A handle counts once per epoch in
//!   which it installs a window; an epoch is `EPOCH_PERIODS` periods (below: half the cache
//!   read ahead), in which every stream within its share starts two windows or more; the
//!   count is the larger of this epoch's and the last one's, so a stream that stopped is
//!   forgotten two epochs later. It bounds the windows from the first ones on, before
//!   anything is wasted, and does not depend on the eviction policy.
//! - **Thrash feedback** (`Thrash`): what the policy actually lets readahead keep,
//!   measured. A period ends each time an eighth of the cache has been read ahead; a
//!   period in which more than 1/16 of the pages read ahead were evicted unread halves the
//!   largest window installed in it (quarters it above one half), down to 128 KiB, but not
//!   within `SETTLE_PERIODS` of the last change (the pages wasted right after a change
//!   were read ahead by the windows before it); `GROW_PERIODS` periods in a row with at
//!   most 1/64 wasted double the limit again, up to the cache's own (an eighth of it). It
//!   also catches what the share cannot see: streams that read at different rates, a
//!   policy that keeps less for readahead than half the cache.
//!
//! A single stream in a cache that keeps its windows wastes nothing and is alone, so it
//! keeps the handle's maximum (`tests/readahead_trace.rs`: the kernel's windows, read by
//! read). Hits never touch the limit: a miss or a marker that asks the policy loads its
//! two words; a window installed updates them by CAS (`note_read_ahead`, once per
//! window; `note_window`, once per handle and epoch), reclaim once per batch that evicted
//! pages read ahead (`note_wasted`). Model-checked in `tests/loom_models.rs`
//! (`readahead_limit_counts`). A handle that stops reading mid-file leaves its last
//! windows unread, and their eviction counts as waste too: the limit may halve once for
//! it, and grows back after `GROW_PERIODS` clean periods.
//!
//! The word holds `start` (36 bits), `size` (14), and in its last 14 bits either the sync
//! part of a window opened on a miss (`size - async_size`, tagged) or the `order` of a
//! window that is all async: a window opened on a miss always has order 0, one started at
//! a marker has no sync part, so neither needs both.
//!
//! Protection: a handle's window word, and the limit's two words, are replaced by CAS only;
//! `prev_index`, the handle's maximum and its stream epoch are single words (hints).
//!
//! Limits: windows of at most `WINDOW_PAGES_LIMIT` pages (32 MiB), and within the
//! cache-wide limit (at least 128 KiB, at most the cache's own); files of at most
//! `START_PAGES_LIMIT` pages (2^36 pages, 256 TiB) for readahead (pages beyond are read
//! without it). The order the alignment follows is capped at `ORDER_MAX` (2 MiB folios),
//! whatever largest folio the cache is built with (the kernel caps it at the mapping's).

use crate::primitive::{AtomicU32, AtomicU64, Ordering};

use crate::types::{PageIndex, ORDER_MAX};

/// The largest window a handle uses: 32 MiB, a power of two (so ramped-up windows stay
/// aligned to the largest folio), below the 14 bits the packed state has for a size.
pub const WINDOW_PAGES_LIMIT: u32 = 1 << 13;
/// Readahead describes pages below this index only (the 36 bits of the packed start).
pub const START_PAGES_LIMIT: u64 = 1 << START_BITS;
/// Losses of the state CAS after which a thread gives up readahead for this read.
pub const CAS_TRIES_MAX: u32 = 4;

const START_BITS: u32 = 36;
const SIZE_BITS: u32 = 14;
/// The low field after `start` and `size`: a window opened on a miss stores its sync part
/// (`size - async_size`, 1..`WINDOW_PAGES_LIMIT`) under this tag; a window that is all
/// async stores its `order` (its sync part is 0, and its order is what the next window
/// aligns to).
const SYNC_TAG: u64 = 1 << (SIZE_BITS - 1);
const _: () = assert!(
    WINDOW_PAGES_LIMIT < 1 << SIZE_BITS
        && WINDOW_PAGES_LIMIT as u64 <= SYNC_TAG
        && (ORDER_MAX as u64) < SYNC_TAG
        && START_BITS + 2 * SIZE_BITS == 64
);

/// One readahead window: pages `[start, start + size)`, the last `async_size` of them read
/// ahead of need; the marker at `start + size - async_size`. `order` is the folio order
/// the stream's windows have reached (the kernel's `ra->order`): 0 for a window opened on
/// a miss; for a window started at a marker, the largest order it is read with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RaState {
    pub start: u64,
    pub size: u32,
    pub async_size: u32,
    pub order: u8,
}

impl RaState {
    /// Whether this is a window the policy could have made with maximum `max_pages`: within
    /// the maximum and the word's limits, with at least one async page (the marker), and an
    /// order no larger than the window (0 unless the window is all async).
    pub fn is_possible(&self, max_pages: u32) -> bool {
        let order_fits = self.order <= ORDER_MAX
            && (self.order == 0
                || (self.async_size == self.size && 1u32 << self.order <= self.size));
        self.size <= max_pages.min(WINDOW_PAGES_LIMIT)
            && self.async_size <= self.size
            && self.start < START_PAGES_LIMIT
            && order_fits
            && if self.size > 0 {
                self.async_size > 0
            } else {
                self.start == 0 && self.async_size == 0
            }
    }

    /// The largest folio order to read this window with: its `order` if it was started at
    /// a marker (the kernel's), up to a quarter of it if it was opened on a miss
    /// (`folio_order_cap`; the kernel uses single pages there).
    pub fn folio_order(&self) -> u8 {
        if self.async_size == self.size {
            self.order
        } else {
            folio_order_cap(self.size)
        }
    }

    pub fn marker(&self) -> u64 {
        self.start + u64::from(self.size - self.async_size)
    }

    pub fn end(&self) -> u64 {
        self.start + u64::from(self.size)
    }

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
        order: 0,
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
        return Decision::Window(async_window(state.end(), size, state.order, max_pages));
    }
    // The marker belongs to a window this handle does not remember (another handle's,
    // or interleaved streams): start from the first hole after the reader.
    let Some(start) = next_miss else {
        return Decision::None;
    };
    if start.0 >= START_PAGES_LIMIT || start.0 < index {
        // A hole before the reader is no window to start (the caller's walk must start at
        // `index`; a stale one is ignored, not trusted).
        return Decision::None;
    }
    let present = (start.0 - index) as u32;
    let size = ramp(present.max(1), max_pages);
    Decision::Window(async_window(start.0, size, state.order, max_pages))
}

/// The window a marker starts at `start` with `size` ramped pages, after one of order
/// `order_before` (kernel: the end of page_cache_async_ra and the order chosen by
/// page_cache_ra_order): the order rises by 2; the end is rounded down to a multiple of
/// 2^min(order, tz(max_pages)) unless that leaves nothing; then the order is capped by the
/// largest folio and by the window's size. All of it is async.
fn async_window(start: u64, size: u32, order_before: u8, max_pages: u32) -> RaState {
    debug_assert!(size > 0 && max_pages > 0);
    let order = u32::from(order_before) + 2;
    let align = 1u64 << order.min(max_pages.trailing_zeros());
    let end = start + u64::from(size);
    let aligned_end = end & !(align - 1);
    let size = if aligned_end > start {
        (aligned_end - start) as u32
    } else {
        size
    };
    let order = order.min(u32::from(ORDER_MAX)).min(size.ilog2()) as u8;
    RaState {
        start,
        size,
        async_size: size,
        order,
    }
}

/// The largest folio order to read a window of `size` pages opened on a miss with: a
/// quarter of it, rounded down to a power of two.
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
}

/// The largest maximum window a cache of `frames` frames gives its handles: an eighth of
/// the cache rounded down to a power of two (so that a window and the next one in flight
/// never take more than a quarter of it, and ramped windows stay aligned to the largest
/// folio), and at most `WINDOW_PAGES_LIMIT`.
pub fn window_pages_limit(frames: u32) -> u32 {
    let eighth = frames / 8;
    let eighth = eighth.checked_ilog2().map_or(0, |log| 1 << log);
    eighth.min(WINDOW_PAGES_LIMIT)
}

/// The cache-wide limit never goes below this many pages (128 KiB, the kernel's default
/// window), unless the cache's own limit is smaller.
pub const THRASH_FLOOR_PAGES: u32 = 32;
/// A period in which more than 1/2^THRASH_WASTE_SHIFT of the pages read ahead were
/// evicted unread (6.25%) thrashed: it halves the limit.
const THRASH_WASTE_SHIFT: u32 = 4;
/// A thrashed period in which more than half were quarters it.
const HEAVY_WASTE_SHIFT: u32 = 1;
/// A period in which at most 1/2^CLEAN_WASTE_SHIFT were (1.6%) is clean.
const CLEAN_WASTE_SHIFT: u32 = 6;
/// Periods after a change of the limit before a thrashed period may lower it again: the
/// pages wasted right after a change were read ahead with the windows before it.
pub const SETTLE_PERIODS: u8 = 2;
/// Clean periods in a row that double the limit.
pub const GROW_PERIODS: u8 = 4;
/// Periods per epoch of the stream count.
pub const EPOCH_PERIODS: u8 = 4;

/// The packed `Thrash` word, from bit 0: the limit's log2, the two period counts, the
/// largest window's log2 plus one, then the two page counts.
const LIMIT_SHIFT_BITS: u32 = 5;
const PERIODS_BITS: u32 = 3;
const PERIODS_MAX: u8 = (1 << PERIODS_BITS) - 1;
const LARGEST_BITS: u32 = 4;
const COUNT_BITS: u32 = 24;
const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;
/// The packed `Streams` word: the epoch, its ended periods, then the two counts.
const EPOCH_BITS: u32 = 30;
const EPOCH_PERIODS_BITS: u32 = 2;
const _: () = assert!(
    LIMIT_SHIFT_BITS + 2 * PERIODS_BITS + LARGEST_BITS + 2 * COUNT_BITS <= 64
        && WINDOW_PAGES_LIMIT.ilog2() < 1 << LIMIT_SHIFT_BITS
        && WINDOW_PAGES_LIMIT.ilog2() + 1 < 1 << LARGEST_BITS
        && SETTLE_PERIODS <= PERIODS_MAX
        && GROW_PERIODS <= PERIODS_MAX
        && EPOCH_PERIODS <= 1 << EPOCH_PERIODS_BITS
        && EPOCH_BITS + EPOCH_PERIODS_BITS + 2 * 16 == 64
);

/// The fixed bounds of one cache's readahead limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitBounds {
    /// The cache's frames, which the active streams share.
    pub frames: u32,
    /// log2 of the smallest limit, in pages.
    pub floor_shift: u8,
    /// log2 of the largest, in pages: the cache's own (`window_pages_limit`).
    pub ceiling_shift: u8,
    /// Pages read ahead per period: an eighth of the cache.
    pub period_pages: u64,
}

impl LimitBounds {
    /// The bounds of a cache of `frames` frames.
    pub fn for_cache(frames: u32) -> LimitBounds {
        let ceiling = window_pages_limit(frames).max(1);
        LimitBounds {
            frames,
            floor_shift: THRASH_FLOOR_PAGES.min(ceiling).ilog2() as u8,
            ceiling_shift: ceiling.ilog2() as u8,
            // At most half the counters' range: a period's count never saturates (a note
            // adds at most a window, far below the other half).
            period_pages: (u64::from(frames) / 8).clamp(1, COUNT_MAX / 2),
        }
    }
}

/// The thrash feedback (module docs): the limit it sets, and what the current period
/// has seen. A pure state: `on_read_ahead` and `on_wasted` return the next one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Thrash {
    /// log2 of the limit, in pages.
    pub limit_shift: u8,
    /// Periods ended since the limit last changed (saturating).
    pub settled_periods: u8,
    /// Clean periods in a row.
    pub clean_periods: u8,
    /// log2 of the largest window installed in this period, plus one (0: none).
    pub largest_shift: u8,
    /// Pages read ahead in this period.
    pub read_ahead_pages: u64,
    /// Pages read ahead that were evicted unread in this period (saturating).
    pub wasted_pages: u64,
}

impl Thrash {
    /// A cache's first state: the cache's own limit, free to shrink at the first thrash.
    pub fn new(bounds: &LimitBounds) -> Thrash {
        Thrash {
            limit_shift: bounds.ceiling_shift,
            settled_periods: PERIODS_MAX,
            ..Thrash::default()
        }
    }

    /// The limit, in pages.
    pub fn limit_pages(&self) -> u32 {
        1 << self.limit_shift
    }

    /// `pages` more were read ahead, by a window of `window_pages` (0 for forced
    /// readahead, which the limit does not bound); a period that is full is judged, and
    /// the next begins.
    pub fn on_read_ahead(self, pages: u64, window_pages: u32, bounds: &LimitBounds) -> Thrash {
        let window_shift = window_pages.checked_ilog2().map_or(0, |log| log as u8 + 1);
        let next = Thrash {
            read_ahead_pages: (self.read_ahead_pages + pages).min(COUNT_MAX),
            largest_shift: self.largest_shift.max(window_shift),
            ..self
        };
        if next.read_ahead_pages >= bounds.period_pages {
            next.end_period(bounds)
        } else {
            next
        }
    }

    /// `pages` read ahead were evicted before anyone read them.
    pub fn on_wasted(self, pages: u64) -> Thrash {
        Thrash {
            wasted_pages: (self.wasted_pages + pages).min(COUNT_MAX),
            ..self
        }
    }

    /// Judges a full period (module docs): thrashed, it halves (quarters, if more than
    /// half was wasted) the largest window installed in it, once settled; clean
    /// `GROW_PERIODS` times in a row, it doubles the limit; else the limit stays.
    fn end_period(self, bounds: &LimitBounds) -> Thrash {
        let (read, wasted) = (self.read_ahead_pages, self.wasted_pages);
        let mut next = Thrash {
            settled_periods: (self.settled_periods + 1).min(PERIODS_MAX),
            largest_shift: 0,
            read_ahead_pages: 0,
            wasted_pages: 0,
            ..self
        };
        if wasted << THRASH_WASTE_SHIFT > read {
            next.clean_periods = 0;
            if next.settled_periods >= SETTLE_PERIODS {
                // The windows in use: the largest this period installed (the limit
                // itself if it installed none), whatever bounded them.
                let in_use = match self.largest_shift {
                    0 => self.limit_shift,
                    shift => self.limit_shift.min(shift - 1),
                };
                let steps = if wasted << HEAVY_WASTE_SHIFT > read {
                    2
                } else {
                    1
                };
                next.limit_shift = in_use.saturating_sub(steps).max(bounds.floor_shift);
                next.settled_periods = 0;
            }
        } else if wasted << CLEAN_WASTE_SHIFT <= read {
            next.clean_periods = self.clean_periods + 1;
            if next.clean_periods >= GROW_PERIODS {
                next.clean_periods = 0;
                if self.limit_shift < bounds.ceiling_shift {
                    next.limit_shift = self.limit_shift + 1;
                    next.settled_periods = 0;
                }
            }
        } else {
            next.clean_periods = 0;
        }
        next
    }

    fn pack(self) -> u64 {
        let mut at = 0;
        let mut field = |value: u64, bits: u32| {
            debug_assert!(value < 1 << bits);
            let packed = value << at;
            at += bits;
            packed
        };
        field(u64::from(self.limit_shift), LIMIT_SHIFT_BITS)
            | field(u64::from(self.settled_periods), PERIODS_BITS)
            | field(u64::from(self.clean_periods), PERIODS_BITS)
            | field(u64::from(self.largest_shift), LARGEST_BITS)
            | field(self.read_ahead_pages, COUNT_BITS)
            | field(self.wasted_pages, COUNT_BITS)
    }

    fn unpack(word: u64) -> Thrash {
        let mut at = 0;
        let mut field = |bits: u32| {
            let value = (word >> at) & ((1 << bits) - 1);
            at += bits;
            value
        };
        Thrash {
            limit_shift: field(LIMIT_SHIFT_BITS) as u8,
            settled_periods: field(PERIODS_BITS) as u8,
            clean_periods: field(PERIODS_BITS) as u8,
            largest_shift: field(LARGEST_BITS) as u8,
            read_ahead_pages: field(COUNT_BITS),
            wasted_pages: field(COUNT_BITS),
        }
    }
}

/// The stream count (module docs): each handle that installs a window counts once per
/// epoch; an epoch is `EPOCH_PERIODS` periods of the thrash feedback (half the cache read
/// ahead), so that every stream within its share starts at least two windows in one. A
/// pure state, as `Thrash`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Streams {
    /// The epoch's number (wraps at 2^30).
    pub epoch: u32,
    /// Periods of this epoch that have ended.
    pub periods: u8,
    /// Streams counted in this epoch so far (saturating).
    pub now: u16,
    /// Streams counted in the previous epoch.
    pub before: u16,
}

impl Streams {
    /// The streams the cache is shared among: the larger count of this epoch and the
    /// last (a stream that stopped is forgotten after two epochs), at least one.
    pub fn active(&self) -> u32 {
        u32::from(self.now.max(self.before)).max(1)
    }

    /// Each active stream's share of the cache, in pages: a quarter of the cache divided
    /// among them (so their windows and the next ones in flight take at most half of
    /// it), rounded down to a power of two, within the bounds.
    pub fn share_pages(&self, bounds: &LimitBounds) -> u32 {
        let share = bounds.frames / (4 * self.active());
        let share = share.checked_ilog2().map_or(0, |log| 1 << log);
        share.clamp(1 << bounds.floor_shift, 1 << bounds.ceiling_shift)
    }

    /// A handle not yet counted in this epoch installed a window.
    pub fn with_stream(self) -> Streams {
        Streams {
            now: self.now.saturating_add(1),
            ..self
        }
    }

    /// A period of the thrash feedback ended; every `EPOCH_PERIODS`, an epoch begins.
    pub fn on_period_end(self) -> Streams {
        if self.periods + 1 < EPOCH_PERIODS {
            return Streams {
                periods: self.periods + 1,
                ..self
            };
        }
        Streams {
            epoch: (self.epoch + 1) & ((1 << EPOCH_BITS) - 1),
            periods: 0,
            now: 0,
            before: self.now,
        }
    }

    fn pack(self) -> u64 {
        u64::from(self.epoch)
            | u64::from(self.periods) << EPOCH_BITS
            | u64::from(self.now) << (EPOCH_BITS + EPOCH_PERIODS_BITS)
            | u64::from(self.before) << (EPOCH_BITS + EPOCH_PERIODS_BITS + 16)
    }

    fn unpack(word: u64) -> Streams {
        Streams {
            epoch: (word & ((1 << EPOCH_BITS) - 1)) as u32,
            periods: ((word >> EPOCH_BITS) & ((1 << EPOCH_PERIODS_BITS) - 1)) as u8,
            now: (word >> (EPOCH_BITS + EPOCH_PERIODS_BITS)) as u16,
            before: (word >> (EPOCH_BITS + EPOCH_PERIODS_BITS + 16)) as u16,
        }
    }
}

/// The cache-wide maximum window (module docs): the thrash feedback's limit, and each
/// active stream's share of the cache, whichever is smaller.
pub fn shared_limit_pages(thrash: &Thrash, streams: &Streams, bounds: &LimitBounds) -> u32 {
    thrash.limit_pages().min(streams.share_pages(bounds))
}

/// A cache's readahead limit (module docs): the thrash feedback and the stream count,
/// each in one atomic word replaced by CAS.
#[derive(Debug)]
pub struct ReadaheadLimit {
    thrash: AtomicU64,
    streams: AtomicU64,
    bounds: LimitBounds,
}

impl ReadaheadLimit {
    pub fn new(bounds: LimitBounds) -> ReadaheadLimit {
        ReadaheadLimit {
            thrash: AtomicU64::new(Thrash::new(&bounds).pack()),
            streams: AtomicU64::new(Streams::default().pack()),
            bounds,
        }
    }

    /// The cache-wide maximum window now, in pages: two loads, no write.
    pub fn limit_pages(&self) -> u32 {
        shared_limit_pages(&self.thrash(), &self.streams(), &self.bounds)
    }

    pub fn thrash(&self) -> Thrash {
        Thrash::unpack(self.thrash.load(Ordering::Relaxed))
    }

    pub fn streams(&self) -> Streams {
        Streams::unpack(self.streams.load(Ordering::Relaxed))
    }

    /// Counts `pages` read ahead by a window of `window_pages` (0: forced readahead),
    /// after the window's read was submitted; a period that ends also ends for the
    /// stream count.
    ///
    /// Context: any thread; lock-free (a CAS fails only because another one succeeded).
    pub fn note_read_ahead(&self, pages: u64, window_pages: u32) {
        if pages == 0 {
            return;
        }
        let new = cas_loop(&self.thrash, |word| {
            Thrash::unpack(word)
                .on_read_ahead(pages, window_pages, &self.bounds)
                .pack()
        });
        if Thrash::unpack(new).read_ahead_pages == 0 {
            cas_loop(&self.streams, |word| {
                Streams::unpack(word).on_period_end().pack()
            });
        }
    }

    /// Counts `pages` read ahead and evicted unread (once per reclaim batch).
    ///
    /// Context: as `note_read_ahead`.
    pub fn note_wasted(&self, pages: u64) {
        if pages > 0 {
            cas_loop(&self.thrash, |word| {
                Thrash::unpack(word).on_wasted(pages).pack()
            });
        }
    }

    /// The handle of `cell` installed a window: counts it as a stream of this epoch,
    /// once (the handle's epoch is swapped in first; one load when it is already there).
    ///
    /// Context: as `note_read_ahead`.
    pub fn note_window(&self, cell: &RaCell) {
        let epoch = self.streams().epoch;
        if cell.stream_epoch.load(Ordering::Relaxed) == epoch
            || cell.stream_epoch.swap(epoch, Ordering::Relaxed) == epoch
        {
            return;
        }
        // Counted in the epoch current at the CAS: if one began since the load, the
        // handle is counted in it now and once more at its next window (an epoch
        // overcounts a handle at most once).
        cas_loop(&self.streams, |word| {
            Streams::unpack(word).with_stream().pack()
        });
    }
}

/// Replaces `word` by `next` of its value with CAS until one succeeds; returns the value
/// installed.
fn cas_loop(word: &AtomicU64, next: impl Fn(u64) -> u64) -> u64 {
    let mut old = word.load(Ordering::Relaxed);
    loop {
        let new = next(old);
        match word.compare_exchange(old, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return new,
            Err(seen) => old = seen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX_128K: u32 = 32;

    /// How a window of a replayed scan was opened.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Opened {
        OnMiss,
        AtMarker,
    }

    /// Replays a sequential scan in `read_pages`-page reads the way `File` drives the
    /// policy, and returns the windows in order, with how each was opened.
    fn scan_opened(pages_total: u64, read_pages: u64, max: u32) -> Vec<(RaState, Opened)> {
        let mut state = RaState::default();
        let mut present_until = 0u64; // pages [0, present_until) are cached or in flight
        let mut marker: Option<u64> = None;
        let mut prev = None;
        let mut windows = Vec::new();
        let mut index = 0;
        while index < pages_total {
            for page in index..index + read_pages {
                let (mut decision, mut opened) = if page >= present_until {
                    let req = MissRequest {
                        index: PageIndex(page),
                        pages: index + read_pages - page,
                        prev_index: prev,
                        cached_before: page.min(present_until),
                    };
                    (decide_on_miss(state, req, max), Opened::OnMiss)
                } else if marker == Some(page) {
                    marker = None;
                    let next_miss = Some(PageIndex(present_until));
                    let decision = decide_on_marker(state, PageIndex(page), next_miss, max);
                    (decision, Opened::AtMarker)
                } else {
                    (Decision::None, Opened::AtMarker)
                };
                loop {
                    match decision {
                        Decision::Window(w) => {
                            assert!(w.is_possible(max));
                            assert_eq!(w.start, present_until, "windows are contiguous");
                            state = w;
                            present_until = w.end();
                            marker = Some(w.marker());
                            windows.push((w, opened));
                            // A window opened on a miss whose marker is the page missed
                            // (the request covers the window): `File` touches the
                            // marked folio right after reading it.
                            if w.marker() == page {
                                marker = None;
                                let next_miss = Some(PageIndex(present_until));
                                decision = decide_on_marker(state, PageIndex(page), next_miss, max);
                                opened = Opened::AtMarker;
                                continue;
                            }
                        }
                        Decision::None if page >= present_until => present_until = page + 1,
                        Decision::None => {}
                    }
                    break;
                }
                prev = Some(PageIndex(page));
            }
            index += read_pages;
        }
        windows
    }

    /// The windows of a replayed scan, in order.
    fn scan(pages_total: u64, read_pages: u64, max: u32) -> Vec<RaState> {
        scan_opened(pages_total, read_pages, max)
            .into_iter()
            .map(|(w, _)| w)
            .collect()
    }

    /// `RaState` literals, shorter: (start, size, async_size, order).
    fn w(start: u64, size: u32, async_size: u32, order: u8) -> RaState {
        RaState {
            start,
            size,
            async_size,
            order,
        }
    }

    /// Where each window ends, in order.
    fn ends(windows: &[RaState]) -> Vec<u64> {
        windows.iter().map(|w| w.end()).collect()
    }

    /// The kernel's windows as cachestat saw them on Linux 6.18 (4 KiB reads of a cold
    /// file; `tests/readahead_trace.rs` traces them again on every run): the page where
    /// each window ends. The unaligned ramp ended 0+4, 4+16, 20+64, ... (84, 340, ...) and
    /// 4, 12, 28, 60, 92, ... at 128 KiB.
    #[test]
    fn sequential_4k_reads_open_the_kernels_windows() {
        // 128 KiB (32 pages): 4, 12, 16, 24, 32, 48, 64, 96, 128, then 32 at a time.
        let windows = scan(300, 1, MAX_128K);
        assert_eq!(
            &ends(&windows)[..11],
            &[4, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192]
        );
        let sizes_kib: Vec<u64> = windows.iter().map(|w| u64::from(w.size) * 4).collect();
        assert_eq!(
            &sizes_kib[..10],
            &[16, 32, 16, 32, 32, 64, 64, 128, 128, 128]
        );
        // The initial window: the marker right after the page asked for, order 0.
        assert_eq!(windows[0], w(0, 4, 3, 0));
        assert_eq!(windows[0].marker(), 1);
        // Windows started at a marker are all async (the marker is their first page)
        // and raise the order by 2; [12, 28) would cross 16 = 2^4, so it stops there, and
        // the next one ramps from its 4 pages.
        assert_eq!(windows[1], w(4, 8, 8, 2));
        assert_eq!(windows[2], w(12, 4, 4, 2));
        assert_eq!(windows[3], w(16, 8, 8, 3));
        assert_eq!(windows[7], w(64, 32, 32, 5));
        // 8 MiB (this disk's read_ahead_kb): 4, 20, 80, 320, 768, 1024, 1536, 2048, ...
        let windows = scan(9000, 1, 2048);
        assert_eq!(
            &ends(&windows)[..12],
            &[4, 20, 80, 320, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192]
        );
        let sizes: Vec<u32> = windows.iter().map(|w| w.size).collect();
        assert_eq!(
            &sizes[..12],
            &[4, 16, 60, 240, 448, 256, 512, 512, 1024, 1024, 2048, 2048]
        );
        // 16 MiB (folio's default): 4, 20, 80, 320, 1280, 3072, 6144, then 4,096 at a time.
        let windows = scan(12000, 1, 4096);
        assert_eq!(
            &ends(&windows)[..8],
            &[4, 20, 80, 320, 1280, 3072, 6144, 10240]
        );
        // 2,560 KiB (640 pages, a loop device's default here; tz(640) = 7, so ends fall on
        // multiples of 128 at most): 4, 20, 80, 192, 384, 768, then 640 at a time.
        let windows = scan(3000, 1, 640);
        assert_eq!(
            &ends(&windows)[..8],
            &[4, 20, 80, 192, 384, 768, 1408, 2048]
        );
    }

    #[test]
    fn every_window_is_aligned_to_its_order_and_folios_reach_2_mib() {
        for max in (1..=600).chain([640, 1000, 2048, 2560, 4096, 5000, 6144, 8191, 8192]) {
            for read_pages in [1, 2, 3, 8, 32] {
                let windows = scan_opened(u64::from(max) * 12 + 64, read_pages, max);
                for pair in windows.windows(2) {
                    let ((before, _), (next, opened)) = (pair[0], pair[1]);
                    if opened == Opened::OnMiss {
                        assert_eq!(next.order, 0, "max {max}: {next:?}");
                        continue;
                    }
                    assert!(next.is_possible(max), "max {max}: {next:?}");
                    assert_eq!(next.async_size, next.size);
                    // The end is a multiple of 2^min(order before + 2, tz(max)), unless
                    // the window lies inside one such block and kept its ramped size.
                    let align = 1u64 << (u32::from(before.order) + 2).min(max.trailing_zeros());
                    assert!(
                        next.end() % align == 0
                            || (next.size == ramp(before.size, max)
                                && next.start / align == (next.end() - 1) / align),
                        "max {max}, reads of {read_pages}: {before:?} -> {next:?}"
                    );
                    let order_want = (u32::from(before.order) + 2)
                        .min(u32::from(ORDER_MAX))
                        .min(next.size.ilog2());
                    assert_eq!(u32::from(next.order), order_want, "max {max}: {next:?}");
                }
                if max >= 2048 {
                    let (last, _) = windows.last().unwrap();
                    assert_eq!(last.folio_order(), ORDER_MAX, "max {max}: {last:?}");
                    if max % 512 == 0 {
                        assert_eq!(last.start % 512, 0, "max {max}: windows start on 2 MiB");
                    }
                }
            }
        }
    }

    #[test]
    fn larger_requests_open_larger_initial_windows() {
        // 8 KiB records: 2 pages is above max/32, so the initial window is x2.
        let windows = scan(100, 2, MAX_128K);
        assert_eq!(windows[0], w(0, 4, 2, 0));
        // At 8 MiB they are x4; the window opened on a miss reads folios of up to a
        // quarter of it, the windows after it those of their order.
        let windows = scan(1000, 2, 2048);
        assert_eq!(windows[0], w(0, 8, 6, 0));
        assert_eq!(windows[0].folio_order(), 1);
        assert_eq!(windows[1], w(8, 32, 32, 2));
        assert_eq!(windows[1].folio_order(), 2);
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
        let state = w(100, 8, 8, 3);
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
            decide_on_miss(w(800, 32, 32, 5), req, MAX_128K),
            Decision::Window(w(0, 4, 3, 0)),
            "a new stream starts again from order 0"
        );
        // Readahead off (max 0): nothing.
        assert_eq!(decide_on_miss(RaState::default(), req, 0), Decision::None);
    }

    #[test]
    fn a_stray_marker_restarts_from_the_next_hole() {
        let state = w(0, 4, 3, 0);
        // 8 pages are present after the reader: the next window ramps from 8, order 2.
        let d = decide_on_marker(state, PageIndex(500), Some(PageIndex(508)), MAX_128K);
        assert_eq!(d, Decision::Window(w(508, 16, 16, 2)));
        assert_eq!(
            decide_on_marker(state, PageIndex(500), None, MAX_128K),
            Decision::None
        );
        // A hole before the reader (a stale walk from another page) starts nothing.
        assert_eq!(
            decide_on_marker(state, PageIndex(500), Some(PageIndex(490)), MAX_128K),
            Decision::None
        );
        // After a window of order 4 the alignment is 2^min(6, tz(32)) = 32 pages: a ramp
        // from 10 present pages (20, to page 520) stops at 512.
        let d = decide_on_marker(w(0, 16, 16, 4), PageIndex(490), Some(PageIndex(500)), 32);
        assert_eq!(d, Decision::Window(w(500, 12, 12, 3)));
    }

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

    #[test]
    fn folio_orders_grow_with_the_window() {
        assert_eq!(folio_order_cap(4), 0);
        assert_eq!(folio_order_cap(16), 2);
        assert_eq!(folio_order_cap(2048), 9);
        // A window started at a marker reads folios of its own order.
        assert_eq!(w(1024, 512, 512, 9).folio_order(), 9);
        assert_eq!(w(20, 60, 60, 4).folio_order(), 4);
        assert_eq!(w(0, 2048, 1024, 0).folio_order(), 9);
    }

    #[test]
    fn the_policy_never_makes_an_impossible_window() {
        use proptest::prelude::*;
        proptest!(ProptestConfig::with_cases(if cfg!(miri) { 3 } else { 256 }), |(start in 0u64..1 << 30, size in 0u32..64, asz in 0u32..64, order in 0u8..12, index in 0u64..1 << 30, pages in 1u64..5000, prev in proptest::option::of(0u64..1 << 30), cached_before in 0u64..6000, max in 0u32..4096)| {
            let size = size.min(max);
            let state = RaState { start, size, async_size: asz.min(size), order };
            let req = MissRequest { index: PageIndex(index), pages, prev_index: prev.map(PageIndex), cached_before: cached_before.min(index) };
            if let Decision::Window(w) = decide_on_miss(state, req, max) {
                prop_assert!(w.is_possible(max) && w.size > 0);
                prop_assert_eq!(w.start, index);
                prop_assert_eq!(w.order, 0);
            }
            if let Decision::Window(w) = decide_on_marker(state, PageIndex(index), Some(PageIndex(index + 3)), max) {
                prop_assert!(w.is_possible(max) && w.size > 0 && w.async_size == w.size);
                prop_assert!(w.folio_order() <= ORDER_MAX && 1u32 << w.folio_order() <= w.size);
            }
        });
    }

    /// A 64 MiB cache: its own limit is 2,048 pages (8 MiB), a period 2,048 pages.
    const FRAMES_64M: u32 = 16384;

    /// Ends one period of `bounds`: `wasted` pages evicted unread, then windows of
    /// `window` pages read ahead until the period is full.
    fn period(thrash: Thrash, bounds: &LimitBounds, wasted: u64, window: u32) -> Thrash {
        let mut t = thrash.on_wasted(wasted);
        loop {
            t = t.on_read_ahead(u64::from(window), window, bounds);
            if t.read_ahead_pages == 0 {
                return t;
            }
        }
    }

    #[test]
    fn a_cache_that_wastes_nothing_keeps_its_own_limit() {
        for frames in [64, 4096, FRAMES_64M, 1 << 17, 1 << 20] {
            let b = LimitBounds::for_cache(frames);
            let own = window_pages_limit(frames);
            let mut t = Thrash::new(&b);
            assert_eq!(t.limit_pages(), own);
            for _ in 0..50 {
                t = period(t, &b, 0, own);
                assert_eq!(t.limit_pages(), own, "{frames} frames: {t:?}");
            }
            // One or two streams get all of it (the kernel's windows: readahead_trace).
            for streams in [0, 1, 2] {
                let s = Streams {
                    now: streams,
                    ..Streams::default()
                };
                assert_eq!(shared_limit_pages(&t, &s, &b), own, "{frames} frames");
            }
        }
        // 512 MiB (readahead_trace's cache): nothing below the 32 MiB of the state word.
        let b = LimitBounds::for_cache(1 << 17);
        assert_eq!(Thrash::new(&b).limit_pages(), WINDOW_PAGES_LIMIT);
    }

    #[test]
    fn a_thrashed_period_halves_the_windows_in_use_and_heavy_waste_quarters_them() {
        let b = LimitBounds::for_cache(FRAMES_64M);
        assert_eq!(b.period_pages, 2048);
        let fresh = Thrash::new(&b);
        // Windows of 512 pages (bounded by the stream share, not this limit): 10% wasted
        // halves them, not the limit of 2,048 that bounded nothing.
        assert_eq!(period(fresh, &b, 205, 512).limit_pages(), 256);
        // At most 1/16 wasted is no thrash; more than half quarters.
        assert_eq!(period(fresh, &b, 128, 512).limit_pages(), 2048);
        assert_eq!(period(fresh, &b, 1100, 512).limit_pages(), 128);
        // Windows not a power of two count as the power of two below them.
        assert_eq!(period(fresh, &b, 205, 448).limit_pages(), 128);
        // Forced readahead only (no window): the limit itself is halved.
        let t = (0..4).fold(fresh.on_wasted(300), |t, _| t.on_read_ahead(512, 0, &b));
        assert_eq!((t.read_ahead_pages, t.limit_pages()), (0, 1024));
        // Never below 128 KiB, however long it thrashes.
        let mut t = fresh;
        for _ in 0..40 {
            t = period(t, &b, 2048, t.limit_pages());
            assert!(t.limit_pages() >= THRASH_FLOOR_PAGES, "{t:?}");
        }
        assert_eq!(t.limit_pages(), THRASH_FLOOR_PAGES);
        // A cache whose own limit is below the floor keeps its own.
        let tiny = LimitBounds::for_cache(64);
        let t = period(Thrash::new(&tiny), &tiny, 8, 8);
        assert_eq!(t.limit_pages(), 8);
    }

    #[test]
    fn the_limit_settles_before_it_shrinks_again() {
        let b = LimitBounds::for_cache(FRAMES_64M);
        let t = period(Thrash::new(&b), &b, 300, 2048);
        assert_eq!(t.limit_pages(), 1024);
        // The next period still sees the waste of the windows before the change: held.
        let t = period(t, &b, 300, 1024);
        assert_eq!(t.limit_pages(), 1024);
        // The one after it judges the new windows.
        let t = period(t, &b, 300, 1024);
        assert_eq!(t.limit_pages(), 512);
        assert_eq!(t.settled_periods, 0);
    }

    #[test]
    fn clean_periods_grow_the_limit_back_slowly() {
        let b = LimitBounds::for_cache(FRAMES_64M);
        let mut t = Thrash::new(&b);
        while t.limit_pages() > THRASH_FLOOR_PAGES {
            t = period(t, &b, 2048, t.limit_pages());
        }
        // GROW_PERIODS clean periods per doubling, from 128 KiB back to 8 MiB.
        let mut periods = 0;
        while t.limit_pages() < 2048 {
            let before = t.limit_pages();
            t = period(t, &b, 0, before);
            periods += 1;
            assert!(t.limit_pages() == before || t.limit_pages() == before * 2);
        }
        assert_eq!(periods, u32::from(GROW_PERIODS) * 6, "2,048 / 32 = 2^6");
        // A period with a little waste (between 1/64 and 1/16) breaks the run.
        let mut t = period(Thrash::new(&b), &b, 300, 2048);
        for _ in 0..SETTLE_PERIODS {
            t = period(t, &b, 0, 1024);
        }
        t = period(t, &b, 64, 1024);
        for _ in 0..GROW_PERIODS - 1 {
            t = period(t, &b, 0, 1024);
        }
        assert_eq!(
            t.limit_pages(),
            1024,
            "only {GROW_PERIODS} in a row grow it"
        );
        t = period(t, &b, 0, 1024);
        assert_eq!(t.limit_pages(), 2048);
        // Never above the cache's own.
        for _ in 0..20 {
            t = period(t, &b, 0, 2048);
        }
        assert_eq!(t.limit_pages(), 2048);
    }

    #[test]
    fn only_a_full_period_is_judged() {
        let b = LimitBounds::for_cache(FRAMES_64M);
        let t = Thrash::new(&b)
            .on_wasted(100_000)
            .on_read_ahead(2047, 2048, &b);
        assert_eq!(t.limit_pages(), 2048, "waste alone changes nothing");
        assert_eq!(t.wasted_pages, 100_000);
        let t = t.on_read_ahead(1, 1, &b);
        assert_eq!(t.limit_pages(), 512, "the full period was heavy");
        assert_eq!(
            (t.read_ahead_pages, t.wasted_pages, t.largest_shift),
            (0, 0, 0)
        );
    }

    #[test]
    fn streams_share_the_cache() {
        let b = LimitBounds::for_cache(FRAMES_64M);
        let share = |now: u16, before: u16| {
            Streams {
                now,
                before,
                ..Streams::default()
            }
            .share_pages(&b)
        };
        // A quarter of 16,384 pages among n streams, a power of two, within 32..=2048.
        assert_eq!(share(1, 0), 2048);
        assert_eq!(share(2, 0), 2048);
        assert_eq!(share(3, 0), 1024);
        assert_eq!(share(16, 0), 256);
        assert_eq!(share(3, 16), 256, "the larger of the two epochs");
        assert_eq!(share(1000, 0), THRASH_FLOOR_PAGES);
        assert_eq!(share(u16::MAX, u16::MAX), THRASH_FLOOR_PAGES);
        // Epochs: a stream is forgotten two epochs after its last window.
        let mut s = Streams::default();
        for _ in 0..16 {
            s = s.with_stream();
        }
        for _ in 0..EPOCH_PERIODS - 1 {
            s = s.on_period_end();
        }
        assert_eq!((s.epoch, s.now, s.active()), (0, 16, 16));
        s = s.on_period_end();
        assert_eq!((s.epoch, s.now, s.before, s.active()), (1, 0, 16, 16));
        s = s.with_stream();
        for _ in 0..EPOCH_PERIODS {
            s = s.on_period_end();
        }
        assert_eq!((s.epoch, s.now, s.before, s.active()), (2, 0, 1, 1));
        // The epoch number wraps within its bits.
        let last = Streams {
            epoch: (1 << EPOCH_BITS) - 1,
            periods: EPOCH_PERIODS - 1,
            ..Streams::default()
        };
        assert_eq!(last.on_period_end().epoch, 0);
    }

    #[test]
    fn a_handle_counts_once_per_epoch_and_limits_what_it_is_given() {
        // Under loom in tests/loom_models.rs (it compiles this file against its atomics).
        crate::primitive::model(|| {
            let limit = ReadaheadLimit::new(LimitBounds::for_cache(FRAMES_64M));
            let cells: Vec<RaCell> = (0..16).map(|_| RaCell::new(4096)).collect();
            assert_eq!(limit.limit_pages(), 2048);
            for cell in &cells {
                limit.note_window(cell);
                limit.note_window(cell);
            }
            assert_eq!(limit.streams().now, 16);
            assert_eq!(limit.limit_pages(), 256);
            // An epoch (half the cache read ahead, by windows of 256 pages) later, the
            // streams that went on are counted again, once each.
            for _ in 0..u64::from(EPOCH_PERIODS) * 8 {
                limit.note_read_ahead(256, 256);
            }
            assert_eq!(limit.streams().epoch, 1);
            for cell in &cells[..4] {
                limit.note_window(cell);
                limit.note_window(cell);
            }
            assert_eq!((limit.streams().now, limit.streams().before), (4, 16));
            assert_eq!(limit.limit_pages(), 256, "the last epoch's 16 still count");
            for _ in 0..u64::from(EPOCH_PERIODS) * 8 {
                limit.note_read_ahead(256, 256);
            }
            assert_eq!(limit.limit_pages(), 1024, "4 streams: 16,384 / 16");
            // Waste, told by reclaim, halves the windows in use (a quarter wasted).
            limit.note_wasted(512);
            limit.note_read_ahead(2048, 1024);
            assert_eq!(limit.thrash().limit_pages(), 512);
            assert_eq!(limit.limit_pages(), 512);
        });
    }

    #[test]
    fn the_limit_words_round_trip() {
        let b = LimitBounds::for_cache(1 << 28);
        assert!(b.period_pages <= COUNT_MAX / 2);
        for t in [
            Thrash::new(&b),
            Thrash {
                limit_shift: WINDOW_PAGES_LIMIT.ilog2() as u8,
                settled_periods: PERIODS_MAX,
                clean_periods: PERIODS_MAX,
                largest_shift: WINDOW_PAGES_LIMIT.ilog2() as u8 + 1,
                read_ahead_pages: COUNT_MAX,
                wasted_pages: COUNT_MAX,
            },
        ] {
            assert_eq!(Thrash::unpack(t.pack()), t);
        }
        let saturated = Thrash::default().on_wasted(COUNT_MAX).on_wasted(COUNT_MAX);
        assert_eq!(saturated.wasted_pages, COUNT_MAX);
        for s in [
            Streams::default(),
            Streams {
                epoch: (1 << EPOCH_BITS) - 1,
                periods: EPOCH_PERIODS - 1,
                now: u16::MAX,
                before: u16::MAX,
            },
        ] {
            assert_eq!(Streams::unpack(s.pack()), s);
            assert_eq!(s.with_stream().now, s.now.saturating_add(1));
        }
    }

    #[test]
    fn the_limit_is_always_a_power_of_two_within_its_bounds() {
        use proptest::prelude::*;
        proptest!(ProptestConfig::with_cases(if cfg!(miri) { 3 } else { 256 }), |(frames in 16u32..1 << 22, events in proptest::collection::vec((0u8..3, 0u64..20_000, 0u32..9000), 0..200))| {
            let b = LimitBounds::for_cache(frames);
            let (mut t, mut s) = (Thrash::new(&b), Streams::default());
            for (kind, pages, window) in events {
                match kind {
                    0 => t = t.on_wasted(pages),
                    1 => {
                        t = t.on_read_ahead(pages, window.min(WINDOW_PAGES_LIMIT), &b);
                        if t.read_ahead_pages == 0 {
                            s = s.on_period_end();
                        }
                    }
                    _ => s = s.with_stream(),
                }
                prop_assert_eq!(Thrash::unpack(t.pack()), t);
                prop_assert_eq!(Streams::unpack(s.pack()), s);
                let limit = shared_limit_pages(&t, &s, &b);
                prop_assert!(limit.is_power_of_two());
                prop_assert!(limit <= window_pages_limit(frames).max(1));
                prop_assert!(limit >= THRASH_FLOOR_PAGES.min(window_pages_limit(frames).max(1)));
            }
        });
    }
}
