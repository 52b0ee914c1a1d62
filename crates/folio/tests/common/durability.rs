//! What a file may hold after a crash (a killed process, a power cut), given what was
//! written to it and which syncs returned Ok: the model both crash tests check the disk
//! against (`tests/crash.rs`, `tests/write_simulation.rs`).
//!
//! A [`History`] is one writer's view of one file since a known state (`base`, durable):
//! its writes in program order (a `set_len` down is a write of zeros over the bytes it
//! cut), its acknowledgements (a sync that returned Ok: the writes that returned before it
//! started, over the range it covered), and the syncs that reported an error. An
//! acknowledgement vouches for the writes that returned before it and after the last
//! error reported before it: a reported error may mean lost writes (a file given up after
//! its writeback kept failing drops its dirty data, DESIGN.md §8), and a later sync that
//! returns Ok says nothing of them, as `fsync` after an error does not. For each byte `b`:
//! - `j*(b)`: over the acknowledgements covering `b`, the last write each vouches for that
//!   covers `b` and surely stored its bytes; the latest of those (none: the base);
//! - the byte on disk must be `j*(b)`'s (or the base's, if there is none), or the byte of
//!   some write after `j*(b)` that covers `b` (a write no sync vouched for may or may not
//!   have reached the disk, whole or torn). Past the base's length the base is zeros.
//!
//! So an acknowledged byte that nobody wrote since is exactly its acknowledged value, and
//! no byte is ever one nobody wrote there. The length on disk is at least the size the last
//! acknowledgement left (less what a later `set_len` cut) and at most the largest size
//! the file had, rounded up to 4 KiB (a tail block is written whole), or exactly that
//! where whoever finished the writes set the size (`Tail`).
//!
//! A process killed without a sync (`tests/keeper_crash.rs`) is a history whose one
//! acknowledgement comes last and covers the whole file: every write that returned.
//!
//! A crash that does not honour cuts (`Cuts::MayComeBack`: the fault backend's power
//! model, which has no size) may bring back what a cut removed: a byte whose vouched value
//! is a cut's zero may then also be the byte of any write before the cut, or the base's.
//!
//! Syncs may come from another thread than the writes (`tests/write_simulation.rs`): an
//! acknowledgement then names the writes that had returned when its sync began, and the
//! size then, and may be recorded after later writes and cuts. A cut recorded before it
//! but issued after its sync began still bounds the length floor it leaves.

#![allow(dead_code)]

use std::ops::Range;

/// Whether the crash a history is checked against keeps what a cut (`set_len` down)
/// removed removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cuts {
    /// A real file system's crash: a cut that a flush followed is durable
    /// (`tests/crash.rs`).
    Durable,
    /// The fault backend's power model, which has no size (`io/fault/mod.rs`, "Not
    /// modelled") and so does not see a cut: when a flush after the cut marks durable a
    /// block written before it while a later write to that block is in flight, a power
    /// loss that loses the later write brings the block back as it was before the cut
    /// (found by `tests/write_simulation.rs` once its syncer thread flushed while its
    /// writer wrote).
    MayComeBack,
}

/// How far past the largest size it had a file may reach after the crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tail {
    /// To the end of the 4 KiB block that holds its last byte: a killed process's
    /// writeback writes a tail block whole and nobody cuts it back (`tests/crash.rs`).
    WholeBlock,
    /// Not past it: whoever finished the dead process's writes set the size, as the
    /// kernel's own page cache keeps it (the keeper, `tests/keeper_crash.rs`).
    Exact,
}

/// Whether a write surely stored its bytes in the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// It returned Ok (or, for a `set_len` down, the cut happened).
    Yes,
    /// It failed, or its fate is unknown: each byte is its old or new value.
    Maybe,
}

#[derive(Debug)]
pub struct Write {
    pub offset: u64,
    pub bytes: Vec<u8>,
    pub stored: Stored,
}

impl Write {
    fn range(&self) -> Range<u64> {
        self.offset..self.offset + self.bytes.len() as u64
    }
}

#[derive(Clone, Debug)]
struct Ack {
    /// The writes it vouches for: those that returned before the sync started, after the
    /// last error reported before it (module docs).
    writes: Range<usize>,
    range: Range<u64>,
}

/// One file's writes and acknowledged syncs since `base` (module docs).
#[derive(Debug)]
pub struct History {
    base: Vec<u8>,
    writes: Vec<Write>,
    acks: Vec<Ack>,
    /// The writes issued before the last reported error: no later acknowledgement vouches
    /// for them.
    error_floor: usize,
    /// The least length the disk may have (the last acknowledged size, cut by later
    /// `set_len`s).
    len_floor: u64,
    /// Each cut (a `set_len` down, done or maybe done): the index of its write of zeros
    /// and the length it left.
    cuts: Vec<(usize, u64)>,
    cuts_kept: Cuts,
    tail: Tail,
    /// The largest size the file had.
    len_max: u64,
}

impl History {
    /// A file that holds `base`, durably.
    pub fn new(base: Vec<u8>) -> History {
        let len = base.len() as u64;
        History {
            base,
            writes: Vec::new(),
            acks: Vec::new(),
            error_floor: 0,
            len_floor: len,
            cuts: Vec::new(),
            cuts_kept: Cuts::Durable,
            tail: Tail::WholeBlock,
            len_max: len,
        }
    }

    /// As `new`, with a file that may reach past its largest size as `tail` says.
    pub fn with_tail(base: Vec<u8>, tail: Tail) -> History {
        History {
            tail,
            ..History::new(base)
        }
    }

    /// As `new`, checked against a crash that keeps cuts as `cuts_kept` says.
    pub fn with_cuts(base: Vec<u8>, cuts_kept: Cuts) -> History {
        History {
            cuts_kept,
            ..History::new(base)
        }
    }

    pub fn writes(&self) -> usize {
        self.writes.len()
    }

    pub fn acks(&self) -> usize {
        self.acks.len()
    }

    /// A write of `bytes` at `offset`, about to be issued (`Stored::Maybe`) or done.
    pub fn write(&mut self, offset: u64, bytes: Vec<u8>, stored: Stored) {
        self.len_max = self.len_max.max(offset + bytes.len() as u64);
        self.writes.push(Write {
            offset,
            bytes,
            stored,
        });
    }

    /// The last write returned: it is `stored` now.
    pub fn settle_last(&mut self, stored: Stored) {
        self.writes.last_mut().expect("a write to settle").stored = stored;
    }

    /// `set_len(new_len)` on a file of `old_len` returned Ok: a cut is a write of zeros
    /// over the bytes it removed (a later extension reads them as zeros).
    pub fn set_len(&mut self, old_len: u64, new_len: u64) {
        if new_len < old_len {
            self.cut(old_len, new_len, Stored::Yes);
        }
        self.len_max = self.len_max.max(new_len);
    }

    /// `set_len(new_len)` down from `old_len` failed: the cache may have cut the file
    /// before the error (its bytes past `new_len` zeros, or not, the length `new_len`).
    pub fn maybe_cut(&mut self, old_len: u64, new_len: u64) {
        if new_len < old_len {
            self.cut(old_len, new_len, Stored::Maybe);
        }
    }

    fn cut(&mut self, old_len: u64, new_len: u64, stored: Stored) {
        self.cuts.push((self.writes.len(), new_len));
        self.write(new_len, vec![0; (old_len - new_len) as usize], stored);
        self.len_floor = self.len_floor.min(new_len);
    }

    /// A sync of `range` that started after the first `writes_before` writes returned
    /// (writes after those may have been issued, from the sync's start to now), with the
    /// file's size `size` then. A cut among the later writes bounds the length it vouches
    /// for (module docs).
    pub fn ack(&mut self, writes_before: usize, range: Range<u64>, size: u64) {
        assert!(writes_before <= self.writes.len());
        self.acks.push(Ack {
            writes: self.error_floor.min(writes_before)..writes_before,
            range,
        });
        let cut_since = self
            .cuts
            .iter()
            .filter(|&&(write, _)| write >= writes_before)
            .map(|&(_, len)| len)
            .min();
        self.len_floor = cut_since.map_or(size, |cut| cut.min(size));
        self.len_max = self.len_max.max(size);
    }

    /// A sync reported an error after the first `writes_before` writes were issued:
    /// later acknowledgements do not vouch for them (module docs).
    pub fn error(&mut self, writes_before: usize) {
        self.error_floor = self.error_floor.max(writes_before);
    }

    /// The write at `index`.
    pub fn write_at(&self, index: usize) -> &Write {
        &self.writes[index]
    }

    /// `j*(b) + 1` for `b` in `0..n` (0: the base; module docs), and the vouched bytes.
    /// Acknowledgements come in eras between reported errors; within an era the latest
    /// acknowledgement covering a byte vouches for the most (the ones that cover the
    /// whole span set a floor at once, the few others are painted); a later era's writes
    /// come after an earlier era's, so its vouched write replaces theirs.
    fn vouched(&self, n: usize) -> (Vec<u32>, Vec<u8>) {
        let mut last = vec![0u32; n];
        let mut expected = self.base.clone();
        expected.resize(n, 0);
        let mut era_start = 0;
        while era_start < self.acks.len() {
            let floor = self.acks[era_start].writes.start;
            let era_end = self.acks[era_start..]
                .iter()
                .position(|a| a.writes.start != floor)
                .map_or(self.acks.len(), |i| era_start + i);
            let era = &self.acks[era_start..era_end];
            era_start = era_end;
            let whole = era
                .iter()
                .filter(|a| a.range.start == 0 && a.range.end >= n as u64)
                .map(|a| a.writes.end)
                .max()
                .unwrap_or(floor);
            let mut painted: Option<Vec<u32>> = None;
            for ack in era.iter().filter(|a| a.writes.end > whole) {
                let k = painted.get_or_insert_with(|| vec![whole as u32; n]);
                let (start, end) = clip(&ack.range, n);
                for v in &mut k[start..end] {
                    *v = (*v).max(ack.writes.end as u32);
                }
            }
            let most = era.iter().map(|a| a.writes.end).max().unwrap_or(floor);
            for (j, w) in self.writes.iter().enumerate().take(most).skip(floor) {
                if w.stored != Stored::Yes {
                    continue;
                }
                let (start, end) = clip(&w.range(), n);
                let src = &w.bytes[start.saturating_sub(w.offset as usize)..];
                match &painted {
                    None if j < whole => {
                        expected[start..end].copy_from_slice(&src[..end - start]);
                        last[start..end].fill(j as u32 + 1);
                    }
                    None => {}
                    Some(k) => {
                        for b in start..end {
                            if j < k[b] as usize {
                                expected[b] = src[b - start];
                                last[b] = j as u32 + 1;
                            }
                        }
                    }
                }
            }
        }
        (last, expected)
    }

    /// Checks `disk` (the whole file, read after the crash) against the history.
    /// `Err` names the first wrong byte and what it could have been.
    pub fn check(&self, disk: &[u8]) -> Result<(), String> {
        let len = disk.len() as u64;
        if len < self.len_floor {
            return Err(format!(
                "the file is {len} bytes long, shorter than the {} that acknowledged operations left",
                self.len_floor
            ));
        }
        let len_cap = match self.tail {
            Tail::WholeBlock => self.len_max.next_multiple_of(4096),
            Tail::Exact => self.len_max,
        };
        if len > len_cap {
            return Err(format!(
                "the file is {len} bytes long, longer than it ever was ({} bytes, {len_cap} with {:?})",
                self.len_max, self.tail
            ));
        }
        let n = disk.len();
        let (last, expected) = self.vouched(n);
        if disk == expected {
            return Ok(());
        }
        // A byte that is not its vouched value must be that of a later write (or, if a
        // cut's zero is vouched and cuts may come back, of an earlier one or the base).
        let wrong: Vec<usize> = (0..n).filter(|&b| disk[b] != expected[b]).collect();
        let mut is_cut = vec![false; self.writes.len()];
        for &(write, _) in &self.cuts {
            is_cut[write] = true;
        }
        let came_back = |b: usize| {
            self.cuts_kept == Cuts::MayComeBack && last[b] > 0 && is_cut[last[b] as usize - 1]
        };
        let mut explained: Vec<bool> = wrong
            .iter()
            .map(|&b| came_back(b) && disk[b] == self.base.get(b).copied().unwrap_or(0))
            .collect();
        for (j, w) in self.writes.iter().enumerate() {
            let (start, end) = clip(&w.range(), n);
            let from = wrong.partition_point(|&b| b < start);
            for (i, &b) in wrong[from..].iter().enumerate() {
                if b >= end {
                    break;
                }
                let may = j + 1 > last[b] as usize || (j + 1 < last[b] as usize && came_back(b));
                if may && w.bytes[b - w.offset as usize] == disk[b] {
                    explained[from + i] = true;
                }
            }
        }
        let unexplained: Vec<usize> = wrong
            .into_iter()
            .zip(explained)
            .filter(|&(_, e)| !e)
            .map(|(b, _)| b)
            .collect();
        let Some(&b) = unexplained.first() else {
            return Ok(());
        };
        Err(format!(
            "{} bytes are neither their acknowledged value nor a later write's; the first at offset {b}: {:#04x} on disk, {:#04x} acknowledged ({} of {} writes); {}",
            unexplained.len(),
            disk[b],
            expected[b],
            match last[b] {
                0 => "the base's".to_owned(),
                j => format!("write {}", j - 1),
            },
            self.writes.len(),
            self.describe_writes_over(b as u64)
        ))
    }

    /// Checks `got`, read at `offset` while the cache may have lost dirty data it could
    /// not write (a file given up after failed writebacks re-reads evicted pages from the
    /// disk): each byte must be one the disk may hold (`check`'s rule). Slow: for a few
    /// reads only.
    pub fn check_read_loosely(&self, offset: u64, got: &[u8]) -> Result<(), String> {
        for (i, &byte) in got.iter().enumerate() {
            let b = offset + i as u64;
            let covers = |w: &Write| w.range().contains(&b);
            let last =
                self.acks
                    .iter()
                    .filter(|a| a.range.contains(&b))
                    .filter_map(|a| {
                        a.writes.clone().rev().find(|&j| {
                            self.writes[j].stored == Stored::Yes && covers(&self.writes[j])
                        })
                    })
                    .max();
            let vouched = match last {
                None => self.base.get(b as usize).copied().unwrap_or(0),
                Some(j) => self.writes[j].bytes[(b - self.writes[j].offset) as usize],
            };
            let from = last.map_or(0, |j| j + 1);
            let ok = byte == vouched
                || self.writes[from..]
                    .iter()
                    .any(|w| covers(w) && w.bytes[(b - w.offset) as usize] == byte);
            if !ok {
                return Err(format!(
                    "read byte {byte:#04x} at offset {b}: neither {vouched:#04x} (vouched) nor any later write's; {}",
                    self.describe_writes_over(b)
                ));
            }
        }
        Ok(())
    }

    fn describe_writes_over(&self, b: u64) -> String {
        let over: Vec<String> = self
            .writes
            .iter()
            .enumerate()
            .filter(|(_, w)| w.range().contains(&b))
            .map(|(j, w)| {
                format!(
                    "#{j} [{}, {}) {:?} byte {:#04x}",
                    w.offset,
                    w.range().end,
                    w.stored,
                    w.bytes[(b - w.offset) as usize]
                )
            })
            .collect();
        let acks: Vec<String> = self
            .acks
            .iter()
            .filter(|a| a.range.contains(&b))
            .map(|a| format!("writes {:?}", a.writes))
            .collect();
        format!(
            "writes over it: [{}]; acknowledgements over it: [{}]",
            over.join(", "),
            acks.join(", ")
        )
    }
}

/// `range` within `0..n`, as indices.
fn clip(range: &Range<u64>, n: usize) -> (usize, usize) {
    let end = range.end.min(n as u64) as usize;
    let start = (range.start.min(n as u64) as usize).min(end);
    (start, end)
}
