//! A segment is untrusted input (issue 42, docs/persistence.md's trust model): each test
//! forges a segment a cache left, as its own user (or a root process that dropped its
//! privileges) can, and checks the next cache neither panics nor refuses for good, serves
//! no byte of one file for another, and makes a recovery write nothing it cannot prove.
//!
//! - `two_slots_naming_one_file_are_both_dropped`: slot B rewritten to name file A (both
//!   of the same bytes, so only the claim tells): the build panicked ("a mapping id or
//!   inode adopted twice") before; now neither slot's pages are kept.
//! - `side_table_entries_moved_to_another_files_slot_are_not_served`: every entry of file
//!   A labelled B's and B's A's: B's reader got A's bytes before; now the sampled pages
//!   differ from the disk's and both files start cold.
//! - `folios_that_overrun_the_next_or_the_end_are_dropped`: a head whose order covers the
//!   next folios, and one whose order runs past the arena's end.
//! - `a_frame_count_beyond_the_file_system_replaces_the_segment`: a header of 2^28 frames
//!   with its checksum recomputed and the file grown to match was adopted before; now the
//!   segment is replaced, and the adoption says why.
//! - `a_recovery_writes_no_file_the_segment_only_read`: a dirty frame forged for a file
//!   the owner only read, the header marked orphaned: refused in a segment a keeper
//!   finished (the mark), and in one whose keeper was killed (the slot does not record an
//!   opening for writing); a forged size of that file truncates nothing.
//! - `a_root_process_that_drops_privileges_cannot_write_a_root_only_file` (root only): the
//!   attack of issue 42 replayed: a root child builds a named cache, opens a file for
//!   writing, `setuid`s to nobody keeping the segment's descriptor, forges a slot naming a
//!   root-only file with a dirty frame, makes its keeper's `ftruncate` fail and dies; the
//!   next root cache of that name recovered the orphan by path and wrote the forged bytes
//!   into the root-only file before; now it writes nothing and starts cold (the keeper's
//!   witness took the segment's name away at the `setuid`).
//! - `a_root_process_that_drops_privileges_cannot_make_root_s_next_cache_serve_forged_bytes`
//!   (root only): the child reads a root-only file through the cache, drops privileges,
//!   overwrites a clean frame of it with 0xEE and dies (SIGKILL, or a clean drop and
//!   exit): root's next cache served the forged page before (checked: `pages_kept` 64);
//!   now the keeper's witness (`keeper/witness.rs`) took the vouch mark back and the name
//!   away (checked on the file, not by sampling pages) and the next cache reads the
//!   disk's bytes.
//! - `another_process_s_setuid_leaves_the_owner_s_segment_kept` (root only): a helper's
//!   `setuid` during the owner's life is not the owner's: the segment is adopted warm.
//! - `a_forked_child_has_neither_the_segment_s_descriptor_nor_its_mapping` (root only): a
//!   child forked by the owner finds `/dev/null` at the segment's descriptor number, the
//!   owner lock's and the keeper link's, and nothing mapped at the segment's address; the owner's segment is then adopted warm.
//! - `without_a_witness_a_privileged_owner_s_segment_is_not_kept` (root only): the lever
//!   `FOLIO_KEEPER_NO_WITNESS=1`: the cache works, says why, and the next one is cold.
//! - `an_owner_that_cannot_change_credentials_needs_no_witness` (root only): a child that
//!   became nobody before its first cache, with the lever set, restarts warm.
//! - `a_forged_dirty_mask_past_a_folio_s_pages_is_not_written`: found by the fuzz target
//!   (`fuzz/fuzz_targets/hostile_segment.rs`): a recovery panicked on it.
//! - `the_keeper_runs_without_privileges`: the keeper has no capability and
//!   `NoNewPrivs` set.
//! - `a_segment_no_keeper_vouched_for_is_replaced_not_adopted`: a kept segment whose vouch
//!   mark (`S_ISVTX`) is gone, as a keeper that could not vouch (or a witness that saw a
//!   change) leaves it, is replaced, `replaced_because` saying so; with it, adopted warm.
//! - `an_unvouched_orphan_is_not_recovered_by_path` (root only): a killed keeper's orphan
//!   without the mark: root's recovery writes nothing by path, the next cache replaces
//!   it; with the mark (set at the keeper's start), the recovery writes its dirty pages.

#[path = "common/harness.rs"]
mod harness;

use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use folio::Cache;

const CHILD_ENV: &str = "FOLIO_SEGMENT_FORGERY_CHILD";
const NAME: &str = "forged";
const NOBODY: u32 = 65534;
const KEEPER_WAIT_MAX: Duration = Duration::from_secs(60);
const READY_WAIT_MAX: Duration = Duration::from_secs(30);

// The segment's layout (`segment/layout.rs`), as a forger reads it.
const LAYOUT_VERSION_AT: u64 = 8;
const FRAME_COUNT_AT: u64 = 28;
const META_FRAMES_AT: u64 = 32;
const SLOTS_OFFSET_AT: u64 = 40;
const META_OFFSET_AT: u64 = 48;
const FRAMES_OFFSET_AT: u64 = 56;
const TOTAL_BYTES_AT: u64 = 64;
const FIXED_SUM_AT: u64 = 72;
const STATE_AT: u64 = 88;
const ORPHANED: u32 = 2;
const SLOT_BYTES: u64 = 512;
const SLOT_COUNT: u64 = 1 << 18;
const ENTRY_BYTES: u64 = 24;
const PAGE: u64 = 4096;
// A slot's words (`FileSlot`).
const SLOT_SEQ: u64 = 0;
const SLOT_DEV: u64 = 8;
const SLOT_INO: u64 = 16;
const SLOT_BORN: u64 = 24;
const SLOT_SIZE: u64 = 32;
// The state word's bits (`refcount.rs`).
const DEAD: u64 = 1 << 32;
const UPTODATE: u64 = 1 << 34;
const WRITEBACK: u64 = 1 << 43;

fn main() {
    harness::main(
        &[
            (
                "two_slots_naming_one_file_are_both_dropped",
                two_slots_naming_one_file_are_both_dropped,
            ),
            (
                "side_table_entries_moved_to_another_files_slot_are_not_served",
                side_table_entries_moved_to_another_files_slot_are_not_served,
            ),
            (
                "folios_that_overrun_the_next_or_the_end_are_dropped",
                folios_that_overrun_the_next_or_the_end_are_dropped,
            ),
            (
                "a_frame_count_beyond_the_file_system_replaces_the_segment",
                a_frame_count_beyond_the_file_system_replaces_the_segment,
            ),
            (
                "a_recovery_writes_no_file_the_segment_only_read",
                a_recovery_writes_no_file_the_segment_only_read,
            ),
            (
                "a_root_process_that_drops_privileges_cannot_write_a_root_only_file",
                a_root_process_that_drops_privileges_cannot_write_a_root_only_file,
            ),
            (
                "a_forged_dirty_mask_past_a_folio_s_pages_is_not_written",
                a_forged_dirty_mask_past_a_folio_s_pages_is_not_written,
            ),
            (
                "the_keeper_runs_without_privileges",
                the_keeper_runs_without_privileges,
            ),
            (
                "a_root_process_that_drops_privileges_cannot_make_root_s_next_cache_serve_forged_bytes",
                a_root_process_that_drops_privileges_cannot_make_root_s_next_cache_serve_forged_bytes,
            ),
            (
                "another_process_s_setuid_leaves_the_owner_s_segment_kept",
                another_process_s_setuid_leaves_the_owner_s_segment_kept,
            ),
            (
                "a_forked_child_has_neither_the_segment_s_descriptor_nor_its_mapping",
                a_forked_child_has_neither_the_segment_s_descriptor_nor_its_mapping,
            ),
            (
                "without_a_witness_a_privileged_owner_s_segment_is_not_kept",
                without_a_witness_a_privileged_owner_s_segment_is_not_kept,
            ),
            (
                "an_owner_that_cannot_change_credentials_needs_no_witness",
                an_owner_that_cannot_change_credentials_needs_no_witness,
            ),
            (
                "a_segment_no_keeper_vouched_for_is_replaced_not_adopted",
                a_segment_no_keeper_vouched_for_is_replaced_not_adopted,
            ),
            (
                "an_unvouched_orphan_is_not_recovered_by_path",
                an_unvouched_orphan_is_not_recovered_by_path,
            ),
        ],
        CHILD_ENV,
        child,
    );
}

/// A forger's view of a segment file: pwrite and pread at the layout's offsets.
struct Forge {
    file: File,
    slots: u64,
    meta: u64,
    frames: u64,
    frame_count: u32,
    /// Where a slot's `opened`, path length and path are in this layout version.
    path_len_at: u64,
}

impl Forge {
    fn open(path: &Path) -> Forge {
        let file = File::options()
            .read(true)
            .write(true)
            .open(path)
            .expect("open the segment");
        Forge::over(file)
    }

    fn over(file: File) -> Forge {
        let mut forge = Forge {
            file,
            slots: 0,
            meta: 0,
            frames: 0,
            frame_count: 0,
            path_len_at: 0,
        };
        forge.slots = forge.u64_at(SLOTS_OFFSET_AT);
        forge.meta = forge.u64_at(META_OFFSET_AT);
        forge.frames = forge.u64_at(FRAMES_OFFSET_AT);
        forge.frame_count = forge.u32_at(FRAME_COUNT_AT);
        // Version 3 added the `opened` word before the path.
        forge.path_len_at = if forge.u32_at(LAYOUT_VERSION_AT) >= 3 {
            88
        } else {
            80
        };
        forge
    }

    fn u64_at(&self, at: u64) -> u64 {
        let mut b = [0u8; 8];
        self.file.read_exact_at(&mut b, at).expect("pread");
        u64::from_le_bytes(b)
    }

    fn u32_at(&self, at: u64) -> u32 {
        let mut b = [0u8; 4];
        self.file.read_exact_at(&mut b, at).expect("pread");
        u32::from_le_bytes(b)
    }

    fn put_u64(&self, at: u64, v: u64) {
        self.file
            .write_all_at(&v.to_le_bytes(), at)
            .expect("pwrite");
    }

    fn put_u32(&self, at: u64, v: u32) {
        self.file
            .write_all_at(&v.to_le_bytes(), at)
            .expect("pwrite");
    }

    fn slot_at(&self, id: u32) -> u64 {
        self.slots + u64::from(id) * SLOT_BYTES
    }

    /// The mapping id whose slot records `path`.
    fn slot_of(&self, path: &Path) -> u32 {
        let want = path.as_os_str().as_bytes();
        (0..256)
            .find(|&id| {
                let at = self.slot_at(id);
                let len = self.u64_at(at + self.path_len_at) as usize;
                if len != want.len() {
                    return false;
                }
                let mut got = vec![0u8; len];
                self.file
                    .read_exact_at(&mut got, at + self.path_len_at + 8)
                    .unwrap();
                got == want
            })
            .unwrap_or_else(|| panic!("no slot records {}", path.display()))
    }

    fn slot_bytes(&self, id: u32) -> Vec<u8> {
        let mut b = vec![0u8; SLOT_BYTES as usize];
        self.file.read_exact_at(&mut b, self.slot_at(id)).unwrap();
        b
    }

    fn set_slot_bytes(&self, id: u32, bytes: &[u8]) {
        self.file.write_all_at(bytes, self.slot_at(id)).unwrap();
    }

    fn entry_at(&self, frame: u32) -> u64 {
        self.meta + u64::from(frame) * ENTRY_BYTES
    }

    /// Every side-table entry: (frame, state, owner, place).
    fn entries(&self) -> Vec<(u32, u64, u32, u64)> {
        let mut all = vec![0u8; (u64::from(self.frame_count) * ENTRY_BYTES) as usize];
        self.file.read_exact_at(&mut all, self.meta).unwrap();
        all.chunks(ENTRY_BYTES as usize)
            .enumerate()
            .map(|(frame, e)| {
                (
                    frame as u32,
                    u64::from_le_bytes(e[0..8].try_into().unwrap()),
                    u32::from_le_bytes(e[12..16].try_into().unwrap()),
                    u64::from_le_bytes(e[16..24].try_into().unwrap()),
                )
            })
            .collect()
    }

    /// The head frames of mapping `id`'s cached folios: (frame, place).
    fn heads_of(&self, id: u32) -> Vec<(u32, u64)> {
        self.entries()
            .into_iter()
            .filter(|&(_, state, owner, _)| {
                owner == id && state & UPTODATE != 0 && state & DEAD == 0
            })
            .map(|(frame, _, _, place)| (frame, place))
            .collect()
    }

    fn set_entry(&self, frame: u32, state: u64, owner: u32, place: u64) {
        let at = self.entry_at(frame);
        self.put_u64(at, state);
        self.put_u32(at + 12, owner);
        self.put_u64(at + 16, place);
    }

    /// The frame that holds page `page` of mapping `id`, if a cached folio of it spans it.
    fn frame_of(&self, id: u32, page: u64) -> Option<u32> {
        self.heads_of(id).into_iter().find_map(|(frame, place)| {
            let (index, order) = (place & ((1 << 52) - 1), (place >> 52) & 0xF);
            (index..index + (1 << order))
                .contains(&page)
                .then(|| frame + (page - index) as u32)
        })
    }

    fn write_frame(&self, frame: u32, bytes: &[u8]) {
        self.file
            .write_all_at(bytes, self.frames + u64::from(frame) * PAGE)
            .unwrap();
    }

    fn set_orphaned(&self) {
        self.put_u32(STATE_AT, ORPHANED);
    }
}

fn builder(segments: &Path) -> folio::CacheBuilder {
    Cache::builder()
        .capacity_bytes(64 << 20)
        .persistent(true)
        .segment_dir(segments)
        .segment_name(NAME)
        // The tests wait for each keeper to exit after a drop: no steward stays (the
        // steward is kept_memory.rs's).
        .kept_memory(folio::KeptMemory {
            steward: false,
            ..folio::KeptMemory::default()
        })
}

fn content(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (seed.wrapping_mul(131).wrapping_add(k as u64 * 7) % 251) as u8)
        .collect()
}

fn read_all(cache: &Cache, path: &Path) -> Vec<u8> {
    let file = cache.open(path).unwrap();
    let mut buf = vec![0u8; file.len() as usize];
    let n = file.read_at(&mut buf, 0).unwrap();
    buf.truncate(n);
    buf
}

fn dirs() -> (tempfile::TempDir, tempfile::TempDir) {
    // Segments live on tmpfs (a disk directory is refused).
    let segments = tempfile::tempdir_in("/dev/shm").unwrap();
    std::fs::set_permissions(segments.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    (segments, tempfile::tempdir().unwrap())
}

/// A first cache: each file of `files` written with `std::fs`, then read whole through the
/// cache (so its pages are cached, clean), then the cache dropped; waits for its keeper to
/// end. Returns the segment's path.
fn first_life(segments: &Path, data: &Path, files: &[(&str, Vec<u8>)]) -> PathBuf {
    for (name, bytes) in files {
        std::fs::write(data.join(name), bytes).unwrap();
    }
    let cache = builder(segments).build().unwrap();
    for (name, bytes) in files {
        assert_eq!(&read_all(&cache, &data.join(name)), bytes);
    }
    let keeper = cache.keeper_pid().expect("a keeper");
    drop(cache);
    harness::wait_for_exit(keeper, KEEPER_WAIT_MAX, "the keeper of a dropped cache");
    segments.join(NAME)
}

fn two_slots_naming_one_file_are_both_dropped() {
    harness::become_subreaper();
    let (segments, data) = dirs();
    let same = content(1, 1 << 20);
    let seg = first_life(
        segments.path(),
        data.path(),
        &[("a", same.clone()), ("b", same.clone())],
    );
    let forge = Forge::open(&seg);
    let (a, b) = (
        forge.slot_of(&data.path().join("a")),
        forge.slot_of(&data.path().join("b")),
    );
    forge.set_slot_bytes(b, &forge.slot_bytes(a));
    drop(forge);
    let cache = builder(segments.path())
        .build()
        .expect("a segment with two slots of one file is adopted, not refused");
    let adoption = cache.adoption().unwrap().clone();
    eprintln!("{adoption:?}");
    assert_eq!(
        (adoption.files_kept, adoption.pages_kept),
        (0, 0),
        "{adoption:?}"
    );
    assert_eq!(adoption.files_dropped, 2, "{adoption:?}");
    assert_eq!(read_all(&cache, &data.path().join("a")), same);
    assert_eq!(read_all(&cache, &data.path().join("b")), same);
    drop(cache);
    // And the next start is warm again: nothing was refused for good.
    let again = builder(segments.path()).build().unwrap();
    assert!(again.adoption().unwrap().pages_kept > 0);
}

fn side_table_entries_moved_to_another_files_slot_are_not_served() {
    harness::become_subreaper();
    let (segments, data) = dirs();
    let (bytes_a, bytes_b) = (content(1, 1 << 20), content(2, 1 << 20));
    let seg = first_life(
        segments.path(),
        data.path(),
        &[("a", bytes_a.clone()), ("b", bytes_b.clone())],
    );
    let forge = Forge::open(&seg);
    let (a, b) = (
        forge.slot_of(&data.path().join("a")),
        forge.slot_of(&data.path().join("b")),
    );
    let (heads_a, heads_b) = (forge.heads_of(a), forge.heads_of(b));
    assert!(!heads_a.is_empty() && !heads_b.is_empty());
    for &(frame, place) in &heads_a {
        let at = forge.entry_at(frame);
        forge.set_entry(frame, forge.u64_at(at), b, place);
    }
    for &(frame, place) in &heads_b {
        let at = forge.entry_at(frame);
        forge.set_entry(frame, forge.u64_at(at), a, place);
    }
    drop(forge);
    let cache = builder(segments.path()).build().unwrap();
    let adoption = cache.adoption().unwrap().clone();
    eprintln!("{adoption:?}");
    assert_eq!(
        read_all(&cache, &data.path().join("b")),
        bytes_b,
        "b's reader got another file's bytes"
    );
    assert_eq!(read_all(&cache, &data.path().join("a")), bytes_a);
    assert_eq!(adoption.files_kept, 0, "{adoption:?}");
}

fn folios_that_overrun_the_next_or_the_end_are_dropped() {
    harness::become_subreaper();
    let (segments, data) = dirs();
    let bytes = content(3, 1 << 20);
    let seg = first_life(segments.path(), data.path(), &[("a", bytes.clone())]);
    let forge = Forge::open(&seg);
    let a = forge.slot_of(&data.path().join("a"));
    let heads = forge.heads_of(a);
    // The first head's order raised to 9 (512 pages): it covers the folios after it.
    let (first, place) = heads[0];
    let at = forge.entry_at(first);
    let order_mask = 0xfu64 << 52;
    forge.set_entry(
        first,
        forge.u64_at(at),
        a,
        (place & !order_mask) | (9 << 52),
    );
    // A copy of the last head moved to the arena's last frame, order 3: past the end.
    let (last, place) = *heads.last().unwrap();
    let state = forge.u64_at(forge.entry_at(last));
    forge.set_entry(
        forge.frame_count - 1,
        state,
        a,
        (place & !order_mask) | (3 << 52),
    );
    drop(forge);
    let cache = builder(segments.path()).build().unwrap();
    let adoption = cache.adoption().unwrap().clone();
    eprintln!("{adoption:?}");
    assert!(adoption.pages_unproven > 0, "{adoption:?}");
    assert_eq!(read_all(&cache, &data.path().join("a")), bytes);
}

/// FNV-1a over the words' bytes (`layout::checksum`).
fn checksum(words: &[u64]) -> u64 {
    let mut sum: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in words.iter().flat_map(|w| w.to_le_bytes()) {
        sum = (sum ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    sum
}

fn a_frame_count_beyond_the_file_system_replaces_the_segment() {
    harness::become_subreaper();
    let (segments, data) = dirs();
    let bytes = content(4, 1 << 20);
    let seg = first_life(segments.path(), data.path(), &[("a", bytes.clone())]);
    let forge = Forge::open(&seg);
    let frames: u64 = 1 << 28;
    let slots = 4096 + (64 << 10);
    let meta = slots + SLOT_COUNT * SLOT_BYTES;
    let frames_at = (meta + frames * ENTRY_BYTES).next_multiple_of(2 << 20);
    let total = frames_at + frames * PAGE;
    let version = u64::from(forge.u32_at(LAYOUT_VERSION_AT));
    forge.put_u32(FRAME_COUNT_AT, frames as u32);
    forge.put_u32(META_FRAMES_AT, frames as u32);
    forge.put_u64(SLOTS_OFFSET_AT, slots);
    forge.put_u64(META_OFFSET_AT, meta);
    forge.put_u64(FRAMES_OFFSET_AT, frames_at);
    forge.put_u64(TOTAL_BYTES_AT, total);
    let sum = checksum(&[
        version,
        PAGE,
        SLOT_BYTES,
        ENTRY_BYTES,
        SLOT_COUNT,
        frames,
        frames,
        slots,
        meta,
        frames_at,
        total,
    ]);
    forge.put_u64(FIXED_SUM_AT, sum);
    forge.file.set_len(total).expect("grow the forged segment");
    drop(forge);
    eprintln!("forged segment: {total} bytes");
    let cache = builder(segments.path()).build().unwrap();
    let adoption = cache.adoption().unwrap().clone();
    eprintln!("{adoption:?}");
    assert!(adoption.replaced, "a forged frame count was adopted");
    assert!(
        adoption
            .replaced_because
            .as_deref()
            .is_some_and(|why| why.contains("file system")),
        "{adoption:?}"
    );
    assert_eq!(read_all(&cache, &data.path().join("a")), bytes);
}

/// Forges a dirty frame (under writeback: written whole) of `bytes` for the file `path`
/// records in `seg`, over one of its cached folios' head frames, and marks the segment
/// orphaned.
fn forge_dirty_frame(seg: &Path, path: &Path, bytes: &[u8]) {
    let forge = Forge::open(seg);
    let id = forge.slot_of(path);
    let (frame, place) = forge.heads_of(id)[0];
    let state = forge.u64_at(forge.entry_at(frame));
    forge.set_entry(frame, state | WRITEBACK, id, place);
    forge.write_frame(frame, bytes);
    forge.set_orphaned();
}

fn a_recovery_writes_no_file_the_segment_only_read() {
    harness::become_subreaper();
    let evil = vec![0xEE; PAGE as usize];
    let bytes = content(5, 1 << 20);
    let read_only =
        |segments: &Path, data: &Path| first_life(segments, data, &[("only-read", bytes.clone())]);
    // 1. A segment its keeper finished (a clean drop): the mark refuses every write.
    let (segments, data) = dirs();
    let path = data.path().join("only-read");
    let seg = read_only(segments.path(), data.path());
    forge_dirty_frame(&seg, &path, &evil);
    let cache = builder(segments.path()).build().unwrap();
    let adoption = cache.adoption().unwrap().clone();
    eprintln!("finished segment: {adoption:?}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "a file only read was written"
    );
    assert!(adoption.replaced, "{adoption:?}");
    assert_eq!(read_all(&cache, &path), bytes);
    drop(cache);

    // 2. As a killed keeper leaves it (no mark): the slot does not say the owner opened
    // the file for writing.
    let (segments, data) = dirs();
    let path = data.path().join("only-read");
    let seg = read_only(segments.path(), data.path());
    forge_dirty_frame(&seg, &path, &evil);
    unfinish(&seg);
    let cache = builder(segments.path()).build().unwrap();
    let adoption = cache.adoption().unwrap().clone();
    eprintln!("unfinished segment: {adoption:?}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "a file only read was written"
    );
    assert!(adoption.replaced, "{adoption:?}");
    assert_eq!(read_all(&cache, &path), bytes);
    drop(cache);

    // 3. A forged size of a file only read truncates nothing.
    let (segments, data) = dirs();
    let path = data.path().join("only-read");
    let seg = read_only(segments.path(), data.path());
    let forge = Forge::open(&seg);
    let id = forge.slot_of(&path);
    forge.put_u64(forge.slot_at(id) + SLOT_SIZE, 10);
    forge.set_orphaned();
    drop(forge);
    unfinish(&seg);
    let cache = builder(segments.path()).build().unwrap();
    eprintln!("forged size: {:?}", cache.adoption());
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "a file only read was cut"
    );
    assert_eq!(read_all(&cache, &path), bytes);
}

/// Found by the hostile-segment fuzz target: a large folio's dirty-block mask (in its
/// tail's entry) with bits past its pages made a recovery panic (`io_buf_pages`), and
/// every later build of that name with it.
fn a_forged_dirty_mask_past_a_folio_s_pages_is_not_written() {
    harness::become_subreaper();
    let (segments, data) = dirs();
    let bytes = content(8, 1 << 20);
    let seg = first_life(segments.path(), data.path(), &[("a", bytes.clone())]);
    let forge = Forge::open(&seg);
    let a = forge.slot_of(&data.path().join("a"));
    // Slot a recorded as opened for writing, so that a recovery may write it.
    forge.put_u64(forge.slot_at(a) + forge.path_len_at - 8, 1);
    // An order-1 dirty folio at the arena's last two frames, its tail's mask all ones.
    let head = forge.frame_count - 2;
    forge.set_entry(head, UPTODATE | (1 << 37), a, 1 << 52);
    forge.set_entry(head + 1, DEAD, 0, u64::MAX);
    forge.write_frame(head, &bytes[..PAGE as usize]);
    forge.write_frame(head + 1, &bytes[PAGE as usize..2 * PAGE as usize]);
    forge.set_orphaned();
    drop(forge);
    unfinish(&seg);
    let cache = builder(segments.path())
        .build()
        .expect("a forged mask fails no build");
    eprintln!("{:?}", cache.adoption());
    assert_eq!(read_all(&cache, &data.path().join("a")), bytes);
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The identity a slot records (`segment::identity_of`): device, inode, birth time (or
/// change time).
fn identity_of(meta: &std::fs::Metadata) -> (u64, u64, u64) {
    let born = meta
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or_else(
            || (meta.ctime() as u64).wrapping_mul(1_000_000_000) + meta.ctime_nsec() as u64,
            |d| d.as_nanos() as u64,
        );
    (meta.dev(), meta.ino(), born)
}

/// The descriptor (read and write) of `cache`'s segment, found while /proc/self/fd is
/// readable.
fn segment_fd(cache: &Cache) -> i32 {
    let seg_path = cache.segment_path().expect("a segment");
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|&fd| {
            // SAFETY: fcntl F_GETFL on a descriptor number.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
            flags >= 0
                && flags & libc::O_ACCMODE == libc::O_RDWR
                && std::fs::read_link(format!("/proc/self/fd/{fd}")).ok() == Some(seg_path.clone())
        })
        .expect("the segment's descriptor")
}

/// Drops every privilege of a root process: no supplementary groups, gid and uid nobody's.
fn become_nobody() {
    // SAFETY: setgroups, setgid and setuid take integers; checked.
    unsafe {
        assert_eq!(libc::setgroups(0, std::ptr::null()), 0);
        assert_eq!(libc::setgid(NOBODY), 0);
        assert_eq!(libc::setuid(NOBODY), 0);
    }
}

/// The root children (module docs): `spec` is "<segment dir> <data dir> <root-only file>"
/// (`a_root_process_that_drops_privileges_cannot_write_a_root_only_file`), or one of
/// `serve_child`'s or `unprivileged_child`'s, by its first word.
fn child(spec: &str) {
    if let Some(rest) = spec.strip_prefix("serve ") {
        return serve_child(rest);
    }
    if let Some(rest) = spec.strip_prefix("unprivileged ") {
        return unprivileged_child(rest);
    }
    if let Some(rest) = spec.strip_prefix("dirty ") {
        return dirty_child(rest);
    }
    let mut parts = spec.split(' ');
    let (segments, data, secret) = (
        PathBuf::from(parts.next().unwrap()),
        PathBuf::from(parts.next().unwrap()),
        PathBuf::from(parts.next().unwrap()),
    );
    let cache = builder(&segments)
        .capacity_bytes(16 << 20)
        .dirty_expire(Duration::from_secs(600))
        .build()
        .expect("child: a cache");
    let written = data.join("written");
    let file = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&written)
        .expect("child: open for writing");
    file.write_at(&content(6, 8192), 0).expect("child: write");
    let fd = segment_fd(&cache);
    harness::say(&format!("keeper {}", cache.keeper_pid().unwrap()));
    become_nobody();
    // SAFETY: the descriptor is the segment's, kept by this process; the File is leaked
    // (never closed), as the cache still holds it.
    let forge = Forge::over(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) });
    let meta = std::fs::metadata(&secret).expect("child: stat the root-only file as nobody");
    let (dev, ino, born) = identity_of(&meta);
    // A slot naming the root-only file, opened for writing (as the forger says).
    let id = 100;
    let at = forge.slot_at(id);
    forge.set_slot_bytes(id, &[0u8; SLOT_BYTES as usize]);
    forge.put_u64(at + SLOT_DEV, dev);
    forge.put_u64(at + SLOT_INO, ino);
    forge.put_u64(at + SLOT_BORN, born);
    forge.put_u64(at + SLOT_SIZE, u64::MAX);
    forge.put_u64(at + forge.path_len_at - 8, 1); // opened for writing (layout 3)
    let path = secret.as_os_str().as_bytes();
    forge.put_u64(at + forge.path_len_at, path.len() as u64);
    forge
        .file
        .write_all_at(path, at + forge.path_len_at + 8)
        .unwrap();
    forge.put_u64(at + SLOT_SEQ, 2);
    // A dirty frame of it: the arena's last frame, under writeback (written whole).
    let frame = forge.frame_count - 1;
    forge.set_entry(frame, UPTODATE | WRITEBACK, id, 0);
    forge.write_frame(frame, &[0xEE; PAGE as usize]);
    // The keeper's ftruncate of the file it does hold fails: a size past any file's end.
    let w = forge.slot_of(&written);
    forge.put_u64(forge.slot_at(w) + SLOT_SIZE, u64::MAX - PAGE);
    std::mem::forget(forge);
    harness::say("forged");
    // Dies without dropping the cache: the keeper writes back.
    std::process::exit(0);
}

/// Runs a forging root child (`child`) with `spec` to its end: it says its keeper's pid,
/// then "forged"; then waits for that keeper to exit.
fn run_forging_child(spec: &str) {
    let mut child = harness::Child::spawn(CHILD_ENV, spec);
    let line = child.next_line(READY_WAIT_MAX, "keeper <pid>");
    let keeper: u32 = line
        .strip_prefix("keeper ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("a bad line from the child: {line:?}"));
    assert_eq!(child.next_line(READY_WAIT_MAX, "forged"), "forged");
    child.rest_of_lines();
    harness::wait_for_exit(keeper, KEEPER_WAIT_MAX, "the keeper of the forging child");
}

fn a_root_process_that_drops_privileges_cannot_write_a_root_only_file() {
    if !is_root() {
        eprintln!("not root: the privilege-dropping root process is not tried");
        return;
    }
    harness::become_subreaper();
    // Segments live on tmpfs (a disk directory is refused).
    let segments = tempfile::tempdir_in("/dev/shm").unwrap();
    std::fs::set_permissions(segments.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = data.path().join("root-only");
    let secret_bytes = content(7, 3 * PAGE as usize);
    std::fs::write(&secret, &secret_bytes).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    run_forging_child(&format!(
        "{} {} {}",
        segments.path().display(),
        data.path().display(),
        secret.display()
    ));
    assert!(
        !is_vouched(&segments.path().join(NAME)),
        "the forged segment is still there, vouched for"
    );
    // The next root cache of that name.
    let cache = builder(segments.path())
        .build()
        .expect("the next root cache builds");
    let adoption = cache.adoption().cloned();
    eprintln!("{adoption:?}");
    assert_eq!(
        std::fs::read(&secret).unwrap(),
        secret_bytes,
        "a root-only file was written from a segment a dropped process forged"
    );
    // The keeper's witness took the name away at the child's `setuid` (no segment to
    // adopt); without a witness, the recovery would have replaced the segment.
    assert!(adoption.as_ref().is_none_or(|a| a.replaced), "{adoption:?}");
    assert_eq!(read_all(&cache, &secret), secret_bytes);
}

fn the_keeper_runs_without_privileges() {
    harness::become_subreaper();
    let (segments, _data) = dirs();
    let cache = builder(segments.path()).build().unwrap();
    let keeper = cache.keeper_pid().expect("a keeper");
    let status = std::fs::read_to_string(format!("/proc/{keeper}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|| panic!("no {name} in the keeper's status"))
    };
    assert_eq!(field("NoNewPrivs:"), "1", "{status}");
    for caps in ["CapEff:", "CapPrm:", "CapInh:", "CapBnd:", "CapAmb:"] {
        assert_eq!(
            u64::from_str_radix(&field(caps), 16).unwrap(),
            0,
            "{caps} of the keeper: {status}"
        );
    }
    drop(cache);
    harness::wait_for_exit(keeper, KEEPER_WAIT_MAX, "the keeper");
}

/// A root-only file in `data` (0755) of `pages` pages, mode 0600; returns its path and bytes.
fn root_only_file(data: &Path, pages: usize) -> (PathBuf, Vec<u8>) {
    std::fs::set_permissions(data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = data.join("root-only");
    let bytes = content(9, pages * PAGE as usize);
    std::fs::write(&secret, &bytes).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    past_the_stamp_tick();
    (secret, bytes)
}

/// Waits past the file times' clock tick (`STAMP_TICK_NS`, 20 ms), so that a stamp taken
/// from now on proves the file unchanged (an adoption keeps its pages): a fixed wait on
/// the clock, which decides no race.
fn past_the_stamp_tick() {
    std::thread::sleep(Duration::from_millis(50));
}

/// The serving root child: `spec` is "<segment dir> <root-only file> <kill|drop>". It
/// reads the root-only file through a named cache (its pages cached clean), drops its
/// privileges keeping the segment's descriptor, overwrites the cached frame of the file's
/// middle page with 0xEE (a page the adoption's samples most likely miss: the first and
/// last are always sampled), and dies (SIGKILL) or drops its cache and exits.
fn serve_child(spec: &str) {
    let parts: Vec<&str> = spec.split(' ').collect();
    let (segments, secret, how) = (Path::new(parts[0]), Path::new(parts[1]), parts[2]);
    let cache = builder(segments).build().expect("child: a cache");
    let bytes = read_all(&cache, secret);
    let fd = segment_fd(&cache);
    harness::say(&format!("keeper {}", cache.keeper_pid().unwrap()));
    become_nobody();
    // SAFETY: the descriptor is the segment's, kept by this process; the File is leaked
    // (never closed), as the cache still holds it.
    let forge = Forge::over(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) });
    let id = forge.slot_of(secret);
    let page = bytes.len() as u64 / PAGE / 2;
    let frame = forge
        .frame_of(id, page)
        .expect("child: the middle page is cached");
    forge.write_frame(frame, &[0xEE; PAGE as usize]);
    std::mem::forget(forge);
    harness::say("forged");
    if how == "kill" {
        // SAFETY: kill takes integers; it does not return.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
    drop(cache);
    std::process::exit(0);
}

/// Issue 42's last boundary gap: a root owner reads a root-only file through a named
/// cache, drops its privileges keeping the segment, forges a clean frame of that file and
/// dies (or drops its cache and exits). Root's next cache of that name adopted the segment
/// and served the forged bytes for the root-only file; now the keeper's witness saw the
/// owner's `setuid` and took the segment's name away: the next cache starts cold and reads
/// the disk's bytes.
fn a_root_process_that_drops_privileges_cannot_make_root_s_next_cache_serve_forged_bytes() {
    if !is_root() {
        eprintln!("not root: the privilege-dropping root process is not tried");
        return;
    }
    harness::become_subreaper();
    for how in ["kill", "drop"] {
        let (segments, data) = dirs();
        let (secret, secret_bytes) = root_only_file(data.path(), 64);
        run_forging_child(&format!(
            "serve {} {} {how}",
            segments.path().display(),
            secret.display()
        ));
        // Deterministic, whatever pages the adoption's check samples: the keeper (exited)
        // left no segment of that name that it vouches for.
        assert!(
            !is_vouched(&segments.path().join(NAME)),
            "{how}: the forged segment is still there, vouched for"
        );
        let cache = builder(segments.path())
            .build()
            .expect("root's next cache builds");
        eprintln!("{how}: {:?}", cache.adoption());
        let read = read_all(&cache, &secret);
        let wrong = (0..secret_bytes.len()).find(|&at| read.get(at) != secret_bytes.get(at));
        assert_eq!(
            wrong, None,
            "{how}: root's next cache served bytes a privilege-dropped process forged \
             (the first wrong byte's offset)"
        );
        assert!(
            cache
                .adoption()
                .is_none_or(|a| a.replaced || a.pages_kept == 0),
            "{how}: the forged segment was adopted: {:?}",
            cache.adoption()
        );
        drop(cache);
    }
}

/// The witness watches its owner only: a helper process that `setuid`s while the owner
/// lives leaves the owner's segment kept (the next cache adopts it warm).
fn another_process_s_setuid_leaves_the_owner_s_segment_kept() {
    if !is_root() {
        eprintln!("not root: no other process can change its credentials");
        return;
    }
    harness::become_subreaper();
    let (segments, data) = dirs();
    let (secret, secret_bytes) = root_only_file(data.path(), 16);
    let cache = builder(segments.path()).build().unwrap();
    assert_eq!(cache.segment_not_kept_because(), None);
    assert_eq!(read_all(&cache, &secret), secret_bytes);
    // SAFETY: the child calls only async-signal-safe functions (setuid, _exit).
    let helper = unsafe { libc::fork() };
    if helper == 0 {
        // SAFETY: as above.
        unsafe { libc::_exit(i32::from(libc::setuid(NOBODY) != 0)) };
    }
    assert_eq!(exit_code_of(helper), 0, "the helper's setuid");
    dropped_then_adopted_warm(cache, segments.path(), &secret, &secret_bytes);
}

/// Waits for our own forked child `pid`; its exit code (-1 if it did not exit).
fn exit_code_of(pid: libc::pid_t) -> i32 {
    assert!(pid > 0, "fork");
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    }
}

/// Drops `cache` cleanly, waits for its keeper, and checks that the next cache of its
/// name in `segments` adopts the segment warm and reads `file` as `bytes`.
fn dropped_then_adopted_warm(cache: Cache, segments: &Path, file: &Path, bytes: &[u8]) {
    let keeper = cache.keeper_pid().unwrap();
    drop(cache);
    harness::wait_for_exit(keeper, KEEPER_WAIT_MAX, "the keeper");
    let cache = builder(segments).build().unwrap();
    let adoption = cache.adoption().cloned().expect("the segment was kept");
    assert!(
        !adoption.replaced && adoption.pages_kept > 0,
        "{adoption:?}"
    );
    assert_eq!(read_all(&cache, file), bytes);
}

/// A child forked by the owner (before it could drop privileges) inherits no way into the
/// segment: the segment's descriptor number is `/dev/null`, open read-only, and so are
/// the owner lock's and the keeper link's (issue 42 review, finding A: a child with the
/// link could register its own file or end the line), and the segment's mapping is not
/// there. Then the owner's cache, dropped cleanly, is adopted
/// warm with the file's bytes.
fn a_forked_child_has_neither_the_segment_s_descriptor_nor_its_mapping() {
    if !is_root() {
        eprintln!("not root: the child cannot drop privileges");
        return;
    }
    harness::become_subreaper();
    let (segments, data) = dirs();
    let (secret, secret_bytes) = root_only_file(data.path(), 16);
    let cache = builder(segments.path()).build().unwrap();
    assert_eq!(read_all(&cache, &secret), secret_bytes);
    let fd = segment_fd(&cache);
    let seg_path = cache.segment_path().unwrap();
    // Every descriptor of the owner into the segment (its file, the owner lock's second
    // open file) or to its keeper (the link's socket: the test makes no other socket).
    let others: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&other| {
            std::fs::read_link(format!("/proc/self/fd/{other}")).is_ok_and(|to| {
                to == seg_path || to.to_str().is_some_and(|to| to.starts_with("socket:"))
            })
        })
        .collect();
    assert!(
        others.len() >= 3,
        "the segment, the owner lock and the link: {others:?}"
    );
    // The mapping's first address, from the owner's maps.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let base = maps
        .lines()
        .find(|l| l.ends_with(seg_path.to_str().unwrap()))
        .and_then(|l| usize::from_str_radix(l.split('-').next()?, 16).ok())
        .expect("the segment is mapped in the owner");
    // SAFETY: all-zero is a valid stat, filled by stat.
    let mut null: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a live out-pointer.
    assert_eq!(unsafe { libc::stat(c"/dev/null".as_ptr(), &mut null) }, 0);
    // SAFETY: the child calls only async-signal-safe functions (fstat, setuid, write,
    // mmap, mincore, _exit) and allocates nothing; its exit code says what failed.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: as above.
        let code = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            let mut vec = [0u8; 1];
            let is_null = |fd: i32, st: &mut libc::stat| {
                libc::fstat(fd, st) == 0
                    && (st.st_rdev, st.st_mode & libc::S_IFMT) == (null.st_rdev, libc::S_IFCHR)
            };
            if libc::fstat(fd, &mut st) != 0 {
                10
            } else if (st.st_rdev, st.st_mode & libc::S_IFMT) != (null.st_rdev, libc::S_IFCHR) {
                11 // the descriptor is still the segment's
            } else if !others.iter().all(|&other| is_null(other, &mut st)) {
                16 // the owner lock's file or the keeper link's socket is still there
            } else if libc::setuid(NOBODY) != 0 {
                12
            } else if libc::write(fd, [0xEEu8; 64].as_ptr().cast(), 64) != -1 {
                13 // /dev/null, open read-only, takes no write
            } else if libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            ) != libc::MAP_FAILED
            {
                14 // /dev/null cannot be mapped
            } else if libc::mincore(base as *mut libc::c_void, 4096, vec.as_mut_ptr()) == 0 {
                15 // the segment's mapping is still there
            } else {
                0
            }
        };
        // SAFETY: as above.
        unsafe { libc::_exit(code) };
    }
    let code = exit_code_of(child);
    assert_eq!(
        code, 0,
        "the forked child found a way into the segment (see the test)"
    );
    dropped_then_adopted_warm(cache, segments.path(), &secret, &secret_bytes);
}

/// The test lever `FOLIO_KEEPER_NO_WITNESS` makes the keeper's subscription "fail": a
/// root owner (who could change credentials) gets a cache that works, says why its segment
/// is not kept, and whose name is gone at once; the next cache starts cold.
fn without_a_witness_a_privileged_owner_s_segment_is_not_kept() {
    if !is_root() {
        eprintln!("not root: the owner cannot change credentials, and needs no witness");
        return;
    }
    harness::become_subreaper();
    let (segments, data) = dirs();
    let (secret, secret_bytes) = root_only_file(data.path(), 16);
    std::env::set_var("FOLIO_KEEPER_NO_WITNESS", "1");
    let built = builder(segments.path()).build();
    std::env::remove_var("FOLIO_KEEPER_NO_WITNESS");
    let cache = built.unwrap();
    let why = cache.segment_not_kept_because().expect("a reason");
    assert!(why.contains("FOLIO_KEEPER_NO_WITNESS"), "{why}");
    // Taken away before the build returned (the keeper's start).
    assert!(
        !segments.path().join(NAME).exists(),
        "the name is still there"
    );
    assert_eq!(read_all(&cache, &secret), secret_bytes);
    let keeper = cache.keeper_pid().unwrap();
    drop(cache);
    harness::wait_for_exit(keeper, KEEPER_WAIT_MAX, "the keeper");
    let cache = builder(segments.path()).build().unwrap();
    assert!(cache.adoption().is_none(), "{:?}", cache.adoption());
    assert_eq!(read_all(&cache, &secret), secret_bytes);
}

/// The unprivileged child: `spec` is "<segment dir> <data file>". Nobody already (it
/// dropped its privileges before its first cache), with the lever set, it builds a cache
/// in its own directory, reads the file, drops it, and builds again: warm.
fn unprivileged_child(spec: &str) {
    let parts: Vec<&str> = spec.split(' ').collect();
    let (segments, file) = (Path::new(parts[0]), Path::new(parts[1]));
    harness::become_subreaper();
    become_nobody();
    std::env::set_var("FOLIO_KEEPER_NO_WITNESS", "1");
    let cache = builder(segments).build().expect("child: a cache");
    assert_eq!(cache.segment_not_kept_because(), None);
    let bytes = read_all(&cache, file);
    let keeper = cache.keeper_pid().unwrap();
    drop(cache);
    harness::wait_for_exit(keeper, KEEPER_WAIT_MAX, "child: the keeper");
    let cache = builder(segments).build().expect("child: the next cache");
    let adoption = cache
        .adoption()
        .cloned()
        .expect("child: the segment was kept");
    assert!(
        !adoption.replaced && adoption.pages_kept > 0,
        "{adoption:?}"
    );
    assert_eq!(read_all(&cache, file), bytes);
    harness::say("warm");
}

/// An owner that cannot change its credentials (nobody's, no capability) needs no witness:
/// with the lever set, its segment is still kept and its next cache warm.
fn an_owner_that_cannot_change_credentials_needs_no_witness() {
    if !is_root() {
        eprintln!("not root: the test's child cannot become another user");
        return;
    }
    harness::become_subreaper();
    let segments = tempfile::tempdir_in("/dev/shm").unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = data.path().join("public");
    std::fs::write(&file, content(11, 16 * PAGE as usize)).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    past_the_stamp_tick();
    std::fs::set_permissions(segments.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let dir = std::ffi::CString::new(segments.path().as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; checked.
    assert_eq!(unsafe { libc::chown(dir.as_ptr(), NOBODY, NOBODY) }, 0);
    let mut child = harness::Child::spawn(
        CHILD_ENV,
        &format!(
            "unprivileged {} {}",
            segments.path().display(),
            file.display()
        ),
    );
    assert_eq!(child.next_line(KEEPER_WAIT_MAX, "warm"), "warm");
    child.rest_of_lines();
}

/// The vouch mark (`S_ISVTX`): a keeper set it, and no witness took it back.
const VOUCHED: u32 = 0o1000;

/// Whether a segment file is at `path`, vouched for by its keeper.
fn is_vouched(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.mode() & VOUCHED != 0)
}

/// Takes the vouch mark off the segment at `path`, as a keeper that could not vouch for
/// it (or a witness that saw its owner's `setuid`) leaves it.
fn unvouch(path: &Path) {
    let mode = std::fs::metadata(path).unwrap().mode() & 0o7777;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & !VOUCHED)).unwrap();
    assert!(!is_vouched(path));
}

/// Issue 42 review, B and C: a segment whose keeper did not vouch for it (its owner's
/// ids changed before the keeper's fork, or a witness saw a change and took the mark
/// back, whatever became of the name) is replaced, never adopted; one vouched for is
/// adopted warm (the control).
fn a_segment_no_keeper_vouched_for_is_replaced_not_adopted() {
    harness::become_subreaper();
    for vouched in [true, false] {
        let (segments, data) = dirs();
        let bytes = content(14, 16 * PAGE as usize);
        let seg = first_life(segments.path(), data.path(), &[("file", bytes.clone())]);
        assert!(is_vouched(&seg), "the keeper vouched for a kept segment");
        if !vouched {
            unvouch(&seg);
        }
        let cache = builder(segments.path()).build().unwrap();
        let adoption = cache.adoption().cloned().expect("a segment of the name");
        if vouched {
            assert!(
                !adoption.replaced && adoption.pages_kept > 0,
                "{adoption:?}"
            );
        } else {
            assert!(
                adoption.replaced && adoption.pages_kept == 0,
                "{adoption:?}"
            );
            assert!(
                adoption
                    .replaced_because
                    .as_deref()
                    .is_some_and(|why| why.contains("vouched")),
                "{adoption:?}"
            );
        }
        assert_eq!(read_all(&cache, &data.path().join("file")), bytes);
        // The new owner's keeper vouches for the segment it took or made.
        assert!(is_vouched(&seg));
        let keeper = cache.keeper_pid().unwrap();
        drop(cache);
        harness::wait_for_exit(keeper, KEEPER_WAIT_MAX, "the keeper");
    }
}

/// The dirty child: `spec` is "<segment dir> <data file>". It writes `content(12, ..)`
/// over the file through a named cache (dirty, not written back for 10 minutes), says its
/// keeper's pid, and waits to be killed.
fn dirty_child(spec: &str) {
    let parts: Vec<&str> = spec.split(' ').collect();
    let (segments, file) = (Path::new(parts[0]), Path::new(parts[1]));
    let cache = builder(segments)
        .dirty_expire(Duration::from_secs(600))
        .build()
        .expect("child: a cache");
    let handle = cache
        .open_options()
        .write(true)
        .open(file)
        .expect("child: open for writing");
    handle
        .write_at(&content(12, 4 * PAGE as usize), 0)
        .expect("child: write");
    harness::say(&format!("keeper {}", cache.keeper_pid().unwrap()));
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// Issue 42 review, B and C: a killed keeper's orphan (its owner killed too) whose vouch
/// mark is gone is not recovered by path by root: its dirty pages are refused, the file
/// keeps the disk's bytes, and the next cache of the name replaces the segment. With the
/// mark (the control: the keeper set it at its start), root's recovery writes them.
fn an_unvouched_orphan_is_not_recovered_by_path() {
    if !is_root() {
        eprintln!("not root: a recovery by this user writes only its own files anyway");
        return;
    }
    harness::become_subreaper();
    for vouched in [true, false] {
        let (segments, data) = dirs();
        let file = data.path().join("file");
        let on_disk = content(13, 4 * PAGE as usize);
        std::fs::write(&file, &on_disk).unwrap();
        let mut child = harness::Child::spawn(
            CHILD_ENV,
            &format!("dirty {} {}", segments.path().display(), file.display()),
        );
        let line = child.next_line(READY_WAIT_MAX, "keeper <pid>");
        let keeper: u32 = line
            .strip_prefix("keeper ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("a bad line from the child: {line:?}"));
        // The keeper first (it never wrote anything), then its owner.
        // SAFETY: kill with a pid the child said; SIGKILL ends it.
        assert_eq!(unsafe { libc::kill(keeper as i32, libc::SIGKILL) }, 0);
        harness::wait_for_exit(keeper, KEEPER_WAIT_MAX, "the killed keeper");
        child.kill();
        child.rest_of_lines();
        let seg = segments.path().join(NAME);
        assert!(
            is_vouched(&seg),
            "a killed keeper's orphan stays vouched for"
        );
        if !vouched {
            unvouch(&seg);
        }
        let recovered = folio::recover_segment(&seg).expect("a recovery");
        eprintln!("vouched {vouched}: {recovered:?}");
        if vouched {
            assert_eq!(recovered.files_refused, 0, "{recovered:?}");
            assert_eq!(
                std::fs::read(&file).unwrap(),
                content(12, 4 * PAGE as usize)
            );
        } else {
            assert_eq!(recovered.files_refused, 1, "{recovered:?}");
            assert!(
                recovered
                    .refused_because
                    .as_deref()
                    .is_some_and(|why| why.contains("vouched")),
                "{recovered:?}"
            );
            assert_eq!(
                std::fs::read(&file).unwrap(),
                on_disk,
                "written by path from an unvouched segment"
            );
            let cache = builder(segments.path()).build().unwrap();
            assert!(
                cache.adoption().is_some_and(|a| a.replaced),
                "{:?}",
                cache.adoption()
            );
            assert_eq!(read_all(&cache, &file), on_disk);
        }
    }
}

/// Takes the finished mark (the owner's execute bit) off the segment at `path`, as a
/// killed keeper leaves it: the vouch mark its keeper set at its start stays.
fn unfinish(path: &Path) {
    let mode = std::fs::metadata(path).unwrap().mode() & 0o7777;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & !0o100)).unwrap();
    assert!(
        is_vouched(path),
        "a killed keeper's segment stays vouched for"
    );
}
