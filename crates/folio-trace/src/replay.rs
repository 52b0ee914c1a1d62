//! Replay: feeds a trace through a real folio cache and counts what hit and what missed.
//!
//! The cache is built as the measurement needs it, so that the miss ratio is the eviction
//! policy's and nothing else's:
//!
//! - one 4 KiB folio per page (`folio_order_max(0)`): a trace access is one page, and a
//!   larger folio would bring neighbours in for free;
//! - no readahead (`readahead_max_bytes(0)`): every page the cache holds was asked for;
//! - the null backend: a miss runs the real miss path (allocation, reclaim, insertion,
//!   completion) with the read itself taken out, so a million accesses take seconds.
//!
//! Each distinct `file_id` of the trace becomes a sparse file in a temporary directory,
//! long enough to hold the trace's highest page of that file; a fresh cache opens all of
//! them for each run. An access is one `File::read_at` of 4 KiB at `page_index * 4096`.
//!
//! # What is counted
//!
//! After each access the replay reads `Cache::stats()` and classifies the access by which
//! counter moved: a miss if `misses` grew by one, a hit if `hits` grew by one and `misses`
//! did not. (`hits` alone cannot tell: as of this writing the cache also counts as a hit
//! the look-up that finds a missed page once it has been read, so over a run
//! `Stats::hits` is the hits plus the misses.) With order-0 folios, no readahead, and one
//! thread, every access is one or the other; anything else is counted as `unclassified`
//! (a test asserts there are none).
//! The miss ratio is misses / accesses, cold misses included, as libCacheSim counts it.
//!
//! Limits: one thread (the policies are compared on one order of events); the cache
//! rounds capacity to whole frames, keeps at least `folio::CAPACITY_BYTES_MIN`, and may keep
//! a few frames free as a watermark, so results are reported against the capacity asked
//! for, with the frames the cache actually has beside it.

use std::fs::OpenOptions;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use folio::{EvictionKind, PAGE_BYTES};
use serde::Serialize;

use crate::trace::{PageIndex, Trace};

/// An eviction policy of folio, by the name the command line and the reports use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Policy {
    #[serde(rename = "s3fifo")]
    S3Fifo,
    #[serde(rename = "lru")]
    Lru,
}

impl Policy {
    pub const ALL: [Policy; 2] = [Policy::S3Fifo, Policy::Lru];

    pub fn name(self) -> &'static str {
        match self {
            Policy::S3Fifo => "s3fifo",
            Policy::Lru => "lru",
        }
    }

    /// The folio policy behind the name: `lru` is the kernel-like two-list LRU.
    pub fn eviction_kind(self) -> EvictionKind {
        match self {
            Policy::S3Fifo => EvictionKind::S3Fifo,
            Policy::Lru => EvictionKind::TwoListLru,
        }
    }
}

/// The smallest cache a run accepts, in pages: folio's own minimum.
pub const CACHE_PAGES_MIN: u64 = folio::CAPACITY_BYTES_MIN / PAGE_BYTES as u64;

/// What one run of a trace through one cache counted.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunResult {
    pub policy: Policy,
    /// The policy the cache says it runs (`Stats::eviction`).
    pub eviction: String,
    /// The capacity asked for, and the frames the cache has.
    pub cache_pages: u64,
    pub cache_frames: u64,
    pub accesses: u64,
    /// Accesses classified by which counter moved (module docs).
    pub hits: u64,
    pub misses: u64,
    pub unclassified: u64,
    /// misses / accesses.
    pub miss_ratio: f64,
    /// The cache's own totals over the run, to check the classification against.
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub evicted_pages: u64,
    /// Insertions that found a shadow entry, and those the policy took for refaults
    /// within the workingset (S3-FIFO: ghost hits).
    pub refaults: u64,
    pub workingset_refaults: u64,
    /// Seconds of the access loop, per-access counter reads included.
    pub seconds: f64,
}

/// A trace made ready for replay: its files created, its accesses renumbered to them.
#[derive(Debug)]
pub struct Replayer {
    /// Deleted, with the files in it, when the replayer is dropped.
    dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
    /// (index into `paths`, page).
    accesses: Vec<(u32, PageIndex)>,
}

impl Replayer {
    /// Creates one sparse file per file of the trace, in a new temporary directory under
    /// `parent` (the system's temporary directory if `None`).
    pub fn new(trace: &Trace, parent: Option<&Path>) -> io::Result<Replayer> {
        let mut builder = tempfile::Builder::new();
        builder.prefix("folio-trace-");
        let dir = match parent {
            Some(parent) => builder.tempdir_in(parent)?,
            None => builder.tempdir()?,
        };
        let files = trace.files();
        let mut paths = Vec::with_capacity(files.len());
        for (file, page_max) in &files {
            let path = dir.path().join(format!("file-{}", file.0));
            let f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)?;
            f.set_len(page_max.offset_bytes() + PAGE_BYTES as u64)?;
            paths.push(path);
        }
        let accesses = trace
            .accesses()
            .iter()
            .map(|a| {
                let slot = files
                    .binary_search_by_key(&a.file, |(f, _)| *f)
                    .expect("files() lists every file of the trace");
                (slot as u32, a.page)
            })
            .collect();
        Ok(Replayer {
            dir,
            paths,
            accesses,
        })
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Replays the whole trace through a new cache of `cache_pages` pages run by `policy`.
    ///
    /// Errors: `cache_pages` below [`CACHE_PAGES_MIN`] or too large for the cache; a
    /// failed open or read (which the null backend never causes).
    pub fn run(&self, policy: Policy, cache_pages: u64) -> io::Result<RunResult> {
        if cache_pages < CACHE_PAGES_MIN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a cache of {cache_pages} pages is below folio's minimum of {CACHE_PAGES_MIN}"
                ),
            ));
        }
        let capacity_bytes = cache_pages
            .checked_mul(PAGE_BYTES as u64)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "cache size overflows"))?;
        let cache = folio::Cache::builder()
            .capacity_bytes(capacity_bytes)
            .eviction(policy.eviction_kind())
            .folio_order_max(0)
            .readahead_max_bytes(0)
            .build_with_backend(Box::new(folio::io::null::NullBackend::new()))?;
        let files = self
            .paths
            .iter()
            .map(|p| cache.open(p))
            .collect::<io::Result<Vec<_>>>()?;
        let mut buf = vec![0u8; PAGE_BYTES];

        let start = cache.stats();
        let (mut hits_seen, mut misses_seen) = (start.hits, start.misses);
        let (mut hits, mut misses, mut unclassified) = (0u64, 0u64, 0u64);
        let clock = Instant::now();
        for &(slot, page) in &self.accesses {
            let n = files[slot as usize].read_at(&mut buf, page.offset_bytes())?;
            // The file was made long enough for every page the trace reads.
            assert_eq!(
                n, PAGE_BYTES,
                "short read of page {} of {:?}",
                page.0, self.paths[slot as usize]
            );
            let s = cache.stats();
            let hit_delta = s.hits - hits_seen;
            let miss_delta = s.misses - misses_seen;
            (hits_seen, misses_seen) = (s.hits, s.misses);
            match (hit_delta, miss_delta) {
                // A miss. The cache may also count the look-up that finds the page once
                // it is read as a hit: a miss is told by `misses` alone.
                (0 | 1, 1) => misses += 1,
                (1, 0) => hits += 1,
                _ => unclassified += 1,
            }
        }
        let seconds = clock.elapsed().as_secs_f64();
        let end = cache.stats();
        let accesses = self.accesses.len() as u64;
        Ok(RunResult {
            policy,
            eviction: end.eviction.clone(),
            cache_pages,
            cache_frames: cache.capacity_bytes() / PAGE_BYTES as u64,
            accesses,
            hits,
            misses,
            unclassified,
            miss_ratio: if accesses == 0 {
                0.0
            } else {
                misses as f64 / accesses as f64
            },
            cache_hits: end.hits - start.hits,
            cache_misses: end.misses - start.misses,
            evicted_pages: end.evicted_pages - start.evicted_pages,
            refaults: end.refaults - start.refaults,
            workingset_refaults: end.workingset_refaults - start.workingset_refaults,
            seconds,
        })
    }
}
