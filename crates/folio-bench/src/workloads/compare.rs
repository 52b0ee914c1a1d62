//! `compare`: every workload at its default size, one after another, in one process: the
//! README's results table. `--quick` shrinks each (sizes and durations, not the number of
//! runs) so that the whole finishes in under 90 s on the reference machine; the full run
//! finishes in under 5 minutes.
//!
//! Design: `limits` runs first, so every other report carries the ceilings measured in
//! this same run; then the workloads in the order of DESIGN.md §7. `db_bench` is not here
//! yet (it needs the RocksDB plugin): it will be one more line in `workloads()`.
//!
//! Limits: one failing workload stops the comparison (a mismatch is never skipped).

use std::io;

use super::{limits, pread_scale, randread, readahead_storm, readseq, Env, Report, Workload};

/// The workloads of a comparison, in order, at their default sizes.
pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![
        Box::new(limits::Args::default()),
        Box::new(pread_scale::Args::default()),
        Box::new(readseq::Args::default()),
        Box::new(readseq::Args {
            shared: true,
            ..readseq::Args::default()
        }),
        Box::new(randread::Args::default()),
        Box::new(readahead_storm::Args::default()),
    ]
}

/// Runs every workload; returns their reports in order.
pub fn run(env: &Env) -> io::Result<Vec<Report>> {
    workloads().iter().map(|w| w.run(env)).collect()
}
