//! `lynxfs bench ARGS` runs `lynxfs-bench ARGS` (beside the `lynxfs` executable, else
//! on the PATH), or says how to get it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use lynxfs_test_support::child::output_within;

const BIN: &str = env!("CARGO_BIN_EXE_lynxfs");
const LIMIT: Duration = Duration::from_secs(60);

/// Held by each test for its whole run. A test writes an executable and then runs it;
/// if the other test forks while that file is still open for writing, the fork's
/// child holds the descriptor until its exec, and running the file fails with
/// ETXTBSY ("Text file busy": 1 run in 40 here). One test at a time, no such fork.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn alone() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A directory holding a copy of `lynxfs` (a copy: the executable finds itself by
/// its real path, which a symlink would not change).
fn install_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::copy(BIN, d.path().join("lynxfs")).unwrap();
    d
}

/// A stand-in `lynxfs-bench` in `dir` that prints its name and arguments.
fn fake_bench(dir: &Path) {
    let p = dir.join("lynxfs-bench");
    std::fs::write(&p, "#!/bin/sh\necho \"$0|$*\"\nexit 3\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn bench_runs_the_harness_beside_it_with_every_argument() {
    let _alone = alone();
    let d = install_dir();
    fake_bench(d.path());
    let o = output_within(
        Command::new(d.path().join("lynxfs"))
            .args(["bench", "syscalls", "--files", "5", "--help"])
            .env("PATH", "/nonexistent"),
        LIMIT,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "the harness's exit code: {out}");
    let (_, args) = out.trim_end().split_once('|').expect("the stand-in ran");
    assert_eq!(args, "syscalls --files 5 --help");
}

#[test]
fn bench_finds_the_harness_on_the_path_and_says_when_it_is_nowhere() {
    let _alone = alone();
    let d = install_dir();
    let o = output_within(
        Command::new(d.path().join("lynxfs"))
            .args(["bench", "syscalls"])
            .env("PATH", "/nonexistent"),
        LIMIT,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(8), "{err}");
    assert!(
        err.contains("lynxfs-bench") && err.contains("cargo build --release -p lynxfs-bench"),
        "{err}"
    );
    let on_path = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    fake_bench(on_path.path());
    let o = output_within(
        Command::new(d.path().join("lynxfs"))
            .args(["bench", "data"])
            .env("PATH", on_path.path()),
        LIMIT,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.trim_end().ends_with("|data"), "{out}");
}
