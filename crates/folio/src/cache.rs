//! The cache as its users see it: the builder, and the handle that opens files.
//!
//! Everything shared lives in `pagecache::Core`; a `Cache` is a cheap handle to it.

use std::fs::File as StdFile;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::adopt::{Adoption, Plan, Unusable};
use crate::arena::{Arena, ArenaPages};
use crate::capacity::follow;
use crate::capacity::machine::MemorySource;
use crate::capacity::{CapacityControl, CapacityPolicy, DirtySettings};
use crate::capacity::{CAPACITY_BYTES_DEFAULT, CAPACITY_BYTES_MIN};
use crate::eviction::{new_policy, EvictionKind};
use crate::file::{Access, File, OpenMode};
use crate::io::{open_backend, Backend, BackendKind};
use crate::mapping::{FileStamp, MappingTable};
use crate::memory::Memory;
use crate::pagecache::{Core, Engine, WritebackBodies};
use crate::readahead::{LimitBounds, ReadaheadLimit};
use crate::reclaim::Reclaimer;
use crate::segment::{self, DiskDir, Segment, SegmentDir};
use crate::stats::{Counters, Stats};
use crate::types::{Order, PageIndex, PAGE_BYTES};
use crate::write::budget::DirtyBudget;
use crate::write::queue::DirtyFiles;
use crate::write::thread;

/// Configures and builds a [`Cache`].
#[derive(Debug, Clone)]
pub struct CacheBuilder {
    capacity_bytes: Option<u64>,
    capacity_max_bytes: Option<u64>,
    capacity_policy: CapacityPolicy,
    backend: BackendKind,
    pread_threads: usize,
    alloc_wait: Duration,
    folio_order_max: Order,
    readahead_max_bytes: u64,
    eviction: EvictionKind,
    prefault: Prefault,
    arena_pages: ArenaPages,
    dirty_limit_bytes: Option<u64>,
    dirty_background_bytes: Option<u64>,
    dirty_expire: Duration,
    write_behind_bytes: u64,
    persistent: bool,
    segment_dir: Option<PathBuf>,
    segment_dir_disk: DiskDir,
    segment_name: Option<String>,
    unusable_segment: Unusable,
    kept_memory: crate::keeper::KeptMemory,
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

    /// Builds the cache: reserves the arena and starts the backend.
    ///
    /// Context: may block: it maps the arena (no page is touched unless `prefault`, which
    /// populates the whole capacity first), starts the backend's threads (an io_uring
    /// instance and its completion thread, or the pread pool), the writeback thread, the
    /// background reclaimer and the arena's populator. Takes no lock another cache shares.
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
        let frames_max = u32::try_from(max / PAGE_BYTES as u64)
            .ok()
            .filter(|&f| f <= crate::list::FRAMES_MAX)
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "folio: capacity above 1 TiB")
            })?;
        let mut frames = capacity / PAGE_BYTES as u64;
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
            let keeper = crate::keeper::spawn(&segment, &self.kept_memory).inspect_err(|_| {
                let _ = segment.remove();
            })?;
            (Arena::in_segment(segment, self.arena_pages), Some(keeper))
        } else {
            (Arena::new(frames_max, self.arena_pages)?, None)
        };
        if let Some(plan) = &mut plan {
            plan.fit(frames);
            plan.prepare_arena(&arena);
        }
        arena.set_capacity_frames(frames);
        if self.prefault == Prefault::AtBuild {
            arena.prefault();
        }
        let dirty_settings = DirtySettings {
            limit_bytes: self.dirty_limit_bytes,
            background_bytes: self.dirty_background_bytes,
        };
        let (dirty_limit, dirty_background) = dirty_settings.pages_for(frames);
        let mut core = Core {
            mem: Memory {
                arena,
                policy: new_policy(self.eviction, frames),
                counters: Counters::default(),
                dirty: DirtyBudget::new(dirty_limit, dirty_background),
                readahead_limit: ReadaheadLimit::new(LimitBounds::for_cache(frames as u32)),
                keeper,
            },
            mappings: MappingTable::default(),
            reclaimer: Reclaimer::new(frames),
            alloc_wait: self.alloc_wait,
            folio_order_max: order_max,
            readahead_pages: 0,
            dirty_files: DirtyFiles::new(self.dirty_expire),
            write_behind_pages: self.write_behind_bytes.div_ceil(PAGE_BYTES as u64),
            capacity: CapacityControl::new(self.capacity_policy, dirty_settings),
        };
        core.readahead_pages = core.readahead_pages_for(self.readahead_max_bytes);
        let adoption = plan.map(|plan| Arc::new(plan.install(&core.mem, &core.mappings)));
        Ok(Cache {
            adoption,
            inner: Arc::new(Engine::new(
                core,
                backend,
                WritebackBodies {
                    background: thread::background,
                    write_back_all: thread::write_back_all,
                },
            )),
        })
    }
}

/// Room a segment takes besides its frames and side table (`create_segment`).
const SEGMENT_OVERHEAD_BYTES: u64 = 4096 + (1 << 20);

/// Where a persistent cache's segment goes unless `CacheBuilder::segment_dir` says: this
/// user's private home, `/dev/shm/folio-<euid>`.
pub fn segment_home() -> PathBuf {
    segment::home::home_path()
}

/// The largest capacity a persistent cache's segment in `dir` can hold now: the room its
/// file system has (`statvfs`), less what the segment takes besides frames (the header,
/// each frame's 24-byte side-table entry, the slots of the files cached: a MiB is 2,048
/// files). A persistent cache whose capacity the builder chooses fits in it by itself; a
/// caller that sizes one to the machine (the C ABI's fixed policy) bounds it with this.
///
/// Errors: the `statvfs` error (a directory that does not exist).
pub fn segment_room_capacity_bytes(dir: &Path) -> io::Result<u64> {
    Ok(segment_capacity_bytes(segment::room_bytes(dir)?))
}

fn segment_capacity_bytes(room: u64) -> u64 {
    let per_frame = PAGE_BYTES as u64 + std::mem::size_of::<crate::folio::FolioMeta>() as u64;
    room.saturating_sub(SEGMENT_OVERHEAD_BYTES) / per_frame * PAGE_BYTES as u64
}

impl CacheBuilder {
    /// The segment of a persistent cache, its largest capacity bounded by the room its
    /// directory's file system has (a shared-memory file system's size is a limit of its
    /// own: `/dev/shm` is half the memory by default).
    ///
    /// A capacity the builder chose (none was given) is lowered to fit; one given that
    /// does not fit is an error.
    ///
    /// Errors: `SegmentDir::open`'s or `SegmentDir::home`'s (the directory's checks:
    /// `PermissionDenied`, `Unsupported` for a disk file system not allowed);
    /// `InvalidInput` for a segment name that is not one plain file name; `StorageFull` if
    /// the capacity given does not fit; `Segment::create_in`'s.
    fn create_segment(
        &self,
        frames_max: u32,
        frames: &mut u64,
    ) -> io::Result<(Arc<Segment>, Option<Plan>)> {
        if let Some(name) = &self.segment_name {
            segment::check_name(name)?;
        }
        let dir = match &self.segment_dir {
            Some(path) => SegmentDir::open(path, self.segment_dir_disk)?,
            None => SegmentDir::home()?,
        };
        crate::recovery::settle_dir(dir.path())?;
        // A segment of this name that a restart adopts gives its memory to the new one.
        let there = self
            .segment_name
            .as_ref()
            .and_then(|name| dir.stat(std::ffi::OsStr::new(name)).ok());
        let named = self
            .segment_name
            .as_ref()
            .map(|name| dir.join(std::ffi::OsStr::new(name)));
        let reused = there
            .filter(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG)
            .map_or(0, |st| st.st_blocks as u64 * 512);
        let room = dir.room_bytes()? + reused;
        let fits = (segment_capacity_bytes(room) / PAGE_BYTES as u64).min(u64::from(frames_max));
        if *frames > fits
            && self.capacity_bytes.is_none()
            && fits >= CAPACITY_BYTES_MIN / PAGE_BYTES as u64
        {
            *frames = fits;
        }
        if *frames > fits {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "folio: a capacity of {} MiB does not fit in {} ({} MiB free)",
                    (*frames * PAGE_BYTES as u64) >> 20,
                    dir.path().display(),
                    room >> 20
                ),
            ));
        }
        if let Some(path) = named.filter(|_| there.is_some()) {
            if let Some((segment, plan)) =
                crate::adopt::take(&path, fits as u32, self.unusable_segment)?
            {
                return Ok((Arc::new(segment), Some(plan)));
            }
        }
        let segment = Segment::create_in(&dir, self.segment_name.as_deref(), fits as u32)?;
        Ok((Arc::new(segment), None))
    }
}

/// A page cache over files read with O_DIRECT. Cheap to share: clone it or wrap it in an
/// `Arc`; every method takes `&self` and is safe from any thread.
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Engine>,
    /// What the build adopted from a named segment (`CacheBuilder::segment_name`).
    adoption: Option<Arc<Adoption>>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("backend", &self.inner.backend.name())
            .field(
                "capacity_frames",
                &self.inner.core.mem.arena.capacity_frames(),
            )
            .finish()
    }
}

impl Cache {
    pub fn builder() -> CacheBuilder {
        CacheBuilder::default()
    }

    /// Opens `path` for cached reads, O_DIRECT underneath (buffered where the file system
    /// refuses O_DIRECT, e.g. tmpfs). Two opens of the same file share its cached pages;
    /// each handle has its own readahead state. A file whose size, modification time or
    /// change time changed since it was last opened through this cache has its pages
    /// dropped: a file rewritten or replaced (even by one with the old inode number, length
    /// and modification time), but also one that was only `chmod`ed, `chown`ed, linked or
    /// renamed, which move the change time too.
    ///
    /// A closed file's pages stay cached while memory allows, and the next open finds
    /// them; a file with no handle open and no page cached is forgotten (its per-file
    /// metadata freed).
    ///
    /// Errors: the file's own open error (not found, permission), `IsADirectory` for a
    /// directory, `InvalidInput` for anything that is not a regular file.
    ///
    /// Context: may block: `open(2)` and `fstat(2)`, then the mapping table's write lock
    /// (a new file) or read lock, and a file that changed underneath is invalidated under
    /// its index lock (which waits for nothing: LOCKED folios are skipped and dropped by
    /// their completion). Thread-safe; never waits for I/O.
    pub fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        self.open_options().open(path)
    }

    /// Options to open a file for writing too, creating or truncating it (`std`'s
    /// `OpenOptions`, for folio): `cache.open_options().write(true).create(true).open(p)`.
    pub fn open_options(&self) -> OpenOptions<'_> {
        OpenOptions {
            cache: self,
            write: false,
            create: Create::No,
            truncate: false,
        }
    }

    /// Deletes the file at `path` (`unlink`) and drops its cached pages (dirty ones too:
    /// their bytes belong to no file any more) and what the cache keeps of it, as the
    /// kernel drops a deleted file's page cache with its last descriptor: at once if no
    /// handle has it open, else when the last handle closes (until then they read it as
    /// before). RocksDB deletes a compaction's inputs while its table cache still holds
    /// them open: their pages must not linger until eviction finds them.
    ///
    /// Errors: the `unlink(2)` error (nothing is dropped then).
    ///
    /// Context: any thread; takes the file's writer lock and its index lock; may sleep
    /// for writebacks of the file in flight.
    pub fn remove_file(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let path = path.as_ref();
        let meta = std::fs::symlink_metadata(path)?;
        std::fs::remove_file(path)?;
        let core = &self.inner.core;
        if meta.nlink() > 1 {
            return Ok(()); // another name still reaches the file: its pages stay
        }
        if let Some(mapping) = core.mappings.find(meta.dev(), meta.ino()) {
            mapping.unlink(&core.mem);
            if mapping.handles() == 0 {
                core.mappings.remove_if_unused(&core.mem, &mapping);
            }
        }
        Ok(())
    }

    /// Syncs every file the cache holds dirty pages of (`syncfs`): writes them back and
    /// `fsync`s each file folio wrote. Returns an error if any file has a writeback error
    /// that no handle has reported yet (it is not consumed: each handle's sync still
    /// reports it).
    ///
    /// Context: any thread; sleeps until every write and flush completes.
    pub fn sync_all_files(&self) -> io::Result<()> {
        let core = &self.inner.core;
        let mut first_error = None;
        for mapping in core.mappings.all() {
            if mapping.write.fd().is_none() {
                continue;
            }
            crate::write::integrity::sync(
                core,
                &*self.inner.backend,
                &mapping,
                PageIndex(0),
                PageIndex::END,
                crate::io::FlushKind::All,
            );
            if first_error.is_none() && mapping.write.errseq().has_unseen() {
                first_error = Some(io::Error::other(
                    "folio: a file's writeback failed (its handles' next sync reports the error)",
                ));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn open_with(&self, path: &Path, options: &OpenOptions<'_>) -> io::Result<File> {
        let meta = std::fs::metadata(path)?;
        if meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("folio: {} is a directory", path.display()),
            ));
        }
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("folio: {} is not a regular file", path.display()),
            ));
        }
        let access = if options.write {
            Access::ReadWrite
        } else {
            Access::ReadOnly
        };
        let (std_file, mode) = open_direct(path, access)?;
        // Stat the open file, not the path: the path may have been replaced meanwhile.
        let meta = std_file.metadata()?;
        #[cfg(test)]
        tests::after_the_opens_first_stat();
        // The birth time (`statx`) where the file system keeps one, else the change time
        // (`FileStamp` says why either, and what each costs). Taken again under the table's
        // lock for a new mapping (`get_or_insert`: the last one's removal may have
        // settled the size since).
        let stamp_now = || std_file.metadata().map(|m| FileStamp::of(&m));
        let core = &self.inner.core;
        let mapping = core
            .mappings
            .get_or_insert(&core.mem, meta.dev(), meta.ino(), &stamp_now)?;
        if let Some(segment) = core.mem.arena.segment() {
            // Before any write: the keeper finds a dirty page's file by this slot.
            let path = std::fs::read_link(format!("/proc/self/fd/{}", std_file.as_raw_fd()))
                .unwrap_or_else(|_| path.to_path_buf());
            let stamp = segment::stamp_from(&meta, segment::generation_of(&std_file));
            let opened = match access {
                Access::ReadWrite => segment::layout::Opened::ForWriting,
                Access::ReadOnly => segment::layout::Opened::ReadOnly,
            };
            segment.register(
                mapping.id,
                segment::identity_of(&meta),
                &stamp,
                &path,
                opened,
            )?;
        }
        let file = File::new(
            self.inner.clone(),
            mapping,
            Arc::new(std_file),
            mode,
            access,
            self.inner.core.readahead_pages,
        );
        if options.truncate {
            // Through the cache, so that its pages of the file go too.
            file.set_len(0)?;
        }
        Ok(file)
    }

    /// A snapshot of the counters.
    ///
    /// Context: takes the per-thread counters' registry lock and the mapping table's read
    /// lock briefly; never waits for I/O. The counters are read one by one (relaxed), so
    /// a snapshot taken while others read may be a few events off between fields.
    pub fn stats(&self) -> Stats {
        let mut s = self.inner.core.stats();
        s.backend = self.inner.backend.name().to_string();
        s
    }

    /// A snapshot of the counters, as `stats`, published now in a persistent cache's
    /// segment (where `folio::SegmentView` and `folio-stat` read them) rather than at the
    /// writeback thread's next publish (about once a second), and returned: what a
    /// viewer reads next is exactly this (until the next publish).
    ///
    /// Context: as `stats`, and the segment's stats lock (held by a publish in progress).
    pub fn publish_stats(&self) -> Stats {
        self.inner.core.publish_stats(self.inner.backend.name())
    }

    /// The segment file of a persistent cache (`CacheBuilder::persistent`).
    pub fn segment_path(&self) -> Option<PathBuf> {
        let segment = self.inner.core.mem.arena.segment()?;
        Some(segment.path().to_path_buf())
    }

    /// What the build found in the segment of its name and kept (`CacheBuilder::segment_name`):
    /// `None` for a cache without a named segment or whose segment was new.
    pub fn adoption(&self) -> Option<&Adoption> {
        self.adoption.as_deref()
    }

    /// The keeper process of a persistent cache.
    pub fn keeper_pid(&self) -> Option<u32> {
        self.inner.core.mem.keeper.as_ref().map(|k| k.keeper_pid())
    }

    /// Bytes of memory the cache may hold folios in now.
    ///
    /// Context: any; takes no lock.
    pub fn capacity_bytes(&self) -> u64 {
        self.inner.core.capacity_bytes()
    }

    /// The largest capacity `set_capacity` accepts: what was reserved at build
    /// (`CacheBuilder::capacity_max_bytes`).
    pub fn capacity_max_bytes(&self) -> u64 {
        self.inner.core.capacity_max_bytes()
    }

    /// Sets the capacity at run time, in bytes (rounded down to 4 KiB), between
    /// [`CAPACITY_BYTES_MIN`] and `capacity_max_bytes`. Growing takes effect at once.
    /// Shrinking stops allocations past the new capacity at once, then evicts the coldest
    /// clean pages (dirty ones are written back first, never dropped) and gives the freed
    /// memory back to the system (`MADV_DONTNEED`: the resident set falls before this
    /// returns). A page a reader holds pinned stays until it is released; a shrink waits
    /// for pins and writeback up to `CacheBuilder::alloc_wait`, then returns with the
    /// rest left to reclaim. Under `CapacityPolicy::FollowMachine` the policy may move
    /// the capacity again at its next tick.
    ///
    /// Errors: `InvalidInput` outside that range (nothing changes).
    ///
    /// Context: any thread but one that holds pinned pages it releases only after this
    /// returns; may sleep (eviction, writeback). Safe against every concurrent read,
    /// write and sync.
    pub fn set_capacity(&self, bytes: u64) -> io::Result<()> {
        self.inner.core.set_capacity(bytes)
    }
}

/// Opens read-only with O_DIRECT; falls back to a buffered open where the file system
/// refuses O_DIRECT (EINVAL). Returns the mode in use.
///
/// Context: any thread; blocks in open(2).
/// Whether `OpenOptions::open` may create the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Create {
    No,
    /// Create it if it does not exist.
    IfMissing,
    /// Create it; fail if it exists.
    New,
}

/// How `Cache::open_options` opens a file: read-only by default; `write(true)` for a
/// handle that writes (`File::write_at`, `set_len`, the syncs), `create(true)`,
/// `create_new(true)`, `truncate(true)` as `std::fs::OpenOptions`.
#[derive(Debug)]
pub struct OpenOptions<'c> {
    cache: &'c Cache,
    write: bool,
    create: Create,
    truncate: bool,
}

// The setters take a bool, against STYLE.md's rule, on purpose: they mirror
// `std::fs::OpenOptions` (`.write(true).create(true)`) so that code moving from std to
// folio reads the same; each names one flag, so the bool is never a mode in disguise.
impl OpenOptions<'_> {
    /// Open for writing too.
    pub fn write(&mut self, write: bool) -> &mut Self {
        self.write = write;
        self
    }

    /// Create the file if it does not exist (needs `write`).
    pub fn create(&mut self, create: bool) -> &mut Self {
        if create {
            self.create = Create::IfMissing;
        } else if self.create == Create::IfMissing {
            self.create = Create::No;
        }
        self
    }

    /// Create the file; fail with `AlreadyExists` if it exists (needs `write`).
    pub fn create_new(&mut self, create_new: bool) -> &mut Self {
        if create_new {
            self.create = Create::New;
        } else if self.create == Create::New {
            self.create = Create::No;
        }
        self
    }

    /// Cut the file to 0 bytes when opened (needs `write`).
    pub fn truncate(&mut self, truncate: bool) -> &mut Self {
        self.truncate = truncate;
        self
    }

    /// Opens `path` as these options say (`Cache::open`'s doc for the rest).
    ///
    /// Errors: `InvalidInput` for `create`, `create_new` or `truncate` without `write`; as
    /// `Cache::open` otherwise.
    ///
    /// Context: as `Cache::open`; `truncate` takes the file's writer lock.
    pub fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        if !self.write && (self.create != Create::No || self.truncate) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "folio: create and truncate need write(true)",
            ));
        }
        let path = path.as_ref();
        if self.create != Create::No {
            create_file(path, self.create)?;
        }
        self.cache.open_with(path, self)
    }
}

/// Creates `path` if `create` says so (before the checks that need it to exist).
fn create_file(path: &Path, create: Create) -> io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    match create {
        Create::No => return Ok(()),
        Create::IfMissing => options.create(true),
        Create::New => options.create_new(true),
    };
    options.open(path).map(drop)
}

fn open_direct(path: &Path, access: Access) -> io::Result<(StdFile, OpenMode)> {
    let options = |flags: i32| {
        let mut options = std::fs::OpenOptions::new();
        options
            .read(true)
            .write(access == Access::ReadWrite)
            .custom_flags(flags);
        options
    };
    match options(libc::O_DIRECT).open(path) {
        Ok(f) => Ok((f, OpenMode::Direct)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            Ok((options(0).open(path)?, OpenMode::Buffered))
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Advice;

    std::thread_local! {
        /// Run by `open_with` on this thread right after its first `fstat`, once.
        static AFTER_FIRST_STAT: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
            std::cell::RefCell::new(None);
    }

    /// The test's lever in `open_with` (issue 42): what the other threads did between
    /// the open's first look at the file and its lookup of the mapping.
    pub(super) fn after_the_opens_first_stat() {
        if let Some(hook) = AFTER_FIRST_STAT.with(|hook| hook.borrow_mut().take()) {
            hook();
        }
    }

    /// Issue 42 (the write simulation with every transfer cut short: seeds 1873 and 2638,
    /// "opened with a length of 36864, the model has 36480", "... 274432, ... 271613"):
    /// an open stats the file before it takes the mapping table's lock. If the file's last
    /// mapping is removed in between, its removal settles the size on disk
    /// (`Mapping::settle_size`: a tail block written whole is cut back to the logical
    /// size), and the new mapping must learn the size as the disk has it now. It took the
    /// one the open had seen: the file read back longer (or shorter) than written, and
    /// the next sync would have settled that wrong size onto the disk. Here the removal
    /// runs right after the open's first `fstat`.
    #[test]
    fn a_new_mapping_learns_the_size_its_predecessors_removal_settled() {
        let dir = crate::io::testing::temp_dir();
        let path = dir.path().join("settled");
        let cache = Cache::builder().capacity_bytes(1 << 20).build().unwrap();
        let file = cache
            .open_options()
            .write(true)
            .create(true)
            .open(&path)
            .unwrap();
        file.write_at(&[7u8; 5000], 0).unwrap();
        file.writeback(0, u64::MAX).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let stats = cache.stats();
            if stats.dirty_pages == 0 && stats.writeback_pages == 0 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "never written back");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            8192,
            "a whole tail block"
        );
        file.advise(0, 8192, Advice::DontNeed).unwrap();
        assert_eq!(cache.stats().cached_bytes, 0, "the clean pages dropped");
        // The last handle goes right after the open's first look at the file: the
        // mapping, with no folio, is removed, and its removal cuts the file back.
        let settled = path.clone();
        AFTER_FIRST_STAT.with(|hook| {
            *hook.borrow_mut() = Some(Box::new(move || {
                drop(file);
                assert_eq!(std::fs::metadata(&settled).unwrap().len(), 5000, "settled");
            }))
        });
        let again = cache.open_options().write(true).open(&path).unwrap();
        assert!(
            AFTER_FIRST_STAT.with(|hook| hook.borrow().is_none()),
            "the hook ran"
        );
        assert_eq!(
            again.len(),
            5000,
            "the new mapping took the size the open saw first"
        );
        drop(again);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 5000);
    }
}
