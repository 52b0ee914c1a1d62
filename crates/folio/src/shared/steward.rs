//! The domain's steward (issue 45 step 2, docs/sharing.md "The steward"): the one process
//! that answers attaches, watches every attached process through its pidfd, and, when one
//! dies, marks its slot dead, sweeps what it held (`FrameStack::sweep`, then
//! `SharedQueue::sweep`: the eviction queue's lock, the file indexes' locks it held, its
//! pins, then `SharedBuddy::sweep` of its leases; then `FileTable::sweep`, dropping its
//! opens: each takes its lock over if the dead process held it) and frees the slot.
//!
//! Life:
//! 1. **Started** by an attach that finds no steward (attach.rs: `spawn`): `fork`, and
//!    `fork` again so that the steward is nobody's zombie, as `keeper::spawn` does; the
//!    steward leaves the session (`setsid`), keeps no descriptor of its starter's (its
//!    pipes, sockets, locks), and reads and writes `/dev/null` for its standard streams.
//! 2. **Elected**: it takes `<name>.v12.steward` (domain.rs, "Files") with
//!    `flock(LOCK_EX | LOCK_NB)`. Losing means another steward runs (or starts): it
//!    says so to its starter and exits. The kernel releases the lock at the winner's
//!    death, whatever kills it, so the next one to try wins, and sees every store of the
//!    dead one.
//! 3. **Takes the domain**: makes and formats the region if it is new (domain.rs), names
//!    itself in the header (pid and start time: every attached process polls its pidfd),
//!    tells its starter it won, then **rebuilds its view** (`rebuild`): every LIVE slot
//!    whose record is complete and whose process is alive (pid *and* start time: a reused
//!    pid is not it) is watched through a new pidfd; every other LIVE slot (its process
//!    gone, or its record incomplete: an attach the old steward never answered) is marked
//!    dead (a process whose life cannot be told, `/proc` or descriptors failing, is taken
//!    for alive and left unwatched); every dead slot (the old steward died mid-sweep) is swept and freed.
//! 4. **Serves** (`serve`): polls the attach socket (`<name>.v12.sock`, bound after the
//!    census and before the sweeps of step 3: an attach that connects waits in the
//!    backlog and is answered by a steward that knows every live process; it waits for
//!    that steward, named by the connection, not for the clock: attach.rs, "Patience"),
//!    each watched pidfd and each attached process's connection. An attach: the peer's credentials
//!    (`SO_PEERCRED`: the same uid, else refused), its pidfd taken while it is connected
//!    and checked against the start time it sent (`ProcessId::open`), a slot CAS
//!    (`SlotTable::attach`), its record, the answer. A death (the pidfd readable): LIVE(g)
//!    -> DEAD(g) (`mark_dead`, a release store after the kernel's report), the sweep,
//!    DEAD(g) -> FREE(g). A closed connection of a slot no longer LIVE in its generation
//!    (a clean detach) ends the watch; a process found again by `rebuild` has no
//!    connection to this steward, and its detach is seen by a look at its slot every
//!    `DETACH_CHECK` (while there is such a process).
//!    While a member is attached, between its polls it **populates the data area ahead**
//!    of the allocator (populate.rs: one 2 MiB chunk per turn, polling every
//!    `POPULATE_POLL` while the allocator moves, backing off to 640 ms while it does
//!    not, until the area is whole: `Populator::poll_after`), so that a member's miss
//!    finds its frame's page in the region file, and moves the quota (below). Alone, it
//!    gives memory back (below).
//! 5. **Leaves** when nobody has been attached for `linger` (`DomainConfig::linger`):
//!    it removes the socket, frees its own slot and **removes the region** (before it
//!    lets go of the election: the next steward makes a fresh one); the next attach
//!    starts a new steward on a new domain. It leaves too, at once, when the region's
//!    file is removed under it (its link count 0).
//!
//! **Alone** (every slot but its own FREE, no member watched): the domain's memory is
//! nobody's in use, and is given back as a kept segment's steward gives its segment's
//! (keeper/kept.rs, docs/persistence.md "Kept memory"; docs/sharing.md "The domain's
//! memory and lifetime"):
//! - at once, the free frames whose pages the file holds (the populated lead: nobody
//!   allocates while it is alone; `give_back` of 0 bytes);
//! - every tick (50 ms to 2 s: `give_back::next_tick`, from the memory figures), under memory
//!   pressure (`give_back::want_bytes`: the room below two reserves, or stalls with it below
//!   three), enough to bring the room back to three reserves: the coldest cached frames
//!   reclaimed from the eviction queue (out of their index, freed) and every free block
//!   punched (`MADV_REMOVE`); the populator is told (`Populator::given_back`), so that
//!   those chunks are not populated again at once. Every frame reclaim takes is clean
//!   (a writer's frames newer than the disk are HELD, which reclaim skips: queue.rs,
//!   "Writes"): nothing is written first;
//! - after `linger` alone, it removes the region (step 5).
//!
//! **The quota** (docs/sharing.md, "The quota that follows the machine"): with members
//! attached, the domain's memory follows the machine as one cache, as a private cache's
//! capacity does (DESIGN.md §10; capacity/follow.rs). The header's quota word
//! (`Domain::quota`: how many frames the eviction queue may hold) is the capacity; the
//! steward alone moves it, at each memory tick (`Memory::follow`, the alone tick's
//! cadence: 50 ms when the room is low, up to 2 s when plenty), by `follow::decide` with
//! what the region file holds as the resident bytes, the queue within a reserve's
//! sixteenth of the quota as full, and the refaults the members' misses count in the
//! header (`Domain::note_refaults`) as the refaults: shrink under pressure stalls or
//! below the reserve, lower to what the machine affords, grow only into room and only
//! when full and refaulting; between `QUOTA_FRAMES_MIN` and every frame. A new domain's
//! quota is every frame; the first tick lowers it to what the machine affords.
//! - A member's miss reads the quota (one load) and, if the queue would hold more than it
//!   with the frames it leases, reclaims first (read.rs, `lease`), as it does at a full
//!   allocator: the queue stays at the quota, the frames it frees are leased again.
//! - When the quota falls (a shrink or a lower), the steward reclaims the coldest frames
//!   down to it (`to_quota`: `SharedQueue::reclaim`, a member's protocol step, in batches
//!   of `QUOTA_RECLAIM_BATCH`), then gives the memory of every listed free frame back,
//!   **leasing** each while it punches it (`SharedBuddy::give_back_listed`, G1-G3): no
//!   member can lease, fill or pin a frame leased to the steward, so no page is punched
//!   under a member's read (a frame in a member's magazine is that member's, not
//!   listed, and not punched; the virgin frames past the frontier are not taken, and
//!   a member may FRESH them meanwhile). A steward that dies holding them leaves them to
//!   the next steward's sweep of its slot (a lease like any member's).
//! - The populator keeps no lead while the queue is within a chunk of the quota: the
//!   members' misses reclaim first there and lease the frames reclaim freed.
//!
//! Why it stays rather than removing the region at once: a warm restart (the next run of
//! a tool, a service restarted) finds its pages, as the kernel's page cache keeps a
//! closed file's; the memory is given back under pressure meanwhile. Nobody can attach
//! while it gives back: it answers attaches only between its turns.
//!
//! **The keeper's wait** (docs/sharing.md "Writes seen across processes", "Death"): a
//! dead process whose record names a keeper (record.rs: a persistent cache's, which writes
//! back what the dead one left dirty) is swept of everything but its writer's marks (its
//! HELD frames: the pages it wrote and returned that may not be on disk yet), the records
//! it wrote left current (`ORPHANED`, files.rs), and its slot stays DEAD (a mark names a
//! slot). The keeper's pidfd joins the poll; at its end, whatever ended it, the marks are
//! cleared (`SharedQueue::release_marks`), the records made `WRITTEN` and the slot freed
//! (`free`). Nothing else waits: the steward serves attaches, deaths and the populator
//! meanwhile. A keeper killed before it was done leaves its writes to the next recovery
//! (a persistent cache's build in its directory: docs/persistence.md); until then a page
//! of it reclaimed reads the disk's older bytes. A steward killed meanwhile leaves the
//! slot DEAD: the next one's census sweeps it again, which finds the keeper again.
//!
//! A steward that waits for a lock during a sweep checks every watched pidfd as it waits
//! (`Run::wait` here): a process that died meanwhile (the holder, or one whose lock the
//! holder waits for: the read path nests locks) is marked dead there, so that its lock
//! can be taken over (else the steward would wait for a death only it can mark). For the
//! same reason it parks (lock.rs, "Waiting") for at most `PARK_TIMEOUT` at a time, and
//! looks at the pidfds again after each park. Every `mark_dead` wakes
//! the waiters parked on the dead process's locks (slot.rs, park words).
//!
//! **The trace** (test builds only): each steward appends a line per event (its election,
//! its census, each attach it answers, each death it marks, each bury and free, its exit
//! or its panic) to `<name>.trace` in the domain's directory, one `write` per line
//! (`O_APPEND`: the lines of successive stewards do not mix), for a failing kill test to
//! print what each steward did (`Trace`). The steward holds the file open, under a shared
//! `flock`, until it exits: a test's directory waits for that lock before it is removed
//! (`tests::DomainHome`). Other builds write nothing.
//!
//! Protection: the header's steward fields and the records by the election (one steward
//! at a time); the slots and the stack by their protocols. The steward reads every word of
//! the region as a process's untrusted input: the stack's views are bounds-checked
//! (a bad word panics the steward, which exits; the next one recovers the same way).
//!
//! Limits: a dead writer's keeper that never ends (stopped) keeps that writer's slot DEAD
//! and its frames HELD (the steward waits on its pidfd, without a bound: a keeper's
//! writeback is bounded by its segment's dirty pages). One steward per domain at a time,
//! on one machine (the `flock`). An attach
//! whose request does not arrive within a second is dropped (the steward waits for it in
//! line). A process whose attach answer arrived after it gave up (a steward stopped for a
//! second) leaves a slot it does not know it holds until it exits. No seccomp filter and
//! no privilege drop yet (the keeper's `drop_privileges` is its own). The steward does not
//! write back (a domain's frames are clean); with members attached it gives back only
//! when the quota falls, and the quota counts queued frames only (not the index's node
//! frames, the members' magazines, the lead, or the frames' words); the quota is one
//! for the domain (no share per member yet: docs/sharing.md). A killed steward leaves the region until the next
//! attach (a new steward takes it over, warm) or `rm`: nobody gives its memory back
//! meanwhile. A slot LIVE but unwatched (its process's life could not be told) keeps the
//! steward from being alone, and so from leaving, until it is FREE.

use std::cell::RefCell;
use std::io;
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use super::attach::{DomainConfig, Request, ANSWER_ATTACHED, ANSWER_FULL};
use super::domain::{Domain, DomainFiles, Pidfd, FRAME_BYTES};
use super::files::DeadWrites;
use super::futex::Parked;
use super::populate::{Populator, Stepped, CHUNK_FRAMES};
use super::queue::Shares;
use super::record;
use super::slot::SlotState;
use super::terms::Park;
use super::terms::Unkillable;
use super::{Died, Holder, ProcessId, Run, SlotIndex, Step};
use crate::capacity::follow::{self, Decision, Reading};
use crate::capacity::give_back;
use crate::capacity::machine::{MemoryFacts, MemorySource};
use crate::segment::{DiskDir, SegmentDir};
use std::fs::File as StdFile;
use std::os::unix::fs::MetadataExt;

/// The steward's name (its `comm`).
const STEWARD_NAME: &std::ffi::CStr = c"folio-steward";

/// The descriptor of the pipe to the starter, in the steward.
const READY_FD: RawFd = 3;

/// What the steward tells its starter (one byte on the pipe).
pub(crate) const WON: u8 = b'W';
pub(crate) const LOST: u8 = b'L';

/// How often the steward looks for detaches it cannot see on a connection.
const DETACH_CHECK: Duration = Duration::from_millis(50);

/// The longest park of a steward waiting for a lock (module docs): how late it finds a
/// holder that died while it was parked (nobody else would mark it dead).
const PARK_TIMEOUT: Duration = Duration::from_millis(10);

/// How long the steward waits for an accepted connection's request.
const REQUEST_WAIT: Duration = Duration::from_secs(1);

/// The steward process's body, after its starter's second `fork` (module docs). Never
/// returns.
///
/// Context: a freshly forked child with one thread; `ready` is the write end of its
/// starter's pipe.
pub(crate) fn main(config: &DomainConfig, ready: RawFd) -> ! {
    let isolated = isolate(ready);
    // After `isolate`, which closes every descriptor but the pipe: the trace's is held
    // until the `_exit` (`Trace`).
    let trace = Trace::of(config);
    let code = match isolated {
        Ok(()) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(config, &trace)))
            .unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                trace.line(format_args!("panicked: {what}"));
                70
            }),
        Err(_) => 2,
    };
    trace.line(format_args!("exits: {code}"));
    // SAFETY: _exit ends the steward at once, running no destructor or atexit handler of
    // its starter's.
    unsafe { libc::_exit(code) }
}

/// Leaves the starter's session and keeps only `ready` (as `READY_FD`); the standard
/// streams read and write `/dev/null`.
fn isolate(ready: RawFd) -> io::Result<()> {
    // SAFETY: plain system calls on descriptors this process holds.
    unsafe {
        libc::setsid();
        if libc::dup2(ready, READY_FD) < 0 {
            return Err(io::Error::last_os_error());
        }
        libc::syscall(libc::SYS_close_range, READY_FD + 1, u32::MAX, 0);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null >= 0 {
            for std_fd in 0..3 {
                libc::dup2(null, std_fd);
            }
            libc::close(null);
        }
        libc::fcntl(READY_FD, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
        libc::prctl(libc::PR_SET_NAME, STEWARD_NAME.as_ptr(), 0, 0, 0);
    }
    Ok(())
}

fn tell_starter(byte: u8) {
    // SAFETY: a one-byte write to our pipe, then its close (the starter reads one byte).
    unsafe {
        libc::write(READY_FD, std::ptr::from_ref(&byte).cast(), 1);
        libc::close(READY_FD);
    }
}

/// Steps 2 to 5 (module docs). Returns the exit code.
fn run(config: &DomainConfig, trace: &Trace) -> i32 {
    let Ok(dir) = SegmentDir::open(&config.dir, DiskDir::Refused) else {
        return 3;
    };
    let Ok(files) = DomainFiles::of(&config.name) else {
        return 3;
    };
    // Step 2: the election. The lock lives as long as this process (its descriptor is
    // never closed before the exit).
    let Ok(election) = dir.open_file(&files.election, libc::O_RDWR | libc::O_CREAT, 0o600) else {
        return 3;
    };
    // SAFETY: flock on our descriptor.
    if unsafe { libc::flock(election.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        tell_starter(LOST);
        return 0;
    }
    trace.line(format_args!("elected"));
    // Step 3.
    let Ok((domain, _made)) = super::domain::Domain::create(&dir, &files, config.geometry) else {
        return 4;
    };
    let Ok(me) = ProcessId::me() else {
        return 4;
    };
    domain.set_steward(me);
    tell_starter(WON);
    let Some(steward) = Steward::take(&domain, me, trace) else {
        trace.line(format_args!("no slot for itself"));
        return 5;
    };
    // Step 4's socket, bound before the rebuild: an attach waits in its backlog, for the
    // steward its connection names (attach.rs, "Patience"), rather than starting
    // candidates that lose.
    let Ok(listener) = listen(&dir, &files) else {
        return 6;
    };
    steward.rebuild();
    // The region's file: its link count (removed under us: we leave) and its allocated
    // size (what we hold: `Memory::turn`).
    let Ok(region) = dir.open_file(&files.region, libc::O_RDONLY, 0) else {
        return 4;
    };
    let left = steward.serve(&listener, config, &region);
    trace.line(format_args!("leaves: {left:?}"));
    // Step 5: no new attach reaches us once the socket is gone; a process that connected
    // before sees its connection end and starts the next steward, which waits for the
    // election until we have removed the region: it makes a fresh one.
    let _ = dir.unlink(&files.socket);
    domain.slots().detach(steward.me);
    if left == Left::Idle {
        let _ = dir.unlink_if_same(&files.region, &region);
    }
    drop(election);
    0
}

/// Why the steward leaves (step 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Left {
    /// Nobody attached for its linger: it removes the region.
    Idle,
    /// The region's file was removed (its link count 0: `folio-stat`, a test's directory
    /// removed): there is nothing to keep.
    Unlinked,
}

/// Alone, how often the steward checks that nobody holds a slot it does not watch
/// (a process a census could not tell alive or dead: steward.rs, step 3).
const UNWATCHED_CHECK: Duration = Duration::from_secs(1);

/// The steward's reading of the machine's memory: alone (module docs, "Alone"), a kept
/// segment's steward's policy (capacity/give_back.rs: `want_bytes`, `next_tick`) without
/// its bound; with members attached, the quota's (module docs, "The quota":
/// capacity/follow.rs's `decide`, the private cache's policy), at the same ticks.
struct Memory {
    source: MemorySource,
    /// The last reading's instant and its stalled microseconds.
    stalls_before: (Instant, Option<u64>),
    /// When to read the figures next.
    next_read: Instant,
    /// The domain's refaults at the last reading (`Domain::refaults`).
    refaults_before: u64,
    /// The last shrink for stalls (at most one per `follow::STALL_SHRINK_EVERY`).
    last_stall_shrink: Option<Instant>,
    /// The give-back's leased frames (`SharedBuddy::give_back_listed`): room kept.
    leased: Vec<super::stack::Frame>,
}

/// The smallest quota: one 2 MiB chunk (or the domain, if smaller). Below it, the members'
/// misses would reclaim their own readahead (a window is up to 128 pages a member).
pub(crate) const QUOTA_FRAMES_MIN: u32 = 512;

/// The most frames one reclaim of the steward's takes at a time (one hold of the
/// queue's lock): the members' misses wait for it at most that long (about 1 ms).
const QUOTA_RECLAIM_BATCH: u32 = 256;

/// Whether the steward gives the memory of the free frames back after it reclaimed the
/// queue down to the quota (`Steward::to_quota`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FreeFrames {
    /// The quota fell: every listed free frame punched.
    GiveBack,
    /// Kept for the members' next misses.
    Keep,
}

impl Memory {
    fn new(config: &DomainConfig) -> Memory {
        let source = config
            .memory_files
            .clone()
            .map_or_else(MemorySource::this_process, MemorySource::with_proc_root);
        Memory {
            stalls_before: (Instant::now(), source.read().pressure_some_total_us),
            source,
            next_read: Instant::now(),
            refaults_before: 0,
            last_stall_shrink: None,
            leased: Vec::new(),
        }
    }

    /// The figures and the share of the time since the last reading in which some task
    /// stalled for memory (0 within `STALL_SHRINK_EVERY` of a stall shrink).
    fn read(&mut self, now: Instant) -> (MemoryFacts, f64) {
        let facts = self.source.read();
        let stalls_now = (now, facts.pressure_some_total_us);
        let cooling = self
            .last_stall_shrink
            .is_some_and(|t| t.elapsed() < follow::STALL_SHRINK_EVERY);
        let stall_share = match (self.stalls_before.1, stalls_now.1) {
            (Some(before), Some(after)) if !cooling => {
                let us = (stalls_now.0 - self.stalls_before.0).as_micros().max(1) as f64;
                after.saturating_sub(before) as f64 / us
            }
            _ => 0.0,
        };
        self.stalls_before = stalls_now;
        (facts, stall_share)
    }

    /// If a reading is due: reads the figures and, under memory pressure, gives back
    /// what the kept segment's steward would (`Steward::give_back`). Returns the time to
    /// the next reading (50 ms to 2 s: `give_back::next_tick`).
    ///
    /// Context: the steward, alone in its domain; `region` is the region's file.
    fn turn(
        &mut self,
        steward: &Steward<'_>,
        populator: &mut Populator,
        region: &StdFile,
    ) -> Duration {
        let now = Instant::now();
        if now < self.next_read {
            return self.next_read - now;
        }
        let (facts, stall_share) = self.read(now);
        let own = region.metadata().map_or(0, |m| m.blocks() * 512);
        let want = give_back::want_bytes(&facts, stall_share, own, || (0, u64::MAX));
        if want > 0 {
            steward.give_back(want, populator);
        }
        let tick = give_back::next_tick(&facts);
        self.next_read = Instant::now() + tick;
        tick
    }

    /// With members attached (module docs, "The quota"): if a reading is due, moves the
    /// quota by `follow::decide` (the domain's memory as the private cache's capacity:
    /// what the region file holds is resident, the quota the capacity, the members'
    /// refaults the refaults), then reclaims the queue down to it, and, when it fell,
    /// gives the free frames' memory back. Returns the time to the next reading
    /// (`give_back::next_tick`: 50 ms when the room is low, up to 2 s when plenty).
    ///
    /// Context: the steward, members attached; `region` is the region's file.
    fn follow(
        &mut self,
        steward: &Steward<'_>,
        populator: &mut Populator,
        region: &StdFile,
    ) -> Duration {
        let now = Instant::now();
        if now < self.next_read {
            return self.next_read - now;
        }
        let (facts, stall_share) = self.read(now);
        let domain = steward.domain;
        let frames = domain.geometry().frames;
        let quota = domain.quota();
        let count = domain.queue().count();
        let refaults = domain.refaults();
        let frame_bytes = FRAME_BYTES as u64;
        let reading = Reading {
            facts,
            resident_bytes: region.metadata().map_or(0, |m| m.blocks() * 512),
            capacity_bytes: u64::from(quota) * frame_bytes,
            full: u64::from(quota.saturating_sub(count)) * frame_bytes
                < follow::reserve_bytes(facts.limit_bytes) / 16,
            refaulted: refaults > self.refaults_before,
            stall_share,
        };
        self.refaults_before = refaults;
        let min_bytes = u64::from(QUOTA_FRAMES_MIN.min(frames)) * frame_bytes;
        let max_bytes = u64::from(frames) * frame_bytes;
        let decision = follow::decide(&reading, min_bytes, max_bytes);
        let free_frames = match decision {
            Decision::Keep => FreeFrames::Keep,
            Decision::Shrink(to) | Decision::Lower(to) => {
                if matches!(decision, Decision::Shrink(_))
                    && stall_share > follow::STALL_SHARE_SHRINK
                {
                    self.last_stall_shrink = Some(now);
                }
                domain.set_quota((to / frame_bytes) as u32);
                FreeFrames::GiveBack
            }
            Decision::Grow(to) => {
                domain.set_quota((to / frame_bytes) as u32);
                FreeFrames::Keep
            }
        };
        if decision != Decision::Keep {
            steward.trace.line(format_args!(
                "quota {quota} -> {} frames ({decision:?}; {count} cached)",
                domain.quota()
            ));
        }
        steward.to_quota(free_frames, populator, &mut self.leased);
        let tick = give_back::next_tick(&facts);
        self.next_read = Instant::now() + tick;
        tick
    }
}

/// The earlier of a `poll` timeout (-1: none) and `then`.
fn earliest(timeout_ms: libc::c_int, then: Duration) -> libc::c_int {
    let then_ms = then.as_millis() as libc::c_int;
    if timeout_ms < 0 {
        then_ms
    } else {
        timeout_ms.min(then_ms)
    }
}

/// Binds and listens on the attach socket (`SOCK_SEQPACKET`), replacing a dead steward's.
fn listen(dir: &SegmentDir, files: &DomainFiles) -> io::Result<OwnedFd> {
    dir.unlink(&files.socket)?;
    let address = socket_address(&dir.join(&files.socket))?;
    // SAFETY: socket, bind and listen on a new descriptor we own; results checked.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = OwnedFd::from_raw_fd(fd);
        if libc::bind(
            fd.as_raw_fd(),
            std::ptr::from_ref(&address).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        ) != 0
            || libc::listen(fd.as_raw_fd(), 64) != 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(fd)
    }
}

/// The `sockaddr_un` of `path`.
///
/// Errors: `InvalidInput` for a path longer than `sun_path` holds.
pub(crate) fn socket_address(path: &std::path::Path) -> io::Result<libc::sockaddr_un> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= address.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "folio: the domain socket's path {} is longer than {} bytes",
                path.display(),
                address.sun_path.len() - 1
            ),
        ));
    }
    for (to, from) in address.sun_path.iter_mut().zip(bytes) {
        *to = *from as libc::c_char;
    }
    Ok(address)
}

/// A dead writer's keeper the steward waits for before it clears the dead one's marks
/// and frees its slot (`Steward::bury`, module docs "The keeper's wait").
#[derive(Debug)]
struct Keeping {
    dead: Holder,
    keeper: Pidfd,
}

/// A process the steward watches.
#[derive(Debug)]
struct Watch {
    holder: Holder,
    pidfd: Pidfd,
    /// Its attach connection, while it is open.
    conn: Option<OwnedFd>,
}

/// The steward's state (module docs).
struct Steward<'d> {
    domain: &'d Domain,
    trace: &'d Trace,
    me: Holder,
    watches: RefCell<Vec<Watch>>,
    /// Slots marked dead, to sweep and free.
    dead: RefCell<Vec<Holder>>,
    /// Slots swept but for their marks, waiting for their keeper's end.
    keeping: RefCell<Vec<Keeping>>,
    /// Parks that timed out in a row on one holder's lock (`Run::parked`'s trace).
    timed_out_parks: std::cell::Cell<(Holder, u32)>,
}

impl<'d> Steward<'d> {
    /// Takes a slot of the domain for the steward itself (its sweeps take locks as it),
    /// with its record. First marks dead every LIVE slot whose process is gone (they
    /// may fill the table: `rebuild` sweeps them).
    fn take(domain: &'d Domain, me: ProcessId, trace: &'d Trace) -> Option<Steward<'d>> {
        let steward = Steward {
            domain,
            trace,
            me: Holder {
                slot: SlotIndex(0),
                generation: 0,
            },
            watches: RefCell::new(Vec::new()),
            dead: RefCell::new(Vec::new()),
            keeping: RefCell::new(Vec::new()),
            timed_out_parks: std::cell::Cell::new((
                Holder {
                    slot: SlotIndex(0),
                    generation: 0,
                },
                0,
            )),
        };
        steward.find_processes();
        let holder = record::admit(
            &domain.slots(),
            &domain.records(),
            me,
            None,
            &Unkillable,
            |_| {},
        )
        .expect("Unkillable never dies")?;
        trace.line(format_args!("took {holder:?}"));
        Some(Steward {
            me: holder,
            ..steward
        })
    }

    /// Step 3's first half (module docs): the census of the slots (`record::find`):
    /// every LIVE slot whose process is alive watched, every other one marked dead and,
    /// with every DEAD one, queued for its sweep.
    fn find_processes(&self) {
        let (slots, records) = (self.domain.slots(), self.domain.records());
        let dead = record::find(&slots, &records, |holder, id| match id.find() {
            Ok(Some(pidfd)) => {
                self.watches.borrow_mut().push(Watch {
                    holder,
                    pidfd,
                    conn: None,
                });
                true
            }
            // Gone: the kernel said so (no such process, another start time, or the pidfd
            // polled readable).
            Ok(None) => false,
            // Could not tell: taken for alive (never sweep a live process's leases), but
            // unwatched: its death is found by the next steward's census.
            Err(e) => {
                self.trace.line(format_args!(
                    "census: cannot tell whether pid {} of {holder:?} lives: {e}",
                    id.pid
                ));
                true
            }
        });
        let watched: Vec<Holder> = self.watches.borrow().iter().map(|w| w.holder).collect();
        self.trace
            .line(format_args!("census: watches {watched:?}, sweeps {dead:?}"));
        self.dead.borrow_mut().extend(dead);
    }

    /// Step 3's second half: sweeps every slot `find_processes` found dead.
    fn rebuild(&self) {
        self.bury_the_dead();
    }

    fn bury_the_dead(&self) {
        loop {
            let next = self.dead.borrow_mut().pop();
            let Some(dead) = next else {
                return;
            };
            self.bury(dead);
        }
    }

    /// The sweep of a slot marked dead, then its free.
    fn bury(&self, dead: Holder) {
        let slots = self.domain.slots();
        self.trace.line(format_args!("bury {dead:?}"));
        self.lever();
        let swept = self.domain.stack().sweep(dead, self.me, &slots, self);
        assert_eq!(swept.map(|_| ()), Ok(()), "the steward never dies by a Run");
        // The queue's sweep in its order (queue.rs): the queue's lock, the indexes' locks
        // the dead one held, its pins, then the allocator's sweep of its leases.
        let indexes = self.domain.indexes();
        let swept = self
            .domain
            .queue()
            .sweep(dead, self.me, indexes.as_slice(), &slots, self);
        assert_eq!(swept.map(|_| ()), Ok(()), "the steward never dies by a Run");
        // Its keeper (module docs, "The keeper's wait"), read before the file table's
        // sweep, which keeps the records it wrote current if one writes them back.
        let keeper = self.domain.records().keeper(dead);
        let writes = if keeper.is_some() {
            DeadWrites::Kept
        } else {
            DeadWrites::Lost
        };
        let swept = self
            .domain
            .files()
            .sweep(dead, self.me, &slots, self, writes);
        assert_eq!(swept.map(|_| ()), Ok(()), "the steward never dies by a Run");
        self.lever();
        // A keeper is waited for only while the dead process's marks name frames: with
        // none, every page it wrote is on disk already, and a kept segment's keeper lives
        // on (the kept memory's steward) long after its writeback: the slot would stay
        // DEAD for nothing.
        let keeper = keeper.filter(|_| self.domain.queue().marks_of(dead) > 0);
        match keeper.map(ProcessId::find) {
            Some(Ok(Some(pidfd))) => {
                self.trace.line(format_args!(
                    "{dead:?}: waits for its keeper {}",
                    keeper.map_or(0, |k| k.pid)
                ));
                self.keeping.borrow_mut().push(Keeping {
                    dead,
                    keeper: pidfd,
                });
            }
            Some(Err(e)) => {
                // Cannot tell: taken as gone (its writes are then the next recovery's,
                // as a killed keeper's), so that the slot is not held for ever.
                self.trace.line(format_args!(
                    "{dead:?}: cannot tell whether its keeper lives: {e}"
                ));
                self.free(dead);
            }
            Some(Ok(None)) | None => self.free(dead),
        }
    }

    /// The end of `dead`'s sweep, once its keeper (if any) is gone: its marks cleared
    /// (`SharedQueue::release_marks`: its pages are on disk, or the next recovery's), the
    /// records it wrote and left `ORPHANED` made `WRITTEN`, its slot freed.
    fn free(&self, dead: Holder) {
        let slots = self.domain.slots();
        let released = self.domain.queue().release_marks(dead);
        let written = self.domain.files().written(dead, self.me, &slots, self);
        let written = written.expect("the steward never dies by a Run");
        slots.free_dead(dead);
        self.trace.line(format_args!(
            "freed {dead:?} ({released} marks released, {written} records written)"
        ));
        self.lever();
    }

    /// Frees (`free`) every slot whose keeper's pidfd says it ended.
    fn keepers_done(&self) {
        let done: Vec<Holder> = take_ended(&mut self.keeping.borrow_mut(), |keeping| {
            keeping.keeper.is_dead()
        })
        .into_iter()
        .map(|keeping| keeping.dead)
        .collect();
        for dead in done {
            self.trace.line(format_args!("{dead:?}: its keeper ended"));
            self.free(dead);
        }
    }

    /// A step of the steward's work on deaths: the test lever stops it here if it names
    /// this step (`Domain::set_steward_stop_at`).
    fn lever(&self) {
        if self.domain.steward_lever_fires() {
            self.trace.line(format_args!("stopped by the lever"));
            // SAFETY: raise has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
    }

    /// Marks dead (`died`) every watched process whose pidfd says it died, and returns
    /// whether `holder`'s was one. Every one, not only `holder`: a sweep waiting for a live
    /// holder must not leave other deaths unmarked, since that holder may itself wait for
    /// a lock a dead process holds (a reclaimer holds the queue's lock while it waits for
    /// an index's or the allocator's, queue.rs), and only the mark lets it take that lock
    /// over. (Found by the shared read path's kill test: a steward sweeping one dead member
    /// waited for the queue's lock, held by a reclaimer that waited for the allocator's
    /// lock of a second dead member the steward had not marked yet.) Their sweeps follow
    /// the current one (`bury_the_dead`).
    fn marked_if_dead(&self, holder: Holder) -> bool {
        let found: Vec<Holder> = take_ended(&mut self.watches.borrow_mut(), |watch| {
            watch.pidfd.is_dead()
        })
        .into_iter()
        .map(|watch| watch.holder)
        .collect();
        let mut was = false;
        for dead in found {
            was |= dead == holder;
            self.died(dead);
        }
        was
    }

    /// A watched process died: its slot marked dead (if it is still LIVE in that
    /// generation: a clean detach made it FREE) and queued for its sweep.
    fn died(&self, holder: Holder) {
        if self.domain.slots().mark_dead(holder) {
            self.trace.line(format_args!("marked {holder:?} dead"));
            self.dead.borrow_mut().push(holder);
        }
    }

    /// Step 4 (module docs), until nobody has been attached for the linger, or the
    /// region's file is removed.
    fn serve(&self, listener: &OwnedFd, config: &DomainConfig, region: &StdFile) -> Left {
        let linger = config.linger;
        let mut alone_since: Option<Instant> = None;
        let mut populator = Populator::new(self.domain.geometry().frames);
        let mut memory = Memory::new(config);
        // A steward that took the domain over counts refaults from the header's figure
        // now, not from 0 (else its first tick would take every past one for new).
        memory.refaults_before = self.domain.refaults();
        loop {
            self.bury_the_dead();
            self.keepers_done();
            let mut fds = vec![libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            for watch in self.watches.borrow().iter() {
                fds.push(libc::pollfd {
                    fd: watch.pidfd.raw(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                fds.push(libc::pollfd {
                    fd: watch.conn.as_ref().map_or(-1, AsRawFd::as_raw_fd),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            let unwatched = fds.len() == 1;
            let watched_fds = fds.len();
            // The keepers waited for: their ends are seen by `keepers_done`, next turn.
            for keeping in self.keeping.borrow().iter() {
                fds.push(libc::pollfd {
                    fd: keeping.keeper.raw(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            // Nobody attached, only dead writers' slots kept for their keepers (a kept
            // segment's keeper lives on as its steward after its writeback), and the
            // region removed: nobody will read the marks they hold; leave as alone.
            if unwatched
                && self.alone_but_keepers()
                && region.metadata().is_ok_and(|m| m.nlink() == 0)
            {
                return Left::Unlinked;
            }
            let alone = unwatched && self.alone();
            let timeout_ms = if alone {
                // Module docs, "Alone": no populating (nobody allocates), the free frames
                // given back at once, the rest under pressure, and the region removed
                // after the linger.
                let since = *alone_since.get_or_insert_with(|| {
                    self.give_back(0, &mut populator);
                    memory.next_read = Instant::now();
                    Instant::now()
                });
                if region.metadata().is_ok_and(|m| m.nlink() == 0) {
                    return Left::Unlinked;
                }
                if since.elapsed() >= linger && !attach_waiting(listener) {
                    // (An attach already in the listener's backlog is served first: a
                    // steward starved past its linger between its bind and its first poll
                    // left one waiting, and the attach started a second steward for
                    // nothing.)
                    return Left::Idle;
                }
                let tick = memory.turn(self, &mut populator, region);
                let left = linger.saturating_sub(since.elapsed()).as_millis() as libc::c_int + 1;
                earliest(left, tick)
            } else {
                if alone_since.take().is_some() {
                    memory.next_read = Instant::now();
                }
                let tick = memory.follow(self, &mut populator, region);
                // At most one chunk per turn, so that an attach or a death waits for one
                // at most (populate.rs); none while the queue is within a chunk of the
                // quota (module docs, "The quota": the members' misses reclaim first and
                // lease the frames reclaim freed, resident already, so a lead would be
                // memory populated for nothing).
                let queue = self.domain.queue();
                let populated = if queue.count().saturating_add(CHUNK_FRAMES) < self.domain.quota()
                {
                    populator.step(self.domain)
                } else {
                    Stepped::Ahead
                };
                let unconnected = self.watches.borrow().iter().any(|w| w.conn.is_none());
                let timeout_ms = if populated.again_now() {
                    0
                } else if unwatched {
                    UNWATCHED_CHECK.as_millis() as libc::c_int
                } else if unconnected {
                    DETACH_CHECK.as_millis() as libc::c_int
                } else {
                    -1
                };
                let timeout_ms = earliest(timeout_ms, tick);
                if populated.finished() {
                    timeout_ms
                } else {
                    earliest(timeout_ms, populator.poll_after())
                }
            };
            // SAFETY: an array of pollfds we own; a negative fd is ignored.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
            if n <= 0 {
                self.forget_detached();
                continue;
            }
            let mut gone = Vec::new();
            for (i, pair) in fds[1..watched_fds].chunks(2).enumerate() {
                let mut watches = self.watches.borrow_mut();
                let watch = &mut watches[i];
                if pair[0].revents != 0 {
                    gone.push(i);
                    continue;
                }
                if pair[1].revents != 0 && connection_ended(watch) {
                    watch.conn = None;
                    if !self.domain.slots().is_live(watch.holder) {
                        // A clean detach, then the connection closed.
                        self.trace.line(format_args!("{:?} detached", watch.holder));
                        gone.push(i);
                    }
                }
            }
            for i in gone.into_iter().rev() {
                let watch = self.watches.borrow_mut().swap_remove(i);
                self.died(watch.holder);
            }
            if fds[0].revents != 0 {
                self.accept(listener);
            }
        }
    }

    /// Whether every slot but ours is FREE: nobody attached, nobody dead to sweep, nobody
    /// whose life a census could not tell (module docs, "Alone"). Nobody can attach
    /// while we do not answer, so it stays true until our next `accept`.
    fn alone(&self) -> bool {
        let slots = self.domain.slots();
        (0..slots.slot_count())
            .map(SlotIndex)
            .all(|slot| slot == self.me.slot || slots.state(slot).0 == SlotState::Free)
    }

    /// Whether every slot but ours is FREE, or DEAD with its keeper waited for
    /// (`keeping`): `alone` but for the dead writers' slots kept until their keepers end.
    fn alone_but_keepers(&self) -> bool {
        let slots = self.domain.slots();
        let keeping = self.keeping.borrow();
        (0..slots.slot_count()).map(SlotIndex).all(|slot| {
            slot == self.me.slot
                || match slots.state(slot).0 {
                    SlotState::Free => true,
                    SlotState::Dead => keeping.iter().any(|k| k.dead.slot == slot),
                    SlotState::Live => false,
                }
        })
    }

    /// Gives memory back (module docs, "Alone"): `want_bytes` of it, counting first the
    /// free frames whose pages the region file holds (they hold nothing), then the
    /// coldest cached frames, reclaimed from the eviction queue (out of their index, a
    /// shadow left, freed to the allocator: `SharedQueue::reclaim`, as a member's miss
    /// does); then every free block that holds a page is punched (`Domain::punch_data`)
    /// and told to the populator (`Populator::given_back`: not populated again at once).
    /// `want_bytes` 0: the free frames only.
    ///
    /// Only the frames below the allocator's frontier and the populator's lead past it
    /// (`LEAD_FRAMES_MAX`) are looked at: past them the file has no page (nobody
    /// populates, leases or maps a frame there: buddy.rs, "Frames never reached"), and a
    /// look at every frame would cost the domain's size (a `mincore` vector and a scan of
    /// a byte a frame: 256 MiB each for a domain of 1 TiB), not what was used.
    ///
    /// Context: the steward, alone (`alone`): nobody leases, frees or pins meanwhile.
    /// Killed in the middle: the reclaim's lock and intent are taken over by the next
    /// steward's sweep of this one's slot (its census finds it dead); frames freed and
    /// not yet punched are punched by the next give-back.
    fn give_back(&self, want_bytes: u64, populator: &mut Populator) {
        let frames = self.domain.geometry().frames;
        let buddy = self.domain.buddy();
        let looked = buddy
            .reached()
            .saturating_add(super::populate::LEAD_FRAMES_MAX)
            .min(frames);
        if looked == 0 {
            return;
        }
        let Ok(resident) = self.domain.data_resident(0..looked) else {
            return;
        };
        // The free blocks, cut at `looked` (the virgin frames are the last one).
        let free_blocks = || {
            buddy
                .free_blocks()
                .into_iter()
                .map(|block| block.start..block.end.min(looked))
                .filter(|block| !block.is_empty())
        };
        let free_resident = free_blocks()
            .flatten()
            .filter(|&f| resident[f as usize])
            .count() as u64;
        let wanted = want_bytes.div_ceil(FRAME_BYTES as u64);
        let need = u32::try_from(wanted.saturating_sub(free_resident)).unwrap_or(u32::MAX);
        let queue = self.domain.queue();
        let mut reclaimed = 0;
        if need > 0 && queue.count() > 0 {
            let indexes = self.domain.indexes();
            let slots = self.domain.slots();
            reclaimed = queue
                .reclaim(
                    need,
                    Shares::attached(self.domain.quota(), &slots, &self.domain.records()),
                    self.me,
                    indexes.as_slice(),
                    &slots,
                    self,
                )
                .expect("the steward never dies by a Run");
        }
        let mut punched = 0u64;
        for block in free_blocks() {
            let pages = block.clone().filter(|&f| resident[f as usize]).count() as u64;
            if pages > 0 && self.domain.punch_data(block.clone()).is_ok() {
                punched += pages;
                populator.given_back(block);
            }
        }
        if punched > 0 || want_bytes > 0 {
            self.trace.line(format_args!(
                "gave back {punched} pages ({want_bytes} bytes wanted, {reclaimed} frames \
                 reclaimed)"
            ));
        }
    }

    /// Reclaims the eviction queue down to the quota (module docs, "The quota"): the
    /// coldest frames, `QUOTA_RECLAIM_BATCH` at a time (`SharedQueue::reclaim`, as a
    /// member's miss does); then, with `FreeFrames::GiveBack`, the memory of every listed
    /// free frame given back, each leased to the steward while it is punched
    /// (`SharedBuddy::give_back_listed`, G1-G3), and told to the populator.
    ///
    /// Context: the steward, members attached (they lease, free and pin meanwhile).
    /// Killed in the middle: the reclaim's lock and intent, and the frames leased to it,
    /// are taken over and returned by the next steward's sweep of this one's slot.
    fn to_quota(
        &self,
        free_frames: FreeFrames,
        populator: &mut Populator,
        leased: &mut Vec<super::stack::Frame>,
    ) {
        let queue = self.domain.queue();
        let indexes = self.domain.indexes();
        let slots = self.domain.slots();
        let mut reclaimed = 0u32;
        loop {
            let (count, quota) = (queue.count(), self.domain.quota());
            if count <= quota {
                break;
            }
            let got = queue
                .reclaim(
                    (count - quota).min(QUOTA_RECLAIM_BATCH),
                    Shares::attached(quota, &slots, &self.domain.records()),
                    self.me,
                    indexes.as_slice(),
                    &slots,
                    self,
                )
                .expect("the steward never dies by a Run");
            reclaimed += got;
            if got == 0 {
                break; // every queued frame pinned: the members' misses reclaim later
            }
        }
        if free_frames == FreeFrames::Keep {
            if reclaimed > 0 {
                self.trace
                    .line(format_args!("reclaimed {reclaimed} frames to the quota"));
            }
            return;
        }
        let buddy = self.domain.buddy();
        let mut punched = 0u64;
        let leased_frames = buddy
            .give_back_listed(u32::MAX, self.me, leased, &slots, self, |block| {
                let resident = self
                    .domain
                    .data_resident(block.clone())
                    .map_or(0, |r| r.iter().filter(|&&p| p).count() as u64);
                if resident > 0 && self.domain.punch_data(block.clone()).is_ok() {
                    punched += resident;
                    populator.given_back(block);
                }
            })
            .expect("the steward never dies by a Run");
        self.trace.line(format_args!(
            "to the quota: {reclaimed} frames reclaimed, {punched} pages of {leased_frames} \
             free frames given back"
        ));
    }

    /// Ends the watch of every process whose slot left its LIVE generation without our
    /// marking it: a clean detach. (A process with its connection open is seen at the
    /// connection's end; one found again by `rebuild` has none, and is looked at here
    /// every `DETACH_CHECK`.)
    fn forget_detached(&self) {
        let slots = self.domain.slots();
        self.watches.borrow_mut().retain(|watch| {
            let live = slots.is_live(watch.holder);
            if !live {
                self.trace.line(format_args!("{:?} detached", watch.holder));
            }
            live
        });
    }

    /// One attach (module docs, step 4). A refused or failed attach closes the
    /// connection: the process sees its end.
    fn accept(&self, listener: &OwnedFd) {
        // SAFETY: accept4 on our listener; the result is checked and owned below.
        let fd = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            return;
        }
        // SAFETY: a new descriptor nothing else owns.
        let conn = unsafe { OwnedFd::from_raw_fd(fd) };
        let Some(request) = Request::receive(&conn, REQUEST_WAIT) else {
            return;
        };
        let Some(peer) = peer_credentials(&conn) else {
            return;
        };
        if peer.uid != crate::segment::my_uid() {
            return;
        }
        let Ok(pid) = u32::try_from(peer.pid) else {
            return;
        };
        // The pidfd while the peer is connected, checked against the start time it
        // sent: a process that died since is refused, a reused pid is not taken for it.
        let Some(pidfd) = (ProcessId {
            pid,
            start: request.start,
        })
        .open() else {
            return;
        };
        let id = ProcessId {
            pid,
            start: request.start,
        };
        let steward = self.domain.steward();
        let admitted = record::admit(
            &self.domain.slots(),
            &self.domain.records(),
            id,
            Some(request.weight),
            &Unkillable,
            |holder| {
                let sent = send_words(
                    &conn,
                    &[
                        ANSWER_ATTACHED,
                        u64::from(holder.slot.0),
                        u64::from(holder.generation),
                        u64::from(steward.pid),
                        steward.start,
                    ],
                );
                if let Err(e) = sent {
                    self.trace.line(format_args!(
                        "pid {pid}: the answer for {holder:?} failed: {e}"
                    ));
                }
            },
        );
        let Some(holder) = admitted.expect("Unkillable never dies") else {
            self.trace.line(format_args!("pid {pid}: every slot taken"));
            let _ = send_words(&conn, &[ANSWER_FULL, 0, 0, 0, 0]);
            return;
        };
        self.trace
            .line(format_args!("pid {pid}: admitted as {holder:?}"));
        // Watched even if the answer failed: the process died, or it will.
        self.watches.borrow_mut().push(Watch {
            holder,
            pidfd,
            conn: Some(conn),
        });
    }
}

impl Run for Steward<'_> {
    fn at(&self, _step: Step) -> Result<(), Died> {
        self.lever();
        Ok(())
    }

    /// A live holder holds the lock the sweep needs: if its process died meanwhile, mark
    /// it dead here (module docs), so that the lock can be taken over; any other watched
    /// process that died too (`marked_if_dead`).
    fn wait(&self, holder: Holder) {
        if !self.marked_if_dead(holder) {
            Unkillable.wait(holder);
        }
    }

    /// After each park (at most `PARK_TIMEOUT`), the same look at the pidfds. Parks that
    /// time out on one holder's lock are traced, the first and every 100th (a sweep that
    /// waits long says on whom: test builds).
    fn parked(&self, holder: Holder, outcome: Parked) {
        let (last, count) = self.timed_out_parks.get();
        let count = match outcome {
            Parked::TimedOut if last == holder => count + 1,
            Parked::TimedOut => 1,
            _ => 0,
        };
        self.timed_out_parks.set((holder, count));
        if count % 100 == 1 {
            self.trace.line(format_args!(
                "parked {count} times on a lock {holder:?} holds"
            ));
        }
        self.marked_if_dead(holder);
    }

    /// Parks as the library does, but never longer than `PARK_TIMEOUT` (module docs).
    fn park(&self) -> Option<Park> {
        Some(Park {
            timeout: Some(PARK_TIMEOUT),
            ..Park::DEFAULT
        })
    }

    /// A steward that panics under a lock dies: the next attach starts another, which
    /// takes the lock over (lock.rs, "A panic under the lock").
    fn abort_on_unwind(&self) -> bool {
        true
    }
}

/// The steward's trace (module docs): in test builds, `<name>.trace` in the domain's
/// directory, opened once and held, with a shared `flock` on it, for the steward's whole
/// life (from just after `isolate` to its `_exit`); in others, nothing.
///
/// Why held rather than opened per line: the lock is what a test's directory waits for
/// before it removes the directory (`tests::DomainHome`: it takes the lock exclusively,
/// which it gets once every steward that opened the trace has exited, whatever ended
/// it); and a line written after the directory was removed goes to the unlinked file,
/// never to a new file at the old path (a line appended by path recreated the trace in a
/// directory being removed, whose `rmdir` then failed: a `.tmpXXXXXX` left in /dev/shm).
///
/// Protection: appends only, one `write` per line (`O_APPEND`). Limits: a line that fails
/// to be written is lost, and so is every line of a steward that could not open the file
/// (a trace never stops the steward); such a steward holds no lock, so a test's directory
/// does not wait for it.
#[derive(Debug)]
pub(crate) struct Trace {
    #[cfg(test)]
    file: Option<StdFile>,
}

impl Trace {
    /// The trace of `config`'s domain: opened for appending (made if new), and locked
    /// shared (waits while a test's directory holds it exclusively: that directory is
    /// being removed, and this steward finds nothing there).
    ///
    /// Context: the steward, after `isolate` (which closes every other descriptor).
    pub(crate) fn of(config: &DomainConfig) -> Trace {
        #[cfg(not(test))]
        let _ = config;
        #[cfg(test)]
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(Self::path(config))
            .ok();
        #[cfg(test)]
        if let Some(file) = &file {
            // SAFETY: flock on our own descriptor. A failure leaves the trace unlocked
            // (module docs' limits), never the steward stopped.
            unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH) };
        }
        Trace {
            #[cfg(test)]
            file,
        }
    }

    /// Where a test build's stewards of `config`'s domain write their trace.
    #[cfg(test)]
    pub(crate) fn path(config: &DomainConfig) -> std::path::PathBuf {
        config.dir.join(format!("{}.trace", config.name))
    }

    /// Appends one line (test builds): this process's pid, the time since the epoch in
    /// microseconds (µs: lines of several processes in order), and `what`.
    ///
    /// Context: any process; one `write` to the held file.
    pub(crate) fn line(&self, what: std::fmt::Arguments<'_>) {
        #[cfg(test)]
        {
            use std::io::Write;
            let now_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros());
            let line = format!("{now_us} steward {}: {what}\n", std::process::id());
            if let Some(mut file) = self.file.as_ref() {
                let _ = file.write_all(line.as_bytes());
            }
        }
        #[cfg(not(test))]
        let _ = what;
    }
}

/// Whether a connection waits in `listener`'s backlog now (a poll that does not wait).
fn attach_waiting(listener: &OwnedFd) -> bool {
    readable(listener, Duration::ZERO)
}

/// Whether `fd` has something to read (or its peer's end: a read then returns 0) within
/// `wait`.
pub(crate) fn readable(fd: &OwnedFd, wait: Duration) -> bool {
    let mut poll_fd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let wait_ms = wait.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one pollfd we own.
    unsafe { libc::poll(&mut poll_fd, 1, wait_ms) > 0 }
}

/// Whether a watched process's connection ended (its end closed, or an error); a stray
/// message is read and ignored.
fn connection_ended(watch: &Watch) -> bool {
    let Some(conn) = &watch.conn else {
        return false;
    };
    let n = receive_now(conn, &mut [0u8; 64]);
    n == 0 || (n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock)
}

/// Receives one message from `conn` into `buf` without waiting (`recv`, `MSG_DONTWAIT`):
/// its length (cut to `buf`'s), 0 at the peer's end, -1 with `errno` for nothing yet or an
/// error.
pub(crate) fn receive_now(conn: &OwnedFd, buf: &mut [u8]) -> isize {
    // SAFETY: recv into our buffer, of its length.
    unsafe {
        libc::recv(
            conn.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    }
}

/// The peer's credentials (`SO_PEERCRED`): its pid and uid as of its `connect`.
pub(crate) fn peer_credentials(conn: &OwnedFd) -> Option<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt into a ucred of the size given.
    let rc = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::from_mut(&mut cred).cast(),
            &mut len,
        )
    };
    (rc == 0 && cred.pid > 0).then_some(cred)
}

/// Sends `words` as one message (native byte order: both ends are on this machine).
pub(crate) fn send_words(conn: &OwnedFd, words: &[u64]) -> io::Result<()> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    // SAFETY: send of our buffer; MSG_NOSIGNAL: a closed peer is an error, not a signal.
    let n = unsafe {
        libc::send(
            conn.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    if n == bytes.len() as isize {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Receives one message of `N` words, waiting up to `wait`; `None` for anything else
/// (a timeout, the peer's end, a message of another size).
pub(crate) fn receive_words<const N: usize>(conn: &OwnedFd, wait: Duration) -> Option<[u64; N]> {
    if !readable(conn, wait) {
        return None;
    }
    let mut bytes = [0u8; 64];
    if receive_now(conn, &mut bytes) != (N * 8) as isize {
        return None;
    }
    let mut words = [0u64; N];
    for (i, word) in words.iter_mut().enumerate() {
        *word = u64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    }
    Some(words)
}

/// Takes out of `items` those `ended` says ended (a pidfd readable), keeping the rest.
fn take_ended<T>(items: &mut Vec<T>, ended: impl Fn(&T) -> bool) -> Vec<T> {
    let (gone, kept) = std::mem::take(items)
        .into_iter()
        .partition(|item| ended(item));
    *items = kept;
    gone
}
