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
//! changes sees the entry as it was or as it is, never a mix. A lookup that misses
//! reads the words of the slots it passed again and walks again if any changed
//! ([`Passed`]): slot by slot, a walk could otherwise pass a rename's new entry before
//! it was published and reach the old one after it went, and miss a name that was
//! there throughout (issue 42).
//!
//! **Claims** (a create's, a rename's or a link's new name) hold a stripe lock chosen
//! by the key's hash (1024 stripes), so two claims of one name, from any processes,
//! are serialized: the second finds the first's entry. Because the key is the
//! dentry's, the claimer must have written its dentry's parent and name (uncommitted)
//! before it claims. A claim takes the first tombstone on the key's probe path, else
//! the empty slot that ends it.
//!
//! **Sightings.** A create looks its name up before it claims it, and a rename its
//! names before it leaves and claims them. The lookup keeps what it saw (the entry
//! with its slot's word `a`, or a miss's path of `a` words), and the claim or leave
//! starts from that: a leave is one compare-and-swap from the word seen, a claim
//! under the stripe lock re-reads the path's words and takes the slot the walk ended
//! at if none changed. Any change sends them down the full walk.
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

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{errno, Result};
use crate::format::layout::DENTRY_SIZE;
use crate::format::{dentry, Layout};
use crate::pmem::{Backend, Pm};
use crate::runtime::lock::{self, Interrupted, Watch};
use crate::runtime::word::Word;
use crate::runtime::Span;

/// The version of the index's layout in the runtime region (docs/FORMAT.md).
pub const VERSION: u32 = 1;

/// Stripe locks for claims, one per cache line.
const STRIPES: usize = 1024;
/// Entry counters, one per cache line, shared out among the stripes: few enough that
/// `len` (summing them, on every directory load) stays cheap.
const COUNTERS: usize = 32;
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

/// How many entries ahead [`Index::insert_loaded`] prefetches: enough misses in
/// flight to cover one claim's own work (a CPU keeps about ten outstanding).
const LOAD_AHEAD: usize = 8;

/// Entries read from a directory's log for [`Index::insert_loaded`]: their names in
/// one buffer, so a load allocates nothing per entry.
#[derive(Default)]
pub struct LoadBatch {
    names: Vec<u8>,
    /// Each entry with the end of its name in `names` (the start is the previous end).
    entries: Vec<(usize, Entry)>,
}

impl LoadBatch {
    /// Forget the entries, keeping the memory.
    pub fn clear(&mut self) {
        self.names.clear();
        self.entries.clear();
    }

    /// Room for `n` more entries (names of 16 bytes on average) in one allocation.
    pub fn reserve(&mut self, n: usize) {
        self.entries.reserve(n);
        self.names.reserve(n * 16);
    }

    /// Add entry `e`, whose name is the `len` bytes `read` writes into the buffer it
    /// is given.
    pub fn push(&mut self, e: Entry, len: usize, read: impl FnOnce(&mut [u8])) {
        let start = self.names.len();
        self.names.resize(start + len, 0);
        read(&mut self.names[start..]);
        self.entries.push((start + len, e));
    }

    /// Each entry's name and the entry.
    fn iter(&self) -> impl Iterator<Item = (&[u8], &Entry)> {
        let starts = std::iter::once(0).chain(self.entries.iter().map(|&(end, _)| end));
        starts
            .zip(&self.entries)
            .map(|(start, (end, e))| (&self.names[start..*end], e))
    }
}

/// A key with what its hash decides: where its probe path starts and its tag.
#[derive(Clone, Copy)]
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
    /// Occupied by another key (or torn): the slot's word `a`.
    Other(u64),
    /// Occupied by the probe's key: the entry and the slot's word `a`.
    Match(Entry, u64),
}

/// Probe-path slots a [`Sighting`] of a missing key keeps; a longer path (rare in a
/// table sized for every dentry of the pool) is walked again by its claim.
const SIGHTED: usize = 4;

/// What a lock-free lookup of a key saw ([`Index::sight`]): the entry it returned
/// with its slot's word `a`, or, for a key it did not find, the `a` words of its
/// probe path up to the empty slot that ended it. A leave or a claim of the key that
/// follows starts from it instead of hashing the key and walking its path again: a
/// slot whose word `a` is unchanged holds what was seen (every change of a slot bumps
/// its version; the lookups' own reads rest on the same rule).
#[derive(Clone, Copy)]
pub struct Sighting<'a> {
    probe: Probe<'a>,
    saw: Saw,
}

/// What a sighting's walk saw.
#[derive(Clone, Copy)]
enum Saw {
    /// The entry returned, with its slot's word `a`.
    Entry(Entry, u64),
    /// No entry of the key: word `a` of the first `len` slots from its home on, the
    /// last the empty one that ended the walk.
    Path([u64; SIGHTED], u8),
    /// Nothing kept: the walk passed an entry of the key in a state not wanted, or
    /// a path longer than `SIGHTED`.
    Nothing,
}

impl Sighting<'_> {
    /// The entry found.
    pub fn entry(&self) -> Option<Entry> {
        match self.saw {
            Saw::Entry(e, _) => Some(e),
            _ => None,
        }
    }

    /// The entry found, with its slot's word `a` as read ([`Index::holds`]).
    pub fn entry_word(&self) -> Option<(Entry, u64)> {
        match self.saw {
            Saw::Entry(e, a) => Some((e, a)),
            _ => None,
        }
    }
}

/// Slots whose words a walk keeps on the stack; a longer path keeps the rest on the
/// heap (rare in a table sized for every dentry of the pool).
const PASSED: usize = 8;

/// Word `a` of every slot a lock-free walk passed without finding its key, from the
/// key's home on. The walk reads the slots one after another, so on its own a miss
/// could be a mix of two moments: a rename that publishes its new entry in a slot
/// the walk has passed and then removes the old one from a slot the walk has yet to
/// reach would leave it finding neither, though the name was there throughout. So a
/// miss is trusted only if every slot still holds the word seen ([`Passed::unchanged`]):
/// every change of a slot bumps its version, so each slot then held that word from
/// its first read to its second, and all of them at once at the moment of the last
/// first read: the walk saw the path as it was at one instant, when the key had no
/// entry there (and none beyond the empty slot ending it, the table's invariant).
#[derive(Default)]
struct Passed {
    words: [u64; PASSED],
    len: usize,
    more: Vec<u64>,
    /// The walk passed an entry of its key in a state not wanted.
    key_passed: bool,
}

impl Passed {
    fn push(&mut self, a: u64) {
        match self.words.get_mut(self.len) {
            Some(w) => *w = a,
            None => self.more.push(a),
        }
        self.len += 1;
    }

    /// Every slot passed, from `home` on, holds the word seen.
    fn unchanged<S: Slots>(&self, ix: &Index<S>, home: u64) -> bool {
        let seen = self.words.iter().take(self.len).chain(self.more.iter());
        let mut i = home;
        for &a in seen {
            if ix.slot(i).0.load(Ordering::Acquire) != a {
                return false;
            }
            i = ix.next(i);
        }
        true
    }

    /// The path as a [`Sighting`] keeps it: if short enough, ended by an empty slot
    /// and without an entry of the key (which a claim must see).
    fn as_path(&self) -> Option<([u64; SIGHTED], u8)> {
        if self.key_passed || self.len > SIGHTED || self.len == 0 {
            return None;
        }
        if state_of(self.words[self.len - 1]) != EMPTY {
            return None;
        }
        let mut path = [0; SIGHTED];
        path[..self.len].copy_from_slice(&self.words[..self.len]);
        Some((path, self.len as u8))
    }
}

/// The table's slots, two words each (`a` and `b`), as the lock-free protocol reads
/// and changes them: the engine's in the runtime region ([`Mapped`]), the model
/// tests' loom's atomics (`model`, docs/CONSISTENCY.md, "Model-checked protocols"),
/// so the protocol checked is the code that runs.
pub trait Slots {
    type Word: Word<Value = u64>;
    /// Slot `i`'s words `a` and `b`.
    fn slot(&self, i: u64) -> (&Self::Word, &Self::Word);
}

/// The slots in the index's span of the runtime region.
pub struct Mapped {
    /// Slot 0's word `a`, and the slots' word count, taken once: `Span::words`
    /// checks its bounds on every call, and every lookup, claim and removal asks.
    base: NonNull<AtomicU64>,
    nwords: usize,
}

// SAFETY: `base` points into the index's span of shared memory, which is only ever
// accessed through atomic types (as `Span` itself is Send and Sync for): sharing or
// sending the pointer across threads is as sound as sharing the span.
unsafe impl Send for Mapped {}
// SAFETY: as for Send.
unsafe impl Sync for Mapped {}

impl Slots for Mapped {
    type Word = AtomicU64;
    #[inline(always)]
    fn slot(&self, i: u64) -> (&AtomicU64, &AtomicU64) {
        // SAFETY: `base` and `nwords` are the slots' part of the span's words, taken
        // in `Index::new`: mapped, 8-aligned memory alive as long as the index (which
        // owns the span and this), only ever accessed atomically.
        let w = unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.nwords) };
        let at = 2 * i as usize;
        // One bounds check for both words.
        let [a, b] = &w[at..at + 2] else {
            unreachable!("a two-word range")
        };
        (a, b)
    }
}

/// The index over its span of the runtime region.
pub struct Index<S: Slots = Mapped> {
    span: Span,
    /// The span's first 64-bit word and its word count (the locks and counters),
    /// taken once, as [`Mapped`]'s.
    base: NonNull<AtomicU64>,
    nwords: usize,
    slots: S,
    /// Slots.
    cap: u64,
    /// Index (in 32-bit words) of the first region lock.
    regions_at: usize,
    dentry_off: u64,
    dentries: u64,
}

// SAFETY: `base` points into `span`'s shared memory, which is only ever accessed
// through atomic types (as `Span` itself is Send and Sync for): sharing or sending the
// pointer across threads is as sound as sharing the span; the slots are as sendable
// and shareable as their own type says.
unsafe impl<S: Slots + Send> Send for Index<S> {}
// SAFETY: as for Send.
unsafe impl<S: Slots + Sync> Sync for Index<S> {}

/// Slots, region-lock offset, slot offset and total bytes for a layout.
fn geometry(layout: &Layout) -> (u64, u64, u64, u64) {
    let d = layout.total_dentries();
    // Load factor at most 3/4 with every dentry named (each occupied slot names a
    // distinct dentry).
    let cap = (d + d / 3 + 1).next_multiple_of(REGION);
    let regions_off = ((STRIPES + COUNTERS) * 64) as u64;
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
        h = fold(h ^ le_word(rest), K0);
    }
    fold(h, K0)
}

/// Up to 8 bytes as a little-endian word, zero-filled, from at most two loads that
/// may overlap (copying them into a buffer called `memcpy` for every key).
fn le_word(bytes: &[u8]) -> u64 {
    let n = bytes.len();
    let u32_at =
        |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    match n {
        8.. => u64::from_le_bytes([
            bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
        ]),
        4..=7 => u32_at(0) as u64 | (u32_at(n - 4) as u64) << (8 * (n - 4)),
        1..=3 => {
            bytes[0] as u64
                | (bytes[n / 2] as u64) << (8 * (n / 2))
                | (bytes[n - 1] as u64) << (8 * (n - 1))
        }
        0 => 0,
    }
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

/// Tests widen the window in which a slot can change under a lookup: a count of the
/// tests running that want it (they may overlap).
#[cfg(test)]
static PAUSE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[inline]
fn tests_pause() {
    #[cfg(test)]
    if PAUSE.load(Ordering::Relaxed) > 0 {
        (0..2_000).for_each(|_| std::hint::spin_loop());
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

    /// Forget every entry (a repair rebuilds the index as directories load again).
    pub fn clear(&self) {
        self.span.zero();
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
        let words = span.words();
        let (base, nwords) = (NonNull::from(words).cast(), words.len());
        let slots_at = (slots_off / 8) as usize;
        let slot_words = &words[slots_at..slots_at + 2 * cap as usize];
        let slots = Mapped {
            base: NonNull::from(slot_words).cast(),
            nwords: slot_words.len(),
        };
        Ok(Index {
            span,
            base,
            nwords,
            slots,
            cap,
            regions_at: (regions_off / 4) as usize,
            dentry_off: layout.dentry_off,
            dentries: layout.total_dentries(),
        })
    }

    /// Start loading the slot where (parent, name)'s probe path begins into the cache:
    /// the table is sparse (sized for the whole pool), so that line is usually a cache
    /// and TLB miss, which a caller can overlap with its other work before `get`.
    pub fn prefetch(&self, parent: u64, name: &[u8]) {
        self.prefetch_slot(self.probe(parent, name).home);
    }

    /// Insert the committed entries of directory `parent` in `batch`, read from its log
    /// (lazy loading), each unless its name is already there (a load tried again after
    /// one that failed part way). Each claim's first slot is a random line of a table
    /// sized for the whole pool, so a cache (and often TLB) miss: the slot of the entry
    /// [`LOAD_AHEAD`] places on is prefetched before each claim, so that the misses of
    /// several entries overlap instead of coming one after the other.
    pub fn insert_loaded(
        &self,
        pool: &impl Dentries,
        parent: u64,
        batch: &LoadBatch,
        watch: &dyn Watch,
    ) -> Result<()> {
        let probes: Vec<Probe<'_>> = batch.iter().map(|(n, _)| self.probe(parent, n)).collect();
        for p in probes.iter().take(LOAD_AHEAD) {
            self.prefetch_slot(p.home);
        }
        for (k, (_, e)) in batch.iter().enumerate() {
            if let Some(p) = probes.get(k + LOAD_AHEAD) {
                self.prefetch_slot(p.home);
            }
            if let Claim::Claimed(pos) =
                self.claim_probed(pool, (&probes[k], None), e, None, watch)?
            {
                self.publish(pos);
            }
        }
        Ok(())
    }

    /// Start loading slot `i` into the cache.
    fn prefetch_slot(&self, i: u64) {
        let a = self.slot(i).0;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is only a hint: it reads nothing architecturally and never
        // faults; the address is that of a live slot anyway.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(a.as_ptr() as *const i8);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = a;
    }
}

impl<S: Slots> Index<S> {
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

    /// The span as 32-bit words (the locks), as `Span::u32s` would give it.
    fn u32s(&self) -> &[AtomicU32] {
        // SAFETY: as in `words`: the same memory, 4-aligned, viewed as twice as many
        // 32-bit words; the locks' words are never accessed as 64-bit ones.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast(), 2 * self.nwords) }
    }

    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `base` and `nwords` are `span.words()` as taken in `new`: the span's
        // mapped, 8-aligned memory, alive as long as `self` (which owns the span), and
        // only ever accessed atomically.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.nwords) }
    }

    #[inline(always)]
    fn slot(&self, i: u64) -> (&S::Word, &S::Word) {
        self.slots.slot(i)
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
        &self.u32s()[self.stripe(tag) * 16]
    }

    fn counter(&self, tag: u64) -> &AtomicU64 {
        &self.words()[(STRIPES + self.stripe(tag) % COUNTERS) * 8]
    }

    fn region_lock(&self, i: u64) -> &AtomicU32 {
        &self.u32s()[self.regions_at + (i / REGION) as usize]
    }

    fn dentry_addr(&self, id: u64) -> Option<u64> {
        (id >= 1 && id < self.dentries).then(|| self.dentry_off + id * DENTRY_SIZE)
    }

    fn dentry_id(&self, addr: u64) -> Result<u64> {
        let Some(rel) = addr.checked_sub(self.dentry_off) else {
            return Err(errno::EINVAL);
        };
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
            let mask = if c.len() == 8 {
                u64::MAX
            } else {
                (1u64 << (8 * c.len())) - 1
            };
            pool.word(d + dentry::NAME + 8 * i as u64) & mask == le_word(c)
        })
    }

    /// Read slot `i` for probe `p`, consistently: `a` is read again after everything
    /// else, and the slot is read anew if it changed meanwhile.
    fn look(&self, pool: &impl Dentries, i: u64, p: &Probe<'_>) -> Seen {
        let (aw, bw) = self.slot(i);
        loop {
            let a = aw.load(Ordering::Acquire);
            let Some(state) = visible_state(state_of(a)) else {
                return match state_of(a) {
                    EMPTY => Seen::Empty(a),
                    TOMB => Seen::Tomb(a),
                    _ => Seen::Other(a), // torn state: not this key
                };
            };
            tests_pause();
            // Acquire: read after `a`, and before the second read of `a`.
            let b = bw.load(Ordering::Acquire);
            if (b >> TAG_SHIFT) & TAG_MASK != p.tag {
                return Seen::Other(a);
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
                _ => Seen::Other(a),
            };
        }
    }

    /// The first entry for `p` that `want` accepts, walking its probe path; lock-free.
    /// A miss is confirmed ([`Passed`]): a walk that the key's entries moved under
    /// walks again.
    fn search(
        &self,
        pool: &impl Dentries,
        p: &Probe<'_>,
        want: impl Fn(&Entry) -> bool,
    ) -> Option<(Entry, u64)> {
        loop {
            match self.walk_once(pool, p, &want) {
                Ok(hit) => return Some(hit),
                Err(passed) if passed.unchanged(self, p.home) => return None,
                Err(_) => continue,
            }
        }
    }

    /// One walk of `p`'s probe path: the first entry `want` accepts, or the words of
    /// every slot passed up to the empty one (or the whole table) that ended it.
    fn walk_once(
        &self,
        pool: &impl Dentries,
        p: &Probe<'_>,
        want: &impl Fn(&Entry) -> bool,
    ) -> std::result::Result<(Entry, u64), Passed> {
        let mut passed = Passed::default();
        let mut i = p.home;
        for _ in 0..self.cap {
            match self.look(pool, i, p) {
                Seen::Match(e, a) if want(&e) => return Ok((e, a)),
                Seen::Empty(a) => {
                    passed.push(a);
                    break;
                }
                Seen::Match(_, a) => {
                    passed.key_passed = true;
                    passed.push(a);
                }
                Seen::Tomb(a) | Seen::Other(a) => passed.push(a),
            }
            i = self.next(i);
        }
        Err(passed)
    }

    /// The first entry for (parent, name) that `want` accepts, as [`Index::get`] or
    /// [`Index::find`] (lock-free), kept with what the walk saw for a leave or a
    /// claim of the key to start from.
    pub fn sight<'a>(
        &self,
        pool: &impl Dentries,
        parent: u64,
        name: &'a [u8],
        want: impl Fn(&Entry) -> bool,
    ) -> Sighting<'a> {
        let probe = self.probe(parent, name);
        let saw = self.walk(pool, &probe, want);
        Sighting { probe, saw }
    }

    /// [`Index::sight`]'s walk of `p`'s probe path; a miss confirmed as `search`'s.
    fn walk(&self, pool: &impl Dentries, p: &Probe<'_>, want: impl Fn(&Entry) -> bool) -> Saw {
        loop {
            let passed = match self.walk_once(pool, p, &want) {
                Ok((e, a)) => return Saw::Entry(e, a),
                Err(passed) => passed,
            };
            if !passed.unchanged(self, p.home) {
                continue;
            }
            return match passed.as_path() {
                Some((path, len)) => Saw::Path(path, len),
                None => Saw::Nothing,
            };
        }
    }

    /// Slot `pos` still holds word `a`: the entry seen there with it has not
    /// changed since (every change of a slot bumps its version).
    pub fn holds(&self, pos: u64, a: u64) -> bool {
        self.slot(pos).0.load(Ordering::Acquire) == a
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
        let p = self.probe(parent, name);
        self.claim_probed(pool, (&p, None), new, beside, watch)
    }

    /// [`Index::claim`] of the key of `s`: where `s` saw it missing and no slot of
    /// its probe path changed since, the claim takes the slot the walk would find
    /// without walking again.
    pub fn claim_sighted(
        &self,
        pool: &impl Dentries,
        s: &Sighting<'_>,
        new: &Entry,
        beside: Option<u64>,
        watch: &dyn Watch,
    ) -> Result<Claim> {
        self.claim_probed(pool, (&s.probe, Some(s)), new, beside, watch)
    }

    fn claim_probed(
        &self,
        pool: &impl Dentries,
        (p, mut sighted): (&Probe<'_>, Option<&Sighting<'_>>),
        new: &Entry,
        beside: Option<u64>,
        watch: &dyn Watch,
    ) -> Result<Claim> {
        let id = self.dentry_id(new.dentry)?;
        if new.ino >= MAX_INODES {
            return Err(errno::EINVAL);
        }
        let _stripe = lock::lock(self.stripe_lock(p.tag), watch)?;
        crate::runtime::testing::stop_here("index.stripe");
        loop {
            let still = sighted.take().and_then(|s| self.still_free(s));
            let (t, seen) = match still {
                Some(free) => free,
                None => match self.scan(pool, p, beside) {
                    Ok(free) => free?,
                    Err(e) => return Ok(Claim::Taken(e)),
                },
            };
            if !self.fill(t, seen, id, watch)? {
                continue;
            }
            let b = new.ino | (new.dtype as u64 & 0xf) << DTYPE_SHIFT | p.tag << TAG_SHIFT;
            self.slot(t).1.store(b, Ordering::Release);
            if !self.path_full(p.home, t) {
                // An empty slot appeared on the path before ours: lookups would stop
                // there. Give the slot back and claim again.
                self.set_state(t, CREATING, TOMB);
                continue;
            }
            self.counter(p.tag).fetch_add(1, Ordering::Relaxed);
            return Ok(Claim::Claimed(t));
        }
    }

    /// Under the stripe lock: where the key `s` saw missing goes (as `scan` would
    /// say), if every slot of the path it kept holds the word seen: then the key is
    /// still missing (only claims add it, and they hold this lock) and the path the
    /// same, so its first tombstone, else the empty slot ending it.
    fn still_free(&self, s: &Sighting<'_>) -> Option<(u64, u64)> {
        let Saw::Path(path, len) = &s.saw else {
            return None;
        };
        let mut i = s.probe.home;
        let mut tomb = None;
        let mut last = None;
        for &a in &path[..*len as usize] {
            if self.slot(i).0.load(Ordering::Acquire) != a {
                return None;
            }
            if state_of(a) == TOMB {
                tomb.get_or_insert((i, a));
            }
            last = Some((i, a));
            i = self.next(i);
        }
        tomb.or(last)
    }

    /// Under the stripe lock: `Err(entry)` if the key is there (outside `beside`),
    /// else where to put it: the first tombstone on its path, else the empty slot
    /// that ends it (with the word seen there).
    fn scan(
        &self,
        pool: &impl Dentries,
        p: &Probe<'_>,
        beside: Option<u64>,
    ) -> std::result::Result<Result<(u64, u64)>, Entry> {
        let mut tomb = None;
        let mut i = p.home;
        for _ in 0..self.cap {
            match self.look(pool, i, p) {
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
        t: u64,
        seen: u64,
        id: u64,
        watch: &dyn Watch,
    ) -> std::result::Result<bool, Interrupted> {
        let new = next_a(seen, CREATING, id);
        let aw = self.slot(t).0;
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
    fn path_full(&self, home: u64, t: u64) -> bool {
        let mut j = t;
        while j != home {
            j = self.prev(j);
            if state_of(self.slot(j).0.load(Ordering::Acquire)) == EMPTY {
                return false;
            }
        }
        true
    }

    /// Move slot `i` from state `from` to `to` (its own operation's slot: nobody else
    /// changes it meanwhile). False if it was not in `from`.
    fn set_state(&self, i: u64, from: u64, to: u64) -> bool {
        let aw = self.slot(i).0;
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
        self.set_state(pos, CREATING, READY);
    }

    /// A claim given up (the operation failed): the slot becomes a tombstone.
    pub fn abandon(&self, pos: u64) {
        if self.set_state(pos, CREATING, TOMB) {
            self.gone(pos);
        }
    }

    /// Claim the Ready entry for (parent, name) for a removal or rename: Ready ->
    /// Leaving, a compare-and-swap (of two racing claims one wins). `None` if there is
    /// no Ready entry.
    pub fn leave(&self, pool: &impl Dentries, parent: u64, name: &[u8]) -> Option<Entry> {
        self.leave_probed(pool, &self.probe(parent, name))
    }

    /// [`Index::leave`] of the entry `s` found: its slot moved from the word seen, the
    /// path walked again only if the slot changed since.
    pub fn leave_sighted(&self, pool: &impl Dentries, s: &Sighting<'_>) -> Option<Entry> {
        match s.saw {
            Saw::Entry(e, a) if e.state == State::Ready && self.to_leaving(e.pos, a) => {
                Some(Entry {
                    state: State::Leaving,
                    ..e
                })
            }
            _ => self.leave_probed(pool, &s.probe),
        }
    }

    fn leave_probed(&self, pool: &impl Dentries, p: &Probe<'_>) -> Option<Entry> {
        loop {
            let (e, a) = self.search(pool, p, |e| e.state == State::Ready)?;
            if self.to_leaving(e.pos, a) {
                return Some(Entry {
                    state: State::Leaving,
                    ..e
                });
            }
        }
    }

    /// Slot `pos`, seen Ready as `a`, becomes Leaving; false if it changed since.
    fn to_leaving(&self, pos: u64, a: u64) -> bool {
        let aw = self.slot(pos).0;
        let new = next_a(a, LEAVING, a >> ID_SHIFT);
        aw.compare_exchange(a, new, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Put an entry claimed by [`Index::leave`] back: Leaving -> Ready.
    pub fn stay(&self, e: &Entry) {
        self.set_state(e.pos, LEAVING, READY);
    }

    /// An entry claimed by [`Index::leave`] is gone (its removal committed).
    pub fn remove(&self, e: &Entry) {
        if self.set_state(e.pos, LEAVING, TOMB) {
            self.gone(e.pos);
        }
    }

    /// A commit renamed: the claimed entries at `published` (Creating) now name what
    /// the `removed` entries (claimed by [`Index::leave`], Leaving) named. The new
    /// entries become visible first, then the old ones go, so a lookup never misses
    /// both (issue 42): a walk returns the first visible entry of its key it meets,
    /// and a walk that passed a new entry before it was published and reached the
    /// old one after it went confirms its miss ([`Passed`]) and walks again.
    pub fn replace(
        &self,
        published: impl IntoIterator<Item = u64>,
        removed: impl IntoIterator<Item = Entry>,
    ) {
        for pos in published {
            self.publish(pos);
        }
        for e in removed {
            self.remove(&e);
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
    fn gone(&self, pos: u64) {
        let tag = (self.slot(pos).1.load(Ordering::Acquire) >> TAG_SHIFT) & TAG_MASK;
        self.counter(tag).fetch_sub(1, Ordering::Relaxed);
        self.clean(pos);
    }

    /// Empty the tombstone at `i`, and those before it, while the slot after each is
    /// empty: no probe path of a live entry can then pass through it. The slot after
    /// stays empty because we hold its region lock (fills of an empty slot take it);
    /// only tried, never waited for, since cleaning is optional.
    fn clean(&self, i: u64) {
        // At the top of each turn we hold the region lock of `after`, the slot after `k`.
        let mut k = i;
        let mut after = self.next(k);
        let Some(mut _held) = lock::try_lock(self.region_lock(after)) else {
            return;
        };
        for _ in 0..self.cap {
            if state_of(self.slot(after).0.load(Ordering::Acquire)) != EMPTY {
                return;
            }
            let aw = self.slot(k).0;
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

    /// Occupied slots (Creating, Ready or Leaving entries): the counters summed.
    pub fn len(&self) -> usize {
        let w = self.words();
        let sum: i64 = (0..COUNTERS)
            .map(|c| w[(STRIPES + c) * 8].load(Ordering::Relaxed) as i64)
            .sum();
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
        let locks = ((STRIPES + COUNTERS) * 64) as f64 + (self.cap / REGION * 4) as f64;
        (touched(slots) + touched(locks)) as u64
    }
}

/// A stable 64-bit hash of (parent, name) (FNV-1a), stored in each dentry so that
/// tools can check an entry without the DRAM index.
pub fn name_hash(parent: u64, name: &[u8]) -> u64 {
    // Two plain loops, not a chained iterator (which cost twice the instructions
    // on every create's dentry).
    let step = |h: u64, b: u8| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parent.to_le_bytes() {
        h = step(h, b);
    }
    for &b in name {
        h = step(h, b);
    }
    h
}

/// The hasher of the process-private maps (open files, directories): foldhash,
/// seeded per map, several times faster than SipHash on short keys.
pub type IndexHasher = foldhash::fast::RandomState;

#[cfg(test)]
mod model;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Geometry;
    use crate::runtime::lock::Alone;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    const P: u64 = 7; // the parent directory of every test key

    /// A stand-in pool: the dentry table in shared memory, so that forked children
    /// see each other's dentries (the real pool is private anonymous memory in tests).
    struct Fake {
        span: Span,
        layout: Layout,
    }

    impl Dentries for Fake {
        fn word(&self, off: u64) -> u64 {
            self.span.words()[(off / 8) as usize].load(Ordering::Acquire)
        }
    }

    impl Fake {
        fn set(&self, off: u64, v: u64) {
            self.span.words()[(off / 8) as usize].store(v, Ordering::Release);
        }

        /// Write dentry `id` naming `name` in `P` (what create does before claiming).
        fn put(&self, id: u64, name: &[u8]) {
            let d = self.layout.dentry_addr(id);
            self.set(d + dentry::PARENT, P);
            self.set(d + dentry::NAME_LEN, name.len() as u64);
            self.set(d + dentry::SLOT, 0x1000 + id);
            for (i, c) in name.chunks(8).enumerate() {
                let mut buf = [0u8; 8];
                buf[..c.len()].copy_from_slice(c);
                self.set(d + dentry::NAME + 8 * i as u64, u64::from_le_bytes(buf));
            }
        }

        fn entry(&self, id: u64, ino: u64) -> Entry {
            Entry {
                state: State::Creating,
                ino,
                dentry: self.layout.dentry_addr(id),
                slot: 0,
                dtype: 8,
                pos: 0,
            }
        }
    }

    /// An index over shared memory for a pool of `dentries` dentries.
    fn setup(dentries: u64) -> (Index, Fake) {
        let layout = Layout::compute(Geometry {
            pool_size: 8 << 20,
            lanes: 1,
            inodes_per_lane: 256,
            dentries_per_lane: dentries,
            nodes: 1,
            device_blocks: 0,
        })
        .unwrap();
        let span = Span::anonymous(Index::bytes_needed(&layout)).unwrap();
        let idx = Index::new(span, &layout).unwrap();
        let pool = Span::anonymous(layout.data_off as usize).unwrap();
        (idx, Fake { span: pool, layout })
    }

    /// `name-N`, without allocating (forked children must not).
    fn name(n: u64, buf: &mut [u8; 12]) -> &[u8] {
        buf[..5].copy_from_slice(b"name-");
        for (i, d) in buf[5..12].iter_mut().enumerate() {
            *d = b'0' + ((n / 10u64.pow(6 - i as u32)) % 10) as u8;
        }
        &buf[..]
    }

    /// Occupied slots holding (P, name), by scanning the whole table.
    fn copies(idx: &Index, pool: &Fake, name: &[u8]) -> usize {
        let p = idx.probe(P, name);
        (0..idx.cap)
            .filter(|&i| matches!(idx.look(pool, i, &p), Seen::Match(..)))
            .count()
    }

    fn states(idx: &Index) -> Vec<u64> {
        (0..idx.cap)
            .map(|i| state_of(idx.slot(i).0.load(Ordering::Relaxed)))
            .collect()
    }

    /// Run `body(child)` in `n` forked children; fails if one fails or outlives the
    /// watchdog (then it is killed).
    fn in_children(n: usize, body: impl Fn(usize) -> bool) {
        let pids: Vec<libc::pid_t> = (0..n)
            .map(|c| {
                // SAFETY: the child runs only `body` (index operations on shared
                // memory: atomics and futexes, no allocation, no locks of this
                // process) and leaves with `_exit`, never returning into the harness.
                let pid = unsafe { libc::fork() };
                assert!(pid >= 0, "fork failed");
                if pid == 0 {
                    let ok = body(c);
                    // SAFETY: ends the child at once, running no destructor or atexit.
                    unsafe { libc::_exit(if ok { 0 } else { 1 }) }
                }
                pid
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut status: Vec<Option<i32>> = vec![None; n];
        while status.iter().any(Option::is_none) {
            for (c, &pid) in pids.iter().enumerate() {
                let mut st = 0;
                if status[c].is_none()
                    // SAFETY: waits for our own child; `st` is a valid out-parameter.
                    && unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) } == pid
                {
                    status[c] = Some(st);
                }
            }
            if Instant::now() > deadline {
                for (c, &pid) in pids.iter().enumerate() {
                    if status[c].is_none() {
                        // SAFETY: kills and reaps our own child, still unreaped.
                        unsafe {
                            libc::kill(pid, libc::SIGKILL);
                            libc::waitpid(pid, std::ptr::null_mut(), 0);
                        }
                    }
                }
                panic!("a child outlived the watchdog");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        for (c, st) in status.into_iter().enumerate() {
            let st = st.unwrap();
            assert!(
                libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
                "child {c} failed (status {st:#x})"
            );
        }
    }

    #[test]
    fn an_entry_goes_through_its_states() {
        let (idx, pool) = setup(256);
        pool.put(1, b"a");
        let e = pool.entry(1, 42);
        let Claim::Claimed(pos) = idx.claim(&pool, P, b"a", &e, None, &Alone).unwrap() else {
            panic!("a fresh name is free");
        };
        assert_eq!(idx.get(&pool, P, b"a"), None, "Creating is invisible");
        assert_eq!(idx.find(&pool, P, b"a").unwrap().state, State::Creating);
        idx.publish(pos);
        let got = idx.get(&pool, P, b"a").unwrap();
        assert_eq!(
            (got.ino, got.dentry, got.slot, got.dtype, got.pos),
            (42, e.dentry, 0x1001, 8, pos)
        );
        assert_eq!(idx.get(&pool, P, b"b"), None);
        assert_eq!(idx.get(&pool, P + 1, b"a"), None);
        pool.put(2, b"a");
        assert!(matches!(
            idx.claim(&pool, P, b"a", &pool.entry(2, 43), None, &Alone).unwrap(),
            Claim::Taken(t) if t.ino == 42
        ));
        assert_eq!(idx.len(), 1);
        let l = idx.leave(&pool, P, b"a").unwrap();
        assert_eq!(l.state, State::Leaving);
        assert!(idx.leave(&pool, P, b"a").is_none(), "one claim wins");
        assert_eq!(
            idx.get(&pool, P, b"a").unwrap().ino,
            42,
            "visible until it commits"
        );
        idx.stay(&l);
        let l = idx.leave(&pool, P, b"a").unwrap();
        // A rename over it: the new dentry beside the leaving one, then the swap.
        let Claim::Claimed(new) = idx
            .claim(&pool, P, b"a", &pool.entry(2, 43), Some(l.pos), &Alone)
            .unwrap()
        else {
            panic!("beside its own leaving entry");
        };
        idx.publish(new);
        idx.remove(&l);
        assert_eq!(idx.get(&pool, P, b"a").unwrap().ino, 43);
        assert_eq!(copies(&idx, &pool, b"a"), 1);
        assert!(idx.evict(&pool, P, b"a"));
        assert_eq!(idx.get(&pool, P, b"a"), None);
        assert!(idx.is_empty());
    }

    #[test]
    fn churn_reuses_tombstones_without_duplicates_and_cleans_them_up() {
        let (idx, pool) = setup(256);
        let mut live = vec![0u64; 300]; // name -> dentry id
        let mut free: Vec<u64> = (1..256).collect();
        let mut rng = 0x1234_5678_u64;
        let mut buf = [0; 12];
        for _ in 0..20_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let n = rng % 300;
            let key = name(n, &mut buf);
            if live[n as usize] != 0 {
                let e = idx.leave(&pool, P, key).expect("a live name");
                assert_eq!(e.dentry, pool.layout.dentry_addr(live[n as usize]));
                idx.remove(&e);
                free.push(live[n as usize]);
                live[n as usize] = 0;
            } else if let Some(id) = free.pop() {
                pool.put(id, key);
                assert!(idx.find(&pool, P, key).is_none());
                let c = idx.claim(&pool, P, key, &pool.entry(id, 1000 + n), None, &Alone);
                let Claim::Claimed(pos) = c.unwrap() else {
                    panic!("{n} taken")
                };
                idx.publish(pos);
                live[n as usize] = id;
            }
        }
        let names = live.iter().filter(|&&id| id != 0).count();
        assert_eq!(idx.len(), names);
        for n in 0..300 {
            let key = name(n, &mut buf);
            assert_eq!(
                copies(&idx, &pool, key),
                (live[n as usize] != 0) as usize,
                "name {n}"
            );
            let got = idx.get(&pool, P, key).map(|e| e.ino);
            assert_eq!(got, (live[n as usize] != 0).then_some(1000 + n));
        }
        for n in 0..300 {
            if live[n as usize] != 0 {
                assert!(idx.evict(&pool, P, name(n, &mut buf)));
            }
        }
        assert!(idx.is_empty());
        assert!(
            states(&idx).iter().all(|&s| s == EMPTY),
            "with nothing live, every tombstone has been emptied"
        );
    }

    /// Each of `workers` claims every one of 64 names with its own dentry; result
    /// word `n * workers + w` says whether worker `w` won name `n`.
    fn race_for_names(
        idx: &Index,
        pool: &Fake,
        results: &[AtomicU64],
        go: &AtomicU64,
        w: usize,
        workers: usize,
    ) -> bool {
        let started = Instant::now();
        while go.load(Ordering::Acquire) == 0 {
            if started.elapsed() > Duration::from_secs(20) {
                return false;
            }
            std::hint::spin_loop();
        }
        let mut buf = [0; 12];
        for n in 0..64u64 {
            let id = 1 + w as u64 * 64 + n;
            let key = name(n, &mut buf);
            pool.put(id, key);
            match idx.claim(pool, P, key, &pool.entry(id, 100 + w as u64), None, &Alone) {
                Ok(Claim::Claimed(pos)) => {
                    idx.publish(pos);
                    results[n as usize * workers + w].store(1, Ordering::Release);
                }
                Ok(Claim::Taken(_)) => {
                    results[n as usize * workers + w].store(2, Ordering::Release)
                }
                Err(_) => return false,
            }
        }
        true
    }

    fn check_one_winner(idx: &Index, pool: &Fake, results: &[AtomicU64], workers: usize) {
        let mut buf = [0; 12];
        for n in 0..64 {
            let r: Vec<u64> = (0..workers)
                .map(|w| results[n * workers + w].load(Ordering::Acquire))
                .collect();
            assert_eq!(r.iter().filter(|&&x| x == 1).count(), 1, "name {n}: {r:?}");
            assert!(r.iter().all(|&x| x == 1 || x == 2));
            let winner = r.iter().position(|&x| x == 1).unwrap() as u64;
            let key = name(n as u64, &mut buf);
            assert_eq!(idx.get(pool, P, key).unwrap().ino, 100 + winner);
            assert_eq!(copies(idx, pool, key), 1);
        }
        assert_eq!(idx.len(), 64);
    }

    #[test]
    fn racing_claims_of_one_name_have_one_winner_across_threads() {
        let (idx, pool) = setup(512);
        let results: Vec<AtomicU64> = (0..64 * 4).map(|_| AtomicU64::new(0)).collect();
        let go = AtomicU64::new(0);
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|w| {
                    let (idx, pool, results, go) = (&idx, &pool, &results, &go);
                    s.spawn(move || race_for_names(idx, pool, results, go, w, 4))
                })
                .collect();
            go.store(1, Ordering::Release);
            assert!(hs.into_iter().all(|h| h.join().unwrap()));
        });
        check_one_winner(&idx, &pool, &results, 4);
    }

    #[test]
    fn racing_claims_of_one_name_have_one_winner_across_processes() {
        let (idx, pool) = setup(512);
        let shared = Span::anonymous(4096).unwrap();
        let (go, results) = shared.words().split_first().unwrap();
        in_children(4, |w| {
            if w == 0 {
                go.store(1, Ordering::Release);
            }
            race_for_names(&idx, &pool, results, go, w, 4)
        });
        check_one_winner(&idx, &pool, results, 4);
    }

    const CHURNERS: usize = 2;
    const PER: u64 = 128; // names per churner
    const IDS: u64 = 64; // dentries per churner

    /// Numbers `n` whose `name-n` all have one tag: the tag then never tells keys apart,
    /// and only the dentry comparison and the slot's validation keep lookups right.
    fn same_tag_names(count: usize) -> Vec<u64> {
        let tag = |n| key_hash(P, name(n, &mut [0; 12])) & TAG_MASK;
        let t = tag(0);
        (0..).filter(|&n| tag(n) == t).take(count).collect()
    }

    /// Create and remove this churner's names (every `CHURNERS`-th of `names`) at
    /// random, with its own dentries reused for ever other names; name `names[i]`
    /// always names inode `1000 + i`.
    fn churn(idx: &Index, pool: &Fake, names: &[u64], c: usize, stop: &AtomicU64) -> bool {
        let mut live = [0u64; PER as usize];
        let mut free = [0u64; IDS as usize];
        let mut nfree = IDS as usize;
        for (i, f) in free.iter_mut().enumerate() {
            *f = 1 + c as u64 * IDS + i as u64;
        }
        let mut rng = 0x9e37_79b9_u64 + c as u64;
        let mut buf = [0; 12];
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(700) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let k = (rng % PER) as usize;
            let n = k as u64 * CHURNERS as u64 + c as u64;
            let key = name(names[n as usize], &mut buf);
            if live[k] != 0 {
                match idx.leave(pool, P, key) {
                    Some(e) if e.dentry == pool.layout.dentry_addr(live[k]) => idx.remove(&e),
                    _ => return false,
                }
                free[nfree] = live[k];
                nfree += 1;
                live[k] = 0;
            } else if nfree > 0 {
                nfree -= 1;
                let id = free[nfree];
                pool.put(id, key);
                match idx.claim(pool, P, key, &pool.entry(id, 1000 + n), None, &Alone) {
                    Ok(Claim::Claimed(pos)) => idx.publish(pos),
                    _ => return false,
                }
                live[k] = id;
            }
        }
        stop.fetch_add(1, Ordering::Release);
        true
    }

    /// Look every name up until the churners are done; any inode but the name's is
    /// an error.
    fn watch_lookups(idx: &Index, pool: &Fake, names: &[u64], stop: &AtomicU64) -> u64 {
        let mut buf = [0; 12];
        let mut wrong = 0;
        let started = Instant::now();
        while stop.load(Ordering::Acquire) < CHURNERS as u64
            && started.elapsed() < Duration::from_secs(30)
        {
            for n in 0..PER * CHURNERS as u64 {
                if let Some(e) = idx.get(pool, P, name(names[n as usize], &mut buf)) {
                    wrong += (e.ino != 1000 + n) as u64;
                }
            }
        }
        wrong
    }

    #[test]
    fn lookups_during_churn_never_see_a_wrong_inode() {
        // A table barely larger than the names: long probe paths, many tombstones.
        let (idx, pool) = setup(IDS * CHURNERS as u64 + 1);
        let names = same_tag_names((PER * CHURNERS as u64) as usize);
        let names = &names[..];
        PAUSE.fetch_add(1, Ordering::Relaxed);
        let shared = Span::anonymous(4096).unwrap();
        let w = shared.words();
        let (stop, wrong) = (&w[0], &w[1]);
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            // Lookups in this process too, while the children churn.
            let here = s.spawn(|| {
                let mut n = 0;
                while !done.load(Ordering::Acquire) {
                    n += watch_lookups(&idx, &pool, names, stop);
                }
                n
            });
            in_children(CHURNERS + 1, |c| {
                if c < CHURNERS {
                    churn(&idx, &pool, names, c, stop)
                } else {
                    wrong.store(watch_lookups(&idx, &pool, names, stop), Ordering::Release);
                    true
                }
            });
            done.store(true, Ordering::Release);
            assert_eq!(here.join().unwrap(), 0, "wrong inodes seen in the parent");
        });
        PAUSE.fetch_sub(1, Ordering::Relaxed);
        assert_eq!(stop.load(Ordering::Acquire), CHURNERS as u64);
        assert_eq!(
            wrong.load(Ordering::Acquire),
            0,
            "wrong inodes seen in a child"
        );
        let mut buf = [0; 12];
        let live = (0..PER * CHURNERS as u64)
            .filter(|&n| {
                let key = name(names[n as usize], &mut buf);
                assert!(copies(&idx, &pool, key) <= 1, "name {n} twice");
                idx.get(&pool, P, key).is_some()
            })
            .count();
        assert_eq!(idx.len(), live);
    }

    /// Replace the entry of `key` as a rename over it does (its new entry claimed
    /// beside the old one, published, then the old one removed) until `stop`;
    /// the inode alternates between 1 and 2. Returns the replacements made.
    fn replace_in_a_loop(idx: &Index, pool: &Fake, key: &[u8], stop: &AtomicBool) -> u64 {
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            let old = idx.leave(pool, P, key).expect("the name is there");
            let id = if old.ino == 1 { 2 } else { 1 };
            pool.put(id, key);
            let Claim::Claimed(pos) = idx
                .claim(pool, P, key, &pool.entry(id, id), Some(old.pos), &Alone)
                .unwrap()
            else {
                panic!("claimed beside the old entry");
            };
            idx.publish(pos);
            idx.remove(&old);
            n += 1;
        }
        n
    }

    #[test]
    fn a_name_replaced_beside_itself_is_never_missed() {
        let (idx, pool) = setup(256);
        let key = b"cfg";
        pool.put(1, key);
        let Claim::Claimed(pos) = idx
            .claim(&pool, P, key, &pool.entry(1, 1), None, &Alone)
            .unwrap()
        else {
            panic!("a fresh name is free");
        };
        idx.publish(pos);
        // Widen the window between a walk's reads of two slots.
        PAUSE.fetch_add(1, Ordering::Relaxed);
        let stop = AtomicBool::new(false);
        let (misses, lookups, replaced) = std::thread::scope(|s| {
            let w = s.spawn(|| replace_in_a_loop(&idx, &pool, key, &stop));
            let r = s.spawn(|| {
                let (mut misses, mut lookups) = (0u64, 0u64);
                let until = Instant::now() + Duration::from_millis(1000);
                while Instant::now() < until {
                    misses += idx.get(&pool, P, key).is_none() as u64;
                    misses += idx.find(&pool, P, key).is_none() as u64;
                    lookups += 2;
                }
                (misses, lookups)
            });
            let (misses, lookups) = r.join().unwrap();
            stop.store(true, Ordering::Relaxed);
            (misses, lookups, w.join().unwrap())
        });
        PAUSE.fetch_sub(1, Ordering::Relaxed);
        assert!(replaced > 100, "only {replaced} replacements");
        assert_eq!(misses, 0, "{misses} of {lookups} lookups missed the name");
        assert_eq!(copies(&idx, &pool, key), 1);
    }

    #[test]
    fn a_sighted_claim_or_leave_starts_over_when_its_slots_changed() {
        let (idx, pool) = setup(256);
        let mut buf = [0; 12];
        let home = idx.probe(P, b"a").home;
        let n = (0..)
            .find(|&n| idx.probe(P, name(n, &mut [0; 12])).home == home)
            .unwrap();
        let other = name(n, &mut buf);
        pool.put(1, other);
        let Claim::Claimed(pos) = idx
            .claim(&pool, P, other, &pool.entry(1, 40), None, &Alone)
            .unwrap()
        else {
            panic!("a fresh name is free");
        };
        idx.publish(pos);
        pool.put(2, b"a");
        pool.put(3, b"a");
        // "a" is missing; its path: the other name's slot, then an empty one.
        let seen = idx.sight(&pool, P, b"a", |_| true);
        assert!(seen.entry().is_none());
        // The other name goes, and another create of "a" takes its place, before
        // the first slot the lookup saw empty: that slot alone did not change.
        idx.remove(&idx.leave(&pool, P, other).unwrap());
        let Claim::Claimed(pos) = idx
            .claim(&pool, P, b"a", &pool.entry(3, 43), None, &Alone)
            .unwrap()
        else {
            panic!("a fresh name is free");
        };
        assert_eq!(pos, home);
        idx.publish(pos);
        assert!(matches!(
            idx.claim_sighted(&pool, &seen, &pool.entry(2, 42), None, &Alone).unwrap(),
            Claim::Taken(e) if e.ino == 43
        ));
        assert_eq!(copies(&idx, &pool, b"a"), 1);
        // The entry seen was removed and the name made again: the leave finds the new one.
        let seen = idx.sight(&pool, P, b"a", Entry::visible);
        assert_eq!(seen.entry().unwrap().ino, 43);
        idx.remove(&idx.leave(&pool, P, b"a").unwrap());
        let Claim::Claimed(pos) = idx
            .claim(&pool, P, b"a", &pool.entry(2, 42), None, &Alone)
            .unwrap()
        else {
            panic!("the name was removed");
        };
        idx.publish(pos);
        let left = idx.leave_sighted(&pool, &seen).unwrap();
        assert_eq!((left.ino, left.state), (42, State::Leaving));
        assert!(idx.leave_sighted(&pool, &seen).is_none(), "one claim wins");
        // Unchanged since the lookup: the claim takes the slot the lookup ended at.
        let seen = idx.sight(&pool, P, b"b", |_| true);
        let (end, _) = idx.still_free(&seen).expect("a short path kept");
        pool.put(4, b"b");
        let Claim::Claimed(pos) = idx
            .claim_sighted(&pool, &seen, &pool.entry(4, 44), None, &Alone)
            .unwrap()
        else {
            panic!("a fresh name is free");
        };
        assert_eq!(pos, end);
    }

    #[test]
    fn key_words_are_the_bytes_zero_filled() {
        let bytes: Vec<u8> = (1..=8).collect();
        for n in 0..=8 {
            let mut buf = [0u8; 8];
            buf[..n].copy_from_slice(&bytes[..n]);
            assert_eq!(le_word(&bytes[..n]), u64::from_le_bytes(buf), "{n} bytes");
        }
    }

    /// Interrupts every wait (as when a process died).
    struct Dead;
    impl Watch for Dead {
        fn check(&self) -> std::result::Result<(), Interrupted> {
            Err(Interrupted)
        }
    }

    #[test]
    fn waits_on_a_dead_process_end_with_erestart() {
        let (idx, pool) = setup(256);
        pool.put(1, b"x");
        // The stripe lock left held, as by a process killed during a claim.
        std::mem::forget(lock::lock(idx.stripe_lock(idx.probe(P, b"x").tag), &Alone).unwrap());
        let r = idx.claim(&pool, P, b"x", &pool.entry(1, 5), None, &Dead);
        assert_eq!(r.unwrap_err().errno(), libc::ERESTART);
        assert_eq!(idx.get(&pool, P, b"x"), None, "lookups take no lock");
        let mut turns = 0;
        let waited = (0..1000).find(|_| wait_turn(&mut turns, &Dead).is_err());
        assert!(
            waited.is_some(),
            "a create's wait for a Creating entry ends"
        );
    }

    #[test]
    fn bad_input_is_refused_without_panicking() {
        let (idx, pool) = setup(256);
        let mut e = pool.entry(1, 5);
        e.dentry += 8; // not the start of a dentry
        assert!(idx.claim(&pool, P, b"x", &e, None, &Alone).is_err());
        let e = pool.entry(1, MAX_INODES);
        assert!(idx.claim(&pool, P, b"x", &e, None, &Alone).is_err());
        let layout = pool.layout;
        let small = Span::anonymous(4096).unwrap();
        assert!(Index::new(small, &layout).is_err(), "a span too small");
        // Garbage in a slot (torn state) reads as some other key.
        idx.slot(idx.probe(P, b"x").home)
            .0
            .store(u64::MAX, Ordering::Relaxed);
        assert_eq!(idx.get(&pool, P, b"x"), None);
    }

    #[test]
    fn size_and_resident_estimate() {
        let (idx, pool) = setup(1000);
        assert!(idx.capacity() * 3 >= 1000 * 4, "load factor at most 3/4");
        assert!(Index::bytes_needed(&pool.layout) as u64 >= idx.capacity() * SLOT_BYTES);
        let empty = idx.dram_bytes();
        let mut buf = [0; 12];
        for n in 1..500 {
            let key = name(n, &mut buf);
            pool.put(n, key);
            let Claim::Claimed(pos) = idx
                .claim(&pool, P, key, &pool.entry(n, n), None, &Alone)
                .unwrap()
            else {
                panic!()
            };
            idx.publish(pos);
        }
        assert_eq!(idx.len(), 499);
        let full = idx.dram_bytes();
        assert!(full > empty && full <= Index::bytes_needed(&pool.layout) as u64 + 4096);
        assert_ne!(key_hash(1, b"ab"), key_hash(1, b"ab\0"));
        assert_ne!(key_hash(1, b"ab"), key_hash(2, b"ab"));
        assert_eq!(
            key_hash(3, b"stable"),
            11292629536329338084,
            "the hash is part of the format"
        );
    }

    #[test]
    fn name_hash_is_fnv1a_of_the_parent_and_the_name() {
        // Stored in every dentry (docs/FORMAT.md): the values must never change.
        assert_eq!(name_hash(1, b""), 0x89cd_3129_1d2a_efa4);
        assert_eq!(name_hash(7, b"hello"), 0xbc6b_535a_7889_51ea);
        assert_eq!(
            name_hash(0x1234_5678_9abc_def0, &[b'a'; 255]),
            0x7903_d7e4_eaa5_4836
        );
    }
}
