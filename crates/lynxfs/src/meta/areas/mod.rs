//! ADAM's full-path areas (AFDN): a deep path resolved in one probe.
//!
//! An area is a root directory and the directories of its subtree down to nested area
//! roots; each is remembered by its path relative to the root, so a path below a root
//! is answered by one hash probe. The area table (ADAM's AMT) maps each root's inode to
//! its area; the pool's root is always one. A path from a root that crosses a nested
//! root continues in the nested area with the rest of the path.
//!
//! The areas live in this process's memory, as a cache of what component walks found,
//! validated against the areas' epoch in the shared runtime region
//! ([`super::area_epoch`]): an entry is learnt only from a walk no change to a
//! directory overlapped, and answers only in the epoch it was learnt in. Entries are
//! kept per credential, so an answer also stands for the search permission the walk
//! checked on every directory it crossed (Tsai et al.'s prefix-check cache): chmod,
//! chown, ACL and flag changes of directories move the epoch. Only directories are
//! remembered, never the last name of a path, a symlink, `.` or `..`: the walk looks
//! those up itself, so hard links, negative lookups and a mounted scope's exits stay
//! the walk's. `docs/ARCHITECTURE.md` ("Full-path areas") says why they live here and
//! what it costs.

mod evolution;

pub use evolution::{Label, Thresholds};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use super::area_epoch::{AreaEpoch, Changing};
use super::{is_dir, Cred, Namespace};
use crate::format::{dentry, ROOT_INO};
use crate::pmem::Backend;

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Entries this process keeps at most: past it the areas start afresh (a `find` over
/// millions of directories would otherwise hold them all).
const MAX_ENTRIES: usize = 1 << 20;
/// Credentials remembered at most; others walk.
const MAX_CREDS: usize = 16;

/// This process's areas over one namespace.
pub struct Areas {
    inner: Arc<Inner>,
}

pub(super) struct Inner {
    epoch: AreaEpoch,
    table: RwLock<Table>,
    /// `table` is held across a fork by the forking thread (see `Areas::before_fork`).
    held_for_fork: std::sync::atomic::AtomicBool,
    /// The evolution thread's state.
    evolver: evolution::Evolver,
}

/// The area table and the areas' entries.
pub(super) struct Table {
    /// The epoch word the entries were learnt in (entries of another are dead).
    tag: u64,
    /// The credentials entries were learnt with, by number.
    creds: Vec<Cred>,
    /// Area roots to their areas (ADAM's AMT).
    amt: Map<u64, Area>,
    /// Entries in all areas.
    entries: usize,
}

#[derive(Default)]
pub(super) struct Area {
    /// Per credential number: directories below the root by relative path.
    by_cred: Vec<Map<Box<[u8]>, Dir>>,
    /// Answers that ended in this area since the last evolution round.
    reads: AtomicU64,
    /// Renames of the root (or of directories in the area) seen by this process.
    written: AtomicBool,
}

/// A directory an area knows.
pub(super) struct Dir {
    ino: u64,
    /// Answers that ended here since the last evolution round (only counted while
    /// evolution runs).
    reads: AtomicU32,
}

impl Dir {
    fn new(ino: u64) -> Dir {
        Dir {
            ino,
            reads: AtomicU32::new(0),
        }
    }
}

impl Table {
    fn new() -> Table {
        let mut amt = Map::default();
        amt.insert(ROOT_INO, Area::default());
        Table {
            tag: u64::MAX,
            creds: Vec::new(),
            amt,
            entries: 0,
        }
    }

    /// Drop every entry (another epoch, or too many), keeping the areas' roots.
    fn forget(&mut self, tag: u64) {
        for a in self.amt.values_mut() {
            a.by_cred.clear();
        }
        self.entries = 0;
        self.tag = tag;
    }

    fn cred_number(&self, cred: &Cred) -> Option<usize> {
        self.creds.iter().position(|c| c == cred)
    }

    fn cred_number_or_new(&mut self, cred: &Cred) -> Option<usize> {
        self.cred_number(cred).or_else(|| {
            (self.creds.len() < MAX_CREDS).then(|| {
                self.creds.push(cred.clone());
                self.creds.len() - 1
            })
        })
    }

    fn insert(&mut self, root: u64, cred: usize, key: &[u8], ino: u64) {
        let Some(area) = self.amt.get_mut(&root) else {
            return;
        };
        if area.by_cred.len() <= cred {
            area.by_cred.resize_with(cred + 1, Map::default);
        }
        if area.by_cred[cred]
            .insert(key.into(), Dir::new(ino))
            .is_none()
        {
            self.entries += 1;
        }
    }
}

/// Where a probe of the areas got to: directory `ino` at `len` bytes of the run, in
/// the area rooted at `root` whose relative paths start at byte `start` of the run.
#[derive(Clone, Copy)]
struct Reached {
    ino: u64,
    len: usize,
    root: u64,
    start: usize,
}

/// The longest leading part of `run` made of plain names (not `.` or `..`, at most
/// NAME_MAX bytes) each separated by one '/': what areas may key and answer.
fn plain_len(run: &[u8]) -> usize {
    let mut end = 0;
    for (i, name) in run.split(|&b| b == b'/').enumerate() {
        let bad = name.is_empty() || name == b"." || name == b".." || name.len() > dentry::NAME_MAX;
        if bad {
            break;
        }
        end = if i == 0 {
            name.len()
        } else {
            end + 1 + name.len()
        };
    }
    end
}

impl Areas {
    pub fn new(epoch: AreaEpoch) -> Areas {
        Areas {
            inner: Arc::new(Inner {
                epoch,
                table: RwLock::new(Table::new()),
                held_for_fork: AtomicBool::new(false),
                evolver: evolution::Evolver::new(),
            }),
        }
    }

    /// A change to directories starts (see [`super::area_epoch`]).
    pub fn changing(&self) -> Changing<'_> {
        self.inner.epoch.changing()
    }

    /// The runtime state was rebuilt: every process's areas start afresh.
    pub fn repaired(&self) {
        self.inner.epoch.repaired()
    }

    /// The directory the longest leading run of `run`'s names leads to from directory
    /// `dir` that the areas answer (learning it by a walk as `cred` when they do not
    /// know it yet), and the run's length; `None` to leave it all to the component
    /// walk. Every directory crossed was searched by `cred`, in the epoch the answer
    /// was learnt in, which is still the current one. A directory that is not an area
    /// root becomes one when a walk from it learns something (a working directory's
    /// relative paths get an area of their own).
    pub fn answer<B: Backend>(
        &self,
        ns: &Namespace<B>,
        dir: u64,
        run: &[u8],
        cred: &Cred,
    ) -> Option<(u64, usize)> {
        let w = self.inner.epoch.current()?;
        let run = &run[..plain_len(run)];
        if run.is_empty() {
            return None;
        }
        // Reads are counted for the state map while evolution is on; switched on, its
        // thread starts.
        let counting = ns.mechanisms.evolution();
        if counting != self.inner.evolver.running() {
            self.inner.evolver.start_if(counting, &self.inner);
        }
        let reached = {
            let t = self.inner.table.read();
            self.probe(&t, w, dir, run, cred, counting)
        };
        if reached.len == run.len() {
            return Some((reached.ino, reached.len));
        }
        let learnt = self.learn(ns, w, reached, run, cred);
        (learnt.len > 0).then_some((learnt.ino, learnt.len))
    }

    /// The longest run the areas know, crossing nested roots (none when `dir` is not
    /// an area root).
    fn probe(
        &self,
        t: &Table,
        w: u64,
        dir: u64,
        run: &[u8],
        cred: &Cred,
        counting: bool,
    ) -> Reached {
        let mut r = Reached {
            ino: dir,
            len: 0,
            root: dir,
            start: 0,
        };
        let Some(mut area) = t.amt.get(&dir) else {
            return r;
        };
        let known = (t.tag == w).then(|| t.cred_number(cred)).flatten();
        let Some(c) = known else {
            return r;
        };
        loop {
            let Some(map) = area.by_cred.get(c) else {
                return r;
            };
            let rest = &run[r.start..];
            let Some((len, d)) = longest(map, rest) else {
                return r;
            };
            r.ino = d.ino;
            r.len = r.start + len;
            if counting {
                d.reads.fetch_add(1, Ordering::Relaxed);
                area.reads.fetch_add(1, Ordering::Relaxed);
            }
            if r.len == run.len() {
                return r;
            }
            match t.amt.get(&d.ino) {
                Some(nested) => {
                    area = nested;
                    r.root = d.ino;
                    r.start = r.len + 1;
                }
                None => return r,
            }
        }
    }

    /// Walk the rest of `run` from where the probe got to, as `cred`, and remember
    /// each directory reached if no change to directories overlapped the walk.
    fn learn<B: Backend>(
        &self,
        ns: &Namespace<B>,
        w: u64,
        from: Reached,
        run: &[u8],
        cred: &Cred,
    ) -> Reached {
        let mut steps: Vec<(usize, u64)> = Vec::new();
        let (mut pos, mut d) = (if from.len == 0 { 0 } else { from.len + 1 }, from.ino);
        while pos < run.len() {
            let end = run[pos..]
                .iter()
                .position(|&b| b == b'/')
                .map_or(run.len(), |i| pos + i);
            match ns.lookup(d, &run[pos..end], cred) {
                Ok(next) if is_dir(ns.mode(next)) => {
                    steps.push((end, next));
                    d = next;
                }
                // A symlink, a file or an error: the walk takes it from here.
                _ => break,
            }
            pos = end + 1;
        }
        let Some(&(len, ino)) = steps.last() else {
            return from;
        };
        let mut t = self.inner.table.write();
        if self.inner.epoch.still(w) {
            if t.entries + steps.len() > MAX_ENTRIES {
                // Full: start afresh, areas too (every start directory made one).
                t.amt.retain(|&root, _| root == ROOT_INO);
                t.forget(w);
            } else if t.tag != w {
                t.forget(w);
            }
            if let Some(c) = t.cred_number_or_new(cred) {
                t.amt.entry(from.root).or_default();
                let (mut root, mut start) = (from.root, from.start);
                for &(end, ino) in &steps {
                    t.insert(root, c, &run[start..end], ino);
                    if t.amt.contains_key(&ino) {
                        (root, start) = (ino, end + 1);
                    }
                }
            }
        }
        Reached {
            ino,
            len,
            root: from.root,
            start: from.start,
        }
    }

    /// A directory was renamed by this process (a write, for the state map).
    pub fn renamed(&self, dir: u64) {
        if let Some(a) = self.inner.table.read().amt.get(&dir) {
            a.written.store(true, Ordering::Relaxed);
        }
    }

    /// Before a fork: hold the table, so that no other thread holds it while the
    /// process is copied (the child would find it held forever). Paired with
    /// [`Self::after_fork`] in the parent and in the child.
    pub fn before_fork(&self) {
        std::mem::forget(self.inner.table.write());
        self.inner.held_for_fork.store(true, Ordering::Release);
    }

    /// After a fork, in the parent and in the child: let go of the table
    /// [`Self::before_fork`] held.
    /// Nothing when `before_fork` did not run.
    pub fn after_fork(&self) {
        if self.inner.held_for_fork.swap(false, Ordering::AcqRel) {
            // SAFETY: `before_fork` took the write lock in this thread (the one that
            // forked, which is the child's only thread) and forgot its guard, then set
            // the flag this call cleared: the lock is held exclusively, and nothing
            // else releases it.
            // (parking_lot's exclusive guard state is a stateless marker.)
            unsafe {
                self.inner
                    .table
                    .force_unlock_write(parking_lot::lock_api::GuardNoSend::new())
            }
        }
    }

    /// One evolution round now, with `th` (tests force one at chosen points).
    pub fn evolve(&self, th: &Thresholds) -> evolution::Round {
        evolution::round(&self.inner, th)
    }

    /// Seconds between evolution rounds (5 by default, or `LYNXFS_EVOLUTION_MS`).
    pub fn set_evolution_interval(&self, every: std::time::Duration) {
        self.inner.evolver.set_interval(every)
    }

    /// What `lynxfs info` shows: this process's areas.
    pub fn summary(&self) -> Summary {
        let t = self.inner.table.read();
        let mut areas: Vec<AreaSummary> = t
            .amt
            .iter()
            .map(|(&root, a)| AreaSummary {
                root,
                entries: a.by_cred.iter().map(|m| m.len()).sum(),
                label: evolution::area_label(a),
            })
            .collect();
        areas.sort_by_key(|a| a.root);
        Summary {
            epoch: self.inner.epoch.epoch(),
            areas,
            rounds: self.inner.evolver.rounds(),
        }
    }
}

impl Drop for Areas {
    fn drop(&mut self) {
        self.inner.evolver.stop();
    }
}

/// The longest leading run of names of `rest` (plain names, one '/' apart) that `map`
/// holds, longest first.
fn longest<'m>(map: &'m Map<Box<[u8]>, Dir>, rest: &[u8]) -> Option<(usize, &'m Dir)> {
    let mut len = rest.len();
    loop {
        if let Some(d) = map.get(&rest[..len]) {
            return Some((len, d));
        }
        len = rest[..len].iter().rposition(|&b| b == b'/')?;
    }
}

/// This process's areas, for `lynxfs info`.
#[derive(Clone, Debug)]
pub struct Summary {
    /// The areas' epoch in the shared runtime region.
    pub epoch: u64,
    pub areas: Vec<AreaSummary>,
    /// Evolution rounds run (splits, merges, inherits).
    pub rounds: evolution::Round,
}

#[derive(Clone, Debug)]
pub struct AreaSummary {
    pub root: u64,
    pub entries: usize,
    pub label: Label,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_runs_stop_at_dots_and_doubled_slashes() {
        assert_eq!(plain_len(b"a/b/c"), 5);
        assert_eq!(plain_len(b"a//b"), 1);
        assert_eq!(plain_len(b"a/./b"), 1);
        assert_eq!(plain_len(b"a/../b"), 1);
        assert_eq!(plain_len(b"../b"), 0);
        assert_eq!(plain_len(b"."), 0);
    }
}
