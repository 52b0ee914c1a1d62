//! A `Cache` with a domain (issue 45 step 8's first slice, reader.rs): many threads of one
//! process reading through one `DomainReader` of few frames; caches of two processes (each
//! its own run of this test binary, started by `Command`: a process that builds a cache
//! starts threads, which a `fork` of the multi-threaded test harness must not) sharing one
//! domain, the second hitting every page the first read; 16 threads in each of two such
//! processes reading overlapping ranges of three files through few frames; a domain
//! cache's writable open (private) and a refused file (private, counted). Every byte is
//! checked; after the processes are gone the domain must check and free every frame.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::attach::Member;
use super::reader::DomainReader;
use super::tests::{DomainHome, Rng};
use super::tests_read::{check_all, config, domain_cache, reclaim_everything, stamped, write_file};
use crate::types::OpenMode;
use crate::DomainStats;

/// The environment a child run reads: its role, and where.
const ROLE: &str = "FOLIO_TEST_DOMAIN_ROLE";
const HOME: &str = "FOLIO_TEST_DOMAIN_HOME";
const NAME: &str = "FOLIO_TEST_DOMAIN_NAME";
const DATA: &str = "FOLIO_TEST_DOMAIN_DATA";
/// What a child prints before its result (after the harness's "test ... " on its line).
const RESULT: &str = "domain-child-result:";

/// The domain's slots: as a cache's build makes them (one pin bit each).
const SLOTS: u16 = super::queue::PIN_SLOTS;

const THREADS: usize = 16;
const FILES: u64 = 3;

fn file_len(file: u64) -> u64 {
    [30 * 4096, 25 * 4096 + 200, 40 * 4096 - 8][file as usize]
}

/// Reads `len` bytes at `offset` through `read` and counts the bytes that are not the
/// file's stamp.
fn wrong_bytes(
    read: impl FnOnce(&mut [u8], u64) -> std::io::Result<usize>,
    expected: &[u8],
    offset: u64,
    len: usize,
) -> usize {
    let mut buf = vec![0xa5u8; len];
    let got = read(&mut buf, offset).unwrap();
    let end = (offset as usize + len).min(expected.len());
    let want = &expected[(offset as usize).min(end)..end];
    assert_eq!(got, want.len(), "read at {offset} of {len}: length");
    want.iter().zip(&buf).filter(|(a, b)| a != b).count()
}

/// A read of `file` (its number) into a buffer at an offset, as `File::read_at`.
type ReadFile<'a> = dyn Fn(usize, &mut [u8], u64) -> std::io::Result<usize> + Sync + 'a;

/// `THREADS` threads, each `reads` reads of 1 byte to 3 pages at random places of the
/// `FILES` files through `read` (seeded by `seed` and the thread): the wrong bytes.
fn hammer(seed: u64, reads: u32, read: &ReadFile) -> usize {
    let expected: Vec<Vec<u8>> = (0..FILES).map(|f| stamped(f, file_len(f))).collect();
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let expected = &expected;
                scope.spawn(move || {
                    let mut rng = Rng(seed * 1000 + t as u64 + 1);
                    let mut wrong = 0;
                    for _ in 0..reads {
                        let f = rng.below(FILES) as usize;
                        let offset = rng.below(file_len(f as u64) + 50);
                        let len = 1 + rng.below(3 * 4096) as usize;
                        wrong += wrong_bytes(|b, o| read(f, b, o), &expected[f], offset, len);
                    }
                    wrong
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).sum()
    })
}

/// Many threads of one process read three files through one `DomainReader` of 24 frames
/// for 96 pages (reclaim on most misses, threads meeting on the same frames and locks, a
/// pin by a sibling's bit refused), every byte checked; then every structure checks and a
/// reclaim of everything frees every frame (no lease, pin or frame left).
#[test]
fn threads_of_one_process_read_through_one_domain_reader() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..FILES)
        .map(|f| write_file(data.path(), f, file_len(f)))
        .collect();
    let config = config(home.path(), "cache-threads", SLOTS, 24);
    // The test's own member keeps one steward and checks the domain at the end.
    let parent = Member::attach(&config).unwrap();
    {
        let reader = Arc::new(DomainReader::attach(&config).unwrap());
        let files: Vec<_> = paths
            .iter()
            .map(|p| {
                let file = std::fs::File::open(p).unwrap();
                reader
                    .admit(file, OpenMode::Buffered)
                    .unwrap()
                    .expect("the domain admits the file")
            })
            .collect();
        let wrong = hammer(1, 300, &|f, buf, offset| files[f].read_at(buf, offset));
        let (counters, refused, _) = reader.counters();
        eprintln!("{THREADS} threads, one reader: {counters:?}");
        assert_eq!(wrong, 0, "wrong bytes read: {counters:?}");
        assert_eq!(refused, 0);
        assert!(
            counters.hits > 0 && counters.misses > 0 && counters.reclaimed > 0,
            "{counters:?}"
        );
        drop(files);
        check_all(parent.domain());
    }
    // The reader is gone: its magazines returned, its member detached.
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// The child roles: each builds a `Cache` with the domain named in its environment
/// (`CacheBuilder::domain`, `segment_dir` the test's home) and reads the files in `DATA`
/// through it, every byte checked, then prints `RESULT` with its wrong bytes and its
/// `DomainStats`. Run only by the tests below (`child`); with no role, nothing.
#[test]
#[ignore]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let home = PathBuf::from(std::env::var(HOME).unwrap());
    let data = PathBuf::from(std::env::var(DATA).unwrap());
    let cache = domain_cache(&home, &std::env::var(NAME).unwrap(), 1 << 20);
    let path = |f: u64| data.join(format!("file-{f}"));
    let wrong = match role.as_str() {
        "whole" => {
            let file = cache.open(path(0)).unwrap();
            assert!(file.is_domain_file());
            let len = file.len();
            wrong_bytes(|b, o| file.read_at(b, o), &stamped(0, len), 0, len as usize)
        }
        "threads" => {
            let files: Vec<_> = (0..FILES).map(|f| cache.open(path(f)).unwrap()).collect();
            assert!(files.iter().all(|f| f.is_domain_file()));
            let seed = std::process::id() as u64;
            hammer(seed, 150, &|f, buf, offset| files[f].read_at(buf, offset))
        }
        "sequential" => {
            // The file from its start to its end in 4 KiB reads, as a scan reads it, once
            // the other scanner is ready too (a file each in DATA: a bound, not a timing),
            // so that the two start together and their windows meet in flight (started
            // as they came, one had often scanned the file before the other began).
            let file = cache.open(path(0)).unwrap();
            assert!(file.is_domain_file());
            std::fs::write(data.join(format!("ready-{}", std::process::id())), b"").unwrap();
            let ready = || {
                std::fs::read_dir(&data)
                    .unwrap()
                    .filter(|e| {
                        e.as_ref()
                            .unwrap()
                            .file_name()
                            .to_string_lossy()
                            .starts_with("ready-")
                    })
                    .count()
            };
            let deadline = Instant::now() + Duration::from_secs(60);
            while ready() < 2 {
                assert!(
                    Instant::now() < deadline,
                    "the other scanner never got ready"
                );
                std::thread::yield_now();
            }
            let len = file.len();
            let expected = stamped(0, len);
            (0..len)
                .step_by(4096)
                .map(|at| wrong_bytes(|b, o| file.read_at(b, o), &expected, at, 4096))
                .sum()
        }
        other => panic!("no role {other}"),
    };
    let s = cache.domain_stats().expect("a domain cache");
    println!(
        "{RESULT} {wrong} {} {} {} {} {} {} {} {} {} {} {} {} {} {}",
        s.hits,
        s.misses,
        s.preads,
        s.conflicts,
        s.reclaimed_frames,
        s.uncached,
        s.sibling_pinned,
        s.pages_read_ahead,
        s.windows,
        s.duplicate_reads,
        s.quota_frames,
        s.owned_frames,
        s.share_frames,
        s.floor_frames
    );
}

/// Starts this test binary's `child` test in a process of its own, as `role`.
fn start_child(role: &str, home: &Path, name: &str, data: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "shared::tests_cache::child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env(HOME, home)
        .env(NAME, name)
        .env(DATA, data)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A child's wrong bytes and stats, once it exited 0 (within two minutes: else killed, and
/// the test fails).
fn finish_child(mut child: Child, what: &str) -> (u64, DomainStats) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: never exited");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{what}: {}\n{stdout}",
        output.status
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once(RESULT).map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("{what} printed no result:\n{stdout}"));
    let v: Vec<u64> = line
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    let stats = DomainStats {
        hits: v[1],
        misses: v[2],
        preads: v[3],
        conflicts: v[4],
        reclaimed_frames: v[5],
        uncached: v[6],
        sibling_pinned: v[7],
        pages_read_ahead: v[8],
        windows: v[9],
        duplicate_reads: v[10],
        quota_frames: v[11],
        owned_frames: v[12],
        share_frames: v[13],
        floor_frames: v[14],
        ..DomainStats::default()
    };
    (v[0], stats)
}

/// Two processes each build a `Cache` with one domain: the first reads a 41-page file in
/// one call (one miss, its window and the windows its markers start: 8 pages each, the
/// cap of a 64-frame domain), then the second reads it and hits every page (0 misses, 0
/// reads from the file); then, both gone, the domain checks and a reclaim frees every
/// frame. Each reports its budget (`DomainStats`): the first owns the pages it brought
/// in, the second none; with the test's own member attached beside each, a share is
/// half the quota and a floor half a share.
#[test]
fn a_second_processs_cache_hits_every_page_the_first_read() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let len = 40 * 4096 + 100;
    write_file(data.path(), 0, len);
    let name = "cache-two";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 64)).unwrap();
    let (first_wrong, first) = finish_child(
        start_child("whole", home.path(), name, data.path()),
        "first",
    );
    let (second_wrong, second) = finish_child(
        start_child("whole", home.path(), name, data.path()),
        "second",
    );
    eprintln!("first: {first:?}\nsecond: {second:?}");
    assert_eq!((first_wrong, second_wrong), (0, 0), "wrong bytes");
    let pages = len.div_ceil(4096);
    assert_eq!(
        (first.misses, first.preads, first.pages_read_ahead),
        (1, pages.div_ceil(8), pages - 1),
        "{first:?}"
    );
    assert_eq!(
        (second.hits, second.misses, second.preads),
        (pages, 0, 0),
        "{second:?}"
    );
    assert_eq!((first.owned_frames, second.owned_frames), (pages, 0));
    for s in [&first, &second] {
        assert!(s.quota_frames > 0, "{s:?}");
        assert_eq!(
            (s.share_frames, s.floor_frames),
            (s.quota_frames / 2, s.quota_frames / 2 / 2),
            "{s:?}"
        );
    }
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// Two processes, each with a domain cache and 16 threads reading overlapping random
/// ranges of three files (96 pages) through a domain of 40 frames at once: every byte
/// right in both; then the domain checks and a reclaim frees every frame.
#[test]
fn threads_of_two_processes_read_three_files_through_few_frames() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    for f in 0..FILES {
        write_file(data.path(), f, file_len(f));
    }
    let name = "cache-threads-two";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 40)).unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| start_child("threads", home.path(), name, data.path()))
        .collect();
    let mut totals = DomainStats::default();
    for (i, child) in children.into_iter().enumerate() {
        let (wrong, stats) = finish_child(child, &format!("process {i}"));
        eprintln!("process {i}: {stats:?}");
        assert_eq!(wrong, 0, "process {i}: wrong bytes: {stats:?}");
        totals.hits += stats.hits;
        totals.reclaimed_frames += stats.reclaimed_frames;
    }
    assert!(totals.hits > 0 && totals.reclaimed_frames > 0, "{totals:?}");
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// Two processes, each with a domain cache, read one 160-page file from start to end in
/// 4 KiB reads at once (issue 45: "readahead of one process never repeats another's in
/// flight"): every byte right in both; each reads windows, not pages (fewer reads of the
/// file than a quarter of the pages: about a tenth alone); **no page read by both** (a
/// window the other was reading is in its index in flight and waited for: queue.rs "In
/// flight"; before, 60-160 of the 160 pages were read by both); the reads of the file
/// summed printed; then the domain checks and a reclaim frees every frame.
#[test]
fn two_processes_scanning_one_file_at_once_never_read_a_page_twice() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let pages = 160;
    write_file(data.path(), 0, pages * 4096);
    let name = "cache-scan-two";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 512)).unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| start_child("sequential", home.path(), name, data.path()))
        .collect();
    let (mut duplicates, mut preads) = (0, 0);
    for (i, child) in children.into_iter().enumerate() {
        let (wrong, stats) = finish_child(child, &format!("process {i}"));
        eprintln!("scanner {i}: {stats:?}");
        assert_eq!(wrong, 0, "process {i}: wrong bytes: {stats:?}");
        assert!(stats.preads < pages / 4, "process {i}: {stats:?}");
        assert_eq!(stats.duplicate_reads, 0, "process {i}: {stats:?}");
        duplicates += stats.duplicate_reads;
        preads += stats.preads;
    }
    eprintln!("reads of the file by both: {preads}");
    eprintln!("pages read by both: {duplicates}");
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// A domain cache's file opened for writing keeps the private path: it reads and writes
/// correctly and nothing of it goes to the domain; a read-only open of a file changed since
/// the domain recorded it, while a handle keeps the record open, is refused by the domain
/// and read privately, correctly, counted; `get_page` of a domain file says `Unsupported`
/// (its futures: tests_async.rs).
#[test]
fn a_domain_caches_writable_and_refused_files_read_privately() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let name = "cache-private";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 64)).unwrap();
    let cache = domain_cache(home.path(), name, 1 << 20);
    // Written through the cache: private.
    let written = data.path().join("written");
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&written)
        .unwrap();
    assert!(!file.is_domain_file());
    let bytes = stamped(7, 5 * 4096 + 10);
    assert_eq!(file.write_at(&bytes, 0).unwrap(), bytes.len());
    let mut back = vec![0u8; bytes.len()];
    assert_eq!(file.read_at(&mut back, 0).unwrap(), bytes.len());
    assert_eq!(back, bytes);
    file.sync_all().unwrap();
    drop(file);
    assert_eq!(std::fs::read(&written).unwrap(), bytes);
    let stats = cache.domain_stats().unwrap();
    assert_eq!((stats.hits, stats.misses), (0, 0), "{stats:?}");
    // Read-only: through the domain.
    let path = write_file(data.path(), 0, 3 * 4096);
    let file = cache.open(&path).unwrap();
    assert!(file.is_domain_file());
    let mut page = vec![0u8; 4096];
    assert_eq!(file.read_at(&mut page, 4096).unwrap(), 4096);
    assert_eq!(page, stamped(0, 3 * 4096)[4096..8192]);
    assert_eq!(
        file.get_page(0).unwrap_err().kind(),
        std::io::ErrorKind::Unsupported
    );
    drop(file);
    assert_eq!(cache.domain_stats().unwrap().misses, 1);
    // Changed since the domain recorded it (new bytes, and a modification time surely
    // not the recorded one) while a handle keeps its record open: refused, read
    // privately (open nowhere, its record would be dropped and made again: tests_records).
    let holder = cache.open(&path).unwrap();
    assert!(holder.is_domain_file());
    std::fs::write(&path, stamped(1, 3 * 4096)).unwrap();
    let later = std::fs::metadata(&path).unwrap().modified().unwrap() + Duration::from_secs(7);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(later)
        .unwrap();
    let file = cache.open(&path).unwrap();
    assert!(!file.is_domain_file());
    assert_eq!(file.read_at(&mut page, 4096).unwrap(), 4096);
    assert_eq!(page, stamped(1, 3 * 4096)[4096..8192]);
    assert_eq!(cache.domain_stats().unwrap().files_refused, 1);
    drop(file);
    drop(holder);
    drop(cache);
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// A domain file's advice reaches its window through the domain (file/advise.rs): a
/// handle advised `Random` reads the even pages of a 64-page file, then the odd ones,
/// each odd page's predecessor cached (which makes a miss look like a sequential
/// stream's: the window a random reader of a mostly cached file read at each miss), and
/// reads no page ahead: 64 misses, 64 reads of the file, no window. Then `Normal` on a
/// second handle of another file: the same reads open windows and read pages ahead.
/// Without the advice's forward to the domain (checked by leaving it out) the `Random`
/// handle read 16 windows and 48 pages ahead.
#[test]
fn a_domain_files_random_advice_turns_its_domain_readahead_off() {
    const PAGES: u64 = 64;
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let name = "cache-advice";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 1024)).unwrap();
    let cache = domain_cache(home.path(), name, 1 << 20);
    let evens_then_odds = |file: &crate::File, id: u64| {
        let expected = stamped(id, PAGES * 4096);
        let mut page = vec![0u8; 4096];
        for page_no in (0..PAGES).step_by(2).chain((1..PAGES).step_by(2)) {
            let at = (page_no * 4096) as usize;
            assert_eq!(file.read_at(&mut page, at as u64).unwrap(), 4096);
            assert!(
                page == expected[at..at + 4096],
                "page {page_no}: wrong bytes"
            );
        }
    };
    let random = cache
        .open(write_file(data.path(), 0, PAGES * 4096))
        .unwrap();
    assert!(random.is_domain_file());
    random
        .advise(0, PAGES * 4096, crate::Advice::Random)
        .unwrap();
    evens_then_odds(&random, 0);
    let after_random = cache.domain_stats().unwrap();
    eprintln!("advised Random: {after_random:?}");
    assert_eq!(
        (after_random.windows, after_random.pages_read_ahead),
        (0, 0),
        "a Random handle read ahead through the domain: {after_random:?}"
    );
    assert_eq!(
        (after_random.misses, after_random.preads),
        (PAGES, PAGES),
        "{after_random:?}"
    );
    drop(random);
    let normal = cache
        .open(write_file(data.path(), 1, PAGES * 4096))
        .unwrap();
    normal
        .advise(0, PAGES * 4096, crate::Advice::Normal)
        .unwrap();
    evens_then_odds(&normal, 1);
    let after_normal = cache.domain_stats().unwrap();
    eprintln!("then Normal: {after_normal:?}");
    assert!(
        after_normal.windows > 0 && after_normal.pages_read_ahead > 0,
        "a Normal handle never read ahead: {after_normal:?}"
    );
    drop(normal);
    drop(cache);
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}
