//! Opening a file through the cache: `OpenOptions` (std's, for folio: write, create,
//! truncate) and the open itself (`Cache::open_with`): the file opened with O_DIRECT, its
//! mapping found or made, its slot in a persistent cache's segment, the handle; a
//! read-only file of a cache with a domain also admitted to the domain (its reads go
//! there: `shared::reader`), or read privately if the domain refuses it or the caller
//! asks (`OpenOptions::private`).
//!
//! Protection: the mapping table's locks (`MappingTable::get_or_insert`); the segment's
//! slot under its sequence word (`Segment::register`).

use std::fs::File as StdFile;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Arc;

use super::Cache;
use crate::file::{Access, File, OpenMode};
use crate::mapping::FileStamp;
use crate::segment;

/// Whether `OpenOptions::open` may create the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Create {
    No,
    /// Create it if it does not exist.
    IfMissing,
    /// Create it; fail if it exists.
    New,
}

/// How `Cache::open_options` opens a file: read-only by default; `write(true)` for a
/// handle that writes (`File::write_at`, `set_len`, the syncs), `create(true)`,
/// `create_new(true)`, `truncate(true)` as `std::fs::OpenOptions`.
#[derive(Debug)]
pub struct OpenOptions<'c> {
    cache: &'c Cache,
    write: bool,
    create: Create,
    truncate: bool,
    private: bool,
}

// The setters take a bool, against STYLE.md's rule, on purpose: they mirror
// `std::fs::OpenOptions` (`.write(true).create(true)`) so that code moving from std to
// folio reads the same; each names one flag, so the bool is never a mode in disguise.
impl<'c> OpenOptions<'c> {
    /// Read-only, no create, no truncate: `std::fs::OpenOptions::new().read(true)`.
    pub(super) fn new(cache: &'c Cache) -> OpenOptions<'c> {
        OpenOptions {
            cache,
            write: false,
            create: Create::No,
            truncate: false,
            private: false,
        }
    }

    /// Open for writing too.
    pub fn write(&mut self, write: bool) -> &mut Self {
        self.write = write;
        self
    }

    /// Create the file if it does not exist (needs `write`).
    pub fn create(&mut self, create: bool) -> &mut Self {
        if create {
            self.create = Create::IfMissing;
        } else if self.create == Create::IfMissing {
            self.create = Create::No;
        }
        self
    }

    /// Create the file; fail with `AlreadyExists` if it exists (needs `write`).
    pub fn create_new(&mut self, create_new: bool) -> &mut Self {
        if create_new {
            self.create = Create::New;
        } else if self.create == Create::New {
            self.create = Create::No;
        }
        self
    }

    /// Cut the file to 0 bytes when opened (needs `write`).
    pub fn truncate(&mut self, truncate: bool) -> &mut Self {
        self.truncate = truncate;
        self
    }

    /// Keep the file out of the cache's domain (a cache without one: no change).
    /// A read-only handle reads the cache's own pages, never the domain's: for a file
    /// whose pages the cache holds already, clean: one this process wrote and keeps cached
    /// (cache on write: a storage engine reading back the table it just flushed), or one
    /// a persistent cache adopted, where the domain would read it again from the disk
    /// into a second copy. A writable handle's writes are not put into the domain (each
    /// written page's copy there costs the write a few microseconds): the domain's record
    /// of the file is retired instead, so another process reads the disk, which has the
    /// writes once they are written back or synced. For a file nobody reads while it is
    /// written, such as a storage engine's table, synced before any reader learns of it
    /// (docs/sharing.md, "Writes seen across processes").
    pub fn private(&mut self, private: bool) -> &mut Self {
        self.private = private;
        self
    }

    /// Opens `path` as these options say (`Cache::open`'s doc for the rest).
    ///
    /// Errors: `InvalidInput` for `create`, `create_new` or `truncate` without `write`; as
    /// `Cache::open` otherwise.
    ///
    /// Context: as `Cache::open`; `truncate` takes the file's writer lock.
    pub fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        if !self.write && (self.create != Create::No || self.truncate) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "folio: create and truncate need write(true)",
            ));
        }
        let path = path.as_ref();
        if self.create != Create::No {
            create_file(path, self.create)?;
        }
        self.cache.open_with(path, self)
    }
}

/// Creates `path` if `create` says so (before the checks that need it to exist).
fn create_file(path: &Path, create: Create) -> io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    match create {
        Create::No => return Ok(()),
        Create::IfMissing => options.create(true),
        Create::New => options.create_new(true),
    };
    options.open(path).map(drop)
}

/// Opens with O_DIRECT (read-only, or read-write for `Access::ReadWrite`); falls back to
/// a buffered open where the file system refuses O_DIRECT (EINVAL). Returns the mode in
/// use.
///
/// Context: any thread; blocks in open(2).
fn open_direct(path: &Path, access: Access) -> io::Result<(StdFile, OpenMode)> {
    let options = |flags: i32| {
        let mut options = std::fs::OpenOptions::new();
        options
            .read(true)
            .write(access == Access::ReadWrite)
            .custom_flags(flags);
        options
    };
    match options(libc::O_DIRECT).open(path) {
        Ok(f) => Ok((f, OpenMode::Direct)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            Ok((options(0).open(path)?, OpenMode::Buffered))
        }
        Err(e) => Err(e),
    }
}
impl Cache {
    /// Opens `path` as `options` say: the file (O_DIRECT where allowed), its mapping
    /// (found or made), its slot in a persistent cache's segment, the handle.
    ///
    /// Context: as `Cache::open`.
    pub(super) fn open_with(&self, path: &Path, options: &OpenOptions<'_>) -> io::Result<File> {
        let meta = std::fs::metadata(path)?;
        if meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("folio: {} is a directory", path.display()),
            ));
        }
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("folio: {} is not a regular file", path.display()),
            ));
        }
        let access = if options.write {
            Access::ReadWrite
        } else {
            Access::ReadOnly
        };
        let (std_file, mode) = open_direct(path, access)?;
        // Stat the open file, not the path: the path may have been replaced meanwhile.
        let meta = std_file.metadata()?;
        #[cfg(test)]
        super::tests::after_the_opens_first_stat();
        // The birth time (`statx`) where the file system keeps one, else the change time
        // (`FileStamp` says why either, and what each costs). Taken again under the table's
        // lock for a new mapping (`get_or_insert`: the last one's removal may have
        // settled the size since).
        let stamp_now = || std_file.metadata().map(|m| FileStamp::of(&m));
        let core = &self.inner.core;
        let mapping =
            core.mappings
                .get_or_insert(core.memory(), meta.dev(), meta.ino(), &stamp_now)?;
        if let Some(segment) = core.arena().segment() {
            // Before any write: the keeper finds a dirty page's file by this slot.
            let path = std::fs::read_link(format!("/proc/self/fd/{}", std_file.as_raw_fd()))
                .unwrap_or_else(|_| path.to_path_buf());
            let stamp = segment::stamp_from(&meta, segment::generation_of(&std_file));
            let opened = match access {
                Access::ReadWrite => segment::layout::Opened::ForWriting,
                Access::ReadOnly => segment::layout::Opened::ReadOnly,
            };
            segment.register(
                mapping.id,
                segment::identity_of(&meta),
                &stamp,
                &path,
                opened,
            )?;
        }
        let mut file = File::new(
            self.inner.clone(),
            mapping,
            Arc::new(std_file),
            mode,
            access,
            self.inner.core.readahead_pages,
        );
        // A read-only file of a domain cache reads through the domain (a descriptor of its
        // own: the same open file) while this process holds no newer bytes of it; else,
        // or refused, privately (counted by the reader). A writable one, counted by
        // `File::new`, makes this process the writer of the domain's record of the file
        // (its domain handles retired), or a follower of the process that is, or else
        // retires it (mapping/domain.rs, A1-A4, F1).
        // `OpenOptions::private`: read privately, not admitted; or written privately, the
        // domain's record retired.
        if let Some(reader) = &self.domain {
            match access {
                Access::ReadOnly if options.private => {}
                Access::ReadOnly => file.admit_to(reader)?,
                Access::ReadWrite if options.private => {
                    file.write_privately(reader, &meta)?;
                }
                Access::ReadWrite => file.attach_writer_to(reader, &meta)?,
            }
        }
        if options.truncate {
            // Through the cache, so that its pages of the file go too.
            file.set_len(0)?;
        }
        Ok(file)
    }
}
