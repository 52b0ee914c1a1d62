//! Who holds a segment, and the locks that say so (the exclusion of `segment`'s module
//! docs): the exclusive `flock` of the owner and its keeper (`lock_exclusive`,
//! `lock_unused`), the owner's record lock on a second open file (`lock_owner`), the
//! steward's record lock past the end (`STEWARD_LOCK_OFFSET`), and the probe that tells
//! them apart (`holder_of`).
//!
//! Protection: the kernel drops every one of these locks when its holder dies: a holder
//! is never told by a pid that may have been reused.

use std::ffi::OsStr;
use std::fs::File as StdFile;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use super::home::SegmentDir;

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
    // A length of 0 would mean "to the end of any file": the owner's probe would cover
    // the steward's byte.
    assert!(start >= 0 && len > 0);
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
pub(super) fn lock_owner(dir: &SegmentDir, name: &OsStr, file: &StdFile) -> io::Result<StdFile> {
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
pub(super) fn lock_unused(file: &StdFile, path: &Path) -> io::Result<()> {
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

pub fn lock_exclusive(file: &StdFile) -> io::Result<()> {
    // SAFETY: flock on our open descriptor.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
