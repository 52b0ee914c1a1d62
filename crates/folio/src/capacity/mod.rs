//! The capacity at run time: `Cache::set_capacity`, the parts sized from it, and the
//! policy that makes it follow the machine's memory (DESIGN.md §9).
//!
//! Design: the arena reserves the largest capacity at build (`capacity_max`: address
//! space and zeroed metadata, nothing resident) and never moves a frame; the capacity is
//! how much of it may be allocated (`arena::capacity`). Setting it (`Core::set_capacity`):
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
//! The rooms: `machine` (what the kernel reports of memory, cgroup v2 included),
//! `follow` (the policy's decision and its response time), and this file (setting the
//! capacity, the policy's thread).
//!
//! Protection: one mutex (`CapacityControl::lock`) orders capacity changes (a caller's
//! and the policy's), held across the shrink; the figures it sets are atomics the
//! allocator and reclaim read without it.
//!
//! Limits: the capacity moves in whole frames between `CAPACITY_BYTES_MIN` and the
//! reserved maximum; a shrink that meets pinned folios or a device slower than
//! `alloc_wait` returns with the limit in place and the excess still resident (the next
//! reclaim frees it, the policy's next shrink gives it back).

pub mod follow;
pub mod machine;

use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::cache::{
    CAPACITY_BYTES_MIN, DIRTY_BACKGROUND_PERCENT_DEFAULT, DIRTY_LIMIT_PERCENT_DEFAULT,
};
use crate::pagecache::Core;
use crate::reclaim;
use crate::stats;
use crate::types::PAGE_BYTES;

use follow::{Decision, Reading};
use machine::MemorySource;

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
        (
            pages(self.limit_bytes, DIRTY_LIMIT_PERCENT_DEFAULT),
            pages(self.background_bytes, DIRTY_BACKGROUND_PERCENT_DEFAULT),
        )
    }
}

/// Capacity changes: their order, the settings they size parts from, the policy thread's
/// stop signal.
#[derive(Debug)]
pub(crate) struct CapacityControl {
    pub policy: CapacityPolicy,
    pub dirty: DirtySettings,
    /// Held by a capacity change from start to end.
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
}

impl Core {
    /// The capacity now, in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.mem.arena.capacity_frames() * PAGE_BYTES as u64
    }

    /// The largest capacity, reserved at build, in bytes.
    pub fn capacity_max_bytes(&self) -> u64 {
        u64::from(self.mem.arena.frame_count()) * PAGE_BYTES as u64
    }

    /// Sets the capacity (module docs): at once for new allocations; a shrink evicts,
    /// writes dirty folios back and gives memory back before it returns, as far as
    /// pinned folios and `alloc_wait` let it.
    ///
    /// Errors: `InvalidInput` below `CAPACITY_BYTES_MIN` or above the maximum reserved at
    /// build (`CacheBuilder::capacity_max_bytes`); nothing changes then.
    ///
    /// Context: any thread but one holding a folio pinned that it waits to release after
    /// this returns (the shrink would wait `alloc_wait` for it). Takes the capacity lock,
    /// reclaim's locks and the writeback's; may sleep.
    pub fn set_capacity(&self, bytes: u64) -> io::Result<()> {
        let max = self.capacity_max_bytes();
        if !(CAPACITY_BYTES_MIN..=max).contains(&bytes) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "folio: a capacity of {bytes} bytes is outside [{CAPACITY_BYTES_MIN}, {max}] \
                     (the maximum is reserved at build: CacheBuilder::capacity_max_bytes)"
                ),
            ));
        }
        let _change = self.capacity.lock.lock().unwrap_or_else(|e| e.into_inner());
        let frames = bytes / PAGE_BYTES as u64;
        let old = self.mem.arena.capacity_frames();
        self.mem.arena.set_capacity_frames(frames);
        self.resize_parts(frames);
        stats::bump(&self.mem.counters.capacity_changes);
        if frames < old {
            self.shrink_to(frames);
        }
        Ok(())
    }

    /// Sizes the parts drawn from the capacity: reclaim's watermarks and shadow log, the
    /// eviction queues, the readahead share, the dirty budget.
    pub(crate) fn resize_parts(&self, frames: u64) {
        self.reclaimer.resize(frames);
        self.mem.policy.resize(frames);
        self.mem
            .readahead_limit
            .set_frames(u32::try_from(frames).expect("frames fit the arena"));
        let (limit, background) = self.capacity.dirty.pages_for(frames);
        self.mem.dirty.set_limits(limit, background);
    }

    /// Evicts down to `frames` less the high watermark, then gives the free memory past
    /// the capacity back.
    fn shrink_to(&self, frames: u64) {
        let started = Instant::now();
        let target = frames.saturating_sub(self.reclaimer.high_pages());
        loop {
            let allocated = self.mem.arena.allocated_frames();
            if allocated <= target {
                break;
            }
            let want = (allocated - target).min(64 * reclaim::BATCH_PAGES);
            let report = self.reclaimer.reclaim(&self.mem, &self.mappings, want);
            if report.freed_pages > 0 {
                continue;
            }
            if started.elapsed() >= self.alloc_wait {
                break;
            }
            if self.mem.dirty.pages() > 0 {
                // What is left may be dirty: written back first, never dropped; all of
                // it, also under the background threshold (`kick_to_clean`).
                self.dirty_files.kick_to_clean();
            } else if report.busy == 0 {
                break; // nothing left to evict but what is pinned elsewhere
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let given = self.mem.arena.give_back(self.mem.arena.free_frames());
        stats::add(
            &self.mem.counters.bytes_given_back,
            given * PAGE_BYTES as u64,
        );
    }

    /// The policy thread's body (`CapacityPolicy::FollowMachine`): a tick every
    /// `follow::TICK` until the cache stops it.
    ///
    /// Context: its own thread ("folio-memory"); a tick that shrinks takes
    /// `set_capacity`'s locks.
    pub(crate) fn follow_machine(&self) {
        let source = MemorySource::this_process();
        let refaults = || {
            // Any refault, not only those the policy counts within its workingset:
            // S3-FIFO stamps only what leaves its small queue, so pages evicted from the
            // main queue come back as plain refaults (measured: 318-126,067 workingset
            // refaults against 0.46-1.3 M refaults per `folio-bench pressure` run, and
            // growth came 3.7-7.9 s late).
            self.mem.counters.refaults.load(Ordering::Relaxed)
        };
        let mut refaults_before = refaults();
        let mut stalls_before = (Instant::now(), source.read().pressure_some_total_us);
        let mut last_stall_shrink: Option<Instant> = None;
        while self.capacity.sleep(follow::TICK) {
            let refaults_now = refaults();
            let arena = &self.mem.arena;
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
            let free_bytes = arena.free_frames() * PAGE_BYTES as u64;
            let reading = Reading {
                facts,
                resident_bytes: arena.resident_frames() * PAGE_BYTES as u64,
                capacity_bytes: self.capacity_bytes(),
                full: free_bytes < follow::reserve_bytes(facts.limit_bytes) / 16,
                refaulted: refaults_now > refaults_before,
                stall_share,
            };
            refaults_before = refaults_now;
            let decision = follow::decide(&reading, CAPACITY_BYTES_MIN, self.capacity_max_bytes());
            let to = match decision {
                Decision::Keep => continue,
                Decision::Shrink(to) => {
                    stats::bump(&self.mem.counters.pressure_events);
                    if stall_share > follow::STALL_SHARE_SHRINK {
                        last_stall_shrink = Some(Instant::now());
                    }
                    to
                }
                Decision::Lower(to) | Decision::Grow(to) => to,
            };
            let to = to / PAGE_BYTES as u64 * PAGE_BYTES as u64;
            // In range by construction; an error would only mean the figures moved.
            let _ = self.set_capacity(to);
        }
    }
}
