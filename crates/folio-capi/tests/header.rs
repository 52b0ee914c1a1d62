//! Proves that the checked-in generated sources are what their generators write now:
//! `src/stats.rs` (`folio_stats` and its fill, one field per number of folio's counter
//! list, `folio::Stats::FIELDS`) and then `include/folio.h` (cbindgen, from this crate's
//! sources). With `FOLIO_BLESS_HEADER=1` it rewrites both instead, in that order.

use std::fmt::Write as _;
use std::path::Path;

#[test]
fn checked_in_header_is_current() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    // First the Rust source cbindgen reads, then the header.
    check_or_bless(&crate_dir.join("src/stats.rs"), &render_stats_rs());
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("crates/folio-capi/cbindgen.toml parses");
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");
    check_or_bless(&crate_dir.join("../../include/folio.h"), &generated);
}

/// Under `FOLIO_BLESS_HEADER`, writes `generated` to `path`; else fails unless `path`
/// holds exactly `generated`.
fn check_or_bless(path: &Path, generated: &str) {
    if std::env::var_os("FOLIO_BLESS_HEADER").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, generated).unwrap();
        eprintln!("wrote {}", path.display());
        return;
    }
    let checked_in = std::fs::read_to_string(path).unwrap_or_default();
    if checked_in != generated {
        let line = checked_in
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or(
                checked_in.lines().count().min(generated.lines().count()),
                |i| i,
            );
        panic!(
            "{} is stale (first difference at line {}): regenerate it with\n    \
             FOLIO_BLESS_HEADER=1 cargo test -p folio-capi --test header\n\
             and commit the result",
            path.display(),
            line + 1
        );
    }
}

/// The source of `src/stats.rs`: `folio_stats` with one `uint64_t` per entry of
/// `folio::Stats::FIELDS` (its doc, its name, in its order) and the codes of the backend
/// and the eviction policy, the fill from a `folio::Stats`, and the numbers in the order
/// of `FIELDS` for `folio_stats_format`.
fn render_stats_rs() -> String {
    let fields = folio_rs::Stats::FIELDS;
    let mut s = String::from(
        "\
//! `folio_stats`: generated from folio's counter list (`folio::Stats::FIELDS`, written
//! once in `crates/folio/src/stats.rs`) by `tests/header.rs`. Do not edit by hand; after
//! changing the list, regenerate this file and `include/folio.h` with
//!     FOLIO_BLESS_HEADER=1 cargo test -p folio-capi --test header

use folio_rs::Stats;

/// A snapshot of a cache's counters (all since the cache was created) and gauges (as of
/// the call), then the engine and the eviction policy in use. `folio_stats_format`
/// prints every field as `name=value`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct folio_stats {
",
    );
    for field in fields {
        for line in field.doc.lines() {
            writeln!(s, "    ///{line}").unwrap();
        }
        writeln!(s, "    pub {}: u64,", field.name).unwrap();
    }
    s.push_str(
        "    \
    /// The engine in use: FOLIO_BACKEND_IO_URING, FOLIO_BACKEND_PREAD or
    /// FOLIO_BACKEND_OTHER.
    pub backend: u32,
    /// The eviction policy: FOLIO_EVICTION_S3FIFO, FOLIO_EVICTION_TWO_LIST_LRU or
    /// FOLIO_EVICTION_OTHER.
    pub eviction: u32,
}

",
    );
    writeln!(
        s,
        "const _: () = assert!(Stats::FIELDS.len() == {});",
        fields.len()
    )
    .unwrap();
    s.push_str(
        "
impl folio_stats {
    /// The C struct of a snapshot.
    pub(crate) fn of(stats: &Stats) -> folio_stats {
        folio_stats {
",
    );
    for field in fields {
        writeln!(s, "            {0}: stats.{0},", field.name).unwrap();
    }
    s.push_str(
        "            \
            backend: crate::cache::backend_code(&stats.backend),
            eviction: crate::cache::eviction_code(&stats.eviction),
        }
    }

    /// The numbers, in the order of `Stats::FIELDS`.
",
    );
    writeln!(
        s,
        "    pub(crate) fn values(&self) -> [u64; {}] {{\n        [",
        fields.len()
    )
    .unwrap();
    for field in fields {
        writeln!(s, "            self.{},", field.name).unwrap();
    }
    s.push_str("        ]\n    }\n}\n");
    s
}
