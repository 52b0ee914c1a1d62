//! Kept memory given back like page cache (docs/persistence.md, "Kept memory"; DESIGN.md
//! §11's steward, in small): a named segment left written by a clean exit holds its clean
//! pages in shared memory, which the kernel cannot reclaim (tmpfs without swap). The
//! kernel's page cache keeps a closed file's pages too, but gives them back under
//! pressure; so does a kept segment, through its steward.
//!
//! The steward is the owner's keeper, staying: on the owner's clean goodbye (`Bye`) of a
//! named segment, or after its own writeback of one, the keeper does not exit. It
//! 1. waits until the owner has let go of the segment (its record lock gone: the owner's
//!    segment dropped, or the process dead), while still holding the `flock` the owner
//!    shared with it, so that no adopter can come in between;
//! 2. lets go of the `flock` and takes the steward's record lock (`STEWARD_LOCK_OFFSET`:
//!    what `folio-stat list` shows as holder `steward`): an adoption takes the segment as
//!    from nobody;
//! 3. every tick (50 ms to 2 s: shorter as the machine's free memory nears the reserve, so
//!    that an idle machine costs one wake-up every 2 s) reads the memory figures the
//!    capacity policy reads (`capacity::machine`: `MemAvailable`, the cgroup's room and
//!    limit, pressure stall information) and, when memory is short or all kept segments of
//!    this user in the directory hold more than `KeptMemory::bound_bytes`, punches out
//!    the coldest clean pages of its segment (`trim`), under the `flock` (taken without
//!    waiting, a step of at most `TRIM_STEP_BYTES` at a time);
//! 4. leaves when a new owner adopted the segment (the header's keeper pid is no longer
//!    its own: the adopter wakes it, `wake_steward`, from its sleep on that word), when the segment was removed (no link left) or changed state, when it has
//!    nothing left to give back (it removes the segment then: the next cache of the name
//!    starts cold, as it would have), and after `KeptMemory::idle_remove_after` of
//!    nobody using the segment (it removes it).
//!
//! What is punched: first the free frames the file still holds (freed by an eviction or a
//! deleted file and left allocated: a DEAD entry that no folio spans), at once when the
//! steward starts and before every trim; then only folios the side table proves were clean cached pages of a file
//! (`segment::scan`'s proof: uptodate, not locked, under writeback, failed or detached,
//! well placed, unclaimed by another) and that are not DIRTY. Their side-table entries
//! are reset to free first, then their frames are punched (`Segment::punch_frames`): a
//! kill between the two leaves a free entry over a frame still allocated, which an
//! adoption treats as free memory, never as a page. The header, the slots and the side
//! table stay. A DIRTY frame is never punched, not even in a written segment (whose keeper
//! wrote it back without clearing the flag): such frames go with the segment.
//!
//! Coldness: the side table keeps no recency (the eviction queues' order is the owner's,
//! in its memory); it keeps each folio's access frequency (0..=3, the S3-FIFO counter).
//! The coldest are the least frequent, ties in frame order: the same order in which an
//! adoption over its capacity drops them (`Plan::fit`).
//!
//! Protection: the steward changes the segment only while it holds its `flock` and the
//! header names it as the keeper (an adoption resets that pid under the `flock`, which the
//! new owner then holds for its life), and the file's size is the one it mapped.
//!
//! On by default (`KeptMemory::steward`); what waits for a dropped named cache's keeper
//! waits for its writeback to be over (the segment marked finished, its holder
//! `Holder::Steward`), not for its exit.
//!
//! Limits: a segment of another directory than its own is not trimmed by its steward,
//! and the bound counts only segments in the steward's directory; a segment left by an
//! older build, or whose keeper was killed, has no steward (the next cache of its
//! directory settles it, or `folio-stat remove`). A spike of memory use faster than a
//! tick at the reserve (50 ms) meets the kernel before the steward.

use std::fs::File as StdFile;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::capacity::give_back::{next_tick, want_bytes, TICK_MIN};
use crate::capacity::machine::MemorySource;
use crate::folio_meta::FolioMeta;
use crate::segment::layout::SegmentState;
use crate::segment::scan;
use crate::segment::{self, Holder, Segment, STEWARD_LOCK_OFFSET};
use crate::types::{ORDER_MAX, PAGE_BYTES};

/// The share of the memory limit (the machine's, or the cgroup's) that all kept segments
/// of a user in one directory may hold by default: a quarter.
pub const KEPT_SHARE_DIVISOR_DEFAULT: u64 = 4;
/// How long a kept segment nobody uses stays by default: 6 hours.
pub const KEPT_IDLE_REMOVE_DEFAULT: Duration = Duration::from_secs(6 * 3600);
/// The most a steward punches under one hold of the segment's `flock`: an adoption
/// waits for at most one step (tens of milliseconds).
const TRIM_STEP_BYTES: u64 = 256 << 20;

/// How a named persistent cache's kept segment gives its memory back after the cache is
/// gone (`CacheBuilder::kept_memory`, module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptMemory {
    /// What all kept segments of this user in the segment's directory may hold, in bytes
    /// (their files' allocated blocks); past it, each steward punches its share of the
    /// excess. `None`: a quarter of the memory limit (`KEPT_SHARE_DIVISOR_DEFAULT`).
    pub bound_bytes: Option<u64>,
    /// A kept segment nobody adopted for this long is removed. Default: 6 hours.
    pub idle_remove_after: Duration,
    /// Whether the keeper stays as the kept segment's steward. Default: yes. Off, the
    /// keeper exits once its work is done, and the segment is held by nobody until it is
    /// adopted or removed (memory the kernel cannot reclaim: tmpfs without swap).
    pub steward: bool,
    /// A directory read in place of `/proc` for the memory figures (`meminfo`,
    /// `pressure/memory`), without cgroups: a test's simulated machine. `None`: the
    /// machine's and the process's cgroup's.
    pub memory_files: Option<PathBuf>,
}

impl Default for KeptMemory {
    fn default() -> Self {
        KeptMemory {
            bound_bytes: None,
            idle_remove_after: KEPT_IDLE_REMOVE_DEFAULT,
            steward: true,
            memory_files: None,
        }
    }
}

/// What a trim gave back (`trim_kept_segment`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Trimmed {
    /// Pages punched out: free frames still allocated, then cached pages.
    pub pages: u64,
    /// Of those, free frames (no page in them: freed by an eviction or a deleted file, and
    /// left allocated in the file).
    pub free_pages: u64,
    /// Proven clean pages left after it (what an adoption could still keep).
    pub pages_left: u64,
}

/// Punches up to `bytes` of the coldest clean pages out of the kept segment at `path`
/// (module docs: what is punched), as its steward does under memory pressure: for a
/// user, or a test, that wants the memory now.
///
/// Errors: `Segment::open_orphan`'s (`WouldBlock` while an owner, a keeper or a steward's
/// trim holds it; a segment of another user, a symlink...); `InvalidInput` for a segment
/// not in state written (it may hold writes not on disk yet: recovered first by the next
/// cache of its directory).
///
/// Context: takes the segment's `flock` without waiting, for the trim.
pub fn trim_kept_segment(path: &Path, bytes: u64) -> io::Result<Trimmed> {
    let segment = Segment::open_orphan(path)?;
    if segment.header().state() != Some(SegmentState::Written) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "folio: segment {} is not written: it is not trimmed",
                path.display()
            ),
        ));
    }
    Ok(trim(&segment, bytes / PAGE_BYTES as u64))
}

/// The proven clean folios of a side table (module docs: what is punched), coldest first,
/// as (head frame, pages).
pub(crate) fn coldest_clean(
    entries: &[FolioMeta],
    ranges: impl IntoIterator<Item = std::ops::Range<u32>>,
) -> Vec<(u32, u32)> {
    let mut found: Vec<scan::Found> = scan::scan_entries(entries, ranges)
        .folios
        .into_iter()
        .filter(|f| !entries[f.frame.as_usize()].state.load().is_dirty())
        .collect();
    found.sort_by_key(|f| (f.freq, f.frame.0));
    found
        .into_iter()
        .map(|f| (f.frame.0, f.order.pages() as u32))
        .collect()
}

/// The frames of `resident` that hold no page: their side-table entry was written and is
/// DEAD (free), and no folio that is not (of any state) spans them as a tail. An entry in
/// a part of the side table never written is not read (reading it would allocate it) and
/// its frame is not counted free.
pub(crate) fn free_frames(
    entries: &[FolioMeta],
    written: &[std::ops::Range<u32>],
    resident: &[std::ops::Range<u32>],
) -> Vec<std::ops::Range<u32>> {
    let n = entries.len();
    let mut free = vec![0u64; n.div_ceil(64)];
    let set = |bits: &mut Vec<u64>, f: usize, on: bool| {
        if on {
            bits[f / 64] |= 1 << (f % 64);
        } else {
            bits[f / 64] &= !(1 << (f % 64));
        }
    };
    let written: Vec<std::ops::Range<usize>> = written
        .iter()
        .map(|r| (r.start as usize).min(n)..(r.end as usize).min(n))
        .collect();
    for r in &written {
        for f in r.clone() {
            if entries[f].state.load().is_dead() {
                set(&mut free, f, true);
            }
        }
    }
    for r in &written {
        for f in r.clone() {
            if entries[f].state.load().is_dead() {
                continue;
            }
            let order = entries[f].identity_raw().2.min(u64::from(ORDER_MAX));
            let end = (f + (1usize << order)).min(n);
            for t in f..end {
                set(&mut free, t, false);
            }
        }
    }
    let mut runs: Vec<std::ops::Range<u32>> = Vec::new();
    for r in resident {
        for f in r.start..r.end.min(n as u32) {
            if free[f as usize / 64] & (1 << (f % 64)) == 0 {
                continue;
            }
            match runs.last_mut() {
                Some(run) if run.end == f => run.end = f + 1,
                _ => runs.push(f..f + 1),
            }
        }
    }
    runs
}

/// Punches out the free frames still allocated (`free_frames`), then up to `pages` pages
/// (counting those) of `segment`'s coldest clean folios (whole folios: it may punch up
/// to a folio's pages more). Context: the caller holds the segment's `flock`.
fn trim(segment: &Segment, pages: u64) -> Trimmed {
    let entries = segment.meta_entries();
    let written = segment.written_meta_frames();
    let frame_count = segment.layout().frame_count;
    let resident = segment.resident_frames(0..frame_count);
    let mut free_pages = 0u64;
    for run in free_frames(entries, &written, &resident) {
        free_pages += u64::from(run.end - run.start);
        let _ = segment.punch_frames(run);
    }
    let candidates = coldest_clean(entries, written);
    let mut chosen: Vec<(u32, u32)> = Vec::new();
    let mut punched = free_pages;
    for &(frame, count) in &candidates {
        if punched >= pages {
            break;
        }
        chosen.push((frame, count));
        punched += u64::from(count);
    }
    let left: u64 = candidates[chosen.len()..]
        .iter()
        .map(|&(_, count)| u64::from(count))
        .sum();
    // Free in the side table first: an adoption then never takes a punched frame for a
    // page, even if this process dies before the punch.
    for &(frame, count) in &chosen {
        for f in frame..frame + count {
            entries[f as usize].reset();
        }
    }
    chosen.sort_unstable();
    let mut run: Option<std::ops::Range<u32>> = None;
    for &(frame, count) in &chosen {
        match &mut run {
            Some(r) if r.end == frame => r.end = frame + count,
            _ => {
                if let Some(r) = run.take() {
                    let _ = segment.punch_frames(r);
                }
                run = Some(frame..frame + count);
            }
        }
    }
    if let Some(r) = run {
        let _ = segment.punch_frames(r);
    }
    Trimmed {
        pages: punched,
        free_pages,
        pages_left: left,
    }
}

/// What the steward does next (`steward`).
enum Next {
    Stay,
    Leave,
}

/// The steward's body (module docs, steps 1 to 4), in the keeper process `me`, over
/// `segment` (the `flock` the owner shared with it still held), if it is a kept (named)
/// one and `kept` asks for a steward. Returns the exit code.
pub(super) fn steward(segment: &Segment, kept: &KeptMemory, me: u32) -> i32 {
    if !kept.steward || !segment.header().retained() {
        return 0;
    }
    if wait_until_owner_gone(segment.file()).is_err() {
        return 0;
    }
    // The `flock` goes first: whoever sees the steward's lock may take the segment at
    // once. An adopter that comes in between is seen at the first tick.
    unlock_flock(segment.file());
    if lock_steward(segment.file()).is_err() {
        return 0;
    }
    let source = kept
        .memory_files
        .clone()
        .map_or_else(MemorySource::this_process, MemorySource::with_proc_root);
    let dir = segment
        .path()
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    // Free frames hold nothing: given back at once (`trim` of no page).
    with_flock(segment, me, |segment| trim(segment, 0));
    let started = Instant::now();
    let mut stalls_before = (Instant::now(), source.read().pressure_some_total_us);
    let mut tick = TICK_MIN;
    loop {
        sleep_unless_adopted(segment, me, tick);
        if !still_ours(segment, me) {
            return 0;
        }
        if started.elapsed() >= kept.idle_remove_after {
            with_flock(segment, me, |segment| {
                let _ = segment.remove();
            });
            return 0;
        }
        let facts = source.read();
        let stalls_now = (Instant::now(), facts.pressure_some_total_us);
        let stall_share = match (stalls_before.1, stalls_now.1) {
            (Some(before), Some(now)) => {
                let us = (stalls_now.0 - stalls_before.0).as_micros().max(1) as f64;
                now.saturating_sub(before) as f64 / us
            }
            _ => 0.0,
        };
        stalls_before = stalls_now;
        let own = allocated_bytes(segment.file());
        let want = want_bytes(&facts, stall_share, own, || {
            let bound = kept
                .bound_bytes
                .unwrap_or(facts.limit_bytes / KEPT_SHARE_DIVISOR_DEFAULT);
            (kept_bytes_in(&dir), bound)
        });
        if want > 0 {
            if let Next::Leave = give_back(segment, me, want) {
                return 0;
            }
        }
        tick = next_tick(&facts);
    }
}

/// Punches `want` bytes in steps (`TRIM_STEP_BYTES`), each under the `flock`; removes the
/// segment when nothing proven clean is left to punch.
fn give_back(segment: &Segment, me: u32, want: u64) -> Next {
    let mut left = want.div_ceil(PAGE_BYTES as u64);
    while left > 0 {
        let step = left.min(TRIM_STEP_BYTES / PAGE_BYTES as u64);
        let done = with_flock(segment, me, |segment| {
            let trimmed = trim(segment, step);
            if trimmed.pages_left == 0 {
                // Everything is given back: what is left (the header, slots, side table,
                // frames it does not punch) is removed too.
                let _ = segment.remove();
                return None;
            }
            Some(trimmed.pages)
        });
        match done {
            Some(Some(pages)) if pages > 0 => left = left.saturating_sub(pages),
            Some(None) => return Next::Leave,
            // Busy (an adoption takes it: the next tick sees it) or nothing punched.
            _ => return Next::Stay,
        }
    }
    Next::Stay
}

/// Whether the segment is still this steward's: linked, written, named by the header as
/// kept by `me`.
fn still_ours(segment: &Segment, me: u32) -> bool {
    let linked = segment.file().metadata().is_ok_and(|m| m.nlink() > 0);
    let header = segment.header();
    linked
        && header.keeper_pid.load(Ordering::Relaxed) == me
        && header.state() == Some(SegmentState::Written)
        && header.retained()
}

/// Sleeps for `tick`, or less if an adoption wakes the steward (`wake_steward`): a
/// futex wait on the header's keeper pid while it still names `me` (an adoption resets
/// it). The segment is a shared file mapping, so the futex is the file's: an adopter in
/// another process wakes it.
fn sleep_unless_adopted(segment: &Segment, me: u32, tick: Duration) {
    let word = &segment.header().keeper_pid;
    let deadline = Instant::now() + tick;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || word.load(Ordering::SeqCst) != me {
            return;
        }
        let timeout = libc::timespec {
            tv_sec: left.as_secs() as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        };
        // SAFETY: FUTEX_WAIT (shared: no FUTEX_PRIVATE_FLAG) on an aligned u32 of our
        // mapping, alive as long as `segment`, with a relative timeout; it only sleeps,
        // and returns at a wake, a change of the word, a signal or the timeout.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT,
                me,
                &timeout as *const libc::timespec,
                std::ptr::null::<u32>(),
                0u32,
            )
        };
    }
}

/// Wakes the steward of `segment`, if one sleeps on it (`sleep_unless_adopted`): called
/// by an adopter once it has reset the header's keeper pid, so that the old steward
/// leaves at once (and lets go of its record lock) instead of at its next tick.
///
/// Context: the adopter holds the segment's `flock`; any thread.
pub(crate) fn wake_steward(segment: &Segment) {
    let word = &segment.header().keeper_pid;
    // SAFETY: FUTEX_WAKE (shared) on an aligned u32 of our mapping, alive during the
    // call; it reads nothing else and wakes at most every waiter.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
}

/// Runs `work` holding the segment's `flock` (taken without waiting), if the segment is
/// still this steward's and as long as it mapped it; `None` if it could not.
fn with_flock<R>(segment: &Segment, me: u32, work: impl FnOnce(&Segment) -> R) -> Option<R> {
    segment::lock_exclusive(segment.file()).ok()?;
    let size_kept = segment
        .file()
        .metadata()
        .is_ok_and(|m| m.len() == segment.layout().total_bytes);
    let result = (size_kept && still_ours(segment, me)).then(|| work(segment));
    unlock_flock(segment.file());
    result
}

/// The file's allocated bytes (`st_blocks`).
fn allocated_bytes(file: &StdFile) -> u64 {
    file.metadata().map_or(0, |m| m.blocks() * 512)
}

/// What the kept segments of this user in `dir` hold (allocated bytes): those nobody or a
/// steward holds.
fn kept_bytes_in(dir: &Path) -> u64 {
    segment::holders_in(dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, holder)| matches!(holder, Holder::Nobody | Holder::Steward))
        .filter_map(|(path, _)| std::fs::symlink_metadata(path).ok())
        .map(|m| m.blocks() * 512)
        .sum()
}

/// Blocks until no other open file holds a record lock on the segment's first byte: the
/// owner's (module docs, step 1).
pub(super) fn wait_until_owner_gone(file: &StdFile) -> io::Result<()> {
    let mut lock = record_lock(libc::F_WRLCK, 0, 1);
    loop {
        // SAFETY: fcntl F_OFD_SETLKW with a valid flock on our descriptor.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLKW, &lock) } == 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    lock.l_type = libc::F_UNLCK as libc::c_short;
    // SAFETY: as above; releases what was just taken.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
    Ok(())
}

/// The steward's record lock (`STEWARD_LOCK_OFFSET`), for as long as its open file lives.
fn lock_steward(file: &StdFile) -> io::Result<()> {
    let lock = record_lock(libc::F_RDLCK, STEWARD_LOCK_OFFSET, 1);
    // SAFETY: fcntl F_OFD_SETLK with a valid flock on our descriptor.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn record_lock(kind: libc::c_int, start: i64, len: i64) -> libc::flock {
    // SAFETY: all-zero is a valid flock (l_pid 0, as OFD locks want).
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = start as libc::off_t;
    lock.l_len = len as libc::off_t;
    lock
}

fn unlock_flock(file: &StdFile) {
    // SAFETY: flock on our open descriptor.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refcount::{DEAD, DIRTY, FREQ_SHIFT, LOCKED, UPTODATE, WRITEBACK};

    #[test]
    fn dirty_and_unproven_frames_are_never_chosen_and_the_coldest_come_first() {
        let m = |state: u64, index: u64| FolioMeta::from_raw(state, 1, index);
        let freq = |f: u64| f << FREQ_SHIFT;
        let entries = vec![
            m(UPTODATE | freq(3), 0),           // 0: hot, clean
            m(UPTODATE | DIRTY, 1),             // 1: dirty
            m(UPTODATE, 2),                     // 2: cold, clean
            m(UPTODATE | LOCKED, 3),            // 3: I/O in flight
            m(UPTODATE | DIRTY | WRITEBACK, 4), // 4: under writeback
            m(DEAD, 0),                         // 5: free
            m(0, 6),                            // 6: never read
            m(UPTODATE | freq(1), 7),           // 7: warm, clean
        ];
        let chosen = coldest_clean(&entries, std::iter::once(0..entries.len() as u32));
        assert_eq!(chosen, vec![(2, 1), (7, 1), (0, 1)]);
    }

    #[test]
    fn free_frames_are_dead_entries_outside_any_folio_and_resident() {
        let m = |state: u64, place: u64| FolioMeta::from_raw(state, 1, place);
        let order2 = 2u64 << 52; // a folio of 4 pages
        let entries = vec![
            m(UPTODATE, order2), // 0: head of 0..4
            m(DEAD, 0),          // 1-3: its tails
            m(DEAD, 0),
            m(DEAD, 0),
            m(DEAD, 0), // 4: free
            m(DEAD, 0), // 5: free, not resident
            m(0, 0),    // 6: never used
            m(DEAD, 0), // 7: free, its side-table part never written
        ];
        let written = [0..4, 4..7];
        let one = |r: std::ops::Range<u32>| std::iter::once(r).collect::<Vec<_>>();
        assert_eq!(free_frames(&entries, &written, &[0..5, 7..8]), one(4..5));
        assert_eq!(free_frames(&entries, &written, &[0..3, 3..8]), one(4..6));
    }
}
