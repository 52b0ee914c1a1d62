//! Property test: random sequences of `read_at` and `get_page` at random offsets and
//! lengths, over files of random sizes (empty, not a multiple of 4 KiB, several MiB),
//! through caches large and small (so eviction runs), on both backends, return exactly
//! the bytes `std::fs` reads from the same file.

mod common;

use std::os::unix::fs::FileExt;

use folio::{BackendKind, Cache};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    ReadAt { offset: u64, len: usize },
    GetPage { offset: u64 },
}

fn op(file_len: u64) -> impl Strategy<Value = Op> {
    // Offsets mostly inside the file, sometimes past its end.
    let offset = 0..file_len + 2 * 4096 + 1;
    prop_oneof![
        4 => (offset.clone(), prop_oneof![0usize..64, 0usize..20_000, 0usize..3 << 20]).prop_map(|(offset, len)| Op::ReadAt { offset, len }),
        1 => offset.prop_map(|offset| Op::GetPage { offset }),
    ]
}

fn case() -> impl Strategy<Value = (u64, Vec<Op>, u64, bool)> {
    let len = prop_oneof![Just(0u64), 1u64..5000, 4096u64..300_000, (1u64..7 << 20)];
    (len, any::<bool>(), any::<bool>()).prop_flat_map(|(len, small_cache, pread)| {
        let capacity = if small_cache { 64 * 4096 } else { 16 << 20 };
        (
            Just(len),
            proptest::collection::vec(op(len), 1..40),
            Just(capacity),
            Just(pread),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn reads_match_std_fs((file_len, ops, capacity, pread) in case()) {
        let dir = common::test_dir();
        let path = dir.path().join("data");
        common::write_pattern_file(&path, 0x5eed, file_len);
        let reference = std::fs::File::open(&path).unwrap();
        let backend = if pread { BackendKind::Pread } else { BackendKind::IoUring };
        let cache = Cache::builder().capacity_bytes(capacity).backend(backend).build().unwrap();
        let file = cache.open(&path).unwrap();
        prop_assert_eq!(file.len(), file_len);
        for op in ops {
            match op {
                Op::ReadAt { offset, len } => {
                    let mut got = vec![0xAA; len];
                    let n = file.read_at(&mut got, offset).unwrap();
                    let mut want = vec![0u8; len];
                    let mut m = 0;
                    while m < len {
                        let k = reference.read_at(&mut want[m..], offset + m as u64).unwrap();
                        if k == 0 { break; }
                        m += k;
                    }
                    prop_assert_eq!(n, m, "length of read_at({}, {})", offset, len);
                    prop_assert!(got[..n] == want[..m], "bytes of read_at({}, {})", offset, len);
                }
                Op::GetPage { offset } => {
                    match file.get_page(offset) {
                        Ok(page) => {
                            prop_assert!(offset < file_len);
                            let start = page.offset_bytes();
                            prop_assert!(start <= offset && offset < start + page.len() as u64);
                            prop_assert_eq!(start % 4096, 0);
                            prop_assert_eq!(&page[..], &common::pattern(0x5eed, start, page.len())[..]);
                            prop_assert!(start + page.len() as u64 <= file_len);
                        }
                        Err(e) => {
                            prop_assert!(offset >= file_len, "get_page({}) failed: {}", offset, e);
                            prop_assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
                        }
                    }
                }
            }
        }
        let stats = cache.stats();
        prop_assert!(stats.cached_bytes <= stats.capacity_bytes);
    }
}
