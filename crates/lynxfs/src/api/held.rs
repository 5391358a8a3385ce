//! Inode numbers held from outside the engine.
//!
//! The kernel's FUSE client names files by number: once a lookup (or create, mkdir,
//! link, a plus listing) has told it "this name is inode N", every later request for
//! that name carries N alone, until the kernel sends FORGET. If the engine freed N
//! when its last name and handle went and handed it to a new file, a request the
//! kernel had resolved to the old file would reach the new one (a truncate of `f`
//! landing on a file that never had that name). So each number handed out is *held*
//! with the kernel's lookup count, and a hold keeps the inode allocated exactly as an
//! open handle does: an inode whose last name goes while held becomes an orphan,
//! freed when the last hold (or handle) is dropped, or by recovery after a crash.
//!
//! A hold is taken *after* the engine found the inode through a name, so between the
//! two the inode may have been freed and its number reused. [`Fs::lookup_hold`] closes
//! that window: it holds first and then checks that the name still leads to the held
//! inode; a held inode cannot be freed, so from that check on the name, the number and
//! the file agree.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;

use crate::error::{errno, Result};
use crate::format::inode;
use crate::meta::cachelet::ORPHAN;
use crate::meta::{Cred, Stat};
use crate::pmem::Backend;

use super::{path, Fs};

/// Shards of the hold table, so holds on different inodes rarely share a lock.
const SHARDS: usize = 64;

/// How many times a lookup is retried when the name moved to another inode between
/// finding it and holding it. Each retry means another thread changed the name
/// meanwhile; giving up after this many reports the race instead of spinning on it.
pub(super) const LOOKUP_TRIES: usize = 64;

struct Hold {
    /// The holder's count (the kernel's lookup count for this number). The hold itself
    /// is one open reference in the inode's cachelet.
    count: u64,
}

/// The table of held inodes and their counts.
pub(crate) struct Held {
    shards: Box<[Mutex<HashMap<u64, Hold>>]>,
}

impl Default for Held {
    fn default() -> Self {
        Held {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

impl Held {
    fn shard(&self, ino: u64) -> &Mutex<HashMap<u64, Hold>> {
        &self.shards[(ino as usize) % SHARDS]
    }
}

impl<B: Backend> Fs<B> {
    /// Adds one to the hold count of `ino`. The first hold takes an open reference,
    /// so the inode cannot be freed (or its number reused) until [`Fs::forget`] drops
    /// the count to zero. ENOENT when `ino` is not a live inode.
    pub fn hold(&self, ino: u64) -> Result<()> {
        self.op(|| {
            let mut shard = self.held.shard(ino).lock();
            if let Some(h) = shard.get_mut(&ino) {
                h.count += 1;
                return Ok(());
            }
            self.open_ref(ino)?;
            shard.insert(ino, Hold { count: 1 });
            Ok(())
        })
    }

    /// Takes `n` off the hold count of `ino` (FUSE's FORGET); at zero the hold's open
    /// reference goes, and an inode that lost its last name meanwhile is freed.
    /// Forgetting more than is held forgets what there is.
    pub fn forget(&self, ino: u64, n: u64) {
        let mut shard = self.held.shard(ino).lock();
        let Some(h) = shard.get_mut(&ino) else {
            return;
        };
        h.count = h.count.saturating_sub(n);
        if h.count == 0 && shard.remove(&ino).is_some() {
            self.drop_open_ref(ino);
        }
    }

    /// Drops every hold (the kernel forgets everything when it unmounts).
    pub fn forget_all(&self) {
        for shard in self.held.shards.iter() {
            let mut shard = shard.lock();
            for (ino, _) in shard.drain() {
                self.drop_open_ref(ino);
            }
        }
    }

    /// Every inode held now (what the kernel may cache attributes and pages of).
    pub fn held_inodes(&self) -> Vec<u64> {
        let mut all = Vec::new();
        for shard in self.held.shards.iter() {
            all.extend(shard.lock().keys().copied());
        }
        all
    }

    /// The hold count of `ino` (0 when not held).
    pub fn held_count(&self, ino: u64) -> u64 {
        self.held.shard(ino).lock().get(&ino).map_or(0, |h| h.count)
    }

    /// Looks `name` up in `parent` as `cred` and holds the inode it names, making sure
    /// the held inode is the one the name leads to (see the module comment). Returns
    /// its attributes, read while held.
    pub fn lookup_hold(&self, parent: u64, name: &[u8], cred: &Cred) -> Result<Stat> {
        self.op(|| {
            let mut ino = self.ns.lookup(parent, name, cred)?;
            let mut last = errno::ESTALE;
            for attempt in 0..LOOKUP_TRIES {
                match self.hold_named(parent, name, ino) {
                    Ok(st) => return Ok(st),
                    Err(Moved::To(now)) => (ino, last) = (now, errno::ESTALE),
                    Err(Moved::Freed(now, e)) => {
                        if now == ino {
                            pause(attempt);
                        }
                        (ino, last) = (now, e);
                    }
                    Err(Moved::Gone(e)) => return Err(e),
                }
            }
            Err(last)
        })
    }

    /// Holds `ino` found by its number alone (a file handle: FUSE's lookup of "." in
    /// an inode the kernel no longer caches) and returns its attributes. A file that
    /// lost its last name is gone for a handle (ENOENT, which the kernel reports as
    /// ESTALE), as on ext4, even while some process still has it open.
    pub fn hold_by_number(&self, ino: u64) -> Result<Stat> {
        self.op(|| {
            self.hold(ino)?;
            match self.ns.getattr(ino) {
                Ok(st) if st.nlink > 0 => Ok(st),
                other => {
                    self.forget(ino, 1);
                    Err(other.err().unwrap_or(errno::ENOENT))
                }
            }
        })
    }

    /// Holds the parent of directory `dir` (FUSE's lookup of ".." in a directory the
    /// kernel found by a file handle) and returns its attributes.
    pub fn hold_parent(&self, dir: u64) -> Result<Stat> {
        self.op(|| {
            self.ns.dir(dir)?;
            self.hold_by_number(self.ns.parent_of(dir))
        })
    }

    /// Holds `ino`, which the caller just created or linked as `name` in `parent`,
    /// and returns its attributes. If the name was removed or replaced meanwhile (by
    /// someone the caller does not serialize with), what the name leads to now is
    /// held and returned instead, as a lookup made a moment later would find.
    pub fn hold_new(&self, parent: u64, name: &[u8], ino: u64) -> Result<Stat> {
        self.op(|| match self.hold_named(parent, name, ino) {
            Ok(st) => Ok(st),
            Err(Moved::Gone(e)) => Err(e),
            Err(Moved::To(_) | Moved::Freed(..)) => self.lookup_hold(parent, name, &Cred::root()),
        })
    }

    /// Holds `ino` if `name` in `parent` still leads to it once held.
    fn hold_named(&self, parent: u64, name: &[u8], ino: u64) -> std::result::Result<Stat, Moved> {
        let now_at = || {
            self.ns
                .lookup(parent, name, &Cred::root())
                .map_err(Moved::Gone)
        };
        crate::runtime::testing::race_here("hold_named.found");
        if let Err(e) = self.hold(ino) {
            crate::runtime::testing::race_here("hold_named.freed");
            // Freed since the lookup: the name was removed or replaced meanwhile.
            // Whatever it leads to now is looked at again, the same number too: a
            // file that replaced it may have been given the freed number (numbers
            // are reused at once). See `resolve_held`.
            return match now_at() {
                Ok(now) => Err(Moved::Freed(now, e)),
                Err(_) => Err(Moved::Gone(e)),
            };
        }
        match now_at() {
            Ok(now) if now == ino => {}
            other => {
                self.forget(ino, 1);
                return Err(Moved::To(other?));
            }
        }
        self.ns.getattr(ino).map_err(|e| {
            self.forget(ino, 1);
            Moved::Gone(e)
        })
    }

    /// One open reference on `ino` (an open handle or a hold), taken under the
    /// cachelet's lock so that no unlink frees the inode in between. ENOENT when the
    /// inode is gone: freed, or without a name and without another reference.
    pub(super) fn open_ref(&self, ino: u64) -> Result<()> {
        self.op(|| {
            self.ns.live(ino)?;
            let c = self.ns.cachelets.get(ino);
            let _w = c.write(self.ns.watch())?;
            self.ns.live(ino)?;
            let at = self.ns.pool.layout.inode_addr(ino);
            let nlink = self.ns.pool.pm.load_u64(at + inode::NLINK);
            // An orphan nobody has open yet is a new O_TMPFILE file being opened.
            if nlink == 0 && c.open() == 0 && c.flags() & ORPHAN == 0 {
                return Err(errno::ENOENT);
            }
            // This process's own count first: a repair recounts opens from those.
            self.ns.rt.opened(ino)?;
            c.open_counter().fetch_add(1, Ordering::AcqRel);
            Ok(())
        })
    }

    /// Give back an open reference; the last one frees a file whose last name went.
    /// Cleanup after the fact: if the runtime is under repair, the rebuild recounts
    /// the opens, so an interrupted wait simply ends here.
    pub(super) fn drop_open_ref(&self, ino: u64) {
        self.drop_open_ref_of(ino, false);
    }

    /// [`Self::drop_open_ref`] for the last handle of an open file; `writer`: it was
    /// open for writing, and its close gives back the file's speculative
    /// preallocation even when other references remain. Holds count as references
    /// (a FUSE mount holds every file the kernel knows until it forgets it, at the
    /// unmount for a file it keeps cached), so "the last reference" alone would leave
    /// a file written through a mount holding twice its blocks until the unmount, as
    /// ext4 and XFS do not (they trim at a writer's close). A later append reserves
    /// again; a trim under a writer that has the file open elsewhere costs it only
    /// that.
    pub(super) fn drop_open_ref_of(&self, ino: u64, writer: bool) {
        let _ = self.op(|| {
            self.ns.rt.closed(ino);
            let c = self.ns.cachelets.get(ino);
            let Ok(_w) = c.write(self.ns.watch()) else {
                return Ok(());
            };
            let last = c.open_counter().fetch_sub(1, Ordering::AcqRel) == 1;
            self.ns.free_if_orphan(ino);
            if (last || writer) && self.ns.live(ino).is_ok() {
                self.trim_preallocation(ino, &c);
            }
            Ok(())
        });
    }
}

impl<B: Backend> Fs<B> {
    /// One open count of `ino` taken for a fork child that was never made, given
    /// back: as [`Fs::drop_open_ref`], but this process's open table never had it.
    pub(super) fn give_back_count(&self, ino: u64) {
        let _ = self.op(|| {
            self.uncount_open(ino);
            Ok(())
        });
    }

    /// One shared open count of `ino` less, under the inode's lock (inside an
    /// operation); the last frees a file whose last name went. Nothing if a repair
    /// interrupts the wait for the lock: the rebuild recounts the opens.
    pub(super) fn uncount_open(&self, ino: u64) {
        let c = self.ns.cachelets.get(ino);
        let Ok(_w) = c.write(self.ns.watch()) else {
            return;
        };
        c.open_counter().fetch_sub(1, Ordering::AcqRel);
        self.ns.free_if_orphan(ino);
    }

    /// The file's last close gives back its speculative preallocation (the caller
    /// holds its lock alone). A failure (no room for a new map node) leaves the
    /// blocks mapped and owned, for the next close or recovery.
    fn trim_preallocation(&self, ino: u64, c: &crate::meta::cachelet::Cachelet<'_>) {
        let word = self.ns.load(ino, inode::MAP);
        if inode::MapWord::decode(word).is_some_and(|w| w.spec != 0) {
            let cache = crate::data::MapCache::new(c.map_version(), self.ns.rt.generation(), None);
            let _ = crate::data::prealloc::trim(&self.ns.pool, ino, self.ns.lane(), &cache);
        }
    }
}

enum Moved {
    /// The name now leads to this inode.
    To(u64),
    /// The inode found was freed, and the name now leads to this number (which may
    /// be the same one, reused or not yet dropped by an unlink): the error to give
    /// if that lasts.
    Freed(u64, crate::Error),
    /// The name is gone (or the lookup failed for another reason).
    Gone(crate::Error),
}

/// A hold for the length of one call: a path's inode, kept from being freed (and its
/// number reused) while the call works on it by number. It is an open reference
/// taken directly, without the table that counts holds from outside.
pub(super) struct HeldIno<'a, B: Backend> {
    fs: &'a Fs<B>,
    pub ino: u64,
}

impl<B: Backend> Drop for HeldIno<'_, B> {
    fn drop(&mut self) {
        self.fs.drop_open_ref(self.ino);
    }
}

impl<'a, B: Backend> super::Session<'a, B> {
    /// Holds inode `ino` (an open reference) for as long as the result lives.
    pub(super) fn hold(&self, ino: u64) -> Result<HeldIno<'a, B>> {
        self.fs.open_ref(ino)?;
        Ok(HeldIno { fs: self.fs, ino })
    }

    /// Resolves `p` and holds the inode it leads to, checking once held that the path
    /// still leads there: a call that resolved a path and then acts on the number
    /// would otherwise act on a newer file that reused the number, if the file was
    /// replaced and freed in between (a truncate of `f` landing on a file that never
    /// had that name).
    pub(super) fn resolve_held(&self, p: &[u8], follow: bool) -> Result<HeldIno<'a, B>> {
        let ns = self.fs.ns();
        let mut last = errno::ESTALE;
        let mut freed = None;
        for attempt in 0..LOOKUP_TRIES {
            let found = path::resolve_last_in(ns, self.cwd, p, follow, &self.cred, self.scope)?;
            if freed == Some(found.ino) {
                pause(attempt);
            }
            // Once held (or found freed), the name that led to the inode must still
            // lead there: one index probe (a path that ended at a directory itself is
            // walked again).
            let now = || match &found.last {
                Some((dir, name)) => ns.lookup(*dir, name, &Cred::root()),
                None => self.resolve(p, follow),
            };
            crate::runtime::testing::race_here("resolve_held.found");
            if let Err(e) = self.fs.open_ref(found.ino) {
                crate::runtime::testing::race_here("resolve_held.freed");
                // Freed since the lookup: the name was removed or replaced meanwhile.
                // Gone now: a point at which it was missing, the error stands. Else
                // look again, even when the name leads to the same number: the file
                // that replaced it may have been given the freed number (numbers are
                // reused at once), or an unlink that freed it is yet to drop the name
                // from the index (then the last try's error stands).
                if now().is_err() {
                    return Err(e);
                }
                (last, freed) = (e, Some(found.ino));
                continue;
            }
            let held = HeldIno {
                fs: self.fs,
                ino: found.ino,
            };
            if now().is_ok_and(|now| now == held.ino) {
                return Ok(held);
            }
            (last, freed) = (errno::ESTALE, None);
        }
        Err(last)
    }
}

/// Between two tries of a lookup that found the number it had found freed (an
/// unlink between its commit and its index removal, on another CPU or preempted):
/// give it the CPU, then time.
pub(super) fn pause(attempt: usize) {
    if attempt < 8 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

#[cfg(test)]
mod tests {
    //! A name replaced twice while a call looks it up (issue 42): the first
    //! replacement frees the file the call found, the second gives the freed number
    //! to the file that now has the name (numbers are reused at once). The name was
    //! there throughout, so the call must find the newest file, never ENOENT; it
    //! used to say ENOENT, seeing the name lead to the number it found freed. The
    //! replacements run on the calling thread at the engine's race points, so the
    //! interleaving is exact.

    use std::sync::Arc;

    use crate::format::ROOT_INO;
    use crate::pmem::PmemBackend;
    use crate::runtime::testing::{on_race, races_left};
    use crate::{Cred, Fs, MkfsOptions};

    type LFs = Fs<PmemBackend>;

    fn fs() -> Arc<LFs> {
        let mut o = MkfsOptions::new(16 << 20);
        o.lanes = 1;
        Arc::new(Fs::in_memory(&o, PmemBackend::default()).unwrap())
    }

    /// `/tmp` written with `generation`, renamed over `/cfg`: the new file's number.
    fn replace(fs: &LFs, generation: u64) -> u64 {
        let s = fs.session(Cred::root());
        let flags = libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY;
        let fd = s.open("/tmp", flags, 0o644).unwrap();
        fs.write(fd, &generation.to_le_bytes()).unwrap();
        let ino = fs.fstat(fd).unwrap().ino;
        fs.close_fd(fd).unwrap();
        s.rename("/tmp", "/cfg", 0).unwrap();
        ino
    }

    /// `/cfg` holds generation 1; at `found` (the call found it) generation 2
    /// replaces it, at `freed` (the call found it freed) generation 3, which takes
    /// the first file's number; checks that the interleaving happened as meant.
    fn race_twice(found: &'static str, freed: &'static str) -> (Arc<LFs>, u64) {
        let fs = fs();
        let first = replace(&fs, 1);
        let f = fs.clone();
        on_race(found, move || {
            replace(&f, 2);
        });
        let f = fs.clone();
        on_race(freed, move || {
            assert_eq!(replace(&f, 3), first, "the freed number is reused at once");
        });
        (fs, first)
    }

    fn raced(fs: &LFs, first: u64) {
        assert!(races_left().is_empty(), "not raced: {:?}", races_left());
        let st = fs.session(Cred::root()).stat("/cfg").unwrap();
        assert_eq!(st.ino, first);
    }

    #[test]
    fn an_open_never_misses_a_name_replaced_twice_meanwhile() {
        let (fs, first) = race_twice("resolve_held.found", "resolve_held.freed");
        let s = fs.session(Cred::root());
        let fd = s
            .open("/cfg", libc::O_RDONLY, 0)
            .expect("/cfg was there throughout");
        let mut buf = [0; 8];
        assert_eq!(fs.pread(fd, &mut buf, 0).unwrap(), 8);
        fs.close_fd(fd).unwrap();
        assert_eq!(u64::from_le_bytes(buf), 3);
        raced(&fs, first);
    }

    #[test]
    fn a_stat_never_misses_a_name_replaced_twice_meanwhile() {
        let (fs, first) = race_twice("stat_named.found", "stat_named.freed");
        let st = fs.session(Cred::root()).stat("/cfg");
        let st = st.expect("/cfg was there throughout");
        assert_eq!((st.ino, st.size), (first, 8));
        raced(&fs, first);
    }

    #[test]
    fn a_stat_never_shows_a_file_given_the_number_meanwhile() {
        // Between the lookup and the read of the attributes, /cfg is replaced and a
        // new empty file takes the freed number: the stat must not show that file
        // (size 0), which /cfg never named, as /cfg.
        let fs = fs();
        let first = replace(&fs, 1);
        let f = fs.clone();
        on_race("stat_named.found", move || {
            replace(&f, 2);
            let s = f.session(Cred::root());
            let fd = s
                .open("/new", libc::O_CREAT | libc::O_WRONLY, 0o644)
                .unwrap();
            assert_eq!(
                f.fstat(fd).unwrap().ino,
                first,
                "the freed number is reused"
            );
            f.close_fd(fd).unwrap();
        });
        let st = fs.session(Cred::root()).stat("/cfg").unwrap();
        assert!(races_left().is_empty());
        assert_ne!(st.ino, first, "the attributes of /new, not of /cfg's file");
        assert_eq!(st.size, 8);
    }

    #[test]
    fn a_readlink_never_misses_a_name_replaced_twice_meanwhile() {
        // `on_resolved`'s other users (readlink, getxattr, readdir): a symlink
        // replaced by symlinks.
        let fs = fs();
        let link = |f: &LFs, target: &str| {
            let s = f.session(Cred::root());
            s.symlink(target, "/tmp").unwrap();
            s.rename("/tmp", "/cfg", 0).unwrap();
            s.lstat("/cfg").unwrap().ino
        };
        let first = link(&fs, "one");
        let f = fs.clone();
        on_race("on_resolved.found", move || {
            link(&f, "two");
        });
        let f = fs.clone();
        on_race("on_resolved.failed", move || {
            assert_eq!(link(&f, "three"), first, "the freed number is reused");
        });
        let got = fs.session(Cred::root()).readlink("/cfg");
        assert_eq!(got.expect("/cfg was there throughout"), b"three");
        assert!(races_left().is_empty());
    }

    #[test]
    fn a_held_lookup_never_misses_a_name_replaced_twice_meanwhile() {
        let (fs, first) = race_twice("hold_named.found", "hold_named.freed");
        let st = fs.lookup_hold(ROOT_INO, b"cfg", &Cred::root());
        let st = st.expect("/cfg was there throughout");
        assert_eq!((st.ino, st.size), (first, 8));
        assert_eq!(fs.held_count(first), 1);
        fs.forget(first, 1);
        raced(&fs, first);
    }
}
