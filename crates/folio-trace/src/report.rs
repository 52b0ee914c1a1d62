//! The replay's output: a table for people, JSON for scripts.

use std::fmt::Write as _;

use serde::Serialize;

use crate::replay::RunResult;

/// What the report says about the trace itself.
#[derive(Clone, Debug, Serialize)]
pub struct TraceSummary {
    pub path: String,
    pub accesses: u64,
    pub files: u64,
    pub distinct_pages: u64,
}

/// Everything one `replay` command measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub trace: TraceSummary,
    pub runs: Vec<RunResult>,
}

impl Report {
    /// A fixed-width table, one row per run, in the order they ran.
    pub fn table(&self) -> String {
        let t = &self.trace;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "trace {}: {} accesses, {} files, {} distinct pages",
            t.path, t.accesses, t.files, t.distinct_pages
        );
        let _ = writeln!(
            out,
            "{:<7} {:>11} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}",
            "policy",
            "cache_pages",
            "frames",
            "miss_ratio",
            "hits",
            "misses",
            "evicted",
            "ws_refault",
            "seconds"
        );
        for r in &self.runs {
            let _ = writeln!(
                out,
                "{:<7} {:>11} {:>11} {:>10.4} {:>10} {:>10} {:>10} {:>10} {:>8.2}",
                r.policy.name(),
                r.cache_pages,
                r.cache_frames,
                r.miss_ratio,
                r.hits,
                r.misses,
                r.evicted_pages,
                r.workingset_refaults,
                r.seconds
            );
            if r.eviction != r.policy.name() {
                let _ = writeln!(
                    out,
                    "        warning: the cache ran the {:?} policy, not {}",
                    r.eviction,
                    r.policy.name()
                );
            }
            if r.unclassified > 0 {
                let _ = writeln!(
                    out,
                    "        warning: {} accesses moved neither or both of hits/misses by one",
                    r.unclassified
                );
            }
        }
        out
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report is plain data")
    }
}
