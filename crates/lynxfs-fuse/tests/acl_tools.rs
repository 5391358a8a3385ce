//! Everyday tools on a LynxFS mount: a tree with every kind of file, every special
//! mode bit, several owners, POSIX ACLs (access and default), user xattrs, symlinks,
//! hard links, a fifo and nanosecond times is built on tmpfs (`/dev/shm`), copied into
//! the mount with `cp -a` and with `tar --xattrs --acls`, and a full listing of the
//! copy must equal the source's. Then ACLs set with `setfacl` on the mount must be
//! enforced for another user, inherited with the umask rules, and follow chmod.
//!
//! Needs root, `/dev/fuse`, and `getfacl`/`setfacl` (`./lynx test` installs `acl`);
//! fails loudly without them. A watchdog aborts the test process (which also ends
//! the mount) if anything hangs.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lynxfs::pmem::PmemBackend;
use lynxfs::{MkfsOptions, Pool};
use lynxfs_fuse::mount::{mount_background, MountOptions};
use lynxfs_test_support::scratch::as_user_1000;

/// How long one test may take before the watchdog aborts the process.
const WATCHDOG: Duration = Duration::from_secs(180);
/// How long one external tool may run.
const TOOL_LIMIT: Duration = Duration::from_secs(60);

fn watchdog(name: &str) -> lynxfs_test_support::Watchdog {
    lynxfs_test_support::watchdog(name, WATCHDOG)
}

/// Runs a tool to completion within [`TOOL_LIMIT`] (killed and failed otherwise);
/// returns its standard output, failing the test if it fails.
fn run(args: &[&str]) -> String {
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (is it installed?)", args[0]));
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if start.elapsed() > TOOL_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: no result after {TOOL_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    assert!(
        out.status.success(),
        "{args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL in test paths")
}

/// Sets a file's times (not following symlinks), to the nanosecond.
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
    let c = cstr(p);
    // SAFETY: `c` is a NUL-terminated path and `ts` two valid timespecs.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(r, 0, "utimensat {p:?}: {}", std::io::Error::last_os_error());
}

fn lchown(p: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid)).expect("lchown");
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn setxattr(p: &Path, name: &str, value: &[u8]) {
    let (c, n) = (cstr(p), CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings and a value slice of the length given.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "setxattr {p:?} {name}: {}",
        std::io::Error::last_os_error()
    );
}

/// The user.* attributes of `p`, sorted, with values.
fn user_xattrs(p: &Path) -> Vec<(String, Vec<u8>)> {
    let c = cstr(p);
    let mut names = vec![0u8; 65536];
    // SAFETY: the buffer is valid for its length.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(
        n >= 0,
        "listxattr {p:?}: {}",
        std::io::Error::last_os_error()
    );
    let mut out = Vec::new();
    for name in names[..n as usize]
        .split(|&b| b == 0)
        .filter(|n| n.starts_with(b"user."))
    {
        let cn = CString::new(name).unwrap();
        let mut v = vec![0u8; 65536];
        // SAFETY: as above.
        let len =
            unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        assert!(
            len >= 0,
            "getxattr {p:?}: {}",
            std::io::Error::last_os_error()
        );
        v.truncate(len as usize);
        out.push((String::from_utf8_lossy(name).into_owned(), v));
    }
    out.sort();
    out
}

/// Everything that a copy must keep, per path relative to `root`: type and mode,
/// owner, size (not for directories, whose size is the file system's own), link
/// target, mtime to the nanosecond, hard-link group, ACLs as `getfacl -n` prints
/// them, and user xattrs.
fn listing(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    // Hard links: each path of a multiply linked file names the group by the first
    // of its paths in order (filled in at the end, when all are known).
    let mut links: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let rel = p.strip_prefix(root).unwrap().display().to_string();
        let md = std::fs::symlink_metadata(&p).expect("lstat");
        let ft = md.file_type();
        let size = if ft.is_dir() { 0 } else { md.size() };
        let target = if ft.is_symlink() {
            std::fs::read_link(&p).unwrap().display().to_string()
        } else {
            String::new()
        };
        if ft.is_file() && md.nlink() > 1 {
            links.entry(md.ino()).or_default().push(rel.clone());
        }
        let acls = if ft.is_symlink() {
            String::new()
        } else {
            let text = run(&["getfacl", "-n", "-p", p.to_str().unwrap()]);
            text.lines()
                .filter(|l| !l.starts_with("# file:"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let xattrs = if ft.is_symlink() {
            Vec::new()
        } else {
            user_xattrs(&p)
        };
        out.insert(
            rel,
            format!(
                "mode {:o} owner {}:{} size {size} target {target:?} mtime {}.{:09} \
                 acl [{acls}] xattrs {xattrs:?}",
                md.mode(),
                md.uid(),
                md.gid(),
                md.mtime(),
                md.mtime_nsec(),
            ),
        );
        if ft.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
    }
    for paths in links.values() {
        let first = paths.iter().min().expect("one path at least").clone();
        for p in paths {
            let line = out.get_mut(p).expect("listed");
            line.push_str(&format!(" linked-with {first:?}"));
        }
    }
    out
}

/// Builds the source tree in `root` (on tmpfs, which has POSIX ACLs).
fn build_tree(root: &Path) {
    let f = |name: &str, data: &[u8], mode: u32, owner: (u32, u32)| {
        let p = root.join(name);
        std::fs::write(&p, data).unwrap();
        lchown(&p, owner.0, owner.1);
        chmod(&p, mode);
    };
    let d = |name: &str, mode: u32, owner: (u32, u32)| {
        let p = root.join(name);
        std::fs::create_dir(&p).unwrap();
        lchown(&p, owner.0, owner.1);
        chmod(&p, mode);
    };
    d("dirs", 0o755, (0, 0));
    d("dirs/sticky", 0o1777, (0, 0));
    d("dirs/private", 0o700, (1000, 1000));
    d("dirs/setgid", 0o2775, (1000, 50));
    d("dirs/none", 0o000, (1001, 1001));
    f("plain", b"hello\n", 0o644, (0, 0));
    f("private", b"secret", 0o600, (1000, 1000));
    f("setuid", b"#!/bin/sh\n", 0o4755, (0, 0));
    f("setgid", b"#!/bin/sh\n", 0o2755, (0, 50));
    f("sticky", b"", 0o1644, (1000, 50));
    f("zero", b"nothing", 0o000, (1001, 1002));
    f("all", &vec![7u8; 100_000], 0o777, (1000, 1000));
    f("dirs/setgid/inside", b"x", 0o664, (1000, 50));
    // ACLs: an extended access ACL on a file, access and default on a directory.
    f("acl-file", b"acl", 0o640, (1000, 1000));
    let p = |n: &str| root.join(n).to_str().unwrap().to_string();
    run(&["setfacl", "-m", "u:1001:rw,g:50:r,m::rw", &p("acl-file")]);
    d("acl-dir", 0o750, (1000, 1000));
    run(&["setfacl", "-m", "u:1002:rx,g:60:rwx", &p("acl-dir")]);
    run(&[
        "setfacl",
        "-d",
        "-m",
        "u:1001:rwx,g:50:rx,o::-",
        &p("acl-dir"),
    ]);
    // Inherited from the default ACL on tmpfs, then copied as it is.
    f("acl-dir/inherited", b"i", 0o640, (1000, 1000));
    d("acl-dir/subdir", 0o750, (1000, 1000));
    // A minimal ACL: only a mode.
    f("minimal-acl", b"m", 0o600, (0, 0));
    run(&["setfacl", "-m", "g::r,o::r", &p("minimal-acl")]);
    setxattr(&root.join("plain"), "user.comment", b"a value");
    setxattr(&root.join("plain"), "user.empty", b"");
    setxattr(&root.join("dirs"), "user.dir", &[0, 1, 2, 255]);
    std::os::unix::fs::symlink("plain", root.join("link")).unwrap();
    std::os::unix::fs::symlink("../nowhere/at/all", root.join("dirs/dangling")).unwrap();
    lchown(&root.join("link"), 1000, 1000);
    std::fs::hard_link(root.join("private"), root.join("dirs/private-link")).unwrap();
    let fifo = cstr(&root.join("fifo"));
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o620) }, 0);
    lchown(&root.join("fifo"), 1001, 50);
    // Times last, children before their directories, each with its own nanoseconds.
    let mut all: Vec<PathBuf> = listing_paths(root);
    all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for (i, p) in all.iter().enumerate() {
        let i = i as i64;
        set_times(
            p,
            (1_600_000_000 + i, 111_111_111 + i),
            (1_500_000_000 + i * 7, 123_456_789 + i),
        );
    }
}

fn listing_paths(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        if std::fs::symlink_metadata(&p).unwrap().is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
        out.push(p);
    }
    out
}

fn differences(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> Vec<String> {
    let keys: std::collections::BTreeSet<_> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("{k}:\n  source {:?}\n  copy   {:?}", a.get(k), b.get(k)))
        .collect()
}

struct Mounted {
    _pool_dir: tempfile::TempDir,
    mnt: tempfile::TempDir,
    mount: Option<lynxfs_fuse::mount::LynxMount>,
}

fn mount(options: &str) -> Mounted {
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing");
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let pool = dir.path().join("pool");
    Pool::mkfs(&pool, &MkfsOptions::new(128 << 20), PmemBackend::default()).expect("mkfs");
    let mnt = tempfile::tempdir().expect("mount point");
    let opts = MountOptions::parse(options).expect("options");
    let m = mount_background(&pool, mnt.path(), &opts).unwrap_or_else(|e| panic!("mount: {e:#}"));
    Mounted {
        _pool_dir: dir,
        mnt,
        mount: Some(m),
    }
}

impl Mounted {
    fn path(&self) -> &Path {
        self.mnt.path()
    }
    fn unmount(mut self) {
        self.mount.take().unwrap().unmount().expect("unmount");
    }
}

#[test]
fn cp_a_and_tar_keep_modes_owners_acls_xattrs_links_and_times() {
    let _w = watchdog("cp_a_and_tar");
    let src_dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let src = src_dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    build_tree(&src);
    chmod(&src, 0o755);
    set_times(&src, (1_600_000_000, 5), (1_500_000_000, 999_999_999));
    let want = listing(&src);
    assert!(want.len() > 20, "the source tree is built: {want:#?}");

    let m = mount("");
    let copy = m.path().join("cp");
    run(&["cp", "-a", src.to_str().unwrap(), copy.to_str().unwrap()]);
    let diff = differences(&want, &listing(&copy));
    assert!(diff.is_empty(), "cp -a differs:\n{}", diff.join("\n"));

    let tarball = src_dir.path().join("tree.tar");
    let tarball = tarball.to_str().unwrap();
    run(&[
        "tar",
        "--xattrs",
        "--xattrs-include=user.*",
        "--acls",
        "-cpf",
        tarball,
        "-C",
        src.to_str().unwrap(),
        ".",
    ]);
    let untar = m.path().join("tar");
    std::fs::create_dir(&untar).unwrap();
    run(&[
        "tar",
        "--xattrs",
        "--xattrs-include=user.*",
        "--acls",
        "--same-owner",
        "-xpf",
        tarball,
        "-C",
        untar.to_str().unwrap(),
    ]);
    let diff = differences(&want, &listing(&untar));
    assert!(
        diff.is_empty(),
        "tar --xattrs --acls differs:\n{}",
        diff.join("\n")
    );
    m.unmount();
}

fn getfacl(p: &Path) -> Vec<String> {
    run(&["getfacl", "-n", "-p", "--omit-header", p.to_str().unwrap()])
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

fn mode_of(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn setfacl_on_the_mount_is_enforced_inherited_and_follows_chmod() {
    let _w = watchdog("setfacl_on_the_mount");
    let m = mount("allow_other");
    let f = m.path().join("f");
    std::fs::write(&f, b"for 1000").unwrap();
    chmod(&f, 0o600);
    let fs_ = f.to_str().unwrap().to_string();
    let read = |p: PathBuf| as_user_1000(move || std::fs::read(p).map_err(|e| e.kind()));
    assert!(read(f.clone()).is_err(), "0600 root file");
    run(&["setfacl", "-m", "u:1000:r", &fs_]);
    assert_eq!(mode_of(&f), 0o640, "group bits show the mask");
    assert_eq!(read(f.clone()), Ok(b"for 1000".to_vec()));
    let g = f.clone();
    let write = as_user_1000(move || std::fs::write(g, b"x").map_err(|e| e.kind()));
    assert_eq!(write, Err(std::io::ErrorKind::PermissionDenied));
    // chmod sets the mask: group bits 0 leave the named user nothing.
    chmod(&f, 0o600);
    assert!(
        getfacl(&f).contains(&"mask::---".to_string()),
        "{:?}",
        getfacl(&f)
    );
    assert!(read(f.clone()).is_err());

    // Default ACL: new files take it, without the umask; elsewhere the umask applies.
    let d = m.path().join("d");
    std::fs::create_dir(&d).unwrap();
    run(&[
        "setfacl",
        "-d",
        "-m",
        "u:1000:rwx,g::rwx,o::rx",
        d.to_str().unwrap(),
    ]);
    let script = format!(
        "umask 022 && touch {0}/d/new && mkdir {0}/d/sub && touch {0}/plain",
        m.path().display()
    );
    run(&["sh", "-c", &script]);
    assert_eq!(
        mode_of(&d.join("new")),
        0o664,
        "mask rw from the default, no umask"
    );
    assert_eq!(mode_of(&d.join("sub")), 0o775);
    assert_eq!(
        mode_of(&m.path().join("plain")),
        0o644,
        "no default ACL: umask"
    );
    let acl = getfacl(&d.join("new"));
    assert!(
        acl.contains(&"user:1000:rwx\t#effective:rw-".to_string()),
        "{acl:?}"
    );
    let sub = getfacl(&d.join("sub"));
    assert!(
        sub.contains(&"default:user:1000:rwx".to_string()),
        "{sub:?}"
    );
    let new = d.join("new");
    let write = as_user_1000(move || std::fs::write(new, b"ok").map_err(|e| e.kind()));
    assert_eq!(write, Ok(()));

    // A malformed ACL is refused (the kernel checks it too), and changes nothing.
    let bad = [2u8, 0, 0, 0, 1, 0, 6, 0, 255, 255, 255, 255];
    let c = cstr(&f);
    let n = CString::new("system.posix_acl_access").unwrap();
    // SAFETY: valid NUL-terminated strings and a value slice of the length given.
    let r = unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), bad.as_ptr().cast(), bad.len(), 0) };
    assert_eq!(r, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EINVAL)
    );
    assert_eq!(mode_of(&f), 0o600);
    m.unmount();
}
