//! FUSE over io_uring with replies made on other threads than the queue's: the fork's
//! transport hands them to the queue thread (the kernel delivers an entry's next
//! request in the task that committed it). A file system that answers every LOOKUP
//! and GETATTR from a new thread must serve a stream of calls without a lost or
//! stuck request. Needs root, `/dev/fuse` and FUSE over io_uring (`./lynx test`
//! switches `enable_uring` on); fails without them.

use std::path::Path;
use std::time::{Duration, SystemTime};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, INodeNo, MountOption, ReplyAttr,
    ReplyEntry, Request,
};
use lynxfs_fuse::kmount;
use lynxfs_test_support::watchdog;

/// Answers the root's attributes and "no such name" for every lookup, each from a
/// thread of its own.
struct ElsewhereFs;

fn root_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(1),
        size: 0,
        blocks: 0,
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: FileType::Directory,
        perm: 0o755,
        nlink: 2,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl Filesystem for ElsewhereFs {
    fn lookup(&self, _req: &Request, _parent: INodeNo, _name: &std::ffi::OsStr, reply: ReplyEntry) {
        std::thread::spawn(move || reply.error(Errno::ENOENT));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        std::thread::spawn(move || {
            if ino == INodeNo(1) {
                reply.attr(&Duration::ZERO, &root_attr());
            } else {
                reply.error(Errno::ENOENT);
            }
        });
    }
}

#[test]
fn replies_from_other_threads_are_committed_by_the_queues() {
    let _w = watchdog(
        "replies_from_other_threads_are_committed_by_the_queues",
        Duration::from_secs(120),
    );
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing");
    let mnt = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.mount_options = vec![MountOption::FSName("uring-replies".into())];
    config.io_uring = true;
    let (session, mount) = kmount::session(ElsewhereFs, mnt.path(), &config).expect("mount");
    if !session.io_uring() {
        let _ = mount.unmount();
        panic!("FUSE over io_uring not offered (is /sys/module/fuse/parameters/enable_uring Y?)");
    }
    let state = session.io_uring_state();
    let bg = session.spawn().expect("serving");
    let before = queue_switches();
    // Collected, not asserted, until the mount is gone: a failure leaves no mount.
    let wrong: Vec<String> = (0..500)
        .filter_map(
            |i| match std::fs::metadata(mnt.path().join(format!("n{i}"))) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                other => Some(format!("n{i}: {other:?}")),
            },
        )
        .collect();
    let root_is_dir = std::fs::metadata(mnt.path()).map(|m| m.is_dir());
    let queues_served = state.active();
    let after = queue_switches();
    kmount::unmount_and_join(&mount, bg).expect("unmount");
    assert!(wrong.is_empty(), "{wrong:?}");
    assert!(matches!(root_is_dir, Ok(true)), "{root_is_dir:?}");
    assert!(queues_served, "the io_uring queues stopped serving");
    assert!(
        after >= before + 500,
        "the queue threads woke for the requests: {before} -> {after} switches"
    );
}

/// Context switches of this process's io_uring queue threads (`fuser-uring-N`).
fn queue_switches() -> u64 {
    let mut switches = 0;
    for t in std::fs::read_dir("/proc/self/task").unwrap() {
        let t = t.unwrap().path();
        let name = std::fs::read_to_string(t.join("comm")).unwrap_or_default();
        if name.starts_with("fuser-uring") {
            let status = std::fs::read_to_string(t.join("status")).unwrap_or_default();
            switches += status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>();
        }
    }
    switches
}
