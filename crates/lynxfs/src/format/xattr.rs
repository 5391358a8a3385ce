//! The on-media form of an inode's extended attributes (the set's codec; the
//! operations on them are `data::xattr`). An inode's xattr word names a head block,
//! in one of three forms (docs/FORMAT.md):
//! - **single**: the entries fit in the head: a u64 count of bytes used, then entries
//!   (u8 name length, u16 value length, name, value). A change rewrites the block
//!   (copy-on-write: at most 4 KiB).
//! - **log** (pools with `INCOMPAT_XATTR_LOG`): the head's first word has bit 62 set
//!   and the log's length in its low bits, the second the set's id, the others name
//!   index blocks, each naming 512 data blocks that hold the log: entries (u8 name
//!   length, u32 value length, name, value), a later entry of a name replacing an
//!   earlier one and a value length of `u32::MAX` removing the name. A change appends
//!   one entry past the end and publishes it by storing the new length (one 8-byte
//!   commit), so it costs the entry's bytes whatever the set's size; each process
//!   keeps an index of the names of the large sets it uses (`data::xattr::Indexes`). When the
//!   dead entries outweigh the live ones (or the log is full), the set is rewritten
//!   compacted, as a whole-set change is.
//! - **chained** (written by pools without the log bit): bit 63 set, the entries'
//!   length in the low bits, the words after it naming up to 511 continuation blocks
//!   through which the entries (u32 value lengths) run. A change rewrites it whole.

use std::collections::HashMap;

use crate::error::{errno, Result};
use crate::pmem::{Backend, Pm};

use super::layout::{Layout, BLOCK};

/// Linux's limit on one value (XATTR_SIZE_MAX).
pub const SIZE_MAX: usize = 65536;
/// A single or chained head's first word, before its entries or links.
pub const HEADER: usize = 8;
/// Bit 63 of the head's first word: the entries live in continuation blocks.
pub const CHAINED: u64 = 1 << 63;
/// Continuation blocks one chained head can name: 511, about 2 MiB of attributes.
pub const MAX_CHAIN: usize = (BLOCK as usize - HEADER) / 8;
/// Bit 62 of the head's first word: the set is a log.
pub const LOG: u64 = 1 << 62;
/// A log's length: the head's first word without its form bits.
pub const LENGTH: u64 = LOG - 1;
/// Where a log head's index block pointers start (after the length and the id).
pub const LOG_HEADER: usize = 16;
/// Data block pointers one index block holds.
pub const PER_INDEX: u64 = BLOCK / 8;
/// The longest a log may grow: 8,192 data blocks (32 MiB; 16 index blocks).
pub const MAX_LOG: u64 = 8192 * BLOCK;
/// The most one file's attributes may take (each name and value plus 5 bytes): half
/// the log, so that a full log compacts to at most half of it and the rewrites a
/// growing log needs stay proportional to what was appended. Beyond it: ENOSPC.
pub const MAX_LIVE: u64 = MAX_LOG / 2;
/// A log entry's value length that removes the name.
pub const TOMBSTONE: u32 = u32::MAX;

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
    if word & CHAINED == 0 && word & LOG != 0 {
        let log = LogBlocks::load(pm, l, head)?;
        let stream = log.read(pm, 0, log.len);
        let attrs = replay(&stream, head)?;
        return Ok(Stored {
            blocks: log.all_blocks(l, hb),
            attrs,
        });
    }
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
    let (blocks, stream) = read_chain(pm, l, head, &raw, word)?;
    let attrs = parse(&stream, 4, head)?;
    Ok(Stored { blocks, attrs })
}

/// A chained set's blocks (head first) and entry stream.
pub fn read_chain<B: Backend>(
    pm: &Pm<B>,
    l: &Layout,
    head: u64,
    raw: &[u8],
    word: u64,
) -> std::result::Result<(Vec<u64>, Vec<u8>), String> {
    let used = (word & !CHAINED) as usize;
    let n = used.div_ceil(BLOCK as usize);
    if n > MAX_CHAIN {
        return Err(format!("xattr block at {head:#x} claims {used} bytes"));
    }
    let mut blocks = vec![l.block_of(head).expect("checked by the caller")];
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
    stream.truncate(used);
    Ok((blocks, stream))
}

/// Entries packed in `bytes`, each with a `vlen`-byte value length.
pub fn parse(bytes: &[u8], vlen: usize, head: u64) -> std::result::Result<Attrs, String> {
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

/// One log entry: its name, and its value's place in the log (`None`: a removal).
pub struct LogEntry<'a> {
    pub name: &'a [u8],
    pub value: Option<(u64, u32)>,
}

/// The log entries in `bytes`, which start at log offset `base`.
pub fn log_entries(
    bytes: &[u8],
    base: u64,
    head: u64,
) -> std::result::Result<Vec<LogEntry<'_>>, String> {
    let mut out = Vec::new();
    let mut p = 0;
    while p < bytes.len() {
        let ns = p + 5;
        if ns > bytes.len() {
            return Err(format!("xattr log at {head:#x} has a torn entry"));
        }
        let nl = bytes[p] as usize;
        let vl = u32::from_le_bytes(bytes[p + 1..ns].try_into().expect("4"));
        let vs = ns + nl;
        let len = if vl == TOMBSTONE { 0 } else { vl as usize };
        if nl == 0 || (vl != TOMBSTONE && len > SIZE_MAX) || vs + len > bytes.len() {
            return Err(format!("xattr log at {head:#x} has a bad entry"));
        }
        out.push(LogEntry {
            name: &bytes[ns..vs],
            value: (vl != TOMBSTONE).then_some((base + vs as u64, vl)),
        });
        p = vs + len;
    }
    Ok(out)
}

/// The attributes a whole log leaves, in the order their names were first set.
pub fn replay(stream: &[u8], head: u64) -> std::result::Result<Attrs, String> {
    let mut slots: Vec<Option<(Vec<u8>, Vec<u8>)>> = Vec::new();
    let mut at: HashMap<&[u8], usize> = HashMap::new();
    for e in log_entries(stream, 0, head)? {
        let value = e
            .value
            .map(|(off, len)| stream[off as usize..off as usize + len as usize].to_vec());
        match (at.get(e.name), value) {
            (Some(&i), Some(v)) if slots[i].is_some() => slots[i] = Some((e.name.to_vec(), v)),
            (Some(&i), None) => slots[i] = None,
            (_, Some(v)) => {
                at.insert(e.name, slots.len());
                slots.push(Some((e.name.to_vec(), v)));
            }
            (None, None) => {}
        }
    }
    Ok(slots.into_iter().flatten().collect())
}

/// Where a log's bytes are: its length, index blocks and data blocks (pool offsets).
pub struct LogBlocks {
    pub len: u64,
    pub index: Vec<u64>,
    pub data: Vec<u64>,
}

impl LogBlocks {
    /// The blocks of the log headed at `head`, checked: each a data block, none twice.
    pub fn load<B: Backend>(
        pm: &Pm<B>,
        l: &Layout,
        head: u64,
    ) -> std::result::Result<LogBlocks, String> {
        let len = pm.load_u64(head) & LENGTH;
        if len > MAX_LOG {
            return Err(format!("xattr log at {head:#x} claims {len} bytes"));
        }
        let n = len.div_ceil(BLOCK);
        let mut seen = std::collections::HashSet::from([head]);
        let mut check = |off: u64| {
            if l.block_of(off).is_none() || !seen.insert(off) {
                return Err(format!(
                    "xattr log at {head:#x}: link {off:#x} is not a data block of its own"
                ));
            }
            Ok(off)
        };
        let mut index = Vec::new();
        let mut data = Vec::with_capacity(n as usize);
        for k in 0..n.div_ceil(PER_INDEX) {
            let at = pm.load_u64(head + LOG_HEADER as u64 + 8 * k);
            index.push(check(at)?);
            let here = (n - k * PER_INDEX).min(PER_INDEX);
            let words = pm.read_vec(at, 8 * here as usize);
            for w in words.chunks_exact(8) {
                data.push(check(u64::from_le_bytes(w.try_into().expect("8")))?);
            }
        }
        Ok(LogBlocks { len, index, data })
    }

    /// The log's bytes `from..to`.
    pub fn read<B: Backend>(&self, pm: &Pm<B>, from: u64, to: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity((to - from) as usize);
        let mut p = from;
        while p < to {
            let (blk, within) = ((p / BLOCK) as usize, p % BLOCK);
            let n = (BLOCK - within).min(to - p);
            out.extend_from_slice(&pm.read_vec(self.data[blk] + within, n as usize));
            p += n;
        }
        out
    }

    /// Every block of the set, as block numbers, head (`hb`) first.
    pub fn all_blocks(&self, l: &Layout, hb: u64) -> Vec<u64> {
        let mut v = vec![hb];
        for &off in self.index.iter().chain(&self.data) {
            v.push(l.block_of(off).expect("checked when read"));
        }
        v
    }
}

/// Bytes an entry of a `name_len` name and a `value_len` value takes in a log.
pub fn entry_len(name_len: usize, value_len: u64) -> u64 {
    5 + name_len as u64 + value_len
}

/// The entries with `vlen`-byte value lengths.
pub fn entries(attrs: &Attrs, vlen: usize) -> Vec<u8> {
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
/// bits of length), else the entry stream of a log (or, on a pool without logs, of a
/// chain).
pub enum Encoded {
    Single(Vec<u8>),
    Log(Vec<u8>),
    Chained(Vec<u8>),
}

pub fn encode(attrs: &Attrs, logs: bool) -> Result<Encoded> {
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
    if logs {
        if e.len() as u64 > MAX_LIVE {
            return Err(errno::ENOSPC);
        }
        return Ok(Encoded::Log(e));
    }
    if e.len().div_ceil(BLOCK as usize) > MAX_CHAIN {
        return Err(errno::ENOSPC);
    }
    Ok(Encoded::Chained(e))
}
