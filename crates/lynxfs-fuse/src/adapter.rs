//! `LynxFuse`: the FUSE adapter over the engine, a thin translation: each FUSE
//! request becomes one call of the engine's by-number API ([`lynxfs::Fs`]), whose
//! answer becomes the reply or an errno. Every rule (permissions and ACLs, protected
//! hard links, killpriv, the umask and default ACLs, inode flags, the atime policy)
//! is the engine's, the same as through the preload and the C API. What stays here is
//! FUSE's own: inode numbers as node ids, generations, lookup counts, the shapes of
//! replies, the kernel's caches, and the mount's read-only state.
//!
//! FUSE inode numbers *are* LynxFS inode numbers (the root is 1 in both), and the
//! inode's generation goes with every entry, so the kernel notices when a number is
//! reused. The adapter keeps no cache of its own: FUSE file handles are engine
//! handles ([`lynxfs::Fd`]).
//!
//! Lookup counts: every entry the kernel is given (lookup, create, mknod, mkdir,
//! symlink, link, each entry of a plus listing) is *held* in the engine
//! ([`Fs::hold`]) until the kernel forgets it, because later requests name the file
//! by number alone. A held inode is not freed and its number is not reused, so a
//! request reaches the file the kernel resolved, or that file's orphan after it lost
//! its last name (as on a local file system), never a newer file with the same number.
//!
//! Credentials: the request's uid and gid, with the supplementary groups read only
//! when needed ([`crate::caller`]). With the `default_permissions` mount option the
//! kernel checks permissions as well.
//!
//! Locks (`fcntl` record and OFD locks, `flock`) of a pool other processes can
//! attach are kept on the pool's lock stand-ins, which preloaded processes and other
//! mounts lock too ([`crate::locks`]); a pool only this process has (in memory) leaves
//! them to the kernel, which keeps them locally.
//!
//! Engine errors become errnos in one place, [`errno`].
//!
//! Other processes attached to the pool change it behind the kernel's back: the
//! forwarder ([`crate::forward`]) passes their changes on to the kernel.

use std::cell::RefCell;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType,
    Filesystem, FopenFlags, Generation, INodeNo, IoUringState, IoctlFlags, LockOwner, Notifier,
    OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyIoctl, ReplyLock, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyStatx, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use lynxfs::pmem::Backend;
use lynxfs::{Cred, Fs, SetAttr, Stat, TimeSet, Timestamp};

use crate::caller::{as_caller, full_cred};
use crate::commits::Committers;
use crate::forward::{report, Forward, Forwarded, Forwarder};
use crate::locks::Locks;
use crate::times::TimesFile;
use crate::usage::{LiveUsage, Transport, USAGE_XATTR};

/// How many directory entries to ask the engine for at a time while filling one
/// readdir reply (the reply holds about 4 KiB, some 100 short names).
const READDIR_BATCH: usize = 128;

thread_local! {
    /// This worker's buffer for READ replies, kept from request to request (it grows
    /// to the largest READ, at most 1 MiB): a READ costs no allocation, no page
    /// faults on fresh memory and no zeroing of bytes the engine then overwrites.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The FUSE file system over one open pool.
pub struct LynxFuse<B: Backend> {
    fs: Arc<Fs<B>>,
    entry_ttl: Duration,
    attr_ttl: Duration,
    read_only: bool,
    /// The kernel did not accept FUSE_HANDLE_KILLPRIV, so it clears S_ISUID/S_ISGID
    /// after a write itself, with a mode-only setattr sent as the writer.
    kernel_kills_privs: bool,
    /// Notices to the kernel (set once the session exists; see [`LynxFuse::notices`]).
    notices: Arc<OnceLock<Notifier>>,
    /// Whether io_uring serves this mount (set once the session exists; see
    /// [`LynxFuse::transport`]), reported in the usage attribute.
    transport: Arc<OnceLock<IoUringState>>,
    /// Offer the kernel POSIX ACLs (FUSE_POSIX_ACL), which also makes it check
    /// permissions itself; off for `daemon_permissions` mounts.
    kernel_acls: bool,
    /// The thread passing other processes' changes on (see [`LynxFuse::forward`]),
    /// stopped before the pool is closed.
    forwarder: Arc<Mutex<Option<Forwarder>>>,
    /// How far the forwarder has passed other processes' changes on: an open keeps
    /// the kernel's pages only when it is caught up (see [`Self::open_flags`]).
    forwarded: Forwarded,
    /// The kernel's writeback cache (`-o writeback`, see [`LynxFuse::with_writeback`]).
    writeback: bool,
    /// OPENDIR is answered ENOSYS, once: the kernel then opens directories without
    /// asking (FUSE_NO_OPENDIR_SUPPORT). Only when the kernel checks permissions
    /// itself, since read permission is all OPENDIR checks (see [`Self::init`]).
    no_opendir: bool,
    /// The locks kept on the pool's stand-ins (for a pool other processes can attach).
    locks: Option<Arc<Locks>>,
    /// The kernel sends lock requests (FUSE_POSIX_LOCKS agreed at INIT).
    locks_on: bool,
    /// A hybrid pool's FSYNCs, answered from threads of their own.
    committers: Committers<B>,
    /// Where the daemon's own time per request type goes at the end, if asked for.
    times: Option<TimesFile>,
}

/// The largest write the kernel sends in one request (with FUSE_MAX_PAGES, 256 pages):
/// a large `write(2)` costs one round trip per MiB instead of one per 128 KiB.
pub(crate) const MAX_WRITE: u32 = 1 << 20;

/// The transport a session's io_uring state says.
fn transport_of(state: &IoUringState) -> Transport {
    if state.active() {
        Transport::IoUring
    } else {
        Transport::DevFuse
    }
}

/// Maps an engine error to the errno the caller sees. The one place this is done.
pub fn errno(e: &lynxfs::Error) -> Errno {
    Errno::from_i32(e.errno())
}

type Res<T> = Result<T, Errno>;

/// A time to set: now, or an instant anywhere in the range Linux allows.
fn time_set(t: TimeOrNow) -> TimeSet {
    match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(t) => TimeSet::At(Timestamp::from_system_time(t)),
    }
}

fn kind_of(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// The FUSE attributes for an engine `Stat`.
/// The generation an entry reply gives for `st`: the kernel wants none for the root
/// (it warns "root generation should be zero" and ignores it), whatever the pool's
/// root inode has counted.
fn entry_generation(st: &Stat) -> Generation {
    if st.ino == lynxfs::format::ROOT_INO {
        Generation(0)
    } else {
        Generation(st.generation)
    }
}

pub fn file_attr(st: &Stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(st.ino),
        size: st.size,
        blocks: st.blocks,
        atime: st.atime.to_system_time(),
        mtime: st.mtime.to_system_time(),
        ctime: st.ctime.to_system_time(),
        crtime: st.btime.to_system_time(),
        kind: kind_of(st.mode),
        perm: (st.mode & 0o7777) as u16,
        nlink: u32::try_from(st.nlink).unwrap_or(u32::MAX),
        uid: st.uid,
        gid: st.gid,
        // The kernel sent it as a 32-bit (new_encode_dev) number; it fits back.
        rdev: st.rdev as u32,
        blksize: st.blksize,
        flags: 0,
    }
}

fn name_bytes(name: &OsStr) -> &[u8] {
    name.as_bytes()
}

/// Inode flags (`FS_*_FL`) and their `FS_XFLAG_*` twins.
const XFLAGS: [(u32, u32); 4] = [
    (lynxfs::meta::flags::IMMUTABLE, 0x8),
    (lynxfs::meta::flags::APPEND, 0x10),
    (lynxfs::meta::flags::NOATIME, 0x40),
    (lynxfs::meta::flags::NODUMP, 0x80),
];

fn xflags_of(flags: u32) -> u32 {
    XFLAGS
        .iter()
        .filter(|(f, _)| flags & f != 0)
        .map(|(_, x)| x)
        .sum()
}

/// The flags for `xflags`; EOPNOTSUPP for an xflag LynxFS does not keep.
fn flags_of_xflags(xflags: u32) -> Res<u32> {
    let known: u32 = XFLAGS.iter().map(|(_, x)| x).sum();
    if xflags & !known != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(XFLAGS
        .iter()
        .filter(|(_, x)| xflags & x != 0)
        .map(|(f, _)| f)
        .sum())
}

/// A `struct fsxattr` (28 bytes) holding only `xflags`.
fn fsxattr(xflags: u32) -> [u8; 28] {
    let mut b = [0u8; 28];
    b[..4].copy_from_slice(&xflags.to_ne_bytes());
    b
}

/// The native-endian u32 at byte `at` of an ioctl's input.
fn u32_at(data: &[u8], at: usize) -> Res<u32> {
    data.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_ne_bytes)
        .ok_or(Errno::EINVAL)
}

impl<B: Backend> LynxFuse<B> {
    pub fn new(fs: Arc<Fs<B>>, entry_ttl: Duration, attr_ttl: Duration, read_only: bool) -> Self {
        LynxFuse {
            committers: Committers::new(&fs),
            fs,
            entry_ttl,
            attr_ttl,
            read_only,
            kernel_kills_privs: true,
            notices: Arc::new(OnceLock::new()),
            transport: Arc::new(OnceLock::new()),
            kernel_acls: true,
            forwarder: Arc::new(Mutex::new(None)),
            forwarded: Forwarded::default(),
            writeback: false,
            no_opendir: false,
            locks: None,
            locks_on: false,
            times: None,
        }
        .with_stand_ins()
    }

    /// Locks on the pool's stand-ins, when it has them (see [`crate::locks`]).
    fn with_stand_ins(mut self) -> Self {
        if self.fs.pool().attachment().is_some() {
            let fs = self.fs.clone();
            let open = Box::new(move |ino| {
                fs.lock_stand_in(ino)
                    .unwrap_or_else(|| Err(std::io::Error::from_raw_os_error(libc::ENOLCK)))
            });
            // What other processes wrote before letting the lock go is read anew.
            let notices = self.notices.clone();
            let granted = Box::new(move |ino| {
                if let Some(n) = notices.get() {
                    report(n.inval_inode(INodeNo(ino), 0, 0), || format!("inode {ino}"));
                }
            });
            self.locks = Some(Locks::new(open, granted));
        }
        self
    }

    /// Lets the kernel keep written pages and send them later (FUSE_WRITEBACK_CACHE):
    /// small writes cost no round trip each, but a write is durable only once the
    /// kernel has sent it, at fsync or close (or when it writes back on its own).
    pub fn with_writeback(mut self) -> Self {
        self.writeback = true;
        self
    }

    /// Writes the session's request times (see [`crate::times`]) when it ends.
    pub(crate) fn with_request_times(mut self, times: TimesFile) -> Self {
        self.times = Some(times);
        self
    }

    /// The flags to open the engine handle with. With the writeback cache the kernel
    /// writes cached pages at offsets of its own choosing (so no O_APPEND: it already
    /// placed appended bytes at the end) and reads a page in before writing part of it
    /// through any handle, write-only ones included (so those are opened read-write).
    fn engine_flags(&self, flags: i32) -> i32 {
        if !self.writeback {
            return flags;
        }
        let flags = flags & !libc::O_APPEND;
        if flags & libc::O_ACCMODE == libc::O_WRONLY {
            (flags & !libc::O_ACCMODE) | libc::O_RDWR
        } else {
            flags
        }
    }

    /// FS_IOC_SETFLAGS as the caller; the ioctl's answer (no data).
    fn set_flags(&self, req: &Request, ino: u64, flags: u32) -> Res<Vec<u8>> {
        self.writable()?;
        as_caller(req, |c| self.fs.set_inode_flags(ino, flags, c))?;
        // An ioctl is answered without attributes, and the kernel keeps its cached
        // ctime (and flags) for the attribute timeout: drop them now.
        self.privs_dropped(ino);
        Ok(Vec::new())
    }

    /// Opens the engine handle for an OPEN as the caller. A write-only open that the
    /// writeback cache turned read-write is checked for what the caller asked
    /// (write permission), then opened unchecked (as if just created): the caller may
    /// lack read permission. It stays the caller's handle, so its writes keep to the
    /// caller's share of the pool (not root's reserve).
    fn open_engine(&self, req: &Request, ino: u64, flags: i32, created: bool) -> Res<lynxfs::Fd> {
        let engine = self.engine_flags(flags);
        if engine & libc::O_ACCMODE == flags & libc::O_ACCMODE {
            return as_caller(req, |c| self.fs.open_ino(ino, engine, c, created)).map(|o| o.fd);
        }
        if !created {
            as_caller(req, |c| self.fs.access(ino, c, libc::W_OK as u32))?;
        }
        as_caller(req, |c| self.fs.open_ino(ino, engine, c, true)).map(|o| o.fd)
    }

    /// How `ino`'s cached pages are treated at an open: kept (FOPEN_KEEP_CACHE) when
    /// the forwarder has passed on every change other processes made before this
    /// open, so the pages hold what the pool holds (this mount's own writes and
    /// truncates went through the kernel's cache, and every other change's
    /// invalidation is done), and a read would not update the atime (reads the
    /// kernel answers from its pages never reach the engine, which keeps atime);
    /// else dropped, as FUSE does by default, so an open that follows another
    /// process's write never reads what was there before, and the first read after a
    /// change updates the atime as relatime says. A reopened file is then read from
    /// the kernel's pages: no READ request.
    fn open_flags(&self, ino: u64, flags: i32) -> FopenFlags {
        let pages = if self.forwarded.caught_up(&self.fs) && !self.fs.read_would_touch_atime(ino) {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        };
        pages | self.direct_if_write_only(flags)
    }

    /// A write-only open's writes go straight to the daemon (FOPEN_DIRECT_IO), one
    /// WRITE per write(2) up to 1 MiB: through the page cache the kernel ends a WRITE
    /// at every partly written page it does not hold whole (a write that does not
    /// start or end on a page boundary costs two), and asks GETXATTR
    /// `security.capability` before the first write of every file it has just
    /// learned (S_NOSEC is forgotten at each attribute refresh); a direct write asks
    /// the daemon to kill privileges instead (FUSE_WRITE_KILL_SUIDGID), which the
    /// engine does at every write anyway. Nothing else changes for such an open: it
    /// cannot be read or mapped (mmap needs read access), and the kernel drops its
    /// cached pages of the written range (other opens read the new bytes). Not with
    /// the writeback cache, which gathers writes in those pages.
    fn direct_if_write_only(&self, flags: i32) -> FopenFlags {
        if flags & libc::O_ACCMODE == libc::O_WRONLY && !self.writeback {
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            FopenFlags::empty()
        }
    }

    /// What starts passing the changes other processes attached to the pool make on
    /// to the kernel, once the session exists (see [`Forward::start`]).
    pub fn forward(&self) -> Forward<B> {
        Forward {
            fs: self.fs.clone(),
            slot: self.forwarder.clone(),
            forwarded: self.forwarded.clone(),
        }
    }

    /// Leaves ACLs (and so every permission check) to the engine: the kernel then
    /// passes ACL attributes through as plain xattr calls.
    pub fn without_kernel_acls(mut self) -> Self {
        self.kernel_acls = false;
        self
    }

    /// Where the mount puts the session's [`Notifier`] once the session exists, so
    /// the adapter can tell the kernel about changes it did not ask for.
    pub fn notices(&self) -> Arc<OnceLock<Notifier>> {
        self.notices.clone()
    }

    /// Where the mount puts the session's io_uring state, which says the transport.
    pub fn transport(&self) -> Arc<OnceLock<IoUringState>> {
        self.transport.clone()
    }

    /// The privilege bits a write by this handle may clear in `ino`'s mode.
    fn privs(&self, ino: u64) -> u32 {
        self.fs.mode(ino) & (libc::S_ISUID | libc::S_ISGID)
    }

    /// The engine cleared S_ISUID/S_ISGID of `ino` during a write (which FUSE answers
    /// without attributes), or changed its attributes in another call answered without
    /// them: drop the kernel's cached attributes now, before the caller is answered, or it would go on granting the old set-user-ID bit to
    /// exec for up to the attribute timeout.
    fn privs_dropped(&self, ino: u64) {
        if let Some(n) = self.notices.get() {
            // Offset -1: attributes only; the pages stay (no page lock is taken, so
            // this cannot wait on the write the kernel is making).
            if let Err(e) = n.inval_inode(INodeNo(ino), -1, 0) {
                if e.raw_os_error() != Some(libc::ENOENT) {
                    eprintln!("lynxfs: invalidating the attributes of inode {ino}: {e}");
                }
            }
        }
    }

    pub fn fs(&self) -> &Arc<Fs<B>> {
        &self.fs
    }

    fn writable(&self) -> Res<()> {
        if self.read_only {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }

    /// May `name` be made in `parent`? On a read-only mount a name that exists is
    /// EEXIST, as Linux answers (it looks the name up before asking for write access),
    /// and only a new one EROFS.
    fn may_make(&self, parent: u64, name: &OsStr) -> Res<()> {
        if self.read_only && self.fs.name_exists(parent, name_bytes(name)) {
            return Err(Errno::EEXIST);
        }
        self.writable()
    }

    fn stat(&self, ino: u64) -> Res<Stat> {
        self.fs.getattr(ino).map_err(|e| errno(&e))
    }

    /// Answers a create or tmpfile: the new file's entry and its open handle.
    fn reply_created(&self, r: Res<(Stat, u64)>, flags: i32, reply: ReplyCreate) {
        match r {
            Ok((st, fd)) => reply.created(
                &self.entry_ttl,
                &file_attr(&st),
                entry_generation(&st),
                FileHandle(fd),
                self.open_flags(st.ino, flags),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn reply_entry(&self, r: Res<Stat>, reply: ReplyEntry) {
        match r {
            Ok(st) => reply.entry_with_ttls(
                &self.attr_ttl,
                &self.entry_ttl,
                &file_attr(&st),
                entry_generation(&st),
            ),
            Err(e) => reply.error(e),
        }
    }

    /// Answers a lookup that found nothing with a negative entry (node id 0), which the
    /// kernel caches for the entry timeout, so the next lookup of the same missing name
    /// (a `PATH` search, a build probing for headers) is answered without a round trip.
    /// Creating the name through the mount replaces the cached miss; another process
    /// creating it sends an invalidation notice for the name ([`crate::forward`]).
    fn reply_missing(&self, reply: ReplyEntry) {
        let none = FileAttr {
            ino: INodeNo(0),
            size: 0,
            blocks: 0,
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: FileType::RegularFile,
            perm: 0,
            nlink: 0,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 0,
            flags: 0,
        };
        reply.entry_with_ttls(&Duration::ZERO, &self.entry_ttl, &none, Generation(0));
    }

    /// Hands `add` the entries of directory `ino` from `offset` on, read in batches,
    /// until `add` says the reply is full (the kernel then asks again from the last
    /// entry's `next`) or the directory ends.
    fn list(
        &self,
        req: &Request,
        ino: INodeNo,
        offset: u64,
        mut add: impl FnMut(&lynxfs::DirRef) -> bool,
    ) -> Res<()> {
        if self.fs.is_removed_dir(ino.0) {
            // What the kernel answers itself (IS_DEADDIR) for a directory it removed,
            // also when another attacher removed it: getdents says ENOENT, which
            // readdir(3) takes as the end.
            return Err(Errno::ENOENT);
        }
        let mut off = offset;
        let mut batch = lynxfs::DirBatch::new();
        loop {
            as_caller(req, |c| {
                self.fs
                    .readdir_into(ino.0, off, READDIR_BATCH, c, &mut batch)
            })?;
            let Some(last) = batch.last() else {
                return Ok(());
            };
            let next_off = last.next;
            for e in batch.iter() {
                if add(&e) {
                    return Ok(());
                }
            }
            off = next_off;
        }
    }

    /// The attributes of `ino`, through its open file `fh` when the kernel names one
    /// (it stays readable after its last name goes).
    fn stat_via(&self, ino: INodeNo, fh: Option<FileHandle>) -> Res<Stat> {
        match fh {
            Some(fh) => self
                .fs
                .fstat(fh.0)
                .or_else(|_| self.fs.getattr(ino.0))
                .map_err(|e| errno(&e)),
            None => self.stat(ino.0),
        }
    }

    fn reply_attr(&self, r: Res<Stat>, reply: ReplyAttr) {
        match r {
            Ok(st) => reply.attr(&self.attr_ttl, &file_attr(&st)),
            Err(e) => reply.error(e),
        }
    }

    /// Makes a node with `make` (as the caller) and holds it: its attributes.
    fn make(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        make: impl Fn(&Cred) -> lynxfs::Result<u64>,
    ) -> Res<Stat> {
        self.may_make(parent, name)?;
        let ino = as_caller(req, make)?;
        self.fs
            .hold_new(parent, name_bytes(name), ino)
            .map_err(|e| errno(&e))
    }

    fn setattr_inner(
        &self,
        req: &Request,
        ino: u64,
        a: &SetAttr,
        size: Option<u64>,
        fh: Option<FileHandle>,
    ) -> Res<Stat> {
        self.writable()?;
        if let Some(len) = size {
            // A handle open for writing truncates without a permission check, as
            // ftruncate(2) does; otherwise (truncate(2), or O_TRUNC on a read-only
            // open) the caller needs write permission.
            let by_handle = fh.map(|fh| self.fs.ftruncate(fh.0, len));
            match by_handle {
                Some(Ok(())) => {}
                Some(Err(e)) if e.errno() != libc::EINVAL && e.errno() != libc::EBADF => {
                    return Err(errno(&e))
                }
                _ => as_caller(req, |c| self.fs.truncate_as(ino, len, c))?,
            }
        }
        let any = a.mode.is_some()
            || a.uid.is_some()
            || a.gid.is_some()
            || a.atime.is_some()
            || a.mtime.is_some();
        if !any {
            return self.stat(ino);
        }
        if let (Some(m), None, None, None, None) = (a.mode, a.uid, a.gid, a.atime, a.mtime) {
            // Without FUSE_HANDLE_KILLPRIV (see `init`) the kernel clears S_ISUID and
            // S_ISGID before a write by sending this setattr as the writer, who need
            // not own the file: the engine lets a writer drop only those bits. Any
            // other mode change is a chmod, below.
            if self.kernel_kills_privs && req.uid() != 0 {
                if let Ok(st) = as_caller(req, |c| self.fs.drop_privs(ino, m, c)) {
                    return Ok(st);
                }
            }
        }
        if a.mode.is_some() {
            // chmod keeps S_ISGID only for a member of the file's group: the answer
            // depends on the groups, so read them first.
            let cred = full_cred(req);
            return self.fs.setattr(ino, a, &cred).map_err(|e| errno(&e));
        }
        as_caller(req, |c| self.fs.setattr(ino, a, c))
    }
}

/// The usage attribute's readers: root and the user the daemon runs as (the mounter).
fn may_read_usage(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::geteuid().as_raw()
}

fn reply_empty(r: Res<()>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

/// The xattr reply protocol: size 0 asks for the length; a buffer too small is ERANGE.
fn reply_xattr(r: Res<Vec<u8>>, size: u32, reply: ReplyXattr) {
    match r {
        Ok(v) if size == 0 => match u32::try_from(v.len()) {
            Ok(n) => reply.size(n),
            Err(_) => reply.error(Errno::E2BIG),
        },
        Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
        Ok(v) => reply.data(&v),
        Err(e) => reply.error(e),
    }
}

impl<B: Backend> LynxFuse<B> {
    /// Asks for what lets the kernel answer more on its own; each is optional (an
    /// older kernel just sends more requests).
    fn init_caches(&mut self, config: &mut fuser::KernelConfig) {
        // A symlink's target never changes, so the kernel may keep it in its page
        // cache (dropped with the inode's pages by an invalidation notice).
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_CACHE_SYMLINKS);
        // The engine serves any number of calls in one directory at once; without
        // this the kernel serializes lookups and listings per directory.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_PARALLEL_DIROPS);
        // File handles (name_to_handle_at, NFS export) that outlive the kernel's
        // caches: see `lookup` of "." and "..".
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_EXPORT_SUPPORT);
        // 1 MiB writes (FUSE_MAX_PAGES, asked for by `fuser` when offered, carries
        // the 256 pages they need; without it the kernel keeps 32 pages).
        let _ = config.set_max_write(MAX_WRITE);
        if self.writeback
            && config
                .add_capabilities(fuser::InitFlags::FUSE_WRITEBACK_CACHE)
                .is_err()
        {
            eprintln!("lynxfs: the kernel offers no writeback cache: writes go through");
            self.writeback = false;
        }
    }
}

impl<B: Backend> LynxFuse<B> {
    /// Asks the kernel to send lock requests (POSIX, then flock) when the pool has
    /// stand-ins; without them (an older kernel) locks through the mount stay local.
    fn init_locks(&mut self, config: &mut fuser::KernelConfig) {
        if self.locks.is_none() {
            return;
        }
        self.locks_on = config
            .add_capabilities(fuser::InitFlags::FUSE_POSIX_LOCKS)
            .is_ok();
        let flock = self.locks_on
            && config
                .add_capabilities(fuser::InitFlags::FUSE_FLOCK_LOCKS)
                .is_ok();
        if !flock {
            let which = if self.locks_on {
                "flock locks"
            } else {
                "locks"
            };
            eprintln!(
                "lynxfs: the kernel keeps this mount's {which} to itself: they do not \
                 exclude the pool's other users' (preloaded programs, other mounts)"
            );
        }
    }
}

impl<B: Backend> Filesystem for LynxFuse<B> {
    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> std::io::Result<()> {
        // The engine clears S_ISUID/S_ISGID itself on write, truncate and chown, so
        // the kernel need not send (and we need not trust) its own mode-only setattr.
        self.kernel_kills_privs = config
            .add_capabilities(fuser::InitFlags::FUSE_HANDLE_KILLPRIV)
            .is_err();
        // The same said again in its second form, which also lets the kernel mark
        // inodes without privileges to kill (SB_NOSEC): a write then costs no
        // GETXATTR of security.capability before it is sent (one request per write
        // otherwise). The engine drops the capability at every write, and the set-ID
        // bits by its own rule (not for a privileged writer), whatever the kernel's
        // FUSE_WRITE_KILL_SUIDGID says. Optional: an older kernel asks as before.
        if !self.kernel_kills_privs {
            let _ = config.add_capabilities(fuser::InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        }
        // Listing with attributes saves `ls -l` and friends one lookup per entry; the
        // kernel picks plain or plus listings adaptively (AUTO). Optional: without it
        // the kernel sends plain READDIR, which is also served.
        let _ = config.add_capabilities(
            fuser::InitFlags::FUSE_DO_READDIRPLUS | fuser::InitFlags::FUSE_READDIRPLUS_AUTO,
        );
        // POSIX ACLs: the kernel caches them and checks permissions with them (this
        // turns `default_permissions` on); the engine keeps ACL and mode in step and
        // applies default ACLs at create. With FUSE_DONT_MASK the umask comes to us
        // unapplied, and is applied only where no default ACL replaces it (by the engine, at create).
        // Optional: an older kernel passes the ACL attributes through as before.
        let acl = if self.kernel_acls {
            fuser::InitFlags::FUSE_POSIX_ACL
        } else {
            fuser::InitFlags::empty()
        };
        let kernel_checks = config.add_capabilities(acl).is_ok() && self.kernel_acls;
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_DONT_MASK);
        // A directory's open checks read permission and keeps nothing (the handle is
        // 0): where the kernel checks permissions itself (FUSE_POSIX_ACL turns its
        // checks on) that is all done before OPENDIR would be sent, so it need not be.
        // `daemon_permissions` mounts keep it: there the daemon alone checks.
        self.no_opendir = kernel_checks
            && config
                .add_capabilities(fuser::InitFlags::FUSE_NO_OPENDIR_SUPPORT)
                .is_ok();
        self.init_caches(config);
        self.init_locks(config);
        Ok(())
    }

    fn destroy(&mut self) {
        if let Some(l) = &self.locks {
            l.end();
        }
        self.committers.end();
        // No more notices (the kernel is gone).
        drop(
            self.forwarder
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
        // Every worker thread has stopped: every timed request has been answered.
        if let Some(t) = &self.times {
            if let Err(e) = t.write() {
                eprintln!(
                    "lynxfs: writing the request times ({}): {e}",
                    crate::times::VAR
                );
            }
        }
        // Close the pool cleanly.
        if let Err(e) = self.fs.close() {
            eprintln!("lynxfs: closing the pool: {e}");
        }
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        // With FUSE_EXPORT_SUPPORT the kernel decodes a file handle whose inode it no
        // longer caches by looking up "." in that number (any type), and its parent by
        // "..": inode numbers and generations are the pool's, stable across cache
        // drops, remounts and daemon restarts.
        match name_bytes(name) {
            b"." => {
                let r = self.fs.hold_by_number(parent.0).map_err(|e| errno(&e));
                return self.reply_entry(r, reply);
            }
            b".." => {
                let r = self.fs.hold_parent(parent.0).map_err(|e| errno(&e));
                return self.reply_entry(r, reply);
            }
            _ => {}
        }
        let r = as_caller(req, |c| self.fs.lookup_hold(parent.0, name_bytes(name), c));
        match r {
            Err(Errno::ENOENT) => self.reply_missing(reply),
            r => self.reply_entry(r, reply),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.reply_attr(self.stat_via(ino, fh), reply);
    }

    /// What getattr answers, with the birth time (statx's mask and flags change
    /// nothing: every field is at hand, and the pool has no cache to sync).
    fn statx(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: Option<FileHandle>,
        _flags: u32,
        _mask: u32,
        reply: ReplyStatx,
    ) {
        match self.stat_via(ino, fh) {
            Ok(st) => reply.statx(&self.attr_ttl, &file_attr(&st)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let a = SetAttr {
            mode,
            uid,
            gid,
            atime: atime.map(time_set),
            mtime: mtime.map(time_set),
        };
        self.reply_attr(self.setattr_inner(req, ino.0, &a, size, fh), reply);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let name_b = name_bytes(name);
        let r = self.make(req, parent.0, name, |c| {
            self.fs
                .mknod_in(parent.0, name_b, (mode, umask), u64::from(rdev), c)
        });
        self.reply_entry(r, reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.make(req, parent.0, name, |c| {
            self.fs
                .mkdir_in(parent.0, name_bytes(name), (mode, umask), c)
        });
        self.reply_entry(r, reply);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self
            .writable()
            .and_then(|()| as_caller(req, |c| self.fs.unlink_in(parent.0, name_bytes(name), c)));
        reply_empty(r, reply);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self
            .writable()
            .and_then(|()| as_caller(req, |c| self.fs.rmdir_in(parent.0, name_bytes(name), c)));
        reply_empty(r, reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let target = target.as_os_str().as_bytes();
        let r = self.make(req, parent.0, link_name, |c| {
            self.fs
                .symlink_in(parent.0, name_bytes(link_name), target, c)
        });
        self.reply_entry(r, reply);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.writable().and_then(|()| {
            as_caller(req, |c| {
                self.fs.rename_in(
                    (parent.0, name_bytes(name)),
                    (newparent.0, name_bytes(newname)),
                    flags.bits(),
                    c,
                )
            })
        });
        reply_empty(r, reply);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self.may_make(newparent.0, newname).and_then(|()| {
            as_caller(req, |c| {
                self.fs.link_in(ino.0, newparent.0, name_bytes(newname), c)
            })?;
            self.fs
                .hold_new(newparent.0, name_bytes(newname), ino.0)
                .map_err(|e| errno(&e))
        });
        self.reply_entry(r, reply);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = (|| {
            let acc = flags.0 & libc::O_ACCMODE;
            if acc != libc::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
                self.writable()?;
            }
            self.open_engine(req, ino.0, flags.0, false)
        })();
        match r {
            Ok(fd) => reply.opened(FileHandle(fd), self.open_flags(ino.0, flags.0)),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        READ_BUF.with_borrow_mut(|buf| {
            let size = size as usize;
            if buf.len() < size {
                buf.resize(size, 0);
            }
            match self.fs.pread(fh.0, &mut buf[..size], offset) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(errno(&e)),
            }
        })
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let privs = self.privs(ino.0);
        let r = self
            .writable()
            .and_then(|()| self.fs.pwrite(fh.0, data, offset).map_err(|e| errno(&e)));
        if privs != 0 && self.privs(ino.0) != privs {
            self.privs_dropped(ino.0);
        }
        match r {
            // A FUSE write is at most max_write (far below 4 GiB) long.
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => reply.error(e),
        }
    }

    /// copy_file_range: one request copies the whole range inside the engine (the
    /// kernel's fallback reads and writes it through the daemon a page run at a time).
    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let privs = self.privs(ino_out.0);
        // The answer is a u32 count: at most 2 GiB per request (the kernel asks again).
        let len = len.min(1 << 31);
        let r = self.writable().and_then(|()| {
            self.fs
                .copy_range(fh_in.0, offset_in, fh_out.0, offset_out, len)
                .map_err(|e| errno(&e))
        });
        if privs != 0 && self.privs(ino_out.0) != privs {
            self.privs_dropped(ino_out.0);
        }
        match r {
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Every write is durable when it is answered and nothing is buffered here.
        // Without locks, ENOSYS says so once: the kernel then stops sending FLUSH at
        // every close (and takes it as success), saving a round trip per close. With
        // them, FLUSH is where a close drops the closing process's POSIX locks.
        match (&self.locks, self.locks_on) {
            (Some(l), true) => {
                l.flush(ino.0, fh.0, lock_owner.0);
                reply.ok();
            }
            _ => reply.error(Errno::ENOSYS),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if let Some(l) = &self.locks {
            l.release(ino.0, fh.0, lock_owner.map(|o| o.0));
        }
        reply_empty(self.fs.close_fd(fh.0).map_err(|e| errno(&e)), reply);
    }

    fn getlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        reply: ReplyLock,
    ) {
        let Some(l) = &self.locks else {
            return reply.error(Errno::ENOSYS);
        };
        l.get(
            lock_request(ino, fh, lock_owner, start, end, typ, false),
            reply,
        );
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        sleep: bool,
        flock: bool,
        reply: ReplyEmpty,
    ) {
        let Some(l) = &self.locks else {
            return reply.error(Errno::ENOSYS);
        };
        let r = lock_request(ino, fh, lock_owner, start, end, typ, flock);
        l.set(r, sleep, req.unique().0, reply);
    }

    fn interrupt(&self, unique: fuser::RequestId) -> bool {
        match &self.locks {
            Some(l) => {
                l.interrupt(unique.0);
                true
            }
            None => false,
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        if self.fs.pool().txn().is_some() {
            // A hybrid pool's writes are durable at its commit (never ENOSYS: the
            // kernel would stop asking); a file with none pending commits nothing.
            // A commit waits for the device: off this request thread. An fsync with
            // nothing to commit is answered here, without a hand-over to a committer.
            return match self.fs.fsync_would_commit(fh.0) {
                Ok(true) => self.committers.fsync(fh.0, reply),
                Ok(false) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            };
        }
        // Every write is durable when it is answered, with either backend (msync's
        // fence writes the pages back synchronously before the write is answered), so
        // the engine's fsync has nothing to do. ENOSYS says so once: the kernel then
        // answers fsync(2) itself, after sending what it still holds (writeback).
        reply.error(Errno::ENOSYS);
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if self.no_opendir {
            // The kernel has checked read permission, and takes ENOSYS as success
            // with handle 0 from now on (no OPENDIR, no RELEASEDIR).
            return reply.error(Errno::ENOSYS);
        }
        // Listing needs read permission, checked at open as for any directory. A
        // removed directory still held opens too (`openat(fd, ".")` or `ls` in a
        // removed working directory), as on tmpfs; it lists nothing.
        let r = as_caller(req, |c| self.fs.open_dir(ino.0, c));
        match r {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let listed = self.list(req, ino, offset, |e| {
            let kind = kind_of(u32::from(e.dtype) << 12);
            reply.add(INodeNo(e.ino), e.next, kind, OsStr::from_bytes(e.name))
        });
        match listed {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        // One TTL serves both the entry and its attributes in a plus listing. Listing
        // needs read permission, using the names search permission: without
        // `default_permissions` the kernel checks neither itself, so entries cached for a
        // caller who may not search the directory would let them past it. Such a caller
        // gets entries that expire at once, and the next walk asks LOOKUP, which checks.
        let searchable = as_caller(req, |c| self.fs.access(ino.0, c, libc::X_OK as u32)).is_ok();
        let ttl = if searchable {
            self.entry_ttl.min(self.attr_ttl)
        } else {
            Duration::ZERO
        };
        let listed = self.list(req, ino, offset, |e| {
            let name = OsStr::from_bytes(e.name);
            if e.name == b"." || e.name == b".." {
                // The kernel neither links nor counts these.
                let Ok(st) = self.stat(e.ino) else {
                    return false;
                };
                let generation = entry_generation(&st);
                return reply.add(
                    INodeNo(e.ino),
                    e.next,
                    name,
                    &ttl,
                    &file_attr(&st),
                    generation,
                );
            }
            // Each entry given with attributes counts as a lookup, so it is held. An
            // entry unlinked since the listing was read is left out, and one whose
            // name now leads elsewhere is given as it is now, as a listing made a
            // moment later would.
            let Ok(st) = self.fs.hold_new(ino.0, e.name, e.ino) else {
                return false;
            };
            let generation = entry_generation(&st);
            let full = reply.add(
                INodeNo(st.ino),
                e.next,
                name,
                &ttl,
                &file_attr(&st),
                generation,
            );
            if full {
                // Not sent: the kernel will not count it.
                self.fs.forget(st.ino, 1);
            }
            full
        });
        match listed {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Directory changes are durable when the call that made them returns: ENOSYS
        // once, and the kernel stops asking (as for FSYNC).
        reply.error(Errno::ENOSYS);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.fs.statfs();
        let bsize = u32::try_from(s.block_size).unwrap_or(4096);
        reply.statfs(
            s.blocks,
            s.blocks_free,
            s.blocks_avail,
            s.files,
            s.files_free,
            bsize,
            u32::try_from(s.name_max).unwrap_or(255),
            bsize,
        );
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let name = name_bytes(name);
        let r = self.writable().and_then(|()| {
            // Setting an access ACL may clear S_ISGID depending on the caller's
            // groups, so they are read first.
            let cred = full_cred(req);
            self.fs
                .setxattr(ino.0, name, value, flags, &cred)
                .map_err(|e| errno(&e))
        });
        reply_empty(r, reply);
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let name = name_bytes(name);
        if ino.0 == lynxfs::format::ROOT_INO && name == USAGE_XATTR.as_bytes() {
            // The daemon's memory and transport are the mounter's business: only the
            // mounter and root may read them (an allow_other mount lets others ask).
            if !may_read_usage(req.uid()) {
                return reply.error(Errno::EACCES);
            }
            let text = LiveUsage::of(&self.fs, self.transport.get().map(transport_of)).encode();
            return reply_xattr(Ok(text.into_bytes()), size, reply);
        }
        let r = as_caller(req, |c| self.fs.getxattr(ino.0, name, c));
        reply_xattr(r, size, reply);
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let r = as_caller(req, |c| self.fs.listxattr(ino.0, c)).map(|names| {
            names.iter().fold(Vec::new(), |mut out, n| {
                out.extend_from_slice(n);
                out.push(0);
                out
            })
        });
        reply_xattr(r, size, reply);
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name_bytes(name);
        if name == lynxfs::meta::CAPABILITY && req.uid() != 0 {
            // The kernel refuses this name to a caller without CAP_SETFCAP, so what
            // reaches us is its own removal before another user's write, truncate
            // or fallocate (`file_remove_privs`), which Linux makes regardless of
            // the writer's rights.
            let r = self
                .writable()
                .and_then(|()| self.fs.drop_capability(ino.0).map_err(|e| errno(&e)));
            return reply_empty(r, reply);
        }
        let r = self
            .writable()
            .and_then(|()| as_caller(req, |c| self.fs.removexattr(ino.0, name, c)));
        reply_empty(r, reply);
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let r = (|| {
            if mask.contains(AccessFlags::W_OK) {
                self.writable()?;
            }
            as_caller(req, |c| self.fs.access(ino.0, c, mask.bits() as u32))
        })();
        reply_empty(r, reply);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = (|| {
            if flags & libc::O_EXCL != 0 {
                self.may_make(parent.0, name)?;
            }
            self.writable()?;
            let excl = flags & libc::O_EXCL != 0;
            let (ino, created) = as_caller(req, |c| {
                self.fs
                    .create_in(parent.0, name_bytes(name), (mode, umask), excl, c)
            })?;
            let fd = self.open_engine(req, ino, flags, created)?;
            match self.fs.hold_new(parent.0, name_bytes(name), ino) {
                Ok(st) if st.ino == ino => Ok((st, fd)),
                // The name moved on before the kernel learned it: the handle is on a
                // file the name no longer leads to, so report the name as gone.
                Ok(st) => {
                    self.fs.forget(st.ino, 1);
                    let _ = self.fs.close_fd(fd);
                    Err(Errno::ENOENT)
                }
                Err(e) => {
                    let _ = self.fs.close_fd(fd);
                    Err(errno(&e))
                }
            }
        })();
        self.reply_created(r, flags, reply)
    }

    /// Inode flags (`chattr`/`lsattr`: the kernel sends FS_IOC_GETFLAGS/SETFLAGS with a
    /// 4-byte value, having checked CAP_LINUX_IMMUTABLE and ownership itself; the
    /// engine checks again). Other ioctls: ENOTTY.
    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        const GETFLAGS: u32 = libc::FS_IOC_GETFLAGS as u32;
        const SETFLAGS: u32 = libc::FS_IOC_SETFLAGS as u32;
        // _IOR('X', 31, struct fsxattr) and _IOW('X', 32, struct fsxattr).
        const FSGETXATTR: u32 = 0x801c_581f;
        const FSSETXATTR: u32 = 0x401c_5820;
        let flags = self.fs.inode_flags(ino.0);
        let out = |bytes: &[u8]| bytes[..(out_size as usize).min(bytes.len())].to_vec();
        let r = match cmd {
            GETFLAGS => Ok(out(&flags.to_ne_bytes())),
            // The kernel reads the old flags this way before a SETFLAGS.
            FSGETXATTR => Ok(out(&fsxattr(xflags_of(flags)))),
            SETFLAGS => u32_at(in_data, 0).and_then(|f| self.set_flags(req, ino.0, f)),
            FSSETXATTR => u32_at(in_data, 0)
                .and_then(flags_of_xflags)
                .and_then(|f| self.set_flags(req, ino.0, f)),
            _ => Err(Errno::from_i32(libc::ENOTTY)),
        };
        match r {
            Ok(data) => reply.ioctl(0, &data),
            Err(e) => reply.error(e),
        }
    }

    /// `O_TMPFILE`: an unnamed file, linkable by `linkat` unless opened `O_EXCL`
    /// (the kernel enforces that too).
    fn tmpfile(
        &self,
        req: &Request,
        parent: INodeNo,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = (|| {
            self.writable()?;
            let flags = self.engine_flags(flags);
            let o = as_caller(req, |c| {
                self.fs.open_tmpfile(parent.0, (mode, umask), flags, c)
            })?;
            let held = self
                .fs
                .getattr(o.ino)
                .and_then(|st| self.fs.hold(st.ino).map(|()| st));
            match held {
                Ok(st) => Ok((st, o.fd)),
                Err(e) => {
                    let _ = self.fs.close_fd(o.fd);
                    Err(errno(&e))
                }
            }
        })();
        self.reply_created(r, flags, reply)
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let privs = self.privs(ino.0);
        let r = self.writable().and_then(|()| {
            self.fs
                .fallocate(fh.0, mode, offset, length)
                .map_err(|e| errno(&e))
        });
        if privs != 0 && self.privs(ino.0) != privs {
            self.privs_dropped(ino.0);
        }
        reply_empty(r, reply);
    }

    /// The kernel asks only for SEEK_DATA and SEEK_HOLE (it moves positions itself):
    /// answered from the file's block map, so cp and tar see the holes.
    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        match self.fs.seek(fh.0, offset, whence) {
            // At most the largest file size, far below i64::MAX.
            Ok(at) => reply.offset(at as i64),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

/// A lock request as [`Locks`] takes it.
fn lock_request(
    ino: INodeNo,
    fh: FileHandle,
    owner: LockOwner,
    start: u64,
    end: u64,
    typ: i32,
    flock: bool,
) -> crate::locks::Request {
    crate::locks::Request {
        ino: ino.0,
        fh: fh.0,
        owner: owner.0,
        start,
        end,
        typ,
        flock,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lynxfs::pmem::PmemBackend;
    use lynxfs::MkfsOptions;

    /// The pool's root counts generation 1 (as every inode starts), but an entry reply
    /// for the root must say 0 (issue 30, item 17).
    #[test]
    fn the_roots_entry_generation_is_zero() {
        let mut o = MkfsOptions::new(16 << 20);
        o.lanes = 2;
        let fs = Fs::in_memory(&o, PmemBackend::default()).expect("in-memory pool");
        let s = fs.session(Cred::root());
        let root = s.stat("/").unwrap();
        assert_eq!(root.ino, lynxfs::format::ROOT_INO);
        assert_ne!(root.generation, 0);
        assert_eq!(entry_generation(&root), Generation(0));
        s.mkdir("/d", 0o755).unwrap();
        let d = s.stat("/d").unwrap();
        assert_eq!(entry_generation(&d), Generation(d.generation));
    }

    /// On a read-only mount, making a name that exists is EEXIST, a new one EROFS, as
    /// on Linux (issue 30, item 15): before, both were EROFS.
    #[test]
    fn a_read_only_mount_answers_eexist_for_a_name_that_exists() {
        let mut o = MkfsOptions::new(16 << 20);
        o.lanes = 2;
        let fs = Fs::in_memory(&o, PmemBackend::default()).expect("in-memory pool");
        fs.session(Cred::root()).mkdir("/d", 0o755).unwrap();
        let ttl = Duration::from_secs(1);
        let fuse = LynxFuse::new(Arc::new(fs), ttl, ttl, true);
        let root = lynxfs::format::ROOT_INO;
        assert_eq!(fuse.may_make(root, OsStr::new("d")), Err(Errno::EEXIST));
        assert_eq!(fuse.may_make(root, OsStr::new("new")), Err(Errno::EROFS));
    }
}
