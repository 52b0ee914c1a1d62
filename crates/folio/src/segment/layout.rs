//! The segment's layout: where each part lies in the file, the header that names the
//! layout, and a file slot (DESIGN.md §9).
//!
//! ```text
//! offset 0          header (4 KiB): magic, layout version, the sizes below, a checksum of
//!                   them; the owner's and the keeper's pids, the segment's state, whether
//!                   it is kept for a restart
//! STATS_OFFSET      the cache's counters, published by the owner (64 KiB)
//! slots_offset      SLOT_COUNT file slots of 512 B, indexed by `MappingId`: identity,
//!                   logical size, the file's stamp, path
//! meta_offset       meta_frames side-table entries (`FolioMeta`, 24 B each; at least the
//!                   machine's memory in frames), of which the first frame_count are used:
//!                   so that the frames after them stay where they are when a restart
//!                   changes the frame count (up to meta_frames)
//! frames_offset     frame_count frames of 4 KiB (aligned to 2 MiB in the file, so that a
//!                   mapping aligned to 2 MiB aligns the frames too)
//! ```
//!
//! Only the parts written take memory: the file is sparse, and the side table's and the
//! slots' pages are allocated as the cache grows over them.
//!
//! No pointers: a process maps the segment where it likes; everything in it is a number
//! (a frame, a mapping id, an offset).
//!
//! Protection: the fixed fields of the header are written once, before the segment is
//! shared; `Header::check` refuses a segment whose fixed fields disagree with their
//! checksum, the version or the file's size. A slot is written under the owner's slot
//! lock, between two increments of its sequence word (odd while it changes): a reader that
//! finds it odd, or changed across its read, ignores the slot.

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::folio_meta::FolioMeta;
use crate::types::{ORDER_MAX, PAGE_BYTES};

/// "FOLIOSEG", little-endian.
const MAGIC: u64 = u64::from_le_bytes(*b"FOLIOSEG");
/// Bumped whenever anything in this file, `FolioMeta`, or the state word's bits change.
/// 3: a slot records whether its file was opened for writing (`Opened`).
pub const LAYOUT_VERSION: u32 = 3;
pub const HEADER_BYTES: u64 = 4096;
/// Where the owner publishes its counters, and how much room they have.
pub const STATS_OFFSET: u64 = HEADER_BYTES;
pub const STATS_BYTES: u64 = 64 << 10;
/// The most frames a segment can hold (1 TiB).
pub const META_FRAMES_MAX: u32 = 1 << 28;
pub const SLOT_BYTES: u64 = 512;
/// Mapping ids a segment has slots for: files cached at once.
pub const SLOT_COUNT: u32 = 1 << 18;
/// Path bytes a slot holds; a longer path is not recorded (the keeper still has the file's
/// descriptor; only a later recovery cannot reopen it).
pub const PATH_BYTES_MAX: usize = PATH_WORDS * 8;
const PATH_WORDS: usize = 52;
const FRAMES_ALIGN: u64 = (PAGE_BYTES as u64) << ORDER_MAX;
/// `FileSlot::size_bytes` of a file folio has not written: its size is the disk's.
pub const SIZE_UNKNOWN: u64 = u64::MAX;

/// Where each part lies, for a segment of `frame_count` frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub frame_count: u32,
    /// Frames the side table has room for: the most a restart can resize the segment to.
    pub meta_frames: u32,
    pub slots_offset: u64,
    pub meta_offset: u64,
    pub frames_offset: u64,
    pub total_bytes: u64,
}

impl Layout {
    /// The layout of `frame_count` frames with a side table for `meta_frames`
    /// (at least `frame_count`, at most `META_FRAMES_MAX`).
    pub fn for_frames(frame_count: u32, meta_frames: u32) -> Layout {
        assert!(
            frame_count <= META_FRAMES_MAX,
            "a segment holds at most 1 TiB"
        );
        let meta_frames = meta_frames.clamp(frame_count, META_FRAMES_MAX);
        let slots_offset = STATS_OFFSET + STATS_BYTES;
        let meta_offset = slots_offset + u64::from(SLOT_COUNT) * SLOT_BYTES;
        let meta_bytes = u64::from(meta_frames) * std::mem::size_of::<FolioMeta>() as u64;
        let frames_offset = (meta_offset + meta_bytes).next_multiple_of(FRAMES_ALIGN);
        Layout {
            frame_count,
            meta_frames,
            slots_offset,
            meta_offset,
            frames_offset,
            total_bytes: frames_offset + u64::from(frame_count) * PAGE_BYTES as u64,
        }
        .assert_sound()
    }

    /// Returns the layout after asserting where its parts lie: in order, apart, each
    /// aligned as the references made into it need (`Segment::slot`, `meta_table`,
    /// `frames`), the frames counted within the side table's room, and the whole file
    /// before the steward's lock byte (`holder::STEWARD_LOCK_OFFSET`). Every layout is
    /// `for_frames`' (a header read back is checked against one: `Header::check`), so a
    /// forged header never reaches these.
    fn assert_sound(self) -> Layout {
        let meta_bytes = u64::from(self.meta_frames) * std::mem::size_of::<FolioMeta>() as u64;
        assert!(self.frame_count <= self.meta_frames && self.meta_frames <= META_FRAMES_MAX);
        assert!(HEADER_BYTES <= STATS_OFFSET && STATS_OFFSET + STATS_BYTES <= self.slots_offset);
        assert!(self.slots_offset + u64::from(SLOT_COUNT) * SLOT_BYTES <= self.meta_offset);
        assert!(self.meta_offset + meta_bytes <= self.frames_offset);
        assert_eq!(
            self.slots_offset % SLOT_BYTES,
            0,
            "slots are aligned to their size"
        );
        assert_eq!(
            self.meta_offset % std::mem::align_of::<FolioMeta>() as u64,
            0
        );
        assert_eq!(
            self.frames_offset % FRAMES_ALIGN,
            0,
            "frames are aligned to 2 MiB"
        );
        assert_eq!(
            self.total_bytes,
            self.frames_offset + u64::from(self.frame_count) * PAGE_BYTES as u64
        );
        assert!(self.total_bytes < super::holder::STEWARD_LOCK_OFFSET as u64);
        self
    }
}

impl Layout {
    /// Whether the layout's frames and side-table entries in use could ever be held by a
    /// file system of `fs_bytes` (its whole size; `u64::MAX` where it has no limit): a
    /// real segment's could (its build fits the capacity to the room), a forged header's
    /// count of 2^28 frames (1 TiB) on a smaller file system could not, and is refused
    /// before anything sized by it is mapped or allocated.
    ///
    /// Errors: `InvalidData`, saying what does not fit.
    pub fn check_fits(&self, fs_bytes: u64) -> io::Result<()> {
        let entry = std::mem::size_of::<FolioMeta>() as u64;
        let used = u64::from(self.frame_count) * (PAGE_BYTES as u64 + entry);
        if used > fs_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "folio: segment header says {} frames ({} MiB), more than its file system holds ({} MiB)",
                    self.frame_count,
                    used >> 20,
                    fs_bytes >> 20
                ),
            ));
        }
        Ok(())
    }
}

/// What the segment is doing now (`Header::state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentState {
    /// An owner uses it.
    Live = 1,
    /// The owner died; a keeper (or a recovery) is writing its dirty pages back.
    Orphaned = 2,
    /// Every dirty page it held is on disk and synced.
    Written = 3,
}

/// The first 4 KiB of the segment. Atomics, because another process may read it while
/// the owner writes its changing fields.
#[repr(C)]
pub struct Header {
    magic: AtomicU64,
    layout_version: AtomicU32,
    page_bytes: AtomicU32,
    slot_bytes: AtomicU32,
    meta_entry_bytes: AtomicU32,
    slot_count: AtomicU32,
    frame_count: AtomicU32,
    meta_frames: AtomicU32,
    slots_offset: AtomicU64,
    meta_offset: AtomicU64,
    frames_offset: AtomicU64,
    total_bytes: AtomicU64,
    /// A checksum of the fields above.
    fixed_sum: AtomicU64,
    pub owner_pid: AtomicU32,
    pub keeper_pid: AtomicU32,
    state: AtomicU32,
    /// Nonzero: the segment stays after its owner and keeper are gone, for the next cache
    /// built with its name to adopt (a named segment); zero: it is removed.
    retain: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<Header>() as u64 <= HEADER_BYTES);

impl Header {
    /// Writes the fixed fields. Context: a new segment, not yet shared.
    pub fn init(&self, layout: &Layout) {
        let fields = Self::fixed_fields(layout);
        self.magic.store(MAGIC, Ordering::Relaxed);
        self.layout_version.store(LAYOUT_VERSION, Ordering::Relaxed);
        self.page_bytes.store(PAGE_BYTES as u32, Ordering::Relaxed);
        self.slot_bytes.store(SLOT_BYTES as u32, Ordering::Relaxed);
        self.meta_entry_bytes
            .store(std::mem::size_of::<FolioMeta>() as u32, Ordering::Relaxed);
        self.slot_count.store(SLOT_COUNT, Ordering::Relaxed);
        self.frame_count
            .store(layout.frame_count, Ordering::Relaxed);
        self.meta_frames
            .store(layout.meta_frames, Ordering::Relaxed);
        self.slots_offset
            .store(layout.slots_offset, Ordering::Relaxed);
        self.meta_offset
            .store(layout.meta_offset, Ordering::Relaxed);
        self.frames_offset
            .store(layout.frames_offset, Ordering::Relaxed);
        self.total_bytes
            .store(layout.total_bytes, Ordering::Relaxed);
        self.fixed_sum.store(checksum(&fields), Ordering::Relaxed);
        self.state
            .store(SegmentState::Live as u32, Ordering::Release);
    }

    /// The layout this header describes, if it is one this build can use and it fits a
    /// file of `file_bytes`; otherwise an `InvalidData` error that says what is wrong.
    pub fn check(&self, file_bytes: u64) -> io::Result<Layout> {
        let bad = |what: String| Err(io::Error::new(io::ErrorKind::InvalidData, what));
        if self.magic.load(Ordering::Relaxed) != MAGIC {
            return bad("folio: not a folio segment (bad magic)".into());
        }
        let version = self.layout_version.load(Ordering::Relaxed);
        if version != LAYOUT_VERSION {
            return bad(format!(
                "folio: segment layout version {version}, this build reads {LAYOUT_VERSION}"
            ));
        }
        let frame_count = self.frame_count.load(Ordering::Relaxed);
        let meta_frames = self.meta_frames.load(Ordering::Relaxed);
        if frame_count == 0 || frame_count > meta_frames || meta_frames > META_FRAMES_MAX {
            return bad(format!(
                "folio: segment header says {frame_count} frames of {meta_frames} (1 to {META_FRAMES_MAX})"
            ));
        }
        let layout = Layout::for_frames(frame_count, meta_frames);
        let read = [
            u64::from(self.layout_version.load(Ordering::Relaxed)),
            u64::from(self.page_bytes.load(Ordering::Relaxed)),
            u64::from(self.slot_bytes.load(Ordering::Relaxed)),
            u64::from(self.meta_entry_bytes.load(Ordering::Relaxed)),
            u64::from(self.slot_count.load(Ordering::Relaxed)),
            u64::from(self.frame_count.load(Ordering::Relaxed)),
            u64::from(self.meta_frames.load(Ordering::Relaxed)),
            self.slots_offset.load(Ordering::Relaxed),
            self.meta_offset.load(Ordering::Relaxed),
            self.frames_offset.load(Ordering::Relaxed),
            self.total_bytes.load(Ordering::Relaxed),
        ];
        if read != Self::fixed_fields(&layout)
            || checksum(&read) != self.fixed_sum.load(Ordering::Relaxed)
        {
            return bad("folio: segment header is damaged or of another layout".into());
        }
        if file_bytes != layout.total_bytes {
            return bad(format!(
                "folio: segment is {file_bytes} bytes, its header says {}",
                layout.total_bytes
            ));
        }
        Ok(layout)
    }

    fn fixed_fields(layout: &Layout) -> [u64; 11] {
        [
            u64::from(LAYOUT_VERSION),
            PAGE_BYTES as u64,
            SLOT_BYTES,
            std::mem::size_of::<FolioMeta>() as u64,
            u64::from(SLOT_COUNT),
            u64::from(layout.frame_count),
            u64::from(layout.meta_frames),
            layout.slots_offset,
            layout.meta_offset,
            layout.frames_offset,
            layout.total_bytes,
        ]
    }

    pub fn state(&self) -> Option<SegmentState> {
        match self.state.load(Ordering::Acquire) {
            1 => Some(SegmentState::Live),
            2 => Some(SegmentState::Orphaned),
            3 => Some(SegmentState::Written),
            _ => None,
        }
    }

    pub fn set_state(&self, state: SegmentState) {
        self.state.store(state as u32, Ordering::Release);
    }

    /// Whether the segment stays for a restart to adopt (`retain`).
    pub fn retained(&self) -> bool {
        self.retain.load(Ordering::Acquire) != 0
    }

    pub fn set_retained(&self, retained: Retention) {
        self.retain
            .store(u32::from(retained == Retention::Kept), Ordering::Release);
    }
}

/// What becomes of a segment once its owner and keeper are gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retention {
    /// Removed: an unnamed segment, which no later cache can find.
    Removed,
    /// Kept for the next cache built with its name (a warm restart).
    Kept,
}

/// FNV-1a over the words' bytes: enough to tell a damaged or foreign header.
fn checksum(words: &[u64]) -> u64 {
    let mut sum: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in words.iter().flat_map(|w| w.to_le_bytes()) {
        sum = (sum ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    sum
}

/// One file's slot: who the file is, the logical size folio gave it, and its path.
#[repr(C)]
pub struct FileSlot {
    /// Odd while the owner rewrites the slot; 0: never used.
    seq: AtomicU64,
    dev: AtomicU64,
    ino: AtomicU64,
    /// Birth time (or change time where the file system keeps no birth time) in ns.
    born_ns: AtomicU64,
    /// The logical size, once folio wrote or resized the file (`SIZE_UNKNOWN` before).
    size_bytes: AtomicU64,
    /// The file's stamp (`FileStamp`) as the cache last knew the file: at its open, and
    /// after the last write's sync. `stamp_taken_ns` 0: none (the file's pages are not
    /// adopted).
    stamp_size: AtomicU64,
    stamp_mtime_ns: AtomicU64,
    stamp_ctime_ns: AtomicU64,
    stamp_generation: AtomicU64,
    stamp_taken_ns: AtomicU64,
    /// `Opened::ForWriting as u64` once the owner opened the file for writing (kept while
    /// the slot records the same file).
    opened: AtomicU64,
    path_len: AtomicU64,
    path: [AtomicU64; PATH_WORDS],
}

/// How the owner opened a slot's file: a recovery writes only a file the owner opened for
/// writing (`recovery::recover_segment`), never one it only read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opened {
    ReadOnly = 0,
    ForWriting = 1,
}

const _: () = assert!(std::mem::size_of::<FileSlot>() as u64 == SLOT_BYTES);

/// Who a file is, as a slot records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileIdentity {
    pub dev: u64,
    pub ino: u64,
    pub born_ns: u64,
}

/// What a file looked like when the cache last knew it: a restart adopts its pages only if
/// it looks the same now (`adopt`). Times in ns since the epoch, as the kernel reports them
/// (`i64` ns reach the year 2262).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileStamp {
    pub size_bytes: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// The file system's generation of the inode (`FS_IOC_GETVERSION`), 0 where it keeps
    /// none.
    pub generation: u64,
    /// When the stamp was taken (the real-time clock, ns): a change in the same clock tick
    /// as the last one recorded could leave the times unchanged (`adopt`'s racy rule).
    pub taken_ns: i64,
}

/// The file times' granularity that a stamp must be clear of (`Segment::stamp_files`,
/// `adopt`'s racy rule): the kernel stamps a change with a coarse clock (a tick: 1-10 ms),
/// so two changes in one tick may leave the same times. A file system whose times have no
/// sub-second part (nanoseconds 0) gets `STAMP_COARSE_NS` instead.
pub const STAMP_TICK_NS: i64 = 20_000_000;
pub const STAMP_COARSE_NS: i64 = 2_000_000_000;

impl FileStamp {
    /// Whether the stamp was taken clear of its file's last change's clock tick: then any
    /// later change moves a time it recorded.
    pub fn is_clear_of_last_change(&self) -> bool {
        let whole_seconds =
            self.ctime_ns % 1_000_000_000 == 0 && self.mtime_ns % 1_000_000_000 == 0;
        let tick = if whole_seconds {
            STAMP_COARSE_NS
        } else {
            STAMP_TICK_NS
        };
        self.taken_ns.saturating_sub(self.ctime_ns) >= tick
    }

    /// Whether `other` describes the file as this does (the time taken aside).
    pub fn same_file_state(&self, other: &FileStamp) -> bool {
        (
            self.size_bytes,
            self.mtime_ns,
            self.ctime_ns,
            self.generation,
        ) == (
            other.size_bytes,
            other.mtime_ns,
            other.ctime_ns,
            other.generation,
        )
    }
}

/// What a slot holds, read consistently (`FileSlot::read`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRecord {
    pub identity: FileIdentity,
    /// `SIZE_UNKNOWN` if folio did not write the file.
    pub size_bytes: u64,
    /// `None`: no stamp recorded.
    pub stamp: Option<FileStamp>,
    /// Empty if the path was too long to record.
    pub path: Vec<u8>,
    /// Whether the owner ever opened the file for writing while the slot recorded it.
    pub opened: Opened,
}

impl FileSlot {
    /// Records that this slot's mapping is the file `identity` at `path`, as `stamp` says
    /// it was when it was opened, opened as `opened` says. A slot that already records the
    /// same file keeps its logical size and stays `ForWriting` once it was; a new file's
    /// size is unknown.
    ///
    /// Context: the owner, under its slot lock (one writer per slot).
    pub fn write(&self, identity: FileIdentity, stamp: &FileStamp, path: &[u8], opened: Opened) {
        let same = self.seq.load(Ordering::Relaxed) != 0 && self.identity() == identity;
        let path = if path.len() <= PATH_BYTES_MAX {
            path
        } else {
            &[]
        };
        self.seq.fetch_add(1, Ordering::AcqRel);
        self.store_stamp(stamp);
        self.dev.store(identity.dev, Ordering::Relaxed);
        self.ino.store(identity.ino, Ordering::Relaxed);
        self.born_ns.store(identity.born_ns, Ordering::Relaxed);
        if !same {
            self.size_bytes.store(SIZE_UNKNOWN, Ordering::Relaxed);
            self.opened.store(opened as u64, Ordering::Relaxed);
        } else if opened == Opened::ForWriting {
            self.opened.store(opened as u64, Ordering::Relaxed);
        }
        for (word, chunk) in self.path.iter().zip(path.chunks(8)) {
            let mut bytes = [0u8; 8];
            bytes[..chunk.len()].copy_from_slice(chunk);
            word.store(u64::from_le_bytes(bytes), Ordering::Relaxed);
        }
        self.path_len.store(path.len() as u64, Ordering::Relaxed);
        self.seq.fetch_add(1, Ordering::Release);
    }

    /// Records the file's stamp after the cache's last write to it was synced (the end of
    /// a writeback by the owner's drop, its keeper or a recovery); `None` forgets the
    /// stamp (the file's pages are then never adopted).
    ///
    /// Context: one writer: the owner at its drop (its threads stopped), or the keeper or a
    /// recovery (the owner dead).
    pub fn set_stamp(&self, stamp: Option<&FileStamp>) {
        self.seq.fetch_add(1, Ordering::AcqRel);
        match stamp {
            Some(stamp) => self.store_stamp(stamp),
            None => self.stamp_taken_ns.store(0, Ordering::Relaxed),
        }
        self.seq.fetch_add(1, Ordering::Release);
    }

    fn store_stamp(&self, stamp: &FileStamp) {
        self.stamp_size.store(stamp.size_bytes, Ordering::Relaxed);
        self.stamp_mtime_ns
            .store(stamp.mtime_ns as u64, Ordering::Relaxed);
        self.stamp_ctime_ns
            .store(stamp.ctime_ns as u64, Ordering::Relaxed);
        self.stamp_generation
            .store(stamp.generation, Ordering::Relaxed);
        self.stamp_taken_ns
            .store(stamp.taken_ns as u64, Ordering::Relaxed);
    }

    fn stamp(&self) -> Option<FileStamp> {
        let taken_ns = self.stamp_taken_ns.load(Ordering::Relaxed) as i64;
        (taken_ns != 0).then(|| FileStamp {
            size_bytes: self.stamp_size.load(Ordering::Relaxed),
            mtime_ns: self.stamp_mtime_ns.load(Ordering::Relaxed) as i64,
            ctime_ns: self.stamp_ctime_ns.load(Ordering::Relaxed) as i64,
            generation: self.stamp_generation.load(Ordering::Relaxed),
            taken_ns,
        })
    }

    /// Forgets the file: a slot a restart did not adopt (its file changed, or its pages
    /// were not kept). A recovery or keeper never acts on it again (its stale logical size
    /// would cut what another program wrote since).
    ///
    /// Context: the adoption, before the cache is shared (one writer).
    pub fn clear(&self) {
        self.seq.fetch_add(1, Ordering::AcqRel);
        self.dev.store(0, Ordering::Relaxed);
        self.ino.store(0, Ordering::Relaxed);
        self.born_ns.store(0, Ordering::Relaxed);
        self.size_bytes.store(SIZE_UNKNOWN, Ordering::Relaxed);
        self.stamp_taken_ns.store(0, Ordering::Relaxed);
        self.opened
            .store(Opened::ReadOnly as u64, Ordering::Relaxed);
        self.path_len.store(0, Ordering::Relaxed);
        self.seq.fetch_add(1, Ordering::Release);
    }

    /// The file grew to `end_bytes` through a write. Context: the write path (W4).
    pub fn extend_to(&self, end_bytes: u64) {
        let size = &self.size_bytes;
        let mut current = size.load(Ordering::Relaxed);
        while current == SIZE_UNKNOWN || current < end_bytes {
            match size.compare_exchange_weak(
                current,
                end_bytes,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => current = now,
            }
        }
    }

    /// `set_len`: the logical size is `size_bytes` now. Context: the file's whole range
    /// held, so no write extends it meanwhile.
    pub fn set_size(&self, size_bytes: u64) {
        self.size_bytes.store(size_bytes, Ordering::Release);
    }

    /// The slot's record, if it was ever written and is not being rewritten.
    pub fn read(&self) -> Option<SlotRecord> {
        let before = self.seq.load(Ordering::Acquire);
        if before == 0 || before % 2 == 1 {
            return None;
        }
        let record = SlotRecord {
            identity: self.identity(),
            size_bytes: self.size_bytes.load(Ordering::Acquire),
            stamp: self.stamp(),
            path: self.path_bytes(),
            opened: if self.opened.load(Ordering::Relaxed) == Opened::ForWriting as u64 {
                Opened::ForWriting
            } else {
                Opened::ReadOnly
            },
        };
        (self.seq.load(Ordering::Acquire) == before).then_some(record)
    }

    fn identity(&self) -> FileIdentity {
        FileIdentity {
            dev: self.dev.load(Ordering::Relaxed),
            ino: self.ino.load(Ordering::Relaxed),
            born_ns: self.born_ns.load(Ordering::Relaxed),
        }
    }

    fn path_bytes(&self) -> Vec<u8> {
        let len = (self.path_len.load(Ordering::Relaxed) as usize).min(PATH_BYTES_MAX);
        let mut path: Vec<u8> = self
            .path
            .iter()
            .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
            .collect();
        path.truncate(len);
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_aligned_and_parts_do_not_overlap() {
        for frames in [1, 512, 513, 1 << 20] {
            let l = Layout::for_frames(frames, 0);
            assert_eq!(l.frames_offset % FRAMES_ALIGN, 0);
            assert!(l.meta_offset >= l.slots_offset + u64::from(SLOT_COUNT) * SLOT_BYTES);
            assert!(l.frames_offset >= l.meta_offset + u64::from(frames) * 24);
        }
    }

    #[test]
    fn a_frame_count_beyond_the_file_system_is_refused() {
        let forged = Layout::for_frames(META_FRAMES_MAX, META_FRAMES_MAX);
        let e = forged.check_fits(64 << 30).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert!(forged.check_fits(u64::MAX).is_ok());
        let real = Layout::for_frames(1024, 1 << 20);
        assert!(
            real.check_fits(8 << 20).is_ok(),
            "a real segment's frames fit"
        );
    }

    #[test]
    fn a_slot_keeps_the_size_of_the_same_file_and_forgets_another_s() {
        // SAFETY: every field of FileSlot is an atomic integer; all-zero is valid.
        let slot: FileSlot = unsafe { std::mem::zeroed() };
        assert_eq!(slot.read(), None, "a slot never written is not read");
        let a = FileIdentity {
            dev: 1,
            ino: 2,
            born_ns: 3,
        };
        slot.write(a, &FileStamp::default(), b"/data/a", Opened::ForWriting);
        slot.extend_to(100);
        slot.extend_to(50);
        slot.write(a, &FileStamp::default(), b"/data/renamed", Opened::ReadOnly);
        let read = slot.read().unwrap();
        assert_eq!(
            (read.size_bytes, read.path.as_slice(), read.opened),
            (100, &b"/data/renamed"[..], Opened::ForWriting),
            "the same file keeps its size and its opening for writing"
        );
        slot.write(
            FileIdentity { ino: 9, ..a },
            &FileStamp::default(),
            b"/data/a",
            Opened::ReadOnly,
        );
        let other = slot.read().unwrap();
        assert_eq!(
            (other.size_bytes, other.opened),
            (SIZE_UNKNOWN, Opened::ReadOnly)
        );
        slot.write(
            a,
            &FileStamp::default(),
            &[b'x'; PATH_BYTES_MAX + 1],
            Opened::ReadOnly,
        );
        assert!(
            slot.read().unwrap().path.is_empty(),
            "a path too long is not recorded"
        );
    }
}
