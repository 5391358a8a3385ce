//! Permission checks against a caller's credentials, as Linux makes them
//! (`generic_permission`, `inode_owner_or_capable`, the sticky-bit rule), and
//! [`Namespace::may`], which applies them to an inode (its flags, mode and access ACL).

use crate::error::{errno, Result};
use crate::format::inode;
use crate::pmem::Backend;

use super::acl;
use super::flags::IMMUTABLE;
use super::Namespace;

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl Cred {
    pub fn root() -> Cred {
        Cred {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        }
    }
    pub fn user(uid: u32, gid: u32) -> Cred {
        Cred {
            uid,
            gid,
            groups: Vec::new(),
        }
    }
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

pub const R: u32 = 4;
pub const W: u32 = 2;
pub const X: u32 = 1;

/// The owner-relevant attributes of an inode.
#[derive(Clone, Copy, Debug)]
pub struct Owner {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

impl Owner {
    fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }
}

/// May `cred` access `o` for `want` (a mix of R, W, X)?
pub fn check(cred: &Cred, o: Owner, want: u32) -> Result<()> {
    if cred.is_root() {
        // Root may do anything but execute a file no one may execute.
        let any_x = o.mode & 0o111 != 0;
        return if want & X != 0 && !o.is_dir() && !any_x {
            Err(errno::EACCES)
        } else {
            Ok(())
        };
    }
    let bits = if cred.uid == o.uid {
        o.mode >> 6
    } else if cred.in_group(o.gid) {
        o.mode >> 3
    } else {
        o.mode
    } & 7;
    if bits & want == want {
        Ok(())
    } else {
        Err(errno::EACCES)
    }
}

/// Owner or root (chmod, utimes to a given time, setting xattrs in some namespaces).
pub fn owner_or_root(cred: &Cred, o: Owner) -> Result<()> {
    if cred.is_root() || cred.uid == o.uid {
        Ok(())
    } else {
        Err(errno::EPERM)
    }
}

/// In a sticky directory only the file's owner, the directory's owner or root may
/// remove or rename an entry.
pub fn sticky_ok(cred: &Cred, dir: Owner, victim: Owner) -> Result<()> {
    if dir.mode & libc::S_ISVTX == 0
        || cred.is_root()
        || cred.uid == victim.uid
        || cred.uid == dir.uid
    {
        Ok(())
    } else {
        Err(errno::EPERM)
    }
}

impl<B: Backend> Namespace<B> {
    /// May `cred` access `ino` for `want` (R, W, X)? Through the access ACL when the
    /// inode has one, as Linux's `generic_permission`.
    pub fn may(&self, ino: u64, cred: &Cred, want: u32) -> Result<()> {
        // One load of the mode word (the inode flags are its high half) decides
        // for root, which needs no owner.
        let word = self.load(ino, inode::MODE);
        // Even root may not write to an immutable file, or in an immutable directory.
        if want & W != 0 && (word >> 32) as u32 & IMMUTABLE != 0 {
            return Err(errno::EPERM);
        }
        let mode = word as u32;
        if cred.is_root() {
            let o = Owner {
                mode,
                uid: 0,
                gid: 0,
            };
            return check(cred, o, want);
        }
        let (uid, gid) = inode::owner_split(self.load(ino, inode::OWNER));
        let o = Owner { mode, uid, gid };
        // Only a caller other than root and the owner, of a file whose mode has group
        // bits and which has attributes at all, can be decided by an ACL.
        let acl_may_apply = !cred.is_root()
            && cred.uid != o.uid
            && o.mode & 0o070 != 0
            && self.load(ino, inode::XATTR) != 0;
        if !acl_may_apply {
            return check(cred, o, want);
        }
        let access = self.stored_acl(ino, acl::ACCESS)?;
        acl::check(cred, o, access.as_ref(), want)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(mode: u32, uid: u32, gid: u32) -> Owner {
        Owner {
            mode: libc::S_IFREG | mode,
            uid,
            gid,
        }
    }

    #[test]
    fn classes_are_exclusive_like_linux() {
        let u = Cred::user(1000, 100);
        // The owner class applies even when the group class would allow more.
        assert!(check(&u, f(0o070, 1000, 100), R).is_err());
        assert!(check(&u, f(0o400, 1000, 5), R).is_ok());
        assert!(check(&u, f(0o040, 1, 100), R).is_ok());
        assert!(check(&u, f(0o004, 1, 5), R).is_ok());
        assert!(check(&u, f(0o004, 1, 5), W).is_err());
        let mut g = Cred::user(1000, 100);
        g.groups.push(7);
        assert!(check(&g, f(0o060, 1, 7), R | W).is_ok());
    }

    #[test]
    fn root_needs_some_x_to_execute() {
        let r = Cred::root();
        assert!(check(&r, f(0o000, 5, 5), R | W).is_ok());
        assert!(check(&r, f(0o644, 5, 5), X).is_err());
        assert!(check(&r, f(0o001, 5, 5), X).is_ok());
        let d = Owner {
            mode: libc::S_IFDIR,
            uid: 5,
            gid: 5,
        };
        assert!(check(&r, d, X).is_ok());
    }
}
