//! What a change of a file's data or size takes away through the engine's API (what
//! the preload and the C API call), as Linux's `file_remove_privs` (issue 30, item
//! 15): set-user-ID, and set-group-ID when the file is group-executable or the
//! writer is outside its group, for a writer other than root; `security.capability`
//! for every writer, root too, and for every chown.

use crate::common;

use common::fs;
use lynxfs::{Cred, Fs};

const CAP: &str = "security.capability";
const CAPS: [u8; 20] = [
    1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

/// The ways to change a file: write, ftruncate, fallocate, open with O_TRUNC.
const CHANGES: [&str; 4] = ["write", "ftruncate", "fallocate", "o_trunc"];

/// Makes `/name` as root with `mode` (and capabilities, when `caps`), group 1000.
fn prepare(fs: &Fs<lynxfs::pmem::PmemBackend>, name: &str, mode: u32, caps: bool) -> String {
    let root = fs.session(Cred::root());
    let path = format!("/{name}");
    let fd = root
        .open(&path, libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    fs.write(fd, b"data").unwrap();
    fs.close_fd(fd).unwrap();
    root.chown(&path, Some(0), Some(1000)).unwrap();
    root.chmod(&path, mode).unwrap();
    if caps {
        root.setxattr(&path, CAP, &CAPS, 0).unwrap();
    }
    path
}

/// Changes `path` one way as `cred`.
fn change(fs: &Fs<lynxfs::pmem::PmemBackend>, cred: Cred, path: &str, how: &str) {
    let s = fs.session(cred);
    let trunc = if how == "o_trunc" { libc::O_TRUNC } else { 0 };
    let fd = s.open(path, libc::O_WRONLY | trunc, 0).unwrap();
    match how {
        "write" => drop(fs.write(fd, b"x").unwrap()),
        "ftruncate" => fs.ftruncate(fd, 1).unwrap(),
        "fallocate" => fs.fallocate(fd, 0, 0, 8192).unwrap(),
        _ => {}
    }
    fs.close_fd(fd).unwrap();
}

fn mode(fs: &Fs<lynxfs::pmem::PmemBackend>, path: &str) -> u32 {
    fs.session(Cred::root()).stat(path).unwrap().mode & 0o7777
}

#[test]
fn another_users_change_clears_setid_bits() {
    let fs = fs(16 << 20);
    for how in CHANGES {
        // Outside the file's group: both bits go, group-executable or not.
        let p = prepare(&fs, &format!("out-{how}"), 0o6666, false);
        change(&fs, Cred::user(2000, 2000), &p, how);
        assert_eq!(mode(&fs, &p), 0o666, "{how} by a user outside the group");
        // In the group: set-group-ID stays without group execute (Linux's rule).
        let p = prepare(&fs, &format!("in-{how}"), 0o6666, false);
        change(&fs, Cred::user(2000, 1000), &p, how);
        assert_eq!(mode(&fs, &p), 0o2666, "{how} by a user in the group");
        let p = prepare(&fs, &format!("inx-{how}"), 0o6676, false);
        change(&fs, Cred::user(2000, 1000), &p, how);
        assert_eq!(mode(&fs, &p), 0o676, "{how} of a group-executable file");
        // Root keeps them.
        let p = prepare(&fs, &format!("root-{how}"), 0o6666, false);
        change(&fs, Cred::root(), &p, how);
        assert_eq!(mode(&fs, &p), 0o6666, "{how} by root");
    }
}

#[test]
fn any_change_removes_file_capabilities() {
    let fs = fs(16 << 20);
    for how in CHANGES {
        for (who, cred) in [("user", Cred::user(2000, 2000)), ("root", Cred::root())] {
            let p = prepare(&fs, &format!("cap-{who}-{how}"), 0o666, true);
            let s = fs.session(Cred::root());
            assert_eq!(s.getxattr(&p, CAP).unwrap(), CAPS);
            change(&fs, cred, &p, how);
            let e = s.getxattr(&p, CAP).unwrap_err();
            assert_eq!(e.errno(), libc::ENODATA, "{how} by {who} left capabilities");
        }
    }
    // Other attributes stay.
    let p = prepare(&fs, "cap-other", 0o666, true);
    let s = fs.session(Cred::root());
    s.setxattr(&p, "user.keep", b"1", 0).unwrap();
    change(&fs, Cred::root(), &p, "write");
    assert_eq!(s.getxattr(&p, "user.keep").unwrap(), b"1");
}

#[test]
fn chown_removes_file_capabilities() {
    let fs = fs(16 << 20);
    let root = fs.session(Cred::root());
    for (name, uid, gid) in [("to-user", Some(2000), None), ("same", Some(0), Some(1000))] {
        let p = prepare(&fs, name, 0o755, true);
        root.chown(&p, uid, gid).unwrap();
        let e = root.getxattr(&p, CAP).unwrap_err();
        assert_eq!(e.errno(), libc::ENODATA, "chown {name} left capabilities");
    }
    // A refused chown takes nothing.
    let p = prepare(&fs, "refused", 0o755, true);
    let user = fs.session(Cred::user(2000, 2000));
    assert_eq!(
        user.chown(&p, Some(2000), None).unwrap_err().errno(),
        libc::EPERM
    );
    assert_eq!(root.getxattr(&p, CAP).unwrap(), CAPS);
}

/// A writer may clear the set-id bits itself (what the kernel's FUSE client sends as
/// a mode-only setattr when the daemon does not clear them), but nothing else of the
/// mode, and only if it may write the file (`Fs::drop_privs`).
#[test]
fn a_writer_may_drop_only_the_setid_bits() {
    let fs = fs(16 << 20);
    let p = prepare(&fs, "writable", 0o6666, false);
    let ino = fs.session(Cred::root()).stat(&p).unwrap().ino;
    let user = Cred::user(1001, 1001);
    let errno = |r: lynxfs::Result<lynxfs::Stat>| r.map(|_| ()).map_err(|e| e.errno());
    assert_eq!(errno(fs.drop_privs(ino, 0o0777, &user)), Err(libc::EINVAL));
    assert_eq!(errno(fs.drop_privs(ino, 0o6666, &user)), Err(libc::EINVAL));
    assert_eq!(mode(&fs, &p), 0o6666, "a refused call changed nothing");
    assert_eq!(
        fs.drop_privs(ino, 0o0666, &user).unwrap().mode & 0o7777,
        0o666
    );
    let q = prepare(&fs, "read-only", 0o6644, false);
    let ino = fs.session(Cred::root()).stat(&q).unwrap().ino;
    assert_eq!(errno(fs.drop_privs(ino, 0o0644, &user)), Err(libc::EACCES));
    assert_eq!(mode(&fs, &q), 0o6644);
}
