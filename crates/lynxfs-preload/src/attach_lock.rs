//! The lock a thread holds while it attaches the process to its pool, which the fork
//! handler takes too: a fork then waits for an attach in progress in another thread
//! to finish, and the child inherits either a finished attachment or none (never a
//! half-made one, whose "in progress" state no thread of the child would ever end).
//!
//! The wait is safe: an attach runs only the engine's code, which waits on no lock of
//! the program (a program's own `malloc` that takes its locks in a fork handler
//! registered after this library's could be waited on: glibc's malloc takes its
//! locks after every handler ran). Waiters sleep in the kernel (a futex), so the
//! child of a fork inherits no queue of the parent's threads.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use libc::c_long;

/// 0: free; 1: held; 2: held, and a thread may be waiting.
static STATE: AtomicU32 = AtomicU32::new(0);
/// Whether the fork handler holds the lock (it is released after the fork).
static HELD_FOR_FORK: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Whether this thread holds the lock (a fork it makes mid-attach, from a signal
    /// handler, must not wait for itself).
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// The lock, held until dropped.
pub struct Held(());

pub fn lock() -> Held {
    acquire();
    let _ = HOLDING.try_with(|h| h.set(true));
    Held(())
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = HOLDING.try_with(|h| h.set(false));
        release();
    }
}

fn acquire() {
    if STATE
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
    {
        return;
    }
    while STATE.swap(2, Ordering::Acquire) != 0 {
        futex(libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, 2);
    }
}

fn release() {
    if STATE.swap(0, Ordering::Release) == 2 {
        futex(libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1);
    }
}

fn futex(op: i32, val: u32) {
    // SAFETY: a futex wait or wake on a static word; a wait returns at once if the
    // word no longer holds `val`.
    unsafe {
        crate::real::syscall(
            libc::SYS_futex,
            STATE.as_ptr() as c_long,
            op as c_long,
            val as c_long,
            0,
            0,
            0,
        )
    };
}

/// Before a fork: waits for an attach in progress (in another thread) and holds the
/// lock across the fork.
pub fn hold_for_fork() {
    if HOLDING.try_with(Cell::get).unwrap_or(false) {
        // This thread is inside the attach: its child goes on with it (the only
        // thread there is this one).
        return;
    }
    acquire();
    HELD_FOR_FORK.store(true, Ordering::Relaxed);
}

/// After a fork, in the parent (`in_child` false) and in the child: lets go of what
/// [`hold_for_fork`] held. The child's copy has no waiter (its other threads are
/// gone), so it is simply made free.
pub fn release_after_fork(in_child: bool) {
    if !HELD_FOR_FORK.swap(false, Ordering::Relaxed) {
        return;
    }
    if in_child {
        STATE.store(0, Ordering::Release);
    } else {
        release();
    }
}
