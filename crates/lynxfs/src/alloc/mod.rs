//! Allocators: per-lane free lists of data blocks, inodes and dentries (AEON), kept in
//! DRAM only. They are rebuilt at mount from the bitmaps a clean close saved, or from
//! the recovery walk after a crash; allocation itself never writes to the pool.

mod blocks;
mod ids;
pub mod lane;

pub use blocks::{BlockAlloc, Run};
pub use ids::{bit, IdPool};

use crate::format::Layout;

pub struct Allocators {
    pub blocks: BlockAlloc,
    pub inodes: IdPool,
    pub dentries: IdPool,
}

/// Which ids and blocks are in use, one bit each.
pub struct UsedSets {
    pub blocks: Vec<u64>,
    pub inodes: Vec<u64>,
    pub dentries: Vec<u64>,
}

impl UsedSets {
    /// Nothing in use except the never-allocated inode 0 and dentry 0.
    pub fn empty(l: &Layout) -> UsedSets {
        let mut s = UsedSets {
            blocks: vec![0; l.data_blocks.div_ceil(64) as usize],
            inodes: vec![0; l.total_inodes().div_ceil(64) as usize],
            dentries: vec![0; l.total_dentries().div_ceil(64) as usize],
        };
        s.inodes[0] |= 1 | 1 << crate::format::ROOT_INO;
        s.dentries[0] |= 1;
        s
    }
    pub fn mark(bits: &mut [u64], i: u64) -> bool {
        let w = &mut bits[(i / 64) as usize];
        let was = *w & (1 << (i % 64)) != 0;
        *w |= 1 << (i % 64);
        was
    }
}

impl Allocators {
    pub fn from_used(l: &Layout, used: &UsedSets) -> Allocators {
        let lanes = l.lanes();
        Allocators {
            blocks: BlockAlloc::new((0..lanes).map(|x| l.lane_blocks(x)).collect(), |b| {
                bit(&used.blocks, b)
            }),
            inodes: IdPool::new(
                lanes,
                l.geo.inodes_per_lane,
                |x| l.lane_inodes(x),
                |i| bit(&used.inodes, i),
            ),
            dentries: IdPool::new(
                lanes,
                l.geo.dentries_per_lane,
                |x| l.lane_dentries(x),
                |d| bit(&used.dentries, d),
            ),
        }
    }

    pub fn used_sets(&self) -> UsedSets {
        UsedSets {
            blocks: self.blocks.used_bitmap(),
            inodes: self.inodes.used_bitmap(),
            dentries: self.dentries.used_bitmap(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Geometry;
    use std::collections::HashSet;
    use std::sync::Arc;

    fn layout() -> Layout {
        Layout::compute(Geometry::for_size(16 << 20, 2, None)).unwrap()
    }

    #[test]
    fn blocks_exhaust_then_come_back() {
        let l = layout();
        let a = Allocators::from_used(&l, &UsedSets::empty(&l));
        let total = a.blocks.free_count();
        assert_eq!(total, l.data_blocks);
        let runs = a.blocks.alloc(0, total).expect("all blocks");
        assert_eq!(runs.iter().map(|r| r.1).sum::<u64>(), total);
        assert!(a.blocks.alloc(1, 1).is_none(), "pool should be full");
        for (s, n) in runs {
            a.blocks.free(s, n);
        }
        assert_eq!(a.blocks.free_count(), total);
        assert_eq!(
            a.blocks.alloc(1, total).map(|r| r.len()),
            Some(2),
            "one run per lane after merging"
        );
    }

    #[test]
    fn ids_exhaust_then_come_back() {
        let l = layout();
        let a = Allocators::from_used(&l, &UsedSets::empty(&l));
        let n = a.inodes.free_count();
        let got: Vec<u64> = (0..n).map(|_| a.inodes.alloc(0).unwrap()).collect();
        assert!(a.inodes.alloc(1).is_none());
        assert!(!got.contains(&0));
        got.iter().for_each(|&i| a.inodes.free(i));
        assert_eq!(a.inodes.free_count(), n);
    }

    #[test]
    fn two_lanes_never_share_a_block_or_inode() {
        let l = layout();
        let a = Arc::new(Allocators::from_used(&l, &UsedSets::empty(&l)));
        let handles: Vec<_> = (0..2u32)
            .map(|lane| {
                let a = a.clone();
                std::thread::spawn(move || {
                    let mut blocks = Vec::new();
                    let mut inodes = Vec::new();
                    // Both threads start in the same lane half the time, so stealing
                    // across lanes is exercised too.
                    while let Some(r) = a.blocks.alloc(lane % 2, 3) {
                        blocks.extend(r.iter().flat_map(|&(s, n)| s..s + n));
                        if let Some(i) = a.inodes.alloc(0) {
                            inodes.push(i);
                        }
                    }
                    (blocks, inodes)
                })
            })
            .collect();
        let mut blocks = HashSet::new();
        let mut inodes = HashSet::new();
        for h in handles {
            let (b, i) = h.join().unwrap();
            for x in b {
                assert!(blocks.insert(x), "block {x} handed out twice");
            }
            for x in i {
                assert!(inodes.insert(x), "inode {x} handed out twice");
            }
        }
        assert!(blocks.len() as u64 >= l.data_blocks - 2);
    }

    #[test]
    fn bitmaps_round_trip() {
        let l = layout();
        let a = Allocators::from_used(&l, &UsedSets::empty(&l));
        a.blocks.alloc(0, 10).unwrap();
        a.inodes.alloc(1).unwrap();
        a.dentries.alloc(0).unwrap();
        let b = Allocators::from_used(&l, &a.used_sets());
        assert_eq!(b.blocks.free_count(), a.blocks.free_count());
        assert_eq!(b.inodes.free_count(), a.inodes.free_count());
        assert_eq!(b.dentries.free_count(), a.dentries.free_count());
    }
}
