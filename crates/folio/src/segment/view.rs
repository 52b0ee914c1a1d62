//! A persistent cache's segment seen from outside, read-only: what `folio-stat` shows, as
//! `vmstat`, `cachestat` and `fincore` show the kernel's page cache. A running cache, or
//! the last figures of one that is gone (its segment left in its directory).
//!
//! - `SegmentView::open`: the segment mapped read-only (`Segment::open_view`), with the
//!   checks of a recovery (this user's, mode 0600, not a symlink, a header this build
//!   reads) and without its lock, so that a live owner or its keeper keeps it.
//! - `SegmentView::stats`: the counters the owner last published (`published`: about once a
//!   second from its writeback thread, on `Cache::publish_stats`, and a last time when
//!   the cache is dropped, after its final writeback), turned back into a `Stats` by name.
//! - `SegmentView::files`: per file, its cached, dirty and under-writeback pages, from a
//!   walk of the side table's written pages (`Segment::written_meta_frames`) and the file
//!   slots: what the segment itself says, not what the owner published.
//! - `segments_in`, `remove_segment`: listing and removing segments.
//!
//! Limits: the walk of a live cache's side table reads state words that move under it
//! (each is read once, atomically): its figures are a moment's, a few pages off from the
//! published gauges, which were taken at another moment. A segment truncated by its user
//! while viewed would fault the viewer (SIGBUS); no folio process truncates one.

use std::collections::HashMap;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::holder::lock_unused;
use super::layout::{SegmentState, SIZE_UNKNOWN};
use super::lifecycle::open_ours;
use super::published::{StatValue, Unread};
use super::{holder_of, Holder, Segment, SegmentDir};
use crate::folio_meta::MappingId;
use crate::stats::Stats;
use crate::types::{ORDER_MAX, PAGE_BYTES};

/// A segment mapped read-only (module docs).
#[derive(Debug)]
pub struct SegmentView {
    segment: Segment,
}

/// The counters a cache's owner last published in its segment (`SegmentView::stats`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PublishedStats {
    /// Every counter this build knows, by name; one the segment did not carry is 0 and
    /// listed in `missing`.
    pub stats: Stats,
    /// Numbers the segment carries under names this build does not know (a newer
    /// folio's), in its order.
    pub unknown: Vec<(String, u64)>,
    /// Names of `Stats::FIELDS` the segment did not carry (an older folio's).
    pub missing: Vec<&'static str>,
    /// When the owner published them.
    pub published: SystemTime,
    /// The process that published them (the owner).
    pub publisher_pid: u32,
    /// Publishes since the segment was created, this one included.
    pub publishes: u64,
}

/// One file's pages in a segment (`SegmentView::files`), as `fincore` shows a file's pages
/// in the kernel's cache.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileUsage {
    /// The cache's number for the file (its slot).
    pub mapping_id: u32,
    /// Its path when the cache opened it; `None` if the slot holds none (a path too long
    /// to record, or a slot being rewritten as it was read).
    pub path: Option<PathBuf>,
    /// Its logical size, once the cache wrote or resized it.
    pub size_bytes: Option<u64>,
    /// Pages cached (allocated to the file: read, being read, or written).
    pub cached_pages: u64,
    /// Of those, pages of folios dirty (not on disk yet).
    pub dirty_pages: u64,
    /// Of those, pages of folios whose writeback is in flight.
    pub writeback_pages: u64,
}

impl SegmentView {
    /// Maps the segment at `path` read-only, without its lock (module docs).
    ///
    /// Errors: `NotFound`; `PermissionDenied` for a symlink, a file that is not regular, a
    /// segment of another user or one readable by others, or a directory that is not
    /// checked safe (`SegmentDir::of_segment`);
    /// `InvalidData` for a file that is not a segment, or one of another layout or
    /// damaged (the message says which).
    ///
    /// Context: any process of the segment's user; takes no lock, blocks only in
    /// `open(2)` and `mmap(2)`.
    pub fn open(path: impl AsRef<Path>) -> io::Result<SegmentView> {
        let segment = Segment::open_view(path.as_ref())?;
        Ok(SegmentView { segment })
    }

    pub fn path(&self) -> &Path {
        self.segment.path()
    }

    /// What the segment is doing, as its header says (`None`: a value this build does not
    /// know).
    pub fn state(&self) -> Option<SegmentState> {
        self.segment.header().state()
    }

    /// The pid of the process that created the segment (it may be gone).
    pub fn owner_pid(&self) -> u32 {
        self.segment
            .header()
            .owner_pid
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The pid of its keeper (it may be gone).
    pub fn keeper_pid(&self) -> u32 {
        self.segment
            .header()
            .keeper_pid
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Who holds the segment now: its owner, its keeper, or nobody (module docs of
    /// `segment`, exclusion).
    pub fn holder(&self) -> Holder {
        holder_of(self.segment.file())
    }

    /// The largest capacity the segment holds frames for, in bytes.
    pub fn capacity_max_bytes(&self) -> u64 {
        u64::from(self.segment.layout().frame_count) * PAGE_BYTES as u64
    }

    /// The counters the owner last published; `None` if it never did (a segment of a
    /// folio without a stats area, or one dropped before its first publish).
    ///
    /// Errors: `InvalidData` for a stats area of another format; `WouldBlock` if the
    /// owner kept rewriting it while it was read (try again).
    ///
    /// Context: takes no lock; never waits for the owner.
    pub fn stats(&self) -> io::Result<Option<PublishedStats>> {
        let snapshot = match self.segment.stats_area().read() {
            Ok(snapshot) => snapshot,
            Err(Unread::NeverPublished) => return Ok(None),
            Err(Unread::OtherFormat) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "folio: the stats area of {} is of another format",
                        self.path().display()
                    ),
                ))
            }
            Err(Unread::Busy) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "folio: the owner kept rewriting its stats; try again",
                ))
            }
        };
        let mut by_name: HashMap<&str, &StatValue> = snapshot
            .entries
            .iter()
            .map(|(name, value)| (name.as_str(), value))
            .collect();
        let mut stats = Stats::default();
        let mut missing = Vec::new();
        for (field, value) in stats.values_mut() {
            match by_name.remove(field.name) {
                Some(StatValue::Number(n)) => *value = *n,
                _ => missing.push(field.name),
            }
        }
        let text = |value: Option<&StatValue>| match value {
            Some(StatValue::Text(text)) => text.clone(),
            _ => String::new(),
        };
        stats.backend = text(by_name.remove("backend"));
        stats.eviction = text(by_name.remove("eviction"));
        let unknown = snapshot
            .entries
            .iter()
            .filter(|(name, _)| by_name.contains_key(name.as_str()))
            .filter_map(|(name, value)| match value {
                StatValue::Number(n) => Some((name.clone(), *n)),
                StatValue::Text(_) => None,
            })
            .collect();
        Ok(Some(PublishedStats {
            stats,
            unknown,
            missing,
            published: UNIX_EPOCH + Duration::from_millis(snapshot.published_unix_ms),
            publisher_pid: snapshot.publisher_pid,
            publishes: snapshot.publishes,
        }))
    }

    /// Every file with pages in the segment, with its cached, dirty and under-writeback
    /// pages, most cached first (module docs: a walk of the side table's written pages).
    ///
    /// Context: takes no lock; reads the side table (24 bytes per frame ever used) and the
    /// slots of the files found.
    pub fn files(&self) -> Vec<FileUsage> {
        let segment = &self.segment;
        let frame_count = segment.layout().frame_count;
        let chunk = 1u32 << ORDER_MAX;
        let mut usage: HashMap<u32, FileUsage> = HashMap::new();
        for range in segment.written_meta_frames() {
            let mut frame = range.start / chunk * chunk;
            while frame < range.end {
                let Some(meta) = segment.meta(frame) else {
                    break;
                };
                let state = meta.state.load();
                let (mapping, _, order) = meta.identity();
                let pages = order.pages() as u32;
                let is_head = frame % pages == 0 && frame + pages <= frame_count;
                if state.is_dead() || !is_head {
                    frame += 1;
                    continue;
                }
                let file = usage.entry(mapping.0).or_insert_with(|| FileUsage {
                    mapping_id: mapping.0,
                    path: None,
                    size_bytes: None,
                    cached_pages: 0,
                    dirty_pages: 0,
                    writeback_pages: 0,
                });
                let pages = u64::from(pages);
                file.cached_pages += pages;
                if state.is_dirty() {
                    file.dirty_pages += pages;
                }
                if state.is_writeback() {
                    file.writeback_pages += pages;
                }
                frame += pages as u32;
            }
        }
        let mut files: Vec<FileUsage> = usage.into_values().collect();
        for file in &mut files {
            let record = segment
                .slot(MappingId(file.mapping_id))
                .and_then(|slot| slot.read());
            if let Some(record) = record {
                file.path = (!record.path.is_empty())
                    .then(|| PathBuf::from(std::ffi::OsStr::from_bytes(&record.path)));
                file.size_bytes = (record.size_bytes != SIZE_UNKNOWN).then_some(record.size_bytes);
            }
        }
        files.sort_by(|a, b| (b.cached_pages, a.mapping_id).cmp(&(a.cached_pages, b.mapping_id)));
        files
    }
}

/// Removes the segment at `path`, if nobody holds it. What it still held is lost: a
/// segment left by a killed keeper (state `Orphaned`) may hold writes not yet on disk,
/// which `recover_segment` writes back (and then removes it).
///
/// Errors: `WouldBlock` while its owner or keeper holds it; `NotFound`;
/// `PermissionDenied` for a symlink, a file that is not regular, another user's file or
/// one readable by others, or a directory that is not checked safe
/// (`SegmentDir::of_segment`); `InvalidData` for a file that is not a folio segment.
///
/// Context: takes the segment's lock (without waiting) for the removal, which goes through
/// the checked directory's descriptor (`unlinkat`).
pub fn remove_segment(path: impl AsRef<Path>) -> io::Result<()> {
    let path = path.as_ref();
    let (dir, name) = SegmentDir::of_segment(path)?;
    let (file, _) = open_ours(&dir, &name, libc::O_RDONLY)?;
    let mut magic = [0u8; 8];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut magic, 0)?;
    if &magic != b"FOLIOSEG" {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("folio: {} is not a folio segment", path.display()),
        ));
    }
    lock_unused(&file, path)?;
    // Only if the name still names the file we locked (not one put there since).
    if dir.unlink_if_same(&name, &file)? {
        Ok(())
    } else if dir.stat(&name).is_ok() {
        Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!("folio: segment {} was replaced meanwhile", path.display()),
        ))
    } else {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("folio: segment {} is gone", path.display()),
        ))
    }
}
