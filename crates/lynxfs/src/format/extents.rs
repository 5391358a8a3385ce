//! Reading a file's block map: up to four extents inline in the inode's live area, or
//! the root of an extent tree whose 4 KiB nodes hold sorted entries (binary search
//! gives the block at an offset in O(log n)).
//!
//! Tree node: u32 count | u16 depth | 10 bytes zero, then `count` 16-byte entries.
//! Depth 0 entries are extents; deeper entries are (u32 first file block, u32 zero,
//! u64 pool offset of the child node).

use super::inode::{self, Extent, MapWord};
use super::layout::{Layout, BLOCK};
use crate::pmem::{Backend, Pm};

pub const NODE_HEADER: u64 = 16;
pub const NODE_ENTRIES: usize = ((BLOCK - NODE_HEADER) / 16) as usize;
pub const MAX_DEPTH: u16 = 4;

/// Why a map could not be read.
pub type MapError = String;

/// Every extent of the inode at `inode_off`, in file order, checked for sanity (in
/// bounds of the blocks they name: a hybrid pool's regular files' the device's, the
/// others' the pool's; sorted, not overlapping). `nodes` receives the tree's own
/// blocks (always the pool's).
pub fn read_map<B: Backend>(
    pm: &Pm<B>,
    l: &Layout,
    inode_off: u64,
    nodes: &mut Vec<u64>,
) -> Result<Vec<Extent>, MapError> {
    let word = pm.load_u64(inode_off + inode::MAP);
    let m = MapWord::decode(word).ok_or_else(|| format!("bad map word {word:#x}"))?;
    let area = inode_off + m.area_off();
    let mut out = Vec::new();
    if m.kind == 0 {
        for i in 0..m.count as u64 {
            let mut b = [0u8; 16];
            pm.read(area + i * 16, &mut b);
            out.push(Extent::decode(&b));
        }
    } else {
        let root = pm.load_u64(area);
        if m.count > MAX_DEPTH {
            return Err(format!("extent tree depth {} too deep", m.count));
        }
        read_node(pm, l, root, m.count, nodes, &mut out)?;
    }
    let limit = if l.has_device_blocks() {
        l.extent_blocks(pm.load_u64(inode_off + inode::MODE) as u32)
    } else {
        l.data_blocks
    };
    check_extents(limit, &out)?;
    Ok(out)
}

fn read_node<B: Backend>(
    pm: &Pm<B>,
    l: &Layout,
    node: u64,
    depth: u16,
    nodes: &mut Vec<u64>,
    out: &mut Vec<Extent>,
) -> Result<(), MapError> {
    l.block_of(node)
        .ok_or_else(|| format!("extent node at {node:#x} is not a data block"))?;
    // A node reached twice would be read (255 entries deep) again each time: with
    // depth 4 that is billions of reads, a hang on a corrupt pool. Each node once.
    if nodes.contains(&node) {
        return Err(format!("extent node at {node:#x} is reached twice"));
    }
    nodes.push(node);
    let hdr = pm.load_u64(node);
    let count = (hdr as u32) as usize;
    let node_depth = (hdr >> 32) as u16;
    if count > NODE_ENTRIES || node_depth != depth || hdr >> 48 != 0 {
        return Err(format!(
            "extent node at {node:#x} has a bad header {hdr:#x}"
        ));
    }
    for i in 0..count as u64 {
        let mut b = [0u8; 16];
        pm.read(node + NODE_HEADER + i * 16, &mut b);
        let e = Extent::decode(&b);
        if depth == 0 {
            out.push(e);
        } else {
            read_node(pm, l, e.pblk, depth - 1, nodes, out)?;
        }
    }
    Ok(())
}

/// Extents must be non-empty, sorted, disjoint, and name blocks below `blocks`.
pub fn check_extents(blocks: u64, ext: &[Extent]) -> Result<(), MapError> {
    let mut prev_end = 0u64;
    for e in ext {
        if e.len == 0 {
            return Err("empty extent".into());
        }
        if (e.lblk as u64) < prev_end {
            return Err(format!(
                "extents overlap or are unsorted at file block {}",
                e.lblk
            ));
        }
        if e.pblk
            .checked_add(e.len as u64)
            .is_none_or(|end| end > blocks)
        {
            return Err(format!("extent {e:?} points outside the data area"));
        }
        prev_end = e.end();
    }
    Ok(())
}

/// The index of the extent holding file block `lblk`, by binary search.
pub fn find(ext: &[Extent], lblk: u64) -> Option<usize> {
    let i = ext.partition_point(|e| e.end() <= lblk);
    (i < ext.len() && ext[i].lblk as u64 <= lblk).then_some(i)
}
