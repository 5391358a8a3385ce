//! Lanes: the per-CPU partitions of the pool. A thread works in the lane of the CPU it
//! runs on, so threads on different CPUs take different locks.

use std::cell::Cell;

thread_local! {
    /// A lane this thread was told to use instead of its CPU's (see [`pin`]).
    static PINNED: Cell<Option<u32>> = const { Cell::new(None) };
}

/// The lane for the calling thread: its current CPU (or the lane it was pinned to),
/// folded onto `lanes`.
pub fn current(lanes: u32) -> u32 {
    if let Some(l) = PINNED.with(Cell::get) {
        return l % lanes.max(1);
    }
    // SAFETY: sched_getcpu takes no arguments and only reads the calling thread's CPU.
    let cpu = unsafe { libc::sched_getcpu() };
    if cpu < 0 {
        0
    } else {
        cpu as u32 % lanes.max(1)
    }
}

/// Make the calling thread work in `lane` whatever CPU it runs on (`None`: its CPU's
/// again). The crash checker uses it to put operations on chosen lanes; any lane is
/// correct, the CPU's is only the fastest.
pub fn pin(lane: Option<u32>) {
    PINNED.with(|p| p.set(lane));
}
