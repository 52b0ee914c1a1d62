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
//!    descriptors of the files the owner writes. It never touches the segment.
//! 3. The owner's death is noticed at once: its pidfd polls readable, or the link reaches
//!    its end (the owner dropped the cache with dirty pages left). A `Bye` (a clean drop
//!    that left nothing dirty) ends the keeper without writing; for a named segment,
//!    kept for the next cache of its name, the keeper stays as its steward (`kept`: it
//!    gives the kept pages back under memory pressure, and leaves when it is adopted).
//! 4. Then: every queued message is read, the segment is marked orphaned, every dirty
//!    folio is written to its file (`writeback`), sizes are settled, the files are synced,
//!    the segment is marked written and removed (a named one kept, its keeper staying as
//!    its steward), and the keeper exits.
//!
//! If the keeper is killed during step 4, the segment stays behind, marked orphaned;
//! `recover_segment` (another process) finishes the work, reopening the files by the paths
//! the slots record and checking that each is still the same file.
//!
//! Protection (the segment is untrusted input: its owner's user can write any byte of it,
//! and so can a root owner that dropped privileges and kept its descriptors):
//! - The keeper writes only through the descriptors the owner handed it (files the owner
//!   opened for writing), never a file it opens by path; it runs with no capabilities and
//!   `PR_SET_NO_NEW_PRIVS` (`drop_privileges`); before each write it checks the folio is
//!   still the dirty folio it found (`writeback`).
//! - Every way a keeper ends but a kill (a `Bye`, the end of its writeback, a failure, a
//!   panic, a fault) marks the segment file finished (`mark_finished_raw`: the owner's
//!   execute bit): a mode only the file's owner can set or clear, which no privilege-dropped owner
//!   can forge. A recovery by a process that bypasses file permissions (root) writes
//!   nothing by path into a finished segment's files: what the keeper could not write (a
//!   failure) is not retried from a segment a privilege-dropped owner could have changed
//!   since (the attack of issue 42). Any other user's recovery retries it within the
//!   rules below: it cannot write what its user could not.
//! - A recovery by path (a keeper killed, unmarked) writes a file only if its slot says
//!   the owner opened it for writing, the path still leads to the file the slot names
//!   (device, inode, birth time), and the file is this user's and writable by them:
//!   never a file the segment only read, never another user's file.
//! - Whatever a recovery cannot prove it refuses: the segment is then removed (its dirty
//!   pages can be written by no one), never adopted with pages the disk does not hold.
//!
//! Limits: no seccomp filter (the keeper's system calls include the allocator's and
//! `std`'s, whose list changes with the toolchain: a filter would have to be kept in step
//! by hand); a keeper killed by root or by its own user leaves no mark, and a recovery then
//! trusts the slots' flags within the rules above.
//!
//! Cost while the owner lives: one sleeping process, and one message per file opened for
//! writing. The fork copies the owner's page tables: memory the owner wrote before the
//! build is shared copy-on-write with the keeper until the owner writes it again (one
//! fault per page), which is why the cache forks before it maps anything large.

pub(crate) mod kept;
mod writeback;

use std::collections::HashMap;
use std::fs::File as StdFile;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::folio_meta::MappingId;
use crate::segment::layout::{Opened, SegmentState};
use crate::segment::link::{self, KeeperLink, Message, Received};
use crate::segment::{self, Holder, Segment};

pub use kept::{trim_kept_segment, KeptMemory, Trimmed};
pub use writeback::Written;

/// What a recovery did (`recover_segment`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// What was written back.
    pub written: Written,
    /// Files whose slots name a path that is gone or is another file now: their dirty
    /// pages were not written.
    pub files_not_found: u32,
    /// Files whose dirty pages a recovery refused to write, not proven to be the owner's
    /// to write (module docs, protection): the segment was removed, or (a named one) left
    /// orphaned and marked finished for the next cache of its name to replace.
    pub files_refused: u32,
    /// Why files were refused, if any were.
    pub refused_because: Option<String>,
}

/// Starts the keeper of `segment` (module docs, step 1) and returns the owner's end of
/// the link.
///
/// Context: the cache's build, before its background threads start; the I/O backend's
/// threads already run (the children have only the forking thread and take no lock
/// those threads may hold: the fork's SAFETY note). Forks the process.
pub fn spawn(segment: &Segment, kept: &KeptMemory) -> io::Result<KeeperLink> {
    let (ours, theirs) = link::pair()?;
    let owner = std::process::id() as libc::pid_t;
    let segment_fd = segment.file().as_raw_fd();
    let path = segment.path().to_path_buf();
    // SAFETY: fork has no preconditions; the children below call only what is safe after
    // a fork of a threaded process with glibc (system calls, and the allocator, whose
    // locks glibc's fork takes and resets), never a lock another thread may have held.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // The first child: takes the owner's pidfd while the owner is surely its parent,
        // then forks the keeper and exits, so that the keeper is nobody's zombie (init,
        // or the nearest subreaper, adopts it).
        drop(ours);
        let pidfd = owner_pidfd(owner);
        // SAFETY: as above.
        let code = match unsafe { libc::fork() } {
            0 => keeper_main(theirs.as_raw_fd(), segment_fd, pidfd, &path, kept),
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
        Received::Message(Message::Started(pid)) => {
            segment
                .header()
                .keeper_pid
                .store(pid, std::sync::atomic::Ordering::Relaxed);
            Ok(KeeperLink::new(ours, pid))
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

/// The keeper's body (module docs). Returns the exit code.
fn keeper_main(
    socket: RawFd,
    segment_fd: RawFd,
    pidfd: Option<OwnedFd>,
    path: &Path,
    kept: &KeptMemory,
) -> i32 {
    let has_pidfd = pidfd.is_some();
    if isolate(socket, segment_fd, pidfd.as_ref().map(AsRawFd::as_raw_fd)).is_err() {
        return 2;
    }
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
    if link::send_started(LINK_FD, me).is_err() {
        return 2;
    }
    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        serve(has_pidfd.then_some(PIDFD), path, kept, me)
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
/// back. Returns the steward's exit code.
fn steward(segment: &Arc<Segment>, kept: &KeptMemory, me: u32) -> i32 {
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
/// one (else by the link's end). Returns the exit code.
fn serve(owner_pidfd: Option<RawFd>, path: &Path, kept: &KeptMemory, me: u32) -> i32 {
    let mut files: HashMap<MappingId, StdFile> = HashMap::new();
    // Step 2: messages until the owner dies, says goodbye, or closes the link.
    let mut bye = false;
    while let Event::Link = wait_for(LINK_FD, owner_pidfd) {
        match link::try_receive(LINK_FD) {
            Ok(Received::Message(Message::Bye)) => {
                bye = true;
                break;
            }
            Ok(Received::Message(m)) => apply(&mut files, m),
            Ok(Received::Empty) => {}
            Ok(Received::Closed) | Err(_) => break,
        }
    }
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
        return steward(&segment, kept, me);
    }
    match finish(&segment, &mut files) {
        Ok(written) if written.failed_files == 0 => {
            drop(files);
            steward(&segment, kept, me)
        }
        Ok(_) => 0,
        Err(_) => 4,
    }
}

/// Marks the segment open as `fd` finished (module docs, protection): the owner's execute
/// bit added to its mode (0700 for a segment as it is made; other bits as they are).
/// Async-signal-safe: `fstat` and `fchmod`.
fn mark_finished_raw(fd: RawFd) {
    // SAFETY: all-zero is a valid stat, filled by fstat; fstat and fchmod on a descriptor
    // number (a closed or foreign one only fails).
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) == 0 {
            libc::fchmod(fd, (st.st_mode & 0o7777) | 0o100);
        }
    }
}

/// Whether a keeper finished the segment open as `file` (`mark_finished_raw`).
pub(crate) fn is_finished(file: &StdFile) -> bool {
    use std::os::unix::fs::PermissionsExt;
    file.metadata()
        .is_ok_and(|meta| meta.permissions().mode() & 0o100 != 0)
}

/// Whether this process writes files regardless of their permissions (root, or the
/// capabilities `CAP_DAC_OVERRIDE` or `CAP_FOWNER`): then a recovery by path needs more
/// proof than the kernel's checks (module docs, protection).
fn bypasses_permissions() -> bool {
    const CAP_DAC_OVERRIDE: u32 = 1;
    const CAP_FOWNER: u32 = 3;
    if segment::my_uid() == 0 {
        return true;
    }
    let header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget with a valid header and room for version 3's two data words.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &header, data.as_mut_ptr()) };
    rc != 0 || data[0].effective & (1 << CAP_DAC_OVERRIDE | 1 << CAP_FOWNER) != 0
}

/// Clears the mark of `file` (a new owner adopted the segment: its own keeper marks it
/// again when it ends).
///
/// Errors: `fchmod`'s.
pub(crate) fn clear_finished(file: &StdFile) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
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
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

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
        Message::Bye | Message::Started(_) => {}
    }
}

/// Step 4: writes back, syncs, and removes the segment if every dirty page is on disk.
/// A named segment is not removed but left written, for the next cache of its name to
/// adopt (`adopt`), each written file stamped as it is now (`Segment::stamp_files`).
fn finish(segment: &Arc<Segment>, files: &mut HashMap<MappingId, StdFile>) -> io::Result<Written> {
    segment.set_state(SegmentState::Orphaned);
    let written = writeback::write_back(segment, files)?;
    if written.failed_files == 0 {
        if segment.header().retained() {
            segment.stamp_files(files.iter().map(|(&id, file)| (id, file)));
            segment.set_state(SegmentState::Written);
        } else {
            segment.set_state(SegmentState::Written);
            segment.remove()?;
        }
    }
    Ok(written)
}

/// Finishes the segment at `path` whose owner and keeper both died before its dirty pages
/// were all written (the keeper killed during its writeback): writes them back, reopening
/// each file by the path its slot records (`reopen`: only a file the owner opened for
/// writing, that is still the slot's file, this user's and writable by them), syncs them,
/// and removes the segment (or leaves a named one written, for its next cache).
///
/// What it cannot prove it does not write (module docs, protection): a file the slot does
/// not record as opened for writing, another user's file, or anything of a segment a
/// keeper marked finished. Those files are counted in `files_refused` (`refused_because`
/// says why), and the segment is then removed, or, a named one, left orphaned and marked
/// finished for the next cache of its name to replace (`adopt::take`): its dirty pages can
/// be written by no one, and a later cache must not adopt them as if they were on disk.
///
/// Errors: `Segment::open_orphan`'s (a segment in use, of another user, readable by
/// others, a symlink, or of another layout: each refused with a message, changing
/// nothing); an I/O error of the writeback. A file that is gone or replaced is counted in
/// `files_not_found`, its pages not written.
pub fn recover_segment(path: &Path) -> io::Result<Recovered> {
    let segment = Arc::new(Segment::open_orphan(path)?);
    if segment.header().state() == Some(SegmentState::Written) {
        // Its keeper wrote everything (and was stopped before it removed the file, or it is
        // kept for a restart).
        if !segment.header().retained() {
            segment.remove()?;
        }
        return Ok(Recovered::default());
    }
    // Only a process that the kernel's permission checks do not bound needs the mark: any
    // other writes by path only what its own user may write anyway.
    let finished = is_finished(segment.file()) && bypasses_permissions();
    let mut files = HashMap::new();
    let mut files_not_found = 0;
    let mut files_refused = 0;
    // Every file with dirty pages, and every file folio wrote (its logical size may not be
    // the disk's yet: a last block written whole, a `set_len` not applied).
    let dirty = writeback::dirty_mappings(&segment);
    let written_by_folio = segment.registered_ids().into_iter().filter(|&id| {
        segment
            .slot(id)
            .and_then(|slot| slot.read())
            .is_some_and(|r| r.size_bytes != crate::segment::layout::SIZE_UNKNOWN)
    });
    let ids: std::collections::BTreeSet<MappingId> =
        dirty.iter().copied().chain(written_by_folio).collect();
    for id in ids {
        let has_dirty = dirty.contains(&id);
        if finished {
            // The keeper ended (and wrote what it could): nothing is retried by path. A
            // size alone is not settled: a forged one must not cut a file.
            if has_dirty {
                files_refused += 1;
            }
            continue;
        }
        match reopen(&segment, id) {
            Reopened::File(file) => {
                files.insert(id, file);
            }
            Reopened::NotProven if has_dirty => files_refused += 1,
            // A file gone with nothing dirty (deleted since, as databases do) owes nothing.
            Reopened::Gone if has_dirty => files_not_found += 1,
            Reopened::Gone | Reopened::NotProven => {}
        }
    }
    let written = if finished && files_refused == 0 {
        // Nothing to write: the keeper finished; settle the state only.
        finish(&segment, &mut HashMap::new())?
    } else if finished {
        Written::default()
    } else {
        finish(&segment, &mut files)?
    };
    let mut refused_because = None;
    if files_refused > 0 {
        let why = if finished {
            format!(
                "its keeper ended without writing the dirty pages of {files_refused} file(s): \
                 they are not retried from a segment that may have changed since"
            )
        } else {
            format!(
                "{files_refused} file(s) with dirty pages are not proven the owner's to write \
                 (opened for writing, this user's, writable by them)"
            )
        };
        if segment.header().retained() {
            // Never adopted as it is (its dirty pages are not on disk), never retried by
            // path: the next cache of its name replaces it (`adopt::take`).
            segment.set_state(SegmentState::Orphaned);
            mark_finished_raw(segment.file().as_raw_fd());
            eprintln!(
                "folio: segment {} left for the next cache of its name to replace: {why}",
                path.display()
            );
        } else {
            eprintln!("folio: segment {} removed: {why}", path.display());
            segment.remove()?;
        }
        refused_because = Some(why);
    }
    Ok(Recovered {
        written,
        files_not_found,
        files_refused,
        refused_because,
    })
}

/// What a new persistent cache found of dead processes' segments in its directory
/// (`settle_dir`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// Segments whose keeper was still writing back: the build waited for it.
    pub waited: u32,
    /// Segments nobody held (a keeper killed before it was done): recovered here.
    pub recovered: u32,
    /// Segments kept for a restart whose files are all gone (a database deleted):
    /// removed, so that their memory goes back.
    pub removed: u32,
}

/// How long a new cache waits for a dead owner's keeper at most before it goes on.
const KEEPER_WAIT_MAX: Duration = Duration::from_secs(300);

/// Before a persistent cache starts in `dir`: waits for the keepers of dead owners there
/// to finish (a process restarted after a crash must read what its predecessor wrote, as
/// it would through the kernel's page cache, not the bytes before the keeper's
/// writeback), and finishes any segment whose keeper was killed (`recover_segment`). A
/// segment whose owner lives is left alone.
///
/// Context: the cache's build; may sleep up to `KEEPER_WAIT_MAX` per keeper.
pub fn settle_dir(dir: &Path) -> io::Result<Settled> {
    let mut settled = Settled::default();
    for (path, holder) in segment::segments_in(dir)? {
        match holder {
            Holder::Owner => {}
            Holder::Keeper => {
                settled.waited += 1;
                wait_for_keeper(&path);
            }
            // A steward holds the segment's lock only while it trims: then the recovery
            // says WouldBlock and this waits as for a keeper.
            Holder::Nobody | Holder::Steward => match recover_segment(&path) {
                Ok(_) => {
                    settled.recovered += 1;
                    if remove_if_files_gone(&path) {
                        settled.removed += 1;
                    }
                }
                // Another new cache recovers it now, or it is not ours to read.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait_for_keeper(&path),
                Err(e) => eprintln!("folio: segment {} left as it is: {e}", path.display()),
            },
        }
    }
    Ok(settled)
}

/// Removes the segment at `path`, kept for a restart (named) and written, if its slots
/// name files and none of them is still there (by path and identity): nobody can adopt its
/// pages any more, and tmpfs memory is not the kernel's to reclaim. A segment that names
/// no file (its owner died before it opened one) holds no page and is kept: the next
/// cache of that name adopts it as it is. Returns whether it removed it.
///
/// Context: nobody holds the segment (it takes the segment's lock, and gives up if it
/// cannot).
fn remove_if_files_gone(path: &Path) -> bool {
    let Ok(segment) = Segment::open_orphan(path) else {
        return false;
    };
    let header = segment.header();
    if !header.retained() || header.state() != Some(SegmentState::Written) {
        return false;
    }
    let ids = segment.registered_ids();
    if ids.is_empty() {
        return false;
    }
    let any_left = ids.into_iter().any(|id| {
        segment
            .slot(id)
            .and_then(|slot| slot.read())
            .is_some_and(|record| {
                let path = Path::new(std::ffi::OsStr::from_bytes(&record.path));
                !record.path.is_empty()
                    && std::fs::metadata(path)
                        .is_ok_and(|meta| segment::identity_of(&meta) == record.identity)
            })
    });
    !any_left && segment.remove().is_ok()
}

/// Waits until no keeper holds the segment at `path` (or it is gone).
pub(crate) fn wait_for_keeper(path: &Path) {
    let started = Instant::now();
    let mut told = false;
    loop {
        let Ok(file) = StdFile::open(path) else {
            return; // removed: done
        };
        if segment::holder_of(&file) != Holder::Keeper {
            return;
        }
        if !told && started.elapsed() > Duration::from_secs(5) {
            eprintln!(
                "folio: waiting for the keeper of {} to write back a dead process's data",
                path.display()
            );
            told = true;
        }
        if started.elapsed() > KEEPER_WAIT_MAX {
            eprintln!(
                "folio: the keeper of {} is still writing after {:?}; going on",
                path.display(),
                KEEPER_WAIT_MAX
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What `reopen` found for a slot.
enum Reopened {
    /// The slot's file, open for writing, proven the owner's to write.
    File(StdFile),
    /// No file to write: no slot, no path, or the path leads elsewhere now.
    Gone,
    /// A file that may be the slot's, but not one the owner was proven to write: not
    /// recorded as opened for writing, not this user's, or not writable by them.
    NotProven,
}

/// The file mapping `id`'s slot names, if its slot records it opened for writing, its path
/// still leads to that very file (device, inode, birth time), and the file is this user's
/// and writable by them (module docs, protection). Nothing is opened for a slot that does
/// not record an opening for writing.
fn reopen(segment: &Segment, id: MappingId) -> Reopened {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let Some(record) = segment.slot(id).and_then(|slot| slot.read()) else {
        return Reopened::Gone;
    };
    if record.path.is_empty() {
        return Reopened::Gone;
    }
    if record.opened != Opened::ForWriting {
        return Reopened::NotProven;
    }
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(&record.path));
    let Ok(file) = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
    else {
        return Reopened::Gone;
    };
    let Ok(meta) = file.metadata() else {
        return Reopened::Gone;
    };
    if !meta.is_file() || crate::segment::identity_of(&meta) != record.identity {
        return Reopened::Gone;
    }
    if meta.uid() != segment::my_uid() || meta.mode() & libc::S_IWUSR == 0 {
        return Reopened::NotProven;
    }
    Reopened::File(file)
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
}

/// Waits until the link has a message (or its end) or the owner died.
fn wait_for(socket: RawFd, pidfd: Option<RawFd>) -> Event {
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
    ];
    loop {
        // SAFETY: an array of two pollfds; a negative fd is ignored by poll.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Event::OwnerDied;
        }
        if fds[1].revents != 0 {
            return Event::OwnerDied;
        }
        if fds[0].revents != 0 {
            return Event::Link;
        }
    }
}
