//! A mapping's use of its cache's domain (issue 45, docs/sharing.md "A `Cache` with a
//! domain", the rule in one process): a file is read through the domain only while this
//! process holds no newer bytes of it than the disk.
//!
//! The domain reads the disk; this process's newer bytes are in its private mapping: a
//! writable handle's writes (a write returns once its bytes are in a private folio), dirty
//! folios (also a restart's adopted ones) and folios under writeback. So:
//!   A1. A read-only open is admitted to the domain (`admit`) only if, under this
//!       mapping's `DomainUse` lock, no writable handle is open, no folio is marked dirty
//!       and no writeback of the file is running (read in that order: writeback clears the
//!       dirty mark after its ticket is taken and ends the ticket after the write, so a
//!       clean index read before an empty ticket set means the bytes were on disk).
//!       Else it reads privately (counted by the caller).
//!   A2. A writable open (`writer_opened`, from `File::new`, before the handle exists)
//!       counts itself under the lock and retires every domain handle of the mapping
//!       (`DomainFile::retire`: a flag on the line its read already loads): their reads
//!       take the private path from then on. Every write or `set_len` goes through a
//!       writable handle, so it comes after A2 and a read that comes after it (in any
//!       thread that saw it return) sees the flag. The caller then retires the domain's
//!       record of the file (its stamp: `SharedReader::retire`), so that a later
//!       admission, once this process is clean again, drops the record's pages and reads
//!       the disk rather than the pages cached before the write.
//!   A3. A writable handle's drop lowers the count (`writer_closed`).
//!   A4. Other processes see this process's writes (docs/sharing.md "Writes seen across
//!       processes"): a writable open of a domain cache makes this process the writer of
//!       the domain's record of the file (`attach_writer`: one `DomainWriter` per
//!       mapping, held here and by every writable handle), instead of retiring the record;
//!       every write and `set_len` then puts the pages it changed into the domain before
//!       it returns (`File::publish`), and the record stays current. When the domain will
//!       not have us as the writer (another process is, or the record is stale), A2's
//!       retirement of the record stands.
//!   A5. The writer detaches (`settle_writer`: its marks cleared, the record's stamp the
//!       file's, its writer mark cleared) once no writable handle is open and the file is
//!       clean (A1's test), looked at a writable handle's drop, at a writeback's end and
//!       at a sync's end (the writeback's look comes after its ticket ends, which a sync
//!       waiting for that ticket may beat: a sync that returned on a clean file with no
//!       writable handle leaves it detached).
//! A1 and A2 hold one lock: an admission either comes first (its handle is on the list,
//! retired by A2) or sees the writer counted (refused).
//!
//! Protection: the count, the list and the writer under `DomainUse`'s mutex (taken by
//! opens, writable drops and a writeback's start and end, never by a read); a handle's
//! retired flag is an atomic.
//!
//! **Two writing processes** (docs/sharing.md "Two writing processes"): one process at a
//! time is the record's writer; another with a writable handle **follows** it.
//!   F1. A writable open whose record another process is the writer of (or whose dead
//!       writer's keeper still writes) makes this process a follower (`attach_writer`:
//!       `Role::Follower`, its open of the record kept): it holds no newer bytes, so
//!       every domain handle of the mapping reads through the domain (a writable
//!       handle has one too: `add_writable`), and sees the writer's writes as a reader
//!       does.
//!   F2. A write, `set_len` or sync of a follower first takes the role (`take_role`):
//!       asked for in the record (`WANTED`), waited for until the writer hands it over,
//!       claimed; then the private pages dropped (older than the other writer's bytes,
//!       which are on disk now: it wrote them back before it let the role go), the
//!       mapping's size made the record's, and the domain handles retired (A2: our
//!       reads private again, our writes published as A4's).
//!   F3. A writer whose role another process asked for hands it over (`yield_role`) at
//!       its next write, or at the writeback thread's next pass (every
//!       `BACKGROUND_PERIOD` while it holds a role): with every write of the file in
//!       this process done and none starting (the whole file's range), it writes back
//!       every dirty page and waits (its bytes on disk), then becomes a follower (its
//!       domain handles restored, its private pages dropped, its size no longer the
//!       file's: `settle_size` leaves the disk's alone) and detaches (A5's detach: its
//!       marks cleared, the role left to the requester, which claims it). With no
//!       writable handle open any more it has no role after; if the domain refuses its
//!       follower's open, it keeps the role and tries again at its next pass.
//! So every byte any process reads is the newest returned one: the writer's through its
//! private folios or the domain, a follower's and a reader's through the domain; and the
//! disk's page is never written by two processes at once (the role moves only once the
//! holder's writeback is done, and a dead holder's keeper finishes before the role is
//! claimed to write: `Ask::ToWrite`).
//!
//! Limits: a retired handle of a process that writes privately (the domain refused it,
//! or its record was stale) stays retired (it reads privately until it is closed, and
//! its domain open keeps the record open: a later admission of the file, by anyone,
//! finds the record in use and its stamp retired, and reads privately until every such
//! handle is closed). A hand-over writes the holder's dirty pages back: writes that
//! alternate between two processes cost a writeback each, and a holder that writes
//! nothing hands the role over within a writeback pass (up to `BACKGROUND_PERIOD`); a
//! holder stopped (`SIGSTOP`) keeps its followers' writes waiting. A follower's handles
//! refuse what a domain file refuses (`get_page`, the futures: `Unsupported`).

use std::fs::File as StdFile;
use std::io;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use super::{Invalidate, Mapping};
use crate::index::Mark;
use crate::memory::Memory;
use crate::shared::files::Request;
use crate::shared::reader::{DomainFile, DomainFollower, DomainReader, DomainWriter, WriterRole};
use crate::shared::Step;
use crate::types::{OpenMode, PageIndex};
use crate::write::range_lock::{RangeGuard, WHOLE_FILE};

/// This process's writable handles of a file and its domain handles (module docs).
#[derive(Debug, Default)]
pub(crate) struct DomainUse {
    inner: Mutex<Uses>,
    /// Held by a change of this process's role (`take_role`, `yield_role`), which waits
    /// for another process or for a writeback outside `inner`: one change at a time.
    turn: Mutex<()>,
    /// The role's kind (`Kind`), for a write's look without the lock.
    kind: AtomicU8,
    /// The mapping's size is not the file's: this process handed the writer role over
    /// (F3) and has not taken it again, so `settle_size` must not cut the disk's file to
    /// it (another process's appends).
    size_elsewhere: AtomicBool,
}

#[derive(Debug, Default)]
struct Uses {
    writers: u32,
    /// The domain handles admitted (A1; a follower's writable handles too: F1), weakly:
    /// a handle's drop is its removal.
    files: Vec<Weak<DomainFile>>,
    role: Role,
    /// What a writer that hands the role over needs to follow (F3): the first writable
    /// open's.
    rejoin: Option<Rejoin>,
}

/// This process's part in the domain's record of the file (module docs).
#[derive(Debug, Default)]
enum Role {
    /// None: no writable handle through the domain (a read-only process, or one the
    /// domain refused: A2's retirement stands).
    #[default]
    None,
    /// The writer of the file's record (A4), held from the first writable open (or a
    /// take, F2) until the file is clean with no writable handle open (A5) or the role is
    /// handed over (F3).
    Holder(Arc<DomainWriter>),
    /// Another process is the writer (F1).
    Follower(DomainFollower),
}

/// `Role`'s kind, in `DomainUse::kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    None = 0,
    Holder = 1,
    Follower = 2,
}

impl Role {
    fn kind(&self) -> Kind {
        match self {
            Role::None => Kind::None,
            Role::Holder(_) => Kind::Holder,
            Role::Follower(_) => Kind::Follower,
        }
    }
}

/// A writable open's reader, descriptor and mode, to follow the writer again (F3).
#[derive(Debug)]
pub(crate) struct Rejoin {
    pub(crate) reader: Arc<DomainReader>,
    pub(crate) fd: Arc<StdFile>,
    pub(crate) mode: OpenMode,
}

/// What `Mapping::attach_writer` made this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attached {
    /// The writer of the file's record (A4).
    Holder,
    /// A follower of another process's writer (F1).
    Follower,
    /// Neither: the domain refused the file or its record is stale (A2's retirement of
    /// the record stands: the caller retires it).
    Refused,
}

/// How `Mapping::yield_role` takes the whole file's range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RangeWait {
    /// Waits for this process's writes of the file in progress (a write's start).
    Wait,
    /// Hands over only if none is in progress (the writeback thread: a write in progress
    /// may wait for it, at the dirty limit; that write hands over at its end).
    Try,
}

/// What `Mapping::admit_domain` did.
pub(crate) enum DomainAdmission {
    /// Admitted: the handle reads through the domain.
    Admitted(Arc<DomainFile>),
    /// This process holds newer bytes of the file (A1): read privately.
    Newer,
    /// The domain refused it (its own reasons): read privately.
    Refused,
}

/// The longest pause between two requests of the role (F2): the holder hands it over
/// within a writeback pass (`BACKGROUND_PERIOD`, 100 ms) when it writes nothing.
const REQUEST_PAUSE_MAX: Duration = Duration::from_millis(2);

impl DomainUse {
    fn lock(&self) -> MutexGuard<'_, Uses> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn turn(&self) -> MutexGuard<'_, ()> {
        self.turn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `uses.role` made `role`, its kind stored for the lock-free look.
    fn set_role(&self, uses: &mut Uses, role: Role) -> Role {
        self.kind.store(role.kind() as u8, Ordering::Release);
        std::mem::replace(&mut uses.role, role)
    }
}

impl Uses {
    /// Every live domain handle of the mapping retired (A2) or restored (F3).
    fn for_each_file(&mut self, mut f: impl FnMut(&DomainFile)) {
        self.files.retain(|file| match file.upgrade() {
            Some(file) => {
                f(&file);
                true
            }
            None => false,
        });
    }
}

impl Mapping {
    /// A1 (module docs): `admit` (the domain's admission of the file) is asked only if
    /// this process holds no newer bytes of the file, under the lock A2 takes. While this
    /// process is the writer of the file's record, the handle is admitted retired (it
    /// reads privately, and reads through the domain once the role is handed over: F3).
    ///
    /// Context: an open; takes the mapping's `DomainUse` lock, around `admit` (which takes
    /// the domain's locks: nobody takes this one holding those).
    /// Errors: `admit`'s.
    pub(crate) fn admit_domain(
        &self,
        admit: impl FnOnce() -> io::Result<Option<DomainFile>>,
    ) -> io::Result<DomainAdmission> {
        let mut uses = self.domain.lock();
        let holder = matches!(uses.role, Role::Holder(_));
        if !holder
            && (uses.writers > 0 && matches!(uses.role, Role::None) || self.has_newer_bytes())
        {
            return Ok(DomainAdmission::Newer);
        }
        let Some(file) = admit()? else {
            return Ok(DomainAdmission::Refused);
        };
        if holder {
            file.retire();
        }
        let file = Arc::new(file);
        uses.files.retain(|f| f.strong_count() > 0);
        uses.files.push(Arc::downgrade(&file));
        Ok(DomainAdmission::Admitted(file))
    }

    /// Whether a folio is marked dirty, then whether a writeback of the file runs (A1's
    /// order, module docs).
    fn has_newer_bytes(&self) -> bool {
        let dirty = self
            .index
            .marked_walk(PageIndex(0), PageIndex::END, Mark::Dirty, &mut |_| {
                ControlFlow::Break(())
            })
            .is_break();
        dirty || self.write.writeback_running()
    }

    /// A3's count: a writable handle of this mapping is being opened. Its domain handles
    /// are retired by `attach_writer` (A2) unless this process follows another writer, or
    /// by `retire_files` for a private writable open.
    ///
    /// Context: `File::new`, before the handle is handed out; takes the `DomainUse` lock.
    pub(crate) fn writer_opened(&self) {
        let mut uses = self.domain.lock();
        uses.writers = uses.writers.checked_add(1).expect("2^32 writable handles");
    }

    /// A2 for a writable open that writes privately (`OpenOptions::private`): every domain
    /// handle of the mapping retired.
    ///
    /// Context: the open, before the handle is handed out; takes the `DomainUse` lock.
    pub(crate) fn retire_files(&self) {
        self.domain.lock().for_each_file(DomainFile::retire);
    }

    /// A4, F1: this process made the writer of the file's record, or a follower of the
    /// process that is, by `make` at the first writable open (later opens keep the role
    /// the first made). `Refused`: the domain would not have us (the caller retires the
    /// record as A2 says).
    ///
    /// Context: a writable open, after A2; takes the `DomainUse` lock around `make`.
    /// Errors: `make`'s.
    pub(crate) fn attach_writer(
        &self,
        rejoin: Rejoin,
        make: impl FnOnce() -> io::Result<Option<WriterRole>>,
    ) -> io::Result<Attached> {
        let mut uses = self.domain.lock();
        match uses.role {
            // (Its files retired already: at the role's taking, or admitted retired.)
            Role::Holder(_) => return Ok(Attached::Holder),
            Role::Follower(_) => return Ok(Attached::Follower),
            Role::None => {}
        }
        let attached = match make()? {
            Some(WriterRole::Holder(writer)) => {
                self.domain
                    .set_role(&mut uses, Role::Holder(Arc::new(writer)));
                Attached::Holder
            }
            // A process with newer bytes of the file (written while the domain refused
            // it) cannot follow: its reads must stay private.
            Some(WriterRole::Follower(follower)) if !self.has_newer_bytes() => {
                self.domain.set_role(&mut uses, Role::Follower(follower));
                self.domain.size_elsewhere.store(true, Ordering::Release);
                self.forget_size_on_disk();
                Attached::Follower
            }
            Some(WriterRole::Follower(_)) | None => Attached::Refused,
        };
        // A2: a writer's reads are private (its newer bytes are), a follower's are not.
        if attached != Attached::Follower {
            uses.for_each_file(DomainFile::retire);
        }
        if attached != Attached::Refused {
            uses.rejoin.get_or_insert(rejoin);
        }
        Ok(attached)
    }

    /// F1: a writable handle's own domain handle (`admit`, as A1's), retired unless this
    /// process follows another writer; `None` if this process has no role in the domain
    /// or the domain refused the file.
    ///
    /// Context: a writable open, after `attach_writer`; takes the `DomainUse` lock
    /// around `admit`.
    /// Errors: `admit`'s.
    pub(crate) fn add_writable(
        &self,
        admit: impl FnOnce() -> io::Result<Option<DomainFile>>,
    ) -> io::Result<Option<Arc<DomainFile>>> {
        let mut uses = self.domain.lock();
        if matches!(uses.role, Role::None) {
            return Ok(None);
        }
        let Some(file) = admit()? else {
            return Ok(None);
        };
        if !matches!(uses.role, Role::Follower(_)) {
            file.retire();
        }
        let file = Arc::new(file);
        uses.files.retain(|f| f.strong_count() > 0);
        uses.files.push(Arc::downgrade(&file));
        Ok(Some(file))
    }

    /// The kind of this process's role in the domain's record of the file (a write's
    /// look: one load).
    pub(crate) fn role_kind(&self) -> Kind {
        match self.domain.kind.load(Ordering::Acquire) {
            1 => Kind::Holder,
            2 => Kind::Follower,
            _ => Kind::None,
        }
    }

    /// Whether this process is the writer and another process asked for the role (F3).
    pub(crate) fn role_wanted(&self) -> bool {
        if self.role_kind() != Kind::Holder {
            return false;
        }
        match &self.domain.lock().role {
            Role::Holder(writer) => writer.wanted_by_other(),
            _ => false,
        }
    }

    /// F2: this follower becomes the writer of the file's record: asks for the role,
    /// waits until the holder hands it over, claims it; then drops its private pages
    /// (older than the holder's bytes, now on disk), makes its size the record's and
    /// retires its domain handles. Returns at once if this process is not a follower
    /// (any more). A record found stale makes it a process with no role (its reads and
    /// writes private, its pages dropped: another process wrote the file outside the
    /// domain).
    ///
    /// Context: a write's, `set_len`'s or a sync's start, no lock of the file held; takes
    /// the `DomainUse` locks and the domain's; sleeps until the holder hands the role
    /// over. Errors: a test lever's death only.
    pub(crate) fn take_role(&self, mem: &Memory) -> io::Result<()> {
        let _turn = self.domain.turn();
        let mut pause = Duration::from_micros(50);
        loop {
            let request = match &self.domain.lock().role {
                Role::Follower(follower) => follower.request()?,
                _ => return Ok(()),
            };
            match request {
                Request::Claimed => break,
                // Lock-free looks until a request would do something, then the request.
                Request::Busy => loop {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(REQUEST_PAUSE_MAX);
                    let ask = match &self.domain.lock().role {
                        Role::Follower(follower) => follower.worth_asking(),
                        _ => true,
                    };
                    if ask {
                        break;
                    }
                },
                Request::Stale => {
                    self.write_privately(mem)?;
                    return Ok(());
                }
            }
        }
        // Our private pages first, while every domain handle still reads the domain
        // (nothing reads them meanwhile): then the handles read privately, from the disk.
        self.invalidate(mem, PageIndex(0), PageIndex::END, Invalidate::Truncate);
        // The record's size, ours (the writer lock before `DomainUse`'s, as a publish
        // takes them).
        let size = match &self.domain.lock().role {
            Role::Follower(follower) => follower.len(),
            _ => unreachable!("a follower's role changed under its turn"),
        };
        {
            let _writer = self.write.lock_writer();
            self.set_size(size);
        }
        self.domain.size_elsewhere.store(false, Ordering::Release);
        let mut uses = self.domain.lock();
        // The kind stays `Follower` until the role is `Holder`: another thread's write
        // meanwhile waits for our turn (it never sees `None`, which writes privately).
        let Role::Follower(follower) = std::mem::take(&mut uses.role) else {
            unreachable!("a follower's role changed under its turn");
        };
        debug_assert!(!self.has_newer_bytes(), "a follower with newer bytes");
        let writer = follower.into_writer();
        uses.for_each_file(DomainFile::retire);
        self.domain
            .set_role(&mut uses, Role::Holder(Arc::new(writer)));
        Ok(())
    }

    /// F2's end when the record is stale (another process wrote the file outside the
    /// domain, or its writer died with no keeper): this process writes privately from now
    /// on, as a writer of a retired record always did, from the disk's bytes and size
    /// (its private pages, older than another writer's, dropped).
    ///
    /// Context: `take_role`, under the turn. Errors: `fstat`'s.
    fn write_privately(&self, mem: &Memory) -> io::Result<()> {
        // Everything first, while our handles still read the domain and our writes wait
        // for our turn (the kind still `Follower`); the role `None` last.
        self.invalidate(mem, PageIndex(0), PageIndex::END, Invalidate::Truncate);
        let fd = self
            .domain
            .lock()
            .rejoin
            .as_ref()
            .map(|rejoin| rejoin.fd.clone());
        if let Some(fd) = fd {
            let size = fd.metadata()?.len();
            let _writer = self.write.lock_writer();
            self.set_size(size);
        }
        self.domain.size_elsewhere.store(false, Ordering::Release);
        let role = {
            let mut uses = self.domain.lock();
            uses.for_each_file(DomainFile::retire);
            self.domain.set_role(&mut uses, Role::None)
        };
        drop(role);
        Ok(())
    }

    /// F3: this writer hands the role over to the process that asked for it: with the
    /// whole file's range held (`wait` says how it is taken), `write_out` (every dirty
    /// page written back and waited for), then, if the file is clean, this process a
    /// follower (its domain handles restored, its private pages dropped) and the writer
    /// dropped (its detach: marks cleared, the role left to the requester). Whether it
    /// did (not if nobody asks, the range was busy, or a writeback failed and left pages
    /// dirty: the role is kept, and the requester waits).
    ///
    /// Context: a write's start (`Wait`) or the writeback thread (`Try`), no lock of the
    /// file held; takes the range, the `DomainUse` locks and the domain's.
    pub(crate) fn yield_role(
        &self,
        mem: &Memory,
        wait: RangeWait,
        write_out: impl FnOnce(),
    ) -> bool {
        let _turn = match wait {
            RangeWait::Wait => self.domain.turn(),
            RangeWait::Try => match self.domain.turn.try_lock() {
                Ok(turn) => turn,
                Err(_) => return false,
            },
        };
        if !self.role_wanted() {
            return false;
        }
        let _range: RangeGuard<'_> = match wait {
            RangeWait::Wait => self.write.lock_range(WHOLE_FILE.0, WHOLE_FILE.1),
            RangeWait::Try => match self.write.try_lock_range(WHOLE_FILE.0, WHOLE_FILE.1) {
                Some(range) => range,
                None => return false,
            },
        };
        write_out();
        // Our bytes are on disk, the role still ours: a death here (`Step::Yielding`, a
        // test's lever) leaves the requester to claim the role once we are swept.
        if let Some(writer) = self.domain_writer() {
            if writer.at(Step::Yielding).is_err() {
                return false;
            }
        }
        let writer = {
            let mut uses = self.domain.lock();
            if self.has_newer_bytes() {
                return false;
            }
            let rejoin = uses
                .rejoin
                .as_ref()
                .expect("a holder's first open left its rejoin");
            let role = if uses.writers == 0 {
                // No writable handle open (A5's detach had not come yet): nothing to
                // follow for.
                Role::None
            } else {
                let follower = rejoin
                    .fd
                    .try_clone()
                    .and_then(|fd| rejoin.reader.follow(fd, rejoin.mode));
                match follower {
                    Ok(Some(follower)) => {
                        uses.for_each_file(DomainFile::restore);
                        Role::Follower(follower)
                    }
                    // Refused (the table full), or no descriptor: we keep the role, and
                    // the requester waits for our next try.
                    _ => return false,
                }
            };
            self.domain.size_elsewhere.store(true, Ordering::Release);
            self.forget_size_on_disk();
            self.domain.set_role(&mut uses, role)
        };
        // Clean pages, older than the next writer's bytes soon: our domain handles read
        // the domain now.
        self.invalidate(mem, PageIndex(0), PageIndex::END, Invalidate::Unpinned);
        drop(writer);
        true
    }

    /// Whether this process handed the file's writer role over since it last wrote it
    /// (F3): its size is then not the file's, and the disk's is left alone.
    pub(crate) fn size_elsewhere(&self) -> bool {
        self.domain.size_elsewhere.load(Ordering::Acquire)
    }

    /// The writer of the file's record (A4), for a write's publish and a writeback that
    /// took a page.
    pub(crate) fn domain_writer(&self) -> Option<Arc<DomainWriter>> {
        // The look without the lock first: a private cache's write pays one load.
        if self.role_kind() != Kind::Holder {
            return None;
        }
        match &self.domain.lock().role {
            Role::Holder(writer) => Some(writer.clone()),
            _ => None,
        }
    }

    /// A5: the writer detaches once no writable handle is open and the file is clean (its
    /// bytes on disk: A1's test), and a follower with no writable handle open stops
    /// following: called at a writable handle's drop, at a writeback's end and at a
    /// sync's end. The detach itself (`DomainWriter`'s drop) runs after the lock is let
    /// go, once the last holder of it is gone.
    pub(crate) fn settle_writer(&self) {
        let role = {
            let mut uses = self.domain.lock();
            let idle = match uses.role {
                Role::None => false,
                Role::Holder(_) => uses.writers == 0 && !self.has_newer_bytes(),
                Role::Follower(_) => uses.writers == 0,
            };
            if !idle {
                return;
            }
            self.domain.set_role(&mut uses, Role::None)
        };
        drop(role);
    }

    /// A3: a writable handle of this mapping was dropped.
    ///
    /// Context: `File`'s drop; takes the `DomainUse` lock.
    pub(crate) fn writer_closed(&self) {
        {
            let mut uses = self.domain.lock();
            uses.writers = uses
                .writers
                .checked_sub(1)
                .expect("a writable handle's drop counted at its open");
        }
        self.settle_writer();
    }
}
