//! Removing names: unlink and rmdir, and freeing an inode once nothing names or holds
//! it.
//!
//! Protocol (docs/CONSISTENCY.md, "unlink"): claim the entry in the index (Ready ->
//! Leaving, a CAS, so one of two racing unlinks wins); the commit point is the 8-byte
//! store that clears the dentry's valid bit, made durable together with the store that
//! empties its log slot. Link counts and freeing follow; recovery recounts and reclaims
//! if a crash cuts them short.

use std::sync::atomic::Ordering;

use crate::error::{errno, Result};
use crate::format::{dentry, inode};
use crate::pmem::Backend;
use crate::time::now_ns;

use super::cachelet::ORPHAN;
use super::index::Entry;
use super::perm::{self, Cred};
use super::{check_name, is_dir, Namespace};

impl<B: Backend> Namespace<B> {
    pub fn unlink(&self, parent: u64, name: &[u8], cred: &Cred) -> Result<()> {
        if name == b"." || name == b".." {
            return Err(errno::EISDIR);
        }
        self.op(|| self.remove(parent, name, cred, false))
            .map(|due| self.after_removal(parent, due))
    }

    pub fn rmdir(&self, parent: u64, name: &[u8], cred: &Cred) -> Result<()> {
        match name {
            b"." => return Err(errno::EINVAL),
            b".." => return Err(errno::ENOTEMPTY),
            _ => {}
        }
        self.op(|| self.remove(parent, name, cred, true))
            .map(|due| self.after_removal(parent, due))
    }

    /// A removal from `parent` that found its log due a compaction check makes it,
    /// as an operation of its own, once it holds nothing of the directory.
    pub(crate) fn after_removal(&self, parent: u64, due: bool) {
        if due {
            let _ = self.op(|| {
                self.compact_if_due(parent);
                Ok(())
            });
        }
    }

    /// Set an entry Ready -> Leaving; `None` if it is not there (or not ready).
    pub(crate) fn claim_entry(&self, parent: u64, name: &[u8]) -> Option<Entry> {
        self.index.leave(&self.pool.pm, parent, name)
    }

    /// Claim the entry for a removal (Ready -> Leaving) once no other operation is
    /// taking the name away: an entry Leaving is another removal's or a rename's,
    /// and a rename over the name leaves it there, naming another file. ENOENT only
    /// when no entry is left, or the one left is not yet created.
    fn claim_settled(&self, parent: u64, name: &[u8]) -> Result<Entry> {
        let mut turns = 0;
        loop {
            if let Some(e) = self.claim_entry(parent, name) {
                return Ok(e);
            }
            // A visible entry not Ready is Leaving (claimed by another operation);
            // one Ready appeared since the claim: claim again.
            if self.lookup_entry(parent, name).is_none() {
                return Err(errno::ENOENT);
            }
            super::index::wait_turn(&mut turns, self.watch())?;
        }
    }

    /// Put a claimed entry back as it was.
    pub(crate) fn unclaim(&self, e: Entry) {
        self.index.stay(&e);
    }

    /// True when the parent's log is due a compaction check (`Dir::remove_entry`).
    fn remove(&self, parent: u64, name: &[u8], cred: &Cred, want_dir: bool) -> Result<bool> {
        check_name(name)?;
        // A directory removed: paths the areas learnt through it lead nowhere.
        let _areas = want_dir.then(|| self.areas.changing());
        let lane = self.lane();
        let dir = self.enter_in(parent, lane)?;
        let pown = self.owner(parent);
        self.may(parent, cred, perm::X)?;
        let e = self.claim_settled(parent, name)?;
        if let Err(err) = self.may(parent, cred, perm::W | perm::X) {
            self.unclaim(e);
            return Err(err);
        }
        let checked = self
            .check_removable(e, pown, cred, want_dir)
            .and_then(|d| self.may_delete(parent, e.ino).map(|()| d));
        let child_dir = match checked {
            Ok(d) => d,
            Err(err) => {
                self.unclaim(e);
                return Err(err);
            }
        };
        // rmdir holds the victim's gate alone, so no create slips in after the check.
        let (child_dir, _victim_gate) = match child_dir {
            Some(_) => match self.lock_alone(e.ino) {
                Ok((d, g)) => (Some(d), Some(g)),
                Err(err) => {
                    self.unclaim(e);
                    return Err(err);
                }
            },
            None => (None, None),
        };
        if child_dir.is_some() {
            crate::runtime::testing::stop_here("rmdir.gate_alone");
        }
        if let Some(d) = &child_dir {
            if d.entries() > 0 {
                drop(_victim_gate);
                self.unclaim(e);
                return Err(errno::ENOTEMPTY);
            }
        }
        let now = now_ns();
        // The name, the link count and (when it was the last name of an unopened
        // file) the inode itself go in one fence. Lock order: the file's cachelet
        // (open count), then its inode lock.
        // A wait here may end because the runtime is under repair: nothing is written
        // to the pool before the last wait (the parent's inode lock in `touch_dir`).
        let c = self.cachelets.get(e.ino);
        let locked = c.write(self.watch()).and_then(|cw| {
            let il = if want_dir {
                None
            } else {
                Some(c.inode_lock(self.watch())?)
            };
            Ok((cw, il))
        });
        let (cw, il) = match locked {
            Ok(held) => held,
            Err(stop) => {
                drop(_victim_gate);
                self.unclaim(e);
                return Err(stop.into());
            }
        };
        let left = if want_dir {
            0
        } else {
            self.load(e.ino, inode::NLINK).saturating_sub(1)
        };
        let free_now = left == 0 && c.open() == 0;
        let at = self.iaddr(e.ino);
        let mut b = self.pool.pm.batch();
        // The parent's times, once per coarse clock tick as for creates (an rmdir
        // stores them with the parent's link count).
        let stored = match self.touch_parent(&mut b, &dir, now, if want_dir { -1 } else { 0 }) {
            Ok(stored) => stored,
            Err(stop) => {
                drop(b);
                drop((cw, il, _victim_gate));
                self.unclaim(e);
                return Err(stop);
            }
        };
        b.write_u64(e.dentry + dentry::STATE, dentry::state_word(false, now))
            .write_u64(e.slot, 0);
        b.write_u64(at + inode::NLINK, left)
            .write_u64(at + inode::CTIME, now);
        if free_now {
            b.write_u64(at + inode::INO, 0);
        }
        let _committed = b.persist();
        if let Some(t) = stored {
            // Fenced above: operations of this tick may now leave the times alone.
            dir.cachelet().durable_times().store(t, Ordering::Release);
        }
        self.notices.name(parent, name, e.ino);
        drop(il);
        crate::runtime::testing::race_here("remove.committed");
        self.index.remove(&e);
        let due = dir.remove_entry(lane);
        dir.release_slot(&self.free_slots, e.slot);
        self.pool.alloc.dentries.free(
            self.pool
                .layout
                .dentry_id(e.dentry)
                .expect("indexed dentry"),
        );
        if let Some(d) = &child_dir {
            d.set_removed(parent, self.load(parent, inode::GENERATION));
            d.drain_slots(&self.free_slots);
        }
        drop(_victim_gate);
        if free_now {
            crate::data::free_all(&self.pool, e.ino);
            self.release_ino(e.ino);
        } else if left == 0 {
            c.set_flags(ORPHAN);
        }
        drop(cw);
        Ok(due)
    }

    /// Type and sticky-bit checks; for rmdir, the victim directory (loaded).
    fn check_removable(
        &self,
        e: Entry,
        pown: perm::Owner,
        cred: &Cred,
        want_dir: bool,
    ) -> Result<Option<super::Dir<'_>>> {
        let victim = self.owner(e.ino);
        match (want_dir, is_dir(victim.mode)) {
            (true, false) => return Err(errno::ENOTDIR),
            (false, true) => return Err(errno::EISDIR),
            _ => {}
        }
        perm::sticky_ok(cred, pown, victim)?;
        if want_dir {
            Ok(Some(self.dir(e.ino)?))
        } else {
            Ok(None)
        }
    }

    /// One name of `ino` is gone: count it down, and free the inode when no name and
    /// no open handle is left. This follows its operation's commit point: if a wait is
    /// ended by a repair, it is left undone, as a crash would leave it, and the rebuild
    /// (recovery's link count check) does it.
    pub(crate) fn drop_link(&self, ino: u64, whole_dir: bool, now: u64) {
        let c = self.cachelets.get(ino);
        let Ok(_w) = c.write(self.watch()) else {
            return;
        };
        let left = {
            let Ok(_g) = c.inode_lock(self.watch()) else {
                return;
            };
            let n = if whole_dir {
                0
            } else {
                self.load(ino, inode::NLINK).saturating_sub(1)
            };
            let mut b = self.pool.pm.batch();
            b.write_u64(self.iaddr(ino) + inode::NLINK, n)
                .write_u64(self.iaddr(ino) + inode::CTIME, now);
            let _ = b.persist();
            n
        };
        if left == 0 {
            if c.open() > 0 {
                c.set_flags(ORPHAN);
            } else {
                self.free_inode(ino);
            }
        }
    }

    /// Called at the last close of `ino` (with its cachelet's lock held).
    pub(crate) fn free_if_orphan(&self, ino: u64) {
        let c = self.cachelets.get(ino);
        if c.flags() & ORPHAN != 0 && c.open() == 0 {
            c.clear_flags(ORPHAN);
            self.free_inode(ino);
        }
    }

    /// Return an unnamed, unopened inode's blocks and number to the allocators.
    fn free_inode(&self, ino: u64) {
        crate::data::free_all(&self.pool, ino);
        let mut b = self.pool.pm.batch();
        b.write_u64(self.iaddr(ino) + inode::INO, 0);
        let _ = b.persist();
        self.release_ino(ino);
    }

    /// Hand a freed inode's number back: its cachelet forgotten, then the number
    /// returned to the allocator.
    fn release_ino(&self, ino: u64) {
        let c = self.cachelets.get(ino);
        super::Dir::new(c, &self.gates).drain_slots(&self.free_slots);
        c.reset();
        self.pool.alloc.inodes.free(ino);
    }
}
