//! File locks through the mount (`fcntl` record locks, OFD locks, `flock`), kept by
//! the kernel on the pool's lock stand-ins ([`lynxfs::runtime::stand_ins`]), the very
//! files preloaded processes and other mounts of the pool lock: so a lock taken
//! through this mount and one taken anywhere else on the pool exclude each other.
//!
//! Each lock owner the kernel names (a process's file table for POSIX locks, an open
//! file for OFD locks and flock) gets its own open of the inode's stand-in, and its
//! locks are OFD locks (or flock) on that open: the kernel then merges, splits and
//! checks them as it would the owner's own, against every other open.
//!
//! Ends of locks: FLUSH (each close) drops the closing process's POSIX locks on the
//! file, as close(2) does; RELEASE (the last close of an open file) drops what was
//! locked through that open (its OFD locks, its flock).
//!
//! A lock had is a moment the file may have changed under the kernel's cache (a
//! preloaded writer let the lock go a moment ago; its change notices may still be on
//! their way): before the grant is answered, the file's cached pages and attributes
//! are dropped ([`Locks::new`]'s `granted`), as NFS does, so what the holder reads is
//! what the lock protects. That is done away from the request loop (dropping pages
//! waits for reads the loop may have yet to serve).
//!
//! A lock that must wait (F_SETLKW, flock without LOCK_NB) waits on a thread of its
//! own, retrying with a growing pause (at most [`MAX_PAUSE`]), so the request loop
//! goes on; it ends with EINTR when the kernel interrupts the request (a signal to
//! the waiter, or its death) or the mount ends.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use fuser::{Errno, ReplyEmpty};

/// The longest pause between two tries of a waiting lock (how late a waiter may
/// notice the lock is free).
const MAX_PAUSE: Duration = Duration::from_millis(10);
/// Interrupts kept for requests not (yet) waiting: one may arrive before its
/// request's handler registers the wait.
const EARLY_INTERRUPTS: usize = 256;

/// Opens a new file description of an inode's stand-in.
pub type Opener = Box<dyn Fn(u64) -> io::Result<OwnedFd> + Send + Sync>;
/// Called with the inode before a lock on it is granted.
pub type Granted = Box<dyn Fn(u64) + Send + Sync>;

/// Whose locks: the inode, the kernel's owner, and whether they are flock's.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    ino: u64,
    owner: u64,
    flock: bool,
}

/// An owner's open of the stand-in, and the open file its locks came through.
struct Held {
    fd: Arc<OwnedFd>,
    fh: u64,
}

/// A lock request, as the kernel sends it.
pub struct Request {
    pub ino: u64,
    pub fh: u64,
    pub owner: u64,
    /// First and last byte (inclusive; i64::MAX is "to the end and beyond").
    pub start: u64,
    pub end: u64,
    /// F_RDLCK, F_WRLCK or F_UNLCK.
    pub typ: i32,
    pub flock: bool,
}

/// The conflicting lock GETLK answers (`typ` F_UNLCK: none).
pub struct Conflict {
    pub start: u64,
    pub end: u64,
    pub typ: i32,
    pub pid: u32,
}

pub struct Locks {
    open: Opener,
    granted: Granted,
    /// To the thread that answers grants made in the request loop (see the module
    /// documentation); started at the first.
    grants: Mutex<Option<std::sync::mpsc::Sender<(u64, ReplyEmpty)>>>,
    held: Mutex<HashMap<Key, Held>>,
    /// The requests waiting for a lock, by unique id: set when interrupted.
    waiting: Mutex<HashMap<u64, Arc<AtomicBool>>>,
    early: Mutex<VecDeque<u64>>,
    ending: AtomicBool,
}

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn errno(e: &io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::ENOLCK))
}

/// The kernel's inclusive range as `struct flock`'s start and length.
fn range(start: u64, end: u64) -> (i64, i64) {
    let start = start.min(i64::MAX as u64) as i64;
    let len = if end >= i64::MAX as u64 {
        0
    } else {
        (end as i64).saturating_sub(start).saturating_add(1)
    };
    (start, len)
}

fn flock_struct(typ: i32, start: u64, end: u64) -> libc::flock {
    // SAFETY: plain data: all-zero is valid and then filled in.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    let (s, len) = range(start, end);
    l.l_type = typ as libc::c_short;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    l.l_start = s;
    l.l_len = len;
    l
}

/// One try at `r` on `fd`, without waiting: Ok(false) when another holder conflicts.
fn try_lock(fd: &OwnedFd, r: &Request) -> io::Result<bool> {
    let rc = if r.flock {
        let op = match r.typ {
            libc::F_RDLCK => libc::LOCK_SH,
            libc::F_WRLCK => libc::LOCK_EX,
            _ => libc::LOCK_UN,
        };
        // SAFETY: flock on a descriptor we own.
        unsafe { libc::flock(fd.as_raw_fd(), op | libc::LOCK_NB) }
    } else {
        let l = flock_struct(r.typ, r.start, r.end);
        // SAFETY: fcntl on a descriptor we own, with a live flock struct.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &l as *const libc::flock) }
    };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

/// Drop every lock of `fd` (the owner is done with them; other holders of the same
/// open, a waiter, may keep it open a moment longer).
fn unlock_all(fd: &OwnedFd, flock: bool) {
    if flock {
        // SAFETY: flock on a descriptor we own.
        unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_UN) };
    } else {
        let l = flock_struct(libc::F_UNLCK, 0, u64::MAX);
        // SAFETY: fcntl on a descriptor we own, with a live flock struct.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &l as *const libc::flock) };
    }
}

impl Locks {
    pub fn new(open: Opener, granted: Granted) -> Arc<Locks> {
        Arc::new(Locks {
            open,
            granted,
            grants: Mutex::new(None),
            held: Mutex::new(HashMap::new()),
            waiting: Mutex::new(HashMap::new()),
            early: Mutex::new(VecDeque::new()),
            ending: AtomicBool::new(false),
        })
    }

    /// The owner's open of the stand-in, made (and remembered) if `make`.
    fn owner_fd(&self, key: Key, fh: u64, make: bool) -> io::Result<Option<Arc<OwnedFd>>> {
        let mut held = guard(&self.held);
        if let Some(h) = held.get(&key) {
            return Ok(Some(h.fd.clone()));
        }
        if !make {
            return Ok(None);
        }
        let fd = Arc::new((self.open)(key.ino)?);
        held.insert(key, Held { fd: fd.clone(), fh });
        Ok(Some(fd))
    }

    /// GETLK: the lock that would keep the owner's request out, if any.
    pub fn get(&self, r: &Request) -> Result<Conflict, Errno> {
        let key = Key {
            ino: r.ino,
            owner: r.owner,
            flock: false,
        };
        // An owner without locks on the file asks through a passing open of its own.
        let fd = match self.owner_fd(key, r.fh, false) {
            Ok(Some(fd)) => fd,
            Ok(None) => Arc::new((self.open)(r.ino).map_err(|e| errno(&e))?),
            Err(e) => return Err(errno(&e)),
        };
        let mut l = flock_struct(r.typ, r.start, r.end);
        // SAFETY: fcntl on a descriptor we own, with a live flock struct it fills in.
        if unsafe {
            libc::fcntl(
                fd.as_raw_fd(),
                libc::F_OFD_GETLK,
                &mut l as *mut libc::flock,
            )
        } != 0
        {
            return Err(errno(&io::Error::last_os_error()));
        }
        let start = l.l_start.max(0) as u64;
        let end = if l.l_len == 0 {
            i64::MAX as u64
        } else {
            start.saturating_add(l.l_len as u64 - 1)
        };
        Ok(Conflict {
            start,
            end,
            typ: i32::from(l.l_type),
            // An OFD lock has no process (-1); the kernel reports 0 for it.
            pid: l.l_pid as u32,
        })
    }

    /// SETLK/SETLKW: answered now, or (a wait) from a thread of its own.
    pub fn set(self: &Arc<Self>, r: Request, sleep: bool, unique: u64, reply: ReplyEmpty) {
        let key = Key {
            ino: r.ino,
            owner: r.owner,
            flock: r.flock,
        };
        let unlock = r.typ == libc::F_UNLCK;
        let fd = match self.owner_fd(key, r.fh, !unlock) {
            Ok(Some(fd)) => fd,
            // Nothing held: nothing to unlock.
            Ok(None) => return reply.ok(),
            Err(e) => return reply.error(errno(&e)),
        };
        match try_lock(&fd, &r) {
            Ok(true) if unlock => reply.ok(),
            Ok(true) => self.grant(r.ino, reply),
            Ok(false) if !sleep => reply.error(Errno::EAGAIN),
            Ok(false) => self.wait(key, r, unique, reply),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// Answers a lock had in the request loop, from the grants thread.
    fn grant(self: &Arc<Self>, ino: u64, reply: ReplyEmpty) {
        let mut tx = guard(&self.grants);
        if tx.is_none() && !self.ending.load(Ordering::Acquire) {
            let (send, recv) = std::sync::mpsc::channel::<(u64, ReplyEmpty)>();
            let me = Arc::downgrade(self);
            let started = std::thread::Builder::new()
                .name("lynxfs-lock-grants".into())
                .spawn(move || {
                    for (ino, reply) in recv {
                        if let Some(me) = me.upgrade() {
                            (me.granted)(ino);
                        }
                        reply.ok();
                    }
                });
            if started.is_ok() {
                *tx = Some(send);
            }
        }
        match tx.as_ref() {
            Some(t) => {
                if let Err(std::sync::mpsc::SendError((_, reply))) = t.send((ino, reply)) {
                    reply.ok();
                }
            }
            // No thread: the lock is had; the cache stays as the notices leave it.
            None => reply.ok(),
        }
    }

    fn wait(self: &Arc<Self>, key: Key, r: Request, unique: u64, reply: ReplyEmpty) {
        let cancel = Arc::new(AtomicBool::new(false));
        {
            let mut early = guard(&self.early);
            if let Some(i) = early.iter().position(|&u| u == unique) {
                early.remove(i);
                return reply.error(Errno::EINTR);
            }
            guard(&self.waiting).insert(unique, cancel.clone());
        }
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("lynxfs-lock-wait".into())
            .spawn(move || {
                let answer = me.wait_for(key, &r, &cancel);
                guard(&me.waiting).remove(&unique);
                match answer {
                    Ok(()) => {
                        (me.granted)(r.ino);
                        reply.ok()
                    }
                    Err(e) => reply.error(e),
                }
            });
        if spawned.is_err() {
            guard(&self.waiting).remove(&unique);
            // The reply went with the closure that never ran: the kernel gets EIO
            // from its drop. Nothing better can be said without a thread.
        }
    }

    /// Retries until the lock is had, or the wait is interrupted or the mount ends.
    fn wait_for(&self, key: Key, r: &Request, cancel: &AtomicBool) -> Result<(), Errno> {
        let mut pause = Duration::from_micros(100);
        loop {
            if cancel.load(Ordering::Acquire) {
                return Err(Errno::EINTR);
            }
            if self.ending.load(Ordering::Acquire) {
                return Err(Errno::ENOLCK);
            }
            // The owner's open now (a close meanwhile may have dropped the old one).
            let fd = match self.owner_fd(key, r.fh, true) {
                Ok(Some(fd)) => fd,
                Ok(None) => return Err(Errno::ENOLCK),
                Err(e) => return Err(errno(&e)),
            };
            match try_lock(&fd, r) {
                Ok(true) if self.still_held(key, &fd, r) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(errno(&e)),
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    /// A lock had on `fd` counts only if `fd` is still the owner's open (a close of
    /// the owner's may have dropped it during the try): else it is let go, and the
    /// wait goes on with the new open.
    fn still_held(&self, key: Key, fd: &Arc<OwnedFd>, r: &Request) -> bool {
        let same = guard(&self.held)
            .get(&key)
            .is_some_and(|h| Arc::ptr_eq(&h.fd, fd));
        if !same {
            unlock_all(fd, r.flock);
        }
        same
    }

    /// FLUSH: the owner closed a descriptor of the file: its POSIX locks on the file
    /// go (close(2)'s rule).
    pub fn flush(&self, ino: u64, owner: u64) {
        let key = Key {
            ino,
            owner,
            flock: false,
        };
        let dropped = guard(&self.held).remove(&key);
        if let Some(h) = dropped {
            unlock_all(&h.fd, false);
        }
    }

    /// RELEASE: open file `fh` is closed for good: what was locked through it goes
    /// (its OFD locks, and the flock of `flock_owner` when the kernel says so).
    pub fn release(&self, ino: u64, fh: u64, flock_owner: Option<u64>) {
        let mut gone = Vec::new();
        {
            let mut held = guard(&self.held);
            if let Some(owner) = flock_owner {
                let key = Key {
                    ino,
                    owner,
                    flock: true,
                };
                if let Some(h) = held.remove(&key) {
                    gone.push((h, true));
                }
            }
            let through: Vec<Key> = held
                .iter()
                .filter(|(k, h)| k.ino == ino && h.fh == fh)
                .map(|(k, _)| *k)
                .collect();
            for k in through {
                if let Some(h) = held.remove(&k) {
                    gone.push((h, k.flock));
                }
            }
        }
        for (h, flock) in gone {
            unlock_all(&h.fd, flock);
        }
    }

    /// INTERRUPT of request `unique`: its wait ends with EINTR. An interrupt that
    /// finds no wait is kept a while, for a wait not registered yet.
    pub fn interrupt(&self, unique: u64) {
        let mut early = guard(&self.early);
        if let Some(c) = guard(&self.waiting).get(&unique) {
            c.store(true, Ordering::Release);
            return;
        }
        if early.len() == EARLY_INTERRUPTS {
            early.pop_front();
        }
        early.push_back(unique);
    }

    /// The mount ends: every wait ends, every lock goes.
    pub fn end(&self) {
        self.ending.store(true, Ordering::Release);
        guard(&self.held).clear();
        guard(&self.grants).take();
    }
}
