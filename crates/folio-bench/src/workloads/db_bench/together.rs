//! Several db_bench processes started together and reaped (`db-bench tenants`; issue 45):
//! each one's run, its per-second reads and CPU, and the plugin's stats at its exit.
//!
//! Every process runs on a thread of its own that starts, samples and reaps it
//! ([`run_sampled`]), so the processes start within milliseconds of each other. A process
//! that fails (a nonzero exit, a signal such as the OOM killer's, or output without every
//! key found) fails the measurement, naming it.

use std::io;
use std::path::PathBuf;
use std::process::Command;

use serde_json::json;

use super::child::{run_sampled, SAMPLE_PERIOD};
use super::readrandom::parse_run;
use super::restart::parse_report_csv;
use super::tail;
use super::windows::{self, Cpu};
use crate::measure::RunResult;

/// One process of a measurement: its db_bench command (every argument but its report file)
/// and a directory of its own for its output.
pub(super) struct Launch {
    pub cmd: Command,
    pub dir: PathBuf,
    /// What the failure message calls it (`"folio, tenant 2 of 3"`).
    pub what: String,
}

/// One process's part of a measurement.
pub(super) struct ProcessRun {
    pub run: RunResult,
    /// db_bench's per-second reads (its report file).
    pub rates: Vec<f64>,
    /// Its CPU per second ([`windows::cpu_per_second`] of its samples).
    pub cpu: Vec<Cpu>,
    /// The plugin's stats at exit (`FOLIO_STATS`, set here to a file in its directory;
    /// empty where the plugin is not loaded).
    pub stats: String,
}

/// Starts every one of `launches` at once, each running db_bench's `benchmark`, and
/// returns their runs in order once all have exited.
///
/// Errors: a process that could not start, failed, or did not find every key it read
/// (its output's tail in the message); I/O on the directories.
pub(super) fn run_together(benchmark: &str, launches: Vec<Launch>) -> io::Result<Vec<ProcessRun>> {
    let results: Vec<io::Result<ProcessRun>> = std::thread::scope(|s| {
        let handles: Vec<_> = launches
            .into_iter()
            .map(|mut launch| {
                s.spawn(move || {
                    std::fs::create_dir_all(&launch.dir)?;
                    let report_file = launch.dir.join("report.csv");
                    let stats = launch.dir.join("folio-stats.txt");
                    let _ = std::fs::remove_file(&stats);
                    launch
                        .cmd
                        .env("FOLIO_STATS", &stats)
                        .arg(format!("--report_file={}", report_file.display()));
                    let f = run_sampled(&mut launch.cmd, &launch.dir, &report_file, SAMPLE_PERIOD)?;
                    if f.code != 0 {
                        return Err(io::Error::other(format!(
                            "db_bench {benchmark} ({}) failed (exit {}; negative: the \
                             signal that killed it, -9 the OOM killer's):\n{}{}",
                            launch.what,
                            f.code,
                            tail(&f.stdout, 20),
                            tail(&f.stderr, 20)
                        )));
                    }
                    let mut run = parse_run(&f.stdout, benchmark, f.usage).ok_or_else(|| {
                        io::Error::other(format!(
                            "db_bench {benchmark} ({}): no `{benchmark} :` line, percentiles \
                             or `N of M found`, or not every key found:\n{}",
                            launch.what,
                            tail(&f.stdout, 30)
                        ))
                    })?;
                    run.extra
                        .insert("read_blocks".into(), json!(f.usage.read_blocks));
                    let csv = std::fs::read_to_string(&report_file).unwrap_or_default();
                    Ok(ProcessRun {
                        run,
                        rates: parse_report_csv(&csv),
                        cpu: windows::cpu_per_second(&f.samples).secs,
                        stats: std::fs::read_to_string(&stats).unwrap_or_default(),
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a sampler panicked")))
            })
            .collect()
    });
    results.into_iter().collect()
}
