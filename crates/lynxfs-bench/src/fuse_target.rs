//! [`FuseNullTarget`]: the "FUSE floor", a [`lynxfs_fuse::NullFs`] (an in-memory file
//! system with no persistence) mounted through FUSE and driven with system calls. It
//! shows what the kernel round trip through FUSE costs before any file system work.

use std::io;
use std::path::Path;
use std::time::Duration;

use lynxfs_fuse::NullMount;
use tempfile::TempDir;

use crate::dir::DirTarget;
use crate::target::{Handle, OpenFlags, Stat, Target};

/// A fresh null FUSE mount on a temporary directory, unmounted when dropped.
pub struct FuseNullTarget {
    // Field order is drop order: close the root, unmount, then remove the directory.
    dir: DirTarget,
    _mount: NullMount,
    _point: TempDir,
}

impl FuseNullTarget {
    /// Mounts with the kernel's entry and attribute caches off (`ttl` zero), so every
    /// call reaches the FUSE daemon, as it must for a file system whose metadata can
    /// change underneath (needs `/dev/fuse` and root or `fusermount3`).
    pub fn mount() -> anyhow::Result<Self> {
        Self::mount_with_ttl(Duration::ZERO)
    }

    /// [`Self::mount`] with kernel caches that keep entries and attributes for `ttl`.
    pub fn mount_with_ttl(ttl: Duration) -> anyhow::Result<Self> {
        let point = TempDir::with_prefix("lynxfs-bench-fuse-null.")?;
        let mount = lynxfs_fuse::mount_null(point.path(), ttl)?;
        let dir = DirTarget::new(point.path(), "fuse-null")?;
        Ok(Self {
            dir,
            _mount: mount,
            _point: point,
        })
    }
}

impl Target for FuseNullTarget {
    fn name(&self) -> String {
        self.dir.name()
    }
    fn create(&self, path: &Path) -> io::Result<()> {
        self.dir.create(path)
    }
    fn stat(&self, path: &Path) -> io::Result<Stat> {
        self.dir.stat(path)
    }
    fn unlink(&self, path: &Path) -> io::Result<()> {
        self.dir.unlink(path)
    }
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        self.dir.mkdir(path)
    }
    fn rmdir(&self, path: &Path) -> io::Result<()> {
        self.dir.rmdir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.dir.rename(from, to)
    }
    fn open(&self, path: &Path, flags: OpenFlags) -> io::Result<Handle> {
        self.dir.open(path, flags)
    }
    fn pwrite(&self, handle: Handle, buf: &[u8], off: u64) -> io::Result<usize> {
        self.dir.pwrite(handle, buf, off)
    }
    fn pread(&self, handle: Handle, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.dir.pread(handle, buf, off)
    }
    fn close(&self, handle: Handle) -> io::Result<()> {
        self.dir.close(handle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_mount_serves_calls_and_unmounts_or_says_why_not() {
        let t = match FuseNullTarget::mount() {
            Ok(t) => t,
            Err(e) => {
                let msg = format!("{e:#}");
                assert!(msg.contains("fuse") || msg.contains("FUSE"), "{msg}");
                return;
            }
        };
        let root = t._point.path().to_path_buf();
        t.mkdir(Path::new("a")).unwrap();
        t.create(Path::new("a/f")).unwrap();
        assert!(!t.stat(Path::new("a/f")).unwrap().is_dir);
        t.unlink(Path::new("a/f")).unwrap();
        t.rmdir(Path::new("a")).unwrap();
        drop(t);
        assert!(!root.exists());
    }
}
