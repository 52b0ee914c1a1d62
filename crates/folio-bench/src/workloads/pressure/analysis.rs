//! What `pressure` makes of one side's run: the rates and sizes around the allocation
//! (`SideRun::reads_per_sec`, `held_at`), how much of what folio read back after the
//! allocator's exit stayed (`stayed_share`), the stalls, and the run as a row's run with
//! every figure in its extras and the samples as the chart's columns (`run_result`).
//!
//! Design: pure functions of the samples (no clock, no I/O), tested below on made-up ones.

use serde_json::{json, Map, Value};

use super::lines::Sample;
use super::side_run::SideRun;
use super::{Plan, READ_BYTES};
use crate::measure::RunResult;
use crate::workloads::process::Outcome;
use crate::workloads::System;

impl SideRun {
    /// The allocator's time, if it finished on its own.
    pub(super) fn alloc_secs(&self) -> Option<f64> {
        (self.alloc_outcome == Outcome::Exited(0))
            .then_some(self.touch_secs)
            .flatten()
    }

    /// Reads per second over `[from, to]`, from the samples that span it: the last at or
    /// before `from` and the first at or after `to` (the nearest ones inside where the
    /// reads began later or ended earlier). A window shorter than a sample interval (a
    /// tiny allocation) gets the rate of the interval around it.
    pub(super) fn reads_per_sec(&self, from: f64, to: f64) -> Option<f64> {
        let reading: Vec<&Sample> = self.samples.iter().filter(|s| s.reading).collect();
        let a = reading
            .iter()
            .rev()
            .find(|s| s.t <= from)
            .or(reading.first())?;
        let b = reading.iter().find(|s| s.t >= to).or(reading.last())?;
        (b.t > a.t).then(|| (b.reads - a.reads) as f64 / (b.t - a.t))
    }

    /// The cache's size (`Sample::held_bytes`) of the last sample at or before `t`.
    pub(super) fn held_at(&self, t: f64) -> Option<u64> {
        self.samples
            .iter()
            .rev()
            .find(|s| s.t <= t)
            .map(Sample::held_bytes)
    }

    /// Of the pages folio inserted after the allocator exited, the share not evicted
    /// again by the end (folio only).
    pub(super) fn stayed_share(&self) -> Option<f64> {
        if self.reader_outcome != Outcome::Exited(0) {
            return None; // a reader that died read nothing after the exit
        }
        let exit = self.alloc_exit_t?;
        let from = self.samples.iter().rev().find(|s| s.t <= exit)?;
        let to = self.samples.last()?;
        let inserted = to.pages_inserted?.saturating_sub(from.pages_inserted?);
        let evicted = to.evicted_pages?.saturating_sub(from.evicted_pages?);
        if inserted == 0 {
            // Nothing was missing after the exit (the cache never lost the data).
            return Some(1.0);
        }
        Some(1.0 - evicted.min(inserted) as f64 / inserted as f64)
    }

    /// Seconds of the random reads in which no read completed: the sum of the sample
    /// intervals whose read count did not move (every reader stuck for the interval).
    pub(super) fn stalled_secs(&self) -> f64 {
        let reading: Vec<&Sample> = self.samples.iter().filter(|s| s.reading).collect();
        reading
            .windows(2)
            .filter(|w| w[1].reads == w[0].reads)
            // From +0.0: a sum of no f64 is -0.0, which prints as "-0.00".
            .fold(0.0, |sum, w| sum + (w[1].t - w[0].t))
    }

    /// The run as a row's run: reads while the allocator ran, with every figure of the
    /// side in `extra` (the samples as columns, for the chart).
    pub(super) fn run_result(&self, plan: &Plan) -> RunResult {
        let window = self.alloc_exit_t.unwrap_or(0.0);
        let reads_during = self.reads_per_sec(0.0, window).unwrap_or(0.0);
        let ops = (reads_during * window) as u64;
        let bytes = ops * READ_BYTES as u64;
        let last_t = self.samples.last().map_or(0.0, |s| s.t);
        let min_after_start = self
            .samples
            .iter()
            .filter(|s| s.t >= 0.0)
            .map(Sample::held_bytes)
            .min();
        let mut extra = Map::new();
        extra.insert("alloc_secs".into(), json!(self.alloc_secs()));
        extra.insert("alloc_touch_secs".into(), json!(self.touch_secs));
        extra.insert("alloc_wall_secs".into(), json!(self.alloc_wall_secs));
        extra.insert("alloc_outcome".into(), json!(self.alloc_outcome.describe()));
        extra.insert(
            "alloc_killed".into(),
            json!(self.alloc_outcome.is_signalled()),
        );
        extra.insert(
            "alloc_touched_bytes".into(),
            json!(self.progress.last().map_or(0, |p| p.1)),
        );
        extra.insert(
            "reader_outcome".into(),
            json!(self.reader_outcome.describe()),
        );
        extra.insert(
            "reader_killed".into(),
            json!(self.reader_outcome.is_signalled()),
        );
        extra.insert("oom_kills_machine".into(), json!(self.oom_kills_machine));
        extra.insert("oom_kills_cgroup".into(), json!(self.oom_kills_cgroup));
        extra.insert("cgroup_peak_bytes".into(), json!(self.cgroup_peak_bytes));
        extra.insert("fill_secs".into(), json!(self.ready.map(|r| r.fill_secs)));
        extra.insert("fill_passes".into(), json!(self.ready.map(|r| r.passes)));
        extra.insert(
            "held_at_ready_bytes".into(),
            json!(self.ready.map(|r| r.held_bytes)),
        );
        extra.insert("cache_before_bytes".into(), json!(self.held_at(-1e-9)));
        extra.insert("cache_min_bytes".into(), json!(min_after_start));
        extra.insert(
            "cache_at_alloc_exit_bytes".into(),
            json!(self.alloc_exit_t.and_then(|t| self.held_at(t))),
        );
        extra.insert(
            "cache_end_bytes".into(),
            json!(self.samples.last().map(Sample::held_bytes)),
        );
        extra.insert(
            "reads_per_sec_before".into(),
            json!(self.reads_per_sec(-plan.before_secs, 0.0)),
        );
        extra.insert("reads_per_sec_during".into(), json!(reads_during));
        extra.insert(
            "reads_per_sec_after".into(),
            json!(self
                .alloc_exit_t
                .and_then(|exit| self.reads_per_sec(exit, last_t))),
        );
        extra.insert("stayed_share_after".into(), json!(self.stayed_share()));
        extra.insert("reads_stalled_secs".into(), json!(self.stalled_secs()));
        let psi = |pick: fn(&Sample) -> u64| {
            let first = self.samples.iter().find(|s| s.reading)?;
            let last = self.samples.last()?;
            Some(pick(last).saturating_sub(pick(first)) as f64 / 1e6)
        };
        extra.insert(
            "psi_some_stall_secs".into(),
            json!(psi(|s| s.psi_some_total_us)),
        );
        extra.insert(
            "psi_full_stall_secs".into(),
            json!(psi(|s| s.psi_full_total_us)),
        );
        if let Some(f) = &self.reader_final {
            if let Some(folio) = &f.folio {
                extra.insert("folio".into(), Value::Object(folio.clone()));
            }
        }
        extra.insert("samples".into(), self.columns());
        RunResult {
            ops,
            bytes_read: bytes,
            bytes_verified: bytes,
            elapsed_secs: window,
            p50_us: self.reader_final.as_ref().map_or(0.0, |f| f.p50_us),
            p99_us: self.reader_final.as_ref().map_or(0.0, |f| f.p99_us),
            pages_inserted: self
                .samples
                .last()
                .and_then(|s| s.pages_inserted)
                .filter(|_| self.system == System::Folio),
            extra,
            ..RunResult::default()
        }
    }

    /// The samples as columns (seconds since the allocator started): what the chart
    /// draws.
    pub(super) fn columns(&self) -> Value {
        let reading: Vec<&Sample> = self.samples.iter().filter(|s| s.reading).collect();
        let rate: Vec<Option<f64>> = reading
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let prev = reading.get(i.checked_sub(1)?)?;
                (s.t > prev.t).then(|| (s.reads - prev.reads) as f64 / (s.t - prev.t))
            })
            .collect();
        json!({
            "t_secs": reading.iter().map(|s| s.t).collect::<Vec<_>>(),
            "cache_bytes": reading.iter().map(|s| s.cache_bytes).collect::<Vec<_>>(),
            "resident_bytes": reading.iter().map(|s| s.resident_bytes).collect::<Vec<_>>(),
            "capacity_bytes": reading.iter().map(|s| s.capacity_bytes).collect::<Vec<_>>(),
            "reads_per_sec": rate,
            "mem_available_bytes": reading.iter().map(|s| s.mem_available_bytes).collect::<Vec<_>>(),
            "misses": reading.iter().map(|s| s.misses).collect::<Vec<_>>(),
            "rss_bytes": reading.iter().map(|s| s.rss_bytes).collect::<Vec<_>>(),
            "anon_huge_bytes": reading.iter().map(|s| s.anon_huge_bytes).collect::<Vec<_>>(),
            "psi_some_avg10": reading.iter().map(|s| s.psi_some_avg10).collect::<Vec<_>>(),
            "psi_some_total_us": reading.iter().map(|s| s.psi_some_total_us).collect::<Vec<_>>(),
            "psi_full_total_us": reading.iter().map(|s| s.psi_full_total_us).collect::<Vec<_>>(),
            // From (0, 0): the allocator's start.
            "alloc_t_secs": std::iter::once(0.0).chain(self.progress.iter().map(|p| p.0)).collect::<Vec<_>>(),
            "alloc_touched_bytes": std::iter::once(0).chain(self.progress.iter().map(|p| p.1)).collect::<Vec<_>>(),
            "alloc_exit_secs": self.alloc_exit_t,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::process::Outcome;
    use crate::workloads::System;

    fn sample(t: f64, reads: u64, cache: u64) -> Sample {
        Sample {
            t,
            reading: true,
            reads,
            cache_bytes: cache,
            ..Sample::default()
        }
    }

    fn side(samples: Vec<Sample>) -> SideRun {
        SideRun {
            system: System::Folio,
            samples,
            progress: vec![(1.0, 1 << 30), (2.0, 2 << 30)],
            ready: None,
            touch_secs: Some(2.0),
            alloc_outcome: Outcome::Exited(0),
            alloc_wall_secs: Some(3.0),
            alloc_exit_t: Some(3.0),
            reader_outcome: Outcome::Exited(0),
            reader_final: None,
            oom_kills_machine: Some(0),
            oom_kills_cgroup: None,
            cgroup_peak_bytes: None,
            cgroup_version: None,
        }
    }

    #[test]
    fn rates_and_sizes_come_from_the_samples_around_a_window() {
        let run = side(vec![
            sample(-2.0, 0, 10),
            sample(-1.0, 100, 10),
            sample(0.0, 200, 10),
            sample(1.0, 250, 4),
            sample(3.0, 350, 2),
            sample(5.0, 550, 6),
        ]);
        assert_eq!(run.reads_per_sec(-2.0, 0.0), Some(100.0));
        assert_eq!(run.reads_per_sec(0.0, 3.0), Some(50.0));
        assert_eq!(run.reads_per_sec(3.0, 5.0), Some(100.0));
        // A window inside one interval gets that interval's rate.
        assert_eq!(run.reads_per_sec(1.2, 1.4), Some(50.0));
        assert_eq!(run.held_at(-1e-9), Some(10));
        assert_eq!(run.held_at(3.0), Some(2));
        assert_eq!(run.alloc_secs(), Some(2.0));
        let r = run.run_result(&Plan {
            data_bytes: 1,
            alloc_bytes: 1,
            chunk_bytes: 1,
            threads: 1,
            reads_per_sec: 0,
            before_secs: 2.0,
            after_secs: 2.0,
            hold_secs: 0.0,
            cgroup_limit_bytes: None,
            alloc_timeout_secs: 1.0,
            sample_ms: 100,
        });
        assert_eq!(r.ops, 150);
        assert_eq!(r.extra["cache_min_bytes"], json!(2));
        assert_eq!(r.extra["cache_end_bytes"], json!(6));
        assert_eq!(r.extra["samples"]["t_secs"].as_array().unwrap().len(), 6);
    }

    #[test]
    fn a_killed_allocator_has_no_time() {
        let mut run = side(Vec::new());
        run.alloc_outcome = Outcome::Signalled(libc::SIGKILL);
        assert_eq!(run.alloc_secs(), None);
        assert!(run.alloc_outcome.is_signalled());
        assert!(run.alloc_outcome.describe().contains("OOM"));
    }

    #[test]
    fn stayed_share_counts_evictions_after_the_exit() {
        let mut samples = vec![sample(2.0, 0, 0), sample(3.0, 0, 0), sample(6.0, 0, 0)];
        for (s, (inserted, evicted)) in samples.iter_mut().zip([(0, 0), (100, 50), (300, 70)]) {
            s.pages_inserted = Some(inserted);
            s.evicted_pages = Some(evicted);
        }
        let run = side(samples);
        // After the exit (t = 3): 200 inserted, 20 evicted.
        assert_eq!(run.stayed_share(), Some(0.9));
    }

    #[test]
    fn stalls_are_intervals_without_a_read() {
        let run = side(vec![
            sample(0.0, 10, 0),
            sample(0.1, 10, 0),
            sample(0.3, 10, 0),
            sample(0.4, 20, 0),
        ]);
        assert!((run.stalled_secs() - 0.3).abs() < 1e-9);
    }
}
