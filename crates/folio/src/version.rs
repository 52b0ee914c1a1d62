//! The optimistic read latch of a frame: a version counter, as in LeanStore and vmcache.
//!
//! The hit path of `File::read_at` copies bytes out of a folio without any atomic
//! read-modify-write: no reference, no lock. It is correct because frames are never
//! unmapped while the cache lives (a stale copy is discarded, never a fault) and because
//! every change of what a frame holds moves its version.
//!
//! # Protocol
//!
//! The version is even while the frame holds the valid bytes of exactly one page of one
//! file (its identity, `(mapping, index)`, is in the frame's metadata), odd otherwise
//! (free, being filled, failed).
//!
//! Writer (the owner of the frame):
//!   W1. `publish` after a read succeeded and the identity was written: odd -> even,
//!       Release, so a reader that sees the even value sees the bytes and the identity.
//!   W2. `retire` after the folio was frozen, before the frame goes back to the
//!       allocator: even -> odd, then a Release fence; the next owner writes the frame
//!       only after taking it from the allocator, which happens after this fence.
//!
//! Writer of bytes in place (a `write_at` into a cached folio, DESIGN.md §8; it holds the
//! folio LOCKED, so writers never overlap, and no pinned reader holds it):
//!   W3. `begin_write`: even -> odd, then a Release fence (as W2), then the bytes are
//!       written with atomic stores (`Arena::copy_in`).
//!   W4. `end_write`: odd -> even, Release (as W1).
//!   A reader whose copy overlaps the writer's stores sees, at R3, W3's odd value or
//!   W4's later even one: it never validates a copy that mixes old and new bytes.
//!
//! Reader (`begin_read` / `validate`):
//!   R1. `v = begin_read()`: load Acquire; an odd value sends the reader to the pinned
//!       path.
//!   R2. Check the identity against the page it looked up; copy the bytes with a
//!       byte-wise atomic memcpy (`copy_out`: relaxed loads, or `rep movsb` on x86-64,
//!       which the hardware performs as such loads), so a racing writer is a stale value,
//!       not a data race.
//!   R3. `validate(v)`: an Acquire fence, then load the version again. Equal: the copy is
//!       the bytes of that identity. Different: discard and take the pinned path.
//!
//! If any byte the reader copied was written by a later owner, that write happened after
//! W2's fence, so R3's fence makes W2's odd value (or a later one) visible: the reader
//! cannot validate a mixed copy. The counter is 32 bits (the metadata budget): an ABA
//! needs the frame to be evicted and refilled 2^31 times during one copy of at most
//! 2 MiB, which cannot happen. Model-checked in `tests/loom_models.rs` (`optimistic_read`
//! for W1-W2, `write_vs_optimistic_read` for W3-W4).

use crate::primitive::{fence, AtomicU32, Ordering};

#[derive(Debug)]
#[repr(transparent)]
pub struct Version(AtomicU32);

impl Default for Version {
    fn default() -> Self {
        Version(AtomicU32::new(1))
    }
}

impl Version {
    /// R1. `None` when the frame does not hold a valid page right now.
    #[inline]
    pub fn begin_read(&self) -> Option<u32> {
        let v = self.0.load(Ordering::Acquire);
        (v & 1 == 0).then_some(v)
    }

    /// R3. True when nothing changed the frame since `begin_read` returned `v`.
    #[inline]
    pub fn validate(&self, v: u32) -> bool {
        fence(Ordering::Acquire);
        self.0.load(Ordering::Relaxed) == v
    }

    /// W1. The frame now holds valid bytes of its identity.
    pub fn publish(&self) {
        let old = self.0.fetch_add(1, Ordering::Release);
        assert!(old & 1 == 1, "published a frame that was already valid");
    }

    /// W3. The frame's bytes are about to change in place (module docs).
    pub fn begin_write(&self) {
        self.retire();
    }

    /// W4. The change is complete: the frame holds valid bytes again.
    pub fn end_write(&self) {
        self.publish();
    }

    /// W2. The frame stops holding valid bytes; call before anyone may write it again.
    pub fn retire(&self) {
        let old = self.0.fetch_add(1, Ordering::Relaxed);
        assert!(old & 1 == 0, "retired a frame that was not valid");
        fence(Ordering::Release);
    }

    /// Stores what `default` makes (odd: no valid bytes), into a version nobody else uses
    /// (a virgin frame's, `Arena::list_chunk`: its publication happens under the lists' lock).
    pub fn reset(&self) {
        self.0.store(1, Ordering::Relaxed);
    }

    /// Whether the frame currently holds valid bytes (even version).
    pub fn is_valid(&self) -> bool {
        self.0.load(Ordering::Acquire) & 1 == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_moves_on_every_change() {
        crate::primitive::model(|| {
            let v = Version::default();
            assert_eq!(v.begin_read(), None, "a new frame holds nothing");
            v.publish();
            let seen = v.begin_read().expect("published");
            assert!(v.validate(seen));
            v.retire();
            assert!(!v.validate(seen));
            assert_eq!(v.begin_read(), None);
            v.publish();
            assert!(
                !v.validate(seen),
                "a reused frame never validates an old read"
            );
        });
    }
}
