//! The segment (DESIGN.md §9): a file in shared memory (`/dev/shm/folio-<uid>` by default) that holds
//! the arena's frames and side table and the cache's file slots, so that what a process
//! wrote outlives it. The keeper (`keeper`) writes a dead owner's dirty frames back from
//! it.
//!
//! Rooms: `home` (where segments live: the checked directory, held open, and the names);
//! `layout` (where each part lies, the header, a file slot); `lifecycle` (creating,
//! adopting, opening, checking, mapping and removing a segment file); `space` (the file's
//! memory reserved with `fallocate` before a page is touched, given back, found with
//! `SEEK_DATA`); `holder` (the `flock` and record locks, and who holds a segment:
//! `Holder`); `identity` (a file's identity and stamp, recorded in its slot); `discovery`
//! (the segments in a directory: `holders_in`, the public `segments_in`); `link` (the
//! owner's messages to its keeper: descriptors of the files it writes); `published` (the
//! owner's counters, published by name); `scan` (the side table read back as untrusted
//! input); `view` (a segment seen from outside, read-only: the public `SegmentView`,
//! `remove_segment`); this file (the `Segment` and its parts: header, slots, side table,
//! frames, stats area).
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
//! `flock` held) from "abandoned" (neither) (`holder::holder_of`). The kernel drops both
//! when their holders die: never a stale pid. A kept segment's steward (`keeper::kept`)
//! holds a record lock of its own at `STEWARD_LOCK_OFFSET`, past the owner's probe, and
//! the `flock` only while it punches pages out (`holder_of`: `Holder::Steward`).
//!
//! Forks: a child forked by the owner has neither the segment's mapping nor its
//! descriptors nor the keeper link (`fork`: `MADV_DONTFORK`, and `/dev/null` in their
//! place); only the keeper's fork keeps the descriptor.
//!
//! Invariants: the mapping is one shared mapping of the whole file, aligned so that the
//! frames are aligned to 2 MiB; it stays at one address until the segment is dropped.

mod discovery;
mod fork;
pub mod holder;
pub mod home;
mod identity;
pub mod layout;
mod lifecycle;
pub mod link;
pub mod published;
pub(crate) mod scan;
mod space;
pub mod view;

use std::fs::File as StdFile;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Mutex;

use crate::folio_meta::{FolioMeta, MappingId};
use crate::types::{ORDER_MAX, PAGE_BYTES};
pub use discovery::{holders_in, segments_in, SegmentInfo};
pub(crate) use fork::{keeper_fork, register as register_for_fork, Registered as ForkGuard};
pub(crate) use holder::STEWARD_LOCK_OFFSET;
pub use holder::{holder_of, lock_exclusive, Holder};
pub use home::{check_name, DiskDir, SegmentDir};
pub use identity::{generation_of, identity_of, my_uid, now_ns, stamp_from};
// The fuzz bodies take a data file's stamp as a slot records it.
#[cfg(any(fuzzing, test))]
pub use identity::stamp_of;
use layout::{
    FileIdentity, FileSlot, FileStamp, Header, Layout, SegmentState, SLOT_BYTES, SLOT_COUNT,
    STATS_OFFSET,
};
use published::{StatValue, StatsArea};
pub use space::room_bytes;

/// An `InvalidInput` error saying `what`.
fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what)
}

/// The alignment of a segment's mapping (the largest folio's bytes, 2 MiB), so that its
/// frames are aligned as an anonymous arena's are.
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
    /// The descriptors above (a view's too), registered so that a forked child gets
    /// `/dev/null` in their place (`fork`); last, so dropped after the files are closed.
    fork_guards: Vec<fork::Registered>,
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
    /// The stats area (`published`).
    pub fn stats_area(&self) -> &StatsArea {
        // SAFETY: the area lies inside the mapping at STATS_OFFSET (page aligned), is
        // STATS_BYTES long (StatsArea fits: asserted in `published`) and lives as long as
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
        assert!(
            self.owner_lock.is_some(),
            "only the owner publishes its counters"
        );
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let _one_publisher = self.stats_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.stats_area()
            .publish(entries, std::process::id(), unix_ms);
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
        debug_assert!(offset + SLOT_BYTES <= self.layout.meta_offset);
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

    pub fn set_state(&self, state: SegmentState) {
        self.header().set_state(state);
    }
}
