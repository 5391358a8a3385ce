//! read, write, truncate and fallocate, straight between the caller's buffer and the
//! pool (no page cache: this is DAX).
//!
//! A write is durable when it returns. In the atomic data mode it is also atomic: every
//! block it changes that a reader could see is written to a fresh block
//! (copy-on-write); bytes past the end of the file, which no reader can see yet, are
//! written in place. In the inplace mode every allocated block is written in place.
//! One commit publishes the new map and size together (docs/CONSISTENCY.md, "write").
//! Callers hold the file's lock (the cachelet's): shared to read, alone to change.
//! File data is reached through the pool's [`DataStore`] and its blocks come from the
//! allocator of file-data blocks; the block map and the times are metadata, in the pool.

use crate::error::{errno, Result};
use crate::format::extents::NODE_HEADER;
use crate::format::inode::{self, Extent, MapWord};
use crate::format::{extents, BLOCK};
use crate::pmem::{Backend, Durable};
use crate::pool::Pool;
use crate::time::now_ns;

use super::map::{self, MapCache};
use super::store::{DataStore, DataWriter};
use super::txn::{self, Cover};
use super::{prealloc, DataMode};

/// The largest file: file block numbers are 32-bit, so (2^32 - 1) blocks, as ext4's
/// limit with 4 KiB blocks (docs/FORMAT.md).
pub const MAX_FILE: u64 = (u32::MAX as u64) * BLOCK;

fn size_of<B: Backend>(pool: &Pool<B>, ino: u64) -> u64 {
    pool.pm.load_u64(pool.layout.inode_addr(ino) + inode::SIZE)
}

/// Read up to `buf.len()` bytes at `off`; holes read as zeros. Parses the map from the
/// pool: for callers without the file's cachelet (readlink, tools).
pub fn read_at<B: Backend>(pool: &Pool<B>, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize> {
    let unshared = std::sync::atomic::AtomicU64::new(0);
    read_cached(pool, ino, off, buf, &MapCache::new(&unshared, 0, None))
}

/// Read symlink `ino`'s target (up to `buf.len()` bytes) from the pool's own blocks,
/// where [`write_fresh`] put it.
pub fn read_link<B: Backend>(pool: &Pool<B>, ino: u64, buf: &mut [u8]) -> Result<usize> {
    let unshared = std::sync::atomic::AtomicU64::new(0);
    let cache = MapCache::new(&unshared, 0, None);
    read_from(&pool.pm_data(), pool, ino, (0, buf), &cache)
}

/// Read through the file's cached map (the caller holds the file's lock shared).
#[inline]
pub fn read_cached<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    off: u64,
    buf: &mut [u8],
    cache: &MapCache<'_>,
) -> Result<usize> {
    read_from(&pool.data(), pool, ino, (off, buf), cache)
}

fn read_from<B: Backend, S: DataStore>(
    store: &S,
    pool: &Pool<B>,
    ino: u64,
    (off, buf): (u64, &mut [u8]),
    cache: &MapCache<'_>,
) -> Result<usize> {
    let size = size_of(pool, ino);
    if off >= size {
        return Ok(0);
    }
    let n = (size - off).min(buf.len() as u64) as usize;
    // The map copy is only fetched when the handle's remembered extent misses.
    let mut map: Option<std::sync::Arc<map::Map>> = None;
    let mut done = 0usize;
    while done < n {
        let pos = off + done as u64;
        let lblk = pos / BLOCK;
        let found = match cache.hinted(lblk) {
            Some(e) => Ok(e),
            None => {
                let m: &map::Map = match &map {
                    Some(m) => m,
                    None => map.insert(cache.get(pool, ino)?),
                };
                let i = m.extents.partition_point(|e| e.end() <= lblk);
                match m.extents.get(i) {
                    Some(e) if e.lblk as u64 <= lblk => {
                        cache.remember(*e);
                        Ok(*e)
                    }
                    next => Err(next.map_or(u64::MAX, |e| e.lblk as u64 * BLOCK)),
                }
            }
        };
        let chunk = match found {
            Ok(e) => {
                // Copy to the end of this extent (contiguous on the pool) at once.
                let chunk = ((e.end() * BLOCK - pos) as usize).min(n - done);
                let blk = e.pblk + (lblk - e.lblk as u64);
                store.read(blk, pos % BLOCK, &mut buf[done..done + chunk])?;
                chunk
            }
            Err(hole_end) => {
                let chunk = ((hole_end - pos).min((n - done) as u64)) as usize;
                buf[done..done + chunk].fill(0);
                chunk
            }
        };
        done += chunk;
    }
    Ok(n)
}

/// Read up to `buf.len()` bytes at `off` if the handle's remembered extent
/// ([`MapCache::hinted`]) holds every one of them (or `off` is at or past the end):
/// one copy, no map copy, no search; `None` otherwise. For a reader holding no lock,
/// which must validate the bytes afterwards and else read again under the lock (the
/// file's lock is the only one that keeps the extent's blocks the file's): everything
/// loaded here is a word of the pool or of the hint, so a change racing with it yields
/// a wrong answer to throw away, never a copy outside the extent.
pub fn read_hinted<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    off: u64,
    buf: &mut [u8],
    cache: &MapCache<'_>,
) -> Option<usize> {
    let size = size_of(pool, ino);
    if off >= size {
        return Some(0);
    }
    let n = (size - off).min(buf.len() as u64) as usize;
    let lblk = off / BLOCK;
    let e = cache.hinted(lblk)?;
    if off + n as u64 > e.end() * BLOCK {
        return None;
    }
    let blk = e.pblk + (lblk - e.lblk as u64);
    // A failed read is answered again under the lock, which reports it.
    pool.data()
        .read_racing(blk, off % BLOCK, &mut buf[..n])
        .ok()?;
    Some(n)
}

/// lseek's SEEK_DATA (`hole` false) or SEEK_HOLE (`hole` true) from `off`, as Linux
/// defines them, at block granularity (a block with a mapped extent is data, even if
/// only partly written; the end of the file is a hole): ENXIO at or past the end of
/// the file, or for SEEK_DATA when only holes follow. The caller holds the file's lock
/// shared.
pub fn seek_data_hole<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    off: u64,
    hole: bool,
    cache: &MapCache<'_>,
) -> Result<u64> {
    let size = size_of(pool, ino);
    if off >= size {
        return Err(errno::ENXIO);
    }
    let m = cache.get(pool, ino)?;
    if hole {
        // Extents past the size (fallocate with KEEP_SIZE) are not the file's data.
        return Ok(next_hole(&m.extents, off).min(size));
    }
    next_data(&m.extents, off)
        .filter(|&at| at < size)
        .ok_or(errno::ENXIO)
}

/// One extent of a file as FS_IOC_FIEMAP reports it: `length` bytes at `logical` in
/// the file, stored at byte `physical` of the pool file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileExtent {
    pub logical: u64,
    pub physical: u64,
    pub length: u64,
    /// FIEMAP_EXTENT_* flags: [`EXTENT_LAST`] on the file's last extent.
    pub flags: u32,
}

/// FIEMAP_EXTENT_LAST: the file's last extent.
pub const EXTENT_LAST: u32 = 1;

/// Every extent of `ino`'s data in file order, holes left out; extents that follow
/// each other both in the file and in the pool are one. Blocks allocated past the end
/// of the file (fallocate with KEEP_SIZE) are extents too, as ext4 reports them; a
/// speculative reserve (see [`prealloc`]) is not: it is ours, not the file's, as in
/// `st_blocks`. The caller holds the file's lock shared.
pub fn file_extents<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    cache: &MapCache<'_>,
) -> Result<Vec<FileExtent>> {
    let m = cache.get(pool, ino)?;
    let reserve_from = match m.word.spec {
        0 => u64::MAX,
        spec => prealloc::start(spec, size_of(pool, ino)),
    };
    let mut out: Vec<FileExtent> = Vec::with_capacity(m.extents.len());
    for e in m.extents.iter() {
        let end = e.end().min(reserve_from);
        if end <= e.lblk as u64 {
            continue;
        }
        let (logical, physical) = (e.lblk as u64 * BLOCK, pool.data().physical(e.pblk));
        let length = (end - e.lblk as u64) * BLOCK;
        match out.last_mut() {
            Some(l) if l.logical + l.length == logical && l.physical + l.length == physical => {
                l.length += length;
            }
            _ => out.push(FileExtent {
                logical,
                physical,
                length,
                flags: 0,
            }),
        }
    }
    if let Some(l) = out.last_mut() {
        l.flags |= EXTENT_LAST;
    }
    Ok(out)
}

/// The first byte at or after `off` in a mapped block (None: only holes follow).
fn next_data(ext: &[Extent], off: u64) -> Option<u64> {
    let lblk = off / BLOCK;
    let e = ext.get(ext.partition_point(|e| e.end() <= lblk))?;
    Some((e.lblk as u64 * BLOCK).max(off))
}

/// The first byte at or after `off` in an unmapped block (the end of the file may come
/// first: the caller caps it).
fn next_hole(ext: &[Extent], off: u64) -> u64 {
    let lblk = off / BLOCK;
    let mut i = ext.partition_point(|e| e.end() <= lblk);
    match ext.get(i) {
        Some(e) if e.lblk as u64 <= lblk => {
            // Walk the run of extents that follow each other without a gap.
            let mut end = e.end();
            i += 1;
            while let Some(n) = ext.get(i).filter(|n| n.lblk as u64 == end) {
                end = n.end();
                i += 1;
            }
            end * BLOCK
        }
        _ => off,
    }
}

/// Write `data` at `off`, atomically and durably; returns `data.len()`, or less when
/// the write would pass [`MAX_FILE`]: cut short there, as Linux's
/// `generic_write_checks` does (EFBIG for a write starting at or past it). The caller
/// holds the file's lock for update (no other writer; readers may come and go) and
/// `gate` makes it hold the lock alone: it is called once the new bytes and map are
/// prepared where no reader looks, just before the commit (and not at all when the
/// write fails before; its error undoes the preparation and is returned).
pub fn write_at<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    lane: u32,
    (off, data): (u64, &[u8]),
    cache: &MapCache<'_>,
    gate: &mut dyn FnMut() -> Result<()>,
) -> Result<usize> {
    if data.is_empty() {
        return Ok(0);
    }
    if off >= MAX_FILE {
        return Err(errno::EFBIG);
    }
    let data = &data[..data.len().min((MAX_FILE - off) as usize)];
    // Its first change since its create settles it (a no-op after that).
    pool.settle(ino);
    let cover = txn::cover(pool, ino)?;
    let end = off + data.len() as u64;
    let size = size_of(pool, ino);
    let m = cache.get(pool, ino)?;
    let first = off / BLOCK;
    let last = (end - 1) / BLOCK;
    let overwrite_in_place = pool.data_mode() == DataMode::Inplace;
    if !overwrite_in_place && first == last && end <= size {
        if let Some(ptr) = single_block_pointer(pool, ino, &m, first, &cover) {
            return repoint_block(pool, ino, lane, (off, data), ptr, m, (cache, &cover), gate);
        }
    }
    // Which blocks need a fresh copy: every hole, and (in the atomic mode) any block a
    // reader could see.
    let mut targets: Vec<(u64, Option<u64>, bool)> =
        Vec::with_capacity((last - first + 1) as usize);
    for lb in first..=last {
        let old = lookup(&m.extents, lb);
        let ws = off.max(lb * BLOCK);
        let in_place = old.is_some() && (ws >= size || overwrite_in_place);
        targets.push((lb, old, !in_place));
    }
    let fresh = targets.iter().filter(|t| t.2).count() as u64;
    let (runs, extra) = alloc_with_reserve(
        pool,
        lane,
        fresh,
        prealloc::wanted(&m.extents, size, (off, end), last),
    )?;
    let give_back = || {
        runs.iter()
            .for_each(|&(s, n)| pool.alloc.data_blocks().free(s, n))
    };
    let mut fresh_blocks = runs.iter().flat_map(|&(s, n)| s..s + n);
    let mut repl: Vec<Extent> = Vec::with_capacity(targets.len());
    let store = pool.data();
    let mut b = store.writer();
    let mut read_failed = None;
    for &(lb, old, needs_new) in &targets {
        let blk_start = lb * BLOCK;
        let ws = off.max(blk_start);
        let we = end.min(blk_start + BLOCK);
        let piece = &data[(ws - off) as usize..(we - off) as usize];
        let pblk = if needs_new {
            let nb = fresh_blocks.next().expect("allocated one per fresh block");
            if piece.len() as u64 == BLOCK {
                b.write(nb, 0, piece);
            } else {
                // Start from the old contents (copy-on-write) or zeros (a hole), on
                // the stack: a heap block cost a calloc and a free per append.
                let mut blk = [0u8; BLOCK as usize];
                if let Some(o) = old {
                    if let Err(e) = store.read(o, 0, &mut blk) {
                        read_failed = Some(e);
                        break;
                    }
                }
                blk[(ws - blk_start) as usize..(we - blk_start) as usize].copy_from_slice(piece);
                b.write(nb, 0, &blk);
            }
            nb
        } else {
            let o = old.expect("in place only over an allocated block");
            b.write(o, ws - blk_start, piece);
            o
        };
        push_block(&mut repl, lb, pblk);
    }
    if let Err(e) = b.flushed().and(read_failed.map_or(Ok(()), Err)) {
        give_back();
        return Err(e);
    }
    // The reserve: mapped now, speculative (past the end) until appends reach it.
    for lb in last + 1..last + 1 + extra {
        push_block(
            &mut repl,
            lb,
            fresh_blocks.next().expect("allocated the reserve"),
        );
    }
    if off > size {
        if let Err(e) = zero_gap(pool, &m.extents, size, off) {
            give_back();
            return Err(e);
        }
    }
    let new_size = (end > size).then_some(end);
    if fresh + extra == 0 {
        // Bytes in place and the times under one fence, before the gate: the lock's
        // atomic upgrade would otherwise wait for the streamed bytes on its own, and the
        // times' fence after it would be a second wait (30% of a 4 KiB in-place write).
        let ready = persist_times(pool, ino);
        gate()?;
        if let Some(sz) = new_size {
            drop(
                pool.pm
                    .commit_u64(pool.layout.inode_addr(ino) + inode::SIZE, sz, ready),
            );
        }
        return Ok(data.len());
    }
    let spec = if extra > 0 {
        (last + 1) as u32
    } else {
        m.word.spec
    };
    let window = (!overwrite_in_place && first == last && end <= size)
        .then(|| singles_window(&m, first))
        .flatten();
    let ((a, b), (ext, freed)) = match window {
        Some(w) => (
            w,
            map::splice_singles(&m.extents, w.0, w.1, &singles(&m.extents, w, &repl)),
        ),
        None => {
            let stop = last + 1 + extra;
            let from = reserve_in_gap(&m, size, off).unwrap_or(first);
            ((from, stop), map::splice(&m.extents, from, stop, &repl))
        }
    };
    let staged = match map::stage(pool, ino, lane, &m, ext, (a, b), spec) {
        Ok(s) => s,
        Err(e) => {
            give_back();
            return Err(e);
        }
    };
    // A commit of the map word alone: the times go under the fence that makes the
    // bytes and the new map durable, before the gate (see the in-place case above).
    let times = new_size.is_none().then(|| persist_times(pool, ino));
    if let Err(e) = gate() {
        give_back();
        map::free_nodes(pool, &staged.new_nodes);
        return Err(e);
    }
    match times {
        Some(ready) => {
            let at = pool.layout.inode_addr(ino) + inode::MAP;
            drop(pool.pm.commit_u64(at, staged.word, ready));
            settle_staged(pool, staged, &freed, cache, &cover);
        }
        None => commit_staged(pool, (ino, lane), staged, new_size, &freed, (cache, &cover))?,
    }
    Ok(data.len())
}

/// Where the speculative reserve starts when a write at `off`, past the end of a
/// file of `size` bytes, leaves a gap over it: the write's map change drops the
/// reserve's blocks in that gap, which stays a hole (the file's own blocks, such as
/// fallocate's past the end, are never speculative and stay).
fn reserve_in_gap(m: &map::Map, size: u64, off: u64) -> Option<u64> {
    let from = prealloc::start(m.word.spec, size);
    (m.word.spec != 0 && off > size && from < off / BLOCK).then_some(from)
}

/// Blocks per window that a one-block overwrite splits into single-block extents.
const SINGLES_WINDOW: u64 = 128;

/// The atomic mode's overwrite of one block inside a longer extent, in a map too big
/// to stay inline: rather than cutting the extent around the block (two more extents
/// at every such write, and a map that grows by them), cut the aligned window of
/// [`SINGLES_WINDOW`] blocks around it (inside the extent) into single-block extents,
/// once: later overwrites of those blocks swap one block pointer ([`repoint_block`]).
fn singles_window(m: &map::Map, lb: u64) -> Option<(u64, u64)> {
    let e = m.extents[extents::find(&m.extents, lb)?];
    if e.len == 1 || m.extents.len() + 2 <= inode::INLINE_EXTENTS {
        return None;
    }
    let start = (lb / SINGLES_WINDOW * SINGLES_WINDOW).max(e.lblk as u64);
    let end = ((lb / SINGLES_WINDOW + 1) * SINGLES_WINDOW).min(e.end());
    Some((start, end))
}

/// File blocks `[a, b)` as single-block extents: those `written` holds at their new
/// blocks, the others where `ext` has them.
fn singles(ext: &[Extent], (a, b): (u64, u64), written: &[Extent]) -> Vec<Extent> {
    (a..b)
        .map(|lb| Extent {
            lblk: lb as u32,
            len: 1,
            pblk: lookup(written, lb)
                .or_else(|| lookup(ext, lb))
                .expect("a window inside one extent"),
        })
        .collect()
}

/// `fresh` blocks for a write, and if the pool has room `reserve` more for speculative
/// preallocation: the runs and how many of them are the reserve.
fn alloc_with_reserve<B: Backend>(
    pool: &Pool<B>,
    lane: u32,
    fresh: u64,
    reserve: u64,
) -> Result<(Vec<(u64, u64)>, u64)> {
    if reserve > 0 {
        if let Some(runs) = pool.alloc.data_blocks().alloc(lane, fresh + reserve) {
            return Ok((runs, reserve));
        }
    }
    let runs = pool
        .alloc
        .data_blocks()
        .alloc(lane, fresh)
        .ok_or(errno::ENOSPC)?;
    Ok((runs, 0))
}

/// Where the pool keeps the block pointer of file block `lb`, when `lb` is an extent of
/// its own in the inode's live map area or in a leaf the map knows: `(extent index,
/// pool offset of its 8-byte pblk word)`.
fn single_block_pointer<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    m: &map::Map,
    lb: u64,
    cover: &Cover<'_>,
) -> Option<(usize, u64)> {
    let i = extents::find(&m.extents, lb)?;
    if m.extents[i].len != 1 {
        return None;
    }
    let entry = match m.word.kind {
        0 => pool.layout.inode_addr(ino) + m.word.area_off() + i as u64 * inode::EXTENT_LEN,
        // A leaf is outside the inode: its original would not be undone.
        _ if cover.in_txn() => return None,
        _ => {
            let leaf = m
                .leaves
                .get(m.leaves.partition_point(|l| l.start <= i).checked_sub(1)?)?;
            (i < leaf.start + leaf.count)
                .then(|| leaf.node + NODE_HEADER + (i - leaf.start) as u64 * inode::EXTENT_LEN)?
        }
    };
    Some((i, entry + 8))
}

/// The atomic mode's cheap overwrite of one block that is an extent of its own: the
/// new contents go to a fresh block, then one 8-byte store of the extent's block
/// pointer (the commit point) swaps it in; no map area or leaf is copied.
#[allow(clippy::too_many_arguments)] // write_at's state, handed on whole
fn repoint_block<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    lane: u32,
    (off, data): (u64, &[u8]),
    (i, ptr): (usize, u64),
    m: std::sync::Arc<map::Map>,
    (cache, cover): (&MapCache<'_>, &Cover<'_>),
    gate: &mut dyn FnMut() -> Result<()>,
) -> Result<usize> {
    let old = m.extents[i].pblk;
    let nb = pool
        .alloc
        .data_blocks()
        .alloc(lane, 1)
        .ok_or(errno::ENOSPC)?[0]
        .0;
    let store = pool.data();
    let mut b = store.writer();
    let mut written = Ok(());
    if data.len() as u64 == BLOCK {
        b.write(nb, 0, data);
    } else {
        let mut blk = [0u8; BLOCK as usize];
        written = store.read(old, 0, &mut blk);
        let at = (off % BLOCK) as usize;
        blk[at..at + data.len()].copy_from_slice(data);
        b.write(nb, 0, &blk);
    }
    if let Err(e) = b.flushed().and(written) {
        pool.alloc.data_blocks().free(nb, 1);
        return Err(e);
    }
    // The times' fence makes the new block durable with them, before the swap.
    let ready = persist_times(pool, ino);
    if let Err(e) = gate() {
        pool.alloc.data_blocks().free(nb, 1);
        return Err(e);
    }
    drop(pool.pm.commit_u64(ptr, nb, ready));
    cover.free_data(pool, old, 1);
    cache.repoint(m, i, nb);
    Ok(data.len())
}

/// Append block `lb` at `pblk` to a run list, extending the last run when contiguous.
fn push_block(repl: &mut Vec<Extent>, lb: u64, pblk: u64) {
    match repl.last_mut() {
        Some(e) if e.end() == lb && e.pblk + e.len as u64 == pblk => e.len += 1,
        _ => repl.push(Extent {
            lblk: lb as u32,
            len: 1,
            pblk,
        }),
    }
}

/// Publish a staged map (with a new size, if any), then free what it replaced and
/// cache the new map. On failure the staged nodes go back and the cache is dropped.
fn commit_staged<B: Backend>(
    pool: &Pool<B>,
    (ino, lane): (u64, u32),
    staged: map::Staged,
    new_size: Option<u64>,
    freed: &[(u64, u64)],
    (cache, cover): (&MapCache<'_>, &Cover<'_>),
) -> Result<()> {
    if let Err(e) = publish(pool, (ino, lane), Some(staged.word), new_size, cover) {
        map::free_nodes(pool, &staged.new_nodes);
        cache.clear();
        return Err(e);
    }
    settle_staged(pool, staged, freed, cache, cover);
    Ok(())
}

/// After a staged map's commit: free what it replaced and cache it.
fn settle_staged<B: Backend>(
    pool: &Pool<B>,
    staged: map::Staged,
    freed: &[(u64, u64)],
    cache: &MapCache<'_>,
    cover: &Cover<'_>,
) {
    for &(s, n) in freed {
        cover.free_data(pool, s, n);
    }
    cover.free_nodes(pool, &staged.old_nodes);
    cache.put(staged.map);
}

/// Store a write's mtime and ctime and fence: everything the thread stored and
/// flushed before is durable with them.
fn persist_times<B: Backend>(pool: &Pool<B>, ino: u64) -> Durable {
    let at = pool.layout.inode_addr(ino);
    let now = now_ns();
    let mut b = pool.pm.batch();
    b.write_u64(at + inode::MTIME, now)
        .write_u64(at + inode::CTIME, now);
    b.persist()
}

/// The data block holding file block `lblk`, if allocated.
fn lookup(ext: &[Extent], lblk: u64) -> Option<u64> {
    extents::find(ext, lblk).map(|i| ext[i].pblk + (lblk - ext[i].lblk as u64))
}

/// Zero allocated bytes in `[from, to)`, all past the end of the file (so invisible),
/// before a size change makes them visible.
fn zero_gap<B: Backend>(pool: &Pool<B>, ext: &[Extent], from: u64, to: u64) -> Result<()> {
    let store = pool.data();
    let mut b = store.writer();
    let mut pos = from;
    while pos < to {
        let lb = pos / BLOCK;
        let blk_end = ((lb + 1) * BLOCK).min(to);
        if let Some(p) = lookup(ext, lb) {
            b.zero(p, pos % BLOCK, (blk_end - pos) as usize);
            pos = blk_end;
        } else {
            // Skip the hole up to the next extent.
            let i = ext.partition_point(|e| e.end() <= lb);
            pos = ext
                .get(i)
                .map_or(to, |e| (e.lblk as u64 * BLOCK).max(blk_end))
                .min(to);
        }
    }
    b.flushed()
}

/// Publish a new map word and/or a new size, with the times, as one commit. The
/// cover is its proof: in a hybrid pool the inode's original is recorded (the
/// running transaction), elsewhere the data is already flushed.
fn publish<B: Backend>(
    pool: &Pool<B>,
    (ino, lane): (u64, u32),
    map_word: Option<u64>,
    new_size: Option<u64>,
    _cover: &Cover<'_>,
) -> Result<()> {
    let at = pool.layout.inode_addr(ino);
    let now = now_ns();
    match (map_word, new_size) {
        (Some(w), Some(sz)) => {
            let words = [
                (at + inode::MAP, w),
                (at + inode::SIZE, sz),
                (at + inode::MTIME, now),
                (at + inode::CTIME, now),
            ];
            pool.journals
                .commit(&pool.pm, &pool.layout, lane, &words)
                .map(drop)
        }
        (word, size) => {
            let mut b = pool.pm.batch();
            b.write_u64(at + inode::MTIME, now)
                .write_u64(at + inode::CTIME, now);
            let ready = b.persist();
            let commit = match (word, size) {
                (Some(w), None) => Some((at + inode::MAP, w)),
                (None, Some(sz)) => Some((at + inode::SIZE, sz)),
                _ => None,
            };
            match commit {
                Some((a, v)) => drop(pool.pm.commit_u64(a, v, ready)),
                None => drop(ready),
            }
            Ok(())
        }
    }
}

/// Set the size to `new_size`, freeing blocks past it or exposing zeros up to it.
pub fn truncate<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    lane: u32,
    new_size: u64,
    cache: &MapCache<'_>,
) -> Result<()> {
    if new_size > MAX_FILE {
        return Err(errno::EFBIG);
    }
    pool.settle(ino);
    let cover = txn::cover(pool, ino)?;
    let size = size_of(pool, ino);
    let m = cache.get(pool, ino)?;
    if new_size >= size {
        zero_gap(pool, &m.extents, size, new_size)?;
        return publish(
            pool,
            (ino, lane),
            None,
            (new_size != size).then_some(new_size),
            &cover,
        );
    }
    let keep = new_size.div_ceil(BLOCK);
    let (ext, freed) = map::splice(&m.extents, keep, u64::MAX, &[]);
    if freed.is_empty() {
        publish(pool, (ino, lane), None, Some(new_size), &cover)?;
    } else {
        // Everything past the new end goes, speculative blocks with it.
        let staged = map::stage(pool, ino, lane, &m, ext, (keep, u64::MAX), 0)?;
        commit_staged(
            pool,
            (ino, lane),
            staged,
            Some(new_size),
            &freed,
            (cache, &cover),
        )?;
    }
    if cover.in_txn() {
        // A hybrid pool's shrink commits: bytes past the new end are written in place
        // from now on (appends, zeroing), which an original of the longer file would
        // show again if it could still be restored.
        drop(cover);
        pool.commit()?;
    }
    Ok(())
}

pub const FALLOC_KEEP_SIZE: i32 = libc::FALLOC_FL_KEEP_SIZE;
pub const FALLOC_PUNCH_HOLE: i32 = libc::FALLOC_FL_PUNCH_HOLE;

/// fallocate: allocate zeroed blocks for the holes in `[off, off+len)` (growing the
/// size unless KEEP_SIZE), or punch a hole (PUNCH_HOLE | KEEP_SIZE).
pub fn fallocate<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    lane: u32,
    mode: i32,
    off: u64,
    len: u64,
    cache: &MapCache<'_>,
) -> Result<()> {
    if len == 0 {
        return Err(errno::EINVAL);
    }
    let end = off.checked_add(len).ok_or(errno::EFBIG)?;
    if end > MAX_FILE {
        return Err(errno::EFBIG);
    }
    pool.settle(ino);
    let cover = txn::cover(pool, ino)?;
    // Blocks fallocate maps are the caller's: a speculative reserve goes first, so
    // none of them is taken for one (nor given back with it).
    prealloc::trim_covered(pool, ino, lane, cache, &cover)?;
    let c = (cache, &cover);
    match mode {
        0 | FALLOC_KEEP_SIZE => allocate(pool, (ino, lane), off, end, mode == 0, c),
        m if m == FALLOC_PUNCH_HOLE | FALLOC_KEEP_SIZE => punch(pool, (ino, lane), off, end, c),
        m if m & FALLOC_PUNCH_HOLE != 0 => Err(errno::EINVAL),
        _ => Err(errno::EOPNOTSUPP),
    }
}

fn allocate<B: Backend>(
    pool: &Pool<B>,
    (ino, lane): (u64, u32),
    off: u64,
    end: u64,
    grow: bool,
    (cache, cover): (&MapCache<'_>, &Cover<'_>),
) -> Result<()> {
    let size = size_of(pool, ino);
    let m = cache.get(pool, ino)?;
    let (first, stop) = (off / BLOCK, end.div_ceil(BLOCK));
    let holes: Vec<u64> = (first..stop)
        .filter(|&lb| lookup(&m.extents, lb).is_none())
        .collect();
    let new_size = (grow && end > size).then_some(end);
    if holes.is_empty() {
        // Growing over blocks already there: bytes past the old end (left by a
        // truncate down) must read as zeros once the size covers them.
        if let Some(sz) = new_size {
            zero_gap(pool, &m.extents, size, sz)?;
        }
        return publish(pool, (ino, lane), None, new_size, cover);
    }
    let runs = pool
        .alloc
        .data_blocks()
        .alloc(lane, holes.len() as u64)
        .ok_or(errno::ENOSPC)?;
    let store = pool.data();
    let mut b = store.writer();
    let mut repl = Vec::with_capacity(holes.len());
    for (lb, pblk) in holes.iter().zip(runs.iter().flat_map(|&(s, n)| s..s + n)) {
        b.zero(pblk, 0, BLOCK as usize);
        repl.push(Extent {
            lblk: *lb as u32,
            len: 1,
            pblk,
        });
    }
    let zeroed = b.flushed().and_then(|()| match new_size {
        Some(sz) => zero_gap(pool, &m.extents, size, sz),
        None => Ok(()),
    });
    if let Err(e) = zeroed {
        runs.iter()
            .for_each(|&(s, n)| pool.alloc.data_blocks().free(s, n));
        return Err(e);
    }
    let mut ext = m.extents.clone();
    for r in &repl {
        ext = map::splice(
            &ext,
            r.lblk as u64,
            r.lblk as u64 + 1,
            std::slice::from_ref(r),
        )
        .0;
    }
    let staged = match map::stage(pool, ino, lane, &m, ext, (first, stop), 0) {
        Ok(s) => s,
        Err(e) => {
            runs.iter()
                .for_each(|&(s, n)| pool.alloc.data_blocks().free(s, n));
            return Err(e);
        }
    };
    commit_staged(pool, (ino, lane), staged, new_size, &[], (cache, cover))
}

fn punch<B: Backend>(
    pool: &Pool<B>,
    (ino, lane): (u64, u32),
    off: u64,
    end: u64,
    (cache, cover): (&MapCache<'_>, &Cover<'_>),
) -> Result<()> {
    let m = cache.get(pool, ino)?;
    let (first, stop) = (off / BLOCK, end.div_ceil(BLOCK));
    // Edge blocks only partly inside the hole keep their other bytes: copy them.
    let mut repl = Vec::new();
    let store = pool.data();
    let mut b = store.writer();
    for lb in [first, stop - 1] {
        let (bs, be) = (lb * BLOCK, (lb + 1) * BLOCK);
        let partial = off > bs || end < be;
        let Some(old) = lookup(&m.extents, lb).filter(|_| partial) else {
            continue;
        };
        if repl.iter().any(|e: &Extent| e.lblk as u64 == lb) {
            continue;
        }
        let Some(runs) = pool.alloc.data_blocks().alloc(lane, 1) else {
            let _ = b.flushed();
            repl.iter()
                .for_each(|e: &Extent| pool.alloc.data_blocks().free(e.pblk, 1));
            return Err(errno::ENOSPC);
        };
        let mut blk = vec![0u8; BLOCK as usize];
        if let Err(e) = store.read(old, 0, &mut blk) {
            let _ = b.flushed();
            pool.alloc.data_blocks().free(runs[0].0, 1);
            repl.iter()
                .for_each(|e: &Extent| pool.alloc.data_blocks().free(e.pblk, 1));
            return Err(e);
        }
        let (zs, ze) = (off.max(bs) - bs, end.min(be) - bs);
        blk[zs as usize..ze as usize].fill(0);
        b.write(runs[0].0, 0, &blk);
        repl.push(Extent {
            lblk: lb as u32,
            len: 1,
            pblk: runs[0].0,
        });
    }
    if let Err(e) = b.flushed() {
        repl.iter()
            .for_each(|e: &Extent| pool.alloc.data_blocks().free(e.pblk, 1));
        return Err(e);
    }
    let (ext, freed) = map::splice(&m.extents, first, stop, &repl);
    if freed.is_empty() && repl.is_empty() {
        return publish(pool, (ino, lane), None, None, cover);
    }
    let staged = map::stage(pool, ino, lane, &m, ext, (first, stop), 0)?;
    commit_staged(pool, (ino, lane), staged, None, &freed, (cache, cover))
}

/// Fill a new inode (not yet visible) with `bytes`: a symlink's target. It is
/// metadata: in the pool's own blocks in every pool, a hybrid one's too
/// ([`read_link`] reads it; `log::cwon` checks it at recovery).
pub fn write_fresh<B: Backend>(pool: &Pool<B>, ino: u64, lane: u32, bytes: &[u8]) -> Result<()> {
    let n = (bytes.len() as u64).div_ceil(BLOCK);
    let runs = pool
        .alloc
        .meta_blocks()
        .alloc(lane, n)
        .ok_or(errno::ENOSPC)?;
    let store = pool.pm_data();
    let mut b = store.writer();
    let mut ext = Vec::new();
    let mut lblk = 0u64;
    for &(s, len) in &runs {
        let from = (lblk * BLOCK) as usize;
        let to = (((lblk + len) * BLOCK) as usize).min(bytes.len());
        b.write(s, 0, &bytes[from..to]);
        ext.push(Extent {
            lblk: lblk as u32,
            len: len as u32,
            pblk: s,
        });
        lblk += len;
    }
    b.flushed()?;
    let staged = map::stage(pool, ino, lane, &map::Map::default(), ext, (0, lblk), 0)?;
    let at = pool.layout.inode_addr(ino);
    let mut b = pool.pm.batch();
    b.write_u64(at + inode::MAP, staged.word)
        .write_u64(at + inode::SIZE, bytes.len() as u64);
    b.flushed();
    Ok(())
}

/// Blocks a file holds: data, tree nodes, xattr blocks, directory log pages.
pub fn blocks_used<B: Backend>(pool: &Pool<B>, ino: u64) -> u64 {
    let at = pool.layout.inode_addr(ino);
    let xattr = super::xattr::block_count(pool, ino);
    let mode = pool.pm.load_u64(at + inode::MODE) as u32;
    let dir_pages = if mode & libc::S_IFMT == libc::S_IFDIR {
        dir_pages(pool, ino).len() as u64
    } else {
        0
    };
    let word = MapWord::decode(pool.pm.load_u64(at + inode::MAP));
    let data = match word {
        // Inline map (the common case for stat): sum the lengths without allocating.
        Some(w) if w.kind == 0 && w.spec == 0 => (0..w.count as u64)
            .map(|i| pool.pm.load_u64(at + w.area_off() + i * inode::EXTENT_LEN) >> 32)
            .sum(),
        _ => match map::read(pool, ino) {
            Ok(m) => {
                let all = m.extents.iter().map(|e| e.len as u64).sum::<u64>();
                all - speculative_blocks(pool, ino, &m) + m.nodes.len() as u64
            }
            Err(_) => 0,
        },
    };
    data + xattr + dir_pages
}

/// How many of `m`'s blocks are speculative preallocation (see [`prealloc`]).
fn speculative_blocks<B: Backend>(pool: &Pool<B>, ino: u64, m: &map::Map) -> u64 {
    match m.word.spec {
        0 => 0,
        spec => prealloc::blocks_from(&m.extents, prealloc::start(spec, size_of(pool, ino))),
    }
}

/// The data blocks of directory `ino`'s log pages, in chain order (stops at a bad
/// link or a cycle).
pub fn dir_pages<B: Backend>(pool: &Pool<B>, ino: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut p = pool
        .pm
        .load_u64(pool.layout.inode_addr(ino) + inode::DIR_LOG);
    while p != 0 && out.len() as u64 <= pool.layout.data_blocks {
        let Some(b) = pool.layout.block_of(p) else {
            break;
        };
        out.push(b);
        p = pool.pm.load_u64(p + crate::format::dirlog::NEXT);
    }
    out
}

/// `ino` has no extent, no attribute block and no log page: an empty file, the most
/// common one unlinked, is freed without reading its map.
fn holds_no_block<B: Backend>(pool: &Pool<B>, ino: u64) -> bool {
    let at = pool.layout.inode_addr(ino);
    let word = MapWord::decode(pool.pm.load_u64(at + inode::MAP));
    word.is_some_and(|w| w.kind == 0 && w.count == 0)
        && pool.pm.load_u64(at + inode::XATTR) == 0
        && pool.pm.load_u64(at + inode::DIR_LOG) == 0
}

/// Return every block `ino` holds to the allocators (the inode is already unreachable).
pub fn free_all<B: Backend>(pool: &Pool<B>, ino: u64) {
    if holds_no_block(pool, ino) {
        return;
    }
    if let Ok(m) = map::read(pool, ino) {
        // A symlink's target is in the pool's blocks, a file's data maybe on a device.
        let mode = pool.pm.load_u64(pool.layout.inode_addr(ino) + inode::MODE) as u32;
        let blocks = pool.alloc.extent_blocks(mode);
        let device = pool
            .device()
            .filter(|_| mode & libc::S_IFMT != libc::S_IFLNK);
        for e in &m.extents {
            blocks.free(e.pblk, e.len as u64);
            if let Some(dev) = device {
                dev.forget(e.pblk, e.len as u64);
            }
        }
        map::free_nodes(pool, &m.nodes);
    }
    for b in super::xattr::blocks(pool, ino) {
        pool.alloc.meta_blocks().free(b, 1);
    }
    for b in dir_pages(pool, ino) {
        pool.alloc.meta_blocks().free(b, 1);
    }
}
