//! Set-user-ID and set-group-ID bits after a write by another user, checked the way
//! an attacker would use them, through exec, and through a fresh open and fstat in
//! another process: not with stat(2) on the path, which refreshes the attributes the
//! kernel caches and so can hide a stale mode that exec would still honour.
//!
//! Root mounts with `suid` (said explicitly: a pool another user can write is mounted
//! nosuid even for root). Root copies `id` to files owned by root with modes 04777 and
//! 02777; user 1000 runs them (`id -u` and `id -g` print the effective ids: 0 while the
//! bits hold), appends a byte from another process, and runs them again at once: the
//! ids must now be the user's.
//! tmpfs gets the same treatment as a reference (its baseline is skipped if /dev/shm
//! is mounted nosuid, as it often is).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lynxfs_fuse::mount::{mount_background, MountOptions};

use crate::spawn::{self, Creds, ExeCopy};
use crate::{GROUP, USER};

fn user() -> Creds {
    Creds {
        uid: USER,
        gid: GROUP,
        groups: vec![GROUP],
    }
}

/// Runs `cmd` as user 1000 and returns its output, trimmed; panics if it fails.
fn as_user(mut cmd: Command) -> String {
    spawn::with_creds(&mut cmd, &user());
    let done = spawn::run(cmd, Duration::from_secs(30));
    assert!(done.success, "failed: {}", done.output);
    done.output.trim().to_string()
}

/// `program -flag` run by user 1000: the effective uid (`-u`) or gid (`-g`).
fn effective_id(program: &Path, flag: &str) -> String {
    let mut cmd = Command::new(program);
    cmd.arg(flag);
    as_user(cmd)
}

/// Appends a byte to `path` from a shell run by user 1000.
fn append_as_user(path: &Path) {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", "printf '\\n' >> \"$1\"", "sh"]).arg(path);
    as_user(cmd);
}

/// Truncates `path` (an O_TRUNC open) from a shell run by user 1000.
fn truncate_as_user(path: &Path) {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", ": > \"$1\"", "sh"]).arg(path);
    as_user(cmd);
}

/// The mode a fresh process sees through open and fstat.
fn mode_by_fstat(exe: &Path, test: &str, path: &Path) -> String {
    let cmd = spawn::rerun(exe, test, &path.display().to_string());
    let done = spawn::run_role(cmd, Duration::from_secs(30));
    assert!(done.success, "fstat child failed: {}", done.output);
    // The harness prints "test NAME ... " before it, on the same line.
    let (_, after) = done
        .output
        .split_once("MODE=")
        .expect("the child prints MODE=");
    after.split_whitespace().next().unwrap_or("").to_string()
}

/// The child's part: open `path`, fstat, print the mode.
pub fn fstat_child(path: &str) {
    let f = std::fs::File::open(path).expect("open");
    let mode = f.metadata().expect("fstat").permissions().mode();
    println!("MODE={mode:o}");
}

/// What one file system shows: the effective (uid, gid) of the two programs before
/// and after the write, and their modes by open+fstat after it.
struct Seen {
    before: (String, String),
    after_exec: (String, String),
    after_fstat: (String, String),
    /// The mode of a 06777 file after user 1000 truncated it (O_TRUNC).
    truncated: String,
}

/// Copies /usr/bin/id to `path` in a child (`cp`): a program this process opened for
/// writing could not be run while any child another test thread forks meanwhile still
/// holds the descriptor (ETXTBSY until that child's exec closes it).
fn copy_program(path: &Path) {
    let mut cp = std::process::Command::new("cp");
    cp.arg("/usr/bin/id").arg(path);
    let done = spawn::run(cp, Duration::from_secs(30));
    assert!(
        done.success,
        "cp /usr/bin/id {}: {}",
        path.display(),
        done.output
    );
}

fn exercise(exe: &Path, test: &str, dir: &Path) -> Seen {
    let t = dir.join("t");
    std::fs::create_dir(&t).unwrap();
    std::fs::set_permissions(&t, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (suid, sgid, trunc) = (t.join("suid-id"), t.join("sgid-id"), t.join("trunc"));
    for (path, mode) in [(&suid, 0o4777), (&sgid, 0o2777), (&trunc, 0o6777)] {
        copy_program(path);
        spawn::chown(path, 0, 0);
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let before = (effective_id(&suid, "-u"), effective_id(&sgid, "-g"));
    append_as_user(&suid);
    append_as_user(&sgid);
    // Exec first: a fresh fstat would refresh the kernel's cached mode.
    let after_exec = (effective_id(&suid, "-u"), effective_id(&sgid, "-g"));
    let after_fstat = (
        mode_by_fstat(exe, test, &suid),
        mode_by_fstat(exe, test, &sgid),
    );
    truncate_as_user(&trunc);
    Seen {
        before,
        after_exec,
        after_fstat,
        truncated: mode_by_fstat(exe, test, &trunc),
    }
}

pub fn parent(test: &str, options: &str) {
    // SAFETY: geteuid cannot fail.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test must run as root");
    let _watchdog = lynxfs_test_support::watchdog(test, Duration::from_secs(180));
    let exe = ExeCopy::new();
    let shm = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let pool_dir = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let mnt = tempfile::tempdir().expect("mount point");
    for d in [shm.path(), mnt.path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let pool = crate::make_pool(pool_dir.path());
    let opts = MountOptions::parse(options).expect("options");
    let mount = mount_background(&pool, mnt.path(), &opts).expect("mounting the pool");
    let tmpfs = exercise(&exe.path, test, shm.path());
    let lynx = exercise(&exe.path, test, mnt.path());
    mount.unmount().expect("unmount");

    let user = (USER.to_string(), GROUP.to_string());
    let root = ("0".to_string(), "0".to_string());
    let cleared = ("100777".to_string(), "100777".to_string());
    println!(
        "tmpfs: before {:?}, after exec {:?}, fstat {:?}, truncated {}",
        tmpfs.before, tmpfs.after_exec, tmpfs.after_fstat, tmpfs.truncated
    );
    println!(
        "lynxfs [{options}]: before {:?}, after exec {:?}, fstat {:?}, truncated {}",
        lynx.before, lynx.after_exec, lynx.after_fstat, lynx.truncated
    );
    // The reference behaves as the test expects (where /dev/shm honours the bits).
    if tmpfs.before == root {
        assert_eq!(tmpfs.after_exec, user, "tmpfs: exec after the write");
    }
    assert_eq!(tmpfs.after_fstat, cleared, "tmpfs: mode after the write");
    assert_eq!(
        lynx.before, root,
        "the suid mount honours the bits before the write"
    );
    assert_eq!(
        lynx.after_exec, user,
        "exec after another user's write must not run as the owner"
    );
    assert_eq!(
        lynx.after_fstat, cleared,
        "mode by open+fstat after the write"
    );
    assert_eq!(tmpfs.truncated, "100777", "tmpfs: mode after O_TRUNC");
    assert_eq!(
        lynx.truncated, "100777",
        "mode after another user's O_TRUNC"
    );
}
