//! Directory log compaction (DirectFS's, issue 27): a directory that grew and shrank
//! gives back the log pages its removals emptied, so listing and loading it cost what
//! its live entries cost.
//!
//! **What moves: nothing.** Empty pages leave the chain; no entry changes slot. The
//! index, the slots in hand and every readdir offset given out stay true (a page's
//! readdir positions are kept in its header, `dirlog::BASE`), and a lock-free reader
//! walking the old chain reads what it would have read before. The price: a page with
//! one live entry stays, so survivors scattered one per page keep one page each.
//!
//! **When.** Every [`CHECK_EVERY`] removals a lane makes in a directory (counted
//! beside its entry count, `meta::gate`; more for a long log, [`DELAY_PER_PAGE`]), the
//! removal that reaches it checks the log once it has let go of the directory.
//! Compaction runs when the dead slots (the slots its pages hold minus live entries)
//! are at least a page's worth, DirectFS's 4 KB of invalid entries, and at least as
//! many as the live entries. The absolute threshold keeps a small directory from ever
//! being rewritten; the relative one keeps the walk (each page's slots up to the first
//! in use: all of an empty page's, which then goes) small beside the removals that
//! paid for it, so unlink stays O(1) amortized. It takes the gate alone and the load
//! lock without waiting, as eviction does: if the directory is busy, a later check
//! does it. A load (the first use after an attach or an eviction) reads every slot
//! anyway and makes the same check before the directory can be used, so what the
//! removals' checks missed (the pages emptied after the last one) goes then.

use crate::format::dirlog;
use crate::pmem::Backend;
use crate::runtime::lock;

use super::cachelet::{LOADED, REMOVED};
use super::{Dir, Namespace};

/// Removals a lane makes in one directory between two checks, at least: DirectFS's
/// 4 KB of invalid entries were 64 of its entries.
pub const CHECK_EVERY: u32 = 64;
/// Removals added to the interval per log page, so that a check's walk of the chain
/// (one load per page) costs a removal at most a quarter of a load.
const DELAY_PER_PAGE: u32 = 4;

impl<B: Backend> Namespace<B> {
    /// A removal from `ino` found a check due (`Dir::remove_entry`); the caller no
    /// longer holds the directory's gate.
    pub(crate) fn compact_if_due(&self, ino: u64) {
        self.compact(ino, false);
    }

    /// After a check of `d` that walked `pages` pages: the next one in this lane waits
    /// longer for a long log.
    fn space_checks(&self, d: &Dir<'_>, pages: u64) {
        let extra = (pages as u32).saturating_mul(DELAY_PER_PAGE);
        self.gates.delay_check(d.ino, self.lane(), extra);
    }

    /// Give every empty log page of directory `ino` back to the pool now, whatever
    /// the thresholds (tests, benchmarks, the crash checker). Returns the pages freed;
    /// 0 too when the directory is busy, not loaded or removed.
    pub fn compact_dir(&self, ino: u64) -> crate::Result<u64> {
        self.op(|| {
            self.dir(ino)?;
            Ok(self.compact(ino, true))
        })
    }

    fn compact(&self, ino: u64, force: bool) -> u64 {
        let c = self.cachelets.get(ino);
        let d = Dir::new(c, &self.gates);
        let Some(_alone) = self.gates.try_alone(c) else {
            return 0;
        };
        let Some(_load) = lock::try_lock(c.dir_lock_word()) else {
            return 0;
        };
        if c.flags() & (LOADED | REMOVED) != LOADED {
            return 0;
        }
        let pages = d.pages(&self.pool).len() as u64;
        if !force {
            self.space_checks(&d, pages);
            if !worth_it(&d, pages) {
                return 0;
            }
        }
        d.drop_empty_pages(&self.pool, &self.free_slots)
    }
}

/// Dead slots (the slots the log's pages hold, less live entries) at least a page's
/// worth and at least the live entries (exact: the gate is held alone, or the
/// directory is being loaded), for a log of `pages` pages.
pub(super) fn worth_it(d: &Dir<'_>, pages: u64) -> bool {
    let dead = (pages * dirlog::SLOTS_PER_PAGE).saturating_sub(d.entries());
    dead >= dirlog::SLOTS_PER_PAGE.max(d.entries())
}
