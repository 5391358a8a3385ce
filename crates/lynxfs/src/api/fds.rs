//! Handle numbers. Each thread takes a block of [`BLOCK`] numbers from the shared
//! counter and hands them out one by one, so threads opening files at once do not
//! all write one counter's cache line (issue 16: creates that scale). Numbers stay
//! unique per `Fs`; they are no longer dense across threads.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Fd;

/// Handle numbers a thread takes from the shared counter at once.
const BLOCK: u64 = 64;

/// The first handle number (0-2 look like the standard streams).
const FIRST: Fd = 3;

thread_local! {
    /// This thread's block: the id of the `FdNumbers` it came from, the next number
    /// and the end of the block.
    static MINE: Cell<(u64, Fd, Fd)> = const { Cell::new((0, 0, 0)) };
}

/// The handle numbers of one `Fs`.
pub(super) struct FdNumbers {
    /// Told apart from other `Fs` values' counters by the threads' blocks.
    id: u64,
    next: AtomicU64,
}

impl FdNumbers {
    pub(super) fn new() -> FdNumbers {
        static IDS: AtomicU64 = AtomicU64::new(1);
        FdNumbers {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            next: AtomicU64::new(FIRST),
        }
    }

    /// A number no other handle of this `Fs` has had.
    pub(super) fn take(&self) -> Fd {
        MINE.with(|m| {
            let (id, next, end) = m.get();
            if id == self.id && next < end {
                m.set((id, next + 1, end));
                return next;
            }
            let start = self.next.fetch_add(BLOCK, Ordering::Relaxed);
            m.set((self.id, start + 1, start + BLOCK));
            start
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_unique_across_threads_and_counters() {
        let (a, b) = (FdNumbers::new(), FdNumbers::new());
        let mut seen: Vec<Fd> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..200).map(|_| a.take()).collect::<Vec<_>>()))
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        // Another counter's numbers on this thread do not take from `a`'s block.
        let first_b = b.take();
        seen.push(a.take());
        let n = seen.len();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), n, "a number was handed out twice");
        assert!(seen.iter().all(|&f| f >= FIRST));
        assert_eq!(first_b, FIRST);
    }
}
