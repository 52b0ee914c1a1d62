//! What the loom models of the shared structures (issue 45, docs/sharing.md) have in
//! common: the library's `shared/` rooms compiled against loom's atomics (this module
//! supplies the `primitive` module they name their atomics through, and the futex they
//! park on), a model process's `Run` (`ModelRun`: a death is a step), the file table's
//! views, and the check that a broken variant is caught. Each model file (`loom_shared.rs`,
//! `loom_role.rs`) declares `mod loom_rooms;` and glob-imports it at its root.

// Each model file uses a part of what is here.
#![allow(dead_code)]

pub(crate) use loom::sync::atomic::AtomicU64;
pub(crate) use loom::sync::Arc;
pub(crate) use slot::SlotTable;
pub(crate) use std::cell::Cell;
#[allow(unused_imports)]
pub(crate) use terms::{Died, Flaw, Holder, Park, ProcessId, Run, SlotIndex, Step, Word};

pub(crate) const SLOTS: u16 = 3;

pub(crate) mod primitive {
    pub(crate) use loom::sync::atomic::{fence, AtomicU64, Ordering};
}

/// The kernel's futex as the models see it (the library's `shared/futex.rs` makes the
/// system calls): `wait` compares the word's low half and goes to sleep atomically with
/// respect to `wake` (one mutex, as the kernel's queue lock), and sleeps until a `wake` of
/// *that* word. No timeout and no spurious wake-up: a sleeper whose every fellow process
/// is asleep too or done will never be woken, and the model fails there on an assertion
/// ("a lost wake-up"), not rescued by a timeout. (A sleeper yields to loom while it waits:
/// a thread blocked for ever is a deadlock loom reports by a panic that cannot unwind, so
/// the models could not check that a broken variant fails.)
pub(crate) mod futex {
    use loom::sync::atomic::{AtomicU64, Ordering};
    use loom::sync::Mutex;
    use std::time::Duration;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum Parked {
        Changed,
        Woken,
        #[allow(dead_code)]
        TimedOut,
    }

    #[derive(Default)]
    struct Kernel {
        /// Per word (its address): how many wakes it had.
        wakes: Vec<(usize, u64)>,
        /// The model's threads (`threads`), those asleep, those done (`done`).
        threads: usize,
        asleep: usize,
        done: usize,
    }

    loom::lazy_static! {
        static ref KERNEL: Mutex<Kernel> = Mutex::new(Kernel::default());
    }

    /// A model that parks starts with this: it runs `n` threads, each calling `done` at
    /// its end.
    pub(crate) fn threads(n: usize) {
        KERNEL.lock().unwrap().threads = n;
    }

    /// This thread will wake nobody any more.
    pub(crate) fn done() {
        KERNEL.lock().unwrap().done += 1;
    }

    fn address(word: &AtomicU64) -> usize {
        std::ptr::from_ref(word) as usize
    }

    fn wakes_of(kernel: &Kernel, at: usize) -> u64 {
        kernel
            .wakes
            .iter()
            .find(|(a, _)| *a == at)
            .map_or(0, |(_, n)| *n)
    }

    pub(crate) fn wait(word: &AtomicU64, expected: u32, timeout: Option<Duration>) -> Parked {
        assert!(timeout.is_none(), "a model parks with no timeout");
        let at = address(word);
        let mut kernel = KERNEL.lock().unwrap();
        if word.load(Ordering::Acquire) as u32 != expected {
            return Parked::Changed;
        }
        let seen = wakes_of(&kernel, at);
        kernel.asleep += 1;
        drop(kernel);
        loop {
            let mut kernel = KERNEL.lock().unwrap();
            if wakes_of(&kernel, at) != seen {
                kernel.asleep -= 1;
                return Parked::Woken;
            }
            assert!(
                kernel.asleep + kernel.done < kernel.threads,
                "a lost wake-up: asleep, and every other thread asleep or done \
                 ({} threads, {} asleep, {} done; at {at:#x} after {seen} wakes: {:?})",
                kernel.threads,
                kernel.asleep,
                kernel.done,
                kernel.wakes
            );
            drop(kernel);
            loom::thread::yield_now();
        }
    }

    pub(crate) fn wake(word: &AtomicU64) {
        let at = address(word);
        let mut kernel = KERNEL.lock().unwrap();
        match kernel.wakes.iter_mut().find(|(a, _)| *a == at) {
            Some((_, n)) => *n += 1,
            None => kernel.wakes.push((at, 1)),
        }
    }
}

// The library's `shared/` rooms, which the test crate's root glob-imports: their
// `super::` is this module, which names what `shared/mod.rs` re-exports, and their
// `crate::primitive` the root's import of `primitive` below.
#[allow(dead_code)]
#[path = "../../src/shared/buddy.rs"]
pub(crate) mod buddy;
#[allow(dead_code)]
#[path = "../../src/shared/files.rs"]
pub(crate) mod files;
#[allow(dead_code)]
#[path = "../../src/shared/index.rs"]
pub(crate) mod index;
#[allow(dead_code)]
#[path = "../../src/shared/lock.rs"]
pub(crate) mod lock;
#[allow(dead_code)]
#[path = "../../src/shared/magazine.rs"]
pub(crate) mod magazine;
#[allow(dead_code)]
#[path = "../../src/shared/queue.rs"]
pub(crate) mod queue;
#[allow(dead_code)]
#[path = "../../src/shared/record.rs"]
pub(crate) mod record;
#[allow(dead_code)]
#[path = "../../src/shared/slot.rs"]
pub(crate) mod slot;
#[allow(dead_code)]
#[path = "../../src/shared/stack.rs"]
pub(crate) mod stack;
#[allow(dead_code)]
#[path = "../../src/shared/terms.rs"]
pub(crate) mod terms;

/// The domain's limits (`shared/domain.rs`, which maps files and is not modelled here),
/// which the rooms above assert their packed words against. A copy: the library's build
/// checks the same assertions against domain.rs's own values.
pub(crate) mod domain {
    pub(crate) const FRAMES_MAX: u32 = 1 << 28;
    pub(crate) const SLOTS_MAX: u16 = 1024;
}

/// A process in the model: dies at its `die_at`-th step, if any; waits by yielding, and
/// parks (with no timeout) if `park` says so.
pub(crate) struct ModelRun {
    pub(crate) die_at: Option<u32>,
    pub(crate) count: Cell<u32>,
    pub(crate) flaw: Flaw,
    pub(crate) park: Option<Park>,
}

/// A model's park: at the first wait, for ever (the model's futex wakes it, or fails
/// the model on a lost wake-up).
pub(crate) const PARK_AT_ONCE: Park = Park {
    after_waits: 0,
    timeout: None,
};

impl ModelRun {
    pub(crate) fn dying_at(step: u32, flaw: Flaw) -> ModelRun {
        ModelRun {
            die_at: Some(step),
            count: Cell::new(0),
            flaw,
            park: None,
        }
    }

    pub(crate) fn living(flaw: Flaw) -> ModelRun {
        ModelRun {
            die_at: None,
            count: Cell::new(0),
            flaw,
            park: None,
        }
    }

    pub(crate) fn parking(self) -> ModelRun {
        ModelRun {
            park: Some(PARK_AT_ONCE),
            ..self
        }
    }
}

/// How many take-overs the models made (std's atomic: outside loom's model, a tally of
/// every execution it explored), so that a model can show that it covered one.
pub(crate) static TAKE_OVERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Run for ModelRun {
    fn at(&self, step: Step) -> Result<(), Died> {
        if step == Step::TookOver {
            TAKE_OVERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let n = self.count.get();
        self.count.set(n + 1);
        if Some(n) == self.die_at {
            return Err(Died);
        }
        Ok(())
    }

    fn wait(&self, _holder: Holder) {
        loom::thread::yield_now();
    }

    fn park(&self) -> Option<Park> {
        self.park
    }

    fn flaw(&self) -> Flaw {
        self.flaw
    }
}

// The shared file table (files.rs): two records, `SLOTS` slots.

pub(crate) const FILES: Word = Word(8);
pub(crate) const FILES_CAPACITY: u32 = 2;
pub(crate) fn files_views(region: &[AtomicU64]) -> (SlotTable<'_>, files::FileTable<'_>) {
    (
        SlotTable::new(region, Word(0), SLOTS),
        files::FileTable::new(region, FILES, FILES_CAPACITY, SLOTS),
    )
}

pub(crate) const K: files::FileKey = files::FileKey {
    dev: 3,
    ino: 77,
    born_ns: 5,
};

pub(crate) fn file_id(opened: files::Opened) -> files::FileId {
    match opened {
        files::Opened::Open { id, .. } => id,
        other => panic!("an open refused: {other:?}"),
    }
}

/// Runs `model` (a model run broken as `broken` says: a `Flaw`, or a model's own broken
/// order), which must fail with `expected`.
pub(crate) fn expect_caught(
    broken: impl std::fmt::Debug,
    model: impl FnOnce() + std::panic::UnwindSafe,
    expected: &str,
) {
    let caught = std::panic::catch_unwind(model);
    let payload = caught.expect_err(&format!("{broken:?}: no model failed"));
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    eprintln!("{broken:?}: caught: {message}");
    assert!(
        message.contains(expected),
        "failed, but not as expected ({expected}): {message}"
    );
}
