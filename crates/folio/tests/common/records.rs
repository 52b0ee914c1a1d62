//! The records the kill tests write (`tests/crash.rs`, `tests/keeper_crash.rs`): a 24-byte
//! header (magic, length, sequence number, a checksum of the rest) and a payload
//! drawn from the sequence number, so that the parent rebuilds every write's bytes from
//! the line the child said before it, and a record found whole on disk proves itself.

#![allow(dead_code)]

use super::seeded::mix;

pub const HEADER_BYTES: usize = 24;
const MAGIC: [u8; 4] = *b"FoLr";

/// The checksum of a record: over its length, sequence number and payload, a word (8
/// bytes, the last one padded with zeros) at a time, so that checking what a kill test
/// wrote costs little beside the writing.
fn checksum(record: &[u8]) -> u64 {
    record[4..16]
        .chunks(8)
        .chain(record[HEADER_BYTES..].chunks(8))
        .fold(0xCBF2_9CE4_8422_2325u64, |h, chunk| {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            (h ^ u64::from_le_bytes(word))
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(29)
        })
}

/// Record `seq` of `len` bytes (module docs).
pub fn record(seq: u64, len: usize) -> Vec<u8> {
    assert!(len >= HEADER_BYTES);
    let mut r = vec![0u8; len];
    for (i, chunk) in r[HEADER_BYTES..].chunks_mut(8).enumerate() {
        let word = mix(seq.wrapping_mul(0x1_0000_0001) ^ i as u64).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    r[..4].copy_from_slice(&MAGIC);
    r[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    r[8..16].copy_from_slice(&seq.to_le_bytes());
    let sum = checksum(&r);
    r[16..24].copy_from_slice(&sum.to_le_bytes());
    r
}

/// The bytes of write `seq` of `len` bytes: record `seq`, or the start of a record of
/// `HEADER_BYTES` for a write shorter than a header.
pub fn record_bytes(seq: u64, len: usize) -> Vec<u8> {
    if len >= HEADER_BYTES {
        return record(seq, len);
    }
    let mut r = record(seq, HEADER_BYTES);
    r.truncate(len);
    r
}

/// The record at the start of `bytes`, if one is there whole and its checksum holds:
/// (sequence number, length).
pub fn parse(bytes: &[u8]) -> Option<(u64, usize)> {
    if bytes.len() < HEADER_BYTES || bytes[..4] != MAGIC {
        return None;
    }
    let len = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    if len < HEADER_BYTES || len > bytes.len() {
        return None;
    }
    let seq = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    let sum = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    (checksum(&bytes[..len]) == sum).then_some((seq, len))
}
