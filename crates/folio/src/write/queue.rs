//! The writeback queue (the kernel's `b_dirty` list): the files with dirty pages, oldest
//! first, the ranges appending writers hand over (write-behind), and the writeback
//! thread's wake-ups and stop.
//!
//! Protection: the queue, the write-behind ranges and the wake flag each under their own
//! mutex (the flag with a condvar); none is held while another lock is taken. A file's
//! place in the queue is its `WriteState`'s (`queued`, `dirtied_ns`), changed only here.
//! The request to clean everything (`kick_to_clean`) is an atomic flag, set before the
//! wake-up it goes with and taken by the pass that follows it.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::index::Mark;
use crate::mapping::{Kind, Mapping};
use crate::types::PageIndex;

/// The files with dirty pages, oldest first (the kernel's `b_dirty` list), and the
/// writeback thread's wake-ups.
///
/// A file enters when a write dirties it while it is not queued (`WriteState::queued`),
/// and leaves when the writeback thread takes it; a pass that leaves it dirty (a writer
/// held a folio, a write failed) queues it again.
///
/// Protection: the queue under its mutex; the wake flag under its own, with a condvar.
/// Neither is held while another lock is taken.
#[derive(Debug)]
pub(crate) struct DirtyFiles {
    queue: Mutex<VecDeque<Arc<Mapping>>>,
    /// Ranges appending writers left behind them, for the writeback thread to start
    /// (`thread::write_behind`).
    behind: Mutex<Vec<BehindRange>>,
    wake: Mutex<bool>,
    wake_cv: Condvar,
    /// The files this process is the writer of in its cache's domain (mapping/domain.rs,
    /// F3), weakly: the writeback thread hands over a role another process asked for.
    roles: Mutex<Vec<Weak<Mapping>>>,
    /// Set by `kick_to_clean`: the next pass writes back every dirty file.
    clean_wanted: AtomicBool,
    stop: AtomicBool,
    /// A file dirty for longer than this is written back.
    pub expire: Duration,
    epoch: Instant,
}

/// Pages `[start, end)` of a file that an appending writer left dirty behind it, for the
/// writeback thread to start writing (write-behind).
#[derive(Debug)]
pub(crate) struct BehindRange {
    pub mapping: Arc<Mapping>,
    pub start: PageIndex,
    pub end: PageIndex,
}

impl DirtyFiles {
    pub fn new(expire: Duration) -> DirtyFiles {
        DirtyFiles {
            queue: Mutex::new(VecDeque::new()),
            behind: Mutex::new(Vec::new()),
            roles: Mutex::new(Vec::new()),
            wake: Mutex::new(false),
            wake_cv: Condvar::new(),
            clean_wanted: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            expire,
            epoch: Instant::now(),
        }
    }

    fn now_ns(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as u64).max(1)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Mapping>>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A write dirtied `mapping`: stamp when, and queue it if it is not queued. The first
    /// file of an empty queue wakes the writeback thread, which sleeps without a timer
    /// while nothing is dirty (`thread::background`), so that its expiry is timed.
    pub fn note_dirty(&self, mapping: &Arc<Mapping>) {
        if self.enqueue(mapping) {
            self.kick();
        }
    }

    /// `note_dirty` without the wake-up: stamps and queues `mapping`; whether it is the
    /// only file queued now.
    fn enqueue(&self, mapping: &Arc<Mapping>) -> bool {
        let write = &mapping.write;
        if write.dirtied_ns.load(Ordering::Relaxed) == 0 {
            let _ = write.dirtied_ns.compare_exchange(
                0,
                self.now_ns(),
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
        if !write.queued.load(Ordering::Acquire) && !write.queued.swap(true, Ordering::AcqRel) {
            let mut queue = self.lock();
            queue.push_back(mapping.clone());
            return queue.len() == 1;
        }
        false
    }

    /// This process became the writer of `mapping`'s record in the domain
    /// (mapping/domain.rs, A4, F2): the writeback thread looks at it every pass, and
    /// passes come every `BACKGROUND_PERIOD` from now on (`holds_roles`).
    pub fn note_role(&self, mapping: &Arc<Mapping>) {
        let mut roles = self.roles.lock().unwrap_or_else(|e| e.into_inner());
        if !roles
            .iter()
            .any(|m| std::ptr::eq(m.as_ptr(), Arc::as_ptr(mapping)))
        {
            roles.push(Arc::downgrade(mapping));
            drop(roles);
            self.kick();
        }
    }

    /// The files this process is still the writer of (`note_role`), forgetting the rest.
    pub fn roles(&self) -> Vec<Arc<Mapping>> {
        let mut roles = self.roles.lock().unwrap_or_else(|e| e.into_inner());
        let mut held = Vec::new();
        roles.retain(|mapping| match mapping.upgrade() {
            Some(mapping) if mapping.role_kind() == Kind::Holder => {
                held.push(mapping);
                true
            }
            _ => false,
        });
        held
    }

    /// Whether this process may be the writer of a file in its cache's domain.
    pub fn holds_roles(&self) -> bool {
        !self
            .roles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Whether no file is queued: nothing is dirty but what a pass is writing back now.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Hands `[start, end)` of `mapping`, whole pages an appending writer left dirty
    /// behind it, to the writeback thread, and wakes it.
    pub fn write_behind(&self, mapping: &Arc<Mapping>, start: PageIndex, end: PageIndex) {
        self.behind
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(BehindRange {
                mapping: mapping.clone(),
                start,
                end,
            });
        self.kick();
    }

    /// The ranges handed over by `write_behind` since the last call.
    pub fn take_write_behind(&self) -> Vec<BehindRange> {
        std::mem::take(&mut *self.behind.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Wakes the writeback thread now (memory is short of clean pages, or a writer left
    /// pages behind it).
    pub fn kick(&self) {
        let mut wake = self.wake.lock().unwrap_or_else(|e| e.into_inner());
        if !*wake {
            *wake = true;
            self.wake_cv.notify_one();
        }
    }

    /// Wakes the writeback thread to write back every dirty file now, whatever the
    /// background threshold and the expiry say: memory is wanted that only dirty folios
    /// hold (a shrink of the capacity, `Core::set_capacity`; an allocation whose reclaim
    /// freed nothing, `Core::alloc_folio`). The kernel's
    /// `wakeup_flusher_threads(WB_REASON_VMSCAN)`. A plain `kick` would not do: under
    /// the threshold the pass writes only expired files, so a shrink below what is dirty
    /// would wait `alloc_wait` and return with the dirty folios still held.
    pub fn kick_to_clean(&self) {
        // Before the wake-up, so that the pass it starts sees the request.
        self.clean_wanted.store(true, Ordering::Release);
        self.kick();
    }

    /// Whether a pass must write back every dirty file (`kick_to_clean` was called since
    /// the last pass); takes the request.
    pub fn take_clean_wanted(&self) -> bool {
        self.clean_wanted.swap(false, Ordering::AcqRel)
    }

    /// The writeback thread's sleep: until kicked, or `period` passed if there is one.
    /// False once the cache stops.
    pub fn wait(&self, period: Option<Duration>) -> bool {
        let mut wake = self.wake.lock().unwrap_or_else(|e| e.into_inner());
        if !*wake && !self.stop.load(Ordering::Acquire) {
            wake = match period {
                Some(period) => {
                    self.wake_cv
                        .wait_timeout(wake, period)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                None => self.wake_cv.wait(wake).unwrap_or_else(|e| e.into_inner()),
            };
        }
        *wake = false;
        !self.stop.load(Ordering::Acquire)
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.kick();
    }

    /// Takes the files dirty for longer than the expiry off the queue
    /// (`requeue_if_dirty` puts one back).
    pub fn take_expired(&self) -> Vec<Arc<Mapping>> {
        let now = self.now_ns();
        // Saturating: an expiry past 2^64 ns never comes (a truncation would make it small).
        let expire = u64::try_from(self.expire.as_nanos()).unwrap_or(u64::MAX);
        self.take_if(&|since_ns| now.saturating_sub(since_ns) >= expire)
    }

    /// Takes every file off the queue (the pass over the background threshold, and the
    /// cache's final writeback): the queue is empty after.
    pub fn take_all(&self) -> Vec<Arc<Mapping>> {
        self.take_if(&|_| true)
    }

    /// Takes off the queue the files whose dirtying time (ns since the epoch) `due` says.
    fn take_if(&self, due: &dyn Fn(u64) -> bool) -> Vec<Arc<Mapping>> {
        let mut queue = self.lock();
        let mut taken = Vec::new();
        queue.retain(|mapping| {
            let since = mapping.write.dirtied_ns.load(Ordering::Acquire);
            let take = due(since);
            if take {
                taken.push(mapping.clone());
            }
            !take
        });
        drop(queue);
        for mapping in &taken {
            mapping.write.dirtied_ns.store(0, Ordering::Release);
            mapping.write.queued.store(false, Ordering::Release);
        }
        taken
    }

    /// A pass left `mapping` dirty: queue it again. No wake-up: the thread that made the
    /// pass sees the queue before it sleeps, and a kick would start the next pass at once
    /// (over the threshold, a busy loop while a writer holds the folio).
    pub fn requeue_if_dirty(&self, mapping: &Arc<Mapping>) {
        let mut dirty = false;
        let _ = mapping
            .index
            .marked_walk(PageIndex(0), PageIndex::END, Mark::Dirty, &mut |_| {
                dirty = true;
                ControlFlow::Break(())
            });
        if dirty {
            self.enqueue(mapping);
        }
    }
}
