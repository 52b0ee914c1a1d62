//! `db-bench tenants` (issue 45, done-when 5: "three tenants on one machine, each at the
//! plugin's defaults"): P db_bench processes at once, each on a database of its own (the
//! services of one machine), `readrandom` for `--duration-secs` from a cold start, as two
//! systems:
//!
//! - `kernel`: buffered reads, the page cache dropped first;
//! - `folio`: the plugin at its defaults (the user's domain, shared by the P processes),
//!   its segment directory (`FOLIO_SEGMENT_DIR`) one of the measurement's own, so that
//!   every measurement starts cold (the user's domain outlives a run by its linger and
//!   would hold the last run's pages); the domain is removed after it.
//!
//! Figures, per P: the **summed** reads/s (db_bench's own) over the whole run and in a
//! cold and a steady window ([`super::windows`], the processes' seconds summed); **each
//! tenant's** reads/s beside the kernel's same tenant (same database, same seed), and the
//! least of those ratios (`least_tenant_vs_kernel`: a tenant starved by the others shows
//! there even when the sum is fine); the tenants' fairness (the least tenant's reads/s over
//! the mean); and the memory holding the data (as `db-bench readonly` counts it: the
//! kernel's page cache of the table files, folio's domain memory file plus the private
//! caches). A tenant killed (the OOM killer among others) fails the run, naming it.
//!
//! Small by default, so that it finishes in minutes here: 3 tenants of 20,000 8 KiB values
//! (156 MiB each), a 16 MiB block cache each, 30 s; the shape (3 databases of 6 GB
//! on this 24 GiB machine) is `--processes 3 --keys 786432 --duration-secs 60`: its
//! databases take a while to make, once per data directory.
//!
//! `--hold-mib N` measures both systems on a machine under memory pressure: another
//! process (the `pressure-alloc` role) writes N MiB through and holds them from before the
//! first measurement to the end of the last; its death (the OOM killer) fails the run.
//!
//! Limits: tenants here are processes of one user (the domain's shares are per process);
//! the databases are opened read-write (as a service does) but only read.

use std::io;
use std::process::Command;

use serde_json::{json, Value};

use super::child::SAMPLE_PERIOD;
use super::readonly::{
    domain_region, measurement_dir, median, record_folio_stats, summed, take_domain, user_domain,
    TmpfsPeak,
};
use super::together::{measure_rounds, run_together, Launch, Settings};
use super::{
    build_plugin, ensure_dbs, record_folio_capacity, table_files, workspace_root, Args, DB_BENCH,
    VALUE_BYTES,
};
use crate::kernel;
use crate::measure::RunResult;
use crate::workloads::pressure::hold_memory;
use crate::workloads::{Env, Metric, Report, Row, System, Target};

/// The systems, in the order each round measures them.
const SYSTEMS: [System; 2] = [System::Kernel, System::Folio];

/// Tenants at once [default of `--processes`].
const TENANTS_DEFAULT: [usize; 1] = [3];

/// The targets (done-when 5): the tenants' summed reads/s at least the kernel's,
/// and none starved: every tenant at least this share of what the kernel gave it (the
/// project's choice of "starved": a tenant below 0.9x its kernel rate while the sum holds
/// was paying for the others).
const SUMMED_OVER_KERNEL_MIN: f64 = 1.0;
const TENANT_OVER_KERNEL_MIN: f64 = 0.9;

/// Each tenant's reads/s, in tenant order, from a measurement's run.
fn tenant_rates(run: &RunResult) -> Vec<f64> {
    run.extra
        .get("processes")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    p.get("ops_per_sec")
                        .and_then(Value::as_f64)
                        .unwrap_or(f64::NAN)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The least tenant's reads/s over the tenants' mean (1.0: all equal).
fn fairness(rates: &[f64]) -> f64 {
    let mean = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
    rates.iter().copied().fold(f64::INFINITY, f64::min) / mean.max(1e-9)
}

/// The least, over tenants, of each one's reads/s over the same tenant's under the kernel.
fn least_over(rates: &[f64], kernel: &[f64]) -> f64 {
    rates
        .iter()
        .zip(kernel)
        .map(|(r, k)| r / k.max(1e-9))
        .fold(f64::INFINITY, f64::min)
}

pub fn run(args: &Args, env: &Env) -> io::Result<Report> {
    const NAME: &str = "readrandom";
    let settings = Settings::of(args, env, &TENANTS_DEFAULT);
    let Settings {
        processes: ref tenants,
        threads,
        keys,
        duration_secs,
        spec,
        cache_bytes,
        rounds,
    } = settings;

    let root = workspace_root();
    let (plugin, plugin_note) = build_plugin(env, &root)?;
    let most = tenants.iter().copied().max().unwrap_or(1).max(1);
    // `--num_multi_db` databases: db_bench names them `<db>/0`, `<db>/1`, ...
    let dbs = ensure_dbs(env, most as u64, keys)?;
    let scratch = env.dir.join("db-bench-tenants");
    std::fs::create_dir_all(&scratch)?;

    let mut report = Report::new("db-bench-tenants", Metric::OpsPerSec);
    report.param("benchmark", NAME);
    report.param("tenants", tenants.clone());
    report.param("threads_per_tenant", threads);
    report.param("num", keys);
    report.param("value_size", VALUE_BYTES);
    report.param("data_bytes_per_tenant", keys * VALUE_BYTES);
    report.param("cache_size", cache_bytes);
    report.param("duration_secs", duration_secs);
    report.param("cold_secs", spec.cold_secs);
    report.param("steady_secs", spec.steady_secs);
    report.param("rounds", rounds);
    report.param("db_bench", DB_BENCH);

    let tenant_args = |i: usize| -> Vec<String> {
        let mut args = settings.db_bench_args(NAME, i);
        args.insert(2, format!("--db={}", dbs.join(i.to_string()).display()));
        args
    };

    // One measurement: P tenants of `system` started together.
    let measure = |system: System, p: usize| -> io::Result<RunResult> {
        let tables = (0..p)
            .map(|i| table_files(&dbs.join(i.to_string())))
            .collect::<io::Result<Vec<_>>>()?
            .concat();
        kernel::make_cold(&tables, env.cold)?;
        let domain_dir = match system {
            System::Folio => Some(measurement_dir()?),
            _ => None,
        };
        let launches = (0..p)
            .map(|i| {
                let mut cmd = Command::new(DB_BENCH);
                cmd.args(tenant_args(i));
                if let Some(dir) = &domain_dir {
                    cmd.env("LD_PRELOAD", &plugin)
                        .env("FOLIO_SEGMENT_DIR", dir)
                        .arg("--fs_uri=folio://");
                }
                Launch {
                    cmd,
                    dir: scratch.join(format!("{}-{i}", system.as_str())),
                    what: format!("{system}, tenant {i} of {p}"),
                }
            })
            .collect();
        let region_peak = domain_dir
            .as_ref()
            .map(|dir| TmpfsPeak::start(dir.join(domain_region(&user_domain()))));
        let parts = run_together(NAME, launches)?;
        let region_peak = region_peak.map_or(0, TmpfsPeak::stop);
        let mut run = summed(&parts, spec);
        let kernel_cached = kernel::resident_pages_all(&tables)?.resident * 4096;
        run.extra
            .insert("page_cache_tables_bytes".into(), json!(kernel_cached));
        let memory = match &domain_dir {
            None => kernel_cached,
            Some(dir) => {
                let private = record_folio_stats(&parts, &mut run.extra);
                let region = take_domain(dir, &parts, region_peak, &mut run.extra)?;
                run.extra
                    .insert("domain_region_bytes".into(), json!(region));
                if let Some(first) = parts.first() {
                    record_folio_capacity(&first.stats, &mut run.extra);
                }
                region + private.held
            }
        };
        run.extra.insert("memory_bytes".into(), json!(memory));
        let rates = tenant_rates(&run);
        run.extra.insert("fairness".into(), json!(fairness(&rates)));
        Ok(run)
    };

    // The machine under memory pressure for every measurement (`--hold-mib`).
    report.param("hold_mib", args.hold_mib.unwrap_or(0));
    let mut holder = args
        .hold_mib
        .map(|mib| hold_memory(mib << 20))
        .transpose()?;
    let steps = rounds * SYSTEMS.len() * tenants.len();
    let bar = env.bar("db-bench tenants", steps as u64);
    for &p in tenants {
        let runs = measure_rounds(&SYSTEMS, rounds, p, &bar, &measure)?;
        let kernel_runs = runs[0].clone();
        for (si, system) in SYSTEMS.iter().enumerate() {
            let mut row = Row::from_runs(*system, p, &runs[si], Metric::OpsPerSec);
            let pairs = || runs[si].iter().zip(&kernel_runs);
            let ratio = |key: &str| {
                median(pairs().filter_map(|(r, k)| {
                    Some(r.extra.get(key)?.as_f64()? / k.extra.get(key)?.as_f64()?.max(1e-9))
                }))
            };
            for key in ["cold_ops_per_sec", "steady_ops_per_sec", "memory_bytes"] {
                let name = key
                    .trim_end_matches("_ops_per_sec")
                    .trim_end_matches("_bytes");
                row.extra
                    .insert(format!("{name}_vs_kernel"), json!(ratio(key)));
            }
            row.extra.insert(
                "summed_vs_kernel".into(),
                json!(median(
                    pairs().map(|(r, k)| r.ops_per_sec() / k.ops_per_sec().max(1e-9))
                )),
            );
            row.extra.insert(
                "least_tenant_vs_kernel".into(),
                json!(median(
                    pairs().map(|(r, k)| least_over(&tenant_rates(r), &tenant_rates(k)))
                )),
            );
            row.extra.insert(
                "fairness".into(),
                json!(median(
                    runs[si]
                        .iter()
                        .filter_map(|r| r.extra.get("fairness")?.as_f64())
                )),
            );
            report.rows.push(row);
        }
    }
    bar.finish_and_clear();
    if let Some(role) = holder.as_mut() {
        if !role.running()? {
            return Err(io::Error::other(format!(
                "db-bench tenants: the process holding --hold-mib ended during the \
                 measurement (the OOM killer, among others): {}",
                role.what()
            )));
        }
        role.kill()?;
        report.note(format!(
            "under memory pressure: another process held {} MiB of the machine's memory \
             (written through) from before the first measurement to the end of the last",
            args.hold_mib.unwrap_or(0)
        ));
    }
    report.fill_ratios();

    for &p in tenants {
        let rows = report.clone();
        let figure = |system: System, key: &str| {
            rows.row(system, p as u32)
                .and_then(|r| r.extra.get(key)?.as_f64())
        };
        let ops = |system: System| {
            rows.row(system, p as u32)
                .map_or(f64::NAN, |r| r.ops_per_sec)
        };
        report.note(format!(
            "P={p} tenants: summed reads/s kernel {:.0}, folio {:.0} ({:.2}x); the least \
             tenant's folio / kernel {:.2}; fairness (least / mean) kernel {:.2}, folio {:.2}; \
             memory holding the data: kernel {:.1} MiB, folio {:.1} MiB (domain file {:.1})",
            ops(System::Kernel),
            ops(System::Folio),
            figure(System::Folio, "summed_vs_kernel").unwrap_or(f64::NAN),
            figure(System::Folio, "least_tenant_vs_kernel").unwrap_or(f64::NAN),
            figure(System::Kernel, "fairness").unwrap_or(f64::NAN),
            figure(System::Folio, "fairness").unwrap_or(f64::NAN),
            figure(System::Kernel, "memory_bytes").unwrap_or(f64::NAN) / 1048576.0,
            figure(System::Folio, "memory_bytes").unwrap_or(f64::NAN) / 1048576.0,
            figure(System::Folio, "domain_region_bytes").unwrap_or(f64::NAN) / 1048576.0,
        ));
        report.targets.push(Target::at_least(
            format!("db-bench tenants P={p}: folio / kernel summed reads/s"),
            figure(System::Folio, "summed_vs_kernel"),
            SUMMED_OVER_KERNEL_MIN,
        ));
        report.targets.push(Target::at_least(
            format!("db-bench tenants P={p}: the least tenant's folio / kernel reads/s"),
            figure(System::Folio, "least_tenant_vs_kernel"),
            TENANT_OVER_KERNEL_MIN,
        ));
    }
    report.note(format!(
        "P db_bench {NAME} processes at once, each on its own database of {keys} 8 KiB \
         values ({} MiB; made once with fillseq,flush --num_multi_db); each: {}; kernel: \
         buffered, the page cache dropped first; folio: LD_PRELOAD={} --fs_uri='folio://' \
         (the plugin's defaults: the user's domain, shared by the P tenants, in a segment \
         directory of the measurement's own, FOLIO_SEGMENT_DIR); windows as in db-bench readonly \
         (/proc/<pid>/stat every {} ms); rows: threads = P, ops/s the sum of the tenants'; \
         the median of {rounds} round(s)",
        (keys * VALUE_BYTES) >> 20,
        tenant_args(0)
            .iter()
            .filter(|a| !a.starts_with("--db=") && !a.starts_with("--seed="))
            .cloned()
            .collect::<Vec<_>>()
            .join(" "),
        plugin.display(),
        SAMPLE_PERIOD.as_millis(),
    ));
    if let Some(note) = plugin_note {
        report.note(note);
    }
    report.limits = env.limits()?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_starved_tenant_shows_even_when_the_sum_holds() {
        let kernel = [100.0, 100.0, 100.0];
        // The sum is 1.1x the kernel's, but the third tenant gets half of its kernel rate.
        let folio = [130.0, 150.0, 50.0];
        assert!((least_over(&folio, &kernel) - 0.5).abs() < 1e-9);
        assert!((fairness(&folio) - 50.0 / 110.0).abs() < 1e-9);
        assert!((fairness(&kernel) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn tenant_rates_come_from_the_processes_in_order() {
        let mut run = crate::measure::RunResult::default();
        run.extra.insert(
            "processes".into(),
            json!([{"ops_per_sec": 3.0}, {"ops_per_sec": 5.0}]),
        );
        assert_eq!(tenant_rates(&run), vec![3.0, 5.0]);
    }
}
