//! The side table read back: which folios a segment proves were cached pages of a file.
//!
//! A folio is kept only if everything about it is proven:
//! - its state: UPTODATE, and not DEAD (free or being evicted), LOCKED (a read in flight,
//!   a new page being filled, a write mid-copy), WRITEBACK (a write in flight), ERROR (a
//!   failed read) or DETACHED (it left its index while pinned: its bytes may be older than
//!   the file's). DIRTY folios are kept: the segment is written back before it is read
//!   (`take`), so their bytes are the file's. A folio under I/O is not only dropped: its
//!   memory leaves the segment (`Scanned::in_flight`), because the dead owner's read or
//!   write may still complete into or out of it.
//! - its place: an order no larger than the largest, a head frame aligned to it and inside
//!   the arena, tail frames all DEAD (as a folio's tails are), a page index aligned to it.
//! - its claim: no other folio of the same file claims any of its pages (a kill between
//!   a copy on write's two steps could leave two).
//!
//! Everything else counts as unproven and is dropped. The table is read as untrusted
//! input: a hostile or damaged segment (any bytes) yields fewer folios, never a panic or
//! a folio outside the arena (`fuzzing::adoption_scan`).

use super::layout::SLOT_COUNT;
use super::Segment;
use crate::folio_meta::{FolioMeta, MappingId};
use crate::types::{FrameId, Order, PageIndex, ORDER_MAX};

/// A folio the side table proves (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub frame: FrameId,
    pub order: Order,
    pub mapping: MappingId,
    pub head: PageIndex,
    /// Its access frequency when the owner left it (0..=3).
    pub freq: u64,
}

/// What a scan found.
#[derive(Debug, Default)]
pub struct Scanned {
    pub folios: Vec<Found>,
    /// Pages of folios that looked cached (UPTODATE, not DEAD) but were not proven.
    pub unproven_pages: u64,
    /// Frames under I/O when the owner died (a read in flight, a new page being filled,
    /// a writeback): a dead process's I/O can complete after it is gone, so their memory
    /// is never used again (`Plan::prepare_arena` punches it out of the segment).
    pub in_flight: Vec<std::ops::Range<u32>>,
}

/// Scans `segment`'s side table (the parts ever written).
pub fn scan(segment: &Segment) -> Scanned {
    scan_entries(segment.meta_entries(), segment.written_meta_frames())
}

/// `scan` over the entries of a side table, in the frame ranges `ranges` (the rest never
/// written: zeros).
pub fn scan_entries(
    entries: &[FolioMeta],
    ranges: impl IntoIterator<Item = std::ops::Range<u32>>,
) -> Scanned {
    let frame_count = entries.len() as u32;
    let mut out = Scanned::default();
    let mut found = Vec::new();
    for range in ranges {
        let mut frame = range.start;
        while frame < range.end.min(frame_count) {
            let state = entries[frame as usize].state.load();
            if !state.is_dead() && (state.is_locked() || state.is_writeback()) {
                let pages = 1u32 << entries[frame as usize].identity_raw().2.min(9);
                let end = frame.saturating_add(pages).min(frame_count);
                out.in_flight.push(frame..end);
            }
            if !state.is_uptodate() || state.is_dead() {
                frame += 1;
                continue;
            }
            match prove(entries, FrameId(frame)) {
                Some(folio) => {
                    found.push(folio);
                    frame += folio.order.pages() as u32;
                }
                None => {
                    out.unproven_pages += 1;
                    frame += 1;
                }
            }
        }
    }
    // Folios of one file claiming overlapping pages: each of them is doubtful.
    found.sort_by_key(|f| (f.mapping, f.head));
    let mut disputed = vec![false; found.len()];
    let mut reach: Option<(MappingId, u64, usize)> = None; // the furthest end so far
    for (i, f) in found.iter().enumerate() {
        let end = f.head.0 + f.order.pages();
        if let Some((mapping, far, who)) = reach {
            if mapping == f.mapping && f.head.0 < far {
                disputed[i] = true;
                disputed[who] = true;
            }
        }
        match reach {
            Some((mapping, far, _)) if mapping == f.mapping && far >= end => {}
            _ => reach = Some((f.mapping, end, i)),
        }
    }
    for (f, doubtful) in found.into_iter().zip(disputed) {
        if doubtful {
            out.unproven_pages += f.order.pages();
        } else {
            out.folios.push(f);
        }
    }
    // What an adoption will hand out: inside the table, aligned to its order, and no two
    // folios of one file over one page (they are in file order).
    for f in &out.folios {
        let pages = f.order.pages();
        assert!(u64::from(f.frame.0) + pages <= u64::from(frame_count));
        assert!(u64::from(f.frame.0) % pages == 0 && f.head.0 % pages == 0);
    }
    debug_assert!(out
        .folios
        .windows(2)
        .all(|w| w[0].mapping != w[1].mapping || w[0].head.0 + w[0].order.pages() <= w[1].head.0));
    out
}

/// The folio headed at `frame` (UPTODATE, not DEAD), if its state and place are proven
/// (module docs).
fn prove(entries: &[FolioMeta], frame: FrameId) -> Option<Found> {
    let meta = &entries[frame.as_usize()];
    let state = meta.state.load();
    if state.is_locked() || state.is_writeback() || state.is_error() || state.is_detached() {
        return None;
    }
    let (mapping, head, order) = meta.identity_raw();
    if order > u64::from(ORDER_MAX) || mapping.0 >= SLOT_COUNT {
        return None;
    }
    let order = Order::new(order as u8);
    let pages = order.pages();
    let end = u64::from(frame.0) + pages;
    if u64::from(frame.0) % pages != 0 || end > entries.len() as u64 || head.0 % pages != 0 {
        return None;
    }
    let tails_free = (frame.0 + 1..end as u32).all(|t| entries[t as usize].state.load().is_dead());
    tails_free.then_some(Found {
        frame,
        order,
        mapping,
        head,
        freq: state.freq(),
    })
}
