//! Where everything lives in a pool. The layout is a pure function of the geometry
//! (size, lanes, inodes and dentries per lane), so `open` recomputes it and refuses a
//! superblock whose recorded offsets disagree.

use std::ops::Range;

pub const BLOCK: u64 = 4096;
pub const SB_A: u64 = 0;
pub const SB_B: u64 = BLOCK;
pub const INODE_SIZE: u64 = 256;
pub const DENTRY_SIZE: u64 = 320;
pub const JOURNAL_SIZE: u64 = 16 * 1024;
/// The smallest pool mkfs accepts (with many lanes the geometry needs more: each lane
/// must get at least 16 data blocks, and mkfs says so when it does not fit).
pub const MIN_POOL: u64 = 1 << 20;
pub const MAX_LANES: u32 = 256;
/// The most NUMA nodes a pool may span (each needs at least one lane).
pub const MAX_NODES: u32 = 64;
/// Inode 0 is never used (0 means "none" everywhere); 1 is the root directory.
pub const ROOT_INO: u64 = 1;
/// Default bytes of pool per inode at mkfs.
pub const BYTES_PER_INODE: u64 = 8192;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub pool_size: u64,
    pub lanes: u32,
    pub inodes_per_lane: u64,
    pub dentries_per_lane: u64,
    /// NUMA nodes the pool spans: node `k` owns lanes `[k·L/N, (k+1)·L/N)` (so `lanes`
    /// must be a multiple of it). It moves no region: the layout of every geometry is
    /// the same whatever its node count; only allocation prefers a thread's node.
    pub nodes: u32,
    /// A hybrid pool's data device blocks (file data of regular files, numbered on
    /// their own, `Layout::lane_device_blocks`); 0: file data is in the pool. Their
    /// bitmap is part of the saved allocator state.
    pub device_blocks: u64,
}

impl Geometry {
    /// The default geometry for a pool of `pool_size` bytes and `lanes` lanes.
    pub fn for_size(pool_size: u64, lanes: u32, inodes: Option<u64>) -> Geometry {
        let lanes = lanes.clamp(1, MAX_LANES);
        let total = inodes
            .unwrap_or(pool_size / BYTES_PER_INODE)
            .max(16 * lanes as u64);
        let inodes_per_lane = total.div_ceil(lanes as u64);
        Geometry {
            pool_size,
            lanes,
            inodes_per_lane,
            dentries_per_lane: inodes_per_lane + inodes_per_lane / 4,
            nodes: 1,
            device_blocks: 0,
        }
    }

    /// This geometry spread over `nodes` NUMA nodes: with more than one, the per-lane
    /// counts grow (never shrink) so that every lane's part of the inode and dentry
    /// tables starts on a 4 KiB page, and a node's part can be its own memory.
    pub fn with_nodes(self, nodes: u32) -> Geometry {
        let page_aligned = |per_lane: u64, size: u64| {
            if nodes <= 1 {
                return per_lane;
            }
            // The smallest count whose bytes are a whole number of pages.
            let step = BLOCK / gcd(BLOCK, size);
            per_lane.div_ceil(step).saturating_mul(step)
        };
        Geometry {
            inodes_per_lane: page_aligned(self.inodes_per_lane, INODE_SIZE),
            dentries_per_lane: page_aligned(self.dentries_per_lane, DENTRY_SIZE),
            nodes,
            ..self
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Byte offsets of every region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub geo: Geometry,
    pub journal_off: u64,
    pub state_off: u64,
    pub state_len: u64,
    pub inode_off: u64,
    pub dentry_off: u64,
    pub data_off: u64,
    pub data_blocks: u64,
}

fn round_up(x: u64, to: u64) -> Option<u64> {
    Some(x.checked_add(to - 1)? / to * to)
}

/// Bytes of a bitmap of `n` bits padded to whole words.
fn bitmap_bytes(n: u64) -> u64 {
    n.div_ceil(64) * 8
}

/// Bytes of the saved allocation state: three bitmaps (four in a hybrid pool: its
/// device blocks'), each padded to 8 bytes.
fn state_bytes(data_blocks: u64, inodes: u64, dentries: u64, device: u64) -> Option<u64> {
    let bits = bitmap_bytes(data_blocks)
        .checked_add(bitmap_bytes(inodes))?
        .checked_add(bitmap_bytes(dentries))?
        .checked_add(bitmap_bytes(device))?;
    round_up(bits, BLOCK)
}

/// The node count divides the lanes, and with more than one node every lane's part of
/// the inode and dentry tables is whole pages (the tables start on a page, so each
/// node's part does too).
fn nodes_fit(geo: &Geometry) -> bool {
    if geo.nodes == 0 || geo.nodes > MAX_NODES || !geo.lanes.is_multiple_of(geo.nodes) {
        return false;
    }
    let whole_pages =
        |n: u64, size: u64| n.checked_mul(size).is_some_and(|b| b.is_multiple_of(BLOCK));
    geo.nodes == 1
        || (whole_pages(geo.inodes_per_lane, INODE_SIZE)
            && whole_pages(geo.dentries_per_lane, DENTRY_SIZE))
}

impl Layout {
    /// The layout for `geo`, or `None` when it does not fit (too small, overflow).
    pub fn compute(geo: Geometry) -> Option<Layout> {
        if geo.lanes == 0
            || geo.lanes > MAX_LANES
            || geo.inodes_per_lane < 2
            || geo.dentries_per_lane < 2
            || !nodes_fit(&geo)
        {
            return None;
        }
        let inodes = geo.inodes_per_lane.checked_mul(geo.lanes as u64)?;
        let dentries = geo.dentries_per_lane.checked_mul(geo.lanes as u64)?;
        let journal_off = 2 * BLOCK;
        let state_off = journal_off.checked_add(JOURNAL_SIZE.checked_mul(geo.lanes as u64)?)?;
        let inode_len = round_up(inodes.checked_mul(INODE_SIZE)?, BLOCK)?;
        let dentry_len = round_up(dentries.checked_mul(DENTRY_SIZE)?, BLOCK)?;
        // Upper bound on data blocks first, then shrink until the bitmap fits too.
        let fixed = state_off.checked_add(inode_len)?.checked_add(dentry_len)?;
        let room = geo.pool_size.checked_sub(fixed)?;
        let mut data_blocks = room / BLOCK;
        loop {
            let state_len = state_bytes(data_blocks, inodes, dentries, geo.device_blocks)?;
            let need = state_len.checked_add(data_blocks.checked_mul(BLOCK)?)?;
            if need <= room {
                let inode_off = state_off + state_len;
                let dentry_off = inode_off + inode_len;
                let data_off = dentry_off + dentry_len;
                let lane_min = 16 * geo.lanes as u64;
                if data_blocks < lane_min
                    || (geo.device_blocks != 0 && geo.device_blocks < lane_min)
                {
                    return None;
                }
                return Some(Layout {
                    geo,
                    journal_off,
                    state_off,
                    state_len,
                    inode_off,
                    dentry_off,
                    data_off,
                    data_blocks,
                });
            }
            let over = (need - room).div_ceil(BLOCK).max(1);
            data_blocks = data_blocks.checked_sub(over)?;
        }
    }

    pub fn lanes(&self) -> u32 {
        self.geo.lanes
    }
    pub fn total_inodes(&self) -> u64 {
        self.geo.inodes_per_lane * self.geo.lanes as u64
    }
    pub fn total_dentries(&self) -> u64 {
        self.geo.dentries_per_lane * self.geo.lanes as u64
    }

    // ---- NUMA nodes: each owns a contiguous run of lanes ----

    pub fn nodes(&self) -> u32 {
        self.geo.nodes
    }
    fn lanes_per_node(&self) -> u32 {
        self.geo.lanes / self.geo.nodes
    }
    pub fn node_of_lane(&self, lane: u32) -> u32 {
        lane / self.lanes_per_node()
    }
    /// The lanes of node `k`.
    pub fn node_lanes(&self, k: u32) -> Range<u32> {
        let per = self.lanes_per_node();
        k * per..(k + 1) * per
    }
    /// The inode numbers of node `k` (inode 0 never handed out).
    pub fn node_inodes(&self, k: u32) -> Range<u64> {
        let l = self.node_lanes(k);
        self.lane_inodes(l.start).start..self.lane_inodes(l.end - 1).end
    }
    /// The dentry ids of node `k` (dentry 0 never handed out).
    pub fn node_dentries(&self, k: u32) -> Range<u64> {
        let l = self.node_lanes(k);
        self.lane_dentries(l.start).start..self.lane_dentries(l.end - 1).end
    }
    /// The data blocks of node `k`.
    pub fn node_blocks(&self, k: u32) -> Range<u64> {
        let l = self.node_lanes(k);
        self.lane_blocks(l.start).start..self.lane_blocks(l.end - 1).end
    }
    /// The pool bytes node `k`'s lanes own: its journals, its parts of the inode and
    /// dentry tables and of the data area (the superblocks and the saved allocator
    /// state belong to no node).
    pub fn node_bytes(&self, k: u32) -> [Range<u64>; 4] {
        let l = self.node_lanes(k);
        let per_lane =
            |start: u64, len: u64| start + l.start as u64 * len..start + l.end as u64 * len;
        let b = self.node_blocks(k);
        [
            per_lane(self.journal_off, JOURNAL_SIZE),
            per_lane(self.inode_off, self.geo.inodes_per_lane * INODE_SIZE),
            per_lane(self.dentry_off, self.geo.dentries_per_lane * DENTRY_SIZE),
            self.data_off + b.start * BLOCK..self.data_off + b.end * BLOCK,
        ]
    }

    // ---- inodes: the "quick path", number to address in O(1) ----

    pub fn ino_valid(&self, ino: u64) -> bool {
        ino >= ROOT_INO && ino < self.total_inodes()
    }
    pub fn inode_addr(&self, ino: u64) -> u64 {
        debug_assert!(self.ino_valid(ino));
        self.inode_off + ino * INODE_SIZE
    }
    pub fn lane_of_ino(&self, ino: u64) -> u32 {
        (ino / self.geo.inodes_per_lane) as u32
    }
    /// The inode numbers owned by `lane` (inode 0 never handed out).
    pub fn lane_inodes(&self, lane: u32) -> Range<u64> {
        let start = lane as u64 * self.geo.inodes_per_lane;
        start.max(ROOT_INO)..start + self.geo.inodes_per_lane
    }

    // ---- dentries ----

    pub fn dentry_addr(&self, id: u64) -> u64 {
        self.dentry_off + id * DENTRY_SIZE
    }
    /// The dentry at pool offset `addr`, if `addr` is exactly the start of one.
    pub fn dentry_id(&self, addr: u64) -> Option<u64> {
        let rel = addr.checked_sub(self.dentry_off)?;
        let id = rel / DENTRY_SIZE;
        (rel % DENTRY_SIZE == 0 && id >= 1 && id < self.total_dentries()).then_some(id)
    }
    pub fn lane_of_dentry(&self, id: u64) -> u32 {
        (id / self.geo.dentries_per_lane) as u32
    }
    pub fn lane_dentries(&self, lane: u32) -> Range<u64> {
        let start = lane as u64 * self.geo.dentries_per_lane;
        start.max(1)..start + self.geo.dentries_per_lane
    }

    // ---- data blocks ----

    pub fn block_addr(&self, b: u64) -> u64 {
        debug_assert!(b < self.data_blocks);
        self.data_off + b * BLOCK
    }
    /// The block at pool offset `addr`, if `addr` is exactly the start of one.
    pub fn block_of(&self, addr: u64) -> Option<u64> {
        let rel = addr.checked_sub(self.data_off)?;
        let b = rel / BLOCK;
        (rel % BLOCK == 0 && b < self.data_blocks).then_some(b)
    }
    fn blocks_per_lane(&self) -> u64 {
        self.data_blocks / self.geo.lanes as u64
    }
    pub fn lane_of_block(&self, b: u64) -> u32 {
        ((b / self.blocks_per_lane()) as u32).min(self.geo.lanes - 1)
    }
    /// The last lane also takes the remainder.
    pub fn lane_blocks(&self, lane: u32) -> Range<u64> {
        let per = self.blocks_per_lane();
        let start = lane as u64 * per;
        let end = if lane + 1 == self.geo.lanes {
            self.data_blocks
        } else {
            start + per
        };
        start..end
    }

    // ---- a hybrid pool's device blocks: numbered from 0, split among lanes alike ----

    /// True when file data is on a data device with blocks of its own (their number
    /// space is `device_blocks`, not the pool's).
    #[inline]
    pub fn has_device_blocks(&self) -> bool {
        self.geo.device_blocks != 0
    }
    /// The device blocks of `lane`; the last lane also takes the remainder.
    pub fn lane_device_blocks(&self, lane: u32) -> Range<u64> {
        let per = self.geo.device_blocks / self.geo.lanes as u64;
        let start = lane as u64 * per;
        let end = if lane + 1 == self.geo.lanes {
            self.geo.device_blocks
        } else {
            start + per
        };
        start..end
    }
    /// Whether the extents of an inode of `mode` name device blocks (a hybrid pool's
    /// regular files) rather than the pool's own (symlink targets, all-PM pools).
    #[inline]
    pub fn extents_on_device(&self, mode: u32) -> bool {
        self.has_device_blocks() && mode & libc::S_IFMT == libc::S_IFREG
    }
    /// How many blocks the extents of an inode of `mode` may name.
    #[inline]
    pub fn extent_blocks(&self, mode: u32) -> u64 {
        if self.extents_on_device(mode) {
            self.geo.device_blocks
        } else {
            self.data_blocks
        }
    }

    // ---- journals and saved state ----

    pub fn journal_addr(&self, lane: u32) -> u64 {
        self.journal_off + lane as u64 * JOURNAL_SIZE
    }
    /// Offsets of the saved block, inode and dentry bitmaps.
    pub fn state_bitmaps(&self) -> (u64, u64, u64) {
        let blocks = self.state_off;
        let inodes = blocks + bitmap_bytes(self.data_blocks);
        let dentries = inodes + bitmap_bytes(self.total_inodes());
        (blocks, inodes, dentries)
    }
    /// Offset of a hybrid pool's saved device-block bitmap (after the other three).
    pub fn device_bitmap(&self) -> u64 {
        self.state_bitmaps().2 + bitmap_bytes(self.total_dentries())
    }

    /// True when `[addr, addr+len)` lies in a region the journal may write: inodes,
    /// dentries or data blocks (never a superblock, journal or saved state).
    pub fn journal_target_ok(&self, addr: u64, len: u64) -> bool {
        addr.is_multiple_of(8)
            && addr >= self.inode_off
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.data_off + self.data_blocks * BLOCK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_do_not_overlap_and_fit() {
        for size in [MIN_POOL, 3 << 20, 64 << 20, (1 << 30) + 12345] {
            for lanes in [1, 2, 7, 64] {
                let g = Geometry::for_size(size, lanes, None);
                let Some(l) = Layout::compute(g) else {
                    assert!(size < 4 << 20, "size {size} lanes {lanes} should fit");
                    continue;
                };
                assert!(l.journal_off >= 2 * BLOCK);
                assert!(l.state_off >= l.journal_off + JOURNAL_SIZE * lanes as u64);
                assert!(l.inode_off >= l.state_off + l.state_len);
                assert!(l.dentry_off >= l.inode_off + l.total_inodes() * INODE_SIZE);
                assert!(l.data_off >= l.dentry_off + l.total_dentries() * DENTRY_SIZE);
                assert!(l.data_off + l.data_blocks * BLOCK <= size);
                let (b, i, d) = l.state_bitmaps();
                assert!(b < i && i <= d && d < l.state_off + l.state_len);
                let mut covered = 0;
                for lane in 0..lanes {
                    let r = l.lane_blocks(lane);
                    assert_eq!(r.start, covered);
                    covered = r.end;
                    assert_eq!(l.lane_of_block(r.start), lane);
                    assert_eq!(l.lane_of_block(r.end - 1), lane);
                }
                assert_eq!(covered, l.data_blocks);
            }
        }
    }

    #[test]
    fn each_node_owns_page_aligned_contiguous_parts() {
        for (size, lanes, nodes) in [(64 << 20, 4, 2), (256 << 20, 6, 3), (16 << 20, 2, 2)] {
            let l =
                Layout::compute(Geometry::for_size(size, lanes, None).with_nodes(nodes)).unwrap();
            let mut ends = [l.journal_off, l.inode_off, l.dentry_off, l.data_off];
            for k in 0..nodes {
                let bytes = l.node_bytes(k);
                for (part, r) in bytes.iter().enumerate() {
                    assert_eq!(
                        r.start,
                        ends[part],
                        "node {k} part {part} follows node {}",
                        k.wrapping_sub(1)
                    );
                    assert!(
                        r.start.is_multiple_of(BLOCK) && r.end.is_multiple_of(BLOCK),
                        "node {k} part {part}: {r:?}"
                    );
                    ends[part] = r.end;
                }
                let lanes = l.node_lanes(k);
                assert_eq!(l.node_of_lane(lanes.start), k);
                assert_eq!(l.node_of_lane(lanes.end - 1), k);
                let i = l.node_inodes(k);
                assert_eq!(l.inode_addr(i.end - 1) + INODE_SIZE, bytes[1].end);
                assert_eq!(l.dentry_addr(l.node_dentries(k).end), bytes[2].end);
                assert_eq!(l.block_addr(l.node_blocks(k).start), bytes[3].start);
            }
            assert_eq!(ends[0], l.state_off, "the journals are all the nodes'");
            assert_eq!(ends[3], l.data_off + l.data_blocks * BLOCK);
            assert!(ends[1] <= l.dentry_off && ends[2] <= l.data_off);
        }
    }

    #[test]
    fn one_node_moves_nothing_and_bad_node_counts_are_refused() {
        let g = Geometry::for_size(64 << 20, 4, None);
        assert_eq!(g.with_nodes(1), g);
        let two = g.with_nodes(2);
        // The same counts but two nodes: the same regions.
        let (a, b) = (
            Layout::compute(two).unwrap(),
            Layout::compute(Geometry { nodes: 1, ..two }).unwrap(),
        );
        assert_eq!(
            (a.inode_off, a.dentry_off, a.data_off, a.data_blocks),
            (b.inode_off, b.dentry_off, b.data_off, b.data_blocks)
        );
        assert!(
            Layout::compute(g.with_nodes(3)).is_none(),
            "3 does not divide 4 lanes"
        );
        assert!(Layout::compute(Geometry { nodes: 0, ..g }).is_none());
        assert!(
            Layout::compute(Geometry { nodes: 8, ..g }).is_none(),
            "more nodes than lanes"
        );
        let unaligned = Geometry {
            inodes_per_lane: two.inodes_per_lane + 1,
            ..two
        };
        assert!(
            Layout::compute(unaligned).is_none(),
            "a node's inodes not whole pages"
        );
    }

    #[test]
    fn device_blocks_split_among_lanes_and_their_bitmap_ends_the_state() {
        let pm = Layout::compute(Geometry::for_size(64 << 20, 3, None)).unwrap();
        let geo = Geometry {
            device_blocks: 1_000_001,
            ..pm.geo
        };
        let l = Layout::compute(geo).unwrap();
        assert!(!pm.has_device_blocks() && l.has_device_blocks());
        let mut covered = 0;
        for lane in 0..3 {
            let r = l.lane_device_blocks(lane);
            assert_eq!(r.start, covered);
            covered = r.end;
        }
        assert_eq!(covered, 1_000_001);
        // The bitmap (125 001 bytes) follows the other three, inside the state.
        assert_eq!(
            l.device_bitmap(),
            l.state_bitmaps().2 + l.total_dentries().div_ceil(64) * 8
        );
        assert!(l.device_bitmap() + 1_000_001u64.div_ceil(64) * 8 <= l.state_off + l.state_len);
        assert!(l.state_len >= pm.state_len + 125_001 - BLOCK);
        assert!(l.data_blocks < pm.data_blocks);
        // Regular files' extents name device blocks, symlinks' the pool's.
        assert_eq!(l.extent_blocks(libc::S_IFREG | 0o644), 1_000_001);
        assert_eq!(l.extent_blocks(libc::S_IFLNK | 0o777), l.data_blocks);
        assert_eq!(pm.extent_blocks(libc::S_IFREG | 0o644), pm.data_blocks);
        // Fewer than 16 per lane: refused.
        assert!(Layout::compute(Geometry {
            device_blocks: 47,
            ..pm.geo
        })
        .is_none());
    }

    #[test]
    fn addresses_round_trip() {
        let l = Layout::compute(Geometry::for_size(64 << 20, 4, None)).unwrap();
        for id in [1, 2, l.total_dentries() - 1] {
            assert_eq!(l.dentry_id(l.dentry_addr(id)), Some(id));
        }
        assert_eq!(l.dentry_id(l.dentry_addr(1) + 8), None);
        assert_eq!(l.dentry_id(l.dentry_addr(0)), None);
        assert_eq!(l.dentry_id(l.dentry_addr(l.total_dentries())), None);
        assert_eq!(l.block_of(l.block_addr(5)), Some(5));
        assert_eq!(l.block_of(l.data_off + l.data_blocks * BLOCK), None);
        assert_eq!(l.lane_of_ino(l.lane_inodes(3).start), 3);
    }
}
