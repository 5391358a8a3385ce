//! The reserve held back for root (`mkfs --reserved`, ext4's reserved blocks): a user
//! who fills the pool stops short of it, root does not, and statfs tells them apart.

use crate::common;

use common::errno;
use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions, Pool, Session};

fn fs_with_reserve(percent: u32) -> Fs<PmemBackend> {
    fs_of(percent, None)
}

fn fs_of(percent: u32, inodes: Option<u64>) -> Fs<PmemBackend> {
    let mut o = MkfsOptions::new(8 << 20);
    o.lanes = 2;
    o.reserved_percent = percent;
    o.inodes = inodes;
    Fs::in_memory(&o, PmemBackend::default()).expect("in-memory pool")
}

/// A directory anyone may fill.
fn shared_dir(fs: &Fs<PmemBackend>) {
    let root = fs.session(Cred::root());
    root.mkdir("/shared", 0o777).unwrap();
}

/// As `s`, writes into `path` until ENOSPC, then makes empty files until ENOSPC: every
/// block and every inode the caller may take.
fn fill(s: &Session<'_, PmemBackend>, tag: &str) {
    let fd = s
        .create(format!("/shared/{tag}-data"), 0o644)
        .expect("a file to fill");
    let chunk = vec![0xa5u8; 64 << 10];
    for len in [chunk.len(), 4096] {
        loop {
            match s.fs().write(fd, &chunk[..len]) {
                Ok(n) if n == len => {}
                Ok(_) => break,
                Err(e) => {
                    assert_eq!(e.errno(), libc::ENOSPC, "write as {tag}: {e}");
                    break;
                }
            }
        }
    }
    s.fs().close_fd(fd).unwrap();
    for i in 0.. {
        match s.create(format!("/shared/{tag}-{i}"), 0o644) {
            Ok(fd) => s.fs().close_fd(fd).unwrap(),
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "create {i} as {tag}: {e}");
                break;
            }
        }
    }
}

#[test]
fn a_user_who_fills_the_pool_leaves_roots_reserve() {
    let fs = fs_with_reserve(5);
    shared_dir(&fs);
    fill(&fs.session(Cred::user(1000, 1000)), "user");
    let st = fs.ns().statfs();
    assert!(st.blocks_free > 0, "the user took every block: {st:?}");
    assert!(st.files_free > 0, "the user took every inode: {st:?}");
    assert!(st.blocks_avail < st.blocks_free, "df: {st:?}");
    assert!(st.files_avail < st.files_free, "df: {st:?}");
    assert!(
        st.blocks_avail <= st.blocks / 100,
        "most of the room is left: {st:?}"
    );
    // Root still creates a file and writes a block.
    let root = fs.session(Cred::root());
    let fd = root
        .create("/shared/root-file", 0o644)
        .expect("root creates");
    assert_eq!(
        root.fs().write(fd, &[7u8; 4096]).expect("root writes"),
        4096
    );
    root.fs().close_fd(fd).unwrap();
    // Then root fills the rest, which the user could not reach.
    fill(&root, "root");
    let st = fs.ns().statfs();
    assert_eq!((st.blocks_avail, st.files_avail), (0, 0), "{st:?}");
}

/// The case reported: the inodes ran out first (a pool of few inodes, many blocks).
#[test]
fn a_user_who_takes_every_inode_leaves_roots_share() {
    let fs = fs_of(5, Some(128));
    shared_dir(&fs);
    let user = fs.session(Cred::user(1000, 1000));
    let mut made = 0;
    let e = loop {
        match user.create(format!("/shared/u{made}"), 0o644) {
            Ok(fd) => fs.close_fd(fd).unwrap(),
            Err(e) => break e,
        }
        made += 1;
    };
    assert_eq!(e.errno(), libc::ENOSPC, "{e}");
    let st = fs.ns().statfs();
    assert!(st.files_free > 0 && st.files_avail == 0, "{st:?}");
    assert!(st.blocks_avail > 0, "blocks are not what ran out: {st:?}");
    // Nor does a directory get past it.
    assert_eq!(errno(user.mkdir("/shared/d", 0o755)), libc::ENOSPC);
    let root = fs.session(Cred::root());
    let fd = root
        .create("/shared/root-file", 0o644)
        .expect("root creates");
    assert_eq!(fs.write(fd, &[7u8; 4096]).expect("root writes"), 4096);
    fs.close_fd(fd).unwrap();
    root.mkdir("/shared/root-dir", 0o755)
        .expect("root makes a directory");
}

#[test]
fn a_pool_made_with_no_reserve_gives_the_user_everything() {
    let fs = fs_with_reserve(0);
    shared_dir(&fs);
    let before = fs.ns().statfs();
    assert_eq!(
        (before.blocks_avail, before.files_avail),
        (before.blocks_free, before.files_free)
    );
    fill(&fs.session(Cred::user(1000, 1000)), "user");
    let st = fs.ns().statfs();
    assert_eq!(st.blocks_free, 0, "{st:?}");
    let root = fs.session(Cred::root());
    assert_eq!(errno(root.create("/shared/root-file", 0o644)), libc::ENOSPC);
}

#[test]
fn a_reserve_out_of_range_is_refused() {
    let mut o = MkfsOptions::new(8 << 20);
    o.reserved_percent = 51;
    let e = Fs::in_memory(&o, PmemBackend::default())
        .err()
        .expect("a 51% reserve refused");
    assert!(e.to_string().contains("0 to 50%"), "{e}");
}

#[test]
fn the_reserve_is_kept_in_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("pool");
    let mut o = MkfsOptions::new(8 << 20);
    o.lanes = 2;
    o.reserved_percent = 10;
    Pool::mkfs(&p, &o, PmemBackend::default()).unwrap();
    let fs = Fs::open(&p).unwrap();
    assert_eq!(fs.pool().superblock().reserved_percent, 10);
    let st = fs.ns().statfs();
    let data = fs.pool().layout.data_blocks;
    assert_eq!(st.blocks_free - st.blocks_avail, data / 10, "{st:?}");
    fs.close().unwrap();
}
