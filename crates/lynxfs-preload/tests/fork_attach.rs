//! A fork while other threads are inside the process's first pool call (the attach)
//! never leaves the child hung: tests/fork_attach.c forks round after round while two
//! threads attach, and each child makes a pool call of its own within a time limit (a
//! child's alarm kills one that hangs, and the round counts it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lynxfs::pmem::PmemBackend;
use lynxfs::{MkfsOptions, Pool};
use lynxfs_test_support::built::preload as built;
use lynxfs_test_support::{child, watchdog};

/// How long the whole test may run (the builds included).
const TEST_LIMIT: Duration = Duration::from_secs(400);
/// How long the program may run: every round's children hung would take 5 s a round.
const RUN_LIMIT: Duration = Duration::from_secs(200);
/// Rounds of forks: the hang this guards against showed in about half the rounds.
const ROUNDS: &str = "30";

/// tests/fork_attach.c, built into `dir`.
fn build_program(dir: &Path) -> PathBuf {
    let exe = dir.join("fork-attach-c");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fork_attach.c");
    let out = child::run_bounded(
        Command::new("cc")
            .args(["-Wall", "-Wextra", "-Werror", "-O1", "-pthread", "-o"])
            .arg(&exe)
            .arg(&src),
        "cc fork_attach.c",
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn a_fork_during_the_first_pool_call_never_hangs_the_child() {
    let _w = watchdog("fork_attach", TEST_LIMIT);
    let b = built();
    let tmp = tempfile::tempdir().expect("tempdir");
    let program = build_program(tmp.path());
    let pool = PathBuf::from(format!(
        "/dev/shm/lynxfs-fork-attach-{}.pool",
        std::process::id()
    ));
    let mut o = MkfsOptions::new(64 << 20);
    o.lanes = 2;
    o.force = true;
    Pool::mkfs(&pool, &o, PmemBackend::default()).expect("mkfs");
    let d = tmp.path().join("d");
    std::fs::create_dir(&d).expect("mkdir D");
    let out = child::run_bounded(
        b.run(&pool, &d).arg(&program).arg(&d).arg(ROUNDS),
        "fork_attach under lynxfs run",
        RUN_LIMIT,
    );
    let _ = std::fs::remove_file(&pool);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("rounds {ROUNDS} hung 0 failed 0")),
        "{stdout}"
    );
}
