//! The folio side of `keeper`: the owner role (the hidden `keeper-owner` command, which
//! builds a persistent cache, writes, and waits to be killed) and the parent's measurement
//! of it (start the owner, SIGKILL it once it is ready, time its keeper).
//!
//! The owner says `ready <keeper pid> <dirty pages> <write secs> <segment>` on one line
//! once every write is done and every page is still dirty; the parent then kills it and
//! watches the keeper (its child: the workload is a subreaper) through a pidfd, and the
//! segment's path for its removal.
//!
//! Limits: the parent looks at the segment's path once a millisecond, so the `synced` time
//! is late by up to a millisecond (and the time of a look).

use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Plan, Shape, KEEPER_TIMEOUT};
use crate::measure::RunResult;
use crate::workloads::process::{self, Input, Keeper, Outcome, Role, RoleArgs, RoleCache};
use crate::workloads::Env;

/// The folio side: an owner writes, is killed, and its keeper writes back.
pub(super) fn run_folio(
    env: &Env,
    plan: &Plan,
    cache_bytes: u64,
    generation: u64,
) -> io::Result<RunResult> {
    let args = RoleArgs::new("keeper-owner")
        .value("--dir", env.dir.display())
        .value("--files", plan.files)
        .value("--file-bytes", plan.file_bytes)
        .value("--shape", plan.shape.as_str())
        .value("--generation", generation)
        .value("--cache-bytes", cache_bytes)
        .cache_of(env);
    // An owner that fails before it is ready is killed and reaped as `owner` drops.
    let mut owner = Role::spawn(&args, Input::Closed, None)?;
    let ready = read_ready(&mut owner)?;
    let keeper = Keeper::watch(ready.keeper_pid)?;

    let start = Instant::now();
    owner.kill()?;
    let owner_gone = start.elapsed();
    // The segment's removal (the keeper's last act on it, after every file's fsync) is
    // seen by a look every millisecond; the keeper's exit, after it, by its pidfd.
    let mut segment_gone = None;
    let exited = keeper.wait_exit(start, Duration::from_millis(1), KEEPER_TIMEOUT, |now| {
        if segment_gone.is_none() && !ready.segment.exists() {
            segment_gone = Some(now);
        }
    })?;
    let Some(keeper_gone) = exited else {
        return Err(io::Error::other(format!(
            "keeper: the keeper {} did not finish within {} s (segment {} there: {})",
            ready.keeper_pid,
            KEEPER_TIMEOUT.as_secs(),
            ready.segment.display(),
            ready.segment.exists()
        )));
    };
    let Some(synced) = segment_gone else {
        return Err(io::Error::other(format!(
            "keeper: the keeper exited and left its segment {}: not every dirty page written",
            ready.segment.display()
        )));
    };
    assert!(
        synced <= keeper_gone,
        "the segment goes before the keeper exits"
    );
    let status = keeper.reap().and_then(Outcome::code);
    if let Some(code) = status {
        if code != 0 {
            return Err(io::Error::other(format!(
                "keeper: the keeper exited with status {code} (not every dirty page written)"
            )));
        }
    }
    let mut r = plan.synced_run(synced);
    r.extra.insert(
        "owner_gone_ms".into(),
        json!(owner_gone.as_secs_f64() * 1e3),
    );
    r.extra.insert(
        "keeper_exit_ms".into(),
        json!(keeper_gone.as_secs_f64() * 1e3),
    );
    r.extra.insert("write_secs".into(), json!(ready.write_secs));
    r.extra
        .insert("dirty_pages_at_kill".into(), json!(ready.dirty_pages));
    r.extra.insert("keeper_exit_status".into(), json!(status));
    Ok(r)
}

/// What the owner says once its writes are done.
struct Ready {
    keeper_pid: u32,
    dirty_pages: u64,
    write_secs: f64,
    segment: PathBuf,
}

/// Reads the owner's `ready` line: `ready <keeper pid> <dirty pages> <write secs> <segment>`.
fn read_ready(owner: &mut Role) -> io::Result<Ready> {
    let mut line = String::new();
    owner.read_line(&mut line)?;
    let bad = || {
        io::Error::other(format!(
            "keeper: the owner did not get ready (it said {:?})",
            line.trim()
        ))
    };
    let mut words = line.trim().splitn(5, ' ');
    if words.next() != Some("ready") {
        return Err(bad());
    }
    let mut next = || words.next().ok_or_else(bad);
    Ok(Ready {
        keeper_pid: next()?.parse().map_err(|_| bad())?,
        dirty_pages: next()?.parse().map_err(|_| bad())?,
        write_secs: next()?.parse().map_err(|_| bad())?,
        segment: PathBuf::from(next()?),
    })
}

/// Options of the hidden `keeper-owner` command.
#[derive(clap::Args, Debug, Clone)]
pub struct OwnerArgs {
    #[arg(long)]
    pub dir: PathBuf,
    #[arg(long)]
    pub files: u64,
    #[arg(long)]
    pub file_bytes: u64,
    #[arg(long, value_enum)]
    pub shape: Shape,
    #[arg(long)]
    pub generation: u64,
    #[arg(long)]
    pub cache_bytes: u64,
    #[command(flatten)]
    pub cache: RoleCache,
}

/// The owner (`keeper-owner`): builds the persistent cache, writes, checks that all of it
/// is dirty, says `ready`, and waits to be killed (or dies with its parent).
pub fn owner_main(args: &OwnerArgs) -> io::Result<()> {
    // A parent that dies kills the owner, whose keeper then finishes the files.
    process::die_with_parent();
    let plan = Plan {
        shape: args.shape,
        files: args.files,
        file_bytes: args.file_bytes,
    };
    let cache = args
        .cache
        .apply(folio::Cache::builder())
        .capacity_bytes(args.cache_bytes)
        .dirty_limit_bytes(args.cache_bytes)
        .dirty_background_bytes(args.cache_bytes)
        .dirty_expire(Duration::from_secs(3600))
        .write_behind_bytes(0)
        .persistent(true)
        .build()?;
    let files: Vec<folio::File> = plan
        .paths(&args.dir)
        .iter()
        .map(|path| {
            let mut options = cache.open_options();
            options.write(true);
            if plan.shape == Shape::Seq {
                options.create_new(true);
            }
            options.open(path)
        })
        .collect::<io::Result<_>>()?;
    let t = Instant::now();
    plan.write_all(args.generation, |f, bytes, at| {
        let n = files[f].write_at(bytes, at)?;
        if n != bytes.len() {
            return Err(io::Error::other(format!(
                "folio wrote {n} of {} bytes",
                bytes.len()
            )));
        }
        Ok(())
    })?;
    let write_secs = t.elapsed().as_secs_f64();
    let stats = cache.stats();
    let expected = plan.total_bytes() / folio::PAGE_BYTES as u64;
    if stats.dirty_pages != expected || stats.writeback_bytes != 0 {
        return Err(io::Error::other(format!(
            "keeper-owner: {} pages dirty and {} bytes written back before the kill, not {expected} \
             and 0: not the worst case",
            stats.dirty_pages, stats.writeback_bytes
        )));
    }
    let (Some(segment), Some(keeper)) = (cache.segment_path(), cache.keeper_pid()) else {
        return Err(io::Error::other(
            "keeper-owner: the cache is not persistent",
        ));
    };
    println!(
        "ready {keeper} {} {write_secs} {}",
        stats.dirty_pages,
        segment.display()
    );
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
