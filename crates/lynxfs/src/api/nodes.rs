//! What each call that makes a name asks the namespace to create, with Linux's rules
//! for the mode it is given: one place for the path calls and the by-number calls.

use crate::error::{errno, Result};
use crate::meta::perm::cap;
use crate::meta::{Cred, NewNode};

/// mkdir's directory: only the permission and sticky bits, as vfs_mkdir (set-group-ID
/// comes from a set-group-ID parent, in create).
pub(super) fn dir(mode: u32, umask: u32) -> NewNode<'static> {
    NewNode {
        mode: libc::S_IFDIR | (mode & 0o1777),
        rdev: 0,
        target: None,
        umask,
    }
}

/// A regular file that open(O_CREAT) makes.
pub(super) fn file(mode: u32, umask: u32) -> NewNode<'static> {
    NewNode {
        mode: libc::S_IFREG | (mode & 0o7777),
        rdev: 0,
        target: None,
        umask,
    }
}

/// A symlink to `target` (its permissions are always 0777).
pub(super) fn symlink(target: &[u8]) -> NewNode<'_> {
    NewNode {
        mode: libc::S_IFLNK | 0o777,
        rdev: 0,
        target: Some(target),
        umask: 0,
    }
}

/// mknod's node: a regular file (type 0 too), FIFO or socket for anyone, a device
/// for root only (CAP_MKNOD); other types are EINVAL.
pub(super) fn special(mode: u32, rdev: u64, umask: u32, cred: &Cred) -> Result<NewNode<'static>> {
    let kind = match mode & libc::S_IFMT {
        0 => libc::S_IFREG,
        k => k,
    };
    match kind {
        libc::S_IFREG | libc::S_IFIFO | libc::S_IFSOCK => {}
        libc::S_IFCHR | libc::S_IFBLK if cred.has(cap::MKNOD) => {}
        libc::S_IFCHR | libc::S_IFBLK => return Err(errno::EPERM),
        _ => return Err(errno::EINVAL),
    }
    Ok(NewNode {
        mode: kind | (mode & 0o7777),
        rdev,
        target: None,
        umask,
    })
}
