//! Time bounds for tests that mount, spawn or wait: a hang (a daemon that never
//! exits, a mount nobody answers) fails the test instead of stalling CI.

use std::io::Read;
use std::io::Write;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Aborts the whole test process, saying why, if still armed after its limit (for
/// what no child-process timeout covers: a file operation on a mount that hangs).
/// Disarmed when dropped.
pub struct Watchdog {
    done: Arc<(Mutex<bool>, Condvar)>,
}

/// Arms a watchdog for `what` (a test's name) with `limit`.
pub fn watchdog(what: &str, limit: Duration) -> Watchdog {
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let shared = done.clone();
    let what = what.to_string();
    std::thread::spawn(move || {
        let (lock, cv) = &*shared;
        let start = Instant::now();
        let mut finished = lock.lock().unwrap_or_else(|e| e.into_inner());
        while !*finished {
            let Some(left) = limit.checked_sub(start.elapsed()) else {
                // Straight to the process's stderr: the test harness captures eprintln!
                // (in threads a test spawns too), and would lose it in the abort.
                let _ = writeln!(
                    std::io::stderr(),
                    "watchdog: {what} still running after {limit:?}: aborting"
                );
                std::process::abort();
            };
            finished = cv
                .wait_timeout(finished, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    });
    Watchdog { done }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let (lock, cv) = &*self.done;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
    }
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

/// Runs `cmd` to completion with its output captured, within `limit`.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
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

/// Waits until `cond` holds, failing the test after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
