//! Seeded randomness for the tests that run threads against each other (`tests/crash.rs`,
//! `tests/sync_stress.rs`): SplitMix64, a seed taken from the environment or the clock
//! (printed by the caller, so a failing run can be replayed as far as threads allow), and
//! numbers read from the environment.

#![allow(dead_code)]

/// SplitMix64's finalizer: a well-mixed function of `x`.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// SplitMix64: fast, and every seed (0 included) gives a good stream.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low + 1)
    }

    pub fn pick<T: Copy>(&mut self, choices: &[T]) -> T {
        choices[self.below(choices.len() as u64) as usize]
    }
}

/// The number in the environment variable `name`, if set; a value that is not a number
/// fails the test.
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
    })
}

/// The seed in the environment variable `name`, else one from the clock.
pub fn seed_from_env_or_clock(name: &str) -> u64 {
    env_u64(name).unwrap_or_else(|| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        now.expect("a clock after 1970").as_nanos() as u64
    })
}
