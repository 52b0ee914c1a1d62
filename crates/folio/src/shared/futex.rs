//! The kernel's futex, on a word of a region the processes share (issue 45 step 3,
//! docs/sharing.md "Waiting"): a waiter for a held holder lock sleeps here until the
//! unlocker or the steward wakes it (`lock.rs`, `slot.rs` hold the protocol; this room only
//! makes the system calls and counts them).
//!
//! **The word**: a futex word is 32 bits; the region is `AtomicU64`s. A park word is one
//! `AtomicU64` whose *low half* is the futex word: on a little-endian machine the low 32
//! bits of a 64-bit word are its first 4 bytes, at the word's own address, so the kernel
//! compares them when it is given that address (the build refuses a big-endian target;
//! an `AtomicU64` is 8-aligned, so its address is a valid, 4-aligned futex address). The
//! high half is carried into by the sequence's wrap and ignored by the kernel.
//!
//! **Shared, not private**: the region is `MAP_SHARED` across processes (a tmpfs file, or
//! a test's shared anonymous mapping), so the calls go without `FUTEX_PRIVATE_FLAG`: the
//! kernel keys the word by the mapping's page, which every process mapping it shares.
//!
//! Protection: none needed (system calls on an atomic word). Limits: the counts are this
//! thread's (`counts`: tests and figures); a wait that returns may be spurious (a signal,
//! a wake of another word hashed alike): callers look again.

use crate::primitive::AtomicU64;
use std::cell::Cell;
use std::time::Duration;

#[cfg(not(target_endian = "little"))]
compile_error!("a park word's futex is its low half, first in memory only on little-endian");
const _: () = assert!(std::mem::align_of::<AtomicU64>() >= 4);

/// How a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parked {
    /// The waiter never slept: the lock or its holder changed before it would have, or
    /// the word no longer held the sequence it read (`EAGAIN`).
    Changed,
    /// Woken (by a wake, a signal, or spuriously).
    Woken,
    /// The timeout passed.
    TimedOut,
}

/// This thread's futex calls, by kind (tests, figures).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// `FUTEX_WAIT` calls.
    pub(crate) waits: u64,
    /// Of those, woken (not changed, not timed out).
    pub(crate) woken: u64,
    /// Of those, timed out.
    pub(crate) timeouts: u64,
    /// `FUTEX_WAKE` calls.
    pub(crate) wakes: u64,
}

thread_local! {
    static COUNTS: Cell<Counts> = const { Cell::new(Counts { waits: 0, woken: 0, timeouts: 0, wakes: 0 }) };
}

fn count(change: impl FnOnce(&mut Counts)) {
    COUNTS.with(|counts| {
        let mut now = counts.get();
        change(&mut now);
        counts.set(now);
    });
}

/// This thread's futex calls so far.
pub(crate) fn counts() -> Counts {
    COUNTS.with(Cell::get)
}

fn futex_address(word: &AtomicU64) -> *const u32 {
    std::ptr::from_ref(word).cast()
}

/// Sleeps while the low half of `word` is `expected`, until a `wake` of it, or `timeout`
/// (`None`: no timeout).
///
/// Context: `word` lies in a shared mapping (or private memory of this process).
pub(crate) fn wait(word: &AtomicU64, expected: u32, timeout: Option<Duration>) -> Parked {
    count(|c| c.waits += 1);
    let spec = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let spec_ptr = spec.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
    // SAFETY: FUTEX_WAIT reads the 4-aligned u32 at the word's address (module docs) and
    // the timespec, which outlives the call; it writes nothing of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            futex_address(word),
            libc::FUTEX_WAIT,
            expected,
            spec_ptr,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if rc == 0 {
        count(|c| c.woken += 1);
        return Parked::Woken;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) => Parked::Changed,
        Some(libc::ETIMEDOUT) => {
            count(|c| c.timeouts += 1);
            Parked::TimedOut
        }
        // EINTR: a signal; the caller looks again.
        _ => Parked::Woken,
    }
}

/// Wakes every waiter sleeping on `word`.
///
/// Context: `word`'s low half was changed first (a waiter that has not slept yet sees the
/// change and does not).
pub(crate) fn wake(word: &AtomicU64) {
    count(|c| c.wakes += 1);
    // SAFETY: FUTEX_WAKE only uses the address as the key of its wait queue.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            futex_address(word),
            libc::FUTEX_WAKE,
            libc::c_int::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}
