//! Speculative preallocation for growing files (docs/CONSISTENCY.md, "append").
//!
//! A write that grows a file to [`FROM`] bytes or more, past every block the file
//! maps, also maps blocks after its own (as many as the file has, at most [`MAX`]),
//! and marks them speculative in the same map word ([`MapWord::spec`]). The appends
//! that follow land in blocks already mapped past the end of the file: each is a
//! copy, a fence and one store of the size, with no map change. A speculative block
//! is a mapped block at or past `spec` and past the end of the file; the end of the
//! file moving over one makes it data. What is left is given back when the file's
//! last handle closes, by truncate and fallocate, and after recovery; until then it
//! counts in neither `st_blocks` nor the file's data.
//!
//! [`MapWord::spec`]: crate::format::inode::MapWord::spec

use crate::error::Result;
use crate::format::inode::{self, Extent};
use crate::format::BLOCK;
use crate::pmem::Backend;
use crate::pool::Pool;

use super::map::{self, MapCache};
use super::txn::{self, Cover};

/// Files shorter than this (64 KiB) get no preallocation: most files are written
/// once and closed, and a reservation would cost them a trim at close.
pub const FROM: u64 = 16 * BLOCK;

/// The most blocks one growing write reserves (8 MiB): the reservation doubles the
/// file up to this, so a file written by appends changes its map O(log n + n / MAX)
/// times.
pub const MAX: u64 = 2048;

/// How many blocks to reserve after a write of `[off, end)` (file blocks up to
/// `last`; the size was `size`): none unless the write appends (starts at or before
/// the end: a write past it leaves a hole, which a reserve would fill), grows the
/// file to [`FROM`] or more, and no mapped block lies past it (blocks fallocate
/// placed past the end are the caller's, never speculative).
pub fn wanted(ext: &[Extent], size: u64, (off, end): (u64, u64), last: u64) -> u64 {
    let appends = off <= size && end > size;
    if !appends || end < FROM || ext.last().is_some_and(|e| e.end() > last + 1) {
        return 0;
    }
    let room = (super::MAX_FILE / BLOCK).saturating_sub(last + 1);
    (last + 1).min(MAX).min(room)
}

/// The first speculative file block of a map marked from `spec` in a file of `size`
/// bytes (blocks the end of the file has passed are data).
pub fn start(spec: u32, size: u64) -> u64 {
    (spec as u64).max(size.div_ceil(BLOCK))
}

/// Blocks of `ext` at or past file block `from`.
pub fn blocks_from(ext: &[Extent], from: u64) -> u64 {
    ext.iter()
        .map(|e| e.end().saturating_sub(from.max(e.lblk as u64)))
        .sum()
}

/// Give back `ino`'s speculative blocks and clear its mark: a new map without them,
/// published by one store of the map word (the commit point); the times stay. The
/// caller holds the file's lock alone.
pub fn trim<B: Backend>(pool: &Pool<B>, ino: u64, lane: u32, cache: &MapCache<'_>) -> Result<()> {
    if cache.get(pool, ino)?.word.spec == 0 {
        return Ok(());
    }
    trim_covered(pool, ino, lane, cache, &txn::cover(pool, ino)?)
}

/// [`trim`] inside a change that already holds its cover (fallocate).
pub(super) fn trim_covered<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    lane: u32,
    cache: &MapCache<'_>,
    cover: &Cover<'_>,
) -> Result<()> {
    let m = cache.get(pool, ino)?;
    if m.word.spec == 0 {
        return Ok(());
    }
    let size = pool.pm.load_u64(pool.layout.inode_addr(ino) + inode::SIZE);
    let from = start(m.word.spec, size);
    let (ext, freed) = map::splice(&m.extents, from, u64::MAX, &[]);
    let staged = map::stage(pool, ino, lane, &m, ext, (from, u64::MAX), 0)?;
    let ready = pool.pm.fence();
    drop(
        pool.pm
            .commit_u64(pool.layout.inode_addr(ino) + inode::MAP, staged.word, ready),
    );
    for &(s, n) in &freed {
        cover.free_data(pool, s, n);
    }
    cover.free_nodes(pool, &staged.old_nodes);
    cache.put(staged.map);
    Ok(())
}

/// After recovery, before anything else uses the pool: trim every file recovery
/// found with speculative blocks (a crash left them outstanding). A file that cannot
/// be trimmed (no space for a new map node) keeps its blocks, still owned.
pub fn trim_recovered<B: Backend>(pool: &Pool<B>, lane: u32) {
    let Some(rep) = &pool.recovery else {
        return;
    };
    let version = std::sync::atomic::AtomicU64::new(0);
    for &ino in &rep.speculative {
        let _ = trim(pool, ino, lane, &MapCache::new(&version, 0, None));
    }
}
