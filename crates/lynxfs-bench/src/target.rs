//! The file system under test, as the suites see it.

use std::ffi::OsString;
use std::io;
use std::path::Path;

/// An open file, as returned by [`Target::open`]. Its meaning is private to the target
/// (a file descriptor for [`crate::DirTarget`], an index into a table for others); the
/// suites only pass it back to the target that issued it.
pub type Handle = u64;

/// How [`Target::open`] opens a file: the subset of `open(2)` flags the suites use.
///
/// A plain struct rather than raw `O_*` bits so that a target that is not a kernel file
/// system (the LynxFS library) does not have to decode libc constants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenFlags {
    /// Allow [`Target::pread`].
    pub read: bool,
    /// Allow [`Target::pwrite`].
    pub write: bool,
    /// Create the file if it does not exist (`O_CREAT`).
    pub create: bool,
    /// Fail if the file exists; only meaningful with `create` (`O_EXCL`).
    pub exclusive: bool,
    /// Cut the file to length 0 on open (`O_TRUNC`).
    pub truncate: bool,
}

impl OpenFlags {
    /// `O_RDONLY`.
    pub const READ: Self = Self {
        read: true,
        write: false,
        create: false,
        exclusive: false,
        truncate: false,
    };
    /// `O_RDWR`.
    pub const READ_WRITE: Self = Self {
        read: true,
        write: true,
        create: false,
        exclusive: false,
        truncate: false,
    };
    /// `O_RDWR|O_CREAT|O_TRUNC`: a fresh, empty file whether or not it existed.
    pub const CREATE_TRUNCATE: Self = Self {
        read: true,
        write: true,
        create: true,
        exclusive: false,
        truncate: true,
    };
}

/// What [`Target::stat`] reports: the few attributes the suites can check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// Inode number.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Whether this is a directory.
    pub is_dir: bool,
}

/// A file system under test.
///
/// Paths are relative to the target's root (`"d1/d2/f"`, no leading `/`); the suites
/// build every path before they start the clock, so an implementation should not
/// allocate per call if it can avoid it (that cost would be charged to the target).
///
/// The trait is object safe (the suites take `&[Box<dyn Target>]`) and takes `&self`
/// everywhere, so an implementation that keeps state (open handles) needs interior
/// mutability. It requires `Send + Sync` because the `mdtest` suite (and the create
/// scaling note of `syscalls`) call one target from several threads at once.
pub trait Target: Send + Sync {
    /// A short label for table columns (`"tmpfs"`, `"ext4"`, `"lynxfs"`).
    fn name(&self) -> String;

    /// Creates an empty regular file that must not exist yet, and closes it:
    /// `open(O_CREAT|O_EXCL|O_WRONLY)` then `close`.
    fn create(&self, path: &Path) -> io::Result<()>;

    /// Looks up a file or directory's attributes (`stat(2)`, following no symlink).
    fn stat(&self, path: &Path) -> io::Result<Stat>;

    /// Removes a file (`unlink(2)`).
    fn unlink(&self, path: &Path) -> io::Result<()>;

    /// Creates a directory (`mkdir(2)`, mode 0755).
    fn mkdir(&self, path: &Path) -> io::Result<()>;

    /// Removes an empty directory (`rmdir(2)`).
    fn rmdir(&self, path: &Path) -> io::Result<()>;

    /// Renames `from` to `to`, replacing `to` if it exists (`rename(2)`).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Opens a file and returns a handle for the data operations.
    fn open(&self, path: &Path, flags: OpenFlags) -> io::Result<Handle>;

    /// Writes `buf` at byte offset `off`; returns how many bytes were written.
    fn pwrite(&self, handle: Handle, buf: &[u8], off: u64) -> io::Result<usize>;

    /// Reads into `buf` from byte offset `off`; returns how many bytes were read
    /// (0 at end of file).
    fn pread(&self, handle: Handle, buf: &mut [u8], off: u64) -> io::Result<usize>;

    /// Closes a handle; it must not be used again.
    fn close(&self, handle: Handle) -> io::Result<()>;

    /// The names in a directory, without `.` and `..`, in the file system's order.
    fn readdir(&self, path: &Path) -> io::Result<Vec<OsString>>;

    /// Makes a file's data and metadata durable (`fsync(2)`).
    fn fsync(&self, handle: Handle) -> io::Result<()>;

    /// The host directory a kernel file system target works in, where the `apps`
    /// suite runs real programs (`tar`, `du`, ...); `None` for in-process targets.
    fn host_dir(&self) -> Option<&Path> {
        None
    }

    /// The LynxFS library target behind this one, for the `apps` suite's in-process
    /// tools and the `ablation` suite; `None` for every other target.
    fn as_lib(&self) -> Option<&crate::LibTarget> {
        None
    }
}

/// Writes all of `buf` at `off`, looping over short writes.
pub(crate) fn pwrite_all(
    t: &dyn Target,
    h: Handle,
    mut buf: &[u8],
    mut off: u64,
) -> io::Result<()> {
    while !buf.is_empty() {
        let n = t.pwrite(h, buf, off)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "pwrite wrote 0 bytes",
            ));
        }
        buf = &buf[n..];
        off += n as u64;
    }
    Ok(())
}

/// Fills all of `buf` from `off`, looping over short reads; end of file is an error
/// because the suites only read what they wrote.
pub(crate) fn pread_exact(
    t: &dyn Target,
    h: Handle,
    mut buf: &mut [u8],
    mut off: u64,
) -> io::Result<()> {
    while !buf.is_empty() {
        let n = t.pread(h, buf, off)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("pread hit end of file at offset {off}"),
            ));
        }
        buf = &mut buf[n..];
        off += n as u64;
    }
    Ok(())
}
