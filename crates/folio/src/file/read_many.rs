//! Batched reads: `File::read_many`, what RocksDB's `MultiRead` hands a file system.
//!
//! ```text
//!  1. each range: copy what hits (the optimistic path), up to its first page that does not
//!  2. the pages the ranges still need: Index::gaps (lock-free), sorted, overlaps and
//!     neighbours merged (two ranges in one page read it once; adjacent ones, one read)
//!  3. MissPath::read_gaps: allocate, insert gap by gap, and submit every read at once
//!     (one Backend::submit: one io_uring_enter for the whole batch)
//!  4. each range: the rest through read_at, which now finds its folios in flight and
//!     waits for them (or, where step 3 stopped short of memory, misses on its own)
//! ```
//!
//! Readahead: none. A batch is a set of point reads (a MultiGet), so it opens no window
//! and leaves the handle's state as a random read would; step 4's `read_at` finds its
//! pages inserted and only records where it ended.
//!
//! `File::read_many_async` is the same batch as a future: on its first poll it finds the
//! gaps of every range (step 2, without copying the hits first) and submits them
//! together (step 3, its first allocation without waiting: a future never sleeps), then
//! finishes the ranges one by one as `read_at_async` futures (step 4), which copy what
//! is cached and park on what is in flight.
//!
//! Limits: step 3 takes at most an eighth of the cache, as one miss's run; a batch larger
//! than that reads the rest range by range.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{checked_end, File, ReadAtFuture};
use crate::pagecache::AllocMode;
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
        if self.domain().is_some() {
            // A domain file (module docs of `file`): each range as `read_at`, one by one.
            return reads
                .iter_mut()
                .map(|(offset, buf)| self.read_at(buf, *offset))
                .collect();
        }
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
                let Some(n) = self.read_hit(pos, end, &mut buf[done[i]..], hint) else {
                    // 2. The pages this range still needs.
                    let page = PageIndex::containing(pos);
                    gaps.extend(self.mapping.index.gaps(page, PageIndex::ceil(end)));
                    break;
                };
                done[i] += n;
            }
        }
        // 3. One submission.
        self.submit_gaps(gaps, AllocMode::Wait);
        // 4. The rest of each range, waiting for its folios.
        reads
            .iter_mut()
            .zip(done)
            .map(|((offset, buf), done)| {
                if done == buf.len() {
                    return Ok(done);
                }
                let n = self.read_at(&mut buf[done..], *offset + done as u64)?;
                debug_assert!(done + n <= buf.len());
                Ok(done + n)
            })
            .collect()
    }
}

impl File {
    /// Reads a batch of ranges as `read_many` does, as a future that needs no particular
    /// runtime: the misses of every range are submitted together on the first poll, and
    /// no poll blocks the thread (it parks on the folios in flight, and waits for memory
    /// as `read_at_async` does). The future resolves to one result per range, in order.
    /// Dropping it at any point is safe: reads already submitted land in the cache.
    ///
    /// Errors (per range): as `read_at`'s.
    pub fn read_many_async<'a, 'b: 'a>(
        &'a self,
        reads: &'a mut [(u64, &'b mut [u8])],
    ) -> ReadManyFuture<'a, 'b> {
        ReadManyFuture {
            file: self,
            results: Vec::with_capacity(reads.len()),
            rest: reads.iter_mut(),
            submitted: false,
            current: None,
            in_domain: Vec::new(),
        }
    }

    /// Step 3 of a batch: the gaps sorted and merged, then read with one submission.
    fn submit_gaps(&self, gaps: Vec<(PageIndex, PageIndex)>, first: AllocMode) {
        if gaps.is_empty() {
            return;
        }
        let pages = self.fill().read_gaps(&merge(gaps), first);
        stats::add(&self.core().counters().misses, pages);
    }
}

/// `File::read_many_async`'s future.
pub struct ReadManyFuture<'a, 'b> {
    file: &'a File,
    /// The ranges not started yet.
    rest: std::slice::IterMut<'a, (u64, &'b mut [u8])>,
    /// Whether the batch's gaps were submitted (the first poll).
    submitted: bool,
    /// The range being read.
    current: Option<ReadAtFuture<'a>>,
    results: Vec<io::Result<usize>>,
    /// A domain file's ranges (module docs): every one's `read_at_async`, started at the
    /// first poll, with its result once it has one.
    in_domain: Vec<(ReadAtFuture<'a>, Option<io::Result<usize>>)>,
}

impl std::fmt::Debug for ReadManyFuture<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadManyFuture")
            .field("submitted", &self.submitted)
            .field("finished", &self.results.len())
            .field("left", &self.rest.len())
            .field("current", &self.current)
            .field("in_domain", &self.in_domain.len())
            .finish()
    }
}

impl Future for ReadManyFuture<'_, '_> {
    type Output = Vec<io::Result<usize>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let file = this.file;
        if !this.submitted && file.domain().is_some() {
            this.submitted = true;
            this.in_domain = this
                .rest
                .by_ref()
                .map(|(offset, buf)| (file.read_at_async(buf, *offset), None))
                .collect();
        }
        if !this.in_domain.is_empty() {
            return this.poll_in_domain(cx);
        }
        if !this.submitted {
            this.submitted = true;
            let size = file.mapping.size_bytes();
            let mut gaps = Vec::new();
            for (offset, buf) in this.rest.as_slice() {
                let Ok(request_end) = checked_end(*offset, buf.len()) else {
                    continue; // its read_at_async reports it
                };
                let end = request_end.min(size);
                if *offset < end {
                    gaps.extend(
                        file.mapping
                            .index
                            .gaps(PageIndex::containing(*offset), PageIndex::ceil(end)),
                    );
                }
            }
            file.submit_gaps(gaps, AllocMode::NoWait);
        }
        loop {
            if let Some(read) = this.current.as_mut() {
                let result = std::task::ready!(Pin::new(read).poll(cx));
                this.results.push(result);
                this.current = None;
            }
            match this.rest.next() {
                Some((offset, buf)) => this.current = Some(this.file.read_at_async(buf, *offset)),
                None => return Poll::Ready(std::mem::take(&mut this.results)),
            }
        }
    }
}

impl ReadManyFuture<'_, '_> {
    /// A domain file's batch: each range's future polled until it has its result (each
    /// copies its hits at its first poll and reads the rest on a worker: the ranges'
    /// misses read at once, on as many workers as there are); `Ready` with them all, in
    /// order.
    fn poll_in_domain(&mut self, cx: &mut Context<'_>) -> Poll<Vec<io::Result<usize>>> {
        let mut pending = false;
        for (read, result) in &mut self.in_domain {
            if result.is_none() {
                match Pin::new(read).poll(cx) {
                    Poll::Ready(done) => *result = Some(done),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            return Poll::Pending;
        }
        let results = std::mem::take(&mut self.in_domain)
            .into_iter()
            .map(|(_, result)| result.expect("every range has its result"));
        Poll::Ready(results.collect())
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
    // Post: sorted, and no two ranges overlap or touch.
    debug_assert!(merged.windows(2).all(|w| w[0].1 < w[1].0), "{merged:?}");
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
