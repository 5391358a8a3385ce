//! ADAM's state map and evolution: every few seconds a background thread labels the
//! directories the areas know (Table 2: size and writes; reads above the area's average
//! count as ADAM's experiments count them, as making a large directory hot) and
//! reshapes the areas:
//! - *split*: a hot directory that is not a root becomes the root of a new area; the
//!   entries below it move into it, re-keyed relative to it;
//! - *merge*: a small, cold area folds back into the area holding its root;
//! - *inherit*: a large subdirectory taking most of its area's reads becomes a root
//!   (a split), and what is left of the old area folds back (a merge).
//!
//! Entries move one at a time, each under the table's write lock, so a lookup waits
//! for at most one entry's move; a lookup in between finds the entry in its old area
//! or, through the new root, in the new one (both answers are right: an entry's
//! directory is the same wherever it is keyed). A round gives up as soon as the epoch
//! moves (the entries are dead then anyway).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::{Area, Inner, Map, Table};
use crate::format::ROOT_INO;

/// ADAM's three labels (Table 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    Cold,
    Warm,
    Hot,
}

impl Label {
    pub fn name(self) -> &'static str {
        match self {
            Label::Cold => "cold",
            Label::Warm => "warm",
            Label::Hot => "hot",
        }
    }

    /// Table 2: large and written is hot, small and never written cold, the rest warm.
    fn of(large: bool, written: bool) -> Label {
        match (large, written) {
            (true, true) => Label::Hot,
            (false, false) => Label::Cold,
            _ => Label::Warm,
        }
    }
}

/// When the state map calls a directory large, frequently read, or an area small.
#[derive(Clone, Copy, Debug)]
pub struct Thresholds {
    /// Directories below it (in its area) from which a directory is large (ADAM's
    /// Size_Max).
    pub large: usize,
    /// Entries under which an area is small (ADAM's Size_Min).
    pub small: usize,
    /// Share (in percent) of its area's reads above which a large subdirectory is
    /// strong enough to inherit the root.
    pub strong_percent: u64,
    /// Reads from which a directory counts as frequently read even when they are not
    /// above its area's average (ADAM's only rule).
    pub read_often: u64,
    /// Reads in a round under which an area is cold.
    pub cold_reads: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            large: 64,
            small: 16,
            strong_percent: 75,
            read_often: u64::MAX,
            cold_reads: 1,
        }
    }
}

/// Evolvements done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Round {
    pub splits: u64,
    pub merges: u64,
    pub inherits: u64,
}

/// The label of an area as a whole (its root's state): large when it holds
/// `Thresholds::default().large` entries or more.
pub(super) fn area_label(a: &Area) -> Label {
    let n: usize = a.by_cred.iter().map(|m| m.len()).sum();
    Label::of(
        n >= Thresholds::default().large,
        a.written.load(Ordering::Relaxed),
    )
}

/// One round: label, then split, inherit and merge.
pub(super) fn round(inner: &Inner, th: &Thresholds) -> Round {
    let mut done = Round::default();
    let tag = inner.table.read().tag;
    // Planned under the read lock, which is let go before anything moves.
    let splits = plan_splits(&inner.table.read(), th);
    for (root, key, inherit) in splits {
        if !split(inner, tag, root, &key) {
            return done;
        }
        if inherit && root != ROOT_INO {
            merge(inner, tag, root);
            done.inherits += 1;
        } else {
            done.splits += 1;
        }
    }
    let merges = plan_merges(&inner.table.read(), th);
    for root in merges {
        if merge(inner, tag, root) {
            done.merges += 1;
        }
    }
    for a in inner.table.read().amt.values() {
        a.reads.store(0, Ordering::Relaxed);
        a.written.store(false, Ordering::Relaxed);
        for m in &a.by_cred {
            for d in m.values() {
                d.reads.store(0, Ordering::Relaxed);
            }
        }
    }
    inner.evolver.add(done);
    done
}

/// Directories to split: (their area's root, their key there, whether it is an
/// inherit). Keys are merged over credentials.
fn plan_splits(t: &Table, th: &Thresholds) -> Vec<(u64, Box<[u8]>, bool)> {
    let mut out: Vec<(u64, Box<[u8]>, bool)> = Vec::new();
    for (&root, a) in &t.amt {
        let mut dirs: Map<&[u8], (u64, u64)> = Map::default();
        for m in &a.by_cred {
            for (k, d) in m {
                let e = dirs.entry(&k[..]).or_default();
                e.0 = d.ino;
                e.1 += d.reads.load(Ordering::Relaxed) as u64;
            }
        }
        if dirs.is_empty() {
            continue;
        }
        let total: u64 = dirs.values().map(|v| v.1).sum();
        let average = total / dirs.len() as u64;
        let written = a.written.load(Ordering::Relaxed);
        for (&k, &(ino, reads)) in &dirs {
            if t.amt.contains_key(&ino) {
                continue;
            }
            let below = dirs.keys().filter(|o| is_below(o, k)).count();
            let large = below >= th.large;
            // Table 2, a read-hot large directory counting as written (ADAM §4).
            let often = reads > average || reads >= th.read_often;
            let label = Label::of(large, written || often);
            let share = total > 0 && reads * 100 >= total * th.strong_percent;
            let strong = large && (th.strong_percent == 0 || share);
            if label == Label::Hot {
                out.push((root, k.into(), strong));
            }
        }
    }
    // Shallow first, so a nested split finds its entries already moved to its area.
    out.sort_by_key(|(_, k, _)| k.len());
    out
}

/// `o` is a path below `k` (both relative to one root).
fn is_below(o: &[u8], k: &[u8]) -> bool {
    o.len() > k.len() && o.starts_with(k) && o[k.len()] == b'/'
}

/// Areas to fold back: small and cold (few reads, never written this round).
fn plan_merges(t: &Table, th: &Thresholds) -> Vec<u64> {
    t.amt
        .iter()
        .filter(|(&root, a)| {
            let n: usize = a.by_cred.iter().map(|m| m.len()).sum();
            root != ROOT_INO
                && n < th.small
                && a.reads.load(Ordering::Relaxed) < th.cold_reads
                && !a.written.load(Ordering::Relaxed)
        })
        .map(|(&r, _)| r)
        .collect()
}

/// Make the directory at `key` in the area of `root` a root, moving the entries below
/// it one by one. False when the epoch moved meanwhile (give the round up).
fn split(inner: &Inner, tag: u64, root: u64, key: &[u8]) -> bool {
    let (ino, below) = {
        let t = inner.table.read();
        if t.tag != tag {
            return false;
        }
        let Some(a) = t.amt.get(&root) else {
            return true;
        };
        let ino = a.by_cred.iter().find_map(|m| m.get(key).map(|d| d.ino));
        let below: Vec<(usize, Box<[u8]>)> = a
            .by_cred
            .iter()
            .enumerate()
            .flat_map(|(c, m)| {
                m.keys()
                    .filter(|k| is_below(k, key))
                    .map(move |k| (c, k.clone()))
            })
            .collect();
        (ino, below)
    };
    let Some(ino) = ino else { return true };
    {
        let mut t = inner.table.write();
        if t.tag != tag {
            return false;
        }
        t.amt.entry(ino).or_default();
    }
    for (c, k) in below {
        let mut t = inner.table.write();
        if t.tag != tag {
            return false;
        }
        move_entry(&mut t, (root, c, &k), (ino, &k[key.len() + 1..]));
    }
    true
}

/// Fold the area of `root` back into the area holding `root`'s entry, entry by entry,
/// then drop it. False when it was not merged.
fn merge(inner: &Inner, tag: u64, root: u64) -> bool {
    let (parent, entries) = {
        let t = inner.table.read();
        if t.tag != tag || root == ROOT_INO {
            return false;
        }
        let parent = t.amt.iter().find_map(|(&r, a)| {
            a.by_cred.iter().enumerate().find_map(|(c, m)| {
                m.iter()
                    .find(|(_, d)| d.ino == root)
                    .map(|(k, _)| (r, c, k.clone()))
            })
        });
        let Some(a) = t.amt.get(&root) else {
            return false;
        };
        let entries: Vec<(usize, Box<[u8]>)> = a
            .by_cred
            .iter()
            .enumerate()
            .flat_map(|(c, m)| m.keys().map(move |k| (c, k.clone())))
            .collect();
        (parent, entries)
    };
    // Where its root is known to no area (forgotten, or known to another credential
    // only) its entries go with it: lookups learn them again in the parent's area.
    if let Some((p, pc, pkey)) = parent {
        for (c, k) in entries.into_iter().filter(|(c, _)| *c == pc) {
            let mut t = inner.table.write();
            if t.tag != tag {
                return false;
            }
            let mut to = pkey.to_vec();
            to.push(b'/');
            to.extend_from_slice(&k);
            move_entry(&mut t, (root, c, &k), (p, &to));
        }
    }
    let mut t = inner.table.write();
    if let Some(a) = t.amt.remove(&root) {
        t.entries = t
            .entries
            .saturating_sub(a.by_cred.iter().map(|m| m.len()).sum::<usize>());
    }
    true
}

/// Move one entry between areas (the same credential).
fn move_entry(t: &mut Table, from: (u64, usize, &[u8]), to: (u64, &[u8])) {
    let (root, c, key) = from;
    let Some(d) = t
        .amt
        .get_mut(&root)
        .and_then(|a| a.by_cred.get_mut(c))
        .and_then(|m| m.remove(key))
    else {
        return;
    };
    t.entries = t.entries.saturating_sub(1);
    t.insert(to.0, c, to.1, d.ino);
}

/// The background thread: started by the first lookup that learns something while
/// evolution is on; ends when the areas go.
pub(super) struct Evolver {
    started: AtomicBool,
    on: AtomicBool,
    stop: Mutex<bool>,
    wake: Condvar,
    interval_ms: AtomicU64,
    splits: AtomicU64,
    merges: AtomicU64,
    inherits: AtomicU64,
}

/// Between rounds, unless `LYNXFS_EVOLUTION_MS` says otherwise.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

impl Evolver {
    pub(super) fn new() -> Evolver {
        let ms = std::env::var("LYNXFS_EVOLUTION_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&ms| ms > 0)
            .unwrap_or(DEFAULT_INTERVAL.as_millis() as u64);
        Evolver {
            started: AtomicBool::new(false),
            on: AtomicBool::new(false),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            interval_ms: AtomicU64::new(ms),
            splits: AtomicU64::new(0),
            merges: AtomicU64::new(0),
            inherits: AtomicU64::new(0),
        }
    }

    /// Whether lookups count reads for the state map.
    #[inline]
    pub(super) fn running(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Evolution switched `on` (or off): start the thread the first time.
    pub(super) fn start_if(&self, on: bool, inner: &Arc<Inner>) {
        self.on.store(on, Ordering::Relaxed);
        if !on || self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak: Weak<Inner> = Arc::downgrade(inner);
        let spawned = std::thread::Builder::new()
            .name("lynxfs-evolve".into())
            .spawn(move || {
                // An engine thread: no program code runs here.
                crate::pmem::keys::open_thread();
                run(weak)
            });
        if spawned.is_err() {
            // No thread: the areas keep their shape (as with evolution off).
            self.started.store(false, Ordering::Release);
        }
    }

    pub(super) fn set_interval(&self, every: Duration) {
        self.interval_ms
            .store((every.as_millis() as u64).max(1), Ordering::Relaxed);
        self.wake.notify_all();
    }

    pub(super) fn stop(&self) {
        *self.stop.lock() = true;
        self.wake.notify_all();
    }

    fn add(&self, r: Round) {
        self.splits.fetch_add(r.splits, Ordering::Relaxed);
        self.merges.fetch_add(r.merges, Ordering::Relaxed);
        self.inherits.fetch_add(r.inherits, Ordering::Relaxed);
    }

    pub(super) fn rounds(&self) -> Round {
        Round {
            splits: self.splits.load(Ordering::Relaxed),
            merges: self.merges.load(Ordering::Relaxed),
            inherits: self.inherits.load(Ordering::Relaxed),
        }
    }
}

fn run(weak: Weak<Inner>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let every = Duration::from_millis(inner.evolver.interval_ms.load(Ordering::Relaxed));
        {
            let mut stop = inner.evolver.stop.lock();
            if !*stop {
                inner.evolver.wake.wait_for(&mut stop, every);
            }
            if *stop {
                return;
            }
        }
        if inner.evolver.running() {
            // A round changes process-local state too: a fork waits for it.
            let _pass = crate::runtime::fork_gate::Pass::enter();
            round(&inner, &Thresholds::default());
        }
    }
}
