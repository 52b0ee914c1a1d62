//! An orphaned segment's writeback, by its keeper or by a recovery (`recovery`): every
//! dirty folio a dead owner left in its segment, written to its file; then each written
//! file's size settled and the file synced; then the segment's state (`finish`).
//!
//! What is written, by the folio's state word as the owner left it (`refcount`):
//! - DIRTY (LOCKED or not): its dirty blocks (`BlockMask`). A LOCKED one is a write that
//!   had not returned, caught mid-copy: its blocks may hold that write whole, in part or
//!   not at all, which is what the kernel may leave too; every other dirty block is whole.
//! - WRITEBACK (the owner's write was in flight, its blocks taken from the mask): the
//!   whole folio. Its bytes are the file's with the dirty blocks applied, and no writer
//!   changes a folio under WRITEBACK, so this writes the same bytes as the write in flight
//!   (which may land before or after ours: the same bytes either way).
//! - Anything else (clean, free, being evicted, a new folio not yet dirty: a write that had
//!   not returned): nothing.
//!
//! Why no older write can land over a newer one: the owner changes a folio's bytes only
//! while it is not under WRITEBACK (a writer waits, and copy on write refuses a folio
//! under I/O), and clears WRITEBACK only after its write completed; so a write of the
//! owner's still in flight after its death is of a folio still marked WRITEBACK, whose
//! bytes we write again. Copy on write moves the dirty blocks to the new folio and marks it
//! DIRTY before the old one is cleaned (`write::into_folio`), so a page has at most one dirty
//! folio with different bytes.
//!
//! Blocks are written whole (4 KiB, from the frame, O_DIRECT where the owner opened the
//! file so), in file order, blocks that follow each other merged into one write of up to
//! 2 MiB whatever folios they sit in; a block past the logical size is not written, and
//! the size is then set to the logical one (`ftruncate`), which also cuts the zeros after
//! it in the last block.

use std::collections::{BTreeSet, HashMap};
use std::fs::File as StdFile;
use std::io;
use std::sync::Arc;

use crate::arena::{Arena, ArenaPages};
use crate::folio_meta::MappingId;
use crate::io::backend::{FlushKind, FrameBuf, Op, IO_BYTES_MAX};
use crate::io::sync;
use crate::segment::layout::{SegmentState, SIZE_UNKNOWN};
use crate::segment::Segment;
use crate::types::{FrameId, Order, PageIndex, ORDER_MAX, PAGE_BYTES};
use crate::write::mask::{BlockMask, Blocks};

/// What a writeback did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Folios written (some of their blocks).
    pub folios: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Files synced.
    pub files: u32,
    /// Files a write, the size's setting or the sync failed on (the segment stays).
    pub failed_files: u32,
    /// Dirty folios of files the keeper has no descriptor for (never registered, or
    /// forgotten: deleted, or in a recovery whose path no longer leads to the file).
    pub folios_without_file: u64,
}

/// A dirty folio found in the side table.
struct Dirty {
    frame: FrameId,
    order: Order,
    mapping: MappingId,
    head: PageIndex,
    blocks: Blocks,
}

impl Dirty {
    /// Whether the side table still says what it said when the folio was found: its
    /// identity, and dirty or under writeback (checked before each write: a segment is
    /// untrusted input, and nothing but the dead owner's late completions, which change
    /// no identity, may change it under a keeper or a recovery).
    fn still_found(&self, arena: &Arena) -> bool {
        let meta = arena.meta(self.frame);
        let state = meta.state.load();
        meta.identity() == (self.mapping, self.head, self.order)
            && !state.is_dead()
            && (state.is_dirty() || state.is_writeback())
    }
}

/// Every folio the segment says is dirty, by mapping.
fn dirty_folios(arena: &Arena, segment: &Segment) -> HashMap<MappingId, Vec<Dirty>> {
    let chunk = 1u32 << ORDER_MAX;
    let mut found: HashMap<MappingId, Vec<Dirty>> = HashMap::new();
    for range in segment.written_meta_frames() {
        let mut frame = range.start / chunk * chunk;
        while frame < range.end {
            let meta = arena.meta(FrameId(frame));
            let state = meta.state.load();
            let (mapping, head, order) = meta.identity();
            let pages = order.pages() as u32;
            let is_head = frame % pages == 0 && frame + pages <= arena.frame_count();
            if state.is_dead() || !is_head || !(state.is_dirty() || state.is_writeback()) {
                frame += 1;
                continue;
            }
            let blocks = if state.is_dirty() {
                BlockMask::of(arena, FrameId(frame), order).peek()
            } else {
                Blocks::range(0, order.pages())
            };
            found.entry(mapping).or_default().push(Dirty {
                frame: FrameId(frame),
                order,
                mapping,
                head,
                blocks,
            });
            frame += pages;
        }
    }
    found
}

/// The mappings that have dirty folios in `segment` (a recovery reopens only those).
pub fn dirty_mappings(segment: &Arc<Segment>) -> BTreeSet<MappingId> {
    let arena = Arena::in_segment(segment.clone(), ArenaPages::Small);
    dirty_folios(&arena, segment).into_keys().collect()
}

/// Writes back what `segment` holds dirty to `files` (module docs).
///
/// Context: the segment's owner is dead and its lock is ours (the keeper, a recovery).
pub fn write_back(
    segment: &Arc<Segment>,
    files: &HashMap<MappingId, StdFile>,
) -> io::Result<Written> {
    let arena = Arena::in_segment(segment.clone(), ArenaPages::Small);
    let mut written = Written::default();
    let dirty = dirty_folios(&arena, segment);
    for (&id, file) in files {
        let folios = dirty.get(&id).map_or(&[][..], Vec::as_slice);
        // `dirty_folios` sorted them by file: each write goes to its folios' own file.
        debug_assert!(folios.iter().all(|folio| folio.mapping == id));
        let size = segment
            .slot(id)
            .and_then(|slot| slot.read())
            .map_or(SIZE_UNKNOWN, |record| record.size_bytes);
        if folios.is_empty() && size == SIZE_UNKNOWN {
            continue;
        }
        match redone_once_on_eio(|| write_file(&arena, file, folios, size)) {
            Ok(bytes) => {
                written.folios += folios.len() as u64;
                written.bytes += bytes;
                written.files += 1;
            }
            Err(e) => {
                // The segment stays (its pages are not on disk); the reason is the only
                // trace a recovery leaves of it (a keeper's stderr is closed).
                eprintln!("folio: the writeback of mapping {} failed: {e}", id.0);
                written.failed_files += 1;
            }
        }
    }
    written.folios_without_file = dirty
        .iter()
        .filter(|(id, _)| !files.contains_key(id))
        .map(|(_, folios)| folios.len() as u64)
        .sum();
    // Each file counted once, written or failed.
    assert!(u64::from(written.files) + u64::from(written.failed_files) <= files.len() as u64);
    Ok(written)
}

/// `write`, made again once if it fails with EIO; the second result stands.
///
/// Why: an EIO at a file's `fsync` may report no write of ours but the kernel's note that
/// its own cache of the file went stale beside a direct write ("Page cache invalidation
/// failure on direct I/O": the kernel records EIO in the file's error sequence and prints
/// the first 10 a day, then nothing). A dead owner's io_uring writes complete after its
/// death, in a kernel worker, and the kernel can then hold pages of the file that such a
/// write's invalidation cannot drop: `keeper_crash` met it under load on files no test
/// wrote through the kernel's cache (a round's files start empty, or written synced and
/// dropped from that cache), and dmesg named `kworker` each time: an asynchronous direct
/// write's completion, which only the owner's ring makes. Such an error is
/// reported once per open file (the sync consumed it), the disk holds what our direct
/// writes wrote, and the segment still holds every byte: writing the blocks again and
/// syncing again proves them on disk, and a real failure (a failing device) fails the
/// second time too and stands. Only EIO is redone: every other error says something about
/// our request.
fn redone_once_on_eio<T>(mut write: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    match write() {
        Err(e) if e.raw_os_error() == Some(libc::EIO) => {
            eprintln!("folio: a writeback's sync reported EIO; writing the file again");
            write()
        }
        result => result,
    }
}

/// One file: its dirty blocks below `size` (all of them if the size is unknown), in file
/// order, blocks that follow each other merged into one write (at most `IO_BYTES_MAX` and
/// `UIO_MAXIOV` buffers, as the owner's writeback merges them), then the size, then
/// `fsync`. Returns the bytes written.
///
/// Why merged: a file written in small folios (every page a write made without a read is
/// an order-0 folio) would otherwise take one synchronous 4 KiB write per page, in the
/// arena's order: 256 MiB dirty took the keeper 7-9 s here, where the kernel's fsync of the
/// same dirty data took 0.4-0.9 s.
fn write_file(arena: &Arena, file: &StdFile, folios: &[Dirty], size: u64) -> io::Result<u64> {
    let mut in_order: Vec<&Dirty> = folios.iter().collect();
    in_order.sort_unstable_by_key(|folio| folio.head);
    let mut bytes = 0;
    let mut run = Run::default();
    for folio in in_order {
        // Before the write: the folio is the one found, and its place is a file offset.
        let Some(head_bytes) = folio
            .head
            .0
            .checked_mul(PAGE_BYTES as u64)
            .filter(|&b| b < i64::MAX as u64 / 2)
        else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "folio: a dirty folio's page index is past any file's end",
            ));
        };
        if !folio.still_found(arena) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "folio: a dirty folio changed under the writeback",
            ));
        }
        for (first, count) in folio.blocks.runs() {
            // A mask word of a small folio holds bits past its pages only in a damaged or
            // forged segment: they name no block of it.
            if first >= folio.order.pages() {
                continue;
            }
            let count = count.min(folio.order.pages() - first);
            let offset = head_bytes + first * PAGE_BYTES as u64;
            if size != SIZE_UNKNOWN && offset >= size {
                continue;
            }
            let count = if size == SIZE_UNKNOWN {
                count
            } else {
                count.min((size - offset).div_ceil(PAGE_BYTES as u64))
            };
            // Before the write: the blocks lie within the folio, and start below the
            // logical size (the last one may hold its end).
            assert!(count >= 1 && first + count <= folio.order.pages());
            assert!(size == SIZE_UNKNOWN || offset + (count - 1) * (PAGE_BYTES as u64) < size);
            let buf = arena.io_buf_pages(folio.frame, folio.order, first, count);
            assert_eq!(buf.len_bytes() as u64, count * PAGE_BYTES as u64);
            if !run.takes(offset, buf.len_bytes()) {
                bytes += run.write(file)?;
                run = Run {
                    offset_bytes: offset,
                    ..Run::default()
                };
            }
            run.len_bytes += buf.len_bytes();
            run.bufs.push(buf);
        }
    }
    bytes += run.write(file)?;
    // After the writes: every folio still the one found (else what was written may be
    // bytes that changed under it).
    if !folios.iter().all(|folio| folio.still_found(arena)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "folio: a dirty folio changed under the writeback",
        ));
    }
    if size != SIZE_UNKNOWN && file.metadata()?.len() != size {
        sync::set_len(file, size)?;
    }
    sync::flush(file, FlushKind::All)?;
    Ok(bytes)
}

/// Blocks that follow each other in a file, written as one.
#[derive(Default)]
struct Run {
    offset_bytes: u64,
    len_bytes: usize,
    bufs: Vec<FrameBuf>,
}

impl Run {
    /// Whether `len_bytes` at `offset_bytes` may join the run (it follows it, and the run
    /// stays within one request's limits). An empty run takes nothing: it is replaced by
    /// one that starts at the block (it has no offset of its own yet).
    fn takes(&self, offset_bytes: u64, len_bytes: usize) -> bool {
        !self.bufs.is_empty()
            && self.offset_bytes + self.len_bytes as u64 == offset_bytes
            && self.len_bytes + len_bytes <= IO_BYTES_MAX
            && self.bufs.len() < libc::UIO_MAXIOV as usize
    }

    /// Writes the run whole (nothing for an empty one); returns its bytes.
    fn write(&self, file: &StdFile) -> io::Result<u64> {
        // Within one request's limits (`takes`), its length its buffers'.
        assert!(self.bufs.len() <= libc::UIO_MAXIOV as usize && self.len_bytes <= IO_BYTES_MAX);
        debug_assert_eq!(
            self.len_bytes,
            self.bufs.iter().map(FrameBuf::len_bytes).sum::<usize>()
        );
        let mut done = 0;
        while done < self.len_bytes {
            let now = sync::transfer(file, Op::Write, self.offset_bytes, &self.bufs, done)?;
            if now == done {
                return Err(io::Error::from(io::ErrorKind::WriteZero));
            }
            done = now;
        }
        assert_eq!(
            done, self.len_bytes,
            "a run is written whole, not past its end"
        );
        Ok(self.len_bytes as u64)
    }
}

/// The keeper's step 4 (`keeper`'s module docs), and a recovery's: writes back, syncs, and removes the segment if every dirty page is on disk.
/// A named segment is not removed but left written, for the next cache of its name to
/// adopt (`adopt`), each written file stamped as it is now (`Segment::stamp_files`).
pub(crate) fn finish(
    segment: &Arc<Segment>,
    files: &mut HashMap<MappingId, StdFile>,
) -> io::Result<Written> {
    segment.set_state(SegmentState::Orphaned);
    let written = write_back(segment, files)?;
    assert!(written.files as usize + written.failed_files as usize <= files.len());
    if written.failed_files == 0 {
        if segment.header().retained() {
            segment.stamp_files(files.iter().map(|(&id, file)| (id, file)));
            segment.set_state(SegmentState::Written);
        } else {
            segment.set_state(SegmentState::Written);
            segment.remove()?;
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eio() -> io::Error {
        io::Error::from_raw_os_error(libc::EIO)
    }

    #[test]
    fn one_eio_is_written_again_and_the_second_result_stands() {
        let mut tries = 0;
        let result = redone_once_on_eio(|| {
            tries += 1;
            if tries == 1 {
                Err(eio())
            } else {
                Ok(tries)
            }
        });
        assert_eq!(result.unwrap(), 2);
    }

    #[test]
    fn a_second_eio_stands() {
        let mut tries = 0;
        let result: io::Result<()> = redone_once_on_eio(|| {
            tries += 1;
            Err(eio())
        });
        assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::EIO));
        assert_eq!(tries, 2, "written twice, not more");
    }

    #[test]
    fn other_errors_are_not_written_again() {
        for errno in [libc::ENOSPC, libc::EBADF, libc::EINVAL] {
            let mut tries = 0;
            let result: io::Result<()> = redone_once_on_eio(|| {
                tries += 1;
                Err(io::Error::from_raw_os_error(errno))
            });
            assert_eq!(result.unwrap_err().raw_os_error(), Some(errno));
            assert_eq!(tries, 1, "errno {errno} written once");
        }
        let mut tries = 0;
        let result: io::Result<()> = redone_once_on_eio(|| {
            tries += 1;
            Err(io::Error::new(io::ErrorKind::InvalidData, "changed"))
        });
        assert!(result.is_err());
        assert_eq!(tries, 1);
    }
}
