//! What a kill test's child said it did to its files (`tests/keeper_crash.rs`,
//! `tests/adoption_kill.rs`): a `w FILE OFFSET LEN SEQ` or `t FILE OLD NEW SEQ` line before
//! each write (a record, `records`) or `set_len`, an `r SEQ` line once it returned; and the
//! history of each file those lines vouch for (`durability::History`), which the parent
//! checks the disk against after the kill.

#![allow(dead_code)]

use std::collections::HashMap;

use super::durability::{History, Stored, Tail};
use super::records::record_bytes;

#[derive(Debug)]
pub enum OpKind {
    Write { offset: u64, len: usize },
    SetLen { old: u64, new: u64 },
}

/// One operation a child said it issued, and whether it said it returned.
#[derive(Debug)]
pub struct Op {
    pub file: usize,
    pub seq: u64,
    pub kind: OpKind,
    pub returned: bool,
}

/// Every operation a child said, in the order it said them.
#[derive(Debug, Default)]
pub struct OpLog {
    pub ops: Vec<Op>,
    by_seq: HashMap<u64, usize>,
}

impl OpLog {
    /// Takes `line` if it is one of the operation lines (module docs); false for any other
    /// line, which the caller reads itself. Panics on an operation line it cannot read.
    pub fn take_line(&mut self, line: &str) -> bool {
        let bad = || -> ! { panic!("a bad line from the child: {line:?}") };
        let kind = line.split(' ').next();
        if !matches!(kind, Some("w" | "t" | "r")) {
            return false;
        }
        let fields: Vec<u64> = line
            .split(' ')
            .skip(1)
            .map(|f| f.parse().unwrap_or_else(|_| bad()))
            .collect();
        let mut op = |file: u64, seq: u64, kind: OpKind| {
            self.by_seq.insert(seq, self.ops.len());
            self.ops.push(Op {
                file: file as usize,
                seq,
                kind,
                returned: false,
            });
        };
        match (kind, fields.as_slice()) {
            (Some("w"), &[file, offset, len, seq]) => op(
                file,
                seq,
                OpKind::Write {
                    offset,
                    len: len as usize,
                },
            ),
            (Some("t"), &[file, old, new, seq]) => op(file, seq, OpKind::SetLen { old, new }),
            (Some("r"), &[seq]) => {
                let &i = self.by_seq.get(&seq).unwrap_or_else(|| bad());
                self.ops[i].returned = true;
            }
            _ => bad(),
        }
        true
    }

    /// File `f`'s operations, in order.
    pub fn of_file(&self, f: usize) -> Vec<&Op> {
        self.ops.iter().filter(|op| op.file == f).collect()
    }

    /// The history of file `f` in a round: its operations over `base`, then one
    /// acknowledgement of every operation that returned. Only a file's last operation may
    /// not have returned: its thread said `r` before it went on.
    pub fn history(&self, f: usize, base: Vec<u8>) -> History {
        let mut size = base.len() as u64;
        let mut history = History::with_tail(base, Tail::Exact);
        let ops = self.of_file(f);
        let mut vouched = 0;
        for (i, op) in ops.iter().enumerate() {
            assert!(
                op.returned || i + 1 == ops.len(),
                "file {f}: operation {} did not return, yet its thread went on: {op:?}",
                op.seq
            );
            let stored = if op.returned {
                Stored::Yes
            } else {
                Stored::Maybe
            };
            match op.kind {
                OpKind::Write { offset, len } => {
                    history.write(offset, record_bytes(op.seq, len), stored);
                    if op.returned {
                        size = size.max(offset + len as u64);
                    }
                }
                OpKind::SetLen { old, new } => {
                    assert_eq!(old, size, "file {f}: set_len {} from another size", op.seq);
                    if op.returned || new > old {
                        // Up, it only makes the file longer: as much a maybe as a surely.
                        history.set_len(old, new);
                    } else {
                        history.maybe_cut(old, new);
                    }
                    if op.returned {
                        size = new;
                    }
                }
            }
            if op.returned {
                vouched = history.writes();
            }
        }
        history.ack(vouched, 0..u64::MAX, size);
        history
    }
}
