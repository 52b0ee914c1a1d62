//! What the processes sharing one cache agree on (issue 45, DESIGN.md §11,
//! docs/sharing.md), and how a process killed in the middle of a change leaves the others
//! a working structure.
//!
//! **The rule** (docs/sharing.md, "The decision"): every process changes shared structures
//! itself, under a lock word that names its holder (a process slot and that slot's
//! generation: `Holder`). Before the first store of a change the holder writes an intent
//! record on the lock's own cache line (`lock.rs`); the record holds the absolute value of
//! every store the change makes, so that the change can be redone from it, once or twice
//! alike. A death is the steward's to find (it holds each attached process's pidfd): it
//! marks the process's slot dead (`slot.rs`), and from then on whoever finds a lock held by
//! that slot *and generation* takes it over with one CAS of the whole word (exactly one
//! does), redoes the intent if one was published, and goes on as its holder: a waiter, or
//! the steward when it sweeps what the dead process held (`stack.rs`, `sweep`). A hit
//! stores nothing here; a change pays its lock's CAS, as today, plus a few stores to a line
//! it already owns.
//!
//! Everything lives in a region of `AtomicU64` words (`&[AtomicU64]`: the segment's mapping,
//! or a test's shared mapping) and names other words by their index in it (`Word`), never
//! by a pointer: each process maps the segment at its own address.
//!
//! Rooms: `terms.rs` the names (`Holder`, `Word`) and how an operation runs (`Run`, its
//! `Step`s, the models' `Flaw`s); `slot.rs` the per-process slots (attach, detach, death, liveness); `lock.rs` the
//! lock word with its intent record and the take-over; `stack.rs` a stack of frames under
//! such a lock, with per-frame owners (the shape of a free list whose frames processes
//! lease): the first structure, the one the loom models (`tests/loom_shared.rs`) and the
//! test across processes (`stack::tests`) kill at every step.
//!
//! The domain (step 2, not wired into `Cache` yet): `domain.rs` the region the processes
//! share (a file in the private home, `MAP_SHARED`: the slot table, the records, the
//! frame stack) and the process identities (`ProcessId`'s pid and start time, `Pidfd`);
//! `record.rs` a record per slot naming its process, the steward's admission of an
//! attach and a new steward's census of the slots (modelled in `tests/loom_shared.rs`); `attach.rs` a process's membership (attach through the
//! steward's socket, detach, starting a steward when it finds none or finds it dead);
//! `steward.rs` the steward (elected by `flock`, watches every member's pidfd, marks a
//! dead one's slot, sweeps it, frees it; a new one rebuilds its view from the records).
//! `tests_domain.rs` kills forked members and the steward at lever-chosen steps.
//!
//! Waiting (step 3): a waiter spins and yields twice, then parks in the kernel on its
//! holder's park word (`futex.rs`; the protocol in `lock.rs` "Waiting", the words in
//! `slot.rs`), woken by the holder's unlock and by the steward's `mark_dead`; this
//! replaces "spins and yields" in the limits below. `tests_park.rs` tests it across
//! processes.
//! Step 6's first part (not wired into `Cache` yet): `files.rs` the file table, one mapping
//! record per file identity with each process's opens counted per slot (swept at a
//! death), a lock-free lookup by identity and the size word; `tests_files.rs` its tests.
//! The index (step 5, not wired into `Cache` yet): `index.rs` one file's radix tree over
//! region words (nodes named by index in a type-stable pool, lock-free readers, writers
//! under a holder lock whose changes a taker finishes); `tests_index.rs` its model test
//! and its death at every step.
//! The eviction queue (step 6's first part, not wired into `Cache` yet): `queue.rs` the
//! frames handed to the cache (CACHED in the buddy allocator: no sweep frees them), a
//! lock-free touch and pin per frame for hits, `reclaim` (out of the index, then freed),
//! the steward's sweep in its order (queue, pins, buddy); `tests_reclaim.rs` its tests.
//! The shared read path (step 6's second part, not wired into `Cache` yet): the domain's
//! region holds the queue, an index per file record and the frames' data (domain.rs);
//! `read.rs` a member's reads of real files through them (a hit pins and copies, a miss
//! `pread`s into a frame and hands it to the cache); `tests_read.rs` its tests across real
//! processes, killed at lever-chosen steps.
//! Step 8's first slice: `reader.rs` what a `Cache` built with a domain holds
//! (`CacheBuilder::domain`): its membership and its reader owned together, read by many
//! threads (`DomainReader`), and a read-only file read through it (`DomainFile`);
//! `tests_cache.rs` caches of forked processes sharing one domain, many threads each;
//! `offload.rs` this process's worker threads, which read a domain file for its futures
//! and its forced readahead (the shared read path blocks in `pread`), `tests_async.rs`
//! their tests.
//!
//! Protection: the slot table's words by CAS (attach, detach, death); a structure's words
//! by its `HolderLock`; the intent record by the same lock (only its holder writes it).
//! A dead holder's stores are visible to the one that takes over: the death is observed
//! through the kernel (the steward's pidfd) before the slot is marked dead with a release
//! store, which the take-over reads with acquire.
//!
//! Limits: a change is at most `lock::INTENT_ARGS` stores that can be written as absolute
//! values (redo only: nothing is undone; a longer change is a sequence of them); 2^16
//! slots, 2^32 attaches per slot. Locks are held for a few stores, never across I/O or an
//! allocation. Not wired into the cache yet (issue 45's steps 1-5 and step 6's first
//! part): nothing but the tests uses it.

#[allow(unsafe_code)]
pub(crate) mod attach;
pub(crate) mod buddy;
#[allow(unsafe_code)]
pub(crate) mod domain;
pub(crate) mod files;
#[allow(unsafe_code)]
pub(crate) mod futex;
pub(crate) mod index;
pub(crate) mod lock;
pub(crate) mod magazine;
#[allow(unsafe_code)]
pub(crate) mod offload;
pub(crate) mod populate;
pub(crate) mod queue;
#[allow(unsafe_code)]
pub(crate) mod read;
#[allow(unsafe_code)]
pub(crate) mod reader;
pub(crate) mod record;
pub(crate) mod slot;
pub(crate) mod stack;
#[allow(unsafe_code)]
pub(crate) mod steward;
mod terms;
#[cfg(test)]
#[allow(unsafe_code)]
mod tests;
#[cfg(test)]
mod tests_async;
#[cfg(test)]
#[allow(unsafe_code)]
mod tests_buddy;
#[cfg(test)]
mod tests_cache;
#[cfg(test)]
#[allow(unsafe_code)]
mod tests_domain;
#[cfg(test)]
#[allow(unsafe_code)]
mod tests_files;
#[cfg(test)]
#[allow(unsafe_code)]
mod tests_index;
#[cfg(test)]
#[allow(unsafe_code)]
mod tests_life;
#[cfg(test)]
#[allow(unsafe_code)]
mod tests_read;
#[cfg(test)]
#[allow(unsafe_code)]
mod tests_readahead;
#[cfg(test)]
#[allow(unsafe_code)]
mod tests_readkill;
#[cfg(test)]
mod tests_reclaim;
#[cfg(test)]
#[allow(unsafe_code)]
mod tests_records;
#[cfg(test)]
mod tests_write;
#[cfg(test)]
#[allow(unsafe_code)]
mod tests_writekill;
pub(crate) mod view;

pub(crate) use terms::{Died, Flaw, Holder, ProcessId, Run, SlotIndex, Step, Word};
#[cfg(test)]
#[allow(unsafe_code)]
mod tests_park;
