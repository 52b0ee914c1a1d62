//! Adoption: a cache built with the name of a segment that a previous process left (a
//! clean exit, or a kill after its keeper's writeback) starts with that process's clean
//! pages cached, as the kernel's page cache is still warm after a restart (DESIGN.md §9,
//! docs/persistence.md).
//!
//! The steps, at build, before the cache is shared:
//! 1. Take the segment (`Segment::adopt`: only its owner's user, mode 0600, no symlink, a
//!    header this build reads; an owner or keeper that still holds it is waited for or
//!    refused; its keeper's vouch mark, else it is replaced: `keeper::is_vouched`). The
//!    marks are cleared: this life's keeper sets its own. One whose keeper was killed is finished first (`recover_segment`), so
//!    every dirty page it holds is on disk before anything is kept.
//! 2. Read the side table (`scan`): every folio whose state and place prove it was a
//!    cached page of a file (uptodate, not locked, failed, freed or detached; inside the
//!    arena, aligned, its tail frames free, no other folio claiming its pages).
//! 3. Check each file (`files`): it must be the file its slot names (device, inode, birth
//!    time, generation) and look as the slot's stamp says (size, modification and change
//!    times in ns), with the stamp clear of the clock tick of its last change. Any doubt
//!    drops the file's pages.
//! 4. Keep what fits the capacity, the most used first; build the arena around the kept
//!    folios (`Arena::list_adopted`), then the mappings (no handle open: closed files'
//!    cached pages), their indexes and the eviction queues (the least used first, so
//!    that they leave first).
//!
//! What a restart never does: serve a byte the file does not hold. The pages of a file
//! changed, replaced, truncated, extended or deleted while no cache owned it are dropped,
//! and so is everything a kill left half done (module docs of `scan`).

mod files;
use crate::segment::scan;

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::time::Duration;

use crate::arena::Arena;
use crate::folio_meta::MappingId;
use crate::index::NewFolio;
use crate::mapping::MappingTable;
use crate::memory::Memory;
use crate::segment::layout::SIZE_UNKNOWN;
use crate::segment::{self, Holder, Segment};
use crate::types::{FrameId, Order};

pub use scan::Found;

/// What a build did with a segment of its name that it could not use (another layout, a
/// damaged header).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unusable {
    /// Remove it and start cold (the default: a cache loses nothing by starting empty).
    #[default]
    Replace,
    /// Fail the build with `InvalidData`, leaving the segment as it is.
    Refuse,
}

/// What a cache's build adopted from the segment of its name (`Cache::adoption`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Adoption {
    /// Pages cached again at once.
    pub pages_kept: u64,
    /// Pages found cached and dropped: the sum of the reasons below.
    pub pages_dropped: u64,
    /// ... of files that changed, were replaced or are gone, or whose stamp cannot prove
    /// they did not (a change in the clock tick of the stamp, a slot left torn), or whose
    /// sampled pages differ from the disk's (`files`: a side table moved to another
    /// file's slot).
    pub pages_of_changed_files: u64,
    /// ... of folios a kill left half done or that no file claims (torn or detached),
    /// whose place the side table does not prove, or of files two slots claim.
    pub pages_unproven: u64,
    /// ... over the capacity (the least used).
    pub pages_over_capacity: u64,
    /// Files whose pages were kept.
    pub files_kept: u32,
    /// Files whose pages were dropped because they changed or could not be proven not to.
    pub files_dropped: u32,
    /// Bytes a killed keeper had not written back, written before the adoption.
    pub bytes_written_back: u64,
    /// The segment held a layout this build cannot read, or could not be adopted whole
    /// (`replaced_because`), and was replaced by a new, empty one.
    pub replaced: bool,
    /// Why the segment was replaced, if it was.
    pub replaced_because: Option<String>,
}

/// What of a segment taken for adoption will be kept (`take`, then `fit`, `prepare_arena`
/// and `install`).
pub(crate) struct Plan {
    folios: Vec<Found>,
    /// Frames the dead owner's I/O may still reach (`scan::Scanned::in_flight`).
    in_flight: Vec<std::ops::Range<u32>>,
    files: BTreeMap<MappingId, files::Unchanged>,
    pub adoption: Adoption,
}

/// How many 10 ms waits a build makes for a segment held briefly (below) before it calls
/// it in use: a live owner is refused after 1 s.
const BRIEF_HOLD_WAITS: u32 = 100;

/// Takes the segment at `path` for a cache of `frame_count` frames, or `None` if there is
/// none (or it was unusable and `Replace` removed it: `replaced` then says so).
///
/// Errors: `WouldBlock` if a live owner holds it; under `Refuse`, `InvalidData` for a
/// segment of another layout or a damaged one; `PermissionDenied` / `InvalidInput` for
/// another user's segment, one readable by others, a symlink (never replaced: not ours).
pub(crate) fn take(
    path: &Path,
    frame_count: u32,
    unusable: Unusable,
) -> io::Result<Option<(Segment, Plan)>> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    let mut adoption = Adoption::default();
    let mut waits = 0;
    let segment = loop {
        let attempt = crate::recovery::recover_segment(path).and_then(|recovered| {
            adoption.bytes_written_back += recovered.written.bytes;
            if let Some(why) = recovered.refused_because {
                return Err(Replace(why).into());
            }
            if recovered.written.failed_files > 0 {
                return Err(Replace(format!(
                    "the dirty pages of {} file(s) could not be written back: they are not on disk, and are not kept as if they were",
                    recovered.written.failed_files
                ))
                .into());
            }
            Segment::adopt(path, frame_count).and_then(|segment| {
                // Its keeper vouched for it (`keeper::vouch_raw`), and no witness took it
                // back: read before this adoption clears the marks.
                if crate::keeper::is_vouched(segment.file()) {
                    Ok(segment)
                } else {
                    Err(io::Error::new(io::ErrorKind::InvalidData, Unvouched))
                }
            })
        });
        match attempt {
            Ok(segment) => break segment,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let holder = std::fs::File::open(path).map(|f| segment::holder_of(&f));
                match holder {
                    Ok(Holder::Keeper) => crate::recovery::wait_for_keeper(path),
                    // Held briefly: a cache being built that settles its directory, or a
                    // fork of this process (another cache's keeper starting) that holds
                    // copies of the owner's descriptors until it closes them.
                    _ if waits < BRIEF_HOLD_WAITS => {
                        waits += 1;
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Ok(Holder::Owner) => {
                        return Err(io::Error::new(
                            io::ErrorKind::WouldBlock,
                            format!(
                                "folio: segment {} is in use by a live cache",
                                path.display()
                            ),
                        ))
                    }
                    _ => return Err(e),
                }
            }
            Err(e)
                if e.kind() == io::ErrorKind::InvalidData
                    && (unusable == Unusable::Replace
                        || e.get_ref().is_some_and(|inner| inner.is::<Unvouched>())) =>
            {
                let why = e.to_string();
                eprintln!(
                    "folio: segment {} replaced by an empty one: {why}",
                    path.display()
                );
                if std::fs::symlink_metadata(path).is_ok() {
                    remove_unusable(path)?;
                }
                let segment = Segment::create(
                    path.parent().unwrap_or(Path::new(".")),
                    path.file_name().and_then(|n| n.to_str()),
                    frame_count,
                )?;
                let plan = Plan {
                    folios: Vec::new(),
                    in_flight: Vec::new(),
                    files: BTreeMap::new(),
                    adoption: Adoption {
                        replaced: true,
                        replaced_because: Some(why),
                        ..adoption
                    },
                };
                return Ok(Some((segment, plan)));
            }
            Err(e) => return Err(e),
        }
    };
    // A kept segment's steward leaves now, not at its next tick (`keeper::kept`).
    crate::keeper::kept::wake_steward(&segment);
    // A keeper finished it before and vouched for it (its marks, `keeper` module docs);
    // this process's keeper vouches for it at its start and marks it finished when it ends.
    crate::keeper::clear_finished(segment.file())?;
    let mut found = scan::scan(&segment);
    let pages_found: u64 = found.folios.iter().map(|f| f.order.pages()).sum();
    adoption.pages_unproven = found.unproven_pages;
    let mut by_file: BTreeMap<MappingId, Vec<Found>> = BTreeMap::new();
    for folio in std::mem::take(&mut found.folios) {
        by_file.entry(folio.mapping).or_default().push(folio);
    }
    let mut checked: BTreeMap<MappingId, (files::Unchanged, Vec<Found>)> = BTreeMap::new();
    for (id, mine) in by_file {
        let pages: u64 = mine.iter().map(|f| f.order.pages()).sum();
        match files::check(&segment, id, &mine) {
            Some(unchanged) => {
                checked.insert(id, (unchanged, mine));
            }
            None => {
                adoption.pages_of_changed_files += pages;
                adoption.files_dropped += 1;
            }
        }
    }
    // One file claimed by two slots (a damaged or forged segment: the owner gives a file
    // one mapping): which slot's pages are the file's is not proven, so neither is kept.
    let mut slots_of: BTreeMap<(u64, u64), u32> = BTreeMap::new();
    for (unchanged, _) in checked.values() {
        *slots_of.entry(unchanged.inode).or_default() += 1;
    }
    let mut files = BTreeMap::new();
    let mut folios = Vec::new();
    for (id, (unchanged, mine)) in checked {
        let pages: u64 = mine.iter().map(|f| f.order.pages()).sum();
        let claimed_once = slots_of[&unchanged.inode] == 1;
        if claimed_once {
            files.insert(id, unchanged);
            folios.extend(mine);
        } else {
            adoption.pages_unproven += pages;
            adoption.files_dropped += 1;
        }
    }
    // Every folio found is kept or counted dropped, once; every kept one has its file.
    let pages_kept: u64 = folios.iter().map(|f: &Found| f.order.pages()).sum();
    assert_eq!(
        pages_kept + adoption.pages_of_changed_files + adoption.pages_unproven,
        pages_found + found.unproven_pages
    );
    debug_assert!(folios.iter().all(|f| files.contains_key(&f.mapping)));
    Ok(Some((
        segment,
        Plan {
            folios,
            in_flight: found.in_flight,
            files,
            adoption,
        },
    )))
}

/// An inconsistency that makes a segment unusable as it is: `take` replaces it (or
/// refuses it, under `Unusable::Refuse`) saying why.
#[derive(Debug)]
struct Replace(String);

impl std::fmt::Display for Replace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Replace {}

impl From<Replace> for io::Error {
    fn from(r: Replace) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, format!("folio: {}", r.0))
    }
}

/// A segment no keeper vouched for (`keeper::is_vouched`): its owner's credentials may
/// have changed while it lived (a witness saw it, or the keeper could not vouch), or an
/// older build made it. Always replaced, whatever `Unusable` says: it is not damaged, only
/// not trusted, and an older build's segment must not fail a build once.
#[derive(Debug)]
struct Unvouched;

impl std::fmt::Display for Unvouched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "folio: no keeper vouched for the segment (its owner's credentials may have \
             changed while it lived, or an older build made it): it is not adopted",
        )
    }
}

impl std::error::Error for Unvouched {}

/// Removes a segment this build cannot read, if it is ours: a regular file of this user,
/// not a symlink, that nobody holds (its lock taken first: a file this short may be
/// another process's segment being made).
fn remove_unusable(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() || meta.uid() != segment::my_uid() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("folio: segment {} is not ours to replace", path.display()),
        ));
    }
    segment::lock_exclusive(&file)?;
    let there = std::fs::symlink_metadata(path)?;
    if (there.dev(), there.ino()) == (meta.dev(), meta.ino()) {
        std::fs::remove_file(path)?;
    }
    Ok(())
}

/// Frames mapped in per step of `map_in_behind` (8 MiB).
const MAP_IN_STEP_FRAMES: u32 = 2048;

/// Maps the adopted frames into the process from a thread of its own, while the cache
/// already serves reads (`Segment::map_in_frames`): each read of a page not mapped yet
/// takes a minor fault, the first second ran at ~0.6x the warm rate without it, and
/// mapping them in the build took 1.3 s for 2 GiB (a first read waits for none of it
/// now). The thread stops when the cache is dropped (it holds the segment only weakly,
/// one step at a time).
fn map_in_behind(segment: &std::sync::Arc<Segment>, used: &[(FrameId, Order)]) {
    let mut runs: Vec<std::ops::Range<u32>> = Vec::new();
    for &(frame, order) in used {
        let end = frame.0 + order.pages() as u32;
        match runs.last_mut() {
            Some(r) if r.end == frame.0 && r.end - r.start < MAP_IN_STEP_FRAMES => r.end = end,
            _ => runs.push(frame.0..end),
        }
    }
    if runs.is_empty() {
        return;
    }
    let weak = std::sync::Arc::downgrade(segment);
    let _ = std::thread::Builder::new()
        .name("folio-map-in".into())
        .spawn(move || {
            for run in runs {
                let Some(segment) = weak.upgrade() else {
                    return;
                };
                segment.map_in_frames(run);
            }
        });
}

impl Plan {
    /// A plan that keeps nothing (`fuzzing::hostile_segment`).
    #[cfg(any(fuzzing, test))]
    pub fn empty() -> Plan {
        Plan {
            folios: Vec::new(),
            in_flight: Vec::new(),
            files: BTreeMap::new(),
            adoption: Adoption::default(),
        }
    }

    /// The folios kept so far and their files' inodes (`fuzzing::hostile_segment`).
    #[cfg(any(fuzzing, test))]
    pub fn kept(&self) -> Vec<(Found, (u64, u64))> {
        self.folios
            .iter()
            .map(|f| (*f, self.files[&f.mapping].inode))
            .collect()
    }

    /// Keeps at most `capacity_frames` less an eighth (room for the next reads), the most
    /// used folios first; the rest is dropped.
    pub fn fit(&mut self, capacity_frames: u64) {
        let budget = capacity_frames - capacity_frames / 8;
        let pages_before: u64 = self.folios.iter().map(|f| f.order.pages()).sum();
        self.folios
            .sort_by_key(|f| (std::cmp::Reverse(f.freq), f.mapping, f.head));
        let mut used = 0u64;
        let mut over = 0u64;
        self.folios.retain(|f| {
            let keep = used + f.order.pages() <= budget;
            if keep {
                used += f.order.pages();
            } else {
                over += f.order.pages();
            }
            keep
        });
        // Within the budget, and every page kept or counted over.
        assert!(used <= budget);
        assert_eq!(used + over, pages_before);
        self.adoption.pages_over_capacity = over;
        let kept: std::collections::BTreeSet<MappingId> =
            self.folios.iter().map(|f| f.mapping).collect();
        self.files.retain(|id, _| kept.contains(id));
    }

    /// The kept folios' frames, for `Arena::list_adopted`; their side-table entries made
    /// those of cached, uptodate folios.
    pub fn prepare_arena(&self, arena: &Arena) {
        // Every kept frame is the arena's (the segment's, as `scan` proved it).
        assert!(self
            .folios
            .iter()
            .all(|f| u64::from(f.frame.0) + f.order.pages() <= u64::from(arena.frame_count())));
        let mut used: Vec<(FrameId, Order)> =
            self.folios.iter().map(|f| (f.frame, f.order)).collect();
        used.sort_by_key(|&(frame, _)| frame);
        if let Some(segment) = arena.segment() {
            for frames in &self.in_flight {
                // A late completion of the dead owner's I/O then reaches memory the file
                // no longer holds, never a frame this cache hands out. Never a kept
                // folio's (only a damaged side table could make them overlap).
                let after = used.partition_point(|&(f, _)| f.0 < frames.end);
                let overlaps = after > 0 && {
                    let (f, order) = used[after - 1];
                    f.0 + order.pages() as u32 > frames.start
                };
                if !overlaps {
                    let _ = segment.punch_frames(frames.clone());
                }
            }
        }
        arena.list_adopted(&used);
        if let Some(segment) = arena.segment() {
            map_in_behind(segment, &used);
        }
        for folio in &self.folios {
            let meta = arena.meta(folio.frame);
            meta.version.reset();
            meta.version.publish();
            meta.state.adopt_clean();
        }
    }

    /// Adds the mappings and puts every kept folio in its index and on the eviction
    /// queues, the least used first. Returns what the adoption did.
    ///
    /// Context: the build, after `prepare_arena`, before the cache is shared.
    pub fn install(self, mem: &Memory, mappings: &MappingTable) -> Adoption {
        let Plan {
            mut folios,
            in_flight: _,
            files,
            mut adoption,
        } = self;
        // The plan's invariant (`take`, `fit`): every kept folio's file is kept.
        debug_assert!(folios.iter().all(|f| files.contains_key(&f.mapping)));
        let segment = mem.arena().segment().cloned();
        if let Some(segment) = &segment {
            // Slots of files not adopted are forgotten, and adopted files' sizes are the
            // disk's again (this process has not written them): a later keeper or
            // recovery then never sets a file to a size an earlier process left.
            for id in segment.registered_ids() {
                let Some(slot) = segment.slot(id) else {
                    continue;
                };
                if files.contains_key(&id) {
                    slot.set_size(SIZE_UNKNOWN);
                } else {
                    slot.clear();
                }
            }
        }
        let mut counts: BTreeMap<MappingId, u64> = BTreeMap::new();
        for folio in &folios {
            *counts.entry(folio.mapping).or_default() += 1;
        }
        let mut added = BTreeMap::new();
        for (id, file) in &files {
            let count = counts.get(id).copied().unwrap_or(0);
            let mapping = mappings.adopt(*id, file.inode, file.stamp, segment.clone(), count);
            added.insert(*id, mapping);
        }
        folios.sort_by_key(|f| (f.freq, f.mapping, f.head));
        for folio in &folios {
            let mapping = &added[&folio.mapping];
            let new = NewFolio {
                frame: folio.frame,
                order: folio.order,
                head: folio.head,
            };
            let mut w = mapping
                .index
                .lock_for_insert(folio.head, folio.order.pages());
            let inserted = w.insert_run(&[new]).inserted[0];
            assert!(inserted, "an adopted folio's pages were taken twice");
            mem.make_evictable(folio.frame, folio.order.pages(), None);
            adoption.pages_kept += folio.order.pages();
        }
        adoption.files_kept = files.len() as u32;
        adoption.pages_dropped = adoption.pages_of_changed_files
            + adoption.pages_unproven
            + adoption.pages_over_capacity;
        adoption
    }
}
