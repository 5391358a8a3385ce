//! The reserve held back for root (ext4's reserved blocks, `mkfs --reserved`): when a
//! user has filled the pool, root can still log in, write and clean up. The allocators
//! learn who is asking from a per-thread mark that the API sets around the calls
//! that add to the pool (creates, links, writes, fallocate, xattrs) for a caller that
//! is not root; everything else (removals, which may need a block to record
//! themselves, recovery, root's calls) may use the reserve.

use std::cell::Cell;

thread_local! {
    /// Whether this thread's allocations now stop at the reserve.
    static BOUNDED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with allocations stopping at the reserve unless `privileged` (root).
pub fn within_reserve_of<T>(privileged: bool, f: impl FnOnce() -> T) -> T {
    /// Puts the mark back however `f` ends (a panic included).
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            BOUNDED.set(self.0);
        }
    }
    let _restore = Restore(BOUNDED.replace(!privileged || BOUNDED.get()));
    f()
}

/// `floor` if this thread's allocations stop at the reserve now, else 0.
pub(super) fn floor(floor: u64) -> u64 {
    if floor != 0 && BOUNDED.get() {
        floor
    } else {
        0
    }
}
