//! The cache as its users see it: the handle that opens files (`Cache`, here), its
//! builder and settings (`builder`), opening a file (`open`: `OpenOptions`), and a
//! persistent cache's segment at build, created or adopted (`persistent`).
//!
//! Everything shared lives in `pagecache::Core`; a `Cache` is a cheap handle to it, and,
//! built with a domain (`CacheBuilder::domain`), to its reader of the domain
//! (`shared::reader`), which its read-only files read through.
//!
//! Protection: a `Cache` holds no state of its own but what the build adopted and the
//! domain's reader (its own protection: `Send + Sync`); every method takes the locks of
//! the parts it calls (each method's `Context:`).

mod builder;
mod open;
mod persistent;

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::adopt::Adoption;
use crate::file::File;
use crate::pagecache::Engine;
use crate::shared::reader::DomainReader;
use crate::stats::Stats;
use crate::types::PageIndex;

pub use builder::{
    CacheBuilder, Prefault, DIRTY_EXPIRE_DEFAULT, DOMAIN_LINGER, READAHEAD_MAX_BYTES_DEFAULT,
    SHARE_WEIGHT_DEFAULT, SHARE_WEIGHT_MAX, SHARE_WEIGHT_MIN, WRITE_BEHIND_BYTES_DEFAULT,
};
pub use open::OpenOptions;
pub use persistent::{segment_home, segment_room_capacity_bytes};

/// A page cache over files read with O_DIRECT. Cheap to share: clone it or wrap it in an
/// `Arc`; every method takes `&self` and is safe from any thread.
#[derive(Clone)]
pub struct Cache {
    pub(super) inner: Arc<Engine>,
    /// What the build adopted from a named segment (`CacheBuilder::segment_name`).
    pub(super) adoption: Option<Arc<Adoption>>,
    /// The domain's reader (`CacheBuilder::domain`): read-only files read through it.
    pub(super) domain: Option<Arc<DomainReader>>,
}

/// What this process read through its cache's domain (`Cache::domain_stats`): this
/// process's counts since the build, not the domain's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DomainStats {
    /// Pages found in the domain (cached by this process or another).
    pub hits: u64,
    /// Of the hits, those that pinned their frame after two optimistic copies were stale.
    pub pinned_hits: u64,
    /// Optimistic copies discarded (their frame was reclaimed or reused meanwhile).
    pub stale_copies: u64,
    /// Pages not found in the domain.
    pub misses: u64,
    /// Reads from the files: one per contiguous run of a miss's readahead window (or of
    /// its request), or per page read uncached.
    pub preads: u64,
    /// Pages read with a miss besides the one it needed, or by a window its marker
    /// started (readahead).
    pub pages_read_ahead: u64,
    /// Readahead windows opened (on a miss or at a marker).
    pub windows: u64,
    /// Pages read into a frame of this process's that another process (or thread) cached
    /// meanwhile, or whose index had no node free: each left for reclaim.
    pub conflicts: u64,
    /// Of the conflicts, the pages another reader cached meanwhile: read twice.
    pub duplicate_reads: u64,
    /// Reclaims this process ran (a miss found no free frame).
    pub reclaims: u64,
    /// The frames those reclaims freed.
    pub reclaimed_frames: u64,
    /// Misses read outside the domain (no frame could be had: every one pinned).
    pub uncached: u64,
    /// Pages read outside the domain because another thread of this process held their
    /// frame pinned.
    pub sibling_pinned: u64,
    /// Read-only opens the domain refused (the file changed since the domain recorded
    /// it, or its file table was full): those files are read privately.
    pub files_refused: u64,
    /// Read-only opens read privately because this process held newer bytes of the file
    /// than the disk (a writable handle open, dirty pages, a writeback running: the
    /// domain reads the disk).
    pub files_newer_here: u64,
    /// Pages this process's writes put into the domain (written files whose record it is
    /// the writer of: docs/sharing.md "Writes seen across processes").
    pub installs: u64,
    /// The domain's quota now: how many frames its cache may hold, moved by its steward
    /// with the machine's memory (docs/sharing.md, "The quota that follows the machine").
    /// The domain's figure, the same for every member.
    pub quota_frames: u64,
    /// The frames the domain's cache holds now (every member's pages).
    pub frames_cached: u64,
    /// Of the appends this process's writes made to such files, those stored into the
    /// page's frame in place (no page installed: docs/sharing.md "Writes seen across
    /// processes").
    pub appends_in_place: u64,
    /// Writer roles this process took from another process that was writing the same
    /// file (docs/sharing.md "Two writing processes": that process wrote its dirty pages
    /// back and handed the role over).
    pub roles_taken: u64,
    /// The frames this process owns of those the domain holds: those its misses and
    /// writes brought in (docs/sharing.md, "Shares and floors"). Another process's
    /// reclaim takes them only once no member above its share is left, and below the
    /// floor only when nothing else is left at all.
    pub owned_frames: u64,
    /// Each attached process's share of the quota now: the quota over the processes
    /// attached. The domain's figure, the same for every member.
    pub share_frames: u64,
    /// Each attached process's floor now: half its share. The domain's figure, the same
    /// for every member.
    pub floor_frames: u64,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("backend", &self.inner.backend.name())
            .field(
                "capacity_frames",
                &self.inner.core.arena().capacity_frames(),
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
        OpenOptions::new(self)
    }

    /// Deletes the file at `path` (`unlink`) and drops its cached pages (dirty ones too:
    /// their bytes belong to no file any more) and what the cache keeps of it, as the
    /// kernel drops a deleted file's page cache with its last descriptor: at once if no
    /// handle has it open, else when the last handle closes (until then they read it as
    /// before). RocksDB deletes a compaction's inputs while its table cache still holds
    /// them open: their pages must not linger until eviction finds them. In a cache with
    /// a domain, the domain's record of the file and its pages go too if no handle (of
    /// any process) has it open, else at the last close of this cache's handles of it
    /// (if no other process's has it open then; else they stay until the domain's full
    /// table evicts the record: docs/sharing.md, "A domain file's lifecycle").
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
            core.mappings.unlink(core.memory(), &mapping);
            if mapping.handles() == 0 {
                core.mappings.remove_if_unused(core.memory(), &mapping);
            }
        }
        if let Some(reader) = &self.domain {
            // The domain's record of the file, with its pages, if nobody has it open (else
            // at the last close of our handles: `File`'s drop). Only a test's lever fails
            // it.
            let _ = reader.forget(&meta);
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

    /// What this process read through the cache's domain (`CacheBuilder::domain`), or
    /// `None` for a cache without one. Not in `stats`: those count the private cache.
    ///
    /// Context: any; relaxed loads, one by one.
    pub fn domain_stats(&self) -> Option<DomainStats> {
        let domain = self.domain.as_ref()?;
        let (c, refused, newer) = domain.counters();
        let budget = domain.budget();
        Some(DomainStats {
            hits: c.hits,
            pinned_hits: c.pinned_hits,
            stale_copies: c.stale,
            misses: c.misses,
            preads: c.preads,
            pages_read_ahead: c.read_ahead,
            windows: c.windows,
            conflicts: c.conflicts,
            duplicate_reads: c.duplicates,
            reclaims: c.reclaims,
            reclaimed_frames: c.reclaimed,
            uncached: c.uncached,
            sibling_pinned: c.sibling_pinned,
            files_refused: refused,
            files_newer_here: newer,
            installs: c.installs,
            quota_frames: u64::from(budget.quota_frames),
            frames_cached: u64::from(budget.frames_cached),
            appends_in_place: c.appends_in_place,
            roles_taken: domain.roles_taken(),
            owned_frames: u64::from(budget.owned_frames),
            share_frames: u64::from(budget.share_frames),
            floor_frames: u64::from(budget.floor_frames),
        })
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
        let segment = self.inner.core.arena().segment()?;
        Some(segment.path().to_path_buf())
    }

    /// What the build found in the segment of its name and kept (`CacheBuilder::segment_name`):
    /// `None` for a cache without a named segment or whose segment was new.
    pub fn adoption(&self) -> Option<&Adoption> {
        self.adoption.as_deref()
    }

    /// Why this persistent cache's named segment will not be kept for the next cache of
    /// its name, if its keeper said so at the build: the process may change its
    /// credentials and the keeper could not watch it (docs/persistence.md, trust model),
    /// so the keeper took the segment's name away at once. The cache works as any; the
    /// next one of the name starts cold. `None` otherwise.
    pub fn segment_not_kept_because(&self) -> Option<&'static str> {
        self.inner.core.mappings.keeper()?.not_kept_because()
    }

    /// The keeper process of a persistent cache.
    pub fn keeper_pid(&self) -> Option<u32> {
        self.inner.core.mappings.keeper().map(|k| k.keeper_pid())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Advice;
    use std::time::Duration;

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
