//! Switches that take a mechanism away, for the `ablation` benchmark: each paper's claim
//! can then be checked on LynxFS itself. All are on (the normal engine) by default,
//! except ADAM's evolution (a background thread in every process using the pool, for a
//! cache that is already one probe deep: docs/ARCHITECTURE.md, "Full-path areas").

use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug)]
pub struct Mechanisms {
    /// DirectFS's inode quick path: the index entry carries the inode number, so a
    /// lookup never reads the dentry. Off: every lookup reads it from the pool.
    quick_path: AtomicBool,
    /// Lock-free creation: creates, links, unlinks and renames in one directory run
    /// concurrently. Off: they serialize on a per-directory lock.
    lock_free: AtomicBool,
    /// Reuse of dead directory-log slots (this engine's garbage collection of log
    /// space). Off: every create takes a new slot and logs only grow.
    slot_reuse: AtomicBool,
    /// ADAM's full-path areas: a path below an area root resolves in one probe.
    /// Off: every path is walked component by component through the (parent, name) index.
    areas: AtomicBool,
    /// ADAM's evolution: a background thread splits hot directories into areas, merges
    /// cold areas back and passes a root on to a strong subdirectory. Off: areas keep the
    /// shape they were given.
    evolution: AtomicBool,
}

impl Default for Mechanisms {
    fn default() -> Self {
        Mechanisms {
            quick_path: AtomicBool::new(true),
            lock_free: AtomicBool::new(true),
            slot_reuse: AtomicBool::new(true),
            areas: AtomicBool::new(from_env("LYNXFS_AREAS", true)),
            evolution: AtomicBool::new(from_env("LYNXFS_EVOLUTION", false)),
        }
    }
}

/// A switch's default, unless the environment sets it ("0" off, anything else on): the
/// paper's experiments through front ends that make their own `Fs` (preload, C API).
fn from_env(var: &str, default: bool) -> bool {
    std::env::var_os(var).map_or(default, |v| v != "0")
}

impl Mechanisms {
    pub fn quick_path(&self) -> bool {
        self.quick_path.load(Ordering::Relaxed)
    }
    pub fn lock_free(&self) -> bool {
        self.lock_free.load(Ordering::Relaxed)
    }
    pub fn slot_reuse(&self) -> bool {
        self.slot_reuse.load(Ordering::Relaxed)
    }
    pub fn areas(&self) -> bool {
        self.areas.load(Ordering::Relaxed)
    }
    pub fn evolution(&self) -> bool {
        self.evolution.load(Ordering::Relaxed)
    }
    pub fn set_quick_path(&self, on: bool) {
        self.quick_path.store(on, Ordering::Relaxed)
    }
    pub fn set_lock_free(&self, on: bool) {
        self.lock_free.store(on, Ordering::Relaxed)
    }
    pub fn set_slot_reuse(&self, on: bool) {
        self.slot_reuse.store(on, Ordering::Relaxed)
    }
    pub fn set_areas(&self, on: bool) {
        self.areas.store(on, Ordering::Relaxed)
    }
    pub fn set_evolution(&self, on: bool) {
        self.evolution.store(on, Ordering::Relaxed)
    }
}
