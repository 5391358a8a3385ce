//! Extended attributes cost the same whatever the set's size (issue 30, item 11):
//! 78,273 attributes on one file took 23 minutes, each set rewriting the whole set.
//! The work is counted, not timed: the bytes each setxattr and removexattr stores to
//! the pool (the recording backend sees every store) must stay bounded as the set
//! grows to 20,000 names, where a whole-set rewrite stores about half a megabyte.
//! And a file's attributes have a limit, met with ENOSPC.

use lynxfs::data::xattr::MAX_LIVE;
use lynxfs::pmem::{Event, RecordingBackend};
use lynxfs::{Cred, Fs, MkfsOptions};

const N: usize = 20_000;
/// Bytes one change may store: an entry, a few pointers and words, or the rewrite of
/// a one-block set (4 KiB), or the first log (a few blocks).
const PER_CHANGE: u64 = 6 * 4096;

fn stored(rec: &RecordingBackend) -> u64 {
    rec.take()
        .iter()
        .map(|e| match e {
            Event::Store { bytes, .. } => bytes.len() as u64,
            _ => 0,
        })
        .sum()
}

fn name(i: usize) -> String {
    format!("user.attribute{i:06}")
}

fn value(i: usize) -> Vec<u8> {
    format!("value of {i}").into_bytes()
}

#[test]
fn a_change_stores_the_same_whatever_the_sets_size() {
    let rec = RecordingBackend::new();
    let mut o = MkfsOptions::new(128 << 20);
    o.lanes = 2;
    let fs = Fs::in_memory(&o, rec.clone()).expect("in-memory pool");
    let s = fs.session(Cred::root());
    let fd = s.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    fs.close_fd(fd).unwrap();
    stored(&rec);
    let mut most = 0;
    for i in 0..N {
        s.setxattr("/f", name(i), &value(i), libc::XATTR_CREATE)
            .unwrap();
        let n = stored(&rec);
        assert!(n <= PER_CHANGE, "set {i} stored {n} bytes");
        most = most.max(n);
    }
    println!("the most one of {N} sets stored: {most} bytes");
    for i in (0..N).step_by(997) {
        assert_eq!(s.getxattr("/f", name(i)).unwrap(), value(i));
    }
    assert_eq!(s.listxattr("/f").unwrap().len(), N);
    // Replacing and removing: each appends an entry; now and then the log is
    // compacted, which may store the whole set once, but the total stays
    // proportional to the changes.
    let mut total = 0;
    for i in 0..N {
        if i % 4 == 0 {
            s.setxattr("/f", name(i), b"new", libc::XATTR_REPLACE)
                .unwrap();
        } else {
            s.removexattr("/f", name(i)).unwrap();
        }
        total += stored(&rec);
    }
    let per = total / N as u64;
    println!("replace or remove: {per} bytes stored on average");
    assert!(per <= 512, "{per} bytes per change on average");
    let left = s.listxattr("/f").unwrap();
    assert_eq!(left.len(), N / 4);
    for i in (0..N).step_by(4) {
        assert_eq!(s.getxattr("/f", name(i)).unwrap(), b"new");
    }
    assert_eq!(
        s.getxattr("/f", name(1)).unwrap_err().errno(),
        libc::ENODATA
    );
    // Every name removed: the set goes, its blocks come back.
    for i in (0..N).step_by(4) {
        s.removexattr("/f", name(i)).unwrap();
    }
    assert!(s.listxattr("/f").unwrap().is_empty());
    assert_eq!(s.stat("/f").unwrap().blocks, 0);
}

#[test]
fn a_files_attributes_have_a_limit_met_with_enospc() {
    let mut o = MkfsOptions::new(128 << 20);
    o.lanes = 2;
    let fs = Fs::in_memory(&o, lynxfs::pmem::PmemBackend::default()).unwrap();
    let s = fs.session(Cred::root());
    let fd = s.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    fs.close_fd(fd).unwrap();
    let big = vec![7u8; 65536];
    let mut set = 0u64;
    let err = loop {
        match s.setxattr("/f", format!("user.big{set}"), &big, 0) {
            Ok(()) => set += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err.errno(), libc::ENOSPC);
    assert_eq!(set, MAX_LIVE / (65536 + 5 + 12));
    // The set is whole, and a smaller value still fits where the big one did not.
    assert_eq!(s.listxattr("/f").unwrap().len() as u64, set);
    assert_eq!(s.getxattr("/f", "user.big0").unwrap(), big);
    s.setxattr("/f", "user.small", b"x", 0).unwrap();
    let fd = s.open("/g", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    fs.close_fd(fd).unwrap();
    s.setxattr("/g", "user.other", b"file", 0).unwrap();
}

/// Two attachments of one pool (as the daemon and a preloaded program are) each keep
/// an index of a large set: each sees what the other appended, replaced, removed and
/// compacted, never a stale value.
#[test]
fn two_attachments_see_each_others_changes_to_a_large_set() {
    let dir = tempfile::Builder::new()
        .prefix("lynxfs-xattr")
        .tempdir_in("/dev/shm")
        .unwrap();
    let path = dir.path().join("pool");
    let mut o = MkfsOptions::new(64 << 20);
    o.lanes = 2;
    lynxfs::Pool::mkfs(&path, &o, lynxfs::pmem::PmemBackend::default()).unwrap();
    let (a, b) = (Fs::open(&path).unwrap(), Fs::open(&path).unwrap());
    let (sa, sb) = (a.session(Cred::root()), b.session(Cred::root()));
    let fd = sa.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    a.close_fd(fd).unwrap();
    for i in 0..2000 {
        sa.setxattr("/f", name(i), &value(i), 0).unwrap();
    }
    assert_eq!(sb.getxattr("/f", name(1999)).unwrap(), value(1999));
    sb.setxattr("/f", name(5), b"from b", 0).unwrap();
    sb.removexattr("/f", name(6)).unwrap();
    sb.setxattr("/f", name(2000), b"new in b", 0).unwrap();
    assert_eq!(sa.getxattr("/f", name(5)).unwrap(), b"from b");
    assert_eq!(
        sa.getxattr("/f", name(6)).unwrap_err().errno(),
        libc::ENODATA
    );
    assert_eq!(sa.getxattr("/f", name(2000)).unwrap(), b"new in b");
    // Enough removals in `a` to compact the set (a new head): `b` follows.
    for i in 100..2000 {
        sa.removexattr("/f", name(i)).unwrap();
    }
    assert_eq!(
        sb.getxattr("/f", name(150)).unwrap_err().errno(),
        libc::ENODATA
    );
    assert_eq!(sb.getxattr("/f", name(5)).unwrap(), b"from b");
    assert_eq!(sb.listxattr("/f").unwrap().len(), 100 - 1 + 1);
    drop((sa, sb));
    a.close().unwrap();
    b.close().unwrap();
}
