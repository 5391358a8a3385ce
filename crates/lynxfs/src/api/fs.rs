//! `Fs`: an open pool, its namespace and its table of open handles; what a front end
//! creates once and gets sessions, handles and by-number calls from.

use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::error::Result;
use crate::format::ROOT_INO;
use crate::meta::{Cred, Namespace};
use crate::pmem::{Backend, PmemBackend};
use crate::pool::{Access, MkfsOptions, Pool};

use super::files::OpenFiles;
use super::{held, path, Session};

/// A mounted pool.
pub struct Fs<B: Backend = PmemBackend> {
    pub(super) ns: Namespace<B>,
    pub(super) files: OpenFiles,
    /// Inode numbers held from outside (the kernel's FUSE lookup counts).
    pub(super) held: held::Held,
    /// When a read updates atime: an `Atime` as u8 (a mount's option, changed by a
    /// remount).
    pub(super) atime: AtomicU8,
    /// The claims taken before a fork for the child on the shared descriptions its
    /// handles are bound to (see [`Fs::before_fork`]).
    pub(super) fork_claims: parking_lot::Mutex<Option<Vec<crate::runtime::DescKey>>>,
    /// The open references taken before a fork for the child, per inode (see
    /// [`Fs::before_fork_holding`]).
    pub(super) fork_opens: parking_lot::Mutex<Option<std::collections::BTreeMap<u64, u32>>>,
}

/// When a read updates a file's atime: the atime options of mount(8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)]
pub enum Atime {
    /// `relatime` (Linux's default): only when atime is not after mtime or ctime, or
    /// is a day old.
    #[default]
    Relative = 0,
    /// `strictatime`: at every read.
    Strict = 1,
    /// `noatime`: never.
    Never = 2,
}

impl Atime {
    pub(super) fn from_u8(v: u8) -> Atime {
        match v {
            1 => Atime::Strict,
            2 => Atime::Never,
            _ => Atime::Relative,
        }
    }
}

impl Fs<PmemBackend> {
    /// Open a pool file with the pmem backend.
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with_data(path, None)
    }

    /// [`Fs::open`], writing in data mode `data` instead of the pool's own (`None`:
    /// the pool's), as a mount's `-o data=` does.
    pub fn open_with_data(path: &Path, data: Option<crate::DataMode>) -> Result<Self> {
        let pool = Pool::open(path, Access::ReadWrite, PmemBackend::default())?;
        if let Some(mode) = data {
            pool.set_data_mode(mode);
        }
        Ok(Fs::new(pool))
    }
}

impl<B: Backend> Fs<B> {
    pub fn new(pool: Pool<B>) -> Self {
        let ns = Namespace::new(pool);
        crate::data::prealloc::trim_recovered(&ns.pool, ns.lane());
        Fs {
            ns,
            files: OpenFiles::new(),
            held: held::Held::default(),
            atime: AtomicU8::new(Atime::default() as u8),
            fork_claims: parking_lot::Mutex::new(None),
            fork_opens: parking_lot::Mutex::new(None),
        }
    }

    /// When reads update atime from now on.
    pub fn set_atime(&self, mode: Atime) {
        self.atime.store(mode as u8, Ordering::Relaxed);
    }

    /// A fresh pool in memory (tests).
    pub fn in_memory(opts: &MkfsOptions, backend: B) -> Result<Self> {
        Ok(Fs::new(Pool::create_in_memory(opts, backend)?))
    }

    /// One operation on the runtime state (see [`Namespace::op`]).
    pub(super) fn op<T>(&self, f: impl FnMut() -> Result<T>) -> Result<T> {
        self.ns.op(f)
    }

    pub fn ns(&self) -> &Namespace<B> {
        &self.ns
    }
    pub fn pool(&self) -> &Pool<B> {
        &self.ns.pool
    }

    /// A new open file description of the kernel file `ino`'s record locks and flock
    /// are kept on, shared by every process attached to the pool
    /// ([`crate::runtime::stand_ins`]). `None` for a pool no other process can attach
    /// (in memory, opened exclusively): the caller's own kernel then keeps its locks.
    pub fn lock_stand_in(&self, ino: u64) -> Option<std::io::Result<std::os::fd::OwnedFd>> {
        Some(self.pool().attachment()?.lock_stand_in(ino))
    }

    /// Where `ino`'s lock stand-in is, for a pool with stand-ins.
    pub fn lock_stand_in_path(&self, ino: u64) -> Option<std::path::PathBuf> {
        self.pool().attachment()?.lock_stand_in_path(ino)
    }

    /// The attached pool's session directory: this user's alone (mode 0700, under a
    /// name nobody can predict), removed when the last process detaches. Where the
    /// preload keeps its memory files for shared mappings.
    pub fn session_dir(&self) -> Option<std::path::PathBuf> {
        self.pool().attachment()?.session_dir()
    }

    /// Watch the changes other processes attached to the pool make (names,
    /// attributes, data), to drop what this process caches of them; every attached
    /// process posts its changes while a watcher lives. `None` for a pool no other
    /// process can attach (in memory).
    pub fn watch_changes(&self) -> Option<crate::runtime::notices::Watcher> {
        self.ns.notices.watch(self.ns.rt.clone())
    }

    /// How many changes attached processes have posted (see [`Self::watch_changes`]):
    /// a watcher past this number has seen every change made before this call.
    pub fn changes_posted(&self) -> u64 {
        self.ns.notices.posted()
    }

    /// Where a watcher of this process at `position` would be once past the changes
    /// after it that this process made itself: the number of changes posted, when
    /// every one from `position` on is this process's own (and published), else
    /// `None`. A watcher is not woken for its own process's changes, so it may lag
    /// behind them (see [`crate::runtime::notices::Notices::own_since`]).
    pub fn own_changes_since(&self, position: u64) -> Option<u64> {
        self.ns.notices.own_since(position)
    }

    /// A caller with these credentials, working in the root directory.
    pub fn session(&self, cred: Cred) -> Session<'_, B> {
        Session {
            fs: self,
            cred,
            umask: 0,
            cwd: ROOT_INO,
            cwd_hold: None,
            scope: path::Scope::Pool,
        }
    }

    /// Close cleanly: the allocator state is saved and the pool marked clean.
    /// Handles still open are closed first, so a file unlinked while open is freed
    /// now rather than leaked into the saved allocator state.
    pub fn close(&self) -> Result<()> {
        for fd in self.files.open_fds() {
            // A handle closed concurrently is already gone: nothing to do for it.
            let _ = self.close_fd(fd);
        }
        self.forget_all();
        // A hybrid pool's commit inside an operation (see `sync`); the pool's close
        // then finds nothing pending.
        let committed = self.sync();
        self.ns.close().and(committed)
    }
}
