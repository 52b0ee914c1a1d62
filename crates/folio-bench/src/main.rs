//! folio-bench: the seed workloads of DESIGN.md §7, each measured side by side with the
//! kernel's page cache in the same run, beside the machine's limits.
//!
//! ```text
//! cargo run --release -p folio-bench -- <workload> [--quick] [--runs N] [--threads 1,2,32]
//!     [--dir DIR] [--json PATH] [--plot PATH.svg] [--warm read|vmtouch] [--backend auto|io-uring|pread]
//!     [--persistent]
//! workloads: pread-scale, readseq [--shared], randread, readahead-storm, writeseq,
//!     randwrite, randrw, limits, db-bench, scale, scan-mix, pressure, keeper, restart, compare; and soak
//!     [--seconds N] (faults injected, every byte and fault accounted)
//! ```
//!
//! Modules: `data` (self-checking data files), `stamped` (the self-checking blocks the
//! write workloads write), `kernel` (the kernel side: cold/warm,
//! mincore, cgroup, raw calls), `measure` (threads, clock, histograms, medians),
//! `workloads/*` (one module per workload), `report` (table, JSON, chart), `soak` (the
//! reliability soak, which compares nothing and so is not a workload). Run
//! `folio-bench <workload> --help` for each workload's options and defaults.

mod data;
mod kernel;
mod mapped;
mod measure;
mod report;
mod soak;
mod stamped;
mod workloads;

use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Parser, Subcommand};
use serde_json::json;

use kernel::WarmMethod;
use workloads::{
    compare, db_bench, keeper, limits, miss_cost, pread_scale, pressure, randread, randrw,
    randwrite, readahead_storm, readseq, restart, rw, scale, scan_mix, writeseq, Env, Report,
    Scale, Workload,
};

/// How folio's caches get their memory in every workload: the library's default
/// (`Prefault::Lazy`), which `Env::folio_cache` leaves alone.
const FOLIO_ARENA: &str =
    "lazy (the library's default), populated ahead of the allocator in the background";

#[derive(Parser, Debug)]
#[command(
    name = "folio-bench",
    version,
    about = "folio's seed workloads, side by side with the kernel page cache"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options every workload takes.
#[derive(clap::Args, Debug, Clone)]
struct Common {
    /// Directory for the data files (kept and reused); default: a fresh temporary
    /// directory on a disk file system (not tmpfs), removed at exit
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Repetitions of each measurement; the median is reported [default: 3; keeper 5; restart 1; db-bench restart 2]
    #[arg(long)]
    runs: Option<usize>,
    /// Smaller sizes and durations (`compare --quick` about 2 min on the reference machine)
    #[arg(long)]
    quick: bool,
    /// Write the results as JSON to PATH
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Draw throughput per system and thread count as an SVG chart at PATH
    #[arg(long, value_name = "PATH.svg")]
    plot: Option<PathBuf>,
    /// How a warm kernel file is kept warm for its measurement
    #[arg(long, value_enum, default_value_t = WarmMethod::Read)]
    warm: WarmMethod,
    /// folio's I/O backend
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
    /// Which pages folio's caches (and the plugin's) get their memory in; the default is
    /// the library's (auto: huge pages for readahead's large folios, 4 KiB for small ones)
    #[arg(long, value_enum, default_value_t = Pages::Auto)]
    arena_pages: Pages,
    /// folio's maximum readahead window in KiB; the default is the library's
    /// (folio::READAHEAD_MAX_BYTES_DEFAULT)
    #[arg(long, value_name = "KIB", default_value_t = folio::READAHEAD_MAX_BYTES_DEFAULT >> 10)]
    readahead_kib: u64,
    /// MiB of the file and of the buffer on which the limits that every report carries
    /// are measured [default: 512 and 1024; --quick 128 and 256]
    #[arg(long, value_name = "MIB")]
    limits_mib: Option<u64>,
    /// Puts the arena of every folio cache the workload builds (the pressure reader's
    /// too) in a shared-memory segment in /dev/shm, with a keeper process that writes back
    /// the dirty pages of an owner that dies (`CacheBuilder::persistent`); default: off,
    /// the library's default. db-bench refuses it: the plugin has no such option yet
    #[arg(long)]
    persistent: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum Backend {
    Auto,
    IoUring,
    Pread,
}

impl From<folio::BackendKind> for Backend {
    fn from(b: folio::BackendKind) -> Backend {
        match b {
            folio::BackendKind::Auto => Backend::Auto,
            folio::BackendKind::IoUring => Backend::IoUring,
            folio::BackendKind::Pread => Backend::Pread,
        }
    }
}

impl From<Backend> for folio::BackendKind {
    fn from(b: Backend) -> folio::BackendKind {
        match b {
            Backend::Auto => folio::BackendKind::Auto,
            Backend::IoUring => folio::BackendKind::IoUring,
            Backend::Pread => folio::BackendKind::Pread,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Pages {
    Auto,
    Small,
    Huge,
}

impl From<folio::ArenaPages> for Pages {
    fn from(p: folio::ArenaPages) -> Pages {
        match p {
            folio::ArenaPages::Auto => Pages::Auto,
            folio::ArenaPages::Small => Pages::Small,
            folio::ArenaPages::Huge => Pages::Huge,
        }
    }
}

impl From<Pages> for folio::ArenaPages {
    fn from(p: Pages) -> folio::ArenaPages {
        match p {
            Pages::Auto => folio::ArenaPages::Auto,
            Pages::Small => folio::ArenaPages::Small,
            Pages::Huge => folio::ArenaPages::Huge,
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// N threads read 64 B at offset 0 of one cached file (seed 004)
    PreadScale {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: pread_scale::Args,
    },
    /// N threads scan files in 8 KiB records from a cold cache (seeds 000, 002)
    Readseq {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: readseq::Args,
    },
    /// J jobs of random 4 KiB reads over a file twice the cache size (seed 003)
    Randread {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: randread::Args,
    },
    /// N threads call readahead on the same ranges of one file (seed 002)
    ReadaheadStorm {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: readahead_storm::Args,
    },
    /// One thread appends 8 KiB records to a new file, syncing every 1 MiB (issue 14)
    Writeseq {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: writeseq::Args,
    },
    /// J jobs overwrite random 4 KiB blocks of a cached file, syncing every 1,000 writes
    /// per job, at equal memory; and write amplification into 2 MiB folios (issue 14)
    Randwrite {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: randwrite::Args,
    },
    /// J jobs of random 4 KiB reads (70%) and writes over a file twice the cache, at equal
    /// memory (issue 14)
    Randrw {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: randrw::Args,
    },
    /// Memory-copy and O_DIRECT (queue depth 32) bandwidth: the ceilings of a hit and a miss
    Limits {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: limits::Args,
    },
    /// The unmodified RocksDB db_bench (readseq, readrandom, multireadrandom, fillseq,
    /// fillrandom, overwrite, readwhilewriting), cold, as kernel, direct and folio (plugin)
    DbBench {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: db_bench::Args,
    },
    /// Zipf point reads beside a recurring one-time scan, the scan with and without
    /// Advice::NoReuse, over a cache a tenth of the data (issue 17; not in compare)
    ScanMix {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: scan_mix::Args,
    },
    /// Per-read cost of 4 KiB hits against open files, cache size and threads, beside the
    /// kernel and memcpy at the same spots (issue 13; not in compare)
    Scale {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: scale::Args,
    },
    /// What one miss and one 64 B hit cost the CPU (time, context switches, instructions
    /// under callgrind), beside direct reads and the kernel (issue 33; not in compare)
    MissCost {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: miss_cost::Args,
    },
    /// A cache holding a data set while another process allocates most of the memory:
    /// folio (following the machine) gives memory back and grows again, beside the
    /// kernel (issue 30; not in compare)
    Pressure {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: pressure::Args,
    },
    /// The time from a persistent cache's owner's death (SIGKILL) to its dirty data
    /// durable, written back by its keeper, beside the kernel's fsync of the same dirty
    /// data (issue 31; not in compare)
    Keeper {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: keeper::Args,
    },
    /// The first seconds of random 4 KiB reads after a process restart (clean exit and
    /// SIGKILL), against the warm rate before it, beside the kernel's restart and a cold
    /// start; folio adopting its persistent segment (issue 32; not in compare)
    Restart {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: restart::Args,
    },
    /// All of the above but db-bench, scale, scan-mix, miss-cost, pressure, keeper and restart, one after another
    /// (about 7 min; --quick about 2)
    Compare {
        #[command(flatten)]
        common: Common,
    },
    /// Readers, readahead, advice, eviction and injected faults at once on a small cache,
    /// every byte checked; ends with the account of bytes and faults (exit 1 on a failure)
    Soak(soak::Args),
    /// The kernel side of randread, run by randread itself inside a memory cgroup
    #[command(hide = true)]
    KernelRandread(randread::ChildArgs),
    /// The kernel side of randwrite and randrw, run by them inside a memory cgroup
    #[command(hide = true)]
    KernelRw(rw::ChildArgs),
    /// The reader of `pressure` (folio or the kernel), run by pressure itself
    #[command(hide = true)]
    PressureReader(pressure::ReaderArgs),
    /// The allocating process of `pressure`, run by pressure itself
    #[command(hide = true)]
    PressureAlloc(pressure::AllocArgs),
    /// The owner of `keeper`'s persistent cache, run (and killed) by keeper itself
    #[command(hide = true)]
    KeeperOwner(keeper::OwnerArgs),
    /// A reader of `restart` (folio or the kernel), run (and killed) by restart itself
    #[command(hide = true)]
    RestartReader(restart::ReaderArgs),
    /// One round of `miss-cost` for one system, run by miss-cost itself under callgrind
    #[command(hide = true)]
    MissCostProbe(miss_cost::ProbeArgs),
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("folio-bench: error: {e}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> io::Result<()> {
    let (common, workload): (Common, Option<Box<dyn Workload>>) = match cli.command {
        Command::KernelRandread(args) => return randread::child_main(&args),
        Command::KernelRw(args) => return rw::child_main(&args),
        Command::PressureReader(args) => return pressure::reader_main(&args),
        Command::PressureAlloc(args) => return pressure::alloc_main(&args),
        Command::KeeperOwner(args) => return keeper::owner_main(&args),
        Command::RestartReader(args) => return restart::reader_main(&args),
        Command::MissCostProbe(args) => return miss_cost::probe_main(&args),
        Command::Soak(args) => {
            if !soak::run(&args)? {
                std::process::exit(1);
            }
            return Ok(());
        }
        Command::PreadScale { common, args } => (common, Some(Box::new(args))),
        Command::Readseq { common, args } => (common, Some(Box::new(args))),
        Command::Randread { common, args } => (common, Some(Box::new(args))),
        Command::ReadaheadStorm { common, args } => (common, Some(Box::new(args))),
        Command::Writeseq { common, args } => (common, Some(Box::new(args))),
        Command::Randwrite { common, args } => (common, Some(Box::new(args))),
        Command::Randrw { common, args } => (common, Some(Box::new(args))),
        Command::Limits { common, args } => (common, Some(Box::new(args))),
        Command::DbBench { common, args } => (common, Some(Box::new(args))),
        Command::Scale { common, args } => (common, Some(Box::new(args))),
        Command::MissCost { common, args } => (common, Some(Box::new(args))),
        Command::ScanMix { common, args } => (common, Some(Box::new(args))),
        Command::Pressure { common, args } => (common, Some(Box::new(args))),
        Command::Keeper { common, args } => (common, Some(Box::new(args))),
        Command::Restart { common, args } => (common, Some(Box::new(args))),
        Command::Compare { common } => (common, None),
    };
    let started = Instant::now();
    let date = date_utc();
    let (dir, _temp) = data_dir(common.dir.as_deref())?;
    let runs = common.runs.unwrap_or_else(|| {
        workload
            .as_ref()
            .map_or(workloads::RUNS_DEFAULT, |w| w.runs_default())
    });
    let mut env = Env::new(
        dir.clone(),
        runs,
        if common.quick {
            Scale::Quick
        } else {
            Scale::Full
        },
        common.warm,
        common.backend.into(),
    );
    env.readahead_max_bytes = common.readahead_kib << 10;
    env.arena_pages = common.arena_pages.into();
    env.persistent = common.persistent;
    if let Some(n) = common.limits_mib {
        env.limits_args.file_mib = Some(n);
        env.limits_args.memcpy_mib = Some(n);
    }
    let machine = machine(&env)?;
    let load = load_average();
    println!("folio-bench: {machine}; load average at start {load}");
    println!(
        "data in {} ({}); kernel cold: {}; kernel warm: {}",
        dir.display(),
        if kernel::is_tmpfs(&dir) {
            "tmpfs: O_DIRECT and the page cache comparison mean little here"
        } else {
            "disk file system"
        },
        env.cold.describe(),
        env.warm.describe()
    );
    println!(
        "folio arena: {FOLIO_ARENA}, {:?} pages, {} (readseq's folio-prefault row: prefaulted at build)",
        env.arena_pages,
        arena_home(&env)
    );
    let reports: Vec<Report> = match &workload {
        Some(w) => vec![w.run(&env)?],
        None => compare::run(&env)?,
    };
    for r in &reports {
        print!("{}", report::table(r));
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!("\nfolio-bench: done in {elapsed:.1} s");
    let run_facts = json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "date_utc_at_start": date,
        "machine": machine,
        "load_average_at_start": load,
        "load_average_at_end": load_average(),
        "elapsed_secs": elapsed,
        "cold_method": env.cold.describe(),
        "warm_method": env.warm.describe(),
        "folio_readahead_max_bytes": env.readahead_max_bytes,
        "folio_arena": FOLIO_ARENA,
        "folio_persistent": env.persistent,
    });
    if let Some(path) = &common.json {
        match workload {
            Some(_) => report::write_report_json(path, &reports[0], run_facts)?,
            None => report::write_comparison_json(path, &reports, run_facts)?,
        }
        println!("JSON written to {}", path.display());
    }
    if let Some(path) = &common.plot {
        report::plot(path, &reports)?;
        println!("chart written to {}", path.display());
    }
    Ok(())
}

/// The data directory: the user's (created if needed, kept), or a fresh temporary one on
/// a disk file system (the system's temp dir unless it is tmpfs, then /var/tmp), removed
/// when the returned guard drops.
fn data_dir(user: Option<&Path>) -> io::Result<(PathBuf, Option<tempfile::TempDir>)> {
    if let Some(dir) = user {
        std::fs::create_dir_all(dir)?;
        return Ok((dir.to_path_buf(), None));
    }
    let mut base = std::env::temp_dir();
    if kernel::is_tmpfs(&base) {
        base = PathBuf::from("/var/tmp");
    }
    let temp = tempfile::Builder::new()
        .prefix("folio-bench-")
        .tempdir_in(&base)?;
    Ok((temp.path().to_path_buf(), Some(temp)))
}

/// One line about the machine: kernel, CPUs, memory, folio's backend, the disk's readahead.
fn machine(env: &Env) -> io::Result<String> {
    let uname = std::process::Command::new("uname")
        .arg("-r")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0.0, |kb| kb as f64 / (1 << 20) as f64);
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    let backend = env.folio_cache(folio::CAPACITY_BYTES_MIN)?.stats().backend;
    Ok(format!(
        "Linux {uname}, {cpus} CPUs ({cpu_model}), {mem_gib:.1} GiB; folio backend {backend}"
    ))
}

/// Where folio's arena lives: private anonymous memory (the library's default), or a
/// segment in /dev/shm with a keeper (`--persistent`), with the page size shared memory
/// gets here (a segment has no transparent huge pages unless `shmem_enabled` allows them).
fn arena_home(env: &Env) -> String {
    if !env.persistent {
        return "private memory (not persistent: the library's default)".to_string();
    }
    let shmem = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .find(|w| w.starts_with('['))
                .map(|w| w.trim_matches(['[', ']']).to_string())
        })
        .unwrap_or_else(|| "unknown".to_string());
    format!("PERSISTENT: a segment in /dev/shm and a keeper process (shmem_enabled: {shmem})")
}

/// The 1, 5 and 15 minute load averages: other work on the machine skews every figure.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The current UTC date and time, ISO 8601 (no time-zone database needed).
fn date_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
