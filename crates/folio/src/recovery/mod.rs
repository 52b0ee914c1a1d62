//! Recovery by another process (DESIGN.md §9): a segment whose owner died and whose keeper
//! was killed before its writeback was done, finished by whoever comes next.
//!
//! - `recover_segment`: one segment, by its path (a user's call, `folio::recover_segment`,
//!   or an adoption that found one unfinished, `adopt::take`): its dirty pages written back
//!   through files reopened by the paths their slots record (`reopen`), with the keeper's
//!   own writeback (`keeper::orphan`), sizes settled, files synced, the segment removed or
//!   (a named one) left written for its next cache.
//! - `settle_dir`: every segment in a directory, before a new persistent cache starts
//!   there: waits for the keepers still writing (`wait_for_keeper`), recovers those nobody
//!   holds, removes kept ones whose files are all gone.
//!
//! Protection (the segment is untrusted input: its owner's user can write any byte of it,
//! and so can a root owner that dropped privileges and kept its descriptors):
//! - A keeper that ended otherwise than by a kill marked the segment finished (the owner's
//!   execute bit, `keeper::is_finished`). A recovery by a process that bypasses file
//!   permissions (root: `bypasses_permissions`) writes nothing by path into a finished
//!   segment's files: what the keeper could not write (a failure) is not retried from a
//!   segment a privilege-dropped owner could have changed since (the attack of issue 42).
//!   Any other user's recovery retries it within the rules below: it cannot write what its
//!   user could not.
//! - A segment no keeper vouched for (`keeper::is_vouched`: its owner's ids changed
//!   before its keeper's fork, or a kept one's witness saw a change) is treated as a
//!   finished one by a process that bypasses permissions: nothing is written by path.
//!   A killed keeper's segment keeps the mark it set at its start, and stays recoverable.
//! - A recovery by path (a keeper killed, unmarked) writes a file only if its slot says the
//!   owner opened it for writing, the path still leads to the file the slot names (device,
//!   inode, birth time), and the file is this user's and writable by them: never a file the
//!   segment only read, never another user's file.
//! - Whatever a recovery cannot prove it refuses: the segment is then removed (its dirty
//!   pages can be written by no one), or a named one left orphaned and marked finished for
//!   the next cache of its name to replace; never adopted with pages the disk does not hold.
//!
//! Limits: a keeper killed by root or by its own user leaves no mark, and a recovery then
//! trusts the slots' flags within the rules above. `settle_dir` waits at most
//! `KEEPER_WAIT_MAX` for each keeper, then goes on.

use std::collections::HashMap;
use std::fs::File as StdFile;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::folio_meta::MappingId;
use crate::keeper::orphan::{self, finish, Written};
use crate::keeper::{
    is_finished, is_vouched, mark_finished_raw, CapData, CapHeader, CAPABILITY_VERSION_3,
};
use crate::segment::layout::{Opened, SegmentState};
use crate::segment::{self, Holder, Segment};

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
    let bypasses = bypasses_permissions();
    let finished = is_finished(segment.file()) && bypasses;
    // A segment no keeper vouched for (its owner may have changed credentials while it
    // lived: module docs, protection) is not written from by path either.
    let unvouched = !finished && !is_vouched(segment.file()) && bypasses;
    let not_by_path = finished || unvouched;
    let mut files = HashMap::new();
    let mut files_not_found = 0;
    let mut files_refused = 0;
    // Every file with dirty pages, and every file folio wrote (its logical size may not be
    // the disk's yet: a last block written whole, a `set_len` not applied).
    let dirty = orphan::dirty_mappings(&segment);
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
        if not_by_path {
            // The keeper ended (and wrote what it could), or nobody vouches for the
            // segment: nothing is written by path. A size alone is not settled: a forged
            // one must not cut a file.
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
    // The protection of issue 42: nothing of a finished or unvouched segment is written by
    // path.
    assert!(!not_by_path || files.is_empty());
    let written = if not_by_path && files_refused == 0 {
        // Nothing to write: settle the state only.
        finish(&segment, &mut HashMap::new())?
    } else if not_by_path {
        Written::default()
    } else {
        finish(&segment, &mut files)?
    };
    let mut refused_because = None;
    if files_refused > 0 {
        let why = if unvouched {
            format!(
                "no keeper vouched for the segment (its owner's credentials may have changed \
                 while it lived, or an older build made it): the dirty pages of \
                 {files_refused} file(s) are not written by path from it"
            )
        } else if finished {
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
    // A refusal is always said, and only a refusal.
    assert_eq!(files_refused > 0, refused_because.is_some());
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
    for (path, holder) in segment::holders_in(dir)? {
        settle_segment(&path, holder, &mut settled);
    }
    // Only a segment recovered here is removed here.
    assert!(settled.removed <= settled.recovered);
    Ok(settled)
}

/// How many times `settle_segment` looks again at a segment it waited for.
const SETTLE_LOOKS_MAX: u32 = 4;

/// One segment of `settle_dir`, found held by `holder`: waited for while a keeper writes
/// it back, and recovered here when nobody holds it. After a wait it is looked at again:
/// the keeper waited for may have been killed before it was done (its segment is then
/// nobody's, unwritten, and recovered here), or the wait was for a brief holder (another
/// new cache recovering it, a fork of a process holding copies of its descriptors).
///
/// Context: the cache's build; may sleep up to `KEEPER_WAIT_MAX` per wait.
fn settle_segment(path: &Path, mut holder: Holder, settled: &mut Settled) {
    let mut waited = false;
    for _ in 0..SETTLE_LOOKS_MAX {
        match holder {
            Holder::Owner => return,
            Holder::Keeper => {
                if !waited {
                    settled.waited += 1;
                    waited = true;
                }
                wait_for_keeper(path);
            }
            // A steward holds the segment's lock only while it trims: then the recovery
            // says WouldBlock and this waits as for a keeper.
            Holder::Nobody | Holder::Steward => match recover_segment(path) {
                Ok(_) => {
                    settled.recovered += 1;
                    if remove_if_files_gone(path) {
                        settled.removed += 1;
                    }
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                // Another new cache recovers it now, or a fork holds it for a moment.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait_for_keeper(path),
                Err(e) => {
                    eprintln!("folio: segment {} left as it is: {e}", path.display());
                    return;
                }
            },
        }
        // Looked at again after the wait: a segment gone (removed by its keeper) is
        // settled; one nobody holds now is recovered (at once, if its keeper wrote it).
        let Ok(file) = StdFile::open(path) else {
            return;
        };
        holder = segment::holder_of(&file);
    }
    eprintln!(
        "folio: segment {} still held after {SETTLE_LOOKS_MAX} looks; left as it is",
        path.display()
    );
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
