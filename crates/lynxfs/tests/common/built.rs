//! For tests that run what `cargo test` does not build (cdylibs, other packages'
//! executables): a nested `cargo build` of those packages into the test's own target
//! directory and profile, once per test binary; and children run within a time limit
//! in a process group of their own, so a hang kills the group and fails the test.
#![allow(dead_code)]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long the nested build may take.
const BUILD_LIMIT: Duration = Duration::from_secs(600);

/// target/<profile>/: the test binary is in its deps/.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    deps.parent().expect("profile directory").to_path_buf()
}

/// Builds `packages` with this test's profile into its target directory (from the
/// workspace `manifest_dir` belongs to) and checks that each of `artifacts` (file
/// names in target/<profile>/) exists; returns target/<profile>/.
pub fn build(manifest_dir: &str, packages: &[&str], artifacts: &[&str]) -> Result<PathBuf, String> {
    let dir = target_dir();
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_string(),
        Some(p) => p.to_string(),
        None => return Err(format!("no profile in {}", dir.display())),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "--locked", "--profile", &profile]);
    for p in packages {
        cmd.args(["-p", p]);
    }
    cmd.env(
        "CARGO_TARGET_DIR",
        dir.parent().ok_or("no target directory")?,
    )
    .current_dir(manifest_dir);
    let out = run_bounded(&mut cmd, "cargo build", BUILD_LIMIT);
    if !out.status.success() {
        return Err(format!(
            "cargo build -p {}: {}",
            packages.join(" -p "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    for a in artifacts {
        if !dir.join(a).exists() {
            return Err(format!("the build made no {}", dir.join(a).display()));
        }
    }
    Ok(dir)
}

/// Runs `cmd` in a process group of its own with its output captured; kills the whole
/// group and fails the test if it outlives `limit`.
pub fn run_bounded(cmd: &mut Command, what: &str, limit: Duration) -> Output {
    let child = spawn_group(cmd, what);
    finish_within(child, what, limit)
}

/// Starts `cmd` in a process group of its own (stdin empty, output captured).
pub fn spawn_group(cmd: &mut Command, what: &str) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: spawn {cmd:?}: {e}"))
}

/// Waits for `child` (started by [`spawn_group`]) and its output; kills its group and
/// fails the test if it outlives `limit`.
pub fn finish_within(mut child: Child, what: &str, limit: Duration) -> Output {
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let _ = (out.read_to_end(&mut o), err.read_to_end(&mut e));
        let _ = tx.send((o, e));
    });
    let Ok((stdout, stderr)) = rx.recv_timeout(limit) else {
        kill_group(&child);
        let _ = child.wait();
        panic!("{what}: still running after {limit:?}: killed");
    };
    let status = child.wait().expect("wait for the child");
    Output {
        status,
        stdout,
        stderr,
    }
}

/// SIGKILL to every process of `child`'s group (it leads one: [`spawn_group`]).
pub fn kill_group(child: &Child) {
    let pgid = child.id() as libc::pid_t;
    // SAFETY: kill takes plain integers; the group is the child's own, made for it.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}
