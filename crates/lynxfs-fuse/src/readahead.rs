//! The mount's readahead window. The kernel reads a FUSE file ahead by at most the
//! window of the mount's backing device (`/sys/class/bdi/MAJOR:MINOR/read_ahead_kb`,
//! 128 KiB by default, and INIT lowers it to `max_readahead`), one READ request per
//! window, even though a READ may carry up to 1 MiB (FUSE_MAX_PAGES). Widened to that
//! 1 MiB once INIT is answered, a sequential read of a large file costs one round
//! trip per MiB instead of one per 128 KiB: a 1 MiB read of an uncached file is one
//! READ instead of eight. Small reads are unchanged (the kernel starts small and grows
//! the window only for sequential reads; it never reads past the end of a file).

use std::io;
use std::path::{Path, PathBuf};

/// The window: the largest READ the kernel sends (with FUSE_MAX_PAGES, as large as
/// the largest WRITE).
pub const WINDOW_KIB: u64 = (crate::adapter::MAX_WRITE >> 10) as u64;

/// The readahead setting of the mount whose device is `device` (`major:minor`).
fn setting(device: &str) -> PathBuf {
    Path::new("/sys/class/bdi")
        .join(device)
        .join("read_ahead_kb")
}

/// Raises the readahead window of the mount on `device` (`major:minor`) to
/// [`WINDOW_KIB`], unless it is that large already (an administrator's larger
/// setting stays). Call after INIT was answered: the kernel lowers the window to the
/// INIT reply's `max_readahead` when it reads the reply. Only root may change it: for
/// anyone else the window stays as it was, which costs more READ requests, not
/// correctness, so that is not an error.
pub fn widen(device: &str) -> io::Result<()> {
    widen_at(&setting(device))
}

fn widen_at(path: &Path) -> io::Result<()> {
    let text = match std::fs::read_to_string(path) {
        // No such setting (sysfs not mounted, as in some containers): nothing to widen.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        r => r?,
    };
    let now: u64 = text
        .trim()
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{e}")))?;
    if now >= WINDOW_KIB {
        return Ok(());
    }
    match std::fs::write(path, WINDOW_KIB.to_string()) {
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EACCES | libc::EPERM | libc::EROFS)
            ) =>
        {
            Ok(())
        }
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_narrower_window_is_widened_and_a_wider_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("read_ahead_kb");
        std::fs::write(&f, "128\n").unwrap();
        widen_at(&f).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "1024");
        std::fs::write(&f, "4096\n").unwrap();
        widen_at(&f).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "4096\n");
    }

    #[test]
    fn a_missing_setting_is_left_and_a_garbled_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        widen_at(&dir.path().join("missing")).unwrap();
        assert!(!dir.path().join("missing").exists());
        let f = dir.path().join("read_ahead_kb");
        std::fs::write(&f, "lots").unwrap();
        assert!(widen_at(&f).is_err());
    }
}
