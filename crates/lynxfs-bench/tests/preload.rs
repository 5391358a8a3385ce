//! The `preload` target's plumbing: a tiny run of `syscalls`, `personalities` and
//! `apps` with `lynxfs bench SUITE --target preload`, whose numbers must be finite and
//! positive, and which must leave nothing behind (its pool, its directory, the child's
//! report, runtime files).
//!
//! `cargo test` builds neither cdylibs nor other packages' binaries: the test builds
//! liblynxfs_preload.so and lynxfs once, with its own profile, into its own target
//! directory. Every run is a process group killed (failing the test) past its limit.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Duration;

/// The engine tests' watchdog, which aborts a test that hangs anywhere.
#[path = "../../lynxfs/tests/common/mod.rs"]
mod common;

/// How long one `lynxfs bench` (or the build) may run.
const LIMIT: Duration = Duration::from_secs(300);
/// How long a whole test may run (the build included).
const TEST_LIMIT: Duration = Duration::from_secs(600);

/// One run at a time: each makes a 4 GiB pool in /dev/shm.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// target/<profile>/: the test binary is in its deps/.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    deps.parent().expect("profile directory").to_path_buf()
}

/// The lynxfs executable, built (with the preload library next to it) once per test
/// binary; a failed build fails every test, saying why.
fn lynxfs() -> &'static Path {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(build)
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn build() -> Result<PathBuf, String> {
    let dir = target_dir();
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_string(),
        Some(p) => p.to_string(),
        None => return Err(format!("no profile in {}", dir.display())),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "--locked"])
        .args([
            "-p",
            "lynxfs-preload",
            "-p",
            "lynxfs-cli",
            "--profile",
            &profile,
        ])
        .env(
            "CARGO_TARGET_DIR",
            dir.parent().ok_or("no target directory")?,
        )
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    let out = run_bounded(cmd, "cargo build");
    if !out.status.success() {
        return Err(format!(
            "cargo build -p lynxfs-preload -p lynxfs-cli: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    for p in [dir.join("lynxfs"), dir.join("liblynxfs_preload.so")] {
        if !p.exists() {
            return Err(format!("the build made no {}", p.display()));
        }
    }
    Ok(dir.join("lynxfs"))
}

/// Runs `cmd` in a process group of its own with its output captured; kills the whole
/// group and fails the test if it outlives [`LIMIT`].
fn run_bounded(mut cmd: Command, what: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: spawn {cmd:?}: {e}"));
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let _ = (out.read_to_end(&mut o), err.read_to_end(&mut e));
        let _ = tx.send((o, e));
    });
    let Ok((stdout, stderr)) = rx.recv_timeout(LIMIT) else {
        kill_group(&child);
        let _ = child.wait();
        panic!("{what}: still running after {LIMIT:?}: killed");
    };
    let status = child.wait().expect("wait for the child");
    Output {
        status,
        stdout,
        stderr,
    }
}

/// SIGKILL to every process of `child`'s group (it leads one).
fn kill_group(child: &Child) {
    let pgid = child.id() as libc::pid_t;
    // SAFETY: kill takes plain integers; the group is the child's own, made for it.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

/// Runs `lynxfs bench SUITE --target preload ARGS --out OUT` with its temporary files
/// and runtime files in directories of its own; returns the report's JSON and checks
/// that the run left nothing behind.
fn bench(suite: &str, args: &[&str]) -> serde_json::Value {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let lynxfs = lynxfs();
    let out = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let runtime = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(lynxfs);
    cmd.args(["bench", suite, "--target", "preload"])
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
    let pool = report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str()?.strip_prefix("preload: pool "))
        .map(|rest| rest.split(',').next().unwrap().to_string())
        .next()
        .unwrap_or_else(|| panic!("no note names the pool: {stdout}"));
    assert!(!Path::new(&pool).exists(), "{suite} left its pool {pool}");
    report
}

/// The report's only column is `preload`, and every value is finite and positive.
fn check_preload_column(report: &serde_json::Value, rows: usize) {
    assert_eq!(
        report["columns"],
        serde_json::json!(["preload"]),
        "{report}"
    );
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
    let _w = common::watchdog("syscalls_run_in_a_preloaded_child", TEST_LIMIT);
    let r = bench("syscalls", &["--files", "20"]);
    check_preload_column(&r, 11);
}

#[test]
fn personalities_run_in_a_preloaded_child() {
    let _w = common::watchdog("personalities_run_in_a_preloaded_child", TEST_LIMIT);
    let r = bench("personalities", &["--files", "20", "--max-threads", "2"]);
    check_preload_column(&r, 6);
}

#[test]
fn apps_run_gnu_tools_under_the_preload() {
    let _w = common::watchdog("apps_run_gnu_tools_under_the_preload", TEST_LIMIT);
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
    check_preload_column(&r, 7);
}
