//! A mapping's use of its cache's domain (issue 45, docs/sharing.md "A `Cache` with a
//! domain", the rule in one process): a file is read through the domain only while this
//! process holds no newer bytes of it than the disk.
//!
//! The domain reads the disk; this process's newer bytes are in its private mapping: a
//! writable handle's writes (a write returns once its bytes are in a private folio), dirty
//! folios (also a restart's adopted ones) and folios under writeback. So:
//!   A1. A read-only open is admitted to the domain (`admit`) only if, under this
//!       mapping's `DomainUse` lock, no writable handle is open, no folio is marked dirty
//!       and no writeback of the file is running (read in that order: writeback clears the
//!       dirty mark after its ticket is taken and ends the ticket after the write, so a
//!       clean index read before an empty ticket set means the bytes were on disk).
//!       Else it reads privately (counted by the caller).
//!   A2. A writable open (`writer_opened`, from `File::new`, before the handle exists)
//!       counts itself under the lock and retires every domain handle of the mapping
//!       (`DomainFile::retire`: a flag on the line its read already loads): their reads
//!       take the private path from then on. Every write or `set_len` goes through a
//!       writable handle, so it comes after A2 and a read that comes after it (in any
//!       thread that saw it return) sees the flag. The caller then retires the domain's
//!       record of the file (its stamp: `SharedReader::retire`), so that a later
//!       admission, once this process is clean again, drops the record's pages and reads
//!       the disk rather than the pages cached before the write.
//!   A3. A writable handle's drop lowers the count (`writer_closed`).
//!   A4. Other processes see this process's writes (docs/sharing.md "Writes seen across
//!       processes"): a writable open of a domain cache makes this process the writer of
//!       the domain's record of the file (`attach_writer`: one `DomainWriter` per
//!       mapping, held here and by every writable handle), instead of retiring the record;
//!       every write and `set_len` then puts the pages it changed into the domain before
//!       it returns (`File::publish`), and the record stays current. When the domain will
//!       not have us as the writer (another process is, or the record is stale), A2's
//!       retirement of the record stands.
//!   A5. The writer detaches (`settle_writer`: its marks cleared, the record's stamp the
//!       file's, its writer mark cleared) once no writable handle is open and the file is
//!       clean (A1's test), looked at a writable handle's drop, at a writeback's end and
//!       at a sync's end (the writeback's look comes after its ticket ends, which a sync
//!       waiting for that ticket may beat: a sync that returned on a clean file with no
//!       writable handle leaves it detached).
//! A1 and A2 hold one lock: an admission either comes first (its handle is on the list,
//! retired by A2) or sees the writer counted (refused).
//!
//! Protection: the count, the list and the writer under `DomainUse`'s mutex (taken by
//! opens, writable drops and a writeback's start and end, never by a read); a handle's
//! retired flag is an atomic.
//!
//! Limits: a retired handle stays retired (it reads privately until it is closed, and
//! its domain open keeps the record open: a later admission of the file, by anyone,
//! finds the record in use and its stamp retired, and reads privately until every such
//! handle is closed). Another process's writes are seen through the domain only when
//! that process is the record's writer (A4; one writer process per file).

use std::io;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::Mapping;
use crate::index::Mark;
use crate::shared::reader::{DomainFile, DomainWriter};
use crate::types::PageIndex;

/// This process's writable handles of a file and its domain handles (module docs).
#[derive(Debug, Default)]
pub(crate) struct DomainUse {
    inner: Mutex<Uses>,
}

#[derive(Debug, Default)]
struct Uses {
    writers: u32,
    /// The domain handles admitted (A1), weakly: a handle's drop is its removal.
    files: Vec<Weak<DomainFile>>,
    /// This process as the writer of the file's record in the domain (A4), held from the
    /// first writable open until the file is clean with no writable handle open.
    writer: Option<Arc<DomainWriter>>,
}

/// What `Mapping::admit_domain` did.
pub(crate) enum DomainAdmission {
    /// Admitted: the handle reads through the domain.
    Admitted(Arc<DomainFile>),
    /// This process holds newer bytes of the file (A1): read privately.
    Newer,
    /// The domain refused it (its own reasons): read privately.
    Refused,
}

impl DomainUse {
    fn lock(&self) -> MutexGuard<'_, Uses> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Mapping {
    /// A1 (module docs): `admit` (the domain's admission of the file) is asked only if
    /// this process holds no newer bytes of the file, under the lock A2 takes.
    ///
    /// Context: an open; takes the mapping's `DomainUse` lock, around `admit` (which takes
    /// the domain's locks: nobody takes this one holding those).
    /// Errors: `admit`'s.
    pub(crate) fn admit_domain(
        &self,
        admit: impl FnOnce() -> io::Result<Option<DomainFile>>,
    ) -> io::Result<DomainAdmission> {
        let mut uses = self.domain.lock();
        if uses.writers > 0 || self.has_newer_bytes() {
            return Ok(DomainAdmission::Newer);
        }
        let Some(file) = admit()? else {
            return Ok(DomainAdmission::Refused);
        };
        let file = Arc::new(file);
        uses.files.retain(|f| f.strong_count() > 0);
        uses.files.push(Arc::downgrade(&file));
        Ok(DomainAdmission::Admitted(file))
    }

    /// Whether a folio is marked dirty, then whether a writeback of the file runs (A1's
    /// order, module docs).
    fn has_newer_bytes(&self) -> bool {
        let dirty = self
            .index
            .marked_walk(PageIndex(0), PageIndex::END, Mark::Dirty, &mut |_| {
                ControlFlow::Break(())
            })
            .is_break();
        dirty || self.write.writeback_running()
    }

    /// A2: a writable handle of this mapping is being opened: counted, and every domain
    /// handle of the mapping retired.
    ///
    /// Context: `File::new`, before the handle is handed out; takes the `DomainUse` lock.
    pub(crate) fn writer_opened(&self) {
        let mut uses = self.domain.lock();
        uses.writers = uses.writers.checked_add(1).expect("2^32 writable handles");
        for file in uses.files.drain(..) {
            if let Some(file) = file.upgrade() {
                file.retire();
            }
        }
    }

    /// A4: the writer of the file's record in the domain, made by `make` at the first
    /// writable open (`None`: the domain would not have us as its writer, and the caller
    /// retires the record as A2 says), kept for later opens.
    ///
    /// Context: a writable open, after A2; takes the `DomainUse` lock around `make`.
    /// Errors: `make`'s.
    pub(crate) fn attach_writer(
        &self,
        make: impl FnOnce() -> io::Result<Option<DomainWriter>>,
    ) -> io::Result<Option<Arc<DomainWriter>>> {
        let mut uses = self.domain.lock();
        if let Some(writer) = &uses.writer {
            return Ok(Some(writer.clone()));
        }
        let writer = make()?.map(Arc::new);
        uses.writer.clone_from(&writer);
        Ok(writer)
    }

    /// The writer of the file's record (A4), for a writeback that took a page.
    pub(crate) fn domain_writer(&self) -> Option<Arc<DomainWriter>> {
        self.domain.lock().writer.clone()
    }

    /// A5: the writer detaches once no writable handle is open and the file is clean (its
    /// bytes on disk: A1's test): called at a writable handle's drop, at a writeback's
    /// end and at a sync's end. The detach itself (`DomainWriter`'s drop) runs after the
    /// lock is let go, once the last handle holding it is gone.
    pub(crate) fn settle_writer(&self) {
        let writer = {
            let mut uses = self.domain.lock();
            if uses.writers > 0 || uses.writer.is_none() || self.has_newer_bytes() {
                return;
            }
            uses.writer.take()
        };
        drop(writer);
    }

    /// A3: a writable handle of this mapping was dropped.
    ///
    /// Context: `File`'s drop; takes the `DomainUse` lock.
    pub(crate) fn writer_closed(&self) {
        {
            let mut uses = self.domain.lock();
            uses.writers = uses
                .writers
                .checked_sub(1)
                .expect("a writable handle's drop counted at its open");
        }
        self.settle_writer();
    }
}
