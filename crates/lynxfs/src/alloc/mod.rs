//! Allocators: per-lane bitmaps of free data blocks, inodes and dentries (AEON), in
//! shared memory so every process attached to a pool allocates from the same state
//! (see [`bitmap`]). They are built at mount from the bitmaps a clean close saved, or
//! from the recovery walk after a crash; allocation itself never writes to the pool.

mod bitmap;
mod blocks;
mod ids;
pub mod lane;
mod reserve;

pub use blocks::{BlockAlloc, Run};
pub use ids::{bit, IdPool};
pub use reserve::within_reserve_of;

use std::ops::Range;

use crate::format::Layout;
use crate::runtime::{Carve, Span};

pub struct Allocators {
    /// The pool's blocks, taken and given back through [`Self::meta_blocks`] (and
    /// [`Self::data_blocks`] in an all-PM pool).
    pub blocks: BlockAlloc,
    /// File data blocks ([`Self::data_blocks`]): a hybrid pool's device blocks, else
    /// a second view of `blocks` (the same shared state), so that choosing it costs
    /// no branch.
    data: BlockAlloc,
    /// `data` is the device's own allocator.
    device: bool,
    pub inodes: IdPool,
    pub dentries: IdPool,
}

/// Which ids and blocks are in use, one bit each.
pub struct UsedSets {
    pub blocks: Vec<u64>,
    pub inodes: Vec<u64>,
    pub dentries: Vec<u64>,
    /// A hybrid pool's device blocks (empty in an all-PM pool).
    pub device: Vec<u64>,
}

impl UsedSets {
    /// Nothing in use except the never-allocated inode 0 and dentry 0.
    pub fn empty(l: &Layout) -> UsedSets {
        let mut s = UsedSets {
            blocks: vec![0; l.data_blocks.div_ceil(64) as usize],
            inodes: vec![0; l.total_inodes().div_ceil(64) as usize],
            dentries: vec![0; l.total_dentries().div_ceil(64) as usize],
            device: vec![0; l.geo.device_blocks.div_ceil(64) as usize],
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

/// What one NUMA node's lanes hold (`lynxfs info`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeUsage {
    pub inodes_used: u64,
    pub inodes_total: u64,
    pub dentries_used: u64,
    pub dentries_total: u64,
    pub blocks_used: u64,
    pub blocks_total: u64,
}

/// How many of `range`'s bits are set in `bits`, and how many there are.
fn used_of(bits: &[u64], range: Range<u64>) -> (u64, u64) {
    let total = range.end - range.start;
    (range.filter(|&i| bit(bits, i)).count() as u64, total)
}

/// Where each allocator lives in the allocators' span.
struct Parts {
    blocks: Range<usize>,
    inodes: Range<usize>,
    dentries: Range<usize>,
    /// A hybrid pool's device blocks (after the rest, so an all-PM pool's parts stay).
    device: Option<Range<usize>>,
    total: usize,
}

impl Parts {
    fn of(l: &Layout) -> Parts {
        let mut c = Carve::default();
        let blocks = c.take(BlockAlloc::bytes(&lane_blocks(l)));
        let inodes = c.take(IdPool::bytes(l.lanes(), l.geo.inodes_per_lane));
        let dentries = c.take(IdPool::bytes(l.lanes(), l.geo.dentries_per_lane));
        let device = l
            .has_device_blocks()
            .then(|| c.take(BlockAlloc::bytes(&lane_device_blocks(l))));
        Parts {
            blocks,
            inodes,
            dentries,
            device,
            total: c.total(),
        }
    }
}

fn lane_blocks(l: &Layout) -> Vec<Range<u64>> {
    (0..l.lanes()).map(|x| l.lane_blocks(x)).collect()
}

fn lane_device_blocks(l: &Layout) -> Vec<Range<u64>> {
    (0..l.lanes()).map(|x| l.lane_device_blocks(x)).collect()
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
        let blocks = BlockAlloc::build(sub(&span, &p.blocks), lane_blocks(l), l.nodes(), |b| {
            bit(&used.blocks, b)
        });
        let data = match &p.device {
            Some(r) => BlockAlloc::build(sub(&span, r), lane_device_blocks(l), l.nodes(), |b| {
                bit(&used.device, b)
            }),
            None => BlockAlloc::attach(sub(&span, &p.blocks), lane_blocks(l), l.nodes()),
        };
        Allocators {
            blocks,
            data,
            device: p.device.is_some(),
            inodes: IdPool::build(
                sub(&span, &p.inodes),
                (l.lanes(), l.nodes()),
                l.geo.inodes_per_lane,
                |x| l.lane_inodes(x),
                |i| bit(&used.inodes, i),
            ),
            dentries: IdPool::build(
                sub(&span, &p.dentries),
                (l.lanes(), l.nodes()),
                l.geo.dentries_per_lane,
                |x| l.lane_dentries(x),
                |d| bit(&used.dentries, d),
            ),
        }
    }

    /// Use the allocators another process built over `span` for the same layout.
    pub fn attach(span: Span, l: &Layout) -> Allocators {
        let p = Parts::of(l);
        let data = match &p.device {
            Some(r) => BlockAlloc::attach(sub(&span, r), lane_device_blocks(l), l.nodes()),
            None => BlockAlloc::attach(sub(&span, &p.blocks), lane_blocks(l), l.nodes()),
        };
        Allocators {
            blocks: BlockAlloc::attach(sub(&span, &p.blocks), lane_blocks(l), l.nodes()),
            data,
            device: p.device.is_some(),
            inodes: IdPool::attach(
                sub(&span, &p.inodes),
                (l.lanes(), l.nodes()),
                l.geo.inodes_per_lane,
                |x| l.lane_inodes(x),
            ),
            dentries: IdPool::attach(
                sub(&span, &p.dentries),
                (l.lanes(), l.nodes()),
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

    /// What each NUMA node of a pool laid out as `l` holds now, node by node.
    pub fn node_usage(&self, l: &Layout) -> Vec<NodeUsage> {
        let used = self.used_sets();
        (0..l.nodes())
            .map(|k| {
                let (inodes_used, inodes_total) = used_of(&used.inodes, l.node_inodes(k));
                let (dentries_used, dentries_total) = used_of(&used.dentries, l.node_dentries(k));
                let (blocks_used, blocks_total) = used_of(&used.blocks, l.node_blocks(k));
                NodeUsage {
                    inodes_used,
                    inodes_total,
                    dentries_used,
                    dentries_total,
                    blocks_used,
                    blocks_total,
                }
            })
            .collect()
    }

    /// Hold `percent` of the blocks, inodes and dentries back from callers that may
    /// not use the reserve (see [`within_reserve_of`]).
    pub fn with_reserve(mut self, l: &Layout, percent: u32) -> Allocators {
        let share = |n: u64| n * percent as u64 / 100;
        self.blocks.set_floor(share(l.data_blocks));
        self.data.set_floor(share(if self.device {
            l.geo.device_blocks
        } else {
            l.data_blocks
        }));
        self.inodes.set_lane_floor(share(l.geo.inodes_per_lane));
        self.dentries.set_lane_floor(share(l.geo.dentries_per_lane));
        self
    }

    /// The allocator of file-data blocks (regular files' extents, read and written
    /// through `data::DataStore`): a hybrid pool's device blocks, numbered on their
    /// own, else the pool's (the same state as [`Self::meta_blocks`]). Callers never
    /// mix the two classes up.
    #[inline]
    pub fn data_blocks(&self) -> &BlockAlloc {
        &self.data
    }

    /// The allocator of the blocks the extents of an inode of `mode` name:
    /// [`Self::data_blocks`] for a regular file, [`Self::meta_blocks`] for a symlink's
    /// target (metadata, in the pool even in a hybrid pool).
    #[inline]
    pub fn extent_blocks(&self, mode: u32) -> &BlockAlloc {
        if mode & libc::S_IFMT == libc::S_IFLNK {
            &self.blocks
        } else {
            &self.data
        }
    }

    /// A hybrid pool's device blocks (`None`: file data is in the pool's blocks).
    pub fn device_blocks(&self) -> Option<&BlockAlloc> {
        self.device.then_some(&self.data)
    }

    /// The allocator of metadata blocks (directory-log pages, extent-tree nodes,
    /// attribute blocks): always in the pool, reached through `pmem` directly.
    #[inline]
    pub fn meta_blocks(&self) -> &BlockAlloc {
        &self.blocks
    }

    pub fn used_sets(&self) -> UsedSets {
        UsedSets {
            blocks: self.blocks.used_bitmap(),
            inodes: self.inodes.used_bitmap(),
            dentries: self.dentries.used_bitmap(),
            device: self
                .device_blocks()
                .map_or_else(Vec::new, BlockAlloc::used_bitmap),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Geometry;
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicU64, Ordering};
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

    /// Everything `a` hands out to one taker, starting in `lane`, until it is empty.
    #[derive(Default)]
    struct Drained {
        blocks: Vec<u64>,
        inodes: Vec<u64>,
        dentries: Vec<u64>,
    }

    /// Drains `a` from `lane`; after its first round waits (at most 10 s) until the
    /// other taker, counting in `meet` too, has had one, so the two really overlap.
    fn drain(a: &Allocators, lane: u32, meet: &AtomicU64) -> Drained {
        let mut got = Drained::default();
        let mut want = 1 + lane as u64 % 3;
        for round in 0.. {
            if round == 1 {
                meet.fetch_add(1, Ordering::AcqRel);
                let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while meet.load(Ordering::Acquire) < 2 && std::time::Instant::now() < end {
                    std::thread::yield_now();
                }
            }
            let mut more = false;
            if let Some(i) = a.inodes.alloc(lane) {
                got.inodes.push(i);
                more = true;
            }
            if let Some(d) = a.dentries.alloc(lane) {
                got.dentries.push(d);
                more = true;
            }
            // Varying run lengths, so runs cross words and claims collide.
            want = want % 5 + 1;
            let got_runs = match a.blocks.alloc(lane, want) {
                Some(r) => Some((r, want)),
                None => a.blocks.alloc(lane, 1).map(|r| (r, 1)),
            };
            if let Some((runs, n)) = got_runs {
                assert_eq!(runs.iter().map(|r| r.1).sum::<u64>(), n, "all or nothing");
                got.blocks.extend(runs.iter().flat_map(|&(s, n)| s..s + n));
                more = true;
            }
            if !more {
                break;
            }
        }
        got
    }

    /// `a` and `b` share nothing and together are exactly `all`.
    fn partition(what: &str, a: &[u64], b: &[u64], all: impl Iterator<Item = u64>) {
        let mut seen = HashSet::new();
        for &x in a.iter().chain(b) {
            assert!(seen.insert(x), "{what} {x} handed out twice");
        }
        let all: HashSet<u64> = all.collect();
        assert_eq!(seen.len(), all.len(), "{what}: not all handed out");
        assert!(seen == all, "{what}: handed out something not free");
        assert!(
            !a.is_empty() && !b.is_empty(),
            "{what}: one taker got nothing"
        );
    }

    fn check_drained(l: &Layout, x: &Drained, y: &Drained) {
        partition("block", &x.blocks, &y.blocks, 0..l.data_blocks);
        let inodes = (0..l.lanes()).flat_map(|x| l.lane_inodes(x));
        partition(
            "inode",
            &x.inodes,
            &y.inodes,
            inodes.filter(|&i| i != crate::format::ROOT_INO),
        );
        let dentries = (0..l.lanes()).flat_map(|x| l.lane_dentries(x));
        partition("dentry", &x.dentries, &y.dentries, dentries);
    }

    /// Big enough that two takers overlap for a while.
    fn big_layout() -> Layout {
        Layout::compute(Geometry::for_size(256 << 20, 2, None)).unwrap()
    }

    #[test]
    fn two_threads_get_everything_once() {
        let l = big_layout();
        let a = Allocators::from_used(&l, &UsedSets::empty(&l));
        // The same lane for both, so they race for the same words, then steal.
        let meet = AtomicU64::new(0);
        let (x, y) = std::thread::scope(|s| {
            let x = s.spawn(|| drain(&a, 0, &meet));
            let y = s.spawn(|| drain(&a, 2, &meet));
            (x.join().unwrap(), y.join().unwrap())
        });
        check_drained(&l, &x, &y);
        assert_eq!(
            a.blocks.free_count() + a.inodes.free_count() + a.dentries.free_count(),
            0
        );
    }

    /// One bit per id, in shared memory, so a forked child can report what it got.
    fn shared_set(n: u64) -> Span {
        Span::anonymous((n.div_ceil(64) * 8) as usize).unwrap()
    }
    fn put_set(s: &Span, ids: &[u64]) {
        for &i in ids {
            s.words()[(i / 64) as usize].fetch_or(1 << (i % 64), Ordering::Relaxed);
        }
    }
    fn get_set(s: &Span) -> Vec<u64> {
        let w: Vec<u64> = s
            .words()
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .collect();
        (0..w.len() as u64 * 64).filter(|&i| bit(&w, i)).collect()
    }

    /// Run `child` in a forked process and `parent` here, started together; fail if
    /// the child fails or is not done within 30 s (then it is killed).
    fn with_child(child: impl FnOnce(), parent: impl FnOnce()) {
        let sync = Span::anonymous(64).unwrap();
        let (ready, go) = (&sync.words()[0], &sync.words()[1]);
        let deadline = || std::time::Instant::now() + std::time::Duration::from_secs(30);
        // SAFETY: the child only touches memory (this test's shared spans and its own
        // heap, which glibc keeps usable after fork) and leaves with _exit, never
        // returning into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            ready.store(1, Ordering::Release);
            let end = deadline();
            while go.load(Ordering::Acquire) == 0 && std::time::Instant::now() < end {
                std::hint::spin_loop();
            }
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).is_ok();
            // SAFETY: ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let end = deadline();
        while ready.load(Ordering::Acquire) == 0 && std::time::Instant::now() < end {
            std::thread::yield_now();
        }
        go.store(1, Ordering::Release);
        parent();
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child, writing only `status`.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                break;
            }
            if std::time::Instant::now() > end {
                // SAFETY: kills and reaps our own child, which is still running.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                panic!("child still allocating after 30 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child failed: status {status:#x}"
        );
    }

    #[test]
    fn two_processes_get_everything_once() {
        let l = big_layout();
        let span = Span::anonymous(Allocators::bytes_needed(&l)).unwrap();
        let a = Allocators::build(span.clone(), &l, &UsedSets::empty(&l));
        let b = Allocators::attach(span, &l);
        let sets = [
            shared_set(l.data_blocks),
            shared_set(l.total_inodes()),
            shared_set(l.total_dentries()),
        ];
        let mut mine = Drained::default();
        let meet = Span::anonymous(64).unwrap();
        with_child(
            || {
                let got = drain(&b, 0, &meet.words()[0]);
                put_set(&sets[0], &got.blocks);
                put_set(&sets[1], &got.inodes);
                put_set(&sets[2], &got.dentries);
            },
            || mine = drain(&a, 2, &meet.words()[0]),
        );
        let theirs = Drained {
            blocks: get_set(&sets[0]),
            inodes: get_set(&sets[1]),
            dentries: get_set(&sets[2]),
        };
        check_drained(&l, &mine, &theirs);
        assert!(a.blocks.alloc(0, 1).is_none() && b.inodes.alloc(1).is_none());
    }

    #[test]
    fn a_run_freed_in_pieces_comes_back_whole() {
        let l = layout();
        let a = Allocators::from_used(&l, &UsedSets::empty(&l));
        a.blocks.alloc(0, l.data_blocks).unwrap();
        let s = l.lane_blocks(1).start + 10;
        for (from, to) in [(100, 164), (0, 1), (164, 200), (1, 100)] {
            a.blocks.free(s + from, to - from);
        }
        assert_eq!(a.blocks.free_count(), 200);
        assert_eq!(a.blocks.alloc(0, 200), Some(vec![(s, 200)]), "one run");
        // A run freed across the lane boundary goes back to both lanes.
        let b = l.lane_blocks(1).start;
        a.blocks.free(b - 30, 70);
        let mut runs = a.blocks.alloc(1, 70).unwrap();
        runs.sort();
        assert_eq!(runs, vec![(b - 30, 30), (b, 40)]);
    }

    /// Copy-on-write takes a fresh block and frees the old one at every overwrite: the
    /// block freed must be the next one taken (its page already mapped and cached),
    /// not one further on that no write has touched yet (a page fault each, 5-10x
    /// slower runs of the data benchmark when a next fit walked into them).
    #[test]
    fn a_block_freed_is_the_next_one_taken() {
        let l = layout();
        let a = Allocators::from_used(&l, &UsedSets::empty(&l));
        // A file's blocks, freed (the search has moved past them and past blocks
        // still in use after them).
        let first = a.blocks.alloc(0, 70).unwrap()[0].0;
        a.blocks.alloc(0, 100).unwrap();
        a.blocks.free(first, 70);
        let mut held = a.blocks.alloc(0, 1).unwrap()[0].0;
        assert_eq!(held, first);
        for _ in 0..100 {
            let fresh = a.blocks.alloc(0, 1).unwrap()[0].0;
            a.blocks.free(held, 1);
            held = fresh;
        }
        assert!(
            held <= first + 1,
            "overwrites walked to block {held} from {first}"
        );
        // Runs too: a freed run below the search's last stop serves the next request.
        let run = a.blocks.alloc(0, 16).unwrap();
        a.blocks.alloc(0, 64).unwrap();
        a.blocks.free(run[0].0, 16);
        assert_eq!(a.blocks.alloc(0, 16).unwrap(), run);
    }

    /// Metadata blocks gather at the top of the lane, file data fills it from the
    /// bottom: interleaved requests of both never interleave their blocks, a freed
    /// metadata block is the next one taken, and every block can be taken from the top.
    #[test]
    fn metadata_blocks_come_from_the_top_apart_from_data() {
        let l = layout();
        let a = Allocators::from_used(&l, &UsedSets::empty(&l));
        let mut meta = Vec::new();
        let mut data = Vec::new();
        for _ in 0..50 {
            meta.push(a.blocks.alloc_high(0).unwrap());
            data.extend(a.blocks.alloc(0, 3).unwrap());
        }
        let highest_data = data.iter().map(|&(s, n)| s + n - 1).max().unwrap();
        let lowest_meta = *meta.iter().min().unwrap();
        assert!(
            highest_data < lowest_meta,
            "data up to {highest_data}, metadata from {lowest_meta}"
        );
        assert!(meta.windows(2).all(|w| w[1] + 1 == w[0]), "dense: {meta:?}");
        a.blocks.free(meta[3], 1);
        assert_eq!(a.blocks.alloc_high(0), Some(meta[3]), "the freed one first");
        // Down to the last block, then ENOSPC with nothing taken.
        let free = a.blocks.free_count();
        let mut got = HashSet::new();
        for _ in 0..free {
            assert!(got.insert(a.blocks.alloc_high(1).expect("a free block")));
        }
        assert_eq!(a.blocks.alloc_high(0), None);
        assert_eq!(a.blocks.free_count(), 0);
    }

    #[test]
    fn enospc_takes_nothing() {
        let l = layout();
        let a = Allocators::from_used(&l, &UsedSets::empty(&l));
        let total = a.blocks.total();
        a.blocks.alloc(1, total - 5).unwrap();
        let before = a.blocks.used_bitmap();
        assert!(a.blocks.alloc(0, 6).is_none());
        assert_eq!(a.blocks.free_count(), 5);
        assert_eq!(a.blocks.used_bitmap(), before, "nothing taken");
        let runs = a.blocks.alloc(0, 5).unwrap();
        assert_eq!(runs.iter().map(|r| r.1).sum::<u64>(), 5);
        assert!(a.blocks.alloc(0, 1).is_none());
    }

    #[test]
    fn an_attached_view_shares_the_state() {
        let l = layout();
        let span = Span::anonymous(Allocators::bytes_needed(&l)).unwrap();
        let a = Allocators::build(span.clone(), &l, &UsedSets::empty(&l));
        let b = Allocators::attach(span, &l);
        let i = b.inodes.alloc(0).unwrap();
        assert!(!a.inodes.take(i), "taken in the other view");
        assert_eq!(a.inodes.free_count(), b.inodes.free_count());
        a.inodes.free(i);
        assert!(b.inodes.take(i));
        let r = a.blocks.alloc(1, 3).unwrap();
        assert_eq!(b.blocks.free_count(), l.data_blocks - 3);
        assert_eq!(b.used_sets().blocks, a.used_sets().blocks);
        r.iter().for_each(|&(s, n)| b.blocks.free(s, n));
        assert_eq!(a.blocks.free_count(), l.data_blocks);
    }

    /// Two nodes of two lanes each.
    fn two_nodes() -> Layout {
        Layout::compute(Geometry::for_size(16 << 20, 4, None).with_nodes(2)).unwrap()
    }

    #[test]
    fn a_lane_takes_from_its_own_node_then_the_other() {
        let l = two_nodes();
        let a = Allocators::from_used(&l, &UsedSets::empty(&l));
        // Lane 1 (node 0) empties lane 1, then lane 0, then node 1.
        let node0 = l.node_inodes(0);
        let n0 = node0.end - node0.start - 1; // the root is in use
        let got: Vec<u64> = (0..n0).map(|_| a.inodes.alloc(1).unwrap()).collect();
        assert!(got.iter().all(|i| node0.contains(i)), "node 0 first");
        assert!(
            l.node_inodes(1).contains(&a.inodes.alloc(1).unwrap()),
            "then node 1"
        );
        let d = a.dentries.alloc(3).unwrap();
        assert!(l.node_dentries(1).contains(&d));
        let usage = a.node_usage(&l);
        assert_eq!(usage[0].inodes_used, usage[0].inodes_total);
        assert_eq!((usage[1].inodes_used, usage[1].dentries_used), (1, 1));
    }

    #[test]
    fn blocks_come_from_the_own_node_even_in_pieces() {
        let l = two_nodes();
        let a = Allocators::from_used(&l, &UsedSets::empty(&l));
        let node1 = l.node_blocks(1);
        // Node 1 cut into 2-block holes: a 6-block request from node 1 takes pieces
        // there rather than one run from node 0.
        let all = a.blocks.alloc(2, node1.end - node1.start).unwrap();
        assert!(all
            .iter()
            .all(|&(s, n)| node1.contains(&s) && node1.contains(&(s + n - 1))));
        for b in (node1.start..node1.end).step_by(4) {
            a.blocks.free(b, 2);
        }
        let runs = a.blocks.alloc(3, 6).unwrap();
        // Pieces (how many depends on where the lane's search starts: a hole may be
        // split between two lanes), six blocks in all.
        assert!(runs.len() >= 3, "{runs:?}");
        assert_eq!(runs.iter().map(|r| r.1).sum::<u64>(), 6, "{runs:?}");
        assert!(runs.iter().all(|&(s, _)| node1.contains(&s)), "{runs:?}");
        // Node 1 holds fewer than asked: the rest of the pool serves it, and nothing
        // fails until the pool is full.
        let free1 = a.node_usage(&l)[1];
        let left = free1.blocks_total - free1.blocks_used;
        let big = a.blocks.alloc(3, left + 10).unwrap();
        assert_eq!(big.iter().map(|r| r.1).sum::<u64>(), left + 10);
        let rest = a.blocks.free_count();
        assert!(a.blocks.alloc(2, rest).is_some() && a.blocks.alloc(0, 1).is_none());
        assert!(a
            .node_usage(&l)
            .iter()
            .all(|u| u.blocks_used == u.blocks_total));
    }
}
