//! The areas' epoch: one word in the shared runtime region that every process's
//! full-path areas (`meta::areas`) are validated against.
//!
//! A change that could make a remembered path lead elsewhere or be searched by other
//! callers (a directory renamed, replaced or removed; a directory's mode, owner, ACL or
//! flags changed) counts itself in the word's low bits while it runs ([`Changing`]) and
//! moves the epoch on in its high bits when it ends. An area answers only when no such
//! change runs and the epoch is the one its entries were learnt in; an entry learnt
//! while one ran, or across an epoch, is never kept. A process killed inside a change
//! leaves the count up, so areas answer nothing until the repair of the runtime state
//! ([`AreaEpoch::repaired`]) clears it and moves the epoch on.

use std::sync::atomic::{fence, Ordering};

use crate::runtime::Span;

/// The low bits count the changes running.
const RUNNING: u64 = (1 << 16) - 1;
/// One epoch.
const EPOCH: u64 = 1 << 16;

/// The bytes the word takes in the region (a cache line of its own).
pub const BYTES: usize = 64;

pub struct AreaEpoch {
    span: Span,
}

impl AreaEpoch {
    pub fn new(span: Span) -> AreaEpoch {
        assert!(span.bytes() >= 8);
        AreaEpoch { span }
    }

    fn word(&self) -> &std::sync::atomic::AtomicU64 {
        &self.span.words()[0]
    }

    /// The word now, if areas may answer (no change is running): what their entries
    /// are tagged with.
    #[inline]
    pub fn current(&self) -> Option<u64> {
        let w = self.word().load(Ordering::Acquire);
        (w & RUNNING == 0).then_some(w)
    }

    /// The word is still `w`: nothing read since `w` was taken can have changed
    /// under a change counted here.
    pub fn still(&self, w: u64) -> bool {
        // The reads of the pool made since `w` come before this load.
        fence(Ordering::SeqCst);
        self.word().load(Ordering::SeqCst) == w
    }

    /// A change starts: areas answer nothing until it ends (the guard's drop).
    pub fn changing(&self) -> Changing<'_> {
        self.word().fetch_add(1, Ordering::SeqCst);
        Changing { epoch: self }
    }

    /// The runtime state was rebuilt (no operation runs): changes a dead process
    /// left counted are over.
    pub fn repaired(&self) {
        let w = self.word().load(Ordering::SeqCst);
        self.word().store((w & !RUNNING) + EPOCH, Ordering::SeqCst);
    }

    /// The epoch (for `lynxfs info`).
    pub fn epoch(&self) -> u64 {
        self.word().load(Ordering::Relaxed) >> 16
    }
}

/// A change to directories counted as running; its drop ends it.
pub struct Changing<'a> {
    epoch: &'a AreaEpoch,
}

impl Drop for Changing<'_> {
    fn drop(&mut self) {
        self.epoch.word().fetch_add(EPOCH - 1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_stops_answers_while_it_runs_and_moves_the_epoch() {
        let e = AreaEpoch::new(Span::anonymous(BYTES).unwrap());
        let w = e.current().unwrap();
        let c = e.changing();
        assert_eq!(e.current(), None);
        assert!(!e.still(w));
        drop(c);
        let after = e.current().unwrap();
        assert_ne!(after, w);
        assert!(e.still(after));
    }

    #[test]
    fn a_repair_ends_changes_a_dead_process_left_running() {
        let e = AreaEpoch::new(Span::anonymous(BYTES).unwrap());
        let w = e.current().unwrap();
        std::mem::forget(e.changing());
        assert_eq!(e.current(), None);
        e.repaired();
        let after = e.current().unwrap();
        assert!(after > w);
    }
}
