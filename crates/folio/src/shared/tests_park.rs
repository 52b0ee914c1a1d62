//! Waiting for a held holder lock, across real processes (issue 45 step 3,
//! docs/sharing.md "Waiting"): a waiter parks in the kernel on a stopped holder's lock
//! and is woken by the holder's unlock or, when the holder is killed, by its `mark_dead`;
//! an uncontended lock and unlock makes no system call. And the figures of
//! docs/sharing.md's table (run by hand): the CPU a waiter burns while the holder is
//! descheduled, and an uncontended lock and unlock.

use super::futex::{self, Counts};
use super::lock::HolderLock;
use super::slot::SlotTable;
use super::stack::FrameStack;
use super::terms::{Park, Unkillable};
use super::tests::{fork, wait_for, SharedRegion};
use super::{Died, Flaw, Holder, Run, Step, Word};
use crate::primitive::{AtomicU64, Ordering};
use std::cell::Cell;
use std::time::{Duration, Instant};

const SLOTS: u16 = 4;
const FRAMES: u32 = 2;
const STACK: Word = Word(16);
/// Words the processes report in.
const R_TOOK_OVER: usize = 32;
const R_WAITER_WAITS: usize = 33;
const R_WAITER_WOKEN: usize = 34;
const R_WAITER_TIMEOUTS: usize = 35;
const R_HOLDER_WAKES: usize = 36;
/// The measurement's bare word.
const BARE: usize = 48;
const REGION_WORDS: usize = 64;
const _: () = assert!(SlotTable::words(SLOTS) <= STACK.0);
const _: () = assert!(STACK.0 + 8 + 2 * FRAMES <= R_TOOK_OVER as u32);

/// A `Run` that stops its process (`SIGSTOP`) right after it first locked, holding the
/// lock, for the test to kill it there or let it go on (`SIGCONT`); it reports its wakes.
struct StopWhenLocked<'r> {
    region: &'r [AtomicU64],
    stopped: Cell<bool>,
}

impl<'r> StopWhenLocked<'r> {
    fn new(region: &'r [AtomicU64]) -> StopWhenLocked<'r> {
        StopWhenLocked {
            region,
            stopped: Cell::new(false),
        }
    }
}

impl Run for StopWhenLocked<'_> {
    fn at(&self, step: Step) -> Result<(), Died> {
        if step == Step::Locked && !self.stopped.replace(true) {
            // SAFETY: raise has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
        self.region[R_HOLDER_WAKES].store(futex::counts().wakes, Ordering::Release);
        Ok(())
    }

    fn wait(&self, holder: Holder) {
        Unkillable.wait(holder)
    }
}

/// A waiter's `Run` that parks with no timeout (a lever: a wake that never comes hangs
/// the waiter, and the test's deadline fails it, instead of a timeout rescuing it), notes
/// a take-over, and reports its futex calls.
struct ParkForever<'r> {
    region: &'r [AtomicU64],
}

impl ParkForever<'_> {
    fn report(&self) {
        let Counts {
            waits,
            woken,
            timeouts,
            ..
        } = futex::counts();
        self.region[R_WAITER_WAITS].store(waits, Ordering::Release);
        self.region[R_WAITER_WOKEN].store(woken, Ordering::Release);
        self.region[R_WAITER_TIMEOUTS].store(timeouts, Ordering::Release);
    }
}

impl Run for ParkForever<'_> {
    fn at(&self, step: Step) -> Result<(), Died> {
        if step == Step::TookOver {
            self.region[R_TOOK_OVER].store(1, Ordering::Release);
        }
        self.report();
        Ok(())
    }

    fn wait(&self, holder: Holder) {
        Unkillable.wait(holder)
    }

    fn park(&self) -> Option<Park> {
        Some(Park {
            timeout: None,
            ..Park::DEFAULT
        })
    }
}

/// The system call `task` is blocked in (`/proc/<task>/syscall`'s first field), if any.
fn blocked_in(task: &str) -> Option<i64> {
    let line = std::fs::read_to_string(format!("/proc/{task}/syscall")).ok()?;
    line.split_ascii_whitespace().next()?.parse().ok()
}

/// Waits until `task` sleeps in `FUTEX_WAIT` with `lock` announced (P1-P4 of lock.rs):
/// both read, no sleep deciding it. Fails after a minute.
fn until_parked(task: &str, lock: &HolderLock<'_>) {
    let started = Instant::now();
    while !(lock.has_waiters() && blocked_in(task) == Some(libc::SYS_futex)) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{task} never parked (syscall {:?})",
            blocked_in(task)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Then {
    /// The stopped holder goes on (`SIGCONT`): its unlock wakes the waiter.
    Continue,
    /// The stopped holder is killed and marked dead: the mark wakes the waiter, which
    /// takes the lock over.
    Kill,
}

/// Issue 45 step 3's test across processes: a holder stops itself holding the stack's
/// lock; a waiter (parks with no timeout) is started and the test waits until it sleeps
/// in the kernel on that lock (`/proc/<pid>/syscall`, and the lock's waiters bit); then
/// the holder goes on, or is killed and marked dead (the test plays the steward). The
/// waiter must get the lock and finish: a missing wake hangs it, and `wait_for`'s minute
/// fails the test. Also: the unlock with a waiter made one wake, the waiter was woken.
#[test]
fn a_parked_waiter_is_woken_by_the_unlock_and_by_the_holders_death() {
    for then in [Then::Continue, Then::Kill] {
        let shared = SharedRegion::new(REGION_WORDS);
        let region = shared.words();
        let slots = &SlotTable::new(region, Word(0), SLOTS);
        let stack = &FrameStack::new(region, STACK, FRAMES);
        stack.format();
        let steward = slots.attach(Flaw::None).unwrap();
        let holder = slots.attach(Flaw::None).unwrap();
        let waiter = slots.attach(Flaw::None).unwrap();
        let holding = fork(|| {
            let run = StopWhenLocked::new(region);
            let frame = stack.pop(holder, slots, &run).unwrap().unwrap();
            stack.push(holder, frame, slots, &run).unwrap();
            slots.detach(holder);
        });
        assert!(libc::WIFSTOPPED(wait_for(holding, libc::WUNTRACED)));
        let waiting = fork(|| {
            let run = ParkForever { region };
            let frame = stack.pop(waiter, slots, &run).unwrap().unwrap();
            stack.push(waiter, frame, slots, &run).unwrap();
            run.report();
            slots.detach(waiter);
        });
        until_parked(&waiting.to_string(), stack.lock_line());
        match then {
            Then::Continue => {
                // SAFETY: continues our own stopped child.
                unsafe { libc::kill(holding, libc::SIGCONT) };
                let status = wait_for(holding, 0);
                assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
            }
            Then::Kill => {
                // SAFETY: kills our own stopped child.
                unsafe { libc::kill(holding, libc::SIGKILL) };
                assert!(libc::WIFSIGNALED(wait_for(holding, 0)));
                assert!(slots.mark_dead(holder));
            }
        }
        let status = wait_for(waiting, 0);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{then:?}: the waiter failed: {status:#x}"
        );
        let word = |i: usize| region[i].load(Ordering::Acquire);
        assert_eq!(word(R_TOOK_OVER), u64::from(then == Then::Kill), "{then:?}");
        assert!(
            word(R_WAITER_WAITS) >= 1 && word(R_WAITER_WOKEN) >= 1,
            "{then:?}"
        );
        assert_eq!(word(R_WAITER_TIMEOUTS), 0, "no timeout: it had none");
        if then == Then::Continue {
            assert!(word(R_HOLDER_WAKES) >= 1, "the unlock woke the waiter");
        } else {
            assert_eq!(stack.sweep(holder, steward, slots, &Unkillable).unwrap(), 0);
            slots.free_dead(holder);
        }
        eprintln!(
            "{then:?}: waiter parked {} times, woken {}; holder's wakes {}",
            word(R_WAITER_WAITS),
            word(R_WAITER_WOKEN),
            word(R_HOLDER_WAKES)
        );
        assert_eq!(stack.check().map(|c| c.listed), Ok(FRAMES));
    }
}

/// An uncontended lock and unlock makes no futex call (U2-U3 only when a waiter
/// announced itself); and, as a check of the counter, an unlock with a thread parked on
/// the lock makes exactly one wake.
#[test]
fn an_uncontended_lock_and_unlock_makes_no_futex_call() {
    let region: Vec<AtomicU64> = (0..REGION_WORDS).map(|_| AtomicU64::new(0)).collect();
    let slots = SlotTable::new(&region, Word(0), SLOTS);
    let lock = HolderLock::new(&region, STACK);
    let me = slots.attach(Flaw::None).unwrap();
    let other = slots.attach(Flaw::None).unwrap();
    let before = futex::counts();
    for _ in 0..1000 {
        let held = lock
            .lock(me, &slots, &Unkillable, |_| unreachable!())
            .unwrap();
        held.unlock(&Unkillable).unwrap();
    }
    assert_eq!(
        futex::counts(),
        before,
        "an uncontended lock made a futex call"
    );
    let held = lock
        .lock(me, &slots, &Unkillable, |_| unreachable!())
        .unwrap();
    let tid = AtomicU64::new(0);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            // SAFETY: gettid has no preconditions.
            tid.store(unsafe { libc::gettid() } as u64, Ordering::Release);
            let run = ParkForever { region: &region };
            let held = lock.lock(other, &slots, &run, |_| unreachable!()).unwrap();
            held.unlock(&run).unwrap();
        });
        while tid.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        let task = format!("self/task/{}", tid.load(Ordering::Acquire));
        until_parked(&task, &lock);
        held.unlock(&Unkillable).unwrap();
    });
    let after = futex::counts();
    assert_eq!(
        (after.waits, after.wakes),
        (before.waits, before.wakes + 1),
        "one wake for the parked thread"
    );
    assert_eq!(
        region[R_WAITER_WAITS].load(Ordering::Acquire),
        1,
        "it parked once"
    );
}

/// Nanoseconds `pid` has run on a CPU (`/proc/<pid>/schedstat`'s first field).
fn cpu_ns(pid: libc::pid_t) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).expect("schedstat");
    stat.split_ascii_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .expect("schedstat's run time")
}

/// The wait before issue 45 step 3: spins and yields, never parks.
struct SpinOnly;

impl Run for SpinOnly {
    fn at(&self, _step: Step) -> Result<(), Died> {
        Ok(())
    }

    fn wait(&self, holder: Holder) {
        Unkillable.wait(holder)
    }

    fn park(&self) -> Option<Park> {
        None
    }
}

/// The figure of docs/sharing.md: the CPU a waiter burns in a second while the holder of
/// the lock it waits for is stopped (`SIGSTOP`: a holder descheduled), then the holder
/// killed and marked dead, the waiter takes over; with the library's wait (parks) and
/// the old one (`SpinOnly`). Prints; asserts nothing about the figure (run by hand:
/// `--ignored --nocapture --test-threads=1`).
#[test]
#[ignore = "a measurement: run by hand"]
fn measure_a_waiters_cpu_while_the_holder_is_stopped() {
    for _ in 0..3 {
        waiters_cpu("parks (Unkillable)", &Unkillable);
        waiters_cpu("spins only (the old wait)", &SpinOnly);
    }
}

fn waiters_cpu<R: Run>(what: &str, run: &R) {
    {
        let shared = SharedRegion::new(REGION_WORDS);
        let region = shared.words();
        let slots = &SlotTable::new(region, Word(0), SLOTS);
        let stack = &FrameStack::new(region, STACK, FRAMES);
        stack.format();
        let holder = slots.attach(Flaw::None).unwrap();
        let waiter = slots.attach(Flaw::None).unwrap();
        let stopped = fork(|| {
            let _ = stack.pop(holder, slots, &StopWhenLocked::new(region));
        });
        let status = wait_for(stopped, libc::WUNTRACED);
        assert!(libc::WIFSTOPPED(status));
        let waiting = fork(|| {
            let frame = stack.pop(waiter, slots, run).unwrap().unwrap();
            stack.push(waiter, frame, slots, run).unwrap();
        });
        // Let it reach the wait, then measure a second of it.
        std::thread::sleep(Duration::from_millis(100));
        let (cpu0, wall0) = (cpu_ns(waiting), Instant::now());
        std::thread::sleep(Duration::from_secs(1));
        let (cpu1, wall1) = (cpu_ns(waiting), Instant::now());
        // SAFETY: kills our own stopped child.
        unsafe { libc::kill(stopped, libc::SIGKILL) };
        wait_for(stopped, 0);
        let marked = Instant::now();
        assert!(slots.mark_dead(holder));
        let status = wait_for(waiting, 0);
        let took_over = marked.elapsed();
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        eprintln!(
            "waiter that {what}: {:.1} ms of CPU in {:.3} s with the holder stopped; took over {:.2} ms \
             after the mark",
            (cpu1 - cpu0) as f64 / 1e6,
            (wall1 - wall0).as_secs_f64(),
            took_over.as_secs_f64() * 1e3
        );
    }
}

/// The figure of docs/sharing.md: an uncontended `lock` and `unlock` of a holder lock
/// (median of 7 runs of 2^22 pairs), beside a bare CAS and release store.
#[test]
#[ignore = "a measurement: run by hand"]
fn measure_an_uncontended_lock_and_unlock() {
    const PAIRS: u32 = 1 << 22;
    let shared = SharedRegion::new(REGION_WORDS);
    let region = shared.words();
    let slots = SlotTable::new(region, Word(0), SLOTS);
    let lock = HolderLock::new(region, STACK);
    let me = slots.attach(Flaw::None).unwrap();
    let mut held = Vec::new();
    let mut bare = Vec::new();
    for _ in 0..7 {
        let started = Instant::now();
        for _ in 0..PAIRS {
            let guard = lock
                .lock(me, &slots, &Unkillable, |_| unreachable!())
                .unwrap();
            guard.unlock(&Unkillable).unwrap();
        }
        held.push(started.elapsed().as_secs_f64() * 1e9 / f64::from(PAIRS));
        let word = &region[BARE];
        let started = Instant::now();
        for _ in 0..PAIRS {
            let ok = word.compare_exchange(0, me.word(), Ordering::AcqRel, Ordering::Acquire);
            assert!(std::hint::black_box(ok).is_ok());
            word.store(0, Ordering::Release);
        }
        bare.push(started.elapsed().as_secs_f64() * 1e9 / f64::from(PAIRS));
    }
    held.sort_by(f64::total_cmp);
    bare.sort_by(f64::total_cmp);
    eprintln!(
        "uncontended lock+unlock: {:.2} ns (median of 7; min {:.2}); bare CAS + release \
         store {:.2} ns (min {:.2})",
        held[3], held[0], bare[3], bare[0]
    );
}

/// A `Run` that parks as `Park` says (`None`: the old wait, spin and yield only).
struct Parking(Option<Park>);

impl Run for Parking {
    fn at(&self, _step: Step) -> Result<(), Died> {
        Ok(())
    }

    fn wait(&self, holder: Holder) {
        Unkillable.wait(holder)
    }

    fn park(&self) -> Option<Park> {
        self.0
    }
}

/// The figure of docs/sharing.md: two processes lease and return a frame 200,000 times
/// each on one stack (the lock contended all along), with the old wait and with parking
/// after 2 and after 8 waits: wall time, both processes' CPU, and the parks. Prints (run
/// by hand: `--ignored --nocapture --test-threads=1`).
#[test]
#[ignore = "a measurement: run by hand"]
fn measure_two_processes_contending() {
    const PAIRS: u32 = 200_000;
    for _ in 0..3 {
        for (what, park) in [
            ("spins only (the old wait)", None),
            ("parks after 2 waits (the library's)", Some(Park::DEFAULT)),
            (
                "parks after 8 waits",
                Some(Park {
                    after_waits: 8,
                    ..Park::DEFAULT
                }),
            ),
        ] {
            let shared = SharedRegion::new(REGION_WORDS);
            let region = shared.words();
            let slots = &SlotTable::new(region, Word(0), SLOTS);
            let stack = &FrameStack::new(region, STACK, FRAMES);
            stack.format();
            let started = Instant::now();
            let children: Vec<_> = (0..2)
                .map(|i| {
                    let me = slots.attach(Flaw::None).unwrap();
                    fork(move || {
                        let run = Parking(park);
                        for _ in 0..PAIRS {
                            let frame = stack.pop(me, slots, &run).unwrap().unwrap();
                            stack.push(me, frame, slots, &run).unwrap();
                        }
                        region[R_TOOK_OVER + i].store(futex::counts().waits, Ordering::Release);
                        // Stay for the parent to read our CPU time.
                        // SAFETY: raise has no memory-safety preconditions.
                        unsafe { libc::raise(libc::SIGSTOP) };
                    })
                })
                .collect();
            let mut cpu = 0;
            for &child in &children {
                assert!(libc::WIFSTOPPED(wait_for(child, libc::WUNTRACED)));
            }
            let wall = started.elapsed();
            for &child in &children {
                cpu += cpu_ns(child);
                // SAFETY: our own stopped child.
                unsafe { libc::kill(child, libc::SIGKILL) };
                wait_for(child, 0);
            }
            let parks = region[R_TOOK_OVER].load(Ordering::Acquire)
                + region[R_TOOK_OVER + 1].load(Ordering::Acquire);
            eprintln!(
                "{what}: {:.0} ms wall, {:.0} ms CPU (both), {parks} parks, for 2 x {PAIRS} \
                 leases",
                wall.as_secs_f64() * 1e3,
                cpu as f64 / 1e6
            );
        }
    }
}
