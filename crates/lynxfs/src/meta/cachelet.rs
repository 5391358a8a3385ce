//! Cachelets (DirectFS): one compact record per inode for what has no place in the
//! pool: the open count and flags, the file's locks, the version of its block map,
//! and, for a directory, the state of its log (entries, where the next slot comes
//! from). They live in the shared runtime region, so every process attached to the
//! pool sees one record per file.
//!
//! DirectFS finds an inode's cachelet through a pointer word in the inode, stamped with
//! the mount epoch. In a region sized from the pool's inode count the record of inode
//! `i` is simply the `i`-th: no pointer to keep, no stamp, no allocation, no reference
//! count (the inode's old `nv_pointer` word now holds times, docs/FORMAT.md). Attributes
//! are still read from the inode itself (its address follows from its number).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::format::Layout;
use crate::runtime::lock::{self, Interrupted, ReadGuard, Watch, WriteGuard};
use crate::runtime::Span;

/// The last link went while the file was open: free it at the last close.
pub const ORPHAN: u32 = 1;
/// A directory whose log has been read into the index.
pub const LOADED: u32 = 2;
/// A directory removed (rmdir or a rename over it has committed): no creates in it.
pub const REMOVED: u32 = 4;
/// An unnamed `O_TMPFILE` file (also [`ORPHAN`]) that a link may still name.
pub const LINKABLE: u32 = 8;
/// A directory whose dentry's check is known durably settled (`log::cwon::settle`):
/// set by an operation holding its gate, cleared with the record when its number is
/// freed, so a new incarnation (whose create writes a fresh check) starts without.
pub const SETTLED: u32 = 16;

/// The flags word's bits from here up count a directory's evictions ([`Cachelet::evicted`]).
const EVICTIONS: u32 = 1 << 16;

/// Bytes per record: one cache line, so files used by different CPUs share none.
const RECORD: usize = 64;
const U32S: usize = RECORD / 4;
const WORDS: usize = RECORD / 8;

// The record's fields: 32-bit words first, then 64-bit words (never both sizes on the
// same bytes).
const DATA_LOCK: usize = 0;
const INODE_LOCK: usize = 1;
const GATE: usize = 2;
const DIR_LOCK: usize = 3;
const OPEN: usize = 4;
const FLAGS: usize = 5;
const MAP_VERSION: usize = 3;
const OLD_PARENT: usize = 4;
const TAIL: usize = 5;
const FREE_HEAD: usize = 6;
const TIMES: usize = 7;

/// Every inode's record.
pub struct Cachelets {
    span: Span,
    count: u64,
    /// The first record's first word: `span`'s memory, mapped (and never moved) for
    /// as long as `span`, hence `self`, lives. Kept so that [`Cachelets::get`], on
    /// every operation's path several times, is a bounds check and an add, not two
    /// views of the whole span and their checks.
    base: NonNull<AtomicU64>,
}

// SAFETY: `base` points into `span`'s shared memory, which is only ever accessed
// through atomic types (as `Span` itself is Send and Sync for): sharing or sending the
// pointer across threads is as sound as sharing the span.
unsafe impl Send for Cachelets {}
// SAFETY: as for Send.
unsafe impl Sync for Cachelets {}

/// The record of one inode.
#[derive(Clone, Copy)]
pub struct Cachelet<'a> {
    pub ino: u64,
    small: &'a [AtomicU32],
    words: &'a [AtomicU64],
}

impl Cachelets {
    /// Region bytes for a pool with this layout.
    pub fn bytes_needed(l: &Layout) -> usize {
        (l.total_inodes() as usize) * RECORD
    }

    /// The records in `span` (zeroed memory is every record's initial state).
    pub fn new(span: Span, l: &Layout) -> Cachelets {
        assert!(span.bytes() >= Self::bytes_needed(l));
        let base = NonNull::from(span.words()).cast();
        Cachelets {
            span,
            count: l.total_inodes(),
            base,
        }
    }

    /// The record of `ino` (a number the layout accepts: callers check `ino_valid`).
    pub fn get(&self, ino: u64) -> Cachelet<'_> {
        assert!(ino < self.count, "inode {ino} out of range");
        // SAFETY: record `ino` lies inside the span: `ino < count` and the span holds
        // `count` records (`new` checked `bytes_needed`). The span's memory is mapped,
        // 64-aligned per record, for as long as `&self` lives, and only accessed
        // atomically. Its 64 bytes are viewed as 16 32-bit and 8 64-bit words, as
        // `Span::u32s` and `Span::words` view the whole span; the record's fields
        // never use both sizes on the same bytes (see the field list).
        let (small, words) = unsafe {
            let rec = self.base.as_ptr().add(ino as usize * WORDS);
            (
                std::slice::from_raw_parts(rec.cast::<AtomicU32>(), U32S),
                std::slice::from_raw_parts(rec.cast_const(), WORDS),
            )
        };
        Cachelet { ino, small, words }
    }

    /// Forget every record (a repair rebuilds them).
    pub fn clear(&self) {
        self.span.zero();
    }

    /// Files open or directories loaded now (a walk: for `lynxfs info`).
    pub fn live(&self) -> u64 {
        self.touched()
            .filter(|&i| {
                let c = self.get(i);
                // A settled directory's flag alone is no use of it.
                c.open() > 0 || c.flags() & !SETTLED != 0
            })
            .count() as u64
    }

    /// Records with flag `f` set (a walk: for `lynxfs info`).
    pub fn count_flagged(&self, f: u32) -> u64 {
        self.touched()
            .filter(|&i| self.get(i).flags() & f != 0)
            .count() as u64
    }

    /// The inode numbers whose records lie on pages in memory (never-written pages hold
    /// zeros: no open, no flags), so a walk does not give the rest memory. For
    /// `lynxfs info` only: a page swapped out would be missed, which a count may
    /// afford and a repair could not.
    fn touched(&self) -> impl Iterator<Item = u64> + '_ {
        self.span
            .resident_words()
            .filter(|w| w % WORDS == 0)
            .map(|w| (w / WORDS) as u64)
            .filter(|&i| i < self.count)
    }

    /// DRAM the records take (an upper bound: untouched pages take none).
    pub fn dram_bytes(&self) -> u64 {
        self.count * RECORD as u64
    }
}

impl<'a> Cachelet<'a> {
    /// The file's data lock, shared: readers of its bytes and block map.
    pub fn read(&self, w: &dyn Watch) -> Result<ReadGuard<'a>, Interrupted> {
        lock::read(&self.small[DATA_LOCK], w)
    }
    /// The file's data lock, alone: writers, truncate, unlink's last-link decision.
    pub fn write(&self, w: &dyn Watch) -> Result<WriteGuard<'a>, Interrupted> {
        lock::write(&self.small[DATA_LOCK], w)
    }
    /// The file's data lock for a reader that takes no hold: a stamp to check with
    /// [`Self::read_unchanged`] after its reads, `None` while a writer holds it alone.
    #[inline]
    pub fn read_stamp(&self) -> Option<u32> {
        lock::stamp(&self.small[DATA_LOCK])
    }
    /// After reads begun at `stamp` ([`Self::read_stamp`]): true if they saw what
    /// reads under a shared hold would have (no writer held the lock alone since).
    #[inline]
    pub fn read_unchanged(&self, stamp: u32) -> bool {
        lock::unchanged(&self.small[DATA_LOCK], stamp)
    }
    /// The file's data lock for update: a writer preparing blocks no reader sees yet,
    /// beside readers; upgraded to alone for the commit (`UpdateGuard::upgrade`).
    pub fn update(&self, w: &dyn Watch) -> Result<lock::UpdateGuard<'a>, Interrupted> {
        lock::update(&self.small[DATA_LOCK], w)
    }
    /// Read-modify-write of the inode's words (link count, attributes).
    pub fn inode_lock(&self, w: &dyn Watch) -> Result<lock::MutexGuard<'a>, Interrupted> {
        lock::lock(&self.small[INODE_LOCK], w)
    }
    /// A directory's gate word: its writer (rmdir, a rename over it, eviction) and
    /// their waiters; shared holds are counted per lane (`meta::gate`).
    pub fn gate_word(&self) -> &'a AtomicU32 {
        &self.small[GATE]
    }
    /// The word of [`Cachelet::dir_lock`] (eviction tries it without waiting).
    pub fn dir_lock_word(&self) -> &'a AtomicU32 {
        &self.small[DIR_LOCK]
    }
    /// A directory's lock for loading its log and adding pages.
    pub fn dir_lock(&self, w: &dyn Watch) -> Result<lock::MutexGuard<'a>, Interrupted> {
        lock::lock(&self.small[DIR_LOCK], w)
    }

    pub fn open(&self) -> u32 {
        self.small[OPEN].load(Ordering::Acquire)
    }
    pub fn open_counter(&self) -> &'a AtomicU32 {
        &self.small[OPEN]
    }
    /// The flags (without the eviction count that shares their word).
    pub fn flags(&self) -> u32 {
        self.small[FLAGS].load(Ordering::Acquire) & (EVICTIONS - 1)
    }
    pub fn set_flags(&self, f: u32) {
        self.small[FLAGS].fetch_or(f, Ordering::AcqRel);
    }
    pub fn clear_flags(&self, f: u32) {
        self.small[FLAGS].fetch_and(!f, Ordering::AcqRel);
    }

    /// The directory's entries are leaving the index: not [`LOADED`], and one more
    /// eviction counted, in one store, before the first entry leaves.
    pub fn evicted(&self) {
        let word = &self.small[FLAGS];
        let _ = word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
            Some((f & !LOADED).wrapping_add(EVICTIONS))
        });
    }

    /// Whether the directory is loaded, and its evictions so far. A lookup that
    /// reads the same stamp, loaded, before and after it misses in the index missed
    /// no entry an eviction took out (a load sets [`LOADED`] after its last entry
    /// is in, an eviction clears it before the first goes).
    pub fn load_stamp(&self) -> u32 {
        self.small[FLAGS].load(Ordering::Acquire) & (LOADED | !(EVICTIONS - 1))
    }

    /// Forget the file this record was for (its inode number is being freed), so the
    /// next file with the number starts afresh; the lock words are left alone (a
    /// waiter may still be on them, and will find the inode gone). The map version
    /// moves on, so no process keeps a copy of the old map.
    pub fn reset(&self) {
        self.small[FLAGS].store(0, Ordering::Release);
        for w in [OLD_PARENT, TAIL, TIMES] {
            self.words[w].store(0, Ordering::Release);
        }
        self.words[MAP_VERSION].fetch_add(1, Ordering::AcqRel);
    }

    /// Bumped (under the data lock, alone) whenever the file's block map changes, so a
    /// process's cached copy of the map knows it is stale; for a directory, whenever
    /// its log is loaded, so slots a thread holds from before are known stale
    /// (`dir::SlotOwner`).
    pub fn map_version(&self) -> &'a AtomicU64 {
        &self.words[MAP_VERSION]
    }

    /// A removed directory's old parent (`Dir::set_removed`).
    pub fn old_parent(&self) -> &'a AtomicU64 {
        &self.words[OLD_PARENT]
    }
    /// A directory's next never-used slot: the last log page's address plus the index
    /// of its first unused slot (0 when the directory has no page yet).
    pub fn tail(&self) -> &'a AtomicU64 {
        &self.words[TAIL]
    }
    /// The head of a directory's stack of freed slots (`free_slots::FreeSlots`).
    pub fn free_head(&self) -> &'a AtomicU64 {
        &self.words[FREE_HEAD]
    }
    /// A directory's mtime and ctime as a create last made them durable (both inode
    /// words held this value when that create's fence returned), or 0 when not known
    /// (a stat has seen them since, or nothing set it yet): what lets a create of the
    /// same clock tick leave the parent's times alone (docs/CONSISTENCY.md, "The
    /// parent's times").
    pub fn durable_times(&self) -> &'a AtomicU64 {
        &self.words[TIMES]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Geometry;

    #[test]
    fn records_are_per_inode_and_start_empty() {
        let l = Layout::compute(Geometry::for_size(16 << 20, 2, None)).unwrap();
        let c = Cachelets::new(Span::anonymous(Cachelets::bytes_needed(&l)).unwrap(), &l);
        let (a, b) = (c.get(1), c.get(2));
        assert_eq!((a.open(), a.flags()), (0, 0));
        a.set_flags(ORPHAN);
        a.open_counter().fetch_add(1, Ordering::AcqRel);
        assert_eq!((b.open(), b.flags()), (0, 0));
        assert_eq!((c.get(1).open(), c.get(1).flags()), (1, ORPHAN));
        assert_eq!((c.live(), c.count_flagged(ORPHAN)), (1, 1));
        let _w = a.write(&lock::Alone).unwrap();
        assert!(lock::try_write(&b.small[DATA_LOCK]).is_some());
    }

    /// A lookup's stamp taken before an eviction differs from one taken after the
    /// directory is loaded again, and the eviction count shows in no flag.
    #[test]
    fn an_eviction_changes_the_load_stamp_for_good() {
        let l = Layout::compute(Geometry::for_size(16 << 20, 2, None)).unwrap();
        let c = Cachelets::new(Span::anonymous(Cachelets::bytes_needed(&l)).unwrap(), &l);
        let d = c.get(5);
        d.set_flags(LOADED);
        let before = d.load_stamp();
        assert_ne!(before & LOADED, 0);
        d.evicted();
        assert_eq!(d.flags(), 0, "not loaded; the count is no flag");
        assert_eq!(d.load_stamp() & LOADED, 0);
        d.set_flags(LOADED);
        assert_eq!(d.flags(), LOADED);
        assert_ne!(d.load_stamp(), before, "loaded again, after an eviction");
        assert_eq!(c.live(), 1);
        d.evicted();
        assert_eq!(
            c.live(),
            0,
            "an evicted directory's count alone is no use of it"
        );
    }

    /// A directory known settled but neither open nor loaded is not counted live
    /// (`lynxfs info`): the flag only remembers a durable settle.
    #[test]
    fn a_settled_flag_alone_is_not_a_live_record() {
        let l = Layout::compute(Geometry::for_size(16 << 20, 2, None)).unwrap();
        let c = Cachelets::new(Span::anonymous(Cachelets::bytes_needed(&l)).unwrap(), &l);
        c.get(3).set_flags(SETTLED);
        assert_eq!(c.live(), 0);
        c.get(3).set_flags(LOADED);
        assert_eq!(c.live(), 1);
        c.get(3).reset();
        assert_eq!(c.get(3).flags(), 0);
    }
}
