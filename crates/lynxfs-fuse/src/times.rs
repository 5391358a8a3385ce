//! The daemon's own time per request type, opt-in for measurements
//! (`scripts/fusefloor.sh`): with `LYNXFS_FUSE_TIMES=FILE` in the daemon's
//! environment (or [`crate::MountOptions::times_file`]), every request is timed from its read to its reply
//! (`fuser::RequestTimes`) and, when the session ends, the histograms are appended
//! to FILE as one section ending in `# end`. Without it, no clock is read.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fuser::RequestTimes;

/// The environment variable naming the file the times are appended to.
pub const VAR: &str = "LYNXFS_FUSE_TIMES";

/// Where this mount's times go, and the times.
pub(crate) struct TimesFile {
    path: PathBuf,
    mountpoint: PathBuf,
    times: Arc<RequestTimes>,
}

impl TimesFile {
    /// The times of the mount at `mountpoint`, if `file` or else [`VAR`] asks for them.
    pub(crate) fn new(file: Option<&Path>, mountpoint: &Path) -> Option<TimesFile> {
        let path = match file {
            Some(f) => f.to_path_buf(),
            None => PathBuf::from(std::env::var_os(VAR).filter(|p| !p.is_empty())?),
        };
        Some(TimesFile {
            path,
            mountpoint: mountpoint.to_path_buf(),
            times: Arc::new(RequestTimes::new()),
        })
    }

    pub(crate) fn times(&self) -> Arc<RequestTimes> {
        self.times.clone()
    }

    /// Appends this session's section in one write, so that sections of mounts
    /// ending at once do not interleave and a reader that sees `# end` has it whole.
    pub(crate) fn write(&self) -> std::io::Result<()> {
        let mut text = Vec::new();
        writeln!(
            text,
            "# mount {} pid {}",
            self.mountpoint.display(),
            std::process::id()
        )?;
        self.times.write_to(&mut text)?;
        writeln!(text, "# end")?;
        own_file(&self.path)?.write_all(&text)
    }
}

/// `path` opened to append, made for this user alone (mode 0600) if missing: never
/// through a symbolic link, and refused if someone else owns it (a file planted in a
/// shared directory, such as /tmp, by another user).
fn own_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if f.metadata()?.uid() != me {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} belongs to another user: not written", path.display()),
        ));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_times_file_is_ours_alone_and_never_a_link_or_anothers() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let mine = dir.path().join("times");
        own_file(&mine).unwrap().write_all(b"x").unwrap();
        assert_eq!(
            std::fs::metadata(&mine).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&mine, &link).unwrap();
        assert_eq!(
            own_file(&link).unwrap_err().raw_os_error(),
            Some(libc::ELOOP)
        );
        let planted = dir.path().join("planted");
        std::fs::write(&planted, b"").unwrap();
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(euid, 0, "run as root, as ./lynx test does");
        std::os::unix::fs::chown(&planted, Some(1000), Some(1000)).unwrap();
        let e = own_file(&planted).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        assert_eq!(std::fs::metadata(&planted).unwrap().size(), 0);
    }
}
