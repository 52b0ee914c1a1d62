//! The arena: all folio memory, reserved once at build, and its buddy allocator.
//!
//! Design: one anonymous mapping (`MAP_NORESERVE`, transparent huge pages advised, aligned
//! to 2 MiB so an order-9 folio is one huge page) sized by the cache's capacity, cut into
//! 4 KiB frames. Beside it, the side table of `FolioMeta` (24 B per frame) and the link
//! words (8 B per frame) that thread the per-order free lists of a buddy allocator
//! (orders 0..=9) and, while a frame is cached, its eviction queue. 32 B per 4 KiB frame
//! is 0.78% of the capacity, all of the arena's metadata. Frames are never unmapped while the
//! arena lives, which is what makes the optimistic read of `version` safe: a reader that
//! loses a race copies stale bytes and discards them, it never faults.
//!
//! Invariants:
//! - A free block of order k starts at a frame that is a multiple of 2^k, its head is on
//!   free list k (its link word says so) and every frame in it is DEAD in the side table.
//! - `free_frames` equals the frames in the free lists (both change under the lock);
//!   allocated frames never exceed the capacity (there is nothing else to allocate from).
//!
//! Protection: the free lists, the link words of free frames, and `free_frames` change
//! under one mutex (`lists`); `free_frames` is an atomic so that stats read it without
//! the lock. The memory
//! of an allocated folio belongs to its owner under the `refcount` protocol: written only
//! by the read that fills it while LOCKED; read by pinned readers and by optimistic readers
//! through `copy_out`, a byte-wise atomic memcpy (`atomic_copy`).
//!
//! Limits: one mutex for the free lists (no per-thread caches yet: allocation is on the
//! miss path only, next to an I/O that costs 100x more); at most 2^32 frames (16 TiB).

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::folio::FolioMeta;
use crate::io::{atomic_zero, FrameBuf};
use crate::list::{Links, List, QueueId};
use crate::types::{FrameId, Order, ORDER_MAX, PAGE_BYTES};

/// Bytes of the largest folio; the mapping is aligned to it.
const HUGE_BYTES: usize = PAGE_BYTES << ORDER_MAX;
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
    /// refused. Frames are faulted in by the first read into them, or all at once by
    /// `prefault`.
    pub fn new(frame_count: u32) -> io::Result<Arena> {
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
        // SAFETY: [aligned, aligned + data_bytes) lies inside the mapping because we
        // reserved HUGE_BYTES of slack. MADV_HUGEPAGE is only advice; its failure (THP
        // disabled) is harmless, so the result is ignored on purpose.
        unsafe {
            libc::madvise(
                aligned as *mut libc::c_void,
                data_bytes,
                libc::MADV_HUGEPAGE,
            );
        }
        let base = NonNull::new(aligned as *mut u8).expect("mmap returned null");
        let meta: Box<[FolioMeta]> = (0..frame_count).map(|_| FolioMeta::default()).collect();
        let links = Links::new(frame_count);
        let mut lists: Vec<List> = (0..=ORDER_MAX)
            .map(|k| List::new(FREE_LIST_BASE + k))
            .collect();
        // Carve the frames into the largest aligned blocks.
        let mut frame = 0u32;
        while frame < frame_count {
            let mut order = ORDER_MAX;
            while frame % (1 << order) != 0 || frame + (1 << order) > frame_count {
                order -= 1;
            }
            lists[order as usize].push_back(&links, FrameId(frame), 1 << order);
            frame += 1 << order;
        }
        Ok(Arena {
            base,
            map_ptr,
            map_bytes,
            frame_count,
            meta,
            links,
            lists: Mutex::new(lists),
            free_frames: AtomicU64::new(u64::from(frame_count)),
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

    /// Takes a free block of exactly `order`, splitting a larger one if needed. The
    /// block's head frame is revived LOCKED with one reference (`refcount`), and its
    /// version is still odd. `None` when no block of that order or larger is free.
    pub fn alloc(&self, order: Order) -> Option<FrameId> {
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
            state.is_dead() && !state.is_locked(),
            "freed a folio that is not dead, or has I/O in flight: {state:?}"
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

    /// Zeroes the part of a LOCKED folio past a short read (end of file).
    ///
    /// Context: the caller owns the LOCKED folio; no pinned reader exists yet. An
    /// optimistic reader that began on the frame's previous contents may still be loading
    /// from it, so the zeroes are written with atomic stores (its copy fails validation).
    pub fn zero_tail(&self, frame: FrameId, order: Order, from_bytes: usize) {
        assert!(from_bytes <= order.bytes() && frame.0 + order.pages() as u32 <= self.frame_count);
        // SAFETY: inside the folio's frames (asserted), which stay mapped.
        unsafe {
            atomic_zero(
                self.frame_ptr(frame).add(from_bytes),
                order.bytes() - from_bytes,
            )
        };
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

    /// Copies `dst.len()` bytes from byte `from_bytes` of the folio at `frame` with
    /// a byte-wise atomic memcpy: the optimistic read's copy. The result is only meaningful
    /// if the frame's version validates afterwards.
    pub fn copy_out(&self, frame: FrameId, order: Order, from_bytes: usize, dst: &mut [u8]) {
        assert!(
            from_bytes + dst.len() <= order.bytes()
                && frame.0 + order.pages() as u32 <= self.frame_count
        );
        // SAFETY: the source range lies inside the arena (asserted) and stays mapped.
        unsafe { atomic_copy(self.frame_ptr(frame).add(from_bytes), dst) }
    }
}

#[cfg(any(not(target_arch = "x86_64"), miri))]
use atomic_copy_words as atomic_copy;

/// Copies from `src` into `dst` as a byte-wise atomic memcpy (C++ P1478's
/// `atomic_load_per_byte_memcpy`): every byte is read once with the effect of a relaxed
/// atomic load, so a concurrent writer makes the copy stale (which the caller's version
/// check discards), never undefined behaviour.
///
/// On x86-64 this is one `rep movsb`: Rust has no byte-wise atomic memcpy, and an asm
/// block must only behave like code the abstract machine could run (the reference's
/// asm rules mem-same-as-ffi and black-box); per-byte relaxed loads are such code, and
/// x86's fast-string loads are at least as strong as them (each byte single-copy atomic).
/// Known gap: `io::atomic_zero` writes 8-byte words where a stale reader's bytes overlap
/// them, a mixed-size race the abstract machine forbids (harmless here: the copy is
/// discarded); the fix is one access size on both sides. With ERMS/FSRM it runs at memcpy speed: 8 KiB in 158 ns from cache
/// where the per-word loop below takes 850 ns (this machine, 2026-11-22). Elsewhere, and
/// under Miri (which cannot run asm), the loop of relaxed per-word loads.
///
/// # Safety
/// `src..src + dst.len()` must be valid for reads, and every write to it by others must
/// be atomic or done by the kernel (I/O).
#[cfg(all(target_arch = "x86_64", not(miri)))]
unsafe fn atomic_copy(src: *const u8, dst: &mut [u8]) {
    // SAFETY: the caller guarantees `src` is readable for `dst.len()` bytes, and `dst` is
    // a unique borrow of that many bytes; the direction flag is clear on entry to an asm
    // block (Rust's asm rules), so the copy goes upwards; `rep movsb` changes no other
    // state than rdi, rsi and rcx, declared clobbered, and the destination memory.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rdi") dst.as_mut_ptr() => _,
            inout("rsi") src => _,
            inout("rcx") dst.len() => _,
            options(nostack, preserves_flags)
        );
    }
}

/// The portable byte-wise atomic memcpy: relaxed atomic loads of 8-byte words where
/// `src` is aligned, single bytes at the edges. See the x86-64 version for the contract.
///
/// Hand-written rather than `atomic-memcpy`'s `atomic_load::<T>`, which copies a value of
/// a fixed type, not a run of bytes of any length.
///
/// # Safety
/// As the x86-64 version.
#[cfg(any(not(target_arch = "x86_64"), miri, test))]
unsafe fn atomic_copy_words(src: *const u8, dst: &mut [u8]) {
    use std::sync::atomic::AtomicU8;
    let len = dst.len();
    let out = dst.as_mut_ptr();
    let head = src.align_offset(8).min(len);
    let words = (len - head) / 8;
    let load_byte = |i: usize| {
        // SAFETY: callers pass i < len, inside the source range; AtomicU8 has the layout
        // of u8.
        unsafe { (*(src.add(i) as *const AtomicU8)).load(Ordering::Relaxed) }
    };
    for i in 0..head {
        // SAFETY: i < len: inside `dst`.
        unsafe { out.add(i).write(load_byte(i)) };
    }
    for w in 0..words {
        let at = head + w * 8;
        // SAFETY: src + at is 8-aligned (head aligned it) and at + 8 <= len, inside both
        // ranges; the destination write is unaligned-safe.
        unsafe {
            let word = (*(src.add(at) as *const AtomicU64)).load(Ordering::Relaxed);
            out.add(at)
                .cast::<[u8; 8]>()
                .write_unaligned(word.to_ne_bytes());
        }
    }
    for i in head + words * 8..len {
        // SAFETY: i < len: inside `dst`.
        unsafe { out.add(i).write(load_byte(i)) };
    }
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

impl Arena {
    /// Faults every frame in now (the kernel zeroes each page), so that no read pays the
    /// page fault and the zeroing of the page it lands in (a cold scan into an untouched
    /// arena spends about a fifth of its time there: docs/readahead.md).
    /// `MADV_POPULATE_WRITE` (Linux 5.14) does it in one call, with huge pages where the
    /// advice allows; older kernels get one write per page.
    ///
    /// Context: right after `new`; `&mut self` proves that no frame is referenced yet.
    pub fn prefault(&mut self) {
        populate(self.base, self.frame_count as usize * PAGE_BYTES);
    }
}

/// `Arena::prefault` of `[base, base + bytes)`.
fn populate(base: NonNull<u8>, bytes: usize) {
    // SAFETY: the range is inside the arena's mapping, which nothing else references yet
    // (`Arena::prefault`); populating only faults pages in.
    let done = unsafe {
        libc::madvise(
            base.as_ptr().cast::<libc::c_void>(),
            bytes,
            libc::MADV_POPULATE_WRITE,
        )
    } == 0;
    if done {
        return;
    }
    for at in (0..bytes).step_by(PAGE_BYTES) {
        // SAFETY: in bounds (above); no reference to the arena's memory exists yet, and a
        // zero is what the fresh anonymous page already holds.
        unsafe { base.as_ptr().add(at).write_volatile(0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buddy_splits_and_merges() {
        let arena = Arena::new(1024).unwrap();
        assert_eq!(arena.free_frames(), 1024);
        let a = arena.alloc(Order::new(0)).unwrap();
        let b = arena.alloc(Order::new(3)).unwrap();
        assert_eq!(b.0 % 8, 0, "order-3 blocks are aligned");
        assert_eq!(arena.free_frames(), 1024 - 9);
        for frame in [a, b] {
            arena.meta(frame).state.finish_read_ok();
            assert!(arena.meta(frame).state.try_freeze());
            arena.free(frame);
        }
        assert_eq!(arena.free_frames(), 1024);
        // Everything merged back: two order-9 blocks are available again.
        assert!(arena.alloc(Order::MAX).is_some());
        assert!(arena.alloc(Order::MAX).is_some());
        assert!(arena.alloc(Order::ZERO).is_none());
    }

    #[test]
    fn odd_sizes_are_carved_and_exhausted() {
        let mut arena = Arena::new(13).unwrap();
        arena.prefault();
        let mut got = 0;
        while arena.alloc(Order::ZERO).is_some() {
            got += 1;
        }
        assert_eq!(got, 13);
        assert_eq!(arena.free_frames(), 0);
    }

    #[test]
    fn atomic_copy_handles_every_alignment() {
        let src: Vec<u8> = (0..=255u8).cycle().take(9000).collect();
        for start in 0..9 {
            for len in [0, 1, 7, 8, 9, 63, 100, 4096, 8192] {
                for copy in [atomic_copy, atomic_copy_words] {
                    let mut dst = vec![0u8; len];
                    // SAFETY: the range is inside `src`, which nobody writes.
                    unsafe { copy(src.as_ptr().add(start), &mut dst) };
                    assert_eq!(dst, &src[start..start + len]);
                }
            }
        }
    }
}
