//! The configuration in which the daemon's own permission checks decide: a pool made
//! and mounted by a user other than root, without `allow_other` and without
//! `default_permissions` (so the kernel checks nothing but that the caller is the
//! mounter, and passes every call on), used by that user only. The same sequence runs
//! in a tmpfs directory of that user, and the two are compared as in the other
//! configurations.
//!
//! The user cannot chown, so every file is its own: the sequence covers what an owner
//! may not do to its own files (modes 000, 0100, 0200, 0400, group or other bits only,
//! directories without x, r or w), what it may (chmod, utimes, writing through a handle
//! opened before a chmod), group membership (a supplementary group), set-group-ID
//! directories, and exec of programs of various modes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lynxfs::pmem::PmemBackend;
use lynxfs::{Access, Cred, Fs, MkfsOptions, Pool, SetAttr};
use lynxfs_fuse::mount::{mount_background, MountOptions};

use crate::spawn::{self, Creds, ExeCopy};
use crate::{errno_name, Ctx, EXTRA_GROUP};

/// `nobody`: a user every Debian-like system has (fusermount3 needs a passwd entry).
const OWNER_UID: u32 = 65534;
const OWNER_GID: u32 = 65534;

fn owner() -> Creds {
    Creds {
        uid: OWNER_UID,
        gid: OWNER_GID,
        groups: vec![OWNER_GID, EXTRA_GROUP],
    }
}

/// The root's part: a directory in /dev/shm the user owns, a copy of this binary it
/// may run, then the user's part in a child process, under a watchdog.
pub fn parent(test: &str, options: &str) {
    // SAFETY: geteuid cannot fail.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test must run as root");
    let _watchdog = lynxfs_test_support::watchdog(test, Duration::from_secs(300));
    let_users_open_dev_fuse();
    let base = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    spawn::chown(base.path(), OWNER_UID, OWNER_GID);
    let exe = ExeCopy::new();
    let args = format!("{options}|{}", base.path().display());
    let mut cmd = spawn::rerun(&exe.path, test, &args);
    spawn::with_creds(&mut cmd, &owner());
    let done = spawn::run_role(cmd, Duration::from_secs(240));
    println!("---- the mount owner's run ----\n{}", done.output);
    // If the child died with its mount still there, take it away (as root, lazily).
    let mnt = std::ffi::CString::new(format!("{}/mnt", base.path().display())).unwrap();
    // SAFETY: a valid path; failing (nothing mounted) is fine.
    unsafe { libc::umount2(mnt.as_ptr(), libc::MNT_DETACH) };
    assert!(
        done.success,
        "the mount owner's run failed (its output is above)"
    );
}

/// A user mounts through /dev/fuse (fusermount3 only does the mount(2) for it), so
/// the device must be open to all, as udev makes it everywhere (`crw-rw-rw-`); some
/// containers leave it root's only. Nothing else changes.
fn let_users_open_dev_fuse() {
    use std::os::unix::fs::PermissionsExt;
    let dev = Path::new("/dev/fuse");
    let mode = std::fs::metadata(dev)
        .expect("/dev/fuse")
        .permissions()
        .mode();
    if mode & 0o666 != 0o666 {
        println!(
            "/dev/fuse had mode {:o}: giving it the usual 0666",
            mode & 0o777
        );
        std::fs::set_permissions(dev, std::fs::Permissions::from_mode(0o666))
            .expect("chmod /dev/fuse");
    }
}

/// The user's part: makes the pool, mounts it, runs the sequence on tmpfs and on the
/// mount, compares.
pub fn child(args: &str) {
    let (options, base) = args.split_once('|').expect("options|base");
    let base = PathBuf::from(base);
    assert_eq!(
        // SAFETY: getuid has no preconditions.
        unsafe { libc::getuid() },
        OWNER_UID,
        "runs as the mount owner"
    );
    let tmp = base.join("tmpfs");
    let mnt = base.join("mnt");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let pool = base.join("pool");
    Pool::mkfs(&pool, &MkfsOptions::new(128 << 20), PmemBackend::default()).expect("mkfs");
    give_root_directory_to_me(&pool);
    let opts = MountOptions::parse(options).expect("options");
    assert!(!opts.allow_other && !opts.default_permissions);
    let mount = mount_background(&pool, &mnt, &opts)
        .unwrap_or_else(|e| panic!("mounting as the owner: {e:#}"));
    // Where the daemon alone checks, past the kernel's caches, so that the probes ask
    // it (the ignored `owner_loses_cached_names_when_a_directory_loses_search_permission`
    // covers the window before). Where the kernel checks too (FUSE_POSIX_ACL), it
    // checks cached names with the attributes every chmod through the mount updated,
    // so the probes go at once, as on tmpfs (and the default minute-long caches
    // would make this test wait minutes).
    let settle = if opts.daemon_permissions {
        opts.entry_timeout.max(opts.attr_timeout) + Duration::from_millis(200)
    } else {
        Duration::ZERO
    };
    let want = run(&tmp, settle);
    let got = run(&mnt, settle);
    mount.unmount().expect("unmount");
    crate::check_same(&format!("owner, {options}"), &want, &got);
}

/// mkfs makes the root directory root's (0:0, 0755), so its maker cannot create
/// anything in it. The pool file is the user's, so the user may change any byte of it
/// anyway: it hands the root directory to itself through the library, as root.
fn give_root_directory_to_me(pool: &Path) {
    let p = Pool::open(pool, Access::ReadWrite, PmemBackend::default()).expect("open pool");
    let fs = Fs::new(p);
    let a = SetAttr {
        uid: Some(OWNER_UID),
        gid: Some(OWNER_GID),
        ..SetAttr::default()
    };
    fs.ns()
        .setattr(1, &a, &Cred::root())
        .expect("chown root dir");
    fs.close().expect("close pool");
}

fn run(root: &Path, settle: Duration) -> Vec<(String, String)> {
    let mut c = Ctx {
        root: root.to_path_buf(),
        log: Vec::new(),
        fds: Vec::new(),
    };
    owner_script(&mut c, settle);
    for fd in std::mem::take(&mut c.fds) {
        c.close(fd);
    }
    c.log
}

/// Modes of regular files the owner makes and then probes.
const FILE_MODES: &[(&str, u32)] = &[
    ("f000", 0o000),
    ("f100", 0o100),
    ("f200", 0o200),
    ("f400", 0o400),
    ("f070", 0o070),
    ("f007", 0o007),
    ("f600", 0o600),
];

/// Modes of directories the owner makes (each holding a file `in` and a directory
/// `sub`) and then probes.
const DIR_MODES: &[(&str, u32)] = &[
    ("d000", 0o000),
    ("d100", 0o100),
    ("d300", 0o300),
    ("d500", 0o500),
    ("d600", 0o600),
    ("d700", 0o700),
];

/// `settle`: how long to wait after changing the modes of directories before going
/// through them, for the kernel's cached names to expire.
fn owner_script(c: &mut Ctx, settle: Duration) {
    use libc::*;
    c.mkdir("mkdir o", "o", 0o755);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chmod o", "o", |p| unsafe { chmod(p, 0o755) });
    for &(name, mode) in FILE_MODES {
        let path = format!("o/{name}");
        let fd = c.open(&format!("create {name}"), &path, O_CREAT | O_WRONLY, 0o600);
        c.write(&format!("fill {name}"), fd, b"data");
        c.close(fd);
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        c.path1(&format!("chmod {name}"), &path, |p| unsafe {
            chmod(p, mode)
        });
    }
    // Group bits for a group the owner is in do not help the owner: its class is
    // "owner", whose bits say no.
    c.path1(
        "chgrp f070 to a supplementary group",
        "o/f070",
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        |p| unsafe { chown(p, u32::MAX, EXTRA_GROUP) },
    );
    for &(name, _) in FILE_MODES {
        probe_file(c, name);
    }
    handles_outlive_chmod(c);
    ownership(c);
    crate::removed_open_dirs(c, "o");
    for &(name, mode) in DIR_MODES {
        make_dir(c, name, mode);
    }
    std::thread::sleep(settle);
    for &(name, _) in DIR_MODES {
        probe_dir(c, name);
    }
    setgid_dir(c);
    exec(c, settle);
}

fn probe_file(c: &mut Ctx, name: &str) {
    use libc::*;
    let path = format!("o/{name}");
    for (what, flags) in [
        ("rdonly", O_RDONLY),
        ("wronly", O_WRONLY),
        ("rdwr", O_RDWR),
        ("rdonly|trunc", O_RDONLY | O_TRUNC),
        ("creat existing", O_CREAT | O_WRONLY),
    ] {
        let fd = c.open(&format!("open {name} {what}"), &path, flags, 0o644);
        c.close(fd);
    }
    for (what, mask) in [
        ("F_OK", F_OK),
        ("R_OK", R_OK),
        ("W_OK", W_OK),
        ("X_OK", X_OK),
        ("R_OK|W_OK", R_OK | W_OK),
    ] {
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        c.path1(&format!("access {name} {what}"), &path, |p| unsafe {
            access(p, mask)
        });
    }
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1(&format!("truncate {name}"), &path, |p| unsafe {
        truncate(p, 3)
    });
    let key = std::ffi::CString::new("user.k").unwrap();
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1(&format!("setxattr {name}"), &path, |p| unsafe {
        setxattr(p, key.as_ptr(), b"v".as_ptr().cast(), 1, 0)
    });
    let mut buf = [0u8; 16];
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1(&format!("getxattr {name}"), &path, |p| unsafe {
        getxattr(p, key.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) as c_int
    });
    let at = [
        timespec {
            tv_sec: 7,
            tv_nsec: 0,
        },
        timespec {
            tv_sec: 7,
            tv_nsec: 0,
        },
    ];
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1(&format!("utimes {name} (owner)"), &path, |p| unsafe {
        utimensat(AT_FDCWD, p, at.as_ptr(), 0)
    });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1(&format!("utimes now {name} (owner)"), &path, |p| unsafe {
        utimensat(AT_FDCWD, p, std::ptr::null(), 0)
    });
    c.stat(&format!("stat {name}"), &path);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1(&format!("chmod {name} 0600"), &path, |p| unsafe {
        chmod(p, 0o600)
    });
    c.content(&format!("content {name}"), &path);
}

/// A handle keeps the access it was opened with, whatever the mode becomes.
fn handles_outlive_chmod(c: &mut Ctx) {
    use libc::*;
    let fd = c.open("open f600 rdwr for chmod", "o/f600", O_RDWR, 0);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chmod f600 000 while open", "o/f600", |p| unsafe {
        chmod(p, 0)
    });
    c.pwrite("write through the old handle", fd, b"x", 0);
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("ftruncate through the old handle", unsafe {
        ftruncate(fd, 2)
    });
    c.pread("read through the old handle", fd, 8, 0);
    c.fstat("fstat through the old handle", fd);
    c.close(fd);
    c.open("reopen f600 after chmod 000", "o/f600", O_RDONLY, 0);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chmod f600 back", "o/f600", |p| unsafe { chmod(p, 0o600) });
}

fn ownership(c: &mut Ctx) {
    use libc::*;
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chown f600 to root", "o/f600", |p| unsafe {
        chown(p, 0, u32::MAX)
    });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chown f600 to itself", "o/f600", |p| unsafe {
        chown(p, OWNER_UID, u32::MAX)
    });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chgrp f600 to a group not its", "o/f600", |p| unsafe {
        chown(p, u32::MAX, 5)
    });
    c.path1(
        "chgrp f600 to a supplementary group",
        "o/f600",
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        |p| unsafe { chown(p, u32::MAX, EXTRA_GROUP) },
    );
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chmod f600 setgid", "o/f600", |p| unsafe {
        chmod(p, 0o2755)
    });
    c.stat("stat f600 setgid", "o/f600");
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chgrp f600 back", "o/f600", |p| unsafe {
        chown(p, u32::MAX, OWNER_GID)
    });
    c.stat("stat f600 after chgrp (setgid cleared)", "o/f600");
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chmod f600 setuid", "o/f600", |p| unsafe {
        chmod(p, 0o4755)
    });
    let fd = c.open("open f600 to write", "o/f600", O_WRONLY, 0);
    c.write("write f600 (clears setuid)", fd, b"w");
    c.close(fd);
    c.stat("stat f600 after write", "o/f600");
}

fn make_dir(c: &mut Ctx, name: &str, mode: u32) {
    use libc::*;
    let d = format!("o/{name}");
    c.mkdir(&format!("mkdir {name}"), &d, 0o700);
    let fd = c.open(
        &format!("create {name}/in"),
        &format!("{d}/in"),
        O_CREAT | O_WRONLY,
        0o644,
    );
    c.write(&format!("fill {name}/in"), fd, b"inside");
    c.close(fd);
    c.mkdir(&format!("mkdir {name}/sub"), &format!("{d}/sub"), 0o755);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1(&format!("chmod {name}"), &d, |p| unsafe { chmod(p, mode) });
}

fn probe_dir(c: &mut Ctx, name: &str) {
    use libc::*;
    let d = format!("o/{name}");
    let l = |what: &str| format!("{what} in {name}");
    c.stat(&l("stat in"), &format!("{d}/in"));
    c.readdir(&l("readdir"), &d);
    c.stat(&l("stat missing"), &format!("{d}/missing"));
    let fd = c.open(&l("open in"), &format!("{d}/in"), O_RDONLY, 0);
    c.read(&l("read in"), fd, 16);
    c.close(fd);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1(&l("access dir X_OK"), &d, |p| unsafe { access(p, X_OK) });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1(&l("access dir W_OK"), &d, |p| unsafe { access(p, W_OK) });
    let fd = c.open(&l("opendir"), &d, O_RDONLY | O_DIRECTORY, 0);
    c.close(fd);
    c.open(
        &l("create new"),
        &format!("{d}/new"),
        O_CREAT | O_WRONLY,
        0o644,
    );
    c.mkdir(&l("mkdir new"), &format!("{d}/nd"), 0o755);
    c.symlink(&l("symlink"), "in", &format!("{d}/ln"));
    c.path2(&l("link f400 into"), "o/f400", &format!("{d}/hl"), link);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1(&l("mknod fifo"), &format!("{d}/fifo"), |p| unsafe {
        mknod(p, S_IFIFO | 0o644, 0)
    });
    c.path2(
        &l("rename in within"),
        &format!("{d}/in"),
        &format!("{d}/in2"),
        rename,
    );
    c.path2(
        &l("rename sub out"),
        &format!("{d}/sub"),
        &format!("o/{name}-sub"),
        rename,
    );
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1(&l("rmdir sub"), &format!("{d}/sub"), |p| unsafe {
        rmdir(p)
    });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1(&l("unlink in"), &format!("{d}/in"), |p| unsafe {
        unlink(p)
    });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1(&l("unlink in2"), &format!("{d}/in2"), |p| unsafe {
        unlink(p)
    });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1(&l("chmod dir back"), &d, |p| unsafe { chmod(p, 0o700) });
    c.readdir(&l("readdir after"), &d);
}

/// New entries of a set-group-ID directory take its group; directories its flag too.
fn setgid_dir(c: &mut Ctx) {
    use libc::*;
    c.mkdir("mkdir sg", "o/sg", 0o775);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chgrp sg", "o/sg", |p| unsafe {
        chown(p, u32::MAX, EXTRA_GROUP)
    });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chmod sg 2775", "o/sg", |p| unsafe { chmod(p, 0o2775) });
    let fd = c.open("create in sg", "o/sg/f", O_CREAT | O_WRONLY, 0o644);
    c.close(fd);
    c.stat("stat file in sg", "o/sg/f");
    c.mkdir("mkdir in sg", "o/sg/d", 0o755);
    c.stat("stat dir in sg", "o/sg/d");
}

/// Runs `name` (relative to the root) and records its exit status or the errno of
/// the exec.
fn run_program(c: &mut Ctx, label: &str, name: &str) {
    let s = match Command::new(c.root.join(name)).output() {
        Ok(o) => format!("Ok(status {:?})", o.status.code()),
        Err(e) => format!("Err({})", errno_name(e.raw_os_error().unwrap_or(0))),
    };
    c.rec(label, s);
}

/// Exec needs x (and, for a script, r for the interpreter to read it).
fn exec(c: &mut Ctx, settle: Duration) {
    use libc::*;
    let program = std::fs::read("/usr/bin/true").expect("/usr/bin/true");
    let script = b"#!/bin/sh\nexit 3\n";
    for (name, body, mode) in [
        ("true0700", &program[..], 0o700),
        ("true0100", &program[..], 0o100),
        ("true0600", &program[..], 0o600),
        ("true0070", &program[..], 0o070),
        ("sh0700", &script[..], 0o700),
        ("sh0100", &script[..], 0o100),
        ("sh0500", &script[..], 0o500),
    ] {
        let path = format!("o/{name}");
        let fd = c.open(&format!("create {name}"), &path, O_CREAT | O_WRONLY, 0o600);
        c.write(&format!("fill {name}"), fd, body);
        c.close(fd);
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        c.path1(&format!("chmod {name}"), &path, |p| unsafe {
            chmod(p, mode)
        });
        run_program(c, &format!("exec {name}"), &path);
    }
    c.mkdir("mkdir noexec dir", "o/nox", 0o700);
    std::fs::write(c.root.join("o/nox/true"), &program).expect("copy true");
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chmod nox/true", "o/nox/true", |p| unsafe {
        chmod(p, 0o700)
    });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chmod nox 0600", "o/nox", |p| unsafe { chmod(p, 0o600) });
    std::thread::sleep(settle);
    run_program(c, "exec through a dir without x", "o/nox/true");
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chmod nox back", "o/nox", |p| unsafe { chmod(p, 0o700) });
}

/// The user's part of the test of the window in which the kernel still has names
/// cached: right after the owner takes search permission off a directory, reaching
/// a name it had just used must fail as on tmpfs.
pub fn cached_window_child(args: &str) {
    let (options, base) = args.split_once('|').expect("options|base");
    let base = PathBuf::from(base);
    let mnt = base.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let pool = base.join("pool");
    Pool::mkfs(&pool, &MkfsOptions::new(64 << 20), PmemBackend::default()).expect("mkfs");
    give_root_directory_to_me(&pool);
    let opts = MountOptions::parse(options).expect("options");
    let mount = mount_background(&pool, &mnt, &opts)
        .unwrap_or_else(|e| panic!("mounting as the owner: {e:#}"));
    let d = mnt.join("d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("f"), b"x").unwrap();
    assert_eq!(std::fs::read(d.join("f")).unwrap(), b"x");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o600)).unwrap();
    let stat = std::fs::metadata(d.join("f")).map_err(|e| e.raw_os_error());
    let read = std::fs::read(d.join("f")).map_err(|e| e.raw_os_error());
    mount.unmount().expect("unmount");
    assert_eq!(stat.map(|_| ()), Err(Some(libc::EACCES)), "stat d/f");
    assert_eq!(read.map(|_| ()), Err(Some(libc::EACCES)), "read d/f");
}
