//! Holds: inode numbers handed outside the engine (FUSE lookup counts) keep their
//! inode, as an open handle does, until forgotten.

use crate::common;

use common::{errno, fs};
use lynxfs::format::ROOT_INO;
use lynxfs::Cred;

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR | libc::O_EXCL;

#[test]
fn a_held_inode_outlives_its_last_name_and_its_number_is_not_reused() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    let fd = s.open("/f", CREAT, 0o644).unwrap();
    fs.pwrite(fd, b"old file", 0).unwrap();
    fs.close_fd(fd).unwrap();
    let st = fs.lookup_hold(ROOT_INO, b"f", &Cred::root()).unwrap();
    let ino = st.ino;
    assert_eq!(fs.held_count(ino), 1);
    s.unlink("/f").unwrap();

    // The orphan is still there for whoever holds its number.
    let orphan = fs.ns().getattr(ino).expect("a held orphan stays");
    assert_eq!((orphan.nlink, orphan.size), (0, 8));
    // New files never get its number while it is held.
    for i in 0..64 {
        let fd = s.open(format!("/n{i}"), CREAT, 0o644).unwrap();
        assert_ne!(fs.fd_ino(fd).unwrap(), ino, "a held number was reused");
        fs.close_fd(fd).unwrap();
    }
    fs.forget(ino, 1);
    assert_eq!(fs.held_count(ino), 0);
    assert_eq!(
        errno(fs.ns().getattr(ino)),
        libc::ENOENT,
        "freed at the last forget"
    );
}

#[test]
fn counts_add_up_and_forget_all_frees_orphans() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    fs.close_fd(s.open("/f", CREAT, 0o644).unwrap()).unwrap();
    let ino = fs.lookup_hold(ROOT_INO, b"f", &Cred::root()).unwrap().ino;
    fs.hold(ino).unwrap();
    fs.hold(ino).unwrap();
    assert_eq!(fs.held_count(ino), 3);
    s.unlink("/f").unwrap();
    fs.forget(ino, 2);
    assert!(fs.ns().getattr(ino).is_ok(), "one hold left");
    fs.forget_all();
    assert_eq!(errno(fs.ns().getattr(ino)), libc::ENOENT);
    // Forgetting what is not held changes nothing.
    fs.forget(ino, 5);
    assert_eq!(fs.held_count(ino), 0);
}

#[test]
fn hold_refuses_a_freed_number_and_lookup_hold_follows_the_name() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    fs.close_fd(s.open("/a", CREAT, 0o644).unwrap()).unwrap();
    let a = s.stat("/a").unwrap().ino;
    s.unlink("/a").unwrap();
    assert_eq!(
        errno(fs.hold(a)),
        libc::ENOENT,
        "a freed inode cannot be held"
    );
    fs.close_fd(s.open("/b", CREAT, 0o644).unwrap()).unwrap();
    s.rename("/b", "/a", 0).unwrap();
    let st = fs.lookup_hold(ROOT_INO, b"a", &Cred::root()).unwrap();
    assert_eq!(st.ino, s.stat("/a").unwrap().ino);
    assert_eq!(
        errno(fs.lookup_hold(ROOT_INO, b"missing", &Cred::root())),
        libc::ENOENT
    );
}

#[test]
fn closing_the_pool_drops_holds_so_nothing_leaks_into_a_clean_pool() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    fs.close_fd(s.open("/f", CREAT, 0o644).unwrap()).unwrap();
    let ino = fs.lookup_hold(ROOT_INO, b"f", &Cred::root()).unwrap().ino;
    s.unlink("/f").unwrap();
    let used = fs.ns().statfs().files_free;
    fs.close().unwrap();
    assert_eq!(fs.held_count(ino), 0);
    assert_eq!(
        fs.ns().statfs().files_free,
        used + 1,
        "the orphan was freed at close"
    );
    let report = lynxfs::fsck::check(fs.pool());
    assert!(report.is_clean(), "{report:?}");
}

/// The library's sibling of the FUSE race (issue 11, item 1): a path resolved to a
/// number and then acted on by number must not act on a newer file that reused the
/// number. Renamer threads loop { create `t<n>`, write, fstat, rename over `f` } while
/// others truncate and chmod `/f`; a file that never had the name `f` must never be
/// touched, and truncate/chmod only ever succeed or say ENOENT.
#[test]
fn truncate_and_chmod_by_path_never_land_on_a_file_that_reused_the_number() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let fs = fs(64 << 20);
    let stop = AtomicBool::new(false);
    let bad = std::sync::Mutex::new(Vec::<String>::new());
    std::thread::scope(|sc| {
        for who in 0..2 {
            let (fs, bad) = (&fs, &bad);
            sc.spawn(move || {
                let s = fs.session(Cred::root());
                let end = Instant::now() + Duration::from_millis(1500);
                let mut n = 0;
                while Instant::now() < end {
                    n += 1;
                    let t = format!("/t{who}-{n}");
                    let fd = s.open(&t, CREAT, 0o644).unwrap();
                    fs.pwrite(fd, &[7u8; 1000], 0).unwrap();
                    let st = fs.fstat(fd).unwrap();
                    if st.size != 1000 || st.mode & 0o7777 != 0o644 {
                        bad.lock().unwrap().push(format!(
                            "{t} (never named f): size {} mode {:o}",
                            st.size,
                            st.mode & 0o7777
                        ));
                    }
                    fs.close_fd(fd).unwrap();
                    s.rename(&t, "/f", 0).unwrap();
                }
            });
        }
        for op in 0..3 {
            let (fs, bad, stop) = (&fs, &bad, &stop);
            sc.spawn(move || {
                let s = fs.session(Cred::root());
                while !stop.load(Ordering::Relaxed) {
                    let r = match op {
                        0 => s.truncate("/f", 0),
                        1 => s.chmod("/f", 0o600),
                        _ => s
                            .open("/f", libc::O_RDWR | libc::O_TRUNC, 0)
                            .and_then(|fd| fs.close_fd(fd)),
                    };
                    if let Err(e) = r {
                        if e.errno() != libc::ENOENT {
                            bad.lock().unwrap().push(format!("op {op} on /f: {e}"));
                        }
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(1600));
        stop.store(true, Ordering::Relaxed);
    });
    let bad = bad.into_inner().unwrap();
    assert!(
        bad.is_empty(),
        "{} failures, e.g. {:?}",
        bad.len(),
        &bad[..bad.len().min(5)]
    );
}

/// A session's working directory is held as a process's is: removed, it stays an
/// empty orphan (relative paths say ENOENT) and its number is not given to a new
/// directory that relative paths would then reach.
#[test]
fn a_removed_working_directory_keeps_its_number_until_the_session_leaves_it() {
    let fs = fs(16 << 20);
    let root = fs.session(Cred::root());
    root.mkdir("/w", 0o755).unwrap();
    let w = root.stat("/w").unwrap().ino;
    let mut s = fs.session(Cred::root());
    s.chdir("/w").unwrap();
    root.rmdir("/w").unwrap();
    for i in 0..64 {
        let d = format!("/n{i}");
        root.mkdir(&d, 0o755).unwrap();
        assert_ne!(root.stat(&d).unwrap().ino, w, "the cwd's number was reused");
    }
    assert_eq!(errno(s.open("f", CREAT, 0o644)), libc::ENOENT);
    assert_eq!(errno(s.stat("f")), libc::ENOENT);
    s.chdir("/").unwrap();
    assert_eq!(errno(fs.ns().getattr(w)), libc::ENOENT, "freed once left");
    let report = lynxfs::fsck::check(fs.pool());
    assert!(report.is_clean(), "{report:?}");
}

/// An open directory that is removed (rmdir, or a rename over it) stays usable as on
/// tmpfs: its attributes answer (nlink 0), it lists nothing (not even "." and ".."),
/// and nothing can be looked up or made in it; it is freed at the last close.
#[test]
fn an_open_removed_directory_answers_fstat_lists_nothing_and_refuses_new_names() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    s.mkdir("/e", 0o755).unwrap();
    s.mkdir("/t", 0o755).unwrap();
    fs.close_fd(s.open("/f", CREAT, 0o644).unwrap()).unwrap();
    s.mkdir("/g", 0o755).unwrap();
    let dir = libc::O_RDONLY | libc::O_DIRECTORY;
    let d_fd = s.open("/d", dir, 0).unwrap();
    let e_fd = s.open("/e", dir, 0).unwrap();
    let d = fs.fd_ino(d_fd).unwrap();
    let e = fs.fd_ino(e_fd).unwrap();
    s.rmdir("/d").unwrap();
    s.rename("/t", "/e", 0).unwrap();
    for (fd, ino) in [(d_fd, d), (e_fd, e)] {
        let st = fs
            .fstat(fd)
            .expect("a removed open directory answers fstat");
        assert_eq!((st.ino, st.nlink), (ino, 0));
        assert_eq!(st.mode & libc::S_IFMT, libc::S_IFDIR);
        assert_eq!(fs.ns().getattr(ino).unwrap().nlink, 0);
        let listed = fs.ns().readdir(ino, 0, 64, &Cred::root()).unwrap();
        assert!(listed.is_empty(), "a removed directory lists {listed:?}");
        let at = s.at(ino);
        assert_eq!(errno(at.open("x", CREAT, 0o644)), libc::ENOENT);
        assert_eq!(errno(at.mkdir("x", 0o755)), libc::ENOENT);
        assert_eq!(errno(at.symlink("t", "x")), libc::ENOENT);
        assert_eq!(errno(at.stat("x")), libc::ENOENT);
        assert_eq!(errno(at.rmdir(".")), libc::EINVAL);
        assert_eq!(at.stat(".").unwrap().nlink, 0, "\".\" names the directory");
        let mut inside = fs.session(Cred::root());
        inside
            .fchdir(ino)
            .expect("fchdir into a removed open directory");
        inside.chdir(".").expect("chdir . in a removed directory");
        assert_eq!(inside.stat(".").unwrap().ino, ino);
        assert!(inside.readdir(".").unwrap().is_empty());
        assert_eq!(errno(inside.mkdir("x", 0o755)), libc::ENOENT);
        assert_eq!(errno(at.mknod("x", libc::S_IFIFO | 0o644, 0)), libc::ENOENT);
        assert_eq!(errno(at.link("/f", "x")), libc::ENOENT);
        assert_eq!(errno(at.rename("/f", "x", 0)), libc::ENOENT);
        assert_eq!(errno(at.rename("/g", "x", 0)), libc::ENOENT);
        assert!(
            s.stat("/f").is_ok() && s.stat("/g").is_ok(),
            "nothing moved"
        );
    }
    fs.close_fd(d_fd).unwrap();
    fs.close_fd(e_fd).unwrap();
    for ino in [d, e] {
        assert_eq!(
            errno(fs.ns().getattr(ino)),
            libc::ENOENT,
            "freed at last close"
        );
    }
    let report = lynxfs::fsck::check(fs.pool());
    assert!(report.is_clean(), "{report:?}");
}

/// What ".." and new names relative to removed directories answer, step by step, on
/// the engine: each step's result ("ino of X", "nlink N", "ok", or an errno).
fn dotdot_steps_engine() -> Vec<String> {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    let dir = libc::O_RDONLY | libc::O_DIRECTORY;
    for d in ["/p", "/p/d", "/p/e", "/s", "/s/v", "/s/n"] {
        s.mkdir(d, 0o755).unwrap();
    }
    let names: Vec<(u64, &str)> = ["/", "/p", "/s"]
        .iter()
        .map(|p| (s.stat(p).unwrap().ino, *p))
        .collect();
    let name = |r: lynxfs::Result<lynxfs::Stat>| match r {
        Ok(st) => names
            .iter()
            .find(|(i, _)| *i == st.ino)
            .map_or(format!("nlink {}", st.nlink), |(_, n)| {
                format!("ino of {n}")
            }),
        Err(e) => format!("errno {}", e.errno()),
    };
    let done =
        |r: lynxfs::Result<()>| r.map_or_else(|e| format!("errno {}", e.errno()), |()| "ok".into());
    let mut out = Vec::new();
    let d = fs.fd_ino(s.open("/p/d", dir, 0).unwrap()).unwrap();
    let p_fd = s.open("/p", dir, 0).unwrap();
    s.rmdir("/p/d").unwrap();
    let at = s.at(d);
    out.push(name(at.stat("..")));
    out.push(name(at.stat("./..")));
    out.push(name(at.stat("../d")));
    out.push(name(at.stat("../..")));
    out.push(done(
        at.open("../x", CREAT, 0o644).and_then(|f| fs.close_fd(f)),
    ));
    out.push(name(s.stat("/p/x")));
    out.push(done(at.mkdir("x", 0o755)));
    out.push(done(at.mkdir("../y", 0o755)));
    out.push(done(at.mkdir("../e/z", 0o755)));
    let mut inside = fs.session(Cred::root());
    inside.fchdir(d).unwrap();
    out.push(name(inside.stat("..")));
    out.push(
        inside
            .getcwd()
            .unwrap_or_else(|e| format!("getcwd errno {}", e.errno())),
    );
    // The parent removed too while held: ".." names it (nlink 0), "../.." the root.
    // (Each step's failure shows in a later step's answer.)
    let _ = s.unlink("/p/x");
    for p in ["/p/y", "/p/e/z", "/p/e"] {
        let _ = s.rmdir(p);
    }
    out.push(done(s.rmdir("/p")));
    out.push(name(at.stat("..")));
    out.push(name(at.stat("../..")));
    out.push(done(at.mkdir("../w", 0o755)));
    fs.close_fd(p_fd).unwrap();
    // Replaced by a rename.
    let v = fs.fd_ino(s.open("/s/v", dir, 0).unwrap()).unwrap();
    s.rename("/s/n", "/s/v", 0).unwrap();
    out.push(name(s.at(v).stat("..")));
    out.push(name(s.at(v).stat("../v")));
    out
}

/// [`dotdot_steps_engine`] on tmpfs (a fresh directory in /dev/shm), with the same
/// names for the same inodes.
fn dotdot_steps_tmpfs() -> Vec<String> {
    use std::ffi::CString;
    use std::os::unix::fs::MetadataExt;
    let top = tempfile::tempdir_in("/dev/shm").unwrap();
    let t = top.path().to_str().unwrap().to_string();
    for d in ["/p", "/p/d", "/p/e", "/s", "/s/v", "/s/n"] {
        std::fs::create_dir(format!("{t}{d}")).unwrap();
    }
    let names: Vec<(u64, &str)> = ["/", "/p", "/s"]
        .iter()
        .map(|p| (std::fs::metadata(format!("{t}{p}")).unwrap().ino(), *p))
        .collect();
    let c = |p: &str| CString::new(p).unwrap();
    let open_dir = |p: &str| {
        // SAFETY: a C string we own; the descriptor is closed by the tempdir's end.
        let fd = unsafe { libc::open(c(p).as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
        assert!(fd >= 0, "open {p}");
        fd
    };
    let statat = |fd: i32, p: &str| {
        // SAFETY: all-zero is a valid `struct stat`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a C string we own and a stat buffer of the right type.
        let r = unsafe { libc::fstatat(fd, c(p).as_ptr(), &mut st, 0) };
        if r < 0 {
            return format!(
                "errno {}",
                std::io::Error::last_os_error().raw_os_error().unwrap()
            );
        }
        names
            .iter()
            .find(|(i, _)| *i == st.st_ino)
            .map_or(format!("nlink {}", st.st_nlink), |(_, n)| {
                format!("ino of {n}")
            })
    };
    let done = |r: i32| {
        if r < 0 {
            format!(
                "errno {}",
                std::io::Error::last_os_error().raw_os_error().unwrap()
            )
        } else {
            "ok".into()
        }
    };
    let mkdirat = |fd: i32, p: &str| {
        // SAFETY: a C string we own.
        done(unsafe { libc::mkdirat(fd, c(p).as_ptr(), 0o755) })
    };
    let mut out = Vec::new();
    let d = open_dir(&format!("{t}/p/d"));
    let p_fd = open_dir(&format!("{t}/p"));
    std::fs::remove_dir(format!("{t}/p/d")).unwrap();
    out.push(statat(d, ".."));
    out.push(statat(d, "./.."));
    out.push(statat(d, "../d"));
    out.push(statat(d, "../.."));
    // SAFETY: a C string we own; the descriptor is closed at once.
    let x = unsafe { libc::openat(d, c("../x").as_ptr(), CREAT, 0o644) };
    // SAFETY: closing the descriptor just opened (or -1).
    out.push(done(x.min(unsafe { libc::close(x) })));
    out.push(statat(libc::AT_FDCWD, &format!("{t}/p/x")));
    out.push(mkdirat(d, "x"));
    out.push(mkdirat(d, "../y"));
    out.push(mkdirat(d, "../e/z"));
    // The working directory's ".." (relative to the directory itself: a test may not
    // move the process's own working directory), and getcwd as Linux answers there.
    out.push(statat(d, ".."));
    out.push(format!("getcwd errno {}", libc::ENOENT));
    std::fs::remove_file(format!("{t}/p/x")).unwrap();
    for p in ["/p/y", "/p/e/z", "/p/e"] {
        std::fs::remove_dir(format!("{t}{p}")).unwrap();
    }
    out.push(done(
        std::fs::remove_dir(format!("{t}/p")).map_or(-1, |()| 0),
    ));
    out.push(statat(d, ".."));
    out.push(statat(d, "../.."));
    out.push(mkdirat(d, "../w"));
    // SAFETY: closing descriptors this function opened.
    unsafe {
        libc::close(p_fd);
        libc::close(d);
    }
    let v = open_dir(&format!("{t}/s/v"));
    std::fs::rename(format!("{t}/s/n"), format!("{t}/s/v")).unwrap();
    out.push(statat(v, ".."));
    out.push(statat(v, "../v"));
    // SAFETY: closing a descriptor this function opened.
    unsafe { libc::close(v) };
    out
}

/// Relative to a removed directory still open, ".." names the directory it was
/// removed from (even one removed since, while it is held), names are made through
/// it, nothing is made in the removed directory itself, and a removed working
/// directory has no path: step by step as on tmpfs.
#[test]
fn dot_dot_of_a_removed_directory_answers_as_on_tmpfs() {
    let engine = dotdot_steps_engine();
    let tmpfs = dotdot_steps_tmpfs();
    for (i, (e, t)) in engine.iter().zip(&tmpfs).enumerate() {
        assert_eq!(
            e, t,
            "step {i}: engine {e}, tmpfs {t}\n{engine:?}\n{tmpfs:?}"
        );
    }
    assert_eq!(engine.len(), tmpfs.len());
}
