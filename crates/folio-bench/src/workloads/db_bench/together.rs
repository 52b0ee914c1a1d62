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
use super::windows::{self, Cpu, WindowSpec};
use super::{tail, Args, VALUE_BYTES};
use crate::measure::RunResult;
use crate::workloads::{mib, threads_or, Env, System};

/// Keys of a database [default of `--keys`]: 156 MiB of 8 KiB values, read cold in a few
/// seconds here.
const KEYS_DEFAULT: u64 = 20_000;

/// Seconds each process reads [default of `--duration-secs`], and the windows' defaults:
/// the first 10 s cold, the last 10 s steady.
const DURATION_SECS_DEFAULT: u64 = 30;
const COLD_SECS_DEFAULT: usize = 10;
const STEADY_SECS_DEFAULT: usize = 10;

/// MiB of each process's block cache [default of `--cache-mib`].
const CACHE_MIB_DEFAULT: u64 = 16;

/// `--reads` under a duration: more than any run reaches (db_bench stops on time).
const READS_UNDER_DURATION: u64 = 1 << 40;

/// What P processes reading at once run with (`readonly`'s and `tenants`' options).
pub(super) struct Settings {
    /// The P to measure (`--processes`).
    pub processes: Vec<usize>,
    /// Threads per process (`--threads`, default 1).
    pub threads: usize,
    /// Keys of a database (`--keys`).
    pub keys: u64,
    pub duration_secs: u64,
    pub spec: WindowSpec,
    /// Each process's block cache (`--cache-mib`).
    pub cache_bytes: u64,
    pub rounds: usize,
}

impl Settings {
    /// The command line's, each default where it gives none (`processes` for the P).
    pub fn of(args: &Args, env: &Env, processes: &[usize]) -> Settings {
        Settings {
            processes: args.processes.clone().unwrap_or_else(|| processes.to_vec()),
            threads: threads_or(&args.threads, &[1])[0].max(1),
            keys: args.keys.unwrap_or(KEYS_DEFAULT).max(1),
            duration_secs: match args.duration_secs {
                Some(0) | None => DURATION_SECS_DEFAULT,
                Some(s) => s,
            },
            spec: WindowSpec {
                cold_secs: args.cold_secs.map_or(COLD_SECS_DEFAULT, |s| s as usize),
                steady_secs: args.steady_secs.map_or(STEADY_SECS_DEFAULT, |s| s as usize),
            },
            cache_bytes: mib(args.cache_mib.unwrap_or(CACHE_MIB_DEFAULT)),
            rounds: env.runs.max(1),
        }
    }

    /// db_bench's arguments for process `i` reading `benchmark` from an existing database
    /// (but `--db`) for the duration: its own seed (db_bench's default is the same in
    /// all), checksums verified, a report every second.
    pub fn db_bench_args(&self, benchmark: &str, i: usize) -> Vec<String> {
        self.db_bench_args_of(benchmark, i, self.keys, self.threads)
    }

    /// [`Self::db_bench_args`] for a process of its own shape: a database of `keys` keys
    /// read by `threads` threads (`db-bench tenants`' unequal tenants).
    pub fn db_bench_args_of(
        &self,
        benchmark: &str,
        i: usize,
        keys: u64,
        threads: usize,
    ) -> Vec<String> {
        vec![
            format!("--benchmarks={benchmark}"),
            "--use_existing_db=1".into(),
            format!("--num={keys}"),
            format!("--reads={READS_UNDER_DURATION}"),
            format!("--duration={}", self.duration_secs),
            format!("--value_size={VALUE_BYTES}"),
            format!("--threads={threads}"),
            format!("--cache_size={}", self.cache_bytes),
            format!("--seed={}", 1000 + i),
            "--histogram=1".into(),
            "--verify_checksum=1".into(),
            "--report_interval_seconds=1".into(),
        ]
    }
}

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
    /// The bytes it read from the block layer in each second, over the same stretches
    /// ([`windows::disk_reads_per_second`]).
    pub disk_reads: Vec<u64>,
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
                        disk_reads: windows::disk_reads_per_second(&f.samples),
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

/// `rounds` measurements of each of `systems` at P = `p`, the systems alternated within a
/// round (so that each round's ratios pair runs taken close together): per system, its
/// runs in round order. `bar` counts each measurement.
pub(super) fn measure_rounds(
    systems: &[System],
    rounds: usize,
    p: usize,
    bar: &indicatif::ProgressBar,
    mut measure: impl FnMut(System, usize) -> io::Result<RunResult>,
) -> io::Result<Vec<Vec<RunResult>>> {
    let mut runs: Vec<Vec<RunResult>> = vec![Vec::new(); systems.len()];
    for round in 0..rounds {
        for (si, system) in systems.iter().enumerate() {
            bar.set_message(format!("{system} P={p} round {}/{rounds}", round + 1));
            runs[si].push(measure(*system, p)?);
            bar.inc(1);
        }
    }
    Ok(runs)
}
