//! Extended attributes on the namespace: Linux's access rules per name prefix, POSIX
//! ACLs (`system.posix_acl_access` kept in step with the mode, `system.posix_acl_default`
//! on directories only).
//!
//! Locking: an attribute change holds the inode's cachelet lock (as every xattr
//! writer does), then the inode lock (as chmod does), so a chmod and an ACL change
//! of one inode are ordered and each sees the other's mode and ACL.

use crate::alloc::within_reserve_of;
use crate::data::xattr;
use crate::error::{errno, Result};
use crate::format::inode;
use crate::pmem::Backend;

use super::acl::{self, Acl};
use super::perm::{self, cap, Cred};
use super::{is_dir, Namespace};

/// The file capabilities exec grants (`setcap`).
pub const CAPABILITY: &[u8] = b"security.capability";

fn is_acl(name: &[u8]) -> bool {
    name == acl::ACCESS || name == acl::DEFAULT
}

impl<B: Backend> Namespace<B> {
    /// The ACL stored under `name` (`None` when there is none); a stored value that
    /// does not parse is damage (EIO).
    pub fn stored_acl(&self, ino: u64, name: &[u8]) -> Result<Option<Acl>> {
        // No attribute set, no ACL: every create asks its parent for a default one.
        if self.load(ino, inode::XATTR) == 0 {
            return Ok(None);
        }
        match xattr::get(&self.pool, &self.xattr_indexes, ino, name) {
            Ok(v) => Acl::parse(&v).map_err(|_| errno::EIO),
            Err(e) if e.errno() == libc::ENODATA => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Linux's xattr rules: a known namespace prefix; `user.` only on regular files
    /// and directories, by file permission; `trusted.` for root only; `security.` and
    /// `system.` readable by all, writable by root only (the ACL names by the owner
    /// too, see [`Namespace::setxattr`]).
    pub fn xattr_access(&self, ino: u64, name: &[u8], cred: &Cred, want: u32) -> Result<()> {
        self.live(ino)?;
        let o = self.owner(ino);
        if name.len() > xattr::NAME_MAX || name.is_empty() {
            return Err(errno::ERANGE);
        }
        let refused = if want == perm::R {
            errno::ENODATA
        } else {
            errno::EPERM
        };
        if name.starts_with(b"user.") {
            let kind = o.mode & libc::S_IFMT;
            if kind != libc::S_IFREG && kind != libc::S_IFDIR {
                return Err(refused);
            }
            if name.len() == 5 {
                return Err(errno::EINVAL);
            }
            self.may(ino, cred, want)
        } else if name.starts_with(b"trusted.") {
            if cred.has(cap::SYS_ADMIN) {
                Ok(())
            } else {
                Err(refused)
            }
        } else if name.starts_with(b"security.") || name.starts_with(b"system.") {
            if want == perm::R || cred.has(cap::SYS_ADMIN) {
                Ok(())
            } else {
                Err(errno::EPERM)
            }
        } else {
            Err(errno::EOPNOTSUPP)
        }
    }

    pub fn getxattr(&self, ino: u64, name: &[u8], cred: &Cred) -> Result<Vec<u8>> {
        self.xattr_access(ino, name, cred, perm::R)?;
        xattr::get(&self.pool, &self.xattr_indexes, ino, name)
    }

    /// The names the caller may see (not `trusted.*` unless root, as on Linux).
    pub fn listxattr(&self, ino: u64, cred: &Cred) -> Result<Vec<Vec<u8>>> {
        self.live(ino)?;
        let names = xattr::list(&self.pool, ino)?;
        Ok(names
            .into_iter()
            .filter(|n| cred.has(cap::SYS_ADMIN) || !n.starts_with(b"trusted."))
            .collect())
    }

    /// setxattr(2); the ACL names go through [`Namespace::set_acl`].
    pub fn setxattr(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: i32,
        cred: &Cred,
    ) -> Result<()> {
        within_reserve_of(cred.has(cap::SYS_RESOURCE), || {
            self.setxattr_op(ino, name, value, flags, cred)
        })
    }

    fn setxattr_op(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: i32,
        cred: &Cred,
    ) -> Result<()> {
        self.op(|| {
            self.may_change(ino)?;
            if is_acl(name) {
                if flags & !(xattr::CREATE | xattr::REPLACE) != 0 {
                    return Err(errno::EINVAL);
                }
                return self.set_acl(ino, name, value, cred);
            }
            self.xattr_access(ino, name, cred, perm::W)?;
            let _w = self.cachelets.get(ino).write(self.watch())?;
            self.live(ino)?;
            xattr::set(
                &self.pool,
                &self.xattr_indexes,
                ino,
                self.lane(),
                name,
                value,
                flags,
            )?;
            self.notices.attrs(ino);
            Ok(())
        })
    }

    /// Removes `security.capability` before a change of `ino`'s data or size, by anyone
    /// (root too), as Linux's `file_remove_privs` does: a program changed after its
    /// capabilities were granted must not keep them.
    pub(crate) fn drop_capability(&self, ino: u64) -> Result<()> {
        if self.load(ino, inode::XATTR) == 0 {
            return Ok(());
        }
        let _w = self.cachelets.get(ino).write(self.watch())?;
        match xattr::remove(
            &self.pool,
            &self.xattr_indexes,
            ino,
            self.lane(),
            CAPABILITY,
        ) {
            Ok(()) => {
                self.notices.attrs(ino);
                Ok(())
            }
            Err(e) if e.errno() == libc::ENODATA => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// removexattr(2); removing an ACL that is not there succeeds, as on ext4.
    pub fn removexattr(&self, ino: u64, name: &[u8], cred: &Cred) -> Result<()> {
        self.op(|| {
            self.may_change(ino)?;
            if is_acl(name) {
                return self.set_acl(ino, name, &[], cred);
            }
            self.xattr_access(ino, name, cred, perm::W)?;
            let _w = self.cachelets.get(ino).write(self.watch())?;
            self.live(ino)?;
            xattr::remove(&self.pool, &self.xattr_indexes, ino, self.lane(), name)?;
            self.notices.attrs(ino);
            Ok(())
        })
    }

    /// Sets (or, with an empty value, removes) the access or default ACL of `ino`, as
    /// Linux's `set_posix_acl`: the owner or root only; the value validated first; a
    /// default ACL on directories only. An access ACL sets the mode's permission bits
    /// (the group bits from the mask), and one a mode can say is not stored
    /// (`posix_acl_update_mode`); a caller outside the file's group (not root) also
    /// clears set-group-ID. The attribute and the mode change in one transaction.
    pub fn set_acl(&self, ino: u64, name: &[u8], value: &[u8], cred: &Cred) -> Result<()> {
        self.op(|| {
            self.live(ino)?;
            let o = self.owner(ino);
            // A directory's ACL decides who may search it (see `setattr`).
            let _areas = is_dir(o.mode).then(|| self.areas.changing());
            if o.mode & libc::S_IFMT == libc::S_IFLNK {
                return Err(errno::EOPNOTSUPP);
            }
            perm::owner_or_root(cred, o)?;
            let acl = Acl::parse(value)?;
            if name == acl::DEFAULT && !is_dir(o.mode) {
                return if acl.is_some() {
                    Err(errno::EACCES)
                } else {
                    Ok(())
                };
            }
            let _w = self.cachelets.get(ino).write(self.watch())?;
            let _g = self.ilock(ino)?;
            self.live(ino)?;
            let o = self.owner(ino);
            let mut words = Vec::new();
            let keep = match acl {
                Some(acl) if name == acl::ACCESS => {
                    let mut mode = (o.mode & !0o777) | acl.mode_bits();
                    if !cred.in_group_or_fsetid(o.gid) {
                        mode &= !libc::S_ISGID;
                    }
                    let word = super::flags::mode_word(mode, self.inode_flags(ino));
                    words.push((self.iaddr(ino) + inode::MODE, word));
                    acl.is_extended().then_some(acl)
                }
                acl => acl,
            };
            let mut attrs = xattr::load(&self.pool, ino)?;
            let had = attrs.iter().any(|(n, _)| n == name);
            attrs.retain(|(n, _)| n != name);
            if let Some(acl) = &keep {
                xattr::put(&mut attrs, name, &acl.encode(), 0)?;
            } else if !had && words.is_empty() {
                return Ok(());
            }
            xattr::store_with(&self.pool, ino, self.lane(), &attrs, &words)?;
            self.notices.attrs(ino);
            Ok(())
        })
    }

    /// The access ACL after a chmod to `mode` (the mask takes the group bits), as the
    /// attribute block to publish with the new mode; `None` when `ino` has none.
    pub(crate) fn chmod_acl(&self, ino: u64, mode: u32) -> Result<Option<xattr::Attrs>> {
        let Some(mut acl) = self.stored_acl(ino, acl::ACCESS)? else {
            return Ok(None);
        };
        acl.chmod(mode);
        let mut attrs = xattr::load(&self.pool, ino)?;
        xattr::put(&mut attrs, acl::ACCESS, &acl.encode(), xattr::REPLACE)?;
        Ok(Some(attrs))
    }

    /// The attributes a new inode of `mode` gets from `parent`'s default ACL, and the
    /// mode it gets: the default masked by the mode as its access ACL (kept only if a
    /// mode cannot say it), and, for a directory, the default as its own default.
    /// `None` when the parent has no default ACL or the new inode is a symlink.
    pub(crate) fn inherited_acls(
        &self,
        parent: u64,
        mode: u32,
    ) -> Result<Option<(xattr::Attrs, u32)>> {
        if mode & libc::S_IFMT == libc::S_IFLNK {
            return Ok(None);
        }
        let Some(default) = self.stored_acl(parent, acl::DEFAULT)? else {
            return Ok(None);
        };
        let (access, mode) = default.for_new_inode(mode);
        let mut attrs = xattr::Attrs::new();
        if access.is_extended() {
            attrs.push((acl::ACCESS.to_vec(), access.encode()));
        }
        if is_dir(mode) {
            attrs.push((acl::DEFAULT.to_vec(), default.encode()));
        }
        Ok(Some((attrs, mode)))
    }
}
