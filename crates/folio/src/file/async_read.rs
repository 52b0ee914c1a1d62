//! Reads as futures: `File::read_at_async` and `File::get_page_async`, for async storage
//! engines, with no runtime named (no tokio in the library: any executor polls them).
//!
//! A future runs the very steps of `read_at` and `get_page`; it differs only where they
//! would sleep:
//!
//! ```text
//!  poll ──> hit (optimistic copy) ──────────────────────────────> next page / Ready
//!    │ slow: File::find_for_read (Waiter::Future: a miss inserts its folios LOCKED and
//!    │       submits their read with Backend::submit, never on this thread)
//!    ├─ cached ──> File::settle ──> copy ────────────────────────> next page / Ready
//!    └─ in flight: keep the folio pinned; wait::park_future (the waker joins the wait
//!         table under the folio's key, then LOCKED is checked again)
//!           ├─ still LOCKED: Pending. The read's completion clears LOCKED and wakes
//!           │   the waker (wait::wake_all); the next poll starts at the parked folio
//!           └─ unlocked meanwhile: settle and copy on this poll
//! ```
//!
//! Dropping a future is safe at any point: the device reads into folio memory, never
//! into the caller's buffer (the copy happens on a poll, under the future's borrow of
//! it); a dropped future unpins its folio and takes its waker out of the table (`Drop`),
//! and the read it started completes and publishes the pages for the next reader.
//!
//! Memory: a future's miss allocates without waiting. When every folio is pinned or in
//! flight (in a runtime, typically by other futures whose reads completed and which
//! wait for their next poll), it parks its waker (`wait::park_for_memory`) and returns
//! `Pending`; a future that unpins a folio wakes it (the hand-off), and when no future
//! holds one it wakes itself, so that the executor polls the others first; after
//! `CacheBuilder::alloc_wait` of that it fails with `OutOfMemory`, as `read_at` does.
//! A thread that slept there instead would hold up the very futures that free memory.
//!
//! # A domain file
//!
//! A domain file (file/mod.rs) reads through the shared read path, which reads with
//! `pread` on its caller's thread (shared/read.rs). Its future's first poll copies what
//! the domain holds cached from the offset on (`DomainFile::read_cached`: optimistic hits
//! only, no lock, no wait) and, if that is not the whole read, hands the rest to a worker
//! thread of this process (`DomainFile::read_off_thread`, shared/offload.rs), which reads
//! it with `read_at` into a buffer of its own; a later poll copies its answer. Dropping
//! the future drops the answer's receiver: the worker's read completes and caches its
//! pages for the next reader. A worker's panic fails the read (an `io::Error` saying so).
//!
//! Limits: a hit polls to `Ready` at once: the same steps and cost as `read_at`'s hit.
//! Waiting for memory parks on the hand-off, or polls again when no future holds a folio
//! (then it costs polls while the cache is full of pinned folios), bounded by
//! `alloc_wait`. A domain file's miss costs a hand-over to a worker and back (a wake-up
//! and a copy of its bytes); `get_page_async` of a domain file is `Unsupported`.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures_channel::oneshot;

use super::pinned::{Arrival, Found, Settled};
use super::{checked_end, File, PageRef};
use crate::eviction::ReadHint;
use crate::filemap::Waiter;
use crate::mapping::Pinned;
use crate::shared::reader::{DomainFile, ReadAnswer};
use crate::types::PageIndex;
use crate::wait;
use crate::waker::{Park, Parking};

impl File {
    /// `read_at` as a future: reads up to `buf.len()` bytes at `offset` into `buf`, with
    /// the same results and errors. A read that hits completes on its first poll; a miss
    /// submits its read and returns `Pending` until the read's completion wakes it; no
    /// thread blocks on the device.
    ///
    /// Context: any executor, any thread; the future is `Send`. Dropping it at any point
    /// is safe (its read still fills the cache). It may sleep only in allocation while
    /// every folio is pinned, as `read_at` does.
    pub fn read_at_async<'a>(&'a self, buf: &'a mut [u8], offset: u64) -> ReadAtFuture<'a> {
        ReadAtFuture {
            file: self,
            buf,
            offset,
            done: 0,
            waits: None,
            off_thread: None,
        }
    }

    /// `get_page` as a future: a pinned, zero-copy view of the folio that holds byte
    /// `offset`, with `read_at_async`'s waiting.
    ///
    /// Context: as `read_at_async`.
    pub fn get_page_async(&self, offset: u64) -> GetPageFuture<'_> {
        GetPageFuture {
            file: self,
            offset,
            waits: Waits::default(),
        }
    }

    /// `Found::NoMemory` for a future: parks until a future holding a folio between polls
    /// unpins it (`wait::park_for_memory`), or, when none does, wakes itself to be polled
    /// again after the others. Fails once `alloc_wait` has passed with no hand-off (each
    /// hand-off restarts the clock: the queue moves, as fast as reads complete).
    fn poll_memory<T>(
        &self,
        since: &mut Option<Instant>,
        waiting: &mut MemoryWait,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        let first = *since.get_or_insert_with(Instant::now);
        if first.elapsed() >= self.core().alloc_wait {
            crate::stats::bump(&self.core().counters().alloc_failures);
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                "folio: no free memory: every folio stayed pinned or in flight for the \
                 cache's alloc_wait; drop page references or raise the capacity",
            )));
        }
        match wait::park_for_memory(waiting.0.take(), cx.waker()) {
            Park::Parked(parking) => waiting.0 = Some(parking),
            Park::Ready => cx.waker().wake_by_ref(),
        }
        Poll::Pending
    }

    /// Waits, as a future, for the folio a look-up found in flight: `Ready(Some)` with
    /// the folio when it is no longer LOCKED, `Pending` (parked in `parked`) while it is.
    fn poll_unlocked<'a>(
        &'a self,
        parked: &mut Option<Parked<'a>>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<(Pinned<'a>, Arrival)>> {
        let Some(mut p) = parked.take() else {
            return Poll::Ready(None);
        };
        let meta = self.core().arena().meta(p.folio.frame);
        if meta.state.load().is_locked() {
            match wait::park_future(meta, p.waiting.0, cx.waker()) {
                Park::Parked(parking) => {
                    p.waiting.0 = Some(parking);
                    *parked = Some(p);
                    return Poll::Pending;
                }
                Park::Ready => p.waiting.0 = None,
            }
        }
        // Dropping `p.waiting` takes the waker out of the table if the poll came before
        // the completion's wake.
        let Parked { folio, came, .. } = p;
        Poll::Ready(Some((folio, came)))
    }
}

/// A folio a future waits on: pinned (so its metadata keeps naming it), with the
/// future's place in the wait table while a waker is there.
struct Parked<'a> {
    folio: Pinned<'a>,
    came: Arrival,
    waiting: Waiting,
    _holding: Holding,
}

impl<'a> Parked<'a> {
    fn new(folio: Pinned<'a>, came: Arrival) -> Parked<'a> {
        Parked {
            folio,
            came,
            waiting: Waiting(None),
            _holding: Holding::new(),
        }
    }
}

/// Counts the future among those holding a folio between polls, for the memory waiters
/// (`wait::future_pinned`), until it is polled past its wait or dropped.
struct Holding;

impl Holding {
    fn new() -> Holding {
        wait::future_pinned();
        Holding
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        wait::future_unpinning();
    }
}

/// A future's waker among the memory waiters (`wait::park_for_memory`), taken out when
/// the future polls again or is dropped.
#[derive(Default)]
struct MemoryWait(Option<Parking>);

impl MemoryWait {
    /// Leaves the memory waiters; returns whether a hand-off woke this future (memory
    /// came free for it: the wait is making progress).
    fn leave(&mut self) -> bool {
        match self.0.take() {
            Some(parking) => !wait::cancel_memory_wait(parking),
            None => false,
        }
    }
}

impl Drop for MemoryWait {
    fn drop(&mut self) {
        self.leave();
    }
}

/// A future's waker in the wait table, taken out when the future stops waiting or is
/// dropped (a completion's `wake_all` may have taken it already: then nothing).
struct Waiting(Option<Parking>);

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(parking) = self.0.take() {
            wait::cancel_future(parking);
        }
    }
}

/// The future of [`File::read_at_async`]: `Output = io::Result<usize>`.
///
/// Small while it only hits (a hit polls to `Ready` with `read_at`'s steps); what a miss
/// or a wait needs lives in `Waits`, allocated on the first slow page.
#[must_use = "futures do nothing unless polled"]
pub struct ReadAtFuture<'a> {
    file: &'a File,
    buf: &'a mut [u8],
    offset: u64,
    /// Bytes copied so far.
    done: usize,
    /// Some once a page of this read missed or waited (`read_at`'s `slow`).
    waits: Option<Box<Waits<'a>>>,
    /// A domain file's read of what was not cached at the first poll, on a worker (module
    /// docs, "A domain file").
    off_thread: Option<ReadAnswer>,
}

/// A future's state on its slow path.
#[derive(Default)]
struct Waits<'a> {
    /// Whether the page being read now missed (`File::find_for_read`).
    missed: bool,
    /// When a miss first found no memory, and the future's place among the memory
    /// waiters (`File::poll_memory`).
    no_memory_since: Option<Instant>,
    memory: MemoryWait,
    /// The folio whose read the future waits for.
    parked: Option<Parked<'a>>,
}

impl<'a> Waits<'a> {
    /// The start of a poll: out of the memory waiters (a hand-off restarts the clock).
    fn resume(&mut self) {
        if self.memory.leave() {
            self.no_memory_since = None;
        }
    }

    /// What the future does with a look-up's result: park on a folio in flight (`Again`:
    /// the next turn polls it), wait for memory (`Done(Pending)`, or the error once it
    /// waited too long), or settle a folio it may read now (`Read`: the next page then
    /// starts afresh).
    fn take<T>(
        &mut self,
        file: &'a File,
        page: PageIndex,
        found: Found<'a>,
        hint: ReadHint,
        cx: &mut Context<'_>,
    ) -> Turn<'a, T> {
        let (folio, came) = match found {
            Found::PastEnd => return Turn::Again,
            Found::NoMemory => {
                return Turn::Done(file.poll_memory(
                    &mut self.no_memory_since,
                    &mut self.memory,
                    cx,
                ))
            }
            Found::InFlight(folio, came) => {
                self.parked = Some(Parked::new(folio, came));
                return Turn::Again;
            }
            Found::Cached(folio, came) => (folio, came),
        };
        match file.settle(page, folio, came, hint) {
            Ok(Settled::Uptodate(folio)) => {
                self.missed = false;
                self.no_memory_since = None;
                Turn::Read(folio)
            }
            Ok(Settled::PastEnd | Settled::Again) => Turn::Again,
            Err(e) => Turn::Done(Poll::Ready(Err(e))),
        }
    }
}

/// `Waits::take`'s answer: what the future's loop does next with the page it looked up.
enum Turn<'a, T> {
    Read(Pinned<'a>),
    Again,
    Done(Poll<io::Result<T>>),
}

impl std::fmt::Debug for ReadAtFuture<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadAtFuture")
            .field("offset", &self.offset)
            .field("len", &self.buf.len())
            .field("done", &self.done)
            .field(
                "parked",
                &self.waits.as_ref().is_some_and(|w| w.parked.is_some()),
            )
            .field("off_thread", &self.off_thread.is_some())
            .finish()
    }
}

impl Future for ReadAtFuture<'_> {
    type Output = io::Result<usize>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = this.step(cx);
        if let Poll::Ready(Ok(done)) = result {
            // Post: never more than asked; a slow page leaves no folio parked on.
            debug_assert!(done <= this.buf.len());
            debug_assert!(this.waits.as_ref().is_none_or(|w| w.parked.is_none()));
            if this.waits.is_some() && done > 0 {
                this.file
                    .ra
                    .set_prev_index(PageIndex::containing(this.offset + done as u64 - 1));
            }
        }
        result
    }
}

impl<'a> ReadAtFuture<'a> {
    /// `read_at`'s loop, resumable at the folio it parked on.
    fn step(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let file: &'a File = self.file;
        if self.off_thread.is_some() {
            return self.poll_off_thread(cx);
        }
        if let Some(shared) = file.domain() {
            return self.start_in_domain(shared, cx);
        }
        if let Some(w) = self.waits.as_deref_mut() {
            w.resume();
        }
        if self.buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let request_end = match checked_end(self.offset, self.buf.len()) {
            Ok(end) => end,
            Err(e) => return Poll::Ready(Err(e)),
        };
        let core = file.core();
        let hint = file.hint();
        let last_page = PageIndex::ceil(request_end);
        loop {
            let end = request_end.min(file.mapping.size_bytes());
            let pos = self.offset + self.done as u64;
            let page = PageIndex::containing(pos);
            let parked = match self.waits.as_deref_mut() {
                Some(w) => match file.poll_unlocked(&mut w.parked, cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(parked) => parked,
                },
                None => None,
            };
            let found = match parked {
                Some((folio, came)) => Found::Cached(folio, came),
                None => {
                    if pos >= end {
                        return Poll::Ready(Ok(self.done));
                    }
                    if let Some(n) = file.read_hit(pos, end, &mut self.buf[self.done..], hint) {
                        self.done += n;
                        continue;
                    }
                    let w = self.waits.get_or_insert_with(Box::default);
                    match file.find_for_read(page, last_page, &mut w.missed, Waiter::Future, hint) {
                        Ok(found) => found,
                        Err(e) => return Poll::Ready(Err(e)),
                    }
                }
            };
            let w = self
                .waits
                .as_deref_mut()
                .expect("a slow page has its waits");
            // Again: the file shrank (`end` drops on the next turn), or a folio to wait for.
            let folio = match w.take(file, page, found, hint, cx) {
                Turn::Read(folio) => folio,
                Turn::Again => continue,
                Turn::Done(poll) => return poll,
            };
            let end = request_end.min(file.mapping.size_bytes());
            if pos >= end {
                return Poll::Ready(Ok(self.done));
            }
            file.note_access(core.arena().meta(folio.frame), page, folio.head, hint);
            let in_folio = (pos - folio.head.offset_bytes()) as usize;
            let n = (folio.order.bytes() - in_folio).min((end - pos) as usize);
            // The settled folio holds `pos`, before the end: each turn copies something.
            debug_assert!(n > 0, "a turn that copies nothing at {pos} (end {end})");
            let bytes = core.arena().pinned_bytes(folio.frame, folio.order);
            self.buf[self.done..self.done + n].copy_from_slice(&bytes[in_folio..in_folio + n]);
            self.done += n;
        }
    }
}

impl ReadAtFuture<'_> {
    /// A domain file's first poll (module docs, "A domain file"): what the domain holds
    /// cached from the offset on copied now; the rest, if any before the end of the file,
    /// handed to a worker.
    fn start_in_domain(
        &mut self,
        shared: &Arc<DomainFile>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        if let Err(e) = checked_end(self.offset, self.buf.len()) {
            return Poll::Ready(Err(e));
        }
        match shared.read_cached(self.buf, self.offset) {
            Ok(n) => self.done = n,
            Err(e) => return Poll::Ready(Err(e)),
        }
        let pos = self.offset + self.done as u64;
        if self.done == self.buf.len() || pos >= shared.len() {
            return Poll::Ready(Ok(self.done));
        }
        self.off_thread = Some(shared.read_off_thread(pos, self.buf.len() - self.done));
        self.poll_off_thread(cx)
    }

    /// Polls the worker's read of a domain file: its bytes copied into the caller's
    /// buffer when it answers (this poll's borrow of the buffer; the worker read into its
    /// own, so a future dropped meanwhile leaves it nothing to write into).
    fn poll_off_thread(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let answer = self
            .off_thread
            .as_mut()
            .expect("a read on a worker has its answer");
        let answered = std::task::ready!(Pin::new(answer).poll(cx));
        self.off_thread = None;
        match answered {
            Ok((bytes, Ok(n))) => {
                // Post (the worker's `read_at`): never more than it was asked.
                debug_assert!(n <= bytes.len() && self.done + n <= self.buf.len());
                self.buf[self.done..self.done + n].copy_from_slice(&bytes[..n]);
                self.done += n;
                Poll::Ready(Ok(self.done))
            }
            Ok((_, Err(e))) => Poll::Ready(Err(e)),
            Err(oneshot::Canceled) => Poll::Ready(Err(io::Error::other(
                "folio: the worker reading a domain file panicked (a bug: its message is on \
                 stderr); the read returned nothing",
            ))),
        }
    }
}

/// The future of [`File::get_page_async`]: `Output = io::Result<PageRef>`.
#[must_use = "futures do nothing unless polled"]
pub struct GetPageFuture<'a> {
    file: &'a File,
    offset: u64,
    waits: Waits<'a>,
}

impl std::fmt::Debug for GetPageFuture<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GetPageFuture")
            .field("offset", &self.offset)
            .field("parked", &self.waits.parked.is_some())
            .finish()
    }
}

impl Future for GetPageFuture<'_> {
    type Output = io::Result<PageRef>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<PageRef>> {
        let this = self.get_mut();
        let file = this.file;
        if file.domain().is_some() {
            return Poll::Ready(Err(File::domain_unsupported("get_page_async")));
        }
        let w = &mut this.waits;
        w.resume();
        let page = PageIndex::containing(this.offset);
        let hint = file.hint();
        loop {
            let found = match file.poll_unlocked(&mut w.parked, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some((folio, came))) => Found::Cached(folio, came),
                Poll::Ready(None) => {
                    if let Err(e) = file.check_page_offset(this.offset) {
                        return Poll::Ready(Err(e));
                    }
                    match file.find_for_read(page, page.add(1), &mut w.missed, Waiter::Future, hint)
                    {
                        Ok(found) => found,
                        Err(e) => return Poll::Ready(Err(e)),
                    }
                }
            };
            // Again: past the end (`check_page_offset` reports it), or a folio to wait for.
            match w.take(file, page, found, hint, cx) {
                Turn::Read(folio) => return Poll::Ready(Ok(file.page_ref(folio))),
                Turn::Again => continue,
                Turn::Done(poll) => return poll,
            }
        }
    }
}
