//! The db_bench process: started with its output in unnamed files, looked at while it runs
//! (`run_sampled`: its CPU time and its reads from the block layer from `/proc` every
//! `SAMPLE_PERIOD`, beside the lines of its `--report_file`) and reaped with `wait4(2)`, whose rusage gives its CPU time, peak
//! memory and block I/O (`ChildUsage`).
//!
//! Unlike the roles of `workloads/process.rs` (this binary re-executed), the child here is
//! another program, and it is reaped by `wait4` rather than through `Child`, for the
//! rusage.

use std::fs::File;
use std::io::{self, Read, Seek};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::windows::{self, CpuSample};

/// The CPU time, peak memory and block I/O of a finished child, from `wait4(2)`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ChildUsage {
    pub user_secs: f64,
    pub sys_secs: f64,
    pub max_rss_kib: u64,
    /// `ru_inblock`: 512-byte blocks the process (all its threads) read from the block
    /// layer; page-cache hits are not counted.
    pub read_blocks: u64,
    /// `ru_oublock`: 512-byte blocks it wrote (the kernel's writeback of its dirty pages
    /// after it exited is not counted).
    pub write_blocks: u64,
}

/// A finished child: its exit code (negative: the signal that ended it), its output, its
/// rusage (`wait4`), and what [`run_sampled`] saw while it ran (nothing for
/// [`run_with_usage`]).
#[derive(Clone, Debug, Default)]
pub struct Finished {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub usage: ChildUsage,
    pub samples: Vec<CpuSample>,
}

/// How often [`run_sampled`] looks at its child: twenty times per second of db_bench's
/// report, so that a window's ends are placed to within 50 ms.
pub const SAMPLE_PERIOD: Duration = Duration::from_millis(50);

/// Runs `cmd` to its end with its output in files under `scratch`, and returns its exit
/// status, stdout, stderr and rusage.
///
/// Context: blocks until the child exits; reaps it itself (`wait4`), not through `Child`.
pub fn run_with_usage(
    cmd: &mut Command,
    scratch: &Path,
) -> io::Result<(i32, String, String, ChildUsage)> {
    let spawned = Spawned::start(cmd, scratch)?;
    let (status, usage) = wait4_retrying(spawned.pid, Wait::UntilExit)?
        .expect("a blocking wait4 returns only when the child has exited");
    let f = spawned.finish(status, &usage, Vec::new())?;
    Ok((f.code, f.stdout, f.stderr, f.usage))
}

/// [`run_with_usage`], and while the child runs, every `period` a [`CpuSample`]: the
/// complete lines of `report_file` (db_bench's `--report_file`), the child's CPU time
/// (`utime`, `stime` of `/proc/<pid>/stat`, all its threads) and the bytes it read from
/// the block layer (`read_bytes` of `/proc/<pid>/io`), read one right after the other. `report_file` is removed first, so that no line of an earlier run is counted.
/// The rusage at the end is `wait4`'s, as in [`run_with_usage`]; the samples stop at the
/// last look before the child exited. [`windows::cpu_per_second`] aligns them with the
/// report's seconds.
///
/// Context: blocks until the child exits, sleeping `period` between looks; reaps the child
/// itself (`wait4` with `WNOHANG` at every look), not through `Child`. Sample reads that
/// fail (procfs gone) are skipped, not errors.
pub fn run_sampled(
    cmd: &mut Command,
    scratch: &Path,
    report_file: &Path,
    period: Duration,
) -> io::Result<Finished> {
    match std::fs::remove_file(report_file) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let ticks_per_sec = clock_ticks_per_sec()?;
    let spawned = Spawned::start(cmd, scratch)?;
    let started = Instant::now();
    let stat = PathBuf::from(format!("/proc/{}/stat", spawned.pid));
    let io = PathBuf::from(format!("/proc/{}/io", spawned.pid));
    let mut samples = Vec::new();
    let (status, usage) = loop {
        if let Some(done) = wait4_retrying(spawned.pid, Wait::IfExited)? {
            break done;
        }
        let report_lines = std::fs::read(report_file)
            .map_or(0, |bytes| bytes.iter().filter(|&&b| b == b'\n').count());
        let ticks = std::fs::read_to_string(&stat)
            .ok()
            .and_then(|text| windows::parse_proc_stat(&text));
        let read_bytes = std::fs::read_to_string(&io)
            .ok()
            .and_then(|text| windows::parse_proc_io(&text))
            .unwrap_or(0);
        if let Some((user, sys)) = ticks {
            samples.push(CpuSample {
                at_secs: started.elapsed().as_secs_f64(),
                report_lines,
                user_secs: user as f64 / ticks_per_sec,
                sys_secs: sys as f64 / ticks_per_sec,
                read_bytes,
            });
        }
        std::thread::sleep(period);
    };
    spawned.finish(status, &usage, samples)
}

/// The clock ticks per second of `/proc/<pid>/stat`'s times (`sysconf(_SC_CLK_TCK)`).
fn clock_ticks_per_sec() -> io::Result<f64> {
    // SAFETY: sysconf takes a name and returns a number; no memory is passed.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks <= 0 {
        return Err(io::Error::other("sysconf(_SC_CLK_TCK) gave no clock tick"));
    }
    Ok(ticks as f64)
}

/// A started child whose stdout and stderr go to unnamed files under the scratch dir.
struct Spawned {
    child: std::process::Child,
    pid: libc::pid_t,
    out: File,
    err: File,
}

impl Spawned {
    fn start(cmd: &mut Command, scratch: &Path) -> io::Result<Spawned> {
        let out = tempfile::tempfile_in(scratch)?;
        let err = tempfile::tempfile_in(scratch)?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(err.try_clone()?)
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("{:?}: {e}", cmd.get_program())))?;
        Ok(Spawned {
            pid: child.id() as libc::pid_t,
            child,
            out,
            err,
        })
    }

    /// The child's figures, once [`wait4_retrying`] has reaped it with `status` and `usage`.
    fn finish(
        self,
        status: libc::c_int,
        usage: &libc::rusage,
        samples: Vec<CpuSample>,
    ) -> io::Result<Finished> {
        let Spawned {
            child,
            mut out,
            mut err,
            ..
        } = self;
        // Reaped already: `Child` must not wait again (dropping it does not).
        drop(child);
        let read_all = |f: &mut File| -> io::Result<String> {
            f.rewind()?;
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes)?;
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        };
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            -libc::WTERMSIG(status)
        };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Ok(Finished {
            code,
            stdout: read_all(&mut out)?,
            stderr: read_all(&mut err)?,
            usage: ChildUsage {
                user_secs: secs(usage.ru_utime),
                sys_secs: secs(usage.ru_stime),
                max_rss_kib: usage.ru_maxrss as u64,
                read_blocks: usage.ru_inblock as u64,
                write_blocks: usage.ru_oublock as u64,
            },
            samples,
        })
    }
}

/// Whether [`wait4_retrying`] blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    /// Until the child exits (`wait4(pid, .., 0, ..)`).
    UntilExit,
    /// Only reaps a child that has exited (`WNOHANG`).
    IfExited,
}

/// `wait4(2)` on our child `pid`, again after an `EINTR`: its status and rusage once it
/// has exited and is reaped, `None` while it runs (only with [`Wait::IfExited`]).
fn wait4_retrying(pid: libc::pid_t, how: Wait) -> io::Result<Option<(libc::c_int, libc::rusage)>> {
    let options = match how {
        Wait::UntilExit => 0,
        Wait::IfExited => libc::WNOHANG,
    };
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data; zeroed is a valid value to be overwritten.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waits for our own child `pid`; `status` and `usage` are live
        // out-pointers on this stack.
        let rc = unsafe { libc::wait4(pid, &mut status, options, &mut usage) };
        if rc == pid {
            return Ok(Some((status, usage)));
        }
        if rc == 0 && how == Wait::IfExited {
            return Ok(None);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait4_reports_the_child_cpu_time() {
        let dir = tempfile::tempdir().unwrap();
        let (code, out, _, usage) = run_with_usage(
            Command::new("sh").args([
                "-c",
                "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo done",
            ]),
            dir.path(),
        )
        .unwrap();
        assert_eq!(code, 0);
        assert_eq!(out.trim(), "done");
        assert!(usage.user_secs + usage.sys_secs > 0.0, "{usage:?}");
        let (code, ..) =
            run_with_usage(Command::new("sh").args(["-c", "exit 3"]), dir.path()).unwrap();
        assert_eq!(code, 3);
    }
}
