//! `folio-stat`: a persistent folio cache seen from outside, from its segment alone, as
//! `vmstat`, `cachestat` and `fincore` show the kernel's page cache: its capacity, its
//! cached, dirty and under-writeback pages, its hit ratio, its readahead waste and its
//! files by cached pages. A running cache (its owner publishes its counters in the
//! segment about once a second) or one that is gone (the last figures, published after
//! its final writeback). Also lists and removes segments.
//!
//! ```text
//! folio-stat [--dir DIR] NAME|PATH [--watch SECS [--count N]] [--top N] [--all]
//! folio-stat [--dir DIR] list
//! folio-stat [--dir DIR] remove NAME|PATH [--force]
//! folio-stat [--dir DIR] domain NAME
//! ```
//!
//! Everything it shows comes from `folio::SegmentView` (read-only, no lock taken: the
//! cache it looks at never waits for it) and `folio::segments_in`; removal is
//! `folio::remove_segment`, which refuses a segment in use. `domain` shows a domain
//! (issue 45: a cache shared by processes, `CacheBuilder::domain`) from its region,
//! `folio::DomainView`: its steward, its frames, those cached and its quota, and its processes
//! with their pins (loads only: no slot taken, no steward started).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use clap::{Parser, Subcommand};
use folio::{PublishedStats, SegmentHolder, SegmentInfo, SegmentState, SegmentView, Stats};

#[derive(Parser, Debug)]
#[command(
    name = "folio-stat",
    version,
    about = "Shows a persistent folio cache from its segment: capacity, pages, hit ratio, readahead waste, files"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The segment to show: a name in --dir, or a path (anything with a `/`).
    segment: Option<String>,
    /// Where segments are. Default: this user's private home, where a persistent cache
    /// puts its segment unless told otherwise (/dev/shm/folio-<uid>).
    #[arg(long, global = true)]
    dir: Option<PathBuf>,
    /// Shows the cache again every SECS seconds, like top, with the rates in between.
    #[arg(long, value_name = "SECS")]
    watch: Option<f64>,
    /// With --watch: stop after N refreshes (default: until interrupted).
    #[arg(long, value_name = "N", requires = "watch")]
    count: Option<u64>,
    /// Files shown, most cached first.
    #[arg(long, value_name = "N", default_value_t = 10)]
    top: usize,
    /// Every counter the owner published, by name (as `vmstat -s`).
    #[arg(long)]
    all: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Lists the segments in --dir: who holds each, its state and size.
    List,
    /// Removes a segment nobody holds (refused while its owner or keeper lives).
    Remove {
        /// A name in --dir, or a path.
        segment: String,
        /// Also a segment that may hold writes not on disk yet (its state is not
        /// "written": a killed keeper's); they are lost.
        #[arg(long)]
        force: bool,
    },
    /// Shows a domain (a cache shared by processes) in --dir: its steward, frames and
    /// processes with their pins.
    Domain {
        /// The domain's name (its files, named by their version: NAME.v12.domain,
        /// NAME.v12.steward, NAME.v12.sock).
        name: String,
    },
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    let which = match cli.dir {
        None => Dir::Home,
        Some(_) => Dir::Given,
    };
    let dir = cli.dir.get_or_insert_with(folio::segment_home).clone();
    let result = match (&cli.command, &cli.segment) {
        (Some(_), Some(segment)) => Err(Failure(format!(
            "a segment ({segment}) or a command, not both (folio-stat --help)"
        ))),
        (Some(Command::List), None) => list(&dir, which),
        (Some(Command::Remove { segment, force }), None) => {
            let removal = if *force {
                Removal::Forced
            } else {
                Removal::WrittenOnly
            };
            remove(&resolve(&dir, segment), removal)
        }
        (Some(Command::Domain { name }), None) => show_domain(&dir, name),
        (None, Some(segment)) => show(&cli, &resolve(&dir, segment)),
        (None, None) => Err(Failure(
            "a segment to show is needed (folio-stat NAME; folio-stat list shows them)".into(),
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(message)) => {
            eprintln!("folio-stat: {message}");
            ExitCode::FAILURE
        }
    }
}

/// What the user is told when the command fails.
struct Failure(String);

/// `folio-stat domain NAME`: the domain `name` in `dir`, from its region.
fn show_domain(dir: &Path, name: &str) -> Result<(), Failure> {
    let view = folio::DomainView::open(dir, name).map_err(|e| {
        Failure(match (e.kind(), folio::DomainFiles::of(name)) {
            (io::ErrorKind::NotFound, Ok(files)) => {
                // Before version 11 a domain's files were not named by their version: an
                // older library's domain may still be there (its steward lingers).
                let older = dir.join(format!("{name}.domain"));
                let older = if older.exists() {
                    format!(
                        "; {} is an older folio's, which this one does not read",
                        older.display()
                    )
                } else {
                    String::new()
                };
                format!(
                    "no domain {name} in {} (its memory file is {}){older}",
                    dir.display(),
                    files.region.to_string_lossy()
                )
            }
            _ => format!("domain {name} in {}: {e}", dir.display()),
        })
    })?;
    print!("{}", domain_text(name, &view.read()));
    Ok(())
}

/// The text `folio-stat domain` prints for `seen`.
fn domain_text(name: &str, seen: &folio::DomainSummary) -> String {
    let mut out = format!(
        "domain {name}: steward pid {} ({}), {} election(s)\n\
         frames: {} of 4 KiB ({} MiB), {} cached ({:.1} MiB); {} slots; {} file records\n",
        seen.steward_pid,
        if seen.steward_running {
            "running"
        } else {
            "not running: the next member starts one"
        },
        seen.elections,
        seen.frames,
        (u64::from(seen.frames) * 4096) >> 20,
        seen.frames_cached,
        f64::from(seen.frames_cached) * 4096.0 / 1048576.0,
        seen.slots,
        seen.file_records,
    );
    out += &format!(
        "quota: {} frames ({:.1} MiB) the cache may hold now, following the machine's \
         memory; {} refaults\n",
        seen.quota_frames,
        f64::from(seen.quota_frames) * 4096.0 / 1048576.0,
        seen.refaults,
    );
    out += "shares: each member's share is the quota times its weight over the members' \
            weights; its floor half of that\n";
    out += &format!("processes: {}\n", seen.processes.len());
    if !seen.processes.is_empty() {
        out += &format!(
            "{:>5} {:>10} {:>8} {:>6} {:>8} {:>6} {:>8} {:>8} {:>8}\n",
            "slot", "generation", "pid", "pins", "owned", "weight", "share", "floor", "state"
        );
    }
    for p in &seen.processes {
        let state = match (p.live, p.running) {
            (true, true) if p.pid == Some(seen.steward_pid) => "running (the steward)",
            (true, true) => "running",
            (true, false) => "gone (not swept yet)",
            (false, _) => "dead (being swept)",
        };
        out += &format!(
            "{:>5} {:>10} {:>8} {:>6} {:>8} {:>6} {:>8} {:>8} {state}\n",
            p.slot,
            p.generation,
            p.pid.map_or_else(|| "-".to_string(), |pid| pid.to_string()),
            p.pins,
            p.owned_frames,
            p.weight,
            p.share_frames,
            p.floor_frames,
        );
    }
    out
}

/// A name is in `dir`; anything with a `/` is a path.
fn resolve(dir: &Path, segment: &str) -> PathBuf {
    if segment.contains('/') {
        PathBuf::from(segment)
    } else {
        dir.join(segment)
    }
}

/// `error` about the segment at `path`, said for a person.
fn explain(path: &Path, error: &io::Error) -> Failure {
    let shown = path.display();
    Failure(match error.kind() {
        io::ErrorKind::NotFound => format!(
            "no segment {shown} (`folio-stat list` shows the segments in {})",
            path.parent()
                .map_or(".".into(), |p| p.display().to_string())
        ),
        io::ErrorKind::PermissionDenied => format!(
            "{error} (only the segment's own user may read it: it holds the bytes of their files)"
        ),
        io::ErrorKind::InvalidData if error.to_string().contains("layout") => {
            format!("{error} (a segment of another folio version needs that version's folio-stat)")
        }
        io::ErrorKind::InvalidData => error.to_string(),
        _ => format!("{shown}: {error}"),
    })
}

fn show(cli: &Cli, path: &Path) -> Result<(), Failure> {
    let view = SegmentView::open(path).map_err(|e| explain(path, &e))?;
    let Some(secs) = cli.watch else {
        let published = published(&view, path)?;
        print!("{}", render(&view, published.as_ref(), None, cli));
        return Ok(());
    };
    let period = Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| Failure(format!("--watch {secs}: a number of seconds above 0")))?;
    let mut last: Option<(PublishedStats, Instant)> = None;
    let mut shown = 0;
    loop {
        let published = published(&view, path)?;
        let rates = match (&last, &published) {
            (Some((before, at)), Some(now)) => {
                Some(Rates::between(&before.stats, &now.stats, at.elapsed()))
            }
            _ => None,
        };
        // Home and clear, as top does.
        print!(
            "\x1b[H\x1b[2J{}",
            render(&view, published.as_ref(), rates.as_ref(), cli)
        );
        let _ = io::stdout().flush();
        shown += 1;
        if cli.count.is_some_and(|n| shown >= n) {
            return Ok(());
        }
        last = published.map(|p| (p, Instant::now()));
        std::thread::sleep(period);
    }
}

fn published(view: &SegmentView, path: &Path) -> Result<Option<PublishedStats>, Failure> {
    view.stats().map_err(|e| explain(path, &e))
}

/// What moved per second between two refreshes of `--watch`.
struct Rates {
    hits: f64,
    misses: f64,
    read_mib: f64,
    written_mib: f64,
    writeback_mib: f64,
    evicted_pages: f64,
}

impl Rates {
    fn between(before: &Stats, now: &Stats, elapsed: Duration) -> Rates {
        let secs = elapsed.as_secs_f64().max(1e-3);
        let per_sec = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs;
        let mib = |n: f64| n / f64::from(1 << 20);
        Rates {
            hits: per_sec(before.hits, now.hits),
            misses: per_sec(before.misses, now.misses),
            read_mib: mib(per_sec(before.io_bytes, now.io_bytes)),
            written_mib: mib(per_sec(before.write_bytes, now.write_bytes)),
            writeback_mib: mib(per_sec(before.writeback_bytes, now.writeback_bytes)),
            evicted_pages: per_sec(before.evicted_pages, now.evicted_pages),
        }
    }
}

/// The report of one look at the segment.
fn render(
    view: &SegmentView,
    published: Option<&PublishedStats>,
    rates: Option<&Rates>,
    cli: &Cli,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "segment    {}: {}, {} (owner pid {}, keeper pid {})",
        view.path().display(),
        state_name(view.state()),
        holder_name(view.holder()),
        view.owner_pid(),
        view.keeper_pid()
    );
    match published {
        None => {
            let _ = writeln!(
                out,
                "counters   none published yet (the owner publishes them about once a second)"
            );
        }
        Some(p) => {
            let _ = writeln!(
                out,
                "published  {} by pid {} (publish {})",
                ago(p.published),
                p.publisher_pid,
                p.publishes
            );
            counters(&mut out, &p.stats, rates);
            if !p.missing.is_empty() {
                let _ = writeln!(
                    out,
                    "           (not published by that folio: {})",
                    p.missing.join(", ")
                );
            }
            if cli.all {
                let _ = writeln!(out);
                for (field, value) in p.stats.values() {
                    let _ = writeln!(out, "{value:>20} {}", field.name);
                }
                for (name, value) in &p.unknown {
                    let _ = writeln!(out, "{value:>20} {name}");
                }
            }
        }
    }
    let files = view.files();
    let _ = writeln!(
        out,
        "\nfiles      {} with pages cached (from the side table now; most cached first)",
        files.len()
    );
    let _ = writeln!(
        out,
        "{:>10} {:>10} {:>10} {:>12}  path",
        "cached", "dirty", "writeback", "size"
    );
    for file in files.iter().take(cli.top) {
        let path = file.path.as_ref().map_or_else(
            || format!("(file #{})", file.mapping_id),
            |p| p.display().to_string(),
        );
        let size = file.size_bytes.map_or_else(|| "-".to_string(), bytes);
        let _ = writeln!(
            out,
            "{:>10} {:>10} {:>10} {:>12}  {path}",
            file.cached_pages, file.dirty_pages, file.writeback_pages, size
        );
    }
    if files.len() > cli.top {
        let rest: u64 = files[cli.top..].iter().map(|f| f.cached_pages).sum();
        let _ = writeln!(
            out,
            "{rest:>10} pages in {} more files (--top N shows more)",
            files.len() - cli.top
        );
    }
    out
}

/// The counters' lines: what vmstat and cachestat would show.
fn counters(out: &mut String, s: &Stats, rates: Option<&Rates>) {
    use std::fmt::Write as _;
    let page = folio::PAGE_BYTES as u64;
    let _ = writeln!(
        out,
        "capacity   {} (max {}), resident {}, metadata {}; backend {}, eviction {}",
        bytes(s.capacity_bytes),
        bytes(s.capacity_max_bytes),
        bytes(s.resident_bytes),
        bytes(s.metadata_bytes),
        or_dash(&s.backend),
        or_dash(&s.eviction)
    );
    let _ = writeln!(
        out,
        "pages      cached {} ({}), dirty {}, writeback {}; files {}",
        s.cached_bytes / page,
        bytes(s.cached_bytes),
        s.dirty_pages,
        s.writeback_pages,
        s.mappings
    );
    let _ = writeln!(
        out,
        "reads      hits {}, misses {}, hit ratio {}; waits on I/O {}; read {} in {} requests",
        s.hits,
        s.misses,
        percent(s.hits, s.hits + s.misses),
        s.waits_on_io,
        bytes(s.io_bytes),
        s.io_requests
    );
    let _ = writeln!(
        out,
        "readahead  {} pages read ahead, {} evicted unread: {} wasted",
        s.readahead_pages,
        s.readahead_wasted_pages,
        percent(s.readahead_wasted_pages, s.readahead_pages)
    );
    let _ = writeln!(
        out,
        "evicted    {} pages ({} refaults, {} in the workingset); invalidated {}",
        s.evicted_pages, s.refaults, s.workingset_refaults, s.invalidated_pages
    );
    let _ = writeln!(
        out,
        "writes     {} in {} calls; written back {} pages ({}), {} errors; throttled {}",
        bytes(s.write_bytes),
        s.write_requests,
        s.pages_written_back,
        bytes(s.writeback_bytes),
        s.writeback_errors,
        s.throttled_writers
    );
    if let Some(r) = rates {
        let _ = writeln!(
            out,
            "per second hits {:.0}, misses {:.0}, read {:.1} MiB, written {:.1} MiB, written back {:.1} MiB, evicted {:.0} pages",
            r.hits, r.misses, r.read_mib, r.written_mib, r.writeback_mib, r.evicted_pages
        );
    }
}

/// Which directory `list` reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// The default home, which no cache may have made yet (then there are no segments).
    Home,
    /// The one `--dir` names: it must exist.
    Given,
}

/// Lists the segments in `dir`.
fn list(dir: &Path, which: Dir) -> Result<(), Failure> {
    let segments = match folio::segments_in(dir) {
        Err(e) if which == Dir::Home && e.kind() == io::ErrorKind::NotFound => Vec::new(),
        other => other.map_err(|e| Failure(format!("{}: {e}", dir.display())))?,
    };
    if segments.is_empty() {
        println!("no folio segments of yours in {}", dir.display());
        return Ok(());
    }
    println!(
        "{:<32} {:<8} {:<9} {:>10} {:>10} {:>9} {:>8} {:>8}  modified",
        "segment", "holder", "state", "size", "resident", "pages", "owner", "keeper"
    );
    for info in &segments {
        println!("{}", list_line(info));
    }
    Ok(())
}

fn list_line(info: &SegmentInfo) -> String {
    let name = info.path.file_name().map_or_else(
        || info.path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let state = match &info.unreadable {
        Some(_) => "unknown".to_string(),
        None => state_name(info.state).to_string(),
    };
    // Pages cached in it (what an adoption could keep at most): its side table's walk.
    let pages = SegmentView::open(&info.path).map_or_else(
        |_| "-".to_string(),
        |view| {
            view.files()
                .iter()
                .map(|f| f.cached_pages)
                .sum::<u64>()
                .to_string()
        },
    );
    let mut line = format!(
        "{name:<32} {:<8} {state:<9} {:>10} {:>10} {pages:>9} {:>8} {:>8}  {}",
        holder_word(info.holder),
        bytes(info.size_bytes),
        bytes(info.resident_bytes),
        info.owner_pid,
        info.keeper_pid,
        info.modified.map_or_else(|| "-".to_string(), ago)
    );
    if let Some(why) = &info.unreadable {
        line.push_str(&format!("\n{:<32} ({why})", ""));
    }
    line
}

/// Whether `remove` removes a segment that may hold writes not on disk yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Removal {
    /// Only a segment whose state says everything it held is on disk.
    WrittenOnly,
    /// Whatever its state (`--force`).
    Forced,
}

fn remove(path: &Path, removal: Removal) -> Result<(), Failure> {
    if removal == Removal::WrittenOnly {
        // A segment this build cannot view (another layout) is removed as it is: nothing
        // here could write it back anyway.
        match SegmentView::open(path) {
            Ok(view) => {
                let state = view.state();
                if state != Some(SegmentState::Written) && view.holder() == SegmentHolder::Nobody {
                    return Err(Failure(format!(
                        "{} is {}: it may hold writes not on disk yet. folio::recover_segment \
                         (or the next persistent cache built in its directory) writes them back; \
                         --force removes it anyway, losing them",
                        path.display(),
                        state_name(state)
                    )));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {}
            Err(e) => return Err(explain(path, &e)),
        }
    }
    folio::remove_segment(path).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock => Failure(format!(
            "{e} (a live cache's segment goes when the cache is dropped; a keeper's when its writeback is done)"
        )),
        _ => explain(path, &e),
    })?;
    println!("removed {}", path.display());
    Ok(())
}

fn state_name(state: Option<SegmentState>) -> &'static str {
    match state {
        Some(SegmentState::Live) => "live",
        Some(SegmentState::Orphaned) => "orphaned",
        Some(SegmentState::Written) => "written",
        _ => "of an unknown state",
    }
}

fn holder_name(holder: SegmentHolder) -> &'static str {
    match holder {
        SegmentHolder::Owner => "its owner holds it",
        SegmentHolder::Keeper => "its keeper holds it (writing back a dead owner's pages)",
        SegmentHolder::Nobody => "nobody holds it",
        SegmentHolder::Steward => {
            "its steward holds it (the owner's keeper, giving its pages back under memory pressure)"
        }
    }
}

fn holder_word(holder: SegmentHolder) -> &'static str {
    match holder {
        SegmentHolder::Owner => "owner",
        SegmentHolder::Keeper => "keeper",
        SegmentHolder::Nobody => "nobody",
        SegmentHolder::Steward => "steward",
    }
}

fn or_dash(name: &str) -> &str {
    if name.is_empty() {
        "-"
    } else {
        name
    }
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_string()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// `n` bytes in the largest binary unit that keeps a figure before the point.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// How long ago `at` was, roughly.
fn ago(at: SystemTime) -> String {
    match SystemTime::now().duration_since(at) {
        Ok(d) if d.as_secs() < 120 => format!("{:.1} s ago", d.as_secs_f64()),
        Ok(d) if d.as_secs() < 7200 => format!("{} min ago", d.as_secs() / 60),
        Ok(d) if d.as_secs() < 172_800 => format!("{} h ago", d.as_secs() / 3600),
        Ok(d) => format!("{} days ago", d.as_secs() / 86_400),
        Err(_) => "just now".to_string(),
    }
}
