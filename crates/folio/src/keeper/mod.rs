//! The keeper (DESIGN.md §9): a process that outlives the cache's owner and, when the
//! owner dies without writing back (SIGKILL, abort, the OOM killer), writes back every
//! dirty page the owner left in the segment and syncs the files, as the kernel writes back
//! a dead process's dirty page cache.
//!
//! Life:
//! 1. `spawn`, at the cache's build: `fork` (no `exec`: the keeper is this library's code,
//!    and a library cannot count on a binary of its own being installed). The child
//!    leaves the owner's session, keeps only the segment and its end of the link (every
//!    other descriptor is closed: a test harness waiting for the owner's stdout to close,
//!    or a lock held through a shared open file, must not wait for the keeper), and waits.
//! 2. While the owner lives, the keeper only reads its messages (`segment::link`): the
//!    descriptors of the files the owner writes; and, for an owner that could change its
//!    credentials, the kernel's events of them (`witness`: subscribed before `Started`).
//!    It never touches the segment, but to take its name away (`witness`).
//! 3. The owner's death is noticed at once: its pidfd polls readable, or the link reaches
//!    its end (the owner dropped the cache with dirty pages left). An end of the link (or
//!    a malformed message, or a failed wait) while the pidfd says the owner lives is
//!    acted on only once the owner let go of the segment (its record lock gone): no
//!    copy of the link a forked child might hold (`segment::fork` leaves it none) can
//!    make the keeper write beside a live owner. A `Bye` (a clean drop
//!    that left nothing dirty) ends the keeper without writing; for a named segment,
//!    kept for the next cache of its name, the keeper stays as its steward (`kept`: it
//!    gives the kept pages back under memory pressure, and leaves when it is adopted).
//! 4. Then: every queued message is read, the segment is marked orphaned, every dirty
//!    folio is written to its file (`orphan`), sizes are settled, the files are synced,
//!    the segment is marked written and removed (a named one kept, its keeper staying as
//!    its steward), and the keeper exits.
//!
//! If the keeper is killed during step 4, the segment stays behind, marked orphaned;
//! another process finishes the work (`recovery`: `recover_segment`, a new cache's
//! `settle_dir`), reopening the files by the paths the slots record and checking that each
//! is still the same file.
//!
//! Protection (the segment is untrusted input: its owner's user can write any byte of it,
//! and so can a root owner that dropped privileges and kept its descriptors):
//! - A root owner that drops privileges cannot make root's next cache adopt what it
//!   forged: the keeper's witness (`witness`) reads the owner's UID/GID event, queued by
//!   the kernel before the owner's `setuid` returns, whenever it comes and always before
//!   the keeper acts on the owner's death, end or goodbye, and takes the segment's name
//!   away (only if it still names this inode); such a segment is written back as any,
//!   never kept by a steward. Without a witness where one is needed, the name goes at
//!   the keeper's start (`Cache::segment_not_kept_because`). A child the owner forked has
//!   neither the segment's descriptors nor its mapping (`segment::fork`); the keeper's
//!   own fork is the only exempt one.
//! - The keeper writes only through the descriptors the owner handed it (files the owner
//!   opened for writing), never a file it opens by path; it runs with no capabilities and
//!   `PR_SET_NO_NEW_PRIVS` (`drop_privileges`); before each write it checks the folio is
//!   still the dirty folio it found (`orphan`).
//! - A segment is vouched for by its keeper (`vouch_raw`: `S_ISVTX`, a mode only the
//!   file's owner can change) at its start, only if the owner's ids are still those the
//!   build began with (a kept segment's: every thread's, read after the witness
//!   subscribed: `witness`, the vouch mark); the witness clears it at a change. Adoption
//!   replaces a kept segment without it, and a recovery by root writes nothing by path
//!   from any segment without it.
//! - Every way a keeper ends but a kill (a `Bye`, the end of its writeback, a failure, a
//!   panic, a fault) marks the segment file finished (`mark_finished_raw`: the owner's
//!   execute bit): a mode only the file's owner can set or clear, which no privilege-dropped
//!   owner can forge. What a recovery makes of the mark, and what it writes by path, is
//!   `recovery`'s (its module docs, protection).
//!
//! Limits: no seccomp filter (the keeper's system calls include the allocator's and
//! `std`'s, whose list changes with the toolchain: a filter would have to be kept in step
//! by hand); a keeper killed by root or by its own user leaves no mark, and a recovery then
//! trusts the slots' flags within `recovery`'s rules; a keeper killed (by root, or by the
//! OOM killer) before it read its owner's credential change leaves the segment's name; a
//! uid-0 owner that only drops capabilities is still the segment's owner (outside this
//! boundary); no witness (a container's namespaces, no connector) means every start of a
//! privileged owner is cold (`witness`).
//!
//! Cost while the owner lives: one sleeping process, one message per file opened for
//! writing, and for an owner that could change credentials one netlink socket (woken only
//! by UID/GID events since Linux 6.6; by every process event before). The fork copies the owner's page tables: memory the owner wrote before the
//! build is shared copy-on-write with the keeper until the owner writes it again (one
//! fault per page), which is why the cache forks before it maps anything large.

pub(crate) mod kept;
pub(crate) mod orphan;
pub(crate) mod witness;

use std::collections::HashMap;
use std::fs::File as StdFile;
use std::io;
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;

use crate::folio_meta::MappingId;
use crate::segment::link::{self, KeeperLink, Message, Received};
use crate::segment::Segment;

pub use kept::{trim_kept_segment, KeptMemory, Trimmed};
use orphan::finish;
pub use orphan::Written;
pub use witness::Credentials;
use witness::{Unwitnessed, Witness};

/// Starts the keeper of `segment` (module docs, step 1) and returns the owner's end of
/// the link.
///
/// Context: the cache's build, before its background threads start; the I/O backend's
/// threads already run (the children have only the forking thread and take no lock
/// those threads may hold: the fork's SAFETY note). Forks the process.
/// `baseline` is the owner's ids taken before the segment was created or adopted
/// (`Credentials::of_this_thread`): the keeper vouches for a kept segment only if they
/// still hold (module docs, protection).
pub fn spawn(
    segment: &Segment,
    kept: &KeptMemory,
    baseline: Credentials,
) -> io::Result<KeeperLink> {
    let (ours, theirs) = link::pair()?;
    let owner = std::process::id() as libc::pid_t;
    let segment_fd = segment.file().as_raw_fd();
    let path = segment.path().to_path_buf();
    // Read here, not in the keeper: a forked child of a threaded process takes no lock
    // (the environment's) another thread may have held.
    let no_witness = if std::env::var_os(witness::NO_WITNESS_ENV).is_some_and(|v| v == "1") {
        witness::Lever::NoWitness
    } else {
        witness::Lever::Off
    };
    // Only a kept (named) segment is ever adopted by another cache: only its keeper needs
    // a witness (`witness`).
    let kept_segment = segment.header().retained();
    // SAFETY: fork has no preconditions; the children below call only what is safe after
    // a fork of a threaded process with glibc (system calls, and the allocator, whose
    // locks glibc's fork takes and resets), never a lock another thread may have held.
    // The keeper keeps the segment's descriptor (`segment::fork`: the only exempt forks).
    let child = unsafe { crate::segment::keeper_fork() };
    if child == 0 {
        // The first child: takes the owner's pidfd while the owner is surely its parent,
        // then forks the keeper and exits, so that the keeper is nobody's zombie (init,
        // or the nearest subreaper, adopts it).
        drop(ours);
        let pidfd = owner_pidfd(owner);
        // SAFETY: as above.
        let code = match unsafe { crate::segment::keeper_fork() } {
            0 => keeper_main(
                theirs.as_raw_fd(),
                segment_fd,
                pidfd,
                &path,
                kept,
                &Owner {
                    pid: owner as u32,
                    kept_segment,
                    no_witness,
                    baseline,
                },
            ),
            -1 => 1,
            _ => 0,
        };
        // SAFETY: _exit ends the child at once, running no destructor or atexit handler
        // of the owner's (they would act on the owner's behalf).
        unsafe { libc::_exit(code) }
    }
    if child < 0 {
        return Err(io::Error::last_os_error());
    }
    drop(theirs);
    let mut status = 0;
    // SAFETY: waits for our own child, which exits at once.
    unsafe { libc::waitpid(child, &mut status, 0) };
    match link::receive(ours.as_raw_fd())? {
        Received::Message(Message::Started(pid, why)) => {
            // Our own grandchild's word: another process than this one.
            assert!(pid != 0 && pid != std::process::id());
            segment
                .header()
                .keeper_pid
                .store(pid, std::sync::atomic::Ordering::Relaxed);
            let not_kept = Unwitnessed::from_code(why).map(Unwitnessed::reason);
            Ok(KeeperLink::new(ours, pid).not_kept(not_kept))
        }
        _ => Err(io::Error::other("folio: the keeper process did not start")),
    }
}

/// The keeper process's name (its `comm`).
const KEEPER_NAME: &std::ffi::CStr = c"folio-keeper";

/// The descriptors the keeper keeps, after the three standard ones.
const LINK_FD: RawFd = 3;
const SEGMENT_FD: RawFd = 4;
const PIDFD: RawFd = 5;

/// What the keeper knows of its owner (`spawn`).
struct Owner {
    pid: u32,
    /// The segment is kept (named): only then is a witness started.
    kept_segment: bool,
    /// The test lever `witness::NO_WITNESS_ENV`.
    no_witness: witness::Lever,
    /// The owner's ids before the segment was created or adopted.
    baseline: Credentials,
}

/// The keeper's body (module docs) for `owner`. Returns the exit code.
fn keeper_main(
    socket: RawFd,
    segment_fd: RawFd,
    pidfd: Option<OwnedFd>,
    path: &Path,
    kept: &KeptMemory,
    owner: &Owner,
) -> i32 {
    let has_pidfd = pidfd.is_some();
    if isolate(socket, segment_fd, pidfd.as_ref().map(AsRawFd::as_raw_fd)).is_err() {
        return 2;
    }
    // Before the capabilities go (a privileged owner's keeper subscribes with them) and
    // before `Started`, which the owner's build waits for: so before the owner can change
    // its credentials (`witness`). Without a witness where one is needed, the name goes
    // at once.
    let mut witness = if owner.kept_segment {
        Witness::start(owner.pid, owner.no_witness)
    } else {
        Witness::NotNeeded
    };
    let mut why = witness.unwitnessed();
    // The vouch mark (module docs, protection): set only if the owner's ids, every
    // thread's, are still those the build started with, read after the subscription (a
    // change from then on is an event, read by `watch` below, which clears the mark
    // again). An unnamed segment's keeper watches nothing (`NotNeeded`): it vouches if its
    // own ids, the owner's at the fork, are the build's (a recovery by root trusts no
    // other).
    let own = Credentials::of_this_thread();
    let threads = match witness {
        Witness::Watching { .. } => witness::owner_threads(owner.pid),
        _ => Vec::new(),
    };
    if witness.may_vouch(&owner.baseline, &own, &threads) {
        vouch_raw(SEGMENT_FD);
    } else if owner.kept_segment {
        why = why.or(Some(Unwitnessed::Unvouched));
    }
    let why = why.map_or(0, Unwitnessed::code);
    witness.watch(path, SEGMENT_FD);
    // The OOM killer's last choice where the process may say so (root): the keeper is
    // small, and what it guards is the owner's unsynced writes. Elsewhere this fails, and
    // the keeper is as killable as any small process.
    let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
    // Every way out but a kill marks the segment finished (module docs, protection).
    mark_on_fault();
    drop_privileges();
    // A name of its own (`ps`, `/proc/<pid>/comm`): a fork keeps the owner's, and a
    // `pkill db_bench` meant for the owner then killed the keeper too, and with it the
    // unsynced writes it guards. The command line stays the owner's (no `exec`).
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, KEEPER_NAME.as_ptr(), 0, 0, 0) };
    // `isolate` made the pidfd `PIDFD` and closed the original.
    std::mem::forget(pidfd);
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() } as u32;
    if link::send_started(LINK_FD, me, why).is_err() {
        return 2;
    }
    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        serve(has_pidfd.then_some(PIDFD), path, kept, me, &mut witness)
    }))
    .unwrap_or(5);
    mark_finished_unless_steward();
    code
}

/// Set once the keeper's writeback is over and it stays as a kept segment's steward
/// (`steward`): from then on the segment may be adopted by a new owner, whose keeper owns
/// the finished mark, so this process never sets it again (not at its exit, not at a
/// fault). Read by the fault handler: an atomic load is async-signal-safe.
static STEWARDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The keeper's work on the segment is over: the segment is marked finished now, and the
/// keeper stays as its steward (`kept::steward`) until it is adopted, removed or given
/// back; unless its witness took the segment's name away (`witness`): such a segment is
/// never kept. Returns the steward's exit code.
fn steward(segment: &Arc<Segment>, kept: &KeptMemory, me: u32, witness: &mut Witness) -> i32 {
    if witness.fd().is_some() {
        // A goodbye comes before the owner unmaps the segment: what the owner does until
        // it let go (its record lock gone) is still watched.
        let _ = kept::wait_until_owner_gone(segment.file());
        witness.watch(segment.path(), SEGMENT_FD);
    }
    // What the owner does from now on cannot reach the segment.
    witness.stop();
    if witness.took_name() {
        return 0;
    }
    // A keeper becomes its segment's steward once, after its last write to it.
    assert!(!STEWARDING.load(std::sync::atomic::Ordering::SeqCst));
    mark_finished_raw(SEGMENT_FD);
    STEWARDING.store(true, std::sync::atomic::Ordering::SeqCst);
    kept::steward(segment, kept, me)
}

/// `mark_finished_raw(SEGMENT_FD)`, unless the keeper became a steward (`STEWARDING`):
/// a steward leaves when a new owner adopted the segment, and a mark set then would
/// tell a later recovery that the new owner's keeper had finished its writeback.
fn mark_finished_unless_steward() {
    if !STEWARDING.load(std::sync::atomic::Ordering::SeqCst) {
        mark_finished_raw(SEGMENT_FD);
    }
}

/// Steps 2 to 4 (module docs), the owner's death seen by `owner_pidfd` where there is
/// one (else by the link's end), its credentials by `witness`. Returns the exit code.
fn serve(
    owner_pidfd: Option<RawFd>,
    path: &Path,
    kept: &KeptMemory,
    me: u32,
    witness: &mut Witness,
) -> i32 {
    let mut files: HashMap<MappingId, StdFile> = HashMap::new();
    // Step 2: messages until the owner dies, says goodbye, or closes the link.
    let mut bye = false;
    let mut died = false;
    loop {
        match wait_for(LINK_FD, owner_pidfd, witness.fd()) {
            Event::OwnerDied => {
                died = true;
                break;
            }
            Event::Witness => witness.watch(path, SEGMENT_FD),
            Event::Failed => break,
            Event::Link => match link::try_receive(LINK_FD) {
                Ok(Received::Message(Message::Bye)) => {
                    bye = true;
                    break;
                }
                Ok(Received::Message(m)) => apply(&mut files, m),
                Ok(Received::Empty) => {}
                Ok(Received::Closed) | Err(_) => break,
            },
        }
    }
    if !died && !bye {
        // The link ended (or a message was malformed, or the wait failed) with the owner
        // alive, as far as its pidfd tells: nothing is done to the segment until the owner has let go of
        // it (its record lock gone, as the goodbye's steward waits): an end forged by
        // someone holding a copy of the link (`segment::fork` gives none to a forked
        // child: defense in depth) never makes the keeper write beside a live owner.
        let _ = kept::wait_until_owner_gone(&borrowed_segment_file());
    }
    // Every credential change the owner made before its death, end or goodbye is queued
    // now (the kernel queues it before the change returns): read before anything is done.
    witness.watch(path, SEGMENT_FD);
    // Step 3: everything the owner sent before it died.
    while !bye {
        match link::try_receive(LINK_FD) {
            Ok(Received::Message(Message::Bye)) => bye = true,
            Ok(Received::Message(m)) => apply(&mut files, m),
            _ => break,
        }
    }
    // SAFETY: SEGMENT_FD is the segment's descriptor, ours alone since `isolate`; a dup is
    // taken so that SEGMENT_FD stays open for the mark after the segment is dropped.
    let fd = unsafe { libc::fcntl(SEGMENT_FD, libc::F_DUPFD_CLOEXEC, 10) };
    if fd < 0 {
        return 3;
    }
    // SAFETY: a new descriptor nothing else owns.
    let file = unsafe { StdFile::from_raw_fd(fd) };
    let Ok(segment) = Segment::from_open_file(path.to_path_buf(), file) else {
        return if bye { 0 } else { 3 };
    };
    let segment = Arc::new(segment);
    if bye {
        // A clean goodbye: a kept segment's keeper stays as its steward (`kept`).
        drop(files);
        return steward(&segment, kept, me, witness);
    }
    // The owner is gone (dead, or its segment dropped): nothing more to watch.
    witness.stop();
    match finish(&segment, &mut files) {
        Ok(written) if written.failed_files == 0 => {
            drop(files);
            steward(&segment, kept, me, witness)
        }
        Ok(_) => 0,
        Err(_) => 4,
    }
}

/// `SEGMENT_FD` as a file, never closed (`ManuallyDrop`): the keeper's own descriptor.
fn borrowed_segment_file() -> std::mem::ManuallyDrop<StdFile> {
    // SAFETY: SEGMENT_FD is open for the keeper's life (`isolate`); the File is never
    // dropped, so it never closes it.
    std::mem::ManuallyDrop::new(unsafe { StdFile::from_raw_fd(SEGMENT_FD) })
}

/// Marks the segment open as `fd` finished (module docs, protection): the owner's execute
/// bit added to its mode (0700 for a segment as it is made; other bits as they are).
/// Async-signal-safe: `fstat` and `fchmod`.
pub(crate) fn mark_finished_raw(fd: RawFd) {
    // SAFETY: all-zero is a valid stat, filled by fstat; fstat and fchmod on a descriptor
    // number (a closed or foreign one only fails).
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) == 0 {
            libc::fchmod(fd, (st.st_mode & 0o7777) | 0o100);
        }
    }
}

/// Marks the segment open as `fd` vouched for (module docs, protection): the sticky bit
/// (`S_ISVTX`) added to its mode: a bit that grants nothing on a regular file and that
/// only the file's owner (or CAP_FOWNER) can change, so a privilege-dropped owner can
/// neither set nor keep it. Kept by the finished mark (which adds a bit) and by writes
/// and truncations (the kernel clears only the set-user and set-group ids there); cleared
/// by an adoption (`clear_finished`) and by the witness (`unvouch_raw`).
/// Async-signal-safe: `fstat` and `fchmod`.
pub(crate) fn vouch_raw(fd: RawFd) {
    // SAFETY: all-zero is a valid stat, filled by fstat; fstat and fchmod on a descriptor
    // number (a closed or foreign one only fails).
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) == 0 {
            libc::fchmod(fd, (st.st_mode & 0o7777) | libc::S_ISVTX);
        }
    }
}

/// Takes the vouch mark (`vouch_raw`) off the segment open as `fd`: its owner may have
/// changed credentials (`witness`). Async-signal-safe.
pub(crate) fn unvouch_raw(fd: RawFd) {
    // SAFETY: as `vouch_raw`'s.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) == 0 {
            libc::fchmod(fd, st.st_mode & 0o7777 & !libc::S_ISVTX);
        }
    }
}

/// Whether a keeper vouched for the segment open as `file` (`vouch_raw`) and no witness
/// took it back: a segment without it is not adopted (a kept one), nor recovered by path
/// by a process that bypasses permissions (`adopt::take`, `recovery`).
pub(crate) fn is_vouched(file: &StdFile) -> bool {
    use std::os::unix::fs::PermissionsExt;
    file.metadata()
        .is_ok_and(|meta| meta.permissions().mode() & libc::S_ISVTX != 0)
}

/// Whether a keeper finished the segment open as `file` (`mark_finished_raw`).
pub(crate) fn is_finished(file: &StdFile) -> bool {
    use std::os::unix::fs::PermissionsExt;
    file.metadata()
        .is_ok_and(|meta| meta.permissions().mode() & 0o100 != 0)
}

/// Clears the marks of `file`, finished and vouched for (a new owner adopted the segment:
/// its own keeper vouches for it at its start and marks it finished when it ends; a mark
/// from the previous life never vouches for this one).
///
/// Errors: `fchmod`'s.
pub(crate) fn clear_finished(file: &StdFile) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    debug_assert!(
        !is_finished(file) && !is_vouched(file),
        "the marks are cleared"
    );
    Ok(())
}

/// A fault (a segment shrunk under the keeper's mapping: SIGBUS; a bug: SIGSEGV, an
/// abort) still marks the segment finished before the keeper dies: it is not a kill a
/// recovery may take for an unfinished writeback.
fn mark_on_fault() {
    extern "C" fn on_fault(signal: libc::c_int) {
        mark_finished_unless_steward();
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(128 + signal) };
    }
    for signal in [
        libc::SIGBUS,
        libc::SIGSEGV,
        libc::SIGABRT,
        libc::SIGILL,
        libc::SIGFPE,
    ] {
        // SAFETY: all-zero is a valid sigaction (no flags, an empty mask); the handler
        // calls only async-signal-safe functions.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fault as extern "C" fn(libc::c_int) as usize;
            action.sa_flags = libc::SA_RESETHAND;
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// `capset`'s header and data (linux/capability.h, version 3: two 32-bit words).
#[repr(C)]
pub(crate) struct CapHeader {
    pub(crate) version: u32,
    pub(crate) pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct CapData {
    pub(crate) effective: u32,
    pub(crate) permitted: u32,
    pub(crate) inheritable: u32,
}

pub(crate) const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Drops what the keeper does not need (module docs, protection): no process it could
/// start gains privileges (`PR_SET_NO_NEW_PRIVS`), and it keeps no capability (bounding,
/// ambient, effective, permitted and inheritable sets emptied). It needs none: it writes
/// through descriptors it was handed, and marks and removes a segment its own user owns.
/// Best effort where a step is refused (an unprivileged keeper has nothing to drop).
///
/// Context: the keeper, after `isolate` and before it reads anything from the segment.
fn drop_privileges() {
    // SAFETY: prctl and capset with valid arguments; each only changes this process.
    unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        for cap in 0..64 {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let header = CapHeader {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData::default(); 2];
        libc::syscall(libc::SYS_capset, &header, data.as_ptr());
    }
}

fn apply(files: &mut HashMap<MappingId, StdFile>, message: Message) {
    match message {
        Message::Register(id, fd) => {
            files.insert(id, StdFile::from(fd));
        }
        Message::Forget(id) => {
            files.remove(&id);
        }
        Message::Bye | Message::Started(..) => {}
    }
}

/// Leaves the owner's session and keeps only the link (as `LINK_FD`), the segment (as
/// `SEGMENT_FD`) and the owner's pidfd (as `PIDFD`); the standard descriptors read and
/// write `/dev/null`.
fn isolate(socket: RawFd, segment_fd: RawFd, pidfd: Option<RawFd>) -> io::Result<()> {
    // SAFETY: plain system calls on descriptors this process holds; each result is
    // checked where it matters.
    unsafe {
        libc::setsid();
        // Out of the way of 3 to 5 first, so that no dup2 overwrites another's source.
        let socket = libc::fcntl(socket, libc::F_DUPFD_CLOEXEC, 10);
        let segment_fd = libc::fcntl(segment_fd, libc::F_DUPFD_CLOEXEC, 10);
        let pidfd = pidfd.map(|fd| libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10));
        if socket < 0 || segment_fd < 0 || pidfd.is_some_and(|fd| fd < 0) {
            return Err(io::Error::last_os_error());
        }
        if libc::dup2(socket, LINK_FD) < 0 || libc::dup2(segment_fd, SEGMENT_FD) < 0 {
            return Err(io::Error::last_os_error());
        }
        if let Some(pidfd) = pidfd {
            if libc::dup2(pidfd, PIDFD) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for std_fd in 0..3 {
                libc::dup2(null, std_fd);
            }
        }
        // Everything else the owner had open goes: its pipes, sockets and locks.
        libc::syscall(libc::SYS_close_range, PIDFD + 1, u32::MAX, 0);
        if pidfd.is_none() {
            libc::close(PIDFD);
        }
        for fd in [LINK_FD, SEGMENT_FD, PIDFD] {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
        // It holds a descriptor for each file the owner writes, as the owner does, and a
        // few of its own: as many as the hard limit allows.
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    Ok(())
}

/// A pidfd of the owner, if it is still our parent (a pid is only trusted while it is:
/// after the owner's death the pid may be another process's).
fn owner_pidfd(owner: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; the result is checked.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, owner, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a new descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != owner {
        // The owner died before the pidfd was taken: poll it as dead at once.
        return dead_pidfd();
    }
    Some(fd)
}

/// A descriptor that polls readable at once: a pipe whose write end is closed.
fn dead_pidfd() -> Option<OwnedFd> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: an out-array of two descriptors; the result is checked.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: new descriptors nothing else owns; the write end is closed at once.
    unsafe {
        drop(OwnedFd::from_raw_fd(fds[1]));
        Some(OwnedFd::from_raw_fd(fds[0]))
    }
}

enum Event {
    Link,
    OwnerDied,
    /// The wait itself failed (not a sign of the owner's death).
    Failed,
    /// The witness's socket has events (`witness`).
    Witness,
}

/// Waits until the link has a message (or its end), the owner died, or the witness has
/// events.
fn wait_for(socket: RawFd, pidfd: Option<RawFd>, witness: Option<RawFd>) -> Event {
    let mut fds = [
        libc::pollfd {
            fd: socket,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: pidfd.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: witness.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: an array of three pollfds; a negative fd is ignored by poll.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 3, -1) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Event::Failed;
        }
        if fds[2].revents != 0 {
            return Event::Witness;
        }
        if fds[1].revents != 0 {
            return Event::OwnerDied;
        }
        if fds[0].revents != 0 {
            return Event::Link;
        }
    }
}
