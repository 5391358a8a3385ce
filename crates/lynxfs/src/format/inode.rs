//! The 256-byte inode. Fields that change alone are whole 8-byte words, so each such
//! change is one atomic store; the block map lives in two areas (A, B) selected by one
//! bit of the `map` word, so a new map is written beside the live one and published by
//! a single store (copy-on-write without leaving the inode).

pub const INO: u64 = 0; // u64: its own number while in use, 0 when free
pub const MODE: u64 = 8; // u32 mode (type and permission bits) | u32 flags
pub const OWNER: u64 = 16; // u32 uid | u32 gid: chown is one store
pub const NLINK: u64 = 24;
pub const SIZE: u64 = 32;
pub const ATIME: u64 = 40; // times: nanoseconds since the Unix epoch
pub const MTIME: u64 = 48;
pub const CTIME: u64 = 56;
pub const BTIME: u64 = 64;
pub const GENERATION: u64 = 72;
pub const DENTRY: u64 = 80; // back pointer: pool offset of its (first) dentry
pub const NV_POINTER: u64 = 88; // unused (was a DRAM pointer); written 0
pub const XATTR: u64 = 96; // pool offset of the xattr head block, 0 when none
pub const RDEV: u64 = 104;
pub const MAP: u64 = 112; // block map header, see `MapWord`
pub const DIR_LOG: u64 = 120; // directories: pool offset of the first log page
pub const AREA_A: u64 = 128;
pub const AREA_B: u64 = 192;
pub const AREA_LEN: u64 = 64;
pub const EXTENT_LEN: u64 = 16;
pub const INLINE_EXTENTS: usize = (AREA_LEN / EXTENT_LEN) as usize;

/// The `map` word: which area is live, what it holds, how many entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MapWord {
    /// 0: area A is live, 1: area B.
    pub area: u8,
    /// 0: the area holds up to four extents; 1: it holds the root of an extent tree.
    pub kind: u8,
    /// Extents in the area (kind 0) or tree depth (kind 1).
    pub count: u16,
}

impl MapWord {
    pub fn encode(self) -> u64 {
        self.area as u64 | (self.kind as u64) << 8 | (self.count as u64) << 16
    }
    pub fn decode(w: u64) -> Option<MapWord> {
        let m = MapWord {
            area: w as u8,
            kind: (w >> 8) as u8,
            count: (w >> 16) as u16,
        };
        let ok = m.area <= 1
            && m.kind <= 1
            && w >> 32 == 0
            && (m.kind == 1 || m.count as usize <= INLINE_EXTENTS);
        ok.then_some(m)
    }
    pub fn area_off(self) -> u64 {
        if self.area == 0 {
            AREA_A
        } else {
            AREA_B
        }
    }
    pub fn other_area_off(self) -> u64 {
        if self.area == 0 {
            AREA_B
        } else {
            AREA_A
        }
    }
}

/// One run of blocks: file blocks `[lblk, lblk+len)` live at data blocks `[pblk, ...)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Extent {
    pub lblk: u32,
    pub len: u32,
    pub pblk: u64,
}

impl Extent {
    pub fn encode(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&self.lblk.to_le_bytes());
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.pblk.to_le_bytes());
        b
    }
    pub fn decode(b: &[u8]) -> Extent {
        Extent {
            lblk: u32::from_le_bytes(b[0..4].try_into().expect("4")),
            len: u32::from_le_bytes(b[4..8].try_into().expect("4")),
            pblk: u64::from_le_bytes(b[8..16].try_into().expect("8")),
        }
    }
    pub fn end(self) -> u64 {
        self.lblk as u64 + self.len as u64
    }
}

/// A whole inode as written at creation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InodeImage {
    pub ino: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u64,
    pub size: u64,
    pub atime: u64,
    pub mtime: u64,
    pub ctime: u64,
    pub btime: u64,
    pub generation: u64,
    pub dentry: u64,
    pub rdev: u64,
}

impl InodeImage {
    pub fn encode(&self) -> [u8; 256] {
        let mut b = [0u8; 256];
        let mut put =
            |off: u64, v: u64| b[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes());
        put(INO, self.ino);
        put(MODE, self.mode as u64);
        put(OWNER, owner_word(self.uid, self.gid));
        put(NLINK, self.nlink);
        put(SIZE, self.size);
        put(ATIME, self.atime);
        put(MTIME, self.mtime);
        put(CTIME, self.ctime);
        put(BTIME, self.btime);
        put(GENERATION, self.generation);
        put(DENTRY, self.dentry);
        put(RDEV, self.rdev);
        b
    }
}

pub fn owner_word(uid: u32, gid: u32) -> u64 {
    uid as u64 | (gid as u64) << 32
}
pub fn owner_split(w: u64) -> (u32, u32) {
    (w as u32, (w >> 32) as u32)
}
