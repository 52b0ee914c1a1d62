//! The shared read path (read.rs) across real processes and real files: one process
//! through a domain of few frames (reclaim runs constantly), two processes (the second
//! hits every page the first cached), members killed at lever-chosen steps while they
//! read overlapping files, and (ignored: by hand) the cost of a hit and of a miss beside today's.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::attach::{DomainConfig, Member};
use super::domain::{Domain, Geometry, FRAME_BYTES};
use super::index::Entry;
use super::queue::FileNo;
use super::read::{ReadCounters, SharedReader};
use super::terms::Unkillable;
use super::tests::{
    exited_ok, fork, seed_from_env, AtStep, DomainHome, MemberLever, Rng, SharedRegion, StopAt,
};
use super::tests_files::{swept, Children};
use super::{Died, Holder, Run, Step};
use crate::primitive::Ordering;

/// The bytes of test file `file` of `len` bytes: every 8-byte word names its file, its
/// page and its place in the page, so that a byte read from the wrong file, page or
/// offset is seen.
pub(super) fn stamped(file: u64, len: u64) -> Vec<u8> {
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
pub(super) fn write_file(dir: &Path, file: u64, len: u64) -> PathBuf {
    let path = dir.join(format!("file-{file}"));
    std::fs::write(&path, stamped(file, len)).unwrap();
    path
}

pub(super) fn config(home: &Path, name: &str, slots: u16, frames: u32) -> DomainConfig {
    DomainConfig {
        dir: home.to_path_buf(),
        name: name.into(),
        geometry: Geometry { slots, frames },
        linger: Duration::from_millis(100),
        memory_files: None,
        weight: super::record::Weight::DEFAULT,
    }
}

/// A `Cache` of `capacity_bytes` (its private pages: files it writes or the domain
/// refuses) that shares the domain `name` in `home`: a test process's cache.
pub(super) fn domain_cache(home: &Path, name: &str, capacity_bytes: u64) -> crate::Cache {
    crate::Cache::builder()
        .capacity_bytes(capacity_bytes)
        .segment_dir(home)
        .domain(name)
        .build()
        .unwrap()
}

/// Checks a quiet domain: the queue (and the allocator under it), every index, the file
/// table, and that every folio an index names is a queued frame caching that page.
/// Returns the allocator's free frames.
pub(super) fn check_all(domain: &Domain) -> u32 {
    let slots = domain.slots();
    let buddy = domain.buddy();
    let census = domain.queue().check(&slots).unwrap();
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

/// Reclaims every queued frame as `me`, then releases every tree (nobody reads: the
/// caller's contract of `release`), and checks that every frame is then free (no frame
/// leaked: nobody holds a lease, a pin or a node frame).
pub(super) fn reclaim_everything(domain: &Domain, me: Holder) {
    let slots = domain.slots();
    let buddy = domain.buddy();
    let queue = domain.queue();
    let indexes = domain.indexes();
    let frames = domain.geometry().frames;
    let freed = reclaim_reclaimable(domain, me);
    assert_eq!(queue.count(), 0, "{} frames still queued", queue.count());
    let node_frames = buddy.check(&slots).unwrap().nodes.len() as u32;
    let mut released = 0;
    for index in &indexes {
        released += index.release(me, &slots, &Unkillable).unwrap();
    }
    assert_eq!(released, node_frames, "every tree's node frames released");
    assert_eq!(
        check_all(domain),
        frames,
        "frames leaked ({freed} reclaimed, {released} node frames released)"
    );
}

/// Reclaims as `me` every queued frame reclaim may take (neither pinned nor HELD: a
/// referenced one after its second chance), no member's share kept: how many it freed.
pub(super) fn reclaim_reclaimable(domain: &Domain, me: Holder) -> u32 {
    let slots = domain.slots();
    let indexes = domain.indexes();
    domain
        .queue()
        .reclaim(
            domain.geometry().frames,
            super::queue::Shares::NONE,
            me,
            indexes.as_slice(),
            &slots,
            &Unkillable,
        )
        .unwrap()
}

/// Reads `len` bytes at `offset` of `path`'s file through `reader` and compares them with
/// the file's stamp: the wrong bytes (0 when all are right).
pub(super) fn read_and_compare<R: Run>(
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
    let home = DomainHome::new();
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
        // No readahead (the handle's maximum is 0): a miss reads its request's gaps from
        // the page on, one read per run.
        assert!(counters.preads >= counters.misses, "{counters:?}");
        assert_eq!(counters.windows, 0, "{counters:?}");
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
pub(super) fn report(words: &[crate::primitive::AtomicU64], counters: ReadCounters) {
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

pub(super) fn reported(words: &[crate::primitive::AtomicU64]) -> ReadCounters {
    let v: Vec<u64> = words.iter().map(|w| w.load(Ordering::Acquire)).collect();
    ReadCounters {
        hits: v[0],
        misses: v[1],
        preads: v[2],
        conflicts: v[3],
        reclaims: v[4],
        reclaimed: v[5],
        uncached: v[6],
        ..ReadCounters::default()
    }
}

/// A forked member reads a file whole, then exits (no readahead: its misses read the
/// request's pages, 8 at a time, the cap of a domain of 64 frames); then another forked
/// member reads it whole and must hit every page: 0 misses, 0 `pread`s, every byte right.
#[test]
fn a_second_process_hits_every_page_the_first_cached() {
    let home = DomainHome::new();
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
        (pages.div_ceil(8), pages.div_ceil(8), 0),
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

pub(super) const KILL_FILES: u64 = 3;
const KILL_CHILDREN: usize = 5;
const KILL_ROUNDS: u32 = 12;
pub(super) const KILL_READS: u32 = 40;
/// Words per child in the report: its holder, its wrong bytes, done, 7 counters.
pub(super) const REPORT_WORDS: usize = 10;

pub(super) fn kill_len(file: u64) -> u64 {
    [30 * 4096, 25 * 4096 + 200, 40 * 4096 - 8][file as usize]
}

/// Across real processes, swept by the domain's own steward: `KILL_ROUNDS` rounds of
/// `KILL_CHILDREN` forked members, each reading three overlapping files at random offsets
/// and lengths (every byte checked) through a domain of 40 frames for 96 pages (reclaim
/// runs); about half stop themselves at a step the seeded generator chose (`SIGSTOP` in
/// their `Run`: inside a lock hold, a hand-over, an insertion, a reclaim, or holding a pin
/// for a copy) and the test `SIGKILL`s them there: no sleep decides what is covered. Each
/// round's members are new processes (in the dead ones' slots, new generations). After each
/// round every structure checks; at the end a reclaim of everything frees every frame.
/// `FOLIO_SEED=<n>` replays a run.
#[test]
fn members_killed_at_random_steps_while_reading_leave_a_working_cache() {
    let seed = seed_from_env("shared read kill test");
    let mut rng = Rng(seed);
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..KILL_FILES)
        .map(|f| write_file(data.path(), f, kill_len(f)))
        .collect();
    let config = config(home.path(), "read-kill", 12, 40);
    let parent = Member::attach(&config).unwrap();
    let domain = parent.domain();
    let slots = domain.slots();
    let report_words = SharedRegion::new(REPORT_WORDS * KILL_CHILDREN);
    let mut forked = Children(Vec::new());
    let (mut killed, mut finished) = (0u32, 0u32);
    let mut totals = ReadCounters::default();
    for round in 0..KILL_ROUNDS {
        let mut children = Vec::new();
        for i in 0..KILL_CHILDREN {
            let words = &report_words.words()[REPORT_WORDS * i..REPORT_WORDS * (i + 1)];
            for word in words {
                word.store(0, Ordering::Relaxed);
            }
            let die_at = (rng.below(2) == 0).then(|| rng.below(1500));
            let child_seed = rng.next();
            let (config, paths) = (&config, &paths);
            let pid = fork(move || {
                let member = Member::attach(config).expect("attach");
                words[0].store(member.holder().word(), Ordering::Release);
                let lever = MemberLever::new(&member, StopAt::new(die_at));
                {
                    let reader = SharedReader::new(&member, &lever, 2);
                    let files: Vec<_> = paths.iter().map(|p| reader.open(p).unwrap()).collect();
                    let expected: Vec<Vec<u8>> =
                        (0..KILL_FILES).map(|f| stamped(f, kill_len(f))).collect();
                    let mut rng = Rng(child_seed);
                    let mut wrong = 0;
                    for _ in 0..KILL_READS {
                        let f = rng.below(KILL_FILES) as usize;
                        let offset = rng.below(kill_len(f as u64));
                        let len = 1 + rng.below(3 * 4096) as usize;
                        wrong += read_and_compare(&reader, &files[f], &expected[f], offset, len);
                    }
                    words[1].store(wrong as u64, Ordering::Release);
                    assert_eq!(wrong, 0, "wrong bytes read");
                    report(&words[3..], reader.counters());
                    for file in files {
                        reader.close(file).unwrap();
                    }
                }
                words[2].store(1, Ordering::Release);
                member.detach();
            });
            forked.0.push(pid);
            children.push((pid, i));
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let mut dead = Vec::new();
        while !children.is_empty() {
            let mut i = 0;
            while i < children.len() {
                let (pid, at) = children[i];
                let mut status = 0;
                // SAFETY: waits for our own child, without blocking.
                let got =
                    unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED | libc::WNOHANG) };
                if got == 0 {
                    i += 1;
                    continue;
                }
                assert_eq!(got, pid, "waitpid");
                children.swap_remove(i);
                let words = &report_words.words()[REPORT_WORDS * at..REPORT_WORDS * (at + 1)];
                if libc::WIFSTOPPED(status) {
                    // Stopped by its lever: the death.
                    forked.kill(pid);
                    killed += 1;
                    dead.push(Holder::from_word(words[0].load(Ordering::Acquire)));
                    continue;
                }
                forked.0.retain(|p| *p != pid);
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                    "round {round}: member {at} failed: status {status:#x}, {} wrong bytes \
                     (FOLIO_SEED={seed})",
                    words[1].load(Ordering::Acquire)
                );
                assert_eq!(words[2].load(Ordering::Acquire), 1);
                let c = reported(&words[3..]);
                totals.hits += c.hits;
                totals.misses += c.misses;
                totals.preads += c.preads;
                totals.conflicts += c.conflicts;
                totals.reclaims += c.reclaims;
                totals.reclaimed += c.reclaimed;
                totals.uncached += c.uncached;
                finished += 1;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: the members never all ended (FOLIO_SEED={seed})"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        for holder in dead {
            swept(&slots, holder);
        }
        check_all(domain);
    }
    eprintln!(
        "shared read kill test: {killed} killed, {finished} finished; the finished: {totals:?}"
    );
    assert!(
        killed >= KILL_ROUNDS && finished >= KILL_ROUNDS,
        "too few kills or survivors: {killed}, {finished} (FOLIO_SEED={seed})"
    );
    assert!(totals.reclaimed > 0 && totals.hits > 0, "{totals:?}");
    reclaim_everything(domain, parent.holder());
    parent.detach();
}

// The cost of a 64-byte hit (docs/sharing.md, "The shared read path"): of a page another
// process cached, of a page this process cached, through a `Cache` with a domain (its
// `File::read_at`, the whole path a user calls), and today's `Cache` hit (`File::read_at`
// of 64 bytes on a cached file), in paired rounds:
// `cargo test --release -p folio --lib shared::tests_read::a_hit_costs -- --ignored
// --nocapture`.
#[test]
#[ignore]
fn a_hit_costs() {
    use std::time::Instant;
    const PAGES: u64 = 16;
    const N: usize = 200_000;
    const ROUNDS: usize = 15;
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let len = PAGES * 4096;
    let (theirs, ours, todays, domains) = (
        write_file(data.path(), 0, len),
        write_file(data.path(), 1, len),
        write_file(data.path(), 2, len),
        write_file(data.path(), 3, len),
    );
    let config = config(home.path(), "read-costs", 8, 256);
    let member = Member::attach(&config).unwrap();
    // Another process caches `theirs`.
    let pid = {
        let (config, theirs) = (&config, &theirs);
        fork(move || {
            let member = Member::attach(config).expect("attach");
            {
                let reader = SharedReader::new(&member, &member, 8);
                let file = reader.open(theirs).unwrap();
                let mut buf = vec![0u8; len as usize];
                reader.read_at(&file, &mut buf, 0).unwrap();
                reader.close(file).unwrap();
            }
            member.detach();
        })
    };
    exited_ok(pid, "the caching process");
    let reader = SharedReader::new(&member, &member, 8);
    let (theirs, ours) = (reader.open(&theirs).unwrap(), reader.open(&ours).unwrap());
    let mut buf = vec![0u8; len as usize];
    reader.read_at(&ours, &mut buf, 0).unwrap();
    let before = reader.counters();
    let cache = crate::Cache::builder()
        .capacity_bytes(16 << 20)
        .build()
        .unwrap();
    let today = cache.open(&todays).unwrap();
    today.read_at(&mut buf, 0).unwrap();
    let domain_cache = crate::Cache::builder()
        .capacity_bytes(16 << 20)
        .segment_dir(home.path())
        .domain("read-costs-cache")
        .build()
        .unwrap();
    let via_cache = domain_cache.open(&domains).unwrap();
    assert!(via_cache.is_domain_file());
    via_cache.read_at(&mut buf, 0).unwrap();
    let mut rng = Rng(7);
    let offsets: Vec<u64> = (0..N)
        .map(|_| rng.below(PAGES) * 4096 + rng.below(4096 - 64))
        .collect();
    let mut small = [0u8; 64];
    let mut sum = 0u64;
    let (mut cross, mut own, mut through, mut base) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let mut time = |read: &mut dyn FnMut(&mut [u8], u64)| {
            let started = Instant::now();
            for &offset in &offsets {
                read(&mut small, offset);
                sum = sum.wrapping_add(u64::from(small[0]));
            }
            started.elapsed().as_nanos() as f64 / N as f64
        };
        cross.push(time(&mut |b, o| {
            reader.read_at(&theirs, b, o).unwrap();
        }));
        own.push(time(&mut |b, o| {
            reader.read_at(&ours, b, o).unwrap();
        }));
        through.push(time(&mut |b, o| {
            via_cache.read_at(b, o).unwrap();
        }));
        base.push(time(&mut |b, o| {
            today.read_at(b, o).unwrap();
        }));
    }
    let after = reader.counters();
    assert_eq!(after.misses, before.misses, "every timed read was a hit");
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ratios = |a: &[f64]| -> Vec<f64> { a.iter().zip(&base).map(|(x, y)| x / y).collect() };
    let (rc, ro, rt) = (ratios(&cross), ratios(&own), ratios(&through));
    let spread = |r: &[f64]| {
        let mut r = r.to_vec();
        r.sort_by(f64::total_cmp);
        (r[0], median(&r), r[r.len() - 1])
    };
    eprintln!(
        "64-byte hit, ns (median of {ROUNDS} rounds of {N}): another process's page {:.1}, \
         this process's {:.1}, a domain Cache's File {:.1}, today's Cache {:.1}; ratio to \
         today's (min, median, max): another's {:.2?}, own {:.2?}, domain Cache's {:.2?} \
         (checksum {sum})",
        median(&cross),
        median(&own),
        median(&through),
        median(&base),
        spread(&rc),
        spread(&ro),
        spread(&rt)
    );
    reader.close(theirs).unwrap();
    reader.close(ours).unwrap();
    drop(reader);
    member.detach();
}

/// This process's CPU time so far (all its threads: today's cache may read on others).
fn process_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0);
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

// The CPU of a miss (docs/sharing.md, "The shared read path"): 4 KiB reads of a cold file's
// pages in a random order (no readahead helps today's), through the shared path (a frame
// from the magazine, the `pread` into it, the hand-over, the insertion, the copy) and
// through today's `Cache` (at its defaults, and reading one page a miss), alternating, 3
// rounds, each on new files written and synced:
// `cargo test --release -p folio --lib shared::tests_read::a_miss_costs -- --ignored
// --nocapture`. The data area as the steward populates it ahead (populate.rs).
// `a_miss_costs_prefaulted` first touches every page of the region's data area in this
// process (each page in the file and mapped here); `a_miss_costs_populated_elsewhere`
// populates every page through another mapping (in the file, not mapped here: what a
// member finds when the steward stays ahead), so the difference between the two is the
// member's minor fault of each page. The steward's CPU in the shared rounds is printed
// beside (the population's cost, moved out of the member).
#[test]
#[ignore]
fn a_miss_costs() {
    miss_costs(DataArea::AsMapped);
}

#[test]
#[ignore]
fn a_miss_costs_prefaulted() {
    miss_costs(DataArea::Prefaulted);
}

#[test]
#[ignore]
fn a_miss_costs_populated_elsewhere() {
    miss_costs(DataArea::PopulatedElsewhere);
}

/// Whether the miss measurement populates the data area's pages first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DataArea {
    /// As the steward populates it.
    AsMapped,
    /// Every page touched through this process's mapping.
    Prefaulted,
    /// Every page populated through another mapping (in the file, not mapped here).
    PopulatedElsewhere,
}

/// The CPU time process `pid` has used so far (its CPU clock), if it can be read.
fn cpu_of(pid: u32) -> Option<Duration> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: writes one clockid_t we own.
    if unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) } != 0 {
        return None;
    }
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec we own.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
        return None;
    }
    Some(Duration::new(now.tv_sec as u64, now.tv_nsec as u32))
}

fn miss_costs(area: DataArea) {
    use std::time::Instant;
    const PAGES: u64 = 2048;
    const ROUNDS: u64 = 3;
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let config = config(home.path(), "read-miss", 8, (PAGES * ROUNDS) as u32 + 64);
    let member = Member::attach(&config).unwrap();
    match area {
        DataArea::AsMapped => {}
        DataArea::Prefaulted => {
            for f in 0..config.geometry.frames {
                let data = member.domain().frame_data(super::stack::Frame(f));
                // SAFETY: every frame is free (nobody reads or writes its bytes: read.rs);
                // one byte of its page, inside the mapping.
                unsafe { data.write_volatile(0) };
            }
        }
        DataArea::PopulatedElsewhere => {
            let dir =
                crate::segment::SegmentDir::open(home.path(), crate::segment::DiskDir::Refused)
                    .unwrap();
            let files = super::domain::DomainFiles::of(&config.name).unwrap();
            let other = Domain::open(&dir, &files).unwrap();
            other.populate_data(0..config.geometry.frames).unwrap();
        }
    }
    let reader = SharedReader::new(&member, &member, 16);
    let cache = crate::Cache::builder()
        .capacity_bytes(64 << 20)
        .build()
        .unwrap();
    // Today's at these defaults reads some missed pages together with their neighbours (a
    // round of 2,048 reads made 1,647 reads of the disk): this one reads one page a miss,
    // as the shared path does, so that the two misses compare one `pread` each.
    let one_page = crate::Cache::builder()
        .capacity_bytes(64 << 20)
        .readahead_max_bytes(0)
        .folio_order_max(0)
        .build()
        .unwrap();
    let mut rng = Rng(11);
    let mut order: Vec<u64> = (0..PAGES).collect();
    let mut page = vec![0u8; 4096];
    for round in 0..ROUNDS {
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let (shared_path, today_path, one_page_path) = (
            write_file(data.path(), 3 * round, PAGES * 4096),
            write_file(data.path(), 3 * round + 1, PAGES * 4096),
            write_file(data.path(), 3 * round + 2, PAGES * 4096),
        );
        for path in [&shared_path, &today_path, &one_page_path] {
            std::fs::File::open(path).unwrap().sync_all().unwrap();
        }
        let file = reader.open(&shared_path).unwrap();
        // Today's default window (`CacheBuilder::readahead_max_bytes`), as today's `Cache`.
        file.set_readahead_pages((crate::cache::READAHEAD_MAX_BYTES_DEFAULT / 4096) as u32);
        let before = reader.counters();
        let steward = member.steward().pid;
        let steward_before = cpu_of(steward);
        let (cpu, wall) = (process_cpu(), Instant::now());
        for &p in &order {
            reader.read_at(&file, &mut page, p * 4096).unwrap();
        }
        let (shared_cpu, shared_wall) = (process_cpu() - cpu, wall.elapsed());
        let steward_cpu = steward_before
            .zip(cpu_of(steward))
            .map_or(Duration::ZERO, |(from, to)| to.saturating_sub(from));
        let after = reader.counters();
        // A page read with a window before its read is a hit.
        assert_eq!(
            after.misses + after.hits - before.misses - before.hits,
            PAGES,
            "{after:?}"
        );
        let shared_preads = after.preads - before.preads;
        let today = cache.open(&today_path).unwrap();
        let stats = cache.stats();
        let (cpu, wall) = (process_cpu(), Instant::now());
        for &p in &order {
            today.read_at(&mut page, p * 4096).unwrap();
        }
        let (today_cpu, today_wall) = (process_cpu() - cpu, wall.elapsed());
        let after_stats = cache.stats();
        // Whether today's read one page per miss as the shared path does (its reads and
        // bytes read in the round).
        let (today_misses, today_ios, today_io_bytes) = (
            after_stats.misses - stats.misses,
            after_stats.io_requests - stats.io_requests,
            after_stats.io_bytes - stats.io_bytes,
        );
        let one = one_page.open(&one_page_path).unwrap();
        let stats = one_page.stats();
        let (cpu, wall) = (process_cpu(), Instant::now());
        for &p in &order {
            one.read_at(&mut page, p * 4096).unwrap();
        }
        let (one_cpu, one_wall) = (process_cpu() - cpu, wall.elapsed());
        let one_ios = one_page.stats().io_requests - stats.io_requests;
        assert_eq!(one_ios, PAGES, "one page a read");
        let per = |d: Duration| d.as_nanos() as f64 / PAGES as f64 / 1000.0;
        eprintln!(
            "round {round} ({area:?}): a 4 KiB miss, µs of process CPU (wall): shared {:.1} \
             ({:.1}), {shared_preads} reads of the file; today's Cache {:.1} ({:.1}); the \
             steward's CPU meanwhile {:.2} a miss; today's {today_misses} misses, {today_ios} \
             reads of {today_io_bytes} bytes; \
             today's one page a read {:.1} ({:.1})",
            per(shared_cpu),
            per(shared_wall),
            per(today_cpu),
            per(today_wall),
            per(steward_cpu),
            per(one_cpu),
            per(one_wall)
        );
        reader.close(file).unwrap();
    }
    drop(reader);
    member.detach();
}

/// A lever for `an_optimistic_hit_of_a_frame_reused_during_its_copy_does_not_validate`:
/// at the first `Step::Found` (an optimistic hit has found its frame and read its
/// generation, and not copied yet) it reclaims every queued frame, leases every free frame,
/// fills each with 0xee (another process's new data) and frees them again.
#[derive(Default)]
struct ReuseAtFound {
    fired: Cell<bool>,
}

impl AtStep for ReuseAtFound {
    fn at(&self, member: &Member, step: Step) -> Result<(), Died> {
        if step != Step::Found || self.fired.replace(true) {
            return Ok(());
        }
        let domain = member.domain();
        let me = member.holder();
        let slots = domain.slots();
        let buddy = domain.buddy();
        let freed = reclaim_reclaimable(domain, me);
        assert!(freed > 0, "nothing reclaimed under the hit");
        let mut leased = Vec::new();
        while let Some(frame) = buddy
            .alloc(super::buddy::Order(0), me, &slots, &Unkillable)
            .unwrap()
        {
            // SAFETY: the frame is leased to us: FRAME_BYTES of the mapping; the only
            // other access is the hit's byte-wise atomic copy, which this thread makes
            // after we return (we run at its `Step::Found`).
            unsafe { std::ptr::write_bytes(domain.frame_data(frame), 0xee, FRAME_BYTES) };
            leased.push(frame);
        }
        for frame in leased {
            buddy
                .free(frame, super::buddy::Order(0), me, &slots, &Unkillable)
                .unwrap();
        }
        Ok(())
    }
}

/// Reads page 1 of a file (cached by a first read) through a reader whose lever reclaims
/// and reuses every frame between the optimistic hit's look-ups and its copy
/// (deterministic: one process, the race forced at `Step::Found`): the wrong bytes read, and the
/// reader's counters.
fn reuse_during_the_copy(name: &str, flaw: super::Flaw) -> (usize, ReadCounters) {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let len = 4 * 4096;
    let path = write_file(data.path(), 0, len);
    let expected = stamped(0, len);
    let member = Member::attach(&config(home.path(), name, 8, 16)).unwrap();
    let result = {
        let lever = ReuseAtFound::default();
        let run = MemberLever::new(&member, &lever).with_flaw(flaw);
        let reader = SharedReader::new(&member, &run, 1);
        let file = reader.open(&path).unwrap();
        // The first read misses (no Step::Found: nothing is cached yet).
        assert_eq!(read_and_compare(&reader, &file, &expected, 4096, 4096), 0);
        assert_eq!(reader.counters().misses, 1);
        let wrong = read_and_compare(&reader, &file, &expected, 4096, 4096);
        assert!(lever.fired.get(), "the hit never reached Step::Found");
        let counters = reader.counters();
        reader.close(file).unwrap();
        (wrong, counters)
    };
    reclaim_everything(member.domain(), member.holder());
    member.detach();
    result
}

/// The optimistic hit's copy raced by a reclaim and a reuse of its frame (forced by a
/// lever before the copy: the copy reads the reused frame) does not validate: the copy is
/// discarded, the page missed and read again, every byte right.
#[test]
fn an_optimistic_hit_of_a_frame_reused_during_its_copy_does_not_validate() {
    let (wrong, counters) = reuse_during_the_copy("read-reuse", super::Flaw::None);
    eprintln!("reused during the copy: {counters:?}");
    assert_eq!(
        wrong, 0,
        "a reused frame's bytes were returned: {counters:?}"
    );
    assert_eq!(counters.stale, 1, "{counters:?}");
    assert_eq!((counters.misses, counters.hits), (2, 0), "{counters:?}");
}

/// The same race with the check after the copy left out (`Flaw::NoRecheck`): the reused
/// frame's bytes are returned, which shows that the lever does reach the race.
#[test]
fn an_optimistic_hit_without_its_check_returns_a_reused_frame() {
    let (wrong, counters) = reuse_during_the_copy("read-reuse-broken", super::Flaw::NoRecheck);
    assert!(wrong > 4000, "{wrong} wrong bytes: {counters:?}");
    assert_eq!(counters.hits, 1, "{counters:?}");
}

/// A lever for `an_optimistic_hit_of_a_frame_moved_to_another_page_does_not_validate`: at
/// the first `Step::Walked` (an optimistic hit has walked to its frame's slot and loaded
/// nothing of the frame) it removes page `from` of file record `record` (its frame freed,
/// the tree's nodes pruned to its pool), leases that frame again, fills it with 0xee and
/// caches it as page `to` (the pruned nodes linked again: the hit's slot names the frame
/// again, for `to`).
struct MoveAtWalked {
    record: u32,
    from: u64,
    to: u64,
    fired: Cell<bool>,
}

impl AtStep for MoveAtWalked {
    fn at(&self, member: &Member, step: Step) -> Result<(), Died> {
        if step != Step::Walked || self.fired.replace(true) {
            return Ok(());
        }
        let domain = member.domain();
        let me = member.holder();
        let slots = domain.slots();
        let buddy = domain.buddy();
        let queue = domain.queue();
        let indexes = domain.indexes();
        let file = FileNo(u64::from(self.record));
        let index = &indexes[self.record as usize];
        let Entry::Folio { frame, order: 0 } = index.lookup(self.from) else {
            panic!("page {} is not cached", self.from);
        };
        let frame = super::stack::Frame(frame as u32);
        let removed = queue
            .remove(
                frame,
                file,
                self.from,
                me,
                indexes.as_slice(),
                &slots,
                &Unkillable,
            )
            .unwrap();
        assert_eq!(removed, super::queue::Removed::Freed);
        let mut others = Vec::new();
        loop {
            let leased = buddy
                .alloc(super::buddy::Order(0), me, &slots, &Unkillable)
                .unwrap()
                .expect("the removed frame is free");
            if leased == frame {
                break;
            }
            others.push(leased);
        }
        // SAFETY: the frame is leased to us: FRAME_BYTES of the mapping; the only other
        // access is the hit's byte-wise atomic copy, which this thread makes after we
        // return.
        unsafe { std::ptr::write_bytes(domain.frame_data(frame), 0xee, FRAME_BYTES) };
        queue
            .hand_over(
                frame,
                file,
                self.to,
                me,
                indexes.as_slice(),
                &slots,
                &Unkillable,
            )
            .unwrap();
        let folio = super::index::Folio {
            frame: u64::from(frame.0),
            order: 0,
        };
        let placed = index
            .insert_run(me, self.to, &[folio], &slots, &Unkillable)
            .unwrap();
        assert!(matches!(placed[0], super::index::Placed::Inserted(_)));
        queue.unpin(frame, me);
        for other in others {
            buddy
                .free(other, super::buddy::Order(0), me, &slots, &Unkillable)
                .unwrap();
        }
        Ok(())
    }
}

/// Reads page 64 of a 130-page file (cached alone by a first read) through a reader whose
/// lever, between the optimistic hit's walk and its first load of the frame, removes the
/// page and caches its frame again as page 128 (deterministic: one process, the move
/// forced at `Step::Walked`): the wrong bytes read, and the reader's counters.
fn move_during_the_hit(name: &str, flaw: super::Flaw) -> (usize, ReadCounters) {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let len = 130 * 4096;
    let path = write_file(data.path(), 0, len);
    let expected = stamped(0, len);
    let member = Member::attach(&config(home.path(), name, 8, 16)).unwrap();
    let result = {
        let plain = SharedReader::new(&member, &member, 1);
        let file = plain.open(&path).unwrap();
        let lever = MoveAtWalked {
            record: file.id().index,
            from: 64,
            to: 128,
            fired: Cell::new(false),
        };
        let run = MemberLever::new(&member, &lever).with_flaw(flaw);
        // The first read misses and caches page 64 alone.
        assert_eq!(
            read_and_compare(&plain, &file, &expected, 64 * 4096, 4096),
            0
        );
        let reader = SharedReader::new(&member, &run, 1);
        let wrong = read_and_compare(&reader, &file, &expected, 64 * 4096, 4096);
        assert!(lever.fired.get(), "the hit never reached Step::Walked");
        let counters = reader.counters();
        drop(reader);
        plain.close(file).unwrap();
        (wrong, counters)
    };
    reclaim_everything(member.domain(), member.holder());
    member.detach();
    result
}

/// The optimistic hit's frame removed and cached again as another page between its walk
/// and its checks, its slot's node pruned and linked again so that the slot the walk
/// ended at names the frame again (forced by a lever): the hit does not validate (the
/// frame's page is not the one asked for), the page is missed and read again, every byte
/// right.
#[test]
fn an_optimistic_hit_of_a_frame_moved_to_another_page_does_not_validate() {
    let (wrong, counters) = move_during_the_hit("read-move", super::Flaw::None);
    eprintln!("moved during the hit: {counters:?}");
    assert_eq!(wrong, 0, "another page's bytes were returned: {counters:?}");
    assert_eq!(counters.stale, 1, "{counters:?}");
    assert_eq!((counters.misses, counters.hits), (1, 0), "{counters:?}");
}

/// The same move with the check of the frame's page left out (`Flaw::NoPageCheck`): the
/// slot loaded again names the frame (its node now holds page 128's slot), and the moved
/// frame's bytes are returned, which shows that the lever reaches the race.
#[test]
fn an_optimistic_hit_without_its_page_check_returns_a_moved_frame() {
    let (wrong, counters) = move_during_the_hit("read-move-broken", super::Flaw::NoPageCheck);
    assert!(wrong > 4000, "{wrong} wrong bytes: {counters:?}");
    assert_eq!(counters.hits, 1, "{counters:?}");
}

/// The systems `a_random_miss_through_caches` reads through (`FOLIO_MISS_ONLY` names one).
const MISS_SYSTEMS: [&str; 4] = ["domain", "today", "domain-one-page", "today-one-page"];

/// Reads `order`'s pages (4 KiB each) of `file` once each: the measured loop, out of line
/// so that a profile shows it as one function.
#[inline(never)]
fn read_pages_once(file: &crate::File, order: &[u64], page: &mut [u8]) -> u64 {
    let mut sum = 0u64;
    for &p in order {
        assert_eq!(file.read_at(page, p * 4096).unwrap(), 4096);
        sum = sum.wrapping_add(u64::from(page[8]));
    }
    sum
}

// The CPU of a random 4 KiB miss through `File::read_at` of a `Cache` with a domain beside
// today's private `Cache` (issue 45's done-when 2: "a miss's CPU <= today's + 1 us";
// docs/sharing.md, "The shared read path", "Measured"), in one binary, paired round by
// round: each round writes and syncs new files of `FOLIO_MISS_PAGES` pages (2,048) and
// reads each page once in one shuffled order (the first `FOLIO_MISS_READS` of it, all by
// default) through each system in turn: `domain` (a domain `Cache` at its defaults),
// `today` (a private `Cache` at its defaults: it reads some missed pages with their
// neighbours into larger folios), and the two reading one page a miss (`..-one-page`:
// readahead off; today's folios of one page). Prints per system the median over the
// rounds of the process's CPU (every thread: today's reads complete on another) per read
// and the paired differences to today's. `FOLIO_MISS_ROUNDS` (7), `FOLIO_MISS_ONLY=<system>`
// (one system: for callgrind, whose instruction count per miss is the difference of a
// run with `FOLIO_MISS_READS=0` and one with reads, divided by the reads):
// `cargo test --release -p folio --lib shared::tests_read::a_random_miss_through_caches --
// --ignored --nocapture`.
#[test]
#[ignore]
fn a_random_miss_through_caches() {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .map_or(default, |v| v.parse().expect(name))
    };
    let pages = var("FOLIO_MISS_PAGES", 2048);
    let reads = var("FOLIO_MISS_READS", pages).min(pages) as usize;
    let rounds = var("FOLIO_MISS_ROUNDS", 7);
    let only = std::env::var("FOLIO_MISS_ONLY").ok();
    let systems: Vec<&str> = MISS_SYSTEMS
        .iter()
        .copied()
        .filter(|s| only.as_deref().is_none_or(|o| o == *s))
        .collect();
    assert!(
        !systems.is_empty(),
        "FOLIO_MISS_ONLY: one of {MISS_SYSTEMS:?}"
    );
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let capacity = (pages * 4096 * rounds).max(16 << 20) + (8 << 20);
    let build = |system: &str| {
        let mut b = crate::Cache::builder().capacity_bytes(capacity);
        if system.ends_with("one-page") {
            b = b.readahead_max_bytes(0).folio_order_max(0);
        }
        if system.starts_with("domain") {
            b = b.segment_dir(home.path()).domain(format!("miss-{system}"));
        }
        b.build().unwrap()
    };
    let caches: Vec<crate::Cache> = systems.iter().map(|s| build(s)).collect();
    let mut rng = Rng(13);
    let mut order: Vec<u64> = (0..pages).collect();
    let mut page = vec![0u8; 4096];
    let mut cpu_us: Vec<Vec<f64>> = vec![Vec::new(); systems.len()];
    let mut sum = 0u64;
    for round in 0..rounds {
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for (s, cache) in caches.iter().enumerate() {
            let path = write_file(data.path(), round * 8 + s as u64, pages * 4096);
            std::fs::File::open(&path).unwrap().sync_all().unwrap();
            let file = cache.open(&path).unwrap();
            assert_eq!(file.is_domain_file(), systems[s].starts_with("domain"));
            let before = process_cpu();
            sum = sum.wrapping_add(read_pages_once(&file, &order[..reads], &mut page));
            let cpu = process_cpu() - before;
            cpu_us[s].push(cpu.as_nanos() as f64 / reads.max(1) as f64 / 1000.0);
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    for (s, system) in systems.iter().enumerate() {
        let reads_of_files = match caches[s].domain_stats() {
            Some(d) => format!(
                "{} misses, {} preads, {} read ahead, {} windows",
                d.misses, d.preads, d.pages_read_ahead, d.windows
            ),
            None => {
                let st = caches[s].stats();
                format!(
                    "{} misses, {} reads of {} pages, {} windows on a miss, {} at a marker",
                    st.misses,
                    st.io_requests,
                    st.io_bytes / 4096,
                    st.readahead_sync,
                    st.readahead_async
                )
            }
        };
        eprintln!(
            "{system}: {:.2} us of CPU a read (median of {rounds} rounds: {:.1?}); {reads_of_files}",
            median(&cpu_us[s]),
            cpu_us[s]
        );
    }
    for (shared, today) in [(0, 1), (2, 3)] {
        if systems.len() == MISS_SYSTEMS.len() {
            let diff: Vec<f64> = cpu_us[shared]
                .iter()
                .zip(&cpu_us[today])
                .map(|(a, b)| a - b)
                .collect();
            eprintln!(
                "{} - {}: median of the paired differences {:+.2} us ({:+.1?})",
                systems[shared],
                systems[today],
                median(&diff),
                diff
            );
        }
    }
    eprintln!("(checksum {sum})");
}
