//! A file's byte-range lock for writers: a `write_at` holds the bytes it writes for the
//! whole call, so two writes that overlap are applied one after the other, whole, as
//! POSIX promises for `pwrite` on a regular file (ext4 holds the inode lock for the whole
//! buffered write). Writes that do not overlap go on together; the file's writer lock is
//! still taken per piece, so that no writer holds it while it waits at the dirty limit.
//!
//! Fairness: a range waits for every range that overlaps it and asked before it (held
//! or still waiting), in arrival order, so a stream of small writes cannot starve a large
//! one that overlaps them, and no cycle of waits can form (arrivals are totally ordered).
//!
//! Protection: the lock's mutex over the list of ranges; waiters sleep on its condition
//! variable. Limits: a list scan per acquisition and release, linear in the writes of the
//! file in progress (a handful: each is a thread).

use std::sync::{Condvar, Mutex};

/// Byte ranges of one file held by writers (module docs).
#[derive(Debug, Default)]
pub struct RangeLock {
    ranges: Mutex<Ranges>,
    released: Condvar,
}

#[derive(Debug, Default)]
struct Ranges {
    next_arrival: u64,
    /// Writers asleep in `lock`: a release wakes them only if there are any (a
    /// condition variable's wake is a system call, paid by every write otherwise).
    sleeping: u32,
    /// Held and waiting ranges, in arrival order.
    list: Vec<Range>,
}

#[derive(Clone, Copy, Debug)]
struct Range {
    arrival: u64,
    start: u64,
    end: u64,
}

impl Range {
    fn overlaps(&self, other: &Range) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// Bytes `[start, end)` held until the guard drops.
#[derive(Debug)]
pub struct RangeGuard<'a> {
    lock: &'a RangeLock,
    arrival: u64,
}

/// Every byte of a file: what `set_len` holds, as the kernel's truncation holds the inode.
pub const WHOLE_FILE: (u64, u64) = (0, u64::MAX);

impl RangeLock {
    /// Holds bytes `[start, end)` once every range that overlaps them and asked before
    /// has been released.
    ///
    /// Context: no lock held but other ranges of other files; sleeps while an earlier
    /// overlapping range is held.
    pub fn lock(&self, start: u64, end: u64) -> RangeGuard<'_> {
        let mut ranges = self.ranges.lock().unwrap_or_else(|e| e.into_inner());
        let arrival = ranges.next_arrival;
        ranges.next_arrival += 1;
        let me = Range {
            arrival,
            start,
            end,
        };
        ranges.list.push(me);
        while ranges
            .list
            .iter()
            .take_while(|r| r.arrival < arrival)
            .any(|r| r.overlaps(&me))
        {
            ranges.sleeping += 1;
            ranges = self
                .released
                .wait(ranges)
                .unwrap_or_else(|e| e.into_inner());
            ranges.sleeping -= 1;
        }
        RangeGuard {
            lock: self,
            arrival,
        }
    }
}

impl RangeLock {
    /// `lock` if no range that overlaps `[start, end)` is held or waited for, else
    /// `None` (a caller that must not wait for writers: the writeback thread, whom a
    /// writer at the dirty limit waits for).
    ///
    /// Context: never sleeps but on the list's mutex.
    pub fn try_lock(&self, start: u64, end: u64) -> Option<RangeGuard<'_>> {
        let mut ranges = self.ranges.lock().unwrap_or_else(|e| e.into_inner());
        let me = Range {
            arrival: ranges.next_arrival,
            start,
            end,
        };
        if ranges.list.iter().any(|r| r.overlaps(&me)) {
            return None;
        }
        ranges.next_arrival += 1;
        ranges.list.push(me);
        Some(RangeGuard {
            lock: self,
            arrival: me.arrival,
        })
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        let mut ranges = self.lock.ranges.lock().unwrap_or_else(|e| e.into_inner());
        ranges.list.retain(|r| r.arrival != self.arrival);
        let sleeping = ranges.sleeping;
        drop(ranges);
        if sleeping > 0 {
            self.lock.released.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// Overlapping ranges are held one at a time; disjoint ones together.
    #[test]
    fn overlapping_ranges_wait_and_disjoint_ones_do_not() {
        let lock = Arc::new(RangeLock::default());
        let a = lock.lock(0, 100);
        let b = lock.lock(100, 200); // disjoint: at once
        let inside = Arc::new(AtomicU32::new(0));
        let waiter = {
            let (lock, inside) = (lock.clone(), inside.clone());
            std::thread::spawn(move || {
                let _c = lock.lock(50, 150);
                inside.store(1, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(inside.load(Ordering::SeqCst), 0, "entered while overlapped");
        drop(a);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(inside.load(Ordering::SeqCst), 0, "entered while b held");
        drop(b);
        waiter.join().unwrap();
        assert_eq!(inside.load(Ordering::SeqCst), 1);
    }

    /// A later range that overlaps only a waiting one waits for it (arrival order).
    #[test]
    fn a_waiting_range_is_not_overtaken() {
        let lock = Arc::new(RangeLock::default());
        let a = lock.lock(0, 10);
        let order = Arc::new(Mutex::new(Vec::new()));
        let spawn = |start, end, name: &'static str| {
            let (lock, order) = (lock.clone(), order.clone());
            std::thread::spawn(move || {
                let _g = lock.lock(start, end);
                order.lock().unwrap().push(name);
                std::thread::sleep(Duration::from_millis(20));
            })
        };
        let big = spawn(0, 100, "big");
        std::thread::sleep(Duration::from_millis(30));
        let small = spawn(50, 60, "small"); // overlaps only the waiting `big`
        std::thread::sleep(Duration::from_millis(30));
        drop(a);
        big.join().unwrap();
        small.join().unwrap();
        assert_eq!(*order.lock().unwrap(), vec!["big", "small"]);
    }
}
