//! Which pages each chunk of the arena gets: 4 KiB or huge (`ArenaPages`), decided by
//! what was allocated lately and for what (`FolioUse`).
//!
//! Design: the mapping is advised once at build (`MADV_HUGEPAGE` for `Huge`,
//! `MADV_NOHUGEPAGE` otherwise), and under `Auto` each chunk again as it is claimed,
//! before anything touches it (`advise_chunk`): huge pages when most frames allocated
//! lately were large (`Demand`) and huge pages' first touch, as the populator measured
//! it here, costs what they are worth (`TouchCost`), else 4 KiB pages. A chunk's decision
//! is kept as one bit
//! (`huge_chunks`), which the hit's prefetch (`copy`) and the stats (`huge_bytes`) read.
//! `prefault` makes an `Auto` arena all huge. The figures behind the choice are on
//! `ArenaPages`.
//!
//! Protection: `policy` changes only under `&mut Arena` (`prefault`, right after build).
//! `Demand`'s counts are noted under the free lists' lock (`buddy`) and halved racily by
//! the claimer of a chunk: a lost count only shifts a heuristic. A chunk's bit in
//! `huge_chunks` is set by its claimer before the chunk is listed, so before any of its
//! frames can be cached, and read relaxed.
//!
//! Limits: advice only: where the kernel has no transparent huge pages, `Huge` is
//! `Small`. A chunk's pages are decided once, when it is claimed.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::types::{FrameId, Order, PAGE_BYTES};

use super::{Arena, CHUNK_FRAMES};

/// How the kernel pages the arena's memory: the trade between the cost of faulting fresh
/// memory in (paid once per page of the capacity, on the miss path or by the populator),
/// the cost of an O_DIRECT read into it (a read pins each 4 KiB page; into huge pages a
/// 2 MiB read is one segment, into 4 KiB pages it is split), and the TLB reach of a hit.
///
/// Measured on the 2-core VM of the README (docs/benchmarks.md, "Arena pages"): a first
/// touch runs at 2.4-2.6 GB/s with 4 KiB pages and at 0.35 GB/s with huge pages (6-8 GB/s
/// only for memory a huge-page user freed seconds before: the host backs a fresh 2 MiB
/// guest page lazily). db_bench `readrandom` from a cold cache ran at about 0.85x the
/// kernel on 4 KiB pages and 0.6x on huge pages; a cold one-thread scan at 0.77x on 4 KiB
/// pages and 0.95x on huge pages. `Auto` gives each kind of read the pages it is fastest
/// on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ArenaPages {
    /// Chunk by chunk, as the arena grows (the default): a chunk is advised for huge pages
    /// when most frames allocated lately went to readahead windows or to large folios
    /// (`LARGE_ORDER` and up), else for 4 KiB pages (random reads' small folios;
    /// `FolioUse`). Huge pages only while their first touch, measured as the populator
    /// faults chunks in, costs at most twice that of 4 KiB pages (`TouchCost`); otherwise
    /// one chunk in 16 of the large folios' measures them again.
    #[default]
    Auto,
    /// 4 KiB pages (`MADV_NOHUGEPAGE`) for all of it.
    Small,
    /// Transparent huge pages advised (`MADV_HUGEPAGE`) for all of it: an order-9 folio is
    /// one 2 MiB page where the kernel can give one. Advice only: without THP it is
    /// `Small`.
    Huge,
}

/// The pages one range of the arena is advised for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PageKind {
    /// 4 KiB pages (`MADV_NOHUGEPAGE`).
    Small,
    /// Transparent huge pages (`MADV_HUGEPAGE`).
    Huge,
}

/// Folios of this order and up (64 KiB) count as large for `ArenaPages::Auto`: readahead
/// windows of a sequential reader, which reach it after a few reads; random reads of
/// storage engines' blocks (4-32 KiB) stay below it.
const LARGE_ORDER: u8 = 4;

/// What a folio is allocated for, which `ArenaPages::Auto` weighs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FolioUse {
    /// A readahead window's folio: memory filled in bulk by a sequential reader, large
    /// for `Auto` whatever its order (the first windows of a file, and every window of a
    /// small file, have small folios: 8,000 64 KiB files read once made only order-2
    /// and order-3 folios, and their hits then cost 1.6-2x a memcpy on 4 KiB pages).
    Readahead,
    /// The pages a read or a write asked for: large for `Auto` from `LARGE_ORDER` up.
    Request,
}

/// What `ArenaPages::Auto` decides from: frames allocated lately, small and large
/// apart (`FolioUse`). Counted under the free lists' lock (so never contended on their
/// own), halved at each decision so that the last few chunks' worth weighs most.
#[derive(Debug, Default)]
struct Demand {
    small_frames: AtomicU64,
    large_frames: AtomicU64,
    /// The last decision: huge pages.
    last_huge: AtomicBool,
    /// What a first touch of each kind has cost here lately.
    touch: TouchCost,
}

/// What a chunk's first touch costs on this machine, per kind of page: the populator's
/// time to fault a chunk in (`Arena::note_first_touch`), averaged over the last few
/// chunks of each kind, in ns per chunk (0: not measured yet). It depends on the machine:
/// on the README's VM a huge page faulted in at 0.35-0.5 GB/s after a while up (the host
/// backs a fresh 2 MiB page lazily), 6-8 GB/s seconds after another huge-page user freed
/// it, while 4 KiB pages ran at 2.4-2.6 GB/s; on bare metal both are a few hundred ns
/// per 4 KiB.
#[derive(Debug, Default)]
struct TouchCost {
    small_ns: AtomicU64,
    huge_ns: AtomicU64,
    /// Chunks that wanted huge pages and got 4 KiB ones because huge ones cost too much:
    /// every `HUGE_RETRY_EVERY`th gets huge pages anyway, so that the cost is measured
    /// again (it changes as the host's memory does).
    huge_declined: AtomicU64,
}

/// Huge pages are worth their first touch up to this many times the cost of 4 KiB
/// pages': they read a 2 MiB folio in one segment and hit with fewer TLB misses (a cold
/// one-thread scan ran at 0.95x the kernel on huge pages and 0.77x on 4 KiB ones when
/// both faulted in at ~2.5 GB/s), but a scan that outruns the populator pays the first
/// touch itself (0.27x the kernel with huge pages at 0.5 GB/s).
const HUGE_TOUCH_RATIO_MAX: u64 = 2;
/// One chunk in this many that wanted huge pages, but was declined them, gets them to
/// measure their cost again (`TouchCost::huge_declined`).
const HUGE_RETRY_EVERY: u64 = 16;

impl TouchCost {
    /// Notes one chunk's first touch: `ns` for a chunk of `kind`.
    fn note(&self, kind: PageKind, ns: u64) {
        let average = match kind {
            PageKind::Small => &self.small_ns,
            PageKind::Huge => &self.huge_ns,
        };
        // A quarter of the new sample: the last few chunks weigh most. Racy (the
        // populator is the usual one noting): a lost sample only shifts a heuristic.
        let old = average.load(Ordering::Relaxed);
        let new = if old == 0 { ns } else { (old * 3 + ns) / 4 };
        average.store(new.max(1), Ordering::Relaxed);
    }

    /// Whether a chunk that demand wants huge gets huge pages: yes until huge pages were
    /// measured (a huge chunk measures itself), then while they cost at most
    /// `HUGE_TOUCH_RATIO_MAX` times as much as 4 KiB pages, and otherwise (or while 4 KiB
    /// pages are not measured yet: the 4 KiB chunks declining gives measure them, if the
    /// populator faults them in) once in `HUGE_RETRY_EVERY`.
    fn huge_worth_it(&self) -> bool {
        let huge = self.huge_ns.load(Ordering::Relaxed);
        let small = self.small_ns.load(Ordering::Relaxed);
        if huge == 0 {
            return true;
        }
        if small != 0 && huge <= small.saturating_mul(HUGE_TOUCH_RATIO_MAX) {
            return true;
        }
        self.huge_declined.fetch_add(1, Ordering::Relaxed) % HUGE_RETRY_EVERY
            == HUGE_RETRY_EVERY - 1
    }
}

impl Demand {
    fn note(&self, order: Order, use_: FolioUse) {
        let counter = if use_ == FolioUse::Readahead || order.get() >= LARGE_ORDER {
            &self.large_frames
        } else {
            &self.small_frames
        };
        counter.fetch_add(order.pages(), Ordering::Relaxed);
    }

    /// Decides a chunk's pages: huge if most frames allocated lately were large, and
    /// huge pages' first touch costs what they are worth here (`TouchCost`). With
    /// nothing allocated since the counts halved to zero, the last decision again (and
    /// before any, small: the cheaper guess to fault in): the populator claims chunks in
    /// bursts after a readahead window, and each claim halves the counts, so a cold
    /// scan's counts reached zero between windows and sent one chunk in ten to 4 KiB
    /// pages. Halves both counts, so that each decision weighs the latest demand most.
    fn decide(&self) -> PageKind {
        let small = self.small_frames.load(Ordering::Relaxed);
        let large = self.large_frames.load(Ordering::Relaxed);
        // Racy halving: a count lost to a concurrent `note` only shifts a heuristic.
        self.small_frames.store(small / 2, Ordering::Relaxed);
        self.large_frames.store(large / 2, Ordering::Relaxed);
        let huge = if small == 0 && large == 0 {
            self.last_huge.load(Ordering::Relaxed)
        } else {
            large > small
        };
        self.last_huge.store(huge, Ordering::Relaxed);
        if huge && self.touch.huge_worth_it() {
            PageKind::Huge
        } else {
            PageKind::Small
        }
    }
}

/// The arena's pages, chunk by chunk (module docs).
#[derive(Debug)]
pub(super) struct ChunkPages {
    /// What the arena was built with; `prefault` turns `Auto` into `Huge`.
    policy: ArenaPages,
    /// For `ArenaPages::Auto`, what it decides from.
    demand: Demand,
    /// One bit per chunk, set when the chunk is advised for huge pages (`prefetch`,
    /// `huge_bytes`).
    huge_chunks: Box<[AtomicU64]>,
}

impl ChunkPages {
    pub(super) fn new(policy: ArenaPages, frame_count: u32) -> ChunkPages {
        ChunkPages {
            policy,
            demand: Demand::default(),
            huge_chunks: (0..frame_count.div_ceil(CHUNK_FRAMES).div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    /// The pages the whole mapping is advised for at build: `Auto` starts small and
    /// advises chunk by chunk (`advise_chunk`).
    pub(super) fn kind_at_build(&self) -> PageKind {
        match self.policy {
            ArenaPages::Huge => PageKind::Huge,
            ArenaPages::Auto | ArenaPages::Small => PageKind::Small,
        }
    }
}

impl Arena {
    /// Counts an allocation for `ArenaPages::Auto`'s next decision.
    ///
    /// Context: under the free lists' lock (`buddy`).
    pub(super) fn note_allocated(&self, order: Order, use_: FolioUse) {
        self.pages.demand.note(order, use_);
    }

    /// Advises a claimed chunk's memory for the pages it gets, and records the decision.
    ///
    /// Context: the caller claimed the chunk and nothing touched it yet (`chunk`).
    pub(super) fn advise_chunk(&self, chunk: &Range<u32>) {
        let kind = match self.pages.policy {
            ArenaPages::Small => PageKind::Small,
            ArenaPages::Huge => PageKind::Huge,
            ArenaPages::Auto => self.pages.demand.decide(),
        };
        if kind == PageKind::Huge {
            if self.pages.policy == ArenaPages::Auto {
                // The mapping was advised small at `new`. SAFETY: the chunk lies inside
                // the arena's mapping, and it is virgin (`chunk`'s invariants): nothing
                // references its pages yet.
                unsafe {
                    advise(
                        self.frame_ptr(FrameId(chunk.start)),
                        (chunk.end - chunk.start) as usize * PAGE_BYTES,
                        PageKind::Huge,
                    );
                }
            }
            let chunk_index = chunk.start / CHUNK_FRAMES;
            self.pages.huge_chunks[chunk_index as usize / 64]
                .fetch_or(1 << (chunk_index % 64), Ordering::Relaxed);
        }
    }

    /// The pages a prefault gets: under `ArenaPages::Auto` the whole arena is advised for
    /// huge pages, and the policy becomes `Huge` (`prefault` says why).
    ///
    /// Context: `prefault`, before any chunk is claimed.
    pub(super) fn prefault_pages(&mut self) {
        if self.pages.policy == ArenaPages::Auto {
            // SAFETY: the whole arena, inside its mapping; no frame is referenced yet.
            unsafe {
                advise(
                    self.base.as_ptr(),
                    self.frame_count as usize * PAGE_BYTES,
                    PageKind::Huge,
                )
            };
            self.pages.policy = ArenaPages::Huge;
        }
    }

    /// Notes what the first touch of a chunk of `frames` frames at `start` cost
    /// (`populate`): `ArenaPages::Auto`'s next decisions weigh it.
    pub(super) fn note_first_touch(&self, start: FrameId, frames: u32, took: Duration) {
        if frames != CHUNK_FRAMES {
            return; // the arena's last, shorter chunk: not comparable
        }
        let kind = if self.on_huge_chunk(start) {
            PageKind::Huge
        } else {
            PageKind::Small
        };
        self.pages
            .demand
            .touch
            .note(kind, took.as_nanos().min(u128::from(u64::MAX)) as u64);
    }

    /// Whether `frame`'s chunk was advised for huge pages (a relaxed look: the bit is set
    /// before the chunk's frames are listed, so before any of them can be cached).
    #[inline]
    pub(super) fn on_huge_chunk(&self, frame: FrameId) -> bool {
        let chunk = frame.0 / CHUNK_FRAMES;
        self.pages
            .huge_chunks
            .get(chunk as usize / 64)
            .is_some_and(|bits| bits.load(Ordering::Relaxed) & (1 << (chunk % 64)) != 0)
    }

    /// Bytes of the chunks claimed so far advised for huge pages.
    pub fn huge_bytes(&self) -> u64 {
        let chunks = self.frame_count.div_ceil(CHUNK_FRAMES);
        let frames: u64 = (0..chunks)
            .filter(|&chunk| self.on_huge_chunk(FrameId(chunk * CHUNK_FRAMES)))
            .map(|chunk| u64::from(CHUNK_FRAMES.min(self.frame_count - chunk * CHUNK_FRAMES)))
            .sum();
        frames * PAGE_BYTES as u64
    }
}

/// Whether shared memory (a segment) can get transparent huge pages here: the kernel's
/// `shmem_enabled` is `always`, `within_size` or `advise` (then `MADV_HUGEPAGE` asks).
pub fn shared_huge_pages() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled").is_ok_and(
        |modes| {
            ["[always]", "[within_size]", "[advise]", "[force]"]
                .iter()
                .any(|m| modes.contains(m))
        },
    )
}

/// Advises `[base, base + bytes)` for the pages of `kind`. Advice only: a
/// failure (THP not built in) leaves the kernel's default, which is harmless, so the
/// result is ignored on purpose. Changing a range's advice splits its mapping (adjacent
/// ranges of the same advice merge again) and takes the address space's lock for a few
/// microseconds, once per 2 MiB chunk at most.
///
/// # Safety
/// The range lies inside the arena's mapping.
pub(super) unsafe fn advise(base: *mut u8, bytes: usize, kind: PageKind) {
    let advice = match kind {
        PageKind::Small => libc::MADV_NOHUGEPAGE,
        PageKind::Huge => libc::MADV_HUGEPAGE,
    };
    // SAFETY: the caller guarantees the range is inside our mapping; madvise with these
    // advices changes no contents.
    unsafe { libc::madvise(base.cast::<libc::c_void>(), bytes, advice) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::HUGE_BYTES;

    /// The `VmFlags` and `AnonHugePages` of the mapping that holds `addr`, from
    /// /proc/self/smaps.
    fn smaps_of(addr: usize) -> (String, u64) {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        let (mut flags, mut huge_kib) = (String::new(), 0);
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = first.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = (lo..hi).contains(&addr);
                    continue;
                }
            }
            if !inside {
                continue;
            }
            if let Some(rest) = line.strip_prefix("VmFlags:") {
                flags = rest.trim().to_string();
            } else if let Some(rest) = line.strip_prefix("AnonHugePages:") {
                huge_kib = rest.trim().trim_end_matches("kB").trim().parse().unwrap();
            }
        }
        (flags, huge_kib)
    }

    #[test]
    fn pages_are_advised_as_asked() {
        // Two chunks, prefaulted: small pages are advised no-huge (`nh`) and get none;
        // huge pages are advised (`hg`), and so is a prefaulted `Auto` arena. Whether the
        // kernel then gives a huge page depends on THP being on and on free memory, so
        // only the advice is checked.
        for (pages, flag) in [
            (ArenaPages::Small, "nh"),
            (ArenaPages::Huge, "hg"),
            (ArenaPages::Auto, "hg"), // prefaulted: all huge
        ] {
            let mut arena = Arena::new(CHUNK_FRAMES * 2, pages).unwrap();
            arena.prefault();
            let (flags, huge_kib) = smaps_of(arena.base.as_ptr() as usize);
            assert!(
                flags.split_whitespace().any(|f| f == flag),
                "{pages:?}: VmFlags '{flags}' lack '{flag}'"
            );
            if pages == ArenaPages::Small {
                assert_eq!(huge_kib, 0, "a small-page arena got huge pages");
            }
        }
    }

    #[test]
    fn auto_pages_follow_what_was_allocated_lately() {
        let arena = Arena::new(CHUNK_FRAMES * 6, ArenaPages::Auto).unwrap();
        let flags_at = |chunk: u32| {
            let frame = arena.frame_ptr(FrameId(chunk * CHUNK_FRAMES)) as usize;
            smaps_of(frame).0
        };
        let has = |flags: &str, flag: &str| flags.split_whitespace().any(|f| f == flag);
        // Nothing allocated yet: the first chunk is small. A whole chunk of a large folio
        // is still decided by the one small frame before it; the next is huge.
        arena.alloc(Order::new(0), FolioUse::Request).unwrap();
        arena.alloc(Order::MAX, FolioUse::Request).unwrap();
        arena.alloc(Order::MAX, FolioUse::Request).unwrap();
        assert_eq!(arena.claimed_frames(), CHUNK_FRAMES * 3);
        assert!(has(&flags_at(0), "nh"), "chunk 0: {}", flags_at(0));
        assert!(has(&flags_at(1), "nh"), "chunk 1: {}", flags_at(1));
        assert!(has(&flags_at(2), "hg"), "chunk 2: {}", flags_at(2));
        assert_eq!(arena.huge_bytes(), HUGE_BYTES as u64);
        // Small folios again: the large ones weigh less at every chunk, and within two
        // chunks the next one is small again.
        let claimed = || arena.claimed_frames() / CHUNK_FRAMES;
        while claimed() < 5 {
            arena.alloc(Order::new(0), FolioUse::Request).unwrap();
        }
        assert!(has(&flags_at(3), "hg"), "chunk 3: {}", flags_at(3));
        assert!(has(&flags_at(4), "nh"), "chunk 4: {}", flags_at(4));
        assert_eq!(arena.huge_bytes(), 2 * HUGE_BYTES as u64);
    }

    #[test]
    fn auto_pages_count_readahead_as_large_at_any_order() {
        let arena = Arena::new(CHUNK_FRAMES * 3 + 7, ArenaPages::Auto).unwrap();
        let claimed = || arena.claimed_frames() / CHUNK_FRAMES;
        // A chunk of 4 KiB readahead folios (a small file's windows): the next is huge.
        while claimed() < 2 {
            arena.alloc(Order::ZERO, FolioUse::Readahead).unwrap();
        }
        assert!(!arena.on_huge_chunk(FrameId(0)), "nothing allocated: small");
        assert!(arena.on_huge_chunk(FrameId(CHUNK_FRAMES)));
        assert!(arena.on_huge_chunk(FrameId(2 * CHUNK_FRAMES - 1)));
        assert_eq!(arena.huge_bytes(), HUGE_BYTES as u64);
        // A chunk of the same folios asked for by reads outweighs the halved readahead.
        while arena.alloc(Order::ZERO, FolioUse::Request).is_some() {}
        assert!(!arena.on_huge_chunk(FrameId(2 * CHUNK_FRAMES)));
        assert!(
            !arena.on_huge_chunk(FrameId(3 * CHUNK_FRAMES + 6)),
            "the odd end chunk"
        );
        assert!(
            !arena.on_huge_chunk(FrameId(4 * CHUNK_FRAMES)),
            "past the arena"
        );
        // A prefetch anywhere in the arena, huge or not, is only a hint.
        for frame in [0, CHUNK_FRAMES, 3 * CHUNK_FRAMES + 6] {
            arena.prefetch(FrameId(frame), 0, PAGE_BYTES);
        }
    }

    #[test]
    fn huge_pages_are_declined_while_their_first_touch_costs_too_much() {
        let demand = Demand::default();
        let wanting_huge = |demand: &Demand| {
            demand.note(Order::MAX, FolioUse::Request);
            demand.decide()
        };
        assert_eq!(wanting_huge(&demand), PageKind::Huge, "nothing measured");
        demand.touch.note(PageKind::Huge, 5_000_000);
        // Huge pages measured, 4 KiB ones not: declined, so that a 4 KiB chunk measures
        // them, but not for good (the populator may never fault one in).
        let huge = (0..HUGE_RETRY_EVERY)
            .filter(|_| wanting_huge(&demand) == PageKind::Huge)
            .count();
        assert_eq!(huge, 1, "4 KiB pages not measured: huge pages once in 16");
        demand.touch.note(PageKind::Small, 1_000_000);
        // Five times 4 KiB pages' cost: declined, but one chunk in HUGE_RETRY_EVERY gets
        // huge pages to measure them again.
        let huge = (0..2 * HUGE_RETRY_EVERY)
            .filter(|_| wanting_huge(&demand) == PageKind::Huge)
            .count();
        assert_eq!(huge, 2);
        // Those retries find huge pages cheap again: huge.
        for _ in 0..8 {
            demand.touch.note(PageKind::Huge, 1_500_000);
        }
        assert_eq!(wanting_huge(&demand), PageKind::Huge);
    }

    #[test]
    fn auto_pages_keep_the_last_decision_while_nothing_is_allocated() {
        let demand = Demand::default();
        assert_eq!(demand.decide(), PageKind::Small, "before any demand");
        demand.note(Order::ZERO, FolioUse::Readahead);
        assert_eq!(demand.decide(), PageKind::Huge);
        // The populator's burst of claims after a window: the counts halve to zero.
        for _ in 0..8 {
            assert_eq!(demand.decide(), PageKind::Huge);
        }
        for _ in 0..3 {
            demand.note(Order::ZERO, FolioUse::Request);
        }
        for _ in 0..8 {
            assert_eq!(demand.decide(), PageKind::Small);
        }
    }
}
