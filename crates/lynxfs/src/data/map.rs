//! Writing a file's block map, copy-on-write: a new map goes to the inode's idle area
//! (up to four extents) or to freshly allocated tree nodes, and one store of the map
//! word (alone, or in a journal record with the size) publishes it. The old map's
//! nodes are freed after the commit.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{errno, Result};
use crate::format::extents::{self, NODE_ENTRIES, NODE_HEADER};
use crate::format::inode::{self, Extent, MapWord, INLINE_EXTENTS};
use crate::pmem::Backend;
use crate::pool::Pool;

/// A file's map as read: its extents, its word, the tree nodes holding it, and (for
/// trees of depth 0 or 1) its leaves, so an update can copy only the leaves it
/// changes and a new root (path copying) instead of rewriting the whole map.
#[derive(Clone, Debug, Default)]
pub struct Map {
    pub word: MapWord,
    pub extents: Vec<Extent>,
    pub nodes: Vec<u64>,
    pub leaves: Vec<Leaf>,
}

/// A leaf node and the run of `Map::extents` it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leaf {
    pub node: u64,
    pub start: usize,
    pub count: usize,
}

pub fn read<B: Backend>(pool: &Pool<B>, ino: u64) -> Result<Map> {
    let off = pool.layout.inode_addr(ino);
    let mut nodes = Vec::new();
    let extents =
        extents::read_map(&pool.pm, &pool.layout, off, &mut nodes).map_err(|_| errno::EIO)?;
    let word = MapWord::decode(pool.pm.load_u64(off + inode::MAP)).ok_or(errno::EIO)?;
    let leaves = if word.kind == 1 && word.count <= 1 {
        leaves_of(pool, &nodes, word.count)
    } else {
        Vec::new()
    };
    Ok(Map {
        word,
        extents,
        nodes,
        leaves,
    })
}

/// The leaves of a depth-0 tree (the root is the leaf) or depth-1 tree (the nodes
/// after the root, in order), with their extent counts from the node headers.
fn leaves_of<B: Backend>(pool: &Pool<B>, nodes: &[u64], depth: u16) -> Vec<Leaf> {
    let leaf_nodes = if depth == 0 {
        nodes
    } else {
        &nodes[1.min(nodes.len())..]
    };
    let mut start = 0;
    leaf_nodes
        .iter()
        .map(|&node| {
            let count = pool.pm.load_u64(node) as u32 as usize;
            let l = Leaf { node, start, count };
            start += count;
            l
        })
        .collect()
}

/// A process's copy of one file's map, kept with an open file so reads and writes do
/// not parse the pool's map each time, with the map version it was read at; and the
/// extent its last read went through, so the next read inside it skips the copy's
/// lock and search.
#[derive(Default)]
pub struct LocalMap {
    copy: parking_lot::Mutex<Option<(MapStamp, std::sync::Arc<Map>)>>,
    hint: ExtentHint,
}

impl LocalMap {
    /// Let the copy go (its open file was closed for good: the handle table may keep
    /// the closed file a while before reclaiming it, and a large map with it).
    pub fn forget(&self) {
        *self.copy.lock() = None;
    }
}

/// The runtime generation and map version a copy was read at.
type MapStamp = (u64, u64);

/// One extent of a file's map and the stamp of the map it came from, in words a
/// reader loads without a lock (a sequence lock: threads sharing an open file may
/// read through it at once, and a read that sees a rewrite in progress ignores it).
#[derive(Default)]
struct ExtentHint {
    /// Even while the words below are whole; odd while a thread rewrites them.
    seq: AtomicU64,
    generation: AtomicU64,
    version: AtomicU64,
    /// The extent's first file block (high half) and length (low half; 0: none).
    span: AtomicU64,
    pblk: AtomicU64,
}

impl ExtentHint {
    /// The extent and its stamp, unless a rewrite is in progress or came between.
    fn load(&self) -> Option<(MapStamp, Extent)> {
        let s = self.seq.load(Ordering::Acquire);
        if s & 1 == 1 {
            return None;
        }
        let stamp = (
            self.generation.load(Ordering::Relaxed),
            self.version.load(Ordering::Relaxed),
        );
        let span = self.span.load(Ordering::Relaxed);
        let pblk = self.pblk.load(Ordering::Relaxed);
        // Orders the loads above before the second look at the sequence.
        std::sync::atomic::fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == s).then_some((
            stamp,
            Extent {
                lblk: (span >> 32) as u32,
                len: span as u32,
                pblk,
            },
        ))
    }

    /// Remember extent `e` of the map stamped `stamp` (skipped while another thread
    /// rewrites the hint: it is only a hint).
    fn store(&self, stamp: MapStamp, e: Extent) {
        let s = self.seq.load(Ordering::Relaxed);
        if s & 1 == 1
            || self
                .seq
                .compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        // Orders the odd sequence before the stores below, for readers.
        std::sync::atomic::fence(Ordering::Release);
        self.generation.store(stamp.0, Ordering::Relaxed);
        self.version.store(stamp.1, Ordering::Relaxed);
        self.span
            .store((e.lblk as u64) << 32 | e.len as u64, Ordering::Relaxed);
        self.pblk.store(e.pblk, Ordering::Relaxed);
        self.seq.store(s + 2, Ordering::Release);
    }
}

/// A file's map as a caller may cache it: the file's map version (a shared word in its
/// cachelet, bumped by every change, from any process) and this caller's copy, if it
/// keeps one. Callers hold the file's lock (shared to read, alone to change), which
/// orders every use of the version with the pool.
pub struct MapCache<'a> {
    version: &'a AtomicU64,
    /// The runtime state's generation: a repair rebuilds the versions from zero, so a
    /// copy counts only within one generation.
    generation: u64,
    local: Option<&'a LocalMap>,
}

impl<'a> MapCache<'a> {
    pub fn new(version: &'a AtomicU64, generation: u64, local: Option<&'a LocalMap>) -> Self {
        MapCache {
            version,
            generation,
            local,
        }
    }

    /// The current map's extent holding file block `lb`, if it is the one the last
    /// read through this copy's handle remembered ([`Self::remember`]): no lock, no
    /// search. The version word every map change bumps (under the file's lock, which
    /// the caller holds shared, or checks after its copy: `Fs::read_unlocked`) says
    /// whether it is still current.
    #[inline]
    pub fn hinted(&self, lb: u64) -> Option<Extent> {
        let (stamp, e) = self.local?.hint.load()?;
        let current = (self.generation, self.version.load(Ordering::Acquire));
        (stamp == current && e.lblk as u64 <= lb && lb < e.end()).then_some(e)
    }

    /// Remember extent `e` of the map [`Self::get`] returned for the next
    /// [`Self::hinted`]; the caller still holds the lock it held for that `get`.
    pub fn remember(&self, e: Extent) {
        if let Some(local) = self.local {
            let current = (self.generation, self.version.load(Ordering::Acquire));
            local.hint.store(current, e);
        }
    }

    /// The map: the copy if it is of the current version, else read from the pool.
    pub fn get<B: Backend>(&self, pool: &Pool<B>, ino: u64) -> Result<std::sync::Arc<Map>> {
        let v = (self.generation, self.version.load(Ordering::Acquire));
        let Some(local) = self.local else {
            return Ok(std::sync::Arc::new(read(pool, ino)?));
        };
        let mut c = local.copy.lock();
        if let Some((cv, m)) = c.as_ref() {
            if *cv == v {
                return Ok(m.clone());
            }
        }
        let m = std::sync::Arc::new(read(pool, ino)?);
        *c = Some((v, m.clone()));
        Ok(m)
    }

    /// The map changed to `m`.
    pub fn put(&self, m: Map) {
        let v = (
            self.generation,
            self.version.fetch_add(1, Ordering::AcqRel) + 1,
        );
        if let Some(local) = self.local {
            *local.copy.lock() = Some((v, std::sync::Arc::new(m)));
        }
    }

    /// Extent `i` of `m` (the current map) now points at block `pblk`. The copy is
    /// dropped first, so that `m` is usually the only reference and is changed in
    /// place rather than copied.
    pub fn repoint(&self, m: std::sync::Arc<Map>, i: usize, pblk: u64) {
        if let Some(local) = self.local {
            local.copy.lock().take();
        }
        let mut m = std::sync::Arc::unwrap_or_clone(m);
        m.extents[i].pblk = pblk;
        self.put(m);
    }

    /// The map changed (or may have): every copy is stale.
    pub fn clear(&self) {
        self.version.fetch_add(1, Ordering::AcqRel);
        if let Some(local) = self.local {
            *local.copy.lock() = None;
        }
    }
}

/// A map written but not yet published: the word to store, its new nodes, the nodes
/// of the old map it replaces (freed after the commit), and the new map for the cache.
pub struct Staged {
    pub word: u64,
    pub new_nodes: Vec<u64>,
    pub old_nodes: Vec<u64>,
    pub map: Map,
}

/// Fill level of new leaves: room to grow before the next split.
const LEAF_FILL: usize = NODE_ENTRIES * 3 / 4;

/// Write the map `ext` (which differs from `old` only around file blocks `[a, b)`)
/// into the idle area of `ino` or new nodes, flushed but not fenced; its word marks
/// speculative preallocation from file block `spec` (0: none; see [`MapWord::spec`]).
pub fn stage<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    lane: u32,
    old: &Map,
    ext: Vec<Extent>,
    (a, b): (u64, u64),
    spec: u32,
) -> Result<Staged> {
    let cur = old.word;
    let at = pool.layout.inode_addr(ino) + cur.other_area_off();
    let area = 1 - cur.area;
    if ext.len() <= INLINE_EXTENTS {
        let mut bytes = [0u8; inode::AREA_LEN as usize];
        for (i, e) in ext.iter().enumerate() {
            bytes[i * 16..i * 16 + 16].copy_from_slice(&e.encode());
        }
        let mut batch = pool.pm.batch();
        batch.write(at, &bytes);
        batch.flushed();
        let word = MapWord {
            area,
            kind: 0,
            count: ext.len() as u16,
            spec,
        };
        let map = Map {
            word,
            extents: ext,
            nodes: Vec::new(),
            leaves: Vec::new(),
        };
        return Ok(Staged {
            word: word.encode(),
            new_nodes: Vec::new(),
            old_nodes: old.nodes.clone(),
            map,
        });
    }
    let mut made = Vec::new();
    let built = if old.leaves.is_empty() {
        build_full(pool, lane, &ext, &mut made)
            .map(|(root, depth, leaves)| (root, depth, leaves, old.nodes.clone()))
    } else {
        path_copy(pool, lane, old, &ext, (a, b), &mut made)
    };
    let (root, depth, leaves, old_nodes) = match built {
        Ok(r) => r,
        Err(e) => {
            free_nodes(pool, &made);
            return Err(e);
        }
    };
    let mut batch = pool.pm.batch();
    batch.write_u64(at, root);
    batch.flushed();
    let word = MapWord {
        area,
        kind: 1,
        count: depth,
        spec,
    };
    let mut nodes = Vec::with_capacity(leaves.len() + 1);
    if depth == 1 {
        nodes.push(root);
    }
    nodes.extend(leaves.iter().map(|l| l.node));
    if depth > 1 {
        nodes = made.clone();
    }
    let keep_leaves = if depth <= 1 { leaves } else { Vec::new() };
    let map = Map {
        word,
        extents: ext,
        nodes,
        leaves: keep_leaves,
    };
    Ok(Staged {
        word: word.encode(),
        new_nodes: made,
        old_nodes,
        map,
    })
}

/// A whole new tree; returns root, depth and (for depth <= 1) its leaves.
fn build_full<B: Backend>(
    pool: &Pool<B>,
    lane: u32,
    ext: &[Extent],
    made: &mut Vec<u64>,
) -> Result<(u64, u16, Vec<Leaf>)> {
    let leaves = write_leaves(pool, lane, ext, 0, made)?;
    let (root, depth) = root_over(pool, lane, ext, &leaves, made)?;
    Ok((root, depth, leaves))
}

/// Leaves for `ext` (whose first element is extent number `base` of the map).
fn write_leaves<B: Backend>(
    pool: &Pool<B>,
    lane: u32,
    ext: &[Extent],
    base: usize,
    made: &mut Vec<u64>,
) -> Result<Vec<Leaf>> {
    let mut out = Vec::with_capacity(ext.len().div_ceil(LEAF_FILL));
    let mut start = base;
    for chunk in ext.chunks(LEAF_FILL) {
        let entries: Vec<[u8; 16]> = chunk.iter().map(|e| e.encode()).collect();
        let node = write_node(pool, lane, 0, &entries, made)?;
        out.push(Leaf {
            node,
            start,
            count: chunk.len(),
        });
        start += chunk.len();
    }
    Ok(out)
}

/// The root over `leaves`: the leaf itself when there is one, else index levels.
fn root_over<B: Backend>(
    pool: &Pool<B>,
    lane: u32,
    ext: &[Extent],
    leaves: &[Leaf],
    made: &mut Vec<u64>,
) -> Result<(u64, u16)> {
    let level: Vec<(u32, u64)> = leaves.iter().map(|l| (ext[l.start].lblk, l.node)).collect();
    build_levels(pool, lane, level, made)
}

/// Copy only the leaves that hold extents `ext` changed (and a new root).
fn path_copy<B: Backend>(
    pool: &Pool<B>,
    lane: u32,
    old: &Map,
    ext: &[Extent],
    (a, b): (u64, u64),
    made: &mut Vec<u64>,
) -> Result<(u64, u16, Vec<Leaf>, Vec<u64>)> {
    let o = &old.extents;
    // Extents before the one ending at or after `a` - 1, and after the one starting past
    // `b`, are the same in both maps (a splice only merges immediate neighbours).
    let p = o.partition_point(|e| e.end() < a).saturating_sub(1);
    let q = (o.partition_point(|e| (e.lblk as u64) <= b) + 1).min(o.len());
    let delta = ext.len() as isize - o.len() as isize;
    let leaf_of = |idx: usize| {
        old.leaves
            .partition_point(|l| l.start <= idx)
            .saturating_sub(1)
    };
    let i = leaf_of(p);
    let j = leaf_of(q.max(1) - 1).max(i);
    let seg_start = old.leaves[i].start;
    let seg_end_old = old.leaves[j].start + old.leaves[j].count;
    let seg_end_new = (seg_end_old as isize + delta) as usize;
    if seg_end_new < seg_start || seg_end_new > ext.len() {
        let (root, depth, leaves) = build_full(pool, lane, ext, made)?;
        return Ok((root, depth, leaves, old.nodes.clone()));
    }
    let fresh = write_leaves(pool, lane, &ext[seg_start..seg_end_new], seg_start, made)?;
    let mut leaves: Vec<Leaf> = old.leaves[..i].to_vec();
    leaves.extend(fresh);
    leaves.extend(old.leaves[j + 1..].iter().map(|l| Leaf {
        start: (l.start as isize + delta) as usize,
        ..*l
    }));
    let mut freed: Vec<u64> = old.leaves[i..=j].iter().map(|l| l.node).collect();
    if old.word.count == 1 {
        freed.push(old.nodes[0]); // the old root
    }
    if leaves.len() > NODE_ENTRIES {
        // Too many leaves for one root: rebuild (depth 2), freeing every old node.
        free_nodes(pool, made);
        made.clear();
        let (root, depth, leaves) = build_full(pool, lane, ext, made)?;
        return Ok((root, depth, leaves, old.nodes.clone()));
    }
    let (root, depth) = root_over(pool, lane, ext, &leaves, made)?;
    Ok((root, depth, leaves, freed))
}

/// Index levels over `level` until one root node.
fn build_levels<B: Backend>(
    pool: &Pool<B>,
    lane: u32,
    mut level: Vec<(u32, u64)>,
    made: &mut Vec<u64>,
) -> Result<(u64, u16)> {
    let mut depth = 0u16;
    while level.len() > 1 {
        depth += 1;
        if depth > extents::MAX_DEPTH {
            return Err(errno::EFBIG);
        }
        let mut up = Vec::new();
        for chunk in level.chunks(NODE_ENTRIES) {
            let entries: Vec<[u8; 16]> = chunk
                .iter()
                .map(|&(first, node)| {
                    Extent {
                        lblk: first,
                        len: 0,
                        pblk: node,
                    }
                    .encode()
                })
                .collect();
            let node = write_node(pool, lane, depth, &entries, made)?;
            up.push((chunk[0].0, node));
        }
        level = up;
    }
    Ok((level[0].1, depth))
}

fn write_node<B: Backend>(
    pool: &Pool<B>,
    lane: u32,
    depth: u16,
    entries: &[[u8; 16]],
    made: &mut Vec<u64>,
) -> Result<u64> {
    let block = pool
        .alloc
        .meta_blocks()
        .alloc_high(lane)
        .ok_or(errno::ENOSPC)?;
    let node = pool.layout.block_addr(block);
    made.push(node);
    let mut bytes = Vec::with_capacity(NODE_HEADER as usize + entries.len() * 16);
    let hdr = entries.len() as u64 | (depth as u64) << 32;
    bytes.extend_from_slice(&hdr.to_le_bytes());
    bytes.extend_from_slice(&[0u8; 8]);
    for e in entries {
        bytes.extend_from_slice(e);
    }
    let mut b = pool.pm.batch();
    b.write(node, &bytes);
    b.flushed();
    Ok(node)
}

pub fn free_nodes<B: Backend>(pool: &Pool<B>, nodes: &[u64]) {
    for &n in nodes {
        if let Some(b) = pool.layout.block_of(n) {
            pool.alloc.meta_blocks().free(b, 1);
        }
    }
}

/// Replace file blocks `[a, b)` of `old` with `repl` (sorted, inside `[a, b)`).
/// Returns the new extents and the data-block runs no longer referenced.
pub fn splice(old: &[Extent], a: u64, b: u64, repl: &[Extent]) -> (Vec<Extent>, Vec<(u64, u64)>) {
    splice_with(old, a, b, repl, true)
}

/// [`splice`], keeping `repl`'s extents as they are: single-block extents stay single
/// even where contiguous on the pool, so that each can later be overwritten by one
/// swap of its block pointer.
pub fn splice_singles(
    old: &[Extent],
    a: u64,
    b: u64,
    repl: &[Extent],
) -> (Vec<Extent>, Vec<(u64, u64)>) {
    splice_with(old, a, b, repl, false)
}

fn splice_with(
    old: &[Extent],
    a: u64,
    b: u64,
    repl: &[Extent],
    join: bool,
) -> (Vec<Extent>, Vec<(u64, u64)>) {
    // Only a window around [a, b) changes: the extents touching it and one neighbour on
    // each side (which may merge). The rest is copied as it is, with no sort.
    let p = old.partition_point(|e| e.end() < a).saturating_sub(1);
    if old.last().is_none_or(|l| l.end() <= a) {
        return (appended(old, p, repl, join), Vec::new());
    }
    let q = (old.partition_point(|e| (e.lblk as u64) <= b) + 1).min(old.len());
    let mut window = Vec::with_capacity(q - p + repl.len() + 2);
    let mut removed = Vec::new();
    for &e in &old[p..q] {
        let (s, end) = (e.lblk as u64, e.end());
        if end <= a || s >= b {
            window.push(e);
            continue;
        }
        if s < a {
            window.push(Extent {
                lblk: e.lblk,
                len: (a - s) as u32,
                pblk: e.pblk,
            });
        }
        if end > b {
            window.push(Extent {
                lblk: b as u32,
                len: (end - b) as u32,
                pblk: e.pblk + (b - s),
            });
        }
        let ms = s.max(a);
        let me = end.min(b);
        removed.push((e.pblk + (ms - s), me - ms));
    }
    window.extend_from_slice(repl);
    window.sort_by_key(|e| e.lblk);
    let mut out = Vec::with_capacity(old.len() + repl.len() + 1);
    out.extend_from_slice(&old[..p]);
    if join {
        out.extend(merge(window));
    } else {
        out.extend(window);
    }
    out.extend_from_slice(&old[q..]);
    let freed = if repl.is_empty() {
        removed
    } else {
        subtract(&removed, repl)
    };
    (out, freed)
}

/// [`splice_with`] where `repl` lies past every extent of `old` (an append: a growing
/// write's new blocks and reserve): nothing is removed, so the window from `p` is
/// `old`'s tail and `repl` already in order; the same map, built in one vector, with
/// no sort and no subtraction (most of a small file's append went there).
fn appended(old: &[Extent], p: usize, repl: &[Extent], join: bool) -> Vec<Extent> {
    let mut out = Vec::with_capacity(old.len() + repl.len());
    out.extend_from_slice(&old[..p]);
    let window = old[p..].iter().chain(repl).copied();
    if join {
        merge_into(&mut out, p, window);
    } else {
        out.extend(window);
    }
    out
}

/// Join neighbours that are contiguous both in the file and on the pool.
fn merge(ext: Vec<Extent>) -> Vec<Extent> {
    let mut out: Vec<Extent> = Vec::with_capacity(ext.len());
    merge_into(&mut out, 0, ext);
    out
}

/// Push `ext` onto `out`, each joined to the one before when contiguous both in the
/// file and on the pool (never to `out`'s first `from` extents).
fn merge_into(out: &mut Vec<Extent>, from: usize, ext: impl IntoIterator<Item = Extent>) {
    for e in ext {
        let joinable = out.len() > from;
        match out.last_mut() {
            Some(l)
                if joinable
                    && l.end() == e.lblk as u64
                    && l.pblk + l.len as u64 == e.pblk
                    && (l.len as u64 + e.len as u64) <= u32::MAX as u64 =>
            {
                l.len += e.len
            }
            _ => out.push(e),
        }
    }
}

/// Runs in `removed` minus the blocks `repl` still uses (in-place writes keep theirs):
/// interval arithmetic over `repl`'s runs sorted by block, not a set of every block
/// (a 1 MiB write's set cost more than its map change).
fn subtract(removed: &[(u64, u64)], repl: &[Extent]) -> Vec<(u64, u64)> {
    let mut kept: Vec<(u64, u64)> = repl
        .iter()
        .map(|e| (e.pblk, e.pblk + e.len as u64))
        .collect();
    kept.sort_unstable();
    let mut out = Vec::new();
    for &(s, n) in removed {
        let (mut at, end) = (s, s + n);
        for &(ks, ke) in kept.iter().filter(|&&(ks, ke)| ke > s && ks < end) {
            if ks > at {
                out.push((at, ks - at));
            }
            at = at.max(ke);
        }
        if at < end {
            out.push((at, end - at));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(lblk: u32, len: u32, pblk: u64) -> Extent {
        Extent { lblk, len, pblk }
    }

    #[test]
    fn splice_overwrite_middle() {
        let (n, freed) = splice(&[e(0, 10, 100)], 3, 5, &[e(3, 2, 500)]);
        assert_eq!(n, vec![e(0, 3, 100), e(3, 2, 500), e(5, 5, 105)]);
        assert_eq!(freed, vec![(103, 2)]);
    }

    #[test]
    fn splice_punch_and_merge() {
        let (n, freed) = splice(&[e(0, 4, 10), e(4, 4, 14)], 2, 6, &[]);
        assert_eq!(n, vec![e(0, 2, 10), e(6, 2, 16)]);
        assert_eq!(freed, vec![(12, 2), (14, 2)]);
        let (n, _) = splice(&n, 2, 6, &[e(2, 4, 12)]);
        assert_eq!(n, vec![e(0, 8, 10)], "contiguous runs merge back");
    }

    #[test]
    fn subtract_leaves_the_blocks_no_replacement_keeps() {
        let kept = [e(0, 2, 12), e(5, 1, 20), e(6, 3, 14), e(9, 1, 15)];
        assert_eq!(
            subtract(&[(10, 8), (19, 3), (30, 2)], &kept),
            vec![(10, 2), (17, 1), (19, 1), (21, 1), (30, 2)]
        );
        assert_eq!(subtract(&[(12, 2)], &kept), vec![]);
    }

    #[test]
    fn splice_appends_past_the_last_extent() {
        let old = [e(0, 2, 10), e(2, 1, 12), e(5, 1, 40)];
        let (n, freed) = splice(&old, 6, 9, &[e(6, 2, 41), e(8, 1, 60)]);
        assert_eq!(n, vec![e(0, 2, 10), e(2, 1, 12), e(5, 3, 40), e(8, 1, 60)]);
        assert_eq!(freed, vec![]);
        let (n, _) = splice(&old, 7, 8, &[e(7, 1, 42)]);
        assert_eq!(n, vec![e(0, 2, 10), e(2, 1, 12), e(5, 1, 40), e(7, 1, 42)]);
        let (n, _) = splice_singles(&old, 6, 7, &[e(6, 1, 41)]);
        assert_eq!(n, vec![e(0, 2, 10), e(2, 1, 12), e(5, 1, 40), e(6, 1, 41)]);
        let (n, _) = splice(&[], 0, 3, &[e(0, 3, 7)]);
        assert_eq!(n, vec![e(0, 3, 7)]);
        // Contiguous extents join from the neighbour before the window on, as in the
        // general splice, not before it.
        let singles = [e(0, 1, 10), e(1, 1, 11), e(2, 1, 12)];
        let (n, _) = splice(&singles, 3, 4, &[e(3, 1, 13)]);
        assert_eq!(n, vec![e(0, 1, 10), e(1, 3, 11)]);
    }

    #[test]
    fn splice_keeps_in_place_blocks() {
        let (n, freed) = splice(&[e(0, 4, 10)], 0, 4, &[e(0, 2, 50), e(2, 2, 12)]);
        assert_eq!(n, vec![e(0, 2, 50), e(2, 2, 12)]);
        assert_eq!(freed, vec![(10, 2)]);
    }
}
