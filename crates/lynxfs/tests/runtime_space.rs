//! The runtime file's memory (issue 30, item 6): sized from the pool's geometry, and
//! reserved before it is touched, so that a full runtime directory (any user can fill
//! `/dev/shm`) is a clear ENOSPC error at attach, never a SIGBUS later.
//!
//! The tests that fill a directory mount a small tmpfs of their own (as root) as the
//! runtime directory of child processes (this test binary in child mode, `child`), so
//! that a signal kills a child, seen in its exit status, and not the test binary.
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use lynxfs::pmem::PmemBackend;
use lynxfs::runtime::attach::RUNTIME_DIR_ENV;
use lynxfs::runtime::procs::MAX_PROCS;
use lynxfs::runtime::{open_entries_for, RuntimeFile};
use lynxfs::{Cred, Fs, MkfsOptions, Pool};

/// Child mode: the pool to attach.
const POOL_ENV: &str = "LYNXFS_RS_POOL";
/// Child mode: the name of the directories it makes (one per round).
const NAME_ENV: &str = "LYNXFS_RS_NAME";
const POOL_SIZE: u64 = 64 << 20;
/// How long one test may run before the watchdog aborts the binary.
const TEST_LIMIT: Duration = Duration::from_secs(120);

/// Child mode: attach the pool (runtime directory from the environment), say so or
/// print the error; then, for every line on stdin, do a round of work that touches
/// runtime state no operation touched before (new inodes, their records and open
/// entries) and say so.
#[test]
fn child() {
    let Some(pool) = std::env::var_os(POOL_ENV) else {
        return; // not a child
    };
    let fs = match Fs::open(Path::new(&pool)) {
        Ok(fs) => fs,
        Err(e) => {
            println!("@error {} {e}@", e.errno());
            return;
        }
    };
    println!("@attached@");
    let s = fs.session(Cred::root());
    let name = std::env::var(NAME_ENV).unwrap();
    for (round, line) in std::io::stdin().lock().lines().enumerate() {
        line.unwrap();
        let dir = format!("/{name}{round}");
        s.mkdir(&dir, 0o755).unwrap();
        let mut fds = Vec::new();
        for i in 0..300 {
            let fd = s.create(format!("{dir}/f{i}"), 0o644).unwrap();
            fs.write(fd, &[i as u8; 3000]).unwrap();
            fds.push(fd);
        }
        for (i, fd) in fds.into_iter().enumerate() {
            fs.close_fd(fd).unwrap();
            if i % 2 == 0 {
                s.unlink(format!("{dir}/f{i}")).unwrap();
            }
        }
        assert_eq!(s.stat(format!("{dir}/f1")).unwrap().size, 3000);
        println!("@worked {round}@");
    }
    fs.close().unwrap();
    println!("@closed@");
}

/// A tmpfs of `size` mounted on a fresh directory, unmounted and removed when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        assert_eq!(
            // SAFETY: geteuid has no preconditions.
            unsafe { libc::geteuid() },
            0,
            "this test mounts a tmpfs: run it as root (as `./lynx test` does)"
        );
        let dir = tempfile::Builder::new()
            .prefix("lynxfs-rs-")
            .tempdir()
            .unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size},mode=1777"))
            .arg("lynxfs-test")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "mount: {out:?}");
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write a file until the file system is full.
    fn fill(&self) {
        let mut f = std::fs::File::create(self.path().join("filler")).unwrap();
        let chunk = vec![0x55u8; 1 << 16];
        loop {
            match f.write(&chunk) {
                Ok(n) if n > 0 => {}
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", self.path().display()),
            }
        }
        let free = nix_free(self.path());
        assert!(free < 4096, "{free} bytes still free after filling");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let c = std::ffi::CString::new(self.path().as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: umount2 reads a NUL-terminated path that outlives the call.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

fn nix_free(dir: &Path) -> u64 {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a plain C struct; statvfs fills it from a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; both pointers are valid for the call.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st.f_bavail * st.f_frsize
}

/// A 64 MiB pool in a fresh directory of /dev/shm (mkfs reserves its memory).
fn make_pool() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("lynxfs-rs-pool")
        .tempdir_in("/dev/shm")
        .unwrap();
    let pool = dir.path().join("p.pool");
    let mut o = MkfsOptions::new(POOL_SIZE);
    o.lanes = 2;
    Pool::mkfs(&pool, &o, PmemBackend::default()).unwrap();
    (dir, pool)
}

/// A child in child mode; killed when dropped if still running.
struct Kid {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Kid {
    fn spawn(rt: &Path, pool: &Path, name: &str) -> Kid {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env(POOL_ENV, pool)
            .env(RUNTIME_DIR_ENV, rt)
            .env(NAME_ENV, name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Kid { child, out }
    }

    /// The child's next `@...@` message; panics, with how the child ended, if it
    /// ends first.
    fn said(&mut self) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            if self.out.read_line(&mut line).unwrap() == 0 {
                let status = self.child.wait().unwrap();
                panic!(
                    "the child ended without a word (signal {:?}, status {status})",
                    status.signal()
                );
            }
            // The harness may print its own words before ours on the line.
            if let (Some(a), Some(b)) = (line.find('@'), line.rfind('@')) {
                if a < b {
                    return line[a + 1..b].to_string();
                }
            }
        }
    }

    fn work(&mut self, round: usize) {
        writeln!(self.child.stdin.as_mut().unwrap()).unwrap();
        assert_eq!(self.said(), format!("worked {round}"));
    }

    /// Close stdin and wait for the child's clean end.
    fn finish(mut self) {
        drop(self.child.stdin.take());
        assert_eq!(self.said(), "closed");
        self.ends_well();
    }

    /// Wait for the child to exit, successfully (not by a signal).
    fn ends_well(mut self) {
        drop(self.child.stdin.take());
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).unwrap();
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "child: {status} (signal {:?})",
            status.signal()
        );
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The runtime file of a pool of 64 MiB is small (its tables are sized from the pool,
/// not for a million inodes and 128 processes), and every byte of it is backed but
/// the open tables of slots no process holds (each attacher reserves its own).
#[test]
fn a_small_pools_runtime_file_is_small_and_reserved() {
    let _dog = lynxfs_test_support::watchdog(
        "a_small_pools_runtime_file_is_small_and_reserved",
        TEST_LIMIT,
    );
    let (_pool_dir, pool) = make_pool();
    let fs = Fs::open(&pool).unwrap();
    let meta = std::fs::metadata(&pool).unwrap();
    // In the pool's session directory (runtime::attach), `lynxfs-UUID-DEV-INO.RANDOM`.
    let infix = format!("-{}-{}.", meta.dev(), meta.ino());
    let run = std::fs::read_dir(RuntimeFile::dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with("lynxfs-") && n.contains(&infix)
        })
        .expect("the pool's session directory")
        .join("state.run");
    let m = std::fs::metadata(&run).unwrap();
    assert!(
        m.len() <= POOL_SIZE / 4,
        "a runtime file of {} bytes for a pool of {POOL_SIZE}",
        m.len()
    );
    let inodes = POOL_SIZE / lynxfs::format::layout::BYTES_PER_INODE;
    let table = open_entries_for(inodes) as u64 * 8;
    // (SEEK_HOLE cannot tell: tmpfs reports reserved pages never written as holes.)
    let unheld = (MAX_PROCS as u64 - 1) * table;
    assert!(
        m.blocks() * 512 >= m.len() - unheld,
        "{} of {} bytes backed (at most {unheld} may be free slots' tables)",
        m.blocks() * 512,
        m.len()
    );
    fs.close().unwrap();
}

/// Attaching where the runtime directory has no room fails with ENOSPC, naming the
/// directory and the size, and no signal: both for the first attacher (the runtime
/// state) and for one that joins (its open table).
#[test]
fn attaching_to_a_full_runtime_directory_is_a_clear_enospc() {
    let _dog = lynxfs_test_support::watchdog(
        "attaching_to_a_full_runtime_directory_is_a_clear_enospc",
        TEST_LIMIT,
    );
    let (_pool_dir, pool) = make_pool();
    let rt = Tmpfs::mount("32m");
    let check = |mut kid: Kid, dir: &Path| {
        let msg = kid.said();
        kid.ends_well();
        let dir = dir.display().to_string();
        assert!(
            msg.starts_with(&format!("error {} {dir}: ", libc::ENOSPC))
                && msg.contains("bytes free")
                && msg.contains("needs "),
            "{msg}"
        );
    };
    {
        let filled = Tmpfs::mount("32m");
        filled.fill();
        check(Kid::spawn(filled.path(), &pool, "x"), filled.path());
        assert_eq!(
            std::fs::read_dir(filled.path()).unwrap().count(),
            1,
            "nothing left behind but the filler"
        );
    }
    let mut first = Kid::spawn(rt.path(), &pool, "a");
    assert_eq!(first.said(), "attached");
    rt.fill();
    check(Kid::spawn(rt.path(), &pool, "x"), rt.path());
    first.work(0);
    first.finish();
}

/// A process attached when the runtime directory fills up goes on working: every page
/// it touches afterwards was reserved (before, the first touch of a new page of the
/// sparse file killed it with SIGBUS), and the last detach removes the file.
#[test]
fn a_process_attached_when_the_directory_fills_keeps_working() {
    let _dog = lynxfs_test_support::watchdog(
        "a_process_attached_when_the_directory_fills_keeps_working",
        TEST_LIMIT,
    );
    let (_pool_dir, pool) = make_pool();
    let rt = Tmpfs::mount("32m");
    let mut a = Kid::spawn(rt.path(), &pool, "a");
    assert_eq!(a.said(), "attached");
    let mut b = Kid::spawn(rt.path(), &pool, "b");
    assert_eq!(b.said(), "attached");
    rt.fill();
    for round in 0..3 {
        a.work(round);
        b.work(round);
    }
    a.finish();
    b.finish();
    let left: Vec<_> = std::fs::read_dir(rt.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "filler")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let fs = Fs::open(&pool).unwrap();
    let size = fs.session(Cred::root()).stat("/b2/f299").unwrap().size;
    assert_eq!(size, 3000);
    fs.close().unwrap();
}

/// A process that detaches keeps its slot's open table reserved (zeroed) for the
/// slot's next process: that one attaches without reserving anything, so even into
/// a full runtime directory, and works (issue 29: a short program's attach no
/// longer pays a `fallocate` of its table, nor its detach an `MADV_REMOVE`).
#[test]
fn a_detached_process_leaves_its_open_table_to_the_next() {
    let _dog = lynxfs_test_support::watchdog(
        "a_detached_process_leaves_its_open_table_to_the_next",
        TEST_LIMIT,
    );
    let (_pool_dir, pool) = make_pool();
    let rt = Tmpfs::mount("32m");
    let mut a = Kid::spawn(rt.path(), &pool, "a");
    assert_eq!(a.said(), "attached");
    let mut b = Kid::spawn(rt.path(), &pool, "b");
    assert_eq!(b.said(), "attached");
    b.work(0);
    b.finish();
    rt.fill();
    let mut c = Kid::spawn(rt.path(), &pool, "c");
    assert_eq!(c.said(), "attached");
    c.work(0);
    c.finish();
    a.work(0);
    a.finish();
}
