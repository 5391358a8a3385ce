//! The fork gate's protocol under loom: every interleaving (no preemption bound) of
//! a thread taking and giving back passes while a forker shuts the gate, looks at
//! the slots and opens it again, each run under loom's model of C11's memory
//! orderings, so an ordering weaker than the protocol needs is a failure of the
//! model, not a lucky run on x86. One worker thread: workers share no word (each
//! has its own slot and only reads the gate), so each pairs with the forker alone;
//! two workers, each spinning while the gate is shut, gave loom unbounded runs.
//!
//! What the gate must give: the fork (here the forker's read of process-local state,
//! standing in for the copy a fork makes) never overlaps a pass, and all that was
//! done under a pass happens before it. The state is a loom `UnsafeCell`: loom fails
//! the run ("Causality violation") on any access to it that is not ordered by
//! happens-before with another access that writes it.

use std::sync::atomic::{AtomicUsize, Ordering};

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU32;
use loom::sync::Arc;
use loom::thread;

use super::{all_free, give_back, hold, open, shut, Machine};
use crate::runtime::word::Word;

/// The protocol on loom's atomics and fences; a wait is a yield to another thread.
struct Loom;

impl Machine for Loom {
    type Word = AtomicU32;
    fn fence(order: Ordering) {
        loom::sync::atomic::fence(order)
    }
    fn wait(_gate: &AtomicU32, _shut: u32) {
        thread::yield_now();
    }
}

/// Test-only weakening: the Dekker pair's sequentially consistent fences made
/// acquire-release. The model must catch it.
struct AcqRelFences;

impl Machine for AcqRelFences {
    type Word = AtomicU32;
    fn fence(order: Ordering) {
        let weaker = match order {
            Ordering::SeqCst => Ordering::AcqRel,
            o => o,
        };
        loom::sync::atomic::fence(weaker)
    }
    fn wait(_gate: &AtomicU32, _shut: u32) {
        thread::yield_now();
    }
}

/// A loom word whose every access is relaxed, whatever the protocol asks (its fences
/// stay).
struct RelaxedWord(AtomicU32);

impl Word for RelaxedWord {
    type Value = u32;
    fn load(&self, _: Ordering) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
    fn store(&self, value: u32, _: Ordering) {
        self.0.store(value, Ordering::Relaxed)
    }
    fn compare_exchange(
        &self,
        current: u32,
        new: u32,
        _: Ordering,
        _: Ordering,
    ) -> Result<u32, u32> {
        self.0
            .compare_exchange(current, new, Ordering::Relaxed, Ordering::Relaxed)
    }
}

/// Test-only weakening: the slots' release and acquire dropped (a pass given back
/// with a relaxed store), the fences kept. The model must catch it.
struct RelaxedAccesses;

impl Machine for RelaxedAccesses {
    type Word = RelaxedWord;
    fn fence(order: Ordering) {
        loom::sync::atomic::fence(order)
    }
    fn wait(_gate: &RelaxedWord, _shut: u32) {
        thread::yield_now();
    }
}

/// Makes a machine's word holding `v`.
trait NewWord: Sized {
    fn with(v: u32) -> Self;
}

impl NewWord for AtomicU32 {
    fn with(v: u32) -> Self {
        AtomicU32::new(v)
    }
}

impl NewWord for RelaxedWord {
    fn with(v: u32) -> Self {
        RelaxedWord(AtomicU32::new(v))
    }
}

/// One run's words and the process-local state passes work on: each worker's own
/// (passes do not exclude each other, only a fork).
struct Gate<W> {
    gate: W,
    slots: [W; 2],
    state: [UnsafeCell<usize>; 2],
}

/// A thread taking `passes` passes one after another (a pass given back and taken
/// again is also what `step_aside` does), changing the state under each.
fn worker<M: Machine>(g: &Gate<M::Word>, me: usize, passes: usize) {
    for _ in 0..passes {
        hold::<M>(&g.slots[me], &g.gate);
        // SAFETY: loom's cell checks the access; the gate is what should make it
        // exclusive of the forker's read.
        g.state[me].with_mut(|p| unsafe { *p += 1 });
        give_back::<M>(&g.slots[me]);
    }
}

/// The forking thread: shut, and if every slot is free "fork" (read the state),
/// then open. Returns what the fork copied, or None where the engine's forker would
/// wait. (It looks once: a forker waiting in a loop gives loom unbounded runs, and
/// what is checked, that a fork after slots seen free is safe, is the same.)
fn forker<M: Machine>(g: &Gate<M::Word>) -> Option<usize> {
    shut::<M>(&g.gate);
    // SAFETY: loom's cell checks the access (see `worker`).
    let copied =
        all_free::<M>(&g.slots).then(|| g.state.iter().map(|s| s.with(|p| unsafe { *p })).sum());
    open::<M>(&g.gate);
    copied
}

/// Interleavings a model explored, and in how many of them the fork went ahead.
#[derive(Debug)]
struct Explored {
    runs: usize,
    forks: usize,
}

/// Explores `workers` threads of `passes` passes each beside one fork.
fn explore<M>(workers: usize, passes: usize) -> Explored
where
    M: Machine + 'static,
    M::Word: NewWord + Send + Sync + 'static,
{
    let counts = std::sync::Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let counted = counts.clone();
    let mut b = loom::model::Builder::new();
    // Exhaustive, whatever LOOM_MAX_PREEMPTIONS says.
    b.preemption_bound = None;
    b.max_branches = 10_000;
    b.check(move || {
        counted[0].fetch_add(1, Ordering::Relaxed);
        let g = Arc::new(Gate {
            gate: M::Word::with(super::OPEN),
            slots: [M::Word::with(super::FREE), M::Word::with(super::FREE)],
            state: [UnsafeCell::new(0), UnsafeCell::new(0)],
        });
        let threads: Vec<_> = (0..workers)
            .map(|me| {
                let g = g.clone();
                thread::spawn(move || worker::<M>(&g, me, passes))
            })
            .collect();
        let copied = forker::<M>(&g);
        for t in threads {
            t.join().expect("a worker panicked");
        }
        // SAFETY: every thread has been joined.
        let total: usize = g.state.iter().map(|s| s.with(|p| unsafe { *p })).sum();
        assert_eq!(total, workers * passes, "a pass was lost");
        if let Some(copied) = copied {
            counted[1].fetch_add(1, Ordering::Relaxed);
            assert!(copied <= total);
        }
    });
    Explored {
        runs: counts[0].load(Ordering::Relaxed),
        forks: counts[1].load(Ordering::Relaxed),
    }
}

#[test]
fn a_fork_never_overlaps_a_pass() {
    for (workers, passes) in [(1, 2), (1, 3)] {
        let e = explore::<Loom>(workers, passes);
        println!("{workers} workers of {passes} passes: {e:?}");
        assert!(e.forks > 0 && e.forks < e.runs, "a trivial model: {e:?}");
    }
}

#[test]
#[should_panic(expected = "Causality violation: Concurrent read and write accesses")]
fn the_model_catches_acquire_release_fences_in_the_dekker_pair() {
    explore::<AcqRelFences>(1, 1);
}

#[test]
#[should_panic(expected = "Causality violation: Concurrent read and write accesses")]
fn the_model_catches_a_pass_given_back_without_release() {
    explore::<RelaxedAccesses>(1, 1);
}
