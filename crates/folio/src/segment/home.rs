//! Where segments live (DESIGN.md §9, docs/persistence.md "Where segments live"): a
//! directory checked each time it is used, held as an open descriptor while it is used,
//! and every segment file in it created, opened and removed relative to that descriptor
//! (`openat`, `unlinkat`), never by resolving its path again.
//!
//! The default home is `/dev/shm/folio-<euid>` (`SegmentDir::home`), made mode 0700 by
//! the first cache of that user: no other user can list, pre-empt, rename or remove a
//! segment in it. `$XDG_RUNTIME_DIR` is not used: logind caps it at 10% of the memory
//! (which would bound a persistent cache's capacity) and a service and a login shell of
//! the same user see different ones (the same database would not find its segment).
//!
//! Protection: a directory is used only if every component of its path is a real
//! directory (no symlink anywhere: each is opened `O_NOFOLLOW` from the one before), it is
//! owned by this process's effective user, no group or other user can write it (reading
//! and searching are allowed: a segment is mode 0600 itself), and it is on tmpfs unless the
//! caller allowed a disk file system (`DiskDir::Allowed`). Names are one plain portable
//! file name (`check_name`).
//!
//! Limits: the checks hold for the moment of the open; what this process does afterwards
//! goes through the descriptor, so a directory renamed or replaced later is not followed.
//! A directory of ours that we made writable by others ourselves is refused, not fixed.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File as StdFile;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// The file system that holds the default home (`SegmentDir::home`).
pub const SHARED_DIR: &str = "/dev/shm";

/// The longest segment name (NAME_MAX).
const NAME_MAX: usize = 255;

/// Whether a segment directory may be on a disk file system (not tmpfs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DiskDir {
    /// Refused (the default): a segment is the cache's memory, and on a disk file system
    /// the kernel writes that memory to the device.
    #[default]
    Refused,
    /// Allowed: the caller accepts that the cache's file bytes are written to the device
    /// (as dirty page cache of the segment file).
    Allowed,
}

/// A checked segment directory, open (module docs).
#[derive(Debug)]
pub struct SegmentDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// The default home's path for this user: `/dev/shm/folio-<euid>`.
pub fn home_path() -> PathBuf {
    Path::new(SHARED_DIR).join(home_name())
}

fn home_name() -> String {
    format!("folio-{}", super::my_uid())
}

impl SegmentDir {
    /// Opens and checks the directory `path` (module docs, protection).
    ///
    /// Errors: `PermissionDenied` for a symlink in the path, a directory of another user or
    /// one that others can write; `Unsupported` for a disk file system under
    /// `DiskDir::Refused`; `NotADirectory`, `NotFound` and the open's other errors.
    pub fn open(path: &Path, disk: DiskDir) -> io::Result<SegmentDir> {
        let fd = open_no_symlinks(path)?;
        let dir = SegmentDir {
            fd,
            path: path.to_path_buf(),
        };
        dir.check(disk)?;
        Ok(dir)
    }

    /// The default home, `/dev/shm/folio-<euid>` (module docs), made mode 0700 if it does
    /// not exist, then checked as `open` checks a directory (tmpfs required).
    ///
    /// Errors: `open`'s; `PermissionDenied` says when another user made the directory
    /// first.
    pub fn home() -> io::Result<SegmentDir> {
        let parent = open_no_symlinks(Path::new(SHARED_DIR))?;
        let name = CString::new(home_name()).expect("no NUL in a uid");
        // SAFETY: mkdirat on our descriptor with a NUL-terminated name; the result is
        // checked (EEXIST: made before, checked below like any other).
        if unsafe { libc::mkdirat(parent.as_raw_fd(), name.as_ptr(), 0o700) } != 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::AlreadyExists {
                return Err(io::Error::new(
                    e.kind(),
                    format!(
                        "folio: cannot make the segment home {}: {e}",
                        home_path().display()
                    ),
                ));
            }
        }
        let fd = open_at(&parent, &name, libc::O_RDONLY, &home_path())?;
        let dir = SegmentDir {
            fd,
            path: home_path(),
        };
        dir.check(DiskDir::Refused).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{e} (the default segment home: another user may have made it first)"),
            )
        })?;
        Ok(dir)
    }

    /// The directory of the segment at `path` and its file name, checked (`open`, any file
    /// system: the file system was checked when the segment was made) and the name too
    /// (`check_name`): for a segment named by path (a recovery, a view, a removal).
    ///
    /// Errors: `open`'s; `InvalidInput` for a path with no file name or one that is not
    /// a plain name.
    pub fn of_segment(path: &Path) -> io::Result<(SegmentDir, OsString)> {
        let name = path.file_name().ok_or_else(|| {
            super::invalid(format!(
                "folio: segment path {} names no file",
                path.display()
            ))
        })?;
        check_name_bytes(name.as_bytes())?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Ok((SegmentDir::open(parent, DiskDir::Allowed)?, name.to_owned()))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of the file `name` in this directory (for messages and for the slots that
    /// record where a segment is).
    pub fn join(&self, name: &OsStr) -> PathBuf {
        self.path.join(name)
    }

    /// Opens the file `name` here with `flags` (`O_NOFOLLOW | O_CLOEXEC` added), creating
    /// it with `mode` under `O_CREAT`.
    ///
    /// Errors: the open's (`ELOOP` for a symlink, `NotFound`, `AlreadyExists`).
    pub fn open_file(&self, name: &OsStr, flags: libc::c_int, mode: u32) -> io::Result<StdFile> {
        let c_name = c_name(name)?;
        // SAFETY: openat on our descriptor with a NUL-terminated name; the result is
        // checked and owned below.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c_name.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor openat just returned, owned by nobody else.
        Ok(unsafe { StdFile::from_raw_fd(fd) })
    }

    /// `lstat` of `name` here (`fstatat` with `AT_SYMLINK_NOFOLLOW`).
    pub fn stat(&self, name: &OsStr) -> io::Result<libc::stat> {
        let c_name = c_name(name)?;
        // SAFETY: all-zero is a valid stat; it is filled by the call.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstatat on our descriptor, a NUL-terminated name, a live out-pointer.
        let rc = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c_name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc == 0 {
            Ok(st)
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Removes `name` here if it is still the file `file` is (device and inode): never a
    /// file put in its place since. Returns whether it removed it (false if it is gone).
    pub fn unlink_if_same(&self, name: &OsStr, file: &StdFile) -> io::Result<bool> {
        use std::os::unix::fs::MetadataExt;
        let mine = file.metadata()?;
        self.unlink_if_id(name, (mine.dev(), mine.ino()))
    }

    /// `unlink_if_same` for the file of device and inode `id`.
    pub fn unlink_if_id(&self, name: &OsStr, id: (u64, u64)) -> io::Result<bool> {
        let there = match self.stat(name) {
            Ok(st) => st,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        if (there.st_dev, there.st_ino) != id {
            return Ok(false);
        }
        self.unlink(name)?;
        Ok(true)
    }

    /// Removes `name` here (`unlinkat`). Ok if it is gone.
    pub fn unlink(&self, name: &OsStr) -> io::Result<()> {
        let c_name = c_name(name)?;
        // SAFETY: unlinkat on our descriptor with a NUL-terminated name.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c_name.as_ptr(), 0) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::NotFound {
            Ok(())
        } else {
            Err(e)
        }
    }

    /// The names in this directory (no `.` or `..`), read through the descriptor.
    ///
    /// Errors: reading the directory's.
    pub fn names(&self) -> io::Result<Vec<OsString>> {
        // SAFETY: dup of our descriptor; fdopendir takes the copy (closedir closes it).
        let copy = unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if copy < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor of ours, a directory opened for reading.
        let stream = unsafe { libc::fdopendir(copy) };
        if stream.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: the copy was not taken by fdopendir.
            unsafe { libc::close(copy) };
            return Err(e);
        }
        // SAFETY: rewinds the stream fdopendir made (the copy shares the offset).
        unsafe { libc::rewinddir(stream) };
        let mut names = Vec::new();
        loop {
            // SAFETY: readdir on a live stream; its entry is read before the next call.
            let entry = unsafe { libc::readdir(stream) };
            if entry.is_null() {
                break;
            }
            // SAFETY: d_name is NUL-terminated inside the entry readdir returned.
            let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) };
            let bytes = name.to_bytes();
            if bytes != b"." && bytes != b".." {
                names.push(OsString::from_vec(bytes.to_vec()));
            }
        }
        // SAFETY: closes the stream (and the copy) once.
        unsafe { libc::closedir(stream) };
        Ok(names)
    }

    /// The file system's free bytes for a segment here (`fstatvfs`).
    pub fn room_bytes(&self) -> io::Result<u64> {
        // SAFETY: all-zero is a valid statvfs; it is filled by the call.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: fstatvfs on our descriptor, a live out-pointer.
        if unsafe { libc::fstatvfs(self.fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st.f_bavail as u64 * st.f_frsize as u64)
    }

    /// The checks of the module docs on the open descriptor.
    fn check(&self, disk: DiskDir) -> io::Result<()> {
        let shown = self.path.display();
        // SAFETY: all-zero is a valid stat; it is filled by the call.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on our descriptor, a live out-pointer.
        if unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("folio: segment directory {shown} is not a directory"),
            ));
        }
        let me = super::my_uid();
        if st.st_uid != me {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "folio: segment directory {shown} belongs to uid {}, not to this user \
                     (uid {me}): only a directory of one's own is used",
                    st.st_uid
                ),
            ));
        }
        if st.st_mode & 0o022 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "folio: segment directory {shown} has mode {:o}: others can write it \
                     (a segment directory must be writable by its owner only)",
                    st.st_mode & 0o7777
                ),
            ));
        }
        // SAFETY: all-zero is a valid statfs; it is filled by the call.
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: fstatfs on our descriptor, a live out-pointer.
        if unsafe { libc::fstatfs(self.fd.as_raw_fd(), &mut fs) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let in_memory = fs.f_type == libc::TMPFS_MAGIC;
        if !in_memory && disk == DiskDir::Refused {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "folio: segment directory {shown} is not on tmpfs (file system type \
                     {:#x}): the cache's memory would be written to the device; use a \
                     tmpfs directory, or allow a disk one explicitly (segment_dir_on_disk)",
                    fs.f_type
                ),
            ));
        }
        Ok(())
    }
}

/// Opens the directory `path` with no symlink anywhere in it: each component is opened
/// `O_NOFOLLOW | O_DIRECTORY` from the one before (`O_PATH` for all but the last, so that
/// a component one may only search is passed), from `/` or the working directory.
///
/// Errors: `PermissionDenied` naming the component that is a symlink; the open's
/// (`NotFound`, `NotADirectory`).
fn open_no_symlinks(path: &Path) -> io::Result<OwnedFd> {
    let start: &[u8] = if path.is_absolute() { b"/" } else { b"." };
    let start = CString::new(start).expect("no NUL");
    // SAFETY: open of a NUL-terminated path; the result is checked and owned below.
    let fd = unsafe {
        libc::open(
            start.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor open just returned, owned by nobody else.
    let mut dir = unsafe { OwnedFd::from_raw_fd(fd) };
    let parts: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            Component::ParentDir => Some(OsStr::new("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let mode = if last { libc::O_RDONLY } else { libc::O_PATH };
        dir = open_at(&dir, &c_name(part)?, mode, path)?;
    }
    if parts.is_empty() {
        // "/" or ".": opened for reading too.
        dir = open_at(&dir, c".", libc::O_RDONLY, path)?;
    }
    Ok(dir)
}

/// `openat(dir, name, mode | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)`, a symlink reported as
/// such (for `whole`, the path being opened).
fn open_at(
    dir: &OwnedFd,
    name: &std::ffi::CStr,
    mode: libc::c_int,
    whole: &Path,
) -> io::Result<OwnedFd> {
    // SAFETY: openat on a live descriptor with a NUL-terminated name; checked below.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            mode | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd >= 0 {
        // SAFETY: a descriptor openat just returned, owned by nobody else.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    let e = io::Error::last_os_error();
    let is_link = e.raw_os_error() == Some(libc::ELOOP)
        || (e.raw_os_error() == Some(libc::ENOTDIR) && {
            // SAFETY: all-zero is a valid stat; filled by the call.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: fstatat on a live descriptor, a NUL-terminated name.
            (unsafe {
                libc::fstatat(
                    dir.as_raw_fd(),
                    name.as_ptr(),
                    &mut st,
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            }) == 0
                && st.st_mode & libc::S_IFMT == libc::S_IFLNK
        });
    if is_link {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "folio: segment directory {}: {} is a symlink (no symlink is followed to a \
                 segment directory)",
                whole.display(),
                name.to_string_lossy()
            ),
        ));
    }
    Err(io::Error::new(
        e.kind(),
        format!(
            "folio: segment directory {} ({}): {e}",
            whole.display(),
            name.to_string_lossy()
        ),
    ))
}

fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| super::invalid(format!("folio: {name:?} has a NUL byte")))
}

/// A segment's name is one plain portable file name: not empty, not `.` or `..`, no `/`,
/// no control character (a newline, a NUL), no leading `-` (read as an option by tools),
/// at most NAME_MAX (255) bytes.
///
/// Errors: `InvalidInput` naming the rule broken.
pub fn check_name(name: &str) -> io::Result<()> {
    check_name_bytes(name.as_bytes())
}

fn check_name_bytes(name: &[u8]) -> io::Result<()> {
    let broken = if name.is_empty() {
        Some("it is empty")
    } else if name == b"." || name == b".." {
        Some("it is . or ..")
    } else if name.contains(&b'/') {
        Some("it has a '/'")
    } else if name.iter().any(|&b| b < 0x20 || b == 0x7f) {
        Some("it has a control character (a newline, a NUL)")
    } else if name[0] == b'-' {
        Some("it starts with '-'")
    } else if name.len() > NAME_MAX {
        Some("it is longer than 255 bytes")
    } else {
        None
    };
    match broken {
        None => Ok(()),
        Some(rule) => Err(super::invalid(format!(
            "folio: segment name {:?} is not one plain file name: {rule}",
            String::from_utf8_lossy(name)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn names_follow_the_rules() {
        for name in ["s", "folio-0-db-12ab", "a.b_c", "x-"] {
            check_name(name).unwrap();
        }
        let long = "a".repeat(256);
        for name in [
            "",
            ".",
            "..",
            "a/b",
            "a\nb",
            "a\0b",
            "-x",
            "\t",
            long.as_str(),
        ] {
            let e = check_name(name).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{name:?}");
        }
        check_name(&"a".repeat(255)).unwrap();
    }

    #[test]
    fn a_private_tmpfs_directory_is_used_and_others_are_not() {
        let base = tempfile::tempdir_in(SHARED_DIR).unwrap();
        let good = base.path().join("good");
        std::fs::create_dir(&good).unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o755)).unwrap();
        SegmentDir::open(&good, DiskDir::Refused).unwrap();
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        let e = SegmentDir::open(&link, DiskDir::Refused).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        std::fs::create_dir(good.join("sub")).unwrap();
        let e = SegmentDir::open(&link.join("sub"), DiskDir::Refused).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = SegmentDir::open(&good, DiskDir::Refused).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
    }
}
