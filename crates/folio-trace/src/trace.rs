//! A trace: the sequence of page accesses a replay feeds through the cache, and its CSV
//! file format.
//!
//! # The CSV format
//!
//! One access per line, two unsigned decimal integers separated by a comma:
//!
//! ```text
//! file_id,page_index
//! 0,17
//! 0,18
//! 3,4096
//! ```
//!
//! - `file_id` (0 ..= 2^32 - 1) names a file; replay creates one sparse file per distinct
//!   id. At most [`FILES_MAX`] distinct ids per trace.
//! - `page_index` (0 ..= 2^32 - 1) is the 4 KiB page of that file that is read: the access
//!   is one read of bytes `page_index * 4096 .. + 4096`.
//! - The first line may be the header `file_id,page_index`; no other line may be.
//! - Spaces around a field and a `\r` before the newline are allowed; empty lines are
//!   skipped. Anything else is an error that names the line, counted from 1.
//!
//! The pair is the identity of a page, as `(inode, index)` is in the kernel: an outside
//! simulator that wants one number per object can use `file_id * 2^32 + page_index`.
//!
//! Limits: a trace is held in memory, 8 bytes per access.

use std::collections::HashSet;
use std::fmt;
use std::io::{self, Write};

/// The header line a trace file may start with, and the one `write_csv` writes.
pub const CSV_HEADER: &str = "file_id,page_index";

/// The most distinct files a trace may name: each one is a sparse file, opened once per
/// replayed cache.
pub const FILES_MAX: usize = 1024;

/// Which file an access reads (the trace's own number, not a descriptor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId(pub u32);

/// Which 4 KiB page of its file an access reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageIndex(pub u32);

impl PageIndex {
    /// The byte offset of the page's first byte.
    pub fn offset_bytes(self) -> u64 {
        u64::from(self.0) * folio::PAGE_BYTES as u64
    }
}

/// One access: a 4 KiB read of one page of one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Access {
    pub file: FileId,
    pub page: PageIndex,
}

impl Access {
    pub fn new(file: u32, page: u32) -> Access {
        Access {
            file: FileId(file),
            page: PageIndex(page),
        }
    }
}

/// A sequence of accesses, in the order they are replayed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    accesses: Vec<Access>,
}

impl Trace {
    pub fn accesses(&self) -> &[Access] {
        &self.accesses
    }

    pub fn len(&self) -> usize {
        self.accesses.len()
    }

    pub fn is_empty(&self) -> bool {
        self.accesses.is_empty()
    }

    /// The number of distinct pages the trace touches: the misses of a cache that never
    /// evicts.
    pub fn distinct_pages(&self) -> usize {
        self.accesses.iter().collect::<HashSet<_>>().len()
    }

    /// The distinct files the trace names, each with the highest page it reads, in file
    /// order.
    pub fn files(&self) -> Vec<(FileId, PageIndex)> {
        let mut files = std::collections::BTreeMap::new();
        for a in &self.accesses {
            let max = files.entry(a.file).or_insert(a.page);
            *max = (*max).max(a.page);
        }
        files.into_iter().collect()
    }
}

impl FromIterator<Access> for Trace {
    fn from_iter<I: IntoIterator<Item = Access>>(iter: I) -> Trace {
        Trace {
            accesses: iter.into_iter().collect(),
        }
    }
}

/// Why a trace could not be read.
#[derive(Debug)]
pub enum TraceError {
    /// The file could not be read.
    Io { source: String, error: io::Error },
    /// A line is not `file_id,page_index`. `line` counts from 1.
    Parse {
        source: String,
        line: usize,
        text: String,
        reason: String,
    },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Io { source, error } => write!(f, "{source}: {error}"),
            TraceError::Parse {
                source,
                line,
                text,
                reason,
            } => write!(
                f,
                "{source}:{line}: {reason} (line is {text:?}; expected `file_id,page_index`, \
                 two unsigned integers below 2^32)"
            ),
        }
    }
}

impl std::error::Error for TraceError {}

/// Reads a trace in the CSV format of the module docs from a file.
pub fn read_csv_file(path: &std::path::Path) -> Result<Trace, TraceError> {
    let source = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| TraceError::Io {
        source: source.clone(),
        error,
    })?;
    parse_csv(&text, &source)
}

/// Parses a trace in the CSV format of the module docs. `source` names the input in
/// error messages.
pub fn parse_csv(text: &str, source: &str) -> Result<Trace, TraceError> {
    let mut accesses = Vec::new();
    let mut files = HashSet::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            continue;
        }
        let error = |reason: String| TraceError::Parse {
            source: source.to_string(),
            line,
            text: raw.to_string(),
            reason,
        };
        if line == 1 && trimmed.replace(' ', "") == CSV_HEADER {
            continue;
        }
        let mut fields = trimmed.split(',');
        let (Some(file), Some(page), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(error("not two comma-separated fields".to_string()));
        };
        let file = parse_field(file, "file_id").map_err(&error)?;
        let page = parse_field(page, "page_index").map_err(&error)?;
        if files.insert(file) && files.len() > FILES_MAX {
            return Err(error(format!(
                "more than {FILES_MAX} distinct file ids in one trace"
            )));
        }
        accesses.push(Access::new(file, page));
    }
    Ok(Trace { accesses })
}

fn parse_field(field: &str, name: &str) -> Result<u32, String> {
    let field = field.trim();
    if field.is_empty() || !field.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{name} {field:?} is not an unsigned decimal integer"
        ));
    }
    field
        .parse::<u32>()
        .map_err(|_| format!("{name} {field} is above 2^32 - 1"))
}

/// Writes accesses in the CSV format of the module docs, header first. Returns how many
/// accesses it wrote.
pub fn write_csv(
    out: &mut impl Write,
    accesses: impl IntoIterator<Item = Access>,
) -> io::Result<u64> {
    writeln!(out, "{CSV_HEADER}")?;
    let mut written = 0u64;
    for a in accesses {
        writeln!(out, "{},{}", a.file.0, a.page.0)?;
        written += 1;
    }
    out.flush()?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Trace, TraceError> {
        parse_csv(text, "t.csv")
    }

    fn parse_error(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    /// What `write_csv` writes, `parse_csv` reads back unchanged.
    #[test]
    fn round_trip() {
        let accesses = vec![
            Access::new(0, 0),
            Access::new(7, u32::MAX),
            Access::new(u32::MAX, 3),
        ];
        let mut out = Vec::new();
        assert_eq!(write_csv(&mut out, accesses.clone()).unwrap(), 3);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("file_id,page_index\n"));
        assert_eq!(parse(&text).unwrap().accesses(), &accesses[..]);
    }

    /// The header is optional; spaces, CRLF and empty lines are tolerated.
    #[test]
    fn lenient_where_harmless() {
        let t = parse("1,2\r\n\n 3 , 4 \n").unwrap();
        assert_eq!(t.accesses(), &[Access::new(1, 2), Access::new(3, 4)]);
        let t = parse("file_id, page_index\n5,6\n").unwrap();
        assert_eq!(t.accesses(), &[Access::new(5, 6)]);
        assert!(parse("").unwrap().is_empty());
    }

    /// Every malformed line is an error naming its line number.
    #[test]
    fn bad_lines_name_their_line() {
        assert!(parse_error("0,1\n0,1,2\n").starts_with("t.csv:2: not two"));
        assert!(parse_error("0,1\n\n7\n").starts_with("t.csv:3: not two"));
        assert!(parse_error("x,1\n").starts_with("t.csv:1: file_id \"x\""));
        assert!(parse_error("1,-1\n").starts_with("t.csv:1: page_index \"-1\""));
        assert!(parse_error("1,+1\n").starts_with("t.csv:1: page_index \"+1\""));
        assert!(
            parse_error("1,4294967296\n").starts_with("t.csv:1: page_index 4294967296 is above")
        );
        assert!(parse_error("0,1\nfile_id,page_index\n").starts_with("t.csv:2: file_id"));
    }

    #[test]
    fn too_many_files() {
        let text: String = (0..=FILES_MAX).map(|f| format!("{f},0\n")).collect();
        let e = parse_error(&text);
        assert!(
            e.starts_with(&format!("t.csv:{}: more than", FILES_MAX + 1)),
            "{e}"
        );
    }

    #[test]
    fn summaries() {
        let t: Trace = [(0, 5), (2, 1), (0, 9), (0, 5)]
            .into_iter()
            .map(|(f, p)| Access::new(f, p))
            .collect();
        assert_eq!(t.distinct_pages(), 3);
        assert_eq!(
            t.files(),
            vec![(FileId(0), PageIndex(9)), (FileId(2), PageIndex(1))]
        );
    }
}
