//! Reads a generated file through folio twice (a cold scan, then a warm one) and prints
//! what the cache did. Usage: `cargo run --release -p folio --example scan [MiB]`.
//!
//! The data is written to a fresh directory under `/var/tmp` (a disk file system, where
//! O_DIRECT works; `/tmp` may be tmpfs), or under `FOLIO_EXAMPLE_DIR`, and removed at the
//! end; every byte read is checked.

use std::io::Write;
use std::time::Instant;

fn main() -> std::io::Result<()> {
    let mib: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(256);
    let base = std::env::var_os("FOLIO_EXAMPLE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/var/tmp"));
    let dir = tempfile::Builder::new()
        .prefix("folio-scan-")
        .tempdir_in(base)?;
    let path = dir.path().join("data");
    let len = mib << 20;
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
        for word in 0..len / 8 {
            out.write_all(&(word * 8).to_le_bytes())?;
        }
        out.into_inner()?.sync_all()?;
    }
    let cache = folio::Cache::builder()
        .capacity_bytes(len + (64 << 20))
        .build()?;
    let file = cache.open(&path)?;
    println!(
        "file: {mib} MiB, O_DIRECT: {}, backend: {}",
        file.is_direct(),
        cache.stats().backend
    );
    let mut buf = vec![0u8; 8192];
    for pass in ["cold", "warm"] {
        let started = Instant::now();
        let mut offset = 0;
        while offset < len {
            let n = file.read_at(&mut buf, offset)?;
            for (i, word) in buf[..n].chunks_exact(8).enumerate() {
                let want = offset + 8 * i as u64;
                assert_eq!(
                    u64::from_le_bytes(word.try_into().unwrap()),
                    want,
                    "wrong bytes at {want}"
                );
            }
            offset += n as u64;
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{pass} scan: {:.0} MB/s ({:.2} s), every byte checked",
            len as f64 / secs / 1e6,
            secs
        );
    }
    let s = cache.stats();
    println!(
        "stats: hits {}, misses {}, waits on in-flight I/O {}, pages inserted {} ({} read ahead: {} sync / {} async windows), I/O requests {} ({} MiB), cached {} MiB, metadata {} KiB",
        s.hits,
        s.misses,
        s.waits_on_io,
        s.pages_inserted,
        s.readahead_pages,
        s.readahead_sync,
        s.readahead_async,
        s.io_requests,
        s.io_bytes >> 20,
        s.cached_bytes >> 20,
        s.metadata_bytes >> 10
    );
    Ok(())
}
