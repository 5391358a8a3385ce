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

impl<B: Backend> Namespace<B> {
    /// Up to `max` entries of `dir` from `offset` on (0 starts with "." and "..").
    /// A removed directory still held lists nothing, not even "." and "..", as on
    /// Linux (whose getdents says ENOENT there, which readdir(3) takes as the end).
    pub fn readdir(&self, dir: u64, offset: u64, max: usize, cred: &Cred) -> Result<Vec<DirEntry>> {
        self.op(|| {
            if self.is_removed_dir(dir) {
                self.may(dir, cred, perm::R)?;
                return Ok(Vec::new());
            }
            let d = self.dir(dir)?;
            self.may(dir, cred, perm::R)?;
            let mut out = Vec::new();
            let dt_dir = (libc::S_IFDIR >> 12) as u8;
            if offset == 0 && out.len() < max {
                out.push(DirEntry {
                    name: b".".to_vec(),
                    ino: dir,
                    dtype: dt_dir,
                    next: 1,
                });
            }
            if offset <= 1 && out.len() < max {
                out.push(DirEntry {
                    name: b"..".to_vec(),
                    ino: self.parent_of(dir),
                    dtype: dt_dir,
                    next: 2,
                });
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
                    if let Some((name, e)) = super::dir::read_entry(&self.pool, dir, slot) {
                        out.push(DirEntry {
                            name: name.into_vec(),
                            ino: e.ino,
                            dtype: e.dtype,
                            next: pos + 3,
                        });
                    }
                    pos += 1;
                }
            }
            Ok(out)
        })
    }
}
