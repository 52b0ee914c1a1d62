//! Loom models of folio's lock-free protocols, compiled from the very source files the
//! library uses (`src/refcount.rs`, `src/version.rs`) against loom's atomics: this file
//! supplies the `primitive` module those files name their atomics through.
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
//!   `src/mapping.rs`, whose steps O, C and R it names) against reclaim evicting a closed
//!   file's last folio, and against a handle opened, used and closed between a removal's
//!   walk and its removal: an open never gets a mapping that left the table, no folio is
//!   ever left in a mapping that left it, and no unused mapping stays in it. Each is also
//!   run on a deliberately broken protocol (`mapping_lifetime_broken_*`, which must
//!   fail): the handles raised after the look-up's lock is dropped, and a removal that
//!   compares the handle count instead of the whole word.
//!
//! Run with `cargo test --release -p folio --test loom_models` (part of the workspace's
//! tests; each model is small enough to explore exhaustively in seconds).

mod primitive {
    pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

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

#[allow(dead_code)]
#[path = "../src/readahead.rs"]
mod readahead;

#[allow(dead_code)]
#[path = "../src/errseq.rs"]
mod errseq;

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

    /// `Mapping::find_get`: Some(()) with a reference held, or None on a miss.
    fn find_get(&self) -> Option<()> {
        loop {
            if self.slot.load(Ordering::Acquire) != FRAME {
                return None;
            }
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
    loom::model(|| {
        let w = World::new();
        let reader = {
            let w = w.clone();
            thread::spawn(move || {
                let held = w.find_get().is_some();
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

#[test]
fn optimistic_read() {
    loom::model(|| {
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
        version.retire();
        identity.store(2, Ordering::Relaxed);
        data[0].store(22, Ordering::Relaxed);
        data[1].store(22, Ordering::Relaxed);
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

#[test]
fn isolated_eviction_vs_truncation_vs_lookup() {
    loom::model(|| {
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
        if w.find_get().is_some() {
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
}

/// `MappingTable`'s lifetime protocol (`src/mapping.rs`), transcribed for one inode: the
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
