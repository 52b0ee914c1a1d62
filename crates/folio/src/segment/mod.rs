//! The segment (DESIGN.md §9): a file in shared memory (`/dev/shm/folio-<uid>` by default) that holds
//! the arena's frames and side table and the cache's file slots, so that what a process
//! wrote outlives it. The keeper (`keeper`) writes a dead owner's dirty frames back from
//! it.
//!
//! Rooms: `home` (where segments live: the checked directory, held open, and the names);
//! `layout` (where each part lies, the header, a file slot); `link` (the owner's
//! messages to its keeper: descriptors of the files it writes); `stats` (the owner's
//! counters, published by name); `view` (a segment seen from outside, read-only: the
//! public `SegmentView`, `segments_in`, `remove_segment`); this file (creating, checking,
//! mapping and removing a segment file).
//!
//! Who may use a segment: only its owner's user. It is created `O_EXCL | O_NOFOLLOW`, mode
//! 0600, in a directory of this user's that no one else can write, reached by no symlink
//! and on tmpfs unless allowed otherwise (`home`); every open, creation and removal of a
//! segment goes through that directory, checked again and held open (`home::SegmentDir`).
//! A segment opened again (an adoption, a recovery, a view) must be a regular file, not a
//! symlink, owned by this user, readable by no one else, with a header this build reads
//! (`Header::check`).
//!
//! Exclusion: the owner holds an exclusive `flock` on the segment from its creation; its
//! keeper shares it (the same open file) and holds it after the owner's death, so a
//! recovery, which must take it, never runs beside either. The owner alone also holds a
//! record lock (`F_OFD_SETLK`) through a second open file of its own, which the keeper
//! closes as it starts (it keeps no descriptor but its own three): so another process tells
//! "the owner lives" (record lock held) from "its keeper is still writing back" (only the
//! `flock` held) from "abandoned" (neither) (`Segment::status_of`). The kernel drops both
//! when their holders die: never a stale pid. A kept segment's steward (`keeper::kept`)
//! holds a record lock of its own at `STEWARD_LOCK_OFFSET`, past the owner's probe, and
//! the `flock` only while it punches pages out (`holder_of`: `Holder::Steward`).
//!
//! Invariants: the mapping is one shared mapping of the whole file, aligned so that the
//! frames are aligned to 2 MiB; it stays at one address until the segment is dropped.

pub mod home;
pub mod layout;
pub mod link;
pub(crate) mod scan;
pub mod stats;
pub mod view;

use std::ffi::{OsStr, OsString};
use std::fs::File as StdFile;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use crate::folio_meta::{FolioMeta, MappingId};
use crate::types::{ORDER_MAX, PAGE_BYTES};
pub use home::{check_name, DiskDir, SegmentDir};
use layout::{
    FileIdentity, FileSlot, FileStamp, Header, Layout, Retention, SegmentState, HEADER_BYTES,
    SLOT_BYTES, SLOT_COUNT, STAMP_TICK_NS, STATS_BYTES, STATS_OFFSET,
};
use stats::{StatValue, StatsArea};

const ALIGN_BYTES: usize = PAGE_BYTES << ORDER_MAX;

/// One mapped segment file.
pub struct Segment {
    path: PathBuf,
    file: StdFile,
    /// What mmap returned for the reservation, for munmap.
    map_ptr: *mut libc::c_void,
    map_bytes: usize,
    /// The start of the file's mapping (aligned to 2 MiB).
    base: NonNull<u8>,
    layout: Layout,
    /// One writer per slot (`FileSlot::write`).
    slot_lock: Mutex<()>,
    /// One publisher of the stats area at a time (`publish_stats`).
    stats_lock: Mutex<()>,
    /// The owner's second open file of the segment, holding the owner's record lock
    /// (module docs, exclusion); `None` in a keeper or a recovery.
    owner_lock: Option<StdFile>,
}

// SAFETY: the raw pointers refer to a shared mapping owned by the segment and valid until
// Drop; everything in it is read and written through atomics (header, slots, side table)
// or under the arena's rules (frames).
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("path", &self.path)
            .field("frames", &self.layout.frame_count)
            .finish()
    }
}

impl Segment {
    /// Creates a segment of `frame_count` frames in the directory at `dir` (checked as
    /// `SegmentDir::open` checks it, on any file system: a caller that creates one where
    /// the file system matters checks it first and calls `create_in`), named `name` (or a
    /// fresh name of this process's), and maps it.
    ///
    /// Errors: `SegmentDir::open`'s; `create_in`'s.
    pub fn create(dir: &Path, name: Option<&str>, frame_count: u32) -> io::Result<Segment> {
        Self::create_in(&SegmentDir::open(dir, DiskDir::Allowed)?, name, frame_count)
    }

    /// Creates a segment of `frame_count` frames in `dir`, named `name` (or a fresh name of
    /// this process's), and maps it.
    ///
    /// Errors: `InvalidInput` for a name that is not one plain file name (`check_name`);
    /// `AlreadyExists` for a named segment that exists; the OS error otherwise (including
    /// `StorageFull` when the directory's file system has too little room for the frames).
    pub fn create_in(
        dir: &SegmentDir,
        name: Option<&str>,
        frame_count: u32,
    ) -> io::Result<Segment> {
        let layout = Layout::for_frames(frame_count, machine_frames());
        let retention = if name.is_some() {
            Retention::Kept
        } else {
            Retention::Removed
        };
        let (file, name) = match name {
            Some(name) => {
                check_name(name)?;
                (create_file(dir, OsStr::new(name))?, OsString::from(name))
            }
            None => create_fresh(dir)?,
        };
        let path = dir.join(&name);
        let id = file.metadata().map(|m| (m.dev(), m.ino()))?;
        let remove_on_error = |e: io::Error| {
            let _ = dir.unlink_if_id(&name, id);
            e
        };
        lock_exclusive(&file).map_err(remove_on_error)?;
        let owner_lock = lock_owner(dir, &name, &file).map_err(remove_on_error)?;
        file.set_len(layout.total_bytes).map_err(remove_on_error)?;
        let mut segment = Self::map(path.clone(), file, layout).map_err(remove_on_error)?;
        segment.owner_lock = Some(owner_lock);
        segment
            .allocate(0, STATS_OFFSET + STATS_BYTES)
            .map_err(remove_on_error)?;
        segment.header().init(&layout);
        segment
            .header()
            .owner_pid
            .store(std::process::id(), Ordering::Relaxed);
        segment.header().set_retained(retention);
        Ok(segment)
    }

    /// Opens the named segment at `path` that its last owner left (a clean exit, or a
    /// keeper's or a recovery's writeback after a kill) and makes this process its owner,
    /// with `frame_count` frames: the checks and the lock of `open_orphan`, then the
    /// owner's record lock; a changed frame count resizes the file (frames past a smaller
    /// count, and their side-table entries, are dropped).
    ///
    /// Errors: `open_orphan`'s (`WouldBlock` while an owner or keeper holds it); the OS
    /// error of the resize or the mapping.
    pub fn adopt(path: &Path, frame_count: u32) -> io::Result<Segment> {
        let (dir, name) = SegmentDir::of_segment(path)?;
        let file = Self::open_checked(&dir, &name)?;
        let owner_lock = lock_owner(&dir, &name, &file)?;
        let old = Self::read_layout(&file, file.metadata()?.len())?;
        if frame_count > old.meta_frames {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "folio: segment {} has room for {} MiB of frames, the cache asks for {} MiB",
                    path.display(),
                    (u64::from(old.meta_frames) * PAGE_BYTES as u64) >> 20,
                    (u64::from(frame_count) * PAGE_BYTES as u64) >> 20
                ),
            ));
        }
        let layout = Layout::for_frames(frame_count, old.meta_frames);
        if frame_count < old.frame_count {
            let entry = std::mem::size_of::<FolioMeta>() as u64;
            let from = layout.meta_offset + u64::from(frame_count) * entry;
            let to = layout.meta_offset + u64::from(old.frame_count) * entry;
            punch_hole(&file, from, to - from)?;
        }
        if frame_count != old.frame_count {
            file.set_len(layout.total_bytes)?;
        }
        let mut segment = Self::map(path.to_path_buf(), file, layout)?;
        segment.owner_lock = Some(owner_lock);
        let header = segment.header();
        header.init(&layout);
        header
            .owner_pid
            .store(std::process::id(), Ordering::Relaxed);
        header.keeper_pid.store(0, Ordering::Relaxed);
        header.set_retained(Retention::Kept);
        Ok(segment)
    }

    /// Opens the segment at `path` that no process uses any more (its owner and keeper
    /// are dead), for a recovery: checks who owns it, its permissions and its header, and
    /// takes its lock.
    ///
    /// Errors: `SegmentDir::of_segment`'s (its directory checked again: a symlink in its
    /// path, another user's directory or one others can write is `PermissionDenied`);
    /// `PermissionDenied` for a symlink, a file that is not regular, a segment of another
    /// user or one readable by others;
    /// `InvalidData` for a header this build cannot read (`Header::check`); `WouldBlock`
    /// while an owner or a keeper holds it.
    pub fn open_orphan(path: &Path) -> io::Result<Segment> {
        let (dir, name) = SegmentDir::of_segment(path)?;
        let file = Self::open_checked(&dir, &name)?;
        let layout = Self::read_layout(&file, file.metadata()?.len())?;
        Self::map(path.to_path_buf(), file, layout)
    }

    /// `open_orphan`'s checks and lock, before anything is mapped.
    fn open_checked(dir: &SegmentDir, name: &OsStr) -> io::Result<StdFile> {
        let (file, _) = open_ours(dir, name, libc::O_RDWR)?;
        lock_unused(&file, &dir.join(name))?;
        Ok(file)
    }

    /// Maps `file`, a segment whose layout was checked or just written, in the keeper after
    /// its owner's death (the keeper holds the owner's open file).
    pub fn from_open_file(path: PathBuf, file: StdFile) -> io::Result<Segment> {
        let len = file.metadata()?.len();
        let layout = Self::read_layout(&file, len)?;
        Self::map(path, file, layout)
    }

    /// The stats area (`stats`).
    pub fn stats_area(&self) -> &StatsArea {
        // SAFETY: the area lies inside the mapping at STATS_OFFSET (page aligned), is
        // STATS_BYTES long (StatsArea fits: asserted in `stats`) and lives as long as
        // `self`; StatsArea is atomics only, valid for any bytes.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(STATS_OFFSET as usize)
                .cast::<StatsArea>()
        }
    }

    /// Publishes `entries` in the stats area (`StatsArea::publish`), as this process's,
    /// now.
    ///
    /// Context: the owner (its stats area was allocated at `create`); takes the stats
    /// lock; never blocks otherwise.
    pub fn publish_stats<'a>(&self, entries: impl IntoIterator<Item = (&'a str, StatValue)>) {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let _one_publisher = self.stats_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.stats_area()
            .publish(entries, std::process::id(), unix_ms);
    }

    /// Maps the segment at `path` read-only, for a look from outside (`view`): the same
    /// checks as `open_orphan` (owner, permissions, symlink, header), but no lock taken, so
    /// that its owner or keeper may hold it. Only for reading: the mapping is `PROT_READ`,
    /// and a write through it (`register`, `publish_stats`, `set_state`, the frames) faults.
    ///
    /// Errors: as `open_orphan`, but never `WouldBlock`.
    pub fn open_view(path: &Path) -> io::Result<Segment> {
        let (dir, name) = SegmentDir::of_segment(path)?;
        let (file, meta) = open_ours(&dir, &name, libc::O_RDONLY)?;
        let layout = Self::read_layout(&file, meta.len())?;
        Self::map_as(path.to_path_buf(), file, layout, Protection::ReadOnly)
    }

    /// Reads and checks the header (`with_header`, `Header::check`), and that its frames
    /// fit the file system the segment is on (`Layout::check_fits`).
    fn read_layout(file: &StdFile, file_bytes: u64) -> io::Result<Layout> {
        let layout = with_header(file, |header| header.check(file_bytes))??;
        layout.check_fits(file_system_bytes(file))?;
        Ok(layout)
    }

    fn map(path: PathBuf, file: StdFile, layout: Layout) -> io::Result<Segment> {
        Self::map_as(path, file, layout, Protection::ReadWrite)
    }

    fn map_as(
        path: PathBuf,
        file: StdFile,
        layout: Layout,
        protection: Protection,
    ) -> io::Result<Segment> {
        let file_bytes = usize::try_from(layout.total_bytes)
            .map_err(|_| invalid("folio: segment too large for this address space".into()))?;
        let map_bytes = file_bytes + ALIGN_BYTES;
        // SAFETY: an anonymous reservation with no address hint; the result is checked.
        let map_ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_bytes,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if map_ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let aligned = (map_ptr as usize).next_multiple_of(ALIGN_BYTES);
        // SAFETY: [aligned, aligned + file_bytes) lies inside the reservation (ALIGN_BYTES
        // of slack); MAP_FIXED replaces that part of it with the file's shared mapping.
        let mapped = unsafe {
            libc::mmap(
                aligned as *mut libc::c_void,
                file_bytes,
                match protection {
                    Protection::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
                    Protection::ReadOnly => libc::PROT_READ,
                },
                libc::MAP_SHARED | libc::MAP_FIXED | libc::MAP_NORESERVE,
                file.as_raw_fd(),
                0,
            )
        };
        if mapped == libc::MAP_FAILED {
            let error = io::Error::last_os_error();
            // SAFETY: exactly the reservation made above.
            unsafe { libc::munmap(map_ptr, map_bytes) };
            return Err(error);
        }
        Ok(Segment {
            path,
            file,
            map_ptr,
            map_bytes,
            base: NonNull::new(aligned as *mut u8).expect("mmap returned null"),
            layout,
            slot_lock: Mutex::new(()),
            stats_lock: Mutex::new(()),
            owner_lock: None,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self) -> &StdFile {
        &self.file
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn header(&self) -> &Header {
        // SAFETY: the header lies at offset 0 of the mapping, which is page aligned and
        // lives as long as `self`; Header is atomics only.
        unsafe { &*self.base.as_ptr().cast::<Header>() }
    }

    /// The slot of mapping `id`; `None` past the segment's slots.
    pub fn slot(&self, id: MappingId) -> Option<&FileSlot> {
        if id.0 >= SLOT_COUNT {
            return None;
        }
        let offset = self.layout.slots_offset + u64::from(id.0) * SLOT_BYTES;
        // SAFETY: inside the slots' part of the mapping (id < SLOT_COUNT), aligned to 512;
        // FileSlot is atomics only, for which any bytes (zeros, for a new file) are valid.
        Some(unsafe { &*self.base.as_ptr().add(offset as usize).cast::<FileSlot>() })
    }

    /// Records that mapping `id` is the file `identity` at `path` (`FileSlot::write`).
    ///
    /// Errors: `Other` past the segment's slots (too many files cached at once).
    pub fn register(
        &self,
        id: MappingId,
        identity: FileIdentity,
        stamp: &FileStamp,
        path: &Path,
        opened: layout::Opened,
    ) -> io::Result<()> {
        let slot = self.slot(id).ok_or_else(|| {
            io::Error::other(format!(
                "folio: more than {SLOT_COUNT} files cached at once in a persistent cache"
            ))
        })?;
        let offset = self.layout.slots_offset + u64::from(id.0) * SLOT_BYTES;
        self.allocate(offset, SLOT_BYTES).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("folio: no room in the segment's file system for a file's slot: {e}"),
            )
        })?;
        let _one_writer = self.slot_lock.lock().unwrap_or_else(|e| e.into_inner());
        slot.write(identity, stamp, path.as_os_str().as_bytes(), opened);
        Ok(())
    }

    /// The side table, zeroed in a new segment.
    pub fn meta_table(&self) -> NonNull<FolioMeta> {
        // SAFETY: the meta part lies inside the mapping; its offset is a multiple of 8.
        let ptr = unsafe { self.base.as_ptr().add(self.layout.meta_offset as usize) };
        NonNull::new(ptr.cast::<FolioMeta>()).expect("inside a non-null mapping")
    }

    /// Frame `frame`'s side-table entry; `None` past the segment's frames. Context: the
    /// entry's page of the table was allocated (`written_meta_frames`, or an arena's
    /// chunk): reading a hole of a tmpfs file through a mapping allocates it.
    pub fn meta(&self, frame: u32) -> Option<&FolioMeta> {
        (frame < self.layout.frame_count).then(|| {
            // SAFETY: inside the side table (frame < frame_count), which `meta_table`
            // points to; FolioMeta is atomics only, valid for any bytes; it lives as long
            // as the mapping, that is `self`.
            unsafe { &*self.meta_table().as_ptr().add(frame as usize) }
        })
    }

    /// The side table's entries of the segment's frames, as a slice (read back by a
    /// restart, `adopt`).
    pub fn meta_entries(&self) -> &[FolioMeta] {
        // SAFETY: the side table has an entry for each of the segment's frames inside its
        // mapping, which lives as long as `self`; entries are atomics only, valid for any
        // bytes (a hole reads as zeros).
        unsafe {
            std::slice::from_raw_parts(self.meta_table().as_ptr(), self.layout.frame_count as usize)
        }
    }

    /// The first frame, aligned to 2 MiB.
    pub fn frames(&self) -> NonNull<u8> {
        // SAFETY: the frames' part lies inside the mapping.
        let ptr = unsafe { self.base.as_ptr().add(self.layout.frames_offset as usize) };
        NonNull::new(ptr).expect("inside a non-null mapping")
    }

    /// Copies the first `out.len()` bytes (at most a frame's) of frame `frame` into `out`;
    /// false past the segment's frames. For a check of a segment read back (`adopt`):
    /// the bytes may be changing under a live owner, never torn for memory safety.
    pub fn copy_frame(&self, frame: u32, out: &mut [u8]) -> bool {
        if frame >= self.layout.frame_count || out.len() > PAGE_BYTES {
            return false;
        }
        // SAFETY: [frame, frame + 1) lies inside the frames' part of the mapping, which
        // lives as long as `self`; a byte copy to memory we own (`out`), never a reference
        // to the shared bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.frames().as_ptr().add(frame as usize * PAGE_BYTES),
                out.as_mut_ptr(),
                out.len(),
            );
        }
        true
    }

    /// Writes `bytes` (at most a frame's) at the start of frame `frame` (a hostile
    /// segment forged in place: `fuzzing::hostile_segment`).
    #[cfg(any(fuzzing, test))]
    pub fn write_frame_for_test(&self, frame: u32, bytes: &[u8]) {
        assert!(frame < self.layout.frame_count && bytes.len() <= PAGE_BYTES);
        let offset = self.layout.frames_offset + u64::from(frame) * PAGE_BYTES as u64;
        use std::os::unix::fs::FileExt;
        self.file
            .write_all_at(bytes, offset)
            .expect("write a frame of a forged segment");
    }

    /// Allocates the file's memory under frames `frames` before anything touches it: on a
    /// shared-memory file system a store to a page it has no room for kills the process
    /// (SIGBUS), a failed `fallocate` is only an answer. False when the file system is
    /// short of room. For a block taken again after it was given back (its side-table
    /// entries stayed).
    pub fn reserve_frames(&self, frames: std::ops::Range<u32>) -> bool {
        let page = PAGE_BYTES as u64;
        let count = u64::from(frames.end - frames.start);
        let offset = self.layout.frames_offset + u64::from(frames.start) * page;
        self.allocate(offset, count * page).is_ok()
    }

    /// `reserve_frames`, and the frames' side-table entries: for a chunk the arena grows
    /// over for the first time.
    pub fn reserve_chunk(&self, frames: std::ops::Range<u32>) -> bool {
        let entry = std::mem::size_of::<FolioMeta>() as u64;
        let count = u64::from(frames.end - frames.start);
        let offset = self.layout.meta_offset + u64::from(frames.start) * entry;
        self.reserve_frames(frames) && self.allocate(offset, count * entry).is_ok()
    }

    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        loop {
            // SAFETY: fallocate on our open descriptor, inside the file's size.
            let rc = unsafe {
                libc::fallocate(
                    self.file.as_raw_fd(),
                    0,
                    offset as libc::off_t,
                    len as libc::off_t,
                )
            };
            if rc == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Frees the tmpfs pages of frames `[first, first + count)` (`MADV_REMOVE`): they read
    /// as zeros afterwards, as anonymous memory given back with `MADV_DONTNEED` does.
    ///
    /// # Safety
    /// Nobody holds a reference to those frames' bytes.
    pub unsafe fn remove_frames(&self, first: u32, count: u32) {
        let offset = first as usize * PAGE_BYTES;
        // SAFETY: inside the frames' part of the shared mapping; the caller guarantees no
        // reference to the bytes.
        unsafe {
            libc::madvise(
                self.frames().as_ptr().add(offset).cast::<libc::c_void>(),
                count as usize * PAGE_BYTES,
                libc::MADV_REMOVE,
            );
        }
    }

    /// Maps the pages of frames `frames` that the file holds into this process now
    /// (`MADV_POPULATE_WRITE`), rather than one minor fault per page at first touch: a
    /// restart's adopted pages (`adopt`), which its first reads would otherwise each fault
    /// in (measured: ~0.6x the warm rate in the first second without it). Best effort: a
    /// kernel without it (before 5.14) faults them in as they are read.
    pub fn map_in_frames(&self, frames: std::ops::Range<u32>) {
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        let offset = frames.start as usize * PAGE_BYTES;
        // SAFETY: inside the frames' part of the shared mapping; populating changes no
        // byte (the pages exist in the file: an adopted folio's), it only maps them.
        unsafe {
            libc::madvise(
                self.frames().as_ptr().add(offset).cast::<libc::c_void>(),
                (frames.end - frames.start) as usize * PAGE_BYTES,
                MADV_POPULATE_WRITE,
            );
        }
    }

    /// Takes the memory of frames `frames` out of the file (a hole: they read as zeros
    /// after, from new memory). A page an I/O still holds stays that I/O's, outside the
    /// file: a restart's way to keep a dead owner's late completions away (`adopt`).
    ///
    /// Errors: `fallocate`'s.
    pub fn punch_frames(&self, frames: std::ops::Range<u32>) -> io::Result<()> {
        let page = PAGE_BYTES as u64;
        let offset = self.layout.frames_offset + u64::from(frames.start) * page;
        punch_hole(
            &self.file,
            offset,
            u64::from(frames.end - frames.start) * page,
        )
    }

    /// The mapping ids whose slots were ever written (their pages allocated: `register`
    /// reserves a slot's page before it writes it), by `SEEK_DATA` over the slots.
    pub fn registered_ids(&self) -> Vec<MappingId> {
        let start = self.layout.slots_offset;
        let end = start + u64::from(SLOT_COUNT) * SLOT_BYTES;
        self.data_ranges(start, end)
            .into_iter()
            .flat_map(|(from, to)| {
                let first = ((from - start) / SLOT_BYTES) as u32;
                let last = (to - start).div_ceil(SLOT_BYTES) as u32;
                first..last.min(SLOT_COUNT)
            })
            .map(MappingId)
            .filter(|&id| self.slot(id).is_some_and(|slot| slot.read().is_some()))
            .collect()
    }

    /// The ranges of `[start, end)` of the file that hold data (`SEEK_DATA`, `SEEK_HOLE`).
    fn data_ranges(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let fd = self.file.as_raw_fd();
        let mut ranges = Vec::new();
        let mut at = start;
        while at < end {
            // SAFETY: lseek on our open descriptor; results are checked.
            let data = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
            if data < 0 || data as u64 >= end {
                break;
            }
            // SAFETY: as above.
            let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
            let hole = if hole < 0 {
                end
            } else {
                (hole as u64).min(end)
            };
            ranges.push((data as u64, hole));
            at = hole;
        }
        ranges
    }

    /// The frames of `frames` whose memory is allocated in the file (`SEEK_DATA`): the rest
    /// is a hole (never touched, or given back).
    pub fn resident_frames(&self, frames: std::ops::Range<u32>) -> Vec<std::ops::Range<u32>> {
        let page = PAGE_BYTES as u64;
        let base = self.layout.frames_offset;
        let start = base + u64::from(frames.start) * page;
        let end = base + u64::from(frames.end) * page;
        self.data_ranges(start, end)
            .into_iter()
            .map(|(from, to)| {
                let first = ((from - base) / page) as u32;
                let last = ((to - base).div_ceil(page) as u32).min(frames.end);
                first..last
            })
            .collect()
    }

    /// Takes again the stamps of mappings `ids` (files the cache read and did not write)
    /// that were taken in their file's last change's clock tick (a file read just after it
    /// was made), where the file still looks as the stamp says: else a restart could not
    /// prove them unchanged. Its change while the cache held it is what a live cache
    /// does not see either (docs/persistence.md).
    ///
    /// Context: as `stamp_files`.
    pub fn confirm_stamps(&self, ids: impl IntoIterator<Item = MappingId>) {
        let mut unclear = Vec::new();
        for id in ids {
            let Some(record) = self.slot(id).and_then(|slot| slot.read()) else {
                continue;
            };
            let Some(stamp) = record.stamp.filter(|s| !s.is_clear_of_last_change()) else {
                continue;
            };
            let path = Path::new(OsStr::from_bytes(&record.path));
            let Ok(file) = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
                .open(path)
            else {
                continue;
            };
            match stamp_of(&file) {
                Ok((identity, now))
                    if identity == record.identity && now.same_file_state(&stamp) =>
                {
                    unclear.push((id, file))
                }
                _ => {}
            }
        }
        self.stamp_files(unclear.iter().map(|(id, file)| (*id, file)));
    }

    /// Byte ranges of the side table that were ever written (`SEEK_DATA`): the keeper reads
    /// only those, so that a 24 GiB segment's untouched table costs no memory to walk.
    /// Returned as frame ranges.
    pub fn written_meta_frames(&self) -> Vec<std::ops::Range<u32>> {
        let entry = std::mem::size_of::<FolioMeta>() as u64;
        let start = self.layout.meta_offset;
        let end = start + u64::from(self.layout.frame_count) * entry;
        self.data_ranges(start, end)
            .into_iter()
            .map(|(from, to)| {
                let first = ((from - start) / entry) as u32;
                let last = (to - start)
                    .div_ceil(entry)
                    .min(u64::from(self.layout.frame_count));
                first..last as u32
            })
            .collect()
    }

    pub fn set_state(&self, state: SegmentState) {
        self.header().set_state(state);
    }

    /// Records each file's stamp as it is now, after the cache's last writes to it (the
    /// end of a writeback): waits first until the clock has left the tick of the latest
    /// change time among them (`STAMP_TICK_NS`), so that a change by anyone after the
    /// stamp moves a time the stamp recorded. A file that is no longer its slot's (by
    /// identity) loses its stamp.
    ///
    /// Context: the segment's only writer now (an owner whose threads stopped, a keeper,
    /// a recovery). Sleeps at most `STAMP_TICK_NS`.
    pub fn stamp_files<'f>(&self, files: impl IntoIterator<Item = (MappingId, &'f StdFile)>) {
        let files: Vec<(MappingId, &StdFile)> = files.into_iter().collect();
        let latest_ctime_ns = files
            .iter()
            .filter_map(|(_, file)| file.metadata().ok())
            .map(|meta| meta.ctime().saturating_mul(1_000_000_000) + meta.ctime_nsec())
            .max()
            .unwrap_or(0);
        let wait_ns = latest_ctime_ns + STAMP_TICK_NS - now_ns();
        if wait_ns > 0 {
            std::thread::sleep(std::time::Duration::from_nanos(
                (wait_ns as u64).min(STAMP_TICK_NS as u64),
            ));
        }
        for (id, file) in files {
            let Some(slot) = self.slot(id) else { continue };
            let recorded = slot.read().map(|record| record.identity);
            match stamp_of(file) {
                Ok((identity, stamp)) if recorded == Some(identity) => slot.set_stamp(Some(&stamp)),
                _ => slot.set_stamp(None),
            }
        }
    }

    /// Removes the segment's file, if the path still names this segment (not a file put
    /// there since), through its directory checked again (`SegmentDir::of_segment`).
    pub fn remove(&self) -> io::Result<()> {
        let (dir, name) = SegmentDir::of_segment(&self.path)?;
        dir.unlink_if_same(&name, &self.file).map(|_| ())
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: exactly the reservation `map` made (which the file's mapping replaced
        // part of); no borrow of the mapping outlives the segment.
        unsafe {
            libc::munmap(self.map_ptr, self.map_bytes);
        }
    }
}

/// Opens the segment `name` in `dir` with `access` (`O_RDONLY` or `O_RDWR`; not following
/// a symlink, not blocking, closed on exec) and checks it is one of ours: a regular file of
/// this user, readable by no one else, long enough for a header. Returns it with its
/// metadata.
///
/// Errors: `PermissionDenied` for a symlink, a file that is not regular, a segment of
/// another user or one readable by others; `InvalidData` for one too short;
/// the open's error otherwise (`NotFound`).
fn open_ours(
    dir: &SegmentDir,
    name: &OsStr,
    access: libc::c_int,
) -> io::Result<(StdFile, std::fs::Metadata)> {
    let path = dir.join(name);
    let file = dir
        .open_file(name, access | libc::O_NONBLOCK, 0)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("folio: segment {} is a symlink", path.display()),
                )
            } else {
                e
            }
        })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("folio: segment {} is not a regular file", path.display()),
        ));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me || meta.permissions().mode() & 0o077 != 0 {
        return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "folio: segment {} belongs to uid {} with mode {:o}: only its owner's, mode 0600, is used",
                    path.display(),
                    meta.uid(),
                    meta.permissions().mode() & 0o777
                ),
            ));
    }
    if meta.len() < HEADER_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "folio: segment {} is too short for a header",
                path.display()
            ),
        ));
    }
    Ok((file, meta))
}

/// Calls `read` with a copy of `file`'s header, read with `pread` (never mapping a file
/// whose size is not checked yet).
///
/// Errors: the read's (`UnexpectedEof` for a file shorter than a header).
fn with_header<R>(file: &StdFile, read: impl FnOnce(&Header) -> R) -> io::Result<R> {
    use std::os::unix::fs::FileExt;
    let mut bytes = vec![0u64; std::mem::size_of::<Header>().div_ceil(8)];
    // SAFETY: a u64 buffer viewed as bytes; every byte pattern is a valid u8.
    let view =
        unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<u8>(), bytes.len() * 8) };
    file.read_exact_at(view, 0)?;
    // SAFETY: `Header` is repr(C) of atomic integers, valid for any bytes; `bytes` is
    // aligned for u64 and at least as long as a Header.
    let header = unsafe { &*bytes.as_ptr().cast::<Header>() };
    Ok(read(header))
}

/// How a segment is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protection {
    ReadWrite,
    /// A view from outside (`open_view`).
    ReadOnly,
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what)
}

/// Creates the segment file `name` in `dir`: `O_EXCL | O_NOFOLLOW`, mode 0600.
fn create_file(dir: &SegmentDir, name: &OsStr) -> io::Result<StdFile> {
    let file = dir.open_file(name, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o600)?;
    // The umask can only take bits away; make sure no one else has any.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(file)
}

/// A new segment named after this user and process, with a counter that skips names
/// left by a dead process of the same pid.
fn create_fresh(dir: &SegmentDir) -> io::Result<(StdFile, OsString)> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let pid = std::process::id();
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = OsString::from(format!("folio-{uid}-{pid}-{n}"));
        match create_file(dir, &name) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1 << 20 => continue,
            other => return other.map(|file| (file, name)),
        }
    }
}

/// Who holds a segment (module docs, exclusion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// Its owner lives.
    Owner,
    /// The owner is dead and its keeper still runs (writing back).
    Keeper,
    /// Nobody: a keeper was killed before it was done, or the segment was left written.
    Nobody,
    /// The keeper of an owner that left it written (a clean exit), staying as the kept
    /// segment's steward: it gives the segment's clean pages back under memory pressure
    /// and leaves as soon as a new owner adopts it (`keeper::kept`). It holds the segment's
    /// `flock` only while it punches pages out, so an adoption waits at most that long.
    Steward,
}

/// The byte of a segment's file on which its steward holds a record lock (`F_OFD_SETLK`,
/// read): past any segment's end, so that the owner's probe (`holder_of`) covers only
/// `[0, STEWARD_LOCK_OFFSET)` and tells the two apart.
pub(crate) const STEWARD_LOCK_OFFSET: i64 = 1 << 62;

/// The folio segments of this user in `dir` and who holds each: regular files (not
/// symlinks) owned by this user whose header starts with the segment's magic, read
/// through the directory checked (`SegmentDir::open`, any file system).
///
/// Errors: `SegmentDir::open`'s (a directory of another user, one others can write, a
/// symlink in its path: `PermissionDenied`); reading the directory's.
pub fn segments_in(dir: &Path) -> io::Result<Vec<(PathBuf, Holder)>> {
    let dir = SegmentDir::open(dir, DiskDir::Allowed)?;
    let me = my_uid();
    let mut found = Vec::new();
    for name in dir.names()? {
        let Ok(st) = dir.stat(&name) else {
            continue;
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG
            || st.st_uid != me
            || (st.st_size as u64) < HEADER_BYTES
        {
            continue;
        }
        let Ok(file) = dir.open_file(&name, libc::O_RDONLY | libc::O_NONBLOCK, 0) else {
            continue;
        };
        let mut magic = [0u8; 8];
        use std::os::unix::fs::FileExt;
        if file.read_exact_at(&mut magic, 0).is_err() || &magic != b"FOLIOSEG" {
            continue;
        }
        found.push((dir.join(&name), holder_of(&file)));
    }
    Ok(found)
}

/// Who holds the segment open as `file` (module docs, exclusion).
pub fn holder_of(file: &StdFile) -> Holder {
    // SAFETY: all-zero is a valid flock (l_pid 0, as OFD locks want); F_OFD_GETLK fills it.
    if record_locked(file, 0, STEWARD_LOCK_OFFSET) {
        return Holder::Owner;
    }
    if record_locked(file, STEWARD_LOCK_OFFSET, 1) {
        return Holder::Steward;
    }
    // SAFETY: flock on our own descriptor; a shared lock taken is dropped at once.
    unsafe {
        if libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) == 0 {
            libc::flock(file.as_raw_fd(), libc::LOCK_UN);
            Holder::Nobody
        } else {
            Holder::Keeper
        }
    }
}

/// Whether another open file holds a record lock (`F_OFD_GETLK`) on `[start, start + len)`
/// of the segment open as `file`.
pub(crate) fn record_locked(file: &StdFile, start: i64, len: i64) -> bool {
    // SAFETY: all-zero is a valid flock (l_pid 0, as OFD locks want); F_OFD_GETLK fills it.
    let mut probe: libc::flock = unsafe { std::mem::zeroed() };
    probe.l_type = libc::F_WRLCK as libc::c_short;
    probe.l_whence = libc::SEEK_SET as libc::c_short;
    probe.l_start = start as libc::off_t;
    probe.l_len = len as libc::off_t;
    // SAFETY: fcntl F_OFD_GETLK with a valid flock on our descriptor.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut probe) };
    rc == 0 && probe.l_type != libc::F_UNLCK as libc::c_short
}

/// The owner's record lock over the whole segment, on a second open file of it (module
/// docs, exclusion).
fn lock_owner(dir: &SegmentDir, name: &OsStr, file: &StdFile) -> io::Result<StdFile> {
    let second = dir.open_file(name, libc::O_RDONLY, 0)?;
    let (a, b) = (second.metadata()?, file.metadata()?);
    if (a.dev(), a.ino()) != (b.dev(), b.ino()) {
        return Err(io::Error::other(
            "folio: the segment was replaced as it was created",
        ));
    }
    // SAFETY: all-zero is a valid flock (the whole file from offset 0, l_pid 0).
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_RDLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: fcntl F_OFD_SETLK with a valid flock on our descriptor.
    if unsafe { libc::fcntl(second.as_raw_fd(), libc::F_OFD_SETLK, &lock) } == 0 {
        Ok(second)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `lock_exclusive` of the segment at `path`, saying so if its owner or keeper holds it.
///
/// Errors: `WouldBlock` while an owner or a keeper holds it; `flock`'s otherwise.
fn lock_unused(file: &StdFile, path: &Path) -> io::Result<()> {
    lock_exclusive(file).map_err(|e| {
        if e.kind() == io::ErrorKind::WouldBlock {
            io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "folio: segment {} is in use by its owner or keeper",
                    path.display()
                ),
            )
        } else {
            e
        }
    })
}

/// Frees the file's memory in `[offset, offset + len)` (it reads as zeros after).
fn punch_hole(file: &StdFile, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: fallocate on our open descriptor; the result is checked.
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset as libc::off_t,
            len as libc::off_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub fn lock_exclusive(file: &StdFile) -> io::Result<()> {
    // SAFETY: flock on our open descriptor.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The machine's memory in frames: a new segment's side table has room for as many, so
/// that a restart can grow it to any capacity the machine can hold.
fn machine_frames() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let frames = (pages.max(0) as u64 * page.max(0) as u64) / PAGE_BYTES as u64;
    frames.min(u64::from(layout::META_FRAMES_MAX)) as u32
}

/// The whole size of the file system `file` is on (`fstatvfs`); `u64::MAX` where it
/// reports none (a tmpfs without a size limit) or cannot say.
fn file_system_bytes(file: &StdFile) -> u64 {
    // SAFETY: all-zero is a valid statvfs; it is filled by the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: our open descriptor and an out-pointer to a live statvfs.
    if unsafe { libc::fstatvfs(file.as_raw_fd(), &mut st) } != 0 || st.f_blocks == 0 {
        return u64::MAX;
    }
    (st.f_blocks as u64).saturating_mul(st.f_frsize as u64)
}

/// This process's effective user: the only one whose segments it uses.
pub fn my_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// The bytes `dir`'s file system has free for a segment (`statvfs`).
pub fn room_bytes(dir: &Path) -> io::Result<u64> {
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| invalid("folio: segment directory has a NUL byte".into()))?;
    // SAFETY: all-zero is a valid statvfs; it is filled by the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and an out-pointer to a live statvfs.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// The identity and stamp of the open `file` now (`fstat`, and the file system's
/// generation where it keeps one).
///
/// Errors: `fstat`'s.
pub fn stamp_of(file: &StdFile) -> io::Result<(FileIdentity, FileStamp)> {
    let meta = file.metadata()?;
    Ok((identity_of(&meta), stamp_from(&meta, generation_of(file))))
}

/// The stamp `meta` (and a generation read from the file) describe, taken now.
pub fn stamp_from(meta: &std::fs::Metadata, generation: u64) -> FileStamp {
    let ns = |sec: i64, nsec: i64| sec.saturating_mul(1_000_000_000).saturating_add(nsec);
    FileStamp {
        size_bytes: meta.len(),
        mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
        ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        generation,
        taken_ns: now_ns(),
    }
}

/// The real-time clock in ns (the clock file times come from).
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// The inode's generation (`FS_IOC_GETVERSION`: ext4, xfs, btrfs keep one; 0 elsewhere):
/// an inode number reused by a new file gets a new one.
pub fn generation_of(file: &StdFile) -> u64 {
    // _IOR('v', 1, long)
    const FS_IOC_GETVERSION: libc::c_ulong = 0x8008_7601;
    let mut generation: libc::c_long = 0;
    // SAFETY: the ioctl writes one long into `generation`, which lives across the call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_GETVERSION, &mut generation) };
    if rc == 0 {
        generation as u64
    } else {
        0
    }
}

/// What `FileIdentity` a file has: device, inode, and birth time (or change time).
pub fn identity_of(meta: &std::fs::Metadata) -> FileIdentity {
    let born_ns = meta
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or_else(
            || (meta.ctime() as u64).wrapping_mul(1_000_000_000) + meta.ctime_nsec() as u64,
            |d| d.as_nanos() as u64,
        );
    FileIdentity {
        dev: meta.dev(),
        ino: meta.ino(),
        born_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_is_created_private_mapped_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let seg = Segment::create(dir.path(), Some("s"), 1024).unwrap();
        let meta = std::fs::metadata(seg.path()).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(seg.frames().as_ptr() as usize % ALIGN_BYTES, 0);
        assert_eq!(seg.header().state(), Some(SegmentState::Live));
        assert!(
            Segment::open_orphan(seg.path()).unwrap_err().kind() == io::ErrorKind::WouldBlock,
            "a segment in use is refused"
        );
        assert_eq!(
            Segment::create(dir.path(), Some("s"), 8)
                .unwrap_err()
                .kind(),
            io::ErrorKind::AlreadyExists
        );
        let path = seg.path().to_path_buf();
        drop(seg);
        let again = Segment::open_orphan(&path).unwrap();
        assert_eq!(again.layout().frame_count, 1024);
        again.remove().unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn names_that_leave_the_directory_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["", ".", "..", "../x", "a/b", "x\0y", "a\nb", "-x"] {
            let e = Segment::create(dir.path(), Some(name), 8).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{name:?}");
        }
    }
}
