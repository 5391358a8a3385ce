//! One table of rules (protected hard links, inode flags, killpriv, permissions and
//! ACLs, the sticky bit, umask and default ACLs, the atime policy), run through each
//! front end: a mount, the preload (`lynxfs run`) and the C API. The rules live once,
//! in the engine, so every front end must give every row the same answer.
//!
//! Each run starts from a fresh pool that the engine fills with the same fixtures;
//! tests/rules.c then takes the steps as uid 1000 (`cloudsdk`) and prints one line
//! per step, which must equal [`expected`]. Needs root, `/dev/fuse`, `cc` and uid
//! 1000. `fs.protected_hardlinks` is read, never changed (other tests run beside; a
//! run during which another test changed it is made again).
//! Every child runs within a time limit, and a watchdog covers the mount.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use lynxfs::meta::flags::{APPEND, IMMUTABLE, NOATIME};
use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions, Pool, Session, TimeSet, Timestamp};
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

/// What each step of rules.c must print, on every front end, with
/// `fs.protected_hardlinks` at `protected` ("0" or "1") around the links.
fn expected(protected: &str) -> String {
    let rows: &[(&str, &str)] = &[
        ("fs.protected_hardlinks", protected),
        (
            "link a foreign file it cannot write",
            if protected == "1" { "EPERM" } else { "0" },
        ),
        ("link a foreign file it may read and write", "0"),
        ("link its own file", "0"),
        ("fs.protected_hardlinks", protected),
        ("open an immutable file for writing", "EPERM"),
        ("open an append-only file for writing", "EPERM"),
        ("append to an append-only file", "0"),
        ("unlink an immutable file", "EPERM"),
        ("write to a foreign setid file", "0"),
        ("its mode after the write", "0777"),
        ("open a file an ACL denies", "EACCES"),
        ("open a file an ACL grants", "0"),
        ("chmod a foreign file", "EPERM"),
        ("unlink a foreign file in a sticky directory", "EPERM"),
        ("unlink its own file in a sticky directory", "0"),
        ("create under umask 022", "0644"),
        ("create under a default ACL", "0666"),
        ("read a file whose atime is before its mtime", "updated"),
        (
            "read a file whose atime is after its mtime and ctime",
            "kept",
        ),
        ("read a NOATIME file", "kept"),
    ];
    let mut s: String = rows.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();
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

fn file(s: &Session<'_, PmemBackend>, p: &str, mode: u32) {
    let fd = s
        .create(p, mode)
        .unwrap_or_else(|e| panic!("create {p}: {e}"));
    s.fs().pwrite(fd, b"some bytes", 0).expect("write");
    s.fs().close_fd(fd).expect("close");
    s.chmod(p, mode).expect("chmod");
}

fn flag(s: &Session<'_, PmemBackend>, p: &str, flags: u32) {
    let ino = s.stat(p).expect("stat").ino;
    s.fs()
        .ns()
        .set_inode_flags(ino, flags, &Cred::root())
        .expect("set flags");
}

fn times(s: &Session<'_, PmemBackend>, p: &str, atime: i64, mtime: i64) {
    let at = |sec| Some(TimeSet::At(Timestamp { sec, nsec: 0 }));
    s.utimens(p, at(atime), at(mtime)).expect("utimens");
}

/// A fresh pool at `path` holding the fixtures.
fn pool_with_fixtures(path: &Path) {
    let mut o = MkfsOptions::new(64 << 20);
    o.lanes = 2;
    Pool::mkfs(path, &o, PmemBackend::default()).expect("mkfs");
    let fs = Fs::open(path).expect("open the pool");
    let s = fs.session(Cred::root());
    let user = |p: &str| s.chown(p, Some(USER), Some(USER)).expect("chown");
    s.mkdir("/d", 0o777).unwrap();
    file(&s, "/d/root-ro", 0o644);
    file(&s, "/d/root-rw", 0o666);
    file(&s, "/d/mine", 0o644);
    user("/d/mine");
    file(&s, "/d/immutable", 0o666);
    flag(&s, "/d/immutable", IMMUTABLE);
    file(&s, "/d/append-only", 0o666);
    flag(&s, "/d/append-only", APPEND);
    file(&s, "/d/setid", 0o6777);
    file(&s, "/d/acl-denied", 0o644);
    let denied = acl(&[
        (1, 6, ANY),
        (2, 0, USER),
        (4, 4, ANY),
        (0x10, 4, ANY),
        (0x20, 4, ANY),
    ]);
    s.setxattr("/d/acl-denied", "system.posix_acl_access", &denied, 0)
        .expect("ACL");
    file(&s, "/d/acl-granted", 0o600);
    let granted = acl(&[
        (1, 6, ANY),
        (2, 6, USER),
        (4, 0, ANY),
        (0x10, 6, ANY),
        (0x20, 0, ANY),
    ]);
    s.setxattr("/d/acl-granted", "system.posix_acl_access", &granted, 0)
        .expect("ACL");
    s.mkdir("/sticky", 0o1777).unwrap();
    file(&s, "/sticky/root-file", 0o666);
    file(&s, "/sticky/mine", 0o644);
    user("/sticky/mine");
    s.mkdir("/acl", 0o777).unwrap();
    let inherit = acl(&[(1, 7, ANY), (4, 7, ANY), (0x20, 7, ANY)]);
    s.setxattr("/acl", "system.posix_acl_default", &inherit, 0)
        .expect("default ACL");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    file(&s, "/d/stale", 0o644);
    times(&s, "/d/stale", 1000, 2000);
    file(&s, "/d/fresh", 0o644);
    times(&s, "/d/fresh", now + 3600, 1000);
    file(&s, "/d/noatime", 0o644);
    times(&s, "/d/noatime", 1000, 2000);
    flag(&s, "/d/noatime", NOATIME);
    drop(s);
    fs.close().expect("close the pool");
}

// ---- the front ends ----

/// target/<profile>/ with lynxfs, liblynxfs_preload.so and liblynxfs.so built from
/// the sources under test, and tests/rules.c built twice in it: plain and for the C
/// API.
fn built() -> &'static Path {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = built::build(&["lynxfs", "liblynxfs_preload.so", "liblynxfs.so"])?;
            let here = Path::new(env!("CARGO_MANIFEST_DIR"));
            let capi = here.join("../lynxfs-capi/include");
            for (exe, extra) in [("rules-c", vec![]), ("rules-capi", vec!["-DCAPI"])] {
                let mut cmd = Command::new("cc");
                cmd.args(["-Wall", "-Wextra", "-Werror", "-O1"])
                    .args(&extra)
                    .arg("-I")
                    .arg(&capi)
                    .arg(here.join("tests/rules.c"))
                    .arg("-o")
                    .arg(dir.join(exe));
                if !extra.is_empty() {
                    cmd.arg("-L")
                        .arg(&dir)
                        .arg("-llynxfs")
                        .arg(format!("-Wl,-rpath,{}", dir.display()));
                }
                let out = run_bounded(&mut cmd, "cc rules.c", LIMIT);
                if !out.status.success() {
                    return Err(format!("cc rules.c: {}", text(&out.stderr)));
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

/// Runs `cmd` as [`USER`], bounded: its output, which must say every step.
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

/// How many times the steps are run again when `fs.protected_hardlinks` changed
/// around the links (a test elsewhere sets it for a moment).
const TRIES: usize = 5;

/// Runs the steps through `front` (`run` makes a fresh pool and runs rules.c) and
/// checks what it printed against [`expected`] for the sysctl's value it saw.
fn check(front: &str, mut run: impl FnMut() -> String) {
    for _ in 0..TRIES {
        let got = run();
        let seen: Vec<&str> = got
            .lines()
            .filter_map(|l| l.strip_prefix("fs.protected_hardlinks: "))
            .collect();
        let [before, after] = seen[..] else {
            panic!("{front}: no sysctl lines in\n{got}");
        };
        if before != after || !["0", "1"].contains(&before) {
            continue;
        }
        let want = expected(before);
        let diff: Vec<String> = want
            .lines()
            .zip(got.lines())
            .filter(|(w, g)| w != g)
            .map(|(w, g)| format!("  want {w}\n  got  {g}"))
            .collect();
        assert!(
            diff.is_empty() && want.lines().count() == got.lines().count(),
            "{front}: the rules differ from the engine's:\n{}\n(all it said:\n{got})",
            diff.join("\n")
        );
        return;
    }
    panic!("{front}: fs.protected_hardlinks changed during each of {TRIES} runs");
}

#[test]
fn the_rules_hold_through_a_mount() {
    let _dog = watchdog("rules through a mount", TEST_LIMIT);
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing");
    let exe = built().join("rules-c");
    check("mount", || {
        let shm = searchable("/dev/shm");
        let pool = shm.path().join("rules.pool");
        pool_with_fixtures(&pool);
        let mnt = searchable("/tmp");
        let opts = MountOptions::parse("allow_other").expect("options");
        let m =
            mount_background(&pool, mnt.path(), &opts).unwrap_or_else(|e| panic!("mount: {e:#}"));
        let got = std::panic::catch_unwind(|| {
            as_user(Command::new(&exe).arg(mnt.path()), "rules on a mount")
        });
        m.unmount().expect("unmount");
        got.unwrap_or_else(|p| std::panic::resume_unwind(p))
    });
}

#[test]
fn the_rules_hold_through_the_preload() {
    let _dog = watchdog("rules through the preload", TEST_LIMIT);
    let dir = built();
    check("preload", || {
        let shm = searchable("/dev/shm");
        let pool = shm.path().join("rules.pool");
        user_pool_with_fixtures(&pool);
        let at = searchable("/tmp");
        as_user(
            Command::new(dir.join("lynxfs"))
                .arg("run")
                .arg("--pool")
                .arg(&pool)
                .arg("--at")
                .arg(at.path())
                .arg("--")
                .arg(dir.join("rules-c"))
                .arg(at.path())
                .env("LYNXFS_PRELOAD_LIB", dir.join("liblynxfs_preload.so")),
            "rules under lynxfs run",
        )
    });
}

#[test]
fn the_rules_hold_through_the_c_api() {
    let _dog = watchdog("rules through the C API", TEST_LIMIT);
    let dir = built();
    check("C API", || {
        let shm = searchable("/dev/shm");
        let pool = shm.path().join("rules.pool");
        user_pool_with_fixtures(&pool);
        as_user(
            Command::new(dir.join("rules-capi")).arg(&pool),
            "rules through the C API",
        )
    });
}
