//! How `pressure` shows: a table with one line per side (what happened to the allocating
//! process, the cache's size and the readers' rate before, during and after the
//! allocation) and a chart of two panels, folio's and the kernel's, each with the three
//! curves of issue 30 over time: the cache's size, the allocator's progress (GiB, left
//! axis) and the reads per second (right axis).
//!
//! Design: a pure function of the `pressure` report: each row's extras carry its figures
//! and its run's samples as columns (`samples`), time 0 at the allocator's start.
//!
//! Limits: the chart draws the run each row is (the median one by reads/s during the
//! allocation); the JSON has every run's allocator time and outcome.

use plotters::prelude::*;
use serde_json::Value;

use crate::workloads::{Report, Row, System};

const GIB: f64 = (1u64 << 30) as f64;

fn f64_of(row: &Row, key: &str) -> Option<f64> {
    row.extra.get(key).and_then(Value::as_f64)
}

fn gib(row: &Row, key: &str) -> String {
    f64_of(row, key).map_or_else(|| "-".to_string(), |b| format!("{:.2}", b / GIB))
}

fn secs(row: &Row, key: &str) -> String {
    f64_of(row, key).map_or_else(|| "-".to_string(), |s| format!("{s:.2}"))
}

fn rate(row: &Row, key: &str) -> String {
    f64_of(row, key).map_or_else(|| "-".to_string(), |r| format!("{:.0}", r))
}

/// The terminal table of a `pressure` report (with its notes and targets).
pub fn table(report: &Report) -> String {
    let mut out = "\n== pressure ==  (cache sizes in GiB; reads/s of 4 KiB)\n".to_string();
    out += &format!(
        "{:<7} {:>9} {:>8} {:<34} {:<34} {:>6} {:>6} {:>6} {:>7} {:>6} {:>9} {:>9} {:>9} {:>9} {:>7}\n",
        "system",
        "alloc s",
        "wall s",
        "allocator",
        "reader",
        "before",
        "min",
        "exit",
        "end",
        "OOM",
        "rd/s bef",
        "rd/s dur",
        "rd/s aft",
        "stalled s",
        "PSI s"
    );
    for row in &report.rows {
        let outcome = |key: &str| {
            row.extra
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("-")
                .to_string()
        };
        let ooms = row
            .extra
            .get("oom_kills_machine")
            .and_then(Value::as_u64)
            .map_or_else(|| "-".to_string(), |n| n.to_string());
        out += &format!(
            "{:<7} {:>9} {:>8} {:<34} {:<34} {:>6} {:>6} {:>6} {:>7} {:>6} {:>9} {:>9} {:>9} {:>9} {:>7}\n",
            row.system,
            f64_of(row, "alloc_secs").map_or_else(|| "-".to_string(), |s| format!("{s:.2}")),
            f64_of(row, "alloc_wall_secs").map_or_else(|| "-".to_string(), |s| format!("{s:.2}")),
            outcome("alloc_outcome"),
            outcome("reader_outcome"),
            gib(row, "cache_before_bytes"),
            gib(row, "cache_min_bytes"),
            gib(row, "cache_at_alloc_exit_bytes"),
            gib(row, "cache_end_bytes"),
            ooms,
            rate(row, "reads_per_sec_before"),
            rate(row, "reads_per_sec_during"),
            rate(row, "reads_per_sec_after"),
            secs(row, "reads_stalled_secs"),
            secs(row, "psi_some_stall_secs"),
        );
        if let Some(runs) = row.extra.get("alloc_secs_runs").and_then(Value::as_array) {
            if runs.len() > 1 {
                let list: Vec<String> = runs
                    .iter()
                    .map(|v| {
                        v.as_f64()
                            .map_or_else(|| "killed".into(), |s| format!("{s:.2}"))
                    })
                    .collect();
                out += &format!(
                    "        every run's allocator time (s): {}\n",
                    list.join(", ")
                );
            }
        }
    }
    out += &format!(
        "  allocator time folio/kernel: {}\n",
        report
            .params
            .get("alloc_time_ratio")
            .and_then(Value::as_f64)
            .map_or_else(
                || "- (an allocator did not finish)".to_string(),
                |r| format!("{r:.2}x")
            )
    );
    out += "  (alloc s: the allocator's own time to allocate and touch everything; wall: spawn \
            to exit; before/min/exit/end: the cache before the allocation, at its lowest, at \
            the allocator's exit, at the end; OOM: kills the kernel counted during the side; \
            stalled s: time in which no read completed; PSI s: the machine's memory stall \
            time (some) over the reads; rows: the median run by reads/s during the \
            allocation)\n";
    out += &super::notes_and_targets(report);
    out
}

/// The samples of `row` as (x, y) points of `y_key` (scaled by `scale`), skipping nulls.
fn points(row: &Row, x_key: &str, y_key: &str, scale: f64) -> Vec<(f64, f64)> {
    let Some(samples) = row.extra.get("samples") else {
        return Vec::new();
    };
    let column = |key: &str| {
        samples
            .get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    column(x_key)
        .iter()
        .zip(column(y_key))
        .filter_map(|(x, y)| Some((x.as_f64()?, y.as_f64()? * scale)))
        .collect()
}

/// The two panels of a `pressure` report, as an SVG at `path`.
pub fn plot(path: &std::path::Path, report: &Report) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1200, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, 2));
    let rows: Vec<&Row> = [System::Folio, System::Kernel]
        .iter()
        .filter_map(|s| report.rows.iter().find(|r| r.system == s.as_str()))
        .collect();
    // One scale for both panels, so that they compare at a glance.
    let mut x_range = (0f64, 1f64);
    let (mut gib_max, mut rate_max) = (1f64, 1f64);
    for row in &rows {
        for (x, y) in points(row, "t_secs", "cache_bytes", 1.0 / GIB)
            .into_iter()
            .chain(points(row, "t_secs", "resident_bytes", 1.0 / GIB))
            .chain(points(
                row,
                "alloc_t_secs",
                "alloc_touched_bytes",
                1.0 / GIB,
            ))
        {
            x_range = (x_range.0.min(x), x_range.1.max(x));
            gib_max = gib_max.max(y);
        }
        for (_, y) in points(row, "t_secs", "reads_per_sec", 1e-3) {
            rate_max = rate_max.max(y);
        }
    }
    for (panel, row) in panels.iter().zip(&rows) {
        let color = super::color_of(&row.system, 0);
        let outcome = |key: &str| {
            row.extra
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("-")
                .to_string()
        };
        let title = format!(
            "{}: allocator {}, reader {}",
            row.system,
            outcome("alloc_outcome"),
            outcome("reader_outcome")
        );
        let mut chart = ChartBuilder::on(panel)
            .caption(title, ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(48)
            .right_y_label_area_size(56)
            .build_cartesian_2d(x_range.0..x_range.1, 0f64..gib_max * 1.15)?
            .set_secondary_coord(x_range.0..x_range.1, 0f64..rate_max * 1.2);
        chart
            .configure_mesh()
            .x_desc("seconds since the allocator started")
            .y_desc("GiB")
            .draw()?;
        chart
            .configure_secondary_axes()
            .y_desc("thousand reads/s")
            .draw()?;
        let held_key = if row.system == System::Folio.as_str() {
            "resident_bytes"
        } else {
            "cache_bytes"
        };
        let held_label = if row.system == System::Folio.as_str() {
            "folio memory (resident)"
        } else {
            "page cache of the file"
        };
        chart
            .draw_series(LineSeries::new(
                points(row, "t_secs", held_key, 1.0 / GIB),
                color.stroke_width(2),
            ))?
            .label(held_label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        let capacity = points(row, "t_secs", "capacity_bytes", 1.0 / GIB);
        if !capacity.is_empty() {
            chart
                .draw_series(DashedLineSeries::new(capacity, 6, 4, color.stroke_width(1)))?
                .label("folio capacity")
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(1))
                });
        }
        let green = RGBColor(0x2c, 0xa0, 0x2c);
        chart
            .draw_series(LineSeries::new(
                points(row, "alloc_t_secs", "alloc_touched_bytes", 1.0 / GIB),
                green.stroke_width(2),
            ))?
            .label("allocator: touched")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], green.stroke_width(2))
            });
        let grey = RGBColor(0x7f, 0x7f, 0x7f);
        chart
            .draw_secondary_series(LineSeries::new(
                points(row, "t_secs", "reads_per_sec", 1e-3),
                grey.stroke_width(1),
            ))?
            .label("reads/s (right axis)")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], grey.stroke_width(1))
            });
        if let Some(exit) = row
            .extra
            .get("samples")
            .and_then(|s| s.get("alloc_exit_secs"))
            .and_then(Value::as_f64)
        {
            chart.draw_series(DashedLineSeries::new(
                vec![(exit, 0.0), (exit, gib_max * 1.15)],
                3,
                3,
                BLACK.stroke_width(1),
            ))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
