//! Path calls that read or change what a name leads to: readlink, stat, chmod, chown,
//! utimens, truncate, readdir, statfs and extended attributes.

use crate::error::Result;
use crate::meta::{DirEntry, SetAttr, Stat, StatFs, TimeSet};
use crate::pmem::Backend;

use super::Session;

impl<'a, B: Backend> Session<'a, B> {
    pub fn readlink(&self, p: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        self.on_resolved(p.as_ref(), false, |ino| self.ns().readlink(ino))
    }

    pub fn stat(&self, p: impl AsRef<[u8]>) -> Result<Stat> {
        self.stat_named(p.as_ref(), true)
    }

    pub fn lstat(&self, p: impl AsRef<[u8]>) -> Result<Stat> {
        self.stat_named(p.as_ref(), false)
    }

    pub fn chmod(&self, p: impl AsRef<[u8]>, mode: u32) -> Result<()> {
        let ino = self.resolve_held(p.as_ref(), true)?;
        let a = SetAttr {
            mode: Some(mode),
            ..Default::default()
        };
        self.ns().set_attrs(ino.ino, &a, &self.cred)
    }

    /// chown; `None` leaves that id alone (-1 in C).
    pub fn chown(&self, p: impl AsRef<[u8]>, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        let ino = self.resolve_held(p.as_ref(), true)?;
        let a = SetAttr {
            uid,
            gid,
            ..Default::default()
        };
        self.ns().set_attrs(ino.ino, &a, &self.cred)
    }

    pub fn utimens(
        &self,
        p: impl AsRef<[u8]>,
        atime: Option<TimeSet>,
        mtime: Option<TimeSet>,
    ) -> Result<()> {
        let ino = self.resolve_held(p.as_ref(), true)?;
        let a = SetAttr {
            atime,
            mtime,
            ..Default::default()
        };
        self.ns().set_attrs(ino.ino, &a, &self.cred)
    }

    pub fn truncate(&self, p: impl AsRef<[u8]>, len: u64) -> Result<()> {
        let ino = self.resolve_held(p.as_ref(), true)?;
        self.fs.truncate_as(ino.ino, len, &self.cred)
    }

    /// All entries of a directory, "." and ".." included.
    pub fn readdir(&self, p: impl AsRef<[u8]>) -> Result<Vec<DirEntry>> {
        self.on_resolved(p.as_ref(), true, |ino| {
            let mut out = Vec::new();
            let mut off = 0;
            loop {
                let batch = self.ns().readdir(ino, off, 256, &self.cred)?;
                let Some(last) = batch.last() else { break };
                off = last.next;
                out.extend(batch);
            }
            Ok(out)
        })
    }

    pub fn statfs(&self) -> StatFs {
        self.ns().statfs()
    }

    // ---- extended attributes (POSIX ACLs among them: `system.posix_acl_*`) ----

    pub fn getxattr(&self, p: impl AsRef<[u8]>, name: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        self.on_resolved(p.as_ref(), true, |ino| {
            self.ns().getxattr(ino, name.as_ref(), &self.cred)
        })
    }

    pub fn setxattr(
        &self,
        p: impl AsRef<[u8]>,
        name: impl AsRef<[u8]>,
        value: &[u8],
        flags: i32,
    ) -> Result<()> {
        let ino = self.resolve_held(p.as_ref(), true)?;
        self.ns()
            .setxattr(ino.ino, name.as_ref(), value, flags, &self.cred)
    }

    pub fn listxattr(&self, p: impl AsRef<[u8]>) -> Result<Vec<Vec<u8>>> {
        self.on_resolved(p.as_ref(), true, |ino| self.ns().listxattr(ino, &self.cred))
    }

    pub fn removexattr(&self, p: impl AsRef<[u8]>, name: impl AsRef<[u8]>) -> Result<()> {
        let ino = self.resolve_held(p.as_ref(), true)?;
        self.ns().removexattr(ino.ino, name.as_ref(), &self.cred)
    }
}
