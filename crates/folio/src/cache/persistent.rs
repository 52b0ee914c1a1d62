//! A persistent cache's segment at build: where it goes (`segment_home`, the directory
//! checked), how much capacity its file system's room holds (`segment_room_capacity_bytes`),
//! and the segment itself, adopted from a named one a restart finds (`adopt::take`) or
//! created (`CacheBuilder::create_segment`).
//!
//! Protection: the segment directory's checks (`SegmentDir`); a named segment is taken
//! under its lock (`adopt::take`), a new one created with `O_EXCL`.
//!
//! Limits: the capacity is bounded by the room the directory's file system has now (a
//! shared-memory file system's size is a limit of its own).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::CacheBuilder;
use crate::adopt::Plan;
use crate::capacity::CAPACITY_BYTES_MIN;
use crate::segment::{self, Segment, SegmentDir};
use crate::types::PAGE_BYTES;

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
    let per_frame = PAGE_BYTES as u64 + std::mem::size_of::<crate::folio_meta::FolioMeta>() as u64;
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
    pub(super) fn create_segment(
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
        // Post: the capacity fits the segment made for it.
        debug_assert!(*frames <= fits, "{} frames in a segment of {fits}", *frames);
        Ok((Arc::new(segment), None))
    }
}
