//! The fault backend: wraps a real backend and injects the faults a disk and a kernel can
//! produce, so that tests can drive the cache's error, retry and timing paths on purpose.
//!
//! Fault model (what a test can make happen, and when it fires):
//!
//! - **Media error**, `fail_range(r)`: every request overlapping a failed range of file
//!   bytes completes with `EIO`. It never reaches the inner backend; its buffers are left
//!   untouched.
//! - **Short read**, `short_reads(n)`: the next `n` requests longer than 4096 bytes reach
//!   the inner backend cut to their first 4096 bytes (the same memory), so they complete
//!   with `Ok(len <= 4096)` and the cache must read the rest itself.
//! - **Latency**, `delay(d)`: every request's completion, a media error's included, runs
//!   `d` after the inner backend finished the read (after `submit`, for a media error).
//! - **Seeded simulation**, `FaultBackend::seeded(inner, seed, config)` or
//!   `simulate(seed, config)`: each request draws its faults from a hash of (seed, file
//!   offset, length, ordinal), where the ordinal counts the earlier requests for the same
//!   range (same file, by device and inode, same offset, same length). See [`SimConfig`]:
//!   - a media error (`EIO`, as above) with probability `eio_per_mille / 1000`;
//!   - otherwise, for a request longer than a page, a short read with probability
//!     `short_per_mille / 1000`, cut to a drawn whole number of pages: at least one, and
//!     at least one page fewer than asked;
//!   - a completion delay drawn from `[0, delay_max]`;
//!   - with `reorder > 0`, a rank: once due, the completion waits in a pen of at most
//!     `reorder` completions, which releases its lowest rank first when a new arrival
//!     overflows it, or when its oldest member has waited `hold_max`.
//!
//!   A failing seed therefore replays: the n-th request for a range meets the same faults
//!   whatever the threads' timing. Which requests the cache makes, and which completions
//!   meet in the pen, still depend on timing; the faults of each request do not.
//!
//! - Every control takes effect for requests submitted after the call; a request's fate is
//!   decided once, in `submit`, from the plan at that moment. `clear` empties the plan, the
//!   simulation and its ordinals included.
//! - Faults are decided in this order: a media error (planned or drawn) excludes the
//!   others (the request is not read at all); a planned short read (4096 bytes) comes
//!   before a drawn one; a short read and a delay may combine; a planned and a drawn delay
//!   add up. A request that fails with a media error does not use up a short read.
//! - Failed ranges accumulate until `clear`; `short_reads(n)` replaces the count left;
//!   `delay(d)` replaces the delay (`Duration::ZERO` turns it off); `simulate` replaces
//!   the simulation.
//! - Counters count requests, at decision time: `eio_injected`, `short_injected`,
//!   `delayed` (a nonzero delay); and completions, at release: `reordered` (released from
//!   the pen ahead of one that entered it earlier).
//! - Every submitted request is also logged (`take_requests`): (offset, length).
//!
//! Not modelled: corrupted or misdirected reads (the bytes a read returns are always the
//! file's), torn reads, errors other than `EIO`, a request that never completes. Faults
//! are deterministic: the same plan and the same submission order give the same planned
//! faults, and the same seed gives the same drawn faults to the same request.
//!
//! Design: `submit` and `submit_waited` decide each request's fate under `Faults::plan`,
//! pass the survivors to the inner backend's same entry in one batch, and hand failed
//! requests, delayed completions and completions to reorder to a delivery thread
//! ("folio-fault"), which runs each one when it is due (a min-heap on due time), through
//! the reorder pen if it has a rank. A completion injected here therefore never runs
//! inside `submit`, and `submit` never sleeps. Requests without a delay or a rank complete
//! as the inner backend completes them: from its threads, or (`submit_waited`) possibly on
//! the submitting thread.
//!
//! Invariants:
//! - `Faults::plan` (a mutex) protects the plan and the simulation's ordinals; the
//!   counters are atomics. `Delivery::state` protects the due heap, the pen and the phase.
//!   Neither lock is held while a completion runs or while the inner backend is called, so
//!   a completion may call `submit` again.
//! - The pen never holds more than `reorder` completions once the delivery thread has
//!   released; a held completion waits at most `hold_max` after the oldest one in the pen
//!   entered it, so no completion waits forever.
//! - `Drop` drops the inner backend first (which finishes its requests, scheduling their
//!   delayed completions), then lets the delivery thread run every scheduled completion
//!   (the pen is released at once, lowest rank first).
//!
//! Limits: the simulation remembers the ordinals of at most `SIM_RANGES_MAX` distinct
//! ranges; further new ranges all count as first requests (a test that large is not a
//! simulation of this kind).

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, HashMap};
use std::fs::File as StdFile;
use std::io;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::{Backend, Completion, FrameBuf, ReadRequest};

/// The length a short read is cut to.
pub const SHORT_READ_BYTES: usize = 4096;

/// Distinct ranges whose ordinals a simulation remembers (module docs, limits).
const SIM_RANGES_MAX: usize = 1 << 20;

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

/// The faults a seeded simulation draws (module docs): rates per thousand requests, and
/// the timing of completions. The default draws nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimConfig {
    /// Requests, per thousand, that fail with EIO (at most 1000).
    pub eio_per_mille: u32,
    /// Requests longer than a page, per thousand, that come back short (at most 1000).
    pub short_per_mille: u32,
    /// The largest completion delay; each request draws one from `[0, delay_max]`.
    pub delay_max: Duration,
    /// The most completions held back at once to be released in rank order (0: none).
    pub reorder: usize,
    /// The longest the oldest held completion waits for others to overtake it.
    pub hold_max: Duration,
}

/// What a seed draws for one request: a pure function of the seed, the request's offset,
/// length and ordinal (`SimConfig::draw`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Draw {
    eio: bool,
    /// The length a short read is cut to.
    short_bytes: Option<usize>,
    delay: Duration,
    /// The order of release from the pen: lowest first.
    rank: u64,
}

impl SimConfig {
    /// The faults of the `ordinal`-th request (from 0) for `len_bytes` at `offset_bytes`.
    fn draw(&self, seed: u64, offset_bytes: u64, len_bytes: usize, ordinal: u32) -> Draw {
        let mut key = mix(seed);
        key = mix(key ^ offset_bytes);
        key = mix(key ^ len_bytes as u64);
        key = mix(key ^ u64::from(ordinal));
        // Independent streams of the same key, one per decision.
        let stream = |n: u64| mix(key ^ n.wrapping_mul(0xA24B_AED4_963E_E407));
        let eio = stream(1) % 1000 < u64::from(self.eio_per_mille);
        let pages = len_bytes / SHORT_READ_BYTES;
        let short_bytes =
            (!eio && pages >= 2 && stream(2) % 1000 < u64::from(self.short_per_mille))
                .then(|| SHORT_READ_BYTES * (1 + (stream(3) % (pages as u64 - 1)) as usize));
        let delay_ns_max = u64::try_from(self.delay_max.as_nanos()).unwrap_or(u64::MAX);
        let delay = match delay_ns_max {
            0 => Duration::ZERO,
            max => Duration::from_nanos(stream(4) % max.saturating_add(1)),
        };
        Draw {
            eio,
            short_bytes,
            delay,
            rank: stream(5),
        }
    }
}

/// SplitMix64's finaliser: a bijection of 64-bit words that mixes every bit into every
/// other.
fn mix(word: u64) -> u64 {
    let mut z = word.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct Faults {
    plan: Mutex<Plan>,
    /// Whether `plan.sim` is set: `submit` then learns each request's file identity
    /// (an `fstat`) before it takes the plan's lock.
    simulating: AtomicBool,
    eio_injected: AtomicU64,
    short_injected: AtomicU64,
    delayed: AtomicU64,
}

#[derive(Default)]
struct Plan {
    /// File byte ranges whose reads fail with EIO.
    fail_ranges: Vec<Range<u64>>,
    /// How many more long requests get cut to `SHORT_READ_BYTES`.
    short_reads_left: u32,
    /// Added to every completion; zero for none.
    delay: Duration,
    /// The seeded simulation, if one runs.
    sim: Option<Sim>,
    /// Every request submitted, as (file offset, length), in submission order: what a
    /// test observes (readahead windows, one read per run). Bounded by `LOG_REQUESTS_MAX`.
    log: Vec<(u64, usize)>,
}

/// A running simulation: its seed, its rates, and how often each range was requested.
struct Sim {
    seed: u64,
    config: SimConfig,
    ordinals: HashMap<RangeKey, u32>,
}

/// A range of one file, as the simulation counts its requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct RangeKey {
    /// (device, inode) of the file; (0, 0) if `fstat` failed.
    file: (u64, u64),
    offset_bytes: u64,
    len_bytes: usize,
}

/// Requests the log keeps; later ones are not recorded.
const LOG_REQUESTS_MAX: usize = 1 << 20;

/// What `submit` does with one request.
struct Fate {
    outcome: Outcome,
    delay: Duration,
    /// Where the completion waits in the reorder pen, if it does.
    hold: Option<Hold>,
}

enum Outcome {
    /// Complete with EIO without reading.
    FailEio,
    /// Pass to the inner backend with the buffers cut to this many bytes.
    ReadShort(usize),
    /// Pass to the inner backend unchanged.
    Read,
}

/// A completion's place in the reorder pen: its rank and the pen's limits.
#[derive(Clone, Copy, Debug)]
struct Hold {
    rank: u64,
    pen_max: usize,
    wait_max: Duration,
}

impl FaultBackend {
    /// Wraps `inner`; no fault is planned until the returned control sets one.
    ///
    /// Panics if the delivery thread cannot be started (this backend is for tests).
    pub fn new(inner: Box<dyn Backend>) -> (FaultBackend, FaultControl) {
        let faults = Arc::new(Faults {
            plan: Mutex::new(Plan::default()),
            simulating: AtomicBool::new(false),
            eio_injected: AtomicU64::new(0),
            short_injected: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
        });
        let delivery = Arc::new(Delivery {
            state: Mutex::new(DeliveryState {
                due: BinaryHeap::new(),
                pen: Vec::new(),
                next_sequence: 0,
                phase: Phase::Running,
            }),
            changed: Condvar::new(),
            reordered: AtomicU64::new(0),
        });
        let thread_delivery = Arc::clone(&delivery);
        let delivery_thread = thread::Builder::new()
            .name("folio-fault".to_owned())
            .spawn(move || thread_delivery.run())
            .expect("starting the fault backend's delivery thread");
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

    /// Decides the fate of every request of `batch`: schedules the failed ones' EIO on
    /// the delivery thread, cuts the short ones, routes the delayed or ranked ones'
    /// completions through the delivery thread, and returns the requests to read.
    fn inject(&self, batch: Vec<ReadRequest>) -> Vec<ReadRequest> {
        // The simulation counts requests per file: learn the files outside the lock.
        let files: Vec<(u64, u64)> = if self.faults.simulating.load(Ordering::Acquire) {
            batch.iter().map(|r| file_identity(&r.file)).collect()
        } else {
            vec![(0, 0); batch.len()]
        };
        let fates: Vec<Fate> = {
            let mut plan = self.faults.lock_plan();
            batch
                .iter()
                .zip(&files)
                .map(|(request, &file)| self.faults.decide(&mut plan, request, file))
                .collect()
        };
        let mut survivors = Vec::with_capacity(batch.len());
        for (mut request, fate) in batch.into_iter().zip(fates) {
            match fate.outcome {
                Outcome::FailEio => {
                    let eio = Err(io::Error::from_raw_os_error(libc::EIO));
                    self.delivery.schedule(
                        Instant::now() + fate.delay,
                        request.done,
                        eio,
                        fate.hold,
                    );
                    continue;
                }
                Outcome::ReadShort(len_bytes) => request.bufs = cut_to(request.bufs, len_bytes),
                Outcome::Read => {}
            }
            if !fate.delay.is_zero() || fate.hold.is_some() {
                let delivery = Arc::clone(&self.delivery);
                let done = request.done;
                let (delay, hold) = (fate.delay, fate.hold);
                request.done = Box::new(move |result| {
                    delivery.schedule(Instant::now() + delay, done, result, hold);
                });
            }
            survivors.push(request);
        }
        survivors
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

    fn submit(&self, batch: Vec<ReadRequest>) {
        let survivors = self.inject(batch);
        if !survivors.is_empty() {
            self.inner().submit(survivors);
        }
    }

    /// As `submit`, with the survivors going to the inner backend's `submit_waited`: a
    /// miss its reader waits for may be read on the reader's thread, faults and all.
    fn submit_waited(&self, batch: Vec<ReadRequest>) {
        let survivors = self.inject(batch);
        if !survivors.is_empty() {
            self.inner().submit_waited(survivors);
        }
    }
}

/// The (device, inode) of an open file; (0, 0) if `fstat` fails (it does not on a file
/// the cache just read).
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
        let delivery_thread = self
            .delivery_thread
            .take()
            .expect("the delivery thread handle");
        self.delivery.lock_state().phase = Phase::Draining;
        self.delivery.changed.notify_all();
        if delivery_thread.thread().id() == thread::current().id() {
            while let Some(due) = self.delivery.next_due() {
                due.run();
            }
        } else {
            // The delivery thread catches completion panics, so this fails only on a bug
            // in this file; there is nothing better to do with it in a destructor.
            let _ = delivery_thread.join();
        }
    }
}

/// The first `len_bytes` of `bufs`, as buffers over the same memory. `len_bytes` must be
/// aligned (so every cut falls on a buffer's aligned boundary).
fn cut_to(bufs: Vec<FrameBuf>, len_bytes: usize) -> Vec<FrameBuf> {
    let mut left_bytes = len_bytes;
    let mut cut = Vec::with_capacity(bufs.len());
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

    /// Cuts the next `count` requests longer than 4096 bytes to their first 4096 bytes, so
    /// that they complete with a short count. Replaces any count left.
    pub fn short_reads(&self, count: u32) {
        self.faults.lock_plan().short_reads_left = count;
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
        self.faults.lock_plan().sim = Some(Sim {
            seed,
            config,
            ordinals: HashMap::new(),
        });
        self.faults.simulating.store(true, Ordering::Release);
    }

    /// Removes every planned fault and the simulation; the counters keep their values.
    pub fn clear(&self) {
        let mut plan = self.faults.lock_plan();
        let log = std::mem::take(&mut plan.log);
        *plan = Plan {
            log,
            ..Plan::default()
        };
        self.faults.simulating.store(false, Ordering::Release);
    }

    /// Requests failed with EIO so far.
    pub fn eio_injected(&self) -> u64 {
        self.faults.eio_injected.load(Ordering::Relaxed)
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
        self.delivery.reordered.load(Ordering::Relaxed)
    }

    /// The requests submitted since the cache was built or the log was last taken, as
    /// (file offset, length), in submission order; empties the log.
    pub fn take_requests(&self) -> Vec<(u64, usize)> {
        std::mem::take(&mut self.faults.lock_plan().log)
    }
}

impl Faults {
    fn lock_plan(&self) -> MutexGuard<'_, Plan> {
        // The plan is plain data, valid after any panic.
        self.plan.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Decides `request`'s fate from `plan` (using up a short read if it gets one, and
    /// counting the request's range if a simulation runs) and counts the faults. `file`
    /// is the request's (device, inode), known when a simulation runs.
    fn decide(&self, plan: &mut Plan, request: &ReadRequest, file: (u64, u64)) -> Fate {
        let len_bytes = request.len_bytes();
        if plan.log.len() < LOG_REQUESTS_MAX {
            plan.log.push((request.offset_bytes, len_bytes));
        }
        let draw = plan.sim.as_mut().map(|sim| {
            let key = RangeKey {
                file,
                offset_bytes: request.offset_bytes,
                len_bytes,
            };
            let ordinal = match sim.ordinals.get_mut(&key) {
                Some(seen) => {
                    *seen += 1;
                    *seen - 1
                }
                None => {
                    if sim.ordinals.len() < SIM_RANGES_MAX {
                        sim.ordinals.insert(key, 1);
                    }
                    0
                }
            };
            let draw = sim
                .config
                .draw(sim.seed, request.offset_bytes, len_bytes, ordinal);
            let hold = (sim.config.reorder > 0).then_some(Hold {
                rank: draw.rank,
                pen_max: sim.config.reorder,
                wait_max: sim.config.hold_max,
            });
            (draw, hold)
        });
        let start = request.offset_bytes;
        let end = start.saturating_add(len_bytes as u64);
        let overlaps = |range: &Range<u64>| range.start < end && start < range.end;
        let drawn_eio = draw.is_some_and(|(draw, _)| draw.eio);
        let drawn_short = draw.and_then(|(draw, _)| draw.short_bytes);
        let outcome = if drawn_eio || plan.fail_ranges.iter().any(overlaps) {
            self.eio_injected.fetch_add(1, Ordering::Relaxed);
            Outcome::FailEio
        } else if plan.short_reads_left > 0 && len_bytes > SHORT_READ_BYTES {
            plan.short_reads_left -= 1;
            self.short_injected.fetch_add(1, Ordering::Relaxed);
            Outcome::ReadShort(SHORT_READ_BYTES)
        } else if let Some(short_bytes) = drawn_short {
            self.short_injected.fetch_add(1, Ordering::Relaxed);
            Outcome::ReadShort(short_bytes)
        } else {
            Outcome::Read
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

/// The delivery thread's queue of completions that are not due yet, and the reorder pen.
struct Delivery {
    state: Mutex<DeliveryState>,
    /// Signalled when a completion is scheduled or the phase changes.
    changed: Condvar,
    /// Completions the pen released ahead of an earlier arrival (`FaultControl::reordered`).
    reordered: AtomicU64,
}

struct DeliveryState {
    due: BinaryHeap<Due>,
    /// Due completions with a rank, held back in arrival order (module docs). At most
    /// `Hold::pen_max` after each release.
    pen: Vec<Penned>,
    /// Breaks ties between equal due times: first scheduled, first run.
    next_sequence: u64,
    phase: Phase,
}

/// A completion in the reorder pen, and when it entered it.
struct Penned {
    due: Due,
    hold: Hold,
    since: Instant,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Running,
    /// The backend is being dropped: run what is scheduled, then exit.
    Draining,
}

/// A completion with its result, to run at `at`.
struct Due {
    at: Instant,
    sequence: u64,
    done: Completion,
    result: io::Result<usize>,
    /// Whether it goes through the reorder pen once due.
    hold: Option<Hold>,
}

impl Due {
    fn run(self) {
        let Due { done, result, .. } = self;
        // A panicking completion must not stop the delivery of the others; the panic hook
        // has already reported it.
        let _ = panic::catch_unwind(AssertUnwindSafe(move || done(result)));
    }
}

// `BinaryHeap` is a max-heap: order `Due`s so that the earliest (then first scheduled) is
// the greatest.
impl Ord for Due {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.at, other.sequence).cmp(&(self.at, self.sequence))
    }
}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}

impl Eq for Due {}

impl Delivery {
    fn lock_state(&self) -> MutexGuard<'_, DeliveryState> {
        // The only panic under this lock is `schedule`'s phase assertion, which fires before
        // anything changes, so a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `done(result)` on the delivery thread at `at` (at once if `at` has passed),
    /// through the reorder pen if `hold` is set.
    ///
    /// Context: any thread; never blocks on a completion.
    fn schedule(
        &self,
        at: Instant,
        done: Completion,
        result: io::Result<usize>,
        hold: Option<Hold>,
    ) {
        let mut state = self.lock_state();
        // Everything that schedules (`submit`, the inner backend's completions) has
        // finished before `drop` sets `Draining`.
        assert_eq!(
            state.phase,
            Phase::Running,
            "completion scheduled after drop"
        );
        let sequence = state.next_sequence;
        state.next_sequence += 1;
        state.due.push(Due {
            at,
            sequence,
            done,
            result,
            hold,
        });
        drop(state);
        self.changed.notify_all();
    }

    fn run(&self) {
        while let Some(due) = self.next_due() {
            due.run();
        }
    }

    /// The next completion to run, once it may: a due one without a rank, or the pen's
    /// lowest rank when the pen overflows, its oldest has waited `hold_max`, or the
    /// backend is draining. Blocks until then. `None` when the backend is draining and
    /// nothing is scheduled or held.
    fn next_due(&self) -> Option<Due> {
        let mut state = self.lock_state();
        loop {
            let now = Instant::now();
            if state.due.peek().is_some_and(|first| first.at <= now) {
                let due = state.due.pop().expect("peeked");
                let Some(hold) = due.hold else {
                    return Some(due);
                };
                state.pen.push(Penned {
                    due,
                    hold,
                    since: now,
                });
                if state.pen.len() > hold.pen_max {
                    return Some(self.release(&mut state));
                }
                continue;
            }
            let pen_deadline = state
                .pen
                .first()
                .map(|oldest| oldest.since + oldest.hold.wait_max);
            if pen_deadline.is_some_and(|at| at <= now || state.phase == Phase::Draining) {
                return Some(self.release(&mut state));
            }
            let wake_at = match (state.due.peek().map(|first| first.at), pen_deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            state = match wake_at {
                Some(at) => {
                    self.changed
                        .wait_timeout(state, at - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None if state.phase == Phase::Draining => return None,
                None => self
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }

    /// Takes the lowest-ranked completion out of the (non-empty) pen.
    fn release(&self, state: &mut DeliveryState) -> Due {
        let lowest = (0..state.pen.len())
            .min_by_key(|&i| (state.pen[i].hold.rank, state.pen[i].due.sequence))
            .expect("the pen holds a completion");
        if lowest != 0 {
            self.reordered.fetch_add(1, Ordering::Relaxed);
        }
        state.pen.remove(lowest).due
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::super::pread::testing::*;
    use super::super::pread::PreadBackend;
    use super::super::uring::{UringBackend, QUEUE_DEPTH};
    use super::*;

    const REQUEST_BYTES: usize = 4 * PAGE_BYTES;

    fn fault_over_pread() -> (FaultBackend, FaultControl) {
        FaultBackend::new(Box::new(PreadBackend::new(2).unwrap()))
    }

    /// Submits one `REQUEST_BYTES` read per offset, in one batch, and returns each result
    /// with its buffer.
    fn read_pages(
        backend: &dyn Backend,
        test_file: &TestFile,
        offsets: &[u64],
    ) -> Vec<(io::Result<usize>, AlignedBuf)> {
        let bufs: Vec<AlignedBuf> = offsets
            .iter()
            .map(|_| AlignedBuf::new(REQUEST_BYTES))
            .collect();
        let (sender, reports) = channel();
        let batch = offsets
            .iter()
            .zip(&bufs)
            .enumerate()
            .map(|(index, (&offset, buf))| {
                read_request(
                    &test_file.file,
                    offset,
                    buf.frame_buf(),
                    report_to(&sender, index),
                )
            })
            .collect();
        backend.submit(batch);
        wait_reports(&reports, offsets.len())
            .into_iter()
            .zip(bufs)
            .map(|((_, result), buf)| (result, buf))
            .collect()
    }

    fn assert_eio(result: &io::Result<usize>) {
        let error = result.as_ref().expect_err("expected an injected EIO");
        assert_eq!(error.raw_os_error(), Some(libc::EIO));
    }

    /// Without faults the wrapper is transparent: every scenario of a plain backend passes.
    #[test]
    fn without_faults_it_is_the_inner_backend() {
        let test_file = test_file();
        let (backend, control) = fault_over_pread();
        assert_eq!(backend.name(), "fault(pread)");
        run_full_read(&backend, &test_file);
        run_end_of_file_reads(&backend, &test_file);
        run_kernel_error(&backend, &test_file);
        run_concurrent_reads(&backend, &test_file);
        let backend: Arc<dyn Backend> = Arc::new(backend);
        run_resubmitting_chains(&backend, &test_file, 16, 32);
        assert_eq!(
            (
                control.eio_injected(),
                control.short_injected(),
                control.delayed()
            ),
            (0, 0, 0)
        );
    }

    /// Exactly the requests overlapping a failed range complete with EIO, from another
    /// thread than the submitter's, and leave their buffers untouched.
    #[test]
    fn fail_range_fails_overlapping_requests() {
        let test_file = test_file();
        let (backend, control) = fault_over_pread();
        let bad_byte = 5 * PAGE_BYTES as u64 + 17;
        control.fail_range(bad_byte..bad_byte + 1);
        // [0,4p) clean, [2p,6p) and [4p,8p) overlap, [8p,12p) clean, [6p,10p) clean: the
        // range end is exclusive and 6p > bad_byte.
        let offsets = [0, 2, 4, 8, 6].map(|page| page * PAGE_BYTES as u64);
        let submitter = std::thread::current().id();
        let (sender, reports) = mpsc::channel();
        let buf = AlignedBuf::new(REQUEST_BYTES);
        backend.submit(vec![read_request(
            &test_file.file,
            4 * PAGE_BYTES as u64,
            buf.frame_buf(),
            Box::new(move |result| {
                let _ = sender.send((std::thread::current().id(), result));
            }),
        )]);
        let (completer, result) = reports.recv_timeout(COMPLETION_WAIT).unwrap();
        assert_eio(&result);
        assert_ne!(
            completer, submitter,
            "an injected error must not complete inside submit"
        );
        assert!(buf.bytes().iter().all(|&byte| byte == 0));

        let results = read_pages(&backend, &test_file, &offsets);
        for (index, (result, buf)) in results.iter().enumerate() {
            if index == 1 || index == 2 {
                assert_eio(result);
            } else {
                assert_eq!(*result.as_ref().unwrap(), REQUEST_BYTES);
                assert_file_bytes(buf.bytes(), offsets[index]);
            }
        }
        assert_eq!(control.eio_injected(), 3);

        // Ranges accumulate.
        control.fail_range(0..1);
        let results = read_pages(&backend, &test_file, &offsets);
        assert_eio(&results[0].0);
        assert_eq!(control.eio_injected(), 6);
    }

    /// The next `count` long requests come back cut to 4096 bytes; short requests do not use
    /// up the count; afterwards reads are whole again.
    #[test]
    fn short_reads_cut_the_next_long_requests() {
        let test_file = test_file();
        let (backend, control) = fault_over_pread();
        control.short_reads(2);
        let short_buf = AlignedBuf::new(PAGE_BYTES);
        let (sender, reports) = channel();
        backend.submit(vec![read_request(
            &test_file.file,
            0,
            short_buf.frame_buf(),
            report_to(&sender, 0),
        )]);
        assert_eq!(
            wait_reports(&reports, 1)[0].1.as_ref().unwrap(),
            &PAGE_BYTES
        );
        assert_eq!(control.short_injected(), 0);

        let offsets = [0, 16, 32].map(|page| page * PAGE_BYTES as u64);
        let results = read_pages(&backend, &test_file, &offsets);
        for (index, (result, buf)) in results.iter().enumerate() {
            let len = *result.as_ref().unwrap();
            let expected = if index < 2 {
                SHORT_READ_BYTES
            } else {
                REQUEST_BYTES
            };
            assert_eq!(len, expected, "request {index}");
            assert_file_bytes(&buf.bytes()[..len], offsets[index]);
            assert!(buf.bytes()[len..].iter().all(|&byte| byte == 0));
        }
        assert_eq!(control.short_injected(), 2);
    }

    /// A cut vectored request keeps the buffers (or the part of one) that hold its first
    /// 4096 bytes; the later buffers are left untouched.
    #[test]
    fn short_reads_cut_vectored_requests() {
        let test_file = test_file();
        let (backend, control) = fault_over_pread();
        control.short_reads(2);
        let one_then_three = [AlignedBuf::new(PAGE_BYTES), AlignedBuf::new(3 * PAGE_BYTES)];
        let two_then_two = [
            AlignedBuf::new(2 * PAGE_BYTES),
            AlignedBuf::new(2 * PAGE_BYTES),
        ];
        let (sender, reports) = channel();
        backend.submit(
            [&one_then_three, &two_then_two]
                .iter()
                .enumerate()
                .map(|(index, bufs)| {
                    vectored_request(
                        &test_file.file,
                        0,
                        bufs.iter().map(AlignedBuf::frame_buf).collect(),
                        report_to(&sender, index),
                    )
                })
                .collect(),
        );
        for (index, result) in wait_reports(&reports, 2) {
            assert_eq!(result.unwrap(), SHORT_READ_BYTES, "request {index}");
        }
        for bufs in [&one_then_three, &two_then_two] {
            let bytes: Vec<u8> = bufs.iter().flat_map(|buf| buf.bytes().to_vec()).collect();
            assert_file_bytes(&bytes[..SHORT_READ_BYTES], 0);
            assert!(bytes[SHORT_READ_BYTES..].iter().all(|&byte| byte == 0));
        }
        assert_eq!(control.short_injected(), 2);
    }

    /// The cache's retry path: completions that resubmit the rest of a short read still read
    /// every byte while every long request is cut short.
    #[test]
    fn resubmitting_after_short_reads_reads_everything() {
        let test_file = test_file();
        let (backend, control) = fault_over_pread();
        control.short_reads(u32::MAX);
        let backend: Arc<dyn Backend> = Arc::new(backend);
        const CHUNKS: usize = 8;
        let bufs: Vec<AlignedBuf> = (0..CHUNKS)
            .map(|_| AlignedBuf::new(REQUEST_BYTES))
            .collect();
        let (sender, reports) = channel();
        for (chunk, buf) in bufs.iter().enumerate() {
            let offset = (chunk * REQUEST_BYTES) as u64;
            read_until_full(
                &backend,
                &test_file.file,
                offset,
                buf.frame_buf(),
                0,
                &sender,
                chunk,
            );
        }
        for (chunk, result) in wait_reports(&reports, CHUNKS) {
            assert_eq!(result.unwrap(), REQUEST_BYTES);
            assert_file_bytes(bufs[chunk].bytes(), (chunk * REQUEST_BYTES) as u64);
        }
        // Each chunk of 4 pages is cut with 4, 3 and 2 pages left, and whole with 1 left.
        assert_eq!(control.short_injected(), 3 * CHUNKS as u64);
    }

    /// Reads `whole` from `offset`, resubmitting the rest after each short count from inside
    /// the completion (as the cache does), and reports the total under `tag`.
    fn read_until_full(
        backend: &Arc<dyn Backend>,
        file: &Arc<std::fs::File>,
        offset: u64,
        whole: FrameBuf,
        read_bytes: usize,
        reports: &mpsc::Sender<Report>,
        tag: usize,
    ) {
        let again = (Arc::clone(backend), Arc::clone(file), reports.clone());
        let done: Completion = Box::new(move |result: io::Result<usize>| {
            let (backend, file, reports) = again;
            match result {
                Ok(len) if len > 0 && read_bytes + len < whole.len_bytes() => {
                    let read_bytes = read_bytes + len;
                    read_until_full(&backend, &file, offset, whole, read_bytes, &reports, tag);
                }
                other => {
                    let _ = reports.send((tag, other.map(|len| read_bytes + len)));
                }
            }
        });
        let rest = whole.tail(read_bytes);
        backend.submit(vec![read_request(
            file,
            offset + read_bytes as u64,
            rest,
            done,
        )]);
    }

    /// Every completion arrives at least `delay` late, `submit` does not wait for it, and
    /// delays of one batch overlap instead of adding up.
    #[test]
    fn delay_postpones_every_completion() {
        let test_file = test_file();
        let (backend, control) = fault_over_pread();
        let delay = Duration::from_millis(200);
        control.delay(delay);
        control.fail_range(0..1);
        const REQUESTS: usize = 8;
        let bufs: Vec<AlignedBuf> = (0..REQUESTS).map(|_| AlignedBuf::new(PAGE_BYTES)).collect();
        let (sender, reports) = mpsc::channel();
        let started = Instant::now();
        let batch = bufs
            .iter()
            .enumerate()
            .map(|(index, buf)| {
                let sender = sender.clone();
                let done: Completion = Box::new(move |result| {
                    let _ = sender.send((index, result, started.elapsed()));
                });
                read_request(
                    &test_file.file,
                    (index * PAGE_BYTES) as u64,
                    buf.frame_buf(),
                    done,
                )
            })
            .collect();
        backend.submit(batch);
        assert!(started.elapsed() < delay, "submit waited for the delay");
        for _ in 0..REQUESTS {
            let (index, result, elapsed) = reports.recv_timeout(COMPLETION_WAIT).unwrap();
            assert!(
                elapsed >= delay,
                "request {index} completed after {elapsed:?}"
            );
            if index == 0 {
                assert_eio(&result);
            } else {
                assert_eq!(result.unwrap(), PAGE_BYTES);
                assert_file_bytes(bufs[index].bytes(), (index * PAGE_BYTES) as u64);
            }
        }
        assert!(
            started.elapsed() < delay * REQUESTS as u32 / 2,
            "delays ran one after another: {:?}",
            started.elapsed()
        );
        assert_eq!(control.delayed(), REQUESTS as u64);
        assert_eq!(control.eio_injected(), 1);
    }

    /// `clear` removes every fault at once and keeps the counters.
    #[test]
    fn clear_removes_every_fault() {
        let test_file = test_file();
        let (backend, control) = fault_over_pread();
        control.fail_range(0..u64::MAX);
        control.short_reads(10);
        control.delay(Duration::from_millis(50));
        let results = read_pages(&backend, &test_file, &[0]);
        assert_eio(&results[0].0);

        control.clear();
        let started = Instant::now();
        let offsets = [0, 8, 16].map(|page| page * PAGE_BYTES as u64);
        let results = read_pages(&backend, &test_file, &offsets);
        assert!(
            started.elapsed() < Duration::from_millis(50),
            "the delay is still on"
        );
        for (index, (result, buf)) in results.iter().enumerate() {
            assert_eq!(*result.as_ref().unwrap(), REQUEST_BYTES);
            assert_file_bytes(buf.bytes(), offsets[index]);
        }
        assert_eq!(
            (
                control.eio_injected(),
                control.short_injected(),
                control.delayed()
            ),
            (1, 0, 1)
        );
    }

    /// `drop` waits out the delays: every accepted completion has run when it returns.
    #[test]
    fn drop_completes_delayed_requests() {
        let test_file = test_file();
        let (backend, control) = fault_over_pread();
        control.delay(Duration::from_millis(20));
        control.fail_range(0..PAGE_BYTES as u64);
        run_drop_completes_everything_but_page_zero(Box::new(backend), &test_file);

        let (backend, _control) = fault_over_pread();
        run_drop_completes_everything(Box::new(backend), &test_file);
    }

    /// `run_drop_completes_everything`, with page 0 failing.
    fn run_drop_completes_everything_but_page_zero(
        backend: Box<dyn Backend>,
        test_file: &TestFile,
    ) {
        const REQUESTS: usize = 64;
        let bufs: Vec<AlignedBuf> = (0..REQUESTS).map(|_| AlignedBuf::new(PAGE_BYTES)).collect();
        let (sender, reports) = channel();
        let batch = bufs
            .iter()
            .enumerate()
            .map(|(index, buf)| {
                read_request(
                    &test_file.file,
                    (index * PAGE_BYTES) as u64,
                    buf.frame_buf(),
                    report_to(&sender, index),
                )
            })
            .collect();
        backend.submit(batch);
        drop(backend);
        let mut received: Vec<Report> = reports.try_iter().collect();
        received.sort_by_key(|(index, _)| *index);
        assert_eq!(
            received.len(),
            REQUESTS,
            "drop returned before every completion ran"
        );
        assert_eio(&received[0].1);
        for (index, result) in received.into_iter().skip(1) {
            assert_eq!(result.unwrap(), PAGE_BYTES);
            assert_file_bytes(bufs[index].bytes(), (index * PAGE_BYTES) as u64);
        }
    }

    /// The last handle dropped inside a completion: on the delivery thread (with a delay),
    /// or on the inner backend's worker (without).
    #[test]
    fn dropped_from_inside_a_completion() {
        let test_file = test_file();
        for delay_ms in [0, 5] {
            let (backend, control) = fault_over_pread();
            control.delay(Duration::from_millis(delay_ms));
            run_dropped_from_inside_a_completion(Arc::new(backend), &test_file);
        }
    }

    /// The faults over io_uring, where the kernel allows it.
    #[test]
    fn faults_over_io_uring() {
        let Ok(inner) = UringBackend::new(QUEUE_DEPTH) else {
            eprintln!("io_uring unavailable here; skipping");
            return;
        };
        let test_file = test_file();
        let (backend, control) = FaultBackend::new(Box::new(inner));
        assert_eq!(backend.name(), "fault(io_uring)");
        control.fail_range(0..1);
        control.short_reads(1);
        control.delay(Duration::from_millis(10));
        let offsets = [0, 4, 8].map(|page| page * PAGE_BYTES as u64);
        let results = read_pages(&backend, &test_file, &offsets);
        assert_eio(&results[0].0);
        assert_eq!(*results[1].0.as_ref().unwrap(), SHORT_READ_BYTES);
        assert_file_bytes(&results[1].1.bytes()[..SHORT_READ_BYTES], offsets[1]);
        assert_eq!(*results[2].0.as_ref().unwrap(), REQUEST_BYTES);
        assert_file_bytes(results[2].1.bytes(), offsets[2]);
        control.clear();
        run_concurrent_reads(&backend, &test_file);
    }

    /// The seed's draw is a pure function of (seed, offset, length, ordinal), its rates
    /// are close to the configured ones, and its short reads and delays stay in bounds.
    #[test]
    fn draws_are_pure_and_within_bounds() {
        let config = SimConfig {
            eio_per_mille: 100,
            short_per_mille: 300,
            delay_max: Duration::from_micros(500),
            reorder: 4,
            hold_max: Duration::from_millis(1),
        };
        const DRAWS: u32 = 20_000;
        let (mut eio, mut short, mut long) = (0u32, 0u32, 0u32);
        for n in 0..DRAWS {
            let offset = u64::from(n % 97) * PAGE_BYTES as u64;
            let len_bytes = (1 + (n as usize % 9)) * PAGE_BYTES;
            let ordinal = n / 97;
            let draw = config.draw(7, offset, len_bytes, ordinal);
            assert_eq!(draw, config.draw(7, offset, len_bytes, ordinal), "pure");
            assert!(draw.delay <= config.delay_max);
            eio += u32::from(draw.eio);
            if len_bytes > PAGE_BYTES && !draw.eio {
                long += 1;
            }
            if let Some(cut) = draw.short_bytes {
                assert!(!draw.eio, "a media error excludes a short read");
                assert!(cut >= PAGE_BYTES && cut < len_bytes && cut % PAGE_BYTES == 0);
                short += 1;
            }
        }
        let eio_per_mille = eio * 1000 / DRAWS;
        let short_per_mille = short * 1000 / long;
        assert!((80..120).contains(&eio_per_mille), "{eio_per_mille}");
        assert!((270..330).contains(&short_per_mille), "{short_per_mille}");
        // Another seed, another ordinal: other faults.
        let differs = (0..64u64).any(|page| {
            let offset = page * PAGE_BYTES as u64;
            config.draw(7, offset, 4 * PAGE_BYTES, 0) != config.draw(8, offset, 4 * PAGE_BYTES, 0)
        });
        assert!(differs);
    }

    /// The outcome of each request of a seeded backend depends on its range and ordinal,
    /// not on the order of submission: two runs submitting the same requests in opposite
    /// orders (keeping the order of each range's own requests) meet the same faults.
    #[test]
    fn a_seed_replays_the_same_faults_in_any_submission_order() {
        let test_file = test_file();
        let config = SimConfig {
            eio_per_mille: 250,
            short_per_mille: 400,
            delay_max: Duration::from_micros(300),
            reorder: 3,
            hold_max: Duration::from_micros(500),
        };
        // 24 ranges, each requested twice: (range, ordinal) -> result.
        let ranges: Vec<(u64, usize)> = (0..24)
            .map(|i| {
                (
                    (i * 9 % 64) as u64 * PAGE_BYTES as u64,
                    (1 + i % 4) * PAGE_BYTES,
                )
            })
            .collect();
        let run = |order: &[usize]| {
            let (backend, control) =
                FaultBackend::seeded(Box::new(PreadBackend::new(2).unwrap()), 99, config);
            // outcomes[ordinal][range]
            let mut outcomes = vec![vec![None; ranges.len()]; 2];
            for round in outcomes.iter_mut() {
                let bufs: Vec<AlignedBuf> = order
                    .iter()
                    .map(|&i| AlignedBuf::new(ranges[i].1))
                    .collect();
                let (sender, reports) = channel();
                let batch = order
                    .iter()
                    .zip(&bufs)
                    .map(|(&i, buf)| {
                        read_request(
                            &test_file.file,
                            ranges[i].0,
                            buf.frame_buf(),
                            report_to(&sender, i),
                        )
                    })
                    .collect();
                backend.submit(batch);
                for (i, result) in wait_reports(&reports, order.len()) {
                    let outcome = match result {
                        Ok(len) => Ok(len),
                        Err(error) => Err(error.raw_os_error()),
                    };
                    round[i] = Some(outcome);
                }
                for (&i, buf) in order.iter().zip(&bufs) {
                    if let Some(Ok(len)) = round[i] {
                        assert_file_bytes(&buf.bytes()[..len], ranges[i].0);
                    }
                }
            }
            (outcomes, control.eio_injected(), control.short_injected())
        };
        let forward: Vec<usize> = (0..ranges.len()).collect();
        let backward: Vec<usize> = forward.iter().rev().copied().collect();
        let (first, eio, short) = run(&forward);
        let (second, eio_again, short_again) = run(&backward);
        assert_eq!(first, second);
        assert_eq!((eio, short), (eio_again, short_again));
        assert!(
            eio > 0 && short > 0,
            "the rates make both faults: {eio} {short}"
        );
        let failed = first
            .iter()
            .flatten()
            .filter(|outcome| **outcome == Some(Err(Some(libc::EIO))))
            .count();
        assert_eq!(failed as u64, eio);
    }

    /// Held completions come out in rank order, not arrival order, and none waits longer
    /// than the hold: every completion of a batch arrives.
    #[test]
    fn the_pen_reorders_completions_and_releases_them_all() {
        let test_file = test_file();
        let config = SimConfig {
            reorder: 4,
            hold_max: Duration::from_millis(20),
            ..SimConfig::default()
        };
        let mut reordered = 0;
        for seed in 0..4 {
            let (backend, control) =
                FaultBackend::seeded(Box::new(PreadBackend::new(1).unwrap()), seed, config);
            const REQUESTS: usize = 12;
            let bufs: Vec<AlignedBuf> =
                (0..REQUESTS).map(|_| AlignedBuf::new(PAGE_BYTES)).collect();
            let (sender, reports) = channel();
            let started = Instant::now();
            backend.submit(
                bufs.iter()
                    .enumerate()
                    .map(|(i, buf)| {
                        read_request(
                            &test_file.file,
                            (i * PAGE_BYTES) as u64,
                            buf.frame_buf(),
                            report_to(&sender, i),
                        )
                    })
                    .collect(),
            );
            for (i, result) in wait_reports(&reports, REQUESTS) {
                assert_eq!(result.unwrap(), PAGE_BYTES);
                assert_file_bytes(bufs[i].bytes(), (i * PAGE_BYTES) as u64);
            }
            assert!(started.elapsed() < Duration::from_secs(5));
            reordered += control.reordered();
            drop(backend);
        }
        assert!(reordered > 0, "ranks never overtook arrival order");
    }

    /// At a rate of 1000 per mille every request fails; `clear` ends the simulation.
    #[test]
    fn clear_ends_the_simulation() {
        let test_file = test_file();
        let config = SimConfig {
            eio_per_mille: 1000,
            ..SimConfig::default()
        };
        let (backend, control) =
            FaultBackend::seeded(Box::new(PreadBackend::new(2).unwrap()), 1, config);
        let offsets = [0, 8, 16].map(|page| page * PAGE_BYTES as u64);
        for (result, _) in read_pages(&backend, &test_file, &offsets) {
            assert_eio(&result);
        }
        control.clear();
        for (index, (result, buf)) in read_pages(&backend, &test_file, &offsets)
            .iter()
            .enumerate()
        {
            assert_eq!(*result.as_ref().unwrap(), REQUEST_BYTES);
            assert_file_bytes(buf.bytes(), offsets[index]);
        }
        assert_eq!(control.eio_injected(), 3);
    }

    /// Draining a backend whose pen holds completions (a long hold) releases them at once.
    #[test]
    fn drop_releases_the_pen() {
        let test_file = test_file();
        let config = SimConfig {
            reorder: 64,
            hold_max: Duration::from_secs(60),
            delay_max: Duration::from_micros(200),
            ..SimConfig::default()
        };
        let (backend, _control) =
            FaultBackend::seeded(Box::new(PreadBackend::new(2).unwrap()), 5, config);
        let started = Instant::now();
        run_drop_completes_everything(Box::new(backend), &test_file);
        assert!(started.elapsed() < Duration::from_secs(30));
    }
}
