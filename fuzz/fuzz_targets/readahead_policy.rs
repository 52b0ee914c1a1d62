//! The pure readahead policy against its invariants: `folio::fuzzing::readahead_policy`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| folio::fuzzing::readahead_policy(data));
