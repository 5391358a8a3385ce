//! A disk that moves (issue 28) through the command line: a tree with every kind of
//! entry written through the FUSE mount of a hybrid pool, `lynxfs umount --export`,
//! the pool lost, `lynxfs import DEVICE NEWPOOL` and `lynxfs mount DEVICE DIR` (without
//! persistent memory) show the same listing, attributes and content; `lynxfs fsck
//! DEVICE` is clean; what is not an export is refused with a clear error.
//! Needs root and `/dev/fuse`; every command has a time limit and the test a watchdog.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::hash::{Hash, Hasher};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use lynxfs_test_support::child::{holder_of, output_within};
use lynxfs_test_support::{wait_until, watchdog};

const BIN: &str = env!("CARGO_BIN_EXE_lynxfs");

fn run(args: &[&Path]) -> Output {
    output_within(Command::new(BIN).args(args), Duration::from_secs(120))
}

fn ok(o: Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn fails(o: Output, what: &str) -> String {
    assert!(!o.status.success(), "{what} succeeded");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn mounted(mp: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mp = mp.to_string_lossy();
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(mp.as_ref()))
}

/// Unmounts on drop, so a failing test leaves no mount behind.
struct Mount<'a>(&'a Path);

impl<'a> Mount<'a> {
    fn new(source: &Path, mnt: &'a Path) -> Mount<'a> {
        Mount::with(source, mnt, &[])
    }

    /// A mount with these arguments before the source.
    fn with(source: &Path, mnt: &'a Path, extra: &[&str]) -> Mount<'a> {
        // noatime: the listings read every file, which must not change the atimes
        // they compare.
        let mut args = vec![Path::new("mount"), Path::new("-o"), Path::new("noatime")];
        args.extend(extra.iter().map(Path::new));
        args.extend([source, mnt]);
        ok(run(&args), "mount");
        wait_until("the mount", Duration::from_secs(60), || mounted(mnt));
        Mount(mnt)
    }

    /// `lynxfs umount [--export]`, checked.
    fn umount(self, export: bool) {
        let mut args = vec![Path::new("umount")];
        if export {
            args.push(Path::new("--export"));
        }
        args.push(self.0);
        ok(run(&args), "umount");
    }
}

impl Drop for Mount<'_> {
    fn drop(&mut self) {
        if mounted(self.0) {
            let _ = run(&[Path::new("umount"), self.0]);
        }
        if mounted(self.0) {
            let _ = output_within(
                Command::new("umount").arg("-l").arg(self.0),
                Duration::from_secs(60),
            );
        }
    }
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Sets atime and mtime to (seconds, nanoseconds) each, without following a symlink.
fn set_times(p: &Path, atime: (i64, i64), mtime: (i64, i64)) {
    let ts = [
        libc::timespec {
            tv_sec: atime.0,
            tv_nsec: atime.1,
        },
        libc::timespec {
            tv_sec: mtime.0,
            tv_nsec: mtime.1,
        },
    ];
    let path = c(p);
    // SAFETY: a NUL-terminated path and two timespecs, both outliving the call.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            path.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(r, 0, "utimensat {}", p.display());
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) {
    let (path, name) = (c(p), CString::new(name).unwrap());
    // SAFETY: NUL-terminated strings and a buffer of `value.len()` bytes, all
    // outliving the call.
    let r = unsafe {
        libc::lsetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(r, 0, "setxattr {name:?} on {}", p.display());
}

/// A tree with every kind of entry, written through the mount at `m`.
fn populate(m: &Path) {
    let d = m.join("d");
    std::fs::create_dir(&d).unwrap();
    let sticky = d.join("sticky");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let setuid = d.join("setuid");
    std::fs::write(&setuid, b"#!/bin/sh\necho hi\n").unwrap();
    std::os::unix::fs::chown(&setuid, Some(1000), Some(1000)).unwrap();
    std::fs::set_permissions(&setuid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let big: Vec<u8> = (0..700_000u32).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(d.join("big"), &big).unwrap();
    std::fs::hard_link(d.join("big"), d.join("big-link")).unwrap();
    std::os::unix::fs::symlink("big", d.join("sym")).unwrap();
    std::os::unix::fs::symlink("/nowhere/at/all", m.join("dangling")).unwrap();
    let sparse = std::fs::File::create(d.join("sparse")).unwrap();
    sparse.write_all_at(b"start", 0).unwrap();
    sparse.write_all_at(b"end", 64 << 20).unwrap();
    drop(sparse);
    let fifo = c(&d.join("fifo"));
    // SAFETY: a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
    let owned = d.join("owned");
    std::fs::write(&owned, vec![7u8; 5000]).unwrap();
    std::os::unix::fs::chown(&owned, Some(1000), Some(100)).unwrap();
    set_xattr(&owned, "user.note", b"kept");
    set_xattr(&d.join("big"), "user.large", &[9u8; 3000]);
    let acl = output_within(
        Command::new("setfacl")
            .args(["-m", "u:1000:rw,g:100:r"])
            .arg(&owned),
        Duration::from_secs(30),
    );
    assert!(
        acl.status.success(),
        "{}",
        String::from_utf8_lossy(&acl.stderr)
    );
    let dacl = output_within(
        Command::new("setfacl")
            .args(["-d", "-m", "u:1000:rwx"])
            .arg(&d),
        Duration::from_secs(30),
    );
    assert!(
        dacl.status.success(),
        "{}",
        String::from_utf8_lossy(&dacl.stderr)
    );
    set_times(
        &d.join("big"),
        (1, 999_999_999),
        (-946_080_000, 123_456_789),
    );
    set_times(&d.join("sparse"), (-1, 1), (4_000_000_000, 7));
    set_times(&m.join("dangling"), (-86_400, 5), (12, 34));
}

/// Every entry under `m`: path to its attributes, xattrs and a hash of its content.
fn listing(m: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![m.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let st = std::fs::symlink_metadata(&p).unwrap();
            let mut line = format!(
                "ino {} mode {:o} nlink {} uid {} gid {} size {} rdev {} atime {}.{} mtime {}.{}",
                st.ino(),
                st.mode(),
                st.nlink(),
                st.uid(),
                st.gid(),
                st.size(),
                st.rdev(),
                st.atime(),
                st.atime_nsec(),
                st.mtime(),
                st.mtime_nsec()
            );
            let ft = st.file_type();
            if ft.is_symlink() {
                line += &format!(" -> {:?}", std::fs::read_link(&p).unwrap());
            } else {
                line += &xattrs(&p);
            }
            if ft.is_file() {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::fs::read(&p).unwrap().hash(&mut h);
                line += &format!(" data {:016x}", h.finish());
            }
            if ft.is_dir() {
                dirs.push(p.clone());
            }
            out.insert(p.strip_prefix(m).unwrap().to_path_buf(), line);
        }
    }
    out
}

/// " xattr NAME=HASH" for each extended attribute (ACLs included), sorted.
fn xattrs(p: &Path) -> String {
    let path = c(p);
    let mut names = vec![0u8; 64 << 10];
    // SAFETY: a NUL-terminated path and a buffer of `names.len()` bytes.
    let n = unsafe { libc::llistxattr(path.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(n >= 0, "listxattr {}", p.display());
    let mut list: Vec<&[u8]> = names[..n as usize]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .collect();
    list.sort();
    let mut out = String::new();
    for name in list {
        let cname = CString::new(name).unwrap();
        let mut value = vec![0u8; 64 << 10];
        // SAFETY: NUL-terminated strings and a buffer of `value.len()` bytes.
        let len = unsafe {
            libc::lgetxattr(
                path.as_ptr(),
                cname.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        assert!(len >= 0, "getxattr {cname:?} on {}", p.display());
        let mut h = std::collections::hash_map::DefaultHasher::new();
        value[..len as usize].hash(&mut h);
        out += &format!(
            " xattr {}={:016x}",
            String::from_utf8_lossy(name),
            h.finish()
        );
    }
    out
}

#[test]
fn a_tree_moves_with_its_device_and_is_served_without_persistent_memory() {
    let _w = watchdog("export_cli", Duration::from_secs(600));
    let dir = tempfile::tempdir().unwrap();
    let (pool, dev, mnt) = (
        Path::new("/dev/shm").join(format!("lynxfs-export-cli.{}.pool", std::process::id())),
        dir.path().join("dev"),
        dir.path().join("mnt"),
    );
    let new_pool = PathBuf::from(format!("{}.new", pool.display()));
    std::fs::create_dir(&mnt).unwrap();
    let _cleanup = Cleanup(vec![pool.clone(), new_pool.clone()]);
    ok(
        run(&[
            Path::new("mkfs"),
            Path::new("--size"),
            Path::new("128M"),
            Path::new("--data-device"),
            &dev,
            &pool,
        ]),
        "mkfs",
    );
    let m = Mount::new(&pool, &mnt);
    populate(&mnt);
    let before = listing(&mnt);
    assert_eq!(before.len(), 10, "{before:#?}");
    m.umount(true);
    // The persistent memory is lost; the device alone rebuilds the pool.
    std::fs::remove_file(&pool).unwrap();
    let out = ok(run(&[Path::new("import"), &dev, &new_pool]), "import");
    assert!(out.contains("rebuilt"), "{out}");
    let m = Mount::new(&new_pool, &mnt);
    assert_eq!(listing(&mnt), before);
    std::fs::write(mnt.join("moved-on"), b"after the export").unwrap();
    m.umount(false);
    // The pool moved on after its export: every use of the device's export is refused,
    // saying why and what to do, and changes nothing.
    let other = PathBuf::from(format!("{}.other", pool.display()));
    let p = Path::new;
    for (args, what) in [
        (vec![p("import"), &dev, &other], "import"),
        (vec![p("fsck"), &dev], "fsck"),
        (vec![p("mount"), &dev, &mnt], "mount"),
    ] {
        let err = fails(run(&args), what);
        assert!(err.contains("the export is stale"), "{what}: {err}");
        assert!(err.contains("export it again"), "{what}: {err}");
    }
    assert!(!other.exists() && !mounted(&mnt));
    // Looked at anyway, read-only only: the tree as exported, and it stays stale.
    let out = ok(run(&[p("fsck"), p("--stale"), &dev]), "fsck --stale");
    assert!(out.contains("checking its export"), "{out}");
    let err = fails(
        run(&[p("mount"), p("--stale"), &dev, &mnt]),
        "mount --stale",
    );
    assert!(err.contains("-o ro"), "{err}");
    let m = Mount::with(&dev, &mnt, &["-o", "ro", "--stale"]);
    assert_eq!(listing(&mnt), before);
    m.umount(false);
    let err = fails(run(&[p("fsck"), &dev]), "fsck after the look");
    assert!(err.contains("the export is stale"), "{err}");
    // Exported again, the device holds the pool as it is now.
    ok(run(&[p("export"), &new_pool]), "export again");
    ok(run(&[Path::new("fsck"), &dev]), "fsck DEVICE");
    let m = Mount::new(&new_pool, &mnt);
    let now = listing(&mnt);
    m.umount(true);
    assert!(now.contains_key(Path::new("moved-on")), "{now:#?}");
    let m = Mount::new(&dev, &mnt);
    assert_eq!(listing(&mnt), now);
    m.umount(false);
    // Served from the device alone; a change made there is exported back.
    let m = Mount::new(&dev, &mnt);
    assert_eq!(listing(&mnt), now);
    std::fs::write(mnt.join("added"), b"without PM").unwrap();
    m.umount(false);
    std::fs::remove_file(&new_pool).unwrap();
    ok(run(&[Path::new("import"), &dev, &new_pool]), "import again");
    let m = Mount::new(&new_pool, &mnt);
    assert_eq!(std::fs::read(mnt.join("added")).unwrap(), b"without PM");
    m.umount(false);
    // What is not a device's export is refused, saying why, and changes nothing.
    let err = fails(run(&[Path::new("import"), &new_pool, &pool]), "import POOL");
    assert!(err.contains("not a LynxFS data device"), "{err}");
    assert!(!pool.exists());
    let err = fails(
        run(&[Path::new("import"), &dev, &new_pool]),
        "import over a pool",
    );
    assert!(err.contains("already exists"), "{err}");
    let plain = dir.path().join("plain.pool");
    ok(
        run(&[
            Path::new("mkfs"),
            Path::new("--size"),
            Path::new("16M"),
            &plain,
        ]),
        "mkfs",
    );
    let err = fails(
        run(&[Path::new("export"), &plain]),
        "export of an all-PM pool",
    );
    assert!(err.contains("not a hybrid pool"), "{err}");
}

/// Removes the pools in /dev/shm whatever the test's outcome.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// `lynxfs mount SOURCE DIR`, which must be refused: its error. Should it mount
/// anyway, it is unmounted before the test fails.
fn refused_mount(source: &Path, mnt: &Path, what: &str) -> String {
    let o = run(&[Path::new("mount"), source, mnt]);
    if o.status.success() {
        let _stray = Mount(mnt);
        wait_until("the stray mount", Duration::from_secs(60), || mounted(mnt));
        panic!("{what} mounted");
    }
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Issue 42, defect 2: two `lynxfs mount DEVICE` both mounted read-write and
/// overwrote each other's files. A device serves one pool at a time: a second mount
/// of the device alone, or of its own pool, is refused naming the holder.
#[test]
fn a_device_is_mounted_by_one_pool_at_a_time() {
    let _w = watchdog("export_cli one pool", Duration::from_secs(300));
    let dir = tempfile::tempdir().unwrap();
    let (pool, dev) = (
        Path::new("/dev/shm").join(format!("lynxfs-export-cli-one.{}.pool", std::process::id())),
        dir.path().join("dev"),
    );
    let (mnt, mnt2) = (dir.path().join("mnt"), dir.path().join("mnt2"));
    std::fs::create_dir(&mnt).unwrap();
    std::fs::create_dir(&mnt2).unwrap();
    let _cleanup = Cleanup(vec![pool.clone()]);
    let p = Path::new;
    ok(
        run(&[
            p("mkfs"),
            p("--size"),
            p("32M"),
            p("--data-device"),
            &dev,
            &pool,
        ]),
        "mkfs",
    );
    ok(run(&[p("export"), &pool]), "export");
    let m = Mount::new(&dev, &mnt);
    // Its own pool would write the device under the mount (before the fix, it did).
    let err = refused_mount(&pool, &mnt2, "the device's pool, the device mounted alone");
    assert!(err.contains("in use by pool"), "{err}");
    assert!(err.contains("lynxfs-pmless"), "{err}");
    let err = refused_mount(&dev, &mnt2, "a second mount of the device");
    assert!(err.contains("in use by pool"), "{err}");
    std::fs::write(mnt.join("alone"), b"the one writer").unwrap();
    m.umount(false);
    assert!(!mounted(&mnt2));
}

/// The source of the mount at `mp` (from /proc/self/mountinfo).
fn source_of(mp: &Path) -> PathBuf {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mp = mp.to_string_lossy();
    let line = info
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(mp.as_ref()))
        .expect("the mount");
    let (_, after) = line.split_once(" - ").unwrap();
    PathBuf::from(after.split(' ').nth(1).unwrap())
}

/// Issue 42, defect 9: `lynxfs umount` of a device-only mount whose daemon was killed
/// waited 10 minutes for an export that could not come. It says at once what happened
/// and how to recover the device; doing what it says recovers it, the file written
/// before the kill included.
#[test]
fn umount_of_a_device_mount_whose_daemon_died_says_so_at_once() {
    let _w = watchdog("export_cli daemon died", Duration::from_secs(300));
    let dir = tempfile::tempdir().unwrap();
    let (pool, dev, mnt) = (
        Path::new("/dev/shm").join(format!(
            "lynxfs-export-cli-dead.{}.pool",
            std::process::id()
        )),
        dir.path().join("dev"),
        dir.path().join("mnt"),
    );
    std::fs::create_dir(&mnt).unwrap();
    let mut cleanup = Cleanup(vec![pool.clone()]);
    let p = Path::new;
    ok(
        run(&[
            p("mkfs"),
            p("--size"),
            p("32M"),
            p("--data-device"),
            &dev,
            &pool,
        ]),
        "mkfs",
    );
    ok(run(&[p("export"), &pool]), "export");
    std::fs::remove_file(&pool).unwrap();
    let m = Mount::new(&dev, &mnt);
    let source = source_of(&mnt);
    cleanup.0.push(source.clone());
    // Made durable (the kernel's writeback cache dies with the daemon otherwise).
    let mut f = std::fs::File::create(mnt.join("before")).unwrap();
    std::io::Write::write_all(&mut f, b"written before the kill").unwrap();
    f.sync_all().unwrap();
    drop(f);
    let daemon = holder_of(&source).expect("the daemon holds its pool");
    // SAFETY: kill takes plain integers.
    assert_eq!(unsafe { libc::kill(daemon, libc::SIGKILL) }, 0);
    wait_until("the daemon's death", Duration::from_secs(60), || {
        holder_of(&source).is_none()
    });
    let start = std::time::Instant::now();
    // Before the fix, this waited 600 s: the limit of `run` (120 s) failed the test.
    let err = fails(run(&[p("umount"), &mnt]), "umount");
    let took = start.elapsed();
    assert!(took < Duration::from_secs(30), "umount took {took:?}");
    assert!(err.contains("daemon") && err.contains("gone"), "{err}");
    let export = format!("lynxfs export {}", source.display());
    assert!(err.contains(&export), "{err}");
    assert!(!mounted(&mnt), "unmounted");
    std::mem::forget(m);
    // What it says recovers the device.
    ok(run(&[p("export"), &source]), "export of the left pool");
    // The killed daemon's runtime state (export does not attach to remove it).
    let m = std::fs::metadata(&source).unwrap();
    let infix = format!("-{}-{}.", m.dev(), m.ino());
    for e in std::fs::read_dir(lynxfs::runtime::RuntimeFile::dir()).unwrap() {
        let e = e.unwrap().path();
        let n = e.file_name().unwrap().to_string_lossy().into_owned();
        if n.starts_with("lynxfs-") && n.contains(&infix) {
            std::fs::remove_dir_all(&e).unwrap();
        }
    }
    std::fs::remove_file(&source).unwrap();
    let m = Mount::new(&dev, &mnt);
    assert_eq!(
        std::fs::read(mnt.join("before")).unwrap(),
        b"written before the kill"
    );
    m.umount(false);
}

/// Issue 42, defect 10: `fsck --json DEVICE` names the device given (not the temporary
/// pool it checks) and prints its object on an error too, exit code 8 (docs/JSON.md);
/// `info DEVICE` describes the device and its export's pool, in text and JSON.
#[test]
fn fsck_and_info_of_a_device_name_the_device() {
    let _w = watchdog("export_cli fsck info", Duration::from_secs(300));
    let dir = tempfile::tempdir().unwrap();
    let (pool, dev) = (
        Path::new("/dev/shm").join(format!(
            "lynxfs-export-cli-json.{}.pool",
            std::process::id()
        )),
        dir.path().join("dev"),
    );
    let _cleanup = Cleanup(vec![pool.clone()]);
    let p = Path::new;
    ok(
        run(&[
            p("mkfs"),
            p("--size"),
            p("32M"),
            p("--data-device"),
            &dev,
            &pool,
        ]),
        "mkfs",
    );
    let json = |o: &Output| -> serde_json::Value {
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: stdout {:?}, stderr {}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
    };
    // Never exported: an operational error, in the object.
    let o = run(&[p("fsck"), p("--json"), &dev]);
    assert_eq!(o.status.code(), Some(8));
    let v = json(&o);
    assert_eq!(v["schema"], "lynxfs-fsck/1");
    assert_eq!(v["pool"].as_str(), Some(dev.to_str().unwrap()));
    assert_eq!(
        (v["exit_code"].as_u64(), v["result"].as_str()),
        (Some(8), Some("error"))
    );
    assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    ok(run(&[p("export"), &pool]), "export");
    let o = run(&[p("fsck"), p("--json"), &dev]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = json(&o);
    assert_eq!(v["pool"].as_str(), Some(dev.to_str().unwrap()), "{v}");
    assert_eq!(v["result"], "clean");

    let out = ok(run(&[p("info"), &dev]), "info DEVICE");
    assert!(
        out.contains("data device:") && out.contains(dev.to_str().unwrap()),
        "{out}"
    );
    assert!(out.contains("generation"), "{out}");
    let o = run(&[p("info"), p("--json"), &dev]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&o);
    assert_eq!(v["pool"].as_str(), Some(dev.to_str().unwrap()), "{v}");
    assert!(v["device"]["id"].is_string(), "{v}");
    assert!(
        v["device"]["export"]["generation"].as_u64() >= Some(1),
        "{v}"
    );
    assert_eq!(v["device"]["export"]["stale"], false, "{v}");
    assert!(v["format"]["size_bytes"].as_u64() == Some(32 << 20), "{v}");
    // A pool has no device object.
    let o = run(&[p("info"), p("--json"), &pool]);
    assert!(json(&o)["device"].is_null());
}
