//! Search permission on the ancestors of a deep path (issue 27's guard for areas, which
//! can answer a deep path in one probe): the same table of steps through the library,
//! a mount, the preload (`lynxfs run`) and the C API, as uid 1000 (`cloudsdk`).
//!
//! The fixtures are three chains `/s/{deny,acl,mine}/a/b/c/d/e/f/g/file` whose middle
//! directory `c` is root's and closed to others (`deny`), root's and opened to the
//! user by an ACL entry (`acl`), or the user's own and open (`mine`, which the steps
//! then chmod shut after a lookup through it succeeded, and open again). Every answer
//! must be the one POSIX gives: search permission is checked on every ancestor.
//! tests/search_perm.c takes the steps for the mount, preload and C API. Through the
//! library, another caller (root) also changes an ancestor after the user's lookup
//! through it: chmod, chown, chgrp, an ACL's removal, a move into a closed directory and
//! out of one; an answer cached for the user must follow each. The library runs both
//! with ADAM's areas off (the engine's default, which the other front ends get) and
//! on, with evolution rounds forced between the lookups and the changes. Through the C API and
//! the preload, a second process of the user's, attached to the same pool, takes search
//! away between two lookups of the first. Needs root,
//! `/dev/fuse`, `cc` and uid 1000. Every child runs within a time limit, and a watchdog
//! covers each test.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use lynxfs::meta::areas::Thresholds;
use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions, Pool, Session};
use lynxfs_fuse::mount::{mount_background, MountOptions};
use lynxfs_test_support::built;
use lynxfs_test_support::child::run_bounded;
use lynxfs_test_support::watchdog;

/// The user the steps run as.
const USER: u32 = 1000;
/// How long one build or run may take.
const LIMIT: Duration = Duration::from_secs(120);
/// How long a whole test may run (the nested build included).
const TEST_LIMIT: Duration = Duration::from_secs(900);

/// The chains' middle directories and the file eight levels down each.
const DENY: &str = "/s/deny/a/b/c";
const ACL: &str = "/s/acl/a/b/c";
const MINE: &str = "/s/mine/a/b/c";
const BELOW: &str = "/d/e/f/g/file";

/// What each step must print, on every front end.
const EXPECTED: &[(&str, &str)] = &[
    ("stat below a directory it may not search", "EACCES"),
    ("open below a directory it may not search", "EACCES"),
    ("stat the directory it may not search", "0"),
    ("stat through it and out by ..", "EACCES"),
    ("stat below a directory an ACL lets it search", "0"),
    ("open below a directory an ACL lets it search", "0"),
    ("stat below its own directory", "0"),
    ("open below its own directory", "0"),
    ("stat below it again", "0"),
    ("chmod its directory 0600", "0"),
    ("stat below it after the chmod", "EACCES"),
    ("open below it after the chmod", "EACCES"),
    ("chmod its directory 0700", "0"),
    ("stat below it after the chmod back", "0"),
];

fn expected() -> String {
    let mut s: String = EXPECTED
        .iter()
        .map(|(k, v)| format!("{k}: {v}\n"))
        .collect();
    s.push_str("== end\n");
    s
}

// ---- the fixtures ----

/// An ACL attribute value: version 2, then (tag, permission, id) entries.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

const ANY: u32 = u32::MAX;

/// `top/a/b/c/d/e/f/g/file`, every directory 0755, and `top/a/b/sibling`.
fn chain(s: &Session<'_, PmemBackend>, top: &str) {
    let mut p = top.to_string();
    s.mkdir(&p, 0o755)
        .unwrap_or_else(|e| panic!("mkdir {p}: {e}"));
    for name in ["a", "b", "c", "d", "e", "f", "g"] {
        p = format!("{p}/{name}");
        s.mkdir(&p, 0o755)
            .unwrap_or_else(|e| panic!("mkdir {p}: {e}"));
    }
    for f in [format!("{p}/file"), format!("{top}/a/b/sibling")] {
        let fd = s
            .create(&f, 0o644)
            .unwrap_or_else(|e| panic!("create {f}: {e}"));
        s.fs().close_fd(fd).expect("close");
    }
}

/// A fresh pool at `path` holding the fixtures.
fn pool_with_fixtures(path: &Path) {
    let mut o = MkfsOptions::new(64 << 20);
    o.lanes = 2;
    Pool::mkfs(path, &o, PmemBackend::default()).expect("mkfs");
    let fs = Fs::open(path).expect("open the pool");
    let s = fs.session(Cred::root());
    s.mkdir("/s", 0o755).unwrap();
    for top in ["/s/deny", "/s/acl", "/s/mine"] {
        chain(&s, top);
    }
    s.chmod(DENY, 0o700).expect("chmod");
    s.chmod(ACL, 0o700).expect("chmod");
    // user::rwx, user:1000:r-x, group::---, mask::r-x, other::---
    let search = acl(&[
        (1, 7, ANY),
        (2, 5, USER),
        (4, 0, ANY),
        (0x10, 5, ANY),
        (0x20, 0, ANY),
    ]);
    s.setxattr(ACL, "system.posix_acl_access", &search, 0)
        .expect("ACL");
    s.chown(MINE, Some(USER), Some(USER)).expect("chown");
    drop(s);
    fs.close().expect("close the pool");
}

// ---- the front ends ----

/// Switches ADAM's areas and their evolution on or off for `fs` (the engine's default
/// is off; the other front ends run with it).
fn set_areas(fs: &Fs<PmemBackend>, on: bool) {
    fs.ns().mechanisms.set_areas(on);
    fs.ns().mechanisms.set_evolution(on);
}

/// The steps through the library, as [`USER`], with areas on or off: what
/// search_perm.c prints.
fn library_steps(pool: &Path, areas: bool) -> String {
    let fs = Fs::open(pool).expect("open the pool");
    set_areas(&fs, areas);
    let s = fs.session(Cred::user(USER, USER));
    let say = |r: lynxfs::Result<()>| match r {
        Ok(()) => "0".to_string(),
        Err(e) => match e.errno() {
            libc::EACCES => "EACCES".into(),
            libc::ENOENT => "ENOENT".into(),
            libc::EPERM => "EPERM".into(),
            n => format!("errno {n}"),
        },
    };
    let stat = |p: &str| say(s.stat(p).map(drop));
    let open = |p: &str| {
        say(s
            .open(p, libc::O_RDONLY, 0)
            .and_then(|fd| s.fs().close_fd(fd)))
    };
    let below = |dir: &str| format!("{dir}{BELOW}");
    let answers = [
        stat(&below(DENY)),
        open(&below(DENY)),
        stat(DENY),
        stat(&format!("{DENY}/../sibling")),
        stat(&below(ACL)),
        open(&below(ACL)),
        stat(&below(MINE)),
        open(&below(MINE)),
        stat(&below(MINE)),
        say(s.chmod(MINE, 0o600)),
        stat(&below(MINE)),
        open(&below(MINE)),
        say(s.chmod(MINE, 0o700)),
        stat(&below(MINE)),
    ];
    drop(s);
    fs.close().expect("close the pool");
    let mut out: String = EXPECTED
        .iter()
        .zip(answers)
        .map(|((name, _), got)| format!("{name}: {got}\n"))
        .collect();
    out.push_str("== end\n");
    out
}

/// target/<profile>/ with lynxfs, liblynxfs_preload.so and liblynxfs.so built from
/// the sources under test, and tests/search_perm.c built twice in it: plain and for
/// the C API.
fn built() -> &'static Path {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = built::build(&["lynxfs", "liblynxfs_preload.so", "liblynxfs.so"])?;
            let here = Path::new(env!("CARGO_MANIFEST_DIR"));
            let capi = here.join("../lynxfs-capi/include");
            for (exe, capi_build) in [("search-perm-c", false), ("search-perm-capi", true)] {
                let mut cmd = Command::new("cc");
                cmd.args(["-Wall", "-Wextra", "-Werror", "-O1"]);
                if capi_build {
                    cmd.arg("-DCAPI");
                }
                cmd.arg("-I")
                    .arg(&capi)
                    .arg(here.join("tests/search_perm.c"))
                    .arg("-o")
                    .arg(dir.join(exe));
                if capi_build {
                    cmd.arg("-L")
                        .arg(&dir)
                        .arg("-llynxfs")
                        .arg(format!("-Wl,-rpath,{}", dir.display()));
                }
                let out = run_bounded(&mut cmd, "cc search_perm.c", LIMIT);
                if !out.status.success() {
                    return Err(format!("cc search_perm.c: {}", text(&out.stderr)));
                }
            }
            Ok(dir)
        })
        .as_deref()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `cmd` as [`USER`], bounded: its output.
fn as_user(cmd: &mut Command, what: &str) -> String {
    cmd.uid(USER).gid(USER);
    let out: Output = run_bounded(cmd, what, LIMIT);
    assert!(
        out.status.success(),
        "{what}: {}\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// A directory [`USER`] may search (the pool and the paths it is reached by).
fn searchable(parent: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir_in(parent).unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// A pool with the fixtures that [`USER`] attaches (preload, C API): theirs, as a pool
/// others may write is refused.
fn user_pool_with_fixtures(path: &Path) {
    pool_with_fixtures(path);
    std::os::unix::fs::chown(path, Some(USER), Some(USER)).expect("chown the pool");
}

/// Checks what `front` printed against [`EXPECTED`], naming every step that differs.
fn check(front: &str, got: &str) {
    let want = expected();
    let diff: Vec<String> = want
        .lines()
        .zip(got.lines())
        .filter(|(w, g)| w != g)
        .map(|(w, g)| format!("  want {w}\n  got  {g}"))
        .collect();
    assert!(
        diff.is_empty() && want.lines().count() == got.lines().count(),
        "{front}: search permission differs from POSIX:\n{}\n(all it said:\n{got})",
        diff.join("\n")
    );
}

#[test]
fn search_permission_holds_through_the_library() {
    let _dog = watchdog("search permission through the library", TEST_LIMIT);
    for areas in [false, true] {
        let shm = searchable("/dev/shm");
        let pool = shm.path().join("search.pool");
        pool_with_fixtures(&pool);
        check(
            &format!("library, areas {areas}"),
            &library_steps(&pool, areas),
        );
    }
}

/// What the library must answer, in order, when another caller (root, in another
/// session on the same `Fs`) changes a middle ancestor after the user's lookup through
/// it succeeded (or failed): every change of an ancestor's permission or place counts.
const AFTER_CHANGES: &[(&str, &str)] = &[
    ("before chmod", "0"),
    ("after root's chmod 0700", "EACCES"),
    ("before chown", "0"),
    ("after root's chown to root", "EACCES"),
    ("before chgrp", "0"),
    ("after root's chgrp to root", "EACCES"),
    ("before the ACL's removal", "0"),
    ("after the ACL's removal", "EACCES"),
    ("before the move", "0"),
    ("after the move into a closed directory", "EACCES"),
    ("at the old path", "ENOENT"),
    ("inside a closed directory", "EACCES"),
    ("after its move out", "0"),
];

#[test]
fn search_permission_follows_changes_by_another_caller() {
    let _dog = watchdog("search permission after changes", TEST_LIMIT);
    follows_changes(false);
    follows_changes(true);
}

/// [`AFTER_CHANGES`] with areas (and an evolution round before each change) on or off.
fn follows_changes(areas: bool) {
    let shm = searchable("/dev/shm");
    let pool = shm.path().join("search.pool");
    let mut o = MkfsOptions::new(64 << 20);
    o.lanes = 2;
    Pool::mkfs(&pool, &o, PmemBackend::default()).expect("mkfs");
    let fs = Fs::open(&pool).expect("open the pool");
    set_areas(&fs, areas);
    let r = fs.session(Cred::root());
    r.mkdir("/t", 0o755).unwrap();
    for top in ["chmod", "chown", "chgrp", "acl", "moved"] {
        chain(&r, &format!("/t/{top}"));
    }
    r.chown("/t/chown/a/b/c", Some(USER), None).unwrap();
    r.chmod("/t/chown/a/b/c", 0o700).unwrap();
    r.chown("/t/chgrp/a/b/c", None, Some(USER)).unwrap();
    r.chmod("/t/chgrp/a/b/c", 0o750).unwrap();
    r.chmod("/t/acl/a/b/c", 0o700).unwrap();
    let search = acl(&[
        (1, 7, ANY),
        (2, 5, USER),
        (4, 0, ANY),
        (0x10, 5, ANY),
        (0x20, 0, ANY),
    ]);
    r.setxattr("/t/acl/a/b/c", "system.posix_acl_access", &search, 0)
        .unwrap();
    r.mkdir("/t/closed", 0o755).unwrap();
    chain(&r, "/t/closed/in");
    r.chmod("/t/closed", 0o700).unwrap();

    let u = fs.session(Cred::user(USER, USER));
    let stat = |p: &str| match u.stat(p) {
        Ok(_) => "0".to_string(),
        Err(e) => match e.errno() {
            libc::EACCES => "EACCES".into(),
            libc::ENOENT => "ENOENT".into(),
            n => format!("errno {n}"),
        },
    };
    let below = |dir: &str| format!("{dir}{BELOW}");
    let mut got = Vec::new();
    for (case, change) in [
        (
            "chmod",
            &(|| r.chmod("/t/chmod/a/b/c", 0o700)) as &dyn Fn() -> lynxfs::Result<()>,
        ),
        ("chown", &|| r.chown("/t/chown/a/b/c", Some(0), None)),
        ("chgrp", &|| r.chown("/t/chgrp/a/b/c", None, Some(0))),
        ("acl", &|| {
            r.removexattr("/t/acl/a/b/c", "system.posix_acl_access")
        }),
    ] {
        let p = below(&format!("/t/{case}/a/b/c"));
        got.push(stat(&p));
        // Again, and an evolution round: an area's answer is learnt and may be acted on.
        stat(&p);
        fs.ns().areas.evolve(&Thresholds::default());
        // With areas on, they hold answers for the user by now (else this guards nothing).
        let learnt: usize = fs
            .ns()
            .areas
            .summary()
            .areas
            .iter()
            .map(|a| a.entries)
            .sum();
        assert_eq!(
            learnt > 0,
            areas,
            "{case}: {learnt} area entries, areas {areas}"
        );
        change().unwrap_or_else(|e| panic!("{case}: {e}"));
        got.push(stat(&p));
    }
    got.push(stat(&below("/t/moved/a/b/c")));
    stat(&below("/t/moved/a/b/c"));
    fs.ns().areas.evolve(&Thresholds::default());
    r.rename("/t/moved/a/b/c", "/t/closed/c", 0).unwrap();
    got.push(stat(&below("/t/closed/c")));
    got.push(stat(&below("/t/moved/a/b/c")));
    got.push(stat(&below("/t/closed/in/a/b/c")));
    stat(&below("/t/closed/in/a/b/c"));
    fs.ns().areas.evolve(&Thresholds::default());
    r.rename("/t/closed/in", "/t/out", 0).unwrap();
    got.push(stat(&below("/t/out/a/b/c")));
    drop((u, r));
    fs.close().expect("close the pool");
    let diff: Vec<String> = AFTER_CHANGES
        .iter()
        .zip(&got)
        .filter(|((_, want), got)| want != got)
        .map(|((step, want), got)| format!("  {step}: want {want}, got {got}"))
        .collect();
    assert!(
        diff.is_empty() && got.len() == AFTER_CHANGES.len(),
        "search permission after another caller's change, areas {areas}:\n{}",
        diff.join("\n")
    );
}

/// Runs `cmd` (search_perm.c's `wait` mode) as [`USER`]: its first lookup, then the
/// user's chmod of its middle directory by another process attached to the same pool
/// (search_perm.c through the C API), then its second lookup.
fn chmod_between(cmd: &mut Command, pool: &Path, what: &str) {
    cmd.uid(USER)
        .gid(USER)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("read");
    let chmod = as_user(
        Command::new(built().join("search-perm-capi"))
            .arg(pool)
            .arg("chmod"),
        "the other process's chmod",
    );
    assert_eq!(chmod, "chmod its directory 0600: 0\n== end\n");
    stdin.write_all(b"go\n").expect("write");
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).expect("read");
    let status = child.wait().expect("wait");
    assert!(status.success(), "{what}: {status}\n{first}{rest}");
    assert_eq!(
        format!("{first}{rest}"),
        "stat below its own directory: 0\n\
         stat below it after another process's chmod: EACCES\n== end\n",
        "{what}"
    );
}

#[test]
fn another_process_s_chmod_reaches_the_c_api_and_the_preload() {
    let _dog = watchdog(
        "search permission after another process's chmod",
        TEST_LIMIT,
    );
    let dir = built();
    let shm = searchable("/dev/shm");
    let pool = shm.path().join("search.pool");
    user_pool_with_fixtures(&pool);
    chmod_between(
        Command::new(dir.join("search-perm-capi"))
            .arg(&pool)
            .arg("wait"),
        &pool,
        "C API",
    );
    let pool = shm.path().join("search2.pool");
    user_pool_with_fixtures(&pool);
    let at = searchable("/tmp");
    chmod_between(
        Command::new(dir.join("lynxfs"))
            .arg("run")
            .arg("--pool")
            .arg(&pool)
            .arg("--at")
            .arg(at.path())
            .arg("--")
            .arg(dir.join("search-perm-c"))
            .arg(at.path())
            .arg("wait")
            .env("LYNXFS_PRELOAD_LIB", dir.join("liblynxfs_preload.so")),
        &pool,
        "preload",
    );
}

#[test]
fn search_permission_holds_through_a_mount() {
    let _dog = watchdog("search permission through a mount", TEST_LIMIT);
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing");
    let exe = built().join("search-perm-c");
    let shm = searchable("/dev/shm");
    let pool = shm.path().join("search.pool");
    pool_with_fixtures(&pool);
    let mnt = searchable("/tmp");
    let opts = MountOptions::parse("allow_other").expect("options");
    let m = mount_background(&pool, mnt.path(), &opts).unwrap_or_else(|e| panic!("mount: {e:#}"));
    let got = std::panic::catch_unwind(|| {
        as_user(Command::new(&exe).arg(mnt.path()), "search_perm on a mount")
    });
    m.unmount().expect("unmount");
    check(
        "mount",
        &got.unwrap_or_else(|p| std::panic::resume_unwind(p)),
    );
}

#[test]
fn search_permission_holds_through_the_preload() {
    let _dog = watchdog("search permission through the preload", TEST_LIMIT);
    let dir = built();
    let shm = searchable("/dev/shm");
    let pool = shm.path().join("search.pool");
    user_pool_with_fixtures(&pool);
    let at = searchable("/tmp");
    let got = as_user(
        Command::new(dir.join("lynxfs"))
            .arg("run")
            .arg("--pool")
            .arg(&pool)
            .arg("--at")
            .arg(at.path())
            .arg("--")
            .arg(dir.join("search-perm-c"))
            .arg(at.path())
            .env("LYNXFS_PRELOAD_LIB", dir.join("liblynxfs_preload.so")),
        "search_perm under lynxfs run",
    );
    check("preload", &got);
}

#[test]
fn search_permission_holds_through_the_c_api() {
    let _dog = watchdog("search permission through the C API", TEST_LIMIT);
    let dir = built();
    let shm = searchable("/dev/shm");
    let pool = shm.path().join("search.pool");
    user_pool_with_fixtures(&pool);
    let got = as_user(
        Command::new(dir.join("search-perm-capi")).arg(&pool),
        "search_perm through the C API",
    );
    check("C API", &got);
}
