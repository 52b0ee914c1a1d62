//! The readahead policy through the reads it makes: `folio_fuzz::readahead`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| folio_fuzz::readahead::run(data));
