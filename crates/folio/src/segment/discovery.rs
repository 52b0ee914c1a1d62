//! Finding segments: the folio segments of this user in a directory and who holds each
//! (`holders_in`, for a new cache's build and a steward's count), and the same listed with
//! their headers' figures for a look from outside (`segments_in`: the public listing,
//! `folio-stat list`).
//!
//! Protection: the directory is opened checked (`SegmentDir::open`), every file is read
//! through it; symlinks, files of other users and files without the segment's magic are
//! passed over; a header this build cannot read is reported (`SegmentInfo::unreadable`),
//! never trusted.

use std::fs::File as StdFile;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::holder::{holder_of, Holder};
use super::home::{DiskDir, SegmentDir};
use super::layout::{SegmentState, HEADER_BYTES};
use super::lifecycle::{open_ours, with_header};
use super::my_uid;

/// The folio segments of this user in `dir` and who holds each: regular files (not
/// symlinks) owned by this user whose header starts with the segment's magic, read
/// through the directory checked (`SegmentDir::open`, any file system).
///
/// Errors: `SegmentDir::open`'s (a directory of another user, one others can write, a
/// symlink in its path: `PermissionDenied`); reading the directory's.
pub fn holders_in(dir: &Path) -> io::Result<Vec<(PathBuf, Holder)>> {
    let dir = SegmentDir::open(dir, DiskDir::Allowed)?;
    let me = my_uid();
    let mut found = Vec::new();
    for name in dir.names()? {
        let Ok(st) = dir.stat(&name) else {
            continue;
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG
            || st.st_uid != me
            || (st.st_size as u64) < HEADER_BYTES
        {
            continue;
        }
        let Ok(file) = dir.open_file(&name, libc::O_RDONLY | libc::O_NONBLOCK, 0) else {
            continue;
        };
        let mut magic = [0u8; 8];
        use std::os::unix::fs::FileExt;
        if file.read_exact_at(&mut magic, 0).is_err() || &magic != b"FOLIOSEG" {
            continue;
        }
        found.push((dir.join(&name), holder_of(&file)));
    }
    Ok(found)
}

/// A segment found in a directory (`segments_in`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SegmentInfo {
    pub path: PathBuf,
    /// Who holds it now.
    pub holder: Holder,
    /// Its state as its header says; `None` if this build cannot read the header.
    pub state: Option<SegmentState>,
    /// The owner's and the keeper's pids as the header records them (the last ones).
    pub owner_pid: u32,
    pub keeper_pid: u32,
    /// The file's length (frames reserved, most of them holes).
    pub size_bytes: u64,
    /// Memory it takes in its file system now (`st_blocks`).
    pub resident_bytes: u64,
    /// When it was last changed.
    pub modified: Option<SystemTime>,
    /// Why this build cannot view it (another layout, damaged, too short): `None` if it
    /// can.
    pub unreadable: Option<String>,
}

/// Every folio segment of this user in `dir`, with who holds it, its state and its size:
/// regular files (not symlinks) owned by this user whose header starts with the segment's
/// magic. Other files, and other users' segments, are passed over.
///
/// Errors: reading the directory's (`NotFound`, `PermissionDenied`).
///
/// Context: takes no lock; opens each file and reads its header.
pub fn segments_in(dir: impl AsRef<Path>) -> io::Result<Vec<SegmentInfo>> {
    let mut found = Vec::new();
    for (path, holder) in holders_in(dir.as_ref())? {
        let Ok(file) = open_read_only(&path) else {
            continue;
        };
        let Ok(meta) = file.metadata() else { continue };
        let header = with_header(&file, |header| {
            let pid = |word: &std::sync::atomic::AtomicU32| {
                word.load(std::sync::atomic::Ordering::Relaxed)
            };
            (
                header.check(meta.len()).err().map(|e| e.to_string()),
                header.state(),
                pid(&header.owner_pid),
                pid(&header.keeper_pid),
            )
        });
        let (unreadable, state, owner_pid, keeper_pid) =
            header.unwrap_or_else(|e| (Some(e.to_string()), None, 0, 0));
        found.push(SegmentInfo {
            path,
            holder,
            state: if unreadable.is_none() { state } else { None },
            owner_pid,
            keeper_pid,
            size_bytes: meta.len(),
            resident_bytes: meta.blocks() * 512,
            modified: meta.modified().ok(),
            unreadable,
        });
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// The segment at `path` opened read-only, with `open_ours`'s checks.
fn open_read_only(path: &Path) -> io::Result<StdFile> {
    let (dir, name) = SegmentDir::of_segment(path)?;
    open_ours(&dir, &name, libc::O_RDONLY).map(|(file, _)| file)
}
