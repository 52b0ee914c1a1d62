//! Whether a file is, now, what the segment's slot says the cache last knew: the change
//! rules of a restart (docs/persistence.md, "What a restart keeps").
//!
//! A file's pages are kept only if all of these hold:
//! - its slot reads whole (not torn by a kill mid-update), with a stamp and a path;
//! - the path leads to the same file: device, inode and birth time (or change time where
//!   the file system keeps no birth time) — a file replaced by `rename`, deleted, or whose
//!   inode number a new file reused, fails here — and the same generation where the file
//!   system keeps one;
//! - its size, modification time and change time (ns) are the stamp's: a write by another
//!   program, a truncation or an extension moves the size or the times, and a restored
//!   backup that puts the old modification time back still moves the change time, which
//!   no program can set;
//! - the stamp was taken clear of the last change's clock tick (`layout::STAMP_TICK_NS`; 2
//!   s, `STAMP_COARSE_NS`, where the times have no sub-second part): otherwise a change in
//!   that same tick could leave the times as they were;
//! - folio's own logical size, if it wrote the file, is the size on disk;
//! - every folio lies in the file (its first page before the end).
//!
//! Limits: a file system whose times do not move on a change (some network file
//! systems, a file written through a device behind the file system's back) cannot be
//! checked this way; its files should not be cached by a persistent cache whose segment
//! is named. A change that restores size and both times exactly (an inode's times set by
//! a privileged program: `ctime` can only be set through the system clock) is not seen.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::Found;
use crate::folio::MappingId;
use crate::mapping::FileStamp as MappingStamp;
use crate::segment::layout::SIZE_UNKNOWN;
use crate::segment::{self, Segment};
use crate::types::PAGE_BYTES;

/// A file proven unchanged: its inode (the mapping table's key) and the mapping's stamp.
pub struct Unchanged {
    pub inode: (u64, u64),
    pub stamp: MappingStamp,
}

/// Checks mapping `id`'s file against its slot (module docs); `folios` are the folios
/// found for it. `None`: its pages are dropped.
pub fn check(segment: &Segment, id: MappingId, folios: &[Found]) -> Option<Unchanged> {
    let record = segment.slot(id)?.read()?;
    let recorded = record.stamp?;
    if record.path.is_empty() {
        return None;
    }
    if !recorded.is_clear_of_last_change() {
        return None;
    }
    if record.size_bytes != SIZE_UNKNOWN && record.size_bytes != recorded.size_bytes {
        return None;
    }
    let path = Path::new(std::ffi::OsStr::from_bytes(&record.path));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || segment::identity_of(&meta) != record.identity {
        return None;
    }
    let now = segment::stamp_from(&meta, segment::generation_of(&file));
    let same = now.same_file_state(&recorded);
    let inside = folios
        .iter()
        .all(|f| f.head.0.saturating_mul(PAGE_BYTES as u64) < now.size_bytes);
    (same && inside).then(|| Unchanged {
        inode: (meta.dev(), meta.ino()),
        stamp: MappingStamp::of(&meta),
    })
}
