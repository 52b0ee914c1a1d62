//! The shared file table (issue 45 step 6's first part, files.rs): against a model
//! (proptest), with a death at every step in one process (and its broken variant), and
//! across real processes `SIGKILL`ed at lever-chosen steps and swept by the domain's
//! steward. The loom model of the same code is in `tests/loom_shared.rs`; the cost of an
//! open+close pair and a lookup beside `MappingTable` is `an_open_close_pair_costs`
//! (ignored: run it by hand, docs/sharing.md).

use super::files::{FileId, FileKey, FileTable, Opened, RecordCensus, Removal, Stamp};
use super::slot::SlotTable;
use super::terms::Unkillable;
use super::tests::{seed_from_env, DomainHome, MemberLever, Rng, StopAt};
use super::tests::{Death, DieAt};
use super::{Died, Flaw, Holder, Run, Step, Word};
use crate::primitive::AtomicU64;
use proptest::prelude::*;
use std::cell::Cell;
use std::collections::HashMap;

const SLOTS: u16 = 16;
const TABLE: Word = Word(16);

fn region_for(capacity: u32) -> Vec<AtomicU64> {
    (0..TABLE.0 + FileTable::words(capacity, SLOTS))
        .map(|_| AtomicU64::new(0))
        .collect()
}

fn views(region: &[AtomicU64], capacity: u32) -> (SlotTable<'_>, FileTable<'_>) {
    (
        SlotTable::new(region, Word(0), SLOTS),
        FileTable::new(region, TABLE, capacity, SLOTS),
    )
}

fn key(n: u64) -> FileKey {
    FileKey {
        dev: 7,
        ino: 1000 + n,
        born_ns: n * 31,
    }
}

fn opened(o: Opened) -> FileId {
    match o {
        Opened::Open { id, .. } => id,
        other => panic!("not opened: {other:?}"),
    }
}

#[test]
fn one_record_per_identity_whoever_opens_it() {
    let region = region_for(8);
    let (slots, table) = views(&region, 8);
    let (a, b) = (
        slots.attach(Flaw::None).unwrap(),
        slots.attach(Flaw::None).unwrap(),
    );
    let run = &Unkillable;
    let x = opened(table.open(key(1), 10, 5, a, &slots, run).unwrap());
    let y = opened(table.open(key(1), 10, 5, b, &slots, run).unwrap());
    assert_eq!(x, y);
    assert_eq!(
        table.open(key(1), 10, 6, b, &slots, run).unwrap(),
        Opened::Open {
            id: x,
            stamp: Stamp::Changed
        }
    );
    let census = table.check(&slots).unwrap();
    assert_eq!(census.len(), 1);
    assert_eq!(census[0].openers, vec![(a.slot.0, 1), (b.slot.0, 2)]);
    assert_eq!(table.remove(x, a, &slots, run), Ok(Removal::InUse));
    // The size word: one process's extension is the other's next read.
    assert_eq!(table.extend_size(x, 4096), 4096);
    assert_eq!(table.extend_size(x, 100), 4096, "never lowered");
    assert_eq!(table.size(x), Some(4096));
    table.set_size(x, 17);
    assert_eq!(table.lookup(&key(1)).map(|f| f.size), Some(17));
    for p in [a, b, b] {
        table.close(x, p, &slots, run).unwrap();
    }
    assert_eq!(
        table.lookup(&key(1)).map(|f| f.id),
        Some(x),
        "kept after the last close"
    );
    assert_eq!(table.remove(x, a, &slots, run), Ok(Removal::Done));
    assert_eq!(table.remove(x, a, &slots, run), Ok(Removal::Gone));
    assert_eq!(table.lookup(&key(1)), None);
    assert_eq!(table.size(x), None);
    let z = opened(table.open(key(1), 3, 5, a, &slots, run).unwrap());
    assert_ne!(z, x, "a new generation: the old id names nothing");
    assert_eq!(table.check(&slots).unwrap()[0].size, 3);
}

#[test]
fn a_lookup_reads_garbage_without_a_panic() {
    let region = region_for(8);
    let (_, table) = views(&region, 8);
    for (i, word) in region.iter().enumerate() {
        word.store(
            (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            crate::primitive::Ordering::Relaxed,
        );
    }
    for n in 0..100 {
        let _ = table.lookup(&key(n));
        let _ = table.size(FileId {
            index: n as u32 * 977,
            generation: 3,
        });
    }
}

/// The model: per identity, its id and each process's opens; the table's census must
/// say the same after every operation, and an open must find the id the model has.
#[test]
fn open_close_remove_lookup_follow_the_model() {
    const CAPACITY: u32 = 8;
    proptest!(ProptestConfig::with_cases(256), |(ops in proptest::collection::vec((0u8..5, 0usize..3, 0u64..12), 1..200))| {
        let region = region_for(CAPACITY);
        let (slots, table) = views(&region, CAPACITY);
        let run = &Unkillable;
        let procs: Vec<Holder> = (0..3).map(|_| slots.attach(Flaw::None).unwrap()).collect();
        // key -> (id, opens per process, size)
        let mut model: HashMap<u64, (FileId, [u16; 3], u64)> = HashMap::new();
        for (op, p, k) in ops {
            let me = procs[p];
            match op {
                0 | 1 => {
                    let got = table.open(key(k), k * 100, 1, me, &slots, run).unwrap();
                    if let Some((id, opens, _)) = model.get_mut(&k) {
                        prop_assert_eq!(got, Opened::Open { id: *id, stamp: Stamp::Same });
                        opens[p] += 1;
                    } else if model.len() == CAPACITY as usize {
                        prop_assert_eq!(got, Opened::Full);
                    } else {
                        let Opened::Open { id, .. } = got else {
                            return Err(TestCaseError::fail(format!("{got:?}")));
                        };
                        prop_assert!(model.values().all(|(other, _, _)| other.index != id.index));
                        let mut opens = [0; 3];
                        opens[p] = 1;
                        model.insert(k, (id, opens, k * 100));
                    }
                }
                2 => {
                    if let Some((id, opens, _)) = model.get_mut(&k) {
                        if opens[p] > 0 {
                            table.close(*id, me, &slots, run).unwrap();
                            opens[p] -= 1;
                        }
                    }
                }
                3 => {
                    if let Some((id, opens, _)) = model.get(&k).copied() {
                        let got = table.remove(id, me, &slots, run).unwrap();
                        if opens.iter().all(|c| *c == 0) {
                            prop_assert_eq!(got, Removal::Done);
                            model.remove(&k);
                            prop_assert_eq!(table.remove(id, me, &slots, run).unwrap(), Removal::Gone);
                        } else {
                            prop_assert_eq!(got, Removal::InUse);
                        }
                    }
                }
                _ => {
                    let found = table.lookup(&key(k));
                    match model.get_mut(&k) {
                        Some((id, opens, size)) => {
                            let found = found.expect("a quiet table's lookup finds every record");
                            prop_assert_eq!(found.id, *id);
                            prop_assert_eq!(found.size, *size);
                            if opens[p] > 0 {
                                *size = table.extend_size(*id, *size + 1);
                            }
                        }
                        None => prop_assert_eq!(found, None),
                    }
                }
            }
            let census = table.check(&slots);
            prop_assert!(census.is_ok(), "{:?}", census);
            let mut want: Vec<RecordCensus> = model
                .iter()
                .map(|(k, (id, opens, size))| RecordCensus {
                    id: *id,
                    key: key(*k),
                    size: *size,
                    openers: (0..3)
                        .filter(|i| opens[*i] > 0)
                        .map(|i| (procs[i].slot.0, opens[i]))
                        .collect(),
                })
                .collect();
            want.sort_by_key(|r| r.id.index);
            prop_assert_eq!(census.unwrap(), want);
        }
    });
}

/// A `Run` that counts its take-overs.
struct Noted {
    took_over: Cell<u32>,
    flaw: Flaw,
}

impl Run for Noted {
    fn at(&self, step: Step) -> Result<(), Died> {
        if step == Step::TookOver {
            self.took_over.set(self.took_over.get() + 1);
        }
        Ok(())
    }

    fn wait(&self, holder: Holder) {
        Unkillable.wait(holder)
    }

    fn flaw(&self) -> Flaw {
        self.flaw
    }
}

/// The dying process's work: opens a new identity (an insert), opens an identity a live
/// process has open (an adjust), opens its new one again, inserts a third, closes
/// everything, removes one record it was the last to close and tries one still open.
fn script<R: Run>(
    table: &FileTable<'_>,
    me: Holder,
    slots: &SlotTable<'_>,
    run: &R,
) -> Result<(), Died> {
    let x = opened(table.open(key(1), 10, 1, me, slots, run)?);
    let shared = opened(table.open(key(0), 10, 1, me, slots, run)?);
    let again = opened(table.open(key(1), 10, 1, me, slots, run)?);
    assert_eq!(x, again);
    table.close(x, me, slots, run)?;
    let y = opened(table.open(key(2), 10, 1, me, slots, run)?);
    table.close(shared, me, slots, run)?;
    table.close(x, me, slots, run)?;
    assert_eq!(table.remove(x, me, slots, run)?, Removal::Done);
    assert_eq!(table.remove(shared, me, slots, run)?, Removal::InUse);
    table.close(y, me, slots, run)?;
    Ok(())
}

/// Who works first after a death, in `in_one_process`.
#[derive(Clone, Copy, PartialEq)]
enum First {
    /// Another process (it takes the dead one's lock over), then the steward's sweep.
    Other,
    /// The steward's sweep (it takes the lock over), then another process.
    Steward,
}

/// In one process: a live process Q holds key 0 open; the dying process P stops at each
/// step of `script` in turn; then another process R opens and closes key 1 and key 3
/// (taking P's lock over if P held it) and the steward sweeps P, in either order. At
/// every step the table then holds key 0 open once by Q and nothing else open, its
/// invariant holds, and R's open of key 1 found the one record of key 1 if P left one.
fn in_one_process(flaw: Flaw) -> Result<(), String> {
    let (mut took_over, mut dropped, mut steps) = (0, 0, 0);
    for first in [First::Other, First::Steward] {
        for at in 0.. {
            let region = region_for(8);
            let (slots, table) = views(&region, 8);
            let steward = slots.attach(Flaw::None).unwrap();
            let q = slots.attach(Flaw::None).unwrap();
            let kept = opened(table.open(key(0), 10, 1, q, &slots, &Unkillable).unwrap());
            let p = slots.attach(Flaw::None).unwrap();
            if script(
                &table,
                p,
                &slots,
                &DieAt::new(Some(at), Death::Return, flaw),
            )
            .is_ok()
            {
                break;
            }
            steps += 1;
            assert!(slots.mark_dead(p));
            let r = slots.attach(Flaw::None).unwrap();
            let noted = Noted {
                took_over: Cell::new(0),
                flaw,
            };
            let other = |run: &Noted| {
                for k in [1, 3] {
                    let id = opened(table.open(key(k), 10, 1, r, &slots, run).unwrap());
                    table.close(id, r, &slots, run).unwrap();
                }
            };
            let sweep = |run: &Noted| {
                table
                    .sweep(p, steward, &slots, run, super::files::DeadWrites::Lost)
                    .unwrap()
            };
            if first == First::Steward {
                dropped += sweep(&noted);
                other(&noted);
            } else {
                other(&noted);
                dropped += sweep(&noted);
            }
            took_over += noted.took_over.get();
            slots.free_dead(p);
            slots.detach(r);
            let census = table.check(&slots).map_err(|e| format!("step {at}: {e}"))?;
            let open: Vec<_> = census
                .iter()
                .filter(|r| !r.openers.is_empty())
                .map(|r| (r.id, r.openers.clone()))
                .collect();
            if open != vec![(kept, vec![(q.slot.0, 1)])] {
                return Err(format!("step {at}: {census:?}"));
            }
            let keys: Vec<_> = census.iter().map(|r| r.key).collect();
            for k in [1, 3] {
                if keys.iter().filter(|x| **x == key(k)).count() != 1 {
                    return Err(format!("step {at}: key {k}: {census:?}"));
                }
            }
        }
    }
    eprintln!("{flaw:?}: {steps} deaths, {took_over} take-overs, {dropped} opens swept");
    assert!(
        took_over > steps / 2 && dropped > 0,
        "took over {took_over}, dropped {dropped}"
    );
    Ok(())
}

#[test]
fn a_death_at_every_step_leaves_a_working_table() {
    in_one_process(Flaw::None).unwrap();
}

#[test]
fn a_death_at_every_step_broken_intent_after_mutation() {
    let failed = std::panic::catch_unwind(|| in_one_process(Flaw::IntentAfterMutation));
    assert!(!matches!(failed, Ok(Ok(()))), "the flawed protocol passed");
    if let Ok(Err(e)) = failed {
        eprintln!("IntentAfterMutation caught: {e}");
    }
}

const KILL_KEYS: usize = 6;
const KILL_CHILDREN: usize = 3;
const KILL_ROUNDS: u32 = 30;
const KILL_OPS: usize = 30;
const KILL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// One operation of a child of the kill test, on identity `key(k)`.
#[derive(Clone, Copy)]
enum FileOp {
    Open(usize),
    /// A close of one of its handles on it, if it has one.
    Close(usize),
    /// A removal of the record it last opened of it (in use, gone or removed: any).
    Remove(usize),
}

fn file_ops(rng: &mut Rng) -> Vec<FileOp> {
    (0..KILL_OPS)
        .map(|_| {
            let k = rng.below(KILL_KEYS as u64) as usize;
            match rng.below(5) {
                0 | 1 => FileOp::Open(k),
                2 | 3 => FileOp::Close(k),
                _ => FileOp::Remove(k),
            }
        })
        .collect()
}

/// The handles a child has open on each identity after `ops` (what it did does not
/// depend on what the others did).
fn opens_after(ops: &[FileOp]) -> [u16; KILL_KEYS] {
    let mut opens = [0u16; KILL_KEYS];
    for op in ops {
        match *op {
            FileOp::Open(k) => opens[k] += 1,
            FileOp::Close(k) => opens[k] = opens[k].saturating_sub(1),
            FileOp::Remove(_) => {}
        }
    }
    opens
}

/// The kill test's children not reaped yet: killed if the test fails (a child spinning
/// on a lock a stopped one holds would spin on).
pub(super) struct Children(pub(super) Vec<libc::pid_t>);

impl Children {
    /// Kills and reaps our own child.
    pub(super) fn kill(&mut self, pid: libc::pid_t) {
        self.0.retain(|p| *p != pid);
        // SAFETY: kills and reaps our own child, not reaped yet.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, &mut 0, 0);
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        while let Some(pid) = self.0.last().copied() {
            self.kill(pid);
        }
    }
}

/// Waits until the domain's steward has swept and freed `holder`'s slot (FREE in its
/// generation, or already attached again by a member of the round attaching late).
pub(super) fn swept(slots: &SlotTable<'_>, holder: Holder) {
    let deadline = std::time::Instant::now() + KILL_DEADLINE;
    loop {
        let (state, now) = slots.state(holder.slot);
        if now != holder || state == super::slot::SlotState::Free {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the steward never swept {holder:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Across real processes, swept by the domain's own steward: `KILL_ROUNDS` rounds of
/// `KILL_CHILDREN` forked members open, close and remove overlapping identities (six) at
/// once; about half of them stop themselves at a step the seeded generator chose
/// (`SIGSTOP`; the test `SIGKILL`s them there: no sleep decides what is covered), the
/// others stop at the end of their work holding their opens (a mark in the test's shared
/// words, then `SIGSTOP`). The steward,
/// told of each death by its pidfd, sweeps the dead one's opens (taking the table's lock
/// over if it died holding it). Then every record's opener counts are exactly the
/// survivors' opens (each survivor's replayed from its operations); the survivors are
/// killed in turn, and once swept no record has an opener. `FOLIO_SEED=<n>` replays a run.
#[test]
fn members_killed_at_random_steps_leave_the_survivors_opens_exactly() {
    use super::attach::{DomainConfig, Member};
    use super::domain::Geometry;
    use super::tests::{fork, SharedRegion};
    let seed = seed_from_env("file table kill test");
    let mut rng = Rng(seed);
    let home = DomainHome::new();
    let config = DomainConfig {
        dir: home.path().to_path_buf(),
        name: "files-test".into(),
        geometry: Geometry {
            slots: 8,
            frames: 16,
        },
        linger: std::time::Duration::from_millis(100),
        memory_files: None,
        weight: super::record::Weight::DEFAULT,
    };
    let parent = Member::attach(&config).unwrap();
    let domain = parent.domain();
    let slots = domain.slots();
    let table = domain.files();
    // Each child writes its holder's word here once attached, then 1 beside it when it
    // stops at the end of its work (a survivor).
    let report = SharedRegion::new(2 * KILL_CHILDREN);
    let (mut killed, mut holding, mut survived) = (0, 0, 0);
    let mut forked = Children(Vec::new());
    for round in 0..KILL_ROUNDS {
        let mut children = Vec::new();
        for i in 0..KILL_CHILDREN {
            let (word, done) = (&report.words()[2 * i], &report.words()[2 * i + 1]);
            word.store(0, crate::primitive::Ordering::Relaxed);
            done.store(0, crate::primitive::Ordering::Relaxed);
            let ops = file_ops(&mut rng);
            let die_at = (rng.below(2) == 0).then(|| rng.below(60));
            let config = &config;
            let pid = {
                let ops = ops.clone();
                fork(move || {
                    let member = Member::attach(config).expect("attach");
                    let me = member.holder();
                    word.store(me.word(), crate::primitive::Ordering::Release);
                    let run = MemberLever::new(&member, StopAt::new(die_at));
                    let (slots, table) = (member.domain().slots(), member.domain().files());
                    let mut ids: [Option<FileId>; KILL_KEYS] = [None; KILL_KEYS];
                    let mut opens = [0u16; KILL_KEYS];
                    for op in &ops {
                        match *op {
                            FileOp::Open(k) => {
                                let id = opened(
                                    table.open(key(k as u64), 1, 1, me, &slots, &run).unwrap(),
                                );
                                assert!(opens[k] == 0 || ids[k] == Some(id), "one record");
                                ids[k] = Some(id);
                                opens[k] += 1;
                            }
                            FileOp::Close(k) => {
                                if opens[k] > 0 {
                                    table.close(ids[k].unwrap(), me, &slots, &run).unwrap();
                                    opens[k] -= 1;
                                }
                            }
                            FileOp::Remove(k) => {
                                if let Some(id) = ids[k] {
                                    let removal = table.remove(id, me, &slots, &run).unwrap();
                                    assert!(opens[k] == 0 || removal == Removal::InUse);
                                }
                            }
                        }
                    }
                    done.store(1, crate::primitive::Ordering::Release);
                    // SAFETY: raise has no memory-safety preconditions.
                    unsafe { libc::raise(libc::SIGSTOP) };
                    unreachable!("a survivor is killed, never continued");
                })
            };
            forked.0.push(pid);
            children.push((pid, i, opens_after(&ops)));
        }
        let mut survivors = Vec::new();
        let mut dead = Vec::new();
        let deadline = std::time::Instant::now() + KILL_DEADLINE;
        while !children.is_empty() {
            let mut i = 0;
            while i < children.len() {
                let (pid, at, opens) = children[i];
                let mut status = 0;
                // SAFETY: waits for our own child, without blocking.
                let got =
                    unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED | libc::WNOHANG) };
                if got == 0 {
                    i += 1;
                    continue;
                }
                assert!(
                    got == pid && libc::WIFSTOPPED(status),
                    "round {round}: child {pid} status {status:#x} (FOLIO_SEED={seed})"
                );
                children.swap_remove(i);
                let words = report.words();
                let holder =
                    Holder::from_word(words[2 * at].load(crate::primitive::Ordering::Acquire));
                if words[2 * at + 1].load(crate::primitive::Ordering::Acquire) == 1 {
                    survivors.push((pid, holder, opens));
                    continue;
                }
                // A stop at the lever's step: the death.
                holding += u32::from(table.lock_line().holder() == Some(holder));
                forked.kill(pid);
                killed += 1;
                dead.push(holder);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: the children never all stopped (FOLIO_SEED={seed})"
            );
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        for holder in dead {
            swept(&slots, holder);
        }
        let census = table
            .check(&slots)
            .unwrap_or_else(|e| panic!("round {round}: {e} (FOLIO_SEED={seed})"));
        for k in 0..KILL_KEYS {
            let mut want: Vec<(u16, u16)> = survivors
                .iter()
                .filter(|(_, _, opens)| opens[k] > 0)
                .map(|(_, holder, opens)| (holder.slot.0, opens[k]))
                .collect();
            want.sort_unstable();
            let got = census
                .iter()
                .find(|r| r.key == key(k as u64))
                .map_or_else(Vec::new, |r| r.openers.clone());
            assert_eq!(
                got, want,
                "round {round}: key {k}'s openers (FOLIO_SEED={seed})"
            );
        }
        survived += survivors.len();
        for (pid, holder, _) in survivors {
            forked.kill(pid);
            swept(&slots, holder);
        }
        let census = table.check(&slots).unwrap();
        assert!(
            census.iter().all(|r| r.openers.is_empty()),
            "round {round}: {census:?}"
        );
    }
    eprintln!(
        "file table kill test: {killed} killed ({holding} holding the lock), {survived} survived"
    );
    assert!(
        killed >= KILL_ROUNDS && holding >= KILL_ROUNDS / 2,
        "too few kills: {killed}, {holding}"
    );
    parent.detach();
}

// The cost of an open+close pair and of a lock-free lookup by identity in one process
// (docs/sharing.md, "Figures"), beside today's `MappingTable` (`get_or_insert` + `close`
// of a mapping another handle keeps open, and `find`):
// `cargo test --release -p folio --lib shared::tests_files::an_open_close_pair_costs --
// --ignored --nocapture`.
#[test]
#[ignore]
fn an_open_close_pair_costs() {
    use crate::mapping::{FileStamp as MappingStamp, MappingTable};
    use crate::memory::Memory;
    use std::time::Instant;
    const N: u32 = 1_000_000;
    let per_op = |started: Instant| started.elapsed().as_nanos() as f64 / f64::from(N);
    let region = region_for(1024);
    let (slots, table) = views(&region, 1024);
    let (me, other) = (
        slots.attach(Flaw::None).unwrap(),
        slots.attach(Flaw::None).unwrap(),
    );
    let run = &Unkillable;
    // 500 files, as a process with a few hundred open files.
    for k in 0..500 {
        opened(table.open(key(k), 4096, 1, other, &slots, run).unwrap());
    }
    let started = Instant::now();
    for i in 0..N {
        let k = u64::from(i % 500);
        let id = opened(table.open(key(k), 4096, 1, me, &slots, run).unwrap());
        table.close(id, me, &slots, run).unwrap();
    }
    let pair = per_op(started);
    let started = Instant::now();
    let mut hits = 0u64;
    for i in 0..N {
        let found = table.lookup(&key(u64::from(i % 500)));
        hits += u64::from(found.is_some());
    }
    let lookup = per_op(started);
    assert_eq!(hits, u64::from(N));

    let mem = Memory::new(
        crate::arena::Arena::new(64, crate::arena::ArenaPages::Small).unwrap(),
        crate::eviction::new_policy(crate::eviction::EvictionKind::default(), 64),
        crate::write::budget::DirtyBudget::new(8, 4),
        crate::readahead::ReadaheadLimit::new(crate::readahead::LimitBounds::for_cache(64)),
    );
    let today = MappingTable::default();
    let stamp = || {
        Ok(MappingStamp {
            size_bytes: 4096,
            mtime_ns: 1,
            born_ns: 1,
        })
    };
    let kept: Vec<_> = (0..500)
        .map(|ino| today.get_or_insert(&mem, 7, ino, &stamp).unwrap())
        .collect();
    let started = Instant::now();
    for i in 0..N {
        let mapping = today
            .get_or_insert(&mem, 7, u64::from(i % 500), &stamp)
            .unwrap();
        today.close(&mem, &mapping);
    }
    let today_pair = per_op(started);
    let started = Instant::now();
    for i in 0..N {
        hits += u64::from(today.find(7, u64::from(i % 500)).is_some());
    }
    let today_find = per_op(started);
    assert_eq!(hits, 2 * u64::from(N));
    drop(kept);
    eprintln!(
        "shared file table (500 records of 1024): open+close {pair:.1} ns, lookup {lookup:.1} \
         ns; MappingTable today: get_or_insert+close {today_pair:.1} ns, find {today_find:.1} ns"
    );
}
