//! The index's lock-free protocol under loom: a rename over a name, and an exchange
//! of two names, against a thread looking the names up, in every interleaving (no
//! preemption bound) and under loom's model of C11's memory orderings. The writer
//! runs the engine's own calls in the order `meta::rename` makes them (`sight`,
//! `leave_sighted`, `claim_sighted` beside the old entry, [`Index::replace`] after
//! the commit: publish, then remove and clean), the reader [`Index::get`]; only the
//! slots' words are loom's ([`Slots`]). What must hold: a name that exists
//! throughout is never missed, and a reader that saw the new file never sees the
//! old one after it.
//!
//! Not modelled: claims racing each other or a removal's cleaning (they are
//! serialized by the stripe and region locks, futex words outside the model: one
//! writer thread takes them uncontended), processes (loom runs threads; the table
//! is the same words in every process), crashes (the repair rebuilds the index from
//! the pool) and the pool's dentries (written before a claim, fixed here).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;

use super::{
    next_a, Dentries, Entry, Index, Slots, State, COUNTERS, DTYPE_SHIFT, READY, STRIPES, TAG_SHIFT,
    TOMB,
};
use crate::format::dentry;
use crate::format::layout::DENTRY_SIZE;
use crate::runtime::lock::Alone;
use crate::runtime::Span;

/// The parent directory of every key.
const P: u64 = 7;
/// Slots: the probe paths of the scenarios, no more (every slot is loom's).
const CAP: u64 = 4;
/// Dentries 1.. of the stand-in pool.
const DENTRIES: u64 = 8;

/// The slots as loom's atomics.
struct LoomSlots(Vec<AtomicU64>);

impl Slots for LoomSlots {
    type Word = AtomicU64;
    fn slot(&self, i: u64) -> (&AtomicU64, &AtomicU64) {
        let at = 2 * i as usize;
        (&self.0[at], &self.0[at + 1])
    }
}

/// The pool's dentries, written before the model runs (as a create or rename writes
/// its dentry before it claims the name) and fixed after.
struct Names(Vec<u64>);

impl Dentries for Names {
    fn word(&self, off: u64) -> u64 {
        self.0[(off / 8) as usize]
    }
}

impl Names {
    /// Dentry `id` names `name` in `P`.
    fn put(&mut self, id: u64, name: &[u8]) {
        let d = id * DENTRY_SIZE;
        let mut set = |off: u64, v: u64| self.0[((d + off) / 8) as usize] = v;
        set(dentry::PARENT, P);
        set(dentry::NAME_LEN, name.len() as u64);
        set(dentry::SLOT, 0x1000 + id);
        for (i, c) in name.chunks(8).enumerate() {
            let mut buf = [0u8; 8];
            buf[..c.len()].copy_from_slice(c);
            set(dentry::NAME + 8 * i as u64, u64::from_le_bytes(buf));
        }
    }
}

/// An index of [`CAP`] loom slots over a pool of [`DENTRIES`] dentries at offset 0;
/// its locks and counters in an anonymous span, as the engine's.
fn index() -> Index<LoomSlots> {
    let bytes = (STRIPES + COUNTERS) * 64 + 64;
    let span = Span::anonymous(bytes).expect("an anonymous span for the locks");
    let words = span.words();
    let (base, nwords) = (NonNull::from(words).cast(), words.len());
    Index {
        span,
        base,
        nwords,
        slots: LoomSlots((0..2 * CAP).map(|_| AtomicU64::new(0)).collect()),
        cap: CAP,
        regions_at: (STRIPES + COUNTERS) * 16,
        dentry_off: 0,
        dentries: DENTRIES,
    }
}

/// A name whose probe path starts at slot `home`.
fn name_at(idx: &Index<LoomSlots>, stem: &str, home: u64) -> Vec<u8> {
    (0..)
        .map(|n| format!("{stem}{n}").into_bytes())
        .find(|k| idx.probe(P, k).home == home)
        .expect("some name hashes to every slot")
}

/// Slot `i` holds a tombstone, as a removal leaves one.
fn tombstone(idx: &Index<LoomSlots>, i: u64) {
    idx.slot(i).0.store(next_a(0, TOMB, 0), Ordering::Relaxed);
}

/// Slot `i` holds `name`'s committed entry: dentry `id`, inode `ino`.
fn ready(idx: &Index<LoomSlots>, i: u64, name: &[u8], id: u64, ino: u64) {
    let (a, b) = idx.slot(i);
    b.store(
        ino | 8 << DTYPE_SHIFT | idx.probe(P, name).tag << TAG_SHIFT,
        Ordering::Relaxed,
    );
    a.store(next_a(0, READY, id), Ordering::Relaxed);
}

/// A new entry for dentry `id`, inode `ino`, as a rename claims it.
fn new_entry(id: u64, ino: u64) -> Entry {
    Entry {
        state: State::Creating,
        ino,
        dentry: id * DENTRY_SIZE,
        slot: 0,
        dtype: 8,
        pos: 0,
    }
}

/// How the writer's rename updates the index after its commit: the engine's
/// [`Index::replace`], or (test-only, to show the model finds it) the order before
/// issue 42's fix, the old entries removed before the new ones are published.
#[derive(Clone, Copy)]
enum Order {
    Engine,
    RemoveFirst,
}

/// How the reader looks a name up: the engine's [`Index::get`], or (test-only) one
/// walk of the probe path whose miss is trusted unconfirmed, as before the fix.
#[derive(Clone, Copy)]
enum Reader {
    Engine,
    OneWalk,
}

/// Renames over the names `olds` (each a name and its entry in the table) with
/// new dentries `news`, as `meta::rename` does: every entry seen, left and claimed
/// beside, then the index updated after the (here empty) commit.
fn rename_over(idx: &Index<LoomSlots>, pool: &Names, olds: &[&[u8]], news: &[Entry], o: Order) {
    let seen: Vec<_> = olds
        .iter()
        .map(|name| idx.sight(pool, P, name, Entry::visible))
        .collect();
    let left: Vec<Entry> = seen
        .iter()
        .map(|s| idx.leave_sighted(pool, s).expect("the old entry is there"))
        .collect();
    let claimed: Vec<u64> = seen
        .iter()
        .zip(news)
        .zip(&left)
        .map(
            |((s, new), old)| match idx.claim_sighted(pool, s, new, Some(old.pos), &Alone) {
                Ok(super::Claim::Claimed(pos)) => pos,
                other => panic!("the claim beside the old entry failed: {other:?}"),
            },
        )
        .collect();
    match o {
        Order::Engine => idx.replace(claimed, left),
        Order::RemoveFirst => {
            for e in &left {
                idx.remove(e);
            }
            for pos in claimed {
                idx.publish(pos);
            }
        }
    }
}

/// The inode `name` leads to, as the reader looks it up.
fn lookup(idx: &Index<LoomSlots>, pool: &Names, name: &[u8], r: Reader) -> Option<u64> {
    let found = match r {
        Reader::Engine => idx.get(pool, P, name),
        Reader::OneWalk => idx
            .walk_once(pool, &idx.probe(P, name), &Entry::visible)
            .ok()
            .map(|(e, _)| e),
    };
    found.map(|e| e.ino)
}

/// Explores `scenario` (built and run afresh in every interleaving); returns the
/// number of interleavings.
fn explore(scenario: impl Fn() + Send + Sync + 'static) -> usize {
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let mut b = loom::model::Builder::new();
    // Exhaustive, whatever LOOM_MAX_PREEMPTIONS says.
    b.preemption_bound = None;
    b.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        scenario();
    });
    runs.load(Ordering::Relaxed)
}

/// `write tmp; rename tmp cfg` seen from the index: `cfg`'s old entry (inode 10) in
/// slot 1 behind a tombstone in slot 0, where the rename's new entry (inode 20) goes,
/// before the old one on the probe path (the pattern). A reader looks `cfg`
/// up twice meanwhile.
fn rename_over_a_name(o: Order, r: Reader) {
    let idx = index();
    let cfg = name_at(&idx, "cfg", 0);
    let mut pool = Names(vec![0; (DENTRIES * DENTRY_SIZE / 8) as usize]);
    pool.put(1, &cfg);
    pool.put(2, &cfg);
    tombstone(&idx, 0);
    ready(&idx, 1, &cfg, 1, 10);
    let shared = Arc::new((idx, pool, cfg));
    let reader = {
        let shared = shared.clone();
        thread::spawn(move || {
            let (idx, pool, cfg) = &*shared;
            [lookup(idx, pool, cfg, r), lookup(idx, pool, cfg, r)]
        })
    };
    let (idx, pool, cfg) = &*shared;
    rename_over(idx, pool, &[cfg], &[new_entry(2, 20)], o);
    let seen = reader.join().expect("the reader panicked");
    assert!(
        seen.iter().all(Option::is_some),
        "a lookup missed cfg while a rename replaced it: {seen:?}"
    );
    assert!(
        seen != [Some(20), Some(10)],
        "a lookup went back to the replaced file"
    );
    assert_eq!(lookup(idx, pool, cfg, Reader::Engine), Some(20));
}

/// `renameat2(a, b, RENAME_EXCHANGE)` seen from the index: `a` (inode 10) in slot 1
/// behind a tombstone, `b` (inode 11) in slot 2; the new entries swap the inodes. A
/// reader looks both names up meanwhile.
fn exchange(o: Order, r: Reader) {
    let idx = index();
    let a = name_at(&idx, "a", 0);
    let b = name_at(&idx, "b", 2);
    let mut pool = Names(vec![0; (DENTRIES * DENTRY_SIZE / 8) as usize]);
    for (id, name) in [(1, &a), (2, &b), (3, &a), (4, &b)] {
        pool.put(id, name);
    }
    tombstone(&idx, 0);
    ready(&idx, 1, &a, 1, 10);
    ready(&idx, 2, &b, 2, 11);
    let shared = Arc::new((idx, pool, a, b));
    let reader = {
        let shared = shared.clone();
        thread::spawn(move || {
            let (idx, pool, a, b) = &*shared;
            [lookup(idx, pool, a, r), lookup(idx, pool, b, r)]
        })
    };
    let (idx, pool, a, b) = &*shared;
    let news = [new_entry(3, 11), new_entry(4, 10)];
    rename_over(idx, pool, &[a, b], &news, o);
    let seen = reader.join().expect("the reader panicked");
    assert!(
        seen.iter().all(Option::is_some),
        "a lookup missed a name while an exchange swapped it: {seen:?}"
    );
    assert_eq!(lookup(idx, pool, a, Reader::Engine), Some(11));
    assert_eq!(lookup(idx, pool, b, Reader::Engine), Some(10));
}

#[test]
fn a_name_replaced_by_rename_is_never_missed() {
    let runs = explore(|| rename_over_a_name(Order::Engine, Reader::Engine));
    println!("rename over a name: {runs} interleavings");
    assert!(runs > 100, "only {runs} interleavings explored");
}

#[test]
#[should_panic(expected = "a lookup missed cfg while a rename replaced it")]
fn the_model_catches_a_rename_removing_the_old_entry_first() {
    explore(|| rename_over_a_name(Order::RemoveFirst, Reader::Engine));
}

#[test]
#[should_panic(expected = "a lookup missed cfg while a rename replaced it")]
fn the_model_catches_a_lookup_trusting_an_unconfirmed_miss() {
    explore(|| rename_over_a_name(Order::Engine, Reader::OneWalk));
}

#[test]
fn names_exchanged_are_never_missed() {
    let runs = explore(|| exchange(Order::Engine, Reader::Engine));
    println!("exchange: {runs} interleavings");
    assert!(runs > 100, "only {runs} interleavings explored");
}

#[test]
#[should_panic(expected = "a lookup missed a name while an exchange swapped it")]
fn the_model_catches_an_exchange_removing_the_old_entries_first() {
    explore(|| exchange(Order::RemoveFirst, Reader::Engine));
}
