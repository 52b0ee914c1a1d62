//! What the machine, or the cgroup the process runs in, says about memory: how much
//! there is, how much is available, and whether tasks stall for it.
//!
//! Design: read from the kernel's text files, parsed by pure functions (tested on
//! samples): `/proc/meminfo` (`MemTotal`, `MemAvailable`: free memory plus what the
//! kernel can reclaim without swapping), `/proc/pressure/memory` (pressure stall
//! information: the share of time some task waited for memory), and for a process in a
//! memory cgroup:
//! - v2 (`/proc/self/cgroup`'s `0::` line): the tightest `memory.max` or `memory.high` on
//!   the path from its cgroup to the root, each group's `memory.current` and the clean
//!   file pages of its `memory.stat` (page cache the kernel can drop within the group),
//!   and its own `memory.pressure`;
//! - v1 (the line that names the `memory` controller, mounted at
//!   `/sys/fs/cgroup/memory`, as on hosts that still run the hybrid hierarchy): its
//!   `memory.stat`'s `hierarchical_memory_limit` (the tightest `memory.limit_in_bytes` up
//!   to the root), `memory.usage_in_bytes` and the `total_` file pages of `memory.stat`.
//!
//! A limit at or above the machine's memory counts as none (v1 writes "no limit" as a
//! number near 2^63).
//!
//! Limits: v1 has no pressure file of its own (the machine's counts); a file that cannot
//! be read counts as absent, never as an error: a policy that cannot see pressure keeps
//! the capacity it has.

use std::path::{Path, PathBuf};

/// Memory as the kernel reports it now.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MemoryFacts {
    /// The machine's memory (`MemTotal`).
    pub total_bytes: u64,
    /// Memory available to a new allocation without swapping (`MemAvailable`), the
    /// cgroup's room under its limit if that is smaller.
    pub available_bytes: u64,
    /// The most memory the process may use: the machine's, or the cgroup's limit.
    pub limit_bytes: u64,
    /// Microseconds in which some task stalled for memory since boot (the `some` line's
    /// `total` of the cgroup's pressure file if it has one, else the machine's); `None`
    /// where the kernel has no pressure stall information. The policy takes its growth
    /// over a tick: the share of that tick spent stalled.
    pub pressure_some_total_us: Option<u64>,
}

/// Where the facts are read from: the machine's files and the process's cgroup.
#[derive(Clone, Debug)]
pub struct MemorySource {
    proc_root: PathBuf,
    /// The process's cgroup v2 and its ancestors, innermost first.
    cgroups: Vec<PathBuf>,
    /// The process's cgroup v1 memory group (its stat has the hierarchy's limit).
    cgroup_v1: Option<PathBuf>,
}

impl MemorySource {
    /// The running process's: `/proc` and its cgroups under `/sys/fs/cgroup`.
    pub fn this_process() -> MemorySource {
        let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let root = Path::new("/sys/fs/cgroup");
        MemorySource {
            proc_root: PathBuf::from("/proc"),
            cgroups: cgroup_v2_path(&text)
                .map(|path| cgroup_chain(root, path))
                .unwrap_or_default(),
            cgroup_v1: cgroup_v1_memory_path(&text)
                .map(|path| root.join("memory").join(path.trim_start_matches('/'))),
        }
    }

    /// The machine's files under `proc_root` in place of `/proc` (`meminfo`,
    /// `pressure/memory`), and no cgroup: a test's simulated machine
    /// (`KeptMemory::memory_files`).
    pub fn with_proc_root(proc_root: PathBuf) -> MemorySource {
        MemorySource {
            proc_root,
            cgroups: Vec::new(),
            cgroup_v1: None,
        }
    }

    /// Reads the facts now: a few small files, tens of microseconds.
    pub fn read(&self) -> MemoryFacts {
        let meminfo = read(&self.proc_root.join("meminfo"));
        let (total, machine_available) = meminfo.as_deref().map(parse_meminfo).unwrap_or_default();
        let mut facts = MemoryFacts {
            total_bytes: total,
            available_bytes: machine_available,
            limit_bytes: total,
            pressure_some_total_us: read(&self.proc_root.join("pressure/memory"))
                .as_deref()
                .and_then(parse_pressure_some_total_us),
        };
        // The tightest limit on the path to the root, and the room under it.
        for dir in &self.cgroups {
            let limit = ["memory.max", "memory.high"]
                .iter()
                .filter_map(|name| read(&dir.join(name)).as_deref().and_then(parse_limit))
                .min();
            let stat = read(&dir.join("memory.stat")).unwrap_or_default();
            facts.bound_by(
                limit,
                read_number(&dir.join("memory.current")),
                parse_droppable_file_bytes(&stat, ""),
            );
        }
        if let Some(dir) = &self.cgroup_v1 {
            let stat = read(&dir.join("memory.stat")).unwrap_or_default();
            facts.bound_by(
                stat_field(&stat, "hierarchical_memory_limit"),
                read_number(&dir.join("memory.usage_in_bytes")),
                parse_droppable_file_bytes(&stat, "total_"),
            );
        }
        if let Some(own) = self.cgroups.first() {
            if let Some(total) = read(&own.join("memory.pressure"))
                .as_deref()
                .and_then(parse_pressure_some_total_us)
            {
                facts.pressure_some_total_us = Some(total);
            }
        }
        // Post: a cgroup's limit only ever lowers the machine's, and the room under it
        // the machine's available memory.
        debug_assert!(facts.limit_bytes <= facts.total_bytes, "{facts:?}");
        debug_assert!(facts.available_bytes <= machine_available, "{facts:?}");
        facts
    }
}

impl MemoryFacts {
    /// Bounds the figures by a cgroup's `limit` (none at or above the machine's memory)
    /// with `current` bytes charged to it, `droppable` of them page cache it can drop.
    fn bound_by(&mut self, limit: Option<u64>, current: Option<u64>, droppable: u64) {
        let (Some(limit), Some(current)) = (limit, current) else {
            return;
        };
        if limit >= self.total_bytes && self.total_bytes > 0 {
            return; // no limit in effect
        }
        self.limit_bytes = self.limit_bytes.min(limit);
        let room = (limit + droppable).saturating_sub(current);
        self.available_bytes = self.available_bytes.min(room);
    }
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn read_number(path: &Path) -> Option<u64> {
    read(path)?.trim().parse().ok()
}

/// The value of `name` in a `memory.stat`.
fn stat_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// `MemTotal` and `MemAvailable` of a `/proc/meminfo`, in bytes (0 where missing).
pub fn parse_meminfo(text: &str) -> (u64, u64) {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map_or(0, |kib| kib << 10)
    };
    (field("MemTotal"), field("MemAvailable"))
}

/// The `total` (microseconds stalled) of the `some` line of a pressure file
/// (`/proc/pressure/memory`, `memory.pressure`).
pub fn parse_pressure_some_total_us(text: &str) -> Option<u64> {
    let line = text.lines().find(|line| line.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|word| word.strip_prefix("total="))?
        .parse()
        .ok()
}

/// A `memory.max` or `memory.high`: bytes, or `None` for "max" (no limit).
pub fn parse_limit(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// The page cache a cgroup could drop to make room, from its `memory.stat`: its clean
/// file pages (`inactive_file` and `active_file` less the dirty and writeback ones: v2
/// names them `file_dirty` and `file_writeback`; v1 `dirty` and `writeback`, each with
/// the `total_` prefix for the hierarchy, which `prefix` gives).
pub fn parse_droppable_file_bytes(text: &str, prefix: &str) -> u64 {
    let field = |name: &str| stat_field(text, &format!("{prefix}{name}")).unwrap_or(0);
    let unclean = if prefix.is_empty() {
        field("file_dirty") + field("file_writeback")
    } else {
        field("dirty") + field("writeback")
    };
    (field("inactive_file") + field("active_file")).saturating_sub(unclean)
}

/// The cgroup v2 path of a `/proc/self/cgroup` (its `0::` line).
pub fn cgroup_v2_path(text: &str) -> Option<&str> {
    text.lines().find_map(|line| line.strip_prefix("0::"))
}

/// The cgroup v1 path of the `memory` controller in a `/proc/self/cgroup`
/// (`N:memory:/path`, the controller possibly listed with others).
pub fn cgroup_v1_memory_path(text: &str) -> Option<&str> {
    text.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then_some(path)
    })
}

/// `path`'s directory under `root` and each ancestor's up to the root, innermost first.
fn cgroup_chain(root: &Path, path: &str) -> Vec<PathBuf> {
    let mut chain = Vec::new();
    let mut dir = PathBuf::from(path.trim_start_matches('/'));
    loop {
        chain.push(root.join(&dir));
        if !dir.pop() || dir.as_os_str().is_empty() {
            break;
        }
    }
    chain
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_gives_total_and_available() {
        let text =
            "MemTotal:       24572564 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(parse_meminfo(text), (24_572_564 << 10, 20_000_000 << 10));
        assert_eq!(parse_meminfo("nothing"), (0, 0));
    }

    #[test]
    fn pressure_gives_the_some_line_total() {
        let text = "some avg10=12.50 avg60=3.00 avg300=0.10 total=12345\n\
                    full avg10=7.00 avg60=1.00 avg300=0.00 total=999\n";
        assert_eq!(parse_pressure_some_total_us(text), Some(12345));
        assert_eq!(
            parse_pressure_some_total_us("full avg10=1.00 total=5"),
            None
        );
    }

    #[test]
    fn limits_read_max_as_none() {
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("2147483648\n"), Some(2 << 30));
    }

    #[test]
    fn droppable_file_pages_leave_out_dirty_ones() {
        let text = "anon 100\nfile 9000\nactive_file 3000\ninactive_file 6000\nfile_dirty 1000\nfile_writeback 500\n";
        assert_eq!(parse_droppable_file_bytes(text, ""), 7500);
        let v1 = "dirty 5\ninactive_file 1\ntotal_inactive_file 6000\ntotal_active_file 3000\n\
                  total_dirty 1000\ntotal_writeback 500\n";
        assert_eq!(parse_droppable_file_bytes(v1, "total_"), 7500);
    }

    #[test]
    fn the_v1_memory_line_is_found_among_the_controllers() {
        let text = "5:devices:/\n4:memory:/process_api/43bd\n0::/\n";
        assert_eq!(cgroup_v1_memory_path(text), Some("/process_api/43bd"));
        assert_eq!(cgroup_v1_memory_path("3:cpu,memory:/a\n"), Some("/a"));
        assert_eq!(cgroup_v1_memory_path("0::/\n"), None);
    }

    #[test]
    fn the_cgroup_chain_goes_from_the_process_to_the_root() {
        assert_eq!(
            cgroup_v2_path("0::/system.slice/db.service\n"),
            Some("/system.slice/db.service")
        );
        assert_eq!(cgroup_v2_path("1:memory:/x\n"), None);
        let chain = cgroup_chain(Path::new("/sys/fs/cgroup"), "/system.slice/db.service");
        assert_eq!(
            chain,
            [
                PathBuf::from("/sys/fs/cgroup/system.slice/db.service"),
                PathBuf::from("/sys/fs/cgroup/system.slice"),
            ]
        );
        assert!(cgroup_chain(Path::new("/sys/fs/cgroup"), "/").len() == 1);
    }

    #[test]
    fn a_cgroup_limit_bounds_the_machine_figures() {
        let dir = std::env::temp_dir().join(format!("folio-machine-{}", std::process::id()));
        let group = dir.join("cg");
        std::fs::create_dir_all(group.join("pressure")).unwrap();
        std::fs::create_dir_all(dir.join("proc/pressure")).unwrap();
        std::fs::write(
            dir.join("proc/meminfo"),
            "MemTotal: 8388608 kB\nMemAvailable: 6291456 kB\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("proc/pressure/memory"),
            "some avg10=1.00 avg60=0 avg300=0 total=1\n",
        )
        .unwrap();
        std::fs::write(group.join("memory.max"), "2147483648\n").unwrap();
        std::fs::write(group.join("memory.high"), "max\n").unwrap();
        std::fs::write(group.join("memory.current"), "1610612736\n").unwrap();
        std::fs::write(
            group.join("memory.stat"),
            "inactive_file 104857600\nactive_file 0\n",
        )
        .unwrap();
        std::fs::write(
            group.join("memory.pressure"),
            "some avg10=30.00 avg60=0 avg300=0 total=7\n",
        )
        .unwrap();
        let v1 = dir.join("v1");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(
            v1.join("memory.stat"),
            "hierarchical_memory_limit 1073741824\ntotal_inactive_file 0\n",
        )
        .unwrap();
        std::fs::write(v1.join("memory.usage_in_bytes"), "805306368\n").unwrap();
        let mut source = MemorySource {
            proc_root: dir.join("proc"),
            cgroups: vec![group],
            cgroup_v1: None,
        };
        let facts = source.read();
        assert_eq!(facts.total_bytes, 8 << 30);
        assert_eq!(facts.limit_bytes, 2 << 30);
        assert_eq!(facts.available_bytes, (512 + 100) << 20);
        assert_eq!(facts.pressure_some_total_us, Some(7), "the group's own");
        // A v1 group limited to 1 GiB, 768 MiB used, bounds it further.
        source.cgroup_v1 = Some(v1.clone());
        let facts = source.read();
        assert_eq!(facts.limit_bytes, 1 << 30);
        assert_eq!(facts.available_bytes, 256 << 20);
        // v1's "no limit" is a number above the machine's memory.
        std::fs::write(
            v1.join("memory.stat"),
            "hierarchical_memory_limit 9223372036854771712\n",
        )
        .unwrap();
        assert_eq!(source.read().limit_bytes, 2 << 30);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
