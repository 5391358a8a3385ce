//! Time bounds for tests that mount, spawn or wait: a hang (a mount nobody answers,
//! a lock wait that never ends) fails the test run instead of stalling CI.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Aborts the whole test process, saying why, if still armed after its limit (for
/// what no child-process timeout covers: a file operation on a mount that hangs, a
/// lock that is never granted). Disarmed when dropped.
#[must_use = "the watchdog is disarmed when dropped: bind it to a variable (`let _w = ...`)"]
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

/// Waits until `cond` holds, failing the test after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_until_returns_once_the_condition_holds_and_fails_past_its_limit() {
        let mut n = 0;
        wait_until("counting", Duration::from_secs(10), || {
            n += 1;
            n == 3
        });
        assert_eq!(n, 3);
        let never =
            std::panic::catch_unwind(|| wait_until("never", Duration::from_millis(30), || false));
        assert!(never.is_err());
    }
}
