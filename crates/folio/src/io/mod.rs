//! I/O backends: the thin layer that moves bytes between files and arena frames.
//!
//! The layers of `io/`, each importing only those below it:
//!
//! ```text
//!   io (this file): the module list, re-exports, and `open_backend` (BackendKind -> engine)
//!     fault/ ──wraps any──> Box<dyn Backend>
//!     uring  ──submit_waited──> sync      pread ──workers──> sync      null
//!   sync:    the preadv / pwritev loop over FrameBufs (every synchronous transfer), and
//!            fdatasync / fsync / ftruncate: every system call that moves or syncs file data
//!   backend: the contract: Backend, IoRequest, Op, FrameBuf, Completion, the constants
//! ```
//!
//! The contract, both sides' duties, is in [`backend`]. The engines:
//! - [`uring`]: io_uring, O_DIRECT, batched submission, one completion thread.
//! - [`pread`]: a pool of threads calling `preadv(2)` / `pwritev(2)`, for kernels or
//!   sandboxes that refuse io_uring.
//! - [`null`]: reads zeros and discards writes, touching no file, for trace replay of
//!   eviction policies.
//! - [`fault`]: wraps another backend and injects faults (EIO at chosen offsets, short
//!   transfers, delays, a seeded simulation) for tests; a real backend of the library, not
//!   a mock.
//!
//! Every engine moves reads, writes and flushes alike ([`Op`]); the cache submits only
//! reads today. No `pwritev`, `fsync`, `fdatasync` or `ftruncate` of the cache's files
//! happens outside `io/` (the truncation the write path needs is `sync::set_len`).
//!
//! Protection: none here; each engine's own docs say what protects its queue or ring.
//! Limits: see [`backend`] (alignment, `IO_BYTES_MAX`).

use std::io;

pub mod backend;
pub mod fault;
pub mod null;
pub mod pread;
pub(crate) mod sync;
#[cfg(test)]
pub(crate) mod testing;
pub mod uring;

pub(crate) use backend::atomic_zero;
pub use backend::{
    Backend, Completion, FlushKind, FrameBuf, FrameBufs, IoBatch, IoRequest, Op,
    DIRECT_IO_ALIGN_BYTES, IO_BYTES_MAX,
};

/// Which engine a cache uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BackendKind {
    /// io_uring where the kernel allows it, else the pread pool.
    #[default]
    Auto,
    IoUring,
    Pread,
}

/// Builds the backend for `kind`. `Auto` falls back to the pread pool when io_uring is
/// refused (old kernel, seccomp sandbox, `io_uring_disabled` sysctl).
///
/// Context: starts the engine's threads (and, for io_uring, a ring); no lock held.
pub fn open_backend(kind: BackendKind, pread_threads: usize) -> io::Result<Box<dyn Backend>> {
    match kind {
        BackendKind::IoUring => Ok(Box::new(uring::UringBackend::new(uring::QUEUE_DEPTH)?)),
        BackendKind::Pread => Ok(Box::new(pread::PreadBackend::new(pread_threads)?)),
        BackendKind::Auto => match uring::UringBackend::new(uring::QUEUE_DEPTH) {
            Ok(backend) => Ok(Box::new(backend)),
            Err(_) => Ok(Box::new(pread::PreadBackend::new(pread_threads)?)),
        },
    }
}
