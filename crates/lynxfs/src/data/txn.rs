//! FSMAC's running and committing transactions, for hybrid pools (file data on a data
//! device, docs/CONSISTENCY.md "Hybrid pools").
//!
//! A write to a hybrid pool returns once its bytes are `pwrite`n (in the kernel's page
//! cache, shared by every process attached to the pool); the metadata it changes in
//! the pool (map word, both map areas, size, mtime, ctime) first keeps its original:
//! the inode's 256 bytes, recorded once per running transaction in the pool's **undo
//! area** ([`UndoArea`]) and fenced before the first change ([`Txn::enter`]). A
//! **commit** ([`Txn::commit`]) starts a new running transaction, waits for the old
//! one's writes in flight (each holds the transaction lock shared from the moment it
//! picks its transaction until its metadata commit), flushes the device (`fdatasync`,
//! the only maker of a [`Durable<Disk>`]), and then stores the committed number: one
//! 8-byte store, the commit point, which takes that proof. Only then are the blocks the
//! transaction's writes replaced given back ([`InTxn::free_data`]): a restorable
//! original may still name them. Recovery ([`roll_back`]) restores, newest first, every
//! original of a transaction that did not commit, so no file shows blocks whose data
//! did not reach the disk.
//!
//! The running number, the writes in flight (the lock word's readers) and the slots
//! used in each half of the undo area are in the runtime region, shared by every
//! attached process. A process that dies holding the lock is a runtime repair
//! (`runtime::lock`'s waits end with `Interrupted`); the repair commits what is
//! pending before it rebuilds ([`repair_commit`]).

use std::collections::HashSet;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{errno, Result};
use crate::format::layout::INODE_SIZE;
use crate::format::{inode, Layout, BLOCK};
use crate::pmem::{Backend, Disk, Durable, Pm};
use crate::pool::Pool;
use crate::runtime::lock::{self, ReadGuard};
use crate::runtime::{Span, Watch};

/// Bytes of one undo record: a header line {txn, ino}, then the inode's 256 bytes.
pub const RECORD: u64 = 320;
/// Records per undo block.
const PER_BLOCK: u64 = BLOCK / RECORD;
/// The record's transaction number: stored (and fenced) after the rest, so a record
/// is valid exactly when this word names a transaction that did not commit.
const R_TXN: u64 = 0;
const R_INO: u64 = 8;
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

    fn record(&self, half: u64, slot: u64) -> u64 {
        self.base + BLOCK * (1 + half * self.half + slot / PER_BLOCK) + (slot % PER_BLOCK) * RECORD
    }
}

/// The words of the shared runtime state (a 64-byte span; zero: not set up yet).
const W_RUNNING: usize = 1;
/// The last transaction this runtime committed (its copy of the commit word).
const W_COMMITTED: usize = 2;
/// Slots used in each half (`W_NEXT + txn % 2`).
const W_NEXT: usize = 3;
/// When the running transaction's first original was recorded (ns since the epoch).
const W_STARTED: usize = 5;
/// 32-bit words: the transaction lock (writes in flight hold it shared), the commit
/// mutex (one commit at a time).
const U_LOCK: usize = 0;
const U_COMMIT: usize = 1;

/// Blocks given back once their transaction commits.
#[derive(Clone, Copy)]
enum Freed {
    Data(u64, u64),
    Node(u64),
}

/// This process's part: which inodes it recorded in the running transaction, and the
/// frees waiting for a commit.
#[derive(Default)]
struct Local {
    txn: u64,
    recorded: HashSet<(u64, u64)>,
    /// (transaction, runtime generation, blocks)
    deferred: Vec<(u64, u64, Freed)>,
}

/// A hybrid pool's transactions (see the module's comment).
pub struct Txn {
    span: Span,
    undo: UndoArea,
    watch: Arc<dyn Watch + Send + Sync>,
    local: Mutex<Local>,
    /// The longest a write waits for its commit (this process's setting, ns).
    interval: AtomicU64,
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

/// A write inside the running transaction: the inode's original is recorded, and the
/// transaction cannot commit while this is held. Publishing a hybrid write's metadata
/// and giving back its blocks go through it.
pub struct InTxn<'a> {
    txn: &'a Txn,
    number: u64,
    _hold: ReadGuard<'a>,
}

/// What a data change needs before it publishes: nothing in an all-PM pool (or a
/// hybrid pool of the format without transactions, whose writes flush the device
/// before their commit), the running transaction in a hybrid one.
pub enum Cover<'a> {
    None,
    Txn(InTxn<'a>),
}

impl Cover<'_> {
    /// Give back data blocks `[s, s + n)`: now, or at the commit of the transaction
    /// whose original may name them.
    #[inline]
    pub fn free_data<B: Backend>(&self, pool: &Pool<B>, s: u64, n: u64) {
        match self {
            Cover::None => pool.alloc.data_blocks().free(s, n),
            Cover::Txn(t) => t.defer(pool, Freed::Data(s, n)),
        }
    }

    /// Give back the extent-tree nodes at pool offsets `nodes` (see [`Self::free_data`]).
    #[inline]
    pub fn free_nodes<B: Backend>(&self, pool: &Pool<B>, nodes: &[u64]) {
        match self {
            Cover::None => super::map::free_nodes(pool, nodes),
            Cover::Txn(t) => {
                for &n in nodes {
                    if let Some(b) = pool.layout.block_of(n) {
                        t.defer(pool, Freed::Node(b));
                    }
                }
            }
        }
    }

    /// In-place changes of blocks an original names (a leaf's block pointer) would
    /// not be undone: not while a transaction covers the inode.
    #[inline]
    pub fn in_txn(&self) -> bool {
        matches!(self, Cover::Txn(_))
    }
}

/// The cover a change of `ino`'s data needs in `pool` (see [`Cover`]).
#[inline]
pub fn cover<B: Backend>(pool: &Pool<B>, ino: u64) -> Result<Cover<'_>> {
    match pool.txn() {
        None => Ok(Cover::None),
        Some(t) => t.enter(pool, ino).map(Cover::Txn),
    }
}

fn generation_of<B: Backend>(pool: &Pool<B>) -> u64 {
    pool.runtime_generation()
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
    fn due(&self) -> bool {
        let started = self.word(W_STARTED).load(Ordering::Relaxed);
        self.pending()
            && crate::time::now_ns().saturating_sub(started)
                >= self.interval.load(Ordering::Relaxed)
    }

    pub fn undo(&self) -> UndoArea {
        self.undo
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        &self.span.words()[i]
    }

    fn u32(&self, i: usize) -> &AtomicU32 {
        &self.span.u32s()[i]
    }

    /// Set up the shared words from the pool's commit word after an attach to a fresh
    /// runtime or a repair (which zeroes them): the next transaction follows the last
    /// committed one.
    fn ready<B: Backend>(&self, pm: &Pm<B>) -> Result<()> {
        if self.word(W_RUNNING).load(Ordering::Acquire) != 0 {
            return Ok(());
        }
        let _m = lock::lock(self.u32(U_COMMIT), &*self.watch)?;
        if self.word(W_RUNNING).load(Ordering::Acquire) == 0 {
            let c = pm.load_u64(self.undo.commit_word());
            self.word(W_COMMITTED).store(c, Ordering::Relaxed);
            self.word(W_NEXT).store(0, Ordering::Relaxed);
            self.word(W_NEXT + 1).store(0, Ordering::Relaxed);
            self.word(W_RUNNING).store(c + 1, Ordering::Release);
        }
        Ok(())
    }

    /// Join the running transaction to change `ino`: record its original first if this
    /// process has not yet in this transaction. A full half commits first.
    pub fn enter<'a, B: Backend>(&'a self, pool: &Pool<B>, ino: u64) -> Result<InTxn<'a>> {
        let pm = &pool.pm;
        let at = pool.layout.inode_addr(ino);
        loop {
            self.ready(pm)?;
            if self.due() {
                self.commit(pool)?;
            }
            let hold = lock::read(self.u32(U_LOCK), &*self.watch)?;
            let number = self.word(W_RUNNING).load(Ordering::Acquire);
            let key = (ino, pm.load_u64(at + inode::GENERATION));
            let ripe = {
                let mut l = self.local.lock().unwrap_or_else(|p| p.into_inner());
                if l.txn != number {
                    l.txn = number;
                    l.recorded.clear();
                    self.ripe(&mut l, generation_of(pool))
                } else if l.recorded.contains(&key) {
                    return Ok(InTxn {
                        txn: self,
                        number,
                        _hold: hold,
                    });
                } else {
                    Vec::new()
                }
            };
            give_back(pool, &ripe);
            let slot = self
                .word(W_NEXT + (number % 2) as usize)
                .fetch_add(1, Ordering::AcqRel);
            if slot < self.undo.capacity() {
                if slot == 0 {
                    // The interval counts from the transaction's first write.
                    self.word(W_STARTED)
                        .store(crate::time::now_ns(), Ordering::Relaxed);
                }
                self.record(pm, self.undo.record(number % 2, slot), number, ino, at);
                let mut l = self.local.lock().unwrap_or_else(|p| p.into_inner());
                if l.txn == number {
                    l.recorded.insert(key);
                }
                return Ok(InTxn {
                    txn: self,
                    number,
                    _hold: hold,
                });
            }
            drop(hold);
            self.commit(pool)?;
        }
    }

    /// Write an original: its body, a fence, then its transaction word and a fence
    /// (the record is valid only once the body is durable).
    fn record<B: Backend>(&self, pm: &Pm<B>, rec: u64, number: u64, ino: u64, at: u64) {
        let mut image = [0u8; INODE_SIZE as usize];
        pm.read(at, &mut image);
        let mut b = pm.batch();
        b.write_u64(rec + R_INO, ino).write(rec + R_IMAGE, &image);
        let body = b.persist();
        drop(pm.commit_u64(rec + R_TXN, number, body));
    }

    /// Hand blocks to the commit of the transaction `t` names.
    fn defer<B: Backend>(&self, pool: &Pool<B>, f: Freed, number: u64) {
        let mut l = self.local.lock().unwrap_or_else(|p| p.into_inner());
        l.deferred.push((number, generation_of(pool), f));
    }

    /// Take the deferred frees whose transaction committed (and drop those from
    /// before a repair, whose rebuild already found their blocks free).
    fn ripe(&self, l: &mut Local, generation: u64) -> Vec<Freed> {
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

    /// Mark the blocks this process's frees wait for a commit to give back, in a
    /// bitmap of device blocks (file data) and one of pool blocks (tree nodes): an
    /// fsck of a pool this process has open finds them neither reached nor free.
    pub fn mark_awaiting<B: Backend>(
        &self,
        pool: &Pool<B>,
        device: &mut [u64],
        pool_blocks: &mut [u64],
    ) {
        let generation = generation_of(pool);
        let l = self.local.lock().unwrap_or_else(|p| p.into_inner());
        let set = |bits: &mut [u64], b: u64| {
            if let Some(w) = bits.get_mut((b / 64) as usize) {
                *w |= 1 << (b % 64);
            }
        };
        for &(_, g, f) in &l.deferred {
            if g != generation {
                continue;
            }
            match f {
                Freed::Data(s, n) => (s..s + n).for_each(|b| set(device, b)),
                Freed::Node(b) => set(pool_blocks, b),
            }
        }
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

    /// Commit the running transaction (see the module's comment); nothing to do when
    /// nothing was written since the last commit. EIO when the device's flush fails:
    /// nothing commits, and the next commit tries again.
    pub fn commit<B: Backend>(&self, pool: &Pool<B>) -> Result<()> {
        let pm = &pool.pm;
        self.ready(pm)?;
        let dev = pool
            .device()
            .expect("a pool with transactions has a device");
        let m = lock::lock(self.u32(U_COMMIT), &*self.watch)?;
        loop {
            let committed = self.word(W_COMMITTED).load(Ordering::Acquire);
            let running = self.word(W_RUNNING).load(Ordering::Acquire);
            let number = if committed + 1 < running {
                // The last commit failed: its transaction still waits for the flush,
                // and its half may not be reused before.
                running - 1
            } else if self
                .word(W_NEXT + (running % 2) as usize)
                .load(Ordering::Acquire)
                == 0
            {
                break;
            } else {
                let _w = lock::write(self.u32(U_LOCK), &*self.watch)?;
                self.word(W_NEXT + ((running + 1) % 2) as usize)
                    .store(0, Ordering::Relaxed);
                self.word(W_RUNNING).store(running + 1, Ordering::Release);
                running
            };
            let flushed = dev.sync().map_err(|_| errno::EIO)?;
            pm.backend().device_synced();
            commit_point(pm, self.undo.commit_word(), number, flushed);
            self.word(W_COMMITTED).store(number, Ordering::Release);
            if number == running {
                break;
            }
        }
        drop(m);
        self.release(pool);
        Ok(())
    }

    /// Give back this process's deferred frees whose transaction committed.
    fn release<B: Backend>(&self, pool: &Pool<B>) {
        let ripe = {
            let mut l = self.local.lock().unwrap_or_else(|p| p.into_inner());
            self.ripe(&mut l, generation_of(pool))
        };
        give_back(pool, &ripe);
    }
}

fn give_back<B: Backend>(pool: &Pool<B>, freed: &[Freed]) {
    for f in freed {
        match *f {
            Freed::Data(s, n) => pool.alloc.data_blocks().free(s, n),
            Freed::Node(b) => pool.alloc.meta_blocks().free(b, 1),
        }
    }
}

impl InTxn<'_> {
    fn defer<B: Backend>(&self, pool: &Pool<B>, f: Freed) {
        self.txn.defer(pool, f, self.number);
    }
}

/// The commit point: one 8-byte store of the committed transaction number, which
/// needs the device's flush (the data every uncommitted original's metadata names is
/// on the disk) and is fenced.
fn commit_point<B: Backend>(pm: &Pm<B>, word: u64, number: u64, _flushed: Durable<Disk>) {
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

/// A runtime repair (a process died; others go on): commit what is pending, so the
/// rebuild's walk finds no original that could still be restored (the deferred frees
/// of every process are dropped with the old generation: the walk finds their blocks
/// free). The dead process's writes reached the page cache before their metadata
/// changed. If the device cannot be flushed, the uncommitted originals are restored
/// instead (those writes are lost, as in a crash). Outside any operation.
pub fn repair_commit<B: Backend>(pool: &Pool<B>) {
    let Some(t) = pool.txn() else {
        return;
    };
    let pm = &pool.pm;
    let committed = pm.load_u64(t.undo.commit_word());
    let mut newest = committed;
    for half in 0..2 {
        for slot in 0..t.undo.capacity() {
            newest = newest.max(pm.load_u64(t.undo.record(half, slot) + R_TXN));
        }
    }
    if newest == committed {
        return;
    }
    match pool.device().map(|d| d.sync()) {
        Some(Ok(flushed)) => {
            pm.backend().device_synced();
            commit_point(pm, t.undo.commit_word(), newest, flushed);
        }
        _ => {
            roll_back(pm, &pool.layout, t.undo);
        }
    }
    let mut l = t.local.lock().unwrap_or_else(|p| p.into_inner());
    l.deferred.clear();
    l.recorded.clear();
    l.txn = 0;
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
