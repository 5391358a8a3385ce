//! Cold directories leave the index when it passes its DRAM budget (DirectFS: FIFO
//! with a second chance). A directory enters the clock when it is loaded; the clock
//! hand skips (and clears) directories used since it last passed, and evicts the
//! others: their entries leave the index and the next use reloads them from the log.
//!
//! Safety against concurrent operations: everything that changes a directory's entries
//! holds its gate shared (`Namespace::enter`), and eviction holds it alone; a lookup
//! that misses in a directory marked evicted looks again.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::{ArcRwLockReadGuard, ArcRwLockWriteGuard};

use crate::error::Result;
use crate::format::{dirlog, ROOT_INO};
use crate::pmem::Backend;

use super::{Dir, Namespace};

/// Default budget: 4 million entries (about 0.5 GiB of index at the measured size).
pub const DEFAULT_BUDGET: usize = 4 << 20;

/// A directory entered for a change: the `Dir` and its gate, held shared.
pub struct Entered {
    pub dir: Arc<Dir>,
    _gate: ArcRwLockReadGuard<parking_lot::RawRwLock, ()>,
    /// Held only when lock-free creation is switched off (ablation).
    _serial: Option<parking_lot::ArcMutexGuard<parking_lot::RawMutex, ()>>,
}

impl std::ops::Deref for Entered {
    type Target = Dir;
    fn deref(&self) -> &Dir {
        &self.dir
    }
}

impl<B: Backend> Namespace<B> {
    /// Index entries allowed before cold directories are evicted.
    pub fn set_index_budget(&self, entries: usize) {
        self.index_budget.store(entries, Ordering::Relaxed);
        self.evict_to_budget(ROOT_INO);
    }

    /// Evicts every directory it can from the index (as after a remount), keeping the
    /// budget: the next lookups reload directories from their logs. Benchmarks' "cold".
    pub fn drop_index(&self) {
        let budget = self.index_budget.load(Ordering::Relaxed);
        self.set_index_budget(0);
        self.index_budget.store(budget, Ordering::Relaxed);
    }

    /// The directory `ino`, loaded, with its gate held shared.
    pub fn enter(&self, ino: u64) -> Result<Entered> {
        loop {
            let dir = self.dir(ino)?;
            let gate = dir.gate.read_arc();
            if dir.evicted.load(Ordering::SeqCst) {
                continue;
            }
            let serial = (!self.mechanisms.lock_free()).then(|| dir.serial.lock_arc());
            return Ok(Entered {
                dir,
                _gate: gate,
                _serial: serial,
            });
        }
    }

    /// The directory `ino`, loaded, with its gate held alone (rmdir of it, or a rename
    /// over it): no entry can be added while the guard lives.
    pub fn lock_alone(
        &self,
        ino: u64,
    ) -> Result<(Arc<Dir>, ArcRwLockWriteGuard<parking_lot::RawRwLock, ()>)> {
        loop {
            let dir = self.dir(ino)?;
            let gate = dir.gate.write_arc();
            if dir.evicted.load(Ordering::SeqCst) {
                continue;
            }
            return Ok((dir, gate));
        }
    }

    /// Called when a directory has just been loaded into the index.
    pub(crate) fn loaded(&self, ino: u64) {
        if ino != ROOT_INO {
            self.clock.lock().push_back(ino);
        }
        self.evict_to_budget(ino);
    }

    /// Evict cold directories until the index fits its budget, sparing `keep` (the
    /// directory just loaded, which its caller is about to use).
    fn evict_to_budget(&self, keep: u64) {
        let budget = self.index_budget.load(Ordering::Relaxed);
        let mut turns = self.clock.lock().len() * 2;
        while self.index.len() > budget && turns > 0 {
            turns -= 1;
            let Some(ino) = self.clock.lock().pop_front() else {
                return;
            };
            let Some(d) = self.dirs.pin().get(&ino).cloned() else {
                continue;
            };
            if ino == keep || d.referenced.swap(false, Ordering::Relaxed) {
                self.clock.lock().push_back(ino);
                continue;
            }
            self.evict(&d);
        }
    }

    /// Drop `d`'s entries from the index; the next use of the directory reloads them.
    fn evict(&self, d: &Arc<Dir>) {
        let Some(_alone) = d.gate.try_write() else {
            // In use right now: not cold after all.
            self.clock.lock().push_back(d.ino);
            return;
        };
        d.evicted.store(true, Ordering::SeqCst);
        for page in d.pages() {
            for i in 0..dirlog::SLOTS_PER_PAGE {
                if let Some((name, _)) =
                    super::dir::read_entry(&self.pool, d.ino, dirlog::slot_addr(page, i))
                {
                    self.index.evict(&self.pool.pm, d.ino, &name);
                }
            }
        }
        let dirs = self.dirs.pin();
        dirs.remove_if(&d.ino, |_, v| Arc::ptr_eq(v, d)).ok();
    }
}
