//! What `pressure`'s roles print, one JSON line each (tagged by `kind`): the reader's
//! samples, its `ready` at the fill's end and its totals; the allocator's progress and its
//! end. Every line carries `CLOCK_MONOTONIC` seconds (`process::mono_secs`), one clock for
//! the three processes.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One sample of a reader.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Sample {
    /// `CLOCK_MONOTONIC` seconds (relative to the allocator's start once the parent has
    /// it).
    pub t: f64,
    /// Whether the random reads had begun (else: the fill).
    pub reading: bool,
    /// Random reads done so far.
    pub reads: u64,
    /// Bytes of the data file the cache holds (folio: `cached_bytes`; the kernel: the
    /// file's pages in the page cache).
    pub cache_bytes: u64,
    /// folio's capacity, resident memory and page counts; `None` for the kernel.
    pub capacity_bytes: Option<u64>,
    pub resident_bytes: Option<u64>,
    pub pages_inserted: Option<u64>,
    pub evicted_pages: Option<u64>,
    /// folio's misses so far.
    pub misses: Option<u64>,
    /// The machine's `MemAvailable` and `Cached`.
    pub mem_available_bytes: u64,
    pub page_cache_bytes: u64,
    /// The machine's memory pressure (`/proc/pressure/memory`): the `some` line's avg10
    /// (percent) and the `some` and `full` lines' totals (microseconds of stall so far).
    pub psi_some_avg10: f64,
    pub psi_some_total_us: u64,
    pub psi_full_total_us: u64,
    /// The reader process's resident memory (`VmRSS`) and the machine's anonymous memory
    /// on transparent huge pages (`AnonHugePages`): what folio gives back shows here
    /// when the kernel really frees it.
    pub rss_bytes: u64,
    pub anon_huge_bytes: u64,
}

impl Sample {
    /// The memory the cache holds: folio's resident memory, the kernel's cached pages.
    pub fn held_bytes(&self) -> u64 {
        self.resident_bytes.unwrap_or(self.cache_bytes)
    }
}

/// The fill's end.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Ready {
    pub t: f64,
    pub fill_secs: f64,
    /// Sequential passes until the cache held the file (the refreshing pass not counted).
    pub passes: u32,
    /// What the cache held of the file at the end of the fill.
    pub held_bytes: u64,
}

/// The reader's totals over its random reads.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReaderFinal {
    pub reads: u64,
    pub read_secs: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// folio's stats at the end (the kernel: none).
    pub folio: Option<Map<String, Value>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ReaderLine {
    Sample(Sample),
    Ready(Ready),
    Final(ReaderFinal),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AllocLine {
    Progress { t: f64, touched_bytes: u64 },
    Done { t: f64, touch_secs: f64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let line = ReaderLine::Ready(Ready {
            t: 1.5,
            fill_secs: 1.0,
            passes: 1,
            held_bytes: 4096,
        });
        let text = serde_json::to_string(&line).unwrap();
        assert!(text.contains("\"kind\":\"ready\""), "{text}");
        assert!(matches!(
            serde_json::from_str::<ReaderLine>(&text).unwrap(),
            ReaderLine::Ready(Ready { passes: 1, .. })
        ));
        let alloc: AllocLine =
            serde_json::from_str(r#"{"kind":"progress","t":2.0,"touched_bytes":64}"#).unwrap();
        assert!(matches!(
            alloc,
            AllocLine::Progress {
                touched_bytes: 64,
                ..
            }
        ));
    }
}
