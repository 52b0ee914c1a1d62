//! `db-bench readrandom` (issue 13): the unmodified db_bench `readrandom` from a cold page
//! cache, on databases several times RocksDB's block cache, as a new user would run it:
//! `kernel` (buffered), `direct` (`--use_direct_reads=1`) and `folio` (the plugin
//! preloaded, `--fs_uri='folio://'`: every option, the capacity and `prefault` among
//! them, at the plugin's default unless `--folio-capacity-mib` sets the capacity), with
//! each process's CPU time from
//! `wait4(2)`'s rusage, divided by its reads.
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
//! `db-bench multireadrandom` (issue 17) is the same run of db_bench's `multireadrandom`
//! with `--multiread_batched=1` (RocksDB's batched MultiGet: the blocks a batch needs from
//! one table file in one `MultiRead`, which the plugin hands to `folio_read_many`) and
//! `--batch_size` keys per batch.
//!
//! Limits: the rusage covers the whole process, so it includes opening the databases
//! (reading every table's footer, index and filter), the same for every system; the
//! per-read figures divide it by the reads of the timed benchmark only. db_bench's "F of
//! N found" (one thread's count: its message is the one printed) must have F = N: every
//! key read exists.

use std::fs::File;
use std::io::{self, Read, Seek};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::json;

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
    let reads = args.reads.unwrap_or(keys).max(1);
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
        flags.extend(kind.flags());
        flags
    };
    let scratch = env.dir.join("db-bench-output");
    std::fs::create_dir_all(&scratch)?;
    let stats = scratch.join("folio-stats.txt");
    let measure = |system: System, t: usize| -> io::Result<RunResult> {
        kernel::make_cold(&table_files(&db)?, env.cold)?;
        let mut cmd = Command::new(DB_BENCH);
        cmd.args(base_args(t));
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
        let mut run = run_measured(&mut cmd, name, system, &scratch, group.as_ref())?;
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
    if let Some(note) = plugin_note {
        report.note(note);
    }
    report.limits = env.limits()?;
    Ok(report)
}

/// The median (lower middle) of `xs`; NaN for none.
fn median(xs: impl Iterator<Item = f64>) -> f64 {
    crate::measure::lower_median(xs).unwrap_or(f64::NAN)
}

/// The CPU time, peak memory and block I/O of a finished child, from `wait4(2)`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ChildUsage {
    pub user_secs: f64,
    pub sys_secs: f64,
    pub max_rss_kib: u64,
    /// `ru_inblock`: 512-byte blocks the process (all its threads) read from the block
    /// layer; page-cache hits are not counted.
    pub read_blocks: u64,
    /// `ru_oublock`: 512-byte blocks it wrote (the kernel's writeback of its dirty pages
    /// after it exited is not counted).
    pub write_blocks: u64,
}

/// Runs `cmd` to its end with its output in files under `scratch`, and returns its exit
/// status, stdout, stderr and rusage.
///
/// Context: blocks until the child exits; reaps it itself (`wait4`), not through `Child`.
pub fn run_with_usage(
    cmd: &mut Command,
    scratch: &Path,
) -> io::Result<(i32, String, String, ChildUsage)> {
    let mut out = tempfile::tempfile_in(scratch)?;
    let mut err = tempfile::tempfile_in(scratch)?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(err.try_clone()?)
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("{:?}: {e}", cmd.get_program())))?;
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data; zeroed is a valid value to be overwritten.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waits for our own child `pid`; `status` and `usage` are live
        // out-pointers on this stack.
        let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if rc == pid {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    // Reaped above: `Child` must not wait again (dropping it does not).
    drop(child);
    let read_all = |f: &mut File| -> io::Result<String> {
        f.rewind()?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -libc::WTERMSIG(status)
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok((
        code,
        read_all(&mut out)?,
        read_all(&mut err)?,
        ChildUsage {
            user_secs: secs(usage.ru_utime),
            sys_secs: secs(usage.ru_stime),
            max_rss_kib: usage.ru_maxrss as u64,
            read_blocks: usage.ru_inblock as u64,
            write_blocks: usage.ru_oublock as u64,
        },
    ))
}

/// Runs one db_bench `name` (readrandom, multireadrandom) and turns its output and rusage
/// into a run.
fn run_measured(
    cmd: &mut Command,
    name: &str,
    system: System,
    scratch: &Path,
    group: Option<&crate::kernel::Cgroup>,
) -> io::Result<RunResult> {
    let (code, stdout, stderr, usage) = run_with_usage(cmd, scratch)?;
    if code != 0 {
        return Err(io::Error::other(format!(
            "db_bench {name} ({system}) failed (exit {code}; a negative code is the \
             signal that ended it, e.g. an --fs_uri nothing registered){}:\n{}{}",
            Confinement::failure(group),
            tail(&stdout, 20),
            tail(&stderr, 20)
        )));
    }
    parse_run(&stdout, name, usage).ok_or_else(|| {
        io::Error::other(format!(
            "db_bench {name} ({system}): no `{name} :` line, percentiles or \
             `N of M found` in its output, or not every key found:\n{}",
            tail(&stdout, 30)
        ))
    })
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
    fn wait4_reports_the_child_cpu_time() {
        let dir = tempfile::tempdir().unwrap();
        let (code, out, _, usage) = run_with_usage(
            Command::new("sh").args([
                "-c",
                "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo done",
            ]),
            dir.path(),
        )
        .unwrap();
        assert_eq!(code, 0);
        assert_eq!(out.trim(), "done");
        assert!(usage.user_secs + usage.sys_secs > 0.0, "{usage:?}");
        let (code, ..) =
            run_with_usage(Command::new("sh").args(["-c", "exit 3"]), dir.path()).unwrap();
        assert_eq!(code, 3);
    }
}
