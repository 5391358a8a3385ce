//! [`FuseNullTarget`]: the "FUSE floor", a [`lynxfs_fuse_null::NullFs`] (an in-memory file
//! system with no persistence) mounted through FUSE and driven with system calls. It
//! shows what the kernel round trip through FUSE costs before any file system work.
//!
//! [`FuseTarget`]: a LynxFS pool in `/dev/shm` mounted through `lynxfs-fuse` the same
//! way, so the two FUSE columns differ only by the file system behind the daemon.

use std::io;
use std::path::Path;
use std::time::Duration;

use lynxfs::pmem::PmemBackend;
use lynxfs::{MkfsOptions, Pool};
use lynxfs_fuse::{LynxMount, MountOptions};
use lynxfs_fuse_null::NullMount;
use tempfile::TempDir;

use crate::dir::DirTarget;
use crate::lib_target::{fresh_pool_path, to_io, PoolFile};
use crate::mount::delegate_to_dir;
use crate::target::{Handle, OpenFlags, Stat, Target};
use crate::LibTarget;

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
        // As many workers as the `fuse` target (threads=2 in [`FuseTarget::OPTIONS`]),
        // so the two columns differ only by the file system behind the daemon.
        let options = lynxfs_fuse_null::NullOptions { ttl, threads: 2 };
        let mount = lynxfs_fuse_null::mount_null_with(point.path(), &options)?;
        let dir = DirTarget::new(point.path(), "fuse-null")?;
        Ok(Self {
            dir,
            _mount: mount,
            _point: point,
        })
    }
}

/// A fresh LynxFS pool in `/dev/shm` mounted through FUSE on a temporary directory;
/// unmounted (the pool closed cleanly) and the pool file removed when dropped.
pub struct FuseTarget {
    // Field order is drop order: close the root, unmount, remove the directory, then
    // the pool file.
    dir: DirTarget,
    _mount: LynxMount,
    _point: TempDir,
    _pool: PoolFile,
    // A hybrid pool's data device, removed after the pool.
    _device: Option<PoolFile>,
}

impl FuseTarget {
    /// The mount options the `fuse` target uses, in `-o` syntax: `lynxfs mount`'s
    /// defaults (what a user gets: names, misses, attributes and pages cached by the
    /// kernel, invalidated by the daemon; two worker threads), with the pmem backend
    /// spelled out (the pool is in `/dev/shm`, where the default picks it too).
    pub const OPTIONS: &'static str = "backend=pmem";

    /// Formats a pool of [`LibTarget::DEFAULT_SIZE`] bytes and
    /// [`LibTarget::DEFAULT_INODES`] inodes and mounts it with [`Self::OPTIONS`].
    pub fn mount() -> anyhow::Result<Self> {
        Self::mount_with(Self::OPTIONS)
    }

    /// The options of the `fuse-nocache` target: the kernel's entry and attribute
    /// caches off (and so its negative entries), as for [`FuseNullTarget`], so every
    /// lookup and stat reaches the daemon, over the classic `/dev/fuse` transport as
    /// [`FuseNullTarget`]: the `fuse` target before issue 14.
    pub const NOCACHE_OPTIONS: &'static str =
        "entry_timeout=0,attr_timeout=0,threads=2,backend=pmem,io_uring=off";

    /// [`Self::mount`] with [`Self::NOCACHE_OPTIONS`].
    pub fn mount_nocache() -> anyhow::Result<Self> {
        Self::mount_labelled(Self::NOCACHE_OPTIONS, "fuse-nocache")
    }

    /// The options of the `fuse-dev` target: [`Self::OPTIONS`] (the kernel's caches
    /// on) over the classic `/dev/fuse` transport, beside `fuse`, which uses io_uring
    /// when the kernel offers it.
    pub const DEV_OPTIONS: &'static str = "backend=pmem,io_uring=off";

    /// [`Self::mount`] with [`Self::DEV_OPTIONS`].
    pub fn mount_dev() -> anyhow::Result<Self> {
        Self::mount_labelled(Self::DEV_OPTIONS, "fuse-dev")
    }

    /// [`Self::mount`] with other mount options (`-o` syntax).
    pub fn mount_with(options: &str) -> anyhow::Result<Self> {
        Self::mount_labelled(options, "fuse")
    }

    fn mount_labelled(options: &str, label: &str) -> anyhow::Result<Self> {
        let mut mkfs = MkfsOptions::new(LibTarget::DEFAULT_SIZE);
        mkfs.inodes = Some(LibTarget::DEFAULT_INODES);
        Self::mount_pool(options, label, mkfs, None)
    }

    /// The `hybrid-fuse` target: the `hybrid` target's pool (1 GiB in /dev/shm, its
    /// data device a file in /var/tmp on the root disk), mounted with the default
    /// options.
    pub fn mount_hybrid() -> anyhow::Result<Self> {
        let device = PoolFile(crate::hybrid::fresh_device_path()?);
        let mut mkfs = MkfsOptions::new(crate::HybridTarget::SIZE);
        mkfs.inodes = Some(crate::HybridTarget::INODES);
        mkfs.data_device = Some(device.0.clone());
        Self::mount_pool(Self::OPTIONS, "hybrid-fuse", mkfs, Some(device))
    }

    fn mount_pool(
        options: &str,
        label: &str,
        mkfs: MkfsOptions,
        device: Option<PoolFile>,
    ) -> anyhow::Result<Self> {
        // Whatever the defaults for root become, a scratch tree stays nosuid and nodev,
        // as the tmpfs target's (`crate::mount`).
        let o = MountOptions::parse(&[options, "nosuid,nodev"].join(","))?;
        let path = fresh_pool_path()?;
        let pool = PoolFile(path.clone());
        Pool::mkfs(&path, &mkfs, PmemBackend::default()).map_err(to_io)?;
        let point = TempDir::with_prefix("lynxfs-bench-fuse.")?;
        let mount = lynxfs_fuse::mount_background(&path, point.path(), &o)?;
        let dir = DirTarget::new(point.path(), label)?;
        Ok(Self {
            dir,
            _mount: mount,
            _point: point,
            _pool: pool,
            _device: device,
        })
    }
}

delegate_to_dir!(FuseTarget);

delegate_to_dir!(FuseNullTarget);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_mount_serves_calls_and_unmounts_or_says_why_not() {
        // FUSE is part of the project's test setup (`./lynx test` installs fuse3): a
        // mount that fails is a failure, not a skip.
        let t = FuseNullTarget::mount().expect("mount the FUSE floor");
        let root = t._point.path().to_path_buf();
        t.mkdir(Path::new("a")).unwrap();
        t.create(Path::new("a/f")).unwrap();
        assert!(!t.stat(Path::new("a/f")).unwrap().is_dir);
        t.unlink(Path::new("a/f")).unwrap();
        t.rmdir(Path::new("a")).unwrap();
        drop(t);
        assert!(gone_soon(&root), "{} left behind", root.display());
    }

    /// The kernel may take a moment to let go of a mount point after the daemon exits.
    pub(super) fn gone_soon(p: &Path) -> bool {
        for _ in 0..50 {
            if !p.exists() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

#[cfg(test)]
mod fuse_tests {
    use super::*;

    #[test]
    fn lynxfs_fuse_mount_serves_calls_and_cleans_up_or_says_why_not() {
        let t = FuseTarget::mount().expect("mount a LynxFS pool with FUSE");
        let (root, pool) = (t._point.path().to_path_buf(), t._pool.0.clone());
        t.mkdir(Path::new("a")).unwrap();
        let h = t
            .open(Path::new("a/f"), OpenFlags::CREATE_TRUNCATE)
            .unwrap();
        assert_eq!(t.pwrite(h, b"hello", 0).unwrap(), 5);
        t.fsync(h).unwrap();
        t.close(h).unwrap();
        assert_eq!(t.stat(Path::new("a/f")).unwrap().size, 5);
        assert_eq!(t.readdir(Path::new("a")).unwrap(), ["f"]);
        t.unlink(Path::new("a/f")).unwrap();
        t.rmdir(Path::new("a")).unwrap();
        drop(t);
        assert!(!root.exists() && !pool.exists());
    }
}
