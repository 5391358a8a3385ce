//! The API: POSIX-shaped calls on paths and open handles, with a caller's credentials,
//! errors as errnos. `Fs` owns the pool and the namespace; a `Session` is one caller
//! (credentials and working directory).

mod descriptions;
mod fds;
pub mod fiemap;
mod held;
pub mod path;

use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{errno, Result};
use crate::format::{inode, ROOT_INO};
use crate::meta::{
    self, is_dir, perm, Cred, DirEntry, NewNode, RenameFlags, SetAttr, Stat, StatFs, TimeSet,
};
use crate::pmem::{Backend, PmemBackend};
use crate::pool::{Access, MkfsOptions, Pool};
use crate::time::{now_ns, Timestamp};

pub use crate::runtime::DescKey;
pub use meta::Namespace;

/// An open file handle.
pub type Fd = u64;

struct OpenFile {
    ino: u64,
    /// The open flags; the status flags in it are the description's until it is
    /// shared (then they are in the shared slot).
    flags: AtomicI32,
    /// The position until the description is shared.
    pos: Mutex<u64>,
    /// The shared description this open file is bound to (0: none; see
    /// [`Fs::share`]); set once, under `pos`.
    desc: AtomicU64,
    /// Handles sharing this open file (dup); the last close releases it.
    handles: AtomicU32,
    /// This process's copy of the file's block map.
    map: crate::data::LocalMap,
    /// Opened by root (CAP_FSETID): its writes keep set-user-ID bits, as on Linux.
    privileged: bool,
    /// The opener was in the file's group: its writes keep set-group-ID on a file
    /// that is not group-executable (Linux's `in_group_or_capable`).
    in_group: bool,
    /// relatime's last answer for this handle (see [`QuietAtime`]).
    atime: QuietAtime,
}

/// A read through a handle found that relatime asks for no atime update: none is
/// needed while the inode's ctime word is still `ctime` (every change of mtime,
/// ctime or atime other than a read's stores a new ctime) and the clock is before
/// `until` (the atime plus a day). Both 0 until a read finds so. Two readers may
/// store their pairs at once: a mixed pair is still one a read saw, or has the
/// earlier deadline, so it never skips an update that is due.
#[derive(Default)]
struct QuietAtime {
    ctime: AtomicU64,
    until: AtomicU64,
}

/// Closed handles' table entries a thread gathers before they are reclaimed. Each
/// reclamation starts with a `membarrier` system call, which interrupts every other
/// CPU running a thread of the process: about 11 µs on this 2-core VM. At the
/// collector's default (32) two threads opening and closing files spent ~0.8 µs per
/// open+close in it (`strace -c`: 14,067 calls for 200,000); at this size it is
/// ~0.02 µs, for up to 1,024 closed handles per thread not yet freed (their map
/// copies are let go at the close).
const RETIRED_BATCH: usize = 1024;

/// relatime's day, in nanoseconds.
const DAY_NS: u64 = 24 * 3600 * 1_000_000_000;

/// A mounted pool.
pub struct Fs<B: Backend = PmemBackend> {
    ns: Namespace<B>,
    files: papaya::HashMap<Fd, Arc<OpenFile>, meta::index::IndexHasher>,
    fds: fds::FdNumbers,
    /// Inode numbers held from outside (the kernel's FUSE lookup counts).
    held: held::Held,
    /// When a read updates atime: an `Atime` as u8 (a mount's option, changed by a
    /// remount).
    atime: AtomicU8,
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
    fn from_u8(v: u8) -> Atime {
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

/// The bit Linux sets (`__FMODE_EXEC`) in the flags of the open execve(2) makes, which
/// FUSE passes on; no open(2) caller can set it.
pub const FMODE_EXEC: i32 = 0o40;

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

impl<B: Backend> Fs<B> {
    pub fn new(pool: Pool<B>) -> Self {
        let ns = Namespace::new(pool);
        crate::data::prealloc::trim_recovered(&ns.pool, ns.lane());
        Fs {
            ns,
            files: papaya::HashMap::builder()
                .hasher(Default::default())
                .collector(seize::Collector::new().batch_size(RETIRED_BATCH))
                .build(),
            fds: fds::FdNumbers::new(),
            held: held::Held::default(),
            atime: AtomicU8::new(Atime::default() as u8),
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
    fn op<T>(&self, f: impl FnMut() -> Result<T>) -> Result<T> {
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

    /// Watch the changes other processes attached to the pool make (names,
    /// attributes, data), to drop what this process caches of them; every attached
    /// process posts its changes while a watcher lives. `None` for a pool no other
    /// process can attach (in memory).
    pub fn watch_changes(&self) -> Option<crate::runtime::notices::Watcher> {
        self.ns.notices.watch(self.ns.rt.clone())
    }

    /// A caller with these credentials, working in the root directory.
    pub fn session(&self, cred: Cred) -> Session<'_, B> {
        Session {
            fs: self,
            cred,
            cwd: ROOT_INO,
            cwd_hold: None,
            scope: path::Scope::Pool,
        }
    }

    /// Close cleanly: the allocator state is saved and the pool marked clean.
    /// Handles still open are closed first, so a file unlinked while open is freed
    /// now rather than leaked into the saved allocator state.
    pub fn close(&self) -> Result<()> {
        let fds: Vec<Fd> = self.files.pin().keys().copied().collect();
        for fd in fds {
            // A handle closed concurrently is already gone: nothing to do for it.
            let _ = self.close_fd(fd);
        }
        self.forget_all();
        self.ns.close()
    }

    // ---- handles (also what the FUSE adapter uses) ----

    /// A new unnamed file in directory `parent` (`O_TMPFILE`), opened with `flags`
    /// (which must ask for writing); `O_EXCL` keeps it from ever being linked in.
    /// It is freed when its last handle closes.
    pub fn open_tmpfile(&self, parent: u64, mode: u32, flags: i32, cred: &Cred) -> Result<Fd> {
        if flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(errno::EINVAL);
        }
        self.op(|| {
            let linkable = flags & libc::O_EXCL == 0;
            let ino = self.ns.tmpfile(parent, mode, cred, linkable)?;
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

    /// Open inode `ino` with `flags` (O_RDONLY, O_WRONLY, O_RDWR, O_APPEND, O_TRUNC).
    pub fn open_ino(&self, ino: u64, flags: i32, cred: &Cred, created: bool) -> Result<Fd> {
        self.op(|| {
            self.ns.live(ino)?;
            let o = self.ns.owner_of(ino);
            let acc = flags & libc::O_ACCMODE;
            if is_dir(o.mode) && (acc != libc::O_RDONLY || flags & libc::O_TRUNC != 0) {
                return Err(errno::EISDIR);
            }
            if !created {
                self.ns.may(ino, cred, open_wants(flags))?;
            }
            may_open_flagged(self.ns.inode_flags(ino), flags)?;
            self.open_ref(ino)?;
            if flags & libc::O_TRUNC != 0 && o.mode & libc::S_IFMT == libc::S_IFREG {
                let in_group = cred.is_root() || cred.in_group(o.gid);
                if let Err(e) = self.truncate_to_zero(ino, cred.is_root(), in_group) {
                    self.drop_open_ref(ino);
                    return Err(e);
                }
            }
            Ok(self.insert_file(OpenFile {
                ino,
                flags: AtomicI32::new(flags),
                pos: Mutex::new(0),
                desc: AtomicU64::new(0),
                handles: AtomicU32::new(1),
                map: Default::default(),
                privileged: cred.is_root(),
                in_group: cred.is_root() || cred.in_group(o.gid),
                atime: Default::default(),
            }))
        })
    }

    /// A new handle on `f`.
    fn insert_file(&self, f: OpenFile) -> Fd {
        let fd = self.fds.take();
        self.files.pin().insert(fd, Arc::new(f));
        fd
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
                self.clear_setid(ino, in_group);
            }
            self.ns.notices.data(ino, 0, 0);
            Ok(())
        } else {
            Ok(())
        }
    }

    /// The map cache of open file `f`.
    fn map_of<'f>(&'f self, f: &'f OpenFile) -> crate::data::MapCache<'f> {
        crate::data::MapCache::new(
            self.ns.cachelets.get(f.ino).map_version(),
            self.ns.rt.generation(),
            Some(&f.map),
        )
    }

    fn file(&self, fd: Fd) -> Result<Arc<OpenFile>> {
        self.files.pin().get(&fd).cloned().ok_or(errno::EBADF)
    }

    /// Another handle on the same open file, sharing its position.
    pub fn dup(&self, fd: Fd) -> Result<Fd> {
        let f = self.file(fd)?;
        f.handles.fetch_add(1, Ordering::AcqRel);
        let nfd = self.fds.take();
        self.files.pin().insert(nfd, f);
        Ok(nfd)
    }

    /// Close a handle; the last handle of an open file gives its open reference
    /// back and, if its description is shared, this process's claim on it.
    pub fn close_fd(&self, fd: Fd) -> Result<()> {
        // Each step is an operation of its own, so none is repeated by a retry.
        let f = self.files.pin().remove(&fd).cloned().ok_or(errno::EBADF)?;
        if f.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            f.map.forget();
            self.drop_open_ref(f.ino);
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

    /// The open file of handle `fd`, lent to `then` (no reference count taken: the
    /// table's guard keeps it alive meanwhile).
    fn with_file<T>(&self, fd: Fd, then: impl FnOnce(&OpenFile) -> Result<T>) -> Result<T> {
        let files = self.files.pin();
        then(files.get(&fd).ok_or(errno::EBADF)?)
    }

    pub fn pread(&self, fd: Fd, buf: &mut [u8], off: u64) -> Result<usize> {
        self.op(|| {
            self.with_file(fd, |f| {
                if access(f) == libc::O_WRONLY {
                    return Err(errno::EBADF);
                }
                self.read_locked(f, buf, off)
            })
        })
    }

    /// Read under the file's lock, or without it when the handle's remembered extent
    /// holds the range and no writer held the lock alone meanwhile (docs/CONSISTENCY.md,
    /// "Reads without a lock").
    fn read_locked(&self, f: &OpenFile, buf: &mut [u8], off: u64) -> Result<usize> {
        if is_dir(self.ns.mode(f.ino)) {
            return Err(errno::EISDIR);
        }
        let c = self.ns.cachelets.get(f.ino);
        let cache =
            crate::data::MapCache::new(c.map_version(), self.ns.rt.generation(), Some(&f.map));
        let n = match self.read_unlocked(&c, &cache, f.ino, buf, off) {
            Some(n) => n,
            None => {
                let _r = c.read(self.ns.watch())?;
                crate::data::read_cached(&self.ns.pool, f.ino, off, buf, &cache)?
            }
        };
        self.touch_atime(f);
        Ok(n)
    }

    /// A read through the remembered extent without a hold of the file's lock (no
    /// atomic read-modify-write: the lock word is only loaded, before and after), kept
    /// only if no writer held the lock alone in between; `None`: read under the lock.
    fn read_unlocked(
        &self,
        c: &crate::meta::cachelet::Cachelet<'_>,
        cache: &crate::data::MapCache<'_>,
        ino: u64,
        buf: &mut [u8],
        off: u64,
    ) -> Option<usize> {
        let stamp = c.read_stamp()?;
        let n = crate::data::read_hinted(&self.ns.pool, ino, off, buf, cache)?;
        c.read_unchanged(stamp).then_some(n)
    }

    /// A read's atime update, as the `Atime` mode says. Under relatime, a handle
    /// whose last read needed no update skips the check while nothing changed the
    /// inode's times and the day has not passed (two loads and a coarse clock).
    fn touch_atime(&self, f: &OpenFile) {
        let mode = Atime::from_u8(self.atime.load(Ordering::Relaxed));
        if mode == Atime::Never {
            return;
        }
        let ino = f.ino;
        let ctime = self.ns.load(ino, inode::CTIME);
        if mode == Atime::Relative
            && ctime == f.atime.ctime.load(Ordering::Relaxed)
            && crate::time::now_coarse_ns() < f.atime.until.load(Ordering::Relaxed)
        {
            return;
        }
        if self.ns.inode_flags(ino) & crate::meta::flags::NOATIME != 0 {
            return;
        }
        let [a, m, c, _] = self.ns.times(ino);
        let now = now_ns();
        let day_old = Timestamp::from_ns(now).sec.saturating_sub(a.sec) >= 24 * 3600;
        let quiet_since = if mode == Atime::Strict || a <= m || a <= c || day_old {
            // The clock's time is plain: the word alone says it (format::inode::time_word).
            self.ns.pool.settle(ino);
            let mut b = self.ns.pool.pm.batch();
            b.write_u64(self.ns.pool.layout.inode_addr(ino) + inode::ATIME, now);
            let _ = b.persist();
            now
        } else {
            a.as_ns().unwrap_or(0)
        };
        if mode == Atime::Relative {
            f.atime.ctime.store(ctime, Ordering::Relaxed);
            f.atime
                .until
                .store(quiet_since.saturating_add(DAY_NS), Ordering::Relaxed);
        }
    }

    pub fn pwrite(&self, fd: Fd, data: &[u8], off: u64) -> Result<usize> {
        self.op(|| {
            let f = self.file(fd)?;
            self.write_locked(&f, data, off).map(|(_, n)| n)
        })
    }

    /// Write `data` at `off` (at the end with O_APPEND): where it went and how much.
    fn write_locked(&self, f: &OpenFile, data: &[u8], off: u64) -> Result<(u64, usize)> {
        if access(f) == libc::O_RDONLY {
            return Err(errno::EBADF);
        }
        // Refused writes take nothing away (checked again under the lock).
        self.ns
            .may_write_data(f.ino, self.flags_of(f)? & libc::O_APPEND != 0)?;
        self.ns.drop_capability(f.ino)?;
        // For update: readers of the file go on while the new bytes are copied; the
        // lock is held alone only for the commit (the gate below).
        let update = self.ns.cachelets.get(f.ino).update(self.ns.watch())?;
        crate::runtime::testing::stop_here("write.data_lock");
        let pool = &self.ns.pool;
        let size = pool
            .pm
            .load_u64(pool.layout.inode_addr(f.ino) + inode::SIZE);
        let append = self.flags_of(f)? & libc::O_APPEND != 0;
        self.ns.may_write_data(f.ino, append)?;
        let at = if append { size } else { off };
        let mut update = Some(update);
        let mut _alone = None;
        let mut gate = || {
            crate::runtime::testing::stop_here("write.before_commit");
            if let Some(u) = update.take() {
                _alone = Some(u.upgrade(self.ns.watch())?);
            }
            Ok(())
        };
        let lane = self.ns.lane();
        let n = crate::alloc::within_reserve_of(f.privileged, || {
            crate::data::write_at(pool, f.ino, lane, (at, data), &self.map_of(f), &mut gate)
        })?;
        if !f.privileged {
            self.clear_setid(f.ino, f.in_group);
        }
        self.ns.notices.data(f.ino, at, n as u64);
        Ok((at, n))
    }

    /// copy_file_range(2) between two handles at explicit offsets, in 1 MiB chunks
    /// inside the engine (one call, however long the range): the bytes copied, fewer
    /// than `len` only at the source's end. Ranges of one file may not overlap
    /// (EINVAL), the source must be readable and the destination writable without
    /// O_APPEND (EBADF), as in Linux.
    pub fn copy_range(
        &self,
        fd_in: Fd,
        off_in: u64,
        fd_out: Fd,
        off_out: u64,
        len: u64,
    ) -> Result<u64> {
        const CHUNK: u64 = 1 << 20;
        self.op(|| {
            let (src, dst) = (self.file(fd_in)?, self.file(fd_out)?);
            if access(&src) == libc::O_WRONLY
                || access(&dst) == libc::O_RDONLY
                || self.flags_of(&dst)? & libc::O_APPEND != 0
            {
                return Err(errno::EBADF);
            }
            let overlap =
                off_in < off_out.saturating_add(len) && off_out < off_in.saturating_add(len);
            if src.ino == dst.ino && overlap {
                return Err(errno::EINVAL);
            }
            let mut buf = vec![0u8; len.min(CHUNK) as usize];
            let mut done = 0u64;
            while done < len {
                let want = (len - done).min(CHUNK) as usize;
                let n = self.read_locked(&src, &mut buf[..want], off_in + done)?;
                if n == 0 {
                    break;
                }
                let (_, w) = self.write_locked(&dst, &buf[..n], off_out + done)?;
                done += w as u64;
                if w < n {
                    break;
                }
            }
            Ok(done)
        })
    }

    /// Writing to a file clears its set-user-ID bit, and set-group-ID if it is group
    /// executable or the writer is outside its group (`in_group` false), as Linux does
    /// for writers without CAP_FSETID (not root).
    fn clear_setid(&self, ino: u64, in_group: bool) {
        let mode = self.ns.mode(ino);
        let mut new = mode & !libc::S_ISUID;
        if mode & 0o010 != 0 || !in_group {
            new &= !libc::S_ISGID;
        }
        if new != mode {
            self.ns.pool.settle(ino);
            let mut b = self.ns.pool.pm.batch();
            b.write_u64(
                self.ns.pool.layout.inode_addr(ino) + inode::MODE,
                crate::meta::flags::mode_word(new, self.ns.inode_flags(ino)),
            );
            let _ = b.persist();
        }
    }

    /// read(2): at the handle's position, which it advances.
    pub fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<usize> {
        self.op(|| {
            self.with_file(fd, |f| {
                if access(f) == libc::O_WRONLY {
                    return Err(errno::EBADF);
                }
                self.at_position(f, |pos| {
                    let n = self.read_locked(f, buf, pos)?;
                    Ok((n, pos + n as u64))
                })
            })
        })
    }

    /// write(2): at the handle's position (or the end, with O_APPEND).
    pub fn write(&self, fd: Fd, data: &[u8]) -> Result<usize> {
        self.op(|| {
            let f = self.file(fd)?;
            self.at_position(&f, |pos| {
                let (at, n) = self.write_locked(&f, data, pos)?;
                Ok((n, at + n as u64))
            })
        })
    }

    /// lseek with SEEK_SET, SEEK_CUR, SEEK_END, SEEK_DATA or SEEK_HOLE (from the
    /// file's block map: see [`crate::data::seek_data_hole`]).
    pub fn seek(&self, fd: Fd, off: i64, whence: i32) -> Result<u64> {
        self.op(|| {
            let f = self.file(fd)?;
            self.at_position(&f, |pos| {
                let base = match whence {
                    libc::SEEK_SET => 0,
                    libc::SEEK_CUR => pos as i64,
                    libc::SEEK_END => self.ns.getattr(f.ino)?.size as i64,
                    libc::SEEK_DATA | libc::SEEK_HOLE => {
                        let new = self.data_or_hole(&f, off, whence == libc::SEEK_HOLE)?;
                        return Ok((new, new));
                    }
                    _ => return Err(errno::EINVAL),
                };
                let new = base
                    .checked_add(off)
                    .filter(|&p| p >= 0)
                    .ok_or(errno::EINVAL)? as u64;
                Ok((new, new))
            })
        })
    }

    /// Where SEEK_DATA (or SEEK_HOLE) from `off` lands in `f`'s file; a negative
    /// offset is ENXIO, as in Linux.
    fn data_or_hole(&self, f: &OpenFile, off: i64, hole: bool) -> Result<u64> {
        let off = u64::try_from(off).map_err(|_| errno::ENXIO)?;
        if self.ns.mode(f.ino) & libc::S_IFMT != libc::S_IFREG {
            return Err(errno::EINVAL);
        }
        let _r = self.ns.cachelets.get(f.ino).read(self.ns.watch())?;
        crate::data::seek_data_hole(&self.ns.pool, f.ino, off, hole, &self.map_of(f))
    }

    /// FS_IOC_FIEMAP: the extents of open file `fd` that overlap the `len` bytes at
    /// `start` (see [`crate::data::file_extents`]: holes left out, the file's last
    /// extent flagged [`crate::data::EXTENT_LAST`]), whole, as Linux reports them. A
    /// zero `len` is EINVAL, anything but a regular file EOPNOTSUPP.
    pub fn extents(&self, fd: Fd, start: u64, len: u64) -> Result<Vec<crate::data::FileExtent>> {
        self.op(|| {
            let f = self.file(fd)?;
            if self.ns.mode(f.ino) & libc::S_IFMT != libc::S_IFREG {
                return Err(errno::EOPNOTSUPP);
            }
            if len == 0 {
                return Err(errno::EINVAL);
            }
            let all = {
                let _r = self.ns.cachelets.get(f.ino).read(self.ns.watch())?;
                crate::data::file_extents(&self.ns.pool, f.ino, &self.map_of(&f))?
            };
            let end = start.saturating_add(len);
            Ok(all
                .into_iter()
                .filter(|e| e.logical < end && e.logical + e.length > start)
                .collect())
        })
    }

    pub fn ftruncate(&self, fd: Fd, len: u64) -> Result<()> {
        self.op(|| {
            let f = self.file(fd)?;
            if access(&f) == libc::O_RDONLY {
                return Err(errno::EINVAL);
            }
            self.truncate_ino(f.ino, len, Some(&f.map), (f.privileged, f.in_group))
        })
    }

    fn truncate_ino(
        &self,
        ino: u64,
        len: u64,
        local: Option<&crate::data::LocalMap>,
        (privileged, in_group): (bool, bool),
    ) -> Result<()> {
        if is_dir(self.ns.mode(ino)) {
            return Err(errno::EISDIR);
        }
        if self.ns.mode(ino) & libc::S_IFMT != libc::S_IFREG {
            return Err(errno::EINVAL);
        }
        self.ns.may_change(ino)?;
        self.ns.drop_capability(ino)?;
        let c = self.ns.cachelets.get(ino);
        let _w = c.write(self.ns.watch())?;
        let cache = crate::data::MapCache::new(c.map_version(), self.ns.rt.generation(), local);
        crate::data::truncate(&self.ns.pool, ino, self.ns.lane(), len, &cache)?;
        if !privileged {
            self.clear_setid(ino, in_group);
        }
        self.ns.notices.data(ino, 0, 0);
        Ok(())
    }

    /// truncate by inode, checking write permission (FUSE setattr with a size).
    pub fn truncate_as(&self, ino: u64, len: u64, cred: &Cred) -> Result<()> {
        self.op(|| {
            self.ns.live(ino)?;
            self.ns.may(ino, cred, perm::W)?;
            let in_group = cred.is_root() || cred.in_group(self.ns.owner(ino).gid);
            self.truncate_ino(ino, len, None, (cred.is_root(), in_group))
        })
    }

    pub fn fallocate(&self, fd: Fd, mode: i32, off: u64, len: u64) -> Result<()> {
        self.op(|| {
            let f = self.file(fd)?;
            if access(&f) == libc::O_RDONLY {
                return Err(errno::EBADF);
            }
            if self.ns.mode(f.ino) & libc::S_IFMT != libc::S_IFREG {
                return Err(errno::ENODEV);
            }
            // Append-only files may only grow (plain allocation past the end).
            self.ns
                .may_write_data(f.ino, mode & !libc::FALLOC_FL_KEEP_SIZE == 0)?;
            // As a write does (Linux's `file_modified`).
            self.ns.drop_capability(f.ino)?;
            let _w = self.ns.cachelets.get(f.ino).write(self.ns.watch())?;
            // A punch frees space: it may take a block of the reserve to record that.
            let adds = mode & libc::FALLOC_FL_PUNCH_HOLE == 0;
            crate::alloc::within_reserve_of(f.privileged || !adds, || {
                crate::data::fallocate(
                    &self.ns.pool,
                    f.ino,
                    self.ns.lane(),
                    mode,
                    off,
                    len,
                    &self.map_of(&f),
                )
            })?;
            if !f.privileged {
                self.clear_setid(f.ino, f.in_group);
            }
            self.ns.notices.data(f.ino, off, len);
            Ok(())
        })
    }

    /// Every call is durable when it returns: nothing to do.
    pub fn fsync(&self, fd: Fd) -> Result<()> {
        self.file(fd).map(drop)
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
fn access(f: &OpenFile) -> i32 {
    f.flags.load(Ordering::Relaxed) & libc::O_ACCMODE
}

/// One caller: credentials and a working directory.
pub struct Session<'a, B: Backend> {
    fs: &'a Fs<B>,
    pub cred: Cred,
    cwd: u64,
    /// Holds the working directory (none for the root), as a process's cwd holds its
    /// directory: removed, it stays an empty orphan rather than its number going to a
    /// new directory that relative paths would then reach.
    cwd_hold: Option<held::HeldIno<'a, B>>,
    /// Whether paths may leave the pool (see [`path::Scope`]).
    scope: path::Scope,
}

impl<'a, B: Backend> Session<'a, B> {
    pub fn fs(&self) -> &'a Fs<B> {
        self.fs
    }
    fn ns(&self) -> &'a Namespace<B> {
        &self.fs.ns
    }

    /// This caller sees the pool mounted inside a bigger tree: paths leaving it fail
    /// with [`crate::Error::Outside`] (see [`path::Scope::Mounted`]).
    pub fn mounted(mut self) -> Self {
        self.scope = path::Scope::Mounted;
        self
    }

    /// The same caller, with relative paths starting at directory `dir` instead (the
    /// `*at` calls). The caller keeps `dir` alive (an open handle on it).
    pub fn at(&self, dir: u64) -> Session<'a, B> {
        Session {
            fs: self.fs,
            cred: self.cred.clone(),
            cwd: dir,
            cwd_hold: None,
            scope: self.scope,
        }
    }

    /// The working directory's inode.
    pub fn cwd(&self) -> u64 {
        self.cwd
    }

    /// fchdir: work in directory `dir` (held, as [`Session::chdir`] holds), which may
    /// be a removed directory still open.
    pub fn fchdir(&mut self, dir: u64) -> Result<()> {
        let held = self.hold(dir)?;
        self.ns().directory(dir)?;
        self.ns().may(dir, &self.cred, perm::X)?;
        self.cwd = dir;
        self.cwd_hold = Some(held);
        Ok(())
    }

    pub fn resolve(&self, p: impl AsRef<[u8]>, follow: bool) -> Result<u64> {
        path::resolve(
            self.ns(),
            self.cwd,
            p.as_ref(),
            follow,
            &self.cred,
            self.scope,
        )
    }

    /// The parent directory and last name of `p`; the name must be a real one.
    fn parent(&self, p: &[u8]) -> Result<path::Walked> {
        let mut links = 0;
        let w = path::walk_parent(self.ns(), self.cwd, p, &self.cred, &mut links, self.scope)?;
        Ok(w)
    }

    /// chdir: work in directory `p` (held). A removed directory still held may be
    /// entered, as Linux allows `chdir(".")` in one.
    pub fn chdir(&mut self, p: impl AsRef<[u8]>) -> Result<()> {
        let held = self.resolve_held(p.as_ref(), true)?;
        self.ns().directory(held.ino)?;
        self.ns().may(held.ino, &self.cred, perm::X)?;
        self.cwd = held.ino;
        self.cwd_hold = Some(held);
        Ok(())
    }

    pub fn getcwd(&self) -> Result<String> {
        let p = self.ns().path_of(self.cwd)?;
        Ok(String::from_utf8_lossy(&p).into_owned())
    }

    fn make(&self, p: &[u8], node: NewNode<'_>, excl: bool) -> Result<(u64, bool)> {
        let w = self.parent(p.as_ref())?;
        if w.name.is_empty() {
            return Err(errno::EEXIST);
        }
        if w.trailing_slash && !is_dir(node.mode) {
            return Err(if self.ns().lookup(w.parent, &w.name, &self.cred).is_ok() {
                errno::EEXIST
            } else {
                errno::EISDIR
            });
        }
        self.ns().create(w.parent, &w.name, node, &self.cred, excl)
    }

    pub fn mkdir(&self, p: impl AsRef<[u8]>, mode: u32) -> Result<()> {
        // As vfs_mkdir: only the permission and sticky bits (set-group-ID comes from a
        // set-group-ID parent, in create).
        let node = NewNode {
            mode: libc::S_IFDIR | (mode & 0o1777),
            rdev: 0,
            target: None,
        };
        self.make(p.as_ref(), node, true).map(drop)
    }

    pub fn mknod(&self, p: impl AsRef<[u8]>, mode: u32, rdev: u64) -> Result<()> {
        let kind = mode & libc::S_IFMT;
        let kind = if kind == 0 { libc::S_IFREG } else { kind };
        if ![
            libc::S_IFREG,
            libc::S_IFIFO,
            libc::S_IFSOCK,
            libc::S_IFCHR,
            libc::S_IFBLK,
        ]
        .contains(&kind)
        {
            return Err(errno::EINVAL);
        }
        if (kind == libc::S_IFCHR || kind == libc::S_IFBLK) && !self.cred.is_root() {
            return Err(errno::EPERM);
        }
        let node = NewNode {
            mode: kind | (mode & 0o7777),
            rdev,
            target: None,
        };
        self.make(p.as_ref(), node, true).map(drop)
    }

    pub fn symlink(&self, target: impl AsRef<[u8]>, linkpath: impl AsRef<[u8]>) -> Result<()> {
        let node = NewNode {
            mode: libc::S_IFLNK | 0o777,
            rdev: 0,
            target: Some(target.as_ref()),
        };
        self.make(linkpath.as_ref(), node, true).map(drop)
    }

    /// open(2) with O_* flags; `mode` is used when O_CREAT creates the file.
    pub fn open(&self, p: impl AsRef<[u8]>, flags: i32, mode: u32) -> Result<Fd> {
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            return self.open_tmpfile(p.as_ref(), flags, mode);
        }
        // An existing file is held from its lookup to its open (see `resolve_held`);
        // a file this call creates is opened at once by the creator.
        let (ino, created, _held) = if flags & libc::O_CREAT != 0 {
            let (ino, created) = self.open_create(p.as_ref(), flags, mode)?;
            (ino, created, None)
        } else {
            let h = self.resolve_held(p.as_ref(), flags & libc::O_NOFOLLOW == 0)?;
            (h.ino, false, Some(h))
        };
        let m = self.ns().mode(ino);
        if m & libc::S_IFMT == libc::S_IFLNK {
            return Err(errno::ELOOP);
        }
        if flags & libc::O_DIRECTORY != 0 && !is_dir(m) {
            return Err(errno::ENOTDIR);
        }
        self.fs.open_ino(ino, flags, &self.cred, created)
    }

    /// open(2) with `O_TMPFILE`: a new unnamed file in directory `p` (see
    /// [`Fs::open_tmpfile`]). As Linux's build_open_flags, O_CREAT with it or no
    /// write access is EINVAL, before the path is looked at.
    fn open_tmpfile(&self, p: &[u8], flags: i32, mode: u32) -> Result<Fd> {
        if flags & libc::O_CREAT != 0 || flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(errno::EINVAL);
        }
        let dir = self.resolve_held(p, true)?;
        self.ns().directory(dir.ino)?;
        self.fs.open_tmpfile(dir.ino, mode, flags, &self.cred)
    }

    fn open_create(&self, p: &[u8], flags: i32, mode: u32) -> Result<(u64, bool)> {
        let excl = flags & libc::O_EXCL != 0;
        // A trailing symlink is followed and the create repeated at its target, so a
        // dangling symlink creates its target (Linux's open_last_lookups).
        let (mut base, mut path) = (self.cwd, p.as_ref().to_vec());
        let mut links = 0;
        loop {
            let w = path::walk_parent(self.ns(), base, &path, &self.cred, &mut links, self.scope)?;
            // "." or "..": an existing directory (do_open checks O_EXCL first).
            if w.name.is_empty() && excl {
                return Err(errno::EEXIST);
            }
            if w.name.is_empty() || w.trailing_slash {
                return Err(errno::EISDIR);
            }
            let node = NewNode {
                mode: libc::S_IFREG | (mode & 0o7777),
                rdev: 0,
                target: None,
            };
            let (ino, created) = self
                .ns()
                .create(w.parent, &w.name, node, &self.cred, excl)?;
            if !created
                && self.ns().mode(ino) & libc::S_IFMT == libc::S_IFLNK
                && flags & libc::O_NOFOLLOW == 0
            {
                links += 1;
                if links > path::SYMLOOP_MAX {
                    return Err(errno::ELOOP);
                }
                path = self.ns().readlink(ino)?;
                base = w.parent;
                continue;
            }
            return Ok((ino, created));
        }
    }

    pub fn create(&self, p: impl AsRef<[u8]>, mode: u32) -> Result<Fd> {
        self.open(p, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode)
    }

    pub fn unlink(&self, p: impl AsRef<[u8]>) -> Result<()> {
        let w = self.parent(p.as_ref())?;
        if w.name.is_empty() {
            return Err(errno::EISDIR);
        }
        if w.trailing_slash {
            let ino = self.ns().lookup(w.parent, &w.name, &self.cred)?;
            return Err(if is_dir(self.ns().mode(ino)) {
                errno::EISDIR
            } else {
                errno::ENOTDIR
            });
        }
        self.ns().unlink(w.parent, &w.name, &self.cred)
    }

    pub fn rmdir(&self, p: impl AsRef<[u8]>) -> Result<()> {
        let w = self.parent(p.as_ref())?;
        let last = p.as_ref().split(|&c| c == b'/').rfind(|c| !c.is_empty());
        match last {
            Some(b".") => return Err(errno::EINVAL),
            Some(b"..") => return Err(errno::ENOTEMPTY),
            None => return Err(errno::EBUSY),
            _ => {}
        }
        self.ns().rmdir(w.parent, &w.name, &self.cred)
    }

    pub fn rename(&self, from: impl AsRef<[u8]>, to: impl AsRef<[u8]>, flags: u32) -> Result<()> {
        let flags = RenameFlags::from_bits(flags)?;
        let s = self.parent(from.as_ref())?;
        let d = self.parent(to.as_ref())?;
        // As do_renameat2: a "." or ".." source is busy; such a target exists.
        if s.name.is_empty() || (d.name.is_empty() && !flags.noreplace) {
            return Err(errno::EBUSY);
        }
        if d.name.is_empty() {
            return Err(errno::EEXIST);
        }
        self.ns()
            .rename(s.parent, &s.name, d.parent, &d.name, flags, &self.cred)
    }

    pub fn link(&self, old: impl AsRef<[u8]>, new: impl AsRef<[u8]>) -> Result<()> {
        self.linkat(old, new, false)
    }

    /// linkat(2) by paths: with `follow` (AT_SYMLINK_FOLLOW) a symlink `old` gives
    /// its target the new name, else the symlink itself gets it.
    pub fn linkat(&self, old: impl AsRef<[u8]>, new: impl AsRef<[u8]>, follow: bool) -> Result<()> {
        let held = self.resolve_held(old.as_ref(), follow)?;
        self.link_ino(held.ino, new.as_ref())
    }

    /// linkat(fd, "", AT_FDCWD, new, AT_EMPTY_PATH): a name for the file open as
    /// `fd`, an `O_TMPFILE` file among them. One made with `O_EXCL`, or one whose last
    /// name went, gets none (ENOENT), as in Linux.
    pub fn link_fd(&self, fd: Fd, new: impl AsRef<[u8]>) -> Result<()> {
        // The open handle keeps the inode (and its number) for the call.
        self.link_ino(self.fs.fd_ino(fd)?, new.as_ref())
    }

    /// A new name `new` for inode `ino`, which the caller keeps alive.
    fn link_ino(&self, ino: u64, new: &[u8]) -> Result<()> {
        let w = self.parent(new)?;
        if w.name.is_empty() {
            return Err(errno::EEXIST);
        }
        // Linux checks the new name (filename_create) before the old inode's type.
        if self.ns().lookup(w.parent, &w.name, &self.cred).is_ok() {
            return Err(errno::EEXIST);
        }
        self.ns().link(ino, w.parent, &w.name, &self.cred)
    }

    pub fn readlink(&self, p: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        let ino = self.resolve(p, false)?;
        self.ns().readlink(ino)
    }

    pub fn stat(&self, p: impl AsRef<[u8]>) -> Result<Stat> {
        self.ns().getattr(self.resolve(p, true)?)
    }

    pub fn lstat(&self, p: impl AsRef<[u8]>) -> Result<Stat> {
        self.ns().getattr(self.resolve(p, false)?)
    }

    pub fn chmod(&self, p: impl AsRef<[u8]>, mode: u32) -> Result<()> {
        let ino = self.resolve_held(p.as_ref(), true)?;
        let a = SetAttr {
            mode: Some(mode),
            ..Default::default()
        };
        self.ns().setattr(ino.ino, &a, &self.cred).map(drop)
    }

    /// chown; `None` leaves that id alone (-1 in C).
    pub fn chown(&self, p: impl AsRef<[u8]>, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        let ino = self.resolve_held(p.as_ref(), true)?;
        let a = SetAttr {
            uid,
            gid,
            ..Default::default()
        };
        self.ns().setattr(ino.ino, &a, &self.cred).map(drop)
    }

    pub fn utimens(
        &self,
        p: impl AsRef<[u8]>,
        atime: Option<TimeSet>,
        mtime: Option<TimeSet>,
    ) -> Result<()> {
        let ino = self.resolve_held(p.as_ref(), true)?;
        let a = SetAttr {
            atime,
            mtime,
            ..Default::default()
        };
        self.ns().setattr(ino.ino, &a, &self.cred).map(drop)
    }

    pub fn truncate(&self, p: impl AsRef<[u8]>, len: u64) -> Result<()> {
        let ino = self.resolve_held(p.as_ref(), true)?;
        self.fs.truncate_as(ino.ino, len, &self.cred)
    }

    /// All entries of a directory, "." and ".." included.
    pub fn readdir(&self, p: impl AsRef<[u8]>) -> Result<Vec<DirEntry>> {
        let ino = self.resolve(p, true)?;
        let mut out = Vec::new();
        let mut off = 0;
        loop {
            let batch = self.ns().readdir(ino, off, 256, &self.cred)?;
            let Some(last) = batch.last() else { break };
            off = last.next;
            out.extend(batch);
        }
        Ok(out)
    }

    pub fn statfs(&self) -> StatFs {
        self.ns().statfs()
    }

    // ---- extended attributes (POSIX ACLs among them: `system.posix_acl_*`) ----

    pub fn getxattr(&self, p: impl AsRef<[u8]>, name: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        let ino = self.resolve(p, true)?;
        self.ns().getxattr(ino, name.as_ref(), &self.cred)
    }

    pub fn setxattr(
        &self,
        p: impl AsRef<[u8]>,
        name: impl AsRef<[u8]>,
        value: &[u8],
        flags: i32,
    ) -> Result<()> {
        let ino = self.resolve_held(p.as_ref(), true)?;
        self.ns()
            .setxattr(ino.ino, name.as_ref(), value, flags, &self.cred)
    }

    pub fn listxattr(&self, p: impl AsRef<[u8]>) -> Result<Vec<Vec<u8>>> {
        let ino = self.resolve(p, true)?;
        self.ns().listxattr(ino, &self.cred)
    }

    pub fn removexattr(&self, p: impl AsRef<[u8]>, name: impl AsRef<[u8]>) -> Result<()> {
        let ino = self.resolve_held(p.as_ref(), true)?;
        self.ns().removexattr(ino.ino, name.as_ref(), &self.cred)
    }
}
