//! Stamped blocks: the content model of the random-write workloads (`randwrite`,
//! `randrw`), under which every read, and the file on disk after a run, can be checked.
//!
//! Design: the file starts as a data file (`data`: every 8-byte word holds its own offset).
//! A 4 KiB block a workload writes carries a [`Stamp`] that names the write: word 0 is the
//! block's offset with the top bit set ([`WRITTEN_BIT`]), word 1 the stamp, and every
//! other word its own offset xor a key derived from the stamp. So a block holds either the
//! original bytes or exactly one stamped version; a block torn between two versions, or
//! one written at the wrong offset, fails the check.
//!
//! Who writes where: job `j` of `J` writes only the blocks `b` with `b % J == j`, so each
//! block has one writer and the file's final state is known exactly ([`Model`]); its
//! write number `seq` goes to the block [`Stamp::block`] computes from the stamp alone
//! (a hash). So the rule every read is checked by needs no shared state: a block holds
//! the original data, or a stamp whose block is this one — a version that was written to
//! this block ([`check`]). After a run, a [`Model`] of the last stamp each block was given
//! checks the file on disk exactly ([`check_exact`]).
//!
//! Protection: a [`Model`]'s entries are relaxed atomics, each stored only by the one job
//! that owns its block; the check reads them after every job was joined (the join orders
//! it after every store).
//!
//! Limits: files up to 2^62 bytes (word 0's top bit is the flag), at most 255 jobs and
//! 65,535 turns (a turn: one measurement), 2^32 writes per job and turn. The rule accepts
//! any version ever written to a block, not only the latest: which of two racing accesses
//! comes first is the system's choice; the exact check is after the run, on disk.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::data;

/// Bytes of one block: the unit the workloads write and read.
pub const BLOCK_BYTES: usize = 4096;

/// Set in word 0 of a written block (an offset never has it).
pub const WRITTEN_BIT: u64 = 1 << 63;

/// A write's name: `turn` (16 bits, from 1) | `jobs` (8) | `job` (8) | `seq` (32).
/// `Stamp::ORIGINAL` (0) is the data file's own content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stamp(pub u64);

impl Stamp {
    /// The block as the data file was generated.
    pub const ORIGINAL: Stamp = Stamp(0);

    /// Write `seq` of job `job` of `jobs` in turn `turn` (>= 1).
    pub fn new(turn: u16, jobs: u8, job: u8, seq: u32) -> Stamp {
        assert!(turn >= 1 && job < jobs, "stamp {turn}/{job} of {jobs}");
        Stamp(u64::from(turn) << 48 | u64::from(jobs) << 40 | u64::from(job) << 32 | u64::from(seq))
    }

    fn jobs(self) -> u64 {
        (self.0 >> 40) & 0xff
    }

    fn job(self) -> u64 {
        (self.0 >> 32) & 0xff
    }

    /// The block (of a file of `blocks`) this write goes to: one of its job's own blocks,
    /// by a hash of the stamp; `None` if the stamp is malformed or its job owns no block.
    pub fn block(self, blocks: u64) -> Option<u64> {
        let (jobs, job) = (self.jobs(), self.job());
        if self.0 >> 48 == 0 || job >= jobs {
            return None;
        }
        let owned = own_blocks(blocks, jobs, job);
        if owned == 0 {
            return None;
        }
        let k = ((u128::from(mix(self.0)) * u128::from(owned)) >> 64) as u64;
        Some(job + jobs * k)
    }

    /// The key of the block's words 2.. (never 0).
    fn key(self) -> u64 {
        mix(self.0 ^ 0x5354_414d_5045_4421) | 1 << 62
    }
}

/// Blocks `b < blocks` with `b % jobs == job`.
pub fn own_blocks(blocks: u64, jobs: u64, job: u64) -> u64 {
    if job >= blocks {
        0
    } else {
        (blocks - job).div_ceil(jobs)
    }
}

/// splitmix64's finaliser.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `buf` (one block) with what block `block` holds after the write `stamp`.
pub fn fill(buf: &mut [u8], block: u64, stamp: Stamp) {
    assert_eq!(buf.len(), BLOCK_BYTES, "one block");
    let offset = block * BLOCK_BYTES as u64;
    if stamp == Stamp::ORIGINAL {
        data::fill(buf, offset);
        return;
    }
    buf[..8].copy_from_slice(&(offset | WRITTEN_BIT).to_le_bytes());
    buf[8..16].copy_from_slice(&stamp.0.to_le_bytes());
    data::fill_keyed(&mut buf[16..], offset + 16, stamp.key());
}

fn word(buf: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(buf[8 * i..8 * i + 8].try_into().expect("8 bytes"))
}

fn bad(block: u64, what: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "block {block} (byte offset {}): {what}",
            block * BLOCK_BYTES as u64
        ),
    )
}

/// Checks that `buf` holds a version of block `block` (of a file of `blocks`) that was
/// ever written there, or the original; returns its stamp.
///
/// Context: the read loop of the write workloads; one pass over the block.
pub fn check(buf: &[u8], block: u64, blocks: u64) -> io::Result<Stamp> {
    if buf.len() != BLOCK_BYTES {
        return Err(bad(
            block,
            format!("a read of {} bytes, not a block", buf.len()),
        ));
    }
    let offset = block * BLOCK_BYTES as u64;
    let first = word(buf, 0);
    if first == offset {
        data::verify(buf, offset).map_err(|m| bad(block, format!("the original, but {m}")))?;
        return Ok(Stamp::ORIGINAL);
    }
    if first != offset | WRITTEN_BIT {
        return Err(bad(
            block,
            format!("word 0 is {first:#x}: neither this block's offset nor its written mark"),
        ));
    }
    let stamp = Stamp(word(buf, 1));
    if stamp.block(blocks) != Some(block) {
        return Err(bad(
            block,
            format!("stamp {:#x} was never written to this block", stamp.0),
        ));
    }
    data::verify_keyed(&buf[16..], offset + 16, stamp.key())
        .map_err(|m| bad(block, format!("stamp {:#x}, torn or corrupt: {m}", stamp.0)))?;
    Ok(stamp)
}

/// Checks that `buf` holds block `block` exactly as the write `expected` left it.
pub fn check_exact(buf: &[u8], block: u64, blocks: u64, expected: Stamp) -> io::Result<()> {
    let found = check(buf, block, blocks)?;
    if found != expected {
        return Err(bad(
            block,
            format!(
                "holds stamp {:#x}, but the last write to it was {:#x}",
                found.0, expected.0
            ),
        ));
    }
    Ok(())
}

/// The last stamp each block of a file was given, where known: what the file must hold
/// after a run. Each block has one writer (its job), which stores after its write
/// returned; the check reads after every job was joined.
pub struct Model {
    stamps: Vec<AtomicU64>,
}

/// A block whose content is not known (never read nor written in this turn).
const UNKNOWN: u64 = u64::MAX;

impl Model {
    /// A model of `blocks` blocks, none known.
    pub fn unknown(blocks: u64) -> Model {
        Model {
            stamps: (0..blocks).map(|_| AtomicU64::new(UNKNOWN)).collect(),
        }
    }

    /// Block `block` now holds `stamp`.
    #[inline]
    pub fn set(&self, block: u64, stamp: Stamp) {
        self.stamps[block as usize].store(stamp.0, Ordering::Relaxed);
    }

    /// What block `block` must hold, if known.
    pub fn get(&self, block: u64) -> Option<Stamp> {
        match self.stamps[block as usize].load(Ordering::Relaxed) {
            UNKNOWN => None,
            s => Some(Stamp(s)),
        }
    }

    /// Blocks whose content the model knows.
    pub fn known(&self) -> u64 {
        self.stamps
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) != UNKNOWN)
            .count() as u64
    }

    /// Checks `buf` (blocks from `first_block` on) against the model: exactly where known,
    /// by the rule of [`check`] elsewhere. Returns the bytes checked.
    pub fn check_blocks(&self, buf: &[u8], first_block: u64) -> io::Result<u64> {
        let blocks = self.stamps.len() as u64;
        for (i, chunk) in buf.chunks(BLOCK_BYTES).enumerate() {
            let block = first_block + i as u64;
            match self.get(block) {
                Some(stamp) => check_exact(chunk, block, blocks, stamp)?,
                None => {
                    check(chunk, block, blocks)?;
                }
            }
        }
        Ok(buf.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_block_checks_and_names_its_stamp() {
        let blocks = 1000;
        let mut buf = vec![0u8; BLOCK_BYTES];
        for seq in 0..200 {
            let stamp = Stamp::new(3, 16, 5, seq);
            let block = stamp.block(blocks).unwrap();
            assert_eq!(block % 16, 5, "a job writes its own blocks");
            fill(&mut buf, block, stamp);
            assert_eq!(check(&buf, block, blocks).unwrap(), stamp);
            check_exact(&buf, block, blocks, stamp).unwrap();
            assert!(check_exact(&buf, block, blocks, Stamp::ORIGINAL).is_err());
            // The same bytes at another block are not a version of it.
            assert!(check(&buf, (block + 16) % blocks, blocks).is_err());
        }
        fill(&mut buf, 7, Stamp::ORIGINAL);
        assert_eq!(check(&buf, 7, blocks).unwrap(), Stamp::ORIGINAL);
    }

    #[test]
    fn torn_and_foreign_blocks_fail() {
        let blocks = 64;
        let a = Stamp::new(1, 4, 1, 0);
        let block = a.block(blocks).unwrap();
        let b = (1..)
            .map(|seq| Stamp::new(1, 4, 1, seq))
            .find(|s| s.block(blocks) == Some(block))
            .unwrap();
        let (mut x, mut y) = (vec![0u8; BLOCK_BYTES], vec![0u8; BLOCK_BYTES]);
        fill(&mut x, block, a);
        fill(&mut y, block, b);
        // Torn: the first half of one version, the second of another.
        let mut torn = x.clone();
        torn[2048..].copy_from_slice(&y[2048..]);
        assert!(check(&torn, block, blocks).is_err());
        // Half original, half written.
        fill(&mut y, block, Stamp::ORIGINAL);
        torn[2048..].copy_from_slice(&y[2048..]);
        assert!(check(&torn, block, blocks).is_err());
        // A stamp whose hash names another block (a write that never went here).
        let foreign = (0..)
            .map(|seq| Stamp::new(1, 4, 1, seq))
            .find(|s| s.block(blocks) != Some(block))
            .unwrap();
        x[8..16].copy_from_slice(&foreign.0.to_le_bytes());
        assert!(check(&x, block, blocks).is_err());
        // A malformed stamp (job past jobs, turn 0).
        x[8..16].copy_from_slice(&(5u64 << 32 | 4 << 40 | 1 << 48).to_le_bytes());
        assert!(check(&x, block, blocks).is_err());
    }

    #[test]
    fn the_model_checks_known_blocks_exactly_and_the_rest_by_the_rule() {
        let blocks = 32;
        let model = Model::unknown(blocks);
        let mut file = vec![0u8; blocks as usize * BLOCK_BYTES];
        data::fill(&mut file, 0);
        let stamp = Stamp::new(2, 2, 0, 9);
        let block = stamp.block(blocks).unwrap();
        let at = block as usize * BLOCK_BYTES;
        fill(&mut file[at..at + BLOCK_BYTES], block, stamp);
        assert_eq!(model.check_blocks(&file, 0).unwrap(), file.len() as u64);
        model.set(block, stamp);
        assert_eq!(model.known(), 1);
        model.check_blocks(&file, 0).unwrap();
        // A lost write: the model knows the block was written, the file has the original.
        fill(&mut file[at..at + BLOCK_BYTES], block, Stamp::ORIGINAL);
        assert!(model.check_blocks(&file, 0).is_err());
    }

    #[test]
    fn own_blocks_partition_the_file() {
        for (blocks, jobs) in [(10u64, 3u64), (16, 16), (5, 8), (1000, 7)] {
            let total: u64 = (0..jobs).map(|j| own_blocks(blocks, jobs, j)).sum();
            assert_eq!(total, blocks);
        }
    }
}
