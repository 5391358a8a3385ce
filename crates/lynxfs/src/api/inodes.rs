//! Calls on inodes named by number, for a front end that resolves names itself (the
//! FUSE adapter: the kernel walks paths and names each file by its inode number).
//! Each is the namespace call a path call makes once the path is resolved, with the
//! same rules (permissions and ACLs, protected hard links, killpriv, the umask and
//! default ACLs, inode flags), so the mount and the path front ends agree.

use crate::error::Result;
use crate::meta::{perm, Cred, DirBatch, DirEntry, RenameFlags, SetAttr, Stat, StatFs, Usage};
use crate::pmem::Backend;

use super::{nodes, Fs};

impl<B: Backend> Fs<B> {
    /// The attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> Result<Stat> {
        self.ns.getattr(ino)
    }

    /// `ino`'s mode (type and permission bits), one load: what a write may clear of it.
    pub fn mode(&self, ino: u64) -> u32 {
        self.ns.mode(ino)
    }

    /// Symlink `ino`'s target.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        self.ns.readlink(ino)
    }

    /// A path from the root to `ino` (a directory, or a file by one of its names).
    pub fn path_of(&self, ino: u64) -> Result<Vec<u8>> {
        self.ns.path_of(ino)
    }

    /// Whether `name` in `parent` exists, whoever asks.
    pub fn name_exists(&self, parent: u64, name: &[u8]) -> bool {
        self.ns.lookup(parent, name, &Cred::root()).is_ok()
    }

    /// access(2): may `cred` do what `mask` (R_OK, W_OK, X_OK bits; 0 for F_OK) asks
    /// of `ino`?
    pub fn access(&self, ino: u64, cred: &Cred, mask: u32) -> Result<()> {
        self.ns.live(ino)?;
        if mask == 0 {
            return Ok(());
        }
        self.ns.may(ino, cred, mask & (perm::R | perm::W | perm::X))
    }

    /// opendir: `ino` is a directory (a removed one still held too) `cred` may read.
    pub fn open_dir(&self, ino: u64, cred: &Cred) -> Result<()> {
        self.ns.directory(ino)?;
        self.ns.may(ino, cred, perm::R)
    }

    /// Whether `ino` is a directory that was removed (it lists nothing).
    pub fn is_removed_dir(&self, ino: u64) -> bool {
        self.ns.is_removed_dir(ino)
    }

    /// Up to `max` entries of directory `dir` from cookie `offset` on.
    pub fn readdir(&self, dir: u64, offset: u64, max: usize, cred: &Cred) -> Result<Vec<DirEntry>> {
        self.ns.readdir(dir, offset, max, cred)
    }

    /// [`Fs::readdir`] into a batch the caller keeps (no allocation per entry).
    pub fn readdir_into(
        &self,
        dir: u64,
        offset: u64,
        max: usize,
        cred: &Cred,
        out: &mut DirBatch,
    ) -> Result<()> {
        self.ns.readdir_into(dir, offset, max, cred, out)
    }

    pub fn statfs(&self) -> StatFs {
        self.ns.statfs()
    }

    /// What the pool's runtime state holds now (memory, open files, names loaded).
    pub fn usage(&self) -> Usage {
        self.ns.usage()
    }

    /// open(O_CREAT) of `name` in `parent`: the file's number and whether this call
    /// made it; `mode` less `umask` unless `parent`'s default ACL decides.
    pub fn create_in(
        &self,
        parent: u64,
        name: &[u8],
        (mode, umask): (u32, u32),
        excl: bool,
        cred: &Cred,
    ) -> Result<(u64, bool)> {
        self.ns
            .create(parent, name, nodes::file(mode, umask), cred, excl)
    }

    /// mkdir of `name` in `parent`: the new directory's number.
    pub fn mkdir_in(
        &self,
        parent: u64,
        name: &[u8],
        (mode, umask): (u32, u32),
        cred: &Cred,
    ) -> Result<u64> {
        let node = nodes::dir(mode, umask);
        self.ns
            .create(parent, name, node, cred, true)
            .map(|(ino, _)| ino)
    }

    /// mknod of `name` in `parent`: the new node's number.
    pub fn mknod_in(
        &self,
        parent: u64,
        name: &[u8],
        (mode, umask): (u32, u32),
        rdev: u64,
        cred: &Cred,
    ) -> Result<u64> {
        let node = nodes::special(mode, rdev, umask, cred)?;
        self.ns
            .create(parent, name, node, cred, true)
            .map(|(ino, _)| ino)
    }

    /// symlink `name` in `parent` to `target`: the new link's number.
    pub fn symlink_in(&self, parent: u64, name: &[u8], target: &[u8], cred: &Cred) -> Result<u64> {
        let node = nodes::symlink(target);
        self.ns
            .create(parent, name, node, cred, true)
            .map(|(ino, _)| ino)
    }

    /// A hard link to `ino` named `name` in `parent` (`fs.protected_hardlinks` too).
    pub fn link_in(&self, ino: u64, parent: u64, name: &[u8], cred: &Cred) -> Result<()> {
        self.ns.link(ino, parent, name, cred)
    }

    pub fn unlink_in(&self, parent: u64, name: &[u8], cred: &Cred) -> Result<()> {
        self.ns.unlink(parent, name, cred)
    }

    pub fn rmdir_in(&self, parent: u64, name: &[u8], cred: &Cred) -> Result<()> {
        self.ns.rmdir(parent, name, cred)
    }

    /// renameat2 from `name` in `parent` to `new` in `new_parent`, with RENAME_*
    /// `flags`.
    pub fn rename_in(
        &self,
        (parent, name): (u64, &[u8]),
        (new_parent, new): (u64, &[u8]),
        flags: u32,
        cred: &Cred,
    ) -> Result<()> {
        let flags = RenameFlags::from_bits(flags)?;
        self.ns.rename(parent, name, new_parent, new, flags, cred)
    }

    /// chmod, chown and utimens of `ino` at once (what is `None` stays).
    pub fn setattr(&self, ino: u64, a: &SetAttr, cred: &Cred) -> Result<Stat> {
        self.ns.setattr(ino, a, cred)
    }

    /// A writer's clearing of `ino`'s set-user-ID and set-group-ID bits, to `mode`
    /// (see [`crate::meta::killpriv`]): EINVAL unless `mode` only drops them, EACCES
    /// unless `cred` may write the file.
    pub fn drop_privs(&self, ino: u64, mode: u32, cred: &Cred) -> Result<Stat> {
        self.ns.drop_privs(ino, mode, cred)
    }

    /// What a write does first to `ino` (Linux's `file_remove_privs`), whoever writes:
    /// its `security.capability` goes.
    pub fn drop_capability(&self, ino: u64) -> Result<()> {
        self.ns.drop_capability(ino)
    }

    /// `ino`'s inode flags (`FS_IOC_GETFLAGS`).
    pub fn inode_flags(&self, ino: u64) -> u32 {
        self.ns.inode_flags(ino)
    }

    /// `FS_IOC_SETFLAGS` as `cred`.
    pub fn set_inode_flags(&self, ino: u64, flags: u32, cred: &Cred) -> Result<()> {
        self.ns.set_inode_flags(ino, flags, cred)
    }

    pub fn getxattr(&self, ino: u64, name: &[u8], cred: &Cred) -> Result<Vec<u8>> {
        self.ns.getxattr(ino, name, cred)
    }

    pub fn setxattr(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: i32,
        cred: &Cred,
    ) -> Result<()> {
        self.ns.setxattr(ino, name, value, flags, cred)
    }

    pub fn listxattr(&self, ino: u64, cred: &Cred) -> Result<Vec<Vec<u8>>> {
        self.ns.listxattr(ino, cred)
    }

    pub fn removexattr(&self, ino: u64, name: &[u8], cred: &Cred) -> Result<()> {
        self.ns.removexattr(ino, name, cred)
    }
}
