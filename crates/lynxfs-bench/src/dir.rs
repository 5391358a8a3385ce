//! [`DirTarget`]: a kernel file system reached through system calls on a directory.

use std::collections::HashMap;
use std::ffi::{CStr, CString, OsString};
use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::target::{Handle, OpenFlags, Stat, Target};

/// Paths shorter than this are turned into C strings on the stack, so the timed loops
/// measure the system call and not the allocator.
const STACK_PATH: usize = 256;

/// A kernel file system, exercised with `*at(2)` system calls relative to a directory.
///
/// Every path is resolved from a descriptor of the root directory, so the kernel walks
/// only the components the suite asked for, as a program working in its current
/// directory would, whatever the depth of the root itself.
pub struct DirTarget {
    root: PathBuf,
    root_fd: OwnedFd,
    label: String,
    /// Open files by handle (the handle is the descriptor's number). Kept so `close`
    /// can refuse a handle this target did not issue, and so dropping the target closes
    /// whatever a failed suite left open.
    open: Mutex<HashMap<Handle, OwnedFd>>,
}

impl DirTarget {
    /// Benchmarks the existing directory `root`, labelled `label` in reports.
    pub fn new(root: impl Into<PathBuf>, label: impl Into<String>) -> io::Result<Self> {
        let root = root.into();
        let dir = File::open(&root).map_err(|e| with_path(e, "open directory", &root))?;
        let meta = dir.metadata().map_err(|e| with_path(e, "stat", &root))?;
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a directory", root.display()),
            ));
        }
        Ok(Self {
            root,
            root_fd: dir.into(),
            label: label.into(),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// The directory this target works in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn dirfd(&self) -> RawFd {
        self.root_fd.as_raw_fd()
    }

    fn fd(&self, handle: Handle) -> io::Result<RawFd> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.get(&handle)
            .map(AsRawFd::as_raw_fd)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))
    }
}

/// Adds what was being done and to which path to an error, keeping its kind.
pub(crate) fn with_path(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

/// Turns a `-1` return into the thread's `errno`.
fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Same as [`cvt`] for the `ssize_t` returns of `pread`/`pwrite`.
fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    usize::try_from(ret).map_err(|_| io::Error::last_os_error())
}

/// Calls `f` with `path` as a C string, on the stack when it is short.
///
/// Absolute paths are refused: the `*at` calls would ignore the root descriptor and
/// the suite would escape the directory under test.
fn with_cpath<R>(path: &Path, f: impl FnOnce(&CStr) -> io::Result<R>) -> io::Result<R> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.first() == Some(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: target paths must be relative", path.display()),
        ));
    }
    if bytes.len() < STACK_PATH {
        let mut buf = [0u8; STACK_PATH];
        buf[..bytes.len()].copy_from_slice(bytes);
        let c = CStr::from_bytes_with_nul(&buf[..=bytes.len()])
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
        f(c)
    } else {
        f(&CString::new(bytes)?)
    }
}

fn open_flags(flags: OpenFlags) -> libc::c_int {
    let access = match (flags.read, flags.write) {
        (true, true) => libc::O_RDWR,
        (false, true) => libc::O_WRONLY,
        _ => libc::O_RDONLY,
    };
    let mut bits = access | libc::O_CLOEXEC;
    if flags.create {
        bits |= libc::O_CREAT;
    }
    if flags.exclusive {
        bits |= libc::O_EXCL;
    }
    if flags.truncate {
        bits |= libc::O_TRUNC;
    }
    bits
}

fn offset(off: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

impl Target for DirTarget {
    fn name(&self) -> String {
        self.label.clone()
    }

    fn create(&self, path: &Path) -> io::Result<()> {
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC;
        let fd = with_cpath(path, |p| {
            // SAFETY: `p` is a NUL-terminated string that outlives the call; the mode
            // argument is what O_CREAT requires.
            cvt(unsafe { libc::openat(self.dirfd(), p.as_ptr(), flags, 0o644 as libc::c_uint) })
        })?;
        // SAFETY: `fd` was just returned by openat and is owned by nobody else.
        cvt(unsafe { libc::close(fd) }).map(drop)
    }

    fn stat(&self, path: &Path) -> io::Result<Stat> {
        let mut st = MaybeUninit::<libc::stat>::uninit();
        with_cpath(path, |p| {
            // SAFETY: `p` is NUL-terminated and `st` points to writable memory the size
            // of `struct stat`.
            cvt(unsafe {
                libc::fstatat(
                    self.dirfd(),
                    p.as_ptr(),
                    st.as_mut_ptr(),
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            })
        })?;
        // SAFETY: fstatat returned 0, so it filled in the whole struct.
        let st = unsafe { st.assume_init() };
        Ok(Stat {
            ino: st.st_ino,
            size: st.st_size as u64,
            is_dir: st.st_mode & libc::S_IFMT == libc::S_IFDIR,
        })
    }

    fn unlink(&self, path: &Path) -> io::Result<()> {
        with_cpath(path, |p| {
            // SAFETY: `p` is a NUL-terminated string that outlives the call.
            cvt(unsafe { libc::unlinkat(self.dirfd(), p.as_ptr(), 0) })
        })
        .map(drop)
    }

    fn mkdir(&self, path: &Path) -> io::Result<()> {
        with_cpath(path, |p| {
            // SAFETY: `p` is a NUL-terminated string that outlives the call.
            cvt(unsafe { libc::mkdirat(self.dirfd(), p.as_ptr(), 0o755) })
        })
        .map(drop)
    }

    fn rmdir(&self, path: &Path) -> io::Result<()> {
        with_cpath(path, |p| {
            // SAFETY: `p` is a NUL-terminated string that outlives the call.
            cvt(unsafe { libc::unlinkat(self.dirfd(), p.as_ptr(), libc::AT_REMOVEDIR) })
        })
        .map(drop)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        with_cpath(from, |f| {
            with_cpath(to, |t| {
                // SAFETY: both strings are NUL-terminated and outlive the call.
                cvt(unsafe { libc::renameat(self.dirfd(), f.as_ptr(), self.dirfd(), t.as_ptr()) })
            })
        })
        .map(drop)
    }

    fn open(&self, path: &Path, flags: OpenFlags) -> io::Result<Handle> {
        let bits = open_flags(flags);
        let fd = with_cpath(path, |p| {
            // SAFETY: `p` is NUL-terminated; the mode is only read with O_CREAT.
            cvt(unsafe { libc::openat(self.dirfd(), p.as_ptr(), bits, 0o644 as libc::c_uint) })
        })?;
        // SAFETY: `fd` was just returned by openat and nothing else owns it.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let handle = fd as Handle;
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(handle, owned);
        Ok(handle)
    }

    fn pwrite(&self, handle: Handle, buf: &[u8], off: u64) -> io::Result<usize> {
        let fd = self.fd(handle)?;
        // SAFETY: `buf` is valid for reads of `buf.len()` bytes for the whole call.
        cvt_size(unsafe { libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), offset(off)?) })
    }

    fn pread(&self, handle: Handle, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let fd = self.fd(handle)?;
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the whole call.
        cvt_size(unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), offset(off)?) })
    }

    fn close(&self, handle: Handle) -> io::Result<()> {
        let owned = self
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&handle)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        let fd = owned.into_raw_fd();
        // SAFETY: we took `fd` out of its OwnedFd, so this is its only close; closing
        // by hand (rather than dropping) is how close(2)'s error gets reported.
        cvt(unsafe { libc::close(fd) }).map(drop)
    }

    fn readdir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        if path.is_absolute() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: target paths must be relative", path.display()),
            ));
        }
        let dir = self.root.join(path);
        std::fs::read_dir(&dir)
            .and_then(|it| it.map(|e| e.map(|e| e.file_name())).collect())
            .map_err(|e| with_path(e, "readdir", &dir))
    }

    fn fsync(&self, handle: Handle) -> io::Result<()> {
        let fd = self.fd(handle)?;
        // SAFETY: fsync only takes a descriptor, which `fd` is (checked above).
        cvt(unsafe { libc::fsync(fd) }).map(drop)
    }

    fn host_dir(&self) -> Option<&Path> {
        Some(&self.root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> (tempfile::TempDir, DirTarget) {
        let dir = tempfile::tempdir().unwrap();
        let t = DirTarget::new(dir.path(), "tmp").unwrap();
        (dir, t)
    }

    #[test]
    fn data_written_is_read_back_and_stat_sees_it() {
        let (_dir, t) = target();
        let h = t.open(Path::new("f"), OpenFlags::CREATE_TRUNCATE).unwrap();
        assert_eq!(t.pwrite(h, b"hello", 3).unwrap(), 5);
        let mut buf = [0u8; 8];
        assert_eq!(t.pread(h, &mut buf, 0).unwrap(), 8);
        assert_eq!(&buf, b"\0\0\0hello");
        t.close(h).unwrap();
        let st = t.stat(Path::new("f")).unwrap();
        assert_eq!((st.size, st.is_dir), (8, false));
    }

    #[test]
    fn metadata_calls_behave_like_the_system_calls() {
        let (dir, t) = target();
        t.mkdir(Path::new("a")).unwrap();
        assert!(t.stat(Path::new("a")).unwrap().is_dir);
        t.create(Path::new("a/f")).unwrap();
        let exists = t.create(Path::new("a/f")).unwrap_err();
        assert_eq!(exists.kind(), io::ErrorKind::AlreadyExists);
        t.rename(Path::new("a/f"), Path::new("g")).unwrap();
        assert!(dir.path().join("g").is_file());
        let mut names = t.readdir(Path::new("")).unwrap();
        names.sort();
        assert_eq!(names, ["a", "g"]);
        assert!(t.readdir(Path::new("a")).unwrap().is_empty());
        t.unlink(Path::new("g")).unwrap();
        t.rmdir(Path::new("a")).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn refuses_absolute_paths_and_unknown_handles() {
        let (_dir, t) = target();
        let abs = t.create(Path::new("/tmp/escape")).unwrap_err();
        assert_eq!(abs.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            t.close(12345).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
        let h = t.open(Path::new("f"), OpenFlags::CREATE_TRUNCATE).unwrap();
        t.close(h).unwrap();
        assert_eq!(
            t.pwrite(h, b"x", 0).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
    }

    #[test]
    fn long_paths_take_the_heap_route() {
        let (_dir, t) = target();
        let name = "n".repeat(STACK_PATH + 10);
        // Longer than NAME_MAX, so the kernel refuses it: what matters is that the
        // error comes from the kernel, not from the path conversion.
        let err = t.create(Path::new(&name)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG));
    }
}
