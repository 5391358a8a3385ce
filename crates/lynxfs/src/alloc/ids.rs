//! Inode and dentry ids (AEON): one bitmap per lane in shared memory (see
//! [`super::bitmap`]), so allocation takes no lock and two processes never hand out
//! the same id; a lane that runs dry takes from the others. Within a lane the lowest
//! free ids go first (mostly: the hint is only a hint), keeping the tables dense. In a
//! pool over several NUMA nodes a lane runs dry into its own node's lanes first.

use std::ops::Range;

use super::bitmap::LaneBits;
use crate::runtime::Span;

pub struct IdPool {
    bits: LaneBits,
    /// NUMA nodes the lanes are spread over (a divisor of their count).
    nodes: u32,
    /// Free ids per lane only root may take (the reserve; 0: none). Per lane, so the
    /// check reads only the lane's own count: racing takers may dip below it by one
    /// id each, as ext4's per-CPU counters let its reserve be dipped into.
    lane_floor: u64,
}

impl IdPool {
    /// Span bytes for `lanes` lanes of `per_lane` ids.
    pub(super) fn bytes(lanes: u32, per_lane: u64) -> usize {
        LaneBits::bytes(
            &Self::owned(lanes, |l| l as u64 * per_lane..(l as u64 + 1) * per_lane),
            per_lane,
        )
    }

    fn owned(lanes: u32, ranges: impl Fn(u32) -> Range<u64>) -> Vec<Range<u64>> {
        (0..lanes).map(ranges).collect()
    }

    /// Lay out a pool over `span`: ids `[lane * per_lane, (lane+1) * per_lane)` per
    /// lane, spread over `nodes` nodes, those in `ranges(lane)` for which `used` is
    /// false free.
    pub(super) fn build(
        span: Span,
        (lanes, nodes): (u32, u32),
        per_lane: u64,
        ranges: impl Fn(u32) -> Range<u64>,
        used: impl Fn(u64) -> bool,
    ) -> IdPool {
        let owned = Self::owned(lanes, ranges);
        IdPool {
            bits: LaneBits::build(span, owned, per_lane, used),
            nodes,
            lane_floor: 0,
        }
    }

    /// Use a pool another process built over `span` with the same arguments.
    pub(super) fn attach(
        span: Span,
        (lanes, nodes): (u32, u32),
        per_lane: u64,
        ranges: impl Fn(u32) -> Range<u64>,
    ) -> IdPool {
        let owned = Self::owned(lanes, ranges);
        IdPool {
            bits: LaneBits::attach(span, owned, per_lane),
            nodes,
            lane_floor: 0,
        }
    }

    pub(super) fn set_lane_floor(&mut self, floor: u64) {
        self.lane_floor = floor;
    }

    /// Ids held back for root, in all.
    pub fn reserved(&self) -> u64 {
        self.lane_floor * self.bits.lanes() as u64
    }

    /// An id, preferably from `lane`, else from another lane of its node, else from
    /// another node's; `None` when every lane is empty (or down to the reserve, for a
    /// caller that may not use it).
    pub fn alloc(&self, lane: u32) -> Option<u64> {
        let n = self.bits.lanes() as u32;
        let floor = super::reserve::floor(self.lane_floor) as i64;
        // The common case first: the caller's own lane (the order's first), without
        // the order's divisions.
        let own = (lane % n.max(1)) as usize;
        if self.bits.lane_free(own) > floor {
            if let Some(id) = self.bits.take_one(own) {
                return Some(id);
            }
        }
        let order = || super::lane::order(lane, n, self.nodes);
        // First the lanes whose counts say they have ids; then, in case a count is off
        // (a process died mid-update), every lane, but only for one who may empty them.
        order()
            .filter(|&l| self.bits.lane_free(l) > floor)
            .find_map(|l| self.bits.take_one(l))
            .or_else(|| {
                (floor == 0)
                    .then(|| order().find_map(|l| self.bits.take_one(l)))
                    .flatten()
            })
    }

    /// Take a specific id (recovery and tests); false if it is not free.
    pub fn take(&self, id: u64) -> bool {
        self.bits.take(id)
    }

    /// Give `id` back to the lane that owns it.
    pub fn free(&self, id: u64) {
        let freed = self.bits.put_one(id);
        debug_assert!(freed, "freeing id {id}, which is not in use");
    }

    pub fn free_count(&self) -> u64 {
        self.bits.free_total()
    }

    /// One bit per id, set when the id is in use (id 0 and other never-free ids count
    /// as used).
    pub fn used_bitmap(&self) -> Vec<u64> {
        self.bits.used_bitmap()
    }
}

/// Whether bit `i` of `bits` is set (bits past the end are not).
pub fn bit(bits: &[u64], i: u64) -> bool {
    bits.get((i / 64) as usize)
        .is_some_and(|w| w & (1 << (i % 64)) != 0)
}
