//! Inode flags and unnamed files through a LynxFS mount with the tools users use:
//! `chattr`/`lsattr` (e2fsprogs), the shell's redirections, and python's `os`
//! module (`O_TMPFILE` then `os.link` through /proc/self/fd).
//!
//! Needs root, `/dev/fuse`, `chattr`/`lsattr` and python3 (`./lynx test` installs
//! e2fsprogs); fails loudly without them. A watchdog aborts the process if anything
//! hangs; the mount is always unmounted.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use lynxfs::pmem::PmemBackend;
use lynxfs::{MkfsOptions, Pool};
use lynxfs_fuse::mount::{mount_background, MountOptions};

/// Runs a command in `dir` (bounded: the watchdog covers it).
fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (is it installed?)", args[0]))
}

/// Runs a command that must succeed; its standard output.
fn ok(dir: &Path, args: &[&str]) -> String {
    let out = run(dir, args);
    assert!(
        out.status.success(),
        "{args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command that must fail; its standard error.
fn fails(dir: &Path, args: &[&str]) -> String {
    let out = run(dir, args);
    assert!(!out.status.success(), "{args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The flag letters `lsattr -d` shows for `name`.
fn lsattr(dir: &Path, name: &str) -> String {
    let out = ok(dir, &["lsattr", "-d", name]);
    out.split_whitespace().next().unwrap_or("").replace('-', "")
}

#[test]
fn chattr_lsattr_and_python_tmpfiles_work_on_a_mount() {
    let _dog = lynxfs_test_support::watchdog("user_tools", Duration::from_secs(120));
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing");
    let shm = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let pool = shm.path().join("pool");
    Pool::mkfs(&pool, &MkfsOptions::new(64 << 20), PmemBackend::default()).expect("mkfs");
    let mnt = tempfile::tempdir().expect("mount point");
    let opts = MountOptions::parse("allow_other").expect("options");
    let m = mount_background(&pool, mnt.path(), &opts).unwrap_or_else(|e| panic!("mount: {e:#}"));
    let d = mnt.path().to_path_buf();
    let result = std::panic::catch_unwind(|| {
        std::fs::write(d.join("f"), b"one\n").unwrap();
        ok(&d, &["chattr", "+i", "+A", "+d", "f"]);
        assert_eq!(lsattr(&d, "f"), "idA");
        let err = fails(&d, &["sh", "-c", "echo two >> f"]);
        assert!(err.contains("not permitted"), "{err}");
        fails(&d, &["rm", "-f", "f"]);
        fails(&d, &["mv", "f", "g"]);
        fails(&d, &["chmod", "600", "f"]);
        ok(&d, &["chattr", "-i", "+a", "f"]);
        assert_eq!(lsattr(&d, "f"), "adA");
        ok(&d, &["sh", "-c", "echo two >> f"]);
        fails(&d, &["sh", "-c", "echo three > f"]);
        fails(&d, &["truncate", "-s", "0", "f"]);
        assert_eq!(std::fs::read(d.join("f")).unwrap(), b"one\ntwo\n");
        ok(&d, &["chattr", "-a", "-A", "-d", "f"]);
        assert_eq!(lsattr(&d, "f"), "");
        ok(&d, &["rm", "f"]);
        // An immutable directory: nothing is made in it.
        std::fs::create_dir(d.join("dir")).unwrap();
        ok(&d, &["chattr", "+i", "dir"]);
        fails(&d, &["touch", "dir/new"]);
        ok(&d, &["chattr", "-i", "dir"]);
        ok(&d, &["touch", "dir/new"]);
        // python: an unnamed file, written, then linked in; an O_EXCL one cannot be.
        let script = r#"
import os, errno
# A directory fd makes python call linkat (with AT_SYMLINK_FOLLOW), not link.
here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
fd = os.open(".", os.O_TMPFILE | os.O_RDWR, 0o600)
os.write(fd, b"made unnamed")
assert os.fstat(fd).st_nlink == 0
os.link(f"/proc/self/fd/{fd}", "linked", dst_dir_fd=here, follow_symlinks=True)
assert os.fstat(fd).st_nlink == 1
os.close(fd)
fd = os.open(".", os.O_TMPFILE | os.O_EXCL | os.O_WRONLY, 0o600)
try:
    os.link(f"/proc/self/fd/{fd}", "never", dst_dir_fd=here, follow_symlinks=True)
    raise SystemExit("linked an O_EXCL tmpfile")
except OSError as e:
    assert e.errno == errno.ENOENT, e
os.close(fd)
"#;
        ok(&d, &["python3", "-c", script]);
        assert_eq!(std::fs::read(d.join("linked")).unwrap(), b"made unnamed");
        assert!(!d.join("never").exists());
    });
    m.unmount().expect("unmount");
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
