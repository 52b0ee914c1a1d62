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
//! - every folio lies in the file (its first page before the end);
//! - the pages it samples read as the disk's bytes (`SAMPLE_PAGES`: every page of a file
//!   of that many or fewer, else its first, its last and a few drawn at random): a side
//!   table whose entries were moved to another file's slot (damage, or a crude forgery)
//!   is caught here. Not a proof against a forger: a segment's own user can write any
//!   byte of it, and can make its own next cache serve wrong bytes of a file it adopts
//!   (docs/persistence.md, the trust model: only that user's processes read them).
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
use crate::folio_meta::MappingId;
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
    debug_assert!(folios.iter().all(|f| f.mapping == id), "one file's folios");
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
    if !(same && inside && samples_match(segment, &file, now.size_bytes, folios)) {
        return None;
    }
    Some(Unchanged {
        inode: (meta.dev(), meta.ino()),
        stamp: MappingStamp::of(&meta),
    })
}

/// Pages of a file compared with the disk at adoption (module docs).
pub const SAMPLE_PAGES: u64 = 4;

/// Whether the sampled pages of `folios` (module docs) hold `file`'s bytes, of a file of
/// `size_bytes`: each page's bytes before the end of the file.
fn samples_match(
    segment: &Segment,
    file: &std::fs::File,
    size_bytes: u64,
    folios: &[Found],
) -> bool {
    use std::os::unix::fs::FileExt;
    let total: u64 = folios.iter().map(|f| f.order.pages()).sum();
    // The page `n` of the file's folios, in file order: (frame, page index).
    let mut sorted: Vec<&Found> = folios.iter().collect();
    sorted.sort_by_key(|f| f.head);
    let nth = |mut n: u64| {
        for f in &sorted {
            if n < f.order.pages() {
                return (f.frame.0 + n as u32, f.head.0 + n);
            }
            n -= f.order.pages();
        }
        unreachable!("n is below the pages' count")
    };
    let picks: Vec<u64> = if total <= SAMPLE_PAGES {
        (0..total).collect()
    } else {
        let mut seed = segment::now_ns() as u64 | 1;
        let mut draw = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % total
        };
        let mut picks = vec![0, total - 1];
        picks.extend((2..SAMPLE_PAGES).map(|_| draw()));
        picks
    };
    let mut disk = vec![0u8; PAGE_BYTES];
    let mut cached = vec![0u8; PAGE_BYTES];
    picks.into_iter().all(|n| {
        let (frame, page) = nth(n);
        let offset = page.saturating_mul(PAGE_BYTES as u64);
        let len = size_bytes.saturating_sub(offset).min(PAGE_BYTES as u64) as usize;
        if len == 0 || file.read_exact_at(&mut disk[..len], offset).is_err() {
            return len == 0;
        }
        segment.copy_frame(frame, &mut cached[..len]) && cached[..len] == disk[..len]
    })
}
