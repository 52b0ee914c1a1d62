//! A process's membership of a domain (issue 45 step 2): it attaches through the
//! steward's socket, maps the region, holds the steward's pidfd, starts a new steward when
//! it finds none (or finds it dead), and detaches cleanly.
//!
//! # Attach
//!
//! A1. Connect to `<name>.v12.sock` in the domain's directory (`SOCK_SEQPACKET`; the
//!     files are named by the region's version: domain.rs, "Files"). No socket, or
//!     nobody listening: no steward runs; start one (`spawn`: the election in steward.rs
//!     decides which of the processes' stewards stays) and connect again. A steward that
//!     could not be started because a file at the region's name is not a region of ours
//!     (`Domain::refusal`) ends the attach with that error.
//! A2. Send the request: this process's start time (`/proc/self/stat` field 22) and its
//!     share weight (record.rs, `Weight`: the steward writes it into our record). The
//!     steward takes the peer's pid from the kernel (`SO_PEERCRED`) and its pidfd while we
//!     are connected, checked against that start time (steward.rs).
//! A3. The answer: our slot and generation (the steward's attach CAS made it LIVE and
//!     wrote its record), and the steward's pid and start time. We map the region and take
//!     the steward's pidfd (checked the same way). The answer is waited for on the one
//!     connection while it lives (a steward that dies ends it: A1 again), as patience
//!     lasts (below): a new connection per wait would leave the old ones in a starved
//!     steward's backlog, each admitted later into a slot nobody uses.
//!
//! A child this process forks inherits neither the region's mapping (`MADV_DONTFORK`)
//! nor the connection (its number reads `/dev/null` there: the segment's fork guard):
//! domain.rs, "Forks".
//!
//! Detach: our slot LIVE(g) -> FREE(g) (we hold no lock and no lease), then the
//! connection closes; the steward ends its watch when it sees both.
//!
//! **The steward's death**: a member that waits for a lock (`Run::wait`) looks at the
//! steward's pidfd every `STEWARD_CHECK_WAITS` waits, and after every park that timed
//! out (`Run::parked`: a dead steward wakes nobody) (`ensure_steward`): a holder that
//! died is only marked dead by a steward, so a waiter whose steward is gone starts a new
//! one (the election decides which, if several do), which finds the live processes again
//! from the slot records (steward.rs, step 3) and marks the dead ones. An attach that
//! finds no steward (A1) does the same.
//!
//! # Patience
//!
//! An attach, and a wait for a new steward, fail after `ATTACH_WAIT` of patience, not of
//! the clock's time: the clock's time less the time spent runnable but waiting for a CPU
//! (`/proc/<task>/schedstat`'s run delay) by the waiting thread or by the process it
//! waits for (the steward the connection names, `SO_PEERCRED`; a candidate steward, whose
//! pid its starter's first child tells), the longer of the two between each two looks.
//! On a machine loaded far past its cores, a process can wait tens of seconds for a CPU
//! (seen here: 2 cores, two kill tests and CI at once, a sleeper starved 20.9 s, a
//! steward and a freshly forked candidate each over 20 s, the kernel's own workers 44 s);
//! an attach then waits rather than failing a database's open. A steward that is stopped
//! (`SIGSTOP`), or asleep without answering, is not waiting for a CPU: its time counts,
//! and the attach fails with `TimedOut` after `ATTACH_WAIT`, as before. Limits: a pid
//! reused between two looks would lend another process's wait (the awaited process died
//! meanwhile: its connection, or its verdict's socket, ends the wait at the next look).
//!
//! Protection: the connection and the member's fields are this process's (the steward we
//! know under a mutex, the counts atomics: a member is shared by the threads of its
//! process, `shared::reader`); the region's words by their protocols. Limits: an attach,
//! and a wait for a new steward, give up after `ATTACH_WAIT` of patience (an error,
//! never a hang, but for a machine that never runs the steward);
//! starting a steward forks this process (`spawn`'s context).

use std::io;
use std::os::unix::io::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::domain::{Domain, DomainFiles, Geometry, Pidfd};
use super::futex::Parked;
use super::record::Weight;
use super::steward::{self, receive_words, send_words, socket_address, LOST, WON};
use super::terms::Unkillable;
use super::{Died, Holder, ProcessId, Run, SlotIndex, Step};
use crate::segment::{DiskDir, SegmentDir};

/// The steward's answers (the first word).
pub(crate) const ANSWER_ATTACHED: u64 = 1;
pub(crate) const ANSWER_FULL: u64 = 2;

/// The request's first word.
const REQUEST_ATTACH: u64 = 0x6174_7461_6368;

/// How long an attach, or a wait for a new steward, may take before it fails: the
/// patience (module docs, "Patience"), not the clock's time.
const ATTACH_WAIT: Duration = Duration::from_secs(20);
/// How often a wait looks at its patience.
const PATIENCE_LOOK: Duration = Duration::from_millis(100);
/// How often a member with no steward starts one while it waits for it.
const RESPAWN_EVERY: Duration = Duration::from_millis(50);
/// A waiting member checks the steward every this many waits (one `poll` each).
const STEWARD_CHECK_WAITS: u32 = 64;

/// Which domain, and its size and steward's linger if this attach makes it.
#[derive(Clone, Debug)]
pub(crate) struct DomainConfig {
    /// The domain's directory: a private home (`SegmentDir`'s checks; tmpfs).
    pub(crate) dir: PathBuf,
    /// The domain's name (its files' stem: a plain file name).
    pub(crate) name: String,
    /// The region's geometry, used by the steward that makes it.
    pub(crate) geometry: Geometry,
    /// How long a steward stays with nobody attached; then it removes the region and
    /// leaves (steward.rs, step 5).
    pub(crate) linger: Duration,
    /// A directory read in place of `/proc` for the memory figures by the steward this
    /// attach starts (`meminfo`, `pressure/memory`; no cgroup): a test's simulated
    /// machine (`KeptMemory::memory_files`'s lever). `None`: the machine's.
    pub(crate) memory_files: Option<PathBuf>,
    /// This member's share weight (record.rs, `Weight`; queue.rs, "Owners and shares").
    pub(crate) weight: Weight,
}

/// The attach request (A2).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request {
    pub(crate) start: u64,
    /// The member's share weight (record.rs, `Weight`).
    pub(crate) weight: Weight,
}

impl Request {
    /// The request on `conn`, if one arrives within `wait` (and names a weight in range).
    pub(crate) fn receive(conn: &OwnedFd, wait: Duration) -> Option<Request> {
        let [tag, start, weight] = receive_words::<3>(conn, wait)?;
        let weight = Weight::new(u32::try_from(weight).ok()?)?;
        (tag == REQUEST_ATTACH).then_some(Request { start, weight })
    }
}

/// A process attached to a domain (module docs).
#[derive(Debug)]
pub(crate) struct Member {
    config: DomainConfig,
    dir: SegmentDir,
    domain: Domain,
    conn: OwnedFd,
    /// `conn` registered with the fork guard (domain.rs, "Forks"): after it in the
    /// struct, so dropped after `conn` is closed.
    _conn_guard: crate::segment::ForkGuard,
    me: Holder,
    /// The steward we know, and its pidfd (`None`: found dead, or never opened).
    steward: Mutex<(ProcessId, Option<Pidfd>)>,
    /// Stewards this member started (tests: that a survivor elected one).
    started: AtomicU32,
    waits: AtomicU32,
}

impl Member {
    /// Attaches to the domain `config` names, starting its steward if none runs (A1-A3).
    ///
    /// Context: forks to start a steward (`spawn`). Blocks up to `ATTACH_WAIT` of patience
    /// (module docs).
    /// Errors: the directory's checks (`SegmentDir::open`); `InvalidInput` for a bad name;
    /// `Other` for a full domain; `InvalidData` for a file at the region's name that no
    /// steward of ours can use (`Domain::refusal`: left as it is); `TimedOut` when no
    /// steward answered in time.
    pub(crate) fn attach(config: &DomainConfig) -> io::Result<Member> {
        let dir = SegmentDir::open(&config.dir, DiskDir::Refused)?;
        let files = DomainFiles::of(&config.name)?;
        let address = socket_address(&dir.join(&files.socket))?;
        let me = ProcessId::me()?;
        let started = AtomicU32::new(0);
        let mut patience = Patience::new(ATTACH_WAIT);
        let mut last_spawn: Option<Instant> = None;
        let (conn, holder, steward) = loop {
            if !patience.lasts() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "folio: no steward answered the attach",
                ));
            }
            match connect(&address) {
                Ok((conn, steward_pid)) => {
                    let weight = u64::from(config.weight.get());
                    if send_words(&conn, &[REQUEST_ATTACH, me.start, weight]).is_err() {
                        // A steward that left (or died) with us in its backlog: again.
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                    match answer(&conn, steward_pid, &mut patience) {
                        Some([ANSWER_ATTACHED, slot, generation, pid, start]) => {
                            let holder = Holder {
                                slot: SlotIndex(u16::try_from(slot).map_err(|_| bad_answer())?),
                                generation: u32::try_from(generation).map_err(|_| bad_answer())?,
                            };
                            let pid = u32::try_from(pid).map_err(|_| bad_answer())?;
                            break (conn, holder, ProcessId { pid, start });
                        }
                        Some([ANSWER_FULL, ..]) => {
                            return Err(io::Error::other(
                                "folio: every slot of the domain is taken",
                            ))
                        }
                        // Refused, a steward that left, or patience out (the loop
                        // ends): again.
                        _ => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
                Err(_) => {
                    if last_spawn.is_none_or(|at| at.elapsed() >= RESPAWN_EVERY) {
                        last_spawn = Some(Instant::now());
                        if spawn(config, &mut patience)? == Elected::Won {
                            started.fetch_add(1, Ordering::Relaxed);
                        } else if let Some(e) = Domain::refusal(&dir, &files) {
                            // No steward can make the region (a file at its name that is
                            // none of this version's: domain.rs, "Files"): say why now
                            // rather than time out.
                            return Err(e);
                        }
                    } else {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }
        };
        let conn_guard = crate::segment::register_for_fork(conn.as_fd())?;
        let domain = Domain::open(&dir, &files)?;
        if holder.slot.0 >= domain.geometry().slots || !domain.slots().is_live(holder) {
            return Err(bad_answer());
        }
        let pidfd = steward.open();
        Ok(Member {
            config: config.clone(),
            dir,
            domain,
            conn,
            _conn_guard: conn_guard,
            me: holder,
            steward: Mutex::new((steward, pidfd)),
            started,
            waits: AtomicU32::new(0),
        })
    }

    /// The number of our connection to the steward (tests: a forked child looks at it).
    #[cfg(test)]
    pub(crate) fn conn_fd(&self) -> RawFd {
        self.conn.as_raw_fd()
    }

    /// Our slot and generation.
    pub(crate) fn holder(&self) -> Holder {
        self.me
    }

    pub(crate) fn domain(&self) -> &Domain {
        &self.domain
    }

    /// Names this process's keeper (`pid`: a persistent cache's, `keeper::spawn`) in our
    /// slot's record (record.rs, "The keeper"), so that the steward, at our death, keeps
    /// the marks of the pages we wrote until that keeper has written them back.
    ///
    /// Context: before this process's first write puts a page into the domain.
    /// Errors: `start_time`'s (the keeper gone already: `NotFound`).
    pub(crate) fn name_keeper(&self, pid: u32) -> io::Result<()> {
        let keeper = ProcessId {
            pid,
            start: super::domain::start_time(pid)?,
        };
        self.domain.records().set_keeper(self.me, keeper);
        Ok(())
    }

    /// How many stewards this member started (the elections it won for the domain).
    pub(crate) fn stewards_started(&self) -> u32 {
        self.started.load(Ordering::Relaxed)
    }

    /// The steward as we know it.
    pub(crate) fn steward(&self) -> ProcessId {
        self.known_steward().0
    }

    /// The steward we know (a poisoned lock's value is still the last one stored: every
    /// store is one assignment).
    fn known_steward(&self) -> MutexGuard<'_, (ProcessId, Option<Pidfd>)> {
        self.steward.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A clean detach (module docs).
    ///
    /// Context: we hold no lock and no lease of the domain.
    pub(crate) fn detach(self) {
        self.domain.slots().detach(self.me);
        drop(self.conn);
    }

    /// Makes sure a steward runs (module docs, the steward's death): if ours is dead,
    /// waits for the one the header names next, starting one as long as none is named.
    /// Returns the steward.
    ///
    /// Context: forks to start a steward. Blocks up to `ATTACH_WAIT` of patience (module
    /// docs).
    /// Errors: `TimedOut` if no steward could be found; `spawn`'s.
    pub(crate) fn ensure_steward(&self) -> io::Result<ProcessId> {
        let dead = {
            let known = self.known_steward();
            if known.1.as_ref().is_some_and(|pidfd| !pidfd.is_dead()) {
                return Ok(known.0);
            }
            known.0
        };
        let mut patience = Patience::new(ATTACH_WAIT);
        let mut last_spawn: Option<Instant> = None;
        while patience.lasts() {
            let named = self.domain.steward();
            if named != dead {
                if let Some(pidfd) = named.open() {
                    *self.known_steward() = (named, Some(pidfd));
                    return Ok(named);
                }
            }
            if last_spawn.is_none_or(|at| at.elapsed() >= RESPAWN_EVERY) {
                last_spawn = Some(Instant::now());
                if spawn(&self.config, &mut patience)? == Elected::Won {
                    self.started.fetch_add(1, Ordering::Relaxed);
                }
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "folio: no new steward for the domain",
        ))
    }

    /// The directory's path (for messages).
    pub(crate) fn dir_path(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Run for Member {
    #[inline]
    fn at(&self, step: Step) -> Result<(), Died> {
        // A child of a kill test stops where its lever says (terms.rs `stop_lever`).
        #[cfg(test)]
        super::terms::stop_lever::at(step);
        #[cfg(not(test))]
        let _ = step;
        Ok(())
    }

    fn abort_on_unwind(&self) -> bool {
        true
    }

    /// Spins and yields; every `STEWARD_CHECK_WAITS` waits, makes sure a steward runs
    /// (a dead holder is marked dead only by one).
    fn wait(&self, holder: Holder) {
        let waits = self.waits.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        if waits % STEWARD_CHECK_WAITS == 0 {
            // A failure is retried at the next check.
            let _ = self.ensure_steward();
        }
        Unkillable.wait(holder);
    }

    /// A park that timed out: the steward may be dead (it would have woken us at the
    /// holder's death), so make sure one runs.
    fn parked(&self, _holder: Holder, outcome: Parked) {
        if outcome == Parked::TimedOut {
            // A failure is retried after the next timeout.
            let _ = self.ensure_steward();
        }
    }
}

fn bad_answer() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "folio: the steward's answer names no slot",
    )
}

/// A connection to the attach socket at `address`, and the pid of the steward that
/// listens there (`SO_PEERCRED`).
///
/// Errors: `socket`'s and `connect`'s (`NotFound`, `ConnectionRefused`: no steward).
fn connect(address: &libc::sockaddr_un) -> io::Result<(OwnedFd, u32)> {
    // SAFETY: socket and connect on a new descriptor we own; results checked.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = OwnedFd::from_raw_fd(fd);
        if libc::connect(
            fd.as_raw_fd(),
            std::ptr::from_ref(address).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        // The listener is ours (the directory is private), but its uid is checked too.
        let peer = steward::peer_credentials(&fd).ok_or_else(io::Error::last_os_error)?;
        if peer.uid != crate::segment::my_uid() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "folio: the domain's socket belongs to another user",
            ));
        }
        let steward = u32::try_from(peer.pid).map_err(|_| bad_answer())?;
        Ok((fd, steward))
    }
}

/// The steward's answer on `conn` (A3), waited for as long as the connection lives and
/// `patience` lasts, `steward`'s waits for a CPU not counted (module docs, "Patience");
/// `None` when the connection ended, said something else, or patience ran out.
fn answer(conn: &OwnedFd, steward: u32, patience: &mut Patience) -> Option<[u64; 5]> {
    patience.await_process(Some(steward));
    let mut said = false;
    while !said && patience.lasts() {
        said = steward::readable(conn, PATIENCE_LOOK);
    }
    patience.await_process(None);
    said.then(|| receive_words::<5>(conn, Duration::ZERO))
        .flatten()
}

/// A wait's patience (module docs, "Patience"): its limit, against the clock's time but
/// for the time the waiting thread, or the process it waits for, spent waiting for a CPU.
///
/// Context: looked at from the thread that made it (its own waits are that thread's).
#[derive(Debug)]
pub(super) struct Patience {
    limit: Duration,
    started: Instant,
    /// The time since `started` not counted: waits for a CPU.
    starved: Duration,
    /// This thread's time waiting for a CPU at the last look (`run_delay`).
    own: Duration,
    /// The process waited for, and its time waiting for a CPU at the last look. `None`:
    /// nobody known.
    awaited: Option<(u32, Duration)>,
}

impl Patience {
    pub(super) fn new(limit: Duration) -> Patience {
        Patience {
            limit,
            started: Instant::now(),
            starved: Duration::ZERO,
            own: run_delay(OWN_TASK).unwrap_or_default(),
            awaited: None,
        }
    }

    /// From now on, waits for `pid` (`None`: for nobody known). The time until now is
    /// counted as the last process waited for spent it.
    pub(super) fn await_process(&mut self, pid: Option<u32>) {
        self.lasts();
        self.awaited = pid.map(|pid| (pid, run_delay(&pid.to_string()).unwrap_or_default()));
    }

    /// Whether any patience is left: the time since the start, less, between each two
    /// looks, the longer of what this thread and the process waited for spent waiting for
    /// a CPU.
    ///
    /// Both, because the kernel counts a wait for a CPU when it ends: a process still
    /// waiting has not counted it yet, but a waiter that was starved with it has, once it
    /// runs again to look. Summed over the whole wait, not look by look: a wait counted
    /// just after a look (the thread preempted between its clock and its `schedstat`)
    /// is then not lost to a look whose own time was shorter.
    pub(super) fn lasts(&mut self) -> bool {
        let mut starved = Duration::ZERO;
        if let Some(delay) = run_delay(OWN_TASK) {
            starved = delay.saturating_sub(self.own);
            self.own = delay;
        }
        if let Some((pid, before)) = &mut self.awaited {
            if let Some(delay) = run_delay(&pid.to_string()) {
                starved = starved.max(delay.saturating_sub(*before));
                *before = delay;
            }
        }
        self.starved += starved;
        self.started.elapsed().saturating_sub(self.starved) < self.limit
    }
}

/// `run_delay`'s name for the calling thread.
const OWN_TASK: &str = "thread-self";

/// The time `task` (a pid: its main thread; or `OWN_TASK`) has spent runnable but
/// waiting for a CPU (`/proc/<task>/schedstat`'s second field, in ns), or `None` if it
/// cannot be read (the process gone, or a kernel without schedstats).
fn run_delay(task: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{task}/schedstat")).ok()?;
    let ns = stat.split_whitespace().nth(1)?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// What a started steward said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Elected {
    /// It won the election: it is the steward.
    Won,
    /// Another steward holds the election (or it failed before it): not this one.
    Lost,
}

/// Starts a steward for `config`'s domain (steward.rs, step 1) and returns what it said
/// once it won or lost the election.
///
/// The candidate tells on a `SOCK_SEQPACKET` pair, one message each, in either order:
/// its pid (4 bytes, from the first child, which forked it) and its verdict (1 byte,
/// `WON` or `LOST`). The verdict is waited for as `patience` lasts, the candidate's waits
/// for a CPU not counted (module docs, "Patience"): a candidate starved on a loaded
/// machine is waited for, not taken for lost.
///
/// Context: forks this process; the children call only what is safe after a fork of a
/// threaded process with glibc (system calls, and the allocator, whose locks glibc's fork
/// takes and resets), as `keeper::spawn`'s do. Blocks until the candidate said, ended,
/// or patience ran out.
/// Errors: `socketpair`'s and `fork`'s.
fn spawn(config: &DomainConfig, patience: &mut Patience) -> io::Result<Elected> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair fills our out-array of two descriptors; the result is checked.
    let made = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if made != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: new descriptors nothing else owns.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fork has no preconditions; the children's context is this function's.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // The first child forks the steward, tells its pid and exits, so that the
        // steward is nobody's zombie (init, or the nearest subreaper, adopts it).
        // SAFETY: as above.
        let code = match unsafe { libc::fork() } {
            0 => steward::main(config, theirs.as_raw_fd()),
            -1 => 1,
            candidate => {
                let pid = (candidate as u32).to_ne_bytes();
                // SAFETY: a send of our 4 bytes on our socket.
                unsafe {
                    libc::send(
                        theirs.as_raw_fd(),
                        pid.as_ptr().cast(),
                        4,
                        libc::MSG_NOSIGNAL,
                    )
                };
                0
            }
        };
        // SAFETY: _exit ends the child at once, running no destructor of its parent's.
        unsafe { libc::_exit(code) }
    }
    if child < 0 {
        return Err(io::Error::last_os_error());
    }
    drop(theirs);
    let mut status = 0;
    // SAFETY: waits for our own child, which exits at once.
    unsafe { libc::waitpid(child, &mut status, 0) };
    let elected = loop {
        if !steward::readable(&ours, PATIENCE_LOOK) {
            if patience.lasts() {
                continue;
            }
            break Elected::Lost;
        }
        let mut message = [0u8; 4];
        match (steward::receive_now(&ours, &mut message), message[0]) {
            (4, _) => patience.await_process(Some(u32::from_ne_bytes(message))),
            (1, WON) => break Elected::Won,
            (1, LOST) => break Elected::Lost,
            // The candidate's end without a verdict (it failed before the election, or
            // was killed).
            _ => break Elected::Lost,
        }
    };
    patience.await_process(None);
    Ok(elected)
}
