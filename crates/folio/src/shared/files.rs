//! The shared file table (issue 45 step 6's first part, docs/sharing.md "The file
//! table"): one mapping record per file identity, whoever opened it, with each process's
//! opens counted in its slot's counter, so that the steward drops a dead process's opens
//! exactly. Read through by a `Cache` with a domain (read.rs, reader.rs), which also
//! drops records (below, "Drops").
//!
//! ```text
//!   base + 0..8     the lock line (lock.rs): lock, intent, 4 args, USED (6), TOMBS (7)
//!   then C records of `stride` words each (C a power of two), record r:
//!     0  tag        EMPTY 0 (never used), LIVE(g) 1 << 62 | g, TOMB(g) 2 << 62 | g
//!     1  dev  2  ino  3  born_ns      the identity (segment/identity.rs's FileIdentity)
//!     4  size       the logical size in bytes (below)
//!     5  mtime_ns   the stamp at the record's insert
//!     6  writer     the slot + 1 of the process whose writes update its pages, or 0
//!     7  openers    the handles open on it, over every process (the sum of the counts)
//!     8..           one 16-bit count per process slot, 4 to a word: that slot's handles
//! ```
//!
//! A record's **id** is its index r and its generation g (`FileId`): each insert into a
//! record gives it the next generation, so an id kept past a removal never names the
//! record's next file (the shared form of today's `MappingId` reuse rule: table.rs).
//!
//! # Protocol
//!
//! Every change holds the table's `HolderLock` and is made of changes of lock.rs's M1-M3
//! (an intent with the absolute values, its stores, the intent cleared):
//!   O1. Open (`open`): probe from the identity's hash for a LIVE record of it, up to an
//!       EMPTY record (remembering the first non-LIVE one). Found: ADJUST (my slot's
//!       count word + 1, openers + 1). Not found: KEY (the identity and stamp into the
//!       first non-LIVE record: its tag is not LIVE, so no reader uses these words), then
//!       PUBLISH (size, root 0, my count 1, openers 1, USED + 1, TOMBS - 1 if it was a
//!       tombstone, and last the tag LIVE(g + 1)). The probe and the insert are under one
//!       lock hold: two processes opening one identity at once end with one record.
//!   C1. Close (`close`): ADJUST (my count - 1, openers - 1). The last close leaves the
//!       record LIVE: its pages stay cached for the next open, as table.rs's.
//!   R1. Removal (`remove_with`) of a record nobody has open (openers 0), all under one
//!       hold of the lock: first its pages dropped and its tree released (the caller's
//!       `DropPages`: `SharedQueue::drop_file`, each page out of the queue and the
//!       record's index and its frame freed, then the tree's node frames: every step
//!       under the queue's, the tree's and the allocator's own intents), then REMOVE (tag
//!       TOMB(g) first, so readers stop matching it, then USED - 1, TOMBS + 1): a removed
//!       record names no page. A page whose frame stays pinned (`DropPages` says so)
//!       leaves the record LIVE, with what is left (`Removal::Busy`). `remove` is the same
//!       for a table whose records hold no index (the tests').
//!   R2. Stamp retirement (`retire_stamp`): STAMP (MTIME = `RETIRED_STAMP`, which no
//!       file's modification time is): this process is about to write the file, so the
//!       next open of it finds the stamp changed (below).
//!   S1. The steward's sweep of a dead slot (`sweep`): for each LIVE record where the
//!       slot's count is c > 0, ADJUST (that count 0, openers - c); a record the dead
//!       slot was the writer of first gets WRITE: `ORPHANED` (its keeper will write its
//!       pages back: the stamp kept) or 0 with the stamp retired (no keeper). At the
//!       keeper's end (`written`), WRITE: `WRITTEN` for each record still `ORPHANED` by
//!       it. docs/sharing.md "Writes seen across processes", "Death".
//! Take-over: lock.rs's T1-T3; T2 redoes the last change from its intent. A death
//! between KEY and PUBLISH leaves a non-LIVE record with a new key: nobody reads it, the
//! next insert there writes it again (no change is in flight between two intents).
//!
//! **Drops** (`open_with`, `remove_with`: R1 where a record is in the way). An open whose
//! stamp differs from its record's (the file changed since, or R2 retired it) drops the
//! record and inserts a new one, if nobody has it open (else `Stamp::Changed`: the caller
//! reads privately); an open that finds the table full drops the first record nobody has
//! open on its probe path (from its identity's hash: in effect one at random, not the
//! coldest: the table keeps no use time) and inserts there (`Opened::Full` only when every
//! record is open, or pinned). Why a death anywhere leaves a working table: the lock is
//! held from the drop's first page to REMOVE, so nobody opens the record meanwhile; until
//! REMOVE the record is LIVE, its tree a valid tree with fewer pages (each page's removal
//! is the queue's E1-E7, finished by the queue's next taker: the steward's sweep takes it)
//! or one being released (finished by the tree's next taker: the steward's sweep takes
//! every tree lock the dead one held); REMOVE is one intent (T2 redoes it). So a dead
//! dropper leaves either a tombstone whose tree holds nothing, or a LIVE record nobody has
//! open, with some of its pages, which the next drop of it (a removal, a changed open, a
//! full table's) continues. Nothing is leaked meanwhile: its pages are queued frames
//! reclaim may take, its tree's node frames are still the tree's.
//!
//! **Lookup** (`lookup`, lock-free, by any process): probe as O1 does, reading each
//! record's tag (acquire), its identity, size and stamp (acquire), then its tag again: a
//! LIVE(g) tag read equal on both sides with the identity matching is a hit, consistent,
//! since the identity words change only after the tag leaves LIVE(g) (REMOVE stores the
//! tag first; every store is a release store, so a reader that saw a later identity sees
//! the tag changed on its second read) and a tag never returns to LIVE(g) (generations
//! only grow). A miss is not authoritative (an insert may be under way): the caller takes
//! the lock (`open`). The region is read as untrusted input: every index is masked into
//! the table, nothing in a reader asserts on a word's value.
//!
//! **The size word** (`size`, `extend_size`, `set_size`), lock-free: a holder of an open
//! on the record (so that no removal races it) changes it by one atomic read-modify-write:
//! a write extending the file raises it to at least its end (a CAS loop: concurrent
//! extensions commute, and one never shrinks the file another extended), a truncation
//! stores its size (a swap). The word promises: once a change returned, every later read
//! of it by any process (acquire) returns that value or a later one in the word's single
//! modification order; a process dying mid-change either made its RMW or did not (one
//! word, nothing to redo). Ordering against the pages' publication (a read seeing the size
//! before the bytes) is the index step's, not this word's.
//!
//! **Invariant** (`check`, on a quiet table): the lock free, no intent; every LIVE
//! record's openers is the sum of its counts, each count's slot LIVE; every non-LIVE
//! record has openers 0 and every count 0; USED and TOMBS count the LIVE and TOMB
//! records; no two LIVE records have one identity; a LIVE record is reached by the
//! probe from its identity's hash before any EMPTY record.
//!
//! Protection: every word by the lock, except the tag-bracketed reads of `lookup` and the
//! size word (its RMW, by a holder of an open). Limits: capacity a power of two up to
//! 2^31 records, no rehash (a full table evicts a record nobody has open, "Drops", else
//! refuses a new identity: `Opened::Full`); a drop holds the lock for as long as its
//! pages take (each page's E1-E7 under the queue's, the tree's and the allocator's
//! locks: every open and close in the domain waits meanwhile); a pinned page is waited
//! for a bounded number of rounds (queue.rs, `drop_file`);
//! tombstones are reused by inserts but never cleared, so probes lengthen with churn; up
//! to 65535 handles per process per file (`Opened::TooMany`); 2^32 generations per
//! record (asserted). The identity has no inode generation: the birth time tells a reused
//! inode apart, as segment/identity.rs does; the stamp's change since the insert is
//! reported (`Opened::stamp`) while the record is open, and drops it when it is not
//! ("Drops"); a file changed without a change of its modification time (a write within
//! the time's granularity by another process, or `utimes` back) is not seen.

use super::lock::{Held, HolderLock, Intent, LINE_FREE_WORDS, LINE_WORDS};
use super::slot::SlotTable;
use super::{Died, Flaw, Holder, Run, SlotIndex, Step, Word};
use crate::primitive::{AtomicU64, Ordering};

/// A file's identity, as the table keys it (segment/identity.rs's `FileIdentity`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FileKey {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) born_ns: u64,
}

/// A mapping record's id: its index and the generation its insert gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FileId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// What an open found (O1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Opened {
    /// The record, and whether its stamp differs from the opener's (`Stamp::Changed`).
    Open { id: FileId, stamp: Stamp },
    /// No record free for a new identity.
    Full,
    /// This process already has 65535 handles open on the file.
    TooMany,
}

/// Whether the file's stamp at open is the record's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stamp {
    Same,
    Changed,
}

/// What a removal did (R1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Removal {
    Done,
    /// A handle is open on it.
    InUse,
    /// The id names no record any more (removed already).
    Gone,
    /// Its pages could not all be dropped (a frame stayed pinned): it stays, with fewer.
    Busy,
}

/// A record's drop of its pages and index (R1: `SharedQueue::drop_file`), called under
/// the table's lock with the record LIVE and nobody's open: `Ok(true)` once the record
/// names no page and its tree holds no node frame, `Ok(false)` if a page stayed (the
/// record is then kept, with what is left).
pub(crate) type DropPages<'d> = &'d mut dyn FnMut(FileId) -> Result<bool, Died>;

/// A record as a lookup read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) id: FileId,
    pub(crate) size: u64,
    pub(crate) mtime_ns: u64,
}

/// A LIVE record as `check` found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RecordCensus {
    pub(crate) id: FileId,
    pub(crate) key: FileKey,
    pub(crate) size: u64,
    /// (slot, count) for each slot with a count, in slot order.
    pub(crate) openers: Vec<(u16, u16)>,
}

const USED: u32 = LINE_FREE_WORDS[0];
const TOMBS: u32 = LINE_FREE_WORDS[1];

// A record's words.
const TAG: u32 = 0;
const DEV: u32 = 1;
const INO: u32 = 2;
const BORN: u32 = 3;
const SIZE: u32 = 4;
const MTIME: u32 = 5;
/// The record's writer (docs/sharing.md "Writes seen across processes"): 0, or the slot + 1
/// of the one process whose writes update the record's pages in the domain.
const WRITER: u32 = 6;
const OPENERS: u32 = 7;
const COUNTS: u32 = 8;

const EMPTY: u64 = 0;
const LIVE: u64 = 1 << 62;
const TOMB: u64 = 2 << 62;
const KIND: u64 = 3 << 62;

// The intents' operation codes (the record's index in bits 8..40).
const KEY: u64 = 1;
const PUBLISH: u64 = 2;
const ADJUST: u64 = 3;
const REMOVE: u64 = 4;
const STAMP: u64 = 5;
const WRITE: u64 = 6;

/// The stamp a retired record holds (`retire_stamp`): no file's modification time, so the
/// next open of the file finds its stamp changed.
const RETIRED_STAMP: u64 = u64::MAX;

/// WRITER of a record whose writer died with a keeper still to write its pages back
/// (`sweep` with `DeadWrites::Kept`): this bit | the dead slot + 1 (the slot stays DEAD
/// until the keeper is done, so it names no one else). Its pages are the file's newest
/// bytes (HELD: the steward keeps the dead writer's marks meanwhile), so the record stays
/// current as under a writer: admitted as `Stamp::Same` (its writer's keeper moves the
/// disk's stamp), never dropped for a changed stamp or a full table, and claimable by the
/// next writer at its open (`request_writer`). docs/sharing.md "Writes seen across
/// processes", "Death".
const ORPHANED: u64 = 1 << 32;
/// WRITER of a record whose dead writer's keeper is done (`written`): no writer, its pages
/// the file's (on disk too); admitted as `Stamp::Same` while its stamp is not retired
/// (the keeper's writes moved the disk's stamp: a changed stamp would send every opener
/// to a private read while the record is open), dropped for a changed stamp when nobody
/// has it open, claimable.
const WRITTEN: u64 = 1 << 33;
/// WRITER's bits 40..56: the slot + 1 of a process that wants to become the writer while
/// another holds the role (`request_writer`: a second writing process, docs/sharing.md
/// "Two writing processes"), or 0. The holder hands the role over (`release_writer`
/// keeps these bits), the requester claims it (clearing them); a dead requester's are
/// cleared by its sweep.
const WANTED_SHIFT: u32 = 40;
const WANTED: u64 = 0xffff << WANTED_SHIFT;

/// What a dead process's returned writes are (`sweep`): the steward's reading of its
/// record's keeper (record.rs, "The keeper").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeadWrites {
    /// A keeper will write them back, or has: its records stay current (`ORPHANED`).
    Kept,
    /// Nobody will: they were never durable, and the records it wrote are retired (the
    /// next admission once nobody has one open drops its pages).
    Lost,
}

/// Whether WRITER `writer` names a live process's slot (not 0, `ORPHANED`, `WRITTEN`).
fn is_live_writer(writer: u64) -> bool {
    let holder = holder_of(writer);
    holder != 0 && holder < ORPHANED
}

/// WRITER without its `WANTED` bits: who holds the role (a slot + 1, `ORPHANED | slot +
/// 1`, `WRITTEN` or 0).
fn holder_of(writer: u64) -> u64 {
    writer & !WANTED
}

/// The slot + 1 that wants the role (`WANTED`), or 0.
fn wanted_of(writer: u64) -> u64 {
    (writer & WANTED) >> WANTED_SHIFT
}

/// How a process asks for a record's writer role (`request_writer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ask {
    /// At a writable open: claimed if free, else the opener follows the holder (or waits
    /// out a dead holder's keeper), asking nothing yet.
    AtOpen,
    /// Before a write: claimed if free, else asked for (`WANTED`).
    ToWrite,
}

/// What a request of a record's writer role found (`request_writer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// The caller is its writer now.
    Claimed,
    /// Another process holds it (or its dead holder's keeper still writes its pages, or
    /// another process asked first): the caller is its `WANTED` (if nobody else is) and
    /// asks again once the holder let it go (`worth_asking`).
    Busy,
    /// The record is gone or its stamp retired (another process wrote the file outside
    /// the domain): nobody keeps it current.
    Stale,
}

/// Whether a request may claim a role held by `holder` (WRITER's holder part): nobody
/// holds it, or its dead holder's keeper is done. Not `ORPHANED` (the keeper may still
/// write), nor a live process's: another's, or ours (a `DomainWriter` of ours not dropped
/// yet, whose release, its drop, would undo a claim now: the claimant waits for it).
fn claimable(holder: u64, flaw: Flaw) -> bool {
    match holder {
        0 | WRITTEN => true,
        _ if holder & ORPHANED != 0 => orphan_claimed(flaw),
        _ => false,
    }
}

/// Whether `flaw` is a request that claims an `ORPHANED` record.
fn orphan_claimed(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::OrphanClaimed => true,
        _ => false,
    }
}

/// Whether `flaw` is a sweep that keeps a dead requester's `WANTED`.
fn request_kept(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::RequestKept => true,
        _ => false,
    }
}

fn op(code: u64, index: u32) -> u64 {
    code | (u64::from(index) << 8)
}

/// WRITE: record `index`'s WRITER made `writer` and its stamp `stamp`, in one intent.
fn write_intent(index: u32, writer: u64, stamp: u64) -> Intent {
    Intent {
        op: op(WRITE, index),
        args: [writer, stamp, 0, 0],
    }
}

fn count_of(word: u64, slot: u16) -> u16 {
    (word >> (16 * (slot % 4))) as u16
}

fn with_count(word: u64, slot: u16, count: u16) -> u64 {
    let shift = 16 * (slot % 4);
    (word & !(0xffff << shift)) | (u64::from(count) << shift)
}

/// The identity's place to start probing.
fn hash(key: &FileKey) -> u64 {
    let mut h = key.dev.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h = (h ^ key.ino).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ key.born_ns).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The file table at `base` of a region (module docs).
#[derive(Debug)]
pub(crate) struct FileTable<'r> {
    region: &'r [AtomicU64],
    lock: HolderLock<'r>,
    base: Word,
    capacity: u32,
    slots: u16,
    stride: u32,
}

impl<'r> FileTable<'r> {
    fn stride_for(slots: u16) -> u32 {
        (COUNTS + u32::from(slots).div_ceil(4)).next_multiple_of(LINE_WORDS)
    }

    /// The words a table of `capacity` records for `slots` process slots takes.
    pub(crate) fn words(capacity: u32, slots: u16) -> u32 {
        LINE_WORDS + capacity * Self::stride_for(slots)
    }

    /// A view of the table at `base` (8-word aligned, zeroed by the region's maker: the
    /// lock free, every record EMPTY).
    pub(crate) fn new(
        region: &'r [AtomicU64],
        base: Word,
        capacity: u32,
        slots: u16,
    ) -> FileTable<'r> {
        assert!(
            capacity.is_power_of_two() && capacity <= 1 << 31,
            "a capacity of {capacity} records"
        );
        assert!(
            base.index() + Self::words(capacity, slots) as usize <= region.len(),
            "the file table lies past the region"
        );
        FileTable {
            region,
            lock: HolderLock::new(region, base),
            base,
            capacity,
            slots,
            stride: Self::stride_for(slots),
        }
    }

    /// The lock (diagnostics, tests).
    pub(crate) fn lock_line(&self) -> &HolderLock<'r> {
        &self.lock
    }

    fn line(&self, offset: u32) -> &AtomicU64 {
        &self.region[self.base.at(offset).index()]
    }

    /// Word `offset` of record `index`; `index` masked into the table (a reader's index
    /// comes from a hash or an id: never out of the table).
    fn word(&self, index: u32, offset: u32) -> &'r AtomicU64 {
        let index = index & (self.capacity - 1);
        &self.region[self
            .base
            .at(LINE_WORDS + index * self.stride + offset)
            .index()]
    }

    fn count_word(&self, index: u32, slot: u16) -> &AtomicU64 {
        assert!(slot < self.slots, "no slot {slot}");
        self.word(index, COUNTS + u32::from(slot) / 4)
    }

    fn key_of(&self, index: u32) -> FileKey {
        FileKey {
            dev: self.word(index, DEV).load(Ordering::Acquire),
            ino: self.word(index, INO).load(Ordering::Acquire),
            born_ns: self.word(index, BORN).load(Ordering::Acquire),
        }
    }

    /// The stores of a change, in order (module docs), each through `store`: the
    /// holder's (a step after each) or a redo's.
    fn apply(
        &self,
        intent: &Intent,
        mut store: impl FnMut(&AtomicU64, u64) -> Result<(), Died>,
    ) -> Result<(), Died> {
        let code = intent.op & 0xff;
        let index = (intent.op >> 8) as u32;
        let [a, b, c, d] = intent.args;
        match code {
            KEY => {
                // a, b, c: the identity; d: the stamp's mtime.
                store(self.word(index, DEV), a)?;
                store(self.word(index, INO), b)?;
                store(self.word(index, BORN), c)?;
                store(self.word(index, MTIME), d)
            }
            PUBLISH => {
                // a: size, b: the tag, c: the opener's slot << 48 | its count word,
                // d: USED << 32 | TOMBS.
                let slot = (c >> 48) as u16;
                store(self.word(index, SIZE), a)?;
                store(self.word(index, WRITER), 0)?;
                store(self.count_word(index, slot), with_count(0, slot, 1))?;
                store(self.word(index, OPENERS), 1)?;
                store(self.line(USED), d >> 32)?;
                store(self.line(TOMBS), d & 0xffff_ffff)?;
                store(self.word(index, TAG), b)
            }
            ADJUST => {
                // a: the slot, b: its count word, c: openers.
                store(self.count_word(index, a as u16), b)?;
                store(self.word(index, OPENERS), c)
            }
            REMOVE => {
                // a: the tag, b: USED << 32 | TOMBS.
                store(self.word(index, TAG), a)?;
                store(self.line(USED), b >> 32)?;
                store(self.line(TOMBS), b & 0xffff_ffff)
            }
            STAMP => store(self.word(index, MTIME), a),
            WRITE => {
                // a: the new WRITER, b: the stamp (kept as it was unless it changes).
                store(self.word(index, MTIME), b)?;
                store(self.word(index, WRITER), a)
            }
            code => panic!("an intent with an unknown operation {code}"),
        }
    }

    /// A dead holder's last change finished (lock.rs's T2).
    fn redo(&self, intent: &Intent) {
        let redone = self.apply(intent, |word, value| {
            word.store(value, Ordering::Release);
            Ok(())
        });
        assert_eq!(redone, Ok(()));
    }

    /// One change made by the holder of `held` (M1-M3); under
    /// `Flaw::IntentAfterMutation`, its stores are made before its intent is published.
    fn change<R: Run>(&self, held: &Held<'_, '_>, intent: &Intent, run: &R) -> Result<(), Died> {
        held.change(intent, run, |store| self.apply(intent, store))
    }

    fn take<R: Run>(
        &self,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Held<'_, 'r>, Died> {
        self.lock.lock(me, slots, run, |intent| self.redo(intent))
    }

    /// The probe under the lock: the LIVE record of `key`, or the first non-LIVE record
    /// on its probe path (`Err(None)`: none, the table is full of other identities).
    fn probe(&self, key: &FileKey) -> Result<u32, Option<u32>> {
        let start = hash(key);
        let mut free = None;
        for i in 0..self.capacity {
            let index = (start.wrapping_add(u64::from(i)) as u32) & (self.capacity - 1);
            let tag = self.word(index, TAG).load(Ordering::Acquire);
            match tag & KIND {
                LIVE if self.key_of(index) == *key => return Ok(index),
                LIVE => {}
                _ => {
                    free = free.or(Some(index));
                    if tag == EMPTY {
                        break;
                    }
                }
            }
        }
        Err(free)
    }

    /// The adjusted count of `slot` in record `index` by `delta` (O1, C1): the change's
    /// intent, or `None` when the count would leave 0..=65535.
    fn adjust(&self, index: u32, slot: u16, delta: i32) -> Option<Intent> {
        let word = self.count_word(index, slot).load(Ordering::Relaxed);
        let count = u16::try_from(i32::from(count_of(word, slot)) + delta).ok()?;
        let openers = self.word(index, OPENERS).load(Ordering::Relaxed);
        let openers = u64::try_from(openers as i64 + i64::from(delta)).expect("openers >= 0");
        Some(Intent {
            op: op(ADJUST, index),
            args: [u64::from(slot), with_count(word, slot, count), openers, 0],
        })
    }

    /// O1: opens `key` for `me` (a file of `size` bytes, modified at `mtime_ns`, as its
    /// opener's `fstat` says): its record found or inserted, `me`'s count raised. A table
    /// of records holding no index (no record is dropped: `open_with`).
    ///
    /// Context: `me` is LIVE in `slots`; takes the lock (spins while a live holder holds
    /// it).
    pub(crate) fn open<R: Run>(
        &self,
        key: FileKey,
        size: u64,
        mtime_ns: u64,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Opened, Died> {
        self.open_with(key, size, mtime_ns, me, slots, run, None)
    }

    /// O1 with R1 for the record in the way (module docs, "Drops"), given `drop` (the
    /// records' pages' drop): a record of `key` whose stamp differs and which nobody has
    /// open is dropped and a new one inserted (`Stamp::Changed` then means it is in use,
    /// or a page of it stayed pinned); a full table drops a record nobody has open (the
    /// first on `key`'s probe path whose pages all drop) and inserts there.
    ///
    /// Context: as `open`; `drop` takes the queue's, the record's tree's and the
    /// allocator's locks (after this one: the lock order).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open_with<R: Run>(
        &self,
        key: FileKey,
        size: u64,
        mtime_ns: u64,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
        mut drop: Option<DropPages<'_>>,
    ) -> Result<Opened, Died> {
        let held = self.take(me, slots, run)?;
        let slot = me.slot.0;
        let mut probed = self.probe(&key);
        if let (Ok(index), Some(drop)) = (probed, drop.as_mut()) {
            if self.word(index, MTIME).load(Ordering::Relaxed) != mtime_ns
                && self.word(index, OPENERS).load(Ordering::Relaxed) == 0
                && self.word(index, WRITER).load(Ordering::Relaxed) & ORPHANED == 0
                && self.drop_record(&held, self.id_at(index), &mut **drop, run)?
            {
                probed = self.probe(&key);
            }
        }
        if let (Err(None), Some(drop)) = (probed, drop.as_mut()) {
            if let Some(index) = self.evict_one(&held, &key, &mut **drop, run)? {
                probed = Err(Some(index));
            }
        }
        let opened = match probed {
            Ok(index) => match self.adjust(index, slot, 1) {
                Some(intent) => {
                    self.change(&held, &intent, run)?;
                    let tag = self.word(index, TAG).load(Ordering::Relaxed);
                    // A record with a writer is kept current by it (W1): the disk's
                    // stamp moves with its writeback, its pages do not go stale; so is
                    // one whose writer died with a keeper (`ORPHANED`, `WRITTEN`) unless
                    // a writable open outside the domain retired it since.
                    let stamp_now = self.word(index, MTIME).load(Ordering::Relaxed);
                    let writer = self.word(index, WRITER).load(Ordering::Relaxed);
                    let stamp = if stamp_now == mtime_ns
                        || is_live_writer(writer)
                        || (holder_of(writer) != 0 && stamp_now != RETIRED_STAMP)
                    {
                        Stamp::Same
                    } else {
                        Stamp::Changed
                    };
                    Opened::Open {
                        id: FileId {
                            index,
                            generation: tag as u32,
                        },
                        stamp,
                    }
                }
                None => Opened::TooMany,
            },
            Err(None) => Opened::Full,
            Err(Some(index)) => {
                let tag = self.word(index, TAG).load(Ordering::Relaxed);
                let generation = (tag as u32)
                    .checked_add(1)
                    .expect("a record's generations wrapped");
                let key_intent = Intent {
                    op: op(KEY, index),
                    args: [key.dev, key.ino, key.born_ns, mtime_ns],
                };
                self.change(&held, &key_intent, run)?;
                let used = self.line(USED).load(Ordering::Relaxed) + 1;
                let tombs = self.line(TOMBS).load(Ordering::Relaxed) - u64::from(tag != EMPTY);
                let publish = Intent {
                    op: op(PUBLISH, index),
                    args: [
                        size,
                        LIVE | u64::from(generation),
                        u64::from(slot) << 48,
                        (used << 32) | tombs,
                    ],
                };
                self.change(&held, &publish, run)?;
                Opened::Open {
                    id: FileId { index, generation },
                    stamp: Stamp::Same,
                }
            }
        };
        held.unlock(run)?;
        Ok(opened)
    }

    /// The id of record `index`, as its tag says.
    fn id_at(&self, index: u32) -> FileId {
        FileId {
            index,
            generation: self.word(index, TAG).load(Ordering::Relaxed) as u32,
        }
    }

    /// R1 under `held` for the LIVE record `id` nobody has open: its pages and tree
    /// dropped (`drop`), then REMOVE. Whether it was removed (not: a page stayed).
    fn drop_record<R: Run>(
        &self,
        held: &Held<'_, '_>,
        id: FileId,
        drop: &mut dyn FnMut(FileId) -> Result<bool, Died>,
        run: &R,
    ) -> Result<bool, Died> {
        debug_assert_eq!(self.word(id.index, OPENERS).load(Ordering::Relaxed), 0);
        if !drop(id)? {
            return Ok(false);
        }
        let used = self.line(USED).load(Ordering::Relaxed) - 1;
        let tombs = self.line(TOMBS).load(Ordering::Relaxed) + 1;
        let intent = Intent {
            op: op(REMOVE, id.index),
            args: [TOMB | u64::from(id.generation), (used << 32) | tombs, 0, 0],
        };
        self.change(held, &intent, run)?;
        Ok(true)
    }

    /// A full table's eviction for `key` (`open_with`): the first record on `key`'s probe
    /// path that nobody has open and whose pages all drop, removed. Its index (a
    /// tombstone now, the table's only non-LIVE record), or `None`.
    fn evict_one<R: Run>(
        &self,
        held: &Held<'_, '_>,
        key: &FileKey,
        drop: &mut dyn FnMut(FileId) -> Result<bool, Died>,
        run: &R,
    ) -> Result<Option<u32>, Died> {
        let start = hash(key);
        for i in 0..self.capacity {
            let index = (start.wrapping_add(u64::from(i)) as u32) & (self.capacity - 1);
            let tag = self.word(index, TAG).load(Ordering::Relaxed);
            // (An ORPHANED record's HELD pages are not on disk yet: a drop ignores marks.)
            if tag & KIND == LIVE
                && self.word(index, OPENERS).load(Ordering::Relaxed) == 0
                && self.word(index, WRITER).load(Ordering::Relaxed) & ORPHANED == 0
                && self.drop_record(held, self.id_at(index), drop, run)?
            {
                return Ok(Some(index));
            }
        }
        Ok(None)
    }

    /// Retires the stamp of `key`'s record, if it has one (module docs, "Drops"): this
    /// process is about to write the file, so the next open of it, once nobody has the
    /// record open, drops its pages (cached before the write) instead of reading them.
    /// Whether a record was found.
    ///
    /// Context: as `open`.
    pub(crate) fn retire_stamp<R: Run>(
        &self,
        key: &FileKey,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<bool, Died> {
        let held = self.take(me, slots, run)?;
        let found = match self.probe(key) {
            Ok(index) => {
                let intent = Intent {
                    op: op(STAMP, index),
                    args: [RETIRED_STAMP, 0, 0, 0],
                };
                self.change(&held, &intent, run)?;
                true
            }
            Err(_) => false,
        };
        held.unlock(run)?;
        Ok(found)
    }

    /// W1: `me`, which has `id` open, asks to become its writer (docs/sharing.md "Writes
    /// seen across processes", "Two writing processes"), as `ask` says.
    ///
    /// It is claimed when the record is current (LIVE, its stamp not retired), nobody
    /// holds the role (0, `WRITTEN`; not `ORPHANED`, at an open too: the dead holder's
    /// keeper may still write older bytes, which would land over the claimant's, whose
    /// own persistent cache may be in another segment directory than the dead one's) and
    /// nobody else asked first (`WANTED` 0 or `me`): one
    /// intent, WRITER = `me` (its `WANTED` cleared). Else `Busy`, and a request to write
    /// leaves `me` as `WANTED` if nobody is: the holder hands the role over at its next
    /// write, writeback pass or sync (mapping/domain.rs, "Two writing processes").
    ///
    /// Context: as `open`; `me` has `id` open (its handle counted).
    pub(crate) fn request_writer<R: Run>(
        &self,
        id: FileId,
        ask: Ask,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Request, Died> {
        let held = self.take(me, slots, run)?;
        let mine = u64::from(me.slot.0) + 1;
        let writer = self.word(id.index, WRITER).load(Ordering::Relaxed);
        let (holder, wanted) = (holder_of(writer), wanted_of(writer));
        let live = self.names(id, Ordering::Relaxed);
        // A retired stamp: another process wrote the file outside the domain (A2), so the
        // record's pages may be stale: no writer keeps it current.
        let stamp = self.word(id.index, MTIME).load(Ordering::Relaxed);
        let request = if !live || stamp == RETIRED_STAMP {
            Request::Stale
        } else if claimable(holder, run.flaw()) && (wanted == 0 || wanted == mine) {
            self.change(&held, &write_intent(id.index, mine, stamp), run)?;
            Request::Claimed
        } else {
            if ask == Ask::ToWrite && wanted == 0 {
                let asked = holder | (mine << WANTED_SHIFT);
                self.change(&held, &write_intent(id.index, asked, stamp), run)?;
            }
            Request::Busy
        };
        held.unlock(run)?;
        if request == Request::Busy && ask == Ask::ToWrite && (wanted == 0 || wanted == mine) {
            run.at(Step::Requested)?;
        }
        Ok(request)
    }

    /// `me`'s request of `id`'s writer role (`WANTED`), if it made one, withdrawn: it will
    /// not write after all (its writable handles closed, or its wait failed), so that the
    /// role is not kept for it.
    ///
    /// Context: as `open`; `me` has `id` open.
    pub(crate) fn withdraw<R: Run>(
        &self,
        id: FileId,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        let held = self.take(me, slots, run)?;
        let writer = self.word(id.index, WRITER).load(Ordering::Relaxed);
        let live = self.names(id, Ordering::Relaxed);
        if live && wanted_of(writer) == u64::from(me.slot.0) + 1 {
            let stamp = self.word(id.index, MTIME).load(Ordering::Relaxed);
            self.change(
                &held,
                &write_intent(id.index, holder_of(writer), stamp),
                run,
            )?;
        }
        held.unlock(run)
    }

    /// Whether a `request_writer` by `me` to write would do something now: claim `id`'s
    /// role, find the record stale, or leave `me`'s request (nobody asked): a lock-free
    /// look for a waiting requester (`Busy` before), which asks again once it is true.
    pub(crate) fn worth_asking<R: Run>(&self, id: FileId, me: Holder, run: &R) -> bool {
        let writer = self.word(id.index, WRITER).load(Ordering::Acquire);
        let (holder, wanted) = (holder_of(writer), wanted_of(writer));
        let mine = u64::from(me.slot.0) + 1;
        let stale = !self.names(id, Ordering::Acquire)
            || self.word(id.index, MTIME).load(Ordering::Acquire) == RETIRED_STAMP;
        stale || wanted == 0 || (claimable(holder, run.flaw()) && wanted == mine)
    }

    /// Whether `id` still names a LIVE record (not removed, its place not reused), its tag
    /// loaded with `order`.
    fn names(&self, id: FileId, order: Ordering) -> bool {
        self.word(id.index, TAG).load(order) == LIVE | u64::from(id.generation)
    }

    /// Whether another process than `me` asked for `id`'s writer role (`WANTED`): the
    /// holder's lock-free look at each write's start and each writeback pass.
    pub(crate) fn wanted_by_other(&self, id: FileId, me: Holder) -> bool {
        let wanted = wanted_of(self.word(id.index, WRITER).load(Ordering::Acquire));
        wanted != 0 && wanted != u64::from(me.slot.0) + 1
    }

    /// W3: `me`, the writer of `id`, detaches: the record's stamp set to `mtime_ns` (the
    /// file's, now that every byte it wrote is on disk) and its WRITER cleared in one
    /// intent; `me`'s open of it stays (the caller closes it).
    ///
    /// Context: as `open`; `me` is `id`'s writer (asserted).
    pub(crate) fn release_writer<R: Run>(
        &self,
        id: FileId,
        mtime_ns: u64,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        let held = self.take(me, slots, run)?;
        let writer = self.word(id.index, WRITER).load(Ordering::Relaxed);
        assert_eq!(
            holder_of(writer),
            u64::from(me.slot.0) + 1,
            "a release of {id:?} by {me:?}, which is not its writer"
        );
        // A stamp another writable process retired meanwhile stays retired: its writes
        // are not in the domain.
        let stamp = if self.word(id.index, MTIME).load(Ordering::Relaxed) == RETIRED_STAMP {
            RETIRED_STAMP
        } else {
            mtime_ns
        };
        // Who asked for the role (`WANTED`) keeps asking: it claims the role next.
        let intent = write_intent(id.index, writer & WANTED, stamp);
        self.change(&held, &intent, run)?;
        held.unlock(run)
    }

    /// The writer of `id` (its slot), if it has one (tests).
    pub(crate) fn writer(&self, id: FileId) -> Option<u16> {
        let writer = self.word(id.index, WRITER).load(Ordering::Acquire);
        is_live_writer(writer).then(|| (holder_of(writer) - 1) as u16)
    }

    /// C1: one of `me`'s handles on `id` closed. The record stays (its pages cached)
    /// until `remove`.
    ///
    /// Context: as `open`; `me` has a handle open on `id` (asserted).
    pub(crate) fn close<R: Run>(
        &self,
        id: FileId,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        let held = self.take(me, slots, run)?;
        assert!(
            self.names(id, Ordering::Relaxed),
            "a close of {id:?}, which is not in the table"
        );
        let intent = self
            .adjust(id.index, me.slot.0, -1)
            .unwrap_or_else(|| panic!("a close of {id:?} by {me:?}, which has it not open"));
        self.change(&held, &intent, run)?;
        held.unlock(run)
    }

    /// R1: removes `id` if nobody has it open, in a table of records holding no index
    /// (`remove_with` drops a record's pages first).
    ///
    /// Context: as `open`.
    pub(crate) fn remove<R: Run>(
        &self,
        id: FileId,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Removal, Died> {
        self.remove_with(id, me, slots, run, &mut |_| Ok(true))
    }

    /// R1: removes `id` if nobody has it open, its pages and tree dropped first by `drop`
    /// (module docs, "Drops"); `Removal::Busy` if a page stayed (the record stays, with
    /// fewer pages).
    ///
    /// Context: as `open_with`.
    pub(crate) fn remove_with<R: Run>(
        &self,
        id: FileId,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
        drop: DropPages<'_>,
    ) -> Result<Removal, Died> {
        let held = self.take(me, slots, run)?;
        let removed = if !self.names(id, Ordering::Relaxed) {
            Removal::Gone
        } else if self.word(id.index, OPENERS).load(Ordering::Relaxed) != 0 {
            Removal::InUse
        } else if self.drop_record(&held, id, drop, run)? {
            Removal::Done
        } else {
            Removal::Busy
        };
        held.unlock(run)?;
        Ok(removed)
    }

    /// S1: the steward's sweep of a dead process: takes the lock (over from `dead`, if it
    /// held it, finishing its change) and drops every handle `dead` had open; a record
    /// `dead` was the writer of is `ORPHANED` (`DeadWrites::Kept`: a keeper writes its
    /// pages back) or retired (`Lost`). Returns how many handles.
    ///
    /// Context: the steward (`me`), after `SlotTable::mark_dead(dead)`, before
    /// `free_dead(dead)`. Scans every record.
    pub(crate) fn sweep<R: Run>(
        &self,
        dead: Holder,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
        writes: DeadWrites,
    ) -> Result<u64, Died> {
        assert!(!slots.is_live(dead), "a sweep of a live process {dead:?}");
        let held = self.take(me, slots, run)?;
        let slot = dead.slot.0;
        let mut dropped = 0;
        for index in 0..self.capacity {
            let count = count_of(self.count_word(index, slot).load(Ordering::Relaxed), slot);
            if count == 0 {
                continue;
            }
            let writer = self.word(index, WRITER).load(Ordering::Relaxed);
            let dead_one = u64::from(slot) + 1;
            // A request of the dead one's is forgotten: the next asks again.
            let forgets = wanted_of(writer) == dead_one && !request_kept(run.flaw());
            let wanted = if forgets { 0 } else { writer & WANTED };
            let stamp = self.word(index, MTIME).load(Ordering::Relaxed);
            if holder_of(writer) == dead_one {
                // A dead writer's record ("Death"): with a keeper, its returned writes stay
                // HELD until the keeper wrote them (the steward keeps the marks) and the
                // record stays current (`ORPHANED`); without, they are reclaimable from
                // now on and never on disk: retired, so that the next admission once
                // nobody has it open drops its pages.
                let intent = match writes {
                    DeadWrites::Kept => write_intent(index, ORPHANED | dead_one | wanted, stamp),
                    DeadWrites::Lost => write_intent(index, wanted, RETIRED_STAMP),
                };
                self.change(&held, &intent, run)?;
            } else if forgets {
                self.change(&held, &write_intent(index, holder_of(writer), stamp), run)?;
            }
            let intent = self
                .adjust(index, slot, -i32::from(count))
                .expect("a count dropped to 0");
            self.change(&held, &intent, run)?;
            dropped += u64::from(count);
        }
        held.unlock(run)?;
        Ok(dropped)
    }

    /// The keeper of the dead `dead` is done: every record still `ORPHANED` by it made
    /// `WRITTEN` (no writer; its pages the file's, on disk). Returns how many.
    ///
    /// Context: the steward, after `release_marks(dead)` and before `free_dead(dead)`
    /// (the slot DEAD: `ORPHANED | slot + 1` names only it).
    pub(crate) fn written<R: Run>(
        &self,
        dead: Holder,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<u32, Died> {
        let held = self.take(me, slots, run)?;
        let orphaned = ORPHANED | (u64::from(dead.slot.0) + 1);
        let mut made = 0;
        for index in 0..self.capacity {
            let writer = self.word(index, WRITER).load(Ordering::Relaxed);
            if self.word(index, TAG).load(Ordering::Relaxed) & KIND == LIVE
                && holder_of(writer) == orphaned
            {
                let stamp = self.word(index, MTIME).load(Ordering::Relaxed);
                let intent = write_intent(index, WRITTEN | (writer & WANTED), stamp);
                self.change(&held, &intent, run)?;
                made += 1;
            }
        }
        held.unlock(run)?;
        Ok(made)
    }

    /// The record of `key`, read lock-free (module docs, "Lookup"); `None` is a miss,
    /// not a proof of absence.
    ///
    /// Context: any process; no lock, no store. Reads the region as untrusted input.
    pub(crate) fn lookup(&self, key: &FileKey) -> Option<Found> {
        let start = hash(key);
        for i in 0..self.capacity {
            let index = (start.wrapping_add(u64::from(i)) as u32) & (self.capacity - 1);
            let tag = self.word(index, TAG).load(Ordering::Acquire);
            if tag == EMPTY {
                return None;
            }
            if tag & KIND != LIVE {
                continue;
            }
            let seen = self.key_of(index);
            let size = self.word(index, SIZE).load(Ordering::Acquire);
            let mtime_ns = self.word(index, MTIME).load(Ordering::Acquire);
            if self.word(index, TAG).load(Ordering::Acquire) != tag {
                // Removed (and perhaps reused) under us: this place may hold the key
                // again; a miss sends the caller to the lock.
                return None;
            }
            if seen == *key {
                return Some(Found {
                    id: FileId {
                        index,
                        generation: tag as u32,
                    },
                    size,
                    mtime_ns,
                });
            }
        }
        None
    }

    /// The size word of `id` (module docs, "The size word"), or `None` if `id` names no
    /// record any more.
    ///
    /// Context: any process; lock-free.
    pub(crate) fn size(&self, id: FileId) -> Option<u64> {
        let tag = LIVE | u64::from(id.generation);
        if self.word(id.index, TAG).load(Ordering::Acquire) != tag {
            return None;
        }
        let size = self.word(id.index, SIZE).load(Ordering::Acquire);
        (self.word(id.index, TAG).load(Ordering::Acquire) == tag).then_some(size)
    }

    /// The size word of `id`, which the caller holds open: a handle keeps it, so that its
    /// hit's load of the size (one load per `read_at`, with no check of the record's tag,
    /// since an open record is not removed) waits only for the handle.
    ///
    /// Context: the caller has a handle open on `id` (debug-asserted) while it uses the
    /// word (a record's words are another record's after its removal).
    pub(crate) fn size_word(&self, id: FileId) -> &'r AtomicU64 {
        debug_assert!(self.names(id, Ordering::Relaxed), "{id:?} not open");
        self.word(id.index, SIZE)
    }

    /// A write ended at `end`: the size raised to at least `end` (never lowered).
    /// Returns the size now.
    ///
    /// Context: the caller has a handle open on `id` (so it is not removed meanwhile).
    pub(crate) fn extend_size(&self, id: FileId, end: u64) -> u64 {
        debug_assert!(self.names(id, Ordering::Relaxed), "{id:?} not open");
        let word = self.word(id.index, SIZE);
        let mut was = word.load(Ordering::Acquire);
        while was < end {
            match word.compare_exchange(was, end, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return end,
                Err(seen) => was = seen,
            }
        }
        was
    }

    /// A truncation (or any `ftruncate`) set the file's size to `size`.
    ///
    /// Context: as `extend_size`.
    pub(crate) fn set_size(&self, id: FileId, size: u64) {
        debug_assert!(self.names(id, Ordering::Relaxed), "{id:?} not open");
        self.word(id.index, SIZE).swap(size, Ordering::AcqRel);
    }

    /// The invariant (module docs), checked on a quiet table; returns every LIVE record.
    ///
    /// Context: nobody changes the table meanwhile (a test, or the steward alone).
    pub(crate) fn check(&self, slots: &SlotTable<'_>) -> Result<Vec<RecordCensus>, String> {
        if let Some(holder) = self.lock.holder() {
            return Err(format!("the lock is held by {holder:?}"));
        }
        if self.lock.intent_published() {
            return Err("an intent is published".into());
        }
        let (mut used, mut tombs) = (0u64, 0u64);
        let mut live = Vec::new();
        let mut keys = std::collections::HashSet::new();
        for index in 0..self.capacity {
            let tag = self.word(index, TAG).load(Ordering::Acquire);
            let openers = self.word(index, OPENERS).load(Ordering::Acquire);
            let mut counts = Vec::new();
            for slot in 0..self.slots {
                let count = count_of(self.count_word(index, slot).load(Ordering::Acquire), slot);
                if count != 0 {
                    counts.push((slot, count));
                }
            }
            let sum: u64 = counts.iter().map(|(_, c)| u64::from(*c)).sum();
            match tag & KIND {
                LIVE => {
                    used += 1;
                    if sum != openers {
                        return Err(format!(
                            "record {index}: openers {openers}, counts {counts:?}"
                        ));
                    }
                    for (slot, _) in &counts {
                        let (_, holder) = slots.state(SlotIndex(*slot));
                        if !slots.is_live(holder) {
                            return Err(format!(
                                "record {index}: a count of dead slot {slot}: {counts:?}"
                            ));
                        }
                    }
                    let key = self.key_of(index);
                    if !keys.insert(key) {
                        return Err(format!("record {index}: a second record of {key:?}"));
                    }
                    if self.probe(&key) != Ok(index) {
                        return Err(format!("record {index}: not on {key:?}'s probe path"));
                    }
                    let writer = self.word(index, WRITER).load(Ordering::Acquire);
                    let holder = is_live_writer(writer).then(|| holder_of(writer));
                    let wanted = Some(wanted_of(writer)).filter(|&w| w != 0);
                    for (what, slot) in [("writer", holder), ("requester", wanted)] {
                        let Some(slot) = slot.map(|s| (s - 1) as u16) else {
                            continue;
                        };
                        let count = self.count_word(index, slot).load(Ordering::Acquire);
                        if count_of(count, slot) == 0 {
                            return Err(format!(
                                "record {index}: {what} slot {slot} has it not open"
                            ));
                        }
                    }
                    live.push(RecordCensus {
                        id: FileId {
                            index,
                            generation: tag as u32,
                        },
                        key,
                        size: self.word(index, SIZE).load(Ordering::Acquire),
                        openers: counts,
                    });
                }
                kind => {
                    if kind == TOMB {
                        tombs += 1;
                    } else if tag != EMPTY {
                        return Err(format!("record {index}: a tag {tag:#x}"));
                    }
                    if openers != 0 || sum != 0 {
                        return Err(format!(
                            "record {index} not live, with openers {openers}, counts {counts:?}"
                        ));
                    }
                }
            }
        }
        let (used_word, tombs_word) = (
            self.line(USED).load(Ordering::Acquire),
            self.line(TOMBS).load(Ordering::Acquire),
        );
        if (used_word, tombs_word) != (used, tombs) {
            return Err(format!(
                "USED {used_word}, TOMBS {tombs_word}; {used} live and {tombs} tombstones"
            ));
        }
        Ok(live)
    }
}
