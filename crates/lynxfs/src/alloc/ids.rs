//! Inode and dentry reuse lists (AEON): one free list per lane, each behind its own
//! lock, so allocation never takes a global lock; a lane that runs dry takes from the
//! others.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

pub struct IdPool {
    lanes: Vec<Mutex<Vec<u64>>>,
    per_lane: u64,
    total: u64,
    free: AtomicU64,
}

impl IdPool {
    /// A pool of ids `[lane * per_lane, (lane+1) * per_lane)` per lane, holding those
    /// ids in `ranges` for which `used` is false.
    pub fn new(
        lanes: u32,
        per_lane: u64,
        ranges: impl Fn(u32) -> Range<u64>,
        used: impl Fn(u64) -> bool,
    ) -> IdPool {
        let mut free = 0;
        let lists = (0..lanes)
            .map(|l| {
                // Stacks pop from the end: push high ids first so low ones go out first.
                let v: Vec<u64> = ranges(l).rev().filter(|&id| !used(id)).collect();
                free += v.len() as u64;
                Mutex::new(v)
            })
            .collect();
        IdPool {
            lanes: lists,
            per_lane,
            total: per_lane * lanes as u64,
            free: AtomicU64::new(free),
        }
    }

    /// An id, preferably from `lane`; `None` when every lane is empty.
    pub fn alloc(&self, lane: u32) -> Option<u64> {
        let n = self.lanes.len();
        for i in 0..n {
            let l = (lane as usize + i) % n;
            if let Some(id) = self.lanes[l].lock().pop() {
                self.free.fetch_sub(1, Ordering::Relaxed);
                return Some(id);
            }
        }
        None
    }

    /// Take a specific id off its free list (recovery and tests); false if not free.
    pub fn take(&self, id: u64) -> bool {
        let mut list = self.lanes[self.lane_of(id)].lock();
        match list.iter().position(|&x| x == id) {
            Some(p) => {
                list.swap_remove(p);
                self.free.fetch_sub(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Give `id` back to the lane that owns it.
    pub fn free(&self, id: u64) {
        self.lanes[self.lane_of(id)].lock().push(id);
        self.free.fetch_add(1, Ordering::Relaxed);
    }

    fn lane_of(&self, id: u64) -> usize {
        ((id / self.per_lane) as usize).min(self.lanes.len() - 1)
    }

    pub fn free_count(&self) -> u64 {
        self.free.load(Ordering::Relaxed)
    }

    /// One bit per id, set when the id is in use (id 0 and other never-free ids count
    /// as used).
    pub fn used_bitmap(&self) -> Vec<u64> {
        let mut bits = vec![u64::MAX; self.total.div_ceil(64) as usize];
        for lane in &self.lanes {
            for &id in lane.lock().iter() {
                bits[(id / 64) as usize] &= !(1 << (id % 64));
            }
        }
        bits
    }
}

pub fn bit(bits: &[u64], i: u64) -> bool {
    bits.get((i / 64) as usize)
        .is_some_and(|w| w & (1 << (i % 64)) != 0)
}
