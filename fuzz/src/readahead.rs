//! Fuzz target `readahead`: the readahead policy as the public API shows it, through the
//! reads it makes.
//!
//! An input picks one pattern file (`files::len_of`; 700 and 2600 pages among them), a
//! cache larger than the file (nothing is ever evicted), a maximum window and a largest
//! folio, and one or two handles; then up to `OPS_MAX` operations: sequential reads from
//! a cursor in input-chosen steps (the patterns that open and ramp windows), jumps of the
//! cursor, random reads, `advise(Normal | Sequential | Random)`,
//! `set_readahead_max_bytes`, forced `readahead`. Under the fault backend, without faults,
//! every read the cache makes is logged.
//!
//! Invariants checked after every operation:
//! - every read the cache made is page-aligned, non-empty, at most 2 MiB, and within the
//!   file (rounded up to a page);
//! - no page is read twice: the cache holds the whole file, so readahead never repeats
//!   work, whatever the order of windows, markers and misses;
//! - a handle with `Advice::Random` reads only the pages its read asked for, and its
//!   window is empty;
//! - the window is possible: its async part within it, its size at most the largest
//!   maximum the handle had since its last reset, and it starts inside the file;
//! - a forced `readahead` reads only inside its range; the bytes of every read are the
//!   file's.

use std::time::Duration;

use folio::io::fault::FaultBackend;
use folio::io::pread::PreadBackend;
use folio::{Advice, Cache, File};

use super::files;
use super::input::Input;

/// Operations per input.
pub const OPS_MAX: usize = 128;
const PAGE: u64 = 4096;
/// The largest window a handle can have: 4095 pages (the packed state's limit).
const WINDOW_BYTES_LIMIT: u64 = 4095 * PAGE;

/// One handle and what the test knows of it.
struct Reader {
    file: File,
    cursor: u64,
    /// The largest maximum window this handle had since its window was last reset.
    max_bytes_seen: u64,
    /// The maximum of `Advice::Normal` (what `set_readahead_max_bytes` set).
    normal_max_bytes: u64,
    random: bool,
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let len = files::len_of(input.u16());
    let path = files::path(len);
    let file_pages = len.div_ceil(PAGE);
    let readahead_max_bytes = input.pick(&[0u64, 16 << 10, 128 << 10, 2 << 20, 8 << 20]);
    let order_max = input.below(10) as u8;
    let (backend, control) =
        FaultBackend::new(Box::new(PreadBackend::new(1).expect("a pread pool")));
    let cache = Cache::builder()
        .capacity_bytes(64 << 20)
        .readahead_max_bytes(readahead_max_bytes)
        .folio_order_max(order_max)
        .alloc_wait(Duration::from_secs(10))
        .build_with_backend(Box::new(backend))
        .expect("a cache");
    let mut readers: Vec<Reader> = (0..1 + input.below(2))
        .map(|_| Reader {
            file: cache.open(&path).expect("open"),
            cursor: 0,
            max_bytes_seen: readahead_max_bytes.min(WINDOW_BYTES_LIMIT),
            normal_max_bytes: readahead_max_bytes.min(WINDOW_BYTES_LIMIT),
            random: false,
        })
        .collect();
    let mut requested = vec![false; file_pages as usize];
    let mut buf = vec![0u8; 1 << 20];
    for op in 0..OPS_MAX {
        if input.is_empty() {
            break;
        }
        let r = input.below(readers.len() as u64) as usize;
        let reader = &mut readers[r];
        // The pages this operation may read: None for "wherever readahead goes".
        let mut allowed: Option<(u64, u64)> = None;
        match input.below(16) {
            0..=6 => {
                let step = match input.below(4) {
                    0 => 1 + input.below(4 * PAGE),
                    1 => PAGE * (1 + input.below(4)),
                    2 => PAGE * (1 + input.below(64)),
                    _ => 1 + input.below(buf.len() as u64),
                } as usize;
                let at = reader.cursor;
                read_checked(&reader.file, len, &mut buf[..step], at, op);
                if reader.random {
                    allowed = Some((at / PAGE, (at + step as u64).div_ceil(PAGE)));
                }
                reader.cursor = at + step as u64;
            }
            7 | 8 => reader.cursor = input.below(len + PAGE),
            9 | 10 => {
                let at = input.below(len + PAGE);
                let n = 1 + input.below(64 << 10) as usize;
                read_checked(&reader.file, len, &mut buf[..n], at, op);
                if reader.random {
                    allowed = Some((at / PAGE, (at + n as u64).div_ceil(PAGE)));
                }
            }
            11 | 12 => {
                let advice = input.pick(&[Advice::Normal, Advice::Sequential, Advice::Random]);
                reader.file.advise(0, 0, advice).expect("advise");
                reader.random = advice == Advice::Random;
                match advice {
                    Advice::Random => reader.max_bytes_seen = 0,
                    Advice::Sequential => {
                        let doubled = (reader.normal_max_bytes * 2).min(WINDOW_BYTES_LIMIT);
                        reader.max_bytes_seen = reader.max_bytes_seen.max(doubled);
                    }
                    _ => {
                        reader.max_bytes_seen = reader.max_bytes_seen.max(reader.normal_max_bytes);
                    }
                }
            }
            13 => {
                let bytes = input.below(20 << 20);
                reader.file.set_readahead_max_bytes(bytes);
                let set = (bytes / PAGE * PAGE).min(WINDOW_BYTES_LIMIT);
                reader.normal_max_bytes = set;
                reader.random = false;
                reader.max_bytes_seen = reader.max_bytes_seen.max(set);
            }
            _ => {
                let at = input.below(len + PAGE);
                let n = input.below(4 << 20);
                reader.file.readahead(at, n).expect("readahead");
                allowed = Some((at / PAGE, (at + n).div_ceil(PAGE)));
            }
        }
        for (offset, bytes) in control.take_requests() {
            let bytes = bytes as u64;
            assert!(
                offset % PAGE == 0 && bytes % PAGE == 0 && bytes > 0 && bytes <= 2 << 20,
                "op {op}: a read of {bytes} bytes at {offset}"
            );
            let (first, end) = (offset / PAGE, (offset + bytes) / PAGE);
            assert!(
                end <= file_pages,
                "op {op}: a read of pages {first}..{end} of a {file_pages}-page file"
            );
            if let Some((lo, hi)) = allowed {
                assert!(
                    first >= lo && end <= hi,
                    "op {op}: a read of pages {first}..{end} outside the pages {lo}..{hi} asked for"
                );
            }
            for page in first..end {
                assert!(!requested[page as usize], "op {op}: page {page} read twice");
                requested[page as usize] = true;
            }
        }
        for (i, reader) in readers.iter().enumerate() {
            let w = reader.file.readahead_window();
            assert!(
                w.async_bytes <= w.size_bytes
                    && w.size_bytes <= reader.max_bytes_seen
                    && (w.size_bytes == 0 || w.start_bytes < file_pages * PAGE)
                    && w.start_bytes % PAGE == 0,
                "op {op}: handle {i}: impossible window {w:?} (largest maximum {}, file {len} bytes)",
                reader.max_bytes_seen
            );
            if reader.random {
                assert_eq!(
                    w.size_bytes, 0,
                    "op {op}: handle {i} reads at random but has a window"
                );
            }
        }
    }
}

fn read_checked(file: &File, len: u64, buf: &mut [u8], at: u64, op: usize) {
    let n = file
        .read_at(buf, at)
        .unwrap_or_else(|e| panic!("op {op}: read_at({at}, {}): {e}", buf.len()));
    let want = len.saturating_sub(at).min(buf.len() as u64) as usize;
    assert_eq!(n, want, "op {op}: read_at({at}, {})", buf.len());
    files::check(len, at, &buf[..n]).unwrap_or_else(|bad| panic!("op {op}: wrong byte at {bad}"));
}
