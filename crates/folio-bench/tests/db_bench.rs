//! Runs `folio-bench db-bench` (readseq, then readrandom, then the write workloads
//! fillrandom and readwhilewriting) at a tiny size through the real
//! binary (2 databases of 500 keys, one run) and checks its JSON: a `kernel`, a `direct`
//! and a `folio` row with db_bench's ops/s and percentiles (P75 as the extra `p75_us`),
//! and for readrandom the system and user time per read and the ratio to direct reads
//! (readrandom for 5 s, cut into its cold, warm-up and steady-state windows;
//! multireadrandom too short for them, its window figures null);
//! for the writes, the block I/O of each run and folio's own, and table files written
//! through folio; the plugin at its defaults (`--fs_uri=folio://`), and readseq once more
//! with every db_bench in a memory cgroup (`--cgroup-max-mib`, as root); and `restart`
//! (two db_bench processes per system, the second's rate against the first's). Skipped, saying why,
//! where `/usr/bin/db_bench`, cmake or the RocksDB headers are missing (packages
//! `rocksdb-tools librocksdb-dev cmake g++`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

#[test]
fn db_bench_runs_tiny_with_three_systems() {
    let needs = [
        "/usr/bin/db_bench",
        "/usr/include/rocksdb/file_system.h",
        "/usr/bin/cmake",
    ];
    if let Some(missing) = needs.iter().find(|p| !Path::new(p).exists()) {
        eprintln!("skipped: no {missing} (apt-get install rocksdb-tools librocksdb-dev cmake g++)");
        return;
    }
    let base = if Path::new("/var/tmp").is_dir() {
        PathBuf::from("/var/tmp")
    } else {
        std::env::temp_dir()
    };
    let dir = tempfile::Builder::new()
        .prefix("folio-bench-dbb-test-")
        .tempdir_in(base)
        .expect("a temporary directory");
    let started = Instant::now();
    // A tiny readseq: two databases of 500 keys, 2 threads.
    let tiny: &[&str] = &[
        "--quick",
        "--runs",
        "1",
        "--limits-mib",
        "8",
        "--dbs",
        "2",
        "--keys",
        "500",
        "--threads",
        "2",
        "--cache-mib",
        "8",
    ];
    let v = run_db_bench(dir.path(), "readseq", tiny);
    eprintln!("(readseq took {:.1} s)", started.elapsed().as_secs_f64());
    assert_eq!(v["workload"], "db-bench");
    assert_eq!(v["params"]["num_multi_db"], 2);
    let rows = v["rows"].as_array().expect("rows");
    for system in ["kernel", "direct", "folio"] {
        let row = rows
            .iter()
            .find(|r| r["system"] == system && r["threads"] == 2)
            .unwrap_or_else(|| panic!("no {system} row: {v}"));
        for key in ["ops_per_sec", "mb_per_sec"] {
            assert!(row[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {row}");
        }
        for key in ["p50_us", "p75_us", "p99_us"] {
            assert!(row[key].as_f64().is_some_and(|x| x >= 0.0), "{key}: {row}");
        }
        assert!(row["pages_inserted"].is_null(), "{row}");
        // Every system read the same keys (db_bench counts 2 threads x 2 x 500 here).
        assert!(row["operations"].as_u64().is_some_and(|n| n > 0), "{row}");
        assert_eq!(row["operations"], rows[0]["operations"], "{row}");
        if system == "folio" {
            // The plugin at its defaults; its stats at exit say what the capacity was.
            assert!(
                row["folio_capacity_mib"].as_f64().is_some_and(|m| m > 0.0),
                "{row}"
            );
        }
    }
    assert_eq!(v["params"]["fs_uri"], "folio://");

    // The same in a memory cgroup per measurement, where one can be made (root, a memory
    // controller): every row says the group's peak.
    let memory_controller = Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists()
        || std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
            .is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"));
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next())
            == Some("0")
    });
    if memory_controller && root {
        let v = run_db_bench(
            dir.path(),
            "readseq",
            &[tiny, &["--cgroup-max-mib", "2048"]].concat(),
        );
        assert_eq!(v["params"]["cgroup_limit_bytes"], 2u64 << 30);
        assert!(v["params"]["cgroup_version"].is_string(), "{}", v["params"]);
        for row in v["rows"].as_array().expect("rows") {
            assert!(
                row["cgroup_peak_bytes"].as_u64().is_some_and(|b| b > 0),
                "{row}"
            );
            assert_eq!(row["cgroup_oom_kills"], 0, "{row}");
        }
    } else {
        eprintln!("skipped the cgroup run: no memory controller, or not root");
    }

    // readrandom, on the same databases: the plugin at its defaults, rusage per read.
    // readrandom, and the same keys in MultiGet batches (multireadrandom: RocksDB's
    // MultiRead, the plugin's folio_read_many).
    // readrandom for 5 s, cut into its windows (cold: second 1, steady: the last one);
    // multireadrandom a fixed count of reads, too short for any window.
    for benchmark in ["readrandom", "multireadrandom"] {
        let timed = benchmark == "readrandom";
        let base: &[&str] = &[
            "--quick",
            "--runs",
            "1",
            "--limits-mib",
            "8",
            "--dbs",
            "2",
            "--keys",
            "500",
            "--threads",
            "2",
            "--cache-mib",
            "1",
        ];
        let windows: &[&str] = &[
            "--duration-secs",
            "5",
            "--cold-secs",
            "1",
            "--steady-secs",
            "1",
        ];
        let args = if timed {
            [base, windows].concat()
        } else {
            base.to_vec()
        };
        let v = run_db_bench(dir.path(), benchmark, &args);
        assert_eq!(v["workload"], format!("db-bench-{benchmark}"));
        assert_eq!(v["params"]["benchmark"], benchmark);
        assert_eq!(
            v["params"]["fs_uri"], "folio://",
            "nothing is passed: the plugin at its defaults"
        );
        assert_eq!(v["params"]["folio_capacity"], "plugin default");
        let rows = v["rows"].as_array().expect("rows");
        for system in ["kernel", "direct", "folio"] {
            let row = rows
                .iter()
                .find(|r| r["system"] == system && r["threads"] == 2)
                .unwrap_or_else(|| panic!("no {system} row: {v}"));
            assert!(row["ops_per_sec"].as_f64() > Some(0.0), "{row}");
            if timed {
                // Per second: db_bench's rate and the process's CPU, and each window's
                // figures from them (5 s: 4 or 5 seconds, the last one's CPU maybe not).
                let secs = row["per_sec"].as_array().expect("per_sec").len();
                assert!((4..=5).contains(&secs), "{row}");
                let cpu = row["per_sec_user_secs"].as_array().expect("CPU").len();
                assert!(cpu + 1 >= secs && cpu <= secs, "{row}");
                assert_eq!(row["windows_secs"]["cold"], serde_json::json!([1, 1]));
                for window in ["cold", "warmup", "steady"] {
                    let ops = format!("{window}_ops_per_sec_median");
                    assert!(row[&ops].as_f64() > Some(0.0), "{ops}: {row}");
                    let sys = format!("{window}_sys_us_per_read_median");
                    assert!(row[&sys].as_f64() >= Some(0.0), "{sys}: {row}");
                }
            } else {
                // 2 threads x 500 reads each (multireadrandom: whole batches of 16), in
                // well under a second: no window, and null rather than a made-up figure.
                assert_eq!(row["operations"], 2 * 496, "{row}");
                assert_eq!(row["per_sec"], serde_json::json!([]), "{row}");
                assert!(row["steady_ops_per_sec_median"].is_null(), "{row}");
                assert!(row["cold_vs_kernel"].is_null(), "{row}");
            }
            for key in [
                "sys_us_per_read_median",
                "user_us_per_read_median",
                "sys_secs",
            ] {
                assert!(row[key].as_f64().is_some_and(|x| x >= 0.0), "{key}: {row}");
            }
            assert!(row["vs_direct"].as_f64().is_some_and(|x| x > 0.0), "{row}");
        }
        let targets = v["targets"].as_array().expect("targets");
        assert_eq!(
            targets.len(),
            6,
            "vs kernel, vs direct, system time; the same in the steady state: {targets:?}"
        );
        if !timed {
            assert!(
                targets[3..]
                    .iter()
                    .all(|t| t["measured"].is_null() && t["met"] == false),
                "no steady state measured, none met: {targets:?}"
            );
        }
    }

    // The write workloads: a fresh database (fillrandom), and reads while a thread writes
    // over a database with every key (readwhilewriting); 1 MiB memtables, so that tables
    // are flushed and compacted through each system.
    for (benchmark, threads, targets) in [("fillrandom", 1, 1), ("readwhilewriting", 2, 2)] {
        let threads_arg = threads.to_string();
        let v = run_db_bench(
            dir.path(),
            benchmark,
            &[
                "--quick",
                "--runs",
                "1",
                "--limits-mib",
                "8",
                "--keys",
                "3000",
                "--value-bytes",
                "1000",
                "--write-buffer-mib",
                "1",
                "--threads",
                &threads_arg,
                "--cache-mib",
                "4",
                // The writer unlimited (the default rate, 8 MiB/s, would not fill a 1 MiB
                // memtable in the few milliseconds 3000 reads take): tables are flushed.
                "--write-rate-mib",
                "0",
            ],
        );
        assert_eq!(v["workload"], format!("db-bench-{benchmark}"));
        assert_eq!(v["params"]["benchmark"], benchmark);
        assert_eq!(v["params"]["value_size"], 1000);
        let rows = v["rows"].as_array().expect("rows");
        for system in ["kernel", "direct", "folio"] {
            let row = rows
                .iter()
                .find(|r| r["system"] == system && r["threads"] == threads)
                .unwrap_or_else(|| panic!("no {system} row: {v}"));
            assert!(row["ops_per_sec"].as_f64() > Some(0.0), "{row}");
            assert!(row["p99_us"].as_f64().is_some_and(|x| x > 0.0), "{row}");
            for key in ["read_io_mib", "write_io_mib"] {
                assert!(row[key].as_f64().is_some_and(|x| x >= 0.0), "{key}: {row}");
            }
            if system == "folio" {
                assert!(row["folio_read_io_mib"].as_f64().is_some(), "{row}");
                assert!(
                    row["folio_sst_written"].as_u64().is_some_and(|n| n > 0),
                    "tables written through folio: {row}"
                );
            } else {
                assert!(row.get("folio_read_io_mib").is_none(), "{row}");
            }
            if benchmark == "readwhilewriting" {
                // 2 reader threads x 3000 reads, every key found.
                assert_eq!(row["operations"], 6000, "{row}");
                assert_eq!(row["found_of_one_thread"], serde_json::json!([3000, 3000]));
            } else {
                assert_eq!(row["operations"], 3000, "{row}");
                assert_eq!(row["bytes_read"], 0, "a fill reads nothing: {row}");
            }
        }
        let t = v["targets"].as_array().expect("targets");
        let (written, vs_kernel): (Vec<&Value>, Vec<&Value>) = t.iter().partition(|x| {
            x["what"]
                .as_str()
                .is_some_and(|w| w.contains("read I/O of files the run wrote"))
        });
        assert_eq!(
            vs_kernel.len(),
            targets,
            "vs kernel (and P99 for the reads): {t:?}"
        );
        // The read-back target is there exactly when the run read files it wrote, and a
        // table folio just wrote is read from its cache, whatever the size.
        let folio = rows.iter().find(|r| r["system"] == "folio").expect("folio");
        let read_back = folio["folio_written_files_read"].as_f64().unwrap_or(0.0);
        assert_eq!(written.len(), usize::from(read_back > 0.0), "{t:?}");
        if benchmark == "fillrandom" {
            assert!(
                read_back > 0.0,
                "a flush's table is opened and read: {folio}"
            );
        }
        for w in written {
            assert_eq!(w["met"], true, "fresh tables read back from folio: {w}");
        }
    }

    // The restart: two db_bench processes per system on one database, the second's
    // readrandom against the first's; the plugin's segment removed after each round.
    let v = run_db_bench(
        dir.path(),
        "restart",
        &[
            "--quick",
            "--runs",
            "1",
            "--limits-mib",
            "8",
            "--keys",
            "2000",
            "--threads",
            "2",
            "--first-secs",
            "1",
            "--warm-secs",
            "1",
        ],
    );
    assert_eq!(v["workload"], "db-bench-restart");
    let rows = v["rows"].as_array().expect("rows");
    for system in ["kernel", "folio"] {
        for phase in ["warm", "restart-clean"] {
            let row = rows
                .iter()
                .find(|r| r["system"] == system && r["phase"] == phase)
                .unwrap_or_else(|| panic!("no {system} {phase} row: {v}"));
            assert!(row["ops_per_sec"].as_f64() > Some(0.0), "{row}");
            assert!(row["per_sec_runs"][0].is_array(), "{row}");
            assert_eq!(row["vs_warm"].as_f64().is_some(), phase != "warm", "{row}");
            if system == "folio" {
                assert!(row.get("adoption").is_some(), "{row}");
                if let Some(name) = row["adoption"]["segment"].as_str() {
                    assert!(
                        !folio::segment_home().join(name).exists() || name == "none",
                        "the plugin's segment {name} was removed"
                    );
                }
            }
        }
    }
    assert_eq!(v["targets"].as_array().map(Vec::len), Some(2), "{v}");
}

/// Runs `folio-bench db-bench BENCHMARK ARGS --dir DIR/data --json DIR/BENCHMARK.json`
/// (the databases in DIR/data are made once and shared), prints its output, checks that it
/// succeeded, and returns its JSON.
fn run_db_bench(dir: &Path, benchmark: &str, args: &[&str]) -> Value {
    let json = dir.join(format!("{benchmark}.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_folio-bench"))
        .args(["db-bench", benchmark])
        .args(args)
        .arg("--dir")
        .arg(dir.join("data"))
        .arg("--json")
        .arg(&json)
        .output()
        .expect("the folio-bench binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("--- folio-bench db-bench {benchmark}\n{stdout}");
    assert!(
        out.status.success(),
        "folio-bench db-bench {benchmark} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(&json).expect("the JSON file")).expect("valid JSON")
}
