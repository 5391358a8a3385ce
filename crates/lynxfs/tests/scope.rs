//! A pool mounted inside a bigger tree (the preload library's view): paths that leave
//! the pool come back as `Error::Outside` with the rest of the path, and nothing else
//! changes.

use crate::common;

use common::{errno, fs};
use lynxfs::{Cred, Error};

fn outside<T: std::fmt::Debug>(r: lynxfs::Result<T>) -> String {
    match r {
        Err(Error::Outside(p)) => String::from_utf8(p).unwrap(),
        other => panic!("expected a path outside the pool, got {other:?}"),
    }
}

#[test]
fn dotdot_at_the_root_leaves_the_pool_with_the_rest_of_the_path() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root()).mounted();
    s.mkdir("d", 0o755).unwrap();
    assert_eq!(outside(s.stat("..")), "..");
    assert_eq!(outside(s.stat("d/../../etc/passwd")), "../etc/passwd");
    assert_eq!(
        outside(s.open("../x", libc::O_CREAT | libc::O_RDWR, 0o644)),
        "../x"
    );
    assert_eq!(outside(s.mkdir("d/../../new/", 0o755)), "../new/");
    // Inside the pool, ".." works as always.
    assert_eq!(s.stat("d/..").unwrap().ino, s.stat(".").unwrap().ino);
    let in_d = s.at(s.resolve("d", true).unwrap());
    assert_eq!(outside(in_d.unlink("../../f")), "../f");
}

#[test]
fn absolute_paths_and_symlink_targets_leave_the_pool() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root()).mounted();
    s.mkdir("d", 0o755).unwrap();
    s.symlink("/usr/lib", "d/abs").unwrap();
    s.symlink("../..", "d/up").unwrap();
    s.symlink("..", "d/root").unwrap();
    assert_eq!(outside(s.stat("/anything")), "/anything");
    assert_eq!(outside(s.stat("d/abs/x/y")), "/usr/lib/x/y");
    assert_eq!(outside(s.stat("d/abs/")), "/usr/lib/");
    assert_eq!(outside(s.stat("d/abs")), "/usr/lib");
    assert_eq!(outside(s.open("d/up/x", libc::O_RDONLY, 0)), "../x");
    // Not followed: the link itself is in the pool.
    assert_eq!(s.lstat("d/abs").unwrap().mode & libc::S_IFMT, libc::S_IFLNK);
    assert_eq!(s.readlink("d/abs").unwrap(), b"/usr/lib");
    s.unlink("d/abs").unwrap();
    // A relative link that stays inside resolves as always.
    assert_eq!(s.stat("d/root/d").unwrap().ino, s.stat("d").unwrap().ino);
    // A dangling absolute link that O_CREAT would follow creates outside.
    s.symlink("/tmp/made-by-open", "dangling").unwrap();
    assert_eq!(
        outside(s.open("dangling", libc::O_CREAT | libc::O_WRONLY, 0o644)),
        "/tmp/made-by-open"
    );
}

#[test]
fn the_library_scope_keeps_the_pool_as_the_whole_tree() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    s.symlink("/d", "/abs").unwrap();
    assert_eq!(s.stat("/..").unwrap().ino, s.stat("/").unwrap().ino);
    assert_eq!(s.stat("/abs").unwrap().ino, s.stat("/d").unwrap().ino);
    assert_eq!(errno(s.stat("/abs/missing")), libc::ENOENT);
}

#[test]
fn names_are_bytes_not_text() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    let name: &[u8] = b"/caf\xe9";
    s.mkdir(name, 0o755).unwrap();
    let names: Vec<Vec<u8>> = s
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.iter().any(|n| n == b"caf\xe9"), "{names:?}");
    s.rmdir(name).unwrap();
}
