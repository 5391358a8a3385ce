//! What a live namespace holds: the pool's space and the DRAM of its index and
//! cachelets (`lynxfs info` of a mounted pool).

use crate::pmem::Backend;
use crate::pool::Pool;

use super::Namespace;

/// A snapshot of a live namespace's use of the pool and of DRAM.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// The pool's own blocks (in a hybrid pool: metadata only).
    pub blocks_total: u64,
    pub blocks_free: u64,
    /// A hybrid pool's data device blocks (its files' data); 0 in an all-PM pool.
    pub device_blocks_total: u64,
    pub device_blocks_free: u64,
    pub inodes_total: u64,
    pub inodes_free: u64,
    pub dentries_total: u64,
    pub dentries_free: u64,
    /// Directories whose entries are in the index.
    pub indexed_dirs: u64,
    /// Entries in the metadata index.
    pub index_entries: u64,
    /// DRAM the index takes, estimated by `Index::dram_bytes`.
    pub index_bytes: u64,
    /// Cachelets in use (files open or recently used).
    pub cachelets: u64,
    /// DRAM of the cachelet chunks (allocated chunks, live or not).
    pub cachelet_bytes: u64,
}

impl Usage {
    /// The pool's space alone (an open pool with no namespace: the DRAM figures are 0).
    pub fn of_pool<B: Backend>(pool: &Pool<B>) -> Usage {
        let (l, a) = (&pool.layout, &pool.alloc);
        Usage {
            blocks_total: l.data_blocks,
            blocks_free: a.blocks.free_count(),
            device_blocks_total: l.geo.device_blocks,
            device_blocks_free: a.device_blocks().map_or(0, |d| d.free_count()),
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
    /// The pool's space and the DRAM of the index and cachelets, now.
    pub fn usage(&self) -> Usage {
        Usage {
            indexed_dirs: self.cachelets.count_flagged(super::cachelet::LOADED),
            index_entries: self.index.len() as u64,
            index_bytes: self.index.dram_bytes(),
            cachelets: self.cachelets.live(),
            cachelet_bytes: self.cachelets.dram_bytes(),
            ..Usage::of_pool(&self.pool)
        }
    }
}
