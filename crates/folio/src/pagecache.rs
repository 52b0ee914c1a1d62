//! The page cache's shared core: memory, mappings, reclaim and the I/O backend, and how
//! folios are allocated.
//!
//! The cache's four layers, outside in: `Cache` (what users build and open files with; a
//! handle on the engine), `Engine` (here: the running cache, the backend, the core and the
//! background threads; every `File` holds it too), `Core` (here: what I/O completions
//! share, everything but the backend), `Memory` (`memory`: the arena, the eviction
//! policy, the counters and the dirty budget, as the parts below the page cache see them).
//!
//! Ownership: a `Cache` and every `File` hold an `Arc<Engine>`, which owns the I/O
//! backend, the background threads (writeback, reclaimer, populator) and an
//! `Arc<Core>`. In-flight I/O holds an `Arc<Core>` (never the backend), so the last
//! handle's drop stops the writeback thread, writes back every dirty page and waits for
//! it, stops the reclaimer and the populator, then shuts the backend down, which waits for
//! the I/O in flight, whose completions release their `Core`; the arena is unmapped after
//! the last of them. Dropping a `Cache` while
//! `File`s live is therefore defined: the files keep working and the memory goes with
//! the last of them.
//!
//! Protection: per part (`memory`, `mapping::MappingTable`, `reclaim::Reclaimer`).

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::arena::{FolioUse, POPULATE_AHEAD_CACHE_BYTES_MIN};
use crate::capacity::{CapacityControl, CapacityMechanism, CapacityPolicy, CAPACITY_BYTES_MIN};
use crate::index::NODE_BYTES;
use crate::io::Backend;
use crate::mapping::{Mapping, MappingTable};
use crate::memory::Memory;
use crate::reclaim::{self, Reclaimer};
use crate::segment::published::StatValue;
use crate::stats::{self, Stats};
use crate::types::{FrameId, Order, PAGE_BYTES};
use crate::write::queue::DirtyFiles;

/// Whether an allocation may wait for memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AllocMode {
    Wait,
    NoWait,
}

/// The core of the running cache: its shared state, everything but the I/O backend and
/// the threads (memory, mappings, reclaim, the queue of dirty files, the capacity's
/// control and the settings). Named for what it is to the `Engine` around it: the part
/// I/O completions hold (an `Arc<Core>`), so that memory outlives the last read in flight,
/// and what every read, write and background thread works on.
#[derive(Debug)]
pub(crate) struct Core {
    /// Reached through `memory()` and the shortcuts below it (`arena`, `counters`,
    /// `dirty_budget`, `put_folio`).
    mem: Memory,
    pub mappings: MappingTable,
    pub reclaimer: Reclaimer,
    pub alloc_wait: Duration,
    pub folio_order_max: Order,
    /// The maximum readahead window of new handles, in pages.
    pub readahead_pages: u32,
    /// The files with dirty pages, for the writeback thread (DESIGN.md §8).
    pub dirty_files: DirtyFiles,
    /// Whole pages an appending writer leaves dirty before their writeback starts (0:
    /// never; `write::thread::write_behind`).
    pub write_behind_pages: u64,
    /// Capacity changes and the policy that makes them (`capacity`).
    pub capacity: CapacityControl,
}

impl Core {
    /// Assembles the core from its parts (`CacheBuilder::build`); the maximum readahead
    /// window of new handles is set after, from the arena's size
    /// (`readahead_pages_for`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mem: Memory,
        mappings: MappingTable,
        reclaimer: Reclaimer,
        alloc_wait: Duration,
        folio_order_max: Order,
        dirty_files: DirtyFiles,
        write_behind_pages: u64,
        capacity: CapacityControl,
    ) -> Core {
        Core {
            mem,
            mappings,
            reclaimer,
            alloc_wait,
            folio_order_max,
            readahead_pages: 0,
            dirty_files,
            write_behind_pages,
            capacity,
        }
    }

    /// The memory as the layers below see it (`Memory`): what to pass them.
    #[inline]
    pub fn memory(&self) -> &Memory {
        &self.mem
    }

    /// The frames and their side table.
    #[inline]
    pub fn arena(&self) -> &crate::arena::Arena {
        self.mem.arena()
    }

    /// The cache's event counters (`stats::bump` them).
    #[inline]
    pub fn counters(&self) -> &crate::stats::Counters {
        self.mem.counters()
    }

    /// The dirty budget: charged by writes, uncharged as pages are written or dropped.
    #[inline]
    pub fn dirty_budget(&self) -> &crate::write::budget::DirtyBudget {
        self.mem.dirty_budget()
    }

    /// Drops a reference to the folio at `frame`; frees it if it was the last one.
    #[inline]
    pub fn put_folio(&self, frame: FrameId) {
        self.mem.put_folio(frame);
    }

    /// The largest readahead window a handle of this cache may use, in pages: the state
    /// word's limit, and an eighth of the cache rounded down to a power of two, so that a
    /// window and the next one in flight never take more than a quarter of it (as one
    /// run of `read_missing`) and ramped windows stay aligned to the largest folio
    /// (`readahead::window_pages_limit`). Windows are bounded further by the cache-wide
    /// limit (`Memory::readahead_limit`): each active stream's share, and less while
    /// readahead thrashes.
    pub fn readahead_pages_limit(&self) -> u32 {
        let frames = u32::try_from(self.arena().capacity_frames()).expect("frames fit the arena");
        crate::readahead::window_pages_limit(frames)
    }

    /// A maximum window of `bytes`, in pages, within `readahead_pages_limit`.
    pub fn readahead_pages_for(&self, bytes: u64) -> u32 {
        (bytes / PAGE_BYTES as u64).min(u64::from(self.readahead_pages_limit())) as u32
    }

    /// Allocates a LOCKED folio of `order` for `use_`, or a smaller one if memory is
    /// fragmented.
    /// When nothing is free, reclaims; when reclaim finds everything pinned or locked,
    /// `AllocMode::Wait` waits up to the configured `alloc_wait` for holders to finish,
    /// then fails with `OutOfMemory` (never a deadlock); `AllocMode::NoWait` fails at once.
    ///
    /// Context: no index lock held (reclaim takes them). A caller that already holds
    /// LOCKED folios it allocated must use `NoWait`: waiting while holding them is how
    /// every reader ends up waiting for every other. May sleep (`Wait`).
    pub fn alloc_folio(
        &self,
        order: Order,
        use_: FolioUse,
        mode: AllocMode,
    ) -> io::Result<(FrameId, Order)> {
        let started = Instant::now();
        let mut pause = Duration::from_micros(50);
        loop {
            if let Some(got) = self.try_alloc(order, use_) {
                return Ok(got);
            }
            let want = order.pages().max(reclaim::BATCH_PAGES);
            let report = self.reclaimer.reclaim(self.memory(), &self.mappings, want);
            if report.freed_pages == 0 && self.dirty_budget().pages() > 0 {
                // Maybe only dirty folios are left to evict: write them back, all of
                // them, also under the background threshold (a dirty limit set above a
                // capacity shrunk since would otherwise leave the cache full of dirty
                // folios nobody writes until they expire).
                self.dirty_files.kick_to_clean();
            }
            if let Some(got) = self.try_alloc(order, use_) {
                return Ok(got);
            }
            // Fragmented: take the largest smaller block there is.
            for smaller in (0..order.get()).rev() {
                if let Some(got) = self.try_alloc(Order::new(smaller), use_) {
                    return Ok(got);
                }
            }
            let out_of_time = mode == AllocMode::NoWait || started.elapsed() >= self.alloc_wait;
            if report.freed_pages > 0 && !out_of_time {
                continue; // others took what was freed; reclaim again
            }
            if out_of_time {
                if mode == AllocMode::Wait {
                    stats::bump(&self.counters().alloc_failures);
                }
                if let Some(segment) = self.arena().segment().filter(|_| self.arena().no_room()) {
                    return Err(io::Error::new(
                        io::ErrorKind::OutOfMemory,
                        format!(
                            "folio: no free memory: the file system of the segment {} is full",
                            segment.path().display()
                        ),
                    ));
                }
                return Err(io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    format!(
                        "folio: no free memory: every folio is pinned or has I/O in flight ({} seen busy); \
                         drop page references or raise the capacity",
                        report.busy
                    ),
                ));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    fn try_alloc(&self, order: Order, use_: FolioUse) -> Option<(FrameId, Order)> {
        let frame = self.arena().alloc(order, use_)?;
        self.reclaimer.note_alloc(self.arena().free_frames());
        Some((frame, order))
    }

    pub fn stats(&self) -> Stats {
        let arena = self.arena();
        let mut s = self.counters().snapshot();
        let page = PAGE_BYTES as u64;
        s.capacity_bytes = self.capacity_bytes();
        s.capacity_max_bytes = self.capacity_max_bytes();
        s.cached_bytes = arena.allocated_frames() * page;
        s.resident_bytes = arena.resident_frames() * page;
        s.returned_bytes = arena.returned_frames() * page;
        s.bytes_regrown = arena.regrown_frames() * page;
        let (mappings, index_nodes) = (self.mappings.len(), self.mappings.index_nodes());
        s.mappings = mappings as u64;
        s.index_nodes = index_nodes as u64;
        s.metadata_bytes = (arena.metadata_bytes()
            + mappings * std::mem::size_of::<Mapping>()
            + index_nodes * NODE_BYTES) as u64;
        s.eviction = self.mem.eviction_name().to_string();
        s.shadows = self.reclaimer.shadows_logged();
        s.arena_grown_bytes = u64::from(arena.listed_frames()) * PAGE_BYTES as u64;
        s.arena_chunks_unpopulated = arena.chunks_unpopulated();
        s.arena_huge_bytes = arena.huge_bytes();
        s.dirty_pages = self.dirty_budget().pages() - self.dirty_budget().writeback_pages();
        s.writeback_pages = self.dirty_budget().writeback_pages();
        s.futures_parked = crate::wait::futures_parked();
        s
    }

    /// A snapshot of the counters (`stats`, with `backend` named), published in the
    /// segment's stats area if the cache is persistent (`segment::published`: what
    /// `folio-stat` and `folio::SegmentView` read), and returned.
    ///
    /// Context: as `stats`; the publisher is the writeback thread (every
    /// `write::thread::STATS_PERIOD`), the cache's drop (after its final writeback) and
    /// `Cache::publish_stats`; they take the segment's stats lock in turn.
    pub fn publish_stats(&self, backend: &str) -> Stats {
        let mut s = self.stats();
        s.backend = backend.to_string();
        if let Some(segment) = self.arena().segment() {
            let numbers = s
                .values()
                .map(|(field, value)| (field.name, StatValue::Number(value)));
            let names = [
                ("backend", StatValue::Text(s.backend.clone())),
                ("eviction", StatValue::Text(s.eviction.clone())),
            ];
            segment.publish_stats(numbers.chain(names));
        }
        s
    }
}

/// The capacity's mechanism (`capacity` has its policy, its bounds and its order).
impl Core {
    /// The capacity now, in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.arena().capacity_frames() * PAGE_BYTES as u64
    }

    /// The largest capacity, reserved at build, in bytes.
    pub fn capacity_max_bytes(&self) -> u64 {
        u64::from(self.arena().frame_count()) * PAGE_BYTES as u64
    }

    /// Sets the capacity (`capacity` module docs): at once for new allocations; a shrink evicts,
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
        let _change = self.capacity.change();
        let frames = bytes / PAGE_BYTES as u64;
        let old = self.arena().capacity_frames();
        self.arena().set_capacity_frames(frames);
        self.resize_parts(frames);
        stats::bump(&self.counters().capacity_changes);
        if frames < old {
            self.shrink_to(frames);
        }
        // Post: the limit is in place (whatever the shrink could free), and the dirty
        // budget never allows more dirty pages than the cache holds.
        assert_eq!(self.arena().capacity_frames(), frames);
        debug_assert!(self.dirty_budget().limit_pages() <= frames);
        Ok(())
    }

    /// Sizes the parts drawn from the capacity: reclaim's watermarks and shadow log, the
    /// eviction queues, the readahead share, the dirty budget.
    pub(crate) fn resize_parts(&self, frames: u64) {
        assert!(
            frames <= u64::from(self.arena().frame_count()),
            "a capacity of {frames} frames past the {} reserved",
            self.arena().frame_count()
        );
        self.reclaimer.resize(frames);
        self.mem.resize(frames);
        let (limit, background) = self.capacity.dirty.pages_for(frames);
        debug_assert!(limit <= frames && background <= frames);
        self.dirty_budget().set_limits(limit, background);
    }

    /// Evicts down to `frames` less the high watermark, then gives the free memory past
    /// the capacity back.
    fn shrink_to(&self, frames: u64) {
        let started = Instant::now();
        let target = frames.saturating_sub(self.reclaimer.high_pages());
        loop {
            let allocated = self.arena().allocated_frames();
            if allocated <= target {
                break;
            }
            let want = (allocated - target).min(64 * reclaim::BATCH_PAGES);
            let report = self.reclaimer.reclaim(self.memory(), &self.mappings, want);
            if report.freed_pages > 0 {
                continue;
            }
            if started.elapsed() >= self.alloc_wait {
                break;
            }
            if self.dirty_budget().pages() > 0 {
                // What is left may be dirty: written back first, never dropped; all of
                // it, also under the background threshold (`kick_to_clean`).
                self.dirty_files.kick_to_clean();
            } else if report.busy == 0 {
                break; // nothing left to evict but what is pinned elsewhere
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let free = self.arena().free_frames();
        let given = self.arena().give_back(free);
        debug_assert!(given <= free, "gave back {given} frames of {free} free");
        stats::add(&self.counters().bytes_given_back, given * PAGE_BYTES as u64);
    }
}

impl CapacityMechanism for Core {
    fn capacity_bytes(&self) -> u64 {
        Core::capacity_bytes(self)
    }

    fn capacity_max_bytes(&self) -> u64 {
        Core::capacity_max_bytes(self)
    }

    fn resident_bytes(&self) -> u64 {
        self.arena().resident_frames() * PAGE_BYTES as u64
    }

    fn free_bytes(&self) -> u64 {
        self.arena().free_frames() * PAGE_BYTES as u64
    }

    fn refaults(&self) -> u64 {
        self.counters().refaults.load(Ordering::Relaxed)
    }

    fn note_pressure_event(&self) {
        stats::bump(&self.counters().pressure_events);
    }

    fn set_capacity(&self, bytes: u64) -> io::Result<()> {
        Core::set_capacity(self, bytes)
    }
}

/// The engine of a running cache: the I/O backend, the `Core`, and the background threads
/// (writeback, reclaim, populator, the capacity policy) it starts and, at its drop, stops
/// after a final writeback. Named for what it is to the `Cache` handle: the machine the
/// handle drives. `Cache` and every `File` hold it (`Arc<Engine>`): the last of them ends
/// the cache (module docs).
pub(crate) struct Engine {
    // Field order is drop order: the backend (and its in-flight reads) goes first.
    pub backend: Arc<dyn Backend>,
    pub core: Arc<Core>,
    reclaim_thread: Option<JoinHandle<()>>,
    populate_thread: Option<JoinHandle<()>>,
    /// The capacity policy's thread (`CapacityPolicy::FollowMachine`).
    memory_thread: Option<JoinHandle<()>>,
    writeback_thread: Option<JoinHandle<()>>,
    /// The final writeback (`writeback::write_back_all`), run by `Drop`.
    write_back_all: fn(&Arc<Core>, &dyn Backend),
}

/// Whether the arena is populated ahead of its allocator by a background thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PopulateAhead {
    /// When the cache is at least `POPULATE_AHEAD_CACHE_BYTES_MIN` (the default).
    WhenLarge,
    /// Never: the arena grows as it is allocated from (a cache whose reads go through a
    /// domain: its own arena holds only its writable and refused files, and a lead of 8
    /// MiB a process would be memory beside the domain's one copy, docs/sharing.md).
    Never,
}

/// What the write side gives the core: the writeback thread's body and the final flush.
/// They live above this module (`writeback` uses `Core`), so the cache passes them in.
#[derive(Clone, Copy)]
pub(crate) struct WritebackBodies {
    pub background: fn(Arc<Core>, Arc<dyn Backend>),
    pub write_back_all: fn(&Arc<Core>, &dyn Backend),
}

impl Engine {
    /// Starts the background reclaimer (if the cache has watermarks) and the arena's
    /// populator (if the cache is large enough to want one, and `populate` allows it)
    /// beside `backend`.
    pub fn new(
        core: Core,
        backend: Box<dyn Backend>,
        writeback: WritebackBodies,
        populate: PopulateAhead,
    ) -> Engine {
        let core = Arc::new(core);
        let backend: Arc<dyn Backend> = Arc::from(backend);
        let writeback_thread = {
            let (core, backend) = (core.clone(), backend.clone());
            Some(
                std::thread::Builder::new()
                    .name("folio-writeback".into())
                    .spawn(move || (writeback.background)(core, backend))
                    .expect("spawn the writeback thread"),
            )
        };
        let frames_max = u64::from(core.arena().frame_count());
        let reclaim_thread = Reclaimer::wants_background(frames_max).then(|| {
            let core = core.clone();
            std::thread::Builder::new()
                .name("folio-reclaim".into())
                .spawn(move || core.reclaimer.background(core.memory(), &core.mappings))
                .expect("spawn the reclaim thread")
        });
        let arena = core.arena();
        let wants_populator = populate == PopulateAhead::WhenLarge
            && arena.listed_frames() < arena.frame_count()
            && arena.frame_count() as usize * PAGE_BYTES >= POPULATE_AHEAD_CACHE_BYTES_MIN;
        let populate_thread = wants_populator.then(|| {
            let core = core.clone();
            std::thread::Builder::new()
                .name("folio-populate".into())
                .spawn(move || core.arena().populate_ahead())
                .expect("spawn the populate thread")
        });
        let memory_thread = (core.capacity.policy == CapacityPolicy::FollowMachine).then(|| {
            let core = core.clone();
            std::thread::Builder::new()
                .name("folio-memory".into())
                .spawn(move || core.capacity.follow_machine(&*core))
                .expect("spawn the memory policy thread")
        });
        Engine {
            backend,
            core,
            reclaim_thread,
            populate_thread,
            memory_thread,
            writeback_thread,
            write_back_all: writeback.write_back_all,
        }
    }
}

impl Engine {
    /// A persistent cache going away: if nothing is left dirty, removes the segment (or,
    /// a named one, leaves it written for a restart) and tells the keeper to exit without
    /// writing; otherwise (a writeback failed) leaves both
    /// to the keeper, which takes over as the link closes (the segment is not used after).
    fn dismiss_keeper(&self) {
        let mem = self.core.memory();
        let (Some(keeper), Some(segment)) = (self.core.mappings.keeper(), mem.arena().segment())
        else {
            return;
        };
        if mem.dirty_budget().pages() == 0 && mem.dirty_budget().writeback_pages() == 0 {
            if segment.header().retained() {
                // Kept for the next cache of its name (`adopt`): the files this process
                // wrote are stamped as they are now, after its last writes.
                let (written, read): (Vec<_>, Vec<_>) = self
                    .core
                    .mappings
                    .all()
                    .into_iter()
                    .partition(|m| m.write.is_written());
                let written: Vec<_> = written
                    .iter()
                    .filter_map(|m| Some((m.id, m.write.fd()?)))
                    .collect();
                segment.stamp_files(written.iter().map(|(id, fd)| (*id, &**fd)));
                segment.confirm_stamps(read.iter().map(|m| m.id));
                segment.set_state(crate::segment::layout::SegmentState::Written);
            } else {
                segment.set_state(crate::segment::layout::SegmentState::Written);
                let _ = segment.remove();
            }
            keeper.bye();
        }
    }
}

impl Drop for Engine {
    /// Writes back every dirty page (a dropped cache loses nothing that a process exit
    /// would not: unsynced data is on the device, not flushed), then stops the threads.
    fn drop(&mut self) {
        self.core.capacity.stop();
        if let Some(thread) = self.memory_thread.take() {
            let _ = thread.join();
        }
        self.core.dirty_files.stop();
        if let Some(thread) = self.writeback_thread.take() {
            let _ = thread.join();
        }
        (self.write_back_all)(&self.core, &*self.backend);
        self.core.reclaimer.stop();
        if let Some(thread) = self.reclaim_thread.take() {
            let _ = thread.join();
        }
        self.core.arena().stop_populating();
        if let Some(thread) = self.populate_thread.take() {
            let _ = thread.join();
        }
        // The last figures, after the final writeback, for whoever looks at the segment
        // once the process is gone.
        self.core.publish_stats(self.backend.name());
        self.dismiss_keeper();
    }
}
