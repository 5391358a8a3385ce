//! The global metadata index (DirectFS): one concurrent hash table, keyed by (parent
//! inode, name), for every indexed directory entry in the pool. It replaces both a VFS
//! dentry cache and a per-directory on-media index.
//!
//! Structure: `papaya::HashMap`, chosen because its reads take no lock (epoch-based
//! reclamation, as the issue asks), and its `compute` gives the per-entry
//! compare-and-swap that creates, unlinks and renames use to claim a name. A borrowed
//! key type lets lookups run without allocating.

use std::hash::{Hash, Hasher};

use papaya::Equivalent;

/// An owned key: the parent directory's inode number and the entry's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    pub parent: u64,
    pub name: Box<[u8]>,
}

/// A borrowed key for lookups.
#[derive(Clone, Copy, Debug)]
pub struct KeyRef<'a> {
    pub parent: u64,
    pub name: &'a [u8],
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, h: &mut H) {
        KeyRef {
            parent: self.parent,
            name: &self.name,
        }
        .hash(h)
    }
}

impl Hash for KeyRef<'_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(self.parent);
        h.write(self.name);
    }
}

impl Equivalent<Key> for KeyRef<'_> {
    fn equivalent(&self, k: &Key) -> bool {
        self.parent == k.parent && *self.name == *k.name
    }
}

impl KeyRef<'_> {
    pub fn owned(&self) -> Key {
        Key {
            parent: self.parent,
            name: self.name.into(),
        }
    }
}

/// Where an entry stands. DirectFS keeps these as per-entry flags; here they are the
/// value's state, changed only by compare-and-swap through `papaya::compute`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// A create has claimed the name and is writing the pool; lookups do not see it.
    Creating,
    /// Committed and visible.
    Ready,
    /// An unlink or rename has claimed it; visible until that operation commits.
    Leaving,
}

/// An index value: the dentry's place in the pool and the inode number (the "quick
/// path": the inode's address follows from the number).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub state: State,
    pub ino: u64,
    pub dentry: u64,
    pub slot: u64,
    /// The entry's file type (DT_*), so readdir-plus and unlink need no inode read.
    pub dtype: u8,
}

impl Entry {
    pub fn creating() -> Entry {
        Entry {
            state: State::Creating,
            ino: 0,
            dentry: 0,
            slot: 0,
            dtype: 0,
        }
    }
    pub fn visible(&self) -> bool {
        self.state != State::Creating
    }
}

/// The hasher: foldhash, seeded per map, several times faster than SipHash on short
/// keys (names are short) — the index is hashed two or three times per operation.
pub type IndexHasher = foldhash::fast::RandomState;

pub type Index = papaya::HashMap<Key, Entry, IndexHasher>;

/// A stable 64-bit hash of (parent, name) (FNV-1a), stored in each dentry so that
/// tools can check an entry without the DRAM index.
pub fn name_hash(parent: u64, name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in parent.to_le_bytes().iter().chain(name) {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
