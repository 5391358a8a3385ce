//! The namespace: the global metadata index, cachelets, directories as logs, and the
//! operations on names (lookup, create, unlink, rename, link, readdir, attributes).
//! Every operation is synchronous and atomic, with one commit point each
//! (docs/CONSISTENCY.md).

pub mod acl;
pub mod area_epoch;
pub mod areas;
pub mod atime;
mod attr;
pub mod cachelet;
mod compact;
pub mod create;
pub mod dir;
mod evict;
pub mod flags;
pub mod free_slots;
pub mod gate;
pub mod index;
pub mod killpriv;
pub mod mechanisms;
pub mod perm;
mod protected;
mod readdir;
mod remove;
mod rename;
pub mod shared;
mod usage;
mod xattr;
pub use evict::Entered;
pub use xattr::CAPABILITY;

use crate::runtime::lock::MutexGuard;
use crate::runtime::{Runtime, Watch};
use std::sync::Arc;

use crate::error::{errno, Error, Result};
use crate::format::{dentry, inode, ROOT_INO};
use crate::pmem::Backend;
use crate::pool::Pool;

pub use attr::{SetAttr, Stat, StatFs, TimeSet};
pub use cachelet::{Cachelet, Cachelets};
pub use create::NewNode;
pub use dir::Dir;
pub use index::{Claim, Entry, Index, State};
pub use perm::Cred;
pub use readdir::{DirBatch, DirEntry, DirRef};
pub use rename::RenameFlags;
pub use usage::Usage;

pub struct Namespace<B: Backend> {
    pub pool: Pool<B>,
    pub index: Index,
    /// Every inode's record, in the shared runtime region.
    pub cachelets: Cachelets,
    /// Freed directory-log slots, in the shared runtime region.
    pub(crate) free_slots: free_slots::FreeSlots,
    /// Namespace-wide locks, in the shared runtime region.
    locks: shared::Locks,
    /// Directories' gate holds and entry counts per lane, in the shared runtime region.
    pub(crate) gates: gate::Gates,
    /// This namespace's number among those this process opened (whose slots a
    /// thread holds, see `dir::SlotOwner`).
    instance: u64,
    /// Where this process posts its changes for processes that cache what they read.
    pub notices: crate::runtime::notices::Notices,
    /// The open file descriptions shared by processes, in the shared runtime region.
    pub descriptions: crate::runtime::Descriptions,
    /// The runtime state's life: counts operations, and ends waits when a process
    /// attached to the pool dies (see `runtime::lock`).
    pub(crate) rt: Arc<dyn Runtime>,
    /// This process's clock of loaded directories, for eviction.
    clock: evict::Clock,
    /// Mechanisms that the ablation benchmark can turn off.
    pub mechanisms: mechanisms::Mechanisms,
    /// This process's indexes of large attribute sets.
    pub(crate) xattr_indexes: crate::data::xattr::Indexes,
    /// This process's full-path areas, validated against the shared areas' epoch.
    pub areas: areas::Areas,
}

/// A number no other namespace of this process has.
fn next_instance() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

pub fn is_dir(mode: u32) -> bool {
    mode & libc::S_IFMT == libc::S_IFDIR
}

/// The directory-entry type (DT_*) for a mode: the file-type bits shifted down.
pub fn dtype(mode: u32) -> u8 {
    ((mode & libc::S_IFMT) >> 12) as u8
}

/// A name must be 1..=255 bytes, without '/' or NUL.
pub fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > dentry::NAME_MAX {
        return Err(errno::ENAMETOOLONG);
    }
    // One pass over a name (a few bytes, most often), not two `memchr` calls.
    if name.is_empty() || name.iter().any(|&c| c == b'/' || c == 0) {
        return Err(errno::EINVAL);
    }
    Ok(())
}

impl<B: Backend> Namespace<B> {
    /// The namespace of `pool`, its runtime state in fresh memory of this process's own.
    pub fn new(pool: Pool<B>) -> Self {
        match pool.attachment().cloned() {
            Some(a) => {
                let parts = shared::Parts::at(&a.region(), &pool.runtime_layout.namespace);
                let notices = crate::runtime::notices::Notices::at_slot(
                    &a.region(),
                    pool.runtime_layout.notices.clone(),
                    a.slot_word(),
                );
                let descriptions = crate::runtime::Descriptions::new(crate::runtime::Span::new(
                    a.region(),
                    pool.runtime_layout.descriptions.clone(),
                ));
                let mut ns = Self::with_parts(pool, parts, descriptions, a);
                ns.notices = notices;
                ns
            }
            None => {
                let parts =
                    shared::Parts::private(&pool.layout).expect("memory for the runtime state");
                let descriptions = crate::runtime::Descriptions::new(
                    crate::runtime::Span::anonymous(crate::runtime::Descriptions::bytes_needed())
                        .expect("memory for the open file descriptions"),
                );
                Self::with_parts(pool, parts, descriptions, Arc::new(crate::runtime::Private))
            }
        }
    }

    pub(crate) fn with_parts(
        pool: Pool<B>,
        parts: shared::Parts,
        descriptions: crate::runtime::Descriptions,
        rt: Arc<dyn Runtime>,
    ) -> Self {
        let l = pool.layout;
        dir::count_forks();
        Namespace {
            index: Index::new(parts.index, &l).expect("a pool layout open accepted"),
            cachelets: Cachelets::new(parts.cachelets, &l),
            free_slots: free_slots::FreeSlots::new(parts.free_slots, &l),
            locks: shared::Locks::new(parts.locks),
            gates: gate::Gates::new(parts.gates, &l),
            areas: areas::Areas::new(area_epoch::AreaEpoch::new(parts.area_epoch)),
            instance: next_instance(),
            notices: crate::runtime::notices::Notices::off(),
            descriptions,
            rt,
            pool,
            clock: evict::Clock::new(),
            mechanisms: mechanisms::Mechanisms::default(),
            xattr_indexes: Default::default(),
        }
    }

    /// What waits ask whether to give up (a repair of the runtime state has begun).
    pub(crate) fn watch(&self) -> &dyn Watch {
        &*self.rt
    }

    /// Run `f` as one operation: counted while it runs, and retried after the repair if
    /// a process's death interrupted it (`ERESTART`, which no caller ever sees). Calls
    /// nested in an operation are part of it: only the outermost one retries.
    pub fn op<T>(&self, mut f: impl FnMut() -> Result<T>) -> Result<T> {
        if op_depth::inside() {
            return f();
        }
        // Now and then look for a process that died while nobody waited on it (its
        // open files, a name it was creating), so its state is repaired before long.
        if op_depth::periodic() && self.rt.check().is_err() {
            self.settle();
        }
        loop {
            if self.rt.enter().is_err() {
                self.settle();
                continue;
            }
            let r = {
                let _depth = op_depth::Enter::new();
                f()
            };
            self.rt.leave();
            match r {
                Err(crate::Error::Errno(libc::ERESTART)) => self.settle(),
                r => return r,
            }
        }
    }

    /// After an operation was interrupted (outside any operation): do the repair if
    /// this thread is chosen, else wait for it.
    fn settle(&self) {
        if self.rt.settle() {
            self.rebuild_runtime();
            self.rt.repaired();
        }
    }

    /// Rebuild every part of the runtime state from the pool (every live process's
    /// operations have drained): recovery as after a crash, keeping what live
    /// processes have open, then each open count as their open tables say.
    fn rebuild_runtime(&self) {
        let keep = self.rt.live_opens();
        self.index.clear();
        self.cachelets.clear();
        self.free_slots.clear();
        self.locks.clear();
        self.gates.clear();
        self.descriptions.unlock_all();
        self.areas.repaired();
        let inos: Vec<u64> = keep.iter().map(|&(ino, _)| ino).collect();
        let l = self.pool.layout;
        crate::data::txn::repair_commit(&self.pool);
        let mut used = match crate::log::recover_keeping(
            &self.pool.pm,
            &l,
            self.pool.cwon,
            &crate::Quiet,
            &inos,
        ) {
            Ok((used, _)) => used,
            // The pool itself is damaged: nothing can go on safely in any process.
            Err(what) => {
                eprintln!(
                    "lynxfs: {}: corrupt pool found while repairing the runtime state: {what}",
                    self.pool.path().display()
                );
                std::process::abort();
            }
        };
        if let Some(t) = self.pool.txn() {
            t.undo().mark(&mut used.blocks);
        }
        self.pool.rebuild_allocators(&used);
        for (ino, n) in keep {
            if !l.ino_valid(ino) {
                continue;
            }
            let c = self.cachelets.get(ino);
            c.open_counter().store(
                n.min(u32::MAX as u64) as u32,
                std::sync::atomic::Ordering::Release,
            );
            if self.load(ino, inode::NLINK) == 0 {
                c.set_flags(cachelet::ORPHAN);
            }
        }
    }

    /// Who the slots a thread claims in a directory now belong to.
    pub(crate) fn slot_owner(&self) -> dir::SlotOwner {
        dir::SlotOwner::new(self.instance, self.rt.generation())
    }

    pub(crate) fn lane(&self) -> u32 {
        crate::alloc::lane::current(self.pool.layout.lanes(), self.pool.layout.nodes())
    }

    pub(crate) fn iaddr(&self, ino: u64) -> u64 {
        self.pool.layout.inode_addr(ino)
    }

    pub(crate) fn load(&self, ino: u64, field: u64) -> u64 {
        self.pool.pm.load_u64(self.iaddr(ino) + field)
    }

    /// The inode lock of `ino` (read-modify-write of its words).
    pub(crate) fn ilock(&self, ino: u64) -> Result<MutexGuard<'_>> {
        Ok(self.cachelets.get(ino).inode_lock(self.watch())?)
    }

    /// `ino` names a live inode.
    #[inline]
    pub fn live(&self, ino: u64) -> Result<()> {
        self.live_at(ino).map(drop)
    }

    /// The address of live inode `ino` (ENOENT if it is not live).
    #[inline]
    fn live_at(&self, ino: u64) -> Result<u64> {
        if !self.pool.layout.ino_valid(ino) {
            return Err(errno::ENOENT);
        }
        let at = self.iaddr(ino);
        if self.pool.pm.load_u64(at + inode::INO) == ino {
            Ok(at)
        } else {
            Err(errno::ENOENT)
        }
    }

    pub fn mode(&self, ino: u64) -> u32 {
        self.load(ino, inode::MODE) as u32
    }

    /// Mode, uid and gid of a live inode.
    pub fn owner_of(&self, ino: u64) -> perm::Owner {
        self.owner(ino)
    }

    pub(crate) fn owner(&self, ino: u64) -> perm::Owner {
        let (uid, gid) = inode::owner_split(self.load(ino, inode::OWNER));
        perm::Owner {
            mode: self.mode(ino),
            uid,
            gid,
        }
    }

    /// `ino` is a directory, live or removed but still held (open, a working
    /// directory, a FUSE node): what may be opened, entered and listed, as Linux lets
    /// a removed directory be (ENOTDIR for anything else, ENOENT when freed).
    pub fn directory(&self, ino: u64) -> Result<()> {
        self.live(ino)?;
        if is_dir(self.mode(ino)) {
            Ok(())
        } else {
            Err(errno::ENOTDIR)
        }
    }

    /// `ino` is a directory whose name went while it was held (Linux's S_DEAD).
    pub fn is_removed_dir(&self, ino: u64) -> bool {
        self.directory(ino).is_ok() && self.load(ino, inode::NLINK) == 0
    }

    /// The directory `ino`, read into the index if this is its first use.
    pub fn dir(&self, ino: u64) -> Result<Dir<'_>> {
        // Inside an operation (every path walk's step, every change's parent) the
        // nested `op` would only check that it is nested: go straight to the work.
        if op_depth::inside() {
            return self.dir_now(ino);
        }
        self.op(|| self.dir_now(ino))
    }

    /// [`Namespace::dir`]'s work, inside an operation.
    #[inline]
    fn dir_now(&self, ino: u64) -> Result<Dir<'_>> {
        self.live_dir(ino)?;
        let d = Dir::new(self.cachelets.get(ino), &self.gates);
        if d.ensure_loaded(&self.pool, &self.index, &self.free_slots, self.watch())? {
            self.loaded(ino);
        }
        Ok(d)
    }

    /// `ino` is a live directory not removed: its id, mode and link count read from
    /// one address (`live`, `mode` and `load` would each check and compute it).
    #[inline]
    fn live_dir(&self, ino: u64) -> Result<()> {
        let at = self.live_at(ino)?;
        let pm = &self.pool.pm;
        if !is_dir(pm.load_u64(at + inode::MODE) as u32) {
            return Err(errno::ENOTDIR);
        }
        // A removed directory still held (a working directory, a FUSE node) is dead,
        // as Linux's S_DEAD: nothing is looked up, listed or created in it.
        if pm.load_u64(at + inode::NLINK) == 0 {
            return Err(errno::ENOENT);
        }
        Ok(())
    }

    /// The entry `name` in directory `parent`, as the caller may see it.
    pub fn lookup(&self, parent: u64, name: &[u8], cred: &Cred) -> Result<u64> {
        self.op(|| {
            self.index.prefetch(parent, name);
            let mut d = match self.dir(parent) {
                Ok(d) => d,
                // Off the common path: a removed directory still answers "." and "..".
                Err(Error::Errno(libc::ENOENT)) if self.is_removed_dir(parent) => {
                    return self.lookup_in_removed(parent, name, cred)
                }
                Err(e) => return Err(e),
            };
            self.may(parent, cred, perm::X)?;
            match name {
                b"." => return Ok(parent),
                b".." => return Ok(self.parent_of(parent)),
                _ => {}
            }
            check_name(name)?;
            loop {
                let stamp = d.cachelet().load_stamp();
                match self.lookup_entry(parent, name) {
                    Some(e) if self.mechanisms.quick_path() => return Ok(e.ino),
                    // Ablation: without the quick path the inode number comes from the
                    // dentry in the pool, one more dependent read per component.
                    Some(e) => return Ok(self.pool.pm.load_u64(e.dentry + dentry::INO)),
                    // Loaded throughout the look: the name is missing.
                    None if stamp & cachelet::LOADED != 0 && d.cachelet().load_stamp() == stamp => {
                        return Err(errno::ENOENT)
                    }
                    // Evicted while we looked: load the entries again and look again.
                    None => d = self.dir(parent)?,
                }
            }
        })
    }

    /// A lookup in a removed directory still held: "." is itself, ".." the directory
    /// it was removed from, as on Linux; nothing else is there.
    fn lookup_in_removed(&self, dir: u64, name: &[u8], cred: &Cred) -> Result<u64> {
        self.may(dir, cred, perm::X)?;
        match name {
            b"." => Ok(dir),
            b".." => self.old_parent(dir),
            _ => check_name(name).and(Err(errno::ENOENT)),
        }
    }

    /// The directory removed directory `dir` was removed from, while it lives with
    /// the generation it had then (Linux keeps a dead directory's parent alive; here a
    /// parent freed since, whose number may name another directory now, is ENOENT).
    fn old_parent(&self, dir: u64) -> Result<u64> {
        let (parent, generation) = Dir::new(self.cachelets.get(dir), &self.gates)
            .old_parent()
            .ok_or(errno::ENOENT)?;
        self.directory(parent)?;
        if self.load(parent, inode::GENERATION) != generation {
            return Err(errno::ENOENT);
        }
        Ok(parent)
    }

    /// The generation of inode `ino` while (parent, name) names it: read while the
    /// name's index entry naming `ino` stayed in its slot, so it is the generation
    /// of the file the name led to then, not of a later file given the number after
    /// that one was freed (frees follow the entry's removal). `None` if the name
    /// names another inode or none (or its directory was evicted meanwhile).
    pub fn named_generation(&self, parent: u64, name: &[u8], ino: u64) -> Option<u64> {
        let pm = &self.pool.pm;
        loop {
            let (e, a) = self
                .index
                .sight(pm, parent, name, Entry::visible)
                .entry_word()?;
            if e.ino != ino {
                return None;
            }
            let generation = self.load(ino, inode::GENERATION);
            if self.index.holds(e.pos, a) {
                return Some(generation);
            }
        }
    }

    /// The visible index entry for (parent, name); the directory must be loaded.
    pub(crate) fn lookup_entry(&self, parent: u64, name: &[u8]) -> Option<Entry> {
        self.index.get(&self.pool.pm, parent, name)
    }

    /// The parent of directory `dir`, through its dentry's back pointer (the root is
    /// its own parent).
    pub fn parent_of(&self, dir: u64) -> u64 {
        if dir == ROOT_INO {
            return ROOT_INO;
        }
        let d = self.load(dir, inode::DENTRY);
        if self.pool.layout.dentry_id(d).is_none() {
            return ROOT_INO;
        }
        self.pool.pm.load_u64(d + dentry::PARENT)
    }

    /// The name of `ino` in its parent, through the inode's back pointer.
    pub fn name_of(&self, ino: u64) -> Option<Vec<u8>> {
        let d = self.load(ino, inode::DENTRY);
        self.pool.layout.dentry_id(d)?;
        let (len, _) = dentry::split_name_len(self.pool.pm.load_u64(d + dentry::NAME_LEN));
        (len <= dentry::NAME_MAX).then(|| self.pool.pm.read_vec(d + dentry::NAME, len))
    }

    /// The absolute path of directory `dir`, by walking `..` up to the root (getcwd).
    /// A removed directory has none: ENOENT, as Linux's getcwd says in one.
    pub fn path_of(&self, dir: u64) -> Result<Vec<u8>> {
        self.live(dir)?;
        if self.is_removed_dir(dir) {
            return Err(errno::ENOENT);
        }
        let mut parts = Vec::new();
        let mut cur = dir;
        while cur != ROOT_INO {
            parts.push(self.name_of(cur).ok_or(errno::ENOENT)?);
            cur = self.parent_of(cur);
            if parts.len() > 4096 {
                return Err(errno::ELOOP);
            }
        }
        let mut path = Vec::new();
        for p in parts.iter().rev() {
            path.push(b'/');
            path.extend_from_slice(p);
        }
        if path.is_empty() {
            path.push(b'/');
        }
        Ok(path)
    }

    /// Close the pool cleanly.
    pub fn close(&self) -> Result<()> {
        self.pool.close()
    }
}

/// How deep the calling thread is in operations (see [`Namespace::op`]).
mod op_depth {
    use std::cell::Cell;

    thread_local! {
        static DEPTH: Cell<u32> = const { Cell::new(0) };
        static COUNT: Cell<u32> = const { Cell::new(0) };
    }

    pub fn inside() -> bool {
        DEPTH.with(Cell::get) > 0
    }

    /// True once every [`EVERY`] outermost operations of the calling thread.
    pub fn periodic() -> bool {
        COUNT.with(|c| {
            let n = c.get().wrapping_add(1);
            c.set(n);
            n % EVERY == 0
        })
    }

    /// Operations between two looks for dead processes (a look itself is rate-limited
    /// to one every 10 ms per process by `Health`).
    const EVERY: u32 = 1024;

    /// One level deeper while it lives (also when the operation panics).
    pub struct Enter(());
    impl Enter {
        pub fn new() -> Enter {
            DEPTH.with(|d| d.set(d.get() + 1));
            Enter(())
        }
    }
    impl Drop for Enter {
        fn drop(&mut self) {
            DEPTH.with(|d| d.set(d.get() - 1));
        }
    }
}
