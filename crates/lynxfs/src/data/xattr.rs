//! Extended attributes: reading, setting and removing an inode's attributes, in the
//! forms `format::xattr` describes (docs/FORMAT.md).
//!
//! A whole-set change writes a new head (and its other blocks) and publishes them with
//! one store of the inode's xattr word (copy-on-write), then frees the old blocks. A
//! change that also sets other inode words (an access ACL and the mode kept in step)
//! publishes the xattr word and those words in one journal transaction
//! ([`store_with`]).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::error::{errno, Result};
use crate::format::xattr::{
    encode, entry_len, log_entries, read_chain, replay, Encoded, LogBlocks, CHAINED, LENGTH, LOG,
    LOG_HEADER, PER_INDEX, TOMBSTONE,
};
pub use crate::format::xattr::{read_set, Attrs, Stored, MAX_CHAIN, MAX_LIVE, MAX_LOG, SIZE_MAX};
use crate::format::{inode, Layout, BLOCK};
use crate::pmem::{Backend, Pm};
use crate::pool::Pool;
use crate::time::now_ns;

pub const NAME_MAX: usize = 255;
/// Dead bytes a log of more than a block's worth of live entries keeps before a
/// compaction is worth its copy.
const COMPACT_MIN: u64 = 16 * BLOCK;
/// Large sets whose index one process keeps.
const INDEXED_SETS: usize = 64;

pub const CREATE: i32 = libc::XATTR_CREATE;
pub const REPLACE: i32 = libc::XATTR_REPLACE;

/// The name index of one log, as far as this process has read it.
struct LogIndex {
    head: u64,
    id: u64,
    blocks: LogBlocks,
    /// Each live name's value: its log offset and length.
    names: HashMap<Vec<u8>, (u64, u32)>,
    /// Bytes the live entries take.
    live: u64,
}

impl LogIndex {
    /// Reads the log headed at `head` (id `id`) from its start.
    fn build<B: Backend>(pm: &Pm<B>, l: &Layout, head: u64, id: u64) -> Result<LogIndex> {
        let mut idx = LogIndex {
            head,
            id,
            blocks: LogBlocks {
                len: 0,
                index: Vec::new(),
                data: Vec::new(),
            },
            names: HashMap::new(),
            live: 0,
        };
        idx.catch_up(pm, l)?;
        Ok(idx)
    }

    /// Reads what other processes appended since this index was last brought up to
    /// date (nothing, usually).
    fn catch_up<B: Backend>(&mut self, pm: &Pm<B>, l: &Layout) -> Result<()> {
        let from = self.blocks.len;
        if pm.load_u64(self.head) & LENGTH == from {
            return Ok(());
        }
        let blocks = LogBlocks::load(pm, l, self.head).map_err(|_| errno::EIO)?;
        if blocks.len < from {
            return Err(errno::EIO);
        }
        let bytes = blocks.read(pm, from, blocks.len);
        for e in log_entries(&bytes, from, self.head).map_err(|_| errno::EIO)? {
            let old = match e.value {
                Some(v) => self.names.insert(e.name.to_vec(), v),
                None => self.names.remove(e.name),
            };
            if let Some((_, len)) = old {
                self.live -= entry_len(e.name.len(), u64::from(len));
            }
            if let Some((_, len)) = e.value {
                self.live += entry_len(e.name.len(), u64::from(len));
            }
        }
        self.blocks = blocks;
        Ok(())
    }

    fn value<B: Backend>(&self, pm: &Pm<B>, name: &[u8]) -> Option<Vec<u8>> {
        let &(off, len) = self.names.get(name)?;
        Some(self.blocks.read(pm, off, off + u64::from(len)))
    }
}

/// This process's indexes of large attribute sets (logs), by inode: each is checked
/// against the inode's xattr word and the log's id and length before use, and brought
/// up to date with what other processes appended, so a stale one is never believed.
#[derive(Default)]
pub struct Indexes(Mutex<HashMap<u64, LogIndex>>);

impl Indexes {
    /// Runs `f` on the up-to-date index of `ino`'s log headed at `head`.
    fn with<B: Backend, R>(
        &self,
        pool: &Pool<B>,
        ino: u64,
        head: u64,
        f: impl FnOnce(&mut LogIndex) -> Result<R>,
    ) -> Result<R> {
        let (pm, l) = (&pool.pm, &pool.layout);
        let id = pm.load_u64(head + 8);
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = match all.get_mut(&ino) {
            Some(idx) if idx.head == head && idx.id == id => idx.catch_up(pm, l).is_ok(),
            _ => false,
        };
        if !fresh {
            all.remove(&ino);
            if all.len() >= INDEXED_SETS {
                let victim = *all.keys().next().expect("not empty");
                all.remove(&victim);
            }
            all.insert(ino, LogIndex::build(pm, l, head, id)?);
        }
        let idx = all.get_mut(&ino).expect("inserted");
        f(idx)
    }
}

/// The pool offset of `ino`'s head block when its set is a log.
fn log_head<B: Backend>(pool: &Pool<B>, ino: u64) -> Option<u64> {
    let head = pool.pm.load_u64(pool.layout.inode_addr(ino) + inode::XATTR);
    if head == 0 || pool.layout.block_of(head).is_none() {
        return None;
    }
    let word = pool.pm.load_u64(head);
    (word & CHAINED == 0 && word & LOG != 0).then_some(head)
}

/// The data blocks of `ino`'s attribute set (none when it has none or it is
/// unreadable), without reading its entries.
pub fn blocks<B: Backend>(pool: &Pool<B>, ino: u64) -> Vec<u64> {
    let (pm, l) = (&pool.pm, &pool.layout);
    let head = pm.load_u64(l.inode_addr(ino) + inode::XATTR);
    let Some(hb) = l.block_of(head) else {
        return Vec::new();
    };
    let word = pm.load_u64(head);
    if word & CHAINED != 0 {
        let raw = pm.read_vec(head, BLOCK as usize);
        return read_chain(pm, l, head, &raw, word).map_or(Vec::new(), |(b, _)| b);
    }
    if word & LOG != 0 {
        return LogBlocks::load(pm, l, head).map_or(Vec::new(), |lb| lb.all_blocks(l, hb));
    }
    vec![hb]
}

/// How many blocks `ino`'s attribute set takes, from its head alone (for stat).
pub fn block_count<B: Backend>(pool: &Pool<B>, ino: u64) -> u64 {
    let head = pool.pm.load_u64(pool.layout.inode_addr(ino) + inode::XATTR);
    if head == 0 || pool.layout.block_of(head).is_none() {
        return 0;
    }
    let word = pool.pm.load_u64(head);
    if word & CHAINED != 0 {
        return 1 + (word & !CHAINED).div_ceil(BLOCK).min(MAX_CHAIN as u64);
    }
    if word & LOG != 0 {
        let n = (word & LENGTH).min(MAX_LOG).div_ceil(BLOCK);
        return 1 + n.div_ceil(PER_INDEX) + n;
    }
    1
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

/// Writes `attrs` (not empty) to new blocks, flushed but not yet fenced or
/// published; returns the head's pool offset.
pub fn write_block<B: Backend>(pool: &Pool<B>, lane: u32, attrs: &Attrs) -> Result<u64> {
    let stream = match encode(attrs, pool.xattr_log)? {
        Encoded::Single(bytes) => {
            let head = alloc_blocks(pool, lane, 1)?[0];
            let mut b = pool.pm.batch();
            b.write(head, &bytes);
            b.flushed();
            return Ok(head);
        }
        Encoded::Log(stream) => return write_log(pool, lane, &stream),
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

/// Writes a new log holding `stream` (flushed, not published); its head's offset.
fn write_log<B: Backend>(pool: &Pool<B>, lane: u32, stream: &[u8]) -> Result<u64> {
    let n = (stream.len() as u64).div_ceil(BLOCK);
    let k = n.div_ceil(PER_INDEX);
    let addrs = alloc_blocks(pool, lane, 1 + k + n)?;
    let (head, index, data) = (addrs[0], &addrs[1..=k as usize], &addrs[1 + k as usize..]);
    let mut h = (stream.len() as u64 | LOG).to_le_bytes().to_vec();
    h.extend_from_slice(&set_id(head).to_le_bytes());
    for a in index {
        h.extend_from_slice(&a.to_le_bytes());
    }
    let mut b = pool.pm.batch();
    b.write(head, &h);
    for (a, ptrs) in index.iter().zip(data.chunks(PER_INDEX as usize)) {
        let words: Vec<u8> = ptrs.iter().flat_map(|p| p.to_le_bytes()).collect();
        b.write(*a, &words);
    }
    for (a, chunk) in data.iter().zip(stream.chunks(BLOCK as usize)) {
        b.write(*a, chunk);
    }
    b.flushed();
    Ok(head)
}

/// An id for a new log headed at `head`, which no earlier log there had: an index
/// a process kept of an earlier set in a reused head block is then never believed.
fn set_id(head: u64) -> u64 {
    static LAST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = LAST.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    now_ns() ^ n.rotate_left(48) ^ head.rotate_left(20)
}

/// `n` fresh blocks' pool offsets.
fn alloc_blocks<B: Backend>(pool: &Pool<B>, lane: u32, n: u64) -> Result<Vec<u64>> {
    let blocks = pool.alloc.meta_blocks();
    if n == 1 {
        let b = blocks.alloc_high(lane).ok_or(errno::ENOSPC)?;
        return Ok(vec![pool.layout.block_addr(b)]);
    }
    let runs = blocks.alloc(lane, n).ok_or(errno::ENOSPC)?;
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
            pool.alloc.meta_blocks().free(b, 1);
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
        pool.alloc.meta_blocks().free(b, 1);
    }
    Ok(())
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(errno::ERANGE);
    }
    Ok(())
}

pub fn get<B: Backend>(
    pool: &Pool<B>,
    indexes: &Indexes,
    ino: u64,
    name: &[u8],
) -> Result<Vec<u8>> {
    check_name(name)?;
    if let Some(head) = log_head(pool, ino) {
        return indexes.with(pool, ino, head, |idx| {
            idx.value(&pool.pm, name).ok_or(errno::ENODATA)
        });
    }
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
    indexes: &Indexes,
    ino: u64,
    lane: u32,
    name: &[u8],
    value: &[u8],
    flags: i32,
) -> Result<()> {
    if let Some(head) = log_head(pool, ino) {
        check(name, value, flags)?;
        return indexes.with(pool, ino, head, |idx| {
            match (idx.names.contains_key(name), flags) {
                (true, f) if f & CREATE != 0 => Err(errno::EEXIST),
                (false, f) if f & REPLACE != 0 => Err(errno::ENODATA),
                _ => change_log(pool, ino, lane, idx, name, Some(value)),
            }
        });
    }
    let mut attrs = load(pool, ino)?;
    put(&mut attrs, name, value, flags)?;
    store(pool, ino, lane, &attrs)
}

/// setxattr's checks of the name, value and flags.
fn check(name: &[u8], value: &[u8], flags: i32) -> Result<()> {
    check_name(name)?;
    if value.len() > SIZE_MAX {
        return Err(errno::E2BIG);
    }
    if flags & !(CREATE | REPLACE) != 0 {
        return Err(errno::EINVAL);
    }
    Ok(())
}

/// Sets `name` to `value` in `attrs`, with setxattr's flags and limits.
pub fn put(attrs: &mut Attrs, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
    check(name, value, flags)?;
    let pos = attrs.iter().position(|(n, _)| n == name);
    match (pos, flags) {
        (Some(_), f) if f & CREATE != 0 => return Err(errno::EEXIST),
        (None, f) if f & REPLACE != 0 => return Err(errno::ENODATA),
        (Some(i), _) => attrs[i].1 = value.to_vec(),
        (None, _) => attrs.push((name.to_vec(), value.to_vec())),
    }
    Ok(())
}

pub fn remove<B: Backend>(
    pool: &Pool<B>,
    indexes: &Indexes,
    ino: u64,
    lane: u32,
    name: &[u8],
) -> Result<()> {
    check_name(name)?;
    if let Some(head) = log_head(pool, ino) {
        return indexes.with(pool, ino, head, |idx| {
            if !idx.names.contains_key(name) {
                return Err(errno::ENODATA);
            }
            change_log(pool, ino, lane, idx, name, None)
        });
    }
    let mut attrs = load(pool, ino)?;
    let pos = attrs
        .iter()
        .position(|(n, _)| n == name)
        .ok_or(errno::ENODATA)?;
    attrs.remove(pos);
    store(pool, ino, lane, &attrs)
}

/// Sets (`Some`) or removes (`None`) `name` in the log `idx` describes: by appending
/// one entry, or, when the log would be full or more dead than live, by rewriting
/// the set compacted. ENOSPC when the file's attributes would pass [`MAX_LIVE`].
fn change_log<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    lane: u32,
    idx: &mut LogIndex,
    name: &[u8],
    value: Option<&[u8]>,
) -> Result<()> {
    let old = idx
        .names
        .get(name)
        .map_or(0, |&(_, len)| entry_len(name.len(), u64::from(len)));
    let new = value.map_or(0, |v| entry_len(name.len(), v.len() as u64));
    let live = idx.live - old + new;
    if live > MAX_LIVE {
        return Err(errno::ENOSPC);
    }
    let end = idx.blocks.len + entry_len(name.len(), value.map_or(0, |v| v.len() as u64));
    let dead = end - live;
    // A set small enough for one block is rewritten as one once it is mostly dead:
    // a bounded copy, and an emptied set gives all its blocks back.
    if end > MAX_LOG || (dead > live && (dead > COMPACT_MIN || live < BLOCK)) {
        return compact(pool, ino, lane, idx, name, value);
    }
    append(pool, ino, lane, idx, name, value)
}

/// Rewrites the set of `idx` with `name` set or removed, as a whole-set change.
fn compact<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    lane: u32,
    idx: &LogIndex,
    name: &[u8],
    value: Option<&[u8]>,
) -> Result<()> {
    let stream = idx.blocks.read(&pool.pm, 0, idx.blocks.len);
    let mut attrs = replay(&stream, idx.head).map_err(|_| errno::EIO)?;
    attrs.retain(|(n, _)| n != name);
    if let Some(v) = value {
        attrs.push((name.to_vec(), v.to_vec()));
    }
    store(pool, ino, lane, &attrs)
}

/// Appends one entry to the log of `idx`: its bytes past the end (in the last data
/// block's free tail and new blocks, whose pointers go into free index slots), all
/// flushed, then ctime, one fence; **commit point:** the head's length word. Until
/// it, nothing the log's length covers has changed.
fn append<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    lane: u32,
    idx: &mut LogIndex,
    name: &[u8],
    value: Option<&[u8]>,
) -> Result<()> {
    let mut entry = vec![name.len() as u8];
    let vlen = value.map_or(TOMBSTONE, |v| v.len() as u32);
    entry.extend_from_slice(&vlen.to_le_bytes());
    entry.extend_from_slice(name);
    entry.extend_from_slice(value.unwrap_or(&[]));
    let (start, end) = (idx.blocks.len, idx.blocks.len + entry.len() as u64);
    let have = idx.blocks.data.len() as u64;
    let need = end.div_ceil(BLOCK);
    let new_index = need.div_ceil(PER_INDEX) - have.div_ceil(PER_INDEX);
    let fresh = if need > have {
        alloc_blocks(pool, lane, need - have + new_index)?
    } else {
        Vec::new()
    };
    let (index_blocks, data_blocks) = fresh.split_at(new_index as usize);
    pool.settle(ino);
    let mut b = pool.pm.batch();
    let mut index = idx.blocks.index.clone();
    for &a in index_blocks {
        let slot = index.len() as u64;
        b.write_u64(idx.head + LOG_HEADER as u64 + 8 * slot, a);
        index.push(a);
    }
    let mut data = idx.blocks.data.clone();
    for &a in data_blocks {
        let k = data.len() as u64;
        b.write_u64(index[(k / PER_INDEX) as usize] + 8 * (k % PER_INDEX), a);
        data.push(a);
    }
    let blocks = LogBlocks {
        len: end,
        index,
        data,
    };
    let mut p = start;
    while p < end {
        let (blk, within) = ((p / BLOCK) as usize, p % BLOCK);
        let n = (BLOCK - within).min(end - p);
        let from = (p - start) as usize;
        b.write(blocks.data[blk] + within, &entry[from..from + n as usize]);
        p += n;
    }
    b.write_u64(pool.layout.inode_addr(ino) + inode::CTIME, now_ns());
    let ready = b.persist();
    drop(pool.pm.commit_u64(idx.head, end | LOG, ready));
    let old = idx.names.remove(name);
    if let Some((_, len)) = old {
        idx.live -= entry_len(name.len(), u64::from(len));
    }
    if let Some(v) = value {
        let off = start + 5 + name.len() as u64;
        idx.names.insert(name.to_vec(), (off, v.len() as u32));
        idx.live += entry_len(name.len(), v.len() as u64);
    }
    idx.blocks = blocks;
    Ok(())
}
