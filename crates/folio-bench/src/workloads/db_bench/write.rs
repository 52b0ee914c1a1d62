//! `db-bench fillseq | fillrandom | overwrite | readwhilewriting` (issue 15): db_bench's
//! write and mixed benchmarks, the whole database's I/O through each system: `kernel`
//! (buffered), `direct` (`--use_direct_reads=1 --use_direct_io_for_flush_and_compaction=1`:
//! RocksDB's block cache only, table files written with O_DIRECT) and `folio` (the plugin
//! preloaded, `--fs_uri='folio://'`: every file of the database written and read through
//! folio, every option at the plugin's default, the capacity too unless
//! `--folio-capacity-mib` sets it),
//! one after another in the same run, each with db_bench's ops/s and the P50/P99 of its
//! histogram (`--histogram=1`: per write for the fills and overwrite, per read for
//! readwhilewriting, whose writer thread is not in it).
//!
//! Design: `fillseq` and `fillrandom` make a fresh database each measurement (the
//! directory is removed first, and db_bench starts a fresh one). `overwrite` and
//! `readwhilewriting` need one with every key: a base database is made once per data
//! directory with the default file system (`fillseq` then `compact`), kept while a marker
//! says it is complete, and copied for every measurement (each measurement changes it).
//! Before every measurement the kernel's cache is dropped and the copy's table files
//! checked 0% resident (`kernel::make_cold`). db_bench runs directly
//! (`LD_PRELOAD=plugin db_bench`, what `plugins/rocksdb/db_bench_folio.sh` execs after
//! its checks) so that its rusage (`wait4`) is its own: the rows carry the process's read
//! and written bytes from the block layer (`ru_inblock`, `ru_oublock`: 512-byte units;
//! after the caches were dropped, the reads include loading the program and its
//! libraries), and folio's rows folio's own read I/O (`io_bytes`: what it read from the
//! database's files) from the plugin's stats, so that "fresh tables read back from
//! memory" is a number.
//! At full size `readwhilewriting`'s readers read for `--duration-secs` (30 s: db_bench's
//! `--duration`), not `--keys` keys each, while its writer writes at most
//! `--write-rate-mib` (8 MiB/s: `--benchmark_write_rate_limit`, as RocksDB's benchmark.sh
//! runs it). Unlimited, the writer takes what the readers leave, and a system whose writes
//! cost less CPU (folio's are a copy, the kernel's a system call: measured 18-28% more
//! values written by folio's writer in the same 15 s) shows fewer reads for more work.
//! RocksDB's block cache is db_bench's own (8 MiB) unless `--cache-mib` says otherwise:
//! the file system's cache holds the compressed tables, for the kernel as for folio.
//! folio's capacity is the plugin's default (what its stats say at exit is in the row:
//! `folio_capacity_mib`); the kernel's page cache takes what it wants, and its peak growth
//! during the run is measured (`/proc/meminfo`) and printed beside folio's capacity.
//! `--cgroup-max-mib` runs every system's db_bench in a fresh memory cgroup of that size. Memtables and table files: db_bench's defaults
//! (64 MiB) at full scale; at `--quick`
//! `--write-buffer-mib` (4), with the table size equal to it and the L1 size four
//! times it (db_bench's own proportions), so that a small run still flushes and
//! compacts.
//!
//! Limits: one database (`--dbs` is not used). The kernel keeps what db_bench wrote and
//! did not sync in its page cache after the process exits, and writes it back later,
//! outside the measurement; folio syncs every written file when it is closed and at exit
//! (docs/rocksdb.md), inside it: db_bench's ops/s does not include its close, but the
//! process's written bytes do. MB/s = ops/s x the value size (values only).

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use super::child::{run_with_usage, ChildUsage};
use super::{
    build_plugin, check_status, fs_uri, parse_benchmark_output, tail, workspace_root, Args,
    Benchmark, Confinement, FolioCapacity, Parsed, DB_BENCH, SYSTEMS,
};
use crate::kernel;
use crate::measure::RunResult;
use crate::workloads::{measure_systems, mib, threads_or, Env, Metric, Report, System, Target};

/// MiB/s of `readwhilewriting`'s writer [default of `--write-rate-mib`]: 8,000 values of
/// 1,000 B a second, a memtable of 64 MiB every 8 s, so a 30 s run flushes and compacts.
const WRITE_RATE_MIB_DEFAULT: u64 = 8;

/// Seconds `readwhilewriting`'s readers read at full size [default of `--duration-secs`].
const READ_SECS_DEFAULT: u64 = 30;

/// Read I/O of the files a run wrote and read back that counts as none (the target's
/// "near 0"), in MiB.
const WRITTEN_READ_IO_MIB_MAX: f64 = 1.0;

/// The value size of the write workloads [default of `--value-bytes`].
pub const VALUE_BYTES_DEFAULT: u64 = 1000;

/// db_bench's name of `benchmark`, if it is a write workload.
pub fn db_bench_name(benchmark: Benchmark) -> Option<&'static str> {
    match benchmark {
        Benchmark::Fillseq => Some("fillseq"),
        Benchmark::Fillrandom => Some("fillrandom"),
        Benchmark::Overwrite => Some("overwrite"),
        Benchmark::Readwhilewriting => Some("readwhilewriting"),
        Benchmark::Readseq
        | Benchmark::Readrandom
        | Benchmark::Multireadrandom
        | Benchmark::Restart
        | Benchmark::Readonly
        | Benchmark::Tenants => None,
    }
}

/// Whether `benchmark` starts from a database with every key (else a fresh one).
fn needs_base(benchmark: Benchmark) -> bool {
    matches!(
        benchmark,
        Benchmark::Overwrite | Benchmark::Readwhilewriting
    )
}

pub fn run(args: &Args, env: &Env) -> io::Result<Report> {
    let name = db_bench_name(args.benchmark).expect("a write workload");
    let reads = args.benchmark == Benchmark::Readwhilewriting;
    // Readers for readwhilewriting (db_bench adds its writer thread); writers otherwise.
    let threads = threads_or(
        &args.threads,
        if reads {
            env.scale.pick(&[2], &[8])
        } else {
            &[1]
        },
    );
    let keys = args.keys.unwrap_or(env.scale.pick(20_000, 500_000)).max(1);
    let value_bytes = args.value_bytes.unwrap_or(VALUE_BYTES_DEFAULT).max(1);
    let write_buffer_bytes = mib(args
        .write_buffer_mib
        .unwrap_or(env.scale.pick(4, 64))
        .max(1));
    // db_bench's own block cache unless asked: a user of folio keeps RocksDB's cache small
    // and lets the page cache hold the compressed tables, as with the kernel's.
    let cache_bytes = args.cache_mib.map(mib);
    let write_rate_mib = if reads {
        Some(args.write_rate_mib.unwrap_or(WRITE_RATE_MIB_DEFAULT)).filter(|&r| r > 0)
    } else {
        None
    };
    // Readers of a full-size readwhilewriting would read --keys keys each (4 M reads in
    // all): minutes per run with direct reads. They read for a fixed time instead.
    let duration_secs = if reads {
        args.duration_secs
            .or(env.scale.pick(None, Some(READ_SECS_DEFAULT)))
    } else {
        None
    };
    let data_bytes = keys * value_bytes;
    let capacity = FolioCapacity::of(args);
    let confinement = Confinement::of(args);

    let root = workspace_root();
    let (plugin, plugin_note) = build_plugin(env, &root)?;
    let fs_uri = fs_uri(env.arena_pages, capacity);
    let shape = Shape {
        keys,
        value_bytes,
        write_buffer_bytes,
    };
    let base = if needs_base(args.benchmark) {
        Some(ensure_base(env, &shape)?)
    } else {
        None
    };
    let work = env.dir.join(format!("db-bench-{name}-work"));
    let scratch = env.dir.join("db-bench-output");
    std::fs::create_dir_all(&scratch)?;

    let mut report = Report::new(&format!("db-bench-{name}"), Metric::OpsPerSec);
    report.param("benchmark", name);
    report.param("threads", threads.clone());
    report.param("num", keys);
    report.param("value_size", value_bytes);
    report.param("data_bytes", data_bytes);
    report.param("write_buffer_size", write_buffer_bytes);
    report.param("cache_size", cache_bytes);
    report.param("write_rate_mib", write_rate_mib);
    report.param("folio_capacity", capacity.param());
    report.param("fs_uri", fs_uri.clone());
    report.param("runs", env.runs);
    report.param("duration_secs", duration_secs);
    report.param("db_bench", DB_BENCH);
    confinement.describe_in(&mut report);

    let flags = |t: usize| -> Vec<String> {
        let mut f = vec![
            format!("--benchmarks={name}"),
            format!("--db={}", work.join("db").display()),
            format!("--num={keys}"),
            format!("--value_size={value_bytes}"),
            format!("--threads={t}"),
            format!("--write_buffer_size={write_buffer_bytes}"),
            format!("--target_file_size_base={write_buffer_bytes}"),
            format!("--max_bytes_for_level_base={}", 4 * write_buffer_bytes),
            "--histogram=1".into(),
            "--verify_checksum=1".into(),
            "--seed=42".into(),
        ];
        if base.is_some() {
            f.push("--use_existing_db=1".into());
        }
        if let Some(secs) = duration_secs {
            f.push(format!("--duration={secs}"));
        }
        if let Some(bytes) = cache_bytes {
            f.push(format!("--cache_size={bytes}"));
        }
        if let Some(rate) = write_rate_mib {
            f.push(format!("--benchmark_write_rate_limit={}", mib(rate)));
        }
        f
    };
    measure_systems(env, &mut report, &SYSTEMS, &threads, |turn| {
        // The database each measurement starts from: none, or a copy of the base.
        if work.exists() {
            std::fs::remove_dir_all(&work)?;
        }
        std::fs::create_dir_all(&work)?;
        if let Some(base) = &base {
            copy_dir(base, &work.join("db"))?;
        }
        kernel::make_cold(&files_with_extension(&work, "sst")?, env.cold)?;
        let stats = scratch.join("folio-stats.txt");
        let _ = std::fs::remove_file(&stats);
        let mut cmd = Command::new(DB_BENCH);
        cmd.args(flags(turn.threads));
        match turn.system {
            System::Direct => {
                cmd.arg("--use_direct_reads=1")
                    .arg("--use_direct_io_for_flush_and_compaction=1");
            }
            System::Folio => {
                cmd.env("LD_PRELOAD", &plugin)
                    .env("FOLIO_STATS", &stats)
                    .arg(format!("--fs_uri={fs_uri}"));
            }
            _ => {}
        }
        let group = confinement.enter(&mut cmd)?;
        // What the kernel's page cache took for the run, beside folio's capacity.
        let page_cache = (turn.system == System::Kernel).then(kernel::PageCachePeak::start);
        let (code, stdout, stderr, usage) = run_with_usage(&mut cmd, &scratch)?;
        let page_cache_peak = page_cache.map(kernel::PageCachePeak::stop);
        if code != 0 {
            return Err(io::Error::other(format!(
                "db_bench {name} ({}) failed (exit {code}){}:\n{}{}",
                turn.system,
                Confinement::failure(group.as_ref()),
                tail(&stdout, 20),
                tail(&stderr, 20)
            )));
        }
        let folio_stats = std::fs::read_to_string(&stats).unwrap_or_default();
        let mut run = parse_run(&stdout, name, value_bytes, usage, &folio_stats);
        if let Some(run) = run.as_mut() {
            Confinement::record(group.as_ref(), &mut run.extra);
            if turn.system == System::Folio {
                super::record_folio_capacity(&folio_stats, &mut run.extra);
            }
        }
        if turn.system == System::Folio {
            // Each measurement makes its database afresh: what the last one cached goes.
            let mut extra = serde_json::Map::new();
            super::forget_plugin_segment(&folio_stats, &mut extra)?;
            if let Some(run) = run.as_mut() {
                run.extra.extend(extra);
            }
        }
        if let (Some(run), Some(bytes)) = (run.as_mut(), page_cache_peak) {
            run.extra.insert(
                "page_cache_peak_mib".into(),
                json!(bytes as f64 / (1u64 << 20) as f64),
            );
        }
        run.ok_or_else(|| {
            io::Error::other(format!(
                "db_bench {name} ({}): no `{name} :` line or no percentiles in its output, \
                 or a key not found:\n{}",
                turn.system,
                tail(&stdout, 30)
            ))
        })
    })?;
    let _ = std::fs::remove_dir_all(&work);

    for &t in &threads {
        let t = t as u32;
        let kernel = report.row(System::Kernel, t).cloned();
        let folio = report.row(System::Folio, t).cloned();
        let required = if reads { 1.1 } else { 1.0 };
        report.targets.push(Target::at_least(
            format!("db-bench {name} {t} threads: folio / kernel ops/s"),
            report.ratio(System::Folio, t),
            required,
        ));
        if reads {
            if let (Some(k), Some(f)) = (&kernel, &folio) {
                report.targets.push(Target {
                    what: format!(
                        "db-bench {name} {t} threads: folio P99 / kernel P99 (us), at most"
                    ),
                    measured: Some(f.p99_us / k.p99_us.max(1e-9)),
                    required: 1.0,
                    met: f.p99_us <= k.p99_us,
                });
            }
        }
        let figure = |row: &Option<crate::workloads::Row>, key: &str| {
            row.as_ref()
                .and_then(|r| r.extra.get(key)?.as_f64())
                .unwrap_or(f64::NAN)
        };
        // Issue 15: the tables a flush or compaction just wrote are read back from the
        // cache. "Near 0": at most 1 MiB over the whole run (a page or two per table
        // would already be tens of KiB; a table read from disk is megabytes).
        if figure(&folio, "folio_written_files_read") > 0.0 {
            report.targets.push(Target::at_most(
                format!("db-bench {name} {t} threads: folio read I/O of files the run wrote (MiB)"),
                Some(figure(&folio, "folio_written_read_io_mib")),
                WRITTEN_READ_IO_MIB_MAX,
            ));
        }
        let direct = report.row(System::Direct, t).cloned();
        report.note(format!(
            "{t} threads, the median run's block-layer reads (MiB, rusage; after the \
             drop of the caches they include loading db_bench and its libraries, and \
             folio's the plugin): kernel {:.1}, direct {:.1}, folio {:.1} (folio's own read \
             I/O of the database: {:.1} MiB: {:.1} MiB of the {} files this run wrote and \
             read back, {:.1} MiB of the older ones); writes: kernel {:.1}, direct {:.1}, \
             folio {:.1}; the kernel's page cache grew by {:.0} MiB at most during the \
             run (folio's capacity at its exit: {:.0} MiB)",
            figure(&kernel, "read_io_mib"),
            figure(&direct, "read_io_mib"),
            figure(&folio, "read_io_mib"),
            figure(&folio, "folio_read_io_mib"),
            figure(&folio, "folio_written_read_io_mib"),
            figure(&folio, "folio_written_files_read"),
            figure(&folio, "folio_older_read_io_mib"),
            figure(&kernel, "write_io_mib"),
            figure(&direct, "write_io_mib"),
            figure(&folio, "write_io_mib"),
            figure(&kernel, "page_cache_peak_mib"),
            figure(&folio, "folio_capacity_mib"),
        ));
    }
    report.note(format!(
        "db_bench {} over {} ({} MiB of values; memtable and table files {} MiB); kernel: \
         buffered; direct: --use_direct_reads=1 --use_direct_io_for_flush_and_compaction=1; \
         folio: LD_PRELOAD={} db_bench ... --fs_uri='{fs_uri}' (every database file through \
         folio; capacity: {}; every other option at the plugin's default); block cache {} \
         for all",
        flags(threads[0])
            .iter()
            .filter(|a| !a.starts_with("--db=") && !a.starts_with("--threads="))
            .cloned()
            .collect::<Vec<_>>()
            .join(" "),
        if base.is_some() {
            "a copy of a database with every key (made once with fillseq,compact)"
        } else {
            "a fresh database"
        },
        data_bytes >> 20,
        write_buffer_bytes >> 20,
        plugin.display(),
        capacity.describe(),
        match cache_bytes {
            Some(bytes) => format!("{} MiB", bytes >> 20),
            None => "db_bench's default (8 MiB)".to_string(),
        }
    ));
    report.note(format!(
        "cold: before every measurement, {}; then mincore: 0% resident",
        env.cold.describe()
    ));
    report.note(format!(
        "ops/s and P50/P99 (us) are db_bench's own ({name} line; histogram per {}); MB/s = \
         ops/s x {value_bytes} B (values only); the kernel writes back what db_bench did not \
         sync after the process exits, folio before it exits (docs/rocksdb.md)",
        if reads { "read" } else { "write" }
    ));
    if let Some(note) = plugin_note {
        report.note(note);
    }
    report.limits = env.limits()?;
    Ok(report)
}

/// The database's size: what the base database and every measurement share.
struct Shape {
    keys: u64,
    value_bytes: u64,
    write_buffer_bytes: u64,
}

/// The base database of `overwrite` and `readwhilewriting`: every key, made with the
/// default file system (`fillseq`, then `compact`) unless a previous run left it
/// complete. Returns its `--db` path.
fn ensure_base(env: &Env, shape: &Shape) -> io::Result<PathBuf> {
    let parent = env.dir.join(format!(
        "db-bench-base-{}x{}-wb{}",
        shape.keys,
        shape.value_bytes,
        shape.write_buffer_bytes >> 20
    ));
    let db = parent.join("db");
    let marker = parent.join("complete");
    if marker.is_file() && db.is_dir() {
        return Ok(db);
    }
    if parent.exists() {
        std::fs::remove_dir_all(&parent)?;
    }
    std::fs::create_dir_all(&parent)?;
    let bar = env.progress.add(indicatif::ProgressBar::new_spinner());
    bar.set_message(format!(
        "db-bench: fillseq,compact {} keys x {} B",
        shape.keys, shape.value_bytes
    ));
    bar.enable_steady_tick(std::time::Duration::from_millis(100));
    let out = Command::new(DB_BENCH)
        .arg("--benchmarks=fillseq,compact")
        .arg(format!("--db={}", db.display()))
        .arg(format!("--num={}", shape.keys))
        .arg(format!("--value_size={}", shape.value_bytes))
        .arg(format!("--write_buffer_size={}", shape.write_buffer_bytes))
        .arg(format!(
            "--target_file_size_base={}",
            shape.write_buffer_bytes
        ))
        .arg(format!(
            "--max_bytes_for_level_base={}",
            4 * shape.write_buffer_bytes
        ))
        .arg("--threads=1")
        .output();
    bar.finish_and_clear();
    check_status("db_bench fillseq,compact (the base database)", &out?)?;
    std::fs::write(&marker, format!("{} {}\n", shape.keys, shape.value_bytes))?;
    Ok(db)
}

/// Copies the directory `from` (files only, as a RocksDB database is) to `to`.
fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

/// The files under `dir` (recursively) whose extension is `ext`.
fn files_with_extension(dir: &Path, ext: &str) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                todo.push(entry.path());
            } else if kind.is_file() && entry.path().extension().is_some_and(|e| e == ext) {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The value of `key=` in the plugin's printed stats (its first occurrence: the
/// `folio: stats:` line comes first).
pub(super) fn stat_of(stats: &str, key: &str) -> Option<u64> {
    stats
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// A run from db_bench's output for `name`, its rusage and (folio) the plugin's stats;
/// `None` if a figure is missing or a read found no key.
pub fn parse_run(
    stdout: &str,
    name: &str,
    value_bytes: u64,
    usage: ChildUsage,
    folio_stats: &str,
) -> Option<RunResult> {
    let p: Parsed = parse_benchmark_output(stdout, name)?;
    let mut extra = serde_json::Map::new();
    let reads = name == "readwhilewriting";
    if reads {
        let (found, asked) = super::readrandom::parse_found_of(stdout, name)?;
        if found != asked {
            return None;
        }
        extra.insert("found_of_one_thread".into(), json!([found, asked]));
    }
    let to_mib = |blocks: u64| (blocks * 512) as f64 / (1u64 << 20) as f64;
    extra.insert("read_io_mib".into(), json!(to_mib(usage.read_blocks)));
    extra.insert("write_io_mib".into(), json!(to_mib(usage.write_blocks)));
    extra.insert("sys_secs".into(), json!(usage.sys_secs));
    extra.insert("user_secs".into(), json!(usage.user_secs));
    if let Some(io) = stat_of(folio_stats, "io_bytes") {
        extra.insert(
            "folio_read_io_mib".into(),
            json!(io as f64 / (1u64 << 20) as f64),
        );
    }
    // The same read I/O by the files' origin (the plugin's handles' `folio_file_stats`):
    // files this process wrote (fresh tables: cache on write makes this ~0) and the rest.
    for (key, name) in [
        ("written_files_read_io_bytes", "folio_written_read_io_mib"),
        ("older_files_read_io_bytes", "folio_older_read_io_mib"),
    ] {
        if let Some(bytes) = stat_of(folio_stats, key) {
            extra.insert(name.into(), json!(bytes as f64 / (1u64 << 20) as f64));
        }
    }
    if let Some(n) = stat_of(folio_stats, "written_files_opened_for_read") {
        extra.insert("folio_written_files_read".into(), json!(n));
    }
    if let Some(n) = stat_of(folio_stats, "sst_opened_for_write") {
        extra.insert("folio_sst_written".into(), json!(n));
    }
    let mut r = super::run_result_of(&p, value_bytes, extra);
    if !reads {
        // Writes: the bytes are written, not read; nothing to verify.
        r.bytes_moved = Some(r.bytes_read);
        r.bytes_read = 0;
        r.bytes_verified = 0;
    }
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILL: &str = "\
DB path: [/x/db]
fillrandom   :      12.500 micros/op 80000 ops/sec 0.250 seconds 20000 operations;   77.6 MB/s
Microseconds per write:
Count: 20000 Average: 12.5000  StdDev: 30.00
Percentiles: P50: 5.10 P75: 8.20 P99: 95.00 P99.9: 400.00 P99.99: 900.00
";

    const MIXED: &str = "\
DB path: [/x/db]
readwhilewriting :      10.000 micros/op 100000 ops/sec 0.400 seconds 40000 operations;   96.9 MB/s (20000 of 20000 found)

Microseconds per read:
Count: 40000 Average: 10.0000  StdDev: 3.00
Percentiles: P50: 4.00 P75: 6.00 P99: 50.00 P99.9: 200.00 P99.99: 500.00
";

    const STATS: &str = "folio: stats: hits=5 io_requests=2 io_bytes=8192 writeback_bytes=100\n\
folio: plugin: table_files_opened=3 sst_opened_for_write=7 writes=9 \
written_files_opened_for_read=4 written_files_read_io_bytes=0 \
older_files_read_io_bytes=1048576\n";

    fn usage() -> ChildUsage {
        ChildUsage {
            user_secs: 1.0,
            sys_secs: 0.5,
            max_rss_kib: 100,
            read_blocks: 2048,
            write_blocks: 4096,
        }
    }

    #[test]
    fn parses_a_fill() {
        let r = parse_run(FILL, "fillrandom", 1000, usage(), STATS).expect("a run");
        assert_eq!(r.ops, 20000);
        assert!((r.ops_per_sec() - 80000.0).abs() < 1.0);
        assert_eq!((r.p50_us, r.p99_us), (5.10, 95.00));
        assert_eq!(r.bytes_read, 0, "a fill reads nothing");
        assert_eq!(r.bytes_moved, Some(20000 * 1000));
        assert_eq!(r.extra["read_io_mib"].as_f64(), Some(1.0));
        assert_eq!(r.extra["write_io_mib"].as_f64(), Some(2.0));
        assert_eq!(
            r.extra["folio_read_io_mib"].as_f64(),
            Some(8192.0 / 1048576.0)
        );
        assert_eq!(r.extra["folio_written_read_io_mib"].as_f64(), Some(0.0));
        assert_eq!(r.extra["folio_older_read_io_mib"].as_f64(), Some(1.0));
        assert_eq!(r.extra["folio_written_files_read"].as_u64(), Some(4));
        assert_eq!(r.extra["folio_sst_written"].as_u64(), Some(7));
        assert!(
            parse_run(FILL, "fillseq", 1000, usage(), "").is_none(),
            "another benchmark's line is not this one's"
        );
        let r = parse_run(FILL, "fillrandom", 1000, usage(), "").expect("a run");
        assert!(
            !r.extra.contains_key("folio_read_io_mib"),
            "no stats: not folio"
        );
    }

    #[test]
    fn parses_readwhilewriting_and_requires_every_key() {
        let r = parse_run(MIXED, "readwhilewriting", 1000, usage(), "").expect("a run");
        assert_eq!(r.ops, 40000);
        assert_eq!(r.p99_us, 50.0);
        assert_eq!(r.bytes_read, 40000 * 1000);
        assert_eq!(r.bytes_verified, r.bytes_read);
        let missing = MIXED.replace("(20000 of 20000 found)", "(19999 of 20000 found)");
        assert!(parse_run(&missing, "readwhilewriting", 1000, usage(), "").is_none());
    }

    #[test]
    fn stat_of_reads_the_first_occurrence() {
        assert_eq!(stat_of(STATS, "io_bytes"), Some(8192));
        assert_eq!(stat_of(STATS, "io_requests"), Some(2));
        assert_eq!(stat_of(STATS, "writes"), Some(9));
        assert_eq!(stat_of(STATS, "missing"), None);
    }

    #[test]
    fn names_the_write_workloads() {
        assert_eq!(db_bench_name(Benchmark::Fillseq), Some("fillseq"));
        assert_eq!(
            db_bench_name(Benchmark::Readwhilewriting),
            Some("readwhilewriting")
        );
        assert_eq!(db_bench_name(Benchmark::Readseq), None);
        assert!(needs_base(Benchmark::Overwrite));
        assert!(!needs_base(Benchmark::Fillrandom));
    }
}
