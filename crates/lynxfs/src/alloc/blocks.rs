//! Data blocks: one free-extent map per lane (start -> length, coalesced on free).
//! A request is first reserved against a global free counter (an atomic, not a lock),
//! so it either gets every block it asked for or fails with ENOSPC having taken none.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

pub struct BlockAlloc {
    lanes: Vec<Mutex<BTreeMap<u64, u64>>>,
    ranges: Vec<Range<u64>>,
    total: u64,
    free: AtomicU64,
}

/// A run of data blocks `[start, start+len)`.
pub type Run = (u64, u64);

impl BlockAlloc {
    pub fn new(ranges: Vec<Range<u64>>, used: impl Fn(u64) -> bool) -> BlockAlloc {
        let mut free = 0;
        let total = ranges.last().map_or(0, |r| r.end);
        let lanes = ranges
            .iter()
            .map(|r| {
                let mut m = BTreeMap::new();
                let mut run: Option<(u64, u64)> = None;
                for b in r.clone() {
                    if used(b) {
                        if let Some((s, l)) = run.take() {
                            m.insert(s, l);
                        }
                        continue;
                    }
                    free += 1;
                    run = Some(match run {
                        Some((s, l)) => (s, l + 1),
                        None => (b, 1),
                    });
                }
                if let Some((s, l)) = run {
                    m.insert(s, l);
                }
                Mutex::new(m)
            })
            .collect();
        BlockAlloc {
            lanes,
            ranges,
            total,
            free: AtomicU64::new(free),
        }
    }

    fn reserve(&self, n: u64) -> bool {
        self.free
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| f.checked_sub(n))
            .is_ok()
    }

    /// `n` blocks, as few runs as the free maps allow, starting in `lane`; `None` (and
    /// nothing taken) when fewer than `n` blocks are free.
    pub fn alloc(&self, lane: u32, n: u64) -> Option<Vec<Run>> {
        if n == 0 {
            return Some(Vec::new());
        }
        if !self.reserve(n) {
            return None;
        }
        let mut runs = Vec::new();
        let mut need = n;
        let lanes = self.lanes.len();
        // The reservation guarantees the blocks exist; another thread may move them
        // between lanes while we look, so go round until satisfied.
        let mut i = 0;
        while need > 0 {
            let l = (lane as usize + i) % lanes;
            i += 1;
            let mut map = self.lanes[l].lock();
            while need > 0 {
                // First fit for the whole rest of the request, else any run.
                let pick = map
                    .iter()
                    .find(|(_, &len)| len >= need)
                    .or_else(|| map.iter().next())
                    .map(|(&s, &len)| (s, len));
                let Some((s, len)) = pick else { break };
                map.remove(&s);
                let take = len.min(need);
                if take < len {
                    map.insert(s + take, len - take);
                }
                runs.push((s, take));
                need -= take;
            }
        }
        Some(runs)
    }

    /// Give a run back to the lane(s) that own it, merging with its neighbours.
    pub fn free(&self, start: u64, len: u64) {
        let mut s = start;
        let end = start + len;
        while s < end {
            let l = self.lane_of(s);
            let lane_end = self.ranges[l].end.min(end);
            self.free_in_lane(l, s, lane_end - s);
            s = lane_end;
        }
        self.free.fetch_add(len, Ordering::AcqRel);
    }

    fn free_in_lane(&self, l: usize, start: u64, len: u64) {
        let mut map = self.lanes[l].lock();
        let (mut s, mut n) = (start, len);
        if let Some((&ps, &pl)) = map.range(..s).next_back() {
            debug_assert!(ps + pl <= s, "double free of block {s}");
            if ps + pl == s {
                map.remove(&ps);
                s = ps;
                n += pl;
            }
        }
        if let Some(&nl) = map.get(&(start + len)) {
            map.remove(&(start + len));
            n += nl;
        }
        map.insert(s, n);
    }

    fn lane_of(&self, b: u64) -> usize {
        self.ranges
            .iter()
            .position(|r| r.contains(&b))
            .unwrap_or(self.ranges.len() - 1)
    }

    pub fn free_count(&self) -> u64 {
        self.free.load(Ordering::Acquire)
    }
    pub fn total(&self) -> u64 {
        self.total
    }

    /// One bit per block, set when in use.
    pub fn used_bitmap(&self) -> Vec<u64> {
        let mut bits = vec![u64::MAX; self.total.div_ceil(64) as usize];
        for lane in &self.lanes {
            for (&s, &l) in lane.lock().iter() {
                for b in s..s + l {
                    bits[(b / 64) as usize] &= !(1 << (b % 64));
                }
            }
        }
        bits
    }
}
