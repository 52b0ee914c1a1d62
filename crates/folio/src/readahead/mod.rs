//! Readahead: the kernel's on-demand window, as a pure policy, its per-handle state, and
//! the cache-wide limit that bounds every handle's windows.
//!
//! # DOC: Readahead overview
//!
//! A handle remembers one readahead window. Its pages are read ahead of the reader; one
//! folio in it carries the READAHEAD marker, and a read that reaches the marker starts
//! the next window before the reader gets there, so the disk stays busy while the
//! application consumes the previous window:
//!
//! ```text
//!                         |<------------ size ------------>|
//!                         |              |<-- async_size -->|
//!     ... ===============[#######################################]
//!                         ^start         ^marker            ^start + size = next start
//!
//!     reading reaches the marker  =>  next window: start' = start + size,
//!                                     order' = order + 2 (the folio order reached),
//!                                     end' = start' + ramp(size), rounded down to a
//!                                            multiple of 2^min(order', tz(max)),
//!                                     size' = async_size' = end' - start'
//! ```
//!
//! - A miss at the start of the file, right after the previous read of this handle that
//!   missed or waited, or right after more cached pages than it asks for (the trace a
//!   sequential stream leaves in the index: the kernel's context readahead), opens an
//!   initial window at the missed page: the request rounded up to a power of two,
//!   x4 if at most max/32, x2 if at most max/4, else max; `async_size` is the part past the
//!   request, so the marker falls on the first page the reader has not asked for yet. Its
//!   `order` is 0.
//! - A read that touches the marker starts the next window at `start + size`, all of it
//!   async: its size ramps x4 while under max/16, x2 while at most max/2, then stays max.
//!   If the marker is not where this handle's window put it (interleaved streams), the new
//!   window starts at the first page missing after the reader.
//! - **Alignment (the kernel's rule since large-folio readahead, Linux 6.18 here).** A
//!   window started at a marker raises `order` by 2 and ends on a multiple of
//!   2^min(order, tz(max)) (tz: trailing zero bits, so a maximum that is not a power of
//!   two still divides into whole blocks); if rounding the end down would leave the
//!   window empty, it keeps its ramped end. Then `order` is capped by the largest folio
//!   (`ORDER_MAX`) and by log2 of the window's size, and the window is read with folios of
//!   at most that order. So windows end where the folios they are read with end, each
//!   folio starts on a multiple of its own size, and the window after a short aligned one
//!   ramps from the short size: the kernel's windows, page for page. With a 128 KiB
//!   maximum (32 pages) and 4 KiB reads, the windows and their orders (`o`), then windows
//!   of 32 pages, order 5, at 64, 96, 128, ...:
//!
//! ```text
//!     page 0   4       12  16      24      32              48              64
//!          |o0-|o2-----|o2-|o3-----|o3-----|o4-------------|o4-------------|o5 ...
//! ```
//!
//!   and with 8 MiB (2,048 pages): 0+4, 4+16, 20+60, 80+240, 320+448, 768+256, 1024+512,
//!   1536+512, 2048+1024, 3072+1024, 4096+2048, then 2,048 at a time
//!   (`tests/readahead_trace.rs` checks them against the kernel, read by read). Without
//!   the alignment the ramp ran 0+4, 4+16, 20+64, 84+256, ... (and 4, 12, 28, 60, 92, ...
//!   at 128 KiB): the 4 pages of the initial window shifted every later window past the
//!   kernel's, so its markers came later, and until the reader reached them fewer pages
//!   were ahead than in the kernel: at 1,748 of the first 2,048 reads at 128 KiB (43 vs
//!   47 after read 49), and at 24 at 8 MiB (259 vs 687 after read 81).
//! - Any other miss is random: the request is read as it is and the state stays.
//! - `File::readahead` and `Advice::WillNeed` force a window over a range (chunks of at
//!   most 2 MiB); `Advice::Random` turns readahead off for the handle.
//! - Folios grow with the window: a window started at a marker is read with folios of at
//!   most its `order` (above), so a ramped-up scan uses 2 MiB folios (the kernel's large
//!   folio readahead); a window opened on a miss with folios of order up to log2(size) - 2
//!   (the kernel reads it in single pages; folio keeps fewer, larger folios, which only
//!   changes how the same pages are grouped).
//!
//! # Its parts (each imports only the ones after it)
//!
//! - `limit`: the cache-wide limit (`ReadaheadLimit`): every handle's maximum lowered to
//!   each active stream's share of the cache, and lower while readahead thrashes (issue
//!   16).
//! - `cell`: a handle's state (`RaCell`): the window in one atomic word, replaced by
//!   CAS, shared by every thread that reads through the handle (seed 002), and the hints
//!   beside it.
//! - `window`: the policy above (`decide_on_miss`, `decide_on_marker`, `initial_size`,
//!   `ramp`), a pure function of (state, request, what the index holds): no I/O, no lock,
//!   no clock.
//!
//! Protection: a handle's window word, and the limit's two words, are replaced by CAS only;
//! `prev_index`, the handle's maximum and its stream epoch are single words (hints).
//!
//! Limits: windows of at most `WINDOW_PAGES_LIMIT` pages (32 MiB), and within the
//! cache-wide limit (at least 128 KiB, at most the cache's own); files of at most
//! `START_PAGES_LIMIT` pages (2^36 pages, 256 TiB) for readahead (pages beyond are read
//! without it). The order the alignment follows is capped at `ORDER_MAX` (2 MiB folios),
//! whatever largest folio the cache is built with (the kernel caps it at the mapping's).

mod cell;
mod limit;
mod window;

pub use cell::RaCell;
pub use limit::{window_pages_limit, LimitBounds, ReadaheadLimit};
pub use window::{decide_on_marker, decide_on_miss, Decision, MissRequest, RaState};
// What the fuzz bodies name besides (`fuzzing`).
#[cfg(any(fuzzing, test))]
pub use window::{folio_order_cap, initial_size, ramp, START_PAGES_LIMIT, WINDOW_PAGES_LIMIT};

/// What the tests of more than one part share.
#[cfg(test)]
mod testing {
    use super::RaState;

    /// `RaState` literals, shorter: (start, size, async_size, order).
    pub fn w(start: u64, size: u32, async_size: u32, order: u8) -> RaState {
        RaState {
            start,
            size,
            async_size,
            order,
        }
    }
}
