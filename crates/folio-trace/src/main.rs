//! `folio-trace`: generate synthetic traces and replay traces through folio's eviction
//! policies. See the library's docs for the trace format and what is counted.

#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Parser, Subcommand, ValueEnum};

use folio_trace::generate::{self, ScanMixParams, ZipfParams};
use folio_trace::replay::{Policy, Replayer, RunResult, CACHE_PAGES_MIN};
use folio_trace::report::{Report, TraceSummary};
use folio_trace::trace::{self, Access};

#[derive(Parser, Debug)]
#[command(
    name = "folio-trace",
    about = "Replay page-access traces through folio's eviction policies",
    long_about = "Replay page-access traces through folio's eviction policies.\n\n\
        A trace is a CSV file of `file_id,page_index` lines (an optional header line \
        `file_id,page_index` first): each line is one 4 KiB read of page `page_index` of \
        file `file_id`, both unsigned integers below 2^32."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write a synthetic trace.
    #[command(subcommand)]
    Gen(Gen),
    /// Feed a trace through a fresh cache per policy and size; print the miss ratios.
    Replay(ReplayArgs),
}

#[derive(Subcommand, Debug)]
enum Gen {
    /// Zipf(alpha) popularity over `pages` pages, ranks placed at random pages.
    Zipf(ZipfArgs),
    /// A Zipf hot set (file 0) interleaved with long one-pass sequential scans of cold
    /// pages (file 1): LRU loses its hot set to each scan, a scan-resistant policy does not.
    ScanMix(ScanMixArgs),
}

#[derive(Args, Debug)]
struct ZipfArgs {
    /// Zipf exponent: rank k is drawn with probability proportional to 1/(k+1)^alpha.
    #[arg(long, default_value_t = 0.9)]
    alpha: f64,
    #[arg(long, default_value_t = 1_000_000)]
    accesses: u64,
    /// Distinct pages (all files together).
    #[arg(long, default_value_t = 100_000)]
    pages: u32,
    /// Files the pages are spread over (page p is page p/files of file p%files).
    #[arg(long, default_value_t = 1)]
    files: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where to write the trace; `-` for standard output.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args, Debug)]
struct ScanMixArgs {
    #[arg(long, default_value_t = 1_000_000)]
    accesses: u64,
    /// Pages of the hot set (file 0).
    #[arg(long, default_value_t = 8_000)]
    hot_pages: u32,
    /// Zipf exponent of the hot set's popularity.
    #[arg(long, default_value_t = 0.8)]
    hot_alpha: f64,
    /// Cold pages (file 1) each scan reads, each once in the whole trace.
    #[arg(long, default_value_t = 30_000)]
    scan_pages: u32,
    /// Share of a scan's accesses that are its cold pages; the rest go to the hot set.
    #[arg(long, default_value_t = 0.5)]
    scan_fraction: f64,
    /// Hot-only accesses before each scan.
    #[arg(long, default_value_t = 40_000)]
    scan_gap: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where to write the trace; `-` for standard output.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PolicyArg {
    /// S3-FIFO.
    S3fifo,
    /// The kernel-like two-list LRU.
    Lru,
    /// Both, S3-FIFO first.
    Both,
}

impl PolicyArg {
    fn policies(self) -> &'static [Policy] {
        match self {
            PolicyArg::S3fifo => &[Policy::S3Fifo],
            PolicyArg::Lru => &[Policy::Lru],
            PolicyArg::Both => &Policy::ALL,
        }
    }
}

#[derive(Args, Debug)]
struct ReplayArgs {
    /// The trace file (CSV: file_id,page_index).
    #[arg(long)]
    trace: PathBuf,
    #[arg(long, value_enum, default_value_t = PolicyArg::Both)]
    policy: PolicyArg,
    /// Cache sizes in 4 KiB pages, comma-separated: one run per policy and size.
    #[arg(long, value_delimiter = ',', required = true)]
    cache_pages: Vec<u64>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Where to create the trace's sparse files (default: the system's temp directory).
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Gen(Gen::Zipf(args)) => gen_zipf(args),
        Command::Gen(Gen::ScanMix(args)) => gen_scan_mix(args),
        Command::Replay(args) => replay(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("folio-trace: {e}");
            ExitCode::FAILURE
        }
    }
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn gen_zipf(args: ZipfArgs) -> Result<()> {
    let params = ZipfParams {
        alpha: args.alpha,
        accesses: args.accesses,
        pages: args.pages,
        files: args.files,
        seed: args.seed,
    };
    write_trace(&args.out, generate::zipf(&params)?)
}

fn gen_scan_mix(args: ScanMixArgs) -> Result<()> {
    let params = ScanMixParams {
        accesses: args.accesses,
        hot_pages: args.hot_pages,
        hot_alpha: args.hot_alpha,
        scan_pages: args.scan_pages,
        scan_fraction: args.scan_fraction,
        scan_gap: args.scan_gap,
        seed: args.seed,
    };
    write_trace(&args.out, generate::scan_mix(&params)?)
}

fn write_trace(out: &Path, accesses: impl Iterator<Item = Access>) -> Result<()> {
    let clock = Instant::now();
    let written = if out == Path::new("-") {
        trace::write_csv(&mut BufWriter::new(io::stdout().lock()), accesses)?
    } else {
        let file = File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
        trace::write_csv(&mut BufWriter::with_capacity(1 << 20, file), accesses)?
    };
    eprintln!(
        "wrote {written} accesses to {} in {:.2} s",
        out.display(),
        clock.elapsed().as_secs_f64()
    );
    Ok(())
}

fn replay(args: ReplayArgs) -> Result<()> {
    if let Some(pages) = args.cache_pages.iter().find(|&&p| p < CACHE_PAGES_MIN) {
        return Err(
            format!("--cache-pages {pages} is below folio's minimum of {CACHE_PAGES_MIN}").into(),
        );
    }
    let clock = Instant::now();
    let trace = trace::read_csv_file(&args.trace)?;
    if trace.is_empty() {
        return Err(format!("{}: the trace has no accesses", args.trace.display()).into());
    }
    let replayer = Replayer::new(&trace, args.dir.as_deref())?;
    let summary = TraceSummary {
        path: args.trace.display().to_string(),
        accesses: trace.len() as u64,
        files: trace.files().len() as u64,
        distinct_pages: trace.distinct_pages() as u64,
    };
    drop(trace);
    eprintln!(
        "loaded {} accesses in {:.2} s; replaying",
        summary.accesses,
        clock.elapsed().as_secs_f64()
    );
    let mut runs: Vec<RunResult> = Vec::new();
    for &policy in args.policy.policies() {
        for &pages in &args.cache_pages {
            let run = replayer
                .run(policy, pages)
                .map_err(|e| format!("{} at {pages} pages: {e}", policy.name()))?;
            eprintln!(
                "{} {} pages: miss ratio {:.4} ({:.2} s)",
                policy.name(),
                pages,
                run.miss_ratio,
                run.seconds
            );
            runs.push(run);
        }
    }
    let report = Report {
        trace: summary,
        runs,
    };
    print!("{}", report.table());
    io::stdout().flush()?;
    if let Some(path) = &args.json {
        std::fs::write(path, report.json() + "\n")
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}
