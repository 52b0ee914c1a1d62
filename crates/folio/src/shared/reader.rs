//! A `Cache`'s hold on its domain (issue 45 step 8, docs/sharing.md "A `Cache` with a
//! domain"): the process's membership and its reader owned together (`DomainReader`), so
//! that a cache and each of its files can keep them (`Arc`) for as long as they live and
//! read through them from any thread; and a file read through it (`DomainFile`).
//!
//! `SharedReader` (read.rs) borrows its member: its views of the region (the file table,
//! the allocator, the indexes) are the member's mapping's words. A `DomainReader` owns
//! both: the member in an `Arc` (its address fixed while the `Arc` lives), the reader over
//! a reference to it whose lifetime the type cannot name (`'static`, never handed out: every
//! method's borrow ends with the call). The reader is dropped first (its magazines'
//! frames returned), then the member detaches (`Drop`).
//!
//! Protection: as `SharedReader` (read.rs, "Threads": `Send + Sync`, its counters
//! atomics, its magazines under mutexes); `refused` an atomic.
//!
//! And this process as the writer of a file's record (`DomainWriter`: docs/sharing.md
//! "Writes seen across processes"): the pages its writes changed put into the domain.
//!
//! Limits: read.rs's (order-0 frames, readahead read synchronously); a forked
//! child cannot use its parent's `DomainReader` (the region is not mapped in it:
//! domain.rs, "Forks"; a touch faults): it builds its own.

use std::collections::HashMap;
use std::fs::File as StdFile;
use std::io;
use std::mem::ManuallyDrop;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_channel::oneshot;

use super::attach::{DomainConfig, Member};
use super::domain::FRAME_BYTES;
use super::files::{Ask, FileId, Removal, Request};
use super::index::Page;
use super::offload;
use super::queue::{held_mark, Appended, Shares};
use super::read::{Admitted, ReadCounters, SharedFile, SharedReader};
use super::Step;
use crate::types::OpenMode;

/// The frames a miss leases (and reclaims) at a time through a domain of `frames`: 16,
/// fewer in a small domain, so that its members' magazines hold a small part of it.
fn batch(frames: u32) -> u32 {
    (frames / 64).clamp(1, 16)
}

/// A process's membership of a domain and its reader (module docs).
pub(crate) struct DomainReader {
    /// Over `*member`: dropped first, by `Drop` (module docs).
    reader: ManuallyDrop<SharedReader<'static, Member>>,
    /// Taken by `Drop` to detach, after `reader` is gone.
    member: ManuallyDrop<Arc<Member>>,
    /// Files the domain refused (read privately instead: `Refusal`).
    refused: AtomicU64,
    /// Read-only opens read privately because this process held newer bytes of the file
    /// (mapping/domain.rs, A1).
    newer: AtomicU64,
    /// Writer roles this process took from another process's writer (docs/sharing.md
    /// "Two writing processes", F2).
    roles_taken: AtomicU64,
    /// The last writer's mark's sequence (`queue::held_mark`), over every file this
    /// process writes: a mark is unique while the process lives (queue.rs, "Appends in
    /// place", A1).
    mark_seq: AtomicU64,
}

impl std::fmt::Debug for DomainReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DomainReader")
            .field("holder", &self.member.holder())
            .field("counters", &self.reader.counters())
            .finish()
    }
}

// What a cache's files need of it, said once where the compiler checks it.
const _: fn() = || {
    fn shared_by_threads<T: Send + Sync>() {}
    shared_by_threads::<DomainReader>();
    shared_by_threads::<DomainFile>();
    shared_by_threads::<DomainWriter>();
};

impl DomainReader {
    /// Attaches to the domain `config` names (starting its steward if none runs) and
    /// makes its reader, which leases and reclaims frames a batch at a time (`batch`).
    ///
    /// Context: `Member::attach`'s (forks to start a steward; blocks up to its wait).
    /// Errors: `Member::attach`'s; `Other` if the slot given has no pin bit (a domain of
    /// more slots than `queue::PIN_SLOTS`: a later geometry's).
    pub(crate) fn attach(config: &DomainConfig) -> io::Result<DomainReader> {
        let member = Arc::new(Member::attach(config)?);
        if member.holder().slot.0 >= super::queue::PIN_SLOTS {
            if let Ok(member) = Arc::try_unwrap(member) {
                member.detach();
            }
            return Err(io::Error::other(
                "folio: the domain gave this process a slot with no pin bit",
            ));
        }
        // SAFETY: the `Member` lives in the `Arc`'s allocation, which stays where it is
        // and alive while `member` holds it; `Drop` drops the reader (the only holder of
        // this reference) before it lets the `Arc` go, and the reference is never handed
        // out (every method's borrow of the reader ends with its call).
        let borrowed: &'static Member = unsafe { &*Arc::as_ptr(&member) };
        let frames = borrowed.domain().geometry().frames;
        let reader = SharedReader::new(borrowed, borrowed, batch(frames));
        Ok(DomainReader {
            reader: ManuallyDrop::new(reader),
            member: ManuallyDrop::new(member),
            refused: AtomicU64::new(0),
            newer: AtomicU64::new(0),
            roles_taken: AtomicU64::new(0),
            mark_seq: AtomicU64::new(0),
        })
    }

    /// The member (tests: its holder and its domain's structures).
    pub(crate) fn member(&self) -> &Member {
        &self.member
    }

    /// `SharedReader::admit`: the file as a `DomainFile` of this reader, or `None` if the
    /// domain refused it (counted; the caller reads the file privately).
    ///
    /// Context and errors: as `SharedReader::admit`.
    pub(crate) fn admit(
        self: &Arc<Self>,
        file: StdFile,
        mode: OpenMode,
    ) -> io::Result<Option<DomainFile>> {
        match self.reader.admit(file, mode)? {
            Admitted::Open(file) => Ok(Some(DomainFile {
                reader: self.clone(),
                file: Some(file),
                retired: AtomicBool::new(false),
            })),
            Admitted::Refused(_) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
        }
    }

    /// A read-only open read privately: this process held newer bytes of the file
    /// (mapping/domain.rs, A1). Counted.
    pub(crate) fn note_newer(&self) {
        self.newer.fetch_add(1, Ordering::Relaxed);
    }

    /// `SharedReader::forget`: a removed file's record dropped with its pages.
    ///
    /// Context and errors: as `SharedReader::forget`.
    pub(crate) fn forget(&self, meta: &std::fs::Metadata) -> io::Result<Option<Removal>> {
        self.reader.forget(meta)
    }

    /// `SharedReader::forget_record`: a removed file's record dropped at its last close
    /// here (`File`'s drop).
    ///
    /// Context and errors: as `SharedReader::forget`.
    pub(crate) fn forget_record(&self, id: FileId) -> io::Result<Removal> {
        self.reader.forget_record(id)
    }

    /// `SharedReader::retire`: the record of a file this process is about to write
    /// retired (mapping/domain.rs, A2).
    ///
    /// Context and errors: as `SharedReader::retire`.
    pub(crate) fn retire(&self, meta: &std::fs::Metadata) -> io::Result<bool> {
        self.reader.retire(meta)
    }

    /// How many writer roles this process took from another process's writer.
    pub(crate) fn roles_taken(&self) -> u64 {
        self.roles_taken.load(Ordering::Relaxed)
    }

    /// What the reader did so far, how many files the domain refused, and how many opens
    /// read privately because this process held newer bytes (`note_newer`).
    pub(crate) fn counters(&self) -> (ReadCounters, u64, u64) {
        (
            self.reader.counters(),
            self.refused.load(Ordering::Relaxed),
            self.newer.load(Ordering::Relaxed),
        )
    }
}

/// The domain's budget as one member sees it (`DomainReader::budget`), in frames.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    /// The domain's quota (moved by its steward with the machine's memory).
    pub(crate) quota_frames: u32,
    /// The frames its cache holds, every member's.
    pub(crate) frames_cached: u32,
    /// Those this process owns (its misses brought them in: queue.rs, "Owners and
    /// shares").
    pub(crate) owned_frames: u32,
    /// This process's share and floor of the quota now (`Shares::attached`: by its
    /// weight among the members attached).
    pub(crate) share_frames: u32,
    pub(crate) floor_frames: u32,
}

impl DomainReader {
    /// The domain's quota, the frames its queue holds, ours of them, and each member's
    /// share and floor now (loads of shared words and a count of the live slots).
    pub(crate) fn budget(&self) -> Budget {
        let domain = self.member.domain();
        let queue = domain.queue();
        let quota_frames = domain.quota();
        let records = domain.records();
        let me = self.member.holder().slot;
        let share = Shares::attached(quota_frames, &domain.slots(), &records).of_slot(&records, me);
        Budget {
            quota_frames,
            frames_cached: queue.count(),
            owned_frames: queue.owned(me),
            share_frames: share.share_frames,
            floor_frames: share.floor_frames,
        }
    }

    /// A writable open of a file (docs/sharing.md "Writes seen across processes", W1):
    /// this process made the writer of its record (`WriterRole::Holder`), or a follower of
    /// the process that is (`WriterRole::Follower`: docs/sharing.md "Two writing
    /// processes"), or `None` (the domain refused it or its record is stale: the caller
    /// retires the record, as before).
    ///
    /// Context and errors: as `SharedReader::open_writer`.
    pub(crate) fn open_writer(
        self: &Arc<Self>,
        file: StdFile,
        mode: OpenMode,
    ) -> io::Result<Option<WriterRole>> {
        Ok(self
            .reader
            .open_writer(file, mode)?
            .map(|(file, request)| match request {
                Request::Claimed => WriterRole::Holder(self.writer_of(file)),
                _ => WriterRole::Follower(DomainFollower {
                    reader: self.clone(),
                    file: Some(file),
                }),
            }))
    }

    /// A follower of the writer of `file`'s record (docs/sharing.md "Two writing
    /// processes"): this process, which held the role, handed it over (`None`: the domain
    /// refused the file, which its reads then take privately).
    ///
    /// Context and errors: as `SharedReader::admit`.
    pub(crate) fn follow(
        self: &Arc<Self>,
        file: StdFile,
        mode: OpenMode,
    ) -> io::Result<Option<DomainFollower>> {
        Ok(match self.reader.admit(file, mode)? {
            Admitted::Open(file) => Some(DomainFollower {
                reader: self.clone(),
                file: Some(file),
            }),
            Admitted::Refused(_) => None,
        })
    }

    /// The writer of `file`, whose record's role this process holds now.
    fn writer_of(self: &Arc<Self>, file: SharedFile<'static>) -> DomainWriter {
        DomainWriter {
            reader: self.clone(),
            published: AtomicU64::new(self.reader.len(&file)),
            file: Some(file),
            marks: Mutex::new(HashMap::new()),
            suspects: Mutex::new(Vec::new()),
            any_suspect: AtomicBool::new(false),
        }
    }
}

/// What a writable open of a domain cache made this process (`DomainReader::open_writer`).
#[derive(Debug)]
pub(crate) enum WriterRole {
    /// The writer of the file's record.
    Holder(DomainWriter),
    /// Another process is: this one follows it (its reads through the domain) and asks
    /// for the role before it writes.
    Follower(DomainFollower),
}

/// A process with a writable open of a file whose record another process is the writer
/// of (docs/sharing.md "Two writing processes"): its open of the record, from which it
/// asks for the role (`request`) and, once claimed, becomes the writer (`into_writer`).
#[derive(Debug)]
pub(crate) struct DomainFollower {
    reader: Arc<DomainReader>,
    /// `None` only inside `drop` and `into_writer`; `'static` as `DomainFile`'s file is.
    file: Option<SharedFile<'static>>,
}

impl DomainFollower {
    fn file(&self) -> &SharedFile<'static> {
        self.file
            .as_ref()
            .expect("a live DomainFollower has its file")
    }

    /// `SharedReader::request_writer` to write: claimed, or asked for (`WANTED`), or the
    /// record stale.
    ///
    /// Context: takes the file table's lock. Errors: a test lever's death.
    pub(crate) fn request(&self) -> io::Result<Request> {
        self.reader.reader.request_writer(self.file(), Ask::ToWrite)
    }

    /// The record's size (its size word), which the holder keeps the file's logical one.
    pub(crate) fn len(&self) -> u64 {
        self.reader.reader.len(self.file())
    }

    /// Whether `request` would do something now (`FileTable::worth_asking`): a lock-free
    /// look, for the wait between two requests.
    pub(crate) fn worth_asking(&self) -> bool {
        self.reader.reader.worth_asking(self.file())
    }

    /// The writer this follower became once its `request` claimed the role (counted).
    pub(crate) fn into_writer(mut self) -> DomainWriter {
        let file = self
            .file
            .take()
            .expect("a live DomainFollower has its file");
        self.reader.roles_taken.fetch_add(1, Ordering::Relaxed);
        self.reader.writer_of(file)
    }
}

impl Drop for DomainFollower {
    /// A request of ours withdrawn (the role is not kept for a process that will not
    /// claim it), then our open of the record closed.
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            // Only a test's lever fails these; production's `Run` never does.
            let _ = self.reader.reader.withdraw(&file);
            let _ = self.reader.reader.close(file);
        }
    }
}

impl Drop for DomainReader {
    /// The reader first (its magazines returned), then the member's detach.
    fn drop(&mut self) {
        // SAFETY: dropped once, here, and not used after.
        unsafe { ManuallyDrop::drop(&mut self.reader) };
        // SAFETY: taken once, here, and not used after.
        let member = unsafe { ManuallyDrop::take(&mut self.member) };
        // The reader was the only other holder of the member (module docs).
        if let Ok(member) = Arc::try_unwrap(member) {
            member.detach();
        }
    }
}

/// A file read through its cache's domain: its record open (our opener count raised)
/// until it is dropped. Line-aligned: a read loads its fields, `retired` among them, from
/// one line.
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct DomainFile {
    reader: Arc<DomainReader>,
    /// `None` only inside `drop`. Its views of the domain's words are as `'static` as
    /// the reader's own (`DomainReader::attach`): they stay valid while `reader` holds
    /// the member, and `drop` takes the file before `reader` goes.
    file: Option<SharedFile<'static>>,
    /// This process opened the file for writing (mapping/domain.rs, A2): the handle reads
    /// privately from then on, unless the process hands the file's writer role over to
    /// another (`restore`).
    retired: AtomicBool,
}

impl DomainFile {
    /// Sets the largest window this handle reads ahead (`SharedFile::set_readahead_pages`:
    /// a `File`'s own maximum, read.rs "Readahead").
    pub(crate) fn set_readahead_pages(&self, pages: u32) {
        let file = self.file.as_ref().expect("a live DomainFile has its file");
        file.set_readahead_pages(pages);
    }

    /// The reader it reads through.
    pub(crate) fn reader(&self) -> &Arc<DomainReader> {
        &self.reader
    }

    /// Its record in the domain's file table.
    pub(crate) fn record(&self) -> FileId {
        self.file
            .as_ref()
            .expect("a live DomainFile has its file")
            .id()
    }

    /// Makes the handle read privately from now on (mapping/domain.rs, A2), until
    /// `restore`.
    ///
    /// Context: the mapping's `DomainUse` lock held (a writable open, or this process
    /// taking the writer role of the file).
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }

    /// Makes a retired handle read through the domain again: this process handed the
    /// file's writer role over and holds no newer bytes of it (mapping/domain.rs, "Two
    /// writing processes").
    ///
    /// Context: the mapping's `DomainUse` lock held.
    pub(crate) fn restore(&self) {
        self.retired.store(false, Ordering::Relaxed);
    }

    /// Whether the handle still reads through the domain: one load of this line, which
    /// the read loads anyway. Relaxed: a read that comes after the writable open that set
    /// it (in happens-before, as every read after a returned write does) sees it.
    #[inline]
    pub(crate) fn is_current(&self) -> bool {
        !self.retired.load(Ordering::Relaxed)
    }

    /// The file's size as the domain has it (`SharedReader::len`): what its reads stop at,
    /// a writer's appends in another process included.
    pub(crate) fn len(&self) -> u64 {
        let file = self.file.as_ref().expect("a live DomainFile has its file");
        self.reader.reader.len(file)
    }

    /// `SharedReader::read_at`: up to `buf.len()` bytes at `offset`, short only at the end
    /// of the file (the record's size).
    ///
    /// Context: any thread (read.rs, "Threads"); a miss takes the domain's locks and
    /// blocks in `pread`. Errors: `pread`'s.
    #[inline]
    pub(crate) fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let file = self.file.as_ref().expect("a live DomainFile has its file");
        self.reader.reader.read_at(file, buf, offset)
    }

    /// `SharedReader::read_cached`: the bytes at `offset` that are optimistic hits now,
    /// copied into `buf`; how many (a future's first poll).
    ///
    /// Context: any thread; never blocks. Errors: a test's `Run` only.
    pub(crate) fn read_cached(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let file = self.file.as_ref().expect("a live DomainFile has its file");
        self.reader.reader.read_cached(file, buf, offset)
    }

    /// `read_at` of `len` bytes at `offset` on a worker thread (shared/offload.rs): its
    /// answer the bytes read and the read's result, sent when it is done. The worker holds
    /// the file (and so the domain) until then, whatever happens to the caller.
    ///
    /// Context: any thread; never blocks (a worker may be started).
    pub(crate) fn read_off_thread(self: &Arc<Self>, offset: u64, len: usize) -> ReadAnswer {
        let (answer, answered) = oneshot::channel();
        let file = Arc::clone(self);
        offload::submit(move || {
            let mut buf = vec![0; len];
            let result = file.read_at(&mut buf, offset);
            // Before the answer: a future that has it never finds its file still held
            // here (the `File`'s drop after it closes the record).
            drop(file);
            // A receiver that is gone (its future dropped) wants nothing: the pages are
            // cached for the next reader all the same.
            let _ = answer.send((buf, result));
        });
        answered
    }

    /// Forced readahead of bytes `[offset, end)` on a worker (`SharedReader::prefetch`,
    /// in steps of at most `chunk_pages`), unless the domain holds every page of it
    /// already (looked up here: no worker woken for a covered range); false when the
    /// worker's queue dropped it (shared/offload.rs: too many hints wait). Its errors are
    /// nobody's (a reader that needs a page reads it again).
    ///
    /// Context: any thread; never blocks.
    pub(crate) fn read_ahead(self: &Arc<Self>, offset: u64, end: u64, chunk_pages: u64) -> bool {
        let page_bytes = FRAME_BYTES as u64;
        let (start, end) = (offset / page_bytes, end.div_ceil(page_bytes));
        let shared = self.file.as_ref().expect("a live DomainFile has its file");
        if !self.reader.reader.lacks_pages(shared, start, end) {
            return true;
        }
        let file = Arc::clone(self);
        offload::submit_hint(move || {
            let shared = file.file.as_ref().expect("a live DomainFile has its file");
            let _ = file.reader.reader.prefetch(shared, start, end, chunk_pages);
        })
    }
}

/// What `DomainFile::read_off_thread` answers: the bytes (the buffer the worker read into)
/// and the read's result (how many of them, or its error). `Canceled` when the worker's
/// job panicked.
pub(crate) type ReadAnswer = oneshot::Receiver<(Vec<u8>, io::Result<usize>)>;

impl Drop for DomainFile {
    /// Our opener count lowered (the file's pages stay cached in the domain).
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            // Only a test's lever fails a close; production's `Run` never does.
            let _ = self.reader.reader.close(file);
        }
    }
}

/// This process as the writer of a file's record (docs/sharing.md "Writes seen across
/// processes"): its writes' pages put into the domain (`install`, or `append_in_place`
/// for an append to a page whose frame it still holds), its writeback's
/// completions unmark them (`written`), and its drop detaches (every mark cleared, the
/// record's stamp made the file's, the writer mark cleared, the open closed).
///
/// Protection: `marks` (each page's last mark) under its mutex; installs, appends and
/// `published` are serialized by the caller (the file's private writer lock).
#[derive(Debug)]
pub(crate) struct DomainWriter {
    reader: Arc<DomainReader>,
    /// `None` only inside `drop`; `'static` as `DomainFile`'s file is.
    file: Option<SharedFile<'static>>,
    /// The largest size of the record a reader may have loaded since we became its
    /// writer: its size then, raised by every size we set. An append in place stores only
    /// at or past it (queue.rs, "Appends in place").
    published: AtomicU64,
    /// Each page's mark of its last install or append in place, until a writeback of it
    /// releases it.
    marks: Mutex<HashMap<Page, u64>>,
    /// Pages whose writeback found a newer mark than the one it read (`written`): the
    /// write's publish came after the writeback took the folio, so the writeback may have
    /// written the newer bytes too and nobody would release their mark. `settle` looks
    /// at them under the writer lock.
    suspects: Mutex<Vec<Page>>,
    /// Whether `suspects` may hold a page (a publish looks at this flag, not the mutex).
    any_suspect: AtomicBool,
}

/// Which pages `DomainWriter::settle` looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settle {
    /// Those a writeback found a newer mark on (the common case: each publish).
    Suspects,
    /// Every page we hold a mark of (an install found no frame: the domain full of HELD).
    Every,
}

impl DomainWriter {
    fn file(&self) -> &SharedFile<'static> {
        self.file
            .as_ref()
            .expect("a live DomainWriter has its file")
    }

    /// Its record (tests).
    pub(crate) fn record(&self) -> FileId {
        self.file().id()
    }

    /// A new mark (`queue::held_mark`): this process's slot and its next sequence.
    fn next_mark(&self) -> u64 {
        let seq = self.reader.mark_seq.fetch_add(1, Ordering::Relaxed) + 1;
        held_mark(self.reader.member.holder(), seq)
    }

    /// `marks`, locked (a panic under it leaves a map of marks, each valid alone).
    fn marks(&self) -> MutexGuard<'_, HashMap<Page, u64>> {
        self.marks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `suspects`, locked (as `marks`).
    fn suspects(&self) -> MutexGuard<'_, Vec<Page>> {
        self.suspects.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// W2: `bytes` then zeros (the page's newest bytes, at most a page; zeros past the
    /// end of the file) made page `page`'s in the domain, marked HELD with a new mark.
    ///
    /// Context: under the file's private writer lock. Errors: `SharedReader::install`'s.
    pub(crate) fn install(&self, page: Page, bytes: &[u8]) -> io::Result<()> {
        let mark = self.next_mark();
        self.reader.reader.install(self.file(), page, bytes, mark)?;
        self.marks().insert(page, mark);
        Ok(())
    }

    /// W2's append in place (queue.rs, "Appends in place"): `bytes`, written at `offset`
    /// within page `page`, stored into the page's frame and the record's size raised to
    /// their end, if the write starts at the record's size (and at or past every size we
    /// published) and the page's frame still holds our mark of its last install or
    /// append. `Released` (nothing stored): the caller installs the page (`install`).
    ///
    /// Context: under the file's private writer lock. Errors: `SharedReader::append_in_place`'s.
    pub(crate) fn append_in_place(
        &self,
        page: Page,
        offset: u64,
        bytes: &[u8],
    ) -> io::Result<Appended> {
        let file = self.file();
        let size = self.reader.reader.len(file);
        if offset != size || size < self.published.load(Ordering::Relaxed) {
            return Ok(Appended::Released);
        }
        let held = self.mark_of(page);
        if held == 0 {
            return Ok(Appended::Released);
        }
        let mark = self.next_mark();
        let within = (offset % FRAME_BYTES as u64) as usize;
        let appended = self
            .reader
            .reader
            .append_in_place(file, page, within, bytes, held, mark)?;
        if appended == Appended::InPlace {
            self.published
                .fetch_max(offset + bytes.len() as u64, Ordering::Relaxed);
            self.marks().insert(page, mark);
        }
        Ok(appended)
    }

    /// `step` of the role's hand-over (`Step::Yielding`): a test's lever may stop or
    /// kill this process there.
    ///
    /// Errors: a test lever's death.
    pub(crate) fn at(&self, step: Step) -> io::Result<()> {
        self.reader.reader.at(step)
    }

    /// Whether another process asked for the writer role (docs/sharing.md "Two writing
    /// processes"): a lock-free load of the record's WRITER word.
    pub(crate) fn wanted_by_other(&self) -> bool {
        self.reader.reader.wanted_by_other(self.file())
    }

    /// The mark of page `page`'s last install (0: none): a writeback that took the page's
    /// private folio reads it after it set WRITEBACK (write/writeback.rs).
    pub(crate) fn mark_of(&self, page: Page) -> u64 {
        let marks = self.marks();
        marks.get(&page).copied().unwrap_or(0)
    }

    /// W3: a writeback of page `page` wrote the bytes of the install marked `mark`: its
    /// frame unmarked if it still holds them.
    pub(crate) fn written(&self, page: Page, mark: u64) {
        if mark == 0 {
            return;
        }
        let released = self.reader.reader.release_held(self.file(), page, mark);
        let mut marks = self.marks();
        match marks.get(&page) {
            Some(&last) if last == mark => {
                marks.remove(&page);
            }
            Some(_) if !released => {
                // A publish after the writeback took the folio (a write's private part,
                // then B1, then its install): the bytes written may be the newer mark's.
                drop(marks);
                self.suspects().push(page);
                self.any_suspect.store(true, Ordering::Release);
            }
            _ => {}
        }
    }

    /// W3's catch-up, for the marks no writeback will release: a writeback reads a page's
    /// mark once it took the private folio, and a write whose private part came before
    /// that but whose install came after leaves a newer mark on bytes the writeback wrote
    /// (and a page an append stream filled is never written again: its frame would stay
    /// HELD until the detach, and a long log would fill the domain with them). For each
    /// page looked at (the suspects `written` found, or with `Settle::Every`, every page
    /// we hold a mark of), if `clean(page)` (our private folio of it neither dirty nor
    /// under writeback, or gone: a folio is evicted clean), its bytes are on disk: the
    /// frame unmarked if it still holds our last mark, and the mark forgotten (`written`
    /// with that mark: its bytes are the ones on disk).
    ///
    /// Why it is safe: under the writer lock no write of the file is between its private
    /// part and its install, so our last mark of the page is of the private folio's bytes
    /// (or older), which `clean` says are on disk; a write after `clean` looked installs
    /// a new mark (the CAS from the old one then fails) or, not installed yet, leaves the
    /// old mark's bytes on disk all the same.
    ///
    /// Context: under the file's private writer lock (no install or append meanwhile).
    pub(crate) fn settle(&self, pages: Settle, clean: impl Fn(Page) -> bool) {
        let looked: Vec<Page> = match pages {
            Settle::Suspects => {
                if !self.any_suspect.swap(false, Ordering::Acquire) {
                    return;
                }
                let mut suspects = self.suspects();
                if suspects.is_empty() {
                    return;
                }
                std::mem::take(&mut *suspects)
            }
            Settle::Every => {
                self.suspects().clear();
                let marks = self.marks();
                marks.keys().copied().collect()
            }
        };
        for page in looked {
            // Dirty again, or under writeback: that writeback's mark is the last one.
            if clean(page) {
                self.written(page, self.mark_of(page));
            }
        }
    }

    /// W5: the record's size raised to at least `end`.
    pub(crate) fn extend_size(&self, end: u64) {
        self.published.fetch_max(end, Ordering::Relaxed);
        self.reader.reader.extend_size(self.file(), end);
    }

    /// W5: the record's size set to `size`, its pages from `first` on dropped (and our
    /// marks of them forgotten: their frames are freed).
    ///
    /// Errors: `SharedReader::truncate`'s.
    pub(crate) fn truncate(&self, size: u64, first: Page) -> io::Result<()> {
        self.published.fetch_max(size, Ordering::Relaxed);
        self.marks().retain(|&page, _| page < first);
        self.reader.reader.truncate(self.file(), size, first)
    }
}

impl Drop for DomainWriter {
    /// W3's detach (the caller dropped its last hold once the file was clean).
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            let mtime_ns = file.metadata().map_or(u64::MAX, |meta| {
                (meta.mtime() as u64)
                    .wrapping_mul(1_000_000_000)
                    .wrapping_add(meta.mtime_nsec() as u64)
            });
            // Only a test's lever fails it; production's `Run` never does.
            let _ = self.reader.reader.detach_writer(file, mtime_ns);
        }
    }
}
