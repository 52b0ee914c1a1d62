//! What every entry point does before its own work, written once: run under the boundary
//! (a failure becomes `-errno`, a panic `-ENOTRECOVERABLE`; module `error`), look the
//! handle up under an epoch pin held for the whole call (module `handle`), and check an
//! out pointer before anything is done.
//!
//! ```text
//!  with_file(call, file, |f| ...)        with_cache(call, cache, |c| ...)
//!    boundary(call)                        the same, in the cache registry
//!      pin                   (1)
//!      FILES.get -> EBADF    (2-5 of the look-up protocol)
//!      body(&File)           (6: the guard outlives the body, I/O waits included)
//! ```
//!
//! A body that takes an out pointer checks it first with [`Out::new`] (`-EFAULT`, before
//! any work), and writes it last, on success only.
//!
//! An entry point whose order differs calls the pieces itself: `folio_open2` checks its
//! flags before the cache handle, so it looks the cache up with [`cache_of`] inside its
//! own boundary; `folio_close` and `folio_cache_destroy` remove rather than look up.
//!
//! Protection: nothing of its own; the pin is the registries' (module `handle`).

use std::ptr::NonNull;

use crossbeam_epoch::Guard;
use folio_rs::{Cache, File};

use crate::error::{boundary, Failure, Returns};
use crate::handle::{pin, Registry};
use crate::{folio_cache, folio_file, CACHES, FILES};

/// The failure for a handle that names nothing: `EBADF`, with what kind of handle it was
/// meant to be.
pub(crate) fn bad_handle(call: &str, what: &str, id: u64) -> Failure {
    Failure::new(
        libc::EBADF,
        format!("{call}: {id:#x} is not an open {what} handle (null, closed or never issued)"),
    )
}

/// The live object `id` names in `registry` (a `what` handle), valid while `guard` lives;
/// `EBADF` if none.
///
/// Context: any thread; lock-free; `guard` must come from `handle::pin`.
fn look_up<'g, T: Send + Sync>(
    call: &str,
    registry: &Registry<T>,
    what: &str,
    id: u64,
    guard: &'g Guard,
) -> Result<&'g T, Failure> {
    registry
        .get(id, guard)
        .map_err(|_| bad_handle(call, what, id))
}

/// The boundary, the pin and the look-up around `body`: the body of [`with_file`] and
/// [`with_cache`].
fn with_handle<T: Send + Sync, R: Returns>(
    call: &str,
    registry: &Registry<T>,
    what: &str,
    id: u64,
    body: impl FnOnce(&T) -> Result<R, Failure>,
) -> R {
    boundary(call, || {
        let guard = pin();
        body(look_up(call, registry, what, id, &guard)?)
    })
}

/// Runs the entry point `call` on the file `file` names: `body`'s value, or `-EBADF` if
/// `file` names no open file, or `-errno` of `body`'s failure, or `-ENOTRECOVERABLE` for
/// a panic (the boundary's rules). The file stays alive until `body` returns, even if
/// another thread closes it meanwhile.
///
/// Context: any thread; pins the handle registries' epoch for the call; `body`'s own
/// context applies.
pub(crate) fn with_file<R: Returns>(
    call: &str,
    file: folio_file,
    body: impl FnOnce(&File) -> Result<R, Failure>,
) -> R {
    with_handle(call, &FILES, "file", file.id, body)
}

/// [`with_file`] for a cache handle: `-EBADF` if `cache` names no live cache.
///
/// Context: as [`with_file`].
pub(crate) fn with_cache<R: Returns>(
    call: &str,
    cache: folio_cache,
    body: impl FnOnce(&Cache) -> Result<R, Failure>,
) -> R {
    with_handle(call, &CACHES, "cache", cache.id, body)
}

/// The live cache `cache` names, valid while `guard` lives; `EBADF` if none. For an entry
/// point that must check something else first (`folio_open2` its flags).
///
/// Context: any thread; lock-free; `guard` must come from `handle::pin`.
pub(crate) fn cache_of<'g>(
    call: &str,
    cache: folio_cache,
    guard: &'g Guard,
) -> Result<&'g Cache, Failure> {
    look_up(call, &CACHES, "cache", cache.id, guard)
}

/// A caller's out pointer, checked non-null before the call does anything, written once
/// at its end. Created and consumed within one entry point: it is neither kept nor sent
/// to another thread (`NonNull` is neither `Send` nor `Sync`).
pub(crate) struct Out<T>(NonNull<T>);

impl<T> Out<T> {
    /// `out`, or `EFAULT` ("`call`: `name` is NULL") if it is NULL.
    ///
    /// # Safety
    /// `out` is NULL or points to memory writable for one `T` until the entry point
    /// returns (the entry point's own `# Safety`, passed on).
    pub(crate) unsafe fn new(call: &str, name: &str, out: *mut T) -> Result<Out<T>, Failure> {
        NonNull::new(out)
            .map(Out)
            .ok_or_else(|| Failure::new(libc::EFAULT, format!("{call}: {name} is NULL")))
    }

    /// Stores `value`, without reading or dropping what the memory held (C's memory).
    pub(crate) fn write(self, value: T) {
        // SAFETY: non-null by construction, and `Out::new`'s caller guaranteed it writable
        // for one `T` until its entry point returns; an `Out` lives within that call.
        unsafe { self.0.as_ptr().write(value) }
    }
}
