//! A folio's bytes: the byte-wise atomic copies out of and into frames, their zeroing,
//! and the hit's prefetch.
//!
//! Design: every access to frame memory that may race with another is atomic per byte,
//! so that a race leaves a stale copy (which the optimistic reader's version check
//! discards), never undefined behaviour. `copy_out` is the optimistic read's copy
//! (`atomic_copy`, C++ P1478's `atomic_load_per_byte_memcpy`) and `copy_in` the write's
//! (`atomic_store_copy`, its store side): on x86-64 each is one `rep movsb` (a copy of
//! 16 to 64 bytes out is four 16-byte moves instead), elsewhere and under Miri a loop of
//! relaxed atomic words and bytes. Zeroing (`zero_tail` past a short read, `zero_range`
//! around a write) stores with `io::atomic_zero`. `prefetch` starts loading a hit's first
//! bytes, on chunks of huge pages only (`pages`).
//!
//! Protection: no state of its own. Frame memory belongs to its folio's owner under the
//! `refcount` protocol (the arena's module docs): written only while the folio is LOCKED
//! (the read that fills it; a write, between `Version::begin_write` and `end_write`),
//! read by pinned readers and, at any time, by optimistic readers through `copy_out`.
//!
//! Limits: each copy asserts that it stays inside its folio and the arena; the mixed
//! access sizes of `atomic_copy`'s known gap.

use crate::io::atomic_zero;
use crate::types::{FrameId, Order, PAGE_BYTES};

use super::Arena;

impl Arena {
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

    /// Copies `src` into the folio at `frame` from byte `at_bytes`, with atomic stores:
    /// the write's copy (`File::write_at`). Optimistic readers may be loading the same
    /// bytes; the version the writer moved around the copy makes them discard theirs.
    ///
    /// Context: the caller holds the folio LOCKED for writing (or owns a new folio not
    /// yet published), between `Version::begin_write` and `end_write`.
    pub fn copy_in(&self, frame: FrameId, order: Order, at_bytes: usize, src: &[u8]) {
        assert!(
            at_bytes + src.len() <= order.bytes()
                && frame.0 + order.pages() as u32 <= self.frame_count
        );
        // SAFETY: the destination range lies inside the arena (asserted) and stays mapped;
        // every other access to it is atomic (optimistic readers) or excluded (module docs
        // of `version`: pinned readers never overlap a writer).
        unsafe { atomic_store_copy(src, self.frame_ptr(frame).add(at_bytes)) }
    }

    /// Zeroes bytes `[from_bytes, to_bytes)` of the folio at `frame` with atomic stores:
    /// a new folio's bytes that the write did not cover, a truncated folio's tail.
    ///
    /// Context: as `copy_in`.
    pub fn zero_range(&self, frame: FrameId, order: Order, from_bytes: usize, to_bytes: usize) {
        assert!(
            from_bytes <= to_bytes
                && to_bytes <= order.bytes()
                && frame.0 + order.pages() as u32 <= self.frame_count
        );
        // SAFETY: inside the folio's frames (asserted), which stay mapped.
        unsafe { atomic_zero(self.frame_ptr(frame).add(from_bytes), to_bytes - from_bytes) };
    }

    /// Copies `dst.len()` bytes from byte `from_bytes` of the folio at `frame` with
    /// a byte-wise atomic memcpy: the optimistic read's copy. The result is only meaningful
    /// if the frame's version validates afterwards.
    #[inline(always)]
    pub fn copy_out(&self, frame: FrameId, order: Order, from_bytes: usize, dst: &mut [u8]) {
        assert!(
            from_bytes + dst.len() <= order.bytes()
                && frame.0 + order.pages() as u32 <= self.frame_count
        );
        // Not `frame_ptr`: its own bound check, implied by the assert, stayed in the hit's
        // code (6 instructions of a 64 B hit, by callgrind).
        let at = frame.as_usize() * PAGE_BYTES + from_bytes;
        // SAFETY: the source range lies inside the arena (asserted) and stays mapped.
        unsafe { atomic_copy(self.base.as_ptr().add(at), dst) }
    }

    /// Starts loading the first `PREFETCH_BYTES` of `bytes` bytes at byte `from_bytes` of
    /// the folio at `frame` into the cache, for a `copy_out` about to read them: the hit's
    /// data then arrives while its version is being loaded and checked, instead of after.
    /// Only on huge pages: measured on the 8,000-file `scale` point, it cut a 4 KiB hit
    /// by 5-8% there, and made it 5% slower on 4 KiB pages (the prefetch's TLB miss
    /// delays the version's). Not for a copy of a line or less: its few loads go out
    /// while the version loads anyway (the CPU predicts the branch on the version and
    /// runs ahead to them), so the hint would cost the look at the chunk for nothing.
    /// A hint: it reads and changes nothing.
    #[inline]
    pub fn prefetch(&self, frame: FrameId, from_bytes: usize, bytes: usize) {
        if bytes <= LINE_BYTES || !self.on_huge_chunk(frame) {
            return;
        }
        let start = self.frame_ptr(frame).wrapping_add(from_bytes);
        for line in 0..bytes.min(PREFETCH_BYTES).div_ceil(LINE_BYTES) {
            prefetch_line(start.wrapping_add(line * LINE_BYTES));
        }
    }
}

/// Bytes `Arena::prefetch` asks for: 16 cache lines (of 4, 16 and 64 lines, 16 measured
/// best; the hardware prefetcher follows the copy for the rest).
const PREFETCH_BYTES: usize = 1024;
/// Bytes of a cache line.
const LINE_BYTES: usize = 64;

/// Asks the CPU to load the cache line at `at`. A prefetch never faults and has no
/// effect the program can observe (on other targets, and under Miri, it does nothing).
#[inline(always)]
fn prefetch_line(at: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch instruction reads no memory the abstract machine sees and cannot
    // fault, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast::<i8>());
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = at;
}

#[cfg(any(not(target_arch = "x86_64"), miri))]
pub(crate) use atomic_copy_words as atomic_copy;

/// Copies from `src` into `dst` as a byte-wise atomic memcpy (C++ P1478's
/// `atomic_load_per_byte_memcpy`): every byte is read once with the effect of a relaxed
/// atomic load, so a concurrent writer makes the copy stale (which the caller's version
/// check discards), never undefined behaviour.
///
/// On x86-64 this is one `rep movsb` (16 to 64 bytes: `atomic_copy_16_to_64`): Rust has
/// no byte-wise atomic memcpy, and an asm block must only behave like code the abstract
/// machine could run (the reference's asm rules mem-same-as-ffi and black-box); per-byte
/// relaxed loads are such code, and x86's fast-string loads are at least as strong as
/// them (each byte single-copy atomic).
/// Known gap: `io::atomic_zero` writes 8-byte words where a stale reader's bytes overlap
/// them, and the portable loops below do the same to each other where a reader's range
/// and a writer's start or end inside one word: mixed-size races the abstract machine
/// forbids (harmless here: the copy is discarded); the fix is one access size on both
/// sides. With ERMS/FSRM it runs at memcpy speed: 8 KiB in 158 ns from cache where the
/// per-word loop below takes 850 ns (this machine, 2026-11-22). Elsewhere, and under
/// Miri (which cannot run asm), the loop of relaxed per-word loads.
///
/// # Safety
/// `src..src + dst.len()` must be valid for reads, and every write to it by others must
/// be atomic or done by the kernel (I/O).
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline]
pub(crate) unsafe fn atomic_copy(src: *const u8, dst: &mut [u8]) {
    if (16..=64).contains(&dst.len()) {
        // SAFETY: as this function's.
        return unsafe { atomic_copy_16_to_64(src, dst) };
    }
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

/// `atomic_copy` of 16 to 64 bytes: four 16-byte loads (the first two and the last two
/// of the range, overlapping when it is shorter than 64) and four stores, ~10 instructions
/// where `rep movsb` pays its start-up (and callgrind counts one instruction per byte):
/// the small hit (a 64 B read of a cached block). glibc's memcpy copies small sizes the
/// same way. The loads are `movdqu`s, whose every byte is single-copy atomic on x86 as
/// `rep movsb`'s are, so the argument of `atomic_copy` holds for them.
///
/// # Safety
/// As `atomic_copy`'s, and `16 <= dst.len() <= 64`.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline]
unsafe fn atomic_copy_16_to_64(src: *const u8, dst: &mut [u8]) {
    let len = dst.len();
    debug_assert!((16..=64).contains(&len));
    // The first 32 bytes and the last 32 (overlapping below 64); below 32, the first 16
    // and the last 16 twice each.
    let mid = if len >= 32 { 16 } else { 0 };
    // SAFETY: the four loads read 16 bytes each at offsets 0, mid, len - 16 - mid and
    // len - 16: with 16 <= len <= 64 and mid = 16 only when len >= 32, each lies inside
    // `src..src + len` and together they cover it (the test copies every length to 80).
    // The stores write the same offsets of `dst`, a unique borrow of `len` bytes. The
    // block changes only the four xmm registers it declares and the destination memory.
    unsafe {
        std::arch::asm!(
            "movdqu {a}, [{src}]",
            "movdqu {b}, [{src} + {mid}]",
            "movdqu {c}, [{src} + {tail}]",
            "movdqu {d}, [{src} + {last}]",
            "movdqu [{dst}], {a}",
            "movdqu [{dst} + {mid}], {b}",
            "movdqu [{dst} + {tail}], {c}",
            "movdqu [{dst} + {last}], {d}",
            src = in(reg) src,
            dst = in(reg) dst.as_mut_ptr(),
            mid = in(reg) mid,
            tail = in(reg) len - 16 - mid,
            last = in(reg) len - 16,
            a = out(xmm_reg) _,
            b = out(xmm_reg) _,
            c = out(xmm_reg) _,
            d = out(xmm_reg) _,
            options(nostack, preserves_flags)
        );
    }
}

#[cfg(any(not(target_arch = "x86_64"), miri))]
pub(crate) use atomic_store_copy_words as atomic_store_copy;

/// Copies `src` to `dst` as a byte-wise atomic memcpy on the store side (C++ P1478's
/// `atomic_store_per_byte_memcpy`): the writer's half of `atomic_copy`, for bytes that
/// optimistic readers may be loading at the same time. One `rep movsb` on x86-64, with
/// the same argument as `atomic_copy` (each byte stored single-copy atomic).
///
/// # Safety
/// `dst..dst + src.len()` must be valid for writes, and every other access to it during
/// the copy must be atomic.
#[cfg(all(target_arch = "x86_64", not(miri)))]
pub(crate) unsafe fn atomic_store_copy(src: &[u8], dst: *mut u8) {
    // SAFETY: the caller guarantees `dst` is writable for `src.len()` bytes; `src` is a
    // shared borrow of that many bytes; the direction flag is clear on entry (Rust's asm
    // rules); rdi, rsi and rcx are declared clobbered.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rdi") dst => _,
            inout("rsi") src.as_ptr() => _,
            inout("rcx") src.len() => _,
            options(nostack, preserves_flags)
        );
    }
}

/// The portable store-side copy: relaxed atomic stores of 8-byte words where `dst` is
/// aligned, single bytes at the edges.
///
/// # Safety
/// As the x86-64 version.
#[cfg(any(not(target_arch = "x86_64"), miri, test))]
pub(crate) unsafe fn atomic_store_copy_words(src: &[u8], dst: *mut u8) {
    use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
    let len = src.len();
    let head = dst.align_offset(8).min(len);
    let words = (len - head) / 8;
    let store_byte = |i: usize| {
        // SAFETY: callers pass i < len, inside the destination range; AtomicU8 has the
        // layout of u8.
        unsafe { (*(dst.add(i) as *const AtomicU8)).store(src[i], Ordering::Relaxed) }
    };
    for i in 0..head {
        store_byte(i);
    }
    for w in 0..words {
        let at = head + w * 8;
        let word = u64::from_ne_bytes(src[at..at + 8].try_into().expect("8 bytes"));
        // SAFETY: dst + at is 8-aligned (head aligned it) and at + 8 <= len.
        unsafe { (*(dst.add(at) as *const AtomicU64)).store(word, Ordering::Relaxed) };
    }
    for i in head + words * 8..len {
        store_byte(i);
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
pub(crate) unsafe fn atomic_copy_words(src: *const u8, dst: &mut [u8]) {
    use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_copy_handles_every_alignment() {
        let src: Vec<u8> = (0..=255u8).cycle().take(9000).collect();
        for start in 0..9 {
            for len in (0..=80).chain([100, 4096, 8192]) {
                for copy in [atomic_copy, atomic_copy_words] {
                    let mut dst = vec![0u8; len];
                    // SAFETY: the range is inside `src`, which nobody writes.
                    unsafe { copy(src.as_ptr().add(start), &mut dst) };
                    assert_eq!(dst, &src[start..start + len]);
                }
            }
        }
    }

    #[test]
    fn atomic_store_copy_handles_every_alignment() {
        let src: Vec<u8> = (0..=255u8).cycle().take(9000).collect();
        for start in 0..9 {
            for len in [0, 1, 7, 8, 9, 63, 100, 4096, 8192] {
                for copy in [atomic_store_copy, atomic_store_copy_words] {
                    let mut dst = vec![0u8; 9000];
                    // SAFETY: the range is inside `dst`, which nobody else accesses.
                    unsafe { copy(&src[..len], dst.as_mut_ptr().add(start)) };
                    assert_eq!(&dst[start..start + len], &src[..len]);
                    assert!(dst[..start]
                        .iter()
                        .chain(&dst[start + len..])
                        .all(|&b| b == 0));
                }
            }
        }
    }
}
