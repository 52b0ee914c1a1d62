//! The shared read path's deaths and races that tests_read.rs does not force: a conflict
//! between two members that miss one page at once, made deterministic by a lever (the
//! first stopped between its `pread` and its insertion while the second reads and inserts
//! the page).

use std::cell::Cell;
use std::path::Path;

use super::attach::{DomainConfig, Member};
use super::futex::Parked;
use super::index::Entry;
use super::read::SharedReader;
use super::tests::{exited_ok, fork, wait_for, SharedRegion};
use super::tests_read::{
    check_all, config, read_and_compare, reclaim_everything, report, reported, stamped, write_file,
};
use super::{Died, Holder, Run, Step};
use crate::primitive::Ordering;

/// A member's `Run` that stops its process (`SIGSTOP`) once, at the end of its first
/// hand-over: the first `Step::Unlocked` at which the domain's queue holds one frame more
/// than when the lever was made (a hand-over is the only queue change of a miss with free
/// frames; the allocator's and the file table's unlocks leave the queue as it is). There
/// the miss has read its page into its frame and queued it, and has not inserted it into
/// the index yet. The test continues it (`SIGCONT`).
struct StopBeforeInsertion<'m> {
    member: &'m Member,
    queued_before: u32,
    stopped: Cell<bool>,
}

impl StopBeforeInsertion<'_> {
    fn queued(&self) -> u32 {
        let domain = self.member.domain();
        let buddy = domain.buddy();
        domain.queue(&buddy).count()
    }
}

impl Run for StopBeforeInsertion<'_> {
    fn at(&self, step: Step) -> Result<(), Died> {
        if step == Step::Unlocked && !self.stopped.get() && self.queued() == self.queued_before + 1
        {
            self.stopped.set(true);
            // SAFETY: raise has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
        Ok(())
    }

    fn wait(&self, holder: Holder) {
        self.member.wait(holder)
    }

    fn parked(&self, holder: Holder, outcome: Parked) {
        self.member.parked(holder, outcome)
    }
}

/// Words per member in the conflict test's report: 7 counters, its wrong bytes, done.
const CONFLICT_WORDS: usize = 9;

/// The folios every index of `member`'s domain names: (file record, page, frame).
fn cached_folios(member: &Member) -> Vec<(usize, u64, u64)> {
    let mut folios = Vec::new();
    for (r, index) in member.domain().indexes().iter().enumerate() {
        for (page, entry) in index.entries() {
            if let Entry::Folio { frame, .. } = entry {
                folios.push((r, page, frame));
            }
        }
    }
    folios
}

/// A conflict forced (read.rs, "Miss"): member A misses page 1 of a file and is stopped by
/// its lever after its `pread` and its hand-over, before its insertion (`SIGSTOP`, seen by
/// the test with `waitpid(WUNTRACED)`: no sleep decides the order); member B then misses
/// the same page, reads it and inserts it; then A is continued: its insertion conflicts,
/// and it reads its own copy. Both read every byte right, A counts one conflict and B
/// none, the index names B's frame, A's frame stays queued in no index, and a reclaim of
/// everything frees it with every other frame (no leak).
#[test]
fn a_member_stopped_between_its_pread_and_its_insertion_conflicts_and_reads_right() {
    let home = tempfile::tempdir_in(crate::segment::home::SHARED_DIR).unwrap();
    let data = tempfile::tempdir().unwrap();
    let path = write_file(data.path(), 0, CONFLICT_LEN);
    let config = config(home.path(), "read-conflict", 8, 32);
    let parent = Member::attach(&config).unwrap();
    let words = SharedRegion::new(2 * CONFLICT_WORDS);
    let (a_words, b_words) = words.words().split_at(CONFLICT_WORDS);
    let a = fork(|| conflict_member(&config, &path, a_words, Lever::StopBeforeInsertion));
    let status = wait_for(a, libc::WUNTRACED);
    assert!(libc::WIFSTOPPED(status), "A: status {status:#x}");
    // A's frame is queued, and no index names the page yet.
    let buddy = parent.domain().buddy();
    assert_eq!(parent.domain().queue(&buddy).count(), 1);
    assert_eq!(
        cached_folios(&parent),
        Vec::new(),
        "A inserted before its stop"
    );
    let b = fork(|| conflict_member(&config, &path, b_words, Lever::None));
    exited_ok(b, "B");
    let after_b = cached_folios(&parent);
    assert_eq!(after_b.len(), 1, "B inserted page 1: {after_b:?}");
    assert_eq!(after_b[0].1, 1, "{after_b:?}");
    // SAFETY: continues our own stopped child.
    assert_eq!(unsafe { libc::kill(a, libc::SIGCONT) }, 0);
    exited_ok(a, "A");
    let (ra, rb) = (reported(&a_words[..7]), reported(&b_words[..7]));
    eprintln!("conflict: A {ra:?}\nconflict: B {rb:?}");
    for (who, w) in [("A", a_words), ("B", b_words)] {
        assert_eq!(w[7].load(Ordering::Acquire), 0, "{who}: wrong bytes");
        assert_eq!(w[8].load(Ordering::Acquire), 1, "{who}: not done");
    }
    assert_eq!(
        (ra.misses, ra.preads, ra.conflicts, ra.hits, ra.uncached),
        (1, 1, 1, 0, 0),
        "A: {ra:?}"
    );
    assert_eq!(
        (rb.misses, rb.preads, rb.conflicts, rb.hits, rb.uncached),
        (1, 1, 0, 0, 0),
        "B: {rb:?}"
    );
    // The index still names B's frame; A's is queued in no index.
    assert_eq!(cached_folios(&parent), after_b);
    assert_eq!(parent.domain().queue(&buddy).count(), 2);
    check_all(parent.domain());
    // The reclaim frees both frames, A's conflicted one included: every frame free.
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// The conflict test's file: 3 pages.
const CONFLICT_LEN: u64 = 3 * 4096;

/// A member of the conflict test: attaches, reads page 1 of `path` from byte 100 to its
/// end through a reader whose `Run` is `lever`'s, reports in `words` (`CONFLICT_WORDS`),
/// detaches.
fn conflict_member(
    config: &DomainConfig,
    path: &Path,
    words: &[crate::primitive::AtomicU64],
    lever: Lever,
) {
    let member = Member::attach(config).expect("attach");
    let wrong = match lever {
        Lever::StopBeforeInsertion => {
            let stop = StopBeforeInsertion {
                member: &member,
                queued_before: 0,
                stopped: Cell::new(false),
            };
            let wrong = read_page_one(&member, &stop, path, words);
            assert!(stop.stopped.get(), "the lever never stopped A");
            wrong
        }
        Lever::None => read_page_one(&member, &member, path, words),
    };
    words[7].store(wrong as u64, Ordering::Release);
    words[8].store(1, Ordering::Release);
    member.detach();
}

/// Reads page 1 of `path` from byte 100 to its end through `member`'s reader run by
/// `run`, reports its counters in `words[..7]`, and returns the wrong bytes.
fn read_page_one<R: Run>(
    member: &Member,
    run: &R,
    path: &Path,
    words: &[crate::primitive::AtomicU64],
) -> usize {
    let reader = SharedReader::new(member, run, 1);
    let file = reader.open(path).unwrap();
    let expected = stamped(0, CONFLICT_LEN);
    let wrong = read_and_compare(&reader, &file, &expected, 4096 + 100, 4096 - 100);
    report(&words[..7], reader.counters());
    reader.close(file).unwrap();
    wrong
}

/// Which `Run` a member of the conflict test reads with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lever {
    /// Stops before its insertion (`StopBeforeInsertion`).
    StopBeforeInsertion,
    /// The member itself: never stops.
    None,
}
