//! The C API from C: `examples/example.c` and `tests/checks.c` are compiled with `cc`
//! against liblynxfs.so (built here by `cargo build` in the same target directory and
//! profile: `cargo test` does not build a cdylib), and run on fresh pools in
//! /dev/shm; the pools are then read back through the Rust API. Every process runs
//! under a time limit that kills it and fails the test rather than hang.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use engine::pmem::PmemBackend;
use engine::{Cred, Fs, MkfsOptions, Pool};
use lynxfs_test_support::{built, child};

/// How long one compiler or C program may run.
const LIMIT: Duration = Duration::from_secs(120);

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `cmd`, killing it and failing the test when it outlives [`LIMIT`].
fn run(cmd: &mut Command) -> Output {
    child::run_bounded(cmd, &format!("{cmd:?}"), LIMIT)
}

/// target/<profile>/liblynxfs.so, built (once per test binary) by cargo with this
/// test's profile, so that it is the library of the sources under test.
fn library_dir() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(build_library).clone().unwrap()
}

fn build_library() -> Result<PathBuf, String> {
    built::build(&["liblynxfs.so"])
}

/// Compiles the C file `src` (relative to the crate) into `dir`, linked with
/// liblynxfs.so.
fn compile(src: &str, dir: &Path) -> PathBuf {
    let lib = library_dir();
    let exe = dir.join(Path::new(src).file_stem().unwrap());
    let out = run(Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-pthread", "-I"])
        .arg(manifest_dir().join("include"))
        .arg(manifest_dir().join(src))
        .arg("-L")
        .arg(&lib)
        .arg("-llynxfs")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&exe));
    assert!(
        out.status.success(),
        "cc {src}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// A pool file in a new directory of /dev/shm (never a name in /dev/shm itself, which
/// another user could have taken first), removed with it when dropped.
struct TestPool {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl TestPool {
    fn new(test: &str, size: u64) -> TestPool {
        let (p, dir) = TestPool::path(test);
        let mut o = MkfsOptions::new(size);
        o.lanes = 2;
        Pool::mkfs(&p, &o, PmemBackend::default()).expect("mkfs");
        TestPool { path: p, _dir: dir }
    }

    /// `DIR/TEST.pool` in a new directory DIR, where nothing is yet.
    fn path(test: &str) -> (PathBuf, tempfile::TempDir) {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        (dir.path().join(format!("{test}.pool")), dir)
    }
}

/// Runs check `name` of checks.c on `pool` (may be empty); returns its stdout.
fn check(name: &str, pool: &Path) -> String {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("tests/checks.c", dir.path());
    let out = run(Command::new(exe).arg(name).arg(pool));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains(&format!("ok {name}")),
        "check {name}: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs check `name` of checks.c on a fresh pool and a fresh tmpfs directory, where
/// it takes the same steps through the C API and through the kernel and compares
/// each answer.
fn check_against_tmpfs(name: &str) {
    let pool = TestPool::new(name, 16 << 20);
    let tmpfs = tempfile::tempdir_in("/dev/shm").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("tests/checks.c", dir.path());
    let out = run(Command::new(exe)
        .arg(name)
        .arg(&pool.path)
        .arg(tmpfs.path()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("ok {name}")),
        "check {name}: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The names in directory `dir` of the pool, sorted, "." and ".." left out.
fn names(fs: &Fs, dir: &str) -> Vec<String> {
    let s = fs.session(Cred::root());
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

#[test]
fn example_runs_and_leaves_its_tree() {
    let pool = TestPool::new("example", 16 << 20);
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("examples/example.c", dir.path());
    let out = run(Command::new(exe).arg(&pool.path));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "example: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "made /capi",
        "wrote and read back 13 bytes",
        "stat: size 13 mode 644",
        "entry: hello.txt",
        "entry: scratch",
        "renamed hello.txt to greeting.txt",
        "detached",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "no '{line}' in:\n{stdout}"
        );
    }
    let fs = Fs::open(&pool.path).unwrap();
    assert_eq!(names(&fs, "/capi"), ["greeting.txt"]);
    let s = fs.session(Cred::root());
    let fd = s.open("/capi/greeting.txt", libc::O_RDONLY, 0).unwrap();
    let mut buf = [0u8; 64];
    let n = fs.read(fd, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello from C\n");
    fs.close().unwrap();
}

#[test]
fn example_fails_on_a_second_run() {
    // mkdir of an existing /capi: the example must report it and exit nonzero.
    let pool = TestPool::new("again", 16 << 20);
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("examples/example.c", dir.path());
    assert!(run(Command::new(&exe).arg(&pool.path)).status.success());
    let out = run(Command::new(&exe).arg(&pool.path));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("mkdir: File exists"));
}

#[test]
fn null_pointers_are_errors() {
    check("null", Path::new(""));
}

#[test]
fn missing_pool_is_enoent() {
    let (p, _dir) = TestPool::path("missing");
    check("missing", &p);
}

#[test]
fn foreign_file_is_not_a_pool() {
    let (p, _dir) = TestPool::path("foreign");
    std::fs::write(&p, vec![0x5a; 8 << 20]).unwrap();
    check("foreign", &p);
}

#[test]
fn long_names_and_bad_paths() {
    let pool = TestPool::new("names", 16 << 20);
    check("names", &pool.path);
    let fs = Fs::open(&pool.path).unwrap();
    assert_eq!(names(&fs, "/"), ["n".repeat(255)]);
    fs.close().unwrap();
}

#[test]
fn bad_descriptors_are_ebadf() {
    let pool = TestPool::new("badfd", 16 << 20);
    check("badfd", &pool.path);
}

#[test]
fn full_pool_is_enospc_and_recovers() {
    let pool = TestPool::new("full", 8 << 20);
    let out = check("full", &pool.path);
    assert!(out.contains("bytes before ENOSPC"), "{out}");
    let fs = Fs::open(&pool.path).unwrap();
    assert_eq!(names(&fs, "/"), ["small"]);
    assert_eq!(fs.session(Cred::root()).stat("/small").unwrap().size, 4096);
    fs.close().unwrap();
}

#[test]
fn path_calls() {
    let pool = TestPool::new("paths", 16 << 20);
    check("paths", &pool.path);
    let fs = Fs::open(&pool.path).unwrap();
    assert_eq!(names(&fs, "/"), ["c", "s"]);
    let st = fs.session(Cred::root()).stat("/c").unwrap();
    assert_eq!((st.size, st.mode & 0o7777, st.gid), (10, 0o640, 0));
    fs.close().unwrap();
}

#[test]
fn threads_share_a_handle() {
    let pool = TestPool::new("threads", 64 << 20);
    check("threads", &pool.path);
    let fs = Fs::open(&pool.path).unwrap();
    assert_eq!(names(&fs, "/t").len(), 4 * 200);
    fs.close().unwrap();
}

/// Open directories removed (rmdir, a rename over them) answer as on tmpfs: fstat
/// (nlink 0), an empty listing, -ENOENT for what is made in them, ".." their old
/// parent, a removed working directory without a path.
#[test]
fn removed_directories_answer_as_on_tmpfs() {
    check_against_tmpfs("removed");
}

/// O_TMPFILE files and lynxfs_linkat (AT_EMPTY_PATH; O_EXCL ones stay unnamed), and
/// what open refuses with O_TMPFILE, as on tmpfs.
#[test]
fn tmpfiles_answer_as_on_tmpfs() {
    check_against_tmpfs("tmpfiles");
}

/// lynxfs_fiemap: a sparse file's extents (the last flagged) are the data
/// SEEK_DATA/SEEK_HOLE find; counting, short arrays and refusals as the ioctl's.
#[test]
fn fiemap_lists_a_sparse_files_extents() {
    let pool = TestPool::new("fiemap", 16 << 20);
    check("fiemap", &pool.path);
}
