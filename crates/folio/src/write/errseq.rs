//! The error sequence of a mapping: how a failed writeback reaches every handle's next
//! sync exactly once (the kernel's `errseq_t`, in folio's words; DESIGN.md §8).
//!
//! A writeback completes on a backend thread, long after the `write_at` that dirtied
//! the page returned, and maybe after the handle that wrote it was closed. The error must
//! still reach whoever syncs the file next: every open handle, once each, and a handle
//! opened after the error while nobody has seen it yet (Linux since 4.17, so that a
//! process that closes and reopens a file before `fsync`, as PostgreSQL's checkpointer
//! did, is told). A shared "error" flag cannot do that (the first syncer would clear it
//! for everyone), and per-handle lists would grow with the handles. One word per mapping
//! and one per handle can.
//!
//! # The word
//!
//! ```text
//!  63                                   17   16   15            0
//! +---------------------------------------+------+---------------+
//! |               counter                 | SEEN |     errno     |
//! +---------------------------------------+------+---------------+
//! ```
//!
//! `errno` is the last error recorded (0: never an error). SEEN says that some handle has
//! reported the current error. The counter moves when an error is recorded after the
//! previous one was SEEN, so a handle that saw error N can tell error N+1 from it. Errors
//! recorded while the previous one is still unseen fold into one report (the latest
//! errno wins): a handle learns "your data may be lost since you last synced", not how
//! many times.
//!
//! # Protocol
//!
//! Recorder (a writeback completion that failed):
//!   E1. `record(errno)`: CAS loop: set `errno`; if SEEN was set, clear it and add one to
//!       the counter (a new error); otherwise leave the counter (the old one is unseen
//!       and now carries the new errno).
//!
//! A handle holds `Since`, the word as it last knew it:
//!   H1. At open, `sample()`: the current word, or 0 when the current error is unseen,
//!       so that the new handle reports it too (the 4.17 rule).
//!   H2. At each sync, `check_and_advance(&mut since)`: load the word; equal to `since`:
//!       no new error. Different: set SEEN on that very word (one CAS from the loaded
//!       value; skipped when SEEN is already set; a failed CAS is not retried), store the
//!       word with SEEN in `since`, return its errno.
//!
//! Why exactly once per handle: a handle reports only when the word differs from its
//! `since`, and then `since` becomes the word with SEEN set. The word changes again only
//! by E1, which with SEEN set always moves the counter, so a later error differs from
//! every `since` that saw the previous one; with SEEN clear (nobody saw it yet) the word
//! differs from every `since` already. A successful writeback never touches the word: it
//! does not unsay an error that a handle has not reported yet.
//!
//! Interleavings that matter:
//! - E1 between H2's load and its CAS: the CAS fails and SEEN stays clear on the new
//!   error, which is why it is a CAS and not a `fetch_or` (that would mark an error as
//!   seen that nobody reported, and a handle opened next would miss it). The handle
//!   reports the old errno and keeps the old word with SEEN as `since`. If the old error
//!   was unseen, the new one folded into it (same counter) with a different errno, so the
//!   word differs from `since` and the handle reports the new error at its next check.
//!   (A fold with the same errno leaves the word as it was: E1 stores nothing new, the
//!   CAS succeeds, and the one report covers both, as folding says.)
//! - Two handles' H2 at once: each loads the same word, one CAS sets SEEN (the other
//!   fails or is skipped), each reports once.
//!
//! Model-checked in `tests/loom_models.rs` (`errseq_every_handle_once`, and
//! `errseq_a_handle_opened_after_a_check_sees_the_unreported_error`, which fails with a
//! `fetch_or` in H2).
//!
//! Protection: the mapping's word is one atomic; a handle's `Since` is the handle's own
//! (its sync takes `&mut` or a per-handle mutex).
//!
//! Limits: a 47-bit counter (wraps after 2^47 seen errors: never); errno is 16 bits.

use crate::primitive::{AtomicU64, Ordering};

const ERRNO_MASK: u64 = 0xffff;
const SEEN: u64 = 1 << 16;
const COUNTER_ONE: u64 = 1 << 17;

/// A mapping's error sequence.
#[derive(Debug, Default)]
pub struct ErrSeq(AtomicU64);

/// What one handle last knew of its mapping's `ErrSeq`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Since(u64);

impl ErrSeq {
    /// E1: records a writeback error (`errno` > 0, as `io::Error::raw_os_error` gives it).
    pub fn record(&self, errno: i32) {
        let errno = u64::try_from(errno)
            .ok()
            .filter(|&e| e > 0 && e <= ERRNO_MASK)
            .unwrap_or(libc::EIO as u64);
        let mut old = self.0.load(Ordering::Relaxed);
        loop {
            let mut new = (old & !(ERRNO_MASK | SEEN)) | errno;
            if old & SEEN != 0 {
                new = new.wrapping_add(COUNTER_ONE);
            }
            match self
                .0
                .compare_exchange_weak(old, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => old = now,
            }
        }
    }

    /// H1: what a new handle starts from. An error that no handle has reported yet is
    /// reported to this one too.
    pub fn sample(&self) -> Since {
        let now = self.0.load(Ordering::Acquire);
        if now & SEEN == 0 && now & ERRNO_MASK != 0 {
            Since(0)
        } else {
            Since(now)
        }
    }

    /// H2: the errno of an error recorded since this handle last looked, once; `None` if
    /// there is none. Advances `since`.
    pub fn check_and_advance(&self, since: &mut Since) -> Option<i32> {
        let now = self.0.load(Ordering::Acquire);
        if now == since.0 {
            return None;
        }
        if now & SEEN == 0 {
            // One try: a failure means E1 moved the word, and its new error stays unseen.
            let _ = self
                .0
                .compare_exchange(now, now | SEEN, Ordering::AcqRel, Ordering::Acquire);
        }
        since.0 = now | SEEN;
        // `now` differs from `since`: either its errno is set or its counter moved,
        // which only E1 does, with an errno.
        Some((now & ERRNO_MASK) as i32)
    }

    /// Whether the mapping holds an error that no handle has reported yet: such a
    /// mapping must outlive its last handle and its last page, or the error would be lost
    /// with it (the kernel's remaining hole: an evicted inode forgets its error).
    pub fn has_unseen(&self) -> bool {
        let now = self.0.load(Ordering::Acquire);
        now & SEEN == 0 && now & ERRNO_MASK != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_error_reports_nothing() {
        crate::primitive::model(|| {
            let seq = ErrSeq::default();
            let mut since = seq.sample();
            assert_eq!(seq.check_and_advance(&mut since), None);
            assert!(!seq.has_unseen());
        });
    }

    #[test]
    fn every_handle_reports_an_error_once() {
        crate::primitive::model(|| {
            let seq = ErrSeq::default();
            let (mut a, mut b) = (seq.sample(), seq.sample());
            seq.record(libc::EIO);
            assert!(seq.has_unseen());
            assert_eq!(seq.check_and_advance(&mut a), Some(libc::EIO));
            assert!(!seq.has_unseen());
            assert_eq!(seq.check_and_advance(&mut a), None);
            assert_eq!(seq.check_and_advance(&mut b), Some(libc::EIO));
            assert_eq!(seq.check_and_advance(&mut b), None);
        });
    }

    #[test]
    fn a_handle_opened_before_anyone_saw_the_error_reports_it() {
        crate::primitive::model(|| {
            let seq = ErrSeq::default();
            seq.record(libc::ENOSPC);
            let mut late = seq.sample();
            assert_eq!(seq.check_and_advance(&mut late), Some(libc::ENOSPC));
            // Once seen, a newer handle starts after it.
            let mut later = seq.sample();
            assert_eq!(seq.check_and_advance(&mut later), None);
        });
    }

    #[test]
    fn an_error_after_a_seen_one_is_new_to_everyone() {
        crate::primitive::model(|| {
            let seq = ErrSeq::default();
            let (mut a, mut b) = (seq.sample(), seq.sample());
            seq.record(libc::EIO);
            assert_eq!(seq.check_and_advance(&mut a), Some(libc::EIO));
            seq.record(libc::EIO); // the same errno again: still a new error
            assert_eq!(seq.check_and_advance(&mut a), Some(libc::EIO));
            assert_eq!(seq.check_and_advance(&mut b), Some(libc::EIO));
            assert_eq!(seq.check_and_advance(&mut b), None);
        });
    }

    #[test]
    fn unseen_errors_fold_into_one_report_of_the_latest() {
        crate::primitive::model(|| {
            let seq = ErrSeq::default();
            let mut a = seq.sample();
            seq.record(libc::EIO);
            seq.record(libc::ENOSPC);
            assert_eq!(seq.check_and_advance(&mut a), Some(libc::ENOSPC));
            assert_eq!(seq.check_and_advance(&mut a), None);
        });
    }

    #[test]
    fn a_bad_errno_is_recorded_as_eio() {
        crate::primitive::model(|| {
            let seq = ErrSeq::default();
            let mut a = seq.sample();
            seq.record(0);
            assert_eq!(seq.check_and_advance(&mut a), Some(libc::EIO));
        });
    }
}
