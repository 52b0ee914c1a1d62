//! The arena: all folio memory, reserved once at build, and its buddy allocator.
//!
//! Design: one anonymous mapping (`MAP_NORESERVE`, aligned to 2 MiB so that an order-9
//! folio can be one huge page, paged as `ArenaPages` says) sized by the cache's capacity,
//! cut into 4 KiB frames. Beside it, the side table of `FolioMeta` (24 B per frame) and the
//! link words (8 B per frame) that thread the per-order free lists of a buddy allocator
//! (orders 0..=9) and, while a frame is cached, its eviction queue. 32 B per 4 KiB frame is
//! 0.78% of the capacity, all of the arena's metadata. Frames are never unmapped while the
//! arena lives, which is what makes the optimistic read of `version` safe: a reader that
//! loses a race copies stale bytes and discards them, it never faults.
//!
//! Memory is made ready off the reader's path (issue 13): a fresh anonymous page is faulted
//! in and zeroed by the kernel on first touch (on this VM also faulted in by the host:
//! 0.35-2.6 GB/s), and with transparent huge pages advised a first touch may compact memory
//! for a 2 MiB page. When that first touch is an O_DIRECT read into the frame, the miss
//! pays it. Which pages the kernel gives is `ArenaPages`: by default decided chunk by chunk
//! (4 KiB pages for random reads' small folios, whose first touch is 7x cheaper per byte on
//! this VM; huge pages for readahead, whose large folios O_DIRECT reads faster into, and
//! whose hits then miss the TLB less);
//! `ArenaPages` has the figures. And the arena grows: its frames reach the free lists one
//! 2 MiB chunk at a time, in address order, and a background thread (`populate_ahead`,
//! started by the page cache for caches of at least `POPULATE_AHEAD_CACHE_BYTES_MIN`)
//! claims the next chunks, populates them (a write to each page, outside every lock) and
//! lists them, keeping `populate_lead` populated frames listed ahead of the allocator (as
//! many as are allocated, from 8 MiB up to `populate_lead_frames`). An allocation that
//! finds the lists empty claims the next chunk itself and lists it at once, unpopulated:
//! its read then faults the pages in, exactly as before the arena grew; it never waits for
//! a population (waiting made every reader of a shared window pile up behind one chunk, and
//! then all insert the same gap: measured, 100-200 conflicting insertions per 256 MiB scan
//! instead of 0-1). Memory resident before it is needed is bounded by the lead. `prefault`
//! grows and populates it all at build.
//!
//! Invariants:
//! - A free block of order k starts at a frame that is a multiple of 2^k, its head is on
//!   free list k (its link word says so) and every frame in it is DEAD in the side table.
//! - Frames at or above `claimed_frames` are virgin: on no list, never allocated, their
//!   side-table entry and link word unwritten (zeroed memory, not yet faulted in) and
//!   read by nobody. A claimed chunk is owned by its claimer until it lists it; then its
//!   frames are the allocator's. `listed_frames` counts the frames of listed chunks.
//! - `free_frames` equals the frames in the free lists plus the frames of chunks not
//!   listed yet (virgin or being populated), so watermarks see them as free; allocated
//!   frames never exceed the capacity (there is nothing else to allocate from).
//!
//! Protection: the free lists, the link words of free frames, and `free_frames` change
//! under one mutex (`lists`); `free_frames` is an atomic so that stats read it without
//! the lock. `claimed_frames` moves by a CAS (a claim), `listed_frames` under `lists`.
//! The memory
//! of an allocated folio belongs to its owner under the `refcount` protocol: written only
//! by the read that fills it while LOCKED; read by pinned readers and by optimistic readers
//! through `copy_out`, a byte-wise atomic memcpy (`atomic_copy`).
//!
//! Limits: one mutex for the free lists (no per-thread caches yet: allocation is on the
//! miss path only, next to an I/O that costs 100x more); at most 2^32 frames (16 TiB).

mod chunk;
mod copy;
mod pages;
mod populate;

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::folio::FolioMeta;
use crate::io::FrameBuf;
use crate::list::{Links, List, QueueId};
use crate::types::{FrameId, Order, ORDER_MAX, PAGE_BYTES};

use chunk::Chunks;
use pages::ChunkPages;
pub use pages::{ArenaPages, FolioUse};
use populate::Populator;
pub use populate::POPULATE_AHEAD_CACHE_BYTES_MIN;

/// Bytes of the largest folio; the mapping is aligned to it.
const HUGE_BYTES: usize = PAGE_BYTES << ORDER_MAX;
/// The arena grows by one chunk at a time: one huge page, so a chunk is one THP fault.
const CHUNK_FRAMES: u32 = 1 << ORDER_MAX;
/// How many 1 ms waits an allocation makes for the last chunks to be listed.
const LISTING_WAITS_MAX: u32 = 1000;
/// The list id of the free list of order k is `FREE_LIST_BASE + k` (ids below it are the
/// eviction policies' queues).
const FREE_LIST_BASE: QueueId = 0x40;

/// The order of the free block `frame` heads, read from its link word.
fn free_order(links: &Links, frame: u32) -> Option<u8> {
    let id = links.queue(FrameId(frame));
    (FREE_LIST_BASE..=FREE_LIST_BASE + ORDER_MAX)
        .contains(&id)
        .then(|| id - FREE_LIST_BASE)
}

pub struct Arena {
    /// Start of the 2 MiB-aligned frames.
    base: NonNull<u8>,
    /// What mmap returned, for munmap.
    map_ptr: *mut libc::c_void,
    map_bytes: usize,
    frame_count: u32,
    meta: Box<[FolioMeta]>,
    /// One link word per frame: the free lists here, the eviction queues in `eviction`.
    pub links: Links,
    /// The free lists, by order.
    lists: Mutex<Vec<List>>,
    free_frames: AtomicU64,
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

// SAFETY: the raw pointers refer to a private anonymous mapping owned by the arena and
// valid until Drop; all shared mutable state is behind the mutex or atomics, and frame
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
        let chunk_pages = ChunkPages::new(pages, frame_count);
        // SAFETY: [aligned, aligned + data_bytes) lies inside the mapping because we
        // reserved HUGE_BYTES of slack.
        unsafe { pages::advise(aligned as *mut u8, data_bytes, chunk_pages.kind_at_build()) };
        let base = NonNull::new(aligned as *mut u8).expect("mmap returned null");
        // Neither the side table nor the link words are written here: a frame's are
        // initialised when the arena grows over it (`list_chunk`), so building a 4 GiB cache
        // touches none of its 32 MiB of metadata.
        // SAFETY: every field of FolioMeta is an atomic integer, for which all-zero is
        // a valid value.
        let meta: Box<[FolioMeta]> = unsafe { zeroed_slice(frame_count as usize) };
        // SAFETY: an all-zero AtomicU64 is a valid AtomicU64 (zero).
        let links = Links::over_zeroed(unsafe { zeroed_slice(frame_count as usize) });
        let lists: Vec<List> = (0..=ORDER_MAX)
            .map(|k| List::new(FREE_LIST_BASE + k))
            .collect();
        Ok(Arena {
            base,
            map_ptr,
            map_bytes,
            frame_count,
            meta,
            links,
            lists: Mutex::new(lists),
            free_frames: AtomicU64::new(u64::from(frame_count)),
            chunks: Chunks::default(),
            pages: chunk_pages,
            populator: Populator::new(frame_count),
        })
    }

    pub fn frame_count(&self) -> u32 {
        self.frame_count
    }

    pub fn free_frames(&self) -> u64 {
        self.free_frames.load(Ordering::Relaxed)
    }

    pub fn meta(&self, frame: FrameId) -> &FolioMeta {
        &self.meta[frame.as_usize()]
    }

    /// Bytes of metadata this arena keeps: the side table and the link words.
    pub fn metadata_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.meta) + self.frame_count as usize * 8
    }

    /// Takes a free block of exactly `order`, splitting a larger one if needed, growing
    /// the arena by a chunk when no listed block is large enough and virgin memory
    /// remains. The block's head frame is revived LOCKED with one reference
    /// (`refcount`), and its version is still odd. `None` when no block of that order or
    /// larger is free.
    ///
    /// Context: takes the lists' lock; never waits for a population (a chunk it grows
    /// itself is listed unpopulated), but yields while another thread lists the arena's
    /// last chunks, which takes microseconds after their population.
    pub fn alloc(&self, order: Order, use_: FolioUse) -> Option<FrameId> {
        let mut waits = 0;
        loop {
            let listed_before = self.listed_frames();
            if let Some(frame) = self.alloc_listed(order, use_) {
                self.wake_populator();
                return Some(frame);
            }
            if self.listed_frames() != listed_before {
                continue; // a chunk was listed since our look at the lists
            }
            if self.grow_unpopulated() {
                continue;
            }
            if self.listed_frames() == self.frame_count {
                return None; // fully grown, and nothing of this order is free
            }
            // Another thread holds the last chunks: an allocator lists its chunk at once,
            // the populator right after populating it (milliseconds here). Park until a
            // chunk is listed (`wait_for_listing`), for at most a second: a thread that
            // died holding a chunk lists nothing more, and then this allocation fails
            // like a full cache.
            waits += 1;
            if waits > LISTING_WAITS_MAX {
                return None;
            }
            self.wait_for_listing(listed_before);
        }
    }

    /// `alloc` from the free lists only.
    fn alloc_listed(&self, order: Order, use_: FolioUse) -> Option<FrameId> {
        let want = order.get() as usize;
        let head = {
            let mut lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
            let have = (want..=ORDER_MAX as usize).find(|&k| !lists[k].is_empty())?;
            let head = lists[have]
                .pop_front(&self.links, |_| 1 << have)
                .expect("list is not empty");
            // Split: keep the low half, free the high halves down to the wanted order.
            for k in (want..have).rev() {
                lists[k].push_back(&self.links, FrameId(head.0 + (1 << k)), 1 << k);
            }
            // Under the lock, so that `free_frames` always equals the free lists.
            let free = self.free_frames.fetch_sub(order.pages(), Ordering::Relaxed);
            assert!(free >= order.pages(), "free memory below zero");
            self.note_allocated(order, use_);
            head.0
        };
        let frame = FrameId(head);
        self.meta(frame).state.revive_locked();
        // Its size, for `free`, until the owner records the page it will hold.
        self.meta(frame).set_identity(
            crate::folio::MappingId(u32::MAX),
            crate::types::PageIndex(0),
            order,
        );
        // The new owner's writes to this frame (the read that fills it) come after this
        // fence, which pairs with the Acquire fence of an optimistic reader's `validate`.
        std::sync::atomic::fence(Ordering::Release);
        Some(frame)
    }

    /// Returns a folio's frames. Context: the caller won the frame (`try_freeze` or a
    /// `put` that returned `Free`), so its state is DEAD; this retires its version if it
    /// held valid bytes. Never called under a mapping's lock (side effects outside locks).
    ///
    /// The folio's size comes from its own metadata (recorded at allocation), never from
    /// the caller: a caller's order may come from a lock-free walk that raced with the
    /// frame's reuse at another order, and freeing by it would corrupt the free lists.
    pub fn free(&self, frame: FrameId) {
        let meta = self.meta(frame);
        let order = meta.identity().2;
        let state = meta.state.load();
        assert!(
            state.is_dead() && !state.is_locked() && !state.is_dirty() && !state.is_writeback(),
            "freed a folio that is not dead, has I/O in flight, or is dirty: {state:?}"
        );
        if meta.version.is_valid() {
            meta.version.retire();
        }
        meta.state.mark_free();
        let mut head = frame.0;
        let mut k = order.get();
        let mut lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
        while k < ORDER_MAX {
            let buddy = head ^ (1 << k);
            if buddy >= self.frame_count || free_order(&self.links, buddy) != Some(k) {
                break;
            }
            let removed = lists[k as usize].remove(&self.links, FrameId(buddy), 1 << k);
            debug_assert!(removed);
            head = head.min(buddy);
            k += 1;
        }
        lists[k as usize].push_back(&self.links, FrameId(head), 1 << k);
        self.free_frames.fetch_add(order.pages(), Ordering::Relaxed);
    }

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
    /// these frames until the read completes.
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

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: map_ptr/map_bytes are exactly what mmap returned; no borrow of the
        // arena's memory outlives the arena.
        unsafe {
            libc::munmap(self.map_ptr, self.map_bytes);
        }
    }
}

impl Arena {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buddy_splits_and_merges() {
        let arena = Arena::new(1024, ArenaPages::Small).unwrap();
        assert_eq!(arena.free_frames(), 1024);
        let a = arena.alloc(Order::new(0), FolioUse::Request).unwrap();
        let b = arena.alloc(Order::new(3), FolioUse::Request).unwrap();
        assert_eq!(b.0 % 8, 0, "order-3 blocks are aligned");
        assert_eq!(arena.free_frames(), 1024 - 9);
        for frame in [a, b] {
            arena.meta(frame).state.finish_read_ok();
            assert!(arena.meta(frame).state.try_freeze());
            arena.free(frame);
        }
        assert_eq!(arena.free_frames(), 1024);
        // Everything merged back: two order-9 blocks are available again.
        assert!(arena.alloc(Order::MAX, FolioUse::Request).is_some());
        assert!(arena.alloc(Order::MAX, FolioUse::Request).is_some());
        assert!(arena.alloc(Order::ZERO, FolioUse::Request).is_none());
    }
}
