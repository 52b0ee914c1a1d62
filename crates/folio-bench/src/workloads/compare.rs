//! `compare`: every workload at its default size, one after another, in one process: the
//! README's results table. `--quick` shrinks each (sizes and durations, not the number of
//! runs) so that the whole finishes in about 2 minutes on the reference machine; the full
//! run in about 7.
//!
//! Design: `limits` runs first, so every other report carries the ceilings measured in
//! this same run; then the read workloads in the order of DESIGN.md §7, then the write
//! workloads of issue 14 (`writeseq`, `randwrite`, `randrw`). `db_bench` and `scale` are
//! not here (the first needs the RocksDB plugin, the second is long): run them alone.
//!
//! Limits: one failing workload stops the comparison (a mismatch is never skipped).

use std::io;

use super::{
    limits, pread_scale, randread, randrw, randwrite, readahead_storm, readseq, writeseq, Env,
    Report, Workload,
};

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
        Box::new(writeseq::Args::default()),
        Box::new(randwrite::Args::default()),
        Box::new(randrw::Args::default()),
    ]
}

/// Runs every workload; returns their reports in order.
pub fn run(env: &Env) -> io::Result<Vec<Report>> {
    workloads().iter().map(|w| w.run(env)).collect()
}
