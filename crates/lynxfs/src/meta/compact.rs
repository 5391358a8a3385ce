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
//! **When.** Every [`CHECK_EVERY`] removals a lane makes in a directory (counted beside
//! its entry count, `meta::gate`), the removal that reaches it checks the log after it
//! has let go of the directory: compaction runs when the dead slots (slots below the
//! tail minus live entries) are at least a page's worth, DirectFS's 4 KB of invalid
//! entries, and at least as many as the live entries. The absolute threshold keeps a
//! small directory from ever being rewritten; the relative one makes the walk (it reads
//! every slot) cost at most twice the removals that paid for it, so unlink stays O(1)
//! amortized. It takes the gate alone and the load lock without waiting, as eviction
//! does: if the directory is busy, a later check does it.

use crate::format::{dirlog, BLOCK};
use crate::pmem::Backend;
use crate::runtime::lock;

use super::cachelet::{LOADED, REMOVED};
use super::{Dir, Namespace};

/// Removals a lane makes in one directory between two checks: a page's worth of slots.
pub const CHECK_EVERY: u32 = dirlog::SLOTS_PER_PAGE as u32;

impl<B: Backend> Namespace<B> {
    /// A removal from `ino` found a check due (`Dir::remove_entry`); the caller no
    /// longer holds the directory's gate.
    pub(crate) fn compact_if_due(&self, ino: u64) {
        self.compact(ino, false);
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
        if !force && !worth_it(&d, &self.pool) {
            return 0;
        }
        d.drop_empty_pages(&self.pool, &self.free_slots)
    }
}

/// Dead slots at least a page's worth and at least the live entries (exact: the gate
/// is held alone). Counting the slots walks only the chain's links.
fn worth_it<B: Backend>(d: &Dir<'_>, pool: &crate::pool::Pool<B>) -> bool {
    let pages = d.pages(pool).len() as u64;
    let tail = d
        .cachelet()
        .tail()
        .load(std::sync::atomic::Ordering::Acquire);
    let slots = pages.saturating_sub(1) * dirlog::SLOTS_PER_PAGE + (tail & (BLOCK - 1));
    let dead = slots.saturating_sub(d.entries());
    dead >= dirlog::SLOTS_PER_PAGE.max(d.entries())
}
