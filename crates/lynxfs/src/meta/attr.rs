//! Attributes: stat, chmod, chown, utimens, statfs, readlink.
//!
//! A change of one word (chmod's mode, chown's owner pair) is one atomic store; a
//! change of several (times, or mode with owner) goes through the lane journal, so it
//! is atomic too. A chmod of a file with an extended access ACL also sets the ACL's
//! mask (`posix_acl_chmod`): the new attribute block and the words go in one journal
//! transaction.

use std::sync::atomic::Ordering;

use crate::error::{errno, Result};
use crate::format::{inode, BLOCK};
use crate::pmem::Backend;
use crate::time::{now_ns, Timestamp};

use super::perm::{self, cap, Cred};
use super::Namespace;

/// What stat reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    pub ino: u64,
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte units allocated.
    pub blocks: u64,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub btime: Timestamp,
    pub rdev: u64,
    pub generation: u64,
    pub blksize: u32,
    /// The inode flags (`chattr`: `FS_IMMUTABLE_FL`, `FS_APPEND_FL`, `FS_NODUMP_FL`,
    /// `FS_NOATIME_FL`), which statx reports in `stx_attributes`.
    pub flags: u32,
}

/// A time to set: now, or a given instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSet {
    Now,
    At(Timestamp),
}

/// What setattr changes; `None` leaves a field alone. Size changes go through the
/// data layer (truncate).
#[derive(Clone, Debug, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatFs {
    pub block_size: u64,
    pub blocks: u64,
    pub blocks_free: u64,
    /// Free blocks less the reserve held back for root (statfs's f_bavail).
    pub blocks_avail: u64,
    pub files: u64,
    pub files_free: u64,
    /// Free files less the reserve held back for root (statvfs's f_favail).
    pub files_avail: u64,
    pub name_max: u64,
}

impl<B: Backend> Namespace<B> {
    pub fn getattr(&self, ino: u64) -> Result<Stat> {
        self.live(ino)?;
        let (uid, gid) = inode::owner_split(self.load(ino, inode::OWNER));
        let [atime, mtime, ctime, btime] = self.times(ino);
        let mode = self.mode(ino);
        if super::is_dir(mode) {
            self.times_seen(ino);
        }
        Ok(Stat {
            ino,
            mode,
            nlink: self.load(ino, inode::NLINK),
            uid,
            gid,
            size: self.load(ino, inode::SIZE),
            blocks: crate::data::blocks_used(&self.pool, ino) * (BLOCK / 512),
            atime,
            mtime,
            ctime,
            btime,
            rdev: self.load(ino, inode::RDEV),
            generation: self.load(ino, inode::GENERATION),
            blksize: BLOCK as u32,
            flags: self.inode_flags(ino),
        })
    }

    /// A stat has seen directory `ino`'s times: the next create in it stores its own
    /// (as Linux's multigrain timestamps do), so whoever looked sees them change.
    fn times_seen(&self, ino: u64) {
        let t = self.cachelets.get(ino).durable_times();
        // Only a set word is written: stats of a directory nobody creates in share
        // its line.
        if t.load(Ordering::Relaxed) != 0 {
            t.store(0, Ordering::Release);
        }
    }

    /// atime, mtime, ctime and btime of `ino`. An extended atime or mtime spans two
    /// words that setattr changes together: it is read under the inode lock.
    pub(crate) fn times(&self, ino: u64) -> [Timestamp; 4] {
        let words = || {
            let (a, m) = inode::time_hi_split(self.load(ino, inode::TIME_HI));
            [
                inode::time_of(self.load(ino, inode::ATIME), a),
                inode::time_of(self.load(ino, inode::MTIME), m),
                inode::time_of(self.load(ino, inode::CTIME), 0),
                inode::time_of(self.load(ino, inode::BTIME), 0),
            ]
        };
        let extended = [inode::ATIME, inode::MTIME]
            .iter()
            .any(|&f| inode::time_may_extend(self.load(ino, f)));
        match extended.then(|| self.ilock(ino)) {
            Some(Ok(_g)) => words(),
            // No lock (the runtime is under repair): the words as they are.
            Some(Err(_)) | None => words(),
        }
    }

    /// chmod, chown and utimens, with Linux's permission rules: the attributes after.
    pub fn setattr(&self, ino: u64, a: &SetAttr, cred: &Cred) -> Result<Stat> {
        self.op(|| {
            self.change_attrs(ino, a, cred)?;
            self.getattr(ino)
        })
    }

    /// [`Self::setattr`] for callers that do not look at the attributes after (the
    /// preload's fchmod, fchown, futimens): no stat.
    pub fn set_attrs(&self, ino: u64, a: &SetAttr, cred: &Cred) -> Result<()> {
        self.op(|| self.change_attrs(ino, a, cred))
    }

    fn change_attrs(&self, ino: u64, a: &SetAttr, cred: &Cred) -> Result<()> {
        self.live(ino)?;
        // A directory's mode or owner decides who may search it (areas answer for
        // search permission they saw).
        let perms = a.mode.is_some() || a.uid.is_some() || a.gid.is_some();
        let _areas = (perms && super::is_dir(self.mode(ino))).then(|| self.areas.changing());
        // A chmod may rewrite the access ACL: exclude other attribute writers (their
        // lock comes before the inode lock).
        let _xw = match a.mode {
            Some(_) => Some(self.cachelets.get(ino).write(self.watch())?),
            None => None,
        };
        let _g = self.ilock(ino)?;
        crate::runtime::testing::stop_here("setattr.inode_lock");
        // Its first change since its create settles it (a no-op after that).
        self.pool.settle(ino);
        let o = self.owner(ino);
        let at = self.iaddr(ino);
        let now = now_ns();
        let explicit = [a.atime, a.mtime]
            .iter()
            .any(|t| matches!(t, Some(TimeSet::At(_))));
        if a.mode.is_some() || a.uid.is_some() || a.gid.is_some() || explicit {
            self.may_change(ino)?;
        }
        let mut words: Vec<(u64, u64)> = Vec::new();
        let mut mode = o.mode;
        let mut time_hi = self.load(ino, inode::TIME_HI);
        if let Some(m) = a.mode {
            perm::owner_or_root(cred, o)?;
            mode = (o.mode & libc::S_IFMT) | (m & 0o7777);
            let gid = a.gid.unwrap_or(o.gid);
            if !cred.in_group_or_fsetid(gid) {
                mode &= !libc::S_ISGID;
            }
        }
        if a.uid.is_some() || a.gid.is_some() {
            // Linux's chown_ok and chgrp_ok.
            if let Some(u) = a.uid {
                if !(cred.has(cap::CHOWN) || (u == o.uid && cred.uid == o.uid)) {
                    return Err(errno::EPERM);
                }
            }
            if let Some(g) = a.gid {
                let own = cred.uid == o.uid && (g == o.gid || cred.in_group(g));
                if !(cred.has(cap::CHOWN) || own) {
                    return Err(errno::EPERM);
                }
            }
            // chown clears set-user-ID, and set-group-ID when group-executable, on
            // anything but a directory.
            if mode & libc::S_IFMT != libc::S_IFDIR {
                mode &= !libc::S_ISUID;
                if mode & 0o010 != 0 {
                    mode &= !libc::S_ISGID;
                }
            }
            let uid = a.uid.unwrap_or(o.uid);
            let gid = a.gid.unwrap_or(o.gid);
            // A chown to the owner it has (tar's, on every file) changes only ctime.
            if (uid, gid) != (o.uid, o.gid) {
                words.push((at + inode::OWNER, inode::owner_word(uid, gid)));
            }
        }
        let old_hi = time_hi;
        for (t, field) in [(a.atime, inode::ATIME), (a.mtime, inode::MTIME)] {
            let Some(t) = t else { continue };
            let v = match t {
                TimeSet::Now => {
                    if self.inode_flags(ino) & super::flags::IMMUTABLE != 0 {
                        return Err(errno::EPERM);
                    }
                    if perm::owner_or_root(cred, o).is_err() {
                        self.may(ino, cred, perm::W).map_err(|_| errno::EACCES)?;
                    }
                    Timestamp::from_ns(now)
                }
                TimeSet::At(v) => {
                    perm::owner_or_root(cred, o)?;
                    v
                }
            };
            let (word, high) = inode::time_word(v);
            words.push((at + field, word));
            time_hi = inode::time_hi_with(time_hi, field == inode::MTIME, high);
        }
        if time_hi != old_hi {
            words.push((at + inode::TIME_HI, time_hi));
        }
        if mode != o.mode {
            let word = super::flags::mode_word(mode, self.inode_flags(ino));
            words.push((at + inode::MODE, word));
        }
        let acl = match a.mode {
            Some(_) => self.chmod_acl(ino, mode)?,
            None => None,
        };
        if let Some(attrs) = acl {
            crate::data::xattr::store_with(&self.pool, ino, self.lane(), &attrs, &words)?;
        } else if !words.is_empty() || a.mode.is_some() || a.uid.is_some() || a.gid.is_some() {
            self.commit_with_ctime(words, (at + inode::CTIME, now))?;
        }
        drop(_g);
        drop(_xw);
        // chown takes file capabilities away too (Linux's ATTR_KILL_PRIV), after
        // the change it was allowed.
        if (a.uid.is_some() || a.gid.is_some()) && mode & libc::S_IFMT != libc::S_IFDIR {
            self.drop_capability(ino)?;
        }
        self.notices.attrs(ino);
        Ok(())
    }

    /// Set `words` and ctime. No word or one: ctime first, fenced, then the word's
    /// store, fenced (its commit point; a crash between leaves only ctime changed, as
    /// a chown to the same owner does): two fences where the journal takes four.
    /// Several words: one journal record with ctime (docs/CONSISTENCY.md, "chmod,
    /// chown, utimens").
    fn commit_with_ctime(&self, mut words: Vec<(u64, u64)>, ctime: (u64, u64)) -> Result<()> {
        let pm = &self.pool.pm;
        match words.as_slice() {
            [] | [_] => {
                let mut b = pm.batch();
                b.write_u64(ctime.0, ctime.1);
                let ready = b.persist();
                if let [(a, v)] = words[..] {
                    drop(pm.commit_u64(a, v, ready));
                }
                Ok(())
            }
            _ => {
                words.push(ctime);
                self.commit_words(&words)
            }
        }
    }

    /// Set several words atomically: one store if only one, else through the journal.
    pub(crate) fn commit_words(&self, words: &[(u64, u64)]) -> Result<()> {
        let pool = &self.pool;
        match words {
            [] => Ok(()),
            [(a, v)] => {
                let mut b = pool.pm.batch();
                b.write_u64(*a, *v);
                let _ = b.persist();
                Ok(())
            }
            _ => pool
                .journals
                .commit(&pool.pm, &pool.layout, self.lane(), words)
                .map(drop),
        }
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        self.live(ino)?;
        if self.mode(ino) & libc::S_IFMT != libc::S_IFLNK {
            return Err(errno::EINVAL);
        }
        let size = self.load(ino, inode::SIZE) as usize;
        let mut buf = vec![0u8; size];
        let n = crate::data::read_link(&self.pool, ino, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    pub fn statfs(&self) -> StatFs {
        let u = super::Usage::of_pool(&self.pool);
        let a = &self.pool.alloc;
        let avail = |free: u64, reserved: u64| free.saturating_sub(reserved);
        // A hybrid pool's capacity for file data is its device's.
        let (blocks, free, reserved) = match a.device_blocks() {
            Some(d) => (u.device_blocks_total, u.device_blocks_free, d.reserved()),
            None => (u.blocks_total, u.blocks_free, a.blocks.reserved()),
        };
        StatFs {
            block_size: BLOCK,
            blocks,
            blocks_free: free,
            blocks_avail: avail(free, reserved),
            files: u.inodes_total,
            // A new file needs an inode and a dentry.
            files_free: u.inodes_free.min(u.dentries_free),
            files_avail: avail(u.inodes_free, a.inodes.reserved())
                .min(avail(u.dentries_free, a.dentries.reserved())),
            name_max: crate::format::dentry::NAME_MAX as u64,
        }
    }
}
