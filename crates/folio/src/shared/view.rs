//! A domain seen from outside (issue 45: `folio-stat domain NAME`): its steward, its
//! processes (slot, generation, pid, whether the process still runs, the frames each holds
//! pinned and owns), its frames, how many the cache holds and may hold (the quota, each
//! member's share and floor), its files, read from the region file
//! without attaching (no slot taken, no steward started, no store).
//!
//! Protection: none needed: every word is read with a load (the region's words are
//! `AtomicU64`s), and a snapshot is a few events off between fields while members run.
//! The region is mapped read-write because `Domain::open` maps it so (a member's mapping);
//! this module only loads.
//!
//! Limits: a process is "running" when its pid's start time is the one its record names
//! (`/proc`), not when its slot is LIVE alone (a dead member's slot stays LIVE until the
//! steward marks it); a slot past `PIN_SLOTS` has no pin bit (its pins read 0); the frames
//! leased to a process (its magazine) are not counted; the viewer maps the whole region
//! (its address space; only the words read are touched).

use std::io;
use std::path::Path;

use super::domain::{start_time, Domain, DomainFiles, FILE_RECORDS};
use super::queue::{Shares, PIN_SLOTS};
use super::slot::SlotState;
use super::SlotIndex;
use crate::segment::{DiskDir, SegmentDir};

/// One slot of a domain that a process holds (LIVE) or held (DEAD, not swept yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainProcess {
    pub slot: u16,
    /// The slot's generation: +1 per attach.
    pub generation: u32,
    /// Whether the slot is LIVE (else DEAD: the steward saw the death and has not swept).
    pub live: bool,
    /// The pid its record names (`None`: the record is not complete for this generation).
    pub pid: Option<u32>,
    /// Whether that process still runs (its pid and start time).
    pub running: bool,
    /// Frames it holds pinned now (a read in progress).
    pub pins: u32,
    /// Queued frames it owns (its misses and writes brought them in: docs/sharing.md,
    /// "Shares and floors").
    pub owned_frames: u32,
    /// The share weight it attached with (`CacheBuilder::share_weight`; 0: the steward's
    /// slot, which has no share), and its share of the quota and its floor by it now.
    pub weight: u32,
    pub share_frames: u32,
    pub floor_frames: u32,
}

/// What `DomainView::read` saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainSummary {
    /// The steward the header names (pid 0: none yet), and whether it runs.
    pub steward_pid: u32,
    pub steward_running: bool,
    /// Stewards the domain has had.
    pub elections: u64,
    /// Its slots and frames (4 KiB each), as its first build sized it.
    pub slots: u16,
    pub frames: u32,
    /// Frames the cache holds (queued: a page of a file, or free to reclaim).
    pub frames_cached: u32,
    /// The quota: how many frames the cache may hold now, moved by the steward with the
    /// machine's memory (docs/sharing.md, "The quota that follows the machine").
    pub quota_frames: u32,
    /// Pages the members' misses read again while their shadow was in the index (the
    /// quota grows only on refaults).
    pub refaults: u64,
    /// The file records its table has room for.
    pub file_records: u32,
    /// Every slot that is not free.
    pub processes: Vec<DomainProcess>,
}

/// A domain's region, mapped for reading.
#[derive(Debug)]
pub struct DomainView {
    domain: Domain,
}

impl DomainView {
    /// Opens the domain `name` in `dir` (a private home: `SegmentDir`'s checks).
    ///
    /// Errors: a bad name (`InvalidInput`); the directory's checks; `NotFound` for no
    /// domain of that name; `InvalidData` for a region that is not formatted or whose
    /// geometry does not fit its file.
    ///
    /// Context: maps the region; no lock, no attach.
    pub fn open(dir: &Path, name: &str) -> io::Result<DomainView> {
        let files = DomainFiles::of(name)?;
        let dir = SegmentDir::open(dir, DiskDir::Refused)?;
        Ok(DomainView {
            domain: Domain::open(&dir, &files)?,
        })
    }

    /// What the domain holds now.
    ///
    /// Context: any thread; loads only (O(slots + frames): every frame's pin word).
    pub fn read(&self) -> DomainSummary {
        let d = &self.domain;
        let geometry = d.geometry();
        let slots = d.slots();
        let records = d.records();
        let queue = d.queue();
        let pins = queue.pins_by_slot();
        let shares = Shares::attached(d.quota(), &slots, &records);
        let running = |pid: u32, start: u64| pid != 0 && start_time(pid).is_ok_and(|s| s == start);
        let mut processes = Vec::new();
        for slot in 0..slots.slot_count() {
            let (state, holder) = slots.state(SlotIndex(slot));
            if state == SlotState::Free {
                continue;
            }
            let id = records.read(holder);
            let share = shares.of_slot(&records, SlotIndex(slot));
            processes.push(DomainProcess {
                slot,
                generation: holder.generation,
                live: state == SlotState::Live,
                pid: id.map(|id| id.pid),
                running: id.is_some_and(|id| running(id.pid, id.start)),
                pins: if slot < PIN_SLOTS {
                    pins[slot as usize]
                } else {
                    0
                },
                owned_frames: queue.owned(SlotIndex(slot)),
                weight: records.weight(SlotIndex(slot)),
                share_frames: share.share_frames,
                floor_frames: share.floor_frames,
            });
        }
        let steward = d.steward();
        DomainSummary {
            steward_pid: steward.pid,
            steward_running: running(steward.pid, steward.start),
            elections: d.elections(),
            slots: geometry.slots,
            frames: geometry.frames,
            frames_cached: queue.count(),
            quota_frames: d.quota(),
            refaults: d.refaults(),
            file_records: FILE_RECORDS,
            processes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::tests::DomainHome;
    use crate::Cache;

    /// A cache of this process in a domain, three pages read: the view names this process
    /// (live, running, its pid, nothing pinned between reads), the steward running, the
    /// machine's geometry (not the build's 1 MiB capacity: `Geometry::frames_for_machine`)
    /// and three frames cached; a bad name and a domain that does not exist are refused.
    #[test]
    fn a_view_names_the_members_the_steward_and_the_frames_cached() {
        let home = DomainHome::new();
        let data = tempfile::tempdir().unwrap();
        let name = "view-test";
        let cache = Cache::builder()
            .capacity_bytes(1 << 20)
            .segment_dir(home.path())
            .domain(name)
            .build()
            .unwrap();
        let path = data.path().join("three-pages");
        std::fs::write(&path, vec![7u8; 3 * 4096]).unwrap();
        let file = cache.open(&path).unwrap();
        let mut buf = vec![0u8; 3 * 4096];
        assert_eq!(file.read_at(&mut buf, 0).unwrap(), buf.len());
        assert!(buf.iter().all(|&b| b == 7));

        let view = DomainView::open(home.path(), name).unwrap();
        let seen = view.read();
        let machine = crate::capacity::machine::MemorySource::this_process().read();
        let frames = super::super::domain::Geometry::frames_for_machine(
            &machine,
            crate::CAPACITY_BYTES_DEFAULT,
            super::super::domain::file_system_bytes(home.path()),
        );
        assert!(frames > 256, "the machine's, not the build's: {frames}");
        assert_eq!(seen.frames, frames, "{seen:?}");
        assert_eq!(seen.frames_cached, 3, "{seen:?}");
        assert!(
            seen.quota_frames > 0 && seen.quota_frames <= frames,
            "{seen:?}"
        );
        assert_eq!(seen.file_records, FILE_RECORDS);
        assert!(seen.steward_running && seen.steward_pid != 0, "{seen:?}");
        assert!(seen.elections >= 1);
        let me = std::process::id();
        let ours: Vec<_> = seen
            .processes
            .iter()
            .filter(|p| p.pid == Some(me))
            .collect();
        assert_eq!(ours.len(), 1, "{seen:?}");
        assert!(ours[0].live && ours[0].running, "{seen:?}");
        assert_eq!(ours[0].pins, 0, "{seen:?}");

        assert_eq!(
            DomainView::open(home.path(), "a/b").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            DomainView::open(home.path(), "no-such-domain")
                .unwrap_err()
                .kind(),
            io::ErrorKind::NotFound
        );
        drop(file);
        drop(cache);
    }
}
