//! ADAM's full-path areas (`meta::areas`): every path resolves as the component walk
//! resolves it, whatever the areas learnt before a rename, rmdir, chmod, chown, ACL or
//! flag change, with symlinks, `..` and hard links in the way, and while evolution
//! reshapes the areas under lookups of other threads.
//!
//! Each check resolves with the areas on (after they learnt the paths) and compares
//! with the walk (areas off) on the same pool.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{errno, fs};
use lynxfs::meta::acl::{GROUP_OBJ, MASK, OTHER, USER, USER_OBJ};
use lynxfs::meta::areas::Thresholds;
use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs};

type LFs = Fs<PmemBackend>;

fn user() -> Cred {
    Cred::user(1000, 1000)
}

/// What stat (or lstat) of `p` gives as `cred`: the inode or the errno.
fn stat(fs: &LFs, cred: &Cred, p: &str, follow: bool) -> Result<u64, i32> {
    let s = fs.session(cred.clone());
    let r = if follow { s.stat(p) } else { s.lstat(p) };
    r.map(|st| st.ino).map_err(|e| e.errno())
}

/// `p` resolved with the areas on, asked twice (the first may learn), checked against
/// the component walk.
fn both(fs: &LFs, cred: &Cred, p: &str, follow: bool) -> Result<u64, i32> {
    let m = &fs.ns().mechanisms;
    m.set_areas(true);
    let _ = stat(fs, cred, p, follow);
    let with = stat(fs, cred, p, follow);
    m.set_areas(false);
    let walk = stat(fs, cred, p, follow);
    m.set_areas(true);
    assert_eq!(with, walk, "{p} as uid {}", cred.uid);
    with
}

fn mkdirs(fs: &LFs, p: &str) {
    let s = fs.session(Cred::root());
    let mut at = String::new();
    for c in p.split('/').filter(|c| !c.is_empty()) {
        at.push('/');
        at.push_str(c);
        match s.mkdir(&at, 0o755) {
            Ok(()) => {}
            Err(e) if e.errno() == libc::EEXIST => {}
            Err(e) => panic!("mkdir {at}: {e}"),
        }
    }
}

fn touch(fs: &LFs, p: &str) -> u64 {
    let s = fs.session(Cred::root());
    fs.close_fd(s.create(p, 0o644).unwrap()).unwrap();
    s.stat(p).unwrap().ino
}

fn areas_on(fs: &LFs) {
    fs.ns().mechanisms.set_areas(true);
}

/// How many directories this process's areas know.
fn known(fs: &LFs) -> usize {
    fs.ns()
        .areas
        .summary()
        .areas
        .iter()
        .map(|a| a.entries)
        .sum()
}

/// Splits every directory the areas know into an area of its own, wherever it was read
/// (every directory is large, any read makes it hot).
fn split_all() -> Thresholds {
    Thresholds {
        large: 0,
        small: 0,
        strong_percent: 101,
        read_often: 0,
        cold_reads: 0,
    }
}

/// Folds every unread area back.
fn merge_all() -> Thresholds {
    Thresholds {
        large: usize::MAX,
        small: usize::MAX,
        strong_percent: 101,
        read_often: u64::MAX,
        cold_reads: u64::MAX,
    }
}

/// Passes every area's root on to its most read large subdirectory.
fn inherit_all() -> Thresholds {
    Thresholds {
        large: 0,
        small: 0,
        strong_percent: 0,
        read_often: 0,
        cold_reads: 0,
    }
}

#[test]
fn a_deep_path_is_answered_by_the_areas() {
    let fs = fs(16 << 20);
    mkdirs(&fs, "/a/b/c/d/e/f/g/h");
    let f = touch(&fs, "/a/b/c/d/e/f/g/h/file");
    areas_on(&fs);
    assert_eq!(
        both(&fs, &Cred::root(), "/a/b/c/d/e/f/g/h/file", true),
        Ok(f)
    );
    assert!(
        known(&fs) >= 8,
        "the areas learnt {} directories",
        known(&fs)
    );
}

#[test]
fn a_renamed_directory_is_not_found_under_its_old_name() {
    let fs = fs(16 << 20);
    mkdirs(&fs, "/a/b/c/d");
    let f = touch(&fs, "/a/b/c/d/f");
    areas_on(&fs);
    let root = Cred::root();
    assert_eq!(both(&fs, &root, "/a/b/c/d/f", true), Ok(f));
    // A non-root directory in the middle.
    fs.session(root.clone()).rename("/a/b", "/a/x", 0).unwrap();
    assert_eq!(stat(&fs, &root, "/a/b/c/d/f", true), Err(libc::ENOENT));
    assert_eq!(both(&fs, &root, "/a/x/c/d/f", true), Ok(f));
    // An area root: split every directory into its own area first.
    fs.ns().areas.evolve(&split_all());
    assert!(fs.ns().areas.summary().areas.len() > 1);
    assert_eq!(both(&fs, &root, "/a/x/c/d/f", true), Ok(f));
    fs.session(root.clone()).rename("/a/x/c", "/c2", 0).unwrap();
    assert_eq!(stat(&fs, &root, "/a/x/c/d/f", true), Err(libc::ENOENT));
    assert_eq!(both(&fs, &root, "/c2/d/f", true), Ok(f));
    // Replaced by another directory under the same name.
    mkdirs(&fs, "/a/x/c/d");
    let g = touch(&fs, "/a/x/c/d/f");
    assert_eq!(both(&fs, &root, "/a/x/c/d/f", true), Ok(g));
    // Exchanged.
    fs.session(root.clone())
        .rename("/a/x/c", "/c2", libc::RENAME_EXCHANGE)
        .unwrap();
    assert_eq!(both(&fs, &root, "/a/x/c/d/f", true), Ok(f));
    assert_eq!(both(&fs, &root, "/c2/d/f", true), Ok(g));
}

#[test]
fn a_removed_directory_and_its_replacement() {
    let fs = fs(16 << 20);
    mkdirs(&fs, "/a/b/c");
    areas_on(&fs);
    let root = Cred::root();
    let f = touch(&fs, "/a/b/c/f");
    assert_eq!(both(&fs, &root, "/a/b/c/f", true), Ok(f));
    let s = fs.session(root.clone());
    s.unlink("/a/b/c/f").unwrap();
    s.rmdir("/a/b/c").unwrap();
    assert_eq!(stat(&fs, &root, "/a/b/c/f", true), Err(libc::ENOENT));
    assert_eq!(stat(&fs, &root, "/a/b/c", true), Err(libc::ENOENT));
    // The removed directory's number goes to another directory first.
    mkdirs(&fs, "/other");
    let elsewhere = touch(&fs, "/other/f");
    assert_eq!(both(&fs, &root, "/a/b/c/f", true), Err(libc::ENOENT));
    mkdirs(&fs, "/a/b/c");
    let g = touch(&fs, "/a/b/c/f");
    assert_eq!(both(&fs, &root, "/a/b/c/f", true), Ok(g));
    assert_ne!(g, elsewhere);
    // A directory removed while it is the working directory.
    let mut s = fs.session(root.clone());
    s.chdir("/a/b/c").unwrap();
    assert_eq!(s.stat("f").unwrap().ino, g);
    let other = fs.session(root.clone());
    other.unlink("/a/b/c/f").unwrap();
    other.rmdir("/a/b/c").unwrap();
    assert_eq!(s.stat("f").map_err(|e| e.errno()), Err(libc::ENOENT));
    assert_eq!(both(&fs, &root, "/a/b/c/f", true), Err(libc::ENOENT));
}

#[test]
fn a_middle_directory_that_denies_search_gives_eacces_after_the_areas_learnt_it() {
    let fs = fs(16 << 20);
    mkdirs(&fs, "/a/b/c/d");
    let f = touch(&fs, "/a/b/c/d/f");
    areas_on(&fs);
    let (root, u) = (Cred::root(), user());
    let p = "/a/b/c/d/f";
    assert_eq!(both(&fs, &u, p, true), Ok(f));
    let s = fs.session(root.clone());
    s.chmod("/a/b", 0o700).unwrap();
    assert_eq!(both(&fs, &u, p, true), Err(libc::EACCES));
    assert_eq!(both(&fs, &root, p, true), Ok(f));
    // The owner searches it again.
    s.chown("/a/b", Some(1000), None).unwrap();
    assert_eq!(both(&fs, &u, p, true), Ok(f));
    s.chown("/a/b", Some(0), None).unwrap();
    assert_eq!(both(&fs, &u, p, true), Err(libc::EACCES));
    // An ACL entry grants it, and removing it takes it away.
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (USER_OBJ, 7u16, u32::MAX),
        (USER, 1, 1000),
        (GROUP_OBJ, 0, u32::MAX),
        (MASK, 1, u32::MAX),
        (OTHER, 0, u32::MAX),
    ] {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    s.setxattr("/a/b", "system.posix_acl_access", &v, 0)
        .unwrap();
    assert_eq!(both(&fs, &u, p, true), Ok(f));
    s.removexattr("/a/b", "system.posix_acl_access").unwrap();
    assert_eq!(both(&fs, &u, p, true), Err(libc::EACCES));
    s.chmod("/a/b", 0o755).unwrap();
    assert_eq!(both(&fs, &u, p, true), Ok(f));
    // The deepest directory crossed.
    s.chmod("/a/b/c/d", 0o600).unwrap();
    assert_eq!(both(&fs, &u, p, true), Err(libc::EACCES));
}

#[test]
fn symlinks_dots_and_hard_links_resolve_as_the_walk() {
    let fs = fs(16 << 20);
    mkdirs(&fs, "/a/b/c/d");
    mkdirs(&fs, "/x/y");
    let f = touch(&fs, "/a/b/c/d/f");
    let s = fs.session(Cred::root());
    s.symlink("c/d", "/a/b/lnk").unwrap();
    s.symlink("/a/b", "/x/y/abs").unwrap();
    s.symlink("../..", "/a/b/c/up").unwrap();
    s.link("/a/b/c/d/f", "/x/y/hard").unwrap();
    areas_on(&fs);
    let paths = [
        "/a/b/lnk/f",
        "/a/b/lnk/../d/f",
        "/a/b/c/d/../d/f",
        "/a/b/c/./d/f",
        "/a//b/c//d/f",
        "/x/y/abs/c/d/f",
        "/x/y/abs/lnk/f",
        "/a/b/c/up/b/c/d/f",
        "/a/b/c/d/f/g",
        "/x/y/hard",
        "/a/b/c/d/nothing",
        "/a/b/nothing/d/f",
        "/a/b/c/d/f/",
    ];
    for cred in [Cred::root(), user()] {
        for p in paths {
            for follow in [true, false] {
                both(&fs, &cred, p, follow).ok();
            }
        }
    }
    assert_eq!(both(&fs, &Cred::root(), "/x/y/hard", true), Ok(f));
    // A symlink put where a directory the areas know was.
    s.rename("/a/b/c", "/a/b/c.old", 0).unwrap();
    s.symlink("/x", "/a/b/c").unwrap();
    assert_eq!(
        both(&fs, &Cred::root(), "/a/b/c/d/f", true),
        Err(libc::ENOENT)
    );
    assert!(both(&fs, &Cred::root(), "/a/b/c/y/hard", true).is_ok());
}

#[test]
fn mounted_scope_exits_are_the_walks() {
    let fs = fs(16 << 20);
    mkdirs(&fs, "/a/b/c");
    areas_on(&fs);
    let s = fs.session(Cred::root()).mounted();
    touch(&fs, "/a/b/c/f");
    assert!(s.stat("a/b/c/f").is_ok());
    assert!(s.stat("a/b/c/f").is_ok());
    match s.stat("a/b/../../../etc/passwd") {
        Err(lynxfs::Error::Outside(rest)) => assert_eq!(rest, b"../etc/passwd"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn evolution_keeps_every_answer() {
    let fs = fs(32 << 20);
    let mut files = Vec::new();
    for i in 0..4 {
        for j in 0..4 {
            mkdirs(&fs, &format!("/t/{i}/{j}/deep/er"));
            files.push((
                format!("/t/{i}/{j}/deep/er/f"),
                touch(&fs, &format!("/t/{i}/{j}/deep/er/f")),
            ));
        }
    }
    areas_on(&fs);
    fs.ns().mechanisms.set_evolution(true);
    let root = Cred::root();
    let check = |fs: &LFs| {
        for (p, ino) in &files {
            assert_eq!(both(fs, &root, p, true), Ok(*ino), "{p}");
        }
    };
    check(&fs);
    let a = &fs.ns().areas;
    for th in [
        split_all(),
        inherit_all(),
        merge_all(),
        split_all(),
        merge_all(),
    ] {
        a.evolve(&th);
        check(&fs);
        check(&fs);
    }
    let r = a.summary().rounds;
    assert!(r.splits > 0 && r.merges > 0, "{r:?}");
}

/// Threads stat fixed deep paths, rename directories back and forth (each checking
/// its own rename right after), and remove and make directories, while another
/// thread forces evolution rounds: no stat misses a name that is there, none finds
/// one that is not.
#[test]
fn lookups_racing_renames_removals_and_evolution() {
    let fs = Arc::new(fs(64 << 20));
    mkdirs(&fs, "/s/1/2/3/4/5/6");
    let fixed = touch(&fs, "/s/1/2/3/4/5/6/f");
    mkdirs(&fs, "/m/A/x/y");
    let moving = touch(&fs, "/m/A/x/y/f");
    mkdirs(&fs, "/r");
    areas_on(&fs);
    fs.ns().mechanisms.set_evolution(true);
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut threads = Vec::new();
    for _ in 0..2 {
        let (fs, stop) = (fs.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let root = Cred::root();
            while !stop.load(Ordering::Relaxed) {
                assert_eq!(stat(&fs, &root, "/s/1/2/3/4/5/6/f", true), Ok(fixed));
                // Under one name or the other, and the file itself either way.
                for p in ["/m/A/x/y/f", "/m/B/x/y/f"] {
                    match stat(&fs, &root, p, true) {
                        Ok(ino) => assert_eq!(ino, moving),
                        Err(e) => assert_eq!(e, libc::ENOENT),
                    }
                }
            }
        }));
    }
    {
        let (fs, stop) = (fs.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let root = Cred::root();
            let s = fs.session(root.clone());
            let mut names = ("/m/A", "/m/B");
            while !stop.load(Ordering::Relaxed) {
                s.rename(names.0, names.1, 0).unwrap();
                let old = format!("{}/x/y/f", names.0);
                let new = format!("{}/x/y/f", names.1);
                assert_eq!(stat(&fs, &root, &old, true), Err(libc::ENOENT));
                assert_eq!(stat(&fs, &root, &new, true), Ok(moving));
                names = (names.1, names.0);
            }
        }));
    }
    {
        let (fs, stop) = (fs.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let root = Cred::root();
            let s = fs.session(root.clone());
            while !stop.load(Ordering::Relaxed) {
                s.mkdir("/r/d", 0o755).unwrap();
                s.mkdir("/r/d/e", 0o755).unwrap();
                let f = touch(&fs, "/r/d/e/f");
                assert_eq!(stat(&fs, &root, "/r/d/e/f", true), Ok(f));
                s.unlink("/r/d/e/f").unwrap();
                s.rmdir("/r/d/e").unwrap();
                assert_eq!(stat(&fs, &root, "/r/d/e/f", true), Err(libc::ENOENT));
                s.rmdir("/r/d").unwrap();
                assert_eq!(stat(&fs, &root, "/r/d/e", true), Err(libc::ENOENT));
            }
        }));
    }
    {
        let (fs, stop) = (fs.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let a = &fs.ns().areas;
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let th = [split_all(), inherit_all(), merge_all()][i as usize % 3];
                a.evolve(&th);
                i += 1;
            }
        }));
    }
    while Instant::now() < deadline && !threads.iter().any(|t| t.is_finished()) {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a thread saw a wrong answer");
    }
    let r = fs.ns().areas.summary().rounds;
    assert!(r.splits + r.inherits + r.merges > 0, "{r:?}");
}

#[test]
fn evolution_runs_in_the_background() {
    let fs = fs(16 << 20);
    mkdirs(&fs, "/a/b/c/d");
    for i in 0..80 {
        mkdirs(&fs, &format!("/a/b/c/d/{i}/x"));
    }
    touch(&fs, "/a/b/c/d/f");
    areas_on(&fs);
    fs.ns().mechanisms.set_evolution(true);
    fs.ns()
        .areas
        .set_evolution_interval(Duration::from_millis(10));
    let root = Cred::root();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for i in 0..80 {
            stat(&fs, &root, &format!("/a/b/c/d/{i}/x"), true).unwrap();
        }
        for _ in 0..50 {
            stat(&fs, &root, "/a/b/c/d/f", true).unwrap();
        }
        let s = fs.ns().areas.summary();
        if s.rounds.splits + s.rounds.inherits > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no split in 20 s: {s:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(fs.ns().areas.summary().areas.len() > 1);
    assert!(errno(fs.session(root).stat("/a/b/c/d/nothing")) == libc::ENOENT);
}

#[test]
fn relative_paths_from_a_working_directory_get_an_area_of_their_own() {
    let fs = fs(16 << 20);
    mkdirs(&fs, "/w/a/b/c");
    let f = touch(&fs, "/w/a/b/c/f");
    areas_on(&fs);
    let root = Cred::root();
    let mut s = fs.session(root.clone());
    s.chdir("/w").unwrap();
    let w = fs.session(root.clone()).stat("/w").unwrap().ino;
    assert_eq!(s.stat("a/b/c/f").unwrap().ino, f);
    assert_eq!(s.stat("a/b/c/f").unwrap().ino, f);
    let summary = fs.ns().areas.summary();
    assert!(
        summary.areas.iter().any(|a| a.root == w && a.entries >= 3),
        "{summary:?}"
    );
    fs.session(root.clone())
        .rename("/w/a/b", "/w/a/x", 0)
        .unwrap();
    assert_eq!(s.stat("a/b/c/f").map_err(|e| e.errno()), Err(libc::ENOENT));
    assert_eq!(s.stat("a/x/c/f").unwrap().ino, f);
}
