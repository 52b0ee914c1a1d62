//! Serves many concurrent reads of a generated file from a tokio runtime with 2 worker
//! threads and no blocking pool: each read is `File::read_at_async`, so a miss parks its
//! task (not its thread) until the device read completes. Prints how many reads were
//! in flight at once and what the cache did. Usage:
//! `cargo run --release -p folio --example async_tokio [READS] [FILE_MIB]`.
//!
//! The data is written to a fresh directory under `/var/tmp` (or `FOLIO_EXAMPLE_DIR`)
//! and removed at the end; every byte read is checked.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let reads: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let mib: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(256);
    let base = std::env::var_os("FOLIO_EXAMPLE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/var/tmp"));
    let dir = tempfile::Builder::new()
        .prefix("folio-async-")
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
    // A cache of a quarter of the file: most random reads miss.
    let cache = folio::Cache::builder().capacity_bytes(len / 4).build()?;
    let file = Arc::new(cache.open(&path)?);
    file.advise(0, len, folio::Advice::Random)?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()?;
    let in_flight = Arc::new(AtomicU64::new(0));
    let in_flight_max = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let checked = runtime.block_on(async {
        let tasks: Vec<_> = (0..reads)
            .map(|i| {
                let (file, in_flight, in_flight_max) =
                    (file.clone(), in_flight.clone(), in_flight_max.clone());
                // Scattered 4 KiB reads, word-aligned: a multiplicative hash of the index.
                let offset = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % (len / 4096 - 1)) * 4096;
                tokio::spawn(async move {
                    let now = in_flight.fetch_add(1, Ordering::Relaxed) + 1;
                    in_flight_max.fetch_max(now, Ordering::Relaxed);
                    let mut buf = vec![0u8; 4096];
                    let n = file.read_at_async(&mut buf, offset).await?;
                    in_flight.fetch_sub(1, Ordering::Relaxed);
                    for (k, word) in buf[..n].chunks_exact(8).enumerate() {
                        let want = offset + 8 * k as u64;
                        assert_eq!(u64::from_le_bytes(word.try_into().unwrap()), want);
                    }
                    Ok::<u64, std::io::Error>(n as u64)
                })
            })
            .collect();
        let mut bytes = 0;
        for task in tasks {
            bytes += task.await.expect("a read task panicked")?;
        }
        Ok::<u64, std::io::Error>(bytes)
    })?;
    let secs = started.elapsed().as_secs_f64();
    let s = cache.stats();
    println!(
        "{reads} reads of 4 KiB over {mib} MiB on 2 runtime threads: {:.0} reads/s ({:.2} s), \
         {} MiB checked; up to {} reads in flight at once",
        reads as f64 / secs,
        secs,
        checked >> 20,
        in_flight_max.load(Ordering::Relaxed)
    );
    println!(
        "cache: {} misses, {} hits, {} waits on I/O, {} I/O requests, backend {}",
        s.misses, s.hits, s.waits_on_io, s.io_requests, s.backend
    );
    Ok(())
}
