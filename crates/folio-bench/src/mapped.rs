//! Anonymous memory the bench reads into or copies from, 2 MiB aligned, backed by 4 KiB
//! pages or by transparent huge pages as asked: `limits`' landing areas and `scale`'s
//! memcpy source. One owner of the `mmap`, the advice, the `munmap` and the check of what
//! the kernel gave (`huge_bytes`).

use std::io;

use serde::Serialize;

/// Which pages back a mapping. A 1 MiB O_DIRECT read into 4 KiB pages is 256 segments,
/// more than a virtio disk takes in one request (`max_segments` 254 here), so it is
/// split; into a 2 MiB huge page it is one segment. fio's buffers are `malloc`ed (4 KiB
/// pages); folio's arena and the kernel's large folios are huge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pages {
    /// 4 KiB pages (`MADV_NOHUGEPAGE`): what fio reads into.
    Base,
    /// Transparent huge pages (`MADV_HUGEPAGE`, 2 MiB aligned), where the kernel gives them.
    Huge,
}

const HUGE_BYTES: usize = 2 << 20;

/// An anonymous private mapping of `len()` bytes at a 2 MiB-aligned address.
#[derive(Debug)]
pub struct Mapped {
    map_ptr: *mut libc::c_void,
    map_bytes: usize,
    base: *mut u8,
    bytes: usize,
}

impl Mapped {
    /// Maps `bytes` (not faulted in) and advises the kernel which pages to back it with.
    pub fn new(bytes: usize, pages: Pages) -> io::Result<Mapped> {
        let map_bytes = bytes + HUGE_BYTES;
        // SAFETY: an anonymous private mapping with no address hint; checked below.
        let map_ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if map_ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = (map_ptr as usize).next_multiple_of(HUGE_BYTES) as *mut u8;
        let advice = match pages {
            Pages::Base => libc::MADV_NOHUGEPAGE,
            Pages::Huge => libc::MADV_HUGEPAGE,
        };
        // SAFETY: [base, base + bytes) lies inside the mapping (HUGE_BYTES of slack). The
        // advice only changes how the kernel backs it; a refusal (THP disabled) leaves
        // 4 KiB pages, which `huge_bytes` reports.
        unsafe { libc::madvise(base.cast(), bytes, advice) };
        Ok(Mapped {
            map_ptr,
            map_bytes,
            base,
            bytes,
        })
    }

    pub fn len(&self) -> usize {
        self.bytes
    }

    /// The start of the mapping, for I/O into it (io_uring buffers).
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.base
    }

    /// The whole mapping.
    ///
    /// # Safety
    /// The caller holds no other slice of this mapping while the returned one lives, and
    /// no I/O into it is in flight.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        // SAFETY: `base..base + bytes` is inside the live mapping owned by self; the
        // caller promises the slice is the only access.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.bytes) }
    }

    /// Bytes of the mapping backed by huge pages, from `/proc/self/smaps` (0 if unknown).
    pub fn huge_bytes(&self) -> u64 {
        let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
            return 0;
        };
        let start = format!("{:x}-", self.base as usize);
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start)).skip(1);
        lines
            .find_map(|l| l.strip_prefix("AnonHugePages:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb << 10)
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; slices handed out borrow self,
        // and owners of raw pointers (`as_mut_ptr`) reap their I/O before dropping it.
        unsafe { libc::munmap(self.map_ptr, self.map_bytes) };
    }
}
