//! Waiting for a folio's I/O: a hashed wait table, never a spin.
//!
//! A reader that finds a LOCKED folio parks on the address of the folio's metadata in
//! `parking_lot_core`'s global hashed table (the kernel's folio wait table); the I/O
//! completion clears LOCKED and then unparks every thread parked on that address. The
//! `validate` callback re-checks LOCKED under the bucket's lock, so a wake-up between the
//! reader's check and its sleep is never lost. On a 2-core machine a spinning waiter would
//! steal the core the completion needs.

use crate::folio::FolioMeta;

fn key(meta: &FolioMeta) -> usize {
    meta as *const FolioMeta as usize
}

/// Sleeps until the folio is not LOCKED.
///
/// Context: the caller holds a reference on the folio (so its metadata keeps describing
/// the same folio) and no lock. May sleep.
pub fn wait_unlocked(meta: &FolioMeta) {
    wait_while(meta, |state| state.is_locked());
}

/// Sleeps until the folio is not under WRITEBACK (DESIGN.md §8's stable pages).
///
/// Context: no lock held. The caller holds a reference, or knows the folio cannot leave
/// the index while under writeback (then a stale wait only waits for another
/// incarnation's write). Completions wake with `wake_all` after clearing WRITEBACK.
pub fn wait_writeback_done(meta: &FolioMeta) {
    wait_while(meta, |state| state.is_writeback());
}

fn wait_while(meta: &FolioMeta, busy: impl Fn(crate::refcount::StateWord) -> bool) {
    while busy(meta.state.load()) {
        // SAFETY: the callbacks neither panic nor call into parking_lot; the key is the
        // address of metadata that lives as long as the cache.
        unsafe {
            parking_lot_core::park(
                key(meta),
                || busy(meta.state.load()),
                || {},
                |_, _| {},
                parking_lot_core::DEFAULT_PARK_TOKEN,
                None,
            );
        }
    }
}

/// Wakes every thread waiting on the folio. Context: the caller just cleared LOCKED or
/// WRITEBACK.
pub fn wake_all(meta: &FolioMeta) {
    // SAFETY: as in `wait_unlocked`.
    unsafe {
        parking_lot_core::unpark_all(key(meta), parking_lot_core::DEFAULT_UNPARK_TOKEN);
    }
}
