//! A root program that gives up root before its first pool call: it may not attach
//! the pool (its file is root's, 0600), so each pool path answers what the kernel
//! would give such a process, EACCES, or, where the pool's FUSE mount serves the
//! directory, goes through the mount; never a permanent EIO. Once it takes root back,
//! it attaches. (The permission table rows for setfsuid, capabilities, per-thread raw
//! system calls and a drop after the attach are in tests/calls.c, "credentials".)

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions, Pool};
use lynxfs_test_support::built::preload as built;
use lynxfs_test_support::{child, watchdog};

const LIMIT: Duration = Duration::from_secs(120);
const TEST_LIMIT: Duration = Duration::from_secs(400);

/// Gives up root (effective ids only, so it can take it back), then reaches the pool
/// file DIR/f; takes root back and reaches it again. One line per step.
const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void reach(const char *path) {
    struct stat st;
    int r = stat(path, &st);
    printf("stat %s\n", r == 0 ? "0" : strerrorname_np(errno));
    int fd = open(path, O_RDONLY);
    char buf[16] = {0};
    if (fd < 0 || read(fd, buf, sizeof buf - 1) < 0)
        printf("read %s\n", strerrorname_np(errno));
    else
        printf("read %s\n", buf);
    if (fd >= 0)
        close(fd);
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    if (setegid(65534) || seteuid(65534))
        return 3;
    reach(argv[1]);
    if (seteuid(0) || setegid(0))
        return 4;
    reach(argv[1]);
    return 0;
}
"#;

fn build_program(dir: &Path) -> PathBuf {
    let src = dir.join("drop.c");
    let exe = dir.join("drop-c");
    std::fs::write(&src, PROGRAM).expect("write drop.c");
    let out = child::run_bounded(
        Command::new("cc")
            .args(["-Wall", "-Wextra", "-Werror", "-O1", "-o"])
            .arg(&exe)
            .arg(&src),
        "cc drop.c",
        LIMIT,
    );
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// The program under `lynxfs run` on `pool` at `at`, started outside the pool.
fn run_dropping(pool: &Path, at: &Path, program: &Path) -> String {
    let b = built();
    let out = child::run_bounded(
        b.run(pool, at)
            .arg(program)
            .arg(at.join("f"))
            .current_dir("/"),
        "the program that drops root",
        LIMIT,
    );
    assert!(
        out.status.success(),
        "{}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn root_only() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "needs root (it gives root up)");
}

#[test]
fn dropping_root_before_the_first_call_answers_eacces_until_root_is_back() {
    let _w = watchdog("creds: no mount", TEST_LIMIT);
    root_only();
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let program = build_program(tmp.path());
    let pool = tmp.path().join("p.pool");
    let mut o = MkfsOptions::new(64 << 20);
    o.lanes = 2;
    Pool::mkfs(&pool, &o, PmemBackend::default()).expect("mkfs");
    std::fs::set_permissions(&pool, std::fs::Permissions::from_mode(0o600)).unwrap();
    {
        let fs = Fs::open(&pool).expect("open");
        let s = fs.session(Cred::root());
        let fd = s.create("/f", 0o644).expect("create");
        fs.write(fd, b"pool").expect("write");
        fs.close_fd(fd).expect("close");
        drop(s);
        fs.close().expect("close the pool");
    }
    let at = tmp.path().join("d");
    std::fs::create_dir(&at).unwrap();
    let out = run_dropping(&pool, &at, &program);
    assert_eq!(
        out, "stat EACCES\nread EACCES\nstat 0\nread pool\n",
        "without a mount"
    );
}

#[test]
fn dropping_root_before_the_first_call_goes_through_the_mount() {
    let _w = watchdog("creds: mount", TEST_LIMIT);
    root_only();
    let b = built();
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let program = build_program(tmp.path());
    let pool = tmp.path().join("p.pool");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let ok = |cmd: &mut Command, what: &str| {
        let out = child::run_bounded(cmd, what, LIMIT);
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ok(
        Command::new(&b.lynxfs)
            .args(["mkfs", "--size", "64M"])
            .arg(&pool),
        "mkfs",
    );
    std::fs::set_permissions(&pool, std::fs::Permissions::from_mode(0o600)).unwrap();
    ok(
        Command::new(&b.lynxfs)
            .args(["mount", "-o", "allow_other"])
            .arg(&pool)
            .arg(&mnt),
        "mount",
    );
    std::fs::write(mnt.join("f"), b"pool").expect("write through the mount");
    let out = std::panic::catch_unwind(|| run_dropping(&pool, &mnt, &program));
    ok(Command::new(&b.lynxfs).arg("umount").arg(&mnt), "umount");
    let out = out.unwrap_or_else(|e| std::panic::resume_unwind(e));
    assert_eq!(
        out, "stat 0\nread pool\nstat 0\nread pool\n",
        "through the mount"
    );
}
