//! The null backend: completes every request at once, touching no file: a read returns
//! zeros, a write is discarded and reports its full length, a flush reports `Ok(0)`.
//!
//! For trace replay (`folio-trace`), where what matters is which pages the cache keeps,
//! not their bytes: the cache runs its real miss path (allocation, insertion, reclaim,
//! completion) with the I/O taken out. A request completes inside `submit`, on the
//! submitting thread, which the backend contract allows.
//!
//! Protection: no state. Limits: none beyond the contract's.

use super::backend::{atomic_zero, Backend, IoBatch, Op};

/// Reads nothing and returns zeros; writes and flushes nothing and reports success. See
/// the module docs.
#[derive(Debug, Default)]
pub struct NullBackend;

impl NullBackend {
    pub fn new() -> NullBackend {
        NullBackend
    }
}

impl Backend for NullBackend {
    fn name(&self) -> &str {
        "null"
    }

    fn submit(&self, batch: IoBatch) {
        for request in &batch {
            request.assert_contract();
        }
        for request in batch {
            let len = request.len_bytes();
            if request.op == Op::Read {
                for buf in &request.bufs {
                    // SAFETY: the request owns its buffers until `done` runs (backend
                    // contract): valid for writes of their length, and nobody else writes
                    // them. Atomic stores: a stale optimistic reader may be loading them.
                    unsafe { atomic_zero(buf.as_ptr(), buf.len_bytes()) };
                }
            }
            request.done.run(Ok(len));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::testing::*;

    /// A read fills every buffer with zeros and returns its full length, even past the
    /// end of the file.
    #[test]
    fn reads_return_zeros() {
        let test_file = test_file();
        let bufs = [written_buf(0, PAGE_BYTES), written_buf(0, 2 * PAGE_BYTES)];
        let (sender, reports) = channel();
        NullBackend::new().submit(smallvec::smallvec![vectored_request(
            &test_file.file,
            LAST_PAGE_OFFSET,
            bufs.iter().map(AlignedBuf::frame_buf).collect(),
            report_to(&sender, 0),
        )]);
        assert_eq!(
            wait_reports(&reports, 1)[0].1.as_ref().unwrap(),
            &(3 * PAGE_BYTES)
        );
        assert!(bufs.iter().all(|buf| buf.bytes().iter().all(|&b| b == 0)));
    }

    /// A write reports its full length, leaves its buffer alone and the file untouched,
    /// even on a descriptor that could not write.
    #[test]
    fn writes_are_discarded() {
        let scratch = scratch_file();
        let test_file = test_file();
        let buf = written_buf(0, 2 * PAGE_BYTES);
        let (sender, reports) = channel();
        NullBackend::new().submit(smallvec::smallvec![
            write_request(&scratch.file, 0, buf.frame_buf(), report_to(&sender, 0)),
            write_request(&test_file.file, 0, buf.frame_buf(), report_to(&sender, 1)),
        ]);
        for (_, result) in wait_reports(&reports, 2) {
            assert_eq!(result.unwrap(), 2 * PAGE_BYTES);
        }
        assert_file_bytes_written(buf.bytes(), 0);
        let on_disk = std::fs::read(&scratch.path).unwrap();
        assert!(on_disk.iter().all(|&b| b == 0));
        assert_file_bytes(&std::fs::read(&test_file.path).unwrap(), 0);
    }

    /// A flush completes with `Ok(0)` at once, even of a descriptor that could not write.
    #[test]
    fn flushes_complete() {
        let test_file = test_file();
        let (sender, reports) = channel();
        NullBackend::new().submit(smallvec::smallvec![
            crate::io::IoRequest::flush(
                std::sync::Arc::clone(&test_file.file),
                crate::io::FlushKind::Data,
                report_to(&sender, 0),
            ),
            crate::io::IoRequest::flush(
                std::sync::Arc::clone(&test_file.file),
                crate::io::FlushKind::All,
                report_to(&sender, 1),
            ),
        ]);
        for (_, result) in wait_reports(&reports, 2) {
            assert_eq!(result.unwrap(), 0);
        }
    }

    fn assert_file_bytes_written(bytes: &[u8], offset: u64) {
        for (at, &byte) in bytes.iter().enumerate() {
            assert_eq!(byte, written_byte(offset + at as u64));
        }
    }

    /// A completion that panics does not take the submitter down.
    #[test]
    fn panicking_completion_is_caught() {
        let test_file = test_file();
        let buf = AlignedBuf::new(PAGE_BYTES);
        let backend = NullBackend::new();
        backend.submit(smallvec::smallvec![read_request(
            &test_file.file,
            0,
            buf.frame_buf(),
            crate::io::backend::Completion::new(|_| {
                panic!("a completion that panics (expected in this test)")
            }),
        )]);
        let (sender, reports) = channel();
        backend.submit(smallvec::smallvec![read_request(
            &test_file.file,
            0,
            buf.frame_buf(),
            report_to(&sender, 0),
        )]);
        assert_eq!(
            wait_reports(&reports, 1)[0].1.as_ref().unwrap(),
            &PAGE_BYTES
        );
    }
}
