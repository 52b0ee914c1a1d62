//! The pread pool: a fixed set of threads that each transfer with `preadv(2)` / `pwritev(2)`
//! and flush with `fdatasync(2)` / `fsync(2)`.
//!
//! Design: `submit` appends the batch, reads, writes and flushes alike, to one FIFO queue and wakes
//! workers. Each worker takes the oldest request, moves its bytes with the synchronous loop
//! of `io::sync` (until its buffers are done, the file ends or the kernel reports an
//! error), and then runs the request's completion on its own thread. It is the fallback
//! for kernels and sandboxes that refuse io_uring, and the inner engine the fault backend
//! wraps in most tests.
//!
//! ```text
//!   submit(batch) ──push──▶ [ queue: VecDeque<IoRequest> ] ──pop──▶ worker 0..threads
//!                                                                     │ sync::perform:
//!                                                                     │ preadv / pwritev loop,
//!                                                                     │ fdatasync / fsync
//!                                                                     ▼
//!                                                           done.run(Ok(n) | Err(e))
//! ```
//!
//! Invariants:
//! - `Shared::state` (one mutex) protects the queue and the phase. No lock is held while a
//!   worker transfers or runs a completion, so a completion may call `submit` on this
//!   backend (the cache resubmits the rest of a short read from inside a completion).
//! - A worker exits only when the phase is `Draining` and it found the queue empty under the
//!   lock. A request is pushed either by `submit` (never during `Drop`, which has `&mut self`)
//!   or by a completion running on a worker, which goes back to the queue before it can exit;
//!   so once every worker has exited the queue is empty and every completion has returned.
//!
//! Limits:
//! - The queue is unbounded: its length is bounded by the requests the caller has in flight,
//!   which the arena bounds (every request owns distinct frames). `submit` never blocks on
//!   transfers, as the `Backend` contract asks.
//! - A transfer that moves fewer bytes than asked is continued from where it stopped; a
//!   later error after some bytes moved is reported as that short count (the cache retries
//!   the rest and then meets the error itself), like `read(2)` and `write(2)` do.
//! - A completion that panics is caught (`Completion::run`) and the worker keeps serving;
//!   it would otherwise shrink the pool for good.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};

use super::backend::{Backend, IoBatch, IoRequest};
use super::sync::perform;

/// A pool of threads calling `preadv(2)` and `pwritev(2)`.
pub struct PreadBackend {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when a request is queued or the phase changes.
    work_ready: Condvar,
}

struct State {
    queue: VecDeque<IoRequest>,
    phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Accepting requests; idle workers sleep on `work_ready`.
    Running,
    /// The backend is being dropped: workers finish the queue, then exit.
    Draining,
}

impl PreadBackend {
    /// Starts `threads` workers (at least one), named `folio-pread-N`.
    pub fn new(threads: usize) -> io::Result<Self> {
        if threads == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the pread backend needs at least one thread",
            ));
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                phase: Phase::Running,
            }),
            work_ready: Condvar::new(),
        });
        // Built before the threads so that a failed spawn drops (and joins) the ones that
        // did start.
        let mut backend = PreadBackend {
            shared,
            workers: Vec::with_capacity(threads),
        };
        for index in 0..threads {
            let shared = Arc::clone(&backend.shared);
            let worker = thread::Builder::new()
                .name(format!("folio-pread-{index}"))
                .spawn(move || shared.run_worker())?;
            backend.workers.push(worker);
        }
        Ok(backend)
    }
}

impl std::fmt::Debug for PreadBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreadBackend")
            .field("threads", &self.workers.len())
            .finish_non_exhaustive()
    }
}

impl Backend for PreadBackend {
    fn name(&self) -> &str {
        "pread"
    }

    fn submit(&self, batch: IoBatch) {
        // Check the whole batch before accepting any of it, so that a broken request does
        // not leave half a batch accepted.
        for request in &batch {
            request.assert_contract();
        }
        let count = batch.len();
        {
            let mut state = self.shared.lock_state();
            assert_eq!(
                state.phase,
                Phase::Running,
                "submit on a dropped pread backend"
            );
            state.queue.extend(batch);
        }
        match count {
            0 => {}
            1 => self.shared.work_ready.notify_one(),
            _ => self.shared.work_ready.notify_all(),
        }
    }

    /// Transfers on the caller's thread: the caller waits anyway, and a worker would only
    /// add two hand-offs (trait docs).
    fn submit_waited(&self, batch: IoBatch) {
        for request in &batch {
            request.assert_contract();
        }
        for request in batch {
            perform(request);
        }
    }
}

impl Drop for PreadBackend {
    /// Finishes every accepted request, then stops the workers.
    ///
    /// Context: may run on one of this backend's own workers, when a completion held the
    /// last handle to the backend. That worker cannot join itself; it is detached instead,
    /// and it exits as soon as the completion that dropped us returns.
    fn drop(&mut self) {
        self.shared.lock_state().phase = Phase::Draining;
        self.shared.work_ready.notify_all();
        let current = thread::current().id();
        for worker in self.workers.drain(..) {
            if worker.thread().id() != current {
                // A worker catches completion panics, so this only fails on a bug in this
                // file; there is nothing better to do with it in a destructor.
                let _ = worker.join();
            }
        }
        // Requests still queued here had no worker left to run them: this thread is the
        // only worker, dropping the backend from inside a completion (other workers exit
        // only once the queue is empty). Run them here, so that every accepted request
        // completes before `drop` returns.
        while let Some(request) = self.shared.lock_state().queue.pop_front() {
            perform(request);
        }
    }
}

impl Shared {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        // The only panic under this lock is `submit`'s phase assertion, which fires before
        // anything changes, so a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run_worker(&self) {
        while let Some(request) = self.next_request() {
            perform(request);
        }
    }

    /// The oldest queued request; blocks while the queue is empty. `None` once the backend
    /// is draining and the queue is empty.
    fn next_request(&self) -> Option<IoRequest> {
        let mut state = self.lock_state();
        loop {
            if let Some(request) = state.queue.pop_front() {
                return Some(request);
            }
            if state.phase == Phase::Draining {
                return None;
            }
            state = self
                .work_ready
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::io::backend::Completion;
    use crate::io::testing::*;

    #[test]
    fn full_read_returns_the_file_bytes() {
        let test_file = test_file();
        let backend = PreadBackend::new(2).unwrap();
        assert_eq!(backend.name(), "pread");
        run_full_read(&backend, &test_file);
    }

    #[test]
    fn read_at_end_of_file_is_short() {
        run_end_of_file_reads(&PreadBackend::new(1).unwrap(), &test_file());
    }

    #[test]
    fn kernel_error_reaches_the_completion() {
        run_kernel_error(&PreadBackend::new(1).unwrap(), &test_file());
    }

    #[test]
    fn vectored_reads_fill_buffers_in_order() {
        run_vectored_reads(&PreadBackend::new(1).unwrap(), &test_file());
    }

    #[test]
    fn writes_store_their_bytes() {
        run_writes_read_back(&PreadBackend::new(2).unwrap());
    }

    #[test]
    fn write_error_reaches_the_completion() {
        run_write_error(&PreadBackend::new(1).unwrap(), &test_file());
    }

    #[test]
    fn flushes_complete_after_their_writes() {
        let backend = PreadBackend::new(2).unwrap();
        run_flushes(&backend);
        run_flushes(&Waited(&backend));
    }

    #[test]
    fn concurrent_writes_and_reads() {
        run_concurrent_writes(&PreadBackend::new(3).unwrap(), &test_file());
    }

    /// `submit_waited` transfers on the caller's thread: reads and writes alike.
    #[test]
    fn waited_writes_and_reads() {
        let backend = PreadBackend::new(1).unwrap();
        run_writes_read_back(&Waited(&backend));
        run_end_of_file_reads(&Waited(&backend), &test_file());
        run_kernel_error(&Waited(&backend), &test_file());
    }

    #[test]
    fn zero_threads_is_refused() {
        let error = PreadBackend::new(0).expect_err("zero threads must be refused");
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn concurrent_submissions_read_every_byte() {
        run_concurrent_reads(&PreadBackend::new(4).unwrap(), &test_file());
    }

    #[test]
    fn completion_may_resubmit() {
        let backend: Arc<dyn Backend> = Arc::new(PreadBackend::new(2).unwrap());
        run_resubmitting_chains(&backend, &test_file(), 16, 32);
    }

    #[test]
    fn drop_completes_every_accepted_request() {
        run_drop_completes_everything(Box::new(PreadBackend::new(2).unwrap()), &test_file());
    }

    /// With one worker the dropping worker must run the queue itself; with several, the
    /// others drain it while it is detached.
    #[test]
    fn dropped_from_inside_a_completion() {
        let test_file = test_file();
        for threads in [1, 3] {
            let backend = Arc::new(PreadBackend::new(threads).unwrap());
            run_dropped_from_inside_a_completion(backend, &test_file);
        }
    }

    /// A completion that panics does not take its worker down.
    #[test]
    fn panicking_completion_keeps_the_worker() {
        let test_file = test_file();
        let backend = PreadBackend::new(1).unwrap();
        let buf = AlignedBuf::new(PAGE_BYTES);
        backend.submit(smallvec::smallvec![read_request(
            &test_file.file,
            0,
            buf.frame_buf(),
            Completion::new(|_| panic!("a completion that panics (expected in this test)")),
        )]);
        run_full_read(&backend, &test_file);
    }
}
