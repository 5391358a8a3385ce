//! Open file descriptions shared across processes (issue 13): a fork child's and an
//! exec'd image's handles share the position and flags with the process they came
//! from; a stale key is refused; an exec'd image frees what its previous image held;
//! a process killed holding a description's lock does not hang the others; positions
//! from two processes of two threads each lose and overlap nothing.
//!
//! Child processes are this test binary in child mode (`child`, the role in
//! `LYNXFS_DESC_ROLE`), each dying with the test thread that spawned it
//! (PR_SET_PDEATHSIG); every wait is bounded and a watchdog aborts a test that outlives
//! `TEST_LIMIT`. Pools and runtime files live in a fresh directory in /dev/shm.
//!
//! Run: `cargo test --profile ci -p lynxfs --test descriptions`.
mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use lynxfs::pmem::PmemBackend;
use lynxfs::runtime::attach::RUNTIME_DIR_ENV;
use lynxfs::runtime::testing::{STOPPED, STOP_ENV};
use lynxfs::{Access, Cred, Fs, MkfsOptions, Pool};

const ROLE_ENV: &str = "LYNXFS_DESC_ROLE";
const POOL_ENV: &str = "LYNXFS_DESC_POOL";
const KEY_ENV: &str = "LYNXFS_DESC_KEY";
/// Child mode, "exec-b": whether to forget the previous image ("1") or not.
const FORGET_ENV: &str = "LYNXFS_DESC_FORGET";
/// Child mode, "writer": how many records each thread writes.
const COUNT_ENV: &str = "LYNXFS_DESC_COUNT";

const TEST_LIMIT: Duration = Duration::from_secs(120);
/// How long the parent waits for one line from a child, or for a child to end.
const WAIT_LIMIT: Duration = Duration::from_secs(30);
/// One record written by the position tests: fixed size, unique text.
const RECORD: usize = 32;

/// A pool in a fresh directory in /dev/shm, which is also its runtime directory.
struct Setup {
    /// Holds the pool (removed with it).
    _dir: tempfile::TempDir,
    pool: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::Builder::new()
        .prefix("lynxfs-desc")
        .tempdir_in("/dev/shm")
        .unwrap();
    let pool = dir.path().join("desc.pool");
    let mut o = MkfsOptions::new(64 << 20);
    o.lanes = 4;
    Pool::mkfs(&pool, &o, PmemBackend::default()).unwrap();
    runtime_dir();
    Setup { _dir: dir, pool }
}

/// The runtime directory of every pool this process attaches: one for the whole
/// binary (tests run in parallel threads, and the variable is the process's), set
/// before any test attaches; runtime files are named by pool, so pools never share one.
fn runtime_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = match std::env::var_os(RUNTIME_DIR_ENV) {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => {
                // A new directory (a fixed name in /tmp could be another user's).
                let d = tempfile::Builder::new()
                    .prefix("lynxfs-desc-rt-")
                    .tempdir()
                    .unwrap()
                    .keep();
                std::env::set_var(RUNTIME_DIR_ENV, &d);
                d
            }
        };
        d
    })
}

impl Setup {
    fn open(&self) -> Fs<PmemBackend> {
        Fs::open(&self.pool).unwrap()
    }

    /// Once every process has detached: the pool was left clean, fsck agrees, and
    /// no runtime file is left.
    fn check_clean(&self) {
        let p = Pool::open(&self.pool, Access::ReadWrite, PmemBackend::default()).unwrap();
        assert!(p.was_clean, "the last close marks the pool clean");
        let rep = lynxfs::fsck::check(&p);
        assert!(rep.is_clean(), "fsck: {:?}", rep.problems);
        drop(p);
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&self.pool).unwrap();
        // The pool's session directories (runtime::attach): `lynxfs-UUID-DEV-INO.RANDOM`.
        let ours = format!("-{}-{}.", m.dev(), m.ino());
        let left: Vec<_> = std::fs::read_dir(runtime_dir())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with("lynxfs-") && n.contains(&ours)
            })
            .collect();
        assert!(left.is_empty(), "runtime files left: {left:?}");
    }

    fn spawn(&self, role: &str, env: &[(&str, String)]) -> Kid {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env(ROLE_ENV, role)
            .env(POOL_ENV, &self.pool)
            .env(RUNTIME_DIR_ENV, runtime_dir())
            .env_remove(STOP_ENV)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Kid::start(cmd, role)
    }
}

/// A child process; killed and reaped when dropped.
struct Kid {
    child: Child,
    lines: Receiver<String>,
    role: String,
}

impl Kid {
    fn start(mut cmd: Command, role: &str) -> Kid {
        let mut child = cmd.spawn().unwrap();
        let (tx, lines) = mpsc::channel();
        let out = BufReader::new(child.stdout.take().unwrap());
        let tx2 = tx.clone();
        std::thread::spawn(move || {
            for l in out.lines().map_while(|l| l.ok()) {
                // The harness may have begun the line ("test child ... ").
                if let Some(at) = l.find('@') {
                    let _ = tx2.send(l[at + 1..].to_string());
                }
            }
        });
        let err = BufReader::new(child.stderr.take().unwrap());
        let who = role.to_string();
        std::thread::spawn(move || {
            for l in err.lines().map_while(|l| l.ok()) {
                match l.strip_prefix(STOPPED) {
                    Some(point) => {
                        let _ = tx.send(format!("stopped {point}"));
                    }
                    None => eprintln!("[{who}] {l}"),
                }
            }
        });
        Kid {
            child,
            lines,
            role: role.to_string(),
        }
    }

    /// The next line the child says (fails the test after [`WAIT_LIMIT`]).
    fn next(&self) -> String {
        self.lines
            .recv_timeout(WAIT_LIMIT)
            .unwrap_or_else(|e| panic!("{}: no line from the child: {e}", self.role))
    }

    /// Wait (bounded) for the child to exit with success.
    fn finish(mut self) {
        let end = Instant::now() + WAIT_LIMIT;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "{} ended with {st}", self.role);
                return;
            }
            assert!(Instant::now() < end, "{} did not end in time", self.role);
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Said by a child, for the parent to read.
fn say(what: &str) {
    println!("@{what}");
}

fn watchdog(test: &'static str) -> lynxfs_test_support::Watchdog {
    lynxfs_test_support::watchdog(test, TEST_LIMIT)
}

/// A file at `name` holding `data`, open read-write at position 0.
fn file_with(fs: &Fs<PmemBackend>, name: &str, data: &[u8]) -> u64 {
    let s = fs.session(Cred::root());
    let fd = s
        .open(name, libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC, 0o644)
        .unwrap();
    fs.write(fd, data).unwrap();
    fs.seek(fd, 0, libc::SEEK_SET).unwrap();
    fd
}

fn contents(fs: &Fs<PmemBackend>, name: &str) -> Vec<u8> {
    let s = fs.session(Cred::root());
    let fd = s.open(name, libc::O_RDONLY, 0).unwrap();
    let size = fs.fstat(fd).unwrap().size as usize;
    let mut buf = vec![0u8; size];
    assert_eq!(fs.pread(fd, &mut buf, 0).unwrap(), size);
    fs.close_fd(fd).unwrap();
    buf
}

// ---------------------------------------------------------------------------------
// Tests.

#[test]
fn a_fork_child_writes_at_the_shared_position_and_detaches_alone() {
    let _w = watchdog("fork");
    let s = setup();
    // The forking process is a child of its own (a process with no other test's
    // threads in it); it says what it checked.
    let kid = s.spawn("fork", &[]);
    assert_eq!(kid.next(), "forked child ok");
    assert_eq!(kid.next(), "parent ok");
    kid.finish();
    s.check_clean();
}

#[test]
fn an_unrelated_process_adopts_the_description_and_a_stale_key_is_refused() {
    let _w = watchdog("adopt");
    let s = setup();
    let fs = s.open();
    let fd = file_with(&fs, "/f", b"0123456789");
    let mut buf = [0u8; 4];
    fs.read(fd, &mut buf).unwrap();
    let key = fs.share(fd).unwrap();
    // The claim for the other image, made before it starts (as before a spawn).
    fs.claim(key).unwrap();
    assert_eq!(fs.claims_of(key), 2);
    let kid = s.spawn("adopt", &[(KEY_ENV, key.to_string())]);
    assert_eq!(kid.next(), "read 456");
    kid.finish();
    assert_eq!(
        fs.seek(fd, 0, libc::SEEK_CUR).unwrap(),
        7,
        "moved by the other"
    );
    assert_eq!(fs.claims_of(key), 1, "its close released its claim");
    fs.close_fd(fd).unwrap();
    assert_eq!(fs.claims_of(key), 0);
    // The slot is reused by the next description; the old key reaches nothing.
    let g = file_with(&fs, "/g", b"x");
    let key2 = fs.share(g).unwrap();
    assert_eq!(key2 & 0xffff, key & 0xffff, "the same slot");
    assert_eq!(fs.adopt(key).unwrap_err().errno(), libc::EBADF);
    assert_eq!(fs.claim(key).unwrap_err().errno(), libc::EBADF);
    fs.close_fd(g).unwrap();
    fs.close().unwrap();
    drop(fs);
    s.check_clean();
}

/// An image shares an open file it unlinked, then execs; the new image adopts it and
/// (or not) forgets the previous image; its close frees the file only if it did.
fn exec_image(forget: bool) {
    let s = setup();
    // Attached throughout, so the runtime state outlives the exec.
    let fs = s.open();
    let before = fs.session(Cred::root()).statfs();
    let kid = s.spawn("exec-a", &[(FORGET_ENV, u8::from(forget).to_string())]);
    assert_eq!(kid.next(), "exec-a shared");
    let freed = kid.next();
    kid.finish();
    let s2 = fs.session(Cred::root());
    if forget {
        assert_eq!(freed, "exec-b freed");
        assert_eq!(s2.statfs().files_free, before.files_free);
    } else {
        assert_eq!(freed, "exec-b kept");
        assert_ne!(s2.statfs().files_free, before.files_free);
    }
    drop(s2);
    fs.close().unwrap();
    drop(fs);
    if forget {
        s.check_clean();
    }
}

#[test]
fn an_exec_d_image_that_forgets_its_previous_image_frees_what_it_held() {
    let _w = watchdog("exec forget");
    exec_image(true);
}

#[test]
fn without_forgetting_the_previous_image_holds_its_files() {
    let _w = watchdog("exec keep");
    exec_image(false);
}

#[test]
fn a_process_killed_holding_a_description_lock_does_not_hang_the_others() {
    let _w = watchdog("killed");
    let s = setup();
    let fs = s.open();
    let fd = file_with(&fs, "/k", b"abcdef");
    let key = fs.share(fd).unwrap();
    fs.claim(key).unwrap();
    let kid = s.spawn(
        "stuck",
        &[
            (KEY_ENV, key.to_string()),
            (STOP_ENV, "desc.lock".to_string()),
        ],
    );
    assert_eq!(kid.next(), "stopped desc.lock");
    drop(kid); // SIGKILL, holding the lock
    let t = Instant::now();
    let mut buf = [0u8; 3];
    assert_eq!(fs.read(fd, &mut buf).unwrap(), 3);
    assert_eq!(&buf, b"abc");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // The killed image's claim leaks (see docs/CONSISTENCY.md); give it back here.
    fs.release(key).unwrap();
    fs.close_fd(fd).unwrap();
    assert_eq!(fs.claims_of(key), 0);
    fs.close().unwrap();
    drop(fs);
    // A process died: the pool is recovered at the next open rather than clean.
    let p = Pool::open(&s.pool, Access::ReadWrite, PmemBackend::default()).unwrap();
    assert!(lynxfs::fsck::check(&p).is_clean());
}

/// Two processes of two threads each write records through one description; every
/// record lands exactly once, none overlapping another.
fn two_processes_write(append: bool) {
    let s = setup();
    let fs = s.open();
    let flags = libc::O_CREAT | libc::O_WRONLY | if append { libc::O_APPEND } else { 0 };
    let fd = fs.session(Cred::root()).open("/log", flags, 0o644).unwrap();
    let key = fs.share(fd).unwrap();
    fs.claim(key).unwrap();
    let count = 300;
    let kid = s.spawn(
        "writer",
        &[(KEY_ENV, key.to_string()), (COUNT_ENV, count.to_string())],
    );
    assert_eq!(kid.next(), "writing");
    write_records(&fs, fd, "parent", count);
    assert_eq!(kid.next(), "wrote");
    kid.finish();
    let data = contents(&fs, "/log");
    assert_eq!(data.len(), 4 * count * RECORD);
    let mut seen: Vec<&[u8]> = data.chunks(RECORD).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 4 * count, "records lost or overwritten");
    assert_eq!(
        fs.seek(fd, 0, libc::SEEK_CUR).unwrap(),
        (4 * count * RECORD) as u64
    );
    fs.close_fd(fd).unwrap();
    fs.close().unwrap();
    drop(fs);
    s.check_clean();
}

/// Two threads writing `count` records each through `fd`.
fn write_records(fs: &Fs<PmemBackend>, fd: u64, who: &str, count: usize) {
    std::thread::scope(|sc| {
        for t in 0..2 {
            sc.spawn(move || {
                for i in 0..count {
                    let rec = format!("{who} t{t} i{i:06}");
                    let rec = format!("{rec:<width$}\n", width = RECORD - 1);
                    assert_eq!(fs.write(fd, rec.as_bytes()).unwrap(), RECORD);
                }
            });
        }
    });
}

#[test]
fn appends_from_two_processes_lose_nothing() {
    let _w = watchdog("append");
    two_processes_write(true);
}

#[test]
fn writes_at_a_shared_position_from_two_processes_never_overlap() {
    let _w = watchdog("shared position");
    two_processes_write(false);
}

// ---------------------------------------------------------------------------------
// Child side.

#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return; // not a child
    };
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets this process's death signal.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let pool = PathBuf::from(std::env::var(POOL_ENV).unwrap());
    let key = || -> u64 { std::env::var(KEY_ENV).unwrap().parse().unwrap() };
    let fs = Fs::open(&pool).unwrap();
    match role.as_str() {
        "fork" => fork_child(&fs),
        "adopt" => {
            let fd = fs.adopt(key()).unwrap();
            let mut buf = [0u8; 3];
            fs.read(fd, &mut buf).unwrap();
            say(&format!("read {}", String::from_utf8_lossy(&buf)));
            fs.close_fd(fd).unwrap();
        }
        "exec-a" => exec_a(&fs, &pool),
        "exec-b" => exec_b(&fs),
        "stuck" => {
            // Stops for good inside the description's lock (LYNXFS_TEST_STOP).
            let _ = fs.adopt(key());
            panic!("the stop point did not stop");
        }
        "writer" => {
            let fd = fs.adopt(key()).unwrap();
            say("writing");
            let count = std::env::var(COUNT_ENV).unwrap().parse().unwrap();
            write_records(&fs, fd, "child", count);
            say("wrote");
            fs.close_fd(fd).unwrap();
        }
        r => panic!("unknown role {r}"),
    }
    fs.close().unwrap();
}

/// Role "fork": share a file, fork; the child writes through the inherited handle
/// and detaches; the parent sees the position moved and goes on.
fn fork_child(fs: &Fs<PmemBackend>) {
    let fd = file_with(fs, "/f", b"");
    fs.write(fd, b"a").unwrap();
    let key = fs.share(fd).unwrap();
    // SAFETY: fork in a process whose other threads (the test harness's) hold nothing
    // of this pool; the child only calls the engine and then _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fs.after_fork_child().unwrap();
            assert_eq!(fs.claims_of(key), 2);
            fs.write(fd, b"bbb").unwrap();
            fs.close_fd(fd).unwrap();
            fs.close().unwrap();
        }))
        .is_ok();
        if ok {
            say("forked child ok");
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // SAFETY: ends the forked child at once, running nothing of the parent's.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let end = Instant::now() + WAIT_LIMIT;
    let mut status = 0;
    // SAFETY: waitpid on our own child, with a valid status pointer.
    while unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == 0 {
        assert!(Instant::now() < end, "the forked child did not end");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    assert_eq!(fs.seek(fd, 0, libc::SEEK_CUR).unwrap(), 4);
    assert_eq!(fs.claims_of(key), 1, "the child's close released its claim");
    assert_eq!(contents(fs, "/f"), b"abbb");
    fs.write(fd, b"c").unwrap();
    fs.close_fd(fd).unwrap();
    assert_eq!(contents(fs, "/f"), b"abbbc");
    say("parent ok");
}

/// Role "exec-a": share an open file, unlink it, and exec into "exec-b".
fn exec_a(fs: &Fs<PmemBackend>, pool: &Path) {
    let fd = file_with(fs, "/u", b"still here");
    let key = fs.share(fd).unwrap();
    fs.session(Cred::root()).unlink("/u").unwrap();
    say("exec-a shared");
    let e = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, "exec-b")
        .env(POOL_ENV, pool)
        .env(KEY_ENV, key.to_string())
        .exec();
    panic!("exec failed: {e}");
}

/// Role "exec-b": adopt the description, forget the previous image (or not), close.
fn exec_b(fs: &Fs<PmemBackend>) {
    let fd = fs
        .adopt(std::env::var(KEY_ENV).unwrap().parse().unwrap())
        .unwrap();
    let ino = fs.fd_ino(fd).unwrap();
    let mut buf = [0u8; 10];
    assert_eq!(fs.read(fd, &mut buf).unwrap(), 10);
    assert_eq!(&buf, b"still here");
    let forget = std::env::var(FORGET_ENV).as_deref() == Ok("1");
    if forget {
        fs.forget_previous_image().unwrap();
        fs.forget_previous_image().unwrap(); // nothing left: no effect
    }
    fs.close_fd(fd).unwrap();
    match fs.ns().live(ino) {
        Err(_) => say("exec-b freed"),
        Ok(()) => say("exec-b kept"),
    }
}
