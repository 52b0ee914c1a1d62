//! Runs `folio-bench soak` briefly through the real binary and checks its account: a pass,
//! faults of every kind injected, every injected EIO counted by the cache, no wrong byte
//! and no unexplained error. (`soak --seconds 60` is the long run: docs/reliability.md.)

use std::process::Command;

use serde_json::Value;

#[test]
fn a_short_soak_accounts_for_every_byte_and_fault() {
    let dir = tempfile::Builder::new()
        .prefix("folio-soak-test-")
        .tempdir_in("/var/tmp")
        .or_else(|_| tempfile::tempdir())
        .expect("a temporary directory");
    let json = dir.path().join("soak.json");
    for eviction in ["s3fifo", "lru"] {
        let out = Command::new(env!("CARGO_BIN_EXE_folio-bench"))
            .args(["soak", "--seconds", "3", "--threads", "12", "--seed", "7"])
            .args(["--eviction", eviction, "--dir"])
            .arg(dir.path().join("data"))
            .arg("--json")
            .arg(&json)
            .output()
            .expect("the folio-bench binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        eprintln!("{stdout}");
        assert!(out.status.success(), "soak failed ({eviction}):\n{stdout}");
        let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let n = |key: &str| v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"));
        assert_eq!(v["pass"], true);
        assert_eq!(n("wrong_bytes"), 0);
        assert_eq!(n("unexplained_errors"), 0);
        assert!(n("bytes_verified") > 0 && n("operations") > 0);
        assert!(n("eio_injected") > 0 && n("short_reads_injected") > 0 && n("reordered") > 0);
        assert_eq!(n("eio_injected"), n("eio_counted_by_cache"));
        assert!(n("evicted_pages") > 0, "the cache is small enough to evict");
    }
}
