//! A domain: the shared region that the processes sharing one cache map (a file in the
//! user's private home, `MAP_SHARED`), and the process identities its steward watches
//! (issue 45 step 2, docs/sharing.md "The steward").
//!
//! ```text
//!   word 0..8                 the header line: MAGIC, VERSION, slots, frames, the steward's
//!                             pid and start time, the steward lever (tests), elections
//!   word 8..16                the budget's line: the quota (frames the queue may hold,
//!                             moved by the steward: steward.rs, "The quota"), the
//!                             refaults the members' misses counted
//!   word 16..16+2S (8-aligned) the slot table (slot.rs): one word per process, then one
//!                             park word per process (waiters for its locks sleep there)
//!   then S lines of 8 words   the slot records (record.rs): generation, pid, start time
//!   then (8-aligned)          the frame stack (stack.rs): the structure leased
//!   then (8-aligned)          the buddy allocator (buddy.rs) of as many frames: the
//!                             free lists of step 4, beside the stack until a cache uses
//!                             them
//!   then (8-aligned)          the file table (files.rs): `FILE_RECORDS` mapping records
//!                             of step 6, not used by a cache yet
//!   then (8-aligned)          the eviction queue (queue.rs) over the buddy's frames
//!   then (8-aligned each)     one index (index.rs) per file record, record r's the r-th
//!                             (`Geometry::index`: the one place that says where an
//!                             index lies): its lock line and pool; its nodes lie in
//!                             frames of the data area (index.rs, "Layout")
//!   then (page-aligned)       the frames' data: frame f's 4 KiB at `FRAME_BYTES * f`
//!                             from the area's start (`Domain::frame_data`), the memory
//!                             the buddy's frames name
//! ```
//!
//! The data area is not touched at the creation (a domain of the machine's size takes no
//! memory then): the steward populates it ahead of the allocator, a chunk at a time
//! (populate.rs, `populate_data`), and a member maps each batch it leases (read.rs).
//!
//! `Domain::region` is every word of the mapping, the data area's too: a frame the buddy
//! says is a tree's (NODES, buddy.rs) holds 7 index nodes, read and written as
//! `AtomicU64`s by index.rs; any other frame's data is bytes, read and written only
//! through `frame_data` (read.rs says who may touch a frame's bytes when). A frame moves
//! between the two only through the buddy (free in between).
//!
//! **Files**, in the domain's directory (a private home, checked by `segment::home`'s
//! `SegmentDir`), named by the region's `VERSION` (`DomainFiles`): `<name>.v12.domain`
//! (the region), `<name>.v12.steward` (the election's `flock`: steward.rs),
//! `<name>.v12.sock` (the attach socket: attach.rs). So an upgrade meets no region of
//! another version: a steward outlives its processes and its region lingers after them
//! (steward.rs, step 5), and the processes of a new build attach to a domain of their
//! own version, beside the old one, whose processes keep theirs and whose steward leaves
//! after its linger as always. Versions before 11 named their files `<name>.domain`,
//! `<name>.steward`, `<name>.sock`: a new build never opens them (an old steward's
//! socket answered a new process, which then refused its region: "a domain region of
//! version 9"). Two builds of two versions hold two copies of the pages meanwhile.
//!
//! A file at the region's name that is not a region of this version is refused and left
//! as it is (`Domain::create`, `Domain::open`: DESIGN.md §6), never formatted over, but
//! for a format that never finished (its first two words 0, or 0 and this `VERSION`).
//!
//! **Forks**: the mapping is `MADV_DONTFORK` (`map`), as a segment's is
//! (`segment/fork.rs`): a child forked by a member (a tool, a harness, `system()`) has
//! nothing mapped there (a touch faults), so it cannot act as its parent's holder (pin
//! with its parent's bit, take locks in its parent's name, whose death is not its own);
//! a cache it builds attaches as its own member. The region's descriptor is closed once
//! mapped; the member's connection to the steward is registered with the segment's fork
//! guard (attach.rs), so a child finds `/dev/null` at its number. The steward, a fork of
//! a member, maps the region itself. Limits: the segment's (a child made between the
//! `mmap` and the `madvise`, two system calls apart, inherits the mapping; a raw `clone`
//! bypasses the descriptor guard).
//!
//! **The slot records** (record.rs) say which process holds each LIVE slot, so that a new
//! steward can find it again after the old one died; a process is named by its pid *and
//! its start time* (`/proc/<pid>/stat` field 22), so a pid reused by another process is
//! never mistaken for the one that attached (`ProcessId::open`).
//!
//! Protection: the header's geometry is written once, before MAGIC (release), by the first
//! steward under the election lock; the steward fields and the quota by the steward
//! alone; the refaults by the members' misses (an atomic add); the slot
//! table, the stack, the allocator and the file table by their own protocols (slot.rs,
//! lock.rs, buddy.rs, files.rs); the records by the steward (above). A process reads the header as
//! untrusted input (`Domain::open` checks the geometry against the file's size before it
//! makes a view).
//!
//! **What holds a frame number** (audited for `FRAMES_MAX` = 2^28; docs/sharing.md, "A
//! domain the machine's size"): the queue's STATUS (a count in 32 bits, the victim + 1 in
//! 30), ENDS and intents (32 bits each); the index's slots (`frame << 6`, `frame << 12`,
//! a node `<< 8`: a node is `frame * 512 + ...`); the allocator's state words (owners,
//! not frames, in 56 bits), IN_FLIGHT (32 bits) and lists (whole words); the records'
//! owned counts and the header's FRAMES and QUOTA (whole words). Each has room for 2^30
//! frames or more, asserted where it is packed. The limit is the `Word` (a u32) naming
//! the region's words before the data area: 11 a frame, so 2^28 frames (2^29 would not
//! fit). Nothing walks every frame, only those the allocator reached (its frontier): the
//! sweeps, the census, the give-back and the populator's step.
//!
//! Limits: up to `SLOTS_MAX` slots and `FRAMES_MAX` frames (1 TiB; sized by the machine
//! and by the file system's room: `Geometry::frames_for_machine`); the geometry is the
//! first steward's (a later config's is ignored); the region is **4,184 bytes per frame** of
//! address space (its 4 KiB of data, and 88 bytes of words: the allocator's 3, the
//! queue's 8), resident only as frames are reached (the allocator's frontier: buddy.rs,
//! "Frames never reached"; the data as it is populated and used: populate.rs), plus the
//! stack's (at most `STACK_FRAMES` frames), the file table's `FILE_RECORDS` records (16
//! words each for up to 32 slots, 8 more per 32 slots more), `FILE_RECORDS` indexes'
//! lock lines (`SharedIndex::words` each) and a few pages, never resized. Index nodes
//! take frames from the same buddy as data (a frame holds 7 nodes; a tree keeps its node
//! frames until its release, index.rs).

use std::ffi::OsString;
use std::fs::File as StdFile;
use std::io;
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::buddy::SharedBuddy;
use super::files::FileTable;
use super::index::SharedIndex;
use super::queue::SharedQueue;
use super::record::Records;
use super::slot::SlotTable;
use super::stack::{Frame, FrameStack};
use super::{ProcessId, Word};
use crate::primitive::{AtomicU64, Ordering};
use crate::segment::SegmentDir;

/// "folio-dm" in ASCII: the header's first word once the region is formatted.
const MAGIC: u64 = 0x666f_6c69_6f2d_646d;
/// 3: the slot table holds a park word per slot (issue 45 step 3), the region the buddy
/// allocator (step 4) and the file table (step 6); 4: the read side (the eviction queue,
/// an index per file record, the frames' data) and a second header line; 5: the queue's
/// reuse generation per frame (the optimistic hit); 6: the queue's words of a frame on one
/// line (the hit's generation, page and touch together); 7: the allocator's frontier (its
/// frames' words left 0 until reached), the stack at most `STACK_FRAMES`; 8: 4,096 file
/// records (256 before); 9: a second header line (the quota and the refaults); 10: a frame's
/// owner in its FILE word's high bits and a count per slot of the frames it owns (queue.rs,
/// "Owners and shares"); 11: up to 2^28 frames (`FRAMES_MAX`, 2^20 before: a build of 10
/// refuses a header of more), and the region's files named by the version (module docs,
/// "Files"): the words' layout is 10's; 12: a member's share weight in its slot's record
/// (word 6, record.rs) and in its attach request (a third word).
const VERSION: u64 = 12;

/// The most slots a domain has.
pub(crate) const SLOTS_MAX: u16 = 1024;
/// The most frames a domain has: 2^28, 1 TiB of data, what a private cache may have
/// (`list::FRAMES_MAX`, 2^28 - 2), so that a domain covers the machine as the kernel's
/// page cache does (module docs, "Limits"). What stops it there: the region's words
/// before the data area are named by a `Word` (a u32), and a frame takes 11 of them (the
/// allocator's 3, the queue's 8): 2^28 frames are 2^31.5 words, 2^29 would not fit.
/// Every other field that holds a frame number or count has room for more (module docs,
/// "What holds a frame number"; the `const` assertions below and beside each field).
pub(crate) const FRAMES_MAX: u32 = 1 << 28;
/// The region's bytes per frame: its data and its words (the allocator's 3, the queue's
/// 8), what a domain of `f` frames may take of its file system once every frame is used.
const REGION_BYTES_PER_FRAME: u64 = FRAME_BYTES as u64 + 11 * 8;
// The words before the data area, at the most frames and slots, are named by a u32
// (`Word`): 11 per frame, and less than 2^24 for the rest (the header, the slot table and
// records, the stack, the file table, the indexes' lines: `largest_geometry_fits_its_words`
// counts them).
const _: () = assert!(11 * FRAMES_MAX as u64 + (1 << 24) < u32::MAX as u64);
/// The most frames the frame stack has (`Geometry::stack_frames`).
const STACK_FRAMES: u32 = 64;
/// The file table's records (files.rs): the most files a domain names at once. The
/// user's domain is every RocksDB process's of the user, each keeping every table of its
/// database open (`max_open_files=-1`): a 19 GB database of 64 MB tables is 300 files,
/// three tenants of 6 GB each as many. 256 refused files there (read privately, so a
/// copy per process); 4,096 records cost 768 KiB of table and 512 KiB of the indexes'
/// lines (written at the format) for 63 slots.
pub(crate) const FILE_RECORDS: u32 = 4096;
/// The bytes of a frame's data (an order-0 frame: a page).
pub(crate) const FRAME_BYTES: usize = 4096;

// The header's words.
const H_MAGIC: usize = 0;
const H_VERSION: usize = 1;
const H_SLOTS: usize = 2;
const H_FRAMES: usize = 3;
const H_STEWARD_PID: usize = 4;
const H_STEWARD_START: usize = 5;
const H_STOP_AT: usize = 6;
const H_ELECTIONS: usize = 7;
// The budget's line (steward.rs, "The quota").
const H_QUOTA: usize = 8;
const H_REFAULTS: usize = 9;

const LINE: u32 = 8;
const HEADER_WORDS: u32 = 2 * LINE;

/// A domain's size: its slots and its frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) slots: u16,
    pub(crate) frames: u32,
}

impl Geometry {
    /// The frames of a domain made on a machine whose memory `facts` describe: one per
    /// 4 KiB of the most memory a process may use there (the machine's, or its cgroup's
    /// limit: what a cache that follows the machine may grow to, docs/memory.md), at most
    /// `FRAMES_MAX`; `fallback_bytes` worth where the figures cannot be read. Whoever
    /// builds the domain first, it is the machine's size, not that process's capacity:
    /// address space (the frames' memory is resident only as they are used: buddy.rs,
    /// "Frames never reached"; populate.rs).
    ///
    /// And at most what the region's file system can hold (`fs_bytes`, its size:
    /// `file_system_bytes`; `None` where it cannot be read), at `REGION_BYTES_PER_FRAME`
    /// a frame: the region file is sparse, so `ftruncate` to far more than a tmpfs's
    /// size succeeds (checked here: 1.2 TB on a 24 GiB `/dev/shm`), but a page the file
    /// system has no room for cannot be populated (`EFAULT`) nor stored to (`SIGBUS`):
    /// frames past that room could never hold data. A tmpfs is often half the machine
    /// (the kernel's default); it is the machine's here.
    pub(crate) fn frames_for_machine(
        facts: &crate::capacity::machine::MemoryFacts,
        fallback_bytes: u64,
        fs_bytes: Option<u64>,
    ) -> u32 {
        let bytes = if facts.limit_bytes > 0 {
            facts.limit_bytes
        } else {
            fallback_bytes
        };
        let room = fs_bytes.map_or(u64::MAX, |b| b / REGION_BYTES_PER_FRAME);
        u32::try_from((bytes / FRAME_BYTES as u64).min(room))
            .unwrap_or(u32::MAX)
            .clamp(1, FRAMES_MAX)
    }

    fn slot_table(self) -> Word {
        Word(HEADER_WORDS)
    }

    fn records(self) -> Word {
        Word(HEADER_WORDS + round_up(SlotTable::words(self.slots)))
    }

    fn stack(self) -> Word {
        self.records().at(Records::words(self.slots))
    }

    /// The frame stack's frames: step 1's structure, kept for its tests and the steward's
    /// sweep, used by no cache; so not one per frame of the data area (its chain, written
    /// at the format, would be resident memory: 16 bytes a frame), at most `STACK_FRAMES`.
    fn stack_frames(self) -> u32 {
        self.frames.min(STACK_FRAMES)
    }

    fn buddy(self) -> Word {
        Word(self.stack().0 + round_up(FrameStack::words(self.stack_frames())))
    }

    fn files(self) -> Word {
        Word(self.buddy().0 + round_up(SharedBuddy::words(self.frames)))
    }

    pub(crate) fn queue(self) -> Word {
        Word(self.files().0 + round_up(FileTable::words(FILE_RECORDS, self.slots)))
    }

    /// Where record `record`'s index lies: the one function that places an index (its
    /// nodes lie in the data area's frames).
    fn index(self, record: u32) -> Word {
        assert!(record < FILE_RECORDS, "no file record {record}");
        let first = self.queue().0 + round_up(SharedQueue::words(self.frames));
        Word(first + record * round_up(SharedIndex::words()))
    }

    /// The words before the data area.
    fn words(self) -> u32 {
        self.index(0).0 + FILE_RECORDS * round_up(SharedIndex::words())
    }

    /// The data area's offset in bytes (page-aligned).
    fn data_at(self) -> usize {
        (self.words() as usize * 8).next_multiple_of(page_bytes())
    }

    /// The data area's first word (index nodes are named from it).
    fn data_word(self) -> Word {
        Word(u32::try_from(self.data_at() / 8).expect("a domain's words fit a u32"))
    }

    fn bytes(self) -> usize {
        self.data_at() + self.frames as usize * FRAME_BYTES
    }

    fn check(self) -> io::Result<Geometry> {
        if self.slots < 2 || self.slots > SLOTS_MAX || self.frames > FRAMES_MAX {
            return Err(invalid(format!(
                "folio: a domain of {} slots and {} frames (2..={SLOTS_MAX} slots, up to \
                 {FRAMES_MAX} frames)",
                self.slots, self.frames
            )));
        }
        Ok(self)
    }
}

/// The size in bytes of the file system `dir` lies in (`statvfs`: its blocks times its
/// fragment size; a tmpfs's `size=`), or `None` if it cannot be read.
pub(crate) fn file_system_bytes(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: all-zero is a valid `statvfs` (integers only).
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and an out-struct of the right type.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    // Both are u64 on 64-bit Linux (`fsblkcnt_t`, `c_ulong`), the only target folio has.
    Some(stat.f_blocks.saturating_mul(stat.f_frsize)).filter(|&b| b > 0)
}

fn round_up(words: u32) -> u32 {
    words.next_multiple_of(LINE)
}

fn page_bytes() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).unwrap_or(4096)
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// The names of a domain's files in its directory (module docs, "Files"), this
/// `VERSION`'s: `<name>.v<VERSION>.domain` (the region), `.steward` (the election's
/// lock), `.sock` (the attach socket).
#[derive(Clone, Debug)]
pub struct DomainFiles {
    /// The region the members map: the domain's shared memory.
    pub region: OsString,
    /// The steward's election lock (`flock`).
    pub election: OsString,
    /// The steward's attach socket.
    pub socket: OsString,
}

/// The longest domain name: its files add `.v<VERSION>.steward` to it (the longest
/// suffix), and a file name has at most 255 bytes.
pub const DOMAIN_NAME_MAX: usize = 255 - DOMAIN_SUFFIX_MAX;
const DOMAIN_SUFFIX_MAX: usize = ".v".len() + decimal_digits(VERSION) + ".steward".len();

const fn decimal_digits(mut n: u64) -> usize {
    let mut digits = 1;
    while n >= 10 {
        n /= 10;
        digits += 1;
    }
    digits
}

impl DomainFiles {
    /// The files of the domain `name` (a plain file name: `segment::check_name`), named
    /// by this build's `VERSION` (module docs, "Files").
    ///
    /// Errors: `InvalidInput` for a name that is not one plain file name, or longer than
    /// `DOMAIN_NAME_MAX`.
    pub fn of(name: &str) -> io::Result<DomainFiles> {
        let stem = format!("{name}.v{VERSION}");
        crate::segment::check_name(&format!("{stem}.steward"))?;
        Ok(DomainFiles {
            region: format!("{stem}.domain").into(),
            election: format!("{stem}.steward").into(),
            socket: format!("{stem}.sock").into(),
        })
    }
}

/// A domain's region, mapped (module docs).
#[derive(Debug)]
pub(crate) struct Domain {
    base: *mut libc::c_void,
    bytes: usize,
    /// The words `region` covers: the header until the geometry is known, then every word
    /// of the mapping, the data area's too (module docs).
    words: usize,
    /// The data area's offset in bytes (`Geometry::data_at`, kept: a hit asks for it).
    data_at: usize,
    geometry: Geometry,
}

// SAFETY: the mapping is only read and written through `AtomicU64`s, from any thread.
unsafe impl Send for Domain {}
// SAFETY: as above.
unsafe impl Sync for Domain {}

/// Whether `Domain::create` formatted the region or found it formatted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Made {
    Formatted,
    Found,
}

impl Domain {
    /// Opens the region `name` in `dir`, making and formatting it with `geometry` if it
    /// is new or its format never finished (MAGIC not written); an existing one keeps its
    /// own geometry.
    ///
    /// Context: the steward, holding the election lock (no other process formats, and
    /// none maps the region before an attach the steward answers).
    /// Errors: the open's, `ftruncate`'s, `mmap`'s; `InvalidData` for a region whose
    /// header does not fit its file, of another version, or a file that is no region
    /// (`judge`): left as it is.
    pub(crate) fn create(
        dir: &SegmentDir,
        files: &DomainFiles,
        geometry: Geometry,
    ) -> io::Result<(Domain, Made)> {
        let geometry = geometry.check()?;
        let file = dir.open_file(&files.region, libc::O_RDWR | libc::O_CREAT, 0o600)?;
        let size = file.metadata()?.len() as usize;
        if size > 0 {
            let domain = Domain::map(&file, size)?;
            if let Judged::Formatted(_) = judge(&domain.header(), size, &files.region)? {
                let domain = domain.checked(size, &files.region)?;
                return Ok((domain, Made::Found));
            }
        }
        file.set_len(0)?;
        file.set_len(geometry.bytes() as u64)?;
        let mut domain = Domain::map(&file, geometry.bytes())?;
        domain.geometry = geometry;
        domain.words = geometry.bytes() / 8;
        domain.data_at = geometry.data_at();
        let region = domain.region();
        // The file was cut to 0 and grown: it reads as zeros, a hole with no page behind
        // it. Only the words that are not 0 in a new domain are stored (the header, the
        // stack's chain, the allocator's and the queue's lock lines and list heads, the
        // indexes' lines): the frames' words (the allocator's 3 and the queue's 8 a
        // frame) and the data area are left holes, resident only once their frames are
        // used (buddy.rs, "Frames never reached").
        region[H_VERSION].store(VERSION, Ordering::Relaxed);
        region[H_SLOTS].store(u64::from(geometry.slots), Ordering::Relaxed);
        region[H_FRAMES].store(u64::from(geometry.frames), Ordering::Relaxed);
        // The quota starts at every frame: the steward's first memory tick lowers it to
        // what the machine affords (steward.rs, "The quota").
        region[H_QUOTA].store(u64::from(geometry.frames), Ordering::Relaxed);
        domain.stack().format();
        let buddy = domain.buddy();
        buddy.format();
        domain.queue().format();
        for index in domain.indexes() {
            index.format();
        }
        region[H_MAGIC].store(MAGIC, Ordering::Release);
        Ok((domain, Made::Formatted))
    }

    /// Maps the formatted region `name` in `dir` (a process the steward attached).
    ///
    /// Errors: the open's and `mmap`'s; `InvalidData` for a region not formatted or whose
    /// header does not fit its file.
    pub(crate) fn open(dir: &SegmentDir, files: &DomainFiles) -> io::Result<Domain> {
        let file = dir.open_file(&files.region, libc::O_RDWR, 0)?;
        let size = file.metadata()?.len() as usize;
        let domain = Domain::map(&file, size)?;
        if judge(&domain.header(), size, &files.region)? == Judged::Unformatted {
            return Err(invalid(
                "folio: the domain's region is not formatted".into(),
            ));
        }
        domain.checked(size, &files.region)
    }

    /// Why no steward can make the region `files` names in `dir`, if a file there is one
    /// `create` refuses (`judge`: a region of another version or geometry, a file that is
    /// no region): for a process whose steward could not be started, which would
    /// otherwise wait for one in vain. `None` for no file, an empty one, a region being
    /// formatted, or a good one; read with `pread`, never written.
    pub(crate) fn refusal(dir: &SegmentDir, files: &DomainFiles) -> Option<io::Error> {
        use std::os::unix::fs::FileExt;
        let file = dir.open_file(&files.region, libc::O_RDONLY, 0).ok()?;
        let size = file.metadata().ok()?.len() as usize;
        if size == 0 {
            return None;
        }
        if size < HEADER_WORDS as usize * 8 {
            return Some(invalid(format!("folio: a domain region of {size} bytes")));
        }
        let mut bytes = [0u8; 32];
        file.read_exact_at(&mut bytes, 0).ok()?;
        let words: [u64; 4] = std::array::from_fn(|i| {
            u64::from_ne_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap())
        });
        judge(&words, size, &files.region).err()
    }

    /// The header's first words (`judge`'s input).
    fn header(&self) -> [u64; 4] {
        let region = self.region();
        [
            region[H_MAGIC].load(Ordering::Acquire),
            region[H_VERSION].load(Ordering::Relaxed),
            region[H_SLOTS].load(Ordering::Relaxed),
            region[H_FRAMES].load(Ordering::Relaxed),
        ]
    }

    fn map(file: &StdFile, bytes: usize) -> io::Result<Domain> {
        if bytes < HEADER_WORDS as usize * 8 {
            return Err(invalid(format!("folio: a domain region of {bytes} bytes")));
        }
        // SAFETY: a shared mapping of `bytes` of our open file; checked below. The file
        // stays mapped after `file` is closed.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // Not inherited by a forked child (module docs, "Forks"): a child that touches
        // it faults, and a child's cache attaches as its own member.
        // SAFETY: advice on exactly the mapping made above, which nothing uses yet.
        if unsafe { libc::madvise(base, bytes, libc::MADV_DONTFORK) } != 0 {
            let e = io::Error::last_os_error();
            // SAFETY: exactly the mapping made above, unmapped once.
            unsafe { libc::munmap(base, bytes) };
            return Err(e);
        }
        Ok(Domain {
            base,
            bytes,
            words: HEADER_WORDS as usize,
            data_at: 0,
            geometry: Geometry {
                slots: 0,
                frames: 0,
            },
        })
    }

    /// The header's geometry, checked against the file's `size` (untrusted input).
    fn checked(mut self, size: usize, name: &std::ffi::OsStr) -> io::Result<Domain> {
        let Judged::Formatted(geometry) = judge(&self.header(), size, name)? else {
            return Err(invalid(
                "folio: the domain's region is not formatted".into(),
            ));
        };
        if size > self.bytes {
            return Err(invalid(format!(
                "folio: a domain region of {size} bytes mapped as {}",
                self.bytes
            )));
        }
        self.geometry = geometry;
        self.words = geometry.bytes() / 8;
        self.data_at = geometry.data_at();
        Ok(self)
    }

    /// The region's words (every word before the data area).
    pub(crate) fn region(&self) -> &[AtomicU64] {
        debug_assert!(self.words * 8 <= self.bytes);
        // SAFETY: the mapping is `bytes` long (at least `words` words: `checked`, `create`),
        // page-aligned and lives as long as `self`; any 8 bytes are a valid AtomicU64, whose
        // interior mutability allows the writes of other processes. The data area is
        // covered: a tree's node frames are accessed only as these words, a data frame's
        // bytes only through `frame_data` by the protocol of read.rs (module docs); a walk
        // sent by a scribbled link into a data frame loads words another process may be
        // writing, as a racing process's load would, and validates what it finds.
        unsafe { std::slice::from_raw_parts(self.base.cast::<AtomicU64>(), self.words) }
    }

    /// The mapping's first byte in this process (tests: a forked child looks there).
    #[cfg(test)]
    pub(crate) fn base_address(&self) -> usize {
        self.base as usize
    }

    /// The first byte of frame `frame`'s data (`FRAME_BYTES`, page-aligned), in this
    /// process's mapping. Who may read or write those bytes, and when: read.rs.
    #[inline]
    pub(crate) fn frame_data(&self, frame: Frame) -> *mut u8 {
        assert!(frame.0 < self.geometry.frames, "no frame {}", frame.0);
        let at = self.data_at + frame.0 as usize * FRAME_BYTES;
        debug_assert!(at + FRAME_BYTES <= self.bytes);
        // SAFETY: `at + FRAME_BYTES` lies inside the mapping (`bytes()` covers every frame,
        // checked against the file's size when mapped).
        unsafe { self.base.cast::<u8>().add(at) }
    }

    /// Faults the data area's pages of `frames` in (`MADV_POPULATE_WRITE` on this
    /// process's mapping): the region file's tmpfs pages allocated and zeroed where it had
    /// none, and mapped here. It changes no byte (a page the file had keeps its bytes, one
    /// it lacked read as zeros before and after), so any frame may be populated at any
    /// time, whoever leases it and whatever it holds (populate.rs).
    ///
    /// Errors: `madvise`'s: `EINVAL` from a kernel without it (before 5.14), `EFAULT` when
    /// the file system has no room (where a store would raise SIGBUS), `ENOMEM`, `EINTR`.
    pub(crate) fn populate_data(&self, frames: std::ops::Range<u32>) -> io::Result<()> {
        let (at, bytes) = self.data_range(&frames);
        // SAFETY: `[at, at + bytes)` lies inside our mapping (`data_range`); populating
        // changes no byte of it (above).
        let rc = unsafe {
            libc::madvise(
                self.base.cast::<u8>().add(at).cast(),
                bytes,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Gives the data area's pages of `frames` back (`MADV_REMOVE`: the region file's
    /// tmpfs pages freed; the frames read as zeros after). The steward's give-back of
    /// free frames (steward.rs, "Alone").
    ///
    /// Context: the frames are free in the allocator and nobody may lease them meanwhile
    /// (the steward alone in its domain): their bytes are nobody's.
    /// Errors: `madvise`'s.
    pub(crate) fn punch_data(&self, frames: std::ops::Range<u32>) -> io::Result<()> {
        let (at, bytes) = self.data_range(&frames);
        // SAFETY: `[at, at + bytes)` lies inside our mapping (`data_range`); the caller
        // says nobody reads or writes those frames' bytes (above).
        let rc = unsafe {
            libc::madvise(
                self.base.cast::<u8>().add(at).cast(),
                bytes,
                libc::MADV_REMOVE,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Whether each frame of `frames` has its page in the region file (`mincore`: the
    /// file's page cache, whether or not this process maps the page yet), one `bool` per
    /// frame.
    ///
    /// Errors: `mincore`'s.
    pub(crate) fn data_resident(&self, frames: std::ops::Range<u32>) -> io::Result<Vec<bool>> {
        let (at, bytes) = self.data_range(&frames);
        let pages = bytes / page_bytes();
        let mut vec = vec![0u8; pages];
        // SAFETY: `[at, at + bytes)` lies inside our mapping and is page-aligned
        // (`data_range`); `vec` holds one byte per page of it.
        let rc = unsafe {
            libc::mincore(
                self.base.cast::<u8>().add(at).cast(),
                bytes,
                vec.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // A frame is a page wherever pages are 4 KiB (x86-64); a larger page holds several.
        let per_page = (page_bytes() / FRAME_BYTES).max(1);
        Ok((0..frames.len())
            .map(|f| vec[f / per_page] & 1 != 0)
            .collect())
    }

    /// The byte offset and length in the mapping of `frames`' data (page-aligned).
    fn data_range(&self, frames: &std::ops::Range<u32>) -> (usize, usize) {
        assert!(
            frames.start < frames.end && frames.end <= self.geometry.frames,
            "frames {frames:?} of a domain of {}",
            self.geometry.frames
        );
        let at = self.data_at + frames.start as usize * FRAME_BYTES;
        let bytes = frames.len() * FRAME_BYTES;
        assert!(at + bytes <= self.bytes);
        (at, bytes)
    }

    pub(crate) fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// The slot table's view.
    pub(crate) fn slots(&self) -> SlotTable<'_> {
        SlotTable::new(
            self.region(),
            self.geometry.slot_table(),
            self.geometry.slots,
        )
    }

    /// The frame stack's view.
    pub(crate) fn stack(&self) -> FrameStack<'_> {
        FrameStack::new(
            self.region(),
            self.geometry.stack(),
            self.geometry.stack_frames(),
        )
    }

    /// The buddy allocator's view.
    pub(crate) fn buddy(&self) -> SharedBuddy<'_> {
        SharedBuddy::new(self.region(), self.geometry.buddy(), self.geometry.frames)
    }

    /// The eviction queue's view, over the buddy allocator's frames (its own view of it).
    pub(crate) fn queue(&self) -> SharedQueue<'_> {
        SharedQueue::new(self.region(), self.geometry.queue(), self.buddy())
            .with_owners(self.records())
    }

    /// Every file record's index, record r's the r-th (a `queue::Indexes`: `FileNo(r)`).
    pub(crate) fn indexes(&self) -> Vec<SharedIndex<'_>> {
        let buddy = self.buddy();
        (0..FILE_RECORDS)
            .map(|r| {
                SharedIndex::new(
                    self.region(),
                    self.geometry.index(r),
                    &buddy,
                    self.geometry.data_word(),
                )
            })
            .collect()
    }

    /// The file table's view.
    pub(crate) fn files(&self) -> FileTable<'_> {
        FileTable::new(
            self.region(),
            self.geometry.files(),
            FILE_RECORDS,
            self.geometry.slots,
        )
    }

    /// The slot records' view.
    pub(crate) fn records(&self) -> Records<'_> {
        Records::new(self.region(), self.geometry.records(), self.geometry.slots)
    }

    /// The steward as the header names it (0 pid: none yet).
    pub(crate) fn steward(&self) -> ProcessId {
        let region = self.region();
        let pid = region[H_STEWARD_PID].load(Ordering::Acquire);
        ProcessId {
            pid: u32::try_from(pid).unwrap_or(0),
            start: region[H_STEWARD_START].load(Ordering::Acquire),
        }
    }

    /// Names `id` the steward and counts an election.
    ///
    /// Context: a steward that just won the election.
    pub(crate) fn set_steward(&self, id: ProcessId) {
        let region = self.region();
        region[H_STEWARD_PID].store(0, Ordering::Release);
        region[H_STEWARD_START].store(id.start, Ordering::Release);
        region[H_STEWARD_PID].store(u64::from(id.pid), Ordering::Release);
        region[H_ELECTIONS].fetch_add(1, Ordering::AcqRel);
    }

    /// The quota: how many frames the eviction queue may hold now (steward.rs, "The
    /// quota"), at most the domain's frames (a word stored out of bounds reads as them).
    ///
    /// Context: any process; one load (a member's miss reads it before it leases).
    pub(crate) fn quota(&self) -> u32 {
        let word = self.region()[H_QUOTA].load(Ordering::Relaxed);
        u32::try_from(word)
            .unwrap_or(u32::MAX)
            .min(self.geometry.frames)
    }

    /// Sets the quota to `frames` (at most the domain's).
    ///
    /// Context: the steward (the quota's only writer).
    pub(crate) fn set_quota(&self, frames: u32) {
        let frames = frames.min(self.geometry.frames);
        self.region()[H_QUOTA].store(u64::from(frames), Ordering::Relaxed);
    }

    /// Every refault the members' misses counted (pages read again whose shadow was still
    /// in their index): a counter that only grows, read by the steward's memory tick.
    pub(crate) fn refaults(&self) -> u64 {
        self.region()[H_REFAULTS].load(Ordering::Relaxed)
    }

    /// Counts `pages` refaults.
    ///
    /// Context: a member's miss (one shared store per miss that refaulted; never a hit).
    pub(crate) fn note_refaults(&self, pages: u64) {
        self.region()[H_REFAULTS].fetch_add(pages, Ordering::Relaxed);
    }

    /// How many stewards this domain has had.
    pub(crate) fn elections(&self) -> u64 {
        self.region()[H_ELECTIONS].load(Ordering::Acquire)
    }

    /// The test lever: the steward stops itself (`SIGSTOP`) at the `steps`-th step (1
    /// for the next) of its work on deaths from now, once (the lever counts down to 0 and
    /// stays there). 0: never. Production never sets it.
    pub(crate) fn set_steward_stop_at(&self, steps: u64) {
        self.region()[H_STOP_AT].store(steps, Ordering::Release);
    }

    /// The steps the lever still counts before it stops the steward (0: disarmed, or
    /// fired): a failing test's dump.
    #[cfg(test)]
    pub(crate) fn steward_stop_at(&self) -> u64 {
        self.region()[H_STOP_AT].load(Ordering::Acquire)
    }

    /// A step of the steward's work on deaths (steward.rs): counts the lever down and
    /// returns true at the step it names, exactly once.
    pub(crate) fn steward_lever_fires(&self) -> bool {
        let lever = &self.region()[H_STOP_AT];
        let mut left = lever.load(Ordering::Acquire);
        while left != 0 {
            match lever.compare_exchange(left, left - 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return left == 1,
                Err(seen) => left = seen,
            }
        }
        false
    }
}

/// What a region file's header says (`judge`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Judged {
    /// A region of this version, its geometry fitting the file.
    Formatted(Geometry),
    /// A format that never finished (`create` cut the file to 0 and grew it, so the
    /// words it had not stored yet read 0; MAGIC is its last store): the steward formats
    /// it again.
    Unformatted,
}

/// Judges the first words of a region file of `size` bytes named `name` (untrusted
/// input: another process, another build or another program wrote them): MAGIC, VERSION,
/// the slots and the frames.
///
/// Errors: `InvalidData` for a region of another version, or whose geometry is out of
/// range or does not fit `size`, and for a file that is no region (MAGIC neither there
/// nor 0, or a version that is neither 0 nor ours with no MAGIC): the caller leaves it as
/// it is (DESIGN.md §6: bad input gets a clear error and loses nothing).
fn judge(words: &[u64; 4], size: usize, name: &std::ffi::OsStr) -> io::Result<Judged> {
    let [magic, version, slots, frames] = *words;
    if magic != MAGIC {
        if magic == 0 && (version == 0 || version == VERSION) {
            return Ok(Judged::Unformatted);
        }
        return Err(invalid(format!(
            "folio: {} is not a domain region (its first words are {magic:#x} and              {version:#x}): left as it is; remove it, or name the domain otherwise",
            name.to_string_lossy()
        )));
    }
    if version != VERSION {
        return Err(invalid(format!(
            "folio: a domain region of version {version}"
        )));
    }
    let geometry = Geometry {
        slots: u16::try_from(slots).unwrap_or(u16::MAX),
        frames: u32::try_from(frames).unwrap_or(u32::MAX),
    }
    .check()?;
    if geometry.bytes() > size {
        return Err(invalid(format!(
            "folio: a domain of {slots} slots and {frames} frames in {size} bytes"
        )));
    }
    Ok(Judged::Formatted(geometry))
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: our own mapping; no view of it outlives `self` (views borrow it).
        unsafe { libc::munmap(self.base, self.bytes) };
    }
}

impl ProcessId {
    /// This process.
    pub(crate) fn me() -> io::Result<ProcessId> {
        let pid = std::process::id();
        Ok(ProcessId {
            pid,
            start: start_time(pid)?,
        })
    }

    /// A pidfd of this process, if it is alive (`find`); `None` too if that could not be
    /// told (for callers to whom both mean "not usable now").
    pub(crate) fn open(self) -> Option<Pidfd> {
        self.find().ok().flatten()
    }

    /// A pidfd of this process if it is alive, `None` if it is gone: `pidfd_open(pid)`,
    /// then the start time of `pid` read and compared, then the pidfd polled: if it is not
    /// readable, the process it names was alive after the start time was read, so the
    /// start time was its own (the pid not reused in between). A zombie is gone, and so is
    /// a process reaped while its start time is read (`start_time_in`: the read's
    /// `ESRCH`), or whose start time cannot be read once its pidfd says it exited.
    ///
    /// Errors: what keeps it from telling (`pidfd_open` out of descriptors or memory,
    /// `/proc` unreadable while the pidfd says it runs): the process may be alive. (A
    /// steward's census takes such a process for alive and leaves it unwatched: a dead
    /// process told so would keep its slot and its locks until the next steward, and
    /// every process waiting for those locks would wait as long: the steward kill test's
    /// hang, when a member reaped between the open of its `/proc/<pid>/stat` and the read
    /// was told so.)
    pub(crate) fn find(self) -> io::Result<Option<Pidfd>> {
        self.find_with(|| {})
    }

    /// `find`, calling `between` after the open of `/proc/<pid>/stat` and before its read
    /// (a test's lever: it reaps the process there).
    pub(crate) fn find_with(self, between: impl FnOnce()) -> io::Result<Option<Pidfd>> {
        if self.pid == 0 {
            return Ok(None);
        }
        let pidfd = match Pidfd::open(self.pid) {
            Ok(pidfd) => pidfd,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(None),
            Err(e) => return Err(e),
        };
        let read = open_stat(self.pid).and_then(|stat| {
            between();
            start_time_in(self.pid, stat)
        });
        let start = match read {
            Ok(start) => start,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            // The kernel says the process it opened exited: gone, whatever `/proc` said.
            Err(_) if pidfd.is_dead() => return Ok(None),
            Err(e) => return Err(e),
        };
        if start != self.start || pidfd.is_dead() {
            return Ok(None);
        }
        Ok(Some(pidfd))
    }
}

/// The start time of `pid` (`/proc/<pid>/stat` field 22).
///
/// Errors: `NotFound` if there is no such process (at the open, or reaped before the
/// read); `InvalidData` for a line that does not parse.
pub(crate) fn start_time(pid: u32) -> io::Result<u64> {
    start_time_in(pid, open_stat(pid)?)
}

/// `/proc/<pid>/stat`, opened.
///
/// Errors: `NotFound` if there is no such process.
fn open_stat(pid: u32) -> io::Result<StdFile> {
    StdFile::open(format!("/proc/{pid}/stat"))
}

/// The start time in `stat`, `pid`'s `/proc/<pid>/stat` opened by `open_stat`.
///
/// Errors: `NotFound` if the process was reaped since the open (the read fails with
/// `ESRCH`: an open file of a process the kernel no longer has); `InvalidData` for a line
/// that does not parse.
fn start_time_in(pid: u32, mut stat: StdFile) -> io::Result<u64> {
    use std::io::Read;
    let mut text = String::new();
    if let Err(e) = stat.read_to_string(&mut text) {
        return Err(if e.raw_os_error() == Some(libc::ESRCH) {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("folio: process {pid} was reaped"),
            )
        } else {
            e
        });
    }
    let stat = text;
    // The command (field 2) is in parentheses and may hold anything: fields 3 onward
    // follow its last ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| invalid(format!("folio: /proc/{pid}/stat: {stat}")))?;
    rest.split_ascii_whitespace()
        .nth(22 - 3)
        .and_then(|field| field.parse().ok())
        .ok_or_else(|| invalid(format!("folio: /proc/{pid}/stat has no start time")))
}

/// A process descriptor (`pidfd_open`): polls readable once the process has exited.
#[derive(Debug)]
pub(crate) struct Pidfd(OwnedFd);

impl Pidfd {
    /// `pidfd_open(pid)`.
    ///
    /// Errors: `pidfd_open`'s (`ESRCH`: no such process).
    pub(crate) fn open(pid: u32) -> io::Result<Pidfd> {
        // SAFETY: pidfd_open takes a pid and flags; the result is checked.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor nothing else owns.
        Ok(Pidfd(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }))
    }

    /// Whether the process has exited (the kernel says so: the pidfd polls readable).
    pub(crate) fn is_dead(&self) -> bool {
        let mut fd = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, no wait.
        let n = unsafe { libc::poll(&mut fd, 1, 0) };
        n > 0
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{DiskDir, SegmentDir};
    use crate::shared::buddy::Order;
    use crate::shared::index::{Entry, Folio, Placed};
    use crate::shared::queue::{FileNo, Optimistic, Shares};
    use crate::shared::terms::Unkillable;
    use crate::shared::tests::{allocated_in, DomainHome};
    use crate::shared::Flaw;

    /// Every word before the data area of the largest domain is named by a `Word` (a
    /// u32): the layout's sum, counted again in u64, is what `Geometry::words` says (a
    /// sum that wrapped would be far less), and the words not per frame are below 2^24
    /// (the `const` assertion beside `FRAMES_MAX` counts on it).
    #[test]
    fn largest_geometry_fits_its_words() {
        let g = Geometry {
            slots: SLOTS_MAX,
            frames: FRAMES_MAX,
        }
        .check()
        .unwrap();
        let up = |w: u32| u64::from(round_up(w));
        let fixed = u64::from(HEADER_WORDS)
            + up(SlotTable::words(g.slots))
            + u64::from(Records::words(g.slots))
            + up(FrameStack::words(g.stack_frames()))
            + up(FileTable::words(FILE_RECORDS, g.slots))
            + u64::from(FILE_RECORDS) * up(SharedIndex::words());
        let per_frame = u64::from(SharedBuddy::words(g.frames)).next_multiple_of(8)
            + u64::from(SharedQueue::words(g.frames)).next_multiple_of(8);
        assert!(fixed < 1 << 24, "{fixed} words not per frame");
        assert_eq!(u64::from(g.words()), fixed + per_frame);
        assert!(g.data_word().0 >= g.words());
        assert_eq!(g.bytes(), g.data_at() + (FRAMES_MAX as usize) * FRAME_BYTES);
    }

    /// A temporary private home in `/dev/shm` (a tmpfs) and the files of `name` in it.
    fn home(name: &str) -> (DomainHome, SegmentDir, DomainFiles) {
        let home = DomainHome::new();
        let dir = SegmentDir::open(home.path(), DiskDir::Refused).unwrap();
        (home, dir, DomainFiles::of(name).unwrap())
    }

    /// A domain of the most frames (1 TiB of data, 1.1 TB of region: far past this
    /// tmpfs's size) is made, mapped and opened again: the region file is sparse, so its
    /// `ftruncate` and `mmap` succeed whatever the file system's size, and the format
    /// writes a few hundred KiB of it (no frame's words).
    #[test]
    fn a_domain_of_the_most_frames_is_made_and_opened_in_a_sparse_file() {
        let (home, dir, files) = home("most-frames");
        let geometry = Geometry {
            slots: 64,
            frames: FRAMES_MAX,
        };
        let (made, how) = Domain::create(&dir, &files, geometry).unwrap();
        assert_eq!(how, Made::Formatted);
        let path = home.path().join(&files.region);
        let size = std::fs::metadata(&path).unwrap().len();
        assert_eq!(size, geometry.bytes() as u64);
        assert!(size > 1 << 40, "{size}");
        let opened = Domain::open(&dir, &files).unwrap();
        assert_eq!(opened.geometry(), geometry);
        assert_eq!(opened.quota(), FRAMES_MAX);
        // The last frame's data is there to be written and read back.
        let last = Frame(FRAMES_MAX - 1);
        // SAFETY: the frame's 4 KiB lie in both mappings (of one file); nobody else uses
        // this region.
        unsafe {
            made.frame_data(last).add(FRAME_BYTES - 1).write(0xa5);
            assert_eq!(opened.frame_data(last).add(FRAME_BYTES - 1).read(), 0xa5);
        }
        let allocated = allocated_in(&path, 0..size);
        assert!(allocated < 4 << 20, "{allocated} bytes allocated");
        drop((made, opened));
    }

    /// Frames past 2^20 (the cap before this one) carry the read side: the allocator
    /// forced past frame 2^20 (order-9 leases, one state word each, no data touched),
    /// three pages cached in frames there (their index's node frame too), read back by
    /// the optimistic hit, reclaimed (shadows left); then the lessee's death swept, which
    /// frees its 2^20 frames and reads no word of the frames past the frontier: the
    /// queue's lines of the 2^20 frames never reached stay holes.
    #[test]
    fn frames_past_2_20_cache_pages_and_their_lessees_sweep_stays_below_the_frontier() {
        const FRAMES: u32 = 1 << 21;
        let (home, dir, files) = home("past-2-20");
        let geometry = Geometry {
            slots: 4,
            frames: FRAMES,
        };
        let (domain, _) = Domain::create(&dir, &files, geometry).unwrap();
        let slots = domain.slots();
        let me = slots.attach(Flaw::None).unwrap();
        let steward = slots.attach(Flaw::None).unwrap();
        let (buddy, queue, indexes) = (domain.buddy(), domain.queue(), domain.indexes());
        let run = Unkillable;
        for _ in 0..(1 << 20) / 512 {
            buddy.alloc(Order(9), me, &slots, &run).unwrap().unwrap();
        }
        assert_eq!(buddy.reached(), 1 << 20);
        let file = FileNo(1);
        let mut frames = Vec::new();
        for page in 0..3u64 {
            let frame = buddy.alloc(Order(0), me, &slots, &run).unwrap().unwrap();
            assert!(frame.0 >= 1 << 20, "{frame:?}");
            // SAFETY: the frame is leased to us and in no index: its bytes are ours.
            unsafe { std::ptr::write_bytes(domain.frame_data(frame), page as u8 + 1, FRAME_BYTES) };
            queue
                .hand_over(frame, file, page, me, indexes.as_slice(), &slots, &run)
                .unwrap();
            let folio = Folio {
                frame: u64::from(frame.0),
                order: 0,
            };
            let placed = indexes[1]
                .insert_run(me, page, &[folio], &slots, &run)
                .unwrap();
            assert!(matches!(placed[..], [Placed::Inserted(_)]), "{placed:?}");
            queue.unpin(frame, me);
            frames.push(frame);
        }
        for (page, frame) in frames.iter().enumerate() {
            let page = page as u64;
            assert_eq!(
                indexes[1].lookup(page),
                Entry::Folio {
                    frame: u64::from(frame.0),
                    order: 0
                }
            );
            let mut copy = vec![0u8; FRAME_BYTES];
            let hit = queue
                .read_hit(&indexes[1], file, page, &run, |f| {
                    // SAFETY: a quiet domain: nobody writes the frame meanwhile.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            domain.frame_data(f),
                            copy.as_mut_ptr(),
                            FRAME_BYTES,
                        )
                    }
                })
                .unwrap();
            assert_eq!(hit, Optimistic::Hit(*frame));
            assert!(copy.iter().all(|&b| b == page as u8 + 1), "page {page}");
        }
        let census = queue.check(&slots).unwrap();
        let queued: Vec<Frame> = census.queued.iter().map(|q| q.0).collect();
        assert_eq!(queued, frames);
        let reclaimed = queue
            .reclaim(3, Shares::NONE, me, indexes.as_slice(), &slots, &run)
            .unwrap();
        assert_eq!(reclaimed, 3);
        assert!(matches!(indexes[1].lookup(0), Entry::Shadow(_)));

        // The death: every word of the frames past the frontier stays a hole.
        let reached = u64::from(buddy.reached());
        let path = home.path().join(&files.region);
        let queue_at = u64::from(geometry.queue().0) * 8;
        // The pages holding no reached frame's line (64 lines a page), and none of the
        // indexes' lines after the queue's.
        let first = (queue_at + (8 + 8 * reached) * 8).next_multiple_of(4096);
        let end = (queue_at + (8 + 8 * u64::from(FRAMES)) * 8) / 4096 * 4096;
        let unreached = first..end;
        assert!(end - first > 60 << 20, "{unreached:?}");
        assert_eq!(allocated_in(&path, unreached.clone()), 0);
        assert!(slots.mark_dead(me));
        let freed = queue
            .sweep(me, steward, indexes.as_slice(), &slots, &run)
            .unwrap();
        slots.free_dead(me);
        assert!(freed >= 1 << 20, "{freed} frames freed");
        assert_eq!(
            allocated_in(&path, unreached),
            0,
            "the sweep read past the frontier"
        );
        assert!(queue.check(&slots).unwrap().queued.is_empty());
    }
}
