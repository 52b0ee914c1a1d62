//! The policy that makes the capacity follow the machine (`CapacityPolicy::FollowMachine`):
//! a thread that reads the machine's memory every `TICK` and moves the capacity, as the
//! kernel's page cache grows into free memory and shrinks when others need it.
//!
//! Design: memory is short when the room left (`MemoryFacts::available_bytes`: the
//! machine's `MemAvailable`, or the cgroup's room under its limit) falls below a reserve
//! (`reserve_bytes`: a thirty-second of the limit, 128 MiB to 1 GiB), or when tasks stalled
//! for memory more than `STALL_SHARE_SHRINK` of the last tick (pressure stall
//! information's `total`) while the room is below two reserves. Stalls alone do not
//! count: the machine-wide figure (all a cgroup v1 host has) also counts other processes'
//! stalls, and this kind of VM reports stalls of 10-18% with 21 GB free under load; and a
//! stall shrink comes at most once per `STALL_SHRINK_EVERY`, so that stalls that go on
//! for other reasons cannot shrink the cache tick after tick. The capacity the machine affords is what folio holds plus the room,
//! less one and a half reserves (`afforded_bytes`): folio grows until the room is that
//! margin, and when another process takes memory the afforded capacity falls by as much.
//!
//! Each tick (`decide`):
//! - short of memory: shrink to the afforded capacity (at least an eighth less than what
//!   is resident under pressure stalls): evict the coldest clean pages, write dirty ones
//!   back first, give whole free blocks back to the system (`Core::set_capacity`);
//! - the afforded capacity fell below the capacity by a quarter reserve: lower the
//!   capacity to it (nothing to evict while it is above what is resident; below, it
//!   evicts as a shrink does). An allocator that takes memory steadily meets this rule
//!   first (the room falls below 1.25 reserves before it falls below one), so this is
//!   how most memory goes back: `pressure_events` counts only shrinks;
//! - the cache is full, evicted pages came back (refaults: their shadow entries were
//!   still in the index, so a larger cache would have hit) and the afforded capacity is
//!   higher: grow to it. A cache that only scans (no refault) does not grow past what it
//!   holds.
//!
//! Response time: a process that allocates is seen within one tick (50 ms) and a tick
//! frees as much as it decides (eviction and `MADV_DONTNEED`: about 1 GB per 100 ms of
//! 4 KiB folios on this machine, faster for large folios). The reserve covers an
//! allocator's progress meanwhile: 768 MiB of a 24 GiB machine lasts 0.15 s at 5 GB/s,
//! 1.8 s at the 430 MB/s a process touching fresh memory reached on this VM.
//!
//! Limits: a polling thread (one read of three small files per tick, ~0.1% of a core);
//! folio cannot see a spike shorter than a tick that takes more than the reserve; pinned
//! and dirty pages leave only as fast as their holders and the device let them.

use std::time::Duration;

use super::machine::MemoryFacts;
use super::CAPACITY_BYTES_DEFAULT;

/// How often the policy reads the machine's memory.
pub const TICK: Duration = Duration::from_millis(50);
/// Stalls for memory above this share of a tick count as short of memory (with the room
/// below two reserves).
pub const STALL_SHARE_SHRINK: f64 = 0.10;
/// A shrink for stalls comes at most this often.
pub const STALL_SHRINK_EVERY: Duration = Duration::from_secs(1);
/// The reserve's bounds. Measured (`folio-bench pressure`, 16 GiB cached while another
/// process allocates 14 GiB, 2026-11-27): a sixteenth (1.5 GiB here) left folio at 4 GiB
/// where the kernel's cache kept 9 GiB, and the extra eviction cost the allocator time.
/// The floor covers a storage engine's bursts in a small cgroup (a 64 MiB memtable).
const RESERVE_MIN: u64 = 128 << 20;
const RESERVE_MAX: u64 = 1 << 30;

/// What the policy sees at a tick.
#[derive(Clone, Copy, Debug)]
pub struct Reading {
    pub facts: MemoryFacts,
    /// What folio holds resident now (`Arena::resident_frames`).
    pub resident_bytes: u64,
    pub capacity_bytes: u64,
    /// Whether the cache is at its capacity (less than a reserve's sixteenth free).
    pub full: bool,
    /// Whether refaults (pages evicted and read again) happened since the last tick.
    pub refaulted: bool,
    /// The share of the last tick in which some task stalled for memory (0 without
    /// pressure stall information, or within `STALL_SHRINK_EVERY` of a stall shrink).
    pub stall_share: f64,
}

/// What the policy does at a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Keep,
    /// Memory is short: shrink to this many bytes (a pressure event).
    Shrink(u64),
    /// The machine affords less: lower the capacity to this. Below what is resident it
    /// evicts and gives memory back like a shrink (`Core::set_capacity` does the same for
    /// both), but it is not a pressure event: the room never fell below the reserve.
    Lower(u64),
    /// A larger cache would hit: grow to this.
    Grow(u64),
}

/// The room the policy keeps free for other allocations, for a limit of `limit_bytes`.
pub fn reserve_bytes(limit_bytes: u64) -> u64 {
    (limit_bytes / 32).clamp(RESERVE_MIN, RESERVE_MAX)
}

/// The capacity the machine affords: what folio holds plus the room, less one and a
/// half reserves.
pub fn afforded_bytes(facts: &MemoryFacts, resident_bytes: u64) -> u64 {
    let reserve = reserve_bytes(facts.limit_bytes);
    (resident_bytes + facts.available_bytes).saturating_sub(reserve + reserve / 2)
}

/// The capacity the machine affords a cache that holds nothing yet: the room, less one and
/// a half reserves; [`CAPACITY_BYTES_DEFAULT`] where the machine's figures cannot be read.
pub fn afforded_at_build_bytes(facts: &MemoryFacts) -> u64 {
    if facts.total_bytes == 0 {
        CAPACITY_BYTES_DEFAULT
    } else {
        afforded_bytes(facts, 0)
    }
}

/// The tick's decision (module docs), within `[min_bytes, max_bytes]`.
pub fn decide(reading: &Reading, min_bytes: u64, max_bytes: u64) -> Decision {
    assert!(
        min_bytes <= max_bytes,
        "the capacity's bounds [{min_bytes}, {max_bytes}] are empty"
    );
    let decision = decide_within(reading, min_bytes, max_bytes);
    // Post: a move is a move (down to shrink or lower, up to grow), within the bounds.
    match decision {
        Decision::Keep => {}
        Decision::Shrink(to) | Decision::Lower(to) => {
            debug_assert!(to < reading.capacity_bytes, "{decision:?} from {reading:?}");
            debug_assert!(to >= min_bytes, "{decision:?} below {min_bytes}");
        }
        Decision::Grow(to) => {
            debug_assert!(to > reading.capacity_bytes, "{decision:?} from {reading:?}");
            debug_assert!(to <= max_bytes, "{decision:?} above {max_bytes}");
        }
    }
    decision
}

fn decide_within(reading: &Reading, min_bytes: u64, max_bytes: u64) -> Decision {
    let facts = &reading.facts;
    if facts.total_bytes == 0 {
        return Decision::Keep; // the machine's figures are unreadable
    }
    let reserve = reserve_bytes(facts.limit_bytes);
    let afforded = afforded_bytes(facts, reading.resident_bytes).clamp(min_bytes, max_bytes);
    let capacity = reading.capacity_bytes;
    let stalled = reading.stall_share > STALL_SHARE_SHRINK && facts.available_bytes < 2 * reserve;
    if facts.available_bytes < reserve || stalled {
        let mut to = afforded.min(capacity);
        if stalled {
            to = to.min(reading.resident_bytes - reading.resident_bytes / 8);
        }
        let to = to.max(min_bytes);
        return if to < capacity {
            Decision::Shrink(to)
        } else {
            Decision::Keep
        };
    }
    if afforded + reserve / 4 < capacity {
        return Decision::Lower(afforded);
    }
    if reading.full && reading.refaulted && afforded > capacity + reserve / 4 {
        return Decision::Grow(afforded);
    }
    Decision::Keep
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    /// The reserve of a 24 GiB machine, and the margin folio leaves (one and a half).
    const RESERVE: u64 = 768 << 20;
    const MARGIN: u64 = RESERVE + RESERVE / 2;

    fn reading(available: u64, resident: u64, capacity: u64) -> Reading {
        Reading {
            facts: MemoryFacts {
                total_bytes: 24 * GIB,
                available_bytes: available,
                limit_bytes: 24 * GIB,
                pressure_some_total_us: None,
            },
            resident_bytes: resident,
            capacity_bytes: capacity,
            full: true,
            refaulted: false,
            stall_share: 0.0,
        }
    }

    #[test]
    fn a_machine_short_of_memory_shrinks_the_cache_by_the_deficit() {
        assert_eq!(reserve_bytes(24 * GIB), RESERVE);
        assert_eq!(reserve_bytes(2 * GIB), 128 << 20, "the floor");
        assert_eq!(reserve_bytes(64 * GIB), GIB, "the ceiling");
        // 0.5 GiB available with 16 GiB resident: back to the margin.
        let r = reading(GIB / 2, 16 * GIB, 16 * GIB);
        let to = 16 * GIB + GIB / 2 - MARGIN;
        assert_eq!(decide(&r, 16 << 20, 24 * GIB), Decision::Shrink(to));
        // Never below the minimum.
        let r = reading(0, 100 << 20, 100 << 20);
        assert_eq!(decide(&r, 64 << 20, 24 * GIB), Decision::Shrink(64 << 20));
    }

    #[test]
    fn stalls_shrink_only_when_the_room_is_low() {
        // 1 GiB available (above the reserve, below two), a quarter of the tick stalled:
        // an eighth of what is resident goes.
        let mut r = reading(GIB, 8 * GIB, 10 * GIB);
        r.stall_share = 0.25;
        assert_eq!(decide(&r, 16 << 20, 24 * GIB), Decision::Shrink(7 * GIB));
        // Stalls with plenty of room (another process's, or the VM's): no shrink.
        let mut r = reading(20 * GIB, 4 * GIB, 4 * GIB);
        r.stall_share = 0.5;
        assert_eq!(decide(&r, 16 << 20, 24 * GIB), Decision::Keep);
    }

    #[test]
    fn a_cache_grows_only_when_full_and_refaulting() {
        let mut r = reading(10 * GIB, 4 * GIB, 4 * GIB);
        assert_eq!(
            decide(&r, 16 << 20, 24 * GIB),
            Decision::Keep,
            "no refaults"
        );
        r.refaulted = true;
        let afforded = 14 * GIB - MARGIN;
        assert_eq!(decide(&r, 16 << 20, 24 * GIB), Decision::Grow(afforded));
        assert_eq!(
            decide(&r, 16 << 20, 6 * GIB),
            Decision::Grow(6 * GIB),
            "up to the maximum"
        );
        r.full = false;
        assert_eq!(decide(&r, 16 << 20, 24 * GIB), Decision::Keep, "room left");
    }

    #[test]
    fn a_capacity_the_machine_no_longer_affords_is_lowered_without_eviction() {
        // 20 GiB allowed, 4 GiB held, 3 GiB available: affords 7 GiB less the margin.
        let r = reading(3 * GIB, 4 * GIB, 20 * GIB);
        let afforded = 7 * GIB - MARGIN;
        assert_eq!(decide(&r, 16 << 20, 24 * GIB), Decision::Lower(afforded));
    }

    #[test]
    fn unreadable_figures_keep_the_capacity() {
        let mut r = reading(0, GIB, GIB);
        r.facts.total_bytes = 0;
        assert_eq!(decide(&r, 16 << 20, 24 * GIB), Decision::Keep);
    }
}
