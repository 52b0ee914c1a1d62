//! Synchronous I/O: the one place that calls `preadv(2)` and `pwritev(2)` on arena memory,
//! and `fdatasync(2)`, `fsync(2)` and `ftruncate(2)` on the cache's files.
//!
//! Design: [`transfer`] moves the bytes of a vector of [`FrameBuf`]s from a byte of their
//! concatenation on, looping until they are full, the file ends (a read returns 0, or a
//! count that is not a whole number of blocks: O_DIRECT moves whole blocks otherwise), or
//! the kernel reports an error; `EINTR` is retried. Everything synchronous calls it:
//! - [`perform`]: a whole request, then its completion, on the calling thread. The pread
//!   pool's workers, and io_uring's and the pool's `submit_waited`, run requests this way;
//!   a flush is [`flush`] here.
//! - [`flush`]: `fdatasync` or `fsync` of a file, `EINTR` retried.
//! - [`set_len`]: `ftruncate` of a file, `EINTR` retried: the write path's truncation to
//!   the logical size before a sync returns (DESIGN.md §8 "Size"), called by the cache on
//!   its own thread rather than submitted, and followed by an `FlushKind::All` flush when
//!   the size must be durable.
//! - [`finish_read`]: the cache's completion of a read that came back short before the end
//!   of its buffers (`filemap::ReadCompletion`), where any error fails the read.
//!
//! Witnesses: a write that [`transfer`] makes for a caller other than a backend (the
//! rest of a short write, `write/writeback.rs`; a recovery's or a keeper's writes,
//! `keeper/orphan.rs`) is also reported to every registered [`WriteWitness`] before
//! and after it: the fault backend's power-loss model (`io/fault/power.rs`), which must
//! see every byte that reaches a file it models. A backend's own requests go through
//! [`perform`], which reports nothing: the fault backend records those itself. With no
//! witness registered (every cache outside the fault backend's tests) a write costs one
//! atomic load more.
//!
//! Raw pointers, never `&mut [u8]` / `&[u8]`: forming a reference over arena memory that
//! may never have been initialised, or that a stale optimistic reader may be loading from
//! (it fails validation), would be undefined behaviour; an iovec carries no such claim,
//! and the kernel's access is outside Rust's memory model.
//!
//! Protection: `WITNESSES` (a mutex) protects the list of witnesses, never held while
//! one is called; `WITNESSED` counts the live registrations. Otherwise none of its own:
//! the caller owns the buffers for the call (the backend
//! contract in `backend.rs`: valid, written by nobody else, stable for a write) and keeps
//! the file open (it lends `&File`).
//!
//! Limits: one system call per step, at most `UIO_MAXIOV` buffers per request (the
//! contract); each step makes progress or ends the loop, so a transfer takes at most
//! `len / DIRECT_IO_ALIGN_BYTES + 1` steps besides `EINTR` retries.

use std::fs::File as StdFile;
use std::io;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use smallvec::SmallVec;

use super::backend::{FlushKind, FrameBuf, IoRequest, Op, DIRECT_IO_ALIGN_BYTES};

/// Transfers `request` on this thread and runs its completion here.
///
/// Context: holds no lock; may block in `preadv` / `pwritev`; runs the completion.
pub(crate) fn perform(request: IoRequest) {
    let IoRequest {
        op,
        file,
        offset_bytes,
        bufs,
        done,
    } = request;
    let result = match op {
        Op::Flush { kind } => flush(&file, kind).map(|()| 0),
        Op::Read | Op::Write => transfer_unwitnessed(&file, op, offset_bytes, &bufs, 0),
    };
    // `file` is dropped only here, after the last system call on it has returned.
    drop(file);
    done.run(result);
}

/// Moves `bufs`, in order, from byte `from_bytes` of their concatenation on, between them
/// and `file` at `offset_bytes` (the offset of byte 0 of `bufs`): `op` says which way.
/// Loops until the buffers are done, or a step returns 0 or an unaligned count (the end of
/// the file for a read), or the kernel reports an error; retries `EINTR`.
///
/// Returns the bytes of `bufs` done in all, `from_bytes` included. An error is returned
/// only if no byte moved in this call; after some progress, the loop stops and reports the
/// count, as `read(2)` and `write(2)` do (the caller retries the rest and meets the error
/// itself).
///
/// A write is reported to the registered witnesses (module docs) before and after it.
///
/// Context: holds no lock; may block in the system call; a witness takes its own lock.
/// The caller owns `bufs` for the call (module docs).
pub(crate) fn transfer(
    file: &StdFile,
    op: Op,
    offset_bytes: u64,
    bufs: &[FrameBuf],
    from_bytes: usize,
) -> io::Result<usize> {
    let witnesses = match op {
        Op::Write if WITNESSED.load(Ordering::Acquire) > 0 => live_witnesses(),
        _ => Vec::new(),
    };
    if witnesses.is_empty() {
        return transfer_unwitnessed(file, op, offset_bytes, bufs, from_bytes);
    }
    let len_bytes: usize = bufs.iter().map(FrameBuf::len_bytes).sum();
    let (at_bytes, rest_bytes) = (offset_bytes + from_bytes as u64, len_bytes - from_bytes);
    let watching: Vec<&Arc<dyn WriteWitness>> = witnesses
        .iter()
        .filter(|witness| witness.before_write(file, at_bytes, rest_bytes))
        .collect();
    let result = transfer_unwitnessed(file, op, offset_bytes, bufs, from_bytes);
    let moved = result
        .as_ref()
        .map(|&done| done - from_bytes)
        .map_err(|error| io::Error::from(error.kind()));
    for witness in watching {
        witness.after_write(file, at_bytes, rest_bytes, &moved);
    }
    result
}

/// [`transfer`] without telling the witnesses: a backend's own requests ([`perform`]).
///
/// Context: holds no lock; may block in the system call. The caller owns `bufs` for the
/// call (module docs).
fn transfer_unwitnessed(
    file: &StdFile,
    op: Op,
    offset_bytes: u64,
    bufs: &[FrameBuf],
    from_bytes: usize,
) -> io::Result<usize> {
    let fd = file.as_raw_fd();
    let len_bytes: usize = bufs.iter().map(FrameBuf::len_bytes).sum();
    let mut done_bytes = from_bytes;
    while done_bytes < len_bytes {
        let position = offset_bytes
            .checked_add(done_bytes as u64)
            .and_then(|position| libc::off_t::try_from(position).ok())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let iovecs = iovecs_after(bufs, done_bytes);
        let count = iovecs.len() as libc::c_int;
        let result = match op {
            // SAFETY: every iovec lies inside one of `bufs` (`iovecs_after`), which the
            // caller owns for this call (backend contract: valid for writes, written by
            // nobody else until the completion runs). `iovecs` outlives the call and holds
            // at most `bufs.len() <= UIO_MAXIOV` entries (`IoRequest::assert_contract`).
            // `fd` is open: `file` is borrowed for the whole call.
            Op::Read => unsafe { libc::preadv(fd, iovecs.as_ptr(), count, position) },
            // SAFETY: as for the read; the kernel only reads the buffers, whose bytes the
            // caller keeps stable until the completion runs (backend contract).
            Op::Write => unsafe { libc::pwritev(fd, iovecs.as_ptr(), count, position) },
            Op::Flush { .. } => panic!("a flush moves no bytes: it has no transfer"),
        };
        match result {
            0 => break,
            n if n > 0 => {
                let n = n as usize;
                done_bytes += n;
                if n % DIRECT_IO_ALIGN_BYTES != 0 {
                    // An unaligned count is the end of the file (O_DIRECT moves whole
                    // blocks otherwise); a further step would start unaligned.
                    break;
                }
            }
            _ => {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if done_bytes > from_bytes {
                    break;
                }
                return Err(error);
            }
        }
    }
    Ok(done_bytes)
}

/// Something that must see every write [`transfer`] makes for a caller other than a
/// backend (module docs): the fault backend's power-loss model.
pub(crate) trait WriteWitness: Send + Sync {
    /// `len_bytes` of `file` at `offset_bytes` are about to be written. Returns whether
    /// this witness records it: only then is it told how it ended.
    fn before_write(&self, file: &StdFile, offset_bytes: u64, len_bytes: usize) -> bool;

    /// The write `before_write` announced ended: `Ok(n)` stored its first `n` bytes.
    fn after_write(
        &self,
        file: &StdFile,
        offset_bytes: u64,
        len_bytes: usize,
        result: &io::Result<usize>,
    );
}

/// The registered witnesses; a dropped one is pruned when the list is next read.
static WITNESSES: Mutex<Vec<Weak<dyn WriteWitness>>> = Mutex::new(Vec::new());

/// How many entries `WITNESSES` holds (live or not yet pruned): 0 skips the lock.
static WITNESSED: AtomicUsize = AtomicUsize::new(0);

/// Registers `witness` for every later write [`transfer`] makes, until it is dropped.
///
/// Context: takes `WITNESSES` briefly.
pub(crate) fn add_witness(witness: Weak<dyn WriteWitness>) {
    let mut witnesses = WITNESSES.lock().unwrap_or_else(PoisonError::into_inner);
    witnesses.push(witness);
    WITNESSED.store(witnesses.len(), Ordering::Release);
}

/// The witnesses still alive, the dropped ones pruned.
///
/// Context: takes `WITNESSES` briefly; calls no witness under it.
fn live_witnesses() -> Vec<Arc<dyn WriteWitness>> {
    // The list is a plain vector, valid after any panic.
    let mut witnesses = WITNESSES.lock().unwrap_or_else(PoisonError::into_inner);
    witnesses.retain(|witness| witness.strong_count() > 0);
    WITNESSED.store(witnesses.len(), Ordering::Release);
    witnesses.iter().filter_map(Weak::upgrade).collect()
}

/// Makes `file`'s written data durable: `fdatasync(2)` for [`FlushKind::Data`], `fsync(2)`
/// for [`FlushKind::All`]; retries `EINTR`. `Ok` only once the kernel reported success.
///
/// Context: holds no lock; blocks until the device has flushed.
pub(crate) fn flush(file: &StdFile, kind: FlushKind) -> io::Result<()> {
    let fd = file.as_raw_fd();
    loop {
        let result = match kind {
            // SAFETY: `fd` is open (`file` is borrowed for the call); no memory is passed.
            FlushKind::Data => unsafe { libc::fdatasync(fd) },
            // SAFETY: as above.
            FlushKind::All => unsafe { libc::fsync(fd) },
        };
        if result == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Sets `file`'s size to `len_bytes` (`ftruncate(2)`): cuts what lies past it, or extends
/// it with a hole that reads as zeros; retries `EINTR`. Not durable until a
/// [`FlushKind::All`] flush (or `fdatasync` when the size grew) succeeds.
///
/// Context: holds no lock; may block in the file system.
pub(crate) fn set_len(file: &StdFile, len_bytes: u64) -> io::Result<()> {
    let len =
        libc::off_t::try_from(len_bytes).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    let fd = file.as_raw_fd();
    loop {
        // SAFETY: `fd` is open (`file` is borrowed for the call); no memory is passed.
        if unsafe { libc::ftruncate(fd, len) } == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Reserves the file's blocks for `[offset_bytes, offset_bytes + len_bytes)` without
/// changing its size (`fallocate(2)` with `FALLOC_FL_KEEP_SIZE`), so that a write there
/// later cannot fail for lack of space: ENOSPC is learnt now, by the writer. Retries
/// `EINTR`. File systems without it answer `EOPNOTSUPP`.
///
/// Context: holds no lock; may block in the file system.
pub(crate) fn allocate(file: &StdFile, offset_bytes: u64, len_bytes: u64) -> io::Result<()> {
    let to_off =
        |v: u64| libc::off_t::try_from(v).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG));
    let (offset, len) = (to_off(offset_bytes)?, to_off(len_bytes)?);
    let fd = file.as_raw_fd();
    loop {
        // SAFETY: `fd` is open (`file` is borrowed for the call); no memory is passed.
        if unsafe { libc::fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, offset, len) } == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Completes a read of `bufs` at `offset_bytes` that came back with `read_bytes`, short
/// of the buffers' end: reads the rest, from where it stopped, until the buffers are full
/// or the file ends. Returns the bytes of `bufs` read in all (short only at the real end
/// of the file, as the kernel sees it now).
///
/// Unlike [`transfer`] alone, an error is returned even after some of the rest arrived:
/// the cache fails the read's folios rather than guess which of them the error spared.
/// Each step makes progress or ends the loop, so it ends within the request's length.
///
/// Context: holds no lock; may block in `preadv`. The caller owns `bufs` (the read's
/// LOCKED folios, whose backend has completed).
pub(crate) fn finish_read(
    file: &StdFile,
    offset_bytes: u64,
    bufs: &[FrameBuf],
    read_bytes: usize,
) -> io::Result<usize> {
    let len_bytes: usize = bufs.iter().map(FrameBuf::len_bytes).sum();
    let mut done_bytes = read_bytes;
    while done_bytes < len_bytes {
        let now = transfer_unwitnessed(file, Op::Read, offset_bytes, bufs, done_bytes)?;
        let step_bytes = now - done_bytes;
        done_bytes = now;
        if step_bytes == 0 || done_bytes % DIRECT_IO_ALIGN_BYTES != 0 {
            break;
        }
    }
    Ok(done_bytes)
}

/// The iovecs covering `bufs` from byte `skip_bytes` of their concatenation on.
fn iovecs_after(bufs: &[FrameBuf], skip_bytes: usize) -> SmallVec<[libc::iovec; 4]> {
    let mut skip_left = skip_bytes;
    let mut iovecs = SmallVec::with_capacity(bufs.len());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::testing::*;

    /// `transfer` from a byte of the buffers on fills only the rest, and stops at the end
    /// of the file with an unaligned count.
    #[test]
    fn transfer_continues_from_a_byte_and_stops_at_the_end() {
        let test_file = test_file();
        let bufs = [AlignedBuf::new(PAGE_BYTES), AlignedBuf::new(2 * PAGE_BYTES)];
        let frame_bufs: Vec<FrameBuf> = bufs.iter().map(AlignedBuf::frame_buf).collect();
        let offset = 8 * PAGE_BYTES as u64;
        let got = transfer(&test_file.file, Op::Read, offset, &frame_bufs, PAGE_BYTES).unwrap();
        assert_eq!(got, 3 * PAGE_BYTES);
        assert!(
            bufs[0].bytes().iter().all(|&b| b == 0),
            "byte 0 on was skipped"
        );
        assert_file_bytes(bufs[1].bytes(), offset + PAGE_BYTES as u64);

        let tail = [AlignedBuf::new(3 * PAGE_BYTES)];
        let frame_bufs: Vec<FrameBuf> = tail.iter().map(AlignedBuf::frame_buf).collect();
        let offset = LAST_PAGE_OFFSET - PAGE_BYTES as u64;
        let got = transfer(&test_file.file, Op::Read, offset, &frame_bufs, 0).unwrap();
        assert_eq!(got as u64, FILE_LEN_BYTES - offset);
        assert_file_bytes(&tail[0].bytes()[..got], offset);
    }

    /// `finish_read` reads the rest of a read that stopped after its first page, across
    /// buffers, up to the end of the file; a read already at the end stays as it is.
    #[test]
    fn finish_read_completes_a_short_read() {
        let test_file = test_file();
        let bufs = [AlignedBuf::new(PAGE_BYTES), AlignedBuf::new(3 * PAGE_BYTES)];
        let frame_bufs: Vec<FrameBuf> = bufs.iter().map(AlignedBuf::frame_buf).collect();
        let offset = 4 * PAGE_BYTES as u64;
        let got = finish_read(&test_file.file, offset, &frame_bufs, PAGE_BYTES).unwrap();
        assert_eq!(got, 4 * PAGE_BYTES);
        assert!(
            bufs[0].bytes().iter().all(|&b| b == 0),
            "the first page was read again"
        );
        assert_file_bytes(bufs[1].bytes(), offset + PAGE_BYTES as u64);

        let end = [AlignedBuf::new(4 * PAGE_BYTES)];
        let frame_bufs: Vec<FrameBuf> = end.iter().map(AlignedBuf::frame_buf).collect();
        let offset = LAST_PAGE_OFFSET - 2 * PAGE_BYTES as u64;
        let got = finish_read(&test_file.file, offset, &frame_bufs, PAGE_BYTES).unwrap();
        assert_eq!(got as u64, FILE_LEN_BYTES - offset);
        assert_file_bytes(&end[0].bytes()[PAGE_BYTES..got], offset + PAGE_BYTES as u64);
    }

    /// An error while finishing a read is the result, not a short count.
    #[test]
    fn finish_read_returns_the_error() {
        let test_file = test_file();
        let buf = AlignedBuf::new(2 * PAGE_BYTES);
        let error = finish_read(&test_file.write_only, 0, &[buf.frame_buf()], PAGE_BYTES)
            .expect_err("a write-only descriptor cannot read");
        assert_eq!(error.raw_os_error(), Some(libc::EBADF));
    }

    /// `transfer` writes from a byte of the buffers on, and reports the kernel's error when
    /// nothing moved.
    #[test]
    fn transfer_writes_the_rest() {
        let scratch = scratch_file();
        let buf = written_buf(0, 3 * PAGE_BYTES);
        let got = transfer(&scratch.file, Op::Write, 0, &[buf.frame_buf()], PAGE_BYTES).unwrap();
        assert_eq!(got, 3 * PAGE_BYTES);
        let on_disk = std::fs::read(&scratch.path).unwrap();
        assert!(on_disk[..PAGE_BYTES].iter().all(|&b| b == 0));
        assert_eq!(
            &on_disk[PAGE_BYTES..3 * PAGE_BYTES],
            &buf.bytes()[PAGE_BYTES..]
        );

        let test_file = test_file();
        let error = transfer(&test_file.file, Op::Write, 0, &[buf.frame_buf()], 0)
            .expect_err("a read-only descriptor cannot write");
        assert_eq!(error.raw_os_error(), Some(libc::EBADF));
    }

    /// `set_len` cuts and extends (the extension reads as zeros), and refuses a size
    /// `off_t` cannot hold; `flush` of either kind succeeds on a writable file, and a
    /// flush's request completes with `Ok(0)` through `perform`.
    #[test]
    fn set_len_and_flush() {
        let scratch = scratch_file();
        let buf = written_buf(0, 2 * PAGE_BYTES);
        transfer(&scratch.file, Op::Write, 0, &[buf.frame_buf()], 0).unwrap();
        set_len(&scratch.file, 5000).unwrap();
        assert_eq!(std::fs::read(&scratch.path).unwrap(), &buf.bytes()[..5000]);
        set_len(&scratch.file, 3 * PAGE_BYTES as u64).unwrap();
        let on_disk = std::fs::read(&scratch.path).unwrap();
        assert_eq!(on_disk.len(), 3 * PAGE_BYTES);
        assert_eq!(&on_disk[..5000], &buf.bytes()[..5000]);
        assert!(on_disk[5000..].iter().all(|&b| b == 0));
        let error = set_len(&scratch.file, u64::MAX).expect_err("beyond off_t");
        assert_eq!(error.raw_os_error(), Some(libc::EFBIG));
        flush(&scratch.file, FlushKind::Data).unwrap();
        flush(&scratch.file, FlushKind::All).unwrap();
        let (sender, reports) = channel();
        perform(IoRequest::flush(
            std::sync::Arc::clone(&scratch.file),
            FlushKind::Data,
            report_to(&sender, 0),
        ));
        assert_eq!(wait_reports(&reports, 1)[0].1.as_ref().unwrap(), &0);
    }
}
