//! Extended attributes, stored with the inode in one 4 KiB block: a u64 count of bytes
//! used, then entries (u8 name length, u16 value length, name, value). A change
//! writes a new block and publishes it with one store of the inode's xattr word
//! (copy-on-write), then frees the old block. A change that also sets other inode
//! words (an access ACL and the mode kept in step) publishes the xattr word and those
//! words in one journal transaction ([`store_with`]).

use crate::error::{errno, Result};
use crate::format::{inode, BLOCK};
use crate::pmem::Backend;
use crate::pool::Pool;
use crate::time::now_ns;

pub const NAME_MAX: usize = 255;
/// Linux's limit on one value (XATTR_SIZE_MAX).
pub const SIZE_MAX: usize = 65536;
const HEADER: usize = 8;

pub const CREATE: i32 = libc::XATTR_CREATE;
pub const REPLACE: i32 = libc::XATTR_REPLACE;

/// An inode's attributes, (name, value) in stored order.
pub type Attrs = Vec<(Vec<u8>, Vec<u8>)>;

/// All of an inode's attributes.
pub fn load<B: Backend>(pool: &Pool<B>, ino: u64) -> Result<Attrs> {
    let blk = pool.pm.load_u64(pool.layout.inode_addr(ino) + inode::XATTR);
    if blk == 0 {
        return Ok(Vec::new());
    }
    pool.layout.block_of(blk).ok_or(errno::EIO)?;
    let raw = pool.pm.read_vec(blk, BLOCK as usize);
    let used = u64::from_le_bytes(raw[..8].try_into().expect("8")) as usize;
    if used > raw.len() - HEADER {
        return Err(errno::EIO);
    }
    let mut out = Vec::new();
    let mut p = HEADER;
    while p < HEADER + used {
        if p + 3 > raw.len() {
            return Err(errno::EIO);
        }
        let nl = raw[p] as usize;
        let vl = u16::from_le_bytes([raw[p + 1], raw[p + 2]]) as usize;
        let (ns, vs) = (p + 3, p + 3 + nl);
        if vs + vl > HEADER + used {
            return Err(errno::EIO);
        }
        out.push((raw[ns..vs].to_vec(), raw[vs..vs + vl].to_vec()));
        p = vs + vl;
    }
    Ok(out)
}

fn encode(attrs: &Attrs) -> Result<Vec<u8>> {
    let mut b = vec![0u8; HEADER];
    for (n, v) in attrs {
        b.push(n.len() as u8);
        b.extend_from_slice(&(v.len() as u16).to_le_bytes());
        b.extend_from_slice(n);
        b.extend_from_slice(v);
    }
    if b.len() > BLOCK as usize {
        return Err(errno::ENOSPC);
    }
    let used = (b.len() - HEADER) as u64;
    b[..8].copy_from_slice(&used.to_le_bytes());
    Ok(b)
}

/// Writes `attrs` (not empty) to a new block, flushed but not yet fenced or
/// published; returns its pool offset.
pub fn write_block<B: Backend>(pool: &Pool<B>, lane: u32, attrs: &Attrs) -> Result<u64> {
    let bytes = encode(attrs)?;
    let runs = pool.alloc.blocks.alloc(lane, 1).ok_or(errno::ENOSPC)?;
    let addr = pool.layout.block_addr(runs[0].0);
    let mut b = pool.pm.batch();
    b.write(addr, &bytes);
    b.flushed();
    Ok(addr)
}

fn store<B: Backend>(pool: &Pool<B>, ino: u64, lane: u32, attrs: &Attrs) -> Result<()> {
    store_with(pool, ino, lane, attrs, &[])
}

/// Writes `attrs` as `ino`'s new attribute block (none when empty) and publishes it
/// together with the inode words `words` ((pool offset, value) pairs) and a new
/// ctime: with one 8-byte store when `words` is empty, else in one journal
/// transaction, which is then the commit point. The old block is freed after.
pub fn store_with<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    lane: u32,
    attrs: &Attrs,
    words: &[(u64, u64)],
) -> Result<()> {
    let at = pool.layout.inode_addr(ino);
    let old = pool.pm.load_u64(at + inode::XATTR);
    let new = if attrs.is_empty() {
        0
    } else {
        write_block(pool, lane, attrs)?
    };
    if words.is_empty() {
        let mut b = pool.pm.batch();
        b.write_u64(at + inode::CTIME, now_ns());
        let ready = b.persist();
        drop(pool.pm.commit_u64(at + inode::XATTR, new, ready));
    } else {
        let mut all = vec![(at + inode::XATTR, new), (at + inode::CTIME, now_ns())];
        all.extend_from_slice(words);
        if let Err(e) = pool.journals.commit(&pool.pm, &pool.layout, lane, &all) {
            if let Some(blk) = pool.layout.block_of(new) {
                pool.alloc.blocks.free(blk, 1);
            }
            return Err(e);
        }
    }
    if let Some(blk) = pool.layout.block_of(old) {
        pool.alloc.blocks.free(blk, 1);
    }
    Ok(())
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(errno::ERANGE);
    }
    Ok(())
}

pub fn get<B: Backend>(pool: &Pool<B>, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
    check_name(name)?;
    load(pool, ino)?
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .ok_or(errno::ENODATA)
}

pub fn list<B: Backend>(pool: &Pool<B>, ino: u64) -> Result<Vec<Vec<u8>>> {
    Ok(load(pool, ino)?.into_iter().map(|(n, _)| n).collect())
}

pub fn set<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    lane: u32,
    name: &[u8],
    value: &[u8],
    flags: i32,
) -> Result<()> {
    let mut attrs = load(pool, ino)?;
    put(&mut attrs, name, value, flags)?;
    store(pool, ino, lane, &attrs)
}

/// Sets `name` to `value` in `attrs`, with setxattr's flags and limits.
pub fn put(attrs: &mut Attrs, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
    check_name(name)?;
    if value.len() > SIZE_MAX {
        return Err(errno::E2BIG);
    }
    if flags & !(CREATE | REPLACE) != 0 {
        return Err(errno::EINVAL);
    }
    let pos = attrs.iter().position(|(n, _)| n == name);
    match (pos, flags) {
        (Some(_), f) if f & CREATE != 0 => return Err(errno::EEXIST),
        (None, f) if f & REPLACE != 0 => return Err(errno::ENODATA),
        (Some(i), _) => attrs[i].1 = value.to_vec(),
        (None, _) => attrs.push((name.to_vec(), value.to_vec())),
    }
    Ok(())
}

pub fn remove<B: Backend>(pool: &Pool<B>, ino: u64, lane: u32, name: &[u8]) -> Result<()> {
    check_name(name)?;
    let mut attrs = load(pool, ino)?;
    let pos = attrs
        .iter()
        .position(|(n, _)| n == name)
        .ok_or(errno::ENODATA)?;
    attrs.remove(pos);
    store(pool, ino, lane, &attrs)
}
