//! A directory in DRAM: its log pages, the cursor from which slots are claimed, slots
//! freed by unlinks for reuse, and the count of live entries. Created the first time
//! the directory is used, when its log is read into the index (lazy loading: mount
//! reads no directory).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::error::{errno, Result};
use crate::format::{dentry, dirlog, inode, BLOCK};
use crate::pmem::Backend;
use crate::pool::Pool;

use super::index::{Entry, Index, State};
use crate::runtime::Watch;

pub struct Dir {
    pub ino: u64,
    /// Its entries are in the index (set once `load` has finished).
    loaded: AtomicBool,
    /// Held by the one loading it.
    loading: Mutex<()>,
    /// Log pages in order; appended under `extend`.
    pages: RwLock<Vec<u64>>,
    /// The next never-used slot, as a position across all pages.
    cursor: AtomicU64,
    extend: Mutex<()>,
    /// Slots emptied by unlinks, taken again by creates (so logs do not grow without
    /// bound and need no compaction).
    free_slots: Mutex<Vec<u64>>,
    /// Live entries (for rmdir's emptiness check).
    pub entries: AtomicU64,
    /// Set by rmdir once it has committed; creates then fail with ENOENT.
    pub removed: AtomicBool,
    /// Every operation that changes the directory's entries holds it shared (see
    /// `Namespace::enter`); rmdir of it and eviction from the index hold it alone.
    pub gate: Arc<RwLock<()>>,
    /// Evicted from the index: a newer `Dir` stands for this directory; retry there.
    pub evicted: AtomicBool,
    /// Used since the eviction clock last passed (second chance).
    pub referenced: AtomicBool,
    /// A directory lock, taken only when lock-free creation is switched off.
    pub serial: Arc<Mutex<()>>,
}

impl Dir {
    pub fn new(ino: u64) -> Dir {
        Dir {
            ino,
            loaded: AtomicBool::new(false),
            loading: Mutex::new(()),
            pages: RwLock::new(Vec::new()),
            cursor: AtomicU64::new(0),
            extend: Mutex::new(()),
            free_slots: Mutex::new(Vec::new()),
            entries: AtomicU64::new(0),
            removed: AtomicBool::new(false),
            gate: Arc::new(RwLock::new(())),
            evicted: AtomicBool::new(false),
            referenced: AtomicBool::new(true),
            serial: Arc::new(Mutex::new(())),
        }
    }

    /// Read the directory's log into the index, once; true if this call loaded it.
    /// A load cut short (the runtime under repair) is redone by the next call.
    pub fn ensure_loaded<B: Backend>(
        &self,
        pool: &Pool<B>,
        index: &Index,
        watch: &dyn Watch,
    ) -> Result<bool> {
        if self.loaded.load(Ordering::Acquire) {
            return Ok(false);
        }
        let _one = self.loading.lock();
        if self.loaded.load(Ordering::Acquire) {
            return Ok(false);
        }
        self.load(pool, index, watch)?;
        self.loaded.store(true, Ordering::Release);
        Ok(true)
    }

    fn load<B: Backend>(&self, pool: &Pool<B>, index: &Index, watch: &dyn Watch) -> Result<()> {
        let pm = &pool.pm;
        let l = &pool.layout;
        let mut pages = self.pages.write();
        let mut free = self.free_slots.lock();
        pages.clear();
        free.clear();
        let mut page = pm.load_u64(l.inode_addr(self.ino) + inode::DIR_LOG);
        let mut live = 0;
        // Recovery has checked every link on an unclean open; a clean pool's links were
        // written by this code. The bound guards against a cycle all the same.
        let mut seen = std::collections::HashSet::new();
        while page != 0 && l.block_of(page).is_some() && seen.insert(page) {
            for i in 0..dirlog::SLOTS_PER_PAGE {
                let slot = dirlog::slot_addr(page, i);
                match read_entry(pool, self.ino, slot) {
                    Some((name, e)) => {
                        // Already there: loaded by another process sharing the index.
                        index.insert_loaded(pm, self.ino, &name, &e, watch)?;
                        live += 1;
                    }
                    None => free.push(slot),
                }
            }
            pages.push(page);
            page = pm.load_u64(page + dirlog::NEXT);
        }
        self.cursor.store(
            pages.len() as u64 * dirlog::SLOTS_PER_PAGE,
            Ordering::Release,
        );
        self.entries.store(live, Ordering::Release);
        Ok(())
    }

    /// Claim an empty slot: a freed one if one is at hand without waiting, else the
    /// next new one (a fetch-add on the cursor), adding a log page when needed.
    pub fn claim_slot<B: Backend>(&self, pool: &Pool<B>, lane: u32, reuse: bool) -> Result<u64> {
        if let Some(mut free) = self.free_slots.try_lock().filter(|_| reuse) {
            if let Some(s) = free.pop() {
                return Ok(s);
            }
        }
        let pos = self.cursor.fetch_add(1, Ordering::AcqRel);
        let page_no = (pos / dirlog::SLOTS_PER_PAGE) as usize;
        let known = self.pages.read().get(page_no).copied();
        let page = match known {
            Some(p) => p,
            // On ENOSPC the position stays claimed but unused: harmless, since a page
            // added later simply has one slot no cursor hands out until a reload.
            None => self.add_pages(pool, lane, page_no)?,
        };
        Ok(dirlog::slot_addr(page, pos % dirlog::SLOTS_PER_PAGE))
    }

    /// Link new log pages until page `page_no` exists; return it.
    fn add_pages<B: Backend>(&self, pool: &Pool<B>, lane: u32, page_no: usize) -> Result<u64> {
        let _g = self.extend.lock();
        loop {
            let mut pages = self.pages.write();
            if let Some(&p) = pages.get(page_no) {
                return Ok(p);
            }
            let runs = pool.alloc.blocks.alloc(lane, 1).ok_or(errno::ENOSPC)?;
            let page = pool.layout.block_addr(runs[0].0);
            let link = match pages.last() {
                Some(&prev) => prev + dirlog::NEXT,
                None => pool.layout.inode_addr(self.ino) + inode::DIR_LOG,
            };
            // The page is zeroed and owned before it is linked, so a crash leaves either
            // no page or a well-formed empty one.
            let mut b = pool.pm.batch();
            b.zero(page, BLOCK as usize)
                .write_u64(page + dirlog::OWNER, self.ino);
            let ready = b.persist();
            drop(pool.pm.commit_u64(link, page, ready));
            pages.push(page);
        }
    }

    pub fn release_slot(&self, slot: u64) {
        self.free_slots.lock().push(slot);
    }

    /// The log pages, for readdir.
    pub fn pages(&self) -> Vec<u64> {
        self.pages.read().clone()
    }
}

/// The committed entry in `slot` of directory `dir`, if any.
pub fn read_entry<B: Backend>(pool: &Pool<B>, dir: u64, slot: u64) -> Option<(Box<[u8]>, Entry)> {
    let pm = &pool.pm;
    let d = pm.load_u64(slot);
    pool.layout.dentry_id(d)?;
    if pm.load_u64(d + dentry::STATE) & dentry::VALID == 0 || pm.load_u64(d + dentry::PARENT) != dir
    {
        return None;
    }
    let (len, dtype) = dentry::split_name_len(pm.load_u64(d + dentry::NAME_LEN));
    if len == 0 || len > dentry::NAME_MAX {
        return None;
    }
    let name = pm.read_vec(d + dentry::NAME, len).into_boxed_slice();
    let e = Entry {
        state: State::Ready,
        ino: pm.load_u64(d + dentry::INO),
        dentry: d,
        slot,
        dtype,
        pos: 0,
    };
    Some((name, e))
}
