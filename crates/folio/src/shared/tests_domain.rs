//! The domain and its steward across real processes (issue 45 step 2's test,
//! docs/sharing.md): forked processes attach and lease frames, random ones are
//! `SIGKILL`ed at a step a lever chose (the process stops itself there, the test kills
//! it: no sleep decides what is covered), the steward too (a lever in the region stops it
//! at a chosen step of its work on deaths); a survivor or the next attach elects a new
//! steward, which finds the live processes again and sweeps the dead. At the end of each
//! round every frame is listed exactly once, and every process that was not killed
//! finished its work.
//!
//! Seeded: `FOLIO_SEED=<n>` replays a run; the seed is printed. Every child and every
//! round has a deadline after which the test kills what it started and fails.

use super::attach::{DomainConfig, Member, Patience};
use super::domain::{Domain, Geometry};
use super::futex;
use super::slot::SlotState;
use super::stack::Census;
use super::tests::{
    fork, kill, seed_from_env, AtStep, DomainHome, MemberLever, Rng, SharedRegion, StopAt,
};
use super::{Died, Holder, ProcessId, Run, SlotIndex, Step};
use crate::primitive::Ordering;
use std::time::{Duration, Instant};

const CHILDREN: usize = 6;
const ROUNDS: u32 = 16;
/// Leases (and returns) per child per round.
const LEASES: u32 = 10;
/// The steps of one lease and its return when the lock is free (a pop's 7, a push's 8).
const STEPS_PER_LEASE: u32 = 15;
const FRAMES: u32 = 8;
const SLOTS: u16 = 12;
const ROUND_DEADLINE: Duration = Duration::from_secs(60);

/// The words each child reports in, in the test's own shared region.
const R_DONE: usize = 0;
const R_STARTED_AT_ATTACH: usize = 1;
const R_STARTED_WHILE_WORKING: usize = 2;
/// The child's futex calls (futex.rs's counts), written after each step.
const R_PARKS: usize = 3;
const R_WOKEN: usize = 4;
const R_TIMEOUTS: usize = 5;
const R_WAKES: usize = 6;
const R_WORDS: usize = 8;

/// A child's lever: writes its futex calls in its report at every step, then stops its
/// process as `StopAt` does (for the test to kill).
struct Reported<'r> {
    report: &'r [crate::primitive::AtomicU64],
    stop: StopAt,
}

impl AtStep for Reported<'_> {
    fn at(&self, member: &Member, step: Step) -> Result<(), Died> {
        let counts = futex::counts();
        self.report[R_PARKS].store(counts.waits, Ordering::Release);
        self.report[R_WOKEN].store(counts.woken, Ordering::Release);
        self.report[R_TIMEOUTS].store(counts.timeouts, Ordering::Release);
        self.report[R_WAKES].store(counts.wakes, Ordering::Release);
        self.stop.at(member, step)
    }
}

/// A child's work: attach, `LEASES` leases each returned, detach. Reports in `report`.
fn work(config: &DomainConfig, die_at: Option<u32>, report: &[crate::primitive::AtomicU64]) {
    let member = Member::attach(config).expect("attach");
    report[R_STARTED_AT_ATTACH].store(u64::from(member.stewards_started()), Ordering::Release);
    let before = member.stewards_started();
    let lever = Reported {
        report,
        stop: StopAt::new(die_at.map(u64::from)),
    };
    let run = MemberLever::new(&member, lever);
    let me = member.holder();
    let domain = member.domain();
    let (slots, stack) = (domain.slots(), domain.stack());
    for _ in 0..LEASES {
        let frame = loop {
            match stack.pop(me, &slots, &run).expect("never dies by Err") {
                Some(frame) => break frame,
                // Every frame leased, some to the dead: wait for the steward's sweep.
                None => run.wait(me),
            }
        };
        stack
            .push(me, frame, &slots, &run)
            .expect("never dies by Err");
    }
    report[R_STARTED_WHILE_WORKING].store(
        u64::from(member.stewards_started() - before),
        Ordering::Release,
    );
    member.detach();
    report[R_DONE].store(1, Ordering::Release);
}

/// Whether the process `id` is stopped (`/proc/<pid>/stat`'s state `T`), checked to be
/// that process (its start time).
pub(super) fn is_stopped(id: ProcessId) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", id.pid)) else {
        return false;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    fields.first() == Some(&"T") && fields.get(19).and_then(|s| s.parse().ok()) == Some(id.start)
}

pub(super) fn sigkill(pid: u32) {
    // SAFETY: kill has no memory-safety preconditions; the pid is a process of this test
    // (a child, or the steward checked by its start time just before).
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
}

/// Kills the steward the header names if it stopped itself (its lever). Returns whether.
fn kill_stopped_steward(domain: &Domain) -> bool {
    let steward = domain.steward();
    if steward.pid != 0 && is_stopped(steward) {
        sigkill(steward.pid);
        return true;
    }
    false
}

/// Whether the domain is quiet: every slot free but `parent`'s and the steward's, and
/// the steward alive.
pub(super) fn is_quiet(domain: &Domain, parent: Holder) -> bool {
    let steward = domain.steward();
    let slots = domain.slots();
    (0..slots.slot_count()).all(|i| {
        let (state, holder) = slots.state(SlotIndex(i));
        state == SlotState::Free
            || holder == parent
            || (state == SlotState::Live && domain.records().read(holder) == Some(steward))
    }) && steward.open().is_some()
}

/// Kills what the test started (a failure's cleanup): the children and the steward.
struct Cleanup<'a> {
    children: Vec<libc::pid_t>,
    domain: &'a Domain,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for &pid in &self.children {
            sigkill(pid as u32);
            let mut status = 0;
            // SAFETY: reaps our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        }
        if std::thread::panicking() {
            let steward = self.domain.steward();
            if steward.open().is_some() {
                sigkill(steward.pid);
            }
        }
    }
}

/// Issue 45 step 2's test (module docs): `CHILDREN` processes per round, about half
/// killed at a random step (child 0 always), the steward stopped and killed at a random
/// early step of its work on deaths in every other round, and killed idle after every
/// fourth round (the next round's attaches find none); every frame listed once after
/// each round, every survivor done, one election per steward killed, and the last
/// steward leaves once nobody is attached.
#[test]
fn processes_and_the_steward_killed_at_random_steps_leave_a_working_domain() {
    let seed = seed_from_env("steward test");
    let mut rng = Rng(seed);
    let home = DomainHome::new();
    let config = DomainConfig {
        dir: home.path().to_path_buf(),
        name: "steward-test".into(),
        geometry: Geometry {
            slots: SLOTS,
            frames: FRAMES,
        },
        linger: Duration::from_millis(100),
        memory_files: None,
        weight: super::record::Weight::DEFAULT,
    };
    let started = Instant::now();
    // The test is a member too: it maps the domain, reads the steward from its header,
    // and keeps the steward from leaving between rounds.
    let parent = Member::attach(&config).unwrap();
    let first_attach = started.elapsed();
    // An attach to a running steward, and its detach (figures: docs/sharing.md).
    let again = Instant::now();
    let second = Member::attach(&config).unwrap();
    let second_attach = again.elapsed();
    assert_ne!(second.holder().slot, parent.holder().slot);
    second.detach();
    eprintln!(
        "steward test: the first attach (a steward started) {:.2} ms, the next {:.2} ms",
        first_attach.as_secs_f64() * 1e3,
        second_attach.as_secs_f64() * 1e3
    );
    let domain = parent.domain();
    assert_eq!(
        domain.elections(),
        1,
        "the first attach elected the first steward"
    );
    let mut cleanup = Cleanup {
        children: Vec::new(),
        domain,
    };
    let report = SharedRegion::new(CHILDREN * R_WORDS);
    let mut killed = 0u64;
    let mut steward_kills = 0u64;
    let mut started_at_attach = 0;
    let mut started_while_working = 0;
    // The children's futex calls, summed (the killed ones' up to their last step).
    let mut futex_calls = [0u64; 4];
    for round in 0..ROUNDS {
        for word in report.words() {
            word.store(0, Ordering::Relaxed);
        }
        if round % 2 == 1 {
            // Every bury is at least 5 steps (steward.rs: lever, lock, unlock, lever,
            // lever), and child 0 dies: the lever fires in this round.
            domain.set_steward_stop_at(1 + rng.below(5));
        }
        let mut die = Vec::new();
        for i in 0..CHILDREN {
            let dies = i == 0 || rng.below(2) == 0;
            // In a round that kills the steward, child 0 dies within its first two
            // leases, so that others still work (and may wait for the lock the stopped
            // steward holds, and elect the next).
            let steps = if i == 0 && round % 2 == 1 {
                2 * STEPS_PER_LEASE
            } else {
                LEASES * STEPS_PER_LEASE
            };
            let at = dies.then(|| rng.below(u64::from(steps)) as u32);
            die.push(at);
            let words = &report.words()[i * R_WORDS..(i + 1) * R_WORDS];
            let config = &config;
            cleanup.children.push(fork(move || work(config, at, words)));
        }
        eprintln!("round {round}: deaths at {die:?}");
        let deadline = Instant::now() + ROUND_DEADLINE;
        while !cleanup.children.is_empty() {
            assert!(Instant::now() < deadline, "round {round}: a child is stuck");
            if kill_stopped_steward(domain) {
                steward_kills += 1;
            }
            let mut i = 0;
            while i < cleanup.children.len() {
                let pid = cleanup.children[i];
                let mut status = 0;
                // SAFETY: polls our own child.
                let got =
                    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG | libc::WUNTRACED) };
                if got == 0 {
                    i += 1;
                    continue;
                }
                assert_eq!(got, pid, "waitpid");
                if libc::WIFSTOPPED(status) {
                    sigkill(pid as u32);
                    // SAFETY: reaps our own child, killed.
                    unsafe { libc::waitpid(pid, &mut status, 0) };
                    killed += 1;
                } else {
                    assert!(
                        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                        "round {round}: child {pid} failed: status {status:#x}"
                    );
                }
                cleanup.children.swap_remove(i);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        for (i, at) in die.iter().enumerate() {
            let words = &report.words()[i * R_WORDS..(i + 1) * R_WORDS];
            let done = words[R_DONE].load(Ordering::Acquire) == 1;
            // A child meant to die past its last step finishes: that is a survivor.
            assert!(
                done || at.is_some(),
                "round {round}: child {i} neither finished nor was killed"
            );
            started_at_attach += words[R_STARTED_AT_ATTACH].load(Ordering::Acquire);
            started_while_working += words[R_STARTED_WHILE_WORKING].load(Ordering::Acquire);
            for (sum, word) in futex_calls
                .iter_mut()
                .zip([R_PARKS, R_WOKEN, R_TIMEOUTS, R_WAKES])
            {
                *sum += words[word].load(Ordering::Acquire);
            }
        }
        // Every death swept: by this steward, or by a new one (elected here if nobody
        // else needed it).
        let deadline = Instant::now() + ROUND_DEADLINE;
        while !is_quiet(domain, parent.holder()) {
            assert!(Instant::now() < deadline, "round {round}: never quiet");
            if kill_stopped_steward(domain) {
                steward_kills += 1;
            }
            parent.ensure_steward().unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        domain.set_steward_stop_at(0);
        assert_eq!(
            domain.stack().check(),
            Ok(Census {
                listed: FRAMES,
                leased: Vec::new()
            }),
            "round {round}: every frame listed once"
        );
        if round % 4 == 2 {
            // Killed idle: the next round's attaches find no steward and elect one.
            let steward = domain.steward();
            assert!(steward.open().is_some());
            sigkill(steward.pid);
            steward_kills += 1;
        }
    }
    eprintln!(
        "steward test: {killed} processes killed, {steward_kills} stewards killed, {} \
         elections (of which {started_at_attach} by an attach, {started_while_working} by a \
         waiting survivor that finished, {} by the test), {:.1} s",
        domain.elections(),
        parent.stewards_started(),
        started.elapsed().as_secs_f64()
    );
    eprintln!(
        "steward test: the members parked {} times (woken {}, timed out {}) and woke {} \
         times",
        futex_calls[0], futex_calls[1], futex_calls[2], futex_calls[3]
    );
    assert!(killed >= u64::from(ROUNDS), "child 0 dies in every round");
    assert!(steward_kills >= 1, "the steward was killed");
    assert_eq!(
        domain.elections(),
        1 + steward_kills,
        "one election per steward killed"
    );
    // The last steward leaves once nobody is attached (its linger).
    let last = domain.steward().open().expect("a steward runs");
    drop(cleanup);
    parent.detach();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !last.is_dead() {
        assert!(Instant::now() < deadline, "the steward stayed");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `ProcessId::find` of a process reaped between the open of its `/proc/<pid>/stat` and
/// the read (the read fails with `ESRCH`; `find_with`'s lever reaps it there): gone, not
/// "cannot tell". (The read path's steward kill test hung on this: a new steward's census
/// took a member killed and reaped at that instant for alive, left it unwatched, so never
/// marked it dead: its slot stayed LIVE, and the steward's sweep and the members waiting
/// for the locks it held waited for ever, or until the next steward.)
#[test]
fn a_process_reaped_while_its_start_time_is_read_is_found_gone() {
    let child = fork(|| {
        // SAFETY: raise has no memory-safety preconditions.
        unsafe { libc::raise(libc::SIGSTOP) };
    });
    let status = super::tests::wait_for(child, libc::WUNTRACED);
    assert!(libc::WIFSTOPPED(status), "status {status:#x}");
    let id = ProcessId {
        pid: child as u32,
        start: super::domain::start_time(child as u32).unwrap(),
    };
    assert!(id.find().unwrap().is_some(), "a stopped process is alive");
    let found = id.find_with(|| {
        sigkill(child as u32);
        let mut status = 0;
        // SAFETY: reaps our own child.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    });
    assert!(matches!(found, Ok(None)), "{found:?}");
    assert!(matches!(id.find(), Ok(None)), "and after");
}

/// A child forked by a member inherits neither the region nor the member's connection
/// (domain.rs, "Forks"): the page at the parent's mapping is not mapped in the child
/// (`mincore` says `ENOMEM`, and `/proc/self/maps` names no region file), the
/// connection's number reads `/dev/null`, and a member the child attaches is its own (a
/// slot of its own, LIVE beside the parent's). Fails without the `MADV_DONTFORK` (the
/// child finds the page mapped) and without the fork guard (the number is the socket).
#[test]
fn a_forked_child_has_no_region_and_attaches_as_its_own_member() {
    let home = DomainHome::new();
    let config = DomainConfig {
        dir: home.path().to_path_buf(),
        name: "fork-test".into(),
        geometry: Geometry {
            slots: 8,
            frames: 64,
        },
        linger: Duration::from_millis(100),
        memory_files: None,
        weight: super::record::Weight::DEFAULT,
    };
    let parent = Member::attach(&config).unwrap();
    let base = parent.domain().base_address();
    let conn = parent.conn_fd();
    let parents = parent.holder();
    let words = SharedRegion::new(8);
    let report = words.words();
    let child = fork(|| {
        let mut vec = [0u8; 1];
        // SAFETY: mincore only reads the page tables of the range; the result is checked.
        let rc = unsafe { libc::mincore(base as *mut libc::c_void, 4096, vec.as_mut_ptr()) };
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        assert_eq!(
            (rc, errno),
            (-1, libc::ENOMEM),
            "the region is mapped in the child"
        );
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let region = super::domain::DomainFiles::of("fork-test").unwrap().region;
        assert!(!maps.contains(&*region.to_string_lossy()), "{maps}");
        // SAFETY: all-zero is a valid stat, filled by fstat on a number we hold.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::fstat(conn, &mut st) }, 0);
        assert_eq!(
            st.st_mode & libc::S_IFMT,
            libc::S_IFCHR,
            "the parent's connection in the child is not /dev/null"
        );
        let own = Member::attach(&config).expect("attach in the child");
        let holder = own.holder();
        assert_ne!(
            holder.slot, parents.slot,
            "the child took its parent's slot"
        );
        assert!(own.domain().slots().is_live(parents), "the parent's slot");
        assert!(own.domain().slots().is_live(holder), "its own slot");
        report[0].store(u64::from(holder.slot.0) + 1, Ordering::Release);
        own.detach();
    });
    let status = super::tests::wait_for(child, 0);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed: {status:#x}"
    );
    assert_ne!(report[0].load(Ordering::Acquire), 0, "the child attached");
    // The parent is untouched: still LIVE, its slot its own.
    assert!(parent.domain().slots().is_live(parents));
    parent.detach();
}

/// A test's domain directory (`tests::DomainHome`) outlives the steward of its domain: a
/// steward that lingers as a `Cache`'s does (ten minutes), alone after its member's
/// detach, is dead once the directory is dropped, and the directory is gone. Fails with
/// a plain temporary directory (the steward outlives it until its next tick, then writes
/// its last trace lines there) and with a `DomainHome` that does not kill (its wait for
/// the trace's lock times out: the steward lingers on).
#[test]
fn a_dropped_domain_home_ends_its_lingering_steward_and_is_gone() {
    let home = DomainHome::new();
    let mut config = super::tests_read::config(home.path(), "home-steward", 4, 64);
    // A `Cache`'s domain's linger (`DOMAIN_LINGER`).
    config.linger = Duration::from_secs(10 * 60);
    let member = Member::attach(&config).unwrap();
    let steward = member.steward().open().expect("a steward runs");
    member.detach();
    let path = home.path().to_path_buf();
    drop(home);
    assert!(steward.is_dead(), "the steward outlived its directory");
    assert!(!path.exists(), "{} is still there", path.display());
}

/// A steward the domain's header does not name (one that lost an election, one that left
/// after its linger and still writes its last lines) is waited for too, by its lock on
/// the trace (steward.rs, `Trace`): a child holds the trace's lock shared as a steward
/// does, and reports its last step just before it exits, 200 ms after the drop began;
/// the drop returns only after that report. Fails with a `DomainHome` that does not wait
/// for the trace's lock.
#[test]
fn a_dropped_domain_home_waits_for_every_steward_that_holds_its_trace() {
    use std::os::unix::io::AsRawFd;
    const LOCKED: usize = 0;
    const DONE: usize = 1;
    let home = DomainHome::new();
    let trace = home.path().join("unnamed.trace");
    let words = SharedRegion::new(8);
    let report = words.words();
    let child = fork(|| {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&trace)
            .unwrap();
        // SAFETY: flock on our own descriptor.
        assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH) }, 0);
        report[LOCKED].store(1, Ordering::Release);
        std::thread::sleep(Duration::from_millis(200));
        report[DONE].store(1, Ordering::Release);
        // The lock goes with the process's exit (`fork`'s `_exit`).
        std::mem::forget(file);
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while report[LOCKED].load(Ordering::Acquire) == 0 {
        assert!(
            Instant::now() < deadline,
            "the child never locked the trace"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(home);
    assert_eq!(
        report[DONE].load(Ordering::Acquire),
        1,
        "the directory went while a steward held its trace"
    );
    super::tests::exited_ok(child, "the trace's holder");
}

/// An attach's patience (attach.rs, "Patience"): the time the process it waits for, or
/// the waiting thread itself, spent waiting for a CPU does not count; a process asleep
/// lends none. The lever: three busy children pinned to one CPU, so that each waits for it
/// about two thirds of the time (a loaded machine only starves them more: no timing
/// decides what is covered), then this thread pinned there too, and one child asleep.
#[test]
fn an_attachs_patience_does_not_count_waits_for_a_cpu() {
    // SAFETY: an all-zero cpu_set_t is empty; sched_getaffinity fills it.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: this thread's mask, of its size.
    let got = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&allowed), &mut allowed) };
    assert_eq!(got, 0, "sched_getaffinity");
    // SAFETY: CPU_ISSET reads the set in range.
    let cpu = (0..libc::CPU_SETSIZE as usize)
        .find(|&cpu| unsafe { libc::CPU_ISSET(cpu, &allowed) })
        .expect("a CPU we may run on");
    let pin_to_cpu = || {
        // SAFETY: an all-zero cpu_set_t is empty; CPU_SET and sched_setaffinity on our
        // own set and the calling thread.
        unsafe {
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut one);
            libc::sched_setaffinity(0, std::mem::size_of_val(&one), &one);
        }
    };
    let busy = || {
        fork(|| {
            pin_to_cpu();
            loop {
                std::hint::spin_loop();
            }
        })
    };
    let children = [busy(), busy(), busy()];
    let starved = children[0];
    let asleep = fork(|| loop {
        std::thread::sleep(Duration::from_secs(60));
    });
    let limit = Duration::from_millis(600);
    let mut waiting_for_starved = Patience::new(limit);
    waiting_for_starved.await_process(Some(starved as u32));
    let mut waiting_for_asleep = Patience::new(limit);
    waiting_for_asleep.await_process(Some(asleep as u32));
    let second = Duration::from_secs(1);
    let started = Instant::now();
    while started.elapsed() < second {
        std::thread::sleep(Duration::from_millis(100));
        waiting_for_starved.lasts();
        waiting_for_asleep.lasts();
    }
    let (starved_lasts, asleep_lasts) = (waiting_for_starved.lasts(), waiting_for_asleep.lasts());
    // This thread starved beside them, looking all the time.
    pin_to_cpu();
    let mut starved_waiter = Patience::new(limit);
    let started = Instant::now();
    while started.elapsed() < second {
        starved_waiter.lasts();
    }
    let waiter_lasts = starved_waiter.lasts();
    // SAFETY: this thread's mask as it was.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&allowed), &allowed) };
    for pid in children.into_iter().chain([asleep]) {
        kill(pid);
    }
    assert!(
        starved_lasts,
        "1 s waiting for a process starved of a CPU spent 600 ms of patience: {waiting_for_starved:?}"
    );
    assert!(
        !asleep_lasts,
        "1 s waiting for a process asleep left patience: {waiting_for_asleep:?}"
    );
    assert!(
        waiter_lasts,
        "1 s of a waiter starved of a CPU spent 600 ms of patience: {starved_waiter:?}"
    );
}
