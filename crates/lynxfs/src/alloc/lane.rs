//! Lanes: the per-CPU partitions of the pool. A thread works in the lane of the CPU it
//! runs on, so threads on different CPUs take different locks.

/// The lane for the calling thread: its current CPU, folded onto `lanes`.
pub fn current(lanes: u32) -> u32 {
    // SAFETY: sched_getcpu takes no arguments and only reads the calling thread's CPU.
    let cpu = unsafe { libc::sched_getcpu() };
    if cpu < 0 {
        0
    } else {
        cpu as u32 % lanes.max(1)
    }
}
