//! What the machine, or the cgroup the process runs in, says about memory: how much
//! there is, how much is available, and whether tasks stall for it.
//!
//! Design: read from the kernel's text files, parsed by pure functions (tested on
//! samples): `/proc/meminfo` (`MemTotal`, `MemAvailable`: free memory plus what the
//! kernel can reclaim without swapping), `/proc/pressure/memory` (pressure stall
//! information: the share of time some task waited for memory), and for a process in a
//! cgroup v2 (`/proc/self/cgroup`'s `0::` line) the tightest `memory.max` or
//! `memory.high` on the path from its cgroup to the root, that cgroup's `memory.current`
//! and the file pages of its `memory.stat` (page cache the kernel can drop within the
//! group) and its own `memory.pressure`.
//!
//! Limits: cgroup v1 is not read (its limit is then unknown, and only the machine's
//! figures count); a file that cannot be read counts as absent, never as an error: a
//! policy that cannot see pressure keeps the capacity it has.

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
    /// The share of the last 10 s in which some task stalled for memory, in percent
    /// (the cgroup's if it has its own pressure file, else the machine's); 0 where the
    /// kernel has no pressure stall information.
    pub pressure_some_avg10: f64,
}

/// Where the facts are read from: the machine's files and the process's cgroup.
#[derive(Clone, Debug)]
pub struct MemorySource {
    proc_root: PathBuf,
    /// The process's cgroup and its ancestors, innermost first (cgroup v2 only).
    cgroups: Vec<PathBuf>,
}

impl MemorySource {
    /// The running process's: `/proc` and its cgroup under `/sys/fs/cgroup`.
    pub fn this_process() -> MemorySource {
        let cgroup = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|text| cgroup_v2_path(&text).map(str::to_owned));
        MemorySource {
            proc_root: PathBuf::from("/proc"),
            cgroups: cgroup
                .map(|path| cgroup_chain(Path::new("/sys/fs/cgroup"), &path))
                .unwrap_or_default(),
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
            pressure_some_avg10: read(&self.proc_root.join("pressure/memory"))
                .as_deref()
                .and_then(parse_pressure_some_avg10)
                .unwrap_or(0.0),
        };
        // The tightest limit on the path to the root, and the room under it.
        for dir in &self.cgroups {
            let limit = ["memory.max", "memory.high"]
                .iter()
                .filter_map(|name| read(&dir.join(name)).as_deref().and_then(parse_limit))
                .min();
            let Some(limit) = limit else { continue };
            let Some(current) = read(&dir.join("memory.current"))
                .as_deref()
                .and_then(|text| text.trim().parse::<u64>().ok())
            else {
                continue;
            };
            let droppable = read(&dir.join("memory.stat"))
                .as_deref()
                .map_or(0, parse_droppable_file_bytes);
            let room = (limit + droppable).saturating_sub(current);
            if limit < facts.limit_bytes {
                facts.limit_bytes = limit;
            }
            facts.available_bytes = facts.available_bytes.min(room);
        }
        if let Some(own) = self.cgroups.first() {
            if let Some(avg10) = read(&own.join("memory.pressure"))
                .as_deref()
                .and_then(parse_pressure_some_avg10)
            {
                facts.pressure_some_avg10 = avg10;
            }
        }
        facts
    }
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
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

/// The `avg10` of the `some` line of a pressure file (`/proc/pressure/memory`,
/// `memory.pressure`).
pub fn parse_pressure_some_avg10(text: &str) -> Option<f64> {
    let line = text.lines().find(|line| line.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|word| word.strip_prefix("avg10="))?
        .parse()
        .ok()
}

/// A `memory.max` or `memory.high`: bytes, or `None` for "max" (no limit).
pub fn parse_limit(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// The page cache a cgroup could drop to make room, from its `memory.stat`: its clean
/// file pages (`inactive_file` and `active_file` less `file_dirty` and
/// `file_writeback`).
pub fn parse_droppable_file_bytes(text: &str) -> u64 {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|value| value.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("inactive_file") + field("active_file"))
        .saturating_sub(field("file_dirty") + field("file_writeback"))
}

/// The cgroup v2 path of a `/proc/self/cgroup` (its `0::` line).
pub fn cgroup_v2_path(text: &str) -> Option<&str> {
    text.lines().find_map(|line| line.strip_prefix("0::"))
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
    fn pressure_gives_the_some_line_avg10() {
        let text = "some avg10=12.50 avg60=3.00 avg300=0.10 total=12345\n\
                    full avg10=7.00 avg60=1.00 avg300=0.00 total=999\n";
        assert_eq!(parse_pressure_some_avg10(text), Some(12.5));
        assert_eq!(parse_pressure_some_avg10("full avg10=1.00"), None);
    }

    #[test]
    fn limits_read_max_as_none() {
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("2147483648\n"), Some(2 << 30));
    }

    #[test]
    fn droppable_file_pages_leave_out_dirty_ones() {
        let text = "anon 100\nfile 9000\nactive_file 3000\ninactive_file 6000\nfile_dirty 1000\nfile_writeback 500\n";
        assert_eq!(parse_droppable_file_bytes(text), 7500);
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
            "some avg10=30.00 avg60=0 avg300=0 total=1\n",
        )
        .unwrap();
        let source = MemorySource {
            proc_root: dir.join("proc"),
            cgroups: vec![group],
        };
        let facts = source.read();
        assert_eq!(facts.total_bytes, 8 << 30);
        assert_eq!(facts.limit_bytes, 2 << 30);
        assert_eq!(facts.available_bytes, (512 + 100) << 20);
        assert_eq!(facts.pressure_some_avg10, 30.0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
