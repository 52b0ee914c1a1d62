//! `folio-stat` run on a live persistent cache of this process and on what it leaves: its
//! figures are the ones the cache published, its files the ones read and written; `list`
//! and `remove` (refused while the cache lives, and for a segment that may hold unwritten
//! data); and its errors for a missing segment, a file that is not one, and another
//! layout. Each cache has a segment directory of its own in /dev/shm.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use folio::{Cache, SegmentHolder, SegmentView};

fn folio_stat(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_folio-stat"))
        .arg("--dir")
        .arg(dir)
        .args(args)
        .output()
        .expect("run folio-stat")
}

/// Its stdout, after checking it succeeded.
fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "folio-stat failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Its stderr, after checking it failed.
fn failed(output: Output) -> String {
    assert!(!output.status.success(), "folio-stat succeeded");
    String::from_utf8(output.stderr).unwrap()
}

/// `--all`'s lines: `value name`.
fn all_values(out: &str) -> HashMap<String, u64> {
    out.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let value = words.next()?.parse().ok()?;
            let name = words.next()?;
            words.next().is_none().then(|| (name.to_string(), value))
        })
        .collect()
}

fn dirs() -> (tempfile::TempDir, tempfile::TempDir) {
    let data = tempfile::Builder::new()
        .prefix("folio-stat-data-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let segments = tempfile::Builder::new()
        .prefix("folio-stat-test-")
        .tempdir_in("/dev/shm")
        .unwrap();
    (data, segments)
}

#[test]
fn shows_a_live_cache_and_the_last_figures_of_a_gone_one() {
    let (data, dir) = dirs();
    let cache = Cache::builder()
        .capacity_bytes(64 << 20)
        .write_behind_bytes(0)
        .dirty_expire(Duration::from_secs(600))
        .persistent(true)
        .segment_dir(dir.path())
        .build()
        .unwrap();
    let read = data.path().join("read");
    std::fs::write(&read, vec![3u8; 2 << 20]).unwrap();
    let reader = cache.open(&read).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    for offset in [0, 1 << 20, 0] {
        reader.read_at(&mut buf, offset).unwrap();
    }
    let written = data.path().join("written");
    let writer = cache
        .open_options()
        .write(true)
        .create(true)
        .open(&written)
        .unwrap();
    writer.write_at(&vec![5u8; 1 << 20], 0).unwrap();
    let segment = cache.segment_path().unwrap();
    let keeper_pid = cache.keeper_pid().unwrap();
    let name = segment.file_name().unwrap().to_str().unwrap().to_string();

    let stats = cache.publish_stats();
    let out = ok(folio_stat(dir.path(), &[&name, "--all"]));
    eprintln!("DEMO\n{out}\n{}", ok(folio_stat(dir.path(), &["list"])));
    assert!(out.contains("live, its owner holds it"), "{out}");
    assert!(
        out.contains("cached 768 (3.0 MiB), dirty 256, writeback 0"),
        "{out}"
    );
    let hit_ratio = stats.hits as f64 * 100.0 / (stats.hits + stats.misses) as f64;
    assert!(out.contains(&format!("hit ratio {hit_ratio:.1}%")), "{out}");
    let values = all_values(&out);
    // What an idle cache does not move between two publishes.
    for (field, value) in stats.values() {
        if [
            "hits",
            "misses",
            "pages_inserted",
            "readahead_pages",
            "readahead_wasted_pages",
            "dirty_pages",
            "cached_bytes",
            "write_bytes",
            "capacity_bytes",
        ]
        .contains(&field.name)
        {
            assert_eq!(values.get(field.name), Some(&value), "{}", field.name);
        }
    }
    let canonical = |p: &Path| p.canonicalize().unwrap().display().to_string();
    let file_line = |path: &str| {
        out.lines()
            .find(|l| l.ends_with(path))
            .unwrap_or_else(|| panic!("{path} in {out}"))
            .split_whitespace()
            .take(3)
            .map(|w| w.parse::<u64>().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(file_line(&canonical(&read)), [512, 0, 0]);
    assert_eq!(file_line(&canonical(&written)), [256, 256, 0]);

    let watched = ok(folio_stat(
        dir.path(),
        &[&name, "--watch", "0.2", "--count", "2"],
    ));
    assert!(watched.contains("per second hits"), "{watched}");
    let by_path = ok(folio_stat(
        Path::new("/nonexistent"),
        &[segment.to_str().unwrap()],
    ));
    assert!(by_path.contains("live"), "a path with a / ignores --dir");

    let listed = ok(folio_stat(dir.path(), &["list"]));
    let line = listed.lines().find(|l| l.starts_with(&name)).unwrap();
    assert!(line.contains("owner") && line.contains("live"), "{listed}");
    let refused = failed(folio_stat(dir.path(), &["remove", &name]));
    assert!(refused.contains("in use"), "{refused}");
    assert!(segment.exists());

    // A second name keeps the segment past the clean drop's removal of the first.
    let kept = dir.path().join("kept");
    std::fs::hard_link(&segment, &kept).unwrap();
    drop((reader, writer));
    let at_exit = cache.stats();
    drop(cache);
    let started = Instant::now();
    while SegmentView::open(&kept).unwrap().holder() != SegmentHolder::Nobody {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the keeper never exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = ok(folio_stat(dir.path(), &["kept", "--all"]));
    assert!(out.contains("written, nobody holds it"), "{out}");
    let values = all_values(&out);
    assert_eq!(values["hits"], at_exit.hits);
    assert_eq!(values["misses"], at_exit.misses);
    assert_eq!(values["dirty_pages"], 0);
    assert_eq!(
        values["pages_written_back"],
        at_exit.pages_written_back + 256
    );

    // A segment that may hold writes not on disk yet (a killed keeper's) is kept unless
    // forced; one of another layout is named as such.
    let header = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&kept)
        .unwrap();
    // The header's state word follows the owner's and the keeper's pids.
    let mut first = vec![0u8; 4096];
    header.read_exact_at(&mut first, 0).unwrap();
    let pids = [std::process::id().to_le_bytes(), keeper_pid.to_le_bytes()].concat();
    let state_at = first.windows(8).position(|w| w == pids).expect("the pids") + 8;
    header
        .write_all_at(&2u32.to_le_bytes(), state_at as u64)
        .unwrap(); // orphaned
    let refused = failed(folio_stat(dir.path(), &["remove", "kept"]));
    assert!(
        refused.contains("orphaned") && refused.contains("--force"),
        "{refused}"
    );
    header.write_all_at(&99u32.to_le_bytes(), 8).unwrap(); // layout version
    let other = failed(folio_stat(dir.path(), &["kept"]));
    assert!(other.contains("layout version 99"), "{other}");
    let listed = ok(folio_stat(dir.path(), &["list"]));
    assert!(
        listed.contains("unknown") && listed.contains("layout version 99"),
        "{listed}"
    );
    ok(folio_stat(dir.path(), &["remove", "kept", "--force"]));
    assert!(!kept.exists());
    assert!(ok(folio_stat(dir.path(), &["list"])).contains("no folio segments"));
}

#[test]
fn says_what_is_wrong_with_what_it_was_given() {
    let (_data, dir) = dirs();
    let missing = failed(folio_stat(dir.path(), &["nosuch"]));
    assert!(
        missing.contains("no segment") && missing.contains("folio-stat list"),
        "{missing}"
    );
    let garbage: PathBuf = dir.path().join("garbage");
    std::fs::write(&garbage, vec![0xabu8; 8192]).unwrap();
    std::fs::set_permissions(
        &garbage,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let not_one = failed(folio_stat(dir.path(), &["garbage"]));
    assert!(not_one.contains("not a folio segment"), "{not_one}");
    let not_removed = failed(folio_stat(dir.path(), &["remove", "garbage"]));
    assert!(not_removed.contains("not a folio segment"), "{not_removed}");
    assert!(garbage.exists());
    let nothing = failed(folio_stat(dir.path(), &[]));
    assert!(nothing.contains("a segment to show"), "{nothing}");
}

/// `folio-stat domain NAME`: a cache of this process in a domain, four pages read: the
/// domain's steward running, its frames (the machine's, not the build's 2 MiB) and the four
/// cached, and this process
/// in a slot, running, nothing pinned; a domain that does not exist is named in the error.
#[test]
fn shows_a_domain_its_steward_frames_and_processes() {
    let (data, dir) = dirs();
    let cache = Cache::builder()
        .capacity_bytes(2 << 20)
        .segment_dir(dir.path())
        .domain("stat-test")
        .build()
        .unwrap();
    let path = data.path().join("four-pages");
    std::fs::write(&path, vec![5u8; 4 * 4096]).unwrap();
    let file = cache.open(&path).unwrap();
    let mut buf = vec![0u8; 4 * 4096];
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), buf.len());
    let out = ok(folio_stat(dir.path(), &["domain", "stat-test"]));
    assert!(out.starts_with("domain stat-test: steward pid "), "{out}");
    assert!(out.contains(" (running)"), "{out}");
    // The domain's frames are the machine's (at most 1 TiB: 2^28 frames), not the build's
    // 2 MiB capacity.
    let frames: u64 = out
        .split("frames: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no frames in {out}"));
    assert!(frames > 512 && frames <= 1 << 28, "{out}");
    assert!(
        out.contains(&format!(
            "frames: {frames} of 4 KiB ({} MiB), 4 cached",
            frames / 256
        )),
        "{out}"
    );
    // The quota: at most the frames (the steward lowers it when the machine affords less).
    let quota: u64 = out
        .split("quota: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no quota in {out}"));
    assert!(quota > 0 && quota <= frames, "{out}");
    let me = std::process::id().to_string();
    let ours = out
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some(me.as_str()))
        .unwrap_or_else(|| panic!("no line of pid {me}: {out}"));
    assert_eq!(ours.split_whitespace().nth(3), Some("0"), "{out}");
    assert!(ours.ends_with("running"), "{out}");
    let err = failed(folio_stat(dir.path(), &["domain", "no-such"]));
    assert!(err.contains("no domain no-such in"), "{err}");
    // A region an older folio left under the name (before version 11: not named by its
    // version) is named, and not read.
    std::fs::write(dir.path().join("older.domain"), [0u8; 4096]).unwrap();
    let err = failed(folio_stat(dir.path(), &["domain", "older"]));
    assert!(err.contains("no domain older in"), "{err}");
    assert!(err.contains("older.domain is an older folio's"), "{err}");
    drop(file);
    drop(cache);
}
