//! A file handle: the API of a read, and its hit path.
//!
//! `read_at` first tries the optimistic hit path (`version`): look the page up without a
//! lock, copy its bytes with a byte-wise atomic memcpy, validate the version. No atomic
//! read-modify-write happens on that path once a folio is hot: the hit is counted in a
//! per-thread counter; the access frequency that eviction reads (S3-FIFO, LRU) is raised
//! by one CAS only while below its maximum (so at most three times per folio); the
//! readahead marker and the prefetched bit are read with one load (`StateWord`) and
//! cleared only when set (once per folio).
//!
//! Otherwise it takes the pinned path (`pinned`): `Mapping::find_get` (refcount
//! protocol), waits for in-flight I/O on the parked wait table, and copies from the
//! pinned folio. A miss asks the readahead policy whether to open a window, then reads
//! through the miss path (`filemap`); a read that touches a folio carrying the readahead
//! marker starts the next window (`readahead`).
//!
//! Each handle has its own readahead state (`RaCell`), shared by every thread that reads
//! through the handle and updated only by CAS; its maximum window is lowered to the
//! cache-wide limit (`crate::readahead::ReadaheadLimit`) when a window is decided, never on
//! a hit.
//!
//! Its parts: `pinned`, the slow path's look-up and settling (shared with the futures and
//! the write side); `prefetch`, where a read asks the readahead policy for a window and
//! reads it, and forced readahead; `advise`, the handle's advice and readahead settings;
//! `read_many`, batched reads; `async_read`, the reads as futures; `modify`, the write API.
//!
//! **A domain file** (a read-only handle of a cache built with `CacheBuilder::domain`):
//! `read_at` and `read_many` read through the domain (`shared::reader::DomainFile`), not
//! this cache's mapping: one branch at the top of `read_at` and `read_at_hint` (a load of
//! the handle's first line, which the hit loads anyway, and a test that a private cache's
//! handle always takes the same way), both inlined into their caller, before the private
//! read's entry (`read_private`), so that a domain file's hit pays none of it. Its futures
//! (`read_at_async`, `read_many_async`) copy what is cached at their first poll and read
//! the rest on a worker thread (async_read.rs, "A domain file"), and `readahead` reads
//! its range into the domain on a worker (prefetch.rs); `get_page` and `get_page_async`
//! refuse it (`Unsupported`: a `PageRef` pins a private folio). Its reads' window is the
//! domain file's own, with the handle's maximum, its advice's included
//! (`shared/read.rs`, "Readahead"; advise.rs);
//! the rest (its length, `stats`) is its private mapping's, which it keeps (opened as any handle's; it
//! caches nothing for the handle).
//! A writable open of the file in this process retires the handle (mapping/domain.rs: a
//! flag on the `DomainFile`'s line, which its read loads anyway): from then on it is a
//! private handle in every respect, so that it reads this process's writes. Unless
//! another process is the writer of the file's record: this process then follows it
//! (mapping/domain.rs, "Two writing processes"), its handles, the writable ones too,
//! read through the domain until its first write takes the role, and again once it hands
//! the role over.
//!
//! Protection: a handle's readahead state word is replaced by CAS only (`RaCell`); its
//! maximum window of `Advice::Normal` and its no-reuse flag are single words (hints); the
//! error sequence it last reported is under its mutex (`since`); the root hint is
//! refreshed by stores of its own (`index::RootHint`) and the counters are atomics; the
//! rest is fixed at open. A `PageRef` holds a reference on its folio until it is dropped.

mod advise;
mod async_read;
mod modify;
mod pinned;
mod prefetch;
mod read_many;

pub use advise::{Advice, ReadaheadWindow};
pub use async_read::{GetPageFuture, ReadAtFuture};
pub use read_many::ReadManyFuture;

use std::fs::File as StdFile;
use std::io;
use std::ops::Deref;
use std::os::unix::io::AsRawFd;
use std::sync::{Arc, Mutex};

use crate::eviction::ReadHint;
use crate::filemap::MissPath;
use crate::folio_meta::FolioMeta;
use crate::index::{Entry, RootHint};
use crate::mapping::{Attached, DomainAdmission, Rejoin};
use crate::mapping::{Mapping, Pinned};
use crate::pagecache::{Core, Engine};
use crate::readahead::RaCell;
use crate::shared::reader::{DomainFile, DomainReader};
use crate::stats::{self, FileStats, HandleCounters};
use crate::types::{FrameId, Order, PageIndex};
use crate::write::errseq::Since;

// Below `file` (types.rs) so that the shared path's files say it too.
pub(crate) use crate::types::OpenMode;

/// Whether a handle may write (`Cache::open` is read-only; `Cache::open_options` says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    ReadOnly,
    ReadWrite,
}

/// An open file, read (and, opened for it, written) through its cache. Safe to share
/// between threads (`&File` is all a read or a write needs); RocksDB-style engines share
/// one handle among all their reader threads.
///
/// `repr(C)` and line-aligned: what a hit reads of the handle (the first five fields)
/// lies in one cache line.
#[repr(C, align(64))]
pub struct File {
    cache: Arc<Engine>,
    mapping: Arc<Mapping>,
    /// The index's root as this handle last saw it: the hit path's walk starts there
    /// without waiting for the mapping's line (`index::RootHint`).
    root_hint: RootHint,
    /// `Advice::NoReuse` in force: reads are `ReadHint::NoReuse`.
    no_reuse: std::sync::atomic::AtomicBool,
    /// A domain file's reader (module docs): `read_at` goes there while it is current.
    /// `None` for every handle of a private cache; a writable handle has one while its
    /// process has a writer's role in the domain (current while it follows another).
    shared: Option<Arc<DomainFile>>,
    fd: Arc<StdFile>,
    mode: OpenMode,
    access: Access,
    ra: RaCell,
    /// The maximum window of `Advice::Normal`, in pages.
    ra_pages_normal: std::sync::atomic::AtomicU32,
    /// The file's error sequence as this handle last reported it (`errseq`): each sync
    /// reports a writeback error once per handle.
    since: Mutex<Since>,
    /// What this handle's misses and readahead read from the device (`stats`).
    counters: HandleCounters,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("mapping", &self.mapping.id)
            .field("len", &self.len())
            .field("mode", &self.mode)
            .field("access", &self.access)
            .finish()
    }
}

#[cfg(test)]
impl File {
    /// The cache's core and backend and the file's mapping: the writeback tests drive the
    /// protocol's steps by hand (`writeback::tests`).
    pub(crate) fn parts_for_test(&self) -> (&Arc<Core>, &dyn crate::io::Backend, &Arc<Mapping>) {
        (&self.cache.core, &*self.cache.backend, &self.mapping)
    }
}

impl File {
    pub(crate) fn new(
        cache: Arc<Engine>,
        mapping: Arc<Mapping>,
        fd: Arc<StdFile>,
        mode: OpenMode,
        access: Access,
        ra_pages: u32,
    ) -> File {
        if access == Access::ReadWrite {
            // Before the handle exists: this process's domain handles of the file read
            // privately from now on (mapping/domain.rs, A2).
            mapping.writer_opened();
        }
        if access == Access::ReadWrite && mapping.write.adopt_fd(&fd) {
            cache
                .core
                .mappings
                .register_writer(&mapping, fd.as_raw_fd());
        }
        let since = Mutex::new(mapping.write.errseq().sample());
        let root_hint = RootHint::new(&mapping.index);
        mapping.index.refresh_hint(&root_hint);
        File {
            cache,
            mapping,
            fd,
            mode,
            access,
            ra: RaCell::new(ra_pages),
            root_hint,
            ra_pages_normal: std::sync::atomic::AtomicU32::new(ra_pages),
            since,
            counters: HandleCounters::default(),
            no_reuse: std::sync::atomic::AtomicBool::new(false),
            shared: None,
        }
    }

    /// Makes this read-only handle a domain file (module docs): its reads go to `shared`.
    ///
    /// Context: the open, before the handle is handed out.
    fn read_through(&mut self, shared: Arc<DomainFile>) {
        assert_eq!(self.access, Access::ReadOnly, "a domain file is read-only");
        // The handle's readahead maximum, for its window through the domain.
        shared.set_readahead_pages(self.ra.max_pages());
        self.shared = Some(shared);
    }

    /// A read-only handle of a domain cache: admitted to `reader`'s domain if this
    /// process holds no newer bytes of the file (mapping/domain.rs, A1; counted when it
    /// does), else (or if the domain refuses it) read privately.
    ///
    /// Context: the open, before the handle is handed out; takes the mapping's
    /// `DomainUse` lock and the domain's locks.
    /// Errors: `dup`'s, `SharedReader::admit`'s.
    pub(crate) fn admit_to(&mut self, reader: &Arc<DomainReader>) -> io::Result<()> {
        let fd = self.clone_fd()?;
        let mode = self.mode;
        let admitted = self.mapping.admit_domain(|| reader.admit(fd, mode))?;
        match admitted {
            DomainAdmission::Admitted(shared) => {
                // Admitted retired: this process is the file's writer, its reads private
                // until it hands the role over (mapping/domain.rs, F3). Counted as A1's.
                if !shared.is_current() {
                    reader.note_newer();
                }
                self.read_through(shared);
            }
            DomainAdmission::Newer => reader.note_newer(),
            DomainAdmission::Refused => {}
        }
        Ok(())
    }

    /// A writable handle of a domain cache (mapping/domain.rs, A4, F1): this process
    /// made the writer of the file's record (its writes put into the domain from now on)
    /// or a follower of the process that is (its reads through the domain until it
    /// writes: this handle's own domain handle), or, if the domain will not, the record
    /// retired (A2: another process reads the disk).
    ///
    /// Context: the open, before the handle is handed out; takes the mapping's
    /// `DomainUse` lock and the domain's locks.
    /// Errors: `dup`'s, `fstat`'s.
    pub(crate) fn attach_writer_to(
        &mut self,
        reader: &Arc<DomainReader>,
        meta: &std::fs::Metadata,
    ) -> io::Result<()> {
        let fd = self.clone_fd()?;
        let mode = self.mode;
        let rejoin = Rejoin {
            reader: reader.clone(),
            fd: self.fd.clone(),
            mode,
        };
        let attached = self
            .mapping
            .attach_writer(rejoin, || reader.open_writer(fd, mode))?;
        match attached {
            Attached::Refused => {
                reader.retire(meta)?;
                return Ok(());
            }
            Attached::Holder => self.core().dirty_files.note_role(&self.mapping),
            Attached::Follower => {}
        }
        let fd = self.clone_fd()?;
        self.shared = self.mapping.add_writable(|| reader.admit(fd, mode))?;
        if let Some(shared) = &self.shared {
            shared.set_readahead_pages(self.ra.max_pages());
        }
        Ok(())
    }

    /// A writable handle of a domain cache that writes privately (`OpenOptions::private`):
    /// this process's domain handles of the file retired (A2) and the domain's record
    /// retired (its next admission, once nobody has it open, drops the pages cached
    /// before our writes).
    ///
    /// Context: the open, before the handle is handed out; takes the mapping's
    /// `DomainUse` lock and the domain's locks.
    /// Errors: `SharedReader::retire`'s.
    pub(crate) fn write_privately(
        &self,
        reader: &Arc<DomainReader>,
        meta: &std::fs::Metadata,
    ) -> io::Result<()> {
        self.mapping.retire_files();
        reader.retire(meta).map(drop)
    }

    /// The domain this handle reads through, unless it has none or a writable open of
    /// the file in this process retired it (mapping/domain.rs): then it reads privately.
    #[inline]
    fn domain(&self) -> Option<&Arc<DomainFile>> {
        self.shared.as_ref().filter(|shared| shared.is_current())
    }

    /// A descriptor of this handle's open file (`dup`): the domain's own.
    ///
    /// Errors: `dup`'s.
    pub(crate) fn clone_fd(&self) -> io::Result<StdFile> {
        self.fd.try_clone()
    }

    /// Whether this handle reads through its cache's domain now (module docs): false for
    /// a handle of a private cache, one the domain refused, and one a writable open of its
    /// file in this process retired since (while this process is the file's writer in the
    /// domain); true for a writable handle while another process is the writer.
    pub fn is_domain_file(&self) -> bool {
        self.domain().is_some()
    }

    /// The error of a read this handle cannot make yet: it is a domain file (module docs).
    fn domain_unsupported(what: &str) -> io::Error {
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "folio: {what} of a file read through a domain is not built yet \
                 (read_at, read_many, their futures and readahead are)"
            ),
        )
    }

    /// What this handle caused since it was opened: the device reads of its misses and
    /// of the readahead it started. A storage engine that reopens a file it has just
    /// written reads it back with no I/O while its pages stay cached: this says so.
    pub fn stats(&self) -> FileStats {
        self.counters.snapshot()
    }

    /// The file's length in bytes, as the cache knows it (from open, lowered when a read
    /// finds the file shorter; for a file folio writes, its logical length: what writes
    /// and `set_len` made it, ahead of the disk until a sync). A handle that reads through
    /// its cache's domain: the domain's length, which another process's writes through
    /// folio raise as they return (its reads stop there, not at the length at open).
    pub fn len(&self) -> u64 {
        match self.domain() {
            Some(shared) => shared.len(),
            None => self.mapping.size_bytes(),
        }
    }

    /// Re-reads the file's length from the kernel (`fstat`) and adopts it: cached pages
    /// past a smaller length are dropped, so no byte past the new end is ever returned;
    /// a larger length makes appended bytes readable. Returns the new length. A file that
    /// folio has written keeps the length folio gave it (its writes are the newest bytes).
    ///
    /// Context: any thread; one system call; takes the index lock if pages are dropped.
    pub fn refresh_len(&self) -> io::Result<u64> {
        let size = self.fd.metadata()?.len();
        self.mapping.resize(self.core().memory(), size);
        Ok(self.mapping.size_bytes())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether reads bypass the kernel's page cache (false where the file system refused
    /// O_DIRECT and the file was opened buffered).
    pub fn is_direct(&self) -> bool {
        self.mode == OpenMode::Direct
    }

    fn core(&self) -> &Core {
        &self.cache.core
    }

    /// The miss path's view of this handle, inserting as the handle's advice says.
    fn fill(&self) -> MissPath<'_> {
        self.fill_for(self.hint())
    }

    /// The miss path's view of this handle, inserting under `hint`.
    fn fill_for(&self, hint: ReadHint) -> MissPath<'_> {
        MissPath {
            cache: &self.cache,
            mapping: &self.mapping,
            fd: &self.fd,
            handle: &self.counters,
            reuse: hint,
        }
    }

    /// The hint of this handle's reads: `NoReuse` after `Advice::NoReuse`, until
    /// `Advice::Normal`.
    #[inline]
    pub fn hint(&self) -> ReadHint {
        if self.no_reuse.load(std::sync::atomic::Ordering::Relaxed) {
            ReadHint::NoReuse
        } else {
            ReadHint::Normal
        }
    }

    /// Reads up to `buf.len()` bytes at `offset` into `buf`. Any offset and length: the
    /// result is short only at the end of the file (0 at or past it, and for an empty
    /// `buf`).
    ///
    /// Errors: `InvalidInput` if `offset + buf.len()` overflows; the I/O error of the read
    /// of a missing page (every reader waiting for that page gets it; a later read
    /// retries); `OutOfMemory` if every folio stays pinned (see `CacheBuilder::alloc_wait`).
    /// Bytes already copied into `buf` when an error occurs are not reported.
    ///
    /// Context: any thread; may sleep waiting for I/O or memory.
    #[inline]
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        // The one branch a private cache's hit pays for domains (module docs), taken
        // before the private read's frame is set up: a domain file's hit calls the
        // domain's read with nothing of the private path's entry.
        if let Some(shared) = self.domain() {
            checked_end(offset, buf.len())?;
            return shared.read_at(buf, offset);
        }
        self.read_private(buf, offset, self.hint())
    }

    /// `read_at` under `hint`, whatever the handle's advice: `ReadHint::NoReuse` for a
    /// read that will not come back (a one-time scan, a compaction's input): the pages it
    /// brings in leave the cache before the working set, and the cached pages it reads are
    /// not counted as used (`eviction::noreuse`).
    ///
    /// Errors and context: as `read_at`.
    #[inline]
    pub fn read_at_hint(&self, buf: &mut [u8], offset: u64, hint: ReadHint) -> io::Result<usize> {
        // As `read_at`'s.
        if let Some(shared) = self.domain() {
            checked_end(offset, buf.len())?;
            return shared.read_at(buf, offset);
        }
        self.read_private(buf, offset, hint)
    }

    /// `read_at_hint` of a handle that reads through no domain (a private cache's, or
    /// one its file's writable open retired): the private cache's read. Not inlined, so
    /// that the domain's branch above comes before its entry.
    #[inline(never)]
    fn read_private(&self, buf: &mut [u8], offset: u64, hint: ReadHint) -> io::Result<usize> {
        let request_end = checked_end(offset, buf.len())?;
        let end = request_end.min(self.mapping.size_bytes());
        if offset >= end {
            return Ok(0);
        }
        // The common case first, with nothing else on its path: the request lies in one
        // cached folio.
        let done = match self.read_hit(offset, end, buf, hint) {
            Some(n) if offset + n as u64 >= end => return Ok(n),
            Some(n) => n,
            None => 0,
        };
        self.read_rest(buf, offset, request_end, done, hint)
    }

    /// `read_at_hint` from byte `done` of `buf` on: the loop over the request's folios,
    /// hits and misses (which read the missing pages and wait for them). Not inlined: the
    /// one-folio hit above stays short.
    #[inline(never)]
    fn read_rest(
        &self,
        buf: &mut [u8],
        offset: u64,
        request_end: u64,
        mut done: usize,
        hint: ReadHint,
    ) -> io::Result<usize> {
        debug_assert!(offset + done as u64 <= request_end && done <= buf.len());
        let core = self.core();
        let last_page = PageIndex::ceil(request_end);
        // Whether a page of this read missed or waited: only such reads record where they
        // ended for the sequential test (`MissRequest::prev_index`), so that hits write
        // nothing shared.
        let mut slow = false;
        let result = loop {
            let end = request_end.min(self.mapping.size_bytes());
            let pos = offset + done as u64;
            if pos >= end {
                break Ok(done);
            }
            if let Some(n) = self.read_hit(pos, end, &mut buf[done..], hint) {
                done += n;
                continue;
            }
            slow = true;
            let page = PageIndex::containing(pos);
            let folio = match self.get_uptodate(page, last_page, hint) {
                Ok(Some(folio)) => folio,
                Ok(None) => continue, // the file shrank: `end` drops on the next turn
                Err(e) => break Err(e),
            };
            let end = request_end.min(self.mapping.size_bytes());
            if pos >= end {
                break Ok(done);
            }
            self.note_access(core.arena().meta(folio.frame), page, folio.head, hint);
            let in_folio = (pos - folio.head.offset_bytes()) as usize;
            let n = (folio.order.bytes() - in_folio).min((end - pos) as usize);
            // Each turn copies something: the folio holds `pos`, which is before the end.
            debug_assert!(n > 0, "a turn that copies nothing at {pos} (end {end})");
            let bytes = core.arena().pinned_bytes(folio.frame, folio.order);
            buf[done..done + n].copy_from_slice(&bytes[in_folio..in_folio + n]);
            done += n;
        };
        if slow && done > 0 {
            self.ra
                .set_prev_index(PageIndex::containing(offset + done as u64 - 1));
        }
        // Post: never more than asked, and a short read only at the end of the file.
        debug_assert!(result.as_ref().map_or(true, |&n| n <= buf.len()));
        result
    }

    /// A hit at `pos` (below `end`): the bytes of `[pos, end)` in the folio of `pos`'s
    /// page copied into `dst` (`read_optimistic`), the hit counted and the access noted
    /// for readahead. The number of bytes copied; `None` if it was no hit.
    #[inline(always)]
    fn read_hit(&self, pos: u64, end: u64, dst: &mut [u8], hint: ReadHint) -> Option<usize> {
        let page = PageIndex::containing(pos);
        let (n, meta, head) = self.read_optimistic(page, pos, end, dst, hint)?;
        self.core().counters().hit();
        self.note_access(meta, page, head, hint);
        Some(n)
    }

    /// The hit path: copies the bytes of `[pos, end)` that lie in the folio of `page`
    /// without taking a reference: the bytes copied, the folio's side-table entry and its
    /// head; `None` if the folio is absent, not uptodate, or changed during the copy.
    #[inline(always)]
    fn read_optimistic(
        &self,
        page: PageIndex,
        pos: u64,
        end: u64,
        dst: &mut [u8],
        hint: ReadHint,
    ) -> Option<(usize, &FolioMeta, PageIndex)> {
        let core = self.core();
        let index = &self.mapping.index;
        let Entry::Folio { frame, order, head } = index.lookup_candidate(&self.root_hint, page)
        else {
            // A miss, or a stale hint: the slow path walks from the root.
            index.refresh_hint(&self.root_hint);
            return None;
        };
        let in_folio = (pos - head.offset_bytes()) as usize;
        let n = (order.bytes() - in_folio).min((end - pos) as usize);
        // The data's first lines load while the version does (two cache misses at once).
        core.arena().prefetch(frame, in_folio, n);
        let meta = core.arena().meta(frame);
        let version = meta.version.begin_read()?;
        if !meta.holds(self.mapping.id, head, order) {
            index.refresh_hint(&self.root_hint);
            return None;
        }
        core.arena().copy_out(frame, order, in_folio, &mut dst[..n]);
        if !meta.version.validate(version) {
            stats::bump(&core.counters().optimistic_retries);
            return None;
        }
        if hint == ReadHint::Normal {
            meta.state.touch();
        }
        // Post: the bytes copied lie in the folio, and there are some.
        debug_assert!(n > 0 && in_folio + n <= order.bytes());
        Some((n, meta, head))
    }

    /// A pinned, zero-copy view of the folio that holds byte `offset`. The folio stays in
    /// memory (it cannot be evicted) until the `PageRef` is dropped, so hold it briefly.
    ///
    /// Errors: `UnexpectedEof` at or past the end of the file; as `read_at` otherwise.
    ///
    /// Context: any thread; may sleep waiting for I/O or memory.
    pub fn get_page(&self, offset: u64) -> io::Result<PageRef> {
        if self.domain().is_some() {
            return Err(Self::domain_unsupported("get_page"));
        }
        loop {
            self.check_page_offset(offset)?;
            let page = PageIndex::containing(offset);
            if let Some(folio) = self.get_uptodate(page, page.add(1), self.hint())? {
                return Ok(self.page_ref(folio));
            }
        }
    }

    /// `get_page`'s error for an offset at or past the end of the file.
    fn check_page_offset(&self, offset: u64) -> io::Result<()> {
        let size = self.mapping.size_bytes();
        if offset >= size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("folio: offset {offset} is at or past the end of the file ({size} bytes)"),
            ));
        }
        Ok(())
    }

    /// The `PageRef` that keeps `folio`'s reference.
    fn page_ref(&self, folio: Pinned<'_>) -> PageRef {
        let (frame, order, head) = folio.into_raw();
        let valid = (self
            .mapping
            .size_bytes()
            .saturating_sub(head.offset_bytes()) as usize)
            .min(order.bytes());
        PageRef {
            core: self.cache.core.clone(),
            frame,
            order,
            offset_bytes: head.offset_bytes(),
            len_bytes: valid,
        }
    }
}

impl Drop for File {
    /// Gives the handle back to the mapping: the last one may forget it
    /// (`MappingTable::close`). Reads this handle submitted keep their own references.
    fn drop(&mut self) {
        if self.access == Access::ReadWrite {
            self.mapping.writer_closed();
        }
        if let Some(shared) = self.shared.take() {
            self.close_domain(shared);
        }
        let core = self.core();
        core.mappings.close(core.memory(), &self.mapping);
    }
}

impl File {
    /// A domain handle's close (its `DomainFile` dropped: our open of the record closed);
    /// if the file was deleted (`Cache::remove_file` found a handle open), its record is
    /// dropped with its pages unless another handle (of any process) has it open: as
    /// `MappingTable::close` forgets a deleted file's private pages at its last close.
    ///
    /// Context: `File`'s drop; takes the domain's locks (a drop of the record).
    fn close_domain(&self, shared: Arc<DomainFile>) {
        let (reader, record) = (shared.reader().clone(), shared.record());
        drop(shared);
        // Pairs with `MappingTable::unlink`'s fence, before `remove_file`'s drop of the
        // record: either that drop finds our open closed, or we find the file unlinked.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        if self.mapping.is_unlinked() {
            // Only a test's lever fails it; `Gone`: the removal dropped it first.
            let _ = reader.forget_record(record);
        }
    }
}

fn overflow(offset: u64, len: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("folio: offset {offset} + length {len} overflows a 64-bit file offset"),
    )
}

fn checked_end(offset: u64, len: usize) -> io::Result<u64> {
    offset.checked_add(len as u64).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("folio: offset {offset} + length {len} overflows a 64-bit file offset"),
        )
    })
}

/// A pinned, zero-copy view of one folio of a file: its bytes up to the end of the file.
/// The folio cannot be evicted while this lives; dropping it unpins the folio.
pub struct PageRef {
    core: Arc<Core>,
    frame: FrameId,
    order: Order,
    offset_bytes: u64,
    len_bytes: usize,
}

impl PageRef {
    /// The file offset of the first byte of this view (the folio's start, 4 KiB aligned).
    pub fn offset_bytes(&self) -> u64 {
        self.offset_bytes
    }

    /// The folio's size: 4 KiB to 2 MiB (its bytes past the end of the file excluded).
    pub fn len_bytes(&self) -> usize {
        self.len_bytes
    }
}

impl Deref for PageRef {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.core.arena().pinned_bytes(self.frame, self.order)[..self.len_bytes]
    }
}

impl Drop for PageRef {
    fn drop(&mut self) {
        self.core.put_folio(self.frame);
    }
}

impl std::fmt::Debug for PageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageRef")
            .field("offset_bytes", &self.offset_bytes)
            .field("len_bytes", &self.len_bytes)
            .finish()
    }
}
