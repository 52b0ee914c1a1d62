//! The shared read path (read.rs) across real processes and real files: one process
//! through a domain of few frames (reclaim runs constantly), and two processes (the second hits every page the first cached).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::attach::{DomainConfig, Member};
use super::domain::{Domain, Geometry, FRAME_BYTES};
use super::index::Entry;
use super::queue::FileNo;
use super::read::{ReadCounters, SharedReader};
use super::terms::Unkillable;
use super::tests::{exited_ok, fork, Rng, SharedRegion};
use super::{Holder, Run};
use crate::primitive::Ordering;

/// The bytes of test file `file` of `len` bytes: every 8-byte word names its file, its
/// page and its place in the page, so that a byte read from the wrong file, page or
/// offset is seen.
fn stamped(file: u64, len: u64) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(len as usize + 8);
    let mut word = 0u64;
    while (bytes.len() as u64) < len {
        let at = word * 8;
        let value = (file + 1) << 48 | (at / FRAME_BYTES as u64) << 16 | (at % FRAME_BYTES as u64);
        bytes.extend_from_slice(&value.to_le_bytes());
        word += 1;
    }
    bytes.truncate(len as usize);
    bytes
}

/// Writes test file `file` of `len` bytes in `dir` (on a disk file system: O_DIRECT).
fn write_file(dir: &Path, file: u64, len: u64) -> PathBuf {
    let path = dir.join(format!("file-{file}"));
    std::fs::write(&path, stamped(file, len)).unwrap();
    path
}

fn config(home: &Path, name: &str, slots: u16, frames: u32) -> DomainConfig {
    DomainConfig {
        dir: home.to_path_buf(),
        name: name.into(),
        geometry: Geometry {
            slots,
            frames,
            index_nodes: 8,
        },
        linger: Duration::from_millis(100),
    }
}

/// Checks a quiet domain: the queue (and the allocator under it), every index, the file
/// table, and that every folio an index names is a queued frame caching that page.
/// Returns the allocator's free frames.
fn check_all(domain: &Domain) -> u32 {
    let slots = domain.slots();
    let buddy = domain.buddy();
    let census = domain.queue(&buddy).check(&slots).unwrap();
    for (r, index) in domain.indexes().iter().enumerate() {
        index
            .check()
            .unwrap_or_else(|e| panic!("file {r}'s index: {e}"));
        for (page, entry) in index.entries() {
            if let Entry::Folio { frame, order } = entry {
                assert_eq!(order, 0);
                assert!(
                    census
                        .queued
                        .iter()
                        .any(|(f, file, p)| u64::from(f.0) == frame
                            && *file == FileNo(r as u64)
                            && *p == page),
                    "file {r} page {page}: frame {frame} is not queued for it"
                );
            }
        }
    }
    domain.files().check(&slots).unwrap();
    buddy.check(&slots).unwrap().free_frames
}

/// Reclaims every queued frame as `me` and checks that every frame is then free (no
/// frame leaked: nobody holds a lease or a pin).
fn reclaim_everything(domain: &Domain, me: Holder) {
    let slots = domain.slots();
    let buddy = domain.buddy();
    let queue = domain.queue(&buddy);
    let indexes = domain.indexes();
    let frames = domain.geometry().frames;
    let freed = queue
        .reclaim(frames, me, indexes.as_slice(), &slots, &Unkillable)
        .unwrap();
    assert_eq!(queue.count(), 0, "{} frames still queued", queue.count());
    assert_eq!(
        check_all(domain),
        frames,
        "frames leaked ({freed} reclaimed)"
    );
}

/// Reads `len` bytes at `offset` of `path`'s file through `reader` and compares them with
/// the file's stamp: the wrong bytes (0 when all are right).
fn read_and_compare<R: Run>(
    reader: &SharedReader<'_, R>,
    file: &super::read::SharedFile,
    expected: &[u8],
    offset: u64,
    len: usize,
) -> usize {
    let mut buf = vec![0xa5u8; len];
    let got = reader.read_at(file, &mut buf, offset).unwrap();
    let want_end = (offset as usize + len).min(expected.len());
    let want = &expected[(offset as usize).min(want_end)..want_end];
    assert_eq!(got, want.len(), "read at {offset} of {len}: length");
    want.iter().zip(&buf).filter(|(a, b)| a != b).count()
}

/// One process reads two real files (one with a partial last page) through a domain of
/// 12 frames, whole and then at 400 random places, every byte checked: reclaim runs on
/// most misses. At the end every structure checks, and a reclaim of everything frees
/// every frame.
#[test]
fn one_process_reads_real_files_through_a_small_domain() {
    let home = tempfile::tempdir_in(crate::segment::home::SHARED_DIR).unwrap();
    let data = tempfile::tempdir().unwrap();
    let lens = [37 * 4096 + 123, 20 * 4096];
    let paths: Vec<PathBuf> = (0..2)
        .map(|f| write_file(data.path(), f, lens[f as usize]))
        .collect();
    let expected: Vec<Vec<u8>> = (0..2).map(|f| stamped(f, lens[f as usize])).collect();
    let config = config(home.path(), "read-one", 8, 12);
    let member = Member::attach(&config).unwrap();
    let me = member.holder();
    {
        let reader = SharedReader::new(&member, &member, 2);
        let files: Vec<_> = paths.iter().map(|p| reader.open(p).unwrap()).collect();
        let mut wrong = 0;
        for (f, file) in files.iter().enumerate() {
            wrong += read_and_compare(&reader, file, &expected[f], 0, lens[f] as usize + 100);
        }
        let mut rng = Rng(45);
        for _ in 0..400 {
            let f = rng.below(2) as usize;
            let offset = rng.below(lens[f] + 50);
            let len = 1 + rng.below(3 * 4096) as usize;
            wrong += read_and_compare(&reader, &files[f], &expected[f], offset, len);
        }
        assert_eq!(wrong, 0, "wrong bytes read");
        let counters = reader.counters();
        eprintln!("one process: {counters:?}");
        assert!(counters.hits > 0 && counters.misses > 0, "{counters:?}");
        assert!(
            counters.reclaims > 50 && counters.reclaimed > 50,
            "{counters:?}"
        );
        assert_eq!(counters.preads, counters.misses, "{counters:?}");
        assert_eq!(
            (counters.conflicts, counters.uncached),
            (0, 0),
            "{counters:?}"
        );
        check_all(member.domain());
        for file in files {
            reader.close(file).unwrap();
        }
    }
    // The reader returned its magazine: every frame is queued or free.
    reclaim_everything(member.domain(), me);
    member.detach();
}

/// The counters a child reports in the test's shared words (7 words).
fn report(words: &[crate::primitive::AtomicU64], counters: ReadCounters) {
    let values = [
        counters.hits,
        counters.misses,
        counters.preads,
        counters.conflicts,
        counters.reclaims,
        counters.reclaimed,
        counters.uncached,
    ];
    for (word, value) in words.iter().zip(values) {
        word.store(value, Ordering::Release);
    }
}

fn reported(words: &[crate::primitive::AtomicU64]) -> ReadCounters {
    let v: Vec<u64> = words.iter().map(|w| w.load(Ordering::Acquire)).collect();
    ReadCounters {
        hits: v[0],
        misses: v[1],
        preads: v[2],
        conflicts: v[3],
        reclaims: v[4],
        reclaimed: v[5],
        uncached: v[6],
    }
}

/// A forked member reads a file whole, then exits; then another forked member reads it
/// whole and must hit every page: 0 misses, 0 `pread`s, every byte right.
#[test]
fn a_second_process_hits_every_page_the_first_cached() {
    let home = tempfile::tempdir_in(crate::segment::home::SHARED_DIR).unwrap();
    let data = tempfile::tempdir().unwrap();
    let len: u64 = 40 * 4096 + 100;
    let pages = len.div_ceil(4096);
    let path = write_file(data.path(), 0, len);
    let config = config(home.path(), "read-two", 8, 64);
    // The test stays attached: one steward throughout.
    let parent = Member::attach(&config).unwrap();
    let words = SharedRegion::new(16);
    for (i, child) in [&words.words()[..8], &words.words()[8..]]
        .into_iter()
        .enumerate()
    {
        let (config, path) = (&config, &path);
        let pid = fork(move || {
            let member = Member::attach(config).expect("attach");
            {
                let reader = SharedReader::new(&member, &member, 4);
                let file = reader.open(path).unwrap();
                let expected = stamped(0, len);
                let wrong = read_and_compare(&reader, &file, &expected, 0, len as usize);
                assert_eq!(wrong, 0, "wrong bytes");
                report(&child[..7], reader.counters());
                child[7].store(1, Ordering::Release);
                reader.close(file).unwrap();
            }
            member.detach();
        });
        exited_ok(pid, &format!("member {i}"));
    }
    let (first, second) = (
        reported(&words.words()[..7]),
        reported(&words.words()[8..15]),
    );
    eprintln!("first: {first:?}\nsecond: {second:?}");
    assert_eq!(
        (first.misses, first.preads, first.reclaims),
        (pages, pages, 0),
        "{first:?}"
    );
    assert_eq!(
        (second.hits, second.misses, second.preads),
        (pages, 0, 0),
        "{second:?}"
    );
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}
