//! Creating names: files, directories, symlinks, device nodes, and hard links.
//!
//! Protocol (docs/CONSISTENCY.md, "create"): write the dentry (valid bit clear) and
//! its log slot; claim the name in the index for that dentry (under the key's stripe
//! lock, so concurrent creates of one name leave one file; the index compares keys
//! with the dentry, hence this order); write the inode. On a CWON pool
//! (`log::cwon`) the dentry's valid state and its fresh check word go with the
//! inode and the parent's times under one fence, which is the commit; on an older
//! pool the inode is fenced first and the commit point is the 8-byte store that sets
//! the dentry's valid bit. No directory lock is taken.

use std::sync::atomic::Ordering;

use crate::error::{errno, Error, Result};
use crate::format::{dentry, inode};
use crate::log::cwon;
use crate::pmem::Backend;
use crate::runtime::testing::stop_here;
use crate::time::{now_coarse_ns, now_ns};

use super::cachelet::{LINKABLE, ORPHAN, SETTLED};
use super::index::{self, name_hash, Claim, Entry, Sighting, State};
use super::perm::{self, cap, Cred};
use super::{check_name, dtype, is_dir, Dir, Namespace};
use crate::alloc::within_reserve_of;

/// What names a new inode ([`Namespace::write_inode`]).
#[derive(Clone, Copy, Debug)]
pub(super) enum Naming {
    /// Nothing (an `O_TMPFILE` file): link count 0.
    Unnamed,
    /// A dentry written later (a rename's whiteout): link count 1.
    Later,
    /// The create's dentry at `at` (the inode's back pointer, written with its image),
    /// whose body has CRC `body_crc`.
    Dentry { at: u64, body_crc: u32 },
}

/// What to create.
#[derive(Clone, Copy, Debug)]
pub struct NewNode<'a> {
    /// Type and permission bits (S_IFREG | 0o644, ...).
    pub mode: u32,
    pub rdev: u64,
    /// A symlink's target.
    pub target: Option<&'a [u8]>,
    /// The creator's umask, applied to `mode` unless the parent's default ACL decides
    /// the new inode's permissions instead (`posix_acl_create`).
    pub umask: u32,
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
        within_reserve_of(cred.has(cap::SYS_RESOURCE), || {
            self.op(|| self.create_once(parent, name, node, cred, (excl, false)))
        })
    }

    /// [`Namespace::create`] for an open: a new inode comes with one open reference
    /// (as `Fs::open_ref` takes), taken before its name is published, so no unlink
    /// can free it first and the open needs no lock for it. An existing entry comes
    /// without one.
    pub fn create_opened(
        &self,
        parent: u64,
        name: &[u8],
        node: NewNode<'_>,
        cred: &Cred,
        excl: bool,
    ) -> Result<(u64, bool)> {
        within_reserve_of(cred.has(cap::SYS_RESOURCE), || {
            self.op(|| self.create_once(parent, name, node, cred, (excl, true)))
        })
    }

    /// [`Namespace::create`], within one counted operation; with `opened`, as
    /// [`Namespace::create_opened`].
    fn create_once(
        &self,
        parent: u64,
        name: &[u8],
        node: NewNode<'_>,
        cred: &Cred,
        (excl, opened): (bool, bool),
    ) -> Result<(u64, bool)> {
        if name == b"." || name == b".." {
            self.dir(parent)?;
            return Err(errno::EEXIST);
        }
        check_name(name)?;
        let lane = self.lane();
        let dir = self.enter_in(parent, lane)?;
        stop_here("create.gate_shared");
        // Search permission is checked before the name is looked at, write permission
        // only when it is missing; one check when both are needed (the common case).
        let mut searched = false;
        let mut turns = 0;
        loop {
            // Kept for the claim: it takes the slot this walk ended at if nothing
            // changed on the way meanwhile.
            let seen = self.index.sight(&self.pool.pm, parent, name, |_| true);
            let found = match seen.entry() {
                Some(e) => e,
                None => {
                    self.may_search_write(parent, cred)?;
                    searched = true;
                    match self.try_create(&dir, (name, &seen), (node, opened), cred, lane)? {
                        Ok(ino) => {
                            self.notices.name(parent, name, ino);
                            return Ok((ino, true));
                        }
                        Err(e) => e,
                    }
                }
            };
            if !searched {
                self.may(parent, cred, perm::X)?;
                searched = true;
            }
            match found.state {
                // Another create of this name is under way, or a removal (an unlink,
                // a rename taking the name away or over it) that may be past its
                // commit point, the name gone for readers before the index drops it:
                // its outcome decides (issue 42: EEXIST while reads said ENOENT).
                State::Creating | State::Leaving => index::wait_turn(&mut turns, self.watch())?,
                _ if excl => return Err(errno::EEXIST),
                _ => return Ok((found.ino, false)),
            }
        }
    }

    /// Write and search permission in directory `parent`, failing as separate
    /// checks of search, then write, would (so EACCES for no search permission in
    /// an immutable directory, not EPERM).
    fn may_search_write(&self, parent: u64, cred: &Cred) -> Result<()> {
        self.may(parent, cred, perm::W | perm::X)
            .map_err(|e| self.may(parent, cred, perm::X).err().unwrap_or(e))
    }

    /// Write the new dentry (not valid), claim the name `seen` missing for it, then
    /// make the inode and commit (`opened`: with an open reference on it).
    /// `Ok(Err(entry))` if the name was taken first.
    fn try_create(
        &self,
        dir: &Dir<'_>,
        (name, seen): (&[u8], &Sighting<'_>),
        (node, opened): (NewNode<'_>, bool),
        cred: &Cred,
        lane: u32,
    ) -> Result<std::result::Result<u64, Entry>> {
        let pool = &self.pool;
        // `let else`, not `ok_or`: an error made eagerly is dropped (a call) on success.
        let Some(ino) = pool.alloc.inodes.alloc(lane) else {
            return Err(errno::ENOSPC);
        };
        let (new, body_crc) = match self.write_dentry(dir, ino, name, dtype(node.mode), lane, false)
        {
            Ok(e) => e,
            Err(err) => {
                pool.alloc.inodes.free(ino);
                return Err(err);
            }
        };
        let undo = || {
            self.discard_dentry(dir, new);
            pool.alloc.inodes.free(ino);
        };
        let pos = match self
            .index
            .claim_sighted(&pool.pm, seen, &new, None, self.watch())
        {
            Ok(Claim::Claimed(pos)) => pos,
            Ok(Claim::Taken(e)) => {
                undo();
                return Ok(Err(e));
            }
            Err(err) => {
                undo();
                return Err(err);
            }
        };
        let made = if dir.removed() {
            Err(errno::ENOENT)
        } else if opened {
            self.open_new(ino, || {
                self.commit_new(dir, (new, body_crc), node, cred, lane)
            })
        } else {
            self.commit_new(dir, (new, body_crc), node, cred, lane)
        };
        match made {
            Ok(()) => {
                self.index.publish(pos);
                Ok(Ok(ino))
            }
            Err(err) => {
                self.index.abandon(pos);
                undo();
                Err(err)
            }
        }
    }

    /// Take an open reference on the new inode `ino` (counted as `Fs::open_ref`
    /// counts one: this process's count first) and run `commit`; given back if it
    /// fails. Nothing names the inode yet, so no lock is needed: the last-close and
    /// last-unlink decisions that read the count cannot be made on it meanwhile,
    /// and its cachelet was reset when its number was last freed.
    fn open_new(&self, ino: u64, commit: impl FnOnce() -> Result<()>) -> Result<()> {
        self.rt.opened(ino)?;
        let open = self.cachelets.get(ino).open_counter();
        open.fetch_add(1, Ordering::AcqRel);
        commit().inspect_err(|_| {
            open.fetch_sub(1, Ordering::AcqRel);
            self.rt.closed(ino);
        })
    }

    /// Write the inode of the claimed entry `entry` (its dentry's body CRC beside it)
    /// and commit its dentry, in `lane`.
    fn commit_new(
        &self,
        dir: &Dir<'_>,
        (entry, body_crc): (Entry, u32),
        node: NewNode<'_>,
        cred: &Cred,
        lane: u32,
    ) -> Result<()> {
        let pool = &self.pool;
        let ino = entry.ino;
        if let Some(t) = node.target {
            if t.is_empty() {
                return Err(errno::ENOENT);
            }
            if t.len() >= libc::PATH_MAX as usize {
                return Err(errno::ENAMETOOLONG);
            }
        }
        let parent = dir.ino;
        // One clock reading, the dentry's birth (read after its number was taken, so
        // unlike any earlier incarnation's), for the inode's times and the parent's
        // too, as Linux gives a create's inode and parent one time.
        let born = pool.pm.load_u64(entry.dentry + dentry::BORN);
        let now = born & !dentry::VALID;
        let naming = Naming::Dentry {
            at: entry.dentry,
            body_crc,
        };
        let (mode, fresh) = self.write_inode(parent, ino, node, cred, naming, (lane, now))?;
        // The dentry and inode are written, nothing is committed yet.
        stop_here("create.before_commit");
        let mut b = pool.pm.batch();
        let stored = self.touch_parent(&mut b, dir, now, if is_dir(mode) { 1 } else { 0 })?;
        if pool.cwon {
            // Consistency without ordering: the check word proves to recovery that
            // every store of this batch landed, so one fence commits them all.
            let fresh =
                fresh.or_else(|| cwon::fresh_check(&pool.pm, &pool.layout, entry.dentry, ino));
            let Some(check) = fresh else {
                return Err(errno::EIO);
            };
            b.write_u64(entry.dentry + dentry::CHECK, check)
                .write_u64(entry.dentry + dentry::STATE, born);
            let _committed = b.persist();
        } else {
            let prepared = b.persist();
            drop(
                pool.pm
                    .commit_u64(entry.dentry + dentry::STATE, born, prepared),
            );
        }
        if let Some(t) = stored {
            // Fenced above: creates of this tick may now leave the times alone.
            dir.cachelet().durable_times().store(t, Ordering::Release);
        }
        dir.add_entry(lane);
        Ok(())
    }

    /// A create's or removal's update of its parent's mtime and ctime (and link count
    /// by `nlink_delta`) in `b`, at `now`. Left out when the times already hold one
    /// durable value from the current tick of the coarse clock that no stat has seen
    /// (the cachelet's durable times, docs/CONSISTENCY.md "The parent's times"), as
    /// Linux's coarse timestamps leave them within a tick: then two threads creating
    /// in one directory do not both write (and flush) the parent inode's line.
    /// Returns the time stored, which becomes durable with the operation's fence.
    pub(super) fn touch_parent(
        &self,
        b: &mut crate::pmem::Batch<'_, B>,
        dir: &Dir<'_>,
        now: u64,
        nlink_delta: i64,
    ) -> Result<Option<u64>> {
        if nlink_delta == 0 && self.parent_times_current(dir, now) {
            return Ok(None);
        }
        self.touch_dir(b, dir, now, nlink_delta)?;
        Ok(Some(now))
    }

    /// `dir`'s mtime and ctime both hold its durable times, taken in the coarse clock's
    /// current tick and not after `now`.
    pub(super) fn parent_times_current(&self, dir: &Dir<'_>, now: u64) -> bool {
        let t = dir.cachelet().durable_times().load(Ordering::Acquire);
        t != 0
            && t <= now
            && t >= now_coarse_ns()
            && self.load(dir.ino, inode::MTIME) == t
            && self.load(dir.ino, inode::CTIME) == t
    }

    /// Write inode `ino`'s image (flushed, not fenced): owner and group from `cred`
    /// and `parent` (set-group-ID directories), ACLs inherited from `parent`, a
    /// symlink's target; its link count and back pointer as `naming` says; its times
    /// `now`, its blocks from `lane`. Returns its mode and, for a create's inode
    /// without a symlink target or attribute set, its fresh check word (CWON pools),
    /// computed from the image written.
    pub(super) fn write_inode(
        &self,
        parent: u64,
        ino: u64,
        node: NewNode<'_>,
        cred: &Cred,
        naming: Naming,
        (lane, now): (u32, u64),
    ) -> Result<(u32, Option<u64>)> {
        let pool = &self.pool;
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
        // permission bits; else the creator's umask takes its share of them.
        let inherited = self.inherited_acls(parent, mode)?;
        match &inherited {
            Some((_, m)) => mode = *m,
            // A symlink's permission bits are always 0777.
            None if mode & libc::S_IFMT != libc::S_IFLNK => mode &= !(node.umask & 0o777),
            None => {}
        }
        let nlink: u64 = match (naming, is_dir(mode)) {
            (Naming::Unnamed, _) => 0,
            (_, true) => 2,
            (_, false) => 1,
        };
        let (dentry, body_crc) = match naming {
            Naming::Dentry { at, body_crc } => (at, Some(body_crc)),
            _ => (0, None),
        };
        // Encoded with link count 0, as the fresh check covers it, then given it.
        let mut img = inode::InodeImage {
            ino,
            mode,
            uid: cred.uid,
            gid,
            atime: now,
            mtime: now,
            ctime: now,
            btime: now,
            generation: self.load(ino, inode::GENERATION).wrapping_add(1),
            dentry,
            rdev: node.rdev,
            ..Default::default()
        }
        .encode();
        let fresh = body_crc
            .filter(|_| pool.cwon && node.target.is_none() && inherited.is_none())
            .map(|c| cwon::fresh_word(c, &img));
        let n = inode::NLINK as usize;
        img[n..n + 8].copy_from_slice(&nlink.to_le_bytes());
        let mut b = pool.pm.batch();
        b.write(self.iaddr(ino), &img);
        b.flushed();
        // The inherited ACLs' block is published by the inode's xattr word, which
        // counts only once the commit below makes the inode live.
        let acl_block = match inherited.filter(|(a, _)| !a.is_empty()) {
            Some((attrs, _)) => {
                let blk = crate::data::xattr::write_block(pool, lane, &attrs)?;
                let mut b = pool.pm.batch();
                b.write_u64(self.iaddr(ino) + inode::XATTR, blk);
                b.flushed();
                blk
            }
            None => 0,
        };
        if let Some(t) = node.target {
            crate::data::write_fresh(pool, ino, lane, t)
                .inspect_err(|_| crate::data::xattr::free_set(pool, acl_block))?;
        }
        Ok((mode, fresh))
    }

    /// An unnamed regular file in directory `parent` (`O_TMPFILE`): an orphan from
    /// the start, freed at its last close (or by recovery: nothing names it). With
    /// `linkable`, [`Namespace::link`] may give it a name. `umask` as in [`NewNode`].
    pub fn tmpfile(
        &self,
        parent: u64,
        (mode, umask): (u32, u32),
        cred: &Cred,
        linkable: bool,
    ) -> Result<u64> {
        within_reserve_of(cred.has(cap::SYS_RESOURCE), || {
            self.tmpfile_op(parent, (mode, umask), cred, linkable)
        })
    }

    fn tmpfile_op(
        &self,
        parent: u64,
        (mode, umask): (u32, u32),
        cred: &Cred,
        linkable: bool,
    ) -> Result<u64> {
        self.op(|| {
            // Linux makes them in a removed directory still held too (vfs_tmpfile has
            // no dead-directory check, and no name is added to it).
            let _entered = match self.enter(parent) {
                Ok(e) => Some(e),
                Err(Error::Errno(libc::ENOENT)) if self.is_removed_dir(parent) => None,
                Err(e) => return Err(e),
            };
            self.may(parent, cred, perm::W | perm::X)?;
            let node = NewNode {
                mode: libc::S_IFREG | (mode & 0o7777),
                rdev: 0,
                target: None,
                umask,
            };
            let ino = self.new_unnamed_inode(parent, node, cred, Naming::Unnamed)?;
            // Live from here (its INO word is fenced), but no name leads to it.
            drop(self.pool.pm.batch().persist());
            let flags = if linkable { ORPHAN | LINKABLE } else { ORPHAN };
            self.cachelets.get(ino).set_flags(flags);
            Ok(ino)
        })
    }

    /// A new inode, written and flushed, that no name leads to yet (a tmpfile, or a
    /// whiteout until its rename commits); its number goes back on failure.
    pub(super) fn new_unnamed_inode(
        &self,
        parent: u64,
        node: NewNode<'_>,
        cred: &Cred,
        naming: Naming,
    ) -> Result<u64> {
        let inodes = &self.pool.alloc.inodes;
        let lane = self.lane();
        let ino = inodes.alloc(lane).ok_or(errno::ENOSPC)?;
        match self.write_inode(parent, ino, node, cred, naming, (lane, now_ns())) {
            Ok(_) => Ok(ino),
            Err(e) => {
                inodes.free(ino);
                Err(e)
            }
        }
    }

    /// Write a dentry naming `ino` and claim a log slot for it, without committing:
    /// done before the name is claimed in the index, which compares keys with it.
    /// With `settled` (a link or rename: the inode is not new), its settled check
    /// word too (CWON pools); a create writes a fresh one in its commit instead, and
    /// must not leave a settled one for a crash to find beside its torn inode.
    pub(crate) fn new_dentry(
        &self,
        dir: &Dir<'_>,
        ino: u64,
        name: &[u8],
        dtype: u8,
        lane: u32,
        settled: bool,
    ) -> Result<Entry> {
        self.write_dentry(dir, ino, name, dtype, lane, settled)
            .map(|(e, _)| e)
    }

    /// [`Namespace::new_dentry`], with the CRC of the body written (CWON pools; 0
    /// on others): a create's fresh check starts from it.
    fn write_dentry(
        &self,
        dir: &Dir<'_>,
        ino: u64,
        name: &[u8],
        dtype: u8,
        lane: u32,
        settled: bool,
    ) -> Result<(Entry, u32)> {
        let pool = &self.pool;
        // The slot claim below may link the directory's first log page.
        self.settle_entered(dir);
        let Some(did) = pool.alloc.dentries.alloc(lane) else {
            return Err(errno::ENOSPC);
        };
        let slot = match dir.claim_slot(
            pool,
            &self.free_slots,
            lane,
            self.mechanisms.slot_reuse(),
            self.slot_owner(),
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
            born: dentry::state_word(true, now_ns()),
            name,
        };
        // The state word (0: not valid) and the body behind it, written as one run.
        const BODY_AT: usize = dentry::INO as usize;
        const _: () = assert!(dentry::STATE == 0 && dentry::INO == 8);
        let mut bytes = [0u8; BODY_AT + dentry::BODY_MAX];
        let (_, body_bytes) = bytes
            .split_first_chunk_mut::<BODY_AT>()
            .expect("the state word");
        let body_bytes: &mut [u8; dentry::BODY_MAX] = body_bytes.try_into().expect("a body's room");
        let len = body.encode_body(body_bytes).len();
        // From the words written, not read back from the pool.
        let body_crc = if pool.cwon {
            cwon::body_crc_of(&body)
        } else {
            0
        };
        let mut b = pool.pm.batch();
        b.write(daddr + dentry::STATE, &bytes[..BODY_AT + len])
            .write_u64(slot, daddr);
        if pool.cwon && settled {
            b.write_u64(daddr + dentry::CHECK, cwon::settled_word(body_crc));
        }
        b.flushed();
        let entry = Entry {
            state: State::Creating,
            ino,
            dentry: daddr,
            slot,
            dtype,
            pos: 0,
        };
        Ok((entry, body_crc))
    }

    /// `pool.settle` of directory `dir`, which the caller entered (its gate held
    /// shared, so it is not freed meanwhile), remembered in its cachelet once durable:
    /// every create, removal and rename in it settles it, and after the first this
    /// is a flag's load.
    pub(super) fn settle_entered(&self, dir: &Dir<'_>) {
        let c = dir.cachelet();
        if c.flags() & SETTLED == 0 && self.pool.settle_known(dir.ino) {
            c.set_flags(SETTLED);
        }
    }

    /// Update entered directory `dir`'s times (and its link count by `nlink_delta`)
    /// in `b`.
    fn touch_dir(
        &self,
        b: &mut crate::pmem::Batch<'_, B>,
        dir: &Dir<'_>,
        now: u64,
        nlink_delta: i64,
    ) -> Result<()> {
        self.settle_entered(dir);
        let dir = dir.ino;
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
        within_reserve_of(cred.has(cap::SYS_RESOURCE), || {
            self.op(|| self.link_once(ino, parent, name, cred))
        })
    }

    /// [`Namespace::link`], within one counted operation.
    fn link_once(&self, ino: u64, parent: u64, name: &[u8], cred: &Cred) -> Result<()> {
        if name == b"." || name == b".." {
            return Err(errno::EEXIST);
        }
        check_name(name)?;
        self.live(ino)?;
        self.may_link(ino, cred)?;
        // The incarnation of `ino` the caller named: a number freed and reused for
        // another file (perhaps a directory) must not get this link.
        let generation = self.load(ino, inode::GENERATION);
        if is_dir(self.mode(ino)) {
            return Err(errno::EPERM);
        }
        self.may_change(ino)?;
        let dir = self.enter(parent)?;
        self.may(parent, cred, perm::W | perm::X)?;
        let new = self.new_dentry(&dir, ino, name, dtype(self.mode(ino)), self.lane(), true)?;
        let undo = |err| {
            self.discard_dentry(&dir, new);
            err
        };
        let mut turns = 0;
        let pos = loop {
            match self
                .index
                .claim(&self.pool.pm, parent, name, &new, None, self.watch())
            {
                Ok(Claim::Claimed(pos)) => break pos,
                Ok(Claim::Taken(e)) if e.state == State::Ready => return Err(undo(errno::EEXIST)),
                // A create under way or a removal perhaps past its commit point (as
                // in `create_once`): its outcome decides.
                Ok(Claim::Taken(_)) => {
                    if let Err(stop) = index::wait_turn(&mut turns, self.watch()) {
                        return Err(undo(stop.into()));
                    }
                }
                Err(err) => return Err(undo(err)),
            }
        };
        let made = if dir.removed() {
            Err(errno::ENOENT)
        } else {
            self.commit_link(&dir, new, generation)
        };
        match made {
            Ok(()) => {
                self.index.publish(pos);
                self.notices.name(parent, name, ino);
                Ok(())
            }
            Err(err) => {
                self.index.abandon(pos);
                Err(undo(err))
            }
        }
    }

    /// Count the link and commit the claimed entry `entry` naming `ino`.
    fn commit_link(&self, dir: &Dir<'_>, entry: Entry, generation: u64) -> Result<()> {
        let pool = &self.pool;
        let ino = entry.ino;
        let _g = self.ilock(ino)?;
        // Re-checked under the inode lock: the last unlink may have just freed it, and
        // a create may have reused the number.
        let nlink = self.load(ino, inode::NLINK);
        let unnamed = self.cachelets.get(ino).flags() & LINKABLE != 0;
        if self.live(ino).is_err()
            || (nlink == 0 && !unnamed)
            || self.load(ino, inode::GENERATION) != generation
        {
            return Err(errno::ENOENT);
        }
        if is_dir(self.mode(ino)) {
            return Err(errno::EPERM);
        }
        if nlink >= u32::MAX as u64 {
            return Err(errno::EMLINK);
        }
        let now = now_ns();
        pool.settle(ino);
        pool.settle(dir.ino);
        let at = self.iaddr(ino);
        let mut b = pool.pm.batch();
        // A higher link count before the commit is harmless: recovery recounts.
        b.write_u64(at + inode::NLINK, nlink + 1)
            .write_u64(at + inode::CTIME, now);
        let at = self.iaddr(dir.ino);
        b.write_u64(at + inode::MTIME, now)
            .write_u64(at + inode::CTIME, now);
        let born = pool.pm.load_u64(entry.dentry + dentry::BORN);
        if pool.cwon {
            // The new dentry's settled check (written with its body) lets recovery
            // tell whether its stores all landed: one fence commits the link.
            b.write_u64(entry.dentry + dentry::STATE, born);
            let _committed = b.persist();
        } else {
            let prepared = b.persist();
            drop(
                pool.pm
                    .commit_u64(entry.dentry + dentry::STATE, born, prepared),
            );
        }
        if unnamed {
            self.cachelets.get(ino).clear_flags(ORPHAN | LINKABLE);
        }
        dir.add_entry(self.lane());
        Ok(())
    }
}
