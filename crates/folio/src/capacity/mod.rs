//! The capacity at run time: its bounds and defaults, the dirty limits sized from it, and
//! the policy that makes it follow the machine's memory (DESIGN.md §10). The mechanism
//! that moves it is above, in the page cache (`pagecache`: `Core::set_capacity`), and
//! reached from here only through [`CapacityMechanism`], which `Core` implements: this
//! folder imports nothing above `types`.
//!
//! Design: the arena reserves the largest capacity at build (`capacity_max`: address
//! space and zeroed metadata, nothing resident) and never moves a frame; the capacity is
//! how much of it may be allocated (`arena::quota`). Setting it (`Core::set_capacity`):
//!
//! ```text
//! set_capacity(bytes) ─> arena: no allocation past it ─> resize: watermarks, shadow log,
//!   eviction queues, readahead share, dirty budget (its default percentages)
//!   └ lower than what is allocated: evict the coldest clean folios (reclaim), have the
//!     writeback write every dirty file (`kick_to_clean`: whatever the dirty thresholds
//!     and expiry) and wait for it (never dropped), up to `alloc_wait`
//!     ─> give free resident blocks back to the system (`Arena::give_back`)
//! ```
//!
//! Growing raises the limit only: allocations take free resident blocks first, then
//! returned ones (faulted in anew), then virgin chunks.
//!
//! The rooms: `machine` (what the kernel reports of memory: `/proc/meminfo`, the cgroup's
//! limit and usage under v2 or v1, pressure stall information), `follow` (the policy's
//! decision and its response time), `give_back` (how much a cache nobody uses gives
//! back: a kept segment's steward's and an idle domain's), and this file (the bounds, the dirty settings, the
//! order of capacity changes, the policy's thread).
//!
//! Protection: one mutex (`CapacityControl::change`) orders capacity changes (a caller's
//! and the policy's), held across the shrink; the figures it sets are atomics the
//! allocator and reclaim read without it.
//!
//! Limits: the capacity moves in whole frames between `CAPACITY_BYTES_MIN` and the
//! reserved maximum; a shrink that meets pinned folios or a device slower than
//! `alloc_wait` returns with the limit in place and the excess still resident (the next
//! reclaim frees it, the policy's next shrink gives it back).

pub mod follow;
pub(crate) mod give_back;
pub mod machine;

use std::io;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::types::PAGE_BYTES;

use follow::{Decision, Reading};
use machine::MemorySource;

/// The smallest capacity a cache accepts: 16 frames.
pub const CAPACITY_BYTES_MIN: u64 = 16 * PAGE_BYTES as u64;

/// The default capacity: 256 MiB.
pub const CAPACITY_BYTES_DEFAULT: u64 = 256 << 20;

/// The default dirty limit, in percent of the capacity (the kernel's `dirty_ratio`).
pub const DIRTY_LIMIT_PERCENT_DEFAULT: u64 = 20;

/// The default background threshold, in percent of the capacity (the kernel's
/// `dirty_background_ratio`).
pub const DIRTY_BACKGROUND_PERCENT_DEFAULT: u64 = 10;

/// What the policy needs of the cache it sizes: the figures it reads each tick and the
/// mechanism that moves the capacity. The page cache's `Core` implements it (above this
/// module, which so never names it).
pub(crate) trait CapacityMechanism {
    /// The capacity now, in bytes.
    fn capacity_bytes(&self) -> u64;
    /// The largest capacity, reserved at build, in bytes.
    fn capacity_max_bytes(&self) -> u64;
    /// Bytes of the arena's memory resident now (allocated or free).
    fn resident_bytes(&self) -> u64;
    /// Bytes resident and free (allocatable at once).
    fn free_bytes(&self) -> u64;
    /// Every refault so far (a counter that only grows).
    fn refaults(&self) -> u64;
    /// Counts a shrink for pressure (`Stats::pressure_events`).
    fn note_pressure_event(&self);
    /// Sets the capacity (`Core::set_capacity`): within
    /// `[CAPACITY_BYTES_MIN, capacity_max_bytes]`, a whole number of pages.
    fn set_capacity(&self, bytes: u64) -> io::Result<()>;
}

/// How the capacity moves after build.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CapacityPolicy {
    /// Only `Cache::set_capacity` moves it (the default for the Rust API).
    #[default]
    Fixed,
    /// A thread follows the machine's memory (`follow`): the cache grows into free
    /// memory, up to the maximum, when a larger cache would hit, and gives memory back
    /// when the machine or the cgroup runs short. The C ABI's and the RocksDB plugin's
    /// default.
    FollowMachine,
}

/// The capacity the machine (or the process's cgroup) affords a new cache now, in bytes:
/// what is available without swapping (`MemAvailable`, or the room under the cgroup's
/// limit) less the follow policy's reserve and a half (`follow`), at least
/// [`CAPACITY_BYTES_MIN`]; [`crate::CAPACITY_BYTES_DEFAULT`] where the machine's figures
/// cannot be read. What a [`CapacityPolicy::FollowMachine`] cache given no capacity starts
/// at; for a fixed cache sized to the machine at its start (the C ABI's
/// `FOLIO_CAPACITY_FIXED` with no capacity).
///
/// Context: any thread; reads a few small files of `/proc` and `/sys/fs/cgroup` (tens of
/// microseconds); takes no lock.
pub fn machine_capacity_bytes() -> u64 {
    let facts = MemorySource::this_process().read();
    follow::afforded_at_build_bytes(&facts).max(CAPACITY_BYTES_MIN)
}

/// The dirty limits as the builder gave them: `None` follows the capacity.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DirtySettings {
    pub limit_bytes: Option<u64>,
    pub background_bytes: Option<u64>,
}

impl DirtySettings {
    /// The dirty budget's limit and background threshold, in pages, for `frames`: the
    /// default percentages of it, or the bytes given at build, at most the capacity (a
    /// shrink below a limit given at build lowers it, so that dirty pages never hold more
    /// than the cache).
    pub fn pages_for(&self, frames: u64) -> (u64, u64) {
        let pages = |given: Option<u64>, percent: u64| {
            given.map_or(frames * percent / 100, |bytes| {
                (bytes / PAGE_BYTES as u64).min(frames)
            })
        };
        let (limit, background) = (
            pages(self.limit_bytes, DIRTY_LIMIT_PERCENT_DEFAULT),
            pages(self.background_bytes, DIRTY_BACKGROUND_PERCENT_DEFAULT),
        );
        // Post: dirty pages never may hold more than the cache.
        debug_assert!(
            limit <= frames && background <= frames,
            "{self:?} at {frames}"
        );
        (limit, background)
    }
}

/// Capacity changes: their order, the settings they size parts from, the policy thread's
/// stop signal.
#[derive(Debug)]
pub(crate) struct CapacityControl {
    pub policy: CapacityPolicy,
    pub dirty: DirtySettings,
    /// Held by a capacity change from start to end (`change`).
    lock: Mutex<()>,
    /// The policy thread sleeps here between ticks; `true` stops it.
    stop: Mutex<bool>,
    stop_cv: Condvar,
}

impl CapacityControl {
    pub fn new(policy: CapacityPolicy, dirty: DirtySettings) -> CapacityControl {
        CapacityControl {
            policy,
            dirty,
            lock: Mutex::new(()),
            stop: Mutex::new(false),
            stop_cv: Condvar::new(),
        }
    }

    /// Orders a capacity change against the others: held from its start to its end.
    ///
    /// Context: not held already by this thread (the mutex is not reentrant).
    pub fn change(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends the policy thread (the caller joins it).
    pub fn stop(&self) {
        *self.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.stop_cv.notify_all();
    }

    /// Sleeps `for_` unless stopped; returns whether to go on.
    fn sleep(&self, for_: Duration) -> bool {
        let stop = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        let (stop, _) = self
            .stop_cv
            .wait_timeout_while(stop, for_, |stop| !*stop)
            .unwrap_or_else(|e| e.into_inner());
        !*stop
    }

    /// The policy thread's body (`CapacityPolicy::FollowMachine`): a tick every
    /// `follow::TICK` until the cache stops it.
    ///
    /// Context: its own thread ("folio-memory"); a tick that shrinks takes
    /// `set_capacity`'s locks.
    pub(crate) fn follow_machine(&self, cache: &impl CapacityMechanism) {
        let source = MemorySource::this_process();
        let refaults = || {
            // Any refault, not only those the policy counts within its workingset:
            // S3-FIFO stamps only what leaves its small queue, so pages evicted from the
            // main queue come back as plain refaults (measured: 318-126,067 workingset
            // refaults against 0.46-1.3 M refaults per `folio-bench pressure` run, and
            // growth came 3.7-7.9 s late).
            cache.refaults()
        };
        let mut refaults_before = refaults();
        let mut stalls_before = (Instant::now(), source.read().pressure_some_total_us);
        let mut last_stall_shrink: Option<Instant> = None;
        while self.sleep(follow::TICK) {
            let refaults_now = refaults();
            debug_assert!(refaults_now >= refaults_before, "the refault count fell");
            let facts = source.read();
            let stalls_now = (Instant::now(), facts.pressure_some_total_us);
            let cooling =
                last_stall_shrink.is_some_and(|t| t.elapsed() < follow::STALL_SHRINK_EVERY);
            let stall_share = match (stalls_before.1, stalls_now.1) {
                (Some(before), Some(now)) if !cooling => {
                    let tick_us = (stalls_now.0 - stalls_before.0).as_micros().max(1) as f64;
                    now.saturating_sub(before) as f64 / tick_us
                }
                _ => 0.0,
            };
            stalls_before = stalls_now;
            let free_bytes = cache.free_bytes();
            let max = cache.capacity_max_bytes();
            debug_assert!(cache.capacity_bytes() <= max, "a capacity past its maximum");
            let reading = Reading {
                facts,
                resident_bytes: cache.resident_bytes(),
                capacity_bytes: cache.capacity_bytes(),
                full: free_bytes < follow::reserve_bytes(facts.limit_bytes) / 16,
                refaulted: refaults_now > refaults_before,
                stall_share,
            };
            refaults_before = refaults_now;
            let decision = follow::decide(&reading, CAPACITY_BYTES_MIN, max);
            let to = match decision {
                Decision::Keep => continue,
                Decision::Shrink(to) => {
                    cache.note_pressure_event();
                    if stall_share > follow::STALL_SHARE_SHRINK {
                        last_stall_shrink = Some(Instant::now());
                    }
                    to
                }
                Decision::Lower(to) | Decision::Grow(to) => to,
            };
            let to = to / PAGE_BYTES as u64 * PAGE_BYTES as u64;
            // Pre of `set_capacity`: in its range (rounding down to a page keeps it there:
            // the minimum is whole pages).
            debug_assert!(
                (CAPACITY_BYTES_MIN..=max).contains(&to),
                "{to} out of range"
            );
            // In range by construction; an error would only mean the figures moved.
            let _ = cache.set_capacity(to);
        }
    }
}
