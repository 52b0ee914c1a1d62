//! `db-bench readrandom` (issue 13): the unmodified db_bench `readrandom` from a cold page
//! cache, on databases several times RocksDB's block cache, as a new user would run it:
//! `kernel` (buffered), `direct` (`--use_direct_reads=1`) and `folio` (the plugin
//! preloaded, `--fs_uri='folio://'`: every option, the capacity and `prefault` among
//! them, at the plugin's default unless `--folio-capacity-mib` sets the capacity), with
//! each process's CPU time from `wait4(2)`'s rusage, divided by its reads; and the same
//! cut into time windows: a **cold** one (the first `--cold-secs`, 10), a **steady-state**
//! one (the last `--steady-secs`, 20) and the **warm-up** between, each with its ops/s and
//! its user and system time per read ([`super::windows`]). A user-space cache pays a first
//! touch for every fresh page it caches and none once it has filled (or holds the whole
//! data): the steady state is the headline, the cold start beside it.
//!
//! Design: the databases, the plugin build and the cold start are `db-bench`'s (module
//! above). Each round measures the three systems one after another, the first system
//! rotating from round to round; one unmeasured turn of the first system comes before
//! round 1 (the disk's state after the previous measurement, as in `measure_systems`).
//! Rounds: `--runs`, at least 5 outside `--quick`; rows are the median round by ops/s,
//! and `folio/kernel`, `vs_direct` and the system time per read are medians of the
//! per-round figures. db_bench is started directly (`LD_PRELOAD=plugin db_bench ...`, what
//! `plugins/rocksdb/db_bench_folio.sh` execs after its checks) so that the rusage is
//! db_bench's alone, not also the script's `ldd` and test runs.
//!
//! Each db_bench reads for `--duration-secs` (db_bench's `--duration`; 60 s outside
//! `--quick`: [`DURATION_SECS_DEFAULT`] says why; `--quick` and `--duration-secs 0` read
//! `--reads` keys per thread instead, as before) with `--report_interval_seconds=1`
//! (its per-second rates in `--report_file`), and runs under [`run_sampled`], which reads
//! the process's CPU (`/proc/<pid>/stat`) and the report's line count every 50 ms while it
//! runs, then reaps it with `wait4` as before. Each run keeps its per-second rates
//! (`per_sec`) and CPU (`per_sec_user_secs`, `per_sec_sys_secs`) and its windows'
//! figures (`cold_ops_per_sec`, `cold_user_us_per_read`, `cold_sys_us_per_read`, the same
//! for `warmup` and `steady`; null for a window the run was too short for); rows add the
//! medians over rounds (`<figure>_median`), the medians of the per-round ratios to the
//! kernel and to direct reads (`<window>_vs_kernel`, `<window>_vs_direct`) and of the
//! per-round differences of steady-state CPU per read from direct's
//! (`steady_cpu_us_per_read_over_direct`), and every round's figures (`<figure>_runs`,
//! `per_sec_runs` among them: a row's other extras are its median round's). Targets: the
//! whole run's (folio >= 1.0x the kernel and direct reads, system time per read at most
//! direct's) and the steady state's (folio >= 1.05x the kernel and direct reads, CPU per
//! read at most direct's + 1 µs).
//!
//! `db-bench multireadrandom` (issue 17) is the same run of db_bench's `multireadrandom`
//! with `--multiread_batched=1` (RocksDB's batched MultiGet: the blocks a batch needs from
//! one table file in one `MultiRead`, which the plugin hands to `folio_read_many`) and
//! `--batch_size` keys per batch; its rates and reads count keys.
//!
//! Limits: the rusage covers the whole process, so it includes opening the databases
//! (reading every table's footer, index and filter), the same for every system; the
//! whole-run per-read figures divide it by the reads of the timed benchmark only (the
//! windows leave opening and closing out). db_bench's "F of N found" (one thread's count:
//! its message is the one printed) must have F = N: every key read exists. Under
//! `--duration` db_bench 7 stops on time alone: `--reads` is passed (a large default) but
//! not consulted.

use std::io;
use std::path::Path;
use std::process::Command;

use serde_json::{json, Map, Value};

use super::child::{run_sampled, ChildUsage, Finished, SAMPLE_PERIOD};
use super::restart::parse_report_csv;
use super::windows::{self, CpuSample, WindowSpec, Windows, WINDOW_NAMES};
use super::{
    build_plugin, ensure_dbs, forget_plugin_segment, fs_uri, parse_benchmark_output,
    record_folio_capacity, table_files, tail, workspace_root, Args, Confinement, FolioCapacity,
    DB_BENCH, SYSTEMS, VALUE_BYTES,
};
use crate::kernel;
use crate::measure::RunResult;
use crate::workloads::{mib, threads_or, Env, Metric, Report, Row, System, Target};

/// Rounds outside `--quick`: the issue asks for medians of at least five.
pub const ROUNDS_MIN: usize = 5;

/// Keys per `multireadrandom` batch [default of `--batch-size`]: what RocksDB's MultiGet
/// benchmarks use.
pub const BATCH_SIZE_DEFAULT: u64 = 16;

/// Seconds each db_bench reads outside `--quick` [default of `--duration-secs`]. Long
/// enough for a steady state at the default size: 160 K blocks of 8 KiB (1.25 GiB) read at
/// random at ~100 K reads/s leave a block unread after t seconds with a probability of
/// e^(-0.6 t), so the caches below RocksDB's hold all the data after 10-15 s, and the
/// steady window (the last 20 of the 58-60 seconds of a 60 s run that have a rate and a
/// CPU figure, [`windows`]) begins 25 s after that. Larger data or slower reads fill later:
/// their per-second rates (`per_sec`) say whether the last 20 s are flat. The cost: a full
/// run (5 rounds x 3 systems and the unmeasured turn, per thread count) takes about 17
/// minutes, against 1-2 when every thread read `--keys` keys.
pub const DURATION_SECS_DEFAULT: u64 = 60;

/// The steady state's targets (the issue on a miss's CPU cost): folio at least 5% over
/// the kernel and over direct reads in ops/s (medians of per-round ratios), and its CPU
/// per read at most 1 µs over direct's (the median of per-round differences).
pub const STEADY_OVER_KERNEL_MIN: f64 = 1.05;
pub const STEADY_OVER_DIRECT_MIN: f64 = 1.05;
pub const STEADY_CPU_US_PER_READ_OVER_DIRECT_MAX: f64 = 1.0;

/// `--reads` under a duration when none is given: more than any run reaches, so that the
/// duration ends the run (db_bench 7's `Duration` stops on time alone when `--duration`
/// is set, so this is only a cap where another version consults it).
const READS_UNDER_DURATION: u64 = 1 << 40;

/// Which of db_bench's point-read benchmarks runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointReads {
    /// `readrandom`: one Get per key.
    Single,
    /// `multireadrandom --multiread_batched=1`: MultiGet of `batch` keys.
    Batched { batch: u64 },
}

impl PointReads {
    /// db_bench's name of the benchmark (its `--benchmarks` and its result line).
    pub fn name(self) -> &'static str {
        match self {
            PointReads::Single => "readrandom",
            PointReads::Batched { .. } => "multireadrandom",
        }
    }

    fn flags(self) -> Vec<String> {
        match self {
            PointReads::Single => Vec::new(),
            PointReads::Batched { batch } => vec![
                "--multiread_batched=1".into(),
                format!("--batch_size={batch}"),
            ],
        }
    }
}

pub fn run(args: &Args, env: &Env, kind: PointReads) -> io::Result<Report> {
    let name = kind.name();
    let threads = threads_or(&args.threads, env.scale.pick(&[4], &[32]));
    let dbs = args.dbs.unwrap_or(env.scale.pick(4, 32)).max(1);
    let keys = args.keys.unwrap_or(env.scale.pick(2000, 5000)).max(1);
    let duration_secs = match args.duration_secs {
        Some(0) => None,
        Some(s) => Some(s),
        None => env.scale.pick(None, Some(DURATION_SECS_DEFAULT)),
    };
    let reads = match duration_secs {
        Some(_) => args.reads.unwrap_or(READS_UNDER_DURATION),
        None => args.reads.unwrap_or(keys),
    }
    .max(1);
    let spec = WindowSpec {
        cold_secs: args
            .cold_secs
            .map_or(WindowSpec::COLD_SECS_DEFAULT, |s| s as usize),
        steady_secs: args
            .steady_secs
            .map_or(WindowSpec::STEADY_SECS_DEFAULT, |s| s as usize),
    };
    let cache_bytes = mib(args.cache_mib.unwrap_or(env.scale.pick(16, 400)));
    let data_bytes = dbs * keys * VALUE_BYTES;
    let capacity = FolioCapacity::of(args);
    let confinement = Confinement::of(args);
    let rounds = env.scale.pick(env.runs, env.runs.max(ROUNDS_MIN));

    let root = workspace_root();
    let (plugin, plugin_note) = build_plugin(env, &root)?;
    let db = ensure_dbs(env, dbs, keys)?;
    // What a new user passes: nothing. Every option at the plugin's default (the capacity
    // only if `--folio-capacity-mib` says).
    let fs_uri = fs_uri(env.arena_pages, capacity);

    let workload = match kind {
        PointReads::Single => "db-bench-readrandom",
        PointReads::Batched { .. } => "db-bench-multireadrandom",
    };
    let mut report = Report::new(workload, Metric::OpsPerSec);
    report.param("benchmark", name);
    if let PointReads::Batched { batch } = kind {
        report.param("batch_size", batch);
    }
    report.param("threads", threads.clone());
    report.param("num_multi_db", dbs);
    report.param("num", keys);
    report.param("reads_per_thread", reads);
    report.param("duration_secs", duration_secs);
    report.param("cold_secs", spec.cold_secs);
    report.param("steady_secs", spec.steady_secs);
    report.param("value_size", VALUE_BYTES);
    report.param("data_bytes", data_bytes);
    report.param("cache_size", cache_bytes);
    report.param(
        "data_over_block_cache",
        data_bytes as f64 / cache_bytes.max(1) as f64,
    );
    report.param("folio_capacity", capacity.param());
    report.param("fs_uri", fs_uri.clone());
    report.param("rounds", rounds);
    report.param("db_bench", DB_BENCH);
    confinement.describe_in(&mut report);

    let base_args = |t: usize| -> Vec<String> {
        let mut flags: Vec<String> = vec![
            format!("--benchmarks={name}"),
            "--use_existing_db=1".into(),
            format!("--db={}", db.display()),
            format!("--num_multi_db={dbs}"),
            format!("--num={keys}"),
            format!("--reads={reads}"),
            format!("--value_size={VALUE_BYTES}"),
            format!("--threads={t}"),
            format!("--cache_size={cache_bytes}"),
            "--histogram=1".into(),
            "--verify_checksum=1".into(),
        ];
        if let Some(secs) = duration_secs {
            flags.push(format!("--duration={secs}"));
        }
        flags.extend(kind.flags());
        flags.push("--report_interval_seconds=1".into());
        flags
    };
    let scratch = env.dir.join("db-bench-output");
    std::fs::create_dir_all(&scratch)?;
    let stats = scratch.join("folio-stats.txt");
    let report_file = scratch.join("report.csv");
    let measure = |system: System, t: usize| -> io::Result<RunResult> {
        kernel::make_cold(&table_files(&db)?, env.cold)?;
        let mut cmd = Command::new(DB_BENCH);
        cmd.args(base_args(t))
            .arg(format!("--report_file={}", report_file.display()));
        match system {
            System::Direct => {
                cmd.arg("--use_direct_reads=1");
            }
            System::Folio => {
                let _ = std::fs::remove_file(&stats);
                cmd.env("LD_PRELOAD", &plugin)
                    .env("FOLIO_STATS", &stats)
                    .arg(format!("--fs_uri={fs_uri}"));
            }
            _ => {}
        }
        let group = confinement.enter(&mut cmd)?;
        let mut run = run_measured(
            &mut cmd,
            name,
            system,
            Scratch {
                dir: &scratch,
                report_file: &report_file,
            },
            spec,
            group.as_ref(),
        )?;
        Confinement::record(group.as_ref(), &mut run.extra);
        if system == System::Folio {
            let text = std::fs::read_to_string(&stats).unwrap_or_default();
            record_folio_capacity(&text, &mut run.extra);
            forget_plugin_segment(&text, &mut run.extra)?;
        }
        Ok(run)
    };

    let steps = (rounds * SYSTEMS.len() + 1) * threads.len();
    let bar = env.bar(&format!("db-bench {name}"), steps as u64);
    for &t in &threads {
        bar.set_message(format!("{} threads={t} warm-up turn", SYSTEMS[0]));
        measure(SYSTEMS[0], t)?;
        bar.inc(1);
        let mut runs: Vec<Vec<RunResult>> = vec![Vec::new(); SYSTEMS.len()];
        for round in 0..rounds {
            for k in 0..SYSTEMS.len() {
                let si = (round + k) % SYSTEMS.len();
                bar.set_message(format!(
                    "{} threads={t} round {}/{rounds}",
                    SYSTEMS[si],
                    round + 1
                ));
                runs[si].push(measure(SYSTEMS[si], t)?);
                bar.inc(1);
            }
        }
        let direct = SYSTEMS.iter().position(|&s| s == System::Direct);
        let direct_runs = runs[direct.expect("db-bench measures direct reads")].clone();
        let kernel = SYSTEMS.iter().position(|&s| s == System::Kernel);
        let kernel_runs = runs[kernel.expect("db-bench measures the kernel")].clone();
        for (si, system) in SYSTEMS.iter().enumerate() {
            let mut row = Row::from_runs(*system, t, &runs[si], Metric::OpsPerSec);
            let per_read =
                |key: &str| median(runs[si].iter().filter_map(|r| r.extra.get(key)?.as_f64()));
            row.extra.insert(
                "sys_us_per_read_median".into(),
                json!(per_read("sys_us_per_read")),
            );
            row.extra.insert(
                "user_us_per_read_median".into(),
                json!(per_read("user_us_per_read")),
            );
            row.extra.insert(
                "vs_direct".into(),
                json!(median(
                    runs[si]
                        .iter()
                        .zip(&direct_runs)
                        .map(|(r, d)| r.ops_per_sec() / d.ops_per_sec().max(1e-9))
                )),
            );
            record_window_medians(&mut row.extra, &runs[si], &kernel_runs, &direct_runs);
            report.rows.push(row);
        }
    }
    bar.finish_and_clear();
    report.fill_ratios();

    for &t in &threads {
        let t = t as u32;
        let rows = report.clone();
        let figure = |system: System, key: &str| {
            rows.row(system, t).and_then(|r| r.extra.get(key)?.as_f64())
        };
        report.note(format!(
            "{t} threads, system time per read (median of rounds, us): kernel {:.1}, direct \
             {:.1}, folio {:.1}; user time per read: kernel {:.1}, direct {:.1}, folio {:.1}",
            figure(System::Kernel, "sys_us_per_read_median").unwrap_or(f64::NAN),
            figure(System::Direct, "sys_us_per_read_median").unwrap_or(f64::NAN),
            figure(System::Folio, "sys_us_per_read_median").unwrap_or(f64::NAN),
            figure(System::Kernel, "user_us_per_read_median").unwrap_or(f64::NAN),
            figure(System::Direct, "user_us_per_read_median").unwrap_or(f64::NAN),
            figure(System::Folio, "user_us_per_read_median").unwrap_or(f64::NAN),
        ));
        report.targets.push(Target::at_least(
            format!("db-bench {name} {t} threads: folio / kernel ops/s"),
            rows.ratio(System::Folio, t),
            1.0,
        ));
        report.targets.push(Target::at_least(
            format!("db-bench {name} {t} threads: folio / direct ops/s"),
            figure(System::Folio, "vs_direct"),
            1.0,
        ));
        let sys = match (
            figure(System::Folio, "sys_us_per_read_median"),
            figure(System::Direct, "sys_us_per_read_median"),
        ) {
            (Some(f), Some(d)) => Some(f / d.max(1e-9)),
            _ => None,
        };
        report.targets.push(Target {
            what: format!(
                "db-bench {name} {t} threads: folio sys time per read / direct's, at most"
            ),
            measured: sys,
            required: 1.0,
            met: sys.is_some_and(|s| s <= 1.0),
        });
        for (window, label) in WINDOW_NAMES.into_iter().zip([
            format!("cold (the first {} s)", spec.cold_secs),
            "warm-up (between)".to_string(),
            format!("steady state (the last {} s)", spec.steady_secs),
        ]) {
            report.note(window_note(&rows, t, window, &label));
        }
        let steady = format!(
            "db-bench {name} {t} threads, steady state (the last {} s)",
            spec.steady_secs
        );
        report.targets.push(Target::at_least(
            format!("{steady}: folio / kernel ops/s"),
            figure(System::Folio, "steady_vs_kernel"),
            STEADY_OVER_KERNEL_MIN,
        ));
        report.targets.push(Target::at_least(
            format!("{steady}: folio / direct ops/s"),
            figure(System::Folio, "steady_vs_direct"),
            STEADY_OVER_DIRECT_MIN,
        ));
        report.targets.push(Target::at_most(
            format!("{steady}: folio CPU per read (user + sys) minus direct's, us, at most"),
            figure(System::Folio, "steady_cpu_us_per_read_over_direct"),
            STEADY_CPU_US_PER_READ_OVER_DIRECT_MAX,
        ));
    }
    report.note(format!(
        "db_bench {} over {dbs} databases of {keys} 8 KiB values ({} MiB, {:.1}x the block \
         cache; made once with fillseq,flush); kernel: buffered; direct: --use_direct_reads=1; \
         folio: LD_PRELOAD={} db_bench ... --fs_uri='{fs_uri}' (capacity: {}; prefault, \
         readahead_max, backend and every other option at the plugin's default)",
        base_args(threads[0])
            .iter()
            .filter(|a| !a.starts_with("--db=") && !a.starts_with("--threads="))
            .cloned()
            .collect::<Vec<_>>()
            .join(" "),
        data_bytes >> 20,
        data_bytes as f64 / cache_bytes.max(1) as f64,
        plugin.display(),
        capacity.describe()
    ));
    report.note(format!(
        "cold: before every measurement, {}; then mincore: 0% resident; {rounds} rounds, the \
         first system rotating, one unmeasured turn first; rows: the median round",
        env.cold.describe()
    ));
    report.note(
        "system/user time per read: the db_bench process's rusage (wait4) over the reads \
         it reports; it includes opening the databases, alike for all; ops/s and P50/P99 \
         (us) are db_bench's own; MB/s = ops/s x 8 KiB",
    );
    report.note(format!(
        "windows: db_bench's per-second reads (--report_interval_seconds=1, each run's \
         per_sec) and the process's CPU (/proc/<pid>/stat every {} ms, each second's between \
         the samples that first saw its report line and the one before: per_sec_user_secs, \
         per_sec_sys_secs); cold = seconds 1-{}, steady state = the last {}, warm-up = \
         between; a window's ops/s is the mean of its seconds' rates, its CPU per read its \
         CPU over its reads (the sum of those rates); opening and closing the databases fall \
         outside them; all three need {} seconds with a rate and a CPU figure (db_bench \
         reports its --duration's seconds or one fewer, and the last one's CPU is unknown \
         when the process exits within {} ms of it: {}); a window a run is too short for \
         is null",
        SAMPLE_PERIOD.as_millis(),
        spec.cold_secs,
        spec.steady_secs,
        spec.secs_min(),
        SAMPLE_PERIOD.as_millis(),
        duration_secs.map_or_else(
            || "this run had none: --reads decided".to_string(),
            |d| format!("--duration={d} here")
        ),
    ));
    if let Some(note) = plugin_note {
        report.note(note);
    }
    report.limits = env.limits()?;
    Ok(report)
}

/// One window's line of the report's notes for `threads`: each system's ops/s and CPU per
/// read (user + system, µs; medians of rounds), folio's ratios, and how many rounds had the
/// window where not all did.
fn window_note(report: &Report, threads: u32, window: &str, label: &str) -> String {
    let get = |system: System, key: &str| {
        report
            .row(system, threads)
            .and_then(|r| r.extra.get(&format!("{window}_{key}"))?.as_f64())
    };
    let k = |x: Option<f64>| x.map_or_else(|| "null".to_string(), |x| format!("{:.1} K", x / 1e3));
    let us = |x: Option<f64>| x.map_or_else(|| "null".to_string(), |x| format!("{x:.1}"));
    let ratio = |x: Option<f64>| x.map_or_else(|| "null".to_string(), |x| format!("{x:.2}x"));
    let mut ops = Vec::new();
    let mut cpu = Vec::new();
    let mut rounds = Vec::new();
    for system in SYSTEMS {
        ops.push(format!("{system} {}", k(get(system, "ops_per_sec_median"))));
        cpu.push(format!(
            "{system} {} + {}",
            us(get(system, "user_us_per_read_median")),
            us(get(system, "sys_us_per_read_median"))
        ));
        let had = report
            .row(system, threads)
            .and_then(|r| {
                r.extra
                    .get(&format!("{window}_rounds"))?
                    .as_array()
                    .cloned()
            })
            .unwrap_or_default();
        if had.iter().any(|h| h.as_bool() != Some(true)) {
            let n = had.iter().filter(|h| h.as_bool() == Some(true)).count();
            rounds.push(format!("{system} {n} of {}", had.len()));
        }
    }
    let mut note = format!(
        "{threads} threads, {label}, medians of rounds: ops/s {}; folio/kernel {}, \
         folio/direct {}; CPU per read (user + sys, us) {}",
        ops.join(", "),
        ratio(get(System::Folio, "vs_kernel")),
        ratio(get(System::Folio, "vs_direct")),
        cpu.join(", "),
    );
    if !rounds.is_empty() {
        note += &format!(
            "; rounds long enough for this window: {} (a run shorter than the windows \
             leaves them null: see reported_secs and --duration-secs)",
            rounds.join(", ")
        );
    }
    note
}

/// The median (lower middle) of `xs`; NaN for none.
fn median(xs: impl Iterator<Item = f64>) -> f64 {
    crate::measure::lower_median(xs).unwrap_or(f64::NAN)
}

/// Where a measurement's files go: the child's output (`dir`) and db_bench's per-second
/// report (`report_file`, which `cmd` names in `--report_file`).
#[derive(Clone, Copy)]
struct Scratch<'a> {
    dir: &'a Path,
    report_file: &'a Path,
}

/// Runs one db_bench `name` (readrandom, multireadrandom) and turns its output, rusage and
/// per-second reports into a run: the whole run's figures, and each second's rate and CPU
/// (`per_sec`, `per_sec_user_secs`, `per_sec_sys_secs`) cut into `spec`'s windows.
fn run_measured(
    cmd: &mut Command,
    name: &str,
    system: System,
    scratch: Scratch<'_>,
    spec: WindowSpec,
    group: Option<&crate::kernel::Cgroup>,
) -> io::Result<RunResult> {
    let Finished {
        code,
        stdout,
        stderr,
        usage,
        samples,
    } = run_sampled(cmd, scratch.dir, scratch.report_file, SAMPLE_PERIOD)?;
    if code != 0 {
        return Err(io::Error::other(format!(
            "db_bench {name} ({system}) failed (exit {code}; a negative code is the \
             signal that ended it, e.g. an --fs_uri nothing registered){}:\n{}{}",
            Confinement::failure(group),
            tail(&stdout, 20),
            tail(&stderr, 20)
        )));
    }
    let mut run = parse_run(&stdout, name, usage).ok_or_else(|| {
        io::Error::other(format!(
            "db_bench {name} ({system}): no `{name} :` line, percentiles or \
             `N of M found` in its output, or not every key found:\n{}",
            tail(&stdout, 30)
        ))
    })?;
    let csv = std::fs::read_to_string(scratch.report_file).unwrap_or_default();
    record_seconds(&mut run.extra, &parse_report_csv(&csv), &samples, spec);
    Ok(run)
}

/// A run's seconds into its extras: db_bench's per-second `rates`, the CPU of each second
/// from the `samples`, the count of seconds whose CPU the sampler merged into the one
/// before, and `spec`'s windows ([`Windows::record`]).
fn record_seconds(
    extra: &mut Map<String, Value>,
    rates: &[f64],
    samples: &[CpuSample],
    spec: WindowSpec,
) -> Windows {
    let cpu = windows::cpu_per_second(samples);
    // Differences of clock ticks: to the microsecond, without the float noise.
    let us = |secs: f64| (secs * 1e6).round() / 1e6;
    extra.insert("per_sec".into(), json!(rates));
    extra.insert(
        "per_sec_user_secs".into(),
        json!(cpu.secs.iter().map(|c| us(c.user_secs)).collect::<Vec<_>>()),
    );
    extra.insert(
        "per_sec_sys_secs".into(),
        json!(cpu.secs.iter().map(|c| us(c.sys_secs)).collect::<Vec<_>>()),
    );
    extra.insert("cpu_merged_secs".into(), json!(cpu.merged_secs));
    let w = Windows::of(rates, &cpu.secs, spec);
    w.record(extra);
    w
}

/// A figure of a run's extras; `None` where it is null (a window the run had not).
fn extra_of(run: &RunResult, key: &str) -> Option<f64> {
    run.extra.get(key)?.as_f64()
}

/// The median over rounds of `f(run, other run of the same round)`, over the rounds
/// where it is a number; NaN (a null) for none.
fn per_round(
    runs: &[RunResult],
    others: &[RunResult],
    f: impl Fn(&RunResult, &RunResult) -> Option<f64>,
) -> f64 {
    median(runs.iter().zip(others).filter_map(|(r, o)| f(r, o)))
}

/// The windows' figures of a system's rounds into its row: per window, the medians over
/// rounds of ops/s and of user and system time per read (`<window>_ops_per_sec_median`,
/// `<window>_user_us_per_read_median`, `<window>_sys_us_per_read_median`), and the medians
/// of the per-round ratios of its ops/s to the kernel's and to direct's
/// (`<window>_vs_kernel`, `<window>_vs_direct`); and the median of the per-round
/// differences of the steady state's CPU per read (user + system) from direct's
/// (`steady_cpu_us_per_read_over_direct`, µs). Each over the rounds that had the window.
/// Every round's figures too, in round order (the row's other extras are its median
/// round's): `<figure>_runs` for each of the above and for `per_sec`,
/// `per_sec_user_secs` and `per_sec_sys_secs`.
fn record_window_medians(
    extra: &mut Map<String, Value>,
    runs: &[RunResult],
    kernel: &[RunResult],
    direct: &[RunResult],
) {
    let every = |key: &str| {
        json!(runs
            .iter()
            .map(|r| r.extra.get(key).cloned().unwrap_or(Value::Null))
            .collect::<Vec<_>>())
    };
    for key in ["per_sec", "per_sec_user_secs", "per_sec_sys_secs"] {
        extra.insert(format!("{key}_runs"), every(key));
    }
    for name in WINDOW_NAMES {
        for what in ["ops_per_sec", "user_us_per_read", "sys_us_per_read"] {
            let key = format!("{name}_{what}");
            extra.insert(
                format!("{key}_median"),
                json!(median(runs.iter().filter_map(|r| extra_of(r, &key)))),
            );
            extra.insert(format!("{key}_runs"), every(&key));
        }
        let ops = format!("{name}_ops_per_sec");
        let ratio = |r: &RunResult, o: &RunResult| {
            let (x, of) = (extra_of(r, &ops)?, extra_of(o, &ops)?);
            (of > 0.0).then_some(x / of)
        };
        extra.insert(
            format!("{name}_vs_kernel"),
            json!(per_round(runs, kernel, ratio)),
        );
        extra.insert(
            format!("{name}_vs_direct"),
            json!(per_round(runs, direct, ratio)),
        );
        extra.insert(
            format!("{name}_rounds"),
            json!(runs
                .iter()
                .map(|r| extra_of(r, &ops).is_some())
                .collect::<Vec<_>>()),
        );
    }
    let cpu = |r: &RunResult| {
        Some(extra_of(r, "steady_user_us_per_read")? + extra_of(r, "steady_sys_us_per_read")?)
    };
    extra.insert(
        "steady_cpu_us_per_read_over_direct".into(),
        json!(per_round(runs, direct, |r, d| Some(cpu(r)? - cpu(d)?))),
    );
}

/// db_bench's `(F of N found)` on the line of `benchmark`.
pub fn parse_found_of(stdout: &str, benchmark: &str) -> Option<(u64, u64)> {
    let line = stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(benchmark))?;
    let inside = line.rsplit_once('(')?.1.split_once(')')?.0;
    let words: Vec<&str> = inside.split_whitespace().collect();
    match words.as_slice() {
        [f, "of", n, "found"] => Some((f.parse().ok()?, n.parse().ok()?)),
        _ => None,
    }
}

/// A run from db_bench's output of `name` (readrandom, multireadrandom) and the process's
/// rusage; `None` if a figure is missing or a key was not found.
pub fn parse_run(stdout: &str, name: &str, usage: ChildUsage) -> Option<RunResult> {
    let p = parse_benchmark_output(stdout, name)?;
    let (found, asked) = parse_found_of(stdout, name)?;
    if found != asked {
        return None;
    }
    let reads = p.operations.max(1) as f64;
    let mut extra = serde_json::Map::new();
    extra.insert("found_of_one_thread".into(), json!([found, asked]));
    extra.insert("sys_secs".into(), json!(usage.sys_secs));
    extra.insert("user_secs".into(), json!(usage.user_secs));
    extra.insert(
        "sys_us_per_read".into(),
        json!(usage.sys_secs * 1e6 / reads),
    );
    extra.insert(
        "user_us_per_read".into(),
        json!(usage.user_secs * 1e6 / reads),
    );
    extra.insert("max_rss_kib".into(), json!(usage.max_rss_kib));
    Some(super::run_result(&p, extra))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "\
DB path: [/x/db]
readrandom   :      39.780 micros/op 25138 ops/sec 0.318 seconds 8000 operations;  197.2 MB/s (8000 of 8000 found)

Microseconds per read:
Count: 8000 Average: 39.7800  StdDev: 12.31
Percentiles: P50: 30.12 P75: 45.00 P99: 180.50 P99.9: 400.00 P99.99: 900.00
";

    #[test]
    fn parses_readrandom_and_rusage() {
        assert_eq!(parse_found_of(OUT, "readrandom"), Some((8000, 8000)));
        let usage = ChildUsage {
            user_secs: 0.4,
            sys_secs: 0.8,
            max_rss_kib: 1000,
            ..ChildUsage::default()
        };
        let r = parse_run(OUT, "readrandom", usage).expect("a run");
        assert_eq!(r.ops, 8000);
        assert!((r.ops_per_sec() - 25138.0).abs() < 1.0);
        assert_eq!((r.p50_us, r.p99_us), (30.12, 180.50));
        let sys = r.extra["sys_us_per_read"].as_f64().unwrap();
        assert!((sys - 100.0).abs() < 1e-9, "0.8 s over 8000 reads: {sys}");
        let missing = OUT.replace("(8000 of 8000 found)", "(7999 of 8000 found)");
        assert!(
            parse_run(&missing, "readrandom", usage).is_none(),
            "a key not found fails"
        );
    }

    #[test]
    fn the_sampler_puts_each_seconds_cpu_between_its_report_lines() {
        // A child that writes a report header, burns CPU (~0.5 s), writes line 1, sleeps,
        // writes line 2 and sleeps again: second 1 holds the burn, second 2 nothing.
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join("report.csv");
        std::fs::write(&report, "stale\n1,1\n2,1\n3,1\n").unwrap();
        let script = format!(
            "echo secs_elapsed,interval_qps > {r}; \
             i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; \
             echo 1,100 >> {r}; sleep 0.4; echo 2,300 >> {r}; sleep 0.2",
            r = report.display()
        );
        let f = run_sampled(
            Command::new("sh").args(["-c", &script]),
            dir.path(),
            &report,
            SAMPLE_PERIOD,
        )
        .unwrap();
        assert_eq!(f.code, 0, "{}", f.stderr);
        assert!(
            f.samples.iter().all(|s| s.report_lines <= 3),
            "the stale report was removed first: {:?}",
            f.samples
        );
        let rates = parse_report_csv(&std::fs::read_to_string(&report).unwrap());
        assert_eq!(rates, vec![100.0, 300.0]);
        let cpu = windows::cpu_per_second(&f.samples);
        assert_eq!(cpu.secs.len(), 2, "{:?}", f.samples);
        let total = |c: &windows::Cpu| c.user_secs + c.sys_secs;
        // The burn, less at most a sampling period before the header was seen.
        assert!(total(&cpu.secs[0]) >= 0.2, "{cpu:?}");
        assert!(total(&cpu.secs[1]) <= 0.03, "{cpu:?}");
        assert!(
            f.usage.user_secs + f.usage.sys_secs >= total(&cpu.secs[0]),
            "{:?}",
            f.usage
        );
        // The windows of this run: second 1 cold, second 2 steady.
        let mut extra = Map::new();
        let w = record_seconds(
            &mut extra,
            &rates,
            &f.samples,
            WindowSpec {
                cold_secs: 1,
                steady_secs: 1,
            },
        );
        assert_eq!(extra["per_sec"], json!([100.0, 300.0]));
        assert_eq!(w.steady.map(|s| s.ops_per_sec), Some(300.0));
        assert!(w.cold.unwrap().user_us_per_read + w.cold.unwrap().sys_us_per_read >= 2000.0);
    }

    /// A run whose extras have the windows' figures of `ops` (cold, warm-up, steady; None:
    /// too short) and `us` µs of user and of system time per read in each.
    fn windowed(ops: [Option<f64>; 3], us: f64) -> RunResult {
        let mut extra = Map::new();
        for (name, ops) in WINDOW_NAMES.into_iter().zip(ops) {
            extra.insert(format!("{name}_ops_per_sec"), json!(ops));
            extra.insert(format!("{name}_user_us_per_read"), json!(ops.map(|_| us)));
            extra.insert(format!("{name}_sys_us_per_read"), json!(ops.map(|_| us)));
        }
        RunResult {
            extra,
            ..RunResult::default()
        }
    }

    #[test]
    fn rows_take_medians_of_rounds_and_of_per_round_ratios() {
        let kernel = [
            windowed([Some(100.0), Some(100.0), Some(100.0)], 5.0),
            windowed([Some(200.0), Some(200.0), Some(200.0)], 5.0),
            windowed([Some(100.0), Some(100.0), Some(100.0)], 5.0),
        ];
        let direct = [
            windowed([Some(50.0), Some(50.0), Some(50.0)], 4.0),
            windowed([Some(50.0), Some(50.0), Some(50.0)], 3.0),
            windowed([Some(50.0), Some(50.0), Some(50.0)], 4.0),
        ];
        // The last round too short for its steady window.
        let folio = [
            windowed([Some(110.0), Some(100.0), Some(120.0)], 4.0),
            windowed([Some(180.0), Some(200.0), Some(260.0)], 4.0),
            windowed([Some(90.0), Some(100.0), None], 9.0),
        ];
        let mut extra = Map::new();
        record_window_medians(&mut extra, &folio, &kernel, &direct);
        // cold: 110, 180, 90 -> 110; per round over the kernel: 1.1, 0.9, 0.9 -> 0.9.
        assert_eq!(extra["cold_ops_per_sec_median"], json!(110.0));
        assert_eq!(extra["cold_vs_kernel"], json!(0.9));
        assert_eq!(extra["cold_vs_direct"], json!(2.2));
        // steady: rounds 1 and 2 only: 120 and 260 -> the lower middle, 120; over the
        // kernel 1.2 and 1.3 -> 1.2; CPU per read 8 us against direct's 8 and 6 -> 0.
        assert_eq!(extra["steady_ops_per_sec_median"], json!(120.0));
        assert_eq!(extra["steady_vs_kernel"], json!(1.2));
        assert_eq!(extra["steady_user_us_per_read_median"], json!(4.0));
        assert_eq!(extra["steady_cpu_us_per_read_over_direct"], json!(0.0));
        assert_eq!(extra["steady_rounds"], json!([true, true, false]));
        assert_eq!(
            extra["steady_ops_per_sec_runs"],
            json!([120.0, 260.0, null]),
            "every round's, in order"
        );
        // No round with a window: null, not a number.
        let short = [windowed([None, None, None], 1.0)];
        let mut extra = Map::new();
        record_window_medians(&mut extra, &short, &kernel[..1], &direct[..1]);
        assert_eq!(extra["steady_ops_per_sec_median"], Value::Null);
        assert_eq!(extra["steady_vs_direct"], Value::Null);
        assert_eq!(extra["steady_cpu_us_per_read_over_direct"], Value::Null);
    }
}
