//! Waiting for a held holder lock, across real processes (issue 45 step 3,
//! docs/sharing.md "Waiting"), and the figures of docs/sharing.md's table: the CPU a
//! waiter burns while the holder is descheduled, and an uncontended lock and unlock.

use super::lock::HolderLock;
use super::slot::SlotTable;
use super::stack::FrameStack;
use super::terms::Unkillable;
use super::tests::{fork, wait_for, SharedRegion};
use super::{Died, Flaw, Holder, Run, Step, Word};
use crate::primitive::Ordering;
use std::time::{Duration, Instant};

const SLOTS: u16 = 4;
const FRAMES: u32 = 2;
const STACK: Word = Word(16);
const REGION_WORDS: usize = 64;

/// A `Run` that stops its process (`SIGSTOP`) right after it locked, for the test to
/// kill it there, holding the lock.
struct StopWhenLocked;

impl Run for StopWhenLocked {
    fn at(&self, step: Step) -> Result<(), Died> {
        if step == Step::Locked {
            // SAFETY: raise has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
            unreachable!("a stopped process is killed, never continued");
        }
        Ok(())
    }

    fn wait(&self, holder: Holder) {
        Unkillable.wait(holder)
    }
}

/// Nanoseconds `pid` has run on a CPU (`/proc/<pid>/schedstat`'s first field).
fn cpu_ns(pid: libc::pid_t) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).expect("schedstat");
    stat.split_ascii_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .expect("schedstat's run time")
}

/// The figure of docs/sharing.md: the CPU a waiter burns in a second while the holder of
/// the lock it waits for is stopped (`SIGSTOP`: a holder descheduled), then the holder
/// killed and marked dead, the waiter takes over. Prints; asserts nothing about the
/// figure (run by hand: `--ignored --nocapture`).
#[test]
#[ignore = "a measurement: run by hand"]
fn measure_a_waiters_cpu_while_the_holder_is_stopped() {
    for _ in 0..3 {
        let shared = SharedRegion::new(REGION_WORDS);
        let region = shared.words();
        let slots = &SlotTable::new(region, Word(0), SLOTS);
        let stack = &FrameStack::new(region, STACK, FRAMES);
        stack.format();
        let holder = slots.attach(Flaw::None).unwrap();
        let waiter = slots.attach(Flaw::None).unwrap();
        let stopped = fork(|| {
            let _ = stack.pop(holder, slots, &StopWhenLocked);
        });
        let status = wait_for(stopped, libc::WUNTRACED);
        assert!(libc::WIFSTOPPED(status));
        let waiting = fork(|| {
            let frame = stack.pop(waiter, slots, &Unkillable).unwrap().unwrap();
            stack.push(waiter, frame, slots, &Unkillable).unwrap();
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
            "waiter: {:.1} ms of CPU in {:.3} s with the holder stopped; took over {:.2} ms \
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
        let word = &region[48];
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
