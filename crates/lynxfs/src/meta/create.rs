//! Creating names: files, directories, symlinks, device nodes, and hard links.
//!
//! Protocol (docs/CONSISTENCY.md, "create"): claim the name in the index (a CAS, so
//! concurrent creates of one name leave one file); write the inode, the dentry (valid
//! bit clear) and the log slot, then fence; the commit point is the 8-byte store that
//! sets the dentry's valid bit. No directory lock is taken.

use std::sync::atomic::Ordering;

use crate::error::{errno, Result};
use crate::format::{dentry, inode};
use crate::pmem::Backend;
use crate::time::now_ns;

use super::index::{name_hash, Entry, KeyRef, State};
use super::perm::{self, Cred};
use super::{check_name, dtype, is_dir, Dir, Namespace};

/// What to create.
#[derive(Clone, Copy, Debug)]
pub struct NewNode<'a> {
    /// Type and permission bits (S_IFREG | 0o644, ...).
    pub mode: u32,
    pub rdev: u64,
    /// A symlink's target.
    pub target: Option<&'a [u8]>,
}

impl<B: Backend> Namespace<B> {
    /// Create `name` in `parent`. Returns the inode and whether it is new; without
    /// `excl` an existing entry is returned as it is.
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        node: NewNode<'_>,
        cred: &Cred,
        excl: bool,
    ) -> Result<(u64, bool)> {
        if name == b"." || name == b".." {
            self.dir(parent)?;
            return Err(errno::EEXIST);
        }
        check_name(name)?;
        let dir = self.enter(parent)?;
        self.may(parent, cred, perm::X)?;
        let idx = self.index.pin();
        let key = KeyRef { parent, name };
        loop {
            match idx.get(&key) {
                Some(e) if e.state == State::Creating => {
                    std::thread::yield_now();
                    continue;
                }
                Some(_) if excl => return Err(errno::EEXIST),
                Some(e) => return Ok((e.ino, false)),
                None => {}
            }
            self.may(parent, cred, perm::W | perm::X)?;
            if idx.try_insert(key.owned(), Entry::creating()).is_ok() {
                break;
            }
        }
        let made = if dir.removed() {
            Err(errno::ENOENT)
        } else {
            self.commit_new(&dir, name, node, cred)
        };
        match made {
            Ok(e) => {
                idx.insert(key.owned(), e);
                Ok((e.ino, true))
            }
            Err(err) => {
                idx.remove(&key);
                Err(err)
            }
        }
    }

    fn commit_new(
        &self,
        dir: &Dir<'_>,
        name: &[u8],
        node: NewNode<'_>,
        cred: &Cred,
    ) -> Result<Entry> {
        let pool = &self.pool;
        let lane = self.lane();
        let ino = pool.alloc.inodes.alloc(lane).ok_or(errno::ENOSPC)?;
        let fail_ino = |e| {
            pool.alloc.inodes.free(ino);
            e
        };
        if let Some(t) = node.target {
            if t.is_empty() {
                return Err(fail_ino(errno::ENOENT));
            }
            if t.len() >= libc::PATH_MAX as usize {
                return Err(fail_ino(errno::ENAMETOOLONG));
            }
        }
        let parent = dir.ino;
        let pown = self.owner(parent);
        let mut mode = node.mode;
        let gid = if pown.mode & libc::S_ISGID != 0 {
            if is_dir(mode) {
                mode |= libc::S_ISGID;
            }
            pown.gid
        } else {
            cred.gid
        };
        // A default ACL on the parent gives the new inode its ACLs and decides its
        // permission bits (the caller applied no umask then: `umask_for`).
        let inherited = self.inherited_acls(parent, mode).map_err(fail_ino)?;
        if let Some((_, m)) = &inherited {
            mode = *m;
        }
        let now = now_ns();
        let image = inode::InodeImage {
            ino,
            mode,
            uid: cred.uid,
            gid,
            nlink: if is_dir(mode) { 2 } else { 1 },
            atime: now,
            mtime: now,
            ctime: now,
            btime: now,
            generation: self.load(ino, inode::GENERATION).wrapping_add(1),
            rdev: node.rdev,
            ..Default::default()
        };
        let mut b = pool.pm.batch();
        b.write(self.iaddr(ino), &image.encode());
        b.flushed();
        // The inherited ACLs' block is published by the inode's xattr word, which
        // counts only once the commit below makes the inode live.
        let acl_block = match inherited.filter(|(a, _)| !a.is_empty()) {
            Some((attrs, _)) => {
                let blk = crate::data::xattr::write_block(pool, lane, &attrs).map_err(fail_ino)?;
                let mut b = pool.pm.batch();
                b.write_u64(self.iaddr(ino) + inode::XATTR, blk);
                b.flushed();
                pool.layout.block_of(blk)
            }
            None => None,
        };
        if let Some(t) = node.target {
            crate::data::write_fresh(pool, ino, lane, t).map_err(fail_ino)?;
        }
        let entry = self
            .new_dentry(dir, ino, name, dtype(mode), lane)
            .map_err(|e| {
                if let Some(blk) = acl_block {
                    pool.alloc.blocks.free(blk, 1);
                }
                fail_ino(e)
            })?;
        let mut b = pool.pm.batch();
        b.write_u64(self.iaddr(ino) + inode::DENTRY, entry.dentry);
        self.touch_dir(&mut b, parent, now, if is_dir(mode) { 1 } else { 0 })?;
        let prepared = b.persist();
        drop(pool.pm.commit_u64(
            entry.dentry + dentry::STATE,
            dentry::state_word(true, now),
            prepared,
        ));
        dir.entries().fetch_add(1, Ordering::AcqRel);
        Ok(entry)
    }

    /// Write a dentry naming `ino` and claim a slot for it, without committing.
    pub(crate) fn new_dentry(
        &self,
        dir: &Dir<'_>,
        ino: u64,
        name: &[u8],
        dtype: u8,
        lane: u32,
    ) -> Result<Entry> {
        let pool = &self.pool;
        let did = pool.alloc.dentries.alloc(lane).ok_or(errno::ENOSPC)?;
        let slot = match dir.claim_slot(
            pool,
            &self.free_slots,
            lane,
            self.mechanisms.slot_reuse(),
            self.watch(),
        ) {
            Ok(s) => s,
            Err(e) => {
                pool.alloc.dentries.free(did);
                return Err(e);
            }
        };
        let daddr = pool.layout.dentry_addr(did);
        let body = dentry::DentryImage {
            ino,
            parent: dir.ino,
            dtype,
            hash: name_hash(dir.ino, name),
            slot,
            name,
        };
        let mut b = pool.pm.batch();
        b.write_u64(daddr + dentry::STATE, 0)
            .write(daddr + dentry::INO, &body.encode_body())
            .write_u64(slot, daddr);
        b.flushed();
        Ok(Entry {
            state: State::Ready,
            ino,
            dentry: daddr,
            slot,
            dtype,
        })
    }

    /// Update a directory's times (and its link count by `nlink_delta`) in `b`.
    pub(crate) fn touch_dir(
        &self,
        b: &mut crate::pmem::Batch<'_, B>,
        dir: u64,
        now: u64,
        nlink_delta: i64,
    ) -> Result<()> {
        let at = self.iaddr(dir);
        b.write_u64(at + inode::MTIME, now)
            .write_u64(at + inode::CTIME, now);
        if nlink_delta != 0 {
            let _g = self.ilock(dir)?;
            let n = self.load(dir, inode::NLINK) as i64 + nlink_delta;
            b.write_u64(at + inode::NLINK, n.max(0) as u64);
        }
        Ok(())
    }

    /// A hard link to `ino` named `name` in `parent`.
    pub fn link(&self, ino: u64, parent: u64, name: &[u8], cred: &Cred) -> Result<()> {
        if name == b"." || name == b".." {
            return Err(errno::EEXIST);
        }
        check_name(name)?;
        self.live(ino)?;
        // The incarnation of `ino` the caller named: a number freed and reused for
        // another file (perhaps a directory) must not get this link.
        let generation = self.load(ino, inode::GENERATION);
        if is_dir(self.mode(ino)) {
            return Err(errno::EPERM);
        }
        let dir = self.enter(parent)?;
        self.may(parent, cred, perm::W | perm::X)?;
        let idx = self.index.pin();
        let key = KeyRef { parent, name };
        if idx.try_insert(key.owned(), Entry::creating()).is_err() {
            return Err(errno::EEXIST);
        }
        let made = if dir.removed() {
            Err(errno::ENOENT)
        } else {
            self.commit_link(&dir, ino, generation, name)
        };
        match made {
            Ok(e) => {
                idx.insert(key.owned(), e);
                Ok(())
            }
            Err(err) => {
                idx.remove(&key);
                Err(err)
            }
        }
    }

    fn commit_link(&self, dir: &Dir<'_>, ino: u64, generation: u64, name: &[u8]) -> Result<Entry> {
        let pool = &self.pool;
        let _g = self.ilock(ino)?;
        // Re-checked under the inode lock: the last unlink may have just freed it, and
        // a create may have reused the number.
        let nlink = self.load(ino, inode::NLINK);
        if self.live(ino).is_err() || nlink == 0 || self.load(ino, inode::GENERATION) != generation
        {
            return Err(errno::ENOENT);
        }
        if is_dir(self.mode(ino)) {
            return Err(errno::EPERM);
        }
        if nlink >= u32::MAX as u64 {
            return Err(errno::EMLINK);
        }
        let lane = self.lane();
        let entry = self.new_dentry(dir, ino, name, dtype(self.mode(ino)), lane)?;
        let now = now_ns();
        let at = self.iaddr(ino);
        let mut b = pool.pm.batch();
        // A higher link count before the commit is harmless: recovery recounts.
        b.write_u64(at + inode::NLINK, nlink + 1)
            .write_u64(at + inode::CTIME, now);
        let at = self.iaddr(dir.ino);
        b.write_u64(at + inode::MTIME, now)
            .write_u64(at + inode::CTIME, now);
        let prepared = b.persist();
        drop(pool.pm.commit_u64(
            entry.dentry + dentry::STATE,
            dentry::state_word(true, now),
            prepared,
        ));
        dir.entries().fetch_add(1, Ordering::AcqRel);
        Ok(entry)
    }
}
