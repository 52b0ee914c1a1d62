//! `writeseq` (issue 14): one thread appends 8 KiB records to a NEW file and syncs every
//! 1 MiB and once at the end — a write-ahead log. It measures the write path of an
//! append: a write past the end of the file (no read), writeback of whole new pages, and
//! the cost of a sync that finds 1 MiB dirty.
//!
//! Systems: `folio` (`File::write_at` + `sync_data` on a handle from
//! `open_options().write(true).create_new(true)`, a fresh cache of `--cache-mib` at the
//! library's defaults), `kernel` (buffered `write` + `fdatasync` at the same points, the
//! kernel with all the machine's memory: a log writer's dirty data never exceeds 1 MiB),
//! and `direct` (O_DIRECT `pwrite` from an aligned buffer + `fdatasync`, no cache: what an
//! engine gets that writes its log with O_DIRECT itself).
//!
//! Design: before each measurement the file is removed and `sync(2)` runs, so no earlier
//! dirty data (the previous measurement's, the data files') is written back during it.
//! The records of each 1 MiB group are generated (the data rule of `data`: every word its
//! offset) before the group is written; the throughput (`mb_per_sec`, the ratio) counts
//! the time spent inside the write and sync calls only (`bytes_secs`), so the generation
//! costs no system anything. Each record's write is timed into the run's histogram
//! (p50/p99), each sync into the sync histogram. After a folio run, its cache is dropped
//! and the file is read back with O_DIRECT and checked whole (`disk_verified_bytes`): a
//! broken write path fails the run instead of being measured.
//!
//! Limits: `direct` syncs 128 small O_DIRECT writes at a time and is slow, so it stops
//! after `--direct-cap-secs` (then syncs once): a partial log measures the same rate. The
//! file lives in the data directory and is removed after the workload.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{measure_systems, mib, secs, Env, Metric, Report, System, Target, Workload};
use crate::data;
use crate::kernel::{self, AlignedBuf};
use crate::measure::{self, RunResult};

/// Bytes of one record (RocksDB's 8 KiB values).
pub const RECORD_BYTES: usize = 8192;
/// Bytes appended between syncs.
pub const SYNC_EVERY_BYTES: usize = 1 << 20;
const SYSTEMS: [System; 3] = [System::Folio, System::Kernel, System::Direct];
const FILE_NAME: &str = "writeseq.dat";

#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// MiB appended to the new file [default: 1024; --quick 128]
    #[arg(long)]
    pub file_mib: Option<u64>,
    /// MiB of folio's cache [default: 256; --quick 64]
    #[arg(long)]
    pub cache_mib: Option<u64>,
    /// Seconds after which the `direct` log is stopped [default: 2; --quick 0.5]
    #[arg(long)]
    pub direct_cap_secs: Option<f64>,
}

impl Workload for Args {
    fn name(&self) -> &'static str {
        "writeseq"
    }

    fn run(&self, env: &Env) -> io::Result<Report> {
        let file_bytes = mib(self.file_mib.unwrap_or(env.scale.pick(128, 1024)).max(1));
        let cache_bytes = mib(self.cache_mib.unwrap_or(env.scale.pick(64, 256)));
        let direct_cap = self.direct_cap_secs.unwrap_or(env.scale.pick(0.5, 2.0));
        let path = env.dir.join(FILE_NAME);

        let mut report = Report::new(self.name(), Metric::MbPerSec);
        report.param("threads", vec![1]);
        report.param("file_bytes", file_bytes);
        report.param("record_bytes", RECORD_BYTES);
        report.param("sync_every_bytes", SYNC_EVERY_BYTES);
        report.param("cache_bytes", cache_bytes);
        report.param("direct_cap_secs", direct_cap);
        report.param("runs", env.runs);

        let measured = measure_systems(env, &mut report, &SYSTEMS, &[1], |turn| {
            remove_if_there(&path)?;
            // SAFETY: sync(2) takes no arguments and cannot fail.
            unsafe { libc::sync() };
            let result = match turn.system {
                System::Folio => run_folio(env, &path, file_bytes, cache_bytes),
                System::Kernel => run_kernel(&path, file_bytes),
                System::Direct => run_direct(&path, file_bytes, direct_cap),
                other => unreachable!("writeseq measures no {other}"),
            };
            remove_if_there(&path)?;
            result
        });
        remove_if_there(&path)?;
        measured?;
        report.note(
            "each measurement appends to a NEW file (removed, then sync(2), before it); \
             MB/s counts the time inside the write and sync calls (the records are generated \
             between them); p50/p99: one record's write; sync p50/p99: one sync of 1 MiB",
        );
        report.note(format!(
            "folio: a fresh cache of {} MiB at the library's defaults, open_options().write(true)\
             .create_new(true), write_at + sync_data; after each run the cache is dropped and \
             the whole file read back with O_DIRECT and checked (disk_verified_bytes)",
            cache_bytes >> 20
        ));
        report.note(
            "kernel: buffered write + fdatasync at the same points, all the machine's memory; \
             direct: O_DIRECT pwrite of 8 KiB from an aligned buffer + fdatasync",
        );
        report.note(format!(
            "direct: stopped after {direct_cap} s, then synced (no cache: a partial log \
             measures the same rate)"
        ));
        report.targets.push(Target::at_least(
            "writeseq 1 thread: folio / kernel (buffered) MB/s",
            report.ratio(System::Folio, 1),
            1.0,
        ));
        report.limits = env.limits()?;
        Ok(report)
    }
}

fn remove_if_there(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Appends records of the data rule up to `file_bytes` (or until `cap`) through `write`,
/// with `sync` after every 1 MiB and at the end, into `group` (a 1 MiB buffer).
///
/// Context: the calling thread does every write and sync; sleeps in them.
fn append(
    file_bytes: u64,
    cap: Option<Duration>,
    group: &mut [u8],
    mut write: impl FnMut(&[u8], u64) -> io::Result<()>,
    mut sync: impl FnMut() -> io::Result<()>,
) -> io::Result<RunResult> {
    assert_eq!(group.len(), SYNC_EVERY_BYTES);
    let mut in_calls = Duration::ZERO;
    let started = Instant::now();
    let mut r = measure::run_here(|rec| {
        let mut at = 0u64;
        while at < file_bytes && cap.is_none_or(|c| started.elapsed() < c) {
            let len = (file_bytes - at).min(SYNC_EVERY_BYTES as u64) as usize;
            data::fill(&mut group[..len], at);
            for record in group[..len].chunks(RECORD_BYTES) {
                let t = Instant::now();
                write(record, at)?;
                let took = t.elapsed();
                in_calls += took;
                rec.latency(took);
                rec.write_op(record.len() as u64);
                at += record.len() as u64;
            }
            if at < file_bytes {
                let t = Instant::now();
                sync()?;
                let took = t.elapsed();
                in_calls += took;
                rec.sync_latency(took);
            }
        }
        let t = Instant::now();
        sync()?;
        let took = t.elapsed();
        in_calls += took;
        rec.sync_latency(took);
        Ok(())
    })?;
    r.bytes_secs = Some(in_calls.as_secs_f64());
    Ok(r)
}

fn run_folio(env: &Env, path: &Path, file_bytes: u64, cache_bytes: u64) -> io::Result<RunResult> {
    let cache = env.folio_cache(cache_bytes)?;
    let file = cache
        .open_options()
        .write(true)
        .create_new(true)
        .open(path)?;
    let mut group = vec![0u8; SYNC_EVERY_BYTES];
    let mut r = append(
        file_bytes,
        None,
        &mut group,
        |record, at| {
            let n = file.write_at(record, at)?;
            if n != record.len() {
                return Err(io::Error::other(format!(
                    "folio wrote {n} of {} bytes",
                    record.len()
                )));
            }
            Ok(())
        },
        || file.sync_data(),
    )?;
    let s = cache.stats();
    r.extra
        .insert("write_amplification".into(), json!(s.write_amplification()));
    r.extra.insert(
        "folio".into(),
        json!({
            "backend": s.backend, "write_bytes": s.write_bytes,
            "writeback_bytes": s.writeback_bytes,
            "writeback_requests": s.writeback_requests,
            "pages_written_back": s.pages_written_back,
            "writeback_errors": s.writeback_errors,
            "throttled_writers": s.throttled_writers, "syncs": s.syncs,
            "sync_ms_total": s.sync_ns as f64 / 1e6,
            "evicted_pages": s.evicted_pages, "dirty_pages_after_sync": s.dirty_pages,
        }),
    );
    if s.writeback_errors > 0 {
        return Err(io::Error::other(format!(
            "folio: {} writeback errors while appending",
            s.writeback_errors
        )));
    }
    drop(file);
    drop(cache);
    let verified = verify_on_disk(path, file_bytes)?;
    r.extra
        .insert("disk_verified_bytes".into(), json!(verified));
    Ok(r)
}

fn run_kernel(path: &Path, file_bytes: u64) -> io::Result<RunResult> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
    let sync_handle = file.try_clone()?;
    let mut group = vec![0u8; SYNC_EVERY_BYTES];
    append(
        file_bytes,
        None,
        &mut group,
        |record, _| file.write_all(record),
        || sync_handle.sync_data(),
    )
}

fn run_direct(path: &Path, file_bytes: u64, cap: f64) -> io::Result<RunResult> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot create {} with O_DIRECT ({e}); use a --dir on a disk file system",
                    path.display()
                ),
            )
        })?;
    let mut group = AlignedBuf::new(SYNC_EVERY_BYTES);
    let mut r = append(
        file_bytes,
        Some(secs(cap)),
        &mut group,
        |record, at| file.write_all_at(record, at),
        || file.sync_data(),
    )?;
    r.extra
        .insert("capped".into(), json!(r.bytes_written < file_bytes));
    Ok(r)
}

/// Reads the whole file with O_DIRECT and checks it holds exactly `file_bytes` of the
/// data rule. Returns the bytes checked.
///
/// Context: reads the whole file; run it after folio's cache of it was synced and dropped.
fn verify_on_disk(path: &Path, file_bytes: u64) -> io::Result<u64> {
    let file = kernel::open_direct(path)?;
    let len = file.metadata()?.len();
    if len != file_bytes {
        return Err(io::Error::other(format!(
            "writeseq: the file is {len} bytes on disk after the run, not {file_bytes}"
        )));
    }
    let mut buf = AlignedBuf::new(SYNC_EVERY_BYTES);
    let mut at = 0u64;
    while at < len {
        let want = (len - at).min(SYNC_EVERY_BYTES as u64) as usize;
        let n = file.read_at(
            &mut buf[..want.next_multiple_of(kernel::DIRECT_ALIGN_BYTES)],
            at,
        )?;
        if n != want {
            return Err(io::Error::other(format!(
                "short O_DIRECT read at {at}: {n} of {want}"
            )));
        }
        data::verify(&buf[..n], at).map_err(|m| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("writeseq on disk after the run: {m}"),
            )
        })?;
        at += n as u64;
    }
    Ok(at)
}
