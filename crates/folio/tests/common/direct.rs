//! Reading a file behind folio's back with O_DIRECT: what is on the device (or in the
//! kernel's view of it), not in folio's cache nor in a stale kernel page cache. A test
//! reads the file after a sync returned Ok and checks that what the sync promised is
//! there (`tests/sync_stress.rs`).
//!
//! Limits: the file's length and every read's offset are multiples of 4 KiB (O_DIRECT's
//! alignment on the file systems tests run on; `common::test_dir` picks one that accepts
//! O_DIRECT).

#![allow(dead_code)]

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// O_DIRECT's alignment for buffers, offsets and lengths.
pub const DIRECT_ALIGN_BYTES: usize = 4096;

/// A file opened read-only with O_DIRECT, and a 4 KiB-aligned buffer to read it into.
pub struct DirectReader {
    file: File,
    /// Over-allocated by `DIRECT_ALIGN_BYTES`; the aligned window starts at `start`.
    buf: Vec<u8>,
    start: usize,
    len_bytes: usize,
}

impl DirectReader {
    /// Opens `path` for reads of `len_bytes` (a multiple of 4 KiB) at once.
    pub fn open(path: &Path, len_bytes: usize) -> io::Result<DirectReader> {
        assert_eq!(len_bytes % DIRECT_ALIGN_BYTES, 0, "an O_DIRECT length");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)?;
        let buf = vec![0u8; len_bytes + DIRECT_ALIGN_BYTES];
        let start = buf.as_ptr().align_offset(DIRECT_ALIGN_BYTES);
        Ok(DirectReader {
            file,
            buf,
            start,
            len_bytes,
        })
    }

    /// The file's bytes `[offset, offset + len_bytes)` as the device holds them (zeros
    /// past its end). `offset` is a multiple of 4 KiB.
    pub fn read_at(&mut self, offset: u64) -> io::Result<&[u8]> {
        assert_eq!(offset % DIRECT_ALIGN_BYTES as u64, 0, "an O_DIRECT offset");
        let window = &mut self.buf[self.start..self.start + self.len_bytes];
        let mut done = 0;
        while done < window.len() {
            match self
                .file
                .read_at(&mut window[done..], offset + done as u64)?
            {
                0 => {
                    window[done..].fill(0);
                    break;
                }
                n => done += n,
            }
        }
        Ok(window)
    }
}
