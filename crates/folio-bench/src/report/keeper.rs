//! How `keeper` shows: one line per shape and system, the time from the owner's death (or
//! the first `fsync`) to the data durable: its median and maximum over the runs, every
//! run's, the rate, and folio's rate over the kernel's.
//!
//! Design: a pure function of the `keeper` report's rows, which carry their shape and their
//! runs' times in their extras.

use serde_json::Value;

use crate::workloads::{Report, Row};

fn extra_f64(row: &Row, key: &str) -> Option<f64> {
    row.extra.get(key).and_then(Value::as_f64)
}

/// The terminal table of a `keeper` report (with its notes).
pub fn table(report: &Report) -> String {
    let dirty_mib = report
        .params
        .get("dirty_bytes")
        .and_then(Value::as_u64)
        .unwrap_or(0)
        >> 20;
    let mut out = format!(
        "\n== keeper ==  ({dirty_mib} MiB dirty; limits: O_DIRECT ceiling {:.0} MB/s)\n",
        report.limits.odirect_seq_mb_per_sec
    );
    out += &format!(
        "{:<6} {:<7} {:>13} {:>10} {:>10} {:>13} {:>12}  {:<}\n",
        "shape",
        "system",
        "synced p50 ms",
        "max ms",
        "MB/s",
        "folio/kernel",
        "exit p50 ms",
        "each run (ms)"
    );
    for row in &report.rows {
        let shape = row
            .extra
            .get("shape")
            .and_then(Value::as_str)
            .unwrap_or("-");
        let runs = row
            .extra
            .get("synced_ms_runs")
            .and_then(Value::as_array)
            .map(|runs| {
                runs.iter()
                    .filter_map(Value::as_f64)
                    .map(|ms| format!("{ms:.0}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        let cell = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.0}"));
        out += &format!(
            "{:<6} {:<7} {:>13} {:>10} {:>10.1} {:>13} {:>12}  {runs}\n",
            shape,
            row.system,
            cell(extra_f64(row, "synced_ms_p50")),
            cell(extra_f64(row, "synced_ms_max")),
            row.mb_per_sec,
            row.vs_kernel
                .map_or_else(String::new, |r| format!("{r:.2}x")),
            cell(extra_f64(row, "keeper_exit_ms_p50")),
        );
    }
    out +=
        "  (synced: folio from the owner's SIGKILL to its segment's removal by the keeper (after \
            its writes and fsyncs), the kernel the fsync of the files; exit p50: the keeper's \
            exit; MB/s: the median run's dirty data over that time; folio/kernel: the \
            median of the per-run MB/s ratios, above 1 when the keeper is faster)\n";
    out += &super::notes_and_targets(report);
    out
}
