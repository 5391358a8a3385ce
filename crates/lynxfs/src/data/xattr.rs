//! Extended attributes. An inode's xattr word names a head block. When the entries
//! fit in it, the head holds them all: a u64 count of bytes used, then entries (u8
//! name length, u16 value length, name, value). A larger set is chained: the head's
//! first word has bit 63 set and holds the entries' length in its low bits, the words
//! after it name the continuation blocks, and the entries (u8 name length, u32 value
//! length, name, value) run through those blocks in order. A change writes a new head
//! (and continuation blocks) and publishes them with one store of the inode's xattr
//! word (copy-on-write), then frees the old blocks. A change that also sets other
//! inode words (an access ACL and the mode kept in step) publishes the xattr word and
//! those words in one journal transaction ([`store_with`]).

use crate::error::{errno, Result};
use crate::format::{inode, Layout, BLOCK};
use crate::pmem::{Backend, Pm};
use crate::pool::Pool;
use crate::time::now_ns;

pub const NAME_MAX: usize = 255;
/// Linux's limit on one value (XATTR_SIZE_MAX).
pub const SIZE_MAX: usize = 65536;
const HEADER: usize = 8;
/// Bit 63 of the head's first word: the entries live in continuation blocks.
const CHAINED: u64 = 1 << 63;
/// Continuation blocks one head can name: 511, about 2 MiB of attributes.
pub const MAX_CHAIN: usize = (BLOCK as usize - HEADER) / 8;

pub const CREATE: i32 = libc::XATTR_CREATE;
pub const REPLACE: i32 = libc::XATTR_REPLACE;

/// An inode's attributes, (name, value) in stored order.
pub type Attrs = Vec<(Vec<u8>, Vec<u8>)>;

/// An attribute set as stored: the data blocks it occupies (head first) and its
/// entries.
pub struct Stored {
    pub blocks: Vec<u64>,
    pub attrs: Attrs,
}

/// Reads and checks the attribute set whose head block is at pool offset `head`;
/// the error says what is wrong (for fsck and recovery reports).
pub fn read_set<B: Backend>(
    pm: &Pm<B>,
    l: &Layout,
    head: u64,
) -> std::result::Result<Stored, String> {
    let hb = l
        .block_of(head)
        .ok_or(format!("xattr pointer {head:#x} is not a data block"))?;
    let raw = pm.read_vec(head, BLOCK as usize);
    let word = u64::from_le_bytes(raw[..8].try_into().expect("8"));
    if word & CHAINED == 0 {
        let used = word as usize;
        if used > raw.len() - HEADER {
            return Err(format!("xattr block at {head:#x} claims {used} bytes"));
        }
        let attrs = parse(&raw[HEADER..HEADER + used], 2, head)?;
        return Ok(Stored {
            blocks: vec![hb],
            attrs,
        });
    }
    let used = (word & !CHAINED) as usize;
    let n = used.div_ceil(BLOCK as usize);
    if n > MAX_CHAIN {
        return Err(format!("xattr block at {head:#x} claims {used} bytes"));
    }
    let mut blocks = vec![hb];
    let mut stream = Vec::with_capacity(n * BLOCK as usize);
    for i in 0..n {
        let at = HEADER + 8 * i;
        let next = u64::from_le_bytes(raw[at..at + 8].try_into().expect("8"));
        let b = l.block_of(next).ok_or(format!(
            "xattr block at {head:#x}: link {next:#x} is not a data block"
        ))?;
        if blocks.contains(&b) {
            return Err(format!("xattr block at {head:#x} names block {b} twice"));
        }
        blocks.push(b);
        stream.extend_from_slice(&pm.read_vec(next, BLOCK as usize));
    }
    let attrs = parse(&stream[..used], 4, head)?;
    Ok(Stored { blocks, attrs })
}

/// Entries packed in `bytes`, each with a `vlen`-byte value length.
fn parse(bytes: &[u8], vlen: usize, head: u64) -> std::result::Result<Attrs, String> {
    let mut out = Vec::new();
    let mut p = 0;
    while p < bytes.len() {
        let (ns, end) = (p + 1 + vlen, bytes.len());
        if ns > end {
            return Err(format!("xattr set at {head:#x} has a torn entry"));
        }
        let nl = bytes[p] as usize;
        let mut len = [0u8; 8];
        len[..vlen].copy_from_slice(&bytes[p + 1..ns]);
        let vl = u64::from_le_bytes(len) as usize;
        let vs = ns + nl;
        if nl == 0 || vl > SIZE_MAX || vs + vl > end {
            return Err(format!("xattr set at {head:#x} has a bad entry"));
        }
        out.push((bytes[ns..vs].to_vec(), bytes[vs..vs + vl].to_vec()));
        p = vs + vl;
    }
    Ok(out)
}

/// The data blocks of `ino`'s attribute set (none when it has none or it is
/// unreadable).
pub fn blocks<B: Backend>(pool: &Pool<B>, ino: u64) -> Vec<u64> {
    let head = pool.pm.load_u64(pool.layout.inode_addr(ino) + inode::XATTR);
    match head {
        0 => Vec::new(),
        h => read_set(&pool.pm, &pool.layout, h).map_or(Vec::new(), |s| s.blocks),
    }
}

/// All of an inode's attributes.
pub fn load<B: Backend>(pool: &Pool<B>, ino: u64) -> Result<Attrs> {
    let head = pool.pm.load_u64(pool.layout.inode_addr(ino) + inode::XATTR);
    if head == 0 {
        return Ok(Vec::new());
    }
    read_set(&pool.pm, &pool.layout, head)
        .map(|s| s.attrs)
        .map_err(|_| errno::EIO)
}

/// The entries with `vlen`-byte value lengths.
fn entries(attrs: &Attrs, vlen: usize) -> Vec<u8> {
    let mut b = Vec::new();
    for (n, v) in attrs {
        b.push(n.len() as u8);
        b.extend_from_slice(&(v.len() as u64).to_le_bytes()[..vlen]);
        b.extend_from_slice(n);
        b.extend_from_slice(v);
    }
    b
}

/// The head block alone when the set fits in it (and no value needs more than 16
/// bits of length), else the head's entry stream for continuation blocks.
enum Encoded {
    Single(Vec<u8>),
    Chained(Vec<u8>),
}

fn encode(attrs: &Attrs) -> Result<Encoded> {
    let fits16 = attrs.iter().all(|(_, v)| v.len() <= u16::MAX as usize);
    if fits16 {
        let e = entries(attrs, 2);
        if e.len() <= BLOCK as usize - HEADER {
            let mut b = (e.len() as u64).to_le_bytes().to_vec();
            b.extend_from_slice(&e);
            return Ok(Encoded::Single(b));
        }
    }
    let e = entries(attrs, 4);
    if e.len().div_ceil(BLOCK as usize) > MAX_CHAIN {
        return Err(errno::ENOSPC);
    }
    Ok(Encoded::Chained(e))
}

/// Writes `attrs` (not empty) to new blocks, flushed but not yet fenced or
/// published; returns the head's pool offset.
pub fn write_block<B: Backend>(pool: &Pool<B>, lane: u32, attrs: &Attrs) -> Result<u64> {
    let stream = match encode(attrs)? {
        Encoded::Single(bytes) => {
            let head = alloc_blocks(pool, lane, 1)?[0];
            let mut b = pool.pm.batch();
            b.write(head, &bytes);
            b.flushed();
            return Ok(head);
        }
        Encoded::Chained(stream) => stream,
    };
    let n = stream.len().div_ceil(BLOCK as usize);
    let addrs = alloc_blocks(pool, lane, 1 + n as u64)?;
    let mut head = (stream.len() as u64 | CHAINED).to_le_bytes().to_vec();
    for a in &addrs[1..] {
        head.extend_from_slice(&a.to_le_bytes());
    }
    let mut b = pool.pm.batch();
    b.write(addrs[0], &head);
    for (a, chunk) in addrs[1..].iter().zip(stream.chunks(BLOCK as usize)) {
        b.write(*a, chunk);
    }
    b.flushed();
    Ok(addrs[0])
}

/// `n` fresh blocks' pool offsets.
fn alloc_blocks<B: Backend>(pool: &Pool<B>, lane: u32, n: u64) -> Result<Vec<u64>> {
    let runs = pool.alloc.blocks.alloc(lane, n).ok_or(errno::ENOSPC)?;
    Ok(runs
        .iter()
        .flat_map(|&(start, len)| start..start + len)
        .map(|b| pool.layout.block_addr(b))
        .collect())
}

/// Returns the blocks of the set headed at `head` (0: none) to the allocator.
pub fn free_set<B: Backend>(pool: &Pool<B>, head: u64) {
    if head == 0 {
        return;
    }
    if let Ok(s) = read_set(&pool.pm, &pool.layout, head) {
        for b in s.blocks {
            pool.alloc.blocks.free(b, 1);
        }
    }
}

fn store<B: Backend>(pool: &Pool<B>, ino: u64, lane: u32, attrs: &Attrs) -> Result<()> {
    store_with(pool, ino, lane, attrs, &[])
}

/// Writes `attrs` as `ino`'s new attribute block (none when empty) and publishes it
/// together with the inode words `words` ((pool offset, value) pairs) and a new
/// ctime: with one 8-byte store when `words` is empty, else in one journal
/// transaction, which is then the commit point. The old blocks are freed after.
pub fn store_with<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    lane: u32,
    attrs: &Attrs,
    words: &[(u64, u64)],
) -> Result<()> {
    let at = pool.layout.inode_addr(ino);
    pool.settle(ino);
    let old = blocks(pool, ino);
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
            free_set(pool, new);
            return Err(e);
        }
    }
    for b in old {
        pool.alloc.blocks.free(b, 1);
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
