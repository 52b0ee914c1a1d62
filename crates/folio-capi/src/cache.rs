//! A cache's life, its capacity and its counters: `folio_cache_create` (from a
//! `folio_cache_options`, checked by `build_cache`) and `folio_cache_destroy`, over the
//! cache registry; `folio_cache_keeper_pid` and `folio_cache_segment_path` (a persistent
//! cache's keeper and segment file); `folio_cache_segment_not_kept_because` (why a named
//! segment will not be kept for the next cache of its name); `folio_cache_adoption` (what a cache created with a
//! `segment_name` adopted); `folio_cache_domain_stats` (what this process read through
//! the cache's `domain`); `folio_cache_set_capacity`, `folio_cache_capacity`
//! and `folio_cache_capacity_max` (the library's `Cache::set_capacity` and its getters);
//! `folio_cache_stats` and `folio_stats_format`, with the names of the library's engines
//! and eviction policies and their codes in `folio_stats`, both ways.
//!
//! Protection: nothing of its own. The registry hands out and retires the handles
//! (module `handle`); the library's `Cache` is shared by the files opened through it, so
//! that destroying the handle leaves them working and the memory goes with the last.

use std::ffi::c_char;
use std::os::unix::ffi::OsStrExt;

use crate::entry::{bad_handle, with_cache, Out};
use crate::error::{boundary, Failure};
use crate::options::{
    build_cache, cache_options_default, folio_cache_options, FOLIO_BACKEND_IO_URING,
    FOLIO_BACKEND_OTHER, FOLIO_BACKEND_PREAD, FOLIO_EVICTION_OTHER, FOLIO_EVICTION_S3FIFO,
    FOLIO_EVICTION_TWO_LIST_LRU,
};
use crate::stats::folio_stats;
use crate::{folio_cache, CACHES};

/// Creates a cache with the options `*opts` (all defaults if `opts` is NULL) and stores
/// its handle in `*out`.
///
/// Returns 0; -EFAULT if `out` is NULL; -EINVAL for a bad option (a capacity below
/// FOLIO_CAPACITY_BYTES_MIN, a largest capacity below the capacity or above 1 TiB, an
/// unknown capacity_policy, backend or eviction, unknown arena_pages, a prefault or a
/// persistent other than 0 or 1, a dirty limit below 4096 or above the largest capacity,
/// a background threshold above the dirty limit, a wrong `size`, an empty segment_dir, a
/// segment_dir_on_disk other than 0 or 1, an empty or non-UTF-8 segment_name or one that
/// is not one plain portable file name, an unknown unusable_segment, a kept_steward other
/// than 0 or 1, an empty or non-UTF-8 domain or one that is not one plain portable file
/// name of at most 247 bytes): -EINVAL is only ever a bad option. With a `domain`: the
/// errors of its directory as for a segment_dir (-EACCES, -EOPNOTSUPP, -ENOENT), and the
/// errno of the attach to its steward. For a persistent cache, where the segment cannot be used (none of these
/// is an option's mistake; a caller may retry without `segment_name`, or with
/// `persistent` 0, and get a cache): the errno of a segment_dir that cannot be opened
/// (-ENOENT, -ENOTDIR), -EACCES for a directory (or a segment of that name) that is not
/// safe: another user's, writable by others, reached through a symlink (also the default
/// home when another user made it first), -EOPNOTSUPP for a segment_dir on a disk file
/// system without segment_dir_on_disk, -ENOSPC if the capacity does not fit in it,
/// -EAGAIN if a live cache (of this process or another) holds the segment of
/// `segment_name`, and -EBADMSG if that segment cannot be adopted under
/// FOLIO_UNUSABLE_SEGMENT_REFUSE; -ENOMEM if the memory cannot be reserved;
/// the errno of io_uring's set-up with FOLIO_BACKEND_IO_URING; -EMFILE past 2^20 live
/// caches. `*out` is written only on success, and a failure leaves no segment file and
/// no keeper.
///
/// Context: any thread; reserves the address space of the cache's largest capacity (not
/// touched yet), starts its I/O threads and, under FOLIO_CAPACITY_FOLLOW_MACHINE, the
/// thread that follows the machine's memory (named "folio-memory"), so it may take
/// milliseconds. A persistent cache (the default) also creates its segment file and
/// forks its keeper process (`folio_cache_keeper_pid`): the keeper is not the caller's
/// child (a child forks it and is reaped within this call, which may raise one SIGCHLD),
/// keeps no descriptor of the caller's but the segment's, and exits when the cache is
/// destroyed or, after writing back, when the process dies. The
/// caller owns the handle and releases it with `folio_cache_destroy`. With a
/// `segment_name`, an existing segment of that name is adopted first (its dead owner's
/// dirty pages written back, the pages of unchanged files kept), which takes as long as
/// that writeback and a look at each of its files. With a `domain`, the creation attaches
/// to its steward, forking one (`folio-steward`, not the caller's child either) if none
/// runs. `opts` (and the strings `segment_dir`, `segment_name` and `domain` point to) are
/// read during the call only.
///
/// # Safety
/// `opts` is NULL or points to a readable `folio_cache_options` whose `segment_dir`,
/// `segment_name` and `domain` are each NULL or a readable NUL-terminated string; `out` is NULL or
/// points to writable memory for one `folio_cache`.
#[no_mangle]
pub unsafe extern "C" fn folio_cache_create(
    opts: *const folio_cache_options,
    out: *mut folio_cache,
) -> i32 {
    const CALL: &str = "folio_cache_create";
    boundary(CALL, || {
        // SAFETY: the caller guarantees `out` is NULL or a writable `folio_cache`.
        let out = unsafe { Out::new(CALL, "out", out) }?;
        let opts = if opts.is_null() {
            cache_options_default()
        } else {
            // SAFETY: non-null, and the caller guarantees it points to a readable
            // `folio_cache_options`; every bit pattern of its integer fields is valid.
            unsafe { opts.read() }
        };
        // SAFETY: the caller guarantees `segment_dir` and `segment_name` are each NULL or a
        // readable C string.
        let cache = unsafe { build_cache(&opts) }?;
        let id = CACHES
            .insert(cache)
            .map_err(|_| Failure::new(libc::EMFILE, format!("{CALL}: 2^20 caches are live")))?;
        out.write(folio_cache { id });
        Ok(0)
    })
}

/// Releases the caller's handle to `cache`. Files opened through it stay open and keep
/// working; the cache's memory is released with the last of them, after its dirty pages
/// are written back (not flushed: `folio_sync` or `folio_cache_sync_all` first for
/// durability); a persistent cache's segment file is removed and its keeper exits then.
/// A process that exits or dies with the cache or a file still open keeps what it wrote
/// and did not sync if the cache is persistent (its keeper writes it back, as the kernel
/// writes back a dead process's dirty pages), and loses it if not (`persistent` 0: the
/// dirty pages are the process's memory).
///
/// Returns 0, or -EBADF if `cache` is not a live cache handle (null, already destroyed).
///
/// Context: any thread. Calls on the same handle that are in flight in other threads
/// finish normally; later ones get -EBADF. When no file holds the cache, this writes back
/// its dirty pages and waits for them and its in-flight reads, and stops its I/O threads:
/// here, or, if calls on the handle are in flight, at a later folio call after they have
/// returned.
#[no_mangle]
pub extern "C" fn folio_cache_destroy(cache: folio_cache) -> i32 {
    boundary("folio_cache_destroy", || {
        CACHES
            .remove(cache.id)
            .map_err(|_| bad_handle("folio_cache_destroy", "cache", cache.id))?;
        Ok(0)
    })
}

/// The process id of the keeper of `cache`: the process that writes back its dirty pages
/// if this process dies without doing so (`folio_cache_options.persistent`).
///
/// Returns the pid (> 0); 0 if the cache is not persistent; -EBADF if `cache` is not a
/// live cache handle.
///
/// Context: any thread; does not block; takes no lock. The keeper runs until the cache is
/// destroyed (its last file closed), or until it has written back after this process
/// died; it is not this process's child.
#[no_mangle]
pub extern "C" fn folio_cache_keeper_pid(cache: folio_cache) -> i64 {
    with_cache("folio_cache_keeper_pid", cache, |cache| {
        Ok(cache.keeper_pid().map_or(0, i64::from))
    })
}

/// Copies the path of the segment file of `cache` (`folio_cache_options.persistent`,
/// in `segment_dir`), NUL-terminated, into `buf`.
///
/// Returns the path's length in bytes (without the NUL); -ENOENT if the cache is not
/// persistent; -ERANGE if `buf_len` is not more than that length (nothing is written;
/// PATH_MAX bytes always suffice); -EFAULT if `buf` is NULL and `buf_len` is not 0;
/// -EBADF if `cache` is not a live cache handle.
///
/// Context: any thread; does not block; writes `buf` during the call only. The file
/// exists while the cache lives, and is removed when it is destroyed (after its last file
/// closed) or, if this process dies, by the keeper once it has written back.
///
/// # Safety
/// `buf` is NULL or writable for `buf_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn folio_cache_segment_path(
    cache: folio_cache,
    buf: *mut c_char,
    buf_len: usize,
) -> i32 {
    const CALL: &str = "folio_cache_segment_path";
    with_cache(CALL, cache, |cache| {
        check_buf(CALL, buf, buf_len)?;
        let path = cache.segment_path().ok_or_else(|| {
            Failure::new(
                libc::ENOENT,
                format!("{CALL}: the cache is not persistent: it has no segment file"),
            )
        })?;
        // SAFETY: the caller's (above), and `check_buf` refused a NULL with a length.
        unsafe { copy_out(CALL, "the path", path.as_os_str().as_bytes(), buf, buf_len) }
    })
}

/// Copies why the named segment of `cache` will not be kept for the next cache of its
/// name, NUL-terminated, into `buf`: the process may change its credentials (root, a
/// setuid program) and its keeper could not watch them (in a container's namespaces, or
/// a kernel without the proc connector), so the keeper took the segment's name away at
/// once (docs/persistence.md, the trust model). The cache works as any; the next one of
/// the name starts cold. A program says it to its user (the RocksDB plugin does under
/// `verbose=1`).
///
/// Returns the reason's length in bytes (without the NUL); 0 if the segment is kept as
/// usual or the cache has no named segment (nothing is written); -ERANGE if `buf_len` is
/// not more than that length (nothing is written; 1024 bytes always suffice); -EFAULT if
/// `buf` is NULL and `buf_len` is not 0; -EBADF if `cache` is not a live cache handle.
///
/// Context: any thread; does not block; writes `buf` during the call only. The answer is
/// the keeper's at the cache's creation and does not change.
///
/// # Safety
/// `buf` is NULL or writable for `buf_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn folio_cache_segment_not_kept_because(
    cache: folio_cache,
    buf: *mut c_char,
    buf_len: usize,
) -> i32 {
    const CALL: &str = "folio_cache_segment_not_kept_because";
    with_cache(CALL, cache, |cache| {
        check_buf(CALL, buf, buf_len)?;
        match cache.segment_not_kept_because() {
            // SAFETY: the caller's (above), and `check_buf` refused a NULL with a length.
            Some(why) => unsafe { copy_out(CALL, "the reason", why.as_bytes(), buf, buf_len) },
            None => Ok(0),
        }
    })
}

/// Refuses a NULL `buf` with a nonzero `buf_len` (-EFAULT).
fn check_buf(call: &str, buf: *mut c_char, buf_len: usize) -> Result<(), Failure> {
    if buf.is_null() && buf_len != 0 {
        return Err(Failure::new(
            libc::EFAULT,
            format!("{call}: buf is NULL with buf_len {buf_len}"),
        ));
    }
    Ok(())
}

/// Copies `bytes` (`what`, for the message) and a NUL into `buf`; returns the length
/// without the NUL, or -ERANGE (nothing written) if `buf_len` is not more than it.
///
/// # Safety
/// `buf` is writable for `buf_len` bytes, and not NULL if `buf_len` is not 0
/// (`check_buf`).
unsafe fn copy_out(
    call: &str,
    what: &str,
    bytes: &[u8],
    buf: *mut c_char,
    buf_len: usize,
) -> Result<i32, Failure> {
    if bytes.len() >= buf_len {
        return Err(Failure::new(
            libc::ERANGE,
            format!(
                "{call}: {what} takes {} bytes with its NUL, buf_len is {buf_len}",
                bytes.len() + 1
            ),
        ));
    }
    // SAFETY: non-null (buf_len > bytes.len() >= 0, and NULL was refused with a nonzero
    // length), and the caller guarantees it writable for `buf_len` bytes.
    let dst = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), buf_len) };
    dst[..bytes.len()].copy_from_slice(bytes);
    dst[bytes.len()] = 0;
    Ok(i32::try_from(bytes.len()).unwrap_or(i32::MAX))
}

/// What a cache created with a `segment_name` adopted of the segment it found
/// (`folio_cache_adoption`): the pages and files the previous owner left that are cached
/// again, those dropped and why, and what was written back first.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct folio_adoption {
    /// Cached pages kept: served from memory with no read from disk.
    pub pages_kept: u64,
    /// Cached pages dropped: the sum of the three reasons below.
    pub pages_dropped: u64,
    /// ... of files that changed, were replaced or are gone, or that could not be proven
    /// unchanged (a slot torn by a kill, a file system's coarse timestamps).
    pub pages_of_changed_files: u64,
    /// ... of pages a kill left half done, or that no file claims.
    pub pages_unproven: u64,
    /// ... over this cache's capacity (the least used), when it is smaller than the last.
    pub pages_over_capacity: u64,
    /// Files whose pages were kept: unchanged since the previous owner had them.
    pub files_kept: u64,
    /// Files whose pages were dropped because they changed or could not be proven not to.
    pub files_dropped: u64,
    /// Bytes of dirty pages a killed owner's keeper had not written back, written to their
    /// files before the adoption.
    pub bytes_written_back: u64,
    /// 1: the segment of the name could not be used (another layout, a damaged header)
    /// and was replaced (FOLIO_UNUSABLE_SEGMENT_REPLACE): the cache started cold; else 0.
    pub replaced: u64,
}

impl folio_adoption {
    fn of(adoption: &folio_rs::Adoption) -> folio_adoption {
        folio_adoption {
            pages_kept: adoption.pages_kept,
            pages_dropped: adoption.pages_dropped,
            pages_of_changed_files: adoption.pages_of_changed_files,
            pages_unproven: adoption.pages_unproven,
            pages_over_capacity: adoption.pages_over_capacity,
            files_kept: u64::from(adoption.files_kept),
            files_dropped: u64::from(adoption.files_dropped),
            bytes_written_back: adoption.bytes_written_back,
            replaced: u64::from(adoption.replaced),
        }
    }
}

/// Stores in `*out` what `cache` adopted when it was created: the segment of its
/// `segment_name` left by an earlier cache (a process that exited or was killed).
///
/// Returns 1 if the cache adopted a segment (`*out` says what it kept and dropped, and
/// why); 0 if it adopted none: not persistent, no `segment_name`, no segment of that name
/// (`*out` all zeros), or one it could not use and replaced (`*out` has `replaced` 1);
/// -EBADF if `cache` is not a live cache handle; -EFAULT if `out` is NULL.
///
/// Context: any thread; does not block; takes no lock. The figures never change after
/// creation.
///
/// # Safety
/// `out` is NULL or points to writable memory for one `folio_adoption`.
#[no_mangle]
pub unsafe extern "C" fn folio_cache_adoption(cache: folio_cache, out: *mut folio_adoption) -> i32 {
    const CALL: &str = "folio_cache_adoption";
    with_cache(CALL, cache, |cache| {
        // SAFETY: the caller guarantees `out` is NULL or a writable `folio_adoption`.
        let out = unsafe { Out::new(CALL, "out", out) }?;
        let adoption = cache
            .adoption()
            .map_or_else(folio_adoption::default, folio_adoption::of);
        out.write(adoption);
        Ok(i32::from(
            cache.adoption().is_some() && adoption.replaced == 0,
        ))
    })
}

/// What this process read through its cache's domain (`folio_cache_domain_stats`; the
/// options' `domain`): this process's counts since the cache was created, not the
/// domain's. `folio_cache_stats` counts the cache's own pages (files opened for writing,
/// files the domain refused) and not these.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct folio_domain_stats {
    /// Pages found in the domain (cached by this process or another).
    pub hits: u64,
    /// Of the hits, those that pinned their frame after two optimistic copies were stale.
    pub pinned_hits: u64,
    /// Optimistic copies discarded (their frame was reclaimed or reused meanwhile).
    pub stale_copies: u64,
    /// Pages not found in the domain.
    pub misses: u64,
    /// Reads from the files: one per contiguous run of a miss's readahead window (or of
    /// its request), or per page read uncached.
    pub preads: u64,
    /// Pages read into a frame of this process's that another process (or thread) cached
    /// meanwhile, or whose index had no node free: each left for reclaim.
    pub conflicts: u64,
    /// Reclaims this process ran (a miss found no free frame).
    pub reclaims: u64,
    /// The frames those reclaims freed.
    pub reclaimed_frames: u64,
    /// Misses read outside the domain (no frame could be had: every one pinned).
    pub uncached: u64,
    /// Pages read outside the domain because another thread of this process held their
    /// frame pinned.
    pub sibling_pinned: u64,
    /// Read-only opens the domain refused (the file changed since the domain recorded it,
    /// or its file table was full): those files are read through the cache's own pages.
    pub files_refused: u64,
    /// Pages read with a miss besides the one it needed, or by a window its marker
    /// started (readahead).
    pub pages_read_ahead: u64,
    /// Readahead windows opened (on a miss or at a marker).
    pub windows: u64,
    /// Of the conflicts, the pages another reader cached meanwhile: read twice.
    pub duplicate_reads: u64,
    /// Read-only opens read through the cache's own pages because this process held newer
    /// bytes of the file than the disk (a writable handle open, dirty pages, a writeback
    /// running).
    pub files_newer_here: u64,
    /// Pages this process wrote and put into the domain (a writable file whose record's
    /// writer this process is), so that every other process reads them before they are
    /// written back.
    pub installs: u64,
    /// The domain's quota now: how many frames (4 KiB) its cache may hold, moved by its
    /// steward with the machine's memory. The domain's figure, the same for every member.
    pub quota_frames: u64,
    /// The frames (4 KiB) the domain's cache holds now, every member's pages.
    pub frames_cached: u64,
    /// Of those, the frames this process owns: those its reads and writes brought in.
    /// Another process's reclaim takes them only once no process above its share is left,
    /// and below the floor only when nothing else is left at all.
    pub owned_frames: u64,
    /// Each attached process's share of the quota now: the quota over the processes
    /// attached. The domain's figure, the same for every member.
    pub share_frames: u64,
    /// Each attached process's floor now: half its share. The domain's figure, the same
    /// for every member.
    pub floor_frames: u64,
}

impl folio_domain_stats {
    fn of(s: &folio_rs::DomainStats) -> folio_domain_stats {
        folio_domain_stats {
            hits: s.hits,
            pinned_hits: s.pinned_hits,
            stale_copies: s.stale_copies,
            misses: s.misses,
            preads: s.preads,
            conflicts: s.conflicts,
            reclaims: s.reclaims,
            reclaimed_frames: s.reclaimed_frames,
            uncached: s.uncached,
            sibling_pinned: s.sibling_pinned,
            files_refused: s.files_refused,
            pages_read_ahead: s.pages_read_ahead,
            windows: s.windows,
            duplicate_reads: s.duplicate_reads,
            files_newer_here: s.files_newer_here,
            installs: s.installs,
            quota_frames: s.quota_frames,
            frames_cached: s.frames_cached,
            owned_frames: s.owned_frames,
            share_frames: s.share_frames,
            floor_frames: s.floor_frames,
        }
    }
}

/// Stores in `*out` what this process read through the domain of `cache` (the options'
/// `domain`).
///
/// Returns 1 if the cache was created with a domain (`*out` its counts); 0 if not (a
/// private cache: `*out` all zeros); -EBADF if `cache` is not a live cache handle; -EFAULT
/// if `out` is NULL.
///
/// Context: any thread; does not block; takes no lock. The counts are read one by one
/// (relaxed), so a snapshot taken while others read may be a few events off between
/// fields.
///
/// # Safety
/// `out` is NULL or points to writable memory for one `folio_domain_stats`.
#[no_mangle]
pub unsafe extern "C" fn folio_cache_domain_stats(
    cache: folio_cache,
    out: *mut folio_domain_stats,
) -> i32 {
    const CALL: &str = "folio_cache_domain_stats";
    with_cache(CALL, cache, |cache| {
        // SAFETY: the caller guarantees `out` is NULL or a writable `folio_domain_stats`.
        let out = unsafe { Out::new(CALL, "out", out) }?;
        let stats = cache.domain_stats();
        out.write(
            stats
                .as_ref()
                .map_or_else(folio_domain_stats::default, folio_domain_stats::of),
        );
        Ok(i32::from(stats.is_some()))
    })
}

/// Sets the capacity of `cache` to `bytes` (rounded down to 4 KiB), between
/// FOLIO_CAPACITY_BYTES_MIN and its largest capacity (`folio_cache_capacity_max`).
/// Growing takes effect at once. Shrinking stops allocations past the new capacity at
/// once, then evicts the coldest clean pages (dirty ones are written back first, never
/// dropped) and gives the freed memory back to the system (MADV_DONTNEED: the resident
/// set falls before this returns). Pages other threads hold (a read in progress) leave
/// when they are released: the shrink waits for them and for writeback up to 2 s, then
/// returns 0 with the rest left to the cache's reclaim. Under
/// FOLIO_CAPACITY_FOLLOW_MACHINE the policy moves the capacity again from there when the
/// machine's memory calls for it (a shrink when short of memory, a growth up to the
/// largest capacity while a larger cache would hit).
///
/// Returns 0; -EBADF if `cache` is not a live cache handle; -EINVAL if `bytes` is
/// outside [FOLIO_CAPACITY_BYTES_MIN, the largest capacity] (nothing changes).
///
/// Context: any thread; safe against every other call on the cache and its files, reads
/// and writes included; capacity changes (this call's, the policy's) run one at a time.
/// A shrink may sleep: it evicts, writes dirty pages back and waits, as above, up to 2 s
/// for what is held or in flight (more if it keeps freeing).
#[no_mangle]
pub extern "C" fn folio_cache_set_capacity(cache: folio_cache, bytes: u64) -> i32 {
    const CALL: &str = "folio_cache_set_capacity";
    with_cache(CALL, cache, |cache| {
        cache
            .set_capacity(bytes)
            .map_err(|e| Failure::io(CALL, &e))?;
        Ok(0)
    })
}

/// Stores the capacity of `cache` now, in bytes, in `*out`: what `folio_cache_options`
/// chose at creation, moved since by `folio_cache_set_capacity` and the machine policy.
///
/// Returns 0; -EBADF if `cache` is not a live cache handle; -EFAULT if `out` is NULL.
///
/// Context: any thread; does not block; takes no lock.
///
/// # Safety
/// `out` is NULL or points to a writable `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn folio_cache_capacity(cache: folio_cache, out: *mut u64) -> i32 {
    const CALL: &str = "folio_cache_capacity";
    with_cache(CALL, cache, |cache| {
        // SAFETY: the caller guarantees `out` is NULL or a writable u64.
        let out = unsafe { Out::new(CALL, "out", out) }?;
        out.write(cache.capacity_bytes());
        Ok(0)
    })
}

/// Stores the largest capacity of `cache`, in bytes, in `*out`: reserved at creation
/// (`capacity_max_bytes`, or as `capacity_policy` chose it), the most
/// `folio_cache_set_capacity` accepts and the machine policy grows to. It never changes.
///
/// Returns 0; -EBADF if `cache` is not a live cache handle; -EFAULT if `out` is NULL.
///
/// Context: any thread; does not block; takes no lock.
///
/// # Safety
/// `out` is NULL or points to a writable `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn folio_cache_capacity_max(cache: folio_cache, out: *mut u64) -> i32 {
    const CALL: &str = "folio_cache_capacity_max";
    with_cache(CALL, cache, |cache| {
        // SAFETY: the caller guarantees `out` is NULL or a writable u64.
        let out = unsafe { Out::new(CALL, "out", out) }?;
        out.write(cache.capacity_max_bytes());
        Ok(0)
    })
}

// The names of the library's engines and policies (`Stats::backend`, `Stats::eviction`)
// and their codes in `folio_stats`, both ways.
const BACKEND_NAMES: [(&str, u32); 2] = [
    ("io_uring", FOLIO_BACKEND_IO_URING),
    ("pread", FOLIO_BACKEND_PREAD),
];
const EVICTION_NAMES: [(&str, u32); 2] = [
    ("s3fifo", FOLIO_EVICTION_S3FIFO),
    ("lru", FOLIO_EVICTION_TWO_LIST_LRU),
];

fn code_of(names: &[(&str, u32)], name: &str, other: u32) -> u32 {
    names
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(other, |&(_, code)| code)
}

fn name_of(names: &[(&'static str, u32)], code: u32) -> &'static str {
    names
        .iter()
        .find(|&&(_, c)| c == code)
        .map_or("other", |&(name, _)| name)
}

pub(crate) fn backend_code(name: &str) -> u32 {
    code_of(&BACKEND_NAMES, name, FOLIO_BACKEND_OTHER)
}

pub(crate) fn eviction_code(name: &str) -> u32 {
    code_of(&EVICTION_NAMES, name, FOLIO_EVICTION_OTHER)
}

/// `stats` as one line of `name=value`, every field in the order of `folio_stats`.
fn format_stats(stats: &folio_stats) -> String {
    let mut line = String::new();
    for (field, value) in folio_rs::Stats::FIELDS.iter().zip(stats.values()) {
        line.push_str(&format!("{}={value} ", field.name));
    }
    line.push_str(&format!(
        "backend={} eviction={}",
        name_of(&BACKEND_NAMES, stats.backend),
        name_of(&EVICTION_NAMES, stats.eviction)
    ));
    line
}

/// Stores a snapshot of `cache`'s counters in `*out`. A persistent cache's snapshot is
/// also published in its segment (`Cache::publish_stats`): what `folio-stat` shows next
/// is what this call returned, until the cache's next publish (about a second later).
///
/// Returns 0; -EBADF if `cache` is not a live cache handle; -EFAULT if `out` is NULL.
///
/// Context: any thread; does not wait for I/O; takes short internal locks (it sums the
/// per-thread hit counters), so call it for reports, not on every read.
///
/// # Safety
/// `out` is NULL or points to writable memory for one `folio_stats`.
#[no_mangle]
pub unsafe extern "C" fn folio_cache_stats(cache: folio_cache, out: *mut folio_stats) -> i32 {
    const CALL: &str = "folio_cache_stats";
    with_cache(CALL, cache, |cache| {
        // SAFETY: the caller guarantees `out` is NULL or a writable `folio_stats`.
        let out = unsafe { Out::new(CALL, "out", out) }?;
        out.write(folio_stats::of(&cache.publish_stats()));
        Ok(0)
    })
}

/// Writes `*stats` as one line of `name=value` pairs, every field of `folio_stats` in its
/// order, the codes as names ("hits=120 misses=8 ... backend=io_uring eviction=s3fifo"),
/// into `buf`: at most `buf_len - 1` bytes and a NUL (nothing if `buf_len` is 0), like
/// snprintf. A program that prints its stats this way prints every counter, including
/// those a later folio adds, without naming any.
///
/// Returns the line's full length (without the NUL), so a caller can size `buf`;
/// -EFAULT if `stats` is NULL, or `buf` is NULL and `buf_len` is not 0.
///
/// Context: any thread; does not block; reads `*stats` and writes `buf` during the call
/// only.
///
/// # Safety
/// `stats` is NULL or points to a readable `folio_stats`; `buf` is NULL or writable for
/// `buf_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn folio_stats_format(
    stats: *const folio_stats,
    buf: *mut c_char,
    buf_len: usize,
) -> i64 {
    const CALL: &str = "folio_stats_format";
    boundary(CALL, || {
        if stats.is_null() || (buf.is_null() && buf_len != 0) {
            return Err(Failure::new(
                libc::EFAULT,
                format!("{CALL}: stats is NULL, or buf is NULL with buf_len {buf_len}"),
            ));
        }
        // SAFETY: non-null, and the caller guarantees it points to a readable
        // `folio_stats`; every bit pattern of its integer fields is valid.
        let line = format_stats(unsafe { &stats.read() });
        if let Some(room) = buf_len.checked_sub(1) {
            // SAFETY: non-null (checked above, as `buf_len` is not 0), and the caller
            // guarantees it is writable for `buf_len` bytes (one object, so at most
            // isize::MAX).
            let dst = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), buf_len) };
            let n = line.len().min(room);
            dst[..n].copy_from_slice(&line.as_bytes()[..n]);
            dst[n] = 0;
        }
        Ok(line.len() as i64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The printer names every field of `folio_stats`, with its own value: each number of
    /// the counter list gets a distinct value here, and each must come out under its name.
    #[test]
    fn stats_format_prints_every_field() {
        let mut stats = folio_rs::Stats::default();
        for (i, (_, value)) in stats.values_mut().enumerate() {
            *value = 1000 + i as u64;
        }
        stats.backend = "io_uring".into();
        stats.eviction = "lru".into();
        let mut c = folio_stats::of(&stats);
        let line = format_stats(&c);
        let words: Vec<&str> = line.split(' ').collect();
        let fields = folio_rs::Stats::FIELDS;
        assert_eq!(words.len(), fields.len() + 2, "{line}");
        for (i, field) in fields.iter().enumerate() {
            assert_eq!(words[i], format!("{}={}", field.name, 1000 + i), "{line}");
        }
        assert_eq!(words[fields.len()], "backend=io_uring");
        assert_eq!(words[fields.len() + 1], "eviction=lru");
        c.backend = 77;
        c.eviction = FOLIO_EVICTION_S3FIFO;
        assert!(format_stats(&c).ends_with(" backend=other eviction=s3fifo"));
    }

    #[test]
    fn stats_format_truncates_like_snprintf() {
        let c = folio_stats::of(&folio_rs::Stats::default());
        let full = format_stats(&c);
        // SAFETY: a readable folio_stats; NULL with length 0.
        let n = unsafe { folio_stats_format(&c, std::ptr::null_mut(), 0) };
        assert_eq!(n, full.len() as i64);
        let mut small = [0x55 as c_char; 8];
        // SAFETY: `small` is writable for its length.
        let n = unsafe { folio_stats_format(&c, small.as_mut_ptr(), small.len()) };
        assert_eq!(n, full.len() as i64);
        let small: Vec<u8> = small.iter().map(|&b| b as u8).collect();
        assert_eq!(&small[..7], &full.as_bytes()[..7]);
        assert_eq!(small[7], 0);
        // SAFETY: NULL pointers are the misuse under test.
        unsafe {
            assert_eq!(
                folio_stats_format(std::ptr::null(), small.as_ptr() as *mut c_char, 8),
                -i64::from(libc::EFAULT)
            );
            assert_eq!(
                folio_stats_format(&c, std::ptr::null_mut(), 8),
                -i64::from(libc::EFAULT)
            );
        }
    }

    #[test]
    fn engine_and_policy_names_round_trip() {
        for (name, code) in BACKEND_NAMES {
            assert_eq!(name_of(&BACKEND_NAMES, backend_code(name)), name);
            assert_eq!(backend_code(name), code);
        }
        for (name, code) in EVICTION_NAMES {
            assert_eq!(name_of(&EVICTION_NAMES, eviction_code(name)), name);
            assert_eq!(eviction_code(name), code);
        }
        assert_eq!(backend_code("null"), FOLIO_BACKEND_OTHER);
        assert_eq!(eviction_code("clock"), FOLIO_EVICTION_OTHER);
    }
}
