//! Reading and writing through handles: at explicit offsets or the handle's position,
//! copy_file_range, lseek (SEEK_DATA and SEEK_HOLE among them) and the extent list.

use crate::error::{errno, Result};
use crate::format::inode;
use crate::meta::is_dir;
use crate::pmem::Backend;

use super::open::{access, OpenFile};
use super::{Fd, Fs};

impl<B: Backend> Fs<B> {
    pub fn pread(&self, fd: Fd, buf: &mut [u8], off: u64) -> Result<usize> {
        self.op(|| {
            self.with_file(fd, |f| {
                if access(f) == libc::O_WRONLY {
                    return Err(errno::EBADF);
                }
                self.read_locked(f, buf, off)
            })
        })
    }

    /// Read under the file's lock, or without it when the handle's remembered extent
    /// holds the range and no writer held the lock alone meanwhile (docs/CONSISTENCY.md,
    /// "Reads without a lock").
    fn read_locked(&self, f: &OpenFile, buf: &mut [u8], off: u64) -> Result<usize> {
        if is_dir(self.ns.mode(f.ino)) {
            return Err(errno::EISDIR);
        }
        let c = self.ns.cachelets.get(f.ino);
        let cache =
            crate::data::MapCache::new(c.map_version(), self.ns.rt.generation(), Some(&f.map));
        let n = match self.read_unlocked(&c, &cache, f.ino, buf, off) {
            Some(n) => n,
            None => {
                let _r = c.read(self.ns.watch())?;
                crate::data::read_cached(&self.ns.pool, f.ino, off, buf, &cache)?
            }
        };
        self.touch_atime(f);
        Ok(n)
    }

    /// A read through the remembered extent without a hold of the file's lock (no
    /// atomic read-modify-write: the lock word is only loaded, before and after), kept
    /// only if no writer held the lock alone in between; `None`: read under the lock.
    fn read_unlocked(
        &self,
        c: &crate::meta::cachelet::Cachelet<'_>,
        cache: &crate::data::MapCache<'_>,
        ino: u64,
        buf: &mut [u8],
        off: u64,
    ) -> Option<usize> {
        let stamp = c.read_stamp()?;
        let n = crate::data::read_hinted(&self.ns.pool, ino, off, buf, cache)?;
        c.read_unchanged(stamp).then_some(n)
    }

    pub fn pwrite(&self, fd: Fd, data: &[u8], off: u64) -> Result<usize> {
        self.op(|| {
            let f = self.file(fd)?;
            self.write_locked(&f, data, off).map(|(_, n)| n)
        })
    }

    /// Write `data` at `off` (at the end with O_APPEND): where it went and how much.
    fn write_locked(&self, f: &OpenFile, data: &[u8], off: u64) -> Result<(u64, usize)> {
        if access(f) == libc::O_RDONLY {
            return Err(errno::EBADF);
        }
        // Refused writes take nothing away (checked again under the lock).
        self.ns
            .may_write_data(f.ino, self.flags_of(f)? & libc::O_APPEND != 0)?;
        self.ns.drop_capability(f.ino)?;
        // For update: readers of the file go on while the new bytes are copied; the
        // lock is held alone only for the commit (the gate below).
        let update = self.ns.cachelets.get(f.ino).update(self.ns.watch())?;
        crate::runtime::testing::stop_here("write.data_lock");
        let pool = &self.ns.pool;
        let size = pool
            .pm
            .load_u64(pool.layout.inode_addr(f.ino) + inode::SIZE);
        let append = self.flags_of(f)? & libc::O_APPEND != 0;
        self.ns.may_write_data(f.ino, append)?;
        let at = if append { size } else { off };
        let mut update = Some(update);
        let mut _alone = None;
        let mut gate = || {
            crate::runtime::testing::stop_here("write.before_commit");
            if let Some(u) = update.take() {
                _alone = Some(u.upgrade(self.ns.watch())?);
            }
            Ok(())
        };
        let lane = self.ns.lane();
        let n = crate::alloc::within_reserve_of(f.privileged, || {
            crate::data::write_at(pool, f.ino, lane, (at, data), &self.map_of(f), &mut gate)
        })?;
        if !f.privileged {
            self.ns.clear_setid(f.ino, f.in_group);
        }
        self.ns.notices.data(f.ino, at, n as u64);
        if pool.txn().is_some() && self.flags_of(f)? & libc::O_DSYNC != 0 {
            // O_SYNC and O_DSYNC (O_SYNC includes its bit): durable on return.
            drop(_alone);
            pool.commit_for(f.ino)?;
        }
        Ok((at, n))
    }

    /// copy_file_range(2) between two handles at explicit offsets, in 1 MiB chunks
    /// inside the engine (one call, however long the range): the bytes copied, fewer
    /// than `len` only at the source's end. Ranges of one file may not overlap
    /// (EINVAL), the source must be readable and the destination writable without
    /// O_APPEND (EBADF), as in Linux.
    pub fn copy_range(
        &self,
        fd_in: Fd,
        off_in: u64,
        fd_out: Fd,
        off_out: u64,
        len: u64,
    ) -> Result<u64> {
        const CHUNK: u64 = 1 << 20;
        self.op(|| {
            let (src, dst) = (self.file(fd_in)?, self.file(fd_out)?);
            if access(&src) == libc::O_WRONLY
                || access(&dst) == libc::O_RDONLY
                || self.flags_of(&dst)? & libc::O_APPEND != 0
            {
                return Err(errno::EBADF);
            }
            let overlap =
                off_in < off_out.saturating_add(len) && off_out < off_in.saturating_add(len);
            if src.ino == dst.ino && overlap {
                return Err(errno::EINVAL);
            }
            let mut buf = vec![0u8; len.min(CHUNK) as usize];
            let mut done = 0u64;
            while done < len {
                let want = (len - done).min(CHUNK) as usize;
                let n = self.read_locked(&src, &mut buf[..want], off_in + done)?;
                if n == 0 {
                    break;
                }
                let (_, w) = self.write_locked(&dst, &buf[..n], off_out + done)?;
                done += w as u64;
                if w < n {
                    break;
                }
            }
            Ok(done)
        })
    }

    /// read(2): at the handle's position, which it advances.
    pub fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<usize> {
        self.op(|| {
            self.with_file(fd, |f| {
                if access(f) == libc::O_WRONLY {
                    return Err(errno::EBADF);
                }
                self.at_position(f, |pos| {
                    let n = self.read_locked(f, buf, pos)?;
                    Ok((n, pos + n as u64))
                })
            })
        })
    }

    /// write(2): at the handle's position (or the end, with O_APPEND).
    pub fn write(&self, fd: Fd, data: &[u8]) -> Result<usize> {
        self.op(|| {
            let f = self.file(fd)?;
            self.at_position(&f, |pos| {
                let (at, n) = self.write_locked(&f, data, pos)?;
                Ok((n, at + n as u64))
            })
        })
    }

    /// lseek with SEEK_SET, SEEK_CUR, SEEK_END, SEEK_DATA or SEEK_HOLE (from the
    /// file's block map: see [`crate::data::seek_data_hole`]).
    pub fn seek(&self, fd: Fd, off: i64, whence: i32) -> Result<u64> {
        self.op(|| {
            let f = self.file(fd)?;
            self.at_position(&f, |pos| {
                let base = match whence {
                    libc::SEEK_SET => 0,
                    libc::SEEK_CUR => pos as i64,
                    libc::SEEK_END => self.ns.getattr(f.ino)?.size as i64,
                    libc::SEEK_DATA | libc::SEEK_HOLE => {
                        let new = self.data_or_hole(&f, off, whence == libc::SEEK_HOLE)?;
                        return Ok((new, new));
                    }
                    _ => return Err(errno::EINVAL),
                };
                let new = base
                    .checked_add(off)
                    .filter(|&p| p >= 0)
                    .ok_or(errno::EINVAL)? as u64;
                Ok((new, new))
            })
        })
    }

    /// Where SEEK_DATA (or SEEK_HOLE) from `off` lands in `f`'s file; a negative
    /// offset is ENXIO, as in Linux.
    fn data_or_hole(&self, f: &OpenFile, off: i64, hole: bool) -> Result<u64> {
        let off = u64::try_from(off).map_err(|_| errno::ENXIO)?;
        if self.ns.mode(f.ino) & libc::S_IFMT != libc::S_IFREG {
            return Err(errno::EINVAL);
        }
        let _r = self.ns.cachelets.get(f.ino).read(self.ns.watch())?;
        crate::data::seek_data_hole(&self.ns.pool, f.ino, off, hole, &self.map_of(f))
    }

    /// FS_IOC_FIEMAP: the extents of open file `fd` that overlap the `len` bytes at
    /// `start` (see [`crate::data::file_extents`]: holes left out, the file's last
    /// extent flagged [`crate::data::EXTENT_LAST`]), whole, as Linux reports them. A
    /// zero `len` is EINVAL, anything but a regular file EOPNOTSUPP.
    pub fn extents(&self, fd: Fd, start: u64, len: u64) -> Result<Vec<crate::data::FileExtent>> {
        self.op(|| {
            let f = self.file(fd)?;
            if self.ns.mode(f.ino) & libc::S_IFMT != libc::S_IFREG {
                return Err(errno::EOPNOTSUPP);
            }
            if len == 0 {
                return Err(errno::EINVAL);
            }
            let all = {
                let _r = self.ns.cachelets.get(f.ino).read(self.ns.watch())?;
                crate::data::file_extents(&self.ns.pool, f.ino, &self.map_of(&f))?
            };
            let end = start.saturating_add(len);
            Ok(all
                .into_iter()
                .filter(|e| e.logical < end && e.logical + e.length > start)
                .collect())
        })
    }
}
