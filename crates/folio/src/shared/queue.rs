//! The eviction queue in the shared region and its reclaim (issue 45 step 6's first part,
//! docs/sharing.md "The eviction queue"): a doubly linked list of the frames handed to the
//! cache, oldest first, under one holder lock (lock.rs), each primitive one intent; a
//! referenced bit per frame that a hit sets without the lock (CLOCK's second chance, as
//! `eviction/` and the kernel's referenced bit); a pin word per frame that a reader sets
//! without the lock and reclaim must freeze before it may take the frame; and `reclaim`,
//! which takes the coldest frames out of their file's index (leaving a shadow) and frees
//! them to the buddy allocator (buddy.rs).
//!
//! # Whose is a frame
//!
//! A frame leased from the buddy allocator is its lessee's (LEASED(0, me): the steward's
//! sweep of a dead lessee frees it). A frame holding data another process may read is the
//! **cache's** (CACHED: buddy.rs): no sweep frees it, only reclaim or a removal. The
//! hand-over is one of the stores of this queue's ADD intent: the same change links the
//! frame at the tail and makes it CACHED. A death at any store leaves it the lessee's and
//! not queued (no intent published: swept free), or an ADD that whoever takes the lock
//! over redoes (queued and CACHED). The steward therefore sweeps this queue (`sweep`:
//! takes its lock, redoing a dead holder's ADD) before the allocator.
//!
//! A frame enters its file's index **after** its hand-over, never before, and its lessee
//! pins it (below) before the ADD and unpins it after the insertion (a miss: after its
//! read, "In flight"): while it is queued
//! and not yet indexed reclaim cannot freeze it. If the lessee dies between, the steward
//! drops its pins and the frame stays queued, in no index: reclaim frees such a frame
//! (it looks its page up and finds another frame or nothing). So an index never names a
//! frame that is not CACHED: it is inserted after the ADD and removed before the free.
//! A live lessee whose insertion did not place its frame frees it once unpinned
//! (`drop_unplaced`: under the lock, only if it is still CACHED at that page, unpinned,
//! unmarked and named by no index, since it may have been reclaimed and leased again
//! meanwhile, even by a writer for the same page). The loom models
//! `drop_unplaced_races_a_hit_and_a_reclaim` (the lessee dying at each step) and
//! `drop_unplaced_races_a_hit_and_a_writers_install` (that ABA) check it, and
//! `drop_unplaced_broken_unchecked` (`Flaw::DropUnchecked`: the checks of `remove` only)
//! fails: the writer's page is taken out of its index.
//!
//! # Layout (from `base`, 8-word aligned)
//!
//! ```text
//!   base + 0..8    the lock line: lock, intent, 4 args, ENDS (6: head + 1 | tail + 1 << 32,
//!                  0 for an empty queue), STATUS (7: the count | the victim << 32, below)
//!   then F lines   frame f's line of 8 words (`base + 8 + 8 f`: a hit loads only its
//!                  own frame's line, and every word it loads is on it):
//!     + 0  NEXT[f]: the next frame toward the tail, + 1 (0: none)
//!     + 1  PREV[f]: the previous frame toward the head, + 1 (0: none)
//!     + 2  FILE[f]: the file whose page f caches (a `FileNo`, bits 0..32), and f's owner
//!          (its slot + 1, bits 32..48; 0: nobody's: "Owners and shares")
//!     + 3  PAGE[f]: the page
//!     + 4  REF[f]: 1 once a hit touched f since reclaim last looked (a hint)
//!     + 5  PIN[f]: one bit per process slot holding f pinned, `FROZEN` (bit 63) while
//!          reclaim takes it
//!     + 6  GEN[f]: f's reuse generation, raised by every eviction of f (E5) before its
//!          free and by every hand-over: the optimistic hit's seqlock word (below), its
//!          count in bits 0..56; FLIGHT[f] in bits 56..63, the slot + 1 of the reader
//!          whose `preadv` fills f, 0 once f's bytes are the page's; WAITERS in bit 63,
//!          a reader may sleep on the word ("In flight", below)
//!     + 7  HELD[f]: 0, or the writer's mark `(slot + 1) << 48 | seq` while f holds bytes
//!          its writer returned and has not written to disk yet ("Writes", below)
//! ```
//!
//! STATUS's victim (bits 32..64): the frame being reclaimed or removed, + 1, in bits
//! 32..62, with `SHADOW` (bit 62: reclaim leaves a shadow; a removal leaves nothing) and
//! `DETACHED` (bit 63: unlinked from the queue), or 0.
//!
//! # Pins, touches and the hit
//!
//! A hit (`pin_hit`): looks the page up (lock-free, index.rs), pins the frame (a CAS that
//! sets this process's bit in PIN, refused while FROZEN: the hit then treats the page as
//! a miss: the frame is being reclaimed, and the miss path finds its page gone or retries
//! its insertion), looks the page up again (still that frame: it is the page's, and it
//! stays so while pinned), touches REF (a load, and a store only if it was 0: a hit
//! stores to no line it does not need to), reads, and unpins (`unpin`: clears its bit).
//! Reclaim takes a frame only by freezing PIN from 0 (a CAS 0 -> FROZEN): a pinned frame
//! is given a second chance. So a reader holding a pin reads the frame's data unchanged,
//! and a pin taken on a frame after it was reclaimed and reused fails the second look-up
//! (the reclaim removed the page from the index before it unfroze and freed the frame:
//! the pin's acquire CAS sees that removal). A pin is one atomic RMW: a process dying
//! around it has set its bit or not, so the steward's sweep drops a dead process's pins
//! exactly (clears its bit in every PIN word) from the shared words alone.
//!
//! # Threads
//!
//! A process's threads share its holder (its slot and generation: `shared::reader`), so
//! they share its one bit in each PIN word: two of them cannot both hold a frame pinned
//! by it, and the first unpin would drop the other's pin (reclaim could then free the
//! frame under a copy). So a pin that finds its own bit already set is **refused**
//! (`Unpinnable::Ours`), never taken as made: a hit that meets it reads the page another
//! way (read.rs: uncached), and the miss's pin of the frame it just leased (`hand_over`),
//! which can meet only a sibling's passing pin (a `pin_hit` that found the frame's old
//! incarnation in an index, pinned it after its free, and will unpin it when its second
//! look-up fails: the frame is in no index before the hand-over), waits for that unpin.
//!
//! # The optimistic hit (a seqlock per frame)
//!
//! `read_hit`, which read.rs tries first (`pin_hit` is its fallback), stores nothing but
//! the touch: (1) walk the index to the page's slot S, which names frame f; (2) load
//! GEN[f] (acquire): g; (3) load S again (acquire): still f, else stale; then FILE[f] and
//! PAGE[f]: the file and page asked for, else stale; (4) copy f's bytes with byte-wise
//! atomic loads; (5) `fence(Acquire)`; (6) load GEN[f] again: g, else stale. GEN, FILE,
//! PAGE and REF are on f's line (Layout): the hit loads one line of the queue. Why a
//! validated copy is the page's: call *incarnation v* f's life between the v-th raise of
//! GEN[f] and the next. Reclaim raises GEN[f] at E5, after E4 took f out of its index and
//! before E6 freed it. (a) (2) read raise v (acquire of its release store), so (3) sees
//! E4 of every earlier incarnation: an order-0 folio is stored in one slot, by its
//! insertion, and taken out of that same slot by E4 (a node that holds a folio is never
//! pruned, so it does not move while the folio is in it; a tree's nodes stay its own while
//! its file is open), so the folio word f that (3) reads in S was stored by the insertion
//! of some incarnation w >= v. If w > v, raise w happens before that insertion, which (3)
//! read, and (6) comes after (3): (6) sees GEN[f] >= w, stale. So w = v: incarnation v
//! inserted f at S, its bytes complete, and its FILE and PAGE stored, before that
//! insertion, which (3) read (acquire). (b) A later store to f's bytes, FILE or PAGE is a
//! lessee's of incarnation v' > v, made after its lease and the **lessee's release fence**
//! (buddy.rs, `lessee_fence`, after the lease's lock acquire, which read the free's lock
//! release, which came after raise v'). If (3)'s FILE and PAGE loads or (4) read any of
//! them, that fence synchronizes with (5), so raise v' happens before (6): stale. So FILE
//! and PAGE are incarnation v's: v cached this page of this file, and (4) read its bytes
//! (a CACHED frame is not written again until it is freed). Hence: same generation at (2)
//! and (6), f in S at (1) and (3), and f's file and page the ones asked for => the copy
//! is the page's. Why the page check: S's node may have been emptied (a removal leaves no
//! shadow), pruned to the tree's pool, and linked again for other pages, with f reused and
//! inserted at S for another page meanwhile: S then names incarnation v, which caches
//! another page (the lever test `an_optimistic_hit_of_a_frame_moved_to_another_page_...`
//! forces it; `Flaw::NoPageCheck` leaves the check out and returns the other page's
//! bytes). This replaces the second walk from the root of the version before it (a walk
//! reached S for this page, so S's insertion was at this page). Raising at E2 or E3
//! instead (before E4) would not do: (3) could then still find incarnation v - 1's entry
//! with raise v already read at (2), and that frame is freed and rewritten with no further
//! raise. A load of S after the copy instead of (3) would not do either: (1) may be an old
//! incarnation's entry, (2) read the raise of an incarnation still being written, and a
//! later one re-insert f at S (an ABA of the slot): (3) before the copy is what pins the
//! incarnation.
//!
//! With frames in flight ("In flight", below) GEN takes more stores than E5's raise: the
//! lessee's at the hand-over (the count raised, FLIGHT set for a miss), M5's publish (the
//! count raised, FLIGHT cleared), a waiter's WAITERS (only on a value in flight) and a
//! dead reader's D2 (the count raised, FLIGHT kept). Every store raises the count or sets
//! a bit on a value in flight, so no value recurs: (2) and (6) equal means no store to
//! GEN between them. The argument above holds with "raise v" read as "any store of
//! incarnation v" and one case more, FLIGHT: a hit whose (2) read a value with FLIGHT
//! set discards its copy and returns `InFlight` (the test comes with (6)'s, after the
//! copy: a branch of its own before it made the compiler lay the hit out worse, 36
//! instructions more). A value with FLIGHT 0 that (2) read is (i) an E5 raise, then (3) finds f in
//! S only through a later incarnation's insertion, whose
//! hand-over store (before the insertion that (3) read) makes (6) differ: stale; or (ii)
//! the hand-over store of an incarnation whose bytes were complete before it (a writer's
//! install, whose bytes come first); or (iii) M5 of the incarnation that (3) names, a
//! release after its `preadv`, which (2)'s acquire reads: the bytes are complete. A hit
//! that copied while f was in flight read at (2) a value with FLIGHT set, so its copy is
//! discarded (`Flaw::NoFlightCheck` leaves the test out: the loom model
//! `flight_broken_no_check` catches a validated copy of unwritten bytes). The test costs
//! the hit no load: it is a test of the register (2) loaded.
//!
//! Deaths: the raise is a store under the queue's lock (a step), at E5; a reclaimer that
//! dies before it dies before E6 too, and whoever takes the lock over finishes the
//! DETACHED victim (E4-E7: the raise again, then the free). A second raise is harmless: a
//! reader compares for equality. So a freed frame has always been raised since its last
//! insertion. A removal (truncation) raises the same way (it is E1-E7 too).
//!
//! # In flight (docs/sharing.md, "Readahead of one process never repeats another's in flight")
//!
//! A miss inserts its frames **before** it reads them, so that another reader that misses
//! the same pages at the same moment finds them and waits instead of reading them again:
//!   M1. A frame f leased (the buddy's); FILE[f], PAGE[f], HELD[f] = 0 and GEN[f] (its
//!       count raised, FLIGHT = the lessee's slot + 1) stored by the lessee, f pinned by it
//!       (`hand_over_in_flight`, before the ADD: nobody reads a leased frame's words).
//!   M2. ADD (CACHED, queued: the hand-over).
//!   M3. `insert_run`: the index names f, visible and in flight. A conflict (another
//!       reader's frame is there, in flight or not) reads nothing for that page: the page
//!       is read from the other frame (a look again: a hit, or a wait below), and f is freed
//!       once unpinned (`drop_unplaced`).
//!   M4. `preadv` into f (read.rs, one per run of placed pages; `Step::Reading` before it).
//!   M5. `publish`: GEN = its count raised, FLIGHT 0 (a release swap: after the `preadv`),
//!       then a futex wake of GEN if the swap found WAITERS; then the copy and the unpin.
//!       A failed read instead takes f out again (`abandon`: D1-D3 below), then frees it;
//!       so does a panic meanwhile, its process alive (read.rs, "Unwinding").
//! **A reader that finds f** in flight returns nothing: the optimistic hit sees FLIGHT in
//! the GEN word it loaded at (2), discards its copy and returns `InFlight`; `try_pin_hit` loads GEN
//! (acquire)
//! after its pin and second look-up (the insertion that look-up read came after M1's
//! store, so it sees M1's value or a later one) and unpins. Then `wait_in_flight`:
//!   P1. WAITERS announced: a CAS from the value loaded (refused: GEN changed, look again).
//!   P2. The page's slot again: no longer f, look again (D1 came first).
//!   P3. `FUTEX_WAIT` on GEN's low half (the count: every store but P1's changes it) while
//!       it holds the value loaded, for at most 10 ms (`FLIGHT_PARK`; a model's `Run`
//!       parks without a timeout, so that a lost wake fails it); a timeout asks the
//!       member's `Run` to look at its steward (`Run::parked`).
//! Then the reader looks the page up from the walk: published, a hit; gone, a miss that
//! reads the page itself. read.rs bounds the parks of one page (`FLIGHT_PARKS_MAX`, about
//! 10 s; then an uncached read, counted a duplicate). A wake is lost by none of these: M5's
//! swap is an RMW that comes after P1's CAS or fails it; D2 below is one too.
//! **A death** of the reader: before M2, f is its lessee's (the buddy's sweep frees it);
//! between M2 and M3, f is queued in no index (reclaim frees it once the pin is dropped);
//! between M3 and M5, **the steward's sweep** (`sweep_flights`, under the queue's lock,
//! before it drops the dead slot's pins), for each CACHED frame the dead slot pins whose
//! FLIGHT names it:
//!   D1. f out of its index if the index names it at PAGE[f] (E4 of a removal: no shadow,
//!       under the index's lock, finishing a dead insertion first).
//!   D2. GEN's count raised, FLIGHT kept (a CAS loop: an RMW after any P1).
//!   D3. A futex wake of GEN: its waiters look again and miss.
//! FLIGHT stays set until the frame's next hand-over: a reader that pinned f before D1 and
//! loads GEN after D2 sees FLIGHT, never 0, and never copies the dead reader's partial
//! bytes (`Flaw::FlightCleared`, D2 clearing it, is caught by the loom model
//! `flight_broken_cleared`; `Flaw::FlightNotSwept`, no D1-D3, by `flight_broken_not_swept`:
//! the waiter sleeps for ever). A steward that dies in D1-D3 is followed by one that
//! sweeps the slot again (D1 finds nothing, D2 and D3 are harmless twice).
//! **A process's own threads** wait the same way: the optimistic hit needs no pin, and a
//! `try_pin_hit` refused by our own bit (`Ours`) loads GEN and returns `InFlight` if the
//! sibling's miss is reading the frame (no deadlock with the pin-bit rule).
//! **Writers and truncation** with a frame in flight in the index: a writer's `install`
//! puts its frame G in the page's slot over f (I2) and its I3 finds f pinned by its
//! reader: f stays queued in no index (reclaim frees it); the reader publishes and
//! returns the bytes it read, a read concurrent with the write (ordered before it), and
//! its waiters look again and find G. An append in place never meets f (f is never HELD:
//! A1 fails and the writer installs). A truncation's `remove` of f is refused while it is
//! pinned and retried after a park on GEN (read.rs `truncate`: up to 64 rounds); an f
//! inserted after the truncation's removal is past the size its reader loads after M3,
//! and taken out unread (read.rs, "Against a writer": M3'); a record's drop never meets a
//! live reader's f (the record has no opener). `tests_write`'s
//! `a_miss_in_flight_never_inserts_a_page_older_than_a_returned_write` (and its broken
//! variant, `Flaw::ReadBeforeInsertion`), `a_reader_killed_in_flight_under_a_write_...`
//! and `a_miss_inserted_after_a_truncations_removal_...` force each order; the loom model
//! `truncation_races_a_miss` explores the truncation's, the reader dying at each step.
//!
//! # Writes (a writer process's pages: docs/sharing.md "Writes seen across processes")
//!
//! A process that writes a file (its record's one WRITER, files.rs) puts each page it
//! wrote into the domain before its `write_at` returns (`install`), copy on write:
//!   I1. A frame G leased, the page's whole newest bytes stored into it with atomic stores
//!       (after the lease's fence, as a miss's `pread`), then handed over with
//!       HELD[G] = the writer's mark (slot + 1 << 48 | a sequence of its own), stored with
//!       FILE and PAGE before the ADD (the lessee's words); pinned by the writer.
//!   I2. Under this queue's lock (still the hold of I1's ADD: one hold per install), the
//!       page's slot made G: `SharedIndex::put`, one STORE intent over the old folio F
//!       (INFO unchanged), or an insertion where no folio was.
//!   I3. Still under the lock: HELD[F] = 0, then F evicted (E1-E7 without a shadow; its E4
//!       finds it in no index: nothing to remove; E5 raises GEN[F] before E6 frees it); a
//!       reader's pin keeps it (E2 refused): it stays queued in no index for reclaim.
//!   I4. The lock let go; G unpinned.
//! Why a reader sees the old page whole or the new one whole, and the new one once the
//! write returned: F's bytes are never written while it is CACHED (I3 frees it only after
//! I2 took it out of the index, and raises its generation first: the optimistic hit's
//! argument above, unchanged); G's bytes are complete before I2's release store; a read
//! that starts after the write returned walks to the slot after I2 (the write's return
//! happens after I2) and finds G, or a later writer's frame. Death: before I1's ADD, G is
//! the dead lessee's (swept free); between I1 and I2, G is queued in no index (its mark
//! cleared by the sweep, then reclaim frees it) and the page is F; I2 is one intent (the
//! index's taker redoes it); between I2 and I3, F is queued in no index (reclaim frees it
//! once unmarked); I3's eviction is finished by the queue's taker. At every step the
//! page names F or G, each CACHED (`tests_reclaim`'s `a_writers_install_killed_...`, and
//! the loom model `install_races_an_optimistic_hit` with its broken variant).
//!
//! **Appends in place** (`append_in_place`): an append to the file's last page, the
//! common write of a log (a WAL, a MANIFEST), would pay all of I1-I4 for a few bytes. A
//! reader bounds every read by the record's size word, loaded once (acquire) at the start
//! of its `read_at` (files.rs, the size word), and returns no byte at or past it; so bytes
//! past the size may be stored into a frame readers are copying, if nobody else stores to
//! it and nobody frees it meanwhile. The writer, under its private writer lock, for a
//! write that starts exactly at the record's size (and at or past every size it ever
//! published: a reader that loaded a larger size before a truncation may still be
//! copying up to it), into page `page` whose last install or append it marked `held`:
//!   A0. Looks the page up (lock-free): the slot names frame G, order 0.
//!   A1. Moves G's mark: CAS HELD[G] `held` -> `mark` (a new sequence). Refused (G's
//!       writeback released the mark, so G may be reclaimed or reused: nothing stored),
//!       the caller installs a copy (I1-I4). Made: G is CACHED at the page and stays so
//!       (reclaim never takes a HELD frame; only the writer itself removes its file's
//!       pages), and nobody else stores to it.
//!   A2. Stores the written bytes into G with atomic stores, past the size.
//!   A3. Raises the record's size over them (a release RMW: files.rs `extend_size`).
//! Why a reader returns the old page or the new one, whole: a reader that loaded the size
//! before A3 copies bytes below the old size only, which A2 does not touch; one that
//! loaded it after (acquire of A3's release) sees A2's stores, which come before A3. The
//! optimistic hit's argument above is unchanged (G is not freed, its generation does not
//! move): the copy is G's incarnation's, validated as before. Why A1 moves the mark: a
//! writeback that wrote the bytes of the last install read `held` before it set the
//! private folio's WRITEBACK; if it clears the mark after A2, its CAS from `held` fails
//! (G now holds newer bytes than it wrote, and stays HELD); if before A1, A1 fails and
//! the write is installed as a copy. Only A1 sets a mark on a cached frame, and only from
//! the writer's own last mark (unique while the writer lives: its sequence is the
//! process's), so a frame whose mark was cleared is never marked again in place. Death:
//! before A1, nothing changed; after A1 or A2, G holds the new mark and, past the size,
//! bytes no reader returns: the steward's sweep clears the mark (G reclaimable, as after
//! an install), and the record's writer is cleared with its stamp retired, so no later
//! writer appends past those bytes (the next admission drops the record's pages); after
//! A3, the append is whole. The loom model `append_in_place_races_a_hit` checks this,
//! with a writeback and a reclaim racing, and its broken variants (`Flaw::SizeBeforeBytes`,
//! `Flaw::MarkKept`).
//!
//! **HELD** frames hold bytes their writer returned and has not written to disk yet:
//! reclaim gives them a second chance as it does pinned ones (never frees them), so that a
//! reader never misses such a page and reads the disk's older one. The writer's writeback
//! clears a frame's mark once the bytes it wrote are on disk (`release_page`: the page's
//! frame looked up, then `release_held`, a CAS from the mark that writeback read, so a
//! later write's new frame stays HELD: the loom model
//! `release_races_an_install_and_a_reclaim`, and `Flaw::ReleaseUnchecked`, which clears
//! whatever mark the frame holds, caught by it); its detach
//! clears the rest; the steward clears a dead writer's marks (`release_marks`) once its
//! keeper, if it had one, has written its pages back (docs: what a
//! death means for durability). A removal (truncation, a record's drop) ignores marks.
//!
//! # Owners and shares (docs/sharing.md, "Shares and floors")
//!
//! A frame's **owner** is the member whose miss (or write: `install`) handed it over: its
//! lessee stores its slot + 1 in FILE's high bits with the file, before the ADD (nothing
//! on the hit path: the optimistic hit compares FILE's low 32 bits, one compare as
//! before). Each slot's **count** of the queued frames it owns is a word of its record
//! (record.rs, `owned`), changed only under this lock and only by ADD and DETACH, which
//! carry its new value (an absolute store in the intent: args[0]'s high half), so a
//! taker's redo stores the same count and a death at any step leaves it exact. A
//! member's frames become **nobody's** at its clean detach (the reader's drop:
//! `disown`) or, dead, in the steward's sweep (under the lock, before its slot is freed
//! for another process): each FILE naming it cleared of its owner (a CAS), then its
//! count 0; a death between leaves the count above the frames it still owns, never
//! below (the next sweep zeroes it).
//!
//! **Reclaim** gets the caller's `Shares`: each member's share is the quota times its
//! weight (its record's, from its attach: record.rs, `Weight`) over the weights of the
//! members attached (by default equal weights: equal shares), its floor half of it. In
//! its first two passes over the queue a frame of another
//! member at or below its **share** gets a second chance (to the tail, as a referenced
//! one; two, since the first may go to second chances alone: heads referenced, or pinned
//! in a window in flight); in the third pass one at or below its **floor**; the fourth
//! takes any frame not referenced, pinned or HELD. So a member's frames are taken by another's
//! miss above its share first (the kernel's memory.low), down to its floor only when no
//! other frame is left (memory.min), and below it only when nothing else is left at all:
//! reclaim always progresses (one member alone owns every frame it would take; the
//! steward owns none). Nobody's frames, and the reclaimer's own, are never protected.
//! The bound: four passes, at most four times the queue's length of heads looked at.
//!
//! # Protocol (every change under the lock; each primitive one intent, lock.rs M1-M3)
//!
//! - ADD [f | owned << 32, old tail + 1, new ENDS, new STATUS]: NEXT[f] = 0, PREV[f] =
//!   old tail + 1, NEXT[old tail] = f + 1, REF[f] = 0, f's buddy state CACHED (the
//!   hand-over), f's owner's count = owned (if it has one), ENDS, STATUS. Before it, with
//!   no lock (f is the lessee's: nobody else reads them), the lessee stores FILE[f] (with
//!   its owner) and PAGE[f] and pins f.
//! - ROTATE [f, next + 1 | tail + 1 << 32, new ENDS, 0]: the head f, referenced or
//!   pinned, moved to the tail (its second chance): REF[f] = 0, PREV[next] = 0,
//!   NEXT[tail] = f + 1, PREV[f] = tail + 1, NEXT[f] = 0, ENDS.
//! - DETACH [f | owned << 32, prev + 1 | next + 1 << 32, new ENDS, new STATUS]: f
//!   unlinked, f's owner's count = owned (one less), STATUS's victim marked DETACHED, the
//!   count less one.
//!
//! The eviction of a victim f (reclaim's, with a shadow; a removal's, without):
//!   E1. STATUS's victim = f (a plain store under the lock: "chosen").
//!   E2. Freeze: CAS PIN[f] 0 -> FROZEN. Refused (pinned): STATUS's victim = 0, done.
//!   E3. DETACH.
//!   E4. f out of its file's index: if the index names f at PAGE[f], `SharedIndex::remove`
//!       (under the index's lock: the lock order is queue, then index, then buddy). If it
//!       does not, the index's lock is first taken and let go (`recover`: a dead writer's
//!       insertion of f finished), and the page looked up again. (`remove` finds f gone
//!       when the index's lock was a dead reclaimer's, in E4: its take-over finished it.)
//!   E5. Raise GEN[f] (a store of its value + 1, under the lock, so a step of its own),
//!       then unfreeze: CAS PIN[f] FROZEN -> 0 (release: a later pin sees E4's removal).
//!   E6. `SharedBuddy::free_cached(f)`: under the allocator's lock, if f is still CACHED
//!       (a dead reclaimer's free of it is finished by that lock's take-over).
//!   E7. STATUS's victim = 0.
//! Take-over: lock.rs T1-T3 (T2 redoes the last primitive), then if STATUS names a victim
//! f: not DETACHED (E1-E2): unfreeze f if FROZEN (only the victim's chooser freezes, and
//! only under this lock) and clear the victim: f stays queued; DETACHED: E4-E7 for f.
//!
//! Why only queue holders remove cached pages from an index: then, holding this lock, the
//! index's entry at PAGE[f] cannot stop naming f between E4's look-up and its removal
//! (an insertion at a page that holds a folio is a conflict, and every removal of a cached
//! frame from an index is an E4 under this lock). A truncation removes its pages through
//! `remove` (below), not through the index directly, and so does a file record's drop
//! (`drop_file`: each page through `remove`, then the tree released).
//!
//! Whoever dies where, every CACHED frame is in exactly one place: queued (and in its
//! index, or in none, waiting for reclaim), or the one victim STATUS names (a taker
//! finishes it), and no index names a frame that is not CACHED: E4 comes before E6, and
//! the insertion after the ADD. A frame is never both free and queued: DETACH comes
//! before E6. A death in E4 (inside the index's change) is finished by the index's own
//! take-over, which E4's `remove` or `recover` makes.
//!
//! **Invariant** on a quiet queue (`check`): the list from ENDS's head has STATUS's count
//! distinct frames, each PREV right, ending at ENDS's tail; each queued frame CACHED in
//! the buddy allocator; every CACHED frame queued; no victim; no PIN FROZEN or naming a
//! slot that is not live.
//!
//! Protection: the links, ENDS, STATUS, FILE and PAGE of a queued frame, and each slot's
//! count of owned frames, by the lock; GEN
//! by the lock (a holder raises it at E5 and D2), by its lessee (its hand-over's store,
//! and M5's swap while it pins the frame in flight) and by a waiter's CAS (WAITERS, only
//! on a value in flight); readers load it; REF by nobody (a hint: a touch
//! racing reclaim's clear is lost or kept, both right); PIN by CAS (pins) and by the lock
//! (FROZEN: only a holder freezes and unfreezes); HELD by its writer (stored before the
//! hand-over, moved by A1's CAS, cleared under the lock by I3) and by CAS from a known
//! mark (writeback's release, the detach, the sweep of a dead writer); a frame's bytes
//! past its file's size by its writer while HELD with its mark (A2). Locks, in order: this queue's, then an
//! index's, then the buddy allocator's; nobody takes this one while holding an index's or
//! the allocator's.
//!
//! Limits: a frame in flight is pinned through its reader's `preadv` (a truncation waits
//! for it; reclaim passes it over); one FLIGHT per frame (7 bits: slots below 127, the
//! pin bits' 63 the tighter bound); order-0 frames only (a larger folio's frames would each need
//! its CACHED head
//! and one queue entry: not done); up to 2^30 - 1 frames; pins of up to 63 process slots
//! (one bit each: a domain of more slots needs a second pin word per frame); a process
//! holds one pin per frame (its threads share it: a sibling's refused, "Threads"); the
//! shadow left is a constant (`SHADOW_VALUE`: the refault distance that
//! `eviction/` computes is not carried yet); a frame whose insertion conflicted and that
//! its reader could not drop (pinned then, or the reader dead) stays queued until reclaim
//! reaches it; one queue (one lock) for the whole domain (in the
//! domain's region since step 6's second part, with an index per file record, used by
//! read.rs, and through it by a `Cache` with a domain since step 8's first slice); a
//! frame's owner is the member that brought it in, never the one using it (a page B hits
//! but A read stays A's); shares are equal (no weight per member); a protected frame's
//! second chance clears its REF bit like any rotation; `disown` and the sweep load every
//! reached frame's FILE word under the lock (a few ms for 1 M frames).

use super::buddy::{Order, SharedBuddy};
use super::futex;
use super::index::{Entry, Folio, Leave, Page, Put, SharedIndex};
use super::lock::{Held, HolderLock, Intent, LINE_FREE_WORDS, LINE_WORDS};
use super::record::Records;
use super::slot::{SlotState, SlotTable};
use super::stack::Frame;
use super::{Died, Flaw, Holder, Run, SlotIndex, Step, Word};
use crate::primitive::{fence, AtomicU64, Ordering};
use std::time::Duration;

const ENDS: u32 = LINE_FREE_WORDS[0];
const STATUS: u32 = LINE_FREE_WORDS[1];
const FRAMES_AT: u32 = LINE_WORDS;

const NEXT: u32 = 0;
const PREV: u32 = 1;
const FILE: u32 = 2;
const PAGE: u32 = 3;
const REF: u32 = 4;
const PIN: u32 = 5;
const GEN: u32 = 6;
const HELD: u32 = 7;
/// A frame's words: one line (module docs, Layout).
const PER_FRAME: u32 = 8;

/// GEN's bits 0..56: the reuse generation's count (module docs, "In flight").
const GEN_COUNT: u64 = (1 << 56) - 1;
/// GEN's bits 56..63: FLIGHT, the slot + 1 of the reader whose `preadv` fills the frame,
/// 0 once its bytes are the page's (module docs, "In flight").
const FLIGHT_SHIFT: u32 = 56;
const FLIGHT_BITS: u64 = 0x7f << FLIGHT_SHIFT;
/// GEN's bit 63: a reader may sleep on the word (set by a waiter's CAS, only on a value
/// in flight; module docs, "In flight").
const WAITERS: u64 = 1 << 63;
/// The longest one park on an in-flight frame lasts before its waiter looks again.
const FLIGHT_PARK: Duration = Duration::from_millis(10);

/// FILE's low bits: the `FileNo` (below 2^32; a hit compares these only).
const FILE_BITS: u64 = (1 << 32) - 1;
/// FILE's bits 32..48: the frame's owner, its slot + 1, or 0: nobody's (module docs,
/// "Owners and shares").
const OWNER_SHIFT: u32 = 32;

/// The floor is this fraction of the share (module docs, "Owners and shares").
const FLOOR_OF_SHARE: u32 = 2;

/// PIN's bit while reclaim takes the frame.
const FROZEN: u64 = 1 << 63;
/// The process slots a PIN word has bits for.
pub(crate) const PIN_SLOTS: u16 = 63;

const COUNT_MASK: u64 = (1 << 32) - 1;
const VICTIM_MASK: u64 = (1 << 30) - 1;
const SHADOW: u64 = 1 << 62;
const DETACHED: u64 = 1 << 63;

/// What reclaim leaves in the index at a reclaimed page (module docs, Limits).
pub(crate) const SHADOW_VALUE: u64 = 1;

/// The rounds a file's drop waits for a pinned folio (`drop_file`).
const DROP_ROUNDS: u32 = 64;

const ADD: u64 = 1;
const ROTATE: u64 = 2;
const DETACH: u64 = 3;

/// How the quota divides into the members' shares and floors (module docs, "Owners and
/// shares"): what reclaim protects of another member's frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shares {
    quota_frames: u32,
    /// The weights of the members attached, summed (record.rs, `Weight`); 0: nothing
    /// protected.
    weight_total: u64,
}

/// One member's share of the quota and its floor, in frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Share {
    /// Reclaim takes the member's frames while it owns at most this many only once no
    /// other is left.
    pub(crate) share_frames: u32,
    /// Reclaim takes the member's frames while it owns at most this many only when
    /// nothing else is left at all (its progress: module docs).
    pub(crate) floor_frames: u32,
}

impl Shares {
    /// Nothing protected (tests, models; reclaim as it was before shares).
    pub(crate) const NONE: Shares = Shares {
        quota_frames: 0,
        weight_total: 0,
    };

    /// The shares of the members attached to `slots` now, by the weights their records
    /// carry (the steward's slot has none: it owns no frame).
    ///
    /// Context: any process; two loads per slot.
    pub(crate) fn attached(
        quota_frames: u32,
        slots: &SlotTable<'_>,
        records: &Records<'_>,
    ) -> Shares {
        let weight_total = (0..slots.slot_count().min(records.slot_count()))
            .map(SlotIndex)
            .filter(|&s| slots.state(s).0 == SlotState::Live)
            .map(|s| u64::from(records.weight(s)))
            .sum();
        Shares {
            quota_frames,
            weight_total,
        }
    }

    /// The share and floor of a member of `weight` (a record's: 0 has none).
    pub(crate) fn of(&self, weight: u32) -> Share {
        // At most the quota: a weight is one of the summed. No member attached: none.
        let share_frames = (u64::from(self.quota_frames) * u64::from(weight))
            .checked_div(self.weight_total)
            .map_or(0, |share| share.min(u64::from(self.quota_frames)) as u32);
        Share {
            share_frames,
            floor_frames: share_frames / FLOOR_OF_SHARE,
        }
    }

    /// The share and floor of `slot`'s member.
    pub(crate) fn of_slot(&self, records: &Records<'_>, slot: SlotIndex) -> Share {
        self.of(if slot.0 < records.slot_count() {
            records.weight(slot)
        } else {
            0
        })
    }
}

/// A file, as the queue records it (the file table's record id, once wired).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct FileNo(pub(crate) u64);

/// Where reclaim finds a file's index.
pub(crate) trait Indexes {
    /// The index of `file`, if it has one (a file without one has no cached page).
    fn index(&self, file: FileNo) -> Option<&SharedIndex<'_>>;

    /// Calls `visit` with every index (the steward's sweep).
    fn each(&self, visit: &mut dyn FnMut(&SharedIndex<'_>));
}

/// Tests and models: file n's index is the n-th.
impl Indexes for [SharedIndex<'_>] {
    fn index(&self, file: FileNo) -> Option<&SharedIndex<'_>> {
        usize::try_from(file.0).ok().and_then(|n| self.get(n))
    }

    fn each(&self, visit: &mut dyn FnMut(&SharedIndex<'_>)) {
        self.iter().for_each(visit);
    }
}

/// What an eviction does with its victim's index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Evict {
    /// Reclaim: a shadow stays.
    Reclaim,
    /// A removal (truncation): nothing stays.
    Remove,
}

/// What `install` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Installed {
    /// The page had no frame: the new one inserted.
    Inserted,
    /// The page's frame replaced by the new one.
    Replaced,
    /// No node frame for the tree: nothing changed in the index.
    Full,
}

/// What `append_in_place` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Appended {
    /// The bytes stored into the page's frame and the size raised over them (A1-A3).
    InPlace,
    /// Nothing stored: the page has no frame of order 0, or its frame no longer holds
    /// the writer's mark (its writeback released it). The caller installs a copy.
    Released,
}

/// The writer's mark of a HELD frame (module docs, "Writes"): its slot and a sequence
/// number of its own (below 2^48, not 0).
pub(crate) fn held_mark(me: Holder, seq: u64) -> u64 {
    assert!(seq != 0 && seq < 1 << 48, "a mark's sequence {seq}");
    held_slot(me) << 48 | seq
}

/// Whether `index` names `frame` (order 0) at `page`.
fn names(index: &SharedIndex<'_>, page: Page, frame: u32) -> bool {
    index.lookup(page)
        == Entry::Folio {
            frame: u64::from(frame),
            order: 0,
        }
}

fn held_slot(me: Holder) -> u64 {
    u64::from(me.slot.0) + 1
}

/// FLIGHT naming `me` (module docs, "In flight"): its slot + 1 in GEN's bits 56..63.
fn flight_of(me: Holder) -> u64 {
    assert!(
        me.slot.0 < PIN_SLOTS,
        "slot {} has no pin bit (module docs, Limits)",
        me.slot.0
    );
    (u64::from(me.slot.0) + 1) << FLIGHT_SHIFT
}

/// Whether the GEN word `generation` says its frame is in flight.
#[inline]
fn in_flight(generation: u64) -> bool {
    generation >> FLIGHT_SHIFT != 0
}

/// What an optimistic hit whose copy is discarded found (`read_hit`): its frame in flight
/// (the generation it loaded at (2) says so), else stale.
#[cold]
fn not_copied(before: u64, frame: Frame) -> Optimistic {
    if in_flight(before) {
        Optimistic::InFlight(frame)
    } else {
        Optimistic::Stale
    }
}

/// `generation` with its count raised by one, its other bits kept.
fn counted_up(generation: u64) -> u64 {
    (generation & !GEN_COUNT) | (generation.wrapping_add(1) & GEN_COUNT)
}

/// What `remove` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Removed {
    /// Out of the queue and its index, freed.
    Freed,
    /// A reader holds it pinned: try again once it is unpinned.
    Pinned,
    /// Not a queued frame caching that page (already reclaimed or removed).
    NotCached,
}

/// The frame `pin_hit` pinned: unpin it (`SharedQueue::unpin`) when the read is done.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a pinned frame must be unpinned"]
pub(crate) struct Pinned(pub(crate) Frame);

/// A frame found in flight (module docs, "In flight"): another reader's `preadv` has not
/// filled it yet. Wait for it (`wait_in_flight`), then look the page up again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct InFlight {
    /// The frame.
    pub(crate) frame: Frame,
    /// Its GEN word as the reader loaded it (in flight).
    seen: u64,
}

/// What an optimistic hit (`read_hit`) found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Optimistic {
    /// The copy is the page's (validated); the frame was touched.
    Hit(Frame),
    /// No folio of order 0 at the page: a miss.
    Absent,
    /// The frame was reclaimed or reused during the copy: discard it.
    Stale,
    /// The page's frame is in flight: the copy discarded (module docs, "In flight"). Its GEN
    /// word is loaded again for the wait (`in_flight`), so that this enum stays a word:
    /// the hit returns it in registers.
    InFlight(Frame),
}

/// How a hand-over leaves the frame's bytes (module docs, "In flight").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Filled {
    /// Its bytes are the page's already (a writer's install, the tests' hand-overs).
    Complete,
    /// Its lessee reads them after the insertion (a miss: FLIGHT names it until `publish`).
    InFlight,
}

/// Why a pin was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unpinnable {
    /// Reclaim holds the frame FROZEN: it is being reclaimed (treat the page as a miss).
    Frozen,
    /// This process's bit is set already: another thread of this process holds the pin
    /// (module docs, "Threads"). Never treated as pinned: the caller reads the page
    /// another way (an optimistic hit again, or uncached).
    Ours,
}

/// What `try_pin_hit` found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PinHit {
    /// The frame, pinned for us and touched: unpin it after the read.
    Pinned(Pinned),
    /// No frame caching the page, or one being reclaimed: a miss.
    Missed,
    /// The page's frame is pinned by another thread of this process with our bit: read
    /// the page another way (module docs, "Threads").
    Ours,
    /// The page's frame is in flight (module docs, "In flight"): nothing pinned; wait for
    /// it (`wait_in_flight`) and look again.
    InFlight(InFlight),
}

/// What `check` found: the queued frames, head first.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct QueueCensus {
    pub(crate) queued: Vec<(Frame, FileNo, Page)>,
}

fn link(frame: u32) -> u64 {
    u64::from(frame) + 1
}

fn linked(word: u64) -> Option<u32> {
    word.checked_sub(1).map(|f| f as u32)
}

fn ends_word(head: Option<u32>, tail: Option<u32>) -> u64 {
    head.map_or(0, link) | tail.map_or(0, link) << 32
}

fn ends_of(word: u64) -> (Option<u32>, Option<u32>) {
    (linked(word & COUNT_MASK), linked(word >> 32))
}

fn victim_word(frame: u32, evict: Evict, detached: u64) -> u64 {
    let shadow = if evict == Evict::Reclaim { SHADOW } else { 0 };
    (link(frame) << 32) | shadow | detached
}

fn victim_of(status: u64) -> Option<(u32, Evict, bool)> {
    let victim = linked((status >> 32) & VICTIM_MASK)?;
    let evict = if status & SHADOW != 0 {
        Evict::Reclaim
    } else {
        Evict::Remove
    };
    Some((victim, evict, status & DETACHED != 0))
}

fn slot_bit(me: Holder) -> u64 {
    assert!(
        me.slot.0 < PIN_SLOTS,
        "slot {} has no pin bit (module docs, Limits)",
        me.slot.0
    );
    1 << me.slot.0
}

/// The eviction queue of the frames of `buddy`, at `base` of the same region.
#[derive(Debug)]
pub(crate) struct SharedQueue<'r> {
    region: &'r [AtomicU64],
    lock: HolderLock<'r>,
    base: Word,
    buddy: SharedBuddy<'r>,
    frames: u32,
    /// Where each slot's count of owned frames lives (`None`: counts not kept, models).
    owners: Option<Records<'r>>,
}

impl<'r> SharedQueue<'r> {
    /// The words a queue of `frames` takes.
    pub(crate) fn words(frames: u32) -> u32 {
        FRAMES_AT + PER_FRAME * frames
    }

    /// A view of the queue at `base` (8-word aligned) over the frames of `buddy`, as
    /// `format` left it.
    pub(crate) fn new(
        region: &'r [AtomicU64],
        base: Word,
        buddy: SharedBuddy<'r>,
    ) -> SharedQueue<'r> {
        let frames = buddy.frames();
        assert!(u64::from(frames) < VICTIM_MASK, "too many frames");
        assert!(
            base.index() + Self::words(frames) as usize <= region.len(),
            "the queue lies past the region"
        );
        SharedQueue {
            region,
            lock: HolderLock::new(region, base),
            base,
            buddy,
            frames,
            owners: None,
        }
    }

    /// This queue, keeping each slot's count of the frames it owns in `records`
    /// (module docs, "Owners and shares").
    pub(crate) fn with_owners(self, records: Records<'r>) -> SharedQueue<'r> {
        SharedQueue {
            owners: Some(records),
            ..self
        }
    }

    /// The member whose miss (or write) brought `frame` in, if it is still somebody's.
    fn owner_of(&self, frame: u32) -> Option<SlotIndex> {
        let owner = (self.of(frame, FILE).load(Ordering::Relaxed) >> OWNER_SHIFT) as u16;
        owner.checked_sub(1).map(SlotIndex)
    }

    /// The count of frames `frame`'s owner owns, if it has one and counts are kept.
    fn owned_word(&self, frame: u32) -> Option<&'r AtomicU64> {
        let records = self.owners?;
        let slot = self.owner_of(frame)?;
        (slot.0 < records.slot_count()).then(|| records.owned(slot))
    }

    /// How many queued frames `slot`'s member owns (a hint without the lock; 0 when
    /// counts are not kept).
    pub(crate) fn owned(&self, slot: SlotIndex) -> u32 {
        self.owners
            .filter(|records| slot.0 < records.slot_count())
            .map_or(0, |records| {
                records.owned(slot).load(Ordering::Relaxed) as u32
            })
    }

    /// `slot`'s share and floor under `shares` (none when counts are not kept).
    fn share_of(&self, shares: &Shares, slot: SlotIndex) -> Share {
        self.owners
            .map_or(Share::default(), |records| shares.of_slot(&records, slot))
    }

    /// The allocator whose frames this queue holds.
    pub(crate) fn buddy(&self) -> &SharedBuddy<'r> {
        &self.buddy
    }

    /// Whether `me`'s process (any of its threads: they share its holder word) holds this
    /// queue's lock, its allocator's or `index`'s, as the lock words are (a load each):
    /// read.rs's unwind guard, which takes them, looks first (read.rs, "Unwinding").
    pub(crate) fn locked_by(&self, me: Holder, index: &SharedIndex<'_>) -> bool {
        [
            self.lock.holder(),
            self.buddy.lock_holder(),
            index.lock_holder(),
        ]
        .contains(&Some(me))
    }

    /// Who holds the queue's lock now (tests: a lever that acts under it).
    #[cfg(test)]
    pub(crate) fn lock_holder(&self) -> Option<Holder> {
        self.lock.holder()
    }

    /// An empty queue, the lock free. Stores only the lock line: every frame's line is 0
    /// in a zeroed region (a new region file), which is a frame not queued, so a frame's
    /// line becomes resident memory only once its frame is used (buddy.rs, "Frames never
    /// reached").
    ///
    /// Context: the region's maker, before any other process sees it, on a zeroed region.
    pub(crate) fn format(&self) {
        for offset in 0..FRAMES_AT {
            self.region[self.base.at(offset).index()].store(0, Ordering::Relaxed);
        }
        self.line(STATUS).store(0, Ordering::Release);
    }

    fn line(&self, offset: u32) -> &AtomicU64 {
        &self.region[self.base.at(offset).index()]
    }

    fn of(&self, frame: u32, word: u32) -> &AtomicU64 {
        &self.line_of(frame)[word as usize]
    }

    /// Frame `frame`'s line (module docs, Layout).
    #[inline]
    fn line_of(&self, frame: u32) -> &[AtomicU64; PER_FRAME as usize] {
        assert!(frame < self.frames, "no frame {frame}");
        let at = self.base.at(FRAMES_AT + PER_FRAME * frame).index();
        self.region[at..at + PER_FRAME as usize]
            .try_into()
            .expect("a frame's line")
    }

    fn load(&self, frame: u32, array: u32) -> u64 {
        self.of(frame, array).load(Ordering::Acquire)
    }

    /// The lock (diagnostics, tests).
    pub(crate) fn lock_line(&self) -> &HolderLock<'r> {
        &self.lock
    }

    /// How many frames are queued (a hint without the lock).
    pub(crate) fn count(&self) -> u32 {
        (self.line(STATUS).load(Ordering::Acquire) & COUNT_MASK) as u32
    }

    // ------------------------------------------------------------ lock-free: hits

    /// How many frames each slot's process holds pinned now (`PIN_SLOTS` counts, slot
    /// by slot): a viewer's census, each frame's pin word read once (relaxed), so a
    /// snapshot taken while members read is a few pins off.
    ///
    /// Context: any process, lock-free; reads every reached frame's pin word (O(frames
    /// reached): past the allocator's frontier no frame was ever pinned).
    pub(crate) fn pins_by_slot(&self) -> Vec<u32> {
        let mut pins = vec![0u32; PIN_SLOTS as usize];
        for f in 0..self.buddy.reached() {
            let mut bits = self.of(f, PIN).load(Ordering::Relaxed) & !FROZEN;
            while bits != 0 {
                pins[bits.trailing_zeros() as usize] += 1;
                bits &= bits - 1;
            }
        }
        pins
    }

    /// A hit's touch: REF set, stored only if it was clear (module docs).
    ///
    /// Context: any process, lock-free; `frame` is one the caller found in an index.
    #[inline]
    pub(crate) fn touch(&self, frame: Frame) {
        let word = self.of(frame.0, REF);
        if word.load(Ordering::Relaxed) == 0 {
            word.store(1, Ordering::Relaxed);
        }
    }

    /// Pins `frame` for `me`: refused while reclaim holds it FROZEN, and while our bit
    /// is set already (another thread of this process holds it: module docs, "Threads").
    ///
    /// Context: any process, lock-free.
    #[inline]
    pub(crate) fn pin(&self, frame: Frame, me: Holder) -> Result<(), Unpinnable> {
        let bit = slot_bit(me);
        let word = self.of(frame.0, PIN);
        let mut current = word.load(Ordering::Relaxed);
        loop {
            if current & FROZEN != 0 {
                return Err(Unpinnable::Frozen);
            }
            if current & bit != 0 {
                return Err(Unpinnable::Ours);
            }
            match word.compare_exchange_weak(
                current,
                current | bit,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(seen) => current = seen,
            }
        }
    }

    /// Drops `me`'s pin of `frame`.
    ///
    /// Context: `me` pinned it (`pin`, `pin_hit`, `hand_over`).
    #[inline]
    pub(crate) fn unpin(&self, frame: Frame, me: Holder) {
        let was = self
            .of(frame.0, PIN)
            .fetch_and(!slot_bit(me), Ordering::Release);
        debug_assert_ne!(was & slot_bit(me), 0, "frame {} was not pinned", frame.0);
    }

    /// The hit path (module docs): the frame caching `page` in `index`, pinned for `me` and
    /// touched, or `None` (absent, a shadow, or being reclaimed: a miss).
    ///
    /// Context: any process, lock-free (two look-ups and a CAS); unpin the frame after
    /// the read.
    #[inline]
    pub(crate) fn pin_hit(
        &self,
        index: &SharedIndex<'_>,
        page: Page,
        me: Holder,
    ) -> Option<Pinned> {
        match self.try_pin_hit(index, page, me) {
            PinHit::Pinned(pinned) => Some(pinned),
            PinHit::Missed | PinHit::Ours | PinHit::InFlight(_) => None,
        }
    }

    /// `pin_hit`, saying why it pinned nothing: `Ours` when the page's frame is pinned by
    /// another thread of this process (module docs, "Threads"), `InFlight` when its bytes
    /// are not read yet (module docs, "In flight": loaded after the pin and the second
    /// look-up; for `Ours`, after the first).
    ///
    /// Context: as `pin_hit`.
    #[inline]
    pub(crate) fn try_pin_hit(&self, index: &SharedIndex<'_>, page: Page, me: Holder) -> PinHit {
        let Entry::Folio { frame, order: 0 } = index.lookup(page) else {
            return PinHit::Missed;
        };
        let Some(frame) = u32::try_from(frame).ok().filter(|f| *f < self.frames) else {
            return PinHit::Missed;
        };
        let frame = Frame(frame);
        let generation = self.of(frame.0, GEN);
        match self.pin(frame, me) {
            Ok(()) => {}
            Err(Unpinnable::Frozen) => return PinHit::Missed,
            Err(Unpinnable::Ours) => {
                // A sibling's pin: its miss may be reading the frame (module docs, "In
                // flight": the sibling waits as another process does).
                let seen = generation.load(Ordering::Acquire);
                if in_flight(seen) {
                    return PinHit::InFlight(InFlight { frame, seen });
                }
                return PinHit::Ours;
            }
        }
        if !names(index, page, frame.0) {
            self.unpin(frame, me);
            return PinHit::Missed;
        }
        // FLIGHT after the second look-up (acquire: the insertion it read came after the
        // lessee's store of FLIGHT), so it is the incarnation's we pinned, or 0 from its
        // `publish` (release: after the `preadv`).
        let seen = generation.load(Ordering::Acquire);
        if in_flight(seen) {
            self.unpin(frame, me);
            return PinHit::InFlight(InFlight { frame, seen });
        }
        self.touch(frame);
        PinHit::Pinned(Pinned(frame))
    }

    /// The optimistic hit (module docs, "The optimistic hit"): `copy` called with the frame
    /// caching `page` of `file` in `index` (`file`'s), its bytes then validated: `Hit`
    /// (the copy is the page's, the frame touched), `Absent` (no folio of order 0 at
    /// `page`: a miss) or `Stale` (the frame was reused meanwhile: discard the copy, try
    /// again or pin).
    ///
    /// `InFlight` (the frame's bytes are not read yet: the copy discarded; module docs, "In
    /// flight": the generation's own bits say it, no other load).
    ///
    /// Context: any process, lock-free: one walk, the walk's last slot loaded again, two
    /// loads of the frame's generation and one of its file and page (all on the frame's
    /// line), the touch; no other store, no RMW. `copy` must read the frame only with
    /// byte-wise atomic loads (it may be rewritten meanwhile). `run`'s `Step::Walked`
    /// comes between the walk and the generation's load, its `Step::Found` between the
    /// checks and the copy (a test's lever reuses the frame there).
    #[inline]
    pub(crate) fn read_hit<R: Run>(
        &self,
        index: &SharedIndex<'_>,
        file: FileNo,
        page: Page,
        run: &R,
        copy: impl FnOnce(Frame),
    ) -> Result<Optimistic, Died> {
        // (1)
        let Some(named) = index.lookup_named(page) else {
            return Ok(Optimistic::Absent);
        };
        let Some(f) = u32::try_from(named.frame).ok().filter(|f| *f < self.frames) else {
            return Ok(Optimistic::Absent);
        };
        run.at(Step::Walked)?;
        let line = self.line_of(f);
        // (2)
        let before = line[GEN as usize].load(Ordering::Acquire);
        // (3): the slot again (acquire: the insertion it names), then the frame's page.
        if named.slot.load(Ordering::Acquire) != named.word {
            return Ok(Optimistic::Stale);
        }
        if !no_page_check(run.flaw())
            && (line[PAGE as usize].load(Ordering::Relaxed) != page
                || line[FILE as usize].load(Ordering::Relaxed) as u32 != file.0 as u32)
        {
            return Ok(Optimistic::Stale);
        }
        run.at(Step::Found)?;
        // (4)
        copy(Frame(f));
        // The generation loaded at (2) says whether the frame was in flight (module docs,
        // "In flight"): a test of a register, no load, folded into (6)'s branch (a branch
        // of its own before the copy cost the hit 36 instructions in `a_hit_costs`, by
        // the code around it it made the compiler lay out worse); a copy of a frame in
        // flight is discarded as a stale one is.
        let flying = in_flight(before) && !no_flight_check(run.flaw());
        // (5), (6)
        let changed = !no_recheck(run.flaw()) && {
            fence(Ordering::Acquire);
            line[GEN as usize].load(Ordering::Relaxed) != before
        };
        if changed | flying {
            return Ok(not_copied(before, Frame(f)));
        }
        let touched = &line[REF as usize];
        if touched.load(Ordering::Relaxed) == 0 {
            touched.store(1, Ordering::Relaxed);
        }
        Ok(Optimistic::Hit(Frame(f)))
    }

    /// M5 (module docs, "In flight"): `frame`'s bytes are the page's now. FLIGHT cleared
    /// and the count raised in one release swap (after the `preadv`), then the frame's
    /// waiters woken if one announced itself (WAITERS).
    ///
    /// Context: `me` handed `frame` over in flight (`hand_over_in_flight`) and still pins
    /// it; lock-free (one swap; a futex wake only when a reader waits).
    pub(crate) fn publish(&self, frame: Frame, me: Holder) {
        let word = self.of(frame.0, GEN);
        // Only a waiter's CAS (WAITERS, the count unchanged) stores to it meanwhile: our
        // pin keeps reclaim out, and the sweep takes only a dead reader's frames.
        let was = word.load(Ordering::Relaxed);
        assert_eq!(
            was & FLIGHT_BITS,
            flight_of(me),
            "frame {} is not in flight for {me:?}",
            frame.0
        );
        let old = word.swap(was.wrapping_add(1) & GEN_COUNT, Ordering::Release);
        if old & WAITERS != 0 {
            futex::wake(word);
        }
    }

    /// Waits a while for the in-flight frame `found` of `page` (module docs, "In flight",
    /// P1-P3): announces itself on GEN (WAITERS, a CAS from the value loaded), looks at
    /// the page's slot again, then sleeps while GEN's low half is as loaded, at most
    /// `FLIGHT_PARK` (a `Run` that does not park waits once instead). The caller then
    /// looks the page up again from the walk: published, a hit; gone, a miss.
    ///
    /// Context: any process, lock-free; may sleep (bounded). `found` came from `read_hit`
    /// or `try_pin_hit` of `page` in `index`; the caller holds no pin of it.
    pub(crate) fn wait_in_flight<R: Run>(
        &self,
        index: &SharedIndex<'_>,
        page: Page,
        found: InFlight,
        slots: &SlotTable<'_>,
        run: &R,
    ) {
        let f = found.frame.0;
        let word = self.of(f, GEN);
        let seen = found.seen;
        let Some(reader) = ((seen & FLIGHT_BITS) >> FLIGHT_SHIFT).checked_sub(1) else {
            return;
        };
        // P1: announced (only on the value in flight: a CAS). Refused: GEN changed (its
        // read published, or the frame taken out): look again.
        if seen & WAITERS == 0
            && word
                .compare_exchange(seen, seen | WAITERS, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        // P2: the slot again. A sweep (or an `abandon`) takes the frame out of its index
        // before it raises GEN and wakes: a waiter whose CAS read the raise sees the
        // removal here, and one whose CAS came before it sleeps on a value the raise
        // changes (P3 returns, or the wake after the raise ends it).
        if !names(index, page, f) {
            return;
        }
        let (_, holder) = slots.state(SlotIndex(reader as u16));
        // P3.
        match run.park() {
            Some(park) => {
                let timeout = park.timeout.map(|t| t.min(FLIGHT_PARK));
                let outcome = futex::wait(word, seen as u32, timeout);
                run.parked(holder, outcome);
            }
            None => run.wait(holder),
        }
    }

    /// `frame` as `wait_in_flight` takes it, if it is in flight (a truncation waiting
    /// for a pinned page: read.rs `truncate`).
    ///
    /// Context: any process, lock-free (one load).
    pub(crate) fn in_flight(&self, frame: Frame) -> Option<InFlight> {
        let seen = self.of(frame.0, GEN).load(Ordering::Acquire);
        in_flight(seen).then_some(InFlight { frame, seen })
    }

    /// Whether `frame` is in flight (FLIGHT set: tests).
    #[cfg(test)]
    pub(crate) fn is_in_flight(&self, frame: Frame) -> bool {
        in_flight(self.of(frame.0, GEN).load(Ordering::Acquire))
    }

    /// Whether a reader announced that it waits for `frame` in flight (WAITERS: tests).
    #[cfg(test)]
    pub(crate) fn is_waited_for(&self, frame: Frame) -> bool {
        self.of(frame.0, GEN).load(Ordering::Acquire) & WAITERS != 0
    }

    // ------------------------------------------------------------ changes

    /// The stores of a primitive, in order (module docs), each through `store`: the
    /// holder's (a step after each) or a redo's.
    fn apply(
        &self,
        intent: &Intent,
        mut store: impl FnMut(&AtomicU64, u64) -> Result<(), Died>,
    ) -> Result<(), Died> {
        let [f_owned, x, ends, status] = intent.args;
        // f | its owner's new count << 32 (ADD, DETACH: "Owners and shares").
        let f = (f_owned & COUNT_MASK) as u32;
        let owned = f_owned >> 32;
        match intent.op {
            ADD => {
                // x: the old tail + 1.
                store(self.of(f, NEXT), 0)?;
                store(self.of(f, PREV), x)?;
                if let Some(tail) = linked(x) {
                    store(self.of(tail, NEXT), link(f))?;
                }
                store(self.of(f, REF), 0)?;
                let (word, cached) = self.buddy.hand_over_store(Frame(f), Order(0));
                store(word, cached)?;
                if let Some(count) = self.owned_word(f) {
                    store(count, owned)?;
                }
                store(self.line(ENDS), ends)?;
                store(self.line(STATUS), status)
            }
            ROTATE => {
                // x: next + 1 | tail + 1 << 32.
                let next = linked(x & COUNT_MASK).expect("a rotated head has a next");
                let tail = linked(x >> 32).expect("a rotated head has a tail");
                store(self.of(f, REF), 0)?;
                store(self.of(next, PREV), 0)?;
                store(self.of(tail, NEXT), link(f))?;
                store(self.of(f, PREV), link(tail))?;
                store(self.of(f, NEXT), 0)?;
                store(self.line(ENDS), ends)
            }
            DETACH => {
                // x: prev + 1 | next + 1 << 32.
                let (prev, next) = (linked(x & COUNT_MASK), linked(x >> 32));
                if let Some(prev) = prev {
                    store(self.of(prev, NEXT), next.map_or(0, link))?;
                }
                if let Some(next) = next {
                    store(self.of(next, PREV), prev.map_or(0, link))?;
                }
                if let Some(count) = self.owned_word(f) {
                    store(count, owned)?;
                }
                store(self.line(ENDS), ends)?;
                store(self.line(STATUS), status)
            }
            code => panic!("a queue intent with an unknown operation {code}"),
        }
    }

    fn redo(&self, intent: &Intent) {
        let redone = self.apply(intent, |word, value| {
            word.store(value, Ordering::Release);
            Ok(())
        });
        assert_eq!(redone, Ok(()));
    }

    fn change<R: Run>(&self, held: &Held<'_, '_>, intent: &Intent, run: &R) -> Result<(), Died> {
        held.change(intent, run, |store| self.apply(intent, store))
    }

    /// Takes the lock (over from a dead holder: its last primitive redone, its victim
    /// finished or let go: module docs, "Take-over").
    fn take<R: Run, I: Indexes + ?Sized>(
        &self,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Held<'_, 'r>, Died> {
        let held = self.lock.lock(me, slots, run, |intent| self.redo(intent))?;
        let status = self.line(STATUS).load(Ordering::Acquire);
        if let Some((victim, evict, detached)) = victim_of(status) {
            if detached {
                self.finish(&held, victim, evict, me, indexes, slots, run)?;
            } else {
                let _ = self.of(victim, PIN).compare_exchange(
                    FROZEN,
                    0,
                    Ordering::Release,
                    Ordering::Relaxed,
                );
                held.store(self.line(STATUS), status & COUNT_MASK, run)?;
            }
        }
        Ok(held)
    }

    /// Hands `frame` (order 0, leased to `me`, holding `page` of `file`) to the cache: pins
    /// it for `me`, then ADD (module docs). The caller then inserts it into the file's index
    /// and unpins it (`unpin`); if the insertion conflicts, it just unpins (reclaim frees
    /// a queued frame its index does not name).
    ///
    /// Context: `me` is LIVE in `slots`; takes the queue's lock (no index's or the
    /// allocator's lock held); the frame's data is written (readers may read it once it is
    /// in the index). Waits (`run.wait`) while another thread of this process passes a pin
    /// of the frame (module docs, "Threads").
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn hand_over<R: Run, I: Indexes + ?Sized>(
        &self,
        frame: Frame,
        file: FileNo,
        page: Page,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        self.hand_over_held(
            frame,
            file,
            page,
            0,
            Filled::Complete,
            me,
            indexes,
            slots,
            run,
        )?
        .unlock(run)
    }

    /// A miss's M1-M2 (module docs, "In flight"): `hand_over` of `frame`, whose bytes `me`
    /// reads only after its insertion, with FLIGHT naming `me`. The caller inserts it, reads
    /// its bytes, `publish`es it (or, its read failed, `abandon`s it), then unpins it.
    ///
    /// Context: as `hand_over`; the frame's bytes are not the page's yet.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn hand_over_in_flight<R: Run, I: Indexes + ?Sized>(
        &self,
        frame: Frame,
        file: FileNo,
        page: Page,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        self.hand_over_held(
            frame,
            file,
            page,
            0,
            Filled::InFlight,
            me,
            indexes,
            slots,
            run,
        )?
        .unlock(run)
    }

    /// `hand_over` with HELD[`frame`] = `held` (0: reclaimable; a writer's mark: "Writes")
    /// and GEN[`frame`] raised, FLIGHT naming `me` if `filled` says so ("In flight"),
    /// returning with the queue's lock still held (an install puts the frame into its index
    /// under the same hold).
    #[allow(clippy::too_many_arguments)]
    fn hand_over_held<R: Run, I: Indexes + ?Sized>(
        &self,
        frame: Frame,
        file: FileNo,
        page: Page,
        held_mark: u64,
        filled: Filled,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Held<'_, 'r>, Died> {
        assert!(
            self.buddy.is_leased(frame, Order(0), me),
            "a hand-over of frame {} that {me:?} does not lease",
            frame.0
        );
        let f = frame.0;
        // A sibling thread's passing pin may hold our bit (module docs, "Threads"): it
        // unpins once its second look-up fails (the frame is in no index yet).
        while let Err(refused) = self.pin(frame, me) {
            assert_eq!(refused, Unpinnable::Ours, "a leased frame is never frozen");
            run.wait(me);
        }
        assert!(
            file.0 <= FILE_BITS,
            "a file number {} past FILE's bits",
            file.0
        );
        let owner = (u64::from(me.slot.0) + 1) << OWNER_SHIFT;
        self.of(f, FILE).store(file.0 | owner, Ordering::Release);
        self.of(f, PAGE).store(page, Ordering::Release);
        self.of(f, HELD).store(held_mark, Ordering::Release);
        // The lessee's GEN ("In flight"): raised, so that no value it takes again is one a
        // reader of an earlier incarnation may have loaded, and FLIGHT set for a miss.
        let generation = self.of(f, GEN);
        let flight = match filled {
            Filled::Complete => 0,
            Filled::InFlight => flight_of(me),
        };
        let count = generation.load(Ordering::Relaxed).wrapping_add(1) & GEN_COUNT;
        generation.store(count | flight, Ordering::Release);
        let held = self.take(me, indexes, slots, run)?;
        let (head, tail) = ends_of(self.line(ENDS).load(Ordering::Relaxed));
        let status = self.line(STATUS).load(Ordering::Relaxed);
        let owned = self
            .owned_word(f)
            .map_or(0, |count| count.load(Ordering::Relaxed) + 1);
        let intent = Intent {
            op: ADD,
            args: [
                u64::from(f) | owned << 32,
                tail.map_or(0, link),
                ends_word(head.or(Some(f)), Some(f)),
                status + 1,
            ],
        };
        if hand_over_outside_intent(run.flaw()) {
            // The broken variant: the links in the intent, the hand-over after it.
            let (word, cached) = self.buddy.hand_over_store(frame, Order(0));
            let unchanged = word.load(Ordering::Relaxed);
            held.change(&intent, run, |store| {
                self.apply(&intent, |w, v| {
                    let v = if std::ptr::eq(w, word) { unchanged } else { v };
                    store(w, v)
                })
            })?;
            held.store(word, cached, run)?;
        } else {
            self.change(&held, &intent, run)?;
        }
        Ok(held)
    }

    /// A writer's page (module docs, "Writes"): `frame` (order 0, leased to `me`, its bytes
    /// the page's newest, written with atomic stores) handed over HELD with `mark`
    /// (`held_mark`), then, under this queue's lock, put at `page` of `index` (`file`'s)
    /// in place of whatever the slot held (`SharedIndex::put`: one STORE), and the frame
    /// it replaced (if any) unmarked and taken out (E1-E7 without a shadow; E4 finds it in
    /// no index) or, pinned by a reader copying it, left queued in no index for reclaim.
    /// `Installed::Full` when the tree needs a node frame and none is free (nothing
    /// changed in the index; the frame stays queued in no index: the caller reclaims and
    /// tries again with a new frame).
    ///
    /// Context: `me` is LIVE in `slots`; takes the queue's lock, and under it the index's
    /// and the allocator's; the caller is the file's one writer in this domain (its
    /// record's WRITER) and holds its private writer lock (one install of a page at a time).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn install<R: Run, I: Indexes + ?Sized>(
        &self,
        frame: Frame,
        file: FileNo,
        page: Page,
        mark: u64,
        index: &SharedIndex<'_>,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Installed, Died> {
        assert_ne!(mark, 0, "a writer's page is HELD");
        // I1: handed over HELD, pinned by us (reclaim skips it anyway); the lock kept for
        // I2 and I3 (one hold per install).
        let held = self.hand_over_held(
            frame,
            file,
            page,
            mark,
            Filled::Complete,
            me,
            indexes,
            slots,
            run,
        )?;
        // I2: the slot swapped (or filled), one index primitive.
        let folio = Folio {
            frame: u64::from(frame.0),
            order: 0,
        };
        let put = if old_freed_before_swap(run.flaw()) {
            // The broken variant (models): the old frame evicted before the swap.
            if let Entry::Folio {
                frame: old,
                order: 0,
            } = index.lookup(page)
            {
                let old = old as u32;
                self.evict(&held, old, Evict::Remove, me, indexes, slots, run)?;
            }
            index.put(me, page, folio, slots, run)?
        } else {
            index.put(me, page, folio, slots, run)?
        };
        let installed = match put {
            Put::Full => Installed::Full,
            Put::Inserted => Installed::Inserted,
            Put::Replaced(old) => {
                let old = u32::try_from(old.frame).expect("a frame below 2^32");
                // I3: the old frame unmarked (a store under the lock), then taken out if
                // nobody pins it (its E4 finds it in no index: nothing to remove).
                if old < self.frames && self.buddy.is_cached(Frame(old), Order(0)) {
                    held.store(self.of(old, HELD), 0, run)?;
                    if victim_of(self.line(STATUS).load(Ordering::Relaxed)).is_none() {
                        self.evict(&held, old, Evict::Remove, me, indexes, slots, run)?;
                    }
                }
                Installed::Replaced
            }
        };
        held.unlock(run)?;
        self.unpin(frame, me);
        Ok(installed)
    }

    /// An append in place (module docs, "Appends in place"): the frame at `page` of
    /// `index` (`file`'s), if its mark is still `held`, marked `mark` (A1), then `store`
    /// called with it to store the written bytes, all past the record's size (A2), then
    /// `raise` to raise the size over them (A3). `Released` (nothing stored) if the page
    /// has no frame of order 0 or its frame's mark is not `held`.
    ///
    /// Context: the caller is `file`'s one writer, under its private writer lock; `held`
    /// is its mark of the page's last install or append, `mark` a new one; lock-free (a
    /// walk, a CAS). `store` must store only past the size (atomic stores: readers copy
    /// the frame's other bytes meanwhile); `raise` must be a release.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn append_in_place<R: Run>(
        &self,
        index: &SharedIndex<'_>,
        file: FileNo,
        page: Page,
        held: u64,
        mark: u64,
        run: &R,
        store: impl FnOnce(Frame),
        raise: impl FnOnce(),
    ) -> Result<Appended, Died> {
        assert!(
            held != 0 && mark != 0 && held != mark,
            "marks {held} -> {mark}"
        );
        // A0.
        let Entry::Folio { frame, order: 0 } = index.lookup(page) else {
            return Ok(Appended::Released);
        };
        let Some(f) = u32::try_from(frame).ok().filter(|f| *f < self.frames) else {
            return Ok(Appended::Released);
        };
        // A1.
        let word = self.of(f, HELD);
        let moved = if mark_kept(run.flaw()) {
            // The broken variant: the mark looked at, not moved.
            word.load(Ordering::Acquire) == held
        } else {
            word.compare_exchange(held, mark, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        };
        if !moved {
            return Ok(Appended::Released);
        }
        // Marked by us, so cached at this page since our install (module docs).
        assert!(
            self.load(f, FILE) & FILE_BITS == file.0 && self.load(f, PAGE) == page,
            "frame {f} held by our mark caches {:?} page {}, not {file:?} page {page}",
            FileNo(self.load(f, FILE) & FILE_BITS),
            self.load(f, PAGE)
        );
        run.at(Step::Stored)?;
        if size_before_bytes(run.flaw()) {
            // The broken variant: A3 before A2.
            raise();
            run.at(Step::Stored)?;
            store(Frame(f));
        } else {
            // A2.
            store(Frame(f));
            run.at(Step::Stored)?;
            // A3.
            raise();
        }
        run.at(Step::Stored)?;
        Ok(Appended::InPlace)
    }

    /// HELD[`frame`] cleared if it still holds `mark` (module docs, "Writes": the bytes a
    /// writeback wrote are on disk). Whether it did.
    ///
    /// Context: any process, lock-free (one CAS: reclaim reads the word under the lock,
    /// as a hint that lets it take the frame).
    pub(crate) fn release_held(&self, frame: Frame, mark: u64) -> bool {
        frame.0 < self.frames
            && self
                .of(frame.0, HELD)
                .compare_exchange(mark, 0, Ordering::Release, Ordering::Relaxed)
                .is_ok()
    }

    /// W3, a writeback's completion (reader.rs, `DomainWriter::written`): the frame that
    /// `index` names at `page` unmarked if it still holds `mark`, the mark of the install
    /// (or append) whose bytes the writeback wrote. Whether it did. A newer install of the
    /// page by the same writer meanwhile put a frame there with a newer mark (its bytes
    /// newer than the disk's): the CAS fails and it stays HELD (module docs, "Writes";
    /// `Flaw::ReleaseUnchecked` clears whatever the frame holds, and the loom model
    /// `release_broken_unchecked` catches reclaim freeing the newer frame).
    ///
    /// Context: any thread of the writer's process; lock-free (a look-up and a CAS).
    pub(crate) fn release_page<R: Run>(
        &self,
        index: &SharedIndex<'_>,
        page: Page,
        mark: u64,
        run: &R,
    ) -> bool {
        let Entry::Folio { frame, order: 0 } = index.lookup(page) else {
            return false;
        };
        let Ok(frame) = u32::try_from(frame) else {
            return false;
        };
        if releases_unchecked(run.flaw()) {
            // The broken variant (models): whatever mark the frame holds cleared.
            return frame < self.frames && self.of(frame, HELD).swap(0, Ordering::Release) != 0;
        }
        self.release_held(Frame(frame), mark)
    }

    /// HELD[`frame`] (tests, the writer's release at detach).
    pub(crate) fn held_mark(&self, frame: Frame) -> u64 {
        if frame.0 < self.frames {
            self.of(frame.0, HELD).load(Ordering::Acquire)
        } else {
            0
        }
    }

    /// Reclaims up to `want` frames from the head (the coldest): a referenced or pinned
    /// head gets its second chance (to the tail, REF cleared), and so does another
    /// member's frame while that member is within `shares` (module docs, "Owners and
    /// shares": its share in the first pass, its floor in the second, nothing after);
    /// every other is taken out of its index (a shadow left) and freed (E1-E7). Returns
    /// how many were freed; fewer when every queued frame is pinned, or the queue
    /// empties. Looks at no more than twice the queue's length of heads (three times
    /// with shares).
    ///
    /// Context: `me` is LIVE in `slots`; takes the queue's lock for the whole batch, and
    /// within it an index's lock and the allocator's per frame.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn reclaim<R: Run, I: Indexes + ?Sized>(
        &self,
        want: u32,
        shares: Shares,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<u32, Died> {
        let shares = if ignores_floors(run.flaw()) {
            Shares::NONE
        } else {
            shares
        };
        let held = self.take(me, indexes, slots, run)?;
        let mut freed = 0;
        let pass = self.count().max(1);
        // With shares, the shares are kept for two passes: the first may go to second
        // chances alone (a queue whose heads are referenced, or pinned in a window in
        // flight), which must not move another member down to its floor.
        let passes = if shares == Shares::NONE { 2 } else { 4 };
        let looks_max = passes * self.count();
        let mut looks = looks_max;
        while freed < want && looks > 0 {
            looks -= 1;
            let (Some(head), Some(tail)) = ends_of(self.line(ENDS).load(Ordering::Relaxed)) else {
                break;
            };
            let referenced = self.of(head, REF).load(Ordering::Relaxed) != 0;
            let pinned = self.of(head, PIN).load(Ordering::Relaxed) != 0;
            // A frame newer than the disk is kept like a pinned one ("Writes"). Acquire: a
            // frame found unmarked was unmarked (release) after its bytes reached the disk
            // (its writer's writeback, or a dead writer's keeper before the steward saw
            // it end), and a reader that misses the page once this reclaim took it must
            // read those bytes from the disk: the chain runs through this load
            // (`tests/loom_shared.rs`, `keeper_wait_*`, found it relaxed).
            let held_back = self.of(head, HELD).load(Ordering::Acquire) != 0;
            // Another member's frame within its share (first two passes) or its floor
            // (third).
            let protecting: Option<fn(Share) -> u32> = match (looks_max - looks - 1) / pass {
                _ if shares == Shares::NONE => None,
                0 | 1 => Some(|share| share.share_frames),
                2 => Some(|share| share.floor_frames),
                _ => None,
            };
            let protected = protecting.is_some_and(|limit| {
                self.owner_of(head).is_some_and(|owner| {
                    owner != me.slot && self.owned(owner) <= limit(self.share_of(&shares, owner))
                })
            });
            if (referenced || pinned || held_back || protected) && head != tail {
                let next = linked(self.load(head, NEXT)).expect("a head before its tail");
                let intent = Intent {
                    op: ROTATE,
                    args: [
                        u64::from(head),
                        link(next) | link(tail) << 32,
                        ends_word(Some(next), Some(head)),
                        0,
                    ],
                };
                self.change(&held, &intent, run)?;
                continue;
            }
            if referenced {
                // Alone in the queue: its second chance is the bit cleared.
                self.of(head, REF).store(0, Ordering::Relaxed);
                continue;
            }
            if held_back {
                // Alone in the queue and HELD: nothing to take.
                continue;
            }
            if self.evict(&held, head, Evict::Reclaim, me, indexes, slots, run)? {
                freed += 1;
            }
        }
        held.unlock(run)?;
        Ok(freed)
    }

    /// Removes `frame`, caching `page` of `file`, from the queue and its index and frees
    /// it (a truncation's or a file removal's drop of a cached page: module docs, why
    /// only queue holders remove cached pages from an index).
    ///
    /// Context: as `reclaim`; `me` does not hold `frame` pinned.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn remove<R: Run, I: Indexes + ?Sized>(
        &self,
        frame: Frame,
        file: FileNo,
        page: Page,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<Removed, Died> {
        let held = self.take(me, indexes, slots, run)?;
        let f = frame.0;
        let removed = if !self.caches(frame, file, page) {
            Removed::NotCached
        } else if self.evict(&held, f, Evict::Remove, me, indexes, slots, run)? {
            Removed::Freed
        } else {
            Removed::Pinned
        };
        held.unlock(run)?;
        Ok(removed)
    }

    /// Whether `frame` is a queued frame caching `page` of `file`.
    ///
    /// Context: the queue's lock held (a cached frame is not freed meanwhile).
    fn caches(&self, frame: Frame, file: FileNo, page: Page) -> bool {
        let f = frame.0;
        f < self.frames
            && self.buddy.is_cached(frame, Order(0))
            && self.load(f, FILE) & FILE_BITS == file.0
            && self.load(f, PAGE) == page
    }

    /// Frees `frame`, a page of `file` this reader read and handed over but whose
    /// insertion did not place it (another reader's frame was there first, or the tree
    /// had no node frame), at once instead of leaving it to reclaim: with memory to spare
    /// nothing reclaims, and every page two processes missed at the same moment stayed
    /// cached twice (issue 45's done-when 1: 1,400-1,800 such frames, 6-8% of a database
    /// read by 8 processes, most of its memory over one copy). `false` if it is not such a
    /// frame any more, or is pinned: reclaim frees it later, as before.
    ///
    /// Why these checks: the caller unpinned it before this, so the frame may have been
    /// reclaimed, freed and leased again meanwhile, even for the same page. Under the
    /// queue's lock a cached frame is not freed; one that is unpinned (a lessee pins its
    /// frame from its hand-over until its insertion is done), unmarked (HELD 0: a
    /// writer's pages are never taken here) and named by no index is a frame whose
    /// insertion failed, which nobody can find: nobody pins it meanwhile (a hit that
    /// pins a frame it found in an older incarnation fails E2 and lets go). An insertion
    /// of it by a dead member, still under way, is finished by E4 before it removes it.
    ///
    /// Context: as `remove`; `me` does not hold `frame` pinned.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn drop_unplaced<R: Run, I: Indexes + ?Sized>(
        &self,
        frame: Frame,
        file: FileNo,
        page: Page,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<bool, Died> {
        let held = self.take(me, indexes, slots, run)?;
        let f = frame.0;
        let caches_page = self.caches(frame, file, page);
        // The broken variant (models): only what `remove` checks.
        let unplaced = caches_page
            && (drops_unchecked(run.flaw())
                || self.of(f, PIN).load(Ordering::Acquire) == 0
                    && self.of(f, HELD).load(Ordering::Acquire) == 0
                    && !indexes
                        .index(file)
                        .is_some_and(|index| names(index, page, f)));
        let dropped = unplaced && self.evict(&held, f, Evict::Remove, me, indexes, slots, run)?;
        held.unlock(run)?;
        Ok(dropped)
    }

    /// A miss whose read failed (module docs, "In flight"): `frame`, which `me` handed
    /// over in flight, taken out of its index if the index names it there (no shadow),
    /// its count raised with FLIGHT kept and its waiters woken (they miss and read the page
    /// themselves). The caller then unpins it and frees it (`drop_unplaced`).
    ///
    /// Context: as `remove`; `me` pins `frame`, still in flight.
    pub(crate) fn abandon<R: Run, I: Indexes + ?Sized>(
        &self,
        frame: Frame,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        let held = self.take(me, indexes, slots, run)?;
        self.remove_in_flight(&held, frame.0, me, indexes, slots, run)?;
        held.unlock(run)
    }

    /// D1-D3 (module docs, "In flight"): the in-flight `frame` out of its index if the
    /// index names it at its page (E4 of a removal: no shadow), GEN's count raised with
    /// FLIGHT kept (a store under the lock), its waiters woken.
    #[allow(clippy::too_many_arguments)]
    fn remove_in_flight<R: Run, I: Indexes + ?Sized>(
        &self,
        held: &Held<'_, '_>,
        frame: u32,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        // D1.
        self.out_of_index(frame, Evict::Remove, me, indexes, slots, run)?;
        // D2: an RMW, so that it comes after a waiter's announcement (P1) that it did not
        // see, and the waiter's sleep on the value before it ends (`wait_in_flight`).
        let word = self.of(frame, GEN);
        if flight_cleared(run.flaw()) {
            // The broken variant: FLIGHT cleared with the raise.
            let was = word.load(Ordering::Relaxed);
            held.store(word, was.wrapping_add(1) & GEN_COUNT, run)?;
        } else {
            let mut was = word.load(Ordering::Relaxed);
            while let Err(seen) =
                word.compare_exchange(was, counted_up(was), Ordering::Release, Ordering::Relaxed)
            {
                was = seen;
            }
            run.at(Step::Stored)?;
        }
        // D3.
        futex::wake(word);
        Ok(())
    }

    /// A file record's drop (files.rs R1, under the table's lock, the record nobody's
    /// open): every folio of `file`'s tree removed and freed (`remove`: E1-E7, no shadow
    /// left), a pinned one waited for (`run.wait`: its pinner is a reader passing by, or a
    /// dead one the steward unpins) and tried again, up to `DROP_ROUNDS` rounds; then the
    /// tree released (index.rs D1-D4: its node frames freed). `Ok(false)` if a folio
    /// stayed pinned through every round: the tree keeps it (and its nodes), not
    /// released. A death anywhere leaves the tree a valid tree with fewer folios (or, in
    /// its release, one the next taker of its lock finishes releasing): the record, still
    /// LIVE, is dropped again by the next drop of it.
    ///
    /// Context: as `remove`; the caller holds the file table's lock (taken before this
    /// queue's: the lock order), and `file`'s record has no opener, so nobody inserts into
    /// its tree meanwhile (reclaim may take its folios out: a folio found gone is skipped).
    pub(crate) fn drop_file<R: Run, I: Indexes + ?Sized>(
        &self,
        file: FileNo,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<bool, Died> {
        let index = indexes
            .index(file)
            .unwrap_or_else(|| panic!("a drop of {file:?}, which has no index"));
        for _ in 0..DROP_ROUNDS {
            let folios = index.folios(me, slots, run)?;
            if folios.is_empty() {
                index.release(me, slots, run)?;
                return Ok(true);
            }
            let mut pinned = false;
            for (page, folio) in folios {
                assert_eq!(folio.order, 0, "order-0 frames only (module docs, Limits)");
                let frame = Frame(u32::try_from(folio.frame).expect("a frame below 2^32"));
                let removed = self.remove(frame, file, page, me, indexes, slots, run)?;
                pinned |= removed == Removed::Pinned;
            }
            if pinned {
                run.wait(me);
            }
        }
        Ok(false)
    }

    /// E1-E7 for the queued `frame`: whether it was freed (not: pinned).
    #[allow(clippy::too_many_arguments)]
    fn evict<R: Run, I: Indexes + ?Sized>(
        &self,
        held: &Held<'_, '_>,
        frame: u32,
        evict: Evict,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<bool, Died> {
        let status = self.line(STATUS).load(Ordering::Relaxed);
        debug_assert!(victim_of(status).is_none(), "a victim already");
        // E1.
        held.store(
            self.line(STATUS),
            status | victim_word(frame, evict, 0),
            run,
        )?;
        // E2.
        let pin = self.of(frame, PIN);
        let frozen = if ignores_pins(run.flaw()) {
            pin.store(FROZEN, Ordering::Release);
            true
        } else {
            pin.compare_exchange(0, FROZEN, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        };
        if !frozen {
            held.store(self.line(STATUS), status, run)?;
            return Ok(false);
        }
        // E3.
        let (head, tail) = ends_of(self.line(ENDS).load(Ordering::Relaxed));
        let prev = linked(self.load(frame, PREV));
        let next = linked(self.load(frame, NEXT));
        let ends = ends_word(
            if head == Some(frame) { next } else { head },
            if tail == Some(frame) { prev } else { tail },
        );
        let owned_word = self.owned_word(frame);
        let was = owned_word.map_or(0, |count| count.load(Ordering::Relaxed));
        let outside = count_outside_intent(run.flaw());
        // The broken variant's intent carries the count unchanged (stored after it).
        let owned = if outside { was } else { was.saturating_sub(1) };
        let intent = Intent {
            op: DETACH,
            args: [
                u64::from(frame) | owned << 32,
                prev.map_or(0, link) | next.map_or(0, link) << 32,
                ends,
                (status - 1) | victim_word(frame, evict, DETACHED),
            ],
        };
        self.change(held, &intent, run)?;
        if let Some(count) = owned_word.filter(|_| outside) {
            held.store(count, was.saturating_sub(1), run)?;
        }
        // E4-E7.
        self.finish(held, frame, evict, me, indexes, slots, run)?;
        Ok(true)
    }

    /// E4-E7 for the DETACHED victim `frame` (the holder's, or a dead holder's).
    #[allow(clippy::too_many_arguments)]
    fn finish<R: Run, I: Indexes + ?Sized>(
        &self,
        held: &Held<'_, '_>,
        frame: u32,
        evict: Evict,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        if free_before_index_removal(run.flaw()) {
            self.unfreeze_and_free(held, frame, me, slots, run)?;
            self.out_of_index(frame, evict, me, indexes, slots, run)?;
        } else {
            // E4.
            self.out_of_index(frame, evict, me, indexes, slots, run)?;
            // E5, E6.
            self.unfreeze_and_free(held, frame, me, slots, run)?;
        }
        // E7.
        let status = self.line(STATUS).load(Ordering::Relaxed);
        held.store(self.line(STATUS), status & COUNT_MASK, run)
    }

    /// E4.
    fn out_of_index<R: Run, I: Indexes + ?Sized>(
        &self,
        frame: u32,
        evict: Evict,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        let file = FileNo(self.load(frame, FILE) & FILE_BITS);
        let page = self.load(frame, PAGE);
        let Some(index) = indexes.index(file) else {
            return Ok(());
        };
        if !names(index, page, frame) {
            // A dead writer's insertion of the frame may be under way: finish it first.
            index.recover(me, slots, run)?;
            if !names(index, page, frame) {
                return Ok(());
            }
        }
        let leave = match evict {
            Evict::Reclaim => Leave::Shadow(SHADOW_VALUE),
            Evict::Remove => Leave::Empty,
        };
        // `None`: the removal was a dead holder's (this queue's last, in E4), finished by
        // the index's take-over inside `remove_named`. Only if the slot still names the
        // victim once the lock is ours: a dead writer's `put` ("Writes", I2) of this page,
        // published but not yet stored when the look-up above ran, is redone by that
        // take-over and swaps the slot to its new frame, which is not ours to remove
        // (found by `a_writers_install_killed_at_every_step_...`: reclaim took the new
        // frame out in place of the old).
        let removed = index.remove_named(me, page, u64::from(frame), leave, slots, run)?;
        assert!(
            removed.is_none_or(|folio| folio.frame == u64::from(frame)),
            "the index named the victim under the queue's lock, not {removed:?}"
        );
        Ok(())
    }

    /// E5, E6: the reuse generation raised, the frame unfrozen and freed.
    fn unfreeze_and_free<R: Run>(
        &self,
        held: &Held<'_, '_>,
        frame: u32,
        me: Holder,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        let late = raise_after_free(run.flaw());
        if !late {
            self.raise(held, frame, run)?;
        }
        let _ =
            self.of(frame, PIN)
                .compare_exchange(FROZEN, 0, Ordering::Release, Ordering::Relaxed);
        self.buddy
            .free_cached(Frame(frame), Order(0), me, slots, run)?;
        if late {
            self.raise(held, frame, run)?;
        }
        Ok(())
    }

    /// E5's raise of GEN[`frame`] (module docs, "The optimistic hit"): a release store
    /// under the lock, so that a reader whose acquire load sees it also sees E4's removal.
    /// Redone by a taker that finishes a dead holder's victim: a second raise is harmless
    /// (a reader only compares the word for equality).
    fn raise<R: Run>(&self, held: &Held<'_, '_>, frame: u32, run: &R) -> Result<(), Died> {
        let generation = self.of(frame, GEN);
        let raised = counted_up(generation.load(Ordering::Relaxed));
        held.store(generation, raised, run)
    }

    /// The steward's sweep of a dead process, in its order: this queue's lock taken (over
    /// from `dead` if it held it: its ADD, ROTATE or DETACH redone, its victim finished),
    /// every index whose lock `dead` holds taken over and let go (its change finished:
    /// else it waits for the index's next writer), `dead`'s pins dropped, then the buddy
    /// allocator's sweep of its leases (`SharedBuddy::sweep`, which must come after: a
    /// redone ADD hands over a frame `dead` leased). Returns the frames the allocator's
    /// sweep freed. `dead`'s marks stay (`release_marks`, when its keeper is done).
    ///
    /// Context: the steward (`me`), after `SlotTable::mark_dead(dead)`, before
    /// `free_dead(dead)`. Scans every frame's PIN word and every index's lock word.
    pub(crate) fn sweep<R: Run, I: Indexes + ?Sized>(
        &self,
        dead: Holder,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<u32, Died> {
        assert!(!slots.is_live(dead), "a sweep of a live process {dead:?}");
        let held = self.take(me, indexes, slots, run)?;
        self.disown_held(&held, dead, run)?;
        self.sweep_flights(&held, dead, me, indexes, slots, run)?;
        held.unlock(run)?;
        let mut recovered = Ok(());
        indexes.each(&mut |index| {
            if recovered.is_ok() && index.lock_line().holder() == Some(dead) {
                recovered = index.recover(me, slots, run);
            }
        });
        recovered?;
        if dead.slot.0 < PIN_SLOTS {
            let bit = slot_bit(dead);
            // Only frames below the allocator's frontier were ever leased, so pinned
            // (buddy.rs, "Frames never reached"); the dead process reached them before
            // its death, which the steward learned from the kernel (its pidfd), so this
            // load sees the frontier past every frame it pinned.
            for f in 0..self.buddy.reached() {
                let pin = self.of(f, PIN);
                if pin.load(Ordering::Relaxed) & bit != 0 {
                    pin.fetch_and(!bit, Ordering::Release);
                }
            }
        }
        self.buddy.sweep(dead, me, slots, run)
    }

    /// The sweep's part of "In flight" (module docs, the death): every CACHED frame that
    /// `dead` pins and whose FLIGHT names it taken out of its index, its count raised with
    /// FLIGHT kept, its waiters woken (D1-D3), before `sweep` drops `dead`'s pins. A
    /// frame it had not inserted yet (or whose insertion conflicted) is in no index: only
    /// raised and woken; one it had not handed over yet is the allocator's sweep's.
    ///
    /// Context: under the queue's lock (the sweep's hold), `dead` DEAD.
    #[allow(clippy::too_many_arguments)]
    fn sweep_flights<R: Run, I: Indexes + ?Sized>(
        &self,
        held: &Held<'_, '_>,
        dead: Holder,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        if dead.slot.0 >= PIN_SLOTS || flight_not_swept(run.flaw()) {
            return Ok(());
        }
        let (bit, flight) = (slot_bit(dead), flight_of(dead));
        for f in 0..self.buddy.reached() {
            if self.of(f, PIN).load(Ordering::Acquire) & bit != 0
                && self.of(f, GEN).load(Ordering::Acquire) & FLIGHT_BITS == flight
                && self.buddy.is_cached(Frame(f), Order(0))
            {
                self.remove_in_flight(held, f, me, indexes, slots, run)?;
            }
        }
        Ok(())
    }

    /// A dead writer's marks cleared (module docs, "Writes": what its death means): every
    /// HELD word naming `dead`'s slot. Returns how many. Not part of `sweep`: the steward
    /// calls it once `dead`'s keeper, if it had one, has written its pages back (its
    /// frames stay HELD until then: docs/sharing.md "Writes seen across processes",
    /// "Death"), and before `dead`'s slot is freed (a mark names a slot, not a
    /// generation: the slot's next process's marks would look the same).
    ///
    /// Context: the steward (or a test), `dead` DEAD in its slot; lock-free (a CAS per
    /// mark: a writer's own release of the same mark races it harmlessly).
    pub(crate) fn release_marks(&self, dead: Holder) -> u32 {
        let dead_mark = held_slot(dead);
        let mut released = 0;
        // Only frames below the allocator's frontier were ever handed over, so HELD
        // (buddy.rs, "Frames never reached"); a load past it would fault in the queue's
        // words of every frame the domain could have (its memory is what it uses).
        for f in 0..self.buddy.reached() {
            let word = self.of(f, HELD);
            let mark = word.load(Ordering::Relaxed);
            if mark >> 48 == dead_mark
                && word
                    .compare_exchange(mark, 0, Ordering::Release, Ordering::Relaxed)
                    .is_ok()
            {
                released += 1;
            }
        }
        released
    }

    /// The marks naming `holder`'s slot (the steward: whether a dead writer's keeper is
    /// to be waited for; tests: its frames still HELD while its keeper writes).
    pub(crate) fn marks_of(&self, holder: Holder) -> u32 {
        let slot_mark = held_slot(holder);
        (0..self.buddy.reached())
            .filter(|&f| self.of(f, HELD).load(Ordering::Acquire) >> 48 == slot_mark)
            .count() as u32
    }

    /// `member`'s frames made nobody's (module docs, "Owners and shares"): its clean
    /// detach's, after its last hand-over.
    ///
    /// Context: `me` is LIVE (`member` itself, or the steward); takes the queue's lock and
    /// loads every reached frame's FILE word under it.
    pub(crate) fn disown<R: Run, I: Indexes + ?Sized>(
        &self,
        member: Holder,
        me: Holder,
        indexes: &I,
        slots: &SlotTable<'_>,
        run: &R,
    ) -> Result<(), Died> {
        let held = self.take(me, indexes, slots, run)?;
        self.disown_held(&held, member, run)?;
        held.unlock(run)
    }

    /// `disown` under the lock: every frame naming `member` its owner made nobody's (a
    /// CAS: a live lessee may be storing a leased frame's FILE meanwhile, and a leased
    /// frame counts for nobody), then `member`'s count 0. A death between leaves a count
    /// at least the frames it still owns (each DETACH of one lowers it by one, never
    /// below 0), which the next `disown` of it zeroes: the steward sweeps a dead process
    /// until its sweep ends.
    fn disown_held<R: Run>(
        &self,
        held: &Held<'_, '_>,
        member: Holder,
        run: &R,
    ) -> Result<(), Died> {
        let Some(records) = self.owners else {
            return Ok(());
        };
        if member.slot.0 >= records.slot_count() {
            return Ok(());
        }
        let owner = u64::from(member.slot.0) + 1;
        for f in 0..self.buddy.reached() {
            let word = self.of(f, FILE);
            let file = word.load(Ordering::Relaxed);
            if file >> OWNER_SHIFT == owner {
                let _ = word.compare_exchange(
                    file,
                    file & FILE_BITS,
                    Ordering::Release,
                    Ordering::Relaxed,
                );
            }
        }
        held.store(records.owned(member.slot), 0, run)
    }

    /// The invariant (module docs), on a quiet queue and allocator: the lock free, no
    /// intent, no victim; the list's links, ends and count right; every queued frame
    /// CACHED and every CACHED frame queued once; no PIN FROZEN or naming a slot not live.
    ///
    /// Context: nobody changes the queue or the allocator meanwhile (a test, or the
    /// steward alone).
    pub(crate) fn check(&self, slots: &SlotTable<'_>) -> Result<QueueCensus, String> {
        if let Some(holder) = self.lock.holder() {
            return Err(format!("the queue's lock is held by {holder:?}"));
        }
        if self.lock.intent_published() {
            return Err("an intent is published on the queue".into());
        }
        let status = self.line(STATUS).load(Ordering::Acquire);
        if let Some(victim) = victim_of(status) {
            return Err(format!("a victim is named: {victim:?}"));
        }
        let count = (status & COUNT_MASK) as u32;
        let (head, tail) = ends_of(self.line(ENDS).load(Ordering::Acquire));
        let mut seen = vec![false; self.frames as usize];
        let mut queued = Vec::new();
        let mut owned = vec![0u64; 1 << 16];
        let mut prev = None;
        let mut at = head;
        while let Some(f) = at {
            if f >= self.frames {
                return Err(format!("the queue names frame {f}"));
            }
            if std::mem::replace(&mut seen[f as usize], true) {
                return Err(format!("frame {f} is queued twice"));
            }
            if linked(self.load(f, PREV)) != prev {
                return Err(format!("frame {f}'s prev is not {prev:?}"));
            }
            if !self.buddy.is_cached(Frame(f), Order(0)) {
                return Err(format!("queued frame {f} is not CACHED"));
            }
            queued.push((
                Frame(f),
                FileNo(self.load(f, FILE) & FILE_BITS),
                self.load(f, PAGE),
            ));
            if let Some(owner) = self.owner_of(f) {
                owned[owner.0 as usize] += 1;
            }
            prev = Some(f);
            at = linked(self.load(f, NEXT));
        }
        if prev != tail {
            return Err(format!("the list ends at {prev:?}, the tail is {tail:?}"));
        }
        if queued.len() != count as usize {
            return Err(format!("{} queued, the count says {count}", queued.len()));
        }
        if let Some(records) = self.owners {
            for slot in 0..records.slot_count() {
                let counted = records.owned(SlotIndex(slot)).load(Ordering::Acquire);
                if counted != owned[slot as usize] {
                    return Err(format!(
                        "slot {slot} owns {} queued frames, its count says {counted}",
                        owned[slot as usize]
                    ));
                }
            }
        }
        let census = self.buddy.check(slots)?;
        for (frame, order) in &census.cached {
            if *order != Order(0) || !seen[frame.0 as usize] {
                return Err(format!("CACHED frame {} is not queued", frame.0));
            }
        }
        for f in 0..self.buddy.reached() {
            let pin = self.load(f, PIN);
            if pin & FROZEN != 0 {
                return Err(format!("frame {f} is frozen"));
            }
            for slot in 0..PIN_SLOTS {
                if pin & (1 << slot) != 0 {
                    let (state, holder) = slots.state(super::SlotIndex(slot));
                    if state != super::slot::SlotState::Live || !slots.is_live(holder) {
                        return Err(format!("frame {f} is pinned by slot {slot}, not live"));
                    }
                }
            }
        }
        Ok(QueueCensus { queued })
    }
}

/// Whether a model's broken variant makes the hand-over's store outside ADD's intent.
fn hand_over_outside_intent(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::HandOverOutsideIntent => true,
        _ => false,
    }
}

/// Whether a broken variant frees the victim (E5, E6) before it leaves the index (E4).
fn free_before_index_removal(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::FreeBeforeIndexRemoval => true,
        _ => false,
    }
}

/// Whether a broken variant raises the victim's reuse generation after its free (E6), not
/// before it (E5).
fn raise_after_free(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::RaiseAfterFree => true,
        _ => false,
    }
}

/// Whether a broken variant's optimistic hit skips the generation's check after its copy.
fn no_recheck(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::NoRecheck => true,
        _ => false,
    }
}

/// Whether a broken variant's optimistic hit trusts the walk's slot loaded again without
/// checking the frame's page (the slot's node may have moved to other pages meanwhile).
fn no_page_check(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::NoPageCheck => true,
        _ => false,
    }
}

/// Whether a broken variant freezes a victim without looking at its pins.
fn old_freed_before_swap(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::OldFreedBeforeSwap => true,
        _ => false,
    }
}

/// Whether a broken variant's append in place raises the size before it stores the bytes
/// (A3 before A2).
fn size_before_bytes(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::SizeBeforeBytes => true,
        _ => false,
    }
}

/// Whether a broken variant's DETACH lowers its owner's count by a store after its
/// intent, not in it (a taker's redo then leaves the count one too high).
fn count_outside_intent(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::CountOutsideIntent => true,
        _ => false,
    }
}

/// Whether a broken variant's append in place keeps the frame's mark instead of moving it
/// to a new one (A1: a load, not a CAS).
fn mark_kept(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::MarkKept => true,
        _ => false,
    }
}

/// Whether a broken variant's writeback release clears whatever mark the page's frame
/// holds, not only the one it wrote.
fn releases_unchecked(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::ReleaseUnchecked => true,
        _ => false,
    }
}

/// Whether a broken variant's reclaim protects no member's share or floor.
fn ignores_floors(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::NoFloors => true,
        _ => false,
    }
}

/// Whether a broken variant's `drop_unplaced` takes out a frame that caches its page
/// without looking at its pins, its mark or the index.
fn drops_unchecked(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::DropUnchecked => true,
        _ => false,
    }
}

/// Whether a broken variant's hit copies a frame without looking at its FLIGHT.
fn no_flight_check(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::NoFlightCheck => true,
        _ => false,
    }
}

/// Whether a broken variant's sweep leaves a dead reader's in-flight frames indexed.
fn flight_not_swept(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::FlightNotSwept => true,
        _ => false,
    }
}

/// Whether a broken variant's sweep clears a dead reader's FLIGHT as it takes the frame
/// out, instead of leaving it.
fn flight_cleared(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::FlightCleared => true,
        _ => false,
    }
}

fn ignores_pins(flaw: Flaw) -> bool {
    match flaw {
        #[cfg(test)]
        Flaw::EvictPinned => true,
        _ => false,
    }
}

// STATUS's victim (bits 32..62) holds a frame + 1; ENDS and the intents' `f | owned <<
// 32` a frame, a frame + 1 or a count in 32 bits: every frame of the largest domain.
const _: () = assert!(super::domain::FRAMES_MAX as u64 <= VICTIM_MASK);

#[cfg(test)]
mod tests {
    use super::super::domain::FRAMES_MAX;
    use super::*;

    /// The words that pack a frame number keep the largest domain's frames (domain.rs,
    /// `FRAMES_MAX`): its last frame and those around 2^20 (the old cap), with the flags
    /// beside them.
    #[test]
    fn a_frames_words_keep_the_largest_domains_frames() {
        for frame in [0, (1 << 20) - 1, 1 << 20, (1 << 24) + 1, FRAMES_MAX - 1] {
            for evict in [Evict::Reclaim, Evict::Remove] {
                for detached in [0, DETACHED] {
                    let status = victim_word(frame, evict, detached) | u64::from(FRAMES_MAX);
                    assert_eq!(
                        victim_of(status),
                        Some((frame, evict, detached != 0)),
                        "{frame}"
                    );
                    assert_eq!(status & COUNT_MASK, u64::from(FRAMES_MAX));
                }
            }
            let other = FRAMES_MAX - 1 - frame;
            assert_eq!(
                ends_of(ends_word(Some(frame), Some(other))),
                (Some(frame), Some(other))
            );
            assert_eq!(ends_of(ends_word(None, Some(frame))), (None, Some(frame)));
        }
    }
}
