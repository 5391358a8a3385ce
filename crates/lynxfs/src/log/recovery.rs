//! Recovery after an unclean close: replay the lanes' journals, then walk the namespace
//! from the root through the directory logs. What the walk reaches is in use; every
//! torn create, unlink or rename is judged by the dentry's valid bit, its parent field
//! and the inode's own number, and what nothing reaches is reclaimed. Link counts are
//! recounted from the dentries found. The walk yields the allocators' state.

use crate::alloc::UsedSets;
use crate::format::{dentry, dirlog, extents, inode, Layout, ROOT_INO};
use crate::log::journal::{self, Replay};
use crate::pmem::{Backend, Pm};

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    pub journals_replayed: usize,
    pub journals_torn: usize,
    pub directories: u64,
    pub files: u64,
    pub slots_cleared: u64,
    pub dentries_dropped: u64,
    pub nlinks_fixed: u64,
    pub inodes_reclaimed: u64,
    /// Damage found that recovery could only cut away (details in words).
    pub problems: Vec<String>,
}

pub const S_IFMT: u32 = libc::S_IFMT;
pub const S_IFDIR: u32 = libc::S_IFDIR;

pub fn is_dir(mode: u32) -> bool {
    mode & S_IFMT == S_IFDIR
}

/// Run recovery on `pm`; returns what is in use and what was done.
pub fn recover<B: Backend>(pm: &Pm<B>, l: &Layout) -> Result<(UsedSets, RecoveryReport), String> {
    let mut rep = RecoveryReport::default();
    for lane in 0..l.lanes() {
        match journal::replay(pm, l, lane) {
            Replay::Empty => {}
            Replay::Replayed(_) => rep.journals_replayed += 1,
            Replay::Torn => rep.journals_torn += 1,
        }
    }
    let mut w = Walk {
        pm,
        l,
        used: UsedSets::empty(l),
        links: vec![0u32; l.total_inodes() as usize],
        rep,
    };
    w.walk()?;
    w.fix_link_counts();
    w.reclaim();
    let _ = pm.fence();
    Ok((w.used, w.rep))
}

struct Walk<'a, B: Backend> {
    pm: &'a Pm<B>,
    l: &'a Layout,
    used: UsedSets,
    /// Dentries naming each inode; for directories, 2 + subdirectories.
    links: Vec<u32>,
    rep: RecoveryReport,
}

impl<B: Backend> Walk<'_, B> {
    fn inode_ok(&self, ino: u64) -> bool {
        self.l.ino_valid(ino) && self.pm.load_u64(self.l.inode_addr(ino) + inode::INO) == ino
    }
    fn mode(&self, ino: u64) -> u32 {
        self.pm.load_u64(self.l.inode_addr(ino) + inode::MODE) as u32
    }

    fn walk(&mut self) -> Result<(), String> {
        if !self.inode_ok(ROOT_INO) || !is_dir(self.mode(ROOT_INO)) {
            return Err("the root directory's inode is damaged".into());
        }
        UsedSets::mark(&mut self.used.inodes, ROOT_INO);
        self.links[ROOT_INO as usize] = 2;
        self.mark_inode_blocks(ROOT_INO);
        let mut stack = vec![ROOT_INO];
        while let Some(dir) = stack.pop() {
            self.rep.directories += 1;
            self.walk_dir(dir, &mut stack);
        }
        Ok(())
    }

    fn walk_dir(&mut self, dir: u64, stack: &mut Vec<u64>) {
        let mut page = self.pm.load_u64(self.l.inode_addr(dir) + inode::DIR_LOG);
        let mut prev_link = self.l.inode_addr(dir) + inode::DIR_LOG;
        while page != 0 {
            let ok = self.l.block_of(page).filter(|&b| {
                !crate::alloc::bit(&self.used.blocks, b)
                    && self.pm.load_u64(page + dirlog::OWNER) == dir
            });
            let Some(b) = ok else {
                self.rep
                    .problems
                    .push(format!("directory {dir}: bad log page link {page:#x}, cut"));
                let mut fix = self.pm.batch();
                fix.write_u64(prev_link, 0);
                fix.flushed();
                return;
            };
            UsedSets::mark(&mut self.used.blocks, b);
            for i in 0..dirlog::SLOTS_PER_PAGE {
                let slot = dirlog::slot_addr(page, i);
                let v = self.pm.load_u64(slot);
                if v != 0 && !self.take_entry(dir, slot, v, stack) {
                    let mut fix = self.pm.batch();
                    fix.write_u64(slot, 0);
                    fix.flushed();
                    self.rep.slots_cleared += 1;
                }
            }
            prev_link = page + dirlog::NEXT;
            page = self.pm.load_u64(page + dirlog::NEXT);
        }
    }

    /// Accept the entry in `slot` (pointing at dentry `addr`) or say it must go.
    fn take_entry(&mut self, dir: u64, slot: u64, addr: u64, stack: &mut Vec<u64>) -> bool {
        let Some(id) = self.l.dentry_id(addr) else {
            return false;
        };
        let pm = self.pm;
        if pm.load_u64(addr + dentry::STATE) & dentry::VALID == 0
            || pm.load_u64(addr + dentry::PARENT) != dir
            || pm.load_u64(addr + dentry::SLOT) != slot
            || crate::alloc::bit(&self.used.dentries, id)
        {
            return false;
        }
        let ino = pm.load_u64(addr + dentry::INO);
        let (name_len, _) = dentry::split_name_len(pm.load_u64(addr + dentry::NAME_LEN));
        let child_is_dir = self.inode_ok(ino) && is_dir(self.mode(ino));
        let dir_seen = child_is_dir && crate::alloc::bit(&self.used.inodes, ino);
        // An unlink (or rmdir) of a last name clears the dentry, its slot and the
        // inode's INO word in one fence: if only the INO store landed, the entry names
        // a freed inode. That is a torn unlink, not damage: the name goes quietly.
        if self.l.ino_valid(ino) && pm.load_u64(self.l.inode_addr(ino) + inode::INO) == 0 {
            let mut b = pm.batch();
            b.write_u64(addr + dentry::STATE, 0);
            b.flushed();
            self.rep.dentries_dropped += 1;
            return false;
        }
        if !self.inode_ok(ino)
            || name_len == 0
            || name_len > dentry::NAME_MAX
            || dir_seen
            || ino == ROOT_INO
        {
            self.drop_dentry(
                addr,
                format!(
                    "directory {dir}: entry at {addr:#x} names a bad or second-linked inode {ino}"
                ),
            );
            return false;
        }
        UsedSets::mark(&mut self.used.dentries, id);
        let first = !UsedSets::mark(&mut self.used.inodes, ino);
        if child_is_dir {
            self.links[ino as usize] = 2;
            self.links[dir as usize] += 1;
            stack.push(ino);
        } else {
            self.links[ino as usize] += 1;
        }
        if first {
            self.mark_inode_blocks(ino);
            if !child_is_dir {
                self.rep.files += 1;
            }
        }
        true
    }

    fn drop_dentry(&mut self, addr: u64, why: String) {
        let mut b = self.pm.batch();
        b.write_u64(addr + dentry::STATE, 0);
        b.flushed();
        self.rep.dentries_dropped += 1;
        self.rep.problems.push(why);
    }

    /// Mark the data blocks, tree nodes and xattr block of `ino` as used.
    fn mark_inode_blocks(&mut self, ino: u64) {
        let off = self.l.inode_addr(ino);
        let mut nodes = Vec::new();
        match extents::read_map(self.pm, self.l, off, &mut nodes) {
            Ok(ext) => {
                for e in ext {
                    for b in e.pblk..e.pblk + e.len as u64 {
                        self.mark_block(ino, b);
                    }
                }
            }
            Err(e) => self.rep.problems.push(format!("inode {ino}: {e}")),
        }
        for n in nodes {
            if let Some(b) = self.l.block_of(n) {
                self.mark_block(ino, b);
            }
        }
        let x = self.pm.load_u64(off + inode::XATTR);
        if x != 0 {
            match self.l.block_of(x) {
                Some(b) => self.mark_block(ino, b),
                None => self
                    .rep
                    .problems
                    .push(format!("inode {ino}: bad xattr block {x:#x}")),
            }
        }
    }

    fn mark_block(&mut self, ino: u64, b: u64) {
        if UsedSets::mark(&mut self.used.blocks, b) {
            self.rep
                .problems
                .push(format!("inode {ino}: block {b} is owned twice"));
        }
    }

    fn fix_link_counts(&mut self) {
        for ino in 1..self.l.total_inodes() {
            if !crate::alloc::bit(&self.used.inodes, ino) {
                continue;
            }
            let want = self.links[ino as usize] as u64;
            let at = self.l.inode_addr(ino) + inode::NLINK;
            if self.pm.load_u64(at) != want {
                let mut b = self.pm.batch();
                b.write_u64(at, want);
                b.flushed();
                self.rep.nlinks_fixed += 1;
            }
        }
    }

    /// Free what nothing reaches: inodes still stamped in use, dentries still valid.
    fn reclaim(&mut self) {
        for ino in 1..self.l.total_inodes() {
            let at = self.l.inode_addr(ino) + inode::INO;
            if !crate::alloc::bit(&self.used.inodes, ino) && self.pm.load_u64(at) != 0 {
                let mut b = self.pm.batch();
                b.write_u64(at, 0);
                b.flushed();
                self.rep.inodes_reclaimed += 1;
            }
        }
        for id in 1..self.l.total_dentries() {
            let at = self.l.dentry_addr(id) + dentry::STATE;
            if !crate::alloc::bit(&self.used.dentries, id)
                && self.pm.load_u64(at) & dentry::VALID != 0
            {
                let mut b = self.pm.batch();
                b.write_u64(at, 0);
                b.flushed();
            }
        }
    }
}
