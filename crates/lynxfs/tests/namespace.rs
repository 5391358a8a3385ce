//! The namespace's operations and their errors, one behaviour per test.

use crate::common;

use common::{errno, fs};
use lynxfs::pmem::RecordingBackend;
use lynxfs::{Cred, Session, TimeSet, Timestamp};

const RW: i32 = libc::O_RDWR;
const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;

#[test]
fn create_stat_unlink() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    let fd = s.open("/a", CREAT | libc::O_EXCL, 0o644).unwrap();
    fs.close_fd(fd).unwrap();
    let st = s.stat("/a").unwrap();
    assert_eq!(st.mode, libc::S_IFREG | 0o644);
    assert_eq!(st.nlink, 1);
    assert_eq!(
        errno(s.open("/a", CREAT | libc::O_EXCL, 0o644)),
        libc::EEXIST
    );
    s.unlink("/a").unwrap();
    assert_eq!(errno(s.stat("/a")), libc::ENOENT);
    assert_eq!(errno(s.unlink("/a")), libc::ENOENT);
}

#[test]
fn directories_nest_and_rmdir_checks_emptiness() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    s.mkdir("/d/e", 0o755).unwrap();
    assert_eq!(s.stat("/").unwrap().nlink, 3);
    assert_eq!(s.stat("/d").unwrap().nlink, 3);
    fs.close_fd(s.create("/d/e/f", 0o600).unwrap()).unwrap();
    assert_eq!(errno(s.rmdir("/d")), libc::ENOTEMPTY);
    assert_eq!(errno(s.rmdir("/d/e/f")), libc::ENOTDIR);
    assert_eq!(errno(s.unlink("/d/e")), libc::EISDIR);
    assert_eq!(errno(s.mkdir("/d/e/f/g", 0o755)), libc::ENOTDIR);
    s.unlink("/d/e/f").unwrap();
    s.rmdir("/d/e").unwrap();
    s.rmdir("/d").unwrap();
    assert_eq!(s.stat("/").unwrap().nlink, 2);
    assert_eq!(s.readdir("/").unwrap().len(), 2);
}

#[test]
fn bad_names_and_paths() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    let long = format!("/{}", "x".repeat(256));
    assert_eq!(errno(s.mkdir(&long, 0o755)), libc::ENAMETOOLONG);
    let ok = format!("/{}", "x".repeat(255));
    s.mkdir(&ok, 0o755).unwrap();
    let deep = "/a".repeat(2100);
    assert_eq!(errno(s.stat(&deep)), libc::ENAMETOOLONG);
    assert_eq!(errno(s.stat("")), libc::ENOENT);
    assert_eq!(errno(s.mkdir("/", 0o755)), libc::EEXIST);
    assert_eq!(errno(s.mkdir("/.", 0o755)), libc::EEXIST);
    assert_eq!(errno(s.stat("/nope/x")), libc::ENOENT);
    assert_eq!(errno(s.rmdir("/.")), libc::EINVAL);
    assert_eq!(errno(s.stat("/a\0b")), libc::EINVAL);
    assert_eq!(
        s.readdir("/").unwrap().len(),
        3,
        "failed calls changed nothing"
    );
}

#[test]
fn rename_forms() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/a", 0o755).unwrap();
    s.mkdir("/b", 0o755).unwrap();
    fs.close_fd(s.create("/a/f", 0o644).unwrap()).unwrap();
    fs.close_fd(s.create("/b/g", 0o644).unwrap()).unwrap();
    let f = s.stat("/a/f").unwrap().ino;
    let g = s.stat("/b/g").unwrap().ino;
    s.rename("/a/f", "/a/f2", 0).unwrap();
    assert_eq!(s.stat("/a/f2").unwrap().ino, f);
    assert_eq!(errno(s.stat("/a/f")), libc::ENOENT);
    assert_eq!(
        errno(s.rename("/a/f2", "/b/g", libc::RENAME_NOREPLACE)),
        libc::EEXIST
    );
    s.rename("/a/f2", "/b/g", libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(s.stat("/b/g").unwrap().ino, f);
    assert_eq!(s.stat("/a/f2").unwrap().ino, g);
    s.rename("/a/f2", "/b/g", 0).unwrap(); // over an existing file
    assert_eq!(s.stat("/b/g").unwrap().ino, g);
    assert_eq!(errno(s.stat("/a/f2")), libc::ENOENT);
    // Directories: into its own subtree, over a non-empty directory, across parents.
    s.mkdir("/a/sub", 0o755).unwrap();
    assert_eq!(errno(s.rename("/a", "/a/sub/x", 0)), libc::EINVAL);
    assert_eq!(errno(s.rename("/a", "/b", 0)), libc::ENOTEMPTY);
    assert_eq!(errno(s.rename("/a/sub", "/b/g", 0)), libc::ENOTDIR);
    assert_eq!(errno(s.rename("/b/g", "/a/sub", 0)), libc::EISDIR);
    s.rename("/a/sub", "/b/sub", 0).unwrap();
    assert_eq!(s.stat("/a").unwrap().nlink, 2);
    assert_eq!(s.stat("/b").unwrap().nlink, 3);
    s.mkdir("/empty", 0o755).unwrap();
    s.rename("/b/sub", "/empty", 0).unwrap(); // over an empty directory
    assert_eq!(s.stat("/").unwrap().nlink, 5);
    let mut cwd = fs.session(Cred::root());
    cwd.chdir("/empty").unwrap();
    assert_eq!(cwd.getcwd().unwrap(), "/empty");
}

#[test]
fn links_and_symlinks() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    let fd = s.create("/d/f", 0o644).unwrap();
    fs.write(fd, b"hello").unwrap();
    fs.close_fd(fd).unwrap();
    s.link("/d/f", "/h").unwrap();
    assert_eq!(s.stat("/h").unwrap().nlink, 2);
    assert_eq!(errno(s.link("/d", "/dl")), libc::EPERM);
    s.symlink("d/f", "/sl").unwrap();
    s.symlink("/sl", "/sl2").unwrap();
    assert_eq!(s.readlink("/sl").unwrap(), b"d/f");
    assert_eq!(s.stat("/sl2").unwrap().size, 5);
    assert_eq!(s.lstat("/sl").unwrap().mode & libc::S_IFMT, libc::S_IFLNK);
    s.symlink("/loop2", "/loop1").unwrap();
    s.symlink("/loop1", "/loop2").unwrap();
    assert_eq!(errno(s.stat("/loop1")), libc::ELOOP);
    s.symlink("d", "/dl").unwrap();
    assert_eq!(s.stat("/dl/f").unwrap().nlink, 2);
    s.unlink("/d/f").unwrap();
    assert_eq!(s.stat("/h").unwrap().nlink, 1);
    assert_eq!(errno(s.stat("/sl")), libc::ENOENT);
}

#[test]
fn permissions_like_linux() {
    let fs = fs(16 << 20);
    let root = fs.session(Cred::root());
    root.mkdir("/pub", 0o777).unwrap();
    root.mkdir("/priv", 0o700).unwrap();
    let u = fs.session(Cred::user(1000, 1000));
    assert_eq!(errno(u.mkdir("/priv/x", 0o755)), libc::EACCES);
    assert_eq!(errno(u.stat("/priv/x")), libc::EACCES);
    fs.close_fd(u.create("/pub/mine", 0o600).unwrap()).unwrap();
    let st = u.stat("/pub/mine").unwrap();
    assert_eq!((st.uid, st.gid), (1000, 1000));
    let v = fs.session(Cred::user(1001, 1001));
    assert_eq!(errno(v.open("/pub/mine", RW, 0)), libc::EACCES);
    assert_eq!(errno(v.chmod("/pub/mine", 0o777)), libc::EPERM);
    assert_eq!(errno(u.chown("/pub/mine", Some(0), None)), libc::EPERM);
    root.chmod("/pub", 0o1777).unwrap();
    assert_eq!(
        errno(v.unlink("/pub/mine")),
        libc::EPERM,
        "sticky directory"
    );
    u.unlink("/pub/mine").unwrap();
    assert_eq!(
        errno(v.utimens("/pub", Some(TimeSet::At(Timestamp::from_ns(5))), None)),
        libc::EPERM
    );
}

#[test]
fn deleted_while_open_stays_readable_then_frees_its_blocks() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/warm", 0o755).unwrap(); // the root's first log page
    let before = fs.pool().alloc.blocks.free_count();
    let fd = s.open("/f", CREAT, 0o644).unwrap();
    fs.write(fd, &vec![7u8; 100_000]).unwrap();
    s.unlink("/f").unwrap();
    let mut buf = vec![0u8; 100_000];
    assert_eq!(fs.pread(fd, &mut buf, 0).unwrap(), 100_000);
    assert!(buf.iter().all(|&b| b == 7));
    assert!(fs.pool().alloc.blocks.free_count() < before);
    fs.close_fd(fd).unwrap();
    assert_eq!(fs.pool().alloc.blocks.free_count(), before);
}

#[test]
fn concurrent_creates_of_one_name_leave_one_file() {
    let fs = fs(32 << 20);
    for round in 0..50 {
        let name = format!("/n{round}");
        let wins: usize = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    let fs = &fs;
                    let name = name.clone();
                    sc.spawn(move || {
                        let s = fs.session(Cred::root());
                        match s.open(&name, CREAT | libc::O_EXCL, 0o644) {
                            Ok(fd) => {
                                fs.close_fd(fd).unwrap();
                                1
                            }
                            Err(e) => {
                                assert_eq!(e.errno(), libc::EEXIST);
                                0
                            }
                        }
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(wins, 1);
    }
    let s = fs.session(Cred::root());
    assert_eq!(s.readdir("/").unwrap().len(), 52);
}

#[test]
fn readdir_offsets_survive_changes() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    for i in 0..1200 {
        fs.close_fd(s.create(format!("/f{i}"), 0o644).unwrap())
            .unwrap();
    }
    let ns = fs.ns();
    let first = ns.readdir(1, 0, 600, &Cred::root()).unwrap();
    let resume = first.last().unwrap().next;
    let seen: std::collections::HashSet<Vec<u8>> = first.iter().map(|e| e.name.clone()).collect();
    // Remove entries already listed; the rest must still come after the offset.
    for e in first.iter().filter(|e| e.name.starts_with(b"f")) {
        s.unlink(format!("/{}", String::from_utf8_lossy(&e.name)))
            .unwrap();
    }
    let rest = ns.readdir(1, resume, 10_000, &Cred::root()).unwrap();
    let all: std::collections::HashSet<Vec<u8>> = seen
        .iter()
        .cloned()
        .chain(rest.iter().map(|e| e.name.clone()))
        .collect();
    assert_eq!(all.len(), 1202);
}

#[test]
fn state_survives_clean_close_and_crash() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("pool");
    let mut o = lynxfs::MkfsOptions::new(16 << 20);
    o.lanes = 2;
    lynxfs::Pool::mkfs(&p, &o, lynxfs::pmem::PmemBackend::default()).unwrap();
    {
        let fs = lynxfs::Fs::open(&p).unwrap();
        let s = fs.session(Cred::root());
        s.mkdir("/d", 0o755).unwrap();
        let fd = s.create("/d/f", 0o644).unwrap();
        fs.write(fd, b"persist me").unwrap();
        fs.close_fd(fd).unwrap();
        fs.close().unwrap();
    }
    {
        let fs = lynxfs::Fs::open(&p).unwrap();
        let s = fs.session(Cred::root());
        assert_eq!(s.stat("/d/f").unwrap().size, 10);
        s.rename("/d/f", "/g", 0).unwrap();
        s.mkdir("/e", 0o700).unwrap();
        // A crash: nothing saved, the clean flag stays off.
        fs.pool().crash_in_place();
    }
    let fs = lynxfs::Fs::open(&p).unwrap();
    assert!(!fs.pool().was_clean);
    let s = fs.session(Cred::root());
    let fd = s.open("/g", libc::O_RDONLY, 0).unwrap();
    let mut buf = [0u8; 32];
    let n = fs.read(fd, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"persist me");
    assert_eq!(s.stat("/e").unwrap().mode, libc::S_IFDIR | 0o700);
    assert_eq!(s.stat("/").unwrap().nlink, 4);
    let rep = fs.pool().recovery.clone().unwrap();
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
}

#[test]
fn cold_directories_leave_the_index_and_come_back() {
    let fs = fs(32 << 20);
    let s = fs.session(Cred::root());
    fs.ns().set_index_budget(40);
    for d in 0..20 {
        s.mkdir(format!("/d{d}"), 0o755).unwrap();
        for f in 0..10 {
            fs.close_fd(s.create(format!("/d{d}/f{f}"), 0o644).unwrap())
                .unwrap();
        }
    }
    // Every directory was loaded at creation; the index stayed near its budget.
    assert!(
        fs.ns().index.len() <= 40 + 20,
        "index holds {} entries",
        fs.ns().index.len()
    );
    // Evicted directories reload on use: every name is still there, and changes work.
    for d in 0..20 {
        for f in 0..10 {
            assert_eq!(s.stat(format!("/d{d}/f{f}")).unwrap().nlink, 1);
        }
        s.rename(
            format!("/d{d}/f0"),
            format!("/d{}/moved{d}", (d + 1) % 20),
            0,
        )
        .unwrap();
        s.unlink(format!("/d{d}/f1")).unwrap();
    }
    for d in 0..20 {
        let names = s.readdir(format!("/d{d}")).unwrap().len();
        assert_eq!(names, 2 + 8 + 1, "directory d{d}");
        assert_eq!(errno(s.stat(format!("/d{d}/f1"))), libc::ENOENT);
        assert!(s.stat(format!("/d{d}/moved{}", (d + 19) % 20)).is_ok());
    }
    assert!(fs.ns().index.len() <= 40 + 20);
}

#[test]
fn eviction_races_with_creates_and_unlinks() {
    let fs = fs(64 << 20);
    fs.ns().set_index_budget(16);
    let s = fs.session(Cred::root());
    for d in 0..4 {
        s.mkdir(format!("/d{d}"), 0o755).unwrap();
    }
    std::thread::scope(|sc| {
        for t in 0..2 {
            let fs = &fs;
            sc.spawn(move || {
                let s = fs.session(Cred::root());
                for i in 0..400 {
                    let d = (i + t) % 4;
                    let p = format!("/d{d}/t{t}-{i}");
                    fs.close_fd(s.create(&p, 0o644).unwrap()).unwrap();
                    assert!(s.stat(&p).is_ok(), "{p} vanished");
                    if i % 3 == 0 {
                        s.unlink(&p).unwrap();
                    }
                }
            });
        }
    });
    let mut total = 0;
    for d in 0..4 {
        total += s.readdir(format!("/d{d}")).unwrap().len() - 2;
    }
    let expected: usize = (0..2)
        .map(|_| (0..400).filter(|i| i % 3 != 0).count())
        .sum();
    assert_eq!(total, expected);
}

/// A thread that takes a new slot holds the rest of its line for its next creates
/// (`dir::SlotOwner`). Once the directory is evicted and loaded again those slots are
/// freed slots that other threads take: the holder must not use them too, or two
/// names would share one slot and one would be lost when the log is read again.
#[test]
fn slots_a_thread_held_before_a_reload_are_not_used_again() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    // The second create in a row here takes the rest of the line: slots 2-7 in hand.
    for i in 0..2 {
        fs.close_fd(s.create(format!("/d/mine{i}"), 0o644).unwrap())
            .unwrap();
    }
    fs.ns().drop_index();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let s = fs.session(Cred::root());
            for i in 0..7 {
                fs.close_fd(s.create(format!("/d/other{i}"), 0o644).unwrap())
                    .unwrap();
            }
        });
    });
    for i in 2..5 {
        fs.close_fd(s.create(format!("/d/mine{i}"), 0o644).unwrap())
            .unwrap();
    }
    fs.ns().drop_index();
    let mut names: Vec<String> = s
        .readdir("/d")
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name.to_vec()).unwrap())
        .filter(|n| n != "." && n != "..")
        .collect();
    names.sort();
    let mut want: Vec<String> = (0..5)
        .map(|i| format!("mine{i}"))
        .chain((0..7).map(|i| format!("other{i}")))
        .collect();
    want.sort();
    assert_eq!(names, want);
    // The entry count, kept per lane, agrees: the directory is empty only at the end.
    for n in &want {
        assert_eq!(errno(s.rmdir("/d")), libc::ENOTEMPTY);
        s.unlink(format!("/d/{n}")).unwrap();
    }
    s.rmdir("/d").unwrap();
}

/// A load reads each log page's slots up to the tail, which it finds after the last
/// non-empty slot of the last page (`meta::dir`, `tail_after`): entries before a
/// removed end, freed slots in the middle and entries made after a reload are all
/// found again, and the freed slots are reused rather than new ones taken.
#[test]
fn a_reload_reads_up_to_the_last_entry_and_reuses_freed_slots() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    for i in 0..10 {
        s.mknod(format!("/d/f{i}"), libc::S_IFREG | 0o644, 0)
            .unwrap();
    }
    for i in [2, 7, 8, 9] {
        s.unlink(format!("/d/f{i}")).unwrap();
    }
    fs.ns().drop_index();
    let listed = |s: &Session<_>| {
        let mut n: Vec<String> = s
            .readdir("/d")
            .unwrap()
            .into_iter()
            .map(|e| String::from_utf8(e.name).unwrap())
            .filter(|n| n != "." && n != "..")
            .collect();
        n.sort();
        n
    };
    assert_eq!(listed(&s), ["f0", "f1", "f3", "f4", "f5", "f6"]);
    // The freed slot 2 is taken first, then the tail's slots 6 on (7-9 were never
    // kept: they are past the last entry, so not freed slots).
    for i in 0..5 {
        s.mknod(format!("/d/g{i}"), libc::S_IFREG | 0o644, 0)
            .unwrap();
    }
    fs.ns().drop_index();
    let want = [
        "f0", "f1", "f3", "f4", "f5", "f6", "g0", "g1", "g2", "g3", "g4",
    ];
    assert_eq!(listed(&s), want);
    for n in want {
        assert!(s.lstat(format!("/d/{n}")).is_ok(), "{n}");
    }
    let end = s
        .readdir("/d")
        .unwrap()
        .into_iter()
        .map(|e| e.next)
        .max()
        .unwrap();
    assert_eq!(end, 2 + 11, "11 entries in slots 0-10, no slot left unused");
}

/// `readdir_into` with one batch kept from call to call lists what `readdir` lists,
/// entry for entry, however the listing is cut into calls.
#[test]
fn a_listing_into_a_kept_batch_is_the_listing() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    for i in 0..40 {
        s.mknod(
            format!("/d/{}", "n".repeat(1 + i % 7) + &i.to_string()),
            libc::S_IFREG | 0o644,
            0,
        )
        .unwrap();
    }
    s.unlink("/d/nnnn3").unwrap();
    let dir = s.stat("/d").unwrap().ino;
    let whole = fs.readdir(dir, 0, 1000, &Cred::root()).unwrap();
    assert_eq!(whole.len(), 2 + 39);
    for max in [1, 3, 7, 64] {
        let mut batch = lynxfs::DirBatch::new();
        let mut got = Vec::new();
        let mut off = 0;
        loop {
            fs.readdir_into(dir, off, max, &Cred::root(), &mut batch)
                .unwrap();
            assert!(batch.len() <= max);
            let Some(last) = batch.last() else { break };
            off = last.next;
            got.extend(batch.iter().map(|e| e.to_entry()));
        }
        assert_eq!(got, whole, "batches of {max}");
    }
}

/// A directory of more than 64 log pages is read into the index by two threads, each
/// half of its pages (`meta::dir`, "Directory loads" in docs/CONSISTENCY.md): every
/// name is found, none removed is, the freed slots of both halves are reused by the
/// next creates (no page is added for them), and the entry count is exact.
#[test]
fn a_directory_loaded_by_two_threads_is_whole() {
    let mut o = lynxfs::MkfsOptions::new(96 << 20);
    o.lanes = 2;
    o.inodes = Some(40_000);
    let fs = lynxfs::Fs::in_memory(&o, lynxfs::pmem::PmemBackend::default()).unwrap();
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    // 70 pages of 504 slots.
    let n = 70 * 504;
    let name = |i: usize| format!("/d/f{i}");
    for i in 0..n {
        s.mknod(name(i), libc::S_IFREG | 0o644, 0).unwrap();
    }
    let gone = |i: usize| i % 10 == 3;
    for i in (0..n).filter(|&i| gone(i)) {
        s.unlink(name(i)).unwrap();
    }
    fs.ns().drop_index();
    for i in 0..n {
        match gone(i) {
            true => assert_eq!(errno(s.lstat(name(i))), libc::ENOENT, "{i}"),
            false => assert!(s.lstat(name(i)).is_ok(), "{i}"),
        }
    }
    let free = fs.ns().statfs().blocks_free;
    for i in (0..n).filter(|&i| gone(i)) {
        s.mknod(format!("/d/g{i}"), libc::S_IFREG | 0o644, 0)
            .unwrap();
    }
    assert_eq!(fs.ns().statfs().blocks_free, free, "a page was added");
    for i in 0..n {
        assert_eq!(errno(s.rmdir("/d")), libc::ENOTEMPTY);
        let (a, b) = (name(i), format!("/d/g{i}"));
        s.unlink(if gone(i) { b } else { a }).unwrap();
    }
    s.rmdir("/d").unwrap();
}

/// A thread creating in one directory, then another, and back (`tar x`, `cp -r`)
/// takes one new slot at a time: only a thread that stays in a directory takes the
/// rest of a log line ahead, so going back and forth leaves no empty slots behind.
#[test]
fn creates_going_between_directories_leave_no_slots_unused() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/a", 0o755).unwrap();
    s.mkdir("/b", 0o755).unwrap();
    for i in 0..20 {
        for d in ["a", "b"] {
            fs.close_fd(s.create(format!("/{d}/f{i}"), 0o644).unwrap())
                .unwrap();
        }
    }
    for d in ["/a", "/b"] {
        let ino = s.stat(d).unwrap().ino;
        let tail = fs
            .ns()
            .cachelets
            .get(ino)
            .tail()
            .load(std::sync::atomic::Ordering::Acquire);
        assert_eq!(tail % 4096, 20, "{d}: slots used up to the tail");
    }
}

#[test]
fn closing_the_pool_frees_files_unlinked_while_open() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("pool");
    let mut o = lynxfs::MkfsOptions::new(16 << 20);
    o.lanes = 2;
    lynxfs::Pool::mkfs(&p, &o, lynxfs::pmem::PmemBackend::default()).unwrap();
    let free = {
        let fs = lynxfs::Fs::open(&p).unwrap();
        let s = fs.session(Cred::root());
        s.mkdir("/warm", 0o755).unwrap();
        let free = fs.pool().alloc.blocks.free_count();
        let fd = s.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        fs.write(fd, &vec![1u8; 50_000]).unwrap();
        s.unlink("/f").unwrap();
        fs.close().unwrap(); // with the handle still open
        free
    };
    let fs = lynxfs::Fs::open(&p).unwrap();
    assert!(fs.pool().was_clean);
    assert_eq!(fs.pool().alloc.blocks.free_count(), free);
    let rep = lynxfs::fsck::check(fs.pool());
    assert!(rep.is_clean(), "{:?}", rep.problems);
}

#[test]
fn times_keep_every_instant_linux_allows() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    let fd = s.create("/t", 0o644).unwrap();
    let at = |sec, nsec| Timestamp::new(sec, nsec).unwrap();
    for (a, m) in [
        (at(-315_619_200, 0), at(-1, 500_000_000)),
        (at(i64::from(i32::MIN), 1), at(18_446_744_074, 9)),
        (at(i64::MIN, 0), at(i64::MAX, 999_999_999)),
        (at(1_700_000_000, 3), at(-5, 0)),
    ] {
        s.utimens("/t", Some(TimeSet::At(a)), Some(TimeSet::At(m)))
            .unwrap();
        let st = s.stat("/t").unwrap();
        assert_eq!((st.atime, st.mtime), (a, m));
    }
    // Only one of the two changes: the other keeps its extended value.
    s.utimens("/t", None, Some(TimeSet::At(at(7, 7)))).unwrap();
    assert_eq!(s.stat("/t").unwrap().atime, at(1_700_000_000, 3));
    s.utimens("/t", Some(TimeSet::At(at(-9, 9))), None).unwrap();
    assert_eq!(s.stat("/t").unwrap().mtime, at(7, 7));
    // A write stores the clock's mtime: an old extended one is gone.
    s.utimens("/t", None, Some(TimeSet::At(at(-9, 9)))).unwrap();
    fs.pwrite(fd, b"x", 0).unwrap();
    let st = s.stat("/t").unwrap();
    assert!(st.mtime > at(1_700_000_000, 0), "{:?}", st.mtime);
    assert_eq!(st.atime, at(-9, 9));
    fs.close_fd(fd).unwrap();
}

/// O_TMPFILE: an unnamed file, freed at its last close unless a link names it;
/// O_EXCL makes it unlinkable; read-only is refused.
#[test]
fn tmpfiles_are_freed_at_close_unless_linked() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    let dir = s.stat("/d").unwrap().ino;
    let inodes0 = fs.pool().alloc.inodes.free_count();
    let root = Cred::root();
    let fd = fs.open_tmpfile(dir, (0o600, 0), RW, &root).unwrap().fd;
    fs.write(fd, b"scratch").unwrap();
    let st = fs.fstat(fd).unwrap();
    assert_eq!((st.nlink, st.size, st.mode & 0o7777), (0, 7, 0o600));
    assert_eq!(fs.pool().alloc.inodes.free_count(), inodes0 - 1);
    fs.close_fd(fd).unwrap();
    assert_eq!(
        fs.pool().alloc.inodes.free_count(),
        inodes0,
        "freed at close"
    );

    let fd = fs.open_tmpfile(dir, (0o644, 0), RW, &root).unwrap().fd;
    fs.write(fd, b"kept").unwrap();
    let ino = fs.fstat(fd).unwrap().ino;
    fs.ns().link(ino, dir, b"named", &root).unwrap();
    fs.close_fd(fd).unwrap();
    let st = s.stat("/d/named").unwrap();
    assert_eq!((st.ino, st.nlink, st.size), (ino, 1, 4));

    let fd = fs
        .open_tmpfile(dir, (0o600, 0), RW | libc::O_EXCL, &root)
        .unwrap()
        .fd;
    let ino = fs.fstat(fd).unwrap().ino;
    assert_eq!(errno(fs.ns().link(ino, dir, b"never", &root)), libc::ENOENT);
    fs.close_fd(fd).unwrap();
    assert_eq!(errno(s.stat("/d/never")), libc::ENOENT);
    assert_eq!(
        errno(fs.open_tmpfile(dir, (0o600, 0), libc::O_RDONLY, &root)),
        libc::EINVAL
    );
    assert_eq!(fs.pool().alloc.inodes.free_count(), inodes0 - 1);
    let rep = lynxfs::fsck::check(fs.pool());
    assert!(rep.is_clean(), "{:?}", rep.problems);
}

/// A create changes its parent's mtime and ctime for whoever looked at them: a stat of
/// the directory, a create in it, another stat shows later times, however quickly
/// they follow one another (creates within one clock tick may leave the times alone,
/// docs/CONSISTENCY.md "The parent's times", but never after a stat saw them).
#[test]
fn a_create_changes_the_parents_times_for_whoever_looked() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    for i in 0..300 {
        let before = s.stat("/d").unwrap();
        let name = format!("/d/n{i}");
        match i % 4 {
            0 => fs.close_fd(s.create(&name, 0o644).unwrap()).unwrap(),
            1 => {
                // Two creates between the stats: the first one changes the times.
                fs.close_fd(s.create(&name, 0o644).unwrap()).unwrap();
                fs.close_fd(s.create(format!("{name}b"), 0o644).unwrap())
                    .unwrap();
            }
            2 => s.mkdir(&name, 0o755).unwrap(),
            _ => s.symlink("target", &name).unwrap(),
        }
        let after = s.stat("/d").unwrap();
        assert!(
            after.mtime > before.mtime && after.ctime > before.ctime,
            "create {i}: {before:?} then {after:?}"
        );
    }
}

/// Whoever stats a directory sees its mtime and ctime change after a removal in it,
/// however closely they follow one another (as for creates, above).
#[test]
fn a_removal_changes_the_parents_times_for_whoever_looked() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    for i in 0..300 {
        let name = format!("/d/n{i}");
        if i % 3 == 2 {
            s.mkdir(&name, 0o755).unwrap();
        } else {
            fs.close_fd(s.create(&name, 0o644).unwrap()).unwrap();
            fs.close_fd(s.create(format!("{name}b"), 0o644).unwrap())
                .unwrap();
        }
        let before = s.stat("/d").unwrap();
        match i % 3 {
            0 => s.unlink(&name).unwrap(),
            1 => {
                // Two unlinks between the stats: the first one changes the times.
                s.unlink(&name).unwrap();
                s.unlink(format!("{name}b")).unwrap();
            }
            _ => s.rmdir(&name).unwrap(),
        }
        let after = s.stat("/d").unwrap();
        assert!(
            after.mtime > before.mtime && after.ctime > before.ctime,
            "removal {i}: {before:?} then {after:?}"
        );
    }
}

/// Creates within one clock tick store the parent's times once: the first create of
/// the tick stores, flushes and fences them with its own commit; the next ones store
/// nothing into the parent's inode and leave that durable value. Without a tick
/// shared by two creates in 200 tries (a tick is a few milliseconds, a create a few
/// microseconds) the test fails too.
#[test]
fn creates_in_one_tick_store_the_parents_times_once_and_durably() {
    parent_times_once_per_tick(
        |_, _, _| {},
        |fs, s, i| {
            fs.close_fd(s.create(format!("/d/a{i}"), 0o644).unwrap())
                .unwrap()
        },
        |fs, s, i| {
            fs.close_fd(s.create(format!("/d/b{i}"), 0o644).unwrap())
                .unwrap()
        },
    );
}

/// The files `/d/a{i}`, `/d/b{i}` and the directory `/d/c{i}` (round `i`'s names).
fn two_files_and_a_directory(fs: &Recorded, s: &Session<'_, RecordingBackend>, i: usize) {
    for n in ["a", "b"] {
        fs.close_fd(s.create(format!("/d/{n}{i}"), 0o644).unwrap())
            .unwrap();
    }
    s.mkdir(format!("/d/c{i}"), 0o755).unwrap();
}

/// Unlinks follow the same rule (docs/CONSISTENCY.md "The parent's times"): the first
/// removal after a stat stores and fences the parent's times, a second one in the same
/// tick stores nothing into the parent's inode; an rmdir stores them (it changes the
/// link count in that line) and an unlink after it in its tick may leave them.
#[test]
fn unlinks_in_one_tick_store_the_parents_times_once_and_durably() {
    parent_times_once_per_tick(
        two_files_and_a_directory,
        |_, s, i| {
            if i % 2 == 0 {
                s.unlink(format!("/d/a{i}")).unwrap();
                s.rmdir(format!("/d/c{i}")).unwrap();
            } else {
                s.rmdir(format!("/d/c{i}")).unwrap();
                s.unlink(format!("/d/a{i}")).unwrap();
            }
        },
        |_, s, i| s.unlink(format!("/d/b{i}")).unwrap(),
    );
}

/// Renames within one directory (issue 29): the first after a stat stores the
/// parent's times durably, a second in its tick may leave them alone; a directory
/// renamed within it changes no link count and is no different.
#[test]
fn renames_in_one_tick_store_the_parents_times_once_and_durably() {
    parent_times_once_per_tick(
        two_files_and_a_directory,
        |_, s, i| s.rename(format!("/d/a{i}"), format!("/d/x{i}"), 0).unwrap(),
        |_, s, i| {
            s.rename(format!("/d/c{i}"), format!("/d/y{i}"), 0).unwrap();
            s.rename(format!("/d/b{i}"), format!("/d/z{i}"), 0).unwrap();
        },
    );
}

/// 200 times: `setup`, a stat of `/d`, `first` (which must store, flush and fence the
/// parent's mtime and ctime, changing them) and `second`, which may leave them alone
/// (and must, at least once: two operations share a clock tick now and then).
fn parent_times_once_per_tick(
    setup: impl Fn(&Recorded, &Session<'_, RecordingBackend>, usize),
    first: impl Fn(&Recorded, &Session<'_, RecordingBackend>, usize),
    second: impl Fn(&Recorded, &Session<'_, RecordingBackend>, usize),
) {
    use lynxfs::format::inode;
    use lynxfs::pmem::Event;
    let rec = RecordingBackend::new();
    let mut o = lynxfs::MkfsOptions::new(16 << 20);
    o.lanes = 1;
    let fs = lynxfs::Fs::in_memory(&o, rec.clone()).unwrap();
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    let at = fs.ns().pool.layout.inode_addr(s.stat("/d").unwrap().ino);
    let times = at + inode::MTIME..at + inode::CTIME + 8;
    let pm = &fs.ns().pool.pm;
    let raw = || (pm.load_u64(times.start), pm.load_u64(at + inode::CTIME));
    let touches = |ev: &[Event]| {
        ev.iter().position(|e| match e {
            Event::Store { off, bytes } => {
                *off < times.end && off + bytes.len() as u64 > times.start
            }
            _ => false,
        })
    };
    let mut left_alone = 0;
    for i in 0..200 {
        setup(&fs, &s, i);
        // A stat first: the first operation after it must store the times.
        s.stat("/d").unwrap();
        let seen = raw();
        rec.take();
        first(&fs, &s, i);
        let first = rec.take();
        let mid = raw();
        second(&fs, &s, i);
        let second = rec.take();
        let stored = touches(&first).expect("the first operation after a stat stores the times");
        // Each word is flushed after its store, and a fence follows both flushes.
        let flushed = [times.start, at + inode::CTIME].map(|w| {
            first[stored..]
                .iter()
                .position(
                    |e| matches!(e, Event::Flush { off, len } if *off <= w && off + len >= w + 8),
                )
                .unwrap_or_else(|| panic!("round {i}: the parent time at {w} is flushed"))
        });
        let flushed = stored + flushed.into_iter().max().unwrap_or(0);
        assert!(
            first[flushed..].contains(&Event::Fence),
            "round {i}: the parent's times are fenced with the operation"
        );
        assert!(mid.0 > seen.0 && mid.1 > seen.1, "round {i}");
        match touches(&second) {
            None => {
                left_alone += 1;
                assert_eq!(raw(), mid, "round {i}: times left alone");
            }
            Some(_) => assert!(raw().0 >= mid.0, "round {i}"),
        }
    }
    assert!(
        left_alone > 0,
        "no two operations shared a tick in 200 tries"
    );
}

/// The engine over a recording backend, as [`parent_times_once_per_tick`] makes it.
type Recorded = lynxfs::Fs<RecordingBackend>;
