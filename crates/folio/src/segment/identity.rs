//! Who a file is and how it looked: its identity (device, inode, birth time:
//! `identity_of`) and its stamp (size, times, generation: `stamp_of`), recorded in its slot
//! after the cache's last write to it (`Segment::stamp_files`) so that a restart can tell
//! a file unchanged since from one changed behind the cache's back (`adopt::files`).
//!
//! Limits: a change made within the clock tick of the stamp's own change time cannot be
//! told from none; `stamp_files` waits that tick out (`STAMP_TICK_NS`).

use std::ffi::OsStr;
use std::fs::File as StdFile;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

use super::layout::{FileIdentity, FileStamp, STAMP_TICK_NS};
use super::Segment;
use crate::folio_meta::MappingId;

/// This process's effective user: the only one whose segments it uses.
pub fn my_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// The identity and stamp of the open `file` now (`fstat`, and the file system's
/// generation where it keeps one).
///
/// Errors: `fstat`'s.
pub fn stamp_of(file: &StdFile) -> io::Result<(FileIdentity, FileStamp)> {
    let meta = file.metadata()?;
    Ok((identity_of(&meta), stamp_from(&meta, generation_of(file))))
}

/// The stamp `meta` (and a generation read from the file) describe, taken now.
pub fn stamp_from(meta: &std::fs::Metadata, generation: u64) -> FileStamp {
    let ns = |sec: i64, nsec: i64| sec.saturating_mul(1_000_000_000).saturating_add(nsec);
    FileStamp {
        size_bytes: meta.len(),
        mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
        ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        generation,
        taken_ns: now_ns(),
    }
}

/// The real-time clock in ns (the clock file times come from).
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// The inode's generation (`FS_IOC_GETVERSION`: ext4, xfs, btrfs keep one; 0 elsewhere):
/// an inode number reused by a new file gets a new one.
pub fn generation_of(file: &StdFile) -> u64 {
    // _IOR('v', 1, long)
    const FS_IOC_GETVERSION: libc::c_ulong = 0x8008_7601;
    let mut generation: libc::c_long = 0;
    // SAFETY: the ioctl writes one long into `generation`, which lives across the call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_GETVERSION, &mut generation) };
    if rc == 0 {
        generation as u64
    } else {
        0
    }
}

/// What `FileIdentity` a file has: device, inode, and birth time (or change time).
pub fn identity_of(meta: &std::fs::Metadata) -> FileIdentity {
    let born_ns = meta
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or_else(
            || (meta.ctime() as u64).wrapping_mul(1_000_000_000) + meta.ctime_nsec() as u64,
            |d| d.as_nanos() as u64,
        );
    FileIdentity {
        dev: meta.dev(),
        ino: meta.ino(),
        born_ns,
    }
}

impl Segment {
    /// Takes again the stamps of mappings `ids` (files the cache read and did not write)
    /// that were taken in their file's last change's clock tick (a file read just after it
    /// was made), where the file still looks as the stamp says: else a restart could not
    /// prove them unchanged. Its change while the cache held it is what a live cache
    /// does not see either (docs/persistence.md).
    ///
    /// Context: as `stamp_files`.
    pub fn confirm_stamps(&self, ids: impl IntoIterator<Item = MappingId>) {
        let mut unclear = Vec::new();
        for id in ids {
            let Some(record) = self.slot(id).and_then(|slot| slot.read()) else {
                continue;
            };
            let Some(stamp) = record.stamp.filter(|s| !s.is_clear_of_last_change()) else {
                continue;
            };
            let path = Path::new(OsStr::from_bytes(&record.path));
            let Ok(file) = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
                .open(path)
            else {
                continue;
            };
            match stamp_of(&file) {
                Ok((identity, now))
                    if identity == record.identity && now.same_file_state(&stamp) =>
                {
                    unclear.push((id, file))
                }
                _ => {}
            }
        }
        self.stamp_files(unclear.iter().map(|(id, file)| (*id, file)));
    }

    /// Records each file's stamp as it is now, after the cache's last writes to it (the
    /// end of a writeback): waits first until the clock has left the tick of the latest
    /// change time among them (`STAMP_TICK_NS`), so that a change by anyone after the
    /// stamp moves a time the stamp recorded. A file that is no longer its slot's (by
    /// identity) loses its stamp.
    ///
    /// Context: the segment's only writer now (an owner whose threads stopped, a keeper,
    /// a recovery). Sleeps at most `STAMP_TICK_NS`.
    pub fn stamp_files<'f>(&self, files: impl IntoIterator<Item = (MappingId, &'f StdFile)>) {
        let files: Vec<(MappingId, &StdFile)> = files.into_iter().collect();
        let latest_ctime_ns = files
            .iter()
            .filter_map(|(_, file)| file.metadata().ok())
            .map(|meta| meta.ctime().saturating_mul(1_000_000_000) + meta.ctime_nsec())
            .max()
            .unwrap_or(0);
        let wait_ns = latest_ctime_ns + STAMP_TICK_NS - now_ns();
        if wait_ns > 0 {
            std::thread::sleep(std::time::Duration::from_nanos(
                (wait_ns as u64).min(STAMP_TICK_NS as u64),
            ));
        }
        for (id, file) in files {
            let Some(slot) = self.slot(id) else { continue };
            let recorded = slot.read().map(|record| record.identity);
            match stamp_of(file) {
                Ok((identity, stamp)) if recorded == Some(identity) => slot.set_stamp(Some(&stamp)),
                _ => slot.set_stamp(None),
            }
        }
    }
}
