//! The process's LynxFS fds. Each is a real kernel fd (an eventfd this library
//! creates), so fd numbers, `poll` on other fds, `close_range` and inheritance stay
//! the kernel's; the table says which engine handle serves it. Fds dup'd from one
//! another share one [`Open`], as they share one open file description.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use libc::c_int;

use crate::state;

/// One open file description of the pool in this process.
pub struct Open {
    /// The engine's handle.
    pub handle: lynxfs::Fd,
    pub ino: u64,
    pub is_dir: bool,
    /// This description's own open of its inode's lock stand-in, for its OFD record
    /// locks and its flock (see `calls::locks`).
    pub lock_fd: OnceLock<c_int>,
}

impl Open {
    pub fn new(handle: lynxfs::Fd, ino: u64, is_dir: bool) -> Open {
        Open {
            handle,
            ino,
            is_dir,
            lock_fd: OnceLock::new(),
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(&fd) = self.lock_fd.get() {
            if fd >= 0 {
                unkeep(fd);
                // SAFETY: closing the stand-in fd this description owned.
                unsafe { crate::real::close(fd) };
            }
        }
        if let Some(a) = state::attached_now() {
            let _inside = crate::guard::Inside::enter();
            // Closing cannot fail for a handle this table owned.
            let h = self.handle;
            let _ = crate::guard::on_live_thread(|| a.fs.close_fd(h));
        }
    }
}

/// Fds below this are marked in a bitmap, so a call on any other fd learns it is
/// not ours without a table lookup.
const MARKED: usize = 1 << 16;

static MARKS: [AtomicU64; MARKED / 64] = [const { AtomicU64::new(0) }; MARKED / 64];
/// Entries at or above MARKED (rare: the lookup is then always made).
static HIGH: AtomicUsize = AtomicUsize::new(0);

/// A plain locked map: calls come from exit handlers too, after the thread's
/// thread-locals are gone (which lock-free maps need).
type Table = RwLock<HashMap<c_int, Arc<Open>>>;

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(Default::default)
}

fn marked(fd: c_int) -> bool {
    let i = fd as usize;
    if i < MARKED {
        MARKS[i / 64].load(Ordering::Acquire) & (1 << (i % 64)) != 0
    } else {
        HIGH.load(Ordering::Acquire) != 0
    }
}

fn mark(fd: c_int, on: bool) {
    let i = fd as usize;
    if i < MARKED {
        let bit = 1 << (i % 64);
        if on {
            MARKS[i / 64].fetch_or(bit, Ordering::AcqRel);
        } else {
            MARKS[i / 64].fetch_and(!bit, Ordering::AcqRel);
        }
    } else if on {
        HIGH.fetch_add(1, Ordering::AcqRel);
    } else {
        HIGH.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The pool file behind `fd`, if `fd` is one of ours.
pub fn get(fd: c_int) -> Option<Arc<Open>> {
    if fd < 0 || !marked(fd) {
        return None;
    }
    table().read().get(&fd).cloned()
}

/// `fd` (a kernel fd this library reserved) now serves `open`; an entry left over
/// from an fd the kernel closed behind our back is dropped.
pub fn insert(fd: c_int, open: Arc<Open>) {
    let old = table().write().insert(fd, open);
    // The old description (if the kernel reused the number) is dropped unlocked.
    let was = old.is_some();
    drop(old);
    let old = was;
    if !old {
        mark(fd, true);
    }
}

/// `fd` is no longer ours (closed, or reused by the kernel for something else).
pub fn remove(fd: c_int) -> Option<Arc<Open>> {
    if fd < 0 || !marked(fd) {
        return None;
    }
    let old = table().write().remove(&fd);
    if old.is_some() {
        mark(fd, false);
    }
    old
}

/// Every fd of ours, with its description.
pub fn all() -> Vec<(c_int, Arc<Open>)> {
    table()
        .read()
        .iter()
        .map(|(fd, o)| (*fd, o.clone()))
        .collect()
}

/// The eventfd every unshared pool fd is a copy of (dup is far cheaper than a new
/// eventfd per open); out of programs' way, close-on-exec.
static PLACEHOLDER: OnceLock<Result<c_int, i32>> = OnceLock::new();

fn placeholder() -> Result<c_int, i32> {
    *PLACEHOLDER.get_or_init(|| {
        let fd = new_eventfd(true)?;
        // SAFETY: moving our own fd up (as the engine's, see `out_of_the_way`).
        let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 1024 - 97) };
        if high >= 0 {
            // SAFETY: the low copy is ours and no longer needed.
            unsafe { crate::real::close(fd) };
            return Ok(high);
        }
        Ok(fd)
    })
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EMFILE)
}

/// A new eventfd (count 0).
pub fn new_eventfd(cloexec: bool) -> Result<c_int, i32> {
    let flags = if cloexec { libc::EFD_CLOEXEC } else { 0 };
    // SAFETY: eventfd only creates a new fd.
    let fd = unsafe { libc::eventfd(0, flags) };
    if fd < 0 {
        Err(last_errno())
    } else {
        Ok(fd)
    }
}

/// Reserve a kernel fd for a pool file, close-on-exec if asked: a copy of the
/// placeholder eventfd, until the description is shared (see `calls::process`).
pub fn reserve(cloexec: bool) -> Result<c_int, i32> {
    let p = placeholder()?;
    let cmd = if cloexec {
        libc::F_DUPFD_CLOEXEC
    } else {
        libc::F_DUPFD
    };
    // SAFETY: duplicating our own placeholder fd.
    let fd = unsafe { crate::real::fcntl64(p, cmd, 0) };
    if fd < 0 {
        Err(last_errno())
    } else {
        Ok(fd)
    }
}

/// Whether `fd` is one of this library's own (the placeholder, the engine's, a lock
/// stand-in): programs must not close it from under the library.
pub fn is_own(fd: c_int) -> bool {
    matches!(PLACEHOLDER.get(), Some(Ok(p)) if *p == fd)
        || ENGINE.read().contains(&fd)
        || KEPT.read().contains(&fd)
}

/// The lock stand-in fds (see `calls::locks`), kept from programs as the engine's are.
static KEPT: RwLock<Vec<c_int>> = RwLock::new(Vec::new());

/// `fd` (a lock stand-in of this library) is the library's own until [`unkeep`].
pub fn keep(fd: c_int) {
    KEPT.write().push(fd);
}

pub fn unkeep(fd: c_int) {
    KEPT.write().retain(|&k| k != fd);
}

/// The engine's descriptors (the pool file, its lock, the runtime file), found when
/// it attached: the fds that appeared meanwhile.
static ENGINE: RwLock<Vec<c_int>> = RwLock::new(Vec::new());

/// The process's open fds (from /proc/self/fd).
pub fn open_fds() -> Vec<c_int> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Runs `attach` (which opens the engine's descriptors) and records what it opened
/// as the library's own.
pub fn recording_own<T>(attach: impl FnOnce() -> T) -> T {
    let before = open_fds();
    let r = attach();
    let new: Vec<c_int> = open_fds()
        .into_iter()
        .filter(|fd| !before.contains(fd))
        // The listing's own fd is gone again by now.
        // SAFETY: F_GETFD only asks whether the fd is open.
        .filter(|&fd| unsafe { crate::real::fcntl64(fd, libc::F_GETFD, 0) } >= 0)
        .collect();
    ENGINE.write().extend(new);
    r
}

/// The library's own descriptors: programs must not close or replace them.
pub fn own() -> Vec<c_int> {
    let mut v = ENGINE.read().clone();
    v.extend(KEPT.read().iter());
    if let Some(Ok(p)) = PLACEHOLDER.get() {
        v.push(*p);
    }
    v
}
