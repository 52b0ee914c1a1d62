//! How much memory a cache nobody uses gives back, and how often it looks: a kept
//! segment's steward's rule (keeper/kept.rs) and an idle domain's (shared/steward.rs,
//! "Alone"), from the machine's figures (`machine`). Pure functions: the mechanisms
//! (punching a segment's pages, reclaiming a domain's frames) are their callers'.

use std::time::Duration;

use super::follow;
use super::machine::MemoryFacts;

/// The bounds of a giving-back steward's tick, and the rate at which another process is
/// assumed to take free memory when the tick is sized (`next_tick`).
pub(crate) const TICK_MIN: Duration = Duration::from_millis(50);
pub(crate) const TICK_MAX: Duration = Duration::from_secs(2);
const ALLOCATION_BYTES_PER_S: u64 = 4 << 30;

/// How many bytes the steward gives back now: under memory pressure, enough to bring the
/// room back to three reserves (`follow::reserve_bytes`); past the bound (`kept`, asked
/// only then: it reads the directory), its segment's share of the excess.
pub(crate) fn want_bytes(
    facts: &MemoryFacts,
    stall_share: f64,
    own_bytes: u64,
    kept: impl FnOnce() -> (u64, u64),
) -> u64 {
    if own_bytes == 0 || facts.total_bytes == 0 {
        return 0;
    }
    let reserve = follow::reserve_bytes(facts.limit_bytes);
    let room = facts.available_bytes;
    let stalled = stall_share > follow::STALL_SHARE_SHRINK && room < 3 * reserve;
    let for_pressure = if room < 2 * reserve || stalled {
        (3 * reserve).saturating_sub(room).max(reserve / 4)
    } else {
        0
    };
    let (all, bound) = kept();
    let for_bound = if all > bound {
        ((u128::from(all - bound) * u128::from(own_bytes)).div_ceil(u128::from(all.max(1)))) as u64
    } else {
        0
    };
    for_pressure.max(for_bound)
}

/// The next tick: the time another process taking memory at `ALLOCATION_BYTES_PER_S`
/// needs to bring the room down to two reserves, within `[TICK_MIN, TICK_MAX]`.
pub(crate) fn next_tick(facts: &MemoryFacts) -> Duration {
    if facts.total_bytes == 0 {
        return TICK_MAX;
    }
    let margin = facts
        .available_bytes
        .saturating_sub(2 * follow::reserve_bytes(facts.limit_bytes));
    Duration::from_millis(margin * 1000 / ALLOCATION_BYTES_PER_S).clamp(TICK_MIN, TICK_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(available_mib: u64) -> MemoryFacts {
        MemoryFacts {
            total_bytes: 8 << 30,
            available_bytes: available_mib << 20,
            limit_bytes: 8 << 30,
            pressure_some_total_us: None,
        }
    }

    #[test]
    fn pressure_and_the_bound_ask_for_memory_and_an_idle_machine_does_not() {
        let reserve = follow::reserve_bytes(8 << 30);
        let none = || (0, u64::MAX);
        assert_eq!(want_bytes(&facts(4096), 0.0, 1 << 30, none), 0);
        let pressed = want_bytes(&facts(300), 0.0, 1 << 30, none);
        assert_eq!(pressed, 3 * reserve - (300 << 20));
        assert_eq!(want_bytes(&facts(300), 0.0, 0, none), 0, "nothing to give");
        // Two segments of 600 MiB and 200 MiB over a bound of 400 MiB: this one (600)
        // gives three quarters of the 400 MiB excess.
        let bound = || (800 << 20, 400 << 20);
        assert_eq!(want_bytes(&facts(4096), 0.0, 600 << 20, bound), 300 << 20);
        assert_eq!(next_tick(&facts(300)), TICK_MIN);
        assert_eq!(next_tick(&facts(64 << 10)), TICK_MAX);
    }
}
