//! The domain's data area populated ahead of its allocator (issue 45, done-when 2's miss;
//! docs/sharing.md "The data area populated ahead"): the steward faults the region's
//! tmpfs pages in, a 2 MiB chunk at a time, before the buddy leases their frames, so that
//! a member's miss finds its frame's page in the file and pays no allocation and zeroing
//! of it in its `pread` (7-10 µs of a miss's CPU on this machine: docs/sharing.md).
//!
//! Design: today's arena (`arena/populate.rs`) keeps a lead of populated free memory
//! ahead of its allocator and populates nothing beyond it: memory resident before it is
//! needed is bounded by the lead. The domain follows the same policy, with the buddy's
//! chunks as the unit: a **chunk** is the frames of one block of `ORDER_MAX`
//! (`CHUNK_FRAMES`, 2 MiB), the data area's last one shorter. Each step
//! (`Populator::step`) populates at most one chunk, chosen by `next_chunk` (pure), the
//! first of:
//! 1. a chunk the allocator has **begun** (below its frontier, and its first frame not
//!    the head of a whole free block of `ORDER_MAX`: split, leased, cached, or a shorter
//!    last chunk, whose blocks are smaller) that is not populated yet: its free frames sit
//!    on the smaller lists, which the allocator takes before anything else (`take_block`);
//! 2. one of the next `lead` chunks the allocator takes whole, in its order: the blocks on
//!    the list of `ORDER_MAX` (freed whole chunks, populated already unless given back),
//!    then the chunks at its frontier (buddy.rs, "Frames never reached": a fresh domain's
//!    allocator goes up from frame 0).
//!
//! **The lead** (`Populator::lead`): a thirty-second of the begun chunks, at least
//! `LEAD_CHUNKS_MIN` (one, 2 MiB) and at most `LEAD_CHUNKS_MAX` (16 MiB) or an eighth of
//! the area. The arena's lead is as large as what is allocated (8 to 64 MiB): for a cache of
//! one process, memory it will use; for a domain, whose memory is issue 45's one copy of
//! the data (done-when 1: within 1.1x), 64 MiB populated ahead of 87 MiB cached was most
//! of the excess (docs/sharing.md, "The domain's memory as used"). A few chunks suffice
//! for what the lead is for: the misses between two polls of the steward (10 ms) find
//! their frames populated; misses that outrun it fault their pages in themselves (a few
//! µs each), as before the populator.
//!
//! Why no lock: populating changes no byte (`Domain::populate_data`: `MADV_POPULATE_WRITE`
//! maps a page the file has, or adds a zeroed one where it had none, which read as zeros
//! already), so any frame may be populated at any moment, leased or cached, by whoever
//! (never a store: a store of the byte it read could undo a concurrent `pread`'s). The
//! allocator's words are read as hints (`SharedBuddy::seems_whole`, `listed_first`): a
//! stale answer populates a chunk too early or too late, never a wrong byte.
//!
//! What it costs: the population runs in the steward (its CPU, and the tmpfs pages are
//! charged to its memory cgroup), one chunk per step (0.3-9 ms here at load 8) between its polls,
//! so an attach waits for at most one chunk.
//!
//! **Wake-ups** (`poll_after`): the steward steps every `POPULATE_POLL` (10 ms) while the
//! allocator moves (a chunk begun, the blocks it splits next changed) or a step had work;
//! each step that finds nothing to do and the allocator unmoved since the last such step
//! doubles the wait, up to 640 ms (`POLL_DOUBLINGS`): a domain its members do not fill
//! costs about 1.5 wake-ups a second instead of 100. The price: a burst of misses after a
//! quiet spell has the lead (2 to 16 MiB) populated ahead, and the steward may look up
//! to 640 ms late; misses that outrun the lead meanwhile fault their pages in, as before
//! the populator. No member tells the steward of its need (a futex word bumped by the
//! allocator when a chunk is begun would need a second thread in the steward, which
//! waits in `poll` on descriptors, and a store in the allocator's models). Memory: every
//! begun chunk (in use) plus the lead, at most 16 MiB or an eighth of the data area
//! beyond it; a domain of the machine's size is not populated at its creation, as a
//! lazily built arena is not, and the allocator's frames' words past its frontier are
//! never read here (buddy.rs).
//!
//! Protection: the populator is the steward's own (one thread); which chunks it knows
//! populated is its own memory (`Known`), learned from the file (`mincore`) the first
//! time a chunk is a candidate, so a new steward does not populate again what an old one
//! did.
//!
//! **Given back**: a chunk whose free frames the steward punched while nobody was
//! attached (steward.rs, "Alone": `given_back`) is not populated again as a begun chunk
//! (rule 1): the members map the frames they lease (read.rs's `map_batch`), so memory
//! given back under pressure comes back only as it is used; it may be populated again
//! as one of the lead's whole blocks (rule 2: the lead's bound). The steward steps the
//! populator only while a member is attached (nobody else allocates).
//!
//! Limits: a new steward learns given-back chunks as not whole (`mincore`) and populates
//! a begun one again; an allocator that outruns
//! it (a chunk consumed within one `POPULATE_POLL`, or a steward that gets no CPU) leaves
//! the misses that outran it to fault their pages in, as before; a member's own mapping
//! still maps each page at its first touch (a minor fault, the `pread`'s); a kernel
//! without `MADV_POPULATE_WRITE` (before 5.14) populates nothing.

use std::time::Duration;

use super::buddy::{Order, SharedBuddy, ORDER_MAX};
use super::domain::Domain;
use super::stack::Frame;

/// The frames of a chunk: one block of `ORDER_MAX`.
pub(crate) const CHUNK_FRAMES: u32 = 1 << ORDER_MAX;
/// The most chunks populated ahead of the allocator: 16 MiB (module docs, "The lead").
const LEAD_CHUNKS_MAX: u32 = 8;
/// The most frames past the allocator's frontier that the populator populates (its lead
/// there, rule 2; the frontier never goes back): the frames past it hold no page of the
/// region file, and a scan for pages to give back stops there (steward.rs,
/// `give_back`).
pub(crate) const LEAD_FRAMES_MAX: u32 = LEAD_CHUNKS_MAX * CHUNK_FRAMES;
/// The lead before anything is allocated, and while little is: 1 chunk, 2 MiB.
const LEAD_CHUNKS_MIN: u32 = 1;
/// One chunk of lead per this many begun: past the first, the lead is about 3% of what
/// is used.
const LEAD_PER_BEGUN: u32 = 32;
/// How often the steward steps the populator while it is not done (the arena's
/// populator sleeps at most 20 ms; a miss here costs 50-120 µs of wall time, so a 2 MiB
/// chunk lasts at least 25 ms of misses, and the default lead four of them).
pub(crate) const POPULATE_POLL: Duration = Duration::from_millis(10);
/// How many times the poll doubles while the allocator does not move (`poll_after`):
/// 6, so at most 640 ms between looks at a domain nobody allocates from.
const POLL_DOUBLINGS: u32 = 6;

/// What the steward knows of a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Known {
    /// Not looked at yet.
    Unknown,
    /// Every page in the file (populated by us, or found so).
    Populated,
    /// Given back by the steward (steward.rs, "Alone"): not populated again as a begun
    /// chunk (its frames are mapped by the members that lease them), only as one of the
    /// lead's whole blocks.
    GivenBack,
    /// Looked at, not whole: to populate.
    Missing,
}

/// What a step did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stepped {
    /// Populated (or found populated) this chunk: there may be more to do now.
    Chunk(u32),
    /// The lead is populated: nothing to do until the allocator moves.
    Ahead,
    /// Every chunk is populated: nothing to do, ever.
    Whole,
    /// The kernel has no `MADV_POPULATE_WRITE`: nothing to do, ever.
    Unsupported,
    /// Populating failed (no room in the file system, no memory, a signal): try again at
    /// the next poll.
    Failed,
}

impl Stepped {
    /// Whether the populator should step again at once (a chunk done, more may be due).
    pub(crate) fn again_now(&self) -> bool {
        matches!(self, Stepped::Chunk(_))
    }

    /// Whether it has nothing to do ever again.
    pub(crate) fn finished(&self) -> bool {
        matches!(self, Stepped::Whole | Stepped::Unsupported)
    }
}

/// The steward's populator of its domain's data area (module docs).
#[derive(Debug)]
pub(crate) struct Populator {
    known: Vec<Known>,
    populated: u32,
    lead_max: u32,
    unsupported: bool,
    /// What the allocator looked like at the last step that had nothing to do (a hash of
    /// the begun chunks and the blocks it splits next: `backoff`).
    seen: u64,
    /// Steps in a row that had nothing to do and saw the allocator unmoved.
    quiet_steps: u32,
}

impl Populator {
    /// A populator of a data area of `frames` frames, knowing nothing populated yet.
    ///
    /// Context: the steward; allocates its one byte per chunk here.
    pub(crate) fn new(frames: u32) -> Populator {
        let chunks = frames.div_ceil(CHUNK_FRAMES);
        Populator {
            known: vec![Known::Unknown; chunks as usize],
            populated: 0,
            lead_max: (chunks / 8).clamp(1, LEAD_CHUNKS_MAX),
            unsupported: false,
            seen: 0,
            quiet_steps: 0,
        }
    }

    /// How long the steward may wait before the next step (module docs, "Wake-ups"):
    /// `POPULATE_POLL` while the allocator moves or there was work, doubling at each step
    /// that found it unmoved with nothing to do, up to `POPULATE_POLL << POLL_DOUBLINGS`.
    pub(crate) fn poll_after(&self) -> Duration {
        POPULATE_POLL * (1 << self.quiet_steps.min(POLL_DOUBLINGS))
    }

    /// A step found nothing to do with the allocator as `seen` shows it: one quiet step
    /// more if it did not move since the last such step, else the first.
    fn backoff(&mut self, seen: u64) {
        if seen == self.seen {
            self.quiet_steps = self.quiet_steps.saturating_add(1);
        } else {
            self.seen = seen;
            self.quiet_steps = 0;
        }
    }

    /// One step (module docs): the next chunk due populated, if any.
    ///
    /// Context: the steward, between its polls; may take a few milliseconds (one chunk's
    /// pages allocated and zeroed); takes no lock.
    pub(crate) fn step(&mut self, domain: &Domain) -> Stepped {
        if self.unsupported {
            return Stepped::Unsupported;
        }
        if self.populated as usize == self.known.len() {
            return Stepped::Whole;
        }
        let buddy = domain.buddy();
        let frames = domain.geometry().frames;
        // Chunks past the allocator's frontier are virgin (buddy.rs, "Frames never
        // reached"): not begun, and their words are not read (they would become
        // resident). `begun` covers the chunks below it only: a step costs what is
        // reached, not the domain's size (a 1 TiB domain has 2^19 chunks).
        let reached = buddy.reached().div_ceil(CHUNK_FRAMES);
        let begun: Vec<bool> = (0..reached)
            .map(|c| !buddy.seems_whole(Frame(c * CHUNK_FRAMES)))
            .collect();
        let lead = self.lead(begun.iter().filter(|&&b| b).count() as u32);
        let mut next: Vec<u32> = listed_next(&buddy, lead);
        next.extend(
            (reached..self.known.len() as u32).take((lead as usize).saturating_sub(next.len())),
        );
        let Some(chunk) = next_chunk(&begun, &next, &self.known) else {
            self.backoff(allocator_seen(&begun, &next));
            return Stepped::Ahead;
        };
        self.quiet_steps = 0;
        let range = chunk * CHUNK_FRAMES..((chunk + 1) * CHUNK_FRAMES).min(frames);
        if self.known[chunk as usize] == Known::Unknown {
            let whole = domain
                .data_resident(range.clone())
                .is_ok_and(|pages| pages.iter().all(|&p| p));
            if whole {
                self.mark_populated(chunk);
                return Stepped::Chunk(chunk);
            }
            self.known[chunk as usize] = Known::Missing;
        }
        match domain.populate_data(range) {
            Ok(()) => {
                self.mark_populated(chunk);
                Stepped::Chunk(chunk)
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                self.unsupported = true;
                Stepped::Unsupported
            }
            Err(_) => Stepped::Failed,
        }
    }

    /// The steward gave `frames` back (punched them): the chunks they touch are no longer
    /// populated, and are not populated again as begun chunks (module docs, rule 1).
    ///
    /// Context: the steward, after `Domain::punch_data` of `frames`.
    pub(crate) fn given_back(&mut self, frames: std::ops::Range<u32>) {
        if frames.is_empty() {
            return;
        }
        let chunks = frames.start / CHUNK_FRAMES..(frames.end - 1) / CHUNK_FRAMES + 1;
        for chunk in chunks {
            let Some(known) = self.known.get_mut(chunk as usize) else {
                continue;
            };
            if *known == Known::Populated {
                self.populated -= 1;
            }
            *known = Known::GivenBack;
        }
        debug_assert!(self.populated as usize <= self.known.len());
    }

    fn mark_populated(&mut self, chunk: u32) {
        assert_ne!(self.known[chunk as usize], Known::Populated);
        self.known[chunk as usize] = Known::Populated;
        self.populated += 1;
        debug_assert!(self.populated as usize <= self.known.len());
    }

    /// The chunks to keep populated ahead when `begun` chunks are begun: a thirty-second
    /// of them, between `LEAD_CHUNKS_MIN` and `LEAD_CHUNKS_MAX`, and at most `lead_max` (an
    /// eighth of the area). Module docs, "The lead".
    fn lead(&self, begun: u32) -> u32 {
        (begun / LEAD_PER_BEGUN)
            .clamp(LEAD_CHUNKS_MIN, LEAD_CHUNKS_MAX)
            .min(self.lead_max)
    }
}

/// A hash of what the populator sees of the allocator: which chunks are begun, and the
/// blocks it splits next (FNV-1a over their numbers). Equal hashes: unmoved (a collision
/// only delays a step to the next poll).
fn allocator_seen(begun: &[bool], next: &[u32]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let numbers = begun
        .iter()
        .enumerate()
        .filter(|(_, &b)| b)
        .map(|(c, _)| c as u64)
        .chain(std::iter::once(u64::MAX))
        .chain(next.iter().map(|&c| u64::from(c)));
    for n in numbers {
        hash = (hash ^ n).wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The chunks of the first `lead` blocks on the list of `ORDER_MAX` (a hint: module docs).
fn listed_next(buddy: &SharedBuddy<'_>, lead: u32) -> Vec<u32> {
    buddy
        .listed_first(Order(ORDER_MAX), lead as usize)
        .into_iter()
        .map(|frame| frame.0 / CHUNK_FRAMES)
        .collect()
}

/// The policy (module docs), pure: the next chunk to populate, given which chunks the
/// allocator has begun (`begun[c]` for each chunk c below its frontier; those past it are
/// not), the chunks of the blocks it splits next (in its order), and what is known
/// populated; `None` when the lead is populated.
fn next_chunk(begun: &[bool], next: &[u32], known: &[Known]) -> Option<u32> {
    assert!(begun.len() <= known.len());
    let due = |c: u32| {
        known
            .get(c as usize)
            .is_some_and(|&k| k != Known::Populated)
    };
    // Begun chunks from the highest (a fresh domain's allocator goes down: module docs),
    // but not one the steward gave back.
    (0..begun.len() as u32)
        .rev()
        .find(|&c| begun[c as usize] && due(c) && known[c as usize] != Known::GivenBack)
        .or_else(|| next.iter().copied().find(|&c| due(c)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::tests::DomainHome;

    const U: Known = Known::Unknown;
    const P: Known = Known::Populated;

    #[test]
    fn begun_chunks_come_first_then_the_blocks_split_next() {
        // Nothing begun: the list's order (the highest block first in a fresh domain).
        assert_eq!(next_chunk(&[false; 4], &[3, 2, 1], &[U; 4]), Some(3));
        assert_eq!(next_chunk(&[false; 4], &[3, 2, 1], &[U, U, P, P]), Some(1));
        // The lead populated: nothing to do, whatever lies beyond it.
        assert_eq!(next_chunk(&[false; 4], &[3, 2], &[U, U, P, P]), None);
        // A begun chunk not populated (the allocator outran us, or a shorter last chunk)
        // comes before the lead.
        assert_eq!(
            next_chunk(&[true, false, false, false], &[3], &[U, U, U, U]),
            Some(0)
        );
        assert_eq!(
            next_chunk(&[true, false, false, true], &[2], &[P, U, U, P]),
            Some(2)
        );
        // A wrong hint (a chunk past the area) is ignored.
        assert_eq!(next_chunk(&[false; 2], &[7, 0], &[U, U]), Some(0));
        // A begun chunk given back is not populated again; a whole block given back may
        // be, as one of the lead.
        const G: Known = Known::GivenBack;
        assert_eq!(next_chunk(&[true, false], &[], &[G, P]), None);
        assert_eq!(next_chunk(&[true, false], &[1], &[G, G]), Some(1));
        // The begun chunks are told below the frontier only (a step costs what is
        // reached): the chunks past it are the lead's.
        assert_eq!(next_chunk(&[true], &[1, 2], &[P, U, U]), Some(1));
        assert_eq!(next_chunk(&[], &[0], &[U, U]), Some(0));
    }

    /// A domain of `chunks` chunks made in a temporary home (by this process, as its
    /// steward would: no steward runs, so only the test's populator populates), and a
    /// slot in it.
    fn domain(name: &str, chunks: u32) -> (DomainHome, Domain, super::super::Holder) {
        use super::super::domain::{DomainFiles, Geometry};
        let home = DomainHome::new();
        let dir = crate::segment::SegmentDir::open(home.path(), crate::segment::DiskDir::Refused)
            .unwrap();
        let files = DomainFiles::of(name).unwrap();
        let geometry = Geometry {
            slots: 4,
            frames: chunks * CHUNK_FRAMES,
        };
        let (domain, _) = Domain::create(&dir, &files, geometry).unwrap();
        let me = domain.slots().attach(super::super::Flaw::None).unwrap();
        (home, domain, me)
    }

    /// Which chunks have every page in the file, and which have none (`mincore`).
    fn resident_chunks(domain: &Domain) -> (Vec<u32>, Vec<u32>) {
        let frames = domain.geometry().frames;
        let pages = domain.data_resident(0..frames).unwrap();
        let (mut whole, mut empty) = (Vec::new(), Vec::new());
        for (c, chunk) in pages.chunks(CHUNK_FRAMES as usize).enumerate() {
            if chunk.iter().all(|&p| p) {
                whole.push(c as u32);
            } else if chunk.iter().all(|&p| !p) {
                empty.push(c as u32);
            }
        }
        (whole, empty)
    }

    /// Steps the populator until it has nothing to do now; the chunks it populated.
    fn settle(populator: &mut Populator, domain: &Domain) -> Vec<u32> {
        let mut chunks = Vec::new();
        loop {
            match populator.step(domain) {
                Stepped::Chunk(c) => chunks.push(c),
                Stepped::Ahead | Stepped::Whole => return chunks,
                other => panic!("the populator: {other:?}"),
            }
        }
    }

    /// The data area is populated ahead of the allocator and no further: at first the
    /// lead (the blocks the allocator splits first), and then, stepped between the
    /// allocator's batches as the steward steps it between its polls, every frame the
    /// allocator leases is in the file before its lease, while the chunks beyond the
    /// lead stay empty; one that the allocator outran is populated at the next step.
    /// Deterministic: one process, the populator stepped by the test, `mincore` read.
    #[test]
    fn the_data_area_is_populated_ahead_of_the_allocator_and_no_further() {
        use super::super::terms::Unkillable;
        // 16 chunks (32 MiB): the lead is 1 chunk (the least).
        let (_home, domain, me) = domain("populate", 16);
        let (slots, buddy) = (domain.slots(), domain.buddy());
        let mut populator = Populator::new(domain.geometry().frames);
        assert_eq!(
            resident_chunks(&domain).1.len(),
            16,
            "a new region is empty"
        );
        // Nothing leased: the lead, the frontier's first chunk.
        assert_eq!(settle(&mut populator, &domain), vec![0]);
        let (whole, empty) = resident_chunks(&domain);
        assert_eq!(whole, vec![0]);
        assert_eq!(
            empty,
            (1..16).collect::<Vec<_>>(),
            "populated past the lead"
        );
        // Lease the area in batches of 16, stepping between them: every frame leased is
        // in the file already, and at most the lead lies populated beyond what is begun.
        let mut leased = Vec::new();
        loop {
            settle(&mut populator, &domain);
            let mut batch = Vec::with_capacity(16);
            let got = buddy
                .lease_batch(16, me, &mut batch, &slots, &Unkillable)
                .unwrap();
            if got == 0 {
                break;
            }
            for frame in &batch {
                assert!(
                    domain.data_resident(frame.0..frame.0 + 1).unwrap()[0],
                    "frame {} leased before it was populated",
                    frame.0
                );
            }
            let reached = buddy.reached() / CHUNK_FRAMES;
            let begun = (0..reached)
                .filter(|&c| !buddy.seems_whole(Frame(c * CHUNK_FRAMES)))
                .count();
            let populated = 16 - resident_chunks(&domain).1.len();
            assert!(
                populated <= begun + 1,
                "{populated} populated, {begun} begun"
            );
            leased.extend(batch);
            if leased.len() == 8 * CHUNK_FRAMES as usize {
                // Lease 3 chunks without a step (an allocator that outruns the steward):
                // the next steps populate the chunks begun meanwhile first.
                let mut outran = Vec::new();
                while outran.len() < 3 * CHUNK_FRAMES as usize {
                    buddy
                        .lease_batch(16, me, &mut outran, &slots, &Unkillable)
                        .unwrap();
                }
                let chunks = settle(&mut populator, &domain);
                assert_eq!(&chunks[..1], &[10], "the chunk the allocator outran into");
                for frame in &outran {
                    assert!(domain.data_resident(frame.0..frame.0 + 1).unwrap()[0]);
                }
                leased.extend(outran);
            }
        }
        assert_eq!(leased.len(), 16 * CHUNK_FRAMES as usize);
        assert_eq!(populator.step(&domain), Stepped::Whole);
        assert_eq!(resident_chunks(&domain).0.len(), 16);
        buddy
            .return_batch(&leased, me, &slots, &Unkillable)
            .unwrap();
        // A new populator (a new steward) finds the lead's chunks populated (`mincore`):
        // no work but a look.
        let mut again = Populator::new(domain.geometry().frames);
        assert_eq!(settle(&mut again, &domain).len(), 1);
        domain.slots().detach(me);
    }

    /// The steward populates a new domain's lead by itself (its `serve` steps the
    /// populator), and nothing past it while nobody leases. Waits for the steward (a
    /// 60 s deadline, never a hang); what it checks does not depend on timing.
    #[test]
    fn the_steward_populates_the_lead_of_a_new_domain() {
        use super::super::attach::{DomainConfig, Member};
        use super::super::domain::Geometry;
        let home = DomainHome::new();
        let config = DomainConfig {
            dir: home.path().to_path_buf(),
            name: "populate-steward".into(),
            geometry: Geometry {
                slots: 4,
                frames: 16 * CHUNK_FRAMES,
            },
            linger: Duration::from_millis(100),
            memory_files: None,
            weight: crate::shared::record::Weight::DEFAULT,
        };
        let member = Member::attach(&config).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while resident_chunks(member.domain()).0 != vec![0] {
            assert!(
                std::time::Instant::now() < deadline,
                "the steward did not populate the lead: {:?}",
                resident_chunks(member.domain())
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // Two more polls of the steward: still nothing past the lead.
        std::thread::sleep(2 * POPULATE_POLL);
        let (whole, empty) = resident_chunks(member.domain());
        assert_eq!(whole, vec![0]);
        assert_eq!(
            empty,
            (1..16).collect::<Vec<_>>(),
            "populated past the lead"
        );
        member.detach();
    }

    /// The backoff (module docs, "Wake-ups"): with nothing to do and the allocator
    /// unmoved, each step doubles the wait, up to 640 ms; a chunk begun brings it back to
    /// 10 ms at the next step. Deterministic: one process steps the populator itself.
    #[test]
    fn the_poll_backs_off_while_the_allocator_does_not_move() {
        use super::super::terms::Unkillable;
        let (_home, domain, me) = domain("backoff", 16);
        let (slots, buddy) = (domain.slots(), domain.buddy());
        let mut populator = Populator::new(domain.geometry().frames);
        settle(&mut populator, &domain);
        // The settling's last step had nothing to do, and saw the allocator new.
        assert_eq!(populator.poll_after(), POPULATE_POLL);
        let mut waits = Vec::new();
        for _ in 0..8 {
            assert_eq!(populator.step(&domain), Stepped::Ahead);
            waits.push(populator.poll_after().as_millis());
        }
        assert_eq!(waits, vec![20, 40, 80, 160, 320, 640, 640, 640]);
        // A batch leased: a chunk begun (the allocator moved), a step has work or sees
        // the move.
        let mut batch = Vec::new();
        buddy
            .lease_batch(16, me, &mut batch, &slots, &Unkillable)
            .unwrap();
        populator.step(&domain);
        assert_eq!(populator.poll_after(), POPULATE_POLL);
    }

    #[test]
    fn the_lead_is_a_thirty_second_of_what_is_begun_from_1_to_8_chunks() {
        // A 4 GiB area: 2048 chunks, the lead 1 to 8 chunks (2 to 16 MiB).
        let big = Populator::new(2048 * CHUNK_FRAMES);
        assert_eq!(
            (big.lead(0), big.lead(44), big.lead(80), big.lead(1000)),
            (1, 1, 2, 8)
        );
        // 13 chunks: an eighth is one chunk.
        let small = Populator::new(12 * CHUNK_FRAMES + 64);
        assert_eq!((small.lead(0), small.lead(5)), (1, 1));
    }
}
