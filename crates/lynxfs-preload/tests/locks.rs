//! File locks on a pool are one, whichever way a program reaches it: a preloaded
//! process (`lynxfs run`) and a process going through the pool's FUSE mount, of the
//! same user or not, exclude each other with `fcntl` record locks and `flock`; flock
//! on one pool file does not block another, nor does anyone's flock on an eventfd of
//! their own; locks outlive the exec of the program that took them (flock(1) on a
//! shell's open file, a process's record locks); a lock directory another user
//! plants does not stop locks; and sqlite3 writing one database from both sides at
//! once leaves it sound.
//!
//! Locks are taken by a small Python script (fcntl.lockf is F_SETLK, fcntl.flock is
//! flock(2)): `hold` takes the lock, says "locked" and keeps it until its stdin
//! closes; `try` tries without waiting and says "got" or "busy". Needs root (a FUSE
//! mount, uid 1000 for the other user) and python3, sqlite3 in /usr/bin.

use lynxfs_test_support::built::preload as built;
use lynxfs_test_support::{child, watchdog};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long one command may run.
const LIMIT: Duration = Duration::from_secs(120);
/// How long a whole test may run.
const TEST_LIMIT: Duration = Duration::from_secs(400);
/// The other user.
const OTHER: u32 = 1000;

const LOCKER: &str = r#"
import fcntl, os, sys
mode, kind, path = sys.argv[1:4]
if kind == "eventfd":
    f = os.eventfd(0)
else:
    f = open(path, "r+")
def lock(block):
    nb = 0 if block else fcntl.LOCK_NB
    if kind == "fcntl":
        fcntl.lockf(f, fcntl.LOCK_EX | nb)
    else:
        fcntl.flock(f, fcntl.LOCK_EX | nb)
if mode == "hold":
    lock(True)
    print("locked", flush=True)
    sys.stdin.read()
else:
    try:
        lock(False)
        print("got")
    except OSError as e:
        print("busy" if e.errno in (11, 13) else "error " + os.strerror(e.errno))
"#;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = child::run_bounded(cmd, what, LIMIT);
    assert!(
        out.status.success(),
        "{what} ({}): {}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// A fresh pool mounted (for every user) at `mnt`, which is also where preloaded
/// programs find it; unmounted when dropped.
struct Mounted {
    dir: tempfile::TempDir,
    pool: PathBuf,
    mnt: PathBuf,
    locker: PathBuf,
}

impl Mounted {
    fn new() -> Mounted {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "needs root (a FUSE mount)");
        for tool in ["python3", "sqlite3"] {
            assert!(
                Path::new("/usr/bin").join(tool).exists(),
                "/usr/bin/{tool} is missing"
            );
        }
        let b = built();
        let dir = tempfile::tempdir().expect("tempdir");
        // The other user must reach the mount point and the script.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let pool = dir.path().join("p.pool");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let locker = dir.path().join("locker.py");
        std::fs::write(&locker, LOCKER).unwrap();
        run_ok(
            Command::new(&b.lynxfs)
                .args(["mkfs", "--size", "64M"])
                .arg(&pool),
            "mkfs",
        );
        run_ok(
            Command::new(&b.lynxfs)
                .args(["mount", "-o", "allow_other"])
                .arg(&pool)
                .arg(&mnt),
            "mount",
        );
        std::fs::set_permissions(&mnt, std::fs::Permissions::from_mode(0o777)).unwrap();
        Mounted {
            dir,
            pool,
            mnt,
            locker,
        }
    }

    /// A file in the pool anyone may lock.
    fn file(&self, name: &str) -> PathBuf {
        let p = self.mnt.join(name);
        std::fs::write(&p, b"x").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        p
    }

    /// `args` under `lynxfs run` on the pool, at the mount point.
    fn preloaded(&self, args: &[&std::ffi::OsStr]) -> Command {
        let mut c = built().run(&self.pool, &self.mnt);
        c.args(args);
        c
    }

    /// The locker script, preloaded or plain (through the mount), as `uid`.
    fn locker(&self, preload: bool, uid: u32, mode: &str, kind: &str, path: &Path) -> Command {
        let args = [
            "python3".as_ref(),
            self.locker.as_os_str(),
            mode.as_ref(),
            kind.as_ref(),
            path.as_os_str(),
        ];
        let mut c = if preload {
            self.preloaded(&args)
        } else {
            let mut c = Command::new(args[0]);
            c.args(&args[1..]);
            c
        };
        if uid != 0 {
            c.uid(uid).gid(uid);
        }
        c
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = child::run_bounded(
            Command::new(&built().lynxfs).arg("umount").arg(&self.mnt),
            "umount",
            LIMIT,
        );
    }
}

/// A process holding a lock until dropped.
struct Holder {
    child: Child,
}

impl Holder {
    fn start(mut cmd: Command, what: &str) -> Holder {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(LIMIT).unwrap_or_default();
        let h = Holder { child };
        assert_eq!(line.trim(), "locked", "{what} did not take its lock");
        h
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // Closing its stdin ends it (and its lock); a stuck one is killed.
        if let Some(mut i) = self.child.stdin.take() {
            let _ = i.flush();
        }
        let pid = self.child.id() as libc::pid_t;
        for _ in 0..500 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: kill of the holder's own process group.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// What a `try` says: "got" or "busy" (or an error).
fn attempt(mut cmd: Command, what: &str) -> String {
    text(&run_ok(&mut cmd, what).stdout).trim().to_string()
}

#[test]
fn the_preload_and_the_mount_exclude_each_other() {
    let _w = watchdog("the_preload_and_the_mount_exclude_each_other", TEST_LIMIT);
    let m = Mounted::new();
    for kind in ["fcntl", "flock"] {
        let f = m.file(&format!("{kind}.lock"));
        for holder_preloaded in [true, false] {
            let what = format!("{kind}, held by the preloaded side: {holder_preloaded}");
            let h = Holder::start(m.locker(holder_preloaded, 0, "hold", kind, &f), &what);
            let other = !holder_preloaded;
            assert_eq!(
                attempt(m.locker(other, 0, "try", kind, &f), &what),
                "busy",
                "{what}: both got an exclusive lock"
            );
            drop(h);
            assert_eq!(
                attempt(m.locker(other, 0, "try", kind, &f), &what),
                "got",
                "{what}: the lock outlived its holder"
            );
        }
    }
}

#[test]
fn locks_outlive_the_exec_of_the_program_that_took_them() {
    let _w = watchdog(
        "locks_outlive_the_exec_of_the_program_that_took_them",
        TEST_LIMIT,
    );
    let m = Mounted::new();
    let f = m.file("exec.lock");
    let f_arg = f.to_str().unwrap();
    // The shell's idiom: flock(1), a program of its own, locks the shell's open file
    // and exits; the lock belongs to the open file, which the shell still has.
    let idiom = format!("exec 9>>{f_arg}; flock -x 9; echo locked; read x");
    let h = Holder::start(
        m.preloaded(&["sh".as_ref(), "-c".as_ref(), idiom.as_ref()]),
        "sh with flock(1)",
    );
    assert_eq!(
        attempt(
            m.locker(false, 0, "try", "flock", &f),
            "flock after flock(1) exited"
        ),
        "busy",
        "the flock went with flock(1), though the shell still has the open file"
    );
    drop(h);
    // A process's record locks stay through its exec.
    let script = format!(
        "import fcntl, os; f = open({f_arg:?}, 'r+'); fcntl.lockf(f, fcntl.LOCK_EX); \
         os.set_inheritable(f.fileno(), True); \
         os.execvp('sh', ['sh', '-c', 'echo locked; read x'])"
    );
    let h = Holder::start(
        m.preloaded(&["python3".as_ref(), "-c".as_ref(), script.as_ref()]),
        "lockf, then exec",
    );
    assert_eq!(
        attempt(
            m.locker(false, 0, "try", "fcntl", &f),
            "lockf after the exec"
        ),
        "busy",
        "the record lock went with the exec"
    );
    drop(h);
    // Nor do they go when the library opens more of its own fds of the file (for a
    // fork, a flock): only a close of the program's own does that.
    let script = format!(
        "import fcntl, os, sys; f = open({f_arg:?}, 'r+'); fcntl.lockf(f, fcntl.LOCK_EX); \
         pid = os.fork(); \
         pid == 0 and os._exit(0); os.waitpid(pid, 0); \
         fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.read()"
    );
    let h = Holder::start(
        m.preloaded(&["python3".as_ref(), "-c".as_ref(), script.as_ref()]),
        "lockf, fork, flock",
    );
    assert_eq!(
        attempt(m.locker(false, 0, "try", "fcntl", &f), "lockf after a fork"),
        "busy",
        "the record lock went when the library opened a stand-in"
    );
    drop(h);
}

#[test]
fn a_wait_through_the_mount_ends_when_interrupted_or_when_the_lock_comes_free() {
    let _w = watchdog(
        "a_wait_through_the_mount_ends_when_interrupted_or_when_the_lock_comes_free",
        TEST_LIMIT,
    );
    let m = Mounted::new();
    let f = m.file("wait.lock");
    let h = Holder::start(m.locker(true, 0, "hold", "flock", &f), "preloaded flock");
    // flock -w 1: a timer's signal interrupts the wait, which must end (not sit in
    // the kernel until the lock comes free).
    let start = std::time::Instant::now();
    let out = child::run_bounded(
        Command::new("flock").args(["-w", "1"]).arg(&f).arg("true"),
        "flock -w 1",
        LIMIT,
    );
    let took = start.elapsed();
    assert!(!out.status.success(), "flock -w 1 got a held lock");
    assert!(
        took < Duration::from_secs(10),
        "the interrupted wait took {took:?}"
    );
    // A waiter gets the lock once the holder lets go.
    let waiter = child::spawn_group(
        Command::new("flock").args(["-w", "60"]).arg(&f).arg("true"),
        "flock -w 60",
    );
    std::thread::sleep(Duration::from_millis(300));
    drop(h);
    let out = child::finish_within(waiter, "flock -w 60", LIMIT);
    assert!(
        out.status.success(),
        "the waiter never got the lock: {out:?}"
    );
}

/// Takes byte FIRST of PATH, says "locked", and at a line on stdin waits for byte
/// SECOND (classic locks), then says what the wait got: "got" or "EDEADLK".
const CYCLER: &str = r#"
import errno, fcntl, signal, sys
first, second, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
f = open(path, "r+")
fcntl.lockf(f, fcntl.LOCK_EX, 1, first)
print("locked", flush=True)
sys.stdin.readline()
signal.alarm(60)
try:
    fcntl.lockf(f, fcntl.LOCK_EX, 1, second)
    print("got", flush=True)
except OSError as e:
    print("EDEADLK" if e.errno == errno.EDEADLK else errno.errorcode[e.errno], flush=True)
"#;

/// A cycle of classic lock waits between a preloaded process and a process going
/// through the mount gets EDEADLK for the request that closes it, whichever side
/// that is (issue 42, defect 6): the kernel sees the preloaded request's, the daemon
/// (through /proc/locks) the mount's. Before, a mount request closing it hung both.
#[test]
fn a_lock_cycle_between_the_preload_and_the_mount_gets_edeadlk() {
    let _w = watchdog(
        "a_lock_cycle_between_the_preload_and_the_mount_gets_edeadlk",
        TEST_LIMIT,
    );
    let m = Mounted::new();
    let f = m.file("cycle.lock");
    let script = m.dir.path().join("cycler.py");
    std::fs::write(&script, CYCLER).unwrap();
    for preload_last in [false, true] {
        // The preloaded one holds byte 0 and wants byte 1; the other the reverse.
        let start = |preload: bool| {
            let (a, b) = if preload { ("0", "1") } else { ("1", "0") };
            let args = [
                "python3".as_ref(),
                script.as_os_str(),
                a.as_ref(),
                b.as_ref(),
                f.as_os_str(),
            ];
            let mut c = if preload {
                m.preloaded(&args)
            } else {
                let mut c = Command::new(args[0]);
                c.args(&args[1..]);
                c
            };
            let mut child = c
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .process_group(0)
                .spawn()
                .unwrap();
            let mut out = BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            assert_eq!(line, "locked\n", "preloaded {preload}");
            (child, out)
        };
        let mut first = start(!preload_last);
        let mut last = start(preload_last);
        writeln!(first.0.stdin.as_ref().unwrap()).unwrap();
        // The first is waiting before the last asks.
        std::thread::sleep(Duration::from_millis(500));
        writeln!(last.0.stdin.as_ref().unwrap()).unwrap();
        let said = |p: &mut (Child, BufReader<std::process::ChildStdout>)| {
            let mut line = String::new();
            p.1.read_line(&mut line).unwrap();
            // Its answer given, it ends, and its locks go with it.
            drop(p.0.stdin.take());
            child::wait_within(&mut p.0, LIMIT);
            line.trim().to_string()
        };
        let l = said(&mut last);
        let f1 = said(&mut first);
        let who = if preload_last {
            "preloaded"
        } else {
            "through the mount"
        };
        assert_eq!(
            (f1.as_str(), l.as_str()),
            ("got", "EDEADLK"),
            "the last to wait ({who}) closes the cycle"
        );
    }
}

#[test]
fn two_users_exclude_each_other_through_the_preload_and_the_mount() {
    let _w = watchdog(
        "two_users_exclude_each_other_through_the_preload_and_the_mount",
        TEST_LIMIT,
    );
    let m = Mounted::new();
    let f = m.file("shared.lock");
    for kind in ["fcntl", "flock"] {
        // Root under the preload, the other user through the mount, and back.
        for (hold, hold_uid, try_, try_uid) in [(true, 0, false, OTHER), (false, OTHER, true, 0)] {
            let what = format!("{kind} held by uid {hold_uid}, preloaded: {hold}");
            let h = Holder::start(m.locker(hold, hold_uid, "hold", kind, &f), &what);
            assert_eq!(
                attempt(m.locker(try_, try_uid, "try", kind, &f), &what),
                "busy",
                "{what}: uid {try_uid} got the lock too"
            );
            drop(h);
        }
    }
}

#[test]
fn flock_on_one_pool_file_blocks_no_other_nor_does_an_eventfd() {
    let _w = watchdog(
        "flock_on_one_pool_file_blocks_no_other_nor_does_an_eventfd",
        TEST_LIMIT,
    );
    let m = Mounted::new();
    let (a, b) = (m.file("a"), m.file("b"));
    let h = Holder::start(m.locker(true, 0, "hold", "flock", &a), "flock a");
    assert_eq!(
        attempt(m.locker(true, 0, "try", "flock", &b), "flock b"),
        "got",
        "flock on a blocked flock on b"
    );
    drop(h);
    // Another user flocks an eventfd of their own: no pool file is locked by it.
    let e = Holder::start(
        m.locker(false, OTHER, "hold", "eventfd", Path::new("-")),
        "flock on an eventfd",
    );
    assert_eq!(
        attempt(m.locker(true, 0, "try", "flock", &a), "flock a"),
        "got",
        "another user's flock on an eventfd blocked a preloaded flock"
    );
    drop(e);
}

#[test]
fn a_lock_directory_another_user_planted_does_not_stop_locks() {
    let _w = watchdog(
        "a_lock_directory_another_user_planted_does_not_stop_locks",
        TEST_LIMIT,
    );
    let m = Mounted::new();
    let f = m.file("planted.lock");
    // Where the stand-ins of the pool were once kept (per user), planted by uid 1000.
    let rt = std::env::var_os("LYNXFS_RUNTIME_DIR").unwrap_or_else(|| "/dev/shm".into());
    let md = std::fs::metadata(&m.pool).unwrap();
    let old = Path::new(&rt).join(format!("lynxfs-locks-0-{}-{}", md.dev(), md.ino()));
    let st = Command::new("mkdir")
        .arg(&old)
        .uid(OTHER)
        .gid(OTHER)
        .status()
        .unwrap();
    assert!(st.success(), "mkdir as uid {OTHER}");
    let got = attempt(m.locker(true, 0, "try", "fcntl", &f), "lockf");
    let _ = std::fs::remove_dir(&old);
    assert_eq!(got, "got", "a planted directory stopped the lock");
}

/// One writer's script: `n` transactions of one insert each, tagged `who`.
fn sqlite_script(who: &str, n: usize) -> String {
    let mut s = String::from(".timeout 60000\n");
    for i in 0..n {
        s.push_str(&format!(
            "BEGIN IMMEDIATE; INSERT INTO t VALUES('{who}', {i}, randomblob(300)); COMMIT;\n"
        ));
    }
    s
}

#[test]
fn sqlite3_under_the_preload_and_through_the_mount_at_once_keeps_the_database_sound() {
    let _w = watchdog(
        "sqlite3_under_the_preload_and_through_the_mount_at_once_keeps_the_database_sound",
        TEST_LIMIT,
    );
    let m = Mounted::new();
    let db = m.mnt.join("t.db");
    run_ok(
        Command::new("sqlite3")
            .arg(&db)
            .arg("CREATE TABLE t(who TEXT, i INT, pad BLOB);"),
        "create the table",
    );
    const N: usize = 300;
    let start = |preload: bool, who: &str| {
        let script = m.dir.path().join(format!("{who}.sql"));
        std::fs::write(&script, sqlite_script(who, N)).unwrap();
        let mut c = if preload {
            m.preloaded(&["sqlite3".as_ref(), db.as_os_str()])
        } else {
            let mut c = Command::new("sqlite3");
            c.arg(&db);
            c
        };
        c.stdin(std::fs::File::open(&script).unwrap())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap()
    };
    let writers = [start(true, "preload"), start(false, "mount")];
    for (w, who) in writers.into_iter().zip(["preload", "mount"]) {
        let out = child::finish_within(w, who, LIMIT);
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{who} ({}): {}",
            out.status,
            text(&out.stderr)
        );
    }
    let check = run_ok(
        Command::new("sqlite3")
            .arg(&db)
            .arg("PRAGMA integrity_check; SELECT who, count(*) FROM t GROUP BY who ORDER BY who;"),
        "check",
    );
    assert_eq!(
        text(&check.stdout).trim(),
        format!("ok\nmount|{N}\npreload|{N}"),
        "the database after both writers"
    );
}
