//! `folio_stats`: generated from folio's counter list (`folio::Stats::FIELDS`, written
//! once in `crates/folio/src/stats.rs`) by `tests/header.rs`. Do not edit by hand; after
//! changing the list, regenerate this file and `include/folio.h` with
//!     FOLIO_BLESS_HEADER=1 cargo test -p folio-capi --test header

use folio_rs::Stats;

/// A snapshot of a cache's counters (all since the cache was created) and gauges (as of
/// the call), then the engine and the eviction policy in use. `folio_stats_format`
/// prints every field as `name=value`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct folio_stats {
    /// Page accesses served from a cached page without waiting (optimistic or pinned).
    pub hits: u64,
    /// Pages a read found missing and had to read.
    pub misses: u64,
    /// Page accesses that found their page with another reader's I/O in flight and
    /// waited for it (not counted in `hits` or `misses`).
    pub waits_on_io: u64,
    /// Optimistic (lock-free) copies discarded because the page changed underneath.
    pub optimistic_retries: u64,
    /// Pages inserted into the cache (each read from its file once).
    pub pages_inserted: u64,
    /// Folios a racing insertion had already placed (allocated, then given back).
    pub insert_conflicts: u64,
    /// Read requests submitted to the backend.
    pub io_requests: u64,
    /// Bytes the read requests asked for.
    pub io_bytes: u64,
    /// Reads that failed.
    pub io_errors: u64,
    /// Short reads completed by a retry.
    pub short_read_retries: u64,
    /// Folios evicted by reclaim.
    pub evicted_folios: u64,
    /// Pages evicted by reclaim.
    pub evicted_pages: u64,
    /// Insertions of pages cached before (a shadow entry remembered them).
    pub refaults: u64,
    /// Refaults the eviction policy recognised as within the workingset (S3-FIFO: still
    /// in the ghost queue; LRU: refault distance within the active list).
    pub workingset_refaults: u64,
    /// Shadow entries dropped to keep them under their cap.
    pub shadows_dropped: u64,
    /// Batches the background reclaimer evicted.
    pub background_reclaims: u64,
    /// Pages dropped by invalidation (truncation, a changed file, DontNeed advice).
    pub invalidated_pages: u64,
    /// Readahead windows opened on a miss (synchronous readahead).
    pub readahead_sync: u64,
    /// Readahead windows opened on a hit of a window's marker (asynchronous readahead).
    pub readahead_async: u64,
    /// Forced readahead calls (File::readahead or folio_readahead, and WillNeed advice;
    /// one per call).
    pub readahead_forced: u64,
    /// Pages readahead inserted.
    pub readahead_pages: u64,
    /// Pages readahead inserted that were evicted before anyone read them (wasted).
    pub readahead_wasted_pages: u64,
    /// Allocations that found every page pinned or locked and gave up (ENOMEM).
    pub alloc_failures: u64,
    /// Files forgotten so far (no handle open and no page cached left).
    pub mappings_removed: u64,
    /// Calls of write_at (or folio_write) that wrote something.
    pub write_requests: u64,
    /// Bytes those writes copied into the cache.
    pub write_bytes: u64,
    /// Writes a writer made to a copy of a folio because someone held the original
    /// pinned (copy on write).
    pub write_copies: u64,
    /// Writes of dirty blocks submitted to the backend (merged runs).
    pub writeback_requests: u64,
    /// Bytes the writebacks wrote to the files.
    pub writeback_bytes: u64,
    /// Dirty pages written back (cleaned).
    pub pages_written_back: u64,
    /// Writeback batches in which a write failed (the data stayed dirty).
    pub writeback_errors: u64,
    /// Writes that waited at the dirty limit (throttled).
    pub throttled_writers: u64,
    /// Time writers spent throttled, in nanoseconds.
    pub throttled_ns: u64,
    /// Syncs (sync_data, sync_all, sync_range; folio_sync).
    pub syncs: u64,
    /// Time spent in syncs, in nanoseconds.
    pub sync_ns: u64,
    /// Capacity changes (Cache::set_capacity, folio_cache_set_capacity, the memory policy).
    pub capacity_changes: u64,
    /// Bytes of memory given back to the system by shrinks of the capacity.
    pub bytes_given_back: u64,
    /// Times the memory policy found the machine (or the cgroup) short of memory and
    /// shrank the cache.
    pub pressure_events: u64,
    /// Shadow entries (memory of evicted pages) held now.
    pub shadows: u64,
    /// The cache's capacity now, in bytes (it moves with set_capacity and the memory
    /// policy).
    pub capacity_bytes: u64,
    /// The largest capacity, reserved at build, in bytes.
    pub capacity_max_bytes: u64,
    /// Bytes of folio memory resident now (an upper bound: the arena grown, less what
    /// was given back and not taken again).
    pub resident_bytes: u64,
    /// Bytes given back to the system and not taken again.
    pub returned_bytes: u64,
    /// Bytes given back and then allocated again (faulted in anew), since build.
    pub bytes_regrown: u64,
    /// Bytes of cached pages held now.
    pub cached_bytes: u64,
    /// Bytes of metadata: the pages' side table, the mappings and their index nodes.
    pub metadata_bytes: u64,
    /// Files the cache knows now (a handle open or a page cached).
    pub mappings: u64,
    /// Index nodes the mappings hold (counted in `metadata_bytes`).
    pub index_nodes: u64,
    /// Bytes of the arena populated and handed to the allocator so far (it grows in
    /// 2 MiB chunks ahead of the allocator; the rest is not resident yet).
    pub arena_grown_bytes: u64,
    /// Chunks an allocation had to grow unpopulated because the background populator
    /// was behind (their first reads faulted their pages in).
    pub arena_chunks_unpopulated: u64,
    /// Pages dirty now (or reserved by a writer about to dirty them).
    pub dirty_pages: u64,
    /// Pages under writeback now.
    pub writeback_pages: u64,
    /// Futures (read_at_async, get_page_async) parked now on a folio's read or waiting
    /// for memory, in the whole process: their wait table is one per process, as the
    /// kernel's folio wait table.
    pub futures_parked: u64,
    /// Bytes of the arena grown advised for huge pages: all of it under
    /// `ArenaPages::Huge`, the chunks large folios asked for under `ArenaPages::Auto`
    /// (advice: the kernel backs them with huge pages where it can).
    pub arena_huge_bytes: u64,
    /// The engine in use: FOLIO_BACKEND_IO_URING, FOLIO_BACKEND_PREAD or
    /// FOLIO_BACKEND_OTHER.
    pub backend: u32,
    /// The eviction policy: FOLIO_EVICTION_S3FIFO, FOLIO_EVICTION_TWO_LIST_LRU or
    /// FOLIO_EVICTION_OTHER.
    pub eviction: u32,
}

const _: () = assert!(Stats::FIELDS.len() == 54);

impl folio_stats {
    /// The C struct of a snapshot.
    pub(crate) fn of(stats: &Stats) -> folio_stats {
        folio_stats {
            hits: stats.hits,
            misses: stats.misses,
            waits_on_io: stats.waits_on_io,
            optimistic_retries: stats.optimistic_retries,
            pages_inserted: stats.pages_inserted,
            insert_conflicts: stats.insert_conflicts,
            io_requests: stats.io_requests,
            io_bytes: stats.io_bytes,
            io_errors: stats.io_errors,
            short_read_retries: stats.short_read_retries,
            evicted_folios: stats.evicted_folios,
            evicted_pages: stats.evicted_pages,
            refaults: stats.refaults,
            workingset_refaults: stats.workingset_refaults,
            shadows_dropped: stats.shadows_dropped,
            background_reclaims: stats.background_reclaims,
            invalidated_pages: stats.invalidated_pages,
            readahead_sync: stats.readahead_sync,
            readahead_async: stats.readahead_async,
            readahead_forced: stats.readahead_forced,
            readahead_pages: stats.readahead_pages,
            readahead_wasted_pages: stats.readahead_wasted_pages,
            alloc_failures: stats.alloc_failures,
            mappings_removed: stats.mappings_removed,
            write_requests: stats.write_requests,
            write_bytes: stats.write_bytes,
            write_copies: stats.write_copies,
            writeback_requests: stats.writeback_requests,
            writeback_bytes: stats.writeback_bytes,
            pages_written_back: stats.pages_written_back,
            writeback_errors: stats.writeback_errors,
            throttled_writers: stats.throttled_writers,
            throttled_ns: stats.throttled_ns,
            syncs: stats.syncs,
            sync_ns: stats.sync_ns,
            capacity_changes: stats.capacity_changes,
            bytes_given_back: stats.bytes_given_back,
            pressure_events: stats.pressure_events,
            shadows: stats.shadows,
            capacity_bytes: stats.capacity_bytes,
            capacity_max_bytes: stats.capacity_max_bytes,
            resident_bytes: stats.resident_bytes,
            returned_bytes: stats.returned_bytes,
            bytes_regrown: stats.bytes_regrown,
            cached_bytes: stats.cached_bytes,
            metadata_bytes: stats.metadata_bytes,
            mappings: stats.mappings,
            index_nodes: stats.index_nodes,
            arena_grown_bytes: stats.arena_grown_bytes,
            arena_chunks_unpopulated: stats.arena_chunks_unpopulated,
            dirty_pages: stats.dirty_pages,
            writeback_pages: stats.writeback_pages,
            futures_parked: stats.futures_parked,
            arena_huge_bytes: stats.arena_huge_bytes,
            backend: crate::cache::backend_code(&stats.backend),
            eviction: crate::cache::eviction_code(&stats.eviction),
        }
    }

    /// The numbers, in the order of `Stats::FIELDS`.
    pub(crate) fn values(&self) -> [u64; 54] {
        [
            self.hits,
            self.misses,
            self.waits_on_io,
            self.optimistic_retries,
            self.pages_inserted,
            self.insert_conflicts,
            self.io_requests,
            self.io_bytes,
            self.io_errors,
            self.short_read_retries,
            self.evicted_folios,
            self.evicted_pages,
            self.refaults,
            self.workingset_refaults,
            self.shadows_dropped,
            self.background_reclaims,
            self.invalidated_pages,
            self.readahead_sync,
            self.readahead_async,
            self.readahead_forced,
            self.readahead_pages,
            self.readahead_wasted_pages,
            self.alloc_failures,
            self.mappings_removed,
            self.write_requests,
            self.write_bytes,
            self.write_copies,
            self.writeback_requests,
            self.writeback_bytes,
            self.pages_written_back,
            self.writeback_errors,
            self.throttled_writers,
            self.throttled_ns,
            self.syncs,
            self.sync_ns,
            self.capacity_changes,
            self.bytes_given_back,
            self.pressure_events,
            self.shadows,
            self.capacity_bytes,
            self.capacity_max_bytes,
            self.resident_bytes,
            self.returned_bytes,
            self.bytes_regrown,
            self.cached_bytes,
            self.metadata_bytes,
            self.mappings,
            self.index_nodes,
            self.arena_grown_bytes,
            self.arena_chunks_unpopulated,
            self.dirty_pages,
            self.writeback_pages,
            self.futures_parked,
            self.arena_huge_bytes,
        ]
    }
}
