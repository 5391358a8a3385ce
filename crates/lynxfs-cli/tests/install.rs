//! `./lynx install`, `./lynx uninstall` and `./lynx package`, end to end: an install
//! into a temporary prefix (never the machine's own /usr/local), each file it puts
//! there checked (stripped binaries, pkg-config and the C API through it, `man -l`,
//! the completion scripts' syntax in bash, zsh and fish), an fstab mount of a fresh
//! pool through mount(8) (`mount -T FSTAB -a`, in a private mount namespace whose
//! /usr/sbin shows the installed helpers), `lynxfs run`, remount and umount through
//! mount(8) with a plain PATH, then an uninstall that leaves nothing; and the Debian
//! package, installed into and removed from a temporary root with `dpkg --root`.
//! Needs root, /dev/fuse, man, pkg-config, cc, zsh, fish and dpkg (`./lynx test`
//! installs them); fails loudly without them. Every command runs with a time limit
//! and the tests under a watchdog.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use lynxfs_test_support::built;
use lynxfs_test_support::child::output_within;
use lynxfs_test_support::scratch::in_private_mount_namespace;
use lynxfs_test_support::{wait_until, watchdog};

/// A command of these tests that takes longer has hung.
const LIMIT: Duration = Duration::from_secs(120);

/// A plain PATH, without the temporary prefix: what mount(8) is run with.
const PLAIN_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The programs `./lynx install` puts in PREFIX/bin: its PROGRAMS line.
fn programs() -> Vec<String> {
    let script = std::fs::read_to_string(repo().join("lynx")).unwrap();
    let line = script
        .lines()
        .find_map(|l| l.strip_prefix("PROGRAMS=\""))
        .expect("a PROGRAMS=\"...\" line in lynx");
    line.trim_end_matches('"')
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// target/<profile>/ with everything the install takes, built by cargo with this
/// test's profile (`cargo test` builds no cdylib nor other packages' programs):
/// `./lynx install --from` it.
fn built_dir() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let mut artifacts = programs();
            artifacts.extend(["liblynxfs_preload.so".into(), "liblynxfs.so".into()]);
            let artifacts: Vec<&str> = artifacts.iter().map(String::as_str).collect();
            built::build(&artifacts)
        })
        .clone()
        .unwrap()
}

fn run(cmd: &mut Command) -> Output {
    output_within(cmd, LIMIT)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `cmd` and fails the test, showing its output, unless it succeeds.
fn ok(cmd: &mut Command) -> Output {
    let what = format!("{cmd:?}");
    let o = run(cmd);
    assert!(
        o.status.success(),
        "{what}: {}\n{}{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
    o
}

fn lynx(args: &[&str]) -> Command {
    let mut c = Command::new("bash");
    c.arg(repo().join("lynx")).args(args);
    c
}

fn s(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// An install into `root`/usr with its mount helpers in `root`/sbin.
struct Install {
    prefix: PathBuf,
    sbin: PathBuf,
}

impl Install {
    fn into(root: &Path) -> Install {
        let i = Install {
            prefix: root.join("usr"),
            sbin: root.join("sbin"),
        };
        let from = built_dir();
        ok(&mut lynx(&[
            "install",
            "--prefix",
            s(&i.prefix),
            "--sbindir",
            s(&i.sbin),
            "--from",
            s(&from),
        ]));
        i
    }

    fn uninstall(&self) {
        ok(&mut lynx(&[
            "uninstall",
            "--prefix",
            s(&self.prefix),
            "--sbindir",
            s(&self.sbin),
        ]));
    }

    fn bin(&self) -> PathBuf {
        self.prefix.join("bin/lynxfs")
    }
}

/// Every file and link an install makes, relative to the prefix (`sbin/` for the
/// helpers' directory), with its mode (0 for a link).
fn expected_files(man_pages: &[String]) -> Vec<(String, u32)> {
    let mut v: Vec<(String, u32)> = vec![
        ("lib/lynxfs/liblynxfs_preload.so".into(), 0o644),
        ("lib/liblynxfs.so".into(), 0o644),
        ("include/lynxfs.h".into(), 0o644),
        ("lib/pkgconfig/lynxfs.pc".into(), 0o644),
        ("share/bash-completion/completions/lynxfs".into(), 0o644),
        ("share/zsh/site-functions/_lynxfs".into(), 0o644),
        ("share/fish/vendor_completions.d/lynxfs.fish".into(), 0o644),
        ("share/lynxfs/installed".into(), 0o644),
        ("sbin/mount.lynxfs".into(), 0),
        ("sbin/mount.fuse.lynxfs".into(), 0),
    ];
    for m in man_pages {
        v.push((format!("share/man/man8/{m}"), 0o644));
    }
    for p in programs() {
        v.push((format!("bin/{p}"), 0o755));
    }
    v
}

/// What the binary's own clap definitions say the pages are.
fn man_page_names(bin: &Path) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    ok(Command::new(bin)
        .arg("generate")
        .arg("--man")
        .arg(dir.path()));
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Every file (not directory) under `dir`, relative to it.
fn files_under(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if !dir.exists() {
        return out;
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else {
                let rel = e.path().strip_prefix(dir).unwrap().to_owned();
                out.insert(rel.to_string_lossy().into_owned());
            }
        }
    }
    out
}

fn has_debug_info(file: &Path) -> bool {
    let o = ok(Command::new("readelf").args(["-S", "-W"]).arg(file));
    text(&o.stdout).contains(".debug_info")
}

fn require(program: &str) {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .chain([PathBuf::from("/usr/bin")])
        .any(|d| d.join(program).is_file());
    assert!(
        found,
        "{program} is not installed (`./lynx test` installs it: apt-get install {program})"
    );
}

#[test]
fn install_checks_each_file_mounts_from_fstab_and_uninstalls_clean() {
    let _w = watchdog(
        "install_checks_each_file_mounts_from_fstab_and_uninstalls_clean",
        Duration::from_secs(900),
    );
    for p in ["readelf", "pkg-config", "cc", "man", "zsh", "fish", "mount"] {
        require(p);
    }
    let root = tempfile::tempdir().unwrap();
    let i = Install::into(root.path());

    // Each file where it belongs, with its mode; nothing else.
    let pages = man_page_names(&i.bin());
    for want in [
        "lynxfs.8",
        "lynxfs-mkfs.8",
        "lynxfs-mount.8",
        "mount.lynxfs.8",
    ] {
        assert!(pages.iter().any(|p| p == want), "{want} in {pages:?}");
    }
    let expected = expected_files(&pages);
    for (rel, mode) in &expected {
        let path = match rel.strip_prefix("sbin/") {
            Some(name) => i.sbin.join(name),
            None => i.prefix.join(rel),
        };
        let meta =
            std::fs::symlink_metadata(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if *mode == 0 {
            assert_eq!(std::fs::read_link(&path).unwrap(), i.bin(), "{rel}");
        } else {
            assert_eq!(meta.permissions().mode() & 0o7777, *mode, "{rel}'s mode");
        }
    }
    let mut listed: BTreeSet<String> = files_under(&i.prefix);
    listed.extend(
        files_under(&i.sbin)
            .into_iter()
            .map(|f| format!("sbin/{f}")),
    );
    let wanted: BTreeSet<String> = expected.iter().map(|(r, _)| r.clone()).collect();
    assert_eq!(listed, wanted, "the install's files");

    // Shipped without debug info (the build itself has it).
    assert!(
        has_debug_info(&built_dir().join("lynxfs")),
        "the build has debug info"
    );
    let mut shipped = vec!["lib/liblynxfs.so".to_string()];
    shipped.push("lib/lynxfs/liblynxfs_preload.so".into());
    shipped.extend(programs().iter().map(|p| format!("bin/{p}")));
    for f in &shipped {
        assert!(!has_debug_info(&i.prefix.join(f)), "{f} carries debug info");
    }

    check_pkg_config_and_the_c_api(&i);
    check_man_pages(&i, &pages);
    check_completions(&i);
    check_fstab_mount_run_remount_umount(&i);

    i.uninstall();
    assert_eq!(
        files_under(root.path()),
        BTreeSet::new(),
        "left after uninstall"
    );
    assert!(
        !i.prefix.exists() && !i.sbin.exists(),
        "the install's directories stay"
    );
}

fn check_pkg_config_and_the_c_api(i: &Install) {
    let pc_path = i.prefix.join("lib/pkgconfig");
    let o = ok(Command::new("pkg-config")
        .args(["--cflags", "--libs", "lynxfs"])
        .env("PKG_CONFIG_PATH", &pc_path));
    let flags = text(&o.stdout);
    assert_eq!(
        flags.split_whitespace().collect::<Vec<_>>(),
        [
            format!("-I{}/include", i.prefix.display()),
            format!("-L{}/lib", i.prefix.display()),
            "-llynxfs".to_string(),
        ],
        "{flags}"
    );
    let o = ok(Command::new("pkg-config")
        .args(["--modversion", "lynxfs"])
        .env("PKG_CONFIG_PATH", &pc_path));
    assert_eq!(text(&o.stdout).trim(), env!("CARGO_PKG_VERSION"));

    // The C API's example, compiled with those flags alone, against a fresh pool.
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let exe = dir.path().join("example");
    ok(Command::new("cc")
        .args(["-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(repo().join("crates/lynxfs-capi/examples/example.c"))
        .args(flags.split_whitespace())
        .arg(format!("-Wl,-rpath,{}/lib", i.prefix.display())));
    let pool = dir.path().join("pool");
    ok(Command::new(i.bin())
        .args(["mkfs", "--size", "64M"])
        .arg(&pool));
    ok(Command::new(&exe).arg(&pool));
}

fn check_man_pages(i: &Install, pages: &[String]) {
    for page in pages {
        let path = i.prefix.join("share/man/man8").join(page);
        let o = ok(Command::new("man")
            .arg("--warnings")
            .arg("-l")
            .arg(&path)
            .env("MANWIDTH", "80"));
        let out = text(&o.stdout);
        assert!(
            out.contains("NAME") && out.contains("SYNOPSIS"),
            "{page}: {out}"
        );
        let err = text(&o.stderr);
        assert!(!err.contains("warning"), "{page}: {err}");
    }
    let helper = text(
        &ok(Command::new("man")
            .arg("-l")
            .arg(i.prefix.join("share/man/man8/mount.lynxfs.8")))
        .stdout,
    );
    for o in lynxfs_fuse::options::OPTIONS {
        assert!(
            helper.contains(&o.synopsis()),
            "mount.lynxfs(8) lacks {}",
            o.name
        );
    }
}

fn check_completions(i: &Install) {
    let share = i.prefix.join("share");
    for (shell, file) in [
        ("bash", "bash-completion/completions/lynxfs"),
        ("zsh", "zsh/site-functions/_lynxfs"),
        ("fish", "fish/vendor_completions.d/lynxfs.fish"),
    ] {
        let path = share.join(file);
        ok(Command::new(shell).arg("-n").arg(&path));
        let script = std::fs::read_to_string(&path).unwrap();
        for sub in ["mkfs", "mount", "umount", "info", "fsck", "run"] {
            assert!(script.contains(sub), "{shell} completion lacks {sub}");
        }
        assert!(
            !script.contains("--completion"),
            "{shell}: the hidden generate command"
        );
    }
}

/// Can the pool's lock be taken (its daemon has closed it)?
fn pool_released(pool: &Path) -> bool {
    let f = std::fs::File::open(pool).unwrap();
    // SAFETY: flock on a descriptor we own; the lock goes with the file on return.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// This thread's mount at `mp`: (type, options), if any.
fn thread_mount(mp: &Path) -> Option<(String, Vec<String>)> {
    let info = std::fs::read_to_string("/proc/thread-self/mountinfo").unwrap();
    let mp = mp.to_string_lossy();
    let line = info
        .lines()
        .rfind(|l| l.split(' ').nth(4) == Some(mp.as_ref()))?;
    let (left, right) = line.split_once(" - ").unwrap();
    let fstype = right.split(' ').next().unwrap().to_string();
    let own = left.split(' ').nth(5).unwrap_or("");
    let sup = right.split(' ').nth(2).unwrap_or("");
    let opts = own.split(',').chain(sup.split(',')).map(str::to_string);
    Some((fstype, opts.collect()))
}

fn plain(cmd: &mut Command) -> &mut Command {
    cmd.env_clear().env("PATH", PLAIN_PATH).current_dir("/")
}

/// The fstab mount and what is done through it, in a private mount namespace whose
/// /usr/sbin (so /sbin) also shows the install's helpers.
fn check_fstab_mount_run_remount_umount(i: &Install) {
    let sbin = i.sbin.clone();
    let bin = i.bin();
    in_private_mount_namespace(move || {
        ok(Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o"])
            .arg(format!("lowerdir={}:/usr/sbin", sbin.display()))
            .arg("/usr/sbin"));
        assert!(
            Path::new("/sbin/mount.lynxfs").exists(),
            "the helper in /sbin"
        );

        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let pool = dir.path().join("x.pool");
        ok(Command::new(&bin)
            .args(["mkfs", "--size", "64M"])
            .arg(&pool));
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let fstab = dir.path().join("fstab");
        std::fs::write(
            &fstab,
            format!(
                "# a pool that is there, and one that is not: nofail lets mount -a go on\n\
                 {} {} lynxfs defaults,allow_other,nofail 0 0\n\
                 {}/missing.pool {} lynxfs defaults,nofail 0 0\n",
                pool.display(),
                mnt.display(),
                dir.path().display(),
                dir.path().display()
            ),
        )
        .unwrap();
        ok(plain(Command::new("mount").arg("-T").arg(&fstab).arg("-a")));
        let (fstype, opts) = thread_mount(&mnt).expect("mounted by mount -a");
        assert_eq!(fstype, "fuse.lynxfs");
        assert!(opts.iter().any(|o| o == "allow_other"), "{opts:?}");
        std::fs::write(mnt.join("f"), b"from fstab").unwrap();

        // lynxfs run, from the install, with a plain PATH, in another directory.
        let o = ok(plain(Command::new(&bin).arg("run").arg("--at").arg(&mnt))
            .arg("--")
            .arg("cat")
            .arg(mnt.join("f")));
        assert_eq!(o.stdout, b"from fstab");

        // mount(8) finds mount.fuse.lynxfs for the live mount's type.
        ok(plain(
            Command::new("mount").args(["-o", "remount,ro"]).arg(&mnt),
        ));
        let (_, opts) = thread_mount(&mnt).unwrap();
        assert!(opts.iter().any(|o| o == "ro"), "{opts:?}");
        let refused = std::fs::write(mnt.join("g"), b"x").unwrap_err();
        assert_eq!(refused.raw_os_error(), Some(libc::EROFS));

        ok(plain(Command::new("umount").arg(&mnt)));
        assert!(thread_mount(&mnt).is_none(), "unmounted");
        wait_until("the daemon closes the pool", LIMIT, || pool_released(&pool));
    });
}

#[test]
fn the_package_installs_into_a_temporary_root_and_removes_cleanly() {
    let _w = watchdog(
        "the_package_installs_into_a_temporary_root_and_removes_cleanly",
        Duration::from_secs(900),
    );
    for p in ["dpkg", "dpkg-deb"] {
        require(p);
    }
    let out = tempfile::tempdir().unwrap();
    let from = built_dir();
    let o = ok(&mut lynx(&[
        "package",
        "--from",
        s(&from),
        "--out",
        s(out.path()),
    ]));
    let deb = PathBuf::from(text(&o.stdout).trim());
    assert!(
        deb.starts_with(out.path()) && deb.is_file(),
        "{}",
        deb.display()
    );

    // The same files as an install with the prefix /usr, less its manifest.
    let staged = tempfile::tempdir().unwrap();
    let i = Install::into(staged.path());
    let mut want: BTreeSet<String> = files_under(&i.prefix)
        .into_iter()
        .filter(|f| f != "share/lynxfs/installed")
        .map(|f| format!("usr/{f}"))
        .collect();
    // The helpers in /usr/sbin, which /sbin is a link to on merged-/usr systems.
    want.extend(
        files_under(&i.sbin)
            .into_iter()
            .map(|f| format!("usr/sbin/{f}")),
    );
    i.uninstall();

    let root = tempfile::tempdir().unwrap();
    let db = root.path().join("var/lib/dpkg");
    std::fs::create_dir_all(db.join("info")).unwrap();
    std::fs::create_dir_all(db.join("updates")).unwrap();
    std::fs::write(db.join("status"), b"").unwrap();
    // The temporary root has no fuse3 nor libc6 in its package database.
    ok(Command::new("dpkg")
        .arg(format!("--root={}", root.path().display()))
        .args(["--force-depends", "-i"])
        .arg(&deb));
    let mut got = files_under(root.path());
    got.retain(|f| !f.starts_with("var/"));
    assert_eq!(got, want, "the package's files");
    assert!(!has_debug_info(&root.path().join("usr/bin/lynxfs")));
    assert_eq!(
        std::fs::read_link(root.path().join("usr/sbin/mount.lynxfs")).unwrap(),
        Path::new("/usr/bin/lynxfs")
    );
    let o = ok(Command::new(root.path().join("usr/bin/lynxfs")).arg("--version"));
    assert_eq!(
        text(&o.stdout).trim(),
        format!("lynxfs {}", env!("CARGO_PKG_VERSION"))
    );

    ok(Command::new("dpkg")
        .arg(format!("--root={}", root.path().display()))
        .args(["-r", "lynxfs"]));
    let mut left = files_under(root.path());
    left.retain(|f| !f.starts_with("var/"));
    assert_eq!(left, BTreeSet::new(), "left after dpkg -r");
    for d in ["usr", "sbin"] {
        assert!(!root.path().join(d).exists(), "{d} left after dpkg -r");
    }
}

/// The target of the link at `p`, if it is one.
fn link_at(p: &Path) -> Option<PathBuf> {
    std::fs::read_link(p).ok()
}

/// Issue 42, defect 8: two installs into two prefixes sharing one helpers' directory
/// (as /sbin is). The second stops before changing anything, naming what is the
/// first's; an uninstall of it then has nothing to remove; with --replace it replaces
/// them, and its uninstall removes them, never the first's files. The first's
/// uninstall leaves what it no longer owns (a helper the second replaced, a page
/// changed since), saying so.
#[test]
fn an_install_replaces_and_removes_only_its_own_files() {
    let _w = watchdog(
        "an_install_replaces_and_removes_only_its_own_files",
        Duration::from_secs(600),
    );
    let root = tempfile::tempdir().unwrap();
    let sbin = root.path().join("sbin");
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    let from = built_dir();
    let install = |prefix: &Path, extra: &[&str]| {
        let mut args = vec!["install", "--prefix", s(prefix), "--sbindir", s(&sbin)];
        args.extend(["--from", s(&from)]);
        args.extend(extra);
        run(&mut lynx(&args))
    };
    let uninstall = |prefix: &Path| {
        run(&mut lynx(&[
            "uninstall",
            "--prefix",
            s(prefix),
            "--sbindir",
            s(&sbin),
        ]))
    };
    let helper = sbin.join("mount.lynxfs");
    // `./lynx demo`'s link to a build tree is there for want of an install: replaced,
    // saying so.
    std::fs::create_dir(&sbin).unwrap();
    std::os::unix::fs::symlink("/src/lynxfs/target/release/lynxfs", &helper).unwrap();
    let o = install(&a, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("./lynx demo's link"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(link_at(&helper), Some(a.join("bin/lynxfs")));

    let o = install(&b, &[]);
    assert!(
        !o.status.success(),
        "the second install replaced the first's helpers"
    );
    let err = text(&o.stderr);
    assert!(
        err.contains(s(&helper)) && err.contains("--replace"),
        "{err}"
    );
    assert!(!b.exists(), "the refused install wrote {}", b.display());
    assert_eq!(link_at(&helper), Some(a.join("bin/lynxfs")));
    assert!(!uninstall(&b).status.success(), "nothing of b's to remove");
    assert_eq!(link_at(&helper), Some(a.join("bin/lynxfs")));

    let o = install(&b, &["--replace"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(s(&helper)),
        "says what it replaced"
    );
    assert_eq!(link_at(&helper), Some(b.join("bin/lynxfs")));
    let o = uninstall(&b);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        link_at(&helper).is_none(),
        "b's uninstall removes its helpers"
    );
    assert!(a.join("bin/lynxfs").is_file(), "and nothing of a's");

    // A page of a's changed since its install is not a's to remove any more.
    let page = a.join("share/man/man8/lynxfs.8");
    std::fs::write(&page, "mine now\n").unwrap();
    let o = uninstall(&a);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains(s(&page)), "{}", text(&o.stderr));
    assert_eq!(std::fs::read_to_string(&page).unwrap(), "mine now\n");
    std::fs::remove_file(&page).unwrap();
    assert_eq!(
        files_under(root.path()),
        BTreeSet::new(),
        "left after uninstall"
    );
}

/// Issue 42, defect 8: a user who is not root installs into a prefix of their own
/// (the helpers go to PREFIX/sbin: /sbin is not theirs), and uninstalls it clean.
#[test]
fn a_user_installs_into_a_prefix_of_their_own() {
    use std::os::unix::process::CommandExt;
    let _w = watchdog(
        "a_user_installs_into_a_prefix_of_their_own",
        Duration::from_secs(600),
    );
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "needs root (to act as uid 1000)");
    let root = tempfile::tempdir().unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = root.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(1000), Some(1000)).unwrap();
    let prefix = home.join("opt");
    let from = built_dir();
    let as_user = |args: &[&str]| {
        let mut c = lynx(args);
        c.uid(1000)
            .gid(1000)
            .env("HOME", &home)
            .env_remove("CARGO_TARGET_DIR")
            .current_dir(repo());
        run(&mut c)
    };
    let o = as_user(&["install", "--prefix", s(&prefix), "--from", s(&from)]);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    let bin = prefix.join("bin/lynxfs");
    assert_eq!(
        link_at(&prefix.join("sbin/mount.lynxfs")),
        Some(bin.clone())
    );
    assert!(
        text(&o.stderr).contains("--sbindir /sbin"),
        "{}",
        text(&o.stderr)
    );
    let o = run(Command::new(&bin).arg("--version").uid(1000).gid(1000));
    assert!(o.status.success(), "{}", text(&o.stderr));
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&bin).unwrap().uid(),
        1000,
        "the user's own"
    );
    let o = as_user(&["uninstall", "--prefix", s(&prefix)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(files_under(&home), BTreeSet::new(), "left after uninstall");
    assert!(!prefix.exists());
}
