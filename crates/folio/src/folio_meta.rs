//! A folio's metadata: the side-table entry of its head frame, like the kernel's
//! `struct page`.
//!
//! One `FolioMeta` exists per 4 KiB frame of the arena, indexed by frame number; only the
//! head frame's entry of a large folio is used. 24 bytes per 4 KiB frame is 0.59% of the
//! cache (the kernel's `struct page` is 64 B, 1.6%).
//!
//! Who writes what:
//! - `state`: the protocol of `refcount` (any thread, atomically).
//! - `version`: the frame's owner, per `version` (publish after a read, retire before reuse).
//! - `owner`, `place`: the allocating thread, while the folio is LOCKED and before it is
//!   inserted into the index; the errno bits by the failed read's completion, before it
//!   unlocks. Readers that did not pin the folio may read them stale: they validate
//!   through the version or re-check the index slot under the mapping's lock.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::refcount::FolioState;
use crate::types::{Order, PageIndex};
use crate::version::Version;

/// Identifies a mapping (one cached inode) inside one cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MappingId(pub u32);

/// `place` packs the head's page index (bits 0..52: files up to 2^64 bytes), the order
/// (52..56) and the errno of a failed read (56..64).
const INDEX_BITS: u32 = 52;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
const ORDER_SHIFT: u32 = 52;
const ERRNO_SHIFT: u32 = 56;

#[derive(Debug, Default)]
#[repr(C)]
pub struct FolioMeta {
    pub state: FolioState,
    pub version: Version,
    owner: AtomicU32,
    place: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<FolioMeta>() == 24);

impl FolioMeta {
    /// Records whose page this frame will hold. Context: the caller owns the LOCKED,
    /// not yet inserted folio.
    pub fn set_identity(&self, mapping: MappingId, index: PageIndex, order: Order) {
        assert!(index.0 <= INDEX_MASK, "page index beyond 2^52");
        self.owner.store(mapping.0, Ordering::Relaxed);
        self.place.store(
            index.0 | (u64::from(order.get()) << ORDER_SHIFT),
            Ordering::Relaxed,
        );
    }

    /// The identity last recorded; stale unless the caller pinned the folio, holds the
    /// mapping's lock with the slot checked, or validates through the version.
    /// Makes a zeroed entry what `default` makes: a free (DEAD) frame with an odd version.
    ///
    /// Context: nobody else uses the frame (virgin arena memory, `Arena::list_chunk`).
    pub fn reset(&self) {
        self.state.reset_free();
        self.version.reset();
        self.owner.store(0, Ordering::Relaxed);
        self.place.store(0, Ordering::Relaxed);
    }

    /// An entry holding the given words as they are, whatever they say (a damaged or
    /// hostile segment's side table: `fuzzing::adoption_scan`).
    #[cfg(any(fuzzing, test))]
    pub fn from_raw(state: u64, owner: u32, place: u64) -> FolioMeta {
        FolioMeta {
            state: FolioState::from_bits(state),
            version: Version::default(),
            owner: AtomicU32::new(owner),
            place: AtomicU64::new(place),
        }
    }

    /// Stores the given words as they are into an entry (a hostile segment forged in
    /// place: `fuzzing::hostile_segment`).
    #[cfg(any(fuzzing, test))]
    pub fn store_raw(&self, state: u64, owner: u32, place: u64) {
        self.state.store_bits(state);
        self.owner.store(owner, Ordering::Relaxed);
        self.place.store(place, Ordering::Relaxed);
    }

    /// `identity` with the order as recorded, unchecked (a segment read back: `adopt`).
    pub fn identity_raw(&self) -> (MappingId, PageIndex, u64) {
        let owner = self.owner.load(Ordering::Relaxed);
        let place = self.place.load(Ordering::Relaxed);
        (
            MappingId(owner),
            PageIndex(place & INDEX_MASK),
            (place >> ORDER_SHIFT) & 0xf,
        )
    }

    /// Whether the identity last recorded is `(mapping, head, order)`: `identity() ==`
    /// as one masked comparison of the packed word (the hit path's check; stale as
    /// `identity`'s answer is).
    #[inline]
    pub fn holds(&self, mapping: MappingId, head: PageIndex, order: Order) -> bool {
        let place = self.place.load(Ordering::Relaxed) & ((1 << ERRNO_SHIFT) - 1);
        self.owner.load(Ordering::Relaxed) == mapping.0
            && place == head.0 | (u64::from(order.get()) << ORDER_SHIFT)
    }

    pub fn identity(&self) -> (MappingId, PageIndex, Order) {
        let owner = self.owner.load(Ordering::Relaxed);
        let place = self.place.load(Ordering::Relaxed);
        let order = ((place >> ORDER_SHIFT) & 0xf).min(u64::from(crate::types::ORDER_MAX));
        (
            MappingId(owner),
            PageIndex(place & INDEX_MASK),
            Order::new(order as u8),
        )
    }

    /// A tail frame's word of its head's dirty-block mask (`write::mask::BlockMask`): a large
    /// folio uses only its head's entry, so the `place` words of its first tail frames
    /// hold 64 blocks' bits each while it is allocated.
    ///
    /// Context: the folio this frame is a tail of is allocated (its head pinned, or in
    /// the index); only `dirty` reads or writes the word.
    pub fn tail_mask_word(&self) -> &AtomicU64 {
        &self.place
    }

    /// Records the errno of a failed read. Context: the completion, before it unlocks.
    pub fn set_errno(&self, errno: i32) {
        let errno = u64::try_from(errno).unwrap_or(0).clamp(1, 255);
        let place = self.place.load(Ordering::Relaxed) & !(0xff << ERRNO_SHIFT);
        self.place
            .store(place | (errno << ERRNO_SHIFT), Ordering::Relaxed);
    }

    /// The errno of the failed read, for its waiters (who saw ERROR with Acquire).
    pub fn errno(&self) -> i32 {
        let errno = (self.place.load(Ordering::Relaxed) >> ERRNO_SHIFT) as i32;
        if errno == 0 {
            libc::EIO
        } else {
            errno
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_is_identity_compared_whatever_the_errno() {
        let meta = FolioMeta::default();
        let (mapping, head, order) = (MappingId(7), PageIndex(4096), Order::new(2));
        meta.set_identity(mapping, head, order);
        assert!(meta.holds(mapping, head, order));
        meta.set_errno(libc::EIO);
        assert!(
            meta.holds(mapping, head, order),
            "the errno is no part of it"
        );
        assert_eq!(meta.identity(), (mapping, head, order));
        for (m, h, o) in [
            (MappingId(8), head, order),
            (mapping, PageIndex(4100), order),
            (mapping, head, Order::new(3)),
        ] {
            assert!(!meta.holds(m, h, o), "{m:?} {h:?} {o:?}");
            assert_ne!(meta.identity(), (m, h, o));
        }
    }
}
