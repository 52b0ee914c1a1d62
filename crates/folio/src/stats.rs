//! Counters of what the cache did, and the snapshot `Cache::stats` returns.
//!
//! Miss-path counters are shared atomics: they move next to an I/O. The hit path must not
//! do an atomic read-modify-write (DESIGN.md §2), so hits are counted per thread: each
//! thread owns a `ThreadCounters` block per cache, registered once, that only it writes
//! (load then store, no RMW, no shared cache line); `Cache::stats` sums the blocks.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A snapshot of a cache's counters. All counts since the cache was built.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Page accesses served from a cached folio without waiting (optimistic or pinned).
    pub hits: u64,
    /// Pages a read found missing and had to read.
    pub misses: u64,
    /// Page accesses that found their folio with another reader's I/O in flight and
    /// waited for it (hits on in-flight folios; not counted in `hits` or `misses`).
    pub waits_on_io: u64,
    /// Optimistic copies discarded because the folio changed underneath.
    pub optimistic_retries: u64,
    /// Pages inserted into the index (each read from the file once).
    pub pages_inserted: u64,
    /// Folios a racing insertion had already placed (allocated, then given back).
    pub insert_conflicts: u64,
    /// Read requests submitted to the backend, and the bytes they asked for.
    pub io_requests: u64,
    pub io_bytes: u64,
    /// Reads that failed, and short reads completed by a retry.
    pub io_errors: u64,
    pub short_read_retries: u64,
    /// Folios and pages evicted by reclaim.
    pub evicted_folios: u64,
    pub evicted_pages: u64,
    /// Insertions that replaced a shadow entry (the page had been cached before), and
    /// those the eviction policy recognised as refaults within the workingset (S3-FIFO:
    /// still in the ghost; LRU: refault distance within the active list).
    pub refaults: u64,
    pub workingset_refaults: u64,
    /// Shadow entries dropped to keep them under the cap, and logged now.
    pub shadows_dropped: u64,
    pub shadows: u64,
    /// Batches the background reclaimer evicted.
    pub background_reclaims: u64,
    /// Pages dropped by invalidation (truncation, a changed file, `DontNeed`).
    pub invalidated_pages: u64,
    /// Readahead windows opened on a miss (sync), on a marker hit (async), and forced
    /// (`File::readahead`, `WillNeed`).
    pub readahead_sync: u64,
    pub readahead_async: u64,
    pub readahead_forced: u64,
    /// Pages readahead inserted, and those evicted before anyone read them (wasted).
    pub readahead_pages: u64,
    pub readahead_wasted_pages: u64,
    /// Allocations that found every folio pinned or locked and gave up.
    pub alloc_failures: u64,
    /// The cache's capacity, what it holds now, and its metadata: the folios' side table,
    /// the mappings and their index nodes (in trees and node pools).
    pub capacity_bytes: u64,
    pub cached_bytes: u64,
    pub metadata_bytes: u64,
    /// Files the cache knows now (mappings: a handle open or a page cached), the index
    /// nodes they hold (counted in `metadata_bytes`), and the mappings forgotten so far
    /// (no handle open and no page cached left).
    pub mappings: u64,
    pub index_nodes: u64,
    pub mappings_removed: u64,
    /// Which backend reads the files, and which policy evicts.
    pub backend: String,
    pub eviction: String,
}

/// The shared, miss-path counters.
#[derive(Debug)]
pub(crate) struct Counters {
    /// Unique in the process: keys this cache's per-thread hit blocks.
    id: u64,
    pub misses: AtomicU64,
    pub waits_on_io: AtomicU64,
    pub optimistic_retries: AtomicU64,
    pub pages_inserted: AtomicU64,
    pub insert_conflicts: AtomicU64,
    pub io_requests: AtomicU64,
    pub io_bytes: AtomicU64,
    pub io_errors: AtomicU64,
    pub short_read_retries: AtomicU64,
    pub evicted_folios: AtomicU64,
    pub evicted_pages: AtomicU64,
    pub refaults: AtomicU64,
    pub workingset_refaults: AtomicU64,
    pub shadows_dropped: AtomicU64,
    pub background_reclaims: AtomicU64,
    pub invalidated_pages: AtomicU64,
    pub readahead_sync: AtomicU64,
    pub readahead_async: AtomicU64,
    pub readahead_forced: AtomicU64,
    pub readahead_pages: AtomicU64,
    pub readahead_wasted_pages: AtomicU64,
    pub alloc_failures: AtomicU64,
    pub pinned_hits: AtomicU64,
    pub mappings_removed: AtomicU64,
    threads: Mutex<Vec<Arc<ThreadCounters>>>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            misses: AtomicU64::new(0),
            waits_on_io: AtomicU64::new(0),
            optimistic_retries: AtomicU64::new(0),
            pages_inserted: AtomicU64::new(0),
            insert_conflicts: AtomicU64::new(0),
            io_requests: AtomicU64::new(0),
            io_bytes: AtomicU64::new(0),
            io_errors: AtomicU64::new(0),
            short_read_retries: AtomicU64::new(0),
            evicted_folios: AtomicU64::new(0),
            evicted_pages: AtomicU64::new(0),
            refaults: AtomicU64::new(0),
            workingset_refaults: AtomicU64::new(0),
            shadows_dropped: AtomicU64::new(0),
            background_reclaims: AtomicU64::new(0),
            invalidated_pages: AtomicU64::new(0),
            readahead_sync: AtomicU64::new(0),
            readahead_async: AtomicU64::new(0),
            readahead_forced: AtomicU64::new(0),
            readahead_pages: AtomicU64::new(0),
            readahead_wasted_pages: AtomicU64::new(0),
            alloc_failures: AtomicU64::new(0),
            pinned_hits: AtomicU64::new(0),
            mappings_removed: AtomicU64::new(0),
            threads: Mutex::new(Vec::new()),
        }
    }
}

/// Counters one thread writes and anyone reads.
#[derive(Default, Debug)]
struct ThreadCounters {
    hits: AtomicU64,
}

thread_local! {
    /// This thread's counter blocks, one per cache it counted hits for, keyed by the
    /// cache's id; the most recently used first.
    static LOCAL: RefCell<Vec<(u64, Arc<ThreadCounters>)>> = const { RefCell::new(Vec::new()) };
}

/// Ids of caches' counters, unique for the process (an address could be reused).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    /// Counts one hit on this thread's own block: a load and a store, no RMW. The usual
    /// case (the thread's last cache) is one comparison.
    #[inline]
    pub fn hit(&self) {
        let counted = LOCAL.with(|local| match local.borrow().first() {
            Some((id, block)) if *id == self.id => {
                let hits = &block.hits;
                hits.store(hits.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                true
            }
            _ => false,
        });
        if !counted {
            self.hit_slow();
        }
    }

    #[cold]
    fn hit_slow(&self) {
        LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            // Blocks of dropped caches: only this thread's list still holds them.
            local.retain(|(_, b)| Arc::strong_count(b) > 1);
            let block = match local.iter().position(|(id, _)| *id == self.id) {
                Some(at) => local.remove(at).1,
                None => {
                    let block = Arc::new(ThreadCounters::default());
                    self.threads
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(block.clone());
                    block
                }
            };
            block.hits.fetch_add(1, Ordering::Relaxed);
            local.insert(0, (self.id, block));
        });
    }

    /// Forgets this cache's blocks; called when the cache is dropped, so that threads
    /// prune their blocks of it.
    pub fn detach_threads(&self) {
        self.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    pub fn snapshot(&self) -> Stats {
        let hits: u64 = self
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|b| b.hits.load(Ordering::Relaxed))
            .sum();
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            hits: hits + get(&self.pinned_hits),
            misses: get(&self.misses),
            waits_on_io: get(&self.waits_on_io),
            optimistic_retries: get(&self.optimistic_retries),
            pages_inserted: get(&self.pages_inserted),
            insert_conflicts: get(&self.insert_conflicts),
            io_requests: get(&self.io_requests),
            io_bytes: get(&self.io_bytes),
            io_errors: get(&self.io_errors),
            short_read_retries: get(&self.short_read_retries),
            evicted_folios: get(&self.evicted_folios),
            evicted_pages: get(&self.evicted_pages),
            refaults: get(&self.refaults),
            workingset_refaults: get(&self.workingset_refaults),
            shadows_dropped: get(&self.shadows_dropped),
            background_reclaims: get(&self.background_reclaims),
            invalidated_pages: get(&self.invalidated_pages),
            readahead_sync: get(&self.readahead_sync),
            readahead_async: get(&self.readahead_async),
            readahead_forced: get(&self.readahead_forced),
            readahead_pages: get(&self.readahead_pages),
            readahead_wasted_pages: get(&self.readahead_wasted_pages),
            alloc_failures: get(&self.alloc_failures),
            mappings_removed: get(&self.mappings_removed),
            ..Stats::default()
        }
    }
}
