//! The global metadata index (DirectFS): one hash table, keyed by (parent inode, name),
//! for every indexed directory entry in the pool. It replaces both a VFS dentry cache
//! and a per-directory on-media index. It lives in a [`Span`] of the shared runtime
//! region, so every process attached to the pool uses the same table
//! (docs/FORMAT.md, "Runtime state: the index").
//!
//! **Shape.** A fixed number of 16-byte slots (sized from the pool's dentry count, so
//! it never grows), open addressing with linear probing. A slot does not hold the
//! name: it names the entry's dentry, whose parent and name in the pool are the key,
//! and keeps beside it the inode number (the quick path: a lookup needs no dependent
//! pool read for it), the file type and a 12-bit tag of the key's hash, so that a
//! probe reads the pool only for slots whose tag matches. Word `a` holds the state, a
//! version and the dentry id; word `b` the inode number, type and tag. Every change
//! of `a` bumps the version.
//!
//! **Lookups** take no lock and store nothing: they read `a`, then `b` and the
//! dentry's parent and name, then `a` again, and trust what they read only when `a`
//! did not change (a seqlock per slot: `b` and the dentry change only while the slot
//! holds another incarnation, which has another version). So a lookup racing with
//! changes sees the entry as it was or as it is, never a mix.
//!
//! **Claims** (a create's, a rename's or a link's new name) hold a stripe lock chosen
//! by the key's hash (1024 stripes), so two claims of one name, from any processes,
//! are serialized: the second finds the first's entry. Because the key is the
//! dentry's, the claimer must have written its dentry's parent and name (uncommitted)
//! before it claims. A claim takes the first tombstone on the key's probe path, else
//! the empty slot that ends it.
//!
//! **Removal** is a compare-and-swap of the slot's state (Ready -> Leaving -> tombstone),
//! no lock. Tombstones would otherwise pile up in a table that never rehashes, making
//! misses ever longer, so a removal empties its tombstone again when the next slot is
//! empty (and then the tombstones before it): a slot may be emptied only while the
//! slot after it is empty, which keeps the invariant that no probe path of a live
//! entry crosses an empty slot. Filling an empty slot and emptying the slot before it
//! hold the fill's region lock (one per 256 slots; emptying only tries it), and a claim
//! checks after filling that its probe path has no empty slot, undoing and retrying if
//! one appeared meanwhile.
//!
//! Every wait (the stripe and region locks, a create waiting for another's) is bounded
//! by a [`Watch`]: a process killed mid-change leaves at worst a held lock or a slot
//! stuck Creating, which the runtime's repair rebuilds from the pool.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{errno, Result};
use crate::format::layout::DENTRY_SIZE;
use crate::format::{dentry, Layout};
use crate::pmem::{Backend, Pm};
use crate::runtime::lock::{self, Interrupted, Watch};
use crate::runtime::Span;

/// The version of the index's layout in the runtime region (docs/FORMAT.md).
pub const VERSION: u32 = 1;

/// Stripe locks for claims; each has a cache line with its entry count.
const STRIPES: usize = 1024;
/// Slots per region lock.
const REGION: u64 = 256;
const SLOT_BYTES: u64 = 16;

// Word `a`: state (3 bits) | version (21 bits) | dentry id (40 bits).
const STATE_MASK: u64 = 0b111;
const VERSION_SHIFT: u32 = 3;
const VERSION_MASK: u64 = (1 << 21) - 1;
const ID_SHIFT: u32 = 24;
const MAX_DENTRIES: u64 = 1 << 40;
// Word `b`: inode number (48 bits) | file type (4 bits) | tag (12 bits).
const INO_MASK: u64 = (1 << 48) - 1;
const DTYPE_SHIFT: u32 = 48;
const TAG_SHIFT: u32 = 52;
const TAG_MASK: u64 = (1 << 12) - 1;
const MAX_INODES: u64 = 1 << 48;

const EMPTY: u64 = 0;
const TOMB: u64 = 1;
const CREATING: u64 = 2;
const READY: u64 = 3;
const LEAVING: u64 = 4;

/// Where an entry stands. Changed only by compare-and-swap of the slot's word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// A create (or a rename, a link) has claimed the name and is writing the pool;
    /// lookups do not see it.
    Creating,
    /// Committed and visible.
    Ready,
    /// An unlink or rename has claimed it; visible until that operation commits.
    Leaving,
}

/// An index entry as read: the dentry's place in the pool, the inode number (the
/// "quick path": the inode's address follows from the number), and the slot it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub state: State,
    pub ino: u64,
    /// Pool offset of the dentry.
    pub dentry: u64,
    /// Pool offset of the directory-log slot naming the dentry (its `slot` field).
    pub slot: u64,
    /// The entry's file type (DT_*), so readdir-plus and unlink need no inode read.
    pub dtype: u8,
    /// The index slot holding it (meaningless before a claim).
    pub pos: u64,
}

impl Entry {
    pub fn visible(&self) -> bool {
        self.state != State::Creating
    }
}

/// What a claim found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The name is ours, Creating, in this index slot: publish or abandon it.
    Claimed(u64),
    /// The name is already there (in any state).
    Taken(Entry),
}

/// The pool's words, as the index reads dentries (the pool itself, or a test's stand-in).
pub trait Dentries {
    /// The 8-byte word at pool offset `off` (8-aligned), read atomically.
    fn word(&self, off: u64) -> u64;
}

impl<B: Backend> Dentries for Pm<B> {
    fn word(&self, off: u64) -> u64 {
        self.load_u64(off)
    }
}

/// A key with what its hash decides: where its probe path starts and its tag.
struct Probe<'a> {
    parent: u64,
    name: &'a [u8],
    home: u64,
    tag: u64,
}

/// One slot as read by a probe.
enum Seen {
    Empty(u64),
    Tomb(u64),
    /// Occupied by another key.
    Other,
    /// Occupied by the probe's key: the entry and the slot's word `a`.
    Match(Entry, u64),
}

/// The index over its span of the runtime region.
pub struct Index {
    span: Span,
    /// Slots.
    cap: u64,
    /// Index (in 32-bit words) of the first region lock.
    regions_at: usize,
    /// Index (in 64-bit words) of slot 0's word `a`.
    slots_at: usize,
    dentry_off: u64,
    dentries: u64,
}

/// Slots, region-lock offset, slot offset and total bytes for a layout.
fn geometry(layout: &Layout) -> (u64, u64, u64, u64) {
    let d = layout.total_dentries();
    // Load factor at most 3/4 with every dentry named (each occupied slot names a
    // distinct dentry).
    let cap = (d + d / 3 + 1).next_multiple_of(REGION);
    let regions_off = (STRIPES * 64) as u64;
    let slots_off = (regions_off + cap / REGION * 4).next_multiple_of(64);
    (cap, regions_off, slots_off, slots_off + cap * SLOT_BYTES)
}

/// A 64-bit hash of (parent, name), the same in every process and build (the slot
/// positions depend on it): 8 bytes at a time, folded multiplies.
pub fn key_hash(parent: u64, name: &[u8]) -> u64 {
    const K0: u64 = 0x9e37_79b9_7f4a_7c15;
    const K1: u64 = 0xd6e8_feb8_6659_fd93;
    let fold = |a: u64, b: u64| {
        let m = a as u128 * b as u128;
        (m as u64) ^ ((m >> 64) as u64)
    };
    let mut h = fold(parent ^ K0, K1 ^ name.len() as u64);
    let mut chunks = name.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("8-byte chunk"));
        h = fold(h ^ w, K1);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut buf = [0u8; 8];
        buf[..rest.len()].copy_from_slice(rest);
        h = fold(h ^ u64::from_le_bytes(buf), K0);
    }
    fold(h, K0)
}

fn state_of(a: u64) -> u64 {
    a & STATE_MASK
}

/// Word `a` after `old` with a new state and dentry id (and the next version).
fn next_a(old: u64, state: u64, id: u64) -> u64 {
    let version = ((old >> VERSION_SHIFT) + 1) & VERSION_MASK;
    state | version << VERSION_SHIFT | id << ID_SHIFT
}

fn visible_state(s: u64) -> Option<State> {
    match s {
        CREATING => Some(State::Creating),
        READY => Some(State::Ready),
        LEAVING => Some(State::Leaving),
        _ => None,
    }
}

/// One step of a wait for another operation (a create's Creating entry): yield for a
/// while, then sleep in short slices, asking the watch between them.
pub fn wait_turn(turns: &mut u32, watch: &dyn Watch) -> std::result::Result<(), Interrupted> {
    *turns += 1;
    if *turns < 64 {
        std::thread::yield_now();
        return Ok(());
    }
    std::thread::sleep(Duration::from_micros(100));
    watch.check()
}

impl Index {
    /// Bytes of runtime region the index of a pool with `layout` takes.
    pub fn bytes_needed(layout: &Layout) -> usize {
        geometry(layout).3 as usize
    }

    /// The index over `span` (at least [`Index::bytes_needed`] bytes). Zeroed memory
    /// (a fresh region) is an empty index.
    pub fn new(span: Span, layout: &Layout) -> Result<Index> {
        let (cap, regions_off, slots_off, total) = geometry(layout);
        if layout.total_dentries() >= MAX_DENTRIES || layout.total_inodes() >= MAX_INODES {
            return Err(crate::Error::Invalid(format!(
                "the pool has too many dentries or inodes for the index ({} and {}; at most 2^40 and 2^48)",
                layout.total_dentries(),
                layout.total_inodes()
            )));
        }
        if (span.bytes() as u64) < total {
            return Err(crate::Error::Invalid(format!(
                "the index needs {total} bytes of runtime region, given {}",
                span.bytes()
            )));
        }
        Ok(Index {
            span,
            cap,
            regions_at: (regions_off / 4) as usize,
            slots_at: (slots_off / 8) as usize,
            dentry_off: layout.dentry_off,
            dentries: layout.total_dentries(),
        })
    }

    /// Slots in the table.
    pub fn capacity(&self) -> u64 {
        self.cap
    }

    fn probe<'a>(&self, parent: u64, name: &'a [u8]) -> Probe<'a> {
        let h = key_hash(parent, name);
        Probe {
            parent,
            name,
            // The high bits, scaled to the capacity (no power of two needed).
            home: ((h as u128 * self.cap as u128) >> 64) as u64,
            tag: h & TAG_MASK,
        }
    }

    fn words(&self) -> &[AtomicU64] {
        self.span.words()
    }

    fn slot<'w>(&self, w: &'w [AtomicU64], i: u64) -> (&'w AtomicU64, &'w AtomicU64) {
        let at = self.slots_at + 2 * i as usize;
        (&w[at], &w[at + 1])
    }

    fn next(&self, i: u64) -> u64 {
        if i + 1 == self.cap {
            0
        } else {
            i + 1
        }
    }

    fn prev(&self, i: u64) -> u64 {
        if i == 0 {
            self.cap - 1
        } else {
            i - 1
        }
    }

    fn stripe(&self, tag: u64) -> usize {
        tag as usize % STRIPES
    }

    fn stripe_lock(&self, tag: u64) -> &AtomicU32 {
        &self.span.u32s()[self.stripe(tag) * 16]
    }

    fn stripe_count(&self, tag: u64) -> &AtomicU64 {
        &self.words()[self.stripe(tag) * 8 + 1]
    }

    fn region_lock(&self, i: u64) -> &AtomicU32 {
        &self.span.u32s()[self.regions_at + (i / REGION) as usize]
    }

    fn dentry_addr(&self, id: u64) -> Option<u64> {
        (id >= 1 && id < self.dentries).then(|| self.dentry_off + id * DENTRY_SIZE)
    }

    fn dentry_id(&self, addr: u64) -> Result<u64> {
        let rel = addr.checked_sub(self.dentry_off).ok_or(errno::EINVAL)?;
        let id = rel / DENTRY_SIZE;
        if rel % DENTRY_SIZE != 0 || self.dentry_addr(id).is_none() {
            return Err(errno::EINVAL);
        }
        Ok(id)
    }

    /// Does the dentry at `d` hold the probe's parent and name?
    fn names(&self, pool: &impl Dentries, d: u64, p: &Probe<'_>) -> bool {
        if pool.word(d + dentry::PARENT) != p.parent {
            return false;
        }
        let (len, _) = dentry::split_name_len(pool.word(d + dentry::NAME_LEN));
        if len != p.name.len() {
            return false;
        }
        // Whole words, compared under a mask: bytes past the name may be leftovers.
        p.name.chunks(8).enumerate().all(|(i, c)| {
            let mut buf = [0u8; 8];
            buf[..c.len()].copy_from_slice(c);
            let mask = if c.len() == 8 {
                u64::MAX
            } else {
                (1u64 << (8 * c.len())) - 1
            };
            pool.word(d + dentry::NAME + 8 * i as u64) & mask == u64::from_le_bytes(buf)
        })
    }

    /// Read slot `i` for probe `p`, consistently: `a` is read again after everything
    /// else, and the slot is read anew if it changed meanwhile.
    fn look(&self, pool: &impl Dentries, w: &[AtomicU64], i: u64, p: &Probe<'_>) -> Seen {
        let (aw, bw) = self.slot(w, i);
        loop {
            let a = aw.load(Ordering::Acquire);
            let Some(state) = visible_state(state_of(a)) else {
                return match state_of(a) {
                    EMPTY => Seen::Empty(a),
                    TOMB => Seen::Tomb(a),
                    _ => Seen::Other, // torn state: not this key
                };
            };
            // Acquire: read after `a`, and before the second read of `a`.
            let b = bw.load(Ordering::Acquire);
            if (b >> TAG_SHIFT) & TAG_MASK != p.tag {
                return Seen::Other;
            }
            let d = self.dentry_addr(a >> ID_SHIFT);
            let hit = d.is_some_and(|d| self.names(pool, d, p));
            let slot = match d {
                Some(d) if hit => pool.word(d + dentry::SLOT),
                _ => 0,
            };
            if aw.load(Ordering::Acquire) != a {
                continue;
            }
            return match d {
                Some(dentry) if hit => Seen::Match(
                    Entry {
                        state,
                        ino: b & INO_MASK,
                        dentry,
                        slot,
                        dtype: ((b >> DTYPE_SHIFT) & 0xf) as u8,
                        pos: i,
                    },
                    a,
                ),
                _ => Seen::Other,
            };
        }
    }

    /// The first entry for `p` that `want` accepts, walking its probe path; lock-free.
    fn search(
        &self,
        pool: &impl Dentries,
        p: &Probe<'_>,
        want: impl Fn(&Entry) -> bool,
    ) -> Option<(Entry, u64)> {
        let w = self.words();
        let mut i = p.home;
        for _ in 0..self.cap {
            match self.look(pool, w, i, p) {
                Seen::Empty(_) => return None,
                Seen::Match(e, a) if want(&e) => return Some((e, a)),
                _ => {}
            }
            i = self.next(i);
        }
        None
    }

    /// The visible (Ready or Leaving) entry for (parent, name). No lock, no store.
    pub fn get(&self, pool: &impl Dentries, parent: u64, name: &[u8]) -> Option<Entry> {
        let p = self.probe(parent, name);
        self.search(pool, &p, Entry::visible).map(|(e, _)| e)
    }

    /// The entry for (parent, name) in any state, Creating included. No lock.
    pub fn find(&self, pool: &impl Dentries, parent: u64, name: &[u8]) -> Option<Entry> {
        let p = self.probe(parent, name);
        self.search(pool, &p, |_| true).map(|(e, _)| e)
    }

    /// Claim (parent, name) for `new`'s dentry (whose parent and name the pool must
    /// already hold), inode and type: a Creating entry, unless the name is there in a
    /// slot other than `beside` (a rename's own Leaving entry for this name).
    pub fn claim(
        &self,
        pool: &impl Dentries,
        parent: u64,
        name: &[u8],
        new: &Entry,
        beside: Option<u64>,
        watch: &dyn Watch,
    ) -> Result<Claim> {
        let id = self.dentry_id(new.dentry)?;
        if new.ino >= MAX_INODES {
            return Err(errno::EINVAL);
        }
        let p = self.probe(parent, name);
        let w = self.words();
        let _stripe = lock::lock(self.stripe_lock(p.tag), watch)?;
        loop {
            let (t, seen) = match self.scan(pool, w, &p, beside) {
                Ok(free) => free?,
                Err(e) => return Ok(Claim::Taken(e)),
            };
            if !self.fill(w, t, seen, id, watch)? {
                continue;
            }
            let b = new.ino | (new.dtype as u64 & 0xf) << DTYPE_SHIFT | p.tag << TAG_SHIFT;
            self.slot(w, t).1.store(b, Ordering::Release);
            if !self.path_full(w, p.home, t) {
                // An empty slot appeared on the path before ours: lookups would stop
                // there. Give the slot back and claim again.
                self.set_state(w, t, CREATING, TOMB);
                continue;
            }
            self.stripe_count(p.tag).fetch_add(1, Ordering::Relaxed);
            return Ok(Claim::Claimed(t));
        }
    }

    /// Under the stripe lock: `Err(entry)` if the key is there (outside `beside`),
    /// else where to put it: the first tombstone on its path, else the empty slot
    /// that ends it (with the word seen there).
    fn scan(
        &self,
        pool: &impl Dentries,
        w: &[AtomicU64],
        p: &Probe<'_>,
        beside: Option<u64>,
    ) -> std::result::Result<Result<(u64, u64)>, Entry> {
        let mut tomb = None;
        let mut i = p.home;
        for _ in 0..self.cap {
            match self.look(pool, w, i, p) {
                Seen::Empty(a) => return Ok(Ok(tomb.unwrap_or((i, a)))),
                Seen::Tomb(a) => {
                    tomb.get_or_insert((i, a));
                }
                Seen::Match(e, _) if Some(i) != beside => return Err(e),
                _ => {}
            }
            i = self.next(i);
        }
        // No empty slot anywhere: only a tombstone can take it (never with the
        // capacity rule, since occupied slots name distinct dentries).
        Ok(tomb.ok_or(errno::ENOSPC))
    }

    /// Take slot `t` (seen as `seen`) for dentry `id`, Creating. An empty slot is
    /// filled under its region lock, so that no removal empties the slot before it
    /// meanwhile (see `clean`).
    fn fill(
        &self,
        w: &[AtomicU64],
        t: u64,
        seen: u64,
        id: u64,
        watch: &dyn Watch,
    ) -> std::result::Result<bool, Interrupted> {
        let new = next_a(seen, CREATING, id);
        let aw = self.slot(w, t).0;
        let cas = || {
            aw.compare_exchange(seen, new, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        };
        if state_of(seen) == TOMB {
            return Ok(cas());
        }
        let _region = lock::lock(self.region_lock(t), watch)?;
        Ok(cas())
    }

    /// No empty slot from `home` up to (not including) `t`. Read backwards: slot `t`
    /// is occupied, so the one before it cannot be emptied (that needs `t` empty), and
    /// so on down: each slot found non-empty stays so.
    fn path_full(&self, w: &[AtomicU64], home: u64, t: u64) -> bool {
        let mut j = t;
        while j != home {
            j = self.prev(j);
            if state_of(self.slot(w, j).0.load(Ordering::Acquire)) == EMPTY {
                return false;
            }
        }
        true
    }

    /// Move slot `i` from state `from` to `to` (its own operation's slot: nobody else
    /// changes it meanwhile). False if it was not in `from`.
    fn set_state(&self, w: &[AtomicU64], i: u64, from: u64, to: u64) -> bool {
        let aw = self.slot(w, i).0;
        let mut a = aw.load(Ordering::Acquire);
        loop {
            if state_of(a) != from {
                return false;
            }
            let new = next_a(a, to, a >> ID_SHIFT);
            match aw.compare_exchange(a, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(now) => a = now,
            }
        }
    }

    /// A claimed entry is committed: Creating -> Ready, visible.
    pub fn publish(&self, pos: u64) {
        self.set_state(self.words(), pos, CREATING, READY);
    }

    /// A claim given up (the operation failed): the slot becomes a tombstone.
    pub fn abandon(&self, pos: u64) {
        let w = self.words();
        if self.set_state(w, pos, CREATING, TOMB) {
            self.gone(w, pos);
        }
    }

    /// Claim the Ready entry for (parent, name) for a removal or rename: Ready ->
    /// Leaving, a compare-and-swap (of two racing claims one wins). `None` if there is
    /// no Ready entry.
    pub fn leave(&self, pool: &impl Dentries, parent: u64, name: &[u8]) -> Option<Entry> {
        let p = self.probe(parent, name);
        let w = self.words();
        loop {
            let (e, a) = self.search(pool, &p, |e| e.state == State::Ready)?;
            let aw = self.slot(w, e.pos).0;
            let new = next_a(a, LEAVING, a >> ID_SHIFT);
            if aw
                .compare_exchange(a, new, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Some(Entry {
                    state: State::Leaving,
                    ..e
                });
            }
        }
    }

    /// Put an entry claimed by [`Index::leave`] back: Leaving -> Ready.
    pub fn stay(&self, e: &Entry) {
        self.set_state(self.words(), e.pos, LEAVING, READY);
    }

    /// An entry claimed by [`Index::leave`] is gone (its removal committed).
    pub fn remove(&self, e: &Entry) {
        let w = self.words();
        if self.set_state(w, e.pos, LEAVING, TOMB) {
            self.gone(w, e.pos);
        }
    }

    /// Insert a committed entry read from a directory's log (lazy loading), unless the
    /// name is already there. True if inserted.
    pub fn insert_loaded(
        &self,
        pool: &impl Dentries,
        parent: u64,
        name: &[u8],
        e: &Entry,
        watch: &dyn Watch,
    ) -> Result<bool> {
        match self.claim(pool, parent, name, e, None, watch)? {
            Claim::Claimed(pos) => {
                self.publish(pos);
                Ok(true)
            }
            Claim::Taken(_) => Ok(false),
        }
    }

    /// Drop the Ready entry for (parent, name) (eviction). True if there was one.
    pub fn evict(&self, pool: &impl Dentries, parent: u64, name: &[u8]) -> bool {
        match self.leave(pool, parent, name) {
            Some(e) => {
                self.remove(&e);
                true
            }
            None => false,
        }
    }

    /// Slot `pos` just became a tombstone: count the entry out and clean.
    fn gone(&self, w: &[AtomicU64], pos: u64) {
        let tag = (self.slot(w, pos).1.load(Ordering::Acquire) >> TAG_SHIFT) & TAG_MASK;
        self.stripe_count(tag).fetch_sub(1, Ordering::Relaxed);
        self.clean(w, pos);
    }

    /// Empty the tombstone at `i`, and those before it, while the slot after each is
    /// empty: no probe path of a live entry can then pass through it. The slot after
    /// stays empty because we hold its region lock (fills of an empty slot take it);
    /// only tried, never waited for, since cleaning is optional.
    fn clean(&self, w: &[AtomicU64], i: u64) {
        // At the top of each turn we hold the region lock of `after`, the slot after `k`.
        let mut k = i;
        let mut after = self.next(k);
        let Some(mut _held) = lock::try_lock(self.region_lock(after)) else {
            return;
        };
        for _ in 0..self.cap {
            if state_of(self.slot(w, after).0.load(Ordering::Acquire)) != EMPTY {
                return;
            }
            let aw = self.slot(w, k).0;
            let a = aw.load(Ordering::Acquire);
            if state_of(a) != TOMB
                || aw
                    .compare_exchange(a, next_a(a, EMPTY, 0), Ordering::AcqRel, Ordering::Relaxed)
                    .is_err()
            {
                return;
            }
            // Next the slot before `k`, which needs `k` to stay empty: its region's lock.
            if k / REGION != after / REGION {
                match lock::try_lock(self.region_lock(k)) {
                    Some(g) => _held = g,
                    None => return,
                }
            }
            after = k;
            k = self.prev(k);
        }
    }

    /// Occupied slots (Creating, Ready or Leaving entries): the stripes' counts summed.
    pub fn len(&self) -> usize {
        let w = self.words();
        let sum: i64 = (0..STRIPES).map(|s| w[s * 8 + 1].load(Ordering::Relaxed) as i64).sum();
        sum.max(0) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resident memory of the index, estimated: the stripe lines and region locks, and
    /// the slot pages that `len()` entries scattered at random have touched.
    pub fn dram_bytes(&self) -> u64 {
        const PAGE: f64 = 4096.0;
        let n = self.len() as f64;
        let touched = |bytes: f64| {
            let pages = (bytes / PAGE).ceil().max(1.0);
            pages * (1.0 - (-n / pages).exp()) * PAGE
        };
        let slots = (self.cap * SLOT_BYTES) as f64;
        let locks = (STRIPES * 64) as f64 + (self.cap / REGION * 4) as f64;
        (touched(slots) + touched(locks)) as u64
    }
}

/// A stable 64-bit hash of (parent, name) (FNV-1a), stored in each dentry so that
/// tools can check an entry without the DRAM index.
pub fn name_hash(parent: u64, name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in parent.to_le_bytes().iter().chain(name) {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The hasher of the process-private maps (open files, directories): foldhash,
/// seeded per map, several times faster than SipHash on short keys.
pub type IndexHasher = foldhash::fast::RandomState;
