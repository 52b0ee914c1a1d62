//! Loom models of folio's lock-free protocols, compiled from the very source files the
//! library uses (`src/refcount.rs`, `src/version.rs`, `src/readahead/`, `src/write/errseq.rs`,
//! `src/write/mask.rs`, `src/write/budget.rs`) against loom's atomics: this file supplies the `primitive` module those
//! files name their atomics through (and, for `mask.rs`, an `arena` with the tail frames'
//! mask words).
//!
//! What each model proves, over every interleaving loom explores:
//! - `getter_vs_freezer`: a getter never keeps a reference to a folio that a freezer
//!   evicted, and a freezer never evicts a folio someone holds.
//! - `lookup_racing_eviction`: the full lookup protocol (`Mapping::find_get`: load slot,
//!   try_get, wait on the index lock when DEAD, re-check the slot) against eviction under
//!   the index lock: the reader ends with either a pinned folio that is still in the index
//!   or a miss, and the frame is freed exactly once.
//! - `freed_and_reused_frame` (the ABA case of the kernel's review of seed 004): a getter
//!   that stalls between its slot load and its `fetch_add` while the frame is evicted and
//!   reallocated to another page never keeps a reference to the new page through the old
//!   slot, never loses or doubles the new owner's count, and when the new incarnation is
//!   released meanwhile, the frame is freed exactly once.
//! - `isolated_eviction_vs_truncation_vs_lookup`: reclaim's isolation (a reference),
//!   its freeze of an isolated folio (count 2), a truncation that drops the index's
//!   reference of the same folio, and a reader's lookup, all at once: the frame is freed
//!   exactly once, by whoever drops the last reference, and never while the reader holds
//!   it.
//! - `readahead_marker_race` and `readahead_miss_race`: threads sharing one handle's
//!   readahead state never tear it and never write a stale window back: when two threads
//!   hit the same marker (or miss the same page), exactly one window is installed, the
//!   loser re-reads the state and decides again from it.
//! - `readahead_limit_counts`: two threads of one handle install windows at once, one
//!   counting pages read ahead, the other pages wasted, against the cache-wide readahead
//!   limit's two words: the handle counts once as a stream of the epoch, and no count is
//!   lost.
//! - `optimistic_read`: a reader that copies without a reference validates only copies
//!   that belong entirely to one identity, never a mix of an evicted page and its
//!   replacement.
//! - `mapping_lifetime_open_vs_eviction` and
//!   `mapping_lifetime_reopen_between_walk_and_removal`: `MappingTable`'s lifetime
//!   protocol (open, close, removal of an unused mapping; transcribed from
//!   `src/mapping/table.rs`, whose steps O, C and R it names) against reclaim evicting a closed
//!   file's last folio, and against a handle opened, used and closed between a removal's
//!   walk and its removal: an open never gets a mapping that left the table, no folio is
//!   ever left in a mapping that left it, and no unused mapping stays in it. Each is also
//!   run on a deliberately broken protocol (`mapping_lifetime_broken_*`, which must
//!   fail): the handles raised after the look-up's lock is dropped, and a removal that
//!   compares the handle count instead of the whole word.
//!
//! - `unlink_vs_last_close` (transcribed from `src/mapping/table.rs`): `MappingTable::unlink`
//!   against the last handle's close: one of them always drops the deleted file's pages;
//!   without their SeqCst fences both can miss each other (`*_broken_no_fences`).
//! - `async_park_vs_completion`, `memory_waiter_vs_last_holder` (`src/waker.rs`): a
//!   future parking on a folio's I/O, or waiting for memory, is never left parked with
//!   nobody to wake it.
//!
//! The write side (DESIGN.md §8; `write_side` below transcribes its protocols around the
//! library's `FolioState`, `Version`, `BlockMask` and `DirtyBudget`):
//! - `write_vs_optimistic_read`: a writer (W1-W5 of `write::into_folio`) against a reader
//!   copying without a reference: a validated copy is never torn (all old or all new
//!   bytes) and never stale (all new if the read began after `write_at` returned).
//! - `write_vs_writeback*`: a write into a dirty folio against background writeback
//!   (B1-B3 of `writeback`) whose device writes, fails (`Redirty::Yes`) or writes short,
//!   order-0 and large folios: the device never reads a block while a writer copies into
//!   it (loom reports the overlap), and no update is lost (every block is on disk, or the
//!   folio is DIRTY with the block in its mask and its index Dirty mark set), and the
//!   dirty budget counts exactly the dirty blocks.
//! - `dirty_folio_vs_reclaim_*`: reclaim (isolating, or freezing an unpinned folio)
//!   against a writer, or against a writeback that writes or fails: a folio is frozen only
//!   while its bytes are on disk, never DIRTY nor under WRITEBACK.
//! - `truncation_vs_writeback*`: `set_len` dropping a dirty folio whose writeback is in
//!   flight and then written or failed (dirty again): the removed folio never ends DIRTY,
//!   its frame is freed once and never under writeback, and the dirty budget ends at 0.
//! - `write_copy_on_write_vs_pinned_read_vs_sync` (issue 28; `write_side::pinned`): a
//!   write that returned before a sync began, then a second write that finds the page
//!   pinned by a reader and copies on write (a new frame takes the bytes and dirty blocks
//!   and replaces the folio in its index slot), against the reader's unpin and a
//!   data-integrity sync (tag `Dirty` as `Towrite`, the tagged walk that waits for a
//!   writer's LOCKED, the "still tagged?" loop): when the sync returns Ok the first
//!   write is on disk (or the second), the device never reads a block while a writer
//!   copies into it, a folio left DIRTY has its slot marked `Dirty`, and nothing is left
//!   tagged. Broken, and failing: a replacement that drops the slot's `Towrite` (the
//!   first `replace_for_write`); the first B1 (one CAS, which a pin change fails: the
//!   walk skips the folio) together with a "still tagged?" check that reads the marks
//!   without the index lock, during a replacement that removes the old entry and
//!   re-inserts the copy with both marks. Each of those last two alone passes (run by
//!   hand): a skipped folio keeps its `Towrite`, so the locked check walks again; with
//!   the CAS loop the walk leaves nothing tagged for the lock-free check to miss (in the
//!   library a background batch holding the folio under writeback would; not modeled).
//!   With the in-place swap both pass too: the slot's marks never change.
//!
//! Each is also run on a broken protocol (`*_broken_*`, which must fail): no version
//! move, `end_write` before the copy, a writer that does not wait for WRITEBACK, a B1
//! that does not refuse LOCKED, the writer's dirty state read before W3's CAS (the first
//! version of `write::into_folio`, which these models caught), a reclaim that takes a dirty
//! folio for clean, a truncation that does not wait for the writeback. Mutations of the
//! library run by hand (each made the sound models fail): B1 or W3 not refusing the
//! other's flag, the freeze not refusing DIRTY or WRITEBACK, `begin_write` without its
//! fence, `end_writeback`, `unlock_dirty` or B1's CAS relaxed, no redirty on failure,
//! `restore` putting nothing back, `take` not zeroing the mask, `mark` keeping a clean
//! folio's stale bits; for the copy-on-write model, B1 not refusing LOCKED (loom reports
//! the device's read overlapping the in-place writer's copy).
//!
//! Loom's exploration is not exhaustive: its partial-order reduction keeps one last
//! access per object and misses some interleavings (tokio-rs/loom#166). The write-side
//! models add explicit scheduling points where that hid a bug (`write_side::Folio::step`).
//! One blind spot in particular: a store is ordered against the last access of any kind,
//! so a writer that loads a word before storing it hides an earlier load of a reader that
//! runs first (the main thread, which loom keeps running), and "the writer's store before
//! the reader's load" is never explored. Where the reader is the main thread it yields
//! before its first access (`isolated_eviction_vs_truncation_vs_lookup`, which asserts
//! that a reader coming after the unlink was explored); where the writer is the main
//! thread (`lookup_racing_eviction`, `optimistic_read`) it runs first and each of the
//! reader's loads is backtracked between its stores (both checked: the first asserts the
//! same count, the second fails broken, `optimistic_read_broken_stores_before_retire`).
//!
//! Run with `cargo test --release -p folio --test loom_models` (part of the workspace's
//! tests; each model is small enough to explore exhaustively in seconds, but for
//! `write_copy_on_write_vs_pinned_read_vs_sync*`, whose three threads are explored up to
//! 3 preemptions: `LOOM_MAX_PREEMPTIONS` raises the bound).

mod primitive {
    pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
    pub(crate) use loom::sync::Mutex;

    #[cfg(test)]
    pub(crate) fn model(body: impl Fn() + Sync + Send + 'static) {
        loom::model(body)
    }
}

#[allow(dead_code)]
#[path = "../src/refcount.rs"]
mod refcount;

#[allow(dead_code)]
#[path = "../src/version.rs"]
mod version;

#[allow(dead_code)]
#[path = "../src/types.rs"]
mod types;

// The models use part of it: what they leave is neither dead nor an unused import.
#[allow(dead_code, unused_imports)]
#[path = "../src/readahead/mod.rs"]
mod readahead;

#[allow(dead_code)]
#[path = "../src/write/errseq.rs"]
mod errseq;

#[allow(dead_code)]
#[path = "../src/write/mask.rs"]
mod mask;

#[allow(dead_code)]
#[path = "../src/write/budget.rs"]
mod budget;

#[allow(dead_code)]
#[path = "../src/waker.rs"]
mod waker;

/// What `mask.rs` needs of the arena: the tail frames' words that hold a large folio's
/// dirty-block mask (`FolioMeta::tail_mask_word`), here loom's atomics in a vector.
mod arena {
    use crate::types::FrameId;
    use loom::sync::atomic::AtomicU64;

    pub struct FrameMeta {
        place: AtomicU64,
    }

    impl FrameMeta {
        pub fn tail_mask_word(&self) -> &AtomicU64 {
            &self.place
        }
    }

    pub struct Arena {
        metas: Vec<FrameMeta>,
    }

    impl Arena {
        /// `frames` frames whose `place` words hold `stale` (what a tail frame's word
        /// holds before its folio is first dirtied: an old identity).
        pub fn new(frames: usize, stale: u64) -> Arena {
            Arena {
                metas: (0..frames)
                    .map(|_| FrameMeta {
                        place: AtomicU64::new(stale),
                    })
                    .collect(),
            }
        }

        pub fn meta(&self, frame: FrameId) -> &FrameMeta {
            &self.metas[frame.as_usize()]
        }
    }
}

use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

use refcount::{FolioState, GetOutcome, PutOutcome, DEAD, LOCKED, ONE, UPTODATE};
use version::Version;

const FRAME: usize = 7;
const SHADOW: usize = 1000;

/// A frame holding an uptodate folio in the index: count 1 (the index's), UPTODATE.
fn cached_folio() -> FolioState {
    let s = FolioState::new_free();
    s.revive_locked();
    s.finish_read_ok();
    s
}

struct World {
    state: FolioState,
    slot: AtomicUsize,
    index_lock: Mutex<()>,
    frees: AtomicU64,
}

impl World {
    fn new() -> Arc<World> {
        Arc::new(World {
            state: cached_folio(),
            slot: AtomicUsize::new(FRAME),
            index_lock: Mutex::new(()),
            frees: AtomicU64::new(0),
        })
    }

    /// Reclaim's eviction of an unpinned folio (as `Mapping::invalidate` with `Invalidate::Unpinned`).
    fn evict(&self) -> bool {
        let guard = self.index_lock.lock().unwrap();
        if self.slot.load(Ordering::Acquire) != FRAME || !self.state.try_freeze() {
            return false;
        }
        self.slot.store(SHADOW, Ordering::Release);
        drop(guard);
        self.state.mark_free();
        self.frees.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// `Mapping::find_get`: Some(()) with a reference held, or None on a miss. Counts in
    /// `first_look_misses` a miss at its very first load of the slot (the folio already
    /// gone when the reader came): how a model checks that loom explored a writer's unlink
    /// before the reader's first look.
    fn find_get_noting(&self, first_look_misses: &std::sync::atomic::AtomicU64) -> Option<()> {
        let mut first = true;
        loop {
            if self.slot.load(Ordering::Acquire) != FRAME {
                if first {
                    first_look_misses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                return None;
            }
            first = false;
            match self.state.try_get() {
                GetOutcome::Got => {}
                GetOutcome::Dead => {
                    drop(self.index_lock.lock().unwrap());
                    continue;
                }
                GetOutcome::DeadFree => {
                    self.frees.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            }
            if self.slot.load(Ordering::Acquire) == FRAME {
                return Some(());
            }
            if self.state.put() == PutOutcome::Free {
                self.frees.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[test]
fn getter_vs_freezer() {
    loom::model(|| {
        let w = World::new();
        let getter = {
            let w = w.clone();
            thread::spawn(move || w.state.try_get() == GetOutcome::Got)
        };
        let evicted = w.evict();
        let got = getter.join().unwrap();
        assert!(!(got && evicted), "a held folio was evicted");
        let state = w.state.load();
        if evicted {
            assert_eq!(
                state.bits(),
                DEAD,
                "an evicted frame is free with no references"
            );
        } else {
            assert_eq!(state.count(), 1 + u64::from(got));
        }
    });
}

#[test]
fn lookup_racing_eviction() {
    // The reader is spawned and the evictor (the main thread) runs first: loom backtracks
    // the reader's loads between the evictor's stores, so a reader that comes after the
    // unlink is explored (the blind spot of `isolated_eviction_vs_truncation_vs_lookup`
    // does not arise; asserted below).
    let first_look_misses = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let misses = first_look_misses.clone();
    loom::model(move || {
        let w = World::new();
        let reader = {
            let (w, misses) = (w.clone(), misses.clone());
            thread::spawn(move || {
                let held = w.find_get_noting(&misses).is_some();
                if held {
                    // While held, the folio is in the index and not DEAD.
                    assert_eq!(w.slot.load(Ordering::Acquire), FRAME);
                    assert!(!w.state.load().is_dead());
                    assert_eq!(w.state.put(), PutOutcome::Alive);
                }
                held
            })
        };
        let evicted = w.evict();
        let held = reader.join().unwrap();
        assert!(!(held && evicted) || w.frees.load(Ordering::Relaxed) == 1);
        assert_eq!(w.frees.load(Ordering::Relaxed), u64::from(evicted));
        if !evicted {
            assert_eq!(
                w.state.load().bits(),
                ONE | UPTODATE,
                "only the index's reference is left"
            );
        }
    });
    assert!(
        first_look_misses.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "no execution evicted the folio before the reader's first look"
    );
}

#[test]
fn freed_and_reused_frame() {
    loom::model(|| {
        // The slot of page A holds the frame; page B's slot is empty.
        let w = World::new();
        let slot_b = Arc::new(AtomicUsize::new(0));
        let getter = {
            let w = w.clone();
            thread::spawn(move || {
                // The getter loaded A's slot before the eviction (the stall), then:
                let result = match w.state.try_get() {
                    GetOutcome::Got => {
                        if w.slot.load(Ordering::Acquire) == FRAME {
                            // A genuine reference to page A: the frame was not reused.
                            let state = w.state.load();
                            assert!(!state.is_dead());
                            assert!(state.is_uptodate(), "the getter sees page A's folio");
                            if w.state.put() == PutOutcome::Free {
                                w.frees.fetch_add(1, Ordering::Relaxed);
                            }
                            true
                        } else {
                            if w.state.put() == PutOutcome::Free {
                                w.frees.fetch_add(1, Ordering::Relaxed);
                            }
                            false
                        }
                    }
                    GetOutcome::Dead => false,
                    GetOutcome::DeadFree => {
                        w.frees.fetch_add(1, Ordering::Relaxed);
                        false
                    }
                };
                result
            })
        };
        // Reclaim evicts page A, and an allocation reuses the frame for page B, which is
        // then given up (as a read whose slot was taken by a racing insertion is).
        let evicted = w.evict();
        if evicted {
            w.state.revive_locked();
            slot_b.store(FRAME, Ordering::Release);
            let _ = slot_b.load(Ordering::Acquire);
            if w.state.abandon_locked() == PutOutcome::Free {
                w.frees.fetch_add(1, Ordering::Relaxed);
            }
        }
        getter.join().unwrap();
        let frees = w.frees.load(Ordering::Relaxed);
        let state = w.state.load();
        if evicted {
            // Two incarnations ended (page A evicted, page B given up): two frees, and the
            // frame is DEAD with no stray count.
            assert_eq!(frees, 2, "each incarnation is freed exactly once");
            assert!(
                [
                    DEAD,
                    DEAD | LOCKED,
                    DEAD | UPTODATE,
                    DEAD | LOCKED | UPTODATE
                ]
                .contains(&state.bits()),
                "no flag but DEAD, LOCKED and UPTODATE: {state:?}"
            );
            assert_eq!(state.count(), 0);
            assert!(state.is_dead());
        } else {
            assert_eq!(frees, 0);
            assert_eq!(state.bits(), ONE | UPTODATE);
        }
    });
}

#[test]
fn reused_frame_keeps_its_new_owner() {
    loom::model(|| {
        let w = World::new();
        let getter = {
            let w = w.clone();
            thread::spawn(move || match w.state.try_get() {
                GetOutcome::Got => {
                    let mine = w.slot.load(Ordering::Acquire) == FRAME;
                    if !mine {
                        assert_eq!(
                            w.state.put(),
                            PutOutcome::Alive,
                            "the new owner still holds it"
                        );
                    }
                    mine
                }
                _ => false,
            })
        };
        let evicted = w.evict();
        if evicted {
            // Reallocated for another page and kept (LOCKED, one reference).
            w.state.revive_locked();
        }
        let held_a = getter.join().unwrap();
        let state = w.state.load();
        if evicted {
            assert!(!held_a);
            assert_eq!(
                state.bits(),
                ONE | LOCKED,
                "the new owner's count is neither lost nor doubled"
            );
        } else if held_a {
            assert_eq!(state.bits(), (2 * ONE) | UPTODATE);
        }
    });
}

/// How the frame of `optimistic_read` is refilled: retired (the version made odd) before
/// its identity and bytes change, as the library does, or broken: the new identity and
/// bytes stored first, the version retired after, which only a racing reader can see (a
/// copy mixing the two pages that validates).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Refill {
    Sound,
    StoresBeforeRetire,
}

#[test]
fn optimistic_read() {
    optimistic_read_under(Refill::Sound);
}

#[test]
#[should_panic(expected = "a validated copy belongs to one identity")]
fn optimistic_read_broken_stores_before_retire() {
    optimistic_read_under(Refill::StoresBeforeRetire);
}

fn optimistic_read_under(refill: Refill) {
    loom::model(move || {
        // A frame with two data words and an identity, holding page 1 = (11, 11).
        let version = Arc::new(Version::default());
        let identity = Arc::new(AtomicU64::new(1));
        let data = Arc::new([AtomicU64::new(11), AtomicU64::new(11)]);
        version.publish();
        let reader = {
            let (version, identity, data) = (version.clone(), identity.clone(), data.clone());
            thread::spawn(move || {
                let v = version.begin_read()?;
                let id = identity.load(Ordering::Relaxed);
                let copy = [
                    data[0].load(Ordering::Relaxed),
                    data[1].load(Ordering::Relaxed),
                ];
                version.validate(v).then_some((id, copy))
            })
        };
        // Evict page 1, refill the frame with page 2 = (22, 22), publish.
        if refill == Refill::Sound {
            version.retire();
        }
        identity.store(2, Ordering::Relaxed);
        data[0].store(22, Ordering::Relaxed);
        data[1].store(22, Ordering::Relaxed);
        if refill == Refill::StoresBeforeRetire {
            version.retire();
        }
        version.publish();
        if let Some((id, copy)) = reader.join().unwrap() {
            let want = id * 11;
            assert_eq!(
                copy,
                [want, want],
                "a validated copy belongs to one identity"
            );
        }
    });
}

fn ramp_race(threads: usize) {
    use readahead::{decide_on_marker, RaCell, RaState};
    use types::PageIndex;
    loom::model(move || {
        let cell = Arc::new(RaCell::new(32));
        // A first window [0, 4), marker at page 1.
        cell.update(|_, _| {
            readahead::Decision::Window(RaState {
                start: 0,
                size: 4,
                async_size: 3,
                order: 0,
            })
        })
        .unwrap();
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let cell = cell.clone();
                thread::spawn(move || {
                    cell.update(|state, max| {
                        // Everything after the reader is present: a stray marker decides
                        // nothing, so only the thread that still sees the old window ramps.
                        decide_on_marker(state, PageIndex(1), None, max)
                    })
                })
            })
            .collect();
        let installed: Vec<RaState> = handles
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect();
        assert_eq!(
            installed.len(),
            1,
            "exactly one thread ramps the window: {installed:?}"
        );
        assert_eq!(
            installed[0],
            RaState {
                start: 4,
                size: 8,
                async_size: 8,
                order: 2,
            }
        );
        assert_eq!(
            cell.load(),
            installed[0],
            "the state is the winner's, never a stale one"
        );
    });
}

/// `errseq`: two handles check while a writeback error is recorded: each reports it exactly
/// once (during or after the race), never twice.
#[test]
fn errseq_every_handle_once() {
    use errseq::ErrSeq;
    loom::model(|| {
        let seq = Arc::new(ErrSeq::default());
        let recorder = {
            let seq = seq.clone();
            thread::spawn(move || seq.record(5))
        };
        let checkers: Vec<_> = (0..2)
            .map(|_| {
                let seq = seq.clone();
                let mut since = seq.sample();
                thread::spawn(move || {
                    let first = seq.check_and_advance(&mut since);
                    (first, since)
                })
            })
            .collect();
        recorder.join().unwrap();
        for checker in checkers {
            let (first, mut since) = checker.join().unwrap();
            let after = seq.check_and_advance(&mut since);
            let reports = [first, after].iter().flatten().count();
            assert_eq!(
                reports, 1,
                "a handle reported {reports} times: {first:?} {after:?}"
            );
            assert_eq!(seq.check_and_advance(&mut since), None);
        }
    });
}

/// `errseq`: an error recorded while a handle is checking, and a handle opened right after
/// that check: the new handle reports the newest error unless the checker already
/// reported it (the 4.17 rule), which a `fetch_or` of SEEN instead of the CAS breaks.
#[test]
fn errseq_a_handle_opened_after_a_check_sees_the_unreported_error() {
    use errseq::ErrSeq;
    const EIO: i32 = 5;
    const ENOSPC: i32 = 28;
    loom::model(|| {
        let seq = Arc::new(ErrSeq::default());
        seq.record(EIO);
        let recorder = {
            let seq = seq.clone();
            thread::spawn(move || seq.record(ENOSPC))
        };
        let checker = {
            let seq = seq.clone();
            thread::spawn(move || {
                let mut since = seq.sample();
                let first = seq.check_and_advance(&mut since);
                let opened_after = seq.sample();
                (first, opened_after)
            })
        };
        recorder.join().unwrap();
        let (first, mut opened_after) = checker.join().unwrap();
        let late = seq.check_and_advance(&mut opened_after);
        match first {
            Some(ENOSPC) => assert_eq!(late, None, "reported to a handle opened after it was seen"),
            Some(EIO) => assert_eq!(late, Some(ENOSPC), "an unreported error was lost"),
            other => panic!("the checker reported {other:?}"),
        }
    });
}

#[test]
fn readahead_marker_race() {
    ramp_race(2);
}

#[test]
fn readahead_limit_counts() {
    use readahead::{LimitBounds, RaCell, ReadaheadLimit};
    loom::model(|| {
        // 2^16 frames: a period is 8,192 pages, so none ends here.
        let limit = Arc::new(ReadaheadLimit::new(LimitBounds::for_cache(1 << 16)));
        let cell = Arc::new(RaCell::new(32));
        let reader = {
            let (limit, cell) = (limit.clone(), cell.clone());
            thread::spawn(move || {
                limit.note_window(&cell);
                limit.note_read_ahead(5, 4);
            })
        };
        limit.note_window(&cell);
        limit.note_wasted(3);
        reader.join().unwrap();
        assert_eq!(limit.streams().now, 1, "one handle, one stream");
        let thrash = limit.thrash();
        assert_eq!((thrash.read_ahead_pages, thrash.wasted_pages), (5, 3));
        assert_eq!(thrash.largest_shift, 3, "the window of 4 pages");
    });
}

#[test]
fn readahead_miss_race() {
    use readahead::{decide_on_miss, MissRequest, RaCell, RaState};
    use types::PageIndex;
    loom::model(|| {
        let cell = Arc::new(RaCell::new(32));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let cell = cell.clone();
                thread::spawn(move || {
                    // Both threads of the handle miss page 0 at once.
                    let req = MissRequest {
                        index: PageIndex(0),
                        pages: 1,
                        prev_index: None,
                        cached_before: 0,
                    };
                    cell.update(|state, max| decide_on_miss(state, req, max))
                })
            })
            .collect();
        let installed: Vec<RaState> = handles
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect();
        // The loser re-read the state, found page 0 inside the winner's window, and
        // opened none: one window, read once.
        assert_eq!(
            installed,
            vec![RaState {
                start: 0,
                size: 4,
                async_size: 3,
                order: 0,
            }]
        );
        assert_eq!(cell.load(), installed[0]);
    });
}

/// The reader (the main thread) yields before its look-up. Loom's DPOR orders a store
/// against the last access of any kind, and both writers load the slot before they store
/// it: their own load hides the reader's, so with the reader looking first (loom keeps
/// the main thread running) no schedule put an unlink before its first look (128,943
/// executions, none missing at the first look). With the yield the writers run first
/// and loom backtracks each of the reader's loads between their stores; the model
/// asserts that the miss at the first look was explored.
#[test]
fn isolated_eviction_vs_truncation_vs_lookup() {
    let first_look_misses = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let executions = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (misses, runs) = (first_look_misses.clone(), executions.clone());
    loom::model(move || {
        runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let w = World::new();
        let free = |w: &World| {
            w.state.mark_free();
            w.frees.fetch_add(1, Ordering::Relaxed);
        };
        let reclaimer = {
            let w = w.clone();
            thread::spawn(move || {
                // Isolation: the policy takes a reference.
                if w.state.try_get() != GetOutcome::Got {
                    return false;
                }
                let guard = w.index_lock.lock().unwrap();
                if w.slot.load(Ordering::Acquire) == FRAME && w.state.try_freeze_isolated() {
                    w.slot.store(SHADOW, Ordering::Release);
                    drop(guard);
                    free(&w);
                    return true;
                }
                drop(guard);
                if w.state.put() == PutOutcome::Free {
                    free(&w);
                }
                false
            })
        };
        let truncator = {
            let w = w.clone();
            thread::spawn(move || {
                let guard = w.index_lock.lock().unwrap();
                if w.slot.load(Ordering::Acquire) != FRAME {
                    return;
                }
                w.slot.store(0, Ordering::Release);
                drop(guard);
                if w.state.put() == PutOutcome::Free {
                    free(&w);
                }
            })
        };
        thread::yield_now();
        if w.find_get_noting(&misses).is_some() {
            let state = w.state.load();
            assert!(!state.is_dead(), "a held folio is never frozen");
            if w.state.put() == PutOutcome::Free {
                free(&w);
            }
        }
        reclaimer.join().unwrap();
        truncator.join().unwrap();
        assert_eq!(w.frees.load(Ordering::Relaxed), 1, "freed exactly once");
        let state = w.state.load();
        assert!(state.is_dead());
        assert_eq!(state.count(), 0);
    });
    let misses = first_look_misses.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "isolated_eviction_vs_truncation_vs_lookup: {} executions, {misses} first-look misses",
        executions.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert!(
        misses > 0,
        "no execution unlinked the folio before the reader's first look"
    );
}

/// `MappingTable`'s lifetime protocol (`src/mapping/table.rs`), transcribed for one inode: the
/// table is an `Option` under a reader-writer lock, a mapping's index is the count of its
/// folios under a mutex (the index lock; the walk of step R2 is reading it).
mod lifetime {
    use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use loom::sync::{Arc, Mutex, RwLock};

    /// `Handles::open` adds one handle and one open.
    const OPEN: u64 = (1 << 32) | 1;

    fn handles(word: u64) -> u64 {
        word & 0xffff_ffff
    }

    /// The protocol as written, or one of two broken ones the models must catch.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Protocol {
        Sound,
        /// Step O raises the handles after dropping the table's lock.
        RaiseAfterLookup,
        /// Step R4 compares the handle count, not the whole word (opens included).
        CompareHandlesOnly,
    }

    pub struct Mapping {
        handles: AtomicU64,
        /// The index, and its lock: the folios in it.
        index: Mutex<u64>,
        folios_closed: AtomicU64,
        /// Set under the table's write lock when the mapping leaves it.
        removed: AtomicBool,
    }

    pub struct Table {
        protocol: Protocol,
        maps: RwLock<Option<Arc<Mapping>>>,
        /// Every mapping made, for the final checks.
        made: Mutex<Vec<Arc<Mapping>>>,
    }

    impl Table {
        /// A table holding one mapping with no handle and `folios` folios, counted.
        pub fn with_closed(protocol: Protocol, folios: u64) -> Table {
            let mapping = Arc::new(Mapping {
                handles: AtomicU64::new(OPEN - 1),
                index: Mutex::new(folios),
                folios_closed: AtomicU64::new(folios),
                removed: AtomicBool::new(false),
            });
            Table {
                protocol,
                maps: RwLock::new(Some(mapping.clone())),
                made: Mutex::new(vec![mapping]),
            }
        }

        /// The mapping in the table.
        pub fn current(&self) -> Arc<Mapping> {
            self.maps.read().unwrap().clone().expect("a mapping")
        }

        /// Step O.
        pub fn open(&self) -> Arc<Mapping> {
            {
                let maps = self.maps.read().unwrap();
                if let Some(mapping) = maps.as_ref() {
                    let mapping = mapping.clone();
                    if self.protocol == Protocol::RaiseAfterLookup {
                        drop(maps);
                    }
                    mapping.handles.fetch_add(OPEN, Ordering::AcqRel);
                    return mapping;
                }
            }
            let mut maps = self.maps.write().unwrap();
            if let Some(mapping) = maps.as_ref() {
                mapping.handles.fetch_add(OPEN, Ordering::AcqRel);
                return mapping.clone();
            }
            let mapping = Arc::new(Mapping {
                handles: AtomicU64::new(OPEN),
                index: Mutex::new(0),
                folios_closed: AtomicU64::new(0),
                removed: AtomicBool::new(false),
            });
            *maps = Some(mapping.clone());
            self.made.lock().unwrap().push(mapping.clone());
            mapping
        }

        /// A read through a handle inserts a folio (under the index lock).
        pub fn insert(&self, mapping: &Mapping) {
            assert!(
                !mapping.removed.load(Ordering::Acquire),
                "an open handle's mapping left the table"
            );
            *mapping.index.lock().unwrap() += 1;
        }

        /// Step C.
        pub fn close(&self, mapping: &Arc<Mapping>) {
            let before = mapping.handles.fetch_sub(1, Ordering::AcqRel);
            if handles(before - 1) == 0 {
                self.remove_if_unused(mapping);
            }
        }

        /// Reclaim evicts one folio, counts it down (`Mapping::folio_removed`), and tries
        /// R if that was the last one counted.
        pub fn evict_one(&self, mapping: &Arc<Mapping>) {
            let mut index = mapping.index.lock().unwrap();
            if *index == 0 {
                return;
            }
            *index -= 1;
            let mut maybe_unused = false;
            if handles(mapping.handles.load(Ordering::Acquire)) == 0 {
                let before = mapping
                    .folios_closed
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                    .unwrap_or(0);
                maybe_unused = before <= 1;
            }
            drop(index);
            if maybe_unused {
                self.remove_if_unused(mapping);
            }
        }

        /// Step R.
        pub fn remove_if_unused(&self, mapping: &Arc<Mapping>) {
            let word = mapping.handles.load(Ordering::Acquire);
            if handles(word) != 0 {
                return;
            }
            let index = mapping.index.lock().unwrap();
            mapping.folios_closed.store(*index, Ordering::Release);
            let folios = *index;
            drop(index);
            if folios > 0 {
                return;
            }
            let mut maps = self.maps.write().unwrap();
            let now = mapping.handles.load(Ordering::Acquire);
            let changed = match self.protocol {
                Protocol::CompareHandlesOnly => handles(now) != handles(word),
                _ => now != word,
            };
            if changed {
                return;
            }
            if maps.as_ref().is_some_and(|held| Arc::ptr_eq(held, mapping)) {
                mapping.removed.store(true, Ordering::Release);
                *maps = None;
            }
        }

        /// Once every thread is done: no folio in a mapping that left the table, and the
        /// table's mapping, if any, has a handle or a folio.
        pub fn check(&self) {
            for mapping in self.made.lock().unwrap().iter() {
                if mapping.removed.load(Ordering::Acquire) {
                    assert_eq!(
                        *mapping.index.lock().unwrap(),
                        0,
                        "a folio left in a mapping that left the table (it can never be evicted)"
                    );
                }
            }
            if let Some(mapping) = self.maps.read().unwrap().as_ref() {
                let used = handles(mapping.handles.load(Ordering::Acquire)) > 0
                    || *mapping.index.lock().unwrap() > 0;
                assert!(used, "an unused mapping stayed in the table");
            }
        }
    }
}

/// A thread that opens the file, reads a folio into it and closes it.
fn spawn_open_read_close(table: &Arc<lifetime::Table>) -> thread::JoinHandle<()> {
    let table = table.clone();
    thread::spawn(move || {
        let mapping = table.open();
        table.insert(&mapping);
        table.close(&mapping);
    })
}

/// A closed file's last folio is evicted while another thread opens the file and closes
/// it again.
fn mapping_lifetime_open_vs_eviction_under(protocol: lifetime::Protocol) {
    loom::model(move || {
        let table = Arc::new(lifetime::Table::with_closed(protocol, 1));
        let closed = table.current();
        let reclaimer = {
            let (table, closed) = (table.clone(), closed.clone());
            thread::spawn(move || table.evict_one(&closed))
        };
        let opener = spawn_open_read_close(&table);
        reclaimer.join().unwrap();
        opener.join().unwrap();
        table.check();
    });
}

/// A removal has walked a closed mapping and found no folio; before it takes the table's
/// lock, another thread opens the file, reads a folio into it and closes it.
fn mapping_lifetime_reopen_between_walk_and_removal_under(protocol: lifetime::Protocol) {
    loom::model(move || {
        let table = Arc::new(lifetime::Table::with_closed(protocol, 0));
        let closed = table.open();
        // A handle closes; its R runs on the thread below, racing the reopen.
        let remover = {
            let (table, closed) = (table.clone(), closed.clone());
            thread::spawn(move || table.close(&closed))
        };
        let opener = spawn_open_read_close(&table);
        remover.join().unwrap();
        opener.join().unwrap();
        table.check();
    });
}

#[test]
fn mapping_lifetime_open_vs_eviction() {
    mapping_lifetime_open_vs_eviction_under(lifetime::Protocol::Sound);
}

#[test]
fn mapping_lifetime_reopen_between_walk_and_removal() {
    mapping_lifetime_reopen_between_walk_and_removal_under(lifetime::Protocol::Sound);
}

#[test]
#[should_panic(expected = "left the table")]
fn mapping_lifetime_broken_raise_after_lookup() {
    mapping_lifetime_open_vs_eviction_under(lifetime::Protocol::RaiseAfterLookup);
}

#[test]
#[should_panic(expected = "a mapping that left the table")]
fn mapping_lifetime_broken_compare_handles_only() {
    mapping_lifetime_reopen_between_walk_and_removal_under(lifetime::Protocol::CompareHandlesOnly);
}

/// The write side (DESIGN.md §8): the write protocol W1-W5 (`src/write/into_folio.rs`),
/// writeback B1-B3 (`src/writeback.rs`), reclaim's freeze (`src/reclaim.rs`,
/// `Mapping::invalidate` with `Invalidate::Unpinned`) and truncation
/// (`Mapping::invalidate` with `Invalidate::Shrink`), transcribed step by step (the
/// steps keep their names) around the library's own `FolioState`, `Version`, `BlockMask`
/// and `DirtyBudget`. One folio of one or two 4 KiB blocks; its bytes are one word a
/// block.
mod write_side {
    use super::arena::Arena;
    use super::budget::DirtyBudget;
    use super::mask::{BlockMask, Blocks, Prior};
    use super::refcount::{
        FolioState, GetOutcome, PutOutcome, Redirty, StateWord, WriteLock, DIRTY, WRITEBACK,
    };
    use super::types::{FrameId, Order};
    use super::version::Version;
    use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use loom::sync::Mutex;
    use loom::thread;

    /// The folio's head frame in the stub arena; its tail (the mask's word) is frame 1.
    const HEAD: FrameId = FrameId(0);
    /// What a tail frame's word holds before the folio is first dirtied (an old
    /// identity): a writer of a clean folio must not take it for dirty blocks.
    const STALE_MASK: u64 = 0b11;
    /// The index slot while it holds the folio, and once the folio left it.
    const IN_INDEX: usize = 1;
    const GONE: usize = 0;

    /// Bytes of a block: the file's, an earlier write's, the racing write's, and what the
    /// frame's next owner writes once it is freed.
    pub const OLD: u64 = 1;
    pub const FIRST: u64 = 2;
    pub const NEW: u64 = 3;
    const REUSED: u64 = 99;

    /// The write protocol as written, or a broken one the models must catch.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Writer {
        Sound,
        /// W4 without moving the version.
        NoVersion,
        /// W4's `end_write` before the copy.
        EndWriteBeforeCopy,
        /// W2 skipped: a folio under writeback is written into anyway.
        IgnoresWriteback,
        /// W3's dirty state read from the word loaded before its CAS, not from the word
        /// the CAS replaced (the first version of `write::into_folio`): a writeback that starts
        /// and ends in between makes the writer take a clean folio for a dirty one.
        StalePrior,
    }

    /// Writeback's B1 as written, or without refusing a writer's LOCKED.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Start {
        Sound,
        IgnoresLocked,
    }

    /// What the device does with a writeback's write.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Device {
        Writes,
        /// EIO: B3 puts the blocks back and makes the folio dirty again (`Redirty::Yes`).
        Fails,
        /// A short write (`Batch::run_done`): the first block taken is written, the others
        /// fail and go back.
        WritesFirst,
    }

    /// How reclaim takes the folio.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Reclaim {
        /// The policy isolates it (a reference), then `try_freeze_isolated`.
        Isolated,
        /// `try_freeze` of a folio nobody pins (`Invalidate::Unpinned`).
        Unpinned,
        /// Broken: as `Isolated`, but it takes a dirty folio for a clean one.
        IgnoresDirty,
    }

    /// Truncation as written, or without waiting for a writeback in flight.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Truncation {
        Sound,
        NoWait,
    }

    /// The marks of the folio's index slot, under the index lock.
    pub struct Marks {
        /// `Mark::Dirty`: the marked walk of writeback finds the folio through it.
        pub dirty: bool,
    }

    pub struct Folio {
        pub state: FolioState,
        pub version: Version,
        /// The index slot: loaded lock-free by lookups, changed under the index lock.
        slot: AtomicUsize,
        /// The index lock, and the slot's marks.
        index: Mutex<Marks>,
        arena: Arena,
        order: Order,
        /// The folio's bytes, a word a block: written with atomic stores
        /// (`Arena::copy_in`), read by optimistic readers with relaxed loads (`copy_out`)
        /// and by the device with plain loads (`unsync_load`, its DMA), so that loom
        /// reports a device read that overlaps a writer's copy.
        pub bytes: Vec<AtomicU64>,
        /// The file on disk, a word a block (the device's side of the model).
        disk: std::sync::Mutex<Vec<u64>>,
        budget: DirtyBudget,
        frees: AtomicU64,
        /// See `step`.
        steps: AtomicU64,
    }

    impl Folio {
        /// A clean, uptodate folio of `order` (0 or 1) in the index: count 1 (the
        /// index's), its bytes the file's.
        pub fn cached(order: Order) -> Folio {
            let blocks = order.pages() as usize;
            let state = FolioState::new_free();
            state.revive_locked();
            state.finish_read_ok();
            let version = Version::default();
            version.publish();
            Folio {
                state,
                version,
                slot: AtomicUsize::new(IN_INDEX),
                index: Mutex::new(Marks { dirty: false }),
                arena: Arena::new(2, STALE_MASK),
                order,
                bytes: (0..blocks).map(|_| AtomicU64::new(OLD)).collect(),
                disk: std::sync::Mutex::new(vec![OLD; blocks]),
                budget: DirtyBudget::new(64, 64),
                frees: AtomicU64::new(0),
                steps: AtomicU64::new(0),
            }
        }

        /// As `cached`, and an earlier write of `FIRST` into block 0 made it dirty.
        pub fn dirty(order: Order) -> Folio {
            let folio = Folio::cached(order);
            assert!(folio.write(0, 1, FIRST, Writer::Sound));
            folio
        }

        /// A point where loom must try the other threads' steps. Loom's partial-order
        /// reduction remembers one last access per object, so it misses interleavings in
        /// which another thread's whole sequence, which starts with a load of its own,
        /// fits between a load of this thread and its next step (tokio-rs/loom#166): the
        /// writer's load of the state word before W3's CAS, and a complete writeback in
        /// between, for one. Threads pass here in such windows, and writeback before B1
        /// and before B3: relaxed read-modify-writes of one atomic race with each other
        /// (so loom tries both orders) and order nothing else. Not at every step: that
        /// makes the models run for minutes.
        fn step(&self) {
            self.steps.fetch_add(1, Ordering::Relaxed);
        }

        pub fn pages(&self) -> u64 {
            self.order.pages()
        }

        fn mask(&self) -> BlockMask<'_> {
            BlockMask::of(&self.arena, HEAD, self.order)
        }

        /// `Mapping::find_get`: true with a reference held, false on a miss.
        fn find_get(&self) -> bool {
            loop {
                if self.slot.load(Ordering::Acquire) != IN_INDEX {
                    return false;
                }
                match self.state.try_get() {
                    GetOutcome::Got => {}
                    GetOutcome::Dead => {
                        // Frozen: wait for the evictor to drop the index lock, look again.
                        drop(self.index.lock().unwrap());
                        continue;
                    }
                    GetOutcome::DeadFree => unreachable!("no frame is reused in these models"),
                }
                if self.slot.load(Ordering::Acquire) == IN_INDEX {
                    return true;
                }
                self.put();
            }
        }

        /// `Memory::put_folio`.
        fn put(&self) {
            if self.state.put() == PutOutcome::Free {
                self.free();
            }
        }

        /// `Arena::free`: the frame goes to its next owner, who writes it at once.
        fn free(&self) {
            let state = self.state.load();
            assert!(
                state.is_dead() && !state.is_locked() && !state.is_dirty() && !state.is_writeback(),
                "a frame was freed while dirty, under writeback or I/O: {state:?}"
            );
            if self.version.is_valid() {
                self.version.retire();
            }
            self.state.mark_free();
            self.frees.fetch_add(1, Ordering::Relaxed);
            for word in &self.bytes {
                word.store(REUSED, Ordering::Relaxed);
            }
        }

        /// `File::write_at` of `value` into blocks `[first, first + count)` of the folio:
        /// the budget's reservation, then W1-W5 (`File::lock_for_write`, `File::change`).
        /// Writers of a file go one at a time (its writer lock): the models run one. False
        /// if the folio left the index first (the real writer then reads the page into a
        /// new folio: not modeled).
        pub fn write(&self, first: u64, count: u64, value: u64, writer: Writer) -> bool {
            let blocks = Blocks::range(first, count);
            // The limit is far: the reservation never waits here.
            let _ = self.budget.charge(count, &|| {});
            let newly = match self.lock_for_write(writer) {
                Some(prior) => self.change(&blocks, value, prior, writer),
                None => {
                    self.budget.uncharge(count);
                    return false;
                }
            };
            self.budget.uncharge(count - newly);
            true
        }

        /// W1-W3: the folio pinned and LOCKED for the writer, and whether it was dirty;
        /// `None` if it left the index.
        fn lock_for_write(&self, writer: Writer) -> Option<Prior> {
            loop {
                // W1.
                if !self.find_get() {
                    return None;
                }
                let state = self.state.load();
                self.step();
                // W3 (W2 is its `Writeback` answer).
                match self.state.try_lock_for_write() {
                    WriteLock::Locked(was) => {
                        return Some(match writer {
                            Writer::StalePrior => Prior::of(state),
                            _ => Prior::of(was),
                        });
                    }
                    WriteLock::Writeback if writer == Writer::IgnoresWriteback => {
                        return Some(Prior::of(state));
                    }
                    WriteLock::Writeback => {
                        // W2: wait for the writeback to end (stable pages), look again.
                        while self.state.load().is_writeback() {
                            thread::yield_now();
                        }
                        self.put();
                    }
                    WriteLock::Pinned => {
                        // Reclaim's isolation pins it: the real writer retries, then copies
                        // on write; here it retries until the pin goes.
                        self.put();
                        thread::yield_now();
                    }
                }
            }
        }

        /// W4-W5: the copy, the mask, the index's Dirty mark, then DIRTY set and LOCKED
        /// cleared; the writer's pin dropped. Returns the pages newly dirtied.
        fn change(&self, blocks: &Blocks, value: u64, prior: Prior, writer: Writer) -> u64 {
            match writer {
                Writer::NoVersion => {}
                Writer::EndWriteBeforeCopy => {
                    self.version.begin_write();
                    self.version.end_write();
                }
                _ => self.version.begin_write(),
            }
            for b in 0..self.pages() {
                if blocks.contains(b) {
                    self.bytes[b as usize].store(value, Ordering::Relaxed);
                }
            }
            let newly = self.mask().mark(blocks, prior);
            if prior == Prior::Clean {
                self.index.lock().unwrap().dirty = true;
            }
            if matches!(
                writer,
                Writer::Sound | Writer::StalePrior | Writer::IgnoresWriteback
            ) {
                self.version.end_write();
            }
            if writer == Writer::IgnoresWriteback && !self.state.load().is_locked() {
                self.state.set_flags(DIRTY);
            } else {
                self.state.unlock_dirty();
            }
            self.put();
            newly
        }

        /// One pass of background writeback over the folio (`writeback::start` with
        /// `Take::Dirty`): B1-B2 under the index lock, the device's write, B3. Returns
        /// whether it took the folio.
        pub fn write_back(&self, device: Device, start: Start) -> bool {
            self.step();
            let mut marks = self.index.lock().unwrap();
            // B1: the marked walk finds the folio; one CAS DIRTY -> WRITEBACK, which a
            // writer's LOCKED refuses (background writeback then skips the folio).
            if !marks.dirty || self.slot.load(Ordering::Relaxed) != IN_INDEX {
                return false;
            }
            let started = match start {
                Start::Sound => self.state.try_start_writeback(),
                Start::IgnoresLocked => {
                    let state = self.state.load();
                    if state.is_dirty() && !state.is_writeback() {
                        self.state.test_and_clear(DIRTY);
                        self.state.set_flags(WRITEBACK);
                    }
                    state.is_dirty() && !state.is_writeback()
                }
            };
            if !started {
                return false;
            }
            // B2: take the dirty blocks, clear the marks, drop the lock.
            let taken = self.mask().take();
            marks.dirty = false;
            drop(marks);
            self.budget.writeback_started(taken.count());
            // The device reads the taken blocks out of the frame and writes them.
            let read: Vec<(usize, u64)> = (0..self.pages())
                .filter(|&b| taken.contains(b))
                .map(|b| {
                    // SAFETY: a loom atomic's unsynchronised load is a checked read (loom
                    // panics if a store is not ordered with it), never undefined behaviour.
                    (b as usize, unsafe { self.bytes[b as usize].unsync_load() })
                })
                .collect();
            let failed = match device {
                Device::Writes => {
                    let mut disk = self.disk.lock().unwrap();
                    for (b, value) in read {
                        disk[b] = value;
                    }
                    Blocks::default()
                }
                Device::Fails => taken,
                Device::WritesFirst => {
                    let mut disk = self.disk.lock().unwrap();
                    let (b, value) = read[0];
                    disk[b] = value;
                    taken.minus(&Blocks::range(b as u64, 1))
                }
            };
            // B3: failed blocks back into the mask and the Dirty mark back, then WRITEBACK
            // cleared (DIRTY set again in the same step if any block failed); the blocks
            // written leave the budget.
            if !failed.is_empty() {
                let mut marks = self.index.lock().unwrap();
                self.mask().restore(&failed);
                marks.dirty = true;
            }
            self.step();
            self.state.end_writeback(if failed.is_empty() {
                Redirty::No
            } else {
                Redirty::Yes
            });
            self.budget.writeback_ended(taken.count());
            self.budget.uncharge(taken.minus(&failed).count());
            true
        }

        /// Reclaim's eviction of the folio under the index lock. A frozen folio's bytes
        /// must be on disk: checked at once, before the frame is freed. Returns whether it
        /// evicted the folio, or what was lost (then the frame is left as it is, and the
        /// caller panics once the other threads are joined: loom aborts on a panic while
        /// threads it runs are still alive).
        pub fn reclaim(&self, how: Reclaim) -> Result<bool, String> {
            let isolated = how != Reclaim::Unpinned;
            if isolated && self.state.try_get() != GetOutcome::Got {
                return Ok(false);
            }
            let marks = self.index.lock().unwrap();
            if how == Reclaim::IgnoresDirty {
                self.state.discard_dirty();
            }
            let frozen = self.slot.load(Ordering::Acquire) == IN_INDEX
                && if isolated {
                    self.state.try_freeze_isolated()
                } else {
                    self.state.try_freeze()
                };
            if !frozen {
                drop(marks);
                if isolated {
                    self.put();
                }
                return Ok(false);
            }
            self.slot.store(GONE, Ordering::Release);
            drop(marks);
            let disk = self.disk.lock().unwrap().clone();
            for (b, word) in self.bytes.iter().enumerate() {
                // SAFETY: as in `write_back`.
                let bytes = unsafe { word.unsync_load() };
                if bytes != disk[b] {
                    return Err(format!(
                        "reclaim froze a folio whose bytes are not on disk (block {b} holds \
                         {bytes}, the disk {}): a write is lost",
                        disk[b]
                    ));
                }
            }
            self.free();
            Ok(true)
        }

        /// `set_len` down past the folio: `Mapping::invalidate` with `Invalidate::Shrink`,
        /// under the file's writer lock (so no writer holds the folio LOCKED).
        pub fn truncate(&self, how: Truncation) {
            let mut marks = self.index.lock().unwrap();
            if how == Truncation::Sound {
                // A writeback in flight reads the frame, and its completion may make the
                // folio dirty again: wait for it.
                while self.slot.load(Ordering::Relaxed) == IN_INDEX
                    && self.state.load().is_writeback()
                {
                    drop(marks);
                    while self.state.load().is_writeback() {
                        thread::yield_now();
                    }
                    marks = self.index.lock().unwrap();
                }
            }
            if self.slot.load(Ordering::Relaxed) != IN_INDEX {
                return;
            }
            if self.state.load().is_dirty() {
                let pages = self.mask().peek().count();
                if self.state.discard_dirty() {
                    self.budget.uncharge(pages);
                }
            }
            self.slot.store(GONE, Ordering::Release);
            marks.dirty = false;
            drop(marks);
            // The index's reference: the last holder frees the frame.
            self.put();
        }

        /// Once every thread is done, on a folio still in the index: no update is lost.
        /// Each block's bytes are on disk, or the folio is DIRTY with the block in its
        /// mask and its Dirty mark set (so a later writeback finds it); the budget counts
        /// exactly its dirty blocks; only the index's reference is left.
        pub fn check_nothing_lost(&self) {
            let state = self.state.load();
            assert_eq!(self.slot.load(Ordering::Relaxed), IN_INDEX);
            assert!(
                !state.is_locked() && !state.is_writeback() && state.count() == 1,
                "a flag or a reference left behind: {state:?}"
            );
            let marked = self.index.lock().unwrap().dirty;
            let dirty = if state.is_dirty() {
                self.mask().peek()
            } else {
                Blocks::default()
            };
            let disk = self.disk.lock().unwrap().clone();
            for (b, word) in self.bytes.iter().enumerate() {
                let bytes = word.load(Ordering::Relaxed);
                if bytes != disk[b] {
                    assert!(
                        state.is_dirty() && dirty.contains(b as u64) && marked,
                        "lost update: block {b} holds {bytes}, the disk {}, the folio is \
                         {state:?} with dirty blocks {dirty:?} and Dirty mark {marked}",
                        disk[b]
                    );
                }
            }
            assert_eq!(
                self.budget.pages(),
                dirty.count(),
                "the dirty budget counts the dirty blocks ({state:?}, {dirty:?})"
            );
            assert_eq!(self.budget.writeback_pages(), 0);
        }

        /// Once every thread is done, on a folio that left the index: the frame is free,
        /// with no flag, freed once, and charges nothing to the budget; the device never
        /// wrote bytes of the frame's next owner.
        pub fn check_removed(&self) {
            let state: StateWord = self.state.load();
            assert_eq!(self.slot.load(Ordering::Relaxed), GONE);
            assert!(
                state.is_dead() && !state.is_dirty() && !state.is_writeback(),
                "a removed folio is free with no flag: {state:?}"
            );
            assert_eq!(self.frees.load(Ordering::Relaxed), 1, "freed exactly once");
            assert_eq!(self.budget.pages(), 0, "the dirty budget ends empty");
            assert_eq!(self.budget.writeback_pages(), 0);
            assert!(
                !self.disk.lock().unwrap().contains(&REUSED),
                "the device wrote a freed frame's bytes"
            );
        }
    }

    /// Copy on write (W3 when someone else pins the folio) against a pinning reader and a
    /// data-integrity sync (`writeback::sync`: tag, the walk of `Take::Tagged`, the
    /// "still tagged?" loop of `wait_for_tagged`). One order-0 page whose index slot holds
    /// one of two frames: the folio, and the frame a copy on write fills and swaps in.
    pub mod pinned {
        use super::super::mask::{BlockMask, Blocks, Prior};
        use super::super::refcount::{FolioState, GetOutcome, PutOutcome, Redirty, WriteLock};
        use super::super::types::{FrameId, Order};
        use super::{Arena, OLD, REUSED, STALE_MASK};
        use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
        use loom::sync::Mutex;
        use loom::thread;

        /// How a copy on write puts the copy in the old folio's place, under the index
        /// lock (`FolioWriter::replace_for_write`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Replacement {
            /// The frame in the slot is swapped in place: the slot's marks (`Dirty`,
            /// `Towrite`) stay as they are.
            InPlace,
            /// The old entry is removed (clearing every mark of the slot) and the copy
            /// inserted, then both marks set again as they were: nothing is lost under
            /// the lock, but a look at the marks without it can fall between.
            RemoveReinsert,
            /// Broken (the first version of `replace_for_write`): removed and inserted,
            /// and only `Dirty` set again: a `Towrite` a sync had tagged is gone.
            DropsTowrite,
        }

        /// Writeback's B1, `try_start_writeback`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum StartWriteback {
            /// The library's CAS loop: a pin or unpin only retries it.
            CasLoop,
            /// Broken (its first version): one CAS from the word loaded before, which a
            /// pin or unpin in between makes fail; the walk then skips the folio.
            SingleCas,
        }

        /// How the sync's "still tagged?" loop reads the `Towrite` mark.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum TagCheck {
            /// Under the index lock.
            Locked,
            /// Broken (the first `tagged_in`): without it.
            LockFree,
        }

        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct Protocol {
            pub replacement: Replacement,
            pub start: StartWriteback,
            pub check: TagCheck,
        }

        impl Protocol {
            pub const SOUND: Protocol = Protocol {
                replacement: Replacement::InPlace,
                start: StartWriteback::CasLoop,
                check: TagCheck::Locked,
            };
        }

        /// One frame: its state word and one block's bytes (written with atomic stores,
        /// read by the device with `unsync_load`, its DMA, so that loom reports a device
        /// read that overlaps a writer's copy). No version: no optimistic reader races
        /// here (`write_vs_optimistic_read` checks W4's version moves), and its fences
        /// would only multiply the interleavings.
        struct Frame {
            state: FolioState,
            bytes: AtomicU64,
        }

        /// The marks of the page's index slot, under the index lock.
        struct Marks {
            dirty: bool,
            towrite: bool,
        }

        /// What a look at the marks without the index lock sees (the index's marks are
        /// words in its nodes, which a lock-free walk loads): `Towrite` as each change
        /// under the lock left it, one store a change. Kept only for `TagCheck::LockFree`
        /// (`None` otherwise), so that the other models do not pay for its stores.
        struct LockFreeView(Option<AtomicBool>);

        impl LockFreeView {
            /// Called under the index lock after each change of `marks`.
            fn show(&self, marks: &Marks) {
                if let Some(towrite) = &self.0 {
                    towrite.store(marks.towrite, Ordering::Release);
                }
            }

            fn towrite(&self) -> bool {
                let towrite = self.0.as_ref().expect("kept for TagCheck::LockFree");
                towrite.load(Ordering::Acquire)
            }
        }

        pub struct Page {
            protocol: Protocol,
            frames: [Frame; 2],
            /// The index slot: which frame holds the page. Loaded lock-free by lookups,
            /// changed under the index lock.
            slot: AtomicUsize,
            /// The index lock, and the slot's marks.
            index: Mutex<Marks>,
            towrite_view: LockFreeView,
            arena: Arena,
            /// The page on disk (the device's side of the model).
            disk: std::sync::Mutex<u64>,
        }

        impl Page {
            /// The page cached clean in frame 0 (count 1, the index's), frame 1 free.
            pub fn cached(protocol: Protocol) -> Page {
                let folio = Frame {
                    state: FolioState::new_free(),
                    bytes: AtomicU64::new(OLD),
                };
                folio.state.revive_locked();
                folio.state.finish_read_ok();
                let free = Frame {
                    state: FolioState::new_free(),
                    bytes: AtomicU64::new(REUSED),
                };
                Page {
                    protocol,
                    frames: [folio, free],
                    slot: AtomicUsize::new(0),
                    index: Mutex::new(Marks {
                        dirty: false,
                        towrite: false,
                    }),
                    towrite_view: LockFreeView(
                        (protocol.check == TagCheck::LockFree).then(|| AtomicBool::new(false)),
                    ),
                    arena: Arena::new(4, STALE_MASK),
                    disk: std::sync::Mutex::new(OLD),
                }
            }

            fn mask(&self, frame: usize) -> BlockMask<'_> {
                BlockMask::of(&self.arena, FrameId(2 * frame as u32), Order::ZERO)
            }

            /// `Mapping::find_get`: the frame the slot holds, pinned.
            pub fn find_get(&self) -> usize {
                loop {
                    let f = self.slot.load(Ordering::Acquire);
                    match self.frames[f].state.try_get() {
                        GetOutcome::Got => {}
                        GetOutcome::Dead => {
                            // Freed after a copy replaced it: look again.
                            drop(self.index.lock().unwrap());
                            continue;
                        }
                        GetOutcome::DeadFree => unreachable!("no frame is revived while looked up"),
                    }
                    if self.slot.load(Ordering::Acquire) == f {
                        return f;
                    }
                    self.put(f);
                }
            }

            /// `Memory::put_folio`: the last holder of a replaced folio frees its frame.
            pub fn put(&self, f: usize) {
                let frame = &self.frames[f];
                if frame.state.put() == PutOutcome::Free {
                    let state = frame.state.load();
                    assert!(
                        !state.is_dirty() && !state.is_writeback(),
                        "a frame was freed while dirty or under writeback: {state:?}"
                    );
                    frame.state.mark_free();
                    frame.bytes.store(REUSED, Ordering::Relaxed);
                }
            }

            /// `File::write_at` of `value` over the page: W1-W5, copying on write when
            /// someone else pins the folio (W3's `Pinned`; the library first retries a
            /// few times, which changes nothing here).
            pub fn write(&self, value: u64) {
                loop {
                    // W1.
                    let f = self.find_get();
                    let state = &self.frames[f].state;
                    // W3 (W2 is its `Writeback` answer).
                    match state.try_lock_for_write() {
                        WriteLock::Locked(was) => {
                            self.change_in_place(f, value, Prior::of(was));
                            self.put(f);
                            return;
                        }
                        WriteLock::Writeback => {
                            while state.load().is_writeback() {
                                thread::yield_now();
                            }
                            self.put(f);
                        }
                        WriteLock::Pinned => {
                            let copy = self.copy_on_write(f);
                            // The writer's pin on the old folio goes; the copy's own
                            // reference became the index's.
                            self.put(f);
                            if let Some((c, prior)) = copy {
                                self.change_copy(c, value, prior);
                                return;
                            }
                        }
                    }
                }
            }

            /// W3's copy on write (`File::copy_on_write`, `FolioWriter::replace_for_write`): a
            /// new LOCKED folio with the old one's bytes and dirty blocks, in its place in
            /// the index, the old one's DIRTY discarded. `None` if the old folio's
            /// writeback started meanwhile (then after it ended): try again.
            fn copy_on_write(&self, f: usize) -> Option<(usize, Prior)> {
                let c = 1 - f;
                let (old, copy) = (&self.frames[f], &self.frames[c]);
                copy.state.revive_locked();
                // The old bytes are copied in here; W4 overwrites the page's one block
                // whole, so the model skips that copy.
                let mut marks = self.index.lock().unwrap();
                let state = old.state.load();
                if self.slot.load(Ordering::Relaxed) != f
                    || state.is_writeback()
                    || state.is_locked()
                {
                    drop(marks);
                    assert_eq!(copy.state.abandon_locked(), PutOutcome::Free);
                    while old.state.load().is_writeback() || old.state.load().is_locked() {
                        thread::yield_now();
                    }
                    return None;
                }
                let prior = Prior::of(state);
                if prior == Prior::Dirty {
                    let blocks = self.mask(f).peek();
                    self.mask(c).mark(&blocks, Prior::Clean);
                    old.state.discard_dirty();
                }
                match self.protocol.replacement {
                    Replacement::InPlace => self.slot.store(c, Ordering::Release),
                    Replacement::RemoveReinsert => {
                        let (dirty, towrite) = (marks.dirty, marks.towrite);
                        (marks.dirty, marks.towrite) = (false, false);
                        self.towrite_view.show(&marks);
                        self.slot.store(c, Ordering::Release);
                        (marks.dirty, marks.towrite) = (dirty, towrite);
                        self.towrite_view.show(&marks);
                    }
                    Replacement::DropsTowrite => {
                        (marks.dirty, marks.towrite) = (false, false);
                        self.towrite_view.show(&marks);
                        self.slot.store(c, Ordering::Release);
                        marks.dirty = prior == Prior::Dirty;
                    }
                }
                drop(marks);
                // The index's reference to the old folio goes; the writer's pin keeps it.
                assert_eq!(old.state.put(), PutOutcome::Alive);
                Some((c, prior))
            }

            /// W4's mask and index mark (both paths).
            fn mark(&self, f: usize, prior: Prior) {
                self.mask(f).mark(&Blocks::range(0, 1), prior);
                if prior == Prior::Clean {
                    self.index.lock().unwrap().dirty = true;
                }
            }

            /// W4-W5 into the folio the writer locked.
            fn change_in_place(&self, f: usize, value: u64, prior: Prior) {
                let frame = &self.frames[f];
                frame.bytes.store(value, Ordering::Relaxed);
                self.mark(f, prior);
                frame.state.unlock_dirty();
            }

            /// W4-W5 into a copy (`Fresh::Copy`): UPTODATE and DIRTY as LOCKED goes.
            fn change_copy(&self, c: usize, value: u64, prior: Prior) {
                let frame = &self.frames[c];
                frame.bytes.store(value, Ordering::Relaxed);
                self.mark(c, prior);
                frame.state.finish_fill_dirty();
            }

            /// B1 by the protocol's `StartWriteback`.
            fn try_start_writeback(&self, state: &FolioState) -> bool {
                match self.protocol.start {
                    StartWriteback::CasLoop => state.try_start_writeback(),
                    StartWriteback::SingleCas => {
                        // The one CAS from the word loaded first, in the library's own
                        // operations (the word is private to `refcount`): it fails if
                        // the word moved before a second look (a pin or an unpin), and
                        // is the library's CAS otherwise. So it fails at most when the
                        // first version could: never a failure the old code could not
                        // have.
                        let seen = state.load();
                        if state.load() != seen {
                            return false;
                        }
                        state.try_start_writeback()
                    }
                }
            }

            /// A data-integrity sync of the page (`writeback::sync`): tag, walk, then
            /// walk again while the page is still tagged; the flush is a no-op here.
            /// Returns what the disk holds when it returns Ok.
            pub fn sync(&self) -> u64 {
                {
                    let mut marks = self.index.lock().unwrap();
                    if marks.dirty {
                        marks.towrite = true;
                        self.towrite_view.show(&marks);
                    }
                }
                self.walk();
                while self.still_tagged() {
                    self.walk();
                }
                *self.disk.lock().unwrap()
            }

            /// `wait_for_tagged`'s check.
            fn still_tagged(&self) -> bool {
                match self.protocol.check {
                    TagCheck::Locked => self.index.lock().unwrap().towrite,
                    TagCheck::LockFree => self.towrite_view.towrite(),
                }
            }

            /// `walk` with `Take::Tagged` (B1-B3, the batch's write done in line): under
            /// the index lock, if the slot is tagged, B1; LOCKED (a writer's copy): wait
            /// for it and walk again; refused otherwise: skipped, still tagged.
            fn walk(&self) {
                loop {
                    let mut marks = self.index.lock().unwrap();
                    if !marks.towrite {
                        return;
                    }
                    let f = self.slot.load(Ordering::Relaxed);
                    let frame = &self.frames[f];
                    if !self.try_start_writeback(&frame.state) {
                        let locked = frame.state.load().is_locked();
                        drop(marks);
                        if !locked {
                            return;
                        }
                        while frame.state.load().is_locked() {
                            thread::yield_now();
                        }
                        continue;
                    }
                    // B2: take the blocks, clear both marks, drop the lock.
                    let taken = self.mask(f).take();
                    assert!(taken.contains(0));
                    (marks.dirty, marks.towrite) = (false, false);
                    self.towrite_view.show(&marks);
                    drop(marks);
                    // SAFETY: a loom atomic's unsynchronised load is a checked read (loom
                    // panics if a store is not ordered with it), never undefined behaviour.
                    let bytes = unsafe { frame.bytes.unsync_load() };
                    *self.disk.lock().unwrap() = bytes;
                    // B3.
                    frame.state.end_writeback(Redirty::No);
                    return;
                }
            }

            /// Once every thread is done: the frame in the slot holds the last write, only
            /// the index's reference, no LOCKED or WRITEBACK; if DIRTY its slot is marked
            /// `Dirty`, and its bytes are on disk or it is DIRTY; the sync left nothing
            /// tagged; the other frame (a replaced folio, or a copy given back) is not
            /// DIRTY.
            pub fn check(&self, last: u64) {
                let f = self.slot.load(Ordering::Relaxed);
                let frame = &self.frames[f];
                let state = frame.state.load();
                assert!(
                    !state.is_locked() && !state.is_writeback() && state.count() == 1,
                    "a flag or a reference left behind: {state:?}"
                );
                let (marked, tagged) = {
                    let marks = self.index.lock().unwrap();
                    (marks.dirty, marks.towrite)
                };
                assert!(
                    !state.is_dirty() || marked,
                    "a dirty folio's slot is not marked Dirty"
                );
                assert!(
                    !tagged,
                    "the sync returned with the page still tagged Towrite"
                );
                let bytes = frame.bytes.load(Ordering::Relaxed);
                assert_eq!(bytes, last, "the page holds the last write");
                let disk = *self.disk.lock().unwrap();
                assert!(
                    bytes == disk || state.is_dirty(),
                    "lost update: the page holds {bytes}, the disk {disk}, the folio is clean"
                );
                let other = self.frames[1 - f].state.load();
                assert!(
                    !other.is_dirty() && !other.is_writeback(),
                    "a folio out of the index is dirty: {other:?}"
                );
            }
        }
    }
}

/// Write vs optimistic read: a writer overwrites both blocks of a clean two-block folio
/// (`OLD` to `NEW`) while a reader copies them without a reference. A copy that validates
/// is all old or all new bytes, never torn, and all new if the read began after
/// `write_at` returned (never stale).
fn write_vs_optimistic_read_under(writer: write_side::Writer) {
    use loom::sync::atomic::AtomicBool;
    use write_side::{Folio, NEW, OLD};
    loom::model(move || {
        let folio = Arc::new(Folio::cached(types::Order::new(1)));
        let returned = Arc::new(AtomicBool::new(false));
        let writer = {
            let (folio, returned) = (folio.clone(), returned.clone());
            thread::spawn(move || {
                assert!(folio.write(0, 2, NEW, writer));
                returned.store(true, Ordering::Release);
            })
        };
        // The reader (`File::read_optimistic`): R1, the copy, R3.
        let after_write = returned.load(Ordering::Acquire);
        let copy = folio.version.begin_read().and_then(|v| {
            let copy = [
                folio.bytes[0].load(Ordering::Relaxed),
                folio.bytes[1].load(Ordering::Relaxed),
            ];
            folio.version.validate(v).then_some(copy)
        });
        writer.join().unwrap();
        if let Some(copy) = copy {
            assert!(
                copy == [OLD, OLD] || copy == [NEW, NEW],
                "a validated copy is torn: {copy:?}"
            );
            if after_write {
                assert_eq!(
                    copy,
                    [NEW, NEW],
                    "a read after the write validated stale bytes"
                );
            }
        } else {
            assert!(!after_write, "a read after the write found no valid page");
        }
    });
}

#[test]
fn write_vs_optimistic_read() {
    write_vs_optimistic_read_under(write_side::Writer::Sound);
}

#[test]
#[should_panic(expected = "a validated copy is torn")]
fn write_vs_optimistic_read_broken_no_version() {
    write_vs_optimistic_read_under(write_side::Writer::NoVersion);
}

#[test]
#[should_panic(expected = "a validated copy is torn")]
fn write_vs_optimistic_read_broken_end_write_before_copy() {
    write_vs_optimistic_read_under(write_side::Writer::EndWriteBeforeCopy);
}

/// Write vs writeback: a folio made dirty by an earlier write (block 0) is written again
/// (block 0 of an order-0 folio, block 1 of an order-1 one) while background writeback
/// takes it, and the device writes or fails. The device never reads a block while the
/// writer copies into it (loom reports the overlap), and no update is lost: every block
/// is on disk or dirty, in the mask and marked, and the dirty budget counts exactly the
/// dirty blocks.
fn write_vs_writeback_under(
    order: u8,
    device: write_side::Device,
    writer: write_side::Writer,
    start: write_side::Start,
) {
    use write_side::{Folio, NEW};
    loom::model(move || {
        let folio = Arc::new(Folio::dirty(types::Order::new(order)));
        let block = folio.pages() - 1;
        let writing = {
            let folio = folio.clone();
            thread::spawn(move || assert!(folio.write(block, 1, NEW, writer)))
        };
        let writeback = {
            let folio = folio.clone();
            thread::spawn(move || folio.write_back(device, start))
        };
        writing.join().unwrap();
        writeback.join().unwrap();
        folio.check_nothing_lost();
    });
}

#[test]
fn write_vs_writeback() {
    use write_side::{Device, Start, Writer};
    write_vs_writeback_under(0, Device::Writes, Writer::Sound, Start::Sound);
}

#[test]
fn write_vs_writeback_failed_write() {
    use write_side::{Device, Start, Writer};
    write_vs_writeback_under(0, Device::Fails, Writer::Sound, Start::Sound);
}

#[test]
fn write_vs_writeback_large_folio() {
    use write_side::{Device, Start, Writer};
    write_vs_writeback_under(1, Device::Writes, Writer::Sound, Start::Sound);
}

#[test]
fn write_vs_writeback_large_folio_failed_write() {
    use write_side::{Device, Start, Writer};
    write_vs_writeback_under(1, Device::Fails, Writer::Sound, Start::Sound);
}

/// Both blocks dirty when the writer is quick, and the device writes only the first: the
/// second goes back to the mask, the first leaves it and the budget.
#[test]
fn write_vs_writeback_large_folio_short_write() {
    use write_side::{Device, Start, Writer};
    write_vs_writeback_under(1, Device::WritesFirst, Writer::Sound, Start::Sound);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn write_vs_writeback_broken_writer_ignores_writeback() {
    use write_side::{Device, Start, Writer};
    write_vs_writeback_under(0, Device::Writes, Writer::IgnoresWriteback, Start::Sound);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn write_vs_writeback_broken_start_ignores_locked() {
    use write_side::{Device, Start, Writer};
    write_vs_writeback_under(0, Device::Writes, Writer::Sound, Start::IgnoresLocked);
}

/// The first version of W3 (`Writer::StalePrior`), caught both ways: a writeback that
/// ends between the writer's load and its CAS leaves the writer believing the clean folio
/// dirty (it sets no Dirty mark: no writeback ever finds the new block), and one that
/// fails in between leaves it believing the dirty folio clean (an order-0 folio is
/// charged twice; a large folio's mask is zeroed, losing the failed block).
#[test]
#[should_panic(expected = "lost update")]
fn write_vs_writeback_broken_stale_prior() {
    use write_side::{Device, Start, Writer};
    write_vs_writeback_under(1, Device::Writes, Writer::StalePrior, Start::Sound);
}

#[test]
#[should_panic(expected = "the dirty budget counts the dirty blocks")]
fn write_vs_writeback_broken_stale_prior_failed_write() {
    use write_side::{Device, Start, Writer};
    write_vs_writeback_under(0, Device::Fails, Writer::StalePrior, Start::Sound);
}

#[test]
#[should_panic(expected = "lost update: block 0")]
fn write_vs_writeback_broken_stale_prior_large_folio_failed_write() {
    use write_side::{Device, Start, Writer};
    write_vs_writeback_under(1, Device::Fails, Writer::StalePrior, Start::Sound);
}

/// Write (copy on write) vs a pinning reader vs a sync (issue 28). A write of `FIRST` (A)
/// returned before the sync began, and a reader pinned the page; then, at once, the reader
/// unpins, a second write of `NEW` (B) runs (W3 finds the page pinned and copies on write,
/// or finds it unpinned and writes in place), and the sync runs (tag, walk, the "still
/// tagged?" loop). When the sync returns Ok, the disk holds A or B, never the page's old
/// bytes; once all are done, the folio in the index holds B, a dirty folio's slot is
/// marked `Dirty`, and the replaced folio is not dirty.
///
/// The reader's lookup is not in the race (the lookup's own races are
/// `lookup_racing_eviction`'s and `freed_and_reused_frame`'s): racing it too makes the
/// model run for minutes, and the writer's own pin moves the count under B1 as well.
///
/// Bounded: loom explores every interleaving with at most `PREEMPTIONS_MAX` preemptions
/// (the whole space takes hours). Set `LOOM_MAX_PREEMPTIONS` to go deeper by hand (4:
/// about 20 s, 5: about 2.5 min, both pass).
fn write_copy_on_write_vs_pinned_read_vs_sync_under(protocol: write_side::pinned::Protocol) {
    use write_side::pinned::Page;
    use write_side::{FIRST, NEW};
    const PREEMPTIONS_MAX: usize = 3;
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = builder.preemption_bound.or(Some(PREEMPTIONS_MAX));
    builder.check(move || {
        let page = Arc::new(Page::cached(protocol));
        // Write A: it returned before the threads start. A reader pins the page.
        page.write(FIRST);
        let pinned = page.find_get();
        let reader = {
            let page = page.clone();
            thread::spawn(move || page.put(pinned))
        };
        let sync = {
            let page = page.clone();
            thread::spawn(move || page.sync())
        };
        page.write(NEW);
        reader.join().unwrap();
        let synced = sync.join().unwrap();
        assert!(
            synced == FIRST || synced == NEW,
            "a sync returned Ok with a write that returned before it began only in the \
             cache: the disk holds {synced}"
        );
        page.check(NEW);
    });
}

#[test]
fn write_copy_on_write_vs_pinned_read_vs_sync() {
    write_copy_on_write_vs_pinned_read_vs_sync_under(write_side::pinned::Protocol::SOUND);
}

#[test]
#[should_panic(expected = "only in the cache")]
fn write_copy_on_write_vs_pinned_read_vs_sync_broken_replacement_drops_towrite() {
    use write_side::pinned::{Protocol, Replacement};
    write_copy_on_write_vs_pinned_read_vs_sync_under(Protocol {
        replacement: Replacement::DropsTowrite,
        ..Protocol::SOUND
    });
}

/// The first B1 (one CAS, which a pin or unpin between its load and its CAS fails: the
/// walk skips the folio) under the first "still tagged?" check (the marks read without
/// the index lock), with a replacement that removes the old entry and inserts the copy,
/// setting both marks again (under the lock, so no walk sees it): the writer's own pin
/// fails the CAS, the skipped folio stays tagged, and the check reads the marks between
/// the removal and the re-insertion. Either fix alone passes (the still-tagged loop walks
/// again, or the walk leaves nothing tagged), as does either with an in-place swap.
#[test]
#[should_panic(expected = "only in the cache")]
fn write_copy_on_write_vs_pinned_read_vs_sync_broken_single_cas_and_lockfree_tag_check() {
    use write_side::pinned::{Protocol, Replacement, StartWriteback, TagCheck};
    write_copy_on_write_vs_pinned_read_vs_sync_under(Protocol {
        replacement: Replacement::RemoveReinsert,
        start: StartWriteback::SingleCas,
        check: TagCheck::LockFree,
    });
}

/// Dirty folio vs reclaim, with a writer: reclaim (isolating or not) races a write into
/// a clean folio. It evicts the folio only while its bytes are on disk, and then the
/// writer missed it (and would read the page again); otherwise nothing is lost.
fn dirty_folio_vs_reclaim_write_under(how: write_side::Reclaim) {
    use write_side::{Folio, Writer, NEW};
    loom::model(move || {
        let folio = Arc::new(Folio::cached(types::Order::ZERO));
        let writing = {
            let folio = folio.clone();
            thread::spawn(move || folio.write(0, 1, NEW, Writer::Sound))
        };
        let evicted = folio.reclaim(how);
        let wrote = writing.join().unwrap();
        if evicted.unwrap_or_else(|lost| panic!("{lost}")) {
            assert!(!wrote, "a write went into an evicted folio");
            folio.check_removed();
        } else {
            folio.check_nothing_lost();
        }
    });
}

/// Dirty folio vs reclaim, with writeback: reclaim races the writeback of a dirty folio
/// (which the device writes or fails). It evicts the folio only once it is clean and on
/// disk: never while DIRTY, nor under WRITEBACK (the device reads the frame, and a
/// failure makes it dirty again).
fn dirty_folio_vs_reclaim_writeback_under(how: write_side::Reclaim, device: write_side::Device) {
    use write_side::{Folio, Start};
    loom::model(move || {
        let folio = Arc::new(Folio::dirty(types::Order::new(1)));
        let writeback = {
            let folio = folio.clone();
            thread::spawn(move || folio.write_back(device, Start::Sound))
        };
        let evicted = folio.reclaim(how);
        writeback.join().unwrap();
        if evicted.unwrap_or_else(|lost| panic!("{lost}")) {
            folio.check_removed();
        } else {
            folio.check_nothing_lost();
        }
    });
}

#[test]
fn dirty_folio_vs_reclaim_write() {
    dirty_folio_vs_reclaim_write_under(write_side::Reclaim::Isolated);
}

#[test]
fn dirty_folio_vs_reclaim_write_unpinned() {
    dirty_folio_vs_reclaim_write_under(write_side::Reclaim::Unpinned);
}

#[test]
fn dirty_folio_vs_reclaim_writeback() {
    use write_side::{Device, Reclaim};
    dirty_folio_vs_reclaim_writeback_under(Reclaim::Isolated, Device::Writes);
}

#[test]
fn dirty_folio_vs_reclaim_failed_writeback() {
    use write_side::{Device, Reclaim};
    dirty_folio_vs_reclaim_writeback_under(Reclaim::Isolated, Device::Fails);
}

#[test]
#[should_panic(expected = "a write is lost")]
fn dirty_folio_vs_reclaim_broken_freeze_ignores_dirty() {
    dirty_folio_vs_reclaim_write_under(write_side::Reclaim::IgnoresDirty);
}

/// Truncation vs writeback: `set_len` drops a dirty folio while its writeback is in
/// flight and completes (written, or failed: dirty again). The removed folio never ends
/// DIRTY, its frame is freed once and never while the device reads it, and the dirty
/// budget ends at 0.
fn truncation_vs_writeback_under(how: write_side::Truncation, device: write_side::Device) {
    use write_side::{Folio, Start};
    loom::model(move || {
        let folio = Arc::new(Folio::dirty(types::Order::new(1)));
        let writeback = {
            let folio = folio.clone();
            thread::spawn(move || folio.write_back(device, Start::Sound))
        };
        folio.truncate(how);
        writeback.join().unwrap();
        folio.check_removed();
    });
}

#[test]
fn truncation_vs_writeback() {
    use write_side::{Device, Truncation};
    truncation_vs_writeback_under(Truncation::Sound, Device::Writes);
}

#[test]
fn truncation_vs_writeback_failed() {
    use write_side::{Device, Truncation};
    truncation_vs_writeback_under(Truncation::Sound, Device::Fails);
}

#[test]
#[should_panic(expected = "a frame was freed while dirty, under writeback")]
fn truncation_vs_writeback_broken_no_wait() {
    use write_side::{Device, Truncation};
    truncation_vs_writeback_under(Truncation::NoWait, Device::Fails);
}

/// The futures' wait table (`src/waker.rs`, compiled here against loom's atomics and
/// mutex): a future parking on a folio's I/O (P1-P3) against the completion that clears
/// LOCKED and wakes (C1-C4), and the memory waiters' hand-off of `wait.rs`
/// (`park_for_memory` against `future_unpinning`, transcribed: the condition is "a
/// future holds a folio between polls", the wake is `wake_one`, or `wake_all` for the
/// last holder).
mod async_wait {
    use std::task::{Wake, Waker};

    use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use loom::sync::Arc;

    use crate::waker::{Park, WakerTable};

    const KEY: usize = 64;

    struct Flag(AtomicBool);

    /// A waker that sets the flag (`Waker::from` takes std's `Arc`; the flag is loom's).
    struct SetFlag(Arc<Flag>);

    impl Wake for SetFlag {
        fn wake(self: std::sync::Arc<Self>) {
            self.0 .0.store(true, Ordering::SeqCst);
        }
    }

    fn flag() -> (Arc<Flag>, Waker) {
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(std::sync::Arc::new(SetFlag(flag.clone())));
        (flag, waker)
    }

    /// Which side a completion takes first: the protocol's (clear, then wake) or the
    /// broken one (wake, then clear).
    #[derive(Clone, Copy, PartialEq)]
    enum Order {
        ClearThenWake,
        WakeThenClear,
    }

    fn park_vs_completion(order: Order) {
        loom::model(move || {
            let table = Arc::new(WakerTable::new());
            let locked = Arc::new(AtomicU64::new(1));
            let (woken, waker) = flag();
            let completion = {
                let (table, locked) = (table.clone(), locked.clone());
                loom::thread::spawn(move || {
                    if order == Order::WakeThenClear {
                        table.wake_all(KEY);
                    }
                    locked.fetch_and(0, Ordering::Release); // C1
                    if order == Order::ClearThenWake {
                        table.wake_all(KEY);
                    }
                })
            };
            let park = table.park(KEY, None, &waker, || locked.load(Ordering::Acquire) == 1);
            completion.join().unwrap();
            match park {
                // Saw the clear: the future polls on, nothing of it stays.
                Park::Ready => {}
                // Parked: the completion must have woken it (or the wake is lost).
                Park::Parked(_) => assert!(woken.0.load(Ordering::SeqCst), "a lost wake-up"),
            }
            assert_eq!(table.parked(), 0, "nothing left in the table");
        });
    }

    #[test]
    fn async_park_vs_completion() {
        park_vs_completion(Order::ClearThenWake);
    }

    #[test]
    #[should_panic(expected = "a lost wake-up")]
    fn async_park_vs_completion_broken_wake_before_clear() {
        park_vs_completion(Order::WakeThenClear);
    }

    /// Two futures hold folios between polls; a third waits for memory. Each holder
    /// unpins (`future_unpinning`: decrement, then `wake_one`, or `wake_all` when it was
    /// the last). The waiter either saw no holder (`Ready`: polls again itself) or is
    /// woken: never parked with nobody left to wake it.
    /// How a holder leaves: the protocol's order (count itself out, then wake) or the
    /// broken one (wake, then count itself out).
    #[derive(Clone, Copy, PartialEq)]
    enum Leave {
        CountThenWake,
        WakeThenCount,
    }

    fn memory_waiter_vs_holders(leave: Leave) {
        loom::model(move || {
            let table = Arc::new(WakerTable::new());
            let holding = Arc::new(AtomicU64::new(2));
            let (woken, waker) = flag();
            let holders: Vec<_> = (0..2)
                .map(|_| {
                    let (table, holding) = (table.clone(), holding.clone());
                    loom::thread::spawn(move || {
                        if leave == Leave::WakeThenCount {
                            table.wake_one(KEY);
                            holding.fetch_sub(1, Ordering::Relaxed);
                            return;
                        }
                        if holding.fetch_sub(1, Ordering::Relaxed) == 1 {
                            table.wake_all(KEY);
                        } else {
                            table.wake_one(KEY);
                        }
                    })
                })
                .collect();
            let park = table.park(KEY, None, &waker, || holding.load(Ordering::Relaxed) > 0);
            for h in holders {
                h.join().unwrap();
            }
            if let Park::Parked(_) = park {
                assert!(
                    woken.0.load(Ordering::SeqCst),
                    "a memory waiter nobody wakes"
                );
            }
            assert_eq!(table.parked(), 0);
        });
    }

    #[test]
    fn memory_waiter_vs_last_holder() {
        memory_waiter_vs_holders(Leave::CountThenWake);
    }

    #[test]
    #[should_panic(expected = "a memory waiter nobody wakes")]
    fn memory_waiter_vs_last_holder_broken_wake_before_count() {
        memory_waiter_vs_holders(Leave::WakeThenCount);
    }
}

/// `MappingTable::unlink` against the last handle's close (`MappingTable::close`), transcribed
/// from `src/mapping/table.rs` (which names std's atomics, not this file's): the unlinker sets
/// `unlinked`, fences, and forgets the pages if no handle is open; the closer drops its
/// handle, fences, and forgets them if `unlinked` is set. Whatever the interleaving, one
/// of the two forgets the deleted file's pages (both may: `forget_deleted` is idempotent
/// under the writer lock). Without the fences (the broken variant), both can miss each
/// other and the pages outlive the file and its last handle.
mod unlink_vs_close {
    use loom::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
    use loom::sync::Arc;

    #[derive(Clone, Copy, PartialEq)]
    enum Fences {
        SeqCst,
        None,
    }

    struct File {
        handles: AtomicU64,
        unlinked: AtomicBool,
        forgotten: AtomicU64,
    }

    fn model(fences: Fences) {
        loom::model(move || {
            let f = Arc::new(File {
                handles: AtomicU64::new(1),
                unlinked: AtomicBool::new(false),
                forgotten: AtomicU64::new(0),
            });
            let (store, load) = match fences {
                Fences::SeqCst => (Ordering::SeqCst, Ordering::SeqCst),
                Fences::None => (Ordering::Release, Ordering::Acquire),
            };
            let unlinker = {
                let f = f.clone();
                loom::thread::spawn(move || {
                    f.unlinked.store(true, store);
                    if fences == Fences::SeqCst {
                        fence(Ordering::SeqCst);
                    }
                    if f.handles.load(load) == 0 {
                        f.forgotten.fetch_add(1, Ordering::Relaxed);
                    }
                })
            };
            // The last handle closes.
            if f.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
                if fences == Fences::SeqCst {
                    fence(Ordering::SeqCst);
                }
                if f.unlinked.load(load) {
                    f.forgotten.fetch_add(1, Ordering::Relaxed);
                }
            }
            unlinker.join().unwrap();
            assert!(
                f.forgotten.load(Ordering::Relaxed) >= 1,
                "the deleted file's pages outlived it"
            );
        });
    }

    #[test]
    fn unlink_vs_last_close() {
        model(Fences::SeqCst);
    }

    #[test]
    #[should_panic(expected = "outlived")]
    fn unlink_vs_last_close_broken_no_fences() {
        model(Fences::None);
    }
}
