//! Racing callers: two threads of this process and two other processes create
//! (write a temporary file, rename it over a name), unlink, chmod, truncate, read,
//! rename and link the same four names at once. The interleaving differs from run
//! to run, so results are not compared with tmpfs one by one; what tmpfs keeps is
//! checked instead, on tmpfs too (so the checks are known to be fair):
//!
//! - no call fails with an errno outside the few its race allows (never EIO);
//! - a file never named by the others (the racer's own temporary) is exactly what
//!   its racer wrote, and its rename over a shared name succeeds;
//! - whatever is read under a shared name is empty (truncated) or one whole record
//!   some racer wrote: never a mix, never another length. Unless `strict`, zeros (at
//!   most a record's length) are let pass *during* the race: the kernel's FUSE page cache
//!   fills a read the daemon answered short (the file was just truncated) with zeros
//!   up to the size it had cached (`fuse_short_read`), which tmpfs never shows; the
//!   ignored `racing_reads_see_only_bytes_someone_wrote` keeps that case;
//! - afterwards every name holds such content, has one of the modes set, a link
//!   count equal to the names it has, no temporary is left, and the listing agrees
//!   with lookups; on LynxFS the pool then passes fsck.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use lynxfs::pmem::PmemBackend;
use lynxfs::{Access, Pool};
use lynxfs_fuse::mount::{mount_background, MountOptions};

use crate::errno_name;
use crate::spawn::{self, ExeCopy};

const NAMES: u64 = 4;
const RECORD: usize = 64;
const ITERATIONS: u32 = 1500;
/// Racers 0 and 1 are threads of the test process, 2 and 3 other processes.
const RACERS: u32 = 4;

/// The record racer `id` writes in its iteration `i`: unique, of a fixed length.
fn record(id: u32, i: u32) -> Vec<u8> {
    let mut r = format!("racer {id} iteration {i} ").into_bytes();
    r.resize(RECORD, b'.');
    r
}

/// Empty, or one whole record of a racer that exists.
fn is_whole_record(b: &[u8]) -> bool {
    if b.is_empty() {
        return true;
    }
    let Ok(text) = std::str::from_utf8(b) else {
        return false;
    };
    let mut words = text.split(' ');
    let (Some("racer"), Some(id), Some("iteration"), Some(i)) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return false;
    };
    match (id.parse::<u32>(), i.parse::<u32>()) {
        (Ok(id), Ok(i)) => id < RACERS && i < ITERATIONS && b == record(id, i).as_slice(),
        _ => false,
    }
}

/// A small deterministic generator (xorshift), one sequence per racer.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn errno_of(e: &std::io::Error) -> String {
    errno_name(e.raw_os_error().unwrap_or(0))
}

/// Checks a result against the errnos its race allows.
fn allow<T>(problems: &mut Vec<String>, what: &str, r: std::io::Result<T>, ok: &[i32]) {
    if let Err(e) = r {
        if !ok.contains(&e.raw_os_error().unwrap_or(0)) {
            problems.push(format!("{what}: {}", errno_of(&e)));
        }
    }
}

/// Writes a record to a temporary file of its own, checks it, renames it over `to`.
fn put(problems: &mut Vec<String>, dir: &Path, id: u32, i: u32, to: &Path) {
    use std::io::Write;
    let tmp = dir.join(format!("tmp-{id}-{i}"));
    let rec = record(id, i);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(&rec)?;
            f.metadata()
        });
    match written {
        Ok(m) if m.len() == RECORD as u64 => {}
        Ok(m) => problems.push(format!(
            "{}: size {} after the write",
            tmp.display(),
            m.len()
        )),
        Err(e) => problems.push(format!("{}: {}", tmp.display(), errno_of(&e))),
    }
    match std::fs::read(&tmp) {
        Ok(b) if b == rec => {}
        Ok(b) => problems.push(format!("{}: reads back {b:?}", tmp.display())),
        Err(e) => problems.push(format!("{}: read: {}", tmp.display(), errno_of(&e))),
    }
    allow(problems, "rename temporary", std::fs::rename(&tmp, to), &[]);
}

/// Zeros, at most a record's length (see the module comment): the kernel fills up to
/// the size it cached, which a read split in two can see part of.
fn is_zero_fill(b: &[u8]) -> bool {
    b.len() <= RECORD && b.iter().all(|&x| x == 0)
}

/// Reads `name` and checks what it holds.
fn read(problems: &mut Vec<String>, name: &Path, strict: bool) {
    match std::fs::read(name) {
        Ok(b) if is_whole_record(&b) || (!strict && is_zero_fill(&b)) => {}
        Ok(b) => problems.push(format!("{}: read {b:?}", name.display())),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        Err(e) => problems.push(format!("{}: read: {}", name.display(), errno_of(&e))),
    }
}

/// One racer's whole run; returns what went wrong.
pub fn racer(dir: &Path, id: u32, strict: bool) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut problems = Vec::new();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (u64::from(id + 1) * 0x1234_5677));
    let name = |k: u64| dir.join(format!("n{k}"));
    let enoent = [libc::ENOENT];
    for i in 0..ITERATIONS {
        let (a, b) = (name(rng.next() % NAMES), name(rng.next() % NAMES));
        match rng.next() % 8 {
            0 | 1 => put(&mut problems, dir, id, i, &a),
            2 => allow(&mut problems, "unlink", std::fs::remove_file(&a), &enoent),
            3 => {
                let mode = if i % 2 == 0 { 0o600 } else { 0o644 };
                let p = std::fs::Permissions::from_mode(mode);
                allow(
                    &mut problems,
                    "chmod",
                    std::fs::set_permissions(&a, p),
                    &enoent,
                );
            }
            4 => {
                let r = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&a)
                    .and_then(|f| f.set_len(0));
                allow(&mut problems, "truncate", r, &enoent);
            }
            5 => read(&mut problems, &a, strict),
            6 => allow(&mut problems, "rename", std::fs::rename(&a, &b), &enoent),
            _ => allow(
                &mut problems,
                "link",
                std::fs::hard_link(&a, &b),
                &[libc::ENOENT, libc::EEXIST],
            ),
        }
    }
    problems
}

/// What must hold once every racer has finished.
fn final_state(dir: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let listed: Vec<String> = std::fs::read_dir(dir)
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let mut found = Vec::new();
    for k in 0..NAMES {
        let n = format!("n{k}");
        match std::fs::symlink_metadata(dir.join(&n)) {
            Ok(m) => found.push((n, m)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => problems.push(format!("{n}: lstat: {}", errno_of(&e))),
        }
    }
    let mut want: Vec<&String> = found.iter().map(|(n, _)| n).collect();
    let mut got: Vec<&String> = listed.iter().filter(|n| *n != "go").collect();
    want.sort();
    got.sort();
    if want != got {
        problems.push(format!("listed {got:?}, found by lookup {want:?}"));
    }
    for (n, m) in &found {
        let mode = m.mode();
        if mode != libc::S_IFREG | 0o600 && mode != libc::S_IFREG | 0o644 {
            problems.push(format!("{n}: mode {mode:o}"));
        }
        let names = found.iter().filter(|(_, o)| o.ino() == m.ino()).count();
        if m.nlink() != names as u64 {
            problems.push(format!("{n}: nlink {} for {names} names", m.nlink()));
        }
        match std::fs::read(dir.join(n)) {
            Ok(b) if is_whole_record(&b) => {}
            Ok(b) => problems.push(format!("{n}: holds {b:?}")),
            Err(e) => problems.push(format!("{n}: read: {}", errno_of(&e))),
        }
    }
    problems
}

/// Waits for the parent's go signal (the file `go`), so that every racer starts at once.
fn wait_for_go(dir: &Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !dir.join("go").exists() {
        assert!(std::time::Instant::now() < deadline, "no go signal");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A racer process's part: `args` is `id|strict|dir`.
pub fn child(args: &str) {
    let mut parts = args.splitn(3, '|');
    let (Some(id), Some(strict), Some(dir)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("bad racer arguments {args:?}");
    };
    let dir = Path::new(dir);
    wait_for_go(dir);
    let problems = racer(dir, id.parse().expect("racer id"), strict == "strict");
    assert!(problems.is_empty(), "racer {id}: {problems:#?}");
}

/// Runs all racers in `dir` and returns what went wrong, racers and final state.
fn race_in(exe: &Path, test: &str, dir: &Path, strict: bool) -> Vec<String> {
    let how = if strict { "strict" } else { "lenient" };
    let children: Vec<_> = (2..RACERS)
        .map(|id| {
            let cmd = spawn::rerun(exe, test, &format!("{id}|{how}|{}", dir.display()));
            std::thread::spawn(move || spawn::run_role(cmd, Duration::from_secs(240)))
        })
        .collect();
    let threads: Vec<_> = (0..2)
        .map(|id| {
            let dir = dir.to_path_buf();
            std::thread::spawn(move || {
                wait_for_go(&dir);
                racer(&dir, id, strict)
            })
        })
        .collect();
    // Give the processes a moment to start, then let everyone go.
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(dir.join("go"), b"").expect("go");
    let mut problems = Vec::new();
    for t in threads {
        problems.extend(t.join().expect("racer thread"));
    }
    for c in children {
        let done = c.join().expect("racer process");
        if !done.success {
            problems.push(format!("a racer process failed:\n{}", done.output));
        }
    }
    problems.extend(final_state(dir));
    problems
}

/// `strict`: zero-filled reads during the race count as problems too.
pub fn parent(test: &str, options: &str, strict: bool) {
    let _watchdog = lynxfs_test_support::watchdog(test, Duration::from_secs(400));
    let exe = ExeCopy::new();
    let shm = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let pool_dir = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let mnt = tempfile::tempdir().expect("mount point");
    let pool = crate::make_pool(pool_dir.path());
    let opts = MountOptions::parse(options).expect("options");
    let mount = mount_background(&pool, mnt.path(), &opts).expect("mounting the pool");
    crate::check_transport(options, mnt.path());
    let on_tmpfs = race_in(&exe.path, test, shm.path(), true);
    let on_lynxfs = race_in(&exe.path, test, mnt.path(), strict);
    mount.unmount().expect("unmount");
    let p = Pool::open(&pool, Access::ReadOnly, PmemBackend::default()).expect("reopen");
    let fsck = lynxfs::fsck::check(&p);
    assert!(on_tmpfs.is_empty(), "on tmpfs: {on_tmpfs:#?}");
    assert!(
        on_lynxfs.is_empty(),
        "on LynxFS [{options}]: {on_lynxfs:#?}"
    );
    assert!(fsck.problems.is_empty(), "fsck: {:#?}", fsck.problems);
}
