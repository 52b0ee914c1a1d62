//! The parent's side of `restart`: the rounds of reader processes (a cold start, then a
//! restart chain of three readers per system), each reader a [`Role`] told its steps on its
//! command line, what it says read back as JSON lines (`Said`), and the keeper of every
//! folio reader waited for before the next reader starts (`Ctx::after_exit` after a clean
//! exit, `wait_keeper` after a SIGKILL).
//!
//! Limits: a reader's lines are read on the workload's thread, so a reader that prints
//! nothing and never exits holds the run (its window's length bounds it in practice).

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::{Phase, Plan, Side, KEEPER_TIMEOUT, READ_BYTES};
use crate::kernel;
use crate::measure::RunResult;
use crate::workloads::process::{self, Input, Keeper, Role, RoleArgs};
use crate::workloads::Env;

/// What every round's processes share.
pub(super) struct Ctx<'a> {
    pub(super) env: &'a Env,
    pub(super) plan: &'a Plan,
    pub(super) threads: usize,
    pub(super) first_secs: f64,
    pub(super) warm_secs: f64,
    pub(super) capacity_bytes: u64,
    pub(super) segment_dir: &'a Path,
}

/// What a reader is told to do, in order.
#[derive(Clone, Debug, Default)]
struct Steps {
    first_secs: f64,
    fill: bool,
    warm_secs: f64,
    linger: bool,
    segment_name: Option<String>,
}

impl Ctx<'_> {
    /// A cold start of `side`: folio under a fresh name, the kernel after its cache was
    /// dropped (by the caller).
    pub(super) fn cold(&self, side: Side, round: usize) -> io::Result<RunResult> {
        let steps = Steps {
            first_secs: self.first_secs,
            segment_name: (side == Side::Folio).then(|| format!("cold-{round}")),
            ..Steps::default()
        };
        let mut child = self.spawn(side, &steps, round as u64 * 16 + 1)?;
        let said = child.finish()?;
        self.after_exit(side, &said)?;
        let mut run = said.window("first")?;
        run.extra.insert("build_ms".into(), json!(said.build_ms()));
        if side == Side::Folio {
            run.extra
                .insert("adoption".into(), said.adoption().unwrap_or(Value::Null));
        }
        if side == Side::Folio {
            // The cold cache's segment (left by its clean exit once caches adopt) is of no
            // further use.
            remove_segments(self.segment_dir, "cold-")?;
        }
        Ok(run)
    }

    /// The three processes of a restart chain of `side`: warm + clean exit, restart +
    /// warm + SIGKILL, restart.
    pub(super) fn restarts(
        &self,
        side: Side,
        round: usize,
        bar: &indicatif::ProgressBar,
    ) -> io::Result<Vec<(Phase, RunResult)>> {
        let name = (side == Side::Folio).then(|| format!("restart-{round}"));
        let seed = round as u64 * 16;
        let mut out = Vec::new();

        // 1: fill, warm, clean exit.
        let steps = Steps {
            fill: true,
            warm_secs: self.warm_secs,
            segment_name: name.clone(),
            ..Steps::default()
        };
        let mut p1 = self.spawn(side, &steps, seed + 2)?;
        let said = p1.finish()?;
        let keeper_ms = self.after_exit(side, &said)?;
        let mut warm = said.window("warm")?;
        warm.extra.insert("build_ms".into(), json!(said.build_ms()));
        warm.extra
            .insert("fill_secs".into(), json!(said.fill_secs()));
        out.push((Phase::Warm, warm));
        bar.inc(1);

        // 2: restart, fill, warm, SIGKILL while reading.
        let residency = self.residency(side)?;
        let steps = Steps {
            first_secs: self.first_secs,
            fill: true,
            warm_secs: self.warm_secs,
            linger: true,
            segment_name: name.clone(),
        };
        let mut p2 = self.spawn(side, &steps, seed + 3)?;
        let said = p2.until_lingering()?;
        let keeper = said.keeper_pid().map(Keeper::watch).transpose()?;
        let segment = said.segment();
        // Kill while it reads: a moment into its lingering reads.
        std::thread::sleep(Duration::from_millis(200));
        let killed = Instant::now();
        p2.kill()?;
        let kill_keeper_ms = keeper
            .map(|k| wait_keeper(k, segment.as_deref(), killed))
            .transpose()?;
        let first = restart_window(&said, side, keeper_ms, residency)?;
        out.push((Phase::RestartClean, first));
        let mut warm = said.window("warm")?;
        warm.extra
            .insert("fill_secs".into(), json!(said.fill_secs()));
        out.push((Phase::WarmBeforeKill, warm));
        bar.inc(2);

        // 3: restart after the kill.
        let residency = self.residency(side)?;
        let steps = Steps {
            first_secs: self.first_secs,
            segment_name: name,
            ..Steps::default()
        };
        let mut p3 = self.spawn(side, &steps, seed + 4)?;
        let said = p3.finish()?;
        self.after_exit(side, &said)?;
        let first = restart_window(&said, side, kill_keeper_ms, residency)?;
        out.push((Phase::RestartKill, first));
        bar.inc(1);
        remove_segments(self.segment_dir, "restart-")?;
        Ok(out)
    }

    /// The kernel's resident share of the data set (`mincore`), for the kernel side.
    fn residency(&self, side: Side) -> io::Result<Option<f64>> {
        if side != Side::Kernel {
            return Ok(None);
        }
        let r = kernel::resident_pages_all(&self.plan.paths())?;
        Ok(Some(r.resident as f64 / r.total.max(1) as f64))
    }

    /// After a folio reader's clean exit: waits for its keeper to be done (`wait_keeper`);
    /// its time in ms.
    fn after_exit(&self, side: Side, said: &Said) -> io::Result<Option<f64>> {
        if side != Side::Folio {
            return Ok(None);
        }
        let Some(pid) = said.keeper_pid() else {
            return Ok(None);
        };
        let start = Instant::now();
        // The keeper may be gone already: then there is no pidfd to open, and it was
        // reaped (or is a zombie child of ours) by now.
        match Keeper::watch(pid) {
            Ok(keeper) => Ok(Some(wait_keeper(keeper, said.segment().as_deref(), start)?)),
            Err(_) => {
                process::reap_keeper(pid);
                Ok(Some(0.0))
            }
        }
    }

    fn spawn(&self, side: Side, steps: &Steps, seed: u64) -> io::Result<Reader> {
        let env = self.env;
        let mut args = RoleArgs::new("restart-reader")
            .value(
                "--system",
                match side {
                    Side::Folio => "folio",
                    Side::Kernel => "kernel",
                },
            )
            .value("--dir", self.plan.dir.display())
            .value("--files", self.plan.files)
            .value("--file-bytes", self.plan.file_bytes)
            .value("--threads", self.threads)
            .value("--first-secs", steps.first_secs)
            .value("--warm-secs", steps.warm_secs)
            .value("--seed", seed)
            .value("--capacity-bytes", self.capacity_bytes)
            .value("--readahead-max-bytes", env.readahead_max_bytes)
            .value("--segment-dir", self.segment_dir.display());
        if steps.fill {
            args = args.switch("--fill");
        }
        if steps.linger {
            args = args.switch("--linger");
        }
        if let Some(name) = &steps.segment_name {
            args = args.value("--segment-name", name);
        }
        let role = Role::spawn(&args.cache_of(env), Input::Closed, None)?;
        Ok(Reader {
            role,
            said: Said::default(),
        })
    }
}

/// Waits for `keeper` (our child: we are a subreaper) to be done with `segment`: to exit
/// (it is reaped), or to stay as the segment's steward, its writeback over
/// (`SegmentHolder::Steward`); the time since `since` in ms.
fn wait_keeper(keeper: Keeper, segment: Option<&Path>, since: Instant) -> io::Result<f64> {
    let stewards = || {
        segment.is_some_and(|path| {
            folio::SegmentView::open(path)
                .is_ok_and(|view| view.holder() == folio::SegmentHolder::Steward)
        })
    };
    let waited = keeper.wait_done(since, KEEPER_TIMEOUT, "restart", stewards)?;
    Ok(waited.as_secs_f64() * 1e3)
}

/// Removes the segments whose names start with `prefix` from our private directory.
fn remove_segments(dir: &Path, prefix: &str) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(prefix) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// A running reader and what it said so far.
struct Reader {
    /// Killed and reaped if dropped while it runs.
    role: Role,
    said: Said,
}

/// A restart's first window, with what came before it: the build (and, for folio, what it
/// adopted), how long the last process's keeper took, and the kernel's resident share at
/// the start.
fn restart_window(
    said: &Said,
    side: Side,
    keeper_ms: Option<f64>,
    residency: Option<f64>,
) -> io::Result<RunResult> {
    let mut first = said.window("first")?;
    first
        .extra
        .insert("build_ms".into(), json!(said.build_ms()));
    first.extra.insert("keeper_ms".into(), json!(keeper_ms));
    if side == Side::Folio {
        first
            .extra
            .insert("adoption".into(), said.adoption().unwrap_or(Value::Null));
    }
    if let Some(r) = residency {
        first
            .extra
            .insert("kernel_resident_at_start".into(), json!(r));
    }
    Ok(first)
}

/// The JSON lines of a reader, by their key.
#[derive(Debug, Default)]
struct Said {
    lines: Map<String, Value>,
}

impl Said {
    fn get(&self, key: &str) -> Option<&Value> {
        self.lines.get(key)
    }

    fn build_ms(&self) -> Option<f64> {
        self.get("built")?.get("ms")?.as_f64()
    }

    fn segment(&self) -> Option<PathBuf> {
        self.get("built")?
            .get("segment")?
            .as_str()
            .map(PathBuf::from)
    }

    fn keeper_pid(&self) -> Option<u32> {
        self.get("built")?
            .get("keeper_pid")?
            .as_u64()
            .map(|p| p as u32)
    }

    fn adoption(&self) -> Option<Value> {
        self.get("built")?.get("adoption").cloned()
    }

    fn fill_secs(&self) -> Option<f64> {
        self.get("fill")?.get("secs")?.as_f64()
    }

    /// Window `name` (`first`, `warm`) as a run, its reads per second in `per_sec`.
    fn window(&self, name: &str) -> io::Result<RunResult> {
        let w = self.get(name).ok_or_else(|| {
            io::Error::other(format!("restart: the reader said no {name} window"))
        })?;
        let f = |k: &str| w.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        let ops = w.get("ops").and_then(Value::as_u64).unwrap_or(0);
        let mut extra = Map::new();
        extra.insert(
            "per_sec".into(),
            w.get("per_sec").cloned().unwrap_or(Value::Null),
        );
        for key in [
            "folio_misses",
            "folio_io_bytes",
            "folio_cached_bytes_at_start",
            "minor_faults",
        ] {
            if let Some(v) = w.get(key) {
                extra.insert(key.into(), v.clone());
            }
        }
        let bytes = ops * READ_BYTES as u64;
        Ok(RunResult {
            ops,
            bytes_read: bytes,
            bytes_verified: w.get("bytes_verified").and_then(Value::as_u64).unwrap_or(0),
            elapsed_secs: f("secs"),
            p50_us: f("p50_us"),
            p99_us: f("p99_us"),
            extra,
            ..RunResult::default()
        })
    }
}

impl Reader {
    /// Reads lines until `stop` says so or the output ends.
    fn read_until(&mut self, stop: impl Fn(&str) -> bool) -> io::Result<bool> {
        loop {
            let mut line = String::new();
            if self.role.read_line(&mut line)? == 0 {
                return Ok(false);
            }
            let v: Value = serde_json::from_str(line.trim()).map_err(|e| {
                io::Error::other(format!(
                    "restart: {}: a bad line {line:?}: {e}",
                    self.role.what()
                ))
            })?;
            let Value::Object(map) = v else {
                continue;
            };
            let mut stopped = false;
            for (k, v) in map {
                stopped |= stop(&k);
                self.said.lines.insert(k, v);
            }
            if stopped {
                return Ok(true);
            }
        }
    }

    /// Reads to the end and waits for a clean exit.
    fn finish(&mut self) -> io::Result<Said> {
        self.read_until(|_| false)?;
        let status = self.role.wait()?;
        if !status.success() {
            return Err(io::Error::other(format!(
                "restart: {} failed ({status})",
                self.role.what()
            )));
        }
        Ok(std::mem::take(&mut self.said))
    }

    /// Reads until the reader says it is lingering (reading until killed).
    fn until_lingering(&mut self) -> io::Result<Said> {
        if !self.read_until(|k| k == "lingering")? {
            let status = self.role.wait()?;
            return Err(io::Error::other(format!(
                "restart: {} ended before lingering ({status})",
                self.role.what()
            )));
        }
        Ok(std::mem::take(&mut self.said))
    }

    /// SIGKILLs the reader (by its own handle) and reaps it.
    fn kill(&mut self) -> io::Result<()> {
        self.role.kill()
    }
}
