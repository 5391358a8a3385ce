//! A hybrid pool's data device: its header, and the pool's record of it.
//!
//! The device (a block device, or a file on any file system) starts with a header
//! naming the pool it belongs to and itself; after it come the data area (block `b` of
//! the pool's file data at `data_off + b * BLOCK`) and the export area, reserved for a
//! copy of the pool's metadata (`lynxfs export`), so that the device alone can be a
//! whole file system. The pool records the device's identity in its superblock and
//! where to find it (its absolute path) in a device record beside each superblock
//! copy (docs/FORMAT.md, "Hybrid pools").

use super::layout::{BLOCK, SB_A, SB_B};
use super::superblock::SB_LEN;

pub const MAGIC: [u8; 8] = *b"LYNXFSDV";
/// The header's format version: a device of a newer one is refused, naming both.
pub const VERSION: u32 = 1;
/// The header's bytes at the start of the device (the rest of its block is zero).
pub const HEADER_LEN: usize = 256;
/// Where the data area starts on a device mkfs makes: 1 MiB, so that it is aligned
/// for any sector and erase-block size.
pub const DATA_OFF: u64 = 1 << 20;

/// The device's header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceHeader {
    pub version: u32,
    /// Bytes per data block (the pool's [`BLOCK`]).
    pub block_size: u32,
    /// The pool this device holds the data of (its superblock's uuid).
    pub pool_uuid: [u8; 16],
    /// This device's own identity, recorded in the pool's superblock.
    pub device_uuid: [u8; 16],
    pub created_ns: u64,
    /// The data area: byte offset and length on the device.
    pub data_off: u64,
    pub data_len: u64,
    /// The export area (`lynxfs export` fills it with the pool's metadata).
    pub export_off: u64,
    pub export_len: u64,
}

/// Why a header was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderProblem {
    /// Not a data device at all.
    Magic,
    Checksum,
    /// Written by a newer LynxFS.
    Version(u32),
    /// Fields that cannot be (overlapping areas, another block size).
    Shape(String),
}

impl std::fmt::Display for HeaderProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderProblem::Magic => write!(f, "no LynxFS data device header"),
            HeaderProblem::Checksum => write!(f, "its header's checksum does not match"),
            HeaderProblem::Version(v) => write!(
                f,
                "its header is of format version {v}, this build reads version {VERSION}"
            ),
            HeaderProblem::Shape(s) => write!(f, "its header is impossible: {s}"),
        }
    }
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

impl DeviceHeader {
    /// The header of a new device for `data_blocks` blocks and an export area of
    /// `export_len` bytes (rounded up to whole blocks).
    pub fn new(
        pool_uuid: [u8; 16],
        device_uuid: [u8; 16],
        data_blocks: u64,
        export_len: u64,
        created_ns: u64,
    ) -> DeviceHeader {
        let data_len = data_blocks * BLOCK;
        DeviceHeader {
            version: VERSION,
            block_size: BLOCK as u32,
            pool_uuid,
            device_uuid,
            created_ns,
            data_off: DATA_OFF,
            data_len,
            export_off: DATA_OFF + data_len,
            export_len: export_len.div_ceil(BLOCK) * BLOCK,
        }
    }

    /// The bytes a device needs to hold everything the header names.
    pub fn device_len(&self) -> u64 {
        (self.data_off + self.data_len).max(self.export_off + self.export_len)
    }

    /// How many data blocks the data area holds.
    pub fn data_blocks(&self) -> u64 {
        self.data_len / BLOCK
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        put32(&mut b, 8, self.version);
        put32(&mut b, 12, self.block_size);
        b[16..32].copy_from_slice(&self.pool_uuid);
        b[32..48].copy_from_slice(&self.device_uuid);
        put64(&mut b, 48, self.created_ns);
        put64(&mut b, 56, self.data_off);
        put64(&mut b, 64, self.data_len);
        put64(&mut b, 72, self.export_off);
        put64(&mut b, 80, self.export_len);
        let crc = super::crc::of(&b[..HEADER_LEN - 4]);
        put32(&mut b, HEADER_LEN - 4, crc);
        b
    }

    /// Decode and validate a header. The version is judged before the checksum: a
    /// newer format may have moved the checksum, and must be named as newer.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<DeviceHeader, HeaderProblem> {
        if b[0..8] != MAGIC {
            return Err(HeaderProblem::Magic);
        }
        let version = get32(b, 8);
        if version > VERSION {
            return Err(HeaderProblem::Version(version));
        }
        if super::crc::of(&b[..HEADER_LEN - 4]) != get32(b, HEADER_LEN - 4) {
            return Err(HeaderProblem::Checksum);
        }
        if version != VERSION {
            return Err(HeaderProblem::Shape(format!("version {version}")));
        }
        let h = DeviceHeader {
            version,
            block_size: get32(b, 12),
            pool_uuid: b[16..32].try_into().expect("16 bytes"),
            device_uuid: b[32..48].try_into().expect("16 bytes"),
            created_ns: get64(b, 48),
            data_off: get64(b, 56),
            data_len: get64(b, 64),
            export_off: get64(b, 72),
            export_len: get64(b, 80),
        };
        h.check_shape()?;
        Ok(h)
    }

    fn check_shape(&self) -> Result<(), HeaderProblem> {
        let bad = |s: String| Err(HeaderProblem::Shape(s));
        if self.block_size as u64 != BLOCK {
            return bad(format!("block size {} (expected {BLOCK})", self.block_size));
        }
        let aligned = [
            self.data_off,
            self.data_len,
            self.export_off,
            self.export_len,
        ]
        .iter()
        .all(|v| v.is_multiple_of(BLOCK));
        if !aligned || self.data_off < HEADER_LEN as u64 {
            return bad("areas not aligned to blocks, or over the header".into());
        }
        let (Some(data_end), Some(export_end)) = (
            self.data_off.checked_add(self.data_len),
            self.export_off.checked_add(self.export_len),
        ) else {
            return bad("areas past the largest offset".into());
        };
        let apart = data_end <= self.export_off || export_end <= self.data_off;
        if self.export_len > 0 && (!apart || self.export_off < HEADER_LEN as u64) {
            return bad("the data and export areas overlap".into());
        }
        Ok(())
    }
}

/// The bytes of a device record beside each superblock copy: the device's path.
pub const RECORD_LEN: usize = 1024;
/// The longest device path a record holds.
pub const MAX_PATH: usize = RECORD_LEN - 32;
/// Where the device records are: right after each superblock copy, in its block.
pub const RECORD_A: u64 = SB_A + SB_LEN as u64;
pub const RECORD_B: u64 = SB_B + SB_LEN as u64;
const RECORD_MAGIC: [u8; 8] = *b"LYNXDREC";
const _: () = assert!(SB_LEN + RECORD_LEN <= BLOCK as usize);

/// Where a pool finds its data device: the identity (also in the superblock, which
/// the record must agree with) and the absolute path given at mkfs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceRecord {
    pub device_uuid: [u8; 16],
    pub path: Vec<u8>,
}

impl DeviceRecord {
    /// A record of `path` (at most [`MAX_PATH`] bytes).
    pub fn new(device_uuid: [u8; 16], path: &[u8]) -> Option<DeviceRecord> {
        (path.len() <= MAX_PATH && !path.is_empty()).then(|| DeviceRecord {
            device_uuid,
            path: path.to_vec(),
        })
    }

    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut b = [0u8; RECORD_LEN];
        b[0..8].copy_from_slice(&RECORD_MAGIC);
        b[8..24].copy_from_slice(&self.device_uuid);
        put32(&mut b, 24, self.path.len() as u32);
        b[28..28 + self.path.len()].copy_from_slice(&self.path);
        let crc = super::crc::of(&b[..RECORD_LEN - 4]);
        put32(&mut b, RECORD_LEN - 4, crc);
        b
    }

    pub fn decode(b: &[u8; RECORD_LEN]) -> Option<DeviceRecord> {
        let len = get32(b, 24) as usize;
        let ok = b[0..8] == RECORD_MAGIC
            && super::crc::of(&b[..RECORD_LEN - 4]) == get32(b, RECORD_LEN - 4)
            && (1..=MAX_PATH).contains(&len);
        ok.then(|| DeviceRecord {
            device_uuid: b[8..24].try_into().expect("16 bytes"),
            path: b[28..28 + len].to_vec(),
        })
    }
}

/// A uuid as text: 32 hex digits in groups, as `lynxfs info` prints the pool's.
pub fn uuid_text(u: &[u8; 16]) -> String {
    let hex: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> DeviceHeader {
        DeviceHeader::new([1; 16], [2; 16], 1000, 5 * BLOCK, 42)
    }

    #[test]
    fn the_header_round_trips() {
        let h = sample();
        assert_eq!(DeviceHeader::decode(&h.encode()), Ok(h.clone()));
        assert_eq!(h.device_len(), DATA_OFF + 1005 * BLOCK);
        assert_eq!(h.data_blocks(), 1000);
    }

    #[test]
    fn every_single_bit_flip_is_caught() {
        let good = sample().encode();
        for bit in 0..HEADER_LEN * 8 {
            let mut b = good;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(DeviceHeader::decode(&b).is_err(), "bit {bit} flip accepted");
        }
    }

    #[test]
    fn a_newer_version_is_named_whatever_its_checksum() {
        let mut b = sample().encode();
        b[8..12].copy_from_slice(&7u32.to_le_bytes());
        assert_eq!(DeviceHeader::decode(&b), Err(HeaderProblem::Version(7)));
    }

    #[test]
    fn overlapping_areas_are_refused() {
        let mut h = sample();
        h.export_off = h.data_off + BLOCK;
        assert!(matches!(
            DeviceHeader::decode(&h.encode()),
            Err(HeaderProblem::Shape(_))
        ));
    }

    #[test]
    fn the_record_round_trips_and_refuses_damage() {
        let r = DeviceRecord::new([3; 16], b"/dev/sdb").unwrap();
        let b = r.encode();
        assert_eq!(DeviceRecord::decode(&b), Some(r));
        let mut bad = b;
        bad[30] ^= 1;
        assert_eq!(DeviceRecord::decode(&bad), None);
        assert!(DeviceRecord::new([3; 16], &[b'x'; MAX_PATH + 1]).is_none());
    }
}
