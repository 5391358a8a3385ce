//! Children run within a time limit: a child that hangs is killed and fails the test
//! instead of stalling CI.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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
        .process_group(0);
    spawn_exec_ready(cmd).unwrap_or_else(|e| panic!("{what}: spawn {cmd:?}: {e}"))
}

/// `cmd.spawn()`, again while the kernel says the program is busy (ETXTBSY, for at
/// most a second): a test that has just written an executable (a copy of `lynxfs`)
/// can meet a fork made meanwhile by another thread of the test, whose child holds
/// the written file's descriptor until its own exec closes it.
pub fn spawn_exec_ready(cmd: &mut Command) -> std::io::Result<Child> {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            r => return r,
        }
    }
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

/// Waits for `child` to exit; kills it and fails the test after `limit`.
pub fn wait_within(child: &mut Child, limit: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("waiting for a child") {
            return st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child {} still running after {limit:?}: killed", child.id());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `cmd` to completion with its output captured, within `limit` (in this
/// process's group: a daemon it starts may outlive it).
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = spawn_exec_ready(cmd).unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(child.stdout.take().map(|s| Box::new(s) as _));
    let err = drain(child.stderr.take().map(|s| Box::new(s) as _));
    let status = wait_within(&mut child, limit);
    Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// A process holding `path` open (found through `/proc/PID/fd`): a mount's daemon
/// holds its pool.
pub fn holder_of(path: &std::path::Path) -> Option<i32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        if fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == path))
        {
            return Some(pid);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_that_ends_in_time_gives_its_output() {
        let o = run_bounded(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            "sh",
            Duration::from_secs(30),
        );
        assert_eq!(
            (o.stdout.as_slice(), o.stderr.as_slice()),
            (&b"out\n"[..], &b"err\n"[..])
        );
        assert_eq!(o.status.code(), Some(3));
        let o = output_within(Command::new("echo").arg("hi"), Duration::from_secs(30));
        assert_eq!(o.stdout, b"hi\n");
    }

    #[test]
    fn a_child_past_its_limit_is_killed_and_fails_the_test() {
        let start = Instant::now();
        let late = std::panic::catch_unwind(|| {
            run_bounded(
                Command::new("sh").args(["-c", "sleep 60 & sleep 60"]),
                "sleepers",
                Duration::from_millis(200),
            )
        });
        assert!(late.is_err());
        let late = std::panic::catch_unwind(|| {
            output_within(Command::new("sleep").arg("60"), Duration::from_millis(200))
        });
        assert!(late.is_err());
        assert!(start.elapsed() < Duration::from_secs(30));
    }
}
