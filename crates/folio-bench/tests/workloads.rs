//! Runs every workload of the real binary (all but `compare`, which only chains them) at a
//! tiny size, and checks what issue 7 promises of its output: the JSON shape (workload,
//! params with `file_pages` where it matters, rows with a `folio` and a `kernel` row and
//! the fields, limits), and that every byte read was verified.
//!
//! The write workloads (`writeseq`, `randwrite`, `randrw`) are checked for what they
//! promise instead of bytes read: bytes written, every read verified, syncs timed, and
//! folio's file checked whole on disk after every run (`disk_verified_bytes`).
//!
//! `keeper` kills a persistent cache's owner with 2 MiB dirty and checks every byte its
//! keeper wrote back.
//!
//! `pressure` runs tiny and without a cgroup: its report's shape and samples, not the
//! policy (that takes the machine's memory).
//!
//! The workloads run one after another in one test: they drop the machine's page cache
//! and check residency, which parallel runs would disturb. Where no memory cgroup can be
//! made (not root, no controller), `randread` (and `randwrite`, `randrw`) still run and
//! say so; the test prints that it skipped the cgroup check, and why.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

fn data_dir() -> tempfile::TempDir {
    // A disk file system: O_DIRECT and the page cache mean nothing on tmpfs.
    let base = if Path::new("/var/tmp").is_dir() {
        PathBuf::from("/var/tmp")
    } else {
        std::env::temp_dir()
    };
    tempfile::Builder::new()
        .prefix("folio-bench-test-")
        .tempdir_in(base)
        .expect("a temporary directory")
}

/// Runs `folio-bench <args> --json OUT` and returns the parsed JSON.
fn run(dir: &Path, name: &str, args: &[&str]) -> Value {
    let json = dir.join(format!("{name}.json"));
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_folio-bench"))
        .args(args)
        .args(["--quick", "--runs", "1", "--limits-mib", "8", "--dir"])
        .arg(dir.join("data"))
        .arg("--json")
        .arg(&json)
        .output()
        .expect("the folio-bench binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "--- folio-bench {} ({:.1} s)\n{stdout}",
        args.join(" "),
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "folio-bench {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("folio/kernel"),
        "the table has a ratio column"
    );
    serde_json::from_slice(&std::fs::read(&json).expect("the JSON file")).expect("valid JSON")
}

/// The `params.file_pages` of a workload that reads files.
fn check_file_pages(v: &Value) {
    let params = &v["params"];
    assert!(
        params["file_pages"].as_u64().is_some_and(|p| p > 0),
        "{}: params.file_pages: {params:?}",
        v["workload"]
    );
}

/// Checks one workload object against issue 7's shape; returns its rows.
fn check_shape(v: &Value, workload: &str) -> Vec<Value> {
    assert_eq!(v["workload"], workload);
    assert!(v["params"].is_object(), "{workload}: params is an object");
    let limits = &v["limits"];
    for key in ["memcpy_gb_per_sec", "odirect_seq_mb_per_sec"] {
        assert!(
            limits[key].as_f64().is_some_and(|x| x > 0.0),
            "{workload}: limits.{key} = {}",
            limits[key]
        );
    }
    let rows = v["rows"].as_array().expect("rows is an array").clone();
    for system in ["folio", "kernel"] {
        assert!(
            rows.iter().any(|r| r["system"] == system),
            "{workload}: no {system} row"
        );
    }
    for row in &rows {
        assert!(row["system"].is_string(), "{row}");
        assert!(row["threads"].as_u64().is_some_and(|t| t > 0), "{row}");
        for key in ["ops_per_sec", "mb_per_sec", "p50_us", "p99_us"] {
            assert!(row[key].as_f64().is_some_and(|x| x >= 0.0), "{key}: {row}");
        }
        assert!(row["ops_per_sec"].as_f64() > Some(0.0), "{row}");
        let pages = &row["pages_inserted"];
        assert!(pages.is_null() || pages.is_u64(), "pages_inserted: {row}");
        // Every byte read was checked against the data rule.
        let read = row["bytes_read"].as_u64().expect("bytes_read");
        assert_eq!(row["bytes_verified"].as_u64(), Some(read), "{row}");
        // memcpy and the fresh-memory rows of `limits` move memory, not file bytes.
        if !["memcpy", "fresh-4k", "fresh-huge"].contains(&row["system"].as_str().unwrap()) {
            assert!(read > 0, "{workload}: {} read nothing", row["system"]);
        }
    }
    rows
}

/// Checks the `miss-cost` report: a row per system with its per-miss figures (a hit's too
/// but for direct reads), every byte checked, folio counting each miss, folio-full
/// evicting; instructions counted, or a note that says why not.
fn check_miss_cost(v: &Value) {
    assert_eq!(v["workload"], "miss-cost");
    let rows = v["rows"].as_array().expect("rows");
    let counted = !v["notes"].as_array().expect("notes").iter().any(|n| {
        n.as_str()
            .is_some_and(|n| n.starts_with("instructions: not counted"))
    });
    for system in ["direct", "kernel", "folio", "folio-full"] {
        let r = row(rows, system, 1);
        assert!(r["ops_per_sec"].as_f64() > Some(0.0), "{r}");
        assert_eq!(r["bytes_read"], 200 * 4096, "{r}");
        // The hits checked by the untimed pass (the timed one by its sum).
        let hits_bytes = if system == "direct" { 0 } else { 1000 * 64 };
        assert_eq!(
            r["bytes_verified"].as_u64(),
            Some(200 * 4096 + hits_bytes),
            "every miss and hit checked: {r}"
        );
        for field in ["wall_us", "process_cpu_us", "vcsw", "process_ivcsw"] {
            assert!(
                r["miss"][field].as_f64().is_some(),
                "{system} miss {field}: {r}"
            );
        }
        assert_eq!(r["hit"].is_object(), system != "direct", "{r}");
        if counted {
            assert!(r["miss_instructions"].as_f64() > Some(10.0), "{r}");
        }
    }
    assert_eq!(row(rows, "folio", 1)["folio_misses_counted"], 200);
    let evicted = row(rows, "folio-full", 1)["folio_evictions"].as_u64();
    assert!(
        evicted >= Some(150),
        "folio-full's misses evict: {evicted:?}"
    );
}

/// Checks the `scale` report: for every point of every axis, one row of each system with
/// its per-read figures, every read's first word checked and a sampled buffer verified.
fn check_scale(v: &Value) {
    assert_eq!(v["workload"], "scale");
    let rows = v["rows"].as_array().expect("rows");
    let points = [
        ("files", vec![1u64, 40]),
        ("cache", vec![1 << 20, 2 << 20]),
        ("threads", vec![1, 3]),
    ];
    for (axis, xs) in points {
        for x in xs {
            for system in ["folio", "kernel", "memcpy"] {
                let r = rows
                    .iter()
                    .find(|r| r["axis"] == axis && r["x"] == x && r["system"] == system)
                    .unwrap_or_else(|| panic!("no {system} row at {axis} {x}: {v}"));
                assert!(r["ops_per_sec"].as_f64() > Some(0.0), "{r}");
                for key in [
                    "ns_per_read_median",
                    "wall_ns_per_read_median",
                    "cost_over_memcpy",
                ] {
                    assert!(r[key].as_f64().is_some_and(|n| n > 0.0), "{key}: {r}");
                }
                let read = r["bytes_read"].as_u64().unwrap();
                let verified = r["bytes_verified"].as_u64().unwrap();
                // 64 reads: one whole 4 KiB buffer plus 8 bytes of each other read.
                assert_eq!(verified * 64 * 4096, read * (4096 + 63 * 8), "{r}");
                if system == "folio" {
                    assert_eq!(r["misses"], 0, "every folio read a hit: {r}");
                }
                // A few MiB of data: the systems run interleaved, round by round.
                assert_eq!(r["interleaved"], true, "{r}");
                if system == "kernel" {
                    assert!(r["resident_after"].as_f64().is_some(), "{r}");
                }
            }
        }
    }
    let cache_rows = rows.iter().filter(|r| r["axis"] == "cache");
    for r in cache_rows {
        assert_eq!(
            r["data_bytes"], r["x"],
            "the cache axis reads its whole size: {r}"
        );
    }
    assert!(v["params"]["rlimit_nofile"]["soft_after"].as_u64() >= Some(40));
}

/// Checks the `keeper` report: per shape a folio and a kernel row, every file read back
/// whole and checked, the owner killed with every page dirty, the keeper's exit clean.
fn check_keeper(v: &Value, dirty_bytes: u64) {
    assert_eq!(v["workload"], "keeper");
    assert_eq!(v["params"]["dirty_bytes"], dirty_bytes);
    let rows = v["rows"].as_array().expect("rows");
    for shape in ["seq", "rand"] {
        for system in ["folio", "kernel"] {
            let r = rows
                .iter()
                .find(|r| r["shape"] == shape && r["system"] == system)
                .unwrap_or_else(|| panic!("no {system} row of {shape}: {v}"));
            assert_eq!(r["bytes_written"], dirty_bytes, "{r}");
            assert_eq!(r["bytes_verified"], dirty_bytes, "every byte checked: {r}");
            assert!(r["synced_ms_p50"].as_f64() > Some(0.0), "{r}");
            assert!(
                r["synced_ms_max"].as_f64() >= r["synced_ms_p50"].as_f64(),
                "{r}"
            );
            if system == "folio" {
                assert_eq!(r["dirty_pages_at_kill"], dirty_bytes / 4096, "{r}");
                assert_eq!(r["keeper_exit_status"], 0, "{r}");
                assert!(r["vs_kernel"].as_f64() > Some(0.0), "{r}");
                // The segment goes before the keeper exits.
                let synced = r["synced_ms_runs"].as_array().expect("runs");
                let exits = r["keeper_exit_ms_runs"].as_array().expect("runs");
                for (s, e) in synced.iter().zip(exits) {
                    assert!(s.as_f64() <= e.as_f64(), "{r}");
                }
            }
        }
    }
}

/// Checks a write workload's report: the shape, bytes written by every row, every byte
/// read verified, syncs timed, and folio's file verified whole on disk (`file_bytes`)
/// with no writeback error and nothing left dirty. Returns its rows.
fn check_writes(v: &Value, workload: &str, file_bytes: u64) -> Vec<Value> {
    assert_eq!(v["workload"], workload);
    assert!(
        v["limits"]["memcpy_gb_per_sec"].as_f64() > Some(0.0),
        "{workload}: limits"
    );
    let rows = v["rows"].as_array().expect("rows is an array").clone();
    for system in ["folio", "kernel"] {
        assert!(
            rows.iter().any(|r| r["system"] == system),
            "{workload}: no {system} row"
        );
    }
    for row in &rows {
        assert!(row["ops_per_sec"].as_f64() > Some(0.0), "{row}");
        assert!(row["mb_per_sec"].as_f64() > Some(0.0), "{row}");
        assert!(
            row["bytes_written"].as_u64() > Some(0),
            "{workload}: wrote nothing: {row}"
        );
        assert_eq!(row["bytes_verified"], row["bytes_read"], "{row}");
        assert!(
            row["sync_p50_us"].as_f64() > Some(0.0),
            "{workload}: syncs timed: {row}"
        );
        assert!(
            row["sync_p99_us"].as_f64() >= row["sync_p50_us"].as_f64(),
            "{row}"
        );
    }
    let folio = rows.iter().find(|r| r["system"] == "folio").unwrap();
    assert_eq!(
        folio["disk_verified_bytes"], file_bytes,
        "{workload}: {folio}"
    );
    assert_eq!(folio["folio"]["writeback_errors"], 0, "{folio}");
    assert_eq!(folio["folio"]["dirty_pages_after_sync"], 0, "{folio}");
    assert!(folio["write_amplification"].as_f64() > Some(0.0), "{folio}");
    rows
}

/// Prints why the kernel side ran without a cgroup, or checks its limit.
fn check_equal_memory(v: &Value, limit_bytes: u64) {
    if v["params"]["kernel_memory_limit_bytes"].is_null() {
        let why: Vec<&str> = v["notes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n.as_str())
            .filter(|n| n.contains("cgroup"))
            .collect();
        eprintln!("skipping the cgroup check of {}: {why:?}", v["workload"]);
    } else {
        assert_eq!(v["params"]["kernel_memory_limit_bytes"], limit_bytes);
    }
}

fn row<'a>(rows: &'a [Value], system: &str, threads: u64) -> &'a Value {
    rows.iter()
        .find(|r| r["system"] == system && r["threads"] == threads)
        .unwrap_or_else(|| panic!("no {system} row at {threads} threads"))
}

#[test]
fn every_workload_runs_tiny_with_the_promised_json() {
    let started = Instant::now();
    let dir = data_dir();
    let d = dir.path();

    let v = run(
        d,
        "pread-scale",
        &["pread-scale", "--threads", "1,2", "--duration-secs", "0.1"],
    );
    let rows = check_shape(&v, "pread-scale");
    assert!(rows.iter().any(|r| r["system"] == "folio-pinned"));

    let v = run(
        d,
        "readseq",
        &[
            "readseq",
            "--threads",
            "1,2",
            "--file-mib",
            "4",
            "--direct-cap-secs",
            "0.2",
        ],
    );
    let rows = check_shape(&v, "readseq");
    check_file_pages(&v);
    assert!(rows.iter().any(|r| r["system"] == "direct"));
    // Nothing evicted: folio inserted each page of the data it scanned exactly once.
    let pages = v["params"]["file_pages"].as_u64().unwrap();
    assert_eq!(row(&rows, "folio", 1)["pages_inserted"], pages);
    assert_eq!(row(&rows, "folio", 2)["pages_inserted"], 2 * pages);
    // The same scans into a prefaulted cache, beside the library's default, same run.
    assert_eq!(row(&rows, "folio-prefault", 1)["pages_inserted"], pages);
    assert_eq!(row(&rows, "folio-prefault", 2)["pages_inserted"], 2 * pages);
    for system in ["folio", "folio-prefault"] {
        assert!(
            row(&rows, system, 1)["cache_build_ms"].as_f64().is_some(),
            "{system}: cache_build_ms"
        );
    }
    let fresh_over_prefault = v["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .find(|t| {
            t["what"]
                .as_str()
                .is_some_and(|w| w.contains("folio-prefault"))
        })
        .unwrap_or_else(|| panic!("no fresh cache / prefault target: {}", v["targets"]));
    assert!(
        fresh_over_prefault["measured"].as_f64() > Some(0.0),
        "{fresh_over_prefault}"
    );

    let v = run(
        d,
        "readseq-shared",
        &[
            "readseq",
            "--shared",
            "--threads",
            "4",
            "--file-mib",
            "4",
            "--direct-cap-secs",
            "0.2",
        ],
    );
    let rows = check_shape(&v, "readseq");
    check_file_pages(&v);
    assert_eq!(v["params"]["shared"], true);
    assert_eq!(
        row(&rows, "folio", 4)["pages_inserted"],
        v["params"]["file_pages"]
    );
    assert_eq!(
        row(&rows, "folio-prefault", 4)["pages_inserted"],
        v["params"]["file_pages"]
    );

    let v = run(
        d,
        "randread",
        &[
            "randread",
            "--threads",
            "4",
            "--cache-mib",
            "4",
            "--duration-secs",
            "0.3",
            "--warmup-secs",
            "0.1",
        ],
    );
    check_shape(&v, "randread");
    if v["params"]["kernel_memory_limit_bytes"].is_null() {
        let why: Vec<&str> = v["notes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n.as_str())
            .filter(|n| n.contains("cgroup"))
            .collect();
        eprintln!("skipping the cgroup check of randread: {why:?}");
    } else {
        assert_eq!(v["params"]["kernel_memory_limit_bytes"], 4 << 20);
    }

    let v = run(
        d,
        "readahead-storm",
        &[
            "readahead-storm",
            "--threads",
            "2,4",
            "--file-mib",
            "4",
            "--range-kib",
            "256",
        ],
    );
    let rows = check_shape(&v, "readahead-storm");
    check_file_pages(&v);
    for t in [2, 4] {
        assert_eq!(
            row(&rows, "folio", t)["pages_inserted"],
            v["params"]["file_pages"],
            "folio inserted each page once"
        );
    }

    let v = run(
        d,
        "limits",
        &[
            "limits",
            "--file-mib",
            "8",
            "--memcpy-mib",
            "8",
            "--memcpy-secs",
            "0.1",
        ],
    );
    let rows = check_shape(&v, "limits");
    assert!(rows.iter().any(|r| r["system"] == "memcpy"));
    assert!(rows.iter().any(|r| r["system"] == "odirect-qd32"));
    // The ceiling is the best point of the grid, and folio's scan is a fraction of it.
    let grid = v["params"]["odirect_grid"]
        .as_array()
        .expect("the O_DIRECT grid");
    assert!(grid.len() >= 4, "several shapes: {grid:?}");
    let best = grid
        .iter()
        .filter_map(|p| p["mb_per_sec"].as_f64())
        .fold(0.0, f64::max);
    let ceiling = v["limits"]["odirect_seq_mb_per_sec"].as_f64().unwrap();
    assert!((ceiling - best).abs() < 1e-6 * best, "{ceiling} vs {best}");
    assert_eq!(
        row(&rows, "odirect-best", 1)["mb_per_sec"].as_f64(),
        Some(ceiling)
    );
    for system in ["folio", "kernel"] {
        let of = row(&rows, system, 1)["of_odirect_ceiling"]
            .as_f64()
            .unwrap();
        let mb = row(&rows, system, 1)["mb_per_sec"].as_f64().unwrap();
        assert!((of - mb / ceiling).abs() < 1e-9, "{system}: {of}");
    }
    // Fresh memory: the whole mapping (8 MiB, four 2 MiB steps) first-touched, on 4 KiB
    // pages and then on huge pages where the kernel gives them.
    for system in ["fresh-4k", "fresh-huge"] {
        let fresh = row(&rows, system, 1);
        assert!(fresh["mb_per_sec"].as_f64() > Some(0.0), "{fresh}");
        assert!(fresh["of_odirect_ceiling"].is_null(), "{fresh}");
        assert!(fresh["huge_bytes"].as_u64().is_some(), "{fresh}");
    }
    assert_eq!(row(&rows, "fresh-4k", 1)["huge_bytes"].as_u64(), Some(0));
    assert!(
        v["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .is_some_and(|n| n.starts_with("fresh-4k and fresh-huge"))),
        "{}",
        v["notes"]
    );
    if v["params"]["fio"].is_null() {
        eprintln!("skipping the fio cross-check: no fio on PATH (Debian package fio)");
    } else {
        let fio = &v["params"]["fio"];
        assert!(fio["best_mb_per_sec"].as_f64() > Some(0.0), "{fio}");
        let ratio = fio["ceiling_over_fio_best"].as_f64().unwrap();
        assert!(
            v["targets"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["what"].as_str().is_some_and(|w| w.contains("fio"))
                    && t["measured"].as_f64() == Some(ratio)),
            "a fio target: {}",
            v["targets"]
        );
    }

    let v = run(
        d,
        "scale",
        &[
            "scale",
            "--files",
            "1,40",
            "--cache-mib",
            "1,2",
            "--threads",
            "1,3",
            "--threads-files",
            "20",
            "--duration-secs",
            "0.05",
        ],
    );
    check_scale(&v);

    // miss-cost: one thread's misses and hits, per system, every byte checked; the
    // instructions under callgrind where valgrind is installed.
    let v = run(
        d,
        "miss-cost",
        &[
            "miss-cost",
            "--file-mib",
            "16",
            "--misses",
            "200",
            "--hits",
            "1000",
            "--full-cache-mib",
            "1",
        ],
    );
    check_miss_cost(&v);

    // scan-mix: point reads beside a scan, the scan with and without NoReuse.
    let v = run(
        d,
        "scan-mix",
        &[
            "scan-mix",
            "--data-mib",
            "32",
            "--threads",
            "2",
            "--duration-secs",
            "0.3",
            "--warmup-secs",
            "0.2",
        ],
    );
    assert_eq!(v["workload"], "scan-mix");
    let rows = v["rows"].as_array().expect("rows");
    for system in ["folio", "folio-no-hint"] {
        let r = row(rows, system, 2);
        assert!(r["ops_per_sec"].as_f64() > Some(0.0), "{r}");
        assert_eq!(
            r["bytes_read"], r["bytes_verified"],
            "every byte checked: {r}"
        );
        assert!(
            r["hit_ratio"]
                .as_f64()
                .is_some_and(|h| (0.0..=1.0).contains(&h)),
            "{r}"
        );
        assert!(r["scan_mb_per_sec"].as_f64() > Some(0.0), "{r}");
    }
    assert_eq!(v["targets"].as_array().map(Vec::len), Some(2));

    // pressure, tiny and without a cgroup (so no real pressure): both sides' allocator
    // finishes, and the rows carry the samples the chart draws.
    let v = run(
        d,
        "pressure",
        &[
            "pressure",
            "--data-mib",
            "32",
            "--alloc-mib",
            "32",
            "--chunk-mib",
            "8",
            "--cgroup-max-mib",
            "0",
            "--before-secs",
            "0.3",
            "--after-secs",
            "0.5",
            "--hold-secs",
            "0",
        ],
    );
    let rows = check_shape(&v, "pressure");
    check_file_pages(&v);
    for system in ["folio", "kernel"] {
        let r = row(&rows, system, 4);
        assert_eq!(r["alloc_outcome"], "exit 0", "{r}");
        assert_eq!(r["reader_outcome"], "exit 0", "{r}");
        assert!(r["alloc_secs"].as_f64() > Some(0.0), "{r}");
        let touched = r["samples"]["alloc_touched_bytes"]
            .as_array()
            .expect("samples");
        assert_eq!(touched.last(), Some(&Value::from(32u64 << 20)), "{r}");
        assert!(
            r["samples"]["t_secs"]
                .as_array()
                .is_some_and(|t| !t.is_empty()),
            "{r}"
        );
        // The cache held the file (folio's resident memory counts its arena's whole
        // chunks, so it may be a little more; the kernel's last readahead may still be
        // landing when it is sampled: a CI run saw it two pages short).
        assert!(
            r["cache_before_bytes"].as_u64() >= Some((32 << 20) * 31 / 32),
            "the cache held the file: {r}"
        );
    }
    assert!(row(&rows, "folio", 4)["folio"]["capacity_bytes"].as_u64() > Some(0));
    assert_eq!(v["targets"].as_array().map(Vec::len), Some(4));

    let v = run(
        d,
        "writeseq",
        &[
            "writeseq",
            "--file-mib",
            "4",
            "--cache-mib",
            "4",
            "--direct-cap-secs",
            "0.2",
        ],
    );
    let rows = check_writes(&v, "writeseq", 4 << 20);
    assert!(rows.iter().any(|r| r["system"] == "direct"));
    // Every record appended by folio and the kernel (direct may be stopped early).
    for system in ["folio", "kernel"] {
        assert_eq!(row(&rows, system, 1)["bytes_written"], 4 << 20, "{system}");
    }

    let v = run(
        d,
        "randwrite",
        &[
            "randwrite",
            "--threads",
            "4",
            // Past the read-through's first windows (smaller folios), so that some of the
            // file sits in 2 MiB folios for the amplification check.
            "--file-mib",
            "64",
            "--cache-mib",
            "80",
            "--duration-secs",
            "0.3",
            "--warmup-secs",
            "0.1",
            "--check-writes",
            "256",
            "--sync-every-writes",
            "50",
        ],
    );
    let rows = check_writes(&v, "randwrite", 64 << 20);
    check_equal_memory(&v, 80 << 20);
    for r in &rows {
        assert_eq!(r["bytes_read"], 0, "randwrite only writes: {r}");
    }
    let folio = row(&rows, "folio", 4);
    assert_eq!(
        folio["disk_known_blocks"], 16384,
        "the read-through saw every block"
    );
    let check = &v["params"]["amplification_check"];
    assert_eq!(check["writes"], 256, "{check}");
    assert_eq!(check["disk_verified_bytes"], 64 << 20, "{check}");
    let amplification = check["write_amplification"].as_f64().expect("a figure");
    assert!(
        amplification > 0.0 && amplification <= 1.1,
        "4 KiB writes into 2 MiB folios write back only their blocks: {check}"
    );

    let v = run(
        d,
        "randrw",
        &[
            "randrw",
            "--threads",
            "4",
            "--cache-mib",
            "4",
            "--duration-secs",
            "0.3",
            "--warmup-secs",
            "0.1",
            "--sync-every-writes",
            "50",
        ],
    );
    let rows = check_writes(&v, "randrw", 8 << 20);
    check_equal_memory(&v, 4 << 20);
    for r in &rows {
        assert!(r["bytes_read"].as_u64() > Some(0), "randrw reads too: {r}");
    }
    assert!(row(&rows, "kernel", 4)["torn_reads_reread"].is_u64());

    let v = run(
        d,
        "keeper",
        &[
            "keeper",
            "--dirty-mib",
            "2",
            "--files",
            "2",
            "--cache-mib",
            "64",
        ],
    );
    check_keeper(&v, 2 << 20);

    let took = started.elapsed().as_secs_f64();
    eprintln!("every workload, tiny: {took:.1} s");
    // A budget against a tiny run growing large, not a speed: CI runs this beside other
    // jobs on two shared cores (issue 42), so the bound is three times the old one.
    assert!(took < 180.0, "the tiny run took {took:.1} s");
}
