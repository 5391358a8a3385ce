//! Back pointers after the name changes a long conformance run makes (issue 30, item
//! 17): fsck printed 2,049 notes "back pointer ... does not name one of its entries"
//! on a healthy pool, and a repair "corrected" them. A non-directory's back pointer
//! names the entry that made it or last moved it; unlinking that name while another
//! hard link remains (or renaming over it) leaves it naming a removed entry, which is
//! harmless: only a directory's is followed (for `..` and getcwd), and a directory
//! has one name, which every rename moves the pointer to. So fsck checks directories'
//! back pointers only (a wrong one is a problem and is repaired) and says nothing of
//! files'.

use std::path::Path;

use lynxfs::pmem::PmemBackend;
use lynxfs::{fsck, Access, Cred, Fs, MkfsOptions, Pool};

fn open(path: &Path) -> Fs<PmemBackend> {
    Fs::new(Pool::open(path, Access::ReadWrite, PmemBackend::default()).unwrap())
}

fn make(s: &lynxfs::api::Session<'_, PmemBackend>, fs: &Fs<PmemBackend>, path: &str) {
    let fd = s.create(path, 0o644).unwrap();
    fs.pwrite(fd, path.as_bytes(), 0).unwrap();
    fs.close_fd(fd).unwrap();
}

/// One round of what a conformance run does to names, round `r` making new ones.
fn names_change(fs: &Fs<PmemBackend>, r: usize) {
    let s = fs.session(Cred::root());
    for d in ["/a", "/b"] {
        if s.stat(d).is_err() {
            s.mkdir(d, 0o755).unwrap();
        }
    }
    // Link, then unlink the first name.
    make(&s, fs, &format!("/a/f{r}"));
    s.link(format!("/a/f{r}"), format!("/b/l{r}")).unwrap();
    s.unlink(format!("/a/f{r}")).unwrap();
    // Rename over an existing file that has another link.
    make(&s, fs, &format!("/a/v{r}"));
    s.link(format!("/a/v{r}"), format!("/b/v{r}")).unwrap();
    make(&s, fs, &format!("/a/src{r}"));
    s.rename(format!("/a/src{r}"), format!("/a/v{r}"), 0)
        .unwrap();
    // Rename a hard-linked file across directories, then unlink where it went.
    make(&s, fs, &format!("/a/h{r}"));
    s.link(format!("/a/h{r}"), format!("/a/h{r}-2")).unwrap();
    s.rename(format!("/a/h{r}"), format!("/b/h{r}"), 0).unwrap();
    s.unlink(format!("/b/h{r}")).unwrap();
    // Directories move too.
    s.mkdir(format!("/a/d{r}"), 0o755).unwrap();
    s.rename(format!("/a/d{r}"), format!("/b/d{r}"), 0).unwrap();
    s.setxattr(format!("/b/l{r}"), "user.x", b"1", 0).unwrap();
}

#[test]
fn name_changes_leave_a_pool_fsck_calls_clean_and_repair_leaves_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    let mut o = MkfsOptions::new(32 << 20);
    o.lanes = 2;
    Pool::mkfs(&path, &o, PmemBackend::default()).unwrap();
    for r in 0..4 {
        // Each round on a fresh open: a remount in between.
        let fs = open(&path);
        names_change(&fs, r);
        fs.close().unwrap();
    }
    let mut pool = Pool::open(&path, Access::ReadWrite, PmemBackend::default()).unwrap();
    let rep = fsck::check(&pool);
    assert!(rep.is_clean(), "{:?}", rep.problems);
    let said = format!("{rep:?}");
    assert!(!said.contains("back pointer"), "{said}");
    let fixed = fsck::repair(&mut pool).unwrap();
    assert!(
        fixed.fixes.is_empty(),
        "repair changed a healthy pool: {:?}",
        fixed.fixes
    );
    // And the names are all still there, with their data.
    let fs = Fs::new(pool);
    let s = fs.session(Cred::root());
    for r in 0..4 {
        for (p, data) in [
            (format!("/b/l{r}"), format!("/a/f{r}")),
            (format!("/a/v{r}"), format!("/a/src{r}")),
            (format!("/b/v{r}"), format!("/a/v{r}")),
            (format!("/a/h{r}-2"), format!("/a/h{r}")),
        ] {
            let fd = s.open(&p, libc::O_RDONLY, 0).unwrap();
            let mut buf = vec![0u8; 64];
            let n = fs.pread(fd, &mut buf, 0).unwrap();
            fs.close_fd(fd).unwrap();
            assert_eq!(&buf[..n], data.as_bytes(), "{p}");
        }
        assert!(s.stat(format!("/b/d{r}")).is_ok());
    }
}

#[test]
fn a_directorys_wrong_back_pointer_is_a_problem_repair_fixes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    let mut o = MkfsOptions::new(32 << 20);
    o.lanes = 2;
    Pool::mkfs(&path, &o, PmemBackend::default()).unwrap();
    let fs = open(&path);
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    make(&s, &fs, "/f");
    // Changed once, so its create's check word no longer covers its inode's words.
    s.chmod("/d", 0o700).unwrap();
    let (d, f) = (s.stat("/d").unwrap().ino, s.stat("/f").unwrap().ino);
    drop(s);
    fs.close().unwrap();
    drop(fs);
    let mut pool = Pool::open(&path, Access::ReadWrite, PmemBackend::default()).unwrap();
    let l = pool.layout;
    let back = lynxfs::format::inode::DENTRY;
    let fback = pool.pm.load_u64(l.inode_addr(f) + back);
    let mut b = pool.pm.batch();
    b.write_u64(l.inode_addr(d) + back, fback);
    let _ = b.persist();
    let rep = fsck::check(&pool);
    assert_eq!(rep.problems.len(), 1, "{:?}", rep.problems);
    assert!(rep.problems[0].contains("back pointer"));
    let fixed = fsck::repair(&mut pool).unwrap();
    assert!(!fixed.fixes.is_empty() || !fixed.recovery_problems.is_empty());
    assert!(fsck::check(&pool).is_clean());
}
