//! How `scale` shows: a table with one line per point of each axis (the three systems
//! side by side) and a chart of four panels: ns (CPU) per read against open files, against
//! cache size and against threads, and ops/s against threads, one line per system, log
//! x axes.
//!
//! Design: a pure function of the `scale` report's rows, which carry their axis, their
//! point (`x`) and the per-read figures in their extras.
//!
//! Limits: a point that lacks a system's row shows `-` in the table and no marker in the
//! chart.

use plotters::prelude::*;
use serde_json::Value;

use crate::workloads::scale::{describe_x, Axis};
use crate::workloads::{Report, Row, System};

const SYSTEMS: [System; 3] = [System::Folio, System::Kernel, System::Memcpy];
const AXES: [(Axis, &str); 3] = [
    (Axis::Files, "files"),
    (Axis::Cache, "cache"),
    (Axis::Threads, "threads"),
];

fn extra_f64(row: &Row, key: &str) -> Option<f64> {
    row.extra.get(key).and_then(Value::as_f64)
}

fn rows_of<'a>(report: &'a Report, axis: &str) -> Vec<(u64, Vec<&'a Row>)> {
    let mut points: Vec<(u64, Vec<&Row>)> = Vec::new();
    for row in &report.rows {
        if row.extra.get("axis").and_then(Value::as_str) != Some(axis) {
            continue;
        }
        let Some(x) = row.extra.get("x").and_then(Value::as_u64) else {
            continue;
        };
        match points.iter_mut().find(|(px, _)| *px == x) {
            Some((_, rows)) => rows.push(row),
            None => points.push((x, vec![row])),
        }
    }
    points
}

fn cell(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}

/// The terminal table of a `scale` report (with its notes and targets).
pub fn table(report: &Report) -> String {
    let mut out = format!(
        "\n== scale ==  (4 KiB hits; limits: memcpy {:.1} GB/s)\n",
        report.limits.memcpy_gb_per_sec
    );
    out += &format!(
        "{:<8} {:>12} | {:>26} | {:>12} | {:>26} | {:>26}\n",
        "axis",
        "point",
        "ns/read folio kernel memcpy",
        "folio/memcpy",
        "wall ns folio kernel memcpy",
        "Mops/s folio kernel memcpy"
    );
    for (axis, name) in AXES {
        for (x, rows) in rows_of(report, name) {
            let of = |system: System| rows.iter().find(|r| r.system == system.as_str()).copied();
            let col = |key: &str| {
                SYSTEMS
                    .iter()
                    .map(|s| format!("{:>8}", cell(of(*s).and_then(|r| extra_f64(r, key)), 0)))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let mops = SYSTEMS
                .iter()
                .map(|s| format!("{:>8}", cell(of(*s).map(|r| r.ops_per_sec / 1e6), 2)))
                .collect::<Vec<_>>()
                .join(" ");
            let ratio = of(System::Folio).and_then(|r| extra_f64(r, "cost_over_memcpy"));
            out += &format!(
                "{:<8} {:>12} | {} | {:>11}x | {} | {}\n",
                name,
                describe_x(axis, x),
                col("ns_per_read_median"),
                cell(ratio, 2),
                col("wall_ns_per_read_median"),
                mops
            );
        }
    }
    out += "  (ns/read: CPU time per read; wall ns: wall time per read; medians of the runs; \
            Mops/s: the median run)\n";
    out += &super::notes_and_targets(report);
    out
}

/// The four panels of a `scale` report, as an SVG at `path`.
pub fn plot(path: &std::path::Path, report: &Report) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1120, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((2, 2));
    let specs: [(&str, &str, &str, &str, f64); 4] = [
        (
            "files",
            "ns per 4 KiB hit vs open files (1 thread)",
            "open files",
            "ns_per_read_median",
            1.0,
        ),
        (
            "cache",
            "ns per 4 KiB hit vs cache size (1 thread)",
            "cache (MiB)",
            "ns_per_read_median",
            1.0,
        ),
        (
            "threads",
            "ns per hit vs threads (2 cores)",
            "threads",
            "ns_per_read_median",
            1.0,
        ),
        (
            "threads",
            "hits per second vs threads (2 cores)",
            "threads",
            "ops_per_sec",
            1e-6,
        ),
    ];
    for (panel, (axis, title, x_desc, key, scale)) in panels.iter().zip(specs) {
        let points = rows_of(report, axis);
        if points.is_empty() {
            continue;
        }
        let x_of = |x: u64| {
            if axis == "cache" {
                x as f64 / (1 << 20) as f64
            } else {
                x as f64
            }
        };
        let value = |row: &Row| {
            if key == "ops_per_sec" {
                Some(row.ops_per_sec * scale)
            } else {
                extra_f64(row, key).map(|v| v * scale)
            }
        };
        let xs: Vec<f64> = points.iter().map(|(x, _)| x_of(*x)).collect();
        let x_min = xs.iter().copied().fold(f64::MAX, f64::min).max(1e-3);
        let x_max = xs.iter().copied().fold(0.0, f64::max).max(x_min * 2.0);
        let y_max = points
            .iter()
            .flat_map(|(_, rows)| rows.iter().filter_map(|r| value(r)))
            .fold(0.0, f64::max)
            .max(1e-9)
            * 1.15;
        let y_desc = if key == "ops_per_sec" {
            "M hits/s"
        } else {
            "ns"
        };
        let mut chart = ChartBuilder::on(panel)
            .caption(title, ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(56)
            .build_cartesian_2d((x_min * 0.8..x_max * 1.25).log_scale(), 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .draw()?;
        for system in SYSTEMS {
            let color = super::color_of(system.as_str(), 0);
            let line: Vec<(f64, f64)> = points
                .iter()
                .filter_map(|(x, rows)| {
                    let row = rows.iter().find(|r| r.system == system.as_str())?;
                    Some((x_of(*x), value(row)?))
                })
                .collect();
            if line.is_empty() {
                continue;
            }
            chart
                .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))?
                .label(system.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
            chart.draw_series(line.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
