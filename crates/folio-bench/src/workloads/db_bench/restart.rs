//! `db-bench restart` (issue 32): db_bench's `readrandom` after a restart of `db_bench` on
//! the same database, against the rate of the process before it, as `kernel` (buffered
//! reads, whose page cache stays warm across the restart) and `folio` (the plugin at its
//! default options: `--fs_uri=folio://`, whose cache is a persistent segment named after
//! the database that the next process adopts, once the plugin names it so).
//!
//! Per system and round, two db_bench processes one right after the other on one
//! database (`fillseq,flush` once per data directory, 8 KiB values, `--keys` of them):
//! - the first: `--benchmarks=readseq,readrandom` (readseq reads every key, so the
//!   process ends warm; readrandom then runs `--warm-secs`): its readrandom rate is the
//!   warm rate;
//! - the second: `--benchmarks=readrandom` for `--first-secs`: its rate is the restart's
//!   first window.
//!
//! Both with `--report_interval_seconds=1` (db_bench's per-second rates in its
//! `--report_file`, kept in the rows as `per_sec`), `--verify_checksum=1`, `--threads`,
//! and RocksDB's block cache at db_bench's default unless `--cache-mib` says (RocksDB's
//! cache is lost at every restart; the page cache below it is what may survive). Before
//! the first process of each system the kernel's page cache is dropped. The plugin's
//! stats at exit (`FOLIO_STATS`, a sink for figures, not a cache option) say what its
//! cache adopted (`folio: adoption: segment=... pages_kept=...`); a plugin that does not
//! adopt yet says nothing, and the row then says `adoption: null` (its restart is cold).
//! After each round the segment the plugin named (and left, by design) is removed from
//! its directory (`FOLIO_SEGMENT_DIR` or the home `/dev/shm/folio-<uid>`), and so is the
//! domain its processes shared (the user's, the plugin's default: the restart reads the
//! tables from it, warm, as from the kernel's page cache), so that the next round starts
//! as the first did and nothing is left behind.
//!
//! Rows: `kernel` and `folio`, phase `warm` (the first process) and `restart-clean` (the
//! second), the median round; `vs_warm` (second over first, per round) and folio/kernel
//! (the restart's, per round). Targets: folio's restart at least 0.9x its warm rate and
//! at least 1.0x the kernel's restart.
//!
//! Limits: db_bench's readrandom rate includes RocksDB's own work (block cache, checksums,
//! decompression), the same for both systems; its first second includes opening the
//! database (reading every table's footer, index and filter).

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Map, Value};

use super::child::run_with_usage;
use super::readrandom::parse_run;
use super::{build_plugin, ensure_dbs, fs_uri, tail, workspace_root, Args, DB_BENCH, VALUE_BYTES};
use crate::kernel;
use crate::measure::RunResult;
use crate::workloads::restart::{RESTART_OVER_KERNEL_MIN, RESTART_OVER_WARM_MIN};
use crate::workloads::{mib, paired_median, Env, Metric, Report, Row, System, Target};

const SYSTEMS: [System; 2] = [System::Kernel, System::Folio];

pub fn run(args: &Args, env: &Env) -> io::Result<Report> {
    let threads = args
        .threads
        .as_ref()
        .and_then(|t| t.first().copied())
        .unwrap_or(4)
        .max(1);
    let keys = args.keys.unwrap_or(env.scale.pick(8192, 262_144)).max(1);
    let first_secs = args.first_secs.unwrap_or(env.scale.pick(2, 10)).max(1);
    let warm_secs = args.warm_secs.unwrap_or(env.scale.pick(2, 5)).max(1);
    let cache_bytes = args.cache_mib.map(mib);
    let data_bytes = keys * VALUE_BYTES;

    let root = workspace_root();
    let (plugin, plugin_note) = build_plugin(env, &root)?;
    let db = ensure_dbs(env, 1, keys)?;
    // What a new user passes: nothing (the arena pages only if --arena-pages says).
    let fs_uri = fs_uri(env.arena_pages, super::FolioCapacity::PluginDefault);
    let segment_dir =
        std::env::var_os("FOLIO_SEGMENT_DIR").map_or_else(folio::segment_home, PathBuf::from);
    let scratch = env.dir.join("db-bench-output");
    std::fs::create_dir_all(&scratch)?;
    let stats = scratch.join("folio-stats.txt");
    let report_file = scratch.join("report.csv");

    let mut report = Report::new("db-bench-restart", Metric::OpsPerSec);
    report.param("benchmark", "readrandom");
    report.param("threads", vec![threads]);
    report.param("num", keys);
    report.param("value_size", VALUE_BYTES);
    report.param("data_bytes", data_bytes);
    report.param("db_bytes", dir_bytes(&db)?);
    report.param("cache_size", cache_bytes);
    report.param("first_secs", first_secs);
    report.param("warm_secs", warm_secs);
    report.param("fs_uri", fs_uri.clone());
    report.param("runs", env.runs);
    report.param("db_bench", DB_BENCH);

    let base = |benchmarks: &str, secs: u64| -> Vec<String> {
        let mut flags = vec![
            format!("--benchmarks={benchmarks}"),
            "--use_existing_db=1".into(),
            format!("--db={}", db.display()),
            "--num_multi_db=1".into(),
            format!("--num={keys}"),
            // readseq reads every key; readrandom stops at the duration.
            format!("--reads={}", keys * 1000),
            format!("--duration={secs}"),
            format!("--value_size={VALUE_BYTES}"),
            format!("--threads={threads}"),
            "--histogram=1".into(),
            "--verify_checksum=1".into(),
            "--report_interval_seconds=1".into(),
            format!("--report_file={}", report_file.display()),
        ];
        if let Some(c) = cache_bytes {
            flags.push(format!("--cache_size={c}"));
        }
        flags
    };
    // One db_bench: its readrandom as a run, per_sec and the plugin's adoption in it.
    let one = |system: System, benchmarks: &str, secs: u64| -> io::Result<RunResult> {
        let _ = std::fs::remove_file(&report_file);
        let _ = std::fs::remove_file(&stats);
        let mut cmd = Command::new(DB_BENCH);
        cmd.args(base(benchmarks, secs));
        if system == System::Folio {
            cmd.env("LD_PRELOAD", &plugin)
                .env("FOLIO_STATS", &stats)
                .arg(format!("--fs_uri={fs_uri}"));
        }
        let (code, stdout, stderr, usage) = run_with_usage(&mut cmd, &scratch)?;
        if code != 0 {
            return Err(io::Error::other(format!(
                "db-bench restart: db_bench {benchmarks} ({system}) failed (exit {code}):\n{}{}",
                tail(&stdout, 20),
                tail(&stderr, 20)
            )));
        }
        let mut run = parse_run(&stdout, "readrandom", usage).ok_or_else(|| {
            io::Error::other(format!(
                "db-bench restart: db_bench {benchmarks} ({system}): no readrandom figures, \
                 or not every key found:\n{}",
                tail(&stdout, 30)
            ))
        })?;
        let csv = std::fs::read_to_string(&report_file).unwrap_or_default();
        run.extra
            .insert("per_sec".into(), json!(parse_report_csv(&csv)));
        if system == System::Folio {
            let text = std::fs::read_to_string(&stats).unwrap_or_default();
            run.extra.insert("adoption".into(), adoption_of(&text));
            super::record_folio_capacity(&text, &mut run.extra);
        }
        Ok(run)
    };

    let bar = env.bar("db-bench restart", (env.runs * 4) as u64);
    // [system][0: warm, 1: restart]
    let mut runs: Vec<[Vec<RunResult>; 2]> =
        vec![[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    for round in 0..env.runs {
        let mut order = [0, 1];
        if round % 2 == 1 {
            order.reverse();
        }
        for si in order {
            let system = SYSTEMS[si];
            kernel::make_cold(&super::table_files(&db)?, env.cold)?;
            bar.set_message(format!(
                "{system} first process, round {}/{}",
                round + 1,
                env.runs
            ));
            let warm = one(system, "readseq,readrandom", warm_secs);
            let warm = warm.and_then(|w| {
                bar.inc(1);
                bar.set_message(format!(
                    "{system} restart, round {}/{}",
                    round + 1,
                    env.runs
                ));
                let restart = one(system, "readrandom", first_secs)?;
                bar.inc(1);
                Ok((w, restart))
            });
            // The segment the plugin named after the database, left on purpose by each
            // clean exit: removed whatever happened, so that nothing stays in /dev/shm.
            // And the domain (the user's, at the plugin's defaults), which outlives the
            // processes too: the next round's first process starts cold from both.
            if system == System::Folio {
                remove_plugin_segment(&segment_dir, &stats)?;
                let text = std::fs::read_to_string(&stats).unwrap_or_default();
                super::forget_plugin_domain(&segment_dir, &text)?;
            }
            let (w, r) = warm?;
            runs[si][0].push(w);
            runs[si][1].push(r);
        }
    }
    bar.finish_and_clear();

    let ops = |rs: &[RunResult]| rs.iter().map(RunResult::ops_per_sec).collect::<Vec<_>>();
    for (si, system) in SYSTEMS.into_iter().enumerate() {
        for (pi, phase) in ["warm", "restart-clean"].into_iter().enumerate() {
            let these = &runs[si][pi];
            let mut row = Row::from_runs(system, threads, these, Metric::OpsPerSec);
            row.extra.insert("phase".into(), json!(phase));
            row.extra.insert(
                "per_sec_runs".into(),
                json!(these
                    .iter()
                    .map(|r| r.extra.get("per_sec").cloned().unwrap_or(Value::Null))
                    .collect::<Vec<_>>()),
            );
            if pi == 1 {
                row.extra.insert(
                    "vs_warm".into(),
                    json!(paired_median(&ops(these), &ops(&runs[si][0]))),
                );
            }
            if system == System::Folio {
                row.vs_kernel = paired_median(&ops(these), &ops(&runs[0][pi]));
            }
            report.rows.push(row);
        }
    }
    let folio_restart = report
        .rows
        .iter()
        .find(|r| r.system == "folio" && r.extra.get("phase") == Some(&json!("restart-clean")));
    report.targets.push(Target::at_least(
        format!("db_bench readrandom, restart: folio's first {first_secs} s / its warm rate"),
        folio_restart.and_then(|r| r.extra.get("vs_warm")?.as_f64()),
        RESTART_OVER_WARM_MIN,
    ));
    report.targets.push(Target::at_least(
        format!("db_bench readrandom, restart: folio's first {first_secs} s / the kernel's"),
        folio_restart.and_then(|r| r.vs_kernel),
        RESTART_OVER_KERNEL_MIN,
    ));
    if folio_restart
        .and_then(|r| r.extra.get("adoption"))
        .is_none_or(Value::is_null)
    {
        report.note(
            "folio: the plugin's stats say nothing of an adoption: this plugin does not adopt \
             its segment across a restart, so folio's restart rows are cold starts",
        );
    }
    report.note(format!(
        "db_bench over one database of {keys} 8 KiB values ({} MiB of tables; made once with \
         fillseq,flush); per system and round: db_bench --benchmarks=readseq,readrandom \
         --duration={warm_secs} (warm: readseq reads every key first), then at once \
         db_bench --benchmarks=readrandom --duration={first_secs} (the restart); {threads} \
         threads, --verify_checksum=1, block cache {}; kernel: buffered; folio: \
         LD_PRELOAD={} --fs_uri='{fs_uri}' (every option at the plugin's default)",
        dir_bytes(&db)? >> 20,
        cache_bytes.map_or_else(
            || "db_bench's default".to_string(),
            |c| format!("{} MiB", c >> 20)
        ),
        plugin.display()
    ));
    report.note(format!(
        "before each system's first process: {}; after folio's second, the segment the \
         plugin named after the database removed from {}",
        env.cold.describe(),
        segment_dir.display()
    ));
    if let Some(note) = plugin_note {
        report.note(note);
    }
    report.limits = env.limits()?;
    Ok(report)
}

/// db_bench's `--report_file`: `secs_elapsed,interval_qps` lines, the rates in order.
pub fn parse_report_csv(csv: &str) -> Vec<f64> {
    csv.lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(1)?.trim().parse().ok())
        .collect()
}

/// The plugin's `folio: adoption: key=value ...` line as a JSON object of its numbers
/// (and its `segment`); null when the stats have no such line.
pub fn adoption_of(stats: &str) -> Value {
    let Some(line) = stats
        .lines()
        .find_map(|l| l.strip_prefix("folio: adoption: "))
    else {
        return Value::Null;
    };
    let mut out = Map::new();
    for word in line.split_whitespace() {
        let Some((k, v)) = word.split_once('=') else {
            continue;
        };
        match v.parse::<u64>() {
            Ok(n) => out.insert(k.to_string(), json!(n)),
            Err(_) => out.insert(k.to_string(), json!(v)),
        };
    }
    Value::Object(out)
}

/// Removes the segment the plugin's stats name (`segment=NAME`) from `dir`, if it is
/// there: one plain name, never a path.
fn remove_plugin_segment(dir: &Path, stats: &Path) -> io::Result<()> {
    let text = std::fs::read_to_string(stats).unwrap_or_default();
    let Some(name) = adoption_of(&text)
        .get("segment")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return Ok(());
    };
    if name == "none" || name.contains('/') || name.starts_with('.') {
        return Ok(());
    }
    match std::fs::remove_file(dir.join(&name)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let meta = entry?.metadata()?;
        if meta.is_file() {
            total += meta.len();
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_report_file_and_the_adoption_line() {
        assert_eq!(
            parse_report_csv("secs_elapsed,interval_qps\n1,49922\n2,46756\n"),
            vec![49922.0, 46756.0]
        );
        assert!(parse_report_csv("").is_empty());
        let a = adoption_of(
            "folio: stats: hits=1\nfolio: adoption: segment=folio-0-db-ab12 adopted=1 \
             pages_kept=300 pages_dropped=2 naming=auto\n",
        );
        assert_eq!(a["segment"], json!("folio-0-db-ab12"));
        assert_eq!(a["pages_kept"], json!(300));
        assert_eq!(a["adopted"], json!(1));
        assert_eq!(adoption_of("folio: stats: hits=1\n"), Value::Null);
    }
}
