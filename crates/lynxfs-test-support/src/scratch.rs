//! Places and identities a test acts in: a directory every user may write, a thread
//! acting as an ordinary user, a tmpfs mounted for the test.

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

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
