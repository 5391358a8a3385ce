//! Races through the mount between a name's users and its replacement (issue 11,
//! item 1): the kernel resolves a name to an inode number and later requests carry
//! the number alone, so the number must stay bound to the file the kernel resolved
//! until it forgets it.
//!
//! Renamer processes loop { create `t<n>` (O_EXCL), write 1,000 bytes, fstat, close,
//! rename it over `f` }, while threads of the test process loop `truncate("f", 0)` and
//! `chmod("f", 0600)` and `unlink("f")`. On a correct file system (tmpfs) a renamer's fresh file, which
//! never had the name `f` yet, is never truncated or chmodded, and truncate and chmod
//! only ever succeed or say ENOENT. Before the fix, freed inode numbers were reused
//! while the kernel still held them, and within seconds files that were never `f`
//! were truncated and chmodded, and truncate/chmod returned EIO.
//!
//! Renamers run as separate processes (this test binary re-run in the `renamer` role)
//! and as threads, so both the multi-process and the multi-threaded paths are raced.
//! Needs root and `/dev/fuse`; every wait is bounded.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lynxfs::pmem::PmemBackend;
use lynxfs::{MkfsOptions, Pool};
use lynxfs_fuse::mount::{mount_background, MountOptions};

/// How long the race runs.
const RACE: Duration = Duration::from_secs(4);
/// The whole test must end within this, or it fails (a hang is a failure).
const WATCHDOG: Duration = Duration::from_secs(120);
const ROLE: &str = "LYNXFS_RACE_ROLE";
const DIR: &str = "LYNXFS_RACE_DIR";
const DEADLINE_MS: &str = "LYNXFS_RACE_MS";
/// The mode renamers create with (umask cleared in their process).
const MODE: u32 = 0o644;
const LEN: u64 = 1000;

/// What a renamer saw go wrong, as lines of text (empty: nothing).
fn renamer(dir: &Path, tag: &str, run_for: Duration) -> Vec<String> {
    let mut bad = Vec::new();
    let end = Instant::now() + run_for;
    let payload = vec![b'x'; LEN as usize];
    let mut n = 0u64;
    while Instant::now() < end {
        n += 1;
        let t = dir.join(format!("t-{tag}-{n}"));
        let f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(MODE)
            .open(&t);
        let mut f = match f {
            Ok(f) => f,
            Err(e) => {
                bad.push(format!("create {}: {e}", t.display()));
                continue;
            }
        };
        use std::io::Write;
        if let Err(e) = f.write_all(&payload) {
            bad.push(format!("write {}: {e}", t.display()));
        }
        match f.metadata() {
            Ok(m) if m.len() != LEN => bad.push(format!(
                "{} (never named f) was truncated to {} bytes",
                t.display(),
                m.len()
            )),
            Ok(m) if m.mode() & 0o7777 != MODE => bad.push(format!(
                "{} (never named f) was chmodded to {:o}",
                t.display(),
                m.mode() & 0o7777
            )),
            Ok(_) => {}
            Err(e) => bad.push(format!("fstat {}: {e}", t.display())),
        }
        drop(f);
        if let Err(e) = fs::rename(&t, dir.join("f")) {
            bad.push(format!("rename {} over f: {e}", t.display()));
        }
    }
    bad
}

/// The renamer role: run when this binary is re-run by the test.
#[test]
#[ignore = "a worker process of the race test below, which runs it; not a test by itself"]
fn race_renamer_process() {
    let dir = PathBuf::from(std::env::var(DIR).expect("run by the race test"));
    let ms: u64 = std::env::var(DEADLINE_MS).unwrap().parse().unwrap();
    let tag = std::env::var(ROLE).unwrap();
    // SAFETY: umask only sets this process's file-creation mask; no memory involved.
    unsafe { libc::umask(0) };
    let bad = renamer(&dir, &tag, Duration::from_millis(ms));
    for b in &bad {
        println!("BAD {b}");
    }
    assert!(bad.is_empty(), "{} failures", bad.len());
}

fn spawn_renamer(dir: &Path, tag: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "race_renamer_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, tag)
        .env(DIR, dir)
        .env(DEADLINE_MS, RACE.as_millis().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a renamer")
}

/// Waits for `child` up to `limit`; kills it and fails the test past that.
fn wait_bounded(mut child: Child, limit: Duration) -> std::process::Output {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    panic!(
        "a renamer did not finish within {limit:?}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Loops `op` on `f` until `stop`; counts successes and records any error other
/// than ENOENT (the only one tmpfs gives here).
fn hammer(
    f: PathBuf,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    op: fn(&CString) -> i32,
) -> Vec<String> {
    let c = CString::new(f.as_os_str().as_bytes()).unwrap();
    let mut bad = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        if op(&c) == 0 {
            done.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOENT) && bad.len() < 20 {
            bad.push(format!("{}: {e}", f.display()));
        }
    }
    bad
}

fn truncate0(c: &CString) -> i32 {
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    unsafe { libc::truncate(c.as_ptr(), 0) }
}

fn unlink(c: &CString) -> i32 {
    // SAFETY: as above.
    unsafe { libc::unlink(c.as_ptr()) }
}

fn chmod600(c: &CString) -> i32 {
    // SAFETY: as above.
    unsafe { libc::chmod(c.as_ptr(), 0o600) }
}

/// Runs the race in `dir` and returns every failure seen, with how many truncates
/// and chmods succeeded (so a race that never hit `f` cannot pass unnoticed).
fn race(dir: &Path) -> (Vec<String>, u64) {
    fs::write(dir.join("f"), b"seed").unwrap();
    fs::set_permissions(dir.join("f"), fs::Permissions::from_mode(MODE)).unwrap();
    let children: Vec<Child> = (0..2)
        .map(|i| spawn_renamer(dir, &format!("p{i}")))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let f = dir.join("f");
    let hammers: Vec<_> = [
        truncate0 as fn(&CString) -> i32,
        truncate0,
        chmod600,
        unlink,
    ]
    .into_iter()
    .map(|op| {
        let (f, stop, done) = (f.clone(), stop.clone(), done.clone());
        thread::spawn(move || hammer(f, stop, done, op))
    })
    .collect();
    // A renamer thread in this process too; its files must come out with MODE.
    // SAFETY: sets this process's file-creation mask; no memory involved.
    unsafe { libc::umask(0) };
    let here = {
        let d = dir.to_path_buf();
        thread::spawn(move || renamer(&d, "thread", RACE))
    };
    let mut bad = Vec::new();
    for c in children {
        let out = wait_bounded(c, RACE + Duration::from_secs(60));
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some(b) = line.strip_prefix("BAD ") {
                bad.push(b.to_string());
            }
        }
        if !out.status.success() && bad.is_empty() {
            bad.push(format!(
                "a renamer process failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    bad.extend(here.join().unwrap());
    stop.store(true, Ordering::Relaxed);
    for h in hammers {
        bad.extend(h.join().unwrap());
    }
    (bad, done.load(Ordering::Relaxed))
}

#[test]
fn a_name_replaced_under_truncate_and_chmod_never_hits_another_file() {
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing");
    let _dog = lynxfs_test_support::watchdog("the race test", WATCHDOG);
    let tmp = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = tmp.path().join("pool");
    Pool::mkfs(&pool, &MkfsOptions::new(256 << 20), PmemBackend::default()).unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let m = mount_background(&pool, mnt.path(), &MountOptions::default()).expect("mount");
    let (bad, done) = race(mnt.path());
    let files = fs::read_dir(mnt.path()).unwrap().count();
    m.unmount().expect("unmount");
    assert!(
        bad.is_empty(),
        "{} failures through the mount, e.g.:\n{}",
        bad.len(),
        bad.iter().take(10).cloned().collect::<Vec<_>>().join("\n")
    );
    assert!(
        done > 100,
        "the race barely ran: {done} truncates/chmods succeeded"
    );
    assert!(files <= 1, "only f (or nothing) is left: {files} names");
    let p = Pool::open(&pool, lynxfs::Access::ReadOnly, PmemBackend::default()).unwrap();
    assert!(p.was_clean, "the unmount closed the pool cleanly");
    let report = lynxfs::fsck::check(&p);
    assert!(report.is_clean(), "fsck after the race: {report:?}");
}
