//! NUMA placement on a simulated topology: this machine has one node, so threads are
//! told which node they run on (`lane::pin_node`), and what they allocate must land in
//! that node's lanes first.

use std::path::Path;

use lynxfs::alloc::{bit, lane, UsedSets};
use lynxfs::format::Layout;
use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions, Pool};

/// A pool file of `size` bytes with 4 lanes over 2 nodes (`inodes` in all, if given).
fn mkfs(path: &Path, size: u64, inodes: Option<u64>) {
    let mut o = MkfsOptions::new(size);
    o.lanes = 4;
    o.nodes = Some(2);
    o.inodes = inodes;
    Pool::mkfs(path, &o, PmemBackend::default()).unwrap();
}

/// Run `f` on a thread that counts as running on `node`.
fn on_node<T: Send>(node: u32, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            lane::pin_node(Some(node));
            f()
        })
        .join()
        .unwrap()
    })
}

/// What is in use in `after` and was not in `before`.
fn new_bits(before: &[u64], after: &[u64]) -> Vec<u64> {
    let n = after.len() as u64 * 64;
    (0..n)
        .filter(|&i| bit(after, i) && !bit(before, i))
        .collect()
}

/// Every inode, dentry and block that became used between `before` and `after` is
/// node `k`'s, and some of each did.
fn all_on_node(l: &Layout, k: u32, before: &UsedSets, after: &UsedSets) {
    let sets = [
        ("inode", &before.inodes, &after.inodes, l.node_inodes(k)),
        (
            "dentry",
            &before.dentries,
            &after.dentries,
            l.node_dentries(k),
        ),
        ("block", &before.blocks, &after.blocks, l.node_blocks(k)),
    ];
    for (what, b, a, range) in sets {
        let new = new_bits(b, a);
        assert!(!new.is_empty(), "node {k}: no new {what}");
        let away: Vec<_> = new.iter().filter(|i| !range.contains(i)).collect();
        assert!(
            away.is_empty(),
            "node {k}: {what}s {away:?} outside its range {range:?}"
        );
    }
}

/// A directory of files with data, made by the calling thread.
fn make_tree(fs: &Fs<PmemBackend>, dir: &str) {
    let s = fs.session(Cred::root());
    s.mkdir(dir, 0o755).unwrap();
    for i in 0..40 {
        let fd = s.create(format!("{dir}/f{i}"), 0o644).unwrap();
        fs.write(fd, &vec![i as u8; 5000 + i * 300]).unwrap();
        fs.close_fd(fd).unwrap();
    }
    s.symlink("f0", format!("{dir}/link")).unwrap();
}

#[test]
fn objects_made_on_a_simulated_node_land_in_its_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("pool");
    mkfs(&p, 64 << 20, None);
    let fs = Fs::open(&p).unwrap();
    let l = fs.pool().layout;
    assert_eq!(l.nodes(), 2);
    for k in [1, 0] {
        let before = fs.pool().alloc.used_sets();
        on_node(k, || make_tree(&fs, &format!("/d{k}")));
        all_on_node(&l, k, &before, &fs.pool().alloc.used_sets());
        let s = fs.session(Cred::root());
        let ino = s.stat(format!("/d{k}/f7")).unwrap().ino;
        assert!(l.node_inodes(k).contains(&ino), "inode {ino} of node {k}");
    }
    let usage = fs.pool().alloc.node_usage(&l);
    assert!(usage
        .iter()
        .all(|u| u.inodes_used >= 42 && u.blocks_used >= 40));
    fs.close().unwrap();
}

#[test]
fn threads_on_two_nodes_at_once_each_stay_in_their_node() {
    let _w =
        lynxfs_test_support::watchdog("threads_on_two_nodes", std::time::Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("pool");
    mkfs(&p, 64 << 20, None);
    let fs = Fs::open(&p).unwrap();
    let l = fs.pool().layout;
    fs.session(Cred::root()).mkdir("/shared", 0o755).unwrap();
    // Both threads create in one directory at the same time.
    let made: Vec<Vec<(u64, u64)>> = std::thread::scope(|sc| {
        let workers: Vec<_> = (0..2u32)
            .map(|k| {
                let fs = &fs;
                sc.spawn(move || {
                    lane::pin_node(Some(k));
                    let s = fs.session(Cred::root());
                    (0..200)
                        .map(|i| {
                            let path = format!("/shared/n{k}-{i}");
                            let fd = s.create(&path, 0o644).unwrap();
                            fs.write(fd, &[k as u8; 4096]).unwrap();
                            fs.close_fd(fd).unwrap();
                            (k as u64, s.stat(&path).unwrap().ino)
                        })
                        .collect()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    for (k, ino) in made.into_iter().flatten() {
        assert!(
            l.node_inodes(k as u32).contains(&ino),
            "inode {ino} of a file made on node {k}"
        );
    }
    let u = fs.pool().alloc.node_usage(&l);
    assert!(u[0].blocks_used >= 200 && u[1].blocks_used >= 200, "{u:?}");
    assert!(
        u[0].dentries_used >= 200 && u[1].dentries_used >= 200,
        "{u:?}"
    );
    fs.close().unwrap();
}

#[test]
fn a_full_node_falls_back_and_only_a_full_pool_fails() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("pool");
    mkfs(&p, 64 << 20, Some(256));
    let fs = Fs::open(&p).unwrap();
    let l = fs.pool().layout;
    let free = fs.pool().alloc.inodes.free_count();
    // Files from node 1 until the inodes run out: node 1's first, then node 0's.
    let inos = on_node(1, || {
        let s = fs.session(Cred::root());
        let mut inos = Vec::new();
        loop {
            match s.create(format!("/f{}", inos.len()), 0o644) {
                Ok(fd) => {
                    fs.close_fd(fd).unwrap();
                    inos.push(s.stat(format!("/f{}", inos.len())).unwrap().ino);
                }
                Err(e) => {
                    assert_eq!(e.errno(), libc::ENOSPC, "{e}");
                    break inos;
                }
            }
        }
    });
    assert_eq!(
        inos.len() as u64,
        free,
        "every free inode used before ENOSPC"
    );
    let node1 = l.node_inodes(1);
    let mine = (node1.end - node1.start) as usize;
    assert!(
        inos[..mine].iter().all(|i| node1.contains(i)),
        "node 1 first"
    );
    assert!(inos[mine..].iter().all(|i| l.node_inodes(0).contains(i)));
    // Blocks: a file written from node 0 until the pool is full.
    unlink_some(&fs, 8);
    let free_blocks = fs.pool().alloc.blocks.free_count();
    let written = on_node(0, || {
        let s = fs.session(Cred::root());
        let fd = s.create("/big", 0o644).unwrap();
        let chunk = vec![7u8; 4096];
        let mut written = 0u64;
        let err = loop {
            match fs.write(fd, &chunk) {
                Ok(n) => written += n as u64,
                Err(e) => break e,
            }
        };
        assert_eq!(err.errno(), libc::ENOSPC, "{err}");
        fs.close_fd(fd).unwrap();
        written
    });
    let left = fs.pool().alloc.blocks.free_count();
    assert!(
        left < 4 && written / 4096 + 64 > free_blocks,
        "ENOSPC with {left} blocks free, {written} bytes written of {free_blocks} blocks"
    );
    let usage = fs.pool().alloc.node_usage(&l);
    assert!(
        usage.iter().all(|u| u.blocks_total - u.blocks_used < 4),
        "{usage:?}"
    );
    fs.close().unwrap();
}

/// Unlink `n` of the files `a_full_node_falls_back…` made, so the big file has an inode.
fn unlink_some(fs: &Fs<PmemBackend>, n: usize) {
    let s = fs.session(Cred::root());
    for i in 0..n {
        s.unlink(format!("/f{i}")).unwrap();
    }
}

#[test]
fn a_two_node_pool_recovers_and_checks_clean() {
    let _w = lynxfs_test_support::watchdog(
        "a_two_node_pool_recovers",
        std::time::Duration::from_secs(120),
    );
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("pool");
    mkfs(&p, 64 << 20, None);
    let used = {
        let fs = Fs::open(&p).unwrap();
        on_node(0, || make_tree(&fs, "/a"));
        on_node(1, || make_tree(&fs, "/b"));
        on_node(1, || {
            fs.session(Cred::root()).rename("/a/f3", "/b/g", 0).unwrap()
        });
        let used = fs.pool().alloc.node_usage(&fs.pool().layout);
        fs.pool().crash_in_place();
        used
    };
    let fs = Fs::open(&p).unwrap();
    assert!(!fs.pool().was_clean);
    let rep = fs.pool().recovery.clone().unwrap();
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    let l = fs.pool().layout;
    assert_eq!(l.nodes(), 2);
    assert_eq!(
        fs.pool().alloc.node_usage(&l),
        used,
        "recovery finds the same"
    );
    let fsck = lynxfs::fsck::check(fs.pool());
    assert!(fsck.is_clean(), "{:?}", fsck.problems);
    // Work goes on after recovery, in the right node, and a clean close keeps it.
    let before = fs.pool().alloc.used_sets();
    on_node(1, || make_tree(&fs, "/c"));
    all_on_node(&l, 1, &before, &fs.pool().alloc.used_sets());
    fs.close().unwrap();
    drop(fs);
    let fs = Fs::open(&p).unwrap();
    assert!(fs.pool().was_clean);
    let fsck = lynxfs::fsck::check(fs.pool());
    assert!(fsck.is_clean(), "{:?}", fsck.problems);
    assert_eq!(fs.session(Cred::root()).stat("/b/g").unwrap().size, 5900);
    fs.close().unwrap();
}

#[test]
fn a_one_node_pool_is_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("pool");
    let mut o = MkfsOptions::new(16 << 20);
    o.lanes = 2;
    o.nodes = Some(1);
    Pool::mkfs(&p, &o, PmemBackend::default()).unwrap();
    let fs = Fs::open(&p).unwrap();
    let sb = fs.pool().superblock();
    let bit = sb.compat & lynxfs::format::superblock::COMPAT_NODES;
    assert_eq!((sb.geo.nodes, bit), (1, 0), "no node bit");
    let l = fs.pool().layout;
    // The same geometry as before nodes existed.
    assert_eq!(l.geo, lynxfs::format::Geometry::for_size(16 << 20, 2, None));
    // A thread that says it is on node 1 works in the only node.
    on_node(1, || make_tree(&fs, "/d"));
    let u = fs.pool().alloc.node_usage(&l);
    assert_eq!(u.len(), 1);
    assert_eq!(u[0].inodes_used, 43, "root, /d, 40 files, a link");
    fs.close().unwrap();
}

#[test]
fn a_node_count_that_does_not_divide_the_lanes_is_refused_at_mkfs() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("pool");
    let mut o = MkfsOptions::new(16 << 20);
    o.lanes = 4;
    o.nodes = Some(3);
    let e = Pool::mkfs(&p, &o, PmemBackend::default()).unwrap_err();
    assert!(e.to_string().contains("split evenly"), "{e}");
    o.nodes = Some(0);
    assert!(Pool::mkfs(&p, &o, PmemBackend::default()).is_err());
    assert!(!p.exists());
}
