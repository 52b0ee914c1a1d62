//! The keeper's witness of its owner's credentials (issue 42; docs/persistence.md, trust
//! model): a root owner that drops privileges (`setuid` to another user) keeps its
//! segment's descriptor and mapping, and could forge a *clean* frame of a root-only file
//! it read; root's next cache of that name would adopt the segment and serve the forged
//! bytes. The keeper runs as the owner's user and cannot be signalled or traced by the
//! dropped process; it watches the owner's credential changes through the kernel's proc
//! connector and, at the first one, takes the segment's name away (`take_name`): no later
//! cache can adopt it, and the next cache of the name starts cold.
//!
//! How:
//! 1. `Witness::start`, in the keeper of a kept (named) segment (no other is ever
//!    adopted), before it drops its capabilities and before it says `Started` (which the
//!    owner's build waits for): if the owner could change its
//!    credentials (`owner_may_change_credentials`: CAP_SETUID or CAP_SETGID permitted,
//!    or its real, effective and saved ids not all equal), a `NETLINK_CONNECTOR` socket
//!    bound to `CN_IDX_PROC` with a large receive buffer (`SO_RCVBUFFORCE`) subscribes
//!    (`PROC_CN_MCAST_LISTEN`: first for every event, the form every kernel reads, then
//!    with a filter for `PROC_EVENT_UID | PROC_EVENT_GID` only, which kernels since 6.6
//!    apply and older ones ignore), then proves the subscription delivers: it changes its
//!    own file-system uid (or gid) and back, and must read its own event; then it checks
//!    that the owner's ids are still its own (copied at the fork: another thread of the
//!    owner may have changed them before the subscription).
//! 2. The kernel queues a UID or GID event on the socket inside `commit_creds`, before
//!    the owner's `setuid` returns, so before the owner can forge anything. The keeper
//!    polls the socket with its link and the owner's pidfd, and drains it (`drain`)
//!    whenever it is readable and always before it acts on the owner's death, end or
//!    goodbye, and once more when the owner has let go of the segment (a steward).
//! 3. An event of the owner's process (any thread: `process_tgid`), or an overflow
//!    (`ENOBUFS`: events were lost), is "the owner may have changed credentials": the
//!    segment's vouch mark is cleared through the keeper's descriptor, then its name is
//!    taken away (`take_name`, best effort). An event of the owner's read while
//!    subscribing or proving the subscription counts too.
//!
//! The vouch mark (issue 42 review, B and C): the name alone does not protect (a
//! renamed parent directory defeats an unlink by path; a keeper forked after another
//! thread of the owner changed its ids never sees the change). So a kept segment is
//! adopted, or recovered by path by root, only if its file carries the mark
//! (`keeper::vouch_raw`: `S_ISVTX`, which only the file's owner or CAP_FOWNER can change).
//! The adopter clears it as it takes the segment; the keeper sets it before `Started`
//! only if `may_vouch`: its own ids equal the owner's taken by the build before it
//! created or adopted the segment (`Credentials`), and the witness is not needed, or
//! watching and every thread of the owner (`/proc/<owner>/task/*/status`, read after the
//! subscription) still has those ids. Otherwise the owner's cache says why
//! (`Unwitnessed::Unvouched`).
//!
//! No witness (`Witness::Unavailable`): where the owner could change credentials but no
//! subscription can be proven (not in the initial user and pid namespaces, a kernel
//! without the connector, a refusal, or the test lever `NO_WITNESS_ENV`), the name is
//! taken away at once: the cache works, its next start is cold, and the owner's cache
//! says why (`Cache::segment_not_kept_because`). An owner that cannot change credentials
//! needs no witness (`Witness::NotNeeded`): no socket is opened.
//!
//! Protection: the mark is cleared through the segment's descriptor (whatever its path
//! names now); the name is removed through its directory, checked again
//! (`SegmentDir::of_segment`), and only if it still names this segment's inode
//! (`unlink_if_id`): a segment that took the name since is never touched. The keeper
//! then writes the owner's dirty pages back as before (through the descriptors it was
//! handed), but never stays as a steward and never links the segment again.
//!
//! Limits: a keeper killed (by root, or by the OOM killer) before it read the event
//! leaves the name and the mark; the kernel drops an event silently (no `ENOBUFS`) when
//! it cannot allocate it (`GFP_NOWAIT` in `cn_proc`): a change then goes unseen; a child
//! made by a raw `clone` (no fork handlers) keeps the owner's descriptors and is another
//! process, unwatched (`segment::fork`); a uid-0 process that only drops capabilities is still the segment's
//! owner (its own forgery is of its own files: outside this boundary); an owner that
//! changes its file-system uid for its own work (as NFS servers do) loses its warm
//! restart; a process whose pid is reused by another that changes credentials in the
//! instant after the owner's death costs a cold start, never a forged byte.
//!
//! Cost: one descriptor, and for an owner that cannot change credentials nothing. Since
//! 6.6 the kernel sends only UID and GID events; an older kernel wakes the keeper for
//! every fork, exec and exit on the machine while the owner lives.

use std::io;
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use crate::segment::SegmentDir;

/// Whether the test lever `NO_WITNESS_ENV` was set in the owner's environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lever {
    /// Unset: a witness is made where one is needed.
    Off,
    /// Set: the keeper acts as if no witness could be made.
    NoWitness,
}

/// The test lever (docs/persistence.md): set to `1` in the owner's environment when the
/// cache is built, its keeper acts as if no subscription could be made.
pub const NO_WITNESS_ENV: &str = "FOLIO_KEEPER_NO_WITNESS";

/// Why a keeper has no witness (module docs): the owner's segment is not kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unwitnessed {
    /// The test lever (`NO_WITNESS_ENV`).
    Lever = 1,
    /// Not in the initial user and pid namespaces: the kernel reports no process events
    /// there.
    Namespace = 2,
    /// The connector socket could not be made or subscribed (no connector in the
    /// kernel, or the subscription refused).
    Refused = 3,
    /// Subscribed, but the keeper's own credential change did not arrive.
    Silent = 4,
    /// The keeper could not vouch for the segment (`may_vouch`): the owner's (or the
    /// keeper's own) ids are not the ones the build started with, or could not be read.
    Unvouched = 5,
}

impl Unwitnessed {
    /// The code sent on the link (`link::send_started`); 0 is "witnessed or not needed".
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<Unwitnessed> {
        [
            Self::Lever,
            Self::Namespace,
            Self::Refused,
            Self::Silent,
            Self::Unvouched,
        ]
        .into_iter()
        .find(|w| w.code() == code)
    }

    /// What the owner's cache says (`Cache::segment_not_kept_because`).
    pub fn reason(self) -> &'static str {
        match self {
            Self::Lever => "the keeper was told it has no witness (FOLIO_KEEPER_NO_WITNESS)",
            Self::Namespace => {
                "the process may change its credentials and the keeper cannot watch it: \
                 not in the initial user and pid namespaces (the kernel's proc connector \
                 reports nothing there); run as the database's own user to keep the segment"
            }
            Self::Refused => {
                "the process may change its credentials and the keeper cannot watch it: \
                 the kernel's proc connector refused (CAP_NET_ADMIN, or no connector); \
                 run as the database's own user to keep the segment"
            }
            Self::Silent => {
                "the process may change its credentials and the keeper cannot watch it: \
                 the kernel's proc connector delivered no event; run as the database's \
                 own user to keep the segment"
            }
            Self::Unvouched => {
                "the process's user or group ids changed while its cache was built (or \
                 could not be read): the keeper does not vouch for the segment"
            }
        }
    }
}

/// The keeper's witness (module docs).
#[derive(Debug)]
pub(crate) enum Witness {
    /// The owner cannot change credentials: nothing to watch.
    NotNeeded,
    /// Subscribed: the socket, and the owner's process id.
    Watching { socket: OwnedFd, owner: u32 },
    /// No witness could be made, why; the name must be taken away at once.
    Unavailable(Unwitnessed),
    /// The owner's ids changed between the keeper's fork and its subscription: the name
    /// must be taken away at once.
    OwnerChanged,
    /// The owner may have changed credentials, or no witness was possible: the name was
    /// taken away (or the attempt made); the segment is never kept.
    NameTaken,
}

// The kernel's interface (linux/netlink.h, connector.h, cn_proc.h).
const NETLINK_CONNECTOR: libc::c_int = 11;
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const PROC_CN_MCAST_IGNORE: u32 = 2;
const PROC_EVENT_NONE: u32 = 0;
const PROC_EVENT_UID: u32 = 0x4;
const PROC_EVENT_GID: u32 = 0x40;
const NLMSG_DONE: u16 = 3;
const NLMSG_HDR_BYTES: usize = 16;
const CN_MSG_BYTES: usize = 20;
/// Where a proc event's fields lie in a netlink message: after the netlink and connector
/// headers, `what`, `cpu`, `timestamp_ns`, then the event's data (for an id event and an
/// ack, its first words: `process_pid`, `process_tgid`; an ack's `err`).
const EVENT_AT: usize = NLMSG_HDR_BYTES + CN_MSG_BYTES;
const WHAT_AT: usize = EVENT_AT;
const ACK_ERR_AT: usize = EVENT_AT + 16;
const TGID_AT: usize = EVENT_AT + 20;
/// The connector header's `ack` word (the kernel answers with ours + 1).
const CN_ACK_AT: usize = NLMSG_HDR_BYTES + 12;
/// The receive buffer asked for: room for thousands of events between two wake-ups.
const RCVBUF_BYTES: libc::c_int = 8 << 20;
/// The initial namespaces' inode numbers (linux/proc_ns.h: fixed).
const PROC_USER_INIT_INO: u64 = 0xEFFF_FFFD;
const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;

/// What a drain found (`Witness::drain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    Nothing,
    /// An event of process `owner`, or an overflow.
    Owner,
}

impl Witness {
    /// Step 1 (module docs) in the keeper, for its owner `owner`.
    ///
    /// Context: the keeper, after `isolate` and before `drop_privileges` (a privileged
    /// owner's keeper still has CAP_NET_ADMIN and CAP_SETUID here) and before `Started`.
    pub(crate) fn start(owner: u32, lever: Lever) -> Witness {
        if !owner_may_change_credentials() {
            return Witness::NotNeeded;
        }
        if lever == Lever::NoWitness {
            return Witness::Unavailable(Unwitnessed::Lever);
        }
        if !in_initial_namespaces() {
            return Witness::Unavailable(Unwitnessed::Namespace);
        }
        let mut owner_seen = false;
        let Ok(socket) = subscribe(owner, &mut owner_seen) else {
            return Witness::Unavailable(Unwitnessed::Refused);
        };
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() } as u32;
        // The kernel allocates each event without waiting (`GFP_NOWAIT`) and drops it
        // silently when that fails: a probe under memory pressure can miss its own event
        // once, and a few tries tell a dropped event from a connector that delivers none.
        let proven = (0..PROBE_TRIES)
            .map(|_| probe(&socket, me, owner, &mut owner_seen))
            .find(|result| !matches!(result, Ok(false)))
            .unwrap_or(Ok(false));
        match proven {
            // Subscribed: a change from now on is an event; one made by another thread of
            // the owner between the fork and now shows in its ids, which the fork copied;
            // an event of the owner's (or a loss) read while subscribing is a change.
            Ok(true) if !owner_seen && same_ids_as(owner) => Witness::Watching { socket, owner },
            Ok(true) => Witness::OwnerChanged,
            result => {
                unsubscribe(socket.as_raw_fd());
                Witness::Unavailable(if result.is_ok() {
                    Unwitnessed::Silent
                } else {
                    Unwitnessed::Refused
                })
            }
        }
    }

    /// Why the segment is not kept, for the owner's cache (`Started`'s code).
    pub(crate) fn unwitnessed(&self) -> Option<Unwitnessed> {
        match self {
            Witness::Unavailable(why) => Some(*why),
            _ => None,
        }
    }

    /// The socket to poll, while watching.
    pub(crate) fn fd(&self) -> Option<RawFd> {
        match self {
            Witness::Watching { socket, .. } => Some(socket.as_raw_fd()),
            _ => None,
        }
    }

    /// Whether the name was taken away (the segment is never kept: no steward).
    pub(crate) fn took_name(&self) -> bool {
        matches!(self, Witness::NameTaken)
    }

    /// Steps 2-3 (module docs): reads every queued event; if one is the owner's (or
    /// events were lost), or no witness was possible, takes the name of the segment at
    /// `path` (open as `segment_fd`) away and stops watching. Called whenever the socket
    /// polls readable and before the keeper acts on the owner's death, end or goodbye.
    pub(crate) fn watch(&mut self, path: &Path, segment_fd: RawFd) {
        let take = match self {
            Witness::NotNeeded | Witness::NameTaken => false,
            Witness::Unavailable(_) | Witness::OwnerChanged => true,
            Witness::Watching { socket, owner } => {
                drain(socket.as_raw_fd(), |tgid| tgid == *owner) == Seen::Owner
            }
        };
        if take {
            // The mark first, through the descriptor (whatever the path names now): it
            // is what adoption and recovery trust (`super::vouch_raw`).
            super::unvouch_raw(segment_fd);
            take_name(path, segment_fd);
            *self = Witness::NameTaken;
        }
    }

    /// Whether the keeper may vouch for the segment (module docs, the vouch mark), given
    /// the owner's ids at the build's start (`baseline`), the keeper's own (`own`, as of
    /// its fork) and those of each of the owner's threads read after the subscription
    /// (`owner_threads`, `None` for one that could not be read). Only for a witness that
    /// is watching (then every thread must still have the baseline's ids) or not needed
    /// (the owner could not change its ids since the fork: the keeper's are its).
    pub(crate) fn may_vouch(
        &self,
        baseline: &Credentials,
        own: &Credentials,
        owner_threads: &[Option<Credentials>],
    ) -> bool {
        own == baseline
            && match self {
                Witness::NotNeeded => true,
                Witness::Watching { .. } => {
                    !owner_threads.is_empty()
                        && owner_threads.iter().all(|t| t.as_ref() == Some(baseline))
                }
                Witness::Unavailable(_) | Witness::OwnerChanged | Witness::NameTaken => false,
            }
    }

    /// Stops watching (the owner has let go of the segment: what it does now cannot
    /// reach it): closes the socket, so that an older kernel's flood of events is not
    /// queued for nobody.
    pub(crate) fn stop(&mut self) {
        if let Witness::Watching { .. } = self {
            *self = Witness::NotNeeded;
        }
    }
}

impl Drop for Witness {
    /// A socket closed while subscribed leaves the kernel counting a listener (it keeps
    /// making events for nobody): the subscription is ended first.
    fn drop(&mut self) {
        if let Witness::Watching { socket, .. } = self {
            unsubscribe(socket.as_raw_fd());
        }
    }
}

/// Ends the subscription on `fd` (`PROC_CN_MCAST_IGNORE`, the form every kernel reads;
/// before 6.6 it needs CAP_NET_ADMIN, which a keeper past its start no longer has: the
/// kernel's count of listeners then stays one too high).
fn unsubscribe(fd: RawFd) {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() } as u32;
    let _ = send_mcast(fd, me, PROC_CN_MCAST_IGNORE, None);
}

/// Takes the segment's name away (module docs, protection): unlinks `path` through its
/// directory, checked again, if it still names the file open as `segment_fd`. Best
/// effort: a directory renamed by someone who could defeats it, which is why the vouch
/// mark is cleared first (`Witness::watch`); the mark is what protects.
fn take_name(path: &Path, segment_fd: RawFd) {
    // SAFETY: all-zero is a valid stat, filled by fstat on a descriptor number.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(segment_fd, &mut st) } != 0 {
        return;
    }
    if let Ok((dir, name)) = SegmentDir::of_segment(path) {
        let _ = dir.unlink_if_id(&name, (st.st_dev, st.st_ino));
    }
}

/// A process's (or thread's) user and group ids: real, effective, saved and file-system,
/// as `/proc/<pid>/status` lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub uids: [u32; 4],
    pub gids: [u32; 4],
}

impl Credentials {
    /// The calling thread's (`getresuid`, `getresgid`, and the file-system ids read with
    /// `setfsuid(-1)`, which changes nothing). Async-signal-safe.
    pub fn of_this_thread() -> Credentials {
        let (mut r, mut e, mut s) = (0, 0, 0);
        let (mut gr, mut ge, mut gs) = (0, 0, 0);
        // SAFETY: out-pointers to live integers; setfsuid/setfsgid with -1 (an invalid
        // id) change nothing and return the current one.
        unsafe {
            libc::getresuid(&mut r, &mut e, &mut s);
            libc::getresgid(&mut gr, &mut ge, &mut gs);
            let fs = libc::setfsuid(u32::MAX) as u32;
            let gfs = libc::setfsgid(u32::MAX) as u32;
            Credentials {
                uids: [r, e, s, fs],
                gids: [gr, ge, gs, gfs],
            }
        }
    }

    /// Parses a `/proc/<pid>/status` text's `Uid:` and `Gid:` lines; `None` without them.
    pub(crate) fn from_status(status: &str) -> Option<Credentials> {
        let ids = |field: &str| -> Option<[u32; 4]> {
            let line = status.lines().find_map(|l| l.strip_prefix(field))?;
            let mut words = line.split_whitespace().map(str::parse::<u32>);
            let mut out = [0u32; 4];
            for slot in &mut out {
                *slot = words.next()?.ok()?;
            }
            Some(out)
        };
        Some(Credentials {
            uids: ids("Uid:")?,
            gids: ids("Gid:")?,
        })
    }
}

/// Each thread's ids of process `owner` (`/proc/<owner>/task/*/status`); one `None` for
/// a thread (or the list) that could not be read. A thread that ended between the list
/// and its read (`ENOENT`, `ESRCH`) is left out: a process's threads come and go (a
/// thread pool's), and counting one as unreadable made a warm restart cold at random.
pub(crate) fn owner_threads(owner: u32) -> Vec<Option<Credentials>> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{owner}/task")) else {
        return vec![None];
    };
    tasks
        .filter_map(|task| {
            let Ok(task) = task else {
                return Some(None);
            };
            match std::fs::read_to_string(task.path().join("status")) {
                Ok(status) => Some(Credentials::from_status(&status)),
                Err(e)
                    if e.kind() == io::ErrorKind::NotFound
                        || e.raw_os_error() == Some(libc::ESRCH) =>
                {
                    None
                }
                Err(_) => Some(None),
            }
        })
        .collect()
}

/// Whether process `owner`'s uids and gids (real, effective, saved, file-system: its
/// `/proc` status) are this process's (the keeper's, its owner's as of the fork); false
/// if they cannot be read.
fn same_ids_as(owner: u32) -> bool {
    let ids = |status: io::Result<String>| {
        status.ok().map(|s| {
            s.lines()
                .filter(|l| l.starts_with("Uid:") || l.starts_with("Gid:"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
    };
    let theirs = ids(std::fs::read_to_string(format!("/proc/{owner}/status")));
    let ours = ids(std::fs::read_to_string("/proc/self/status"));
    theirs.as_ref().is_some_and(|t| t.len() == 2) && theirs == ours
}

/// Whether this process (the keeper, with its owner's credentials as of the fork) could
/// change its credentials: CAP_SETUID or CAP_SETGID permitted, or its real, effective and
/// saved uids (or gids) not all equal.
pub(crate) fn owner_may_change_credentials() -> bool {
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: out-pointers to live integers.
    let uids_differ = unsafe { libc::getresuid(&mut r, &mut e, &mut s) } != 0 || r != e || e != s;
    let (mut gr, mut ge, mut gs) = (0, 0, 0);
    // SAFETY: as above.
    let gids_differ =
        unsafe { libc::getresgid(&mut gr, &mut ge, &mut gs) } != 0 || gr != ge || ge != gs;
    let permitted = permitted_caps();
    let may_set = permitted & (1 << CAP_SETUID | 1 << CAP_SETGID) != 0;
    uids_differ || gids_differ || may_set
}

/// The permitted capability set's low word (`capget`); all bits set if it cannot be read.
fn permitted_caps() -> u64 {
    let header = super::CapHeader {
        version: super::CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [super::CapData::default(); 2];
    // SAFETY: capget with a valid header and room for two data words.
    if unsafe { libc::syscall(libc::SYS_capget, &header, data.as_mut_ptr()) } != 0 {
        return u64::MAX;
    }
    u64::from(data[0].permitted) | u64::from(data[1].permitted) << 32
}

/// Whether this process is in the initial user and pid namespaces, the only ones the
/// kernel's proc connector answers (their inode numbers are fixed).
fn in_initial_namespaces() -> bool {
    use std::os::unix::fs::MetadataExt;
    let ino = |what: &str| std::fs::metadata(format!("/proc/self/ns/{what}")).map(|m| m.ino());
    ino("user").ok() == Some(PROC_USER_INIT_INO) && ino("pid").ok() == Some(PROC_PID_INIT_INO)
}

/// A connector socket bound to the proc group, its buffer enlarged, subscribed (module
/// docs, step 1). Errors: the socket's, the bind's or a send's; `PermissionDenied` for a
/// refusal the kernel acknowledged.
fn subscribe(owner: u32, owner_seen: &mut bool) -> io::Result<OwnedFd> {
    // SAFETY: socket with constant arguments; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            NETLINK_CONNECTOR,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    for option in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: setsockopt with a live int of the right size.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                option,
                (&RCVBUF_BYTES as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            break;
        }
    }
    // SAFETY: all-zero is a valid sockaddr_nl (pid 0: the kernel picks one).
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    addr.nl_groups = CN_IDX_PROC;
    // SAFETY: bind with a live sockaddr_nl and its size.
    let rc = unsafe {
        libc::bind(
            fd,
            (&addr as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() } as u32;
    // Every event, the form every kernel reads; its acknowledgement says whether it was
    // refused (a kernel that requires CAP_NET_ADMIN).
    send_listen(fd, me, None)?;
    let mut refused = false;
    // An event of the owner's read here (or a loss) is a change (`Witness::start`).
    *owner_seen |= drain_with(fd, |message| {
        if u32_at(message, WHAT_AT) == Some(PROC_EVENT_NONE)
            && u32_at(message, CN_ACK_AT) == Some(me.wrapping_add(1))
            && u32_at(message, ACK_ERR_AT).is_some_and(|err| err != 0)
        {
            refused = true;
        }
        is_id_event_of(message, owner)
    });
    if refused {
        return Err(io::Error::from(io::ErrorKind::PermissionDenied));
    }
    // Only credential changes, where the kernel reads a filter (since 6.6).
    send_listen(fd, me, Some(PROC_EVENT_UID | PROC_EVENT_GID))?;
    Ok(socket)
}

/// Sends `PROC_CN_MCAST_LISTEN`, with an event filter or without (the older form).
fn send_listen(fd: RawFd, me: u32, filter: Option<u32>) -> io::Result<()> {
    send_mcast(fd, me, PROC_CN_MCAST_LISTEN, filter)
}

/// Sends the multicast operation `op`, with an event filter or without.
fn send_mcast(fd: RawFd, me: u32, op: u32, filter: Option<u32>) -> io::Result<()> {
    let data_bytes = if filter.is_some() { 8 } else { 4 };
    let total = NLMSG_HDR_BYTES + CN_MSG_BYTES + data_bytes;
    let mut message = [0u8; NLMSG_HDR_BYTES + CN_MSG_BYTES + 8];
    let put = |m: &mut [u8], at: usize, v: u32| m[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    put(&mut message, 0, total as u32);
    message[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
    put(&mut message, NLMSG_HDR_BYTES, CN_IDX_PROC);
    put(&mut message, NLMSG_HDR_BYTES + 4, CN_VAL_PROC);
    put(&mut message, CN_ACK_AT, me);
    message[NLMSG_HDR_BYTES + 16..NLMSG_HDR_BYTES + 18]
        .copy_from_slice(&(data_bytes as u16).to_ne_bytes());
    put(&mut message, EVENT_AT, op);
    if let Some(filter) = filter {
        put(&mut message, EVENT_AT + 4, filter);
    }
    // SAFETY: send of `total` bytes of a live buffer at least that long.
    let sent = unsafe { libc::send(fd, message.as_ptr().cast(), total, 0) };
    if sent != total as isize {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How many times `Witness::start` probes before it calls the connector silent.
const PROBE_TRIES: u32 = 3;

/// Proves the subscription delivers (module docs, step 1): changes this process's
/// file-system uid (else gid) and back, then reads its own event. Returns false if no
/// id could be changed or no event of its own came.
///
/// An event of process `owner`'s read here, or a loss, sets `owner_seen` (a change:
/// `Witness::start`).
///
/// Errors: none (an overflow counts as seen, and as the owner's).
fn probe(socket: &OwnedFd, me: u32, owner: u32, owner_seen: &mut bool) -> io::Result<bool> {
    raise_effective();
    let (mut r, mut e, mut s) = (0, 0, 0);
    let (mut gr, mut ge, mut gs) = (0, 0, 0);
    // SAFETY: out-pointers to live integers.
    unsafe {
        libc::getresuid(&mut r, &mut e, &mut s);
        libc::getresgid(&mut gr, &mut ge, &mut gs);
    }
    // SAFETY: setfsuid/setfsgid take an id and return the previous one; -1 (an invalid
    // id) changes nothing and only reads it.
    let changed = unsafe {
        flip(|id| libc::setfsuid(id) as u32, [r, e, s])
            || flip(|id| libc::setfsgid(id) as u32, [gr, ge, gs])
    };
    if !changed {
        return Ok(false);
    }
    // The kernel queued the event inside the change (`commit_creds`): it is here now.
    let (mut mine, mut owners) = (false, false);
    let any = drain_with(socket.as_raw_fd(), |message| {
        mine |= is_id_event_of(message, me);
        owners |= is_id_event_of(message, owner);
        false
    });
    // `any` without a message named: messages were lost (or the socket failed).
    *owner_seen |= owners || any;
    Ok(mine || any)
}

/// Whether `message` is a UID or GID event of process `tgid`.
fn is_id_event_of(message: &[u8], tgid: u32) -> bool {
    let what = u32_at(message, WHAT_AT).unwrap_or(0);
    what & (PROC_EVENT_UID | PROC_EVENT_GID) != 0 && u32_at(message, TGID_AT) == Some(tgid)
}

/// Changes a file-system id with `set` (`setfsuid` or `setfsgid`: returns the previous
/// id; -1 only reads it) to another (one of `ids`, the real, effective and saved ones,
/// which needs no privilege, else nobody's) and back; whether it changed.
fn flip(set: impl Fn(u32) -> u32, ids: [u32; 3]) -> bool {
    let was = set(u32::MAX);
    let other = ids
        .into_iter()
        .find(|&id| id != was)
        .unwrap_or(if was == 65534 { 65533 } else { 65534 });
    set(other);
    let now = set(u32::MAX);
    set(was);
    now != was
}

/// Makes the effective capabilities the permitted ones (the keeper drops all of them
/// right after; an owner with CAP_SETUID permitted could raise it too).
fn raise_effective() {
    let header = super::CapHeader {
        version: super::CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [super::CapData::default(); 2];
    // SAFETY: capget and capset with a valid header and two data words.
    unsafe {
        if libc::syscall(libc::SYS_capget, &header, data.as_mut_ptr()) == 0 {
            for d in &mut data {
                d.effective = d.permitted;
            }
            libc::syscall(libc::SYS_capset, &header, data.as_ptr());
        }
    }
}

/// Reads every queued message (`MSG_DONTWAIT` until `EAGAIN`); `Owner` if a UID or GID
/// event's process is one `is_owner` names, or if events were lost (`ENOBUFS`).
fn drain(fd: RawFd, is_owner: impl Fn(u32) -> bool) -> Seen {
    let seen = drain_with(fd, |message| {
        u32_at(message, TGID_AT).is_some_and(|tgid| is_owner(tgid) && is_id_event_of(message, tgid))
    });
    if seen {
        Seen::Owner
    } else {
        Seen::Nothing
    }
}

/// Calls `each` on every netlink message queued on `fd`, until none is; true if `each`
/// said so of one, or if messages were lost (an overflow) or the socket failed.
fn drain_with(fd: RawFd, mut each: impl FnMut(&[u8]) -> bool) -> bool {
    let mut buf = [0u64; 1024];
    let mut found = false;
    loop {
        // SAFETY: recv into a live buffer of its size.
        let got = unsafe {
            libc::recv(
                fd,
                buf.as_mut_ptr().cast(),
                std::mem::size_of_val(&buf),
                libc::MSG_DONTWAIT,
            )
        };
        if got < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return found,
                // ENOBUFS: the queue overflowed, events were lost; anything else: the
                // witness cannot be trusted any more.
                _ => return true,
            }
        }
        // SAFETY: the buffer's first `got` bytes, filled by recv.
        let bytes = unsafe {
            std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), (got as usize).min(8192))
        };
        let mut at = 0;
        while at + NLMSG_HDR_BYTES <= bytes.len() {
            let len = u32_at(bytes, at).unwrap_or(0) as usize;
            if len < NLMSG_HDR_BYTES || at + len > bytes.len() {
                break;
            }
            found |= each(&bytes[at..at + len]);
            at += len.next_multiple_of(4);
        }
    }
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_zero_is_none() {
        for w in [
            Unwitnessed::Lever,
            Unwitnessed::Namespace,
            Unwitnessed::Refused,
            Unwitnessed::Silent,
        ] {
            assert_eq!(Unwitnessed::from_code(w.code()), Some(w));
            assert!(!w.reason().is_empty());
        }
        assert_eq!(Unwitnessed::from_code(0), None);
        assert_eq!(
            Unwitnessed::from_code(Unwitnessed::Unvouched.code()),
            Some(Unwitnessed::Unvouched)
        );
    }

    const ROOT: Credentials = Credentials {
        uids: [0; 4],
        gids: [0; 4],
    };
    const DROPPED: Credentials = Credentials {
        uids: [1001; 4],
        gids: [1001; 4],
    };

    /// A watching witness over a descriptor of no consequence (a file, never subscribed:
    /// `Drop`'s unsubscribe only fails on it).
    fn watching() -> Witness {
        let socket = tempfile::tempfile().unwrap();
        Witness::Watching {
            socket: OwnedFd::from(socket),
            owner: 1,
        }
    }

    #[test]
    fn the_keeper_vouches_only_for_the_baseline_s_ids_in_every_thread() {
        let not_needed = Witness::NotNeeded;
        let watching = watching();
        // Unchanged: vouched.
        assert!(not_needed.may_vouch(&ROOT, &ROOT, &[]));
        assert!(watching.may_vouch(&ROOT, &ROOT, &[Some(ROOT), Some(ROOT)]));
        // Finding B: another thread setuid between the segment's creation and the
        // keeper's fork: the keeper has the new ids (and needs no witness for them).
        assert!(!not_needed.may_vouch(&ROOT, &DROPPED, &[]));
        assert!(!watching.may_vouch(&ROOT, &DROPPED, &[Some(DROPPED)]));
        // One thread of the owner changed after the fork, before the subscription.
        assert!(!watching.may_vouch(&ROOT, &ROOT, &[Some(ROOT), Some(DROPPED)]));
        // Only the file-system uid changed.
        let mut fs = ROOT;
        fs.uids[3] = 1001;
        assert!(!watching.may_vouch(&ROOT, &ROOT, &[Some(fs)]));
        // A thread (or the list) that could not be read, or no thread at all.
        assert!(!watching.may_vouch(&ROOT, &ROOT, &[Some(ROOT), None]));
        assert!(!watching.may_vouch(&ROOT, &ROOT, &[]));
        // No witness, a change seen, or the name taken: never.
        for witness in [
            Witness::Unavailable(Unwitnessed::Lever),
            Witness::OwnerChanged,
            Witness::NameTaken,
        ] {
            assert!(
                !witness.may_vouch(&ROOT, &ROOT, &[Some(ROOT)]),
                "{witness:?}"
            );
        }
    }

    #[test]
    fn credentials_are_read_from_a_status_text_and_match_this_thread_s() {
        let status = "Name:\tx\nUid:\t0\t1001\t0\t1001\nGid:\t5\t6\t7\t8\nGroups:\t\n";
        assert_eq!(
            Credentials::from_status(status),
            Some(Credentials {
                uids: [0, 1001, 0, 1001],
                gids: [5, 6, 7, 8],
            })
        );
        assert_eq!(Credentials::from_status("Uid:\t0\t0\t0\n"), None);
        assert_eq!(
            Credentials::from_status("Uid:\t0\t0\nGid:\t0\t0\t0\t0\n"),
            None
        );
        let ours = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        assert_eq!(
            Credentials::from_status(&ours),
            Some(Credentials::of_this_thread())
        );
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() } as u32;
        let threads = owner_threads(me);
        assert!(!threads.is_empty());
        assert!(threads
            .iter()
            .all(|t| *t == Some(Credentials::of_this_thread())));
        assert_eq!(owner_threads(u32::MAX), vec![None]);
        // Threads that end while the owner's are read are left out, never unreadable.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let churn = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::spawn(|| {}).join().unwrap();
                }
            })
        };
        for _ in 0..200 {
            let threads = owner_threads(me);
            assert!(threads.iter().all(Option::is_some), "{threads:?}");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        churn.join().unwrap();
    }
}
