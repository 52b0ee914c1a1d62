//! The O_DIRECT grid of `limits`: sequential O_DIRECT reads of a cold file at every point
//! of block size x queue depth x the pages the reads land in (`Grid`), through io_uring
//! (`odirect_uring`), else a pool of `pread` threads (`odirect_pool`), every byte
//! verified after the clock in its slot of the landing area (`Landing`).
//!
//! Limits: as the workload's (`super`): a file larger than the landing area has only its
//! last `LANDING_BYTES_MAX` bytes of reads verified.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde_json::{json, Value};

use super::{Resolved, Shape, LANDING_BYTES_MAX};
use crate::data;
use crate::kernel::{self, AlignedBuf, ColdMethod};
use crate::mapped::{Mapped, Pages};
use crate::measure::{self, Bound, RunResult};

/// The O_DIRECT grid: one landing area, and every point's runs.
pub(super) struct Grid {
    shapes: Vec<Shape>,
    runs: Vec<Vec<RunResult>>,
    /// The landing areas of 4 KiB pages and of huge pages.
    base: Landing,
    huge: Landing,
    pub(super) engine: &'static str,
}

impl Grid {
    pub(super) fn new(p: &Resolved) -> io::Result<Grid> {
        Ok(Grid {
            shapes: p.grid.clone(),
            runs: vec![Vec::new(); p.grid.len()],
            base: Landing::new(p, Pages::Base)?,
            huge: Landing::new(p, Pages::Huge)?,
            engine: "io_uring",
        })
    }

    /// Bytes of each landing area, and of its huge pages (`AnonHugePages` in smaps).
    pub(super) fn landing_json(&self) -> Value {
        json!({
            "bytes": self.base.area.len(),
            "base_area_huge_bytes": self.base.huge_bytes(),
            "huge_area_huge_bytes": self.huge.huge_bytes(),
        })
    }

    /// One run of every point, each from a cold file.
    pub(super) fn measure(
        &mut self,
        path: &Path,
        p: &Resolved,
        bar: &indicatif::ProgressBar,
    ) -> io::Result<()> {
        for (i, &shape) in self.shapes.iter().enumerate() {
            bar.set_message(format!("O_DIRECT {}", shape.describe()));
            let landing = match shape.pages {
                Pages::Base => &mut self.base,
                Pages::Huge => &mut self.huge,
            };
            let (r, engine) = odirect(path, p.file_bytes, shape, landing)?;
            self.engine = engine;
            self.runs[i].push(r);
            bar.inc(1);
        }
        Ok(())
    }

    pub(super) fn runs_of(&self, shape: Shape) -> &[RunResult] {
        let i = self
            .shapes
            .iter()
            .position(|s| *s == shape)
            .expect("the qd32 shape is in the grid");
        &self.runs[i]
    }

    /// The point with the best median MB/s, and its runs.
    pub(super) fn best(&self) -> (Shape, &[RunResult]) {
        let median =
            |runs: &[RunResult]| measure::median(runs, RunResult::mb_per_sec).0.mb_per_sec();
        let i = (0..self.shapes.len())
            .max_by(|&a, &b| median(&self.runs[a]).total_cmp(&median(&self.runs[b])))
            .expect("a grid of at least one point");
        (self.shapes[i], &self.runs[i])
    }

    /// The best median MB/s of the points whose reads land in `pages`.
    pub(super) fn best_of(&self, pages: Pages) -> f64 {
        self.shapes
            .iter()
            .zip(&self.runs)
            .filter(|(s, _)| s.pages == pages)
            .map(|(_, runs)| measure::median(runs, RunResult::mb_per_sec).0.mb_per_sec())
            .fold(0.0, f64::max)
    }

    pub(super) fn to_json(&self) -> Value {
        json!(self
            .shapes
            .iter()
            .zip(&self.runs)
            .map(|(s, runs)| {
                let mut v = s.to_json();
                v["mb_per_sec"] =
                    json!(measure::median(runs, RunResult::mb_per_sec).0.mb_per_sec());
                v["runs_mb_per_sec"] =
                    json!(runs.iter().map(RunResult::mb_per_sec).collect::<Vec<_>>());
                v
            })
            .collect::<Vec<_>>())
    }
}

/// O_DIRECT sequential reads of the cold file at `shape`: io_uring, else a pool of pread
/// threads. Returns the run and the engine used.
fn odirect(
    path: &Path,
    file_bytes: u64,
    shape: Shape,
    landing: &mut Landing,
) -> io::Result<(RunResult, &'static str)> {
    kernel::make_cold(&[path.to_path_buf()], ColdMethod::FadviseDontNeed)?;
    let file = kernel::open_direct(path)?;
    let mut r = match io_uring::IoUring::new(shape.depth.next_power_of_two() as u32) {
        Ok(ring) => (odirect_uring(ring, &file, shape, landing)?, "io_uring"),
        Err(_) => (
            odirect_pool(&file, shape)?,
            "a pread thread pool, verified inline (io_uring refused)",
        ),
    };
    if r.0.bytes_read != file_bytes {
        return Err(io::Error::other(format!(
            "O_DIRECT {} read {} of {file_bytes} bytes",
            shape.describe(),
            r.0.bytes_read
        )));
    }
    r.0.extra
        .insert("block_bytes".into(), json!(shape.block_bytes));
    r.0.extra.insert("queue_depth".into(), json!(shape.depth));
    Ok(r)
}

/// Where the O_DIRECT reads land: one anonymous mapping (2 MiB aligned) of 4 KiB pages or
/// advised for huge pages, cut into slots of the read size, each read in its own slot
/// until the area is used up (then round again, skipping slots still in flight). Faulted
/// in at creation, so no read pays a page fault.
struct Landing {
    area: Mapped,
}

/// The poison written at the start of every 4 KiB page of the landing area before a run:
/// a read that did not happen leaves it, and no data word equals it.
const POISON: u64 = 0xdead_beef_dead_beef;
const HUGE_BYTES: usize = 2 << 20;

impl Landing {
    fn new(p: &Resolved, pages: Pages) -> io::Result<Landing> {
        let largest = p
            .grid
            .iter()
            .map(|s| {
                let blocks = p.file_bytes.div_ceil(s.block_bytes as u64);
                s.block_bytes as u64 * (s.depth as u64).min(blocks)
            })
            .max()
            .unwrap_or(0);
        let biggest_block = p
            .grid
            .iter()
            .map(|s| s.block_bytes as u64)
            .max()
            .unwrap_or(0);
        let bytes = p
            .file_bytes
            .min(LANDING_BYTES_MAX)
            .max(largest)
            .next_multiple_of(biggest_block.max(HUGE_BYTES as u64)) as usize;
        let mut landing = Landing {
            area: Mapped::new(bytes, pages)?,
        };
        // Fault every page in now, outside any timing.
        landing.poison();
        Ok(landing)
    }

    fn slots(&self, block_bytes: usize) -> usize {
        self.area.len() / block_bytes
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: `base..base + bytes` is inside the live mapping owned by self, faulted in
        // and written (poisoned) at creation; no read is in flight while it is borrowed
        // (`odirect_uring` reaps every read before it looks).
        unsafe { std::slice::from_raw_parts(self.area.as_mut_ptr(), self.area.len()) }
    }

    fn poison(&mut self) {
        let base = self.area.as_mut_ptr();
        for at in (0..self.area.len()).step_by(4096) {
            // SAFETY: `at + 8 <= len` (the length is a multiple of 2 MiB), inside the
            // mapping; `&mut self` means no read is in flight into it.
            unsafe { base.add(at).cast::<u64>().write_volatile(POISON) };
        }
    }

    fn huge_bytes(&self) -> u64 {
        self.area.huge_bytes()
    }
}

/// The reads in flight and landed: per slot, the file offset and length of the last read
/// into it, whether it is in flight, and when it was submitted.
struct Slots {
    landed: Vec<Option<(u64, usize)>>,
    in_flight: Vec<bool>,
    started: Vec<Instant>,
}

/// `shape.depth` reads in flight through io_uring over the whole file, each into its own
/// slot of `landing`; no verification until the clock has stopped.
fn odirect_uring(
    mut ring: io_uring::IoUring,
    file: &File,
    shape: Shape,
    landing: &mut Landing,
) -> io::Result<RunResult> {
    use io_uring::{opcode, types};
    let len = file.metadata()?.len();
    let block = shape.block_bytes;
    let depth = shape.depth;
    let slot_count = landing.slots(block);
    assert!(slot_count >= 1, "a landing area of at least one block");
    landing.poison();
    let fd = types::Fd(file.as_raw_fd());
    let base = landing.area.as_mut_ptr();
    let mut slots = Slots {
        landed: vec![None; slot_count],
        in_flight: vec![false; slot_count],
        started: vec![Instant::now(); slot_count],
    };
    let mut r = measure::run_here(|rec| {
        let mut next = 0u64;
        let mut next_slot = 0usize;
        let mut in_flight = 0usize;
        let mut pump = || -> io::Result<()> {
            loop {
                while in_flight < depth && next < len && !slots.in_flight[next_slot] {
                    let want = (len - next).min(block as u64) as u32;
                    // The last block of a file whose length is not a multiple of the
                    // logical block would fail with O_DIRECT: read the block whole.
                    let ask = want.next_multiple_of(kernel::DIRECT_ALIGN_BYTES as u32);
                    let ask = ask.min(block as u32);
                    // SAFETY: `next_slot < slot_count`, so the slot lies inside the
                    // landing area (slot_count * block <= its length).
                    let dst = unsafe { base.add(next_slot * block) };
                    let sqe = opcode::Read::new(fd, dst, ask)
                        .offset(next)
                        .build()
                        .user_data(next_slot as u64);
                    // SAFETY: the slot's memory lives in `landing`, which outlives this
                    // function (borrowed mutably for all of it); nothing reads or writes
                    // the slot until its completion is reaped (it is marked in flight
                    // and skipped until then), and every read is reaped before return.
                    unsafe { ring.submission().push(&sqe) }
                        .map_err(|_| io::Error::other("io_uring submission queue full"))?;
                    slots.in_flight[next_slot] = true;
                    slots.landed[next_slot] = Some((next, want as usize));
                    slots.started[next_slot] = Instant::now();
                    in_flight += 1;
                    next += u64::from(want);
                    next_slot = if next_slot + 1 == slot_count {
                        0
                    } else {
                        next_slot + 1
                    };
                }
                if in_flight == 0 {
                    return Ok(());
                }
                wait_one(&ring)?;
                let done: Vec<(u64, i32)> = ring
                    .completion()
                    .map(|c| (c.user_data(), c.result()))
                    .collect();
                for (slot, res) in done {
                    let slot = slot as usize;
                    in_flight -= 1;
                    slots.in_flight[slot] = false;
                    if res < 0 {
                        return Err(io::Error::from_raw_os_error(-res));
                    }
                    let (at, want) = slots.landed[slot].expect("a slot in flight has landed");
                    if (res as usize) < want {
                        return Err(io::Error::other(format!(
                            "short O_DIRECT read at {at}: {res} of {want} bytes"
                        )));
                    }
                    rec.latency(slots.started[slot].elapsed());
                    rec.op(want as u64, 0);
                }
            }
        };
        let outcome = pump();
        // On an error, reap every read still in flight before the landing area can go.
        while in_flight > 0 {
            wait_one(&ring)?;
            in_flight -= ring.completion().count();
        }
        outcome
    })?;
    // The clock has stopped: check every slot against the offset last read into it.
    let mut verified = 0u64;
    for (slot, landed) in slots.landed.iter().enumerate() {
        if let Some((at, n)) = *landed {
            verified += data::verify(&landing.as_slice()[slot * block..slot * block + n], at)?;
        }
    }
    r.bytes_verified = verified;
    Ok(r)
}

/// Submits what is queued and waits for one completion, retrying when interrupted.
fn wait_one(ring: &io_uring::IoUring) -> io::Result<()> {
    loop {
        match ring.submit_and_wait(1) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other.map(|_| ()),
        }
    }
}

fn odirect_pool(file: &File, shape: Shape) -> io::Result<RunResult> {
    let len = file.metadata()?.len();
    let next = AtomicU64::new(0);
    measure::run_threads(shape.depth, Bound::Work { cap: None }, |_, _, rec| {
        let mut buf = AlignedBuf::new(shape.block_bytes);
        loop {
            let at = next.fetch_add(shape.block_bytes as u64, Ordering::Relaxed);
            if at >= len {
                return Ok(());
            }
            let started = Instant::now();
            let n = file.read_at(&mut buf[..shape.block_bytes], at)?;
            rec.latency(started.elapsed());
            rec.op(n as u64, data::verify(&buf[..n], at)?);
        }
    })
}
