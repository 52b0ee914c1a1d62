//! The no-reuse queue, in front of either policy: folios read under `ReadHint::NoReuse`
//! (a one-time scan, a compaction's input: the kernel's `POSIX_FADV_NOREUSE`) wait here,
//! in FIFO order, and are evicted before anything of the policy's own queues, so a scan
//! of any size never displaces the working set.
//!
//! ```text
//!   insert_no_reuse ──> no-reuse FIFO ──freq 0: evict first (a cold shadow: no refault credit)
//!                            │
//!                            └──freq > 0 (a normal read used it meanwhile) ──> policy.insert
//!   insert ──────────────────────────────────────────────────────────────> policy.insert
//!   isolate: the no-reuse FIFO's read folios first, then the policy, then the
//!            no-reuse folios read ahead and not read yet
//! ```
//!
//! A NoReuse read never raises a folio's frequency (`File` skips its touch), so a scan
//! passing over the working set neither promotes nor demotes it; a normal read of a
//! no-reuse folio does, which rescues it into the policy when it reaches the queue's head
//! (cache_ext's observation, SOSP 2025: scans that do not displace the working set).
//!
//! Protection: the queue has its own mutex. Lock order: this mutex -> the policy's (a
//! rescue and `remove` call the policy while holding it, so a folio moved into the policy
//! is never one a concurrent `remove` missed).

use std::sync::Mutex;

use super::{busy, isolate_ref, pages_of, put_back_busy, Admission, EvictionPolicy, Isolated};
use crate::arena::Arena;
use crate::list::{List, QueueId};
use crate::types::FrameId;

const QUEUE_NOREUSE: QueueId = 9;
const QUEUE_NOREUSE_BUSY: QueueId = 10;

#[derive(Debug)]
pub struct NoReuseFirst {
    queue: Mutex<List>,
    policy: Box<dyn EvictionPolicy>,
}

impl NoReuseFirst {
    pub fn new(policy: Box<dyn EvictionPolicy>) -> NoReuseFirst {
        NoReuseFirst {
            queue: Mutex::new(List::new(QUEUE_NOREUSE)),
            policy,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, List> {
        // The list is consistent between statements; a panic elsewhere cannot tear it.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether `isolate_queued` takes folios read ahead and not read yet (`PREFETCHED`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unread {
    Keep,
    Take,
}

impl NoReuseFirst {
    /// Isolates from the no-reuse queue, oldest first: victims of about `want_pages`
    /// pages; folios a normal read used go to the policy. Returns the pages isolated and
    /// the busy folios skipped.
    fn isolate_queued(
        &self,
        arena: &Arena,
        want_pages: u64,
        out: &mut Vec<Isolated>,
        unread: Unread,
    ) -> (u64, u64) {
        let mut got = 0;
        let mut skipped = 0;
        let mut q = self.lock();
        let mut set_aside = List::new(QUEUE_NOREUSE_BUSY);
        let mut budget = q.len();
        while got < want_pages && budget > 0 {
            budget -= 1;
            let Some(frame) = q.pop_front(&arena.links, |f| pages_of(arena, f)) else {
                break;
            };
            let pages = pages_of(arena, frame);
            if busy(arena, frame) {
                skipped += 1;
                set_aside.push_back(&arena.links, frame, pages);
                continue;
            }
            let state = arena.meta(frame).state.load();
            if unread == Unread::Keep && state.is_prefetched() {
                set_aside.push_back(&arena.links, frame, pages);
                continue;
            }
            if arena.meta(frame).state.freq() > 0 {
                // A normal read used it: the policy judges it from now on.
                self.policy.insert(arena, frame, pages, None);
                continue;
            }
            if !isolate_ref(arena, frame) {
                set_aside.push_back(&arena.links, frame, pages);
                continue;
            }
            out.push(Isolated {
                frame,
                pages,
                shadow: self.policy.shadow_cold(),
            });
            got += pages;
        }
        put_back_busy(arena, &mut set_aside, &mut q);
        (got, skipped)
    }
}

impl EvictionPolicy for NoReuseFirst {
    fn name(&self) -> &'static str {
        self.policy.name()
    }

    fn insert(&self, arena: &Arena, frame: FrameId, pages: u64, shadow: Option<u64>) -> Admission {
        self.policy.insert(arena, frame, pages, shadow)
    }

    fn insert_no_reuse(&self, arena: &Arena, frame: FrameId, pages: u64) {
        self.lock().push_back(&arena.links, frame, pages);
    }

    fn remove(&self, arena: &Arena, frame: FrameId, pages: u64) {
        let mut q = self.lock();
        if !q.remove(&arena.links, frame, pages) {
            self.policy.remove(arena, frame, pages);
        }
    }

    fn isolate(&self, arena: &Arena, want_pages: u64, out: &mut Vec<Isolated>) -> u64 {
        // The scan's pages it has read first; then the policy's; the scan's pages still
        // read ahead and unread only when the policy has nothing either (evicting them
        // first would make the scan read them twice).
        let (mut got, mut skipped) = self.isolate_queued(arena, want_pages, out, Unread::Keep);
        if got < want_pages {
            let before: u64 = out.iter().map(|v| v.pages).sum();
            skipped += self.policy.isolate(arena, want_pages - got, out);
            got += out.iter().map(|v| v.pages).sum::<u64>() - before;
        }
        if got < want_pages {
            skipped += self
                .isolate_queued(arena, want_pages - got, out, Unread::Take)
                .1;
        }
        skipped
    }

    fn putback(&self, arena: &Arena, victim: Isolated) {
        self.policy.putback(arena, victim);
    }

    fn shadow_cold(&self) -> u64 {
        self.policy.shadow_cold()
    }

    fn resize(&self, capacity_pages: u64) {
        self.policy.resize(capacity_pages);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::FolioUse;
    use crate::eviction::s3fifo::S3Fifo;
    use crate::eviction::testing::{cached, pin};
    use crate::folio_meta::MappingId;
    use crate::types::{Order, PageIndex};

    fn no_reuse(arena: &Arena, policy: &NoReuseFirst, page: u64) -> FrameId {
        let order = Order::new(0);
        let frame = arena.alloc(order, FolioUse::Request).expect("a free frame");
        let meta = arena.meta(frame);
        meta.set_identity(MappingId(0), PageIndex(page), order);
        meta.state.finish_read_ok();
        policy.insert_no_reuse(arena, frame, 1);
        frame
    }

    #[test]
    fn no_reuse_folios_leave_first_in_order_unless_used() {
        let arena = Arena::new(32, crate::arena::ArenaPages::Small).unwrap();
        let policy = NoReuseFirst::new(Box::new(S3Fifo::new(32)));
        let hot: Vec<FrameId> = (0..4).map(|p| cached(&arena, &policy, p, None).0).collect();
        let scan: Vec<FrameId> = (10..14).map(|p| no_reuse(&arena, &policy, p)).collect();
        pin(&arena, scan[1]); // busy: set aside, stays queued
        arena.meta(scan[2]).state.touch(); // a normal read used it: rescued
        let mut out = Vec::new();
        assert_eq!(
            policy.isolate(&arena, 2, &mut out),
            1,
            "one busy folio skipped"
        );
        let victims: Vec<FrameId> = out.iter().map(|v| v.frame).collect();
        assert_eq!(
            victims,
            vec![scan[0], scan[3]],
            "the scan's unused folios, in order"
        );
        assert!(out.iter().all(|v| v.shadow == 0), "cold shadows");
        // The rescued folio is the policy's now; the hot folios were not touched.
        for v in &out {
            let _ = arena.meta(v.frame).state.put(); // the isolation reference
        }
        let mut more = Vec::new();
        policy.isolate(&arena, 1, &mut more);
        assert!(more
            .iter()
            .all(|v| !scan.contains(&v.frame) || v.frame == scan[2]));
        assert!(more
            .iter()
            .all(|v| hot.contains(&v.frame) || v.frame == scan[2]));
    }
}
