//! One point of `scale` measured: each system set up at the point (`Setup`: folio's cache
//! filled, the kernel's files open and warm, memcpy's buffer written) and run after run,
//! the systems interleaved where three copies of the data fit in half the available memory
//! (`measure_point`).
//!
//! Limits: as the workload's (`super`): the kernel's warm pages may be paged out by the
//! host when idle for ~30 s, which `resident_after` in a row says.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use serde_json::json;

use super::*;

/// One system set up at a point, measured run after run: folio's cache filled, the
/// kernel's descriptors open, memcpy's buffer written.
enum Setup {
    Folio {
        cache: folio::Cache,
        files: Vec<folio::File>,
    },
    Kernel {
        files: Vec<File>,
    },
    Memcpy {
        buffer: Mapped,
    },
}

impl Setup {
    fn new(system: System, env: &Env, point: &Point) -> io::Result<Setup> {
        match system {
            System::Folio => Setup::folio(env, point),
            System::Kernel => Ok(Setup::Kernel {
                files: point
                    .files
                    .iter()
                    .map(File::open)
                    .collect::<io::Result<_>>()?,
            }),
            System::Memcpy => Setup::memcpy(env, point),
            other => unreachable!("scale measures no {other}"),
        }
    }

    /// A fresh cache of the data + 1/16 + 16 MiB, every file read once (and checked), so
    /// that every measured read is a hit.
    fn folio(env: &Env, point: &Point) -> io::Result<Setup> {
        let data_bytes = point.data_bytes();
        let cache = env.folio_cache(data_bytes + data_bytes / 16 + (16 << 20))?;
        let files: Vec<folio::File> = point
            .files
            .iter()
            .map(|p| cache.open(p))
            .collect::<io::Result<_>>()?;
        let mut buf = vec![0u8; point.file_bytes.min(1 << 20) as usize];
        for (i, file) in files.iter().enumerate() {
            let mut at = 0u64;
            while at < point.file_bytes {
                let n = file.read_at(&mut buf, at)?;
                if n == 0 {
                    return Err(io::Error::other(format!(
                        "{}: short file",
                        point.files[i].display()
                    )));
                }
                data::verify_keyed(&buf[..n], at, key_of(i))?;
                at += n as u64;
            }
        }
        Ok(Setup::Folio { cache, files })
    }

    /// One anonymous buffer holding the files end to end.
    fn memcpy(env: &Env, point: &Point) -> io::Result<Setup> {
        // Under `Auto` the arena's pages depend on the folios the fill made: compare with
        // huge pages, the cheaper copy (the stricter ceiling).
        let pages = match env.arena_pages {
            folio::ArenaPages::Small => Pages::Base,
            folio::ArenaPages::Auto | folio::ArenaPages::Huge => Pages::Huge,
        };
        let buffer = Mapped::new((point.data_bytes() as usize).max(READ_BYTES), pages)?;
        // SAFETY: the buffer was just created and nothing else refers to it.
        let bytes = unsafe { buffer.as_mut_slice() };
        for (i, file) in bytes.chunks_mut(point.file_bytes as usize).enumerate() {
            data::fill_keyed(file, 0, key_of(i));
        }
        Ok(Setup::Memcpy { buffer })
    }

    /// One measured run.
    fn run(&self, env: &Env, point: &Point, bound: Bound) -> io::Result<RunResult> {
        match self {
            Setup::Folio { cache, files } => {
                let before = cache.stats();
                let mut r = hits(point, bound, |file, offset, buf| {
                    files[file].read_at(buf, offset)
                })?;
                let after = cache.stats();
                r.extra
                    .insert("misses".into(), json!(after.misses - before.misses));
                r.extra.insert(
                    "evicted_pages".into(),
                    json!(after.evicted_pages - before.evicted_pages),
                );
                // The arena's pages, as `memcpy_huge_bytes` says the baseline's.
                r.extra
                    .insert("arena_huge_bytes".into(), json!(after.arena_huge_bytes));
                Ok(r)
            }
            Setup::Kernel { files } => {
                let pages = point.data_bytes() / READ_BYTES as u64;
                let _warm = match env.warm {
                    WarmMethod::Read if cached_pages(files)?.is_some() => {
                        warm_by_reading(files, point.file_bytes, pages)?;
                        None
                    }
                    method => Some(kernel::warm(&point.files, method)?),
                };
                let mut r = hits(point, bound, |file, offset, buf| {
                    files[file].read_at(buf, offset)
                })?;
                let resident = match cached_pages(files)? {
                    Some(cached) => cached,
                    None => kernel::resident_pages_all(&point.files)?.resident,
                };
                r.extra.insert(
                    "resident_after".into(),
                    json!(resident as f64 / pages.max(1) as f64),
                );
                Ok(r)
            }
            Setup::Memcpy { buffer } => {
                let file_bytes = point.file_bytes as usize;
                // SAFETY: the buffer is only written by `memcpy` above, before any run.
                let src: &[u8] = unsafe { buffer.as_mut_slice() };
                let mut r = hits(point, bound, |file, offset, buf| {
                    let at = file * file_bytes + offset as usize;
                    buf.copy_from_slice(&src[at..at + READ_BYTES]);
                    Ok(READ_BYTES)
                })?;
                r.extra
                    .insert("memcpy_huge_bytes".into(), json!(buffer.huge_bytes()));
                Ok(r)
            }
        }
    }

    /// Gives the memory back before another copy of the data is built.
    fn finish(self) -> io::Result<()> {
        if let Setup::Kernel { files } = &self {
            for file in files {
                kernel::fadvise(file, 0, 0, libc::POSIX_FADV_DONTNEED)?;
            }
        }
        Ok(())
    }
}

/// Measures `systems` at `point`, `env.runs` runs each: interleaved run by run (every
/// system once per round, so that each round's ratios compare the same minutes) when
/// three copies of the data fit in half the available memory, else one system after
/// another with one copy in memory at a time. Returns the runs in `systems`' order, and
/// whether they were interleaved.
pub(super) fn measure_point(
    env: &Env,
    point: &Point,
    systems: &[System],
    bound: Bound,
    bar: &indicatif::ProgressBar,
) -> io::Result<(Vec<Vec<RunResult>>, bool)> {
    let copies = systems.len() as u64 * point.data_bytes();
    let available = kernel::meminfo_bytes("MemAvailable").unwrap_or(0);
    let interleave = copies <= available / 2;
    let mut runs: Vec<Vec<RunResult>> = vec![Vec::with_capacity(env.runs); systems.len()];
    if interleave {
        let setups: Vec<Setup> = systems
            .iter()
            .map(|&s| Setup::new(s, env, point))
            .collect::<io::Result<_>>()?;
        for _ in 0..env.runs {
            for (i, setup) in setups.iter().enumerate() {
                runs[i].push(setup.run(env, point, bound)?);
                bar.inc(1);
            }
        }
        for setup in setups {
            setup.finish()?;
        }
    } else {
        for (i, &system) in systems.iter().enumerate() {
            let setup = Setup::new(system, env, point)?;
            for _ in 0..env.runs {
                runs[i].push(setup.run(env, point, bound)?);
                bar.inc(1);
            }
            setup.finish()?;
        }
    }
    Ok((runs, interleave))
}

/// Pages of `files` in the kernel's page cache by `cachestat(2)`, one call per open file
/// (thousands of files: no open, mmap and mincore each); `None` where the kernel lacks it.
fn cached_pages(files: &[File]) -> io::Result<Option<u64>> {
    let mut sum = 0;
    for file in files {
        match kernel::cached_pages_of(file)? {
            Some(n) => sum += n,
            None => return Ok(None),
        }
    }
    Ok(Some(sum))
}

/// Reads every file end to end through its descriptor until all `pages` are cached
/// (`cachestat`), three tries.
///
/// Context: reads `files.len() * file_bytes` bytes.
fn warm_by_reading(files: &[File], file_bytes: u64, pages: u64) -> io::Result<()> {
    let mut buf = vec![0u8; file_bytes.min(1 << 20) as usize];
    for _ in 0..3 {
        for file in files {
            let mut at = 0u64;
            while at < file_bytes {
                let n = file.read_at(&mut buf, at)?;
                if n == 0 {
                    break;
                }
                at += n as u64;
            }
        }
        if cached_pages(files)? == Some(pages) {
            return Ok(());
        }
    }
    Err(io::Error::other(format!(
        "warm run impossible: {:?} of {pages} pages cached after reading every file",
        cached_pages(files)?
    )))
}
