//! The data-integrity sync (DESIGN.md §8, `File::sync_data` / `sync_all` / `sync_range`):
//! tag what is dirty, write it (`writeback`'s B1-B3 with `Selection::Tagged`), wait for it and
//! for every writeback of the file submitted before, write again whatever is still
//! tagged, then make the file's size right and flush. Why each step is needed is in
//! `writeback`'s module docs.
//!
//! Its postcondition is checked, not assumed (`audit`, in debug builds and tests): every
//! page that a write which returned before the sync began left dirty has been written.
//!
//! Protection: the index lock for the tagging and the last look for tagged folios; the
//! file's tickets (`InFlight`) for the waits.

use std::fs::File as StdFile;
use std::io;
use std::ops::ControlFlow;
use std::sync::{mpsc, Arc};

#[cfg(any(debug_assertions, feature = "invariants"))]
use super::audit::SyncStart;
#[cfg(any(debug_assertions, feature = "invariants"))]
use super::mask::BlockMask;
use super::writeback::{self, Selection};
#[cfg(any(debug_assertions, feature = "invariants"))]
use crate::index::Entry;
use crate::index::Mark;
use crate::io::{Backend, Completion, FlushKind, IoRequest};
use crate::mapping::Mapping;
#[cfg(any(debug_assertions, feature = "invariants"))]
use crate::memory::Memory;
use crate::pagecache::Core;
use crate::types::PageIndex;

/// Whether a folio of `[start, end)` is still tagged `Towrite`. Under the index lock: a
/// lock-free walk of the marks is a hint only, and a sync's last look must be exact
/// (the walk it ends must not run inside another thread's change of the slots: issue 28).
///
/// Context: no lock held; takes the index lock.
fn tagged_in(mapping: &Mapping, start: PageIndex, end: PageIndex) -> bool {
    let _w = mapping.index.lock();
    mapping
        .index
        .marked_walk(start, end, Mark::Towrite, &mut |_| ControlFlow::Break(()))
        .is_break()
}

/// A data-integrity sync of `[start, end)` (B1 with `Selection::Tagged`): tag, write what was
/// tagged, wait for it and for every writeback of the file submitted before, then make
/// the file's size right and flush with `kind`. The caller checks the error sequence.
///
/// Context: no lock held; sleeps until the writes and the flush complete.
pub(crate) fn sync(
    core: &Arc<Core>,
    backend: &dyn Backend,
    mapping: &Arc<Mapping>,
    start: PageIndex,
    end: PageIndex,
    kind: FlushKind,
) {
    let Some(fd) = mapping.write.fd() else {
        return;
    };
    writeback::start(core, backend, mapping, start, end, Selection::Tagged);
    wait_for_tagged(core, backend, mapping, start, end);
    #[cfg(any(debug_assertions, feature = "invariants"))]
    check_marks(core.memory(), mapping, start, end);
    mapping.settle_size();
    // A domain writer whose file is clean now detaches before the sync returns
    // (mapping/domain.rs, A5): the writeback's own look runs after its ticket ends, which
    // the wait above may beat.
    mapping.settle_writer();
    if let Err(e) = flush(backend, &fd, kind) {
        mapping
            .write
            .errseq
            .record(e.raw_os_error().unwrap_or(libc::EIO));
    }
}

/// Every dirty page of `mapping` written back and waited for, its size on disk made
/// right: a sync without the flush, for a writer that hands the file's writer role in the
/// domain over (mapping/domain.rs, F3: the next writer's reads and writes start from the
/// disk's bytes, which must be the newest; durability is the syncs', as ever).
///
/// Context: no lock held (the caller may hold the whole file's range); sleeps until the
/// writes complete.
pub(crate) fn write_out(core: &Arc<Core>, backend: &dyn Backend, mapping: &Arc<Mapping>) {
    writeback::start(
        core,
        backend,
        mapping,
        PageIndex(0),
        PageIndex::END,
        Selection::Tagged,
    );
    wait_for_tagged(core, backend, mapping, PageIndex(0), PageIndex::END);
    mapping.settle_size();
}

/// Waits for every writeback of `mapping` handed out so far, then writes what is still
/// tagged in `[start, end)` and waits again, until nothing is. A folio the walk found
/// under the background's writeback was left to that batch; if the batch gave back dirty
/// the block the end of the file cuts (it took the folio before the tagging), the folio
/// is still tagged (module docs).
///
/// Context: no lock held; sleeps until the writes complete.
pub(super) fn wait_for_tagged(
    core: &Arc<Core>,
    backend: &dyn Backend,
    mapping: &Arc<Mapping>,
    start: PageIndex,
    end: PageIndex,
) {
    let write = &mapping.write;
    write.in_flight.wait_through(write.in_flight.last());
    let Some(fd) = write.fd() else {
        return;
    };
    while tagged_in(mapping, start, end) {
        writeback::walk(core, backend, mapping, &fd, start, end, Selection::Tagged);
        write.in_flight.wait_through(write.in_flight.last());
    }
}

/// A flush of `fd` through the backend (the fault backend's power model must see it),
/// waited for.
///
/// Context: no lock held; sleeps until the device has flushed.
fn flush(backend: &dyn Backend, fd: &Arc<StdFile>, kind: FlushKind) -> io::Result<()> {
    let (tx, rx) = mpsc::sync_channel(1);
    backend.submit_waited(smallvec::smallvec![IoRequest::flush(
        fd.clone(),
        kind,
        Completion::new(move |result| {
            let _ = tx.send(result.map(|_| ()));
        }),
    )]);
    rx.recv()
        .unwrap_or_else(|_| Err(io::Error::other("folio: a flush was dropped unfinished")))
}

/// Checks, under the index lock, that every folio of `[start, end)` in `mapping` that is
/// DIRTY is marked `Dirty`, and every one marked `Towrite` is marked `Dirty` (`audit`).
///
/// Context: no lock held; takes the index lock.
#[cfg(any(debug_assertions, feature = "invariants"))]
fn check_marks(mem: &Memory, mapping: &Mapping, start: PageIndex, end: PageIndex) {
    let w = mapping.index.lock();
    mapping.index.visit(start, end, &mut |head, entry| {
        let Entry::Folio { frame, .. } = entry else {
            return;
        };
        let state = mem.arena().meta(frame).state.load();
        let dirty_mark = w.is_marked(head, Mark::Dirty);
        assert!(
            !state.is_dirty() || dirty_mark,
            "page {}: a dirty folio without its Dirty mark ({state:?})",
            head.0
        );
        assert!(
            !w.is_marked(head, Mark::Towrite) || dirty_mark,
            "page {}: a folio tagged Towrite without its Dirty mark",
            head.0
        );
    });
}

/// After a sync that started at `at` returned Ok over `[start, end)`: panics if a page
/// whose every write returned before `at` is still dirty in the cache (`audit`).
///
/// Context: no lock held; takes the audit's mutex, then the index lock.
#[cfg(any(debug_assertions, feature = "invariants"))]
pub(crate) fn check_promised(
    mem: &Memory,
    mapping: &Mapping,
    at: SyncStart,
    start: PageIndex,
    end: PageIndex,
) {
    mapping
        .write
        .audit()
        .for_each_promised(at, start, end, &mut |page| {
            let w = mapping.index.lock();
            let Entry::Folio { frame, order, head } = w.get(page) else {
                return;
            };
            let state = mem.arena().meta(frame).state.load();
            if !state.is_dirty() {
                return;
            }
            let blocks = BlockMask::of(mem.arena(), frame, order).peek();
            assert!(
                !blocks.contains(page.0 - head.0),
                "a sync returned Ok with page {} still dirty, written by a write that \
                 returned before the sync began (marked Dirty: {}, Towrite: {})",
                page.0,
                w.is_marked(head, Mark::Dirty),
                w.is_marked(head, Mark::Towrite),
            );
        });
}
