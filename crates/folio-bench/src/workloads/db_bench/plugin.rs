//! The RocksDB plugin as `db-bench` uses it: built once per run (`build_plugin`, with
//! cmake, when db_bench and the RocksDB headers are installed), its `--fs_uri`
//! (`fs_uri`), and what a run of it leaves (`record_folio_capacity` from its stats,
//! `forget_plugin_segment`: the persistent segment of a finished run removed once its
//! keeper is done, so the next run starts cold).
//!
//! The build directory, `target/rocksdb-plugin`, may hold another tree's build: a worktree
//! whose `target/` was copied from another checkout, or a checkout that moved. cmake refuses
//! to configure such a directory again, and the plugin in it was built from the other
//! tree's sources. `build_plugin` reads whose build it is from its `CMakeCache.txt`
//! (`build_dir_owner`), removes another tree's and builds afresh, and measures an existing
//! plugin after a failed build only when it is this workspace's.

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

/// Builds the RocksDB plugin with cmake (as `plugins/rocksdb/ci.sh` does) into
/// `target/rocksdb-plugin` and returns it, with a note when the build failed and the
/// existing plugin, this workspace's, is used instead.
///
/// A build directory that is not this workspace's ([`BuildDirOwner::Other`]) is removed
/// first, saying so on stderr, and the plugin built afresh.
///
/// Errors: a tool or package missing; the build failing with no plugin of this
/// workspace's to fall back on (none there, or one whose origin is not this workspace).
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
    let owner = build_dir_owner(&build, root)?;
    if let BuildDirOwner::Other { why } = &owner {
        // The whole directory: its objects and its plugin are the other tree's too.
        eprintln!(
            "folio-bench: db-bench: {} is not this workspace's build ({why}): removing it \
             and building the plugin afresh",
            build.display()
        );
        std::fs::remove_dir_all(&build)?;
    }
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
    let e = match result {
        Ok(()) if plugin.is_file() => return Ok((plugin, None)),
        Ok(()) => {
            return Err(io::Error::other(format!(
                "the plugin build left no {}",
                plugin.display()
            )))
        }
        Err(e) => e,
    };
    let first = e
        .to_string()
        .lines()
        .next()
        .unwrap_or_default()
        .trim_end_matches(':')
        .to_string();
    match owner {
        // A failed rebuild (say, of the workspace's folio-capi) leaves the last good
        // plugin of this workspace: measure it, and say so in the report.
        BuildDirOwner::This if plugin.is_file() => {
            eprintln!(
                "folio-bench: db-bench: warning: the plugin did not rebuild; using the \
                 existing {}:\n{e}",
                plugin.display()
            );
            let note = format!(
                "folio: the plugin did not rebuild ({first}; see stderr); measured the \
                 existing {}, which may be older than the workspace",
                plugin.display()
            );
            Ok((plugin, Some(note)))
        }
        // No CMakeCache.txt beside it: nothing says which sources it was built from.
        BuildDirOwner::Unconfigured if plugin.is_file() => Err(io::Error::other(format!(
            "the plugin did not build, and the existing {} has no CMakeCache.txt beside it \
             to say which sources it was built from: not measuring it; fix the build:\n{e}",
            plugin.display()
        ))),
        _ => Err(e),
    }
}

/// Whose build a cmake build directory of the plugin holds, as its `CMakeCache.txt` says.
#[derive(Debug, PartialEq, Eq)]
enum BuildDirOwner {
    /// No `CMakeCache.txt` (no directory, or never configured).
    Unconfigured,
    /// Configured in this directory from the workspace's `plugins/rocksdb`, linking the
    /// workspace's folio (`target/release/libfolio.a`, which the build makes with cargo).
    This,
    /// Anything else: configured for another source tree or in another directory (cmake
    /// refuses to configure it again), or linking a folio library from elsewhere
    /// (`FOLIO_STATIC_LIB`, `FOLIO_CARGO_TARGET_DIR`). `why` says which, for a message.
    Other { why: String },
}

/// Whose build `build` holds (see [`BuildDirOwner`]), for the workspace at `root`.
/// Directories are compared canonical; one that no longer exists (a checkout that moved)
/// is another's.
///
/// Errors: `build/CMakeCache.txt` exists but cannot be read.
fn build_dir_owner(build: &Path, root: &Path) -> io::Result<BuildDirOwner> {
    let cache = match std::fs::read_to_string(build.join("CMakeCache.txt")) {
        Ok(cache) => cache,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BuildDirOwner::Unconfigured),
        Err(e) => return Err(e),
    };
    let entry = |name: &str| cmake_cache_entry(&cache, name).unwrap_or_default();
    let home = entry("CMAKE_HOME_DIRECTORY");
    let made_in = entry("CMAKE_CACHEFILE_DIR");
    let static_lib = entry("FOLIO_STATIC_LIB");
    let cargo_target = entry("FOLIO_CARGO_TARGET_DIR");
    let why = if !same_dir(home, &root.join("plugins/rocksdb")) {
        format!("configured for the sources in {home:?}")
    } else if !same_dir(made_in, build) {
        format!("configured in {made_in:?}")
    } else if !static_lib.is_empty() {
        format!("linking FOLIO_STATIC_LIB={static_lib}")
    } else if !same_dir(cargo_target, &root.join("target")) {
        format!("linking folio from FOLIO_CARGO_TARGET_DIR={cargo_target}")
    } else {
        return Ok(BuildDirOwner::This);
    };
    Ok(BuildDirOwner::Other { why })
}

/// The value of the entry `name` (`NAME:TYPE=VALUE`) in the text of a `CMakeCache.txt`.
fn cmake_cache_entry<'a>(cache: &'a str, name: &str) -> Option<&'a str> {
    cache.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.split_once(':')?.0 == name).then_some(value)
    })
}

/// Whether `recorded` (a path cmake wrote) names the existing directory `dir`.
fn same_dir(recorded: &str, dir: &Path) -> bool {
    match (Path::new(recorded).canonicalize(), dir.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A workspace in a temporary directory: `plugins/rocksdb`, `target/rocksdb-plugin`,
    /// and another checkout beside it (`other/`) with the same two directories.
    struct Trees {
        dir: tempfile::TempDir,
    }

    impl Trees {
        fn new() -> Trees {
            let dir = tempfile::tempdir().unwrap();
            for tree in ["this", "other"] {
                for sub in ["plugins/rocksdb", "target/rocksdb-plugin"] {
                    std::fs::create_dir_all(dir.path().join(tree).join(sub)).unwrap();
                }
            }
            Trees { dir }
        }

        fn root(&self, tree: &str) -> PathBuf {
            self.dir.path().join(tree)
        }

        fn build(&self) -> PathBuf {
            self.root("this").join("target/rocksdb-plugin")
        }

        /// Writes this workspace's `CMakeCache.txt` as cmake writes it (comments, typed
        /// entries), configured in `made_in` for `home`, with the two folio entries.
        fn write_cache(&self, home: &Path, made_in: &Path, static_lib: &str, cargo_target: &Path) {
            let cache = format!(
                "# This is the CMakeCache file.\n\
                 //Path to a file.\n\
                 FOLIO_CARGO_TARGET_DIR:PATH={}\n\
                 FOLIO_STATIC_LIB:FILEPATH={static_lib}\n\
                 folio_rocksdb_SOURCE_DIR:STATIC={}\n\
                 CMAKE_CACHEFILE_DIR:INTERNAL={}\n\
                 //Source directory with the top level CMakeLists.txt file for this\n\
                 CMAKE_HOME_DIRECTORY:INTERNAL={}\n",
                cargo_target.display(),
                home.display(),
                made_in.display(),
                home.display(),
            );
            std::fs::write(self.build().join("CMakeCache.txt"), cache).unwrap();
        }

        fn owner(&self) -> BuildDirOwner {
            build_dir_owner(&self.build(), &self.root("this")).unwrap()
        }
    }

    fn is_other(owner: &BuildDirOwner, says: &str) -> bool {
        matches!(owner, BuildDirOwner::Other { why } if why.contains(says))
    }

    #[test]
    fn build_dir_owner_is_this_for_the_workspace_own_build_only() {
        let t = Trees::new();
        assert_eq!(t.owner(), BuildDirOwner::Unconfigured);
        let this = t.root("this");
        t.write_cache(
            &this.join("plugins/rocksdb"),
            &t.build(),
            "",
            &this.join("target"),
        );
        assert_eq!(t.owner(), BuildDirOwner::This);
        // The same directories by another spelling (cmake records what it was given).
        t.write_cache(
            &this.join("plugins/../plugins/rocksdb"),
            &this.join("target/./rocksdb-plugin"),
            "",
            &this.join("target/"),
        );
        assert_eq!(t.owner(), BuildDirOwner::This);
    }

    #[test]
    fn build_dir_owner_is_other_for_a_copied_or_moved_build() {
        let t = Trees::new();
        let (this, other) = (t.root("this"), t.root("other"));
        // target/ copied from the other checkout: every path in it names that checkout.
        t.write_cache(
            &other.join("plugins/rocksdb"),
            &other.join("target/rocksdb-plugin"),
            "",
            &other.join("target"),
        );
        let owner = t.owner();
        assert!(
            is_other(&owner, "configured for the sources in"),
            "{owner:?}"
        );
        assert!(is_other(&owner, "other/plugins/rocksdb"), "{owner:?}");
        // A checkout that moved: its old paths exist no more.
        let gone = t.dir.path().join("gone");
        t.write_cache(
            &gone.join("plugins/rocksdb"),
            &gone.join("target/rocksdb-plugin"),
            "",
            &gone.join("target"),
        );
        assert!(is_other(&t.owner(), "configured for the sources in"));
        // This tree's sources, but the cache made in another directory.
        t.write_cache(
            &this.join("plugins/rocksdb"),
            &other.join("target/rocksdb-plugin"),
            "",
            &this.join("target"),
        );
        assert!(is_other(&t.owner(), "configured in"));
    }

    #[test]
    fn build_dir_owner_is_other_when_it_links_another_folio() {
        let t = Trees::new();
        let (this, other) = (t.root("this"), t.root("other"));
        let sources = this.join("plugins/rocksdb");
        t.write_cache(
            &sources,
            &t.build(),
            "/elsewhere/libfolio.a",
            &this.join("target"),
        );
        assert!(is_other(
            &t.owner(),
            "FOLIO_STATIC_LIB=/elsewhere/libfolio.a"
        ));
        t.write_cache(&sources, &t.build(), "", &other.join("target"));
        assert!(is_other(&t.owner(), "FOLIO_CARGO_TARGET_DIR="));
    }

    #[test]
    fn cmake_cache_entry_reads_typed_entries_and_skips_comments() {
        let cache = "# CMAKE_HOME_DIRECTORY:INTERNAL=/not/this\n\
                     //CMAKE_HOME_DIRECTORY=/nor/this\n\
                     CMAKE_HOME_DIRECTORY_X:INTERNAL=/nor/that\n\
                     CMAKE_HOME_DIRECTORY:INTERNAL=/src/a=b\n\
                     FOLIO_STATIC_LIB:FILEPATH=\n";
        assert_eq!(
            cmake_cache_entry(cache, "CMAKE_HOME_DIRECTORY"),
            Some("/src/a=b")
        );
        assert_eq!(cmake_cache_entry(cache, "FOLIO_STATIC_LIB"), Some(""));
        assert_eq!(cmake_cache_entry(cache, "FOLIO_CARGO_TARGET_DIR"), None);
    }
}
