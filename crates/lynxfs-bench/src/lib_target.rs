//! [`LibTarget`]: the LynxFS engine called in process, on a fresh pool in `/dev/shm`.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fd, Fs, MkfsOptions, Pool, Session};

use crate::mount::SHM;
use crate::target::{Handle, OpenFlags, Stat, Target};

/// The label of [`LibTarget`] columns.
pub const LIB_NAME: &str = "lynxfs";

/// A LynxFS pool driven through the library API (`Fs` and `Session`), with the real
/// persistence backend (cache-line flushes and fences on a `/dev/shm` mapping).
///
/// The suites' relative paths (`"d1/f0"`) resolve from the root directory, which is
/// the session's working directory, so `d1/f0` is `/d1/f0` in the pool. The pool file
/// is made fresh by [`LibTarget::create`] and removed when the target is dropped
/// (after a clean close); [`LibTarget::attach`] attaches an existing pool instead.
pub struct LibTarget {
    // Field order is drop order: the pool closes (cleanly) before the file goes.
    fs: Fs<PmemBackend>,
    /// Handles this target opened and has not closed: `close` refuses others, and a
    /// suite that fails half-way does not leave them open (dropping closes them).
    open: Mutex<HashSet<Fd>>,
    path: PathBuf,
    /// The pool file when this target made it (and removes it); `None` when attached.
    _pool_file: Option<PoolFile>,
    label: String,
}

/// What [`LibTarget::attach_timed`] measured.
#[derive(Clone, Copy, Debug)]
pub struct AttachTimes {
    /// `Fs::open`.
    pub attach: Duration,
    /// `Pool::populate` after it.
    pub populate: Duration,
}

/// Removes the pool file when dropped.
pub(crate) struct PoolFile(pub(crate) PathBuf);

impl Drop for PoolFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl LibTarget {
    /// Default pool size: room for the data suite's file, the metadata suites' files
    /// and the `apps` suite's Linux tree (1.4 GB). mkfs reserves every byte (no pool is
    /// sparse: a full backing store must not fault), so this is 4 GiB of /dev/shm while
    /// a benchmark runs, and about a second to make.
    pub const DEFAULT_SIZE: u64 = 4 << 30;
    /// Default inode count: more than every suite creates at its default sizes.
    pub const DEFAULT_INODES: u64 = 1 << 20;

    /// [`Self::create`] with [`Self::DEFAULT_SIZE`] and [`Self::DEFAULT_INODES`].
    pub fn create_default() -> io::Result<Self> {
        Self::create_in(lynxfs::DataMode::Atomic)
    }

    /// [`Self::create_default`] with the pool made in data mode `data`.
    pub fn create_in(data: lynxfs::DataMode) -> io::Result<Self> {
        let mut opts = MkfsOptions::new(Self::DEFAULT_SIZE);
        opts.inodes = Some(Self::DEFAULT_INODES);
        opts.data = data;
        Self::create(&opts)
    }

    /// Formats a fresh pool file in `/dev/shm` with `opts` and opens it.
    pub fn create(opts: &MkfsOptions) -> io::Result<Self> {
        let path = fresh_pool_path()?;
        let pool_file = PoolFile(path.clone());
        Pool::mkfs(&path, opts, PmemBackend::default()).map_err(to_io)?;
        let fs = Fs::open(&path).map_err(to_io)?;
        // A long-lived process: the first round must not pay a fault per create.
        fs.pool().populate();
        Ok(Self {
            fs,
            open: Mutex::new(HashSet::new()),
            path,
            _pool_file: Some(pool_file),
            label: LIB_NAME.into(),
        })
    }

    /// Attaches the existing pool at `path` (another process's target, say), which is
    /// left in place when this target is dropped.
    pub fn attach(path: &Path) -> io::Result<Self> {
        Self::attach_timed(path).map(|(t, _)| t)
    }

    /// [`Self::attach`], timed in two parts: the attach itself (`Fs::open`), then the
    /// prefaulting of the shared state's mapping (`Pool::populate`), which a
    /// long-lived benchmark process wants before its first round but which a process
    /// started under the preload does in the background, after its first call.
    pub fn attach_timed(path: &Path) -> io::Result<(Self, AttachTimes)> {
        let start = Instant::now();
        let fs = Fs::open(path).map_err(to_io)?;
        let attach = start.elapsed();
        fs.pool().populate();
        let populate = start.elapsed() - attach;
        let t = Self {
            fs,
            open: Mutex::new(HashSet::new()),
            path: path.to_path_buf(),
            _pool_file: None,
            label: LIB_NAME.into(),
        };
        Ok((t, AttachTimes { attach, populate }))
    }

    /// The pool file.
    pub fn pool_path(&self) -> &Path {
        &self.path
    }

    /// Labels this target's columns `label` instead of [`LIB_NAME`].
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    /// A root caller working in the root directory, for the `apps` suite's tools.
    pub fn root_session(&self) -> Session<'_, PmemBackend> {
        self.session()
    }

    /// The engine, for measurements the [`Target`] trait does not cover.
    pub fn fs(&self) -> &Fs<PmemBackend> {
        &self.fs
    }

    /// A root caller working in the root directory. Cheap: no allocation.
    fn session(&self) -> Session<'_, PmemBackend> {
        self.fs.session(Cred::root())
    }
}

impl Drop for LibTarget {
    fn drop(&mut self) {
        let open = std::mem::take(self.open.get_mut().unwrap_or_else(|p| p.into_inner()));
        for fd in open {
            let _ = self.fs.close_fd(fd);
        }
        // `fs` then closes the pool cleanly (detaches), and `_pool_file` removes it.
    }
}

/// A name in `/dev/shm` no other process or target uses.
pub(crate) fn fresh_pool_path() -> io::Result<PathBuf> {
    // tempfile makes the name unique (and the file); mkfs overwrites only with force,
    // so the placeholder is removed first and the name kept.
    let tmp = tempfile::Builder::new()
        .prefix("lynxfs-bench.")
        .suffix(".pool")
        .tempfile_in(SHM)
        .map_err(|e| crate::dir::with_path(e, "create a pool file in", Path::new(SHM)))?;
    let (_, path) = tmp.keep().map_err(|e| e.error)?;
    std::fs::remove_file(&path)?;
    Ok(path)
}

/// An engine error as an `io::Error` of the same errno, so callers can match kinds.
pub(crate) fn to_io(e: lynxfs::Error) -> io::Error {
    match e {
        lynxfs::Error::Errno(n) => io::Error::from_raw_os_error(n),
        other => io::Error::other(other.to_string()),
    }
}

/// A target path as the engine's `&str`, refusing absolute paths as [`crate::DirTarget`]
/// does (they would escape nothing here, but the suites must not depend on that).
fn rel(path: &Path) -> io::Result<&str> {
    let s = path.to_str().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not UTF-8", path.display()),
        )
    })?;
    if s.starts_with('/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{s}: target paths must be relative"),
        ));
    }
    Ok(s)
}

fn open_bits(flags: OpenFlags) -> i32 {
    let mut bits = match (flags.read, flags.write) {
        (true, true) => libc::O_RDWR,
        (false, true) => libc::O_WRONLY,
        _ => libc::O_RDONLY,
    };
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

impl Target for LibTarget {
    fn name(&self) -> String {
        self.label.clone()
    }

    fn create(&self, path: &Path) -> io::Result<()> {
        let s = self.session();
        let fd = s
            .open(
                rel(path)?,
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                0o644,
            )
            .map_err(to_io)?;
        self.fs.close_fd(fd).map_err(to_io)
    }

    fn stat(&self, path: &Path) -> io::Result<Stat> {
        let st = self.session().lstat(rel(path)?).map_err(to_io)?;
        Ok(Stat {
            ino: st.ino,
            size: st.size,
            is_dir: st.mode & libc::S_IFMT == libc::S_IFDIR,
        })
    }

    fn unlink(&self, path: &Path) -> io::Result<()> {
        self.session().unlink(rel(path)?).map_err(to_io)
    }

    fn mkdir(&self, path: &Path) -> io::Result<()> {
        self.session().mkdir(rel(path)?, 0o755).map_err(to_io)
    }

    fn rmdir(&self, path: &Path) -> io::Result<()> {
        self.session().rmdir(rel(path)?).map_err(to_io)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.session()
            .rename(rel(from)?, rel(to)?, 0)
            .map_err(to_io)
    }

    fn open(&self, path: &Path, flags: OpenFlags) -> io::Result<Handle> {
        let fd = self
            .session()
            .open(rel(path)?, open_bits(flags), 0o644)
            .map_err(to_io)?;
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(fd);
        Ok(fd)
    }

    // pread and pwrite go straight to the engine, whose own handle table refuses an
    // fd it did not issue (EBADF); this target's set is only consulted on close.
    fn pwrite(&self, handle: Handle, buf: &[u8], off: u64) -> io::Result<usize> {
        self.fs.pwrite(handle, buf, off).map_err(to_io)
    }

    fn pread(&self, handle: Handle, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.fs.pread(handle, buf, off).map_err(to_io)
    }

    fn close(&self, handle: Handle) -> io::Result<()> {
        if !self
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&handle)
        {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        self.fs.close_fd(handle).map_err(to_io)
    }

    fn readdir(&self, path: &Path) -> io::Result<Vec<std::ffi::OsString>> {
        use std::os::unix::ffi::OsStringExt;
        let p = match rel(path)? {
            "" => ".",
            p => p,
        };
        let entries = self.session().readdir(p).map_err(to_io)?;
        Ok(entries
            .into_iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .map(|e| std::ffi::OsString::from_vec(e.name))
            .collect())
    }

    fn fsync(&self, handle: Handle) -> io::Result<()> {
        self.fs.fsync(handle).map_err(to_io)
    }

    fn as_lib(&self) -> Option<&LibTarget> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> LibTarget {
        LibTarget::create(&MkfsOptions::new(64 << 20)).unwrap()
    }

    #[test]
    fn metadata_calls_work_under_the_root_and_errors_keep_their_kind() {
        let t = small();
        t.mkdir(Path::new("a")).unwrap();
        assert!(t.stat(Path::new("a")).unwrap().is_dir);
        t.create(Path::new("a/f")).unwrap();
        let exists = t.create(Path::new("a/f")).unwrap_err();
        assert_eq!(exists.kind(), io::ErrorKind::AlreadyExists);
        let full = t.rmdir(Path::new("a")).unwrap_err();
        assert_eq!(full.raw_os_error(), Some(libc::ENOTEMPTY));
        t.rename(Path::new("a/f"), Path::new("g")).unwrap();
        assert!(!t.stat(Path::new("g")).unwrap().is_dir);
        assert_eq!(
            t.stat(Path::new("a/f")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        t.unlink(Path::new("g")).unwrap();
        t.rmdir(Path::new("a")).unwrap();
        // The engine sees the same tree through its own path API.
        let names: Vec<Vec<u8>> = t
            .fs()
            .session(Cred::root())
            .readdir("/")
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, [b".".to_vec(), b"..".to_vec()]);
    }

    #[test]
    fn data_round_trips_and_handles_are_checked() {
        let t = small();
        let h = t.open(Path::new("f"), OpenFlags::CREATE_TRUNCATE).unwrap();
        assert_eq!(t.pwrite(h, b"hello", 3).unwrap(), 5);
        let mut buf = [0u8; 8];
        assert_eq!(t.pread(h, &mut buf, 0).unwrap(), 8);
        assert_eq!(&buf, b"\0\0\0hello");
        assert_eq!(t.stat(Path::new("f")).unwrap().size, 8);
        t.close(h).unwrap();
        assert_eq!(t.close(h).unwrap_err().raw_os_error(), Some(libc::EBADF));
        assert_eq!(
            t.pwrite(h, b"x", 0).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
        assert_eq!(
            t.create(Path::new("/abs")).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn the_pool_file_is_in_shm_and_removed_on_drop_even_with_open_handles() {
        let t = small();
        let path = t.pool_path().to_path_buf();
        assert!(path.starts_with(SHM) && path.exists());
        let _leaked = t.open(Path::new("f"), OpenFlags::CREATE_TRUNCATE).unwrap();
        drop(t);
        assert!(!path.exists());
    }
}
