//! The fault backend's seeded simulation: which faults a seed draws for each request.
//!
//! Design: a request's faults are a pure function of (seed, op, file offset, length,
//! ordinal), where the ordinal counts the earlier requests for the same range (same file,
//! by device and inode, same op, same offset, same length). The function hashes those with
//! SplitMix64's finaliser and reads one independent stream of the hash per decision (media
//! error, short transfer, its length, delay, rank). So a failing seed replays: the n-th
//! request for a range meets the same faults whatever the threads' timing. A write's and a
//! flush's draws come from streams of their own, so adding writes and flushes to a run
//! leaves every read's draws as they were (a flush draws an EIO, a delay and a rank; it
//! has no length to cut).
//!
//! Protection: none of its own: a `Sim` lives in the fault backend's plan, under its mutex.
//!
//! Limits: a simulation remembers the ordinals of at most `SIM_RANGES_MAX` distinct
//! ranges; further new ranges all count as first requests (a test that large is not a
//! simulation of this kind).

use std::collections::HashMap;
use std::time::Duration;

use crate::io::backend::{Op, DIRECT_IO_ALIGN_BYTES};

/// The unit of a drawn short transfer: whole pages.
const PAGE_BYTES: usize = DIRECT_IO_ALIGN_BYTES;

/// Distinct ranges whose ordinals a simulation remembers (module docs, limits).
const SIM_RANGES_MAX: usize = 1 << 20;

/// Mixed into a write's key so that writes draw from streams of their own.
const WRITE_STREAMS: u64 = 0x5752_4954_4553_0001;

/// Mixed into a flush's key so that flushes draw from streams of their own.
const FLUSH_STREAMS: u64 = 0x464C_5553_4845_0001;

/// The faults a seeded simulation draws (the fault model in `io::fault`): rates per
/// thousand requests, and the timing of completions. The default draws nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimConfig {
    /// Requests, per thousand, that fail with EIO (at most 1000).
    pub eio_per_mille: u32,
    /// Requests longer than a page, per thousand, that come back short (at most 1000):
    /// reads and writes alike.
    pub short_per_mille: u32,
    /// The largest completion delay; each request draws one from `[0, delay_max]`.
    pub delay_max: Duration,
    /// The most completions held back at once to be released in rank order (0: none).
    pub reorder: usize,
    /// The longest the oldest held completion waits for others to overtake it.
    pub hold_max: Duration,
}

/// What a seed draws for one request: a pure function of the seed, the request's op,
/// offset, length and ordinal (`SimConfig::draw`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Draw {
    pub eio: bool,
    /// The length a short transfer is cut to: whole pages, at least one, and at least one
    /// fewer than asked.
    pub short_bytes: Option<usize>,
    pub delay: Duration,
    /// The order of release from the reorder pen: lowest first.
    pub rank: u64,
}

impl SimConfig {
    /// The faults of the `ordinal`-th request (from 0) of `op` for `len_bytes` at
    /// `offset_bytes`.
    pub(super) fn draw(
        &self,
        seed: u64,
        op: Op,
        offset_bytes: u64,
        len_bytes: usize,
        ordinal: u32,
    ) -> Draw {
        let mut key = mix(seed);
        key = mix(key ^ offset_bytes);
        key = mix(key ^ len_bytes as u64);
        key = mix(key ^ u64::from(ordinal));
        match op {
            Op::Read => {}
            Op::Write => key = mix(key ^ WRITE_STREAMS),
            Op::Flush { .. } => key = mix(key ^ FLUSH_STREAMS),
        }
        // Independent streams of the same key, one per decision.
        let stream = |n: u64| mix(key ^ n.wrapping_mul(0xA24B_AED4_963E_E407));
        let eio = stream(1) % 1000 < u64::from(self.eio_per_mille);
        let pages = len_bytes / PAGE_BYTES;
        let short_bytes =
            (!eio && pages >= 2 && stream(2) % 1000 < u64::from(self.short_per_mille))
                .then(|| PAGE_BYTES * (1 + (stream(3) % (pages as u64 - 1)) as usize));
        let delay_ns_max = u64::try_from(self.delay_max.as_nanos()).unwrap_or(u64::MAX);
        let delay = match delay_ns_max {
            0 => Duration::ZERO,
            max => Duration::from_nanos(stream(4) % max.saturating_add(1)),
        };
        Draw {
            eio,
            short_bytes,
            delay,
            rank: stream(5),
        }
    }
}

/// SplitMix64's finaliser: a bijection of 64-bit words that mixes every bit into every
/// other.
pub(super) fn mix(word: u64) -> u64 {
    let mut z = word.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A range of one file, as the simulation counts its requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct RangeKey {
    /// (device, inode) of the file; (0, 0) if `fstat` failed.
    pub file: (u64, u64),
    pub op: Op,
    pub offset_bytes: u64,
    pub len_bytes: usize,
}

/// A running simulation: its seed, its rates, and how often each range was requested.
pub(super) struct Sim {
    seed: u64,
    config: SimConfig,
    ordinals: HashMap<RangeKey, u32>,
}

impl Sim {
    pub fn new(seed: u64, config: SimConfig) -> Sim {
        Sim {
            seed,
            config,
            ordinals: HashMap::new(),
        }
    }

    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// The faults of the next request for `key`'s range: counts it, then draws.
    pub fn draw_next(&mut self, key: RangeKey) -> Draw {
        let ordinal = match self.ordinals.get_mut(&key) {
            Some(seen) => {
                *seen += 1;
                *seen - 1
            }
            None => {
                if self.ordinals.len() < SIM_RANGES_MAX {
                    self.ordinals.insert(key, 1);
                }
                0
            }
        };
        self.config
            .draw(self.seed, key.op, key.offset_bytes, key.len_bytes, ordinal)
    }
}
