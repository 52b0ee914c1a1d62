//! A `write_at` is atomic against the other `write_at`s of its file, as POSIX promises for
//! `pwrite` on a regular file (and ext4's inode lock gives buffered writes): two writes
//! that overlap are applied one after the other, each whole (`write::range_lock`).
//!
//! Two writers write multi-MiB stamps (every 8-byte word the write's own number) over
//! ranges that overlap by 2 MiB, at the same moment (a barrier), round after round; the
//! dirty limit is small, so each write is split into many pieces and throttled in
//! between, the place where writes used to interleave. After each round the overlap must
//! be one writer's stamp throughout, the newest of that writer's, and each writer's own
//! part its stamp. Meanwhile readers read the overlap and check that every 4 KiB page
//! they see is whole (one stamp) and holds a stamp some write wrote: reads are not atomic
//! against a write (nor under the kernel), pages are.
//!
//! Environment: `FOLIO_ATOMIC_ROUNDS` (default 20).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use folio::Cache;

const MIB: u64 = 1 << 20;
/// Writer `w` writes `[w * 2 MiB, w * 2 MiB + 4 MiB)`: the overlap is `[2 MiB, 4 MiB)`.
const WRITE_BYTES: u64 = 4 * MIB;
const OVERLAP: std::ops::Range<u64> = 2 * MIB..4 * MIB;
const PAGE: usize = 4096;

/// Stamp of writer `w`'s write in `round` (never 0: a hole reads as 0).
fn stamp(writer: u64, round: u64) -> u64 {
    (round + 1) << 8 | (writer + 1)
}

fn stamped(value: u64, len: u64) -> Vec<u8> {
    value.to_le_bytes().repeat((len / 8) as usize)
}

/// The stamp every word of `bytes` holds, or `None` if they differ.
fn uniform(bytes: &[u8]) -> Option<u64> {
    let first = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    bytes
        .chunks_exact(8)
        .all(|w| u64::from_le_bytes(w.try_into().unwrap()) == first)
        .then_some(first)
}

#[test]
fn overlapping_writes_are_applied_whole_one_after_the_other() {
    let rounds: u64 = std::env::var("FOLIO_ATOMIC_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let dir = common::test_dir();
    let path = dir.path().join("f");
    // A dirty limit of 1 MiB: every 4 MiB write goes in many pieces, throttled between.
    let cache = Cache::builder()
        .capacity_bytes(64 * MIB)
        .dirty_limit_bytes(MIB)
        .build()
        .unwrap();
    let file = Arc::new(
        cache
            .open_options()
            .write(true)
            .create(true)
            .open(&path)
            .unwrap(),
    );
    file.write_at(&stamped(1, 6 * MIB), 0).unwrap();
    let barrier = Arc::new(Barrier::new(2));
    let done = Arc::new(AtomicBool::new(false));
    // The newest round each writer has started: a reader may see stamps up to it.
    let started = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (file, done, started) = (file.clone(), done.clone(), started.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; (OVERLAP.end - OVERLAP.start) as usize];
                let mut pages = 0u64;
                while !done.load(Ordering::Acquire) {
                    file.read_at(&mut buf, OVERLAP.start).unwrap();
                    for (i, page) in buf.chunks_exact(PAGE).enumerate() {
                        let at = OVERLAP.start + (i * PAGE) as u64;
                        let value =
                            uniform(page).unwrap_or_else(|| panic!("a torn page at byte {at}"));
                        let (writer, round) = ((value & 0xff).wrapping_sub(1), value >> 8);
                        let known = value == 1
                            || (writer < 2
                                && round >= 1
                                && round - 1 <= started[writer as usize].load(Ordering::Acquire));
                        assert!(
                            known,
                            "page at byte {at} holds {value:#x}, no write's stamp"
                        );
                    }
                    pages += buf.len() as u64 / PAGE as u64;
                }
                pages
            })
        })
        .collect();
    for round in 0..rounds {
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let (file, barrier, started) = (file.clone(), barrier.clone(), started.clone());
                std::thread::spawn(move || {
                    let bytes = stamped(stamp(w, round), WRITE_BYTES);
                    started[w as usize].store(round, Ordering::Release);
                    barrier.wait();
                    file.write_at(&bytes, w * 2 * MIB).unwrap();
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let mut overlap = vec![0u8; (OVERLAP.end - OVERLAP.start) as usize];
        file.read_at(&mut overlap, OVERLAP.start).unwrap();
        let value = uniform(&overlap).unwrap_or_else(|| {
            let firsts: Vec<u64> = overlap
                .chunks_exact(64 * 1024)
                .map(|c| u64::from_le_bytes(c[..8].try_into().unwrap()))
                .collect();
            panic!("round {round}: the overlap mixes two writes (stamps per 64 KiB: {firsts:x?})")
        });
        assert!(
            value == stamp(0, round) || value == stamp(1, round),
            "round {round}: the overlap holds {value:#x}, not this round's"
        );
        for w in 0..2u64 {
            let own = if w == 0 {
                0..OVERLAP.start
            } else {
                OVERLAP.end..6 * MIB
            };
            let mut buf = vec![0u8; (own.end - own.start) as usize];
            file.read_at(&mut buf, own.start).unwrap();
            assert_eq!(
                uniform(&buf),
                Some(stamp(w, round)),
                "round {round}, writer {w}"
            );
        }
    }
    done.store(true, Ordering::Release);
    let pages: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(pages > 0, "the readers read nothing");
    file.sync_all().unwrap();
    let disk = std::fs::read(&path).unwrap();
    let mut cached = vec![0u8; 6 * MIB as usize];
    file.read_at(&mut cached, 0).unwrap();
    assert!(
        disk[..cached.len()] == cached[..],
        "the disk differs from the cache after sync_all"
    );
    eprintln!("atomic_writes: {rounds} rounds of two overlapping 4 MiB writes, {pages} pages read alongside");
}
