//! `lynxfs run` before the exec: each thing that stops a program from using the pool is
//! a clear error with exit code 1 and the program never runs; a missing command exits
//! 127; the environment (LD_PRELOAD, LYNXFS_POOL, LYNXFS_AT) reaches the program. The
//! preload library here is an empty shared object compiled with `cc` (what it does is
//! the preload crate's tests' business). Runs as root; "another user" is nobody
//! (65534), through setpriv(1). Every command runs with a time limit.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use lynxfs_test_support::child::output_within;
use lynxfs_test_support::scratch::shared_dir;
use lynxfs_test_support::watchdog;

const BIN: &str = env!("CARGO_BIN_EXE_lynxfs");
const NOBODY: u32 = 65534;
const LIMIT: Duration = Duration::from_secs(120);

/// An empty shared object that ld.so preloads without complaint, made once per test
/// binary in cargo's scratch directory (readable by nobody, like the binary).
fn stub_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let src = dir.join(format!("run_cli-stub-{}.c", std::process::id()));
        std::fs::write(&src, "int lynxfs_run_test_stub;\n").unwrap();
        let lib = dir.join(format!("run_cli-stub-{}.so", std::process::id()));
        let o = output_within(
            Command::new("cc")
                .args(["-shared", "-fPIC", "-o"])
                .arg(&lib)
                .arg(&src),
            LIMIT,
        );
        let _ = std::fs::remove_file(&src);
        assert!(o.status.success(), "cc: {}", err(&o));
        let named = dir.join("run_cli-stub.so");
        std::fs::rename(&lib, &named).unwrap();
        named
    })
}

fn mkfs(pool: &Path) {
    let o = output_within(
        Command::new(BIN).args(["mkfs", "--size", "16M"]).arg(pool),
        LIMIT,
    );
    assert!(o.status.success(), "mkfs: {}", err(&o));
}

/// `lynxfs run ARGS` with the stub library (unless `LYNXFS_PRELOAD_LIB` is set by
/// `cmd`'s caller first) and no LD_PRELOAD of its own.
fn lynxfs_run(mut cmd: Command, args: &[&std::ffi::OsStr]) -> Output {
    cmd.arg("run")
        .args(args)
        .env_remove("LD_PRELOAD")
        .env("LYNXFS_PRELOAD_LIB", stub_library());
    output_within(&mut cmd, LIMIT)
}

fn run(args: &[&std::ffi::OsStr]) -> Output {
    lynxfs_run(Command::new(BIN), args)
}

fn run_as_nobody(args: &[&std::ffi::OsStr]) -> Output {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]);
    lynxfs_run(c, args)
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts that `o` failed before the exec: exit code 1, `want` in the message, and
/// no `marker` (which the program would have created).
fn refused(o: &Output, want: &str, marker: &Path) {
    assert_eq!(
        o.status.code(),
        Some(1),
        "status {:?}: {}",
        o.status,
        err(o)
    );
    assert!(err(o).contains(want), "want {want:?} in: {}", err(o));
    assert!(!marker.exists(), "the program ran: {}", marker.display());
}

/// Arguments `--pool POOL --at DIR -- touch MARKER`.
fn touch_args<'a>(pool: &'a Path, at: &'a Path, marker: &'a Path) -> Vec<&'a std::ffi::OsStr> {
    vec![
        os("--pool"),
        pool.as_os_str(),
        os("--at"),
        at.as_os_str(),
        os("--"),
        os("touch"),
        marker.as_os_str(),
    ]
}

#[test]
fn a_missing_pool_or_a_file_that_is_not_a_pool_is_refused() {
    let _w = watchdog("missing_or_not_a_pool", Duration::from_secs(300));
    let d = shared_dir();
    let marker = d.path().join("ran");
    let missing = d.path().join("missing.pool");
    let o = run(&touch_args(&missing, d.path(), &marker));
    refused(&o, "no such pool file", &marker);
    assert!(err(&o).contains(missing.to_str().unwrap()), "{}", err(&o));

    let junk = d.path().join("junk.pool");
    std::fs::write(&junk, vec![0u8; 1 << 20]).unwrap();
    std::fs::set_permissions(&junk, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = run(&touch_args(&junk, d.path(), &marker));
    refused(&o, "not a LynxFS pool", &marker);
}

#[test]
fn another_users_pool_is_refused_both_ways() {
    let _w = watchdog("another_users_pool", Duration::from_secs(300));
    let d = shared_dir();
    let marker = d.path().join("ran");
    let pool = d.path().join("p.pool");
    mkfs(&pool);

    // nobody cannot open root's private pool.
    let o = run_as_nobody(&touch_args(&pool, d.path(), &marker));
    refused(&o, "Permission denied", &marker);
    assert!(err(&o).contains(pool.to_str().unwrap()), "{}", err(&o));

    // Root does not attach to a pool nobody owns (its owner could change it under
    // root's programs).
    std::os::unix::fs::chown(&pool, Some(NOBODY), Some(NOBODY)).unwrap();
    let o = run(&touch_args(&pool, d.path(), &marker));
    refused(&o, "owned by uid 65534", &marker);
}

#[test]
fn a_pool_held_exclusively_is_refused() {
    let _w = watchdog("held_exclusively", Duration::from_secs(300));
    let d = shared_dir();
    let marker = d.path().join("ran");
    let pool = d.path().join("p.pool");
    mkfs(&pool);
    let held = lynxfs::Pool::open(
        &pool,
        lynxfs::Access::Exclusive,
        lynxfs::pmem::PmemBackend::default(),
    )
    .unwrap();
    let o = run(&touch_args(&pool, d.path(), &marker));
    refused(&o, "in use by another process", &marker);
    drop(held);
    // Released, the same run goes ahead.
    let o = run(&touch_args(&pool, d.path(), &marker));
    assert!(o.status.success(), "{}", err(&o));
    assert!(marker.exists());
}

#[test]
fn the_directory_must_be_given_or_mounted_and_must_be_a_directory() {
    let _w = watchdog("directory", Duration::from_secs(300));
    let d = shared_dir();
    let marker = d.path().join("ran");
    let pool = d.path().join("p.pool");
    mkfs(&pool);
    let touch = [os("touch"), marker.as_os_str()];

    let o = run(&[&[os("--pool"), pool.as_os_str(), os("--")], &touch[..]].concat());
    refused(&o, "is not mounted: give --at DIR", &marker);

    let o = run(&[&[os("--")], &touch[..]].concat());
    refused(&o, "give --pool POOL, --at DIR or both", &marker);

    let o = run(&[&[os("--at"), d.path().as_os_str(), os("--")], &touch[..]].concat());
    refused(&o, "no pool mounted at", &marker);

    let o = run(&touch_args(&pool, &d.path().join("nowhere"), &marker));
    refused(&o, "No such file or directory", &marker);
    assert!(err(&o).contains("--at"), "{}", err(&o));

    let o = run(&touch_args(&pool, &pool, &marker));
    refused(&o, "not a directory", &marker);
}

#[test]
fn a_missing_command_exits_127() {
    let _w = watchdog("missing_command", Duration::from_secs(300));
    let d = shared_dir();
    let pool = d.path().join("p.pool");
    mkfs(&pool);
    let o = run(&[
        os("--pool"),
        pool.as_os_str(),
        os("--at"),
        d.path().as_os_str(),
        os("--"),
        os("no-such-command-lynxfs-test"),
    ]);
    assert_eq!(o.status.code(), Some(127), "{}", err(&o));
    assert!(
        err(&o).contains("no-such-command-lynxfs-test: command not found"),
        "{}",
        err(&o)
    );
}

#[test]
fn a_missing_library_is_an_error_naming_where_it_was_looked_for() {
    let _w = watchdog("missing_library", Duration::from_secs(300));
    let d = shared_dir();
    let marker = d.path().join("ran");
    let pool = d.path().join("p.pool");
    mkfs(&pool);

    let mut c = Command::new(BIN);
    c.env("LYNXFS_PRELOAD_LIB", d.path().join("gone.so"));
    let o = output_within(
        c.arg("run").args(touch_args(&pool, d.path(), &marker)),
        LIMIT,
    );
    refused(&o, "LYNXFS_PRELOAD_LIB=", &marker);
    assert!(err(&o).contains("gone.so"), "{}", err(&o));

    // A lynxfs installed alone: neither next to it nor in ../lib/lynxfs/.
    let bin_dir = d.path().join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    let lonely = bin_dir.join("lynxfs");
    std::fs::copy(BIN, &lonely).unwrap();
    let mut c = Command::new(&lonely);
    c.env_remove("LYNXFS_PRELOAD_LIB");
    let o = output_within(
        c.arg("run").args(touch_args(&pool, d.path(), &marker)),
        LIMIT,
    );
    refused(&o, "liblynxfs_preload.so not found", &marker);
    assert!(err(&o).contains(bin_dir.to_str().unwrap()), "{}", err(&o));
    assert!(
        err(&o).contains("cargo build --release -p lynxfs-preload"),
        "{}",
        err(&o)
    );

    // Installed in ../lib/lynxfs/, it is found there.
    let lib_dir = d.path().join("lib/lynxfs");
    std::fs::create_dir_all(&lib_dir).unwrap();
    std::fs::copy(stub_library(), lib_dir.join("liblynxfs_preload.so")).unwrap();
    let mut c = Command::new(&lonely);
    c.env_remove("LYNXFS_PRELOAD_LIB");
    let o = output_within(
        c.arg("run").args(touch_args(&pool, d.path(), &marker)),
        LIMIT,
    );
    assert!(o.status.success(), "{}", err(&o));
    assert!(marker.exists());
}

/// The `NAME=value` lines of `env`'s output for the three variables.
fn variables(o: &Output) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| {
            ["LD_PRELOAD=", "LYNXFS_POOL=", "LYNXFS_AT="]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

#[test]
fn the_environment_reaches_the_command() {
    let _w = watchdog("environment", Duration::from_secs(300));
    let d = shared_dir();
    let pool = d.path().join("p.pool");
    mkfs(&pool);
    let at = d.path().join("served");
    std::fs::create_dir(&at).unwrap();
    // Both given through symlinks: the program sees canonical paths.
    std::os::unix::fs::symlink(&pool, d.path().join("pool-link")).unwrap();
    std::os::unix::fs::symlink(&at, d.path().join("at-link")).unwrap();
    let other = d.path().join("other.so");
    std::fs::copy(stub_library(), &other).unwrap();

    let mut c = Command::new(BIN);
    c.arg("run")
        .args([os("--pool"), d.path().join("pool-link").as_os_str()])
        .args([os("--at"), d.path().join("at-link").as_os_str()])
        .args(["--", "env"])
        .env("LYNXFS_PRELOAD_LIB", stub_library())
        .env("LD_PRELOAD", &other);
    let o = output_within(&mut c, LIMIT);
    assert!(o.status.success(), "{}", err(&o));
    let canon = |p: &Path| p.canonicalize().unwrap().to_str().unwrap().to_string();
    assert_eq!(
        variables(&o),
        vec![
            format!("LD_PRELOAD={}:{}", canon(stub_library()), canon(&other)),
            format!("LYNXFS_AT={}", canon(&at)),
            format!("LYNXFS_POOL={}", canon(&pool)),
        ]
    );
    // The check attached and detached: the pool is as clean as before.
    let o = output_within(Command::new(BIN).arg("fsck").arg(&pool), LIMIT);
    assert!(o.status.success(), "fsck: {}", err(&o));
}

#[test]
fn a_mounted_pool_and_its_mount_point_find_each_other() {
    let _w = watchdog("mounted", Duration::from_secs(300));
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing");
    let d = shared_dir();
    let pool = d.path().join("p.pool");
    mkfs(&pool);
    let mnt = tempfile::tempdir().unwrap();
    let mnt = mnt.path().canonicalize().unwrap();
    let o = output_within(Command::new(BIN).arg("mount").arg(&pool).arg(&mnt), LIMIT);
    assert!(o.status.success(), "mount: {}", err(&o));

    let env = [os("--"), os("env")];
    let by_pool = run(&[&[os("--pool"), pool.as_os_str()], &env[..]].concat());
    let by_dir = run(&[&[os("--at"), mnt.as_os_str()], &env[..]].concat());
    // Another pool's mount point is not this pool's directory.
    let other = d.path().join("other.pool");
    mkfs(&other);
    let marker = d.path().join("ran");
    let mixed = run(&touch_args(&other, &mnt, &marker));

    let o = output_within(Command::new(BIN).arg("umount").arg(&mnt), LIMIT);
    assert!(o.status.success(), "umount: {}", err(&o));

    let want = vec![
        format!("LD_PRELOAD={}", stub_library().display()),
        format!("LYNXFS_AT={}", mnt.display()),
        format!("LYNXFS_POOL={}", pool.canonicalize().unwrap().display()),
    ];
    assert!(by_pool.status.success(), "{}", err(&by_pool));
    assert_eq!(variables(&by_pool), want);
    assert!(by_dir.status.success(), "{}", err(&by_dir));
    assert_eq!(variables(&by_dir), want);
    refused(&mixed, "the mount point of another pool", &marker);
}

/// `lynxfs run --pool POOL --at DIR -- sh -c SCRIPT`, its runtime files in `runtime`.
fn sh_command(pool: &Path, at: &Path, runtime: &Path, script: &str) -> Command {
    let mut c = Command::new(BIN);
    c.arg("run")
        .args([
            "--pool".as_ref(),
            pool.as_os_str(),
            "--at".as_ref(),
            at.as_os_str(),
        ])
        .args(["--", "sh", "-c", script])
        .env_remove("LD_PRELOAD")
        .env("LYNXFS_PRELOAD_LIB", stub_library())
        .env("LYNXFS_RUNTIME_DIR", runtime);
    c
}

/// A scratch directory holding a new pool and an empty directory for its runtime files.
fn pool_with_runtime_dir() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = shared_dir();
    let pool = d.path().join("p.pool");
    mkfs(&pool);
    let runtime = d.path().join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    (d, pool, runtime)
}

/// The pools' session directories (`lynxfs-*`, each holding a runtime file) in `dir`.
fn runtime_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("lynxfs-"))
        .collect();
    v.sort();
    v
}

#[test]
fn the_pool_stays_attached_while_the_program_runs_and_is_detached_when_run_returns() {
    let _w = watchdog("held_pool", Duration::from_secs(300));
    let (d, pool, runtime) = pool_with_runtime_dir();
    // The program never touches the pool (the stub library does nothing): a runtime
    // file exists only because `lynxfs run` holds the pool for it.
    let o = output_within(
        &mut sh_command(&pool, d.path(), &runtime, "ls \"$LYNXFS_RUNTIME_DIR\""),
        LIMIT,
    );
    assert!(o.status.success(), "{}", err(&o));
    let listed = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        listed.lines().filter(|l| l.starts_with("lynxfs-")).count(),
        1,
        "the program saw: {listed}"
    );
    // Detached before it returned: the last process attached removes the file.
    assert_eq!(runtime_files(&runtime), Vec::<String>::new());
    // Nothing is left holding the pool: it can be opened exclusively at once.
    drop(
        lynxfs::Pool::open(
            &pool,
            lynxfs::Access::Exclusive,
            lynxfs::pmem::PmemBackend::default(),
        )
        .unwrap(),
    );
}

#[test]
fn the_programs_exit_code_or_killing_signal_is_runs_own() {
    use std::os::unix::process::ExitStatusExt;
    let _w = watchdog("exit_status", Duration::from_secs(300));
    let (d, pool, runtime) = pool_with_runtime_dir();
    let o = output_within(&mut sh_command(&pool, d.path(), &runtime, "exit 7"), LIMIT);
    assert_eq!(o.status.code(), Some(7), "{}", err(&o));
    let o = output_within(
        &mut sh_command(&pool, d.path(), &runtime, "kill -TERM $$"),
        LIMIT,
    );
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGTERM),
        "{:?}: {}",
        o.status,
        err(&o)
    );
    assert_eq!(runtime_files(&runtime), Vec::<String>::new());
}

#[test]
fn a_signal_sent_to_run_reaches_the_program() {
    let _w = watchdog("forwarded_signal", Duration::from_secs(300));
    let (d, pool, runtime) = pool_with_runtime_dir();
    let ready = d.path().join("ready");
    let script = format!(
        "trap 'exit 9' USR1; touch '{}'; while :; do sleep 0.05; done",
        ready.display()
    );
    let mut child = sh_command(&pool, d.path(), &runtime, &script)
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    lynxfs_test_support::watchdog::wait_until("the program's trap", LIMIT, || ready.exists());
    // SAFETY: kill takes plain integers; the pid is our own child's, not yet waited for.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGUSR1) };
    let status = lynxfs_test_support::child::wait_within(&mut child, LIMIT);
    assert_eq!(status.code(), Some(9), "{status:?}");
    assert_eq!(runtime_files(&runtime), Vec::<String>::new());
}
