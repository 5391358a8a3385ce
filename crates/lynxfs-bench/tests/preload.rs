//! The `preload` target's plumbing: a tiny run of `syscalls`, `personalities` and
//! `apps` with `lynxfs bench SUITE --target preload` (and of `hybrid-fsync` with
//! `--target hybrid-preload`, a hybrid pool), whose numbers must be finite and
//! positive, and which must leave nothing behind (its pool, its directory, the child's
//! report, runtime files).
//!
//! `cargo test` builds neither cdylibs nor other packages' binaries: the test builds
//! liblynxfs_preload.so, lynxfs and lynxfs-bench (which `lynxfs bench` runs) once,
//! with its own profile, into its own target directory. Every run is a process group killed (failing the test) past its limit.

use lynxfs_test_support::{built, child, watchdog};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// How long one `lynxfs bench` (or the build) may run.
const LIMIT: Duration = Duration::from_secs(300);
/// How long a whole test may run (the build included).
const TEST_LIMIT: Duration = Duration::from_secs(600);

/// One run at a time: each makes a 4 GiB pool in /dev/shm.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The lynxfs executable, built (with the preload library next to it, and beside
/// `lynxfs-bench`) once per test binary; a failed build fails every test, saying why.
fn lynxfs() -> &'static Path {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            built::build(&["lynxfs", "lynxfs-bench", "liblynxfs_preload.so"])
                .map(|d| d.join("lynxfs"))
        })
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn run_bounded(mut cmd: Command, what: &str) -> Output {
    child::run_bounded(&mut cmd, what, LIMIT)
}

/// Runs `lynxfs bench SUITE --target preload ARGS --out OUT` with its temporary files
/// and runtime files in directories of its own; returns the report's JSON and checks
/// that the run left nothing behind.
fn bench(suite: &str, args: &[&str]) -> serde_json::Value {
    bench_on("preload", suite, args)
}

/// [`bench`] with `--target TARGET` (`preload` or `hybrid-preload`).
fn bench_on(target: &str, suite: &str, args: &[&str]) -> serde_json::Value {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let lynxfs = lynxfs();
    let out = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let runtime = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(lynxfs);
    cmd.args(["bench", suite, "--target", target])
        .args(args)
        .arg("--out")
        .arg(out.path())
        .env("TMPDIR", tmp.path())
        .env("LYNXFS_RUNTIME_DIR", runtime.path());
    let o = run_bounded(cmd, suite);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "lynxfs bench {suite}: {}\n{stdout}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let json = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .unwrap_or_else(|| panic!("no JSON report; stdout:\n{stdout}"));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    for (what, dir) in [("TMPDIR", tmp.path()), ("runtime", runtime.path())] {
        let left: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
        assert!(left.is_empty(), "{suite} left {left:?} in its {what}");
    }
    let files = report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str()?.strip_prefix(&format!("{target}: pool ")))
        .next()
        .unwrap_or_else(|| panic!("no note names the pool: {stdout}"));
    let pool = files.split(',').next().unwrap();
    assert!(!Path::new(pool).exists(), "{suite} left its pool {pool}");
    if let Some(device) = files.split(", data device ").nth(1) {
        let device = device.split(' ').next().unwrap();
        assert!(
            !Path::new(device).exists(),
            "{suite} left its device {device}"
        );
    }
    report
}

/// The report's only column is `preload`, and every value is finite and positive.
fn check_preload_column(report: &serde_json::Value, rows: usize) {
    check_column(report, "preload", rows)
}

/// The report's only column is `column`, and every value is finite and positive.
fn check_column(report: &serde_json::Value, column: &str, rows: usize) {
    assert_eq!(report["columns"], serde_json::json!([column]), "{report}");
    let got = report["rows"].as_array().unwrap();
    assert_eq!(got.len(), rows, "{report}");
    for r in got {
        let v = r["values"][0].as_f64();
        assert!(
            v.is_some_and(|v| v.is_finite() && v > 0.0),
            "{}: {v:?}",
            r["op"]
        );
    }
}

#[test]
fn syscalls_run_in_a_preloaded_child() {
    let _w = watchdog("syscalls_run_in_a_preloaded_child", TEST_LIMIT);
    let r = bench("syscalls", &["--files", "20"]);
    check_preload_column(&r, 16);
}

#[test]
fn statall_and_rename_run_in_a_preloaded_child() {
    let _w = watchdog("statall_and_rename_run_in_a_preloaded_child", TEST_LIMIT);
    let r = bench("statall", &["--files", "300"]);
    check_preload_column(&r, 2);
    let r = bench("rename", &["--files", "10"]);
    check_preload_column(&r, 3);
}

#[test]
fn hybrid_fsync_runs_in_a_preloaded_child_on_a_hybrid_pool() {
    let _w = watchdog(
        "hybrid_fsync_runs_in_a_preloaded_child_on_a_hybrid_pool",
        TEST_LIMIT,
    );
    let r = bench_on(
        "hybrid-preload",
        "hybrid-fsync",
        &["--files", "20", "--file-mib", "1"],
    );
    // Four create sizes, append, the committed file's fsync, varmail at 1, 4, 16, 64.
    check_column(&r, "hybrid-preload", 10);
}

#[test]
fn personalities_run_in_a_preloaded_child() {
    let _w = watchdog("personalities_run_in_a_preloaded_child", TEST_LIMIT);
    let r = bench("personalities", &["--files", "20", "--max-threads", "2"]);
    check_preload_column(&r, 6);
}

#[test]
fn apps_run_gnu_tools_under_the_preload() {
    let _w = watchdog("apps_run_gnu_tools_under_the_preload", TEST_LIMIT);
    // A small tree of the shape apps expects: one top directory holding fs/.
    let src = tempfile::tempdir().unwrap();
    let top = src.path().join("tree");
    for d in ["fs", "kernel"] {
        std::fs::create_dir_all(top.join(d)).unwrap();
        for i in 0..10 {
            std::fs::write(top.join(d).join(format!("f{i}.c")), "int x;\n".repeat(i)).unwrap();
        }
    }
    let tar = src.path().join("tree.tar");
    let mut cmd = Command::new("tar");
    cmd.arg("-cf")
        .arg(&tar)
        .arg("-C")
        .arg(src.path())
        .arg("tree");
    assert!(run_bounded(cmd, "tar -cf").status.success());
    let r = bench("apps", &["--tree", tar.to_str().unwrap()]);
    // tar, du and find (cold, warm), gzip, rm: 7; git (3) and sqlite3 (2), which the
    // README's test command installs.
    check_preload_column(&r, 12);
}
