//! folio: a page cache in user space for files read and written with O_DIRECT.
//!
//! It gives a storage engine what the kernel's page cache gives buffered I/O (cached
//! pages, eviction that stays within a memory budget, readahead, and buffered writes with
//! writeback and syncs) with the kernel's
//! design (folios in a radix tree, shadow entries) and without its scalability walls (one
//! lock hold per inserted folio, a CAS loop on every hit).
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! let cache = folio::Cache::builder().capacity_bytes(1 << 30).build()?;
//! let file = cache.open("/var/lib/db/000123.sst")?;
//! let mut buf = vec![0u8; 8192];
//! let n = file.read_at(&mut buf, 4096 * 10 + 100)?;   // any offset, any length
//! let page = file.get_page(0)?;                        // zero-copy, pinned until dropped
//! println!("{n} bytes; first folio {} bytes; {:?}", page.len(), cache.stats());
//! # Ok(()) }
//! ```
//!
//! # Parts (DESIGN.md §2) and their modules
//!
//! From the top of the read path down; each module imports only modules below it, so
//! there is no import loop (ARCHITECTURE.md has the table and the layer list, which
//! `tests/layers.rs` checks against the imports):
//! - `cache`: the `Cache` users open files with, its builder (`cache::builder`), the open
//!   of a file (`cache::open`) and a persistent cache's segment at build (`cache::persistent`).
//! - `file`: the read API (`read_at`, `get_page`) and its optimistic hit path; its slow
//!   path's look-up and settling (`pinned`); where reads ask `readahead` for a window, on
//!   a miss or at a marker, and forced readahead (`file::prefetch`); `advise`;
//!   `file::modify`, the write API (`write_at`, `set_len`, the syncs).
//! - `write`: the write side, one owner of its state (`write/mod.rs` maps its rooms: a
//!   write's steps on a folio, writeback, the sync, the writeback thread and queue,
//!   each file's write state, the dirty-block mask, the dirty budget, the error
//!   sequence). Its low rooms sit below `mapping` and `memory`, its high ones here.
//! - `filemap`: the miss path: run allocation and insertion, one read per run, and the
//!   reads' completions.
//! - `pagecache`: the shared core (memory, mappings, reclaimer, backend, the queue of
//!   dirty files), folio allocation with direct reclaim and the capacity's mechanism
//!   (`set_capacity`); `reclaim`: eviction of isolated victims, shadows, watermarks and
//!   the background thread.
//! - `mapping`: one file's pages and the lookup protocol (`find_get`); invalidation
//!   (`mapping::invalidate`); the mapping table and its lifetime protocol
//!   (`mapping::table`).
//! - `memory`: the arena, the eviction policy, the counters and the dirty budget as the
//!   parts below see them; `eviction`: the policy trait and its two policies, S3-FIFO (`s3fifo`, the
//!   default) and the kernel's two-list LRU with refault distance (`lru`).
//! - `capacity`: the capacity's policy (its bounds, the dirty limits sized from it, the
//!   thread that follows the machine's memory: `machine`, `follow`), which moves the
//!   capacity through `CapacityMechanism`, implemented by the page cache above.
//! - `readahead`: the on-demand window as a pure policy (`window`), the per-handle state
//!   word it is installed in (`cell`), and the cache-wide limit on every handle's window
//!   (`limit`).
//! - `index`: the radix tree (`node`, its lock-free walks in `lookup`, its write guard in
//!   `guard`).
//! - `folio_meta`: a frame's metadata (`FolioMeta`, the side-table entry): the state word (`refcount`) and the optimistic read
//!   latch (`version`); `wait`: parking on a folio's I/O (threads, and futures'
//!   wakers in `waker`'s table).
//! - `arena`: all folio memory, one mapping cut into frames (`mod.rs`); its buddy
//!   allocator (`buddy`), its growth by 2 MiB chunks (`chunk`) populated ahead of the
//!   allocator (`populate`), each chunk's pages (`pages`) and the byte-wise atomic copies
//!   in and out of frames (`copy`); `list`: the intrusive lists of frames (free lists,
//!   eviction queues).
//! - `io`: the backend contract (`backend`: reads and writes as one request type), the one
//!   synchronous `preadv`/`pwritev` loop (`sync`), the factory, and the engines (`uring`,
//!   `pread`, `fault`, `null`).
//! - `recovery`: a segment whose keeper was killed, finished by another process
//!   (`recover_segment`, a new cache's `settle_dir`); above `keeper`. `keeper`: the
//!   process that writes back a dead owner's dirty pages (DESIGN.md §9); above `write` and
//!   `arena`. `segment`: the shared-memory file a persistent cache's arena lives in (its
//!   life, its space, who holds it, its layout), the owner's line to its keeper, its
//!   published counters (`published`), the segments in a directory (`discovery`:
//!   `segments_in`) and the view of it from outside (`view`: `SegmentView`,
//!   `remove_segment`); below `arena`.
//! - `stats` (counters), `types` (newtypes), `primitive` (the atomics loom swaps in),
//!   `fuzzing` (fuzz bodies, for cargo-fuzz and tests only).
//!
//! `unsafe` is denied in the crate and allowed only in the modules that need it (named,
//! with why, in ARCHITECTURE.md): `arena` (but its `buddy` and `chunk`), `index`'s `node`,
//! `io`, `keeper`, `recovery`, `segment` and `wait`.
//!
//! # Lock ordering
//!
//! ```text
//! MappingTable (RwLock: read by open and reclaim's look-up, written by open of a new file
//!   and by a removal from close, reclaim or a completion; never held across the locks
//!   below, but a removal (step R4) holds it across the write state's descriptor mutex,
//!   `fstat` and `ftruncate`: mapping/table.rs)
//! a file's write ranges (WriteState::lock_range: a write_at's bytes for its whole call,
//!   the whole file for set_len; held while waiting at the dirty limit)
//! a file's writer lock (WriteState::lock_writer: write_at, set_len, a sync's size fix-up)
//!   └── everything below; never held while waiting at the dirty limit
//! Mapping::stamp (revalidate): taken alone, dropped before the index lock
//! Reclaimer's shadow log: taken alone, dropped before any index lock
//! a Mapping's index lock (Index::lock, one mapping at a time)
//!   └── the eviction policy's mutex (insert, remove, putback; isolate takes it alone)
//!         └── the arena's free lists (Arena::alloc / free)
//! parking_lot_core bucket locks: inside park/unpark only, nothing held across them.
//! the futures' wait table's shard locks (waker): taken alone, no waker woken under one.
//! DirtyFiles' queue and wake flag, DirtyBudget's waiters, InFlight's tickets: each taken
//!   alone, never across another lock.
//! the arena's wait for its last chunks (Chunks::listed_lock) and the populator's mutex
//!   (Populator::stop): leaves, no lock taken under either.
//! ```
//!
//! No lock is held across I/O or while waiting for I/O, but the writer lock: a writer
//! waits under it for a read of the page it writes, or for its writeback (whose
//! completion never takes the writer lock, so it always completes). Folio allocation (which may
//! reclaim) happens before the index lock is taken for insertion.

#![warn(missing_debug_implementations)]
#![deny(unsafe_code)]

// `unsafe` is denied above except in the modules marked `#[allow(unsafe_code)]` below
// (and `index::node`); ARCHITECTURE.md says why each needs it.
mod adopt;
#[allow(unsafe_code)]
mod arena;
mod cache;
mod capacity;
mod eviction;
mod file;
mod filemap;
mod folio_meta;
// Fuzz bodies for private parts (docs/reliability.md): built for cargo-fuzz and tests only.
#[cfg(any(fuzzing, test))]
#[doc(hidden)]
pub mod fuzzing;
mod index;
#[allow(unsafe_code)]
pub mod io;
#[allow(unsafe_code)]
mod keeper;
mod list;
mod mapping;
mod memory;
mod pagecache;
mod primitive;
mod readahead;
mod reclaim;
#[allow(unsafe_code)]
mod recovery;
mod refcount;
#[allow(unsafe_code)]
mod segment;
// Issue 45's steps 1 and 2 (docs/sharing.md): not wired into the cache yet, used by its
// tests and models only.
#[allow(dead_code)]
mod shared;
mod stats;
mod types;
mod version;
#[allow(unsafe_code)]
mod wait;
mod waker;
mod write;

pub use adopt::{Adoption, Unusable};
pub use arena::ArenaPages;
pub use cache::segment_home;
pub use cache::segment_room_capacity_bytes;
pub use cache::{
    Cache, CacheBuilder, DomainStats, OpenOptions, Prefault, DIRTY_EXPIRE_DEFAULT, DOMAIN_LINGER,
    READAHEAD_MAX_BYTES_DEFAULT, SHARE_WEIGHT_DEFAULT, SHARE_WEIGHT_MAX, SHARE_WEIGHT_MIN,
    WRITE_BEHIND_BYTES_DEFAULT,
};
pub use capacity::{machine_capacity_bytes, CapacityPolicy};
pub use capacity::{
    CAPACITY_BYTES_DEFAULT, CAPACITY_BYTES_MIN, DIRTY_BACKGROUND_PERCENT_DEFAULT,
    DIRTY_LIMIT_PERCENT_DEFAULT,
};
pub use eviction::{EvictionKind, ReadHint};
pub use file::{
    Advice, File, GetPageFuture, PageRef, ReadAtFuture, ReadManyFuture, ReadaheadWindow,
};
pub use io::BackendKind;
pub use keeper::{trim_kept_segment, KeptMemory, Trimmed, Written};
pub use recovery::{recover_segment, Recovered};
pub use segment::layout::SegmentState;
pub use segment::view::{remove_segment, FileUsage, PublishedStats, SegmentView};
pub use segment::Holder as SegmentHolder;
pub use segment::{check_name as check_segment_name, DiskDir};
pub use segment::{segments_in, SegmentInfo};
pub use shared::domain::{DomainFiles, DOMAIN_NAME_MAX};
pub use shared::view::{DomainProcess, DomainSummary, DomainView};
pub use stats::{FileStats, StatField, Stats};
pub use types::PAGE_BYTES;
