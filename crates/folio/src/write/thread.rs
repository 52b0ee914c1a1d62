//! The background writeback thread (the kernel's flusher): it starts the ranges appending
//! writers handed over (write-behind), then writes back every dirty file while the cache
//! is over its background threshold and otherwise the files dirty for longer than the
//! expiry; and the cache's final writeback when it is dropped. Also the writers' side of
//! write-behind: an append hands its whole pages to the thread (`write_behind`). It also
//! publishes a persistent cache's counters in its segment (`Core::publish_stats`), the
//! one background thread every cache has: no thread of its own for a once-a-second job.
//!
//! Protection: the queue of dirty files (`DirtyFiles`) under its own locks; the writeback
//! steps as in `writeback`. Limits: one pass every `BACKGROUND_PERIOD` while files are
//! dirty, or when woken; no timer while none is (`sleep_period`); a publish every
//! `STATS_PERIOD` at best (a long pass of writeback delays it).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::integrity;
use super::integrity::wait_for_tagged;
use super::writeback::{start, Selection};
use crate::io::Backend;
use crate::mapping::Mapping;
use crate::mapping::RangeWait;
use crate::pagecache::Core;
use crate::types::PageIndex;

/// How often the background thread looks for expired dirty files.
const BACKGROUND_PERIOD: Duration = Duration::from_millis(100);
/// How often the background thread publishes a persistent cache's counters in its
/// segment (`Core::publish_stats`): what `folio-stat --watch` refreshes by at best.
pub(crate) const STATS_PERIOD: Duration = Duration::from_secs(1);

/// The background writeback thread's body: when woken, and every `BACKGROUND_PERIOD`
/// while files are dirty (`sleep_period`), starts the ranges appending writers handed
/// over (`write_behind`), then writes back every dirty file while the cache is above the
/// background threshold, and otherwise the files dirty for longer than the expiry; every
/// `STATS_PERIOD`, publishes a persistent cache's counters in its segment. Returns when
/// the cache stops.
///
/// Context: its own thread ("folio-writeback").
pub(crate) fn background(core: Arc<Core>, backend: Arc<dyn Backend>) {
    let persistent = core.arena().segment().is_some();
    // With nothing dirty: until woken, or a persistent cache's next publish.
    let idle_period = persistent.then_some(STATS_PERIOD);
    let mut published = Instant::now();
    while core.dirty_files.wait(sleep_period(&core, idle_period)) {
        if persistent && published.elapsed() >= STATS_PERIOD {
            core.publish_stats(backend.name());
            published = Instant::now();
        }
        for range in core.dirty_files.take_write_behind() {
            // Before the pages go: the reserve's `fallocate` waits for the file's writes
            // in flight, here rather than in the appending writer.
            range
                .mapping
                .write
                .reserve_ahead(range.mapping.size_bytes());
            start(
                &core,
                &*backend,
                &range.mapping,
                range.start,
                range.end,
                Selection::Dirty,
            );
        }
        write_back_due(&core, &*backend);
        hand_over_roles(&core, &*backend);
    }
}

/// Each file this process is the writer of in the domain and another process asked for
/// handed over (mapping/domain.rs, F3), unless a write of it is in progress (that write
/// hands it over at its end, or the next pass does).
fn hand_over_roles(core: &Arc<Core>, backend: &dyn Backend) {
    for mapping in core.dirty_files.roles() {
        if mapping.role_wanted() {
            mapping.yield_role(core.memory(), RangeWait::Try, || {
                integrity::write_out(core, backend, &mapping);
            });
        }
    }
}

/// How long the background thread sleeps unless woken: `BACKGROUND_PERIOD` while files
/// are dirty, to find the expired ones; otherwise `idle_period` (`None`: until a write
/// dirties a file, the first in the queue waking it: `DirtyFiles::note_dirty`). A cache
/// that only reads then has no timer of its own: each wake-up would be a context switch,
/// and on a loaded machine a preemption of a reader.
fn sleep_period(core: &Core, idle_period: Option<Duration>) -> Option<Duration> {
    if core.dirty_files.is_empty() && !core.dirty_files.holds_roles() {
        idle_period
    } else {
        Some(BACKGROUND_PERIOD)
    }
}

/// One pass of the background thread: over the background threshold, or when memory is
/// wanted (`DirtyFiles::kick_to_clean`), every dirty file, tails included; otherwise the
/// files dirty past the expiry, tails left dirty.
pub(crate) fn write_back_due(core: &Arc<Core>, backend: &dyn Backend) {
    // Taken first, whatever the threshold says, so that a request is never left for a
    // later pass.
    let clean_wanted = core.dirty_files.take_clean_wanted();
    let over = clean_wanted || core.dirty_budget().over_background();
    // Over the threshold, tail blocks go too: left dirty, a few files' tails could fill
    // a small budget and throttle writers that nothing would ever release.
    let take = if over {
        Selection::Dirty
    } else {
        Selection::Background
    };
    let due = if over {
        core.dirty_files.take_all()
    } else {
        core.dirty_files.take_expired()
    };
    for mapping in due {
        start(core, backend, &mapping, PageIndex(0), PageIndex::END, take);
        core.dirty_files.requeue_if_dirty(&mapping);
    }
}

/// Writes back every dirty page of the cache and waits for it (no flush), then gives
/// every file folio wrote its logical size on disk: the cache's last act, so that dropping
/// it loses nothing a process exit would not, and adds nothing (no padded tail block).
///
/// Context: no lock held (and no handle left: nobody holds a writer lock); sleeps until
/// the writes complete.
pub(crate) fn write_back_all(core: &Arc<Core>, backend: &dyn Backend) {
    let (start_page, end_page) = (PageIndex(0), PageIndex::END);
    for mapping in core.dirty_files.take_all() {
        start(
            core,
            backend,
            &mapping,
            start_page,
            end_page,
            Selection::Tagged,
        );
    }
    // Every file's writebacks, a background pass's too (its file left the queue), end
    // before its size is settled: a tail block written after would pad it again.
    for mapping in core.mappings.all() {
        wait_for_tagged(core, backend, &mapping, start_page, end_page);
        mapping.settle_size();
    }
}

/// Write-behind (`CacheBuilder::write_behind_bytes`): an append (a write from at or
/// before the end of the file, `size_before`, to past it) leaves whole pages behind it
/// that the writer will not touch again. Once `Core::write_behind_pages` of them have
/// gathered since the last time, the writeback thread is handed their range and starts
/// their writeback (B1-B2 with `Selection::Dirty`, as `File::writeback`), and the writer
/// goes on: its next sync then finds most of what it must make durable written or in
/// flight, and waits for the device only for the rest. The submission is the
/// writeback thread's, not the writer's: ext4 cannot issue an O_DIRECT write that
/// extends the file without blocking, so io_uring tries it inline and then hands it
/// to a worker, and submitted from the writer that put an append's p99 at 150 us
/// (reference VM). The folio the writer is still filling (the one that holds byte
/// `end`) is left out, so that the next append never waits for its write (stable
/// pages, W2). A write inside the file is not an append (a random overwrite that
/// touches the last page, a file grown by `set_len` being filled); a write past the
/// end leaves a hole and starts a new run of appends at its first page.
///
/// Measured (writeseq, 8 KiB appends, a sync every 1 MiB): see docs/writes.md.
///
/// Context: no lock held; does not wait for I/O.
pub(crate) fn write_behind(
    core: &Core,
    mapping: &Arc<Mapping>,
    offset: u64,
    end: u64,
    size_before: u64,
) {
    let pages = core.write_behind_pages;
    let behind = &mapping.write.behind;
    if pages == 0 || end <= size_before {
        return; // off, or not an append
    }
    if offset > size_before {
        behind.store(PageIndex::containing(offset).0, Ordering::Relaxed);
        return; // a hole: appends start again here
    }
    let from = behind.load(Ordering::Relaxed);
    let mut to = PageIndex::containing(end);
    // Only `to` lowered by the folio below can change the answer, so most appends
    // (short of the threshold) return before the index look-up.
    if to.0 < from.saturating_add(pages) {
        return;
    }
    if let crate::index::Entry::Folio { head, order, .. } =
        mapping.index.lookup(PageIndex(to.0.saturating_sub(1)))
    {
        if head.add(order.pages()) > to {
            to = head; // a large folio the writer is still filling
        }
    }
    if to.0 < from.saturating_add(pages)
        || behind
            .compare_exchange(from, to.0, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    core.dirty_files.write_behind(mapping, PageIndex(from), to);
}
