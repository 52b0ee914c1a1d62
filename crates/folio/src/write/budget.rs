//! The dirty budget (DESIGN.md §8): how much memory writes may hold unclean, and the
//! throttle that makes writers wait for writeback when they reach it.
//!
//! Pages that cannot be reclaimed because of writes (dirty, under writeback, or reserved by
//! a writer about to dirty them) are counted in one atomic (`DirtyBudget::pages`). A writer
//! reserves, before its copy, as many pages as it may dirty (`charge`); if that would pass
//! the limit it waits (the throttle: the kernel's `balance_dirty_pages`, in its simplest
//! form) until writeback completions give pages back (`uncharge`), which wake it. After
//! the copy it returns what it reserved and did not dirty. The count never passes the
//! limit: a reservation is one CAS that checks it. Above the background threshold the
//! writeback thread is woken.
//!
//! The limit follows the cache's capacity (`set_limits`). A limit lowered below a
//! reservation a writer already sized by the old one still admits it into an empty
//! budget, so no writer waits for good; the count then passes the limit by that one
//! reservation.
//!
//! Protection: the count is one atomic; the limits two more (relaxed: a writer that reads
//! the old limit once is as if it came a moment earlier); the waiters a mutex and
//! condvar. Limits: a reservation of more pages than the limit is refused by the caller's
//! splitting (`DirtyBudget::charge_max_pages`).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How many pages may be unclean (dirty, under writeback, or reserved by a writer) at once,
/// and the writers waiting for some to come back (module docs).
#[derive(Debug)]
pub struct DirtyBudget {
    /// Unclean pages now: never above `limit_pages` (module docs).
    pages: AtomicU64,
    /// Of `pages`, those under writeback (a gauge for stats).
    writeback_pages: AtomicU64,
    limit_pages: AtomicU64,
    /// Above this, the writeback thread writes back whatever is dirty, oldest file first.
    background_pages: AtomicU64,
    /// Writers waiting in `charge`: `uncharge` takes the mutex and wakes only if some are.
    waiting: AtomicU32,
    waiters: Mutex<()>,
    progress: Condvar,
}

impl DirtyBudget {
    pub fn new(limit_pages: u64, background_pages: u64) -> DirtyBudget {
        let budget = DirtyBudget {
            pages: AtomicU64::new(0),
            writeback_pages: AtomicU64::new(0),
            limit_pages: AtomicU64::new(0),
            background_pages: AtomicU64::new(0),
            waiting: AtomicU32::new(0),
            waiters: Mutex::new(()),
            progress: Condvar::new(),
        };
        budget.set_limits(limit_pages, background_pages);
        budget
    }

    /// Sets the limit (at least a page) and the background threshold (at most the
    /// limit), for a capacity that changed; wakes the writers waiting, so that they look
    /// at the new limit.
    pub fn set_limits(&self, limit_pages: u64, background_pages: u64) {
        let limit_pages = limit_pages.max(1);
        self.limit_pages.store(limit_pages, Ordering::Relaxed);
        self.background_pages
            .store(background_pages.min(limit_pages), Ordering::Relaxed);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            drop(self.waiters.lock().unwrap_or_else(|e| e.into_inner()));
            self.progress.notify_all();
        }
    }

    pub fn limit_pages(&self) -> u64 {
        self.limit_pages.load(Ordering::Relaxed)
    }

    pub fn background_pages(&self) -> u64 {
        self.background_pages.load(Ordering::Relaxed)
    }

    /// The most pages one reservation may ask for: a writer splits larger writes, so that
    /// a reservation always fits an empty budget.
    pub fn charge_max_pages(&self) -> u64 {
        (self.limit_pages() / 4).max(1)
    }

    pub fn pages(&self) -> u64 {
        self.pages.load(Ordering::Relaxed)
    }

    pub fn writeback_pages(&self) -> u64 {
        self.writeback_pages.load(Ordering::Relaxed)
    }

    /// Above the background threshold, or a writer waits at the limit: writeback must
    /// write everything it can now.
    pub fn over_background(&self) -> bool {
        self.pages() > self.background_pages() || self.waiting.load(Ordering::Relaxed) > 0
    }

    /// Reserves `pages` (at most `charge_max_pages`), waiting while that would pass the
    /// limit; `kick` is called (to wake writeback) before each wait. Returns how long it
    /// waited.
    ///
    /// Context: no lock held, no folio locked (writeback must be able to progress). May
    /// sleep.
    pub fn charge(&self, pages: u64, kick: &dyn Fn()) -> Duration {
        let pages = pages.min(self.limit_pages());
        let mut waited = None;
        loop {
            let limit = self.limit_pages();
            let got = self
                .pages
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |now| {
                    // An empty budget admits any reservation (module docs).
                    (now + pages <= limit || now == 0).then_some(now + pages)
                });
            if got.is_ok() {
                return waited.map_or(Duration::ZERO, |t: Instant| t.elapsed());
            }
            waited.get_or_insert_with(Instant::now);
            kick();
            let guard = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
            // Announced under the mutex, before the re-check: an `uncharge` after the
            // re-check sees it and wakes this writer (and the timeout bounds the rest).
            self.waiting.fetch_add(1, Ordering::SeqCst);
            let now = self.pages.load(Ordering::SeqCst);
            if now + pages > self.limit_pages() && now > 0 {
                let _ = self
                    .progress
                    .wait_timeout(guard, Duration::from_millis(10))
                    .unwrap_or_else(|e| e.into_inner());
            }
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Gives back `pages` (written back, discarded, or reserved and not dirtied) and wakes
    /// throttled writers.
    pub fn uncharge(&self, pages: u64) {
        if pages == 0 {
            return;
        }
        let old = self.pages.fetch_sub(pages, Ordering::SeqCst);
        debug_assert!(old >= pages, "dirty budget underflow: {old} - {pages}");
        if self.waiting.load(Ordering::SeqCst) > 0 {
            drop(self.waiters.lock().unwrap_or_else(|e| e.into_inner()));
            self.progress.notify_all();
        }
    }

    /// `pages` went under writeback (B2), for the gauge.
    pub fn writeback_started(&self, pages: u64) {
        self.writeback_pages.fetch_add(pages, Ordering::Relaxed);
    }

    /// `pages` came out of writeback (B3), for the gauge.
    pub fn writeback_ended(&self, pages: u64) {
        self.writeback_pages.fetch_sub(pages, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_budget_never_passes_its_limit_and_wakes_waiters() {
        let budget = Arc::new(DirtyBudget::new(8, 4));
        budget.charge(2, &|| {});
        budget.charge(2, &|| {});
        assert_eq!(budget.pages(), 4);
        let waiter = {
            let budget = budget.clone();
            std::thread::spawn(move || {
                budget.charge(2, &|| {});
                budget.charge(2, &|| {});
                budget.charge(2, &|| {})
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(budget.pages() <= 8);
        budget.uncharge(4);
        let waited = waiter.join().unwrap();
        assert!(waited > Duration::ZERO, "the third charge had to wait");
        assert_eq!(budget.pages(), 6);
    }

    #[test]
    fn a_limit_lowered_below_a_waiting_reservation_still_admits_it_into_an_empty_budget() {
        let budget = Arc::new(DirtyBudget::new(100, 50));
        budget.charge(90, &|| {});
        let waiter = {
            let budget = budget.clone();
            // Sized by the old limit (25 = 100 / 4): larger than the new one.
            std::thread::spawn(move || budget.charge(25, &|| {}))
        };
        std::thread::sleep(Duration::from_millis(20));
        budget.set_limits(8, 4);
        assert_eq!(budget.limit_pages(), 8);
        assert_eq!(budget.background_pages(), 4);
        assert_eq!(budget.charge_max_pages(), 2);
        budget.uncharge(90);
        waiter.join().unwrap();
        assert_eq!(budget.pages(), 25, "admitted alone, past the new limit");
        budget.uncharge(25);
        budget.charge(2, &|| {});
        assert_eq!(budget.pages(), 2);
    }
}
