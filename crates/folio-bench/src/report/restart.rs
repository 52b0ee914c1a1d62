//! How `restart` shows: a table of one line per system and phase (the window's mean
//! reads per second, its ratio to the warm window before it and to the kernel's same
//! phase, the build and the keeper's time, what the adoption kept, every second's rate),
//! and a chart of the first window's reads per second after each start, one panel per
//! system, with the warm rates as horizontal lines.
//!
//! Design: pure functions of the `restart` report's rows, which carry their phase and
//! their rounds' per-second rates in their extras.

use plotters::prelude::*;
use serde_json::Value;

use crate::workloads::restart::Phase;
use crate::workloads::{Report, Row};

fn phase_of(row: &Row) -> &str {
    row.extra
        .get("phase")
        .and_then(Value::as_str)
        .unwrap_or("-")
}

/// The median round's per-second rates of `row`, in reads per second.
fn per_sec(row: &Row) -> Vec<f64> {
    row.extra
        .get("per_sec")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

/// What the adoption of the median round kept, in words: "n pages" or "cold".
fn adopted(row: &Row) -> String {
    match row.extra.get("adoption") {
        Some(Value::Object(a)) => match a.get("pages_kept").and_then(Value::as_u64) {
            Some(kept) => format!(
                "{kept} kept, {} dropped",
                a.get("pages_dropped").and_then(Value::as_u64).unwrap_or(0)
            ),
            None => "?".to_string(),
        },
        Some(Value::Null) => "none".to_string(),
        _ => String::new(),
    }
}

/// The terminal table of a `restart` report (with its notes and targets).
pub fn table(report: &Report) -> String {
    let p = |k: &str| report.params.get(k).and_then(Value::as_u64).unwrap_or(0);
    let first = report
        .params
        .get("first_secs")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let threads = report
        .params
        .get("threads")
        .and_then(|t| t.get(0))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let mut out = if report.workload == "restart" {
        format!(
            "\n== restart ==  ({} MiB in {} files, {threads} threads of random 4 KiB reads, \
             every byte checked; first window {first} s)\n",
            p("data_bytes") >> 20,
            p("files"),
        )
    } else {
        format!(
            "\n== {} ==  (db_bench readrandom, {} MiB of tables, {threads} threads; first \
             window {first} s)\n",
            report.workload,
            p("db_bytes") >> 20,
        )
    };
    out += &format!(
        "{:<7} {:<17} {:>12} {:>8} {:>13} {:>7} {:>7} {:>9} {:>9}  {:<24} {}\n",
        "system",
        "phase",
        "ops/s",
        "vs warm",
        "folio/kernel",
        "p50 us",
        "p99 us",
        "build ms",
        "keeper ms",
        "adopted (pages)",
        "each second (k ops/s)"
    );
    for row in &report.rows {
        let ratio = |v: Option<f64>| v.map_or_else(String::new, |r| format!("{r:.2}x"));
        let ms = |key: &str| {
            row.extra
                .get(key)
                .and_then(Value::as_f64)
                .map_or_else(|| "-".to_string(), |v| format!("{v:.0}"))
        };
        let seconds = per_sec(row)
            .iter()
            .map(|r| format!("{:.0}", r / 1e3))
            .collect::<Vec<_>>()
            .join(" ");
        out += &format!(
            "{:<7} {:<17} {:>12.0} {:>8} {:>13} {:>7.2} {:>7.1} {:>9} {:>9}  {:<24} {seconds}\n",
            row.system,
            phase_of(row),
            row.ops_per_sec,
            ratio(row.extra.get("vs_warm").and_then(Value::as_f64)),
            ratio(row.vs_kernel),
            row.p50_us,
            row.p99_us,
            ms("build_ms"),
            ms("keeper_ms"),
            adopted(row),
        );
    }
    out += "  (rows: the median round; vs warm: the median of the per-round ratios of the \
            window to the warm window of the process before it; folio/kernel: the same phase, \
            per round)\n";
    out += &super::notes_and_targets(report);
    out
}

/// One colour per phase.
fn color_of(phase: &str) -> RGBColor {
    match phase {
        "restart-clean" => RGBColor(0x1f, 0x77, 0xb4),
        "restart-kill" => RGBColor(0x2c, 0xa0, 0x2c),
        "cold" => RGBColor(0xd6, 0x27, 0x28),
        "warm" => RGBColor(0x7f, 0x7f, 0x7f),
        _ => RGBColor(0xff, 0x7f, 0x0e),
    }
}

/// Draws the first window's reads per second after each start, one panel per system, the
/// warm windows' means as horizontal lines.
pub fn plot(path: &std::path::Path, report: &Report) -> Result<(), Box<dyn std::error::Error>> {
    let mut systems: Vec<&str> = Vec::new();
    for row in &report.rows {
        if !systems.contains(&row.system.as_str()) {
            systems.push(&row.system);
        }
    }
    let root = SVGBackend::new(path, (560 * systems.len().max(1) as u32, 380)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, systems.len().max(1)));
    let y_max = report
        .rows
        .iter()
        .flat_map(|r| per_sec(r).into_iter().chain([r.ops_per_sec]))
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.2
        / 1e3;
    let x_max = report
        .rows
        .iter()
        .map(|r| per_sec(r).len())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    for (panel, system) in panels.iter().zip(&systems) {
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("{}: {system}", report.workload), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_desc("seconds since reads began")
            .y_desc("thousand reads/s")
            .draw()?;
        for row in report.rows.iter().filter(|r| r.system == *system) {
            let phase = phase_of(row).to_string();
            let color = color_of(&phase);
            let is_first = [Phase::RestartClean, Phase::RestartKill, Phase::Cold]
                .iter()
                .any(|p| p.as_str() == phase);
            if is_first {
                // A step per second: the second's rate over the whole second.
                let points: Vec<(f64, f64)> = per_sec(row)
                    .iter()
                    .enumerate()
                    .flat_map(|(i, r)| [(i as f64, r / 1e3), (i as f64 + 1.0, r / 1e3)])
                    .collect();
                chart
                    .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                    .label(phase)
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], color));
            } else {
                let y = row.ops_per_sec / 1e3;
                chart
                    .draw_series(LineSeries::new(
                        [(0.0, y), (x_max, y)],
                        color.stroke_width(1),
                    ))?
                    .label(format!("{phase} (mean)"))
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], color));
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
