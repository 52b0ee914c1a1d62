//! Batched reads: `File::read_many`, what RocksDB's `MultiRead` hands a file system.
//!
//! ```text
//!  1. each range: copy what hits (the optimistic path), up to its first page that does not
//!  2. the pages the ranges still need: Index::gaps (lock-free), sorted, overlaps and
//!     neighbours merged (two ranges in one page read it once; adjacent ones, one read)
//!  3. Fill::read_gaps: allocate, insert gap by gap, and submit every read at once
//!     (one Backend::submit: one io_uring_enter for the whole batch)
//!  4. each range: the rest through read_at, which now finds its folios in flight and
//!     waits for them (or, where step 3 stopped short of memory, misses on its own)
//! ```
//!
//! Readahead: none. A batch is a set of point reads (a MultiGet), so it opens no window
//! and leaves the handle's state as a random read would; step 4's `read_at` finds its
//! pages inserted and only records where it ended.
//!
//! Limits: step 3 takes at most an eighth of the cache, as one miss's run; a batch larger
//! than that reads the rest range by range.

use std::io;

use super::{checked_end, File};
use crate::stats;
use crate::types::PageIndex;

impl File {
    /// Reads a batch of ranges, `(offset, buf)` each, as `read_at` would read each of
    /// them, but with the misses of all of them submitted to the device together: one
    /// submission for the whole batch, overlapping and adjacent ranges read once. Returns
    /// one result per range, in order: the bytes read (short only at the end of the file)
    /// or that range's error (a failed read of one range does not fail the others).
    ///
    /// Errors (per range): as `read_at`'s.
    ///
    /// Context: any thread; waits for the batch's reads (and, like `read_at`, for memory
    /// when every folio is pinned).
    pub fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> Vec<io::Result<usize>> {
        let core = self.core();
        let hint = self.hint();
        let size = self.mapping.size_bytes();
        // 1. What hits; `done[i]` bytes of range i are copied.
        let mut done = vec![0usize; reads.len()];
        let mut gaps = Vec::new();
        for (i, (offset, buf)) in reads.iter_mut().enumerate() {
            let Ok(request_end) = checked_end(*offset, buf.len()) else {
                continue; // step 4 reports it
            };
            let end = request_end.min(size);
            loop {
                let pos = *offset + done[i] as u64;
                if pos >= end {
                    break;
                }
                let page = PageIndex::containing(pos);
                let Some((n, frame, head)) =
                    self.read_optimistic(page, pos, end, &mut buf[done[i]..], hint)
                else {
                    // 2. The pages this range still needs.
                    gaps.extend(self.mapping.index.gaps(page, PageIndex::ceil(end)));
                    break;
                };
                core.mem.counters.hit();
                self.note_access(core.mem.arena.meta(frame), page, head, hint);
                done[i] += n;
            }
        }
        // 3. One submission.
        if !gaps.is_empty() {
            let gaps = merge(gaps);
            let pages = self.fill().read_gaps(&gaps);
            stats::add(&core.mem.counters.misses, pages);
        }
        // 4. The rest of each range, waiting for its folios.
        reads
            .iter_mut()
            .zip(done)
            .map(|((offset, buf), done)| {
                if done == buf.len() {
                    return Ok(done);
                }
                let n = self.read_at(&mut buf[done..], *offset + done as u64)?;
                Ok(done + n)
            })
            .collect()
    }
}

/// Sorts page ranges and merges those that overlap or touch.
fn merge(mut gaps: Vec<(PageIndex, PageIndex)>) -> Vec<(PageIndex, PageIndex)> {
    gaps.sort_unstable_by_key(|&(start, _)| start);
    let mut merged: Vec<(PageIndex, PageIndex)> = Vec::with_capacity(gaps.len());
    for (start, end) in gaps {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(a: u64, b: u64) -> (PageIndex, PageIndex) {
        (PageIndex(a), PageIndex(b))
    }

    #[test]
    fn merge_joins_overlapping_and_touching_ranges_only() {
        assert_eq!(merge(vec![]), vec![]);
        assert_eq!(
            merge(vec![p(10, 12), p(0, 1), p(11, 14), p(14, 15), p(3, 4)]),
            vec![p(0, 1), p(3, 4), p(10, 15)]
        );
        assert_eq!(merge(vec![p(5, 9), p(6, 7)]), vec![p(5, 9)]);
    }
}
