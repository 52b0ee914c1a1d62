//! `db-bench readonly` (issue 45, done-when 1; RocksDB issue #14258): P read-only
//! db_bench processes (`--readonly --use_existing_db`, `readrandom` for `--duration-secs`)
//! on one database, started together, as three systems:
//!
//! - `kernel`: buffered reads, the page cache dropped first (cold);
//! - `folio`: the plugin at pure defaults (`--fs_uri=folio://`): the user's machine-wide
//!   domain (`folio-<uid>-user`), what a user gets. Its processes' `FOLIO_SEGMENT_DIR` is
//!   a directory of the measurement's own (`folio-bench-ro-<pid>-<n>` in the segment
//!   home, or in `FOLIO_SEGMENT_DIR`), where the domain's files go: so that every
//!   measurement starts cold (the domain outlives its processes by 10 minutes: in the
//!   home the next measurement would read this one's pages, or another program's of the
//!   user) and shares with no other program; the domain and the directory are removed
//!   after it;
//! - `folio-private`: the plugin with `domain=none`, a cache of each process's own (what
//!   a user got before the domain was the default), for the comparison. Explicit: the
//!   default is the domain now.
//!
//! Figures, per P: the **summed** reads/s (db_bench's own, one line per process), and the
//! same cut into a cold, a warm-up and a steady-state window ([`super::windows`]) of the
//! processes' per-second reports summed second by second (their CPU too: each process's,
//! sampled as in `readrandom`, summed); each process's rusage (`processes` in the row:
//! ops/s, user and system seconds, peak RSS, blocks read); and **the memory holding the
//! cached data**: the kernel's page cache of the table files after the run (mincore: one
//! copy at most, with its readahead) and the peak growth of `/proc/meminfo`'s `Cached`
//! while it ran; folio's: the domain's memory file at its largest (its tmpfs blocks,
//! sampled every 100 ms while the processes run and once after: the frames cached, the
//! frames populated ahead and not used yet, and the structures over them; the steward
//! gives free frames back once everyone left, so the figure after the run alone would
//! flatter it) plus what each process's private cache holds (`cached_bytes` and
//! `metadata_bytes` of its stats at exit: the files the domain does not take; its
//! `resident_bytes` counts whole 2 MiB chunks of an arena grown unpopulated, reported
//! beside as `private_resident_bytes`); folio-private's: the sum of its processes'
//! `resident_bytes` (populated ahead: memory). Beside them (not in the
//! ratio): `domain_frames_cached_bytes`, the frames the domain's queue holds after the
//! run (the data itself, readahead's pages included). The row's `memory_over_kernel`
//! sets each beside the kernel's page cache of the same P.
//!
//! Small by default, so that it finishes in minutes here: one database of 20,000 8 KiB
//! values (156 MiB), a 16 MiB block cache per process, 30 s per measurement (windows: the
//! first 10 s cold, the last 10 s steady), P = 2 and 4, one round; `--keys`,
//! `--cache-mib`, `--duration-secs`, `--cold-secs`, `--steady-secs`, `--processes`,
//! `--threads` (per process, default 1) and `--runs` change them.
//!
//! Limits: the windows are the processes' seconds summed by their index: the processes
//! start within milliseconds of each other, not at one instant, and each db_bench opens
//! the database before its first second. The domain's memory file counts every frame
//! touched, also frames a reclaim freed (none at these sizes: the domain is sized by the
//! machine); tmpfs blocks are resident unless swapped. A process's `resident_bytes` is its private arena at exit.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{json, Map, Value};

use super::child::SAMPLE_PERIOD;
use super::together::{measure_rounds, run_together, Launch, ProcessRun, Settings};
use super::windows::{Cpu, WindowSpec, Windows, WINDOW_NAMES};
use super::{
    build_plugin, ensure_dbs, forget_plugin_domain, forget_plugin_segment, plugin_domain_of,
    record_folio_capacity, run_result, table_files, workspace_root, Args, Parsed, DB_BENCH,
    VALUE_BYTES,
};
use crate::kernel;
use crate::measure::RunResult;
use crate::workloads::{Env, Metric, Report, Row, System, Target};

/// The systems, in the order each round measures them.
const SYSTEMS: [System; 3] = [System::Kernel, System::Folio, System::FolioPrivate];

/// Processes at once [default of `--processes`].
const PROCESSES_DEFAULT: [usize; 2] = [2, 4];

/// The targets (done-when 1): the summed reads/s at least the kernel's cold and
/// 1.1x in the steady state, and the memory within 1.1x of one copy.
const COLD_OVER_KERNEL_MIN: f64 = 1.0;
const STEADY_OVER_KERNEL_MIN: f64 = 1.1;
const MEMORY_OVER_ONE_COPY_MAX: f64 = 1.1;

/// A name new to this run, `folio-bench-ro-<pid>-<n>`: a measurement's segment directory.
fn fresh_name() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "folio-bench-ro-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A new directory for one measurement's domain (its processes' `FOLIO_SEGMENT_DIR`):
/// `fresh_name()` in `FOLIO_SEGMENT_DIR`, else in folio's private home (made if missing),
/// mode 0700 as the plugin requires of a segment directory.
pub(super) fn measurement_dir() -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let home =
        std::env::var_os("FOLIO_SEGMENT_DIR").map_or_else(folio::segment_home, PathBuf::from);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&home)?;
    let dir = home.join(fresh_name());
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// The plugin's default domain's name, `folio-<uid>-user` (plugins/rocksdb/folio_options.h,
/// `domain`): the memory file a measurement at the plugin's defaults samples while it runs
/// (`take_domain` then checks the name the processes' stats give).
pub(super) fn user_domain() -> String {
    // SAFETY: getuid has no preconditions and cannot fail.
    format!("folio-{}-user", unsafe { libc::getuid() })
}

/// The memory file of the domain `name` (named by the library's region version:
/// `folio::DomainFiles`); a name the library refuses has none.
pub(super) fn domain_region(name: &str) -> PathBuf {
    folio::DomainFiles::of(name).map_or_else(|_| PathBuf::new(), |files| files.region.into())
}

/// Bytes a tmpfs file holds in memory (its allocated blocks), 0 if it is gone.
fn tmpfs_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map_or(0, |m| m.blocks() * 512)
}

/// After a folio measurement at the plugin's defaults in `dir` (its processes'
/// `FOLIO_SEGMENT_DIR`, [`measurement_dir`]): the bytes the domain's memory file held at
/// its largest (`peak`, sampled while the processes ran, or after them), its name
/// (`domain`), what it held after them and the frames it caches (read before it is
/// removed: the data itself, beside what holds it) into `extra`; then the domain
/// forgotten and `dir` removed, so that the next measurement starts cold.
///
/// Errors: no memory file (the plugin did not attach its default domain);
/// `forget_plugin_domain`'s.
pub(super) fn take_domain(
    dir: &Path,
    parts: &[ProcessRun],
    peak: u64,
    extra: &mut Map<String, Value>,
) -> io::Result<u64> {
    // The domain every process attached (the stats name it: the user's).
    let stats = parts.first().map_or("", |p| p.stats.as_str());
    let name = plugin_domain_of(stats).unwrap_or("none").to_string();
    let path = dir.join(domain_region(&name));
    let region_after = tmpfs_bytes(&path);
    let cached = folio::DomainView::open(dir, &name)
        .map(|view| u64::from(view.read().frames_cached) * 4096)
        .unwrap_or(0);
    extra.insert("domain_frames_cached_bytes".into(), json!(cached));
    extra.insert("domain_region_after_bytes".into(), json!(region_after));
    extra.insert("domain_region_peak_bytes".into(), json!(peak));
    let region = region_after.max(peak);
    forget_plugin_domain(dir, stats)?;
    // What is left: the processes' unnamed segments (a read-only open takes no LOCK, so
    // the plugin names none), removed by their keepers.
    let _ = std::fs::remove_dir_all(dir);
    if region == 0 {
        return Err(io::Error::other(format!(
            "db-bench: no domain memory file {} after the run: the plugin did not attach its \
             default domain (its stderr says why)",
            path.display()
        )));
    }
    extra.insert("domain".into(), json!(name));
    Ok(region)
}

/// The peak of a tmpfs file's allocated bytes while a measurement runs (`tmpfs_bytes`
/// every 100 ms): the domain's region at its largest, whatever its steward gives back
/// once the processes have left (it gives the free frames back at once when alone).
pub(super) struct TmpfsPeak {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sampler: std::thread::JoinHandle<u64>,
}

impl TmpfsPeak {
    pub(super) fn start(path: PathBuf) -> TmpfsPeak {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let sampler = std::thread::spawn(move || {
            let mut peak = 0;
            loop {
                peak = tmpfs_bytes(&path).max(peak);
                if stopped.load(Ordering::Relaxed) {
                    return peak;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        });
        TmpfsPeak { stop, sampler }
    }

    pub(super) fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.sampler.join().unwrap_or(0)
    }
}

/// The sum, element by element, of `rows` cut to the shortest (a second every process
/// reported).
fn sum_by_index<T: Copy>(rows: &[Vec<T>], zero: T, add: impl Fn(T, T) -> T) -> Vec<T> {
    let n = rows.iter().map(Vec::len).min().unwrap_or(0);
    (0..n)
        .map(|i| rows.iter().fold(zero, |acc, r| add(acc, r[i])))
        .collect()
}

/// Sums the processes of one measurement into its run: db_bench's ops/s and operations
/// summed, P50 the mean of theirs and P99 the largest; the summed seconds cut into
/// `spec`'s windows; every process's figures under `processes`.
pub(super) fn summed(parts: &[ProcessRun], spec: WindowSpec) -> RunResult {
    let ops_per_sec: f64 = parts.iter().map(|p| p.run.ops_per_sec()).sum();
    let parsed = Parsed {
        ops_per_sec,
        operations: parts.iter().map(|p| p.run.ops).sum(),
        p50_us: parts.iter().map(|p| p.run.p50_us).sum::<f64>() / parts.len().max(1) as f64,
        p75_us: f64::NAN,
        p99_us: parts.iter().map(|p| p.run.p99_us).fold(0.0, f64::max),
    };
    let mut extra = Map::new();
    extra.insert(
        "processes".into(),
        json!(parts
            .iter()
            .map(|p| {
                let mut e = p.run.extra.clone();
                e.insert("ops_per_sec".into(), json!(p.run.ops_per_sec()));
                Value::Object(e)
            })
            .collect::<Vec<_>>()),
    );
    let rates = sum_by_index(
        &parts.iter().map(|p| p.rates.clone()).collect::<Vec<_>>(),
        0.0,
        |a, b| a + b,
    );
    let cpu = sum_by_index(
        &parts.iter().map(|p| p.cpu.clone()).collect::<Vec<_>>(),
        Cpu {
            user_secs: 0.0,
            sys_secs: 0.0,
        },
        |a, b| Cpu {
            user_secs: a.user_secs + b.user_secs,
            sys_secs: a.sys_secs + b.sys_secs,
        },
    );
    extra.insert("per_sec".into(), json!(rates));
    Windows::of(&rates, &cpu, spec).record(&mut extra);
    let mut run = run_result(&parsed, extra);
    run.extra.remove("p75_us");
    run
}

/// The domain's counts each process prints (`folio: domain:`), summed as `domain_<key>`.
const DOMAIN_KEYS: [&str; 7] = [
    "hits",
    "misses",
    "preads",
    "conflicts",
    "uncached",
    "reclaimed_frames",
    "files_refused",
];

/// The `folio: domain:` line of a process's stats (empty where there is none): its
/// counts and frames in the domain, whose names (`hits=`) the `folio: stats:` line may
/// use too.
pub(super) fn domain_line(stats: &str) -> &str {
    stats
        .lines()
        .find(|l| l.starts_with("folio: domain:"))
        .unwrap_or("")
}

/// What the private caches hold, summed over the processes: their resident bytes (the
/// arena's listed chunks) and what they hold of data (`private_held_bytes`: their cached
/// pages and their metadata).
pub(super) struct Private {
    pub resident: u64,
    pub held: u64,
}

/// What the folio side's stats say, summed over its processes: the private caches'
/// resident and held bytes ([`Private`]) and the domain's counts (`domain_hits`,
/// `domain_misses`, ... of [`DOMAIN_KEYS`]), and the bytes the domain caches as they tell
/// it (`domain_cached_bytes`: a page per miss that was inserted, neither a conflict nor
/// read uncached, less the frames reclaims freed: readahead's pages are not counted),
/// into `extra`.
pub(super) fn record_folio_stats(parts: &[ProcessRun], extra: &mut Map<String, Value>) -> Private {
    let mut resident = 0;
    let mut held = 0;
    let mut domain = [0u64; DOMAIN_KEYS.len()];
    for p in parts {
        resident += super::write::stat_of(&p.stats, "resident_bytes").unwrap_or(0);
        held += super::write::stat_of(&p.stats, "cached_bytes").unwrap_or(0)
            + super::write::stat_of(&p.stats, "metadata_bytes").unwrap_or(0);
        let line = domain_line(&p.stats);
        for (slot, key) in domain.iter_mut().zip(DOMAIN_KEYS) {
            *slot += super::write::stat_of(line, key).unwrap_or(0);
        }
    }
    extra.insert("private_resident_bytes".into(), json!(resident));
    extra.insert("private_held_bytes".into(), json!(held));
    for (value, key) in domain.iter().zip(DOMAIN_KEYS) {
        extra.insert(format!("domain_{key}"), json!(value));
    }
    let [_, misses, _, conflicts, uncached, reclaimed, _] = domain;
    let cached = misses.saturating_sub(conflicts + uncached + reclaimed);
    extra.insert("domain_cached_bytes".into(), json!(cached * 4096));
    Private { resident, held }
}

pub fn run(args: &Args, env: &Env) -> io::Result<Report> {
    const NAME: &str = "readrandom";
    let settings = Settings::of(args, env, &PROCESSES_DEFAULT);
    let Settings {
        ref processes,
        threads,
        keys,
        duration_secs,
        spec,
        cache_bytes,
        rounds,
    } = settings;
    let data_bytes = keys * VALUE_BYTES;

    let root = workspace_root();
    let (plugin, plugin_note) = build_plugin(env, &root)?;
    let db = ensure_dbs(env, 1, keys)?;
    let scratch = env.dir.join("db-bench-readonly");
    std::fs::create_dir_all(&scratch)?;

    let mut report = Report::new("db-bench-readonly", Metric::OpsPerSec);
    report.param("benchmark", NAME);
    report.param("processes", processes.clone());
    report.param("threads_per_process", threads);
    report.param("num", keys);
    report.param("value_size", VALUE_BYTES);
    report.param("data_bytes", data_bytes);
    report.param("cache_size", cache_bytes);
    report.param("duration_secs", duration_secs);
    report.param("cold_secs", spec.cold_secs);
    report.param("steady_secs", spec.steady_secs);
    report.param("rounds", rounds);
    report.param("db_bench", DB_BENCH);

    let base_args = |p: usize| -> Vec<String> {
        let mut args = settings.db_bench_args(NAME, p);
        args.insert(2, "--readonly=1".into());
        args.insert(3, format!("--db={}", db.display()));
        args
    };

    // One measurement: P processes of `system` started together.
    let measure = |system: System, p: usize| -> io::Result<RunResult> {
        let tables = table_files(&db)?;
        kernel::make_cold(&tables, env.cold)?;
        // folio: pure defaults, the domain's files in a directory of the measurement's
        // own; folio-private: domain=none, explicitly, since the default is the domain.
        let domain_dir = match system {
            System::Folio => Some(measurement_dir()?),
            _ => None,
        };
        let uri = match system {
            System::Folio => "folio://",
            _ => "folio://?domain=none",
        };
        let peak = kernel::PageCachePeak::start();
        let region_peak = domain_dir
            .as_ref()
            .map(|dir| TmpfsPeak::start(dir.join(domain_region(&user_domain()))));
        let launches = (0..p)
            .map(|i| {
                let mut cmd = Command::new(DB_BENCH);
                cmd.args(base_args(i));
                if system != System::Kernel {
                    cmd.env("LD_PRELOAD", &plugin)
                        .arg(format!("--fs_uri={uri}"));
                }
                if let Some(d) = &domain_dir {
                    cmd.env("FOLIO_SEGMENT_DIR", d);
                }
                Launch {
                    cmd,
                    dir: scratch.join(format!("{}-{i}", system.as_str())),
                    what: format!("--readonly, {system}, process {i} of {p}"),
                }
            })
            .collect();
        let parts = run_together(NAME, launches)?;
        let page_cache_peak = peak.stop();
        let region_peak = region_peak.map_or(0, TmpfsPeak::stop);
        let mut run = summed(&parts, spec);
        let kernel_cached = kernel::resident_pages_all(&tables)?.resident * 4096;
        run.extra
            .insert("page_cache_tables_bytes".into(), json!(kernel_cached));
        run.extra.insert(
            "page_cache_peak_growth_bytes".into(),
            json!(page_cache_peak),
        );
        let memory = match system {
            System::Kernel => kernel_cached,
            _ => {
                let private = record_folio_stats(&parts, &mut run.extra);
                let region = match &domain_dir {
                    Some(dir) => take_domain(dir, &parts, region_peak, &mut run.extra)?,
                    None => {
                        // Each process's persistent segment: the named one (the first
                        // process's) removed, as after every cold folio measurement.
                        let mut ignored = Map::new();
                        for part in &parts {
                            forget_plugin_segment(&part.stats, &mut ignored)?;
                        }
                        0
                    }
                };
                run.extra
                    .insert("domain_region_bytes".into(), json!(region));
                if let Some(first) = parts.first() {
                    record_folio_capacity(&first.stats, &mut run.extra);
                }
                // A domain's processes: what their private caches hold (`Private::held`).
                // Their `resident_bytes` counts each listed 2 MiB chunk of the arena,
                // which a cache with a domain grows unpopulated (`PopulateAhead::Never`)
                // and touches a page at a time: 2 MiB a process for one cached page of
                // a LOG file, the smaps beside it showing no more anonymous memory than
                // the kernel's processes (docs/sharing.md, "The domain's memory as
                // used"). The private caches' row keeps `resident_bytes`: populated
                // ahead, it is memory.
                match domain_dir {
                    Some(_) => region + private.held,
                    None => private.resident,
                }
            }
        };
        run.extra.insert("memory_bytes".into(), json!(memory));
        Ok(run)
    };

    let steps = rounds * SYSTEMS.len() * processes.len();
    let bar = env.bar("db-bench readonly", steps as u64);
    for &p in processes {
        let runs = measure_rounds(&SYSTEMS, rounds, p, &bar, &measure)?;
        let kernel_runs = runs[0].clone();
        for (si, system) in SYSTEMS.iter().enumerate() {
            let mut row = Row::from_runs(*system, p, &runs[si], Metric::OpsPerSec);
            let ratio = |key: &str, over: &str| {
                median(runs[si].iter().zip(&kernel_runs).filter_map(|(r, k)| {
                    Some(r.extra.get(key)?.as_f64()? / k.extra.get(over)?.as_f64()?.max(1e-9))
                }))
            };
            for window in WINDOW_NAMES {
                let key = format!("{window}_ops_per_sec");
                row.extra
                    .insert(format!("{window}_vs_kernel"), json!(ratio(&key, &key)));
            }
            row.extra.insert(
                "memory_over_kernel".into(),
                json!(ratio("memory_bytes", "memory_bytes")),
            );
            report.rows.push(row);
        }
    }
    bar.finish_and_clear();
    report.fill_ratios();

    for &p in processes {
        let rows = report.clone();
        let figure = |system: System, key: &str| {
            rows.row(system, p as u32)
                .and_then(|r| r.extra.get(key)?.as_f64())
        };
        let mib_of =
            |system: System| figure(system, "memory_bytes").unwrap_or(f64::NAN) / 1048576.0;
        report.note(format!(
            "P={p}: summed reads/s cold / steady: kernel {:.0} / {:.0}, folio (domain) {:.0} / \
             {:.0}, folio-private {:.0} / {:.0}; memory holding the data: kernel {:.1} MiB \
             (page cache of the tables), folio {:.1} MiB (domain file at its peak {:.1}, of \
             which frames cached {:.1}, + private caches' pages {:.3}), folio-private {:.1} MiB",
            figure(System::Kernel, "cold_ops_per_sec").unwrap_or(f64::NAN),
            figure(System::Kernel, "steady_ops_per_sec").unwrap_or(f64::NAN),
            figure(System::Folio, "cold_ops_per_sec").unwrap_or(f64::NAN),
            figure(System::Folio, "steady_ops_per_sec").unwrap_or(f64::NAN),
            figure(System::FolioPrivate, "cold_ops_per_sec").unwrap_or(f64::NAN),
            figure(System::FolioPrivate, "steady_ops_per_sec").unwrap_or(f64::NAN),
            mib_of(System::Kernel),
            mib_of(System::Folio),
            figure(System::Folio, "domain_region_bytes").unwrap_or(f64::NAN) / 1048576.0,
            figure(System::Folio, "domain_frames_cached_bytes").unwrap_or(f64::NAN) / 1048576.0,
            figure(System::Folio, "private_held_bytes").unwrap_or(f64::NAN) / 1048576.0,
            mib_of(System::FolioPrivate),
        ));
        report.targets.push(Target::at_least(
            format!(
                "db-bench readonly P={p}, cold (the first {} s): folio / kernel summed reads/s",
                spec.cold_secs
            ),
            figure(System::Folio, "cold_vs_kernel"),
            COLD_OVER_KERNEL_MIN,
        ));
        report.targets.push(Target::at_least(
            format!(
                "db-bench readonly P={p}, steady (the last {} s): folio / kernel summed reads/s",
                spec.steady_secs
            ),
            figure(System::Folio, "steady_vs_kernel"),
            STEADY_OVER_KERNEL_MIN,
        ));
        report.targets.push(Target::at_most(
            format!("db-bench readonly P={p}: folio's memory / the kernel's page cache of the tables (one copy)"),
            figure(System::Folio, "memory_over_kernel"),
            MEMORY_OVER_ONE_COPY_MAX,
        ));
    }
    report.note(format!(
        "P db_bench {} processes at once on one database of {keys} 8 KiB values ({} MiB; made \
         once with fillseq,flush); each: {}; kernel: buffered, the page cache dropped first; \
         folio: LD_PRELOAD={} --fs_uri='folio://' (pure defaults: the user's domain, in a \
         segment directory new to each measurement, so it starts cold); folio-private: \
         --fs_uri='folio://?domain=none' (a cache per process); rows: threads = P, ops/s the sum of the processes'; \
         the median of {rounds} round(s)",
        NAME,
        data_bytes >> 20,
        base_args(0)
            .iter()
            .filter(|a| !a.starts_with("--db=") && !a.starts_with("--seed="))
            .cloned()
            .collect::<Vec<_>>()
            .join(" "),
        plugin.display(),
    ));
    report.note(format!(
        "windows: the processes' per-second reads (--report_interval_seconds=1) summed second \
         by second, and their CPU (/proc/<pid>/stat every {} ms) summed; cold = seconds \
         1-{}, steady = the last {}; memory: kernel = mincore of the table files after the \
         run (page_cache_peak_growth_bytes: /proc/meminfo Cached's peak growth beside it); \
         folio = the domain's memory file (tmpfs blocks, the peak of 100 ms samples while \
         the processes ran and one after) + what the processes' private caches hold at exit \
         (cached_bytes + metadata_bytes; their resident_bytes, whole 2 MiB chunks grown \
         unpopulated, as private_resident_bytes); folio-private = its processes' \
         resident_bytes; the processes' rusage under `processes`",
        SAMPLE_PERIOD.as_millis(),
        spec.cold_secs,
        spec.steady_secs,
    ));
    if let Some(note) = plugin_note {
        report.note(note);
    }
    report.limits = env.limits()?;
    Ok(report)
}

/// The median of `xs` (NaN, a null in JSON, for none).
pub(super) fn median(xs: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = xs.filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(ops: u64, secs: f64, rates: Vec<f64>, cpu: Vec<(f64, f64)>) -> ProcessRun {
        let parsed = Parsed {
            ops_per_sec: ops as f64 / secs,
            operations: ops,
            p50_us: 10.0,
            p75_us: 20.0,
            p99_us: 100.0,
        };
        ProcessRun {
            run: run_result(&parsed, Map::new()),
            rates,
            cpu: cpu
                .into_iter()
                .map(|(u, s)| Cpu {
                    user_secs: u,
                    sys_secs: s,
                })
                .collect(),
            disk_reads: Vec::new(),
            stats: String::new(),
        }
    }

    #[test]
    fn processes_sum_by_second_and_cut_into_windows() {
        let a = part(300, 3.0, vec![100.0, 100.0, 100.0], vec![(0.1, 0.1); 3]);
        // The second process reported one second fewer: the sum stops at two.
        let b = part(100, 2.0, vec![40.0, 60.0], vec![(0.2, 0.0); 2]);
        let spec = WindowSpec {
            cold_secs: 1,
            steady_secs: 1,
        };
        let run = summed(&[a, b], spec);
        assert_eq!(run.ops, 400);
        assert!((run.ops_per_sec() - 150.0).abs() < 1e-6);
        assert_eq!(run.extra["per_sec"], json!([140.0, 160.0]));
        assert_eq!(run.extra["cold_ops_per_sec"], json!(140.0));
        assert_eq!(run.extra["steady_ops_per_sec"], json!(160.0));
        // 0.3 s user over the steady second's 160 reads.
        let user = run.extra["steady_user_us_per_read"].as_f64().unwrap();
        assert!((user - 0.3e6 / 160.0).abs() < 1e-6, "{user}");
        assert_eq!(run.extra["processes"].as_array().unwrap().len(), 2);
        assert_eq!(run.p99_us, 100.0);
    }

    #[test]
    fn folio_stats_sum_the_private_caches_and_the_domain() {
        let stats = |resident: u64, hits: u64| {
            format!(
                "folio: stats: hits=1 resident_bytes={resident} cached_bytes=4096 \
                 metadata_bytes=100 backend=pread\n\
                 folio: domain: name=d hits={hits} pinned_hits=0 stale_copies=0 misses=5 \
                 preads=5 conflicts=1 reclaims=0 reclaimed_frames=0 uncached=0 \
                 sibling_pinned=0 files_refused=0\n"
            )
        };
        let mut a = part(1, 1.0, vec![], vec![]);
        a.stats = stats(4096, 10);
        let mut b = part(1, 1.0, vec![], vec![]);
        b.stats = stats(8192, 20);
        let mut extra = Map::new();
        let private = record_folio_stats(&[a, b], &mut extra);
        assert_eq!(private.resident, 12288);
        assert_eq!(private.held, 2 * (4096 + 100));
        // The domain's hits, not the private cache's `hits=` of the stats line.
        assert_eq!(extra["domain_hits"], json!(30));
        assert_eq!(extra["domain_misses"], json!(10));
        assert_eq!(extra["domain_preads"], json!(10));
        // Ten misses, of which two conflicts: eight pages cached.
        assert_eq!(extra["domain_cached_bytes"], json!(8 * 4096));
    }

    #[test]
    fn fresh_names_are_plain_names_and_differ() {
        let (a, b) = (fresh_name(), fresh_name());
        assert_ne!(a, b);
        folio::check_segment_name(&a).unwrap();
    }
}
