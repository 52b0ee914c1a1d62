//! The harness of the tests that run themselves again as the child they kill
//! (`tests/crash.rs`, `tests/keeper_crash.rs`, `tests/segment_security.rs`): such a test
//! has no libtest harness (`harness = false` in Cargo.toml), so that no placeholder test
//! stands in for the child, and its `main` is [`main`] here.
//!
//! [`main`] runs the child when the test's child variable is set (the child is the test
//! binary, `std::env::current_exe`, run with it), and otherwise the test functions the
//! arguments select, honouring what `cargo test` passes: `--list`, name filters,
//! `--exact`, `--skip` and `--ignored` (no test here is ignored). A failing test panics,
//! which ends the run with 101, as libtest's does.
//!
//! [`Child`] runs the child and reads its stdout, one line per event ([`say`] writes
//! them), on a thread, so that the parent can wait for a line with a deadline.
//! [`become_subreaper`] and [`wait_for_exit`] wait for a process the child started;
//! [`stop_and_wait`] holds one still (a test's lever: it stops it at a point of the
//! test's choosing instead of racing it).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A test of a harness-less test binary: its name and its body.
pub type Test = (&'static str, fn());

/// The test binary's `main` (module docs): runs `child` with the value of `child_env` if
/// it is set, else the selected `tests`.
pub fn main(tests: &[Test], child_env: &str, child: fn(&str)) {
    if let Some(spec) = std::env::var_os(child_env) {
        child(spec.to_str().expect("a UTF-8 child spec"));
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for (name, _) in tests {
            println!("{name}: test");
        }
        return;
    }
    let selected: Vec<&Test> = tests.iter().filter(|(n, _)| selected(&args, n)).collect();
    let filtered = tests.len() - selected.len();
    let plural = if selected.len() == 1 { "" } else { "s" };
    println!("\nrunning {} test{plural}", selected.len());
    let started = Instant::now();
    for (name, run) in &selected {
        run();
        println!("test {name} ... ok");
    }
    println!(
        "\ntest result: ok. {} passed; 0 failed; 0 ignored; 0 measured; {filtered} filtered out; finished in {:.2}s\n",
        selected.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Whether the harness arguments `args` select the test `name` (module docs).
fn selected(args: &[String], name: &str) -> bool {
    let mut filters = Vec::new();
    let mut skips = Vec::new();
    let (mut exact, mut ignored_only) = (false, false);
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--exact" => exact = true,
            "--ignored" => ignored_only = true,
            "--skip" => skips.extend(args.next()),
            // Options that take a value as the next argument.
            "--test-threads" | "--format" | "--color" | "--logfile" | "-Z" | "--shuffle-seed" => {
                args.next();
            }
            a if a.starts_with('-') => {}
            filter => filters.push(filter),
        }
    }
    let matches = |pattern: &str| {
        if exact {
            pattern == name
        } else {
            name.contains(pattern)
        }
    };
    !ignored_only
        && (filters.is_empty() || filters.iter().any(|f| matches(f)))
        && !skips.iter().any(|s| name.contains(s.as_str()))
}

/// One line to the parent, written whole (one `write` of a few bytes into a pipe, which
/// is atomic among the child's threads) before the child goes on; a parent that is gone
/// ends the child.
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    if out
        .write_all(format!("{line}\n").as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        std::process::exit(2);
    }
}

/// A child: this test binary run again with `child_env` set to a spec, its stdout read
/// line by line on a thread.
pub struct Child {
    process: std::process::Child,
    lines: Receiver<String>,
    reader: Option<JoinHandle<()>>,
}

impl Child {
    /// Starts the child; its stderr is this process's.
    pub fn spawn(child_env: &str, spec: &str) -> Child {
        let mut process = Command::new(std::env::current_exe().expect("the test binary"))
            .env(child_env, spec)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child");
        let stdout = process.stdout.take().expect("the child's stdout");
        let (lines_tx, lines) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                // A line cut by the kill ends without a newline: `lines` still returns it,
                // but each line is one atomic `write` (`say`).
                let Ok(line) = line else { break };
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        Child {
            process,
            lines,
            reader: Some(reader),
        }
    }

    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// The child's next line, waiting at most `wait`; a child that says nothing in time
    /// (or ends first) is killed and fails the test, naming `what` it should have said.
    pub fn next_line(&mut self, wait: Duration, what: &str) -> String {
        match self.lines.recv_timeout(wait) {
            Ok(line) => line,
            Err(e) => {
                let _ = self.process.kill();
                let status = self.process.wait();
                let why = match e {
                    RecvTimeoutError::Timeout => format!("within {wait:?}"),
                    RecvTimeoutError::Disconnected => "before its stdout closed".to_owned(),
                };
                panic!("the child never said {what} {why} (status {status:?}; its stderr is above)")
            }
        }
    }

    /// The lines the child has said that were not read yet, without waiting.
    pub fn lines_so_far(&mut self) -> Vec<String> {
        self.lines.try_iter().collect()
    }

    /// SIGKILLs the child and reaps it; fails the test if it had ended before.
    pub fn kill(&mut self) {
        self.process.kill().expect("kill the child");
        let status = self.process.wait().expect("wait for the child");
        assert_killed(status);
    }

    /// Every line the child said that was not read yet, once its stdout is closed (by
    /// every process that holds it: a process the child started may hold it too).
    pub fn rest_of_lines(&mut self) -> Vec<String> {
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the reader thread");
        }
        self.lines.try_iter().collect()
    }
}

fn assert_killed(status: ExitStatus) {
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the child ended before it was killed: {status:?} (its stderr is above)"
    );
}

/// Makes this process the subreaper of its descendants: a process a child starts as its
/// own grandchild (a keeper, which is nobody's zombie that way) is adopted by this process
/// rather than by init, so that it can be waited for and its exit status read.
pub fn become_subreaper() {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes integers; no memory is passed.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
    assert_eq!(rc, 0, "prctl(PR_SET_CHILD_SUBREAPER)");
}

/// Stops `pid` with SIGSTOP and waits until it is stopped (`/proc/<pid>/stat` says `T`):
/// from then on it runs no instruction until a SIGCONT or a SIGKILL. A test lever, not a
/// timing: what the process does next is what the test lets it do.
pub fn stop_and_wait(pid: u32, what: &str) {
    // SAFETY: kill takes integers.
    let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
    assert_eq!(
        rc,
        0,
        "{what} ({pid}): SIGSTOP: {}",
        std::io::Error::last_os_error()
    );
    let started = Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state is the first field after the command name, which ends with the last ')'.
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        if matches!(state, Some('T' | 't')) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what} ({pid}) did not stop: state {state:?}"
        );
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Waits until `pid`, this process's child (or, after `become_subreaper`, a descendant it
/// adopted), has exited, and returns its wait status; fails the test, naming `what`, if it
/// runs longer than `wait`.
pub fn wait_for_exit(pid: u32, wait: Duration, what: &str) -> i32 {
    let started = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waitpid with an out-pointer to a live i32.
        let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
        if rc == pid as libc::pid_t {
            return status;
        }
        assert!(
            rc == 0,
            "{what} ({pid}): waitpid: {} (not this process's child?)",
            std::io::Error::last_os_error()
        );
        assert!(
            started.elapsed() < wait,
            "{what} ({pid}) is still running after {wait:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}
