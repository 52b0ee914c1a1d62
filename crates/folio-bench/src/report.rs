//! What a run shows: the terminal table (with the folio/kernel ratio in its own column),
//! the JSON file (issue 7's shape; `compare` wraps the list as `{"workloads": [...]}`),
//! and the SVG chart (throughput per system and thread count, one panel per workload).
//! `scale` and `pressure` have tables and charts of their own (`report/scale.rs`,
//! `report/pressure.rs`), `keeper` a table of its own (`report/keeper.rs`), `restart` a table and chart of its
//! own (`report/restart.rs`).
//!
//! Design: everything here is a pure function of `Report`s (and a few words about the
//! machine); nothing is measured here. Numbers on the terminal are rounded for reading;
//! the JSON keeps full precision.
//!
//! Limits: the chart uses plotters' built-in text metrics (no font files needed), so label
//! widths are estimates; the SVG viewer picks the font.

use std::io;
use std::path::Path;

use plotters::prelude::*;
use serde_json::{json, Value};

use crate::workloads::{Metric, Report, System};

mod keeper;
mod pressure;
mod restart;
mod scale;

/// The table, notes and targets of one report, as text.
pub fn table(report: &Report) -> String {
    if report.workload == "scale" {
        return scale::table(report);
    }
    if report.workload == "pressure" {
        return pressure::table(report);
    }
    if report.workload == "keeper" {
        return keeper::table(report);
    }
    if report.workload == "restart" || report.workload == "db-bench-restart" {
        return restart::table(report);
    }
    let mut out = String::new();
    let shared = report.params.get("shared") == Some(&Value::Bool(true));
    out += &format!(
        "\n== {}{} ==  (limits: memcpy {:.1} GB/s, O_DIRECT ceiling {:.0} MB/s)\n",
        report.workload,
        if shared { " --shared" } else { "" },
        report.limits.memcpy_gb_per_sec,
        report.limits.odirect_seq_mb_per_sec
    );
    let ratio_name = match report.ratio_of {
        Metric::OpsPerSec => "ops/s",
        Metric::MbPerSec => "MB/s",
    };
    // The write workloads show their syncs' latency where the read ones show pages
    // inserted.
    let writes = report.rows.iter().any(|r| r.bytes_written > 0);
    let last = if writes {
        format!("{:>11} {:>11}", "sync p50 us", "sync p99 us")
    } else {
        format!("{:>14}", "pages inserted")
    };
    out += &format!(
        "{:<14} {:>7} {:>14} {:>10} {:>10} {:>10} {last} {:>13}\n",
        "system", "threads", "ops/s", "MB/s", "p50 us", "p99 us", "folio/kernel"
    );
    for row in &report.rows {
        let ratio = match row.vs_kernel {
            Some(r)
                if matches!(
                    System::named(&row.system),
                    Some(
                        System::Folio
                            | System::FolioPinned
                            | System::FolioAsync
                            | System::FolioPrefault
                    )
                ) =>
            {
                format!("{r:.2}x")
            }
            _ => String::new(),
        };
        let last = if writes {
            let us = |p: Option<f64>| p.map_or_else(|| "-".to_string(), micros);
            format!("{:>11} {:>11}", us(row.sync_p50_us), us(row.sync_p99_us))
        } else {
            let pages = row.pages_inserted;
            format!(
                "{:>14}",
                pages.map_or_else(|| "-".to_string(), |p| p.to_string())
            )
        };
        out += &format!(
            "{:<14} {:>7} {:>14} {:>10.1} {:>10} {:>10} {last} {:>13}\n",
            row.system,
            row.threads,
            thousands(row.ops_per_sec),
            row.mb_per_sec,
            micros(row.p50_us),
            micros(row.p99_us),
            ratio
        );
    }
    out += &format!(
        "  (rows: the median run; folio/kernel: the median of the per-run {ratio_name} ratios)\n"
    );
    out += &notes_and_targets(report);
    out
}

/// The `note:` and `target:` lines every table ends with.
pub fn notes_and_targets(report: &Report) -> String {
    let mut out = String::new();
    for note in &report.notes {
        out += &format!("  note: {note}\n");
    }
    for t in &report.targets {
        out += &format!(
            "  target: {:<70} {:>10} (needs {}) {}\n",
            t.what,
            t.measured
                .map_or_else(|| "n/a".to_string(), |m| format!("{m:.2}")),
            t.required,
            if t.met { "met" } else { "MISSED" }
        );
    }
    out
}

fn thousands(x: f64) -> String {
    let n = x.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn micros(us: f64) -> String {
    if us < 10.0 {
        format!("{us:.2}")
    } else {
        format!("{us:.0}")
    }
}

/// Writes one workload's report, with the `run` facts in it.
pub fn write_report_json(path: &Path, report: &Report, run: Value) -> io::Result<()> {
    let mut value = serde_json::to_value(report).map_err(io::Error::other)?;
    value["run"] = run;
    write_pretty(path, &value)
}

/// Writes the reports of a comparison as `{"workloads": [...], "run": ...}`.
pub fn write_comparison_json(path: &Path, reports: &[Report], run: Value) -> io::Result<()> {
    write_pretty(path, &json!({ "workloads": reports, "run": run }))
}

fn write_pretty(path: &Path, value: &Value) -> io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
    std::fs::write(path, text + "\n")
}

/// One colour per system, the same in every panel.
fn color_of(system: &str, index: usize) -> RGBColor {
    match System::named(system) {
        Some(System::Folio) => RGBColor(0x1f, 0x77, 0xb4),
        Some(System::FolioPinned) => RGBColor(0x6b, 0xae, 0xd6),
        Some(System::FolioAsync) => RGBColor(0x39, 0x3b, 0x79),
        Some(System::FolioNoHint) => RGBColor(0xbc, 0xbd, 0x22),
        Some(System::Kernel) => RGBColor(0xd6, 0x27, 0x28),
        Some(System::Direct) => RGBColor(0x2c, 0xa0, 0x2c),
        Some(System::Memcpy) => RGBColor(0xff, 0x7f, 0x0e),
        Some(System::FolioPrefault) => RGBColor(0x17, 0xbe, 0xcf),
        Some(System::ODirectQd32) => RGBColor(0x94, 0x67, 0xbd),
        Some(System::ODirectBest | System::ODirectGrid) => RGBColor(0xe3, 0x77, 0xc2),
        Some(System::Fresh4k) => RGBColor(0x7f, 0x7f, 0x7f),
        Some(System::FreshHuge) => RGBColor(0x8c, 0x56, 0x4b),
        Some(System::FolioFull) => RGBColor(0xae, 0xc7, 0xe8),
        Some(System::FolioPrivate) => RGBColor(0xff, 0xbb, 0x78),
        // A row of a JSON file written by another version.
        None => [RGBColor(0x8c, 0x56, 0x4b), RGBColor(0x7f, 0x7f, 0x7f)][index % 2],
    }
}

/// Draws throughput per system and thread count: one panel per report, bars grouped by
/// thread count.
pub fn plot(path: &Path, reports: &[Report]) -> io::Result<()> {
    if let [report] = reports {
        if report.workload == "scale" {
            return scale::plot(path, report).map_err(|e| io::Error::other(format!("plot: {e}")));
        }
        if report.workload == "pressure" {
            return pressure::plot(path, report)
                .map_err(|e| io::Error::other(format!("plot: {e}")));
        }
        if report.workload == "restart" || report.workload == "db-bench-restart" {
            return restart::plot(path, report).map_err(|e| io::Error::other(format!("plot: {e}")));
        }
    }
    let cols = if reports.len() > 1 { 2 } else { 1 };
    let rows = reports.len().div_ceil(cols);
    let size = (560 * cols as u32, 360 * rows as u32);
    let root = SVGBackend::new(path, size).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| io::Error::other(format!("plot: {e}"));
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let panels = root.split_evenly((rows, cols));
    for (panel, report) in panels.iter().zip(reports) {
        draw_panel(panel, report).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

fn draw_panel(
    panel: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    report: &Report,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut groups: Vec<u32> = Vec::new();
    let mut systems: Vec<&str> = Vec::new();
    for row in &report.rows {
        if !groups.contains(&row.threads) {
            groups.push(row.threads);
        }
        if !systems.contains(&row.system.as_str()) {
            systems.push(&row.system);
        }
    }
    let (metric_name, scale) = match report.ratio_of {
        Metric::OpsPerSec => ("ops/s (millions)", 1e-6),
        Metric::MbPerSec => ("MB/s", 1.0),
    };
    let value = |r: &crate::workloads::Row| report.ratio_of.of(r) * scale;
    let y_max = report.rows.iter().map(value).fold(0.0, f64::max).max(1e-9) * 1.2;
    let shared = report.params.get("shared") == Some(&Value::Bool(true));
    let title = format!(
        "{}{}",
        report.workload,
        if shared { " --shared" } else { "" }
    );
    let mut chart = ChartBuilder::on(panel)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..groups.len() as f64, 0f64..y_max)?;
    let labels = groups.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&|x| {
            // Labels only at group centres (x = g + 0.5).
            if (x.fract() - 0.5).abs() > 0.01 {
                return String::new();
            }
            labels
                .get(x.floor() as usize)
                .map_or_else(String::new, |&t| {
                    format!("{t} thread{}", if t == 1 { "" } else { "s" })
                })
        })
        .y_desc(metric_name)
        .draw()?;
    let width = 0.8 / systems.len() as f64;
    for (si, system) in systems.iter().enumerate() {
        let color = color_of(system, si);
        let bars: Vec<Rectangle<(f64, f64)>> = report
            .rows
            .iter()
            .filter(|r| r.system == *system)
            .filter_map(|r| {
                let g = groups.iter().position(|t| *t == r.threads)? as f64;
                let x0 = g + 0.1 + si as f64 * width;
                Some(Rectangle::new(
                    [(x0, 0.0), (x0 + width * 0.95, value(r))],
                    color.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(bars)?
            .label(*system)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
