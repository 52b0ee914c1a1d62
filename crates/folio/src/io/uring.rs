//! The io_uring backend: reads, writes and flushes go to the kernel as SQEs, and one
//! thread reaps the CQEs.
//!
//! Design:
//!
//! ```text
//!  submit(batch)                                     completion thread ("folio-uring")
//!   1. lock pending: each request takes a free        a. submit_and_wait(1)
//!      slot (its SQE's user_data), or joins the       b. pop one CQE; user_data = slot
//!      backlog when every slot is taken               c. lock pending: take the request out
//!   2. unlock pending; lock sq: push one                 of its slot; a backlog request, if
//!      IORING_OP_READV, _WRITEV or _FSYNC per            any, takes the slot over (its SQE is
//!      slotted request, io_uring_enter until the SQ      pushed as in 2); running += 1
//!      is empty
//!                                                     d. unlock; run `done`; lock: running -= 1
//! ```
//!
//! Invariants:
//! - `Shared::pending` protects the slots, the backlog and the phase. `Shared::sq_lock`
//!   serialises writes to the submission ring (the io-uring crate's `SubmissionQueue` is
//!   single-producer). No code holds both: `submit`, `complete` and `drop` release
//!   `pending` before they take `sq_lock`, so there is no lock order to keep.
//! - A request sits in its slot, with the iovec array its SQE points at, from before the
//!   SQE is pushed until its CQE is reaped: the slot keeps the `Arc<File>` (so the fd) and
//!   the iovecs alive for the kernel. The buffers are the caller's until `done` runs.
//! - Slots number `min(sq_entries, cq_entries)` and every SQE in the ring belongs to an
//!   occupied slot (or is the shutdown `Nop`, pushed only when no slot is occupied), so
//!   pushing an SQE never finds the ring full and the CQ never overflows.
//! - `backlog` is non-empty only while every slot is taken: a freed slot is handed straight
//!   to the oldest backlog request, under the same lock.
//! - Only the completion thread reads the CQ, one entry at a time, holding no borrow of the
//!   CQ while it runs a completion, so a completion may reap too (see `Drop`).
//! - No lock is held while `done` runs, so a completion may call `submit` on this backend:
//!   the cache resubmits the rest of a short read from inside a completion. Such a submit
//!   never waits for a slot (the backlog takes the overflow), so it cannot deadlock the only
//!   thread that frees slots.
//!
//! Limits:
//! - The backlog is unbounded: its length is bounded by the requests the caller has in
//!   flight, which the arena bounds (every request owns distinct frames). `submit` never
//!   blocks on transfers, as the `Backend` contract asks; it waits only while the kernel itself
//!   refuses new work (`EAGAIN`/`EBUSY` from `io_uring_enter`), with a bounded backoff.
//! - No registered files or buffers, no SQPOLL: one `io_uring_enter` per `submit` call.
//! - Needs `IORING_REGISTER_PROBE` (Linux 5.6) to check for `IORING_OP_READV`,
//!   `IORING_OP_WRITEV` and `IORING_OP_FSYNC`; `new` probes for them and for a working
//!   ring. Every read is a `READV` and every write a `WRITEV`, single buffer or not; a
//!   flush is an `FSYNC` (with `IORING_FSYNC_DATASYNC` for `FlushKind::Data`), unlinked:
//!   the ring orders it after nothing, as the backend contract says.
//! - A request the caller waits for (`submit_waited`) does not use the ring: it is
//!   transferred on the caller's thread by `io::sync` (see `submit_waited`).
//! - A completion that panics is caught (`Completion::run`) and the thread keeps reaping;
//!   every later request would hang otherwise.

use std::collections::VecDeque;
use std::io;
use std::os::unix::io::AsRawFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring, Probe};

use super::backend::{Backend, FlushKind, IoBatch, IoRequest, Op};
use super::sync;

/// The ring size `open_backend` asks for: submission entries (the kernel rounds up to a
/// power of two), so also the number of requests in flight at once.
pub const QUEUE_DEPTH: u32 = 128;

/// `user_data` of the `Nop` that wakes the completion thread for shutdown (and of the
/// probe in `new`). Slot numbers are far below it.
const WAKE_USER_DATA: u64 = u64::MAX;

/// First and last pause when the kernel refuses new work (`EAGAIN`, `EBUSY`), and how many
/// pauses without progress `submit` accepts before it declares the ring broken (about 10 s).
const BACKOFF_US_MIN: u64 = 10;
const BACKOFF_US_MAX: u64 = 10_000;
const BACKOFF_ATTEMPTS_MAX: u32 = 1_000;

/// Reads and writes through one io_uring instance, with one completion thread.
pub struct UringBackend {
    shared: Arc<Shared>,
    /// `None` only during `drop`.
    completer: Option<JoinHandle<()>>,
}

struct Shared {
    ring: IoUring,
    /// Held while writing SQEs and calling `io_uring_enter` to submit them.
    sq_lock: Mutex<()>,
    pending: Mutex<Pending>,
    /// Signalled when `pending` becomes idle (see `Pending::is_idle`).
    idle: Condvar,
}

struct Pending {
    /// `slots[i]` is the request whose SQE carries `user_data == i`.
    slots: Vec<Option<InFlight>>,
    /// Indices of the `None` slots.
    free_slots: Vec<u64>,
    /// Accepted requests waiting for a slot, oldest first.
    backlog: VecDeque<IoRequest>,
    /// Requests taken out of their slot whose `done` has not returned yet.
    completions_running: usize,
    phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Running,
    /// Set by `drop` once nothing is in flight; the completion thread exits when it sees it.
    Stopped,
}

/// A request whose SQE may be in the kernel's hands, with the iovecs that SQE points at.
struct InFlight {
    request: IoRequest,
    /// One iovec per buffer of `request`. A boxed slice: its address, which the SQE holds,
    /// does not change when the `InFlight` moves.
    iovecs: IoVecs,
}

/// The iovec array of one request.
struct IoVecs(Box<[libc::iovec]>);

// SAFETY: the iovecs describe the request's FrameBufs, which are Send (backend.rs); the
// pointers are only handed to the kernel, never dereferenced here.
unsafe impl Send for IoVecs {}

impl InFlight {
    fn new(request: IoRequest) -> Self {
        let iovecs = request
            .bufs
            .iter()
            .map(|buf| libc::iovec {
                iov_base: buf.as_ptr().cast::<libc::c_void>(),
                iov_len: buf.len_bytes(),
            })
            .collect();
        InFlight {
            request,
            iovecs: IoVecs(iovecs),
        }
    }

    /// The SQE of this request (a `READV` into its buffers, a `WRITEV` of them, or an
    /// `FSYNC` of its file), tagged with `slot`.
    fn sqe(&self, slot: u64) -> squeue::Entry {
        let iovec_count = u32::try_from(self.iovecs.0.len()).expect("at most UIO_MAXIOV iovecs");
        let fd = types::Fd(self.request.file.as_raw_fd());
        let iovecs = self.iovecs.0.as_ptr();
        let offset = self.request.offset_bytes;
        let sqe = match self.request.op {
            Op::Read => opcode::Readv::new(fd, iovecs, iovec_count)
                .offset(offset)
                .build(),
            Op::Write => opcode::Writev::new(fd, iovecs, iovec_count)
                .offset(offset)
                .build(),
            Op::Flush {
                kind: FlushKind::Data,
            } => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
            Op::Flush {
                kind: FlushKind::All,
            } => opcode::Fsync::new(fd).build(),
        };
        sqe.user_data(slot)
    }
}

impl Pending {
    /// Requests accepted whose completion has not started yet.
    fn in_flight(&self) -> usize {
        self.slots.len() - self.free_slots.len() + self.backlog.len()
    }

    /// Nothing in flight and no completion running: every accepted request has finished.
    fn is_idle(&self) -> bool {
        self.in_flight() == 0 && self.completions_running == 0
    }
}

impl UringBackend {
    /// Creates a ring of `entries` submission entries and starts its completion thread.
    ///
    /// Fails, so that `open_backend(Auto, ..)` falls back to the pread pool, when the
    /// kernel or a sandbox refuses io_uring (`EPERM`, `ENOSYS` from `io_uring_setup`), when
    /// the kernel cannot say it has `IORING_OP_READV`, `IORING_OP_WRITEV` and
    /// `IORING_OP_FSYNC` (`EINVAL` before 5.6, `Unsupported`),
    /// or when a `Nop` does not make the round trip through the ring.
    pub fn new(entries: u32) -> io::Result<Self> {
        let mut ring = IoUring::new(entries)?;
        probe_opcodes(&ring)?;
        probe_round_trip(&mut ring)?;
        let slot_count = ring.params().sq_entries().min(ring.params().cq_entries()) as usize;
        let shared = Arc::new(Shared {
            ring,
            sq_lock: Mutex::new(()),
            pending: Mutex::new(Pending {
                slots: (0..slot_count).map(|_| None).collect(),
                // Reversed so that slot 0 is handed out first.
                free_slots: (0..slot_count as u64).rev().collect(),
                backlog: VecDeque::new(),
                completions_running: 0,
                phase: Phase::Running,
            }),
            idle: Condvar::new(),
        });
        let completer_shared = Arc::clone(&shared);
        let completer = thread::Builder::new()
            .name("folio-uring".to_owned())
            .spawn(move || completer_shared.run_completion_thread())?;
        Ok(UringBackend {
            shared,
            completer: Some(completer),
        })
    }
}

impl std::fmt::Debug for UringBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringBackend")
            .field("sq_entries", &self.shared.ring.params().sq_entries())
            .field("cq_entries", &self.shared.ring.params().cq_entries())
            .finish_non_exhaustive()
    }
}

impl Backend for UringBackend {
    fn name(&self) -> &str {
        "io_uring"
    }

    fn submit(&self, batch: IoBatch) {
        // Check the whole batch before accepting any of it, so that a broken request does
        // not leave half a batch accepted.
        for request in &batch {
            request.assert_contract();
        }
        let mut sqes = Vec::with_capacity(batch.len());
        {
            let mut pending = self.shared.lock_pending();
            assert_eq!(
                pending.phase,
                Phase::Running,
                "submit on a dropped io_uring backend"
            );
            for request in batch {
                match pending.free_slots.pop() {
                    Some(slot) => {
                        let in_flight = InFlight::new(request);
                        sqes.push(in_flight.sqe(slot));
                        pending.slots[slot as usize] = Some(in_flight);
                    }
                    None => pending.backlog.push_back(request),
                }
            }
        }
        self.shared.push_and_submit(&sqes);
    }

    /// Transfers a request the caller waits for on the caller's thread with `preadv` /
    /// `pwritev` (`io::sync`: the same O_DIRECT transfer), not through the ring: the round
    /// trip through the completion thread costs two thread wake-ups, which on this 2-core
    /// machine with 16 readers doubled a cold random 4 KiB read (folio-bench randread).
    /// The ring keeps the asynchronous requests: readahead, where batching and queue depth
    /// pay.
    fn submit_waited(&self, batch: IoBatch) {
        for request in &batch {
            request.assert_contract();
        }
        for request in batch {
            sync::perform(request);
        }
    }
}

impl Drop for UringBackend {
    /// Waits for every accepted request to complete, then stops the completion thread.
    ///
    /// Context: may run on the completion thread itself, when a completion held the last
    /// handle to the backend. That thread is the only one that reaps, so it reaps the
    /// remaining requests here; it is then detached and exits once the completion that
    /// dropped us returns. Otherwise blocks until the completion thread has exited.
    fn drop(&mut self) {
        let completer = self.completer.take().expect("the completion thread handle");
        if completer.thread().id() == thread::current().id() {
            self.shared.reap_until_nothing_in_flight();
            self.shared.lock_pending().phase = Phase::Stopped;
            return;
        }
        {
            let mut pending = self.shared.lock_pending();
            while !pending.is_idle() {
                pending = self
                    .shared
                    .idle
                    .wait(pending)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            pending.phase = Phase::Stopped;
        }
        // Nothing is in flight, so the ring has room for the wake-up.
        let wake = opcode::Nop::new().build().user_data(WAKE_USER_DATA);
        self.shared.push_and_submit(&[wake]);
        // The completion thread catches completion panics, so this fails only on a bug in
        // this file; there is nothing better to do with it in a destructor.
        let _ = completer.join();
    }
}

impl Shared {
    fn lock_pending(&self) -> MutexGuard<'_, Pending> {
        // Nothing panics while holding this lock except invariant checks that mean a bug in
        // this file, so a poisoned state is still the best state there is.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Pushes `sqes` into the submission ring and submits until the kernel has taken them.
    ///
    /// Context: takes `sq_lock`; the caller holds no lock of this backend. Each SQE must
    /// belong to an occupied slot (or be the shutdown `Nop`).
    fn push_and_submit(&self, sqes: &[squeue::Entry]) {
        if sqes.is_empty() {
            return;
        }
        let _sq_guard = self.sq_lock.lock().unwrap_or_else(PoisonError::into_inner);
        {
            // SAFETY: `sq_lock` is held, and it is held wherever a SubmissionQueue of this
            // ring is made (here and in `sq_is_empty`), so no other one exists.
            let mut sq = unsafe { self.ring.submission_shared() };
            for sqe in sqes {
                // SAFETY: a READV or WRITEV SQE points at the fd, iovecs and buffers of the
                // request in its slot (an FSYNC at its fd only): the slot keeps the Arc<File> (so the fd) and the boxed
                // iovecs alive until the CQE is reaped, and the buffers' owner keeps them
                // valid, untouched (and, for a write, stable) until `done` runs (the backend
                // contract in backend.rs). A Nop points at nothing.
                unsafe { sq.push(sqe) }.expect(
                    "the submission ring has room: its SQEs never outnumber the occupied slots",
                );
            }
            // Dropping `sq` publishes the new tail to the kernel.
        }
        let mut backoff_us = BACKOFF_US_MIN;
        let mut attempts_without_progress = 0u32;
        loop {
            match self.ring.submit() {
                Ok(taken) if taken > 0 => attempts_without_progress = 0,
                Ok(_) => {}
                Err(error) if error.raw_os_error() == Some(libc::EINTR) => continue,
                Err(error) if matches!(error.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY)) => {}
                // The SQEs are in the ring and the kernel may still read them and write the
                // buffers, so their requests can be neither failed nor retried elsewhere.
                Err(error) => panic!("io_uring_enter failed with SQEs in the ring: {error}"),
            }
            if self.sq_is_empty() {
                return;
            }
            attempts_without_progress += 1;
            assert!(
                attempts_without_progress <= BACKOFF_ATTEMPTS_MAX,
                "the kernel took no SQE in {BACKOFF_ATTEMPTS_MAX} attempts"
            );
            thread::sleep(Duration::from_micros(backoff_us));
            backoff_us = (backoff_us * 2).min(BACKOFF_US_MAX);
        }
    }

    /// Whether the kernel has taken every SQE pushed so far.
    ///
    /// Context: the caller holds `sq_lock`.
    fn sq_is_empty(&self) -> bool {
        // SAFETY: the caller holds `sq_lock` (see `push_and_submit`), so no other
        // SubmissionQueue of this ring exists.
        unsafe { self.ring.submission_shared() }.is_empty()
    }

    /// The completion thread's loop: wait, reap, repeat until `drop` stops it.
    fn run_completion_thread(&self) {
        loop {
            self.wait_for_completions();
            self.reap_ready();
            if self.lock_pending().phase == Phase::Stopped {
                return;
            }
        }
    }

    /// Blocks until the CQ holds at least one entry, or a signal or the kernel's refusal
    /// interrupts the wait (the caller reaps whatever is there and waits again).
    ///
    /// `submit_and_wait` also submits SQEs left in the ring, if any; that is safe without
    /// `sq_lock` because the kernel only reads entries below the published tail, and its
    /// own lock serialises concurrent `io_uring_enter` calls.
    ///
    /// Context: completion thread only.
    fn wait_for_completions(&self) {
        match self.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(error) if error.raw_os_error() == Some(libc::EINTR) => {}
            Err(error) if matches!(error.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY)) => {
                thread::sleep(Duration::from_micros(BACKOFF_US_MIN));
            }
            Err(error) => panic!("io_uring_enter failed while waiting for completions: {error}"),
        }
    }

    /// Completes every request whose CQE is in the ring now.
    ///
    /// Context: completion thread only; holds no lock; runs completions.
    fn reap_ready(&self) {
        while let Some(cqe) = self.pop_cqe() {
            if cqe.user_data() != WAKE_USER_DATA {
                self.complete(cqe.user_data(), cqe.result());
            }
        }
    }

    /// Reaps until no accepted request is left, for a `drop` on the completion thread.
    ///
    /// Context: completion thread only, inside a completion (whose own count in
    /// `completions_running` is why this does not wait for `is_idle`).
    fn reap_until_nothing_in_flight(&self) {
        while self.lock_pending().in_flight() > 0 {
            self.wait_for_completions();
            self.reap_ready();
        }
    }

    fn pop_cqe(&self) -> Option<cqueue::Entry> {
        // SAFETY: only the completion thread calls this (also when `drop` runs on it), and
        // the CompletionQueue made here is dropped before this returns, so no other one
        // exists at the same time.
        let mut cq = unsafe { self.ring.completion_shared() };
        cq.next()
    }

    /// Ends the request in `slot` with the kernel's result `res` (bytes transferred, or
    /// `-errno`).
    ///
    /// Context: completion thread only; takes `pending`, then `sq_lock` if a backlog
    /// request takes the slot over; runs `done` with no lock held.
    fn complete(&self, slot: u64, res: i32) {
        let (finished, refill) = {
            let mut pending = self.lock_pending();
            let finished = pending.slots[slot as usize]
                .take()
                .unwrap_or_else(|| panic!("CQE for empty slot {slot}"));
            let refill = match pending.backlog.pop_front() {
                Some(next) => {
                    let in_flight = InFlight::new(next);
                    let sqe = in_flight.sqe(slot);
                    pending.slots[slot as usize] = Some(in_flight);
                    Some(sqe)
                }
                None => {
                    pending.free_slots.push(slot);
                    None
                }
            };
            pending.completions_running += 1;
            (finished, refill)
        };
        if let Some(sqe) = refill {
            self.push_and_submit(&[sqe]);
        }
        let result = if res >= 0 {
            Ok(res as usize)
        } else {
            Err(io::Error::from_raw_os_error(-res))
        };
        let InFlight { request, iovecs } = finished;
        let IoRequest { file, done, .. } = request;
        // The kernel is done with the fd, the iovecs and the buffers: the CQE is posted.
        drop((file, iovecs));
        done.run(result);
        let mut pending = self.lock_pending();
        pending.completions_running -= 1;
        if pending.is_idle() {
            self.idle.notify_all();
        }
    }
}

/// Fails with `Unsupported` when the kernel lacks `IORING_OP_READV`, `IORING_OP_WRITEV`
/// or `IORING_OP_FSYNC`, or with `EINVAL` before 5.6, where `IORING_REGISTER_PROBE` itself
/// is missing.
fn probe_opcodes(ring: &IoUring) -> io::Result<()> {
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    let needed = [
        opcode::Readv::CODE,
        opcode::Writev::CODE,
        opcode::Fsync::CODE,
    ];
    if needed.iter().all(|&code| probe.is_supported(code)) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the kernel's io_uring lacks IORING_OP_READV, IORING_OP_WRITEV or IORING_OP_FSYNC",
        ))
    }
}

/// Sends one `Nop` through the ring and waits for its CQE: proves that `io_uring_enter`
/// works (a seccomp filter may allow `io_uring_setup` and refuse `io_uring_enter`).
fn probe_round_trip(ring: &mut IoUring) -> io::Result<()> {
    let nop = opcode::Nop::new().build().user_data(WAKE_USER_DATA);
    // SAFETY: a Nop references no memory.
    unsafe { ring.submission().push(&nop) }
        .map_err(|_| io::Error::other("a new io_uring has no room for one SQE"))?;
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => break,
            Err(error) if error.raw_os_error() == Some(libc::EINTR) => {}
            Err(error) => return Err(error),
        }
    }
    match ring.completion().next() {
        Some(cqe) if cqe.user_data() == WAKE_USER_DATA && cqe.result() >= 0 => Ok(()),
        Some(cqe) => Err(io::Error::other(format!(
            "io_uring probe Nop completed with {}",
            cqe.result()
        ))),
        None => Err(io::Error::other("io_uring probe Nop never completed")),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::io::backend::Completion;
    use crate::io::testing::*;

    /// The backend, or `None` (with a note) where this kernel or sandbox refuses io_uring:
    /// there `open_backend(Auto, ..)` uses the pread pool and these tests have nothing to
    /// test.
    fn uring_or_skip(entries: u32) -> Option<UringBackend> {
        match UringBackend::new(entries) {
            Ok(backend) => Some(backend),
            Err(error) => {
                eprintln!("io_uring unavailable here ({error}); skipping");
                None
            }
        }
    }

    #[test]
    fn full_read_returns_the_file_bytes() {
        let Some(backend) = uring_or_skip(QUEUE_DEPTH) else {
            return;
        };
        assert_eq!(backend.name(), "io_uring");
        let test_file = test_file();
        assert_eq!(
            test_file.mode,
            OpenMode::Direct,
            "the test file should be O_DIRECT"
        );
        run_full_read(&backend, &test_file);
    }

    #[test]
    fn read_at_end_of_file_is_short() {
        let Some(backend) = uring_or_skip(QUEUE_DEPTH) else {
            return;
        };
        run_end_of_file_reads(&backend, &test_file());
    }

    #[test]
    fn kernel_error_reaches_the_completion() {
        let Some(backend) = uring_or_skip(QUEUE_DEPTH) else {
            return;
        };
        run_kernel_error(&backend, &test_file());
    }

    #[test]
    fn writes_store_their_bytes() {
        let Some(backend) = uring_or_skip(QUEUE_DEPTH) else {
            return;
        };
        assert_eq!(
            scratch_file().mode,
            OpenMode::Direct,
            "the scratch file should be O_DIRECT"
        );
        run_writes_read_back(&backend);
    }

    #[test]
    fn write_error_reaches_the_completion() {
        let Some(backend) = uring_or_skip(QUEUE_DEPTH) else {
            return;
        };
        run_write_error(&backend, &test_file());
    }

    /// Flushes of both kinds, through the ring and on the caller's thread.
    #[test]
    fn flushes_complete_after_their_writes() {
        let Some(backend) = uring_or_skip(QUEUE_DEPTH) else {
            return;
        };
        run_flushes(&backend);
        run_flushes(&Waited(&backend));
    }

    /// Writes and reads through a tiny ring (8 slots): they share slots and backlog.
    #[test]
    fn concurrent_writes_and_reads_share_the_ring() {
        let Some(backend) = uring_or_skip(8) else {
            return;
        };
        run_concurrent_writes(&backend, &test_file());
    }

    /// A waited request (on the caller's thread, not the ring) moves writes too.
    #[test]
    fn waited_writes_and_reads() {
        let Some(backend) = uring_or_skip(QUEUE_DEPTH) else {
            return;
        };
        run_writes_read_back(&Waited(&backend));
        run_full_read(&Waited(&backend), &test_file());
    }

    /// 1600 requests through 128 slots: most wait in the backlog.
    #[test]
    fn concurrent_submissions_read_every_byte() {
        let Some(backend) = uring_or_skip(QUEUE_DEPTH) else {
            return;
        };
        run_concurrent_reads(&backend, &test_file());
    }

    /// A tiny ring (8 slots) under the same load: the backlog is long and every completion
    /// hands its slot over.
    #[test]
    fn tiny_ring_reads_every_byte() {
        let Some(backend) = uring_or_skip(8) else {
            return;
        };
        run_concurrent_reads(&backend, &test_file());
    }

    /// Completions resubmit from the completion thread while every slot is taken (300
    /// chains on 128 slots): the resubmission must go to the backlog, not wait for a slot
    /// that only this thread can free.
    #[test]
    fn completion_may_resubmit_when_every_slot_is_taken() {
        let Some(backend) = uring_or_skip(QUEUE_DEPTH) else {
            return;
        };
        let backend: Arc<dyn Backend> = Arc::new(backend);
        run_resubmitting_chains(&backend, &test_file(), 300, 8);
    }

    #[test]
    fn drop_completes_every_accepted_request() {
        let Some(backend) = uring_or_skip(QUEUE_DEPTH) else {
            return;
        };
        run_drop_completes_everything(Box::new(backend), &test_file());
    }

    /// The last handle dropped on the completion thread, with 200 requests (more than the
    /// slots) still in flight or in the backlog.
    #[test]
    fn dropped_from_inside_a_completion() {
        let Some(backend) = uring_or_skip(QUEUE_DEPTH) else {
            return;
        };
        run_dropped_from_inside_a_completion(Arc::new(backend), &test_file());
    }

    /// A completion that panics does not stop the completion thread.
    #[test]
    fn panicking_completion_keeps_the_completion_thread() {
        let Some(backend) = uring_or_skip(QUEUE_DEPTH) else {
            return;
        };
        let test_file = test_file();
        let buf = AlignedBuf::new(PAGE_BYTES);
        backend.submit(smallvec::smallvec![read_request(
            &test_file.file,
            0,
            buf.frame_buf(),
            Completion::new(|_| panic!("a completion that panics (expected in this test)")),
        )]);
        run_full_read(&backend, &test_file);
    }

    /// An idle backend drops promptly: the wake-up Nop reaches the completion thread.
    #[test]
    fn idle_backend_drops() {
        for _ in 0..20 {
            let Some(backend) = uring_or_skip(QUEUE_DEPTH) else {
                return;
            };
            drop(backend);
        }
    }
}
