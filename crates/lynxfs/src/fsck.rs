//! fsck: a read-only check of every invariant of an open pool, and a repair that forces
//! the recovery walk.
//!
//! [`check`] walks the namespace from the root, independently of recovery, and reports
//! each broken invariant in plain words: superblock copies valid and agreeing; journals
//! empty; every reachable inode valid (its number in its `ino` word, a known file type,
//! a readable block map, a sane xattr block); link counts right (files: the dentries
//! naming them; directories: 2 + subdirectories); no data block owned twice (extents,
//! extent-tree nodes, xattr blocks, directory log pages; a hybrid pool's device blocks
//! apart, numbered on their own); no leak or worse (the
//! allocator's used sets against what is reachable); every directory log consistent
//! (slot and dentry agree, names 1..=255 bytes without '/' or NUL, no duplicate name,
//! no directory linked twice, no cycle); and back pointers.
//!
//! **Clean pools.** A pool closed cleanly is trusted at open: its saved allocator
//! bitmaps are loaded and nothing is walked. Damage in such a pool is therefore not
//! noticed by `open`, but it is by [`check`], which always walks everything. [`repair`]
//! then runs the recovery walk on the open pool (clean or not), plus a stricter pass
//! that cuts what recovery tolerates (bad names, duplicate names, unknown file types,
//! unreadable maps, blocks owned twice, bad xattr blocks, stale back pointers), and
//! rebuilds the allocators from the walk. Repair loses what it cuts: a file whose map is
//! unreadable becomes empty, an entry with a bad name disappears.
//!
//! Only a directory's back pointer is checked: it is the only one followed (for `..`
//! and getcwd), and a directory has one name, which every rename moves it to. A
//! non-directory's names the entry that made it or last moved it, which unlinking that
//! name while another hard link remains (or renaming over it) leaves removed: nothing
//! reads it but `log::cwon::settle`, which checks the entry still names the inode.

use std::collections::HashSet;

use crate::alloc::{bit, Allocators, UsedSets};
use crate::format::superblock::{Superblock, SB_LEN};
use crate::format::{dentry, dirlog, extents, inode, journal, Layout, ROOT_INO};
use crate::log::{cwon, recover, RecoveryReport};
use crate::pmem::{Backend, Pm};
use crate::pool::Pool;
use crate::progress::{Progress, Quiet};

/// What [`check`] found.
#[derive(Debug, Default, Clone)]
pub struct FsckReport {
    /// Broken invariants, one sentence each.
    pub problems: Vec<String>,
    pub directories: u64,
    pub files: u64,
    pub symlinks: u64,
    pub others: u64,
    pub dentries: u64,
    pub blocks: u64,
    /// A hybrid pool's device blocks in use (regular files' data); 0 otherwise.
    pub device_blocks: u64,
    /// Of `blocks` (a hybrid pool's: `device_blocks`), those reserved past the end of growing files (speculative
    /// preallocation, `data::prealloc`): owned, so not leaks, and not file data.
    pub speculative: u64,
}

impl FsckReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// What [`repair`] did.
#[derive(Debug, Default, Clone)]
pub struct RepairReport {
    /// The recovery walk's report (the last one, if it ran twice).
    pub recovery: RecoveryReport,
    /// What the recovery walk cut or fixed, across its runs.
    pub recovery_problems: Vec<String>,
    /// What the stricter pass changed, one sentence each.
    pub fixes: Vec<String>,
}

/// Check the two superblock copies as raw bytes (for example read from the file before
/// it is opened, since a read-write open rewrites the older copy). Returns the problems.
pub fn check_superblock_bytes(a: &[u8; SB_LEN], b: &[u8; SB_LEN]) -> Vec<String> {
    let mut out = Vec::new();
    let da = Superblock::decode(a);
    let db = Superblock::decode(b);
    for (name, d) in [("A", &da), ("B", &db)] {
        if let Err(p) = d {
            out.push(format!("superblock copy {name} is invalid: {p}"));
        }
    }
    if let (Ok(x), Ok(y)) = (&da, &db) {
        out.extend(superblocks_disagree(x, y));
    }
    for (name, d, want_odd) in [("A", &da, false), ("B", &db, true)] {
        if let Ok(s) = d {
            if (s.generation % 2 == 1) != want_odd {
                out.push(format!(
                    "superblock copy {name} holds generation {}, which belongs in the other copy",
                    s.generation
                ));
            }
        }
    }
    out
}

/// Read the two superblock copies of a pool file and check them (see
/// [`check_superblock_bytes`]). Fails only if the file cannot be read.
pub fn check_file_superblocks(path: &std::path::Path) -> std::io::Result<Vec<String>> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path)?;
    let mut a = [0u8; SB_LEN];
    let mut b = [0u8; SB_LEN];
    // Short reads leave zeros, which fail the magic check.
    let _ = f.read_at(&mut a, crate::format::layout::SB_A)?;
    let _ = f.read_at(&mut b, crate::format::layout::SB_B)?;
    Ok(check_superblock_bytes(&a, &b))
}

fn superblocks_disagree(x: &Superblock, y: &Superblock) -> Vec<String> {
    let mut out = Vec::new();
    if x.geo != y.geo || x.layout != y.layout {
        out.push("the superblock copies disagree on the geometry".into());
    }
    if x.uuid != y.uuid || x.created_ns != y.created_ns {
        out.push("the superblock copies belong to different pools (uuid or mkfs time)".into());
    }
    if x.generation.abs_diff(y.generation) != 1 {
        out.push(format!(
            "the superblock copies' generations {} and {} are not consecutive",
            x.generation, y.generation
        ));
    }
    out
}

/// Check every invariant of an open pool. Reads only; nothing may run on the pool
/// meanwhile.
pub fn check<B: Backend>(pool: &Pool<B>) -> FsckReport {
    check_with_progress(pool, &Quiet)
}

/// [`check`], telling `progress` how the walk goes (in directory entries).
pub fn check_with_progress<B: Backend>(pool: &Pool<B>, progress: &dyn Progress) -> FsckReport {
    let mut w = Walker::new(&pool.pm, &pool.layout, false, progress);
    w.cwon = pool.cwon;
    check_superblocks(pool, &mut w.rep);
    check_journals(&pool.pm, &pool.layout, &mut w.rep);
    let space = crate::meta::Usage::of_pool(pool);
    let in_use = space.dentries_total - space.dentries_free;
    progress.phase("checking the namespace (entries)", Some(in_use));
    w.walk();
    w.finish();
    if let Some(t) = pool.txn() {
        t.undo().mark(&mut w.blocks);
        t.mark_awaiting(pool, &mut w.device, &mut w.blocks);
    }
    let used = pool.alloc.used_sets();
    let extra = compare_used(&Walker::view(&w), &used);
    let mut rep = w.rep;
    rep.problems.extend(extra);
    if pool.device().is_some() {
        check_device(pool, &used, &mut rep);
    }
    rep
}

/// A hybrid pool's other half: the device's header still names this pool, and every
/// block of file data reads back (what does not is named: those bytes are lost).
fn check_device<B: Backend>(pool: &Pool<B>, used: &UsedSets, rep: &mut FsckReport) {
    use crate::data::store::DataStore;
    let (Some(dev), Some(h)) = (pool.device(), pool.device_header()) else {
        return;
    };
    match crate::pool::device::read_header(dev.file()) {
        Ok(Ok(now)) if now == *h => {}
        Ok(Ok(_)) => rep.problems.push(format!(
            "data device {}: its header changed while open",
            dev.path().display()
        )),
        Ok(Err(p)) => rep
            .problems
            .push(format!("data device {}: {p}", dev.path().display())),
        Err(e) => rep.problems.push(format!(
            "data device {}: its header cannot be read: {e}",
            dev.path().display()
        )),
    }
    let store = pool.data();
    let mut buf = vec![0u8; 64 * crate::format::BLOCK as usize];
    for ino in (1..pool.layout.total_inodes()).filter(|&i| bit(&used.inodes, i)) {
        let mode = pool.pm.load_u64(pool.layout.inode_addr(ino) + inode::MODE) as u32;
        if mode & libc::S_IFMT != libc::S_IFREG {
            continue;
        }
        let Ok(m) = crate::data::map::read(pool, ino) else {
            continue; // the walk reports a bad map
        };
        for e in m.extents.iter() {
            let mut done = 0u64;
            while done < e.len as u64 {
                let n = (e.len as u64 - done).min(64);
                let bytes = &mut buf[..(n * crate::format::BLOCK) as usize];
                if store.read(e.pblk + done, 0, bytes).is_err() {
                    let from = (e.lblk as u64 + done) * crate::format::BLOCK;
                    rep.problems.push(format!(
                        "inode {ino}: file bytes {from}..{} cannot be read from the data \
                         device (lost)",
                        from + n * crate::format::BLOCK
                    ));
                }
                done += n;
            }
        }
    }
}

/// Repair an open pool: run the recovery walk (even if the pool was closed cleanly),
/// cut what recovery tolerates but [`check`] does not, and rebuild the allocators from
/// the walk. Nothing else may run on the pool. Fails when the pool cannot be repaired.
pub fn repair<B: Backend>(pool: &mut Pool<B>) -> Result<RepairReport, String> {
    repair_with_progress(pool, &Quiet)
}

/// [`repair`], telling `progress` how its walks go.
pub fn repair_with_progress<B: Backend>(
    pool: &mut Pool<B>,
    progress: &dyn Progress,
) -> Result<RepairReport, String> {
    let mut out = RepairReport::default();
    // Recovery refuses a damaged root: rebuild the root inode's identity first.
    fix_root(&pool.pm, &pool.layout, &mut out.fixes);
    let (_, rep) = recover(&pool.pm, &pool.layout, pool.cwon, progress)?;
    out.recovery_problems.extend(rep.problems.iter().cloned());
    out.recovery = rep;
    let mut w = Walker::new(&pool.pm, &pool.layout, true, progress);
    w.cwon = pool.cwon;
    progress.phase("repairing the namespace (entries)", None);
    w.walk();
    w.finish();
    out.fixes.extend(w.fixes.iter().cloned());
    // The stricter pass only cuts: a second recovery walk reclaims what it cut loose,
    // recounts links and yields the allocators' state.
    let (mut used, rep) = recover(&pool.pm, &pool.layout, pool.cwon, progress)?;
    out.recovery_problems.extend(rep.problems.iter().cloned());
    out.recovery = rep;
    if let Some(t) = pool.txn() {
        t.undo().mark(&mut used.blocks);
    }
    pool.alloc = Allocators::from_used(&pool.layout, &used)
        .with_reserve(&pool.layout, pool.superblock().reserved_percent);
    Ok(out)
}

fn fix_root<B: Backend>(pm: &Pm<B>, l: &Layout, fixes: &mut Vec<String>) {
    let at = l.inode_addr(ROOT_INO);
    let ino = pm.load_u64(at + inode::INO);
    let mode = pm.load_u64(at + inode::MODE);
    let mode_ok = mode >> 32 == 0 && (mode as u32) & libc::S_IFMT == libc::S_IFDIR;
    if ino == ROOT_INO && mode_ok {
        return;
    }
    let mut b = pm.batch();
    b.write_u64(at + inode::INO, ROOT_INO);
    if !mode_ok {
        b.write_u64(
            at + inode::MODE,
            (libc::S_IFDIR | (mode as u32 & 0o7777)) as u64,
        );
    }
    let _ = b.persist();
    fixes.push("the root inode was damaged: its number and directory type were restored".into());
}

fn check_superblocks<B: Backend>(pool: &Pool<B>, rep: &mut FsckReport) {
    let cur = pool.superblock();
    let mut copies = Vec::new();
    for (name, off) in [
        ("A", crate::format::layout::SB_A),
        ("B", crate::format::layout::SB_B),
    ] {
        let mut buf = [0u8; SB_LEN];
        pool.pm.read(off, &mut buf);
        match Superblock::decode(&buf) {
            Ok(s) => {
                if s.home() != off {
                    rep.problems.push(format!(
                        "superblock copy {name} holds generation {}, which belongs in the other copy",
                        s.generation
                    ));
                }
                copies.push(s);
            }
            Err(p) => rep
                .problems
                .push(format!("superblock copy {name} is invalid: {p}")),
        }
    }
    if copies.len() == 2 {
        rep.problems
            .extend(superblocks_disagree(&copies[0], &copies[1]));
    }
    if !copies.contains(&cur) {
        rep.problems
            .push("neither superblock copy matches the superblock in use".into());
    }
    if cur.layout != pool.layout {
        rep.problems
            .push("the superblock's layout differs from the layout in use".into());
    }
}

fn check_journals<B: Backend>(pm: &Pm<B>, l: &Layout, rep: &mut FsckReport) {
    for lane in 0..l.lanes() {
        let c = pm.load_u64(l.journal_addr(lane) + journal::COMMIT);
        if c != 0 {
            rep.problems.push(format!(
                "the journal of lane {lane} is not empty (commit word {c:#x})"
            ));
        }
    }
}

/// The file type bits of a mode, if they name a known type.
fn known_type(mode: u64) -> bool {
    if mode >> 32 != 0 {
        return false;
    }
    matches!(
        mode as u32 & libc::S_IFMT,
        libc::S_IFREG
            | libc::S_IFDIR
            | libc::S_IFLNK
            | libc::S_IFCHR
            | libc::S_IFBLK
            | libc::S_IFIFO
            | libc::S_IFSOCK
    )
}

fn is_dir(mode: u64) -> bool {
    mode as u32 & libc::S_IFMT == libc::S_IFDIR
}

fn dtype(mode: u64) -> u64 {
    ((mode as u32 & libc::S_IFMT) >> 12) as u64
}

/// Items of a set, for a message: the count and the first few.
fn some(ids: &[u64]) -> String {
    let first: Vec<String> = ids.iter().take(8).map(|i| i.to_string()).collect();
    if ids.len() > 8 {
        format!("{} ... ({} in all)", first.join(", "), ids.len())
    } else {
        first.join(", ")
    }
}

/// A walk of the namespace from the root. In fix mode it also cuts what it rejects.
struct Walker<'a, B: Backend> {
    pm: &'a Pm<B>,
    l: &'a Layout,
    fix: bool,
    rep: FsckReport,
    fixes: Vec<String>,
    blocks: Vec<u64>,
    /// A hybrid pool's device blocks (numbered on their own).
    device: Vec<u64>,
    inodes: Vec<u64>,
    dentries: Vec<u64>,
    /// Accepted dentries naming each inode (files), or 2 + subdirectories (dirs).
    links: Vec<u32>,
    /// The first accepted dentry naming each inode.
    first_dentry: Vec<u64>,
    /// The owner of each reached block (inode number), for messages.
    owner: std::collections::HashMap<u64, u64>,
    /// The same for device blocks.
    device_owner: std::collections::HashMap<u64, u64>,
    progress: &'a dyn Progress,
    /// The pool has `INCOMPAT_CWON`: every valid dentry's check word must match.
    cwon: bool,
}

/// The reachable sets, for comparing with the allocators.
struct View<'v> {
    blocks: &'v [u64],
    device: &'v [u64],
    inodes: &'v [u64],
    dentries: &'v [u64],
    l: &'v Layout,
}

impl<'a, B: Backend> Walker<'a, B> {
    fn new(pm: &'a Pm<B>, l: &'a Layout, fix: bool, progress: &'a dyn Progress) -> Self {
        let mut e = UsedSets::empty(l);
        // `empty` marks the root as used; the walk marks what it reaches itself.
        e.inodes[0] &= !(1 << ROOT_INO);
        Walker {
            pm,
            l,
            fix,
            rep: FsckReport::default(),
            fixes: Vec::new(),
            blocks: e.blocks,
            device: e.device,
            inodes: e.inodes,
            dentries: e.dentries,
            links: vec![0; l.total_inodes() as usize],
            first_dentry: vec![0; l.total_inodes() as usize],
            owner: Default::default(),
            device_owner: Default::default(),
            progress,
            cwon: false,
        }
    }

    fn view<'v>(w: &'v Walker<'_, B>) -> View<'v> {
        View {
            blocks: &w.blocks,
            device: &w.device,
            inodes: &w.inodes,
            dentries: &w.dentries,
            l: w.l,
        }
    }

    fn problem(&mut self, s: String) {
        self.rep.problems.push(s);
    }

    fn word(&self, ino: u64, field: u64) -> u64 {
        self.pm.load_u64(self.l.inode_addr(ino) + field)
    }

    fn set(&mut self, addr: u64, v: u64, what: String) {
        let mut b = self.pm.batch();
        b.write_u64(addr, v);
        let _ = b.persist();
        self.fixes.push(what);
    }

    fn walk(&mut self) {
        let root_ok =
            self.word(ROOT_INO, inode::INO) == ROOT_INO && is_dir(self.word(ROOT_INO, inode::MODE));
        let unknown_flags =
            (self.word(ROOT_INO, inode::MODE) >> 32) as u32 & !crate::meta::flags::SUPPORTED;
        if !root_ok || unknown_flags != 0 {
            self.problem(format!(
                "the root inode is damaged (number word {:#x}, mode {:#o})",
                self.word(ROOT_INO, inode::INO),
                self.word(ROOT_INO, inode::MODE)
            ));
            if !root_ok {
                return;
            }
        }
        UsedSets::mark(&mut self.inodes, ROOT_INO);
        self.links[ROOT_INO as usize] = 2;
        self.inode_blocks(ROOT_INO);
        let mut stack = vec![ROOT_INO];
        while let Some(dir) = stack.pop() {
            self.rep.directories += 1;
            self.walk_dir(dir, &mut stack);
        }
    }

    fn take_block(&mut self, ino: u64, b: u64, what: &str) -> bool {
        if UsedSets::mark(&mut self.blocks, b) {
            let other = self.owner.get(&b).copied().unwrap_or(0);
            self.problem(format!(
                "data block {b} ({what} of inode {ino}) is also used by inode {other}"
            ));
            return false;
        }
        self.owner.insert(b, ino);
        true
    }

    fn take_device_block(&mut self, ino: u64, b: u64) {
        if UsedSets::mark(&mut self.device, b) {
            let other = self.device_owner.get(&b).copied().unwrap_or(0);
            self.problem(format!(
                "device block {b} (file data of inode {ino}) is also used by inode {other}"
            ));
            return;
        }
        self.device_owner.insert(b, ino);
    }

    /// Check the map and xattr block of `ino` and take their blocks.
    /// How many of `ino`'s mapped blocks (`ext`) are speculative preallocation.
    fn speculative_blocks(&self, ino: u64, ext: &[inode::Extent]) -> u64 {
        let at = self.l.inode_addr(ino);
        match inode::MapWord::decode(self.pm.load_u64(at + inode::MAP)) {
            Some(w) if w.spec != 0 => {
                let size = self.pm.load_u64(at + inode::SIZE);
                crate::data::prealloc::blocks_from(ext, crate::data::prealloc::start(w.spec, size))
            }
            _ => 0,
        }
    }

    fn inode_blocks(&mut self, ino: u64) {
        let off = self.l.inode_addr(ino);
        let mut nodes = Vec::new();
        let mut map_bad = None;
        let mut ext = Vec::new();
        match extents::read_map(self.pm, self.l, off, &mut nodes) {
            Ok(e) => ext = e,
            Err(e) => map_bad = Some(e),
        }
        let on_device = self.l.extents_on_device(self.word(ino, inode::MODE) as u32);
        if map_bad.is_none() {
            // Nodes and extents must not collide with blocks already taken, nor with
            // each other (a hybrid pool's file data: with device blocks).
            let mut mine = HashSet::new();
            let mut mine_dev = HashSet::new();
            'scan: for n in &nodes {
                let b = self.l.block_of(*n).unwrap_or(u64::MAX);
                if bit(&self.blocks, b) || !mine.insert(b) {
                    map_bad = Some(format!("extent node block {b} is used twice"));
                    break 'scan;
                }
            }
            if map_bad.is_none() {
                let (what, taken, owner, mine) = match on_device {
                    true => ("device", &self.device, &self.device_owner, &mut mine_dev),
                    false => ("data", &self.blocks, &self.owner, &mut mine),
                };
                'ext: for e in &ext {
                    for b in e.pblk..e.pblk + e.len as u64 {
                        if bit(taken, b) || !mine.insert(b) {
                            let other = owner.get(&b).copied().unwrap_or(ino);
                            map_bad =
                                Some(format!("{what} block {b} is also used by inode {other}"));
                            break 'ext;
                        }
                    }
                }
            }
        }
        match map_bad {
            Some(why) => {
                self.problem(format!("inode {ino}: bad block map: {why}"));
                if self.fix {
                    let mut b = self.pm.batch();
                    b.write_u64(off + inode::MAP, 0)
                        .write_u64(off + inode::SIZE, 0);
                    let _ = b.persist();
                    self.fixes.push(format!(
                        "inode {ino}: unreadable block map dropped (now empty)"
                    ));
                }
            }
            None => {
                self.rep.speculative += self.speculative_blocks(ino, &ext);
                for n in nodes {
                    let b = self.l.block_of(n).expect("checked by read_map");
                    self.take_block(ino, b, "an extent-tree node");
                }
                for e in ext {
                    for b in e.pblk..e.pblk + e.len as u64 {
                        if on_device {
                            self.take_device_block(ino, b);
                        } else {
                            self.take_block(ino, b, "file data");
                        }
                    }
                }
            }
        }
        let x = self.pm.load_u64(off + inode::XATTR);
        if x == 0 {
            return;
        }
        let set = crate::format::xattr::read_set(self.pm, self.l, x).and_then(|set| {
            match set.blocks.iter().find(|&&b| bit(&self.blocks, b)) {
                Some(&b) => Err(format!(
                    "xattr block {b} is also used by inode {}",
                    self.owner.get(&b).copied().unwrap_or(0)
                )),
                None => Ok(set),
            }
        });
        match set {
            Err(why) => {
                self.problem(format!("inode {ino}: {why}"));
                if self.fix {
                    self.set(
                        off + inode::XATTR,
                        0,
                        format!("inode {ino}: bad xattr block dropped"),
                    );
                }
            }
            Ok(set) => {
                for b in set.blocks {
                    self.take_block(ino, b, "an xattr block");
                }
            }
        }
    }

    fn walk_dir(&mut self, dir: u64, stack: &mut Vec<u64>) {
        let mut names: HashSet<Vec<u8>> = HashSet::new();
        let mut link = self.l.inode_addr(dir) + inode::DIR_LOG;
        let mut page = self.pm.load_u64(link);
        while page != 0 {
            let why = match self.l.block_of(page) {
                None => Some(format!("log page link {page:#x} is not a data block")),
                Some(b) if bit(&self.blocks, b) => Some(format!(
                    "log page link {page:#x} names block {b}, already used by inode {} (a loop or a shared page)",
                    self.owner.get(&b).copied().unwrap_or(0)
                )),
                Some(_) => {
                    let owner = self.pm.load_u64(page + dirlog::OWNER);
                    (owner != dir).then(|| format!("log page {page:#x} is owned by {owner}"))
                }
            };
            if let Some(why) = why {
                self.problem(format!("directory {dir}: {why}"));
                if self.fix {
                    self.set(
                        link,
                        0,
                        format!("directory {dir}: log chain cut at {page:#x}"),
                    );
                }
                return;
            }
            let b = self.l.block_of(page).expect("checked");
            self.take_block(dir, b, "a directory log page");
            let mut entries = 0;
            for i in 0..dirlog::SLOTS_PER_PAGE {
                let slot = dirlog::slot_addr(page, i);
                let v = self.pm.load_u64(slot);
                if v != 0 {
                    self.entry(dir, slot, v, &mut names, stack);
                    entries += 1;
                }
            }
            self.progress.advance(entries);
            link = page + dirlog::NEXT;
            page = self.pm.load_u64(link);
        }
    }

    /// Judge the entry in `slot` of `dir`, pointing at dentry `addr`.
    fn entry(
        &mut self,
        dir: u64,
        slot: u64,
        addr: u64,
        names: &mut HashSet<Vec<u8>>,
        stack: &mut Vec<u64>,
    ) {
        let Some(id) = self.l.dentry_id(addr) else {
            self.problem(format!(
                "directory {dir}: slot {slot:#x} points at {addr:#x}, which is not a dentry"
            ));
            if self.fix {
                self.set(slot, 0, format!("directory {dir}: slot {slot:#x} cleared"));
            }
            return;
        };
        let pm = self.pm;
        let state = pm.load_u64(addr + dentry::STATE);
        let parent = pm.load_u64(addr + dentry::PARENT);
        let back = pm.load_u64(addr + dentry::SLOT);
        let ino = pm.load_u64(addr + dentry::INO);
        let nl = pm.load_u64(addr + dentry::NAME_LEN);
        let (len, _) = dentry::split_name_len(nl);
        let name = if (1..=dentry::NAME_MAX).contains(&len) {
            pm.read_vec(addr + dentry::NAME, len)
        } else {
            Vec::new()
        };
        let ino_ok = self.l.ino_valid(ino) && ino != ROOT_INO && self.word(ino, inode::INO) == ino;
        let mode = if ino_ok {
            self.word(ino, inode::MODE)
        } else {
            0
        };
        let why = if state & dentry::VALID == 0 {
            Some("is not valid".to_string())
        } else if parent != dir {
            Some(format!("names parent {parent}"))
        } else if back != slot {
            Some(format!("belongs to slot {back:#x}"))
        } else if bit(&self.dentries, id) {
            Some("is also named by another slot".to_string())
        } else if name.is_empty() {
            Some(format!("has a bad name length {len}"))
        } else if name.contains(&b'/') || name.contains(&0) {
            Some(format!(
                "has a name with '/' or NUL: {:?}",
                String::from_utf8_lossy(&name)
            ))
        } else if names.contains(&name) {
            Some(format!(
                "repeats the name {:?}",
                String::from_utf8_lossy(&name)
            ))
        } else if !ino_ok {
            Some(format!("names inode {ino}, which is not a live inode"))
        } else if self.cwon && cwon::verdict(pm, self.l, addr, ino) == cwon::Verdict::Torn {
            Some("has a check word that does not match it (a torn create)".to_string())
        } else if !known_type(mode) {
            Some(format!(
                "names inode {ino}, whose mode {mode:#o} has no known file type"
            ))
        } else if is_dir(mode) && bit(&self.inodes, ino) {
            Some(format!("links directory {ino} a second time"))
        } else {
            None
        };
        if let Some(why) = why {
            self.problem(format!(
                "directory {dir}: the dentry at {addr:#x} (slot {slot:#x}) {why}"
            ));
            if self.fix {
                let mut b = pm.batch();
                b.write_u64(slot, 0);
                // Invalidate the dentry only if it really is this slot's (it may be
                // a live entry of another directory).
                if back == slot && parent == dir && !bit(&self.dentries, id) {
                    b.write_u64(addr + dentry::STATE, 0);
                }
                let _ = b.persist();
                self.fixes
                    .push(format!("directory {dir}: entry at {addr:#x} removed"));
            }
            return;
        }
        names.insert(name);
        UsedSets::mark(&mut self.dentries, id);
        self.rep.dentries += 1;
        let want_nl = len as u64 | dtype(mode) << 16;
        if nl != want_nl {
            self.problem(format!(
                "directory {dir}: the dentry at {addr:#x} has type/length word {nl:#x}, expected {want_nl:#x}"
            ));
            if self.fix {
                self.set(
                    addr + dentry::NAME_LEN,
                    want_nl,
                    format!("dentry at {addr:#x}: type corrected"),
                );
            }
        }
        let first = !UsedSets::mark(&mut self.inodes, ino);
        if first {
            self.first_dentry[ino as usize] = addr;
        }
        if is_dir(mode) {
            self.links[ino as usize] = 2;
            self.links[dir as usize] += 1;
            stack.push(ino);
        } else {
            self.links[ino as usize] += 1;
        }
        if first {
            match mode as u32 & libc::S_IFMT {
                libc::S_IFDIR => {}
                libc::S_IFREG => self.rep.files += 1,
                libc::S_IFLNK => self.rep.symlinks += 1,
                _ => self.rep.others += 1,
            }
            self.inode_blocks(ino);
        }
    }

    /// Link counts, back pointers, and what is stamped in use but unreachable.
    fn finish(&mut self) {
        let l = self.l;
        for ino in 1..l.total_inodes() {
            let at = l.inode_addr(ino);
            if !bit(&self.inodes, ino) {
                let w = self.pm.load_u64(at + inode::INO);
                if w != 0 {
                    self.problem(format!(
                        "inode {ino} is stamped in use (number word {w:#x}) but nothing names it"
                    ));
                }
                continue;
            }
            let want = self.links[ino as usize] as u64;
            let have = self.pm.load_u64(at + inode::NLINK);
            if have != want {
                self.problem(format!(
                    "inode {ino} has link count {have}, but {want} is right"
                ));
            }
            if ino == ROOT_INO {
                continue;
            }
            if !is_dir(self.pm.load_u64(at + inode::MODE)) {
                continue;
            }
            let back = self.pm.load_u64(at + inode::DENTRY);
            let ok = l.dentry_id(back).is_some_and(|id| {
                bit(&self.dentries, id) && self.pm.load_u64(back + dentry::INO) == ino
            });
            if !ok {
                self.problem(format!(
                    "inode {ino}: back pointer {back:#x} does not name its entry"
                ));
                if self.fix {
                    let first = self.first_dentry[ino as usize];
                    self.set(
                        at + inode::DENTRY,
                        first,
                        format!("inode {ino}: back pointer set to {first:#x}"),
                    );
                }
            }
        }
        for id in 1..l.total_dentries() {
            if !bit(&self.dentries, id)
                && self.pm.load_u64(l.dentry_addr(id) + dentry::STATE) & dentry::VALID != 0
            {
                self.problem(format!(
                    "dentry {id} is marked valid but no directory log reaches it"
                ));
            }
        }
        self.rep.blocks = self.blocks.iter().map(|w| w.count_ones() as u64).sum();
        self.rep.device_blocks = self.device.iter().map(|w| w.count_ones() as u64).sum();
    }
}

/// Compare what the walk reached with what the allocators hold.
fn compare_used(v: &View<'_>, used: &UsedSets) -> Vec<String> {
    let mut out = Vec::new();
    let l = v.l;
    // (what, reached, allocated, first id, end)
    type Set<'s> = (&'s str, &'s [u64], &'s [u64], u64, u64);
    let sets: [Set<'_>; 4] = [
        ("data block", v.blocks, &used.blocks, 0, l.data_blocks),
        ("inode", v.inodes, &used.inodes, 1, l.total_inodes()),
        ("dentry", v.dentries, &used.dentries, 1, l.total_dentries()),
        (
            "device block",
            v.device,
            &used.device,
            0,
            l.geo.device_blocks,
        ),
    ];
    for (what, reach, alloc, from, to) in sets {
        let mut leaked = Vec::new();
        let mut free_but_used = Vec::new();
        for i in from..to {
            match (bit(reach, i), bit(alloc, i)) {
                (true, false) => free_but_used.push(i),
                (false, true) => leaked.push(i),
                _ => {}
            }
        }
        if !free_but_used.is_empty() {
            out.push(format!(
                "{} {what}(s) in use are marked free by the allocator (they could be handed out twice): {}",
                free_but_used.len(),
                some(&free_but_used)
            ));
        }
        if !leaked.is_empty() {
            out.push(format!(
                "{} {what}(s) are marked used but nothing reaches them (leaked): {}",
                leaked.len(),
                some(&leaked)
            ));
        }
    }
    out
}
