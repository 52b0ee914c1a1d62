//! Replays small generated traces through the real cache and checks what any correct
//! cache must show, whatever its policy: every access is a hit or a miss, the miss ratio
//! is a ratio, the cache's own counters agree with the replay's, and a cache larger than
//! the working set misses each page exactly once (cold misses only).
//!
//! The comparison with libCacheSim is a script (`tools/libcachesim_compare.py`), not a
//! test: it needs a Python environment.

use folio_trace::generate::{self, ScanMixParams, ZipfParams};
use folio_trace::replay::{Policy, Replayer, RunResult, CACHE_PAGES_MIN};
use folio_trace::trace::{self, Trace};

const ACCESSES: u64 = 20_000;

fn zipf_trace() -> Trace {
    let params = ZipfParams {
        alpha: 0.9,
        accesses: ACCESSES,
        pages: 2_000,
        files: 2,
        seed: 42,
    };
    generate::zipf(&params).unwrap().collect()
}

fn scan_mix_trace() -> Trace {
    let params = ScanMixParams {
        accesses: ACCESSES,
        hot_pages: 300,
        scan_pages: 1_500,
        scan_gap: 2_000,
        ..ScanMixParams::default()
    };
    generate::scan_mix(&params).unwrap().collect()
}

/// The invariants every run must satisfy.
fn check_run(r: &RunResult, trace: &Trace) {
    let what = format!("{} at {} pages", r.policy.name(), r.cache_pages);
    assert_eq!(
        r.eviction,
        r.policy.name(),
        "{what}: the cache ran another policy"
    );
    assert_eq!(r.accesses, trace.len() as u64, "{what}");
    assert_eq!(r.unclassified, 0, "{what}: accesses neither hit nor miss");
    assert_eq!(r.hits + r.misses, r.accesses, "{what}");
    assert_eq!(
        r.cache_misses, r.misses,
        "{what}: the cache counted other misses"
    );
    assert!(
        (0.0..=1.0).contains(&r.miss_ratio),
        "{what}: {}",
        r.miss_ratio
    );
    assert_eq!(r.miss_ratio, r.misses as f64 / r.accesses as f64, "{what}");
    // At least the cold misses; evictions never exceed what was brought in.
    assert!(r.misses >= trace.distinct_pages() as u64, "{what}");
    assert!(r.evicted_pages <= r.misses, "{what}");
    assert!(r.cache_frames >= CACHE_PAGES_MIN, "{what}");
}

/// Runs both policies at a tiny, a middling and a larger-than-the-working-set cache.
fn check_trace(trace: &Trace) {
    let distinct = trace.distinct_pages() as u64;
    // Twice the working set: room for every page even with the reclaim watermarks'
    // free reserve.
    let large = (2 * distinct).max(CACHE_PAGES_MIN);
    let replayer = Replayer::new(trace, None).unwrap();
    for policy in Policy::ALL {
        let tiny = replayer.run(policy, CACHE_PAGES_MIN).unwrap();
        let middling = replayer.run(policy, distinct / 4).unwrap();
        let roomy = replayer.run(policy, large).unwrap();
        for r in [&tiny, &middling, &roomy] {
            check_run(r, trace);
        }
        assert_eq!(roomy.misses, distinct, "{policy:?}: only cold misses");
        assert_eq!(roomy.evicted_pages, 0, "{policy:?}");
        assert!(tiny.miss_ratio > middling.miss_ratio, "{policy:?}");
        assert!(middling.miss_ratio > roomy.miss_ratio, "{policy:?}");
    }
}

#[test]
fn zipf_replay_invariants() {
    check_trace(&zipf_trace());
}

#[test]
fn scan_mix_replay_invariants() {
    check_trace(&scan_mix_trace());
}

/// A trace written as CSV and read back replays to the same counts.
#[test]
fn csv_file_round_trip() {
    let trace = zipf_trace();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    trace::write_csv(&mut file, trace.accesses().iter().copied()).unwrap();
    drop(file);
    let read = trace::read_csv_file(&path).unwrap();
    assert_eq!(read, trace);
}

#[test]
fn rejects_a_cache_below_the_minimum() {
    let replayer = Replayer::new(&zipf_trace(), None).unwrap();
    let e = replayer
        .run(Policy::S3Fifo, CACHE_PAGES_MIN - 1)
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("below folio's minimum"), "{e}");
}

/// The replay leaves nothing behind: its sparse files go with it.
#[test]
fn temporary_files_are_removed() {
    let replayer = Replayer::new(&scan_mix_trace(), None).unwrap();
    let dir = replayer.dir().to_path_buf();
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    drop(replayer);
    assert!(!dir.exists());
}
