//! The atomics that folio's lock-free protocols are written against.
//!
//! `refcount`, `version` and `waker` name their atomics (and `waker` its mutex) through this module and nothing else, so
//! the loom models in `tests/loom_models.rs` compile the very same source files against
//! loom's atomics (they supply their own `primitive` module with the same names), as
//! crossbeam's private `primitive` module does.

pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
pub(crate) use std::sync::Mutex;

/// Runs a test body: directly here, under `loom::model` in the loom build, so the unit
/// tests of `refcount` and `version` are model-checked too.
#[cfg(test)]
pub(crate) fn model(body: impl Fn() + Sync + Send + 'static) {
    body()
}
