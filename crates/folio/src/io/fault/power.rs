//! The fault backend's power-loss model: what each file holds that no flush has vouched
//! for, and what a power cut leaves of it (the model is written in `fault/mod.rs`).
//!
//! Design: per file (by device and inode), per 4 KiB block that a write touched since the
//! last flush that covered it, a [`Block`] keeps
//! - `durable`: the block's bytes as the last covering flush left them (the pre-image,
//!   read from the file before the first such write was passed on);
//! - `versions`: the bytes of every write to it that completed since, in completion order
//!   (read back from the file when the write completes), each with a sequence number;
//! - `in_flight`: writes to it passed on and not completed yet, and short writes whose
//!   caller has not finished writing their rest (the rest is recorded as a write of its
//!   own: `mod.rs`, the witness).
//!
//! ```text
//!   write submitted ──> Block::durable read (first write only), in_flight += 1
//!   write completed ──> in_flight -= 1; Ok(n): a Version { seq } per block in the first n bytes
//!                       (Ok(n) short: the blocks past n stay in flight until `end_rest`)
//!   flush submitted ──> mark = next_seq          (it covers the versions before it)
//!   flush Ok        ──> per block: durable = last version with seq < mark; those dropped;
//!                       a block with no version and nothing in flight is forgotten
//!   power_loss(seed) ─> per write: kept, lost or torn (per block); each block gets its
//!                       latest kept version, or `durable`; then everything is forgotten
//! ```
//!
//! The file is read and rewritten through its own descriptor, opened again from
//! `/proc/self/fd` without O_DIRECT (so any buffer will do), read-write where the file's
//! mode allows it. A power loss rewrites only within the file's current length: the model
//! has no size (the cache makes a size durable with an `FlushKind::All` flush after
//! `set_len`).
//!
//! Protection: the fault backend's `Faults::unflushed` mutex; held for the pre-image reads
//! and read-backs (short buffered reads of a test backend), never while a completion runs
//! or the inner backend is called.
//!
//! Limits: at most `UNFLUSHED_BYTES_MAX` bytes held (pre-images and versions; asserted: a
//! test that writes more without flushing is not one this model serves). Versions between
//! the durable bytes and the latest kept are kept whole or not at all, per write.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File as StdFile, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

use super::simulation::mix;
use crate::io::backend::DIRECT_IO_ALIGN_BYTES;

/// The unit of the model: a power cut keeps or loses whole 4 KiB blocks.
pub const POWER_BLOCK_BYTES: usize = DIRECT_IO_ALIGN_BYTES;

/// Pre-images and versions held at most, over all files (module docs, limits).
const UNFLUSHED_BYTES_MAX: usize = 1 << 30;

/// A file by (device, inode).
pub(super) type FileId = (u64, u64);

/// What a power loss did, summed over every file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowerLoss {
    /// Blocks left with the latest bytes written to them.
    pub blocks_kept: u64,
    /// Blocks left with their durable bytes or an earlier write's (a lost or torn write).
    pub blocks_lost: u64,
}

/// Every file's blocks that no flush has vouched for.
#[derive(Default)]
pub(super) struct Unflushed {
    files: HashMap<FileId, FileRecord>,
    /// The sequence number of the next completed write.
    next_seq: u64,
    bytes_held: usize,
}

struct FileRecord {
    /// The file, opened again without O_DIRECT (module docs).
    file: StdFile,
    /// By block index (file offset / `POWER_BLOCK_BYTES`).
    blocks: BTreeMap<u64, Block>,
}

struct Block {
    durable: Box<[u8]>,
    versions: Vec<Version>,
    in_flight: u32,
}

struct Version {
    seq: u64,
    /// The write that stored it, for the per-write draw.
    write_offset_bytes: u64,
    write_len_bytes: usize,
    bytes: Box<[u8]>,
}

/// The blocks of `len_bytes` at `offset_bytes` (both aligned).
fn blocks_of(offset_bytes: u64, len_bytes: usize) -> std::ops::Range<u64> {
    let block = POWER_BLOCK_BYTES as u64;
    offset_bytes / block..(offset_bytes + len_bytes as u64).div_ceil(block)
}

/// Reads block `index` of `file`: zeros past its end.
fn read_block(file: &StdFile, index: u64) -> io::Result<Box<[u8]>> {
    let mut bytes = vec![0u8; POWER_BLOCK_BYTES].into_boxed_slice();
    let mut done = 0;
    while done < POWER_BLOCK_BYTES {
        let at = index * POWER_BLOCK_BYTES as u64 + done as u64;
        match file.read_at(&mut bytes[done..], at) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(bytes)
}

/// `file` opened again through `/proc/self/fd`, without O_DIRECT: read-write if its mode
/// allows, else read-only.
fn reopen(file: &StdFile) -> io::Result<StdFile> {
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .or_else(|_| OpenOptions::new().read(true).open(&path))
}

impl Unflushed {
    /// A write of `len_bytes` at `offset_bytes` of `file` is about to be passed on: keeps
    /// the durable bytes of each block it touches for the first time since its last
    /// covering flush, and counts it in flight on each.
    ///
    /// Context: the caller holds `Faults::unflushed`; reads the file (buffered).
    pub fn before_write(
        &mut self,
        file: &StdFile,
        id: FileId,
        offset_bytes: u64,
        len_bytes: usize,
    ) {
        let record = self.files.entry(id).or_insert_with(|| FileRecord {
            file: reopen(file)
                .unwrap_or_else(|error| panic!("power-loss model: reopening a file: {error}")),
            blocks: BTreeMap::new(),
        });
        for index in blocks_of(offset_bytes, len_bytes) {
            if let Some(block) = record.blocks.get_mut(&index) {
                block.in_flight += 1;
                continue;
            }
            let durable = read_block(&record.file, index)
                .unwrap_or_else(|error| panic!("power-loss model: reading a pre-image: {error}"));
            self.bytes_held += POWER_BLOCK_BYTES;
            record.blocks.insert(
                index,
                Block {
                    durable,
                    versions: Vec::new(),
                    in_flight: 1,
                },
            );
        }
        assert!(
            self.bytes_held <= UNFLUSHED_BYTES_MAX,
            "power-loss model: more than {UNFLUSHED_BYTES_MAX} bytes written and not flushed"
        );
    }

    /// The write `before_write` announced completed with `result`: each block of its first
    /// `n` bytes (whole blocks) gets a version (read back from the file), and is no longer
    /// in flight for it. The blocks past them stay in flight if `rest` is
    /// [`Rest::CallerWrites`] and the write was short (`Ok(n)`, `n < len_bytes`), until
    /// [`end_rest`](Self::end_rest); otherwise they are no longer in flight either.
    ///
    /// Context: the caller holds `Faults::unflushed`; reads the file (buffered).
    pub fn after_write(
        &mut self,
        id: FileId,
        offset_bytes: u64,
        len_bytes: usize,
        result: &io::Result<usize>,
        rest: Rest,
    ) {
        let written_bytes = *result.as_ref().unwrap_or(&0);
        let written = blocks_of(
            offset_bytes,
            written_bytes / POWER_BLOCK_BYTES * POWER_BLOCK_BYTES,
        );
        let ended = match (rest, result) {
            (Rest::CallerWrites, Ok(n)) if *n < len_bytes => written.clone(),
            _ => blocks_of(offset_bytes, len_bytes),
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        let record = self
            .files
            .get_mut(&id)
            .expect("a completed write's file is recorded");
        for index in ended {
            let block = record
                .blocks
                .get_mut(&index)
                .expect("a write in flight keeps its blocks");
            assert!(block.in_flight > 0, "a write completed twice");
            block.in_flight -= 1;
            if written.contains(&index) {
                let bytes = read_block(&record.file, index)
                    .unwrap_or_else(|error| panic!("power-loss model: reading back: {error}"));
                self.bytes_held += POWER_BLOCK_BYTES;
                block.versions.push(Version {
                    seq,
                    write_offset_bytes: offset_bytes,
                    write_len_bytes: len_bytes,
                    bytes,
                });
            }
        }
    }

    /// The caller of a write that `after_write` (with [`Rest::CallerWrites`]) found short,
    /// `Ok(written_bytes)`, is done writing the rest: the blocks past the first
    /// `written_bytes` (whole blocks) are no longer in flight for it. What the caller wrote
    /// there was recorded as writes of their own (`is_recorded`, the witness in `mod.rs`).
    ///
    /// Context: the caller holds `Faults::unflushed`.
    pub fn end_rest(
        &mut self,
        id: FileId,
        offset_bytes: u64,
        len_bytes: usize,
        written_bytes: usize,
    ) {
        let all = blocks_of(offset_bytes, len_bytes);
        let head = blocks_of(
            offset_bytes,
            written_bytes / POWER_BLOCK_BYTES * POWER_BLOCK_BYTES,
        );
        let record = self
            .files
            .get_mut(&id)
            .expect("a write's rest in flight keeps its file");
        for index in head.end.max(all.start)..all.end {
            let block = record
                .blocks
                .get_mut(&index)
                .expect("a write's rest in flight keeps its blocks");
            assert!(block.in_flight > 0, "a write's rest ended twice");
            block.in_flight -= 1;
        }
    }

    /// Whether `id` has a record now: a block written since a flush last forgot it, or a
    /// write's rest in flight. The record holds the file open, so its (device, inode)
    /// names no other file meanwhile.
    pub fn is_recorded(&self, id: FileId) -> bool {
        self.files.contains_key(&id)
    }

    /// The mark a flush submitted now covers: every version recorded before it.
    pub fn flush_mark(&self) -> u64 {
        self.next_seq
    }

    /// A flush of `id` submitted at `mark` succeeded: the versions before the mark are
    /// durable.
    ///
    /// Context: the caller holds `Faults::unflushed`.
    pub fn after_flush(&mut self, id: FileId, mark: u64) {
        let Some(record) = self.files.get_mut(&id) else {
            return;
        };
        let mut freed_bytes = 0;
        record.blocks.retain(|_, block| {
            let covered = block.versions.partition_point(|v| v.seq < mark);
            if covered > 0 {
                let mut drained: Vec<Version> = block.versions.drain(..covered).collect();
                block.durable = drained.pop().expect("covered > 0").bytes;
                freed_bytes += (drained.len() + 1) * POWER_BLOCK_BYTES;
            }
            let keep = !block.versions.is_empty() || block.in_flight > 0;
            if !keep {
                freed_bytes += POWER_BLOCK_BYTES;
            }
            keep
        });
        self.bytes_held -= freed_bytes;
        if record.blocks.is_empty() {
            self.files.remove(&id);
        }
    }

    /// Cuts the power (module docs): rewrites every recorded block to what `seed` leaves
    /// of it, syncs each file, and forgets everything (what is on disk now is durable).
    ///
    /// Panics if a write is in flight: the caller quiesces the backend first.
    ///
    /// Context: the caller holds `Faults::unflushed`; writes and syncs the files.
    pub fn power_loss(&mut self, seed: u64) -> io::Result<PowerLoss> {
        let in_flight = self.files.values().flat_map(|r| r.blocks.values());
        assert!(
            in_flight.into_iter().all(|block| block.in_flight == 0),
            "power loss with a write in flight"
        );
        let mut outcome = PowerLoss::default();
        for record in self.files.values() {
            let len_bytes = record.file.metadata()?.len();
            for (&index, block) in &record.blocks {
                let kept = latest_kept(seed, index, &block.versions);
                let bytes = match kept {
                    Some(version) => &version.bytes,
                    None => &block.durable,
                };
                if kept.is_some_and(|v| std::ptr::eq(v, block.versions.last().expect("kept"))) {
                    outcome.blocks_kept += 1;
                } else {
                    outcome.blocks_lost += 1;
                }
                let at = index * POWER_BLOCK_BYTES as u64;
                // Within the file's length: the model has no size (module docs).
                let within = len_bytes.saturating_sub(at).min(bytes.len() as u64) as usize;
                record.file.write_all_at(&bytes[..within], at)?;
            }
            record.file.sync_all()?;
        }
        *self = Unflushed {
            next_seq: self.next_seq,
            ..Unflushed::default()
        };
        Ok(outcome)
    }
}

/// Who finishes a write that stored only its first bytes (`Unflushed::after_write`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Rest {
    /// The caller of the backend: its completion writes the rest itself (the cache does,
    /// through `io::sync::transfer`), so the rest's blocks stay in flight until it is done.
    CallerWrites,
    /// Nobody: the rest was not written.
    Dropped,
}

/// The fate `seed` draws for a write, the same in every block it covers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum WriteFate {
    Kept,
    Lost,
    /// Kept in some blocks, lost in others: each block draws.
    Torn,
}

/// The latest of `versions` (block `index`'s, oldest first) that survives `seed`, if any.
///
/// A write is named by (offset, length, occurrence), occurrence counting the earlier
/// versions of the same (offset, length) in the block: the same in every block the write
/// covers, and independent of completion timing across writes of other ranges.
fn latest_kept(seed: u64, index: u64, versions: &[Version]) -> Option<&Version> {
    let mut kept = None;
    for (position, version) in versions.iter().enumerate() {
        let occurrence = versions[..position]
            .iter()
            .filter(|v| {
                (v.write_offset_bytes, v.write_len_bytes)
                    == (version.write_offset_bytes, version.write_len_bytes)
            })
            .count() as u64;
        let mut key = mix(seed ^ 0x504F_5745_524C_4F53);
        key = mix(key ^ version.write_offset_bytes);
        key = mix(key ^ version.write_len_bytes as u64);
        key = mix(key ^ occurrence);
        let fate = match key % 3 {
            0 => WriteFate::Kept,
            1 => WriteFate::Lost,
            _ => WriteFate::Torn,
        };
        let survives = match fate {
            WriteFate::Kept => true,
            WriteFate::Lost => false,
            WriteFate::Torn => mix(key ^ index) % 2 == 0,
        };
        if survives {
            kept = Some(version);
        }
    }
    kept
}
