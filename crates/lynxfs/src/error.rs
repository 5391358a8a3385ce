//! Errors. Pool-level problems name the file and say what is wrong; file-system calls
//! fail with an errno, mapped in one place ([`Error::errno`]).

use std::path::{Path, PathBuf};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The message says the cause, so the cause is not also the error's `source()`
    /// (a field named `source` would be): a chain printer (`{:#}`) would say it twice.
    #[error("{path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{path}: no such pool file (create one with `lynxfs mkfs {path}`)")]
    Missing { path: PathBuf },
    #[error("{path}: pool is in use by another process (it holds the pool's lock)")]
    Locked { path: PathBuf },
    #[error("{path}: already exists (pass --force to overwrite it)")]
    Exists { path: PathBuf },
    #[error("{path}: not a LynxFS pool (no LynxFS superblock found)")]
    Foreign { path: PathBuf },
    #[error("{path}: pool too small: {size} bytes, at least {min} needed")]
    TooSmall { path: PathBuf, size: u64, min: u64 },
    #[error("{path}: pool truncated: the superblock says {expected} bytes, the file has {actual}")]
    Truncated {
        path: PathBuf,
        expected: u64,
        actual: u64,
    },
    #[error(
        "{path}: format version {found} is not supported (this build reads version {supported})"
    )]
    Version {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("{path}: corrupt pool: {what} (run `lynxfs fsck {path}`)")]
    Corrupt { path: PathBuf, what: String },
    /// A hybrid pool's data device cannot be used with it (`pool::device`); `what`
    /// ends naming the pool. Two fields, so the error grows no larger (a larger one
    /// costs every call that returns a `Result`).
    #[error("{device}: {what}")]
    Device { device: PathBuf, what: String },
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The shared runtime state file of a pool (or its directory) cannot be used.
    #[error("{path}: {what}")]
    Runtime {
        path: PathBuf,
        what: String,
        errno: i32,
    },
    /// The path leaves the pool's tree (a pool mounted inside a bigger one, see
    /// `api::path::Scope::Mounted`): resolve this rest of it outside: an absolute
    /// path, or one relative to the directory the pool is mounted on.
    #[error("the path leaves the pool: {}", String::from_utf8_lossy(.0))]
    Outside(Vec<u8>),
    /// A file-system call failed with this errno.
    #[error("{}", errno_name(*.0))]
    Errno(i32),
    /// A data device's export of its pool's metadata cannot be written or used.
    #[error("{path}: {what}")]
    Export { path: PathBuf, what: String },
}

impl Error {
    pub fn io(path: &Path, cause: std::io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            cause,
        }
    }

    pub fn corrupt(path: &Path, what: impl Into<String>) -> Self {
        Error::Corrupt {
            path: path.to_path_buf(),
            what: what.into(),
        }
    }

    /// The errno a POSIX caller (the FUSE adapter, a C API) should see.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Errno(e) => *e,
            Error::Outside(_) => libc::EXDEV,
            Error::Io { cause, .. } => cause.raw_os_error().unwrap_or(libc::EIO),
            Error::Missing { .. } => libc::ENOENT,
            Error::Locked { .. } => libc::EBUSY,
            Error::Exists { .. } => libc::EEXIST,
            Error::Invalid(_) => libc::EINVAL,
            Error::Runtime { errno, .. } => *errno,
            Error::Foreign { .. }
            | Error::TooSmall { .. }
            | Error::Truncated { .. }
            | Error::Version { .. }
            | Error::Device { .. }
            | Error::Corrupt { .. }
            | Error::Export { .. } => libc::EUCLEAN,
        }
    }
}

fn errno_name(e: i32) -> String {
    std::io::Error::from_raw_os_error(e).to_string()
}

/// Shorthands for the errnos the engine returns.
pub mod errno {
    use super::Error;
    pub const ENOENT: Error = Error::Errno(libc::ENOENT);
    pub const EEXIST: Error = Error::Errno(libc::EEXIST);
    pub const ENOSPC: Error = Error::Errno(libc::ENOSPC);
    pub const ENOTDIR: Error = Error::Errno(libc::ENOTDIR);
    pub const EISDIR: Error = Error::Errno(libc::EISDIR);
    pub const ENOTEMPTY: Error = Error::Errno(libc::ENOTEMPTY);
    pub const EINVAL: Error = Error::Errno(libc::EINVAL);
    pub const ENAMETOOLONG: Error = Error::Errno(libc::ENAMETOOLONG);
    pub const ELOOP: Error = Error::Errno(libc::ELOOP);
    pub const EACCES: Error = Error::Errno(libc::EACCES);
    pub const EPERM: Error = Error::Errno(libc::EPERM);
    pub const EBADF: Error = Error::Errno(libc::EBADF);
    pub const EXDEV: Error = Error::Errno(libc::EXDEV);
    pub const EMLINK: Error = Error::Errno(libc::EMLINK);
    pub const EBUSY: Error = Error::Errno(libc::EBUSY);
    pub const EFBIG: Error = Error::Errno(libc::EFBIG);
    pub const ENODATA: Error = Error::Errno(libc::ENODATA);
    pub const ERANGE: Error = Error::Errno(libc::ERANGE);
    pub const E2BIG: Error = Error::Errno(libc::E2BIG);
    pub const EROFS: Error = Error::Errno(libc::EROFS);
    pub const EOPNOTSUPP: Error = Error::Errno(libc::EOPNOTSUPP);
    pub const EIO: Error = Error::Errno(libc::EIO);
    pub const ENODEV: Error = Error::Errno(libc::ENODEV);
    pub const ESTALE: Error = Error::Errno(libc::ESTALE);
    pub const ENXIO: Error = Error::Errno(libc::ENXIO);
    /// Internal: the shared runtime is under repair and the operation must be retried
    /// (never returned to a caller: the API retries).
    pub const ERESTART: Error = Error::Errno(libc::ERESTART);
}

#[cfg(test)]
mod tests {
    /// Every call returns a `Result`: a larger error makes each of them move more
    /// bytes, and changed the inlining of rename and stat (scripts/opcount.sh: +57 and
    /// +7 instructions per call when a variant of three fields made it 72 bytes; the
    /// largest, `Runtime`, makes it 56).
    #[test]
    fn the_error_stays_56_bytes() {
        assert!(std::mem::size_of::<super::Error>() <= 56);
    }
}
