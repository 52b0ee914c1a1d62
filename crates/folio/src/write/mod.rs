//! The write side (DESIGN.md §8), in one folder that owns its state: what a write does to
//! a folio, which blocks are dirty, how much dirty memory writers may hold, each file's
//! write state, the queue of dirty files and its thread, writeback, the sync and the
//! checks of its promise. `File::write_at` and the syncs (`file::modify`) are the API on
//! top; nothing outside this folder writes a field of its types (their methods are the
//! way in).
//!
//! # The path of a write
//!
//! ```text
//! File::write_at ─ lock_range (whole call) ─ fallocate past the reserve ─ per piece:
//!   DirtyBudget::charge (the throttle) ─ lock_writer ─ FolioWriter::write_piece (W1-W5,
//!   `into_folio`) ─ DirtyFiles::note_dirty (`queue`) ─ write-behind of an append's pages
//! writeback::start (B0-B3, `writeback`) ◄─ the thread (`thread`) | File::writeback | sync
//! integrity::sync: tag Dirty -> Towrite ─ write what is tagged ─ wait for every earlier ticket
//!   ─ write what is still tagged ─ the size on disk ─ flush ─ (checked: `audit`)
//! ```
//!
//! # Rooms, from the bottom up
//!
//! The folder is an owner, not a layer: its low rooms sit below the mapping and the
//! memory layer that hold their types, its high rooms above the miss path they use, and
//! each imports only rooms below it (ARCHITECTURE.md):
//! - low: `mask` (a folio's dirty blocks), `budget` (the dirty budget and throttle),
//!   `errseq` (a file's error sequence), `range_lock` (a write's byte range),
//!   `audit` (the writes' record a sync's promise is checked against), `state` (one
//!   file's write state: ranges, writer lock, descriptor, tickets, queue place, failures);
//!   `queue` (the dirty files, above the mapping it lists);
//! - high: `into_folio` (W1-W5 on one folio and the index's half of a write), `writeback`
//!   (B0-B3: marked walk, merged writes, completion, giving a file up), `integrity` (the
//!   data-integrity sync and its checks), `thread` (the writeback thread's body and the
//!   cache's final writeback).

#[cfg(any(debug_assertions, feature = "invariants"))]
pub(crate) mod audit;
pub(crate) mod budget;
pub(crate) mod errseq;
pub(crate) mod integrity;
pub(crate) mod into_folio;
pub(crate) mod mask;
pub(crate) mod queue;
pub(crate) mod range_lock;
pub(crate) mod state;
pub(crate) mod thread;
pub(crate) mod writeback;
