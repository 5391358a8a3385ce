//! Child processes and watchdogs for the conformance tests.
//!
//! A test that needs another process (a mount owned by a non-root user, racers in
//! separate processes, a reader that opens a file afresh) re-runs this test binary,
//! filtered to that same test, with [`ROLE`] set in the environment: the test sees
//! the role first thing and plays it instead of its usual part. Every child is waited
//! for with a time limit, and every test that mounts runs under a [`lynxfs_test_support::Watchdog`], so a
//! hang fails the run instead of stalling it.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The environment variable naming the part a re-run test binary plays.
pub const ROLE: &str = "LYNXFS_CONFORMANCE_ROLE";

/// The role this process was started to play, if it is such a child, and only if it
/// is meant for `test` (roles are `test:arguments`).
pub fn role_for(test: &str) -> Option<String> {
    let role = std::env::var(ROLE).ok()?;
    let (name, args) = role.split_once(':')?;
    (name == test).then(|| args.to_string())
}

/// Credentials a child runs with (real, effective and saved alike).
#[derive(Clone, Debug)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// Makes `cmd` start with `creds`, set in the child between fork and exec: the
/// supplementary groups first, then the group, then the user (after which the others
/// could no longer be changed).
pub fn with_creds(cmd: &mut Command, creds: &Creds) {
    let creds = creds.clone();
    // SAFETY: the closure runs in the forked child before exec and makes only
    // async-signal-safe system calls on data it owns.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(creds.groups.len(), creds.groups.as_ptr()) != 0
                || libc::setgid(creds.gid) != 0
                || libc::setuid(creds.uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// What a finished child left behind.
#[derive(Debug)]
pub struct Finished {
    /// It exited with status 0 (for a role: and the test ran and passed).
    pub success: bool,
    /// Its standard output and error, in that order.
    pub output: String,
}

/// Runs `cmd` to the end, at most `limit`; on time out kills it and panics.
pub fn run(mut cmd: Command, limit: Duration) -> Finished {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let desc = format!("{cmd:?}");
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("starting {desc}: {e}"));
    let pid = child.id();
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let mut e = String::new();
        let _ = out.read_to_string(&mut text);
        let _ = err.read_to_string(&mut e);
        let status = child.wait();
        let _ = tx.send((status, text + &e));
    });
    match rx.recv_timeout(limit) {
        Ok((status, output)) => Finished {
            success: status.map(|s| s.success()).unwrap_or(false),
            output,
        },
        Err(_) => {
            // SAFETY: kill takes plain integers; the pid is our own unreaped child.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("{desc} did not finish within {limit:?}");
        }
    }
}

/// A copy of this test binary that every user may run: the original may sit under a
/// directory other users cannot enter (a clone in /root, say).
pub struct ExeCopy {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl ExeCopy {
    pub fn new() -> ExeCopy {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir for the test binary");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.path().join("conformance-test");
        // Copied by `cp`, not by this process: a file this process held open for
        // writing would be inherited by a child another test thread forks meanwhile,
        // and exec of the copy would then fail with ETXTBSY until that child execs.
        let cp = Command::new("cp")
            .arg("--")
            .arg(std::env::current_exe().expect("current_exe"))
            .arg(&path)
            .status()
            .expect("running cp");
        assert!(cp.success(), "copying the test binary: {cp}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        ExeCopy { _dir: dir, path }
    }
}

/// A command that re-runs `test` (this binary, as `exe`) in the role `test:args`.
pub fn rerun(exe: &Path, test: &str, args: &str) -> Command {
    let mut cmd = Command::new(exe);
    cmd.args([
        test,
        "--exact",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE, format!("{test}:{args}"))
    .env_remove("RUST_TEST_THREADS")
    .env("RUST_BACKTRACE", "0")
    .current_dir("/");
    cmd
}

/// Changes the owner of `path`.
pub fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
}

/// Runs a command made by [`rerun`] as [`run`] does; success needs the test to have
/// run (not been filtered out) and passed.
pub fn run_role(cmd: Command, limit: Duration) -> Finished {
    let f = run(cmd, limit);
    Finished {
        success: f.success && f.output.contains("test result: ok. 1 passed"),
        output: f.output,
    }
}
