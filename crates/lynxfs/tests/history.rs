//! Concurrent histories through the library in one process (issue 42): four threads
//! rename, replace, exchange, remove, open and stat a few names
//! (`lynxfs_test_support::history_run`), every call timed, and the history must be
//! linearizable per name under Linux's semantics (`lynxfs_test_support::history`),
//! with the full-path areas on and off. The same histories through the kernel on
//! tmpfs and ext4 are the checker's control (lynxfs-test-support's tests/history.rs);
//! across processes: tests/multiprocess.rs. `LYNXFS_HISTORY_DUMP=PREFIX` writes each
//! case's history to PREFIX-true / PREFIX-false (areas on / off), to study a failure.

use std::time::Duration;

use crate::common::{fs, history_front::Lib};
use lynxfs_test_support::history::{check, parse, History};
use lynxfs_test_support::history_run::{run_threads, setup};

/// How long the threads call, per case, and the calls each makes at most.
const RUN: Duration = Duration::from_millis(1200);
const MAX_CALLS: usize = 60_000;
const THREADS: u32 = 4;

fn case(areas: bool) {
    let _dog =
        lynxfs_test_support::watchdog("history through the library", Duration::from_secs(120));
    let fs = fs(64 << 20);
    fs.ns().mechanisms.set_areas(areas);
    fs.session(lynxfs::Cred::root()).mkdir("/h", 0o755).unwrap();
    let front = Lib {
        fs: &fs,
        dir: "/h".into(),
    };
    let mut text = setup(&front).unwrap().join("\n");
    text.push('\n');
    text += &run_threads(&front, 0, THREADS, RUN, MAX_CALLS).join("\n");
    let mut h = History::default();
    parse(&text, &mut h).unwrap();
    if let Ok(dump) = std::env::var("LYNXFS_HISTORY_DUMP") {
        std::fs::write(format!("{dump}-{areas}"), &text).unwrap();
    }
    let checked = check(&h).unwrap_or_else(|v| panic!("areas {areas}: {v}"));
    eprintln!("areas {areas}: {checked:?}");
    assert!(checked.calls > 10_000, "only {} calls", checked.calls);
}

#[test]
fn histories_through_the_library_are_linearizable() {
    case(true);
    case(false);
}
