//! A whole segment (header, slots, side table, frames) forged from the fuzzer's bytes,
//! adopted and recovered: `folio::fuzzing::hostile_segment`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| folio::fuzzing::hostile_segment(data));
