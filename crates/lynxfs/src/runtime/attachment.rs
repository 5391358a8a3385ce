//! A process attached to a pool's shared runtime state: the [`Runtime`] the engine
//! works in when several processes share a pool. Operations are counted in the
//! process's slot; waits ask [`Health`] whether some attached process died; an
//! operation a death interrupted unwinds, and outside any operation its thread either
//! becomes the repairer (once every live process's operations have drained) or waits
//! for the repair another process does (docs/CONSISTENCY.md, "A process dies").

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::attach::ForkLocks;
use super::procs::{Procs, NO_SLOT, REPAIRING};
use super::{Attached, Health, Interrupted, Runtime, Watch};

/// How long the repairer waits for other processes' operations before it looks again
/// at which of them are alive (a process stopped mid-operation delays the repair).
const DRAIN_SLICE: Duration = Duration::from_millis(100);

pub struct Attachment {
    procs: Procs,
    /// This process's slot (changes once if the process forks to become a daemon).
    slot: Arc<AtomicU32>,
    health: Health,
    /// Taken by detach.
    attached: Mutex<Option<Attached>>,
    /// Set while [`Self::hold_for_fork`] holds `attached` across a fork.
    held_for_fork: AtomicBool,
}

impl Attachment {
    pub fn new(attached: Attached) -> Attachment {
        let a = Attachment {
            procs: attached.procs.clone(),
            slot: Arc::new(AtomicU32::new(attached.slot)),
            health: Health::new(attached.procs.clone()),
            attached: Mutex::new(Some(attached)),
            held_for_fork: AtomicBool::new(false),
        };
        // A process that died while nobody waited on it (its open files, a name it
        // was creating) is found here at the latest: this process's first operation
        // then does the repair.
        let _ = a.health.check();
        a
    }

    /// Whether the runtime state holds only what live processes did: no process died
    /// since the last repair. If one did, the last to leave must not mark the pool
    /// clean (its saved bitmaps would keep what the dead process held), and the next
    /// open recovers instead.
    pub fn intact(&self) -> bool {
        self.procs.state() != REPAIRING && self.procs.dead_slots().is_empty()
    }

    pub fn procs(&self) -> &Procs {
        &self.procs
    }

    pub fn slot(&self) -> u32 {
        self.slot.load(Ordering::Relaxed)
    }

    /// The word holding this process's slot, for what tags records with it.
    pub fn slot_word(&self) -> Arc<AtomicU32> {
        self.slot.clone()
    }

    /// Called in the child of a fork that keeps the attachment (and whose parent
    /// exits without detaching): the child takes a slot of its own, with the parent's
    /// open table.
    pub fn after_fork(&self) -> crate::Result<()> {
        let mut a = self.attached.lock();
        if self.slot() == NO_SLOT {
            // The parent never took a slot (a fork child that made no operation):
            // there is no open table to carry over.
            return Ok(());
        }
        let new = self
            .procs
            .adopt(self.slot())
            .map_err(|e| match a.as_ref() {
                Some(at) => at.register_error(e),
                None => e,
            })?;
        self.slot.store(new, Ordering::Relaxed);
        if let Some(a) = a.as_mut() {
            a.slot = new;
        }
        Ok(())
    }

    /// Before a fork (the forking thread): take the attachment's lock, so that the
    /// child never inherits it held by a thread it does not have (a lock operation
    /// opening a stand-in at that instant). Released by [`Self::let_go_after_fork`]
    /// in the parent and in the child. The lock is held only for short work (no
    /// wait inside), so this never waits on a thread blocked in a lock wait.
    pub fn hold_for_fork(&self) {
        std::mem::forget(self.attached.lock());
        self.held_for_fork.store(true, Ordering::Release);
    }

    /// After a fork, in the parent and in the child: let go of the lock
    /// [`Self::hold_for_fork`] took. Nothing when it did not run.
    pub fn let_go_after_fork(&self) {
        if self.held_for_fork.swap(false, Ordering::AcqRel) {
            // SAFETY: `hold_for_fork` took the lock in the thread that forked (the
            // child's only thread) and forgot its guard, then set the flag this call
            // cleared: the lock is held, and nothing else releases it.
            unsafe {
                self.attached
                    .force_unlock(parking_lot::lock_api::GuardNoSend::new())
            };
        }
    }

    /// Called in the child of a fork whose parent stays attached, with the child's
    /// own new open of the pool file: the child joins as a process of its own (own
    /// locks, own slot, empty open table) and the parent's slot is returned.
    pub fn fork_child(&self, pool_file: &std::fs::File) -> crate::Result<u32> {
        let mut a = self.attached.lock();
        let a = a.as_mut().ok_or(crate::error::errno::EBADF)?;
        let parent = a.rejoin_after_fork(pool_file)?;
        self.slot.store(a.slot, Ordering::Relaxed);
        Ok(parent)
    }

    /// Before a fork (the forking thread): the child's own locks, on `pool_file`, a
    /// new open file description of the pool file (see
    /// [`super::Attached::locks_for_fork_child`]).
    pub fn locks_for_fork_child(&self, pool_file: &std::fs::File) -> crate::Result<ForkLocks> {
        let a = self.attached.lock();
        let a = a.as_ref().ok_or(crate::error::errno::EBADF)?;
        a.locks_for_fork_child(pool_file)
    }

    /// In the child of a fork whose parent made it `locks` before the fork: they
    /// become its own, and it takes a slot now (`register`) or at its first
    /// operation. The parent's slot is returned.
    pub fn join_after_fork(&self, locks: ForkLocks, register: bool) -> crate::Result<u32> {
        let mut a = self.attached.lock();
        let a = a.as_mut().ok_or(crate::error::errno::EBADF)?;
        let parent = a.join_after_fork(locks, register)?;
        self.slot.store(a.slot, Ordering::Release);
        Ok(parent)
    }

    /// The descriptor this process's attachment locks are on.
    pub fn locks_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.attached.lock().as_ref()?.locks_fd())
    }

    /// This process's slot, taken now if it has none yet (a fork child's first
    /// operation). A process that cannot get one (every slot taken) must not touch
    /// the runtime state: it ends, saying why.
    fn own_slot(&self) -> u32 {
        let s = self.slot.load(Ordering::Acquire);
        if s != NO_SLOT {
            return s;
        }
        let mut a = self.attached.lock();
        let s = self.slot.load(Ordering::Acquire);
        if s != NO_SLOT {
            return s;
        }
        let taken = match a.as_mut() {
            Some(a) => a.register_now(),
            None => Err(crate::error::errno::EBADF),
        };
        match taken {
            Ok(s) => {
                self.slot.store(s, Ordering::Release);
                s
            }
            Err(e) => {
                eprintln!("lynxfs: the child of a fork cannot use the pool: {e}");
                std::process::abort()
            }
        }
    }

    /// Before an exec that passes nothing of the pool on (`Fs::leave_for_exec`):
    /// this process gives its slot up, its open table empty and kept for the slot's
    /// next process. The pool file's locks stay until the exec closes the pool file
    /// (so no detach can take this process for the last meanwhile).
    pub fn leave_for_exec(&self) {
        let _a = self.attached.lock();
        self.procs.unregister(self.slot());
    }

    /// After an exec that [`Self::leave_for_exec`] prepared failed: a slot again.
    pub fn rejoin_after_exec(&self) -> crate::Result<()> {
        let mut a = self.attached.lock();
        let a = a.as_mut().ok_or(crate::error::errno::EBADF)?;
        let slot = a.register_again()?;
        self.slot.store(slot, Ordering::Relaxed);
        Ok(())
    }

    /// The region, for laying out the parts of the runtime state.
    pub fn region(&self) -> std::sync::Arc<super::Region> {
        let a = self.attached.lock();
        a.as_ref().expect("attached").region.clone()
    }

    /// A new open file description of the stand-in the pool's locks on `ino` are
    /// kept on ([`super::stand_ins`]).
    pub fn lock_stand_in(&self, ino: u64) -> std::io::Result<std::os::fd::OwnedFd> {
        let a = self.attached.lock();
        match a.as_ref().and_then(|a| a.stand_ins()) {
            Some(s) => s.open(ino),
            None => Err(std::io::Error::from_raw_os_error(libc::ENOLCK)),
        }
    }

    /// Where `ino`'s lock stand-in is (see [`super::stand_ins::StandIns::path_of`]).
    pub fn lock_stand_in_path(&self, ino: u64) -> Option<std::path::PathBuf> {
        let a = self.attached.lock();
        Some(a.as_ref()?.stand_ins()?.path_of(ino))
    }

    /// The pool's session directory (this user's alone, removed by the last detacher):
    /// where attached processes keep files of the pool's that nobody else may reach.
    pub fn session_dir(&self) -> Option<std::path::PathBuf> {
        let a = self.attached.lock();
        Some(a.as_ref()?.session().to_path_buf())
    }

    /// Whether this process built the runtime state (no other was attached).
    pub fn first(&self) -> bool {
        self.attached.lock().as_ref().is_some_and(|a| a.first)
    }

    /// The first attacher has built the state: let others attach.
    pub fn publish(&self) -> crate::Result<()> {
        match self.attached.lock().as_ref() {
            Some(a) => a.publish(),
            None => Ok(()),
        }
    }

    /// Leave the pool: `save` runs (before the runtime file goes) if this process is
    /// the last attached, so the pool can be marked clean. Idempotent.
    pub fn detach(&self, save: impl FnOnce() -> crate::Result<()>) -> crate::Result<()> {
        let Some(a) = self.attached.lock().take() else {
            return Ok(());
        };
        // A process that died since the last repair may have left work uncommitted
        // (a claimed log slot, allocated inodes and blocks) that only the recovery
        // walk undoes: then the pool stays unclean and the next attach recovers it.
        if a.detach_begin()? && self.intact() {
            save()?;
        }
        a.detach_end()
    }

    /// Wait until no live process (this one included) has an operation in flight.
    fn drain(&self) {
        loop {
            if self
                .procs
                .wait_quiescent(self.slot(), Instant::now() + DRAIN_SLICE)
                .is_ok()
                && self.procs.ops_in_flight(self.slot()) == 0
            {
                return;
            }
        }
    }

    /// Sum of every live process's open counts (the repairer's view).
    pub fn live_opens(&self) -> HashMap<u64, u64> {
        let mut all = HashMap::new();
        for s in 0..super::procs::MAX_PROCS {
            if self.procs.alive(s) {
                for (ino, n) in self.procs.opens_of(s) {
                    *all.entry(ino).or_insert(0) += n;
                }
            }
        }
        all
    }
}

impl Watch for Attachment {
    fn check(&self) -> Result<(), Interrupted> {
        self.health.check()
    }
}

impl Runtime for Attachment {
    fn enter(&self) -> Result<(), Interrupted> {
        std::mem::forget(self.procs.enter_op(self.own_slot())?);
        Ok(())
    }

    fn leave(&self) {
        self.procs.leave_op(self.slot());
    }

    fn settle(&self) -> bool {
        loop {
            if self.procs.state() != REPAIRING {
                return false;
            }
            if self.procs.claim_repair(self.own_slot()) {
                self.drain();
                for dead in self.procs.dead_slots() {
                    self.procs.reap(dead);
                }
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn repaired(&self) {
        self.procs.end_repair(self.procs.generation() + 1);
    }

    fn generation(&self) -> u64 {
        self.procs.generation()
    }

    fn opened(&self, ino: u64) -> crate::Result<()> {
        self.procs.open_inc(self.slot(), ino)
    }

    fn closed(&self, ino: u64) {
        // A count this process never took is a bug here, not a caller's error.
        let r = self.procs.open_dec(self.slot(), ino);
        debug_assert!(r.is_ok(), "closing inode {ino} this process has not open");
    }

    fn live_opens(&self) -> Vec<(u64, u64)> {
        Attachment::live_opens(self).into_iter().collect()
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        if self.attached.get_mut().is_some() {
            let _ = self.detach(|| Ok(()));
        }
    }
}

/// Every attachment of this process, so that a fork can move them all (see
/// [`after_fork`]).
static ALL: Mutex<Vec<Weak<Attachment>>> = Mutex::new(Vec::new());

/// Make `a` known to [`after_fork`].
pub fn track(a: &Arc<Attachment>) {
    let mut all = ALL.lock();
    all.retain(|w| w.strong_count() > 0);
    all.push(Arc::downgrade(a));
}

/// In the child of a fork whose parent exits without detaching (a daemon leaving its
/// terminal): register the child in the process table of every pool attached, in
/// place of its parent, so that the parent's exit is not taken for a death.
pub fn after_fork() -> crate::Result<()> {
    for a in ALL.lock().iter().filter_map(Weak::upgrade) {
        a.after_fork()?;
    }
    Ok(())
}
