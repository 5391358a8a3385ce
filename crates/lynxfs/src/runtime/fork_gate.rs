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
//! Cost on the way in and out: a store to a word no other thread writes (a thread's
//! own slot), a sequentially consistent fence (on x86 a locked `or` on the stack) and
//! a load of the gate on the way in, a release store on the way out, so threads
//! never share a cache line written on the common path.
//!
//! The protocol ([`hold`], [`give_back`], [`shut`], [`all_free`], [`open`]) is
//! generic over the [`Machine`] it runs on: the engine's ([`Os`]: `std`'s atomics,
//! the futex) and loom's in its model test (`model`, docs/CONSISTENCY.md,
//! "Model-checked protocols"), so what is checked is what runs. The Dekker pair is
//! written with fences (a relaxed store, a sequentially consistent fence, a load)
//! rather than sequentially consistent accesses: C11 gives both the same guarantee
//! here, loom checks only the fences.
//!
//! What the gate cannot do: a pass held for longer than [`DRAIN_LIMIT`] (a pool call
//! blocked on something the forking thread holds: a `malloc` the program replaced
//! whose fork handler locked it first, a pipe the child would have drained) lets the
//! fork go ahead after one line on stderr, with the old risk for the child.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};

use super::word::Word;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a fork waits for the passes in flight before it goes ahead anyway.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// [`SHUT`] while a fork is being prepared (new passes wait), else [`OPEN`]. A futex word.
static CLOSED: AtomicU32 = AtomicU32::new(OPEN);

const OPEN: u32 = 0;
const SHUT: u32 = 1;

/// Every thread's slot: [`BUSY`] while it holds a pass, else [`FREE`].
static SLOTS: Mutex<Vec<Arc<AtomicU32>>> = Mutex::new(Vec::new());

/// Whether the gate is held closed by this process's forking thread (the `SLOTS`
/// lock is held with it, forgotten, until [`reopen`]).
static HELD: AtomicU32 = AtomicU32::new(0);

/// This thread's slot, registered in `SLOTS` while the thread lives.
struct Slot(Arc<AtomicU32>);

impl Slot {
    fn new() -> Slot {
        let s = Arc::new(AtomicU32::new(FREE));
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
                if n == 0 && SLOT.try_with(|s| hold::<Os>(&s.0, &CLOSED)).is_err() {
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
                let _ = SLOT.try_with(|s| give_back::<Os>(&s.0));
            }
        });
    }
}

const FREE: u32 = 0;
const BUSY: u32 = 1;

/// What the gate's protocol needs besides its words: a fence, and a wait for the gate
/// to open.
pub(crate) trait Machine {
    type Word: Word<Value = u32>;
    fn fence(order: Ordering);
    /// Waits a while (or not at all) for `gate` to stop holding `shut`.
    fn wait(gate: &Self::Word, shut: u32);
}

/// The engine's machine: `std`'s atomics and fences, a futex wait.
struct Os;

impl Machine for Os {
    type Word = AtomicU32;
    #[inline(always)]
    fn fence(order: Ordering) {
        std::sync::atomic::fence(order)
    }
    fn wait(gate: &AtomicU32, shut: u32) {
        super::lock::futex_wait(gate, shut, Duration::from_millis(100));
    }
}

/// Marks `slot` busy once `gate` is open.
fn hold<M: Machine>(slot: &M::Word, gate: &M::Word) {
    loop {
        // Dekker's pairing with `shut`: this thread writes its slot, the forker the
        // gate, each then a sequentially consistent fence and a load of the other's
        // word. The fences fall in one total order, and whichever thread's fence comes
        // second sees the other's store: the forker sees the slot busy (and waits for
        // it), or this thread sees the gate shut (and steps back).
        slot.store(BUSY, Ordering::Relaxed);
        M::fence(Ordering::SeqCst);
        // Acquire: what the forker did before opening the gate comes before this pass.
        if gate.load(Ordering::Acquire) == OPEN {
            return;
        }
        slot.store(FREE, Ordering::Release);
        while gate.load(Ordering::Acquire) != OPEN {
            M::wait(gate, SHUT);
        }
    }
}

/// Gives `slot`'s pass back. Release: everything done under the pass comes before a
/// forker's [`all_free`] that sees the slot free.
#[inline(always)]
fn give_back<M: Machine>(slot: &M::Word) {
    slot.store(FREE, Ordering::Release);
}

/// Shuts `gate`: a thread whose [`hold`] comes later waits; one whose `hold` came
/// earlier is seen busy by [`all_free`] after this (the other half of the pairing).
fn shut<M: Machine>(gate: &M::Word) {
    gate.store(SHUT, Ordering::Relaxed);
    M::fence(Ordering::SeqCst);
}

/// Every slot of `slots` is free: their passes, and all done under them, are over.
fn all_free<'w, M: Machine>(slots: impl IntoIterator<Item = &'w M::Word>) -> bool
where
    M::Word: 'w,
{
    slots.into_iter().all(|s| s.load(Ordering::Acquire) == FREE)
}

/// Opens `gate` (waking its waiters is the caller's).
fn open<M: Machine>(gate: &M::Word) {
    gate.store(OPEN, Ordering::Release);
}

/// Runs `wait` (a wait that may last: the caller holds no process-local lock) with
/// this thread's pass set aside, so that a fork meanwhile need not wait for it; the
/// pass is taken back afterwards (waiting if a fork is being prepared then).
pub fn step_aside<R>(wait: impl FnOnce() -> R) -> R {
    let holding = DEPTH.try_with(Cell::get).unwrap_or(0) > 0;
    if holding {
        let _ = SLOT.try_with(|s| give_back::<Os>(&s.0));
    }
    let r = wait();
    if holding {
        let _ = SLOT.try_with(|s| hold::<Os>(&s.0, &CLOSED));
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
    shut::<Os>(&CLOSED);
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
    // The usual case (a single-threaded shell's fork) reads no clock.
    if all_free::<Os>(busy.iter().map(|s| &***s)) {
        return true;
    }
    let start = Instant::now();
    let mut spins = 0u32;
    while !all_free::<Os>(busy.iter().map(|s| &***s)) {
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
/// dropped, and no waiter is woken (none can be there). Nothing when [`close`] did
/// not run.
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
    open::<Os>(&CLOSED);
    // A child has no other thread to wake (a system call saved in every fork child).
    if !in_child {
        super::lock::futex_wake_all(&CLOSED);
    }
}

#[cfg(test)]
mod model;

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
