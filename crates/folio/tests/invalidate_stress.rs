//! Stress: `advise(DontNeed)` in a loop against random readers on a tiny cache (found in
//! review: invalidation used the order of a lock-free walk after the frame could have
//! been reused at another order, corrupting the free lists); and the hit path's root
//! hints (`index::RootHint`) against a tree that empties, regrows and changes height
//! under them. Every byte read is checked. `FOLIO_STRESS_SECS` sets the duration
//! (default 5 s here).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use folio::{Advice, Cache};

const SALT: u64 = 0x5eed;

/// Seconds each stress runs: `FOLIO_STRESS_SECS`, 5 by default, at most 10.
fn stress_secs() -> u64 {
    std::env::var("FOLIO_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map_or(5, |s| s.min(10))
}

/// The next value of a xorshift generator.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[test]
fn dontneed_and_random_reads_on_a_tiny_cache() {
    let secs = stress_secs();
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
                next(&mut x);
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

/// Each handle remembers its index's root for the hit path. Here the root keeps moving
/// under 12 readers (8 handles of their own, 4 sharing one): a churner empties the tree
/// (`DontNeed`), reads the first 64 pages back (a one-level tree), then a page past 4,096
/// (the tree grows twice: the old root goes under the new one), over and over. A stale
/// hint may only send a read to the slow path, never return another page's bytes.
#[test]
fn root_hints_follow_a_tree_that_empties_and_regrows() {
    let secs = stress_secs();
    let dir = common::test_dir();
    let path = dir.path().join("f");
    let pages = 6144u64;
    let len = pages * 4096;
    common::write_pattern_file(&path, SALT, len);
    let cache = Cache::builder().capacity_bytes(2 * len).build().unwrap();
    let shared = Arc::new(cache.open(&path).unwrap());
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..12u64 {
            let own = (t < 8).then(|| cache.open(&path).unwrap());
            let (shared, stop, reads) = (&shared, &stop, &reads);
            s.spawn(move || {
                let file = own.as_ref().unwrap_or(shared);
                let mut x = 0x2545_f491_4f6c_dd1du64 ^ (t + 1);
                let mut buf = vec![0u8; 4096];
                while !stop.load(Ordering::Relaxed) {
                    // Half the reads in the first 64 pages, where the tree is shallowest.
                    let r = next(&mut x);
                    let page = if r & 1 == 0 {
                        (r >> 1) % 64
                    } else {
                        (r >> 1) % pages
                    };
                    let off = page * 4096;
                    let got = file.read_at(&mut buf, off).unwrap();
                    assert_eq!(got, buf.len(), "a whole page at {off}");
                    if let Err(at) = common::check_pattern(SALT, off, &buf) {
                        panic!("wrong byte at file offset {at}");
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let (shared, stop, cache, path) = (&shared, &stop, &cache, &path);
        s.spawn(move || {
            let churner = cache.open(path).unwrap();
            let mut buf = vec![0u8; 64 * 4096];
            let deadline = Instant::now() + Duration::from_secs(secs);
            let mut rounds = 0u64;
            while Instant::now() < deadline {
                churner.advise(0, len, Advice::DontNeed).unwrap();
                churner.read_at(&mut buf, 0).unwrap();
                std::thread::yield_now();
                churner
                    .read_at(&mut buf[..4096], (4096 + rounds % 2048) * 4096)
                    .unwrap();
                std::thread::yield_now();
                rounds += 1;
            }
            stop.store(true, Ordering::Relaxed);
            eprintln!("{rounds} rounds; shared handle {:?}", shared.stats());
        });
    });
    let stats = cache.stats();
    eprintln!("{} reads, {stats:?}", reads.load(Ordering::Relaxed));
    assert!(reads.load(Ordering::Relaxed) > 0);
    assert!(stats.hits > 0 && stats.misses > 0, "{stats:?}");
}
