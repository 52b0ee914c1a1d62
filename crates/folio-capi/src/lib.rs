//! The C ABI of folio: `include/folio.h`, built as `libfolio.so` and `libfolio.a`.
//!
//! A C program creates a cache, opens files through it, and reads them like `pread(2)`:
//!
//! ```c
//! folio_cache_options opts;
//! folio_cache_options_init(&opts);
//! opts.capacity_bytes = 1ull << 30;
//! folio_cache cache;
//! if (folio_cache_create(&opts, &cache) < 0) { /* -errno */ }
//! folio_file file;
//! folio_open(cache, "/data/000123.sst", &file);
//! int64_t n = folio_read(file, buf, 8192, 4096 * 10 + 100);   /* short only at EOF */
//! folio_close(file);
//! folio_cache_destroy(cache);
//! ```
//!
//! and writes them (module `write`): `folio_open2` with FOLIO_OPEN_WRITE, `folio_write`,
//! `folio_set_len`, `folio_sync`, `folio_writeback`, `folio_cache_sync_all`, and
//! `folio_remove_file` (unlink, dropping a deleted file's pages).
//!
//! # Conventions
//!
//! - Every function returns `0` (or a count) on success and a negative errno on failure
//!   (`-EBADF`, `-EINVAL`, the `-errno` of a failed system call, ...). The message of the
//!   calling thread's last failure is kept for `folio_last_error_message`.
//! - No panic crosses the boundary: every entry point runs under `catch_unwind`, and an
//!   internal panic comes back as `-ENOTRECOVERABLE` with its message.
//! - Every function says its `Context:`: whether it may block, what must outlive the call,
//!   who frees what. All of them are thread-safe.
//!
//! # Handles
//!
//! `folio_cache` and `folio_file` are small structs holding a 64-bit handle, passed by
//! value; they are not pointers. A handle is a slot index, a generation and a kind tag,
//! looked up in a registry (module `handle`, which states the protocol): a zeroed (null),
//! closed, reissued, forged or wrong-kind handle gets `-EBADF`, never undefined behaviour.
//! A file may be closed while other threads read through it: those reads finish normally
//! (or, if they start after the close, fail with `-EBADF`); the file's descriptor and
//! memory are released after the last of them has returned (at a later folio call; with
//! none in flight, before the close returns).
//!
//! A cache and its files are independent handles: destroying a cache while files opened
//! through it are open is defined, the files keep working, and the cache's memory goes
//! with the last of them.

// The parts of the API, in the order include/folio.h lists them: cbindgen writes the
// crate root's items, then each module's in the order of these declarations (the blank
// lines keep rustfmt from sorting them).
mod read;

mod error;

mod write;

// What they share.
mod entry;
mod handle;
mod stats;

use std::ffi::c_char;
use std::time::Duration;

use folio_rs::{ArenaPages, BackendKind, Cache, EvictionKind, File, Prefault};

use crate::entry::{bad_handle, with_cache, Out};
use crate::error::{boundary, Failure};
use crate::handle::{Kind, Registry};
pub use crate::stats::folio_stats;

static CACHES: Registry<Cache> = Registry::new(Kind::CACHE);
static FILES: Registry<File> = Registry::new(Kind::FILE);

/// A cache: memory for cached pages, shared by the files opened through it. A zeroed
/// value is the null handle.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct folio_cache {
    pub id: u64,
}

/// An open file: one readahead state, shared by the threads that read through it. A
/// zeroed value is the null handle.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct folio_file {
    pub id: u64,
}

/// `backend`: io_uring where the kernel allows it, else a pool of threads calling pread.
pub const FOLIO_BACKEND_AUTO: u32 = 0;
/// `backend`: io_uring (O_DIRECT, batched submission); creation fails where refused.
pub const FOLIO_BACKEND_IO_URING: u32 = 1;
/// `backend`: a pool of threads calling pread(2).
pub const FOLIO_BACKEND_PREAD: u32 = 2;
/// `folio_stats.backend`: some other engine (the library's fault-injecting one).
pub const FOLIO_BACKEND_OTHER: u32 = 3;

/// `eviction`: S3-FIFO (a small and a main FIFO, and a ghost queue of shadow entries).
pub const FOLIO_EVICTION_S3FIFO: u32 = 0;
/// `eviction`: the kernel's two lists (inactive, active) with refault distance.
pub const FOLIO_EVICTION_TWO_LIST_LRU: u32 = 1;
/// `folio_stats.eviction`: a policy this header does not name.
pub const FOLIO_EVICTION_OTHER: u32 = 2;

/// `folio_cache_options.arena_pages`: chunk by chunk, huge pages for the memory large
/// folios (readahead) take and 4 KiB pages for small ones (the default).
pub const FOLIO_ARENA_PAGES_AUTO: u32 = 0;
/// `folio_cache_options.arena_pages`: 4 KiB pages for all of the cache's memory.
pub const FOLIO_ARENA_PAGES_SMALL: u32 = 1;
/// `folio_cache_options.arena_pages`: transparent huge pages advised for all of it.
pub const FOLIO_ARENA_PAGES_HUGE: u32 = 2;

// Literals, so that cbindgen can write them; the asserts keep them equal to the library's.
/// The smallest capacity a cache accepts, in bytes (16 pages of 4 KiB).
pub const FOLIO_CAPACITY_BYTES_MIN: u64 = 65536;
/// The capacity `folio_cache_options_init` sets: 256 MiB.
pub const FOLIO_CAPACITY_BYTES_DEFAULT: u64 = 268435456;
/// The maximum readahead window `folio_cache_options_init` sets: 16 MiB.
pub const FOLIO_READAHEAD_MAX_BYTES_DEFAULT: u64 = 16777216;

/// Bytes of a page: the dirty limit's floor.
const PAGE_BYTES: u64 = folio_rs::PAGE_BYTES as u64;

const _: () = assert!(FOLIO_CAPACITY_BYTES_MIN == folio_rs::CAPACITY_BYTES_MIN);
const _: () = assert!(FOLIO_CAPACITY_BYTES_DEFAULT == folio_rs::CAPACITY_BYTES_DEFAULT);
/// The dirty limit when `dirty_limit_bytes` is 0, in percent of the capacity.
pub const FOLIO_DIRTY_LIMIT_PERCENT_DEFAULT: u32 = 20;
/// The background threshold when `dirty_background_bytes` is 0, in percent of the
/// capacity.
pub const FOLIO_DIRTY_BACKGROUND_PERCENT_DEFAULT: u32 = 10;
/// The expiry age of dirty data `folio_cache_options_init` sets: 5 s.
pub const FOLIO_DIRTY_EXPIRE_MS_DEFAULT: u32 = 5000;
/// The write-behind threshold `folio_cache_options_init` sets: 256 KiB.
pub const FOLIO_WRITE_BEHIND_BYTES_DEFAULT: u64 = 262144;

const _: () = assert!(FOLIO_READAHEAD_MAX_BYTES_DEFAULT == folio_rs::READAHEAD_MAX_BYTES_DEFAULT);
const _: () =
    assert!(FOLIO_DIRTY_LIMIT_PERCENT_DEFAULT as u64 == folio_rs::DIRTY_LIMIT_PERCENT_DEFAULT);
const _: () = assert!(
    FOLIO_DIRTY_BACKGROUND_PERCENT_DEFAULT as u64 == folio_rs::DIRTY_BACKGROUND_PERCENT_DEFAULT
);
const _: () =
    assert!(FOLIO_DIRTY_EXPIRE_MS_DEFAULT as u128 == folio_rs::DIRTY_EXPIRE_DEFAULT.as_millis());
const _: () = assert!(FOLIO_WRITE_BEHIND_BYTES_DEFAULT == folio_rs::WRITE_BEHIND_BYTES_DEFAULT);

/// How to build a cache. Fill it with `folio_cache_options_init`, then change fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct folio_cache_options {
    /// `sizeof(folio_cache_options)` as the caller was compiled with; set by
    /// `folio_cache_options_init`. Lets later versions add fields.
    pub size: u32,
    /// FOLIO_BACKEND_AUTO, FOLIO_BACKEND_IO_URING or FOLIO_BACKEND_PREAD.
    pub backend: u32,
    /// Bytes of memory for cached pages (rounded down to 4 KiB), at least
    /// FOLIO_CAPACITY_BYTES_MIN. Reserved at creation, touched as pages are cached.
    pub capacity_bytes: u64,
    /// The largest readahead window of a file, in bytes (at most 32 MiB and an eighth of
    /// the capacity; 0: no readahead).
    pub readahead_max_bytes: u64,
    /// Threads of the pread backend; 0: the library's default (16).
    pub pread_threads: u32,
    /// FOLIO_EVICTION_S3FIFO or FOLIO_EVICTION_TWO_LIST_LRU.
    pub eviction: u32,
    /// 1: fault the whole capacity in at creation (creation takes longer and the memory
    /// is resident at once; the first reads then skip the page faults of fresh memory,
    /// about a fifth of a cold scan's time into a fresh cache); 0 (the default): memory
    /// is touched as pages are first cached.
    pub prefault: u32,
    /// A file whose oldest dirty page has waited this long is written back by the
    /// background writeback, in milliseconds (0: at its next pass, every 100 ms).
    /// Default: FOLIO_DIRTY_EXPIRE_MS_DEFAULT.
    pub dirty_expire_ms: u32,
    /// The most memory writes may keep dirty or under writeback, in bytes: writers past
    /// it wait for writeback (the throttle). 0 (the default):
    /// FOLIO_DIRTY_LIMIT_PERCENT_DEFAULT percent of the capacity. Else at least 4096 and
    /// at most `capacity_bytes`.
    pub dirty_limit_bytes: u64,
    /// Above this much dirty memory, in bytes, the background writeback writes every
    /// dirty file, not only expired ones. 0 (the default):
    /// FOLIO_DIRTY_BACKGROUND_PERCENT_DEFAULT percent of the capacity (at most the dirty
    /// limit). Else at most the dirty limit.
    pub dirty_background_bytes: u64,
    /// Which pages back the cache's memory: FOLIO_ARENA_PAGES_AUTO (the default: huge
    /// pages for readahead's large folios, 4 KiB pages for random reads' small ones),
    /// _SMALL or _HUGE. See docs/benchmarks.md, "Arena pages".
    pub arena_pages: u32,
    /// Write-behind: once a writer that appends (each write starts at or before the end
    /// of the file and passes it) has left this many bytes of whole pages dirty behind
    /// it, their writeback starts without waiting for it, so that the next sync finds
    /// most of them on the device. Writes inside the file are never written behind.
    /// 0: off (appended pages wait for a sync, the dirty expiry or the background
    /// threshold). Default: FOLIO_WRITE_BEHIND_BYTES_DEFAULT.
    pub write_behind_bytes: u64,
}

// The layout C sees: the fields added with writes sit in the padding after `prefault`
// and at the end, so the earlier fields kept their offsets. `write_behind_bytes` came at
// the end (after four bytes of padding) rather than in that padding, so that the size
// changed (64 to 72) and `size` refuses a caller built against the older header instead
// of reading its padding as the field.
const _: () = assert!(std::mem::offset_of!(folio_cache_options, dirty_expire_ms) == 36);
const _: () = assert!(std::mem::offset_of!(folio_cache_options, dirty_limit_bytes) == 40);
const _: () = assert!(std::mem::offset_of!(folio_cache_options, arena_pages) == 56);
const _: () = assert!(std::mem::offset_of!(folio_cache_options, write_behind_bytes) == 64);
const _: () = assert!(std::mem::size_of::<folio_cache_options>() == 72);

fn cache_options_default() -> folio_cache_options {
    folio_cache_options {
        size: std::mem::size_of::<folio_cache_options>() as u32,
        backend: FOLIO_BACKEND_AUTO,
        capacity_bytes: FOLIO_CAPACITY_BYTES_DEFAULT,
        readahead_max_bytes: FOLIO_READAHEAD_MAX_BYTES_DEFAULT,
        pread_threads: 0,
        eviction: FOLIO_EVICTION_S3FIFO,
        prefault: 0,
        dirty_expire_ms: FOLIO_DIRTY_EXPIRE_MS_DEFAULT,
        dirty_limit_bytes: 0,
        dirty_background_bytes: 0,
        arena_pages: FOLIO_ARENA_PAGES_AUTO,
        write_behind_bytes: FOLIO_WRITE_BEHIND_BYTES_DEFAULT,
    }
}

/// Fills `*opts` with the defaults: FOLIO_BACKEND_AUTO, FOLIO_CAPACITY_BYTES_DEFAULT,
/// FOLIO_READAHEAD_MAX_BYTES_DEFAULT, the default pread pool, FOLIO_EVICTION_S3FIFO, no
/// prefault, FOLIO_DIRTY_EXPIRE_MS_DEFAULT, the default dirty limit and background
/// threshold (0: percentages of the capacity), FOLIO_ARENA_PAGES_AUTO,
/// FOLIO_WRITE_BEHIND_BYTES_DEFAULT, and `size` set.
///
/// Returns 0, or -EFAULT if `opts` is NULL.
///
/// Context: any thread; does not block; writes only `*opts`.
///
/// # Safety
/// `opts` is NULL or points to writable memory for one `folio_cache_options`.
#[no_mangle]
pub unsafe extern "C" fn folio_cache_options_init(opts: *mut folio_cache_options) -> i32 {
    const CALL: &str = "folio_cache_options_init";
    boundary(CALL, || {
        // SAFETY: the caller guarantees `opts` is NULL or a writable `folio_cache_options`.
        unsafe { Out::new(CALL, "opts", opts) }?.write(cache_options_default());
        Ok(0)
    })
}

fn build_cache(opts: &folio_cache_options) -> Result<Cache, Failure> {
    const CALL: &str = "folio_cache_create";
    let expected = std::mem::size_of::<folio_cache_options>();
    if opts.size as usize != expected {
        return Err(Failure::new(
            libc::EINVAL,
            format!(
                "{CALL}: options.size is {} but this library's folio_cache_options has {expected} bytes \
                 (call folio_cache_options_init first)",
                opts.size
            ),
        ));
    }
    let eviction = match opts.eviction {
        FOLIO_EVICTION_S3FIFO => EvictionKind::S3Fifo,
        FOLIO_EVICTION_TWO_LIST_LRU => EvictionKind::TwoListLru,
        other => {
            return Err(Failure::new(
                libc::EINVAL,
                format!(
                    "{CALL}: unknown eviction {other} (FOLIO_EVICTION_S3FIFO or _TWO_LIST_LRU)"
                ),
            ))
        }
    };
    let backend = match opts.backend {
        FOLIO_BACKEND_AUTO => BackendKind::Auto,
        FOLIO_BACKEND_IO_URING => BackendKind::IoUring,
        FOLIO_BACKEND_PREAD => BackendKind::Pread,
        other => {
            return Err(Failure::new(
                libc::EINVAL,
                format!(
                    "{CALL}: unknown backend {other} (FOLIO_BACKEND_AUTO, _IO_URING or _PREAD)"
                ),
            ))
        }
    };
    let prefault = match opts.prefault {
        0 => Prefault::Lazy,
        1 => Prefault::AtBuild,
        other => {
            return Err(Failure::new(
                libc::EINVAL,
                format!("{CALL}: prefault is {other}, not 0 or 1"),
            ))
        }
    };
    let arena_pages = match opts.arena_pages {
        FOLIO_ARENA_PAGES_AUTO => ArenaPages::Auto,
        FOLIO_ARENA_PAGES_SMALL => ArenaPages::Small,
        FOLIO_ARENA_PAGES_HUGE => ArenaPages::Huge,
        other => {
            return Err(Failure::new(
                libc::EINVAL,
                format!(
                    "{CALL}: unknown arena_pages {other} (FOLIO_ARENA_PAGES_AUTO, _SMALL or _HUGE)"
                ),
            ))
        }
    };
    let mut builder = Cache::builder()
        .capacity_bytes(opts.capacity_bytes)
        .backend(backend)
        .readahead_max_bytes(opts.readahead_max_bytes)
        .eviction(eviction)
        .prefault(prefault)
        .arena_pages(arena_pages)
        .write_behind_bytes(opts.write_behind_bytes)
        .dirty_expire(Duration::from_millis(u64::from(opts.dirty_expire_ms)));
    let (limit_bytes, background_bytes) = dirty_thresholds(opts)?;
    if let Some(bytes) = limit_bytes {
        builder = builder.dirty_limit_bytes(bytes);
    }
    if let Some(bytes) = background_bytes {
        builder = builder.dirty_background_bytes(bytes);
    }
    if opts.pread_threads != 0 {
        builder = builder.pread_threads(opts.pread_threads as usize);
    }
    builder.build().map_err(|e| Failure::io(CALL, &e))
}

/// The dirty limit and background threshold `opts` sets (None: the library's default),
/// or EINVAL for values the cache could not honour.
fn dirty_thresholds(opts: &folio_cache_options) -> Result<(Option<u64>, Option<u64>), Failure> {
    const CALL: &str = "folio_cache_create";
    let limit = match opts.dirty_limit_bytes {
        0 => None,
        bytes if bytes < PAGE_BYTES || bytes > opts.capacity_bytes => {
            return Err(Failure::new(
                libc::EINVAL,
                format!(
                    "{CALL}: dirty_limit_bytes {bytes} is not within [4096, capacity_bytes {}] \
                     (0: the default)",
                    opts.capacity_bytes
                ),
            ))
        }
        bytes => Some(bytes),
    };
    let limit_bytes =
        limit.unwrap_or(opts.capacity_bytes / 100 * u64::from(FOLIO_DIRTY_LIMIT_PERCENT_DEFAULT));
    let background = match opts.dirty_background_bytes {
        0 => None,
        bytes if bytes > limit_bytes => {
            return Err(Failure::new(
                libc::EINVAL,
                format!(
                    "{CALL}: dirty_background_bytes {bytes} is above the dirty limit \
                     ({limit_bytes} bytes)"
                ),
            ))
        }
        bytes => Some(bytes),
    };
    Ok((limit, background))
}

/// Creates a cache with the options `*opts` (all defaults if `opts` is NULL) and stores
/// its handle in `*out`.
///
/// Returns 0; -EFAULT if `out` is NULL; -EINVAL for a bad option (a capacity below
/// FOLIO_CAPACITY_BYTES_MIN, an unknown backend or eviction, unknown arena_pages, a prefault other than 0 or 1,
/// a dirty limit outside [4096, capacity], a background threshold above the dirty limit,
/// a wrong `size`); -ENOMEM if the memory
/// cannot be reserved; the errno of io_uring's set-up with FOLIO_BACKEND_IO_URING;
/// -EMFILE past 2^20 live caches. `*out` is written only on success.
///
/// Context: any thread; reserves the cache's memory (not touched yet) and starts its I/O
/// threads, so it may take milliseconds. The caller owns the handle and releases it with
/// `folio_cache_destroy`. `opts` is read during the call only.
///
/// # Safety
/// `opts` is NULL or points to a readable `folio_cache_options`; `out` is NULL or points
/// to writable memory for one `folio_cache`.
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
        let cache = build_cache(&opts)?;
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
/// durability). A process that exits with the cache or a file still open loses what
/// it wrote and did not sync, as the kernel's dirty pages are not (folio's are the
/// process's memory).
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

/// Stores a snapshot of `cache`'s counters in `*out`.
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
        out.write(folio_stats::of(&cache.stats()));
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
