//! Fuzz target `api`: the public API against `std::fs`.
//!
//! An input builds a small cache (16 pages to 32 MiB, either policy, either backend, any
//! largest folio and readahead window) over one to three pattern files of input-chosen
//! lengths (`files::len_of`), then runs up to `OPS_MAX` operations: open, `read_at`,
//! `get_page` (some pages held across later operations), `readahead`, `advise`,
//! `set_readahead_max_bytes`, `refresh_len`, dropping a handle, a held page or the cache
//! itself (its handles must keep working). Offsets and lengths reach past the end of the
//! file and up to `u64::MAX`.
//!
//! Every result must be what `std::fs` says: `read_at` returns the bytes a `pread` loop
//! returns (the same count, the same bytes); `get_page` returns a page-aligned view that
//! covers the offset, ends within the file and holds the file's bytes, or `UnexpectedEof`
//! at or past the end; an offset and length that overflow are `InvalidInput` (a zero
//! length reads nothing first); nothing else may fail. After every operation the handle's
//! readahead window must be possible (async part within the window, within the file), and
//! the cache never holds more than its capacity.
//!
//! Held pages: under either policy, whole folios up to the capacity minus one page. The
//! one frame nobody holds is what a read needs to make progress (its first folio falls
//! back to order 0; the rest of its run and readahead take only what is free), so no read
//! may fail with `OutOfMemory`: one that did would be a policy hiding evictable folios
//! from reclaim, as S3-FIFO (small queue all pinned) and the two-list LRU (inactive list
//! all pinned) did before their fix (tests/regressions.rs). Holding the whole cache
//! makes `OutOfMemory` a correct answer (tests/faults.rs), not one this target accepts.

use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use folio::{Advice, BackendKind, Cache, EvictionKind, File, PageRef};

use super::files;
use super::input::Input;

/// Operations per input.
pub const OPS_MAX: usize = 96;
const PAGE: u64 = 4096;

/// One file of the input: its length, and a plain `std::fs` handle to compare with.
struct Fixture {
    path: std::path::PathBuf,
    len: u64,
    reference: std::fs::File,
}

/// The bytes `std::fs` reads at `offset`: a `pread` loop up to the end of the file.
fn reference_read(fixture: &Fixture, offset: u64, len: usize) -> Vec<u8> {
    let mut want = vec![0u8; len];
    let mut n = 0;
    while n < len {
        let Some(at) = offset.checked_add(n as u64) else {
            break;
        };
        match fixture.reference.read_at(&mut want[n..], at) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::InvalidInput => break, // past i64::MAX
            Err(e) => panic!("std::fs read_at({at}): {e}"),
        }
    }
    want.truncate(n);
    want
}

/// An offset: mostly inside the file or just past it, sometimes anywhere, sometimes at the
/// top of the range (overflow).
fn offset(input: &mut Input, len: u64) -> u64 {
    match input.below(8) {
        0 => input.u64(),
        1 => u64::MAX - u64::from(input.u16()),
        _ => input.below(len + 2 * PAGE + 1),
    }
}

/// A read length: empty, tiny, a few pages, or longer than the small caches.
fn read_len(input: &mut Input) -> usize {
    match input.below(8) {
        0 => 0,
        1..=3 => 1 + input.below(64) as usize,
        4..=6 => 1 + input.below(20_000) as usize,
        _ => 1 + input.below(300_000) as usize,
    }
}

fn range_len(input: &mut Input) -> u64 {
    match input.below(4) {
        0 => input.u64(),
        _ => input.below(1 << 20),
    }
}

fn overflows(offset: u64, len: u64) -> bool {
    offset.checked_add(len).is_none()
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let capacity_pages = input.pick(&[16u64, 24, 64, 256, 8192]);
    let eviction = input.pick(&[EvictionKind::S3Fifo, EvictionKind::TwoListLru]);
    let backend = input.pick(&[BackendKind::Pread, BackendKind::IoUring]);
    let order_max = input.below(10) as u8;
    let readahead_max_bytes = input.pick(&[0u64, 16 << 10, 128 << 10, 2 << 20]);
    let cache = Cache::builder()
        .capacity_bytes(capacity_pages * PAGE)
        .eviction(eviction)
        .backend(backend)
        .pread_threads(1)
        .folio_order_max(order_max)
        .readahead_max_bytes(readahead_max_bytes)
        .alloc_wait(Duration::from_secs(10));
    let cache = match cache.clone().build() {
        Ok(cache) => cache,
        // io_uring refused here (sandbox, old kernel): the pread pool.
        Err(_) => cache.backend(BackendKind::Pread).build().expect("a cache"),
    };
    let capacity_bytes = cache.capacity_bytes();
    // One frame for the reads, the rest may be held (module docs).
    let pinned_bytes_max = capacity_bytes - PAGE;
    let fixtures: Vec<Fixture> = (0..1 + input.below(3))
        .map(|_| {
            let len = files::len_of(input.u16());
            let path = files::path(len);
            let reference = std::fs::File::open(&path).expect("open the reference");
            Fixture {
                path,
                len,
                reference,
            }
        })
        .collect();
    let mut cache = Some(cache);
    let mut handles: Vec<(usize, File)> = Vec::new();
    let mut pins: Vec<(usize, PageRef)> = Vec::new();
    for op in 0..OPS_MAX {
        if input.is_empty() {
            break;
        }
        let choice = input.below(16);
        let fixture_index = input.below(fixtures.len() as u64) as usize;
        let fixture = &fixtures[fixture_index];
        if choice == 0 || handles.iter().all(|(f, _)| *f != fixture_index) {
            // Open (also when the operation needs a handle of this file and has none).
            let Some(cache) = &cache else {
                continue;
            };
            let file = cache.open(&fixture.path).expect("open");
            assert_eq!(file.len(), fixture.len, "op {op}: length at open");
            assert_eq!(file.is_empty(), fixture.len == 0);
            handles.push((fixture_index, file));
            if choice == 0 {
                continue;
            }
        }
        let mine: Vec<usize> = (0..handles.len())
            .filter(|&i| handles[i].0 == fixture_index)
            .collect();
        let handle_index = mine[input.below(mine.len() as u64) as usize];
        let file = &handles[handle_index].1;
        match choice {
            1..=5 => {
                let at = offset(&mut input, fixture.len);
                let len = read_len(&mut input);
                let mut got = vec![0xA5u8; len];
                match file.read_at(&mut got, at) {
                    Ok(n) => {
                        assert!(
                            len == 0 || !overflows(at, len as u64),
                            "op {op}: read_at({at}, {len}) overflows but returned {n}"
                        );
                        let want = reference_read(fixture, at, len);
                        assert_eq!(n, want.len(), "op {op}: length of read_at({at}, {len})");
                        if got[..n] != want[..] {
                            let bad = (0..n).find(|&i| got[i] != want[i]).unwrap_or(0);
                            panic!(
                                "op {op}: read_at({at}, {len}): wrong byte at offset {}",
                                at + bad as u64
                            );
                        }
                    }
                    Err(e) => {
                        assert!(
                            e.kind() == ErrorKind::InvalidInput && overflows(at, len as u64),
                            "op {op}: read_at({at}, {len}) of a {}-byte file: {e}",
                            fixture.len
                        );
                    }
                }
            }
            6..=8 => {
                let at = offset(&mut input, fixture.len);
                let keep = input.below(2) == 0;
                match file.get_page(at) {
                    Ok(page) => {
                        let start = page.offset_bytes();
                        let end = start + page.len() as u64;
                        assert!(
                            at < fixture.len
                                && start % PAGE == 0
                                && start <= at
                                && at < end
                                && end <= fixture.len,
                            "op {op}: get_page({at}) of a {}-byte file: {} bytes at {start}",
                            fixture.len,
                            page.len()
                        );
                        assert_eq!(page.len(), page.len_bytes());
                        files::check(fixture.len, start, &page).unwrap_or_else(|bad| {
                            panic!("op {op}: get_page({at}): wrong byte at {bad}")
                        });
                        let pinned: u64 = pins.iter().map(|(_, p)| p.len() as u64).sum();
                        // A view ending before the end of the file is its whole folio (at
                        // the end, the folio may be larger than the view: not held).
                        if keep
                            && end < fixture.len
                            && pinned + page.len() as u64 <= pinned_bytes_max
                        {
                            pins.push((fixture_index, page));
                        }
                    }
                    Err(e) => assert!(
                        e.kind() == ErrorKind::UnexpectedEof && at >= fixture.len,
                        "op {op}: get_page({at}) of a {}-byte file: {e}",
                        fixture.len
                    ),
                }
            }
            9 => {
                let (at, len) = (offset(&mut input, fixture.len), range_len(&mut input));
                match file.readahead(at, len) {
                    Ok(()) => assert!(!overflows(at, len), "op {op}: readahead({at}, {len})"),
                    Err(e) => assert!(
                        e.kind() == ErrorKind::InvalidInput && overflows(at, len),
                        "op {op}: readahead({at}, {len}): {e}"
                    ),
                }
            }
            10 | 11 => {
                let advice = input.pick(&[
                    Advice::Normal,
                    Advice::Sequential,
                    Advice::Random,
                    Advice::WillNeed,
                    Advice::DontNeed,
                ]);
                let (at, len) = (offset(&mut input, fixture.len), range_len(&mut input));
                match file.advise(at, len, advice) {
                    Ok(()) => assert!(
                        !overflows(at, len),
                        "op {op}: advise({at}, {len}, {advice:?})"
                    ),
                    Err(e) => assert!(
                        e.kind() == ErrorKind::InvalidInput && overflows(at, len),
                        "op {op}: advise({at}, {len}, {advice:?}): {e}"
                    ),
                }
            }
            12 => {
                let bytes = match input.below(4) {
                    0 => input.u64(),
                    _ => input.below(1 << 22),
                };
                file.set_readahead_max_bytes(bytes);
            }
            13 => {
                let len = file.refresh_len().expect("refresh_len");
                assert_eq!(len, fixture.len, "op {op}: refresh_len");
                assert_eq!(file.len(), fixture.len);
            }
            14 => match input.below(3) {
                0 => {
                    handles.swap_remove(handle_index);
                    continue;
                }
                1 => {
                    // Let go of the pages held, checking them first: a held page never
                    // changes.
                    for (f, page) in pins.drain(..) {
                        files::check(fixtures[f].len, page.offset_bytes(), &page)
                            .unwrap_or_else(|bad| panic!("op {op}: a held page changed at {bad}"));
                    }
                }
                _ => {
                    // The cache goes; its handles (and held pages) keep working.
                    cache = None;
                }
            },
            _ => {
                assert_eq!(file.len(), fixture.len);
                if let Some(cache) = &cache {
                    let stats = cache.stats();
                    assert!(
                        stats.cached_bytes <= stats.capacity_bytes,
                        "op {op}: {stats:?}"
                    );
                }
            }
        }
        let file = &handles[handle_index].1;
        let w = file.readahead_window();
        let file_end = fixture.len.div_ceil(PAGE) * PAGE;
        assert!(
            w.async_bytes <= w.size_bytes
                && w.size_bytes <= 16 << 20
                && w.start_bytes % PAGE == 0
                && (w.size_bytes == 0 || w.start_bytes < file_end),
            "op {op}: impossible readahead window {w:?} in a {}-byte file",
            fixture.len
        );
    }
    for (f, page) in &pins {
        files::check(fixtures[*f].len, page.offset_bytes(), page)
            .unwrap_or_else(|bad| panic!("at the end: a held page changed at {bad}"));
    }
    if let Some(cache) = &cache {
        let stats = cache.stats();
        assert!(stats.cached_bytes <= stats.capacity_bytes, "{stats:?}");
    }
}
