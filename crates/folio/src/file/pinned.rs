//! The pinned path of a read: what a read does where the hit path cannot copy (a miss, a
//! folio in flight or changed), shared with the futures (`async_read`) and with the write
//! side's partial pages.
//!
//! Design: `find_for_read` looks the page up with a reference (`Mapping::find_get`, the
//! lookup protocol) and, on a miss, reads it (`on_miss`: readahead's window, or the
//! missing run); it returns the folio cached or in flight, and its caller waits for one in
//! flight as it can (a thread sleeps on the wait table: `get_uptodate`; a future parks).
//! `settle` then says what the folio holds for the read: its bytes, the end of the file,
//! or nothing yet (look again). How the read came by its folio (`Arrival`) decides what it
//! counts: a pinned hit, and the access frequency eviction reads.
//!
//! Protection: the folio's reference (`Pinned`) keeps its frame from being freed or
//! reused; no lock is held across a wait.
//!
//! Limits: `get_uptodate` looks again for as long as the folio it finds leaves the index
//! or fails with ESTALE (the file changing during its read); it never spins on a LOCKED
//! folio (it sleeps).

use std::io;

use super::File;
use crate::eviction::ReadHint;
use crate::filemap::Waiter;
use crate::mapping::Pinned;
use crate::stats;
use crate::types::PageIndex;
use crate::wait;

impl File {
    /// A pinned, uptodate folio covering `page`, reading it (and the missing pages after
    /// it up to `read_end`) if needed. `None` if `page` is past the end of the file.
    pub(super) fn get_uptodate(
        &self,
        page: PageIndex,
        read_end: PageIndex,
        hint: ReadHint,
    ) -> io::Result<Option<Pinned<'_>>> {
        // Whether this access missed: then the folio found next is the one it read (or a
        // racing reader's), which is neither a hit nor a use that raises its frequency
        // (a new folio starts at 0, as eviction policies count).
        let mut missed = false;
        loop {
            let (folio, came) =
                match self.find_for_read(page, read_end, &mut missed, Waiter::Thread, hint)? {
                    Found::PastEnd => return Ok(None),
                    Found::NoMemory => unreachable!("a thread waits for memory in the allocator"),
                    Found::Cached(folio, came) => (folio, came),
                    Found::InFlight(folio, came) => {
                        wait::wait_unlocked(self.core().arena().meta(folio.frame));
                        (folio, came)
                    }
                };
            match self.settle(page, folio, came, hint)? {
                Settled::Uptodate(folio) => {
                    // Post: a pinned folio that holds `page`, its bytes read.
                    debug_assert!(covers(&folio, page), "{page:?} not in its folio");
                    debug_assert!(self
                        .core()
                        .arena()
                        .meta(folio.frame)
                        .state
                        .load()
                        .is_uptodate());
                    return Ok(Some(folio));
                }
                Settled::PastEnd => return Ok(None),
                Settled::Again => {}
            }
        }
    }

    /// The look-up of a read's slow path: finds the folio of `page` and pins it, reading
    /// it (and the missing pages after it up to `read_end`) if absent; `waiter` says who
    /// will wait for that read. `missed` is the caller's record, over its retries of the
    /// same page, of whether the page was missing.
    ///
    /// Context: no lock held; may sleep in allocation (and, for `Waiter::Thread`, in
    /// the read).
    pub(super) fn find_for_read(
        &self,
        page: PageIndex,
        read_end: PageIndex,
        missed: &mut bool,
        waiter: Waiter,
        hint: ReadHint,
    ) -> io::Result<Found<'_>> {
        // The read this look-up may start covers at least the page looked up.
        debug_assert!(
            page < read_end,
            "{page:?} outside a read up to {read_end:?}"
        );
        let core = self.core();
        loop {
            if page.offset_bytes() >= self.mapping.size_bytes() {
                return Ok(Found::PastEnd);
            }
            let folio = match self.mapping.find_get(core.memory(), page) {
                Ok(folio) => folio,
                Err(_) => {
                    if !*missed {
                        stats::bump(&core.counters().misses);
                        *missed = true;
                    }
                    match self.on_miss(page, read_end, waiter, hint) {
                        Ok(()) => continue,
                        // Every folio pinned or in flight: a future polls again later.
                        Err(e)
                            if waiter == Waiter::Future
                                && e.kind() == io::ErrorKind::OutOfMemory =>
                        {
                            return Ok(Found::NoMemory);
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            // `find_get`'s post: the folio found holds `page`.
            debug_assert!(covers(&folio, page), "{page:?} not in its folio");
            let meta = core.arena().meta(folio.frame);
            if !meta.state.load().is_locked() {
                let came = if *missed {
                    Arrival::Missed
                } else {
                    Arrival::Cached
                };
                return Ok(Found::Cached(folio, came));
            }
            if !*missed {
                stats::bump(&core.counters().waits_on_io);
            }
            // A reader that catches up with an async window reaches its marker while
            // the window is still in flight: start the next window now, before
            // waiting, so the disk has two windows queued and never idles between
            // them (the kernel's filemap_get_pages does the same).
            self.note_access(meta, page, folio.head, hint);
            let came = if *missed {
                Arrival::Missed
            } else {
                Arrival::WaitedForIo
            };
            return Ok(Found::InFlight(folio, came));
        }
    }

    /// What a folio that is no longer LOCKED holds for a read of `page`: its bytes
    /// (counted as `came` says), the end of the file, or nothing yet (the file changed
    /// during its read, or the folio left the index: look again).
    ///
    /// Errors: the folio's read failed (every reader waiting for it gets the error).
    ///
    /// Context: no lock held; never sleeps.
    pub(super) fn settle<'c>(
        &'c self,
        page: PageIndex,
        folio: Pinned<'c>,
        came: Arrival,
        hint: ReadHint,
    ) -> io::Result<Settled<'c>> {
        let core = self.core();
        let meta = core.arena().meta(folio.frame);
        let state = meta.state.load();
        if state.is_uptodate() {
            let touch = hint == ReadHint::Normal;
            match came {
                Arrival::Missed => {}
                Arrival::WaitedForIo if touch => meta.state.touch(),
                Arrival::WaitedForIo => {}
                Arrival::Cached => {
                    stats::bump(&core.counters().pinned_hits);
                    if touch {
                        meta.state.touch();
                    }
                }
            }
            return Ok(Settled::Uptodate(folio));
        }
        if state.is_error() {
            let errno = meta.errno();
            drop(folio);
            if page.offset_bytes() >= self.mapping.size_bytes() {
                return Ok(Settled::PastEnd);
            }
            if errno == libc::ESTALE {
                return Ok(Settled::Again); // the file changed during the read: read it again
            }
            return Err(io::Error::from_raw_os_error(errno));
        }
        Ok(Settled::Again)
    }
}

/// Whether `folio` holds `page`.
fn covers(folio: &Pinned<'_>, page: PageIndex) -> bool {
    folio.head <= page && page.0 < folio.head.0 + folio.order.pages()
}

/// What `File::find_for_read` found: a folio to read from now, one whose read is in
/// flight (wait until it is not LOCKED, then `settle`), the end of the file, or (for a
/// future only) no memory to read the page into yet.
pub(super) enum Found<'c> {
    Cached(Pinned<'c>, Arrival),
    InFlight(Pinned<'c>, Arrival),
    PastEnd,
    NoMemory,
}

/// How a read came by its folio, which decides what `settle` counts: a miss counts
/// nothing more and leaves a new folio's frequency at 0; a wait for another reader's
/// I/O raises the frequency; a pinned hit counts as a hit too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Arrival {
    Missed,
    WaitedForIo,
    Cached,
}

/// What `File::settle` says of a folio that is no longer LOCKED.
pub(super) enum Settled<'c> {
    Uptodate(Pinned<'c>),
    PastEnd,
    Again,
}
