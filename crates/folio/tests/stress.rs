//! Stress: 32 threads (16x the cores here) read a 256 MiB file through a cache of 64
//! folios, at random and sequentially, through shared and private handles, for at least
//! 10 s per backend (io_uring with S3-FIFO, pread with the two-list LRU). Every byte read
//! is checked against the file's pattern, a monitor asserts that the cache never holds
//! more folio memory than its capacity, and the arena asserts on every free that the
//! folio is frozen (no pins) with no I/O in flight, and that free memory never goes
//! below zero.
//!
//! `FOLIO_STRESS_SECS` changes the duration (default 10).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use folio::{BackendKind, Cache, EvictionKind};

const FILE_BYTES: u64 = 256 << 20;
const CAPACITY_BYTES: u64 = 64 * 4096;
const THREADS: usize = 32;
const SALT: u64 = 0xfeed_f00d;

fn stress_seconds() -> u64 {
    std::env::var("FOLIO_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10)
}

/// A small xorshift generator: the test needs speed and a seed per thread, not quality.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn stress(backend: BackendKind, eviction: EvictionKind) {
    let dir = common::test_dir();
    let path = dir.path().join("stress");
    common::write_pattern_file(&path, SALT, FILE_BYTES);
    let cache = Cache::builder()
        .capacity_bytes(CAPACITY_BYTES)
        .backend(backend)
        .eviction(eviction)
        .alloc_wait(Duration::from_secs(30))
        .build()
        .unwrap();
    let shared = Arc::new(cache.open(&path).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let bytes_checked = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(stress_seconds());

    let monitor = {
        let (cache, stop) = (cache.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut samples = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let s = cache.stats();
                assert!(
                    s.cached_bytes <= s.capacity_bytes,
                    "cache above capacity: {s:?}"
                );
                assert!(s.capacity_bytes <= CAPACITY_BYTES);
                samples += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            samples
        })
    };

    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let cache = cache.clone();
            let shared = shared.clone();
            let path = path.clone();
            let bytes_checked = bytes_checked.clone();
            std::thread::spawn(move || {
                let own;
                let file = if t % 2 == 0 {
                    &*shared
                } else {
                    own = cache.open(&path).unwrap();
                    &own
                };
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((t as u64 + 1) * 0x1234_5678_9abc_def1));
                let mut buf = vec![0u8; 256 << 10];
                let mut checked = 0u64;
                let mut seq_at = rng.below(FILE_BYTES);
                while Instant::now() < deadline {
                    match t % 4 {
                        // Random reads of any size at any offset, some past the end.
                        0 | 1 => {
                            let len_max = if rng.below(8) == 0 {
                                256 << 10
                            } else {
                                16 << 10
                            };
                            let len = 1 + rng.below(len_max) as usize;
                            let offset = rng.below(FILE_BYTES + 8192);
                            let n = file.read_at(&mut buf[..len], offset).unwrap();
                            let want = (FILE_BYTES.saturating_sub(offset)).min(len as u64) as usize;
                            assert_eq!(n, want, "short read at {offset}+{len}");
                            common::check_pattern(SALT, offset, &buf[..n])
                                .unwrap_or_else(|at| panic!("wrong byte at {at}"));
                            checked += n as u64;
                        }
                        // Sequential scans in 8 KiB records.
                        2 => {
                            if seq_at >= FILE_BYTES {
                                seq_at = 0;
                            }
                            let n = file.read_at(&mut buf[..8192], seq_at).unwrap();
                            common::check_pattern(SALT, seq_at, &buf[..n])
                                .unwrap_or_else(|at| panic!("wrong byte at {at}"));
                            seq_at += n as u64;
                            checked += n as u64;
                        }
                        // Zero-copy pinned views.
                        _ => {
                            let offset = rng.below(FILE_BYTES);
                            let page = file.get_page(offset).unwrap();
                            assert!(page.offset_bytes() <= offset);
                            common::check_pattern(SALT, page.offset_bytes(), &page)
                                .unwrap_or_else(|at| panic!("wrong byte at {at}"));
                            checked += page.len() as u64;
                        }
                    }
                }
                bytes_checked.fetch_add(checked, Ordering::Relaxed);
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let samples = monitor.join().unwrap();
    let s = cache.stats();
    println!(
        "{backend:?}: {} MiB checked, {samples} capacity samples, stats {s:?}",
        bytes_checked.load(Ordering::Relaxed) >> 20
    );
    assert!(
        s.evicted_pages > 0,
        "the cache must have been under pressure"
    );
    assert!(s.hits > 0 && s.misses > 0);
    assert_eq!(s.io_errors, 0);
    assert!(bytes_checked.load(Ordering::Relaxed) > 0);
}

#[test]
fn stress_io_uring_s3fifo() {
    stress(BackendKind::IoUring, EvictionKind::S3Fifo);
}

#[test]
fn stress_pread_two_list_lru() {
    stress(BackendKind::Pread, EvictionKind::TwoListLru);
}
