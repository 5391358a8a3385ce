//! The 320-byte directory entry. Its first word is the (valid, time) word: setting the
//! valid bit is a create's commit point, clearing it is an unlink's.

pub const STATE: u64 = 0; // VALID bit | entry time (ns since the Unix epoch)
pub const INO: u64 = 8;
pub const PARENT: u64 = 16;
pub const NAME_LEN: u64 = 24; // u16 name length | u8 file type (DT_*) | 5 bytes zero
pub const HASH: u64 = 32; // the name's hash, as the index uses it
pub const SLOT: u64 = 40; // pool offset of the directory-log slot that holds it
/// CWON pools (`INCOMPAT_CWON`): tag (high half) | CRC32C (low half), see `log::cwon`.
pub const CHECK: u64 = 48;
/// The exact state word this dentry commits with (VALID | its time): unique per
/// incarnation, so recovery can tell its own words from an earlier incarnation's.
pub const BORN: u64 = 56;
pub const NAME: u64 = 64;
pub const NAME_MAX: usize = 255;

pub const VALID: u64 = 1 << 63;

pub fn state_word(valid: bool, time_ns: u64) -> u64 {
    (time_ns & !VALID) | if valid { VALID } else { 0 }
}

/// Everything but the state word, as written before the commit.
pub struct DentryImage<'a> {
    pub ino: u64,
    pub parent: u64,
    pub dtype: u8,
    pub hash: u64,
    pub slot: u64,
    /// The state word it will commit with ([`BORN`]).
    pub born: u64,
    pub name: &'a [u8],
}

impl DentryImage<'_> {
    /// Bytes 8.. of the dentry, up to the end of the name, encoded into `out` (on
    /// the caller's stack: every create, link and rename writes one).
    pub fn encode_body<'b>(&self, out: &'b mut [u8; BODY_MAX]) -> &'b [u8] {
        assert!(self.name.len() <= NAME_MAX);
        let mut put = |off: u64, v: u64| {
            let o = (off - INO) as usize;
            out[o..o + 8].copy_from_slice(&v.to_le_bytes())
        };
        put(INO, self.ino);
        put(PARENT, self.parent);
        put(NAME_LEN, self.name.len() as u64 | (self.dtype as u64) << 16);
        put(HASH, self.hash);
        put(SLOT, self.slot);
        put(CHECK, 0);
        put(BORN, self.born);
        let n = (NAME - INO) as usize;
        out[n..n + self.name.len()].copy_from_slice(self.name);
        &out[..n + self.name.len()]
    }
}

/// The longest body [`DentryImage::encode_body`] writes.
pub const BODY_MAX: usize = (NAME - INO) as usize + NAME_MAX;

pub fn split_name_len(w: u64) -> (usize, u8) {
    ((w & 0xffff) as usize, (w >> 16) as u8)
}
