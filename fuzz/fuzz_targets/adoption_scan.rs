//! A segment's side table read back by the adoption, as untrusted input:
//! `folio::fuzzing::adoption_scan`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| folio::fuzzing::adoption_scan(data));
