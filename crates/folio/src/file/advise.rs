//! A handle's advice (`File::advise`, `posix_fadvise`) and its readahead settings: the
//! maximum window (`set_readahead_max_bytes`; doubled by `Advice::Sequential`, 0 under
//! `Advice::Random`), the no-reuse hint (`Advice::NoReuse`), and the window as
//! diagnostics see it (`readahead_window`).
//!
//! Protection: the maximum of `Advice::Normal` and the no-reuse flag are single words
//! (hints, relaxed); the window word by CAS (`RaCell`).
//!
//! A domain file (its reads go through the domain: file/mod.rs) reads ahead with its
//! `DomainFile`'s own window, so every change of the maximum goes there too
//! (`follow_in_domain`): `Random` turns the domain's readahead off for the handle, as it
//! does the private one's. Before, the domain window kept the open's maximum: RocksDB's
//! `advise_random_on_open` (a `Random` on every table file) reached the private window
//! only, and a random reader whose file was mostly cached read a window at each miss (the
//! pages cached before the missed one look like a sequential stream's), evicting other
//! pages (docs/sharing.md, "Advice through a domain").
//!
//! Limits: a maximum window of at most 32 MiB and an eighth of the cache
//! (`Core::readahead_pages_for`); `DontNeed` drops whole pages only, and only the folios
//! nobody holds (of a domain file: this process's private folios, not the domain's);
//! `WillNeed` of a domain file reads its range into the domain on a worker thread
//! (`File::readahead`).

use std::io;

use super::{overflow, File};
use crate::mapping::Invalidate;
use crate::types::{PageIndex, PAGE_BYTES};

/// A handle's readahead window (`File::readahead_window`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadaheadWindow {
    pub start_bytes: u64,
    pub size_bytes: u64,
    pub async_bytes: u64,
    /// The handle's maximum window now (the cache-wide limit may lower what a window
    /// gets while several streams read ahead: `readahead::limit` docs).
    pub max_bytes: u64,
}

/// What a handle's reader expects of its access pattern (`posix_fadvise`'s advice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// The default: on-demand readahead with the cache's maximum window.
    Normal,
    /// Long sequential scans: twice the maximum window.
    Sequential,
    /// Random access: no readahead at all, reads read what they ask.
    Random,
    /// The range will be read soon: read it ahead now (chunks of at most 2 MiB).
    WillNeed,
    /// The range will not be read again: drop its cached folios that nobody holds.
    DontNeed,
    /// The handle's reads will not be reused (the kernel's `POSIX_FADV_NOREUSE`): they
    /// read as `ReadHint::NoReuse` until `Normal` (the range is ignored). `Sequential`
    /// and `Random` keep it.
    NoReuse,
}

impl File {
    /// Tells the cache how this handle will read (`posix_fadvise`): `Normal`,
    /// `Sequential` and `Random` set the handle's readahead (the range is ignored, as the
    /// kernel does); `WillNeed` reads the range ahead; `DontNeed` drops the range's cached
    /// folios that nobody holds (pinned or in-flight ones stay).
    ///
    /// Errors: `InvalidInput` if `offset + len` overflows.
    ///
    /// Context: any thread; does not wait for I/O; `DontNeed` takes the index lock.
    pub fn advise(&self, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
        let end = offset
            .checked_add(len)
            .ok_or_else(|| overflow(offset, len))?;
        let normal = self
            .ra_pages_normal
            .load(std::sync::atomic::Ordering::Relaxed);
        match advice {
            Advice::Normal => {
                self.ra.set_max_pages(normal);
                self.no_reuse
                    .store(false, std::sync::atomic::Ordering::Relaxed);
            }
            Advice::NoReuse => self
                .no_reuse
                .store(true, std::sync::atomic::Ordering::Relaxed),
            Advice::Sequential => self.ra.set_max_pages(
                normal
                    .saturating_mul(2)
                    .min(self.core().readahead_pages_limit()),
            ),
            Advice::Random => {
                self.ra.set_max_pages(0);
                self.ra.reset();
            }
            Advice::WillNeed => self.readahead(offset, len)?,
            Advice::DontNeed => {
                let (start, end) = (PageIndex::ceil(offset), PageIndex::containing(end));
                // Whole pages only, as the kernel: a partial page at either end stays.
                if start < end {
                    self.mapping
                        .invalidate(self.core().memory(), start, end, Invalidate::Unpinned);
                }
            }
        }
        if matches!(advice, Advice::Normal | Advice::Sequential | Advice::Random) {
            self.follow_in_domain();
        }
        Ok(())
    }

    /// The handle's readahead maximum given to its domain window too (module docs); at 0
    /// that window is forgotten (`SharedFile::set_readahead_pages`).
    fn follow_in_domain(&self) {
        if let Some(shared) = self.domain() {
            shared.set_readahead_pages(self.ra.max_pages());
        }
    }

    /// This handle's current readahead window, for diagnostics: (start, size, async
    /// size) in bytes; the marker is at `start + size - async size`.
    pub fn readahead_window(&self) -> ReadaheadWindow {
        let state = self.ra.load();
        ReadaheadWindow {
            start_bytes: state.start * PAGE_BYTES as u64,
            size_bytes: u64::from(state.size) * PAGE_BYTES as u64,
            async_bytes: u64::from(state.async_size) * PAGE_BYTES as u64,
            max_bytes: u64::from(self.ra.max_pages()) * PAGE_BYTES as u64,
        }
    }

    /// Sets this handle's maximum readahead window (rounded down to pages; 0 turns
    /// readahead off; at most 32 MiB and an eighth of the cache). `Advice::Sequential`
    /// doubles it, within the same limits.
    pub fn set_readahead_max_bytes(&self, bytes: u64) {
        let pages = self.core().readahead_pages_for(bytes);
        self.ra_pages_normal
            .store(pages, std::sync::atomic::Ordering::Relaxed);
        self.ra.set_max_pages(pages);
        self.follow_in_domain();
    }
}
