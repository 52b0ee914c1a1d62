//! The shared structures killed at every step: in one process (a `Run` that stops the
//! operation there), and across real processes (a child that stops itself at the chosen
//! step and is `SIGKILL`ed there, while another process waits for the lock it holds).
//! The loom models of the same code are in `tests/loom_shared.rs`.
//!
//! Beside them, what the other shared tests build on: the lever `DieAt`; `MemberLever`,
//! every lever over a member (its waits the member's; `StopAt` the kill tests' across
//! processes); `fork`, `wait_for`, `kill`, `SharedRegion`, and `DomainHome`, the
//! directory every test's domain lives in, which no steward outlives (nothing left in
//! `/dev/shm`, no steward left running after its test).

use super::attach::Member;
use super::domain::{Domain, DomainFiles, Pidfd};
use super::futex::Parked;
use super::slot::SlotTable;
use super::stack::{Census, FrameStack};
use super::terms::{Park, Unkillable};
use super::{Died, Flaw, Holder, ProcessId, Run, SlotIndex, Step, Word};
use crate::primitive::{AtomicU64, Ordering};
use std::cell::Cell;
use std::time::{Duration, Instant};

const SLOTS: u16 = 8;
const FRAMES: u32 = 4;
const STACK: Word = Word(16);
/// Words the cross-process test uses to see what the waiting process did.
const WAITED: usize = 32;
const TOOK_OVER: usize = 33;
const DONE: usize = 34;
const REGION_WORDS: usize = 40;
const _: () = assert!(DONE < REGION_WORDS);

const _: () = assert!(SlotTable::words(SLOTS) <= STACK.0);
const _: () = assert!(STACK.0 + 8 + 2 * FRAMES <= WAITED as u32);

/// A `Run` that dies at its `at`-th step (counted from 0 over every step it is asked
/// about; `None`: never), by returning `Died` (`Death::Return`) or by stopping its process
/// with `SIGSTOP` for the test to kill (`Death::Stop`). The death-at-every-step tests of
/// each shared structure use it.
pub(super) struct DieAt {
    at: Option<u32>,
    count: Cell<u32>,
    death: Death,
    flaw: Flaw,
}

/// How a `DieAt` dies.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Death {
    /// `Run::at` returns `Died` (one process's test).
    Return,
    /// The process stops itself for the test to `SIGKILL` (across processes).
    Stop,
}

impl DieAt {
    pub(super) fn new(at: Option<u32>, death: Death, flaw: Flaw) -> DieAt {
        DieAt {
            at,
            count: Cell::new(0),
            death,
            flaw,
        }
    }
}

impl Run for DieAt {
    fn at(&self, _step: Step) -> Result<(), Died> {
        let n = self.count.get();
        self.count.set(n + 1);
        if Some(n) != self.at {
            return Ok(());
        }
        match self.death {
            Death::Return => Err(Died),
            Death::Stop => {
                // SAFETY: raise has no memory-safety preconditions.
                unsafe { libc::raise(libc::SIGSTOP) };
                unreachable!("a stopped process is killed, never continued");
            }
        }
    }

    fn wait(&self, holder: Holder) {
        Unkillable.wait(holder)
    }

    fn flaw(&self) -> Flaw {
        self.flaw
    }
}

/// A kill test's seed: `FOLIO_SEED` if set (a replay), else the clock; printed with `what`
/// so that a failing run can be replayed.
pub(super) fn seed_from_env(what: &str) -> u64 {
    let seed = std::env::var("FOLIO_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("{what}: FOLIO_SEED={seed}");
    seed
}

/// A test's lever over a member: at each step, what the lever does there (`AtStep`),
/// then the member's own `at`; waits, parks and their ends are the member's (it checks
/// its steward), so a lever changes its member's run only where it acts. The flaw is the
/// member's (`Flaw::None`) unless `with_flaw` names a broken variant's. A panic's unwind
/// under a lock keeps the lock (`OnUnwind::KeepTheLock`), not the member's abort, unless
/// `on_unwind` says otherwise: a test's panic (its assertion, a broken variant's) fails
/// that test instead of aborting every test of the binary.
pub(super) struct MemberLever<'m, L> {
    member: &'m Member,
    lever: L,
    flaw: Flaw,
    on_unwind: OnUnwind,
}

/// What a lever does at a step of its member's operation (`MemberLever`): `Err(Died)`
/// ends the operation there, as `Run::at`'s does.
pub(super) trait AtStep {
    fn at(&self, member: &Member, step: Step) -> Result<(), Died>;
}

/// A lever lent to its `MemberLever`, so that the test reads its state while it runs.
impl<L: AtStep> AtStep for &L {
    fn at(&self, member: &Member, step: Step) -> Result<(), Died> {
        (**self).at(member, step)
    }
}

/// No lever: the member's own steps (a run that differs from the member's in its flaw).
impl AtStep for () {
    fn at(&self, _member: &Member, _step: Step) -> Result<(), Died> {
        Ok(())
    }
}

/// What a hold dropped by a panic's unwind does (`Run::abort_on_unwind`; lock.rs, "A
/// panic under the lock").
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum OnUnwind {
    /// The library's way: the process aborts, a death the steward mends.
    Abort,
    /// The way before it: the lock stays with the live process.
    KeepTheLock,
}

impl<'m, L: AtStep> MemberLever<'m, L> {
    pub(super) fn new(member: &'m Member, lever: L) -> Self {
        MemberLever {
            member,
            lever,
            flaw: Flaw::None,
            on_unwind: OnUnwind::KeepTheLock,
        }
    }

    /// The run with a model's flaw (a broken variant's).
    pub(super) fn with_flaw(self, flaw: Flaw) -> Self {
        MemberLever { flaw, ..self }
    }

    /// The run whose holds dropped by an unwind do as `on_unwind` says.
    pub(super) fn on_unwind(self, on_unwind: OnUnwind) -> Self {
        MemberLever { on_unwind, ..self }
    }
}

impl<L: AtStep> Run for MemberLever<'_, L> {
    fn at(&self, step: Step) -> Result<(), Died> {
        self.lever.at(self.member, step)?;
        self.member.at(step)
    }

    fn wait(&self, holder: Holder) {
        self.member.wait(holder)
    }

    fn park(&self) -> Option<Park> {
        self.member.park()
    }

    fn parked(&self, holder: Holder, outcome: Parked) {
        self.member.parked(holder, outcome)
    }

    fn flaw(&self) -> Flaw {
        self.flaw
    }

    fn abort_on_unwind(&self) -> bool {
        self.on_unwind == OnUnwind::Abort
    }
}

/// The lever of the kill tests across processes: stops its process (`SIGSTOP`) at its
/// `die_at`-th step (counted from 0 over every step it is asked about; `None`: never),
/// for the test to kill there. A member's `DieAt` with `Death::Stop`.
pub(super) struct StopAt {
    die_at: Option<u64>,
    count: Cell<u64>,
}

impl StopAt {
    pub(super) fn new(die_at: Option<u64>) -> StopAt {
        StopAt {
            die_at,
            count: Cell::new(0),
        }
    }
}

impl AtStep for StopAt {
    fn at(&self, _member: &Member, _step: Step) -> Result<(), Died> {
        let n = self.count.get();
        self.count.set(n + 1);
        if Some(n) == self.die_at {
            // SAFETY: raise has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
            unreachable!("a stopped member is killed, never continued");
        }
        Ok(())
    }
}

/// SplitMix64: the kill tests' draws (what each member does, where it dies), every output
/// a function of the seed alone.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A draw below `n` (`n` > 0).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A `Run` that never dies and notes in the region that it waited for a live holder and
/// that it took a lock over.
struct Noted<'r> {
    region: &'r [AtomicU64],
}

impl Run for Noted<'_> {
    fn at(&self, step: Step) -> Result<(), Died> {
        if step == Step::TookOver {
            self.region[TOOK_OVER].store(1, Ordering::Release);
        }
        Ok(())
    }

    fn wait(&self, holder: Holder) {
        self.region[WAITED].store(1, Ordering::Release);
        Unkillable.wait(holder)
    }
}

/// What each process does: two leases, each returned.
fn lease_twice<R: Run>(
    stack: &FrameStack<'_>,
    me: Holder,
    slots: &SlotTable<'_>,
    run: &R,
) -> Result<(), Died> {
    for _ in 0..2 {
        let frame = stack.pop(me, slots, run)?.expect("a frame is listed");
        stack.push(me, frame, slots, run)?;
    }
    Ok(())
}

fn all_listed(stack: &FrameStack<'_>) {
    assert_eq!(
        stack.check(),
        Ok(Census {
            listed: FRAMES,
            leased: Vec::new()
        })
    );
}

#[test]
fn a_holder_word_names_its_slot_and_generation() {
    let holder = Holder {
        slot: SlotIndex(65_535),
        generation: u32::MAX,
    };
    assert_ne!(holder.word(), 0);
    assert_eq!(Holder::from_word(holder.word()), holder);
    let next = Holder {
        generation: 1,
        ..holder
    };
    assert_ne!(next.word(), holder.word());
}

#[test]
fn a_slot_gets_a_new_generation_at_each_attach() {
    let region: Vec<AtomicU64> = (0..8).map(|_| AtomicU64::new(0)).collect();
    let slots = SlotTable::new(&region, Word(0), 2);
    let a = slots.attach(Flaw::None).unwrap();
    let b = slots.attach(Flaw::None).unwrap();
    assert_eq!(
        (a.slot, a.generation, b.slot, b.generation),
        (SlotIndex(0), 1, SlotIndex(1), 1)
    );
    assert_eq!(slots.attach(Flaw::None), None, "every slot taken");
    slots.detach(a);
    assert!(!slots.is_live(a));
    let c = slots.attach(Flaw::None).unwrap();
    assert_eq!((c.slot, c.generation), (SlotIndex(0), 2));
    assert!(slots.mark_dead(c));
    assert!(!slots.mark_dead(c), "dead once");
    assert!(!slots.is_live(c) && slots.is_live(b));
    slots.free_dead(c);
    assert_eq!(slots.attach(Flaw::None).unwrap().generation, 3);
}

/// In one process: the first process dies at each step of its work in turn; a second
/// takes over its lock if it held it (and finishes its change), the steward returns its
/// leases, and every frame is listed once. Proves the protocol against a death at every
/// step, sequentially (the loom models interleave; the test below uses real processes).
#[test]
fn a_death_at_every_step_leaves_a_working_stack() {
    in_one_process(Flaw::None);
}

/// The same with the intent published after the change's stores: fails (the next holder
/// finds a half-made change and nothing to redo).
#[test]
fn a_death_at_every_step_broken_intent_after_mutation() {
    let failed = std::panic::catch_unwind(|| in_one_process(Flaw::IntentAfterMutation));
    assert!(failed.is_err(), "the flawed protocol passed");
}

fn in_one_process(flaw: Flaw) {
    let mut took_over = 0;
    let mut swept = 0;
    for at in 0.. {
        let region: Vec<AtomicU64> = (0..REGION_WORDS).map(|_| AtomicU64::new(0)).collect();
        let slots = SlotTable::new(&region, Word(0), SLOTS);
        let stack = FrameStack::new(&region, STACK, FRAMES);
        stack.format();
        let steward = slots.attach(Flaw::None).unwrap();
        let p = slots.attach(Flaw::None).unwrap();
        if lease_twice(
            &stack,
            p,
            &slots,
            &DieAt::new(Some(at), Death::Return, flaw),
        )
        .is_ok()
        {
            slots.detach(p);
            all_listed(&stack);
            assert_eq!(at, 30, "two pops of 7 steps, two pushes of 8");
            break;
        }
        assert!(slots.mark_dead(p));
        let held = stack.lock_line().holder() == Some(p);
        let q = slots.attach(Flaw::None).unwrap();
        let noted = Noted { region: &region };
        lease_twice(&stack, q, &slots, &noted).unwrap();
        slots.detach(q);
        assert_eq!(
            region[TOOK_OVER].load(Ordering::Relaxed) == 1,
            held,
            "step {at}"
        );
        took_over += u32::from(held);
        swept += stack.sweep(p, steward, &slots, &Unkillable).unwrap();
        slots.free_dead(p);
        all_listed(&stack);
    }
    assert!(
        took_over > 20 && swept > 0,
        "took over {took_over}, swept {swept}"
    );
}

/// A test's domain directory: a temporary private home in `SHARED_DIR` (tmpfs, as a
/// domain's must be) that no steward outlives. Every test that makes a domain makes its
/// directory here, so that this is the one place that ends their stewards.
///
/// Dropped, it
/// 1. kills the steward each domain's header names (`SIGKILL` through a pidfd opened and
///    checked against the start time, so never another process at a reused pid), and
///    waits for its death: a steward lingers after its last member
///    (`DomainConfig::linger`: ten minutes for a `Cache`'s domain), and one left alone
///    notices its directory removed only at its next tick (up to 2 s), writing its last
///    trace lines into the directory being removed meanwhile;
/// 2. waits for every steward that ever opened a trace in the directory to have exited,
///    by taking each trace's `flock` exclusively (a test build's steward holds it shared
///    from its start to its exit: steward.rs, `Trace`), which also covers the stewards
///    the header does not name (one that lost an election, one that left after its
///    linger, still writing its last lines);
/// 3. removes the directory and checks it is gone.
///
/// Each wait is bounded (`STEWARDS_EXIT_WAIT`); a steward that has not exited in time
/// fails the test, named with the trace's last lines (a test that stopped a steward and
/// never killed it). While the test is failing already, the same is only printed.
///
/// Limits: a steward forked by a process that was killed before the steward opened its
/// trace (the few system calls after its fork) is not waited for; nothing of a test
/// starts a steward once the test is over.
pub(super) struct DomainHome {
    dir: Option<tempfile::TempDir>,
}

/// How long a dropped `DomainHome` waits for its stewards' exits: a killed steward's is at
/// once, the others' a few system calls; the bound is for a machine so loaded that a
/// process waits seconds for a core.
const STEWARDS_EXIT_WAIT: Duration = Duration::from_secs(20);

impl DomainHome {
    pub(super) fn new() -> DomainHome {
        DomainHome {
            dir: Some(tempfile::tempdir_in(crate::segment::home::SHARED_DIR).unwrap()),
        }
    }

    pub(super) fn path(&self) -> &std::path::Path {
        self.dir.as_ref().expect("until dropped").path()
    }

    /// The traces in the directory, one per domain a steward served (steward.rs,
    /// `Trace`), with the domain's name.
    fn traces(&self) -> Vec<(String, std::path::PathBuf)> {
        let Ok(entries) = std::fs::read_dir(self.path()) else {
            return Vec::new();
        };
        entries
            .filter_map(|entry| {
                let path = entry.ok()?.path();
                let name = path.file_name()?.to_str()?.strip_suffix(".trace")?;
                Some((name.to_string(), path.clone()))
            })
            .collect()
    }

    /// Step 1 (type docs): kills the steward domain `name`'s header names, if it runs,
    /// and returns it with its pidfd.
    fn kill_steward(&self, name: &str) -> Option<(ProcessId, Pidfd)> {
        use crate::segment::{DiskDir, SegmentDir};
        let dir = SegmentDir::open(self.path(), DiskDir::Refused).ok()?;
        let files = DomainFiles::of(name).ok()?;
        // No region (its steward left after its linger, or none was made): no steward
        // named; the trace's lock still waits for any that runs.
        let steward = Domain::open(&dir, &files).ok()?.steward();
        let pidfd = steward.open()?;
        // SAFETY: pidfd_send_signal on our own pidfd, no siginfo; the pidfd names the
        // steward checked by its start time, so the signal reaches no other process.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd.raw(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        Some((steward, pidfd))
    }

    /// Step 2 (type docs): takes `trace`'s lock exclusively by `deadline`; returns it
    /// held (the file), or why not.
    fn wait_for_stewards(
        trace: &std::path::Path,
        deadline: Instant,
    ) -> Result<std::fs::File, String> {
        use std::os::unix::io::AsRawFd;
        let file = std::fs::File::open(trace).map_err(|e| format!("{}: {e}", trace.display()))?;
        loop {
            // SAFETY: flock on our own descriptor.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(file);
            }
            if Instant::now() > deadline {
                let lines = std::fs::read_to_string(trace).unwrap_or_default();
                let last: Vec<&str> = lines.lines().rev().take(20).collect();
                return Err(format!(
                    "stewards of {} still running after {STEWARDS_EXIT_WAIT:?}: {:?} (the \
                     trace's pids without an exit line, running as stewards); its last \
                     lines, newest first:\n{}",
                    trace.display(),
                    running_stewards(&lines),
                    last.join("\n")
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The stewards (pids) a trace's lines show running: each that wrote a line and no
/// `exits:` line, and runs under the steward's name (a killed steward writes no exit).
fn running_stewards(trace: &str) -> Vec<&str> {
    let mut running: Vec<&str> = Vec::new();
    for line in trace.lines() {
        let Some((pid, what)) = line
            .split_once(" steward ")
            .and_then(|(_, rest)| rest.split_once(": "))
        else {
            continue;
        };
        if what.starts_with("exits:") {
            running.retain(|p| *p != pid);
        } else if !running.contains(&pid) {
            running.push(pid);
        }
    }
    running.retain(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|comm| comm.trim() == "folio-steward")
    });
    running
}

/// How many of its steward trace's last lines a failing test's `DomainHome` prints.
const TRACE_TAIL_ON_FAILURE: usize = 80;

impl Drop for DomainHome {
    fn drop(&mut self) {
        let deadline = Instant::now() + STEWARDS_EXIT_WAIT;
        let traces = self.traces();
        if std::thread::panicking() {
            // A failing test's stewards say what they did last (the trace goes with the
            // directory).
            for (name, path) in &traces {
                let trace = std::fs::read_to_string(path).unwrap_or_default();
                let lines: Vec<&str> = trace.lines().collect();
                let tail = &lines[lines.len().saturating_sub(TRACE_TAIL_ON_FAILURE)..];
                eprintln!(
                    "the steward trace of {name}, its last lines:\n{}",
                    tail.join("\n")
                );
            }
        }
        let killed: Vec<_> = traces
            .iter()
            .filter_map(|(name, _)| self.kill_steward(name).map(|k| (name, k)))
            .collect();
        let mut failures = Vec::new();
        for (name, (steward, pidfd)) in &killed {
            while !pidfd.is_dead() && Instant::now() <= deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            if !pidfd.is_dead() {
                failures.push(format!(
                    "steward {steward:?} of {name} not dead after SIGKILL"
                ));
            }
        }
        // Held until the directory is gone: a steward that starts meanwhile waits.
        let mut held = Vec::new();
        for (_, trace) in &traces {
            match Self::wait_for_stewards(trace, deadline) {
                Ok(file) => held.push(file),
                Err(why) => failures.push(why),
            }
        }
        let dir = self.dir.take().expect("dropped once");
        let path = dir.path().to_path_buf();
        if let Err(e) = dir.close() {
            failures.push(format!("{}: not removed: {e}", path.display()));
        }
        if path.exists() {
            failures.push(format!("{} is still there", path.display()));
        }
        drop(held);
        if failures.is_empty() {
            return;
        }
        let what = failures.join("\n");
        if std::thread::panicking() {
            eprintln!("a test's domain directory: {what}");
        } else {
            panic!("a test's domain directory: {what}");
        }
    }
}

/// A region of shared memory that a forked child shares with its parent, as processes
/// share a segment.
pub(super) struct SharedRegion {
    base: *mut libc::c_void,
    bytes: usize,
}

impl SharedRegion {
    pub(super) fn new(words: usize) -> SharedRegion {
        let bytes = words * 8;
        // SAFETY: a fresh anonymous shared mapping; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap");
        SharedRegion { base, bytes }
    }

    pub(super) fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is `bytes` long, page-aligned, zeroed (a valid AtomicU64 is
        // any 8 bytes), and lives as long as `self`; it is only accessed atomically.
        unsafe { std::slice::from_raw_parts(self.base.cast::<AtomicU64>(), self.bytes / 8) }
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no reference to it outlives `self` (`words` borrows it).
        unsafe { libc::munmap(self.base, self.bytes) };
    }
}

/// The message of the panic `run` must end in (a broken variant's test: the flaw is
/// caught, and by the check meant), failing if it returns.
pub(super) fn failure_of(what: &str, run: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let payload = std::panic::catch_unwind(run).expect_err(what);
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// The bytes `path` has allocated in `range` (a region file's tmpfs blocks there, found
/// with `SEEK_DATA` and `SEEK_HOLE`): what of a sparse file is resident.
pub(super) fn allocated_in(path: &std::path::Path, range: std::ops::Range<u64>) -> u64 {
    use std::os::unix::io::AsRawFd;
    let file = std::fs::File::open(path).unwrap();
    let fd = file.as_raw_fd();
    let (mut at, mut bytes) = (range.start, 0u64);
    while at < range.end {
        // SAFETY: lseek on our own open descriptor.
        let data = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if data < 0 || data as u64 >= range.end {
            break;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        assert!(hole >= data, "SEEK_HOLE");
        let hole = (hole as u64).min(range.end);
        bytes += hole - data as u64;
        at = hole;
    }
    bytes
}

/// Makes this process (a test's child: a run of the test binary) die with the process
/// that started it (`PR_SET_PDEATHSIG`), so that no child outlives a failed or killed
/// test. Whether that process is still alive (false: it died before the call).
pub(super) fn die_with_parent() -> bool {
    // SAFETY: prctl with these arguments has no memory-safety preconditions.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    parent != 1
}

/// Runs `body` in a forked child, which exits 0 if it returns and 1 if it panics.
pub(super) fn fork(body: impl FnOnce()) -> libc::pid_t {
    // SAFETY: fork; the child runs `body` (atomics on the shared region, raise) and
    // `_exit`s; it allocates only to report a panic.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).is_ok();
        // SAFETY: ends the child without running the parent's destructors or atexit.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    pid
}

/// The child's status once it changes (exit, death, or stop with `WUNTRACED`); a child
/// that does neither within a minute (a bug, or a panic deadlocked in the forked child)
/// is killed and the test fails.
pub(super) fn wait_for(pid: libc::pid_t, options: libc::c_int) -> libc::c_int {
    let started = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waits for our own child, without blocking.
        let got = unsafe { libc::waitpid(pid, &mut status, options | libc::WNOHANG) };
        if got == pid {
            return status;
        }
        assert_eq!(got, 0, "waitpid");
        if started.elapsed() > Duration::from_secs(60) {
            // SAFETY: kills and reaps our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("child {pid} neither exited nor stopped within a minute");
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// SIGKILLs our own child `pid` and reaps it, asserting that the signal ended it.
pub(super) fn kill(pid: libc::pid_t) {
    // SAFETY: kills our own child (stopped, waited for below).
    let killed = unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(killed, 0);
    let status = wait_for(pid, 0);
    assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL);
}

pub(super) fn exited_ok(pid: libc::pid_t, what: &str) {
    let status = wait_for(pid, 0);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{what} failed: status {status:#x}"
    );
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Order {
    /// Another process waits for the lock the killed one holds, then takes it over.
    WaiterFirst,
    /// The steward sweeps first (taking the lock over), then another process works.
    StewardFirst,
}

/// Across processes: a child leases and returns frames, and stops itself at step `at`
/// (its `at`-th store to shared words, every step of its work in turn); the parent (the
/// steward) `SIGKILL`s it there. In `WaiterFirst`, a second child is started while the
/// first holds the lock, waits for it (the parent waits until it says so: no sleep
/// decides the coverage), finds the holder dead once the steward marked it, takes the
/// lock over and finishes the change; then the steward returns the dead one's leases.
/// Every frame ends listed once, whatever the step.
#[test]
fn a_process_killed_at_every_step_leaves_a_working_stack() {
    across_processes(Flaw::None);
}

// No flawed variant across processes: its children would panic, and a panic in a child
// forked from the multi-threaded test harness can deadlock on a lock another thread held
// at the fork (seen: a child stuck in a futex for minutes). The flaws are caught by
// `a_death_at_every_step_broken_intent_after_mutation` and the loom models.

fn across_processes(flaw: Flaw) {
    for order in [Order::WaiterFirst, Order::StewardFirst] {
        let mut waited_and_took_over = 0;
        let mut swept = 0;
        for at in 0.. {
            let shared = SharedRegion::new(REGION_WORDS);
            let region = shared.words();
            let slots = &SlotTable::new(region, Word(0), SLOTS);
            let stack = &FrameStack::new(region, STACK, FRAMES);
            stack.format();
            let steward = slots.attach(Flaw::None).unwrap();
            let p = slots.attach(Flaw::None).unwrap();
            let killed = fork(|| {
                lease_twice(stack, p, slots, &DieAt::new(Some(at), Death::Stop, flaw)).unwrap();
                region[DONE].store(1, Ordering::Release);
            });
            let status = wait_for(killed, libc::WUNTRACED);
            if libc::WIFEXITED(status) {
                assert_eq!(libc::WEXITSTATUS(status), 0);
                assert_eq!(region[DONE].load(Ordering::Acquire), 1);
                slots.detach(p);
                all_listed(stack);
                assert_eq!(at, 30, "two pops of 7 steps, two pushes of 8");
                break;
            }
            assert!(libc::WIFSTOPPED(status), "step {at}: status {status:#x}");
            let held = stack.lock_line().holder() == Some(p);
            let work = |q: Holder| {
                move || {
                    lease_twice(stack, q, slots, &Noted { region }).unwrap();
                    slots.detach(q);
                }
            };
            match order {
                Order::WaiterFirst => {
                    let q = slots.attach(Flaw::None).unwrap();
                    let waiter = fork(work(q));
                    if held {
                        // It cannot pass a live holder: wait until it says it waits.
                        let started = Instant::now();
                        while region[WAITED].load(Ordering::Acquire) == 0 {
                            if started.elapsed() > Duration::from_secs(60) {
                                kill(killed);
                                kill(waiter);
                                panic!("step {at}: the waiter never waited");
                            }
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                    kill(killed);
                    assert!(slots.mark_dead(p));
                    exited_ok(waiter, "the waiter");
                    assert_eq!(
                        region[TOOK_OVER].load(Ordering::Acquire) == 1,
                        held,
                        "step {at}"
                    );
                    waited_and_took_over += u32::from(held);
                    swept += stack.sweep(p, steward, slots, &Unkillable).unwrap();
                    slots.free_dead(p);
                }
                Order::StewardFirst => {
                    kill(killed);
                    assert!(slots.mark_dead(p));
                    swept += stack.sweep(p, steward, slots, &Unkillable).unwrap();
                    slots.free_dead(p);
                    let q = slots.attach(Flaw::None).unwrap();
                    assert_eq!(
                        (q.slot, q.generation),
                        (p.slot, p.generation + 1),
                        "the slot reused"
                    );
                    exited_ok(fork(work(q)), "the next process");
                }
            }
            all_listed(stack);
        }
        assert!(swept > 0, "{order:?}: no lease swept");
        if order == Order::WaiterFirst {
            assert!(
                waited_and_took_over > 20,
                "took over {waited_and_took_over} times"
            );
        }
    }
}
