//! folio: a page cache in user space for files read with O_DIRECT.
//!
//! It gives a storage engine what the kernel's page cache gives buffered I/O (cached
//! pages, eviction that stays within a memory budget, and readahead) with the kernel's
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
//! `cache` (builder, allocation) -> `file` (the read API and its hit path) -> `readahead`
//! (the window policy, pure) and `filemap` (the miss path, completions) -> `mapping` (one
//! file's pages, the lookup protocol) -> `index` (radix tree) and `folio` (metadata: `refcount`,
//! `version`) -> `arena` (memory, buddy allocator); `reclaim` (CLOCK); `wait` (parked
//! waiters); `io` (backends: `uring`, `pread`, `fault`); `stats`.
//!
//! # Lock ordering
//!
//! ```text
//! MappingTable (RwLock: read by open and reclaim's look-up, written by open of a new file
//!   and by a removal from close, reclaim or a completion; never held across the others)
//! Mapping::stamp (revalidate): taken alone, dropped before the index lock
//! Reclaimer's shadow log: taken alone, dropped before any index lock
//! a Mapping's index lock (Index::lock, one mapping at a time)
//!   └── the eviction policy's mutex (insert, remove, putback; isolate takes it alone)
//!         └── the arena's free lists (Arena::alloc / free)
//! parking_lot_core bucket locks: inside park/unpark only, nothing held across them.
//! ```
//!
//! No lock is held across I/O or while waiting for I/O. Folio allocation (which may
//! reclaim) happens before the index lock is taken for insertion.

#![warn(missing_debug_implementations)]

mod arena;
mod cache;
mod eviction;
mod file;
mod filemap;
mod folio;
// Fuzz bodies for private parts (docs/reliability.md): built for cargo-fuzz and tests only.
#[cfg(any(fuzzing, test))]
#[doc(hidden)]
pub mod fuzzing;
mod index;
pub mod io;
mod list;
mod mapping;
mod memory;
mod pagecache;
mod primitive;
mod readahead;
mod reclaim;
mod refcount;
mod stats;
mod types;
mod version;
mod wait;

pub use cache::{
    Cache, CacheBuilder, Prefault, CAPACITY_BYTES_DEFAULT, CAPACITY_BYTES_MIN,
    READAHEAD_MAX_BYTES_DEFAULT,
};
pub use eviction::EvictionKind;
pub use file::{Advice, File, PageRef, ReadaheadWindow};
pub use io::BackendKind;
pub use stats::{StatField, Stats};
pub use types::PAGE_BYTES;
