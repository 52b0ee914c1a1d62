//! A domain file's lifecycle (issue 45; files.rs "Drops", mapping/domain.rs): the rule in
//! one process (a file this process wrote is read privately until it is clean; a domain
//! handle of a file this process then writes reads the writes), a removed file's record
//! and pages dropped, a changed file's old record dropped and the new bytes read through
//! the domain, a full table's eviction; and a drop stopped and `SIGKILL`ed at every step,
//! swept by the steward, leaving a domain that checks (no frame leaked, no record naming a
//! freed frame), whose next drop finishes the record. Real files, every byte checked.

use std::path::Path;
use std::time::Duration;

use super::attach::Member;
use super::domain::Domain;
use super::files::{FileId, Removal};
use super::index::Entry;
use super::read::{key_of, SharedReader};
use super::tests::{fork, wait_for, DomainHome, MemberLever, SharedRegion, StopAt};
use super::tests_files::swept;
use super::tests_read::{check_all, config, reclaim_everything, stamped, write_file};
use super::Holder;
use crate::primitive::Ordering;
use crate::Cache;

/// The domain's slots: as a cache's build makes them (one pin bit each).
const SLOTS: u16 = super::queue::PIN_SLOTS;

/// A cache of `name`'s domain (its parent member made it), 1 MiB of private memory; its
/// dirty pages written back only by a sync (no expiry during a test: no timing).
fn domain_cache(home: &Path, name: &str) -> Cache {
    Cache::builder()
        .capacity_bytes(1 << 20)
        .dirty_expire(Duration::from_secs(3600))
        .segment_dir(home)
        .domain(name)
        .build()
        .unwrap()
}

/// The record of `path`'s file in `domain`, if it has one.
fn record_of(domain: &Domain, path: &Path) -> Option<FileId> {
    let meta = std::fs::metadata(path).unwrap();
    domain.files().lookup(&key_of(&meta)).map(|found| found.id)
}

/// The folios record `id`'s tree names.
fn folios_of(domain: &Domain, id: FileId) -> usize {
    domain.indexes()[id.index as usize]
        .entries()
        .iter()
        .filter(|(_, entry)| matches!(entry, Entry::Folio { .. }))
        .count()
}

fn read_all(file: &crate::File, len: usize) -> Vec<u8> {
    let mut buf = vec![0xa5u8; len + 100];
    let got = file.read_at(&mut buf, 0).unwrap();
    buf.truncate(got);
    buf
}

/// A file this process wrote and has not written back is read privately, whatever the
/// handle: while its writable handle is open and while its pages are dirty, a read-only
/// open is not admitted (counted) and reads the written bytes; once written back and
/// closed, it is admitted and reads them from the disk. Before the rule, the read-only
/// open was admitted and read the disk's older bytes.
#[test]
fn a_file_written_here_is_read_privately_until_it_is_clean() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let name = "records-written";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 64)).unwrap();
    let cache = domain_cache(home.path(), name);
    let len = 5 * 4096 + 10;
    let path = write_file(data.path(), 0, len);
    let new = stamped(1, len);
    let writer = cache.open_options().write(true).open(&path).unwrap();
    assert_eq!(writer.write_at(&new, 0).unwrap(), new.len());
    // The writable handle open: private.
    let reader = cache.open(&path).unwrap();
    assert!(read_all(&reader, len as usize) == new, "the written bytes");
    assert!(!reader.is_domain_file());
    drop(reader);
    drop(writer);
    // Closed, the pages dirty: private still.
    let reader = cache.open(&path).unwrap();
    assert!(read_all(&reader, len as usize) == new, "the written bytes");
    assert!(!reader.is_domain_file());
    drop(reader);
    assert_eq!(cache.domain_stats().unwrap().files_newer_here, 2);
    // Written back: the disk has the bytes, the domain reads them.
    cache.sync_all_files().unwrap();
    let reader = cache.open(&path).unwrap();
    assert!(reader.is_domain_file());
    assert_eq!(read_all(&reader, len as usize), new);
    drop(reader);
    drop(cache);
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// A file read through the domain, then opened for writing and written by this process:
/// the domain handle reads the writes (it is retired: private from the writable open on);
/// the writable open made this process the record's writer (docs/sharing.md "Writes seen
/// across processes"), so the record is not retired and the written page is the domain's
/// at once; once the writable handle is closed and the writes are on disk, the writer
/// detaches (its mark gone, the stamp the file's) and the next read-only open is a domain
/// file of the same record, reading the new bytes through the domain. Before the rule, the
/// domain handle read the domain's old pages; before writes went into the domain, that
/// open was refused and the record's old pages dropped.
#[test]
fn a_domain_file_then_written_here_reads_the_writes() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let name = "records-then-written";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 64)).unwrap();
    let cache = domain_cache(home.path(), name);
    let len = 4 * 4096;
    let path = write_file(data.path(), 0, len);
    let old = stamped(0, len);
    let domain_handle = cache.open(&path).unwrap();
    assert!(domain_handle.is_domain_file());
    assert_eq!(read_all(&domain_handle, len as usize), old);
    let first = record_of(parent.domain(), &path).unwrap();
    assert_eq!(folios_of(parent.domain(), first), 4);
    // Written here: the domain handle reads the writes.
    let writer = cache.open_options().write(true).open(&path).unwrap();
    assert!(
        parent.domain().files().writer(first).is_some(),
        "the record's writer"
    );
    let new = stamped(1, len);
    assert_eq!(writer.write_at(&new[4096..8192], 4096).unwrap(), 4096);
    let mut expected = old.clone();
    expected[4096..8192].copy_from_slice(&new[4096..8192]);
    assert!(
        read_all(&domain_handle, len as usize) == expected,
        "the written bytes"
    );
    assert!(!domain_handle.is_domain_file());
    assert_eq!(cache.domain_stats().unwrap().installs, 1);
    drop(writer);
    cache.sync_all_files().unwrap();
    assert_eq!(
        parent.domain().files().writer(first),
        None,
        "detached once clean"
    );
    // Not refused: the record was kept current by its writer.
    let again = cache.open(&path).unwrap();
    assert!(again.is_domain_file());
    assert_eq!(read_all(&again, len as usize), expected);
    assert_eq!(record_of(parent.domain(), &path).unwrap(), first);
    drop(again);
    drop(domain_handle);
    let stats = cache.domain_stats().unwrap();
    assert_eq!(stats.files_refused, 0, "{stats:?}");
    drop(cache);
    check_all(parent.domain());
    reclaim_everything(parent.domain(), parent.holder());
    parent.detach();
}

/// `Cache::remove_file` of a file read through the domain (no handle open): its record
/// and its pages go (the tree's node frame too); with a handle open, the record stays
/// (the handle reads on) until that handle's close. A file changed since its record was made (another
/// modification time) and open nowhere: its old record and pages dropped, the new bytes
/// read through the domain. Before, the first kept its record and pages, and the last
/// was refused.
#[test]
fn a_removed_or_changed_files_record_and_pages_are_dropped() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let name = "records-removed";
    let parent = Member::attach(&config(home.path(), name, SLOTS, 64)).unwrap();
    let domain = parent.domain();
    let cache = domain_cache(home.path(), name);
    let len = 6 * 4096 + 7;
    let paths: Vec<_> = (0..3).map(|f| write_file(data.path(), f, len)).collect();
    let mut ids = Vec::new();
    for (f, path) in paths.iter().enumerate() {
        let file = cache.open(path).unwrap();
        assert!(file.is_domain_file());
        assert_eq!(read_all(&file, len as usize), stamped(f as u64, len));
        ids.push(record_of(domain, path).unwrap());
        assert_eq!(folios_of(domain, ids[f]), 7);
    }
    // Nobody has it open: dropped.
    let free_before = check_all(domain);
    cache.remove_file(&paths[0]).unwrap();
    assert_eq!(folios_of(domain, ids[0]), 0);
    assert!(domain.indexes()[ids[0].index as usize]
        .node_frames()
        .is_empty());
    let census = domain.files().check(&domain.slots()).unwrap();
    assert!(census.iter().all(|record| record.id != ids[0]));
    assert_eq!(census.len(), 2);
    assert_eq!(
        check_all(domain),
        free_before + 7 + 1,
        "its 7 pages and its tree's node frame freed"
    );
    // Open here: the record stays, the handle reads on.
    let open = cache.open(&paths[1]).unwrap();
    let key = key_of(&std::fs::metadata(&paths[1]).unwrap());
    cache.remove_file(&paths[1]).unwrap();
    assert_eq!(
        domain.files().lookup(&key).map(|found| found.id),
        Some(ids[1])
    );
    assert_eq!(read_all(&open, len as usize), stamped(1, len));
    drop(open);
    // Its last close here drops it.
    assert_eq!(domain.files().lookup(&key), None);
    assert_eq!(folios_of(domain, ids[1]), 0);
    // Changed, open nowhere: a new record, the new bytes.
    let new = stamped(5, len);
    std::fs::write(&paths[2], &new).unwrap();
    let later = std::fs::metadata(&paths[2]).unwrap().modified().unwrap() + Duration::from_secs(7);
    std::fs::File::options()
        .write(true)
        .open(&paths[2])
        .unwrap()
        .set_modified(later)
        .unwrap();
    let changed = cache.open(&paths[2]).unwrap();
    assert!(changed.is_domain_file());
    assert_eq!(read_all(&changed, len as usize), new);
    let made = record_of(domain, &paths[2]).unwrap();
    assert_ne!(made, ids[2]);
    drop(changed);
    assert_eq!(cache.domain_stats().unwrap().files_refused, 0);
    drop(cache);
    check_all(domain);
    reclaim_everything(domain, parent.holder());
    parent.detach();
}

/// A full file table (`FILE_RECORDS` files read through the domain, none open): the next
/// file's open evicts a record nobody has open (its pages and tree dropped) and is read
/// through the domain; a file open meanwhile keeps its record. Before, it was refused.
#[test]
fn a_full_table_evicts_a_record_nobody_has_open() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let name = "records-full";
    let records = super::domain::FILE_RECORDS;
    let parent = Member::attach(&config(home.path(), name, SLOTS, 2 * records + 64)).unwrap();
    let domain = parent.domain();
    let cache = domain_cache(home.path(), name);
    let len = 4096 + 9;
    let kept_open = {
        let path = write_file(data.path(), 0, len);
        let file = cache.open(&path).unwrap();
        assert_eq!(read_all(&file, len as usize), stamped(0, len));
        (file, path)
    };
    for f in 1..u64::from(records) {
        let path = write_file(data.path(), f, len);
        let file = cache.open(&path).unwrap();
        assert!(file.is_domain_file(), "file {f}");
        assert_eq!(read_all(&file, len as usize), stamped(f, len), "file {f}");
    }
    assert_eq!(
        domain.files().check(&domain.slots()).unwrap().len(),
        records as usize
    );
    for f in u64::from(records)..u64::from(records) + 3 {
        let path = write_file(data.path(), f, len);
        let file = cache.open(&path).unwrap();
        assert!(file.is_domain_file(), "file {f}: a record evicted for it");
        assert_eq!(read_all(&file, len as usize), stamped(f, len), "file {f}");
    }
    let census = domain.files().check(&domain.slots()).unwrap();
    assert_eq!(census.len(), records as usize);
    let (open, path) = kept_open;
    assert!(
        record_of(domain, &path).is_some(),
        "the open file's record stays"
    );
    assert_eq!(read_all(&open, len as usize), stamped(0, len));
    drop(open);
    assert_eq!(cache.domain_stats().unwrap().files_refused, 0);
    drop(cache);
    check_all(domain);
    reclaim_everything(domain, parent.holder());
    parent.detach();
}

/// The test's shared words: the child's holder (its word, + 1 once written).
const HOLDER: usize = 0;

/// A record's drop (`SharedReader::forget`: R1 through `SharedQueue::drop_file`) in a
/// child that stops itself at its `at`-th step (`StopAt`), for every `at` until the
/// drop completes: the parent `SIGKILL`s it there and waits for the steward's sweep; then
/// the domain checks (every index's folio a queued frame caching that page, every CACHED
/// frame queued, no lease or pin left: no frame leaked, no record naming a freed one) and
/// the record is either gone or LIVE with some of its pages, which the parent's own drop
/// then finishes. Before each round the parent caches the file's pages again.
#[test]
fn a_drop_killed_at_every_step_leaves_a_working_domain() {
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let len = 3 * 4096 + 5;
    let path = write_file(data.path(), 0, len);
    let expected = stamped(0, len);
    let config = config(home.path(), "records-drop-kill", 8, 32);
    let parent = Member::attach(&config).unwrap();
    let domain = parent.domain();
    let shared = SharedRegion::new(8);
    let words = shared.words();
    let mut partial = 0;
    for at in 0.. {
        {
            let reader = SharedReader::new(&parent, &parent, 2);
            let file = reader.open(&path).unwrap();
            let mut buf = vec![0u8; len as usize];
            assert_eq!(reader.read_at(&file, &mut buf, 0).unwrap(), len as usize);
            assert_eq!(buf, expected);
            reader.close(file).unwrap();
        }
        let id = record_of(domain, &path).unwrap();
        assert_eq!(folios_of(domain, id), 4);
        words[HOLDER].store(0, Ordering::Release);
        let child = fork(|| {
            let member = Member::attach(&config).unwrap();
            words[HOLDER].store(member.holder().word() + 1, Ordering::Release);
            let run = MemberLever::new(&member, StopAt::new(Some(at)));
            let reader = SharedReader::new(&member, &run, 2);
            let meta = std::fs::metadata(&path).unwrap();
            assert_eq!(reader.forget(&meta).unwrap(), Some(Removal::Done));
            drop(reader);
            member.detach();
        });
        let status = wait_for(child, libc::WUNTRACED);
        if libc::WIFEXITED(status) {
            assert_eq!(libc::WEXITSTATUS(status), 0, "step {at}");
            assert_eq!(record_of(domain, &path), None);
            assert!(at > 100, "a drop of 4 pages takes more than {at} steps");
            eprintln!("{at} steps; {partial} deaths left the record with pages");
            break;
        }
        assert!(libc::WIFSTOPPED(status), "step {at}: status {status:#x}");
        // SAFETY: kills and reaps our own child, stopped.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, &mut 0, 0);
        }
        let word = words[HOLDER].load(Ordering::Acquire);
        assert_ne!(word, 0, "step {at}: the child attached before its drop");
        swept(&domain.slots(), Holder::from_word(word - 1));
        check_all(domain);
        if let Some(left) = record_of(domain, &path) {
            assert_eq!(left, id, "step {at}: the same record, or none");
            let folios = folios_of(domain, left);
            partial += usize::from(folios > 0);
            if at % 7 == 0 {
                // The next drop finishes it (else the next round's reads reuse it).
                let reader = SharedReader::new(&parent, &parent, 2);
                let meta = std::fs::metadata(&path).unwrap();
                assert_eq!(reader.forget(&meta).unwrap(), Some(Removal::Done));
                assert_eq!(record_of(domain, &path), None);
                check_all(domain);
            }
        }
    }
    reclaim_everything(domain, parent.holder());
    parent.detach();
}

// What a record's drop costs, per page, holding the file table's lock (docs/sharing.md,
// "A domain file's lifecycle"): a file of 2,048 cached pages dropped by `forget`, five
// rounds: `cargo test --release -p folio --lib shared::tests_records::a_drop_costs --
// --ignored --nocapture`.
#[test]
#[ignore]
fn a_drop_costs() {
    const PAGES: u64 = 2048;
    const ROUNDS: usize = 5;
    let home = DomainHome::new();
    let data = tempfile::tempdir().unwrap();
    let len = PAGES * 4096;
    let path = write_file(data.path(), 0, len);
    let config = config(home.path(), "records-drop-costs", 8, 2 * PAGES as u32);
    let member = Member::attach(&config).unwrap();
    let mut per_page = Vec::new();
    {
        let reader = SharedReader::new(&member, &member, 16);
        let meta = std::fs::metadata(&path).unwrap();
        for _ in 0..ROUNDS {
            let file = reader.open(&path).unwrap();
            let mut buf = vec![0u8; len as usize];
            assert_eq!(reader.read_at(&file, &mut buf, 0).unwrap(), len as usize);
            reader.close(file).unwrap();
            let id = record_of(member.domain(), &path).unwrap();
            assert_eq!(folios_of(member.domain(), id), PAGES as usize);
            let started = std::time::Instant::now();
            assert_eq!(reader.forget(&meta).unwrap(), Some(Removal::Done));
            per_page.push(started.elapsed().as_nanos() as f64 / PAGES as f64);
        }
    }
    per_page.sort_by(f64::total_cmp);
    eprintln!(
        "a drop of {PAGES} cached pages, ns per page (min, median, max of {ROUNDS}): \
         {:.0}, {:.0}, {:.0}",
        per_page[0],
        per_page[ROUNDS / 2],
        per_page[ROUNDS - 1]
    );
    reclaim_everything(member.domain(), member.holder());
    member.detach();
}
