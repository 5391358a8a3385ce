//! The namespace: the global metadata index, cachelets, directories as logs, and the
//! operations on names (lookup, create, unlink, rename, link, readdir, attributes).
//! Every operation is synchronous and atomic, with one commit point each
//! (docs/CONSISTENCY.md).

pub mod acl;
mod attr;
pub mod cachelet;
pub mod create;
pub mod dir;
mod evict;
pub mod index;
pub mod mechanisms;
pub mod perm;
mod readdir;
mod remove;
mod rename;
mod usage;
mod xattr;
pub use evict::Entered;

use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::error::{errno, Result};
use crate::format::{dentry, inode, ROOT_INO};
use crate::pmem::Backend;
use crate::pool::Pool;
use crate::runtime::{Span, Watch};

pub use attr::{SetAttr, Stat, StatFs, TimeSet};
pub use cachelet::{Cachelet, CacheletRef, Cachelets};
pub use create::NewNode;
pub use dir::Dir;
pub use index::{Claim, Entry, Index, State};
pub use perm::Cred;
pub use readdir::DirEntry;
pub use rename::RenameFlags;
pub use usage::Usage;

const INODE_LOCKS: usize = 256;

pub struct Namespace<B: Backend> {
    pub pool: Pool<B>,
    /// The metadata index, in the runtime region shared by the pool's processes.
    pub index: Index,
    /// Bounds every wait on shared state (the runtime's repair interrupts it).
    pub watch: Box<dyn Watch + Send + Sync>,
    dirs: papaya::HashMap<u64, Arc<Dir>, index::IndexHasher>,
    pub cachelets: Arc<Cachelets>,
    /// Renames that could move a directory serialize here (as Linux's
    /// `s_vfs_rename_mutex` does), so the ancestor check sees a stable tree.
    rename_lock: Mutex<()>,
    /// Read-modify-write of one inode's words (link counts, attributes).
    inode_locks: Box<[Mutex<()>]>,
    /// Loaded directories in load order, for eviction (FIFO with a second chance).
    clock: Mutex<std::collections::VecDeque<u64>>,
    /// Index entries allowed before cold directories are evicted.
    index_budget: std::sync::atomic::AtomicUsize,
    /// Mechanisms that the ablation benchmark can turn off.
    pub mechanisms: mechanisms::Mechanisms,
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
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(errno::EINVAL);
    }
    Ok(())
}

impl<B: Backend> Namespace<B> {
    pub fn new(pool: Pool<B>) -> Self {
        // For now over memory of this process's own; the shared runtime region replaces it.
        let span = Span::anonymous(Index::bytes_needed(&pool.layout))
            .expect("mapping the metadata index (anonymous shared memory)");
        let index = Index::new(span, &pool.layout).expect("a pool layout open accepted");
        Namespace {
            pool,
            index,
            watch: Box::new(crate::runtime::lock::Alone),
            dirs: papaya::HashMap::with_hasher(Default::default()),
            cachelets: Arc::new(Cachelets::default()),
            rename_lock: Mutex::new(()),
            inode_locks: (0..INODE_LOCKS).map(|_| Mutex::new(())).collect(),
            clock: Mutex::new(std::collections::VecDeque::new()),
            index_budget: std::sync::atomic::AtomicUsize::new(evict::DEFAULT_BUDGET),
            mechanisms: mechanisms::Mechanisms::default(),
        }
    }

    pub(crate) fn lane(&self) -> u32 {
        crate::alloc::lane::current(self.pool.layout.lanes())
    }

    pub(crate) fn iaddr(&self, ino: u64) -> u64 {
        self.pool.layout.inode_addr(ino)
    }

    pub(crate) fn load(&self, ino: u64, field: u64) -> u64 {
        self.pool.pm.load_u64(self.iaddr(ino) + field)
    }

    pub(crate) fn ilock(&self, ino: u64) -> MutexGuard<'_, ()> {
        self.inode_locks[(ino as usize) % INODE_LOCKS].lock()
    }

    /// `ino` names a live inode.
    pub fn live(&self, ino: u64) -> Result<()> {
        if self.pool.layout.ino_valid(ino) && self.load(ino, inode::INO) == ino {
            Ok(())
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

    /// The directory `ino`, read into the index if this is its first use.
    pub fn dir(&self, ino: u64) -> Result<Arc<Dir>> {
        self.live(ino)?;
        if !is_dir(self.mode(ino)) {
            return Err(errno::ENOTDIR);
        }
        // A removed directory still held (a working directory, a FUSE node) is dead,
        // as Linux's S_DEAD: nothing is looked up, listed or created in it.
        if self.load(ino, inode::NLINK) == 0 {
            return Err(errno::ENOENT);
        }
        let dirs = self.dirs.pin();
        let d = match dirs.get(&ino) {
            Some(d) => d.clone(),
            None => dirs
                .get_or_insert_with(ino, || Arc::new(Dir::new(ino)))
                .clone(),
        };
        d.referenced
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if d.ensure_loaded(&self.pool, &self.index, &*self.watch)? {
            self.loaded(ino);
        }
        Ok(d)
    }

    pub(crate) fn forget_dir(&self, ino: u64) {
        self.dirs.pin().remove(&ino);
    }

    /// Directories currently indexed.
    pub fn indexed_dirs(&self) -> usize {
        self.dirs.len()
    }

    /// The entry `name` in directory `parent`, as the caller may see it.
    pub fn lookup(&self, parent: u64, name: &[u8], cred: &Cred) -> Result<u64> {
        self.index.prefetch(parent, name);
        let _ = self.dir(parent)?;
        self.may(parent, cred, perm::X)?;
        match name {
            b"." => return Ok(parent),
            b".." => return Ok(self.parent_of(parent)),
            _ => {}
        }
        check_name(name)?;
        loop {
            let d = self.dir(parent)?;
            match self.lookup_entry(parent, name) {
                Some(e) if self.mechanisms.quick_path() => return Ok(e.ino),
                // Ablation: without the quick path the inode number comes from the
                // dentry in the pool, one more dependent read per component.
                Some(e) => return Ok(self.pool.pm.load_u64(e.dentry + dentry::INO)),
                // Evicted while we looked: the entries are being reloaded; look again.
                None if d.evicted.load(std::sync::atomic::Ordering::SeqCst) => continue,
                None => return Err(errno::ENOENT),
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
    pub fn path_of(&self, dir: u64) -> Result<Vec<u8>> {
        self.live(dir)?;
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
