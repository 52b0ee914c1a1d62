//! Proves that the checked-in `include/folio.h` is what cbindgen generates from this
//! crate now. With `FOLIO_BLESS_HEADER=1` it rewrites the header instead.

use std::path::Path;

#[test]
fn checked_in_header_is_current() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = crate_dir.join("../../include/folio.h");
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

    if std::env::var_os("FOLIO_BLESS_HEADER").is_some() {
        std::fs::create_dir_all(header.parent().unwrap()).unwrap();
        std::fs::write(&header, &generated).unwrap();
        eprintln!("wrote {}", header.display());
        return;
    }
    let checked_in = std::fs::read_to_string(&header).unwrap_or_default();
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
            "include/folio.h is stale (first difference at line {}): regenerate it with\n    \
             FOLIO_BLESS_HEADER=1 cargo test -p folio-capi --test header\n\
             and commit the result",
            line + 1
        );
    }
}
