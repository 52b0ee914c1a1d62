//! Data files whose every byte can be checked, and the check.
//!
//! Design: every 8-byte little-endian word of a data file holds its own byte offset, so
//! the expected value of any byte at any offset is known without a reference copy: byte
//! `o` is byte `o % 8` of the little-endian encoding of `o - o % 8`. A file may also be
//! keyed: its words hold `offset ^ key`, so that files with different keys differ at
//! every offset and a byte served from the wrong file is caught too (the soak). A read of any length
//! at any offset is checked against that rule by [`verify`]; a mismatch is a hard error
//! (it names the offset and both values) because a benchmark that returns wrong bytes
//! fast has measured nothing.
//!
//! Files are written in 1 MiB chunks and `fsync`ed, so that no dirty page is left for an
//! O_DIRECT read to flush first. A file that already exists with the right length and
//! whose sampled words check out is reused (a `--dir` given by the user keeps its data
//! between runs); the full check then happens on every read of the benchmark itself.
//!
//! Limits: files are at most 2^63 bytes (offsets must fit a word); the sampled reuse check
//! reads 64 words, so a corrupted reused file is caught by the benchmark's own reads, not
//! at reuse.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The size of one generation chunk.
const CHUNK_BYTES: usize = 1 << 20;

/// The value of the byte at `offset` of a data file keyed with `key`.
#[inline]
pub fn expected_keyed_byte(offset: u64, key: u64) -> u8 {
    let word = (offset & !7) ^ key;
    word.to_le_bytes()[(offset & 7) as usize]
}

/// Fills `buf` with the bytes a data file holds at `offset`.
pub fn fill(buf: &mut [u8], offset: u64) {
    fill_keyed(buf, offset, 0);
}

/// Fills `buf` with the bytes a data file keyed with `key` holds at `offset`.
pub fn fill_keyed(buf: &mut [u8], offset: u64, key: u64) {
    let mut at = 0usize;
    // Unaligned head, byte by byte.
    while at < buf.len() && (offset + at as u64) % 8 != 0 {
        buf[at] = expected_keyed_byte(offset + at as u64, key);
        at += 1;
    }
    let body_end = at + (buf.len() - at) / 8 * 8;
    let mut word = offset + at as u64;
    for chunk in buf[at..body_end].chunks_exact_mut(8) {
        chunk.copy_from_slice(&(word ^ key).to_le_bytes());
        word += 8;
    }
    for (i, b) in buf[body_end..].iter_mut().enumerate() {
        *b = expected_keyed_byte(offset + (body_end + i) as u64, key);
    }
}

/// A byte read that is not what the file holds: the benchmark stops on it.
#[derive(Debug)]
pub struct Mismatch {
    pub offset: u64,
    pub expected: u8,
    pub found: u8,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "data mismatch at byte offset {}: expected {:#04x}, read {:#04x}",
            self.offset, self.expected, self.found
        )
    }
}

impl std::error::Error for Mismatch {}

impl From<Mismatch> for io::Error {
    fn from(m: Mismatch) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, m)
    }
}

/// Checks that `buf` holds exactly the bytes of a data file at `offset`; returns the
/// number of bytes verified (all of them) or the first mismatch.
///
/// Context: the hot loop of every workload; the aligned body is compared a word at a time.
#[inline]
pub fn verify(buf: &[u8], offset: u64) -> Result<u64, Mismatch> {
    verify_keyed(buf, offset, 0)
}

/// `verify` for a data file keyed with `key`.
#[inline]
pub fn verify_keyed(buf: &[u8], offset: u64, key: u64) -> Result<u64, Mismatch> {
    let mut at = 0usize;
    while at < buf.len() && (offset + at as u64) % 8 != 0 {
        check_byte(buf[at], offset + at as u64, key)?;
        at += 1;
    }
    let body_end = at + (buf.len() - at) / 8 * 8;
    let base = offset + at as u64;
    // Compare all words first (branch-free, vectorisable), then locate a failure.
    let bad = buf[at..body_end]
        .chunks_exact(8)
        .enumerate()
        .fold(0u64, |acc, (i, w)| {
            let word = u64::from_le_bytes(w.try_into().expect("chunks of 8"));
            acc | (word ^ (base + 8 * i as u64) ^ key)
        });
    if bad != 0 {
        for (i, b) in buf[at..body_end].iter().enumerate() {
            check_byte(*b, base + i as u64, key)?;
        }
    }
    for (i, b) in buf[body_end..].iter().enumerate() {
        check_byte(*b, offset + (body_end + i) as u64, key)?;
    }
    Ok(buf.len() as u64)
}

#[inline]
fn check_byte(found: u8, offset: u64, key: u64) -> Result<(), Mismatch> {
    let expected = expected_keyed_byte(offset, key);
    if found == expected {
        Ok(())
    } else {
        Err(Mismatch {
            offset,
            expected,
            found,
        })
    }
}

/// Whether a data file was written now or found ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Written,
    Reused,
}

/// Makes `dir/name` a data file of `len_bytes` (reusing a valid one), returns its path.
///
/// Context: writes and `fsync`s up to `len_bytes`; leaves the file's pages in the kernel's
/// page cache (the caller makes it cold before a cold run).
pub fn ensure_file(dir: &Path, name: &str, len_bytes: u64) -> io::Result<(PathBuf, Origin)> {
    ensure_keyed_file(dir, name, len_bytes, 0)
}

/// `ensure_file` for a data file keyed with `key`.
pub fn ensure_keyed_file(
    dir: &Path,
    name: &str,
    len_bytes: u64,
    key: u64,
) -> io::Result<(PathBuf, Origin)> {
    let path = dir.join(name);
    if let Ok(file) = File::open(&path) {
        if file.metadata()?.len() == len_bytes && sample_ok(&file, len_bytes, key)? {
            return Ok((path, Origin::Reused));
        }
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut at = 0u64;
    while at < len_bytes {
        let n = (len_bytes - at).min(CHUNK_BYTES as u64) as usize;
        fill_keyed(&mut buf[..n], at, key);
        file.write_all(&buf[..n])?;
        at += n as u64;
    }
    file.sync_all()?;
    Ok((path, Origin::Written))
}

/// Reads 64 words spread over the file and checks them.
fn sample_ok(file: &File, len_bytes: u64, key: u64) -> io::Result<bool> {
    let words = len_bytes / 8;
    if words == 0 {
        return Ok(len_bytes == 0);
    }
    let mut word = [0u8; 8];
    for i in 0..64u64 {
        let offset = (words - 1) * i / 63 * 8;
        file.read_exact_at(&mut word, offset)?;
        if u64::from_le_bytes(word) != offset ^ key {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_and_verify_agree_at_every_alignment() {
        for offset in 0..17u64 {
            for len in [0usize, 1, 7, 8, 9, 64, 100] {
                let mut buf = vec![0u8; len];
                fill(&mut buf, offset);
                assert_eq!(verify(&buf, offset).unwrap(), len as u64);
            }
        }
    }

    #[test]
    fn keyed_files_differ_from_each_other_at_every_word() {
        let (mut a, mut b) = (vec![0u8; 4099], vec![0u8; 4099]);
        fill_keyed(&mut a, 5, 1 << 56);
        fill_keyed(&mut b, 5, 2 << 56);
        assert_eq!(verify_keyed(&a, 5, 1 << 56).unwrap(), 4099);
        assert!(verify_keyed(&b, 5, 1 << 56).is_err());
        assert!(verify(&a, 5).is_err());
    }

    #[test]
    fn verify_names_the_first_wrong_byte() {
        let mut buf = vec![0u8; 4096];
        fill(&mut buf, 8192 + 3);
        buf[1000] ^= 0x40;
        let err = verify(&buf, 8192 + 3).unwrap_err();
        assert_eq!(err.offset, 8192 + 3 + 1000);
        assert_eq!(err.found ^ 0x40, err.expected);
    }

    #[test]
    fn ensure_file_writes_then_reuses() {
        let dir = tempfile::tempdir().unwrap();
        let (path, origin) = ensure_file(dir.path(), "d", 100_003).unwrap();
        assert_eq!(origin, Origin::Written);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(verify(&bytes, 0).unwrap(), 100_003);
        assert_eq!(
            ensure_file(dir.path(), "d", 100_003).unwrap().1,
            Origin::Reused
        );
    }
}
