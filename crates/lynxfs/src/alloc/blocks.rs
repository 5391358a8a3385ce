//! Data blocks: one bitmap per lane in shared memory (see [`super::bitmap`]). A request
//! is first reserved against a global free counter, so it either gets every block it
//! asked for or fails with ENOSPC having taken none; then its runs are claimed, word by
//! word, without a lock. Freed blocks go back to the lane owning them, and since the
//! bitmap is the free map, neighbouring free runs are one run at once. In a pool over
//! several NUMA nodes a request is served from the asking lane's node when it can be.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use super::bitmap::LaneBits;
use crate::runtime::Span;

/// The span's first cache line holds the free counter, the bitmaps follow.
const HEAD: usize = 64;
/// Sweeps over every lane that may find nothing before a reserved request gives up.
/// A reservation guarantees its blocks are free somewhere, so this bounds only the
/// pathological (others freeing and taking blocks around the sweep every time).
const BARREN_SWEEPS: u32 = 8;

pub struct BlockAlloc {
    /// The head line: the number of free blocks not reserved by a request in flight.
    span: Span,
    bits: LaneBits,
    /// NUMA nodes the lanes are spread over (a divisor of their count).
    nodes: u32,
    /// Free blocks only root may take (the reserve; 0: none).
    floor: u64,
}

/// A run of data blocks `[start, start+len)`.
pub type Run = (u64, u64);

impl BlockAlloc {
    /// Span bytes for lanes owning the blocks `ranges` (consecutive, from 0).
    pub(super) fn bytes(ranges: &[Range<u64>]) -> usize {
        HEAD + LaneBits::bytes(ranges, Self::per(ranges))
    }

    fn per(ranges: &[Range<u64>]) -> u64 {
        ranges.first().map_or(1, |r| r.end - r.start)
    }

    /// Lay out the allocator over `span`, lanes owning `ranges` spread over `nodes`
    /// nodes, every block for which `used` is false free.
    pub(super) fn build(
        span: Span,
        ranges: Vec<Range<u64>>,
        nodes: u32,
        used: impl Fn(u64) -> bool,
    ) -> BlockAlloc {
        let per = Self::per(&ranges);
        let bits = LaneBits::build(span.sub(HEAD, span.bytes() - HEAD), ranges, per, used);
        let me = BlockAlloc {
            span,
            bits,
            nodes,
            floor: 0,
        };
        me.counter().store(me.bits.free_total(), Ordering::Release);
        me
    }

    /// Use an allocator another process built over `span` with the same arguments.
    pub(super) fn attach(span: Span, ranges: Vec<Range<u64>>, nodes: u32) -> BlockAlloc {
        let per = Self::per(&ranges);
        let bits = LaneBits::attach(span.sub(HEAD, span.bytes() - HEAD), ranges, per);
        BlockAlloc {
            span,
            bits,
            nodes,
            floor: 0,
        }
    }

    pub(super) fn set_floor(&mut self, floor: u64) {
        self.floor = floor;
    }

    /// Blocks held back for root.
    pub fn reserved(&self) -> u64 {
        self.floor
    }

    fn counter(&self) -> &AtomicU64 {
        &self.span.words()[0]
    }

    fn reserve(&self, n: u64) -> bool {
        let floor = super::reserve::floor(self.floor);
        self.counter()
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
                f.checked_sub(n).filter(|&left| left >= floor)
            })
            .is_ok()
    }

    /// `n` blocks, in as few runs as a first fit finds, starting in `lane` (and its
    /// node); `None` (and nothing taken) when fewer than `n` blocks are free, or
    /// taking them would cut into a reserve this thread's caller may not use.
    pub fn alloc(&self, lane: u32, n: u64) -> Option<Vec<Run>> {
        if n == 0 {
            return Some(Vec::new());
        }
        if !self.reserve(n) {
            return None;
        }
        let lanes = self.bits.lanes() as u32;
        let all = || super::lane::order(lane, lanes, self.nodes);
        let per_node = (lanes / self.nodes.clamp(1, lanes)) as usize;
        // With one node, "the own node" is the whole pool.
        let own = || all().take(per_node);
        if let Some(run) = self.whole(own, n) {
            return Some(vec![run]);
        }
        if per_node < lanes as usize {
            if let Some(runs) = self.gather_in_node(own, n) {
                return Some(runs);
            }
            if let Some(run) = self.whole(|| all().skip(per_node), n) {
                return Some(vec![run]);
            }
        }
        let runs = self.gather(all, n);
        if runs.is_none() {
            self.counter().fetch_add(n, Ordering::AcqRel);
        }
        runs
    }

    /// One block for metadata, from the top of `lane` (or of the next lane in its
    /// order that has one free; [`LaneBits::take_top`]); `None` (and nothing taken) as
    /// [`Self::alloc`].
    pub fn alloc_high(&self, lane: u32) -> Option<u64> {
        if !self.reserve(1) {
            return None;
        }
        let lanes = self.bits.lanes() as u32;
        for sweep in 0..BARREN_SWEEPS {
            for l in super::lane::order(lane, lanes, self.nodes) {
                // The counts steer only the first sweep: one may be off after a crash.
                if sweep == 0 && self.bits.lane_free(l) <= 0 {
                    continue;
                }
                if let Some(b) = self.bits.take_top(l) {
                    return Some(b);
                }
            }
        }
        self.counter().fetch_add(1, Ordering::AcqRel);
        None
    }

    /// One run of `n` reserved blocks from the first lane in `order` that has one.
    fn whole<I: Iterator<Item = usize>>(&self, order: impl Fn() -> I, n: u64) -> Option<Run> {
        order()
            .filter(|&l| self.bits.lane_free(l) >= n as i64)
            .find_map(|l| self.bits.take_run(l, n, false))
    }

    /// `n` reserved blocks in pieces from the lanes of `own` (one node's), if their
    /// counts say they have that many: the node's memory before another's whole run.
    fn gather_in_node<I: Iterator<Item = usize>>(
        &self,
        own: impl Fn() -> I,
        n: u64,
    ) -> Option<Vec<Run>> {
        let free: i64 = own().map(|l| self.bits.lane_free(l).max(0)).sum();
        if free < n as i64 {
            return None;
        }
        self.gather(own, n)
    }

    /// `n` reserved blocks in pieces, first fit, lane by lane in `order`; `None` (and
    /// the pieces given back, but not the reservation) if sweep after sweep finds none.
    fn gather<I: Iterator<Item = usize>>(&self, order: impl Fn() -> I, n: u64) -> Option<Vec<Run>> {
        let mut runs = Vec::new();
        let mut need = n;
        let mut barren = 0;
        for sweep in 0.. {
            let before = need;
            for l in order() {
                // The counts steer only the first sweep: one may be off after a crash.
                if sweep == 0 && self.bits.lane_free(l) <= 0 {
                    continue;
                }
                while need > 0 {
                    let Some(run) = self.bits.take_run(l, need, true) else {
                        break;
                    };
                    need -= run.1;
                    runs.push(run);
                }
            }
            if need == 0 {
                return Some(runs);
            }
            barren = if need < before { 0 } else { barren + 1 };
            if barren == BARREN_SWEEPS {
                break;
            }
        }
        runs.iter().for_each(|&(s, len)| {
            self.bits.put(s..s + len);
        });
        None
    }

    /// Give a run back to the lane(s) that own it.
    pub fn free(&self, start: u64, len: u64) {
        let freed = self.bits.put(start..start.saturating_add(len));
        debug_assert_eq!(freed, len, "freeing blocks {start}+{len}, not all in use");
        self.counter().fetch_add(freed, Ordering::AcqRel);
    }

    pub fn free_count(&self) -> u64 {
        self.counter().load(Ordering::Acquire)
    }
    pub fn total(&self) -> u64 {
        self.bits.end()
    }

    /// One bit per block, set when in use.
    pub fn used_bitmap(&self) -> Vec<u64> {
        self.bits.used_bitmap()
    }
}
