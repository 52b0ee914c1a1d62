//! The synthetic traces: Zipf, and a hot set mixed with one-pass sequential scans.
//!
//! Both are iterators of [`Access`]es, a pure function of their parameters and seed (the
//! generator is [`SplitMix64`], written in this crate), so the same command writes the
//! same file on every machine. They stream: memory is the popularity table, not the
//! trace.
//!
//! # `zipf`
//!
//! `accesses` draws of a Zipf(`alpha`) rank over `pages` pages. Rank `k` is drawn with
//! probability proportional to `1 / (k + 1)^alpha`; ranks are mapped to pages by a seeded
//! random permutation, so popularity says nothing about position in the file (no
//! accidental locality for readahead or large folios to exploit). With `files` > 1, page
//! `p` of the permutation is page `p / files` of file `p % files`.
//!
//! # `scan-mix`: a hot set, and scans that flush an LRU
//!
//! ```text
//!  file 0 (hot):  Zipf(hot_alpha) over hot_pages pages, all the time
//!  file 1 (cold): scan 0: pages [0, S)  scan 1: [S, 2S)  ...  each page read once, ever
//!
//!  time ──> |── gap: hot only ──|── scan k: hot and cold interleaved ──|── gap ──|── ...
//!                 scan_gap            S = scan_pages cold pages, each access of
//!                 accesses            the scan is cold with probability scan_fraction
//! ```
//!
//! A database serving a hot working set while a report scans a table. The cold pages are
//! read once and never again, so no policy can hit on them: every policy's miss ratio is
//! at least the share of scan accesses. What differs is the hot set. LRU puts each scanned
//! page at the head of its list, so a scan of more pages than the cache pushes the hot set
//! out and it misses again after every scan. A scan-resistant policy keeps once-read pages
//! in a probationary queue (S3-FIFO's small FIFO, the kernel's inactive list) that they
//! leave without displacing the hot set, which then only misses on its first accesses.
//!
//! The defaults are sized for a cache of 10,000 pages: a hot set of 8,000 pages fits in
//! S3-FIFO's main queue (90% of the cache), and each scan reads 30,000 pages, three times
//! the cache.

use crate::rng::SplitMix64;
use crate::trace::Access;
use crate::zipf::Zipf;

/// The longest trace a generator writes: cold page numbers must fit a `page_index`.
pub const ACCESSES_MAX: u64 = 1 << 31;

/// Parameters of the `zipf` trace. See the module docs.
#[derive(Clone, Debug, PartialEq)]
pub struct ZipfParams {
    pub alpha: f64,
    pub accesses: u64,
    pub pages: u32,
    pub files: u32,
    pub seed: u64,
}

impl Default for ZipfParams {
    fn default() -> Self {
        ZipfParams {
            alpha: 0.9,
            accesses: 1_000_000,
            pages: 100_000,
            files: 1,
            seed: 1,
        }
    }
}

/// Parameters of the `scan-mix` trace. See the module docs.
#[derive(Clone, Debug, PartialEq)]
pub struct ScanMixParams {
    pub accesses: u64,
    /// Pages of the hot set (file 0), and the Zipf exponent of their popularity.
    pub hot_pages: u32,
    pub hot_alpha: f64,
    /// Cold pages each scan reads (file 1), each exactly once.
    pub scan_pages: u32,
    /// The share of a scan's accesses that are its cold pages, in (0, 1]; the rest go to
    /// the hot set.
    pub scan_fraction: f64,
    /// Hot-only accesses before each scan.
    pub scan_gap: u64,
    pub seed: u64,
}

impl Default for ScanMixParams {
    fn default() -> Self {
        ScanMixParams {
            accesses: 1_000_000,
            hot_pages: 8_000,
            hot_alpha: 0.8,
            scan_pages: 30_000,
            scan_fraction: 0.5,
            scan_gap: 40_000,
            seed: 1,
        }
    }
}

fn check_accesses(accesses: u64) -> Result<(), String> {
    if accesses > ACCESSES_MAX {
        return Err(format!("at most {ACCESSES_MAX} accesses, not {accesses}"));
    }
    Ok(())
}

/// Zipf ranks mapped to pages by a seeded permutation.
#[derive(Debug)]
struct Popularity {
    zipf: Zipf,
    page_of_rank: Vec<u32>,
}

impl Popularity {
    fn new(pages: u32, alpha: f64, rng: &mut SplitMix64) -> Result<Popularity, String> {
        let zipf = Zipf::new(pages, alpha)?;
        let mut page_of_rank: Vec<u32> = (0..pages).collect();
        // Fisher-Yates.
        for i in (1..page_of_rank.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            page_of_rank.swap(i, j);
        }
        Ok(Popularity { zipf, page_of_rank })
    }

    fn sample(&self, rng: &mut SplitMix64) -> u32 {
        self.page_of_rank[self.zipf.sample(rng) as usize]
    }
}

/// The `zipf` trace. Errors on parameters out of range, before generating anything.
pub fn zipf(params: &ZipfParams) -> Result<impl Iterator<Item = Access>, String> {
    check_accesses(params.accesses)?;
    if params.pages == 0 {
        return Err("--pages must be at least 1".to_string());
    }
    if params.files == 0 || params.files > params.pages {
        return Err(format!(
            "--files must be in 1 ..= --pages ({}), not {}",
            params.pages, params.files
        ));
    }
    let mut rng = SplitMix64::new(params.seed);
    let popularity = Popularity::new(params.pages, params.alpha, &mut rng)?;
    let files = params.files;
    Ok((0..params.accesses).map(move |_| {
        let p = popularity.sample(&mut rng);
        Access::new(p % files, p / files)
    }))
}

/// The file of the hot set and the file the scans read.
pub const SCAN_MIX_HOT_FILE: u32 = 0;
pub const SCAN_MIX_COLD_FILE: u32 = 1;

/// The `scan-mix` trace. Errors on parameters out of range, before generating anything.
pub fn scan_mix(params: &ScanMixParams) -> Result<impl Iterator<Item = Access>, String> {
    check_accesses(params.accesses)?;
    if params.scan_pages == 0 {
        return Err("--scan-pages must be at least 1".to_string());
    }
    if !(params.scan_fraction > 0.0 && params.scan_fraction <= 1.0) {
        return Err(format!(
            "--scan-fraction must be in (0, 1], not {}",
            params.scan_fraction
        ));
    }
    let mut rng = SplitMix64::new(params.seed);
    let hot = Popularity::new(params.hot_pages, params.hot_alpha, &mut rng)?;
    let mut state = ScanMix {
        hot,
        rng,
        scan_pages: params.scan_pages,
        scan_fraction: params.scan_fraction,
        scan_gap: params.scan_gap,
        phase: Phase::Gap {
            left: params.scan_gap,
        },
        cold_next: 0,
    };
    Ok((0..params.accesses).map(move |_| state.next_access()))
}

#[derive(Debug)]
enum Phase {
    /// Hot-only accesses before the next scan.
    Gap { left: u64 },
    /// A scan with `left` cold pages still to read.
    Scan { left: u32 },
}

#[derive(Debug)]
struct ScanMix {
    hot: Popularity,
    rng: SplitMix64,
    scan_pages: u32,
    scan_fraction: f64,
    scan_gap: u64,
    phase: Phase,
    /// The next cold page: scans follow each other through file 1, so none is re-read.
    cold_next: u32,
}

impl ScanMix {
    fn next_access(&mut self) -> Access {
        if let Phase::Gap { left: 0 } = self.phase {
            self.phase = Phase::Scan {
                left: self.scan_pages,
            };
        }
        match &mut self.phase {
            Phase::Gap { left } => {
                *left -= 1;
                self.hot_access()
            }
            Phase::Scan { left } => {
                if self.rng.next_f64() >= self.scan_fraction {
                    return self.hot_access();
                }
                *left -= 1;
                if *left == 0 {
                    self.phase = Phase::Gap {
                        left: self.scan_gap,
                    };
                }
                let page = self.cold_next;
                // ACCESSES_MAX < 2^32: cold pages never wrap.
                self.cold_next += 1;
                Access::new(SCAN_MIX_COLD_FILE, page)
            }
        }
    }

    fn hot_access(&mut self) -> Access {
        Access::new(SCAN_MIX_HOT_FILE, self.hot.sample(&mut self.rng))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn zipf_small(seed: u64) -> Vec<Access> {
        let p = ZipfParams {
            accesses: 5_000,
            pages: 1_000,
            files: 3,
            seed,
            ..ZipfParams::default()
        };
        zipf(&p).unwrap().collect()
    }

    #[test]
    fn deterministic_per_seed() {
        assert_eq!(zipf_small(5), zipf_small(5));
        assert_ne!(zipf_small(5), zipf_small(6));
        let p = ScanMixParams {
            accesses: 10_000,
            ..ScanMixParams::default()
        };
        let a: Vec<_> = scan_mix(&p).unwrap().collect();
        let b: Vec<_> = scan_mix(&p).unwrap().collect();
        assert_eq!(a, b);
    }

    /// Zipf pages stay within `pages`, spread over `files`.
    #[test]
    fn zipf_stays_in_range() {
        for a in zipf_small(1) {
            assert!(a.file.0 < 3);
            assert!(a.page.0 * 3 + a.file.0 < 1_000);
        }
    }

    /// The scan-mix trace has the shape its docs draw: a hot-only gap, then scans whose
    /// cold pages come in order, each once, with the hot set interleaved.
    #[test]
    fn scan_mix_shape() {
        let p = ScanMixParams {
            accesses: 20_000,
            hot_pages: 100,
            scan_pages: 3_000,
            scan_fraction: 0.25,
            scan_gap: 1_000,
            ..ScanMixParams::default()
        };
        let trace: Vec<_> = scan_mix(&p).unwrap().collect();
        assert_eq!(trace.len(), 20_000);
        assert!(trace[..1_000]
            .iter()
            .all(|a| a.file.0 == SCAN_MIX_HOT_FILE && a.page.0 < 100));
        let cold: Vec<u32> = trace
            .iter()
            .filter(|a| a.file.0 == SCAN_MIX_COLD_FILE)
            .map(|a| a.page.0)
            .collect();
        assert!(cold.iter().enumerate().all(|(i, &p)| p == i as u32));
        // Scan 0 is the 3,000 cold pages after the gap, a quarter of its accesses.
        let scan0_end = trace
            .iter()
            .position(|a| a.page.0 == 2_999 && a.file.0 == 1)
            .unwrap();
        let scan0_len = scan0_end + 1 - 1_000;
        assert!((10_800..13_200).contains(&scan0_len), "{scan0_len}");
        // Then a gap of 1,000 hot-only accesses.
        assert!(trace[scan0_end + 1..scan0_end + 1_001]
            .iter()
            .all(|a| a.file.0 == SCAN_MIX_HOT_FILE));
        let hot: HashSet<_> = trace.iter().filter(|a| a.file.0 == 0).collect();
        assert!(hot.len() > 90);
    }

    #[test]
    fn rejects_bad_parameters() {
        let bad = |p: ZipfParams| zipf(&p).err().unwrap();
        assert!(bad(ZipfParams {
            pages: 0,
            ..ZipfParams::default()
        })
        .contains("--pages"));
        assert!(bad(ZipfParams {
            files: 0,
            ..ZipfParams::default()
        })
        .contains("--files"));
        assert!(bad(ZipfParams {
            alpha: -1.0,
            ..ZipfParams::default()
        })
        .contains("alpha"));
        assert!(bad(ZipfParams {
            accesses: ACCESSES_MAX + 1,
            ..ZipfParams::default()
        })
        .contains("accesses"));
        let bad = |p: ScanMixParams| scan_mix(&p).err().unwrap();
        let d = ScanMixParams::default;
        assert!(bad(ScanMixParams {
            scan_fraction: 0.0,
            ..d()
        })
        .contains("--scan-fraction"));
        assert!(bad(ScanMixParams {
            scan_fraction: 1.5,
            ..d()
        })
        .contains("--scan-fraction"));
        assert!(bad(ScanMixParams {
            scan_pages: 0,
            ..d()
        })
        .contains("--scan-pages"));
        assert!(bad(ScanMixParams {
            hot_pages: 0,
            ..d()
        })
        .contains("ranks"));
    }
}
