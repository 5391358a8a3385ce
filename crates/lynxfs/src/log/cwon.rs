//! Consistency without ordering (CWON, docs/CONSISTENCY.md "create"): on a pool with
//! the `INCOMPAT_CWON` feature, a create writes its dentry (valid bit set), slot,
//! inode and parent times under one fence, so any subset of those 8-byte stores may
//! reach the media. Recovery tells a whole create from a torn one by the dentry's
//! check word (`dentry::CHECK`):
//!
//! - every dentry carries `BORN`, the exact state word it commits with, and a CRC32C
//!   over its body (inode number, parent, name length and type, hash, slot, `BORN`,
//!   name). `BORN` is unique per dentry incarnation (it holds the time), so no stale
//!   word of an earlier incarnation can pass for this one;
//! - a *fresh* check (tag `FRESH`, written by a create) also covers the new inode's
//!   words (all but the link count, which recovery recounts), a symlink's target and
//!   an inherited attribute set: it proves that every store of the create landed;
//! - the first later change of that inode (or of a directory's contents) first makes
//!   the check *settled* (the body alone) and fences that store ([`settle`]): from
//!   then on the inode's words may change freely. A settle stores tag `SETTLING`,
//!   fences, then stores tag `SETTLED` (recovery takes both alike), so a thread that
//!   reads `SETTLED` knows the settle is durable; one that reads `SETTLING` (another
//!   thread's, perhaps not yet fenced) stores and fences it again itself.
//!
//! A valid dentry whose state word is not its `BORN`, or whose check is neither a
//! matching fresh nor a matching settled one, is a torn create (or link, rename),
//! which recovery drops.

use crate::format::{crc, dentry, inode, Layout, BLOCK};
use crate::pmem::{Backend, Pm};

/// High half of a check word written by a create: the CRC covers the inode too.
pub const FRESH: u64 = 0x4652_5348 << 32;
/// High half of a check word covering the dentry alone, known durable.
pub const SETTLED: u64 = 0x5345_5444 << 32;
/// As [`SETTLED`], stored by a settle before its fence (maybe not durable yet).
pub const SETTLING: u64 = 0x5345_5447 << 32;
const TAG: u64 = 0xffff_ffff << 32;

/// The CRC32C of dentry `d`'s body (words `INO..=SLOT`, `BORN`, the name), or `None`
/// when its name length is impossible.
fn body_crc<B: Backend>(pm: &Pm<B>, d: u64) -> Option<u32> {
    let (len, _) = dentry::split_name_len(pm.load_u64(d + dentry::NAME_LEN));
    if len > dentry::NAME_MAX {
        return None;
    }
    // Read as words, straight into the CRC's input: every create computes this, and
    // byte copies of the name (and a heap copy before them) cost more than the CRC.
    // The name field runs to the dentry's end, so its last word is whole.
    let mut words = [0u64; 6 + dentry::NAME_MAX.div_ceil(8)];
    for (w, off) in words.iter_mut().zip([
        dentry::INO,
        dentry::PARENT,
        dentry::NAME_LEN,
        dentry::HASH,
        dentry::SLOT,
        dentry::BORN,
    ]) {
        *w = pm.load_u64(d + off);
    }
    let name_words = len.div_ceil(8);
    for i in 0..name_words {
        words[6 + i] = pm.load_u64(d + dentry::NAME + 8 * i as u64);
    }
    let whole = 6 + len / 8;
    let crc = crc::append_words(0, &words[..whole]);
    let tail = len % 8;
    if tail == 0 {
        return Some(crc);
    }
    Some(crc::append(crc, &words[whole].to_le_bytes()[..tail]))
}

/// The settled check word of dentry `d` as it is in the pool.
pub fn settled_check<B: Backend>(pm: &Pm<B>, d: u64) -> Option<u64> {
    body_crc(pm, d).map(|c| SETTLED | c as u64)
}

/// The CRC [`body_crc`] finds once `d`'s body is stored (as
/// `DentryImage::encode_body` encodes it): the writer of a new dentry computes it
/// from what it wrote instead of reading it back.
pub fn body_crc_of(d: &dentry::DentryImage<'_>) -> u32 {
    let name_len = d.name.len() as u64 | (d.dtype as u64) << 16;
    let words = [d.ino, d.parent, name_len, d.hash, d.slot, d.born];
    crc::append(crc::append_words(0, &words), d.name)
}

/// [`settled_check`] of a dentry whose body CRC is `body_crc`.
pub fn settled_word(body_crc: u32) -> u64 {
    SETTLED | body_crc as u64
}

/// [`fresh_check`] of a create whose dentry's body CRC is `body_crc` and whose inode
/// is the image `img` with its link count zero, and that has no symlink target and
/// no attribute set (which `fresh_check` reads from the pool): the create computes
/// it from the bytes it wrote.
pub fn fresh_word(body_crc: u32, img: &[u8; crate::format::layout::INODE_SIZE as usize]) -> u64 {
    debug_assert!(img[inode::NLINK as usize..inode::NLINK as usize + 8] == [0; 8]);
    FRESH | crc::append(body_crc, img) as u64
}

/// `check` with tag `SETTLING` read as `SETTLED`.
fn as_settled(check: u64) -> u64 {
    if check & TAG == SETTLING {
        SETTLED | (check & !TAG)
    } else {
        check
    }
}

/// The fresh check word of dentry `d` and its inode `ino` as they are in the pool:
/// the body, the inode's 256 bytes but the link count, a symlink's target and the
/// blocks of an attribute set. `None` when the inode's map or attribute pointer is
/// impossible (a torn create).
pub fn fresh_check<B: Backend>(pm: &Pm<B>, l: &Layout, d: u64, ino: u64) -> Option<u64> {
    if !l.ino_valid(ino) {
        return None;
    }
    let mut crc = body_crc(pm, d)?;
    let at = l.inode_addr(ino);
    let mut img = [0u8; crate::format::layout::INODE_SIZE as usize];
    pm.read(at, &mut img);
    img[inode::NLINK as usize..inode::NLINK as usize + 8].fill(0);
    crc = crc::append(crc, &img);
    let mode = pm.load_u64(at + inode::MODE) as u32;
    if mode & libc::S_IFMT == libc::S_IFLNK {
        crc = crc::append(crc, &symlink_target(pm, l, at)?);
    }
    let x = pm.load_u64(at + inode::XATTR);
    if x != 0 {
        let set = crate::format::xattr::read_set(pm, l, x).ok()?;
        for b in set.blocks {
            crc = crc::append(crc, &pm.read_vec(l.block_addr(b), BLOCK as usize));
        }
    }
    Some(FRESH | crc as u64)
}

/// A new symlink's target (one block, inline map), or `None` if its words are not
/// those of one.
fn symlink_target<B: Backend>(pm: &Pm<B>, l: &Layout, at: u64) -> Option<Vec<u8>> {
    let size = pm.load_u64(at + inode::SIZE);
    if size == 0 || size >= BLOCK {
        return None;
    }
    let ext = crate::format::extents::read_map(pm, l, at, &mut Vec::new()).ok()?;
    let first = ext.first().filter(|e| e.lblk == 0 && e.len >= 1)?;
    (first.pblk < l.data_blocks).then(|| pm.read_vec(l.block_addr(first.pblk), size as usize))
}

/// What recovery makes of a valid dentry's check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A create whose every store landed, not changed since: settle it.
    Fresh,
    /// Its body is whole and its create (if any) was durable.
    Settled,
    /// Some store of the operation that made it valid did not land.
    Torn,
}

/// Judge valid dentry `d` (naming `ino`) on a CWON pool.
pub fn verdict<B: Backend>(pm: &Pm<B>, l: &Layout, d: u64, ino: u64) -> Verdict {
    if pm.load_u64(d + dentry::STATE) != pm.load_u64(d + dentry::BORN) {
        return Verdict::Torn;
    }
    let check = as_settled(pm.load_u64(d + dentry::CHECK));
    match check & TAG {
        FRESH if fresh_check(pm, l, d, ino) == Some(check) => Verdict::Fresh,
        SETTLED if settled_check(pm, d) == Some(check) => Verdict::Settled,
        _ => Verdict::Torn,
    }
}

/// Before the first change of inode `ino` after its create: make its dentry's check
/// settled and fence that store, so the change cannot make a durable create look
/// torn. Does nothing (a few loads) once settled. The check word changes only by
/// compare-and-swap from the value read, so a dentry freed and reused meanwhile
/// (a rename or unlink of that name on another thread) is never stored to: its
/// word then holds another incarnation's check (or the old one, which that
/// incarnation's own commit store replaces, and whose CRC over the old `BORN`
/// cannot match the new body).
///
/// True when `ino`'s dentry is known durably settled on return (its tag read
/// `SETTLED`, or this call's swap fenced), or `ino` has no dentry (the root): no
/// later settle of this incarnation of `ino` has anything to do, since only a
/// create writes a fresh check, and only for a new inode.
pub fn settle<B: Backend>(pm: &Pm<B>, l: &Layout, ino: u64) -> bool {
    // A failed swap means another thread changed the word: look again (bounded:
    // each round sees a settle, another incarnation or a settled word).
    for _ in 0..4 {
        let Some(d) = l
            .ino_valid(ino)
            .then(|| pm.load_u64(l.inode_addr(ino) + inode::DENTRY))
        else {
            return false;
        };
        if l.dentry_id(d).is_none() {
            return d == 0;
        }
        let check = pm.load_u64(d + dentry::CHECK);
        let tag = check & TAG;
        if (tag != FRESH && tag != SETTLING)
            || pm.load_u64(d + dentry::INO) != ino
            || pm.load_u64(d + dentry::STATE) & dentry::VALID == 0
        {
            return tag == SETTLED;
        }
        let Some(c) = settled_check(pm, d) else {
            return false;
        };
        let settling = SETTLING | (c & !TAG);
        let mut b = pm.batch();
        // A SETTLING word may be another thread's, not yet fenced: swap it for itself
        // to flush and fence it here.
        if b.cas_u64(d + dentry::CHECK, check, settling).is_ok() {
            let _ = b.persist();
            // Durable now: later readers of this tag may skip the fence.
            let _ = pm.cas_volatile(d + dentry::CHECK, settling, c);
            return true;
        }
    }
    false
}
