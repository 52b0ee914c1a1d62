//! folio-trace: replays traces of page accesses through a real folio cache and reports
//! the miss ratio of each eviction policy at each cache size.
//!
//! ```text
//! generate (zipf, scan-mix) ──> trace (CSV: file_id,page_index) ──> replay ──> report
//!                                      ▲                              │ one fresh cache per
//!                          a user's own trace                         │ (policy, size), null
//!                                                                     ▼ backend, 4 KiB folios
//!                                                             table / JSON of miss ratios
//! ```
//!
//! Modules: `trace` (the access type and the CSV format), `rng` and `zipf` (the random
//! sources of the generators), `generate` (the synthetic traces and their parameters),
//! `replay` (the cache set-up and what is counted), `report` (table and JSON). The
//! binary's `--help` and `docs/eviction.md` say how to run it; `tools/libcachesim_compare.py`
//! runs the same traces through libCacheSim for an independent reference.

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod generate;
pub mod replay;
pub mod report;
pub mod rng;
pub mod trace;
pub mod zipf;
