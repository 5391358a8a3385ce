//! What a live namespace holds: the pool's space and the DRAM of its index and
//! cachelets (`lynxfs info` of a mounted pool).

use crate::pmem::Backend;
use crate::pool::Pool;

use super::index::{Entry, Key};
use super::Namespace;

/// A snapshot of a live namespace's use of the pool and of DRAM.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub blocks_total: u64,
    pub blocks_free: u64,
    pub inodes_total: u64,
    pub inodes_free: u64,
    pub dentries_total: u64,
    pub dentries_free: u64,
    /// Directories whose entries are in the index.
    pub indexed_dirs: u64,
    /// Entries in the metadata index.
    pub index_entries: u64,
    /// DRAM the index takes, estimated by [`index_bytes`].
    pub index_bytes: u64,
    /// Cachelets in use (files open or recently used).
    pub cachelets: u64,
    /// DRAM of the cachelet chunks (allocated chunks, live or not).
    pub cachelet_bytes: u64,
}

/// What glibc's malloc takes for a request of `n` bytes: an 8-byte header, rounded up
/// to 16 bytes, 32 at least.
fn malloc_size(n: usize) -> u64 {
    ((n + 8).next_multiple_of(16)).max(32) as u64
}

/// The index's DRAM, estimated from how `papaya` stores it: each entry is one heap
/// allocation holding the key and value, the name is a second one, and the table has
/// one pointer and one metadata byte per slot, with at least 4/3 slots per entry
/// rounded up to a power of two (papaya's `entries_for`). The `recovery` benchmark
/// prints this estimate next to the growth of resident memory it measures.
pub fn index_bytes(entries: u64, name_bytes: impl Iterator<Item = usize>) -> u64 {
    let node = malloc_size(std::mem::size_of::<(Key, Entry)>());
    let names: u64 = name_bytes.map(malloc_size).sum();
    let slots = (entries * 8 / 6).next_power_of_two();
    entries * node + names + slots * (std::mem::size_of::<usize>() as u64 + 1)
}

impl Usage {
    /// The pool's space alone (an open pool with no namespace: the DRAM figures are 0).
    pub fn of_pool<B: Backend>(pool: &Pool<B>) -> Usage {
        let (l, a) = (&pool.layout, &pool.alloc);
        Usage {
            blocks_total: l.data_blocks,
            blocks_free: a.blocks.free_count(),
            // Inode 0 and dentry 0 are never handed out.
            inodes_total: l.total_inodes() - 1,
            inodes_free: a.inodes.free_count(),
            dentries_total: l.total_dentries() - 1,
            dentries_free: a.dentries.free_count(),
            ..Usage::default()
        }
    }
}

impl<B: Backend> Namespace<B> {
    /// The pool's space and the DRAM of the index and cachelets, now. Walks the whole
    /// index (to add up name lengths): O(entries), for tools, not for hot paths.
    pub fn usage(&self) -> Usage {
        let idx = self.index.pin();
        let entries = idx.len() as u64;
        Usage {
            indexed_dirs: self.cachelets.count_flagged(super::cachelet::LOADED),
            index_entries: entries,
            index_bytes: index_bytes(entries, idx.keys().map(|k| k.name.len())),
            cachelets: self.cachelets.live(),
            cachelet_bytes: self.cachelets.dram_bytes(),
            ..Usage::of_pool(&self.pool)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malloc_sizes_follow_glibc() {
        assert_eq!(malloc_size(1), 32);
        assert_eq!(malloc_size(24), 32);
        assert_eq!(malloc_size(25), 48);
        assert_eq!(malloc_size(56), 64);
    }

    #[test]
    fn index_estimate_grows_with_entries_and_names() {
        let small = index_bytes(1000, std::iter::repeat_n(8, 1000));
        let long = index_bytes(1000, std::iter::repeat_n(100, 1000));
        let more = index_bytes(2000, std::iter::repeat_n(8, 2000));
        assert!(long > small && more > small);
        assert_eq!(index_bytes(0, std::iter::empty()), 9);
    }
}
