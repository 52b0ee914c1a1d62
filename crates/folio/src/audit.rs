//! The write side's promises checked as it runs, where a check costs too much to run
//! always: compiled in debug builds and with the `invariants` feature (which the crate's
//! own tests turn on, through its dev-dependency on itself).
//!
//! Two checks, both run by a sync when it returns:
//! - **The marks follow the dirty state** (`check_marks`): under the index lock, a folio
//!   whose state is DIRTY has its slot marked `Dirty`, and a slot marked `Towrite` is
//!   marked `Dirty` too. Writeback finds dirty folios only through the marks, so a dirty
//!   folio without its mark is data no sync will ever write (copy on write once lost the
//!   mark a sync had set: issue 28).
//! - **A sync wrote what it promised** (`SyncAudit`): a sync that returns Ok has written
//!   every page of its range that a `write_at` which returned before the sync began left
//!   dirty. The audit keeps, per page a write touched, the last write's start and end on
//!   a logical clock, and the writes still running; after the sync it looks at every page
//!   whose writes all ended before the sync began, and none of them may still be dirty in
//!   the cache. A page that a write started after the sync's start re-dirtied is not
//!   promised, so the check never fails on a later write; it runs only when the sync
//!   returned Ok and no writeback of the file failed meanwhile.
//!
//! Protection: the audit's own mutex (a write's pages are recorded before its first copy
//! and after its last, a sync's look is taken under it); the index lock for the cache's
//! side. Limits: one map entry per page ever written, for the life of the mapping: tests
//! and debug builds only.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::dirty::BlockMask;
use crate::index::{Entry, Mark};
use crate::mapping::Mapping;
use crate::memory::Memory;
use crate::types::PageIndex;

/// Checks, under the index lock, that every folio of `[start, end)` in `mapping` that is
/// DIRTY is marked `Dirty`, and every one marked `Towrite` is marked `Dirty` (module docs).
///
/// Context: no lock held; takes the index lock.
pub(crate) fn check_marks(mem: &Memory, mapping: &Mapping, start: PageIndex, end: PageIndex) {
    let w = mapping.index.lock();
    mapping.index.visit(start, end, &mut |head, entry| {
        let Entry::Folio { frame, .. } = entry else {
            return;
        };
        let state = mem.arena.meta(frame).state.load();
        let dirty_mark = w.is_marked(head, Mark::Dirty);
        assert!(
            !state.is_dirty() || dirty_mark,
            "page {}: a dirty folio without its Dirty mark ({state:?})",
            head.0
        );
        assert!(
            !w.is_marked(head, Mark::Towrite) || dirty_mark,
            "page {}: a folio tagged Towrite without its Dirty mark",
            head.0
        );
    });
}

/// The writes of one file as a sync's promise needs them (module docs).
#[derive(Debug, Default)]
pub(crate) struct SyncAudit {
    inner: Mutex<Clock>,
}

#[derive(Debug, Default)]
struct Clock {
    now: u64,
    pages: HashMap<u64, PageWrites>,
}

/// One page's writes, on the audit's clock.
#[derive(Clone, Copy, Debug, Default)]
struct PageWrites {
    /// When the last write of the page started.
    started: u64,
    /// Writes of the page that started and have not returned.
    running: u32,
    /// When the last write of the page returned.
    ended: u64,
}

/// A sync's start on the audit's clock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SyncStart(u64);

impl SyncAudit {
    /// A `write_at` of pages `[start, end)` starts (before its first copy).
    pub fn write_started(&self, start: PageIndex, end: PageIndex) {
        let mut clock = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        clock.now += 1;
        let now = clock.now;
        for page in start.0..end.0 {
            let writes = clock.pages.entry(page).or_default();
            writes.started = now;
            writes.running += 1;
        }
    }

    /// The `write_at` of pages `[start, end)` returns (after its last copy, with or
    /// without an error).
    pub fn write_ended(&self, start: PageIndex, end: PageIndex) {
        let mut clock = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        clock.now += 1;
        let now = clock.now;
        for page in start.0..end.0 {
            let writes = clock
                .pages
                .get_mut(&page)
                .expect("a write ended that never started");
            writes.running -= 1;
            writes.ended = now;
        }
    }

    /// A sync starts: the writes that have returned by now are the ones it promises.
    pub fn sync_started(&self) -> SyncStart {
        let mut clock = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        clock.now += 1;
        SyncStart(clock.now)
    }

    /// After a sync that started at `at` returned Ok over `[start, end)`: panics if a
    /// page whose every write returned before `at` is still dirty in the cache.
    ///
    /// Context: no lock held; takes the audit's mutex, then the index lock.
    pub fn check_synced(
        &self,
        mem: &Memory,
        mapping: &Mapping,
        at: SyncStart,
        start: PageIndex,
        end: PageIndex,
    ) {
        let clock = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let w = mapping.index.lock();
        for (&page, writes) in &clock.pages {
            let promised = writes.running == 0 && writes.started < at.0 && writes.ended < at.0;
            if !promised || page < start.0 || page >= end.0 {
                continue;
            }
            let Entry::Folio { frame, order, head } = w.get(PageIndex(page)) else {
                continue;
            };
            let state = mem.arena.meta(frame).state.load();
            if !state.is_dirty() {
                continue;
            }
            let blocks = BlockMask::of(&mem.arena, frame, order).peek();
            assert!(
                !blocks.contains(page - head.0),
                "a sync returned Ok with page {page} still dirty, written by a write that \
                 returned before the sync began (marked Dirty: {}, Towrite: {})",
                w.is_marked(head, Mark::Dirty),
                w.is_marked(head, Mark::Towrite),
            );
        }
    }
}
