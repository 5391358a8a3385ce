//! Concurrent histories through the preload and the FUSE mount (issue 42): the
//! `lynxfs-history` recorder (threads renaming, replacing, exchanging, removing,
//! opening and stating a few names, every call timed: `lynxfs_test_support::
//! history_run`) runs in two processes of two threads, and the history is checked
//! against Linux's semantics (`lynxfs_test_support::history`):
//! - both processes under `lynxfs run` (the preload: the library's code paths and
//!   the shared runtime state): linearizable per name, as through the library;
//! - both through the mount (the kernel's caches in front of the daemon):
//!   linearizable per name, as on tmpfs;
//! - one preloaded, the other through the mount, each way round: the mount promises
//!   less, since its kernel caches follow the daemon's change notices, not the
//!   index: a name that names a file throughout is never ENOENT, and a read that saw
//!   a file already replaced (stale) is counted and its age bounded.
//!
//! The same histories through the kernel on tmpfs and ext4 are the checker's
//! control (lynxfs-test-support's tests/history.rs). Needs root (a FUSE mount).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lynxfs_test_support::built::{history_recorder, preload as built};
use lynxfs_test_support::history::{check, never_missing, staleness, History, Staleness};
use lynxfs_test_support::history_run::{record_processes, Argv, Recording};
use lynxfs_test_support::{child, watchdog};

/// How long each process records, and the calls each thread makes at most (what
/// bounds the check's time).
const RUN: Duration = Duration::from_millis(1500);
const MAX_CALLS: u64 = 60_000;
/// How long one command may run, and a whole test.
const LIMIT: Duration = Duration::from_secs(120);
const TEST_LIMIT: Duration = Duration::from_secs(300);
/// How stale a read through the mount may be: the change notice's trip from the
/// writer's process through the daemon's forwarder to the kernel (the stalest read
/// 0.9-35 ms after the replacement on a 2-core machine busy with builds,
/// docs/CONSISTENCY.md; the bound leaves room for worse scheduling).
const STALE_BOUND: Duration = Duration::from_secs(1);

/// A fresh 64 MiB pool in a temporary directory of /dev/shm (so it gets the pmem
/// backend, as a pool there does: on a disk file system each fence is an msync),
/// with a directory `at` for its paths (mounted there by [`Pool::mount`]);
/// unmounted when dropped.
struct Pool {
    _dir: tempfile::TempDir,
    pool: PathBuf,
    at: PathBuf,
    mounted: bool,
}

impl Pool {
    fn new() -> Pool {
        let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir");
        let pool = dir.path().join("p.pool");
        let at = dir.path().join("at");
        std::fs::create_dir(&at).unwrap();
        run_ok(
            Command::new(&built().lynxfs)
                .args(["mkfs", "--size", "64M"])
                .arg(&pool),
            "mkfs",
        );
        Pool {
            _dir: dir,
            pool,
            at,
            mounted: false,
        }
    }

    fn mount(&mut self) {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "needs root (a FUSE mount)");
        run_ok(
            Command::new(&built().lynxfs)
                .arg("mount")
                .arg(&self.pool)
                .arg(&self.at),
            "mount",
        );
        self.mounted = true;
    }

    /// `argv` under `lynxfs run` on the pool, its paths at `at`.
    fn preloaded(&self, argv: &[impl AsRef<OsStr>]) -> Command {
        let mut c = built().run(&self.pool, &self.at);
        c.args(argv);
        c
    }

    /// The names' directory, made through the preload (or the mount, if mounted).
    fn names_dir(&self) -> PathBuf {
        let dir = self.at.join("h");
        run_ok(
            &mut self.preloaded(&[OsStr::new("mkdir"), dir.as_os_str()]),
            "mkdir",
        );
        dir
    }

    /// The history of two processes of two threads in `dir`, process `k` (and the
    /// setup, `None`) preloaded if `preloaded(k)`, else plain (through the mount).
    fn record(&self, dir: &Path, preloaded: &dyn Fn(Option<usize>) -> bool) -> History {
        let r = Recording {
            exe: history_recorder(),
            dir,
            threads: 2,
            run: RUN,
            max_calls: MAX_CALLS,
        };
        let command = |k: Option<usize>, argv: Argv| {
            if preloaded(k) {
                self.preloaded(&argv[..])
            } else {
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]);
                c
            }
        };
        record_processes(&r, 2, &command).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `lynxfs fsck` of the pool (after unmounting it) says it is clean.
    fn unmount_and_check(mut self) {
        self.unmount();
        run_ok(
            Command::new(&built().lynxfs).arg("fsck").arg(&self.pool),
            "fsck",
        );
    }

    fn unmount(&mut self) {
        if std::mem::take(&mut self.mounted) {
            run_ok(
                Command::new(&built().lynxfs).arg("umount").arg(&self.at),
                "umount",
            );
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if self.mounted {
            let _ = child::run_bounded(
                Command::new(&built().lynxfs).arg("umount").arg(&self.at),
                "umount",
                LIMIT,
            );
        }
    }
}

fn run_ok(cmd: &mut Command, what: &str) {
    let out = child::run_bounded(cmd, what, LIMIT);
    assert!(
        out.status.success(),
        "{what} ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Fails unless `h` is linearizable per name, with enough calls to mean something.
fn assert_linearizable(what: &str, h: &History) {
    let t = std::time::Instant::now();
    let checked = check(h).unwrap_or_else(|v| panic!("{what}: {v}"));
    eprintln!("{what}: {checked:?}, checked in {:?}", t.elapsed());
    assert!(checked.calls > 2000, "{what}: only {} calls", checked.calls);
}

#[test]
fn histories_through_the_preload_are_linearizable() {
    let _dog = watchdog("histories through the preload", TEST_LIMIT);
    let pool = Pool::new();
    let dir = pool.names_dir();
    let h = pool.record(&dir, &|_| true);
    assert_linearizable("preload", &h);
    pool.unmount_and_check();
}

#[test]
fn histories_through_the_mount_are_linearizable() {
    let _dog = watchdog("histories through the mount", TEST_LIMIT);
    let mut pool = Pool::new();
    pool.mount();
    let dir = pool.at.join("h");
    std::fs::create_dir(&dir).unwrap();
    let h = pool.record(&dir, &|_| false);
    assert_linearizable("mount", &h);
    pool.unmount_and_check();
}

/// One process preloaded (`preloaded_first`: the first, whose thread 0 alone moves
/// `m0` onto `n0`), the other through the mount: never ENOENT for a name that names
/// a file throughout, and every stale read younger than [`STALE_BOUND`].
fn mixed(preloaded_first: bool) {
    let _dog = watchdog("histories through the preload and the mount", TEST_LIMIT);
    let mut pool = Pool::new();
    pool.mount();
    let dir = pool.names_dir();
    // The setup (`None`) is preloaded: either way the names start out the same.
    let h = pool.record(&dir, &|k| match k {
        None => true,
        Some(k) => (k == 0) == preloaded_first,
    });
    let what = format!("preloaded first: {preloaded_first}");
    let reads = never_missing(&h).unwrap_or_else(|v| panic!("{what}: {v}"));
    let s: Staleness = staleness(&h).unwrap_or_else(|v| panic!("{what}: {v}"));
    eprintln!(
        "{what}: {} calls, {reads} reads of names never removed, {} of {} opens of a \
         replaced name stale, the stalest by {:?}",
        h.calls.len(),
        s.stale,
        s.reads,
        Duration::from_nanos(s.max_ns)
    );
    assert!(reads > 1000, "{what}: only {reads} reads");
    assert!(
        Duration::from_nanos(s.max_ns) < STALE_BOUND,
        "{what}: a read was stale by {:?}",
        Duration::from_nanos(s.max_ns)
    );
    pool.unmount_and_check();
}

#[test]
fn through_the_preload_and_the_mount_no_name_is_missing_and_staleness_is_bounded() {
    mixed(true);
    mixed(false);
}
