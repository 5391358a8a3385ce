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
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?
            .write_all(&text)
    }
}
