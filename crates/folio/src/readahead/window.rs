//! The readahead policy: the window a miss or a marker opens (the `readahead` module's
//! overview draws it and gives the rules), as pure functions of (state, request, what the
//! index holds): no I/O, no lock, no clock, so that they can be tested exhaustively (below,
//! and the `readahead` fuzz target).
//!
//! Design: `RaState` is a window, the value the policy maps; `decide_on_miss` opens the
//! initial window of a sequential miss (`initial_size`), `decide_on_marker` the next one
//! at a marker (`ramp`, aligned to the folio order reached: `async_window`). The caller
//! installs what they decide in the handle's state word (`cell::RaCell::update`), and
//! decides again from the new state when another thread installed a window first.
//!
//! Protection: none needed: values only.
//!
//! Limits: windows of at most `WINDOW_PAGES_LIMIT` pages (32 MiB) that start below
//! `START_PAGES_LIMIT` (2^36 pages, 256 TiB): what the handle's state word holds
//! (`cell`); pages beyond are read without readahead. The order the alignment follows is
//! capped at `ORDER_MAX` (2 MiB folios), whatever largest folio the cache is built with
//! (the kernel caps it at the mapping's).

use crate::types::{PageIndex, ORDER_MAX};

/// The largest window a handle uses: 32 MiB, a power of two (so ramped-up windows stay
/// aligned to the largest folio), below the 14 bits the packed state has for a size.
pub const WINDOW_PAGES_LIMIT: u32 = 1 << 13;
/// Readahead describes pages below this index only (the 36 bits of the packed start).
pub const START_PAGES_LIMIT: u64 = 1 << 36;

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

#[cfg(test)]
mod tests {
    use super::super::testing::w;
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
}
