//! The fork gate: a fork never copies process-local engine state in the middle of a
//! change.
//!
//! Why: `fork` copies the whole address space but only the calling thread. Whatever
//! another thread was doing in the engine's process-local memory (the open-file
//! table, the fd table of the preload, a lock held in a map's shard, the allocator's
//! per-process lists) is copied half done into a child that has no thread to finish
//! it: the child then hangs on a lock nobody will release, or counts an open file
//! twice. The pool and the runtime region are shared memory and are finished by the
//! parent's own threads; process-local memory is not.
//!
//! So every thread that works on engine state holds a [`Pass`], and the forking
//! thread closes the gate ([`close`]) before the fork: new passes wait,
//! and the fork waits until every other thread has given its pass back. A thread
//! about to wait for something that may take unbounded time (a lock wait on a
//! stand-in file: another process may hold the lock for hours) sets its pass aside
//! for the wait ([`step_aside`]), holding no process-local lock while it waits, so a
//! fork never waits on it. After the fork, parent and child open the gate again
//! ([`reopen`]).
//!
//! An `exec` closes the gate too: it ends the process's other threads wherever they
//! are, and one cut off in the middle of a call would leave the shared runtime state
//! half changed under a pid that lives on. A failed exec opens it again.
//!
//! Cost on the way in and out: one sequentially consistent store and one load of a
//! word no other thread writes except a forking one (a thread's own slot), so
//! threads never share a cache line on the common path.
//!
//! What the gate cannot do: a pass held for longer than [`DRAIN_LIMIT`] (a pool call
//! blocked on something the forking thread holds: a `malloc` the program replaced
//! whose fork handler locked it first, a pipe the child would have drained) lets the
//! fork go ahead after one line on stderr, with the old risk for the child.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a fork waits for the passes in flight before it goes ahead anyway.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// 1 while a fork is being prepared (new passes wait), else 0. A futex word.
static CLOSED: AtomicU32 = AtomicU32::new(0);

/// Every thread's slot: 1 while it holds a pass, else 0.
static SLOTS: Mutex<Vec<Arc<AtomicU32>>> = Mutex::new(Vec::new());

/// Whether the gate is held closed by this process's forking thread (the `SLOTS`
/// lock is held with it, forgotten, until [`reopen`]).
static HELD: AtomicU32 = AtomicU32::new(0);

/// This thread's slot, registered in `SLOTS` while the thread lives.
struct Slot(Arc<AtomicU32>);

impl Slot {
    fn new() -> Slot {
        let s = Arc::new(AtomicU32::new(0));
        SLOTS.lock().push(s.clone());
        Slot(s)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        SLOTS.lock().retain(|s| !Arc::ptr_eq(s, &self.0));
    }
}

thread_local! {
    static SLOT: Slot = Slot::new();
    /// Passes this thread holds (nested entries: a signal handler, a call made by
    /// the engine's own work).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// A thread's permission to work on engine state; given back when dropped.
pub struct Pass {
    counted: bool,
    /// Passes belong to their thread.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Pass {
    /// Takes a pass, waiting while a fork is being prepared. On a thread whose
    /// thread-locals are gone (exit handlers) it takes none: such a call cannot be
    /// counted, and a fork from an exit handler is the program's own risk.
    pub fn enter() -> Pass {
        let counted = DEPTH
            .try_with(|d| {
                let n = d.get();
                if n == 0 && !SLOT.try_with(|s| hold(&s.0)).unwrap_or(false) {
                    return false;
                }
                d.set(n + 1);
                true
            })
            .unwrap_or(false);
        Pass {
            counted,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        let _ = DEPTH.try_with(|d| {
            let n = d.get() - 1;
            d.set(n);
            if n == 0 {
                let _ = SLOT.try_with(|s| s.0.store(0, Ordering::SeqCst));
            }
        });
    }
}

/// Marks `slot` busy once the gate is open; always true (a bool for `try_with`).
fn hold(slot: &AtomicU32) -> bool {
    loop {
        // Dekker's pairing with `close`: this thread writes its slot then
        // reads the gate, the forker writes the gate then reads every slot, both
        // sequentially consistent, so at least one of them sees the other.
        slot.store(1, Ordering::SeqCst);
        if CLOSED.load(Ordering::SeqCst) == 0 {
            return true;
        }
        slot.store(0, Ordering::SeqCst);
        while CLOSED.load(Ordering::SeqCst) != 0 {
            super::lock::futex_wait(&CLOSED, 1, Duration::from_millis(100));
        }
    }
}

/// Runs `wait` (a wait that may last: the caller holds no process-local lock) with
/// this thread's pass set aside, so that a fork meanwhile need not wait for it; the
/// pass is taken back afterwards (waiting if a fork is being prepared then).
pub fn step_aside<R>(wait: impl FnOnce() -> R) -> R {
    let holding = DEPTH.try_with(Cell::get).unwrap_or(0) > 0;
    if holding {
        let _ = SLOT.try_with(|s| s.0.store(0, Ordering::SeqCst));
    }
    let r = wait();
    if holding {
        let _ = SLOT.try_with(|s| hold(&s.0));
    }
    r
}

/// Before a fork or an exec, in the thread making it: new passes wait and every
/// other thread's pass in flight is given back (at most [`DRAIN_LIMIT`]). Undone by
/// [`reopen`] in the parent and in the child, or after a failed exec.
pub fn close() {
    // This thread's slot first: registering it takes the lock held below.
    let mine = SLOT.try_with(|s| s.0.clone()).ok();
    let slots = SLOTS.lock();
    CLOSED.store(1, Ordering::SeqCst);
    HELD.store(1, Ordering::SeqCst);
    let others: Vec<&Arc<AtomicU32>> = slots
        .iter()
        .filter(|s| mine.as_ref().is_none_or(|m| !Arc::ptr_eq(s, m)))
        .collect();
    if !drain(&others) {
        // The one line the program's user sees (stderr is the program's own).
        eprintln!(
            "lynxfs: a fork or exec went ahead while another thread stayed inside the \
             file system for {} s: the engine's state may be left half changed",
            DRAIN_LIMIT.as_secs()
        );
    }
    // Held (with the gate) until `reopen`, so no thread registers or
    // leaves meanwhile and the child's list is the one copied here.
    std::mem::forget(slots);
}

/// Waits until every slot in `busy` is free; false when [`DRAIN_LIMIT`] passed.
fn drain(busy: &[&Arc<AtomicU32>]) -> bool {
    let start = Instant::now();
    let mut spins = 0u32;
    while busy.iter().any(|s| s.load(Ordering::SeqCst) != 0) {
        if start.elapsed() > DRAIN_LIMIT {
            return false;
        }
        spins += 1;
        if spins < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    true
}

/// After a fork (or a failed one), in the parent and in the child, and after a
/// failed exec: the gate opens.
/// In the child, the only thread left, the slots of the parent's other threads are
/// dropped. Nothing when [`close`] did not run.
pub fn reopen(in_child: bool) {
    if HELD.swap(0, Ordering::SeqCst) == 0 {
        return;
    }
    // Registered by `close` in this thread already (before the lock below).
    let mine = SLOT.try_with(|s| s.0.clone()).ok();
    // SAFETY: `close` locked SLOTS in the thread that forked (the child's
    // only thread) and forgot its guard, then set HELD, which this call cleared: the
    // lock is held, and nothing else releases it.
    let mut slots = unsafe {
        SLOTS.force_unlock(parking_lot::lock_api::GuardNoSend::new());
        SLOTS.lock()
    };
    if in_child {
        slots.retain(|s| mine.as_ref().is_some_and(|m| Arc::ptr_eq(s, m)));
    }
    drop(slots);
    CLOSED.store(0, Ordering::SeqCst);
    super::lock::futex_wake_all(&CLOSED);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// Fork gate tests share the process-wide gate: one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    #[test]
    fn closing_waits_for_a_pass_in_flight_and_holds_new_ones() {
        let _one = SERIAL.lock();
        let entered = Arc::new(AtomicBool::new(false));
        let release = Arc::new(AtomicBool::new(false));
        let worker = {
            let (entered, release) = (entered.clone(), release.clone());
            std::thread::spawn(move || {
                let p = Pass::enter();
                entered.store(true, Ordering::SeqCst);
                while !release.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                drop(p);
            })
        };
        while !entered.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let closer = std::thread::spawn(|| {
            close();
            let at = Instant::now();
            reopen(false);
            at
        });
        std::thread::sleep(Duration::from_millis(50));
        let released_at = Instant::now();
        release.store(true, Ordering::SeqCst);
        let closed_at = closer.join().unwrap();
        worker.join().unwrap();
        assert!(
            closed_at >= released_at,
            "the gate closed while a pass was still held"
        );
    }

    #[test]
    fn a_pass_set_aside_does_not_hold_a_fork_and_is_taken_back_after_it() {
        let _one = SERIAL.lock();
        let release = Arc::new(AtomicBool::new(false));
        let back = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let worker = {
            let (release, back) = (release.clone(), back.clone());
            std::thread::spawn(move || {
                let _p = Pass::enter();
                step_aside(|| {
                    tx.send(()).unwrap();
                    while !release.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                });
                back.store(true, Ordering::SeqCst);
            })
        };
        rx.recv().unwrap();
        let start = Instant::now();
        close();
        let waited = start.elapsed();
        release.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        let back_while_closed = back.load(Ordering::SeqCst);
        reopen(false);
        worker.join().unwrap();
        assert!(
            waited < DRAIN_LIMIT / 2,
            "the fork waited for a thread in a lock wait"
        );
        assert!(
            !back_while_closed,
            "a pass was taken back while the gate was closed"
        );
        assert!(back.load(Ordering::SeqCst));
    }
}
