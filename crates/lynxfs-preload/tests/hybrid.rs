//! A hybrid pool (file data on a data device) under the preload: a program's sync(2)
//! or syncfs(2) commits the pool's running transaction (which holds every attached
//! process's writes), so a power loss after it keeps them; writes after it, or
//! without one, roll back (their files stay: namespace operations are durable when
//! they return).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions, Pool};
use lynxfs_test_support::{built, watchdog};

/// How long the whole test may run (the builds included).
const TEST_LIMIT: Duration = Duration::from_secs(400);

/// Writes `a`, calls sync(2) (or syncfs(2) on a pool descriptor: argv[1] "fs"), writes
/// `b`, and dies by SIGKILL: nothing closes the pool, and no other process runs (a
/// fork or exec could commit on its own).
const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
static int put(const char *name, const char *text) {
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) return -1;
    return fd;
}
int main(int argc, char **argv) {
    int a = put("a", "kept");
    if (a < 0) return 2;
    if (argc > 1 && strcmp(argv[1], "fs") == 0) {
        if (syncfs(a) != 0) return 3;
    } else if (argc > 1 && strcmp(argv[1], "none") == 0) {
    } else {
        sync();
    }
    close(a);
    int b = put("b", "lost");
    if (b < 0) return 4;
    kill(getpid(), SIGKILL);
    return 5;
}
"#;

fn file_bytes(fs: &Fs, name: &[u8]) -> Vec<u8> {
    let s = fs.session(Cred::root());
    let size = s.lstat(name).expect("lstat").size;
    let fd = s.open(name, libc::O_RDONLY, 0).expect("open");
    let mut buf = vec![0u8; size as usize];
    let n = fs.pread(fd, &mut buf, 0).expect("pread");
    fs.close_fd(fd).expect("close");
    buf.truncate(n);
    buf
}

fn private_runtime_dir(parent: &Path) -> std::path::PathBuf {
    let rt = parent.join("runtime");
    std::fs::create_dir(&rt).expect("mkdir runtime");
    std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    rt
}

/// Runs [`PROGRAM`] with `how` on a fresh hybrid pool under the preload, drops the
/// runtime state (a power loss), opens the pool again and returns `a` and `b`.
fn written_then_power_lost(how: &str) -> (Vec<u8>, Vec<u8>) {
    built::build(&["liblynxfs_preload.so"]).unwrap_or_else(|e| panic!("{e}"));
    let bin = built::target_dir();
    let tmp = tempfile::tempdir_in("/dev/shm").expect("tempdir");
    let pool = tmp.path().join("h.pool");
    let mut o = MkfsOptions::new(64 << 20);
    o.lanes = 2;
    o.data_device = Some(tmp.path().join("h.dev"));
    o.device_size = Some(256 << 20);
    Pool::mkfs(&pool, &o, PmemBackend::default()).expect("mkfs");
    let at = tmp.path().join("mnt");
    std::fs::create_dir(&at).expect("mkdir");
    let rt = private_runtime_dir(tmp.path());

    let prog = tmp.path().join("sync-c");
    let src = tmp.path().join("sync.c");
    std::fs::write(&src, PROGRAM).expect("write sync.c");
    let cc = Command::new("cc")
        .args(["-Wall", "-Werror", "-O1", "-o"])
        .arg(&prog)
        .arg(&src)
        .output()
        .expect("cc");
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    // The environment `lynxfs run` gives its program, without `lynxfs run`, which
    // stays attached while the program runs and would commit at its detach (a killed
    // program's writes are kept when nothing else fails): here the program is the only
    // process attached, and `timeout` waits for it to be gone.
    let out = Command::new("timeout")
        .args(["-k", "5", "120"])
        .arg(&prog)
        .arg(how)
        .current_dir(&at)
        .env("LD_PRELOAD", bin.join("liblynxfs_preload.so"))
        .env("LYNXFS_POOL", pool.canonicalize().expect("the pool's path"))
        .env(
            "LYNXFS_AT",
            at.canonicalize().expect("the directory's path"),
        )
        .env("LYNXFS_RUNTIME_DIR", &rt)
        .stdin(Stdio::null())
        .output()
        .expect("lynxfs run");
    assert!(
        !out.status.success() && out.status.code().is_none_or(|c| c > 128),
        "the program was to die by SIGKILL: {} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The power loss: the runtime state (in DRAM) is gone; the pool file and the
    // device's flushed bytes are what remains. (This process's own runtime directory
    // is another one, so the next open finds the pool in use by nobody, unclean.)
    std::fs::remove_dir_all(&rt).expect("drop the runtime state");

    let fs = Fs::open(&pool).expect("open after the loss");
    assert!(!fs.pool().was_clean, "the program never closed the pool");
    let got = (file_bytes(&fs, b"/a"), file_bytes(&fs, b"/b"));
    let rep = lynxfs::fsck::check(fs.pool());
    assert!(rep.is_clean(), "{:?}", rep.problems);
    fs.close().expect("close");
    got
}

#[test]
fn sync_commits_and_a_power_loss_keeps_what_it_committed() {
    let _w = watchdog("hybrid sync", TEST_LIMIT);
    let (a, b) = written_then_power_lost("sync");
    assert_eq!(a, b"kept", "a was written before sync(2)");
    assert_eq!(
        b, b"",
        "b's write was never committed: rolled back, its create kept"
    );
}

#[test]
fn syncfs_on_a_pool_descriptor_commits() {
    let _w = watchdog("hybrid syncfs", TEST_LIMIT);
    let (a, b) = written_then_power_lost("fs");
    assert_eq!(a, b"kept", "a was written before syncfs(2)");
    assert_eq!(b, b"");
}

#[test]
fn without_a_sync_a_power_loss_rolls_the_writes_back() {
    let _w = watchdog("hybrid no sync", TEST_LIMIT);
    let (a, b) = written_then_power_lost("none");
    assert_eq!((a, b), (Vec::new(), Vec::new()), "nothing committed them");
}
