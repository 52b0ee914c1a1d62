//! The null backend: completes every read at once with zeros, touching no file.
//!
//! For trace replay (`folio-trace`), where what matters is which pages the cache keeps,
//! not their bytes: the cache runs its real miss path (allocation, insertion, reclaim,
//! completion) with the I/O taken out. A read completes inside `submit`, on the
//! submitting thread, which the backend contract allows.

use super::{Backend, ReadRequest};

/// Reads nothing, returns zeros. See the module docs.
#[derive(Debug, Default)]
pub struct NullBackend;

impl NullBackend {
    pub fn new() -> NullBackend {
        NullBackend
    }
}

impl Backend for NullBackend {
    fn name(&self) -> &str {
        "null"
    }

    fn submit(&self, batch: Vec<ReadRequest>) {
        for request in batch {
            let len = request.len_bytes();
            for buf in &request.bufs {
                // SAFETY: the request owns its buffers until `done` runs (module contract
                // of `io`): valid for writes of their length, and nobody else writes them.
                // Atomic stores: a stale optimistic reader may be loading from them.
                unsafe { super::atomic_zero(buf.as_ptr(), buf.len_bytes()) };
            }
            (request.done)(Ok(len));
        }
    }
}
