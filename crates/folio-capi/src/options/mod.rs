//! The cache's options, `folio_cache_options`: the codes of its choices (the engine, the
//! eviction policy, the arena's pages, the capacity's policy), its defaults
//! (`folio_cache_options_init`, and the `FOLIO_*_DEFAULT` literals the header carries,
//! asserted equal to the library's), its layout as C sees it, and its checks:
//! `build_cache` turns a filled struct into the library's `Cache`, or an `EINVAL` that
//! names the field.
//!
//! The capacity (`capacities`): by default it follows the machine
//! (`FOLIO_CAPACITY_FOLLOW_MACHINE`, the library's `CapacityPolicy::FollowMachine`), and a
//! capacity of 0 means "what the machine affords". A capacity the caller gives is also the
//! most the cache takes unless `capacity_max_bytes` says more: a C program that asked for
//! 1 GiB before the capacity could move gets a cache that never holds more than 1 GiB and
//! gives memory back when the machine runs short. The whole table is on
//! `folio_cache_options.capacity_policy`.
//!
//! Protection: none needed; the options are the caller's, copied once per call.

use std::ffi::c_char;
use std::time::Duration;

use folio_rs::{ArenaPages, BackendKind, Cache, EvictionKind, KeptMemory, Prefault, Unusable};

mod capacity_settings;
mod segment_settings;

use capacity_settings::{capacity_settings, check_dirty_against_capacity, dirty_settings};
use segment_settings::{domain_settings, naming_settings, persistence_settings, NamingSettings};

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

/// `folio_cache_options.unusable_segment`: a named segment this library cannot adopt
/// (another layout, damaged) is removed and the cache starts cold (the default).
pub const FOLIO_UNUSABLE_SEGMENT_REPLACE: u32 = 0;
/// `folio_cache_options.unusable_segment`: a named segment this library cannot adopt fails
/// `folio_cache_create` with -EBADMSG and is left as it is.
pub const FOLIO_UNUSABLE_SEGMENT_REFUSE: u32 = 1;

/// `folio_cache_options.capacity_policy`: the capacity follows the machine's memory (the
/// default). A thread reads the machine's (or the cgroup's) memory every 50 ms: the cache
/// gives memory back when the machine runs short, and grows again, up to its largest
/// capacity, while a larger cache would hit. `folio_cache_set_capacity` moves it too.
pub const FOLIO_CAPACITY_FOLLOW_MACHINE: u32 = 0;
/// `folio_cache_options.capacity_policy`: the capacity stays where it was set, at creation
/// or by `folio_cache_set_capacity`.
pub const FOLIO_CAPACITY_FIXED: u32 = 1;

// Literals, so that cbindgen can write them; the asserts keep them equal to the library's.
/// The smallest capacity a cache accepts, in bytes (16 pages of 4 KiB).
pub const FOLIO_CAPACITY_BYTES_MIN: u64 = 65536;
/// The capacity of a cache asked to take what the machine affords (`capacity_bytes` 0)
/// where the machine's memory cannot be read (no /proc/meminfo): 256 MiB.
pub const FOLIO_CAPACITY_BYTES_FALLBACK: u64 = 268435456;
/// The maximum readahead window `folio_cache_options_init` sets: 16 MiB.
pub const FOLIO_READAHEAD_MAX_BYTES_DEFAULT: u64 = 16777216;

/// Bytes of a page: the dirty limit's floor.
const PAGE_BYTES: u64 = folio_rs::PAGE_BYTES as u64;

const _: () = assert!(FOLIO_CAPACITY_BYTES_MIN == folio_rs::CAPACITY_BYTES_MIN);
const _: () = assert!(FOLIO_CAPACITY_BYTES_FALLBACK == folio_rs::CAPACITY_BYTES_DEFAULT);
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

/// The share weight `folio_cache_options_init` sets: every process the same, equal shares.
pub const FOLIO_SHARE_WEIGHT_DEFAULT: u32 = 100;
/// The least and the most `share_weight` may be.
pub const FOLIO_SHARE_WEIGHT_MIN: u32 = 1;
pub const FOLIO_SHARE_WEIGHT_MAX: u32 = 10000;

const _: () = assert!(FOLIO_SHARE_WEIGHT_DEFAULT == folio_rs::SHARE_WEIGHT_DEFAULT);
const _: () = assert!(FOLIO_SHARE_WEIGHT_MIN == folio_rs::SHARE_WEIGHT_MIN);
const _: () = assert!(FOLIO_SHARE_WEIGHT_MAX == folio_rs::SHARE_WEIGHT_MAX);

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
    /// Bytes of memory for cached pages at creation (rounded down to 4 KiB), at least
    /// FOLIO_CAPACITY_BYTES_MIN; 0 (the default): what the machine affords (below). Address
    /// space for the largest capacity is reserved at creation; memory is touched as pages
    /// are cached, and given back when the capacity shrinks. `capacity_policy` says how it
    /// moves afterwards.
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
    /// FOLIO_DIRTY_LIMIT_PERCENT_DEFAULT percent of the capacity, following it as it
    /// moves. Else at least 4096 and at most the largest capacity (`capacity_max_bytes`,
    /// or as `capacity_policy` chose it); it stays put when the capacity moves, but never
    /// counts more than the capacity (a shrink below it writes the excess back).
    pub dirty_limit_bytes: u64,
    /// Above this much dirty memory, in bytes, the background writeback writes every
    /// dirty file, not only expired ones. 0 (the default):
    /// FOLIO_DIRTY_BACKGROUND_PERCENT_DEFAULT percent of the capacity (at most the dirty
    /// limit). Else at most the dirty limit (the default one: of the largest capacity; a
    /// threshold above the limit, as the capacity moves, acts as the limit).
    pub dirty_background_bytes: u64,
    /// Which pages back the cache's memory: FOLIO_ARENA_PAGES_AUTO (the default: huge
    /// pages for readahead's large folios, 4 KiB pages for random reads' small ones),
    /// _SMALL or _HUGE. See docs/benchmarks.md, "Arena pages".
    pub arena_pages: u32,
    /// How the capacity moves after creation: FOLIO_CAPACITY_FOLLOW_MACHINE (the default)
    /// or FOLIO_CAPACITY_FIXED. With `capacity_bytes` (N) and `capacity_max_bytes` 0:
    ///
    /// | policy         | N  | starts at                    | largest capacity              |
    /// |----------------|----|------------------------------|-------------------------------|
    /// | FOLLOW_MACHINE | 0  | what the machine affords     | the machine's memory, or the  |
    /// |                |    |                              | cgroup's limit                |
    /// | FOLLOW_MACHINE | >0 | N                            | N (it follows the machine     |
    /// |                |    |                              | below N)                      |
    /// | FIXED          | 0  | what the machine affords now | the same                      |
    /// | FIXED          | >0 | N                            | N                             |
    ///
    /// A nonzero `capacity_max_bytes` is the largest capacity instead (and bounds "what
    /// the machine affords"). "What the machine affords": the memory available without
    /// swapping (MemAvailable, or the room under the cgroup v2 limit) less a reserve and
    /// a half (the reserve: a sixteenth of the machine's memory or of the limit, 64 MiB
    /// to 2 GiB); FOLIO_CAPACITY_BYTES_FALLBACK where it cannot be read. Under either
    /// policy `folio_cache_set_capacity` moves the capacity, up to the largest.
    pub capacity_policy: u32,
    /// Write-behind: once a writer that appends (each write starts at or before the end
    /// of the file and passes it) has left this many bytes of whole pages dirty behind
    /// it, their writeback starts without waiting for it, so that the next sync finds
    /// most of them on the device. Writes inside the file are never written behind.
    /// 0: off (appended pages wait for a sync, the dirty expiry or the background
    /// threshold). Default: FOLIO_WRITE_BEHIND_BYTES_DEFAULT.
    pub write_behind_bytes: u64,
    /// The largest capacity, in bytes: its address space (and 32 bytes of metadata per
    /// 4 KiB, untouched until used) is reserved at creation, and neither
    /// `folio_cache_set_capacity` nor the machine policy goes past it. 0 (the default):
    /// see `capacity_policy`. Else at least the capacity at creation.
    pub capacity_max_bytes: u64,
    /// 1 (the default): what the cache holds outlives the process. Its memory is a
    /// segment file in `segment_dir` (mode 0600, removed when the cache goes), and a
    /// keeper process forked at creation writes back every dirty page if the process dies
    /// without doing so (SIGKILL, abort, the OOM killer), as the kernel does for buffered
    /// writes: a `folio_write` that returned survives a crash of the process (not of the
    /// machine: that takes a sync). It costs one sleeping process, a message to it per
    /// file opened for writing, and shared memory, which most kernels give no transparent
    /// huge pages; the largest capacity is bounded by the room in `segment_dir` (/dev/shm
    /// is half the memory by default), and a capacity at creation that does not fit fails
    /// with -ENOSPC. 0: the cache's memory is the process's own and dies with it (what a
    /// process killed with dirty pages wrote and did not sync is lost). Anything else:
    /// -EINVAL. See docs/persistence.md.
    pub persistent: u32,
    /// The directory of a persistent cache's segment file: an existing directory of the
    /// caller's effective user that no one else can write (no write bit for group or
    /// other), with no symlink anywhere in its path, on a file system in memory (tmpfs)
    /// unless `segment_dir_on_disk` is 1: else -EACCES (a symlink, another user's
    /// directory, one others can write) or -EOPNOTSUPP (a disk file system). NULL (the
    /// default): the user's private home /dev/shm/folio-<euid>, made mode 0700 at the
    /// first creation; if another user made it first, -EACCES (create the cache with a
    /// `segment_dir` of one's own, or `persistent` 0). Checked again at every adoption and
    /// recovery. Ignored when `persistent` is 0. Read during `folio_cache_create` only.
    /// See docs/persistence.md, "Where segments live".
    pub segment_dir: *const c_char,
    /// The segment file's name in `segment_dir`: one plain portable file name (not empty,
    /// not `.` or `..`, no `/`, no control character such as a newline, no leading `-`, at
    /// most 255 bytes; else -EINVAL). NULL (the default): a name new to this cache, and the
    /// segment is removed when the cache goes. A named segment outlives the cache (a clean
    /// exit, a kill after its keeper wrote back) and the next `folio_cache_create` with
    /// the same name and `segment_dir` adopts it: the clean pages of every file that did
    /// not change since are cached at once, with no read from disk
    /// (`folio_cache_adoption` says what was kept and dropped). A name in use by a live
    /// cache (of this process or another) fails with -EAGAIN: create the cache without a
    /// name to get one anyway. Ignored when `persistent` is 0. Read during
    /// `folio_cache_create` only. See docs/persistence.md.
    pub segment_name: *const c_char,
    /// What to do with a named segment this library cannot adopt (another layout, a
    /// damaged header): FOLIO_UNUSABLE_SEGMENT_REPLACE (the default: remove it and start
    /// cold) or FOLIO_UNUSABLE_SEGMENT_REFUSE (fail with -EBADMSG, the segment left as it
    /// is). Ignored without a `segment_name`.
    pub unusable_segment: u32,
    /// 1: `segment_dir` may be on a disk file system. Then the kernel writes the cache's
    /// memory (every cached page, as the segment file's dirty pages) to that device, and
    /// may read it back from it: disk traffic and space for bytes that only a cache
    /// holds. 0 (the default): such a directory fails with -EOPNOTSUPP. Anything else:
    /// -EINVAL. Ignored when `persistent` is 0. (It took the four bytes of padding after
    /// `unusable_segment`, which `folio_cache_options_init` zeroes.)
    pub segment_dir_on_disk: u32,
    /// 1 (the default): a named segment kept after the cache is gone (a clean exit, a
    /// kill after its keeper wrote back) is held by its steward, the cache's keeper
    /// staying: as the kernel's page cache gives a closed file's pages back under
    /// pressure, it punches the segment's coldest clean pages out when the machine (or
    /// the cgroup) runs short of memory or all kept segments of the user in the directory
    /// hold more than a quarter of the memory limit, and removes the segment after 6 hours
    /// unused. It never writes and never punches a dirty page; it leaves when the next
    /// cache of the name adopts the segment, and costs one sleeping process (a wake-up
    /// every 2 s when memory is plentiful). 0: the keeper exits once its work is done,
    /// and a kept segment holds its memory, which the kernel cannot reclaim (tmpfs without
    /// swap), until it is adopted or removed (`folio-stat remove`). Anything else:
    /// -EINVAL. Ignored without a `segment_name`. See docs/persistence.md, "Kept memory".
    pub kept_steward: u32,
    /// The domain this cache shares its pages with (docs/sharing.md, "A `Cache` with a
    /// domain"): every process of this user that creates a cache with the same `domain`
    /// (and `segment_dir`) shares one cache of the files it opens, so that a page one
    /// process read or wrote is a hit in every other. One plain portable file name, as
    /// `segment_name` (not empty, not `.` or `..`, no `/`, no control character, no
    /// leading `-`, at most 243 bytes: the domain's files add a suffix; else -EINVAL).
    /// Its files, named by the version of their layout (`<domain>.v12.domain`, its
    /// shared memory; `<domain>.v12.steward`; `<domain>.v12.sock`: a library of another
    /// version uses a domain of its own beside it) go in `segment_dir` when it is given,
    /// whatever `persistent`, else in the user's private home /dev/shm/folio-<euid>; the
    /// creation attaches to the domain's steward or forks one (`folio-steward`, which
    /// repairs what a dead member held, moves the domain's quota with the machine's memory
    /// and leaves 10 minutes after the last member). The first cache of a domain sizes it:
    /// one 4 KiB frame per 4 KiB of the machine's memory (or its cgroup's limit; at most
    /// what the directory's file system holds, and 1 TiB), not its `capacity_bytes`; its
    /// memory is used only as frames are; later ones do not change it. What goes through
    /// it: `folio_read` and `folio_read_many` of a file opened read-only (`folio_open`),
    /// with the domain's readahead; a file opened for writing keeps this cache's pages for
    /// its own reads and puts each page it writes into the domain before the write
    /// returns (one writing process per file); `folio_readahead` of a domain file reads
    /// the range into the domain on a worker thread of this process; a file the domain refuses (it changed while another process has it open,
    /// or its table of 4,096 files is full) is read privately. `folio_cache_domain_stats`
    /// gives this process's counts and share. NULL (the default): a private cache. Read
    /// during `folio_cache_create` only.
    pub domain: *const c_char,
    /// This process's weight in its `domain`'s division of the quota (docs/sharing.md,
    /// "Shares and floors"): its share is the quota times its weight over the summed
    /// weights of the processes attached, its floor half of that; another process's misses
    /// take this one's pages while it holds more than its share first, below its floor only
    /// when nothing else is left. FOLIO_SHARE_WEIGHT_MIN to FOLIO_SHARE_WEIGHT_MAX, else
    /// -EINVAL (also without a domain). Default: FOLIO_SHARE_WEIGHT_DEFAULT (equal shares).
    pub share_weight: u32,
}

// The layout C sees: the fields added with writes sit in the padding after `prefault`
// and at the end, so the earlier fields kept their offsets. `write_behind_bytes` came at
// the end (after four bytes of padding) rather than in that padding, so that the size
// changed (64 to 72) and `size` refuses a caller built against the older header instead
// of reading its padding as the field. The capacity's policy took those four bytes and
// its maximum the end, so the size changed again (72 to 80): a caller built before the
// capacity could move is refused, not read as asking for a machine-sized cache.
// Persistence took the end (`persistent`, four bytes of padding, `segment_dir`), so the
// size changed again (80 to 96): a caller built before it is refused rather than given,
// unknowingly, a cache that forks a keeper and lives in /dev/shm. Adoption took the end
// (`segment_name`, `unusable_segment` and four bytes of padding), so the size changed
// again (96 to 112): a caller built before it is refused rather than read past its struct.
const _: () = assert!(std::mem::offset_of!(folio_cache_options, dirty_expire_ms) == 36);
const _: () = assert!(std::mem::offset_of!(folio_cache_options, dirty_limit_bytes) == 40);
const _: () = assert!(std::mem::offset_of!(folio_cache_options, arena_pages) == 56);
const _: () = assert!(std::mem::offset_of!(folio_cache_options, write_behind_bytes) == 64);
const _: () = assert!(std::mem::offset_of!(folio_cache_options, capacity_policy) == 60);
const _: () = assert!(std::mem::offset_of!(folio_cache_options, capacity_max_bytes) == 72);
const _: () = assert!(std::mem::offset_of!(folio_cache_options, persistent) == 80);
const _: () = assert!(std::mem::offset_of!(folio_cache_options, segment_dir) == 88);
const _: () = assert!(std::mem::offset_of!(folio_cache_options, segment_name) == 96);
const _: () = assert!(std::mem::offset_of!(folio_cache_options, unusable_segment) == 104);
const _: () = assert!(std::mem::offset_of!(folio_cache_options, segment_dir_on_disk) == 108);
const _: () = assert!(std::mem::offset_of!(folio_cache_options, kept_steward) == 112);
// The steward's choice took the end (and four bytes of padding), so the size changed again
// (112 to 120): a caller built before it is refused rather than read past its struct.
// The domain took the end, so the size changed again (120 to 128): a caller built before
// it is refused rather than read past its struct.
const _: () = assert!(std::mem::offset_of!(folio_cache_options, domain) == 120);
// The share weight took the end (and four bytes of padding), so the size changed again
// (128 to 136): a caller built before it is refused rather than read past its struct.
const _: () = assert!(std::mem::offset_of!(folio_cache_options, share_weight) == 128);
const _: () = assert!(std::mem::size_of::<folio_cache_options>() == 136);

pub(crate) fn cache_options_default() -> folio_cache_options {
    folio_cache_options {
        size: std::mem::size_of::<folio_cache_options>() as u32,
        backend: FOLIO_BACKEND_AUTO,
        capacity_bytes: 0,
        readahead_max_bytes: FOLIO_READAHEAD_MAX_BYTES_DEFAULT,
        pread_threads: 0,
        eviction: FOLIO_EVICTION_S3FIFO,
        prefault: 0,
        dirty_expire_ms: FOLIO_DIRTY_EXPIRE_MS_DEFAULT,
        dirty_limit_bytes: 0,
        dirty_background_bytes: 0,
        arena_pages: FOLIO_ARENA_PAGES_AUTO,
        write_behind_bytes: FOLIO_WRITE_BEHIND_BYTES_DEFAULT,
        capacity_policy: FOLIO_CAPACITY_FOLLOW_MACHINE,
        capacity_max_bytes: 0,
        persistent: 1,
        segment_dir: std::ptr::null(),
        segment_name: std::ptr::null(),
        unusable_segment: FOLIO_UNUSABLE_SEGMENT_REPLACE,
        segment_dir_on_disk: 0,
        kept_steward: 1,
        domain: std::ptr::null(),
        share_weight: FOLIO_SHARE_WEIGHT_DEFAULT,
    }
}

/// Fills `*opts` with the defaults: FOLIO_BACKEND_AUTO, a capacity that follows the
/// machine from what it affords (`capacity_bytes` 0, FOLIO_CAPACITY_FOLLOW_MACHINE,
/// `capacity_max_bytes` 0: up to the machine's memory or the cgroup's limit),
/// FOLIO_READAHEAD_MAX_BYTES_DEFAULT, the default pread pool, FOLIO_EVICTION_S3FIFO, no
/// prefault, FOLIO_DIRTY_EXPIRE_MS_DEFAULT, the default dirty limit and background
/// threshold (0: percentages of the capacity), FOLIO_ARENA_PAGES_AUTO,
/// FOLIO_WRITE_BEHIND_BYTES_DEFAULT, a persistent cache (`persistent` 1) with its segment
/// in the user's private home /dev/shm/folio-<euid> (`segment_dir` NULL) under a name of
/// its own, removed with it (`segment_name` NULL), FOLIO_UNUSABLE_SEGMENT_REPLACE, no
/// segment directory on disk (`segment_dir_on_disk` 0), a kept segment's steward
/// (`kept_steward` 1), no domain (`domain` NULL: a private cache),
/// FOLIO_SHARE_WEIGHT_DEFAULT, and `size` set.
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

/// The library's `Cache` for the options `opts`, or the failure `folio_cache_create`
/// returns.
///
/// # Safety
/// `opts.segment_dir`, `opts.segment_name` and `opts.domain` are each NULL or point to a
/// NUL-terminated string readable during the call.
pub(crate) unsafe fn build_cache(opts: &folio_cache_options) -> Result<Cache, Failure> {
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
    // SAFETY: the caller's guarantee on `opts.segment_dir`.
    let segment_dir = unsafe { persistence_settings(opts) }?;
    let naming = match segment_dir {
        // SAFETY: the caller's guarantee on `opts.segment_name`.
        Some(_) => unsafe { naming_settings(opts) }?,
        None => NamingSettings {
            name: None,
            unusable: Unusable::Replace,
            steward: true,
        },
    };
    let capacity = capacity_settings(opts, segment_dir.as_ref().map(|p| p.room_dir()))?;
    let (limit, background) = dirty_settings(opts)?;
    let mut builder = Cache::builder()
        .capacity_policy(capacity.policy)
        .backend(backend)
        .readahead_max_bytes(opts.readahead_max_bytes)
        .eviction(eviction)
        .prefault(prefault)
        .arena_pages(arena_pages)
        .write_behind_bytes(opts.write_behind_bytes)
        .dirty_expire(Duration::from_millis(u64::from(opts.dirty_expire_ms)));
    if let Some(bytes) = capacity.capacity_bytes {
        builder = builder.capacity_bytes(bytes);
    }
    if let Some(bytes) = capacity.capacity_max_bytes {
        builder = builder.capacity_max_bytes(bytes);
    }
    if let Some(bytes) = limit {
        builder = builder.dirty_limit_bytes(bytes);
    }
    if let Some(bytes) = background {
        builder = builder.dirty_background_bytes(bytes);
    }
    if opts.pread_threads != 0 {
        builder = builder.pread_threads(opts.pread_threads as usize);
    }
    if let Some(place) = &segment_dir {
        builder = builder.persistent(true).segment_dir_on_disk(place.disk);
        if let Some(dir) = &place.dir {
            builder = builder.segment_dir(dir);
        }
        if let Some(name) = &naming.name {
            builder = builder
                .segment_name(name.as_str())
                .unusable_segment(naming.unusable)
                .kept_memory(KeptMemory {
                    steward: naming.steward,
                    ..KeptMemory::default()
                });
        }
    }
    if !(FOLIO_SHARE_WEIGHT_MIN..=FOLIO_SHARE_WEIGHT_MAX).contains(&opts.share_weight) {
        return Err(Failure::new(
            libc::EINVAL,
            format!(
                "{CALL}: share_weight {} outside {FOLIO_SHARE_WEIGHT_MIN}..={FOLIO_SHARE_WEIGHT_MAX}",
                opts.share_weight
            ),
        ));
    }
    builder = builder.share_weight(opts.share_weight);
    // SAFETY: the caller's guarantee on `opts.domain` and `opts.segment_dir`.
    if let Some(domain) = unsafe { domain_settings(opts) }? {
        builder = builder.domain(domain.name);
        if let Some(dir) = &domain.dir {
            builder = builder.segment_dir(dir);
        }
    }
    let persistent = segment_dir.is_some();
    let named = persistent && naming.name.is_some();
    let cache = builder.build().map_err(|e| {
        let mut failure = Failure::io(CALL, &e);
        if persistent && e.kind() == std::io::ErrorKind::StorageFull {
            failure.append(" (a smaller capacity_bytes, another segment_dir, or persistent = 0)");
        }
        if named && e.kind() == std::io::ErrorKind::WouldBlock {
            failure.append(" (segment_name is in use by a live cache; NULL: a segment of its own)");
        }
        if persistent && e.kind() == std::io::ErrorKind::Unsupported {
            failure.append(" (segment_dir_on_disk = 1 allows it, at the cost of disk traffic)");
        }
        failure
    })?;
    // Checked once the capacity is chosen: with `capacity_bytes` 0 only the library knows
    // it. A failure drops the cache (its threads stop) before the caller hears of it.
    check_dirty_against_capacity(opts, &cache)?;
    Ok(cache)
}
