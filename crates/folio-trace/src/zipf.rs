//! Zipf-distributed ranks: rank `k` (0-based) is drawn with probability proportional to
//! `1 / (k + 1)^alpha`.
//!
//! Sampling inverts the cumulative distribution: the table holds the running sums of the
//! normalised weights, and a draw is a binary search for a uniform number in it. Exact
//! (no approximation of the harmonic sum), O(log n) per draw, 8 bytes of table per rank,
//! built once in O(n). `alpha = 0` is the uniform distribution.
//!
//! Limits: at most [`RANKS_MAX`] ranks (a 128 MiB table).

/// The most ranks a table may have.
pub const RANKS_MAX: u32 = 1 << 24;

/// A Zipf(alpha) distribution over `0..ranks`.
#[derive(Clone, Debug)]
pub struct Zipf {
    /// `cdf[k]` = P(rank <= k); the last entry is exactly 1.
    cdf: Vec<f64>,
}

impl Zipf {
    /// Errors: `ranks` is 0 or above [`RANKS_MAX`], `alpha` is negative or not finite.
    pub fn new(ranks: u32, alpha: f64) -> Result<Zipf, String> {
        if ranks == 0 || ranks > RANKS_MAX {
            return Err(format!(
                "a Zipf distribution needs 1 ..= {RANKS_MAX} ranks, not {ranks}"
            ));
        }
        if !(alpha.is_finite() && alpha >= 0.0) {
            return Err(format!(
                "Zipf alpha must be a finite number >= 0, not {alpha}"
            ));
        }
        let mut cdf = Vec::with_capacity(ranks as usize);
        let mut sum = 0.0f64;
        for k in 1..=ranks {
            sum += f64::from(k).powf(-alpha);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        // Rounding may leave the last sum a hair off 1: a draw of 0.999...9 must still land.
        *cdf.last_mut().expect("ranks >= 1") = 1.0;
        Ok(Zipf { cdf })
    }

    pub fn ranks(&self) -> u32 {
        self.cdf.len() as u32
    }

    /// The rank whose cumulative interval holds `u`, for `u` in `[0, 1)`.
    pub fn rank_of(&self, u: f64) -> u32 {
        debug_assert!((0.0..1.0).contains(&u));
        self.cdf.partition_point(|&c| c <= u) as u32
    }

    pub fn sample(&self, rng: &mut crate::rng::SplitMix64) -> u32 {
        self.rank_of(rng.next_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    #[test]
    fn rejects_bad_parameters() {
        assert!(Zipf::new(0, 1.0).is_err());
        assert!(Zipf::new(RANKS_MAX + 1, 1.0).is_err());
        assert!(Zipf::new(10, -0.1).is_err());
        assert!(Zipf::new(10, f64::NAN).is_err());
    }

    /// The interval ends map to the right ranks.
    #[test]
    fn inversion_edges() {
        let z = Zipf::new(4, 0.0).unwrap(); // uniform: cdf = .25 .5 .75 1
        assert_eq!(z.rank_of(0.0), 0);
        assert_eq!(z.rank_of(0.2499), 0);
        assert_eq!(z.rank_of(0.25), 1);
        assert_eq!(z.rank_of(0.9999999), 3);
        assert_eq!(Zipf::new(1, 0.9).unwrap().rank_of(0.5), 0);
    }

    /// The frequencies drawn follow 1/k^alpha: rank 0 over rank 9 is 10^alpha.
    #[test]
    fn frequencies_follow_the_law() {
        let z = Zipf::new(1000, 0.9).unwrap();
        let mut rng = SplitMix64::new(3);
        let mut counts = vec![0u32; 1000];
        for _ in 0..400_000 {
            counts[z.sample(&mut rng) as usize] += 1;
        }
        let ratio = f64::from(counts[0]) / f64::from(counts[9]);
        let expected = 10f64.powf(0.9);
        assert!(
            (ratio / expected - 1.0).abs() < 0.1,
            "ratio {ratio}, expected {expected}"
        );
    }
}
