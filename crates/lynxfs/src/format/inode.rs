//! The 256-byte inode. Fields that change alone are whole 8-byte words, so each such
//! change is one atomic store; the block map lives in two areas (A, B) selected by one
//! bit of the `map` word, so a new map is written beside the live one and published by
//! a single store (copy-on-write without leaving the inode).

use crate::time::Timestamp;

pub const INO: u64 = 0; // u64: its own number while in use, 0 when free
pub const MODE: u64 = 8; // u32 mode (type and permission bits) | u32 flags
pub const OWNER: u64 = 16; // u32 uid | u32 gid: chown is one store
pub const NLINK: u64 = 24;
pub const SIZE: u64 = 32;
pub const ATIME: u64 = 40; // times: see `time_word` (ns since the epoch, or extended)
pub const MTIME: u64 = 48;
pub const CTIME: u64 = 56;
pub const BTIME: u64 = 64;
pub const GENERATION: u64 = 72;
pub const DENTRY: u64 = 80; // back pointer: pool offset of its (first) dentry
pub const TIME_HI: u64 = 88; // u32 atime high | u32 mtime high, see `time_word`
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
    /// Speculative preallocation: mapped file blocks at or past this one and past the
    /// end of the file were reserved by a growing write, not asked for (trimmed at
    /// last close, truncate and recovery; see `data::rw`). 0: none.
    pub spec: u32,
}

impl MapWord {
    pub fn encode(self) -> u64 {
        self.area as u64
            | (self.kind as u64) << 8
            | (self.count as u64) << 16
            | (self.spec as u64) << 32
    }
    pub fn decode(w: u64) -> Option<MapWord> {
        let m = MapWord {
            area: w as u8,
            kind: (w >> 8) as u8,
            count: (w >> 16) as u16,
            spec: (w >> 32) as u32,
        };
        let ok = m.area <= 1 && m.kind <= 1 && (m.kind == 1 || m.count as usize <= INLINE_EXTENTS);
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

/// Bit 63 of a time word: set in an extended time (with a nonzero high half).
const EXTENDED: u64 = 1 << 63;
const NSEC_BITS: u32 = 30;

/// How a time is stored: a time word (atime, mtime, ctime, btime) and, for atime and
/// mtime, a 32-bit high half in the `TIME_HI` word (atime low, mtime high half).
///
/// A time from 1970 to 2554 is *plain*: the word holds nanoseconds since the epoch,
/// the high half 0 (so every old pool means what it meant). Any other is *extended*:
/// the word holds bit 63, the low 32 bits of the seconds in bits 30..62 and the
/// nanoseconds in bits 0..30; the high half the seconds' high 32 bits, which are never
/// 0 for such a time (before 1970 they are all ones, after 2554 above 3). A word is
/// read as extended only with a nonzero high half, so a writer that stores the clock
/// into the word alone (a write's mtime) needs not clear the half.
pub fn time_word(t: Timestamp) -> (u64, u32) {
    match t.as_ns() {
        Some(ns) => (ns, 0),
        None => {
            let low = t.sec as u32 as u64;
            let high = (t.sec >> 32) as u32;
            (EXTENDED | low << NSEC_BITS | u64::from(t.nsec), high)
        }
    }
}

/// The time a word and its high half store (see `time_word`).
pub fn time_of(word: u64, high: u32) -> Timestamp {
    if word & EXTENDED == 0 || high == 0 {
        return Timestamp::from_ns(word);
    }
    let low = (word >> NSEC_BITS) as u32;
    let nsec = (word & ((1 << NSEC_BITS) - 1)) as u32;
    Timestamp {
        sec: i64::from(high as i32) << 32 | i64::from(low),
        // A damaged word can hold more than a second of nanoseconds: clamp.
        nsec: nsec.min(999_999_999),
    }
}

/// Whether `word` may need its high half to be read (see `time_word`).
pub fn time_may_extend(word: u64) -> bool {
    word & EXTENDED != 0
}

/// `TIME_HI` with atime's (`mtime` false) or mtime's half replaced by `high`.
pub fn time_hi_with(hi: u64, mtime: bool, high: u32) -> u64 {
    if mtime {
        (hi & 0xffff_ffff) | u64::from(high) << 32
    } else {
        (hi & !0xffff_ffff) | u64::from(high)
    }
}

/// The atime and mtime high halves of a `TIME_HI` word.
pub fn time_hi_split(hi: u64) -> (u32, u32) {
    (hi as u32, (hi >> 32) as u32)
}

pub fn owner_word(uid: u32, gid: u32) -> u64 {
    uid as u64 | (gid as u64) << 32
}
pub fn owner_split(w: u64) -> (u32, u32) {
    (w as u32, (w >> 32) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_through_their_words() {
        for (sec, nsec) in [
            (0, 0),
            (1_700_000_000, 5),
            (-1, 999_999_999),
            (-315_619_200, 0), // 1960-01-01
            (i32::MIN as i64, 0),
            (i64::MIN, 0),
            (i64::MAX, 999_999_999),
            (18_446_744_073, 709_551_615), // the last plain instant
            (18_446_744_073, 709_551_616), // the first extended one after it
            (4_294_967_296, 1),
        ] {
            let t = Timestamp::new(sec, nsec).unwrap();
            let (word, high) = time_word(t);
            assert_eq!(time_of(word, high), t, "{sec}.{nsec}");
        }
    }

    #[test]
    fn old_words_and_clock_words_are_plain_whatever_the_high_half() {
        // An old pool's word (high half 0) and a word the clock wrote beside a stale
        // half both mean nanoseconds since the epoch.
        assert_eq!(time_of(u64::MAX, 0), Timestamp::from_ns(u64::MAX));
        assert_eq!(time_of(1_000, 0xffff_ffff), Timestamp::from_ns(1_000));
    }

    #[test]
    fn each_time_keeps_its_own_half() {
        let hi = time_hi_with(time_hi_with(0, false, 7), true, 9);
        assert_eq!(time_hi_split(hi), (7, 9));
        assert_eq!(time_hi_split(time_hi_with(hi, false, 0)), (0, 9));
    }
}
