//! Warm restart under kills (issue 32): a child process builds a named persistent cache
//! (`CacheBuilder::segment_name`) over a few files, reads every byte through it and checks
//! them against a model of what the files must hold, then runs a mixed load of checked
//! reads, writes and `set_len`s, and reads of a file larger than the cache (eviction),
//! until this process SIGKILLs it at a random instant. Its keeper writes back what it left
//! dirty and leaves the segment; the next round's child builds a cache of the same name,
//! which adopts the segment's clean pages of unchanged files (`Cache::adoption`), and
//! checks every byte again. So a stale adopted page (a file's old bytes, a page of a file
//! that changed, a page a kill left half done) is a wrong byte in the next round's first
//! pass.
//!
//! Each round (`rounds`):
//! - now and then (a quarter of the rounds after the first) this process changes one file
//!   with `std::fs` (a record written inside it or appended, or the file cut), just before
//!   the child builds: the change falls in the clock tick of the build, or right before;
//!   change detection must drop that file's pages;
//! - the child (this test binary run again with `FOLIO_ADOPTION_KILL_CHILD` set) draws
//!   its cache from its seed: capacity 2 or 4 MiB (the large file is 8 MiB), largest folio
//!   4 KiB to 2 MiB, io_uring or the pread pool. Its build must succeed (adopting, or
//!   replacing a segment it cannot read): a failed build fails the test. It says
//!   `ready <segment> <keeper pid> <adopted?> <pages kept> <pages dropped> <replaced?>
//!   <files kept> <files dropped>`, checks every byte of every file against the model
//!   (the files' contents this process wrote beside them), says `checked`, then runs one
//!   thread per small file (reads checked against its own model of that file, record
//!   writes and `set_len`s said before (`w` / `t`) and after (`r`) as
//!   `tests/keeper_crash.rs`'s are) and one reading the large file at random;
//! - the kill lands 0-5 ms after `ready` (an eighth of the rounds: often during the first
//!   pass), or 2-200 ms (log-uniform) after `checked`;
//! - this process waits for the keeper (it must exit 0 and leave the segment), then reads
//!   every file with `std::fs`: every write and `set_len` that returned is there
//!   (`common/durability.rs`, as in `keeper_crash.rs`), no byte is one nobody wrote. What
//!   it read becomes the model of the next round.
//!
//! Every round after the first must find the segment (adopted or replaced); the rounds
//! whose build kept pages are counted and must be most of them.
//!
//! Environment: `FOLIO_ADOPTION_KILL_ROUNDS=n` (default 40, well under a minute; the issue's
//! figure is `FOLIO_ADOPTION_KILL_ROUNDS=500`), `FOLIO_ADOPTION_KILL_SEED=s` (default from
//! the clock, printed).

mod common;
#[path = "common/durability.rs"]
mod durability;
#[path = "common/harness.rs"]
mod harness;
#[path = "common/ops.rs"]
mod ops;
#[path = "common/records.rs"]
mod records;
#[path = "common/seeded.rs"]
mod seeded;

use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use folio::{BackendKind, Cache, File};
use harness::{say, Child};
use ops::{OpKind, OpLog};
use records::record_bytes;
use seeded::{env_u64, Rng};

const CHILD_ENV: &str = "FOLIO_ADOPTION_KILL_CHILD";
const ROUNDS_DEFAULT: u64 = 40;
const NAME: &str = "warm";
const FILES: usize = 3;
/// The small files stay under this.
const FILE_BYTES_MAX: u64 = 512 << 10;
/// The large file (read only, a pattern): larger than any cache the child builds.
const BIG_BYTES: u64 = 8 << 20;
const BIG_SALT: u64 = 0x5EED;
const READY_WAIT_MAX: Duration = Duration::from_secs(30);
const KEEPER_WAIT_MAX: Duration = Duration::from_secs(30);
const CHILD_LIFE_MAX: Duration = Duration::from_secs(60);
const KILL_EARLY_MS: f64 = 5.0;
const KILL_FROM_MS: f64 = 2.0;
const KILL_LATE_MS: f64 = 200.0;

fn main() {
    harness::main(&[("owner_killed_and_adopted", run)], CHILD_ENV, child);
}

fn file_name(i: usize) -> String {
    format!("f{i}")
}

// ---------------------------------------------------------------------------------------
// The child.

/// Exits the child with 101 (not a kill: the test fails) saying why.
fn wrong(what: String) -> ! {
    eprintln!("child: {what}");
    std::process::exit(101);
}

/// Reads `[offset, offset + len)` of `file` and checks it against `model`.
fn check_read(file: &File, f: usize, model: &[u8], offset: u64, len: usize) {
    let mut buf = vec![0u8; len];
    let n = file
        .read_at(&mut buf, offset)
        .unwrap_or_else(|e| wrong(format!("read_at({offset}, {len}) of file {f}: {e}")));
    let start = (offset as usize).min(model.len());
    let want = &model[start..(start + len).min(model.len())];
    if buf[..n] != *want {
        let at = buf[..n]
            .iter()
            .zip(want)
            .position(|(a, b)| a != b)
            .unwrap_or(n.min(want.len()));
        wrong(format!(
            "file {f}: read_at({offset}, {len}) returned {n} bytes, the model {}; first difference at offset {}",
            want.len(),
            offset + at as u64
        ));
    }
}

/// `spec` is "<seed> <first seq> <segment dir> <data dir> <model dir>".
fn child(spec: &str) {
    let parts: Vec<&str> = spec.split(' ').collect();
    let [seed, first_seq, segment_dir, dir, model_dir] = parts[..] else {
        panic!("child: a bad spec {spec:?}")
    };
    let mut rng = Rng(seed.parse().expect("child: a seed"));
    let seq: u64 = first_seq.parse().expect("child: a first seq");
    let (dir, model_dir) = (PathBuf::from(dir), PathBuf::from(model_dir));
    let cache = Cache::builder()
        .capacity_bytes(rng.pick(&[2 << 20, 4 << 20]))
        .folio_order_max(rng.pick(&[0, 2, 4, 9]))
        .backend(rng.pick(&[BackendKind::IoUring, BackendKind::Pread]))
        .pread_threads(4)
        .persistent(true)
        .segment_dir(segment_dir)
        .segment_name(NAME)
        // The parent waits for each keeper to exit after its writeback: no steward stays
        // (kept_memory.rs tests the steward).
        .kept_memory(folio::KeptMemory {
            steward: false,
            ..folio::KeptMemory::default()
        })
        .build()
        .unwrap_or_else(|e| wrong(format!("the build failed: {e}")));
    let segment = cache.segment_path().expect("child: a segment");
    let keeper = cache.keeper_pid().expect("child: a keeper");
    let a = cache.adoption().cloned();
    let adopted = a.is_some();
    let a = a.unwrap_or_default();
    say(&format!(
        "ready {} {keeper} {} {} {} {} {} {}",
        segment.display(),
        u8::from(adopted),
        a.pages_kept,
        a.pages_dropped,
        u8::from(a.replaced),
        a.files_kept,
        a.files_dropped
    ));
    let mut models: Vec<Vec<u8>> = (0..FILES)
        .map(|i| std::fs::read(model_dir.join(file_name(i))).expect("child: a model"))
        .collect();
    let files: Vec<File> = (0..FILES)
        .map(|i| {
            cache
                .open_options()
                .write(true)
                .open(dir.join(file_name(i)))
                .unwrap_or_else(|e| wrong(format!("open file {i}: {e}")))
        })
        .collect();
    let big = cache.open(dir.join("big")).expect("child: the large file");
    // The first pass: every byte, in reads of random lengths.
    for (f, (file, model)) in files.iter().zip(&models).enumerate() {
        if file.len() != model.len() as u64 {
            wrong(format!(
                "file {f}: {} bytes long through the cache, the model {}",
                file.len(),
                model.len()
            ));
        }
        let mut at = 0;
        while at <= model.len() as u64 {
            let len = 1 + rng.below(64 << 10) as usize;
            check_read(file, f, model, at, len);
            at += len as u64;
        }
    }
    check_big(&big, 0, BIG_BYTES as usize);
    say("checked");
    let files = std::sync::Arc::new(files);
    for f in 0..FILES {
        let (files, model, rng) = (
            files.clone(),
            std::mem::take(&mut models[f]),
            Rng(rng.next()),
        );
        let first = seq + ((f as u64) << 32);
        std::thread::spawn(move || load(f, &files[f], model, first, rng));
    }
    let mut rng = Rng(rng.next());
    let born = Instant::now();
    while born.elapsed() < CHILD_LIFE_MAX {
        let len = 1 + rng.below(256 << 10) as usize;
        let offset = rng.below(BIG_BYTES);
        check_big(&big, offset, len);
    }
    std::process::exit(3);
}

fn check_big(big: &File, offset: u64, len: usize) {
    let mut buf = vec![0u8; len];
    let n = big
        .read_at(&mut buf, offset)
        .unwrap_or_else(|e| wrong(format!("read_at({offset}, {len}) of the large file: {e}")));
    let want = (BIG_BYTES - offset.min(BIG_BYTES)).min(len as u64) as usize;
    if n != want {
        wrong(format!(
            "the large file: read_at({offset}, {len}) returned {n} bytes"
        ));
    }
    if let Err(at) = common::check_pattern(BIG_SALT, offset, &buf[..n]) {
        wrong(format!("the large file: a wrong byte at {at}"));
    }
}

/// One small file's thread: checked reads, writes and `set_len`s (module docs), its model
/// kept as it goes.
fn load(f: usize, file: &File, mut model: Vec<u8>, mut seq: u64, mut rng: Rng) {
    loop {
        let len = model.len() as u64;
        match rng.below(100) {
            0..=49 => {
                let offset = rng.below(len + 1);
                check_read(file, f, &model, offset, 1 + rng.below(64 << 10) as usize);
            }
            50..=51 => {
                let new = if len > 0 && rng.below(2) == 0 {
                    rng.below(len)
                } else {
                    (len + rng.below(16 << 10)).min(FILE_BYTES_MAX)
                };
                say(&format!("t {f} {len} {new} {seq}"));
                file.set_len(new)
                    .unwrap_or_else(|e| wrong(format!("set_len({new}) of file {f}: {e}")));
                say(&format!("r {seq}"));
                model.resize(new as usize, 0);
                seq += 1;
            }
            _ => {
                let size = 1 + rng.below(32 << 10);
                let mut offset = if rng.below(4) == 0 {
                    len
                } else {
                    rng.below(len + 1)
                };
                if offset + size > FILE_BYTES_MAX {
                    offset = rng.below(FILE_BYTES_MAX - size);
                }
                let bytes = record_bytes(seq, size as usize);
                say(&format!("w {f} {offset} {size} {seq}"));
                let n = file.write_at(&bytes, offset).unwrap_or_else(|e| {
                    wrong(format!("write_at({offset}, {size}) of file {f}: {e}"))
                });
                if n != bytes.len() {
                    wrong(format!("a short write_at: {n} of {size}"));
                }
                say(&format!("r {seq}"));
                let end = (offset + size) as usize;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[offset as usize..end].copy_from_slice(&bytes);
                seq += 1;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The parent.

/// What one child said after `ready`.
#[derive(Debug, Default)]
struct Said {
    checked: bool,
    log: OpLog,
}

fn parse_line(said: &mut Said, line: &str) {
    if said.log.take_line(line) {
        return;
    }
    if line == "checked" {
        said.checked = true;
        return;
    }
    panic!("a bad line from the child: {line:?}");
}

#[derive(Debug, Default)]
struct Totals {
    rounds: u64,
    /// Builds that found the segment, kept pages of it, replaced it.
    found: u64,
    kept_pages: u64,
    rounds_kept: u64,
    replaced: u64,
    files_kept: u64,
    files_dropped: u64,
    pages_dropped: u64,
    /// Rounds whose child finished its first pass before the kill.
    checked: u64,
    /// Files this process changed between rounds.
    changed: u64,
    writes_returned: u64,
    set_lens_returned: u64,
    in_flight: u64,
    bytes_checked: u64,
}

fn kill_delay(rng: &mut Rng, from: f64, to: f64) -> Duration {
    let unit = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    Duration::from_secs_f64(from * (to / from).powf(unit) / 1000.0)
}

/// A change of file `f` by this process (module docs); returns its bytes now.
fn change(path: &Path, rng: &mut Rng, seq: u64) -> Vec<u8> {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let len = file.metadata().unwrap().len();
    match rng.below(3) {
        0 if len > 0 => file.set_len(rng.below(len)).unwrap(),
        1 => {
            let size = 1 + rng.below(8 << 10);
            file.write_all_at(&record_bytes(seq, size as usize), len)
                .unwrap()
        }
        _ => {
            let size = 1 + rng.below(8 << 10);
            let offset = rng.below(len.min(FILE_BYTES_MAX - size) + 1);
            file.write_all_at(&record_bytes(seq, size as usize), offset)
                .unwrap()
        }
    }
    drop(file);
    std::fs::read(path).unwrap()
}

fn run() {
    harness::become_subreaper();
    let rounds = env_u64("FOLIO_ADOPTION_KILL_ROUNDS").unwrap_or(ROUNDS_DEFAULT);
    let seed = seeded::seed_from_env_or_clock("FOLIO_ADOPTION_KILL_SEED");
    eprintln!("adoption_kill: {rounds} rounds, FOLIO_ADOPTION_KILL_SEED={seed}");
    let dir = common::test_dir();
    let data = dir.path().join("data");
    let model_dir = dir.path().join("model");
    std::fs::create_dir(&data).unwrap();
    std::fs::create_dir(&model_dir).unwrap();
    // Its own directory: no other test's cache finishes or adopts its segment.
    let segments = tempfile::Builder::new()
        .prefix("folio-adoption-kill-")
        .tempdir_in("/dev/shm")
        .expect("a segment directory in /dev/shm");
    std::fs::set_permissions(segments.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut rng = Rng(seed);
    let mut models: Vec<Vec<u8>> = (0..FILES)
        .map(|i| {
            record_bytes(
                1 << 62 | i as u64,
                (16 << 10) + rng.below(200 << 10) as usize,
            )
        })
        .collect();
    for (i, model) in models.iter().enumerate() {
        std::fs::write(data.join(file_name(i)), model).unwrap();
    }
    common::write_pattern_file(&data.join("big"), BIG_SALT, BIG_BYTES);
    // Past the clock tick of the files' creation: a stamp taken in it proves nothing.
    std::thread::sleep(Duration::from_millis(30));
    let mut totals = Totals::default();
    let started = Instant::now();
    for round in 0..rounds {
        if round > 0 && rng.below(4) == 0 {
            let f = rng.below(FILES as u64) as usize;
            models[f] = change(
                &data.join(file_name(f)),
                &mut rng,
                (1 << 62) | (1 << 61) | round,
            );
            totals.changed += 1;
        }
        for (i, model) in models.iter().enumerate() {
            std::fs::write(model_dir.join(file_name(i)), model).unwrap();
        }
        let child_seed = rng.next();
        let spec = format!(
            "{child_seed} {} {} {} {}",
            round << 40,
            segments.path().display(),
            data.display(),
            model_dir.display()
        );
        let context =
            format!("round {round} (child seed {child_seed}, FOLIO_ADOPTION_KILL_SEED={seed})");
        let mut child = Child::spawn(CHILD_ENV, &spec);
        let ready = child.next_line(READY_WAIT_MAX, "ready");
        let fields: Vec<&str> = ready.split(' ').collect();
        let ["ready", segment, keeper, adopted, kept, dropped, replaced, files_kept, files_dropped] =
            fields[..]
        else {
            panic!("{context}: the child's first line was {ready:?}")
        };
        let num = |s: &str| -> u64 { s.parse().unwrap_or_else(|_| panic!("{context}: {ready:?}")) };
        let segment = PathBuf::from(segment);
        let keeper = num(keeper) as u32;
        if round > 0 {
            assert_eq!(
                num(adopted),
                1,
                "{context}: the build did not find the segment the last round's keeper left"
            );
            totals.found += 1;
        }
        totals.kept_pages += num(kept);
        totals.rounds_kept += u64::from(num(kept) > 0);
        totals.pages_dropped += num(dropped);
        totals.replaced += num(replaced);
        totals.files_kept += num(files_kept);
        totals.files_dropped += num(files_dropped);
        let mut said = Said::default();
        if rng.below(8) == 0 {
            std::thread::sleep(Duration::from_secs_f64(
                rng.below(1000) as f64 * KILL_EARLY_MS / 1000.0 / 1000.0,
            ));
        } else {
            let line = child.next_line(READY_WAIT_MAX, "checked");
            parse_line(&mut said, &line);
            assert!(
                said.checked,
                "{context}: the child said {line:?} before `checked`"
            );
            std::thread::sleep(kill_delay(&mut rng, KILL_FROM_MS, KILL_LATE_MS));
        }
        child.kill();
        let status =
            harness::wait_for_exit(keeper, KEEPER_WAIT_MAX, &format!("{context}: the keeper"));
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{context}: the keeper ended with wait status {status:#x}"
        );
        for line in child.rest_of_lines() {
            parse_line(&mut said, &line);
        }
        assert!(
            segment.exists(),
            "{context}: the keeper removed the named segment"
        );
        totals.checked += u64::from(said.checked);
        for (f, model) in models.iter_mut().enumerate() {
            let disk = std::fs::read(data.join(file_name(f))).unwrap();
            let base = std::mem::take(model);
            if let Err(what) = said.log.history(f, base).check(&disk) {
                let ops = said.log.ops.iter().filter(|op| op.file == f).count();
                panic!(
                    "{context}: file {f} after the keeper: {what} (the child {} its first pass; {ops} operations on the file)",
                    if said.checked { "finished" } else { "was killed in or before" }
                );
            }
            totals.bytes_checked += disk.len() as u64;
            *model = disk;
            let last = said.log.ops.iter().rfind(|op| op.file == f);
            totals.in_flight += u64::from(last.is_some_and(|op| !op.returned));
        }
        for op in said.log.ops.iter().filter(|op| op.returned) {
            match op.kind {
                OpKind::Write { .. } => totals.writes_returned += 1,
                OpKind::SetLen { .. } => totals.set_lens_returned += 1,
            }
        }
        totals.rounds += 1;
    }
    eprintln!("adoption_kill: {totals:?} in {:.1?}", started.elapsed());
    assert!(totals.writes_returned > 0, "{totals:?}");
    if rounds >= 10 {
        assert!(
            totals.rounds_kept >= rounds / 2,
            "few builds kept pages: {totals:?}"
        );
        assert!(totals.checked >= rounds / 2, "{totals:?}");
    }
}
