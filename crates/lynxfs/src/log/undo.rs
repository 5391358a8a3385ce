//! The undo log of a hybrid pool's transactions (FSMAC's running and committing
//! transactions; docs/CONSISTENCY.md "Hybrid pools", docs/FORMAT.md 17.4): where the
//! originals live ([`UndoArea`]), the transaction state every attached process shares
//! ([`Txn`]: the running number, the writes in flight, the slots used), how an original
//! is written, the commit point, and recovery's rollback ([`roll_back`]). What joins,
//! commits and frees with a pool is `data::txn`, the layer that writes file data.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::format::layout::INODE_SIZE;
use crate::format::{inode, Layout, BLOCK};
use crate::pmem::{Backend, Disk, Durable, Pm};
use crate::runtime::lock;
use crate::runtime::{Span, Watch};

/// Bytes of one undo record: a header line {txn, ino}, then the inode's 256 bytes.
pub const RECORD: u64 = 320;
/// Records per undo block.
const PER_BLOCK: u64 = BLOCK / RECORD;
/// The record's transaction number: stored (and fenced) after the rest, so a record
/// is valid exactly when this word names a transaction that did not commit.
pub(crate) const R_TXN: u64 = 0;
pub(crate) const R_INO: u64 = 8;
const R_IMAGE: u64 = 64;
/// The most blocks of one half of the undo area.
const MAX_HALF: u64 = 256;

/// Where a hybrid pool's undo area is: the last blocks of the pool's block area, kept
/// out of every allocator (mkfs, recovery and fsck mark them in use). Block 0 holds the
/// commit word (the last committed transaction); then two halves of `half` blocks,
/// the records of even and of odd transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UndoArea {
    first: u64,
    half: u64,
    base: u64,
}

impl UndoArea {
    /// The undo area of a hybrid pool laid out as `l`.
    pub fn of(l: &Layout) -> UndoArea {
        let half = (l.data_blocks / 64).clamp(1, MAX_HALF);
        let first = l.data_blocks - (1 + 2 * half);
        UndoArea {
            first,
            half,
            base: l.block_addr(first),
        }
    }

    /// Its blocks (pool block numbers).
    pub fn blocks(&self) -> Range<u64> {
        self.first..self.first + 1 + 2 * self.half
    }

    /// Mark its blocks in use in a block bitmap.
    pub fn mark(&self, bits: &mut [u64]) {
        for b in self.blocks() {
            bits[(b / 64) as usize] |= 1 << (b % 64);
        }
    }

    /// The pool offset of the commit word.
    pub fn commit_word(&self) -> u64 {
        self.base
    }

    /// Records per half.
    pub fn capacity(&self) -> u64 {
        self.half * PER_BLOCK
    }

    pub(crate) fn record(&self, half: u64, slot: u64) -> u64 {
        self.base + BLOCK * (1 + half * self.half + slot / PER_BLOCK) + (slot % PER_BLOCK) * RECORD
    }
}

/// The words of the shared runtime state (a 64-byte span; zero: not set up yet).
pub(crate) const W_RUNNING: usize = 1;
/// The last transaction this runtime committed (its copy of the commit word).
pub(crate) const W_COMMITTED: usize = 2;
/// Slots used in each half (`W_NEXT + txn % 2`).
pub(crate) const W_NEXT: usize = 3;
/// When the running transaction's first original was recorded (ns since the epoch).
pub(crate) const W_STARTED: usize = 5;
/// 32-bit words: the transaction lock (writes in flight hold it shared), the commit
/// mutex (one commit at a time).
pub(crate) const U_LOCK: usize = 0;
pub(crate) const U_COMMIT: usize = 1;
/// 32-bit word (in the span's seventh word): bumped, and every sleeper on it woken, at
/// each release of the commit mutex. A commit's waiters sleep on it rather than queue
/// for the mutex, so the end of a commit wakes them all at once: a mutex hands itself
/// to one sleeper at a time, and a wake across CPUs here costs tens of microseconds,
/// so sixteen fsyncs covered by one flush would learn it one after another.
pub(crate) const U_TURNS: usize = 12;

/// Blocks given back once their transaction commits.
#[derive(Clone, Copy)]
pub(crate) enum Freed {
    Data(u64, u64),
    Node(u64),
}

/// This process's part: which inodes it recorded in the running transaction, and the
/// frees waiting for a commit.
#[derive(Default)]
pub(crate) struct Local {
    pub(crate) txn: u64,
    pub(crate) recorded: HashSet<(u64, u64)>,
    /// (transaction, runtime generation, blocks)
    pub(crate) deferred: Vec<(u64, u64, Freed)>,
}

/// A hybrid pool's transactions (see the module's comment).
pub struct Txn {
    pub(crate) span: Span,
    pub(crate) undo: UndoArea,
    pub(crate) watch: Arc<dyn Watch + Send + Sync>,
    pub(crate) local: Mutex<Local>,
    /// The longest a write waits for its commit (this process's setting, ns).
    pub(crate) interval: AtomicU64,
}

/// The commit interval when nothing sets one: 5 s, as ext4's `commit=`.
pub const DEFAULT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// The commit interval a process starts with: `LYNXFS_COMMIT_MS` (milliseconds, at
/// least 1) if set and valid, else [`DEFAULT_INTERVAL`] (for the preload library and
/// the C API, which have no mount options).
fn interval_from_env() -> std::time::Duration {
    std::env::var("LYNXFS_COMMIT_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map_or(DEFAULT_INTERVAL, std::time::Duration::from_millis)
}

/// The commit mutex, held. Its release ends a turn: [`U_TURNS`] is bumped after the
/// mutex is free and every sleeper on it woken, so a waiter woken finds the mutex free
/// (or taken by a waiter that came first) and what the turn committed.
pub(crate) struct CommitTurn<'a> {
    txn: &'a Txn,
    m: Option<lock::MutexGuard<'a>>,
}

impl Drop for CommitTurn<'_> {
    fn drop(&mut self) {
        drop(self.m.take());
        let turns = self.txn.u32(U_TURNS);
        turns.fetch_add(1, Ordering::Release);
        lock::futex_wake_all(turns);
    }
}

impl Txn {
    /// Bytes of runtime state.
    pub const BYTES: usize = 64;

    pub fn new(span: Span, undo: UndoArea, watch: Arc<dyn Watch + Send + Sync>) -> Txn {
        assert!(span.bytes() >= Self::BYTES);
        Txn {
            span,
            undo,
            watch,
            local: Mutex::new(Local::default()),
            interval: AtomicU64::new(interval_from_env().as_nanos() as u64),
        }
    }

    /// Commit at least every `every` (the mount option `commit=S`): a write that
    /// finds the running transaction older commits it first, and a mount's timer
    /// (`Fs::commit_every`) commits an idle one.
    pub fn set_interval(&self, every: std::time::Duration) {
        let ns = every.as_nanos().clamp(1, u64::MAX as u128) as u64;
        self.interval.store(ns, Ordering::Relaxed);
    }

    /// The running transaction has writes and is older than the interval.
    pub(crate) fn due(&self) -> bool {
        let started = self.word(W_STARTED).load(Ordering::Relaxed);
        self.pending()
            && crate::time::now_ns().saturating_sub(started)
                >= self.interval.load(Ordering::Relaxed)
    }

    pub fn undo(&self) -> UndoArea {
        self.undo
    }

    pub(crate) fn word(&self, i: usize) -> &AtomicU64 {
        &self.span.words()[i]
    }

    pub(crate) fn u32(&self, i: usize) -> &AtomicU32 {
        &self.span.u32s()[i]
    }

    /// Set up the shared words from the pool's commit word after an attach to a fresh
    /// runtime or a repair (which zeroes them): the next transaction follows the last
    /// committed one.
    pub(crate) fn ready<B: Backend>(&self, pm: &Pm<B>) -> Result<()> {
        if self.word(W_RUNNING).load(Ordering::Acquire) != 0 {
            return Ok(());
        }
        let _turn = self.commit_turn()?;
        if self.word(W_RUNNING).load(Ordering::Acquire) == 0 {
            let c = pm.load_u64(self.undo.commit_word());
            self.word(W_COMMITTED).store(c, Ordering::Relaxed);
            self.word(W_NEXT).store(0, Ordering::Relaxed);
            self.word(W_NEXT + 1).store(0, Ordering::Relaxed);
            self.word(W_RUNNING).store(c + 1, Ordering::Release);
        }
        Ok(())
    }

    /// Take the commit mutex (one commit, or setup, at a time), waiting for it.
    pub(crate) fn commit_turn(&self) -> Result<CommitTurn<'_>> {
        let m = lock::lock(self.u32(U_COMMIT), &*self.watch)?;
        Ok(CommitTurn {
            txn: self,
            m: Some(m),
        })
    }

    /// The commit mutex if it is free now.
    pub(crate) fn try_commit_turn(&self) -> Option<CommitTurn<'_>> {
        lock::try_lock(self.u32(U_COMMIT)).map(|m| CommitTurn {
            txn: self,
            m: Some(m),
        })
    }

    /// The count of commit turns ended so far (see [`U_TURNS`]), to wait on.
    pub(crate) fn turns(&self) -> u32 {
        self.u32(U_TURNS).load(Ordering::Acquire)
    }

    /// Sleep until a commit turn ends after `seen` was read from [`Self::turns`] (or a
    /// slice passes, or the watch says a holder died).
    pub(crate) fn await_turn(&self, seen: u32) -> Result<()> {
        lock::sleep_while(self.u32(U_TURNS), seen, &*self.watch)?;
        Ok(())
    }

    /// Write an original: its body, a fence, then its transaction word and a fence
    /// (the record is valid only once the body is durable).
    pub(crate) fn record<B: Backend>(&self, pm: &Pm<B>, rec: u64, number: u64, ino: u64, at: u64) {
        let mut image = [0u8; INODE_SIZE as usize];
        pm.read(at, &mut image);
        let mut b = pm.batch();
        b.write_u64(rec + R_INO, ino).write(rec + R_IMAGE, &image);
        let body = b.persist();
        drop(pm.commit_u64(rec + R_TXN, number, body));
    }

    /// Take the deferred frees whose transaction committed (and drop those from
    /// before a repair, whose rebuild already found their blocks free).
    pub(crate) fn ripe(&self, l: &mut Local, generation: u64) -> Vec<Freed> {
        let committed = self.word(W_COMMITTED).load(Ordering::Acquire);
        let mut out = Vec::new();
        l.deferred.retain(|&(t, g, f)| {
            if g != generation {
                return false;
            }
            if t <= committed {
                out.push(f);
                return false;
            }
            true
        });
        out
    }

    /// Anything written since the last commit?
    pub fn pending(&self) -> bool {
        let running = self.word(W_RUNNING).load(Ordering::Acquire);
        running != 0
            && (self
                .word(W_NEXT + (running % 2) as usize)
                .load(Ordering::Acquire)
                != 0
                || self.word(W_COMMITTED).load(Ordering::Acquire) + 1 < running)
    }
}

/// The commit point: one 8-byte store of the committed transaction number, which
/// needs the device's flush (the data every uncommitted original's metadata names is
/// on the disk) and is fenced.
pub(crate) fn commit_point<B: Backend>(
    pm: &Pm<B>,
    word: u64,
    number: u64,
    _flushed: Durable<Disk>,
) {
    let records = pm.fence();
    drop(pm.commit_u64(word, number, records));
}

/// Recovery: restore every original of a transaction that did not commit, newest
/// transaction first and within one the earliest record last (two processes may
/// record one inode twice), then mark them all done. Only what a data change sets is
/// restored (map word, both map areas, size, mtime, ctime), and only into the inode
/// the record was taken of (same number and generation: an inode freed and reused
/// since is another file). Run after the journals' replay (a committed record's words
/// are newer than any original) and before the namespace walk. Idempotent: a crash
/// during it runs it again. Returns how many originals were restored.
pub fn roll_back<B: Backend>(pm: &Pm<B>, l: &Layout, undo: UndoArea) -> usize {
    let committed = pm.load_u64(undo.commit_word());
    let mut recs: Vec<(u64, u64, u64)> = Vec::new();
    for half in 0..2 {
        for slot in 0..undo.capacity() {
            let rec = undo.record(half, slot);
            let t = pm.load_u64(rec + R_TXN);
            if t > committed {
                recs.push((t, slot, rec));
            }
        }
    }
    recs.sort_unstable_by_key(|r| std::cmp::Reverse((r.0, r.1)));
    let mut restored = 0;
    for &(_, _, rec) in &recs {
        let ino = pm.load_u64(rec + R_INO);
        if !l.ino_valid(ino) {
            continue;
        }
        let mut image = [0u8; INODE_SIZE as usize];
        pm.read(rec + R_IMAGE, &mut image);
        let word = |off: u64| {
            u64::from_le_bytes(image[off as usize..off as usize + 8].try_into().unwrap())
        };
        let at = l.inode_addr(ino);
        if pm.load_u64(at + inode::INO) != ino
            || word(inode::INO) != ino
            || pm.load_u64(at + inode::GENERATION) != word(inode::GENERATION)
        {
            continue;
        }
        let mut b = pm.batch();
        for off in [inode::SIZE, inode::MTIME, inode::CTIME, inode::MAP] {
            b.write_u64(at + off, word(off));
        }
        let areas = inode::AREA_A as usize..(inode::AREA_B + inode::AREA_LEN) as usize;
        b.write(at + inode::AREA_A, &image[areas]);
        b.flushed();
        restored += 1;
    }
    let done = pm.fence();
    if let Some(newest) = recs.first().map(|r| r.0) {
        drop(pm.commit_u64(undo.commit_word(), newest, done));
    }
    restored
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Geometry;

    #[test]
    fn the_undo_area_is_the_last_blocks_and_its_records_do_not_overlap() {
        let l = Layout::compute(Geometry::for_size(16 << 20, 2, None)).unwrap();
        let u = UndoArea::of(&l);
        assert_eq!(u.blocks().end, l.data_blocks);
        let last = u.record(1, u.capacity() - 1);
        assert!(last + RECORD <= l.block_addr(l.data_blocks - 1) + BLOCK);
        assert_eq!(u.record(0, 1) - u.record(0, 0), RECORD);
        assert!(u.record(1, 0) >= u.record(0, u.capacity() - 1) + RECORD);
        assert!(u.record(0, 0) >= u.commit_word() + BLOCK);
    }
}
