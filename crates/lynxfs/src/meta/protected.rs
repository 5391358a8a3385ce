//! Linux's `fs.protected_hardlinks` (`may_linkat`): with the sysctl on, a caller who
//! neither owns a file nor is root (CAP_FOWNER) may give it a new name only if it is
//! a "safe" source: a regular file, not set-user-ID, not set-group-ID and
//! group-executable, that the caller may read and write. It keeps users from pinning
//! another's setuid program or private file under a name of their own.

use crate::error::{errno, Result};
use crate::pmem::Backend;

use super::perm::{self, cap, Cred};
use super::Namespace;

/// Where the kernel publishes the sysctl.
const SYSCTL: &str = "/proc/sys/fs/protected_hardlinks";

impl<B: Backend> Namespace<B> {
    /// May `cred` link `ino` (`may_linkat`)? EPERM when the rule refuses it.
    pub(super) fn may_link(&self, ino: u64, cred: &Cred) -> Result<()> {
        let o = self.owner(ino);
        // The sysctl is read only for a link the rule might refuse.
        if cred.has(cap::FOWNER) || cred.uid == o.uid || !protected_hardlinks() {
            return Ok(());
        }
        let setgid_exec = libc::S_ISGID | libc::S_IXGRP;
        let safe = o.mode & libc::S_IFMT == libc::S_IFREG
            && o.mode & libc::S_ISUID == 0
            && o.mode & setgid_exec != setgid_exec
            && self.may(ino, cred, perm::R | perm::W).is_ok();
        if safe {
            Ok(())
        } else {
            Err(errno::EPERM)
        }
    }
}

/// Whether `fs.protected_hardlinks` is on now: read at each link the rule might
/// refuse, as the kernel consults it at each link, so a change counts at once. A
/// kernel without the file has no such rule.
fn protected_hardlinks() -> bool {
    std::fs::read_to_string(SYSCTL).is_ok_and(|v| v.trim() == "1")
}
