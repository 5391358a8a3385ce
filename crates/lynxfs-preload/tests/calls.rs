//! The calls liblynxfs_preload.so replaces, each against the kernel's semantics:
//! tests/calls.c (built with `cc -Wall -Wextra -Werror`) prints every call's result
//! and errno; it runs preloaded in a directory D served by a fresh pool and plainly
//! in a tmpfs directory T, and the two outputs must be identical.
//!
//! Known differences, printed by calls.c with a leading "~ " and left out of the
//! comparison (each is still run, so a crash in one fails the test):
//! - open(O_PATH | O_NOFOLLOW) of a symlink: the kernel opens the link itself; the
//!   preload fails with ELOOP (no O_PATH fds of the pool).
//! - fchown(fd, -1, -1) as root: the kernel clears set-user-ID and set-group-ID
//!   (group-executable) on a regular file even when no id changes; the engine does not.
//! - FS_IOC_FIEMAP on a pool file: the preload lists its extents; tmpfs has no FIEMAP
//!   (EOPNOTSUPP).
//! - Other ioctls on a pool file (FIONREAD, FS_IOC_GETFLAGS, ...): they reach the
//!   library's stand-in fd (an eventfd), which says ENOTTY; the preload serves only
//!   FIGETBSZ and FS_IOC_FIEMAP.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use lynxfs::pmem::PmemBackend;
use lynxfs::{MkfsOptions, Pool};
use lynxfs_test_support::{built, watchdog};

/// How long the whole test may run (the builds included).
const TEST_LIMIT: Duration = Duration::from_secs(400);

/// Runs `cmd`, failing the test with its stderr when it fails.
fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Builds lynxfs and liblynxfs_preload.so (cargo test builds no cdylib) and calls.c.
fn build(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    built::build(&["lynxfs", "liblynxfs_preload.so"]).unwrap_or_else(|e| panic!("{e}"));
    let calls = dir.join("calls-c");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/calls.c");
    run_ok(
        Command::new("cc")
            .args(["-Wall", "-Wextra", "-Werror", "-O1", "-o"])
            .arg(&calls)
            .arg(&src),
        "cc calls.c",
    );
    (dir.join("lynxfs"), dir.join("liblynxfs_preload.so"), calls)
}

/// The output without the known differences' lines.
fn compared(out: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(out)
        .lines()
        .filter(|l| !l.starts_with("~ "))
        .map(str::to_string)
        .collect()
}

/// A directory `d` inside a fresh parent (its sibling file is the parent's "sib").
fn nest(parent: &Path) -> PathBuf {
    let d = parent.join("d");
    std::fs::create_dir(&d).expect("mkdir");
    d
}

#[test]
fn every_replaced_call_answers_as_the_kernel_does() {
    let _w = watchdog("calls", TEST_LIMIT);
    let (lynxfs, preload, calls) = build(&built::target_dir());
    let pool = PathBuf::from(format!("/dev/shm/lynxfs-calls-{}.pool", std::process::id()));
    let mut o = MkfsOptions::new(128 << 20);
    o.lanes = 2;
    o.force = true;
    Pool::mkfs(&pool, &o, PmemBackend::default()).expect("mkfs");
    let dp = tempfile::tempdir().expect("D's parent");
    let tp = tempfile::tempdir_in("/dev/shm").expect("T's parent");
    let (d, t) = (nest(dp.path()), nest(tp.path()));
    // `timeout` kills a run that hangs (its children too: --kill-after).
    let on_tmpfs = run_ok(
        Command::new("timeout")
            .args(["-k", "5", "120"])
            .arg(&calls)
            .arg("sib")
            .arg(tp.path().join("sib"))
            .current_dir(&t),
        "calls on tmpfs",
    );
    let preloaded = run_ok(
        Command::new("timeout")
            .args(["-k", "5", "120"])
            .arg(&lynxfs)
            .arg("run")
            .arg("--pool")
            .arg(&pool)
            .arg("--at")
            .arg(&d)
            .arg("--")
            .arg(&calls)
            .arg("sib")
            .arg(dp.path().join("sib"))
            .current_dir(&d)
            .env("LYNXFS_PRELOAD_LIB", &preload),
        "calls under lynxfs run",
    );
    let _ = std::fs::remove_file(&pool);
    let (got, want) = (compared(&preloaded.stdout), compared(&on_tmpfs.stdout));
    assert_eq!(
        want.last().map(String::as_str),
        Some("== end"),
        "tmpfs run ended early"
    );
    let diff: Vec<String> = want
        .iter()
        .zip(&got)
        .filter(|(w, g)| w != g)
        .map(|(w, g)| format!("kernel: {w}\npreload: {g}"))
        .take(20)
        .collect();
    assert!(
        diff.is_empty() && got.len() == want.len(),
        "{} lines differ (of {} and {} lines):\n{}",
        diff.len(),
        want.len(),
        got.len(),
        diff.join("\n")
    );
    assert_eq!(
        std::fs::read_dir(&d).expect("D").count(),
        0,
        "the preloaded run wrote to D's own file system"
    );
}
