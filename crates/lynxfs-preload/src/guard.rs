//! Calls made while this library is already at work (the engine opening its own
//! files, Rust's standard library reading the environment) go straight to the C
//! library: they are never pool calls, and routing them could recurse.

use std::cell::Cell;

use lynxfs::runtime::fork_gate;

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Held while this library works on a call. The outermost one also holds a pass
/// through the fork gate ([`lynxfs::runtime::fork_gate`]: a fork waits until the
/// call is over, so a child never inherits this library's or the engine's
/// process-local state half changed) and opens the engine's protection key for the
/// thread ([`lynxfs::pmem::keys`]): only this library's code (and the engine's) runs
/// between entering and leaving.
pub struct Inside {
    was: bool,
    _key: Option<lynxfs::pmem::keys::Open>,
    _pass: Option<fork_gate::Pass>,
}

impl Inside {
    pub fn enter() -> Inside {
        // The pass first, before this thread counts as inside: it may wait for a
        // fork, and a signal handler that interrupts the wait must wait too, not
        // take itself for a nested call.
        let pass = (!inside()).then(fork_gate::Pass::enter);
        let was = INSIDE.try_with(|i| i.replace(true)).unwrap_or(true);
        Inside {
            was,
            _key: (!was).then(lynxfs::pmem::keys::Open::enter),
            _pass: pass,
        }
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let was = self.was;
        let _ = INSIDE.try_with(|i| i.set(was));
    }
}

/// `f`, which takes one of this library's process-local locks (the fd tables, the
/// stdio streams' table) possibly outside a call (`close`, `dup2`, `fileno`,
/// `fclose` of a pool stream), under a pass through the fork gate: a fork waits until
/// the lock is let go, so a child never inherits it held. Without it a child whose
/// attach waited for the engine fds' table hung for good (the fork storm of
/// tests/hostile.rs, 3 runs in 9).
#[inline]
pub fn passing<R>(f: impl FnOnce() -> R) -> R {
    let _pass = fork_gate::Pass::enter();
    f()
}

/// Whether the calling thread is inside this library already.
pub fn inside() -> bool {
    // A thread being torn down has no locals left: treat it as inside (C library).
    INSIDE.try_with(Cell::get).unwrap_or(true)
}

/// A thread-local with a destructor: gone once the C library has run the thread's
/// thread-local destructors, which at `exit` happens before the exit handlers (and
/// stdio's last flushes) run.
struct Alive;

impl Drop for Alive {
    fn drop(&mut self) {}
}

thread_local! {
    static ALIVE: Alive = const { Alive };
}

/// Whether this thread's thread-locals are usable (the engine's lock-free maps need
/// them). Touching it also makes it count for this thread.
pub fn alive() -> bool {
    ALIVE.try_with(|_| ()).is_ok()
}

/// Runs `f` here, or, once this thread's thread-locals are gone (calls made by exit
/// handlers), on a thread of its own.
pub fn on_live_thread<R>(f: impl FnOnce() -> R) -> R {
    if alive() {
        return f();
    }
    /// Moves the call and its answer across: the calling thread waits for the
    /// helper thread, so nothing they refer to is used by both at once.
    struct Carry<T>(T);
    // SAFETY: see above: the caller is blocked in `join` while the helper runs.
    unsafe impl<T> Send for Carry<T> {}
    impl<T> Carry<T> {
        // A method, so the closure below captures the whole (Send) wrapper.
        fn take(self) -> T {
            self.0
        }
    }
    let job = Carry(f);
    let done = std::thread::scope(|s| {
        s.spawn(move || {
            // This thread works for the caller's call: inside, as the caller
            // would be (its pass and its key), since the caller's own could not be.
            let _inside = Inside::enter();
            let f = job.take();
            Carry(f())
        })
        .join()
    });
    match done {
        Ok(Carry(r)) => r,
        Err(_) => {
            crate::real::say("a call at exit failed");
            // SAFETY: ends the process, as a panic here would.
            unsafe { libc::abort() }
        }
    }
}
