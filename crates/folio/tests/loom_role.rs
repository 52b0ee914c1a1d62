//! A loom model of the writer role's hand-over between two writing processes (issue 45,
//! docs/sharing.md "Two writing processes"; mapping/domain.rs F1-F3), with deaths: the
//! real `FileTable` (files.rs: `request_writer`, `release_writer`, `sweep`, `written`,
//! the lock-free `wanted_by_other`) compiled against loom's atomics (`loom_rooms`), and an
//! abstract file.
//!
//! The file: a `disk` word, and each process's newest bytes and a "dirty" flag (its
//! returned write not on disk yet; the keeper of a dead one writes what the flag says).
//! Ghost words the checks read: the newest returned write, who holds the role (set
//! after a `Claimed`, cleared before a `release_writer`), who is alive, who is done.
//!
//! H holds the role of K's record and has returned a write (1), dirty. F (another slot)
//! has K open and follows.
//! - H: loops its writeback pass: once `wanted_by_other` it writes out (disk := its
//!   bytes, dirty cleared), then `release_writer` (F3); if F is done without asking, it
//!   keeps the role. Then it wants to write again: `request_writer(ToWrite)` until
//!   `Claimed`, reads the disk, lets the role go and closes K.
//! - F: `request_writer(ToWrite)` until `Claimed` (F2), reads the disk, writes 2 (its
//!   write returns: dirty), writes it out, lets the role go and closes K. A `Stale`
//!   answer ends it (it would write privately, outside the domain).
//!
//! One of them dies at its `d`-th step (each of its steps; the model's own steps are the
//! stores to the file and the look before the write-out), or neither does. The dead
//! one's thread plays the steward: marks the slot dead, `sweep`s it (with
//! `DeadWrites::Kept`, then its keeper writes the dead one's dirty bytes to disk and calls
//! `written`; with `DeadWrites::Lost`, they are lost and the record retired if it held
//! the role), frees the slot.
//!
//! Invariants, over every interleaving explored:
//! - at most one live process holds the role (each claim checks the other's ghost);
//! - a claimant reads on disk the newest returned write (a hand-over writes out first,
//!   and a dead holder's keeper finishes before the role is claimed to write);
//! - the role is never stuck: once F is done, H's request claims it (or finds the record
//!   stale);
//! - `Stale` only after a holder's death with its writes lost;
//! - at the end the disk holds the newest returned write (unless lost), and the table's
//!   `check` passes with K open by nobody.
//!
//! Broken, and caught (each must fail):
//! - `role_broken_release_before_write_out`: H lets the role go before it writes its
//!   bytes out (the model's own order): F reads the older disk.
//! - `role_broken_request_kept`: the sweep keeps a dead requester's `WANTED`
//!   (`Flaw::RequestKept`): the role is stuck.
//! - `role_broken_orphan_claimed`: a request to write claims an `ORPHANED` record
//!   (`Flaw::OrphanClaimed`): with H dead after its write-out but before its dirty flag
//!   was cleared, the keeper's write of H's bytes lands over F's.
//!
//! Bounds: one record of K, 3 slots (the steward, H, F), `ROLE_PREEMPTIONS`. Run with
//! `cargo test --release -p folio --test loom_role` (part of the workspace's tests).

mod loom_rooms;
#[allow(unused_imports)]
use loom_rooms::*;

use files::{Ask, DeadWrites, FileId, FileTable, Request};
use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};

/// Loom's preemption bound for the role model.
const ROLE_PREEMPTIONS: usize = 3;
/// A death at each step up to this one: more than either process takes (a death past its
/// last step is no death). Counted over every execution of the model with no death: H
/// takes up to 37 steps at 3 preemptions (39 at 4), F up to 31; each `Busy` answer of a
/// request loop adds 2 (the lock and its unlock).
const ROLE_STEPS: u32 = 40;
/// H's step just after its write-out, before its dirty flag is cleared: a death there
/// leaves H's bytes on disk and H's keeper to write them again.
const H_WROTE_OUT: u32 = 1;
/// K's stamp (its mtime) at every open and release.
const MTIME_NS: u64 = 1;
/// H's returned write (before the model starts), and F's.
const H_BYTES: u64 = 1;
const F_BYTES: u64 = 2;

/// The two writing processes: `H` holds the role first, `F` follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    H,
    F,
}

impl Who {
    fn index(self) -> usize {
        match self {
            Who::H => 0,
            Who::F => 1,
        }
    }

    fn other(self) -> Who {
        match self {
            Who::H => Who::F,
            Who::F => Who::H,
        }
    }
}

/// Who dies, at which of its steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Death {
    Nobody,
    At(Who, u32),
}

/// The order of H's hand-over (its process's, not the table's: mapping/domain.rs F3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HandOver {
    /// Its bytes written out, then the role let go (the protocol).
    WriteOutFirst,
    /// The role let go, then its bytes written out (broken).
    ReleaseFirst,
}

#[derive(Clone, Copy, Debug)]
struct RoleModel {
    death: Death,
    writes: DeadWrites,
    hand_over: HandOver,
    flaw: Flaw,
    tally: &'static Tally,
}

/// What one test's executions saw (std's atomics: outside loom's model, a tally of every
/// execution explored), so that the test shows that it covered its case.
#[derive(Debug)]
struct Tally {
    /// A dead holder's keeper finished (`written` made its `ORPHANED` record `WRITTEN`).
    kept: std::sync::atomic::AtomicU64,
    /// A request found the record stale.
    stale: std::sync::atomic::AtomicU64,
    /// A dead requester's `WANTED` was still set at its sweep.
    swept: std::sync::atomic::AtomicU64,
}

impl Tally {
    const fn new() -> Tally {
        Tally {
            kept: std::sync::atomic::AtomicU64::new(0),
            stale: std::sync::atomic::AtomicU64::new(0),
            swept: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn add(count: &std::sync::atomic::AtomicU64) {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn of(count: &std::sync::atomic::AtomicU64) -> u64 {
        count.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The broken variants' tally, which nobody reads.
static UNCOUNTED: Tally = Tally::new();

/// The abstract file and the ghost words the checks read (loom's atomics, `SeqCst`:
/// the file's own ordering is not what is modelled, the role's is).
struct FileModel {
    disk: loom::sync::atomic::AtomicU64,
    /// Each process's newest bytes and whether they are dirty (not on disk yet).
    bytes: [loom::sync::atomic::AtomicU64; 2],
    dirty: [AtomicBool; 2],
    /// The newest returned write, of anyone.
    newest: loom::sync::atomic::AtomicU64,
    /// Who holds the role, as the processes believe.
    holds: [AtomicBool; 2],
    alive: [AtomicBool; 2],
    /// Its thread is finished (the steward's work of its death too).
    done: [AtomicBool; 2],
    /// A `Stale` answer seen; a holder's returned writes lost by its death (its record
    /// retired).
    stale_seen: AtomicBool,
    lost: AtomicBool,
}

impl FileModel {
    fn new() -> FileModel {
        let word = || loom::sync::atomic::AtomicU64::new(0);
        let flag = || AtomicBool::new(false);
        FileModel {
            disk: word(),
            bytes: [word(), word()],
            dirty: [flag(), flag()],
            newest: word(),
            holds: [flag(), flag()],
            alive: [AtomicBool::new(true), AtomicBool::new(true)],
            done: [flag(), flag()],
            stale_seen: flag(),
            lost: flag(),
        }
    }

    /// `who`'s write of `bytes` returns: newer than anything on disk.
    fn write(&self, who: Who, bytes: u64) {
        self.bytes[who.index()].store(bytes, SeqCst);
        self.dirty[who.index()].store(true, SeqCst);
        self.newest.store(bytes, SeqCst);
    }

    /// `who`'s dirty bytes written to disk (a write-out, or the keeper's).
    fn write_out(&self, who: Who) {
        self.disk
            .store(self.bytes[who.index()].load(SeqCst), SeqCst);
    }

    /// `who` claimed the role: nobody else alive holds it, and, if it did not hold it
    /// already, the disk holds the newest returned write (what it reads).
    fn claimed(&self, who: Who) {
        let other = who.other().index();
        assert!(
            !(self.holds[other].load(SeqCst) && self.alive[other].load(SeqCst)),
            "two live holders of the role: {who:?} claimed it while {:?} holds it",
            who.other()
        );
        if self.holds[who.index()].swap(true, SeqCst) {
            // It held the role already (nobody asked): its newest bytes are its own.
            return;
        }
        let (disk, newest) = (self.disk.load(SeqCst), self.newest.load(SeqCst));
        assert_eq!(
            disk, newest,
            "{who:?} claimed the role and read an older disk than the newest returned write"
        );
    }
}

/// What every process's thread shares.
struct Cast<'a> {
    table: &'a FileTable<'a>,
    slots: &'a SlotTable<'a>,
    file: &'a FileModel,
    id: FileId,
    steward: Holder,
    model: RoleModel,
}

impl Cast<'_> {
    /// `me`'s `request_writer(ToWrite)`, asked again until it is `Claimed` or `Stale`.
    /// `stuck_when_done`: the process whose end must leave the role free (`None`: none).
    fn take_role(
        &self,
        who: Who,
        me: Holder,
        run: &ModelRun,
        stuck_when_done: Option<Who>,
    ) -> Result<Request, Died> {
        loop {
            match self
                .table
                .request_writer(self.id, Ask::ToWrite, me, self.slots, run)?
            {
                Request::Claimed => {
                    self.file.claimed(who);
                    return Ok(Request::Claimed);
                }
                Request::Stale => {
                    Tally::add(&self.model.tally.stale);
                    self.file.stale_seen.store(true, SeqCst);
                    return Ok(Request::Stale);
                }
                // As `Mapping::take_role`: lock-free looks until a request would do
                // something (`worth_asking`), then the request.
                Request::Busy => loop {
                    let other_done =
                        stuck_when_done.is_some_and(|o| self.file.done[o.index()].load(SeqCst));
                    if self.table.worth_asking(self.id, me, run) {
                        break;
                    }
                    assert!(
                        !other_done,
                        "the role is stuck: {who:?}'s request is refused with {:?} done",
                        who.other()
                    );
                    loom::thread::yield_now();
                },
            }
        }
    }

    /// `who`'s dirty bytes written out (disk, then the flag), a step after each store.
    fn write_out(&self, who: Who, run: &ModelRun) -> Result<(), Died> {
        self.file.write_out(who);
        run.at(Step::Stored)?;
        self.file.dirty[who.index()].store(false, SeqCst);
        run.at(Step::Stored)
    }

    /// `who` lets the role go (its dirty bytes written out first: a writer's detach), or
    /// withdraws its request, and closes K.
    fn release_and_close(&self, who: Who, me: Holder, run: &ModelRun) -> Result<(), Died> {
        if self.file.holds[who.index()].load(SeqCst) {
            if self.file.dirty[who.index()].load(SeqCst) {
                self.write_out(who, run)?;
            }
            self.file.holds[who.index()].store(false, SeqCst);
            self.table
                .release_writer(self.id, MTIME_NS, me, self.slots, run)?;
        } else {
            // A follower's end (reader.rs, `DomainFollower`'s drop): a request it left
            // (a `Stale` answer leaves it) withdrawn.
            self.table.withdraw(self.id, me, self.slots, run)?;
        }
        self.table.close(self.id, me, self.slots, run)
    }

    /// H: the hand-over at its writeback pass, then its next write's request.
    fn holder(&self, h: Holder, run: &ModelRun) -> Result<(), Died> {
        let file = self.file;
        loop {
            if self.table.wanted_by_other(self.id, h) {
                break;
            }
            if file.done[Who::F.index()].load(SeqCst) {
                // F ended without asking (it died before, or its request was swept): H
                // still holds the role (a holder does not ask for its own role: a request
                // that finds it is `Busy` until the holder's release), and lets it go.
                return self.release_and_close(Who::H, h, run);
            }
            loom::thread::yield_now();
        }
        run.at(Step::Stored)?;
        let write_out = || self.write_out(Who::H, run);
        let release = || -> Result<(), Died> {
            file.holds[Who::H.index()].store(false, SeqCst);
            self.table
                .release_writer(self.id, MTIME_NS, h, self.slots, run)
        };
        match self.model.hand_over {
            HandOver::WriteOutFirst => {
                write_out()?;
                release()?;
            }
            HandOver::ReleaseFirst => {
                release()?;
                write_out()?;
            }
        }
        self.holder_again(h, run)
    }

    /// H wants to write again: it claims the role (or finds the record stale), and lets
    /// it go.
    fn holder_again(&self, h: Holder, run: &ModelRun) -> Result<(), Died> {
        self.take_role(Who::H, h, run, Some(Who::F))?;
        self.release_and_close(Who::H, h, run)
    }

    /// F: claims the role, writes, lets the role go (writing out first).
    fn follower(&self, f: Holder, run: &ModelRun) -> Result<(), Died> {
        let file = self.file;
        if self.take_role(Who::F, f, run, None)? == Request::Claimed {
            file.write(Who::F, F_BYTES);
            run.at(Step::Stored)?;
        }
        self.release_and_close(Who::F, f, run)
    }

    /// `who` (in slot `me`) runs `body`, dying where `model.death` says; at its death its
    /// thread plays the steward.
    fn play(&self, who: Who, me: Holder, body: impl FnOnce(&ModelRun) -> Result<(), Died>) {
        let flaw = self.model.flaw;
        let run = match self.model.death {
            Death::At(dying, step) if dying == who => ModelRun::dying_at(step, flaw),
            _ => ModelRun::living(flaw),
        };
        if body(&run) == Err(Died) {
            self.steward(who, me);
        }
        self.file.done[who.index()].store(true, SeqCst);
    }

    /// The steward's work at `who`'s death: the sweep, and its keeper's with `Kept`.
    fn steward(&self, who: Who, dead: Holder) {
        let (file, living) = (self.file, ModelRun::living(self.model.flaw));
        file.alive[who.index()].store(false, SeqCst);
        assert!(self.slots.mark_dead(dead));
        if who == Who::F && self.table.wanted_by_other(self.id, self.steward) {
            Tally::add(&self.model.tally.swept);
        }
        self.table
            .sweep(dead, self.steward, self.slots, &living, self.model.writes)
            .unwrap();
        match self.model.writes {
            DeadWrites::Kept => {
                if file.dirty[who.index()].load(SeqCst) {
                    file.write_out(who);
                    file.dirty[who.index()].store(false, SeqCst);
                }
                let made = self
                    .table
                    .written(dead, self.steward, self.slots, &living)
                    .unwrap();
                if made > 0 {
                    Tally::add(&self.model.tally.kept);
                }
            }
            DeadWrites::Lost => {
                // The sweep retired the record if the dead one held the role.
                if self.table.lookup(&K).map(|found| found.mtime_ns) == Some(u64::MAX) {
                    file.lost.store(true, SeqCst);
                }
            }
        }
        self.slots.free_dead(dead);
    }
}

fn role_model(model: RoleModel) {
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        builder.preemption_bound = Some(ROLE_PREEMPTIONS);
    }
    builder.check(move || {
        let words = FILES.index() + FileTable::words(FILES_CAPACITY, SLOTS) as usize;
        let region: Arc<Vec<AtomicU64>> = Arc::new((0..words).map(|_| AtomicU64::new(0)).collect());
        let file = Arc::new(FileModel::new());
        let (steward, h, f, id) = {
            let (slots, table) = files_views(&region);
            let living = ModelRun::living(Flaw::None);
            let steward = slots.attach(Flaw::None).unwrap();
            let (h, f) = (
                slots.attach(Flaw::None).unwrap(),
                slots.attach(Flaw::None).unwrap(),
            );
            let id = file_id(table.open(K, 10, MTIME_NS, h, &slots, &living).unwrap());
            assert_eq!(
                table.request_writer(id, Ask::AtOpen, h, &slots, &living),
                Ok(Request::Claimed)
            );
            assert_eq!(
                file_id(table.open(K, 10, MTIME_NS, f, &slots, &living).unwrap()),
                id
            );
            file.write(Who::H, H_BYTES);
            file.holds[Who::H.index()].store(true, SeqCst);
            (steward, h, f, id)
        };
        let follower = {
            let (region, file) = (region.clone(), file.clone());
            loom::thread::spawn(move || {
                let (slots, table) = files_views(&region);
                let cast = Cast {
                    table: &table,
                    slots: &slots,
                    file: &file,
                    id,
                    steward,
                    model,
                };
                cast.play(Who::F, f, |run| cast.follower(f, run));
            })
        };
        let (slots, table) = files_views(&region);
        let cast = Cast {
            table: &table,
            slots: &slots,
            file: &file,
            id,
            steward,
            model,
        };
        cast.play(Who::H, h, |run| cast.holder(h, run));
        follower.join().unwrap();
        let lost = file.lost.load(SeqCst);
        assert!(
            !file.stale_seen.load(SeqCst) || lost,
            "a request found the record stale, and no holder's writes were lost"
        );
        if !lost {
            let (disk, newest) = (file.disk.load(SeqCst), file.newest.load(SeqCst));
            assert_eq!(
                disk, newest,
                "the disk ends older than the newest returned write: a keeper's write \
                 landed over a newer one"
            );
        }
        let census = table.check(&slots);
        let want = Ok(vec![files::RecordCensus {
            id,
            key: K,
            size: 10,
            openers: Vec::new(),
        }]);
        assert!(
            census == want,
            "K's record open by nobody at the end: {census:?}"
        );
    });
}

fn protocol(death: Death, writes: DeadWrites, tally: &'static Tally) -> RoleModel {
    RoleModel {
        death,
        writes,
        hand_over: HandOver::WriteOutFirst,
        flaw: Flaw::None,
        tally,
    }
}

/// Every death of `who` (each of its steps) with `writes`.
fn deaths_of(who: Who, writes: DeadWrites, tally: &'static Tally) {
    for step in 0..=ROLE_STEPS {
        role_model(protocol(Death::At(who, step), writes, tally));
    }
    eprintln!("{who:?} dies, {writes:?}: {tally:?}");
}

#[test]
fn role_hand_over_no_death() {
    role_model(protocol(Death::Nobody, DeadWrites::Kept, &UNCOUNTED));
}

#[test]
fn role_hand_over_holder_dies_kept() {
    static TALLY: Tally = Tally::new();
    deaths_of(Who::H, DeadWrites::Kept, &TALLY);
    assert!(
        Tally::of(&TALLY.kept) > 0,
        "no dead holder's keeper finished"
    );
}

#[test]
fn role_hand_over_holder_dies_lost() {
    static TALLY: Tally = Tally::new();
    deaths_of(Who::H, DeadWrites::Lost, &TALLY);
    assert!(
        Tally::of(&TALLY.stale) > 0,
        "no request found a dead holder's record stale"
    );
}

#[test]
fn role_hand_over_follower_dies_kept() {
    static TALLY: Tally = Tally::new();
    deaths_of(Who::F, DeadWrites::Kept, &TALLY);
    assert!(
        Tally::of(&TALLY.swept) > 0,
        "no dead requester's request was swept"
    );
}

#[test]
fn role_hand_over_follower_dies_lost() {
    static TALLY: Tally = Tally::new();
    deaths_of(Who::F, DeadWrites::Lost, &TALLY);
    assert!(
        Tally::of(&TALLY.swept) > 0,
        "no dead requester's request was swept"
    );
}

#[test]
fn role_broken_release_before_write_out() {
    let model = RoleModel {
        hand_over: HandOver::ReleaseFirst,
        ..protocol(Death::Nobody, DeadWrites::Kept, &UNCOUNTED)
    };
    expect_caught(
        Flaw::None,
        move || role_model(model),
        "read an older disk than the newest returned write",
    );
}

#[test]
fn role_broken_request_kept() {
    // Caught once F dies after its request's intent.
    let deaths = || {
        for step in 0..=ROLE_STEPS {
            role_model(RoleModel {
                flaw: Flaw::RequestKept,
                ..protocol(Death::At(Who::F, step), DeadWrites::Kept, &UNCOUNTED)
            });
        }
    };
    expect_caught(Flaw::RequestKept, deaths, "the role is stuck");
}

#[test]
fn role_broken_orphan_claimed() {
    let model = RoleModel {
        flaw: Flaw::OrphanClaimed,
        ..protocol(Death::At(Who::H, H_WROTE_OUT), DeadWrites::Kept, &UNCOUNTED)
    };
    expect_caught(
        Flaw::OrphanClaimed,
        move || role_model(model),
        "a keeper's write landed over a newer one",
    );
}
