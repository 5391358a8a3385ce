//! Cold directories leave the index when it passes its DRAM budget (DirectFS: FIFO
//! with a second chance). A directory enters this process's clock when it loads it;
//! the clock hand skips directories used since it last passed, and evicts the others:
//! their entries leave the (shared) index, their cachelet is marked not loaded, and the
//! next use, by any process, reloads them from the log.
//!
//! Safety against concurrent operations: everything that changes a directory's entries
//! holds its gate shared (`Namespace::enter`, `meta::gate`), and eviction holds it alone plus the
//! directory's load lock; the loaded flag is cleared (and the eviction counted) before the
//! first entry leaves, so a lookup that misses in a directory evicted meanwhile (even
//! if loaded again since) looks again.

use std::sync::atomic::Ordering;

use crate::error::errno;
use crate::error::Result;
use crate::format::{dirlog, ROOT_INO};
use crate::pmem::Backend;
use crate::runtime::lock::{self, MutexGuard, WriteGuard};

use super::cachelet::LOADED;
use super::gate;
use super::{Dir, Namespace};

/// Default budget: 4 million entries.
pub const DEFAULT_BUDGET: usize = 4 << 20;

/// A directory entered for a change: the `Dir` and its gate, held shared.
pub struct Entered<'a> {
    pub dir: Dir<'a>,
    _gate: gate::Shared<'a>,
    /// Held only when lock-free creation is switched off (ablation).
    _serial: Option<MutexGuard<'a>>,
}

impl<'a> std::ops::Deref for Entered<'a> {
    type Target = Dir<'a>;
    fn deref(&self) -> &Dir<'a> {
        &self.dir
    }
}

/// This process's eviction state: its clock of loaded directories and the budget.
#[derive(Default)]
pub struct Clock {
    queue: parking_lot::Mutex<std::collections::VecDeque<u64>>,
    budget: std::sync::atomic::AtomicUsize,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            queue: Default::default(),
            budget: DEFAULT_BUDGET.into(),
        }
    }
}

impl<B: Backend> Namespace<B> {
    /// Index entries allowed before cold directories are evicted.
    pub fn set_index_budget(&self, entries: usize) {
        self.clock.budget.store(entries, Ordering::Relaxed);
        self.evict_to_budget(ROOT_INO);
    }

    /// Evicts every directory it can from the index (as after a remount), keeping the
    /// budget: the next lookups reload directories from their logs. Benchmarks' "cold".
    pub fn drop_index(&self) {
        let budget = self.clock.budget.load(Ordering::Relaxed);
        self.set_index_budget(0);
        self.clock.budget.store(budget, Ordering::Relaxed);
    }

    /// The directory `ino`, loaded and not removed, with its gate held shared.
    pub fn enter(&self, ino: u64) -> Result<Entered<'_>> {
        self.enter_in(ino, self.lane())
    }

    /// [`Namespace::enter`] counted in `lane`, the operation's (read once per call:
    /// the CPU's lane costs a system call's worth of instructions).
    pub(crate) fn enter_in(&self, ino: u64, lane: u32) -> Result<Entered<'_>> {
        loop {
            let dir = self.dir(ino)?;
            let gate = self.gates.shared(dir.cachelet(), lane, self.watch())?;
            if dir.cachelet().flags() & LOADED == 0 {
                continue;
            }
            // Its rmdir may have come between the look above and the gate: its tail
            // and slots are of no more use (`Dir::set_removed`).
            if dir.removed() {
                return Err(errno::ENOENT);
            }
            let serial = if self.mechanisms.lock_free() {
                None
            } else {
                Some(self.locks.serial(ino, self.watch())?)
            };
            return Ok(Entered {
                dir,
                _gate: gate,
                _serial: serial,
            });
        }
    }

    /// The directory `ino`, loaded, with its gate held alone (rmdir of it, or a rename
    /// over it): no entry can be added while the guard lives.
    pub fn lock_alone(&self, ino: u64) -> Result<(Dir<'_>, WriteGuard<'_>)> {
        loop {
            let dir = self.dir(ino)?;
            let gate = self.gates.alone(dir.cachelet(), self.watch())?;
            if dir.cachelet().flags() & LOADED == 0 {
                continue;
            }
            return Ok((dir, gate));
        }
    }

    /// Called when a directory has just been loaded into the index.
    pub(crate) fn loaded(&self, ino: u64) {
        if ino != ROOT_INO {
            self.clock.queue.lock().push_back(ino);
        }
        self.evict_to_budget(ino);
    }

    /// Evict cold directories until the index fits its budget, sparing `keep` (the
    /// directory just loaded, which its caller is about to use).
    fn evict_to_budget(&self, keep: u64) {
        let budget = self.clock.budget.load(Ordering::Relaxed);
        let mut turns = self.clock.queue.lock().len() * 2;
        while self.index.len() > budget && turns > 0 {
            turns -= 1;
            let Some(ino) = self.clock.queue.lock().pop_front() else {
                return;
            };
            if ino == keep {
                self.clock.queue.lock().push_back(ino);
                continue;
            }
            if !self.evict(Dir::new(self.cachelets.get(ino), &self.gates)) {
                self.clock.queue.lock().push_back(ino);
            }
        }
    }

    /// Drop `d`'s entries from the index; the next use of the directory reloads them.
    /// False if it is in use right now (not cold after all).
    fn evict(&self, d: Dir<'_>) -> bool {
        let c = d.cachelet();
        let Some(_alone) = self.gates.try_alone(c) else {
            return false;
        };
        let Some(_load) = lock::try_lock(c.dir_lock_word()) else {
            return false;
        };
        if c.flags() & LOADED == 0 {
            return true;
        }
        c.evicted();
        for page in d.pages(&self.pool) {
            for i in 0..dirlog::SLOTS_PER_PAGE {
                if let Some((name, _)) =
                    super::dir::read_entry(&self.pool, d.ino, dirlog::slot_addr(page, i))
                {
                    self.index.evict(&self.pool.pm, d.ino, &name);
                }
            }
        }
        d.drain_slots(&self.free_slots);
        true
    }
}
