//! Writing a file's block map, copy-on-write: a new map goes to the inode's idle area
//! (up to four extents) or to freshly allocated tree nodes, and one store of the map
//! word (alone, or in a journal record with the size) publishes it. The old map's
//! nodes are freed after the commit.

use crate::error::{errno, Result};
use crate::format::extents::{self, NODE_ENTRIES, NODE_HEADER};
use crate::format::inode::{self, Extent, MapWord, INLINE_EXTENTS};
use crate::pmem::Backend;
use crate::pool::Pool;

/// A file's map as read: its extents, its word, and the tree nodes holding it.
pub struct Map {
    pub word: MapWord,
    pub extents: Vec<Extent>,
    pub nodes: Vec<u64>,
}

pub fn read<B: Backend>(pool: &Pool<B>, ino: u64) -> Result<Map> {
    let off = pool.layout.inode_addr(ino);
    let mut nodes = Vec::new();
    let extents =
        extents::read_map(&pool.pm, &pool.layout, off, &mut nodes).map_err(|_| errno::EIO)?;
    let word = MapWord::decode(pool.pm.load_u64(off + inode::MAP)).ok_or(errno::EIO)?;
    Ok(Map {
        word,
        extents,
        nodes,
    })
}

/// A map written but not yet published: the word to store, and its new nodes.
pub struct Staged {
    pub word: u64,
    pub new_nodes: Vec<u64>,
}

/// Write `ext` into the idle area of `ino` (or new nodes), flushed but not fenced.
pub fn stage<B: Backend>(
    pool: &Pool<B>,
    ino: u64,
    lane: u32,
    cur: MapWord,
    ext: &[Extent],
) -> Result<Staged> {
    let at = pool.layout.inode_addr(ino) + cur.other_area_off();
    let area = 1 - cur.area;
    if ext.len() <= INLINE_EXTENTS {
        let mut bytes = [0u8; inode::AREA_LEN as usize];
        for (i, e) in ext.iter().enumerate() {
            bytes[i * 16..i * 16 + 16].copy_from_slice(&e.encode());
        }
        let mut b = pool.pm.batch();
        b.write(at, &bytes);
        b.flushed();
        let word = MapWord {
            area,
            kind: 0,
            count: ext.len() as u16,
        };
        return Ok(Staged {
            word: word.encode(),
            new_nodes: Vec::new(),
        });
    }
    let mut new_nodes = Vec::new();
    let built = build_tree(pool, lane, ext, &mut new_nodes);
    let (root, depth) = match built {
        Ok(r) => r,
        Err(e) => {
            free_nodes(pool, &new_nodes);
            return Err(e);
        }
    };
    let mut b = pool.pm.batch();
    b.write_u64(at, root);
    b.flushed();
    let word = MapWord {
        area,
        kind: 1,
        count: depth,
    };
    Ok(Staged {
        word: word.encode(),
        new_nodes,
    })
}

/// Bottom-up: leaves of extents, then index levels, until one root node.
fn build_tree<B: Backend>(
    pool: &Pool<B>,
    lane: u32,
    ext: &[Extent],
    made: &mut Vec<u64>,
) -> Result<(u64, u16)> {
    let mut level: Vec<(u32, u64)> = Vec::new();
    for chunk in ext.chunks(NODE_ENTRIES) {
        let entries: Vec<[u8; 16]> = chunk.iter().map(|e| e.encode()).collect();
        let node = write_node(pool, lane, 0, &entries, made)?;
        level.push((chunk[0].lblk, node));
    }
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
    let runs = pool.alloc.blocks.alloc(lane, 1).ok_or(errno::ENOSPC)?;
    let node = pool.layout.block_addr(runs[0].0);
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
            pool.alloc.blocks.free(b, 1);
        }
    }
}

/// Replace file blocks `[a, b)` of `old` with `repl` (sorted, inside `[a, b)`).
/// Returns the new extents and the data-block runs no longer referenced.
pub fn splice(old: &[Extent], a: u64, b: u64, repl: &[Extent]) -> (Vec<Extent>, Vec<(u64, u64)>) {
    let mut out = Vec::with_capacity(old.len() + repl.len() + 1);
    let mut removed = Vec::new();
    for &e in old {
        let (s, end) = (e.lblk as u64, e.end());
        if end <= a || s >= b {
            out.push(e);
            continue;
        }
        if s < a {
            out.push(Extent {
                lblk: e.lblk,
                len: (a - s) as u32,
                pblk: e.pblk,
            });
        }
        if end > b {
            out.push(Extent {
                lblk: b as u32,
                len: (end - b) as u32,
                pblk: e.pblk + (b - s),
            });
        }
        let ms = s.max(a);
        let me = end.min(b);
        removed.push((e.pblk + (ms - s), me - ms));
    }
    out.extend_from_slice(repl);
    out.sort_by_key(|e| e.lblk);
    let merged = merge(out);
    let freed = if repl.is_empty() {
        removed
    } else {
        subtract(&removed, repl)
    };
    (merged, freed)
}

/// Join neighbours that are contiguous both in the file and on the pool.
fn merge(ext: Vec<Extent>) -> Vec<Extent> {
    let mut out: Vec<Extent> = Vec::with_capacity(ext.len());
    for e in ext {
        match out.last_mut() {
            Some(l)
                if l.end() == e.lblk as u64
                    && l.pblk + l.len as u64 == e.pblk
                    && (l.len as u64 + e.len as u64) <= u32::MAX as u64 =>
            {
                l.len += e.len
            }
            _ => out.push(e),
        }
    }
    out
}

/// Runs in `removed` minus the blocks `repl` still uses (in-place writes keep theirs).
fn subtract(removed: &[(u64, u64)], repl: &[Extent]) -> Vec<(u64, u64)> {
    let kept: std::collections::HashSet<u64> = repl
        .iter()
        .flat_map(|e| e.pblk..e.pblk + e.len as u64)
        .collect();
    let mut out = Vec::new();
    for &(s, n) in removed {
        let mut run: Option<(u64, u64)> = None;
        for blk in s..s + n {
            if kept.contains(&blk) {
                out.extend(run.take());
            } else {
                run = Some(match run {
                    Some((rs, rn)) => (rs, rn + 1),
                    None => (blk, 1),
                });
            }
        }
        out.extend(run);
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
    fn splice_keeps_in_place_blocks() {
        let (n, freed) = splice(&[e(0, 4, 10)], 0, 4, &[e(0, 2, 50), e(2, 2, 12)]);
        assert_eq!(n, vec![e(0, 2, 50), e(2, 2, 12)]);
        assert_eq!(freed, vec![(10, 2)]);
    }
}
