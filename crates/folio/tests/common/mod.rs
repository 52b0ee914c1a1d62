//! Test data shared by the integration tests: files whose every 8-byte little-endian word
//! holds its own byte offset (plus a per-file salt), so any byte read can be checked
//! without keeping a copy of the file.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use folio::{Cache, Stats};

/// How long `wait_for_stats` waits before it fails the test (a hang fails the test
/// instead of the run).
pub const STATS_WAIT_MAX: Duration = Duration::from_secs(30);

/// A directory on a file system that accepts O_DIRECT (/tmp may be tmpfs, which does
/// not), removed when dropped.
pub fn test_dir() -> tempfile::TempDir {
    let base = std::env::var_os("FOLIO_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    std::fs::create_dir_all(&base).expect("create the test directory");
    tempfile::Builder::new()
        .prefix("folio-test-")
        .tempdir_in(base)
        .expect("make a temporary directory")
}

/// The byte at `offset` of a pattern file with `salt`.
pub fn pattern_byte(salt: u64, offset: u64) -> u8 {
    let word = (offset / 8) * 8;
    (word ^ salt).to_le_bytes()[(offset % 8) as usize]
}

/// The pattern bytes of `[offset, offset + len)`.
pub fn pattern(salt: u64, offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| pattern_byte(salt, offset + i))
        .collect()
}

/// Checks `buf` against the pattern at `offset`; returns the first wrong offset.
pub fn check_pattern(salt: u64, offset: u64, buf: &[u8]) -> Result<(), u64> {
    // Whole words at once where aligned, for speed in the stress tests.
    let mut i = 0usize;
    while i < buf.len() {
        let at = offset + i as u64;
        if at % 8 == 0 && i + 8 <= buf.len() {
            let got = u64::from_le_bytes(buf[i..i + 8].try_into().unwrap());
            if got != at ^ salt {
                return Err(at);
            }
            i += 8;
        } else {
            if buf[i] != pattern_byte(salt, at) {
                return Err(at);
            }
            i += 1;
        }
    }
    Ok(())
}

/// Writes a pattern file of `len` bytes.
pub fn write_pattern_file(path: &Path, salt: u64, len: u64) {
    let mut file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    let mut chunk = Vec::with_capacity(1 << 20);
    let mut at = 0u64;
    while at < len {
        chunk.clear();
        let n = (len - at).min(1 << 20);
        let first_word = at / 8;
        for w in first_word..(at + n).div_ceil(8) {
            chunk.extend_from_slice(&((w * 8) ^ salt).to_le_bytes());
        }
        let skip = (at - first_word * 8) as usize;
        file.write_all(&chunk[skip..skip + n as usize]).unwrap();
        at += n;
    }
    file.into_inner().unwrap().sync_all().unwrap();
}

/// Waits until `done(stats)` holds of `cache`'s stats, failing the test after
/// `STATS_WAIT_MAX`.
pub fn wait_for_stats(cache: &Cache, what: &str, done: impl Fn(&Stats) -> bool) -> Stats {
    let started = Instant::now();
    loop {
        let s = cache.stats();
        if done(&s) {
            return s;
        }
        assert!(
            started.elapsed() < STATS_WAIT_MAX,
            "waited {STATS_WAIT_MAX:?} for {what}: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Makes this thread's sleeps of a few µs last a few µs, not the default 50 µs of timer
/// slack more (threads that hold a page pinned for a few µs).
pub fn precise_sleeps() {
    // SAFETY: PR_SET_TIMERSLACK takes integers and changes only this thread's timer
    // slack; no memory is passed.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    assert_eq!(rc, 0, "prctl(PR_SET_TIMERSLACK)");
}

/// The whole of `path` as the device holds it: a test that reads a file while folio writes
/// it does so with O_DIRECT, never through the kernel's page cache (which such a read
/// could fill with a block that a write then replaces underneath it). Reads buffered where
/// the file system refuses O_DIRECT (a tmpfs named by `FOLIO_TEST_DIR`).
pub fn read_direct(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    /// O_DIRECT's alignment of buffers, offsets and lengths.
    const ALIGN_BYTES: usize = 4096;
    const CHUNK_BYTES: usize = 1 << 20;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return std::fs::read(path),
        Err(e) => return Err(e),
    };
    let mut buf = vec![0u8; CHUNK_BYTES + ALIGN_BYTES];
    let skip = buf.as_ptr().align_offset(ALIGN_BYTES);
    let chunk = &mut buf[skip..skip + CHUNK_BYTES];
    let mut bytes = Vec::new();
    loop {
        let n = file.read_at(chunk, bytes.len() as u64)?;
        bytes.extend_from_slice(&chunk[..n]);
        // Only the end of the file stops a read short of a whole block (and the next
        // offset would not be aligned).
        if n == 0 || n % ALIGN_BYTES != 0 {
            return Ok(bytes);
        }
    }
}
