//! The capacity and the dirty limits, from `folio_cache_options` (`capacity_policy`,
//! `capacity_bytes`, `capacity_max_bytes`, the dirty percentages and bytes): the table on
//! `capacity_policy`, each field checked, and the dirty limits checked against the
//! capacity the library chose.
//!
//! Protection: none needed; the options are the caller's, copied once per call.

use folio_rs::{Cache, CapacityPolicy};

use super::*;
use crate::error::Failure;

#[derive(Debug, PartialEq, Eq)]
pub(super) struct CapacitySettings {
    pub(super) policy: CapacityPolicy,
    pub(super) capacity_bytes: Option<u64>,
    pub(super) capacity_max_bytes: Option<u64>,
}

/// What `opts` asks of the capacity, as the table on `capacity_policy` says, or EINVAL
/// for an unknown policy or a maximum below the capacity. The bounds the library checks
/// itself (at least FOLIO_CAPACITY_BYTES_MIN, at most 1 TiB) are left to it. A fixed
/// capacity sized to the machine fits in `segment_dir`'s room, for a persistent cache (the
/// library fits the capacities it chooses itself).
pub(super) fn capacity_settings(
    opts: &folio_cache_options,
    segment_dir: Option<&std::path::Path>,
) -> Result<CapacitySettings, Failure> {
    const CALL: &str = "folio_cache_create";
    let policy = match opts.capacity_policy {
        FOLIO_CAPACITY_FOLLOW_MACHINE => CapacityPolicy::FollowMachine,
        FOLIO_CAPACITY_FIXED => CapacityPolicy::Fixed,
        other => {
            return Err(Failure::new(
                libc::EINVAL,
                format!(
                    "{CALL}: unknown capacity_policy {other} (FOLIO_CAPACITY_FOLLOW_MACHINE or \
                     _FIXED)"
                ),
            ))
        }
    };
    let given = (opts.capacity_bytes != 0).then_some(opts.capacity_bytes);
    let max = (opts.capacity_max_bytes != 0).then_some(opts.capacity_max_bytes);
    if let (Some(capacity), Some(max)) = (given, max) {
        if max < capacity {
            return Err(Failure::new(
                libc::EINVAL,
                format!(
                    "{CALL}: capacity_max_bytes {max} is below capacity_bytes {capacity} \
                     (0: the default)"
                ),
            ));
        }
    }
    let capacity_bytes = match (policy, given) {
        // Fixed at what the machine affords now (the library's own fixed default is a
        // constant): within the maximum, if one is given.
        (CapacityPolicy::Fixed, None) => {
            let mut afforded = folio_rs::machine_capacity_bytes();
            if let Some(room) =
                segment_dir.and_then(|d| folio_rs::segment_room_capacity_bytes(d).ok())
            {
                afforded = afforded.min(room.max(folio_rs::CAPACITY_BYTES_MIN));
            }
            Some(max.map_or(afforded, |max| afforded.min(max)))
        }
        (_, given) => given,
    };
    Ok(CapacitySettings {
        policy,
        capacity_bytes,
        // A capacity the caller gave is the most the cache takes, unless the maximum says
        // more; with neither, the library's default for the policy.
        capacity_max_bytes: max.or(given),
    })
}

/// The dirty limit and background threshold `opts` sets (None: the library's default),
/// or EINVAL for values no capacity could honour: a limit below a page, a threshold above
/// the limit. What depends on the capacity is checked once the cache is built
/// (`check_dirty_against_capacity`), when the library has chosen it.
pub(super) fn dirty_settings(
    opts: &folio_cache_options,
) -> Result<(Option<u64>, Option<u64>), Failure> {
    const CALL: &str = "folio_cache_create";
    let limit = (opts.dirty_limit_bytes != 0).then_some(opts.dirty_limit_bytes);
    let background = (opts.dirty_background_bytes != 0).then_some(opts.dirty_background_bytes);
    if let Some(bytes) = limit.filter(|&bytes| bytes < PAGE_BYTES) {
        return Err(Failure::new(
            libc::EINVAL,
            format!("{CALL}: dirty_limit_bytes {bytes} is below a page (4096; 0: the default)"),
        ));
    }
    if let (Some(limit), Some(background)) = (limit, background) {
        if background > limit {
            return Err(Failure::new(
                libc::EINVAL,
                format!(
                    "{CALL}: dirty_background_bytes {background} is above the dirty limit \
                     ({limit} bytes)"
                ),
            ));
        }
    }
    Ok((limit, background))
}

/// EINVAL if a dirty limit `opts` sets is above the largest capacity `cache` was built
/// with, or a background threshold it sets (with the default limit) is above the default
/// limit at that capacity (FOLIO_DIRTY_LIMIT_PERCENT_DEFAULT percent of it, as the library
/// sizes it). The largest capacity, not the capacity now: it is fixed at build, where
/// the capacity may already have moved under the machine policy.
pub(super) fn check_dirty_against_capacity(
    opts: &folio_cache_options,
    cache: &Cache,
) -> Result<(), Failure> {
    const CALL: &str = "folio_cache_create";
    let max = cache.capacity_max_bytes();
    if opts.dirty_limit_bytes > max {
        return Err(Failure::new(
            libc::EINVAL,
            format!(
                "{CALL}: dirty_limit_bytes {} is above the largest capacity ({max} bytes: \
                 capacity_max_bytes, or as capacity_policy chose it; 0: the default)",
                opts.dirty_limit_bytes
            ),
        ));
    }
    if opts.dirty_limit_bytes == 0 && opts.dirty_background_bytes != 0 {
        let limit =
            max / PAGE_BYTES * u64::from(FOLIO_DIRTY_LIMIT_PERCENT_DEFAULT) / 100 * PAGE_BYTES;
        if opts.dirty_background_bytes > limit {
            return Err(Failure::new(
                libc::EINVAL,
                format!(
                    "{CALL}: dirty_background_bytes {} is above the default dirty limit \
                     ({limit} bytes: {FOLIO_DIRTY_LIMIT_PERCENT_DEFAULT}% of the largest \
                     capacity, {max} bytes)",
                    opts.dirty_background_bytes
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(policy: u32, capacity: u64, max: u64) -> Result<CapacitySettings, Failure> {
        let mut opts = cache_options_default();
        opts.capacity_policy = policy;
        opts.capacity_bytes = capacity;
        opts.capacity_max_bytes = max;
        capacity_settings(&opts, None)
    }

    /// The table on `folio_cache_options.capacity_policy`, row by row.
    #[test]
    fn capacity_settings_follow_the_policy_table() {
        const MIB: u64 = 1 << 20;
        let follow = CapacityPolicy::FollowMachine;
        let fixed = CapacityPolicy::Fixed;
        let row = |policy, capacity_bytes, capacity_max_bytes| CapacitySettings {
            policy,
            capacity_bytes,
            capacity_max_bytes,
        };
        // Follow: the library's machine defaults; a capacity given is the most.
        let follow_code = FOLIO_CAPACITY_FOLLOW_MACHINE;
        assert_eq!(
            settings(follow_code, 0, 0).unwrap(),
            row(follow, None, None)
        );
        assert_eq!(
            settings(follow_code, 8 * MIB, 0).unwrap(),
            row(follow, Some(8 * MIB), Some(8 * MIB))
        );
        assert_eq!(
            settings(follow_code, 8 * MIB, 64 * MIB).unwrap(),
            row(follow, Some(8 * MIB), Some(64 * MIB))
        );
        assert_eq!(
            settings(follow_code, 0, 64 * MIB).unwrap(),
            row(follow, None, Some(64 * MIB))
        );
        // Fixed: a capacity given is the capacity; none is the machine's, now.
        let fixed_code = FOLIO_CAPACITY_FIXED;
        assert_eq!(
            settings(fixed_code, 8 * MIB, 0).unwrap(),
            row(fixed, Some(8 * MIB), Some(8 * MIB))
        );
        let machine = settings(fixed_code, 0, 0).unwrap();
        assert_eq!(machine.capacity_max_bytes, None);
        assert!(machine.capacity_bytes.unwrap() >= FOLIO_CAPACITY_BYTES_MIN);
        assert_eq!(
            settings(fixed_code, 0, 4 * MIB).unwrap(),
            row(fixed, Some(4 * MIB), Some(4 * MIB)),
            "the machine's capacity within the maximum"
        );
        // Refused: a maximum below the capacity, an unknown policy.
        assert_eq!(
            settings(follow_code, 8 * MIB, 4 * MIB).unwrap_err().errno(),
            libc::EINVAL
        );
        assert_eq!(settings(7, 0, 0).unwrap_err().errno(), libc::EINVAL);
    }
}
