//! The segment's stats area: the owner's counters, published by name so that another
//! process (`folio-stat`, `SegmentView`) can see a running cache, or the last figures of
//! one that is gone, from its segment alone.
//!
//! ```text
//! STATS_OFFSET + 0    magic "FOLIOSTA", format, entry size, entry count
//!              + 16   sequence word: odd while a publish rewrites the area, 0 never published
//!              + 24   published at (Unix time, ms), the publisher's pid
//!              + 64   entries, 64 B each: a tag word (kind, name length, text length),
//!                     the name (up to 32 bytes), the value (a number, or up to 24 bytes
//!                     of text)
//! ```
//!
//! Self-describing: every value carries its name (`Stats::FIELDS`' names), so a reader
//! built from another version of folio reads the names it knows and passes over the
//! rest; a counter added or removed changes no offset. `STATS_FORMAT` changes only if
//! the entry's own layout does.
//!
//! Protection: one publisher at a time (the owner, under `Segment`'s stats lock), between
//! two increments of the sequence word (a seqlock: odd while it writes). A reader copies
//! the entries and checks that the word was even and did not move across its copy; else
//! it tries again, so it never returns a torn snapshot. Every field is an atomic, because
//! the area is shared memory another process writes while we read.
//!
//! Limits: `ENTRIES_MAX` entries (1,023); names of at most 32 bytes and texts of at most
//! 24 (longer ones are cut). A snapshot is as consistent as the `Stats` it was made from
//! (`Cache::stats`: each counter read once, in turn).

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use super::layout::STATS_BYTES;

/// "FOLIOSTA", little-endian.
const STATS_MAGIC: u64 = u64::from_le_bytes(*b"FOLIOSTA");
/// The entry's layout; bumped only if it changes (new names need no bump).
pub const STATS_FORMAT: u32 = 1;
const HEAD_BYTES: usize = 64;
const ENTRY_BYTES: usize = 64;
const NAME_WORDS: usize = 4;
const VALUE_WORDS: usize = 3;
/// Bytes of a name an entry holds.
pub const NAME_BYTES_MAX: usize = NAME_WORDS * 8;
/// Bytes of a text value an entry holds.
pub const TEXT_BYTES_MAX: usize = VALUE_WORDS * 8;
/// Entries the area holds.
pub const ENTRIES_MAX: usize = (STATS_BYTES as usize - HEAD_BYTES) / ENTRY_BYTES;
/// Copies a reader tries before it gives up on a publisher that keeps rewriting.
const READ_TRIES: u32 = 1000;

/// The tag word: the kind in bits 0..8, the name's length in 8..16, a text's in 16..24.
const KIND_NUMBER: u64 = 1;
const KIND_TEXT: u64 = 2;

/// One published value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatValue {
    Number(u64),
    /// A name (`Stats::backend`, `Stats::eviction`); at most `TEXT_BYTES_MAX` bytes.
    Text(String),
}

/// What a reader copied out of the area: one consistent publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Every entry, in the publisher's order.
    pub entries: Vec<(String, StatValue)>,
    /// When it was published: Unix time in milliseconds.
    pub published_unix_ms: u64,
    /// Who published it.
    pub publisher_pid: u32,
    /// Publishes since the segment was created (this one included).
    pub publishes: u64,
}

/// Why `StatsArea::read` returned no snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unread {
    /// Nothing was published yet.
    NeverPublished,
    /// Not an area this build reads (another format, or damaged).
    OtherFormat,
    /// The publisher kept rewriting it for `READ_TRIES` copies.
    Busy,
}

#[repr(C)]
struct Entry {
    tag: AtomicU64,
    name: [AtomicU64; NAME_WORDS],
    value: [AtomicU64; VALUE_WORDS],
}

const _: () = assert!(std::mem::size_of::<Entry>() == ENTRY_BYTES);

/// The area at `layout::STATS_OFFSET`. All atomics: valid for any bytes (zeros: never
/// published).
#[repr(C)]
pub struct StatsArea {
    magic: AtomicU64,
    format: AtomicU32,
    entry_bytes: AtomicU32,
    seq: AtomicU64,
    published_unix_ms: AtomicU64,
    publisher_pid: AtomicU64,
    count: AtomicU64,
    _reserved: [AtomicU64; 2],
    entries: [Entry; ENTRIES_MAX],
}

const _: () = assert!(std::mem::size_of::<StatsArea>() <= STATS_BYTES as usize);
const _: () = assert!(std::mem::offset_of!(StatsArea, entries) == HEAD_BYTES);

impl StatsArea {
    /// Replaces what the area holds with `entries` (past `ENTRIES_MAX` they are left out;
    /// names and texts too long are cut), published by `pid` at `unix_ms`.
    ///
    /// Context: the owner, one publisher at a time (`Segment::publish_stats` holds the
    /// segment's stats lock); never blocks.
    pub fn publish<'a>(
        &self,
        entries: impl IntoIterator<Item = (&'a str, StatValue)>,
        pid: u32,
        unix_ms: u64,
    ) {
        let seq = self.seq.load(Ordering::Relaxed);
        let seq = seq + (seq & 1); // even, should a publisher have died mid-way
        self.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.magic.store(STATS_MAGIC, Ordering::Relaxed);
        self.format.store(STATS_FORMAT, Ordering::Relaxed);
        self.entry_bytes
            .store(ENTRY_BYTES as u32, Ordering::Relaxed);
        self.published_unix_ms.store(unix_ms, Ordering::Relaxed);
        self.publisher_pid.store(u64::from(pid), Ordering::Relaxed);
        let mut count = 0;
        for (slot, (name, value)) in self.entries.iter().zip(entries) {
            let name = &name.as_bytes()[..name.len().min(NAME_BYTES_MAX)];
            store_bytes(&slot.name, name);
            let tag = match value {
                StatValue::Number(n) => {
                    slot.value[0].store(n, Ordering::Relaxed);
                    KIND_NUMBER
                }
                StatValue::Text(text) => {
                    let text = &text.as_bytes()[..text.len().min(TEXT_BYTES_MAX)];
                    store_bytes(&slot.value, text);
                    KIND_TEXT | (text.len() as u64) << 16
                }
            };
            slot.tag
                .store(tag | (name.len() as u64) << 8, Ordering::Relaxed);
            count += 1;
        }
        self.count.store(count, Ordering::Relaxed);
        self.seq.store(seq + 2, Ordering::Release);
    }

    /// The last publish, copied whole (module docs: never torn).
    ///
    /// Context: any process that maps the segment; never blocks (it retries a copy the
    /// publisher overlapped, up to `READ_TRIES` times).
    pub fn read(&self) -> Result<Snapshot, Unread> {
        for _ in 0..READ_TRIES {
            let before = self.seq.load(Ordering::Acquire);
            if before == 0 {
                return Err(Unread::NeverPublished);
            }
            if before % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            let copied = self.copy(before);
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == before {
                return copied;
            }
        }
        Err(Unread::Busy)
    }

    /// One copy of the area, checked once the sequence word is re-read (`read`).
    fn copy(&self, seq: u64) -> Result<Snapshot, Unread> {
        if self.magic.load(Ordering::Relaxed) != STATS_MAGIC
            || self.format.load(Ordering::Relaxed) != STATS_FORMAT
            || self.entry_bytes.load(Ordering::Relaxed) != ENTRY_BYTES as u32
        {
            return Err(Unread::OtherFormat);
        }
        let count = (self.count.load(Ordering::Relaxed) as usize).min(ENTRIES_MAX);
        let mut entries = Vec::with_capacity(count);
        for slot in &self.entries[..count] {
            let tag = slot.tag.load(Ordering::Relaxed);
            let name_len = ((tag >> 8) & 0xff) as usize;
            let name = load_bytes(&slot.name, name_len.min(NAME_BYTES_MAX));
            let value = match tag & 0xff {
                KIND_NUMBER => StatValue::Number(slot.value[0].load(Ordering::Relaxed)),
                KIND_TEXT => {
                    let len = (((tag >> 16) & 0xff) as usize).min(TEXT_BYTES_MAX);
                    StatValue::Text(String::from_utf8_lossy(&load_bytes(&slot.value, len)).into())
                }
                _ => continue, // a kind a later format added
            };
            entries.push((String::from_utf8_lossy(&name).into_owned(), value));
        }
        Ok(Snapshot {
            entries,
            published_unix_ms: self.published_unix_ms.load(Ordering::Relaxed),
            publisher_pid: self.publisher_pid.load(Ordering::Relaxed) as u32,
            publishes: seq / 2,
        })
    }
}

/// Stores `bytes` into `words`, little-endian, zero-padded; `bytes` fits.
fn store_bytes(words: &[AtomicU64], bytes: &[u8]) {
    let mut chunks = bytes.chunks(8);
    for word in words {
        let mut le = [0u8; 8];
        if let Some(chunk) = chunks.next() {
            le[..chunk.len()].copy_from_slice(chunk);
        }
        word.store(u64::from_le_bytes(le), Ordering::Relaxed);
    }
}

/// The first `len` bytes stored in `words` (`store_bytes`).
fn load_bytes(words: &[AtomicU64], len: usize) -> Vec<u8> {
    let mut bytes: Vec<u8> = words
        .iter()
        .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
        .collect();
    bytes.truncate(len);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeroed() -> Box<StatsArea> {
        // SAFETY: StatsArea is atomics only, for which all-zero is valid; the layout is
        // the type's own.
        unsafe {
            let layout = std::alloc::Layout::new::<StatsArea>();
            Box::from_raw(std::alloc::alloc_zeroed(layout).cast::<StatsArea>())
        }
    }

    #[test]
    fn a_publish_is_read_back_by_name() {
        let area = zeroed();
        assert_eq!(area.read(), Err(Unread::NeverPublished));
        let long = "n".repeat(NAME_BYTES_MAX + 5);
        area.publish(
            [
                ("hits", StatValue::Number(7)),
                ("backend", StatValue::Text("io_uring".into())),
                (long.as_str(), StatValue::Number(u64::MAX)),
            ],
            42,
            1000,
        );
        let read = area.read().unwrap();
        assert_eq!(
            read.entries,
            vec![
                ("hits".to_string(), StatValue::Number(7)),
                ("backend".to_string(), StatValue::Text("io_uring".into())),
                ("n".repeat(NAME_BYTES_MAX), StatValue::Number(u64::MAX)),
            ]
        );
        assert_eq!((read.publisher_pid, read.published_unix_ms), (42, 1000));
        area.publish([("misses", StatValue::Number(1))], 42, 2000);
        let read = area.read().unwrap();
        assert_eq!(read.entries.len(), 1, "a publish replaces the last one");
        assert_eq!(read.publishes, 2);
    }

    #[test]
    fn an_area_being_rewritten_is_never_read_torn() {
        let area = zeroed();
        let names: Vec<String> = (0..200).map(|i| format!("c{i}")).collect();
        let publish = |n: u64| {
            area.publish(
                names
                    .iter()
                    .map(|name| (name.as_str(), StatValue::Number(n))),
                1,
                n,
            )
        };
        publish(0);
        std::thread::scope(|s| {
            s.spawn(|| (1..2000).for_each(publish));
            for _ in 0..2000 {
                let Ok(read) = area.read() else { continue };
                let first = &read.entries[0].1;
                assert!(read.entries.iter().all(|(_, v)| v == first), "torn");
                assert_eq!(read.entries.len(), 200);
            }
        });
    }

    #[test]
    fn another_format_is_refused() {
        let area = zeroed();
        area.publish([("hits", StatValue::Number(1))], 1, 1);
        area.format.store(STATS_FORMAT + 1, Ordering::Relaxed);
        assert_eq!(area.read(), Err(Unread::OtherFormat));
    }
}
