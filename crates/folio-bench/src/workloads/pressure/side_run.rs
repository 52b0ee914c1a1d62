//! The parent's side of `pressure`: one side (folio or the kernel) of one run. It starts
//! the reader role, waits for its fill, starts the allocator role `--before-secs` later,
//! listens to both until the allocator ends (reaped, or killed at its deadline), keeps the
//! reader reading `--after-secs`, stops it, and puts what it heard on one time axis with 0
//! at the allocator's start (`SideRun`).
//!
//! Protection: the parent's state (`Heard`) is its own thread's, fed by one channel from
//! the threads that read the roles' stdout ([`forward_json_lines`]).
//!
//! Limits: both roles run in the side's cgroup if there is one; the parent stays outside
//! it, so an OOM kill inside it ends a role, never the measurement.

use std::io::{self, Write};
use std::path::Path;
use std::process::ChildStdin;
use std::sync::mpsc;
use std::time::Duration;

use super::lines::{AllocLine, ReaderFinal, ReaderLine, Ready, Sample};
use super::Plan;
use crate::kernel::{self, Cgroup, CgroupVersion};
use crate::workloads::process::{forward_json_lines, mono_secs, Input, Outcome, Role, RoleArgs};
use crate::workloads::{Env, System};

/// One side of one run, times relative to the allocator's start.
#[derive(Clone, Debug)]
pub(super) struct SideRun {
    pub(super) system: System,
    pub(super) samples: Vec<Sample>,
    /// (time, bytes touched) after each chunk.
    pub(super) progress: Vec<(f64, u64)>,
    pub(super) ready: Option<Ready>,
    /// The allocator's own time from its start to its last touch.
    pub(super) touch_secs: Option<f64>,
    pub(super) alloc_outcome: Outcome,
    /// Spawn to exit, as the parent saw it.
    pub(super) alloc_wall_secs: Option<f64>,
    /// When the allocator exited (relative).
    pub(super) alloc_exit_t: Option<f64>,
    pub(super) reader_outcome: Outcome,
    pub(super) reader_final: Option<ReaderFinal>,
    /// Processes the machine's OOM killer killed during the side (`/proc/vmstat`).
    pub(super) oom_kills_machine: Option<u64>,
    pub(super) oom_kills_cgroup: Option<u64>,
    pub(super) cgroup_peak_bytes: Option<u64>,
    pub(super) cgroup_version: Option<CgroupVersion>,
}

/// A line from a child, or its end.
enum Event {
    Reader(ReaderLine),
    ReaderEnd,
    Alloc(AllocLine),
    AllocEnd,
}

/// What the parent has heard from the children of a side.
struct Heard {
    samples: Vec<Sample>,
    progress: Vec<(f64, u64)>,
    ready: Option<Ready>,
    touch_secs: Option<f64>,
    reader_final: Option<ReaderFinal>,
    reader_open: bool,
    alloc_open: bool,
}

impl Heard {
    /// Takes events until `deadline` (monotonic seconds) or until `enough` says so.
    fn until(
        &mut self,
        rx: &mpsc::Receiver<Event>,
        deadline: f64,
        enough: impl Fn(&Heard) -> bool,
    ) {
        while !enough(self) {
            let left = deadline - mono_secs();
            if left <= 0.0 {
                return;
            }
            match rx.recv_timeout(Duration::from_secs_f64(left.min(0.05))) {
                Ok(event) => self.take(event),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn take(&mut self, event: Event) {
        match event {
            Event::Reader(ReaderLine::Sample(s)) => self.samples.push(s),
            Event::Reader(ReaderLine::Ready(r)) => self.ready = Some(r),
            Event::Reader(ReaderLine::Final(f)) => self.reader_final = Some(f),
            Event::ReaderEnd => self.reader_open = false,
            Event::Alloc(AllocLine::Progress { t, touched_bytes }) => {
                self.progress.push((t, touched_bytes))
            }
            Event::Alloc(AllocLine::Done { touch_secs, .. }) => self.touch_secs = Some(touch_secs),
            Event::AllocEnd => self.alloc_open = false,
        }
    }
}

/// Tells the reader to stop (one line on its stdin, then EOF).
fn stop_reader(stdin: Option<ChildStdin>) {
    if let Some(mut stdin) = stdin {
        // A reader that died already cannot read it: nothing to do then.
        let _ = writeln!(stdin, "stop");
    }
}

pub(super) fn run_side(
    env: &Env,
    plan: &Plan,
    path: &Path,
    system: System,
    seed: u64,
) -> io::Result<SideRun> {
    kernel::make_cold(&[path.to_path_buf()], env.cold)?;
    let group = plan.cgroup_limit_bytes.map(Cgroup::create).transpose()?;
    let oom_before = kernel::vmstat("oom_kill");
    let (tx, rx) = mpsc::channel();
    let mut reader_args = RoleArgs::new("pressure-reader")
        .value(
            "--system",
            if system == System::Folio {
                "folio"
            } else {
                "kernel"
            },
        )
        .value("--file", path.display())
        .value("--threads", plan.threads)
        .value("--reads-per-sec", plan.reads_per_sec)
        .value("--seed", seed)
        .value("--sample-ms", plan.sample_ms)
        .value("--readahead-kib", env.readahead_max_bytes >> 10)
        .cache_of(env);
    if env.persistent {
        reader_args = reader_args.switch("--persistent");
    }
    let mut reader = Role::spawn(&reader_args, Input::Piped, group.as_ref())?;
    let reader_stdin = reader.take_stdin();
    forward_json_lines(
        reader.take_stdout(),
        tx.clone(),
        Event::Reader,
        Event::ReaderEnd,
    );
    let mut heard = Heard {
        samples: Vec::new(),
        progress: Vec::new(),
        ready: None,
        touch_secs: None,
        reader_final: None,
        reader_open: true,
        alloc_open: false,
    };
    // The fill: as long as it takes (a dead reader ends it).
    heard.until(&rx, f64::INFINITY, |h| h.ready.is_some() || !h.reader_open);
    let mut alloc_outcome = Outcome::NotRun;
    let (mut alloc_start, mut alloc_wall_secs, mut alloc_exit) = (None, None, None);
    if heard.ready.is_some() {
        heard.until(&rx, mono_secs() + plan.before_secs, |h| !h.reader_open);
        let alloc_args = RoleArgs::new("pressure-alloc")
            .value("--bytes", plan.alloc_bytes)
            .value("--chunk-bytes", plan.chunk_bytes)
            .value("--hold-secs", plan.hold_secs);
        let started = mono_secs();
        let mut alloc = Role::spawn(&alloc_args, Input::Closed, group.as_ref())?;
        alloc_start = Some(started);
        heard.alloc_open = true;
        forward_json_lines(
            alloc.take_stdout(),
            tx.clone(),
            Event::Alloc,
            Event::AllocEnd,
        );
        let deadline = started + plan.alloc_timeout_secs;
        // Listen while it runs, then reap it.
        heard.until(&rx, deadline, |h| !h.alloc_open);
        alloc_outcome = alloc.wait_until(deadline)?;
        let ended = mono_secs();
        alloc_wall_secs = Some(ended - started);
        alloc_exit = Some(ended - started);
        heard.until(&rx, ended + plan.after_secs, |h| !h.reader_open);
    }
    stop_reader(reader_stdin);
    heard.until(&rx, mono_secs() + 120.0, |h| !h.reader_open);
    let reader_outcome = reader.wait_until(mono_secs() + 10.0)?;
    drop(tx);
    while let Ok(event) = rx.try_recv() {
        heard.take(event);
    }
    if let Outcome::Exited(code) = reader_outcome {
        if code != 0 {
            return Err(io::Error::other(format!(
                "pressure: the {system} reader failed (exit {code}; its error is above)"
            )));
        }
    }
    let oom_kills_machine = match (oom_before, kernel::vmstat("oom_kill")) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    let zero = alloc_start.unwrap_or_else(|| heard.ready.map_or(0.0, |r| r.t));
    let samples = heard
        .samples
        .iter()
        .map(|s| Sample {
            t: s.t - zero,
            ..*s
        })
        .collect();
    let progress = heard
        .progress
        .iter()
        .map(|&(t, bytes)| (t - zero, bytes))
        .collect();
    Ok(SideRun {
        system,
        samples,
        progress,
        ready: heard.ready.map(|r| Ready { t: r.t - zero, ..r }),
        touch_secs: heard.touch_secs,
        alloc_outcome,
        alloc_wall_secs,
        alloc_exit_t: alloc_exit,
        reader_outcome,
        reader_final: heard.reader_final,
        oom_kills_machine,
        oom_kills_cgroup: group.as_ref().and_then(Cgroup::oom_kills),
        cgroup_peak_bytes: group.as_ref().and_then(Cgroup::peak_bytes),
        cgroup_version: group.as_ref().map(Cgroup::version),
    })
}
