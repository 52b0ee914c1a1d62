//! The child processes of the multi-process workloads (`keeper`, `restart`, `pressure`),
//! handled in one place: start a role, read what it reports, kill it, reap it, and wait
//! for the keeper a persistent cache leaves behind.
//!
//! Design: a *role* is this binary re-executed with one of its hidden commands
//! (`keeper-owner`, `restart-reader`, `pressure-reader`, `pressure-alloc`). The parent
//! builds its command line with [`RoleArgs`] (the cache options of the run, `--backend`
//! and `--arena-pages`, forwarded by [`RoleArgs::cache_of`] and read by [`RoleCache`]), starts it with
//! [`Role::spawn`] (stdout piped: the role reports one line at a time; stderr shared), reads
//! its lines ([`Role::read_line`], or [`forward_json_lines`] on a thread of their own), and
//! ends it in one of three ways: it exits by itself ([`Role::wait`]), it is SIGKILLed at an
//! instant the workload chooses ([`Role::kill`]), or it is still running at a deadline
//! ([`Role::wait_until`]: killed, [`Outcome::TimedOut`]). A `Role` dropped while its process
//! runs (an error on the way) kills and reaps it, so no role outlives the measurement.
//!
//! On the role's side, [`die_with_parent`] ties its life to the parent's (a parent that
//! dies SIGKILLs it) and [`report_line`] prints one JSON line, whole and flushed.
//!
//! Keepers: a persistent cache's keeper is forked by the role that built the cache, and is
//! orphaned when that role dies. The parent is a child subreaper for the workload
//! ([`Subreaper`]), so an orphaned keeper becomes its child: [`Keeper`] watches it through a
//! pidfd (readable once the process has exited) and reaps it, reading its exit status.
//!
//! Protection: none needed: every value here belongs to the parent's thread that made it
//! (the subreaper flag is the process's, set and cleared by one `Subreaper` value at a
//! time); a forwarding thread owns the stdout it reads and sends what it parsed over a
//! channel.
//!
//! Limits: a role's stderr is this process's stderr (a failing role's error shows there,
//! not in the report). Ending a role is always by its own handle (its pid, never a name).
//! `PR_SET_PDEATHSIG` fires when the thread that started the role exits, which is the
//! workload's own thread here. A keeper that another reaper adopted (the subreaper was not
//! set when its owner died) cannot be reaped here: its exit status is then unknown
//! (`None`), and only what it left (its segment) tells.

use std::fmt::Display;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

use super::Env;
use crate::kernel::Cgroup;
use crate::{Backend, Pages};

/// How often a deadline is checked while a role runs.
const POLL_STEP: Duration = Duration::from_millis(5);
/// How often a keeper waited for by [`Keeper::wait_done`] is looked at.
const KEEPER_STEP: Duration = Duration::from_millis(10);

// ---------------------------------------------------------------------------------------
// The parent's side.

/// The command line of a role: its hidden command, then its options.
#[derive(Clone, Debug)]
pub(crate) struct RoleArgs(Vec<String>);

impl RoleArgs {
    /// The command line of the hidden command `role` (`"keeper-owner"`), no options yet.
    pub(crate) fn new(role: &str) -> RoleArgs {
        RoleArgs(vec![role.to_string()])
    }

    /// Adds `flag value` (`--files 4`).
    pub(crate) fn value(mut self, flag: &str, value: impl Display) -> RoleArgs {
        self.0.push(flag.to_string());
        self.0.push(value.to_string());
        self
    }

    /// Adds the switch `flag` (`--fill`), an option without a value.
    pub(crate) fn switch(mut self, flag: &str) -> RoleArgs {
        self.0.push(flag.to_string());
        self
    }

    /// Adds the cache options of the run that a role's cache must share: `--backend` and
    /// `--arena-pages`, each only where the run names one (a role's default is `auto`).
    pub(crate) fn cache_of(mut self, env: &Env) -> RoleArgs {
        for (flag, value) in [
            ("--backend", Backend::from(env.backend).to_possible_value()),
            (
                "--arena-pages",
                Pages::from(env.arena_pages).to_possible_value(),
            ),
        ] {
            if let Some(v) = value {
                self = self.value(flag, v.get_name());
            }
        }
        self
    }

    pub(crate) fn as_slice(&self) -> &[String] {
        &self.0
    }
}

/// The cache options a role receives from [`RoleArgs::cache_of`], flattened into its
/// command's options (`#[command(flatten)]`): what the parent writes and what the role
/// reads are defined together here.
#[derive(clap::Args, Debug, Clone, Copy)]
pub(crate) struct RoleCache {
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub(crate) backend: Backend,
    #[arg(long, value_enum, default_value_t = Pages::Auto)]
    pub(crate) arena_pages: Pages,
}

impl RoleCache {
    /// `builder` with these options.
    pub(crate) fn apply(self, builder: folio::CacheBuilder) -> folio::CacheBuilder {
        builder
            .backend(self.backend.into())
            .arena_pages(self.arena_pages.into())
    }
}

/// What a role's stdin is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Input {
    /// `/dev/null`: the role is told nothing after its command line.
    Closed,
    /// A pipe the parent writes to ([`Role::take_stdin`]).
    Piped,
}

/// A running role: this binary as a child process, its stdout piped to the parent.
/// Dropped while its process still runs, it kills and reaps it.
pub(crate) struct Role {
    child: Child,
    /// The role's stdout, until [`Role::take_stdout`] hands it to a reader thread.
    out: Option<BufReader<ChildStdout>>,
    /// Its command line, for errors.
    what: String,
}

impl Role {
    /// Starts this binary with `args`, stdout piped, stderr shared, stdin as `input`, in
    /// the memory cgroup `group` if any (entered before the exec, so that every page the
    /// role touches is charged to it).
    ///
    /// Context: the workload's thread; forks and execs, may block on both.
    pub(crate) fn spawn(args: &RoleArgs, input: Input, group: Option<&Cgroup>) -> io::Result<Role> {
        let what = args.as_slice().join(" ");
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.args(args.as_slice())
            .stdin(match input {
                Input::Closed => Stdio::null(),
                Input::Piped => Stdio::piped(),
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(g) = group {
            g.enter_at_exec(&mut cmd)?;
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot start {what}: {e}")))?;
        let out = child.stdout.take().map(BufReader::new);
        assert!(out.is_some(), "a role's stdout is piped");
        assert_eq!(
            child.stdin.is_some(),
            input == Input::Piped,
            "a role's stdin is piped when asked"
        );
        Ok(Role { child, out, what })
    }

    /// The role's command line (`restart-reader --system folio …`), for messages.
    pub(crate) fn what(&self) -> &str {
        &self.what
    }

    /// The pipe to the role's stdin (once; `None` unless spawned with [`Input::Piped`]).
    pub(crate) fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }

    /// The role's stdout, for a thread that reads it ([`forward_json_lines`]); after it,
    /// [`Role::read_line`] has nothing to read.
    pub(crate) fn take_stdout(&mut self) -> BufReader<ChildStdout> {
        self.out.take().expect("a role's stdout is taken once")
    }

    /// Reads the role's next line into `line` (appended); 0 at the end of its output (it
    /// exited or closed its stdout).
    ///
    /// Context: blocks until the role prints a whole line or its stdout closes.
    pub(crate) fn read_line(&mut self, line: &mut String) -> io::Result<usize> {
        let out = self
            .out
            .as_mut()
            .expect("a role's stdout read here is not taken");
        out.read_line(line)
    }

    /// Whether the role still runs (not reaped: a role that exited is reaped here).
    pub(crate) fn running(&mut self) -> io::Result<bool> {
        Ok(self.child.try_wait()?.is_none())
    }

    /// Waits for the role to exit by itself.
    ///
    /// Context: blocks until it exits.
    pub(crate) fn wait(&mut self) -> io::Result<ExitStatus> {
        self.child.wait()
    }

    /// SIGKILLs the role (by its own handle) and reaps it.
    ///
    /// Context: blocks until the kernel has torn the process down.
    pub(crate) fn kill(&mut self) -> io::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        assert!(
            matches!(self.child.try_wait(), Ok(Some(_))),
            "a killed role is reaped"
        );
        Ok(())
    }

    /// Waits for the role to exit, and kills it if it still runs at `deadline` (seconds of
    /// [`mono_secs`]); how it ended.
    ///
    /// Context: sleeps in steps of `POLL_STEP` until then.
    pub(crate) fn wait_until(&mut self, deadline: f64) -> io::Result<Outcome> {
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(Outcome::of(status));
            }
            if mono_secs() >= deadline {
                self.kill()?;
                return Ok(Outcome::TimedOut);
            }
            std::thread::sleep(POLL_STEP);
        }
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        // A role left running by an error: ends only this child, by its own handle.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Forwards the JSON lines of a role's stdout (`from`), parsed as `T` and wrapped by
/// `wrap`, to `to`, on a thread of its own, until the output ends; then sends `end`. A
/// line that does not parse is said on stderr and skipped.
///
/// Context: returns at once; the thread ends with the output or when `to`'s receiver is
/// gone.
pub(crate) fn forward_json_lines<T, E>(
    from: impl io::Read + Send + 'static,
    to: mpsc::Sender<E>,
    wrap: fn(T) -> E,
    end: E,
) where
    T: for<'de> Deserialize<'de> + 'static,
    E: Send + 'static,
{
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            match serde_json::from_str::<T>(&line) {
                Ok(parsed) => {
                    if to.send(wrap(parsed)).is_err() {
                        return;
                    }
                }
                Err(e) => eprintln!("folio-bench: a child printed `{line}` ({e})"),
            }
        }
        let _ = to.send(end);
    });
}

/// How a child process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Not started (the role that it waits on had died before).
    NotRun,
    Exited(i32),
    Signalled(i32),
    /// Still running at its deadline: killed by this parent.
    TimedOut,
}

impl Outcome {
    pub(crate) fn of(status: ExitStatus) -> Outcome {
        match (status.code(), status.signal()) {
            (Some(code), _) => Outcome::Exited(code),
            (None, Some(signal)) => Outcome::Signalled(signal),
            (None, None) => Outcome::Exited(-1),
        }
    }

    /// Whether a signal this parent did not send ended it.
    pub(crate) fn is_signalled(self) -> bool {
        matches!(self, Outcome::Signalled(_))
    }

    /// The exit status as a shell gives it: the exit code, or 128 + the signal's number;
    /// `None` for a process that never ran.
    pub(crate) fn code(self) -> Option<i32> {
        match self {
            Outcome::NotRun => None,
            Outcome::Exited(code) => Some(code),
            Outcome::Signalled(signal) => Some(128 + signal),
            Outcome::TimedOut => Some(128 + libc::SIGKILL),
        }
    }

    /// For a report: a SIGKILL this parent did not send is the OOM killer's (this parent
    /// kills only at a deadline, which is `TimedOut`).
    pub(crate) fn describe(self) -> String {
        match self {
            Outcome::NotRun => "not run".into(),
            Outcome::Exited(code) => format!("exit {code}"),
            Outcome::Signalled(libc::SIGKILL) => "killed (SIGKILL: the OOM killer's)".into(),
            Outcome::Signalled(signal) => format!("killed by signal {signal}"),
            Outcome::TimedOut => "timed out (killed by folio-bench)".into(),
        }
    }
}

/// `CLOCK_MONOTONIC` in seconds: the same clock in every process of the machine, so that
/// the lines of several roles fall on one time axis.
pub fn mono_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

// ---------------------------------------------------------------------------------------
// Keepers.

/// This process as a child subreaper for its lifetime: a keeper, orphaned when the process
/// that forked it exits, becomes our child, so that its exit status can be read.
pub(crate) struct Subreaper;

impl Subreaper {
    /// Context: the workload's thread, before it starts a role whose cache has a keeper.
    pub(crate) fn become_one() -> io::Result<Subreaper> {
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes a flag; no memory is passed.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Subreaper)
    }
}

impl Drop for Subreaper {
    fn drop(&mut self) {
        // SAFETY: as in `become_one`.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0) };
    }
}

/// A pidfd: it polls readable once its process has exited.
struct PidFd(OwnedFd);

impl PidFd {
    fn open(pid: u32) -> io::Result<PidFd> {
        // SAFETY: pidfd_open takes a pid and flags; the result is checked.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor nothing else owns.
        Ok(PidFd(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
    }

    /// Waits up to `timeout` for the process to exit; `true` if it did.
    fn wait_exit(&self, timeout: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut fd = libc::pollfd {
                fd: self.0.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd, valid for the call.
            let n =
                unsafe { libc::poll(&mut fd, 1, left.as_millis().min(i32::MAX as u128) as i32) };
            match n {
                1.. => return Ok(true),
                0 => return Ok(false),
                _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
                _ => return Err(io::Error::last_os_error()),
            }
        }
    }
}

/// A keeper watched through its pidfd: our child (we are a subreaper) once its owner died.
pub(crate) struct Keeper {
    pid: u32,
    fd: PidFd,
}

impl Keeper {
    /// Watches keeper `pid`, a keeper still there (so the pid is its own). Fails if it is
    /// gone already (then [`reap_keeper`] reaps what is left of it).
    pub(crate) fn watch(pid: u32) -> io::Result<Keeper> {
        assert!(pid > 1, "a keeper's pid: {pid}");
        Ok(Keeper {
            pid,
            fd: PidFd::open(pid)?,
        })
    }

    /// Waits for the keeper to exit, a look every `step`, calling `each` with the time
    /// since `since` after every look: the time since `since` at which its exit was seen,
    /// or `None` if `timeout` (since `since`) passed first. Does not reap it.
    ///
    /// Context: blocks up to `timeout` and a step.
    pub(crate) fn wait_exit(
        &self,
        since: Instant,
        step: Duration,
        timeout: Duration,
        mut each: impl FnMut(Duration),
    ) -> io::Result<Option<Duration>> {
        assert!(step > Duration::ZERO, "a look at a keeper waits");
        loop {
            let exited = self.fd.wait_exit(step)?;
            let now = since.elapsed();
            each(now);
            if exited {
                return Ok(Some(now));
            }
            if now > timeout {
                return Ok(None);
            }
        }
    }

    /// Reaps the exited keeper: how it ended, `None` if it is not our child.
    pub(crate) fn reap(self) -> Option<Outcome> {
        reap_keeper(self.pid)
    }

    /// Waits up to `timeout` for the keeper to be done: to exit (then it is reaped: an
    /// error if its status is not 0, `who` naming the workload in the message), or to say
    /// by `stays` that it stays on (a kept segment's steward, its writeback over: it is
    /// left running); the time since `since`.
    ///
    /// Context: blocks up to `timeout` and a step.
    pub(crate) fn wait_done(
        self,
        since: Instant,
        timeout: Duration,
        who: &str,
        mut stays: impl FnMut() -> bool,
    ) -> io::Result<Duration> {
        let pid = self.pid;
        loop {
            let exited = self.fd.wait_exit(KEEPER_STEP)?;
            let now = since.elapsed();
            if exited {
                return match self.reap().and_then(Outcome::code) {
                    Some(code) if code != 0 => Err(io::Error::other(format!(
                        "{who}: keeper {pid} exited with status {code}"
                    ))),
                    _ => Ok(now),
                };
            }
            if stays() {
                return Ok(now);
            }
            if now > timeout {
                return Err(io::Error::other(format!(
                    "{who}: keeper {pid} was not done within {} s",
                    timeout.as_secs()
                )));
            }
        }
    }
}

/// Reaps the exited keeper `pid` (our child as a subreaper): how it ended, or `None` if it
/// is not our child (adopted by another reaper: then only its segment tells).
///
/// Context: blocks until `pid` has exited, if it is our child.
pub(crate) fn reap_keeper(pid: u32) -> Option<Outcome> {
    let mut status = 0;
    // SAFETY: waits for a process that has exited; `status` is a valid out-pointer.
    let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
    if rc != pid as libc::pid_t {
        return None;
    }
    Some(Outcome::of(ExitStatus::from_raw(status)))
}

// ---------------------------------------------------------------------------------------
// The role's side.

/// Ties this role's life to its parent's: a parent that dies SIGKILLs it (and a cache's
/// keeper then finishes what the role left).
///
/// Context: a role's process, first thing in its command.
pub(crate) fn die_with_parent() {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number; no memory is passed.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
}

/// Prints `line` as one JSON line on stdout and flushes it (the parent waits on it). The
/// stdout lock is held for the whole line: lines of several threads never interleave.
///
/// Context: any thread of a role; blocks while the parent's pipe is full.
pub(crate) fn report_line<T: Serialize + ?Sized>(line: &T) {
    match serde_json::to_string(line) {
        Ok(text) => {
            let mut out = io::stdout().lock();
            // A parent that went away cannot read it: nothing to do then.
            let _ = writeln!(out, "{text}");
            let _ = out.flush();
        }
        Err(e) => eprintln!("folio-bench: unprintable line: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_read_as_a_shell_reads_them() {
        // Raw wait statuses: exit code in bits 8-15, a terminating signal in bits 0-6.
        assert_eq!(
            Outcome::of(ExitStatus::from_raw(3 << 8)),
            Outcome::Exited(3)
        );
        assert_eq!(
            Outcome::of(ExitStatus::from_raw(libc::SIGKILL)),
            Outcome::Signalled(libc::SIGKILL)
        );
        assert_eq!(Outcome::Exited(0).code(), Some(0));
        assert_eq!(Outcome::Signalled(libc::SIGTERM).code(), Some(128 + 15));
        assert_eq!(Outcome::NotRun.code(), None);
        assert!(!Outcome::TimedOut.is_signalled());
    }

    #[test]
    fn role_args_keep_their_order() {
        let args = RoleArgs::new("keeper-owner")
            .value("--files", 4)
            .switch("--fill");
        assert_eq!(args.as_slice(), ["keeper-owner", "--files", "4", "--fill"]);
    }
}
