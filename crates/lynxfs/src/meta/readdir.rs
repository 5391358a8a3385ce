//! readdir: a walk over the directory's log slots. An entry's offset is its slot's
//! position (after "." and ".."), and slots never move (compaction only unlinks empty
//! pages, and the pages after keep their positions, `dirlog::BASE`), so an offset
//! stays valid while other entries come and go. The walk takes no lock: a half-created entry still has
//! its valid bit clear and is skipped.

use crate::error::Result;
use crate::format::dirlog;
use crate::pmem::Backend;

use super::perm::{self, Cred};
use super::Namespace;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    /// DT_* type.
    pub dtype: u8,
    /// The offset to pass to continue after this entry.
    pub next: u64,
}

/// Entries read by [`Namespace::readdir_into`], their names packed in one buffer. A
/// caller that keeps it from call to call (a directory stream, the mount's listing)
/// lists a directory without an allocation per entry.
#[derive(Clone, Debug, Default)]
pub struct DirBatch {
    names: Vec<u8>,
    entries: Vec<Listed>,
}

/// An entry of a [`DirBatch`], its name ending at `name_end` in the batch's names.
#[derive(Clone, Copy, Debug)]
struct Listed {
    ino: u64,
    next: u64,
    name_end: usize,
    dtype: u8,
}

/// One entry of a [`DirBatch`]: a [`DirEntry`] whose name stays in the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirRef<'a> {
    pub name: &'a [u8],
    pub ino: u64,
    /// DT_* type.
    pub dtype: u8,
    /// The offset to pass to continue after this entry.
    pub next: u64,
}

impl DirRef<'_> {
    pub fn to_entry(&self) -> DirEntry {
        DirEntry {
            name: self.name.to_vec(),
            ino: self.ino,
            dtype: self.dtype,
            next: self.next,
        }
    }
}

impl DirBatch {
    pub fn new() -> DirBatch {
        DirBatch::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The `i`th entry.
    pub fn get(&self, i: usize) -> Option<DirRef<'_>> {
        let e = self.entries.get(i)?;
        let start = i.checked_sub(1).map_or(0, |p| self.entries[p].name_end);
        Some(DirRef {
            name: &self.names[start..e.name_end],
            ino: e.ino,
            dtype: e.dtype,
            next: e.next,
        })
    }

    pub fn last(&self) -> Option<DirRef<'_>> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    pub fn iter(&self) -> impl Iterator<Item = DirRef<'_>> {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Forget the entries, keeping the memory.
    pub fn clear(&mut self) {
        self.names.clear();
        self.entries.clear();
    }

    /// Adds "." or "..", or any name the caller has in hand.
    fn push(&mut self, name: &[u8], ino: u64, dtype: u8, next: u64) {
        self.names.extend_from_slice(name);
        self.end_entry(ino, dtype, next);
    }

    /// Ends the entry whose name was just appended to `names`.
    fn end_entry(&mut self, ino: u64, dtype: u8, next: u64) {
        self.entries.push(Listed {
            ino,
            next,
            name_end: self.names.len(),
            dtype,
        });
    }
}

impl<B: Backend> Namespace<B> {
    /// Up to `max` entries of `dir` from `offset` on (0 starts with "." and "..").
    /// A removed directory still held lists nothing, not even "." and "..", as on
    /// Linux (whose getdents says ENOENT there, which readdir(3) takes as the end).
    pub fn readdir(&self, dir: u64, offset: u64, max: usize, cred: &Cred) -> Result<Vec<DirEntry>> {
        let mut batch = DirBatch::new();
        self.readdir_into(dir, offset, max, cred, &mut batch)?;
        Ok(batch.iter().map(|e| e.to_entry()).collect())
    }

    /// [`Namespace::readdir`] into `out` (emptied first), whose memory is reused.
    pub fn readdir_into(
        &self,
        dir: u64,
        offset: u64,
        max: usize,
        cred: &Cred,
        out: &mut DirBatch,
    ) -> Result<()> {
        self.op(|| {
            // Emptied on every try (`op` tries again after a repair).
            out.clear();
            if self.is_removed_dir(dir) {
                return self.may(dir, cred, perm::R);
            }
            let d = self.dir(dir)?;
            self.may(dir, cred, perm::R)?;
            let dt_dir = (libc::S_IFDIR >> 12) as u8;
            if offset == 0 && out.len() < max {
                out.push(b".", dir, dt_dir, 1);
            }
            if offset <= 1 && out.len() < max {
                out.push(b"..", self.parent_of(dir), dt_dir, 2);
            }
            let mut pos = offset.saturating_sub(2);
            for (page, base) in d.pages_with_base(&self.pool) {
                if out.len() >= max {
                    break;
                }
                // Positions a compaction gave back (between pages) hold nothing.
                pos = pos.max(base);
                let end = base + d.slots_in_use(page);
                while pos < end && out.len() < max {
                    let slot = dirlog::slot_addr(page, pos - base);
                    if let Some(e) =
                        super::dir::read_entry_into(&self.pool, dir, slot, &mut out.names)
                    {
                        out.end_entry(e.ino, e.dtype, pos + 3);
                    }
                    pos += 1;
                }
            }
            Ok(())
        })
    }
}
