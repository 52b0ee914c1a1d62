//! No way into a segment for a forked child (issue 42; docs/persistence.md, trust model):
//! a child a segment's owner forks (before it drops privileges) would inherit the
//! segment's descriptors (`fork` ignores close-on-exec) and its shared mapping, and could
//! `setuid` later, unseen by the keeper's witness, which watches the owner's process only
//! (`keeper::witness`).
//!
//! - The mapping: every segment mapping is made `MADV_DONTFORK` (`lifecycle`'s `map_as`):
//!   a child has nothing mapped there (a touch faults). No child legitimately uses it: a
//!   forked child has none of the cache's threads, and the keeper maps the segment from
//!   its own descriptor.
//! - The descriptors: every segment's descriptors (its file, read-write or a read-only
//!   view's, and the owner's second open file, the owner lock) and the owner's end of the
//!   keeper link (`link::pair`: a child with it could send the keeper a `Register` of its
//!   own file or a `Bye`, or end the line) are in a fixed table (`register`: a guard held by the `Segment`,
//!   dropped after the descriptors are closed); a `pthread_atfork` child handler
//!   (registered once per process) makes each one that still is the registered file
//!   (device and inode, checked with `fstat`: a number closed and reused since is left
//!   alone) read `/dev/null` (`dup3` of an `O_RDONLY | O_CLOEXEC` open): the numbers stay
//!   valid, so the child's copy of the cache never closes a number reused for another
//!   file. The handler only loads atomics and makes system calls: no allocation, no lock
//!   (async-signal-safe).
//! - The keeper's own fork (`keeper::spawn`) is exempt (`keeper_fork`): it keeps the
//!   segment's descriptor; a thread-local flag set around that fork is read by the handler
//!   in the child, whose only thread is the forking one.
//!
//! Limits: a child made by `posix_spawn` or `vfork` (no fork handlers run) execs at once
//! and loses the descriptors (close-on-exec) and the mapping (exec); a raw `clone` or
//! `syscall(SYS_fork)` bypasses glibc's handlers (the mapping is still not inherited, the
//! descriptors are). A `fork` on another thread in the instant between a segment file's
//! open and its registration (during a build or a view's open) leaves that child the
//! descriptor; one between the file's `mmap` and its `MADV_DONTFORK` (`lifecycle`'s
//! `map_as`: two system calls apart) leaves that child the mapping too (Linux has no
//! `mmap` flag for it). More than `SLOTS` descriptors registered at once in one process
//! (about a third of that many segments): the next segment fails to map.

use std::cell::Cell;
use std::io;
use std::os::unix::io::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Once;

/// The table's size: descriptors registered at once in one process (a read-write segment
/// takes two, a view one, a keeper link one).
const SLOTS: usize = 1024;
const EMPTY: i32 = -1;
/// A slot taken, its identity being written.
const CLAIMED: i32 = -2;

struct Slot {
    fd: AtomicI32,
    dev: AtomicU64,
    ino: AtomicU64,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        fd: AtomicI32::new(EMPTY),
        dev: AtomicU64::new(0),
        ino: AtomicU64::new(0),
    }
}; SLOTS];

static HANDLER: Once = Once::new();

std::thread_local! {
    /// Set around the keeper's fork (`as_keeper_fork`), on the forking thread.
    static FORKING_KEEPER: Cell<bool> = const { Cell::new(false) };
}

/// A descriptor registered (`register`); unregistered when dropped.
#[derive(Debug)]
pub(crate) struct Registered(usize);

impl Drop for Registered {
    fn drop(&mut self) {
        TABLE[self.0].fd.store(EMPTY, Ordering::Release);
    }
}

/// Registers `file`'s descriptor (a segment's file, or the keeper link's socket: module
/// docs): from now on every child of a `fork` finds `/dev/null` at its number. Keep the
/// guard until after the descriptor is closed.
///
/// Errors: `Other` when `SLOTS` descriptors are registered already; `fstat`'s.
pub(crate) fn register(file: BorrowedFd<'_>) -> io::Result<Registered> {
    HANDLER.call_once(|| {
        // SAFETY: registers a handler that takes no argument and is async-signal-safe;
        // glibc keeps it for the process's life.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
    let fd = file.as_raw_fd();
    // SAFETY: all-zero is a valid stat, filled by fstat on a descriptor we borrow.
    let mut meta: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut meta) } != 0 {
        return Err(io::Error::last_os_error());
    }
    assert!(fd >= 0, "an open file's descriptor");
    for (at, slot) in TABLE.iter().enumerate() {
        if slot
            .fd
            .compare_exchange(EMPTY, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            slot.dev.store(meta.st_dev, Ordering::Relaxed);
            slot.ino.store(meta.st_ino, Ordering::Relaxed);
            // The identity before the number: a child that sees the number sees it.
            slot.fd.store(fd, Ordering::Release);
            return Ok(Registered(at));
        }
    }
    Err(io::Error::other(format!(
        "folio: more than {SLOTS} segment and keeper-link descriptors open in this process"
    )))
}

/// `fork` for the keeper (`keeper::spawn`), with the child handler told to leave the
/// descriptors: the flag stays set in the child (whose next fork, the keeper's own, is
/// exempt too), and is cleared in the parent.
///
/// Safety: `fork`'s: the child calls only what is safe after a fork of a threaded
/// process.
pub(crate) unsafe fn keeper_fork() -> libc::pid_t {
    FORKING_KEEPER.with(|f| f.set(true));
    // SAFETY: the caller's (above).
    let pid = unsafe { libc::fork() };
    if pid != 0 {
        FORKING_KEEPER.with(|f| f.set(false));
    }
    pid
}

/// The fork handler in the child (module docs): async-signal-safe.
extern "C" fn in_child() {
    if FORKING_KEEPER.with(Cell::get) {
        return;
    }
    // SAFETY: open, fstat, dup3 and close on descriptor numbers: system calls that touch
    // no memory but the stat filled here.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        for slot in &TABLE {
            let fd = slot.fd.load(Ordering::Acquire);
            if fd < 0 {
                continue;
            }
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) != 0
                || (st.st_dev, st.st_ino)
                    != (
                        slot.dev.load(Ordering::Relaxed),
                        slot.ino.load(Ordering::Relaxed),
                    )
            {
                continue;
            }
            if null < 0 || libc::dup3(null, fd, libc::O_CLOEXEC) < 0 {
                // No /dev/null to put there: the descriptor goes (fail closed).
                libc::close(fd);
            }
        }
        if null >= 0 {
            libc::close(null);
        }
    }
}
