//! Permission checks against a caller's credentials, as Linux makes them
//! (`generic_permission`, `inode_owner_or_capable`, the sticky-bit rule), and
//! [`Namespace::may`], which applies them to an inode (its flags, mode and access ACL).

use crate::error::{errno, Result};
use crate::format::inode;
use crate::pmem::Backend;

use super::acl;
use super::flags::IMMUTABLE;
use super::Namespace;

/// Linux's capability numbers (linux/capability.h) the checks use: the kernel lets a
/// caller past a check by the capability that check names, not by "uid 0".
pub mod cap {
    /// chown to another owner, chgrp to any group.
    pub const CHOWN: u32 = 0;
    /// Read, write and search past the mode bits (execute when some x bit is set).
    pub const DAC_OVERRIDE: u32 = 1;
    /// Read files and search directories past the mode bits.
    pub const DAC_READ_SEARCH: u32 = 2;
    /// What the owner may do (chmod, utimes, the sticky rule, O_NOATIME, ACLs).
    pub const FOWNER: u32 = 3;
    /// Keep set-user-ID and set-group-ID through writes, chmod and ACL changes.
    pub const FSETID: u32 = 4;
    /// Set or clear the immutable and append-only flags.
    pub const LINUX_IMMUTABLE: u32 = 9;
    /// The trusted.* and security.* extended attributes.
    pub const SYS_ADMIN: u32 = 21;
    /// Use the blocks kept in reserve.
    pub const SYS_RESOURCE: u32 = 24;
    /// Make device nodes and whiteouts.
    pub const MKNOD: u32 = 27;
    /// Every capability: what a process whose fs uid is 0 has unless it gave some up.
    pub const ALL: u64 = !0;
}

/// Who is calling: the fs uid and fs gid and supplementary groups the kernel checks
/// with, and the effective capabilities (a mask of `1 << cap::*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub caps: u64,
}

impl Cred {
    /// uid 0 with every capability.
    pub fn root() -> Cred {
        Cred::user(0, 0)
    }
    /// `uid` and `gid`, no groups, and the capabilities the kernel gives such a
    /// caller by default: all of them for uid 0 (so a caller that knows only the ids,
    /// as a FUSE request does, is checked as before), none otherwise.
    pub fn user(uid: u32, gid: u32) -> Cred {
        Cred {
            uid,
            gid,
            groups: Vec::new(),
            caps: if uid == 0 { cap::ALL } else { 0 },
        }
    }
    /// Whether the caller has capability `c` (a `cap::*`).
    pub fn has(&self, c: u32) -> bool {
        self.caps & (1 << c) != 0
    }
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
    /// In group `gid`, or allowed to act as if (CAP_FSETID: Linux's
    /// `in_group_or_capable`, which decides whether set-group-ID survives).
    pub fn in_group_or_fsetid(&self, gid: u32) -> bool {
        self.in_group(gid) || self.has(cap::FSETID)
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

/// May `cred` access `o` for `want` (a mix of R, W, X)? Linux's `generic_permission`:
/// the mode's class for the caller, then the capabilities that override it.
pub fn check(cred: &Cred, o: Owner, want: u32) -> Result<()> {
    if cred.has(cap::DAC_OVERRIDE) {
        // Decided without the owner: the override allows anything but executing a
        // file no one may execute, and the mode bits cannot allow that either.
        return if want & X != 0 && !o.is_dir() && o.mode & 0o111 == 0 {
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
        overridden(cred, o, want)
    }
}

/// What the capabilities allow a caller its mode class (or the access ACL) refused:
/// the end of Linux's `generic_permission`. CAP_DAC_READ_SEARCH reads a file and
/// reads or searches a directory; CAP_DAC_OVERRIDE does anything on a directory,
/// and reads and writes a file (executes it only when some x bit is set).
pub fn overridden(cred: &Cred, o: Owner, want: u32) -> Result<()> {
    let read_search = cred.has(cap::DAC_READ_SEARCH);
    let dac_override = cred.has(cap::DAC_OVERRIDE);
    let allowed = if o.is_dir() {
        (want & W == 0 && read_search) || dac_override
    } else {
        (want == R && read_search) || (dac_override && (want & X == 0 || o.mode & 0o111 != 0))
    };
    if allowed {
        Ok(())
    } else {
        Err(errno::EACCES)
    }
}

/// The owner, or a caller with CAP_FOWNER (Linux's `inode_owner_or_capable`: chmod,
/// utimes to a given time, O_NOATIME, ACLs, inode flags).
pub fn owner_or_root(cred: &Cred, o: Owner) -> Result<()> {
    if cred.has(cap::FOWNER) || cred.uid == o.uid {
        Ok(())
    } else {
        Err(errno::EPERM)
    }
}

/// In a sticky directory only the file's owner, the directory's owner or a caller
/// with CAP_FOWNER may remove or rename an entry.
pub fn sticky_ok(cred: &Cred, dir: Owner, victim: Owner) -> Result<()> {
    if dir.mode & libc::S_ISVTX == 0
        || cred.has(cap::FOWNER)
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
        // for a caller with CAP_DAC_OVERRIDE, which needs no owner.
        let word = self.load(ino, inode::MODE);
        // Even root may not write to an immutable file, or in an immutable directory.
        if want & W != 0 && (word >> 32) as u32 & IMMUTABLE != 0 {
            return Err(errno::EPERM);
        }
        let mode = word as u32;
        if cred.has(cap::DAC_OVERRIDE) {
            let o = Owner {
                mode,
                uid: 0,
                gid: 0,
            };
            return check(cred, o, want);
        }
        let (uid, gid) = inode::owner_split(self.load(ino, inode::OWNER));
        let o = Owner { mode, uid, gid };
        // Only a caller other than the owner, of a file whose mode has group bits and
        // which has attributes at all, can be decided by an ACL.
        let acl_may_apply =
            cred.uid != o.uid && o.mode & 0o070 != 0 && self.load(ino, inode::XATTR) != 0;
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

    fn without(c: &Cred, caps: &[u32]) -> Cred {
        let mut c = c.clone();
        for &k in caps {
            c.caps &= !(1 << k);
        }
        c
    }

    #[test]
    fn root_without_dac_override_is_checked_by_the_mode() {
        let r = without(&Cred::root(), &[cap::DAC_OVERRIDE, cap::DAC_READ_SEARCH]);
        assert!(check(&r, f(0o600, 5, 5), R).is_err());
        assert!(check(&r, f(0o604, 5, 5), R).is_ok());
        let d = Owner {
            mode: libc::S_IFDIR | 0o700,
            uid: 5,
            gid: 5,
        };
        assert!(check(&r, d, X).is_err());
    }

    #[test]
    fn dac_read_search_reads_and_searches_but_never_writes() {
        let mut u = Cred::user(1000, 100);
        u.caps = 1 << cap::DAC_READ_SEARCH;
        assert!(check(&u, f(0o000, 5, 5), R).is_ok());
        assert!(check(&u, f(0o000, 5, 5), W).is_err());
        assert!(check(&u, f(0o000, 5, 5), R | X).is_err());
        let d = Owner {
            mode: libc::S_IFDIR,
            uid: 5,
            gid: 5,
        };
        assert!(check(&u, d, R | X).is_ok());
        assert!(check(&u, d, W | X).is_err());
    }

    #[test]
    fn fowner_is_what_lets_a_non_owner_act_as_the_owner() {
        let o = f(0o644, 5, 5);
        let r = without(&Cred::root(), &[cap::FOWNER]);
        assert!(owner_or_root(&r, o).is_err());
        assert!(owner_or_root(&Cred::root(), o).is_ok());
        let sticky = Owner {
            mode: libc::S_IFDIR | libc::S_ISVTX | 0o777,
            uid: 6,
            gid: 6,
        };
        assert!(sticky_ok(&r, sticky, o).is_err());
        assert!(sticky_ok(&Cred::root(), sticky, o).is_ok());
    }
}
