//! Inode flags (`chattr`, `FS_IOC_GETFLAGS`/`FS_IOC_SETFLAGS`), kept in the high 32
//! bits of the inode's mode word, with Linux's rules: an immutable file refuses every
//! change (data, size, attributes, xattrs, names, and new names in it when it is a
//! directory); an append-only file accepts only appends (and new names, for a
//! directory) and cannot be removed, renamed or linked to.

use crate::error::{errno, Result};
use crate::format::inode;
use crate::pmem::Backend;
use crate::time::now_ns;

use super::perm::{self, cap, Cred};
use super::Namespace;

/// `FS_IMMUTABLE_FL` (`chattr +i`).
pub const IMMUTABLE: u32 = 0x10;
/// `FS_APPEND_FL` (`chattr +a`).
pub const APPEND: u32 = 0x20;
/// `FS_NODUMP_FL` (`chattr +d`): stored for backup tools, nothing to enforce.
pub const NODUMP: u32 = 0x40;
/// `FS_NOATIME_FL` (`chattr +A`): reads leave the access time alone.
pub const NOATIME: u32 = 0x80;
/// The flags LynxFS keeps; others are refused with EOPNOTSUPP.
pub const SUPPORTED: u32 = IMMUTABLE | APPEND | NODUMP | NOATIME;

/// The mode word with `mode` in its low half and `flags` in its high half.
pub fn mode_word(mode: u32, flags: u32) -> u64 {
    u64::from(flags) << 32 | u64::from(mode)
}

impl<B: Backend> Namespace<B> {
    /// `ino`'s flags.
    pub fn inode_flags(&self, ino: u64) -> u32 {
        (self.load(ino, inode::MODE) >> 32) as u32
    }

    /// `FS_IOC_SETFLAGS`: the owner (or root) sets the flags; changing immutable or
    /// append-only needs root (CAP_LINUX_IMMUTABLE). Commit point: the mode word.
    pub fn set_inode_flags(&self, ino: u64, flags: u32, cred: &Cred) -> Result<()> {
        self.op(|| {
            self.live(ino)?;
            if flags & !SUPPORTED != 0 {
                return Err(errno::EOPNOTSUPP);
            }
            let _areas = super::is_dir(self.mode(ino)).then(|| self.areas.changing());
            let _g = self.ilock(ino)?;
            let o = self.owner(ino);
            perm::owner_or_root(cred, o)?;
            let old = self.inode_flags(ino);
            if (old ^ flags) & (IMMUTABLE | APPEND) != 0 && !cred.has(cap::LINUX_IMMUTABLE) {
                return Err(errno::EPERM);
            }
            let at = self.iaddr(ino);
            self.pool.settle(ino);
            self.commit_words(&[
                (at + inode::MODE, mode_word(o.mode, flags)),
                (at + inode::CTIME, now_ns()),
            ])?;
            drop(_g);
            self.notices.attrs(ino);
            Ok(())
        })
    }

    /// A change other than an append (size, attributes, xattrs, a new link): refused
    /// for immutable and append-only files.
    pub fn may_change(&self, ino: u64) -> Result<()> {
        match self.inode_flags(ino) & (IMMUTABLE | APPEND) {
            0 => Ok(()),
            _ => Err(errno::EPERM),
        }
    }

    /// A write to `ino`'s data: refused when immutable, and unless it appends
    /// (`append`: the handle has O_APPEND) when append-only.
    pub fn may_write_data(&self, ino: u64, append: bool) -> Result<()> {
        let f = self.inode_flags(ino);
        if f & IMMUTABLE != 0 || (f & APPEND != 0 && !append) {
            return Err(errno::EPERM);
        }
        Ok(())
    }

    /// Removing (or renaming away, or replacing) `victim`'s name in `parent`.
    pub(crate) fn may_delete(&self, parent: u64, victim: u64) -> Result<()> {
        if self.inode_flags(parent) & (IMMUTABLE | APPEND) != 0 {
            return Err(errno::EPERM);
        }
        self.may_change(victim)
    }
}
