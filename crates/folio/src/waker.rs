//! The wait table of futures: where an async read parks on a folio's I/O.
//!
//! `wait` parks threads in `parking_lot_core`'s hashed table; a future cannot park a
//! thread, so it leaves its `Waker` here, under the same key (the address of the folio's
//! metadata), and the completion that clears LOCKED wakes it. One table per process, as
//! the kernel has one folio wait table: the key names the frame, the table does not need
//! to know its cache.
//!
//! The protocol (a Dekker handshake: each side stores, fences, then loads what the other
//! stored, so at least one of them sees the other):
//!
//! ```text
//!  future (`park`)                             completion (`wake_all`)
//!  P1. lock the key's shard; push (key, id,    C1. clear LOCKED (the state word's RMW)
//!      waker); `parked += 1`                   C2. fence(SeqCst)
//!  P2. fence(SeqCst)                           C3. load `parked`; 0: done, nobody parks
//!  P3. load the folio's state: still LOCKED?   C4. lock the key's shard, take out every
//!      yes: unlock, `Parked` (C4 will find         entry of the key, unlock, wake them
//!      the entry). no: take the entry out
//!      again, unlock, `Ready`
//! ```
//!
//! The interleavings that matter:
//! - C3 runs before P1's increment is visible: then C1 is visible to P3 (P2 and C2 are
//!   both SeqCst fences, so P3 cannot miss C1 while C3 misses P1), and the future does
//!   not park.
//! - C3 sees the increment while P1 still holds the shard: C4 waits for the lock, and
//!   then finds the entry (P1 pushed it before `parked` moved, under the lock).
//! - Both see each other: the future returns `Ready` and C4 finds no entry of it, or
//!   C4 wakes a future that already returned `Ready` (a spurious wake, harmless).
//!
//! A future that is dropped while parked takes its entry out (`cancel`); a future that
//! parks again refreshes its waker in place (one entry per future, found by its id).
//! `tests/loom_models.rs` checks the protocol (`async_park_vs_completion`, and the memory
//! waiters' hand-off of `wait::park_for_memory`: `memory_waiter_vs_last_holder`), and
//! that a completion that wakes before it clears fails (`*_broken_*`).
//!
//! Protection: each shard's `Mutex` protects its entries; `parked` counts the entries of
//! all shards (changed under a shard's lock, read without one by C3).
//!
//! Limits: `SHARDS` shards; a shard's entries are a `Vec` searched linearly (a folio's
//! waiters and its shard's neighbours: few, since a future parks only on a folio in
//! flight). The table allocates when a shard's `Vec` grows, on a miss's path only.

use std::ops::DerefMut;
use std::task::Waker;

use crate::primitive::{fence, AtomicU64, Mutex, Ordering};

/// Shards of the table: a power of two.
const SHARDS: usize = 64;

/// A future's place in the table while it is parked: its key and its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Parking {
    key: usize,
    id: u64,
}

/// What `park` found after leaving the waker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Park {
    /// Still busy: the waker stays until a `wake_all` of the key (or `cancel`).
    Parked(Parking),
    /// No longer busy: nothing stays in the table; poll on.
    Ready,
}

struct Entry {
    key: usize,
    id: u64,
    waker: Waker,
}

pub(crate) struct WakerTable {
    shards: Vec<Mutex<Vec<Entry>>>,
    /// Entries in all shards (C3's early exit).
    parked: AtomicU64,
    next_id: AtomicU64,
}

impl WakerTable {
    pub(crate) fn new() -> WakerTable {
        WakerTable {
            shards: (0..SHARDS).map(|_| Mutex::new(Vec::new())).collect(),
            parked: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
        }
    }

    fn shard(&self, key: usize) -> impl DerefMut<Target = Vec<Entry>> + '_ {
        // The key is an address of 8-byte aligned metadata: drop the low bits, mix.
        let i = ((key >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// P1-P3: leaves `waker` under `key` (replacing the waker of `parking`, the same
    /// future's earlier parking, if it is still there), then asks `busy` again.
    ///
    /// Context: the caller holds a reference on the folio whose metadata `key` is the
    /// address of, and will poll again when woken. Takes a shard's lock; never sleeps.
    pub(crate) fn park(
        &self,
        key: usize,
        parking: Option<Parking>,
        waker: &Waker,
        busy: impl Fn() -> bool,
    ) -> Park {
        let mut shard = self.shard(key);
        let parking = match parking.filter(|t| t.key == key) {
            Some(t) if refresh(&mut shard, t, waker) => t,
            _ => {
                let t = Parking {
                    key,
                    id: self.next_id.fetch_add(1, Ordering::Relaxed),
                };
                shard.push(Entry {
                    key,
                    id: t.id,
                    waker: waker.clone(),
                });
                self.parked.fetch_add(1, Ordering::Relaxed);
                t
            }
        };
        fence(Ordering::SeqCst); // P2: pairs with C2
        if busy() {
            return Park::Parked(parking);
        }
        self.remove(&mut shard, parking);
        Park::Ready
    }

    /// Takes the entry of a future that stops waiting (dropped, or done) out, if a
    /// `wake_all` has not already.
    ///
    /// Context: takes a shard's lock; never sleeps.
    /// Returns whether the entry was still there.
    pub(crate) fn cancel(&self, parking: Parking) -> bool {
        let mut shard = self.shard(parking.key);
        self.remove(&mut shard, parking)
    }

    fn remove(&self, shard: &mut Vec<Entry>, parking: Parking) -> bool {
        let Some(i) = shard
            .iter()
            .position(|e| e.key == parking.key && e.id == parking.id)
        else {
            return false;
        };
        shard.swap_remove(i);
        self.parked.fetch_sub(1, Ordering::Relaxed);
        true
    }

    /// C2-C4: wakes every future parked under `key`; returns how many.
    ///
    /// Context: the caller just cleared the bit the futures wait on (C1). Takes a shard's
    /// lock only when some future is parked anywhere; wakes after unlocking.
    pub(crate) fn wake_all(&self, key: usize) -> usize {
        fence(Ordering::SeqCst); // C2: pairs with P2
        if self.parked.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        let mut woken = Vec::new();
        {
            let mut shard = self.shard(key);
            let mut i = 0;
            while i < shard.len() {
                if shard[i].key == key {
                    woken.push(shard.swap_remove(i).waker);
                    self.parked.fetch_sub(1, Ordering::Relaxed);
                } else {
                    i += 1;
                }
            }
        }
        let n = woken.len();
        woken.into_iter().for_each(Waker::wake);
        n
    }

    /// C2-C4 for the longest-parked future under `key` only (the memory waiters' hand-off:
    /// one leaving future frees about one folio); returns whether one was woken.
    ///
    /// Context: as `wake_all`.
    pub(crate) fn wake_one(&self, key: usize) -> bool {
        fence(Ordering::SeqCst); // C2: pairs with P2
        if self.parked.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let waker = {
            let mut shard = self.shard(key);
            let oldest = shard
                .iter()
                .enumerate()
                .filter(|(_, e)| e.key == key)
                .min_by_key(|(_, e)| e.id)
                .map(|(i, _)| i);
            let Some(i) = oldest else {
                return false;
            };
            self.parked.fetch_sub(1, Ordering::Relaxed);
            shard.swap_remove(i).waker
        };
        waker.wake();
        true
    }

    /// Futures parked now.
    pub(crate) fn parked(&self) -> u64 {
        self.parked.load(Ordering::Relaxed)
    }
}

/// Replaces the waker of `parking`'s entry; false if it is gone (woken meanwhile).
fn refresh(shard: &mut [Entry], parking: Parking, waker: &Waker) -> bool {
    match shard
        .iter_mut()
        .find(|e| e.key == parking.key && e.id == parking.id)
    {
        Some(e) => {
            if !e.waker.will_wake(waker) {
                e.waker = waker.clone();
            }
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::task::Wake;

    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn flag() -> (Arc<Flag>, Waker) {
        let f = Arc::new(Flag(AtomicBool::new(false)));
        (f.clone(), Waker::from(f))
    }

    #[test]
    fn a_parked_future_is_woken_once_and_leaves_nothing() {
        crate::primitive::model(a_parked_future_is_woken_once);
    }

    fn a_parked_future_is_woken_once() {
        let table = WakerTable::new();
        let (f, waker) = flag();
        let Park::Parked(t) = table.park(8, None, &waker, || true) else {
            panic!("busy: parks");
        };
        // Parking again (a second poll) keeps one entry.
        assert_eq!(table.park(8, Some(t), &waker, || true), Park::Parked(t));
        assert_eq!(table.parked(), 1);
        assert_eq!(table.wake_all(16), 0, "another key: not this future");
        assert!(!f.0.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(table.wake_all(8), 1);
        assert!(f.0.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(table.parked(), 0);
        assert!(!table.cancel(t), "after the wake: nothing to take out");
        assert_eq!(table.parked(), 0);
    }

    #[test]
    fn no_longer_busy_or_cancelled_leaves_nothing() {
        crate::primitive::model(no_longer_busy_or_cancelled);
    }

    fn no_longer_busy_or_cancelled() {
        let table = WakerTable::new();
        let (_, waker) = flag();
        assert_eq!(table.park(8, None, &waker, || false), Park::Ready);
        assert_eq!(table.parked(), 0);
        let Park::Parked(t) = table.park(8, None, &waker, || true) else {
            panic!("busy: parks");
        };
        assert!(table.cancel(t));
        assert_eq!(table.parked(), 0);
    }

    #[test]
    fn wake_one_wakes_the_longest_parked() {
        crate::primitive::model(wake_one_wakes_the_oldest);
    }

    fn wake_one_wakes_the_oldest() {
        let table = WakerTable::new();
        let (first, w1) = flag();
        let (second, w2) = flag();
        assert!(matches!(table.park(8, None, &w1, || true), Park::Parked(_)));
        assert!(matches!(table.park(8, None, &w2, || true), Park::Parked(_)));
        assert!(table.wake_one(8));
        assert!(first.0.load(std::sync::atomic::Ordering::SeqCst));
        assert!(!second.0.load(std::sync::atomic::Ordering::SeqCst));
        assert!(table.wake_one(8));
        assert!(second.0.load(std::sync::atomic::Ordering::SeqCst));
        assert!(!table.wake_one(8));
        assert_eq!(table.parked(), 0);
    }
}
