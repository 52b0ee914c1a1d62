//! Where a persistent cache's segment goes and what it is called, from
//! `folio_cache_options` (`persistent`, `segment_dir`, `segment_dir_on_disk`,
//! `segment_name`, `unusable_segment`), and the domain a cache shares its reads with
//! (`domain`, its files beside the segments): each field checked, an `EINVAL` (or the
//! directory's own errno) that names it.
//!
//! Protection: none needed; the options are the caller's, copied once per call.

use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use folio_rs::{DiskDir, Unusable};

use super::*;
use crate::error::{errno_of, Failure};

/// Where a persistent cache's segment goes (`persistence_settings`).
#[derive(Debug)]
pub(super) struct SegmentPlace {
    /// None: the library's default, the user's private home (`folio::segment_home`).
    pub(super) dir: Option<PathBuf>,
    pub(super) disk: DiskDir,
}

impl SegmentPlace {
    /// A directory on the segment's file system, for its room: the home's parent when
    /// the home may not exist yet.
    pub(super) fn room_dir(&self) -> &std::path::Path {
        match &self.dir {
            Some(dir) => dir,
            None => std::path::Path::new(SEGMENT_FS_DEFAULT),
        }
    }
}

/// The file system of the default home (`folio::segment_home`, in it).
const SEGMENT_FS_DEFAULT: &str = "/dev/shm";

/// Where the segment of the persistent cache `opts` asks for goes, or None for a cache
/// that is not persistent; EINVAL for a `persistent` or `segment_dir_on_disk` other than 0
/// or 1 or an empty `segment_dir`. A `segment_dir` given is looked up here so that one
/// that is missing or not a directory fails with its name (-ENOENT, -ENOTDIR, ...); the
/// library checks the rest (its owner and mode, no symlink in its path, its file system,
/// room for the capacity).
///
/// # Safety
/// `opts.segment_dir` is NULL or points to a NUL-terminated string readable during the
/// call.
pub(super) unsafe fn persistence_settings(
    opts: &folio_cache_options,
) -> Result<Option<SegmentPlace>, Failure> {
    const CALL: &str = "folio_cache_create";
    match opts.persistent {
        0 => return Ok(None),
        1 => {}
        other => {
            return Err(Failure::new(
                libc::EINVAL,
                format!("{CALL}: persistent is {other}, not 0 or 1 (1, the default: on)"),
            ))
        }
    }
    let disk = match opts.segment_dir_on_disk {
        0 => DiskDir::Refused,
        1 => DiskDir::Allowed,
        other => {
            return Err(Failure::new(
                libc::EINVAL,
                format!("{CALL}: segment_dir_on_disk is {other}, not 0 or 1 (0: tmpfs only)"),
            ))
        }
    };
    if opts.segment_dir.is_null() {
        return Ok(Some(SegmentPlace { dir: None, disk }));
    }
    // SAFETY: non-null, and the caller guarantees a readable NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(opts.segment_dir) }.to_bytes();
    if bytes.is_empty() {
        return Err(Failure::new(
            libc::EINVAL,
            format!(
                "{CALL}: segment_dir is empty (NULL: the default, {})",
                folio_rs::segment_home().display()
            ),
        ));
    }
    let dir = PathBuf::from(OsStr::from_bytes(bytes));
    let shown = dir.display().to_string();
    match std::fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => Ok(Some(SegmentPlace {
            dir: Some(dir),
            disk,
        })),
        Ok(_) => Err(Failure::new(
            libc::ENOTDIR,
            format!("{CALL}: segment_dir {shown} is not a directory"),
        )),
        Err(e) => Err(Failure::new(
            errno_of(&e),
            format!("{CALL}: segment_dir {shown}: {e}"),
        )),
    }
}

/// What `opts` asks of a persistent cache's segment name.
#[derive(Debug)]
pub(super) struct NamingSettings {
    /// None: a name of the library's, removed with the cache.
    pub(super) name: Option<String>,
    pub(super) unusable: Unusable,
    /// Whether a kept segment's keeper stays as its steward (`kept_steward`).
    pub(super) steward: bool,
}

/// The segment name, the choice for an unusable segment and the steward's `opts` asks
/// for; EINVAL for an unknown `unusable_segment` or `kept_steward`, or a `segment_name`
/// that is empty, not UTF-8 or not one plain file name (checked here, before the library
/// looks the name up in the directory). Called for a persistent cache only: the fields
/// are ignored otherwise.
///
/// # Safety
/// `opts.segment_name` is NULL or points to a NUL-terminated string readable during the
/// call.
pub(super) unsafe fn naming_settings(
    opts: &folio_cache_options,
) -> Result<NamingSettings, Failure> {
    const CALL: &str = "folio_cache_create";
    let unusable = match opts.unusable_segment {
        FOLIO_UNUSABLE_SEGMENT_REPLACE => Unusable::Replace,
        FOLIO_UNUSABLE_SEGMENT_REFUSE => Unusable::Refuse,
        other => {
            return Err(Failure::new(
                libc::EINVAL,
                format!(
                    "{CALL}: unknown unusable_segment {other} (FOLIO_UNUSABLE_SEGMENT_REPLACE \
                     or _REFUSE)"
                ),
            ))
        }
    };
    let steward = match opts.kept_steward {
        0 => false,
        1 => true,
        other => {
            return Err(Failure::new(
                libc::EINVAL,
                format!("{CALL}: kept_steward is {other}, not 0 or 1 (1, the default: on)"),
            ))
        }
    };
    if opts.segment_name.is_null() {
        return Ok(NamingSettings {
            name: None,
            unusable,
            steward,
        });
    }
    // SAFETY: non-null, and the caller guarantees a readable NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(opts.segment_name) }.to_bytes();
    let name = match std::str::from_utf8(bytes) {
        Ok("") => {
            return Err(Failure::new(
                libc::EINVAL,
                format!("{CALL}: segment_name is empty (NULL: a name of the cache's own)"),
            ))
        }
        Ok(name) if folio_rs::check_segment_name(name).is_err() => {
            let why = folio_rs::check_segment_name(name).unwrap_err();
            return Err(Failure::new(
                libc::EINVAL,
                format!("{CALL}: segment_name: {why}"),
            ));
        }
        Ok(name) => name.to_owned(),
        Err(_) => {
            return Err(Failure::new(
                libc::EINVAL,
                format!("{CALL}: segment_name {bytes:?} is not UTF-8"),
            ))
        }
    };
    Ok(NamingSettings {
        name: Some(name),
        unusable,
        steward,
    })
}

/// The domain a cache asks for (`domain_settings`).
#[derive(Debug)]
pub(super) struct DomainSettings {
    /// Its name: one plain file name, with room for the suffixes of its files.
    pub(super) name: String,
    /// Its directory: `segment_dir` when given; None: the user's private home.
    pub(super) dir: Option<PathBuf>,
}

/// The longest domain name: its files add their version's suffix to it
/// (`.v<VERSION>.steward` the longest), and a file name has at most 255 bytes.
const DOMAIN_NAME_MAX: usize = folio_rs::DOMAIN_NAME_MAX;

/// The domain `opts` asks for, or None (`domain` NULL: a private cache); EINVAL for a
/// `domain` that is empty, not UTF-8, not one plain portable file name (segment names'
/// rules, `folio::check_segment_name`) or longer than `DOMAIN_NAME_MAX`, and a
/// `segment_dir` that is empty. A `segment_dir` given is the domain's directory whatever
/// `persistent` says; the library checks it (its owner and mode, no symlink, tmpfs).
///
/// # Safety
/// `opts.domain` and `opts.segment_dir` are each NULL or point to a NUL-terminated string
/// readable during the call.
pub(super) unsafe fn domain_settings(
    opts: &folio_cache_options,
) -> Result<Option<DomainSettings>, Failure> {
    const CALL: &str = "folio_cache_create";
    if opts.domain.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null, and the caller guarantees a readable NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(opts.domain) }.to_bytes();
    let name = match std::str::from_utf8(bytes) {
        Ok("") => {
            return Err(Failure::new(
                libc::EINVAL,
                format!("{CALL}: domain is empty (NULL: a private cache)"),
            ))
        }
        Ok(name) => name,
        Err(_) => {
            return Err(Failure::new(
                libc::EINVAL,
                format!("{CALL}: domain {bytes:?} is not UTF-8"),
            ))
        }
    };
    if let Err(why) = folio_rs::check_segment_name(name) {
        return Err(Failure::new(libc::EINVAL, format!("{CALL}: domain: {why}")));
    }
    if name.len() > DOMAIN_NAME_MAX {
        return Err(Failure::new(
            libc::EINVAL,
            format!(
                "{CALL}: domain has {} bytes, more than {DOMAIN_NAME_MAX} (its files add a suffix)",
                name.len()
            ),
        ));
    }
    let dir = if opts.segment_dir.is_null() {
        None
    } else {
        // SAFETY: non-null, and the caller guarantees a readable NUL-terminated string.
        let dir = unsafe { CStr::from_ptr(opts.segment_dir) }.to_bytes();
        if dir.is_empty() {
            return Err(Failure::new(
                libc::EINVAL,
                format!("{CALL}: segment_dir is empty (NULL: the default home, for the domain)"),
            ));
        }
        Some(PathBuf::from(OsStr::from_bytes(dir)))
    };
    let settings = DomainSettings {
        name: name.to_owned(),
        dir,
    };
    // Post: a name the library's domain files accept.
    debug_assert!(folio_rs::DomainFiles::of(&settings.name).is_ok());
    Ok(Some(settings))
}
