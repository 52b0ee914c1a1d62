//! The arena: all folio memory, reserved once at build and cut into frames, and the side
//! table and link words beside it.
//!
//! Design: one anonymous mapping (`MAP_NORESERVE`, aligned to 2 MiB so that an order-9
//! folio can be one huge page, paged as `ArenaPages` says) sized by the cache's capacity,
//! cut into 4 KiB frames. Beside it, the side table of `FolioMeta` (24 B per frame) and the
//! link words (8 B per frame) that thread the per-order free lists of the buddy allocator
//! (orders 0..=9) and, while a frame is cached, its eviction queue. 32 B per 4 KiB frame is
//! 0.78% of the capacity, all of the arena's metadata. Frames are never unmapped while the
//! arena lives (memory given back is advised `MADV_DONTNEED` and reads as zeros), which is
//! what makes the optimistic read of `version` safe: a reader that
//! loses a race copies stale bytes and discards them, it never faults.
//!
//! Memory is made ready off the reader's path: the arena grows 2 MiB chunk by chunk, a
//! background thread faulting chunks in ahead of the allocator, each on the pages its use
//! calls for. An allocation that finds the lists empty grows the arena itself,
//! unpopulated, rather than wait for that thread (waiting made every reader of a shared
//! window pile up behind one chunk, and then all insert the same gap: measured, 100-200
//! conflicting insertions per 256 MiB scan instead of 0-1); it waits only for the arena's
//! last chunks, when another thread holds them (`chunk`).
//!
//! The rooms, one concept each:
//! - `buddy`: the free lists by order; `alloc` (splitting a block, growing the arena when
//!   no listed block fits) and `free` (merging with the buddy).
//! - `quota`: how many frames may be allocated now, and free memory given back to the
//!   system when that falls (`give_back`, `MADV_DONTNEED`), on returned free lists.
//! - `chunk`: the growth, 2 MiB chunk by chunk: a chunk's life (virgin, claimed, listed)
//!   and its bookkeeping (`claimed_frames`, `listed_frames`, `chunks_unpopulated`).
//! - `populate`: the populator thread, which faults chunks in ahead of the allocator, and
//!   `prefault`, which faults them all in at build.
//! - `pages`: which pages each chunk gets, 4 KiB or huge (`ArenaPages`, `FolioUse`).
//! - `copy`: a folio's bytes moved under races: the byte-wise atomic copies out (the
//!   optimistic hit) and in (a write), zeroing, the hit's prefetch.
//! - this file: the mapping and its frames: frame pointers, the I/O buffers and the
//!   pinned slices over them, the side table.
//!
//! Invariants: a frame stays mapped, at one address, until the arena is dropped; every
//! buffer, slice and copy over a folio's frames stays inside the folio's size and the
//! arena (asserted).
//!
//! Protection: the mapping, `frame_count` (the largest capacity) and the side table are
//! fixed at build. A
//! frame's `FolioMeta` follows `folio`'s rules; its link word belongs to the free lists
//! while the frame is free (`buddy`), to the eviction policy while it is cached. The
//! memory of an allocated folio belongs to its owner under the `refcount` protocol:
//! written only while LOCKED (the read that fills it, a write's `copy_in`); read by
//! pinned readers and by optimistic readers through `copy_out`, a byte-wise atomic memcpy
//! (`copy`). Each room says what protects its own state.
//!
//! Limits: at most 2^32 frames (16 TiB); the mapping is reserved whole at build for the
//! largest capacity, and the capacity moves inside it (`quota`). `unsafe` lives in this file (the
//! mapping, frame pointers, the zeroed side table), `pages` (`madvise`), `quota`
//! (`MADV_DONTNEED`), `populate` (the first touch) and `copy`; `buddy` and `chunk` deny
//! it.

// `unsafe` is allowed for this module by the crate root; the rooms without any deny it.
#[deny(unsafe_code)]
mod buddy;
#[deny(unsafe_code)]
mod chunk;
mod copy;
/// The byte-wise atomic copy out (the shared read path's optimistic hit uses it too).
pub(crate) use copy::{atomic_copy, atomic_store_copy};
mod pages;
mod populate;
mod quota;

use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::folio_meta::FolioMeta;
use crate::io::FrameBuf;
use crate::list::Links;
use crate::segment::Segment;
use crate::types::{FrameId, Order, ORDER_MAX, PAGE_BYTES};

use buddy::Buddy;
use chunk::Chunks;
use pages::ChunkPages;
pub use pages::{ArenaPages, FolioUse};
use populate::Populator;
pub use populate::POPULATE_AHEAD_CACHE_BYTES_MIN;

/// Bytes of the largest folio; the mapping is aligned to it.
const HUGE_BYTES: usize = PAGE_BYTES << ORDER_MAX;
/// The arena grows by one chunk at a time: one huge page, so a chunk is one THP fault.
const CHUNK_FRAMES: u32 = 1 << ORDER_MAX;

/// All folio memory (module docs): the mapping and its frames' metadata, and each room's
/// state.
pub struct Arena {
    /// Start of the 2 MiB-aligned frames.
    base: NonNull<u8>,
    /// Where the frames and the side table live.
    backing: Backing,
    frame_count: u32,
    /// The side table: `frame_count` entries, in `backing`.
    meta: NonNull<FolioMeta>,
    /// One link word per frame: the free lists (`buddy`), the eviction queues in `eviction`.
    pub links: Links,
    /// Its free frames, by order (`buddy`).
    buddy: Buddy,
    /// Its growth, chunk by chunk (`chunk`).
    chunks: Chunks,
    /// Which pages chunks get (`pages`).
    pages: ChunkPages,
    /// The background thread that populates chunks ahead of the allocator (`populate`).
    populator: Populator,
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena")
            .field("frames", &self.frame_count)
            .field("free_frames", &self.free_frames())
            .finish()
    }
}

/// The memory under the frames and the side table.
enum Backing {
    /// The process's own: an anonymous mapping (what mmap returned, for munmap) and a
    /// zeroed side table.
    Anonymous {
        map_ptr: *mut libc::c_void,
        map_bytes: usize,
        /// Owns the side table `Arena::meta` points into.
        _meta: Box<[FolioMeta]>,
    },
    /// A segment that outlives the process (`segment`): both are in its shared mapping.
    Segment(Arc<Segment>),
}

// SAFETY: the raw pointers refer to a mapping owned by the arena (or by its segment,
// which it holds) and valid until Drop; all shared mutable state is behind the mutex or atomics, and frame
// memory follows the access rules in the module docs.
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl Arena {
    /// Reserves `frame_count` frames. Fails with the OS error if the reservation is
    /// refused. No frame is populated yet: the arena grows as it is allocated from (or
    /// ahead of it, `populate_ahead`), or all at once by `prefault`.
    pub fn new(frame_count: u32, pages: ArenaPages) -> io::Result<Arena> {
        assert!(frame_count > 0);
        let data_bytes = frame_count as usize * PAGE_BYTES;
        let map_bytes = data_bytes + HUGE_BYTES;
        // SAFETY: an anonymous private mapping with no address hint; the result is checked.
        let map_ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if map_ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let aligned = (map_ptr as usize).next_multiple_of(HUGE_BYTES);
        let base = NonNull::new(aligned as *mut u8).expect("mmap returned null");
        // Neither the side table nor the link words are written here: a frame's are
        // initialised when the arena grows over it (`list_chunk`), so building a 4 GiB cache
        // touches none of its 32 MiB of metadata.
        // SAFETY: every field of FolioMeta is an atomic integer, for which all-zero is
        // a valid value.
        let mut meta: Box<[FolioMeta]> = unsafe { zeroed_slice(frame_count as usize) };
        let meta_ptr = NonNull::new(meta.as_mut_ptr()).expect("a box is non-null");
        let backing = Backing::Anonymous {
            map_ptr,
            map_bytes,
            _meta: meta,
        };
        Ok(Self::over(base, backing, meta_ptr, frame_count, pages))
    }

    /// An arena whose frames and side table are `segment`'s (DESIGN.md §9): what the
    /// process writes there outlives it. Its pages are 4 KiB whatever `pages` asks for
    /// where shared memory gets no transparent huge pages (`shmem_enabled`).
    pub fn in_segment(segment: Arc<Segment>, pages: ArenaPages) -> Arena {
        let frame_count = segment.layout().frame_count;
        let base = segment.frames();
        let meta = segment.meta_table();
        let pages = if pages::shared_huge_pages() {
            pages
        } else {
            ArenaPages::Small
        };
        Self::over(base, Backing::Segment(segment), meta, frame_count, pages)
    }

    fn over(
        base: NonNull<u8>,
        backing: Backing,
        meta: NonNull<FolioMeta>,
        frame_count: u32,
        pages: ArenaPages,
    ) -> Arena {
        let chunk_pages = ChunkPages::new(pages, frame_count);
        // SAFETY: [base, base + frame_count frames) lies inside the backing's mapping.
        unsafe {
            pages::advise(
                base.as_ptr(),
                frame_count as usize * PAGE_BYTES,
                chunk_pages.kind_at_build(),
            )
        };
        // SAFETY: an all-zero AtomicU64 is a valid AtomicU64 (zero).
        let links = Links::over_zeroed(unsafe { zeroed_slice(frame_count as usize) });
        Arena {
            base,
            backing,
            frame_count,
            meta,
            links,
            buddy: Buddy::new(frame_count),
            chunks: Chunks::default(),
            pages: chunk_pages,
            populator: Populator::new(frame_count),
        }
    }

    /// Makes sure the memory under a chunk's frames and side-table entries exists before
    /// anything touches it: always so for anonymous memory; a segment's file system may be
    /// short of room (`Segment::reserve_chunk`).
    fn reserve_chunk(&self, frames: std::ops::Range<u32>) -> bool {
        self.segment()
            .is_none_or(|segment| segment.reserve_chunk(frames))
    }

    /// The same for a block's frames taken again after they were given back (their
    /// side-table entries stayed: `Segment::reserve_frames`).
    fn reserve_frames(&self, frames: std::ops::Range<u32>) -> bool {
        self.segment()
            .is_none_or(|segment| segment.reserve_frames(frames))
    }

    /// The segment the arena lives in, if it outlives the process.
    pub fn segment(&self) -> Option<&Arc<Segment>> {
        match &self.backing {
            Backing::Segment(segment) => Some(segment),
            Backing::Anonymous { .. } => None,
        }
    }

    pub fn frame_count(&self) -> u32 {
        self.frame_count
    }

    #[inline(always)]
    pub fn meta(&self, frame: FrameId) -> &FolioMeta {
        assert!(
            frame.0 < self.frame_count,
            "frame {frame:?} out of the arena"
        );
        // SAFETY: frame < frame_count, and the side table has frame_count entries that
        // live as long as the arena (its backing); entries are atomics only.
        unsafe { &*self.meta.as_ptr().add(frame.as_usize()) }
    }

    /// Bytes of metadata this arena keeps for the frames it has grown over: their side
    /// table entries and link words (the rest of both tables is reserved, zeroed memory
    /// never touched, so not resident).
    pub fn metadata_bytes(&self) -> usize {
        let per_frame = std::mem::size_of::<FolioMeta>() + std::mem::size_of::<u64>();
        self.listed_frames() as usize * per_frame
    }

    #[inline(always)]
    fn frame_ptr(&self, frame: FrameId) -> *mut u8 {
        assert!(
            frame.0 < self.frame_count,
            "frame {frame:?} out of the arena"
        );
        // SAFETY: frame < frame_count, so the offset stays inside the mapping.
        unsafe { self.base.as_ptr().add(frame.as_usize() * PAGE_BYTES) }
    }

    /// The buffer a read into folio `frame` of `order` fills.
    ///
    /// Context: the caller owns the LOCKED folio (it allocated it), so nobody else writes
    /// these frames until the read completes (or, through `io_buf_pages`, holds it under
    /// WRITEBACK).
    pub fn io_buf(&self, frame: FrameId, order: Order) -> FrameBuf {
        assert!(frame.0 + order.pages() as u32 <= self.frame_count);
        let ptr = NonNull::new(self.frame_ptr(frame)).expect("arena pointers are non-null");
        // SAFETY: the region lies inside the arena (asserted), is page aligned, and the
        // arena outlives every backend (the cache drops its backend first).
        unsafe { FrameBuf::new(ptr, order.bytes()) }
    }

    /// The buffer of pages `[first_page, first_page + pages)` of folio `frame` of `order`:
    /// what a writeback of those blocks hands the device.
    ///
    /// Context: the folio is under WRITEBACK (DESIGN.md §8), so no writer changes these
    /// bytes until the write completes, and the folio cannot leave the index.
    pub fn io_buf_pages(
        &self,
        frame: FrameId,
        order: Order,
        first_page: u64,
        pages: u64,
    ) -> FrameBuf {
        assert!(first_page + pages <= order.pages() && pages > 0);
        self.io_buf(frame, order)
            .tail(first_page as usize * PAGE_BYTES)
            .head(pages as usize * PAGE_BYTES)
    }

    /// The bytes of a pinned, uptodate folio.
    ///
    /// Context: the caller holds a reference on the folio and saw UPTODATE, so the frames
    /// are not written until the reference is dropped (a frozen folio needs count 1).
    pub fn pinned_bytes(&self, frame: FrameId, order: Order) -> &[u8] {
        assert!(frame.0 + order.pages() as u32 <= self.frame_count);
        // SAFETY: inside the arena; no writer exists while the folio is pinned and
        // uptodate (refcount protocol), and the arena outlives the borrow.
        unsafe { std::slice::from_raw_parts(self.frame_ptr(frame), order.bytes()) }
    }
}

/// A boxed slice of `len` zeroed values, allocated with `alloc_zeroed`: for large sizes
/// the allocator maps fresh pages, which the kernel faults in only when first touched.
///
/// # Safety
/// The all-zero bit pattern must be a valid `T`.
unsafe fn zeroed_slice<T>(len: usize) -> Box<[T]> {
    if len == 0 || std::mem::size_of::<T>() == 0 {
        return Vec::new().into_boxed_slice();
    }
    let layout = std::alloc::Layout::array::<T>(len).expect("slice layout overflows");
    // SAFETY: the layout has a non-zero size (checked above).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: `ptr` is a live allocation of `len` values of `T` made with the global
    // allocator and the layout `Box<[T]>` frees with; every value is all-zero, which the
    // caller guarantees is a valid `T`.
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) }
}

impl Drop for Backing {
    fn drop(&mut self) {
        if let Backing::Anonymous {
            map_ptr, map_bytes, ..
        } = *self
        {
            // SAFETY: map_ptr/map_bytes are exactly what mmap returned; no borrow of the
            // arena's memory outlives the arena.
            unsafe {
                libc::munmap(map_ptr, map_bytes);
            }
        }
    }
}
