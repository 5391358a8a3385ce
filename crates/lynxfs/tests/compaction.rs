//! Directory log compaction (issue 27): a directory that grew and shrank gives its
//! emptied log pages back to the pool, lists and reloads what is left, and keeps every
//! readdir offset it gave out.

use crate::common;

use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions, Pool, Session};

fn names(s: &Session<'_, PmemBackend>, dir: &str) -> Vec<String> {
    let mut v: Vec<String> = s
        .readdir(dir)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .filter(|n| n != "." && n != "..")
        .collect();
    v.sort();
    v
}

fn fill(fs: &Fs<PmemBackend>, dir: &str, prefix: &str, n: usize) {
    let s = fs.session(Cred::root());
    for i in 0..n {
        fs.close_fd(s.create(format!("{dir}/{prefix}{i}"), 0o644).unwrap())
            .unwrap();
    }
}

#[test]
fn a_directory_emptied_to_ten_gives_its_log_pages_back() {
    let _w = lynxfs_test_support::watchdog("compaction", std::time::Duration::from_secs(120));
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("pool");
    let mut o = MkfsOptions::new(64 << 20);
    o.lanes = 2;
    o.inodes = Some(24_000);
    Pool::mkfs(&p, &o, PmemBackend::default()).unwrap();
    let n = 20_000;
    let free_before = {
        let fs = Fs::open(&p).unwrap();
        let s = fs.session(Cred::root());
        s.mkdir("/d", 0o755).unwrap();
        let free = fs.ns().statfs().blocks_free;
        fill(&fs, "/d", "f", n);
        assert!(
            fs.ns().statfs().blocks_free + 39 < free,
            "the log took its pages"
        );
        for i in 10..n {
            s.unlink(format!("/d/f{i}")).unwrap();
        }
        // The last check came at most a page's worth of removals before the end: the
        // survivors' page, and at most the page that held the last names, are left.
        let free_now = fs.ns().statfs().blocks_free;
        assert!(free_now + 2 >= free, "{} pages kept", free - free_now);
        let mut want: Vec<String> = (0..10).map(|i| format!("f{i}")).collect();
        want.sort();
        assert_eq!(names(&s, "/d"), want);
        fs.close().unwrap();
        free
    };
    // Cold: a fresh attach loads the directory from its (short) log, and the load
    // gives back what the removals' last check left (the page of the last names).
    let fs = Fs::open(&p).unwrap();
    let s = fs.session(Cred::root());
    let mut want: Vec<String> = (0..10).map(|i| format!("f{i}")).collect();
    want.sort();
    assert_eq!(names(&s, "/d"), want);
    assert_eq!(
        fs.ns().statfs().blocks_free + 1,
        free_before,
        "one page left"
    );
    let rep = lynxfs::fsck::check(fs.pool());
    assert!(rep.is_clean(), "{:?}", rep.problems);
    // The directory grows again from there.
    fill(&fs, "/d", "g", 600);
    assert_eq!(names(&s, "/d").len(), 610);
}

/// Survivors scattered one per page keep their pages (nothing moves), and an offset
/// handed out before a compaction continues the listing with exactly the entries
/// after it.
#[test]
fn offsets_given_out_before_a_compaction_still_hold() {
    let fs = common::fs(32 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    fill(&fs, "/d", "f", 2100); // pages of 504: f0-f503, f504-f1007, ...
    let ino = s.stat("/d").unwrap().ino;
    let root = Cred::root();
    let first = fs.ns().readdir(ino, 0, 1300, &root).unwrap();
    let resume = first.last().unwrap().next;
    let seen: Vec<Vec<u8>> = first.iter().map(|e| e.name.clone()).collect();
    // Empty the first two pages and the fourth, keep one name in the third (the
    // removals' own checks may compact part way; the call takes the rest).
    let free = fs.ns().statfs().blocks_free;
    for i in (0..1511).chain(1512..2016) {
        s.unlink(format!("/d/f{i}")).unwrap();
    }
    fs.ns().compact_dir(ino).unwrap();
    assert_eq!(
        fs.ns().statfs().blocks_free,
        free + 3,
        "three empty pages went"
    );
    let rest: Vec<String> = fs
        .ns()
        .readdir(ino, resume, usize::MAX, &root)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .collect();
    let mut want: Vec<String> = (2016..2100).map(|i| format!("f{i}")).collect();
    if !seen.contains(&b"f1511".to_vec()) {
        want.insert(0, "f1511".into());
    }
    assert_eq!(rest, want);
    let mut all = names(&s, "/d");
    all.sort();
    let mut expect: Vec<String> = std::iter::once(1511)
        .chain(2016..2100)
        .map(|i| format!("f{i}"))
        .collect();
    expect.sort();
    assert_eq!(all, expect);
    // Creates take the freed slots of the pages kept, then new pages.
    fill(&fs, "/d", "g", 10);
    let rep = lynxfs::fsck::check(fs.pool());
    assert!(rep.is_clean(), "{:?}", rep.problems);
}
