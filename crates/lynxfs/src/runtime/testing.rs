//! Test-only stop points: places in the engine where a test can make a process stop
//! for good (holding whatever it holds there), so that another process can kill it
//! and check that the survivors neither hang nor see torn state
//! (`tests/multiprocess.rs`).
//!
//! A point is armed by the environment variable [`STOP_ENV`] naming it; the variable is
//! read once per process, so an unarmed point costs one load and a compare.

use std::sync::OnceLock;
use std::time::Duration;

/// The environment variable naming the stop point armed in this process.
pub const STOP_ENV: &str = "LYNXFS_TEST_STOP";

/// What [`stop_here`] writes to stderr when it stops, before the point's name.
pub const STOPPED: &str = "lynxfs-test-stopped ";

/// The armed point, read from [`STOP_ENV`] at the first call.
fn armed() -> Option<&'static str> {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    ARMED
        .get_or_init(|| std::env::var(STOP_ENV).ok().filter(|v| !v.is_empty()))
        .as_deref()
}

/// If `point` is the armed stop point, say so on stderr (one line: [`STOPPED`] and
/// the point) and sleep until killed; otherwise return at once.
pub fn stop_here(point: &'static str) {
    if armed() != Some(point) {
        return;
    }
    let line = format!("{STOPPED}{point}\n");
    // One write(2), so the line arrives whole even if other threads write too.
    // SAFETY: the buffer is valid for `line.len()` bytes for the duration of the call.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

// Unit tests only: closures the calling thread runs once at a named point of the
// engine ([`race_here`]), to make a race with another operation happen exactly
// there (the other operation runs on the same thread, at that point).
#[cfg(test)]
type Race = (&'static str, Box<dyn FnOnce()>);

#[cfg(test)]
thread_local! {
    static RACES: std::cell::RefCell<Vec<Race>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Unit tests only: run `f` once, the next time this thread passes `point`.
#[cfg(test)]
pub fn on_race(point: &'static str, f: impl FnOnce() + 'static) {
    RACES.with(|r| r.borrow_mut().push((point, Box::new(f))));
}

/// Unit tests only: the points armed by [`on_race`] not passed yet.
#[cfg(test)]
pub fn races_left() -> Vec<&'static str> {
    RACES.with(|r| r.borrow().iter().map(|(p, _)| *p).collect())
}

/// A point where a unit test may run another operation ([`on_race`]); nothing
/// outside unit tests.
#[inline]
pub fn race_here(point: &'static str) {
    #[cfg(test)]
    {
        let armed = RACES.with(|r| {
            let mut r = r.borrow_mut();
            let at = r.iter().position(|(p, _)| *p == point);
            at.map(|i| r.remove(i).1)
        });
        if let Some(f) = armed {
            f();
        }
    }
    let _ = point;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unarmed_point_returns() {
        // The test runner never sets the variable to this name.
        stop_here("no-such-point");
        assert_ne!(armed(), Some("no-such-point"));
    }
}
