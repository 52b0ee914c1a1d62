//! Dirty state (DESIGN.md §8): which 4 KiB blocks of a folio are newer than the file (the
//! block mask), a file's write-side state (its writer lock, error sequence, sizes and
//! writebacks in flight), and the budget of dirty memory that writers are throttled by.
//!
//! # The block mask
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
//! # The dirty budget
//!
//! Pages that cannot be reclaimed because of writes (dirty, under writeback, or reserved by
//! a writer about to dirty them) are counted in one atomic (`DirtyBudget::pages`). A writer
//! reserves, before its copy, as many pages as it may dirty (`charge`); if that would pass
//! the limit it waits (the throttle: the kernel's `balance_dirty_pages`, in its simplest
//! form) until writeback completions give pages back (`uncharge`), which wake it. After
//! the copy it returns what it reserved and did not dirty. The count never passes the
//! limit: a reservation is one CAS that checks it. Above the background threshold the
//! writeback thread is woken.
//!
//! Protection: the mask words by the state word's protocol (above); the budget's count is
//! one atomic, its waiters a mutex and condvar; `WriteState`'s fields each say theirs.
//!
//! Limits: a folio has at most 512 blocks (2 MiB); a reservation of more pages than the
//! limit is refused by the caller's splitting (`DirtyBudget::charge_max_pages`).

use std::collections::BTreeSet;
use std::fs::File as StdFile;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::arena::Arena;
#[cfg(any(debug_assertions, feature = "invariants"))]
use crate::audit::SyncAudit;
use crate::errseq::ErrSeq;
use crate::range_lock::{RangeGuard, RangeLock};
use crate::refcount::StateWord;
use crate::types::{FrameId, Order, PAGE_BYTES};

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

/// How many pages may be unclean (dirty, under writeback, or reserved by a writer) at once,
/// and the writers waiting for some to come back (module docs).
#[derive(Debug)]
pub struct DirtyBudget {
    /// Unclean pages now: never above `limit_pages`.
    pages: AtomicU64,
    /// Of `pages`, those under writeback (a gauge for stats).
    writeback_pages: AtomicU64,
    pub limit_pages: u64,
    /// Above this, the writeback thread writes back whatever is dirty, oldest file first.
    pub background_pages: u64,
    /// Writers waiting in `charge`: `uncharge` takes the mutex and wakes only if some are.
    waiting: AtomicU32,
    waiters: Mutex<()>,
    progress: Condvar,
}

impl DirtyBudget {
    pub fn new(limit_pages: u64, background_pages: u64) -> DirtyBudget {
        let limit_pages = limit_pages.max(1);
        DirtyBudget {
            pages: AtomicU64::new(0),
            writeback_pages: AtomicU64::new(0),
            limit_pages,
            background_pages: background_pages.min(limit_pages),
            waiting: AtomicU32::new(0),
            waiters: Mutex::new(()),
            progress: Condvar::new(),
        }
    }

    /// The most pages one reservation may ask for: a writer splits larger writes, so that
    /// a reservation always fits an empty budget.
    pub fn charge_max_pages(&self) -> u64 {
        (self.limit_pages / 4).max(1)
    }

    pub fn pages(&self) -> u64 {
        self.pages.load(Ordering::Relaxed)
    }

    pub fn writeback_pages(&self) -> u64 {
        self.writeback_pages.load(Ordering::Relaxed)
    }

    /// Above the background threshold, or a writer waits at the limit: writeback must
    /// write everything it can now.
    pub fn over_background(&self) -> bool {
        self.pages() > self.background_pages || self.waiting.load(Ordering::Relaxed) > 0
    }

    /// Reserves `pages` (at most `charge_max_pages`), waiting while that would pass the
    /// limit; `kick` is called (to wake writeback) before each wait. Returns how long it
    /// waited.
    ///
    /// Context: no lock held, no folio locked (writeback must be able to progress). May
    /// sleep.
    pub fn charge(&self, pages: u64, kick: &dyn Fn()) -> Duration {
        let pages = pages.min(self.limit_pages);
        let mut waited = None;
        loop {
            let got = self
                .pages
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |now| {
                    (now + pages <= self.limit_pages).then_some(now + pages)
                });
            if got.is_ok() {
                return waited.map_or(Duration::ZERO, |t: Instant| t.elapsed());
            }
            waited.get_or_insert_with(Instant::now);
            kick();
            let guard = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
            // Announced under the mutex, before the re-check: an `uncharge` after the
            // re-check sees it and wakes this writer (and the timeout bounds the rest).
            self.waiting.fetch_add(1, Ordering::SeqCst);
            if self.pages.load(Ordering::SeqCst) + pages > self.limit_pages {
                let _ = self
                    .progress
                    .wait_timeout(guard, Duration::from_millis(10))
                    .unwrap_or_else(|e| e.into_inner());
            }
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Gives back `pages` (written back, discarded, or reserved and not dirtied) and wakes
    /// throttled writers.
    pub fn uncharge(&self, pages: u64) {
        if pages == 0 {
            return;
        }
        let old = self.pages.fetch_sub(pages, Ordering::SeqCst);
        debug_assert!(old >= pages, "dirty budget underflow: {old} - {pages}");
        if self.waiting.load(Ordering::SeqCst) > 0 {
            drop(self.waiters.lock().unwrap_or_else(|e| e.into_inner()));
            self.progress.notify_all();
        }
    }

    /// `pages` went under writeback (B2), for the gauge.
    pub fn writeback_started(&self, pages: u64) {
        self.writeback_pages.fetch_add(pages, Ordering::Relaxed);
    }

    /// `pages` came out of writeback (B3), for the gauge.
    pub fn writeback_ended(&self, pages: u64) {
        self.writeback_pages.fetch_sub(pages, Ordering::Relaxed);
    }
}

/// Writebacks of one file in flight, by ticket, so that a sync can wait for every write
/// submitted before it (its own and the background's) and for no later one.
#[derive(Debug, Default)]
pub struct InFlight {
    tickets: Mutex<(u64, BTreeSet<u64>)>,
    done: Condvar,
}

impl InFlight {
    /// A new writeback's ticket.
    pub fn begin(&self) -> u64 {
        let mut t = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        t.0 += 1;
        let ticket = t.0;
        t.1.insert(ticket);
        ticket
    }

    pub fn end(&self, ticket: u64) {
        let mut t = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        t.1.remove(&ticket);
        drop(t);
        self.done.notify_all();
    }

    /// The last ticket handed out.
    pub fn last(&self) -> u64 {
        self.tickets.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    /// Sleeps until every writeback with a ticket up to `ticket` has ended.
    ///
    /// Context: no lock held; may sleep as long as the writes take.
    pub fn wait_through(&self, ticket: u64) {
        let mut t = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        while t.1.first().is_some_and(|&first| first <= ticket) {
            t = self.done.wait(t).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Consecutive failed writebacks after which a file is given up as failed (DESIGN.md §8).
pub const WRITEBACK_FAILURES_MAX: u32 = 3;

/// One file's write side, in its mapping (DESIGN.md §8).
#[derive(Debug, Default)]
pub struct WriteState {
    /// The bytes each `write_at` writes, held for its whole call (and the whole file for
    /// `set_len`): overlapping writes are applied one after the other, whole.
    ranges: RangeLock,
    /// Serialises the writers' changes of the file's folios (a piece of `write_at` at a
    /// time, `set_len`), as the kernel's inode lock does for buffered writes. Writeback
    /// never takes it.
    writer: Mutex<()>,
    /// A descriptor open for writing, kept from the first writable handle's open for as
    /// long as the mapping lives: writeback of a closed file's dirty pages uses it.
    fd: Mutex<Option<Arc<StdFile>>>,
    /// Whether folio has written or resized the file (then folio's size is the file's
    /// logical size, and a read that comes back short before it found a hole, not a
    /// shorter file).
    written: AtomicBool,
    /// Space reserved with `fallocate` up to here, so that a write past it learns of
    /// ENOSPC at once.
    pub reserved_bytes: AtomicU64,
    pub errseq: ErrSeq,
    pub in_flight: InFlight,
    /// When the file went from clean to dirty (ns since the cache's epoch; 0: clean),
    /// for the writeback thread's expiry.
    pub dirtied_ns: AtomicU64,
    /// On the cache's list of dirty files.
    pub queued: AtomicBool,
    /// Writebacks that failed in a row.
    pub failures: AtomicU32,
    /// The errno the file was given up with (0: not failed).
    pub failed_errno: AtomicI32,
    /// The page where the next write-behind starts: an appending writer's whole pages
    /// below it have had their writeback started (`File::write_behind`). A hint: a wrong
    /// value writes back early or late, never loses a byte.
    pub behind: AtomicU64,
    /// What the syncs promised, checked when they return (`audit`).
    #[cfg(any(debug_assertions, feature = "invariants"))]
    pub audit: SyncAudit,
}

impl WriteState {
    /// The write side of a file of `size_bytes` on disk.
    pub fn new(size_bytes: u64) -> WriteState {
        WriteState {
            reserved_bytes: AtomicU64::new(size_bytes),
            behind: AtomicU64::new(size_bytes / PAGE_BYTES as u64),
            ..WriteState::default()
        }
    }

    /// Holds bytes `[start, end)` of the file for a writer's whole call (`RangeLock`).
    ///
    /// Context: no lock held; may sleep while an overlapping write finishes.
    pub fn lock_range(&self, start: u64, end: u64) -> RangeGuard<'_> {
        self.ranges.lock(start, end)
    }

    /// Context: may sleep while another writer of the file finishes.
    pub fn lock_writer(&self) -> MutexGuard<'_, ()> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn fd(&self) -> Option<Arc<StdFile>> {
        self.fd.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A writable handle opened the file: keep its descriptor if none is kept yet.
    pub fn adopt_fd(&self, fd: &Arc<StdFile>) {
        let mut kept = self.fd.lock().unwrap_or_else(|e| e.into_inner());
        if kept.is_none() {
            *kept = Some(fd.clone());
        }
    }

    /// The file was deleted: the descriptor goes (`Mapping::forget_deleted`).
    pub fn forget_fd(&self) {
        self.fd.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    pub fn is_written(&self) -> bool {
        self.written.load(Ordering::Acquire)
    }

    pub fn note_written(&self) {
        if !self.is_written() {
            self.written.store(true, Ordering::Release);
        }
    }

    /// The errno the file was given up with, if it was.
    pub fn failed(&self) -> Option<i32> {
        match self.failed_errno.load(Ordering::Acquire) {
            0 => None,
            errno => Some(errno),
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

    #[test]
    fn the_budget_never_passes_its_limit_and_wakes_waiters() {
        let budget = Arc::new(DirtyBudget::new(8, 4));
        budget.charge(2, &|| {});
        budget.charge(2, &|| {});
        assert_eq!(budget.pages(), 4);
        let waiter = {
            let budget = budget.clone();
            std::thread::spawn(move || {
                budget.charge(2, &|| {});
                budget.charge(2, &|| {});
                budget.charge(2, &|| {})
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(budget.pages() <= 8);
        budget.uncharge(4);
        let waited = waiter.join().unwrap();
        assert!(waited > Duration::ZERO, "the third charge had to wait");
        assert_eq!(budget.pages(), 6);
    }

    #[test]
    fn a_sync_waits_for_earlier_tickets_only() {
        let f = Arc::new(InFlight::default());
        let a = f.begin();
        let b = f.begin();
        f.end(b);
        let waiter = {
            let f = f.clone();
            std::thread::spawn(move || f.wait_through(a))
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiter.is_finished());
        let _later = f.begin();
        f.end(a);
        waiter.join().unwrap();
    }
}
