//! The shared read path (issue 45 step 6's second part, docs/sharing.md "The shared read
//! path"): a member of a domain reads real files through the domain's region, so that a
//! page one process read is a hit in every other. A `Cache` with a domain calls it
//! (reader.rs); and a writer's pages put in (`install`: docs/sharing.md "Writes seen
//! across processes").
//!
//! # A read (`SharedReader::read_at`), per page
//!
//! - **Hit**: the optimistic hit, `SharedQueue::read_hit` on the file record's index
//!   (lock-free, no store but the touch: a walk, the frame's reuse generation, the walk's
//!   last slot loaded again and the frame's file and page checked, a byte-wise atomic
//!   copy of the frame's data, the generation again; one line of the queue per hit),
//!   tried twice (a read within one page: first by `read_at` itself, the rest of every
//!   read out of line in `read_pages`, so that the common hit is a short function: then
//!   twice more there); when both copies are stale (the frame reclaimed or reused meanwhile),
//!   `SharedQueue::pin_hit` (a look-up, a pin CAS, a second look-up, a touch), a copy out
//!   of the pinned frame, `unpin`; when that finds nothing, a miss.
//! - **Miss**: a frame from this member's magazine (`Magazine`, order 0; a batch the
//!   magazine leases is mapped into this process in one call, `map_batch`: the steward
//!   populated its pages in the region file ahead, populate.rs); when it has none
//!   and the allocator none either, `SharedQueue::reclaim` of a batch, then again (and
//!   first, while the queue with the frames it leases would hold more than the domain's
//!   quota: steward.rs, "The quota"; a miss that refaulted counts it in the header); then
//!   queue.rs's M1-M5 ("In flight"): the hand-over to the cache **in flight**
//!   (`hand_over_in_flight`: the frame pinned by us, FLIGHT naming us, queued, CACHED),
//!   the insertion into the index (`insert_run`), `Step::Reading`, then `pread` (O_DIRECT
//!   where the file system allows it) of the pages placed straight into their frames in
//!   the region (with its window's other pages: "Readahead" below), the bytes past the
//!   end of the file zeroed, each frame published (`publish`: FLIGHT cleared, its waiters
//!   woken), the copy, the unpin. Two processes that miss one page at once: the second's
//!   insertion **conflicts** (or its tree needs a node frame and none is free, even after
//!   a reclaim: then the needed page alone is read into its frame in no index); it reads
//!   nothing for that page, frees its frame once unpinned (`SharedQueue::drop_unplaced`),
//!   and reads the page from the first reader's frame: a look again (`read_page`), a hit
//!   or a wait while that frame is in flight. Counted (`conflicts`; at most
//!   `CONFLICTS_MAX` a page, then uncached). A read that fails takes its placed frames out
//!   of the index again (`abandon`) and frees them.
//! - **Against a writer** (docs/sharing.md, "A miss against a write"): a page is read from
//!   the disk only after its frame is in the index, so a writer's `install` after the
//!   insertion replaces the frame (which stays in no index: only this read returns its
//!   bytes), and one before it is found by the insertion (a conflict) or was written back
//!   and reclaimed first, and the `pread` reads its bytes. A truncation (`truncate`: the
//!   record's size, then its pages past it taken out, then the writer's `ftruncate`)
//!   that took its pages out before our insertion is seen by M3': the size loaded after
//!   the insertion (the index's lock orders it after the writer's store), our pages past
//!   it taken out again unread (`abandon`; the needed page read into its frame in no
//!   index for this read alone). Read before the `ftruncate`, such a page was the older
//!   bytes, cached past the end until an extension showed them. No `Step` marks M3': it
//!   stores nothing a death leaves half done (`abandon`'s own steps do). The loom model
//!   `truncation_races_a_miss` (tests/loom_shared.rs) plays these steps against
//!   `truncate`'s, the reader dying at each; it fails with the size loaded before the
//!   insertion, or never.
//! - **In flight** (a frame another reader, or a sibling thread, has inserted and not read
//!   yet: `Optimistic::InFlight`, `PinHit::InFlight`): a park on the frame's GEN word
//!   (`SharedQueue::wait_in_flight`, at most 10 ms), then a look again from the walk; at
//!   most `FLIGHT_PARKS_MAX` parks a page, then the page is read uncached (counted
//!   `duplicates`). Counted (`waits`).
//! - **Nothing to reclaim** (every queued frame pinned, the free frames in other members'
//!   magazines): the page is read uncached, into this reader's private page (O_DIRECT
//!   needs an aligned buffer), and copied from there. Counted (`uncached`), never an error.
//!
//! # Unwinding (docs/sharing.md, "A panic with frames in flight")
//!
//! A thread that panics between a miss's hand-over (M1) and its unpin while its process
//! lives on (a caller's `catch_unwind`, a thread pool that catches its tasks' panics, the
//! C ABI, which turns a panic into `-ENOTRECOVERABLE`: folio-capi's error.rs) is no death:
//! no sweep comes. Left as it was, its frames would stay in their index in flight, every
//! reader of their pages in any process parking `FLIGHT_PARKS_MAX` times (about 10 s)
//! before it reads the page uncached, until this process detaches. Where a panic could
//! come from there: a bug's assertion (the queue's, the index's, `frame_data`'s bounds,
//! `publish`'s FLIGHT check), a test's lever; not an allocation failure (the `Batch`es
//! that outgrow their inline pages, `insert_run`'s `Vec`: Rust's allocation error aborts
//! the process, a death, which the sweep mends). So `fill` keeps its progress in a
//! `FillGuard`: how many frames are handed over, how many settled (published or
//! abandoned), whether all are unpinned. Dropped by an unwind, it ends the miss as a
//! failed read ends: each frame handed over and not settled `abandon`ed (D1-D3: out of
//! its index, its waiters woken, who miss and read the page themselves), every frame
//! handed over unpinned, each freed unless an index names it (`drop_unplaced`: a published
//! frame stays cached). Disarmed when `fill_guarded` returns, whatever it returns (an
//! `io::Error` already abandoned its frames; a `Died` is a test's death, the sweep's to
//! mend): on the miss path it costs two counters and a flag in the caller's frame, no
//! atomic. A panic from under the queue's, the allocator's or the index's lock never gets
//! here: the hold's drop aborts the process first (lock.rs, "A panic under the lock"), a
//! death the sweep mends. Under a `Run` that does not abort (a test's), the guard leaves
//! its frames when this process still holds one of those locks after `UNWIND_LOCK_WAIT`
//! (one load each, waited on in case a sibling thread holds it for a few stores): taking
//! it would wait for ever on our own hold. A frame leased and not yet handed over stays
//! leased to us until the detach (none is left by a panic outside the queue's lock).
//! A second panic inside the guard's drop aborts the process: a death.
//!
//! # Readahead (issue 45 step 7; docs/sharing.md "Readahead through a domain")
//!
//! Each `SharedFile` (a handle) keeps its own window (`readahead::RaCell`, private to the
//! handle as a private cache's `File`'s is: DESIGN §11 keeps readahead state per process),
//! decided by the private path's policy, unchanged (`readahead::window`): its maximum is
//! the opener's (`set_readahead_pages`: a `File`'s own, today's default 16 MiB), lowered
//! to an eighth of the domain (`window_cap`).
//!
//! - **On a miss** (`miss`): `decide_on_miss` with the handle's previous read and the
//!   pages cached right before the missed one (`cached_before`, only when the previous
//!   read does not already make it sequential). A window starts at the missed page; no
//!   window: the request's pages from the missed one on (at most `window_cap`). Either is
//!   read by `read_window`: the pages the index lacks (`gaps`; the missed page always),
//!   their frames leased **in one hold of a magazine** (`lease`: a reclaim when it and the
//!   allocator are empty, again while reclaims free frames), **one `preadv` per contiguous
//!   run** (an iovec per frame: the frames need not be adjacent; at most `RUN_PAGES_MAX`
//!   pages), the bytes past a short read zeroed as a page's are, each frame handed over,
//!   each run inserted in one hold of the index's lock, the missed page copied, every frame
//!   unpinned. **A window short of frames shrinks** to the frames it got, its first pages
//!   (the missed page first); with none, the missed page is read uncached as before.
//! - **The marker**: a handle keeps a **marker bit per page** (`markers`, sized at the
//!   open, below `MARKED_PAGES_MAX`), set when a window reads its marker page (as today's
//!   READAHEAD bit goes on the marker's folio only when the window allocated it) and
//!   cleared by the read that meets it (one load per page on a hit: no store unless set).
//!   So a window's marker outlives the handle's next windows, as a folio's bit does: a
//!   random reader that reads an old window's marker much later starts a window there
//!   (`at_marker`: `decide_on_marker`, ramped if it is the handle's window's, else after
//!   the first page missing from the marker on), **read synchronously by the thread that
//!   met it** (a first slice: the private path submits the window and returns). Before
//!   (one marker per handle, its last window's) a random reader read the disk ~15% more
//!   often than today's (docs/sharing.md, "Markers that outlive the window"). Pages past
//!   the bits compare with the handle's window's marker, and a marker there that opens
//!   nothing forgets the window (so a hot page that was once one does not walk the index
//!   on every hit). The bits are the handle's: another process's or handle's read of the
//!   page does not clear them, and they outlive the page's eviction (today's go with the
//!   folio): a window then reads only the gaps it finds.
//! - **Another reader's window**: a page some process inserted is a hit and not read again
//!   (`gaps`, before the lease), and so is a page another reader is reading *at the same
//!   time*: its frame is in the index in flight (queue.rs, "In flight"), so our window
//!   leaves it out (`gaps`) or our insertion of it conflicts, and our read of it waits for
//!   the other's `preadv`. Two processes scanning one file at once read each page once
//!   (`duplicates` 0; docs/sharing.md, "Readahead through a domain"). A window whose
//!   **marker page another reader holds in flight** marks it for this handle all the
//!   same: the follower's next window then ramps on from this one, as the kernel's
//!   follower meets the leader's READAHEAD bit on their shared folio (our bits are the
//!   handle's); without it, the follower hit the leader's pages, met no marker of its own,
//!   and restarted its ramp at 4 pages at its next miss (docs/sharing.md, "A follower's
//!   window"). A marker page merely cached stays unmarked, as today's.
//! - Not built: reading a window ahead *asynchronously* (submitted, not waited for), large
//!   folios (order-0 frames only: a window of order-n folios would need the buddy's
//!   order-n blocks leased per folio, the queue and the optimistic hit over a folio, and
//!   the index's order-n entries, which it has), the cache-wide limit and thrash feedback
//!   (`ReadaheadLimit`: the domain's windows are bounded by `window_cap` alone). A
//!   `File`'s advice and later changes of its maximum reach the handle's window
//!   (file/advise.rs: `Random` turns it off, `Sequential` doubles it).
//!
//! # Why the optimistic copy is sound
//!
//! queue.rs, "The optimistic hit", argues it: a copy whose frame's generation did not
//! change, whose slot named that frame after the first generation load, and whose frame
//! records this file and page, is the bytes of the incarnation that cached the page. Here,
//! what that argument asks of this file: the copy reads the frame only with byte-wise
//! atomic loads (`copy_racing`: `arena::atomic_copy`, never a plain copy: another process
//! may lease the frame and `pread` into it while we copy), and a miss writes a frame it
//! leased only by the kernel (`pread`) and by atomic stores (`atomic_zero` past a short
//! read), after the lease's release fence (`SharedBuddy::alloc` and `lease_batch` issue
//! it), never through a `&mut` slice of the region. The pin stays for what needs it: the
//! fallback and the miss (its frame pinned from the hand-over to the copy).
//!
//! # Why a pinned frame's bytes stay the page's
//!
//! A frame's bytes are written by its lessee, while it is LEASED to it, or handed over
//! and inserted **in flight** (the miss's `pread`, between M3 and M5: queue.rs, "In
//! flight"): nobody else reads them then (a hit reads a frame only after its pin, a second
//! look-up that finds the frame naming the page, and a load of its GEN word with FLIGHT
//! 0, which M5 stores with a release after the `pread`). Once handed over (CACHED) and inserted, a
//! frame's bytes below the
//! record's size are never written again until reclaim frees it (its writer's append in
//! place stores only past the size, which no read returns: queue.rs, "Appends in place";
//! so the pinned copy loads with atomic loads too, `copy_out`), and reclaim takes a frame only by freezing its pin word from 0
//! (queue.rs E2): while we hold our pin bit it cannot, so the bytes we copy stay the page's.
//! A frame that was reclaimed and leased to someone else between our first look-up and our
//! pin fails the second look-up (reclaim took its page out of the index before it freed
//! it), and we read nothing from it. The data written by the miss's `pread` is published to
//! other processes by M5's release swap of the frame's GEN word, which the hit's acquire
//! load of GEN reads (queue.rs, "In flight").
//!
//! # Threads
//!
//! A reader is shared by the threads of its process (`Send + Sync`: a `Cache`'s files are
//! read by many threads at once, through one `shared::reader::DomainReader`). They all act
//! as the member's one holder: the shared locks serialize them as they do processes (a
//! thread that finds a lock held by its own holder waits for it: lock.rs), and a pin that
//! finds this process's bit already set is refused, never taken as made (queue.rs,
//! "Threads"): when the fallback after two stale copies meets it, the page is read uncached
//! (counted `sibling_pinned`). The counters are this process's (never a store to the region
//! per hit): an optimistic hit is counted as today's hit is (`stats::Counters::hit`: a load
//! and a store in the thread's own block, no read-modify-write and no line shared between
//! threads), everything else, next to a pin, a lock or a `pread`, in shared atomics. The
//! magazines are a **small pool, each under its own mutex** (one per core, at most
//! `MAGAZINES_MAX`): a miss takes the one its thread's hint names if it is free, else any
//! free one, else waits for its own. A pool rather than one per thread: a file is read by
//! whatever threads its user has (a pool of readers that come and go), and a thread's
//! magazine would hold its leased frames after the thread is gone (nothing returns them but
//! the reader's drop), up to 2 x `batch` per thread ever seen; the pool bounds what the
//! process holds to 2 x `batch` per magazine, and its locks are uncontended while threads
//! and cores are few (a miss holds one around a `pread`-free step: the lease, or a
//! reclaim). The uncached read's aligned buffer is on the stack of the call.
//!
//! Protection: the frames' bytes as above; the file table, queue, indexes and allocator
//! by their own protocols; each magazine by its mutex; the counters are atomics (the
//! optimistic hits' per-thread blocks written only by their thread).
//!
//! Limits: reads, and a writer's pages put in (`install`, `truncate`: docs/sharing.md
//! "Writes seen across processes"; no write of a file by the domain: a file changed since its record was made
//! is refused at open while its record is open somewhere, since its cached pages may be
//! stale; open nowhere, its record and pages are dropped and a new one made: files.rs,
//! "Drops"); the size is the record's size word (the first opener's `fstat`), loaded once
//! per `read_at` (the handle's `FileTable::size_word`: a size another process changes would be seen by
//! the next call, not within one); order-0
//! frames only (no large folios; readahead as above: synchronous); a page in flight is
//! waited for, at most `FLIGHT_PARKS_MAX` parks;
//! one pin per frame per process (a thread
//! that meets a sibling's reads uncached); a member's slot must have a pin bit (slots below
//! `queue::PIN_SLOTS`); an index that needs a node frame when the buddy has none free
//! (`Placed::Full`) gets a reclaim of a batch and one more try, then leaves the miss's
//! frame uncached (freed once unpinned, counted `conflicts`); a record keeps its tree's
//! node frames until it is dropped (files.rs R1: `forget` of a removed file, a changed
//! file's or a full table's admission).

use std::cell::Cell;
use std::fs::File as StdFile;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use smallvec::SmallVec;

use super::attach::Member;
use super::domain::FRAME_BYTES;
use super::files::{Ask, FileId, FileKey, FileTable, Opened, Removal, Request, Stamp};
use super::index::{Entry, Folio, Page, Placed, SharedIndex};
use super::magazine::Magazine;
use super::queue::{
    held_mark, Appended, FileNo, InFlight, Installed, Optimistic, PinHit, Pinned, Removed,
    SharedQueue, Shares, PIN_SLOTS,
};
use super::stack::Frame;
use super::{Died, Flaw, Holder, Run, Step};
use crate::arena::{atomic_copy, atomic_store_copy};
use crate::io::atomic_zero;
use crate::readahead::{decide_on_marker, decide_on_miss, Decision, MissRequest, RaCell};
use crate::stats::{self, add, bump};
use crate::types::{OpenMode, PageIndex};

/// The most magazines a reader keeps (module docs, "Threads").
const MAGAZINES_MAX: usize = 4;

/// The most pages one `preadv` reads (its iovecs: within the kernel's `IOV_MAX`, 1,024).
const RUN_PAGES_MAX: usize = 256;

/// The pages, frames or runs of a miss kept without a heap allocation: a random miss reads
/// one page, a window's first ramps 4 to 16 (docs/sharing.md, "The shared read path",
/// "Measured": the miss's seven `Vec`s were about 1,000 of its 4,700 instructions).
const INLINE_PAGES: usize = 16;

/// A miss's pages (or frames, or iovecs), inline up to `INLINE_PAGES`.
type Batch<T> = SmallVec<[T; INLINE_PAGES]>;

/// The most parks (each at most 10 ms: queue.rs `FLIGHT_PARK`) a read of one page spends
/// waiting for frames in flight before it reads the page uncached (module docs, "In
/// flight"): about 10 s, a bound no live reader's `preadv` reaches.
const FLIGHT_PARKS_MAX: u32 = 1000;

/// The most times a read of one page misses and finds its insertion beaten by another
/// reader's (then reads the page from that reader's frame) before it reads it uncached.
const CONFLICTS_MAX: u32 = 8;

/// No marker page (a handle without a window): a page no read reaches.
const NO_MARKER: Page = u64::MAX;

/// A handle keeps a marker bit for the pages below this (module docs, "Readahead"): 2^24
/// pages, a 64 GiB file, in 2 MiB of bits; pages beyond have the handle's window's
/// marker only.
const MARKED_PAGES_MAX: u64 = 1 << 24;

/// A handle's marker bits for a file of `len_bytes` (below `MARKED_PAGES_MAX`), clear.
fn marker_bits(len_bytes: u64) -> Box<[AtomicU64]> {
    let pages = len_bytes.div_ceil(FRAME_BYTES as u64).min(MARKED_PAGES_MAX);
    (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect()
}

/// A file open for shared reads: its record in the domain's file table and its descriptor.
///
/// `repr(C)`, what a hit reads first: the record's size word and the view of its index
/// are the handle's own (made at the open), so that a hit's first loads of the domain
/// (the size, the tree's root) wait only for the handle, not for the reader's tables.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct SharedFile<'m> {
    /// The record's size word (`FileTable::size_word`): our open keeps the record.
    size: &'m AtomicU64,
    /// The record's index (a view: the reader's `indexes` hold the same).
    index: SharedIndex<'m>,
    id: FileId,
    file: StdFile,
    mode: OpenMode,
    /// This handle's readahead window (module docs, "Readahead"): private to the handle,
    /// as a private cache's (`File`'s) is. Its maximum is 0 (off) until the opener sets it
    /// (`set_readahead_pages`).
    ra: RaCell,
    /// This handle's markers, a bit per page below `MARKED_PAGES_MAX` (module docs,
    /// "Readahead"): the marker page of every window it read, until a read meets it, as
    /// today's READAHEAD bit on a folio. Sized at the open to the file's pages.
    markers: Box<[AtomicU64]>,
}

impl SharedFile<'_> {
    /// The file's record.
    pub(crate) fn id(&self) -> FileId {
        self.id
    }

    /// `fstat` of its descriptor (a writer's detach: the stamp it leaves).
    pub(crate) fn metadata(&self) -> io::Result<std::fs::Metadata> {
        self.file.metadata()
    }

    /// Sets the largest window this handle reads ahead, in pages (0: none, and the window
    /// forgotten; the reader lowers it further to its domain's cap,
    /// `SharedReader::window_cap`).
    pub(crate) fn set_readahead_pages(&self, pages: u32) {
        self.ra.set_max_pages(pages);
        if pages == 0 {
            self.ra.reset();
        }
    }

    /// The page whose read starts the next window (`NO_MARKER` without a window).
    #[inline]
    fn marker(&self) -> Page {
        let window = self.ra.load();
        if window.size == 0 {
            NO_MARKER
        } else {
            window.marker()
        }
    }

    /// Whether a read of `page` starts a window: its marker bit (one load), or past the
    /// bits, the handle's window's marker (module docs, "Readahead").
    #[inline]
    fn is_marker(&self, page: Page) -> bool {
        match self.markers.get((page / 64) as usize) {
            Some(word) => word.load(Ordering::Relaxed) & (1 << (page % 64)) != 0,
            None => page == self.marker(),
        }
    }

    /// Whether `page` has a marker bit (below `MARKED_PAGES_MAX` and the file's pages at
    /// the open).
    fn has_marker_bit(&self, page: Page) -> bool {
        ((page / 64) as usize) < self.markers.len()
    }

    /// Marks `page` (a window's marker that the window read): a read of it starts the
    /// next window. Past the bits, the handle's window's marker alone stands for it.
    fn mark(&self, page: Page) {
        if let Some(word) = self.markers.get((page / 64) as usize) {
            word.fetch_or(1 << (page % 64), Ordering::Relaxed);
        }
    }

    /// Clears `page`'s marker: whether this thread cleared it (one of two threads that
    /// meet it starts the window, as today's `test_and_clear(READAHEAD)`). Past the bits:
    /// always (the handle's window's marker: `at_marker` forgets the window if it opens
    /// nothing).
    fn take_marker(&self, page: Page) -> bool {
        match self.markers.get((page / 64) as usize) {
            Some(word) => {
                let bit = 1 << (page % 64);
                word.fetch_and(!bit, Ordering::Relaxed) & bit != 0
            }
            None => true,
        }
    }
}

/// What the domain said to a file (`SharedReader::admit`).
#[derive(Debug)]
pub(crate) enum Admitted<'m> {
    Open(SharedFile<'m>),
    Refused(Refusal),
}

/// Why the domain refused a file (module docs, Limits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// It changed since its record was made: its cached pages may be stale.
    Changed,
    /// The file table has no record free.
    Full,
    /// This process has the most opens of it a record counts.
    TooMany,
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
    /// Reads of the file (`pread`, `preadv`) into frames or the private page: one per
    /// contiguous run of a miss's window or request (module docs, "Readahead").
    pub(crate) preads: u64,
    /// Pages read into frames besides the page a miss needed (its window's or its
    /// request's other gaps, a window a marker started).
    pub(crate) read_ahead: u64,
    /// Windows the readahead policy opened (on a miss or at a marker).
    pub(crate) windows: u64,
    /// Pages whose insertion found the page inserted by another process or thread
    /// meanwhile (or no node frame for its tree): their frames freed once unpinned, the
    /// page not read (module docs, "In flight": it is read from the other frame).
    pub(crate) conflicts: u64,
    /// Pages read from the file that another reader was reading or had read: only a read
    /// of a page that waited `FLIGHT_PARKS_MAX` parks for it in flight, or met
    /// `CONFLICTS_MAX` conflicts (module docs, "In flight"; before it, every conflict).
    pub(crate) duplicates: u64,
    /// Parks on a frame in flight (another reader's `preadv` of the page not done).
    pub(crate) waits: u64,
    /// `reclaim` calls (the magazine and the allocator had no frame).
    pub(crate) reclaims: u64,
    /// Frames those calls freed.
    pub(crate) reclaimed: u64,
    /// Misses read uncached (no frame to be had: every queued frame pinned).
    pub(crate) uncached: u64,
    /// Pages whose two optimistic copies were stale and whose frame another thread of
    /// this process held pinned: read uncached (module docs, "Threads"; not in
    /// `uncached`, which counts misses).
    pub(crate) sibling_pinned: u64,
    /// Pages a writer of this process put into the domain (docs/sharing.md "Writes seen
    /// across processes").
    pub(crate) installs: u64,
    /// Appends a writer of this process stored into a page's frame in place
    /// (`append_in_place`: queue.rs, "Appends in place"), not counted in `installs`.
    pub(crate) appends_in_place: u64,
}

/// `ReadCounters` as this process's atomics (module docs, "Threads").
#[derive(Debug, Default)]
struct Counts {
    /// The optimistic hits, counted as today's hit counts them (`stats::Counters::hit`:
    /// a load and a store in this thread's own block, no read-modify-write, no line
    /// shared with another thread); the snapshot sums the blocks.
    optimistic_hits: stats::Counters,
    /// The pinned hits (the fallback, which does RMWs anyway: its pin).
    pinned_hits: AtomicU64,
    stale: AtomicU64,
    misses: AtomicU64,
    preads: AtomicU64,
    read_ahead: AtomicU64,
    windows: AtomicU64,
    conflicts: AtomicU64,
    duplicates: AtomicU64,
    waits: AtomicU64,
    reclaims: AtomicU64,
    reclaimed: AtomicU64,
    uncached: AtomicU64,
    sibling_pinned: AtomicU64,
    installs: AtomicU64,
    appends_in_place: AtomicU64,
}

impl Counts {
    fn snapshot(&self) -> ReadCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ReadCounters {
            hits: self.optimistic_hits.snapshot().hits + get(&self.pinned_hits),
            pinned_hits: get(&self.pinned_hits),
            stale: get(&self.stale),
            misses: get(&self.misses),
            preads: get(&self.preads),
            read_ahead: get(&self.read_ahead),
            windows: get(&self.windows),
            conflicts: get(&self.conflicts),
            duplicates: get(&self.duplicates),
            waits: get(&self.waits),
            reclaims: get(&self.reclaims),
            reclaimed: get(&self.reclaimed),
            uncached: get(&self.uncached),
            sibling_pinned: get(&self.sibling_pinned),
            installs: get(&self.installs),
            appends_in_place: get(&self.appends_in_place),
        }
    }
}

thread_local! {
    /// This thread's magazine hint (module docs, "Threads"): taken once, round robin.
    static MAGAZINE_HINT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The next thread's magazine hint.
static NEXT_HINT: AtomicUsize = AtomicUsize::new(0);

fn magazine_hint() -> usize {
    MAGAZINE_HINT.with(|hint| {
        if hint.get() == usize::MAX {
            hint.set(NEXT_HINT.fetch_add(1, Ordering::Relaxed) % MAGAZINES_MAX);
        }
        hint.get()
    })
}

/// A page-aligned page of this process's memory (the uncached read's buffer, on the
/// stack of the call).
#[repr(C, align(4096))]
struct PrivatePage([u8; FRAME_BYTES]);

/// A member's reads through its domain (module docs).
pub(crate) struct SharedReader<'m, R: Run> {
    member: &'m Member,
    run: &'m R,
    me: Holder,
    files: FileTable<'m>,
    /// The domain's queue, with its view of the buddy allocator: made once, not per read
    /// (its checks and its fields cost a hit more than its walk of the index).
    queue: SharedQueue<'m>,
    indexes: Vec<SharedIndex<'m>>,
    magazines: Box<[Mutex<Magazine>]>,
    batch: u32,
    /// The largest window any handle reads ahead through this reader (`window_cap`).
    window_cap: u32,
    counts: Counts,
}

impl<'m, R: Run> SharedReader<'m, R> {
    /// A reader for `member`, whose operations run as `run` says (production: the member
    /// itself; tests: a lever), leasing and reclaiming `batch` frames at a time.
    ///
    /// Context: one per member (any number of threads may share it); `member`'s slot has
    /// a pin bit (asserted).
    pub(crate) fn new(member: &'m Member, run: &'m R, batch: u32) -> SharedReader<'m, R> {
        let me = member.holder();
        assert!(
            me.slot.0 < PIN_SLOTS,
            "slot {} has no pin bit (queue.rs, Limits)",
            me.slot.0
        );
        assert!(batch > 0, "a batch of at least one frame");
        let domain = member.domain();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let magazines = (0..cores.clamp(1, MAGAZINES_MAX))
            .map(|_| Mutex::new(Magazine::new(me, batch)))
            .collect();
        SharedReader {
            member,
            run,
            me,
            files: domain.files(),
            queue: domain.queue(),
            indexes: domain.indexes(),
            magazines,
            batch,
            window_cap: window_cap(domain.geometry().frames),
            counts: Counts::default(),
        }
    }

    /// Lowers (or raises) the largest window a handle reads ahead through this reader
    /// (tests: a window larger than the frames a small domain can give).
    #[cfg(test)]
    pub(crate) fn set_window_cap(&mut self, pages: u32) {
        self.window_cap = pages;
    }

    /// What this reader did so far (read field by field: a snapshot taken while other
    /// threads read may be a few events off between fields).
    pub(crate) fn counters(&self) -> ReadCounters {
        self.counts.snapshot()
    }

    /// A magazine of the pool (module docs, "Threads"): the one this thread's hint names
    /// if it is free, else the first free one, else the hint's, waited for.
    fn magazine(&self) -> MutexGuard<'_, Magazine> {
        let n = self.magazines.len();
        let start = magazine_hint() % n;
        for i in 0..n {
            match self.magazines[(start + i) % n].try_lock() {
                Ok(magazine) => return magazine,
                // A panic while it was held leaves its frames leased to us: still ours.
                Err(TryLockError::Poisoned(e)) => return e.into_inner(),
                Err(TryLockError::WouldBlock) => {}
            }
        }
        self.magazines[start]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The domain's queue (`Domain::queue`, made once in `new`).
    fn queue(&self) -> &SharedQueue<'m> {
        &self.queue
    }

    /// Opens `path` for shared reads (O_DIRECT, buffered where the file system refuses
    /// it): its identity and size from `fstat` (as segment/identity.rs), its record in the
    /// file table (found, or made with that size), our opener count raised.
    ///
    /// Context: takes the file table's lock.
    /// Errors: the open's and `fstat`'s; `Other` for a full table, too many opens, or a
    /// file changed since its record was made (module docs, Limits).
    pub(crate) fn open(&self, path: &Path) -> io::Result<SharedFile<'m>> {
        let options = |flags: i32| {
            let mut options = std::fs::OpenOptions::new();
            options.read(true).custom_flags(flags | libc::O_CLOEXEC);
            options
        };
        let (file, mode) = match options(libc::O_DIRECT).open(path) {
            Ok(file) => (file, OpenMode::Direct),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                (options(0).open(path)?, OpenMode::Buffered)
            }
            Err(e) => return Err(e),
        };
        match self.admit(file, mode)? {
            Admitted::Open(file) => Ok(file),
            Admitted::Refused(Refusal::Changed) => Err(io::Error::other(
                "folio: the file changed since the domain cached it (not handled yet)",
            )),
            Admitted::Refused(Refusal::Full) => {
                Err(io::Error::other("folio: the domain's file table is full"))
            }
            Admitted::Refused(Refusal::TooMany) => {
                Err(io::Error::other("folio: too many opens of the file"))
            }
        }
    }

    /// `open` of a file open already (as `mode` says): its record found or made,
    /// our opener count raised, or the domain's refusal (nothing changed then).
    ///
    /// Context: takes the file table's lock.
    /// Errors: `fstat`'s.
    pub(crate) fn admit(&self, file: StdFile, mode: OpenMode) -> io::Result<Admitted<'m>> {
        let meta = file.metadata()?;
        let key = key_of(&meta);
        let mtime_ns = (meta.mtime() as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(meta.mtime_nsec() as u64);
        let domain = self.member.domain();
        let (slots, table) = (domain.slots(), domain.files());
        // A changed file's record nobody has open is dropped and made again; a full table
        // drops one nobody has open (files.rs, "Drops").
        let opened = table
            .open_with(
                key,
                meta.len(),
                mtime_ns,
                self.me,
                &slots,
                self.run,
                Some(&mut |id| self.drop_pages(id)),
            )
            .map_err(died)?;
        Ok(match opened {
            Opened::Open {
                id,
                stamp: Stamp::Same,
            } => Admitted::Open(SharedFile {
                size: self.files.size_word(id),
                index: self.indexes[id.index as usize].clone(),
                id,
                file,
                mode,
                ra: RaCell::new(0),
                markers: marker_bits(meta.len()),
            }),
            Opened::Open {
                id,
                stamp: Stamp::Changed,
            } => {
                table.close(id, self.me, &slots, self.run).map_err(died)?;
                Admitted::Refused(Refusal::Changed)
            }
            Opened::Full => Admitted::Refused(Refusal::Full),
            Opened::TooMany => Admitted::Refused(Refusal::TooMany),
        })
    }

    /// A record's pages and tree dropped (files.rs R1: `SharedQueue::drop_file`).
    ///
    /// Context: under the file table's lock, the record nobody's open.
    fn drop_pages(&self, id: FileId) -> Result<bool, Died> {
        let slots = self.member.domain().slots();
        let file = FileNo(u64::from(id.index));
        self.queue()
            .drop_file(file, self.me, self.indexes.as_slice(), &slots, self.run)
    }

    /// The file of `meta` (its identity) is removed: its record dropped, with its pages,
    /// if nobody has it open (files.rs R1). What was done, or `None`: no record.
    ///
    /// Context: takes the file table's lock, and the queue's, the tree's and the
    /// allocator's under it.
    pub(crate) fn forget(&self, meta: &std::fs::Metadata) -> io::Result<Option<Removal>> {
        let domain = self.member.domain();
        let (slots, table) = (domain.slots(), domain.files());
        let Some(found) = table.lookup(&key_of(meta)) else {
            return Ok(None);
        };
        table
            .remove_with(found.id, self.me, &slots, self.run, &mut |id| {
                self.drop_pages(id)
            })
            .map(Some)
            .map_err(died)
    }

    /// `forget` of the record `id` (a removed file's, whose last handle here closed).
    ///
    /// Context: as `forget`.
    pub(crate) fn forget_record(&self, id: FileId) -> io::Result<Removal> {
        let domain = self.member.domain();
        domain
            .files()
            .remove_with(id, self.me, &domain.slots(), self.run, &mut |id| {
                self.drop_pages(id)
            })
            .map_err(died)
    }

    /// This process is about to write the file of `meta`: its record's stamp retired
    /// (files.rs `retire_stamp`), so that its next admission drops the pages cached
    /// before the write. Whether it had a record.
    ///
    /// Context: a lock-free look-up; the file table's lock if it has a record.
    pub(crate) fn retire(&self, meta: &std::fs::Metadata) -> io::Result<bool> {
        let domain = self.member.domain();
        let key = key_of(meta);
        if domain.files().lookup(&key).is_none() {
            return Ok(false);
        }
        domain
            .files()
            .retire_stamp(&key, self.me, &domain.slots(), self.run)
            .map_err(died)
    }

    /// A writable open (docs/sharing.md "Writes seen across processes", W1): `file`
    /// admitted as `admit` does and this process made its record's writer if the role is
    /// free (`Ask::AtOpen`). `Busy` when another process holds it: the open is kept, for
    /// this process to follow the holder and ask for the role before it writes
    /// (`request_writer`). `None` when the domain refused the file or its record is stale
    /// (`Stamp::Changed`, a retired stamp): the caller falls back to retiring the record
    /// (`retire`), as before.
    ///
    /// Context: takes the file table's lock.
    /// Errors: `fstat`'s.
    pub(crate) fn open_writer(
        &self,
        file: StdFile,
        mode: OpenMode,
    ) -> io::Result<Option<(SharedFile<'m>, Request)>> {
        let Admitted::Open(shared) = self.admit(file, mode)? else {
            return Ok(None);
        };
        match self.request_writer(&shared, Ask::AtOpen)? {
            Request::Stale => {
                self.close(shared)?;
                Ok(None)
            }
            request => Ok(Some((shared, request))),
        }
    }

    /// `FileTable::request_writer` of `file`'s record by this process.
    ///
    /// Context: takes the file table's lock.
    pub(crate) fn request_writer(&self, file: &SharedFile<'m>, ask: Ask) -> io::Result<Request> {
        let domain = self.member.domain();
        domain
            .files()
            .request_writer(file.id, ask, self.me, &domain.slots(), self.run)
            .map_err(died)
    }

    /// A process-level step of a protocol outside the file table (`Step::Yielding`),
    /// where a test's `Run` may stop or kill this process; production's never does.
    pub(crate) fn at(&self, step: Step) -> io::Result<()> {
        self.run.at(step).map_err(died)
    }

    /// `FileTable::withdraw`: our request of `file`'s writer role, if any, withdrawn.
    ///
    /// Context: takes the file table's lock.
    pub(crate) fn withdraw(&self, file: &SharedFile<'m>) -> io::Result<()> {
        let domain = self.member.domain();
        domain
            .files()
            .withdraw(file.id, self.me, &domain.slots(), self.run)
            .map_err(died)
    }

    /// `FileTable::worth_asking`: whether a request to write `file` would do something now
    /// (lock-free).
    pub(crate) fn worth_asking(&self, file: &SharedFile<'m>) -> bool {
        self.files.worth_asking(file.id, self.me, self.run)
    }

    /// `FileTable::wanted_by_other`: whether another process asked for `file`'s writer
    /// role (lock-free).
    pub(crate) fn wanted_by_other(&self, file: &SharedFile<'m>) -> bool {
        self.files.wanted_by_other(file.id, self.me)
    }

    /// W2: the page `page` of `file` (whose writer we are) made `bytes` then zeros (the
    /// page's newest bytes up to FRAME_BYTES of them; zeros past the end of the file) in
    /// the domain: a frame leased, filled with atomic stores, handed over HELD with
    /// `mark`, put in the page's slot (`SharedQueue::install`).
    ///
    /// Context: the file's writer, under its private writer lock (installs of a file go
    /// one at a time, in the order of its writes); takes the domain's locks.
    /// Errors: `Other` when no frame can be had (every frame HELD or pinned).
    pub(crate) fn install(
        &self,
        file: &SharedFile<'m>,
        page: Page,
        bytes: &[u8],
        mark: u64,
    ) -> io::Result<()> {
        assert!(
            bytes.len() <= FRAME_BYTES,
            "a page of {} bytes",
            bytes.len()
        );
        let queue = self.queue();
        let index = &file.index;
        let file_no = FileNo(u64::from(file.id.index));
        let slots = self.member.domain().slots();
        for _ in 0..4 {
            let Some(&frame) = self.lease(queue, 1).map_err(died)?.first() else {
                break;
            };
            let data = self.member.domain().frame_data(frame);
            // SAFETY: the frame is leased to us (nobody else writes it); an optimistic
            // reader of its old incarnation may be loading it: atomic stores only, after
            // the lease's release fence (module docs, "Why the optimistic copy is sound").
            unsafe {
                atomic_store_copy(bytes, data);
                atomic_zero(data.add(bytes.len()), FRAME_BYTES - bytes.len());
            }
            let installed = queue
                .install(
                    frame,
                    file_no,
                    page,
                    mark,
                    index,
                    self.me,
                    self.indexes.as_slice(),
                    &slots,
                    self.run,
                )
                .map_err(died)?;
            if installed != Installed::Full {
                bump(&self.counts.installs);
                return Ok(());
            }
            // No node frame for the tree: our frame is queued in no index (reclaim frees
            // it once we unmark it); make room and try again. Room for two frames at
            // least, the node's and the next try's own: with a batch of one (a small
            // domain), each try freed the one frame its next lease took, and the tree's
            // node never found a frame (tests_write's appender, 10,000 appends).
            queue.release_held(frame, mark);
            self.reclaim(queue, self.batch.max(2)).map_err(died)?;
        }
        Err(io::Error::other(
            "folio: no frame of the domain to hold a written page (every frame held or pinned)",
        ))
    }

    /// W2's append in place (queue.rs, "Appends in place"): `bytes` stored at `within`
    /// of page `page`'s frame if that frame still holds `held` (our mark of the page's
    /// last install or append), its mark moved to `mark`, then the record's size raised
    /// to the end of `bytes`. `Released` (nothing stored): install a copy instead.
    ///
    /// Context: the file's writer, under its private writer lock; the bytes start at the
    /// record's size, and at or past every size we published (so that no reader, even one
    /// that loaded the size before a truncation, returns them before A3); lock-free.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn append_in_place(
        &self,
        file: &SharedFile<'m>,
        page: Page,
        within: usize,
        bytes: &[u8],
        held: u64,
        mark: u64,
    ) -> io::Result<Appended> {
        assert!(
            within + bytes.len() <= FRAME_BYTES,
            "an append past its page"
        );
        let end = page * FRAME_BYTES as u64 + (within + bytes.len()) as u64;
        let index = &file.index;
        let file_no = FileNo(u64::from(file.id.index));
        let domain = self.member.domain();
        let appended = self
            .queue
            .append_in_place(
                index,
                file_no,
                page,
                held,
                mark,
                self.run,
                |frame| {
                    let data = domain.frame_data(frame);
                    // SAFETY: the frame's FRAME_BYTES lie in the region, mapped while we
                    // are a member; it is CACHED and HELD by our mark (A1), so nobody
                    // frees it or stores to it but us; the bytes stored lie past the
                    // record's size, which no reader returns (queue.rs, "Appends in
                    // place"), and readers load the frame only with atomic loads
                    // (`copy_racing`, `copy_out`): atomic stores.
                    unsafe { atomic_store_copy(bytes, data.add(within)) }
                },
                || {
                    self.files.extend_size(file.id, end);
                },
            )
            .map_err(died)?;
        if appended == Appended::InPlace {
            bump(&self.counts.appends_in_place);
        }
        Ok(appended)
    }

    /// W3 (writeback): the frame at `page` of `file` unmarked if it still holds `mark`
    /// (the bytes the writeback wrote). Whether it did.
    ///
    /// Context: any thread; lock-free (a look-up and a CAS).
    pub(crate) fn release_held(&self, file: &SharedFile, page: Page, mark: u64) -> bool {
        self.queue.release_page(&file.index, page, mark, self.run)
    }

    /// W3 (detach): every frame of `file` marked by us unmarked (its bytes are on disk),
    /// then the record's stamp set to `mtime_ns` and our writer mark cleared, then our
    /// open closed.
    ///
    /// Context: the file's writer, its private mapping clean; takes the domain's locks.
    pub(crate) fn detach_writer(&self, file: SharedFile, mtime_ns: u64) -> io::Result<()> {
        let domain = self.member.domain();
        let slots = domain.slots();
        let index = &file.index;
        let mine = held_mark(self.me, 1) >> 48;
        for (_, folio) in index.folios(self.me, &slots, self.run).map_err(died)? {
            let frame = Frame(u32::try_from(folio.frame).expect("a frame below 2^32"));
            let mark = self.queue.held_mark(frame);
            if mark >> 48 == mine {
                self.queue.release_held(frame, mark);
            }
        }
        domain
            .files()
            .release_writer(file.id, mtime_ns, self.me, &slots, self.run)
            .map_err(died)?;
        self.close(file)
    }

    /// The size of `file` as the domain has it (its record's size word, which a writer in
    /// any process raises before its write returns): one load of the handle's size word
    /// (files.rs, `size_word`).
    pub(crate) fn len(&self, file: &SharedFile<'m>) -> u64 {
        file.size.load(Ordering::Acquire)
    }

    /// W5 (sizes): the record's size word raised to at least `end` (an extending write).
    pub(crate) fn extend_size(&self, file: &SharedFile, end: u64) {
        self.files.extend_size(file.id, end);
    }

    /// W5 (`set_len`): the record's size word set to `size`, then the domain's pages of
    /// `file` from `first` on taken out (`SharedQueue::remove`; a pinned one waited for,
    /// one in flight parked for: queue.rs, "In flight"; up to 64 rounds).
    ///
    /// Context: the file's writer, under its private writer lock; takes the domain's locks.
    pub(crate) fn truncate(&self, file: &SharedFile, size: u64, first: Page) -> io::Result<()> {
        self.files.set_size(file.id, size);
        let domain = self.member.domain();
        let slots = domain.slots();
        let index = &file.index;
        let file_no = FileNo(u64::from(file.id.index));
        for _ in 0..64 {
            let mut pinned = false;
            // A pinned page in flight (queue.rs, "In flight": its reader's `preadv` lasts
            // longer than a copy): waited for on its GEN word, not spun for.
            let mut in_flight = None;
            for (page, folio) in index.folios(self.me, &slots, self.run).map_err(died)? {
                if page < first {
                    continue;
                }
                let frame = Frame(u32::try_from(folio.frame).expect("a frame below 2^32"));
                let removed = self
                    .queue
                    .remove(
                        frame,
                        file_no,
                        page,
                        self.me,
                        self.indexes.as_slice(),
                        &slots,
                        self.run,
                    )
                    .map_err(died)?;
                if removed == Removed::Pinned {
                    pinned = true;
                    in_flight = in_flight.or(self.queue.in_flight(frame).map(|f| (page, f)));
                }
            }
            if !pinned {
                return Ok(());
            }
            match in_flight {
                Some((page, flight)) => self.wait(&self.queue, index, page, flight),
                None => self.run.wait(self.me),
            }
        }
        Err(io::Error::other(
            "folio: a truncated page of the domain stayed pinned",
        ))
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
    /// locks on a miss (never on a hit); blocks in `pread` on a miss, and on a hit of the
    /// handle's marker page (module docs, "Readahead").
    /// Errors: `pread`'s.
    // Always inlined: with the in-flight test in `read_hit`, `#[inline]` left it outlined
    // at `DomainFile::read_at` (callgrind, docs/sharing.md "Readahead through a domain").
    #[inline(always)]
    pub(crate) fn read_at(
        &self,
        file: &SharedFile<'m>,
        buf: &mut [u8],
        offset: u64,
    ) -> io::Result<usize> {
        // One load of the handle's size word (`len`): our open keeps the record. A size
        // its writer
        // changes (docs/sharing.md "Writes seen across processes", W4) is seen by the
        // next call, not within one.
        let size = file.size.load(Ordering::Acquire);
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let n = size.min(offset + buf.len() as u64) - offset;
        let within = offset % FRAME_BYTES as u64;
        // The common read, within one page and not of the handle's marker (a hit on it
        // starts the next window), tried as one optimistic hit first, with everything else
        // (a second try, a pin, a miss, the marker, more pages) out of line: this function
        // stays small enough to need few registers saved.
        if within + n <= FRAME_BYTES as u64 {
            let page: Page = offset / FRAME_BYTES as u64;
            if !file.is_marker(page) {
                let dst = &mut buf[..n as usize];
                let index = &file.index;
                let file_no = FileNo(u64::from(file.id.index));
                match self
                    .queue
                    .read_hit(index, file_no, page, self.run, |frame| {
                        self.copy_racing(frame, within as usize, dst)
                    }) {
                    Ok(Optimistic::Hit(_)) => {
                        self.counts.optimistic_hits.hit();
                        return Ok(n as usize);
                    }
                    Ok(Optimistic::Stale) => bump(&self.counts.stale),
                    Ok(Optimistic::Absent | Optimistic::InFlight(_)) => {}
                    Err(dead) => return Err(died(dead)),
                }
            }
        }
        self.read_pages(file, &mut buf[..n as usize], offset, size)
    }

    /// The bytes of `file` at `offset` that an optimistic hit gives now, page after page
    /// into `buf`: how many, stopping at the first page that is not one (absent, in flight,
    /// stale), at the handle's marker (whose read starts a window: `read_at`'s) and at the
    /// end of the file. A future's first poll (docs/sharing.md "A domain file's futures
    /// and forced readahead"): what is cached is copied on the executor's thread, the rest
    /// read by `read_at` on a worker.
    ///
    /// Context: any thread; never blocks, takes no lock.
    /// Errors: a test's `Run` only (a death).
    pub(crate) fn read_cached(
        &self,
        file: &SharedFile<'m>,
        buf: &mut [u8],
        offset: u64,
    ) -> io::Result<usize> {
        let size = file.size.load(Ordering::Acquire);
        let end = size.min(offset.saturating_add(buf.len() as u64));
        let file_no = FileNo(u64::from(file.id.index));
        let page_bytes = FRAME_BYTES as u64;
        let mut pos = offset;
        while pos < end {
            let page: Page = pos / page_bytes;
            if file.is_marker(page) {
                break;
            }
            let within = (pos % page_bytes) as usize;
            let n = (page_bytes - within as u64).min(end - pos) as usize;
            let at = (pos - offset) as usize;
            let dst = &mut buf[at..at + n];
            let found = self
                .queue
                .read_hit(&file.index, file_no, page, self.run, |frame| {
                    self.copy_racing(frame, within, dst)
                })
                .map_err(died)?;
            if !matches!(found, Optimistic::Hit(_)) {
                break;
            }
            self.counts.optimistic_hits.hit();
            pos += n as u64;
        }
        Ok((pos - offset) as usize)
    }

    /// Forced readahead of pages `[start, end)` of `file` (`File::readahead`, `WillNeed`):
    /// the pages the index lacks read into frames and cached as a window's are
    /// (`read_window`, no marker, no page needed), at most `chunk` pages (and the domain's
    /// `window_cap`) a step; stops at the end of the file and after a step that left
    /// pages out (no frames to be had: the rest would evict what this read brought in).
    /// The handle's window and previous read are left as they were. Counted as a
    /// window's pages (`read_ahead`).
    ///
    /// Context: a worker thread (shared/offload.rs), or any thread that may block in
    /// `preadv`; takes the domain's locks as a miss does.
    /// Errors: `preadv`'s (the pages read before it stay cached).
    pub(crate) fn prefetch(
        &self,
        file: &SharedFile<'m>,
        start: Page,
        end: Page,
        chunk: u64,
    ) -> io::Result<()> {
        let file_end = file
            .size
            .load(Ordering::Acquire)
            .div_ceil(FRAME_BYTES as u64);
        let end = end.min(file_end);
        let step = chunk.min(u64::from(self.window_cap)).max(1);
        let queue = self.queue();
        let mut at = start;
        while at < end {
            let step_end = end.min(at + step);
            self.read_window(queue, file, at, step_end, NO_MARKER, None)?;
            if !file.index.gaps(at, step_end).is_empty() {
                break;
            }
            at = step_end;
        }
        Ok(())
    }

    /// Whether the index of `file` lacks a page of `[start, end)` before the end of the
    /// file (a walk per folio, lock-free; a hint): a forced readahead of a range the
    /// domain holds whole costs this, not a worker's wake-up.
    ///
    /// Context: any thread; never blocks.
    pub(crate) fn lacks_pages(&self, file: &SharedFile<'m>, start: Page, end: Page) -> bool {
        let file_end = file
            .size
            .load(Ordering::Acquire)
            .div_ceil(FRAME_BYTES as u64);
        let end = end.min(file_end);
        start < end && !file.index.gaps(start, end).is_empty()
    }

    /// `read_at`'s every read but a one-page optimistic hit: page by page, each a hit,
    /// a pinned hit, a wait for a page in flight, a miss (with its window) or an uncached
    /// read (`read_page`), and the handle's marker met. `buf` ends within the file, whose size is `size`.
    #[inline(never)]
    fn read_pages(
        &self,
        file: &SharedFile<'m>,
        buf: &mut [u8],
        offset: u64,
        size: u64,
    ) -> io::Result<usize> {
        let end = offset + buf.len() as u64;
        let queue = self.queue();
        let page_bytes = FRAME_BYTES as u64;
        let pages = Pages {
            wanted_end: (end - 1) / page_bytes + 1,
            file_end: size.div_ceil(page_bytes),
        };
        let mut moved = false;
        let mut pos = offset;
        while pos < end {
            let page: Page = pos / page_bytes;
            let within = (pos % page_bytes) as usize;
            let n = (page_bytes - within as u64).min(end - pos) as usize;
            let at = (pos - offset) as usize;
            let dst = &mut buf[at..at + n];
            moved |= self.read_page(queue, file, page, pages, within, dst)?;
            // A marker that is a page this call has read (a hit on it, or the page its
            // own miss opened a window at) starts the next window.
            if file.is_marker(page) && file.take_marker(page) {
                self.at_marker(queue, file, page, pages)?;
                moved = true;
            }
            pos += n as u64;
        }
        if moved {
            // The sequential test's hint: only calls that missed or read ahead (a store
            // per hit would bounce its line between the handle's threads: cell.rs).
            file.ra.set_prev_index(PageIndex(pages.wanted_end - 1));
        }
        Ok(buf.len())
    }

    /// One page of `read_pages` into `dst` (from `within` of it): a hit, a pinned hit, a
    /// wait for the page in flight then a look again, a miss (with its window; a miss
    /// whose insertion another reader beat reads the page from that reader's frame: a look
    /// again), or an uncached read. Whether it missed (the caller's sequential hint).
    fn read_page(
        &self,
        queue: &SharedQueue<'_>,
        file: &SharedFile<'m>,
        page: Page,
        pages: Pages,
        within: usize,
        dst: &mut [u8],
    ) -> io::Result<bool> {
        let index = &file.index;
        let file_no = FileNo(u64::from(file.id.index));
        let (mut parks, mut conflicts, mut missed) = (0, 0, false);
        loop {
            let flight = match self.optimistic(queue, index, file_no, page, within, dst)? {
                Optimistic::Hit(_) => {
                    self.counts.optimistic_hits.hit();
                    return Ok(missed);
                }
                Optimistic::Absent => None,
                // Its GEN loaded again for the wait (`None`: published meanwhile, look
                // again at once; counted with the parks all the same, so that the loop is
                // bounded whatever the other readers do).
                Optimistic::InFlight(frame) => Some(queue.in_flight(frame)),
                Optimistic::Stale => match queue.try_pin_hit(index, page, self.me) {
                    PinHit::Pinned(Pinned(frame)) => {
                        self.run.at(Step::Copying).map_err(died)?;
                        self.copy_out(frame, within, dst);
                        queue.unpin(frame, self.me);
                        bump(&self.counts.pinned_hits);
                        return Ok(missed);
                    }
                    PinHit::Ours => {
                        // Another thread of ours holds its frame pinned by our bit (module
                        // docs, "Threads").
                        bump(&self.counts.sibling_pinned);
                        self.read_uncached(file, page, within, dst)?;
                        return Ok(missed);
                    }
                    PinHit::InFlight(flight) => Some(Some(flight)),
                    PinHit::Missed => None,
                },
            };
            if let Some(flight) = flight {
                if parks == FLIGHT_PARKS_MAX {
                    bump(&self.counts.duplicates);
                    self.read_uncached(file, page, within, dst)?;
                    return Ok(missed);
                }
                parks += 1;
                if let Some(flight) = flight {
                    self.wait(queue, index, page, flight);
                }
                continue;
            }
            if conflicts == CONFLICTS_MAX {
                bump(&self.counts.duplicates);
                self.uncached(file, page, within, dst)?;
                return Ok(true);
            }
            missed = true;
            match self.miss(queue, file, page, pages, within, dst)? {
                Needed::Copied => return Ok(true),
                Needed::Elsewhere => conflicts += 1,
            }
        }
    }

    /// A park on the in-flight `flight` of `page` (queue.rs, `wait_in_flight`), counted.
    fn wait(&self, queue: &SharedQueue<'_>, index: &SharedIndex<'m>, page: Page, flight: InFlight) {
        bump(&self.counts.waits);
        let slots = self.member.domain().slots();
        queue.wait_in_flight(index, page, flight, &slots, self.run);
    }

    /// The optimistic hit (module docs), tried twice: `Hit` (`dst` holds the page's bytes),
    /// `Absent` (a miss), `InFlight` (wait), or `Stale` twice (the caller pins: `pin_hit`).
    #[inline]
    fn optimistic(
        &self,
        queue: &SharedQueue<'_>,
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
            bump(&self.counts.stale);
        }
        Ok(Optimistic::Stale)
    }

    /// A missed page (module docs, "Readahead"): the window the policy opens at it (the
    /// handle's state and previous read, `decide_on_miss`), or else the request's pages
    /// from it on, read into frames where the index lacks them and cached; the page
    /// copied into `dst` (`Copied`), or left to the reader whose insertion of it beat ours
    /// (`Elsewhere`: look it up again). Uncached when no frame can be had.
    fn miss(
        &self,
        queue: &SharedQueue<'_>,
        file: &SharedFile<'m>,
        page: Page,
        pages: Pages,
        within: usize,
        dst: &mut [u8],
    ) -> io::Result<Needed> {
        let index = &file.index;
        bump(&self.counts.misses);
        let wanted = pages.wanted_end - page;
        let mut window = None;
        if self.window_cap > 0 && file.ra.max_pages() > 0 {
            let mut req = MissRequest {
                index: PageIndex(page),
                pages: wanted,
                prev_index: file.ra.prev_index(),
                cached_before: 0,
            };
            if !req.is_sequential() {
                // The policy asks only whether more than `wanted` pages are cached right
                // before this one.
                req.cached_before = cached_before(index, page, wanted + 1);
            }
            window = file.ra.update(|state, max_pages| {
                let max_pages = max_pages.min(self.window_cap);
                pages.within_file(decide_on_miss(state, req, max_pages))
            });
        }
        let (end, marker) = match window {
            Some(w) => {
                // Pre: a window opened on a miss starts at the page that missed.
                assert_eq!(w.start, page, "{w:?}");
                bump(&self.counts.windows);
                (w.end().min(pages.file_end), w.marker())
            }
            // The request's pages from the missed one on, at most a window's worth.
            None => (
                pages
                    .wanted_end
                    .min(page + u64::from(self.window_cap.max(1))),
                NO_MARKER,
            ),
        };
        self.read_window(queue, file, page, end, marker, Some((within, dst)))
    }

    /// A marker page was read (its bit cleared by this thread): the next window
    /// (`decide_on_marker`: ramped from the handle's, or after the first page missing
    /// from `page` on) read now, by this thread (module docs, "Readahead"). A marker past
    /// the bits whose decision opens nothing forgets the handle's window, so that a hot
    /// page that was once its marker does not walk the index on every hit.
    fn at_marker(
        &self,
        queue: &SharedQueue<'_>,
        file: &SharedFile<'m>,
        page: Page,
        pages: Pages,
    ) -> io::Result<()> {
        let index = &file.index;
        let mut decided_none = false;
        let installed = file.ra.update(|state, max_pages| {
            let max_pages = max_pages.min(self.window_cap);
            let next_miss = if max_pages == 0 {
                None
            } else {
                let gaps = index.gaps(page, page + u64::from(max_pages));
                gaps.first().map(|&(first, _)| PageIndex(first))
            };
            let decision = pages.within_file(decide_on_marker(
                state,
                PageIndex(page),
                next_miss,
                max_pages,
            ));
            decided_none = decision == Decision::None;
            decision
        });
        let Some(window) = installed else {
            if decided_none && !file.has_marker_bit(page) {
                file.ra.reset();
            }
            return Ok(());
        };
        bump(&self.counts.windows);
        // Read ahead: a failed read is not this call's error (the reader asked for none of
        // these pages; a miss of one reads it again).
        let _ = self.read_window(
            queue,
            file,
            window.start,
            window.end().min(pages.file_end),
            window.marker(),
            None,
        );
        Ok(())
    }

    /// Reads the pages of `[start, end)` that `index` lacks into frames and caches them
    /// (module docs, "Readahead"): the frames leased in one hold of a magazine, one
    /// `preadv` per contiguous run, each frame handed over, each run inserted in one hold
    /// of the index's lock. The window's `marker` is marked if it is one of the pages read
    /// (as today's READAHEAD bit goes on the marker's folio only if the window allocated
    /// it). With `need`, page `start` is the page a miss needs: leased and inserted
    /// whether or not the index holds it by now (another reader's insertion meanwhile is
    /// the conflict path: `Elsewhere`), read, its bytes from `need.0` copied into `need.1`
    /// (`Copied`); uncached when no frame can be had; its read's error is the call's.
    ///
    /// Context: as `read_at`'s miss.
    fn read_window(
        &self,
        queue: &SharedQueue<'_>,
        file: &SharedFile<'m>,
        start: Page,
        end: Page,
        marker: Page,
        need: Option<(usize, &mut [u8])>,
    ) -> io::Result<Needed> {
        let index = &file.index;
        // The pages to read, in order: the needed page first (it is `start`), then the
        // gaps the index shows (a hint: a page inserted meanwhile is a conflict).
        let mut todo: Batch<Page> = Batch::new();
        if need.is_some() {
            todo.push(start);
        }
        if end > start + 1 || need.is_none() {
            for (first, after) in index.gaps(start, end) {
                todo.extend((first..after).filter(|&p| need.is_none() || p != start));
            }
        }
        // The window's marker held in flight by another reader (whose window is read at
        // the same time as ours): marked for this handle all the same, so that our next
        // window ramps on from this one as if we had read it (module docs, "Another
        // reader's window"). A marker page merely cached stays unmarked, as today's.
        if (start..end).contains(&marker)
            && !todo.contains(&marker)
            && self.is_in_flight(index, marker)
        {
            file.mark(marker);
        }
        if todo.is_empty() {
            return Ok(Needed::Copied);
        }
        let frames = self.lease(queue, todo.len()).map_err(died)?;
        if todo[..frames.len()].contains(&marker) {
            // Before the insertion: no hit meets it unmarked (a failed read leaves a
            // marker on a page not cached: its miss opens what a window would).
            file.mark(marker);
        }
        let Some((within, dst)) = need else {
            if frames.is_empty() {
                return Ok(Needed::Copied);
            }
            return self.fill(queue, file, &todo[..frames.len()], &frames, None);
        };
        if frames.is_empty() {
            self.uncached(file, start, within, dst)?;
            return Ok(Needed::Copied);
        }
        // A window that got fewer frames than it wanted shrinks to its first pages,
        // down to the page the reader needs.
        self.fill(
            queue,
            file,
            &todo[..frames.len()],
            &frames,
            Some((within, dst)),
        )
    }

    /// Whether `index` names a frame in flight at `page` (another reader's, or a sibling
    /// thread's, read of it not published yet): a walk and a load of its GEN word.
    fn is_in_flight(&self, index: &SharedIndex<'m>, page: Page) -> bool {
        match index.lookup(page) {
            Entry::Folio { frame, order: 0 } => {
                u32::try_from(frame).is_ok_and(|frame| self.queue.in_flight(Frame(frame)).is_some())
            }
            _ => false,
        }
    }

    /// Up to `want` frames leased to us, from one hold of a magazine: its frames, a
    /// reclaim of a batch when it and the allocator have none, and again, while a
    /// reclaim frees frames (at most one more reclaim than the batches wanted).
    fn lease(&self, queue: &SharedQueue<'_>, want: usize) -> Result<Batch<Frame>, Died> {
        let mut frames = Batch::with_capacity(want);
        let mut magazine = self.magazine();
        let mut reclaims_left = want.div_ceil(self.batch as usize) + 1;
        // The quota (steward.rs, "The quota"): a queue that would hold more than it with
        // these frames gives its coldest back first, as a full allocator makes it.
        let quota = self.member.domain().quota() as usize;
        while reclaims_left > 0 && queue.count() as usize + want > quota {
            reclaims_left -= 1;
            if self.reclaim_batch(queue)? == 0 {
                break;
            }
        }
        while frames.len() < want {
            match self.frame_mapped(&mut magazine)? {
                Some(frame) => frames.push(frame),
                None if reclaims_left > 0 => {
                    reclaims_left -= 1;
                    if self.reclaim_batch(queue)? == 0 {
                        reclaims_left = 0;
                    }
                }
                None => break,
            }
        }
        Ok(frames)
    }

    /// M1-M5 for `pages` (ascending, each a gap or the needed first one) in `frames` (one
    /// each, leased to us; module docs, "In flight"): each frame handed over in flight
    /// (pinned by us), each run inserted (one hold of the index's lock), then only the
    /// pages our frames placed read, one `preadv` per contiguous run, each published
    /// (FLIGHT cleared, its waiters woken), the needed page (`pages[0]`) copied out, every
    /// frame unpinned, the frames not placed freed. A page another reader inserted first
    /// is not read (`Elsewhere` for the needed one). A failed read's frames are taken out
    /// of the index again (`abandon`) and freed; so are the frames of a panic meanwhile
    /// (`FillGuard`: module docs, "Unwinding").
    fn fill(
        &self,
        queue: &SharedQueue<'_>,
        file: &SharedFile<'m>,
        pages: &[Page],
        frames: &[Frame],
        need: Option<(usize, &mut [u8])>,
    ) -> io::Result<Needed> {
        let mut guard = FillGuard {
            reader: self,
            file,
            pages,
            frames,
            handed: 0,
            settled: 0,
            unpinned: false,
            armed: true,
        };
        let filled = self.fill_guarded(queue, &mut guard, need);
        // Whatever it returned: an error is a failed read, its frames abandoned already,
        // or a test's death (`Died`), whose frames are the steward's sweep's to mend.
        guard.armed = false;
        filled
    }

    /// `fill`, its progress kept in `guard` for an unwind (module docs, "Unwinding").
    fn fill_guarded(
        &self,
        queue: &SharedQueue<'_>,
        guard: &mut FillGuard<'_, 'm, R>,
        need: Option<(usize, &mut [u8])>,
    ) -> io::Result<Needed> {
        let (file, pages, frames) = (guard.file, guard.pages, guard.frames);
        let index = &file.index;
        assert_eq!(pages.len(), frames.len());
        // Pre: ascending, so that runs are contiguous pages.
        debug_assert!(pages.windows(2).all(|w| w[0] < w[1]), "{pages:?}");
        let domain = self.member.domain();
        let slots = domain.slots();
        let file_no = FileNo(u64::from(file.id.index));
        let indexes = self.indexes.as_slice();
        // M1-M2: FILE, PAGE and FLIGHT stored, pinned, handed over.
        for (&frame, &page) in frames.iter().zip(pages) {
            queue
                .hand_over_in_flight(frame, file_no, page, self.me, indexes, &slots, self.run)
                .map_err(died)?;
            guard.handed += 1;
        }
        // The broken variant (tests): M4 before M3, the order before the in-flight protocol
        // (a miss read its pages, then inserted them), with `Step::Reading` between.
        let read_first = if reads_before_insertion(self.run.flaw()) {
            let every: Batch<usize> = (0..pages.len()).collect();
            let read = self.read_frames(file, pages, frames, &every, need.is_some());
            self.run.at(Step::Reading).map_err(died)?;
            Some(read)
        } else {
            None
        };
        // M3: each run inserted. `placed[i]`: the index names frames[i] (ours to read).
        let mut placed: Batch<bool> = Batch::from_elem(false, pages.len());
        let mut full: Vec<usize> = Vec::new();
        // The frames not placed (by their index into `frames`): freed once unpinned
        // (`SharedQueue::drop_unplaced`).
        let mut unplaced: Batch<usize> = Batch::new();
        for (first, len) in runs(pages, RUN_PAGES_MAX) {
            let folios: Batch<Folio> = frames[first..first + len]
                .iter()
                .map(|&f| Folio {
                    frame: u64::from(f.0),
                    order: 0,
                })
                .collect();
            let outcome = index
                .insert_run(self.me, pages[first], &folios, &slots, self.run)
                .map_err(died)?;
            let mut refaults = 0;
            for (i, outcome) in outcome.iter().enumerate() {
                match outcome {
                    Placed::Inserted(shadows) => {
                        refaults += shadows.len() as u64;
                        placed[first + i] = true;
                    }
                    Placed::Conflict => {
                        self.conflict();
                        unplaced.push(first + i);
                    }
                    Placed::Full => full.push(first + i),
                }
            }
            if refaults > 0 {
                // A larger quota would have hit (steward.rs, "The quota": it grows only then).
                domain.note_refaults(refaults);
            }
        }
        // The needed page's frame, placed in no index for want of a node frame, is still
        // read (nobody else can find it), so that the miss returns its bytes.
        let mut read_unplaced = false;
        if !full.is_empty() {
            // The tree needs a node frame and the allocator has none free: reclaim makes
            // some (our frames are pinned: never its victims), then those insertions again.
            self.reclaim_batch(queue).map_err(died)?;
            for i in full {
                let folio = Folio {
                    frame: u64::from(frames[i].0),
                    order: 0,
                };
                let outcome = index
                    .insert_run(self.me, pages[i], &[folio], &slots, self.run)
                    .map_err(died)?;
                if let Some(Placed::Inserted(_)) = outcome.first() {
                    placed[i] = true;
                    continue;
                }
                self.conflict();
                read_unplaced |=
                    i == 0 && need.is_some() && outcome.first() != Some(&Placed::Conflict);
                unplaced.push(i);
            }
        }
        // M3': our pages past the record's size now taken out again, unread (module docs,
        // "Against a writer"): a writer's `truncate` sets the size, then takes the pages
        // past it out under the index's lock, then its `ftruncate` reaches the disk. A page
        // we inserted after that removal is past this size (the index's lock orders the
        // load after the writer's store), and read before the `ftruncate` it would be the
        // page's older bytes, cached past the end until an extension shows them.
        let file_end = file
            .size
            .load(Ordering::Acquire)
            .div_ceil(FRAME_BYTES as u64);
        for i in 0..pages.len() {
            if placed[i] && pages[i] >= file_end {
                queue
                    .abandon(frames[i], self.me, indexes, &slots, self.run)
                    .map_err(died)?;
                placed[i] = false;
                unplaced.push(i);
                // The needed page is still read, into its frame in no index, for this
                // read (concurrent with the truncation: the page before it or after it).
                read_unplaced |= i == 0 && need.is_some();
            }
        }
        // M4: the pages to read (those placed, and the needed one read for want of a node
        // frame or past the size), one `preadv` per run of consecutive ones.
        let to_read: Batch<usize> = (0..pages.len())
            .filter(|&i| placed[i] || (i == 0 && read_unplaced))
            .collect();
        let (read, need_error) = match read_first {
            None => {
                self.run.at(Step::Reading).map_err(died)?;
                self.read_frames(file, pages, frames, &to_read, need.is_some())
            }
            // The broken variant read them all already: those are what it keeps.
            Some((mut read, need_error)) => {
                for (i, read) in read.iter_mut().enumerate() {
                    *read &= to_read.contains(&i);
                }
                (read, need_error)
            }
        };
        // M5 for the pages read; a placed page whose read failed is taken out again.
        for i in 0..pages.len() {
            if placed[i] && read[i] {
                queue.publish(frames[i], self.me);
            } else if placed[i] {
                queue
                    .abandon(frames[i], self.me, indexes, &slots, self.run)
                    .map_err(died)?;
                unplaced.push(i);
            }
            guard.settled = i + 1;
        }
        let read_count = read.iter().filter(|&&r| r).count();
        // The needed page neither read nor failed: another reader's insertion beat ours.
        let needed = if need.is_some() && !read[0] && need_error.is_none() {
            Needed::Elsewhere
        } else {
            Needed::Copied
        };
        add(
            &self.counts.read_ahead,
            (read_count - usize::from(need.is_some() && read[0])) as u64,
        );
        if let Some((within, dst)) = need {
            if read[0] {
                self.run.at(Step::Copying).map_err(died)?;
                self.copy_out(frames[0], within, dst);
            }
        }
        for &frame in frames {
            queue.unpin(frame, self.me);
        }
        guard.unpinned = true;
        for &i in &unplaced {
            queue
                .drop_unplaced(
                    frames[i], file_no, pages[i], self.me, indexes, &slots, self.run,
                )
                .map_err(died)?;
        }
        match need_error {
            Some(e) => Err(e),
            None => Ok(needed),
        }
    }

    /// M4: the pages `pages[i]` for each `i` of `which` (ascending) read into `frames[i]`,
    /// one `preadv` per run of consecutive pages, the bytes past a short read zeroed:
    /// which were read, and the error of the read of `pages[0]` if `need` (the page the
    /// miss needs) and it failed.
    ///
    /// Context: the frames are ours, leased then handed over in flight (module docs).
    fn read_frames(
        &self,
        file: &SharedFile<'m>,
        pages: &[Page],
        frames: &[Frame],
        which: &[usize],
        need: bool,
    ) -> (Batch<bool>, Option<io::Error>) {
        let domain = self.member.domain();
        let read_pages: Batch<Page> = which.iter().map(|&i| pages[i]).collect();
        let mut read: Batch<bool> = Batch::from_elem(false, pages.len());
        let mut need_error = None;
        for (first, len) in runs(&read_pages, RUN_PAGES_MAX) {
            let at = &which[first..first + len];
            let data: Batch<*mut u8> = at.iter().map(|&i| domain.frame_data(frames[i])).collect();
            // The frames are ours: leased, then in flight (module docs: nobody reads their
            // bytes before `publish`; an optimistic hit that found one in an index before it
            // was reclaimed may still be loading them): written by the kernel and by atomic
            // stores only, after the lease's release fence.
            match pread_pages(file, &data, pages[at[0]]) {
                Ok(got) => {
                    bump(&self.counts.preads);
                    for (k, &into) in data.iter().enumerate() {
                        let filled = got.saturating_sub(k * FRAME_BYTES).min(FRAME_BYTES);
                        // SAFETY: `into` is FRAME_BYTES of the mapping (`frame_data`),
                        // `filled` of them read; nobody else writes them (above).
                        unsafe { atomic_zero(into.add(filled), FRAME_BYTES - filled) };
                    }
                    for &i in at {
                        read[i] = true;
                    }
                }
                Err(e) => {
                    if at[0] == 0 && need {
                        need_error = Some(e);
                    }
                }
            }
        }
        (read, need_error)
    }

    /// A frame of ours that its insertion did not place (counted; its page not read, but
    /// for the needed page of a tree with no node frame). The frame stays queued in no
    /// index until `fill` frees it once unpinned.
    fn conflict(&self) {
        bump(&self.counts.conflicts);
    }

    /// The magazine's next frame; when the magazine leases a new batch for it, every
    /// frame of the batch is mapped into this process first (`map_batch`).
    fn frame_mapped(&self, magazine: &mut Magazine) -> Result<Option<Frame>, Died> {
        let slots = self.member.domain().slots();
        let leases = magazine.len() == 0;
        // (The magazine leases only when empty: what it holds after is that batch.)
        let frame = magazine.alloc(self.queue.buddy(), &slots, self.run)?;
        if leases {
            if let Some(frame) = frame {
                self.map_batch(frame, magazine.frames());
            }
        }
        Ok(frame)
    }

    /// Maps a newly leased batch's pages into this process in one call per run of
    /// consecutive frames (`Domain::populate_data`: `MADV_POPULATE_WRITE`), rather than
    /// one fault per page in each miss's `pread`: the steward populated the pages in the
    /// region file ahead (populate.rs), but this process's mapping still lacks them.
    /// Measured on this machine: a 4 KiB O_DIRECT `pread` into a page in the file but
    /// not mapped costs 5-6 µs more CPU than into a mapped page; populating costs 1.5 µs
    /// a page (docs/sharing.md, "The data area populated ahead"). Best effort: a failure
    /// leaves the `pread` to fault the page in, as before.
    ///
    /// Context: the frames are leased to us (populating changes no byte anyway); takes
    /// this process's address-space lock for reading, for 16 pages at a time.
    fn map_batch(&self, taken: Frame, rest: &[Frame]) {
        let domain = self.member.domain();
        // The batch in its lease's order: `rest`, then the frame `alloc` took from its
        // end (`lease_batch` appends each block's frames in ascending order).
        let mut run: Option<std::ops::Range<u32>> = None;
        for frame in rest.iter().chain(std::iter::once(&taken)) {
            run = match run {
                Some(r) if r.end == frame.0 => Some(r.start..frame.0 + 1),
                Some(r) => {
                    let _ = domain.populate_data(r);
                    Some(frame.0..frame.0 + 1)
                }
                None => Some(frame.0..frame.0 + 1),
            };
        }
        if let Some(r) = run {
            let _ = domain.populate_data(r);
        }
    }

    /// Reclaims a batch of frames into the allocator (counted): how many it freed.
    fn reclaim_batch(&self, queue: &SharedQueue<'_>) -> Result<u32, Died> {
        self.reclaim(queue, self.batch)
    }

    /// Up to `want` of the coldest frames reclaimed (`SharedQueue::reclaim`), each
    /// member's share and floor kept (queue.rs, "Owners and shares"), counted. Returns
    /// how many.
    fn reclaim(&self, queue: &SharedQueue<'_>, want: u32) -> Result<u32, Died> {
        let domain = self.member.domain();
        let slots = domain.slots();
        let freed = queue.reclaim(
            want,
            Shares::attached(domain.quota(), &slots, &domain.records()),
            self.me,
            self.indexes.as_slice(),
            &slots,
            self.run,
        )?;
        bump(&self.counts.reclaims);
        add(&self.counts.reclaimed, u64::from(freed));
        Ok(freed)
    }

    /// A missed page read uncached (counted).
    fn uncached(
        &self,
        file: &SharedFile<'m>,
        page: Page,
        within: usize,
        dst: &mut [u8],
    ) -> io::Result<()> {
        bump(&self.counts.uncached);
        self.read_uncached(file, page, within, dst)
    }

    /// The page read into a private page of this call's (aligned, for O_DIRECT) and
    /// copied from there.
    fn read_uncached(
        &self,
        file: &SharedFile<'m>,
        page: Page,
        within: usize,
        dst: &mut [u8],
    ) -> io::Result<()> {
        let mut private = PrivatePage([0; FRAME_BYTES]);
        let got = pread_page(file, private.0.as_mut_ptr(), page)?;
        private.0[got..].fill(0);
        dst.copy_from_slice(&private.0[within..within + dst.len()]);
        bump(&self.counts.preads);
        Ok(())
    }

    /// Copies `dst.len()` bytes from `within` of `frame`'s data with byte-wise atomic
    /// loads (`arena::atomic_copy`): the optimistic hit's copy, which another process may
    /// race by reusing the frame and writing it (the copy is then discarded).
    ///
    /// Context: `frame` is one `read_hit` found in an index (module docs).
    #[inline(always)]
    fn copy_racing(&self, frame: Frame, within: usize, dst: &mut [u8]) {
        assert!(within + dst.len() <= FRAME_BYTES);
        let data = self.member.domain().frame_data(frame);
        // SAFETY: `within + dst.len()` lies inside the frame's FRAME_BYTES of the mapping,
        // which stays mapped while we are a member; every other write to them is atomic or
        // the kernel's (`pread`, `atomic_zero`, the index's node words); `dst` is our own.
        unsafe { atomic_copy(data.add(within), dst) }
    }

    /// Copies `dst.len()` bytes from `within` of `frame`'s data, with byte-wise atomic
    /// loads: its writer may append in place past the size this read loaded meanwhile.
    ///
    /// Context: we hold `frame` pinned, and it holds the page's data (module docs).
    fn copy_out(&self, frame: Frame, within: usize, dst: &mut [u8]) {
        assert!(within + dst.len() <= FRAME_BYTES);
        let data = self.member.domain().frame_data(frame);
        // SAFETY: `within + dst.len()` lies inside the frame's FRAME_BYTES; nobody writes
        // the bytes of a pinned frame that a read returns (module docs), and the only
        // other stores to it are atomic (an append in place past the size); `dst` is our
        // own memory, not the region.
        unsafe { atomic_copy(data.add(within), dst) }
    }
}

impl<R: Run> Drop for SharedReader<'_, R> {
    /// Returns the magazines' frames (a member detaches holding no lease).
    fn drop(&mut self) {
        let slots = self.member.domain().slots();
        for magazine in self.magazines.iter_mut() {
            let magazine = magazine.get_mut().unwrap_or_else(PoisonError::into_inner);
            let _ = magazine.drain(self.queue.buddy(), &slots, self.run);
        }
        // Our frames nobody's, before the slot is freed for another process (queue.rs,
        // "Owners and shares").
        let indexes = self.indexes.as_slice();
        let _ = self
            .queue
            .disown(self.me, self.me, indexes, &slots, self.run);
    }
}

/// How long a `FillGuard` waits for this process's hold of a lock it needs to end (a
/// sibling thread's hold lasts a few stores) before it takes the hold for its own panic's
/// and leaves its frames (module docs, "Unwinding").
const UNWIND_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// A miss's frames from their hand-over in flight (M1) to their unpin, and what `fill`
/// did with them so far: dropped armed only by a panic between (module docs,
/// "Unwinding"), it ends the miss as a failed read ends: its frames not published out of
/// the index, their waiters woken, every frame unpinned, the unpublished ones freed.
///
/// Costs the miss no atomic: three counters and a flag in the caller's frame, the flag
/// cleared once `fill_guarded` returns.
struct FillGuard<'a, 'm, R: Run> {
    reader: &'a SharedReader<'m, R>,
    file: &'a SharedFile<'m>,
    pages: &'a [Page],
    frames: &'a [Frame],
    /// `frames[..handed]` are handed over in flight (M1-M2) and pinned by us.
    handed: usize,
    /// `frames[..settled]` are published (M5) or abandoned, or were never placed.
    settled: usize,
    /// Every frame unpinned: what is left (`drop_unplaced`) reclaim does as well.
    unpinned: bool,
    /// Cleared when `fill_guarded` returns, whatever it returned.
    armed: bool,
}

impl<R: Run> FillGuard<'_, '_, R> {
    /// Whether this process holds (as it is, or still after `UNWIND_LOCK_WAIT`) a lock
    /// the unwind takes: the queue's, its allocator's or the file's index's. Then the
    /// panic came from under it: taking it would wait for ever for our own holder.
    fn lock_held(&self) -> bool {
        let reader = self.reader;
        let held = || reader.queue.locked_by(reader.me, &self.file.index);
        let since = std::time::Instant::now();
        while held() {
            if since.elapsed() > UNWIND_LOCK_WAIT {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        false
    }
}

impl<R: Run> Drop for FillGuard<'_, '_, R> {
    /// On a panic in `fill` (module docs, "Unwinding"): each frame handed over and not
    /// settled abandoned (out of its index if it is there, its waiters woken: they look
    /// again, miss, and read the page themselves), every frame handed over unpinned, then
    /// each freed unless an index names it (`drop_unplaced` checks that: a published
    /// frame stays cached). Not when this process holds a lock it would take (the panic
    /// came from under it, under a `Run` that does not abort: lock.rs, "A panic under the
    /// lock"), and nothing more after a `Died` (a test's death).
    fn drop(&mut self) {
        if !self.armed || self.unpinned || unguarded(self.reader.run.flaw()) || self.lock_held() {
            return;
        }
        let reader = self.reader;
        let (queue, me, run) = (&reader.queue, reader.me, reader.run);
        let slots = reader.member.domain().slots();
        let indexes = reader.indexes.as_slice();
        let file_no = FileNo(u64::from(self.file.id.index));
        let handed = &self.frames[..self.handed];
        for &frame in &handed[self.settled..] {
            if queue.abandon(frame, me, indexes, &slots, run).is_err() {
                return;
            }
        }
        for &frame in handed {
            queue.unpin(frame, me);
        }
        for (&frame, &page) in handed.iter().zip(self.pages) {
            if queue
                .drop_unplaced(frame, file_no, page, me, indexes, &slots, run)
                .is_err()
            {
                return;
            }
        }
    }
}

/// Whether a broken variant's unwind guard does nothing (`Flaw::UnwindUnguarded`).
fn unguarded(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::UnwindUnguarded => true,
        _ => false,
    }
}

/// Whether a broken variant's miss reads its pages before it inserts them
/// (`Flaw::ReadBeforeInsertion`: the order before the in-flight protocol).
fn reads_before_insertion(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::ReadBeforeInsertion => true,
        _ => false,
    }
}

/// Reads page `page` of `file` into the FRAME_BYTES at `into` (page-aligned, ours to
/// write: a leased frame or the private page; a pointer, not a slice, since an optimistic
/// hit may be loading a leased frame's old bytes meanwhile): the bytes read, fewer than
/// FRAME_BYTES only at the end of the file.
///
/// Errors: `preadv`'s (EINTR retried): `pread_pages` of one page.
fn pread_page(file: &SharedFile, into: *mut u8, page: Page) -> io::Result<usize> {
    pread_pages(file, &[into], page)
}

/// What a miss did with the page it needs (`fill`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Needed {
    /// Its bytes are copied out (read into our frame, or uncached).
    Copied,
    /// Another reader's frame was inserted at the page first: nothing read; look the page
    /// up again (a hit, or a wait while that frame is in flight).
    Elsewhere,
}

/// Where a `read_at` call's pages end: the call's (the page after its last byte) and the
/// file's (the record's size, rounded up to a page).
#[derive(Clone, Copy, Debug)]
struct Pages {
    wanted_end: Page,
    file_end: Page,
}

impl Pages {
    /// A window that starts at or past the end of the file reads nothing: not installed
    /// (as a private handle's, prefetch.rs `within_file`).
    fn within_file(&self, decision: Decision) -> Decision {
        match decision {
            Decision::Window(w) if w.start >= self.file_end => Decision::None,
            other => other,
        }
    }
}

/// The largest window through a domain of `frames` frames: an eighth of it, rounded down
/// to a power of two (a window and the next one in flight take at most a quarter of the
/// domain, as a private cache's cap does for its capacity); 0 below 8 frames.
fn window_cap(frames: u32) -> u32 {
    match frames / 8 {
        0 => 0,
        eighth => 1 << eighth.ilog2(),
    }
}

/// The pages right before `page` that `index` holds without a gap, counted up to `limit`
/// (the policy's `cached_before`: it asks only whether there are more than it wants).
fn cached_before(index: &SharedIndex<'_>, page: Page, limit: u64) -> u64 {
    let mut count = 0;
    while count < limit && count < page {
        if !matches!(index.lookup(page - count - 1), Entry::Folio { .. }) {
            break;
        }
        count += 1;
    }
    count
}

/// The runs of consecutive pages in `pages` (ascending), as (first index, length), each at
/// most `max` long.
fn runs(pages: &[Page], max: usize) -> SmallVec<[(usize, usize); 4]> {
    let mut runs: SmallVec<[(usize, usize); 4]> = SmallVec::new();
    for (i, &page) in pages.iter().enumerate() {
        match runs.last_mut() {
            Some((first, len)) if *len < max && pages[*first] + *len as u64 == page => *len += 1,
            _ => runs.push((i, 1)),
        }
    }
    runs
}

/// Reads pages `first..first + into.len()` of `file` into the frames at `into` (each
/// FRAME_BYTES, page-aligned, ours to write: leased frames; pointers, as `pread_page`'s)
/// with one `preadv` (more only after a short buffered read): the bytes read, fewer than
/// all only at the end of the file.
///
/// Errors: `preadv`'s (EINTR retried).
fn pread_pages(file: &SharedFile, into: &[*mut u8], first: Page) -> io::Result<usize> {
    assert!(!into.is_empty() && into.len() <= RUN_PAGES_MAX);
    let offset = first * FRAME_BYTES as u64;
    let total = into.len() * FRAME_BYTES;
    let mut iovecs: Batch<libc::iovec> = Batch::with_capacity(into.len());
    let mut got = 0;
    while got < total {
        let (at, skip) = (got / FRAME_BYTES, got % FRAME_BYTES);
        iovecs.clear();
        for (i, &frame) in into[at..].iter().enumerate() {
            let skip = if i == 0 { skip } else { 0 };
            iovecs.push(libc::iovec {
                // SAFETY: `skip` < FRAME_BYTES: inside the frame.
                iov_base: unsafe { frame.add(skip) }.cast(),
                iov_len: FRAME_BYTES - skip,
            });
        }
        // SAFETY: the kernel writes the iovecs' bytes, the frames' unread rest, which the
        // caller lets us write for the call; `iovecs` outlives the call.
        let n = unsafe {
            libc::preadv(
                file.file.as_raw_fd(),
                iovecs.as_ptr(),
                iovecs.len() as libc::c_int,
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
        if file.mode == OpenMode::Direct {
            // A short O_DIRECT read is the end of the file (the next would be unaligned).
            break;
        }
    }
    Ok(got)
}

/// The table's key of the file `meta` describes (its identity: segment/identity.rs).
pub(crate) fn key_of(meta: &std::fs::Metadata) -> FileKey {
    let identity = crate::segment::identity_of(meta);
    FileKey {
        dev: identity.dev,
        ino: identity.ino,
        born_ns: identity.born_ns,
    }
}

/// A `Died` from a `Run` (only a test's lever returns one; production's never does).
fn died(_: Died) -> io::Error {
    io::Error::other("folio: the read path's run stopped it (a test's lever)")
}
