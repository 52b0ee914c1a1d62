//! The builder of a `Cache` and its settings: the 23 setters with their defaults
//! (capacity and its policy, backend, folio sizes, readahead, eviction, the arena's
//! pages, the dirty limits and write-behind, a persistent cache's segment and what is
//! kept of it, the domain it shares reads through), the capacities they add up to, and
//! `build`: the core's parts made and sized from the capacity, the engine started over
//! them (and the domain attached).
//!
//! Protection: none: a builder is a value, used by one thread; `build` takes no lock
//! another cache shares (the segment's set-up, `persistent`, takes the directory's).
//!
//! Limits: a capacity of at most 1 TiB (`list::FRAMES_MAX` frames).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::Cache;
use crate::adopt::Unusable;
use crate::arena::{Arena, ArenaPages};
use crate::capacity::follow;
use crate::capacity::machine::MemorySource;
use crate::capacity::{CapacityControl, CapacityPolicy, DirtySettings};
use crate::capacity::{CAPACITY_BYTES_DEFAULT, CAPACITY_BYTES_MIN};
use crate::eviction::{new_policy, EvictionKind};
use crate::io::{open_backend, Backend, BackendKind};
use crate::mapping::MappingTable;
use crate::memory::Memory;
use crate::pagecache::{Core, Engine, PopulateAhead, WritebackBodies};
use crate::readahead::{LimitBounds, ReadaheadLimit};
use crate::reclaim::Reclaimer;
use crate::segment::DiskDir;
use crate::shared::attach::DomainConfig;
use crate::shared::domain::Geometry;
use crate::shared::queue::PIN_SLOTS;
use crate::shared::reader::DomainReader;
use crate::shared::record::Weight;
use crate::types::{Order, PAGE_BYTES};
use crate::write::budget::DirtyBudget;
use crate::write::queue::DirtyFiles;
use crate::write::thread;

/// Configures and builds a [`Cache`].
#[derive(Debug, Clone)]
pub struct CacheBuilder {
    pub(super) capacity_bytes: Option<u64>,
    pub(super) capacity_max_bytes: Option<u64>,
    pub(super) capacity_policy: CapacityPolicy,
    pub(super) backend: BackendKind,
    pub(super) pread_threads: usize,
    pub(super) alloc_wait: Duration,
    pub(super) folio_order_max: Order,
    pub(super) readahead_max_bytes: u64,
    pub(super) eviction: EvictionKind,
    pub(super) prefault: Prefault,
    pub(super) arena_pages: ArenaPages,
    pub(super) dirty_limit_bytes: Option<u64>,
    pub(super) dirty_background_bytes: Option<u64>,
    pub(super) dirty_expire: Duration,
    pub(super) write_behind_bytes: u64,
    pub(super) persistent: bool,
    pub(super) segment_dir: Option<PathBuf>,
    pub(super) segment_dir_disk: DiskDir,
    pub(super) segment_name: Option<String>,
    pub(super) unusable_segment: Unusable,
    pub(super) kept_memory: crate::keeper::KeptMemory,
    pub(super) domain: Option<String>,
    pub(super) share_weight: u32,
}

/// When `CacheBuilder::build` faults the cache's memory in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Prefault {
    /// As pages are first cached (the default): building is quick, and the first reads
    /// into fresh memory pay its page faults.
    #[default]
    Lazy,
    /// All of it at build: the whole capacity is resident from the start.
    AtBuild,
}

/// How long a file stays dirty before the background writeback writes it, by default. The
/// kernel's is 30 s; folio's dirty pages die with the process (a kernel's survive it), so
/// it keeps them for less.
pub const DIRTY_EXPIRE_DEFAULT: Duration = Duration::from_secs(5);

/// How many whole pages an appending writer leaves dirty behind it before their writeback
/// starts, by default: 256 KiB (`CacheBuilder::write_behind_bytes`).
pub const WRITE_BEHIND_BYTES_DEFAULT: u64 = 256 << 10;

/// The default maximum readahead window: 16 MiB. Measured on this kind of machine (a
/// cold one-thread scan through folio against the kernel's): see docs/readahead.md.
pub const READAHEAD_MAX_BYTES_DEFAULT: u64 = 16 << 20;

impl Default for CacheBuilder {
    fn default() -> Self {
        CacheBuilder {
            capacity_bytes: None,
            capacity_max_bytes: None,
            capacity_policy: CapacityPolicy::Fixed,
            backend: BackendKind::Auto,
            pread_threads: 16,
            alloc_wait: Duration::from_secs(2),
            folio_order_max: Order::MAX,
            readahead_max_bytes: READAHEAD_MAX_BYTES_DEFAULT,
            eviction: EvictionKind::default(),
            prefault: Prefault::Lazy,
            arena_pages: ArenaPages::Auto,
            dirty_limit_bytes: None,
            dirty_background_bytes: None,
            dirty_expire: DIRTY_EXPIRE_DEFAULT,
            write_behind_bytes: WRITE_BEHIND_BYTES_DEFAULT,
            persistent: false,
            segment_dir: None,
            segment_dir_disk: DiskDir::Refused,
            segment_name: None,
            unusable_segment: Unusable::default(),
            kept_memory: crate::keeper::KeptMemory::default(),
            domain: None,
            share_weight: SHARE_WEIGHT_DEFAULT,
        }
    }
}

impl CacheBuilder {
    /// Bytes of folio memory at build (rounded down to 4 KiB frames). At least
    /// [`CAPACITY_BYTES_MIN`]. Default: [`CAPACITY_BYTES_DEFAULT`] under
    /// `CapacityPolicy::Fixed`; under `FollowMachine`, what the machine (or the cgroup)
    /// has available less the policy's reserve.
    pub fn capacity_bytes(mut self, bytes: u64) -> Self {
        self.capacity_bytes = Some(bytes);
        self
    }

    /// The largest capacity `Cache::set_capacity` (or the memory policy) may set: its
    /// address space and metadata are reserved at build, nothing of it resident (32 bytes
    /// of zeroed metadata per 4 KiB, faulted in only as the cache grows over it).
    /// Default: the capacity under `CapacityPolicy::Fixed`; under `FollowMachine`, the
    /// machine's memory or the cgroup's limit.
    pub fn capacity_max_bytes(mut self, bytes: u64) -> Self {
        self.capacity_max_bytes = Some(bytes);
        self
    }

    /// How the capacity moves after build (default `CapacityPolicy::Fixed`: only
    /// `Cache::set_capacity` moves it). `FollowMachine` starts a thread that grows the
    /// cache into free memory and gives memory back when the machine runs short.
    pub fn capacity_policy(mut self, policy: CapacityPolicy) -> Self {
        self.capacity_policy = policy;
        self
    }

    /// The capacity at build and the largest, in bytes, as the settings and the policy
    /// say.
    fn capacities(&self) -> io::Result<(u64, u64)> {
        let (capacity, max) = match self.capacity_policy {
            CapacityPolicy::Fixed => {
                let capacity = self.capacity_bytes.unwrap_or(CAPACITY_BYTES_DEFAULT);
                (capacity, self.capacity_max_bytes.unwrap_or(capacity))
            }
            CapacityPolicy::FollowMachine => {
                let facts = MemorySource::this_process().read();
                let max = self
                    .capacity_max_bytes
                    .unwrap_or(if facts.limit_bytes == 0 {
                        self.capacity_bytes.unwrap_or(CAPACITY_BYTES_DEFAULT)
                    } else {
                        facts.limit_bytes
                    });
                let capacity = self.capacity_bytes.unwrap_or_else(|| {
                    follow::afforded_at_build_bytes(&facts)
                        .clamp(CAPACITY_BYTES_MIN, max.max(CAPACITY_BYTES_MIN))
                });
                (capacity, max)
            }
        };
        if capacity < CAPACITY_BYTES_MIN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "folio: capacity of {capacity} bytes is below the minimum of {CAPACITY_BYTES_MIN} bytes (16 pages)"
                ),
            ));
        }
        if max < capacity {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("folio: the maximum capacity ({max} bytes) is below the capacity ({capacity} bytes)"),
            ));
        }
        Ok((capacity, max))
    }

    /// Which I/O engine reads files (default: io_uring where allowed, else pread).
    pub fn backend(mut self, kind: BackendKind) -> Self {
        self.backend = kind;
        self
    }

    /// Threads of the pread pool, when that backend is used.
    pub fn pread_threads(mut self, threads: usize) -> Self {
        self.pread_threads = threads.max(1);
        self
    }

    /// How long a read that needs memory waits for pinned or in-flight folios to be
    /// released before it fails with `OutOfMemory`.
    pub fn alloc_wait(mut self, wait: Duration) -> Self {
        self.alloc_wait = wait;
        self
    }

    /// The largest folio the cache allocates (order 0..=9, 4 KiB..2 MiB).
    pub fn folio_order_max(mut self, order: u8) -> Self {
        self.folio_order_max = Order::new(order.min(crate::types::ORDER_MAX));
        self
    }

    /// The largest readahead window of a new handle (default
    /// [`READAHEAD_MAX_BYTES_DEFAULT`]; 0 turns readahead off). At most 32 MiB and an
    /// eighth of the capacity (a power of two): a window and the next one in flight never take more than
    /// a quarter of the cache. Each handle can change its own with
    /// `File::set_readahead_max_bytes`.
    pub fn readahead_max_bytes(mut self, bytes: u64) -> Self {
        self.readahead_max_bytes = bytes;
        self
    }

    /// Which eviction policy chooses what to drop (default S3-FIFO).
    pub fn eviction(mut self, kind: EvictionKind) -> Self {
        self.eviction = kind;
        self
    }

    /// When the arena is faulted in (default: [`Prefault::Lazy`]). A fresh arena's pages are
    /// faulted in and zeroed by the kernel on first use, and with O_DIRECT that first use
    /// is the read that fills them: a cold scan into an untouched cache runs about a fifth
    /// slower than the same scan once the cache has been filled once (docs/readahead.md).
    /// Prefaulting moves that cost to `build` (0.15-3 s per GiB here, depending on the
    /// pages: see [`CacheBuilder::arena_pages`]; an `Auto` arena prefaulted is all huge
    /// pages) and makes the whole capacity resident from the start, as a database's
    /// buffer pool would be.
    pub fn prefault(mut self, prefault: Prefault) -> Self {
        self.prefault = prefault;
        self
    }

    /// Which pages the kernel backs the cache's memory with (default:
    /// [`ArenaPages::Auto`]: chunk by chunk as the arena grows, huge pages for the memory
    /// large folios take while their first touch costs at most twice a 4 KiB page's here,
    /// 4 KiB pages for small ones). `Small` makes every first touch
    /// cheap (several times cheaper where huge pages are slow to fault in: 7x on the VM
    /// this was measured on); `Huge` gives hits over a large cache fewer TLB misses and
    /// large reads fewer segments. See [`ArenaPages`].
    pub fn arena_pages(mut self, pages: ArenaPages) -> Self {
        self.arena_pages = pages;
        self
    }

    /// The most memory writes may keep dirty (or under writeback): writers past it wait
    /// for writeback (the throttle). Default: 20% of the capacity.
    pub fn dirty_limit_bytes(mut self, bytes: u64) -> Self {
        self.dirty_limit_bytes = Some(bytes);
        self
    }

    /// Above this much dirty memory, the background writeback writes everything dirty, not
    /// only what expired. Default: 10% of the capacity (at most the dirty limit).
    pub fn dirty_background_bytes(mut self, bytes: u64) -> Self {
        self.dirty_background_bytes = Some(bytes);
        self
    }

    /// A file dirty for longer than this is written back by the background writeback.
    /// Default: 5 s.
    pub fn dirty_expire(mut self, expire: Duration) -> Self {
        self.dirty_expire = expire;
        self
    }

    /// Write-behind: once a writer that appends (each write starts at or before the end of
    /// the file and passes it) has left this many bytes of whole pages dirty behind it,
    /// their writeback starts, without waiting for it, so that the next sync finds most of
    /// them on the device already. Writes inside the file are never written behind. 0
    /// turns it off (appended pages then wait for a sync, the dirty expiry or the
    /// background threshold, as the kernel's do). Default: 256 KiB.
    pub fn write_behind_bytes(mut self, bytes: u64) -> Self {
        self.write_behind_bytes = bytes;
        self
    }

    /// Whether what the cache holds outlives the process (DESIGN.md §9, docs/persistence.md):
    /// the arena lives in a shared-memory segment (`segment_dir`), and a keeper process,
    /// started at build, writes back every dirty page if the process dies without doing so
    /// (SIGKILL, abort, the OOM killer), as the kernel does for buffered writes. Then a
    /// `write_at` that returned survives a crash of the process (not of the machine: that
    /// takes a sync, as with the kernel).
    ///
    /// Default: off. It costs a forked process and shared memory, which gets no transparent
    /// huge pages on most kernels (`shmem_enabled`), and the capacity is bounded by the
    /// segment directory's room; a library should not fork behind its user's back unless
    /// asked. The C ABI and the RocksDB plugin turn it on, because RocksDB's default
    /// writes rely on it.
    pub fn persistent(mut self, on: bool) -> Self {
        self.persistent = on;
        self
    }

    /// Where a persistent cache's segment goes: a directory of this user's (its effective
    /// uid) that no one else can write, with no symlink in its path, on tmpfs (unless
    /// `segment_dir_on_disk` allows a disk file system); checked at each build, adoption
    /// and recovery (docs/persistence.md, "Where segments live"). Default: the user's
    /// private home, `/dev/shm/folio-<uid>` (`segment_home`), made mode 0700 at the first
    /// build; if another user made that directory first, a persistent build fails with
    /// `PermissionDenied` saying so.
    pub fn segment_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.segment_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Whether `segment_dir` may be on a disk file system. Default: `DiskDir::Refused`
    /// (the build fails with `Unsupported`): a segment holds the cache's memory, and on a
    /// disk file system the kernel writes those bytes (every cached page) to the device
    /// as the segment file's dirty pages, and may read them back from it.
    pub fn segment_dir_on_disk(mut self, disk: DiskDir) -> Self {
        self.segment_dir_disk = disk;
        self
    }

    /// The segment's file name in `segment_dir` (one plain portable name: not empty, not
    /// `.` or `..`, no `/`, no control character, no leading `-`, at most 255 bytes;
    /// `InvalidInput` otherwise), which makes the cache warm across restarts (docs/persistence.md): a named
    /// segment outlives the process (after a clean drop's writeback, or a kill's by the
    /// keeper), and the next cache built with the same name and directory adopts it: the
    /// clean pages of every file that provably did not change meanwhile are cached at
    /// once (`Cache::adoption` says what was kept and dropped, and why). Default: none: a
    /// fresh `folio-<uid>-<pid>-<n>`, removed when the cache and its keeper are done.
    ///
    /// Building fails with `WouldBlock` while a live cache (in this process or another)
    /// holds the segment of that name; it waits for a dead owner's keeper.
    pub fn segment_name(mut self, name: impl Into<String>) -> Self {
        self.segment_name = Some(name.into());
        self
    }

    /// What the build does with a named segment it cannot use: one of another layout
    /// (another folio version) or a damaged one. Default: `Unusable::Replace` (removed;
    /// the cache starts cold). A segment of another user, readable by others, or reached
    /// through a symlink is never replaced: the build fails.
    pub fn unusable_segment(mut self, what: Unusable) -> Self {
        self.unusable_segment = what;
        self
    }

    /// How a named segment kept after the cache is gone gives its memory back (docs/
    /// persistence.md, "Kept memory"): its keeper stays as its steward, punches its coldest
    /// clean pages out under memory pressure or past a bound on what all kept segments of
    /// the user may hold, and removes it after a long idle time. Default:
    /// [`KeptMemory::default`] (a quarter of the memory limit, 6 hours).
    pub fn kept_memory(mut self, kept: crate::keeper::KeptMemory) -> Self {
        self.kept_memory = kept;
        self
    }

    /// Shares this cache's pages with every other process of this user that builds a
    /// cache with the same domain `name` (issue 45; docs/sharing.md, "A `Cache` with a
    /// domain"): a page one of them read or wrote is a hit in every other. The domain's
    /// files go in `segment_dir` (default: the user's private home, `/dev/shm/folio-<uid>`;
    /// always on tmpfs), named by the version of their layout: `<name>.v12.domain` (its
    /// shared memory: the cached pages and the structures over them), `<name>.v12.steward`
    /// and `<name>.v12.sock` (`DomainFiles`: a build of another version attaches to a
    /// domain of its own beside it); `name` is one plain file name of at most
    /// `DOMAIN_NAME_MAX` bytes (`InvalidInput` otherwise). The build attaches to the
    /// domain's steward, or starts one (a process forked from this one, `folio-steward`,
    /// which watches every member and repairs what a dead one held, moves the domain's
    /// quota with the machine's memory, gives memory back under pressure, and removes the
    /// domain and leaves `DOMAIN_LINGER` after the last member detached). The first build
    /// of a domain sizes it by the machine, not by its capacity (a 4 KiB frame per 4 KiB of
    /// the machine's memory or the cgroup's limit, at most what the directory's file
    /// system holds and 1 TiB), resident only as frames are used; each member has a share
    /// of the quota (`share_weight`). Default: none (a private cache).
    ///
    /// **What goes through the domain**: `read_at`, `read_at_hint` and `read_many` of a
    /// file opened read-only (`Cache::open`), with the domain's readahead; a file opened
    /// for writing keeps this cache's path for its reads and its durability, and each page
    /// it writes is put into the domain before the write returns, so that the other
    /// processes' reads see it (one writing process per file: a second keeps its writes
    /// private). The futures (`read_at_async`, `read_many_async`, `get_page_async`) and
    /// `get_page` of a domain file fail with `Unsupported`; `readahead` of one does
    /// nothing. A file the domain refuses (changed while another process has its record
    /// open, or every record open) is read privately, counted in `Cache::domain_stats`,
    /// not an error. The limits and their figures: docs/sharing.md.
    pub fn domain(mut self, name: impl Into<String>) -> Self {
        self.domain = Some(name.into());
        self
    }

    /// This process's weight in its `domain`'s division of the quota (docs/sharing.md,
    /// "Shares and floors"): its share is the quota times its weight over the summed
    /// weights of the processes attached, its floor half of that. Another process's misses
    /// take this one's pages while it holds more than its share first, down to its floor
    /// only when nothing else is left in a whole pass, and below it only when nothing else
    /// is left at all. From [`SHARE_WEIGHT_MIN`] to [`SHARE_WEIGHT_MAX`] (`InvalidInput` at
    /// build otherwise). Default: [`SHARE_WEIGHT_DEFAULT`], the same for every process:
    /// equal shares. Without a `domain` it does nothing.
    pub fn share_weight(mut self, weight: u32) -> Self {
        self.share_weight = weight;
        self
    }

    /// Builds the cache: reserves the arena and starts the backend.
    ///
    /// Context: may block: it maps the arena (no page is touched unless `prefault`, which
    /// populates the whole capacity first), starts the backend's threads (an io_uring
    /// instance and its completion thread, or the pread pool), the writeback thread, the
    /// background reclaimer and the arena's populator. Takes no lock another cache shares.
    /// With a `domain`, attaches to it (forking its steward if none runs).
    pub fn build(self) -> io::Result<Cache> {
        let backend = open_backend(self.backend, self.pread_threads)?;
        self.build_with_backend(backend)
    }

    /// Builds the cache over a backend made by the caller (the fault-injecting one in
    /// tests, a wrapper of one's own).
    ///
    /// Context: as `build`, less starting a backend.
    pub fn build_with_backend(self, backend: Box<dyn Backend>) -> io::Result<Cache> {
        let (capacity, max) = self.capacities()?;
        // First: a domain that cannot be attached fails the build before anything starts.
        let domain = self
            .domain
            .as_ref()
            .map(|name| self.attach_domain(name))
            .transpose()?;
        let frames_max = u32::try_from(max / PAGE_BYTES as u64)
            .ok()
            .filter(|&f| f <= crate::list::FRAMES_MAX)
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "folio: capacity above 1 TiB")
            })?;
        let mut frames = capacity / PAGE_BYTES as u64;
        // The owner's ids before the segment is created or adopted: its keeper vouches
        // for it only if they still hold (`keeper::spawn`; another thread may setuid
        // while this build runs).
        let baseline = crate::keeper::Credentials::of_this_thread();
        let (segment, mut plan) = if self.persistent {
            let (segment, plan) = self.create_segment(frames_max, &mut frames)?;
            (Some(segment), plan)
        } else {
            (None, None)
        };
        // Keep at least 16 folios of the largest order, so one read cannot pin the cache
        // (at the capacity at build: a capacity set far lower later may be held whole by
        // a few pinned large folios, which a shrink then waits for).
        let mut order_max = self.folio_order_max;
        while order_max > Order::ZERO && order_max.pages() * 16 > frames {
            order_max = Order::new(order_max.get() - 1);
        }
        let (mut arena, keeper) = if let Some(segment) = segment {
            let keeper =
                crate::keeper::spawn(&segment, &self.kept_memory, baseline).inspect_err(|_| {
                    let _ = segment.remove();
                })?;
            (Arena::in_segment(segment, self.arena_pages), Some(keeper))
        } else {
            (Arena::new(frames_max, self.arena_pages)?, None)
        };
        if let (Some(domain), Some(keeper)) = (&domain, &keeper) {
            // Before any write can put a page into the domain: the steward keeps the
            // marks of this process's written pages after its death until this keeper
            // wrote them back (docs/sharing.md "Writes seen across processes", "Death").
            domain.member().name_keeper(keeper.keeper_pid())?;
        }
        if let Some(plan) = &mut plan {
            plan.fit(frames);
            plan.prepare_arena(&arena);
        }
        // Pre: the capacity at build fits what was reserved (a segment's fitting only
        // lowers it), and 16 folios of the largest order fit in it.
        assert!(
            frames <= u64::from(arena.frame_count()),
            "{frames} frames past the arena"
        );
        assert!(order_max == Order::ZERO || order_max.pages() * 16 <= frames);
        arena.set_capacity_frames(frames);
        if self.prefault == Prefault::AtBuild {
            arena.prefault();
        }
        let dirty_settings = DirtySettings {
            limit_bytes: self.dirty_limit_bytes,
            background_bytes: self.dirty_background_bytes,
        };
        let (dirty_limit, dirty_background) = dirty_settings.pages_for(frames);
        let mem = Memory::new(
            arena,
            new_policy(self.eviction, frames),
            DirtyBudget::new(dirty_limit, dirty_background),
            ReadaheadLimit::new(LimitBounds::for_cache(frames as u32)),
        );
        let mut core = Core::new(
            mem,
            MappingTable::new(keeper),
            Reclaimer::new(frames),
            self.alloc_wait,
            order_max,
            DirtyFiles::new(self.dirty_expire),
            self.write_behind_bytes.div_ceil(PAGE_BYTES as u64),
            CapacityControl::new(self.capacity_policy, dirty_settings),
        );
        core.readahead_pages = core.readahead_pages_for(self.readahead_max_bytes);
        // Post: a new handle's window stays within the cache's limit.
        debug_assert!(core.readahead_pages <= core.readahead_pages_limit());
        let adoption = plan.map(|plan| Arc::new(plan.install(core.memory(), &core.mappings)));
        // A cache with a domain reads its read-only files there: its own arena is not
        // populated ahead (`PopulateAhead::Never`), so that each process adds only what
        // it uses to the domain's one copy.
        let populate = if domain.is_some() {
            PopulateAhead::Never
        } else {
            PopulateAhead::WhenLarge
        };
        Ok(Cache {
            domain,
            adoption,
            inner: Arc::new(Engine::new(
                core,
                backend,
                WritebackBodies {
                    background: thread::background,
                    write_back_all: thread::write_back_all,
                },
                populate,
            )),
        })
    }
}

/// A domain member's share weight unless it asks for another (`CacheBuilder::share_weight`):
/// every process the same, so equal shares.
pub const SHARE_WEIGHT_DEFAULT: u32 = Weight::DEFAULT.get();
/// The least share weight a process may ask for.
pub const SHARE_WEIGHT_MIN: u32 = Weight::MIN;
/// The most: a share 10,000 times the least's.
pub const SHARE_WEIGHT_MAX: u32 = Weight::MAX;

/// How long a domain's steward stays after its last member detached
/// (`CacheBuilder::domain`), giving its memory back under pressure; then it removes the
/// domain's region (its cached pages) and leaves. A build within it finds the pages
/// cached (a warm restart: the next run of a tool, a service restarted) and attaches in
/// about 0.1 ms instead of starting a steward (1-5 ms). Ten minutes: a restart or a
/// sequence of runs, not a day (docs/sharing.md, "The domain's memory and lifetime").
pub const DOMAIN_LINGER: Duration = Duration::from_secs(10 * 60);

impl CacheBuilder {
    /// Attaches to the domain `name` (`domain`'s doc), sized by the machine if this
    /// build makes it (`Geometry::frames_for_machine`: the machine's or the cgroup's
    /// memory, at most 1 TiB and what the directory's file system holds; not this
    /// build's capacity).
    ///
    /// Errors: `InvalidInput` for a bad name; the home's checks (`SegmentDir`);
    /// `Member::attach`'s.
    fn attach_domain(&self, name: &str) -> io::Result<Arc<DomainReader>> {
        let dir = match &self.segment_dir {
            Some(path) => path.clone(),
            None => crate::segment::SegmentDir::home()?.path().to_path_buf(),
        };
        let facts = MemorySource::this_process().read();
        let frames = Geometry::frames_for_machine(
            &facts,
            CAPACITY_BYTES_DEFAULT,
            crate::shared::domain::file_system_bytes(&dir),
        );
        let config = DomainConfig {
            dir,
            name: name.to_string(),
            geometry: Geometry {
                slots: PIN_SLOTS,
                frames,
            },
            linger: DOMAIN_LINGER,
            memory_files: None,
            weight: Weight::new(self.share_weight).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "folio: share weight {} outside {SHARE_WEIGHT_MIN}..={SHARE_WEIGHT_MAX}",
                        self.share_weight
                    ),
                )
            })?,
        };
        Ok(Arc::new(DomainReader::attach(&config)?))
    }
}
