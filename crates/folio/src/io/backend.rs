//! The backend contract: what the cache hands an I/O engine, and what the engine owes it.
//!
//! Design: the cache hands a backend a batch of [`IoRequest`]s. Each is one vectored
//! transfer between a contiguous run of file bytes, at an aligned offset, and the frames of
//! one or more folios (which are contiguous in the file, not necessarily in the arena):
//! a read ([`Op::Read`]) fills the frames from the file, a write ([`Op::Write`]) stores
//! them in it; or a flush ([`Op::Flush`]), which moves no bytes and makes the file's
//! written data durable (`fdatasync` / `fsync`). Reads, writes and flushes are one request
//! type with one completion, so every engine moves them all through the same queue, ring
//! and delivery (DESIGN.md §5, §8). Truncation is not a request: the cache calls
//! `io::sync::set_len` on its own thread (it is short, and a sync waits for it anyway). The backend
//! owns the request until it calls its completion exactly once, from any thread. Backends
//! know nothing of folios, indexes or locks: policy stays in the cache.
//!
//! The contract, both sides (the [`Backend`] trait's docs repeat it where it is called):
//!
//! The caller (the cache) guarantees:
//! - A flush has no buffers and offset 0 (checked as below). For the others:
//!   `offset_bytes`, every buffer's address and length are aligned to
//!   [`DIRECT_IO_ALIGN_BYTES`]; a request has 1..=`UIO_MAXIOV` buffers and at most
//!   [`IO_BYTES_MAX`] bytes (it splits longer runs itself; a backend never splits).
//!   [`IoRequest::assert_contract`] checks this on every request a backend accepts.
//! - Every buffer stays valid until the completion runs, and nobody else writes it
//!   meanwhile. For a read, nobody else relies on its bytes either: the kernel writes them,
//!   outside Rust's memory model (a stale optimistic reader may load them, and its copy
//!   fails validation). For a write, the buffer is only read: its bytes must stay stable
//!   (the folio under writeback is not modified) until the completion runs, because the
//!   device may read them at any moment until then (O_DIRECT: no copy is taken).
//! - `file` stays open: the request holds an `Arc` of it.
//! - The completion may call `submit` on the same backend (the cache resubmits from inside
//!   a completion), and must not block on another request of the same backend.
//!
//! The implementation (the engine) must:
//! - Run the completion exactly once, through [`Completion::run`], with `Ok(n)` where `n`
//!   is the number of bytes transferred from `offset_bytes` on, or with the `io::Error` the
//!   kernel reported (unchanged: the cache records its errno for the waiters).
//!   - A read returns `n < len` at the end of the file; it may also return a short count
//!     for other reasons, and the caller reads the rest. An error after some bytes arrived
//!     is reported as that short count, as `read(2)` does.
//!   - A write returns `n == len` once every byte is in the file (in the device's cache;
//!     durability is `fdatasync`'s, not the backend's). A short count (`n < len`: the
//!     device or a fault stopped early) is the caller's to retry from byte `n`; an error
//!     after some bytes were written is reported as that short count.
//!   - A flush returns `Ok(0)` only after the kernel reported the file's data durable
//!     (`fdatasync(2)` for [`FlushKind::Data`], `fsync(2)` for [`FlushKind::All`], or
//!     io_uring's `FSYNC` with and without `DATASYNC`), and the kernel's error otherwise:
//!     an error means nothing about which writes are durable, so the caller must write
//!     its data again before a later flush can vouch for it. Ordering: a flush covers the
//!     writes of its file whose completions ran before the flush was submitted, and
//!     nothing else: not a write still in flight when it is submitted, nor one submitted
//!     after it, even in the same batch (engines run a batch's requests concurrently; the
//!     kernel orders nothing between SQEs without links). The caller waits for its writes
//!     before it submits their flush.
//! - Never run the completion before the kernel has finished with every buffer, and
//!   never touch a buffer after it (for a read: never write it; for a write: never write
//!   it at all).
//! - Finish every accepted request, running its completion, before its `Drop` returns.
//! - Never block in `submit` on the transfers themselves (only on its own short locks, or
//!   while the kernel refuses new work), so a completion can submit.
//!
//! Limits: requests larger than [`IO_BYTES_MAX`] are split by the cache, never by a backend.
//! A completion that panics is caught by [`Completion::run`] (the panic hook has printed
//! it), so an engine's thread survives it; the request's folios stay as the completion
//! left them.

use std::fs::File as StdFile;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use smallvec::SmallVec;

/// O_DIRECT alignment of offsets, lengths and buffers. 4 KiB covers every logical block
/// size folio runs on (512 B and 4 KiB disks) because the cache always moves whole frames.
pub const DIRECT_IO_ALIGN_BYTES: usize = 4096;

/// The largest single transfer the cache submits: one order-9 folio (2 MiB).
pub const IO_BYTES_MAX: usize = 2 << 20;

/// Writes `len` zero bytes at `dst` (arena memory: a frame past a short read, or a whole
/// buffer of the null backend) with relaxed atomic stores (bytes at the edges, words
/// where aligned), so that concurrent atomic loads of the same memory are no data race.
///
/// # Safety
/// `dst..dst + len` must be valid for writes and written by nobody else meanwhile.
pub(crate) unsafe fn atomic_zero(dst: *mut u8, len: usize) {
    let head = dst.align_offset(8).min(len);
    let words = (len - head) / 8;
    for i in (0..head).chain(head + words * 8..len) {
        // SAFETY: i < len, inside the range; AtomicU8 has the layout of u8.
        unsafe { (*(dst.add(i) as *const AtomicU8)).store(0, Ordering::Relaxed) };
    }
    for w in 0..words {
        // SAFETY: dst + head + 8w is 8-aligned and inside the range.
        unsafe { (*(dst.add(head + w * 8) as *const AtomicU64)).store(0, Ordering::Relaxed) };
    }
}

/// What a request does: the kernel's `REQ_OP_READ` / `REQ_OP_WRITE` / `REQ_OP_FLUSH`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// File -> frames: `preadv`, `IORING_OP_READV`.
    Read,
    /// Frames -> file: `pwritev`, `IORING_OP_WRITEV`. The frames are only read.
    Write,
    /// The file's completed writes -> durable storage: `fdatasync` / `fsync`,
    /// `IORING_OP_FSYNC`. No buffers; completes with `Ok(0)` (module contract).
    Flush { kind: FlushKind },
}

/// What a flush makes durable, as `File::sync_data` and `File::sync_all` differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlushKind {
    /// The data, and the metadata needed to read it back (the size when it grew):
    /// `fdatasync(2)`, `IORING_FSYNC_DATASYNC`.
    Data,
    /// The data and all the metadata (times, a size that shrank): `fsync(2)`.
    All,
}

/// The requests of one submission: inline for one (a reader's own miss is one read), so
/// that a miss allocates nothing to submit it.
pub type IoBatch = SmallVec<[IoRequest; 1]>;

/// A request's buffers: inline up to four (a storage engine's block of 4 KiB folios), so
/// that a miss's read allocates nothing for them.
pub type FrameBufs = SmallVec<[FrameBuf; 4]>;

/// A region of arena memory that a request fills (a read) or stores (a write).
///
/// It is a raw pointer because the arena outlives every backend and the region is owned
/// by the request until its completion runs (see the module contract).
#[derive(Clone, Copy, Debug)]
pub struct FrameBuf {
    ptr: NonNull<u8>,
    len_bytes: usize,
}

// SAFETY: a FrameBuf is only a description of arena memory; the request protocol (module
// contract) gives exactly one owner at a time the right to write to it, and the arena's
// memory is valid from any thread for the life of the cache.
unsafe impl Send for FrameBuf {}

impl FrameBuf {
    /// # Safety
    /// `ptr..ptr+len_bytes` must be valid for reads and writes until the request that
    /// carries this buffer completes, and aligned to [`DIRECT_IO_ALIGN_BYTES`].
    pub unsafe fn new(ptr: NonNull<u8>, len_bytes: usize) -> Self {
        debug_assert_eq!(ptr.as_ptr() as usize % DIRECT_IO_ALIGN_BYTES, 0);
        FrameBuf { ptr, len_bytes }
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    /// The part of this buffer from `skip_bytes` on, for resubmitting the rest of a short
    /// transfer. `skip_bytes` must be aligned.
    pub fn tail(&self, skip_bytes: usize) -> FrameBuf {
        assert!(skip_bytes <= self.len_bytes && skip_bytes % DIRECT_IO_ALIGN_BYTES == 0);
        // SAFETY: skip_bytes is within the region, so the result stays inside the same
        // valid allocation; alignment is preserved because skip_bytes is aligned.
        let ptr = unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(skip_bytes)) };
        FrameBuf {
            ptr,
            len_bytes: self.len_bytes - skip_bytes,
        }
    }

    /// The first `len_bytes` of this buffer, for issuing a shorter transfer over the same
    /// memory (the fault backend's short reads and writes). `len_bytes` must be aligned.
    pub fn head(&self, len_bytes: usize) -> FrameBuf {
        assert!(len_bytes <= self.len_bytes && len_bytes % DIRECT_IO_ALIGN_BYTES == 0);
        FrameBuf {
            ptr: self.ptr,
            len_bytes,
        }
    }
}

/// What a backend runs once when a request ends: the caller's function of the result
/// (bytes transferred, or the kernel's error).
///
/// The one way to run it is [`Completion::run`], which every engine calls: it catches a
/// panic, so that no engine thread dies of a broken completion.
pub struct Completion(Box<dyn FnOnce(io::Result<usize>) + Send>);

impl Completion {
    pub fn new(done: impl FnOnce(io::Result<usize>) + Send + 'static) -> Completion {
        Completion(Box::new(done))
    }

    /// Runs the completion with `result`. A panic inside it is caught and dropped here:
    /// the panic hook has already printed it, and the engine's thread (a pread worker, the
    /// io_uring completion thread, the fault backend's delivery thread, or the submitter)
    /// must go on serving the other requests.
    ///
    /// Context: whatever the completion needs; the engine holds none of its own locks.
    pub fn run(self, result: io::Result<usize>) {
        let Completion(done) = self;
        let _ = panic::catch_unwind(AssertUnwindSafe(move || done(result)));
    }
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Completion")
    }
}

/// One transfer between a contiguous run of file bytes and one or more buffers (vectored:
/// the folios of a run are contiguous in the file, not necessarily in the arena).
pub struct IoRequest {
    pub op: Op,
    /// The file, opened with O_DIRECT where the file system allows it (and for writing,
    /// for an [`Op::Write`]).
    pub file: Arc<StdFile>,
    pub offset_bytes: u64,
    /// Transferred in order from `offset_bytes`; at most `UIO_MAXIOV` buffers.
    pub bufs: FrameBufs,
    pub done: Completion,
}

impl IoRequest {
    /// A read of `file` from `offset_bytes` into `bufs`, in order.
    pub fn read(
        file: Arc<StdFile>,
        offset_bytes: u64,
        bufs: FrameBufs,
        done: Completion,
    ) -> IoRequest {
        IoRequest {
            op: Op::Read,
            file,
            offset_bytes,
            bufs,
            done,
        }
    }

    /// A write of `bufs`, in order, to `file` from `offset_bytes` on.
    pub fn write(
        file: Arc<StdFile>,
        offset_bytes: u64,
        bufs: FrameBufs,
        done: Completion,
    ) -> IoRequest {
        IoRequest {
            op: Op::Write,
            file,
            offset_bytes,
            bufs,
            done,
        }
    }

    /// A flush of `file` (`fdatasync` or `fsync`, as `kind` says). It covers the writes of
    /// `file` whose completions ran before it is submitted (module contract).
    pub fn flush(file: Arc<StdFile>, kind: FlushKind, done: Completion) -> IoRequest {
        IoRequest {
            op: Op::Flush { kind },
            file,
            offset_bytes: 0,
            bufs: FrameBufs::new(),
            done,
        }
    }

    pub fn len_bytes(&self) -> usize {
        self.bufs.iter().map(|b| b.len_bytes()).sum()
    }

    /// The caller's half of the module contract, checked by the backends on every request
    /// they accept (it is cheap): aligned offset and buffers, 1..=UIO_MAXIOV buffers, at
    /// most `IO_BYTES_MAX` bytes; a flush with no buffers at offset 0.
    pub fn assert_contract(&self) {
        let align = DIRECT_IO_ALIGN_BYTES;
        let op = self.op;
        if let Op::Flush { .. } = op {
            assert!(
                self.bufs.is_empty() && self.offset_bytes == 0,
                "a {op:?} carries no buffers and offset 0"
            );
            return;
        }
        assert!(
            self.offset_bytes % align as u64 == 0,
            "{op:?} offset {} is not {align}-aligned",
            self.offset_bytes
        );
        assert!(
            !self.bufs.is_empty() && self.bufs.len() <= libc::UIO_MAXIOV as usize,
            "a {op:?} needs 1..=UIO_MAXIOV buffers, not {}",
            self.bufs.len()
        );
        assert!(
            self.len_bytes() <= IO_BYTES_MAX,
            "{op:?} length {} exceeds IO_BYTES_MAX",
            self.len_bytes()
        );
        for buf in &self.bufs {
            assert!(
                buf.as_ptr() as usize % align == 0 && buf.len_bytes() % align == 0,
                "{op:?} buffer {:p}+{} is not {align}-aligned",
                buf.as_ptr(),
                buf.len_bytes()
            );
        }
    }
}

impl std::fmt::Debug for IoRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoRequest")
            .field("op", &self.op)
            .field("offset_bytes", &self.offset_bytes)
            .field("len_bytes", &self.len_bytes())
            .field("bufs", &self.bufs.len())
            .finish()
    }
}

/// An engine that performs reads and writes asynchronously. Both sides' duties are the
/// module contract (above): the caller's aligned, stable buffers and open file; the
/// engine's one completion per request, never before the kernel is done with the buffers,
/// and every request finished before `Drop` returns.
pub trait Backend: Send + Sync {
    /// A short name for stats and logs: "io_uring", "pread", "fault(pread)".
    fn name(&self) -> &str;

    /// Starts every request of the batch, reads, writes and flushes alike. Returns at once;
    /// completions run later, possibly before `submit` returns, possibly on another thread.
    ///
    /// Context: any thread, a completion of this backend included; the caller holds no
    /// lock that a completion takes. Takes the engine's own short locks; never waits for
    /// a transfer.
    fn submit(&self, batch: IoBatch);

    /// Performs requests that the caller is about to wait for (a reader's own miss). The
    /// default submits them. A backend may instead transfer them on the caller's thread
    /// and run their completions before returning, which saves the two thread hand-offs of
    /// an asynchronous request (to the engine, and back to wake the waiter): the kernel
    /// reads a synchronous miss in the reading task too. Same contract as `submit`.
    ///
    /// Context: as `submit`, and may block in the transfers and run completions on the
    /// caller's thread.
    fn submit_waited(&self, batch: IoBatch) {
        self.submit(batch)
    }
}
