//! FSMAC's running and committing transactions, for hybrid pools (file data on a data
//! device, docs/CONSISTENCY.md "Hybrid pools").
//!
//! A write to a hybrid pool returns once its bytes are `pwrite`n (in the kernel's page
//! cache, shared by every process attached to the pool); the metadata it changes in
//! the pool (map word, both map areas, size, mtime, ctime) first keeps its original:
//! the inode's 256 bytes, recorded once per running transaction in the pool's **undo
//! area** ([`UndoArea`](crate::log::undo::UndoArea), in `log::undo` with the shared state
//! and the rollback) and fenced before the first change ([`Txn::enter`]). A
//! **commit** ([`Txn::commit`]) starts a new running transaction, waits for the old
//! one's writes in flight (each holds the transaction lock shared from the moment it
//! picks its transaction until its metadata commit), flushes the device (`fdatasync`,
//! the only maker of a [`Durable<Disk>`]), and then stores the committed number: one
//! 8-byte store, the commit point, which takes that proof. Only then are the blocks the
//! transaction's writes replaced given back ([`InTxn::free_data`]): a restorable
//! original may still name them. Recovery ([`roll_back`](crate::log::undo::roll_back)) restores, newest first, every
//! original of a transaction that did not commit, so no file shows blocks whose data
//! did not reach the disk.
//!
//! Commits are grouped, as jbd2's: a commit whose caller's writes a commit in flight
//! covers waits for that one and makes no flush of its own, so concurrent fsyncs share
//! one device flush; and an fsync commits only if its file has writes in a transaction
//! not yet committed ([`Txn::commit_for`]): a file whose data is on the device, a
//! directory, or a chmod costs no disk flush (namespace and attribute changes are
//! durable in the pool when they return, as in an all-PM pool).
//!
//! The running number, the writes in flight (the lock word's readers) and the slots
//! used in each half of the undo area are in the runtime region, shared by every
//! attached process. A process that dies holding the lock is a runtime repair
//! (`runtime::lock`'s waits end with `Interrupted`); the repair commits what is
//! pending before it rebuilds ([`repair_commit`]).

use std::sync::atomic::Ordering;

use crate::error::{errno, Result};
use crate::format::inode;
use crate::log::undo::Txn;
use crate::log::undo::{
    commit_point, roll_back, Freed, R_INO, R_TXN, U_LOCK, W_COMMITTED, W_NEXT, W_RUNNING, W_STARTED,
};
use crate::pmem::Backend;
use crate::pool::Pool;
use crate::runtime::lock::{self, ReadGuard};

/// The commit interval when nothing sets one (re-exported for the mount's `commit=`).
pub use crate::log::undo::DEFAULT_INTERVAL;

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

impl Txn {
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
                    self.ripe(&mut l, pool.runtime_generation())
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

    /// Hand blocks to the commit of the transaction `t` names.
    fn defer<B: Backend>(&self, pool: &Pool<B>, f: Freed, number: u64) {
        let mut l = self.local.lock().unwrap_or_else(|p| p.into_inner());
        l.deferred.push((number, pool.runtime_generation(), f));
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
        let generation = pool.runtime_generation();
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

    /// Commit the running transaction (see the module's comment); nothing to do when
    /// nothing was written since the last commit. EIO when the device's flush fails:
    /// nothing commits, and the next commit tries again.
    pub fn commit<B: Backend>(&self, pool: &Pool<B>) -> Result<()> {
        self.ready(&pool.pm)?;
        self.commit_through(pool, self.newest_written())
    }

    /// fsync of `ino`: commit the newest transaction holding a write of it, or nothing
    /// when none does (its data and size, as the pool holds them, are committed: a
    /// directory, a file written before the last commit, a chmod).
    pub fn commit_for<B: Backend>(&self, pool: &Pool<B>, ino: u64) -> Result<()> {
        self.ready(&pool.pm)?;
        match self.newest_with(&pool.pm, ino) {
            Some(number) => self.commit_through(pool, number),
            None => Ok(()),
        }
    }

    /// Whether [`Self::commit_for`] of `ino` would commit: a transaction not yet
    /// committed holds a write of it.
    pub fn needed_for<B: Backend>(&self, pool: &Pool<B>, ino: u64) -> Result<bool> {
        self.ready(&pool.pm)?;
        Ok(self.newest_with(&pool.pm, ino).is_some())
    }

    /// The newest transaction with writes: the running one if it has any, else the
    /// one before (committed, or committing).
    fn newest_written(&self) -> u64 {
        let running = self.word(W_RUNNING).load(Ordering::Acquire);
        match self.slots_used(running) {
            0 => running - 1,
            _ => running,
        }
    }

    /// Slots recorded in transaction `number`'s half (at most its capacity: a write
    /// that finds the half full takes a slot past it and commits instead).
    fn slots_used(&self, number: u64) -> u64 {
        self.word(W_NEXT + (number % 2) as usize)
            .load(Ordering::Acquire)
            .min(self.undo.capacity())
    }

    /// The newest uncommitted transaction that recorded `ino`'s original, if any: a
    /// scan of the records of the running transaction and of the committing one.
    /// Every write that returned recorded its original (or found it recorded by its
    /// process in that transaction) before it changed anything, so a write of `ino`
    /// that returned is found unless its transaction has committed. A commit that
    /// resets a half meanwhile does so only after the transaction that used it
    /// committed, so what the scan misses that way needs nothing.
    fn newest_with<B: Backend>(&self, pm: &crate::pmem::Pm<B>, ino: u64) -> Option<u64> {
        let committed = self.word(W_COMMITTED).load(Ordering::Acquire);
        let running = self.word(W_RUNNING).load(Ordering::Acquire);
        (committed + 1..=running).rev().take(2).find(|&number| {
            (0..self.slots_used(number)).any(|slot| {
                let rec = self.undo.record(number % 2, slot);
                pm.load_u64(rec + R_TXN) == number && pm.load_u64(rec + R_INO) == ino
            })
        })
    }

    /// Group commit (as jbd2's): make transaction `want` and those before it
    /// committed. A commit in flight holds the commit mutex through its device flush;
    /// a caller that finds it held sleeps until that commit's turn ends (every sleeper
    /// wakes at once, [`U_TURNS`](crate::log::undo::U_TURNS)) and returns without a
    /// flush of its own if that commit's number reached `want`. Otherwise the first
    /// to take the mutex commits the running transaction, which holds the writes of
    /// every thread and process that came while the previous flush ran: their fsyncs
    /// then find themselves covered, so concurrent fsyncs share one device flush.
    fn commit_through<B: Backend>(&self, pool: &Pool<B>, want: u64) -> Result<()> {
        loop {
            if self.word(W_COMMITTED).load(Ordering::Acquire) >= want {
                break;
            }
            // Read before trying the mutex: a turn that ends after this changes it,
            // so the sleep below cannot miss that turn's end.
            let seen = self.turns();
            match self.try_commit_turn() {
                Some(_turn) => {
                    self.commit_in_turn(pool, want)?;
                    break;
                }
                None => self.await_turn(seen)?,
            }
        }
        self.release(pool);
        self.settle_device(pool);
        Ok(())
    }

    /// After a commit, off its turn (its waiters are awake): fill the parts of the
    /// device steps this process reserved that no write covered
    /// ([`Device::settle`](crate::pmem::device::Device::settle)), each piece with the
    /// pool's writers held off by the transaction lock taken alone (never waited for:
    /// a write in flight puts the fill off to a later commit). Zeros over holes read
    /// as before, so a failure changes nothing a reader sees: it is dropped.
    fn settle_device<B: Backend>(&self, pool: &Pool<B>) {
        let Some(dev) = pool.device().filter(|d| d.unsettled()) else {
            return;
        };
        let alone = || lock::try_write(self.u32(U_LOCK));
        let backend = pool.pm.backend();
        let _ = dev.settle(&alone, &mut |off, len| backend.device_zeroed(off, len));
    }

    /// The commits that make `want` committed, the commit mutex held: the running
    /// transaction closed (after the writes in flight in it) and flushed, or the one a
    /// failed commit left waiting for its flush.
    fn commit_in_turn<B: Backend>(&self, pool: &Pool<B>, want: u64) -> Result<()> {
        let pm = &pool.pm;
        let dev = pool
            .device()
            .expect("a pool with transactions has a device");
        loop {
            let committed = self.word(W_COMMITTED).load(Ordering::Acquire);
            if committed >= want {
                return Ok(());
            }
            let running = self.word(W_RUNNING).load(Ordering::Acquire);
            let number = if committed + 1 < running {
                // The last commit failed: its transaction still waits for the flush,
                // and its half may not be reused before.
                running - 1
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
        }
    }

    /// Give back this process's deferred frees whose transaction committed.
    fn release<B: Backend>(&self, pool: &Pool<B>) {
        let ripe = {
            let mut l = self.local.lock().unwrap_or_else(|p| p.into_inner());
            self.ripe(&mut l, pool.runtime_generation())
        };
        give_back(pool, &ripe);
    }
}

fn give_back<B: Backend>(pool: &Pool<B>, freed: &[Freed]) {
    for f in freed {
        match *f {
            Freed::Data(s, n) => {
                pool.alloc.data_blocks().free(s, n);
                if let Some(dev) = pool.device() {
                    dev.forget(s, n);
                }
            }
            Freed::Node(b) => pool.alloc.meta_blocks().free(b, 1),
        }
    }
}

impl InTxn<'_> {
    fn defer<B: Backend>(&self, pool: &Pool<B>, f: Freed) {
        self.txn.defer(pool, f, self.number);
    }
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
