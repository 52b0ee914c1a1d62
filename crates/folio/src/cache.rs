//! The cache: its builder, its memory, its mappings, and how folios are allocated and
//! freed.
//!
//! Ownership: a `Cache` and every `File` hold an `Arc<CacheInner>`, which owns the I/O
//! backend and an `Arc<Core>`. In-flight reads hold an `Arc<Core>` (never the backend), so
//! the last handle's drop shuts the backend down, which waits for the in-flight reads,
//! whose completions release their `Core`; the arena is unmapped after the last of them.
//! Dropping a `Cache` while `File`s live is therefore defined: the files keep working and
//! the memory goes with the last of them.
//!
//! Protection: `mappings` under a reader-writer lock (open, close, reclaim's look-up);
//! the rest per module (arena, index, refcount).

use std::collections::HashMap;
use std::fs::File as StdFile;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::arena::Arena;
use crate::eviction::new_policy;
use crate::eviction::EvictionKind;
use crate::file::File;
use crate::folio::MappingId;
use crate::index::NODE_BYTES;
use crate::io::{open_backend, Backend, BackendKind};
use crate::mapping::{FileStamp, Mapping};
use crate::reclaim::{self, Reclaimer};
use crate::refcount::PutOutcome;
use crate::stats::{self, Counters, Stats};
use crate::types::{FrameId, Order, PAGE_BYTES};

/// The smallest capacity a cache accepts: 16 frames.
pub const CAPACITY_BYTES_MIN: u64 = 16 * PAGE_BYTES as u64;

/// Configures and builds a [`Cache`].
#[derive(Debug, Clone)]
pub struct CacheBuilder {
    capacity_bytes: u64,
    backend: BackendKind,
    pread_threads: usize,
    alloc_wait: Duration,
    folio_order_max: Order,
    readahead_max_bytes: u64,
    eviction: EvictionKind,
}

/// The default maximum readahead window: 2 MiB. Measured on this kind of machine
/// (virtio disk, O_DIRECT through io_uring): see docs/readahead.md.
pub const READAHEAD_MAX_BYTES_DEFAULT: u64 = 2 << 20;

impl Default for CacheBuilder {
    fn default() -> Self {
        CacheBuilder {
            capacity_bytes: 256 << 20,
            backend: BackendKind::Auto,
            pread_threads: 16,
            alloc_wait: Duration::from_secs(2),
            folio_order_max: Order::MAX,
            readahead_max_bytes: READAHEAD_MAX_BYTES_DEFAULT,
            eviction: EvictionKind::default(),
        }
    }
}

impl CacheBuilder {
    /// Bytes of folio memory (rounded down to 4 KiB frames). At least
    /// [`CAPACITY_BYTES_MIN`].
    pub fn capacity_bytes(mut self, bytes: u64) -> Self {
        self.capacity_bytes = bytes;
        self
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
    /// [`READAHEAD_MAX_BYTES_DEFAULT`]; at most 16 MiB; 0 turns readahead off). Each handle
    /// can change its own with `File::set_readahead_max_bytes`.
    pub fn readahead_max_bytes(mut self, bytes: u64) -> Self {
        self.readahead_max_bytes = bytes;
        self
    }

    /// Which eviction policy chooses what to drop (default S3-FIFO).
    pub fn eviction(mut self, kind: EvictionKind) -> Self {
        self.eviction = kind;
        self
    }

    /// Builds the cache: reserves the arena and starts the backend.
    pub fn build(self) -> io::Result<Cache> {
        let backend = open_backend(self.backend, self.pread_threads)?;
        self.build_with_backend(backend)
    }

    /// Builds the cache over a backend made by the caller (the fault-injecting one in
    /// tests, a wrapper of one's own).
    pub fn build_with_backend(self, backend: Box<dyn Backend>) -> io::Result<Cache> {
        if self.capacity_bytes < CAPACITY_BYTES_MIN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "folio: capacity of {} bytes is below the minimum of {CAPACITY_BYTES_MIN} bytes (16 pages)",
                    self.capacity_bytes
                ),
            ));
        }
        let frames = u32::try_from(self.capacity_bytes / PAGE_BYTES as u64)
            .ok()
            .filter(|&f| f <= crate::eviction::list::FRAMES_MAX)
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "folio: capacity above 1 TiB")
            })?;
        // Keep at least 16 folios of the largest order, so one read cannot pin the cache.
        let mut order_max = self.folio_order_max;
        while order_max > Order::ZERO && order_max.pages() * 16 > u64::from(frames) {
            order_max = Order::new(order_max.get() - 1);
        }
        let core = Core {
            arena: Arena::new(frames)?,
            mappings: RwLock::new(Mappings::default()),
            counters: Counters::default(),
            reclaimer: Reclaimer::new(new_policy(self.eviction, frames), frames),
            alloc_wait: self.alloc_wait,
            folio_order_max: order_max,
            readahead_pages: (self.readahead_max_bytes / PAGE_BYTES as u64)
                .min(u64::from(crate::readahead::WINDOW_PAGES_LIMIT))
                as u32,
        };
        let core = Arc::new(core);
        Ok(Cache {
            inner: Arc::new(CacheInner {
                backend,
                reclaim_thread: Reclaimer::spawn(core.clone()),
                core,
            }),
        })
    }
}

#[derive(Default)]
struct Mappings {
    by_id: HashMap<MappingId, Arc<Mapping>>,
    by_inode: HashMap<(u64, u64), MappingId>,
    next_id: u32,
}

/// Whether an allocation may wait for memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AllocMode {
    Wait,
    NoWait,
}

/// What reads share with their completions: memory, mappings, counters.
pub(crate) struct Core {
    pub arena: Arena,
    mappings: RwLock<Mappings>,
    pub counters: Counters,
    pub reclaimer: Reclaimer,
    alloc_wait: Duration,
    pub folio_order_max: Order,
    /// The maximum readahead window of new handles, in pages.
    readahead_pages: u32,
}

impl Core {
    pub fn mapping(&self, id: MappingId) -> Option<Arc<Mapping>> {
        self.mappings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_id
            .get(&id)
            .cloned()
    }

    /// Allocates a LOCKED folio of `order`, or a smaller one if memory is fragmented.
    /// When nothing is free, reclaims; when reclaim finds everything pinned or locked,
    /// `AllocMode::Wait` waits up to the configured `alloc_wait` for holders to finish,
    /// then fails with `OutOfMemory` (never a deadlock); `AllocMode::NoWait` fails at once.
    ///
    /// Context: no index lock held (reclaim takes them). A caller that already holds
    /// LOCKED folios it allocated must use `NoWait`: waiting while holding them is how
    /// every reader ends up waiting for every other. May sleep (`Wait`).
    pub fn alloc_folio(&self, order: Order, mode: AllocMode) -> io::Result<(FrameId, Order)> {
        let started = Instant::now();
        let mut pause = Duration::from_micros(50);
        loop {
            if let Some(got) = self.try_alloc(order) {
                return Ok(got);
            }
            let report = self
                .reclaimer
                .reclaim(self, order.pages().max(reclaim::BATCH_PAGES));
            if let Some(got) = self.try_alloc(order) {
                return Ok(got);
            }
            // Fragmented: take the largest smaller block there is.
            for smaller in (0..order.get()).rev() {
                if let Some(got) = self.try_alloc(Order::new(smaller)) {
                    return Ok(got);
                }
            }
            if report.freed_pages > 0 {
                continue;
            }
            if mode == AllocMode::NoWait || started.elapsed() >= self.alloc_wait {
                if mode == AllocMode::Wait {
                    stats::bump(&self.counters.alloc_failures);
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

    fn try_alloc(&self, order: Order) -> Option<(FrameId, Order)> {
        let frame = self.arena.alloc(order)?;
        self.reclaimer.note_alloc(self.arena.free_frames());
        Some((frame, order))
    }

    /// Drops a reference; frees the folio if it was the last one.
    pub fn put_folio(&self, frame: FrameId, order: Order) {
        if self.arena.meta(frame).state.put() == PutOutcome::Free {
            self.arena.free(frame, order);
        }
    }

    /// Frees a frame whose release the caller won (`GetOutcome::DeadFree`).
    pub fn free_frame(&self, frame: FrameId) {
        let (_, _, order) = self.arena.meta(frame).identity();
        self.arena.free(frame, order);
    }

    fn stats(&self) -> Stats {
        let mut s = self.counters.snapshot();
        let frames = u64::from(self.arena.frame_count());
        s.capacity_bytes = frames * PAGE_BYTES as u64;
        s.cached_bytes = (frames - self.arena.free_frames()) * PAGE_BYTES as u64;
        let nodes: usize = self
            .mappings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_id
            .values()
            .map(|m| m.index.node_count())
            .sum();
        s.metadata_bytes = (self.arena.metadata_bytes() + nodes * NODE_BYTES) as u64;
        s.eviction = self.reclaimer.policy.name().to_string();
        s.shadows = self.reclaimer.shadows_logged();
        s
    }
}

pub(crate) struct CacheInner {
    // Field order is drop order: the backend (and its in-flight reads) goes first.
    pub backend: Box<dyn Backend>,
    pub core: Arc<Core>,
    reclaim_thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for CacheInner {
    fn drop(&mut self) {
        self.core.reclaimer.stop();
        if let Some(thread) = self.reclaim_thread.take() {
            let _ = thread.join();
        }
        self.core.counters.detach_threads();
    }
}

/// A page cache over files read with O_DIRECT. Cheap to share: clone it or wrap it in an
/// `Arc`; every method takes `&self` and is safe from any thread.
#[derive(Clone)]
pub struct Cache {
    inner: Arc<CacheInner>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("backend", &self.inner.backend.name())
            .field("capacity_frames", &self.inner.core.arena.frame_count())
            .finish()
    }
}

impl Cache {
    pub fn builder() -> CacheBuilder {
        CacheBuilder::default()
    }

    /// Opens `path` for cached reads, O_DIRECT underneath (buffered where the file system
    /// refuses O_DIRECT, e.g. tmpfs). Two opens of the same file share its cached pages;
    /// each handle has its own readahead state. A file whose size or modification time
    /// changed since it was last opened through this cache has its pages dropped.
    ///
    /// Errors: the file's own open error (not found, permission), `IsADirectory` for a
    /// directory, `InvalidInput` for anything that is not a regular file.
    pub fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        let path = path.as_ref();
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
        let (std_file, direct) = open_direct(path)?;
        // Stat the open file, not the path: the path may have been replaced meanwhile.
        let meta = std_file.metadata()?;
        let stamp = FileStamp {
            size_bytes: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        };
        let mapping = self.mapping_for(meta.dev(), meta.ino(), stamp)?;
        Ok(File::new(
            self.inner.clone(),
            mapping,
            Arc::new(std_file),
            direct,
            self.inner.core.readahead_pages,
        ))
    }

    fn mapping_for(&self, dev: u64, ino: u64, stamp: FileStamp) -> io::Result<Arc<Mapping>> {
        let core = &self.inner.core;
        let existing = {
            let maps = core.mappings.read().unwrap_or_else(|e| e.into_inner());
            maps.by_inode
                .get(&(dev, ino))
                .and_then(|id| maps.by_id.get(id).cloned())
        };
        if let Some(mapping) = existing {
            mapping.revalidate(core, stamp);
            return Ok(mapping);
        }
        let mut maps = core.mappings.write().unwrap_or_else(|e| e.into_inner());
        if let Some(mapping) = maps
            .by_inode
            .get(&(dev, ino))
            .and_then(|id| maps.by_id.get(id).cloned())
        {
            drop(maps);
            mapping.revalidate(core, stamp);
            return Ok(mapping);
        }
        let id = MappingId(maps.next_id);
        maps.next_id = maps.next_id.checked_add(1).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                "folio: more than 2^32 files opened",
            )
        })?;
        let mapping = Arc::new(Mapping::new(id, stamp));
        maps.by_id.insert(id, mapping.clone());
        maps.by_inode.insert((dev, ino), id);
        Ok(mapping)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        let mut s = self.inner.core.stats();
        s.backend = self.inner.backend.name().to_string();
        s
    }

    /// Bytes of memory the cache holds folios in.
    pub fn capacity_bytes(&self) -> u64 {
        u64::from(self.inner.core.arena.frame_count()) * PAGE_BYTES as u64
    }
}

/// Opens read-only with O_DIRECT; falls back to a buffered open where the file system
/// refuses O_DIRECT (EINVAL). Returns whether O_DIRECT is in use.
fn open_direct(path: &Path) -> io::Result<(StdFile, bool)> {
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(f) => Ok((f, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            Ok((std::fs::OpenOptions::new().read(true).open(path)?, false))
        }
        Err(e) => Err(e),
    }
}
