//! A segment's space: the file's memory reserved (`fallocate`) before a page of it is
//! touched, given back (`MADV_REMOVE`, a punched hole), mapped in ahead of first touch,
//! and found (`SEEK_DATA`: which frames, side-table entries and slots hold memory).
//!
//! Why reserve first: on a shared-memory file system a store to a page the file system has
//! no room for kills the process (SIGBUS); a failed `fallocate` is only an answer.
//!
//! Protection: every range given to the kernel here is computed from the segment's
//! `Layout` (checked at its opening) and a frame range the caller owns; each is asserted to
//! lie within the file before the call.

use std::fs::File as StdFile;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use super::layout::{SLOT_BYTES, SLOT_COUNT};
use super::{invalid, Segment};
use crate::folio_meta::{FolioMeta, MappingId};
use crate::types::PAGE_BYTES;

impl Segment {
    /// Allocates the file's memory under frames `frames` before anything touches it: on a
    /// shared-memory file system a store to a page it has no room for kills the process
    /// (SIGBUS), a failed `fallocate` is only an answer. False when the file system is
    /// short of room. For a block taken again after it was given back (its side-table
    /// entries stayed).
    pub fn reserve_frames(&self, frames: std::ops::Range<u32>) -> bool {
        self.assert_frames(&frames);
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
        // The entries lie in the side table, before the frames.
        assert!(offset + count * entry <= self.layout.frames_offset);
        self.reserve_frames(frames) && self.allocate(offset, count * entry).is_ok()
    }

    /// Allocates the file's memory in `[offset, offset + len)` (`fallocate`), retried when
    /// interrupted.
    ///
    /// Context: the range lies within the file (a part of its `Layout`): `fallocate` would
    /// otherwise grow the file past the size its header records.
    pub(super) fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        assert!(len > 0 && offset + len <= self.layout.total_bytes);
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
        self.assert_frames(&(first..first + count));
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
        self.assert_frames(&frames);
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
        self.assert_frames(&frames);
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
            // lseek's contract: data at or after `at`, the hole at or after the data.
            debug_assert!(at <= data as u64 && data as u64 <= hole && hole <= end);
            ranges.push((data as u64, hole));
            at = hole;
        }
        ranges
    }

    /// The frames of `frames` whose memory is allocated in the file (`SEEK_DATA`): the rest
    /// is a hole (never touched, or given back).
    pub fn resident_frames(&self, frames: std::ops::Range<u32>) -> Vec<std::ops::Range<u32>> {
        self.assert_frames(&frames);
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

    /// Byte ranges of the side table that were ever written (`SEEK_DATA`): the keeper reads
    /// only those, so that a 24 GiB segment's untouched table costs no memory to walk.
    /// Returned as frame ranges.
    pub fn written_meta_frames(&self) -> Vec<std::ops::Range<u32>> {
        let entry = std::mem::size_of::<FolioMeta>() as u64;
        let start = self.layout.meta_offset;
        let end = start + u64::from(self.layout.frame_count) * entry;
        let written: Vec<std::ops::Range<u32>> = self
            .data_ranges(start, end)
            .into_iter()
            .map(|(from, to)| {
                let first = ((from - start) / entry) as u32;
                let last = (to - start)
                    .div_ceil(entry)
                    .min(u64::from(self.layout.frame_count));
                first..last as u32
            })
            .collect();
        // The keeper and a recovery walk these: never a frame past the segment's.
        debug_assert!(written
            .iter()
            .all(|r| r.start <= r.end && r.end <= self.layout.frame_count));
        written
    }

    /// Asserts that `frames` is a range of the segment's frames: every range this room
    /// hands the kernel is one (a frame range the arena or an adoption owns).
    fn assert_frames(&self, frames: &std::ops::Range<u32>) {
        assert!(
            frames.start <= frames.end && frames.end <= self.layout.frame_count,
            "frames {frames:?} of a segment of {}",
            self.layout.frame_count
        );
    }
}

/// Frees the file's memory in `[offset, offset + len)` (it reads as zeros after).
pub(super) fn punch_hole(file: &StdFile, offset: u64, len: u64) -> io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame range past the segment's is a bug of the caller's: asserted before the
    /// kernel sees it (an `fallocate` there grew the file past the size its header
    /// records, and the segment could not be opened again).
    #[test]
    #[should_panic(expected = "frames 0..9 of a segment of 8")]
    fn a_range_past_the_frames_is_asserted_before_the_kernel_sees_it() {
        let dir = tempfile::tempdir().unwrap();
        let segment = Segment::create(dir.path(), Some("past"), 8).unwrap();
        segment.reserve_frames(0..9);
    }

    /// What the arena reserves, gives back and finds stays within the segment's frames.
    #[test]
    fn frames_reserved_are_found_resident_and_given_back() {
        // On tmpfs, a segment's home. A page reserved but never written reads as a hole to
        // `SEEK_DATA` (tmpfs and ext4 alike): resident means touched.
        let dir = tempfile::tempdir_in(super::super::home::SHARED_DIR).unwrap();
        let segment = Segment::create(dir.path(), Some("space"), 1024).unwrap();
        assert!(segment.reserve_chunk(0..512));
        assert!(segment.resident_frames(0..1024).is_empty());
        segment.write_frame_for_test(1, b"x");
        segment.write_frame_for_test(2, b"y");
        assert_eq!(segment.resident_frames(0..1024), vec![1..3]);
        assert_eq!(segment.resident_frames(2..1024), vec![2..3]);
        segment.punch_frames(0..512).unwrap();
        assert!(segment.resident_frames(0..1024).is_empty());
        assert!(segment.written_meta_frames().iter().all(|r| r.end <= 1024));
    }
}
