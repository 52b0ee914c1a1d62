//! Counters of what the cache did, and the snapshot `Cache::stats` returns.
//!
//! The counters are listed once, in the `counters!` invocation below, and everything
//! else comes from that list: the snapshot [`Stats`] and its [`Stats::FIELDS`], the
//! shared atomics, their initialisation and their snapshot, and (through `FIELDS`) the C
//! ABI's `folio_stats` and its printer, which folio-capi generates from it. A new counter
//! is its name and doc in one of the three groups (then `FOLIO_BLESS_HEADER=1 cargo test
//! -p folio-capi --test header` regenerates the C side).
//!
//! Miss-path counters are shared atomics: they move next to an I/O. The hit path must not
//! do an atomic read-modify-write (DESIGN.md §2), so hits are counted per thread: every
//! cache has a block of counters per thread slot (`ThreadCounters`, a cache line each),
//! and a thread counts in the block of its slot, which only it writes (load then store,
//! no RMW, no shared line); `Cache::stats` sums the blocks. A thread takes a slot at its
//! first hit (`THREAD_SLOT`, the same in every cache) and gives it back when it exits,
//! so that a slot has one writer at a time and the process's threads alive at once, not
//! all it ever started, decide how many are used. Gauges are not counted here:
//! `Core::stats` (pagecache.rs) fills them in from the arena, the mappings and the
//! reclaimer when it takes the snapshot.
//!
//! Protection: every counter is a relaxed atomic (statistics: no ordering with the data).
//! A slot passes from an exiting thread to the next under `FREE_SLOTS`' mutex, so the
//! next writer's first load sees the last store of the one before.
//!
//! Limits: a snapshot is not atomic across counters (each is read once, in turn). Beyond
//! `THREAD_SLOTS` threads counting at once, the others share one block with atomic adds.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// One field of [`Stats`]: its name and what it counts. [`Stats::FIELDS`] lists them all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatField {
    /// The field's name in [`Stats`] (and in the C ABI's `folio_stats`).
    pub name: &'static str,
    /// Its documentation, one line per line, as written in the counter list.
    pub doc: &'static str,
}

/// Generates, from the one list of counters, [`Stats`], its [`Stats::FIELDS`] and
/// [`Stats::values`], the shared atomics of [`Counters`], their `Default` and their
/// snapshot. Groups:
/// - `per_thread`: counted on the hit path in per-thread blocks, summed by the snapshot
///   (plus `Counters::pinned_hits` for `hits`);
/// - `shared`: a shared atomic each, bumped next to an I/O or under a lock;
/// - `gauges`: not counted; `Core::stats` (pagecache.rs) measures them when it takes the
///   snapshot.
macro_rules! counters {
    (
        per_thread { $( $(#[doc = $tdoc:literal])+ $thread:ident, )+ }
        shared { $( $(#[doc = $sdoc:literal])+ $shared:ident, )+ }
        gauges { $( $(#[doc = $gdoc:literal])+ $gauge:ident, )+ }
    ) => {
        /// A snapshot of a cache's counters and gauges. All counts since the cache was
        /// built; gauges as of the snapshot. [`Stats::FIELDS`] names every number.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct Stats {
            $( $(#[doc = $tdoc])+ pub $thread: u64, )+
            $( $(#[doc = $sdoc])+ pub $shared: u64, )+
            $( $(#[doc = $gdoc])+ pub $gauge: u64, )+
            /// Which backend reads the files: "io_uring", "pread" (or a test's engine).
            pub backend: String,
            /// Which policy evicts: "s3fifo" or "lru" (the kernel's two lists).
            pub eviction: String,
        }

        impl Stats {
            /// Every number of [`Stats`], in declaration order: the counters, then the
            /// gauges. (`backend` and `eviction` are names, not listed.)
            pub const FIELDS: &'static [StatField] = &[
                $( StatField { name: stringify!($thread), doc: concat!($($tdoc, "\n"),+) }, )+
                $( StatField { name: stringify!($shared), doc: concat!($($sdoc, "\n"),+) }, )+
                $( StatField { name: stringify!($gauge), doc: concat!($($gdoc, "\n"),+) }, )+
            ];

            /// Every number of this snapshot with its field, in the order of
            /// [`Stats::FIELDS`].
            pub fn values(&self) -> impl Iterator<Item = (&'static StatField, u64)> {
                Self::FIELDS.iter().zip([
                    $( self.$thread, )+
                    $( self.$shared, )+
                    $( self.$gauge, )+
                ])
            }

            /// Every number of this snapshot, writable, with its field, in the order of
            /// [`Stats::FIELDS`] (for tests and for differences of two snapshots).
            pub fn values_mut(&mut self) -> impl Iterator<Item = (&'static StatField, &mut u64)> {
                Self::FIELDS.iter().zip([
                    $( &mut self.$thread, )+
                    $( &mut self.$shared, )+
                    $( &mut self.$gauge, )+
                ])
            }
        }

        /// The shared counters, and the per-thread blocks of the hit path.
        #[derive(Debug)]
        pub(crate) struct Counters {
            /// Hits of the pinned path, which does atomic read-modify-writes anyway (the
            /// page's reference): added to the per-thread blocks' `hits`.
            pub pinned_hits: AtomicU64,
            $( $(#[doc = $sdoc])+ pub $shared: AtomicU64, )+
            /// A block per thread slot (`THREAD_SLOTS`), each written by the thread that
            /// holds the slot.
            threads: Box<[ThreadCounters]>,
            /// The block of the threads that found no slot free (atomic adds).
            overflow: ThreadCounters,
        }

        impl Default for Counters {
            fn default() -> Self {
                Counters {
                    pinned_hits: AtomicU64::new(0),
                    $( $shared: AtomicU64::new(0), )+
                    threads: (0..THREAD_SLOTS).map(|_| ThreadCounters::default()).collect(),
                    overflow: ThreadCounters::default(),
                }
            }
        }

        /// Counters one thread writes and anyone reads: a cache line of its own.
        #[derive(Default, Debug)]
        #[repr(align(64))]
        struct ThreadCounters {
            $( $thread: AtomicU64, )+
        }

        impl Counters {
            /// The counters now; the gauges, `backend` and `eviction` are left for the
            /// caller to fill in.
            ///
            /// Context: any thread; takes no lock.
            pub fn snapshot(&self) -> Stats {
                let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
                let blocks = || self.threads.iter().chain([&self.overflow]);
                let mut stats = Stats {
                    $( $thread: blocks().map(|b| get(&b.$thread)).sum(), )+
                    $( $shared: get(&self.$shared), )+
                    ..Stats::default()
                };
                stats.hits += get(&self.pinned_hits);
                stats
            }
        }
    };
}

// The counter list. Its docs serve Rust and C alike (folio.h carries them): plain text,
// no intra-doc links.
counters! {
    per_thread {
        /// Page accesses served from a cached page without waiting (optimistic or pinned).
        hits,
    }
    shared {
        /// Pages a read found missing and had to read.
        misses,
        /// Page accesses that found their page with another reader's I/O in flight and
        /// waited for it (not counted in `hits` or `misses`).
        waits_on_io,
        /// Optimistic (lock-free) copies discarded because the page changed underneath.
        optimistic_retries,
        /// Pages inserted into the cache (each read from its file once).
        pages_inserted,
        /// Folios a racing insertion had already placed (allocated, then given back).
        insert_conflicts,
        /// Read requests submitted to the backend.
        io_requests,
        /// Bytes the read requests asked for.
        io_bytes,
        /// Reads that failed.
        io_errors,
        /// Short reads completed by a retry.
        short_read_retries,
        /// Folios evicted by reclaim.
        evicted_folios,
        /// Pages evicted by reclaim.
        evicted_pages,
        /// Insertions of pages cached before (a shadow entry remembered them).
        refaults,
        /// Refaults the eviction policy recognised as within the workingset (S3-FIFO: still
        /// in the ghost queue; LRU: refault distance within the active list).
        workingset_refaults,
        /// Shadow entries dropped to keep them under their cap.
        shadows_dropped,
        /// Batches the background reclaimer evicted.
        background_reclaims,
        /// Pages dropped by invalidation (truncation, a changed file, DontNeed advice).
        invalidated_pages,
        /// Readahead windows opened on a miss (synchronous readahead).
        readahead_sync,
        /// Readahead windows opened on a hit of a window's marker (asynchronous readahead).
        readahead_async,
        /// Forced readahead calls (File::readahead or folio_readahead, and WillNeed advice;
        /// one per call).
        readahead_forced,
        /// Pages readahead inserted.
        readahead_pages,
        /// Pages readahead inserted that were evicted before anyone read them (wasted).
        readahead_wasted_pages,
        /// Allocations that found every page pinned or locked and gave up (ENOMEM).
        alloc_failures,
        /// Files forgotten so far (no handle open and no page cached left).
        mappings_removed,
        /// Calls of write_at (or folio_write) that wrote something.
        write_requests,
        /// Bytes those writes copied into the cache.
        write_bytes,
        /// Writes a writer made to a copy of a folio because someone held the original
        /// pinned (copy on write).
        write_copies,
        /// Writes of dirty blocks submitted to the backend (merged runs).
        writeback_requests,
        /// Bytes the writebacks wrote to the files.
        writeback_bytes,
        /// Dirty pages written back (cleaned).
        pages_written_back,
        /// Writeback batches in which a write failed (the data stayed dirty).
        writeback_errors,
        /// Writes that waited at the dirty limit (throttled).
        throttled_writers,
        /// Time writers spent throttled, in nanoseconds.
        throttled_ns,
        /// Syncs (sync_data, sync_all, sync_range; folio_sync).
        syncs,
        /// Time spent in syncs, in nanoseconds.
        sync_ns,
        /// Capacity changes (Cache::set_capacity, folio_cache_set_capacity, the memory policy).
        capacity_changes,
        /// Bytes of memory given back to the system by shrinks of the capacity.
        bytes_given_back,
        /// Times the memory policy found the machine (or the cgroup) short of memory and
        /// shrank the cache.
        pressure_events,
    }
    gauges {
        /// Shadow entries (memory of evicted pages) held now.
        shadows,
        /// The cache's capacity now, in bytes (it moves with set_capacity and the memory
        /// policy).
        capacity_bytes,
        /// The largest capacity, reserved at build, in bytes.
        capacity_max_bytes,
        /// Bytes of folio memory resident now (an upper bound: the arena grown, less what
        /// was given back and not taken again).
        resident_bytes,
        /// Bytes given back to the system and not taken again.
        returned_bytes,
        /// Bytes given back and then allocated again (faulted in anew), since build.
        bytes_regrown,
        /// Bytes of cached pages held now.
        cached_bytes,
        /// Bytes of metadata: the pages' side table, the mappings and their index nodes.
        metadata_bytes,
        /// Files the cache knows now (a handle open or a page cached).
        mappings,
        /// Index nodes the mappings hold (counted in `metadata_bytes`).
        index_nodes,
        /// Bytes of the arena populated and handed to the allocator so far (it grows in
        /// 2 MiB chunks ahead of the allocator; the rest is not resident yet).
        arena_grown_bytes,
        /// Chunks an allocation had to grow unpopulated because the background populator
        /// was behind (their first reads faulted their pages in).
        arena_chunks_unpopulated,
        /// Pages dirty now (or reserved by a writer about to dirty them).
        dirty_pages,
        /// Pages under writeback now.
        writeback_pages,
        /// Futures (read_at_async, get_page_async) parked now on a folio's read or waiting
        /// for memory, in the whole process: their wait table is one per process, as the
        /// kernel's folio wait table.
        futures_parked,
        /// Bytes of the arena grown advised for huge pages: all of it under
        /// `ArenaPages::Huge`, the chunks large folios asked for under `ArenaPages::Auto`
        /// (advice: the kernel backs them with huge pages where it can).
        arena_huge_bytes,
    }
}

impl Stats {
    /// Bytes written to files by writeback per byte written into the cache (0 before any
    /// write): about 1 when each dirty block is written once, below 1 when writes to the
    /// same block merge before writeback.
    pub fn write_amplification(&self) -> f64 {
        if self.write_bytes == 0 {
            0.0
        } else {
            self.writeback_bytes as f64 / self.write_bytes as f64
        }
    }
}

/// Thread slots: the per-thread blocks of each cache (a cache line each, 16 KiB a cache).
const THREAD_SLOTS: usize = 256;
/// `THREAD_SLOT` before the thread's first hit (and after it gave its slot back).
const NO_SLOT: u32 = u32::MAX;
/// `THREAD_SLOT` of a thread that found no slot free: it counts in `Counters::overflow`.
const OVERFLOW_SLOT: u32 = u32::MAX - 1;

thread_local! {
    /// This thread's slot: the index of its block in every cache's `Counters::threads`.
    /// A plain `Cell` with no destructor, so that the hit reads it with one load.
    static THREAD_SLOT: Cell<u32> = const { Cell::new(NO_SLOT) };
    /// Gives the thread's slot back when it exits (set up with the slot).
    static SLOT_RETURN: SlotReturn = const { SlotReturn };
}

/// The thread slots free to take: `next` and up never taken, and those threads gave back.
static FREE_SLOTS: Mutex<FreeSlots> = Mutex::new(FreeSlots {
    next: 0,
    returned: Vec::new(),
});

struct FreeSlots {
    next: u32,
    returned: Vec<u32>,
}

/// `SLOT_RETURN`'s value: its drop, at the thread's exit, frees the thread's slot.
struct SlotReturn;

impl Drop for SlotReturn {
    fn drop(&mut self) {
        let slot = THREAD_SLOT.replace(NO_SLOT);
        if (slot as usize) < THREAD_SLOTS {
            lock_free_slots().returned.push(slot);
        }
    }
}

fn lock_free_slots() -> std::sync::MutexGuard<'static, FreeSlots> {
    FREE_SLOTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// This thread's slot, taken now: a free one, or `OVERFLOW_SLOT` if none is, or if the
/// thread is exiting (`SLOT_RETURN` gone: nothing would give a slot back).
#[cold]
fn take_thread_slot() -> u32 {
    // The first access sets up `SLOT_RETURN`'s drop at the thread's exit.
    let slot = if SLOT_RETURN.try_with(|_| ()).is_err() {
        OVERFLOW_SLOT
    } else {
        let mut free = lock_free_slots();
        match free.returned.pop() {
            Some(slot) => slot,
            None if (free.next as usize) < THREAD_SLOTS => {
                free.next += 1;
                free.next - 1
            }
            None => OVERFLOW_SLOT,
        }
    };
    THREAD_SLOT.set(slot);
    slot
}

/// What one open `File` handle caused, as [`File::stats`](crate::File::stats) returns
/// it: the reads of missing pages and the readahead started through this handle (a page
/// another handle of the same file had already read is a hit here, not I/O). What a
/// storage engine asks of a handle it opened on a file it just wrote: whether reading it
/// back cost any I/O.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileStats {
    /// Reads submitted to the device for this handle (one per contiguous run of missing
    /// pages).
    pub read_io_requests: u64,
    /// Bytes those reads asked for (whole pages).
    pub read_io_bytes: u64,
}

/// The counters behind [`FileStats`]: shared atomics of one handle, moved on its miss
/// path only (next to an I/O).
#[derive(Debug, Default)]
pub(crate) struct HandleCounters {
    read_io_requests: AtomicU64,
    read_io_bytes: AtomicU64,
}

impl HandleCounters {
    pub fn read_submitted(&self, len_bytes: u64) {
        bump(&self.read_io_requests);
        add(&self.read_io_bytes, len_bytes);
    }

    pub fn snapshot(&self) -> FileStats {
        FileStats {
            read_io_requests: self.read_io_requests.load(Ordering::Relaxed),
            read_io_bytes: self.read_io_bytes.load(Ordering::Relaxed),
        }
    }
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    /// Counts one hit in this thread's block: a load and a store, no RMW.
    #[inline(always)]
    pub fn hit(&self) {
        match self.threads.get(THREAD_SLOT.get() as usize) {
            Some(block) => block.count_hit(),
            None => self.hit_slow(),
        }
    }

    /// `hit` of a thread with no slot yet, or none to have.
    #[cold]
    fn hit_slow(&self) {
        let slot = match THREAD_SLOT.get() {
            NO_SLOT => take_thread_slot(),
            slot => slot,
        };
        match self.threads.get(slot as usize) {
            Some(block) => block.count_hit(),
            None => bump(&self.overflow.hits),
        }
    }
}

impl ThreadCounters {
    /// One more hit, by the thread that holds this block's slot (its only writer).
    #[inline(always)]
    fn count_hit(&self) {
        self.hits
            .store(self.hits.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_unique_documented_and_in_the_order_of_values() {
        let mut names: Vec<&str> = Stats::FIELDS.iter().map(|f| f.name).collect();
        assert!(Stats::FIELDS.iter().all(|f| !f.doc.trim().is_empty()));
        let mut stats = Stats::default();
        for (i, (field, value)) in stats.values_mut().enumerate() {
            assert_eq!(field, &Stats::FIELDS[i]);
            *value = i as u64 + 1;
        }
        let values: Vec<(&str, u64)> = stats.values().map(|(f, v)| (f.name, v)).collect();
        let expected: Vec<(&str, u64)> =
            (0..names.len()).map(|i| (names[i], i as u64 + 1)).collect();
        assert_eq!(values, expected);
        // Each value landed in its own field: `Debug` names them `name: value`.
        let debug = format!("{stats:?}");
        for (name, value) in &expected {
            assert!(
                debug.contains(&format!("{name}: {value},")),
                "{name} in {debug}"
            );
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Stats::FIELDS.len(), "a name is listed twice");
    }

    /// Threads that exit give their slot back: one after another, more of them than there
    /// are slots, each finds one (none counts in the shared overflow block). Then more
    /// threads at once than there are slots: the ones without a slot share the overflow
    /// block, and no hit is lost. (One test: the slots are the process's, and the second
    /// half holds them all for a while.)
    #[test]
    fn thread_slots_pass_from_exited_threads_and_overflow_loses_no_hit() {
        let counters = Counters::default();
        for _ in 0..2 * THREAD_SLOTS {
            let slot = std::thread::scope(|s| {
                s.spawn(|| {
                    (0..5).for_each(|_| counters.hit());
                    THREAD_SLOT.get()
                })
                .join()
                .unwrap()
            });
            assert!((slot as usize) < THREAD_SLOTS, "slot {slot}");
        }
        assert_eq!(counters.snapshot().hits, 2 * THREAD_SLOTS as u64 * 5);
        assert_eq!(counters.overflow.hits.load(Ordering::Relaxed), 0);

        let counters = Counters::default();
        let threads = THREAD_SLOTS + 44;
        let all_alive = std::sync::Barrier::new(threads);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    counters.hit();
                    all_alive.wait();
                    (0..99).for_each(|_| counters.hit());
                });
            }
        });
        assert_eq!(counters.snapshot().hits, threads as u64 * 100);
        assert!(counters.overflow.hits.load(Ordering::Relaxed) >= 44 * 100);
    }

    #[test]
    fn snapshot_sums_every_threads_hits_and_the_pinned_ones() {
        let counters = Counters::default();
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| (0..10).for_each(|_| counters.hit()));
            }
        });
        counters.hit();
        bump(&counters.pinned_hits);
        bump(&counters.misses);
        add(&counters.io_bytes, 4096);
        let stats = counters.snapshot();
        assert_eq!(stats.hits, 3 * 10 + 1 + 1);
        assert_eq!(stats.misses, 1);
        assert_eq!(stats.io_bytes, 4096);
        assert_eq!(stats.pages_inserted, 0);
    }
}
