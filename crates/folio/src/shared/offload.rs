//! The threads that read a domain file for its futures and its forced readahead
//! (docs/sharing.md "A domain file's futures and forced readahead"): the shared read path
//! (read.rs) reads with `pread` on the caller's thread, so a future, whose poll must never
//! block its executor's thread, and a `readahead`, which the kernel's `WILLNEED` answers
//! without waiting for the disk, hand the blocking part to a worker of this process's pool.
//!
//! The pool: up to `WORKERS_MAX` threads, started when a job finds none idle, each leaving
//! after `IDLE` with nothing to do, so that a process that never reads a domain file as a
//! future holds none. A job is run under `catch_unwind` (a bug's panic fails that job's
//! read, never the worker: the future sees its answer's sender dropped). Two kinds of job:
//! a future's read (`submit`), always run, and a readahead (`submit_hint`), dropped when
//! `HINTS_QUEUED_MAX` hints already wait (a hint that would run long after its reader
//! passed the pages is worth nothing, and the queue stays bounded whatever a caller asks).
//!
//! Forks: a forked child inherits the pool's memory but none of its threads, and perhaps its
//! mutex locked by a thread that no longer exists. So the pool is this process's by pid:
//! `pool()` makes a new one when the one it finds was made by another process (the
//! parent's is left as it is, a few words). Why not a crate's pool (`blocking`'s, tokio's
//! `spawn_blocking`): the library names no runtime (file/async_read.rs), and `blocking`
//! keeps its idle threads' count in a global that a forked child inherits, so a child's
//! jobs could wait for threads that its parent has and it has not.
//!
//! Protection: the queue and the counts under the pool's mutex; the pool's pointer by one
//! atomic, replaced (by CAS) only when its pid is not ours.
//!
//! Limits: a read that waits for a worker while `WORKERS_MAX` are busy waits in the queue;
//! a worker's thread that cannot be started leaves the job to the caller's thread when no
//! worker exists (it then blocks there, as `read_at` does).

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The most worker threads a process runs (each blocks in one `pread` at a time).
const WORKERS_MAX: usize = 16;

/// How long a worker with nothing to do waits for a job before it leaves.
const IDLE: Duration = Duration::from_secs(1);

/// The most readahead hints queued at once: one more is dropped (module docs).
const HINTS_QUEUED_MAX: usize = 32;

/// A job: a read, run once by a worker (or by its caller, see `submit`).
type Job = Box<dyn FnOnce() + Send>;

/// This process's pool (module docs, "Forks"): null until the first job.
static POOL: AtomicPtr<Pool> = AtomicPtr::new(ptr::null_mut());

/// A process's workers and their queue.
struct Pool {
    /// The process that made it (`std::process::id`).
    pid: u32,
    state: Mutex<State>,
    /// Signalled for each job queued.
    queued: Condvar,
}

#[derive(Default)]
struct State {
    /// Each job, with whether it is a hint.
    jobs: VecDeque<(Job, bool)>,
    /// Hints among `jobs`.
    hints: usize,
    /// Workers running (idle ones included).
    workers: usize,
    /// Workers waiting for a job.
    idle: usize,
    /// Workers in a job.
    running: usize,
}

/// Runs `job` on a worker of this process (module docs): a future's read, never dropped.
///
/// Context: any thread; takes the pool's mutex for a few stores, may start a thread.
pub(crate) fn submit(job: impl FnOnce() + Send + 'static) {
    pool().push(Box::new(job), false);
}

/// Runs `job` on a worker unless `HINTS_QUEUED_MAX` hints wait already (a readahead:
/// module docs); whether it was queued.
///
/// Context: as `submit`.
pub(crate) fn submit_hint(job: impl FnOnce() + Send + 'static) -> bool {
    pool().push(Box::new(job), true)
}

/// The jobs queued or running in this process (the tests wait for none).
#[cfg(test)]
pub(crate) fn busy() -> usize {
    let state = pool().state();
    state.jobs.len() + state.running
}

/// This process's pool, made at the first job and again in a forked child.
fn pool() -> &'static Pool {
    let pid = std::process::id();
    let found = POOL.load(Ordering::Acquire);
    // SAFETY: a non-null `POOL` is a `Box<Pool>` leaked below, never freed (a parent's too:
    // its memory is the child's copy), so it is valid for `'static`; the acquire load pairs
    // with the release of the CAS that published it.
    if let Some(pool) = unsafe { found.as_ref() } {
        if pool.pid == pid {
            return pool;
        }
    }
    let made = Box::into_raw(Box::new(Pool {
        pid,
        state: Mutex::new(State::default()),
        queued: Condvar::new(),
    }));
    match POOL.compare_exchange(found, made, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: `made` is the leaked box we just published, never freed.
        Ok(_) => unsafe { &*made },
        Err(other) => {
            // SAFETY: nobody saw `made` (the CAS failed): ours to free.
            drop(unsafe { Box::from_raw(made) });
            // SAFETY: another thread of ours published `other` (a leaked box, as above)
            // after our load: it is this process's.
            unsafe { &*other }
        }
    }
}

impl Pool {
    fn state(&self) -> MutexGuard<'_, State> {
        // A job runs outside the lock and under `catch_unwind`: a poisoned lock could
        // only come from a panic among our own few stores, which leave the state whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `job`, wakes a worker or starts one; a hint may be dropped (false).
    fn push(&'static self, job: Job, hint: bool) -> bool {
        let mut state = self.state();
        if hint {
            if state.hints >= HINTS_QUEUED_MAX {
                return false;
            }
            state.hints += 1;
        }
        state.jobs.push_back((job, hint));
        let start = state.jobs.len() > state.idle && state.workers < WORKERS_MAX;
        if start {
            state.workers += 1;
        }
        drop(state);
        self.queued.notify_one();
        if start {
            let started = std::thread::Builder::new()
                .name("folio-domain-io".into())
                .spawn(move || self.work());
            if started.is_err() {
                self.not_started();
            }
        }
        true
    }

    /// A worker that could not be started: when none runs, the caller's thread runs the
    /// queue (module docs, "Limits"), so that no future waits for a worker that never comes.
    fn not_started(&self) {
        let mut state = self.state();
        state.workers -= 1;
        if state.workers > 0 {
            return;
        }
        while let Some(job) = Self::pop(&mut state) {
            drop(state);
            run(job);
            state = self.state();
        }
    }

    /// The next job, its hint uncounted.
    fn pop(state: &mut State) -> Option<Job> {
        let (job, hint) = state.jobs.pop_front()?;
        if hint {
            state.hints -= 1;
        }
        Some(job)
    }

    /// A worker's life: jobs until none comes for `IDLE`.
    fn work(&self) {
        let mut state = self.state();
        loop {
            if let Some(job) = Self::pop(&mut state) {
                state.running += 1;
                drop(state);
                run(job);
                state = self.state();
                state.running -= 1;
                continue;
            }
            state.idle += 1;
            let (woken, waited) = self
                .queued
                .wait_timeout(state, IDLE)
                .unwrap_or_else(PoisonError::into_inner);
            state = woken;
            state.idle -= 1;
            if waited.timed_out() && state.jobs.is_empty() {
                state.workers -= 1;
                return;
            }
        }
    }
}

/// Runs one job; a panic ends the job (its answer's sender dropped), not the worker.
fn run(job: Job) {
    let _ = catch_unwind(AssertUnwindSafe(job));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::{mpsc, Arc};

    #[test]
    fn every_job_runs_once_and_a_panic_ends_only_its_own() {
        let ran = Arc::new(AtomicUsize::new(0));
        let (done, finished) = mpsc::channel();
        let jobs = 200;
        for i in 0..jobs {
            let (ran, done) = (ran.clone(), done.clone());
            submit(move || {
                if i % 50 == 7 {
                    panic!("a job's panic (expected by this test)");
                }
                ran.fetch_add(1, Ordering::Relaxed);
                done.send(i).unwrap();
            });
        }
        drop(done);
        // Every sender dropped (the panicked jobs' with their unwinding): the channel ends.
        let mut seen: Vec<usize> = finished.iter().collect();
        seen.sort_unstable();
        let expected: Vec<usize> = (0..jobs).filter(|i| i % 50 != 7).collect();
        assert_eq!(seen, expected);
        assert_eq!(ran.load(Ordering::Relaxed), expected.len());
        assert!(pool().state().workers <= WORKERS_MAX);
    }

    #[test]
    fn hints_past_the_bound_are_dropped_and_reads_never() {
        // Every worker held by a read that waits for the test's word, so that the hints
        // queue behind them.
        let (release, gate) = mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        let (started, running) = mpsc::channel();
        for _ in 0..WORKERS_MAX {
            let (gate, started) = (gate.clone(), started.clone());
            submit(move || {
                started.send(()).unwrap();
                let _ = gate.lock().unwrap().recv();
            });
        }
        // One holds the gate's lock in `recv`; the rest wait for that lock: all started.
        for _ in 0..WORKERS_MAX {
            running.recv().unwrap();
        }
        let ran = Arc::new(AtomicUsize::new(0));
        let queued = (0..HINTS_QUEUED_MAX + 8)
            .filter(|_| {
                let ran = ran.clone();
                submit_hint(move || {
                    ran.fetch_add(1, Ordering::Relaxed);
                })
            })
            .count();
        // Another test's hints may share the pool: at most the bound queued, some dropped.
        assert!(queued <= HINTS_QUEUED_MAX, "{queued} hints queued");
        let (read_done, read_seen) = mpsc::channel();
        submit(move || read_done.send(()).unwrap());
        drop(release);
        read_seen.recv().unwrap();
    }

    #[test]
    fn a_forked_child_runs_its_jobs_on_its_own_pool() {
        let (done, seen) = mpsc::channel();
        submit(move || done.send(()).unwrap());
        seen.recv().unwrap();
        // SAFETY: the child calls only async-signal-safe functions besides the pool's,
        // which is the point of the test: it makes a new pool (fresh mutex, its own
        // threads); it leaves by `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let (done, seen) = mpsc::channel();
            submit(move || done.send(()).unwrap());
            let ok = seen.recv_timeout(Duration::from_secs(20)).is_ok()
                && pool().pid == std::process::id();
            // SAFETY: leaves the child without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is ours to fill.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child's job did not run on its pool: status {status:#x}"
        );
    }
}
