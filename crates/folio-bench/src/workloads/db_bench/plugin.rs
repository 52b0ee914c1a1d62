//! The RocksDB plugin as `db-bench` uses it: built once per run (`build_plugin`, with
//! cmake, when db_bench and the RocksDB headers are installed), its `--fs_uri`
//! (`fs_uri`), and what a run of it leaves (`record_folio_capacity` from its stats,
//! `forget_plugin_segment`: the persistent segment of a finished run removed once its
//! keeper is done, so the next run starts cold).

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use super::{restart, write, FolioCapacity, DB_BENCH, PACKAGES};
use crate::workloads::Env;

/// The workspace's root (this crate is `crates/folio-bench`).
pub(super) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")))
}

/// An error naming the packages that provide what is missing.
pub(super) fn missing(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("db-bench needs {what}: {PACKAGES}"),
    )
}

pub(super) fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Builds the RocksDB plugin with cmake (as `plugins/rocksdb/ci.sh` does) and returns it,
/// with a note when the build failed and an existing plugin is used instead.
pub(super) fn build_plugin(env: &Env, root: &Path) -> io::Result<(PathBuf, Option<String>)> {
    if !Path::new(DB_BENCH).is_file() {
        return Err(missing(&format!("{DB_BENCH} (package rocksdb-tools)")));
    }
    if !Path::new("/usr/include/rocksdb/file_system.h").is_file() {
        return Err(missing("the RocksDB headers (package librocksdb-dev)"));
    }
    for program in ["cmake", "g++"] {
        if !on_path(program) {
            return Err(missing(&format!("{program} (package {program})")));
        }
    }
    let build = root.join("target/rocksdb-plugin");
    let bar = env.progress.add(indicatif::ProgressBar::new_spinner());
    bar.set_message("db-bench: building the RocksDB plugin (cmake)");
    bar.enable_steady_tick(std::time::Duration::from_millis(100));
    let configure = Command::new("cmake")
        .arg("-S")
        .arg(root.join("plugins/rocksdb"))
        .arg("-B")
        .arg(&build)
        .arg("-DCMAKE_BUILD_TYPE=Release")
        .output();
    let result = configure.and_then(|out| {
        check_status("cmake (configure the plugin)", &out)?;
        let out = Command::new("cmake")
            .arg("--build")
            .arg(&build)
            .arg("-j2")
            .output()?;
        check_status("cmake --build (the plugin)", &out)
    });
    bar.finish_and_clear();
    let plugin = build.join("libfolio_rocksdb.so");
    match result {
        Ok(()) if plugin.is_file() => Ok((plugin, None)),
        Ok(()) => Err(io::Error::other(format!(
            "the plugin build left no {}",
            plugin.display()
        ))),
        // A failed rebuild (say, of the workspace's folio-capi) leaves the last good
        // plugin: measure it, and say so in the report.
        Err(e) if plugin.is_file() => {
            let first = e
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .trim_end_matches(':')
                .to_string();
            eprintln!(
                "folio-bench: db-bench: warning: the plugin did not rebuild; using the existing \
                 {}:\n{e}",
                plugin.display()
            );
            let note = format!(
                "folio: the plugin did not rebuild ({first}; see stderr); measured the existing \
                 {}, which may be older than the workspace",
                plugin.display()
            );
            Ok((plugin, Some(note)))
        }
        Err(e) => Err(e),
    }
}

pub(super) fn check_status(what: &str, out: &std::process::Output) -> io::Result<()> {
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{what} failed ({}):\n{}{}",
        out.status,
        tail(&String::from_utf8_lossy(&out.stdout), 20),
        tail(&String::from_utf8_lossy(&out.stderr), 20)
    )))
}

pub(super) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let mut out = all[all.len().saturating_sub(lines)..].join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

/// The plugin's `--fs_uri`: the capacity only when `--folio-capacity-mib` gives one, and
/// `arena_pages` only when `--arena-pages` says other than the default (every other
/// option at the plugin's default).
pub(super) fn fs_uri(arena_pages: folio::ArenaPages, capacity: FolioCapacity) -> String {
    let mut options: Vec<String> = Vec::new();
    if let FolioCapacity::Mib(m) = capacity {
        options.push(format!("capacity={m}M"));
    }
    match arena_pages {
        folio::ArenaPages::Auto => {}
        folio::ArenaPages::Small => options.push("arena_pages=small".into()),
        folio::ArenaPages::Huge => options.push("arena_pages=huge".into()),
    }
    if options.is_empty() {
        "folio://".to_string()
    } else {
        format!("folio://?{}", options.join("&"))
    }
}

/// After a folio measurement that must leave nothing behind (a cold one): removes the
/// segment the plugin named after the database (its stats' `folio: adoption: segment=`
/// line), once the process's keeper is done with it, so that the next measurement starts
/// cold as the kernel's does after `drop_caches`, instead of adopting this one's pages (the
/// plugin's default, a warm restart, is what `db-bench restart` measures). Records in
/// `extra` the pages this measurement adopted (`folio_adopted_pages`: 0 for a cold one).
///
/// Errors: the segment's removal failing for another reason than its absence.
///
/// The domain the stats name (`folio: domain: name=`: the user's machine-wide one at the
/// plugin's defaults) goes too ([`forget_plugin_domain`]): it outlives the process (for
/// 10 minutes), and the next measurement would read this one's pages from it.
pub fn forget_plugin_segment(
    stats: &str,
    extra: &mut serde_json::Map<String, serde_json::Value>,
) -> io::Result<()> {
    let dir = std::env::var_os("FOLIO_SEGMENT_DIR").map_or_else(folio::segment_home, PathBuf::from);
    forget_plugin_domain(&dir, stats)?;
    let adoption = restart::adoption_of(stats);
    if let Some(kept) = adoption.get("pages_kept") {
        extra.insert("folio_adopted_pages".into(), kept.clone());
    }
    let Some(name) = adoption.get("segment").and_then(|v| v.as_str()) else {
        return Ok(());
    };
    if name == "none" || name.contains('/') || name.starts_with('.') {
        return Ok(());
    }
    let path = dir.join(name);
    let started = std::time::Instant::now();
    loop {
        match folio::remove_segment(&path) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Its keeper still writes back what the process left (a minute at most).
                if started.elapsed() > std::time::Duration::from_secs(60) {
                    return Err(e);
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            other => return other,
        }
    }
}

/// The capacity the plugin had at its exit, from its stats (`FOLIO_STATS`), in `extra`
/// as MiB: `folio_capacity_mib`, and where the stats have them `folio_capacity_max_mib`
/// and `folio_resident_mib`.
pub fn record_folio_capacity(stats: &str, extra: &mut serde_json::Map<String, serde_json::Value>) {
    for (key, name) in [
        ("capacity_bytes", "folio_capacity_mib"),
        ("capacity_max_bytes", "folio_capacity_max_mib"),
        ("resident_bytes", "folio_resident_mib"),
    ] {
        if let Some(bytes) = write::stat_of(stats, key) {
            extra.insert(name.into(), json!(bytes as f64 / (1u64 << 20) as f64));
        }
    }
}

/// The domain the plugin's stats name (`folio: domain: name=NAME ...`; `None` for
/// `name=none`, a private cache, for no such line, or for a name that is not one plain
/// file name).
pub fn plugin_domain_of(stats: &str) -> Option<&str> {
    let line = stats
        .lines()
        .find_map(|l| l.strip_prefix("folio: domain: name="))?;
    let name = line.split_whitespace().next()?;
    (name != "none" && !name.contains('/') && !name.starts_with('.')).then_some(name)
}

/// How long [`forget_plugin_domain`] waits for the domain's last processes and its
/// steward.
const DOMAIN_FORGET_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// After a cold folio measurement: removes the domain the plugin's stats name from `dir`
/// (its region, socket and election files: `folio::DomainFiles`), so that the next measurement starts
/// cold, and waits until its steward has left (it leaves when it finds its region's file
/// removed, within a tick of 2 s at most), so that the next process's attach starts a new
/// steward on a new domain rather than meeting the leaving one (which removes the socket
/// by its name as it goes). First waits, up to 30 s, until no process but the steward is
/// attached (the measurement's processes have exited, and the steward has seen it).
///
/// Errors: a process not this measurement's still attached after 30 s (another program
/// of the user sharing the domain: the measurement would not be cold, and removing the
/// domain under it is not ours to do; run with `FOLIO_SEGMENT_DIR` set to a directory of
/// the benchmark's own); the steward still running 30 s after the removal; a removal
/// failing for another reason than the file's absence.
pub fn forget_plugin_domain(dir: &Path, stats: &str) -> io::Result<()> {
    let Some(name) = plugin_domain_of(stats) else {
        return Ok(());
    };
    let files = folio::DomainFiles::of(name)?;
    if !dir.join(&files.region).exists() {
        return Ok(()); // gone already (its steward left after its linger), or never here
    }
    let started = std::time::Instant::now();
    let steward = loop {
        let view = match folio::DomainView::open(dir, name) {
            Ok(view) => view,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let seen = view.read();
        let others: Vec<u32> = seen
            .processes
            .iter()
            .filter(|p| p.running && p.pid != Some(seen.steward_pid))
            .filter_map(|p| p.pid)
            .collect();
        if others.is_empty() {
            break seen.steward_running.then_some(seen.steward_pid);
        }
        if started.elapsed() > DOMAIN_FORGET_WAIT {
            return Err(io::Error::other(format!(
                "the domain {name} in {} still has processes {others:?} attached after the \
                 measurement: another program shares it (the measurement was not cold); run \
                 with FOLIO_SEGMENT_DIR set to a directory of the benchmark's own",
                dir.display()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    for file in [&files.region, &files.socket, &files.election] {
        match std::fs::remove_file(dir.join(file)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    let Some(pid) = steward else {
        return Ok(());
    };
    let removed = std::time::Instant::now();
    while process_runs(pid) {
        if removed.elapsed() > DOMAIN_FORGET_WAIT {
            return Err(io::Error::other(format!(
                "the steward {pid} of the domain {name} still runs 30 s after its files were \
                 removed"
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

/// Whether `pid` runs (exists and is not a zombie: a steward that left waits for its
/// reaper, init, which may take a while).
fn process_runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}
