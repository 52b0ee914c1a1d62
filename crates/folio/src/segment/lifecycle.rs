//! A segment's life: created (`create`, `create_in`: 0600, `O_EXCL | O_NOFOLLOW`, in a
//! checked directory), adopted by a new owner (`adopt`), opened by a keeper, a recovery
//! (`open_orphan`, `from_open_file`) or a view (`open_view`), mapped, unmapped (`Drop`) and
//! removed (`remove`).
//!
//! Protection: a segment opened again is untrusted input (its user can write any byte of
//! it): `open_ours` checks the file (regular, this user's, mode 0600, long enough) and
//! `read_layout` its header (`Header::check`) before anything is mapped; whatever they
//! refuse is an error, never a panic. Only what this code computed itself (a layout
//! `Layout::for_frames` made, or one `Header::check` accepted) is asserted.
//!
//! Limits: a segment file truncated by its user under a mapping faults its readers
//! (SIGBUS); no folio process truncates one.

use std::ffi::{OsStr, OsString};
use std::fs::File as StdFile;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::io::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use super::holder::{lock_exclusive, lock_owner, lock_unused};
use super::home::{check_name, DiskDir, SegmentDir};
use super::layout::{self, Header, Layout, Retention, HEADER_BYTES, STATS_BYTES, STATS_OFFSET};
use super::space::punch_hole;
use super::{invalid, Segment, ALIGN_BYTES};
use crate::folio_meta::FolioMeta;
use crate::types::PAGE_BYTES;

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
        segment
            .set_owner_lock(owner_lock)
            .map_err(remove_on_error)?;
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
        // The side table keeps its room, so the frames kept stay where they were.
        assert_eq!(
            (layout.meta_offset, layout.frames_offset),
            (old.meta_offset, old.frames_offset)
        );
        if frame_count < old.frame_count {
            let entry = std::mem::size_of::<FolioMeta>() as u64;
            let from = layout.meta_offset + u64::from(frame_count) * entry;
            let to = layout.meta_offset + u64::from(old.frame_count) * entry;
            // Only the entries of the frames dropped: never a frame's bytes.
            assert!(from < to && to <= layout.frames_offset);
            punch_hole(&file, from, to - from)?;
        }
        if frame_count != old.frame_count {
            file.set_len(layout.total_bytes)?;
        }
        let mut segment = Self::map(path.to_path_buf(), file, layout)?;
        assert_eq!(segment.layout.frame_count, frame_count);
        segment.set_owner_lock(owner_lock)?;
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
        // The file's mapping lies inside the reservation, its frames on a 2 MiB boundary.
        assert!(aligned + file_bytes <= map_ptr as usize + map_bytes);
        assert_eq!((aligned + layout.frames_offset as usize) % ALIGN_BYTES, 0);
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
        // No forked child inherits the mapping, and none a descriptor (`segment::fork`; a
        // fork on another thread between the `mmap` above and this `madvise` is not
        // covered: its child keeps the mapping, module docs of `fork`).
        // SAFETY: madvise of the file's mapping just made; it changes no byte.
        let kept_from_forks = unsafe {
            libc::madvise(
                aligned as *mut libc::c_void,
                file_bytes,
                libc::MADV_DONTFORK,
            )
        };
        // A read-only view's descriptor too: a child that setuids later must not read
        // the segment (a root-only file's cached bytes) through it.
        let guards = super::fork::register(file.as_fd()).map(|g| vec![g]);
        let fork_guards = match (kept_from_forks, guards) {
            (0, Ok(guards)) => guards,
            (_, guards) => {
                let error = guards.err().unwrap_or_else(io::Error::last_os_error);
                // SAFETY: exactly the reservation made above.
                unsafe { libc::munmap(map_ptr, map_bytes) };
                return Err(error);
            }
        };
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
            fork_guards,
        })
    }

    /// Makes `lock` (the owner's second open file: module docs of `segment`, exclusion)
    /// this segment's, registered for forks (`fork`).
    ///
    /// Errors: `fork::register`'s.
    fn set_owner_lock(&mut self, lock: StdFile) -> io::Result<()> {
        assert!(self.owner_lock.is_none(), "one owner lock");
        self.fork_guards.push(super::fork::register(lock.as_fd())?);
        self.owner_lock = Some(lock);
        Ok(())
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
pub(super) fn open_ours(
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
pub(super) fn with_header<R>(file: &StdFile, read: impl FnOnce(&Header) -> R) -> io::Result<R> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::layout::SegmentState;

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
