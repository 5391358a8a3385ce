//! A write by another user clears the set-user-ID bit, and the kernel must not run
//! the file with the stale bit it cached (issue 11, item 5). The engine clears the bit
//! in the pool during the write, but FUSE answers a write without attributes, so the
//! kernel's cached mode still said 04777 for up to the attribute timeout, and exec
//! granted the owner's uid: `nobody` appending one byte to a root-owned 04777 copy of
//! `id` and running it got uid 0 (tmpfs: 65534).
//!
//! Needs root, `/dev/fuse` and a `nobody` uid (65534); every child is bounded.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lynxfs::pmem::PmemBackend;
use lynxfs::{MkfsOptions, Pool};
use lynxfs_fuse::mount::{mount_background, MountOptions};

const NOBODY: u32 = 65534;

/// Runs `sh -c script` as `nobody` with `arg` as $1, bounded; returns stdout.
fn as_nobody(script: &str, arg: &Path) -> String {
    let mut child = Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(arg)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sh as nobody");
    let end = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < end, "sh as nobody did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Copies `id` into `dir` as root 04777, warms the kernel's attribute cache, lets
/// `nobody` append a byte and run it: the uid it runs with.
fn uid_after_foreign_write(dir: &Path) -> String {
    let exe = dir.join("id-copy");
    fs::copy("/usr/bin/id", &exe).expect("copy id");
    fs::set_permissions(&exe, fs::Permissions::from_mode(0o4777)).unwrap();
    assert_eq!(
        fs::metadata(&exe).unwrap().permissions().mode() & 0o7777,
        0o4777
    );
    as_nobody(r#"printf x >> "$1" && "$1" -u"#, &exe)
}

fn world_searchable_dir(parent: &Path) -> tempfile::TempDir {
    let d = tempfile::tempdir_in(parent).unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    d
}

#[test]
fn a_foreign_write_drops_setuid_before_exec_can_use_it() {
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing");
    let _dog = lynxfs_test_support::watchdog("the killpriv test", Duration::from_secs(120));
    let tmp = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = tmp.path().join("pool");
    Pool::mkfs(&pool, &MkfsOptions::new(64 << 20), PmemBackend::default()).unwrap();
    let mnt = world_searchable_dir(Path::new("/tmp"));
    // Attributes cached long enough that a stale mode would be used.
    let opts = MountOptions::parse("allow_other,suid,attr_timeout=30,entry_timeout=30").unwrap();
    let m = mount_background(&pool, mnt.path(), &opts).expect("mount");
    let uid = uid_after_foreign_write(mnt.path());
    let mode = fs::metadata(mnt.path().join("id-copy"))
        .unwrap()
        .permissions()
        .mode();
    m.unmount().expect("unmount");
    assert_eq!(uid, NOBODY.to_string(), "exec used a stale set-user-ID bit");
    assert_eq!(mode & 0o7777, 0o777, "the write cleared S_ISUID");

    // The same steps on tmpfs give the same answer (the test is right about Linux).
    let shm = world_searchable_dir(Path::new("/dev/shm"));
    assert_eq!(uid_after_foreign_write(shm.path()), NOBODY.to_string());
}
