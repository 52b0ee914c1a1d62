//! The domain's memory and lifetime once nobody is attached (steward.rs, "Alone";
//! docs/sharing.md, "The domain's memory and lifetime"), with a simulated machine as the
//! lever for memory pressure (`DomainConfig::memory_files`: the steward reads its
//! `meminfo` in place of `/proc`'s), and the steward's stop lever to kill it in the
//! middle of a give-back. No test depends on timing for what it covers: each waits (up to
//! `DEADLINE`) for the state it asserts.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::attach::{DomainConfig, Member};
use super::buddy::Order;
use super::domain::{Domain, DomainFiles, Geometry};
use super::read::{ReadCounters, SharedReader};
use super::record::Weight;
use super::tests::{allocated_in, failure_of, AtStep, DomainHome, MemberLever, OnUnwind};
use super::tests_read::{stamped, write_file};
use crate::segment::{DiskDir, SegmentDir};

const DEADLINE: Duration = Duration::from_secs(60);
/// 4 chunks of 2 MiB.
const FRAMES: u32 = 2048;

/// Writes the simulated machine's `meminfo` (8 GiB, `available_mib` available): renamed
/// into place, so that the steward never reads half of it.
fn machine(dir: &Path, available_mib: u64) {
    let text = format!(
        "MemTotal: {} kB\nMemAvailable: {} kB\n",
        8u64 << 20,
        available_mib << 10
    );
    std::fs::write(dir.join("meminfo.new"), text).unwrap();
    std::fs::rename(dir.join("meminfo.new"), dir.join("meminfo")).unwrap();
}

/// Plenty: no give-back. 100 MiB of 8 GiB: the reserve is 256 MiB, so the steward wants
/// 668 MiB, more than any of these domains holds.
const PLENTY_MIB: u64 = 7 << 10;
const PRESSED_MIB: u64 = 100;

fn config(home: &Path, name: &str, linger: Duration, machine: &Path) -> DomainConfig {
    DomainConfig {
        dir: home.to_path_buf(),
        name: name.into(),
        geometry: Geometry {
            slots: 8,
            frames: FRAMES,
        },
        linger,
        memory_files: Some(machine.to_path_buf()),
        weight: Weight::DEFAULT,
    }
}

/// Frames of a domain of 1 GiB: large beside what its tests read, so that memory spent on
/// the domain's size rather than its use shows.
const FRAMES_1G: u32 = 1 << 18;

/// `config` of a 1 GiB domain (`FRAMES_1G`) in `setup`'s home and machine.
fn config_1g(setup: &Setup, name: &str, linger: Duration) -> DomainConfig {
    let mut config = config(setup.home.path(), name, linger, setup.machine.path());
    config.geometry.frames = FRAMES_1G;
    config
}

/// Attaches, reads all of `path` (its bytes checked against file 0's stamps), detaches.
fn read_all(config: &DomainConfig, path: &Path, len: u64) -> ReadCounters {
    let member = Member::attach(config).unwrap();
    let counters = {
        let reader = SharedReader::new(&member, &member, 8);
        let file = reader.open(path).unwrap();
        let mut buf = vec![0u8; len as usize];
        assert_eq!(reader.read_at(&file, &mut buf, 0).unwrap(), len as usize);
        assert!(buf == stamped(0, len), "wrong bytes read");
        reader.close(file).unwrap();
        reader.counters()
    };
    member.detach();
    counters
}

/// The region mapped without attaching (a view: the test's looks at it).
fn view(home: &Path, name: &str) -> Domain {
    let dir = SegmentDir::open(home, DiskDir::Refused).unwrap();
    Domain::open(&dir, &DomainFiles::of(name).unwrap()).unwrap()
}

fn resident(domain: &Domain) -> usize {
    let pages = domain.data_resident(0..domain.geometry().frames).unwrap();
    pages.iter().filter(|&&p| p).count()
}

/// The quiet domain's census: (free, cached, node) frames, every frame accounted for by
/// the allocator and the queue (`check`s); `None` while either is busy or broken.
fn census(domain: &Domain) -> Option<(u32, usize, usize)> {
    let slots = domain.slots();
    let buddy = domain.buddy();
    let allocator = buddy.check(&slots).ok()?;
    let queue = domain.queue().check(&slots).ok()?;
    assert_eq!(queue.queued.len(), allocator.cached.len());
    Some((
        allocator.free_frames,
        allocator.cached.len(),
        allocator.nodes.len(),
    ))
}

/// Waits until `done` (each look 10 ms apart), failing with `what` after `DEADLINE`.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

struct Setup {
    home: DomainHome,
    _data: tempfile::TempDir,
    machine: tempfile::TempDir,
    path: PathBuf,
}

fn setup(len: u64) -> Setup {
    let home = DomainHome::new();
    let machine_dir = tempfile::tempdir().unwrap();
    machine(machine_dir.path(), PLENTY_MIB);
    let data = tempfile::tempdir().unwrap();
    let path = write_file(data.path(), 0, len);
    Setup {
        home,
        _data: data,
        machine: machine_dir,
        path,
    }
}

/// Alone, the steward gives back at once the free frames the file holds (the populated
/// lead), and under pressure (the lever: the simulated machine's `MemAvailable` low) the
/// cached ones too: the region's resident pages drop by at least the 256 cached, only
/// the index's node frames stay, every frame is accounted for, and a later member reads
/// every byte right, through misses (re-read). Fails without the give-back (never).
#[test]
fn alone_the_steward_gives_memory_back_under_pressure_and_misses_read_it_again() {
    const PAGES: u64 = 256;
    let setup = setup(PAGES * 4096);
    let config = config(
        setup.home.path(),
        "life-give",
        Duration::from_secs(120),
        setup.machine.path(),
    );
    let first = read_all(&config, &setup.path, PAGES * 4096);
    // Every page from the disk (a miss or read ahead of one).
    assert_eq!(first.misses + first.read_ahead, PAGES, "{first:?}");
    let domain = view(setup.home.path(), "life-give");
    // At once alone: the free frames given back, the cached ones kept.
    let mut before = 0;
    wait_until("the free frames given back", || {
        let Some((_, cached, nodes)) = census(&domain) else {
            return false;
        };
        before = resident(&domain);
        cached == PAGES as usize && before == cached + nodes
    });
    machine(setup.machine.path(), PRESSED_MIB);
    let mut after = 0;
    wait_until("the cached frames given back under pressure", || {
        let Some((free, cached, nodes)) = census(&domain) else {
            return false;
        };
        after = resident(&domain);
        assert_eq!(free as usize + cached + nodes, FRAMES as usize);
        cached == 0 && after == nodes
    });
    eprintln!("alone under pressure: {before} resident pages, then {after}");
    assert!(before - after >= PAGES as usize, "{before} -> {after}");
    machine(setup.machine.path(), PLENTY_MIB);
    let second = read_all(&config, &setup.path, PAGES * 4096);
    // None found cached: every page read from the disk again.
    assert_eq!(second.misses + second.read_ahead, PAGES, "{second:?}");
}

/// After its linger alone, the steward removes the region and its socket and leaves;
/// the next attach starts a fresh domain (one election, nothing cached: every page a
/// miss). Fails without the removal (the region stays).
#[test]
fn an_idle_domain_is_removed_after_its_linger_and_the_next_attach_starts_fresh() {
    const PAGES: u64 = 16;
    let setup = setup(PAGES * 4096);
    let config = config(
        setup.home.path(),
        "life-idle",
        Duration::from_millis(300),
        setup.machine.path(),
    );
    let member = Member::attach(&config).unwrap();
    let steward = member.steward().open().expect("a steward runs");
    member.detach();
    let first = read_all(&config, &setup.path, PAGES * 4096);
    assert_eq!(first.misses + first.read_ahead, PAGES, "{first:?}");
    wait_until("the steward left", || steward.is_dead());
    let files = DomainFiles::of("life-idle").unwrap();
    let region = setup.home.path().join(&files.region);
    assert!(!region.exists(), "the region stayed");
    assert!(!setup.home.path().join(&files.socket).exists());
    let member = Member::attach(&config).unwrap();
    assert_eq!(member.domain().elections(), 1, "a fresh domain");
    member.detach();
    let again = read_all(&config, &setup.path, PAGES * 4096);
    assert_eq!(again.misses + again.read_ahead, PAGES, "{again:?}");
}

/// The steward stopped by its lever at a step of a give-back under pressure (inside the
/// eviction queue's reclaim: holding its lock at some of them), then killed: the next
/// attach starts a steward whose census sweeps the dead one's slot (taking its locks
/// over), the member reads every byte right, and once quiet every frame is accounted for
/// (the allocator's and the queue's `check`).
#[test]
fn a_steward_killed_in_the_middle_of_a_give_back_leaves_a_domain_the_next_recovers() {
    const PAGES: u64 = 64;
    let setup = setup(PAGES * 4096);
    let mut held = 0;
    for stop_at in [1u64, 3, 8, 30] {
        let name = format!("life-kill-{stop_at}");
        let config = config(
            setup.home.path(),
            &name,
            Duration::from_secs(120),
            setup.machine.path(),
        );
        machine(setup.machine.path(), PLENTY_MIB);
        read_all(&config, &setup.path, PAGES * 4096);
        let domain = view(setup.home.path(), &name);
        wait_until("quiet", || {
            census(&domain).is_some_and(|c| c.1 == PAGES as usize)
        });
        let steward = domain.steward();
        let pidfd = steward.open().expect("a steward runs");
        domain.set_steward_stop_at(stop_at);
        machine(setup.machine.path(), PRESSED_MIB);
        wait_until("the steward stopped by its lever", || {
            std::fs::read_to_string(format!("/proc/{}/stat", steward.pid)).is_ok_and(|stat| {
                stat.rsplit_once(") ")
                    .is_some_and(|(_, s)| s.starts_with('T'))
            })
        });
        held += u32::from(domain.queue().lock_line().holder().is_some());
        // SAFETY: kill has no memory-safety preconditions; the steward is checked by its
        // pidfd (not reaped: it is nobody's child here).
        unsafe { libc::kill(steward.pid as libc::pid_t, libc::SIGKILL) };
        wait_until("the steward died", || pidfd.is_dead());
        machine(setup.machine.path(), PLENTY_MIB);
        let again = read_all(&config, &setup.path, PAGES * 4096);
        assert_eq!(again.misses + again.hits, PAGES, "{again:?}");
        assert_eq!(domain.elections(), 2, "one new steward");
        wait_until("every frame accounted for", || {
            census(&domain).is_some_and(|(free, cached, nodes)| {
                free as usize + cached + nodes == FRAMES as usize
            })
        });
    }
    assert!(
        held >= 1,
        "the lever never stopped the steward holding the queue's lock"
    );
}

/// The steward's CPU and wake-ups over `IDLE` with one member attached that reads
/// nothing, on a domain of 1 GiB (262,144 frames: its data area never whole, so the
/// populator has a lead to keep and nothing moves). By hand (docs/sharing.md, "The
/// domain's memory and lifetime": the figures): `cargo test --release -p folio --lib
/// shared::tests_life::the_stewards_cost_on_an_idle_domain -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement: run by hand"]
fn the_stewards_cost_on_an_idle_domain() {
    const IDLE: Duration = Duration::from_secs(10);
    let setup = setup(4096);
    let config = config_1g(&setup, "life-cost", Duration::from_millis(100));
    let member = Member::attach(&config).unwrap();
    let steward = member.steward().pid;
    // The lead populated first (4 chunks: 8 MiB).
    wait_until("the lead populated", || {
        resident(member.domain()) >= 4 * super::populate::CHUNK_FRAMES as usize
    });
    std::thread::sleep(Duration::from_secs(1));
    let look = || {
        let stat = std::fs::read_to_string(format!("/proc/{steward}/stat")).unwrap();
        let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
        // Fields 14 and 15 (utime, stime), the 12th and 13th after the command.
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        let status = std::fs::read_to_string(format!("/proc/{steward}/status")).unwrap();
        let switches: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        (ticks, switches)
    };
    let before = look();
    std::thread::sleep(IDLE);
    let after = look();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    eprintln!(
        "steward on an idle 1 GiB domain over {IDLE:?}: {} ms of CPU (utime + stime), {} \
         wake-ups (voluntary context switches)",
        (after.0 - before.0) * 1000 / hz,
        after.1 - before.1
    );
    member.detach();
}

/// The region file's allocated bytes (its tmpfs blocks: every page the file holds, the
/// frames' words and the data area alike).
fn region_bytes(home: &Path, name: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let path = home.join(DomainFiles::of(name).unwrap().region);
    std::fs::metadata(path).unwrap().blocks() * 512
}

/// A domain of 1 GiB (262,144 frames) in which one member reads 8 MiB: the region holds
/// in memory what is cached, the lead populated ahead of the allocator and the fixed
/// tables, not the frames' words of the whole domain (docs/sharing.md, "The domain's
/// memory as used"). Before the allocator's frontier, the format wrote every frame's words
/// (104 bytes a frame: 26 MiB here) and the lead was as large as what is used: this test
/// fails there (checked with that format put back for one build, the lead left as now:
/// 23.3 MiB after the attach, 34.1 MiB with 8 MiB read). Once the member has left,
/// the steward gives the lead back (alone): the region is then the data and its words.
/// Waits (60 s deadline) for the steward's lead; what it asserts does not depend on when.
#[test]
fn a_large_domain_holds_what_it_caches_and_its_lead_not_its_size() {
    const DATA: u64 = 8 << 20;
    const MIB: u64 = 1 << 20;
    let setup = setup(DATA);
    let name = "life-large";
    let config = config_1g(&setup, name, Duration::from_secs(120));
    let member = Member::attach(&config).unwrap();
    let after_attach = region_bytes(setup.home.path(), name);
    {
        let reader = SharedReader::new(&member, &member, 8);
        let file = reader.open(&setup.path).unwrap();
        let mut buf = vec![0u8; DATA as usize];
        assert_eq!(reader.read_at(&file, &mut buf, 0).unwrap(), DATA as usize);
        assert!(buf == stamped(0, DATA), "wrong bytes read");
        reader.close(file).unwrap();
    }
    let domain = member.domain();
    let cached = u64::from(domain.queue().count()) * 4096;
    assert!(cached >= DATA, "{cached} bytes cached");
    // The steward populates the lead (1 chunk, 2 MiB: populate.rs) at the frontier.
    let buddy = domain.buddy();
    let reached = buddy.reached();
    assert!(
        u64::from(reached) * 4096 <= DATA + 4 * MIB,
        "the allocator reached frame {reached} for 8 MiB"
    );
    wait_until("the lead populated past the frontier", || {
        let lead = reached.next_multiple_of(512)..(reached.next_multiple_of(512) + 512);
        domain.data_resident(lead).unwrap().iter().all(|&p| p)
    });
    let held = region_bytes(setup.home.path(), name);
    eprintln!(
        "1 GiB domain: {:.1} MiB after the attach, {:.1} MiB with 8 MiB read ({:.1} MiB \
         cached, frontier at frame {reached})",
        after_attach as f64 / MIB as f64,
        held as f64 / MIB as f64,
        cached as f64 / MIB as f64
    );
    // The fixed tables (header, slots, records, stack, file table, the indexes' lines)
    // are well under 1 MiB; the data's begun chunks at most 5 (10 MiB) and the lead 1
    // (2 MiB); the frames' words of 6 chunks 0.3 MiB.
    assert!(
        after_attach <= MIB + 4 * MIB,
        "{after_attach} bytes at the attach"
    );
    assert!(held >= DATA, "{held} bytes held");
    assert!(held <= 16 * MIB, "{held} bytes held for 8 MiB cached");
    member.detach();
    // Alone, the steward gives the free frames' pages back at once: the lead.
    wait_until("the lead given back", || {
        region_bytes(setup.home.path(), name) <= held - 2 * MIB
    });
    // Every frame accounted for (the checks read every frame's words: last, since they
    // fault the virgin ones' pages in).
    let view = view(setup.home.path(), name);
    wait_until("a quiet domain", || census(&view).is_some());
    let (free, cached_frames, _) = census(&view).unwrap();
    assert_eq!(cached_frames as u64 * 4096, cached);
    assert!(free > FRAMES_1G - 4096);
}
/// A member killed on a domain of 1 GiB (262,144 frames): the steward's sweep of its slot
/// (its pins, a writer's HELD marks, its leases) reads the frames' words only below the
/// allocator's frontier, so the queue's words of the frames past it stay holes. The sweep
/// of HELD marks once read every frame's queue words: 16 MiB faulted in here at each death
/// (64 MiB for a machine-sized domain), which made `db-bench readonly`'s domain 1.84x the
/// kernel's one copy at the plugin's defaults (docs/sharing.md, "Since the merge"). This
/// test fails there (checked by putting the frame count back as the bound for one build:
/// the queue's words grew by 16.0 MiB). Only the queue's words are measured: the steward's
/// lead moves the data area meanwhile, and the file table's sweep reads a word of every
/// record (its 768 KiB, once). Waits (60 s deadline) for the sweep; what it asserts does
/// not depend on when.
#[test]
fn a_members_death_on_a_large_domain_faults_in_no_frames_words() {
    const DATA: u64 = 4 << 20;
    const MIB: u64 = 1 << 20;
    let setup = setup(DATA);
    let name = "life-death";
    let config = config_1g(&setup, name, Duration::from_secs(120));
    let parent = Member::attach(&config).unwrap();
    let domain = parent.domain();
    let queue = {
        let start = u64::from(domain.geometry().queue().0) * 8;
        start..start + u64::from(super::queue::SharedQueue::words(FRAMES_1G)) * 8
    };
    let (config_ref, path) = (&config, &setup.path);
    let child = super::tests::fork(move || {
        let member = Member::attach(config_ref).expect("attach");
        let reader = SharedReader::new(&member, &member, 8);
        let file = reader.open(path).expect("open");
        let mut buf = vec![0u8; DATA as usize];
        assert_eq!(reader.read_at(&file, &mut buf, 0).unwrap(), DATA as usize);
        assert!(buf == stamped(0, DATA), "wrong bytes read");
        // Dies here, its file open and its slot live.
        // SAFETY: raise has no memory-safety preconditions.
        unsafe { libc::raise(libc::SIGSTOP) };
    });
    let status = super::tests::wait_for(child, libc::WUNTRACED);
    assert!(
        libc::WIFSTOPPED(status),
        "the member never stopped: {status:#x}"
    );
    let region = setup
        .home
        .path()
        .join(DomainFiles::of(name).unwrap().region);
    let before = allocated_in(&region, queue.clone());
    super::tests_domain::sigkill(child as u32);
    let status = super::tests::wait_for(child, 0);
    assert!(libc::WIFSIGNALED(status), "status {status:#x}");
    wait_until("the dead member swept", || {
        super::tests_domain::is_quiet(domain, parent.holder())
    });
    let after = allocated_in(&region, queue.clone());
    eprintln!(
        "1 GiB domain: its queue's words {:.2} MiB before the death, {:.2} MiB after its \
         sweep",
        before as f64 / MIB as f64,
        after as f64 / MIB as f64
    );
    // The queue's words of every frame are 16 MiB. The sweep reads up to the frontier,
    // which moves a chunk (512 frames: 32 KiB of queue lines) at a time: 32 KiB measured.
    assert!(
        after <= before + 64 * 1024,
        "the sweep faulted in {} bytes of the queue's words",
        after.saturating_sub(before)
    );
    // The domain still reads right for the survivor.
    {
        let reader = SharedReader::new(&parent, &parent, 8);
        let file = reader.open(&setup.path).unwrap();
        let mut buf = vec![0u8; DATA as usize];
        assert_eq!(reader.read_at(&file, &mut buf, 0).unwrap(), DATA as usize);
        assert!(buf == stamped(0, DATA), "wrong bytes read after the death");
        reader.close(file).unwrap();
    }
    parent.detach();
}

/// The quota's tests (steward.rs, "The quota"): a domain of 128 MiB (32,768 frames), so
/// that the policy's hysteresis (a quarter reserve of the simulated 8 GiB machine: 64
/// MiB) lets the quota grow back from its minimum.
const QUOTA_DOMAIN_FRAMES: u32 = 1 << 15;

fn quota_config(setup: &Setup, name: &str) -> DomainConfig {
    let mut config = config(
        setup.home.path(),
        name,
        Duration::from_secs(120),
        setup.machine.path(),
    );
    config.geometry.frames = QUOTA_DOMAIN_FRAMES;
    config
}

/// Reads all of `file` through `reader` (its bytes checked against file 0's stamps).
fn read_through<R: super::Run>(reader: &SharedReader<'_, R>, path: &Path, len: u64) {
    let file = reader.open(path).unwrap();
    let mut buf = vec![0u8; len as usize];
    assert_eq!(reader.read_at(&file, &mut buf, 0).unwrap(), len as usize);
    assert!(buf == stamped(0, len), "wrong bytes read");
    reader.close(file).unwrap();
}

/// With a member attached, the quota follows the simulated machine: under pressure the
/// steward lowers it to its minimum (`QUOTA_FRAMES_MIN`), reclaims the member's cached
/// frames down to it and gives their memory back (the region file's blocks fall by at
/// least the frames reclaimed); the member's misses then keep the queue at the quota
/// (they reclaim before they lease); with memory plenty again, its re-reads refault and
/// the quota grows back to the whole domain, and the file is cached whole again. Fails
/// without the quota (the queue keeps its 1,024 frames under pressure: "never: the queue
/// reclaimed to the quota"), and without the members' reclaim before the lease (the
/// queue grows past the quota on the re-read).
#[test]
fn with_members_attached_the_quota_follows_the_machine_down_and_up() {
    use super::steward::QUOTA_FRAMES_MIN;
    const PAGES: u64 = 1024;
    let setup = setup(PAGES * 4096);
    let name = "quota-follow";
    let config = quota_config(&setup, name);
    let member = Member::attach(&config).unwrap();
    let reader = SharedReader::new(&member, &member, 8);
    read_through(&reader, &setup.path, PAGES * 4096);
    let domain = member.domain();
    let queue = domain.queue();
    assert_eq!(queue.count(), PAGES as u32);
    assert_eq!(
        domain.quota(),
        QUOTA_DOMAIN_FRAMES,
        "plenty: the whole domain"
    );
    // The data pages the region holds below the allocator's frontier (the frames it
    // reached: cached, free, node frames), not the lead the steward populates past it.
    let reached_resident = || {
        let pages = domain.data_resident(0..domain.buddy().reached()).unwrap();
        pages.iter().filter(|&&p| p).count()
    };
    let before = reached_resident();
    let region_before = region_bytes(setup.home.path(), name);
    assert!(before >= PAGES as usize, "{before} pages resident");

    machine(setup.machine.path(), PRESSED_MIB);
    wait_until("the queue reclaimed to the quota", || {
        domain.quota() == QUOTA_FRAMES_MIN && queue.count() <= QUOTA_FRAMES_MIN
    });
    // Every frame below the frontier but the cached ones, the index's node frames and
    // the member's magazine (at most 16) given back.
    let mut after = 0;
    wait_until("the reclaimed frames' memory given back", || {
        after = reached_resident();
        after <= QUOTA_FRAMES_MIN as usize + 16 + 4
    });
    eprintln!(
        "quota down: {PAGES} frames cached, {before} data pages resident below the \
         frontier, then {after}; the region file {:.1} MiB, then {:.1} MiB",
        region_before as f64 / (1 << 20) as f64,
        region_bytes(setup.home.path(), name) as f64 / (1 << 20) as f64
    );
    // Re-read under pressure: every byte right, the queue never past the quota.
    read_through(&reader, &setup.path, PAGES * 4096);
    assert!(
        queue.count() <= QUOTA_FRAMES_MIN,
        "{} frames cached over a quota of {QUOTA_FRAMES_MIN}",
        queue.count()
    );
    assert_eq!(domain.quota(), QUOTA_FRAMES_MIN);

    machine(setup.machine.path(), PLENTY_MIB);
    let refaults = domain.refaults();
    wait_until("the quota grown back by the refaults", || {
        read_through(&reader, &setup.path, PAGES * 4096);
        domain.quota() == QUOTA_DOMAIN_FRAMES
    });
    assert!(domain.refaults() > refaults, "the re-reads refaulted");
    read_through(&reader, &setup.path, PAGES * 4096);
    let hits_before = reader.counters().hits;
    read_through(&reader, &setup.path, PAGES * 4096);
    assert_eq!(queue.count(), PAGES as u32, "the file cached whole again");
    assert_eq!(
        reader.counters().hits - hits_before,
        PAGES,
        "every page a hit"
    );
    drop(reader);
    member.detach();
}

/// The steward stopped by its lever inside a give-back with a member attached (the quota
/// fell: `SharedBuddy::give_back_listed`, G1-G3), at several steps, then killed: at some
/// stop it holds free frames leased to itself (asserted: the allocator's census names
/// them its); the next attach starts a steward whose census sweeps the dead one's slot,
/// returning them; the attached member and a new one read every byte right, and once
/// quiet every frame is accounted for, none leased to the dead steward.
#[test]
fn a_steward_killed_while_it_holds_the_frames_it_gives_back_leaves_them_to_the_next() {
    const PAGES: u64 = 100;
    let setup = setup(PAGES * 4096);
    let mut held = 0;
    for stop_at in [2u64, 4, 6, 9, 14] {
        let name = format!("quota-kill-{stop_at}");
        let config = quota_config(&setup, &name);
        machine(setup.machine.path(), PLENTY_MIB);
        // B stays attached (the steward is not alone); A reads through a magazine of 64
        // and leaves: its magazine's frames are listed free, resident.
        let b = Member::attach(&config).unwrap();
        {
            let a = Member::attach(&config).unwrap();
            let reader = SharedReader::new(&a, &a, 64);
            read_through(&reader, &setup.path, PAGES * 4096);
            drop(reader);
            a.detach();
        }
        let domain = b.domain();
        wait_until("quiet", || census(domain).is_some());
        let steward = domain.steward();
        let records = domain.records();
        let slots = domain.slots();
        let steward_holder = (0..slots.slot_count())
            .map(|s| slots.state(super::SlotIndex(s)).1)
            .find(|&h| records.read(h).is_some_and(|id| id == steward))
            .expect("the steward's slot");
        let pidfd = steward.open().expect("a steward runs");
        domain.set_steward_stop_at(stop_at);
        machine(setup.machine.path(), PRESSED_MIB);
        wait_until("the steward stopped by its lever", || {
            std::fs::read_to_string(format!("/proc/{}/stat", steward.pid)).is_ok_and(|stat| {
                stat.rsplit_once(") ")
                    .is_some_and(|(_, s)| s.starts_with('T'))
            })
        });
        // Read without the lock (the steward may hold it, stopped): the frames whose state
        // word says they are leased to it (G1 carves order-0 frames).
        let buddy = domain.buddy();
        let leased_to_it = (0..buddy.reached())
            .filter(|&f| buddy.is_leased(super::stack::Frame(f), Order(0), steward_holder))
            .count();
        held += usize::from(leased_to_it > 0);
        eprintln!("stop at {stop_at}: {leased_to_it} frames leased to the steward");
        // SAFETY: kill has no memory-safety preconditions; the steward is checked by its
        // pidfd (not reaped: it is nobody's child here).
        unsafe { libc::kill(steward.pid as libc::pid_t, libc::SIGKILL) };
        wait_until("the steward died", || pidfd.is_dead());
        machine(setup.machine.path(), PLENTY_MIB);
        let again = read_all(&config, &setup.path, PAGES * 4096);
        assert_eq!(
            again.misses + again.hits + again.read_ahead,
            PAGES,
            "{again:?}"
        );
        assert_eq!(domain.elections(), 2, "one new steward");
        {
            let reader = SharedReader::new(&b, &b, 8);
            read_through(&reader, &setup.path, PAGES * 4096);
        }
        wait_until("every frame accounted for, none the dead steward's", || {
            let Ok(allocator) = domain.buddy().check(&slots) else {
                return false;
            };
            let magazines: u32 = allocator
                .leased
                .iter()
                .map(|l| {
                    assert_ne!(l.2, steward_holder, "a frame left to the dead steward");
                    1u32 << (l.1).0
                })
                .sum();
            census(domain).is_some_and(|(free, cached, nodes)| {
                free + magazines + (cached + nodes) as u32 == QUOTA_DOMAIN_FRAMES
            })
        });
        b.detach();
    }
    assert!(
        held >= 1,
        "the lever never stopped the steward holding the frames it gives back"
    );
}

/// Reads all of `path` through `reader`, its bytes checked against file `id`'s stamps.
fn read_stamped<R: super::Run>(reader: &SharedReader<'_, R>, path: &Path, id: u64, len: u64) {
    let file = reader.open(path).unwrap();
    let mut buf = vec![0u8; len as usize];
    assert_eq!(reader.read_at(&file, &mut buf, 0).unwrap(), len as usize);
    assert!(buf == stamped(id, len), "wrong bytes read");
    reader.close(file).unwrap();
}

/// Shares and floors (queue.rs, "Owners and shares"): two members of a domain of 2,048
/// frames (the quota: plenty of memory), so each has a share of 1,024 and a floor of
/// 512. A scans a file of 8,192 pages, B reads a set of 200 pages, then A scans the file three times (its
/// misses reclaim, cycling the queue twelve times over); B re-reads its set after each
/// scan: every page a hit, its frames counted as its own. With floors ignored
/// (`Flaw::NoFloors`, the broken variant below) A's scans evict B's set.
#[test]
fn a_member_within_its_floor_keeps_its_set_while_another_scans_far_more_than_the_quota() {
    shares_and_floors(super::Flaw::None, Weight::DEFAULT, 200);
}

#[test]
fn shares_broken_no_floors() {
    expect_set_evicted(|| shares_and_floors(super::Flaw::NoFloors, Weight::DEFAULT, 200));
}

/// Weights (`CacheBuilder::share_weight`): B attached with three times A's weight has a
/// share of three quarters of the quota (1,536 frames), so a set of 1,200 pages, above
/// an equal share, stays cached through A's scans.
#[test]
fn a_member_of_three_times_the_weight_keeps_three_quarters_of_the_quota() {
    shares_and_floors(super::Flaw::None, Weight::new(300).unwrap(), 1200);
}

/// The same set with equal weights is above B's share (1,024 frames): A's scans take
/// part of it. So the weight is what kept it above.
#[test]
fn shares_equal_weights_lose_a_set_above_an_equal_share() {
    expect_set_evicted(|| shares_and_floors(super::Flaw::None, Weight::DEFAULT, 1200));
}

/// `run` fails on B's set not staying cached.
fn expect_set_evicted(run: impl FnOnce() + std::panic::UnwindSafe) {
    let message = failure_of("B's set evicted", run);
    assert!(message.contains("B's set stayed cached"), "{message}");
}

fn shares_and_floors(flaw: super::Flaw, b_weight: Weight, set_pages: u64) {
    const SCAN_PAGES: u64 = 8192;
    let setup = setup(set_pages * 4096);
    let scan = write_file(setup._data.path(), 1, SCAN_PAGES * 4096);
    let config = config(
        setup.home.path(),
        "shares",
        Duration::from_secs(120),
        setup.machine.path(),
    );
    let a = Member::attach(&config).unwrap();
    let b = Member::attach(&DomainConfig {
        weight: b_weight,
        ..config.clone()
    })
    .unwrap();
    let domain = b.domain();
    let queue = domain.queue();
    let a_run = MemberLever::new(&a, ()).with_flaw(flaw);
    let a_reader = SharedReader::new(&a, &a_run, 8);
    let b_reader = SharedReader::new(&b, &b, 8);
    // A's scan first, so that the queue is full of A's frames before B reads: A's misses
    // then always find frames of A's own to take (not only its window in flight, which
    // would leave B's above its floor the only ones a second pass could take).
    read_stamped(&a_reader, &scan, 1, SCAN_PAGES * 4096);
    // Twice: B's first read reclaims too, and may take a few of its own new frames (its
    // own are never protected from it) once A's left are within A's share.
    read_stamped(&b_reader, &setup.path, 0, set_pages * 4096);
    read_stamped(&b_reader, &setup.path, 0, set_pages * 4096);
    assert_eq!(
        queue.owned(b.holder().slot),
        set_pages as u32,
        "B's set stayed cached: all of it B's before A's scans"
    );
    let records = domain.records();
    let shares = super::queue::Shares::attached(domain.quota(), &domain.slots(), &records);
    let share = shares.of_slot(&records, b.holder().slot);
    let b_share = FRAMES * b_weight.get() / (Weight::DEFAULT.get() + b_weight.get());
    assert_eq!(
        (share.share_frames, share.floor_frames),
        (b_share, b_share / 2),
        "two members, the quota every frame, B's share by its weight"
    );
    assert_eq!(
        shares.of_slot(&records, a.holder().slot).share_frames,
        FRAMES - b_share,
        "A's share the rest"
    );
    // B's re-reads: pages found cached, and reads of its file (a miss's window reads the
    // pages after it too, which then count as hits: the file's reads tell).
    let (mut b_hits, mut b_preads) = (0, 0);
    for round in 0..3 {
        read_stamped(&a_reader, &scan, 1, SCAN_PAGES * 4096);
        let before = b_reader.counters();
        read_stamped(&b_reader, &setup.path, 0, set_pages * 4096);
        let after = b_reader.counters();
        b_hits += after.hits - before.hits;
        b_preads += after.preads - before.preads;
        eprintln!(
            "round {round}: B {} hits, {} misses, {} reads of its file; owned: A {}, B {}; \
             queued {}; A reclaimed {}",
            after.hits - before.hits,
            after.misses - before.misses,
            after.preads - before.preads,
            queue.owned(a.holder().slot),
            queue.owned(b.holder().slot),
            queue.count(),
            a_reader.counters().reclaimed,
        );
    }
    assert!(
        a_reader.counters().reclaimed >= 2 * SCAN_PAGES,
        "A's scans reclaimed"
    );
    assert_eq!(
        (b_hits, b_preads),
        (3 * set_pages, 0),
        "B's set stayed cached: every re-read a hit, its file not read"
    );
    assert_eq!(queue.owned(b.holder().slot), set_pages as u32);
    drop(a_reader);
    // A's clean detach: its frames nobody's, its count 0.
    assert_eq!(queue.owned(a.holder().slot), 0);
    a.detach();
    drop(b_reader);
    wait_until("quiet", || census(domain).is_some());
    b.detach();
}

/// A region file's first words (MAGIC, `version`, 8 slots, `FRAMES` frames) on `bytes`
/// bytes of zeros: what a steward of `version` formats (or began to).
fn region_of_version(version: u64, bytes: usize) -> Vec<u8> {
    let mut file = vec![0u8; bytes];
    let words = [0x666f_6c69_6f2d_646d_u64, version, 8, u64::from(FRAMES)];
    for (i, word) in words.iter().enumerate() {
        file[8 * i..8 * i + 8].copy_from_slice(&word.to_ne_bytes());
    }
    file
}

/// An upgrade meets an older version's domain still there (its steward outlives its
/// processes, its region lingers): files at the names before version 11 (`<name>.domain`
/// holding a version 10 region, `<name>.steward` locked as a live steward holds it,
/// `<name>.sock` listening). A new process attaches to a domain of its own version
/// beside it, reads through it, and the older files are left as they were. Before the
/// files were named by version, the new process met the old steward's socket and then
/// refused its region ("a domain region of version 10").
#[test]
fn an_upgrade_attaches_beside_an_older_versions_domain_and_leaves_it_as_it_is() {
    const DATA: u64 = 64 << 10;
    let setup = setup(DATA);
    let name = "life-upgrade";
    let home = setup.home.path();
    let old_region = region_of_version(10, 1 << 20);
    std::fs::write(home.join(format!("{name}.domain")), &old_region).unwrap();
    let election = std::fs::File::create(home.join(format!("{name}.steward"))).unwrap();
    let fd = std::os::unix::io::AsRawFd::as_raw_fd(&election);
    // SAFETY: flock on our own descriptor.
    let locked = unsafe { libc::flock(fd, libc::LOCK_EX) };
    assert_eq!(locked, 0);
    let _socket =
        std::os::unix::net::UnixListener::bind(home.join(format!("{name}.sock"))).unwrap();
    let config = config(home, name, Duration::from_secs(120), setup.machine.path());
    let read = read_all(&config, &setup.path, DATA);
    assert_eq!(read.misses + read.read_ahead, DATA / 4096, "{read:?}");
    let files = DomainFiles::of(name).unwrap();
    assert!(home.join(&files.region).exists());
    assert_ne!(
        files.region,
        std::ffi::OsString::from(format!("{name}.domain"))
    );
    assert!(std::fs::read(home.join(format!("{name}.domain"))).unwrap() == old_region);
    assert!(home.join(format!("{name}.sock")).exists());
    assert!(home.join(format!("{name}.steward")).exists());
}

/// A file at this version's region name that no steward of ours can use is refused with
/// a clear error, at once (not after the attach's 20 s wait for a steward), and left as
/// it is (DESIGN.md §6): a region of version 10, a file that is no region (once formatted
/// over: its bytes lost), one too short for a header. A view (`folio-stat`) refuses it
/// the same way.
#[test]
fn a_file_at_the_regions_name_that_is_no_region_of_ours_is_refused_and_left_as_it_is() {
    let setup = setup(4096);
    let home = setup.home.path();
    let foreign: Vec<u8> = b"not a folio region, but somebody's bytes\n".repeat(100);
    let cases: [(&str, Vec<u8>, &str); 3] = [
        (
            "life-v10",
            region_of_version(10, 1 << 20),
            "a domain region of version 10",
        ),
        ("life-foreign", foreign, "is not a domain region"),
        (
            "life-short",
            b"short".to_vec(),
            "a domain region of 5 bytes",
        ),
    ];
    for (name, bytes, said) in cases {
        let region = home.join(DomainFiles::of(name).unwrap().region);
        std::fs::write(&region, &bytes).unwrap();
        let config = config(home, name, Duration::from_secs(120), setup.machine.path());
        let started = Instant::now();
        let e = Member::attach(&config).map(|_| ()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{name}: {e}");
        assert!(e.to_string().contains(said), "{name}: {e}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{name}: refused after {:?}",
            started.elapsed()
        );
        let e = crate::DomainView::open(home, name).unwrap_err();
        assert!(e.to_string().contains(said), "{name}: {e}");
        assert!(
            std::fs::read(&region).unwrap() == bytes,
            "{name}: the file changed"
        );
    }
}

/// A member's lever that panics the reading thread at its first store under the queue's
/// or the allocator's lock (`Step::Stored` with either held by the member: a bug's
/// assertion in the middle of a change); its run's holds do as the test's `OnUnwind` says
/// (`MemberLever::on_unwind`).
#[derive(Default)]
struct PanicUnderLock {
    fired: std::sync::atomic::AtomicBool,
}

impl AtStep for PanicUnderLock {
    fn at(&self, member: &Member, step: super::Step) -> Result<(), super::Died> {
        use std::sync::atomic::Ordering::AcqRel;
        let domain = member.domain();
        let me = Some(member.holder());
        let under_lock = domain.queue().lock_holder() == me || domain.buddy().lock_holder() == me;
        if step == super::Step::Stored && under_lock && !self.fired.swap(true, AcqRel) {
            panic!("the lever panics the reader under a lock of the domain");
        }
        Ok(())
    }
}

/// A panic under a lock of the domain, in a process that catches it and lives on (a
/// server's `catch_unwind`; lock.rs, "A panic under the lock"): a forked member misses
/// page 0 of a 1 MiB file and its lever panics it at its first store under the queue's
/// or the allocator's lock. The process must abort (`SIGABRT`): the steward then marks it
/// dead and the domain goes on, so the parent's read of the whole file (every byte
/// checked) ends within `PANIC_READ_WAIT`, and the structures check. Broken
/// (`a_panic_under_a_domain_lock_caught_stalls_the_domain`: the hold's drop does not
/// abort) the child catches the panic and lives on (stopped, as a server between
/// requests), and the parent's read waits on its lock until the test kills it.
#[test]
fn a_panic_under_a_domain_lock_aborts_and_the_domain_goes_on() {
    panic_under_a_lock(OnUnwind::Abort);
}

/// The test above with the hold's drop not aborting (the lock kept by a live process):
/// fails on the survivor's read that waited.
#[test]
fn a_panic_under_a_domain_lock_caught_stalls_the_domain() {
    let message = failure_of("a caught panic under a lock passed", || {
        panic_under_a_lock(OnUnwind::KeepTheLock)
    });
    eprintln!("caught under a lock: {message}");
    assert!(
        message.contains("waited on the lock"),
        "failed otherwise: {message}"
    );
}

/// How long the parent's read may take once the child's panic ended (a sweep takes a
/// steward's tick or two; the read itself a few milliseconds).
const PANIC_READ_WAIT: Duration = Duration::from_secs(5);

fn panic_under_a_lock(on_unwind: OnUnwind) {
    use std::sync::atomic::{AtomicBool, Ordering};
    const LEN: u64 = 1 << 20;
    let setup = setup(LEN);
    let config = config(
        setup.home.path(),
        "life-panic",
        Duration::from_secs(120),
        setup.machine.path(),
    );
    let parent = Member::attach(&config).unwrap();
    let (config_ref, path) = (&config, &setup.path);
    let child = super::tests::fork(move || {
        let member = Member::attach(config_ref).expect("attach");
        let lever = MemberLever::new(&member, PanicUnderLock::default()).on_unwind(on_unwind);
        let reader = SharedReader::new(&member, &lever, 8);
        let file = reader.open(path).expect("open");
        let mut buf = vec![0u8; 4096];
        let read = std::panic::AssertUnwindSafe(|| reader.read_at(&file, &mut buf, 0));
        assert!(
            std::panic::catch_unwind(read).is_err(),
            "the lever never fired"
        );
        // Caught, and alive: a server between requests.
        // SAFETY: raise has no memory-safety preconditions.
        unsafe { libc::raise(libc::SIGSTOP) };
    });
    let status = super::tests::wait_for(child, libc::WUNTRACED);
    let aborted = libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGABRT;
    eprintln!("under a lock: the child aborted: {aborted} (status {status:#x})");
    let done = AtomicBool::new(false);
    let (waited, killed) = std::thread::scope(|s| {
        let reading = s.spawn(|| {
            let started = Instant::now();
            let reader = SharedReader::new(&parent, &parent, 8);
            read_stamped(&reader, &setup.path, 0, LEN);
            done.store(true, Ordering::Release);
            started.elapsed()
        });
        let deadline = Instant::now() + PANIC_READ_WAIT;
        while !done.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        // The child is stopped (the broken hold): its death lets the read end.
        let killed = !done.load(Ordering::Acquire) && libc::WIFSTOPPED(status);
        if killed {
            super::tests::kill(child);
        }
        (reading.join().unwrap(), killed)
    });
    assert!(
        waited < PANIC_READ_WAIT && !killed,
        "the survivor's read waited on the lock of a process that panicked under it \
         and lives on ({waited:?}, ended by its kill: {killed})"
    );
    assert!(aborted, "the child did not abort: status {status:#x}");
    eprintln!("under a lock: the survivor read the file in {waited:?}");
    let domain = parent.domain();
    wait_until("the dead member swept", || {
        super::tests_domain::is_quiet(domain, parent.holder())
    });
    super::tests_read::check_all(domain);
    parent.detach();
}
