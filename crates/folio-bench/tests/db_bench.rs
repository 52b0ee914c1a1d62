//! Runs `folio-bench db-bench` at a tiny size through the real binary (2 databases of 500
//! keys, one run) and checks its JSON: a `kernel`, a `direct` and a `folio` row with
//! db_bench's ops/s and percentiles (P75 as the extra `p75_us`). Skipped, saying why,
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
    let json = dir.path().join("out.json");
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_folio-bench"))
        .args([
            "db-bench",
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
            "--dir",
        ])
        .arg(dir.path().join("data"))
        .arg("--json")
        .arg(&json)
        .output()
        .expect("the folio-bench binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "--- folio-bench db-bench ({:.1} s)\n{stdout}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "folio-bench db-bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the JSON file")).expect("valid JSON");
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
    }
}
