//! The public API against `std::fs` reads: `folio_fuzz::api`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| folio_fuzz::api::run(data));
