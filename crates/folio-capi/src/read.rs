//! The read side of the C ABI: `folio_open` and `folio_close` (with `open_file`, the
//! opening `folio_open2` shares), `folio_read`, `folio_read_hint`, `folio_read_many`,
//! `folio_readahead`, `folio_advise`, and a handle's length (`folio_file_len`,
//! `folio_file_refresh_len`) and counters (`folio_file_stats`), over the library's
//! `Cache::open`, `File::read_at_hint`, `File::read_many`, `File::readahead`,
//! `File::advise`, `File::len`, `File::refresh_len` and `File::stats`.
//!
//! A read keeps pread(2)'s contract: any offset and length, no alignment, short only at
//! the end of the file; the caller's buffer is written during the call only, and never
//! past the end of the file.
//!
//! Protection: nothing of its own. Handles are looked up by module `entry` (the
//! registries' epoch pin, held for the call); the file's state is the library's.
//!
//! Limits: a read of at most INT64_MAX bytes per call (its count must fit the return
//! value).

use std::ffi::{c_char, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;

use folio_rs::{Advice, Cache, File, ReadHint};

use crate::entry::{bad_handle, cache_of, with_file, Out};
use crate::error::{boundary, errno_of, Failure};
use crate::handle;
use crate::{folio_cache, folio_file, FILES};

/// Opens the regular file at `path` (a NUL-terminated byte string) for cached reads
/// through `cache`, O_DIRECT underneath (buffered where the file system refuses O_DIRECT,
/// e.g. tmpfs), and stores its handle in `*out`. Two opens of one file share its cached
/// pages; each handle has its own readahead state.
///
/// Returns 0; -EBADF if `cache` is not a live cache handle; -EFAULT if `path` or `out` is
/// NULL; the open's errno (-ENOENT, -EACCES, ...); -EISDIR for a directory; -EINVAL for
/// anything else that is not a regular file; -EMFILE past 2^20 open files. `*out` is
/// written only on success.
///
/// Context: any thread; blocks in open(2) and fstat(2). The caller owns the handle and
/// releases it with `folio_close`. The file does not need `cache` to stay live after this
/// returns. `path` is read during the call only.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or points to writable memory
/// for one `folio_file`.
#[no_mangle]
pub unsafe extern "C" fn folio_open(
    cache: folio_cache,
    path: *const c_char,
    out: *mut folio_file,
) -> i32 {
    const CALL: &str = "folio_open";
    // SAFETY: the caller's guarantees on `path` and `out`, as `open_file` needs them.
    boundary(CALL, || unsafe {
        open_file(CALL, cache, path, out, |c, p| c.open(p))
    })
}

/// The body of `folio_open` and `folio_open2`: looks `cache` up, opens `path` with `open`,
/// registers the file and stores its handle in `*out` (only on success).
///
/// Context: any thread; `open`'s own context.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or points to writable memory
/// for one `folio_file`.
pub(crate) unsafe fn open_file(
    call: &str,
    cache: folio_cache,
    path: *const c_char,
    out: *mut folio_file,
    open: impl FnOnce(&Cache, &OsStr) -> std::io::Result<File>,
) -> Result<i32, Failure> {
    let guard = handle::pin();
    let cache = cache_of(call, cache, &guard)?;
    if path.is_null() || out.is_null() {
        return Err(Failure::new(
            libc::EFAULT,
            format!("{call}: path or out is NULL"),
        ));
    }
    // SAFETY: non-null, and the caller guarantees a NUL-terminated string that stays
    // valid for the call.
    let path = OsStr::from_bytes(unsafe { CStr::from_ptr(path) }.to_bytes());
    let file = open(cache, path).map_err(|e| {
        Failure::new(
            errno_of(&e),
            format!("{call}: {}: {e}", path.to_string_lossy()),
        )
    })?;
    drop(guard);
    let id = FILES
        .insert(file)
        .map_err(|_| Failure::new(libc::EMFILE, format!("{call}: 2^20 files are open")))?;
    // SAFETY: non-null, and the caller guarantees it points to a writable `folio_file`.
    unsafe { out.write(folio_file { id }) };
    Ok(0)
}

/// Closes `file`. Its cached pages stay in the cache for later opens of the same file;
/// its dirty pages stay dirty and are written back as any others (this is no sync: call
/// `folio_sync` first for durability; a writeback error no handle has seen yet is kept
/// for the file's next handle).
///
/// Returns 0, or -EBADF if `file` is not an open file handle (null, already closed).
///
/// Context: any thread, even while other threads read through `file`: their reads finish
/// normally and later ones get -EBADF. The descriptor is closed before this returns when
/// no call on `file` is in flight, else after those calls have returned, at a later folio
/// call of any thread. Does not wait for I/O.
#[no_mangle]
pub extern "C" fn folio_close(file: folio_file) -> i32 {
    boundary("folio_close", || {
        FILES
            .remove(file.id)
            .map_err(|_| bad_handle("folio_close", "file", file.id))?;
        Ok(0)
    })
}

/// Reads up to `len` bytes of `file` at `offset` into `buf`, like pread(2): any offset and
/// length, no alignment needed.
///
/// Returns the number of bytes read, short only at the end of the file (0 at or past it,
/// and for `len` 0); -EBADF if `file` is not an open file handle; -EFAULT if `buf` is NULL
/// and `len` is not 0; -EINVAL if `len` exceeds INT64_MAX or `offset + len` overflows;
/// the errno of a failed read of a missing page (-EIO, ...; every reader waiting for that
/// page gets it, and a later read retries); -ENOMEM if every page of the cache stays
/// pinned. On an error, bytes already copied into `buf` are not reported.
///
/// Context: any thread; one handle may be read by many threads at once. Blocks while
/// missing pages are read, and waits for memory (bounded). `buf` is written during the
/// call only; folio keeps no pointer to it. Closing `file` from another thread meanwhile
/// is defined (see `folio_close`).
///
/// # Safety
/// `buf` is NULL or writable for `len` bytes (the bytes past the end of the file are not
/// written).
#[no_mangle]
pub unsafe extern "C" fn folio_read(
    file: folio_file,
    buf: *mut std::ffi::c_void,
    len: usize,
    offset: u64,
) -> i64 {
    // SAFETY: the caller's guarantee for `buf`, passed on.
    unsafe { read_with("folio_read", file, buf, len, offset, None) }
}

/// `folio_read_hint`: an ordinary read (the handle's advice decides).
pub const FOLIO_READ_NORMAL: u32 = 0;
/// `folio_read_hint`: a read that will not come back (a one-time scan, a compaction's
/// input): the pages it brings in leave the cache first, and the cached pages it reads are
/// not counted as used.
pub const FOLIO_READ_NOREUSE: u32 = 1;

/// `folio_read` with a hint for this read only: FOLIO_READ_NORMAL or FOLIO_READ_NOREUSE.
///
/// Returns as `folio_read`; -EINVAL for an unknown hint too.
///
/// Context: as `folio_read`.
///
/// # Safety
/// As `folio_read`.
#[no_mangle]
pub unsafe extern "C" fn folio_read_hint(
    file: folio_file,
    buf: *mut std::ffi::c_void,
    len: usize,
    offset: u64,
    hint: u32,
) -> i64 {
    const CALL: &str = "folio_read_hint";
    let hint = match hint {
        FOLIO_READ_NORMAL => ReadHint::Normal,
        FOLIO_READ_NOREUSE => ReadHint::NoReuse,
        other => {
            return boundary(CALL, || -> Result<i64, Failure> {
                Err(Failure::new(
                    libc::EINVAL,
                    format!("{CALL}: unknown hint {other}"),
                ))
            })
        }
    };
    // SAFETY: the caller's guarantee for `buf`, passed on.
    unsafe { read_with(CALL, file, buf, len, offset, Some(hint)) }
}

/// The body of `folio_read` and `folio_read_hint` (`None`: the handle's own hint).
///
/// # Safety
/// As `folio_read`.
unsafe fn read_with(
    call: &'static str,
    file: folio_file,
    buf: *mut std::ffi::c_void,
    len: usize,
    offset: u64,
    hint: Option<ReadHint>,
) -> i64 {
    with_file(call, file, |f| {
        if len == 0 {
            return Ok(0);
        }
        if buf.is_null() {
            return Err(Failure::new(
                libc::EFAULT,
                format!("{call}: buf is NULL for a read of {len} bytes"),
            ));
        }
        if len > i64::MAX as usize {
            return Err(Failure::new(
                libc::EINVAL,
                format!("{call}: length {len} exceeds INT64_MAX"),
            ));
        }
        if offset.checked_add(len as u64).is_none() {
            return Err(Failure::new(
                libc::EINVAL,
                format!("{call}: offset {offset} + length {len} overflows"),
            ));
        }
        // Only the bytes up to the end of the file can be written: the slice covers no
        // more (pread(2) touches no more either).
        let len = (len as u64).min(f.len().saturating_sub(offset)) as usize;
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: `buf` is non-null and the caller guarantees it is writable for the
        // original `len` bytes, of which this is a prefix; `len <= i64::MAX` keeps the
        // slice within `isize::MAX`; the memory belongs to the caller, and nothing else in
        // this process aliases it during the call (the caller's duty, as with pread).
        let dst = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        let hint = hint.unwrap_or_else(|| f.hint());
        let n = f
            .read_at_hint(dst, offset, hint)
            .map_err(|e| Failure::io(call, &e))?;
        Ok(n as i64)
    })
}

/// One range of a `folio_read_many` batch: where to read, into what, and (written by the
/// call) what came of it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct folio_read_req {
    /// Where the bytes go: writable for `len` bytes (NULL only with `len` 0).
    pub buf: *mut std::ffi::c_void,
    pub len: usize,
    pub offset: u64,
    /// Set by the call: the bytes read (short only at the end of the file), or a negative
    /// errno for this range alone (as `folio_read` returns them).
    pub result: i64,
}

/// Reads a batch of ranges of `file`, each as `folio_read` would, with the misses of all
/// of them submitted to the device together (one submission; overlapping and adjacent
/// ranges read once): RocksDB's MultiRead. Each `reqs[i].result` gets that range's result;
/// a failed range does not fail the others.
///
/// Returns 0 (the results are in `reqs`); -EBADF if `file` is not an open file handle;
/// -EFAULT if `reqs` is NULL and `n` is not 0. A range with a NULL `buf` and a non-zero
/// `len` gets -EFAULT, one whose `len` exceeds INT64_MAX or whose end overflows -EINVAL.
///
/// Context: any thread; blocks until every range is read (and waits for memory, bounded,
/// as `folio_read`). The buffers are written during the call only.
///
/// # Safety
/// `reqs` is NULL (with `n` 0) or points to `n` writable `folio_read_req`s, each `buf`
/// NULL or writable for its `len` bytes; no two buffers overlap.
#[no_mangle]
pub unsafe extern "C" fn folio_read_many(
    file: folio_file,
    reqs: *mut folio_read_req,
    n: usize,
) -> i32 {
    const CALL: &str = "folio_read_many";
    with_file(CALL, file, |f| {
        if n == 0 {
            return Ok(0);
        }
        if reqs.is_null() {
            return Err(Failure::new(
                libc::EFAULT,
                format!("{CALL}: reqs is NULL for {n} ranges"),
            ));
        }
        // SAFETY: non-null, and the caller guarantees `n` writable requests.
        let reqs = unsafe { std::slice::from_raw_parts_mut(reqs, n) };
        // The ranges folio reads (the valid ones), and which request each belongs to.
        let mut reads: Vec<(u64, &mut [u8])> = Vec::with_capacity(n);
        let mut owners = Vec::with_capacity(n);
        for (i, req) in reqs.iter_mut().enumerate() {
            req.result = 0;
            if req.len == 0 {
                continue;
            }
            if req.buf.is_null() {
                req.result = -i64::from(libc::EFAULT);
                continue;
            }
            if req.len > i64::MAX as usize || req.offset.checked_add(req.len as u64).is_none() {
                req.result = -i64::from(libc::EINVAL);
                continue;
            }
            // As in `folio_read`: only the bytes up to the end of the file are written.
            let len = (req.len as u64).min(f.len().saturating_sub(req.offset)) as usize;
            if len == 0 {
                continue;
            }
            // SAFETY: `buf` is non-null and writable for `req.len` bytes, of which this is
            // a prefix (the caller's duty); `len <= i64::MAX`; the buffers do not overlap.
            let dst = unsafe { std::slice::from_raw_parts_mut(req.buf.cast::<u8>(), len) };
            reads.push((req.offset, dst));
            owners.push(i);
        }
        let results = f.read_many(&mut reads);
        drop(reads);
        for (i, result) in owners.into_iter().zip(results) {
            reqs[i].result = match result {
                Ok(bytes) => bytes as i64,
                Err(e) => -i64::from(errno_of(&e)),
            };
        }
        Ok(0)
    })
}

/// Starts reading `[offset, offset + len)` of `file` into the cache and returns at once.
/// Pages cached or in flight are skipped at no cost (no I/O, no lock), so overlapping
/// calls from many threads are cheap; the range past the end of the file is ignored.
///
/// Returns 0; -EBADF if `file` is not an open file handle; -EINVAL if `offset + len`
/// overflows. A shortage of memory is not an error: readahead is a hint and stops early.
///
/// Context: any thread; does not wait for I/O or memory (it may reclaim cached pages).
#[no_mangle]
pub extern "C" fn folio_readahead(file: folio_file, offset: u64, len: u64) -> i32 {
    const CALL: &str = "folio_readahead";
    with_file(CALL, file, |f| {
        f.readahead(offset, len)
            .map_err(|e| Failure::io(CALL, &e))?;
        Ok(0)
    })
}

/// `folio_advise`: the default, on-demand readahead (values as POSIX_FADV_*).
pub const FOLIO_ADVICE_NORMAL: u32 = 0;
/// `folio_advise`: random access: no readahead, reads read what they ask.
pub const FOLIO_ADVICE_RANDOM: u32 = 1;
/// `folio_advise`: long sequential scans: twice the maximum readahead window.
pub const FOLIO_ADVICE_SEQUENTIAL: u32 = 2;
/// `folio_advise`: the range will be read soon: read it ahead now.
pub const FOLIO_ADVICE_WILLNEED: u32 = 3;
/// `folio_advise`: the range will not be read again: drop its unpinned cached pages.
pub const FOLIO_ADVICE_DONTNEED: u32 = 4;
/// `folio_advise`: this handle's reads will not be reused (POSIX_FADV_NOREUSE): the pages
/// they bring in are evicted first, the cached pages they read are not counted as used;
/// until FOLIO_ADVICE_NORMAL.
pub const FOLIO_ADVICE_NOREUSE: u32 = 5;

/// Tells folio how `file` will be read, like posix_fadvise(2): FOLIO_ADVICE_NORMAL,
/// _SEQUENTIAL and _RANDOM set this handle's readahead (the range is ignored, as the
/// kernel does); _WILLNEED reads the range ahead (as `folio_readahead`); _DONTNEED drops
/// the range's whole cached pages that no reader holds, for every handle of the file;
/// _NOREUSE makes this handle's reads one-time reads (a scan that never displaces the
/// working set) until _NORMAL.
///
/// Returns 0; -EBADF if `file` is not an open file handle; -EINVAL for an unknown advice
/// or if `offset + len` overflows.
///
/// Context: any thread; does not wait for I/O; _DONTNEED takes the file's index lock.
#[no_mangle]
pub extern "C" fn folio_advise(file: folio_file, offset: u64, len: u64, advice: u32) -> i32 {
    const CALL: &str = "folio_advise";
    with_file(CALL, file, |f| {
        let advice = match advice {
            FOLIO_ADVICE_NORMAL => Advice::Normal,
            FOLIO_ADVICE_RANDOM => Advice::Random,
            FOLIO_ADVICE_SEQUENTIAL => Advice::Sequential,
            FOLIO_ADVICE_WILLNEED => Advice::WillNeed,
            FOLIO_ADVICE_DONTNEED => Advice::DontNeed,
            FOLIO_ADVICE_NOREUSE => Advice::NoReuse,
            other => {
                return Err(Failure::new(
                    libc::EINVAL,
                    format!("{CALL}: unknown advice {other}"),
                ))
            }
        };
        f.advise(offset, len, advice)
            .map_err(|e| Failure::io(CALL, &e))?;
        Ok(0)
    })
}

/// Stores the length of `file` in bytes in `*out`, as folio knows it (from the open,
/// lowered if a read found the file shorter; for a file written through folio, what
/// `folio_write` and `folio_set_len` made it, ahead of the disk until a sync).
///
/// Returns 0; -EBADF if `file` is not an open file handle; -EFAULT if `out` is NULL.
///
/// Context: any thread; does not block.
///
/// # Safety
/// `out` is NULL or points to a writable `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn folio_file_len(file: folio_file, out: *mut u64) -> i32 {
    const CALL: &str = "folio_file_len";
    with_file(CALL, file, |f| {
        // SAFETY: the caller guarantees `out` is NULL or a writable u64.
        unsafe { Out::new(CALL, "out", out) }?.write(f.len());
        Ok(0)
    })
}

/// What one handle caused since it was opened (`folio::FileStats`): the device reads of
/// its misses and of the readahead it started. A page another handle had already read
/// is a hit here. Zero for a handle that read a file back from the cache (a file just
/// written through folio, while its pages stay cached).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct folio_handle_stats {
    /// Reads submitted to the device for this handle.
    pub read_io_requests: u64,
    /// Bytes those reads asked for (whole pages).
    pub read_io_bytes: u64,
}

/// Stores what `file` caused since it was opened in `*out` (`folio_handle_stats`).
///
/// Returns 0; -EBADF if `file` is not an open file handle; -EFAULT if `out` is NULL.
///
/// Context: any thread; does not block.
///
/// # Safety
/// `out` is NULL or points to a writable `folio_handle_stats`.
#[no_mangle]
pub unsafe extern "C" fn folio_file_stats(file: folio_file, out: *mut folio_handle_stats) -> i32 {
    const CALL: &str = "folio_file_stats";
    with_file(CALL, file, |f| {
        // SAFETY: the caller guarantees `out` is NULL or a writable folio_handle_stats.
        let out = unsafe { Out::new(CALL, "out", out) }?;
        let s = f.stats();
        out.write(folio_handle_stats {
            read_io_requests: s.read_io_requests,
            read_io_bytes: s.read_io_bytes,
        });
        Ok(0)
    })
}

/// Re-reads the length of `file` from the kernel (fstat(2)), adopts it for every handle
/// of the file, and stores it in `*out`. Cached pages past a smaller length are dropped,
/// so no byte past the new end is ever returned; a larger length makes the appended bytes
/// readable. Call it after the file was appended to or truncated behind folio's back
/// (folio notices a shrink on its own only when a read finds the file shorter). A file
/// written through folio keeps the length folio gave it (its writes are the newest bytes).
///
/// Returns 0; -EBADF if `file` is not an open file handle; -EFAULT if `out` is NULL; the
/// errno of a failed fstat(2). `*out` is written only on success.
///
/// Context: any thread; blocks in one fstat(2); takes the file's index lock if pages are
/// dropped. Does not wait for I/O.
///
/// # Safety
/// `out` is NULL or points to a writable `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn folio_file_refresh_len(file: folio_file, out: *mut u64) -> i32 {
    const CALL: &str = "folio_file_refresh_len";
    with_file(CALL, file, |f| {
        // SAFETY: the caller guarantees `out` is NULL or a writable u64.
        let out = unsafe { Out::new(CALL, "out", out) }?;
        out.write(f.refresh_len().map_err(|e| Failure::io(CALL, &e))?);
        Ok(0)
    })
}
