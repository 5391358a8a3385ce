//! Locks through the mount behave as on a local file system, with tmpfs as the
//! control: xfstests generic/478's OFD and classic lock sequences give the same
//! answers; a cycle of classic lock waits gets EDEADLK for one request, as the
//! kernel gives (issue 42, defects 6 and 11); a waiter blocked in the kernel gets
//! the lock at its holder's unlock or close; and many waiters cost the daemon
//! neither CPU nor a thread each.
//!
//! The sequences are tests/locks.c's, built with `cc`. Needs root (a tmpfs mount),
//! `/dev/fuse` and `cc`. Every child runs within a time limit and a watchdog covers
//! each test; the tests take turns (one measures the daemon's threads).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use lynxfs::pmem::PmemBackend;
use lynxfs::{MkfsOptions, Pool};
use lynxfs_fuse::mount::{mount_background, MountOptions};
use lynxfs_test_support::child::{kill_group, run_bounded, wait_within};
use lynxfs_test_support::scratch::Tmpfs;
use lynxfs_test_support::watchdog;
use tempfile::TempDir;

/// How long one run of the helper may take.
const LIMIT: Duration = Duration::from_secs(120);
/// How long a whole test may take.
const TEST_LIMIT: Duration = Duration::from_secs(300);

/// One test at a time (see the module documentation).
static TURN: Mutex<()> = Mutex::new(());

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// tests/locks.c, built once.
fn helper() -> &'static Path {
    static BUILT: OnceLock<(TempDir, PathBuf)> = OnceLock::new();
    &BUILT
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let exe = dir.path().join("locks");
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/locks.c");
            let out = run_bounded(
                Command::new("cc")
                    .args(["-Wall", "-Wextra", "-Werror", "-O1", "-pthread"])
                    .arg(&src)
                    .arg("-o")
                    .arg(&exe),
                "cc locks.c",
                LIMIT,
            );
            assert!(out.status.success(), "cc locks.c: {}", text(&out.stderr));
            (dir, exe)
        })
        .1
}

/// A mounted pool (in /dev/shm, so it has lock stand-ins) with a 4 KiB file `f`.
struct Mounted {
    _dir: TempDir,
    mnt: TempDir,
    m: Option<lynxfs_fuse::mount::LynxMount>,
}

impl Mounted {
    fn new() -> Mounted {
        Mounted::with("")
    }
    fn with(o: &str) -> Mounted {
        assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing");
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let pool = dir.path().join("pool");
        Pool::mkfs(&pool, &MkfsOptions::new(64 << 20), PmemBackend::default()).expect("mkfs");
        let mnt = tempfile::tempdir().unwrap();
        let opts = MountOptions::parse(o).unwrap();
        let m = mount_background(&pool, mnt.path(), &opts).expect("mount");
        std::fs::write(mnt.path().join("f"), [0u8; 4096]).unwrap();
        Mounted {
            _dir: dir,
            mnt,
            m: Some(m),
        }
    }
    fn file(&self) -> PathBuf {
        self.mnt.path().join("f")
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(m) = self.m.take() {
            m.unmount().expect("unmount");
        }
    }
}

/// A tmpfs with a 4 KiB file `f`, the control.
fn control() -> (TempDir, Tmpfs, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let t = Tmpfs::mount(d.path());
    let f = d.path().join("f");
    std::fs::write(&f, [0u8; 4096]).unwrap();
    (d, t, f)
}

fn run(args: &[&str], file: &Path, what: &str) -> String {
    let out = run_bounded(
        Command::new(helper())
            .arg(args[0])
            .arg(file)
            .args(&args[1..]),
        what,
        LIMIT,
    );
    assert!(
        out.status.success(),
        "{what}: {:?}\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// generic/478: a lock whose open file's last descriptor a child cloned with
/// CLONE_FILES closed is gone for the next GETLK, though FUSE sends the RELEASE that
/// drops it after the close has returned; dup and close, or a child's close of its
/// own copy, leave OFD locks be and drop POSIX ones as the kernel does. Several
/// rounds: the RELEASE races the query.
#[test]
fn generic_478_sequences_answer_as_on_tmpfs() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let _w = watchdog("generic_478_sequences_answer_as_on_tmpfs", TEST_LIMIT);
    let (_d, _t, f) = control();
    let want = run(&["478"], &f, "478 on tmpfs");
    assert!(
        want.contains("OFD O_RDONLY set rdlck, clone with CLONE_FILES, close, get wrlck: lock could be placed"),
        "the control: {want}"
    );
    let m = Mounted::new();
    for round in 0..2 {
        let got = run(&["478"], &m.file(), "478 on the mount");
        let diff: Vec<String> = want
            .lines()
            .zip(got.lines())
            .filter(|(w, g)| w != g)
            .map(|(w, g)| format!("  tmpfs: {w}\n  mount: {g}"))
            .collect();
        assert!(
            diff.is_empty() && want.lines().count() == got.lines().count(),
            "round {round}: the mount answers otherwise:\n{}",
            diff.join("\n")
        );
    }
}

/// A cycle of classic lock waits between processes through the mount (two and three
/// processes): the request that closes it gets EDEADLK, the others their locks, as
/// on tmpfs; before, both waited forever.
#[test]
fn a_lock_cycle_through_the_mount_gets_edeadlk_as_on_tmpfs() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let _w = watchdog(
        "a_lock_cycle_through_the_mount_gets_edeadlk_as_on_tmpfs",
        TEST_LIMIT,
    );
    let (_d, _t, f) = control();
    let m = Mounted::new();
    for n in ["2", "3"] {
        let want = run(&["cycle", n], &f, "a cycle on tmpfs");
        assert_eq!(
            want,
            format!(
                "{n} processes: {} got the lock, 1 EDEADLK, 0 another error\n",
                n.parse::<u32>().unwrap() - 1
            ),
            "the control"
        );
        let got = run(&["cycle", n], &m.file(), "a cycle through the mount");
        assert_eq!(got, want, "through the mount");
    }
}

/// A process waiting in the kernel for a POSIX, OFD or flock lock through the mount
/// gets it when its holder lets go, by an unlock or a close (FLUSH drops POSIX
/// locks, RELEASE OFD locks and flock), as on tmpfs: RELEASE no longer wakes the
/// daemon's lock sleepers when none sleeps (issue 44, stop 54), and this is the
/// guard that the waits it serves still end. Twice, with io_uring and without.
#[test]
fn a_blocked_waiter_gets_the_lock_at_an_unlock_or_a_close_as_on_tmpfs() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let _w = watchdog(
        "a_blocked_waiter_gets_the_lock_at_an_unlock_or_a_close_as_on_tmpfs",
        TEST_LIMIT,
    );
    let (_d, _t, f) = control();
    let want = run(&["wake"], &f, "wake on tmpfs");
    assert_eq!(want.lines().count(), 6, "the control: {want}");
    assert!(
        want.lines().all(|l| l.ends_with("the waiter got it")),
        "the control: {want}"
    );
    for o in ["io_uring=on", "io_uring=off"] {
        let m = Mounted::with(o);
        let got = run(&["wake"], &m.file(), "wake through the mount");
        assert_eq!(got, want, "{o}");
    }
}

/// (threads, CPU time) of this process's threads serving lock waits.
fn lock_threads() -> (usize, Duration) {
    let tick = 1e9 / clock_ticks() as f64;
    let mut n = 0;
    let mut cpu = 0u64;
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(comm) = std::fs::read_to_string(t.path().join("comm")) else {
            continue;
        };
        if !comm.starts_with("lynxfs-lock") {
            continue;
        }
        n += 1;
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        // Fields after the command's closing parenthesis: utime and stime are the
        // 12th and 13th.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<u64> = rest
            .split(' ')
            .skip(11)
            .take(2)
            .map(|x| x.parse().unwrap())
            .collect();
        cpu += f[0] + f[1];
    }
    (n, Duration::from_nanos((cpu as f64 * tick) as u64))
}

fn clock_ticks() -> i64 {
    // SAFETY: sysconf takes a plain integer and has no other precondition.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }
}

/// Many waits for one lock through the mount: the daemon serves them with at most
/// `THREADS` threads, and they use no CPU while they wait (before: a thread each,
/// polling every 10 ms); when the lock goes, every waiter gets it in turn, the queued
/// ones too. Over /dev/fuse, 200 waits at once; over io_uring, where each waiting
/// request keeps a ring entry (4 per CPU queue: 8 waits held them all, and the mount
/// hung for everyone, the unlock that would end them included), 64 waits arriving
/// one every 10 ms (a burst larger than a queue's free entries waits in the kernel
/// until entries are answered: README, "File locks").
#[test]
fn many_waiters_cost_the_daemon_no_cpu_and_a_bounded_number_of_threads() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let _w = watchdog(
        "many_waiters_cost_the_daemon_no_cpu_and_a_bounded_number_of_threads",
        TEST_LIMIT,
    );
    for (o, waiters, gap_ms) in [("io_uring=on", 64, 10), ("io_uring=off", 200, 0)] {
        many_waiters(o, waiters, gap_ms);
    }
}

fn many_waiters(o: &str, waiters: usize, gap_ms: u32) {
    let m = Mounted::with(o);
    let mut child = Command::new(helper())
        .arg("waiters")
        .arg(m.file())
        .arg(waiters.to_string())
        .arg(gap_ms.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "waiting\n");
    // Every wait reaches the daemon (the requests are on their way).
    std::thread::sleep(Duration::from_millis(1500));
    let (threads, before) = lock_threads();
    let window = Duration::from_secs(2);
    std::thread::sleep(window);
    let (threads_after, after) = lock_threads();
    let cpu = after.saturating_sub(before);
    eprintln!(
        "{o}: {waiters} waiters: {threads} lock threads, {cpu:?} of CPU in {window:?} (then {threads_after})"
    );
    let bound = lynxfs_fuse::locks::THREADS + 4;
    if threads > bound || cpu > window / 20 {
        kill_group(&child);
        let _ = child.wait();
        panic!(
            "{o}: {waiters} waiters: {threads} lock threads (at most {bound} wanted), \
             {cpu:?} of CPU in {window:?} (at most 5% wanted)"
        );
    }
    let start = Instant::now();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    if line != "all got it\n" {
        kill_group(&child);
        let _ = child.wait();
        panic!("{o}: the waiters did not all get the lock once it went: {line:?}");
    }
    let st = wait_within(&mut child, LIMIT);
    assert!(st.success(), "{o}: {st:?}");
    eprintln!(
        "{o}: every waiter had the lock {:?} after it went",
        start.elapsed()
    );
}
