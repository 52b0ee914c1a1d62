//! Waiting for a folio's I/O: a hashed wait table, never a spin.
//!
//! A reader that finds a LOCKED folio parks on the address of the folio's metadata in
//! `parking_lot_core`'s global hashed table (the kernel's folio wait table); the I/O
//! completion clears LOCKED and then unparks every thread parked on that address. The
//! `validate` callback re-checks LOCKED under the bucket's lock, so a wake-up between the
//! reader's check and its sleep is never lost. On a 2-core machine a spinning waiter would
//! steal the core the completion needs.
//!
//! A future (`File::read_at_async`) cannot park its thread: it leaves its waker in
//! `waker`'s table under the same key (`park_future`), and `wake_all` wakes both kinds
//! of waiters. That table is one per process too; `waker`'s docs give its protocol.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::task::Waker;

use crate::folio_meta::FolioMeta;
use crate::waker::{Park, Parking, WakerTable};

/// The futures parked on folios' I/O, of every cache in the process.
static FUTURES: LazyLock<WakerTable> = LazyLock::new(WakerTable::new);

/// The futures waiting for memory (a miss that found every folio pinned or in flight),
/// of every cache, under one key. See `park_for_memory`.
static MEMORY: LazyLock<WakerTable> = LazyLock::new(WakerTable::new);
const MEMORY_KEY: usize = 1;

/// Futures that hold a folio pinned between polls (`future_pinned`).
static HOLDING: AtomicU64 = AtomicU64::new(0);

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

/// Leaves `waker` to be woken when the folio is no longer LOCKED (`waker`'s P1-P3):
/// `Parked` if it still is (poll again when woken; `cancel_future` if the future goes
/// first), `Ready` if it no longer is (nothing left in the table). `parking` is the
/// same future's earlier parking, if any.
///
/// Context: the caller holds a reference on the folio and no lock; never sleeps.
pub fn park_future(meta: &FolioMeta, parking: Option<Parking>, waker: &Waker) -> Park {
    FUTURES.park(key(meta), parking, waker, || meta.state.load().is_locked())
}

/// Takes a parked future's waker out of the table (the future is dropped or done).
///
/// Context: no lock held; never sleeps.
pub fn cancel_future(parking: Parking) {
    FUTURES.cancel(parking);
}

/// A future holds a folio pinned between polls (it waits for the folio's read, or was
/// woken and is not polled yet): it will unpin it on its next poll or when dropped.
pub fn future_pinned() {
    HOLDING.fetch_add(1, Ordering::Relaxed);
}

/// A future that `future_pinned` is polled again (it is about to copy and unpin) or
/// dropped: wake the longest-waiting memory waiter, who may find its folio; when it was
/// the last such future, wake them all (no later one would: they poll again on their
/// own). Their `park_for_memory` checked `HOLDING` after parking; this checks `MEMORY`
/// after `HOLDING` moved, both behind SeqCst fences (`WakerTable`'s handshake).
pub fn future_unpinning() {
    if HOLDING.fetch_sub(1, Ordering::Relaxed) == 1 {
        MEMORY.wake_all(MEMORY_KEY);
    } else {
        MEMORY.wake_one(MEMORY_KEY);
    }
}

/// Leaves `waker` to be woken when memory may have come free, for a future whose miss
/// found every folio pinned or in flight: `Parked` while some future holds a folio
/// between polls (`future_pinned`: on its next poll it copies and unpins, and wakes a
/// memory waiter first); `Ready` when none does (the memory is held by threads, page
/// references or readahead in flight: poll again soon).
///
/// Context: no lock held; never sleeps.
pub fn park_for_memory(parking: Option<Parking>, waker: &Waker) -> Park {
    MEMORY.park(MEMORY_KEY, parking, waker, || {
        HOLDING.load(Ordering::Relaxed) > 0
    })
}

/// Takes a memory waiter's waker out (the future is dropped, or polls again); returns
/// whether it was still there (false: a hand-off woke it).
pub fn cancel_memory_wait(parking: Parking) -> bool {
    MEMORY.cancel(parking)
}

/// Futures parked on folio I/O or waiting for memory now, in the whole process.
pub fn futures_parked() -> u64 {
    FUTURES.parked() + MEMORY.parked()
}

/// Wakes every thread and every future waiting on the folio. Context: the caller just
/// cleared LOCKED or WRITEBACK.
pub fn wake_all(meta: &FolioMeta) {
    // SAFETY: as in `wait_unlocked`.
    unsafe {
        parking_lot_core::unpark_all(key(meta), parking_lot_core::DEFAULT_UNPARK_TOKEN);
    }
    FUTURES.wake_all(key(meta));
}
