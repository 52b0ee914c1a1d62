//! The instruction counts of `miss-cost`: this binary's hidden `miss-cost-probe` role (one
//! system's round of reads) run under `valgrind --tool=callgrind`, collecting only inside
//! the functions that do a miss or a hit (`toggles`), and the totals read back from
//! callgrind's output (`callgrind_total`).
//!
//! Limits: the toggles name `miss_cost::read_miss` and `miss_cost::read_hit` by their
//! symbols, so those two functions must stay in `miss_cost/mod.rs` (a move changes their
//! path and callgrind would count nothing); user-space instructions only.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{pass, Args, Plan, SYSTEMS};
use crate::kernel;
use crate::workloads::{mib, Env, Scale, System};

pub(super) fn valgrind_on_path() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The seed of the probe's plan (the parent builds the same plan to know its reads).
const PROBE_SEED: u64 = 0xca11;

/// The hidden `miss-cost-probe`: one system's round, for callgrind to count.
#[derive(clap::Args, Debug, Clone)]
pub struct ProbeArgs {
    #[arg(long)]
    pub system: String,
    #[arg(long)]
    pub file: PathBuf,
    #[arg(long)]
    pub misses: u64,
    #[arg(long)]
    pub hits: u64,
    #[arg(long)]
    pub full_cache_mib: u64,
    #[arg(long)]
    pub dir: PathBuf,
}

pub fn probe_main(args: &ProbeArgs) -> io::Result<()> {
    let system = System::named(&args.system)
        .ok_or_else(|| io::Error::other(format!("no system {}", args.system)))?;
    let env = Env::new(
        args.dir.clone(),
        1,
        Scale::Quick,
        kernel::WarmMethod::Read,
        // A lone miss is read on the caller's thread by every backend (`submit_waited`);
        // valgrind does not follow io_uring, so the probe's cache reads through the pread
        // pool.
        folio::BackendKind::Pread,
    );
    let file_bytes = File::open(&args.file)?.metadata()?.len();
    let plan = Plan::new(
        &args.file,
        file_bytes,
        args.misses,
        args.hits,
        mib(args.full_cache_mib),
        PROBE_SEED,
    );
    // Not made cold: callgrind counts user-space instructions, the same for a kernel
    // miss and hit, and folio and direct read with O_DIRECT.
    let p = pass(&env, system, &plan)?;
    println!("verified {} backend {:?}", p.bytes_verified, p.backend);
    Ok(())
}

/// Instructions per miss and per hit of each system. Two callgrind runs of the probe per
/// system, collecting inside the reads only (`toggles`): one with misses alone (its count
/// over the misses is a miss's), one with the hits after them (what it counts beyond the
/// first, over the hits' reads, is a hit's).
pub(super) fn count_instructions(
    env: &Env,
    args: &Args,
    path: &Path,
) -> io::Result<Vec<(System, &'static str, f64)>> {
    // Fewer reads than the timed rounds: callgrind runs ~50x slower, and the count per
    // read is what is wanted. The probe's plan, as the probe builds it: a small file
    // holds fewer misses than asked.
    let (misses, hits) = (2000u64, 20_000u64);
    let full_cache_bytes = mib(args.full_cache_mib.unwrap_or(64));
    let file_bytes = std::fs::metadata(path)?.len();
    let misses_done = Plan::new(path, file_bytes, misses, 0, full_cache_bytes, PROBE_SEED)
        .misses
        .len() as u64;
    let out_dir = env.dir.join("callgrind");
    std::fs::create_dir_all(&out_dir)?;
    let mut counts = Vec::new();
    let bar = env.bar("miss-cost callgrind", (SYSTEMS.len() * 2) as u64);
    for &system in &SYSTEMS {
        let count = |hits: u64| -> io::Result<u64> {
            bar.inc(1);
            let out = out_dir.join(format!("{system}-{hits}-hits.out"));
            let mut cmd = Command::new("valgrind");
            cmd.arg("--tool=callgrind")
                .arg(format!("--callgrind-out-file={}", out.display()))
                .args(toggles(system).map(|f| format!("--toggle-collect={f}")))
                .arg(std::env::current_exe()?)
                .arg("miss-cost-probe")
                .args(["--system", system.as_str()])
                .arg("--file")
                .arg(path)
                .args(["--misses", &misses.to_string(), "--hits", &hits.to_string()])
                .args([
                    "--full-cache-mib",
                    &args.full_cache_mib.unwrap_or(64).to_string(),
                ])
                .arg("--dir")
                .arg(&env.dir);
            let output = cmd.output()?;
            if !output.status.success() {
                return Err(io::Error::other(format!(
                    "callgrind of {system} ({hits} hits) failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                )));
            }
            callgrind_total(&std::fs::read_to_string(&out)?)
                .ok_or_else(|| io::Error::other(format!("no totals in {}", out.display())))
        };
        let alone = count(0)?;
        counts.push((system, "miss", alone as f64 / misses_done.max(1) as f64));
        if system != System::Direct {
            // The timed pass and the verifying one: two reads per hit.
            let both = count(hits)?;
            counts.push((
                system,
                "hit",
                both.saturating_sub(alone) as f64 / (2 * hits) as f64,
            ));
        }
    }
    bar.finish_and_clear();
    Ok(counts)
}

/// The functions inside which callgrind counts `system`'s reads: folio's private read
/// (`File::read_private`: all of `File::read_at` but its inlined first lines, a load of
/// the handle's domain and a test; folio-full's fill reads by `get_page`, not counted),
/// and for the others this module's `read_miss` and `read_hit` (the `pread` wrapper, with
/// a few dozen instructions of this harness).
fn toggles(system: System) -> impl Iterator<Item = &'static str> {
    let names: &[&'static str] = match system {
        System::Folio | System::FolioFull => &["folio::file::File::read_private"],
        _ => &["*miss_cost::read_miss*", "*miss_cost::read_hit*"],
    };
    names.iter().copied()
}

/// The instructions a callgrind output file counted (`totals:` or `summary:`).
pub fn callgrind_total(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l
            .strip_prefix("totals:")
            .or_else(|| l.strip_prefix("summary:"))?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callgrind_totals_are_parsed() {
        let out = "version: 1\ncreator: callgrind\nevents: Ir\nfn=x\n1 5\nsummary: 123456\ntotals: 123456\n";
        assert_eq!(callgrind_total(out), Some(123456));
        assert_eq!(callgrind_total("events: Ir\n"), None);
    }
}
