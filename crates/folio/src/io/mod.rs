//! I/O backends: the thin layer that moves bytes from a file into arena frames.
//!
//! Design: the cache hands a backend a batch of [`ReadRequest`]s, each one vectored read
//! of a contiguous run of file pages into the frames of its folios, at an aligned offset (one request per contiguous run of
//! folios, DESIGN.md §5). The backend owns the request until it calls its completion
//! exactly once, from any thread, after the kernel has finished writing the buffer.
//! Backends know nothing of folios, indexes or locks: policy stays in the cache.
//!
//! Implementations:
//! - [`uring`]: io_uring, O_DIRECT, batched submission, one completion thread.
//! - [`pread`]: a pool of threads calling `pread(2)`, for kernels or sandboxes that refuse
//!   io_uring.
//! - [`null`]: reads nothing and returns zeros, for trace replay of eviction policies.
//! - [`fault`]: wraps another backend and injects faults (EIO at chosen offsets, short
//!   reads, delays) for tests; it is a real backend of the library, not a mock.
//!
//! Contract, both sides:
//! - The caller guarantees that `offset_bytes`, `len_bytes` and `buf` are aligned to
//!   [`DIRECT_IO_ALIGN_BYTES`], that the buffer stays valid and is not touched by anyone
//!   else until the completion runs, and that `fd` stays open (it is reference counted).
//! - The implementation must call `done` exactly once, with `Ok(n)` where `n` is the number
//!   of bytes read from `offset_bytes` (`n < len_bytes` at end of file; a backend may also
//!   return a short count for other reasons, which the cache retries), or with the
//!   `io::Error` the kernel reported. It must never call `done` before the kernel has
//!   finished with the buffer, and must finish every accepted request before its `Drop`
//!   returns.
//!
//! Limits: requests larger than [`READ_BYTES_MAX`] are split by the cache, never by a backend.

use std::fs::File as StdFile;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

pub mod fault;
pub mod null;
pub mod pread;
pub mod uring;

/// O_DIRECT alignment of offsets, lengths and buffers. 4 KiB covers every logical block
/// size folio runs on (512 B and 4 KiB disks) because the cache always reads whole frames.
pub const DIRECT_IO_ALIGN_BYTES: usize = 4096;

/// The largest single read the cache submits: one order-9 folio (2 MiB).
pub const READ_BYTES_MAX: usize = 2 << 20;

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

/// A region of arena memory that a read fills.
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
    /// `ptr..ptr+len_bytes` must be valid for writes until the request that carries this
    /// buffer completes, and aligned to [`DIRECT_IO_ALIGN_BYTES`].
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
    /// read. `skip_bytes` must be aligned.
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

    /// The first `len_bytes` of this buffer, for issuing a shorter read into the same
    /// memory (the fault backend's short reads). `len_bytes` must be aligned.
    pub fn head(&self, len_bytes: usize) -> FrameBuf {
        assert!(len_bytes <= self.len_bytes && len_bytes % DIRECT_IO_ALIGN_BYTES == 0);
        FrameBuf {
            ptr: self.ptr,
            len_bytes,
        }
    }
}

/// The function a backend calls once when a read ends.
pub type Completion = Box<dyn FnOnce(io::Result<usize>) + Send>;

/// One read of a contiguous run of file pages into one or more buffers (a vectored
/// read: the folios of a run are contiguous in the file, not necessarily in the arena).
pub struct ReadRequest {
    /// The file, opened with O_DIRECT where the file system allows it.
    pub file: Arc<StdFile>,
    pub offset_bytes: u64,
    /// Filled in order from `offset_bytes`; at most `IOV_MAX` buffers.
    pub bufs: Vec<FrameBuf>,
    pub done: Completion,
}

impl ReadRequest {
    pub fn len_bytes(&self) -> usize {
        self.bufs.iter().map(|b| b.len_bytes()).sum()
    }

    /// The caller's half of the module contract, checked by the backends on every request
    /// they accept (it is cheap): aligned offset and buffers, 1..=UIO_MAXIOV buffers, at
    /// most `READ_BYTES_MAX` bytes.
    pub fn assert_contract(&self) {
        let align = DIRECT_IO_ALIGN_BYTES;
        assert!(
            self.offset_bytes % align as u64 == 0,
            "read offset {} is not {align}-aligned",
            self.offset_bytes
        );
        assert!(
            !self.bufs.is_empty() && self.bufs.len() <= libc::UIO_MAXIOV as usize,
            "a read needs 1..=UIO_MAXIOV buffers, not {}",
            self.bufs.len()
        );
        assert!(
            self.len_bytes() <= READ_BYTES_MAX,
            "read length {} exceeds READ_BYTES_MAX",
            self.len_bytes()
        );
        for buf in &self.bufs {
            assert!(
                buf.as_ptr() as usize % align == 0 && buf.len_bytes() % align == 0,
                "read buffer {:p}+{} is not {align}-aligned",
                buf.as_ptr(),
                buf.len_bytes()
            );
        }
    }
}

impl std::fmt::Debug for ReadRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadRequest")
            .field("offset_bytes", &self.offset_bytes)
            .field("len_bytes", &self.len_bytes())
            .field("bufs", &self.bufs.len())
            .finish()
    }
}

/// An engine that performs reads asynchronously. See the module docs for both sides'
/// duties.
pub trait Backend: Send + Sync {
    /// A short name for stats and logs: "io_uring", "pread", "fault(pread)".
    fn name(&self) -> &str;

    /// Starts every request of the batch. Returns at once; completions run later, possibly
    /// before `submit` returns, possibly on another thread.
    fn submit(&self, batch: Vec<ReadRequest>);

    /// Performs requests that the caller is about to wait for (a reader's own miss). The
    /// default submits them. A backend may instead read them on the caller's thread and
    /// run their completions before returning, which saves the two thread hand-offs of
    /// an asynchronous read (to the engine, and back to wake the reader): the kernel
    /// reads a synchronous miss in the reading task too. Same contract as `submit`.
    fn submit_waited(&self, batch: Vec<ReadRequest>) {
        self.submit(batch)
    }
}

/// Which engine a cache uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BackendKind {
    /// io_uring where the kernel allows it, else the pread pool.
    #[default]
    Auto,
    IoUring,
    Pread,
}

/// Builds the backend for `kind`. `Auto` falls back to the pread pool when io_uring is
/// refused (old kernel, seccomp sandbox, `io_uring_disabled` sysctl).
pub fn open_backend(kind: BackendKind, pread_threads: usize) -> io::Result<Box<dyn Backend>> {
    match kind {
        BackendKind::IoUring => Ok(Box::new(uring::UringBackend::new(uring::QUEUE_DEPTH)?)),
        BackendKind::Pread => Ok(Box::new(pread::PreadBackend::new(pread_threads)?)),
        BackendKind::Auto => match uring::UringBackend::new(uring::QUEUE_DEPTH) {
            Ok(backend) => Ok(Box::new(backend)),
            Err(_) => Ok(Box::new(pread::PreadBackend::new(pread_threads)?)),
        },
    }
}
