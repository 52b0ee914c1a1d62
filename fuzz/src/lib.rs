//! The bodies of folio's fuzz targets that use only the public API, shared by the targets
//! (`fuzz_targets/`) and by the regression tests (`crates/folio/tests/regressions.rs`
//! includes this file), so that a crashing input replays through the same code in
//! `cargo test`. The targets on private parts (the index, the readahead policy) have their
//! bodies in the library itself: `folio::fuzzing`, built with `--cfg fuzzing`.
//!
//! Every module here refers to its siblings as `super::`, never `crate::`, so that it
//! compiles both as this crate and as a module of a test.

pub mod api;
pub mod files;
pub mod input;
pub mod readahead;
