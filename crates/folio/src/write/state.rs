//! One file's write side (DESIGN.md §8): its write ranges and writer lock, the descriptor
//! writeback uses, its error sequence, its writebacks in flight (by ticket), its place on
//! the writeback queue, its failures, and where write-behind goes on.
//!
//! Protection: each field says its own; none is written outside the `write` folder (the
//! methods below are the only way in).

use std::collections::BTreeSet;
use std::fs::File as StdFile;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(any(debug_assertions, feature = "invariants"))]
use super::audit::SyncAudit;
use super::errseq::ErrSeq;
use super::range_lock::{RangeGuard, RangeLock};
use crate::io::sync;
use crate::types::{PageIndex, PAGE_BYTES};

/// Space reserved on disk past the end of a write that extends the file: an eighth of the
/// file's size, within these bounds. The least is what an appender writes while the
/// writeback thread's `reserve_ahead` waits in `fallocate` (~20-40 ms behind the file's
/// direct writes; a RocksDB WAL at 50 MB/s writes 1-2 MiB meanwhile), twice over: at 1
/// MiB the writer overtook the thread's reserve and waited for it. What is left reserved
/// past the end of a finished file (a sixteenth of it to three sixteenths, at least 2 to
/// 6 MiB) stays allocated, as `fallocate`'s `FALLOC_FL_KEEP_SIZE` leaves it.
const RESERVE_AHEAD_MIN_BYTES: u64 = 4 << 20;
const RESERVE_AHEAD_MAX_BYTES: u64 = 64 << 20;

/// The space `WriteState::reserve` reserves past a write that ends at `end`.
fn reserve_ahead_bytes(end: u64) -> u64 {
    (end / 8).clamp(RESERVE_AHEAD_MIN_BYTES, RESERVE_AHEAD_MAX_BYTES)
}

/// Files larger than this cannot be written (the page index is 52 bits).
pub const FILE_BYTES_MAX: u64 = 1 << 62;

/// Writebacks of one file in flight, by ticket, so that a sync can wait for every write
/// submitted before it (its own and the background's) and for no later one.
#[derive(Debug, Default)]
pub struct InFlight {
    tickets: Mutex<Tickets>,
    done: Condvar,
}

/// The tickets of one file's writebacks: the last handed out, and those still running.
#[derive(Debug, Default)]
struct Tickets {
    last: u64,
    running: BTreeSet<u64>,
}

impl InFlight {
    /// A new writeback's ticket.
    pub fn begin(&self) -> u64 {
        let mut t = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        t.last += 1;
        let ticket = t.last;
        t.running.insert(ticket);
        ticket
    }

    pub fn end(&self, ticket: u64) {
        let mut t = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        t.running.remove(&ticket);
        drop(t);
        self.done.notify_all();
    }

    /// Whether a writeback of the file runs (a ticket not ended).
    pub fn running(&self) -> bool {
        !self
            .tickets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .running
            .is_empty()
    }

    /// The last ticket handed out.
    pub fn last(&self) -> u64 {
        self.tickets.lock().unwrap_or_else(|e| e.into_inner()).last
    }

    /// Sleeps until every writeback with a ticket up to `ticket` has ended.
    ///
    /// Context: no lock held; may sleep as long as the writes take.
    pub fn wait_through(&self, ticket: u64) {
        let mut t = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        while t.running.first().is_some_and(|&first| first <= ticket) {
            t = self.done.wait(t).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Consecutive failed writebacks after which a file is given up as failed (DESIGN.md §8).
pub const WRITEBACK_FAILURES_MAX: u32 = 3;

/// One file's write side, in its mapping (DESIGN.md §8).
#[derive(Debug, Default)]
pub struct WriteState {
    /// The bytes each `write_at` writes, held for its whole call (and the whole file for
    /// `set_len`): overlapping writes are applied one after the other, whole.
    ranges: RangeLock,
    /// Serialises the writers' changes of the file's folios (a piece of `write_at` at a
    /// time, `set_len`), as the kernel's inode lock does for buffered writes. Writeback
    /// never takes it.
    writer: Mutex<()>,
    /// A descriptor open for writing, kept from the first writable handle's open for as
    /// long as the mapping lives: writeback of a closed file's dirty pages uses it.
    fd: Mutex<Option<Arc<StdFile>>>,
    /// Whether folio has written or resized the file (then folio's size is the file's
    /// logical size, and a read that comes back short before it found a hole, not a
    /// shorter file).
    written: AtomicBool,
    /// Space reserved with `fallocate` up to here, so that a write past it learns of
    /// ENOSPC at once.
    pub(super) reserved_bytes: AtomicU64,
    pub(super) errseq: ErrSeq,
    pub(super) in_flight: InFlight,
    /// When the file went from clean to dirty (ns since the cache's epoch; 0: clean),
    /// for the writeback thread's expiry.
    pub(super) dirtied_ns: AtomicU64,
    /// On the cache's list of dirty files.
    pub(super) queued: AtomicBool,
    /// Writebacks that failed in a row.
    pub(super) failures: AtomicU32,
    /// The errno the file was given up with (0: not failed).
    pub(super) failed_errno: AtomicI32,
    /// The page where the next write-behind starts: an appending writer's whole pages
    /// below it have had their writeback started (`thread::write_behind`). A hint: a wrong
    /// value writes back early or late, never loses a byte.
    pub(super) behind: AtomicU64,
    /// What the syncs promised, checked when they return (`audit`).
    #[cfg(any(debug_assertions, feature = "invariants"))]
    pub(super) audit: SyncAudit,
}

impl WriteState {
    /// The write side of a file of `size_bytes` on disk.
    pub fn new(size_bytes: u64) -> WriteState {
        WriteState {
            reserved_bytes: AtomicU64::new(size_bytes),
            behind: AtomicU64::new(size_bytes / PAGE_BYTES as u64),
            ..WriteState::default()
        }
    }

    /// Holds bytes `[start, end)` of the file for a writer's whole call (`RangeLock`).
    ///
    /// Context: no lock held; may sleep while an overlapping write finishes.
    pub fn lock_range(&self, start: u64, end: u64) -> RangeGuard<'_> {
        self.ranges.lock(start, end)
    }

    /// `lock_range` if no range of the file is held or waited for, else `None`.
    ///
    /// Context: no lock held; never sleeps but on the range list's mutex.
    pub fn try_lock_range(&self, start: u64, end: u64) -> Option<RangeGuard<'_>> {
        self.ranges.try_lock(start, end)
    }

    /// Context: may sleep while another writer of the file finishes.
    pub fn lock_writer(&self) -> MutexGuard<'_, ()> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn fd(&self) -> Option<Arc<StdFile>> {
        self.fd.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A writable handle opened the file: keep its descriptor if none is kept yet.
    /// Returns whether this one was kept.
    pub fn adopt_fd(&self, fd: &Arc<StdFile>) -> bool {
        let mut kept = self.fd.lock().unwrap_or_else(|e| e.into_inner());
        if kept.is_none() {
            *kept = Some(fd.clone());
            return true;
        }
        false
    }

    /// The file was deleted: the descriptor goes (`MappingTable::forget_deleted`).
    pub fn forget_fd(&self) {
        self.fd.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    pub fn is_written(&self) -> bool {
        self.written.load(Ordering::Acquire)
    }

    pub fn note_written(&self) {
        if !self.is_written() {
            self.written.store(true, Ordering::Release);
        }
    }

    /// Whether a writeback of the file runs now (its bytes on their way to the disk).
    pub fn writeback_running(&self) -> bool {
        self.in_flight.running()
    }

    /// The file's error sequence: a writeback error is told once to each handle.
    pub fn errseq(&self) -> &ErrSeq {
        &self.errseq
    }

    /// Writebacks of the file that failed in a row (0 after a success).
    #[cfg(any(debug_assertions, feature = "invariants"))]
    pub fn failures(&self) -> u32 {
        self.failures.load(Ordering::Acquire)
    }

    /// What the syncs promised, checked when they return (`audit`).
    #[cfg(any(debug_assertions, feature = "invariants"))]
    pub fn audit(&self) -> &SyncAudit {
        &self.audit
    }

    /// `set_len` cut the file at `page`: write-behind starts there again if it was past it.
    pub fn rewind_write_behind(&self, page: PageIndex) {
        self.behind.fetch_min(page.0, Ordering::AcqRel);
    }

    /// Reserves disk space up to `end` (and some ahead) when a write goes past what is
    /// reserved, so that ENOSPC is the writer's error, not a later writeback's.
    ///
    /// Context: a writer holding `[offset, end)` (`lock_range`); calls `fallocate`.
    pub fn reserve(&self, fd: &StdFile, offset: u64, end: u64) -> io::Result<()> {
        let write = self;
        let reserved = write.reserved_bytes.load(Ordering::Acquire);
        if end <= reserved {
            return Ok(());
        }
        let from = offset.max(reserved) & !(PAGE_BYTES as u64 - 1);
        let to = end
            .saturating_add(reserve_ahead_bytes(end))
            .min(FILE_BYTES_MAX);
        let result = sync::allocate(fd, from, to - from)
            .map(|()| to)
            .or_else(|e| match e.raw_os_error() {
                // Not enough for the reserve ahead: the write's own bytes may still fit.
                Some(libc::ENOSPC) => sync::allocate(fd, from, end - from).map(|()| end),
                _ => Err(e),
            });
        match result {
            Ok(reserved_to) => {
                write
                    .reserved_bytes
                    .fetch_max(reserved_to, Ordering::AcqRel);
                Ok(())
            }
            // A file system without `fallocate`: writeback reports ENOSPC, as the kernel's
            // delayed allocation can.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
                ) =>
            {
                write.reserved_bytes.store(u64::MAX, Ordering::Release);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Keeps the reserve ahead of an appending writer, off the writer's thread: once the
    /// file's logical size has used half of the reserve ahead of it, reserves the next
    /// stretch, so that the writer's own `reserve` rarely finds the reserve short. A
    /// `fallocate` waits for the file's O_DIRECT writes in flight (ext4 takes the inode
    /// lock, which an extending direct write holds until it completes, and drains the
    /// file's direct I/O): in db_bench `fillrandom` (4 writers) the WAL's reserves,
    /// made by the write that held RocksDB's write group, blocked 19 ms each behind the
    /// WAL's own writeback, 4.6 s of every 30. An error is left for the writer to meet
    /// (its `reserve` then fails with it).
    ///
    /// Context: the writeback thread, before it writes the file's appended pages back;
    /// may block in the file system.
    pub fn reserve_ahead(&self, size_bytes: u64) {
        let Some(fd) = self.fd() else {
            return;
        };
        let half = reserve_ahead_bytes(size_bytes) / 2;
        if size_bytes.saturating_add(half) <= self.reserved_bytes.load(Ordering::Acquire) {
            return;
        }
        let _ = self.reserve(&fd, size_bytes, size_bytes.saturating_add(half));
    }

    /// The errno the file was given up with, if it was.
    pub fn failed(&self) -> Option<i32> {
        match self.failed_errno.load(Ordering::Acquire) {
            0 => None,
            errno => Some(errno),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_sync_waits_for_earlier_tickets_only() {
        let f = Arc::new(InFlight::default());
        let a = f.begin();
        let b = f.begin();
        f.end(b);
        let waiter = {
            let f = f.clone();
            std::thread::spawn(move || f.wait_through(a))
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiter.is_finished());
        let _later = f.begin();
        f.end(a);
        waiter.join().unwrap();
    }
}
