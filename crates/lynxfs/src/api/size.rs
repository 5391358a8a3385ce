//! Changing a file's size: ftruncate, truncate by number, fallocate; each clears the
//! set-id bits of a caller without CAP_FSETID, as a write does.

use crate::error::{errno, Result};
use crate::meta::perm::cap;
use crate::meta::{is_dir, perm, Cred};
use crate::pmem::Backend;

use super::open::access;
use super::{Fd, Fs};

impl<B: Backend> Fs<B> {
    pub fn ftruncate(&self, fd: Fd, len: u64) -> Result<()> {
        self.op(|| {
            let f = self.file(fd)?;
            if access(&f) == libc::O_RDONLY {
                return Err(errno::EINVAL);
            }
            self.truncate_ino(f.ino, len, Some(&f.map), (f.privileged, f.in_group))
        })
    }

    fn truncate_ino(
        &self,
        ino: u64,
        len: u64,
        local: Option<&crate::data::LocalMap>,
        (privileged, in_group): (bool, bool),
    ) -> Result<()> {
        if is_dir(self.ns.mode(ino)) {
            return Err(errno::EISDIR);
        }
        if self.ns.mode(ino) & libc::S_IFMT != libc::S_IFREG {
            return Err(errno::EINVAL);
        }
        self.ns.may_change(ino)?;
        self.ns.drop_capability(ino)?;
        let c = self.ns.cachelets.get(ino);
        let _w = c.write(self.ns.watch())?;
        let cache = crate::data::MapCache::new(c.map_version(), self.ns.rt.generation(), local);
        crate::data::truncate(&self.ns.pool, ino, self.ns.lane(), len, &cache)?;
        if !privileged {
            self.ns.clear_setid(ino, in_group);
        }
        self.ns.notices.data(ino, 0, 0);
        Ok(())
    }

    /// truncate by inode, checking write permission (FUSE setattr with a size).
    pub fn truncate_as(&self, ino: u64, len: u64, cred: &Cred) -> Result<()> {
        self.op(|| {
            self.ns.live(ino)?;
            self.ns.may(ino, cred, perm::W)?;
            let in_group = cred.in_group_or_fsetid(self.ns.owner(ino).gid);
            self.truncate_ino(ino, len, None, (cred.has(cap::FSETID), in_group))
        })
    }

    pub fn fallocate(&self, fd: Fd, mode: i32, off: u64, len: u64) -> Result<()> {
        self.op(|| {
            let f = self.file(fd)?;
            if access(&f) == libc::O_RDONLY {
                return Err(errno::EBADF);
            }
            if self.ns.mode(f.ino) & libc::S_IFMT != libc::S_IFREG {
                return Err(errno::ENODEV);
            }
            // Append-only files may only grow (plain allocation past the end).
            self.ns
                .may_write_data(f.ino, mode & !libc::FALLOC_FL_KEEP_SIZE == 0)?;
            // As a write does (Linux's `file_modified`).
            self.ns.drop_capability(f.ino)?;
            let _w = self.ns.cachelets.get(f.ino).write(self.ns.watch())?;
            // A punch frees space: it may take a block of the reserve to record that.
            let adds = mode & libc::FALLOC_FL_PUNCH_HOLE == 0;
            crate::alloc::within_reserve_of(f.privileged || !adds, || {
                crate::data::fallocate(
                    &self.ns.pool,
                    f.ino,
                    self.ns.lane(),
                    mode,
                    off,
                    len,
                    &self.map_of(&f),
                )
            })?;
            if !f.privileged {
                self.ns.clear_setid(f.ino, f.in_group);
            }
            self.ns.notices.data(f.ino, off, len);
            Ok(())
        })
    }
}
