//! The shared read path (issue 45 step 6's second part, docs/sharing.md "The shared read
//! path"): a member of a domain reads real files through the domain's region, so that a
//! page one process read is a hit in every other. Not wired into `Cache` yet (a `Cache`
//! with a domain will call this path); reads only.
//!
//! # A read (`SharedReader::read_at`), per page
//!
//! - **Hit**: the optimistic hit, `SharedQueue::read_hit` on the file record's index
//!   (lock-free, no store but the touch: a walk, the frame's reuse generation, the walk's
//!   last slot loaded again and the frame's file and page checked, a byte-wise atomic
//!   copy of the frame's data, the generation again; one line of the queue per hit),
//!   tried twice; when both copies are stale (the frame reclaimed or reused meanwhile),
//!   `SharedQueue::pin_hit` (a look-up, a pin CAS, a second look-up, a touch), a copy out
//!   of the pinned frame, `unpin`; when that finds nothing, a miss.
//! - **Miss**: a frame from this member's magazine (`Magazine`, order 0); when it has none
//!   and the allocator none either, `SharedQueue::reclaim` of a batch, then again; then
//!   `pread` (O_DIRECT where the file system allows it) of the page straight into the
//!   frame in the region, its bytes past the end of the file zeroed; the hand-over to the
//!   cache (`hand_over`: the frame pinned by us, queued, CACHED), the insertion into the
//!   index (`insert_run`), the copy, the unpin. Two processes that miss one page at once
//!   both read it; the second's insertion **conflicts** (or its tree needs a node frame
//!   and none is free, even after a reclaim): its frame stays queued in no index
//!   (reclaim frees it, queue.rs) and it reads its own copy, which is correct (the same
//!   bytes of a file nobody writes). Counted.
//! - **Nothing to reclaim** (every queued frame pinned, the free frames in other members'
//!   magazines): the page is read uncached, into this reader's private page (O_DIRECT
//!   needs an aligned buffer), and copied from there. Counted (`uncached`), never an error.
//!
//! # Why the optimistic copy is sound
//!
//! queue.rs, "The optimistic hit", argues it: a copy whose frame's generation did not
//! change, whose slot named that frame after the first generation load, and whose frame
//! records this file and page, is the bytes of the incarnation that cached the page. Here, what that argument asks of this file:
//! the copy reads the frame only with byte-wise atomic loads (`copy_racing`:
//! `arena::atomic_copy`, never a plain copy: another process may lease the frame and
//! `pread` into it while we copy), and a miss writes a frame it leased only by the kernel
//! (`pread`) and by atomic stores (`atomic_zero` past a short read), after the lease's
//! release fence (`SharedBuddy::alloc` and `lease_batch` issue it), never through a
//! `&mut` slice of the region. The pin stays for what needs it: the fallback and the miss
//! (its frame pinned from the hand-over to the copy).
//!
//! # Why a pinned frame's bytes are read with plain loads
//!
//! A frame's bytes are written only by its lessee, while it is LEASED to it and in no
//! queue and no index (the miss's `pread`, before the hand-over): nobody else reads them
//! then (a hit reads a frame only after its pin and a second look-up that finds the frame
//! naming the page). Once handed over (CACHED) and inserted, a frame is never written again
//! until reclaim frees it, and reclaim takes a frame only by freezing its pin word from 0
//! (queue.rs E2): while we hold our pin bit it cannot, so the bytes we copy stay the page's.
//! A frame that was reclaimed and leased to someone else between our first look-up and our
//! pin fails the second look-up (reclaim took its page out of the index before it freed
//! it), and we read nothing from it. The data written by the miss's `pread` is published to
//! other processes by the hand-over's lock and the insertion's release stores, which the
//! hit's acquire look-up reads.
//!
//! Protection: the frames' bytes as above; the file table, queue, indexes and allocator
//! by their own protocols; the magazine and the counters are this reader's (one thread).
//!
//! Limits: reads only (no write, no truncation: a file changed since its record was made
//! is refused at open, since its cached pages may be stale: dropping them is the coherence
//! step's); the size is the record's size word (the first opener's `fstat`), loaded once
//! per `read_at` (`FileTable::open_size`: a size another process changes would be seen by
//! the next call, not within one); order-0
//! frames only (no readahead, no large folios); one reader per member and one thread
//! (`Cell`s, `RefCell`); a member's slot must have a pin bit (slots below
//! `queue::PIN_SLOTS`); an index that needs a node frame when the buddy has none free
//! (`Placed::Full`) gets a reclaim of a batch and one more try, then leaves the miss's
//! frame uncached (queued in no index, counted `conflicts`); file records are never
//! removed, so their trees keep their node frames (a removal would first drop the
//! record's pages, files.rs R1, then `release` its tree).

use std::cell::{Cell, RefCell};
use std::fs::File as StdFile;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

use super::attach::Member;
use super::buddy::SharedBuddy;
use super::domain::FRAME_BYTES;
use super::files::{FileId, FileKey, FileTable, Opened, Stamp};
use super::index::{Folio, Page, Placed, SharedIndex};
use super::magazine::Magazine;
use super::queue::{FileNo, Optimistic, Pinned, SharedQueue, PIN_SLOTS};
use super::stack::Frame;
use super::{Died, Holder, Run, Step, Word};
use crate::arena::atomic_copy;
use crate::io::atomic_zero;

/// A file open for shared reads: its record in the domain's file table and its descriptor.
#[derive(Debug)]
pub(crate) struct SharedFile {
    id: FileId,
    file: StdFile,
    direct: bool,
}

impl SharedFile {
    /// The file's record.
    pub(crate) fn id(&self) -> FileId {
        self.id
    }
}

/// What a reader did (the tests count them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReadCounters {
    /// Pages found cached (copied optimistically, or pinned and copied).
    pub(crate) hits: u64,
    /// Of the hits, those that fell back to a pin (`pin_hit`) after two stale copies.
    pub(crate) pinned_hits: u64,
    /// Optimistic copies discarded (the frame reclaimed or reused meanwhile).
    pub(crate) stale: u64,
    /// Pages not found cached.
    pub(crate) misses: u64,
    /// `pread`s into a frame or the private page (one per missed page).
    pub(crate) preads: u64,
    /// Misses whose insertion found the page inserted by another process meanwhile (or
    /// no node frame for its tree): the page read into our own frame, left for reclaim.
    pub(crate) conflicts: u64,
    /// `reclaim` calls (the magazine and the allocator had no frame).
    pub(crate) reclaims: u64,
    /// Frames those calls freed.
    pub(crate) reclaimed: u64,
    /// Misses read uncached (no frame to be had: every queued frame pinned).
    pub(crate) uncached: u64,
}

/// A page-aligned page of this process's memory (the uncached read's buffer).
#[repr(C, align(4096))]
struct PrivatePage([u8; FRAME_BYTES]);

/// A member's reads through its domain (module docs).
pub(crate) struct SharedReader<'m, R: Run> {
    member: &'m Member,
    run: &'m R,
    me: Holder,
    files: FileTable<'m>,
    buddy: SharedBuddy<'m>,
    /// Where the domain's queue lies (`Geometry::queue`, computed once: not per read).
    queue_at: Word,
    indexes: Vec<SharedIndex<'m>>,
    magazine: RefCell<Magazine>,
    batch: u32,
    private: RefCell<Box<PrivatePage>>,
    counters: Cell<ReadCounters>,
}

impl<'m, R: Run> SharedReader<'m, R> {
    /// A reader for `member`, whose operations run as `run` says (production: the member
    /// itself; tests: a lever), leasing and reclaiming `batch` frames at a time.
    ///
    /// Context: one per member, used by one thread; `member`'s slot has a pin bit
    /// (asserted).
    pub(crate) fn new(member: &'m Member, run: &'m R, batch: u32) -> SharedReader<'m, R> {
        let me = member.holder();
        assert!(
            me.slot.0 < PIN_SLOTS,
            "slot {} has no pin bit (queue.rs, Limits)",
            me.slot.0
        );
        assert!(batch > 0, "a batch of at least one frame");
        let domain = member.domain();
        SharedReader {
            member,
            run,
            me,
            files: domain.files(),
            buddy: domain.buddy(),
            queue_at: domain.geometry().queue(),
            indexes: domain.indexes(),
            magazine: RefCell::new(Magazine::new(me, batch)),
            batch,
            private: RefCell::new(Box::new(PrivatePage([0; FRAME_BYTES]))),
            counters: Cell::new(ReadCounters::default()),
        }
    }

    /// What this reader did so far.
    pub(crate) fn counters(&self) -> ReadCounters {
        self.counters.get()
    }

    fn count(&self, change: impl FnOnce(&mut ReadCounters)) {
        let mut counters = self.counters.get();
        change(&mut counters);
        self.counters.set(counters);
    }

    /// The domain's queue (`Domain::queue`, its place computed once in `new`).
    fn queue(&self) -> SharedQueue<'_, '_> {
        SharedQueue::new(self.member.domain().region(), self.queue_at, &self.buddy)
    }

    /// Opens `path` for shared reads (O_DIRECT, buffered where the file system refuses
    /// it): its identity and size from `fstat` (as segment/identity.rs), its record in the
    /// file table (found, or made with that size), our opener count raised.
    ///
    /// Context: takes the file table's lock.
    /// Errors: the open's and `fstat`'s; `Other` for a full table, too many opens, or a
    /// file changed since its record was made (module docs, Limits).
    pub(crate) fn open(&self, path: &Path) -> io::Result<SharedFile> {
        let options = |flags: i32| {
            let mut options = std::fs::OpenOptions::new();
            options.read(true).custom_flags(flags | libc::O_CLOEXEC);
            options
        };
        let (file, direct) = match options(libc::O_DIRECT).open(path) {
            Ok(file) => (file, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (options(0).open(path)?, false),
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        let identity = crate::segment::identity_of(&meta);
        let key = FileKey {
            dev: identity.dev,
            ino: identity.ino,
            born_ns: identity.born_ns,
        };
        let mtime_ns = (meta.mtime() as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(meta.mtime_nsec() as u64);
        let domain = self.member.domain();
        let (slots, table) = (domain.slots(), domain.files());
        let opened = table
            .open(key, meta.len(), mtime_ns, self.me, &slots, self.run)
            .map_err(died)?;
        match opened {
            Opened::Open {
                id,
                stamp: Stamp::Same,
            } => Ok(SharedFile { id, file, direct }),
            Opened::Open {
                id,
                stamp: Stamp::Changed,
            } => {
                table.close(id, self.me, &slots, self.run).map_err(died)?;
                Err(io::Error::other(
                    "folio: the file changed since the domain cached it (not handled yet)",
                ))
            }
            Opened::Full => Err(io::Error::other("folio: the domain's file table is full")),
            Opened::TooMany => Err(io::Error::other("folio: too many opens of the file")),
        }
    }

    /// Closes `file`: our opener count lowered (its pages stay cached).
    ///
    /// Context: takes the file table's lock.
    pub(crate) fn close(&self, file: SharedFile) -> io::Result<()> {
        let domain = self.member.domain();
        domain
            .files()
            .close(file.id, self.me, &domain.slots(), self.run)
            .map_err(died)
    }

    /// Reads up to `buf.len()` bytes of `file` at `offset` (module docs): how many, short
    /// only at the end of the file (the record's size word).
    ///
    /// Context: the reader's thread; takes the queue's, an index's and the allocator's
    /// locks on a miss (never on a hit); blocks in `pread` on a miss.
    /// Errors: `pread`'s.
    pub(crate) fn read_at(
        &self,
        file: &SharedFile,
        buf: &mut [u8],
        offset: u64,
    ) -> io::Result<usize> {
        // One load: our open keeps the record (files.rs, `open_size`). A size another
        // process changes is the coherence step's (not built: reads only).
        let size = self.files.open_size(file.id);
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let end = size.min(offset + buf.len() as u64);
        let queue = self.queue();
        let index = &self.indexes[file.id.index as usize];
        let file_no = FileNo(u64::from(file.id.index));
        let page_bytes = FRAME_BYTES as u64;
        let mut pos = offset;
        while pos < end {
            let page: Page = pos / page_bytes;
            let within = (pos % page_bytes) as usize;
            let n = (page_bytes - within as u64).min(end - pos) as usize;
            let at = (pos - offset) as usize;
            let dst = &mut buf[at..at + n];
            match self.optimistic(&queue, index, file_no, page, within, dst)? {
                Optimistic::Hit(_) => self.count(|c| c.hits += 1),
                Optimistic::Absent => self.miss(&queue, file, index, page, within, dst)?,
                Optimistic::Stale => {
                    if let Some(Pinned(frame)) = queue.pin_hit(index, page, self.me) {
                        self.run.at(Step::Copying).map_err(died)?;
                        self.copy_out(frame, within, dst);
                        queue.unpin(frame, self.me);
                        self.count(|c| {
                            c.hits += 1;
                            c.pinned_hits += 1;
                        });
                    } else {
                        self.miss(&queue, file, index, page, within, dst)?;
                    }
                }
            }
            pos += n as u64;
        }
        Ok((end - offset) as usize)
    }

    /// The optimistic hit (module docs), tried twice: `Hit` (`dst` holds the page's bytes),
    /// `Absent` (a miss), or `Stale` twice (the caller pins: `pin_hit`).
    #[inline]
    fn optimistic(
        &self,
        queue: &SharedQueue<'_, '_>,
        index: &SharedIndex<'m>,
        file: FileNo,
        page: Page,
        within: usize,
        dst: &mut [u8],
    ) -> io::Result<Optimistic> {
        for _ in 0..2 {
            let found = queue
                .read_hit(index, file, page, self.run, |frame| {
                    self.copy_racing(frame, within, dst)
                })
                .map_err(died)?;
            if found != Optimistic::Stale {
                return Ok(found);
            }
            self.count(|c| c.stale += 1);
        }
        Ok(Optimistic::Stale)
    }

    /// A missed page (module docs): read into a frame and cached, or uncached.
    fn miss(
        &self,
        queue: &SharedQueue<'_, '_>,
        file: &SharedFile,
        index: &SharedIndex<'m>,
        page: Page,
        within: usize,
        dst: &mut [u8],
    ) -> io::Result<()> {
        self.count(|c| c.misses += 1);
        let Some(frame) = self.frame(queue).map_err(died)? else {
            return self.uncached(file, page, within, dst);
        };
        let data = self.member.domain().frame_data(frame);
        // `frame` is leased to us and in no queue or index: nobody else writes its bytes,
        // but an optimistic hit that found it in an index before it was reclaimed may still
        // be loading them (module docs): written by the kernel and by atomic stores only,
        // after the lease's release fence (buddy.rs, `lessee_fence`).
        let got = match pread_page(file, data, page) {
            Ok(got) => got,
            Err(e) => {
                let domain = self.member.domain();
                self.magazine
                    .borrow_mut()
                    .free(frame, &self.buddy, &domain.slots(), self.run)
                    .map_err(died)?;
                return Err(e);
            }
        };
        // SAFETY: `data` is FRAME_BYTES of the mapping (`frame_data`), `got` of them read;
        // nobody else writes them (above).
        unsafe { atomic_zero(data.add(got), FRAME_BYTES - got) };
        self.count(|c| c.preads += 1);
        let domain = self.member.domain();
        let slots = domain.slots();
        let file_no = FileNo(u64::from(file.id.index));
        let indexes = self.indexes.as_slice();
        queue
            .hand_over(frame, file_no, page, self.me, indexes, &slots, self.run)
            .map_err(died)?;
        let folio = Folio {
            frame: u64::from(frame.0),
            order: 0,
        };
        let mut placed = index
            .insert_run(self.me, page, &[folio], &slots, self.run)
            .map_err(died)?;
        if matches!(placed.first(), Some(Placed::Full)) {
            // The tree needs a node frame and the allocator has none free: reclaim makes
            // some (our frame is pinned: never its victim), then the insertion again.
            self.reclaim_batch(queue).map_err(died)?;
            placed = index
                .insert_run(self.me, page, &[folio], &slots, self.run)
                .map_err(died)?;
        }
        if !matches!(placed.first(), Some(Placed::Inserted(_))) {
            self.count(|c| c.conflicts += 1);
        }
        self.run.at(Step::Copying).map_err(died)?;
        self.copy_out(frame, within, dst);
        queue.unpin(frame, self.me);
        Ok(())
    }

    /// A frame for a miss: the magazine's; when it has none, a reclaim of a batch and the
    /// magazine again; `None` when that found nothing either.
    fn frame(&self, queue: &SharedQueue<'_, '_>) -> Result<Option<Frame>, Died> {
        let slots = self.member.domain().slots();
        let mut magazine = self.magazine.borrow_mut();
        if let Some(frame) = magazine.alloc(&self.buddy, &slots, self.run)? {
            return Ok(Some(frame));
        }
        self.reclaim_batch(queue)?;
        magazine.alloc(&self.buddy, &slots, self.run)
    }

    /// Reclaims a batch of frames into the allocator (counted).
    fn reclaim_batch(&self, queue: &SharedQueue<'_, '_>) -> Result<(), Died> {
        let slots = self.member.domain().slots();
        let freed = queue.reclaim(
            self.batch,
            self.me,
            self.indexes.as_slice(),
            &slots,
            self.run,
        )?;
        self.count(|c| {
            c.reclaims += 1;
            c.reclaimed += u64::from(freed);
        });
        Ok(())
    }

    /// The page read into this reader's private page and copied from there.
    fn uncached(
        &self,
        file: &SharedFile,
        page: Page,
        within: usize,
        dst: &mut [u8],
    ) -> io::Result<()> {
        let mut private = self.private.borrow_mut();
        let got = pread_page(file, private.0.as_mut_ptr(), page)?;
        private.0[got..].fill(0);
        dst.copy_from_slice(&private.0[within..within + dst.len()]);
        self.count(|c| {
            c.preads += 1;
            c.uncached += 1;
        });
        Ok(())
    }

    /// Copies `dst.len()` bytes from `within` of `frame`'s data with byte-wise atomic
    /// loads (`arena::atomic_copy`): the optimistic hit's copy, which another process may
    /// race by reusing the frame and writing it (the copy is then discarded).
    ///
    /// Context: `frame` is one `read_hit` found in an index (module docs).
    #[inline]
    fn copy_racing(&self, frame: Frame, within: usize, dst: &mut [u8]) {
        assert!(within + dst.len() <= FRAME_BYTES);
        let data = self.member.domain().frame_data(frame);
        // SAFETY: `within + dst.len()` lies inside the frame's FRAME_BYTES of the mapping,
        // which stays mapped while we are a member; every other write to them is atomic or
        // the kernel's (`pread`, `atomic_zero`, the index's node words); `dst` is our own.
        unsafe { atomic_copy(data.add(within), dst) }
    }

    /// Copies `dst.len()` bytes from `within` of `frame`'s data.
    ///
    /// Context: we hold `frame` pinned, and it holds the page's data (module docs).
    fn copy_out(&self, frame: Frame, within: usize, dst: &mut [u8]) {
        assert!(within + dst.len() <= FRAME_BYTES);
        let data = self.member.domain().frame_data(frame);
        // SAFETY: `within + dst.len()` lies inside the frame's FRAME_BYTES; nobody writes
        // a pinned frame's bytes (module docs); `dst` is our own memory, not the region.
        unsafe {
            std::ptr::copy_nonoverlapping(data.add(within), dst.as_mut_ptr(), dst.len());
        }
    }
}

impl<R: Run> Drop for SharedReader<'_, R> {
    /// Returns the magazine's frames (a member detaches holding no lease).
    fn drop(&mut self) {
        let slots = self.member.domain().slots();
        let _ = self.magazine.get_mut().drain(&self.buddy, &slots, self.run);
    }
}

/// Reads page `page` of `file` into the FRAME_BYTES at `into` (page-aligned, ours to
/// write: a leased frame or the private page; a pointer, not a slice, since an optimistic
/// hit may be loading a leased frame's old bytes meanwhile): the bytes read, fewer than
/// FRAME_BYTES only at the end of the file.
///
/// Errors: `pread`'s (EINTR retried).
fn pread_page(file: &SharedFile, into: *mut u8, page: Page) -> io::Result<usize> {
    let offset = page * FRAME_BYTES as u64;
    let mut got = 0;
    while got < FRAME_BYTES {
        // SAFETY: the kernel writes `into[got..FRAME_BYTES]`, which the caller lets us
        // write for the call.
        let n = unsafe {
            libc::pread(
                file.file.as_raw_fd(),
                into.add(got).cast(),
                FRAME_BYTES - got,
                (offset + got as u64) as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            break;
        }
        got += n as usize;
        if file.direct {
            // A short O_DIRECT read is the end of the file (the next would be unaligned).
            break;
        }
    }
    Ok(got)
}

/// A `Died` from a `Run` (only a test's lever returns one; production's never does).
fn died(_: Died) -> io::Error {
    io::Error::other("folio: the read path's run stopped it (a test's lever)")
}
