//! Fixtures shared by the tests of every backend (pread, io_uring, null, fault): a file
//! with known content, aligned buffers, completions that report through a channel, and the
//! scenarios every backend must pass, reads and writes alike (the conformance suite of the
//! contract in `backend.rs`). Built for unit tests only; each engine's tests import it as
//! `crate::io::testing`.
//!
//! Protection: none needed: each scenario owns its files and buffers, and reads a buffer
//! only after the completions of the requests into it have run (`AlignedBuf::bytes`).
//!
//! Limits: files live under /var/tmp where O_DIRECT works (tmpfs refuses it), else in the
//! default temp directory, opened without O_DIRECT (`OpenMode::Buffered`).

use std::alloc::{self, Layout};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::backend::{
    Backend, Completion, FlushKind, FrameBuf, IoBatch, IoRequest, DIRECT_IO_ALIGN_BYTES,
};

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
    pub path: PathBuf,
    /// Opened read-only: writes to it fail with EBADF.
    pub file: Arc<File>,
    pub mode: OpenMode,
    /// The same file opened write-only: reads from it fail with EBADF.
    pub write_only: Arc<File>,
}

/// A directory under /var/tmp (on the root file system, where O_DIRECT works, unlike
/// tmpfs), or in the default temp directory if that fails.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("folio-io-test-")
        .tempdir_in("/var/tmp")
        .or_else(|_| tempfile::tempdir())
        .expect("creating a temp directory")
}

/// Creates the test file in `temp_dir()` and opens it with O_DIRECT where the file system
/// allows it.
pub fn test_file() -> TestFile {
    let dir = temp_dir();
    let path = dir.path().join("words");
    let content: Vec<u8> = (0..FILE_LEN_BYTES).map(expected_byte).collect();
    let mut writer = File::create(&path).expect("creating the test file");
    writer.write_all(&content).expect("writing the test file");
    writer.sync_all().expect("syncing the test file");
    drop(writer);
    let (file, mode) = open_direct(&path, OpenOptions::new().read(true));
    let write_only = OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("opening the test file write-only");
    TestFile {
        _dir: dir,
        path,
        file: Arc::new(file),
        mode,
        write_only: Arc::new(write_only),
    }
}

/// Pages of zeros a scratch file starts with.
pub const SCRATCH_PAGES: u64 = 64;

/// A file for the write scenarios, `SCRATCH_PAGES` pages of zeros, opened for reading and
/// writing (O_DIRECT where the file system allows it); removed when this is dropped.
pub struct ScratchFile {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
    pub file: Arc<File>,
    pub mode: OpenMode,
}

pub fn scratch_file() -> ScratchFile {
    let dir = temp_dir();
    let path = dir.path().join("scratch");
    let zeros = File::create(&path).expect("creating the scratch file");
    zeros
        .set_len(SCRATCH_PAGES * PAGE_BYTES as u64)
        .expect("sizing the scratch file");
    drop(zeros);
    let (file, mode) = open_direct(&path, OpenOptions::new().read(true).write(true));
    ScratchFile {
        _dir: dir,
        path,
        file: Arc::new(file),
        mode,
    }
}

/// The byte the write scenarios store at file offset `offset`: never zero, and not the
/// words file's byte there, so a write that lands in the wrong place or not at all shows.
pub fn written_byte(offset: u64) -> u8 {
    (expected_byte(offset) ^ 0xA5).max(1)
}

/// The buffer a write scenario stores at file offset `offset`.
pub fn written_buf(offset: u64, len_bytes: usize) -> AlignedBuf {
    AlignedBuf::filled(len_bytes, |index| written_byte(offset + index as u64))
}

/// Opens `path` with `options` and O_DIRECT, or without O_DIRECT where the file system
/// refuses it (EINVAL: tmpfs).
fn open_direct(path: &Path, options: &OpenOptions) -> (File, OpenMode) {
    match options.clone().custom_flags(libc::O_DIRECT).open(path) {
        Ok(file) => (file, OpenMode::Direct),
        Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
            let file = options.open(path).expect("opening a test file");
            (file, OpenMode::Buffered)
        }
        Err(error) => panic!("opening a test file with O_DIRECT: {error}"),
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
        let layout = Layout::from_size_align(len_bytes, PAGE_BYTES).expect("a valid buffer layout");
        // SAFETY: the layout has a non-zero size (asserted above).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, layout }
    }

    /// A buffer whose byte `i` is `byte_at(i)`: the source of a write.
    pub fn filled(len_bytes: usize, byte_at: impl Fn(usize) -> u8) -> Self {
        let buf = AlignedBuf::new(len_bytes);
        for index in 0..len_bytes {
            // SAFETY: index < len_bytes, inside the allocation, which nothing else uses
            // yet (it was made just above).
            unsafe { buf.ptr.as_ptr().add(index).write(byte_at(index)) };
        }
        buf
    }

    /// The whole buffer as a transfer's target (a read) or source (a write).
    pub fn frame_buf(&self) -> FrameBuf {
        self.frame_buf_at(0, self.layout.size())
    }

    /// `len_bytes` from `skip_bytes` on, as a transfer's target or source.
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

/// A backend whose `submit` is the wrapped one's `submit_waited`: runs the scenarios
/// through the path a reader's own miss takes.
pub struct Waited<'a>(pub &'a dyn Backend);

impl Backend for Waited<'_> {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn submit(&self, batch: IoBatch) {
        self.0.submit_waited(batch)
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
    Completion::new(move |result| {
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
) -> IoRequest {
    vectored_request(file, offset_bytes, vec![buf], done)
}

/// A read into several buffers, filled in order.
pub fn vectored_request(
    file: &Arc<File>,
    offset_bytes: u64,
    bufs: Vec<FrameBuf>,
    done: Completion,
) -> IoRequest {
    IoRequest::read(Arc::clone(file), offset_bytes, bufs.into(), done)
}

/// A write of one buffer.
pub fn write_request(
    file: &Arc<File>,
    offset_bytes: u64,
    buf: FrameBuf,
    done: Completion,
) -> IoRequest {
    vectored_write(file, offset_bytes, vec![buf], done)
}

/// A write of several buffers, stored in order.
pub fn vectored_write(
    file: &Arc<File>,
    offset_bytes: u64,
    bufs: Vec<FrameBuf>,
    done: Completion,
) -> IoRequest {
    IoRequest::write(Arc::clone(file), offset_bytes, bufs.into(), done)
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
    backend.submit(smallvec::smallvec![read_request(
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
    backend.submit(smallvec::smallvec![
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
    backend.submit(smallvec::smallvec![read_request(
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
    backend.submit(smallvec::smallvec![
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
    fn request(self) -> IoRequest {
        let buf = self.whole.tail(self.read_bytes).head(PAGE_BYTES);
        let file = Arc::clone(&self.file);
        let offset = self.start_offset + self.read_bytes as u64;
        read_request(
            &file,
            offset,
            buf,
            Completion::new(move |result| self.on_done(result)),
        )
    }

    fn on_done(mut self, result: io::Result<usize>) {
        match result {
            Ok(len) if len == PAGE_BYTES && self.read_bytes + len < self.whole.len_bytes() => {
                self.read_bytes += len;
                let backend = Arc::clone(&self.backend);
                backend.submit(smallvec::smallvec![self.request()]);
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
                Some((handle, released)) => Completion::new(move |result| {
                    // Wait until the test has dropped its own handle, so that this one
                    // is the last.
                    released
                        .recv_timeout(COMPLETION_WAIT)
                        .expect("test released");
                    drop(handle);
                    report.run(result);
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

/// Scenario: writes of one buffer, of several buffers from separate allocations, and of
/// two pages from the last page of the file on (which extends it) each return their full
/// length, and store exactly their bytes: the file read back with `std::fs`, and through
/// the backend in one vectored read, equals the image of what was written, zeros elsewhere.
pub fn run_writes_read_back(backend: &dyn Backend) {
    let scratch = scratch_file();
    // (first page, pages of each buffer)
    let writes: [(u64, &[usize]); 3] = [(2, &[4]), (8, &[1, 2]), (SCRATCH_PAGES - 1, &[2])];
    let end_bytes = (SCRATCH_PAGES + 1) as usize * PAGE_BYTES;
    let mut image = vec![0u8; end_bytes];
    let mut bufs = Vec::new();
    let (sender, reports) = channel();
    let batch = writes
        .iter()
        .enumerate()
        .map(|(tag, &(page, pieces))| {
            let offset = page * PAGE_BYTES as u64;
            let mut at = offset;
            let mut frame_bufs = Vec::new();
            for &pages in pieces {
                let buf = written_buf(at, pages * PAGE_BYTES);
                frame_bufs.push(buf.frame_buf());
                image[at as usize..at as usize + buf.bytes().len()].copy_from_slice(buf.bytes());
                at += buf.bytes().len() as u64;
                bufs.push(buf);
            }
            vectored_write(&scratch.file, offset, frame_bufs, report_to(&sender, tag))
        })
        .collect();
    backend.submit(batch);
    for (tag, result) in wait_reports(&reports, writes.len()) {
        let pages: usize = writes[tag].1.iter().sum();
        assert_eq!(result.unwrap(), pages * PAGE_BYTES, "write {tag}");
    }
    let on_disk = std::fs::read(&scratch.path).expect("reading the scratch file back");
    assert_eq!(on_disk.len(), end_bytes, "the last write extends the file");
    assert!(on_disk == image, "the file differs from what was written");

    let halves = [
        AlignedBuf::new(end_bytes / 2 / PAGE_BYTES * PAGE_BYTES),
        AlignedBuf::new(end_bytes - end_bytes / 2 / PAGE_BYTES * PAGE_BYTES),
    ];
    backend.submit(smallvec::smallvec![vectored_request(
        &scratch.file,
        0,
        halves.iter().map(AlignedBuf::frame_buf).collect(),
        report_to(&sender, 0),
    )]);
    assert_eq!(wait_reports(&reports, 1)[0].1.as_ref().unwrap(), &end_bytes);
    let read_back: Vec<u8> = halves.iter().flat_map(|b| b.bytes().to_vec()).collect();
    assert!(read_back == image, "the backend reads back other bytes");
}

/// Scenario: the kernel's error on a write (EBADF from a read-only descriptor) reaches the
/// completion unchanged, and the file keeps its bytes.
pub fn run_write_error(backend: &dyn Backend, test_file: &TestFile) {
    let buf = written_buf(0, PAGE_BYTES);
    let (sender, reports) = channel();
    backend.submit(smallvec::smallvec![write_request(
        &test_file.file,
        0,
        buf.frame_buf(),
        report_to(&sender, 0),
    )]);
    let (_, result) = wait_reports(&reports, 1).remove(0);
    assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::EBADF));
    let bytes = std::fs::read(&test_file.path).expect("reading the test file");
    assert_file_bytes(&bytes, 0);
}

/// Scenario: 4 threads each submit 24 writes of 1..=4 pages into their own slots of one
/// scratch file (every other one vectored, one page per buffer), in batches of
/// 6 that also carry a read of the words file each: reads and writes share the engine's
/// queue. Every count, every byte read and every byte of the file is checked.
pub fn run_concurrent_writes(backend: &dyn Backend, test_file: &TestFile) {
    const THREADS: usize = 4;
    const REQUESTS: usize = 24;
    const BATCH: usize = 6;
    const SLOT_PAGES: usize = 4;
    let scratch = scratch_file();
    // (file offset, buffers' pages in file order) of write `index` of `thread`.
    let slot = |thread: usize, index: usize| {
        let offset = ((thread * REQUESTS + index) * SLOT_PAGES * PAGE_BYTES) as u64;
        let (_, pieces) = scattered_read(thread, index);
        let pages = pieces.iter().map(|&(_, len)| len).sum::<usize>() / PAGE_BYTES;
        let split = if index % 2 == 0 {
            vec![pages]
        } else {
            vec![1; pages]
        };
        (offset, split)
    };
    thread::scope(|scope| {
        for thread in 0..THREADS {
            let scratch = &scratch;
            scope.spawn(move || {
                let (sender, reports) = channel();
                let mut kept = Vec::new();
                for first in (0..REQUESTS).step_by(BATCH) {
                    let mut batch = Vec::new();
                    for index in first..first + BATCH {
                        let (offset, split) = slot(thread, index);
                        let mut at = offset;
                        let bufs: Vec<AlignedBuf> = split
                            .iter()
                            .map(|&pages| {
                                let buf = written_buf(at, pages * PAGE_BYTES);
                                at += (pages * PAGE_BYTES) as u64;
                                buf
                            })
                            .collect();
                        let frame_bufs = bufs.iter().map(AlignedBuf::frame_buf).collect();
                        batch.push(vectored_write(
                            &scratch.file,
                            offset,
                            frame_bufs,
                            report_to(&sender, index),
                        ));
                        let read_offset = (index * PAGE_BYTES) as u64;
                        let read_buf = AlignedBuf::new(PAGE_BYTES);
                        batch.push(read_request(
                            &test_file.file,
                            read_offset,
                            read_buf.frame_buf(),
                            report_to(&sender, REQUESTS + index),
                        ));
                        kept.push((bufs, read_buf));
                    }
                    backend.submit(batch.into());
                }
                for (tag, result) in wait_reports(&reports, 2 * REQUESTS) {
                    let len = result.unwrap();
                    if tag < REQUESTS {
                        let pages: usize = slot(thread, tag).1.iter().sum();
                        assert_eq!(len, pages * PAGE_BYTES, "write {tag}");
                    } else {
                        let index = tag - REQUESTS;
                        assert_eq!(len, PAGE_BYTES, "read {index}");
                        assert_file_bytes(kept[index].1.bytes(), (index * PAGE_BYTES) as u64);
                    }
                }
            });
        }
    });
    let on_disk = std::fs::read(&scratch.path).expect("reading the scratch file back");
    for thread in 0..THREADS {
        for index in 0..REQUESTS {
            let (offset, split) = slot(thread, index);
            let written_bytes = split.iter().sum::<usize>() * PAGE_BYTES;
            for at in 0..SLOT_PAGES * PAGE_BYTES {
                // Past the end of the file (the last slot's unwritten pages): zeros.
                let byte = on_disk.get(offset as usize + at).copied().unwrap_or(0);
                let expected = if at < written_bytes {
                    written_byte(offset + at as u64)
                } else {
                    0
                };
                assert_eq!(byte, expected, "thread {thread} write {index} byte {at}");
            }
        }
    }
}

/// Scenario: a write, waited for, then a batch of two flushes (`Data` and `All`) of its file:
/// each flush completes with `Ok(0)`, and the file holds the write's bytes; a second round
/// over the same file flushes again.
pub fn run_flushes(backend: &dyn Backend) {
    let scratch = scratch_file();
    let (sender, reports) = channel();
    for round in 0..2u64 {
        let offset = (4 + round * 8) * PAGE_BYTES as u64;
        let buf = written_buf(offset, 3 * PAGE_BYTES);
        backend.submit(smallvec::smallvec![write_request(
            &scratch.file,
            offset,
            buf.frame_buf(),
            report_to(&sender, 0),
        )]);
        assert_eq!(
            wait_reports(&reports, 1)[0].1.as_ref().unwrap(),
            &(3 * PAGE_BYTES)
        );
        backend.submit(
            [FlushKind::Data, FlushKind::All]
                .into_iter()
                .enumerate()
                .map(|(tag, kind)| {
                    IoRequest::flush(Arc::clone(&scratch.file), kind, report_to(&sender, tag))
                })
                .collect(),
        );
        for (tag, result) in wait_reports(&reports, 2) {
            assert_eq!(result.unwrap(), 0, "flush {tag} of round {round}");
        }
        let on_disk = std::fs::read(&scratch.path).expect("reading the scratch file back");
        let at = offset as usize;
        assert!(on_disk[at..at + 3 * PAGE_BYTES] == *buf.bytes());
    }
}
