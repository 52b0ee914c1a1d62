//! The radix-tree index against a `BTreeMap` model: `folio::fuzzing::index`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| folio::fuzzing::index(data));
