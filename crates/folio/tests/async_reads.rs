//! Async reads (`File::read_at_async`, `File::get_page_async`) as an async storage engine
//! runs them: on a tokio runtime with 2 worker threads and no blocking pool.
//!
//! What each test proves:
//! - `a_hit_is_ready_on_the_first_poll`: a cached page needs no waker (one poll, `Ready`)
//!   and a miss polled with a waker that is never woken stays `Pending` without blocking.
//! - `ten_thousand_concurrent_reads_on_two_threads` (io_uring and the pread pool): 10,000
//!   reads at once, most of them misses, complete with every byte checked, while more
//!   futures are parked on folio I/O at once than the runtime has threads: the threads
//!   never block on the device.
//! - `dropped_futures_leak_nothing`: 1,000 futures dropped at random points of their
//!   misses (before the first poll, parked, woken but not polled again) leave no waker
//!   in the wait table and no folio pinned (every page can be dropped afterwards), and
//!   the pages their reads filled hold the file's bytes.
//! - `get_page_async_pins_the_page`: the zero-copy form, cold and cached, and its errors.
//!
//! The table of parked futures is one per process and the tests read its gauge, so they
//! take `GAUGE` to run one at a time.

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::{check_pattern, test_dir, write_pattern_file};
use folio::io::fault::FaultBackend;
use folio::io::open_backend;
use folio::{Advice, BackendKind, Cache, File};

static GAUGE: Mutex<()> = Mutex::new(());

const SALT: u64 = 0xA5A5_0017;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a tokio runtime")
}

/// A small deterministic generator (xorshift64*), so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn cache(capacity_bytes: u64, backend: BackendKind) -> Cache {
    Cache::builder()
        .capacity_bytes(capacity_bytes)
        .backend(backend)
        .build()
        .expect("a cache")
}

#[test]
fn a_hit_is_ready_on_the_first_poll() {
    let _one = GAUGE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = test_dir();
    let path = dir.path().join("f");
    write_pattern_file(&path, SALT, 1 << 20);
    // The device's completion is held back 200 ms: a fast device (or a completion thread
    // that runs first) can otherwise finish the read before the first poll checks again,
    // and that poll is rightly `Ready`.
    let inner = open_backend(BackendKind::Auto, 2).expect("a backend");
    let (backend, control) = FaultBackend::new(inner);
    control.delay(Duration::from_millis(200));
    let cache = Cache::builder()
        .capacity_bytes(16 << 20)
        .build_with_backend(Box::new(backend))
        .expect("a cache");
    let file = cache.open(&path).unwrap();
    file.advise(0, 1 << 20, Advice::Random).unwrap();

    // Cold: the first poll submits the read and parks.
    let mut buf = vec![0u8; 5000];
    let mut cx = Context::from_waker(Waker::noop());
    let mut polls = 0;
    let n = {
        let mut read = pin!(file.read_at_async(&mut buf, 123_456));
        loop {
            polls += 1;
            match read.as_mut().poll(&mut cx) {
                Poll::Ready(n) => break n.unwrap(),
                // The noop waker is never woken: poll again after the device had time.
                Poll::Pending => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    };
    assert_eq!(n, 5000);
    assert!(polls > 1, "a cold read completes on a later poll");
    check_pattern(SALT, 123_456, &buf).unwrap();
    control.delay(Duration::ZERO);

    // Cached: one poll.
    let hits = cache.stats().hits;
    let mut again = vec![0u8; 5000];
    match pin!(file.read_at_async(&mut again, 123_456)).poll(&mut cx) {
        Poll::Ready(n) => assert_eq!(n.unwrap(), 5000),
        Poll::Pending => panic!("a hit is ready on the first poll"),
    }
    assert_eq!(again, buf);
    assert!(cache.stats().hits > hits, "the cached folio hit");
    assert_eq!(cache.stats().futures_parked, 0);

    // At the end of the file: short, then 0; empty buffers: 0.
    let mut tail = vec![0u8; 8192];
    let n = futures_block_on(file.read_at_async(&mut tail, (1 << 20) - 100)).unwrap();
    assert_eq!(n, 100);
    check_pattern(SALT, (1 << 20) - 100, &tail[..100]).unwrap();
    assert_eq!(
        futures_block_on(file.read_at_async(&mut tail, 1 << 20)).unwrap(),
        0
    );
    assert_eq!(futures_block_on(file.read_at_async(&mut [], 0)).unwrap(), 0);
    let overflow = futures_block_on(file.read_at_async(&mut tail, u64::MAX - 10));
    assert_eq!(
        overflow.unwrap_err().kind(),
        std::io::ErrorKind::InvalidInput
    );
}

/// Polls `fut` to completion on this thread, parking it between polls.
fn futures_block_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

fn ten_thousand_reads(backend: BackendKind) {
    let _one = GAUGE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = test_dir();
    let path = dir.path().join("f");
    let len: u64 = 256 << 20;
    write_pattern_file(&path, SALT, len);
    // A cache of a sixteenth of the file: most reads miss.
    let cache = cache(16 << 20, backend);
    let file = Arc::new(cache.open(&path).unwrap());
    file.advise(0, len, Advice::Random).unwrap();

    let parked_max = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let cache = cache.clone();
        let (parked_max, done) = (parked_max.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let st = cache.stats();
                if std::env::var_os("ASYNC_DEBUG").is_some() {
                    eprintln!(
                        "parked {} misses {} cached {} inserted {} evicted {} allocfail {} io {}",
                        st.futures_parked,
                        st.misses,
                        st.cached_bytes >> 12,
                        st.pages_inserted,
                        st.evicted_pages,
                        st.alloc_failures,
                        st.io_requests
                    );
                }
                parked_max.fetch_max(st.futures_parked, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(
                    if std::env::var_os("ASYNC_DEBUG").is_some() {
                        100_000
                    } else {
                        200
                    },
                ));
            }
        })
    };
    let rt = runtime();
    let checked = rt.block_on(async {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut tasks = Vec::with_capacity(10_000);
        for _ in 0..10_000 {
            let file = file.clone();
            // Any size up to 3 pages at any offset: misses of one and several folios.
            let size = 1 + rng.below(3 * 4096) as usize;
            let offset = rng.below(len - size as u64);
            tasks.push(tokio::spawn(async move {
                let mut buf = vec![0u8; size];
                let n = file.read_at_async(&mut buf, offset).await.expect("read");
                assert_eq!(n, size, "at {offset}");
                if let Err(at) = check_pattern(SALT, offset, &buf) {
                    panic!("wrong byte at {at} (read of {size} at {offset})");
                }
                n as u64
            }));
        }
        let mut bytes = 0;
        for t in tasks {
            bytes += t.await.expect("the task");
        }
        bytes
    });
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let s = cache.stats();
    assert!(checked > 10_000 * 4096, "{checked} bytes checked");
    assert!(s.misses > 5_000, "most reads miss: {s:?}");
    assert_eq!(s.futures_parked, 0, "no waker left behind");
    let most = parked_max.load(Ordering::Relaxed);
    assert!(
        most > 2,
        "futures parked at once: {most}; with the 2 runtime threads blocking in reads it would be 0"
    );
}

#[test]
fn ten_thousand_concurrent_reads_on_two_threads() {
    ten_thousand_reads(BackendKind::Auto);
}

#[test]
fn ten_thousand_concurrent_reads_on_two_threads_pread_pool() {
    ten_thousand_reads(BackendKind::Pread);
}

/// Polls `fut` at most `polls` times with a waker that is never woken, sleeping a
/// little between polls; then drops it.
fn poll_then_drop<F: Future>(fut: F, polls: u64, pause: Duration) -> Option<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut fut = pin!(fut);
    for _ in 0..polls {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return Some(out);
        }
        std::thread::sleep(pause);
    }
    None
}

#[test]
fn dropped_futures_leak_nothing() {
    let _one = GAUGE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = test_dir();
    let path = dir.path().join("f");
    let len: u64 = 64 << 20;
    write_pattern_file(&path, SALT, len);
    let cache = cache(32 << 20, BackendKind::Auto);
    let file = Arc::new(cache.open(&path).unwrap());
    file.advise(0, len, Advice::Random).unwrap();

    let rt = runtime();
    let mut rng = Rng(17);
    let mut ranges = Vec::new();
    for i in 0..1_000u64 {
        let size = 1 + rng.below(2 * 4096) as usize;
        let offset = rng.below(len - size as u64);
        ranges.push((offset, size));
        let polls = rng.below(4);
        let file = file.clone();
        match i % 3 {
            // On this thread: never polled, polled once (parked), or polled a few times.
            0 => {
                let mut buf = vec![0u8; size];
                if let Some(n) = poll_then_drop(
                    file.read_at_async(&mut buf, offset),
                    polls,
                    Duration::from_micros(rng.below(200)),
                ) {
                    assert_eq!(n.unwrap(), size);
                    check_pattern(SALT, offset, &buf).unwrap();
                }
            }
            // On the runtime: a task aborted while its read is in flight, or raced
            // against a timeout that drops it parked (or woken and not polled again).
            1 => {
                let task = rt.spawn(async move {
                    let mut buf = vec![0u8; size];
                    file.read_at_async(&mut buf, offset).await.unwrap();
                    check_pattern(SALT, offset, &buf).unwrap();
                });
                if polls % 2 == 0 {
                    task.abort();
                }
                let _ = rt.block_on(task);
            }
            _ => {
                let wait = Duration::from_micros(rng.below(300));
                rt.block_on(async move {
                    let page = tokio::time::timeout(wait, file.get_page_async(offset)).await;
                    if let Ok(page) = page {
                        let page = page.unwrap();
                        let at = offset - page.offset_bytes();
                        check_pattern(SALT, page.offset_bytes(), &page[..]).unwrap();
                        assert!(at < page.len() as u64);
                    }
                });
            }
        }
    }
    assert_eq!(
        cache.stats().futures_parked,
        0,
        "every dropped future took its waker out"
    );
    // Every read the dropped futures started completes and holds the file's bytes.
    for &(offset, size) in &ranges {
        let mut buf = vec![0u8; size];
        assert_eq!(file.read_at(&mut buf, offset).unwrap(), size);
        check_pattern(SALT, offset, &buf).unwrap();
    }
    // No folio stays pinned: dropping the whole file leaves nothing cached.
    file.advise(0, len, Advice::DontNeed).unwrap();
    let s = cache.stats();
    assert_eq!(
        s.cached_bytes, 0,
        "a dropped future kept a folio pinned: {s:?}"
    );
    assert_eq!(s.futures_parked, 0);
}

#[test]
fn get_page_async_pins_the_page() {
    let _one = GAUGE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = test_dir();
    let path = dir.path().join("f");
    let len = (1 << 20) + 1000;
    write_pattern_file(&path, SALT, len);
    let cache = cache(16 << 20, BackendKind::Auto);
    let file: File = cache.open(&path).unwrap();
    let rt = runtime();
    rt.block_on(async {
        for offset in [0, 4096 * 7 + 5, len - 1] {
            let page = file.get_page_async(offset).await.unwrap();
            assert!(page.offset_bytes() <= offset);
            assert!(offset < page.offset_bytes() + page.len() as u64);
            check_pattern(SALT, page.offset_bytes(), &page[..]).unwrap();
        }
        let eof = file.get_page_async(len).await.unwrap_err();
        assert_eq!(eof.kind(), std::io::ErrorKind::UnexpectedEof);
    });
    assert_eq!(cache.stats().futures_parked, 0);
}
