//! Stress: `advise(DontNeed)` in a loop against random readers on a tiny cache (found in
//! review: invalidation used the order of a lock-free walk after the frame could have
//! been reused at another order, corrupting the free lists). Every byte read is checked.
//! `FOLIO_STRESS_SECS` sets the duration (default 5 s here).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use folio::{Advice, Cache};

const SALT: u64 = 0x5eed;

#[test]
fn dontneed_and_random_reads_on_a_tiny_cache() {
    let secs: u64 = std::env::var("FOLIO_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map_or(5, |s| s.min(10));
    let dir = common::test_dir();
    let path = dir.path().join("f");
    let len = 256 * 4096u64;
    common::write_pattern_file(&path, SALT, len);
    let cache = Cache::builder()
        .capacity_bytes(64 * 4096)
        .alloc_wait(Duration::from_secs(5))
        .build()
        .unwrap();
    let file = Arc::new(cache.open(&path).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for t in 0..6u64 {
        let (file, stop, reads) = (file.clone(), stop.clone(), reads.clone());
        handles.push(std::thread::spawn(move || {
            let mut x = 0x9e3779b97f4a7c15u64 ^ t;
            let mut buf = vec![0u8; 16 << 10];
            while !stop.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let off = x % len;
                let n = 1 + (x >> 40) as usize % buf.len();
                match file.read_at(&mut buf[..n], off) {
                    Ok(got) => {
                        if let Err(at) = common::check_pattern(SALT, off, &buf[..got]) {
                            panic!("wrong byte at file offset {at}");
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::OutOfMemory => {}
                    Err(e) => panic!("read failed: {e}"),
                }
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    {
        let (file, stop) = (file.clone(), stop.clone());
        handles.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                file.advise(0, len, Advice::DontNeed).unwrap();
                std::thread::yield_now();
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        if handles.iter().any(|h| h.is_finished()) {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    eprintln!(
        "{} reads, {:?}",
        reads.load(Ordering::Relaxed),
        cache.stats()
    );
}
