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
//! **Unequal tenants** (`--tenant-keys K1,K2,...`, `--tenant-threads T1,T2,...`): one
//! measurement of a tenant per value, each with its own database size and db_bench
//! threads: a greedy tenant (a database far larger than its share, more threads) beside
//! quiet ones (small hot databases), the case where "starved below its share" bites: under
//! the kernel's LRU the greedy one's pages can push the quiet ones' out; under folio each
//! tenant's floor keeps its set (docs/sharing.md, "Shares and floors"). Without them, as
//! before: `--processes` equal tenants of `--keys` and `--threads`. The databases: a set
//! per distinct size (`db-bench-<n>x<keys>`, made once per data directory, or a larger
//! set of that size made before), the j-th tenant of a size on its database j, so that
//! every tenant reads a database of its own.
//!
//! Figures, per measurement: the **summed** reads/s (db_bench's own) over the whole run
//! and in a cold and a steady window ([`super::windows`], the processes' seconds summed);
//! **each tenant's** reads/s beside the kernel's same tenant (same database, same seed),
//! and the least of those ratios (`least_tenant_vs_kernel`: a tenant starved by the others
//! shows there even when the sum is fine); the tenants' fairness (the least tenant's
//! reads/s over the mean: equal tenants only, null for unequal ones, whose rates should
//! differ); and the memory holding the data (as `db-bench readonly` counts it: the
//! kernel's page cache of the table files, folio's domain memory file plus the private
//! caches). Per tenant (the row's `tenants`): its keys and threads, its reads/s and their
//! ratio to the kernel's, its own steady window's reads/s and the bytes it read from the
//! block layer per read (`/proc/<pid>/io`: whether its set stayed cached), and what it
//! held at the end (the kernel: its tables' page cache; folio: the domain's frames it
//! owns, from the plugin's stats at exit, plus its private cache; the share and floor
//! beside). A tenant killed (the OOM killer among others) fails the run, naming it.
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
//! Limits: tenants here are processes of one user (the domain's shares are per process,
//! equal: a tenant with more threads has no larger share); the databases are opened
//! read-write (as a service does) but only read; a tenant's memory at the end is read as
//! each exits (the kernel's after all have), and its bytes read from the disk include
//! what RocksDB reads besides its table files (none in the steady window here).

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

use super::child::SAMPLE_PERIOD;
use super::readonly::{
    domain_line, domain_region, measurement_dir, median, record_folio_stats, summed, take_domain,
    user_domain, TmpfsPeak,
};
use super::together::{measure_rounds, run_together, Launch, ProcessRun, Settings};
use super::windows::{WindowSpec, Windows};
use super::write::stat_of;
use super::{
    build_plugin, ensure_dbs_at_least, record_folio_capacity, table_files, workspace_root, Args,
    DB_BENCH, VALUE_BYTES,
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

/// One tenant: the size of its database and how many threads read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tenant {
    keys: u64,
    threads: usize,
}

/// Whether every tenant of `shape` is the same (the fairness of least over mean applies).
fn equal(shape: &[Tenant]) -> bool {
    shape.windows(2).all(|w| w[0] == w[1])
}

/// What the report calls a measurement: `P=3`, or for unequal tenants each one's keys and
/// threads, `P=3 (keys/threads 200000/4, 20000/1, 20000/1)`.
fn label(shape: &[Tenant]) -> String {
    let p = shape.len();
    if equal(shape) {
        return format!("P={p}");
    }
    let each: Vec<String> = shape
        .iter()
        .map(|t| format!("{}/{}", t.keys, t.threads))
        .collect();
    format!("P={p} (keys/threads {})", each.join(", "))
}

/// The tenants of each measurement, one list per P: with `--tenant-keys` or
/// `--tenant-threads`, one measurement of a tenant per value (what a list does not give,
/// `--keys` or `--threads`); else `--processes` tenants of `--keys` and `--threads` each.
///
/// Errors, in words for the user: the two lists of different lengths, a `--processes`
/// beside them other than their length, a measurement of no tenant.
fn shapes(args: &Args, settings: &Settings) -> Result<Vec<Vec<Tenant>>, String> {
    let lengths = (
        args.tenant_keys.as_ref().map(Vec::len),
        args.tenant_threads.as_ref().map(Vec::len),
    );
    let p = match lengths {
        (None, None) => {
            if settings.processes.contains(&0) {
                return Err("--processes 0: a measurement needs a tenant".into());
            }
            let tenant = Tenant {
                keys: settings.keys,
                threads: settings.threads,
            };
            return Ok(settings
                .processes
                .iter()
                .map(|&p| vec![tenant; p])
                .collect());
        }
        (Some(k), Some(t)) if k != t => {
            return Err(format!(
                "--tenant-keys gives {k} tenants and --tenant-threads {t}: one value per \
                 tenant in each"
            ))
        }
        (Some(p), _) | (None, Some(p)) => p,
    };
    if p == 0 {
        return Err("--tenant-keys / --tenant-threads: no tenant".into());
    }
    if let Some(ps) = args.processes.as_ref().filter(|ps| ps[..] != [p]) {
        let ps: Vec<String> = ps.iter().map(usize::to_string).collect();
        return Err(format!(
            "--processes {} disagrees with the {p} tenants of --tenant-keys / \
             --tenant-threads (one measurement, a tenant per value): give --processes {p} \
             or leave it out",
            ps.join(",")
        ));
    }
    Ok(vec![(0..p)
        .map(|i| Tenant {
            keys: args.tenant_keys.as_ref().map_or(settings.keys, |k| k[i]),
            threads: args
                .tenant_threads
                .as_ref()
                .map_or(settings.threads, |t| t[i] as usize),
        })
        .collect()])
}

/// A tenant's database: the set of its size (`keys`) and its number in the set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DbNumber {
    keys: u64,
    number: u64,
}

/// Per distinct size (keys), how many databases of it the measurements need at most.
type SetSizes = BTreeMap<u64, u64>;

/// Which database each tenant reads: the sets to make ([`SetSizes`],
/// `ensure_dbs_at_least`), and per tenant of each shape its database. The j-th tenant of
/// a size reads database j: two tenants of one size read databases of their own, as
/// equal tenants always did.
fn db_numbers(shapes: &[Vec<Tenant>]) -> (SetSizes, Vec<Vec<DbNumber>>) {
    let mut most = SetSizes::new();
    let numbers = shapes
        .iter()
        .map(|shape| {
            let mut next: BTreeMap<u64, u64> = BTreeMap::new();
            shape
                .iter()
                .map(|t| {
                    let j = next.entry(t.keys).or_insert(0);
                    let number = *j;
                    *j += 1;
                    let needed = most.entry(t.keys).or_insert(0);
                    *needed = (*needed).max(*j);
                    DbNumber {
                        keys: t.keys,
                        number,
                    }
                })
                .collect()
        })
        .collect();
    (most, numbers)
}

/// Each tenant's reads/s, in tenant order, from a measurement's run.
fn tenant_rates(run: &RunResult) -> Vec<f64> {
    tenant_figures(run, "ops_per_sec")
}

/// Each tenant's `key` of a measurement's run (its `processes`), in tenant order; NaN
/// where a tenant has none.
fn tenant_figures(run: &RunResult, key: &str) -> Vec<f64> {
    run.extra
        .get("processes")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .map(|p| p.get(key).and_then(Value::as_f64).unwrap_or(f64::NAN))
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

/// A tenant's own steady window (its last `spec.steady_secs` seconds, cut as the summed
/// seconds are): its reads/s, and the bytes it read from the block layer per read (near
/// 0 for a tenant whose set stayed cached; the kernel's readahead and folio's windows
/// included). NaN for a run too short for the window.
fn steady_of(part: &ProcessRun, spec: WindowSpec) -> (f64, f64) {
    let Some(w) = Windows::of(&part.rates, &part.cpu, spec).steady else {
        return (f64::NAN, f64::NAN);
    };
    let bytes: u64 = part
        .disk_reads
        .get(w.first_sec - 1..w.last_sec)
        .map_or(0, |secs| secs.iter().sum());
    let per_read = if w.reads > 0.0 {
        bytes as f64 / w.reads
    } else {
        f64::NAN
    };
    (w.ops_per_sec, per_read)
}

/// The figures of each tenant a row carries (`tenants`), each the median over rounds of
/// the tenant's own: the keys of its `processes` entry.
const TENANT_KEYS: [&str; 8] = [
    "ops_per_sec",
    "steady_ops_per_sec",
    "steady_disk_bytes_per_read",
    "memory_bytes",
    "domain_owned_bytes",
    "domain_share_bytes",
    "domain_floor_bytes",
    "read_blocks",
];

pub fn run(args: &Args, env: &Env) -> io::Result<Report> {
    const NAME: &str = "readrandom";
    let settings = Settings::of(args, env, &TENANTS_DEFAULT);
    let Settings {
        keys,
        threads,
        duration_secs,
        spec,
        cache_bytes,
        rounds,
        ..
    } = settings;
    let shapes = shapes(args, &settings).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("db-bench tenants: {e}"),
        )
    })?;

    let root = workspace_root();
    let (plugin, plugin_note) = build_plugin(env, &root)?;
    let (sets, numbers) = db_numbers(&shapes);
    let sets = sets
        .into_iter()
        .map(|(keys, dbs)| Ok((keys, ensure_dbs_at_least(env, dbs, keys)?)))
        .collect::<io::Result<BTreeMap<u64, Vec<PathBuf>>>>()?;
    let dbs: Vec<Vec<PathBuf>> = numbers
        .iter()
        .map(|shape| {
            shape
                .iter()
                .map(|db| sets[&db.keys][db.number as usize].clone())
                .collect()
        })
        .collect();
    let scratch = env.dir.join("db-bench-tenants");
    std::fs::create_dir_all(&scratch)?;

    let mut report = Report::new("db-bench-tenants", Metric::OpsPerSec);
    report.param("benchmark", NAME);
    report.param("tenants", shapes.iter().map(Vec::len).collect::<Vec<_>>());
    report.param(
        "tenant_keys",
        shapes
            .iter()
            .map(|s| s.iter().map(|t| t.keys).collect())
            .collect::<Vec<Vec<u64>>>(),
    );
    report.param(
        "tenant_threads",
        shapes
            .iter()
            .map(|s| s.iter().map(|t| t.threads).collect())
            .collect::<Vec<Vec<usize>>>(),
    );
    report.param("value_size", VALUE_BYTES);
    report.param("cache_size", cache_bytes);
    report.param("duration_secs", duration_secs);
    report.param("cold_secs", spec.cold_secs);
    report.param("steady_secs", spec.steady_secs);
    report.param("rounds", rounds);
    report.param("db_bench", DB_BENCH);

    let tenant_args = |i: usize, tenant: Tenant, db: &PathBuf| -> Vec<String> {
        let mut args = settings.db_bench_args_of(NAME, i, tenant.keys, tenant.threads);
        args.insert(2, format!("--db={}", db.display()));
        args
    };

    // One measurement: the tenants of `shape`, on `dbs`, of `system` started together.
    let measure = |system: System, shape: &[Tenant], dbs: &[PathBuf]| -> io::Result<RunResult> {
        let p = shape.len();
        let tables = dbs
            .iter()
            .map(|db| table_files(db))
            .collect::<io::Result<Vec<_>>>()?;
        kernel::make_cold(&tables.concat(), env.cold)?;
        let domain_dir = match system {
            System::Folio => Some(measurement_dir()?),
            _ => None,
        };
        let launches = shape
            .iter()
            .zip(dbs)
            .enumerate()
            .map(|(i, (&tenant, db))| {
                let mut cmd = Command::new(DB_BENCH);
                cmd.args(tenant_args(i, tenant, db));
                if let Some(dir) = &domain_dir {
                    cmd.env("LD_PRELOAD", &plugin)
                        .env("FOLIO_SEGMENT_DIR", dir)
                        .arg("--fs_uri=folio://");
                }
                Launch {
                    cmd,
                    dir: scratch.join(format!("{}-{i}", system.as_str())),
                    what: format!(
                        "{system}, tenant {i} of {p} ({} keys, {} threads)",
                        tenant.keys, tenant.threads
                    ),
                }
            })
            .collect();
        let region_peak = domain_dir
            .as_ref()
            .map(|dir| TmpfsPeak::start(dir.join(domain_region(&user_domain()))));
        let mut parts = run_together(NAME, launches)?;
        let region_peak = region_peak.map_or(0, TmpfsPeak::stop);
        // Each tenant's own figures, into its `processes` entry.
        let mut kernel_cached = 0;
        for ((part, tenant), tables) in parts.iter_mut().zip(shape).zip(&tables) {
            let (steady_ops, disk_per_read) = steady_of(part, spec);
            let cached = kernel::resident_pages_all(tables)?.resident * 4096;
            kernel_cached += cached;
            // Held at the end: the kernel's page cache of its tables; under folio the
            // domain's frames it owns (its stats at exit) and its private cache.
            let domain = domain_line(&part.stats);
            let frames = |key: &str| stat_of(domain, key).map(|f| f * 4096);
            let memory = match system {
                System::Folio => {
                    frames("owned_frames").unwrap_or(0)
                        + stat_of(&part.stats, "cached_bytes").unwrap_or(0)
                        + stat_of(&part.stats, "metadata_bytes").unwrap_or(0)
                }
                _ => cached,
            };
            let extra = &mut part.run.extra;
            extra.insert("keys".into(), json!(tenant.keys));
            extra.insert("threads".into(), json!(tenant.threads));
            extra.insert("steady_ops_per_sec".into(), json!(steady_ops));
            extra.insert("steady_disk_bytes_per_read".into(), json!(disk_per_read));
            extra.insert("page_cache_tables_bytes".into(), json!(cached));
            extra.insert("memory_bytes".into(), json!(memory));
            for key in ["owned", "share", "floor"] {
                extra.insert(
                    format!("domain_{key}_bytes"),
                    json!(frames(&format!("{key}_frames"))),
                );
            }
        }
        let mut run = summed(&parts, spec);
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
        // Least over mean says "fair" only of tenants that ask for the same: unequal ones
        // (a greedy one beside quiet ones) are compared with their own kernel rates.
        let fair = if equal(shape) {
            fairness(&tenant_rates(&run))
        } else {
            f64::NAN
        };
        run.extra.insert("fairness".into(), json!(fair));
        Ok(run)
    };

    // The machine under memory pressure for every measurement (`--hold-mib`).
    report.param("hold_mib", args.hold_mib.unwrap_or(0));
    let mut holder = args
        .hold_mib
        .map(|mib| hold_memory(mib << 20))
        .transpose()?;
    let steps = rounds * SYSTEMS.len() * shapes.len();
    let bar = env.bar("db-bench tenants", steps as u64);
    for (shape, dbs) in shapes.iter().zip(&dbs) {
        let p = shape.len();
        let runs = measure_rounds(&SYSTEMS, rounds, p, &bar, |system, _| {
            measure(system, shape, dbs)
        })?;
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
            let tenants: Vec<Value> = shape
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let mut figures = serde_json::Map::new();
                    figures.insert("keys".into(), json!(t.keys));
                    figures.insert("threads".into(), json!(t.threads));
                    for key in TENANT_KEYS {
                        let of = |r: &RunResult| tenant_figures(r, key)[i];
                        figures.insert(key.into(), json!(median(runs[si].iter().map(of))));
                    }
                    let vs_kernel = median(
                        pairs().map(|(r, k)| tenant_rates(r)[i] / tenant_rates(k)[i].max(1e-9)),
                    );
                    figures.insert("vs_kernel".into(), json!(vs_kernel));
                    Value::Object(figures)
                })
                .collect();
            row.extra.insert("tenants".into(), json!(tenants));
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

    let mib = |bytes: Option<f64>| bytes.unwrap_or(f64::NAN) / 1048576.0;
    for shape in &shapes {
        let p = shape.len();
        let name = label(shape);
        let rows = report.clone();
        let figure = |system: System, key: &str| {
            rows.row(system, p as u32)
                .and_then(|r| r.extra.get(key)?.as_f64())
        };
        let tenant = |system: System, i: usize, key: &str| {
            rows.row(system, p as u32)
                .and_then(|r| r.extra.get("tenants")?.get(i)?.get(key)?.as_f64())
        };
        let ops = |system: System| {
            rows.row(system, p as u32)
                .map_or(f64::NAN, |r| r.ops_per_sec)
        };
        let fairness = if equal(shape) {
            format!(
                "fairness (least / mean) kernel {:.2}, folio {:.2}",
                figure(System::Kernel, "fairness").unwrap_or(f64::NAN),
                figure(System::Folio, "fairness").unwrap_or(f64::NAN),
            )
        } else {
            "fairness: none (unequal tenants: see each one's)".to_string()
        };
        report.note(format!(
            "{name} tenants: summed reads/s kernel {:.0}, folio {:.0} ({:.2}x); the least \
             tenant's folio / kernel {:.2}; {fairness}; memory holding the data: kernel \
             {:.1} MiB, folio {:.1} MiB (domain file {:.1})",
            ops(System::Kernel),
            ops(System::Folio),
            figure(System::Folio, "summed_vs_kernel").unwrap_or(f64::NAN),
            figure(System::Folio, "least_tenant_vs_kernel").unwrap_or(f64::NAN),
            mib(figure(System::Kernel, "memory_bytes")),
            mib(figure(System::Folio, "memory_bytes")),
            mib(figure(System::Folio, "domain_region_bytes")),
        ));
        for (i, t) in shape.iter().enumerate() {
            report.note(format!(
                "{name}, tenant {i} ({} keys, {} MiB; {} thread(s)): reads/s kernel {:.0}, \
                 folio {:.0} ({:.2}x); steady reads/s kernel {:.0}, folio {:.0}, bytes read \
                 from the disk per read kernel {:.1}, folio {:.1}; held at the end: kernel {:.1} \
                 MiB, folio {:.1} MiB (the domain's frames it owns {:.1}; each tenant's share \
                 {:.1}, floor {:.1})",
                t.keys,
                (t.keys * VALUE_BYTES) >> 20,
                t.threads,
                tenant(System::Kernel, i, "ops_per_sec").unwrap_or(f64::NAN),
                tenant(System::Folio, i, "ops_per_sec").unwrap_or(f64::NAN),
                tenant(System::Folio, i, "vs_kernel").unwrap_or(f64::NAN),
                tenant(System::Kernel, i, "steady_ops_per_sec").unwrap_or(f64::NAN),
                tenant(System::Folio, i, "steady_ops_per_sec").unwrap_or(f64::NAN),
                tenant(System::Kernel, i, "steady_disk_bytes_per_read").unwrap_or(f64::NAN),
                tenant(System::Folio, i, "steady_disk_bytes_per_read").unwrap_or(f64::NAN),
                mib(tenant(System::Kernel, i, "memory_bytes")),
                mib(tenant(System::Folio, i, "memory_bytes")),
                mib(tenant(System::Folio, i, "domain_owned_bytes")),
                mib(tenant(System::Folio, i, "domain_share_bytes")),
                mib(tenant(System::Folio, i, "domain_floor_bytes")),
            ));
        }
        report.targets.push(Target::at_least(
            format!("db-bench tenants {name}: folio / kernel summed reads/s"),
            figure(System::Folio, "summed_vs_kernel"),
            SUMMED_OVER_KERNEL_MIN,
        ));
        report.targets.push(Target::at_least(
            format!("db-bench tenants {name}: the least tenant's folio / kernel reads/s"),
            figure(System::Folio, "least_tenant_vs_kernel"),
            TENANT_OVER_KERNEL_MIN,
        ));
    }
    let first = Tenant { keys, threads };
    report.note(format!(
        "P db_bench {NAME} processes at once, each on a database of its own ({}; made \
         once per size with fillseq,flush --num_multi_db); each: {} --num=<its keys> \
         --threads=<its threads>; kernel: buffered, the page cache dropped first; folio: \
         LD_PRELOAD={} --fs_uri='folio://' (the plugin's defaults: the user's domain, \
         shared by the P tenants, in a segment directory of the measurement's own, \
         FOLIO_SEGMENT_DIR); windows as in db-bench readonly (/proc/<pid>/stat and \
         /proc/<pid>/io every {} ms); rows: threads = P, ops/s the sum of the tenants', \
         `tenants` each one's; the median of {rounds} round(s)",
        shapes
            .iter()
            .map(|s| describe(s))
            .collect::<Vec<_>>()
            .join("; "),
        tenant_args(0, first, &PathBuf::new())
            .iter()
            .filter(|a| !["--db=", "--seed=", "--num=", "--threads="]
                .iter()
                .any(|p| a.starts_with(p)))
            .cloned()
            .collect::<Vec<_>>()
            .join(" "),
        plugin.display(),
        SAMPLE_PERIOD.as_millis(),
    ));
    report.note(
        "per tenant (`tenants` in each row): its reads/s and against the same tenant under \
         the kernel (vs_kernel); its own steady window's reads/s and the bytes it read from \
         the block layer per read (/proc/<pid>/io read_bytes: a set that stays cached reads \
         none); what it held at the end: kernel = mincore of its table files, folio = the \
         domain's frames it owns (the plugin's stats at exit, owned_frames) + its private \
         cache (cached_bytes + metadata_bytes), beside the share and floor it saw at its \
         exit (the quota over the tenants still attached: one that exits after another \
         sees a larger share)",
    );
    if let Some(note) = plugin_note {
        report.note(note);
    }
    report.limits = env.limits()?;
    Ok(report)
}

/// A shape in words: `3 x 20000 keys (156 MiB), 1 thread each` for equal tenants, each
/// one's keys, size and threads otherwise.
fn describe(shape: &[Tenant]) -> String {
    let one = |t: &Tenant| {
        format!(
            "{} keys ({} MiB) x {} thread(s)",
            t.keys,
            (t.keys * VALUE_BYTES) >> 20,
            t.threads
        )
    };
    match shape.first() {
        Some(t) if equal(shape) => format!("{} tenants of {}", shape.len(), one(t)),
        _ => shape.iter().map(one).collect::<Vec<_>>().join(" + "),
    }
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

    /// `db-bench` parsed from `argv` as the binary's command line parses it (its `Args`
    /// flattened), with the settings they give and the shapes resolved.
    fn parse(argv: &[&str]) -> Result<Vec<Vec<Tenant>>, String> {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let cli = Cli::try_parse_from(["db-bench", "tenants"].iter().chain(argv))
            .map_err(|e| e.to_string())?;
        let env = Env::new(
            std::env::temp_dir(),
            1,
            crate::workloads::Scale::Quick,
            crate::kernel::WarmMethod::Read,
            folio::BackendKind::Pread,
        );
        shapes(&cli.args, &Settings::of(&cli.args, &env, &TENANTS_DEFAULT))
    }

    fn tenant(keys: u64, threads: usize) -> Tenant {
        Tenant { keys, threads }
    }

    #[test]
    fn equal_tenants_are_the_default_and_what_processes_keys_and_threads_say() {
        assert_eq!(parse(&[]), Ok(vec![vec![tenant(20_000, 1); 3]]));
        assert_eq!(
            parse(&["--processes", "2,3", "--keys", "500", "--threads", "2"]),
            Ok(vec![vec![tenant(500, 2); 2], vec![tenant(500, 2); 3]])
        );
        let err = parse(&["--processes", "0"]).unwrap_err();
        assert!(err.contains("needs a tenant"), "{err}");
    }

    #[test]
    fn per_tenant_lists_make_one_measurement_of_a_tenant_per_value() {
        let greedy_and_quiet = vec![vec![tenant(20_000, 2), tenant(2000, 1), tenant(2000, 1)]];
        let argv = [
            "--tenant-keys",
            "20000,2000,2000",
            "--tenant-threads",
            "2,1,1",
        ];
        assert_eq!(parse(&argv), Ok(greedy_and_quiet.clone()));
        // --processes may say the same count.
        let with_p = [&argv[..], &["--processes", "3"]].concat();
        assert_eq!(parse(&with_p), Ok(greedy_and_quiet));
        // One list alone: the other from --threads (default 1) or --keys.
        assert_eq!(
            parse(&["--tenant-keys", "800,100", "--threads", "4"]),
            Ok(vec![vec![tenant(800, 4), tenant(100, 4)]])
        );
        assert_eq!(
            parse(&["--tenant-threads", "4,1", "--keys", "300"]),
            Ok(vec![vec![tenant(300, 4), tenant(300, 1)]])
        );
        // Equal per-tenant values are equal tenants.
        assert!(equal(&parse(&["--tenant-keys", "7,7"]).unwrap()[0]));
    }

    #[test]
    fn per_tenant_lists_that_disagree_are_refused_in_words() {
        let err = |argv: &[&str]| parse(argv).unwrap_err();
        let e = err(&["--tenant-keys", "1,2,3", "--tenant-threads", "2,1"]);
        assert!(
            e.contains("--tenant-keys gives 3 tenants and --tenant-threads 2"),
            "{e}"
        );
        let e = err(&["--tenant-keys", "1,2,3", "--processes", "2"]);
        assert!(
            e.contains("--processes 2 disagrees with the 3 tenants"),
            "{e}"
        );
        let e = err(&["--tenant-threads", "1,2", "--processes", "2,3"]);
        assert!(e.contains("--processes 2,3 disagrees"), "{e}");
        // clap's: no zero, no word, not beside the option a list replaces.
        for argv in [
            &["--tenant-keys", "100,0"][..],
            &["--tenant-threads", "0"],
            &["--tenant-keys", "100,many"],
            &["--tenant-keys", "100,200", "--keys", "5"],
            &["--tenant-threads", "1,2", "--threads", "5"],
        ] {
            let e = err(argv);
            assert!(e.contains("--tenant-"), "{argv:?}: {e}");
        }
    }

    #[test]
    fn every_tenant_reads_a_database_of_its_own_in_one_set_per_size() {
        let shapes = [
            vec![tenant(20_000, 4), tenant(2000, 1), tenant(2000, 1)],
            vec![tenant(2000, 1); 3],
        ];
        let (sets, numbers) = db_numbers(&shapes);
        // The most tenants of a size in one measurement: three of 2,000 keys.
        assert_eq!(sets, BTreeMap::from([(2000, 3), (20_000, 1)]));
        let pairs = |shape: &[DbNumber]| -> Vec<(u64, u64)> {
            shape.iter().map(|db| (db.keys, db.number)).collect()
        };
        assert_eq!(pairs(&numbers[0]), vec![(20_000, 0), (2000, 0), (2000, 1)]);
        assert_eq!(pairs(&numbers[1]), vec![(2000, 0), (2000, 1), (2000, 2)]);
    }

    #[test]
    fn unequal_tenants_are_labelled_by_their_keys_and_threads() {
        assert_eq!(label(&[tenant(5, 1); 3]), "P=3");
        assert_eq!(
            label(&[tenant(200_000, 4), tenant(20_000, 1)]),
            "P=2 (keys/threads 200000/4, 20000/1)"
        );
    }

    #[test]
    fn a_steady_window_that_read_nothing_from_the_disk_says_0_bytes_per_read() {
        use super::super::windows::Cpu;
        let part = |disk_reads: Vec<u64>| ProcessRun {
            run: RunResult::default(),
            rates: vec![100.0; 4],
            cpu: vec![Cpu::default(); 4],
            disk_reads,
            stats: String::new(),
        };
        let spec = WindowSpec {
            cold_secs: 1,
            steady_secs: 2,
        };
        // Seconds 3 and 4 steady: 200 reads.
        assert_eq!(steady_of(&part(vec![4096, 4096, 0, 0]), spec), (100.0, 0.0));
        assert_eq!(
            steady_of(&part(vec![0, 0, 8192, 8192]), spec),
            (100.0, 16384.0 / 200.0)
        );
        let too_short = WindowSpec {
            cold_secs: 3,
            steady_secs: 2,
        };
        assert!(steady_of(&part(vec![0; 4]), too_short).0.is_nan());
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
