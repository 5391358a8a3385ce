//! The history checker's control (issue 42): histories recorded through the kernel
//! on tmpfs and on ext4, by two processes of two threads each, must be linearizable
//! per name. The checker's own unit tests (`history::tests`) show it failing
//! histories that are not.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lynxfs_test_support::history::{check, History};
use lynxfs_test_support::history_run::{record_processes, Recording};
use lynxfs_test_support::watchdog;

/// How long each process records, and the calls each thread makes at most (what
/// bounds the check's time).
const RUN: Duration = Duration::from_millis(1500);
const MAX_CALLS: u64 = 60_000;

/// The history of two processes of two threads calling in `dir` (empty).
fn record(dir: &Path) -> History {
    let r = Recording {
        exe: Path::new(env!("CARGO_BIN_EXE_lynxfs-history")),
        dir,
        threads: 2,
        run: RUN,
        max_calls: MAX_CALLS,
    };
    record_processes(&r, 2, &|_, argv| {
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]);
        c
    })
    .unwrap()
}

fn control(parent: &str) {
    let _dog = watchdog::watchdog(
        &format!("history control in {parent}"),
        Duration::from_secs(120),
    );
    let dir = tempfile::Builder::new()
        .prefix("lynxfs-history")
        .tempdir_in(parent)
        .unwrap();
    let h = record(dir.path());
    let t = std::time::Instant::now();
    let checked = check(&h).unwrap_or_else(|v| panic!("{parent}: {v}"));
    eprintln!("{parent}: {checked:?}, checked in {:?}", t.elapsed());
    assert!(checked.calls > 1000, "only {} calls", checked.calls);
}

#[test]
fn the_kernels_histories_on_tmpfs_are_linearizable() {
    control("/dev/shm");
}

#[test]
fn the_kernels_histories_on_ext4_are_linearizable() {
    control("/var/tmp");
}
