//! `lynxfs_t`: an attached pool and one caller (credentials, working directory), with
//! the table of the small integer file descriptors it hands out.

use std::borrow::Cow;
use std::ffi::c_int;

use engine::pmem::PmemBackend;
use engine::{Cred, Fd, Fs, Opened, Session};
use parking_lot::RwLock;

use crate::edge::{Errno, R};

/// The most descriptors one handle may have open at once (they are 0..MAX_FDS).
pub const MAX_FDS: usize = 1 << 20;

/// `lynxfs_at_fdcwd`: an *at call's directory is the working directory.
pub const AT_FDCWD: c_int = libc::AT_FDCWD;

/// The handle behind a `lynxfs_t *`.
pub struct Lynx {
    /// Leaked from a `Box` by [`Lynx::new`] so that sessions may borrow it for the
    /// handle's life; taken back by [`Lynx::detach`].
    fs: &'static Fs<PmemBackend>,
    cred: Cred,
    /// The caller's session: path calls share it (read), chdir changes it (write).
    session: RwLock<Session<'static, PmemBackend>>,
    fds: RwLock<FdTable>,
}

impl Lynx {
    /// A handle on `fs` for a caller with `cred`, working in the root directory.
    pub(crate) fn new(fs: Fs<PmemBackend>, cred: Cred) -> Lynx {
        let fs: &'static Fs<PmemBackend> = Box::leak(Box::new(fs));
        Lynx {
            fs,
            session: RwLock::new(fs.session(cred.clone())),
            cred,
            fds: RwLock::new(FdTable::default()),
        }
    }

    pub(crate) fn fs(&self) -> &'static Fs<PmemBackend> {
        self.fs
    }

    pub(crate) fn cred(&self) -> &Cred {
        &self.cred
    }

    /// Runs `f` with the caller's session.
    pub(crate) fn session<T>(
        &self,
        f: impl FnOnce(&Session<'static, PmemBackend>) -> R<T>,
    ) -> R<T> {
        f(&self.session.read())
    }

    /// Runs `f` with the caller's session, which it may change (chdir).
    pub(crate) fn session_mut<T>(
        &self,
        f: impl FnOnce(&mut Session<'static, PmemBackend>) -> R<T>,
    ) -> R<T> {
        f(&mut self.session.write())
    }

    /// The directory inode behind descriptor `dirfd` (ENOTDIR for a file).
    pub(crate) fn dir_of(&self, dirfd: c_int) -> R<u64> {
        let o = self.opened(dirfd)?;
        if o.mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(Errno(libc::ENOTDIR));
        }
        Ok(o.ino)
    }

    /// Runs `f` with the caller's session positioned for an *at call on `dirfd`: as it
    /// is for [`AT_FDCWD`], else at that directory (held open by the descriptor).
    pub(crate) fn session_at<T>(
        &self,
        dirfd: c_int,
        f: impl FnOnce(&Session<'static, PmemBackend>) -> R<T>,
    ) -> R<T> {
        if dirfd == AT_FDCWD {
            return self.session(f);
        }
        let dir = self.dir_of(dirfd)?;
        f(&self.session.read().at(dir))
    }

    /// `path` for a call naming two paths, each from its own directory: as it is for
    /// [`AT_FDCWD`] or an absolute path, else prefixed with the directory's path (a
    /// rename of that directory between the two steps is not seen).
    pub(crate) fn at_path<'p>(&self, dirfd: c_int, path: &'p [u8]) -> R<Cow<'p, [u8]>> {
        if dirfd == AT_FDCWD || path.starts_with(b"/") {
            return Ok(Cow::Borrowed(path));
        }
        let mut full = self.fs.path_of(self.dir_of(dirfd)?)?;
        if !full.ends_with(b"/") {
            full.push(b'/');
        }
        full.extend_from_slice(path);
        Ok(Cow::Owned(full))
    }

    /// The engine's handle behind descriptor `fd`.
    pub(crate) fn fd(&self, fd: c_int) -> R<Fd> {
        self.opened(fd).map(|o| o.fd)
    }

    /// The engine's open behind descriptor `fd`: its handle, inode and mode.
    pub(crate) fn opened(&self, fd: c_int) -> R<Opened> {
        self.fds.read().get(fd)
    }

    /// A descriptor for the engine's open `o`, which it now owns (closed on EMFILE).
    pub(crate) fn install(&self, o: Opened) -> R<c_int> {
        let n = self.fds.write().insert(o);
        if n.is_err() {
            // Nothing refers to the engine's handle yet: closing it cannot race.
            let _ = self.fs.close_fd(o.fd);
        }
        n
    }

    /// Closes descriptor `fd`.
    pub(crate) fn close(&self, fd: c_int) -> R<()> {
        let o = self.fds.write().remove(fd)?;
        Ok(self.fs.close_fd(o.fd)?)
    }

    /// Detaches from the pool: the session's hold on its directory goes, the engine
    /// closes every open file and leaves the pool, and the `Fs` is freed.
    pub(crate) fn detach(self) -> R<()> {
        let Lynx { fs, session, .. } = self;
        drop(session);
        let closed = fs.close();
        let fs = fs as *const Fs<PmemBackend> as *mut Fs<PmemBackend>;
        // SAFETY: `fs` came from `Box::leak` in `new`, and the only borrows of it (the
        // session, the handle itself) are gone: the box is taken back exactly once.
        drop(unsafe { Box::from_raw(fs) });
        Ok(closed?)
    }
}

/// Descriptor numbers: the lowest free one is handed out, as POSIX does.
#[derive(Default)]
struct FdTable {
    slots: Vec<Option<Opened>>,
}

impl FdTable {
    fn slot(n: c_int) -> R<usize> {
        usize::try_from(n).map_err(|_| Errno(libc::EBADF))
    }

    fn get(&self, n: c_int) -> R<Opened> {
        let s = Self::slot(n)?;
        self.slots
            .get(s)
            .copied()
            .flatten()
            .ok_or(Errno(libc::EBADF))
    }

    fn insert(&mut self, o: Opened) -> R<c_int> {
        let s = match self.slots.iter().position(Option::is_none) {
            Some(s) => s,
            None if self.slots.len() < MAX_FDS => {
                self.slots.push(None);
                self.slots.len() - 1
            }
            None => return Err(Errno(libc::EMFILE)),
        };
        self.slots[s] = Some(o);
        c_int::try_from(s).map_err(|_| Errno(libc::EMFILE))
    }

    fn remove(&mut self, n: c_int) -> R<Opened> {
        let s = Self::slot(n)?;
        let fd = self
            .slots
            .get_mut(s)
            .and_then(Option::take)
            .ok_or(Errno(libc::EBADF))?;
        while self.slots.last() == Some(&None) {
            self.slots.pop();
        }
        Ok(fd)
    }
}
