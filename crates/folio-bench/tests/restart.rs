//! Runs `folio-bench restart` at a tiny size through the real binary (8 MiB in 2 files, 2
//! threads, windows of a fraction of a second, one round) and checks its JSON: a row per
//! system and phase with its reads per second, every byte read checked, the ratios to the
//! warm window and to the kernel, folio's build and keeper times and what its adoption
//! kept, and the four targets of issue 32. The figures themselves mean nothing at this
//! size.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

#[test]
fn restart_runs_tiny_with_every_phase() {
    let base = if Path::new("/var/tmp").is_dir() {
        PathBuf::from("/var/tmp")
    } else {
        std::env::temp_dir()
    };
    let dir = tempfile::Builder::new()
        .prefix("folio-bench-restart-test-")
        .tempdir_in(base)
        .expect("a temporary directory");
    let json = dir.path().join("restart.json");
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_folio-bench"))
        .args(["restart", "--quick", "--runs", "1", "--limits-mib", "8"])
        .args(["--data-mib", "8", "--files", "2", "--threads", "2"])
        .args(["--first-secs", "0.5", "--warm-secs", "0.3", "--dir"])
        .arg(dir.path().join("data"))
        .arg("--json")
        .arg(&json)
        .output()
        .expect("the folio-bench binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let took = started.elapsed().as_secs_f64();
    eprintln!("--- folio-bench restart ({took:.1} s)\n{stdout}");
    assert!(
        out.status.success(),
        "folio-bench restart failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the JSON file")).expect("JSON");
    assert_eq!(v["workload"], "restart");
    assert_eq!(v["params"]["data_bytes"], 8 << 20);
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 10, "two systems x five phases: {v}");
    for system in ["folio", "kernel"] {
        for phase in [
            "warm",
            "restart-clean",
            "warm-before-kill",
            "restart-kill",
            "cold",
        ] {
            let row = rows
                .iter()
                .find(|r| r["system"] == system && r["phase"] == phase)
                .unwrap_or_else(|| panic!("no {system} {phase} row: {v}"));
            assert!(row["ops_per_sec"].as_f64() > Some(0.0), "{row}");
            let read = row["bytes_read"].as_u64().expect("bytes_read");
            assert!(read > 0, "{row}");
            assert_eq!(row["bytes_verified"].as_u64(), Some(read), "{row}");
            let per_sec = row["per_sec_runs"][0].as_array().expect("per_sec_runs");
            assert!(!per_sec.is_empty(), "{row}");
            let restart = phase.starts_with("restart") || phase == "cold";
            assert_eq!(row["vs_warm"].as_f64().is_some(), restart, "{row}");
            assert_eq!(
                row["vs_kernel"].as_f64().is_some(),
                system == "folio",
                "{row}"
            );
            if system == "folio" && restart {
                assert!(row.get("adoption").is_some(), "{row}");
                assert!(row["build_ms"].as_f64().is_some(), "{row}");
            }
        }
    }
    let kill = rows
        .iter()
        .find(|r| r["system"] == "folio" && r["phase"] == "restart-kill")
        .expect("folio restart-kill");
    assert!(
        kill["keeper_ms"].as_f64().is_some(),
        "the killed owner's keeper was waited for: {kill}"
    );
    let targets = v["targets"].as_array().expect("targets");
    assert_eq!(targets.len(), 4, "{targets:?}");
    assert!(took < 60.0, "the tiny restart took {took:.1} s");
}
