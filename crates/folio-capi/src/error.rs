//! Errors across the boundary: every failure becomes a negative errno, its message is kept
//! per thread for `folio_last_error_message` (here too), and no panic unwinds into C.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::c_char;
use std::io;
use std::panic::{self, AssertUnwindSafe};

/// A failed call: the errno C gets (positive here, negated at the boundary) and a message.
#[derive(Debug)]
pub(crate) struct Failure {
    errno: i32,
    message: String,
}

impl Failure {
    pub(crate) fn new(errno: i32, message: impl Into<String>) -> Self {
        Failure {
            errno,
            message: message.into(),
        }
    }

    /// An `io::Error` from the library: its raw OS error if it has one, else its kind.
    pub(crate) fn io(call: &str, error: &io::Error) -> Self {
        Failure::new(errno_of(error), format!("{call}: {error}"))
    }

    pub(crate) fn errno(&self) -> i32 {
        self.errno
    }

    /// Adds `more` to the message: a hint at what to change.
    pub(crate) fn append(&mut self, more: &str) {
        self.message.push_str(more);
    }
}

/// The errno for an `io::Error`: the OS's own code when the error came from a system call,
/// else the closest POSIX meaning of its kind, `EIO` when there is none.
pub(crate) fn errno_of(error: &io::Error) -> i32 {
    if let Some(code) = error.raw_os_error().filter(|&c| c > 0) {
        return code;
    }
    use io::ErrorKind as K;
    match error.kind() {
        K::NotFound => libc::ENOENT,
        K::PermissionDenied => libc::EACCES,
        K::AlreadyExists => libc::EEXIST,
        K::WouldBlock => libc::EAGAIN,
        K::InvalidInput => libc::EINVAL,
        K::InvalidData => libc::EBADMSG,
        K::TimedOut => libc::ETIMEDOUT,
        K::Interrupted => libc::EINTR,
        K::Unsupported => libc::EOPNOTSUPP,
        K::UnexpectedEof => libc::ENODATA,
        K::OutOfMemory => libc::ENOMEM,
        K::IsADirectory => libc::EISDIR,
        K::NotADirectory => libc::ENOTDIR,
        K::StorageFull => libc::ENOSPC,
        K::ReadOnlyFilesystem => libc::EROFS,
        K::ResourceBusy => libc::EBUSY,
        K::FileTooLarge => libc::EFBIG,
        K::BrokenPipe => libc::EPIPE,
        _ => libc::EIO,
    }
}

/// What an entry point returns: a value, or `-errno` in the same type.
pub(crate) trait Returns: Copy {
    fn from_errno(errno: i32) -> Self;
}

impl Returns for i32 {
    fn from_errno(errno: i32) -> Self {
        -errno
    }
}

impl Returns for i64 {
    fn from_errno(errno: i32) -> Self {
        -i64::from(errno)
    }
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn record(message: String) {
    // A thread whose thread-locals are already destroyed keeps no message.
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = message);
}

/// Copies this thread's last error message into `dst` (truncated, NUL-terminated when
/// `dst` is not empty) and returns the message's full length in bytes.
pub(crate) fn copy_last_message(dst: &mut [u8]) -> usize {
    LAST_ERROR
        .try_with(|last| {
            let last = last.borrow();
            let bytes = last.as_bytes();
            if let Some(room) = dst.len().checked_sub(1) {
                let n = bytes.len().min(room);
                dst[..n].copy_from_slice(&bytes[..n]);
                dst[n] = 0;
            }
            bytes.len()
        })
        .unwrap_or(0)
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// Runs the body of the entry point `call`: its value on success; on failure, records the
/// message and returns `-errno`; on a panic, records it and returns `-ENOTRECOVERABLE`.
/// Nothing unwinds past this function.
///
/// Context: any thread. The body's own context applies.
pub(crate) fn boundary<R: Returns>(call: &str, body: impl FnOnce() -> Result<R, Failure>) -> R {
    match panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => value,
        Ok(Err(failure)) => {
            let errno = failure.errno();
            record(failure.message);
            R::from_errno(errno)
        }
        Err(payload) => {
            record(format!(
                "{call}: internal error (a panic): {}",
                panic_message(payload.as_ref())
            ));
            R::from_errno(libc::ENOTRECOVERABLE)
        }
    }
}

/// Copies the message of the calling thread's last failed folio call into `buf` (at most
/// `buf_len - 1` bytes and a NUL; nothing if `buf_len` is 0) and returns the message's
/// full length, so a caller can size `buf` (0: no call of this thread has failed). The
/// message names the function and says why, e.g. "folio_open: /x: No such file or
/// directory (os error 2)".
///
/// Context: any thread; does not block. Successful calls leave the message as it was
/// (like errno).
///
/// # Safety
/// `buf` is NULL (then `buf_len` must be 0) or writable for `buf_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn folio_last_error_message(buf: *mut c_char, buf_len: usize) -> usize {
    let result = panic::catch_unwind(|| {
        if buf.is_null() || buf_len == 0 {
            return copy_last_message(&mut []);
        }
        // SAFETY: non-null, and the caller guarantees it is writable for `buf_len` bytes
        // (which, being one object, cannot exceed isize::MAX).
        let dst = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), buf_len) };
        copy_last_message(dst)
    });
    result.unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_keep_their_code_and_kinds_map_to_posix() {
        assert_eq!(
            errno_of(&io::Error::from_raw_os_error(libc::EIO)),
            libc::EIO
        );
        assert_eq!(
            errno_of(&io::Error::from_raw_os_error(libc::ENOENT)),
            libc::ENOENT
        );
        let kind = |k| errno_of(&io::Error::new(k, "x"));
        assert_eq!(kind(io::ErrorKind::InvalidInput), libc::EINVAL);
        assert_eq!(kind(io::ErrorKind::IsADirectory), libc::EISDIR);
        assert_eq!(kind(io::ErrorKind::OutOfMemory), libc::ENOMEM);
        assert_eq!(kind(io::ErrorKind::Other), libc::EIO);
    }

    #[test]
    fn boundary_returns_values_errnos_and_catches_panics() {
        assert_eq!(boundary("t", || Ok(5i64)), 5);
        assert_eq!(
            boundary::<i32>("t", || Err(Failure::new(libc::EBADF, "t: bad"))),
            -libc::EBADF
        );
        let mut buf = [0u8; 64];
        let n = copy_last_message(&mut buf);
        assert_eq!(&buf[..n], b"t: bad");
        assert_eq!(buf[n], 0);
        let r: i64 = boundary("t", || panic!("boom"));
        assert_eq!(r, -i64::from(libc::ENOTRECOVERABLE));
        let n = copy_last_message(&mut buf);
        assert!(std::str::from_utf8(&buf[..n]).unwrap().contains("boom"));
        // Truncation keeps the NUL and reports the full length.
        let mut small = [0xffu8; 4];
        assert_eq!(copy_last_message(&mut small), n);
        assert_eq!(small, [b't', b':', b' ', 0]);
        assert_eq!(copy_last_message(&mut []), n);
    }
}
