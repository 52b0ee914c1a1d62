//! `db-bench` (issue 5): the unmodified RocksDB `db_bench readseq` from a cold cache, as
//! three systems with the same block cache and threads: `kernel` (buffered reads through
//! the page cache), `direct` (`--use_direct_reads=1`: RocksDB's block cache only) and
//! `folio` (buffered, through the folio RocksDB plugin, `plugins/rocksdb/db_bench_folio.sh`,
//! `--fs_uri=folio://`: every option at the plugin's default, the capacity too unless
//! `--folio-capacity-mib` sets it; what the capacity was is read from the plugin's stats at
//! exit, `FOLIO_STATS`, into the row's `folio_capacity_mib`).
//!
//! `--cgroup-max-mib` runs every system's db_bench in a fresh memory cgroup of that size,
//! one per measurement ([`Confinement`]): the program enters it between fork and exec, so
//! its page cache, RocksDB's caches and folio's memory are all charged to it; rows carry
//! the group's peak and its OOM kills. folio's memory policy reads a cgroup v2 limit only:
//! under cgroup v1 the plugin does not see it, and the report says so.
//!
//! Design: the databases are made once per data directory (`fillseq,flush` with
//! `--num_multi_db=N --num=K --value_size=8192`, default file system) and reused while a
//! marker file says they are complete. The plugin is built with cmake into
//! `target/rocksdb-plugin` (incremental: cheap when up to date; afresh when the directory
//! is another tree's build) before the first run; if that build fails but this
//! workspace's plugin is there, that plugin is measured and the report says so.
//! Before every measurement the page cache is dropped and every table file checked 0%
//! resident (`kernel::make_cold`). Figures are what db_bench prints: the `readseq` line's
//! ops/sec and operations, and its histogram's P50/P75/P99 (microseconds).
//!
//! `db-bench readrandom` (issue 13, module `readrandom`) runs db_bench's `readrandom` the
//! same way for `--duration-secs`, and adds each process's system and user time per read,
//! over the whole run and in a cold, a warm-up and a steady-state window (module
//! `windows`: db_bench's per-second rates beside the process's CPU sampled as it runs).
//!
//! `db-bench readonly` (issue 45, module `readonly`) runs P read-only db_bench
//! processes on one database at once: the kernel, folio sharing a domain, folio private.
//! `db-bench tenants` (module `tenants`) runs P processes each on a database of its own
//! (the services of one machine), equal or each of its own size and threads (a greedy
//! tenant beside quiet ones), kernel and folio; both start their processes together
//! (module `together`).
//!
//! `db-bench fillseq | fillrandom | overwrite | readwhilewriting` (issue 15, module
//! `write`) run db_bench's write and mixed benchmarks with every file of the database
//! through each system (direct: `--use_direct_io_for_flush_and_compaction=1` too).
//!
//! Limits: db_bench is an external program: `mb_per_sec` is ops/s x 8 KiB (the value
//! size; keys and block overhead are not counted), `pages_inserted` is not known (null),
//! and `bytes_verified` counts the bytes whose blocks RocksDB checked against their
//! checksums (`--verify_checksum=1`), not the data rule of the other workloads. Needs
//! `rocksdb-tools librocksdb-dev cmake g++`.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

mod child;
mod plugin;
mod readonly;
mod readrandom;
mod tenants;
mod together;

use readrandom::PointReads;
mod restart;
mod windows;
mod write;

use plugin::{
    build_plugin, check_status, forget_plugin_domain, forget_plugin_segment, fs_uri, missing,
    plugin_domain_of, record_folio_capacity, tail, workspace_root,
};

use super::{measure_systems, mib, threads_or, Env, Metric, Report, System, Workload};
use crate::kernel;
use crate::measure::RunResult;

/// db_bench's value size (RocksDB's 8 KiB values, as in `readseq`).
pub const VALUE_BYTES: u64 = 8192;
const SYSTEMS: [System; 3] = [System::Kernel, System::Direct, System::Folio];
const DB_BENCH: &str = "/usr/bin/db_bench";
const PACKAGES: &str = "apt-get install -y rocksdb-tools librocksdb-dev cmake g++";

/// Which of db_bench's benchmarks is measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Benchmark {
    /// `readseq`: every thread scans every database (issue 5).
    #[default]
    Readseq,
    /// `readrandom`: random keys of random databases, the plugin at its default options,
    /// with system time per read (issue 13).
    Readrandom,
    /// `multireadrandom`: readrandom's keys in MultiGet batches (`--batch-size`), which
    /// RocksDB reads with one MultiRead per table file (issue 17).
    Multireadrandom,
    /// `fillseq`: keys in order into a fresh database, every file through each system
    /// (issue 15).
    Fillseq,
    /// `fillrandom`: random keys into a fresh database (issue 15).
    Fillrandom,
    /// `overwrite`: random keys over a database with every key (issue 15).
    Overwrite,
    /// `readwhilewriting`: random reads while one thread overwrites (issue 15).
    Readwhilewriting,
    /// `readrandom` after a restart of db_bench on the same database, against the rate of
    /// the process before it, kernel and folio (the plugin at its defaults) (issue 32).
    Restart,
    /// P read-only db_bench processes (`--readonly`) on one database at once, `readrandom`
    /// (`--processes`): the kernel, folio sharing a fresh domain, and folio with private
    /// caches; summed reads/s, cold and steady, and the memory holding the data (issue 45).
    Readonly,
    /// P db_bench processes at once, each on a database of its own (`--processes`, or each
    /// of its own size and threads: `--tenant-keys`, `--tenant-threads`; `readrandom`): the
    /// kernel and folio's plugin (one domain for the P); summed reads/s, each tenant's
    /// against the kernel's, the memory holding the data (issue 45).
    Tenants,
}

#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// db_bench's benchmark
    #[arg(value_enum, default_value_t = Benchmark::Readseq)]
    pub benchmark: Benchmark,
    /// Reads per thread of `readrandom` and `multireadrandom` (db_bench's `--reads`)
    /// [default: --keys where they read no --duration-secs (--quick); else a large number,
    /// which db_bench does not consult under `--duration`]
    #[arg(long)]
    pub reads: Option<u64>,
    /// Keys per MultiGet of `multireadrandom` (db_bench's `--batch_size`) [default: 16]
    #[arg(long)]
    pub batch_size: Option<u64>,
    /// Seconds each reader of `readrandom`, `multireadrandom` and `readwhilewriting` reads
    /// (db_bench's `--duration`; 0: none, --reads decides) [default: readrandom and
    /// multireadrandom 60, readwhilewriting 30; --quick: none, each reader reads --reads or
    /// --keys keys]
    #[arg(long)]
    pub duration_secs: Option<u64>,
    /// Seconds of `readrandom`'s and `multireadrandom`'s cold window: the first of db_bench's
    /// per-second reports [default: 10]
    #[arg(long)]
    pub cold_secs: Option<u64>,
    /// Seconds of `readrandom`'s and `multireadrandom`'s steady-state window: the last of
    /// db_bench's per-second reports; the warm-up window is what lies between [default: 20]
    #[arg(long)]
    pub steady_secs: Option<u64>,
    /// MiB/s that `readwhilewriting`'s writer writes at most (db_bench's
    /// `--benchmark_write_rate_limit`, as RocksDB's own benchmark.sh runs it), so that
    /// every system's readers share the machine with the same writes [default: 8; 0:
    /// unlimited]
    #[arg(long)]
    pub write_rate_mib: Option<u64>,
    /// Thread counts, comma-separated [default: 32; --quick 4; fills and overwrite: 1;
    /// readwhilewriting's readers: 8, --quick 2]
    #[arg(long, value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// Databases (`--num_multi_db`) [default: 32; --quick 4]
    #[arg(long)]
    pub dbs: Option<u64>,
    /// Keys per database (`--num`) [default: 5000; --quick 2000; the write workloads:
    /// 500000, --quick 20000]
    #[arg(long)]
    pub keys: Option<u64>,
    /// Bytes per value of the write workloads (`--value_size`) [default: 1000]
    #[arg(long)]
    pub value_bytes: Option<u64>,
    /// MiB of memtable and of table file of the write workloads (`--write_buffer_size`,
    /// `--target_file_size_base`; L1 four times it) [default: 64, db_bench's; --quick 4]
    #[arg(long)]
    pub write_buffer_mib: Option<u64>,
    /// MiB of RocksDB's block cache (`--cache_size`), the same for every system
    /// [default: 400; --quick 16; the write workloads: db_bench's own (8 MiB)]
    #[arg(long)]
    pub cache_mib: Option<u64>,
    /// MiB of folio's cache (the plugin's `capacity`), an explicit override [default: none
    /// in the URI: the plugin's own default capacity]
    #[arg(long)]
    pub folio_capacity_mib: Option<u64>,
    /// Seconds of `restart`'s second process (its first window) [default: 10; --quick 2]
    #[arg(long)]
    pub first_secs: Option<u64>,
    /// Seconds of readrandom in `restart`'s first process, after its readseq [default: 5;
    /// --quick 2]
    #[arg(long)]
    pub warm_secs: Option<u64>,
    /// `readonly`: how many db_bench processes read the database at once; `tenants`: how
    /// many tenants, each on its own database; comma-separated [default: readonly 2,4;
    /// tenants 3]
    #[arg(long, value_delimiter = ',')]
    pub processes: Option<Vec<usize>>,
    /// `tenants`: each tenant's database size in keys, comma-separated, one value per
    /// tenant (unequal tenants: `--tenant-keys 400000,20000,20000` is a greedy tenant
    /// beside two quiet ones); the list's length is the tenant count, which `--processes`,
    /// if given too, must equal [default: --processes tenants of --keys each]
    #[arg(
        long,
        value_delimiter = ',',
        conflicts_with = "keys",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub tenant_keys: Option<Vec<u64>>,
    /// `tenants`: each tenant's db_bench threads (its `--threads`), comma-separated, one
    /// value per tenant, as many as --tenant-keys gives or --processes says [default: 1
    /// each, or --threads]
    #[arg(
        long,
        value_delimiter = ',',
        conflicts_with = "threads",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub tenant_threads: Option<Vec<u64>>,
    /// Run every system's db_bench in a fresh memory cgroup of this many MiB, one per
    /// measurement (v2 `memory.max`, or v1 `memory.limit_in_bytes` where the memory
    /// controller is on v1; folio's memory policy reads only v2) [default: none]
    #[arg(long)]
    pub cgroup_max_mib: Option<u64>,
    /// `tenants`: another process takes this many MiB of the machine's memory (written
    /// through and held) before the first measurement and until the last ends: every
    /// system measured on a machine under memory pressure [default: none]
    #[arg(long)]
    pub hold_mib: Option<u64>,
}

/// The plugin's capacity as the command line says: an explicit size, or the plugin's
/// default (nothing in the URI).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FolioCapacity {
    /// `--folio-capacity-mib`: `capacity=<MiB>M` in the URI.
    Mib(u64),
    /// No `capacity` in the URI: what the plugin does by default.
    PluginDefault,
}

impl FolioCapacity {
    pub fn of(args: &Args) -> FolioCapacity {
        match args.folio_capacity_mib {
            Some(m) => FolioCapacity::Mib(m.max(folio::CAPACITY_BYTES_MIN.div_ceil(1 << 20))),
            None => FolioCapacity::PluginDefault,
        }
    }

    /// The report's `folio_capacity` param: bytes, or the words "plugin default".
    pub fn param(self) -> serde_json::Value {
        match self {
            FolioCapacity::Mib(m) => json!(mib(m)),
            FolioCapacity::PluginDefault => json!("plugin default"),
        }
    }

    /// For notes: "4096 MiB" or "the plugin's default".
    pub fn describe(self) -> String {
        match self {
            FolioCapacity::Mib(m) => format!("{m} MiB (--folio-capacity-mib)"),
            FolioCapacity::PluginDefault => {
                "the plugin's default (no capacity in the URI; the plugin's stats at exit \
                 say what it was: folio_capacity_mib)"
                    .to_string()
            }
        }
    }
}

/// Where every system's db_bench runs: in a fresh memory cgroup per measurement
/// (`--cgroup-max-mib`), or with the machine's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Confinement {
    pub limit_bytes: Option<u64>,
}

impl Confinement {
    pub fn of(args: &Args) -> Confinement {
        Confinement {
            limit_bytes: args.cgroup_max_mib.filter(|&m| m > 0).map(mib),
        }
    }

    /// A fresh group for one db_bench, `cmd` set to enter it before the program runs;
    /// `None` without `--cgroup-max-mib`.
    ///
    /// Errors: no group can be made (not root, no memory controller): the option asked
    /// for one.
    pub fn enter(self, cmd: &mut Command) -> io::Result<Option<kernel::Cgroup>> {
        let Some(limit) = self.limit_bytes else {
            return Ok(None);
        };
        let group = kernel::Cgroup::create(limit)
            .map_err(|e| io::Error::new(e.kind(), format!("db-bench --cgroup-max-mib: {e}")))?;
        group.enter_at_exec(cmd)?;
        Ok(Some(group))
    }

    /// Records what `group` saw in `run`'s extras: its peak and its OOM kills.
    pub fn record(
        group: Option<&kernel::Cgroup>,
        extra: &mut serde_json::Map<String, serde_json::Value>,
    ) {
        if let Some(g) = group {
            extra.insert("cgroup_peak_bytes".into(), json!(g.peak_bytes()));
            extra.insert("cgroup_oom_kills".into(), json!(g.oom_kills()));
        }
    }

    /// Why a db_bench in `group` failed, if its OOM killer ended it: words for the error.
    pub fn failure(group: Option<&kernel::Cgroup>) -> String {
        match group.and_then(kernel::Cgroup::oom_kills) {
            Some(n) if n > 0 => format!(
                " ({n} process(es) killed by the cgroup's OOM killer: {})",
                group.map_or_else(String::new, kernel::Cgroup::describe)
            ),
            _ => String::new(),
        }
    }

    /// The report's params and a note about the group (nothing without one).
    pub fn describe_in(self, report: &mut Report) {
        report.param("cgroup_limit_bytes", self.limit_bytes);
        let Some(limit) = self.limit_bytes else {
            return;
        };
        // The version of the hierarchy a group would be made in (made and removed here).
        let version = kernel::Cgroup::create(limit).ok().map(|g| g.version());
        report.param(
            "cgroup_version",
            match version {
                Some(kernel::CgroupVersion::V1) => json!("v1"),
                Some(kernel::CgroupVersion::V2) => json!("v2"),
                None => serde_json::Value::Null,
            },
        );
        let seen = match version {
            Some(kernel::CgroupVersion::V2) => {
                "folio's memory policy reads this limit (memory.max)"
            }
            _ => {
                "a cgroup v1 group (memory.limit_in_bytes): folio's memory policy reads this \
                 limit (hierarchical_memory_limit)"
            }
        };
        report.note(format!(
            "every system's db_bench ran in a fresh memory cgroup of {} MiB per measurement \
             (its page cache, RocksDB's block cache and memtables, folio's memory all \
             charged to it); {seen}; rows carry cgroup_peak_bytes and cgroup_oom_kills",
            limit >> 20
        ));
    }
}

impl Workload for Args {
    fn name(&self) -> &'static str {
        "db-bench"
    }

    /// `restart`: two rounds (each two db_bench processes per system, about a minute);
    /// the others the common default.
    fn runs_default(&self) -> usize {
        match self.benchmark {
            Benchmark::Restart => 2,
            Benchmark::Readonly | Benchmark::Tenants => 1,
            _ => super::RUNS_DEFAULT,
        }
    }

    fn run(&self, env: &Env) -> io::Result<Report> {
        if self.benchmark != Benchmark::Tenants
            && (self.tenant_keys.is_some() || self.tenant_threads.is_some())
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "--tenant-keys and --tenant-threads shape the tenants of `db-bench tenants` \
                 only",
            ));
        }
        // The plugin runs at its defaults, which are persistent (`persist=1`): `--persistent`
        // changes nothing here, and its absence does not turn persistence off.
        match self.benchmark {
            Benchmark::Readrandom => return readrandom::run(self, env, PointReads::Single),
            Benchmark::Multireadrandom => {
                let batch = self
                    .batch_size
                    .unwrap_or(readrandom::BATCH_SIZE_DEFAULT)
                    .max(1);
                return readrandom::run(self, env, PointReads::Batched { batch });
            }
            Benchmark::Restart => return restart::run(self, env),
            Benchmark::Readonly => return readonly::run(self, env),
            Benchmark::Tenants => return tenants::run(self, env),
            _ => {}
        }
        if write::db_bench_name(self.benchmark).is_some() {
            return write::run(self, env);
        }
        let threads = threads_or(&self.threads, env.scale.pick(&[4], &[32]));
        let dbs = self.dbs.unwrap_or(env.scale.pick(4, 32)).max(1);
        let keys = self.keys.unwrap_or(env.scale.pick(2000, 5000)).max(1);
        let cache_bytes = mib(self.cache_mib.unwrap_or(env.scale.pick(16, 400)));
        let data_bytes = dbs * keys * VALUE_BYTES;
        let capacity = FolioCapacity::of(self);
        let confinement = Confinement::of(self);

        let root = workspace_root();
        let (plugin, plugin_note) = build_plugin(env, &root)?;
        let db = ensure_dbs(env, dbs, keys)?;
        // Every option at the plugin's default, as folio's own caches are at the
        // library's in every workload (the capacity only if asked).
        let fs_uri = fs_uri(env.arena_pages, capacity);
        let scratch = env.dir.join("db-bench-output");
        std::fs::create_dir_all(&scratch)?;
        let stats = scratch.join("folio-stats.txt");

        let mut report = Report::new(self.name(), Metric::OpsPerSec);
        report.param("threads", threads.clone());
        report.param("num_multi_db", dbs);
        report.param("num", keys);
        report.param("value_size", VALUE_BYTES);
        report.param("data_bytes", data_bytes);
        report.param("cache_size", cache_bytes);
        report.param("folio_capacity", capacity.param());
        report.param("fs_uri", fs_uri.clone());
        report.param("runs", env.runs);
        report.param("db_bench", DB_BENCH);
        confinement.describe_in(&mut report);

        measure_systems(env, &mut report, &SYSTEMS, &threads, |turn| {
            // Re-listed each time: db_bench renames and removes files (LOG, WAL).
            kernel::make_cold(&table_files(&db)?, env.cold)?;
            let mut cmd = match turn.system {
                System::Folio => {
                    let mut c = Command::new(root.join("plugins/rocksdb/db_bench_folio.sh"));
                    c.env("FOLIO_PLUGIN", &plugin).env("DB_BENCH", DB_BENCH);
                    c
                }
                _ => Command::new(DB_BENCH),
            };
            cmd.arg("--benchmarks=readseq,stats")
                .arg("--use_existing_db=1")
                .arg(format!("--db={}", db.display()))
                .arg(format!("--num_multi_db={dbs}"))
                .arg(format!("--num={keys}"))
                .arg(format!("--value_size={VALUE_BYTES}"))
                .arg(format!("--threads={}", turn.threads))
                .arg(format!("--cache_size={cache_bytes}"))
                .arg("--histogram=1")
                .arg("--verify_checksum=1");
            match turn.system {
                System::Direct => {
                    cmd.arg("--use_direct_reads=1");
                }
                System::Folio => {
                    let _ = std::fs::remove_file(&stats);
                    cmd.env("FOLIO_STATS", &stats)
                        .arg(format!("--fs_uri={fs_uri}"));
                }
                _ => {}
            }
            let group = confinement.enter(&mut cmd)?;
            let mut run = run_db_bench(&mut cmd, turn.system, group.as_ref())?;
            Confinement::record(group.as_ref(), &mut run.extra);
            if turn.system == System::Folio {
                let text = std::fs::read_to_string(&stats).unwrap_or_default();
                record_folio_capacity(&text, &mut run.extra);
                forget_plugin_segment(&text, &mut run.extra)?;
            }
            Ok(run)
        })?;
        report.note(format!(
            "db_bench readseq,stats --use_existing_db=1 --histogram=1 --verify_checksum=1 over \
             {dbs} databases of {keys} 8 KiB values (made once with fillseq,flush); kernel: \
             buffered; direct: --use_direct_reads=1; folio: plugins/rocksdb/db_bench_folio.sh \
             --fs_uri='{fs_uri}' (capacity: {}); block cache {} MiB for all",
            capacity.describe(),
            cache_bytes >> 20
        ));
        report.note(format!(
            "cold: before every measurement, {}; then mincore: 0% resident",
            env.cold.describe()
        ));
        report.note(
            "ops/s and P50/P99 (us) are db_bench's own (readseq line, histogram); P75 is the \
             row's extra field p75_us; MB/s = ops/s x 8 KiB (values only); pages_inserted \
             unknown (db_bench is an external program)",
        );
        if let Some(note) = plugin_note {
            report.note(note);
        }
        report.limits = env.limits()?;
        Ok(report)
    }
}

/// The databases for `dbs` x `keys`, made with fillseq (and flushed to table files) unless
/// a previous run left them complete. Returns the `--db` path.
fn ensure_dbs(env: &Env, dbs: u64, keys: u64) -> io::Result<PathBuf> {
    let parent = env.dir.join(format!("db-bench-{dbs}x{keys}"));
    let db = parent.join("db");
    let marker = parent.join("complete");
    if marker.is_file() && db.is_dir() {
        return Ok(db);
    }
    if parent.exists() {
        std::fs::remove_dir_all(&parent)?;
    }
    std::fs::create_dir_all(&parent)?; // db_bench wants the parent of --db to exist
    let bar = env.progress.add(indicatif::ProgressBar::new_spinner());
    bar.set_message(format!(
        "db-bench: fillseq {dbs} databases x {keys} keys ({} MiB)",
        (dbs * keys * VALUE_BYTES) >> 20
    ));
    bar.enable_steady_tick(std::time::Duration::from_millis(100));
    let out = Command::new(DB_BENCH)
        .arg("--benchmarks=fillseq,flush")
        .arg(format!("--db={}", db.display()))
        .arg(format!("--num_multi_db={dbs}"))
        .arg(format!("--num={keys}"))
        .arg(format!("--value_size={VALUE_BYTES}"))
        .arg("--threads=1")
        .output();
    bar.finish_and_clear();
    let out = out.map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            missing(&format!("{DB_BENCH} (package rocksdb-tools)"))
        } else {
            e
        }
    })?;
    check_status("db_bench fillseq", &out)?;
    std::fs::write(&marker, format!("{dbs} {keys}\n"))?;
    Ok(db)
}

/// [`ensure_dbs`] for at least `dbs` databases of `keys` keys, for readers of one
/// database each: a complete set of more databases of that size made before
/// (`db-bench-<m>x<keys>`, the fewest such `m`, `dbs` itself first) serves, so that a
/// shape of tenants reuses the databases another shape made rather than writing them
/// again (the 6 GB databases take minutes each). Returns each database's `--db`,
/// as db_bench names them (`<db>/0`, `<db>/1`, ...; a set of one is `<db>` itself).
fn ensure_dbs_at_least(env: &Env, dbs: u64, keys: u64) -> io::Result<Vec<PathBuf>> {
    let suffix = format!("x{keys}");
    let larger = std::fs::read_dir(&env.dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let m: u64 = name
                .strip_prefix("db-bench-")?
                .strip_suffix(&suffix)?
                .parse()
                .ok()?;
            let parent = env.dir.join(&name);
            (m >= dbs && parent.join("complete").is_file() && parent.join("db").is_dir())
                .then_some((m, parent.join("db")))
        })
        .min();
    let (made, db) = match larger {
        Some(set) => set,
        None => (dbs, ensure_dbs(env, dbs, keys)?),
    };
    Ok(match made {
        1 => vec![db],
        _ => (0..made).map(|j| db.join(j.to_string())).collect(),
    })
}

/// The table files (`*.sst`, what readseq reads) under `dir`.
fn table_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                todo.push(entry.path());
            } else if kind.is_file() && entry.path().extension().is_some_and(|e| e == "sst") {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(io::Error::other(format!(
            "db-bench: no table files (*.sst) under {}",
            dir.display()
        )));
    }
    Ok(files)
}

/// Runs one db_bench (in `group`, which `cmd` enters, if any) and turns its output into a
/// run.
fn run_db_bench(
    cmd: &mut Command,
    system: System,
    group: Option<&kernel::Cgroup>,
) -> io::Result<RunResult> {
    let out = cmd
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("{:?}: {e}", cmd.get_program())))?;
    check_status(
        &format!("db_bench readseq ({system}){}", Confinement::failure(group)),
        &out,
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    parse(&stdout).ok_or_else(|| {
        io::Error::other(format!(
            "db_bench readseq ({system}): no `readseq :` line or no percentiles in its \
             output:\n{}",
            tail(&stdout, 30)
        ))
    })
}

/// db_bench's figures: what it is, parsed from its stdout.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Parsed {
    pub ops_per_sec: f64,
    pub operations: u64,
    pub p50_us: f64,
    pub p75_us: f64,
    pub p99_us: f64,
}

/// Parses `readseq : X micros/op Y ops/sec Z seconds N operations; ...` and the first
/// `Percentiles: P50: a P75: b P99: c ...` after it.
pub fn parse_output(stdout: &str) -> Option<Parsed> {
    parse_benchmark_output(stdout, "readseq")
}

/// [`parse_output`] of the line of `benchmark` (`readseq`, `readrandom`).
pub fn parse_benchmark_output(stdout: &str, benchmark: &str) -> Option<Parsed> {
    let mut lines = stdout
        .lines()
        .skip_while(|l| l.split_whitespace().next().is_none_or(|w| w != benchmark));
    let line = lines.next()?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let before = |unit: &str| -> Option<f64> {
        let i = words.iter().position(|w| w.trim_end_matches(';') == unit)?;
        words.get(i.checked_sub(1)?)?.parse().ok()
    };
    let ops_per_sec = before("ops/sec")?;
    let operations = before("operations")? as u64;
    let pct = lines.find_map(|l| l.trim_start().strip_prefix("Percentiles:"))?;
    let words: Vec<&str> = pct.split_whitespace().collect();
    let at = |key: &str| -> Option<f64> {
        let i = words.iter().position(|w| *w == key)?;
        words.get(i + 1)?.parse().ok()
    };
    Some(Parsed {
        ops_per_sec,
        operations,
        p50_us: at("P50:")?,
        p75_us: at("P75:")?,
        p99_us: at("P99:")?,
    })
}

fn parse(stdout: &str) -> Option<RunResult> {
    Some(run_result(&parse_output(stdout)?, serde_json::Map::new()))
}

/// A run from db_bench's own figures, with `extra` beside its P75 and ops/sec.
pub fn run_result(p: &Parsed, extra: serde_json::Map<String, serde_json::Value>) -> RunResult {
    run_result_of(p, VALUE_BYTES, extra)
}

/// [`run_result`] for values of `value_bytes`.
pub fn run_result_of(
    p: &Parsed,
    value_bytes: u64,
    mut extra: serde_json::Map<String, serde_json::Value>,
) -> RunResult {
    let bytes = p.operations * value_bytes;
    extra.insert("p75_us".into(), json!(p.p75_us));
    extra.insert("db_bench_ops_per_sec".into(), json!(p.ops_per_sec));
    extra.insert("operations".into(), json!(p.operations));
    RunResult {
        ops: p.operations,
        bytes_read: bytes,
        bytes_verified: bytes,
        // db_bench's ops/sec is operations over its elapsed time: keep it exactly.
        elapsed_secs: p.operations as f64 / p.ops_per_sec.max(1e-9),
        bytes_secs: None,
        bytes_moved: None,
        p50_us: p.p50_us,
        p99_us: p.p99_us,
        pages_inserted: None,
        extra,
        ..RunResult::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_domain_is_read_from_the_stats_line() {
        let line = |name: &str| {
            format!("folio: stats: hits=1\nfolio: domain: name={name} hits=3 misses=4\n")
        };
        assert_eq!(
            plugin_domain_of(&line("folio-1000-user")),
            Some("folio-1000-user")
        );
        assert_eq!(plugin_domain_of(&line("none")), None, "a private cache");
        assert_eq!(plugin_domain_of(&line("../x")), None, "never a path");
        assert_eq!(plugin_domain_of("folio: stats: hits=1\n"), None);
        // Forgetting a domain that is not there (or none) is nothing to do.
        let dir = tempfile::tempdir().unwrap();
        forget_plugin_domain(dir.path(), &line("folio-bench-absent")).unwrap();
        forget_plugin_domain(dir.path(), &line("none")).unwrap();
    }

    #[test]
    fn the_uri_leaves_the_plugin_at_its_defaults_unless_asked() {
        use folio::ArenaPages;
        assert_eq!(
            fs_uri(ArenaPages::Auto, FolioCapacity::PluginDefault),
            "folio://"
        );
        assert_eq!(
            fs_uri(ArenaPages::Small, FolioCapacity::PluginDefault),
            "folio://?arena_pages=small"
        );
        assert_eq!(
            fs_uri(ArenaPages::Huge, FolioCapacity::Mib(512)),
            "folio://?capacity=512M&arena_pages=huge"
        );
        let args = Args {
            folio_capacity_mib: Some(0),
            ..Args::default()
        };
        assert_eq!(
            FolioCapacity::of(&args),
            FolioCapacity::Mib(1),
            "at least the library's minimum"
        );
        assert_eq!(
            FolioCapacity::of(&Args::default()).param(),
            json!("plugin default")
        );
        let confined = Args {
            cgroup_max_mib: Some(2048),
            ..Args::default()
        };
        assert_eq!(Confinement::of(&confined).limit_bytes, Some(2 << 30));
        assert_eq!(Confinement::of(&Args::default()).limit_bytes, None);
    }

    #[test]
    fn a_set_of_databases_made_before_serves_as_few_or_more_readers() {
        let dir = tempfile::tempdir().unwrap();
        let env = Env::new(
            dir.path().to_path_buf(),
            1,
            crate::workloads::Scale::Quick,
            kernel::WarmMethod::Read,
            folio::BackendKind::Pread,
        );
        // Sets as ensure_dbs leaves them: one database of 5 keys (db_bench writes a set of
        // one in `<db>` itself), and four (`<db>/0` .. `<db>/3`); an incomplete set of two.
        for (dbs, complete) in [(1, true), (4, true), (2, false)] {
            let parent = dir.path().join(format!("db-bench-{dbs}x5"));
            std::fs::create_dir_all(parent.join("db")).unwrap();
            if complete {
                std::fs::write(parent.join("complete"), "").unwrap();
            }
        }
        let db = |set: &str| dir.path().join(set).join("db");
        assert_eq!(
            ensure_dbs_at_least(&env, 1, 5).unwrap(),
            vec![db("db-bench-1x5")]
        );
        // Two readers: the complete set of four, each its own database.
        let four = ensure_dbs_at_least(&env, 2, 5).unwrap();
        let expected: Vec<PathBuf> = (0..4)
            .map(|j| db("db-bench-4x5").join(j.to_string()))
            .collect();
        assert_eq!(four, expected);
        assert_eq!(ensure_dbs_at_least(&env, 4, 5).unwrap(), expected);
    }

    #[test]
    fn the_plugin_stats_say_its_capacity() {
        let mut extra = serde_json::Map::new();
        record_folio_capacity(
            "folio: stats: hits=1 capacity_bytes=268435456 capacity_max_bytes=1073741824 \
             cached_bytes=4096\n",
            &mut extra,
        );
        assert_eq!(extra["folio_capacity_mib"], json!(256.0));
        assert_eq!(extra["folio_capacity_max_mib"], json!(1024.0));
        assert!(!extra.contains_key("folio_resident_mib"));
    }

    #[test]
    fn parses_db_bench_output() {
        let out = "\
DB path: [/x/db]
readseq      :       1.662 micros/op 2405977 ops/sec 0.017 seconds 40000 operations; 18852.6 MB/s
Microseconds per read:
Count: 40000 Average: 1.6620  StdDev: 12.31
Min: 0  Median: 0.5341  Max: 2271
Percentiles: P50: 0.53 P75: 0.80 P99: 17.42 P99.9: 98.41 P99.99: 311.65
------------------------------------------------------
";
        let p = parse_output(out).expect("parsed");
        assert_eq!(p.operations, 40000);
        assert_eq!(p.ops_per_sec, 2405977.0);
        assert_eq!((p.p50_us, p.p75_us, p.p99_us), (0.53, 0.80, 17.42));
        let r = parse(out).expect("a run");
        assert!((r.ops_per_sec() - 2405977.0).abs() < 1.0);
        assert!(parse_output("readseq : nothing").is_none());
    }
}
