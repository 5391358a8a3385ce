//! Path calls that make and remove names: mkdir, mknod, symlink, open (O_CREAT and
//! O_TMPFILE among its forms), unlink, rmdir, rename and link.

use crate::error::{errno, Result};
use crate::meta::index::State;
use crate::meta::{is_dir, NewNode, RenameFlags};
use crate::pmem::Backend;

use super::{nodes, path, Fd, Opened, Session};

impl<'a, B: Backend> Session<'a, B> {
    fn make(&self, p: &[u8], node: NewNode<'_>, excl: bool) -> Result<(u64, bool)> {
        let w = self.parent(p.as_ref())?;
        if w.name.is_empty() {
            return Err(errno::EEXIST);
        }
        if w.trailing_slash && !is_dir(node.mode) {
            return Err(if self.ns().lookup(w.parent, w.name, &self.cred).is_ok() {
                errno::EEXIST
            } else {
                errno::EISDIR
            });
        }
        self.ns().create(w.parent, w.name, node, &self.cred, excl)
    }

    pub fn mkdir(&self, p: impl AsRef<[u8]>, mode: u32) -> Result<()> {
        let node = nodes::dir(mode, self.umask);
        self.make(p.as_ref(), node, true).map(drop)
    }

    pub fn mknod(&self, p: impl AsRef<[u8]>, mode: u32, rdev: u64) -> Result<()> {
        let node = nodes::special(mode, rdev, self.umask, &self.cred)?;
        self.make(p.as_ref(), node, true).map(drop)
    }

    pub fn symlink(&self, target: impl AsRef<[u8]>, linkpath: impl AsRef<[u8]>) -> Result<()> {
        let node = nodes::symlink(target.as_ref());
        self.make(linkpath.as_ref(), node, true).map(drop)
    }

    /// open(2) with O_* flags; `mode` (less the umask) is used when O_CREAT creates
    /// the file.
    pub fn open(&self, p: impl AsRef<[u8]>, flags: i32, mode: u32) -> Result<Fd> {
        self.open_file(p, flags, mode).map(|o| o.fd)
    }

    /// [`Session::open`], answering with the handle, the inode and its mode.
    pub fn open_file(&self, p: impl AsRef<[u8]>, flags: i32, mode: u32) -> Result<Opened> {
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            return self.open_tmpfile(p.as_ref(), flags, mode);
        }
        // An existing file is held from its lookup to its open (see `resolve_held`);
        // a file this call creates is opened at once by the creator.
        if flags & libc::O_CREAT != 0 {
            return match self.open_create(p.as_ref(), flags, mode)? {
                // Made with its open reference (`Namespace::create_opened`).
                (ino, true) => self.fs.open_created(ino, flags, &self.cred),
                (ino, false) => self.fs.open_ino(ino, flags, &self.cred, false),
            };
        }
        let h = self.resolve_held(p.as_ref(), flags & libc::O_NOFOLLOW == 0)?;
        self.fs.open_ino(h.ino, flags, &self.cred, false)
    }

    /// open(2) with `O_TMPFILE`: a new unnamed file in directory `p` (see
    /// [`Fs::open_tmpfile`]). As Linux's build_open_flags, O_CREAT with it or no
    /// write access is EINVAL, before the path is looked at.
    fn open_tmpfile(&self, p: &[u8], flags: i32, mode: u32) -> Result<Opened> {
        if flags & libc::O_CREAT != 0 || flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(errno::EINVAL);
        }
        let dir = self.resolve_held(p, true)?;
        self.ns().directory(dir.ino)?;
        self.fs
            .open_tmpfile(dir.ino, (mode, self.umask), flags, &self.cred)
    }

    /// The file `p` names, created if missing: `(ino, true)` when this call made it,
    /// holding an open reference on it for the open.
    fn open_create(&self, p: &[u8], flags: i32, mode: u32) -> Result<(u64, bool)> {
        let excl = flags & libc::O_EXCL != 0;
        // A trailing symlink is followed and the create repeated at its target, so a
        // dangling symlink creates its target (Linux's open_last_lookups).
        // A symlink's target replaces the path only when one is followed: the first
        // walk borrows the caller's path.
        let (mut base, mut path) = (self.cwd, p);
        let mut target: Vec<u8>;
        let mut links = 0;
        loop {
            let w = path::walk_parent_ref_in(
                self.ns(),
                base,
                path,
                &self.cred,
                &mut links,
                self.scope,
            )?;
            // "." or "..": an existing directory (do_open checks O_EXCL first).
            if w.name.is_empty() && excl {
                return Err(errno::EEXIST);
            }
            if w.name.is_empty() || w.trailing_slash {
                return Err(errno::EISDIR);
            }
            let node = nodes::file(mode, self.umask);
            let (ino, created) = self
                .ns()
                .create_opened(w.parent, w.name, node, &self.cred, excl)?;
            if !created
                && self.ns().mode(ino) & libc::S_IFMT == libc::S_IFLNK
                && flags & libc::O_NOFOLLOW == 0
            {
                links += 1;
                if links > path::SYMLOOP_MAX {
                    return Err(errno::ELOOP);
                }
                base = w.parent;
                target = self.ns().readlink(ino)?;
                path = &target;
                continue;
            }
            return Ok((ino, created));
        }
    }

    pub fn create(&self, p: impl AsRef<[u8]>, mode: u32) -> Result<Fd> {
        self.open(p, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode)
    }

    pub fn unlink(&self, p: impl AsRef<[u8]>) -> Result<()> {
        let w = self.parent(p.as_ref())?;
        if w.name.is_empty() {
            return Err(errno::EISDIR);
        }
        if w.trailing_slash {
            let ino = self.ns().lookup(w.parent, w.name, &self.cred)?;
            return Err(if is_dir(self.ns().mode(ino)) {
                errno::EISDIR
            } else {
                errno::ENOTDIR
            });
        }
        self.ns().unlink(w.parent, w.name, &self.cred)
    }

    pub fn rmdir(&self, p: impl AsRef<[u8]>) -> Result<()> {
        let w = self.parent(p.as_ref())?;
        let last = p.as_ref().split(|&c| c == b'/').rfind(|c| !c.is_empty());
        match last {
            Some(b".") => return Err(errno::EINVAL),
            Some(b"..") => return Err(errno::ENOTEMPTY),
            None => return Err(errno::EBUSY),
            _ => {}
        }
        self.ns().rmdir(w.parent, w.name, &self.cred)
    }

    pub fn rename(&self, from: impl AsRef<[u8]>, to: impl AsRef<[u8]>, flags: u32) -> Result<()> {
        let flags = RenameFlags::from_bits(flags)?;
        let (from, to) = (from.as_ref(), to.as_ref());
        let s = self.parent(from)?;
        // Two names in one directory by one path: walked once.
        let d = match path::sibling(from, &s, to) {
            Some(d) => d,
            None => self.parent(to)?,
        };
        // As do_renameat2: a "." or ".." source is busy; such a target exists.
        if s.name.is_empty() || (d.name.is_empty() && !flags.noreplace) {
            return Err(errno::EBUSY);
        }
        if d.name.is_empty() {
            return Err(errno::EEXIST);
        }
        self.ns()
            .rename(s.parent, s.name, d.parent, d.name, flags, &self.cred)
    }

    pub fn link(&self, old: impl AsRef<[u8]>, new: impl AsRef<[u8]>) -> Result<()> {
        self.linkat(old, new, false)
    }

    /// linkat(2) by paths: with `follow` (AT_SYMLINK_FOLLOW) a symlink `old` gives
    /// its target the new name, else the symlink itself gets it.
    pub fn linkat(&self, old: impl AsRef<[u8]>, new: impl AsRef<[u8]>, follow: bool) -> Result<()> {
        let held = self.resolve_held(old.as_ref(), follow)?;
        self.link_ino(held.ino, new.as_ref())
    }

    /// linkat(fd, "", AT_FDCWD, new, AT_EMPTY_PATH): a name for the file open as
    /// `fd`, an `O_TMPFILE` file among them. One made with `O_EXCL`, or one whose last
    /// name went, gets none (ENOENT), as in Linux.
    pub fn link_fd(&self, fd: Fd, new: impl AsRef<[u8]>) -> Result<()> {
        // The open handle keeps the inode (and its number) for the call.
        self.link_ino(self.fs.fd_ino(fd)?, new.as_ref())
    }

    /// A new name `new` for inode `ino`, which the caller keeps alive.
    fn link_ino(&self, ino: u64, new: &[u8]) -> Result<()> {
        let w = self.parent(new)?;
        if w.name.is_empty() {
            return Err(errno::EEXIST);
        }
        // Linux checks the new name (filename_create) before the old inode's type. A
        // name whose removal is under way (perhaps past its commit point, gone for
        // readers) is left to `link`, which waits for its outcome (issue 42).
        if self.ns().lookup(w.parent, w.name, &self.cred).is_ok()
            && self
                .ns()
                .lookup_entry(w.parent, w.name)
                .is_some_and(|e| e.state == State::Ready)
        {
            return Err(errno::EEXIST);
        }
        self.ns().link(ino, w.parent, w.name, &self.cred)
    }
}
