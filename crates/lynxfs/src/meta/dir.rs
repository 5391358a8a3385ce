//! A directory at run time: its cachelet (tail, freed slots, gate word, flags), its
//! per-lane gate holds and entry counts ([`Gates`]) and its log in the pool.
//! Everything is in the shared runtime region, so every attached process claims slots
//! from the same state. A directory's log is read into the index the first time it is
//! used (lazy loading: attaching reads no directory).
//!
//! Slots: a create takes a slot an unlink freed if one is at hand, else a never-used
//! one, adding a log page when the last one is full. Never-used slots are handed out a
//! cache line at a time to a thread that keeps creating in a directory: a
//! compare-and-swap on the tail gives it the rest of the tail's line (up to 8 slots),
//! which its next creates in the directory use without touching the tail, so two CPUs
//! creating in one directory neither write the tail's line for every create nor store
//! their slots into one line of the log. Freed
//! slots wait in a per-directory stack whose nodes come from a shared pool
//! ([`FreeSlots`], in `free_slots`); a slot freed while that pool is exhausted is not reused until the
//! directory is next loaded, and so are slots a thread had in hand and never used.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{errno, Result};
use crate::format::{dentry, dirlog, inode, BLOCK};
use crate::pmem::Backend;
use crate::pool::Pool;
use crate::runtime::Watch;

use super::cachelet::{Cachelet, LOADED, REMOVED};
use super::free_slots::FreeSlots;
use super::gate::Gates;
use super::index::{Entry, Index, LoadBatch, State};

/// A directory: its inode number, its cachelet and its per-lane records.
#[derive(Clone, Copy)]
pub struct Dir<'a> {
    pub ino: u64,
    c: Cachelet<'a>,
    gates: &'a Gates,
}

/// Who may use a thread's slots in hand: the namespace instance in this process, the
/// process itself (a forked child's copy of the forking thread holds its parent's
/// slots), the runtime state's generation (bumped by every repair, which forgets every
/// tail) and the directory with its load count (its cachelet's map version, moved on by
/// every load and when the inode is freed). A thread's slots serve only the same five.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotOwner {
    instance: u64,
    forks: u64,
    generation: u64,
    ino: u64,
    loads: u64,
}

/// Forks this process descends through (bumped in every child).
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn count_fork() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Start counting forks (once per process; every namespace calls it when made, so no
/// slot is handed out before).
pub fn count_forks() {
    static COUNTING: std::sync::Once = std::sync::Once::new();
    COUNTING.call_once(|| {
        // SAFETY: registers a child handler that only bumps an atomic (no lock, no
        // allocation), which is safe to run in a forked child.
        unsafe { libc::pthread_atfork(None, None, Some(count_fork)) };
    });
}

impl SlotOwner {
    /// The owner for namespace `instance` (unique in this process) at runtime
    /// generation `generation`, in this process (see [`count_forks`]).
    pub fn new(instance: u64, generation: u64) -> SlotOwner {
        SlotOwner {
            instance,
            forks: FORKS.load(Ordering::Relaxed),
            generation,
            ino: 0,
            loads: 0,
        }
    }
}

thread_local! {
    /// The never-used slots this thread holds: their owner, the next, and the end of
    /// their line.
    static IN_HAND: Cell<(SlotOwner, u64, u64)> = Cell::new(Default::default());
}

impl<'a> Dir<'a> {
    pub fn new(c: Cachelet<'a>, gates: &'a Gates) -> Dir<'a> {
        Dir {
            ino: c.ino,
            c,
            gates,
        }
    }

    pub fn cachelet(&self) -> Cachelet<'a> {
        self.c
    }

    /// Live entries (exact for rmdir's emptiness check, which holds the gate alone).
    pub fn entries(&self) -> u64 {
        self.gates.entries(self.ino)
    }

    /// One more entry (its create, link or rename has committed), counted in `lane`.
    pub fn add_entry(&self, lane: u32) {
        self.gates.add_entry(self.ino, lane);
    }

    /// One entry less (its removal or rename away has committed), counted in `lane`.
    /// True when the log is due a compaction check (`meta::compact`), which the caller
    /// makes once it no longer holds the directory's gate.
    pub fn remove_entry(&self, lane: u32) -> bool {
        self.gates.remove_entry(self.ino, lane);
        self.slot_freed(lane)
    }

    /// A committed change freed one of the log's slots (a removal, or a rename within
    /// the directory, which leaves the entry count as it was), counted in `lane`; true
    /// as for [`Dir::remove_entry`].
    pub fn slot_freed(&self, lane: u32) -> bool {
        self.gates
            .removal_due(self.ino, lane, super::compact::CHECK_EVERY)
    }

    /// Set once its rmdir (or a rename over it) has committed: creates then fail.
    pub fn removed(&self) -> bool {
        self.c.flags() & REMOVED != 0
    }

    /// Its rmdir (or a rename over it) has committed, in directory `parent` of
    /// generation `generation`: creates fail from now on, and its ".." keeps naming
    /// that parent, as Linux's dead dentry keeps its d_parent. Called with its gate
    /// held alone (so it is loaded and no load runs); a removed directory is empty and
    /// never loaded again (see [`Dir::ensure_loaded`]), so its tail is of no more use:
    /// it keeps the parent's generation until the inode is freed (`reset`).
    pub fn set_removed(&self, parent: u64, generation: u64) {
        self.c.old_parent().store(parent, Ordering::Release);
        self.c.tail().store(generation, Ordering::Release);
        self.c.set_flags(REMOVED);
    }

    /// The parent and its generation a removed directory was removed from (see
    /// [`Dir::set_removed`]); `None` while it is not removed.
    pub fn old_parent(&self) -> Option<(u64, u64)> {
        self.removed().then(|| {
            (
                self.c.old_parent().load(Ordering::Acquire),
                self.c.tail().load(Ordering::Acquire),
            )
        })
    }

    /// Read the directory's log into the index, once; true if this call loaded it.
    #[inline]
    pub fn ensure_loaded<B: Backend>(
        &self,
        pool: &Pool<B>,
        index: &Index,
        free: &FreeSlots,
        w: &dyn Watch,
    ) -> Result<bool> {
        if self.c.flags() & LOADED != 0 {
            return Ok(false);
        }
        self.load_once(pool, index, free, w)
    }

    /// [`Dir::ensure_loaded`] off its common path (kept apart so that path, run for
    /// every component of every path, does not set up this one's frame).
    #[cold]
    #[inline(never)]
    fn load_once<B: Backend>(
        &self,
        pool: &Pool<B>,
        index: &Index,
        free: &FreeSlots,
        w: &dyn Watch,
    ) -> Result<bool> {
        let _g = self.c.dir_lock(w)?;
        // Removed (and evicted since): nothing to load, and its entry count and tail
        // now keep its old parent. The caller finds it dead by its link count.
        if self.c.flags() & (LOADED | REMOVED) != 0 {
            return Ok(false);
        }
        crate::runtime::testing::stop_here("dir.load");
        self.load(pool, index, free, w)?;
        // Nobody can change the directory before it is marked loaded, and the load
        // has just read every slot: a log worth compacting is compacted now, once,
        // whatever removals' checks missed (`meta::compact`).
        if super::compact::worth_it(self, self.pages(pool).len() as u64) {
            self.drop_empty_pages(pool, free);
        }
        self.c.set_flags(LOADED);
        Ok(true)
    }

    /// Index every committed entry; empty slots before the tail (the slot after the
    /// last used one of the last page) are freed slots, kept for reuse.
    fn load<B: Backend>(
        &self,
        pool: &Pool<B>,
        index: &Index,
        free: &FreeSlots,
        w: &dyn Watch,
    ) -> Result<()> {
        let pages = self.pages(pool);
        let tail = tail_after(&pages, pool);
        let read = if pages.len() >= SPLIT_PAGES && crate::cpu::count() > 1 {
            self.index_split(pool, index, &pages, tail, w)?
        } else {
            self.index_pages(pool, index, &pages, tail, w)?
        };
        // Pushed once every entry is indexed: a load that fails part way (a full
        // index, an interrupted wait) is tried again, and must not push a slot twice.
        for slot in read.empty {
            free.push(self.c, slot);
        }
        self.c.tail().store(tail, Ordering::Release);
        self.gates.set_entries(self.ino, read.live);
        // Slots threads had in hand before this load are now freed slots or past the
        // tail: no thread may use them any more.
        self.c.map_version().fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// [`Dir::index_pages`] of every page of a big log, the second half on a helper
    /// thread (on this one after the first when no thread can be started). Nothing
    /// of the directory changes meanwhile: every change of it first waits for the load
    /// this is part of, which marks it loaded only once both halves are in. The helper
    /// runs with every signal blocked: a handler of the program's must not run on it
    /// (it could call into the pool, and wait for this very load). It takes no fork
    /// gate pass: the calling thread holds its own across the whole load, joins the
    /// helper before returning, and so keeps a fork away while the helper lives (a
    /// pass taken by the helper could wait for a gate shut by a fork that waits for
    /// the caller). Protocol in docs/CONSISTENCY.md ("Directory loads").
    fn index_split<B: Backend>(
        &self,
        pool: &Pool<B>,
        index: &Index,
        pages: &[u64],
        tail: u64,
        w: &dyn Watch,
    ) -> Result<Indexed> {
        let (first, second) = pages.split_at(pages.len() / 2);
        std::thread::scope(|sc| {
            let helper = spawn_quiet(sc, || self.index_pages(pool, index, second, tail, w));
            let mine = self.index_pages(pool, index, first, tail, w);
            let theirs = match helper {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(_) => self.index_pages(pool, index, second, tail, w),
            };
            Ok(mine?.merge(theirs?))
        })
    }

    /// Index the committed entries of log pages `pages` (some of the log's, in
    /// order), a page at a time; with the log's `tail`, say which of their empty slots
    /// are freed ones (every empty slot but those of the tail's page from the tail on).
    fn index_pages<B: Backend>(
        &self,
        pool: &Pool<B>,
        index: &Index,
        pages: &[u64],
        tail: u64,
        w: &dyn Watch,
    ) -> Result<Indexed> {
        let mut out = Indexed::default();
        let mut batch = LoadBatch::default();
        let mut slots = [0u64; dirlog::SLOTS_PER_PAGE as usize];
        for &page in pages {
            batch.clear();
            let used = slots_to_read(page, tail);
            let slots = &mut slots[..used];
            // One copy of the page's slots: nothing writes them while the directory
            // loads (every change of it waits for the load).
            pool.pm.read_words(dirlog::slot_addr(page, 0), slots);
            batch.reserve(used);
            for (i, &d) in slots.iter().enumerate() {
                if let Some(&ahead) = slots.get(i + DENTRY_AHEAD) {
                    prefetch_dentry(pool, ahead);
                }
                let slot = dirlog::slot_addr(page, i as u64);
                if let Some((len, dtype)) = committed_dentry(pool, self.ino, d) {
                    let e = entry_at(pool, d, slot, dtype);
                    batch.push(e, len, |name| pool.pm.read(d + dentry::NAME, name));
                    out.live += 1;
                } else {
                    out.empty.push(slot);
                }
            }
            index.insert_loaded(&pool.pm, self.ino, &batch, w)?;
        }
        Ok(out)
    }

    /// Claim an empty slot: a freed one if any (and reuse is on), else a new one,
    /// adding a log page when needed. `owner` names the caller's namespace instance and
    /// runtime generation (see [`SlotOwner`]). Called with the gate held shared and the
    /// directory loaded and not removed, so no load or eviction runs meanwhile.
    pub fn claim_slot<B: Backend>(
        &self,
        pool: &Pool<B>,
        free: &FreeSlots,
        lane: u32,
        reuse: bool,
        owner: SlotOwner,
        w: &dyn Watch,
    ) -> Result<u64> {
        if reuse {
            if let Some(s) = free.pop(self.c) {
                return Ok(s);
            }
        }
        let owner = SlotOwner {
            ino: self.ino,
            loads: self.c.map_version().load(Ordering::Acquire),
            ..owner
        };
        let (held_by, next, end) = IN_HAND.with(Cell::get);
        if held_by == owner && next < end {
            IN_HAND.with(|h| h.set((owner, next + 8, end)));
            return Ok(next);
        }
        // A thread's first new slot in a directory is one slot; only its next one there,
        // when it keeps creating in this directory, brings the rest of a line. So a
        // thread going from directory to directory (`tar x`, `cp -r`: a file here, a
        // directory there) leaves no unused slots behind; one that stays leaves at most
        // a line's rest when it moves on.
        let staying = held_by == owner;
        loop {
            let t = self.c.tail().load(Ordering::Acquire);
            let (page, i) = (t & !(BLOCK - 1), t & (BLOCK - 1));
            if page != 0 && i < dirlog::SLOTS_PER_PAGE {
                // The rest of the tail's line of slots (lines end with pages: a page's
                // slots fill whole lines).
                let n = if staying {
                    SLOTS_PER_LINE - i % SLOTS_PER_LINE
                } else {
                    1
                };
                if self
                    .c
                    .tail()
                    .compare_exchange(t, t + n, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    let slot = dirlog::slot_addr(page, i);
                    IN_HAND.with(|h| h.set((owner, slot + 8, slot + 8 * n)));
                    return Ok(slot);
                }
                continue;
            }
            self.add_page(pool, lane, t, w)?;
        }
    }

    /// Link a new log page after the last one, unless another creator already did
    /// (the tail moved on from `seen`).
    fn add_page<B: Backend>(
        &self,
        pool: &Pool<B>,
        lane: u32,
        seen: u64,
        w: &dyn Watch,
    ) -> Result<()> {
        let _g = self.c.dir_lock(w)?;
        if self.c.tail().load(Ordering::Acquire) != seen {
            return Ok(());
        }
        let block = pool
            .alloc
            .meta_blocks()
            .alloc_high(lane)
            .ok_or(errno::ENOSPC)?;
        let page = pool.layout.block_addr(block);
        let last = seen & !(BLOCK - 1);
        let link = if last == 0 {
            pool.layout.inode_addr(self.ino) + inode::DIR_LOG
        } else {
            last + dirlog::NEXT
        };
        // The page is zeroed and owned before it is linked, so a crash leaves either
        // no page or a well-formed empty one.
        let mut b = pool.pm.batch();
        b.zero(page, BLOCK as usize)
            .write_u64(page + dirlog::OWNER, self.ino);
        let ready = b.persist();
        drop(pool.pm.commit_u64(link, page, ready));
        self.c.tail().store(page, Ordering::Release);
        Ok(())
    }

    /// A slot no longer used (its removal has committed): keep it for reuse.
    pub fn release_slot(&self, free: &FreeSlots, slot: u64) {
        free.push(self.c, slot);
    }

    /// Forget the freed slots of a directory that is gone.
    pub fn drain_slots(&self, free: &FreeSlots) {
        while free.pop(self.c).is_some() {}
    }

    /// How many of `page`'s slots a walk must read: those before the tail when `page`
    /// is the tail's (every slot past it is unclaimed, so empty: slots are claimed by
    /// moving the tail past them, a load sets it after the last used one), else all.
    /// Saves readdir of a small directory the other 500 of its one page.
    pub fn slots_in_use(&self, page: u64) -> u64 {
        let t = self.c.tail().load(Ordering::Acquire);
        if self.c.flags() & (LOADED | REMOVED) == LOADED && t & !(BLOCK - 1) == page {
            (t & (BLOCK - 1)).min(dirlog::SLOTS_PER_PAGE)
        } else {
            dirlog::SLOTS_PER_PAGE
        }
    }

    /// The addresses of the log pages, in order.
    pub fn pages<B: Backend>(&self, pool: &Pool<B>) -> Vec<u64> {
        crate::data::dir_pages(pool, self.ino)
            .into_iter()
            .map(|b| pool.layout.block_addr(b))
            .collect()
    }

    /// The log pages, in order, each with the readdir position of its slot 0
    /// (`dirlog::BASE`): compaction unlinks pages without moving any other's offsets.
    pub fn pages_with_base<B: Backend>(&self, pool: &Pool<B>) -> Vec<(u64, u64)> {
        let mut prev = None;
        self.pages(pool)
            .into_iter()
            .map(|page| {
                let base = dirlog::page_base(pool.pm.load_u64(page + dirlog::BASE), prev);
                prev = Some(base);
                (page, base)
            })
            .collect()
    }

    /// Unlink every log page that holds no entry and give it back to the pool; then
    /// set up the freed slots and the tail again, as a load does. Called with the gate
    /// held alone and the load lock held, the directory loaded: no slot is being
    /// claimed, filled or emptied, so a page whose slots are all 0 is empty for good.
    /// Returns the pages freed. Protocol in docs/CONSISTENCY.md ("Directory log
    /// compaction").
    pub(super) fn drop_empty_pages<B: Backend>(&self, pool: &Pool<B>, free: &FreeSlots) -> u64 {
        let pages = self.pages_with_base(pool);
        let empty: Vec<bool> = pages
            .iter()
            .map(|&(page, _)| {
                (0..dirlog::SLOTS_PER_PAGE)
                    .all(|i| pool.pm.load_u64(dirlog::slot_addr(page, i)) == 0)
            })
            .collect();
        if !empty.contains(&true) {
            return 0;
        }
        // First every kept page whose predecessor goes keeps its position explicitly
        // (the value readers already compute, so storing it changes nothing they see).
        let mut b = pool.pm.batch();
        for (k, &(page, base)) in pages.iter().enumerate() {
            if !empty[k] && k > 0 && empty[k - 1] {
                b.write_u64(page + dirlog::BASE, dirlog::EXPLICIT | base);
            }
        }
        drop(b.persist());
        // Then each run of empty pages leaves the chain by one 8-byte store into the
        // link before it: any of these stores durable without the others still leaves
        // a well-formed chain (each skips pages of its own).
        let mut b = pool.pm.batch();
        let mut link = pool.layout.inode_addr(self.ino) + inode::DIR_LOG;
        let mut k = 0;
        let mut kept = Vec::new();
        while k < pages.len() {
            if empty[k] {
                let run_end = (k..pages.len()).find(|&j| !empty[j]).unwrap_or(pages.len());
                b.write_u64(link, pages.get(run_end).map_or(0, |&(p, _)| p));
                k = run_end;
                continue;
            }
            kept.push(pages[k].0);
            link = pages[k].0 + dirlog::NEXT;
            k += 1;
        }
        drop(b.persist());
        let mut freed = 0;
        for (k, &(page, _)) in pages.iter().enumerate() {
            // Every page of the chain is a block (`data::dir_pages` checks links).
            if let Some(block) = pool.layout.block_of(page).filter(|_| empty[k]) {
                pool.alloc.meta_blocks().free(block, 1);
                freed += 1;
            }
        }
        self.drain_slots(free);
        let tail = tail_after(&kept, pool);
        for (n, &page) in kept.iter().enumerate() {
            for i in 0..dirlog::SLOTS_PER_PAGE {
                let slot = dirlog::slot_addr(page, i);
                if (n + 1 < kept.len() || i < tail & (BLOCK - 1)) && pool.pm.load_u64(slot) == 0 {
                    free.push(self.c, slot);
                }
            }
        }
        self.c.tail().store(tail, Ordering::Release);
        // Slots threads had in hand may be on a page just freed: none may be used.
        self.c.map_version().fetch_add(1, Ordering::AcqRel);
        freed
    }
}

/// Slots in one cache line of a log page.
const SLOTS_PER_LINE: u64 = 8;
const _: () = assert!(
    dirlog::SLOTS.is_multiple_of(64) && dirlog::SLOTS_PER_PAGE.is_multiple_of(SLOTS_PER_LINE)
);

/// The tail after loading: the slot after the last non-empty slot of the last page.
fn tail_after<B: Backend>(pages: &[u64], pool: &Pool<B>) -> u64 {
    let Some(&last) = pages.last() else {
        return 0;
    };
    let mut slots = [0u64; dirlog::SLOTS_PER_PAGE as usize];
    pool.pm.read_words(dirlog::slot_addr(last, 0), &mut slots);
    let used = slots.iter().rposition(|&d| d != 0).map_or(0, |i| i + 1);
    last | used as u64
}

/// How many of log page `page`'s slots a load reads: all but those of the tail's page
/// from the `tail` on (never used since the log was last compacted or loaded, so
/// neither entries nor freed slots).
fn slots_to_read(page: u64, tail: u64) -> usize {
    if page == tail & !(BLOCK - 1) {
        (tail & (BLOCK - 1)).min(dirlog::SLOTS_PER_PAGE) as usize
    } else {
        dirlog::SLOTS_PER_PAGE as usize
    }
}

/// Log pages from which a load is split over two threads: below, the second thread's
/// start (tens of microseconds) is a fair part of the whole (a page holds 504 slots).
const SPLIT_PAGES: usize = 64;

/// What indexing log pages found: the live entries, and the freed slots.
#[derive(Default)]
struct Indexed {
    live: u64,
    empty: Vec<u64>,
}

impl Indexed {
    fn merge(mut self, other: Indexed) -> Indexed {
        self.live += other.live;
        self.empty.extend(other.empty);
        self
    }
}

/// Starts `work` on a thread of scope `sc` with every signal blocked (the thread
/// inherits the mask this thread has while starting it; this thread's own is put
/// back at once, so a signal sent meanwhile is only delayed).
fn spawn_quiet<'s, T: Send + 's>(
    sc: &'s std::thread::Scope<'s, '_>,
    work: impl FnOnce() -> T + Send + 's,
) -> std::io::Result<std::thread::ScopedJoinHandle<'s, T>> {
    // SAFETY: sigset_t is plain data; sigfillset initializes it whole before use.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: both sets are live, writable sigset_t values of this frame; sigfillset
    // and pthread_sigmask only write them (and this thread's mask).
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    let started = std::thread::Builder::new()
        .name("lynxfs-load".into())
        .spawn_scoped(sc, work);
    // SAFETY: `old` holds the mask pthread_sigmask read above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    started
}

/// How many slots ahead a load prefetches the dentries it will read: they are
/// [`DENTRY_SIZE`](crate::format::layout::DENTRY_SIZE) bytes apart, wider than the
/// hardware's prefetcher follows, and a directory's are as far apart as its creates
/// were in time.
const DENTRY_AHEAD: usize = 8;

/// Start loading the lines of the dentry `slot` names that a load reads (its header,
/// its name).
/// Start loading dentry `d` (a slot's word: any value) into the cache.
fn prefetch_dentry<B: Backend>(pool: &Pool<B>, d: u64) {
    if pool.layout.dentry_id(d).is_some() {
        pool.pm.prefetch(d);
        pool.pm.prefetch(d + dentry::NAME);
    }
}

/// The committed entry in `slot` of directory `dir`, if any.
pub fn read_entry<B: Backend>(pool: &Pool<B>, dir: u64, slot: u64) -> Option<(Box<[u8]>, Entry)> {
    let mut name = Vec::new();
    let e = read_entry_into(pool, dir, slot, &mut name)?;
    Some((name.into_boxed_slice(), e))
}

/// [`read_entry`], its name appended to `names`.
pub fn read_entry_into<B: Backend>(
    pool: &Pool<B>,
    dir: u64,
    slot: u64,
    names: &mut Vec<u8>,
) -> Option<Entry> {
    let (d, len, dtype) = committed(pool, dir, slot)?;
    let start = names.len();
    names.resize(start + len, 0);
    pool.pm.read(d + dentry::NAME, &mut names[start..]);
    Some(entry_at(pool, d, slot, dtype))
}

/// The dentry `slot` of directory `dir` names, if it is a committed entry of `dir`:
/// its address, its name's length and its file type.
fn committed<B: Backend>(pool: &Pool<B>, dir: u64, slot: u64) -> Option<(u64, usize, u8)> {
    let d = pool.pm.load_u64(slot);
    committed_dentry(pool, dir, d).map(|(len, dtype)| (d, len, dtype))
}

/// [`committed`] for the word `d` a slot holds: the name's length and the file type.
fn committed_dentry<B: Backend>(pool: &Pool<B>, dir: u64, d: u64) -> Option<(usize, u8)> {
    let pm = &pool.pm;
    pool.layout.dentry_id(d)?;
    if pm.load_u64(d + dentry::STATE) & dentry::VALID == 0 || pm.load_u64(d + dentry::PARENT) != dir
    {
        return None;
    }
    let (len, dtype) = dentry::split_name_len(pm.load_u64(d + dentry::NAME_LEN));
    if len == 0 || len > dentry::NAME_MAX {
        return None;
    }
    Some((len, dtype))
}

/// The index entry of the committed dentry `d` in `slot`, of type `dtype`.
fn entry_at<B: Backend>(pool: &Pool<B>, d: u64, slot: u64, dtype: u8) -> Entry {
    Entry {
        state: State::Ready,
        ino: pool.pm.load_u64(d + dentry::INO),
        dentry: d,
        slot,
        dtype,
        pos: 0,
    }
}
