//! Fuzz bodies for the parts that are private to the crate: the index against a
//! `BTreeMap` model (`index`), the readahead policy against its invariants
//! (`readahead_policy`), and the adoption's reading of a segment's side table
//! (`adoption_scan`). The targets in `fuzz/fuzz_targets/` call them; the unit tests
//! below replay every input saved under `fuzz/{regressions,seeds,known}/<target>/`.
//!
//! Compiled only with `--cfg fuzzing` (cargo-fuzz sets it) and for the crate's unit tests:
//! not part of the API. An input is a stream of choices (`Input`): every byte string is a
//! valid program, so the fuzzer's mutations explore operations, not parse errors. A
//! violated invariant panics with what was expected.

use std::collections::{BTreeMap, BTreeSet};

use crate::folio_meta::FolioMeta;
use crate::folio_meta::MappingId;
use crate::index::{Entry, Index, Leave, NewFolio, RootHint};
use crate::readahead::{
    self, Decision, MissRequest, RaCell, RaState, START_PAGES_LIMIT, WINDOW_PAGES_LIMIT,
};
use crate::refcount::{
    DEAD, DETACHED, DIRTY, ERROR, FREQ_SHIFT, LOCKED, PREFETCHED, READAHEAD, UPTODATE, WORKINGSET,
    WRITEBACK,
};
use crate::segment::layout::SLOT_COUNT;
use crate::segment::scan::{scan_entries, Found};
use crate::types::{FrameId, Order, PageIndex, ORDER_MAX, PAGE_BYTES};

/// The fuzzer's bytes read as choices; zeros once they run out.
struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.data.len());
        out[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        out
    }

    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        if n <= 256 {
            u64::from(self.u8()) % n
        } else {
            u64::from(u32::from_le_bytes(self.take())) % n
        }
    }
}

/// Operations per input of the index target.
const INDEX_OPS_MAX: usize = 64;
/// Pages the index model may hold (so that one input stays fast).
const MODEL_PAGES_MAX: usize = 1 << 15;

/// What the model holds for one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Folio { frame: u32, head: u64, order: u8 },
    Shadow(u64),
}

/// The index target: random runs of folios inserted (over shadows, in conflict with
/// folios), folios removed leaving a shadow or nothing, shadows removed as the shadow log
/// removes them, all in four regions of the page space (low pages, 2^18, 2^36 and just
/// under the 2^60 limit). After each operation, the pages it touched are looked up and
/// compared with a page-by-page `BTreeMap` model, a random range is visited, and the
/// tree's structural invariants are checked; at the end every page of the model and its
/// neighbours is compared, everything is removed and the tree must prune to its root.
///
/// Checked against the model: which folios of a run go in (exactly those whose pages
/// hold no folio), the shadows the run reports (exactly the values the model holds under
/// the inserted folios, each at a page where the model held it, at least one within
/// every folio that replaced one), `remove_folio` (true exactly for the frame covering the
/// page), `lookup` and `get` (the entry, and a folio's head aligned to its order),
/// `visit` (every folio whose head is in the range, in order, and shadows the model
/// holds), the range walks (`next_present`, `next_miss`, `prev_miss`, `gaps`: exactly the
/// pages the model's folios cover, or do not), and the folio count of `check_invariants`.
pub fn index(data: &[u8]) {
    let trace = tracing();
    let mut input = Input::new(data);
    let index = Index::default();
    // A hit path's root hint that is never refreshed after its first fill: it goes stale
    // as the tree grows, shrinks and reuses nodes (`check_page`).
    let stale = RootHint::new(&index);
    let mut model: BTreeMap<u64, Slot> = BTreeMap::new();
    let mut next_frame = 1u32;
    let mut next_shadow = 1u64;
    // Removed folios that left a shadow: (head, order, value), for `remove_shadows`.
    let mut shadowed: Vec<(u64, u8, u64)> = Vec::new();
    const REGIONS: [u64; 4] = [0, 1 << 18, 1 << 36, (1 << 60) - (1 << 14)];
    for op in 0..INDEX_OPS_MAX {
        if input.is_empty() {
            break;
        }
        let region = REGIONS[input.below(4) as usize];
        let page = region + input.below(1 << 14);
        let mut touched: Vec<u64> = vec![page];
        match input.below(8) {
            0..=3 => {
                // A run: consecutive folios, each aligned to its own size.
                let count = 1 + input.below(8) as usize;
                let first_order = input.below(u64::from(ORDER_MAX) + 1) as u8;
                let mut head = PageIndex(page).align_down(Order::new(first_order)).0;
                let mut run = Vec::with_capacity(count);
                for i in 0..count {
                    let aligned = head.trailing_zeros().min(u32::from(ORDER_MAX)) as u8;
                    let order = if i == 0 {
                        first_order
                    } else {
                        input.below(u64::from(aligned) + 1) as u8
                    };
                    if head + (1 << order) > 1 << 60 {
                        break;
                    }
                    run.push(NewFolio {
                        frame: FrameId(next_frame),
                        order: Order::new(order),
                        head: PageIndex(head),
                    });
                    next_frame += 1;
                    head += 1 << order;
                }
                let pages: u64 = run.iter().map(|f| f.order.pages()).sum();
                if run.is_empty() || model.len() + pages as usize > MODEL_PAGES_MAX {
                    continue;
                }
                let hint = match input.below(3) {
                    0 => 0,
                    1 => pages,
                    _ => input.below(4096),
                };
                if trace {
                    let folios: Vec<(u64, u8)> =
                        run.iter().map(|f| (f.head.0, f.order.get())).collect();
                    eprintln!("op {op}: insert_run (head, order) {folios:?}, hint {hint}");
                }
                let outcome = index.lock_for_insert(run[0].head, hint).insert_run(&run);
                assert_eq!(
                    outcome.inserted.len(),
                    run.len(),
                    "op {op}: one answer per folio"
                );
                // Page -> the shadow value an inserted folio replaced there.
                let mut replaced: BTreeMap<u64, u64> = BTreeMap::new();
                for (folio, &inserted) in run.iter().zip(&outcome.inserted) {
                    let span = folio.head.0..folio.head.0 + folio.order.pages();
                    let free = span
                        .clone()
                        .all(|p| !matches!(model.get(&p), Some(Slot::Folio { .. })));
                    assert_eq!(
                        inserted, free,
                        "op {op}: folio of order {} at {} inserted: {inserted}, its pages free: {free}",
                        folio.order.get(),
                        folio.head.0
                    );
                    touched.extend([span.start, span.end - 1, span.end]);
                    if !inserted {
                        continue;
                    }
                    // A folio inserted under a larger shadow takes only its own pages'
                    // shadow: the others keep it (the split copies it, finding 5).
                    for p in span.clone() {
                        if let Some(Slot::Shadow(value)) = model.insert(
                            p,
                            Slot::Folio {
                                frame: folio.frame.0,
                                head: folio.head.0,
                                order: folio.order.get(),
                            },
                        ) {
                            replaced.insert(p, value);
                        }
                    }
                    // `filemap` gives a folio the first shadow reported within its pages.
                    let reported_within = outcome.shadows.iter().any(|(p, _)| span.contains(&p.0));
                    assert_eq!(
                        reported_within,
                        replaced.range(span.clone()).next().is_some(),
                        "op {op}: a shadow reported within the folio at {}",
                        folio.head.0
                    );
                }
                for &(page, value) in &outcome.shadows {
                    assert_eq!(
                        replaced.get(&page.0),
                        Some(&value),
                        "op {op}: shadow {value} reported at {}",
                        page.0
                    );
                }
                let reported: BTreeSet<u64> = outcome.shadows.iter().map(|&(_, v)| v).collect();
                let expected: BTreeSet<u64> = replaced.values().copied().collect();
                assert_eq!(reported, expected, "op {op}: shadows the run replaced");
                for window in outcome.shadows.windows(2) {
                    assert!(
                        window[0].0 < window[1].0,
                        "op {op}: shadows out of index order"
                    );
                }
            }
            4 | 5 => {
                // Remove the folio covering `page` (or try a wrong frame).
                let leave = if input.below(2) == 0 {
                    Leave::Empty
                } else {
                    let value = match input.below(4) {
                        0 => (1 << 62) - 1 - next_shadow,
                        _ => next_shadow,
                    };
                    next_shadow += 1;
                    Leave::Shadow(value)
                };
                let wrong = input.below(8) == 0;
                let found = model.get(&page).copied();
                let frame = match found {
                    Some(Slot::Folio { frame, .. }) if !wrong => frame,
                    Some(Slot::Folio { frame, .. }) => frame + 1,
                    _ => next_frame + 1000,
                };
                if trace {
                    eprintln!("op {op}: remove_folio({page}, frame {frame}, {leave:?})");
                }
                let removed = index
                    .lock()
                    .remove_folio(PageIndex(page), FrameId(frame), leave);
                let expected = matches!(found, Some(Slot::Folio { frame: f, .. }) if f == frame);
                assert_eq!(
                    removed, expected,
                    "op {op}: remove_folio({page}, frame {frame})"
                );
                if let (true, Some(Slot::Folio { head, order, .. })) = (removed, found) {
                    for p in head..head + (1 << order) {
                        match leave {
                            Leave::Empty => model.remove(&p),
                            Leave::Shadow(value) => model.insert(p, Slot::Shadow(value)),
                        };
                    }
                    if let Leave::Shadow(value) = leave {
                        shadowed.push((head, order, value));
                    }
                    touched.extend([head, head + (1 << order) - 1, head + (1 << order)]);
                }
            }
            6 => {
                // The shadow log expires the shadow of a folio removed earlier.
                if shadowed.is_empty() {
                    continue;
                }
                let i = input.below(shadowed.len() as u64) as usize;
                let (head, order, value) = shadowed.swap_remove(i);
                if trace {
                    eprintln!("op {op}: remove_shadows({head}, order {order}, {value})");
                }
                index
                    .lock()
                    .remove_shadows(PageIndex(head), Order::new(order), value);
                for p in head..head + (1 << order) {
                    if model.get(&p) == Some(&Slot::Shadow(value)) {
                        model.remove(&p);
                    }
                }
                touched.extend([head, head + (1 << order) - 1]);
            }
            _ => {
                // Visit a range and compare with the model.
                let end = page + 1 + input.below(4096);
                if trace {
                    eprintln!("op {op}: visit({page}, {end})");
                }
                check_visit(&index, &model, page, end, op);
                check_walks(&index, &model, page, end, op);
            }
        }
        for &p in &touched {
            check_page(&index, &stale, &model, p, op);
        }
        if trace {
            eprintln!("op {op}: checking the tree");
        }
        let (folios, _) = index.lock().check_invariants();
        let model_folios = model
            .iter()
            .filter(|(&p, slot)| matches!(slot, Slot::Folio { head, .. } if *head == p))
            .count();
        assert_eq!(folios, model_folios, "op {op}: folios in the tree");
    }
    // Every page of the model, and its neighbours.
    let pages: Vec<u64> = model.keys().copied().collect();
    for p in pages {
        check_page(&index, &stale, &model, p, usize::MAX);
        check_page(&index, &stale, &model, p + 1, usize::MAX);
        check_page(&index, &stale, &model, p.saturating_sub(1), usize::MAX);
    }
    // Empty it: the tree prunes back to at most its root.
    if trace {
        eprintln!("end: removing every folio and shadow");
    }
    let mut w = index.lock();
    for (&p, slot) in &model {
        if let Slot::Folio { frame, head, .. } = *slot {
            if head == p {
                assert!(w.remove_folio(PageIndex(p), FrameId(frame), Leave::Empty));
            }
        }
    }
    for (head, order, value) in shadowed {
        w.remove_shadows(PageIndex(head), Order::new(order), value);
    }
    // Shadows of folios inserted over and then removed again can remain only where the
    // model still has them: none are left once every removal's shadows are removed.
    let (folios, shadows) = w.check_invariants();
    assert_eq!((folios, shadows), (0, 0), "an emptied tree");
    drop(w);
    assert!(
        index.node_count() <= 1,
        "an emptied tree keeps only its root: {}",
        index.node_count()
    );
}

/// Whether to print each operation (`FOLIO_FUZZ_TRACE=1`), to read a crashing input.
fn tracing() -> bool {
    std::env::var_os("FOLIO_FUZZ_TRACE").is_some()
}

/// `lookup` and `get` of `page` agree with the model, and so does `lookup_candidate` with
/// a fresh hint (a shadow is no candidate); with the `stale` hint, the candidate is the
/// model's folio, or none, or a folio whose identity no folio in the index has (the hit
/// path's validation turns it away).
fn check_page(index: &Index, stale: &RootHint, model: &BTreeMap<u64, Slot>, page: u64, op: usize) {
    if page >= 1 << 60 {
        return;
    }
    let want = match model.get(&page) {
        None => Entry::Empty,
        Some(&Slot::Shadow(value)) => Entry::Shadow(value),
        Some(&Slot::Folio { frame, head, order }) => Entry::Folio {
            frame: FrameId(frame),
            order: Order::new(order),
            head: PageIndex(head),
        },
    };
    assert_eq!(
        index.lookup(PageIndex(page)),
        want,
        "op {op}: lookup({page})"
    );
    assert_eq!(
        index.lock().get(PageIndex(page)),
        want,
        "op {op}: get({page})"
    );
    let fresh = RootHint::new(index);
    index.refresh_hint(&fresh);
    let want_candidate = match want {
        Entry::Shadow(_) => Entry::Empty,
        other => other,
    };
    assert_eq!(
        index.lookup_candidate(&fresh, PageIndex(page)),
        want_candidate,
        "op {op}: lookup_candidate({page}), a fresh hint"
    );
    let got = index.lookup_candidate(stale, PageIndex(page));
    if let Entry::Folio { frame, order, head } = got {
        let passes_validation = model.get(&head.0)
            == Some(&Slot::Folio {
                frame: frame.0,
                head: head.0,
                order: order.get(),
            });
        assert!(
            got == want || !passes_validation,
            "op {op}: lookup_candidate({page}), a stale hint: {got:?}, the model {want:?}"
        );
    }
}

/// `visit(start, end)` reports every folio whose head is in the range, in order, each
/// once, and only shadows the model holds at the reported page.
fn check_visit(index: &Index, model: &BTreeMap<u64, Slot>, start: u64, end: u64, op: usize) {
    let mut seen: Vec<(u64, Entry)> = Vec::new();
    index.visit(PageIndex(start), PageIndex(end), &mut |head, entry| {
        seen.push((head.0, entry))
    });
    for pair in seen.windows(2) {
        assert!(
            pair[0].0 < pair[1].0,
            "op {op}: visit out of order: {pair:?}"
        );
    }
    let mut folios = Vec::new();
    for &(head, entry) in &seen {
        assert!(
            head >= start && head < end,
            "op {op}: visit({start}, {end}) reported {head}"
        );
        match entry {
            Entry::Folio {
                frame,
                order,
                head: h,
            } => {
                assert_eq!(h.0, head, "op {op}: visit's head");
                folios.push((head, frame.0, order.get()));
            }
            Entry::Shadow(value) => assert_eq!(
                model.get(&head),
                Some(&Slot::Shadow(value)),
                "op {op}: visit reported a shadow at {head}"
            ),
            Entry::Empty => panic!("op {op}: visit reported an empty slot at {head}"),
        }
    }
    let want: Vec<(u64, u32, u8)> = model
        .range(start..end)
        .filter_map(|(&p, slot)| match *slot {
            Slot::Folio { frame, head, order } if head == p => Some((p, frame, order)),
            _ => None,
        })
        .collect();
    assert_eq!(folios, want, "op {op}: folios visited in {start}..{end}");
}

/// The range walks over `[start, end)` answer what the model's pages do: a page is
/// present exactly when the model holds a folio for it.
fn check_walks(index: &Index, model: &BTreeMap<u64, Slot>, start: u64, end: u64, op: usize) {
    let present = |page: &u64| matches!(model.get(page), Some(Slot::Folio { .. }));
    let first_present = (start..end).find(present).map(PageIndex);
    let first_miss = (start..end).find(|p| !present(p)).map(PageIndex);
    let last_miss = (start..end).rev().find(|p| !present(p)).map(PageIndex);
    let (s, e) = (PageIndex(start), PageIndex(end));
    assert_eq!(
        index.next_present(s, e),
        first_present,
        "op {op}: next_present({start}, {end})"
    );
    assert_eq!(
        index.next_miss(s, e),
        first_miss,
        "op {op}: next_miss({start}, {end})"
    );
    assert_eq!(
        index.prev_miss(e, s),
        last_miss,
        "op {op}: prev_miss({end}, {start})"
    );
    let mut gaps: Vec<(PageIndex, PageIndex)> = Vec::new();
    for p in (start..end).filter(|p| !present(p)) {
        match gaps.last_mut() {
            Some(gap) if gap.1 == PageIndex(p) => gap.1 = PageIndex(p + 1),
            _ => gaps.push((PageIndex(p), PageIndex(p + 1))),
        }
    }
    assert_eq!(index.gaps(s, e), gaps, "op {op}: gaps({start}, {end})");
}

/// Operations per input of the readahead target.
const READAHEAD_OPS_MAX: usize = 256;

/// The readahead target: the pure policy (`decide_on_miss`, `decide_on_marker`,
/// `initial_size`, `ramp`, `folio_order_cap`) on states, requests and maxima the input
/// picks (page indexes near 0 and near the `START_PAGES_LIMIT` included), and the state word
/// (`RaCell`) that installs its decisions.
///
/// Invariants: with a maximum of 0, no window; every window is possible for the maximum
/// it was decided under (`RaState::is_possible`: size within the maximum and the window
/// limit, async part within the window, start below `START_PAGES_LIMIT`) and is what the cell then
/// holds; a miss opens a window only for a sequential read (page 0, the page at or after
/// the previous one, or a page after a cached run longer than the request) outside the
/// current window, starting at the missed page, with
/// its marker on the first page not asked for (or on the start when the window is no
/// larger than the request); a marker hit at the window's marker or end starts the next
/// window at its end, all async, otherwise at the first missing page; the next window
/// never starts before the page that triggered it; `ramp` and `initial_size` stay within
/// the maximum; a window of `n` pages opened on a miss reads folios of at most `n / 4`
/// pages (one started at a marker, folios of its order, which `is_possible` bounds by `n`).
pub fn readahead_policy(data: &[u8]) {
    let mut input = Input::new(data);
    let cell = RaCell::new(u32::from(input.u16()));
    for op in 0..READAHEAD_OPS_MAX {
        if input.is_empty() {
            break;
        }
        let max = cell.max_pages();
        assert!(max <= WINDOW_PAGES_LIMIT, "op {op}: max {max}");
        let state = cell.load();
        assert!(
            state.is_possible(WINDOW_PAGES_LIMIT),
            "op {op}: the cell holds an impossible window {state:?}"
        );
        match input.below(8) {
            0..=2 => {
                let index = page_near(&mut input, state);
                let prev_index = match input.below(4) {
                    0 => None,
                    1 => Some(PageIndex(index.saturating_sub(1))),
                    2 => Some(PageIndex(index)),
                    _ => Some(PageIndex(page_near(&mut input, state))),
                };
                let pages = 1 + input.below(u64::from(WINDOW_PAGES_LIMIT) * 2);
                // `File` counts cached pages before the miss until there are more than
                // the pages it asks for; none before page 0.
                let cached_before = input.below(pages + 2).min(index);
                let req = MissRequest {
                    index: PageIndex(index),
                    // `File` asks for at least the missed page.
                    pages,
                    prev_index,
                    cached_before,
                };
                let decision = readahead::decide_on_miss(state, req, max);
                check_miss(state, req, max, decision, op);
                install(&cell, state, decision, op);
            }
            3..=5 => {
                let index = page_near(&mut input, state);
                // The caller's promise: the first page not in the index, at most `max`
                // pages on (None: all present).
                let next_miss = match input.below(4) {
                    0 => None,
                    _ => Some(PageIndex(index + input.below(u64::from(max) + 1))),
                };
                let decision = readahead::decide_on_marker(state, PageIndex(index), next_miss, max);
                check_marker(state, index, next_miss, max, decision, op);
                install(&cell, state, decision, op);
            }
            6 => match input.below(3) {
                0 => cell.set_max_pages(u32::from(input.u16())),
                1 => cell.reset(),
                _ => {
                    let prev = input.u64() >> 1;
                    cell.set_prev_index(PageIndex(prev));
                    assert_eq!(
                        cell.prev_index(),
                        Some(PageIndex(prev)),
                        "op {op}: prev_index"
                    );
                }
            },
            _ => {
                // At most a file's worth of pages: 2^52 (64-bit byte offsets).
                let pages = input.u64() >> (12 + input.below(52));
                let max = u32::from(input.u16()) % (WINDOW_PAGES_LIMIT + 1);
                let size = readahead::initial_size(pages, max);
                assert!(
                    size <= max,
                    "op {op}: initial_size({pages}, {max}) = {size}"
                );
                let cur = u32::from(input.u16()) % (WINDOW_PAGES_LIMIT + 1);
                let next = readahead::ramp(cur, max);
                assert!(next <= max.max(1), "op {op}: ramp({cur}, {max}) = {next}");
                assert!(
                    next >= cur.min(max).max(1),
                    "op {op}: ramp({cur}, {max}) = {next} shrinks the window"
                );
                let cap = readahead::folio_order_cap(cur);
                assert!(
                    cap <= ORDER_MAX && (cap == 0 || 4u32 << cap <= cur),
                    "op {op}: folio_order_cap({cur}) = {cap}"
                );
            }
        }
    }
}

/// A page index for a request: near the current window, near 0, or near the limit.
fn page_near(input: &mut Input, state: RaState) -> u64 {
    match input.below(4) {
        0 => input.below(1 << 12),
        1 => {
            let window = u64::from(WINDOW_PAGES_LIMIT);
            START_PAGES_LIMIT - window + input.below(2 * window)
        }
        // Anywhere a file's page can be: below 2^52.
        2 => input.u64() >> (12 + input.below(52)),
        _ => {
            let around = [state.start, state.marker(), state.end()][input.below(3) as usize];
            (around + input.below(8)).saturating_sub(input.below(8))
        }
    }
}

fn check_miss(state: RaState, req: MissRequest, max: u32, decision: Decision, op: usize) {
    let Decision::Window(w) = decision else {
        return;
    };
    let index = req.index.0;
    assert!(max > 0, "op {op}: a window with readahead off: {w:?}");
    assert!(
        w.is_possible(max),
        "op {op}: miss {req:?} on {state:?}: impossible window {w:?} (max {max})"
    );
    assert_eq!(
        w.start, index,
        "op {op}: the window starts at the missed page"
    );
    let sequential = index == 0
        || req
            .prev_index
            .is_some_and(|p| index == p.0 || index == p.0 + 1)
        || req.cached_before > req.pages;
    assert!(sequential, "op {op}: a window for a random miss {req:?}");
    let inside = state.size != 0 && index >= state.start && index < state.end();
    assert!(!inside, "op {op}: a new window for a miss inside {state:?}");
    let asked = req.pages.min(u64::from(w.size));
    let marker = if u64::from(w.size) > asked {
        w.start + asked
    } else {
        w.start
    };
    assert_eq!(
        w.marker(),
        marker,
        "op {op}: the marker of {w:?} for {req:?}"
    );
}

fn check_marker(
    state: RaState,
    index: u64,
    next_miss: Option<PageIndex>,
    max: u32,
    decision: Decision,
    op: usize,
) {
    let Decision::Window(w) = decision else {
        return;
    };
    assert!(max > 0, "op {op}: a window with readahead off: {w:?}");
    assert!(
        w.is_possible(max),
        "op {op}: marker hit at {index} on {state:?} (next miss {next_miss:?}): impossible window {w:?} (max {max})"
    );
    assert_eq!(
        w.async_size, w.size,
        "op {op}: a marker window is all async: {w:?}"
    );
    assert!(
        w.start >= index,
        "op {op}: the window {w:?} starts before the reader at {index}"
    );
    let own = state.size != 0 && (index == state.marker() || index == state.end());
    if own {
        assert_eq!(
            w.start,
            state.end(),
            "op {op}: the next window follows {state:?}"
        );
    } else {
        assert_eq!(
            Some(PageIndex(w.start)),
            next_miss,
            "op {op}: the window restarts at the hole"
        );
    }
}

/// Installs `decision` through the cell as `File` does, and checks what the cell holds.
fn install(cell: &RaCell, before: RaState, decision: Decision, op: usize) {
    let installed = cell.update(|_, _| decision);
    match decision {
        Decision::None => {
            assert_eq!(installed, None, "op {op}");
            assert_eq!(cell.load(), before, "op {op}: no decision, no change");
        }
        Decision::Window(w) => {
            assert_eq!(
                installed,
                Some(w),
                "op {op}: one thread's update is installed"
            );
            assert_eq!(cell.load(), w, "op {op}: the cell holds the window");
        }
    }
}

/// Frames of the side table an input of the adoption target builds, at most.
const SCAN_FRAMES_MAX: u64 = 1024;
/// Ranges an input of the adoption target scans, at most.
const SCAN_RANGES_MAX: u64 = 6;

/// The adoption target: a segment's side table read back (`segment::scan::scan_entries`) is
/// untrusted input. An input builds a table of up to `SCAN_FRAMES_MAX` entries and the
/// frame ranges to scan, in one of two modes (the first byte's low bit):
/// - any table: each entry free, never written (zeros), a plausible head (UPTODATE with
///   random flags among those that disprove it, a small mapping id or any, an order up to
///   15, a page index aligned or not, its tail frames most often free) or raw words; any
///   ranges, overlapping, reversed, past the table. Every folio found must be inside the
///   table, its frame and page index aligned to its order, its order at most `ORDER_MAX`,
///   its mapping id under `SLOT_COUNT`, its head entry UPTODATE and none of DEAD, LOCKED,
///   ERROR or DETACHED, its tails DEAD, its head frame inside a range scanned; no two
///   found folios share a frame, and no two of one mapping share a page.
/// - a well-formed table: free frames, zeros and proven folios (aligned, tails free,
///   pages of a mapping never claimed twice), scanned in contiguous ranges that cover the
///   table cut anywhere: the scan must find exactly those folios and count no page
///   unproven.
pub fn adoption_scan(data: &[u8]) {
    let mut input = Input::new(data);
    let well_formed = input.u8() & 1 == 1;
    let frames = 1 + input.below(SCAN_FRAMES_MAX) as u32;
    if well_formed {
        adoption_scan_well_formed(&mut input, frames);
        return;
    }
    let mut entries: Vec<FolioMeta> = Vec::with_capacity(frames as usize);
    while (entries.len() as u32) < frames {
        let frame = entries.len() as u64;
        match input.u8() % 4 {
            0 => entries.push(FolioMeta::from_raw(DEAD, 0, 0)),
            1 => entries.push(FolioMeta::from_raw(0, 0, 0)),
            2 => {
                let flags = input.u8();
                let mut state = UPTODATE | (u64::from(input.u8() & 3) << FREQ_SHIFT);
                for (bit, flag) in [DEAD, LOCKED, ERROR, DETACHED].into_iter().enumerate() {
                    // Each in one head of 8 or so.
                    if flags >> (2 * bit) & 3 == 0 && input.u8() < 128 {
                        state |= flag;
                    }
                }
                for flag in [DIRTY, WRITEBACK, READAHEAD, WORKINGSET, PREFETCHED] {
                    if input.u8() < 64 {
                        state |= flag;
                    }
                }
                state |= u64::from(input.u8() & 3); // a few pins
                let owner = if input.u8() < 240 {
                    input.below(4) as u32
                } else {
                    u32::from_le_bytes(input.take())
                };
                let order = if input.u8() < 240 {
                    input.below(u64::from(ORDER_MAX) + 1)
                } else {
                    input.below(16)
                };
                let pages = 1u64 << order;
                let head = match input.u8() % 4 {
                    0 => frame & !(pages - 1),
                    1 => input.below(64) * pages,
                    2 => u64::from(u32::from_le_bytes(input.take())),
                    _ => input.u64() & ((1 << 52) - 1),
                };
                let place = head | (order << 52) | (u64::from(input.u8() & 1) << 56);
                entries.push(FolioMeta::from_raw(state, owner, place));
                if input.u8() < 200 {
                    for _ in 1..pages {
                        if entries.len() as u32 >= frames {
                            break;
                        }
                        entries.push(FolioMeta::from_raw(DEAD, 0, input.u8().into()));
                    }
                }
            }
            _ => {
                let state = input.u64();
                let owner = u32::from_le_bytes(input.take());
                let place = input.u64();
                entries.push(FolioMeta::from_raw(state, owner, place));
            }
        }
    }
    let mut ranges = Vec::new();
    for _ in 0..1 + input.below(SCAN_RANGES_MAX) {
        let range = match input.u8() % 4 {
            0 => 0..frames,
            1 => {
                let start = input.below(u64::from(frames) + 16) as u32;
                start..start + input.below(u64::from(frames) + 16) as u32
            }
            2 => {
                let end = input.below(u64::from(frames) + 16) as u32;
                input.below(u64::from(frames) + 16) as u32..end
            }
            _ => u32::from_le_bytes(input.take())..u32::from_le_bytes(input.take()),
        };
        ranges.push(range);
    }
    let scanned = scan_entries(&entries, ranges.clone());
    let mut frames_taken = BTreeSet::new();
    let mut claims = Vec::new(); // (mapping, first page, end)
    for found in &scanned.folios {
        let Found {
            frame,
            order,
            mapping,
            head,
            freq,
        } = *found;
        let pages = order.pages();
        assert!(order.get() <= ORDER_MAX, "{found:?}: order");
        assert!(
            u64::from(frame.0) + pages <= u64::from(frames),
            "{found:?}: outside the table of {frames} frames"
        );
        assert_eq!(
            u64::from(frame.0) % pages,
            0,
            "{found:?}: frame not aligned"
        );
        assert_eq!(head.0 % pages, 0, "{found:?}: page index not aligned");
        assert!(mapping.0 < SLOT_COUNT, "{found:?}: mapping id");
        assert!(
            ranges.iter().any(|r| r.contains(&frame.0)),
            "{found:?}: head outside every range scanned {ranges:?}"
        );
        let meta = &entries[frame.as_usize()];
        let state = meta.state.load();
        assert!(
            state.is_uptodate()
                && !state.is_dead()
                && !state.is_locked()
                && !state.is_writeback()
                && !state.is_error()
                && !state.is_detached(),
            "{found:?}: its state {state:?}"
        );
        assert_eq!(freq, state.freq(), "{found:?}: freq");
        let (m, h, o) = meta.identity_raw();
        assert_eq!(
            (m, h, o),
            (mapping, head, u64::from(order.get())),
            "{found:?}"
        );
        for tail in frame.0 + 1..frame.0 + pages as u32 {
            assert!(
                entries[tail as usize].state.load().is_dead(),
                "{found:?}: tail frame {tail} not free"
            );
        }
        for f in frame.0..frame.0 + pages as u32 {
            assert!(frames_taken.insert(f), "{found:?}: frame {f} found twice");
        }
        claims.push((mapping.0, head.0, head.0 + pages));
    }
    claims.sort_unstable();
    for pair in claims.windows(2) {
        let ((m, h, e), (next_m, next_h, _)) = (pair[0], pair[1]);
        assert!(
            m != next_m || e <= next_h,
            "pages {h}..{e} and from {next_h} of mapping {m} both found"
        );
    }
}

/// The well-formed mode of `adoption_scan` (its docs).
fn adoption_scan_well_formed(input: &mut Input, frames: u32) {
    let mut entries: Vec<FolioMeta> = Vec::with_capacity(frames as usize);
    let mut made = Vec::new();
    // The next free page of each of 4 mappings.
    let mut next_page = [0u64; 4];
    while (entries.len() as u32) < frames {
        let frame = entries.len() as u32;
        match input.u8() % 4 {
            0 => entries.push(FolioMeta::from_raw(DEAD, 0, 0)),
            1 => entries.push(FolioMeta::from_raw(0, 0, 0)),
            _ => {
                let mut order = input.below(u64::from(ORDER_MAX) + 1) as u8;
                while order > 0 && (frame % (1 << order) != 0 || frame + (1 << order) > frames) {
                    order -= 1;
                }
                let pages = 1u64 << order;
                let mapping = input.below(4) as usize;
                let head = next_page[mapping].next_multiple_of(pages) + input.below(4) * pages;
                next_page[mapping] = head + pages;
                let mut state = UPTODATE | (u64::from(input.u8() & 3) << FREQ_SHIFT);
                // Not WRITEBACK: a folio under I/O at the owner's death is never adopted.
                for flag in [DIRTY, READAHEAD, WORKINGSET, PREFETCHED] {
                    if input.u8() < 64 {
                        state |= flag;
                    }
                }
                state |= u64::from(input.u8() & 3);
                let place = head | (u64::from(order) << 52);
                entries.push(FolioMeta::from_raw(state, mapping as u32, place));
                for _ in 1..pages {
                    entries.push(FolioMeta::from_raw(DEAD, 0, input.u8().into()));
                }
                made.push(Found {
                    frame: FrameId(frame),
                    order: Order::new(order),
                    mapping: crate::folio_meta::MappingId(mapping as u32),
                    head: PageIndex(head),
                    freq: (state >> FREQ_SHIFT) & 3,
                });
            }
        }
    }
    let mut cuts: Vec<u32> = (0..input.below(SCAN_RANGES_MAX))
        .map(|_| input.below(u64::from(frames) + 1) as u32)
        .collect();
    cuts.push(0);
    cuts.push(frames);
    cuts.sort_unstable();
    let ranges: Vec<_> = cuts.windows(2).map(|w| w[0]..w[1]).collect();
    let scanned = scan_entries(&entries, ranges.clone());
    let mut found = scanned.folios.clone();
    found.sort_by_key(|f| f.frame);
    assert_eq!(found, made, "ranges {ranges:?}");
    assert_eq!(scanned.unproven_pages, 0, "ranges {ranges:?}");
}

/// Frames of a segment the hostile-segment target builds.
const HOSTILE_FRAMES: u32 = 64;
/// Slot ids the hostile-segment target writes (of `SLOT_COUNT`).
const HOSTILE_SLOTS: u32 = 8;
/// Pages of each of its data files at most: every page of a file this short is compared
/// with the disk at adoption (`adopt::files`), so a page served is proven the file's.
const HOSTILE_FILE_PAGES_MAX: u64 = 4;

/// One data file of the hostile-segment target, as it is on disk.
struct HostileFile {
    path: std::path::PathBuf,
    bytes: Vec<u8>,
    mode: u32,
    /// Whether a recovery may ever write it: this user's and writable by them.
    writable_by_owner: bool,
}

/// The target's fixed world: a private directory in `/dev/shm` for its segments and data
/// files of several kinds (`HostileFile`), removed when dropped. The tests that run the
/// target make one each (`HostileWorld::new`) and drop it when they are done; the fuzzer
/// runs in one for its whole process (`process_world`).
struct HostileWorld {
    base: std::path::PathBuf,
    segments: std::path::PathBuf,
    files: Vec<HostileFile>,
    /// Held by the body that runs in the world (its segment's name and the data files a
    /// recovery may write are the world's): one at a time.
    busy: std::sync::Mutex<()>,
}

impl HostileWorld {
    /// Makes a world at `/dev/shm/folio-fuzz-hostile-<pid>-<n>` (`n`: this process's
    /// `n`-th), replacing what a process of the same pid left there.
    fn new() -> HostileWorld {
        use std::os::unix::fs::PermissionsExt;
        use std::sync::atomic::{AtomicU32, Ordering};
        static MADE: AtomicU32 = AtomicU32::new(0);
        let base = std::path::PathBuf::from(format!(
            "/dev/shm/folio-fuzz-hostile-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&base);
        let segments = base.join("segments");
        let data = base.join("data");
        std::fs::create_dir_all(&segments).expect("a segment directory");
        std::fs::create_dir_all(&data).expect("a data directory");
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&segments, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = crate::segment::my_uid() == 0;
        // (pages, mode, another user's): writable; read-only to its owner; writable;
        // another user's (as root), or this user's read-only one.
        let kinds = [
            (2u64, 0o644, false),
            (3, 0o444, false),
            (4, 0o644, false),
            (1, 0o644, root),
        ];
        let files = kinds
            .iter()
            .enumerate()
            .map(|(i, &(pages, mode, theirs))| {
                let path = data.join(format!("f{i}"));
                let bytes: Vec<u8> = (0..pages * PAGE_BYTES as u64 - 100 * i as u64)
                    .map(|k| (k.wrapping_mul(31).wrapping_add(i as u64 * 101) % 253) as u8 + 1)
                    .collect();
                std::fs::write(&path, &bytes).expect("a data file");
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
                if theirs {
                    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
                }
                HostileFile {
                    path,
                    bytes,
                    mode,
                    writable_by_owner: !theirs && mode & 0o200 != 0,
                }
            })
            .collect();
        HostileWorld {
            base,
            segments,
            files,
            busy: std::sync::Mutex::new(()),
        }
    }
}

impl Drop for HostileWorld {
    fn drop(&mut self) {
        // No body runs in it (we own it): each closed and removed its segment; no
        // process of the world's outlives its body (no keeper: `adopt::take` alone).
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// The fuzzer's world: one per process, made at its first input. A static is never
/// dropped, so the world outlives the fuzzing process: `scripts/fuzz.sh` removes the
/// worlds of the processes that ended after each target's run (removing it at the
/// process's exit would take an `atexit` handler, an `unsafe` call this module does not
/// make).
fn process_world() -> &'static HostileWorld {
    static WORLD: std::sync::OnceLock<HostileWorld> = std::sync::OnceLock::new();
    WORLD.get_or_init(HostileWorld::new)
}

/// The hostile-segment target: a whole segment built from the fuzzer's bytes (header
/// state and retention, its finished mark, slots naming the world's files with true or
/// false identities, stamps, sizes and openings, side-table entries of any words or
/// plausible folios, clean, dirty or under writeback, and frames holding pages of any of
/// the files or garbage) is adopted (`adopt::take`, which recovers it first). Checked:
/// - no panic, and no error but a segment refused as such (`InvalidData` only under
///   `Refuse`, which the target does not use: a build never fails for good);
/// - a reader gets only its own file's bytes: every kept folio lies in the segment's
///   frames, no frame is kept twice, no inode by two mappings, and each kept page holds
///   exactly its file's bytes on disk (after the recovery) up to the file's end;
/// - recovery writes nothing it cannot prove: a file another user owns or that its owner
///   may not write is never changed, nor is any file whose slots do not record an
///   opening for writing by its true identity and path, nor any file when the segment is
///   marked finished (the fuzzer runs as root).
pub fn hostile_segment(data: &[u8]) {
    hostile_segment_in(process_world(), data)
}

/// `hostile_segment` in `world`.
fn hostile_segment_in(world: &HostileWorld, data: &[u8]) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use crate::segment::layout::{FileStamp, Opened, SIZE_UNKNOWN};
    use crate::segment::Segment;

    // One body at a time in a world: its segment's name and the data files a recovery may
    // write are the world's (libtest ran two tests on one world, when it was one per
    // process, on two threads: one failed so, seen once).
    let _alone = world
        .busy
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut input = Input::new(data);
    let name = "hostile";
    let path = world.segments.join(name);
    let _ = std::fs::remove_file(&path);
    // What each file is now (identity, stamp): a slot may name it truly.
    let now: Vec<(crate::segment::layout::FileIdentity, FileStamp)> = world
        .files
        .iter()
        .map(|f| {
            let file = std::fs::File::open(&f.path).expect("open a data file");
            crate::segment::stamp_of(&file).expect("stat a data file")
        })
        .collect();
    // Files some slot names truly (identity and path), opened for writing.
    let mut claimed_for_writing = vec![false; world.files.len()];
    // The file each slot id names last (for frames that hold their own claim's page).
    let mut slot_file: [Option<usize>; HOSTILE_SLOTS as usize] = [None; HOSTILE_SLOTS as usize];
    let mut registered = Vec::new();
    let segment =
        Segment::create(&world.segments, Some(name), HOSTILE_FRAMES).expect("a segment to forge");
    for _ in 0..input.below(u64::from(HOSTILE_SLOTS) + 1) {
        let id = MappingId(input.below(u64::from(HOSTILE_SLOTS)) as u32);
        let which = input.below(world.files.len() as u64 + 1) as usize;
        let (identity, stamp, file_path) = match world.files.get(which) {
            Some(f) => (now[which].0, now[which].1, f.path.clone()),
            None => (now[0].0, now[0].1, world.segments.join("gone")),
        };
        let true_identity = input.u8() < 200;
        let identity = if true_identity {
            identity
        } else {
            crate::segment::layout::FileIdentity {
                ino: identity.ino ^ (1 + input.below(4)),
                ..identity
            }
        };
        let stamp = match input.below(4) {
            0 => FileStamp {
                taken_ns: stamp.ctime_ns + 1_000_000_000,
                ..stamp
            },
            1 => FileStamp {
                size_bytes: input.below(5 * PAGE_BYTES as u64),
                taken_ns: stamp.ctime_ns + 1_000_000_000,
                ..stamp
            },
            2 => stamp,
            _ => FileStamp {
                taken_ns: 0,
                ..stamp
            },
        };
        let opened = if input.u8() < 128 {
            Opened::ForWriting
        } else {
            Opened::ReadOnly
        };
        segment
            .register(id, identity, &stamp, &file_path, opened)
            .expect("register a slot");
        let slot = segment.slot(id).expect("a slot");
        match input.below(4) {
            0 => slot.set_size(input.below(6 * PAGE_BYTES as u64)),
            1 => slot.set_size(stamp.size_bytes),
            2 => slot.set_size(u64::MAX - input.below(2)),
            _ => slot.set_size(SIZE_UNKNOWN),
        }
        slot_file[id.0 as usize] = (which < world.files.len()).then_some(which);
        registered.push((id.0, which, true_identity, opened));
    }
    // What the slots now say (a slot keeps its opening for writing while it names the
    // same file, and a false identity may be another file's true one).
    for id in 0..HOSTILE_SLOTS {
        let Some(record) = segment.slot(MappingId(id)).and_then(|s| s.read()) else {
            continue;
        };
        for (i, f) in world.files.iter().enumerate() {
            use std::os::unix::ffi::OsStrExt;
            if record.opened == Opened::ForWriting
                && record.identity == now[i].0
                && record.path == f.path.as_os_str().as_bytes()
            {
                claimed_for_writing[i] = true;
            }
        }
    }
    // Side table and frames.
    let mut frame = 0u32;
    while frame < HOSTILE_FRAMES && !input.is_empty() {
        let meta = segment.meta(frame).expect("a frame of the segment");
        match input.below(4) {
            0 => meta.store_raw(DEAD, 0, 0),
            1 => meta.store_raw(input.u64(), u32::from(input.u8()), input.u64()),
            _ => {
                let order = input.below(3);
                let mut state = UPTODATE | (input.below(4) << FREQ_SHIFT);
                for flag in [DIRTY, WRITEBACK, LOCKED, ERROR, DETACHED, DEAD] {
                    if input.u8() < 40 {
                        state |= flag;
                    }
                }
                let owner = input.below(u64::from(HOSTILE_SLOTS)) as u32;
                let head = input.below(HOSTILE_FILE_PAGES_MAX + 1) << order;
                meta.store_raw(state, owner, head | (order << 52));
                // Dirty blocks: the tails' words hold a large folio's mask; an order-0
                // folio's lie in its own entry's unused bits, left as the fuzzer set them.
                for tail in 1..(1u32 << order) {
                    if let Some(t) = segment.meta(frame + tail) {
                        t.store_raw(DEAD, 0, input.u64());
                    }
                }
            }
        }
        // The frame's bytes: the page its entry claims, a page of any file, or garbage.
        let mut page = vec![0u8; PAGE_BYTES];
        let (_, claimed_head, _) = meta.identity_raw();
        let claimed = slot_file[(meta.identity_raw().0 .0 % HOSTILE_SLOTS) as usize];
        match input.below(4) {
            0 | 1 if claimed.is_some() => {
                let f = &world.files[claimed.unwrap_or(0)];
                let at = (claimed_head.0.min(HOSTILE_FILE_PAGES_MAX) as usize * PAGE_BYTES)
                    .min(f.bytes.len());
                let end = (at + PAGE_BYTES).min(f.bytes.len());
                page[..end - at].copy_from_slice(&f.bytes[at..end]);
            }
            2 => page.fill(input.u8()),
            _ => {
                let f = &world.files[input.below(world.files.len() as u64) as usize];
                let at =
                    (input.below(HOSTILE_FILE_PAGES_MAX) as usize * PAGE_BYTES).min(f.bytes.len());
                let end = (at + PAGE_BYTES).min(f.bytes.len());
                page[..end - at].copy_from_slice(&f.bytes[at..end]);
            }
        }
        segment.write_frame_for_test(frame, &page);
        frame += 1;
    }
    segment.set_state(match input.below(4) {
        0 => crate::segment::layout::SegmentState::Live,
        1 => crate::segment::layout::SegmentState::Written,
        _ => crate::segment::layout::SegmentState::Orphaned,
    });
    if input.u8() < 128 {
        segment
            .header()
            .set_retained(crate::segment::layout::Retention::Removed);
    }
    // Zeros (an input run out) leave it unmarked: a killed keeper's, recovered by path.
    let finished = input.u8() >= 156;
    drop(segment);
    if finished {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let root = crate::segment::my_uid() == 0;

    let taken = crate::adopt::take(&path, HOSTILE_FRAMES, crate::adopt::Unusable::Replace);
    let (segment, plan) = match taken {
        Ok(Some(found)) => found,
        Ok(None) => (
            Segment::create(&world.segments, Some(name), HOSTILE_FRAMES).unwrap(),
            crate::adopt::Plan::empty(),
        ),
        Err(e) => panic!("a forged segment failed the build: {e}"),
    };
    // Recovery wrote nothing it cannot prove.
    let mut inode_of = BTreeMap::new();
    for (i, f) in world.files.iter().enumerate() {
        let meta = std::fs::metadata(&f.path).expect("a data file stays");
        inode_of.insert((meta.dev(), meta.ino()), i);
        // A recovery may set a file it may write to any size (a forged one): compare
        // lengths before bytes, never reading a file grown past memory.
        let changed = meta.len() != f.bytes.len() as u64
            || std::fs::read(&f.path).expect("read a data file") != f.bytes;
        let may_change = f.writable_by_owner && claimed_for_writing[i] && !(finished && root);
        assert!(
            !changed || may_change,
            "file {i} (mode {:o}, claimed for writing {}, finished {finished}) was written by a recovery; slots {registered:?}",
            f.mode,
            claimed_for_writing[i]
        );
    }
    if tracing() {
        eprintln!(
            "hostile segment: finished {finished}, {:?}, kept {} folios",
            plan.adoption,
            plan.kept().len()
        );
    }
    // A reader gets only its own file's bytes.
    let mut frames_taken = BTreeSet::new();
    let mut mapping_of_inode: BTreeMap<(u64, u64), MappingId> = BTreeMap::new();
    for (found, inode) in plan.kept() {
        let pages = found.order.pages();
        assert!(
            u64::from(found.frame.0) + pages <= u64::from(HOSTILE_FRAMES),
            "{found:?}: outside the frames"
        );
        let other = *mapping_of_inode.entry(inode).or_insert(found.mapping);
        assert_eq!(
            other, found.mapping,
            "{found:?}: an inode kept by two mappings"
        );
        let i = *inode_of
            .get(&inode)
            .unwrap_or_else(|| panic!("{found:?}: kept for a file not in the world"));
        let disk_file = std::fs::File::open(&world.files[i].path).unwrap();
        let disk_len = disk_file.metadata().unwrap().len();
        for p in 0..pages {
            let frame = found.frame.0 + p as u32;
            assert!(
                frames_taken.insert(frame),
                "{found:?}: frame {frame} kept twice"
            );
            let at = (found.head.0 + p).saturating_mul(PAGE_BYTES as u64);
            let end = at.saturating_add(PAGE_BYTES as u64).min(disk_len);
            if at >= end {
                continue;
            }
            let mut disk = vec![0u8; (end - at) as usize];
            use std::os::unix::fs::FileExt;
            disk_file.read_exact_at(&mut disk, at).unwrap();
            let mut cached = vec![0u8; disk.len()];
            assert!(segment.copy_frame(frame, &mut cached));
            assert!(
                cached == disk,
                "{found:?}: page {} of file {i} served with other bytes",
                found.head.0 + p
            );
        }
    }
    drop(plan);
    drop(segment);
    let _ = std::fs::remove_file(&path);
    // Put the world back as it was for the next input.
    for f in &world.files {
        let same = std::fs::metadata(&f.path).is_ok_and(|m| m.len() == f.bytes.len() as u64)
            && std::fs::read(&f.path).is_ok_and(|b| b == f.bytes);
        if !same {
            std::fs::set_permissions(&f.path, std::fs::Permissions::from_mode(0o644)).unwrap();
            std::fs::write(&f.path, &f.bytes).expect("restore a data file");
            std::fs::set_permissions(&f.path, std::fs::Permissions::from_mode(f.mode)).unwrap();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    /// The saved inputs of a fuzz target: `fuzz/regressions/<target>/*` (crashes found and
    /// fixed), the seed corpus `fuzz/seeds/<target>/*` and `fuzz/known/<target>/*` (crashes
    /// found and not fixed yet, which pass only through a workaround in the body, named
    /// after its finding and removed by the fix that moves the input to `regressions`).
    fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
        let mut found = Vec::new();
        let kinds = ["regressions", "seeds", "known"];
        for kind in kinds {
            let Ok(entries) = std::fs::read_dir(root.join(kind).join(target)) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_file() {
                    let bytes = std::fs::read(&path).expect("read a saved input");
                    found.push((path, bytes));
                }
            }
        }
        found.sort();
        found
    }

    fn replay(target: &str, body: impl Fn(&[u8])) {
        for (path, bytes) in inputs(target) {
            eprintln!("replaying {}", path.display());
            body(&bytes);
        }
    }

    /// Found by the readahead target at once (and fixed in `decide_on_marker`): the next
    /// window after one that ends at the page limit (2^40 then) started at the limit, past what the state word
    /// holds, and `RaCell::update` panicked on it.
    #[test]
    fn a_marker_window_past_the_page_limit_is_refused() {
        use crate::readahead::{
            decide_on_marker, Decision, RaState, START_PAGES_LIMIT, WINDOW_PAGES_LIMIT,
        };
        use crate::types::PageIndex;
        let state = RaState {
            start: START_PAGES_LIMIT - u64::from(WINDOW_PAGES_LIMIT),
            size: WINDOW_PAGES_LIMIT,
            async_size: WINDOW_PAGES_LIMIT,
            order: 0,
        };
        let decision = decide_on_marker(state, PageIndex(state.marker()), None, WINDOW_PAGES_LIMIT);
        if let Decision::Window(w) = decision {
            assert!(w.is_possible(WINDOW_PAGES_LIMIT), "{w:?}");
        }
    }

    #[test]
    fn index_inputs_replay() {
        replay("index", super::index);
    }

    #[test]
    fn adoption_scan_inputs_replay() {
        replay("adoption_scan", super::adoption_scan);
    }

    #[test]
    fn hostile_segment_inputs_replay() {
        let world = super::HostileWorld::new();
        replay("hostile_segment", |bytes| {
            super::hostile_segment_in(&world, bytes)
        });
        world_removed(world);
    }

    /// Drops `world` and checks that its directory went with it.
    fn world_removed(world: super::HostileWorld) {
        let base = world.base.clone();
        drop(world);
        assert!(!base.exists(), "{} is still there", base.display());
    }

    /// A few hundred pseudo-random whole segments (each builds files and a segment: slower
    /// than the other bodies).
    #[test]
    fn random_hostile_segments_hold() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let world = super::HostileWorld::new();
        for _ in 0..if cfg!(miri) { 0 } else { 300 } {
            let len = (next() % 1024) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            super::hostile_segment_in(&world, &bytes);
        }
        world_removed(world);
    }

    #[test]
    fn readahead_policy_inputs_replay() {
        replay("readahead_policy", super::readahead_policy);
    }

    /// A few thousand pseudo-random inputs, so that `cargo test` runs the bodies even
    /// where no fuzzer is installed.
    #[test]
    fn random_inputs_hold() {
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let cases = if cfg!(miri) { 6 } else { 3000 };
        for case in 0..cases {
            let len = (next() % 512) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            match case % 3 {
                0 => super::index(&bytes),
                1 => super::readahead_policy(&bytes),
                _ => super::adoption_scan(&bytes),
            }
        }
    }
}
