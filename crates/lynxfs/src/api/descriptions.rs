//! Open file descriptions shared by processes (`runtime::descriptions`): binding an
//! open file to a shared slot, taking one over after exec, claims, status flags, and
//! making a fork child and an exec'd image attached processes of their own
//! (docs/CONSISTENCY.md, "open / close by several processes").

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;

use super::open::OpenFile;
use super::{Fd, Fs};
use crate::error::Result;
use crate::format::inode;
use crate::pmem::Backend;
use crate::runtime::descriptions::{Described, SETTABLE};
use crate::runtime::DescKey;

impl<B: Backend> Fs<B> {
    /// Bind `fd`'s open file (and every handle dup'd from it) to a new shared open file
    /// description: its position and status flags move there, and the description
    /// starts with one claim, this process's. Idempotent: a bound file's key again.
    /// ENFILE when the table of descriptions is full.
    pub fn share(&self, fd: Fd) -> Result<DescKey> {
        self.op(|| {
            let f = self.file(fd)?;
            let pos = f.pos.lock();
            let key = f.desc.load(Ordering::Acquire);
            if key != 0 {
                return Ok(key);
            }
            let d = Described {
                ino: f.ino,
                flags: f.flags.load(Ordering::Acquire),
                privileged: f.privileged,
                in_group: f.in_group,
            };
            let key = self.ns.descriptions.create(d, *pos)?;
            f.desc.store(key, Ordering::Release);
            Ok(key)
        })
    }

    /// In an image that inherited the description `key` across exec: open its file
    /// in this process (no permission check: it was checked at the original open) as
    /// a new handle bound to it. Takes over the claim made for this image (adds
    /// none). EBADF for a key naming no live description.
    pub fn adopt(&self, key: DescKey) -> Result<Fd> {
        self.op(|| {
            let d = self.ns.descriptions.get(key, self.ns.watch())?;
            self.open_ref(d.ino)?;
            self.insert_file(d.ino, || OpenFile {
                ino: d.ino,
                flags: AtomicI32::new(d.flags),
                pos: Mutex::new(0),
                desc: AtomicU64::new(key),
                handles: AtomicU32::new(1),
                map: Default::default(),
                privileged: d.privileged,
                in_group: d.in_group,
                atime: Default::default(),
            })
        })
    }

    /// One more claim on `key` (a process image about to hold it: see the protocol).
    pub fn claim(&self, key: DescKey) -> Result<()> {
        self.op(|| self.ns.descriptions.claim(key, self.ns.watch()))
    }

    /// One claim on `key` less; the last frees the description.
    pub fn release(&self, key: DescKey) -> Result<()> {
        self.op(|| self.ns.descriptions.release(key, self.ns.watch()).map(drop))
    }

    /// The description `fd` is bound to, if shared.
    pub fn desc_of(&self, fd: Fd) -> Result<Option<DescKey>> {
        let key = self.file(fd)?.desc.load(Ordering::Acquire);
        Ok((key != 0).then_some(key))
    }

    /// F_GETFL: the open flags of `fd`'s description (access mode and status flags;
    /// as on Linux, not the flags that only act at open).
    pub fn status_flags(&self, fd: Fd) -> Result<i32> {
        let at_open_only = libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_TRUNC;
        Ok(self.flags_of(&*self.file(fd)?)? & !at_open_only)
    }

    /// F_SETFL: only O_APPEND, O_NONBLOCK, O_NOATIME, O_DIRECT and O_ASYNC change,
    /// for every handle of the description (in every process, once shared).
    pub fn set_status_flags(&self, fd: Fd, flags: i32) -> Result<()> {
        let f = self.file(fd)?;
        let _pos = f.pos.lock();
        let key = f.desc.load(Ordering::Acquire);
        if key != 0 {
            return self.ns.descriptions.set_flags(key, flags);
        }
        let old = f.flags.load(Ordering::Acquire);
        f.flags
            .store((old & !SETTABLE) | (flags & SETTABLE), Ordering::Release);
        Ok(())
    }

    pub(super) fn flags_of(&self, f: &OpenFile) -> Result<i32> {
        match f.desc.load(Ordering::Acquire) {
            0 => Ok(f.flags.load(Ordering::Acquire)),
            key => self.ns.descriptions.flags(key),
        }
    }

    /// `step` at `f`'s position, which it moves: the shared description's (one step
    /// for every process) once bound, else the local one.
    pub(super) fn at_position<T>(
        &self,
        f: &OpenFile,
        step: impl FnOnce(u64) -> Result<(T, u64)>,
    ) -> Result<T> {
        let mut pos = f.pos.lock();
        let key = f.desc.load(Ordering::Acquire);
        if key != 0 {
            // Bound: the local position is no longer used.
            drop(pos);
            return self.ns.descriptions.at_position(key, self.ns.watch(), step);
        }
        let (t, new) = step(*pos)?;
        *pos = new;
        Ok(t)
    }

    /// Called before a fork by a process that forks while attached (the preload's
    /// fork handler): the engine's process-local state that a child could otherwise
    /// inherit held by another thread is taken by this one. Followed by
    /// [`Self::after_fork_parent`] in the parent and [`Self::after_fork_child`] in the
    /// child.
    ///
    /// The child's claims on the shared descriptions its handles are bound to are
    /// taken here, in the parent, before the fork: a thread of the parent that
    /// closes such a handle just after the fork would otherwise release the last
    /// claim and free the description before the child claims it. A fork that
    /// fails gives them back ([`Self::fork_failed`]).
    pub fn before_fork(&self) {
        self.before_fork_holding(&[]);
    }

    /// [`Self::before_fork`] for a front end that holds inodes itself (`also_held`:
    /// a session's working directory, kept from changing until the fork is done).
    ///
    /// The child's open references (its inherited open files, holds and
    /// `also_held`) are counted here too, in the parent, for the same reason as the
    /// claims: a parent that closes the last of a file unlinked while open just
    /// after the fork (`exec 3<f; rm f; (cat <&3) & exec 3<&-`) would otherwise free
    /// it, and let another file reuse its inode and blocks, before the child counted
    /// its own. The caller keeps every other thread out of the pool until the fork
    /// is done (the preload's fork gate), so these are exactly what the child
    /// inherits; the child records them in its slot's open table.
    pub fn before_fork_holding(&self, also_held: &[u64]) {
        let claimed = self
            .bound_descriptions()
            .into_iter()
            .filter(|&key| self.claim(key).is_ok())
            .collect();
        *self.fork_claims.lock() = Some(claimed);
        let opens = self.count_for_child(also_held);
        *self.fork_opens.lock() = Some(opens);
        self.ns.areas.before_fork();
        self.ns.pool.hold_for_fork();
    }

    /// What a fork child inherits of this process's open references, per inode,
    /// each added to the shared open counts now. Nothing for a pool in memory (no
    /// other process can use it).
    fn count_for_child(&self, also_held: &[u64]) -> std::collections::BTreeMap<u64, u32> {
        let mut opens = std::collections::BTreeMap::<u64, u32>::new();
        if self.ns.pool.attachment().is_none() {
            return opens;
        }
        let inherited = self.files.open_inodes().into_iter();
        for ino in inherited
            .chain(self.held_inodes())
            .chain(also_held.iter().copied())
        {
            *opens.entry(ino).or_default() += 1;
        }
        for (&ino, &n) in &opens {
            // These inodes are open or held in this process, so their counts are
            // at least 1: adding can free nothing, and needs no lock of the inode.
            let c = self.ns.cachelets.get(ino);
            c.open_counter().fetch_add(n, Ordering::AcqRel);
        }
        opens
    }

    /// In the parent, after a fork that made no child: the claims and open
    /// references [`Self::before_fork_holding`] took for it are given back.
    pub fn fork_failed(&self) {
        self.ns.pool.drop_fork_spare();
        for key in self.fork_claims.lock().take().unwrap_or_default() {
            let _ = self.release(key);
        }
        for (ino, n) in self.fork_opens.lock().take().unwrap_or_default() {
            for _ in 0..n {
                self.give_back_count(ino);
            }
        }
    }

    /// The parent's half of [`Self::before_fork`]'s pairing: the open references
    /// taken for the child are the child's now.
    pub fn after_fork_parent(&self) {
        self.fork_opens.lock().take();
        self.ns.pool.drop_fork_spare();
        self.ns.pool.let_go_after_fork();
        self.ns.areas.after_fork();
    }

    /// In the child of `fork()` (single-threaded: from a `pthread_atfork` child
    /// handler) of a process that stays attached: the child becomes an attached
    /// process of its own (its own process slot and pool-file locks), holding an open
    /// reference for each it inherited in memory: its open files, its holds, and the
    /// front end's own (`also_held`: a session's working directory), and claims once
    /// more every shared description its handles are bound to. Nothing to do for a
    /// pool in memory.
    ///
    /// Why from the child's memory and not from the parent's open table: the
    /// parent's other threads go on opening and closing after the fork, so its table
    /// no longer matches what the child inherited (a file closed in the parent just
    /// after the fork is still open in the child); and references a thread of the
    /// parent held for one call are not the child's, which has no such thread.
    ///
    /// A child that inherited no reference takes no slot here: it takes one at its
    /// first operation, so a child that only execs another program (or exits)
    /// without touching the pool never enters the process table. Its share of the
    /// attachment byte (on the open of the pool file its parent made for it before
    /// the fork, see `Pool::hold_for_fork`) is what keeps the runtime state for it
    /// meanwhile; it has nothing a death would have to repair.
    pub fn after_fork_child_holding(&self, also_held: &[u64]) -> Result<()> {
        self.ns.pool.let_go_after_fork();
        self.ns.areas.after_fork();
        let Some(a) = self.ns.pool.attachment() else {
            return Ok(());
        };
        // Counted by the parent before the fork, or (a caller that did not call
        // `before_fork`) now.
        let opens = match self.fork_opens.lock().take() {
            Some(opens) => opens,
            None => self.count_for_child(also_held),
        };
        self.ns.pool.rejoin_after_fork(!opens.is_empty())?;
        let me = a.slot();
        let procs = a.procs();
        // No wait in here: the operation is never interrupted, so never repeated.
        // With nothing to count, no operation either (it would take the slot).
        if !opens.is_empty() {
            self.op(|| {
                for (&ino, &n) in &opens {
                    for _ in 0..n {
                        procs.open_inc(me, ino)?;
                    }
                }
                Ok(())
            })?;
        }
        // The claims the parent took for this child before the fork are its own;
        // without them (a caller that did not call `before_fork`) it claims now.
        let claimed = self.fork_claims.lock().take();
        if claimed.is_none() {
            for key in self.bound_descriptions() {
                self.claim(key)?;
            }
        }
        Ok(())
    }

    /// The descriptors the pool keeps its own open of the pool file and its locks
    /// on (a fork child's change at [`Self::after_fork_child_holding`]: a front end
    /// that keeps them from the program learns the new ones here).
    pub fn pool_file_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.ns.pool.pool_file_fds()
    }

    /// [`Self::after_fork_child_holding`] for a front end that holds no inode itself.
    pub fn after_fork_child(&self) -> Result<()> {
        self.after_fork_child_holding(&[])
    }

    /// Every shared description some handle of this process is bound to, once each.
    fn bound_descriptions(&self) -> BTreeSet<DescKey> {
        let files = self.files.open_fds().into_iter();
        files
            .filter_map(|fd| self.file(fd).ok())
            .map(|f| f.desc.load(Ordering::Acquire))
            .filter(|&k| k != 0)
            .collect()
    }

    /// Before an exec that hands the next program nothing of the pool (no shared
    /// description, no lock: the caller knows): if this image holds no inode but
    /// those in `let_go` (no open file, no hold, nothing in `also_held`, the front
    /// end's own holds) and no other thread is inside an operation, it gives up its
    /// references to `let_go` (a working directory the next program finds again by
    /// its path) and leaves the process table now, its open table kept for the slot's
    /// next process. The next program then need not attach at all to take over this
    /// image's place ([`Self::forget_previous_image`]), which is most of a process
    /// start from an attached parent (docs/DESIGN-NOTES.md, "Process start in every
    /// placement"). False, and nothing done, otherwise (also when an inode of
    /// `let_go` has lost its last name: the reference is all that keeps it): the next
    /// program takes over as before. Nothing of the pool may be used after a true
    /// answer until [`Self::rejoin_after_failed_exec`] (the exec failed) or the exec.
    pub fn leave_for_exec(&self, also_held: &[u64], let_go: &[u64]) -> bool {
        let Some(a) = self.ns.pool.attachment() else {
            return false;
        };
        let holds_nothing = also_held.is_empty()
            && self.files.open_inodes().is_empty()
            && self.held_inodes().is_empty();
        let named = let_go
            .iter()
            .all(|&ino| self.ns.load(ino, inode::NLINK) != 0);
        if !holds_nothing || !named || a.procs().ops_in_flight(a.slot()) != 0 {
            return false;
        }
        for &ino in let_go {
            self.drop_open_ref(ino);
        }
        a.leave_for_exec();
        true
    }

    /// After [`Self::leave_for_exec`] answered true and the exec failed: this image
    /// takes a slot again and its references to `let_go` back. An error if it gets
    /// no slot, or an inode of `let_go` was freed meanwhile (its last name went and
    /// nobody else had it): the image is out of the process table then and must not
    /// use the pool.
    pub fn rejoin_after_failed_exec(&self, let_go: &[u64]) -> Result<()> {
        let Some(a) = self.ns.pool.attachment() else {
            return Ok(());
        };
        a.rejoin_after_exec()?;
        for (i, &ino) in let_go.iter().enumerate() {
            if let Err(e) = self.open_ref(ino) {
                // Out again, holding nothing: the caller ends without leaving a slot
                // for others to take for a death.
                for &taken in &let_go[..i] {
                    self.drop_open_ref(taken);
                }
                a.leave_for_exec();
                return Err(e);
            }
        }
        Ok(())
    }

    /// In a freshly exec'd image, after it adopted the descriptions it inherited:
    /// close the engine opens of the image before exec (same pid and start time,
    /// which never detached) as a close would (a file unlinked while open is freed
    /// if nobody else has it) and free its process slot. Nothing if there is none.
    pub fn forget_previous_image(&self) -> Result<()> {
        let Some(a) = self.ns.pool.attachment() else {
            return Ok(());
        };
        let procs = a.procs();
        for old in procs.same_process(a.slot())? {
            for (ino, n) in procs.opens_of(old) {
                for _ in 0..n {
                    self.op(|| {
                        // The table first, as a close does: a repair that interrupts
                        // what follows recounts the opens from the tables.
                        procs.open_dec(old, ino)?;
                        self.uncount_open(ino);
                        Ok(())
                    })?;
                }
            }
            procs.unregister(old);
        }
        Ok(())
    }

    /// How many claims the description `key` has (0: none live); for tests and
    /// diagnostics.
    pub fn claims_of(&self, key: DescKey) -> u32 {
        self.ns.descriptions.claims_of(key)
    }
}

#[cfg(test)]
mod tests {
    use crate::pmem::PmemBackend;
    use crate::{Cred, Fs, MkfsOptions};

    fn fs() -> Fs<PmemBackend> {
        let mut o = MkfsOptions::new(16 << 20);
        o.lanes = 2;
        Fs::in_memory(&o, PmemBackend::default()).unwrap()
    }

    #[test]
    fn a_shared_position_is_one_for_dup_and_adopted_handles() {
        let fs = fs();
        let s = fs.session(Cred::root());
        let fd = s.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        fs.write(fd, b"hello").unwrap();
        let dup = fs.dup(fd).unwrap();
        let key = fs.share(fd).unwrap();
        assert_eq!(fs.share(dup).unwrap(), key, "idempotent, dup'd handles too");
        assert_eq!(fs.claims_of(key), 1);
        let other = fs.adopt(key).unwrap();
        assert_eq!(fs.seek(other, 0, libc::SEEK_CUR).unwrap(), 5);
        fs.write(other, b" world").unwrap();
        assert_eq!(fs.seek(fd, 0, libc::SEEK_CUR).unwrap(), 11);
        fs.seek(dup, 0, libc::SEEK_SET).unwrap();
        let mut buf = [0u8; 5];
        assert_eq!(fs.read(fd, &mut buf).unwrap(), 5);
        assert_eq!(fs.seek(other, 0, libc::SEEK_CUR).unwrap(), 5);
        // Flags are the description's.
        fs.set_status_flags(other, libc::O_APPEND | libc::O_WRONLY)
            .unwrap();
        assert_eq!(
            fs.status_flags(fd).unwrap(),
            libc::O_RDWR | libc::O_APPEND,
            "access mode kept, O_APPEND shared"
        );
        fs.seek(fd, 0, libc::SEEK_SET).unwrap();
        fs.write(fd, b"!").unwrap();
        assert_eq!(fs.seek(fd, 0, libc::SEEK_CUR).unwrap(), 12, "appended");
        // `other` took over a claim it did not make: the claim count is 1 for both
        // local open files, and closing them all releases it twice.
        fs.claim(key).unwrap();
        fs.close_fd(fd).unwrap();
        assert_eq!(fs.claims_of(key), 2, "dup still open");
        fs.close_fd(dup).unwrap();
        assert_eq!(fs.claims_of(key), 1);
        fs.close_fd(other).unwrap();
        assert_eq!(fs.claims_of(key), 0);
        assert_eq!(fs.adopt(key).unwrap_err().errno(), libc::EBADF);
    }

    #[test]
    fn unshared_flags_change_only_settable_bits() {
        let fs = fs();
        let s = fs.session(Cred::root());
        let fd = s.open("/g", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        fs.set_status_flags(fd, libc::O_APPEND | libc::O_NONBLOCK | libc::O_RDWR)
            .unwrap();
        assert_eq!(
            fs.status_flags(fd).unwrap(),
            libc::O_WRONLY | libc::O_APPEND | libc::O_NONBLOCK
        );
        fs.write(fd, b"ab").unwrap();
        fs.pwrite(fd, b"c", 0).unwrap();
        assert_eq!(fs.fstat(fd).unwrap().size, 3, "O_APPEND pwrite appends");
        assert_eq!(fs.desc_of(fd).unwrap(), None);
    }
}
