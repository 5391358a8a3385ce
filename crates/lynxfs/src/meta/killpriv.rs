//! killpriv (Linux's `file_remove_privs`, `should_remove_suid`): a change of a file's
//! data or size by a caller without CAP_FSETID clears its set-user-ID bit, and its
//! set-group-ID bit when it is group-executable or the caller is outside its group; a
//! caller who may write the file may also clear those bits itself (the kernel's FUSE
//! client sends that as a mode-only setattr when the daemon does not do it).

use crate::error::{errno, Result};
use crate::format::inode;
use crate::pmem::Backend;

use super::perm::{self, Cred};
use super::{Namespace, SetAttr, Stat};

/// S_ISUID and S_ISGID.
const PRIVS: u32 = libc::S_ISUID | libc::S_ISGID;

/// The mode killpriv leaves of `mode` after a change by a caller in the file's group
/// (`in_group`) or not.
pub fn without_privs(mode: u32, in_group: bool) -> u32 {
    let mut new = mode & !libc::S_ISUID;
    if mode & libc::S_IXGRP != 0 || !in_group {
        new &= !libc::S_ISGID;
    }
    new
}

impl<B: Backend> Namespace<B> {
    /// killpriv after a change of `ino`'s data or size by a caller without CAP_FSETID.
    pub fn clear_setid(&self, ino: u64, in_group: bool) {
        let mode = self.mode(ino);
        let new = without_privs(mode, in_group);
        if new != mode {
            self.pool.settle(ino);
            let mut b = self.pool.pm.batch();
            b.write_u64(
                self.iaddr(ino) + inode::MODE,
                super::flags::mode_word(new, self.inode_flags(ino)),
            );
            let _ = b.persist();
        }
    }

    /// A writer clears `ino`'s set-user-ID and set-group-ID bits, leaving `mode`: it
    /// need not own the file, only may write it. EINVAL unless `mode` only drops those
    /// bits (that is a chmod, for the owner), EACCES if the caller may not write.
    pub fn drop_privs(&self, ino: u64, mode: u32, cred: &Cred) -> Result<Stat> {
        self.op(|| {
            self.live(ino)?;
            let old = self.mode(ino) & 0o7777;
            let new = mode & 0o7777;
            let only_drops = new != old && new & !PRIVS == old & !PRIVS && new & !old == 0;
            if !only_drops {
                return Err(errno::EINVAL);
            }
            self.may(ino, cred, perm::W)?;
            let a = SetAttr {
                mode: Some(mode),
                ..SetAttr::default()
            };
            self.setattr(ino, &a, &Cred::root())
        })
    }
}
