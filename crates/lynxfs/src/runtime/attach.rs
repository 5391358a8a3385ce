//! Attaching a process to a pool's shared runtime state, and detaching it.
//!
//! The runtime state of a pool file lives in a directory of its own, the pool's
//! *session directory* `<dir>/lynxfs-<uuid>-<dev>-<ino>.<random>/` (dir `/dev/shm`, or
//! `$LYNXFS_RUNTIME_DIR`), mode 0700, made by the first attacher under a name nobody
//! can predict (16 random hex digits), and found by later attachers by listing `dir`
//! for a directory with the pool's prefix that is their user's, mode 0700: in a
//! directory anyone may write to (`/dev/shm` is sticky, so a name another user made
//! stays), nothing another user creates can stand in the way: a name taken is skipped
//! at creation and another user's entries are never looked into. Two paths to one
//! pool (a hard link, a bind mount) find the same directory, a copy of the pool gets
//! its own. Inside it:
//! - `state.run`, the runtime file;
//! - `locks/`, the stand-ins of the pool's file locks ([`super::stand_ins`]);
//! - `maps/`, made by the preload library for shared mappings of pool files.
//!
//! Attaches and detaches are serialized by open-file-description locks on the POOL
//! file:
//! - byte 0, the transition lock: held exclusively during an attach or a detach;
//! - byte 1, the attachment: held shared by every attached process for as long as it is
//!   attached. The kernel drops it when the process dies, so "byte 1 can be taken
//!   exclusively" means "nobody is attached", whatever was left in the runtime file.
//!
//! The first attacher removes the session directories of its user's that earlier
//! sessions left (a crash), makes a new one, creates the runtime file and builds its
//! contents, holding the transition lock until it publishes them; later attachers
//! validate it and join. The last detacher (byte 1 exclusive while holding byte 0)
//! removes the directory.
//!
//! Every page of the file has its memory reserved (`fallocate`) before anyone touches
//! it: the first attacher reserves all but the open tables when it makes the file, and
//! each process its own open table when it takes a slot. A full directory (any user can
//! fill `/dev/shm`) is then an ENOSPC error at attach, naming the directory and the
//! size, never a SIGBUS in the middle of an operation.

use std::ffi::CString;
use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use super::procs::{self, Procs, MAX_PROCS};
use super::stand_ins::StandIns;
use super::Region;
use crate::error::{Error, Result};

/// The version of the runtime file's layout, checked by every attacher.
pub const RUNTIME_VERSION: u32 = 11;
/// Environment variable naming the directory of runtime files (default `/dev/shm`).
pub const RUNTIME_DIR_ENV: &str = "LYNXFS_RUNTIME_DIR";
const DEFAULT_DIR: &str = "/dev/shm";

const MAGIC: u64 = u64::from_le_bytes(*b"LYNXRUN\0");
/// Identity words of the header (the state words after them are `procs`').
const MAGIC_OFF: usize = 0;
const VERSION_OFF: usize = 8;
const UUID_OFF: usize = 16;
const DEV_OFF: usize = 32;
const INO_OFF: usize = 40;
const SIZE_OFF: usize = 48;
const OPEN_ENTRIES_OFF: usize = 56;

/// The runtime file's name in the session directory.
const RUNTIME_NAME: &str = "state.run";
/// Random hex digits ending a session directory's name.
const SESSION_RANDOM: usize = 16;
/// Names tried for a new session directory before giving up (each taken name is one
/// another user made, or an astronomically unlikely collision).
const SESSION_TRIES: usize = 32;

/// Bytes of the pool file locked (see the module documentation).
const TRANSITION: i64 = 0;
const ATTACHMENT: i64 = 1;

/// What names a pool's runtime file and is checked in its header.
struct PoolId {
    uuid: [u8; 16],
    dev: u64,
    ino: u64,
}

impl PoolId {
    fn of(pool_path: &Path, pool_file: &File, uuid: [u8; 16]) -> Result<PoolId> {
        let meta = pool_file.metadata().map_err(|e| Error::io(pool_path, e))?;
        Ok(PoolId {
            uuid,
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// The start of the names of the pool's session directories (the rest is
    /// [`SESSION_RANDOM`] random hex digits).
    fn prefix(&self) -> String {
        let hex: String = self.uuid.iter().map(|b| format!("{b:02x}")).collect();
        format!("lynxfs-{hex}-{}-{}.", self.dev, self.ino)
    }

    fn uuid_words(&self) -> [u64; 2] {
        let (a, b) = self.uuid.split_at(8);
        [
            u64::from_le_bytes(a.try_into().unwrap()),
            u64::from_le_bytes(b.try_into().unwrap()),
        ]
    }
}

/// How a pool's runtime region is laid out, as far as attaching is concerned (from the
/// pool's layout: `RuntimeLayout::shape`), checked against the file's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// The region's size.
    pub bytes: usize,
    /// Entries of each open table (`procs::open_entries_for`).
    pub open_entries: usize,
}

impl Shape {
    /// Bytes of one process's open table (reserved when it takes a slot).
    fn table_bytes(&self) -> usize {
        self.open_entries * 8
    }

    /// Bytes the first attacher reserves: everything but the open tables, and its own.
    fn first_reserve(&self) -> usize {
        let tables = procs::open_tables(self.open_entries);
        self.bytes - tables.len() + self.table_bytes()
    }

    fn check(&self) -> Result<()> {
        procs::check_shape(self.bytes, self.open_entries)
    }
}

/// The runtime file of a pool: where it is, and attaching to it.
pub struct RuntimeFile;

impl RuntimeFile {
    /// The directory runtime files live in: `$LYNXFS_RUNTIME_DIR`, else `/dev/shm`.
    pub fn dir() -> PathBuf {
        match std::env::var_os(RUNTIME_DIR_ENV) {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => PathBuf::from(DEFAULT_DIR),
        }
    }

    /// The session directories in `dir` of the pool open as `pool_file` that are
    /// this process's user's (mode 0700): one while the pool is attached.
    pub fn sessions_in(
        dir: &Path,
        pool_path: &Path,
        pool_file: &File,
        uuid: [u8; 16],
    ) -> Result<Vec<PathBuf>> {
        ours(dir, &PoolId::of(pool_path, pool_file, uuid)?.prefix())
    }

    /// The start of the names of the session directories of the pool open as
    /// `pool_file` (whatever their user).
    pub fn prefix_of(pool_path: &Path, pool_file: &File, uuid: [u8; 16]) -> Result<String> {
        Ok(PoolId::of(pool_path, pool_file, uuid)?.prefix())
    }

    /// Attach this process to the runtime state of the pool open (read-write) as
    /// `pool_file`, whose superblock holds `uuid`; the region is laid out as `shape`
    /// says. Waits while another process attaches or detaches.
    pub fn attach(
        pool_path: &Path,
        pool_file: &File,
        uuid: [u8; 16],
        shape: Shape,
    ) -> Result<Attached> {
        Self::attach_in(&Self::dir(), pool_path, pool_file, uuid, shape)
    }

    /// [`RuntimeFile::attach`] with the runtime file in `dir`.
    pub fn attach_in(
        dir: &Path,
        pool_path: &Path,
        pool_file: &File,
        uuid: [u8; 16],
        shape: Shape,
    ) -> Result<Attached> {
        shape.check()?;
        let id = PoolId::of(pool_path, pool_file, uuid)?;
        let locks = Locks::take(pool_file, pool_path)?;
        let first = locks.try_set(ATTACHMENT, libc::F_WRLCK)?;
        let session = match first {
            true => new_session(dir, pool_path, &id)?,
            false => find_session(dir, pool_path, &id)?,
        };
        // A new session that fails before it is attached goes (nobody else can have
        // mapped its file yet: no reserved memory is left behind).
        let mut new = NewSession(first.then(|| session.clone()));
        let path = session.join(RUNTIME_NAME);
        let region = if first {
            create(dir, &path, pool_path, &id, shape)?
        } else {
            open_existing(&path, pool_path, &id, shape)?
        };
        let stand_ins = StandIns::open_or_make(&session, pool_path)?;
        // Nobody holds byte 1 exclusively without byte 0, which we hold: this succeeds.
        if !locks.try_set(ATTACHMENT, libc::F_RDLCK)? {
            return Err(locks.error("the attachment lock is held exclusively".into()));
        }
        let procs = Procs::new(region.clone(), shape.open_entries)?;
        let slot = procs
            .register()
            .map_err(|e| register_error(e, &path, pool_path, shape.table_bytes()))?;
        new.0 = None;
        let attached = Attached {
            region,
            procs,
            first,
            slot,
            path,
            session,
            stand_ins: Some(stand_ins),
            locks,
            building: AtomicBool::new(first),
            leaving: AtomicU8::new(STAYING),
            detached: false,
        };
        if !first {
            attached.locks.set(TRANSITION, libc::F_UNLCK)?;
        }
        Ok(attached)
    }
}

/// A session directory being made, removed on drop unless taken (`.0 = None`).
struct NewSession(Option<PathBuf>);

impl Drop for NewSession {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

/// `Attached::leaving`: detach not begun, begun by a process that is not the last, or
/// begun by the last.
const STAYING: u8 = 0;
const NOT_LAST: u8 = 1;
const LAST: u8 = 2;

/// This process's attachment to a pool's runtime state.
pub struct Attached {
    /// The whole runtime region (header, process table, open tables, then the rest).
    pub region: Arc<Region>,
    /// The header's state words, process table and open tables.
    pub procs: Procs,
    /// No other process was attached: the file is new and the caller builds its
    /// contents, then calls [`Attached::publish`].
    pub first: bool,
    /// This process's slot in the process table.
    pub slot: u32,
    /// The runtime file.
    pub path: PathBuf,
    /// The session directory holding it (see the module documentation).
    session: PathBuf,
    /// The stand-ins the kernel keeps the pool's file locks on (taken by the last
    /// detacher, which removes them).
    stand_ins: Option<StandIns>,
    locks: Locks,
    /// The first attacher still holds the transition lock (until it publishes).
    building: AtomicBool,
    leaving: AtomicU8,
    detached: bool,
}

impl Attached {
    /// The first attacher has built the contents: mark them ready and let other
    /// processes attach. Does nothing for a later attacher.
    pub fn publish(&self) -> Result<()> {
        if self.building.swap(false, Ordering::SeqCst) {
            self.procs.set_ready();
            self.locks.set(TRANSITION, libc::F_UNLCK)?;
        }
        Ok(())
    }

    /// Start detaching: take the transition lock (waiting for attaches and detaches in
    /// progress) and tell whether this process is the last one attached, in which case
    /// the caller saves what it must to the pool before [`Attached::detach_end`].
    pub fn detach_begin(&self) -> Result<bool> {
        self.locks.set_wait(TRANSITION, libc::F_WRLCK)?;
        // Converting our share of byte 1 to exclusive fails (leaving the share) while
        // anyone else holds a share.
        let last = self.locks.try_set(ATTACHMENT, libc::F_WRLCK)?;
        self.leaving
            .store(if last { LAST } else { NOT_LAST }, Ordering::SeqCst);
        Ok(last)
    }

    /// Finish detaching: leave the process table, remove the runtime file if this
    /// was the last process, and release the locks.
    pub fn detach_end(mut self) -> Result<()> {
        if self.leaving.load(Ordering::SeqCst) == STAYING {
            self.detach_begin()?;
        }
        self.procs.unregister(self.slot);
        self.detached = true;
        if self.leaving.load(Ordering::SeqCst) == LAST && self.path_is_ours()? {
            if let Some(s) = self.stand_ins.take() {
                s.remove()?;
            }
            // The runtime file, and what else the processes kept there (the
            // preload's memory files for shared mappings, whose bytes are back in
            // the pool: nobody is attached, so nobody maps them).
            std::fs::remove_dir_all(&self.session).map_err(|e| Error::io(&self.session, e))?;
        }
        Ok(())
        // Dropping `self.locks` releases both bytes.
    }
}

impl Attached {
    /// The pool's session directory: private to this process's user (mode 0700),
    /// removed by the last detacher.
    pub fn session(&self) -> &Path {
        &self.session
    }

    /// The stand-ins of the pool's file locks.
    pub fn stand_ins(&self) -> Option<&StandIns> {
        self.stand_ins.as_ref()
    }

    /// In the child of a fork (which shares its parent's open of the pool file, and so
    /// its locks): attach anew through `pool_file`, the child's own open of the pool
    /// file, as an attacher that is not first would: its own share of the attachment
    /// byte and its own slot. The parent's slot is returned; the inherited open is
    /// closed without touching its locks (they are the parent's).
    pub fn rejoin_after_fork(&mut self, pool_file: &File) -> Result<u32> {
        let locks = Locks::take(pool_file, &self.locks.pool_path)?;
        // The parent may have detached as the last process meanwhile.
        if !self.path_is_ours()? {
            return Err(locks.error(
                "the parent process detached from the pool before its fork child joined".into(),
            ));
        }
        if !locks.try_set(ATTACHMENT, libc::F_RDLCK)? {
            return Err(locks.error("the attachment lock is held exclusively".into()));
        }
        let slot = self.procs.register().map_err(|e| self.register_error(e))?;
        if let Err(e) = locks.set(TRANSITION, libc::F_UNLCK) {
            self.procs.unregister(slot);
            return Err(e);
        }
        let mut inherited = std::mem::replace(&mut self.locks, locks);
        inherited.owned = false;
        Ok(std::mem::replace(&mut self.slot, slot))
    }

    /// Before a fork (the forking thread, holding its share of the attachment byte):
    /// the fork child's own share, on `pool_file`, a new open file description of the
    /// pool file (already `flock`ed) that the child inherits and that this process
    /// closes after the fork (see [`ForkLocks`]). No transition lock is needed: while
    /// this process holds its share nobody holds the byte exclusively, so the share
    /// is granted at once, and a detach that begins meanwhile counts it.
    pub fn locks_for_fork_child(&self, pool_file: &File) -> Result<ForkLocks> {
        let locks = Locks::dup(pool_file, &self.locks.pool_path, false)?;
        if !locks.try_set(ATTACHMENT, libc::F_RDLCK)? {
            return Err(locks.error("the attachment lock is held exclusively".into()));
        }
        Ok(ForkLocks(locks))
    }

    /// In the child of a fork whose parent made it `locks` before the fork
    /// ([`Self::locks_for_fork_child`]): they become this process's, and the
    /// inherited ones (its parent's) are closed without being touched. With
    /// `register`, the child takes a slot of its own now; without, it stays out of
    /// the process table until its first operation ([`Self::register_now`]). The
    /// parent's slot is returned.
    pub fn join_after_fork(&mut self, locks: ForkLocks, register: bool) -> Result<u32> {
        let slot = if register {
            self.procs.register().map_err(|e| self.register_error(e))?
        } else {
            procs::NO_SLOT
        };
        let mut own = locks.0;
        own.owned = true;
        let mut inherited = std::mem::replace(&mut self.locks, own);
        inherited.owned = false;
        Ok(std::mem::replace(&mut self.slot, slot))
    }

    /// The descriptor the attachment's locks are on.
    pub fn locks_fd(&self) -> std::os::fd::RawFd {
        self.locks.file.as_raw_fd()
    }

    /// A slot for a fork child that joined without one ([`Self::join_after_fork`]),
    /// at its first operation. Its share of the attachment byte is held since before
    /// the fork, so the runtime state cannot have gone meanwhile: no transition lock.
    pub fn register_now(&mut self) -> Result<u32> {
        self.slot = self.procs.register().map_err(|e| self.register_error(e))?;
        Ok(self.slot)
    }

    /// Take a slot again after giving ours up for an exec that then failed
    /// (`Attachment::leave_for_exec`), as a later attacher takes one: under the
    /// transition lock. The attachment byte was held throughout.
    pub fn register_again(&mut self) -> Result<u32> {
        self.locks.set_wait(TRANSITION, libc::F_WRLCK)?;
        let slot = self.procs.register().map_err(|e| self.register_error(e));
        let unlocked = self.locks.set(TRANSITION, libc::F_UNLCK);
        self.slot = slot?;
        unlocked.map(|()| self.slot)
    }

    /// What a failed `Procs::register` (or `adopt`) of a process attaching to this
    /// runtime state means, said with the runtime file and pool's names.
    pub fn register_error(&self, e: Error) -> Error {
        let table = self.procs.reserved_per_process();
        register_error(e, &self.path, &self.locks.pool_path, table)
    }

    /// Whether the runtime file's path still names the file we mapped (something put
    /// in its place since is not ours to remove).
    fn path_is_ours(&self) -> Result<bool> {
        let Some(file) = self.region.file() else {
            return Ok(false);
        };
        let mapped = file.metadata().map_err(|e| Error::io(&self.path, e))?;
        Ok(match std::fs::symlink_metadata(&self.path) {
            Ok(m) => (m.dev(), m.ino()) == (mapped.dev(), mapped.ino()),
            Err(e) if e.kind() == ErrorKind::NotFound => false,
            Err(e) => return Err(Error::io(&self.path, e)),
        })
    }
}

impl Drop for Attached {
    /// Without a detach (an error path, a panic): leave the process table; the file
    /// stays, and the next first attacher replaces it.
    fn drop(&mut self) {
        if !self.detached {
            self.procs.unregister(self.slot);
        }
    }
}

/// The OFD locks on a pool file, on our own duplicate of the caller's descriptor (the
/// locks belong to the open file description; they are released explicitly on drop,
/// since the caller's descriptor keeps the description open).
struct Locks {
    file: File,
    pool_path: PathBuf,
    /// Whether this process's open holds the locks (false for one a fork child
    /// inherited: they are its parent's, left alone when it is closed).
    owned: bool,
}

impl Locks {
    /// Duplicate the descriptor and take the transition lock, waiting for it.
    fn take(pool_file: &File, pool_path: &Path) -> Result<Locks> {
        let locks = Locks::dup(pool_file, pool_path, true)?;
        locks.set_wait(TRANSITION, libc::F_WRLCK)?;
        Ok(locks)
    }

    /// Duplicate the descriptor, taking no lock.
    fn dup(pool_file: &File, pool_path: &Path, owned: bool) -> Result<Locks> {
        let file = super::dup_out_of_the_way(pool_file).map_err(|e| Error::io(pool_path, e))?;
        Ok(Locks {
            file,
            pool_path: pool_path.to_path_buf(),
            owned,
        })
    }

    fn set_wait(&self, byte: i64, kind: libc::c_int) -> Result<()> {
        self.fcntl(byte, kind, true).map(|_| ())
    }

    /// Set without waiting: false if another holder's lock conflicts.
    fn try_set(&self, byte: i64, kind: libc::c_int) -> Result<bool> {
        self.fcntl(byte, kind, false)
    }

    fn set(&self, byte: i64, kind: libc::c_int) -> Result<()> {
        self.fcntl(byte, kind, false).map(|_| ())
    }

    fn fcntl(&self, byte: i64, kind: libc::c_int, wait: bool) -> Result<bool> {
        match ofd_lock(&self.file, byte, 1, kind, wait) {
            Ok(got) => Ok(got),
            Err(e) if e.raw_os_error() == Some(libc::EBADF) => Err(self.error(
                "the pool file must be open for writing to attach to its runtime state".into(),
            )),
            Err(e) => Err(Error::io(&self.pool_path, e)),
        }
    }

    fn error(&self, what: String) -> Error {
        Error::Runtime {
            path: self.pool_path.clone(),
            what,
            errno: libc::EIO,
        }
    }
}

/// A fork child's share of the attachment byte, on an open file description of the
/// pool file its parent made for it before the fork
/// ([`Attached::locks_for_fork_child`]). Dropped in the parent after the fork, it
/// closes the parent's copies only: the locks belong to the description, which the
/// child keeps open (or, when no child was made, which the kernel drops with it).
pub struct ForkLocks(Locks);

impl Drop for Locks {
    fn drop(&mut self) {
        if self.owned {
            let _ = ofd_lock(&self.file, TRANSITION, 2, libc::F_UNLCK, false);
        }
    }
}

/// Set (or clear) an open-file-description lock of `len` bytes at `start`.
pub(crate) fn ofd_lock(
    file: &File,
    start: i64,
    len: i64,
    kind: libc::c_int,
    wait: bool,
) -> io::Result<bool> {
    // SAFETY: a plain C struct; all-zero is a valid value that we then fill in.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = len;
    let cmd = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    loop {
        // SAFETY: fcntl on a descriptor we own, with a pointer to a live flock struct.
        let r = unsafe { libc::fcntl(file.as_raw_fd(), cmd, &fl as *const libc::flock) };
        if r == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN | libc::EACCES) if !wait => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// What a failed `Procs::register` means for the process attaching to the pool at
/// `pool_path`, whose runtime file is `path`.
fn register_error(e: Error, path: &Path, pool_path: &Path, table: usize) -> Error {
    match e.errno() {
        libc::EUSERS => runtime_error(
            path,
            format!(
                "{MAX_PROCS} processes are attached to pool {} already",
                pool_path.display()
            ),
            libc::EUSERS,
        ),
        libc::ENOSPC => {
            // The runtime directory: the runtime file is in a session directory in it.
            let dir = path
                .parent()
                .and_then(Path::parent)
                .unwrap_or(Path::new("/"));
            no_room(dir, pool_path, table, "this process's open table")
        }
        _ => e,
    }
}

fn runtime_error(path: &Path, what: String, errno: i32) -> Error {
    Error::Runtime {
        path: path.to_path_buf(),
        what,
        errno,
    }
}

/// This user's session directories in `dir` whose names start with `prefix`:
/// directories (never links) of this process's user, mode 0700. Anything else with the
/// prefix, another user's above all, is passed over: it cannot stand in the way.
fn ours(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>> {
    let euid = euid();
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        if rest.len() != SESSION_RANDOM || !rest.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let path = e.path();
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(&path, e)),
        };
        if meta.file_type().is_dir() && meta.uid() == euid && meta.mode() & 0o7777 == 0o700 {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Random hex digits for a session directory's name: unpredictable, so that nobody
/// can make the name before us (and if someone does, mkdir fails and we draw again).
fn random_hex() -> Result<String> {
    let mut b = [0u8; SESSION_RANDOM / 2];
    let mut got = 0;
    while got < b.len() {
        // SAFETY: getrandom writes at most the length given into the buffer given.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), b.len() - got, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(Error::io(Path::new("getrandom"), e));
        }
        got += n as usize;
    }
    Ok(b.iter().map(|b| format!("{b:02x}")).collect())
}

/// The first attacher's new session directory for pool `id` in `dir`, after removing
/// the ones of this user's that earlier sessions left (nobody is attached: they are
/// stale).
fn new_session(dir: &Path, pool_path: &Path, id: &PoolId) -> Result<PathBuf> {
    let prefix = id.prefix();
    for stale in ours(dir, &prefix)? {
        std::fs::remove_dir_all(&stale).map_err(|e| Error::io(&stale, e))?;
    }
    for _ in 0..SESSION_TRIES {
        let path = dir.join(format!("{prefix}{}", random_hex()?));
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            // mkdir follows no link and reuses nothing: the directory is new, and ours.
            // The umask may have taken bits from 0700.
            Ok(()) => {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| Error::io(&path, e))?;
                return Ok(path);
            }
            // Taken, by another user most likely: another name.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io(&path, e)),
        }
    }
    Err(runtime_error(
        dir,
        format!(
            "{SESSION_TRIES} random names for the runtime state of pool {} were all taken",
            pool_path.display()
        ),
        libc::EEXIST,
    ))
}

/// The session directory the first attacher of pool `id` made in `dir`.
fn find_session(dir: &Path, pool_path: &Path, id: &PoolId) -> Result<PathBuf> {
    let prefix = id.prefix();
    let mut found = ours(dir, &prefix)?;
    match found.len() {
        1 => Ok(found.pop().expect("one")),
        0 => Err(runtime_error(
            &dir.join(format!("{prefix}*")),
            format!(
                "no runtime state directory of this user's (uid {}), although another \
                 process has pool {} attached (a process of another user? all the \
                 processes of a pool must run as one user)",
                euid(),
                pool_path.display()
            ),
            libc::ENOENT,
        )),
        _ => Err(runtime_error(
            &dir.join(format!("{prefix}*")),
            format!(
                "{} runtime state directories of pool {}, where an attached pool has one: \
                 {}",
                found.len(),
                pool_path.display(),
                found
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            libc::EUCLEAN,
        )),
    }
}

/// Refuse a runtime file that another user could have planted or could read.
fn check_ours(meta: &Metadata, path: &Path, pool_path: &Path) -> Result<()> {
    let euid = euid();
    let ft = meta.file_type();
    let why = if ft.is_symlink() {
        "it is a symbolic link".to_string()
    } else if !ft.is_file() {
        "it is not a regular file".to_string()
    } else if meta.uid() != euid {
        format!(
            "it is owned by uid {}, not by this process's user (uid {euid})",
            meta.uid()
        )
    } else if meta.mode() & 0o7777 != 0o600 {
        format!(
            "its mode is {:04o}, not 0600 (another user could read or change it)",
            meta.mode() & 0o7777
        )
    } else {
        return Ok(());
    };
    Err(runtime_error(
        path,
        format!(
            "refusing the runtime state file of pool {}: {why}; remove it if no process has \
             the pool attached",
            pool_path.display()
        ),
        libc::EACCES,
    ))
}

/// Remove a file left at `path` by a process that is gone (ours only).
fn remove_stale(path: &Path, pool_path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
        Ok(meta) => {
            check_ours(&meta, path, pool_path)?;
            std::fs::remove_file(path).map_err(|e| Error::io(path, e))
        }
    }
}

/// Bytes free for the caller in `dir`.
fn free_bytes(dir: &Path) -> Result<u64> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid(format!("{}: a NUL in the path", dir.display())))?;
    // SAFETY: statvfs fills the struct we pass (zeroed, valid) from a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; both pointers are valid for the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(Error::io(dir, io::Error::last_os_error()));
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// The ENOSPC error of a runtime directory without room for `bytes` of `what`.
fn no_room(dir: &Path, pool_path: &Path, bytes: usize, what: &str) -> Error {
    let free = match free_bytes(dir) {
        Ok(free) => format!("{free} bytes free"),
        Err(_) => "no room".into(),
    };
    runtime_error(
        dir,
        format!(
            "{free}, {what} of pool {} needs {bytes} (the runtime directory is full: free \
             some space there, or set {RUNTIME_DIR_ENV} to another directory)",
            pool_path.display()
        ),
        libc::ENOSPC,
    )
}

/// Refuse to create a runtime file reserving `bytes` where fewer are free (before
/// making anything: the reservation itself is what guarantees the room).
fn check_space(dir: &Path, pool_path: &Path, bytes: usize) -> Result<()> {
    if free_bytes(dir)? < bytes as u64 {
        return Err(no_room(dir, pool_path, bytes, "the runtime state"));
    }
    Ok(())
}

/// Reserve the memory of every part of a new runtime file but the open tables (each
/// process reserves its own when it takes a slot).
fn reserve_shared(region: &Region, shape: Shape) -> io::Result<()> {
    let tables = procs::open_tables(shape.open_entries);
    region.reserve(0, tables.start)?;
    region.reserve(tables.end, shape.bytes - tables.end)
}

/// A file being created, removed unless it was renamed into place.
struct Staged {
    path: PathBuf,
    placed: bool,
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.placed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Make a new runtime file at `path` in a new session directory in `dir` (replacing a stale one of ours), sized and with
/// its header written, state BUILDING. It is built under a temporary name and renamed
/// into place, so no attacher ever sees a half-made file.
fn create(
    dir: &Path,
    path: &Path,
    pool_path: &Path,
    id: &PoolId,
    shape: Shape,
) -> Result<Arc<Region>> {
    let bytes = shape.bytes;
    remove_stale(path, pool_path)?;
    let name = path.file_name().expect("a runtime path ends in its name");
    // Beside it, in the session directory (`dir`, the runtime directory, is what
    // errors about room name: there the user can act).
    let tmp = path.with_file_name(format!(".{}.tmp", name.to_string_lossy()));
    // Only the first attacher (holding both locks) creates: a temporary file is stale.
    remove_stale(&tmp, pool_path)?;
    check_space(dir, pool_path, shape.first_reserve())?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map(super::out_of_the_way)
        .map_err(|e| Error::io(&tmp, e))?;
    let mut staged = Staged {
        path: tmp.clone(),
        placed: false,
    };
    // The umask may have taken bits from 0600; the mode is checked by every attacher.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .and_then(|_| file.set_len(bytes as u64))
        .map_err(|e| Error::io(&tmp, e))?;
    let region = Arc::new(Region::map_file(file, bytes).map_err(|e| Error::io(&tmp, e))?);
    reserve_shared(&region, shape).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOSPC) => no_room(dir, pool_path, shape.first_reserve(), "the runtime state"),
        _ => Error::io(&tmp, e),
    })?;
    write_header(&region, id, shape);
    Procs::new(region.clone(), shape.open_entries)?.set_generation(1);
    rename_noreplace(&tmp, path).map_err(|e| {
        if e.raw_os_error() == Some(libc::EEXIST) {
            runtime_error(
                path,
                format!(
                    "appeared while the runtime state of pool {} was being created: \
                     refusing to replace it",
                    pool_path.display()
                ),
                libc::EEXIST,
            )
        } else {
            Error::io(path, e)
        }
    })?;
    staged.placed = true;
    Ok(region)
}

fn rename_noreplace(from_path: &Path, to_path: &Path) -> io::Result<()> {
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other);
    let (from, to) = (c(from_path)?, c(to_path)?);
    // SAFETY: renameat2 reads two NUL-terminated paths that outlive the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EINVAL) {
        return Err(e);
    }
    // A file system without RENAME_NOREPLACE: a link fails the same way if `to` exists.
    std::fs::hard_link(from_path, to_path)?;
    std::fs::remove_file(from_path)
}

fn write_header(region: &Region, id: &PoolId, shape: Shape) {
    let w = |off: usize, v: u64| region.words(off, 1)[0].store(v, Ordering::Relaxed);
    w(MAGIC_OFF, MAGIC);
    region.u32s(VERSION_OFF, 1)[0].store(RUNTIME_VERSION, Ordering::Relaxed);
    let [a, b] = id.uuid_words();
    w(UUID_OFF, a);
    w(UUID_OFF + 8, b);
    w(DEV_OFF, id.dev);
    w(INO_OFF, id.ino);
    w(SIZE_OFF, shape.bytes as u64);
    w(OPEN_ENTRIES_OFF, shape.open_entries as u64);
}

/// Open the runtime file another attached process made, refusing anything that is
/// not ours or not the runtime state of this pool as this build lays it out.
fn open_existing(path: &Path, pool_path: &Path, id: &PoolId, shape: Shape) -> Result<Arc<Region>> {
    let bytes = shape.bytes;
    let pool = pool_path.display();
    let meta = std::fs::symlink_metadata(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => runtime_error(
            path,
            format!("missing, although another process has pool {pool} attached"),
            libc::ENOENT,
        ),
        _ => Error::io(path, e),
    })?;
    check_ours(&meta, path, pool_path)?;
    // O_NOFOLLOW and the second check on the open file close the gap since the first.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map(super::out_of_the_way)
        .map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    check_ours(&meta, path, pool_path)?;
    let wrong = |what: String| runtime_error(path, what, libc::EUCLEAN);
    if meta.len() != bytes as u64 {
        return Err(wrong(format!(
            "{} bytes, where this build lays out {bytes} for pool {pool} (is a process of \
             another LynxFS version attached?)",
            meta.len()
        )));
    }
    let region = Arc::new(Region::map_file(file, bytes).map_err(|e| Error::io(path, e))?);
    check_header(&region, id, shape).map_err(|what| wrong(format!("{what} (pool {pool})")))?;
    let state = Procs::new(region.clone(), shape.open_entries)?.state();
    if state != procs::READY && state != procs::REPAIRING {
        return Err(wrong(format!("runtime state in state {state}, not built")));
    }
    Ok(region)
}

fn check_header(region: &Region, id: &PoolId, shape: Shape) -> Result<(), String> {
    let bytes = shape.bytes;
    let r = |off: usize| region.words(off, 1)[0].load(Ordering::Acquire);
    if r(MAGIC_OFF) != MAGIC {
        return Err("not a LynxFS runtime state file (bad magic)".into());
    }
    let version = region.u32s(VERSION_OFF, 1)[0].load(Ordering::Acquire);
    if version != RUNTIME_VERSION {
        return Err(format!(
            "runtime state version {version}, this build uses {RUNTIME_VERSION} (is a process \
             of another LynxFS version attached?)"
        ));
    }
    if [r(UUID_OFF), r(UUID_OFF + 8)] != id.uuid_words()
        || r(DEV_OFF) != id.dev
        || r(INO_OFF) != id.ino
    {
        return Err("the runtime state of another pool".into());
    }
    if r(SIZE_OFF) != bytes as u64 {
        return Err(format!(
            "header says {} bytes, this build lays out {bytes}",
            r(SIZE_OFF)
        ));
    }
    if r(OPEN_ENTRIES_OFF) != shape.open_entries as u64 {
        return Err(format!(
            "header says open tables of {} entries, this build lays out {}",
            r(OPEN_ENTRIES_OFF),
            shape.open_entries
        ));
    }
    Ok(())
}

/// Whether some process (through another open of the file) is attached to the pool
/// open as `pool_file` now: one that only reads a private copy of the pool must not,
/// since it would see operations half done.
pub fn attached_elsewhere(pool_file: &File) -> io::Result<bool> {
    ofd_held(pool_file, ATTACHMENT)
}

/// The byte every read-only opener holds shared: a read-only open works on a private
/// copy of the pool, which would go stale under an attached writer, so the two exclude
/// each other.
const READ_ONLY: i64 = 3;

/// Hold the read-only byte of the pool open as `pool_file` (until the file is closed).
pub fn claim_read_only(pool_file: &File) -> io::Result<()> {
    ofd_lock(pool_file, READ_ONLY, 1, libc::F_RDLCK, false).map(drop)
}

/// Whether some process has the pool open read-only now (through another open).
pub fn read_only_elsewhere(pool_file: &File) -> io::Result<bool> {
    ofd_held(pool_file, READ_ONLY)
}

/// Whether another open file description holds a lock on byte `at` of `file`.
fn ofd_held(file: &File, at: i64) -> io::Result<bool> {
    // SAFETY: a plain C struct; all-zero is a valid value that we then fill in.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = at;
    fl.l_len = 1;
    // SAFETY: fcntl on a descriptor we own, with a pointer to a live flock struct it
    // fills in.
    let r = unsafe {
        libc::fcntl(
            file.as_raw_fd(),
            libc::F_OFD_GETLK,
            &mut fl as *mut libc::flock,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}
