//! A handle's readahead: where a read asks the readahead policy (`crate::readahead`) for
//! a window and reads it: on a miss (`on_miss`, the kernel's page_cache_sync_ra), at a
//! folio carrying the marker (`note_access`, `async_readahead`: page_cache_async_ra), and
//! forced over a range (`File::readahead`, `Advice::WillNeed`).
//!
//! Design: a window is decided against the handle's state word and installed by CAS
//! (`RaCell::update`), with the handle's maximum lowered to the cache-wide limit
//! (`update_window`), and only if it starts inside the file (`within_file`); then its
//! gaps are read through the miss path without waiting for memory
//! (`MissPath::read_window`), and what was read ahead is counted toward the limit
//! (`read_ahead`). A hit reaches this module only for a folio whose prefetched bit or
//! marker is set (one load, `note_access`).
//!
//! Protection: the handle's state word and the limit's two words are replaced by CAS
//! only; the index lock is taken only inside the miss path.
//!
//! A domain file's forced readahead goes to a worker thread of this process
//! (`DomainFile::read_ahead`, shared/offload.rs): the shared read path reads with `preadv`
//! on its caller's thread, and `readahead` returns at once, as the kernel's `WILLNEED`.
//!
//! Limits: forced readahead goes in chunks of at most 2 MiB (`FORCED_CHUNK_PAGES`; a
//! domain file's, also at most the domain's window cap) and stops early when memory is
//! short; windows are bounded by the policy (`crate::readahead`).

use std::io;

use super::{overflow, File};
use crate::eviction::ReadHint;
use crate::filemap::{Waiter, Window};
use crate::folio_meta::FolioMeta;
use crate::readahead::{self, Decision, MissRequest};
use crate::refcount::{StateWord, PREFETCHED, READAHEAD};
use crate::stats;
use crate::types::{Order, PageIndex};

/// Forced readahead (`File::readahead`, `Advice::WillNeed`) goes in chunks of this many
/// pages (2 MiB).
const FORCED_CHUNK_PAGES: u64 = 512;

impl File {
    /// A read touched a folio: clears its prefetched bit, and if it carries the readahead
    /// marker, starts the next window. One load when neither is set (the common hit).
    #[inline(always)]
    pub(super) fn note_access(
        &self,
        meta: &FolioMeta,
        page: PageIndex,
        head: PageIndex,
        hint: ReadHint,
    ) {
        let state = meta.state.load();
        if state.is_prefetched() || state.is_readahead() {
            self.note_marked_access(meta, state, page, head, hint);
        }
    }

    /// `note_access` of a folio that carries either bit (out of the hit's line).
    #[inline(never)]
    fn note_marked_access(
        &self,
        meta: &FolioMeta,
        state: StateWord,
        page: PageIndex,
        head: PageIndex,
        hint: ReadHint,
    ) {
        meta.state.test_and_clear(PREFETCHED);
        if state.is_readahead() && meta.state.test_and_clear(READAHEAD) {
            let (_, _, order) = meta.identity();
            self.async_readahead(page, head, head.add(order.pages()), hint);
        }
    }

    /// The marker was hit: ramp the window (or restart it after the next hole) and read it
    /// ahead, without waiting for anything.
    fn async_readahead(
        &self,
        page: PageIndex,
        head: PageIndex,
        folio_end: PageIndex,
        hint: ReadHint,
    ) {
        let core = self.core();
        // The walk's answer, and the page it was asked from: a retry that looks from
        // another page (the state changed under the CAS) walks again.
        let mut next_miss: Option<(PageIndex, Option<PageIndex>)> = None;
        let installed = self.update_window(|state, max_pages| {
            // The marker may sit anywhere in a large folio, and the read may touch the
            // folio before reaching the marker page: the window's own marker, if it is in
            // this folio, is the page the policy expects (the kernel compares the folio's
            // index with the marker rounded down to the folio).
            let marker = state.marker();
            let at = if marker >= head.0 && marker < folio_end.0 {
                PageIndex(marker)
            } else {
                page
            };
            let miss = match next_miss {
                Some((from, miss)) if from == at => miss,
                _ => {
                    // The first page the index does not hold, at most a maximum window on.
                    let end = at.add(u64::from(max_pages).max(1));
                    let miss = self.mapping.index.next_miss(at, end);
                    next_miss = Some((at, miss));
                    miss
                }
            };
            self.within_file(readahead::decide_on_marker(state, at, miss, max_pages))
        });
        if let Some(window) = installed {
            stats::bump(&core.counters().readahead_async);
            self.read_ahead(window, hint);
        }
    }

    /// Installs the window `decide` makes from the handle's state (`RaCell::update`), with
    /// the handle's maximum lowered to the cache-wide limit (`readahead::ReadaheadLimit`:
    /// the share of each active stream, lower while readahead thrashes), and counts the
    /// handle as an active stream.
    fn update_window(
        &self,
        mut decide: impl FnMut(readahead::RaState, u32) -> Decision,
    ) -> Option<readahead::RaState> {
        let limit = &self.core().memory().readahead_limit();
        let limit_pages = limit.limit_pages();
        let installed = self
            .ra
            .update(|state, max_pages| decide(state, max_pages.min(limit_pages)));
        if installed.is_some() {
            limit.note_window(&self.ra);
        }
        installed
    }

    /// Reads the gaps of the window the policy installed, and counts what it read ahead
    /// toward the cache-wide limit (`readahead::ReadaheadLimit`). Returns the pages
    /// inserted.
    ///
    /// Context: as `MissPath::read_window`: no lock held, never waits for memory.
    fn read_ahead(&self, window: readahead::RaState, hint: ReadHint) -> u64 {
        let pages = self.fill_for(hint).read_window(window_of(window));
        // Post: a window reads at most its own pages.
        debug_assert!(
            pages <= u64::from(window.size),
            "{pages} pages of {window:?}"
        );
        let limit = &self.core().memory().readahead_limit();
        limit.note_read_ahead(pages, window.size);
        pages
    }

    /// A window that starts at or past the end of the file reads nothing: not installed.
    fn within_file(&self, decision: Decision) -> Decision {
        match decision {
            Decision::Window(w)
                if PageIndex(w.start) >= PageIndex::ceil(self.mapping.size_bytes()) =>
            {
                Decision::None
            }
            other => other,
        }
    }

    /// A miss: open a readahead window if the policy says so (and read it, including the
    /// page), else read the missing run up to `read_end`.
    ///
    /// Context: no lock held, no folio pinned by the caller. May sleep in allocation.
    pub(super) fn on_miss(
        &self,
        page: PageIndex,
        read_end: PageIndex,
        waiter: Waiter,
        hint: ReadHint,
    ) -> io::Result<()> {
        let pages = read_end.0.saturating_sub(page.0).max(1);
        let mut req = MissRequest {
            index: page,
            pages,
            prev_index: self.ra.prev_index(),
            cached_before: 0,
        };
        if !req.is_sequential() {
            // The pages right before `page` that the index holds without a gap, counted up
            // to `pages + 1`: the policy only asks whether there are more than `pages`.
            let floor = PageIndex(page.0.saturating_sub(pages + 1));
            let run_start = match self.mapping.index.prev_miss(page, floor) {
                Some(miss) => miss.0 + 1,
                None => floor.0,
            };
            debug_assert!(run_start <= page.0);
            req.cached_before = page.0 - run_start;
        }
        let installed = self.update_window(|state, max_pages| {
            self.within_file(readahead::decide_on_miss(state, req, max_pages))
        });
        if let Some(window) = installed {
            stats::bump(&self.core().counters().readahead_sync);
            if self.read_ahead(window, hint) > 0 {
                return Ok(());
            }
        }
        self.fill_for(hint).read_missing(page, read_end, waiter)
    }

    /// Reads `[offset, offset + len)` ahead, asynchronously: returns at once, and never
    /// reads a page that is cached or in flight. Goes in chunks of at most 2 MiB; stops
    /// early (it is a hint) when memory is short. Past the end of the file, nothing.
    ///
    /// Errors: `InvalidInput` if `offset + len` overflows.
    ///
    /// Context: any thread; does not wait for I/O or memory. A domain file's range is
    /// read into the domain on a worker thread (`DomainFile::read_ahead`: this returns
    /// at once; a process whose workers already have many hints queued drops it).
    pub fn readahead(&self, offset: u64, len: u64) -> io::Result<()> {
        let end = offset
            .checked_add(len)
            .ok_or_else(|| overflow(offset, len))?;
        stats::bump(&self.core().counters().readahead_forced);
        if let Some(shared) = self.domain() {
            shared.read_ahead(offset, end, FORCED_CHUNK_PAGES);
            return Ok(());
        }
        let end = PageIndex::ceil(end.min(self.mapping.size_bytes()));
        let mut at = PageIndex::containing(offset);
        while at < end {
            let chunk_end = end.min(at.add(FORCED_CHUNK_PAGES));
            let pages = self.fill().read_window(Window {
                start: at,
                end: chunk_end,
                marker: None,
                order_cap: Order::MAX,
            });
            // Read ahead too (its pages can be wasted), but not by a window the limit
            // bounds.
            self.core()
                .memory()
                .readahead_limit()
                .note_read_ahead(pages, 0);
            at = chunk_end;
        }
        Ok(())
    }
}

/// The window the policy installed, as pages to read.
fn window_of(state: readahead::RaState) -> Window {
    Window {
        start: PageIndex(state.start),
        end: PageIndex(state.end()),
        marker: Some(PageIndex(state.marker())),
        order_cap: Order::new(state.folio_order()),
    }
}
