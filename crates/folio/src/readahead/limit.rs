//! The cache-wide readahead limit: many streams in one cache (issue 16).
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
//! Protection: the limit's two words are replaced by CAS only (`cas_loop`); its bounds
//! follow the cache's capacity, one relaxed word (`ReadaheadLimit::set_frames`). A handle's stream epoch is a word of its own
//! (`RaCell::enter_epoch`).
//!
//! Limits: the limit is a power of two, at least 128 KiB (`THRASH_FLOOR_PAGES`) and at
//! most the cache's own (`window_pages_limit`: an eighth of the cache, at most
//! `WINDOW_PAGES_LIMIT`); a period's counts saturate at 2^24 pages; epoch numbers wrap at
//! 2^30.

use super::cell::RaCell;
use super::window::WINDOW_PAGES_LIMIT;
use crate::primitive::{AtomicU32, AtomicU64, Ordering};

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
    /// The capacity the bounds are made from (`LimitBounds::for_cache`), in frames: it
    /// follows the cache's capacity (`set_frames`).
    frames: AtomicU32,
}

impl ReadaheadLimit {
    pub fn new(bounds: LimitBounds) -> ReadaheadLimit {
        ReadaheadLimit {
            thrash: AtomicU64::new(Thrash::new(&bounds).pack()),
            streams: AtomicU64::new(Streams::default().pack()),
            frames: AtomicU32::new(bounds.frames),
        }
    }

    /// The bounds for the capacity now (a few integer operations).
    fn bounds(&self) -> LimitBounds {
        LimitBounds::for_cache(self.frames.load(Ordering::Relaxed))
    }

    /// The capacity changed: later windows share `frames`, and the thrash feedback's
    /// limit moves inside the new bounds at its next period (a window is capped by the
    /// share meanwhile).
    pub fn set_frames(&self, frames: u32) {
        self.frames.store(frames, Ordering::Relaxed);
    }

    /// The cache-wide maximum window now, in pages: three loads, no write.
    pub fn limit_pages(&self) -> u32 {
        shared_limit_pages(&self.thrash(), &self.streams(), &self.bounds())
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
        let bounds = self.bounds();
        let new = cas_loop(&self.thrash, |word| {
            Thrash::unpack(word)
                .on_read_ahead(pages, window_pages, &bounds)
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
        if !cell.enter_epoch(epoch) {
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
