//! The shared read path's deaths and races that tests_read.rs does not force: a conflict
//! between two members that miss one page at once, made deterministic by a lever (the
//! first stopped between its hand-over and its insertion while the second reads and
//! inserts the page); a page in flight (queue.rs, "In flight": the first stopped after
//! its insertion, before its `preadv`, while the second waits for it), and the first
//! killed at each step of its miss while the second waits; and the read kill test with the steward killed too, in its sweeps of dead
//! members and at random, the next steward started by a member or an attach (attach.rs);
//! and a member killed while the steward is stopped, then the steward killed.

use std::cell::Cell;
use std::path::{Path, PathBuf};

use super::attach::{DomainConfig, Member};
use super::index::Entry;
use super::read::{ReadCounters, SharedReader};
use super::steward::Trace;
use super::tests::{
    exited_ok, failure_of, fork, kill, seed_from_env, wait_for, AtStep, DomainHome, MemberLever,
    Rng, SharedRegion, StopAt,
};
use super::tests_domain::{is_quiet, is_stopped, sigkill};
use super::tests_read::{
    check_all, config, kill_len, read_and_compare, reclaim_everything, report, reported, stamped,
    write_file, KILL_FILES, KILL_READS, REPORT_WORDS,
};
use super::{Died, Flaw, Holder, Run, Step};
use super::{ProcessId, SlotIndex};
use crate::primitive::Ordering;

/// A member's lever that stops its process (`SIGSTOP`) once, at the end of its first
/// hand-over: the first `Step::Unlocked` at which the domain's queue holds one frame more
/// than `queued_before` (a hand-over is the only queue change of a miss with free
/// frames; the allocator's and the file table's unlocks leave the queue as it is). There
/// the miss has queued its frame (in flight), and has neither inserted it into the index
/// nor read it yet. The test continues it (`SIGCONT`).
struct StopBeforeInsertion {
    queued_before: u32,
    stopped: Cell<bool>,
}

impl AtStep for StopBeforeInsertion {
    fn at(&self, member: &Member, step: Step) -> Result<(), Died> {
        let queued = || member.domain().queue().count();
        if step == Step::Unlocked && !self.stopped.get() && queued() == self.queued_before + 1 {
            self.stopped.set(true);
            // SAFETY: raise has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
        Ok(())
    }
}

/// Words per member in the conflict test's report: 7 counters, its wrong bytes, done.
const CONFLICT_WORDS: usize = 9;

/// The folios every index of `member`'s domain names: (file record, page, frame).
pub(super) fn cached_folios(member: &Member) -> Vec<(usize, u64, u64)> {
    let mut folios = Vec::new();
    for (r, index) in member.domain().indexes().iter().enumerate() {
        for (page, entry) in index.entries() {
            if let Entry::Folio { frame, .. } = entry {
                folios.push((r, page, frame));
            }
        }
    }
    folios
}

/// A conflict forced (read.rs, "Miss"; queue.rs, "In flight"): member A misses page 1 of
/// a file and is stopped by its lever after its hand-over, before its insertion and its
/// `pread` (`SIGSTOP`, seen by the test with `waitpid(WUNTRACED)`: no sleep decides the
/// order); member B then misses the same page, inserts it and reads it; then A is
/// continued: its insertion conflicts, so it reads nothing (0 reads of the file: before
/// the in-flight protocol it had read the page before inserting it, a duplicate) and
/// copies the page from B's frame (a hit after its miss). Both read every byte right, A
/// counts one conflict and B none, the index names B's frame, and A frees its own: the
/// queue holds one frame, B's.
#[test]
fn a_member_stopped_before_its_insertion_conflicts_and_reads_from_the_winner() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let path = write_file(data.path(), 0, CONFLICT_LEN);
    let config = config(home.path(), "read-conflict", 8, 32);
    let parent = Member::attach(&config).unwrap();
    let words = SharedRegion::new(2 * CONFLICT_WORDS);
    let (a_words, b_words) = words.words().split_at(CONFLICT_WORDS);
    let a = fork(|| conflict_member(&config, &path, a_words, Lever::StopBeforeInsertion));
    let status = wait_for(a, libc::WUNTRACED);
    assert!(libc::WIFSTOPPED(status), "A: status {status:#x}");
    // A's frame is queued, and no index names the page yet.
    assert_eq!(parent.domain().queue().count(), 1);
    assert_eq!(
        cached_folios(&parent),
        Vec::new(),
        "A inserted before its stop"
    );
    let b = fork(|| conflict_member(&config, &path, b_words, Lever::None));
    exited_ok(b, "B");
    let after_b = cached_folios(&parent);
    assert_eq!(after_b.len(), 1, "B inserted page 1: {after_b:?}");
    assert_eq!(after_b[0].1, 1, "{after_b:?}");
    // SAFETY: continues our own stopped child.
    assert_eq!(unsafe { libc::kill(a, libc::SIGCONT) }, 0);
    exited_ok(a, "A");
    let (ra, rb) = (reported(&a_words[..7]), reported(&b_words[..7]));
    eprintln!("conflict: A {ra:?}\nconflict: B {rb:?}");
    for (who, w) in [("A", a_words), ("B", b_words)] {
        assert_eq!(w[7].load(Ordering::Acquire), 0, "{who}: wrong bytes");
        assert_eq!(w[8].load(Ordering::Acquire), 1, "{who}: not done");
    }
    assert_eq!(
        (ra.misses, ra.preads, ra.conflicts, ra.hits, ra.uncached),
        (1, 0, 1, 1, 0),
        "A: {ra:?}"
    );
    assert_eq!(
        (rb.misses, rb.preads, rb.conflicts, rb.hits, rb.uncached),
        (1, 1, 0, 0, 0),
        "B: {rb:?}"
    );
    // The index still names B's frame; A's is freed.
    assert_eq!(cached_folios(&parent), after_b);
    assert_eq!(parent.domain().queue().count(), 1);
    check_all(parent.domain());
    // The reclaim frees B's frame: every frame free.
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// The conflict test's file: 3 pages.
const CONFLICT_LEN: u64 = 3 * 4096;

/// A member of the conflict test: attaches, reads page 1 of `path` from byte 100 to its
/// end through a reader whose `Run` is `lever`'s, reports in `words` (`CONFLICT_WORDS`),
/// detaches.
fn conflict_member(
    config: &DomainConfig,
    path: &Path,
    words: &[crate::primitive::AtomicU64],
    lever: Lever,
) {
    let member = Member::attach(config).expect("attach");
    let wrong = match lever {
        Lever::StopBeforeInsertion => {
            let stop = StopBeforeInsertion {
                queued_before: 0,
                stopped: Cell::new(false),
            };
            let wrong = read_page_one(&member, &MemberLever::new(&member, &stop), path, words);
            assert!(stop.stopped.get(), "the lever never stopped A");
            wrong
        }
        Lever::None => read_page_one(&member, &member, path, words),
    };
    words[7].store(wrong as u64, Ordering::Release);
    words[8].store(1, Ordering::Release);
    member.detach();
}

/// Reads page 1 of `path` from byte 100 to its end through `member`'s reader run by
/// `run`, reports its counters in `words[..7]`, and returns the wrong bytes.
fn read_page_one<R: Run>(
    member: &Member,
    run: &R,
    path: &Path,
    words: &[crate::primitive::AtomicU64],
) -> usize {
    let reader = SharedReader::new(member, run, 1);
    let file = reader.open(path).unwrap();
    let expected = stamped(0, CONFLICT_LEN);
    let wrong = read_and_compare(&reader, &file, &expected, 4096 + 100, 4096 - 100);
    report(&words[..7], reader.counters());
    reader.close(file).unwrap();
    wrong
}

/// Which `Run` a member of the conflict test reads with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lever {
    /// Stops before its insertion (`StopBeforeInsertion`).
    StopBeforeInsertion,
    /// The member itself: never stops.
    None,
}

/// How the read kill test with the steward kills the steward in a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StewardDeath {
    /// Not at all.
    Spared,
    /// Stopped by the domain's lever at a step of its work on deaths (inside a sweep of a
    /// dead member, or of its own rebuild), and killed there.
    InASweep,
    /// Killed as it is, when the round's `after`-th member ended (the steward idle or
    /// serving, between sweeps or in one: wherever it is then).
    AtRandom { after: usize },
}

/// The stewards the test killed: each is killed and counted once (a killed steward is
/// still named by the header, and may still look alive, until it has exited and the
/// next one is elected).
struct Killed(Vec<ProcessId>);

impl Killed {
    /// Kills the steward the header names if it stopped itself (the domain's lever) and
    /// was not killed yet. Returns whether.
    fn kill_if_stopped(&mut self, domain: &super::domain::Domain) -> bool {
        let steward = domain.steward();
        if steward.pid == 0 || self.0.contains(&steward) || !is_stopped(steward) {
            return false;
        }
        sigkill(steward.pid);
        self.0.push(steward);
        true
    }

    /// Kills the steward the header names wherever it is, if it runs and was not killed
    /// yet. Returns whether.
    fn kill_if_alive(&mut self, domain: &super::domain::Domain) -> bool {
        let steward = domain.steward();
        if steward.pid == 0 || self.0.contains(&steward) || steward.open().is_none() {
            return false;
        }
        sigkill(steward.pid);
        self.0.push(steward);
        true
    }
}

/// Rounds of the read kill test with the steward (raise with `FOLIO_READ_KILL_ROUNDS`).
const STEWARD_ROUNDS: u32 = 28;
const STEWARD_CHILDREN: usize = 6;
const STEWARD_ROUND_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

/// Kills what the test started if it fails: its children, and the steward of the domain
/// (which would otherwise outlive the test, its lever possibly armed).
struct Cleanup<'a> {
    children: Vec<libc::pid_t>,
    domain: &'a super::domain::Domain,
}

impl Cleanup<'_> {
    /// Kills and reaps our own child `pid`.
    fn kill(&mut self, pid: libc::pid_t) {
        self.children.retain(|p| *p != pid);
        // SAFETY: kills and reaps our own child, not reaped yet.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, &mut 0, 0);
        }
    }
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        while let Some(pid) = self.children.last().copied() {
            self.kill(pid);
        }
        if std::thread::panicking() {
            let steward = self.domain.steward();
            if steward.open().is_some() {
                sigkill(steward.pid);
            }
        }
    }
}

/// Issue 45's kill test of the read path with the steward killed too: `STEWARD_ROUNDS`
/// rounds (`FOLIO_READ_KILL_ROUNDS=<n>` for more) of `STEWARD_CHILDREN` forked members,
/// each reading three overlapping files at random offsets and lengths through a domain of
/// 40 frames for 96 pages, every byte checked; about half stop themselves at a step the
/// seeded generator chose and are `SIGKILL`ed there (member 0 always, early in a round
/// that kills the steward in a sweep). In a third of the rounds the steward is stopped by
/// the domain's lever at a chosen step of its work on deaths (its sweep of a dead member,
/// or a new steward's rebuild) and killed there; in another third it is killed wherever it
/// is when a chosen member ends. A member that waits for a dead holder and finds the
/// steward dead starts a new one (attach.rs), as does an attach that finds none, and the
/// test at the end of a round if nobody did: the new steward finds the live processes
/// from their records and sweeps every dead slot, those the old one left half-swept
/// included. After each round the domain is quiet (every slot free but the test's and the
/// steward's) and every structure checks; one election per steward killed; at the end a
/// reclaim of everything frees every frame. `FOLIO_SEED=<n>` replays a run's draws.
#[test]
fn members_and_the_steward_killed_while_reading_leave_a_working_cache() {
    use std::time::Instant;
    let seed = seed_from_env("read and steward kill test");
    let rounds: u32 = std::env::var("FOLIO_READ_KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(STEWARD_ROUNDS);
    eprintln!("read and steward kill test: {rounds} rounds");
    let started = Instant::now();
    let mut rng = Rng(seed);
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..KILL_FILES)
        .map(|f| write_file(data.path(), f, kill_len(f)))
        .collect();
    let config = config(home.path(), "read-steward-kill", 12, 40);
    let parent = Member::attach(&config).unwrap();
    let domain = parent.domain();
    assert_eq!(domain.elections(), 1);
    let member_words = SharedRegion::new(MEMBER_WORDS * STEWARD_CHILDREN);
    let mut cleanup = Cleanup {
        children: Vec::new(),
        domain,
    };
    let (mut killed, mut finished) = (0u64, 0u64);
    let (mut stewards_in_sweeps, mut stewards_at_random) = (0u64, 0u64);
    let mut killed_stewards = Killed(Vec::new());
    let mut totals = ReadCounters::default();
    for round in 0..rounds {
        let death = match rng.below(3) {
            0 => StewardDeath::Spared,
            1 => StewardDeath::InASweep,
            _ => StewardDeath::AtRandom {
                after: rng.below(STEWARD_CHILDREN as u64) as usize,
            },
        };
        let mut story = RoundStory {
            config: &config,
            domain,
            seed,
            round,
            death,
            since_us: now_us(),
            members: Vec::new(),
            words: member_words.words(),
        };
        if death == StewardDeath::InASweep {
            // A bury is at least 3 of the lever's steps (steward.rs: before the sweeps,
            // before the free, after it) and member 0 dies: the lever fires in this
            // round, or in the rebuild of the steward that follows.
            domain.set_steward_stop_at(1 + rng.below(6));
        }
        for i in 0..STEWARD_CHILDREN {
            let words = &member_words.words()[MEMBER_WORDS * i..MEMBER_WORDS * (i + 1)];
            for word in words {
                word.store(0, Ordering::Relaxed);
            }
            let die_at = if i == 0 {
                // Early when the steward dies in its sweep: the others still read.
                let within = if death == StewardDeath::InASweep {
                    200
                } else {
                    1500
                };
                Some(rng.below(within))
            } else {
                (rng.below(2) == 0).then(|| rng.below(1500))
            };
            let child_seed = rng.next();
            let (config, paths) = (&config, &paths);
            let pid =
                fork(move || read_member(config, paths, die_at, child_seed, words, Start::AtOnce));
            cleanup.children.push(pid);
            story.members.push(MemberSeen {
                pid,
                die_at,
                ending: Ending::Running,
            });
        }
        let deadline = Instant::now() + STEWARD_ROUND_DEADLINE;
        let mut ended = 0;
        while story.members.iter().any(|m| m.ending == Ending::Running) {
            assert!(
                Instant::now() < deadline,
                "round {round}: the members never all ended\n{}",
                story.dump(&killed_stewards, Where::AndWhereEachWaits)
            );
            if killed_stewards.kill_if_stopped(domain) {
                stewards_in_sweeps += 1;
            }
            for at in 0..STEWARD_CHILDREN {
                let pid = story.members[at].pid;
                if story.members[at].ending != Ending::Running {
                    continue;
                }
                let mut status = 0;
                // SAFETY: waits for our own child, without blocking.
                let got =
                    unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED | libc::WNOHANG) };
                if got == 0 {
                    continue;
                }
                assert_eq!(got, pid, "waitpid");
                ended += 1;
                let words = &member_words.words()[MEMBER_WORDS * at..MEMBER_WORDS * (at + 1)];
                if libc::WIFSTOPPED(status) {
                    // Stopped by its lever: the death.
                    cleanup.kill(pid);
                    story.members[at].ending = Ending::Killed;
                    killed += 1;
                } else {
                    cleanup.children.retain(|p| *p != pid);
                    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
                    story.members[at].ending = if ok {
                        Ending::Finished
                    } else {
                        Ending::Failed(status)
                    };
                    assert!(
                        ok,
                        "round {round}: member {at} failed: status {status:#x}, {} wrong \
                         bytes\n{}",
                        words[1].load(Ordering::Acquire),
                        story.dump(&killed_stewards, Where::Slots)
                    );
                    assert_eq!(words[2].load(Ordering::Acquire), 1);
                    add(&mut totals, reported(&words[3..REPORT_WORDS]));
                    finished += 1;
                }
                if death == (StewardDeath::AtRandom { after: ended - 1 })
                    && killed_stewards.kill_if_alive(domain)
                {
                    stewards_at_random += 1;
                }
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        // Every death swept, by this steward or a new one (the test elects one if no
        // member did); and the steward not one the test killed (a killed steward may
        // still look alive for a moment: the round would end with it, and with one
        // election too few if it is the last).
        while !is_quiet(domain, parent.holder()) || killed_stewards.0.contains(&domain.steward()) {
            assert!(
                Instant::now() < deadline,
                "round {round}: never quiet\n{}",
                story.dump(&killed_stewards, Where::AndWhereEachWaits)
            );
            if killed_stewards.kill_if_stopped(domain) {
                stewards_in_sweeps += 1;
            }
            if let Err(e) = parent.ensure_steward() {
                panic!(
                    "round {round}: no steward: {e}\n{}",
                    story.dump(&killed_stewards, Where::AndWhereEachWaits)
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        domain.set_steward_stop_at(0);
        check_all(domain);
    }
    let stewards = stewards_in_sweeps + stewards_at_random;
    eprintln!(
        "read and steward kill test: {} kills ({killed} members, {stewards} stewards: \
         {stewards_in_sweeps} in a sweep, {stewards_at_random} at random), {finished} \
         members finished, 0 wrong bytes, {} elections, {:.1} s; the finished: {totals:?}",
        killed + stewards,
        domain.elections(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        killed >= u64::from(rounds),
        "member 0 dies in every round: {killed} (FOLIO_SEED={seed})"
    );
    assert!(
        finished >= u64::from(rounds),
        "too few survivors: {finished}"
    );
    if rounds >= STEWARD_ROUNDS {
        assert!(
            stewards_in_sweeps > 0 && stewards_at_random > 0,
            "the steward was killed in a sweep {stewards_in_sweeps} times, at random \
             {stewards_at_random} times (FOLIO_SEED={seed})"
        );
    }
    assert_eq!(
        domain.elections(),
        1 + stewards,
        "one election per steward killed (FOLIO_SEED={seed})"
    );
    assert!(totals.reclaimed > 0 && totals.hits > 0, "{totals:?}");
    reclaim_everything(domain, parent.holder());
    drop(cleanup);
    parent.detach();
}

/// Microseconds since the epoch (the steward trace's clock).
fn now_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// Words per member of the steward kill tests: tests_read.rs's `REPORT_WORDS` (its holder,
/// wrong bytes, done, counters), then the step word (`Traced`) and how its attach failed
/// (`AttachFailure`).
const MEMBER_WORDS: usize = REPORT_WORDS + 2;
const STEP_WORD: usize = REPORT_WORDS;
const ATTACH_WORD: usize = REPORT_WORDS + 1;

/// The steps a `Run` is asked about, in a fixed order: the step word's code is the index
/// here (`STEP_UNKNOWN` for a step added since).
const STEPS: [Step; 13] = [
    Step::Locked,
    Step::TookOver,
    Step::Redone,
    Step::Published,
    Step::Stored,
    Step::Cleared,
    Step::Unlocked,
    Step::Attached,
    Step::Recorded,
    Step::Copying,
    Step::Found,
    Step::Walked,
    Step::Reading,
];
const STEP_UNKNOWN: u64 = 0xff;

/// A member's lever that writes in its step word how many steps it has been asked about
/// and the last one (`STEPS`' index in the low byte), then stops as `StopAt` does (at its
/// `die_at`-th step): a failing round's dump says where each killed member was.
struct Traced<'w> {
    stop: StopAt,
    word: &'w crate::primitive::AtomicU64,
    count: Cell<u64>,
}

impl AtStep for Traced<'_> {
    fn at(&self, member: &Member, step: Step) -> Result<(), Died> {
        let n = self.count.get() + 1;
        self.count.set(n);
        let code = STEPS
            .iter()
            .position(|s| *s == step)
            .map_or(STEP_UNKNOWN, |i| i as u64);
        self.word.store((n << 8) | code, Ordering::Release);
        self.stop.at(member, step)
    }
}

/// How a member's attach failed (its attach word; 0: it did not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AttachFailure {
    /// "every slot of the domain is taken".
    Full = 1,
    /// No steward answered in time.
    TimedOut = 2,
    /// Anything else.
    Other = 3,
}

/// How a member of a round ended, as the test saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Running,
    /// Stopped by its lever and killed.
    Killed,
    Finished,
    /// Exited with this wait status.
    Failed(i32),
}

/// A member of a round: its process, where its lever stops it, how it ended.
#[derive(Clone, Copy, Debug)]
struct MemberSeen {
    pid: libc::pid_t,
    die_at: Option<u64>,
    ending: Ending,
}

/// What a failing dump shows besides the slots and the stewards' trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Where {
    /// The slots, the members, the trace.
    Slots,
    /// And where each running member and the steward wait (`/proc/<pid>/wchan`, `stack`):
    /// a hang.
    AndWhereEachWaits,
}

/// What the test knows of a round, printed when the round fails: each slot with its
/// record and the process it names (the test, a member of the round and how it ended, a
/// steward: alive, stopped, a zombie or gone), each member's lever and last step, the
/// killed stewards, the lever, and the stewards' trace since the round began (steward.rs,
/// `Trace`). A leaked slot shows as one that no live process holds and no steward sweeps;
/// a pile-up as slots held by dead processes the trace shows marked and being swept.
struct RoundStory<'a> {
    config: &'a DomainConfig,
    domain: &'a super::domain::Domain,
    seed: u64,
    round: u32,
    death: StewardDeath,
    /// When the round began (`now_us`).
    since_us: u128,
    members: Vec<MemberSeen>,
    words: &'a [crate::primitive::AtomicU64],
}

impl RoundStory<'_> {
    fn dump(&self, killed: &Killed, what: Where) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let domain = self.domain;
        let steward = domain.steward();
        let _ = writeln!(
            out,
            "--- round {} (FOLIO_SEED={}), steward death {:?}; the steward: pid {} ({}); \
             {} elections; killed stewards {:?}; the lever at {}",
            self.round,
            self.seed,
            self.death,
            steward.pid,
            process_state(steward.pid, Some(steward.start)),
            domain.elections(),
            killed.0.iter().map(|id| id.pid).collect::<Vec<_>>(),
            domain.steward_stop_at(),
        );
        let (slots, records) = (domain.slots(), domain.records());
        for i in 0..slots.slot_count() {
            let (state, holder) = slots.state(SlotIndex(i));
            let record = records.read(holder);
            let who = record.map_or("no complete record".to_string(), |id| {
                format!(
                    "pid {} {} ({})",
                    id.pid,
                    self.who(id, killed),
                    process_state(id.pid, Some(id.start))
                )
            });
            let _ = writeln!(
                out,
                "slot {i}: {state:?} generation {}: {who}",
                holder.generation
            );
        }
        for (i, m) in self.members.iter().enumerate() {
            let words = &self.words[MEMBER_WORDS * i..MEMBER_WORDS * (i + 1)];
            let holder = words[0].load(Ordering::Acquire);
            let step = words[STEP_WORD].load(Ordering::Acquire);
            let attach = words[ATTACH_WORD].load(Ordering::Acquire);
            let _ = writeln!(
                out,
                "member {i}: pid {}, {:?}, lever at {:?}, slot {}, {} steps, the last {}, \
                 attach failure {attach} ({})",
                m.pid,
                m.ending,
                m.die_at,
                if holder == 0 {
                    "none yet".to_string()
                } else {
                    format!("{:?}", Holder::from_word(holder))
                },
                step >> 8,
                STEPS
                    .get((step & 0xff) as usize)
                    .map_or("none".to_string(), |s| format!("{s:?}")),
                process_state(m.pid as u32, None),
            );
            if what == Where::AndWhereEachWaits && m.ending == Ending::Running {
                out.push_str(&where_it_waits(m.pid as u32));
            }
        }
        if what == Where::AndWhereEachWaits && steward.pid != 0 {
            let _ = writeln!(out, "the steward {}:", steward.pid);
            out.push_str(&where_it_waits(steward.pid));
        }
        let trace = std::fs::read_to_string(Trace::path(self.config)).unwrap_or_default();
        let lines: Vec<&str> = trace
            .lines()
            .filter(|line| {
                line.split(' ')
                    .next()
                    .and_then(|t| t.parse::<u128>().ok())
                    .is_some_and(|t| t >= self.since_us)
            })
            .collect();
        let _ = writeln!(
            out,
            "the stewards' trace since the round began ({} lines, the last 300):",
            lines.len()
        );
        for line in lines.iter().skip(lines.len().saturating_sub(300)) {
            let _ = writeln!(out, "  {line}");
        }
        out
    }

    /// Who the process `id` is to this round.
    fn who(&self, id: ProcessId, killed: &Killed) -> String {
        if id.pid == std::process::id() {
            return "the test".into();
        }
        if let Some(i) = self.members.iter().position(|m| m.pid as u32 == id.pid) {
            return format!("member {i}");
        }
        if killed.0.contains(&id) {
            return "a steward the test killed".into();
        }
        if self.domain.steward() == id {
            return "the steward".into();
        }
        "not of this round".into()
    }
}

/// The state letter of `/proc/<pid>/stat` (R, S, D, T, Z...), if that process is there and
/// has `start` as its start time; "gone" else.
fn process_state(pid: u32, start: Option<u64>) -> String {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return "gone".into();
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return "gone".into();
    };
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    let started = fields.get(19).and_then(|s| s.parse::<u64>().ok());
    if start.is_some() && started != start {
        return "gone (pid reused)".into();
    }
    fields.first().map_or("gone".into(), |s| (*s).to_string())
}

/// Where the process `pid` waits: its kernel wait channel and stack, and its system call.
fn where_it_waits(pid: u32) -> String {
    let read = |what: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/{what}")).unwrap_or_else(|e| format!("({e})"))
    };
    format!(
        "    wchan {}; syscall {}    stack:\n{}",
        read("wchan"),
        read("syscall"),
        read("stack")
            .lines()
            .take(12)
            .map(|l| format!("      {l}\n"))
            .collect::<String>()
    )
}

/// A member of the read kill test (tests_read.rs's): attaches, reads `KILL_READS` random
/// ranges of the files with every byte checked (stopping itself at its `die_at`-th step),
/// reports in `words` (`MEMBER_WORDS`: its holder, wrong bytes, done, counters, its last
/// step, how its attach failed), detaches.
fn read_member(
    config: &DomainConfig,
    paths: &[PathBuf],
    die_at: Option<u64>,
    seed: u64,
    words: &[crate::primitive::AtomicU64],
    start: Start,
) {
    let member = match Member::attach(config) {
        Ok(member) => member,
        Err(e) => {
            let failure = match e.kind() {
                std::io::ErrorKind::Other => AttachFailure::Full,
                std::io::ErrorKind::TimedOut => AttachFailure::TimedOut,
                _ => AttachFailure::Other,
            };
            words[ATTACH_WORD].store(failure as u64, Ordering::Release);
            panic!("attach: {e}");
        }
    };
    words[0].store(member.holder().word(), Ordering::Release);
    if start == Start::StoppedAfterAttach {
        // SAFETY: raise has no memory-safety preconditions.
        unsafe { libc::raise(libc::SIGSTOP) };
    }
    let traced = Traced {
        stop: StopAt::new(die_at),
        word: &words[STEP_WORD],
        count: Cell::new(0),
    };
    let lever = MemberLever::new(&member, traced);
    {
        let reader = SharedReader::new(&member, &lever, 2);
        let files: Vec<_> = paths.iter().map(|p| reader.open(p).unwrap()).collect();
        let expected: Vec<Vec<u8>> = (0..KILL_FILES).map(|f| stamped(f, kill_len(f))).collect();
        let mut rng = Rng(seed);
        let mut wrong = 0;
        for _ in 0..KILL_READS {
            let f = rng.below(KILL_FILES) as usize;
            let offset = rng.below(kill_len(f as u64));
            let len = 1 + rng.below(3 * 4096) as usize;
            wrong += read_and_compare(&reader, &files[f], &expected[f], offset, len);
        }
        words[1].store(wrong as u64, Ordering::Release);
        assert_eq!(wrong, 0, "wrong bytes read");
        report(&words[3..REPORT_WORDS], reader.counters());
        for file in files {
            reader.close(file).unwrap();
        }
    }
    words[2].store(1, Ordering::Release);
    member.detach();
}

/// When a read kill test's member starts reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    /// Once attached.
    AtOnce,
    /// Stopped (`SIGSTOP`) once attached, until the test continues it (the test stops
    /// the steward meanwhile: a stopped steward answers no attach).
    StoppedAfterAttach,
}

fn add(totals: &mut ReadCounters, c: ReadCounters) {
    totals.hits += c.hits;
    totals.misses += c.misses;
    totals.preads += c.preads;
    totals.conflicts += c.conflicts;
    totals.reclaims += c.reclaims;
    totals.reclaimed += c.reclaimed;
    totals.uncached += c.uncached;
}

/// A member killed while the steward is stopped, then the steward killed: the next
/// member's attach finds no steward and starts one, whose census marks and sweeps both
/// (the member, at the step its lever chose: a lock hold, a lease or a pin; and the old
/// steward's own slot). The next member then reads every page of the files with every
/// byte checked, the domain ends quiet, every structure checks, and a reclaim of
/// everything frees every frame. Each of 6 steps of the member's work in turn.
#[test]
fn a_member_killed_while_the_steward_is_stopped_is_swept_by_the_next_steward() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..KILL_FILES)
        .map(|f| write_file(data.path(), f, kill_len(f)))
        .collect();
    let config = config(home.path(), "read-stopped-steward", 12, 40);
    let parent = Member::attach(&config).unwrap();
    let domain = parent.domain();
    let member_words = SharedRegion::new(2 * MEMBER_WORDS);
    let (dying, next) = member_words.words().split_at(MEMBER_WORDS);
    let mut cleanup = Cleanup {
        children: Vec::new(),
        domain,
    };
    for (i, die_at) in [3u64, 17, 40, 95, 160, 333].into_iter().enumerate() {
        let (config, paths) = (&config, &paths);
        let pid = fork(move || {
            let start = Start::StoppedAfterAttach;
            read_member(config, paths, Some(die_at), 45 + die_at, dying, start)
        });
        cleanup.children.push(pid);
        let status = wait_for(pid, libc::WUNTRACED);
        assert!(libc::WIFSTOPPED(status), "not attached: {status:#x}");
        let old = domain.steward();
        assert!(old.open().is_some(), "a steward runs");
        // SAFETY: kill has no memory-safety preconditions; the steward checked by its
        // start time just above, the member is our child.
        unsafe {
            assert_eq!(libc::kill(old.pid as libc::pid_t, libc::SIGSTOP), 0);
            assert_eq!(libc::kill(pid, libc::SIGCONT), 0);
        }
        let status = wait_for(pid, libc::WUNTRACED);
        assert!(
            libc::WIFSTOPPED(status),
            "step {die_at}: the member did not stop: {status:#x}"
        );
        cleanup.kill(pid);
        let dead = Holder::from_word(dying[0].load(Ordering::Acquire));
        assert_eq!(
            domain.slots().state(dead.slot),
            (super::slot::SlotState::Live, dead),
            "nobody marked it: the steward is stopped"
        );
        sigkill(old.pid);
        let pid = fork(move || read_member(config, paths, None, 7, next, Start::AtOnce));
        cleanup.children.push(pid);
        exited_ok(pid, "the next member");
        cleanup.children.retain(|p| *p != pid);
        assert_eq!(next[1].load(Ordering::Acquire), 0, "wrong bytes");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !is_quiet(domain, parent.holder()) {
            assert!(
                std::time::Instant::now() < deadline,
                "step {die_at}: never quiet"
            );
            parent.ensure_steward().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_ne!(domain.steward(), old, "a new steward");
        assert_eq!(
            domain.elections(),
            2 + i as u64,
            "one election per steward killed"
        );
        check_all(domain);
    }
    reclaim_everything(domain, parent.holder());
    drop(cleanup);
    parent.detach();
}

// ---------------------------------------------------------------- a window in flight
//
// queue.rs, "In flight": a miss inserts its frames before its `preadv`, and a reader that
// finds one waits for it instead of reading the page again. The levers below stop (or
// kill) the first reader with its window inserted and not read (`Step::Reading`), so that
// the second finds it in flight: no sleep decides the order.

/// The in-flight tests' file: 64 pages.
pub(super) const FLIGHT_LEN: u64 = 64 * 4096;
/// Words per member in the in-flight tests' report: 7 counters, duplicates, waits, its
/// wrong bytes, done.
pub(super) const FLIGHT_WORDS: usize = 11;

/// The in-flight tests' world: a domain of 256 frames named `name` in a home of its own,
/// and the 64-page file. Its fields drop in order: the home last, once its stewards end.
pub(super) struct FlightWorld {
    pub(super) config: DomainConfig,
    pub(super) path: PathBuf,
    _data: tempfile::TempDir,
    _home: DomainHome,
}

impl FlightWorld {
    pub(super) fn new(name: &str) -> FlightWorld {
        let home = DomainHome::new();
        let data = tempfile::tempdir().unwrap();
        FlightWorld {
            config: config(home.path(), name, 8, 256),
            path: write_file(data.path(), 0, FLIGHT_LEN),
            _data: data,
            _home: home,
        }
    }
}
/// How long the test waits for a state another process reaches (a bound, not a timing).
const FLIGHT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// A member's lever that stops its process (`SIGSTOP`) once, at its first
/// `Step::Reading`: its first window is in the index, in flight, not read. The test
/// continues it (`SIGCONT`) or kills it there.
#[derive(Default)]
struct StopAtReading {
    stopped: Cell<bool>,
}

impl AtStep for StopAtReading {
    fn at(&self, _member: &Member, step: Step) -> Result<(), Died> {
        if step == Step::Reading && !self.stopped.get() {
            self.stopped.set(true);
            // SAFETY: raise has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
        Ok(())
    }
}

/// How a member of the in-flight tests reads.
#[derive(Clone, Copy, Debug)]
pub(super) enum Flight {
    /// Scans the file, stopped once at its first `Step::Reading` (`StopAtReading`).
    StopAtReading,
    /// Reads the file's first page only (its first window), stopped at its `n`-th step
    /// for the test to kill there (`StopAt`).
    FirstPageStoppedAt(u64),
    /// Scans the file, never stopped.
    Scan,
}

/// A member of the in-flight tests: attaches, reads `path` as `how` says through a reader
/// whose windows are up to 16 pages (4 KiB reads), reports in `words` (`FLIGHT_WORDS`),
/// detaches.
pub(super) fn flight_member(
    config: &DomainConfig,
    path: &Path,
    words: &[crate::primitive::AtomicU64],
    how: Flight,
) {
    let member = Member::attach(config).expect("attach");
    let stop = StopAtReading::default();
    let (wrong, counters) = match how {
        Flight::StopAtReading => {
            let run = MemberLever::new(&member, &stop);
            let read = scan_flight(&member, &run, path, FLIGHT_LEN);
            assert!(stop.stopped.get(), "the lever never stopped the reader");
            read
        }
        Flight::FirstPageStoppedAt(n) => {
            let run = MemberLever::new(&member, StopAt::new(Some(n)));
            scan_flight(&member, &run, path, 4096)
        }
        Flight::Scan => scan_flight(&member, &member, path, FLIGHT_LEN),
    };
    report(&words[..7], counters);
    words[7].store(counters.duplicates, Ordering::Release);
    words[8].store(counters.waits, Ordering::Release);
    words[9].store(wrong as u64, Ordering::Release);
    words[10].store(1, Ordering::Release);
    member.detach();
}

/// Reads `len` bytes of `path` from its start in 4 KiB reads through `member`'s reader
/// run by `run` (windows of up to 16 pages): the wrong bytes and the reader's counters.
fn scan_flight<R: Run>(member: &Member, run: &R, path: &Path, len: u64) -> (usize, ReadCounters) {
    let reader = SharedReader::new(member, run, 4);
    let file = reader.open(path).unwrap();
    file.set_readahead_pages(16);
    let expected = stamped(0, FLIGHT_LEN);
    let wrong = (0..len)
        .step_by(4096)
        .map(|at| read_and_compare(&reader, &file, &expected, at, 4096))
        .sum();
    let counters = reader.counters();
    reader.close(file).unwrap();
    (wrong, counters)
}

/// What a member of the in-flight tests reported: its counters (with `duplicates` and
/// `waits`), its wrong bytes, whether it finished.
fn flight_reported(words: &[crate::primitive::AtomicU64]) -> (ReadCounters, u64, bool) {
    let mut counters = reported(&words[..7]);
    counters.duplicates = words[7].load(Ordering::Acquire);
    counters.waits = words[8].load(Ordering::Acquire);
    (
        counters,
        words[9].load(Ordering::Acquire),
        words[10].load(Ordering::Acquire) == 1,
    )
}

/// The frame an index of `member`'s domain names at page 0 (the test's one file).
fn frame_of_page_zero(member: &Member) -> super::stack::Frame {
    let folios = cached_folios(member);
    let Some(&(_, _, frame)) = folios.iter().find(|f| f.1 == 0) else {
        panic!("page 0 is not cached: {folios:?}");
    };
    super::stack::Frame(frame as u32)
}

/// Waits (a bound, not a timing) until `done` holds.
pub(super) fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + FLIGHT_DEADLINE;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Reader A scans a 64-page file and is stopped by its lever with its first window (2
/// pages) inserted in flight and not read; reader B, another process, then scans the same
/// file: its first read finds page 0 in flight and parks (the test sees B's announcement,
/// WAITERS, on the frame's GEN word before it continues A: no sleep decides the order).
/// A then reads its window, publishes it and wakes B, which copies the page from A's
/// frame. Both scan on together. Asserted: every byte right in both; **no page read
/// twice** (`duplicates` 0 in both, nothing uncached) and every page cached once (the
/// queue holds 64 frames, the index 64 pages); B waited at least once. Before the
/// in-flight protocol, B would have read A's window again (and two processes scanning one
/// file at once read it nearly twice: docs/sharing.md).
#[test]
fn a_window_in_flight_is_waited_for_by_another_process_and_never_read_twice() {
    let world = FlightWorld::new("flight-wait");
    let (config, path) = (&world.config, &world.path);
    let parent = Member::attach(config).unwrap();
    let words = SharedRegion::new(2 * FLIGHT_WORDS);
    let (a_words, b_words) = words.words().split_at(FLIGHT_WORDS);
    let a = fork(|| flight_member(config, path, a_words, Flight::StopAtReading));
    let status = wait_for(a, libc::WUNTRACED);
    assert!(libc::WIFSTOPPED(status), "A: status {status:#x}");
    let queue = parent.domain().queue();
    let window = cached_folios(&parent);
    assert!(!window.is_empty(), "A's first window is inserted");
    for &(_, _, frame) in &window {
        assert!(queue.is_in_flight(super::stack::Frame(frame as u32)));
    }
    let page_zero = frame_of_page_zero(&parent);
    let b = fork(|| flight_member(config, path, b_words, Flight::Scan));
    wait_until("B waits for page 0", || queue.is_waited_for(page_zero));
    // SAFETY: continues our own stopped child.
    assert_eq!(unsafe { libc::kill(a, libc::SIGCONT) }, 0);
    exited_ok(a, "A");
    exited_ok(b, "B");
    let ((ra, a_wrong, a_done), (rb, b_wrong, b_done)) =
        (flight_reported(a_words), flight_reported(b_words));
    eprintln!("in flight: A {ra:?}\nin flight: B {rb:?}");
    assert!(a_done && b_done, "both finish");
    assert_eq!((a_wrong, b_wrong), (0, 0), "wrong bytes");
    assert_eq!((ra.duplicates, rb.duplicates), (0, 0), "a page read twice");
    assert_eq!((ra.uncached, rb.uncached), (0, 0), "a page read uncached");
    assert!(rb.waits >= 1, "B never waited: {rb:?}");
    assert_eq!(cached_folios(&parent).len(), 64);
    assert_eq!(queue.count(), 64, "a frame beyond the file's 64 pages");
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// As above, but A is killed where it stopped (its window inserted in flight, not read)
/// once B waits for page 0: the steward's sweep takes A's in-flight frames out of the
/// index and wakes B (queue.rs, "In flight", the death), which misses and reads the pages
/// itself. Asserted: B finishes, every byte right, no page read twice, B waited; the
/// domain quiet again, every structure checks, and the index names no frame of A's
/// window but B's.
#[test]
fn a_reader_killed_with_its_window_in_flight_leaves_its_waiter_to_read_it() {
    let world = FlightWorld::new("flight-kill");
    let (config, path) = (&world.config, &world.path);
    let parent = Member::attach(config).unwrap();
    let words = SharedRegion::new(2 * FLIGHT_WORDS);
    let (a_words, b_words) = words.words().split_at(FLIGHT_WORDS);
    let a = fork(|| flight_member(config, path, a_words, Flight::StopAtReading));
    let status = wait_for(a, libc::WUNTRACED);
    assert!(libc::WIFSTOPPED(status), "A: status {status:#x}");
    let queue = parent.domain().queue();
    let window: Vec<u64> = cached_folios(&parent).iter().map(|f| f.2).collect();
    let page_zero = frame_of_page_zero(&parent);
    let b = fork(|| flight_member(config, path, b_words, Flight::Scan));
    wait_until("B waits for page 0", || queue.is_waited_for(page_zero));
    kill(a);
    exited_ok(b, "B");
    let (rb, b_wrong, b_done) = flight_reported(b_words);
    eprintln!("in flight, A killed: B {rb:?}");
    assert!(b_done, "B finishes");
    assert_eq!(b_wrong, 0, "wrong bytes");
    assert_eq!((rb.duplicates, rb.uncached), (0, 0), "B: {rb:?}");
    assert!(
        rb.waits >= 1 && rb.misses >= 1,
        "B waited, then missed: {rb:?}"
    );
    wait_until("the domain is quiet", || {
        is_quiet(parent.domain(), parent.holder())
    });
    check_all(parent.domain());
    let cached = cached_folios(&parent);
    assert_eq!(cached.len(), 64, "B cached every page");
    assert!(
        cached.iter().all(|f| !window.contains(&f.2)
            || !queue.is_in_flight(super::stack::Frame(f.2 as u32))),
        "an in-flight frame of the dead A is still indexed: {cached:?}"
    );
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// Reader A reads the first page of a 64-page file (its first window: 2 pages, handed
/// over in flight, inserted, read, published) and is killed at its `n`-th step, for every
/// `n` until it finishes. Where A stopped with page 0 in its index in flight (its steps
/// between the insertion and the publication), reader B starts first and A is killed
/// only once B waits for page 0 (WAITERS on its GEN word), so that B is woken by the
/// steward's sweep; elsewhere B scans after the death. Asserted each round: B finishes
/// with every byte right and no page read twice; B waited in every round it was started
/// to wait; the domain quiet again, every structure checks; then everything reclaimed for
/// the next round.
#[test]
fn a_reader_killed_at_each_step_of_its_window_leaves_the_next_reader_every_page() {
    let world = FlightWorld::new("flight-steps");
    let (config, path) = (&world.config, &world.path);
    let parent = Member::attach(config).unwrap();
    let words = SharedRegion::new(2 * FLIGHT_WORDS);
    let (a_words, b_words) = words.words().split_at(FLIGHT_WORDS);
    let (mut killed, mut waited, mut waiting) = (0, 0, 0);
    for n in 0..1000 {
        for word in words.words() {
            word.store(0, Ordering::Relaxed);
        }
        let a = fork(|| flight_member(config, path, a_words, Flight::FirstPageStoppedAt(n)));
        let status = wait_for(a, libc::WUNTRACED);
        if !libc::WIFSTOPPED(status) {
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "A: status {status:#x}"
            );
            break;
        }
        let queue = parent.domain().queue();
        let in_flight = cached_folios(&parent)
            .iter()
            .find(|f| f.1 == 0)
            .map(|f| super::stack::Frame(f.2 as u32))
            .filter(|&frame| queue.is_in_flight(frame));
        let b = match in_flight {
            Some(page_zero) => {
                let b = fork(|| flight_member(config, path, b_words, Flight::Scan));
                wait_until("B waits for page 0", || queue.is_waited_for(page_zero));
                kill(a);
                b
            }
            None => {
                kill(a);
                fork(|| flight_member(config, path, b_words, Flight::Scan))
            }
        };
        killed += 1;
        exited_ok(b, "B");
        let (rb, b_wrong, b_done) = flight_reported(b_words);
        assert!(b_done, "B finishes (A killed at step {n})");
        assert_eq!(b_wrong, 0, "wrong bytes (A killed at step {n})");
        assert_eq!((rb.duplicates, rb.uncached), (0, 0), "step {n}: {rb:?}");
        if in_flight.is_some() {
            assert!(
                rb.waits >= 1,
                "B never waited (A killed at step {n}): {rb:?}"
            );
            waiting += 1;
        }
        waited += u32::from(rb.waits > 0);
        wait_until("the domain is quiet", || {
            is_quiet(parent.domain(), parent.holder())
        });
        check_all(parent.domain());
        reclaim_everything(parent.domain(), parent.holder());
    }
    eprintln!(
        "in flight: A killed at {killed} steps; B waited in {waited} rounds, in {waiting} \
         of them for A's page in flight at its death"
    );
    assert!(killed > 20, "A's window has more steps than {killed}");
    assert!(waiting > 0, "A was never killed with page 0 in flight");
    check_all(parent.domain());
    parent.detach();
}

/// A member's lever that panics its reader's thread once, at its first `Step::Reading`
/// (its first window in the index, in flight, not read: a bug between a miss's insertion
/// and its publication, in a process that lives on, so no sweep), and only once another
/// member waits for page 0's frame (WAITERS on its GEN word: no sleep decides the order).
#[derive(Default)]
struct PanicAtReading {
    /// The lever fired (the reader is at `Step::Reading`).
    fired: std::sync::atomic::AtomicBool,
}

impl AtStep for PanicAtReading {
    fn at(&self, member: &Member, step: Step) -> Result<(), Died> {
        use std::sync::atomic::Ordering::AcqRel;
        if step == Step::Reading && !self.fired.swap(true, AcqRel) {
            let queue = member.domain().queue();
            let page_zero = frame_of_page_zero(member);
            wait_until("the other member waits for page 0", || {
                queue.is_waited_for(page_zero)
            });
            // A panic without the panic hook (whose report, a backtrace under
            // RUST_BACKTRACE, takes as long as it takes): the unwind alone is timed.
            std::panic::resume_unwind(Box::new("the lever panics the reader at Step::Reading"));
        }
        Ok(())
    }
}

/// Reader A (a thread, member A) misses page 0 of a 64-page file and its lever panics
/// its thread at `Step::Reading` (its first window, 2 pages, inserted in flight and not
/// read), once reader B (member B, as another process would be) waits for page 0; the
/// test catches the panic (`catch_unwind`), and A's process lives on: no sweep. A's miss
/// unwinds as a failed read ends (read.rs, "Unwinding": its frames out of the index,
/// their waiters woken, its frames freed), so B looks page 0 up again at once, misses and
/// reads it itself. Asserted: A panicked; B's read of page 0 returns its bytes in under
/// 1 s (broken, `unwound_reads_are_waited_for_without_the_guard`: B parks 1,000 x 10 ms,
/// ~10 s, then reads the page uncached); B waited, read no page twice and nothing
/// uncached, then scans the file, every byte right; the queue holds B's 64 frames and no
/// other (A's freed), every structure checks, and a reclaim frees every frame.
#[test]
fn a_reader_that_panics_with_its_window_in_flight_leaves_its_waiter_to_read_it_at_once() {
    panic_with_a_window_in_flight(Flaw::None);
}

/// The test above with the unwind guard broken (`Flaw::UnwindUnguarded`: it does
/// nothing): B's first read waits about 10 s, and the test fails on it. Takes ~10 s.
#[test]
fn unwound_reads_are_waited_for_without_the_guard() {
    let message = failure_of("the unguarded unwind passed", || {
        panic_with_a_window_in_flight(Flaw::UnwindUnguarded)
    });
    eprintln!("unguarded: caught: {message}");
    assert!(message.contains("B waited"), "failed otherwise: {message}");
}

/// The panic test, its guard as `flaw` says.
fn panic_with_a_window_in_flight(flaw: Flaw) {
    use std::sync::atomic::Ordering::Acquire;
    let world = FlightWorld::new("flight-panic");
    let (config, path) = (&world.config, &world.path);
    let (a, b) = (
        Member::attach(config).unwrap(),
        Member::attach(config).unwrap(),
    );
    let lever = PanicAtReading::default();
    let run = MemberLever::new(&a, &lever).with_flaw(flaw);
    let expected = stamped(0, FLIGHT_LEN);
    let (a_panicked, rb, wrong) = std::thread::scope(|s| {
        let reader_a = s.spawn(|| {
            let reader = SharedReader::new(&a, &run, 4);
            let file = reader.open(path).unwrap();
            file.set_readahead_pages(16);
            let mut buf = vec![0; 4096];
            let read = std::panic::AssertUnwindSafe(|| reader.read_at(&file, &mut buf, 0));
            let panicked = std::panic::catch_unwind(read).is_err();
            reader.close(file).unwrap();
            panicked
        });
        wait_until("A is at Step::Reading", || lever.fired.load(Acquire));
        let reader = SharedReader::new(&b, &b, 4);
        let file = reader.open(path).unwrap();
        file.set_readahead_pages(16);
        let started = std::time::Instant::now();
        let mut wrong = read_and_compare(&reader, &file, &expected, 0, 4096);
        let first_read = started.elapsed();
        eprintln!("in flight, A panicked: B's first read {first_read:?}");
        assert!(
            first_read < std::time::Duration::from_secs(1),
            "B waited {first_read:?} for the page A's panic left in flight"
        );
        wrong += (4096..FLIGHT_LEN)
            .step_by(4096)
            .map(|at| read_and_compare(&reader, &file, &expected, at, 4096))
            .sum::<usize>();
        let counters = reader.counters();
        reader.close(file).unwrap();
        (reader_a.join().unwrap(), counters, wrong)
    });
    eprintln!("in flight, A panicked: B {rb:?}");
    assert!(a_panicked, "the lever never panicked A");
    assert_eq!(wrong, 0, "wrong bytes");
    assert!(
        rb.waits >= 1 && rb.misses >= 1,
        "B waited, then missed: {rb:?}"
    );
    assert_eq!((rb.duplicates, rb.uncached), (0, 0), "B: {rb:?}");
    let queue = a.domain().queue();
    assert_eq!(cached_folios(&a).len(), 64, "B cached every page");
    assert_eq!(queue.count(), 64, "a frame of A's is still queued");
    check_all(a.domain());
    b.detach();
    reclaim_everything(a.domain(), a.holder());
    a.detach();
}
