//! `readseq` (seeds 000, 002): N threads scan files sequentially in 8 KiB records from a
//! cold cache — what RocksDB's `db_bench readseq` asks of a page cache. It measures the
//! miss path and readahead: how close a cold scan gets to the disk, and (with `--shared`)
//! what happens when N threads scan ONE file through ONE handle, where the kernel's
//! unsynchronised per-file readahead state and per-insertion lock are the walls.
//!
//! Systems: `folio` (`File::read_at`, a fresh cache per run at the library's defaults:
//! its arena grows lazily, populated in the background), `folio-prefault` (the same with
//! `Prefault::AtBuild`: the whole arena faulted in at build, outside the clock), `kernel`
//! (buffered `pread` after the page cache was dropped), `direct` (O_DIRECT `pread` of
//! 8 KiB, no cache: what an engine gets with `use_direct_reads` and no cache of its own).
//! folio / folio-prefault, run by run, says whether a cold scan into a fresh cache is
//! slower than into a prefaulted one (issue 13).
//!
//! Design: without `--shared`, thread i scans its own file `readseq-i.dat` through its own
//! handle (its own fd for the kernel); with `--shared`, all N threads scan the whole of
//! `readseq-0.dat` through one `folio::File` (one fd for the kernel), so every page is
//! read N times and must be inserted once. Before every measurement the kernel's cache of
//! the files is dropped and checked 0% resident (the folio and direct runs too, so all
//! three start from the same disk state). Every record is verified. `pages_inserted` is
//! folio's `Stats::pages_inserted`, and for the kernel the pages resident after the run
//! (mincore); `data_pages` in each row is the pages of the files that row scanned.
//!
//! Limits: `direct` reads synchronously one record at a time per thread, so it is stopped
//! at `--direct-cap-secs` (a partial scan measures the same rate: nothing is cached). The
//! folio cache is sized to hold all the data (no eviction): this measures the miss path
//! and readahead, not reclaim (`randread` does).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::{
    measure_systems, mib, pages_of, secs, threads_or, Env, Metric, Report, System, Target, Workload,
};
use crate::data;
use crate::kernel::{self, AlignedBuf};
use crate::measure::{self, Bound, Control, Recorder, RunResult};

/// Bytes of one record (RocksDB's 8 KiB values).
pub const RECORD_BYTES: usize = 8192;
const SYSTEMS: [System; 4] = [
    System::Folio,
    System::FolioPrefault,
    System::Kernel,
    System::Direct,
];

#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// Thread counts, comma-separated [default: 1,2; with --shared: 32]
    #[arg(long, value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// All threads scan ONE file through ONE handle
    #[arg(long)]
    pub shared: bool,
    /// MiB per data file [default: 256; --quick 64]
    #[arg(long)]
    pub file_mib: Option<u64>,
    /// Seconds after which a `direct` scan is stopped [default: 2; --quick 0.5]
    #[arg(long)]
    pub direct_cap_secs: Option<f64>,
}

impl Workload for Args {
    fn name(&self) -> &'static str {
        "readseq"
    }

    fn run(&self, env: &Env) -> io::Result<Report> {
        let threads = threads_or(&self.threads, if self.shared { &[32] } else { &[1, 2] });
        let file_bytes = mib(self.file_mib.unwrap_or(env.scale.pick(64, 256)));
        let direct_cap = self.direct_cap_secs.unwrap_or(env.scale.pick(0.5, 2.0));
        let file_count = if self.shared {
            1
        } else {
            threads.iter().copied().max().unwrap_or(1)
        };
        let files: Vec<PathBuf> = (0..file_count)
            .map(|i| env.data_file(&format!("readseq-{i}.dat"), file_bytes))
            .collect::<io::Result<_>>()?;

        let mut report = Report::new(self.name(), Metric::OpsPerSec);
        report.param("threads", threads.clone());
        report.param("shared", self.shared);
        report.param("file_bytes", file_bytes);
        report.param("file_pages", pages_of(file_bytes));
        report.param("record_bytes", RECORD_BYTES);
        report.param("direct_cap_secs", direct_cap);
        report.param("runs", env.runs);

        let mut folio_direct = true;
        measure_systems(env, &mut report, &SYSTEMS, &threads, |turn| {
            let t = turn.threads;
            let mine: Vec<PathBuf> = if self.shared {
                files.clone()
            } else {
                files[..t].to_vec()
            };
            kernel::make_cold(&mine, env.cold)?;
            let data_bytes = file_bytes * mine.len() as u64;
            let mut result = match turn.system {
                System::Folio | System::FolioPrefault => {
                    let prefault = match turn.system {
                        System::FolioPrefault => folio::Prefault::AtBuild,
                        _ => folio::Prefault::default(),
                    };
                    let (r, direct) = self.run_folio(env, t, &mine, data_bytes, prefault)?;
                    folio_direct &= direct;
                    r
                }
                System::Kernel => {
                    let mut r = self.run_kernel(t, &mine)?;
                    r.pages_inserted = Some(kernel::resident_pages_all(&mine)?.resident);
                    r
                }
                System::Direct => self.run_direct(t, &mine, direct_cap)?,
                other => unreachable!("readseq measures no {other}"),
            };
            let data_pages = pages_of(file_bytes) * mine.len() as u64;
            result.extra.insert("data_pages".into(), json!(data_pages));
            Ok(result)
        })?;
        report.note(format!(
            "cold: before every measurement, {}; then mincore: 0% resident",
            env.cold.describe()
        ));
        report.note(
            "pages_inserted: folio = Stats::pages_inserted; kernel = pages resident after the \
             run (mincore); direct caches nothing",
        );
        report.note(format!(
            "direct: 8 KiB O_DIRECT preads, stopped after {direct_cap} s (no cache: a partial \
             scan measures the same rate)"
        ));
        report.note(
            "folio: a fresh cache per run at the library's defaults (lazy arena, populated \
             in the background); folio-prefault: the same with Prefault::AtBuild, the arena \
             faulted in at build, before the clock starts (cache_build_ms: the build)",
        );
        if !folio_direct {
            report.note(
                "folio: the file system refused O_DIRECT; folio read through the kernel's cache",
            );
        }
        let limits = env.limits()?;
        report.limits = limits;
        if self.shared {
            let t = *threads.iter().max().unwrap_or(&1) as u32;
            report.targets.push(Target::at_least(
                format!("readseq --shared {t} threads: folio / kernel ops/s"),
                report.ratio(System::Folio, t),
                1.5,
            ));
            report.targets.push(Target::at_least(
                format!(
                    "readseq --shared {t} threads: folio (fresh cache) / folio-prefault \
                     ops/s, same run"
                ),
                report.ratio_between(System::Folio, System::FolioPrefault, t),
                1.0,
            ));
            report.targets.push(Target::equal(
                format!("readseq --shared {t} threads: folio pages inserted == file pages"),
                report.row(System::Folio, t).and_then(|r| r.pages_inserted),
                pages_of(file_bytes),
            ));
        } else if report.row(System::Folio, 1).is_some() {
            report.targets.push(Target::at_least(
                "readseq cold 1 thread: folio / kernel ops/s",
                report.ratio(System::Folio, 1),
                1.0,
            ));
            report.targets.push(Target::at_least(
                "readseq cold 1 thread: folio (fresh cache) / folio-prefault ops/s, same run",
                report.ratio_between(System::Folio, System::FolioPrefault, 1),
                1.0,
            ));
            report.targets.push(Target::at_least(
                "readseq cold 1 thread: folio MB/s / O_DIRECT ceiling MB/s (limits)",
                report
                    .row(System::Folio, 1)
                    .map(|r| r.mb_per_sec / limits.odirect_seq_mb_per_sec.max(1e-9)),
                0.8,
            ));
        }
        Ok(report)
    }
}

impl Args {
    /// One folio measurement into a fresh cache whose arena is faulted in as `prefault`
    /// says (at build: before the clock starts); also returns whether folio used O_DIRECT.
    fn run_folio(
        &self,
        env: &Env,
        threads: usize,
        files: &[PathBuf],
        data_bytes: u64,
        prefault: folio::Prefault,
    ) -> io::Result<(RunResult, bool)> {
        let building = Instant::now();
        let cache = env.folio_cache_prefault(data_bytes + (32 << 20), prefault)?;
        let build_ms = building.elapsed().as_secs_f64() * 1e3;
        let handles: Vec<Arc<folio::File>> = if self.shared {
            let one = Arc::new(cache.open(&files[0])?);
            (0..threads).map(|_| one.clone()).collect()
        } else {
            files
                .iter()
                .map(|p| cache.open(p).map(Arc::new))
                .collect::<io::Result<_>>()?
        };
        let direct = handles.iter().all(|h| h.is_direct());
        let mut r = measure::run_threads(threads, Bound::Work { cap: None }, |i, c, rec| {
            let file = &handles[i];
            let mut buf = vec![0u8; RECORD_BYTES];
            scan(c, rec, &mut buf, |buf, at| file.read_at(buf, at))
        })?;
        let s = cache.stats();
        r.pages_inserted = Some(s.pages_inserted);
        r.extra.insert("cache_build_ms".into(), json!(build_ms));
        r.extra.insert(
            "folio".into(),
            json!({
                "backend": s.backend, "hits": s.hits, "misses": s.misses,
                "waits_on_io": s.waits_on_io, "io_requests": s.io_requests,
                "io_bytes": s.io_bytes, "readahead_sync": s.readahead_sync,
                "readahead_async": s.readahead_async, "readahead_pages": s.readahead_pages,
                "insert_conflicts": s.insert_conflicts, "evicted_pages": s.evicted_pages,
            }),
        );
        Ok((r, direct))
    }

    fn run_kernel(&self, threads: usize, files: &[PathBuf]) -> io::Result<RunResult> {
        let fds: Vec<Arc<File>> = if self.shared {
            let one = Arc::new(File::open(&files[0])?);
            (0..threads).map(|_| one.clone()).collect()
        } else {
            files
                .iter()
                .map(|p| File::open(p).map(Arc::new))
                .collect::<io::Result<_>>()?
        };
        measure::run_threads(threads, Bound::Work { cap: None }, |i, c, rec| {
            let file = &fds[i];
            let mut buf = vec![0u8; RECORD_BYTES];
            scan(c, rec, &mut buf, |buf, at| file.read_at(buf, at))
        })
    }

    fn run_direct(&self, threads: usize, files: &[PathBuf], cap: f64) -> io::Result<RunResult> {
        let fds: Vec<Arc<File>> = if self.shared {
            let one = Arc::new(kernel::open_direct(&files[0])?);
            (0..threads).map(|_| one.clone()).collect()
        } else {
            files
                .iter()
                .map(|p| kernel::open_direct(p).map(Arc::new))
                .collect::<io::Result<_>>()?
        };
        let bound = Bound::Work {
            cap: Some(secs(cap)),
        };
        measure::run_threads(threads, bound, |i, c, rec| {
            let file = &fds[i];
            let mut buf = AlignedBuf::new(RECORD_BYTES);
            scan(c, rec, &mut buf, |buf, at| file.read_at(buf, at))
        })
    }
}

/// Reads records from offset 0 to the end of the file (or until stopped), timing and
/// verifying each.
fn scan(
    control: &Control,
    rec: &mut Recorder,
    buf: &mut [u8],
    mut read: impl FnMut(&mut [u8], u64) -> io::Result<usize>,
) -> io::Result<()> {
    let mut at = 0u64;
    while !control.stopped() {
        let started = Instant::now();
        let n = read(buf, at)?;
        if n == 0 {
            return Ok(());
        }
        rec.latency(started.elapsed());
        let verified = data::verify(&buf[..n], at)?;
        rec.op(n as u64, verified);
        at += n as u64;
    }
    Ok(())
}
