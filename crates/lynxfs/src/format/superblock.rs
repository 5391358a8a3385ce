//! The superblock: two copies, each with a CRC32C and a generation. An update writes
//! the copy the next generation's parity selects, so a torn update leaves the other
//! copy whole; open takes the valid copy with the higher generation.

use super::layout::{Geometry, Layout, BLOCK, ROOT_INO, SB_A, SB_B};

pub const MAGIC: [u8; 8] = *b"LYNXFSPM";
pub const VERSION: u32 = 1;
/// Feature bits this build understands: an unknown incompat or ro_compat bit refuses
/// the pool (any open, read-only included, for now).
pub const INCOMPAT_KNOWN: u32 = INCOMPAT_CWON
    | INCOMPAT_XATTR_LOG
    | INCOMPAT_DATA_DEVICE
    | INCOMPAT_DEVICE_BLOCKS
    | INCOMPAT_UNDO;
/// Incompat bit: creates use consistency without ordering (one fence; every valid
/// dentry carries a check word, `log::cwon`). A build that does not know it would
/// write dentries without one, which this pool's recovery drops; so it must refuse.
/// Pools made before it keep the two-fence create and recovery without checks.
pub const INCOMPAT_CWON: u32 = 1;
/// Incompat bit: large attribute sets are logs (`data::xattr`), changed by appending.
/// A build that does not know it would read a log's replaced and removed entries as
/// damage. Pools made before it keep chained sets, rewritten whole on each change.
pub const INCOMPAT_XATTR_LOG: u32 = 2;
/// Incompat bit: a hybrid pool, its file data on a data device (`format::device`),
/// whose identity is at byte 168. A build that does not know it would look for file
/// data in the pool.
pub const INCOMPAT_DATA_DEVICE: u32 = 4;
/// Incompat bit (with `INCOMPAT_DATA_DEVICE`): the data device's blocks are numbered
/// and allocated on their own, their count at byte 184 (so a small pool serves a large
/// disk), and their bitmap ends the saved allocator state. A build that does not know
/// it would number file data as the pool's blocks and hand out blocks in use.
pub const INCOMPAT_DEVICE_BLOCKS: u32 = 8;
/// Incompat bit (hybrid pools only): writes commit in transactions, the originals of
/// the inodes they change in an undo area at the end of the pool's blocks
/// (`log::undo`, docs/FORMAT.md 17.4). A build that does not know it would neither
/// roll back an uncommitted write nor keep the area's blocks. Hybrid pools made
/// before it flush the device at every write.
pub const INCOMPAT_UNDO: u32 = 16;
pub const RO_COMPAT_KNOWN: u32 = 0;
/// Compat bit: the pool's default data mode is `inplace` (docs/CONSISTENCY.md). A build
/// that does not know it writes in the `atomic` mode, whose promise is the stronger.
pub const COMPAT_DATA_INPLACE: u32 = 1;
/// Compat bit: the pool spans more than one NUMA node, their count at byte 160. The
/// node count moves no region, so a build that does not know it just allocates without
/// a node preference (and writes 0 there, which reads as one node).
pub const COMPAT_NODES: u32 = 2;
/// Compat bit: a share of the free blocks, inodes and dentries is held back for root
/// (ext4's reserved blocks), its percentage at byte 164. A build that does not know it
/// lets every caller use everything (and writes 0 there: no reserve), as before.
pub const COMPAT_RESERVE: u32 = 4;
/// The largest reserve mkfs accepts, in percent.
pub const MAX_RESERVED_PERCENT: u32 = 50;
pub const SB_LEN: usize = 256;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub version: u32,
    pub incompat: u32,
    pub compat: u32,
    pub ro_compat: u32,
    pub generation: u64,
    pub geo: Geometry,
    pub epoch: u64,
    pub clean: bool,
    pub uuid: [u8; 16],
    pub created_ns: u64,
    pub layout: Layout,
    /// Percent of the blocks, inodes and dentries only root may use (0: none).
    pub reserved_percent: u32,
    /// A hybrid pool's data device: its identity (`INCOMPAT_DATA_DEVICE`).
    pub data_device: Option<[u8; 16]>,
}

/// Why a superblock copy was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SbProblem {
    Magic,
    Checksum,
    Version(u32),
    Features(u32),
    Geometry(String),
}

fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
fn get64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}
fn get32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

/// The node count a superblock records: its field when the compat bit says it is
/// meaningful and it is set (a build that ignores the bit writes 0 there), else 1.
fn nodes_of(compat: u32, field: u32) -> u32 {
    if compat & COMPAT_NODES != 0 && field != 0 {
        field
    } else {
        1
    }
}

/// The reserve a superblock records: its field when the compat bit says it is
/// meaningful, else none (pools made before it, or rewritten by a build without it).
fn reserve_of(compat: u32, field: u32) -> u32 {
    if compat & COMPAT_RESERVE != 0 {
        field
    } else {
        0
    }
}

impl Superblock {
    pub fn new(layout: Layout, uuid: [u8; 16], created_ns: u64) -> Self {
        Superblock {
            version: VERSION,
            incompat: if layout.has_device_blocks() {
                INCOMPAT_DEVICE_BLOCKS
            } else {
                0
            },
            compat: if layout.geo.nodes > 1 {
                COMPAT_NODES
            } else {
                0
            },
            ro_compat: 0,
            generation: 0,
            geo: layout.geo,
            epoch: 1,
            clean: true,
            uuid,
            created_ns,
            layout,
            reserved_percent: 0,
            data_device: None,
        }
    }

    /// Keep file data on the data device `device_uuid` (`None`: in the pool).
    pub fn set_data_device(&mut self, device_uuid: Option<[u8; 16]>) {
        self.data_device = device_uuid;
        match device_uuid {
            Some(_) => self.incompat |= INCOMPAT_DATA_DEVICE,
            None => self.incompat &= !INCOMPAT_DATA_DEVICE,
        }
    }

    /// Hold `percent` of the pool back for root.
    pub fn set_reserve(&mut self, percent: u32) {
        self.reserved_percent = percent;
        if percent > 0 {
            self.compat |= COMPAT_RESERVE;
        } else {
            self.compat &= !COMPAT_RESERVE;
        }
    }

    /// The copy a superblock of this generation is written to.
    pub fn home(&self) -> u64 {
        if self.generation.is_multiple_of(2) {
            SB_A
        } else {
            SB_B
        }
    }

    pub fn encode(&self) -> [u8; SB_LEN] {
        let mut b = [0u8; SB_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        put32(&mut b, 8, self.version);
        put32(&mut b, 12, self.incompat);
        put32(&mut b, 16, self.compat);
        put32(&mut b, 20, self.ro_compat);
        put64(&mut b, 24, self.generation);
        put64(&mut b, 32, self.geo.pool_size);
        put32(&mut b, 40, self.geo.lanes);
        put32(&mut b, 44, BLOCK as u32);
        put64(&mut b, 48, self.geo.inodes_per_lane);
        put64(&mut b, 56, self.geo.dentries_per_lane);
        put64(&mut b, 64, self.epoch);
        put64(&mut b, 72, self.clean as u64);
        b[80..96].copy_from_slice(&self.uuid);
        put64(&mut b, 96, self.created_ns);
        let l = &self.layout;
        put64(&mut b, 104, l.journal_off);
        put64(&mut b, 112, l.state_off);
        put64(&mut b, 120, l.inode_off);
        put64(&mut b, 128, l.dentry_off);
        put64(&mut b, 136, l.data_off);
        put64(&mut b, 144, l.data_blocks);
        put64(&mut b, 152, ROOT_INO);
        // One node is written as 0, as every pool made before the field has it.
        let nodes = if self.geo.nodes > 1 {
            self.geo.nodes
        } else {
            0
        };
        put32(&mut b, 160, nodes);
        put32(&mut b, 164, self.reserved_percent);
        if let Some(u) = self.data_device {
            b[168..184].copy_from_slice(&u);
        }
        put64(&mut b, 184, self.geo.device_blocks);
        let crc = super::crc::of(&b[..SB_LEN - 4]);
        put32(&mut b, SB_LEN - 4, crc);
        b
    }

    /// Decode and validate one copy. Never trusts a field before checking it.
    pub fn decode(b: &[u8; SB_LEN]) -> Result<Superblock, SbProblem> {
        if b[0..8] != MAGIC {
            return Err(SbProblem::Magic);
        }
        if super::crc::of(&b[..SB_LEN - 4]) != get32(b, SB_LEN - 4) {
            return Err(SbProblem::Checksum);
        }
        let version = get32(b, 8);
        if version != VERSION {
            return Err(SbProblem::Version(version));
        }
        let incompat = get32(b, 12);
        let ro_compat = get32(b, 20);
        if incompat & !INCOMPAT_KNOWN != 0 || ro_compat & !RO_COMPAT_KNOWN != 0 {
            return Err(SbProblem::Features(incompat | ro_compat));
        }
        if get32(b, 44) as u64 != BLOCK {
            return Err(SbProblem::Geometry(format!(
                "block size {} (expected {BLOCK})",
                get32(b, 44)
            )));
        }
        let geo = Geometry {
            pool_size: get64(b, 32),
            lanes: get32(b, 40),
            inodes_per_lane: get64(b, 48),
            dentries_per_lane: get64(b, 56),
            nodes: nodes_of(get32(b, 16), get32(b, 160)),
            device_blocks: if incompat & INCOMPAT_DEVICE_BLOCKS != 0 {
                get64(b, 184)
            } else {
                0
            },
        };
        let device_blocks_bit = incompat & INCOMPAT_DEVICE_BLOCKS != 0;
        if device_blocks_bit && (incompat & INCOMPAT_DATA_DEVICE == 0 || geo.device_blocks == 0) {
            return Err(SbProblem::Geometry(format!(
                "{} device blocks without a data device",
                geo.device_blocks
            )));
        }
        let layout = Layout::compute(geo)
            .ok_or_else(|| SbProblem::Geometry(format!("impossible geometry {geo:?}")))?;
        let recorded = [
            get64(b, 104),
            get64(b, 112),
            get64(b, 120),
            get64(b, 128),
            get64(b, 136),
            get64(b, 144),
            get64(b, 152),
        ];
        let expected = [
            layout.journal_off,
            layout.state_off,
            layout.inode_off,
            layout.dentry_off,
            layout.data_off,
            layout.data_blocks,
            ROOT_INO,
        ];
        if recorded != expected {
            return Err(SbProblem::Geometry(
                "region offsets disagree with the geometry".into(),
            ));
        }
        let reserved_percent = reserve_of(get32(b, 16), get32(b, 164));
        if reserved_percent > MAX_RESERVED_PERCENT {
            return Err(SbProblem::Geometry(format!(
                "reserve of {reserved_percent}% (at most {MAX_RESERVED_PERCENT}%)"
            )));
        }
        let clean = match get64(b, 72) {
            0 => false,
            1 => true,
            v => return Err(SbProblem::Geometry(format!("clean flag {v}"))),
        };
        let data_device =
            (incompat & INCOMPAT_DATA_DEVICE != 0).then(|| b[168..184].try_into().expect("16"));
        Ok(Superblock {
            data_device,
            version,
            incompat,
            compat: get32(b, 16),
            ro_compat,
            generation: get64(b, 24),
            geo,
            epoch: get64(b, 64),
            clean,
            uuid: b[80..96].try_into().expect("16 bytes"),
            created_ns: get64(b, 96),
            layout,
            reserved_percent,
        })
    }
}

impl std::fmt::Display for SbProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SbProblem::Magic => write!(f, "bad magic"),
            SbProblem::Checksum => write!(f, "checksum mismatch"),
            SbProblem::Version(v) => write!(f, "format version {v}"),
            SbProblem::Features(x) => write!(f, "unknown feature flags {x:#x}"),
            SbProblem::Geometry(s) => write!(f, "{s}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        let l = Layout::compute(Geometry::for_size(8 << 20, 2, None)).unwrap();
        Superblock::new(l, [7; 16], 42)
    }

    #[test]
    fn round_trip() {
        let sb = sample();
        assert_eq!(Superblock::decode(&sb.encode()).unwrap(), sb);
    }

    #[test]
    fn the_node_count_round_trips_and_old_pools_have_one_node() {
        let geo = Geometry::for_size(8 << 20, 4, None).with_nodes(2);
        let sb = Superblock::new(Layout::compute(geo).unwrap(), [7; 16], 42);
        assert_eq!(sb.compat & COMPAT_NODES, COMPAT_NODES);
        let back = Superblock::decode(&sb.encode()).unwrap();
        assert_eq!((back.geo.nodes, back.layout.nodes()), (2, 2));
        // A pool made before the field (bytes 160.. zero, no bit) has one node.
        let mut old = sample();
        assert_eq!(old.compat & COMPAT_NODES, 0);
        let b = old.encode();
        assert!(
            b[160..SB_LEN - 4].iter().all(|&x| x == 0),
            "one node: zeros"
        );
        assert_eq!(Superblock::decode(&b).unwrap().geo.nodes, 1);
        // A build that ignores the bit keeps it but writes 0 nodes: one node again.
        old.compat |= COMPAT_NODES;
        old.geo.nodes = 0;
        assert_eq!(Superblock::decode(&old.encode()).unwrap().geo.nodes, 1);
    }

    #[test]
    fn the_reserve_round_trips_and_old_pools_have_none() {
        let mut sb = sample();
        sb.set_reserve(5);
        assert_eq!(sb.compat & COMPAT_RESERVE, COMPAT_RESERVE);
        assert_eq!(
            Superblock::decode(&sb.encode()).unwrap().reserved_percent,
            5
        );
        // A pool from before the bit (or a build that dropped it): no reserve.
        sb.compat &= !COMPAT_RESERVE;
        assert_eq!(
            Superblock::decode(&sb.encode()).unwrap().reserved_percent,
            0
        );
        sb.set_reserve(MAX_RESERVED_PERCENT + 1);
        assert!(matches!(
            Superblock::decode(&sb.encode()),
            Err(SbProblem::Geometry(_))
        ));
    }

    #[test]
    fn a_node_count_that_does_not_divide_the_lanes_is_refused() {
        let geo = Geometry::for_size(8 << 20, 4, None).with_nodes(2);
        let mut sb = Superblock::new(Layout::compute(geo).unwrap(), [7; 16], 42);
        sb.geo.nodes = 3;
        assert!(matches!(
            Superblock::decode(&sb.encode()),
            Err(SbProblem::Geometry(_))
        ));
    }

    #[test]
    fn the_data_device_round_trips_and_all_pm_pools_have_none() {
        let mut sb = sample();
        assert_eq!(Superblock::decode(&sb.encode()).unwrap().data_device, None);
        assert!(sb.encode()[168..184].iter().all(|&x| x == 0));
        sb.set_data_device(Some([9; 16]));
        assert_eq!(sb.incompat & INCOMPAT_DATA_DEVICE, INCOMPAT_DATA_DEVICE);
        let back = Superblock::decode(&sb.encode()).unwrap();
        assert_eq!(back.data_device, Some([9; 16]));
    }

    #[test]
    fn device_blocks_round_trip_and_need_a_data_device() {
        let geo = Geometry {
            device_blocks: 100_000,
            ..Geometry::for_size(8 << 20, 2, None)
        };
        let mut sb = Superblock::new(Layout::compute(geo).unwrap(), [7; 16], 42);
        assert_eq!(sb.incompat & INCOMPAT_DEVICE_BLOCKS, INCOMPAT_DEVICE_BLOCKS);
        assert!(
            matches!(
                Superblock::decode(&sb.encode()),
                Err(SbProblem::Geometry(_))
            ),
            "device blocks but no device"
        );
        sb.set_data_device(Some([9; 16]));
        let back = Superblock::decode(&sb.encode()).unwrap();
        assert_eq!(back.geo.device_blocks, 100_000);
        assert_eq!(back, sb);
        // Its bitmap (12504 bytes) grows the saved state: the regions move.
        assert!(sb.layout.state_len > sample().layout.state_len);
    }

    #[test]
    fn every_single_bit_flip_is_caught() {
        let good = sample().encode();
        for bit in 0..SB_LEN * 8 {
            let mut b = good;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(Superblock::decode(&b).is_err(), "bit {bit} flip accepted");
        }
    }
}
