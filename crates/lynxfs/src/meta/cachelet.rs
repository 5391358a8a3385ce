//! Cachelets (DirectFS): one compact DRAM record per file in use, instead of a dentry
//! cache plus an inode cache. The inode finds its cachelet through its `nv_pointer`
//! word, stamped with the mount epoch: after a crash or remount the stamp differs and
//! the stale pointer is ignored, so no pool walk is needed to reset them. Hard links
//! reach the inode, hence the same cachelet.
//!
//! Attributes are read from the inode itself: its address follows from its number
//! (the quick path) and it sits in (persistent) memory, so a DRAM copy would only add
//! a second place to keep in step. The cachelet holds what has no place in the pool:
//! the reference and open counts, the flags, the file's lock, and its block map while
//! the file is in use.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};

use crate::format::inode;
use crate::pmem::Backend;
use crate::pool::Pool;

/// The last link went while the file was open: free it at the last close.
pub const ORPHAN: u32 = 1;

pub struct Cachelet {
    pub ino: AtomicU64,
    refs: AtomicU32,
    /// Open handles.
    pub open: AtomicU32,
    pub flags: AtomicU32,
    /// Data lock: readers share it, a writer takes it alone.
    pub lock: RwLock<()>,
    /// The file's block map in DRAM while it is in use.
    pub map: crate::data::MapCache,
}

const _: () = assert!(std::mem::size_of::<Cachelet>() <= 128);

const CHUNK: usize = 4096;
const CHUNKS: usize = 16384;

pub struct Cachelets {
    chunks: Box<[OnceLock<Box<[Cachelet]>>]>,
    next: AtomicU32,
    free: Mutex<Vec<u32>>,
    live: AtomicU64,
    /// Making a cachelet for an inode takes its stripe here, so that two threads never
    /// both replace the same dead pointer: with compare-and-swap alone, a slot freed
    /// and handed out again carries the same stamp (ABA), and a second cachelet could
    /// replace a live one, giving one file two locks and two block-map caches.
    making: Box<[Mutex<()>]>,
}

/// Stripes of [`Cachelets::making`].
const MAKING_STRIPES: usize = 64;

impl Default for Cachelets {
    fn default() -> Self {
        Cachelets {
            chunks: (0..CHUNKS).map(|_| OnceLock::new()).collect(),
            next: AtomicU32::new(0),
            free: Mutex::new(Vec::new()),
            live: AtomicU64::new(0),
            making: (0..MAKING_STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }
}

/// A counted reference; dropping it releases the cachelet.
pub struct CacheletRef {
    set: Arc<Cachelets>,
    slot: u32,
}

impl std::ops::Deref for CacheletRef {
    type Target = Cachelet;
    fn deref(&self) -> &Cachelet {
        self.set.at(self.slot)
    }
}

impl Drop for CacheletRef {
    fn drop(&mut self) {
        self.set.release(self.slot);
    }
}

impl Clone for CacheletRef {
    fn clone(&self) -> Self {
        self.set.at(self.slot).refs.fetch_add(1, Ordering::AcqRel);
        CacheletRef {
            set: self.set.clone(),
            slot: self.slot,
        }
    }
}

impl Cachelets {
    fn at(&self, slot: u32) -> &Cachelet {
        let chunk = self.chunks[slot as usize / CHUNK]
            .get()
            .expect("a handed-out slot's chunk exists");
        &chunk[slot as usize % CHUNK]
    }

    /// Cachelets alive now.
    pub fn live(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }

    /// DRAM used by cachelet chunks.
    pub fn dram_bytes(&self) -> u64 {
        let chunks = self.chunks.iter().filter(|c| c.get().is_some()).count();
        (chunks * CHUNK * std::mem::size_of::<Cachelet>()) as u64
    }

    /// The cachelet of `ino`, made if it has none this epoch.
    pub fn get<B: Backend>(self: &Arc<Self>, pool: &Pool<B>, ino: u64) -> CacheletRef {
        let at = pool.layout.inode_addr(ino) + inode::NV_POINTER;
        if let Some(r) = self.current(pool, at, ino) {
            return r;
        }
        // Slow path, one maker per inode at a time: look again, then make one.
        let _making = self.making[(ino as usize) % MAKING_STRIPES].lock();
        loop {
            if let Some(r) = self.current(pool, at, ino) {
                return r;
            }
            let nv = pool.pm.load_u64(at);
            let slot = self.new_slot(ino);
            let stamp = (pool.epoch & 0xffff_ffff) << 32 | (slot as u64 + 1);
            // Besides makers (who hold the stripe), only a create writing a fresh
            // inode image (pointer 0) changes the pointer: then look again.
            if pool.pm.cas_volatile(at, nv, stamp).is_ok() {
                return CacheletRef {
                    set: self.clone(),
                    slot,
                };
            }
            self.release(slot);
        }
    }

    /// The live cachelet the pointer at `at` names for `ino`, if any.
    fn current<B: Backend>(
        self: &Arc<Self>,
        pool: &Pool<B>,
        at: u64,
        ino: u64,
    ) -> Option<CacheletRef> {
        let nv = pool.pm.load_u64(at);
        if nv >> 32 == pool.epoch & 0xffff_ffff && nv as u32 != 0 {
            self.try_acquire(nv as u32 - 1, ino)
        } else {
            None
        }
    }

    /// A reference to `slot` if it still belongs to `ino` and is alive.
    fn try_acquire(self: &Arc<Self>, slot: u32, ino: u64) -> Option<CacheletRef> {
        if slot as usize >= CHUNK * CHUNKS || self.chunks[slot as usize / CHUNK].get().is_none() {
            return None;
        }
        let c = self.at(slot);
        let mut r = c.refs.load(Ordering::Acquire);
        loop {
            if r == 0 {
                return None;
            }
            match c
                .refs
                .compare_exchange(r, r + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => r = now,
            }
        }
        let got = CacheletRef {
            set: self.clone(),
            slot,
        };
        (c.ino.load(Ordering::Acquire) == ino).then_some(got)
    }

    fn new_slot(&self, ino: u64) -> u32 {
        let slot = self.free.lock().pop().unwrap_or_else(|| {
            let s = self.next.fetch_add(1, Ordering::AcqRel);
            assert!(
                (s as usize) < CHUNK * CHUNKS,
                "more than {} files in use",
                CHUNK * CHUNKS
            );
            s
        });
        let chunk = self.chunks[slot as usize / CHUNK].get_or_init(|| {
            (0..CHUNK)
                .map(|_| Cachelet {
                    ino: AtomicU64::new(0),
                    refs: AtomicU32::new(0),
                    open: AtomicU32::new(0),
                    flags: AtomicU32::new(0),
                    lock: RwLock::new(()),
                    map: crate::data::MapCache::default(),
                })
                .collect()
        });
        let c = &chunk[slot as usize % CHUNK];
        c.map.clear();
        c.ino.store(ino, Ordering::Release);
        c.open.store(0, Ordering::Relaxed);
        c.flags.store(0, Ordering::Relaxed);
        c.refs.store(1, Ordering::Release);
        self.live.fetch_add(1, Ordering::Relaxed);
        slot
    }

    fn release(&self, slot: u32) {
        let c = self.at(slot);
        if c.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
            c.ino.store(0, Ordering::Release);
            self.live.fetch_sub(1, Ordering::Relaxed);
            self.free.lock().push(slot);
        }
    }
}
