//! The write side's promises checked as it runs, where a check costs too much to run
//! always: compiled in debug builds and with the `invariants` feature (which the crate's
//! own tests turn on, through its dev-dependency on itself).
//!
//! Two checks, both run by a sync when it returns (`integrity::check_marks`,
//! `integrity::check_promised`, which look at the cache; this room keeps only the writes' record,
//! below the mapping that holds it):
//! - **The marks follow the dirty state**: under the index lock, a folio
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

use crate::types::PageIndex;

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
    fn write_started(&self, start: PageIndex, end: PageIndex) {
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
    fn write_ended(&self, start: PageIndex, end: PageIndex) {
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

    /// Calls `check` with each page of `[start, end)` that a sync which started at `at`
    /// promised (every write of it returned before `at`, and none is running), in page
    /// order, holding the audit's mutex: no write of the file can start meanwhile, so no
    /// later write dirties a page while it is looked at.
    ///
    /// Context: takes the audit's mutex (then `check` may take the index lock).
    pub fn for_each_promised(
        &self,
        at: SyncStart,
        start: PageIndex,
        end: PageIndex,
        check: &mut dyn FnMut(PageIndex),
    ) {
        let clock = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut pages: Vec<u64> = clock
            .pages
            .iter()
            .filter(|(&page, writes)| {
                writes.running == 0
                    && writes.started < at.0
                    && writes.ended < at.0
                    && (start.0..end.0).contains(&page)
            })
            .map(|(&page, _)| page)
            .collect();
        pages.sort_unstable();
        for page in pages {
            check(PageIndex(page));
        }
    }
}

impl SyncAudit {
    /// A `write_at` of bytes `[offset, end)` starts; the guard tells the audit when it
    /// returns, on every path.
    pub fn write(&self, offset: u64, end: u64) -> AuditedWrite<'_> {
        let (start, end) = (PageIndex::containing(offset), PageIndex::ceil(end));
        self.write_started(start, end);
        AuditedWrite {
            audit: self,
            start,
            end,
        }
    }
}

/// A `write_at` in progress, as the audit knows it (`SyncAudit::write`).
pub(crate) struct AuditedWrite<'a> {
    audit: &'a SyncAudit,
    start: PageIndex,
    end: PageIndex,
}

impl Drop for AuditedWrite<'_> {
    fn drop(&mut self) {
        self.audit.write_ended(self.start, self.end);
    }
}
