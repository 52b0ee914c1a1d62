//! The allocator role of `pressure` (the hidden `pressure-alloc` command): the other
//! process, which takes most of the machine's memory for a moment.
//!
//! Limits: one thread; it touches one byte per 4 KiB page (a transparent huge page is
//! taken whole by its first touch).

use std::io;

use super::lines::AllocLine;
use crate::workloads::process::{self, mono_secs, Input, Role, RoleArgs};

/// Options of the hidden `pressure-alloc` command.
#[derive(clap::Args, Debug, Clone)]
pub struct AllocArgs {
    #[arg(long)]
    pub bytes: u64,
    #[arg(long)]
    pub chunk_bytes: u64,
    #[arg(long, default_value_t = 0.0)]
    pub hold_secs: f64,
}

/// The allocator: allocates `bytes` in chunks, writes a byte into every 4 KiB page of each
/// (the first touch is what takes the memory), prints its progress after each chunk,
/// holds everything for `hold_secs`, exits.
pub fn alloc_main(args: &AllocArgs) -> io::Result<()> {
    let started = mono_secs();
    let chunk = args.chunk_bytes.max(4096) as usize;
    let mut held: Vec<Vec<u8>> = Vec::new();
    let mut touched = 0u64;
    while touched < args.bytes {
        let n = chunk.min((args.bytes - touched) as usize);
        // Zeroed allocations this large are fresh mappings: nothing is resident until
        // written.
        let mut block = vec![0u8; n];
        for at in (0..n).step_by(4096) {
            block[at] = 1;
        }
        // The writes must happen: nothing reads them back.
        std::hint::black_box(&mut block);
        held.push(block);
        touched += n as u64;
        process::report_line(&AllocLine::Progress {
            t: mono_secs(),
            touched_bytes: touched,
        });
    }
    let done = mono_secs();
    process::report_line(&AllocLine::Done {
        t: done,
        touch_secs: done - started,
    });
    std::thread::sleep(crate::workloads::secs(args.hold_secs));
    drop(std::hint::black_box(held));
    Ok(())
}

/// Bytes the holder allocates and touches at a time.
const HOLD_CHUNK_BYTES: u64 = 64 << 20;

/// Another process that holds `bytes` of the machine's memory (the `pressure-alloc` role,
/// touched through and held) until the returned role is dropped or killed: the machine
/// under memory pressure for a measurement (`db-bench tenants --hold-mib`). Returns once
/// every byte is touched.
///
/// Context: the workload's thread; blocks while the role allocates.
/// Errors: the role's start; `Other` if it ends before it holds everything (the OOM
/// killer, among others).
pub(crate) fn hold_memory(bytes: u64) -> io::Result<Role> {
    let args = RoleArgs::new("pressure-alloc")
        .value("--bytes", bytes)
        .value("--chunk-bytes", HOLD_CHUNK_BYTES)
        // Until it is killed: a day.
        .value("--hold-secs", 86_400);
    let mut role = Role::spawn(&args, Input::Closed, None)?;
    let mut line = String::new();
    loop {
        line.clear();
        if role.read_line(&mut line)? == 0 {
            return Err(io::Error::other(format!(
                "{} ended before it held {bytes} bytes",
                role.what()
            )));
        }
        if let Ok(AllocLine::Done { .. }) = serde_json::from_str(line.trim()) {
            return Ok(role);
        }
    }
}
