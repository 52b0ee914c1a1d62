//! The cache's options, `folio_cache_options`: the codes of its choices (the engine, the
//! eviction policy, the arena's pages), its defaults (`folio_cache_options_init`, and the
//! `FOLIO_*_DEFAULT` literals the header carries, asserted equal to the library's), its
//! layout as C sees it, and its checks: `build_cache` turns a filled struct into the
//! library's `Cache`, or an `EINVAL` that names the field.
//!
//! Protection: none needed; the options are the caller's, copied once per call.

use std::time::Duration;

use folio_rs::{ArenaPages, BackendKind, Cache, EvictionKind, Prefault};

use crate::entry::Out;
use crate::error::{boundary, Failure};

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

pub(crate) fn cache_options_default() -> folio_cache_options {
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

pub(crate) fn build_cache(opts: &folio_cache_options) -> Result<Cache, Failure> {
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
