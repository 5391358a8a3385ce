//! Recovery after an unclean close: replay the lanes' journals, then walk the namespace
//! from the root through the directory logs. What the walk reaches is in use; every
//! torn create, unlink or rename is judged by the dentry's valid bit, its parent field
//! and the inode's own number, and what nothing reaches is reclaimed. Link counts are
//! recounted from the dentries found. The walk yields the allocators' state (in a
//! hybrid pool, the device blocks regular files' extents name too).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::alloc::UsedSets;
use crate::format::{dentry, dirlog, extents, inode, Layout, ROOT_INO};
use crate::log::cwon::{self, Verdict};
use crate::log::journal::{self, Replay};
use crate::pmem::{Backend, Pm};
use crate::progress::Progress;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    pub journals_replayed: usize,
    pub journals_torn: usize,
    pub directories: u64,
    pub files: u64,
    pub slots_cleared: u64,
    pub dentries_dropped: u64,
    pub nlinks_fixed: u64,
    pub inodes_reclaimed: u64,
    /// Damage found that recovery could only cut away (details in words).
    pub problems: Vec<String>,
    /// Files whose map marks speculative preallocation (a growing write's, outstanding
    /// at the crash): trimmed once the allocators exist (`data::prealloc`).
    pub speculative: Vec<u64>,
}

pub const S_IFMT: u32 = libc::S_IFMT;
pub const S_IFDIR: u32 = libc::S_IFDIR;

pub fn is_dir(mode: u32) -> bool {
    mode & S_IFMT == S_IFDIR
}

/// Run recovery on `pm`; returns what is in use and what was done. Lanes' journals
/// replay in parallel, the namespace walk shares out directories among threads, and
/// the link-count and reclaim passes split the inode and dentry tables by lane.
/// `cwon`: the pool has `INCOMPAT_CWON`, so every valid dentry's check word is judged
/// (`log::cwon`).
pub fn recover<B: Backend>(
    pm: &Pm<B>,
    l: &Layout,
    cwon: bool,
    progress: &dyn Progress,
) -> Result<(UsedSets, RecoveryReport), String> {
    recover_keeping(pm, l, cwon, progress, &[])
}

/// [`recover`] of a pool that processes still use (the repair of a runtime whose
/// process died): the inodes in `keep` are open in a live process, so even those no
/// name reaches any more (unlinked while open) keep their number and blocks.
pub fn recover_keeping<B: Backend>(
    pm: &Pm<B>,
    l: &Layout,
    cwon: bool,
    progress: &dyn Progress,
    keep: &[u64],
) -> Result<(UsedSets, RecoveryReport), String> {
    let threads = workers(l);
    let mut rep = RecoveryReport::default();
    progress.phase("replaying journals", Some(l.lanes() as u64));
    let replays: Vec<Replay> = on_threads(threads, |t| {
        let out: Vec<Replay> = (t as u32..l.lanes())
            .step_by(threads)
            .map(|lane| {
                let r = journal::replay(pm, l, lane);
                progress.advance(1);
                r
            })
            .collect();
        let _ = pm.fence();
        out
    })
    .into_iter()
    .flatten()
    .collect();
    for r in replays {
        match r {
            Replay::Empty => {}
            Replay::Replayed(_) => rep.journals_replayed += 1,
            Replay::Torn => rep.journals_torn += 1,
        }
    }
    let shared = Shared {
        pm,
        l,
        blocks: AtomicBits::new(l.data_blocks),
        device: AtomicBits::new(l.geo.device_blocks),
        inodes: AtomicBits::new(l.total_inodes()),
        dentries: AtomicBits::new(l.total_dentries()),
        links: (0..l.total_inodes()).map(|_| AtomicU32::new(0)).collect(),
        queue: Mutex::new(Vec::new()),
        busy: AtomicUsize::new(0),
        progress,
        cwon,
    };
    shared.inodes.set(0);
    shared.dentries.set(0);
    let root = shared.start()?;
    progress.phase("walking the namespace (entries)", None);
    let reports = on_threads(threads, |_| {
        let mut w = Walker {
            sh: &shared,
            rep: RecoveryReport::default(),
        };
        w.run();
        let _ = shared.pm.fence();
        w.rep
    });
    for r in reports {
        rep.merge(r);
    }
    rep.merge(root);
    rep.merge(shared.keep_open(keep));
    progress.phase(
        "recounting links, reclaiming (inodes and dentries)",
        Some((0..l.lanes()).map(|lane| lane_span(l, lane)).sum()),
    );
    let fixes = on_threads(threads, |t| {
        let sh = &shared;
        let mut r = RecoveryReport::default();
        for lane in (t as u32..sh.l.lanes()).step_by(threads) {
            sh.fix_link_counts(lane, &mut r);
            sh.reclaim(lane, &mut r);
            sh.progress.advance(lane_span(sh.l, lane));
        }
        let _ = sh.pm.fence();
        r
    });
    for r in fixes {
        rep.merge(r);
    }
    let used = UsedSets {
        blocks: shared.blocks.into_plain(),
        inodes: shared.inodes.into_plain(),
        dentries: shared.dentries.into_plain(),
        device: shared.device.into_plain(),
    };
    Ok((used, rep))
}

/// Inode and dentry slots below which recovery runs on the calling thread alone:
/// each pass's threads cost tens of microseconds to start, more than a small pool's
/// whole walk (a 1 MiB pool's recovery took 3 passes x 2 thread starts, most of its
/// time, before).
const SMALL_POOL_SLOTS: u64 = 1 << 16;

/// Threads for recovery's passes: one per CPU, at most one per lane, one alone for a
/// small pool.
fn workers(l: &Layout) -> usize {
    if l.total_inodes() + l.total_dentries() < SMALL_POOL_SLOTS {
        return 1;
    }
    crate::cpu::count().min(l.lanes() as usize).max(1)
}

/// `work(t)` for each `t` in `0..threads`, each on a thread of its own, or on the
/// calling thread when there is one.
fn on_threads<T: Send>(threads: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    if threads == 1 {
        return vec![work(0)];
    }
    std::thread::scope(|sc| {
        let work = &work;
        let hs: Vec<_> = (0..threads).map(|t| sc.spawn(move || work(t))).collect();
        hs.into_iter()
            .map(|h| h.join().expect("recovery thread"))
            .collect()
    })
}

/// The inodes and dentries of one lane: the unit of the fixing phase's progress.
fn lane_span(l: &Layout, lane: u32) -> u64 {
    let (i, d) = (l.lane_inodes(lane), l.lane_dentries(lane));
    (i.end - i.start) + (d.end - d.start)
}

impl RecoveryReport {
    fn merge(&mut self, o: RecoveryReport) {
        self.journals_replayed += o.journals_replayed;
        self.journals_torn += o.journals_torn;
        self.directories += o.directories;
        self.files += o.files;
        self.slots_cleared += o.slots_cleared;
        self.dentries_dropped += o.dentries_dropped;
        self.nlinks_fixed += o.nlinks_fixed;
        self.inodes_reclaimed += o.inodes_reclaimed;
        self.problems.extend(o.problems);
        self.speculative.extend(o.speculative);
    }
}

/// A bitmap threads mark concurrently.
struct AtomicBits(Vec<AtomicU64>);

impl AtomicBits {
    fn new(n: u64) -> Self {
        AtomicBits((0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
    }
    /// Set bit `i`; true if it was already set.
    fn set(&self, i: u64) -> bool {
        let bit = 1u64 << (i % 64);
        self.0[(i / 64) as usize].fetch_or(bit, Ordering::AcqRel) & bit != 0
    }
    fn get(&self, i: u64) -> bool {
        self.0[(i / 64) as usize].load(Ordering::Acquire) & (1 << (i % 64)) != 0
    }
    fn into_plain(self) -> Vec<u64> {
        self.0.into_iter().map(AtomicU64::into_inner).collect()
    }
}

/// State the walking threads share.
struct Shared<'a, B: Backend> {
    pm: &'a Pm<B>,
    l: &'a Layout,
    blocks: AtomicBits,
    /// A hybrid pool's device blocks (regular files' data); empty otherwise.
    device: AtomicBits,
    inodes: AtomicBits,
    dentries: AtomicBits,
    /// Dentries naming each inode; for directories, 2 + subdirectories.
    links: Vec<AtomicU32>,
    /// Directories waiting to be walked.
    queue: Mutex<Vec<u64>>,
    /// Threads walking a directory right now (the walk ends when none is and the
    /// queue is empty).
    busy: AtomicUsize,
    progress: &'a dyn Progress,
    /// Judge dentries' check words (`log::cwon`).
    cwon: bool,
}

struct Walker<'s, 'a, B: Backend> {
    sh: &'s Shared<'a, B>,
    rep: RecoveryReport,
}

impl<B: Backend> Shared<'_, B> {
    fn inode_ok(&self, ino: u64) -> bool {
        self.l.ino_valid(ino) && self.pm.load_u64(self.l.inode_addr(ino) + inode::INO) == ino
    }
    fn mode(&self, ino: u64) -> u32 {
        self.pm.load_u64(self.l.inode_addr(ino) + inode::MODE) as u32
    }

    /// Check the root and queue it.
    fn start(&self) -> Result<RecoveryReport, String> {
        if !self.inode_ok(ROOT_INO) || !is_dir(self.mode(ROOT_INO)) {
            return Err("the root directory's inode is damaged".into());
        }
        self.inodes.set(ROOT_INO);
        self.links[ROOT_INO as usize].store(2, Ordering::Relaxed);
        let mut w = Walker {
            sh: self,
            rep: RecoveryReport::default(),
        };
        w.mark_inode_blocks(ROOT_INO);
        self.queue.lock().push(ROOT_INO);
        Ok(w.rep)
    }

    /// Keep the inodes live processes have open (see [`recover_keeping`]) that the walk
    /// did not reach: unlinked while open, so no name counts for them.
    fn keep_open(&self, keep: &[u64]) -> RecoveryReport {
        let mut w = Walker {
            sh: self,
            rep: RecoveryReport::default(),
        };
        for &ino in keep {
            if self.inode_ok(ino) && !self.inodes.set(ino) {
                w.mark_inode_blocks(ino);
                // A directory removed while some process works in it keeps its log.
                let mut page = self.pm.load_u64(self.l.inode_addr(ino) + inode::DIR_LOG);
                while let Some(b) = self.l.block_of(page).filter(|_| is_dir(self.mode(ino))) {
                    if self.blocks.set(b) {
                        break;
                    }
                    page = self.pm.load_u64(page + crate::format::dirlog::NEXT);
                }
            }
        }
        w.rep
    }

    fn fix_link_counts(&self, lane: u32, rep: &mut RecoveryReport) {
        for ino in self.l.lane_inodes(lane) {
            if !self.inodes.get(ino) {
                continue;
            }
            let want = self.links[ino as usize].load(Ordering::Relaxed) as u64;
            let at = self.l.inode_addr(ino) + inode::NLINK;
            if self.pm.load_u64(at) != want {
                let mut b = self.pm.batch();
                b.write_u64(at, want);
                b.flushed();
                rep.nlinks_fixed += 1;
            }
        }
    }

    /// Free what nothing reaches: inodes still stamped in use, dentries still valid.
    fn reclaim(&self, lane: u32, rep: &mut RecoveryReport) {
        for ino in self.l.lane_inodes(lane) {
            let at = self.l.inode_addr(ino) + inode::INO;
            if !self.inodes.get(ino) && self.pm.load_u64(at) != 0 {
                let mut b = self.pm.batch();
                b.write_u64(at, 0);
                b.flushed();
                rep.inodes_reclaimed += 1;
            }
        }
        for id in self.l.lane_dentries(lane) {
            let at = self.l.dentry_addr(id) + dentry::STATE;
            if !self.dentries.get(id) && self.pm.load_u64(at) & dentry::VALID != 0 {
                let mut b = self.pm.batch();
                b.write_u64(at, 0);
                b.flushed();
            }
        }
    }
}

impl<B: Backend> Walker<'_, '_, B> {
    /// Take directories from the shared queue until the whole tree is walked.
    fn run(&mut self) {
        loop {
            let next = {
                let mut q = self.sh.queue.lock();
                let d = q.pop();
                if d.is_some() {
                    self.sh.busy.fetch_add(1, Ordering::AcqRel);
                }
                d
            };
            match next {
                Some(dir) => {
                    self.rep.directories += 1;
                    let mut found = Vec::new();
                    self.walk_dir(dir, &mut found);
                    if !found.is_empty() {
                        self.sh.queue.lock().extend(found);
                    }
                    self.sh.busy.fetch_sub(1, Ordering::AcqRel);
                }
                None if self.sh.busy.load(Ordering::Acquire) == 0 => {
                    // Re-check under the lock: a busy thread may have just pushed.
                    if self.sh.queue.lock().is_empty() && self.sh.busy.load(Ordering::Acquire) == 0
                    {
                        return;
                    }
                }
                None => std::thread::yield_now(),
            }
        }
    }

    fn walk_dir(&mut self, dir: u64, found: &mut Vec<u64>) {
        let (pm, l) = (self.sh.pm, self.sh.l);
        let mut page = pm.load_u64(l.inode_addr(dir) + inode::DIR_LOG);
        let mut prev_link = l.inode_addr(dir) + inode::DIR_LOG;
        while page != 0 {
            let owned = l
                .block_of(page)
                .filter(|_| pm.load_u64(page + dirlog::OWNER) == dir)
                .filter(|&b| !self.sh.blocks.set(b));
            if owned.is_none() {
                self.rep
                    .problems
                    .push(format!("directory {dir}: bad log page link {page:#x}, cut"));
                let mut fix = pm.batch();
                fix.write_u64(prev_link, 0);
                fix.flushed();
                return;
            }
            let mut taken = 0;
            for i in 0..dirlog::SLOTS_PER_PAGE {
                let slot = dirlog::slot_addr(page, i);
                let v = pm.load_u64(slot);
                if v == 0 {
                    continue;
                }
                if self.take_entry(dir, slot, v, found) {
                    taken += 1;
                } else {
                    let mut fix = pm.batch();
                    fix.write_u64(slot, 0);
                    fix.flushed();
                    self.rep.slots_cleared += 1;
                }
            }
            self.sh.progress.advance(taken);
            prev_link = page + dirlog::NEXT;
            page = pm.load_u64(page + dirlog::NEXT);
        }
    }

    /// Accept the entry in `slot` (pointing at dentry `addr`) or say it must go.
    fn take_entry(&mut self, dir: u64, slot: u64, addr: u64, found: &mut Vec<u64>) -> bool {
        let (pm, l, sh) = (self.sh.pm, self.sh.l, self.sh);
        let Some(id) = l.dentry_id(addr) else {
            return false;
        };
        if pm.load_u64(addr + dentry::STATE) & dentry::VALID == 0
            || pm.load_u64(addr + dentry::PARENT) != dir
            || pm.load_u64(addr + dentry::SLOT) != slot
            || sh.dentries.get(id)
        {
            return false;
        }
        let ino = pm.load_u64(addr + dentry::INO);
        let (name_len, _) = dentry::split_name_len(pm.load_u64(addr + dentry::NAME_LEN));
        // An unlink (or rmdir) of a last name clears the dentry, its slot and the
        // inode's INO word in one fence: if only the INO store landed, the entry names
        // a freed inode. That is a torn unlink, not damage: the name goes quietly.
        if l.ino_valid(ino) && pm.load_u64(l.inode_addr(ino) + inode::INO) == 0 {
            let mut b = pm.batch();
            b.write_u64(addr + dentry::STATE, 0);
            b.flushed();
            self.rep.dentries_dropped += 1;
            return false;
        }
        let verdict = if sh.cwon {
            cwon::verdict(pm, l, addr, ino)
        } else {
            Verdict::Settled
        };
        // A create (link, rename) some of whose stores did not land: it never
        // happened, as a crash before its commit would have left it.
        if verdict == Verdict::Torn {
            let mut b = pm.batch();
            b.write_u64(addr + dentry::STATE, 0);
            b.flushed();
            self.rep.dentries_dropped += 1;
            return false;
        }
        if !sh.inode_ok(ino) || name_len == 0 || name_len > dentry::NAME_MAX || ino == ROOT_INO {
            self.drop_dentry(
                addr,
                format!("directory {dir}: entry at {addr:#x} names a bad inode {ino}"),
            );
            return false;
        }
        if sh.dentries.set(id) {
            return false; // another slot claimed this dentry first
        }
        // A whole create: from now on its inode may change (link counts below).
        if verdict == Verdict::Fresh {
            if let Some(c) = cwon::settled_check(pm, addr) {
                let mut b = pm.batch();
                b.write_u64(addr + dentry::CHECK, c);
                b.flushed();
            }
        }
        let child_is_dir = is_dir(sh.mode(ino));
        let first = !sh.inodes.set(ino);
        if child_is_dir {
            if !first {
                // A second link to a directory (or a cycle): cut it.
                self.drop_dentry(
                    addr,
                    format!(
                        "directory {dir}: entry at {addr:#x} is a second link to directory {ino}"
                    ),
                );
                return false;
            }
            sh.links[ino as usize].store(2, Ordering::Release);
            sh.links[dir as usize].fetch_add(1, Ordering::AcqRel);
            found.push(ino);
        } else {
            sh.links[ino as usize].fetch_add(1, Ordering::AcqRel);
        }
        if first {
            self.mark_inode_blocks(ino);
            if !child_is_dir {
                self.rep.files += 1;
            }
        }
        true
    }

    fn drop_dentry(&mut self, addr: u64, why: String) {
        let mut b = self.sh.pm.batch();
        b.write_u64(addr + dentry::STATE, 0);
        b.flushed();
        self.rep.dentries_dropped += 1;
        self.rep.problems.push(why);
    }

    /// Mark the data blocks, tree nodes and xattr block of `ino` as used.
    fn mark_inode_blocks(&mut self, ino: u64) {
        let (pm, l) = (self.sh.pm, self.sh.l);
        let off = l.inode_addr(ino);
        let mut nodes = Vec::new();
        match extents::read_map(pm, l, off, &mut nodes) {
            Ok(ext) => {
                let on_device = l.extents_on_device(self.sh.mode(ino));
                for e in ext {
                    for b in e.pblk..e.pblk + e.len as u64 {
                        if on_device {
                            self.mark_device_block(ino, b);
                        } else {
                            self.mark_block(ino, b);
                        }
                    }
                }
            }
            Err(e) => self.rep.problems.push(format!("inode {ino}: {e}")),
        }
        for n in nodes {
            if let Some(b) = l.block_of(n) {
                self.mark_block(ino, b);
            }
        }
        self.note_speculative(ino);
        let x = pm.load_u64(off + inode::XATTR);
        if x != 0 {
            match crate::format::xattr::read_set(pm, l, x) {
                Ok(set) => {
                    for b in set.blocks {
                        self.mark_block(ino, b);
                    }
                }
                Err(e) => self.rep.problems.push(format!("inode {ino}: {e}")),
            }
        }
    }

    /// Remember `ino` if its map word marks speculative preallocation.
    fn note_speculative(&mut self, ino: u64) {
        let word = self.sh.pm.load_u64(self.sh.l.inode_addr(ino) + inode::MAP);
        if inode::MapWord::decode(word).is_some_and(|w| w.spec != 0) {
            self.rep.speculative.push(ino);
        }
    }

    fn mark_block(&mut self, ino: u64, b: u64) {
        if self.sh.blocks.set(b) {
            self.rep
                .problems
                .push(format!("inode {ino}: block {b} is owned twice"));
        }
    }

    fn mark_device_block(&mut self, ino: u64, b: u64) {
        if self.sh.device.set(b) {
            self.rep
                .problems
                .push(format!("inode {ino}: device block {b} is owned twice"));
        }
    }
}
