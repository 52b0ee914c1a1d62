//! Pattern files for the fuzz targets: every 8-byte little-endian word holds its own
//! offset XOR the file's salt (its length), as in `crates/folio/tests/common`, so any byte
//! read can be checked without a copy of the file.
//!
//! Files are never modified: each length is made once, in a directory shared by every
//! input and every fuzzing process (`FOLIO_FUZZ_DIR`, default `/var/tmp/folio-fuzz-files`
//! on a file system that takes O_DIRECT), written under a temporary name and renamed, so
//! that parallel jobs and threads never see a partial file. The lengths come from a bounded set
//! (`len_of`): the directory holds at most a few hundred files, about 70 MB.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

const PAGE: u64 = 4096;

/// The file lengths an input can choose: 0 to 64 pages, and 700 and 2600 pages (large
/// folios, long readahead windows); each whole, one byte over, or one byte short of a
/// page.
pub fn len_of(selector: u16) -> u64 {
    let pages = match selector % 67 {
        65 => 700,
        66 => 2600,
        small => u64::from(small),
    };
    match (selector / 67) % 3 {
        0 => pages * PAGE,
        1 => pages * PAGE + 1,
        _ => (pages * PAGE).saturating_sub(1),
    }
}

/// The byte at `offset` of the file of length `len`.
pub fn pattern_byte(len: u64, offset: u64) -> u8 {
    ((offset & !7) ^ len).to_le_bytes()[(offset & 7) as usize]
}

/// Checks `bytes` against the file of length `len` from `offset` on; the first wrong
/// offset otherwise.
pub fn check(len: u64, offset: u64, bytes: &[u8]) -> Result<(), u64> {
    match bytes
        .iter()
        .enumerate()
        .find(|&(i, &byte)| byte != pattern_byte(len, offset + i as u64))
    {
        Some((i, _)) => Err(offset + i as u64),
        None => Ok(()),
    }
}

static DIR: OnceLock<PathBuf> = OnceLock::new();

/// Puts the files in `path` instead (the regression tests use a temporary directory); only
/// before the first file is made. Returns the directory in use.
pub fn use_dir(path: PathBuf) -> &'static PathBuf {
    DIR.get_or_init(|| {
        std::fs::create_dir_all(&path).expect("creating the fuzz files' directory");
        path
    })
}

fn dir() -> &'static PathBuf {
    DIR.get_or_init(|| {
        let dir = std::env::var_os("FOLIO_FUZZ_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/tmp/folio-fuzz-files"));
        std::fs::create_dir_all(&dir).expect("creating the fuzz files' directory");
        dir
    })
}

/// The path of the pattern file of length `len`, made if it is not there yet.
pub fn path(len: u64) -> PathBuf {
    let path = dir().join(format!("pattern-{len}"));
    if !path.exists() {
        // Unique per process and per call: two threads (tests) may make the same file.
        static MADE: AtomicU64 = AtomicU64::new(0);
        let tmp = dir().join(format!(
            "pattern-{len}.tmp{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        ));
        let mut writer = std::io::BufWriter::new(std::fs::File::create(&tmp).expect("create"));
        let mut word = 0;
        while word < len {
            let bytes = (word ^ len).to_le_bytes();
            let n = (len - word).min(8) as usize;
            writer.write_all(&bytes[..n]).expect("write");
            word += 8;
        }
        writer
            .into_inner()
            .expect("flush")
            .sync_all()
            .expect("sync");
        std::fs::rename(&tmp, &path).expect("rename");
    }
    path
}
