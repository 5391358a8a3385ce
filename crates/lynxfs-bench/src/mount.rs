//! Targets that mount a fresh kernel file system for the run: [`TmpfsTarget`] and
//! [`Ext4Target`]. Both unmount when dropped.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::{NamedTempFile, TempDir};

use crate::dir::{with_path, DirTarget};
use crate::target::{Handle, OpenFlags, Stat, Target};

/// Where file-backed images and fallback directories go: `/dev/shm` is a tmpfs, so
/// nothing the suites do there waits for a disk.
pub const SHM: &str = "/dev/shm";

/// A file system mounted on a temporary directory, unmounted when dropped.
struct Mount {
    point: TempDir,
}

impl Mount {
    fn path(&self) -> &Path {
        self.point.path()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // A lazy detach as a fallback: a descriptor a caller leaked must not leave the
        // mount behind for good.
        if umount(self.path(), 0).is_err() && umount(self.path(), libc::MNT_DETACH).is_err() {
            // Still mounted: removing the directory would recurse into the mounted
            // file system, so leave both in place.
            self.point.disable_cleanup(true);
        }
    }
}

fn umount(path: &Path, flags: libc::c_int) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Mounts a fresh tmpfs on `point` with the mount(2) system call, nosuid and nodev:
/// the trees root extracts there are open to other users, who must gain nothing from
/// a setuid program or a device node among them.
fn mount_tmpfs(point: &Path) -> io::Result<()> {
    let target = CString::new(point.as_os_str().as_bytes())?;
    let fstype = c"tmpfs";
    let data = c"mode=0755";
    // SAFETY: all strings are NUL-terminated and outlive the call; tmpfs reads `data`
    // as a C string of options.
    let ret = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Runs an external command, turning a failure into an error carrying its stderr.
fn run(cmd: &mut Command) -> io::Result<()> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd.output().map_err(|e| {
        let hint = if e.kind() == io::ErrorKind::NotFound {
            " (not installed?)"
        } else {
            ""
        };
        io::Error::new(e.kind(), format!("cannot run {program}{hint}: {e}"))
    })?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{program} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// Forwards every [`Target`] method to the `dir` field, so a mounting target is a
/// [`DirTarget`] on its mount point plus the guards that clean up after it.
macro_rules! delegate_to_dir {
    ($ty:ty) => {
        impl Target for $ty {
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
            fn readdir(&self, path: &Path) -> io::Result<Vec<std::ffi::OsString>> {
                self.dir.readdir(path)
            }
            fn fsync(&self, handle: Handle) -> io::Result<()> {
                self.dir.fsync(handle)
            }
            fn host_dir(&self) -> Option<&Path> {
                self.dir.host_dir()
            }
        }
    };
}

/// A fresh tmpfs, or failing that a fresh directory in `/dev/shm` (also tmpfs, but
/// shared with the rest of the machine, which [`Target::name`] then says).
pub struct TmpfsTarget {
    // Field order is drop order: the root descriptor must be closed before the unmount.
    dir: DirTarget,
    _mount: Option<Mount>,
    _fallback: Option<TempDir>,
    fallback_reason: Option<String>,
}

impl TmpfsTarget {
    /// Mounts a new tmpfs on a temporary directory (needs root); if that fails, uses a
    /// new directory under `/dev/shm` and records why in [`Self::fallback_reason`].
    pub fn mount() -> io::Result<Self> {
        let point = TempDir::with_prefix("lynxfs-bench-tmpfs.")?;
        match mount_tmpfs(point.path()) {
            Ok(()) => {
                let mount = Mount { point };
                let dir = DirTarget::new(mount.path(), "tmpfs")?;
                Ok(Self {
                    dir,
                    _mount: Some(mount),
                    _fallback: None,
                    fallback_reason: None,
                })
            }
            Err(e) => {
                let reason = format!("mount -t tmpfs {}: {e}", point.path().display());
                Self::shm_dir("tmpfs(shm-dir)", Some(reason))
            }
        }
    }

    /// A new directory under `/dev/shm`, removed when dropped; `label` names it.
    pub fn shm_dir(label: &str, fallback_reason: Option<String>) -> io::Result<Self> {
        let tmp = TempDir::with_prefix_in("lynxfs-bench-shm.", SHM)
            .map_err(|e| with_path(e, "create a directory in", Path::new(SHM)))?;
        let dir = DirTarget::new(tmp.path(), label)?;
        Ok(Self {
            dir,
            _mount: None,
            _fallback: Some(tmp),
            fallback_reason,
        })
    }

    /// Why the tmpfs could not be mounted, when this target is a `/dev/shm` directory
    /// standing in for it.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// The directory the suites work in.
    pub fn root(&self) -> &Path {
        self.dir.root()
    }
}

pub(crate) use delegate_to_dir;

delegate_to_dir!(TmpfsTarget);

/// A fresh ext4 on a loop device backed by an image file in `/dev/shm`, so it measures
/// ext4's code paths rather than a disk.
pub struct Ext4Target {
    // Field order is drop order: close the root, unmount, then delete the image.
    dir: DirTarget,
    _mount: Mount,
    _image: NamedTempFile,
}

impl Ext4Target {
    /// Image size used by [`Self::mount_default`]: room for the `apps` suite's Linux
    /// tree (1.4 GB, 80,000 inodes) and the syscalls suite's 30,000 inodes at mkfs's
    /// default inode ratio. The image is
    /// sparse, so only what is written takes memory.
    pub const DEFAULT_IMAGE_SIZE: u64 = 4 << 30;

    /// [`Self::mount`] with [`Self::DEFAULT_IMAGE_SIZE`].
    pub fn mount_default() -> io::Result<Self> {
        Self::mount(Self::DEFAULT_IMAGE_SIZE)
    }

    /// Makes an ext4 of `image_size` bytes and loop-mounts it, nosuid and nodev as the
    /// tmpfs (needs root, `mkfs.ext4` and a free loop device; the error says which is
    /// missing).
    pub fn mount(image_size: u64) -> io::Result<Self> {
        let image = tempfile::Builder::new()
            .prefix("lynxfs-bench-ext4.")
            .suffix(".img")
            .tempfile_in(SHM)
            .map_err(|e| with_path(e, "create an image in", Path::new(SHM)))?;
        image.as_file().set_len(image_size)?;
        // Eager table and journal initialisation: otherwise ext4 zeroes them from a
        // kernel thread during the first minutes, in the middle of the measurements.
        run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"])
            .arg(image.path()))?;
        let point = TempDir::with_prefix("lynxfs-bench-ext4.")?;
        run(Command::new("mount")
            .args(["-t", "ext4", "-o", "loop,nosuid,nodev"])
            .arg(image.path())
            .arg(point.path()))
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("loop-mounting ext4 (are loop devices available?): {e}"),
            )
        })?;
        let mount = Mount { point };
        let dir = DirTarget::new(mount.path(), "ext4")?;
        // The root holds ext4's lost+found; the suites' names do not clash with it.
        Ok(Self {
            dir,
            _mount: mount,
            _image: image,
        })
    }

    /// The image file behind the loop device.
    pub fn image(&self) -> PathBuf {
        self._image.path().to_path_buf()
    }
}

delegate_to_dir!(Ext4Target);

#[cfg(test)]
mod tests {
    use super::*;

    /// The options of the mount at `path`, if one is there.
    fn mount_options(path: &Path) -> Option<Vec<String>> {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let p = path.to_str().unwrap();
        mounts.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(1) == Some(&p)).then(|| f[3].split(',').map(str::to_string).collect())
        })
    }

    fn mounted(path: &Path) -> bool {
        mount_options(path).is_some()
    }

    fn nosuid_nodev(path: &Path) -> bool {
        let o = mount_options(path).unwrap_or_default();
        o.iter().any(|o| o == "nosuid") && o.iter().any(|o| o == "nodev")
    }

    #[test]
    fn tmpfs_is_mounted_nosuid_nodev_until_dropped_or_falls_back_to_shm() {
        let t = TmpfsTarget::mount().unwrap();
        let root = t.root().to_path_buf();
        match t.fallback_reason() {
            None => assert!(
                nosuid_nodev(&root),
                "{} not in /proc/self/mounts nosuid,nodev: {:?}",
                root.display(),
                mount_options(&root)
            ),
            Some(why) => {
                assert!(root.starts_with(SHM) && t.name().contains("shm"), "{why}");
            }
        }
        t.create(Path::new("f")).unwrap();
        drop(t);
        assert!(!mounted(&root));
        assert!(!root.exists());
    }

    #[test]
    fn ext4_mounts_and_cleans_up_or_says_why_not() {
        let t = match Ext4Target::mount(64 << 20) {
            Ok(t) => t,
            Err(e) => {
                // No root, no mkfs.ext4 or no loop device: the error must say which.
                let msg = e.to_string();
                assert!(msg.contains("mkfs.ext4") || msg.contains("loop"), "{msg}");
                return;
            }
        };
        let (root, image) = (t.dir.root().to_path_buf(), t.image());
        assert!(nosuid_nodev(&root), "{:?}", mount_options(&root));
        t.mkdir(Path::new("d")).unwrap();
        drop(t);
        assert!(!mounted(&root) && !root.exists() && !image.exists());
    }
}
