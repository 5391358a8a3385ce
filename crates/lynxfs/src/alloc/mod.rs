//! Allocators: per-lane bitmaps of free data blocks, inodes and dentries (AEON), in
//! shared memory so every process attached to a pool allocates from the same state
//! (see [`bitmap`]). They are built at mount from the bitmaps a clean close saved, or
//! from the recovery walk after a crash; allocation itself never writes to the pool.

mod bitmap;
mod blocks;
mod ids;
pub mod lane;

pub use blocks::{BlockAlloc, Run};
pub use ids::{bit, IdPool};

use std::ops::Range;

use crate::format::Layout;
use crate::runtime::{Carve, Span};

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

/// Where each allocator lives in the allocators' span.
struct Parts {
    blocks: Range<usize>,
    inodes: Range<usize>,
    dentries: Range<usize>,
    total: usize,
}

impl Parts {
    fn of(l: &Layout) -> Parts {
        let mut c = Carve::default();
        let blocks = c.take(BlockAlloc::bytes(&lane_blocks(l)));
        let inodes = c.take(IdPool::bytes(l.lanes(), l.geo.inodes_per_lane));
        let dentries = c.take(IdPool::bytes(l.lanes(), l.geo.dentries_per_lane));
        Parts {
            blocks,
            inodes,
            dentries,
            total: c.total(),
        }
    }
}

fn lane_blocks(l: &Layout) -> Vec<Range<u64>> {
    (0..l.lanes()).map(|x| l.lane_blocks(x)).collect()
}

fn sub(span: &Span, r: &Range<usize>) -> Span {
    span.sub(r.start, r.len())
}

impl Allocators {
    /// Bytes of shared memory the allocators of a pool laid out as `l` need.
    pub fn bytes_needed(l: &Layout) -> usize {
        Parts::of(l).total
    }

    /// Lay the allocators over `span` (at least [`Self::bytes_needed`] bytes, whatever
    /// it held before), everything not in `used` free.
    pub fn build(span: Span, l: &Layout, used: &UsedSets) -> Allocators {
        let p = Parts::of(l);
        Allocators {
            blocks: BlockAlloc::build(sub(&span, &p.blocks), lane_blocks(l), |b| {
                bit(&used.blocks, b)
            }),
            inodes: IdPool::build(
                sub(&span, &p.inodes),
                l.lanes(),
                l.geo.inodes_per_lane,
                |x| l.lane_inodes(x),
                |i| bit(&used.inodes, i),
            ),
            dentries: IdPool::build(
                sub(&span, &p.dentries),
                l.lanes(),
                l.geo.dentries_per_lane,
                |x| l.lane_dentries(x),
                |d| bit(&used.dentries, d),
            ),
        }
    }

    /// Use the allocators another process built over `span` for the same layout.
    pub fn attach(span: Span, l: &Layout) -> Allocators {
        let p = Parts::of(l);
        Allocators {
            blocks: BlockAlloc::attach(sub(&span, &p.blocks), lane_blocks(l)),
            inodes: IdPool::attach(
                sub(&span, &p.inodes),
                l.lanes(),
                l.geo.inodes_per_lane,
                |x| l.lane_inodes(x),
            ),
            dentries: IdPool::attach(
                sub(&span, &p.dentries),
                l.lanes(),
                l.geo.dentries_per_lane,
                |x| l.lane_dentries(x),
            ),
        }
    }

    /// Allocators private to this process (and children it forks): [`Self::build`]
    /// over fresh anonymous shared memory. Panics if the kernel refuses the mapping
    /// (out of memory, as a failed heap allocation would).
    pub fn from_used(l: &Layout, used: &UsedSets) -> Allocators {
        let span =
            Span::anonymous(Self::bytes_needed(l)).expect("anonymous memory for the allocators");
        Self::build(span, l, used)
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

    /// Ad hoc timing (`cargo test --profile ci -p lynxfs --lib alloc::tests::timing -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn timing() {
        let l = Layout::compute(Geometry::for_size(1 << 30, 2, None)).unwrap();
        let a = Allocators::from_used(&l, &UsedSets::empty(&l));
        // Some background occupancy so searches are not trivially at word 0.
        let keep: Vec<_> = (0..1000).map(|_| a.inodes.alloc(0).unwrap()).collect();
        let keepb = a.blocks.alloc(0, 5000).unwrap();
        let n = 2_000_000u32;
        let t = std::time::Instant::now();
        for _ in 0..n {
            let i = a.inodes.alloc(0).unwrap();
            a.inodes.free(i);
        }
        let ns = |t: std::time::Instant| t.elapsed().as_nanos() as f64 / n as f64;
        println!("inode alloc+free: {:.1} ns", ns(t));
        let t = std::time::Instant::now();
        for _ in 0..n {
            let i = a.dentries.alloc(1).unwrap();
            a.dentries.free(i);
        }
        println!("dentry alloc+free: {:.1} ns", ns(t));
        for len in [1u64, 8, 100] {
            let t = std::time::Instant::now();
            for _ in 0..n {
                let r = a.blocks.alloc(0, len).unwrap();
                r.iter().for_each(|&(s, n)| a.blocks.free(s, n));
            }
            println!("blocks alloc({len})+free: {:.1} ns", ns(t));
        }
        let m = a.inodes.free_count();
        let t = std::time::Instant::now();
        for _ in 0..m {
            a.inodes.alloc(0).unwrap();
        }
        let per = t.elapsed().as_nanos() as f64 / m as f64;
        println!("inode alloc only, {m} until full (both lanes): {per:.1} ns");
        let t = std::time::Instant::now();
        assert!(a.inodes.alloc(0).is_none());
        println!("inode alloc when full: {} ns", t.elapsed().as_nanos());
        assert!(keep.len() == 1000 && !keepb.is_empty());
    }
}
