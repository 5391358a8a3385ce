//! Opening and closing: the open-file table's entries, the rules an open obeys
//! (permission, inode flags, O_TRUNC), and the handle calls that only look at one.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::error::{errno, Result};
use crate::format::inode;
use crate::meta::perm::cap;
use crate::meta::{is_dir, perm, Cred, Stat};
use crate::pmem::Backend;

use super::atime::QuietAtime;
use super::files::FileRef;
use super::{Fd, Fs, FMODE_EXEC};

pub(super) struct OpenFile {
    pub(super) ino: u64,
    /// The open flags; the status flags in it are the description's until it is
    /// shared (then they are in the shared slot).
    pub(super) flags: AtomicI32,
    /// The position until the description is shared.
    pub(super) pos: Mutex<u64>,
    /// The shared description this open file is bound to (0: none; see
    /// [`Fs::share`]); set once, under `pos`.
    pub(super) desc: AtomicU64,
    /// Handles sharing this open file (dup); the last close releases it.
    pub(super) handles: AtomicU32,
    /// This process's copy of the file's block map.
    pub(super) map: crate::data::LocalMap,
    /// Opened by root (CAP_FSETID): its writes keep set-user-ID bits, as on Linux.
    pub(super) privileged: bool,
    /// The opener was in the file's group: its writes keep set-group-ID on a file
    /// that is not group-executable (Linux's `in_group_or_capable`).
    pub(super) in_group: bool,
    /// relatime's last answer for this handle (see [`QuietAtime`]).
    pub(super) atime: QuietAtime,
}

/// The permission an open with `flags` needs: execve's open needs execute permission
/// only (a program may be run by one who may not read it); others read and/or write.
fn open_wants(flags: i32) -> u32 {
    if flags & FMODE_EXEC != 0 {
        return perm::X;
    }
    let acc = flags & libc::O_ACCMODE;
    let mut want = 0;
    if acc == libc::O_RDONLY || acc == libc::O_RDWR {
        want |= perm::R;
    }
    if acc == libc::O_WRONLY || acc == libc::O_RDWR || flags & libc::O_TRUNC != 0 {
        want |= perm::W;
    }
    want
}

/// What an open gives every front end in one call: the handle, and the inode it is on
/// with its mode as the open found it, so that none asks the engine again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opened {
    pub fd: Fd,
    pub ino: u64,
    pub mode: u32,
}

impl<B: Backend> Fs<B> {
    /// A new unnamed file in directory `parent` (`O_TMPFILE`) with permissions `mode`
    /// less `umask` (unless `parent` has a default ACL), opened with `flags` (which
    /// must ask for writing); `O_EXCL` keeps it from ever being linked in. It is freed
    /// when its last handle closes.
    pub fn open_tmpfile(
        &self,
        parent: u64,
        (mode, umask): (u32, u32),
        flags: i32,
        cred: &Cred,
    ) -> Result<Opened> {
        if flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(errno::EINVAL);
        }
        self.op(|| {
            let linkable = flags & libc::O_EXCL == 0;
            let ino = self.ns.tmpfile(parent, (mode, umask), cred, linkable)?;
            let open = flags & !(libc::O_TMPFILE | libc::O_EXCL | libc::O_CREAT);
            self.open_ino(ino, open, cred, true).inspect_err(|_| {
                // Never opened: nothing else would free it before recovery.
                let c = self.ns.cachelets.get(ino);
                if let Ok(_w) = c.write(self.ns.watch()) {
                    self.ns.free_if_orphan(ino);
                }
            })
        })
    }

    /// Open inode `ino` with `flags` (O_RDONLY, O_WRONLY, O_RDWR, O_APPEND, O_TRUNC,
    /// O_DIRECTORY) as `cred`, who needs no permission for a file it just `created`.
    pub fn open_ino(&self, ino: u64, flags: i32, cred: &Cred, created: bool) -> Result<Opened> {
        self.op(|| self.open_with(ino, flags, cred, (created, false)))
    }

    /// [`Fs::open_ino`] of a file `Namespace::create_opened` just made, with the open
    /// reference the create took (given back if the open fails).
    pub(super) fn open_created(&self, ino: u64, flags: i32, cred: &Cred) -> Result<Opened> {
        self.op(|| self.open_with(ino, flags, cred, (true, true)))
    }

    /// [`Fs::open_ino`]; with `held`, the caller holds an open reference already.
    fn open_with(
        &self,
        ino: u64,
        flags: i32,
        cred: &Cred,
        (created, held): (bool, bool),
    ) -> Result<Opened> {
        let o = match self.may_open(ino, flags, cred, (created, held)) {
            Ok(o) => o,
            Err(e) => {
                if held {
                    self.drop_open_ref(ino);
                }
                return Err(e);
            }
        };
        if !held {
            self.open_ref(ino)?;
        }
        // A file the open created is empty: Linux's do_open drops O_TRUNC for it.
        if flags & libc::O_TRUNC != 0 && !created && o.mode & libc::S_IFMT == libc::S_IFREG {
            let in_group = cred.in_group_or_fsetid(o.gid);
            if let Err(e) = self.truncate_to_zero(ino, cred.has(cap::FSETID), in_group) {
                self.drop_open_ref(ino);
                return Err(e);
            }
        }
        let fd = self.insert_file(ino, || OpenFile {
            ino,
            flags: AtomicI32::new(flags),
            pos: Mutex::new(0),
            desc: AtomicU64::new(0),
            handles: AtomicU32::new(1),
            map: Default::default(),
            privileged: cred.has(cap::FSETID),
            in_group: cred.in_group_or_fsetid(o.gid),
            atime: Default::default(),
        })?;
        Ok(Opened {
            fd,
            ino,
            mode: o.mode,
        })
    }

    /// The rules an open of live inode `ino` with `flags` by `cred` obeys (no
    /// permission needed on a file it just `created`; `held`: the caller holds an open
    /// reference to it): its owner and mode.
    fn may_open(
        &self,
        ino: u64,
        flags: i32,
        cred: &Cred,
        (created, held): (bool, bool),
    ) -> Result<perm::Owner> {
        // An open reference already held keeps the inode from being freed: no need
        // to ask whether it is live.
        if !held {
            self.ns.live(ino)?;
        }
        let o = self.ns.owner_of(ino);
        // A path's open reaches a symlink only with O_NOFOLLOW (the kernel's FUSE
        // client never sends one).
        if o.mode & libc::S_IFMT == libc::S_IFLNK {
            return Err(errno::ELOOP);
        }
        if flags & libc::O_DIRECTORY != 0 && !is_dir(o.mode) {
            return Err(errno::ENOTDIR);
        }
        let acc = flags & libc::O_ACCMODE;
        if is_dir(o.mode) && (acc != libc::O_RDONLY || flags & libc::O_TRUNC != 0) {
            return Err(errno::EISDIR);
        }
        if !created {
            self.ns.may(ino, cred, open_wants(flags))?;
        }
        may_open_flagged(self.ns.inode_flags(ino), flags)?;
        // Linux: only the owner (or CAP_FOWNER) may leave atime alone.
        if flags & libc::O_NOATIME != 0 {
            perm::owner_or_root(cred, o)?;
        }
        Ok(o)
    }

    /// A new handle on the open file `make` makes, which holds an open reference on
    /// `ino`: given back if the table is full (ENFILE).
    pub(super) fn insert_file(&self, ino: u64, make: impl FnOnce() -> OpenFile) -> Result<Fd> {
        self.files
            .insert(make)
            .inspect_err(|_| self.drop_open_ref(ino))
    }

    /// O_TRUNC: empty the file (held open by the caller).
    fn truncate_to_zero(&self, ino: u64, privileged: bool, in_group: bool) -> Result<()> {
        self.ns.drop_capability(ino)?;
        let c = self.ns.cachelets.get(ino);
        let _w = c.write(self.ns.watch())?;
        let size = self
            .ns
            .pool
            .pm
            .load_u64(self.ns.pool.layout.inode_addr(ino) + inode::SIZE);
        if size > 0 {
            let cache = crate::data::MapCache::new(c.map_version(), 0, None);
            crate::data::truncate(&self.ns.pool, ino, self.ns.lane(), 0, &cache)?;
            if !privileged {
                self.ns.clear_setid(ino, in_group);
            }
            self.ns.notices.data(ino, 0, 0);
            Ok(())
        } else {
            Ok(())
        }
    }

    /// The map cache of open file `f`.
    pub(super) fn map_of<'f>(&'f self, f: &'f OpenFile) -> crate::data::MapCache<'f> {
        crate::data::MapCache::new(
            self.ns.cachelets.get(f.ino).map_version(),
            self.ns.rt.generation(),
            Some(&f.map),
        )
    }

    /// The open file of handle `fd`, kept while the answer lives (see
    /// [`super::files`]: a close meanwhile does not free it).
    pub(super) fn file(&self, fd: Fd) -> Result<FileRef<'_>> {
        self.files.get(fd)
    }

    /// Another handle on the same open file, sharing its position.
    pub fn dup(&self, fd: Fd) -> Result<Fd> {
        let f = self.file(fd)?;
        f.handles.fetch_add(1, Ordering::AcqRel);
        self.files.dup(&f).inspect_err(|_| {
            f.handles.fetch_sub(1, Ordering::AcqRel);
        })
    }

    /// Close a handle; the last handle of an open file gives its open reference
    /// back and, if its description is shared, this process's claim on it.
    pub fn close_fd(&self, fd: Fd) -> Result<()> {
        // Each step is an operation of its own, so none is repeated by a retry.
        let f = self.files.remove(fd)?;
        if f.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            f.map.forget();
            let writer = f.flags.load(Ordering::Acquire) & libc::O_ACCMODE != libc::O_RDONLY;
            self.drop_open_ref_of(f.ino, writer);
            let key = f.desc.load(Ordering::Acquire);
            if key != 0 {
                self.release(key)?;
            }
        }
        Ok(())
    }

    pub fn fd_ino(&self, fd: Fd) -> Result<u64> {
        Ok(self.file(fd)?.ino)
    }

    /// The open file of handle `fd`, lent to `then` (its slot pinned meanwhile).
    pub(super) fn with_file<T>(
        &self,
        fd: Fd,
        then: impl FnOnce(&OpenFile) -> Result<T>,
    ) -> Result<T> {
        let f = self.file(fd)?;
        then(&f)
    }

    /// fsync and fdatasync: every call is durable when it returns, except a hybrid
    /// pool's writes, which commit here if the file has any not yet committed (with
    /// every other write of their transaction; concurrent fsyncs share one commit).
    pub fn fsync(&self, fd: Fd) -> Result<()> {
        let ino = self.file(fd)?.ino;
        match self.ns.pool.txn() {
            Some(_) => self.op(|| self.ns.pool.commit_for(ino)),
            None => Ok(()),
        }
    }

    /// Whether [`Self::fsync`] of `fd` would commit a hybrid pool's transaction (and
    /// so wait for its device): false for a file whose writes are all committed, and
    /// in every other pool.
    pub fn fsync_would_commit(&self, fd: Fd) -> Result<bool> {
        let ino = self.file(fd)?.ino;
        self.ns.pool.commit_needed_for(ino)
    }

    /// sync and syncfs: a hybrid pool's running transaction commits (nothing to do in
    /// other pools).
    pub fn sync(&self) -> Result<()> {
        match self.ns.pool.txn() {
            Some(_) => self.op(|| self.ns.pool.commit()),
            None => Ok(()),
        }
    }

    /// Commit a hybrid pool's writes at least every `every` while this `Fs` lives
    /// (the mount option `commit=S`; a thread that holds only a weak reference).
    /// Nothing for other pools.
    pub fn commit_every(self: &std::sync::Arc<Self>, every: std::time::Duration) {
        let Some(t) = self.ns.pool.txn() else {
            return;
        };
        t.set_interval(every);
        let weak = std::sync::Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("lynxfs-commit".into())
            .spawn(move || {
                // An engine thread: no program code runs here.
                crate::pmem::keys::open_thread();
                loop {
                    std::thread::sleep(every);
                    let Some(fs) = weak.upgrade() else {
                        return;
                    };
                    // Inside an operation (`sync`), so a repair never rebuilds the
                    // transaction's lock words under this thread; with a pass, so a
                    // fork waits for it (docs/CONSISTENCY.md, "fork").
                    let _pass = crate::runtime::fork_gate::Pass::enter();
                    let _ = fs.sync();
                }
            });
        // Without the thread, writes still commit once the interval has passed.
        drop(spawned);
    }

    pub fn fstat(&self, fd: Fd) -> Result<Stat> {
        self.ns.getattr(self.file(fd)?.ino)
    }
}

/// Linux's open rules for inode flags: no writing open of an immutable file; an
/// append-only one opens for writing only with O_APPEND, and never with O_TRUNC.
fn may_open_flagged(iflags: u32, flags: i32) -> Result<()> {
    use crate::meta::flags::{APPEND, IMMUTABLE};
    let writes = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
    let appends = flags & libc::O_APPEND != 0 && flags & libc::O_TRUNC == 0;
    if writes && (iflags & IMMUTABLE != 0 || (iflags & APPEND != 0 && !appends)) {
        return Err(errno::EPERM);
    }
    Ok(())
}

/// The access mode (O_RDONLY, O_WRONLY, O_RDWR) `f` was opened with: fixed at open.
pub(super) fn access(f: &OpenFile) -> i32 {
    f.flags.load(Ordering::Relaxed) & libc::O_ACCMODE
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use crate::pmem::PmemBackend;
    use crate::{Cred, Fs, MkfsOptions};

    /// Threads open, dup, read and close files while others read through handles the
    /// first ones may be closing: each read reads the file its handle named, or fails
    /// with EBADF once the handle is closed; dup'd handles outlive their originals.
    #[test]
    fn reads_through_handles_closed_meanwhile() {
        const ROUNDS: usize = 2_000;
        let mut o = MkfsOptions::new(16 << 20);
        o.lanes = 4;
        let fs = Fs::in_memory(&o, PmemBackend::default()).unwrap();
        let s = fs.session(Cred::root());
        // File `i` holds the byte `i` (each its own, so a read shows which it reached).
        for i in 0..4u8 {
            let fd = s
                .open(format!("/f{i}"), libc::O_CREAT | libc::O_WRONLY, 0o644)
                .unwrap();
            fs.pwrite(fd, &[i; 64], 0).unwrap();
            fs.close_fd(fd).unwrap();
        }
        // Handle `i`: the last one opened on file `i`.
        let shown: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
        std::thread::scope(|sc| {
            for w in 0..2u8 {
                let (fs, s, shown) = (&fs, &s, &shown);
                sc.spawn(move || {
                    for r in 0..ROUNDS {
                        let i = (w * 2 + (r % 2) as u8) as usize;
                        let fd = s.open(format!("/f{i}"), libc::O_RDONLY, 0).unwrap();
                        shown[i].store(fd, Ordering::Release);
                        let dup = (r % 3 == 0).then(|| fs.dup(fd).unwrap());
                        fs.close_fd(fd).unwrap();
                        if let Some(d) = dup {
                            let mut b = [0u8; 1];
                            assert_eq!(fs.pread(d, &mut b, 7).unwrap(), 1);
                            assert_eq!(b[0], i as u8);
                            fs.close_fd(d).unwrap();
                        }
                        assert_eq!(fs.close_fd(fd).unwrap_err().errno(), libc::EBADF);
                    }
                });
            }
            for _ in 0..2 {
                let (fs, shown) = (&fs, &shown);
                sc.spawn(move || {
                    let mut b = [0u8; 8];
                    for r in 0..ROUNDS * 4 {
                        let i = r % 4;
                        let fd = shown[i].load(Ordering::Acquire);
                        match fs.pread(fd, &mut b, 0) {
                            Ok(n) => assert!(n == 8 && b == [i as u8; 8], "read another file"),
                            Err(e) => assert_eq!(e.errno(), libc::EBADF),
                        }
                    }
                });
            }
        });
        fs.close().unwrap();
    }

    /// An open whose create made the file but whose own checks then fail gives back
    /// the open reference the create took: the file is not left open, and its
    /// unlink frees it. An open that creates counts one reference until its close.
    #[test]
    fn a_failed_open_after_its_create_leaves_the_file_unopened() {
        let fs = Fs::in_memory(&MkfsOptions::new(16 << 20), PmemBackend::default()).unwrap();
        let s = fs.session(Cred::root());
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDONLY | libc::O_DIRECTORY;
        assert_eq!(
            s.open("/f", flags, 0o644).unwrap_err().errno(),
            libc::ENOTDIR
        );
        let ino = s.stat("/f").unwrap().ino;
        assert_eq!(fs.ns().cachelets.get(ino).open(), 0);
        s.unlink("/f").unwrap();
        assert!(fs.ns().live(ino).is_err(), "the unlinked file was kept");
        let fd = s
            .open("/g", libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644)
            .unwrap();
        let ino = s.stat("/g").unwrap().ino;
        assert_eq!(fs.ns().cachelets.get(ino).open(), 1);
        s.unlink("/g").unwrap();
        assert!(fs.ns().live(ino).is_ok(), "an open file was freed");
        fs.close_fd(fd).unwrap();
        assert!(fs.ns().live(ino).is_err(), "the last close kept an orphan");
        fs.close().unwrap();
    }
}
