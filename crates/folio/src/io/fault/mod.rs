//! The fault backend: wraps a real backend and injects the faults a disk and a kernel can
//! produce, so that tests can drive the cache's error, retry, timing and durability paths
//! on purpose.
//!
//! Fault model (what a test can make happen, and when it fires). A "request" is a read, a
//! write or a flush; every fault applies to all three unless it says otherwise:
//!
//! - **Media error**, `fail_range(r)`: every read or write overlapping a failed range of
//!   file bytes completes with `EIO`. It never reaches the inner backend: a read's buffers
//!   are left untouched, a write's bytes never reach the file.
//! - **Write error**, `fail_writes(r, errno)`: every write overlapping `r` completes with
//!   `errno` (`EIO`, or `ENOSPC`: a full disk), without reaching the file. Reads of `r`
//!   are not affected.
//! - **Flush error**, `fail_flushes(errno)`: every flush completes with `errno` without
//!   reaching the kernel, so nothing it would have covered becomes durable (the power-loss
//!   model below still holds those writes as un-flushed).
//! - **Short transfer**, `short_reads(n)` / `short_writes(n)`: the next `n` reads (writes)
//!   longer than 4096 bytes reach the inner backend cut to their first 4096 bytes (the
//!   same memory), so they complete with `Ok(len <= 4096)` and the caller must transfer
//!   the rest itself (a short write stores only its first 4096 bytes).
//! - **Latency**, `delay(d)`: every request's completion, an injected error's included,
//!   runs `d` after the inner backend finished it (after `submit`, for an injected error).
//! - **Held completions**, `hold_completions()` / `release_completions()`: the completion
//!   of every request passed on while completions are held waits, once the inner
//!   backend (and any delay) is done with it, until the test releases them: requests
//!   stay in flight exactly as long as the test needs (a lever, not a duration).
//! - **Seeded simulation**, `FaultBackend::seeded(inner, seed, config)` or
//!   `simulate(seed, config)`: each request draws its faults from a hash of (seed, op,
//!   file offset, length, ordinal), where the ordinal counts the earlier requests for the
//!   same range (same file, by device and inode, same op, same offset, same length). See
//!   [`SimConfig`] and `simulation.rs`:
//!   - a media error (`EIO`, as above; for a flush, a flush error) with probability
//!     `eio_per_mille / 1000`;
//!   - otherwise, for a read or write longer than a page, a short transfer with
//!     probability `short_per_mille / 1000`, cut to a drawn whole number of pages: at least
//!     one, and at least one page fewer than asked;
//!   - a completion delay drawn from `[0, delay_max]`;
//!   - with `reorder > 0`, a rank: once due, the completion waits in a pen of at most
//!     `reorder` completions, which releases its lowest rank first when a new arrival
//!     overflows it, or when its oldest member has waited `hold_max` (`delivery.rs`).
//!
//!   A failing seed therefore replays: the n-th request for a range meets the same faults
//!   whatever the threads' timing. Which requests the cache makes, and which completions
//!   meet in the pen, still depend on timing; the faults of each request do not. Writes
//!   and flushes draw from streams of their own: they change no read's draws.
//! - **Power loss**, `power_loss(seed)` (`power.rs`): the backend records, per file, every
//!   write that reached the file since the last successful flush of that file that
//!   covered it: each 4 KiB block's durable bytes (its pre-image, read before the first
//!   such write is passed on) and the bytes of each write to it that completed since. A
//!   flush that completes Ok makes durable the writes whose completions ran before it was
//!   submitted (the backend contract's ordering), nothing else; a failed flush, nothing.
//!   `power_loss(seed)` then rewinds the real files: each un-flushed write is drawn kept,
//!   lost, or torn (kept in some of its 4 KiB blocks, lost in the others), a pure function
//!   of (seed, the write's offset, length and occurrence, the block); each block is left
//!   with the latest write to it that survives, or with its durable bytes. So after
//!   `power_loss`, reopening a file shows what a power cut could leave: every flushed
//!   write intact, every other block old or new, 4 KiB at a time, never bytes nobody
//!   wrote. The files are synced and the record is emptied (their state is now durable).
//!
//!   The model sees every write that reaches a file it records, not only the requests
//!   passed on: a short write's rest, which the cache writes itself through
//!   `io::sync::transfer` inside the write's completion, is recorded as a write of its own
//!   (the model is a `sync::WriteWitness`), and the blocks past a short write's end stay
//!   in flight until that completion has returned (so a flush cannot forget them, nor a
//!   power loss come, before the rest is recorded). Without this (issue 42) a flush after
//!   the rest kept an older version of its blocks as durable, and a power loss could
//!   rewind them to bytes no disk could still hold
//!   (`tests::a_short_writes_remainder_is_durable_after_a_later_flush`).
//!
//! - Every control takes effect for requests submitted after the call; a request's fate is
//!   decided once, in `submit`, from the plan at that moment. `clear` empties the plan, the
//!   simulation and its ordinals included; it keeps the power-loss record, which is the
//!   state of the disk, not a plan.
//! - Faults are decided in this order: an injected error (a failed range, a failed write
//!   range, a failed flush, or a drawn one) excludes the others (the request is not
//!   passed on at all); a planned short transfer (4096 bytes) comes before a drawn one; a
//!   short transfer and a delay may combine; a planned and a drawn delay add up. A request
//!   that fails does not use up a short transfer.
//! - Failed ranges accumulate until `clear`; `short_reads(n)` and `short_writes(n)` replace
//!   the count left; `delay(d)` replaces the delay (`Duration::ZERO` turns it off);
//!   `fail_flushes` replaces the flush errno; `simulate` replaces the simulation.
//! - Counters count requests of every op, at decision time: `eio_injected` (failed with
//!   an injected `EIO`), `other_errors_injected` (with another injected errno),
//!   `short_injected`, `delayed` (a nonzero delay); and completions, at release:
//!   `reordered` (released from the pen ahead of one that entered it earlier).
//! - Every submitted read and write is also logged as (offset, length): reads for
//!   `take_requests`, writes for `take_writes`.
//!
//! Not modelled: corrupted or misdirected transfers (the bytes a read returns are always
//! the file's, a write stores exactly its bytes), torn reads, a request that never
//! completes, a lost write that reports success before a power loss, size changes at a
//! power loss (a file keeps its length; blocks past a lost extension read as zeros), a
//! power loss with writes in flight (refused), writes another process makes (a keeper's,
//! a forked child's), and writes through `io::sync::transfer` to a file the model holds
//! no record of at that moment (a recovery's, before any write of that file through this
//! backend): those count as durable as they land, so the model may be kinder than a disk
//! there, never harsher. Faults are deterministic: the same plan and
//! the same submission order give the same planned faults, and the same seed gives the
//! same drawn faults to the same request and the same power loss to the same record.
//!
//! Design: `submit` and `submit_waited` decide each request's fate under `Faults::plan`,
//! pass the survivors to the inner backend's same entry in one batch, and hand failed
//! requests, delayed completions and completions to reorder to the delivery thread
//! (`delivery.rs`), which runs each one when it is due, through the reorder pen if it has
//! a rank. A completion injected here therefore never runs inside `submit`, and `submit`
//! never sleeps. Requests without a delay or a rank complete as the inner backend
//! completes them: from its threads, or (`submit_waited`) possibly on the submitting
//! thread. Writes and flushes passed on carry one more wrapper, innermost, that records
//! their completion in the power-loss model as soon as the inner backend reports it.
//!
//! Protection: `Faults::plan` (a mutex) protects the plan and the simulation's ordinals;
//! `Faults::unflushed` (a mutex, never held with `plan`) the power-loss record;
//! `Faults::held` (a mutex, never held with another) the held completions; the
//! counters are atomics; the delivery has its own lock (`delivery.rs`). No lock is held
//! while a completion runs or while the inner backend is called, so a completion may call
//! `submit` again.
//!
//! Invariants:
//! - `Drop` drops the inner backend first (which finishes its requests, scheduling their
//!   delayed completions), then lets the delivery thread run every scheduled completion
//!   (the pen is released at once, lowest rank first).
//!
//! Limits: the logs keep at most `LOG_REQUESTS_MAX` requests each; the simulation's limit
//! is in `simulation.rs`, the power-loss record's in `power.rs`. Recording a write reads
//! the pre-image of each block it is the first to touch since a flush, on the submitting
//! thread: a short buffered read that `submit` does, unlike a production engine.

mod delivery;
mod power;
mod simulation;
#[cfg(test)]
mod tests;

use std::fs::File as StdFile;
use std::io;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use self::delivery::{Delivery, Hold};
use self::power::{FileId, Rest, Unflushed};
pub use self::power::{PowerLoss, POWER_BLOCK_BYTES};
pub use self::simulation::SimConfig;
use self::simulation::{RangeKey, Sim};
use super::backend::{Backend, Completion, FrameBufs, IoBatch, IoRequest, Op};
use super::sync::{self, WriteWitness};

/// The length a planned short transfer is cut to.
pub const SHORT_READ_BYTES: usize = 4096;

/// A backend that injects faults into another one. See the module docs for the fault model.
pub struct FaultBackend {
    /// `None` only during `drop`.
    inner: Option<Box<dyn Backend>>,
    /// "fault(<inner name>)".
    name: String,
    faults: Arc<Faults>,
    delivery: Arc<Delivery>,
    /// `None` only during `drop`.
    delivery_thread: Option<JoinHandle<()>>,
}

/// The test's handle on a [`FaultBackend`]: sets faults and reads counters. Clones share
/// the same plan.
#[derive(Clone)]
pub struct FaultControl {
    faults: Arc<Faults>,
    delivery: Arc<Delivery>,
}

struct Faults {
    plan: Mutex<Plan>,
    /// `hold_completions`: whether completions are held, and those held so far.
    held: Mutex<Held>,
    /// The power-loss model's record (`power.rs`).
    unflushed: Mutex<Unflushed>,
    /// Whether `plan.sim` is set: `submit` then learns each request's file identity
    /// (an `fstat`) before it takes the plan's lock.
    simulating: AtomicBool,
    eio_injected: AtomicU64,
    other_errors_injected: AtomicU64,
    short_injected: AtomicU64,
    delayed: AtomicU64,
}

#[derive(Default)]
struct Plan {
    /// File byte ranges whose reads and writes fail with EIO.
    fail_ranges: Vec<Range<u64>>,
    /// File byte ranges whose writes fail, each with its errno.
    fail_write_ranges: Vec<(Range<u64>, i32)>,
    /// The errno every flush fails with, if any.
    flush_errno: Option<i32>,
    /// How many more long reads get cut to `SHORT_READ_BYTES`.
    short_reads_left: u32,
    /// How many more long writes get cut to `SHORT_READ_BYTES`.
    short_writes_left: u32,
    /// Added to every completion; zero for none.
    delay: Duration,
    /// The seeded simulation, if one runs.
    sim: Option<Sim>,
    /// Every read submitted, as (file offset, length), in submission order: what a test
    /// observes (readahead windows, one read per run). Bounded by `LOG_REQUESTS_MAX`.
    reads: Vec<(u64, usize)>,
    /// Every write submitted, as the reads are.
    writes: Vec<(u64, usize)>,
    /// The reads of each submission (a `submit` or `submit_waited` call) that had any,
    /// in order: how a caller batches its reads. Bounded by `LOG_REQUESTS_MAX`.
    read_batches: Vec<usize>,
}

/// Completions held by `FaultControl::hold_completions` until `release_completions`.
#[derive(Default)]
struct Held {
    on: bool,
    parked: Vec<(Completion, io::Result<usize>)>,
}

/// Requests each log keeps; later ones are not recorded.
const LOG_REQUESTS_MAX: usize = 1 << 20;

/// What `submit` does with one request.
struct Fate {
    outcome: Outcome,
    delay: Duration,
    /// Where the completion waits in the reorder pen, if it does.
    hold: Option<Hold>,
}

enum Outcome {
    /// Complete with this errno without passing the request on.
    Fail(i32),
    /// Pass to the inner backend with the buffers cut to this many bytes.
    TransferShort(usize),
    /// Pass to the inner backend unchanged.
    Transfer,
}

impl FaultBackend {
    /// Wraps `inner`; no fault is planned until the returned control sets one.
    ///
    /// Panics if the delivery thread cannot be started (this backend is for tests).
    pub fn new(inner: Box<dyn Backend>) -> (FaultBackend, FaultControl) {
        let faults = Arc::new(Faults {
            plan: Mutex::new(Plan::default()),
            held: Mutex::new(Held::default()),
            unflushed: Mutex::new(Unflushed::default()),
            simulating: AtomicBool::new(false),
            eio_injected: AtomicU64::new(0),
            other_errors_injected: AtomicU64::new(0),
            short_injected: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
        });
        let witness: Weak<Faults> = Arc::downgrade(&faults);
        sync::add_witness(witness as Weak<dyn WriteWitness>);
        let (delivery, delivery_thread) = Delivery::start();
        let backend = FaultBackend {
            name: format!("fault({})", inner.name()),
            inner: Some(inner),
            faults: Arc::clone(&faults),
            delivery: Arc::clone(&delivery),
            delivery_thread: Some(delivery_thread),
        };
        (backend, FaultControl { faults, delivery })
    }

    /// Wraps `inner` with a seeded simulation running from the start: `new`, then
    /// [`FaultControl::simulate`].
    pub fn seeded(
        inner: Box<dyn Backend>,
        seed: u64,
        config: SimConfig,
    ) -> (FaultBackend, FaultControl) {
        let (backend, control) = FaultBackend::new(inner);
        control.simulate(seed, config);
        (backend, control)
    }

    fn inner(&self) -> &dyn Backend {
        self.inner
            .as_deref()
            .expect("the inner backend lives until drop")
    }

    /// Decides the fate of every request of `batch`: schedules the failed ones' errors on
    /// the delivery thread, cuts the short ones, records the writes and flushes passed on
    /// in the power-loss model, routes the delayed or ranked ones' completions through the
    /// delivery thread, and returns the requests to pass on.
    fn inject(&self, batch: IoBatch) -> IoBatch {
        // The simulation counts requests per file, and the power-loss model records writes
        // and flushes per file: learn the files outside the locks.
        let simulating = self.faults.simulating.load(Ordering::Acquire);
        let files: Vec<FileId> = batch
            .iter()
            .map(|r| match r.op {
                Op::Write | Op::Flush { .. } => file_identity(&r.file),
                Op::Read if simulating => file_identity(&r.file),
                Op::Read => (0, 0),
            })
            .collect();
        let fates: Vec<Fate> = {
            let mut plan = self.faults.lock_plan();
            let reads = batch.iter().filter(|r| r.op == Op::Read).count();
            if reads > 0 && plan.read_batches.len() < LOG_REQUESTS_MAX {
                plan.read_batches.push(reads);
            }
            batch
                .iter()
                .zip(&files)
                .map(|(request, &file)| self.faults.decide(&mut plan, request, file))
                .collect()
        };
        let mut survivors = IoBatch::with_capacity(batch.len());
        for ((mut request, fate), file) in batch.into_iter().zip(fates).zip(files) {
            // A write's length as its caller asked: the power-loss model keeps the blocks
            // past a short write's end in flight until the caller has written them.
            let asked_bytes = request.len_bytes();
            match fate.outcome {
                Outcome::Fail(errno) => {
                    let error = Err(io::Error::from_raw_os_error(errno));
                    self.delivery.schedule(
                        Instant::now() + fate.delay,
                        request.done,
                        error,
                        fate.hold,
                    );
                    continue;
                }
                Outcome::TransferShort(len_bytes) => request.bufs = cut_to(request.bufs, len_bytes),
                Outcome::Transfer => {}
            }
            if request.op == Op::Write {
                // Outermost: runs after the caller's completion, which writes a short
                // write's rest (before any delay, which only schedules it).
                request.done =
                    self.end_rest_after(request.done, file, request.offset_bytes, asked_bytes);
            }
            if self.faults.lock_held().on {
                // Parked once the inner backend (and any delay) is done with it.
                let faults = Arc::clone(&self.faults);
                let done = request.done;
                request.done = Completion::new(move |result| faults.park(done, result));
            }
            if !fate.delay.is_zero() || fate.hold.is_some() {
                let delivery = Arc::clone(&self.delivery);
                let done = request.done;
                let (delay, hold) = (fate.delay, fate.hold);
                request.done = Completion::new(move |result| {
                    delivery.schedule(Instant::now() + delay, done, result, hold);
                });
            }
            // Innermost, so it records the completion when the inner backend reports it.
            survivors.push(self.record_for_power_loss(request, file, asked_bytes));
        }
        survivors
    }
}

impl FaultBackend {
    /// Wraps the completion `done` of a write of `asked_bytes` at `offset_bytes` of `file`
    /// so that, once it has run, a short write's rest is no longer in flight in the
    /// power-loss model (`Unflushed::end_rest`): the caller's completion wrote it, and
    /// the witness recorded that (`WriteWitness for Faults`).
    fn end_rest_after(
        &self,
        done: Completion,
        file: FileId,
        offset_bytes: u64,
        asked_bytes: usize,
    ) -> Completion {
        let faults = Arc::clone(&self.faults);
        Completion::new(move |result| {
            let written_bytes = result.as_ref().ok().copied();
            done.run(result);
            if let Some(written_bytes) = written_bytes.filter(|&n| n < asked_bytes) {
                faults
                    .lock_unflushed()
                    .end_rest(file, offset_bytes, asked_bytes, written_bytes);
            }
        })
    }

    /// Records a write or flush about to be passed on in the power-loss model, and wraps
    /// its completion to record how it ended (`power.rs`); a write as its caller asked,
    /// `asked_bytes` long, even if it is passed on cut short. Reads are returned as they
    /// are.
    ///
    /// Context: takes `Faults::unflushed` briefly; reads the file for a write's pre-images.
    fn record_for_power_loss(
        &self,
        request: IoRequest,
        file: FileId,
        asked_bytes: usize,
    ) -> IoRequest {
        let IoRequest {
            op,
            file: open_file,
            offset_bytes,
            bufs,
            done,
        } = request;
        let faults = Arc::clone(&self.faults);
        let done = match op {
            Op::Read => done,
            Op::Write => {
                faults
                    .lock_unflushed()
                    .before_write(&open_file, file, offset_bytes, asked_bytes);
                Completion::new(move |result| {
                    faults.lock_unflushed().after_write(
                        file,
                        offset_bytes,
                        asked_bytes,
                        &result,
                        Rest::CallerWrites,
                    );
                    done.run(result);
                })
            }
            Op::Flush { .. } => {
                let mark = faults.lock_unflushed().flush_mark();
                Completion::new(move |result| {
                    if result.is_ok() {
                        faults.lock_unflushed().after_flush(file, mark);
                    }
                    done.run(result);
                })
            }
        };
        IoRequest {
            op,
            file: open_file,
            offset_bytes,
            bufs,
            done,
        }
    }
}

/// The power-loss model sees the writes the cache makes itself (`io::sync::transfer`: a
/// short write's rest, a recovery's writes) to a file it records.
impl WriteWitness for Faults {
    /// Context: takes `Faults::unflushed` briefly; reads the file for pre-images.
    fn before_write(&self, file: &StdFile, offset_bytes: u64, len_bytes: usize) -> bool {
        let id = file_identity(file);
        let mut unflushed = self.lock_unflushed();
        if !unflushed.is_recorded(id) {
            return false;
        }
        unflushed.before_write(file, id, offset_bytes, len_bytes);
        true
    }

    /// Context: takes `Faults::unflushed` briefly; reads the written blocks back.
    fn after_write(
        &self,
        file: &StdFile,
        offset_bytes: u64,
        len_bytes: usize,
        result: &io::Result<usize>,
    ) {
        let id = file_identity(file);
        self.lock_unflushed()
            .after_write(id, offset_bytes, len_bytes, result, Rest::Dropped);
    }
}

impl std::fmt::Debug for FaultBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultBackend")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Backend for FaultBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn submit(&self, batch: IoBatch) {
        let survivors = self.inject(batch);
        if !survivors.is_empty() {
            self.inner().submit(survivors);
        }
    }

    /// As `submit`, with the survivors going to the inner backend's `submit_waited`: a
    /// miss its reader waits for may be read on the reader's thread, faults and all.
    fn submit_waited(&self, batch: IoBatch) {
        let survivors = self.inject(batch);
        if !survivors.is_empty() {
            self.inner().submit_waited(survivors);
        }
    }
}

/// The (device, inode) of an open file; (0, 0) if `fstat` fails (it does not on a file
/// the cache just opened and used).
fn file_identity(file: &StdFile) -> (u64, u64) {
    file.metadata().map_or((0, 0), |m| (m.dev(), m.ino()))
}

impl Drop for FaultBackend {
    /// Finishes every accepted request (waiting out their delays), then stops the delivery
    /// thread.
    ///
    /// Context: may run on the delivery thread or on a thread of the inner backend, when a
    /// completion held the last handle to this backend. On the delivery thread, it runs the
    /// remaining due completions itself and detaches the thread, which exits once the
    /// completion that dropped us returns.
    fn drop(&mut self) {
        // Finishes the inner backend's requests; their delayed completions are scheduled.
        drop(self.inner.take());
        // Held completions run too; any parked later runs at once (`Faults::park`).
        self.faults.release_held(&self.delivery);
        let delivery_thread = self
            .delivery_thread
            .take()
            .expect("the delivery thread handle");
        self.delivery.begin_draining();
        if delivery_thread.thread().id() == thread::current().id() {
            self.delivery.run();
        } else {
            // The delivery thread catches completion panics, so this fails only on a bug
            // in this file; there is nothing better to do with it in a destructor.
            let _ = delivery_thread.join();
        }
    }
}

/// The first `len_bytes` of `bufs`, as buffers over the same memory. `len_bytes` must be
/// aligned (so every cut falls on a buffer's aligned boundary).
fn cut_to(bufs: FrameBufs, len_bytes: usize) -> FrameBufs {
    let mut left_bytes = len_bytes;
    let mut cut = FrameBufs::with_capacity(bufs.len());
    for buf in bufs {
        if left_bytes == 0 {
            break;
        }
        let take_bytes = buf.len_bytes().min(left_bytes);
        cut.push(buf.head(take_bytes));
        left_bytes -= take_bytes;
    }
    cut
}

impl std::fmt::Debug for FaultControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultControl")
            .field("eio_injected", &self.eio_injected())
            .field("other_errors_injected", &self.other_errors_injected())
            .field("short_injected", &self.short_injected())
            .field("delayed", &self.delayed())
            .field("reordered", &self.reordered())
            .finish_non_exhaustive()
    }
}

impl FaultControl {
    /// Fails with EIO every later request that overlaps `range` (file byte offsets).
    /// Ranges accumulate until [`clear`](Self::clear).
    pub fn fail_range(&self, range: Range<u64>) {
        self.faults.lock_plan().fail_ranges.push(range);
    }

    /// Fails every later write that overlaps `range` (file byte offsets) with `errno`
    /// (`libc::EIO`, `libc::ENOSPC`, ...), without storing any of it. Ranges accumulate
    /// until [`clear`](Self::clear); a write overlapping several fails with the first
    /// one's errno.
    pub fn fail_writes(&self, range: Range<u64>, errno: i32) {
        self.faults
            .lock_plan()
            .fail_write_ranges
            .push((range, errno));
    }

    /// Fails every later flush with `errno` (`libc::EIO`, ...), without flushing: the
    /// writes it would have covered stay un-flushed. Replaces any errno set before.
    pub fn fail_flushes(&self, errno: i32) {
        self.faults.lock_plan().flush_errno = Some(errno);
    }

    /// Cuts the power (the fault model above): rewrites every file written since its last
    /// flush to what `seed` leaves of it, syncs it, and empties the record. Returns how
    /// many blocks kept their latest bytes and how many lost them.
    ///
    /// Panics if a write is in flight: call it when every write has completed.
    ///
    /// Context: takes the record's lock; writes and syncs files.
    pub fn power_loss(&self, seed: u64) -> io::Result<PowerLoss> {
        self.faults.lock_unflushed().power_loss(seed)
    }

    /// Cuts the next `count` reads longer than 4096 bytes to their first 4096 bytes, so
    /// that they complete with a short count. Replaces any count left.
    pub fn short_reads(&self, count: u32) {
        self.faults.lock_plan().short_reads_left = count;
    }

    /// Cuts the next `count` writes longer than 4096 bytes to their first 4096 bytes: they
    /// store those bytes only, and complete with a short count. Replaces any count left.
    pub fn short_writes(&self, count: u32) {
        self.faults.lock_plan().short_writes_left = count;
    }

    /// Holds the completion of every request passed on from now on, once the inner
    /// backend (and any delay) is done with it, until
    /// [`release_completions`](Self::release_completions): a test's lever to keep
    /// requests in flight for as long as it needs, instead of a delay it hopes is long
    /// enough. Injected errors are not held. Dropping the backend releases them.
    pub fn hold_completions(&self) {
        self.faults.lock_held().on = true;
    }

    /// Ends `hold_completions`: the held completions run on the delivery thread, in the
    /// order they were held, and later ones run as they come.
    ///
    /// Context: takes the held list's lock briefly; runs no completion itself.
    pub fn release_completions(&self) {
        self.faults.release_held(&self.delivery);
    }

    /// Completions held now (`hold_completions`).
    pub fn held_completions(&self) -> usize {
        self.faults.lock_held().parked.len()
    }

    /// Delays the completion of every later request by `delay` (zero turns it off).
    pub fn delay(&self, delay: Duration) {
        self.faults.lock_plan().delay = delay;
    }

    /// Starts a seeded simulation (module docs) for later requests, replacing any running
    /// one: its ordinals start again from zero.
    ///
    /// Panics if a rate is above 1000 per mille.
    pub fn simulate(&self, seed: u64, config: SimConfig) {
        assert!(
            config.eio_per_mille <= 1000 && config.short_per_mille <= 1000,
            "rates are per mille: {config:?}"
        );
        self.faults.lock_plan().sim = Some(Sim::new(seed, config));
        self.faults.simulating.store(true, Ordering::Release);
    }

    /// Removes every planned fault and the simulation; the counters keep their values.
    pub fn clear(&self) {
        let mut plan = self.faults.lock_plan();
        let reads = std::mem::take(&mut plan.reads);
        let writes = std::mem::take(&mut plan.writes);
        *plan = Plan {
            reads,
            writes,
            ..Plan::default()
        };
        self.faults.simulating.store(false, Ordering::Release);
    }

    /// Requests failed with an injected EIO so far.
    pub fn eio_injected(&self) -> u64 {
        self.faults.eio_injected.load(Ordering::Relaxed)
    }

    /// Requests failed with another injected errno (`fail_writes`, `fail_flushes`) so far.
    pub fn other_errors_injected(&self) -> u64 {
        self.faults.other_errors_injected.load(Ordering::Relaxed)
    }

    /// Requests cut short so far.
    pub fn short_injected(&self) -> u64 {
        self.faults.short_injected.load(Ordering::Relaxed)
    }

    /// Requests whose completion was delayed so far.
    pub fn delayed(&self) -> u64 {
        self.faults.delayed.load(Ordering::Relaxed)
    }

    /// Completions the reorder pen released ahead of one that entered it earlier.
    pub fn reordered(&self) -> u64 {
        self.delivery.reordered()
    }

    /// The reads submitted since the cache was built or the log was last taken, as
    /// (file offset, length), in submission order; empties the log.
    pub fn take_requests(&self) -> Vec<(u64, usize)> {
        std::mem::take(&mut self.faults.lock_plan().reads)
    }

    /// The number of reads in each submission that had any (one `Backend::submit` or
    /// `submit_waited` call each), since the backend was built or this log was last
    /// taken, in order; empties the log.
    pub fn take_read_batches(&self) -> Vec<usize> {
        std::mem::take(&mut self.faults.lock_plan().read_batches)
    }

    /// The writes submitted since the backend was built or this log was last taken, as
    /// `take_requests` gives the reads.
    pub fn take_writes(&self) -> Vec<(u64, usize)> {
        std::mem::take(&mut self.faults.lock_plan().writes)
    }
}

impl Faults {
    fn lock_plan(&self) -> MutexGuard<'_, Plan> {
        // The plan is plain data, valid after any panic.
        self.plan.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_held(&self) -> MutexGuard<'_, Held> {
        // A flag and a list, valid after any panic.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A held request's completion is due: parks it while completions are held, or runs
    /// it at once if they were released meanwhile.
    ///
    /// Context: a completion's thread (the inner backend's, or the delivery thread).
    fn park(&self, done: Completion, result: io::Result<usize>) {
        let mut held = self.lock_held();
        if held.on {
            held.parked.push((done, result));
            return;
        }
        drop(held);
        done.run(result);
    }

    /// Stops holding and schedules every held completion on `delivery`, now.
    ///
    /// Context: takes the held list's lock briefly; never while the delivery drains.
    fn release_held(&self, delivery: &Delivery) {
        let parked = {
            let mut held = self.lock_held();
            held.on = false;
            std::mem::take(&mut held.parked)
        };
        let now = Instant::now();
        for (done, result) in parked {
            delivery.schedule(now, done, result, None);
        }
    }

    fn lock_unflushed(&self) -> MutexGuard<'_, Unflushed> {
        // Its panics (a broken caller, a file that cannot be read) come before it changes.
        self.unflushed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Decides `request`'s fate from `plan` (using up a short transfer if it gets one,
    /// and counting the request's range if a simulation runs) and counts the faults. `file`
    /// is the request's (device, inode), known when a simulation runs.
    fn decide(&self, plan: &mut Plan, request: &IoRequest, file: FileId) -> Fate {
        let op = request.op;
        let len_bytes = request.len_bytes();
        match op {
            Op::Read | Op::Write => {
                let log = if op == Op::Read {
                    &mut plan.reads
                } else {
                    &mut plan.writes
                };
                if log.len() < LOG_REQUESTS_MAX {
                    log.push((request.offset_bytes, len_bytes));
                }
            }
            Op::Flush { .. } => {}
        }
        let draw = plan.sim.as_mut().map(|sim| {
            let draw = sim.draw_next(RangeKey {
                file,
                op,
                offset_bytes: request.offset_bytes,
                len_bytes,
            });
            let config = sim.config();
            let hold = (config.reorder > 0).then_some(Hold {
                rank: draw.rank,
                pen_max: config.reorder,
                wait_max: config.hold_max,
            });
            (draw, hold)
        });
        let start = request.offset_bytes;
        let end = start.saturating_add(len_bytes as u64);
        let overlaps = |range: &Range<u64>| range.start < end && start < range.end;
        let drawn_eio = draw.is_some_and(|(draw, _)| draw.eio);
        let drawn_short = draw.and_then(|(draw, _)| draw.short_bytes);
        let planned_errno = match op {
            Op::Read => plan.fail_ranges.iter().any(overlaps).then_some(libc::EIO),
            Op::Write => plan
                .fail_ranges
                .iter()
                .any(overlaps)
                .then_some(libc::EIO)
                .or_else(|| {
                    let failed = plan.fail_write_ranges.iter();
                    failed
                        .filter(|(range, _)| overlaps(range))
                        .map(|&(_, errno)| errno)
                        .next()
                }),
            Op::Flush { .. } => plan.flush_errno,
        };
        let errno = if drawn_eio {
            Some(libc::EIO)
        } else {
            planned_errno
        };
        let planned_shorts_left = match op {
            Op::Read => Some(&mut plan.short_reads_left),
            Op::Write => Some(&mut plan.short_writes_left),
            Op::Flush { .. } => None,
        };
        let outcome = if let Some(errno) = errno {
            let counter = if errno == libc::EIO {
                &self.eio_injected
            } else {
                &self.other_errors_injected
            };
            counter.fetch_add(1, Ordering::Relaxed);
            Outcome::Fail(errno)
        } else if let Some(left) =
            planned_shorts_left.filter(|left| **left > 0 && len_bytes > SHORT_READ_BYTES)
        {
            *left -= 1;
            self.short_injected.fetch_add(1, Ordering::Relaxed);
            Outcome::TransferShort(SHORT_READ_BYTES)
        } else if let Some(short_bytes) = drawn_short {
            self.short_injected.fetch_add(1, Ordering::Relaxed);
            Outcome::TransferShort(short_bytes)
        } else {
            Outcome::Transfer
        };
        let delay = plan.delay + draw.map_or(Duration::ZERO, |(draw, _)| draw.delay);
        if !delay.is_zero() {
            self.delayed.fetch_add(1, Ordering::Relaxed);
        }
        Fate {
            outcome,
            delay,
            hold: draw.and_then(|(_, hold)| hold),
        }
    }
}
