//! Attaching processes to a pool's shared runtime state (`lynxfs::runtime::attach`):
//! who is first, which file two paths share, refusal of files that are not ours,
//! rebuilding after a killed process, the last detach, a full runtime directory.
//! Child processes are this test binary in child mode (`child`); each runs under a
//! watchdog that kills it (failing the test) if it outlives its limit.
mod common;

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use lynxfs::pmem::PmemBackend;
use lynxfs::runtime::attach::RUNTIME_DIR_ENV;
use lynxfs::runtime::procs::{self, MAX_PROCS, SCAN_EVERY};
use lynxfs::runtime::{bytes_needed, Attached, Health, Interrupted, RuntimeFile, Shape, Watch};
use lynxfs::{MkfsOptions, Pool};

/// Child mode: the pool to attach (the runtime directory comes in `RUNTIME_DIR_ENV`).
const CHILD_POOL: &str = "LYNXFS_ATTACH_CHILD_POOL";
/// Child mode: "1" to leave one operation in flight after attaching.
const CHILD_BUSY: &str = "LYNXFS_ATTACH_CHILD_BUSY";
const UUID: [u8; 16] = *b"attach-test-uuid";
/// Entries of each open table (a few pages).
const ENTRIES: usize = 4096;
/// The header and tables, plus a page standing for the rest of the runtime state.
const BYTES: usize = bytes_needed(ENTRIES) + 4096;
const SHAPE: Shape = Shape {
    bytes: BYTES,
    open_entries: ENTRIES,
};
/// How long a child may live before its watchdog kills it.
const CHILD_LIMIT: Duration = Duration::from_secs(60);

/// How long one test may run (a lock wait that never ends) before the process aborts.
const TEST_LIMIT: Duration = Duration::from_secs(120);

fn watchdog(test: &'static str) -> lynxfs_test_support::Watchdog {
    lynxfs_test_support::watchdog(test, TEST_LIMIT)
}

fn make_pool(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    let mut o = MkfsOptions::new(4 << 20);
    o.lanes = 2;
    Pool::mkfs(&p, &o, PmemBackend::default()).unwrap();
    p
}

fn open_rw(p: &Path) -> File {
    OpenOptions::new().read(true).write(true).open(p).unwrap()
}

fn attach(rt: &Path, pool: &Path, f: &File) -> lynxfs::Result<Attached> {
    RuntimeFile::attach_in(rt, pool, f, UUID, SHAPE)
}

fn live(a: &Attached) -> usize {
    (0..MAX_PROCS).filter(|&s| a.procs.alive(s)).count()
}

/// Child mode: attach (through `RuntimeFile::attach`, so the environment picks the
/// directory), say so, wait for stdin to close, detach and say so.
#[test]
fn child() {
    let Some(pool) = std::env::var_os(CHILD_POOL) else {
        return; // not a child
    };
    let pool = PathBuf::from(pool);
    let f = open_rw(&pool);
    let a = RuntimeFile::attach(&pool, &f, UUID, SHAPE).unwrap();
    a.publish().unwrap();
    if std::env::var(CHILD_BUSY).is_ok_and(|v| v == "1") {
        std::mem::forget(a.procs.enter_op(a.slot).unwrap());
    }
    println!(
        "@attached {} {} {}@",
        a.first as u8,
        a.slot,
        a.path.display()
    );
    let mut rest = Vec::new();
    std::io::stdin().read_to_end(&mut rest).unwrap();
    let last = a.detach_begin().unwrap();
    a.detach_end().unwrap();
    println!("@detached {}@", last as u8);
}

/// A child process with a watchdog.
struct Kid {
    child: Child,
    out: BufReader<ChildStdout>,
    /// Set (under the lock) once the test no longer needs the watchdog.
    done: Arc<(Mutex<bool>, Condvar)>,
    fired: Arc<AtomicBool>,
}

fn spawn(rt: &Path, pool: &Path, busy: bool) -> Kid {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD_POOL, pool)
        .env(RUNTIME_DIR_ENV, rt)
        .env(CHILD_BUSY, if busy { "1" } else { "0" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let fired = Arc::new(AtomicBool::new(false));
    let (d, f, pid) = (done.clone(), fired.clone(), child.id() as i32);
    std::thread::spawn(move || {
        let (lock, cv) = &*d;
        let end = Instant::now() + CHILD_LIMIT;
        let mut finished = lock.lock().unwrap();
        while !*finished {
            let Some(left) = end.checked_duration_since(Instant::now()) else {
                f.store(true, Ordering::SeqCst);
                // SAFETY: kill(2) on our child, which is not reaped while the watchdog
                // is armed (the test disarms it, under this lock, before waiting).
                unsafe { libc::kill(pid, libc::SIGKILL) };
                return;
            };
            finished = cv.wait_timeout(finished, left).unwrap().0;
        }
    });
    Kid {
        child,
        out,
        done,
        fired,
    }
}

impl Kid {
    /// The next line with `@tag `, as its words.
    fn expect(&mut self, tag: &str) -> Vec<String> {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.out.read_line(&mut line).unwrap();
            assert!(
                n > 0,
                "child ended before saying {tag} (watchdog fired: {})",
                self.fired.load(Ordering::SeqCst)
            );
            if let Some(p) = line.find(&format!("@{tag} ")) {
                let body = &line[p + tag.len() + 2..];
                let body = &body[..body.find('@').unwrap()];
                return body.split(' ').map(str::to_string).collect();
            }
        }
    }

    /// `(first, slot, runtime path)` from the child's attach line.
    fn attached(&mut self) -> (bool, u32, PathBuf) {
        let w = self.expect("attached");
        (w[0] == "1", w[1].parse().unwrap(), PathBuf::from(&w[2]))
    }

    fn kill(&mut self) {
        assert_eq!(
            // SAFETY: kill(2) on our child, not yet reaped (only `finish` waits for it).
            unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) },
            0
        );
    }

    /// Close the child's stdin (it detaches), read what it says until it exits, and
    /// reap it. Returns its status and whether it said it detached last.
    fn finish(mut self) -> (ExitStatus, Option<bool>) {
        drop(self.child.stdin.take());
        let mut rest = String::new();
        let _ = self.out.read_to_string(&mut rest);
        *self.done.0.lock().unwrap() = true;
        self.done.1.notify_all();
        assert!(
            !self.fired.load(Ordering::SeqCst),
            "the child's watchdog fired"
        );
        let status = self.child.wait().unwrap();
        let last = rest
            .find("@detached ")
            .map(|p| &rest[p + 10..p + 11] == "1");
        (status, last)
    }
}

impl Drop for Kid {
    /// A test that fails midway still leaves no child behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn two_processes_share_one_runtime_file() {
    let _dog = watchdog("two_processes_share_one_runtime_file");
    let dir = tempfile::tempdir().unwrap();
    let pool = make_pool(dir.path(), "p.pool");
    let f = open_rw(&pool);
    let a = attach(dir.path(), &pool, &f).unwrap();
    assert!(a.first);
    assert_eq!(a.procs.state(), procs::BUILDING);
    // In a session directory of ours, mode 0700, the only one of the pool's.
    let session = a.path.parent().unwrap().to_path_buf();
    assert_eq!(
        RuntimeFile::sessions_in(dir.path(), &pool, &f, UUID).unwrap(),
        vec![session.clone()]
    );
    assert_eq!(std::fs::metadata(&session).unwrap().mode() & 0o7777, 0o700);
    let meta = std::fs::metadata(&a.path).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o600);
    assert_eq!(meta.len(), BYTES as u64);

    // Until the first attacher publishes, the second waits for the transition lock.
    let mut kid = spawn(dir.path(), &pool, false);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(live(&a), 1, "the child joined a runtime still being built");
    a.publish().unwrap();
    let (first, slot, path) = kid.attached();
    assert!(!first);
    assert_eq!(path, a.path);
    assert_ne!(slot, a.slot);
    assert!(a.procs.alive(slot));
    assert_eq!(live(&a), 2);
    let (status, last) = kid.finish();
    assert!(status.success());
    assert_eq!(last, Some(false));
    assert!(
        a.path.exists(),
        "a detach that is not the last keeps the file"
    );
    assert!(!a.procs.alive(slot) && a.procs.dead_slots().is_empty());
    assert!(a.detach_begin().unwrap());
    let path = a.path.clone();
    a.detach_end().unwrap();
    assert!(!path.exists(), "the last detach removes the file");
    assert!(!session.exists(), "and its session directory");
}

#[test]
fn a_hard_link_shares_the_runtime_and_a_copy_gets_its_own() {
    let _dog = watchdog("a_hard_link_shares_the_runtime_and_a_copy_gets_its_own");
    let dir = tempfile::tempdir().unwrap();
    let pool = make_pool(dir.path(), "p.pool");
    let link = dir.path().join("link.pool");
    std::fs::hard_link(&pool, &link).unwrap();
    let copy = dir.path().join("copy.pool");
    std::fs::copy(&pool, &copy).unwrap();
    let (fp, fl, fc) = (open_rw(&pool), open_rw(&link), open_rw(&copy));
    let a = attach(dir.path(), &pool, &fp).unwrap();
    a.publish().unwrap();
    let b = attach(dir.path(), &link, &fl).unwrap();
    assert!(!b.first, "the hard link names the attached pool");
    assert_eq!(b.path, a.path);
    let c = attach(dir.path(), &copy, &fc).unwrap();
    assert!(c.first, "a copy is another pool");
    assert_ne!(c.path, a.path);
    assert!(!a.detach_begin().unwrap());
    a.detach_end().unwrap();
    assert!(b.detach_begin().unwrap());
    b.detach_end().unwrap();
    assert!(c.detach_begin().unwrap());
    c.detach_end().unwrap();
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        3,
        "only the pools"
    );
}

/// Attaching fails naming the file and saying `why`, and leaves it as it was.
fn assert_refused(rt: &Path, pool: &Path, f: &File, path: &Path, why: &str) {
    let before = std::fs::symlink_metadata(path).unwrap();
    let content = std::fs::read(path).ok();
    let e = attach(rt, pool, f)
        .err()
        .expect("a foreign file was accepted");
    let msg = e.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains(why), "{msg}");
    let after = std::fs::symlink_metadata(path).unwrap();
    assert_eq!(
        (before.ino(), before.mode(), before.uid(), before.len()),
        (after.ino(), after.mode(), after.uid(), after.len())
    );
    assert_eq!(std::fs::read(path).ok(), content);
}

#[test]
fn foreign_runtime_files_are_refused_and_left_alone() {
    let _dog = watchdog("foreign_runtime_files_are_refused_and_left_alone");
    let dir = tempfile::tempdir().unwrap();
    let rt = dir.path();
    let pool = make_pool(dir.path(), "p.pool");
    let f = open_rw(&pool);
    let prefix = RuntimeFile::prefix_of(&pool, &f, UUID).unwrap();

    // Nobody attached: what is at the pool's names that is not a session directory
    // of ours (a link, a file, a directory others can reach) is passed over, and
    // left as it was.
    let target = dir.path().join("target");
    std::fs::write(&target, b"precious").unwrap();
    let link = rt.join(format!("{prefix}0000000000000001"));
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let file = rt.join(format!("{prefix}0000000000000002"));
    std::fs::write(&file, b"keep me").unwrap();
    let open = rt.join(format!("{prefix}0000000000000003"));
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let a = attach(rt, &pool, &f).unwrap();
    assert!(a.first);
    a.publish().unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
    assert_eq!(std::fs::metadata(&open).unwrap().mode() & 0o7777, 0o755);

    // Attached: a file planted in place of the runtime file (only we can: the
    // session directory is ours alone) is refused.
    let path = a.path.clone();
    let planted = dir.path().join("planted");
    std::fs::write(&planted, vec![0u8; BYTES]).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::rename(&planted, &path).unwrap();
    let f2 = open_rw(&pool);
    assert_refused(rt, &pool, &f2, &path, "mode is 0644");
    // The last detach removes only the file it made.
    assert!(a.detach_begin().unwrap());
    a.detach_end().unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o644);
}

#[test]
fn a_wrong_header_is_refused_while_attached() {
    let _dog = watchdog("a_wrong_header_is_refused_while_attached");
    let dir = tempfile::tempdir().unwrap();
    let pool = make_pool(dir.path(), "p.pool");
    let f = open_rw(&pool);
    let a = attach(dir.path(), &pool, &f).unwrap();
    a.publish().unwrap();
    let file = open_rw(&a.path);
    let f2 = open_rw(&pool);
    let refuse = |why: &str| {
        let msg = attach(dir.path(), &pool, &f2).err().unwrap().to_string();
        assert!(
            msg.contains(why) && msg.contains(&a.path.display().to_string()),
            "{msg}"
        );
    };
    let v = lynxfs::runtime::RUNTIME_VERSION;
    file.write_at(&(v + 1).to_le_bytes(), 8).unwrap();
    refuse(&format!("version {}, this build uses {v}", v + 1));
    file.write_at(&v.to_le_bytes(), 8).unwrap();
    file.write_at(b"NOTLYNX!", 0).unwrap();
    refuse("bad magic");
    file.write_at(b"LYNXRUN\0", 0).unwrap();
    let bigger = Shape {
        bytes: BYTES + 4096,
        ..SHAPE
    };
    let msg = RuntimeFile::attach_in(dir.path(), &pool, &f2, UUID, bigger)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("another LynxFS version"), "{msg}");
    let b = attach(dir.path(), &pool, &f2).unwrap();
    assert!(!b.first, "the restored header is accepted");
}

#[test]
fn a_runtime_file_left_by_a_killed_process_is_rebuilt() {
    let _dog = watchdog("a_runtime_file_left_by_a_killed_process_is_rebuilt");
    let dir = tempfile::tempdir().unwrap();
    let pool = make_pool(dir.path(), "p.pool");
    let mut kid = spawn(dir.path(), &pool, true);
    let (first, _, path) = kid.attached();
    assert!(first);
    kid.kill();
    let (status, last) = kid.finish();
    assert!(!status.success() && last.is_none(), "the child was killed");
    assert!(path.exists(), "a killed process leaves its runtime file");

    let f = open_rw(&pool);
    let a = attach(dir.path(), &pool, &f).unwrap();
    assert!(
        a.first,
        "nobody holds the attachment lock of a dead process"
    );
    assert!(!path.exists(), "the stale session is removed");
    assert_eq!(
        RuntimeFile::sessions_in(dir.path(), &pool, &f, UUID).unwrap(),
        vec![a.path.parent().unwrap().to_path_buf()]
    );
    // The child published its runtime (READY): a fresh one is being built.
    assert_eq!(
        (a.procs.state(), a.procs.generation()),
        (procs::BUILDING, 1)
    );
    assert!(
        a.procs.dead_slots().is_empty(),
        "the dead child's slot is gone"
    );
    assert_eq!(a.procs.ops_in_flight(a.slot), 0);
    let path = a.path.clone();
    drop(a);

    // A stale file of ours with anything in it (an older version) is replaced too.
    std::fs::write(&path, b"an older layout").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let a = attach(dir.path(), &pool, &f).unwrap();
    assert!(a.first);
    assert!(!path.exists());
    a.publish().unwrap();
    let f2 = open_rw(&pool);
    assert!(!attach(dir.path(), &pool, &f2).unwrap().first);
}

#[test]
fn a_killed_attacher_is_seen_dead_and_interrupts_waits() {
    let _dog = watchdog("a_killed_attacher_is_seen_dead_and_interrupts_waits");
    let dir = tempfile::tempdir().unwrap();
    let pool = make_pool(dir.path(), "p.pool");
    let f = open_rw(&pool);
    let a = attach(dir.path(), &pool, &f).unwrap();
    a.publish().unwrap();
    let health = Health::new(a.procs.clone());
    let mut kid = spawn(dir.path(), &pool, true);
    let (first, slot, _) = kid.attached();
    assert!(!first);
    assert!(a.procs.alive(slot));
    assert_eq!(a.procs.ops_in_flight(slot), 1);
    let soon = || Instant::now() + Duration::from_millis(50);
    assert_eq!(
        a.procs.wait_quiescent(a.slot, soon()).unwrap_err().0,
        vec![slot]
    );
    std::thread::sleep(SCAN_EVERY * 2);
    assert_eq!(health.check(), Ok(()), "nobody died yet");

    // Killed and not yet reaped: a zombie, which counts as dead.
    kid.kill();
    let end = Instant::now() + Duration::from_secs(10);
    while a.procs.dead_slots().is_empty() {
        assert!(Instant::now() < end, "the killed child never looked dead");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(a.procs.dead_slots(), vec![slot]);
    assert_eq!(
        a.procs.wait_quiescent(a.slot, soon()),
        Ok(1),
        "the dead are quiescent"
    );
    std::thread::sleep(SCAN_EVERY * 2);
    assert_eq!(health.check(), Err(Interrupted));
    assert_eq!(a.procs.state(), procs::REPAIRING);
    assert!(
        a.procs.enter_op(a.slot).is_err(),
        "no operation starts during repair"
    );
    assert!(a.procs.claim_repair(a.slot));
    assert!(a.procs.reap(slot));
    a.procs.end_repair(2);
    assert_eq!(health.check(), Ok(()));
    assert_eq!((a.procs.state(), a.procs.generation()), (procs::READY, 2));
    assert!(a.procs.enter_op(a.slot).is_ok());
    let (status, _) = kid.finish();
    assert!(!status.success());
}

#[test]
fn the_last_detach_removes_the_file_and_the_next_attach_is_first() {
    let _dog = watchdog("the_last_detach_removes_the_file_and_the_next_attach_is_first");
    let dir = tempfile::tempdir().unwrap();
    let pool = make_pool(dir.path(), "p.pool");
    let files: Vec<File> = (0..3).map(|_| open_rw(&pool)).collect();
    // Each publishes before the next attaches (the first holds the others off until then).
    let mut att: Vec<Attached> = files
        .iter()
        .map(|f| {
            let a = attach(dir.path(), &pool, f).unwrap();
            a.publish().unwrap();
            a
        })
        .collect();
    assert!(att[0].first && !att[1].first && !att[2].first);
    let path = att[0].path.clone();
    for want_last in [false, false, true] {
        let a = att.pop().unwrap();
        assert_eq!(a.detach_begin().unwrap(), want_last);
        a.detach_end().unwrap();
        assert_eq!(path.exists(), !want_last);
    }
    let a = attach(dir.path(), &pool, &files[0]).unwrap();
    assert!(a.first);
}

#[test]
fn a_full_runtime_directory_is_a_clear_error() {
    let _dog = watchdog("a_full_runtime_directory_is_a_clear_error");
    let dir = tempfile::tempdir().unwrap();
    let pool = make_pool(dir.path(), "p.pool");
    let f = open_rw(&pool);
    let huge = Shape {
        bytes: 1usize << 50,
        ..SHAPE
    };
    let e = RuntimeFile::attach_in(dir.path(), &pool, &f, UUID, huge)
        .err()
        .unwrap();
    let msg = e.to_string();
    // Reserved by the first attacher: all but the other processes' open tables.
    let need = huge.bytes - (MAX_PROCS as usize - 1) * ENTRIES * 8;
    assert!(
        msg.starts_with(&dir.path().display().to_string())
            && msg.contains("bytes free")
            && msg.contains(&format!("needs {need}")),
        "{msg}"
    );
    assert!(msg.contains(&pool.display().to_string()), "{msg}");
    assert_eq!(e.errno(), libc::ENOSPC);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "nothing left behind"
    );
    let small = Shape {
        bytes: 4096,
        ..SHAPE
    };
    let small = RuntimeFile::attach_in(dir.path(), &pool, &f, UUID, small)
        .err()
        .unwrap();
    assert_eq!(small.errno(), libc::EINVAL);
    let ro = File::open(&pool).unwrap();
    let msg = attach(dir.path(), &pool, &ro).err().unwrap().to_string();
    assert!(msg.contains("open for writing"), "{msg}");
    // The failures released the locks: a normal attach goes through.
    assert!(attach(dir.path(), &pool, &f).unwrap().first);
}

/// An OFD write lock on all of `fd`'s file, without waiting: whether it was had.
fn ofd_write_lock(fd: &impl std::os::fd::AsRawFd) -> bool {
    // SAFETY: a plain C struct; all-zero is valid (the whole file) and then filled in.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: fcntl on a descriptor the caller owns, with a live flock struct.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &fl as *const libc::flock) == 0 }
}

#[test]
fn attachers_share_one_lock_stand_in_per_inode_removed_by_the_last() {
    let _dog = watchdog("attachers_share_one_lock_stand_in_per_inode_removed_by_the_last");
    let dir = tempfile::tempdir().unwrap();
    let pool = make_pool(dir.path(), "p.pool");
    let files: Vec<File> = (0..2).map(|_| open_rw(&pool)).collect();
    let mut att: Vec<Attached> = files
        .iter()
        .map(|f| {
            let a = attach(dir.path(), &pool, f).unwrap();
            a.publish().unwrap();
            a
        })
        .collect();
    let locks = att[0].stand_ins().expect("stand-ins").path().to_path_buf();
    let m = std::fs::symlink_metadata(&locks).unwrap();
    assert!(m.is_dir() && m.mode() & 0o7777 == 0o700, "{m:?}");
    let s = |a: &Attached, ino| a.stand_ins().unwrap().open(ino).unwrap();
    let (mine, theirs, other) = (s(&att[0], 7), s(&att[1], 7), s(&att[1], 8));
    assert!(ofd_write_lock(&mine));
    assert!(!ofd_write_lock(&theirs), "one inode, one lock");
    assert!(ofd_write_lock(&other), "another inode, another lock");
    drop((mine, theirs, other));
    for want_last in [false, true] {
        let a = att.pop().unwrap();
        assert_eq!(a.detach_begin().unwrap(), want_last);
        a.detach_end().unwrap();
        assert_eq!(locks.exists(), !want_last, "{}", locks.display());
    }
}

/// Runs `mkdir -m 0700 PATH` as uid [`OTHER`].
fn mkdir_as_other(path: &Path) {
    use std::os::unix::process::CommandExt;
    let st = Command::new("mkdir")
        .args(["-m", "0700", "--"])
        .arg(path)
        .uid(OTHER)
        .gid(OTHER)
        .status()
        .unwrap();
    assert!(st.success(), "mkdir {} as uid {OTHER}", path.display());
}

/// Another user (here uid 1000).
const OTHER: u32 = 1000;

/// Issue 42, defect 7: in a shared directory (as `/dev/shm` is: anyone may create,
/// nobody may remove another's), another user who saw a pool's runtime names while
/// it was attached, or who guesses them, makes directories there with every one of
/// them. The pool still attaches, first and later attachers alike, and what they
/// made is left alone; while attached, they cannot create anything inside.
#[test]
fn names_another_user_plants_stand_in_no_attachers_way() {
    let _dog = watchdog("names_another_user_plants_stand_in_no_attachers_way");
    assert_eq!(
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() },
        0,
        "needs root (to act as uid {OTHER})"
    );
    let dir = tempfile::tempdir().unwrap();
    let rt = dir.path().join("shm");
    std::fs::create_dir(&rt).unwrap();
    std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let pool = make_pool(dir.path(), "p.pool");
    let (f, f2) = (open_rw(&pool), open_rw(&pool));

    // A session: the names it shows in the shared directory.
    let a = attach(&rt, &pool, &f).unwrap();
    a.publish().unwrap();
    let shown: Vec<PathBuf> = std::fs::read_dir(&rt)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!shown.is_empty());
    // Nothing can be made inside what the session made (a directory of ours alone,
    // or a file).
    for p in &shown {
        use std::os::unix::process::CommandExt;
        let st = Command::new("mkdir")
            .arg(p.join("planted"))
            .uid(OTHER)
            .gid(OTHER)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(!st.success(), "uid {OTHER} made a name in {}", p.display());
    }
    assert!(a.detach_begin().unwrap());
    a.detach_end().unwrap();

    // Every name the session showed, each with the extensions runtime names have had
    // (`.run`, `.locks`), planted by the other user, mode 0700 as ours would be.
    let mut planted = Vec::new();
    for p in &shown {
        for name in [
            p.clone(),
            p.with_extension("run"),
            p.with_extension("locks"),
        ] {
            if !planted.contains(&name) && !name.exists() {
                mkdir_as_other(&name);
                planted.push(name);
            }
        }
    }
    let a = attach(&rt, &pool, &f).unwrap();
    assert!(a.first, "nobody is attached");
    a.publish().unwrap();
    let b = attach(&rt, &pool, &f2).unwrap();
    assert!(!b.first, "the second attacher joins the first");
    assert_eq!(b.path, a.path);
    assert!(!planted.iter().any(|p| a.path.starts_with(p)));
    assert!(!b.detach_begin().unwrap());
    b.detach_end().unwrap();
    assert!(a.detach_begin().unwrap());
    a.detach_end().unwrap();
    for p in &planted {
        let m = std::fs::symlink_metadata(p).unwrap();
        assert_eq!(
            (m.uid(), m.is_dir()),
            (OTHER, true),
            "{} left alone",
            p.display()
        );
    }
}

/// Set or clear (`F_UNLCK`) an open-file-description lock on byte `at` of `f`, as
/// the engine's attach and detach do (`runtime::attach`: byte 0 is the transition lock).
fn ofd_lock(f: &File, at: i64, kind: i32) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain C struct; all-zero is a valid value that we then fill in.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = at;
    fl.l_len = 1;
    // SAFETY: fcntl on a descriptor `f` owns, with a pointer to a live flock struct.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &fl as *const libc::flock) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}

/// Waits until some open of the file whose inode is `ino` waits for a lock on it
/// (`/proc/locks` lists waiters with "->").
fn wait_for_a_lock_waiter(ino: u64) {
    let start = Instant::now();
    loop {
        let locks = std::fs::read_to_string("/proc/locks").unwrap();
        let waiting = locks.lines().any(|l| {
            l.contains("->")
                && l.split_whitespace()
                    .any(|w| w.rsplit(':').next() == Some(&ino.to_string()))
        });
        if waiting {
            return;
        }
        assert!(
            start.elapsed() < TEST_LIMIT / 2,
            "nobody waits on the pool's locks"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The flake of lynxfs-preload's `a_program_killed_mid_run_leaves_the_others_and_the_pool_sound`
/// ("N data block(s) / inode(s) in use are marked free"): a process read the
/// superblock (pool clean) and, before it took the transition lock, another process
/// attached first, made files and left last, saving the allocator state and marking
/// the pool clean with a newer generation. The waiting process then attached first
/// with its stale superblock: it wrote "in use" under the generation the other had
/// already used, so the pool still read clean (the other's newer copy) while it made
/// files. When it left without saving (killed, or a process died), the next open
/// trusted the old saved bitmaps: everything made since was "free". The superblock
/// must be read under the transition lock.
#[test]
fn a_first_attacher_reads_the_superblock_under_the_transition_lock() {
    let _w = watchdog("a_first_attacher_reads_the_superblock_under_the_transition_lock");
    use lynxfs::{Cred, Fs};
    let dir = tempfile::tempdir().unwrap();
    let pool = make_pool(dir.path(), "p.pool");
    let write_files = |fs: &Fs, prefix: &str| {
        let s = fs.session(Cred::root());
        for i in 0..10 {
            let fd = s
                .open(
                    format!("/{prefix}{i}"),
                    libc::O_CREAT | libc::O_WRONLY,
                    0o644,
                )
                .unwrap();
            fs.write(fd, b"some data").unwrap();
            fs.close_fd(fd).unwrap();
        }
    };
    // The pool as the late process reads its superblock, and as the other leaves it.
    let before = std::fs::read(&pool).unwrap();
    let fs = Fs::open(&pool).unwrap();
    write_files(&fs, "a");
    fs.close().unwrap();
    drop(fs);
    let after = std::fs::read(&pool).unwrap();
    let f = open_rw(&pool);
    f.write_all_at(&before, 0).unwrap();
    // The late process reads the superblock, then waits for the transition lock,
    // during which the other's whole life (its bytes) happens.
    ofd_lock(&f, 0, libc::F_WRLCK);
    let late = std::thread::spawn({
        let pool = pool.clone();
        move || Fs::open(&pool).unwrap()
    });
    wait_for_a_lock_waiter(f.metadata().unwrap().ino());
    f.write_all_at(&after, 0).unwrap();
    ofd_lock(&f, 0, libc::F_UNLCK);
    let fs = late.join().unwrap();
    write_files(&fs, "b");
    // It dies without saving anything: the next open must recover.
    fs.pool().crash_in_place();
    drop(fs);
    let p = Pool::open(&pool, lynxfs::Access::ReadOnly, PmemBackend::default()).unwrap();
    let rep = lynxfs::fsck::check(&p);
    assert!(rep.is_clean(), "{:?}", rep.problems);
    assert!(
        !p.was_clean,
        "the pool reads clean after a process died in it"
    );
}
