//! A domain file's futures and forced readahead (docs/sharing.md "A domain file's futures
//! and forced readahead"; file/async_read.rs, "A domain file"; shared/offload.rs): a
//! future copies the pages cached at its first poll and reads the rest on a worker thread;
//! `readahead` and `WillNeed` read a range into the domain on a worker; `read_many_async`
//! reads its ranges' misses at once. Every byte is checked; the domain checks and frees
//! every frame at the end.

use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::attach::{Member, Patience};
use super::tests::{DomainHome, Rng};
use super::tests_read::{check_all, config, domain_cache, reclaim_everything, stamped, write_file};
use crate::{Advice, DomainStats, File};

/// The domain's slots: as a cache's build makes them (one pin bit each).
const SLOTS: u16 = super::queue::PIN_SLOTS;

const PAGE: u64 = 4096;

/// The threads of this process named as the workers of shared/offload.rs.
fn workers_running() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter(|task| {
            let comm = task.as_ref().unwrap().path().join("comm");
            std::fs::read_to_string(comm).is_ok_and(|name| name.trim() == "folio-domain-io")
        })
        .count()
}

/// `read_at_async` of `len` bytes at `offset` run to its end on this thread: the bytes,
/// or the error.
fn read_async(file: &File, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0xa5u8; len];
    let n = block_on(file.read_at_async(&mut buf, offset))?;
    buf.truncate(n);
    Ok(buf)
}

/// Polls `future` to its end on this thread (a current-thread tokio runtime: the future
/// needs none, any executor polls it).
fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(future)
}

/// The file's bytes `[offset, offset + len)`, cut at its end.
fn expected(all: &[u8], offset: u64, len: usize) -> &[u8] {
    let start = (offset as usize).min(all.len());
    &all[start..(start + len).min(all.len())]
}

/// One handle advised `Random` (no window: each miss reads its own pages, so what is
/// cached is what the test read) of a 64-page file:
/// - a future of a cached page is `Ready` at its first poll with the bytes, a hit, no miss;
/// - a future of an uncached page is read by a worker (one runs after its first poll),
///   one miss; one across a cached and an uncached page, one miss; past the end `Ok(0)` at
///   the first poll; across the end, short; an offset that overflows, `InvalidInput`;
/// - `readahead` of 8 pages reads them into the domain on a worker (the handle's next
///   reads of them all hits), and `WillNeed` of 4 more the same;
/// - `read_many_async`: ranges cached, uncached and past the end, each result in order;
/// - `get_page` and `get_page_async` still `Unsupported`.
#[test]
fn a_domain_files_futures_copy_hits_at_once_and_read_misses_on_a_worker() {
    const PAGES: u64 = 64;
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let name = "async-one";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 1024)).unwrap();
    let cache = domain_cache(home.path(), name, 1 << 20);
    let len = PAGES * PAGE - 100;
    let all = stamped(0, len);
    let file = cache.open(write_file(data.path(), 0, len)).unwrap();
    assert!(file.is_domain_file());
    file.advise(0, len, Advice::Random).unwrap();
    let stats = || cache.domain_stats().unwrap();

    // Page 3 cached by a read; a future of it hits at its first poll.
    let mut page = vec![0u8; PAGE as usize];
    assert_eq!(file.read_at(&mut page, 3 * PAGE).unwrap(), PAGE as usize);
    let before = stats();
    let mut small = vec![0u8; 200];
    {
        let mut cx = Context::from_waker(Waker::noop());
        let mut future = pin!(file.read_at_async(&mut small, 3 * PAGE + 100));
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(200)) => {}
            other => panic!("a cached page's future at its first poll: {other:?}"),
        }
    }
    assert_eq!(small, expected(&all, 3 * PAGE + 100, 200));
    let after = stats();
    assert_eq!(
        (after.hits - before.hits, after.misses - before.misses),
        (1, 0),
        "{after:?}"
    );

    // Page 10 not cached: read by a worker, one miss.
    {
        let mut buf = vec![0u8; 300];
        let n = {
            let mut cx = Context::from_waker(Waker::noop());
            let mut future = pin!(file.read_at_async(&mut buf, 10 * PAGE + 7));
            let first = future.as_mut().poll(&mut cx);
            assert!(
                workers_running() > 0,
                "no worker after a miss's first poll: {first:?}"
            );
            drop(first);
            block_on(future).unwrap()
        };
        assert_eq!(&buf[..n], expected(&all, 10 * PAGE + 7, 300));
    }
    let before_cross = stats();
    assert_eq!(before_cross.misses - after.misses, 1, "{before_cross:?}");
    // Across cached page 3 and uncached page 4: the hit copied, the miss read.
    let across = read_async(&file, 4 * PAGE - 50, 150).unwrap();
    assert_eq!(across, expected(&all, 4 * PAGE - 50, 150));
    let after_cross = stats();
    assert_eq!(
        after_cross.misses - before_cross.misses,
        1,
        "{after_cross:?}"
    );
    // The end of the file: past it nothing, across it short; an overflow refused.
    assert_eq!(read_async(&file, len + 10, 100).unwrap(), b"");
    let tail = read_async(&file, len - 30, 100).unwrap();
    assert_eq!(tail, expected(&all, len - 30, 100));
    assert_eq!(
        read_async(&file, u64::MAX - 10, 100).unwrap_err().kind(),
        std::io::ErrorKind::InvalidInput
    );

    // Forced readahead of pages 40-47 and `WillNeed` of 50-53, read on a worker: waited
    // for by the domain's count of pages read ahead, then read again as hits alone.
    let before_ahead = stats();
    file.readahead(40 * PAGE, 8 * PAGE).unwrap();
    file.advise(50 * PAGE, 4 * PAGE, Advice::WillNeed).unwrap();
    let mut patience = Patience::new(Duration::from_secs(60));
    while stats().pages_read_ahead < before_ahead.pages_read_ahead + 12 {
        assert!(
            patience.lasts(),
            "the readahead's 12 pages never came: {:?}",
            stats()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let ahead = stats();
    for p in (40..48).chain(50..54) {
        assert_eq!(file.read_at(&mut page, p * PAGE).unwrap(), PAGE as usize);
        assert!(page == expected(&all, p * PAGE, PAGE as usize), "page {p}");
    }
    let after_ahead = stats();
    assert_eq!(
        (
            after_ahead.misses - ahead.misses,
            after_ahead.hits - ahead.hits
        ),
        (0, 12),
        "{after_ahead:?}"
    );
    assert_eq!(
        after_ahead.pages_read_ahead - before_ahead.pages_read_ahead,
        12,
        "{after_ahead:?}"
    );

    // A batch: cached (page 3), uncached (20, 30-31), past the end, one after another.
    let mut bufs = [
        vec![0u8; 10],
        vec![0u8; 4096],
        vec![0u8; 2 * 4096],
        vec![0u8; 5],
    ];
    let offsets = [3 * PAGE + 1, 20 * PAGE, 30 * PAGE + 9, len + 1];
    let mut reads: Vec<(u64, &mut [u8])> = offsets
        .iter()
        .zip(bufs.iter_mut())
        .map(|(&o, b)| (o, b.as_mut_slice()))
        .collect();
    let results = block_on(file.read_many_async(&mut reads));
    let lens: Vec<usize> = results.into_iter().map(Result::unwrap).collect();
    for ((offset, buf), n) in offsets.iter().zip(&bufs).zip(&lens) {
        assert_eq!(
            &buf[..*n],
            expected(&all, *offset, buf.len()),
            "at {offset}"
        );
    }
    assert_eq!(lens, [10, 4096, 2 * 4096, 0]);

    assert_eq!(
        file.get_page(0).unwrap_err().kind(),
        std::io::ErrorKind::Unsupported
    );
    assert_eq!(
        block_on(file.get_page_async(0)).unwrap_err().kind(),
        std::io::ErrorKind::Unsupported
    );
    drop(file);
    drop(cache);
    wait_for_workers();
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// Three files (96 pages) read through a domain of 24 frames by 64 tasks of a tokio
/// runtime of 4 threads: each task's futures (`read_at_async` of 1 byte to 3 pages, and
/// batches of 4 ranges by `read_many_async`) at random places, with a `readahead` now and
/// then; reclaim runs on most misses, workers and tasks meet on the same frames. Every
/// byte checked; then the domain checks and a reclaim frees every frame.
#[test]
fn tasks_of_a_runtime_read_three_files_through_few_frames() {
    const FILES: u64 = 3;
    const TASKS: u64 = 64;
    const READS: u64 = 40;
    let file_len = |f: u64| [30 * PAGE, 25 * PAGE + 200, 40 * PAGE - 8][f as usize];
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..FILES)
        .map(|f| write_file(data.path(), f, file_len(f)))
        .collect();
    let name = "async-tasks";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 24)).unwrap();
    let cache = domain_cache(home.path(), name, 1 << 20);
    let files: Arc<Vec<File>> = Arc::new(paths.iter().map(|p| cache.open(p).unwrap()).collect());
    assert!(files.iter().all(File::is_domain_file));
    let expected_all: Arc<Vec<Vec<u8>>> =
        Arc::new((0..FILES).map(|f| stamped(f, file_len(f))).collect());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let wrong: usize = runtime.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let (files, expected_all) = (files.clone(), expected_all.clone());
                tokio::spawn(async move {
                    let mut rng = Rng(t + 1);
                    let mut wrong = 0;
                    let place = |rng: &mut Rng| {
                        let f = rng.below(FILES) as usize;
                        let offset = rng.below(file_len(f as u64) + 50);
                        let len = 1 + rng.below(3 * PAGE) as usize;
                        (f, offset, len)
                    };
                    let count = |buf: &[u8], want: &[u8]| {
                        assert_eq!(buf.len(), want.len(), "length");
                        want.iter().zip(buf).filter(|(a, b)| a != b).count()
                    };
                    for _ in 0..READS {
                        match rng.below(8) {
                            0 => {
                                let (f, offset, len) = place(&mut rng);
                                files[f].readahead(offset, len as u64).unwrap();
                            }
                            1 => {
                                let f = rng.below(FILES) as usize;
                                let places: Vec<(u64, usize)> = (0..4)
                                    .map(|_| {
                                        let (_, offset, len) = place(&mut rng);
                                        (offset, len)
                                    })
                                    .collect();
                                let mut bufs: Vec<Vec<u8>> =
                                    places.iter().map(|&(_, len)| vec![0xa5; len]).collect();
                                let mut reads: Vec<(u64, &mut [u8])> = places
                                    .iter()
                                    .zip(bufs.iter_mut())
                                    .map(|(&(offset, _), b)| (offset, b.as_mut_slice()))
                                    .collect();
                                let results = files[f].read_many_async(&mut reads).await;
                                for ((&(offset, len), buf), n) in
                                    places.iter().zip(&bufs).zip(results)
                                {
                                    let n = n.unwrap();
                                    wrong +=
                                        count(&buf[..n], expected(&expected_all[f], offset, len));
                                }
                            }
                            _ => {
                                let (f, offset, len) = place(&mut rng);
                                let mut buf = vec![0xa5u8; len];
                                let n = files[f].read_at_async(&mut buf, offset).await.unwrap();
                                wrong += count(&buf[..n], expected(&expected_all[f], offset, len));
                            }
                        }
                    }
                    wrong
                })
            })
            .collect();
        let mut wrong = 0;
        for task in tasks {
            wrong += task.await.unwrap();
        }
        wrong
    });
    let stats: DomainStats = cache.domain_stats().unwrap();
    eprintln!("{TASKS} tasks: {stats:?}");
    assert_eq!(wrong, 0, "wrong bytes read: {stats:?}");
    assert!(
        stats.hits > 0 && stats.misses > 0 && stats.reclaimed_frames > 0,
        "{stats:?}"
    );
    drop(runtime);
    drop(files);
    drop(cache);
    wait_for_workers();
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// Waits until no worker of shared/offload.rs has a job: a readahead's job holds its file
/// (and so the cache's membership, with the frames its magazines lease) until it ends,
/// and the domain's checks need it gone. Other tests' jobs in this process count too.
fn wait_for_workers() {
    let mut patience = Patience::new(Duration::from_secs(60));
    while super::offload::busy() > 0 {
        assert!(patience.lasts(), "the workers never finished their jobs");
        std::thread::sleep(Duration::from_millis(2));
    }
}
