//! The C ABI of folio: `include/folio.h`, built as `libfolio.so` and `libfolio.a`.
//!
//! A C program creates a cache, opens files through it, and reads them like `pread(2)`:
//!
//! ```c
//! folio_cache_options opts;
//! folio_cache_options_init(&opts);
//! opts.capacity_bytes = 1ull << 30;   /* 0 (the default): what the machine affords */
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
//! # Modules
//!
//! The parts of the API, in the order `include/folio.h` lists them:
//!
//! - `options`: `folio_cache_options`, its defaults (`folio_cache_options_init`) and its
//!   checks, which build the library's `Cache`.
//! - `cache`: `folio_cache_create`, `folio_cache_destroy`, the capacity at run time
//!   (`folio_cache_set_capacity`, `folio_cache_capacity`, `folio_cache_capacity_max`),
//!   a persistent cache's keeper and segment (`folio_cache_keeper_pid`,
//!   `folio_cache_segment_path`, `folio_cache_segment_not_kept_because`), and the counters (`folio_cache_stats`,
//!   `folio_stats_format`).
//! - `read`: `folio_open` and `folio_close`; `folio_read`, `folio_read_hint`,
//!   `folio_read_many`; `folio_readahead`, `folio_advise`; a handle's length and counters.
//! - `error`: the boundary (a failure becomes `-errno`, a panic `-ENOTRECOVERABLE`) and
//!   `folio_last_error_message`.
//! - `write`: the writes, the syncs, the removal of a file.
//!
//! and what they share: `entry` (what every entry point does before its own work),
//! `handle` (the registries behind the handles: their look-up protocol), `stats`
//! (`folio_stats`, generated from the library's counter list). The crate root holds the
//! two handle types and their registries.
//!
//! # Conventions
//!
//! - Every function returns `0` (or a count) on success and a negative errno on failure
//!   (`-EBADF`, `-EINVAL`, the `-errno` of a failed system call, ...). The message of the
//!   calling thread's last failure is kept for `folio_last_error_message`.
//! - No panic crosses the boundary: every entry point runs under `catch_unwind`, and an
//!   internal panic comes back as `-ENOTRECOVERABLE` with its message. One exception: a
//!   panic while the process holds a lock of its cache's domain aborts the process, so
//!   that the domain's steward mends the domain as after a death (docs/sharing.md, "A
//!   panic under a lock of the domain").
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

// In the order of the list above, which is include/folio.h's: cbindgen writes the crate
// root's items, then each module's in the order of these declarations (the blank lines
// keep rustfmt from sorting them).
mod options;

mod cache;

mod read;

mod error;

mod write;

// What they share.
mod entry;
mod handle;
mod stats;

use folio_rs::{Cache, File};

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
