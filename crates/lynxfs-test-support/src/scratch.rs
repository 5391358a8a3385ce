//! Places and identities a test acts in: a directory every user may write, a thread
//! acting as an ordinary user, a tmpfs mounted for the test, a thread in a private
//! mount namespace (with the mount(8) helpers linked in it).

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::child::output_within;

/// The ordinary user tests act as (`./lynx test` runs as root; the machine has it).
pub const USER: u32 = 1000;

/// A fresh directory in /dev/shm anyone may create files in (mode 1777, as /tmp and
/// /dev/shm are), removed when dropped.
pub fn shared_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir_in("/dev/shm").unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    d
}

/// Runs `f` on a thread whose file-system identity is uid and gid [`USER`] with no
/// supplementary groups (per thread: setfsuid also drops the capabilities that would
/// bypass permission checks).
pub fn as_user_1000<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        let none: [libc::gid_t; 0] = [];
        // SAFETY: raw per-thread system calls; the group list is a valid empty array.
        unsafe {
            assert_eq!(libc::syscall(libc::SYS_setgroups, 0, none.as_ptr()), 0);
            libc::syscall(libc::SYS_setfsgid, USER);
            libc::syscall(libc::SYS_setfsuid, USER);
        }
        f()
    })
    .join()
    .expect("user thread")
}

/// A tmpfs mounted at a directory (with a marker file in it), detached when dropped.
/// By system calls, not mount(8): a child forked while another test holds its pool
/// open would hold the pool's lock too, for an instant.
pub struct Tmpfs(PathBuf);

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_encoded_bytes()).unwrap()
}

/// The marker [`Tmpfs::mount`] leaves, by which [`Tmpfs::still_there`] knows it.
const MARKER: &str = "tmpfs-marker";

impl Tmpfs {
    /// Mounts a tmpfs at `dir` (root only).
    pub fn mount(dir: &Path) -> Tmpfs {
        let (tmpfs, target) = (CString::new("tmpfs").unwrap(), cpath(dir));
        // SAFETY: NUL-terminated strings that outlive the call; no data argument.
        let r = unsafe {
            libc::mount(
                tmpfs.as_ptr(),
                target.as_ptr(),
                tmpfs.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0, "mount tmpfs: {}", std::io::Error::last_os_error());
        std::fs::write(dir.join(MARKER), b"").unwrap();
        Tmpfs(dir.to_path_buf())
    }

    /// Is this tmpfs still what its directory shows (nothing mounted over it, not
    /// unmounted)?
    pub fn still_there(&self) -> bool {
        self.0.join(MARKER).exists()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let target = cpath(&self.0);
        // SAFETY: a NUL-terminated path.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// A mount(8) run by the helpers below that takes longer has hung.
const MOUNT_LIMIT: Duration = Duration::from_secs(120);

fn mount8(args: &[&str]) -> Output {
    output_within(Command::new("mount").args(args), MOUNT_LIMIT)
}

/// Runs `body` on a thread of its own in a private mount namespace (the thread's
/// alone: `unshare(CLONE_NEWNS)` also gives it its own root and cwd), so mounts made
/// there, and by the commands it runs, are invisible to the rest of the machine and
/// go when the last process in the namespace ends.
pub fn in_private_mount_namespace<T: Send + 'static>(
    body: impl FnOnce() -> T + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        // SAFETY: unshare affects this thread only (CLONE_NEWNS implies CLONE_FS).
        assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNS) }, 0, "unshare -m");
        let o = mount8(&["--make-rprivate", "/"]);
        assert!(
            o.status.success(),
            "mount --make-rprivate /: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        body()
    })
    .join()
    .expect("the namespace thread")
}

/// Makes /usr/sbin (so /sbin) writable in this thread's mount namespace, with an
/// overlay whose changes live in `scratch`, and links the mount(8) helpers
/// (`mount.lynxfs`, `mount.fuse.lynxfs`) there to `lynxfs`, as `./lynx demo` does in
/// the real /sbin. Only in a private namespace ([`in_private_mount_namespace`]).
pub fn install_helpers(scratch: &Path, lynxfs: &Path) {
    let (upper, work) = (scratch.join("upper"), scratch.join("work"));
    std::fs::create_dir_all(&upper).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let options = format!(
        "lowerdir=/usr/sbin,upperdir={},workdir={}",
        upper.display(),
        work.display()
    );
    let o = mount8(&["-t", "overlay", "overlay", "-o", &options, "/usr/sbin"]);
    assert!(
        o.status.success(),
        "overlay on /usr/sbin: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    for name in ["mount.lynxfs", "mount.fuse.lynxfs"] {
        let link = Path::new("/usr/sbin").join(name);
        // One a `./lynx demo` linked (to another build) is replaced in the overlay only.
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(lynxfs, link).unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_shared_dir_is_open_to_all_and_the_user_thread_is_not_root() {
        let d = shared_dir();
        assert_eq!(std::fs::metadata(d.path()).unwrap().mode() & 0o7777, 0o1777);
        let p = d.path().join("f");
        let owner = as_user_1000(move || {
            std::fs::write(&p, b"x").unwrap();
            std::fs::metadata(&p).unwrap().uid()
        });
        assert_eq!(owner, USER);
        let denied = as_user_1000(|| std::fs::read_dir("/root").map(|_| ()).map_err(|e| e.kind()));
        assert_eq!(denied, Err(std::io::ErrorKind::PermissionDenied));
    }

    #[test]
    fn a_tmpfs_is_there_until_dropped() {
        let d = tempfile::tempdir().unwrap();
        let t = Tmpfs::mount(d.path());
        assert!(t.still_there());
        drop(t);
        assert!(!d.path().join(MARKER).exists());
    }
}
