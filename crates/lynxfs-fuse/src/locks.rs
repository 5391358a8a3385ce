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
//! locked through that open (its OFD locks, its flock). The kernel sends RELEASE
//! *after* the close returns (FUSE's release is asynchronous), so a lock query that
//! meets a lock of an open file some process just closed waits a moment
//! ([`SETTLE`]) for that open's RELEASE before it answers: as on a local file
//! system, a lock whose last descriptor is closed is gone for whoever looks next
//! (xfstests generic/478).
//!
//! A lock had is a moment the file may have changed under the kernel's cache (a
//! preloaded writer let the lock go a moment ago; its change notices may still be on
//! their way): before the grant is answered, the file's cached pages and attributes
//! are dropped ([`Locks::new`]'s `granted`), as NFS does, so what the holder reads is
//! what the lock protects. That is done away from the request loop (dropping pages
//! waits for reads the loop may have yet to serve).
//!
//! **Waits** (F_SETLKW, flock without LOCK_NB). The request loop goes on; the wait
//! blocks in the kernel (F_OFD_SETLKW, or flock, on the owner's open of the
//! stand-in) on a thread of its own, so it costs no CPU and the kernel wakes it when
//! the lock comes free, whoever let it go (this mount, a preloaded process, another
//! mount, a holder's death). At most [`THREADS`] waits have a thread; a wait past
//! that queues (never an error): it is tried again whenever a lock of this mount on
//! its file goes, at the latest every [`QUEUED_PAUSE`], and takes the first thread
//! that comes free. A wait ends with EINTR when the kernel interrupts the request (a
//! signal to the waiter, or its death: the thread's kernel wait is broken with
//! [`wake_signal`]) and ENOLCK when the mount ends.
//!
//! **Deadlocks.** The kernel detects cycles only among classic POSIX waiters it sees,
//! and it sees the daemon's OFD locks and waits, not the owners behind them. So the
//! daemon keeps, for the owners it serves, which byte ranges each holds and what each
//! waits for, and answers EDEADLK to the request that would close a cycle of
//! waits, as the kernel does (`posix_locks_deadlock`). FUSE does not say whether a
//! request is a classic or an OFD lock: every record-lock owner is taken as classic
//! (an OFD waiter that would close a cycle, which waits forever on a local file
//! system, gets EDEADLK here); flock owners never are (the kernel detects no flock
//! deadlock either). Preloaded processes' classic locks and waits on the stand-ins
//! are read from `/proc/locks` when a request must wait, so a cycle through them is
//! seen too (one the preloaded request closes, the kernel sees: it follows the
//! daemon's blocked OFD wait). A cycle through another mount's owners is not (its
//! daemon's OFD locks carry no pid): its waiters wait until interrupted, as OFD
//! waiters do on a local file system.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use fuser::{Errno, ReplyEmpty, ReplyLock};

/// How many waits block in the kernel on threads of their own at most; the rest queue.
pub const THREADS: usize = 32;
/// The longest a queued wait goes untried (it is tried at once when a lock of this
/// mount on its file goes; this is for locks let go elsewhere).
pub const QUEUED_PAUSE: Duration = Duration::from_millis(500);
/// How long a lock query waits for the RELEASE of an open file whose descriptor was
/// just closed (see the module documentation). Only a query that meets such a lock
/// waits, and only until that RELEASE comes.
pub const SETTLE: Duration = Duration::from_millis(500);
/// Interrupts kept for requests not (yet) waiting: one may arrive before its
/// request's handler registers the wait.
const EARLY_INTERRUPTS: usize = 256;
/// A waiting thread's stack: it makes system calls and a grant's cache drop only.
const WAIT_STACK: usize = 256 << 10;

/// Opens a new file description of an inode's stand-in.
pub type Opener = Box<dyn Fn(u64) -> io::Result<OwnedFd> + Send + Sync>;
/// Called with the inode before a lock on it is granted.
pub type Granted = Box<dyn Fn(u64) + Send + Sync>;

/// Whose locks: the inode, the kernel's owner, and whether they are flock's.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Key {
    ino: u64,
    owner: u64,
    flock: bool,
}

/// A byte range an owner holds (inclusive) and how (F_RDLCK or F_WRLCK).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    start: u64,
    end: u64,
    typ: i32,
}

impl Range {
    fn conflicts(&self, o: &Range) -> bool {
        self.start <= o.end
            && o.start <= self.end
            && (self.typ == libc::F_WRLCK || o.typ == libc::F_WRLCK)
    }
}

/// Sets (or, with F_UNLCK, clears) `new` among an owner's ranges, as the kernel does
/// for one owner's record locks: the new range replaces every part of the old ones
/// it covers.
fn apply(ranges: &mut Vec<Range>, new: Range) {
    let mut kept = Vec::with_capacity(ranges.len() + 2);
    for r in ranges.drain(..) {
        if r.end < new.start || new.end < r.start {
            kept.push(r);
            continue;
        }
        if r.start < new.start {
            kept.push(Range {
                end: new.start - 1,
                ..r
            });
        }
        if r.end > new.end {
            kept.push(Range {
                start: new.end + 1,
                ..r
            });
        }
    }
    if new.typ != libc::F_UNLCK {
        kept.push(new);
    }
    *ranges = kept;
}

/// An owner's open of the stand-in, the open file its locks came through, and what
/// it holds.
struct Held {
    fd: Arc<OwnedFd>,
    fh: u64,
    /// The record-lock ranges held (for deadlock detection; empty for flock).
    ranges: Vec<Range>,
    /// A descriptor of the open file `fh` was closed since the locks were taken: a
    /// RELEASE (which drops them) may be on its way.
    closing: bool,
}

/// A lock request, as the kernel sends it.
#[derive(Clone, Copy, Debug)]
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

impl Request {
    fn key(&self) -> Key {
        Key {
            ino: self.ino,
            owner: self.owner,
            flock: self.flock,
        }
    }
    fn range(&self) -> Range {
        Range {
            start: self.start,
            end: self.end,
            typ: self.typ,
        }
    }
}

/// The conflicting lock GETLK answers (`typ` F_UNLCK: none).
pub struct Conflict {
    pub start: u64,
    pub end: u64,
    pub typ: i32,
    pub pid: u32,
}

/// A lock request that waits.
struct Wait {
    r: Request,
    unique: u64,
    reply: Mutex<Option<ReplyEmpty>>,
    /// Interrupted (or the mount ends): the wait is to end.
    cancel: AtomicBool,
    /// The thread blocked in the kernel for it (0: none), and whether the wait is
    /// over; both read and written under [`Wait::sig`], so a wake signal is sent only
    /// to a thread still inside this wait.
    tid: AtomicI32,
    over: AtomicBool,
    sig: Mutex<()>,
}

#[derive(Default)]
struct State {
    held: HashMap<Key, Held>,
    /// Every wait, by request id.
    waits: HashMap<u64, Arc<Wait>>,
    /// Waits without a thread, oldest first.
    queue: VecDeque<Arc<Wait>>,
    /// Threads serving waits.
    threads: usize,
    /// The thread trying queued waits again runs.
    retrying: bool,
    early: VecDeque<u64>,
    /// How many times a lock of this mount went (see [`Locks::went`]).
    went: u64,
    /// Threads asleep on [`Locks::changed`] (or about to be: counted under this
    /// lock before the wait releases it).
    sleepers: usize,
}

pub struct Locks {
    open: Opener,
    granted: Granted,
    /// To the thread that answers grants made in the request loop (see the module
    /// documentation); started at the first.
    grants: Mutex<Option<std::sync::mpsc::Sender<(u64, ReplyEmpty)>>>,
    state: Mutex<State>,
    /// Signalled when a lock of this mount goes (an unlock, a close's, a release's)
    /// and someone sleeps on it: queued waits and lock queries waiting for a RELEASE
    /// look again. Only through [`Locks::went`] and [`Locks::sleep`].
    changed: Condvar,
    ending: AtomicBool,
    /// Wakes of [`Locks::changed`] made, for the tests.
    #[cfg(test)]
    wakes: std::sync::atomic::AtomicUsize,
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

/// One try at `r` on `fd`, waiting in the kernel if `block`: Ok(false) when another
/// holder conflicts (without `block`). A blocking try ends with EINTR when the
/// thread gets [`wake_signal`].
fn lock_on(fd: &OwnedFd, r: &Request, block: bool) -> io::Result<bool> {
    let rc = if r.flock {
        let op = match r.typ {
            libc::F_RDLCK => libc::LOCK_SH,
            libc::F_WRLCK => libc::LOCK_EX,
            _ => libc::LOCK_UN,
        };
        let nb = if block { 0 } else { libc::LOCK_NB };
        // SAFETY: flock on a descriptor we own.
        unsafe { libc::flock(fd.as_raw_fd(), op | nb) }
    } else {
        let l = flock_struct(r.typ, r.start, r.end);
        let cmd = if block {
            libc::F_OFD_SETLKW
        } else {
            libc::F_OFD_SETLK
        };
        // SAFETY: fcntl on a descriptor we own, with a live flock struct.
        unsafe { libc::fcntl(fd.as_raw_fd(), cmd, &l as *const libc::flock) }
    };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) if !block => Ok(false),
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

/// The signal that breaks a waiting thread's kernel wait (F_OFD_SETLKW and flock
/// end with EINTR): a real-time signal of its own, with a handler that does nothing,
/// installed without SA_RESTART the first time a wait blocks. It is sent only to a
/// thread of ours inside a wait (see [`Wait::sig`]).
pub fn wake_signal() -> i32 {
    libc::SIGRTMIN() + 6
}

extern "C" fn on_wake(_: libc::c_int) {}

fn install_wake() -> bool {
    static DONE: OnceLock<bool> = OnceLock::new();
    *DONE.get_or_init(|| {
        // SAFETY: all-zero is a valid sigaction, then filled in: a handler that
        // touches nothing (async-signal-safe), no flags (so the interrupted call
        // returns EINTR instead of restarting), an empty mask.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_wake as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(wake_signal(), &act, std::ptr::null_mut()) == 0
        }
    })
}

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

impl Wait {
    /// Ends the wait's kernel wait, if a thread is in it, until the thread has left
    /// it (a signal that lands just before the thread enters the kernel is lost, so
    /// it is sent again). Called from a thread of its own (see [`Locks::cancel`]).
    fn wake(&self) {
        let mut pause = Duration::from_micros(200);
        loop {
            {
                let _g = guard(&self.sig);
                if self.over.load(Ordering::Acquire) {
                    return;
                }
                let tid = self.tid.load(Ordering::Acquire);
                if tid != 0 {
                    // SAFETY: tgkill to a thread of this process that is still inside
                    // this wait (checked under `sig`, which it takes to leave), with a
                    // signal whose handler does nothing.
                    unsafe {
                        libc::syscall(
                            libc::SYS_tgkill,
                            libc::getpid(),
                            tid,
                            wake_signal() as libc::c_long,
                        )
                    };
                }
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }
}

impl Locks {
    pub fn new(open: Opener, granted: Granted) -> Arc<Locks> {
        Arc::new(Locks {
            open,
            granted,
            grants: Mutex::new(None),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            ending: AtomicBool::new(false),
            #[cfg(test)]
            wakes: Default::default(),
        })
    }

    /// The owner's open of the stand-in, made (and remembered) if `make`.
    fn owner_fd(&self, key: Key, fh: u64, make: bool) -> io::Result<Option<Arc<OwnedFd>>> {
        let mut st = guard(&self.state);
        if let Some(h) = st.held.get(&key) {
            return Ok(Some(h.fd.clone()));
        }
        if !make {
            return Ok(None);
        }
        let fd = Arc::new((self.open)(key.ino)?);
        st.held.insert(
            key,
            Held {
                fd: fd.clone(),
                fh,
                ranges: Vec::new(),
                closing: false,
            },
        );
        Ok(Some(fd))
    }

    /// Records what the owner holds after `r` was had on `fd`; false (and the lock let
    /// go) when `fd` is no longer the owner's open (a close of the owner's dropped it
    /// meanwhile: the caller tries again with the new open).
    fn had(&self, fd: &Arc<OwnedFd>, r: &Request) -> bool {
        let mut st = guard(&self.state);
        match st.held.get_mut(&r.key()) {
            Some(h) if Arc::ptr_eq(&h.fd, fd) => {
                if !r.flock {
                    apply(&mut h.ranges, r.range());
                }
                true
            }
            _ => {
                drop(st);
                unlock_all(fd, r.flock);
                false
            }
        }
    }

    /// Whether some other owner's lock on `ino` may be about to go with a RELEASE.
    fn closing_on(st: &State, ino: u64, owner: u64) -> bool {
        st.held
            .iter()
            .any(|(k, h)| k.ino == ino && k.owner != owner && h.closing)
    }

    /// Waits (at most [`SETTLE`]) until no other owner's lock on `ino` awaits its
    /// RELEASE; those still there then are taken as kept (their open lives on).
    fn settle(&self, ino: u64, owner: u64) {
        let deadline = Instant::now() + SETTLE;
        let mut st = guard(&self.state);
        while Self::closing_on(&st, ino, owner) && !self.ending.load(Ordering::Acquire) {
            let now = Instant::now();
            if now >= deadline {
                for (k, h) in st.held.iter_mut() {
                    if k.ino == ino {
                        h.closing = false;
                    }
                }
                break;
            }
            st = self.sleep(st, deadline - now);
        }
    }

    /// GETLK: the lock that would keep the owner's request out, if any.
    pub fn get(self: &Arc<Self>, r: Request, reply: ReplyLock) {
        let answer = |me: &Locks, r: &Request, reply: ReplyLock| match me.test(r) {
            Ok(c) => reply.locked(c.start, c.end, c.typ, c.pid),
            Err(e) => reply.error(e),
        };
        match self.test(&r) {
            Ok(c) if c.typ != libc::F_UNLCK && self.must_settle(&r) => {
                let me = self.clone();
                self.aside(move || {
                    me.settle(r.ino, r.owner);
                    answer(&me, &r, reply)
                });
            }
            Ok(c) => reply.locked(c.start, c.end, c.typ, c.pid),
            Err(e) => reply.error(e),
        }
    }

    fn must_settle(&self, r: &Request) -> bool {
        Self::closing_on(&guard(&self.state), r.ino, r.owner)
    }

    /// Runs `f` on a thread of its own (a rare wait kept out of the request loop);
    /// without a thread, here.
    fn aside(&self, f: impl FnOnce() + Send + 'static) {
        let f = Arc::new(Mutex::new(Some(f)));
        let g = f.clone();
        let spawned = std::thread::Builder::new()
            .name("lynxfs-lock-settle".into())
            .stack_size(WAIT_STACK)
            .spawn(move || {
                if let Some(f) = guard(&g).take() {
                    f()
                }
            });
        if spawned.is_err() {
            if let Some(f) = guard(&f).take() {
                f()
            }
        }
    }

    fn test(&self, r: &Request) -> Result<Conflict, Errno> {
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

    /// SETLK/SETLKW: answered now, or (a wait) from a thread.
    pub fn set(self: &Arc<Self>, r: Request, sleep: bool, unique: u64, reply: ReplyEmpty) {
        let key = r.key();
        let unlock = r.typ == libc::F_UNLCK;
        let fd = match self.owner_fd(key, r.fh, !unlock) {
            Ok(Some(fd)) => fd,
            // Nothing held: nothing to unlock.
            Ok(None) => return reply.ok(),
            Err(e) => return reply.error(errno(&e)),
        };
        match lock_on(&fd, &r, false) {
            Ok(true) => {
                if !self.had(&fd, &r) {
                    // The owner's open changed under the try (a close): try again.
                    return self.set(r, sleep, unique, reply);
                }
                // Also a lock changed from write to read lets others in.
                self.went();
                if unlock {
                    reply.ok()
                } else {
                    self.grant(r.ino, reply)
                }
            }
            Ok(false) if !sleep && self.must_settle(&r) => {
                let me = self.clone();
                self.aside(move || {
                    me.settle(r.ino, r.owner);
                    match lock_on(&fd, &r, false) {
                        Ok(true) if me.had(&fd, &r) => me.grant(r.ino, reply),
                        Ok(true) => me.set(r, false, unique, reply),
                        Ok(false) => reply.error(Errno::EAGAIN),
                        Err(e) => reply.error(errno(&e)),
                    }
                });
            }
            Ok(false) if !sleep => reply.error(Errno::EAGAIN),
            Ok(false) => self.wait(r, unique, reply),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// A lock of this mount went (or a wait was cancelled): queued waits and
    /// settling queries look again. The wake is a system call (a futex wake-all,
    /// whether or not anyone sleeps), and every RELEASE comes here: so it is made
    /// only when a thread sleeps on [`Locks::changed`].
    ///
    /// No wake is lost. Both the count below and the sleepers' count change under
    /// the state lock, and a sleeper stays counted from before it releases that lock
    /// (inside the condition variable's wait, atomically with its sleep) until it
    /// has woken: so either this sees it counted and wakes it, or it takes the lock
    /// after this and sees the count changed. The settling query needs no more (what
    /// it waits for, a RELEASE's removal from `held`, is state read under the lock);
    /// the queued waits' thread, which tries locks with the state unlocked, compares
    /// the count from before its tries with the count when it is about to sleep and
    /// tries again at once if a lock went meanwhile (before, a lock that went during
    /// its tries was seen only at its next [`QUEUED_PAUSE`]).
    fn went(&self) {
        let mut st = guard(&self.state);
        st.went = st.went.wrapping_add(1);
        if st.sleepers > 0 {
            #[cfg(test)]
            self.wakes.fetch_add(1, Ordering::Relaxed);
            self.changed.notify_all();
        }
    }

    /// Sleeps on [`Locks::changed`] (at most `timeout`), counted as a sleeper.
    fn sleep<'a>(&self, mut st: MutexGuard<'a, State>, timeout: Duration) -> MutexGuard<'a, State> {
        st.sleepers += 1;
        let mut st = self
            .changed
            .wait_timeout(st, timeout)
            .unwrap_or_else(|e| e.into_inner())
            .0;
        st.sleepers -= 1;
        st
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

    /// Whether `r`, waiting, would close a cycle of record-lock waits: one of the
    /// holders keeping it out waits (maybe through others) for a lock `r`'s owner
    /// holds. The holders and waiters are this mount's owners (their ranges and
    /// waits, kept here) and the processes whose classic locks and waits on the
    /// stand-ins the kernel lists in `/proc/locks` (preloaded processes).
    fn closes_cycle(st: &State, r: &Request, listed: Vec<Listed>) -> bool {
        if r.flock {
            return false;
        }
        let g = Graph::new(st, listed);
        let Some(at) = g.place_of(r.ino) else {
            return false;
        };
        let me = Node::Ours(r.owner);
        let mut todo = g.holders(at, me, &r.range());
        let mut seen = HashSet::new();
        while let Some(n) = todo.pop() {
            if n == me {
                return true;
            }
            if !seen.insert(n) {
                continue;
            }
            for (at, want) in g.waits_of(n) {
                todo.extend(g.holders(at, n, &want));
            }
        }
        false
    }

    fn wait(self: &Arc<Self>, r: Request, unique: u64, reply: ReplyEmpty) {
        let w = Arc::new(Wait {
            r,
            unique,
            reply: Mutex::new(Some(reply)),
            cancel: AtomicBool::new(false),
            tid: AtomicI32::new(0),
            over: AtomicBool::new(false),
            sig: Mutex::new(()),
        });
        // Read before the state is locked (it may be long).
        let listed = if r.flock { Vec::new() } else { listed() };
        let mut st = guard(&self.state);
        if let Some(i) = st.early.iter().position(|&u| u == unique) {
            st.early.remove(i);
            drop(st);
            return self.finish(&w, Err(Errno::EINTR));
        }
        if Self::closes_cycle(&st, &r, listed) {
            drop(st);
            return self.finish(&w, Err(Errno::EDEADLK));
        }
        st.waits.insert(unique, w.clone());
        st.queue.push_back(w);
        self.start_threads(st);
    }

    /// Gives queued waits threads while there are fewer than [`THREADS`]; the rest
    /// are left to the queue's thread (`st` is the state, locked).
    fn start_threads(self: &Arc<Self>, mut st: MutexGuard<'_, State>) {
        self.give_threads(&mut st);
        if !st.queue.is_empty() {
            self.retry_queued(st);
        }
    }

    /// Takes queued waits, oldest first, onto threads of their own while there are
    /// fewer than [`THREADS`].
    fn give_threads(self: &Arc<Self>, st: &mut MutexGuard<'_, State>) {
        while st.threads < THREADS && install_wake() {
            let Some(w) = st.queue.pop_front() else {
                return;
            };
            st.threads += 1;
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name("lynxfs-lock-wait".into())
                .stack_size(WAIT_STACK)
                .spawn({
                    let w = w.clone();
                    move || me.serve(w)
                });
            if spawned.is_err() {
                st.threads -= 1;
                st.queue.push_front(w);
                return;
            }
        }
    }

    /// A waiting thread: serves `w`, then queued waits while there are any.
    fn serve(self: Arc<Self>, mut w: Arc<Wait>) {
        // The wake signal must reach this thread whatever mask it inherited.
        // SAFETY: sigset_t is plain data, filled by sigemptyset/sigaddset before
        // pthread_sigmask reads it; only this thread's mask changes.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, wake_signal());
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
        loop {
            let answer = self.block(&w);
            self.finish(&w, answer);
            let mut st = guard(&self.state);
            match st.queue.pop_front() {
                Some(next) => w = next,
                None => {
                    st.threads -= 1;
                    return;
                }
            }
        }
    }

    /// Waits in the kernel until `w`'s lock is had, or the wait is cancelled.
    fn block(&self, w: &Wait) -> Result<(), Errno> {
        {
            let _g = guard(&w.sig);
            w.tid.store(gettid(), Ordering::Release);
        }
        loop {
            if w.cancel.load(Ordering::Acquire) {
                return Err(Errno::EINTR);
            }
            if self.ending.load(Ordering::Acquire) {
                return Err(Errno::ENOLCK);
            }
            // The owner's open now (a close meanwhile may have dropped the old one).
            let fd = match self.owner_fd(w.r.key(), w.r.fh, true) {
                Ok(Some(fd)) => fd,
                Ok(None) => return Err(Errno::ENOLCK),
                Err(e) => return Err(errno(&e)),
            };
            match lock_on(&fd, &w.r, true) {
                Ok(_) if self.had(&fd, &w.r) => return Ok(()),
                Ok(_) => {}
                // The wake signal, or another: the loop looks why.
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(errno(&e)),
            }
        }
    }

    /// Ends wait `w` with `answer` (once).
    fn finish(&self, w: &Wait, answer: Result<(), Errno>) {
        {
            let _g = guard(&w.sig);
            w.over.store(true, Ordering::Release);
            w.tid.store(0, Ordering::Release);
        }
        guard(&self.state).waits.remove(&w.unique);
        let Some(reply) = guard(&w.reply).take() else {
            return;
        };
        match answer {
            Ok(()) => {
                (self.granted)(w.r.ino);
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    /// Makes sure the thread trying queued waits again runs (`st` is the state,
    /// locked), and wakes it.
    fn retry_queued(self: &Arc<Self>, mut st: MutexGuard<'_, State>) {
        if !st.retrying {
            st.retrying = true;
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name("lynxfs-lock-queue".into())
                .stack_size(WAIT_STACK)
                .spawn(move || me.retry_loop());
            if spawned.is_err() {
                // Each thread that comes free takes a queued wait: they wait for that.
                st.retrying = false;
            }
        }
        drop(st);
        self.went();
    }

    /// Tries the queued waits whenever a lock of this mount goes, and every
    /// [`QUEUED_PAUSE`]; ends when none is left. The waits being tried are out of
    /// the queue meanwhile, so no thread takes one at the same time.
    fn retry_loop(self: Arc<Self>) {
        let mut st = guard(&self.state);
        loop {
            let seen = st.went;
            let queued: Vec<Arc<Wait>> = st.queue.drain(..).collect();
            if queued.is_empty() {
                st.retrying = false;
                return;
            }
            drop(st);
            let mut left = VecDeque::new();
            for w in queued {
                let answer = if w.cancel.load(Ordering::Acquire) {
                    Some(Err(Errno::EINTR))
                } else if self.ending.load(Ordering::Acquire) {
                    Some(Err(Errno::ENOLCK))
                } else {
                    match self.owner_fd(w.r.key(), w.r.fh, true) {
                        Ok(Some(fd)) => match lock_on(&fd, &w.r, false) {
                            Ok(true) if self.had(&fd, &w.r) => Some(Ok(())),
                            Ok(_) => None,
                            Err(e) => Some(Err(errno(&e))),
                        },
                        Ok(None) => Some(Err(Errno::ENOLCK)),
                        Err(e) => Some(Err(errno(&e))),
                    }
                };
                match answer {
                    Some(a) => self.finish(&w, a),
                    None => left.push_back(w),
                }
            }
            st = guard(&self.state);
            // Ahead of any queued meanwhile: they came later.
            while let Some(w) = left.pop_back() {
                st.queue.push_front(w);
            }
            // Threads that came free meanwhile found the queue empty.
            self.give_threads(&mut st);
            // A lock that went during the tries: try again now (see `went`).
            if st.queue.is_empty() || st.went != seen {
                continue;
            }
            st = self.sleep(st, QUEUED_PAUSE);
        }
    }

    /// Ends wait `w` early: its thread's kernel wait is broken (from a thread of its
    /// own, since that may take a few tries), a queued one is answered by the queue's
    /// thread.
    fn cancel(&self, w: Arc<Wait>) {
        // Under `sig`, which the thread takes to say it is in the wait before it
        // looks at `cancel`: either it sees the cancel, or the cancel sees its tid.
        let blocked = {
            let _g = guard(&w.sig);
            w.cancel.store(true, Ordering::Release);
            w.tid.load(Ordering::Acquire) != 0
        };
        self.went();
        if blocked {
            let spawned = std::thread::Builder::new()
                .name("lynxfs-lock-wake".into())
                .stack_size(WAIT_STACK)
                .spawn({
                    let w = w.clone();
                    move || w.wake()
                });
            if spawned.is_err() {
                w.wake();
            }
        }
    }

    /// FLUSH: a process closed a descriptor of open file `fh`: its POSIX locks on
    /// the file go (close(2)'s rule), and the locks held through `fh` by other
    /// owners (its OFD locks, its flock) may go with a RELEASE about to come.
    pub fn flush(&self, ino: u64, fh: u64, owner: u64) {
        let key = Key {
            ino,
            owner,
            flock: false,
        };
        let dropped = {
            let mut st = guard(&self.state);
            for (k, h) in st.held.iter_mut() {
                if k.ino == ino && h.fh == fh {
                    h.closing = true;
                }
            }
            st.held.remove(&key)
        };
        if let Some(h) = dropped {
            unlock_all(&h.fd, false);
            self.went();
        }
    }

    /// RELEASE: open file `fh` is closed for good: what was locked through it goes
    /// (its OFD locks, and the flock of `flock_owner` when the kernel says so).
    pub fn release(&self, ino: u64, fh: u64, flock_owner: Option<u64>) {
        let mut gone = Vec::new();
        {
            let mut st = guard(&self.state);
            if let Some(owner) = flock_owner {
                let key = Key {
                    ino,
                    owner,
                    flock: true,
                };
                if let Some(h) = st.held.remove(&key) {
                    gone.push((h, true));
                }
            }
            let through: Vec<Key> = st
                .held
                .iter()
                .filter(|(k, h)| k.ino == ino && h.fh == fh)
                .map(|(k, _)| *k)
                .collect();
            for k in through {
                if let Some(h) = st.held.remove(&k) {
                    gone.push((h, k.flock));
                }
            }
        }
        for (h, flock) in gone {
            unlock_all(&h.fd, flock);
        }
        self.went();
    }

    /// INTERRUPT of request `unique`: its wait ends with EINTR. An interrupt that
    /// finds no wait is kept a while, for a wait not registered yet.
    pub fn interrupt(&self, unique: u64) {
        let mut st = guard(&self.state);
        if let Some(w) = st.waits.get(&unique).cloned() {
            drop(st);
            return self.cancel(w);
        }
        if st.early.len() == EARLY_INTERRUPTS {
            st.early.pop_front();
        }
        st.early.push_back(unique);
    }

    /// The mount ends: every wait ends, every lock goes.
    pub fn end(&self) {
        self.ending.store(true, Ordering::Release);
        // A query settling with no wait to cancel looks again too.
        self.went();
        let waits: Vec<Arc<Wait>> = {
            let mut st = guard(&self.state);
            st.held.clear();
            st.waits.values().cloned().collect()
        };
        for w in waits {
            self.cancel(w);
        }
        guard(&self.grants).take();
    }

    /// How many threads serve waits now, and how many waits are queued (for tests
    /// and the usage report).
    pub fn waiting(&self) -> (usize, usize) {
        let st = guard(&self.state);
        (st.threads, st.queue.len())
    }
}

/// Who holds and who waits, for deadlock detection: an owner of this mount, or a
/// process holding or waiting for a classic lock on a stand-in outside it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Node {
    Ours(u64),
    Process(i32),
}

/// Where a stand-in is, as `/proc/locks` names it: (major, minor, inode).
type Place = (u32, u32, u64);

/// A classic lock (or a wait for one) of `/proc/locks`.
struct Listed {
    at: Place,
    pid: i32,
    range: Range,
    waiting: bool,
}

/// Reads the classic (POSIX) locks and waits of `/proc/locks`: lines like
/// `1: POSIX  ADVISORY  WRITE 5632 00:1b:32408 0 EOF`, a wait with `->` after the
/// number. Others (OFD, flock, leases) are left out: the daemon's own are OFD.
fn listed() -> Vec<Listed> {
    std::fs::read_to_string("/proc/locks")
        .map(|t| parse_locks(&t))
        .unwrap_or_default()
}

fn parse_locks(text: &str) -> Vec<Listed> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace().skip(1).peekable();
        let waiting = f.peek() == Some(&"->");
        if waiting {
            f.next();
        }
        let (Some("POSIX"), Some(_), Some(mode), Some(pid), Some(at), Some(start), Some(end)) = (
            f.next(),
            f.next(),
            f.next(),
            f.next(),
            f.next(),
            f.next(),
            f.next(),
        ) else {
            continue;
        };
        let typ = match mode {
            "READ" => libc::F_RDLCK,
            "WRITE" => libc::F_WRLCK,
            _ => continue,
        };
        let mut parts = at.split(':');
        let (Some(maj), Some(min), Some(ino)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let (Ok(maj), Ok(min), Ok(ino), Ok(pid), Ok(start)) = (
            u32::from_str_radix(maj, 16),
            u32::from_str_radix(min, 16),
            ino.parse::<u64>(),
            pid.parse::<i32>(),
            start.parse::<u64>(),
        ) else {
            continue;
        };
        let end = if end == "EOF" {
            i64::MAX as u64
        } else {
            match end.parse::<u64>() {
                Ok(e) => e,
                Err(_) => continue,
            }
        };
        out.push(Listed {
            at: (maj, min, ino),
            pid,
            range: Range { start, end, typ },
            waiting,
        });
    }
    out
}

/// Where the stand-in open as `fd` is.
fn place(fd: &OwnedFd) -> Option<Place> {
    // SAFETY: plain data: all-zero is a valid stat, which fstat fills in.
    let mut sb: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on a descriptor we own, into a live stat.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut sb) } != 0 {
        return None;
    }
    Some((libc::major(sb.st_dev), libc::minor(sb.st_dev), sb.st_ino))
}

/// The wait-for graph at one moment: this mount's owners, and the classic locks the
/// kernel lists (read only when some stand-in it names is one of ours).
struct Graph<'a> {
    st: &'a State,
    /// Our inodes' stand-ins, both ways.
    places: HashMap<u64, Place>,
    inos: HashMap<Place, u64>,
    listed: Vec<Listed>,
}

impl<'a> Graph<'a> {
    fn new(st: &'a State, listed: Vec<Listed>) -> Graph<'a> {
        let mut places = HashMap::new();
        for (k, h) in &st.held {
            if let std::collections::hash_map::Entry::Vacant(e) = places.entry(k.ino) {
                if let Some(p) = place(&h.fd) {
                    e.insert(p);
                }
            }
        }
        let inos = places.iter().map(|(&i, &p)| (p, i)).collect();
        let listed = listed.into_iter().filter(|l| l.pid > 0).collect();
        Graph {
            st,
            places,
            inos,
            listed,
        }
    }

    fn place_of(&self, ino: u64) -> Option<Place> {
        self.places.get(&ino).copied()
    }

    /// Who holds a lock at `at` that keeps `want` out, other than `not`.
    fn holders(&self, at: Place, not: Node, want: &Range) -> Vec<Node> {
        let mut out = Vec::new();
        if let Some(&ino) = self.inos.get(&at) {
            for (k, h) in &self.st.held {
                if k.ino == ino
                    && !k.flock
                    && Node::Ours(k.owner) != not
                    && h.ranges.iter().any(|g| g.conflicts(want))
                {
                    out.push(Node::Ours(k.owner));
                }
            }
        }
        for l in &self.listed {
            if !l.waiting && l.at == at && Node::Process(l.pid) != not && l.range.conflicts(want) {
                out.push(Node::Process(l.pid));
            }
        }
        out
    }

    /// What `n` waits for: where and which range.
    fn waits_of(&self, n: Node) -> Vec<(Place, Range)> {
        match n {
            Node::Ours(o) => self
                .st
                .waits
                .values()
                .filter(|w| w.r.owner == o && !w.r.flock)
                .filter_map(|w| Some((self.place_of(w.r.ino)?, w.r.range())))
                .collect(),
            Node::Process(pid) => self
                .listed
                .iter()
                .filter(|l| l.waiting && l.pid == pid)
                .map(|l| (l.at, l.range))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u64, typ: i32) -> Range {
        Range { start, end, typ }
    }

    #[test]
    fn a_range_set_replaces_what_it_covers_of_the_owners_own() {
        let mut v = vec![r(0, 99, libc::F_RDLCK)];
        apply(&mut v, r(10, 19, libc::F_WRLCK));
        v.sort_by_key(|x| x.start);
        assert_eq!(
            v,
            [
                r(0, 9, libc::F_RDLCK),
                r(10, 19, libc::F_WRLCK),
                r(20, 99, libc::F_RDLCK)
            ]
        );
        apply(&mut v, r(5, 24, libc::F_UNLCK));
        v.sort_by_key(|x| x.start);
        assert_eq!(v, [r(0, 4, libc::F_RDLCK), r(25, 99, libc::F_RDLCK)]);
        apply(&mut v, r(0, u64::MAX, libc::F_UNLCK));
        assert!(v.is_empty());
    }

    #[test]
    fn proc_locks_lines_give_classic_locks_and_waits_only() {
        let l = parse_locks(
            "1: POSIX  ADVISORY  WRITE 5632 00:1b:32408 0 EOF\n\
             2: OFDLCK ADVISORY  READ -1 00:1b:32408 1 1\n\
             3: FLOCK  ADVISORY  WRITE 77 fe:00:54 0 EOF\n\
             1: -> POSIX  ADVISORY  READ 700 00:1b:32409 5 9\n",
        );
        assert_eq!(l.len(), 2);
        assert_eq!(
            (l[0].at, l[0].pid, l[0].waiting),
            ((0, 0x1b, 32408), 5632, false)
        );
        assert_eq!(l[0].range, r(0, i64::MAX as u64, libc::F_WRLCK));
        assert_eq!(
            (l[1].at, l[1].pid, l[1].waiting),
            ((0, 0x1b, 32409), 700, true)
        );
        assert_eq!(l[1].range, r(5, 9, libc::F_RDLCK));
    }

    #[test]
    fn only_overlapping_ranges_with_a_write_conflict() {
        assert!(r(0, 9, libc::F_WRLCK).conflicts(&r(9, 20, libc::F_RDLCK)));
        assert!(!r(0, 9, libc::F_WRLCK).conflicts(&r(10, 20, libc::F_WRLCK)));
        assert!(!r(0, 9, libc::F_RDLCK).conflicts(&r(5, 20, libc::F_RDLCK)));
    }
}

#[cfg(test)]
mod wake_tests {
    use super::*;
    use std::sync::mpsc;

    /// Locks whose stand-ins are opens of one scratch file.
    fn locks(dir: &tempfile::TempDir) -> Arc<Locks> {
        let f = dir.path().join("stand-in");
        std::fs::write(&f, b"").unwrap();
        let open: Opener = Box::new(move |_| {
            Ok(std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&f)?
                .into())
        });
        Locks::new(open, Box::new(|_| {}))
    }

    fn key(owner: u64) -> Key {
        Key {
            ino: 5,
            owner,
            flock: false,
        }
    }

    /// A lock held by `owner` through open file `fh`, taken on its stand-in (bytes
    /// of its own: owners do not conflict).
    fn hold(l: &Locks, owner: u64, fh: u64) {
        let fd = l.owner_fd(key(owner), fh, true).unwrap().unwrap();
        let r = Request {
            ino: 5,
            fh,
            owner,
            start: owner * 10,
            end: owner * 10 + 9,
            typ: libc::F_WRLCK,
            flock: false,
        };
        assert!(lock_on(&fd, &r, false).unwrap());
        assert!(l.had(&fd, &r));
    }

    fn wakes(l: &Locks) -> usize {
        l.wakes.load(Ordering::Relaxed)
    }

    /// RELEASE, FLUSH and unlocks with nobody asleep make no wake (before: one futex
    /// wake-all at each RELEASE), and still drop the locks.
    #[test]
    fn locks_going_with_nobody_asleep_wake_nobody() {
        let dir = tempfile::tempdir().unwrap();
        let l = locks(&dir);
        for i in 0..100 {
            l.release(5, 1000 + i, None);
            hold(&l, 1, 7);
            hold(&l, 2, 8);
            l.flush(5, 7, 1);
            l.release(5, 8, None);
            assert!(guard(&l.state).held.is_empty());
        }
        assert_eq!(wakes(&l), 0);
        assert_eq!(guard(&l.state).went, 300);
    }

    /// A lock query asleep until a RELEASE drops a just-closed open's lock is woken
    /// by that RELEASE, not by its [`SETTLE`] timeout.
    #[test]
    fn a_release_wakes_a_query_waiting_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let l = locks(&dir);
        hold(&l, 1, 7);
        // A descriptor of open file 7 closed: its RELEASE may come.
        l.flush(5, 7, 2);
        let (tx, rx) = mpsc::channel();
        let settling = l.clone();
        let t = std::thread::spawn(move || {
            settling.settle(5, 3);
            let _ = tx.send(Instant::now());
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while guard(&l.state).sleepers == 0 {
            assert!(Instant::now() < deadline, "the query never slept");
            std::thread::sleep(Duration::from_millis(1));
        }
        let released = Instant::now();
        l.release(5, 7, None);
        // Bounded: settle ends at its timeout at the latest.
        let woke = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("settle ended");
        t.join().unwrap();
        assert_eq!(wakes(&l), 1);
        assert!(
            woke.duration_since(released) < SETTLE / 2,
            "woken {:?} after the RELEASE",
            woke.duration_since(released)
        );
    }
}
