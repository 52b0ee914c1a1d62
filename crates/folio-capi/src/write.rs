//! The write side of the C ABI (DESIGN.md §8): `folio_open2` to open for writing,
//! `folio_write`, `folio_set_len`, `folio_sync`, `folio_writeback`,
//! `folio_cache_sync_all` and `folio_remove_file`, over the library's `OpenOptions`,
//! `File::write_at`, `File::set_len`, the syncs, `File::writeback`,
//! `Cache::sync_all_files` and `Cache::remove_file`.
//!
//! A handle opened without FOLIO_OPEN_WRITE (every `folio_open` handle) is read-only:
//! `folio_write` and `folio_set_len` through it get -EBADF, as write(2) and ftruncate(2)
//! get on a descriptor not open for writing, checked here before the library is asked
//! (whose `PermissionDenied` would otherwise come out as -EACCES, the errno of a file the
//! caller may not open). The syncs and `folio_writeback` take any handle, as fsync(2) and
//! sync_file_range(2) do: they write what any handle of the file dirtied, and report the
//! file's writeback errors to the handle they are called through (the errseq rule: each
//! handle sees each error once).
//!
//! Protection: nothing of its own. Handles are looked up by module `entry` (the
//! registries' epoch pin, held for the call); the file's state is the library's (its
//! writer lock, its dirty state).
//!
//! Limits: a write of at most INT64_MAX bytes per call (its count must fit the return
//! value); files up to 2^62 bytes (the library's limit: -EFBIG beyond).

use std::ffi::{c_char, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;

use folio_rs::File;

use crate::entry::{with_cache, with_file};
use crate::error::{boundary, errno_of, Failure, Returns};
use crate::read::open_file;
use crate::{folio_cache, folio_file};

/// `folio_open2`: open for writing too (`folio_write`, `folio_set_len`); without it the
/// handle is read-only, as `folio_open`'s.
pub const FOLIO_OPEN_WRITE: u32 = 1;
/// `folio_open2`: create the file if it does not exist (mode 0666 less the umask); needs
/// FOLIO_OPEN_WRITE.
pub const FOLIO_OPEN_CREATE: u32 = 2;
/// `folio_open2`: cut the file to 0 bytes, its cached pages and their dirty state with
/// it; needs FOLIO_OPEN_WRITE.
pub const FOLIO_OPEN_TRUNCATE: u32 = 4;
/// `folio_open2`: create the file, failing with -EEXIST if it exists (O_CREAT|O_EXCL);
/// needs FOLIO_OPEN_WRITE, and excludes FOLIO_OPEN_CREATE.
pub const FOLIO_OPEN_CREATE_NEW: u32 = 8;
/// `folio_open2`: keep the file out of the cache's domain (the options' `domain`; no
/// change for a cache without one). Read-only: the cache's own pages are read, never the
/// domain's: for a file whose pages the cache holds already, such as one this process
/// wrote and keeps cached, which the domain would read again from the disk. With
/// FOLIO_OPEN_WRITE: the writes are not put into the domain (which costs each write a
/// few microseconds); other processes read the file from the disk, so see its writes
/// once written back or synced: for a file nobody reads until it is synced (a
/// storage engine's table).
pub const FOLIO_OPEN_PRIVATE: u32 = 16;

const OPEN_FLAGS_ALL: u32 = FOLIO_OPEN_WRITE
    | FOLIO_OPEN_CREATE
    | FOLIO_OPEN_TRUNCATE
    | FOLIO_OPEN_CREATE_NEW
    | FOLIO_OPEN_PRIVATE;

/// `folio_sync`: the file's dirty data, then fdatasync(2) (`offset` and `len` must be 0).
pub const FOLIO_SYNC_DATA: u32 = 1;
/// `folio_sync`: the file's dirty data, then fsync(2): its metadata too (`offset` and
/// `len` must be 0).
pub const FOLIO_SYNC_ALL: u32 = 2;
/// `folio_sync`: the dirty data of `[offset, offset + len)` only, then fdatasync(2) (the
/// flush is the whole file's, as fdatasync's is).
pub const FOLIO_SYNC_RANGE: u32 = 3;

/// How `folio_open2`'s flags open a file: the library's `OpenOptions` settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OpenHow {
    write: bool,
    create: bool,
    create_new: bool,
    truncate: bool,
    private: bool,
}

/// Decodes `folio_open2`'s flags; EINVAL for unknown bits, for CREATE, CREATE_NEW or
/// TRUNCATE without WRITE, and for CREATE with CREATE_NEW.
fn open_how(flags: u32) -> Result<OpenHow, Failure> {
    const CALL: &str = "folio_open2";
    if flags & !OPEN_FLAGS_ALL != 0 {
        return Err(Failure::new(
            libc::EINVAL,
            format!(
                "{CALL}: unknown flags {:#x} (FOLIO_OPEN_WRITE, _CREATE, _TRUNCATE, _CREATE_NEW, \
                 _PRIVATE)",
                flags & !OPEN_FLAGS_ALL
            ),
        ));
    }
    let how = OpenHow {
        write: flags & FOLIO_OPEN_WRITE != 0,
        create: flags & FOLIO_OPEN_CREATE != 0,
        create_new: flags & FOLIO_OPEN_CREATE_NEW != 0,
        truncate: flags & FOLIO_OPEN_TRUNCATE != 0,
        private: flags & FOLIO_OPEN_PRIVATE != 0,
    };
    if !how.write && (how.create || how.create_new || how.truncate) {
        return Err(Failure::new(
            libc::EINVAL,
            format!(
                "{CALL}: flags {flags:#x}: FOLIO_OPEN_CREATE, _CREATE_NEW and _TRUNCATE need \
                 FOLIO_OPEN_WRITE"
            ),
        ));
    }
    if how.create && how.create_new {
        return Err(Failure::new(
            libc::EINVAL,
            format!("{CALL}: FOLIO_OPEN_CREATE and FOLIO_OPEN_CREATE_NEW together: say one"),
        ));
    }
    Ok(how)
}

/// Opens the regular file at `path` (a NUL-terminated byte string) through `cache` as
/// `flags` say, and stores its handle in `*out`: 0 opens read-only, as `folio_open`;
/// FOLIO_OPEN_WRITE opens for writing too, and with it FOLIO_OPEN_CREATE creates a
/// missing file, FOLIO_OPEN_CREATE_NEW creates one that must not exist, and
/// FOLIO_OPEN_TRUNCATE cuts the file to 0 bytes (through the cache: every handle of the
/// file sees it empty); FOLIO_OPEN_PRIVATE keeps the handle out of the cache's domain (a
/// read-only one reads the cache's own pages; a writable one's writes are not put there). O_DIRECT underneath, buffered where the file system refuses it.
/// All handles of one file share its cached pages, read-only ones included: they read
/// every write as soon as `folio_write` returns.
///
/// Returns 0; -EBADF if `cache` is not a live cache handle; -EFAULT if `path` or `out` is
/// NULL; -EINVAL for unknown flags, CREATE, CREATE_NEW or TRUNCATE without WRITE, or
/// CREATE with CREATE_NEW; -EEXIST for CREATE_NEW on an existing path; the open's errno
/// (-ENOENT without a CREATE flag, -EACCES, -EROFS with WRITE, ...); -EISDIR for a
/// directory; -EINVAL for anything else that is not a regular file; -EMFILE past 2^20
/// open files. `*out` is written only on success. A failure after the file was created
/// leaves it created.
///
/// Context: any thread; blocks in open(2) and fstat(2) (and creat(2)); with
/// FOLIO_OPEN_TRUNCATE, takes the file's writer lock, waits for writebacks of its pages in
/// flight and calls ftruncate(2). The caller owns the handle and releases it with
/// `folio_close` (which does not sync: call `folio_sync` first for durability). The file
/// does not need `cache` to stay live after this returns. `path` is read during the call
/// only.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or points to writable memory
/// for one `folio_file`.
#[no_mangle]
pub unsafe extern "C" fn folio_open2(
    cache: folio_cache,
    path: *const c_char,
    flags: u32,
    out: *mut folio_file,
) -> i32 {
    const CALL: &str = "folio_open2";
    boundary(CALL, || {
        let how = open_how(flags)?;
        // SAFETY: the caller's guarantees on `path` and `out`, as `open_file` needs them.
        unsafe {
            open_file(CALL, cache, path, out, |cache, path| {
                cache
                    .open_options()
                    .write(how.write)
                    .create(how.create)
                    .create_new(how.create_new)
                    .truncate(how.truncate)
                    .private(how.private)
                    .open(path)
            })
        }
    })
}

/// `with_file` for a call that writes: EBADF for a handle that names nothing or one
/// opened read-only, before `body` runs.
///
/// Context: as `with_file`.
fn with_writable_file<R: Returns>(
    call: &str,
    file: folio_file,
    body: impl FnOnce(&File) -> Result<R, Failure>,
) -> R {
    with_file(call, file, |f| {
        if !f.is_writable() {
            return Err(Failure::new(
                libc::EBADF,
                format!(
                    "{call}: the file was opened read-only (folio_open2 with FOLIO_OPEN_WRITE \
                     writes)"
                ),
            ));
        }
        body(f)
    })
}

/// Writes the `len` bytes at `buf` into `file` at `offset`, like pwrite(2) but always all
/// of them: any offset and length, no alignment needed; past the end the file grows (a
/// hole between the old end and `offset` reads as zeros). Every handle of the file reads
/// the new bytes once this returns. Nothing is durable before `folio_sync` (the
/// background writeback writes dirty data older than `dirty_expire_ms`, without a flush).
///
/// Returns `len`; -EBADF if `file` is not an open file handle or was opened read-only;
/// -EFAULT if `buf` is NULL and `len` is not 0; -EINVAL if `len` exceeds INT64_MAX or
/// `offset + len` overflows; -EFBIG past 2^62 bytes; -ENOSPC (or the file system's errno)
/// if the file cannot grow; the errno the file was given up with after its writeback kept
/// failing; the errno of reading the rest of a partly written page; -ENOMEM if every page
/// of the cache stays pinned. On an error, bytes before the failed page may have been
/// written.
///
/// Context: any thread; writers of one file take turns (its writer lock); readers are
/// never blocked by a write (they retry across it). May sleep: at the cache's dirty limit
/// until writeback makes room (the throttle), for a writeback of the same page, for a
/// read of a partly written page, or for memory. `buf` is read during the call only;
/// folio keeps no pointer to it. Closing `file` from another thread meanwhile is defined
/// (see `folio_close`).
///
/// # Safety
/// `buf` is NULL or readable for `len` bytes, and not written by another thread during
/// the call.
#[no_mangle]
pub unsafe extern "C" fn folio_write(
    file: folio_file,
    buf: *const c_void,
    len: usize,
    offset: u64,
) -> i64 {
    const CALL: &str = "folio_write";
    with_writable_file(CALL, file, |f| {
        if len == 0 {
            // The library's checks still apply (a given-up file fails).
            f.write_at(&[], offset).map_err(|e| Failure::io(CALL, &e))?;
            return Ok(0);
        }
        if buf.is_null() {
            return Err(Failure::new(
                libc::EFAULT,
                format!("{CALL}: buf is NULL for a write of {len} bytes"),
            ));
        }
        if len > i64::MAX as usize {
            return Err(Failure::new(
                libc::EINVAL,
                format!("{CALL}: length {len} exceeds INT64_MAX"),
            ));
        }
        // SAFETY: `buf` is non-null and the caller guarantees it is readable for `len`
        // bytes that no one writes during the call; `len <= i64::MAX` keeps the slice
        // within `isize::MAX`.
        let src = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        let n = f.write_at(src, offset).map_err(|e| Failure::io(CALL, &e))?;
        Ok(n as i64)
    })
}

/// Sets the length of `file` to `len` bytes, like ftruncate(2): shorter drops the cached
/// pages past the end and their dirty state (they will not be written) and cuts the file;
/// longer makes a hole that reads as zeros. Every handle of the file sees the new length
/// at once; it is on disk at once and durable after `folio_sync` with FOLIO_SYNC_ALL.
///
/// Returns 0; -EBADF if `file` is not an open file handle or was opened read-only; -EFBIG
/// past 2^62 bytes; the errno the file was given up with; the errno of ftruncate(2) (the
/// cache already has the new length then; the next sync sets it on disk).
///
/// Context: any thread; takes the file's writer lock (waits for its writers); may sleep
/// for writebacks in flight of the pages it drops, and in ftruncate(2).
#[no_mangle]
pub extern "C" fn folio_set_len(file: folio_file, len: u64) -> i32 {
    const CALL: &str = "folio_set_len";
    with_writable_file(CALL, file, |f| {
        f.set_len(len).map_err(|e| Failure::io(CALL, &e))?;
        Ok(0)
    })
}

/// Makes the data written to `file` durable: writes back its dirty pages (those of
/// `[offset, offset + len)` for FOLIO_SYNC_RANGE), waits for them and for every earlier
/// writeback of the file, sets the file's size on disk, and flushes: fdatasync(2) for
/// FOLIO_SYNC_DATA and FOLIO_SYNC_RANGE, fsync(2) for FOLIO_SYNC_ALL. When it returns 0,
/// the bytes written before the call survive a crash of the process or the machine.
/// Through any handle of the file, read-only ones too (as fsync(2)).
///
/// Returns 0; -EBADF if `file` is not an open file handle; -EINVAL for an unknown `kind`,
/// a range with FOLIO_SYNC_DATA or FOLIO_SYNC_ALL (`offset` and `len` must be 0), or if
/// `offset + len` overflows; the errno of a writeback or flush of the file that failed
/// since this handle last synced (-EIO, -ENOSPC, ...), once per handle: every handle of
/// the file (and one opened after the failure, before any handle saw it) is told once,
/// and a later sync that succeeds returns 0 (the data stayed dirty and was written
/// again); the errno the file was given up with after its writeback kept failing, at
/// every sync.
///
/// Context: any thread; sleeps until the writes and the flush complete (may take
/// seconds on a slow disk). Writers of the file may go on meanwhile; what they write
/// after the call began is not waited for.
#[no_mangle]
pub extern "C" fn folio_sync(file: folio_file, kind: u32, offset: u64, len: u64) -> i32 {
    const CALL: &str = "folio_sync";
    with_file(CALL, file, |f| {
        let whole_file = || {
            if offset != 0 || len != 0 {
                return Err(Failure::new(
                    libc::EINVAL,
                    format!(
                        "{CALL}: a range ({offset}, {len}) with a whole-file kind {kind} \
                         (FOLIO_SYNC_RANGE syncs a range)"
                    ),
                ));
            }
            Ok(())
        };
        let synced = match kind {
            FOLIO_SYNC_DATA => {
                whole_file()?;
                f.sync_data()
            }
            FOLIO_SYNC_ALL => {
                whole_file()?;
                f.sync_all()
            }
            FOLIO_SYNC_RANGE => f.sync_range(offset, len),
            other => {
                return Err(Failure::new(
                    libc::EINVAL,
                    format!("{CALL}: unknown kind {other} (FOLIO_SYNC_DATA, _ALL or _RANGE)"),
                ))
            }
        };
        synced.map_err(|e| Failure::io(CALL, &e))?;
        Ok(0)
    })
}

/// Starts writing back the dirty pages of `[offset, offset + len)` of `file` and returns
/// without waiting, like sync_file_range(2) with SYNC_FILE_RANGE_WRITE: nothing is
/// promised durable (use `folio_sync`). Pages a writer holds at that moment are left for
/// later. Through any handle of the file.
///
/// Returns 0; -EBADF if `file` is not an open file handle; -EINVAL if `offset + len`
/// overflows. A failed writeback is reported by the next `folio_sync`, not here.
///
/// Context: any thread; takes the file's index lock per batch; does not wait for I/O.
#[no_mangle]
pub extern "C" fn folio_writeback(file: folio_file, offset: u64, len: u64) -> i32 {
    const CALL: &str = "folio_writeback";
    with_file(CALL, file, |f| {
        f.writeback(offset, len)
            .map_err(|e| Failure::io(CALL, &e))?;
        Ok(0)
    })
}

/// Syncs every file `cache` has written, like syncfs(2): writes back their dirty pages
/// and fsyncs each, handles open or closed.
///
/// Returns 0; -EBADF if `cache` is not a live cache handle; -EIO if some file has a
/// writeback error that no handle of it has reported yet (the error is not consumed: each
/// handle's next `folio_sync` still reports it; the other files are synced all the same).
///
/// Context: any thread; sleeps until every write and flush completes.
#[no_mangle]
pub extern "C" fn folio_cache_sync_all(cache: folio_cache) -> i32 {
    const CALL: &str = "folio_cache_sync_all";
    with_cache(CALL, cache, |cache| {
        cache.sync_all_files().map_err(|e| Failure::io(CALL, &e))?;
        Ok(0)
    })
}

/// Deletes the file at `path` (a NUL-terminated byte string), like unlink(2), and drops
/// its cached pages (dirty ones too: their bytes belong to no file any more, so they are
/// never written) and the descriptor folio kept for its writeback, as the kernel drops a
/// deleted file's page cache with its last descriptor: at once if no handle of `cache`
/// has it open, else when the last of them closes (until then they read it as before).
/// With another hard link to the file, its pages stay (the file lives on). A file `cache`
/// never opened is only unlinked.
///
/// Returns 0; -EBADF if `cache` is not a live cache handle; -EFAULT if `path` is NULL;
/// the errno of lstat(2) or unlink(2) (-ENOENT, -EACCES, -EISDIR, ...; nothing is
/// dropped then).
///
/// Context: any thread; blocks in lstat(2) and unlink(2); takes the file's writer lock
/// and its index lock, and may sleep for writebacks of the file in flight. `path` is read
/// during the call only.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn folio_remove_file(cache: folio_cache, path: *const c_char) -> i32 {
    const CALL: &str = "folio_remove_file";
    with_cache(CALL, cache, |cache| {
        if path.is_null() {
            return Err(Failure::new(libc::EFAULT, format!("{CALL}: path is NULL")));
        }
        // SAFETY: non-null, and the caller guarantees a NUL-terminated string that stays
        // valid for the call.
        let path = OsStr::from_bytes(unsafe { CStr::from_ptr(path) }.to_bytes());
        cache.remove_file(path).map_err(|e| {
            Failure::new(
                errno_of(&e),
                format!("{CALL}: {}: {e}", path.to_string_lossy()),
            )
        })?;
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_flags_decode_and_refuse_what_cannot_be_meant() {
        let how = |write, create, create_new, truncate| OpenHow {
            write,
            create,
            create_new,
            truncate,
            private: false,
        };
        assert_eq!(open_how(0).unwrap(), how(false, false, false, false));
        assert_eq!(
            open_how(FOLIO_OPEN_WRITE).unwrap(),
            how(true, false, false, false)
        );
        assert_eq!(
            open_how(FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE | FOLIO_OPEN_TRUNCATE).unwrap(),
            how(true, true, false, true)
        );
        assert_eq!(
            open_how(FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE_NEW | FOLIO_OPEN_TRUNCATE).unwrap(),
            how(true, false, true, true)
        );
        assert_eq!(
            open_how(FOLIO_OPEN_PRIVATE).unwrap(),
            OpenHow {
                private: true,
                ..how(false, false, false, false)
            }
        );
        for bad in [
            FOLIO_OPEN_CREATE,
            FOLIO_OPEN_TRUNCATE,
            FOLIO_OPEN_CREATE_NEW,
            FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE | FOLIO_OPEN_CREATE_NEW,
            FOLIO_OPEN_WRITE | 32,
            1 << 31,
        ] {
            assert_eq!(open_how(bad).unwrap_err().errno(), libc::EINVAL, "{bad:#x}");
        }
    }
}
