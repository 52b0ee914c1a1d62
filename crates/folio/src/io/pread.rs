//! The pread pool: a fixed set of threads that each read with `preadv(2)`.
//!
//! Design: `submit` appends the batch to one FIFO queue and wakes workers. Each worker takes
//! the oldest request, reads with `preadv(2)` until its buffers are full, the file ends or
//! the kernel reports an error, and then calls the request's completion on its own thread.
//! It is the fallback for kernels and sandboxes that refuse io_uring, and the inner engine
//! the fault backend wraps in most tests.
//!
//! ```text
//!   submit(batch) ──push──▶ [ queue: VecDeque<ReadRequest> ] ──pop──▶ worker 0..threads
//!                                                                       │ preadv loop
//!                                                                       ▼
//!                                                             done(Ok(n) | Err(e))
//! ```
//!
//! Invariants:
//! - `Shared::state` (one mutex) protects the queue and the phase. No lock is held while a
//!   worker reads or runs a completion, so a completion may call `submit` on this backend
//!   (the cache resubmits the rest of a short read from inside a completion).
//! - A worker exits only when the phase is `Draining` and it found the queue empty under the
//!   lock. A request is pushed either by `submit` (never during `Drop`, which has `&mut self`)
//!   or by a completion running on a worker, which goes back to the queue before it can exit;
//!   so once every worker has exited the queue is empty and every completion has returned.
//!
//! Limits:
//! - The queue is unbounded: its length is bounded by the requests the caller has in flight,
//!   which the arena bounds (every request owns distinct frames). `submit` never blocks on
//!   reads, as the `Backend` contract asks.
//! - A read that returns fewer bytes than asked is retried from where it stopped; a later
//!   error after some bytes arrived is reported as that short count (the cache retries the
//!   rest and then meets the error itself), like `read(2)` does.
//! - A completion that panics is caught and the worker keeps serving (the panic hook has
//!   already printed the message); it would otherwise shrink the pool for good.

use std::collections::VecDeque;
use std::io;
use std::os::unix::io::AsRawFd;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};

use super::{Backend, FrameBuf, ReadRequest};

/// A pool of threads calling `preadv(2)`.
pub struct PreadBackend {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when a request is queued or the phase changes.
    work_ready: Condvar,
}

struct State {
    queue: VecDeque<ReadRequest>,
    phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Accepting requests; idle workers sleep on `work_ready`.
    Running,
    /// The backend is being dropped: workers finish the queue, then exit.
    Draining,
}

impl PreadBackend {
    /// Starts `threads` workers (at least one), named `folio-pread-N`.
    pub fn new(threads: usize) -> io::Result<Self> {
        if threads == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the pread backend needs at least one thread",
            ));
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                phase: Phase::Running,
            }),
            work_ready: Condvar::new(),
        });
        // Built before the threads so that a failed spawn drops (and joins) the ones that
        // did start.
        let mut backend = PreadBackend {
            shared,
            workers: Vec::with_capacity(threads),
        };
        for index in 0..threads {
            let shared = Arc::clone(&backend.shared);
            let worker = thread::Builder::new()
                .name(format!("folio-pread-{index}"))
                .spawn(move || shared.run_worker())?;
            backend.workers.push(worker);
        }
        Ok(backend)
    }
}

impl std::fmt::Debug for PreadBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreadBackend")
            .field("threads", &self.workers.len())
            .finish_non_exhaustive()
    }
}

impl Backend for PreadBackend {
    fn name(&self) -> &str {
        "pread"
    }

    fn submit(&self, batch: Vec<ReadRequest>) {
        // Check the whole batch before accepting any of it, so that a broken request does
        // not leave half a batch accepted.
        for request in &batch {
            request.assert_contract();
        }
        let count = batch.len();
        {
            let mut state = self.shared.lock_state();
            assert_eq!(
                state.phase,
                Phase::Running,
                "submit on a dropped pread backend"
            );
            state.queue.extend(batch);
        }
        match count {
            0 => {}
            1 => self.shared.work_ready.notify_one(),
            _ => self.shared.work_ready.notify_all(),
        }
    }

    /// Reads on the caller's thread: the caller waits anyway, and a worker would only add
    /// two hand-offs (trait docs).
    fn submit_waited(&self, batch: Vec<ReadRequest>) {
        for request in &batch {
            request.assert_contract();
        }
        for request in batch {
            perform(request);
        }
    }
}

impl Drop for PreadBackend {
    /// Finishes every accepted request, then stops the workers.
    ///
    /// Context: may run on one of this backend's own workers, when a completion held the
    /// last handle to the backend. That worker cannot join itself; it is detached instead,
    /// and it exits as soon as the completion that dropped us returns.
    fn drop(&mut self) {
        self.shared.lock_state().phase = Phase::Draining;
        self.shared.work_ready.notify_all();
        let current = thread::current().id();
        for worker in self.workers.drain(..) {
            if worker.thread().id() != current {
                // A worker catches completion panics, so this only fails on a bug in this
                // file; there is nothing better to do with it in a destructor.
                let _ = worker.join();
            }
        }
        // Requests still queued here had no worker left to run them: this thread is the
        // only worker, dropping the backend from inside a completion (other workers exit
        // only once the queue is empty). Run them here, so that every accepted request
        // completes before `drop` returns.
        while let Some(request) = self.shared.lock_state().queue.pop_front() {
            perform(request);
        }
    }
}

impl Shared {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        // The only panic under this lock is `submit`'s phase assertion, which fires before
        // anything changes, so a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run_worker(&self) {
        while let Some(request) = self.next_request() {
            perform(request);
        }
    }

    /// The oldest queued request; blocks while the queue is empty. `None` once the backend
    /// is draining and the queue is empty.
    fn next_request(&self) -> Option<ReadRequest> {
        let mut state = self.lock_state();
        loop {
            if let Some(request) = state.queue.pop_front() {
                return Some(request);
            }
            if state.phase == Phase::Draining {
                return None;
            }
            state = self
                .work_ready
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Reads `request` and calls its completion on this thread.
///
/// Context: holds no lock; may block in `preadv`.
pub(crate) fn perform(request: ReadRequest) {
    let ReadRequest {
        file,
        offset_bytes,
        bufs,
        done,
    } = request;
    let result = read_full(&file, offset_bytes, &bufs);
    // `file` is dropped only here, after the last `preadv` on it has returned.
    drop(file);
    // A panicking completion must not take the worker down; the panic hook has already
    // reported it.
    let _ = panic::catch_unwind(AssertUnwindSafe(move || done(result)));
}

/// Fills `bufs`, in order, from `file` at `offset_bytes`: loops until they are full or
/// `preadv` returns 0 (end of file), retrying `EINTR`. Returns the number of bytes read.
///
/// This calls `libc::preadv` rather than `FileExt::read_at`: besides being vectored,
/// `read_at` wants a `&mut [u8]`, and forming one over arena memory that may never have
/// been initialised would be undefined behaviour; a raw pointer carries no such claim.
fn read_full(file: &std::fs::File, offset_bytes: u64, bufs: &[FrameBuf]) -> io::Result<usize> {
    let fd = file.as_raw_fd();
    let len_bytes: usize = bufs.iter().map(FrameBuf::len_bytes).sum();
    let mut read_bytes = 0usize;
    while read_bytes < len_bytes {
        let position = offset_bytes
            .checked_add(read_bytes as u64)
            .and_then(|position| libc::off_t::try_from(position).ok())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let iovecs = iovecs_after(bufs, read_bytes);
        // SAFETY: every iovec lies inside one of `bufs` (`iovecs_after`), which the request
        // protocol (module contract in io/mod.rs) keeps valid for writes and untouched by
        // anyone else until the completion runs. `iovecs` outlives the call, and its length
        // is at most `bufs.len() <= UIO_MAXIOV` (asserted in `submit`). `fd` is open: `file`
        // is borrowed for the whole call.
        let result =
            unsafe { libc::preadv(fd, iovecs.as_ptr(), iovecs.len() as libc::c_int, position) };
        match result {
            0 => break,
            n if n > 0 => read_bytes += n as usize,
            _ => {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if read_bytes > 0 {
                    break;
                }
                return Err(error);
            }
        }
    }
    Ok(read_bytes)
}

/// The iovecs covering `bufs` from byte `skip_bytes` of their concatenation on.
fn iovecs_after(bufs: &[FrameBuf], skip_bytes: usize) -> Vec<libc::iovec> {
    let mut skip_left = skip_bytes;
    let mut iovecs = Vec::with_capacity(bufs.len());
    for buf in bufs {
        if skip_left >= buf.len_bytes() {
            skip_left -= buf.len_bytes();
            continue;
        }
        iovecs.push(libc::iovec {
            iov_base: buf.as_ptr().wrapping_add(skip_left).cast::<libc::c_void>(),
            iov_len: buf.len_bytes() - skip_left,
        });
        skip_left = 0;
    }
    iovecs
}

/// Fixtures shared by the tests of every backend (pread, io_uring, fault): a file with known
/// content, aligned buffers, completions that report through a channel, and the scenarios
/// every backend must pass.
#[cfg(test)]
pub(super) mod testing {
    use std::alloc::{self, Layout};
    use std::fs::{File, OpenOptions};
    use std::io::{self, Write};
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::Path;
    use std::ptr::NonNull;
    use std::sync::mpsc::{self, Receiver, Sender};
    use std::sync::Arc;
    use std::thread;
    use std::time::Duration;

    use super::super::{Backend, Completion, FrameBuf, ReadRequest, DIRECT_IO_ALIGN_BYTES};

    pub const PAGE_BYTES: usize = DIRECT_IO_ALIGN_BYTES;

    /// 256 pages and 1000 bytes: the last page is partial, so a read there comes back short.
    pub const FILE_LEN_BYTES: u64 = 256 * PAGE_BYTES as u64 + 1000;

    /// The file offset where the partial last page starts.
    pub const LAST_PAGE_OFFSET: u64 = FILE_LEN_BYTES / PAGE_BYTES as u64 * PAGE_BYTES as u64;

    /// How long a test waits for one completion before it declares the backend stuck.
    pub const COMPLETION_WAIT: Duration = Duration::from_secs(20);

    /// The byte at `offset` of the test file: every 8-byte little-endian word holds its own
    /// byte offset.
    pub fn expected_byte(offset: u64) -> u8 {
        (offset & !7).to_le_bytes()[(offset & 7) as usize]
    }

    /// Asserts that `bytes` equal the test file's content from `offset` on.
    pub fn assert_file_bytes(bytes: &[u8], offset: u64) {
        for (index, &byte) in bytes.iter().enumerate() {
            let position = offset + index as u64;
            assert_eq!(
                byte,
                expected_byte(position),
                "wrong byte at file offset {position}"
            );
        }
    }

    /// How many bytes a read of `len_bytes` at `offset` returns from the test file.
    pub fn expected_len(offset: u64, len_bytes: usize) -> usize {
        FILE_LEN_BYTES.saturating_sub(offset).min(len_bytes as u64) as usize
    }

    /// Whether the file could be opened with O_DIRECT (tmpfs refuses it with EINVAL).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum OpenMode {
        Direct,
        Buffered,
    }

    /// The test file; its directory is removed when this is dropped.
    pub struct TestFile {
        _dir: tempfile::TempDir,
        pub file: Arc<File>,
        pub mode: OpenMode,
        /// The same file opened write-only: reads from it fail with EBADF.
        pub write_only: Arc<File>,
    }

    /// Creates the test file under /var/tmp (on the root file system, where O_DIRECT works,
    /// unlike tmpfs), falling back to the default temp directory, and opens it with O_DIRECT
    /// where the file system allows it.
    pub fn test_file() -> TestFile {
        let dir = tempfile::Builder::new()
            .prefix("folio-io-test-")
            .tempdir_in("/var/tmp")
            .or_else(|_| tempfile::tempdir())
            .expect("creating a temp directory");
        let path = dir.path().join("words");
        let content: Vec<u8> = (0..FILE_LEN_BYTES).map(expected_byte).collect();
        let mut writer = File::create(&path).expect("creating the test file");
        writer.write_all(&content).expect("writing the test file");
        writer.sync_all().expect("syncing the test file");
        drop(writer);
        let (file, mode) = open_for_reads(&path);
        let write_only = OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("opening the test file write-only");
        TestFile {
            _dir: dir,
            file: Arc::new(file),
            mode,
            write_only: Arc::new(write_only),
        }
    }

    fn open_for_reads(path: &Path) -> (File, OpenMode) {
        match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(file) => (file, OpenMode::Direct),
            Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
                let file = File::open(path).expect("opening the test file");
                (file, OpenMode::Buffered)
            }
            Err(error) => panic!("opening the test file with O_DIRECT: {error}"),
        }
    }

    /// Zeroed heap memory aligned for O_DIRECT, freed on drop.
    pub struct AlignedBuf {
        ptr: NonNull<u8>,
        layout: Layout,
    }

    // SAFETY: AlignedBuf owns its allocation like a Box<[u8]> does.
    unsafe impl Send for AlignedBuf {}
    // SAFETY: `&AlignedBuf` only reads (`bytes`) or hands out raw FrameBufs; the tests read
    // the bytes only after the completions of the reads into them have run.
    unsafe impl Sync for AlignedBuf {}

    impl AlignedBuf {
        pub fn new(len_bytes: usize) -> Self {
            assert!(len_bytes > 0 && len_bytes % PAGE_BYTES == 0);
            let layout =
                Layout::from_size_align(len_bytes, PAGE_BYTES).expect("a valid buffer layout");
            // SAFETY: the layout has a non-zero size (asserted above).
            let raw = unsafe { alloc::alloc_zeroed(layout) };
            let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
            AlignedBuf { ptr, layout }
        }

        /// The whole buffer as a read target.
        pub fn frame_buf(&self) -> FrameBuf {
            self.frame_buf_at(0, self.layout.size())
        }

        /// `len_bytes` from `skip_bytes` on, as a read target.
        pub fn frame_buf_at(&self, skip_bytes: usize, len_bytes: usize) -> FrameBuf {
            assert!(skip_bytes + len_bytes <= self.layout.size());
            assert!(skip_bytes % PAGE_BYTES == 0);
            // SAFETY: the range lies inside this allocation (asserted above), which lives
            // until `self` is dropped; every test keeps `self` alive until the completions
            // of the requests that carry this FrameBuf have run. `skip_bytes` is aligned,
            // and so is the allocation.
            unsafe {
                FrameBuf::new(
                    NonNull::new_unchecked(self.ptr.as_ptr().add(skip_bytes)),
                    len_bytes,
                )
            }
        }

        /// The contents. Call only when no read into this buffer is in flight.
        pub fn bytes(&self) -> &[u8] {
            // SAFETY: the allocation is `layout.size()` bytes, zero-initialised at creation,
            // and (by this method's rule) no backend writes to it while the slice lives.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
        }
    }

    impl Drop for AlignedBuf {
        fn drop(&mut self) {
            // SAFETY: `ptr` came from `alloc_zeroed` with this same layout and is freed once.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
        }
    }

    /// A completion report: which request (a tag the test chose) and its result.
    pub type Report = (usize, io::Result<usize>);

    pub fn channel() -> (Sender<Report>, Receiver<Report>) {
        mpsc::channel()
    }

    /// A completion that sends `(tag, result)` on `reports`.
    pub fn report_to(reports: &Sender<Report>, tag: usize) -> Completion {
        let reports = reports.clone();
        Box::new(move |result| {
            // The test may have given up already; `wait_reports` reports that.
            let _ = reports.send((tag, result));
        })
    }

    /// A read into one buffer.
    pub fn read_request(
        file: &Arc<File>,
        offset_bytes: u64,
        buf: FrameBuf,
        done: Completion,
    ) -> ReadRequest {
        vectored_request(file, offset_bytes, vec![buf], done)
    }

    /// A read into several buffers, filled in order.
    pub fn vectored_request(
        file: &Arc<File>,
        offset_bytes: u64,
        bufs: Vec<FrameBuf>,
        done: Completion,
    ) -> ReadRequest {
        ReadRequest {
            file: Arc::clone(file),
            offset_bytes,
            bufs,
            done,
        }
    }

    /// Waits for `count` reports and returns them sorted by tag.
    pub fn wait_reports(reports: &Receiver<Report>, count: usize) -> Vec<Report> {
        let mut received: Vec<Report> = (0..count)
            .map(|index| {
                reports
                    .recv_timeout(COMPLETION_WAIT)
                    .unwrap_or_else(|_| panic!("completion {index} of {count} never came"))
            })
            .collect();
        received.sort_by_key(|(tag, _)| *tag);
        received
    }

    /// Where request `index` of thread `thread` of `run_concurrent_reads` reads: a
    /// deterministic page-aligned file offset (covering the whole file, its partial last
    /// page and one page past it) and 1..=4 pieces, each `(skip_bytes, len_bytes)` within
    /// the request's 4-page slot of memory. Odd requests are vectored: one page per buffer,
    /// laid out backwards in the slot so that a backend filling them out of order fails.
    pub fn scattered_read(thread: usize, index: usize) -> (u64, Vec<(usize, usize)>) {
        let mixed = (thread as u64 * 7919 + index as u64 * 104_729).wrapping_mul(2_654_435_761);
        let file_pages = FILE_LEN_BYTES / PAGE_BYTES as u64 + 2;
        let offset = (mixed >> 8) % file_pages * PAGE_BYTES as u64;
        let pages = 1 + ((mixed >> 40) % 4) as usize;
        let pieces = if index % 2 == 0 {
            vec![(0, pages * PAGE_BYTES)]
        } else {
            (0..pages)
                .map(|page| ((pages - 1 - page) * PAGE_BYTES, PAGE_BYTES))
                .collect()
        };
        (offset, pieces)
    }

    /// The bytes of `pieces` of `bytes` (each `(skip_bytes, len_bytes)`), concatenated.
    pub fn gather(bytes: &[u8], pieces: &[(usize, usize)]) -> Vec<u8> {
        pieces
            .iter()
            .flat_map(|&(skip, len)| bytes[skip..skip + len].iter().copied())
            .collect()
    }

    /// Scenario: a read inside the file fills the whole buffer with the file's bytes.
    pub fn run_full_read(backend: &dyn Backend, test_file: &TestFile) {
        const READ_BYTES: usize = 64 * PAGE_BYTES;
        let buf = AlignedBuf::new(READ_BYTES);
        let (sender, reports) = channel();
        let offset = 16 * PAGE_BYTES as u64;
        backend.submit(vec![read_request(
            &test_file.file,
            offset,
            buf.frame_buf(),
            report_to(&sender, 0),
        )]);
        let (_, result) = wait_reports(&reports, 1).remove(0);
        assert_eq!(result.unwrap(), READ_BYTES);
        assert_file_bytes(buf.bytes(), offset);
    }

    /// Scenario: a read over the partial last page returns the short count and leaves the
    /// rest of the buffer alone; a read past the end returns 0.
    pub fn run_end_of_file_reads(backend: &dyn Backend, test_file: &TestFile) {
        let tail_buf = AlignedBuf::new(2 * PAGE_BYTES);
        let past_buf = AlignedBuf::new(PAGE_BYTES);
        let (sender, reports) = channel();
        backend.submit(vec![
            read_request(
                &test_file.file,
                LAST_PAGE_OFFSET,
                tail_buf.frame_buf(),
                report_to(&sender, 0),
            ),
            read_request(
                &test_file.file,
                LAST_PAGE_OFFSET + PAGE_BYTES as u64,
                past_buf.frame_buf(),
                report_to(&sender, 1),
            ),
        ]);
        let mut reports = wait_reports(&reports, 2).into_iter();
        let tail_len = reports.next().unwrap().1.unwrap();
        assert_eq!(tail_len as u64, FILE_LEN_BYTES - LAST_PAGE_OFFSET);
        assert_file_bytes(&tail_buf.bytes()[..tail_len], LAST_PAGE_OFFSET);
        assert!(tail_buf.bytes()[tail_len..].iter().all(|&byte| byte == 0));
        assert_eq!(reports.next().unwrap().1.unwrap(), 0);
    }

    /// Scenario: the kernel's error (EBADF from a write-only descriptor) reaches the
    /// completion unchanged.
    pub fn run_kernel_error(backend: &dyn Backend, test_file: &TestFile) {
        let buf = AlignedBuf::new(PAGE_BYTES);
        let (sender, reports) = channel();
        backend.submit(vec![read_request(
            &test_file.write_only,
            0,
            buf.frame_buf(),
            report_to(&sender, 0),
        )]);
        let (_, result) = wait_reports(&reports, 1).remove(0);
        assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::EBADF));
    }

    /// Scenario: reads into several buffers from separate allocations fill them in order,
    /// also when the file ends inside the second buffer.
    pub fn run_vectored_reads(backend: &dyn Backend, test_file: &TestFile) {
        let middle = [
            AlignedBuf::new(PAGE_BYTES),
            AlignedBuf::new(2 * PAGE_BYTES),
            AlignedBuf::new(PAGE_BYTES),
        ];
        let end = [AlignedBuf::new(PAGE_BYTES), AlignedBuf::new(2 * PAGE_BYTES)];
        let middle_offset = 10 * PAGE_BYTES as u64;
        let end_offset = LAST_PAGE_OFFSET - PAGE_BYTES as u64;
        let (sender, reports) = channel();
        backend.submit(vec![
            vectored_request(
                &test_file.file,
                middle_offset,
                middle.iter().map(AlignedBuf::frame_buf).collect(),
                report_to(&sender, 0),
            ),
            vectored_request(
                &test_file.file,
                end_offset,
                end.iter().map(AlignedBuf::frame_buf).collect(),
                report_to(&sender, 1),
            ),
        ]);
        let mut reports = wait_reports(&reports, 2).into_iter();
        assert_eq!(reports.next().unwrap().1.unwrap(), 4 * PAGE_BYTES);
        let middle_bytes: Vec<u8> = middle
            .iter()
            .flat_map(|buf| buf.bytes().iter().copied())
            .collect();
        assert_file_bytes(&middle_bytes, middle_offset);
        let end_len = reports.next().unwrap().1.unwrap();
        assert_eq!(end_len as u64, FILE_LEN_BYTES - end_offset);
        let end_bytes: Vec<u8> = end
            .iter()
            .flat_map(|buf| buf.bytes().iter().copied())
            .collect();
        assert_file_bytes(&end_bytes[..end_len], end_offset);
        assert!(end_bytes[end_len..].iter().all(|&byte| byte == 0));
    }

    /// Scenario: 8 threads each submit 200 reads of 1..=4 pages at scattered offsets (every
    /// other one vectored), in batches of 10; every returned length and every byte of every
    /// buffer is checked.
    pub fn run_concurrent_reads(backend: &dyn Backend, test_file: &TestFile) {
        const THREADS: usize = 8;
        const REQUESTS: usize = 200;
        const BATCH: usize = 10;
        const SLOT_BYTES: usize = 4 * PAGE_BYTES;
        thread::scope(|scope| {
            for thread in 0..THREADS {
                scope.spawn(move || {
                    let buf = AlignedBuf::new(REQUESTS * SLOT_BYTES);
                    let (sender, reports) = channel();
                    for first in (0..REQUESTS).step_by(BATCH) {
                        let batch = (first..first + BATCH)
                            .map(|index| {
                                let (offset, pieces) = scattered_read(thread, index);
                                let bufs = pieces
                                    .iter()
                                    .map(|&(skip, len)| {
                                        buf.frame_buf_at(index * SLOT_BYTES + skip, len)
                                    })
                                    .collect();
                                vectored_request(
                                    &test_file.file,
                                    offset,
                                    bufs,
                                    report_to(&sender, index),
                                )
                            })
                            .collect();
                        backend.submit(batch);
                    }
                    for (index, result) in wait_reports(&reports, REQUESTS) {
                        let (offset, pieces) = scattered_read(thread, index);
                        let slot = &buf.bytes()[index * SLOT_BYTES..(index + 1) * SLOT_BYTES];
                        let read = gather(slot, &pieces);
                        let len = result.unwrap();
                        assert_eq!(len, expected_len(offset, read.len()), "request {index}");
                        assert_file_bytes(&read[..len], offset);
                        assert!(
                            read[len..].iter().all(|&byte| byte == 0),
                            "bytes past the count"
                        );
                    }
                });
            }
        });
    }

    /// Scenario: `chains` chains each read `pages` pages page by page from their own start
    /// page, every read after the first submitted from the previous read's completion (the
    /// way the cache resubmits the rest of a short read). All bytes are checked.
    pub fn run_resubmitting_chains(
        backend: &Arc<dyn Backend>,
        test_file: &TestFile,
        chains: usize,
        pages: usize,
    ) {
        let bufs: Vec<AlignedBuf> = (0..chains)
            .map(|_| AlignedBuf::new(pages * PAGE_BYTES))
            .collect();
        let start_offset = |chain: usize| ((chain * 7) % 128 * PAGE_BYTES) as u64;
        let (sender, reports) = channel();
        let batch = bufs
            .iter()
            .enumerate()
            .map(|(chain, buf)| {
                ChainLink {
                    backend: Arc::clone(backend),
                    file: Arc::clone(&test_file.file),
                    start_offset: start_offset(chain),
                    whole: buf.frame_buf(),
                    read_bytes: 0,
                    reports: sender.clone(),
                    chain,
                }
                .request()
            })
            .collect();
        backend.submit(batch);
        for (chain, result) in wait_reports(&reports, chains) {
            let offset = start_offset(chain);
            let len = result.unwrap();
            assert_eq!(
                len,
                expected_len(offset, pages * PAGE_BYTES),
                "chain {chain}"
            );
            assert_file_bytes(&bufs[chain].bytes()[..len], offset);
        }
    }

    /// One step of a resubmitting chain: reads the page at `read_bytes` of its window.
    struct ChainLink {
        backend: Arc<dyn Backend>,
        file: Arc<File>,
        start_offset: u64,
        whole: FrameBuf,
        read_bytes: usize,
        reports: Sender<Report>,
        chain: usize,
    }

    impl ChainLink {
        fn request(self) -> ReadRequest {
            let buf = self.whole.tail(self.read_bytes).head(PAGE_BYTES);
            let file = Arc::clone(&self.file);
            let offset = self.start_offset + self.read_bytes as u64;
            read_request(
                &file,
                offset,
                buf,
                Box::new(move |result| self.on_done(result)),
            )
        }

        fn on_done(mut self, result: io::Result<usize>) {
            match result {
                Ok(len) if len == PAGE_BYTES && self.read_bytes + len < self.whole.len_bytes() => {
                    self.read_bytes += len;
                    let backend = Arc::clone(&self.backend);
                    backend.submit(vec![self.request()]);
                }
                Ok(len) => {
                    let _ = self.reports.send((self.chain, Ok(self.read_bytes + len)));
                }
                Err(error) => {
                    let _ = self.reports.send((self.chain, Err(error)));
                }
            }
        }
    }

    /// Scenario: `drop` returns only after every accepted request has completed.
    pub fn run_drop_completes_everything(backend: Box<dyn Backend>, test_file: &TestFile) {
        const REQUESTS: usize = 300;
        let bufs: Vec<AlignedBuf> = (0..REQUESTS).map(|_| AlignedBuf::new(PAGE_BYTES)).collect();
        let (sender, reports) = channel();
        let batch = bufs
            .iter()
            .enumerate()
            .map(|(index, buf)| {
                let offset = (index % 256 * PAGE_BYTES) as u64;
                read_request(
                    &test_file.file,
                    offset,
                    buf.frame_buf(),
                    report_to(&sender, index),
                )
            })
            .collect();
        backend.submit(batch);
        drop(backend);
        let received: Vec<Report> = reports.try_iter().collect();
        assert_eq!(
            received.len(),
            REQUESTS,
            "drop returned before every completion ran"
        );
        for (index, result) in received {
            assert_eq!(result.unwrap(), PAGE_BYTES);
            assert_file_bytes(bufs[index].bytes(), (index % 256 * PAGE_BYTES) as u64);
        }
    }

    /// Scenario: the first completion to run drops the last handle to the backend, on the
    /// backend's own thread, while more requests are still queued or in flight. The backend
    /// must not deadlock or panic joining that thread, and must still finish the rest before
    /// its `drop` returns (request 0 reports only after dropping the handle).
    pub fn run_dropped_from_inside_a_completion(backend: Arc<dyn Backend>, test_file: &TestFile) {
        const REQUESTS: usize = 200;
        let bufs: Vec<AlignedBuf> = (0..REQUESTS).map(|_| AlignedBuf::new(PAGE_BYTES)).collect();
        let (sender, reports) = channel();
        let (release, released) = mpsc::channel::<()>();
        let mut first = Some((Arc::clone(&backend), released));
        let batch = bufs
            .iter()
            .enumerate()
            .map(|(index, buf)| {
                let report = report_to(&sender, index);
                let done: Completion = match first.take() {
                    Some((handle, released)) => Box::new(move |result| {
                        // Wait until the test has dropped its own handle, so that this one
                        // is the last.
                        released
                            .recv_timeout(COMPLETION_WAIT)
                            .expect("test released");
                        drop(handle);
                        report(result);
                    }),
                    None => report,
                };
                read_request(
                    &test_file.file,
                    (index * PAGE_BYTES % (256 * PAGE_BYTES)) as u64,
                    buf.frame_buf(),
                    done,
                )
            })
            .collect();
        backend.submit(batch);
        drop(backend);
        release.send(()).unwrap();
        for (index, result) in wait_reports(&reports, REQUESTS) {
            let offset = (index * PAGE_BYTES % (256 * PAGE_BYTES)) as u64;
            assert_eq!(result.unwrap(), PAGE_BYTES);
            assert_file_bytes(bufs[index].bytes(), offset);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::testing::*;
    use super::*;

    #[test]
    fn full_read_returns_the_file_bytes() {
        let test_file = test_file();
        let backend = PreadBackend::new(2).unwrap();
        assert_eq!(backend.name(), "pread");
        run_full_read(&backend, &test_file);
    }

    #[test]
    fn read_at_end_of_file_is_short() {
        run_end_of_file_reads(&PreadBackend::new(1).unwrap(), &test_file());
    }

    #[test]
    fn kernel_error_reaches_the_completion() {
        run_kernel_error(&PreadBackend::new(1).unwrap(), &test_file());
    }

    #[test]
    fn vectored_reads_fill_buffers_in_order() {
        run_vectored_reads(&PreadBackend::new(1).unwrap(), &test_file());
    }

    #[test]
    fn zero_threads_is_refused() {
        let error = PreadBackend::new(0).expect_err("zero threads must be refused");
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn concurrent_submissions_read_every_byte() {
        run_concurrent_reads(&PreadBackend::new(4).unwrap(), &test_file());
    }

    #[test]
    fn completion_may_resubmit() {
        let backend: Arc<dyn Backend> = Arc::new(PreadBackend::new(2).unwrap());
        run_resubmitting_chains(&backend, &test_file(), 16, 32);
    }

    #[test]
    fn drop_completes_every_accepted_request() {
        run_drop_completes_everything(Box::new(PreadBackend::new(2).unwrap()), &test_file());
    }

    /// With one worker the dropping worker must run the queue itself; with several, the
    /// others drain it while it is detached.
    #[test]
    fn dropped_from_inside_a_completion() {
        let test_file = test_file();
        for threads in [1, 3] {
            let backend = Arc::new(PreadBackend::new(threads).unwrap());
            run_dropped_from_inside_a_completion(backend, &test_file);
        }
    }

    /// A completion that panics does not take its worker down.
    #[test]
    fn panicking_completion_keeps_the_worker() {
        let test_file = test_file();
        let backend = PreadBackend::new(1).unwrap();
        let buf = AlignedBuf::new(PAGE_BYTES);
        backend.submit(vec![read_request(
            &test_file.file,
            0,
            buf.frame_buf(),
            Box::new(|_| panic!("a completion that panics (expected in this test)")),
        )]);
        run_full_read(&backend, &test_file);
    }
}
