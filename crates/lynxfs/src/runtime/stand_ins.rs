//! Where the kernel keeps the locks on pool files (`fcntl` record locks, OFD locks,
//! `flock`): one empty stand-in file per locked pool inode, in `locks/<ino>` of the
//! pool's session directory (beside its runtime state, `state.run`). A lock on a
//! pool file is the same lock on its stand-in, taken by whoever serves the call: a
//! preloaded process on its own open of the stand-in, the FUSE daemon on an open per
//! lock owner. So every path to the pool (the preload, a mount, any number of mounts)
//! meets the same kernel locks, and the kernel gives POSIX's semantics, deadlock
//! detection and release when a holder dies.
//!
//! The directory is what the runtime file is: made by an attacher (under the
//! transition lock) inside the session directory, which only this user can enter,
//! removed by the last detacher, and trusted only when it is a real directory owned
//! by this process's user with mode exactly 0700, checked on the descriptor every
//! stand-in is opened through (never by path again). Inside it nobody else can create
//! or open anything. Every attacher has the same user (the runtime file is refused to
//! any other), so all of them open the same stand-ins.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, ErrorKind};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The mode the directory is made with and must have.
const MODE: u32 = 0o700;

/// The stand-in directory of one pool, open.
pub struct StandIns {
    dir: File,
    path: PathBuf,
}

impl StandIns {
    /// The directory in the session directory `session`.
    pub fn path_for(session: &Path) -> PathBuf {
        session.join("locks")
    }

    /// Open the directory in the session directory `session`, making it if it is
    /// missing. Called under the pool's transition lock.
    pub fn open_or_make(session: &Path, pool_path: &Path) -> Result<StandIns> {
        let path = Self::path_for(session);
        let made = make_dir(&path)?;
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(refused(&path, pool_path, "it is a symbolic link"));
        }
        // O_NOFOLLOW and the check on the open directory close the gap since.
        let dir = File::options()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| refused(&path, pool_path, &format!("it cannot be opened ({e})")))?;
        let meta = dir.metadata().map_err(|e| Error::io(&path, e))?;
        if made && meta.uid() == euid() && meta.mode() & 0o7777 != MODE {
            // The umask took bits from the mode asked for.
            fchmod(&dir, MODE).map_err(|e| Error::io(&path, e))?;
        }
        let meta = dir.metadata().map_err(|e| Error::io(&path, e))?;
        check_ours(&meta).map_err(|why| refused(&path, pool_path, &why))?;
        Ok(StandIns {
            dir: super::out_of_the_way(dir),
            path,
        })
    }

    /// Where the directory is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where `ino`'s stand-in is (to recognise an fd of it without opening another:
    /// a process's close of any fd of a file drops its record locks on the file).
    pub fn path_of(&self, ino: u64) -> PathBuf {
        self.path.join(ino.to_string())
    }

    /// A new open file description of `ino`'s stand-in (made if missing), read-write
    /// so that it takes read and write locks alike, close-on-exec.
    pub fn open(&self, ino: u64) -> io::Result<OwnedFd> {
        let name = CString::new(ino.to_string()).map_err(io::Error::other)?;
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: openat on our directory descriptor with a NUL-terminated name.
        let fd = unsafe { libc::openat(self.dir.as_raw_fd(), name.as_ptr(), flags, 0o600) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor openat just made, owned by nothing else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Remove the directory and its stand-ins (the last detacher: no process is
    /// attached, so nobody holds a lock on them). Only a directory still at the path
    /// is removed when it is the one opened.
    pub fn remove(self) -> Result<()> {
        let io = |e| Error::io(&self.path, e);
        let entries = match std::fs::read_dir(format!("/proc/self/fd/{}", self.dir.as_raw_fd())) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(e)),
        };
        for e in entries {
            let name = CString::new(e.map_err(io)?.file_name().as_bytes()).map_err(|_| {
                Error::Invalid(format!("{}: a name with a NUL", self.path.display()))
            })?;
            // SAFETY: unlinkat on our directory descriptor with a NUL-terminated name.
            if unsafe { libc::unlinkat(self.dir.as_raw_fd(), name.as_ptr(), 0) } != 0 {
                let e = io::Error::last_os_error();
                if e.kind() != ErrorKind::NotFound {
                    return Err(io(e));
                }
            }
        }
        let opened = self.dir.metadata().map_err(io)?;
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == (opened.dev(), opened.ino()) => {
                std::fs::remove_dir(&self.path).map_err(io)
            }
            Ok(_) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(e)),
        }
    }
}

/// Make the directory; false if something is at the path already.
fn make_dir(path: &Path) -> Result<bool> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid(format!("{}: a NUL in the path", path.display())))?;
    // SAFETY: mkdir reads a NUL-terminated path that outlives the call.
    if unsafe { libc::mkdir(c.as_ptr(), MODE) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.kind() == ErrorKind::AlreadyExists {
        Ok(false)
    } else {
        Err(Error::io(path, e))
    }
}

fn fchmod(f: &File, mode: u32) -> io::Result<()> {
    // SAFETY: fchmod on a descriptor we own.
    if unsafe { libc::fchmod(f.as_raw_fd(), mode) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Why a directory another user could have made, or could reach into, is refused.
fn check_ours(meta: &std::fs::Metadata) -> std::result::Result<(), String> {
    let uid = euid();
    if !meta.is_dir() {
        Err("it is not a directory".into())
    } else if meta.uid() != uid {
        Err(format!(
            "it is owned by uid {}, not by this process's user (uid {uid})",
            meta.uid()
        ))
    } else if meta.mode() & 0o7777 != MODE {
        Err(format!(
            "its mode is {:04o}, not {MODE:04o} (another user could reach its locks)",
            meta.mode() & 0o7777
        ))
    } else {
        Ok(())
    }
}

fn refused(path: &Path, pool_path: &Path, why: &str) -> Error {
    Error::Runtime {
        path: path.to_path_buf(),
        what: format!(
            "refusing the lock directory of pool {}: {why}; remove it if no process has the \
             pool attached",
            pool_path.display()
        ),
        errno: libc::EACCES,
    }
}
