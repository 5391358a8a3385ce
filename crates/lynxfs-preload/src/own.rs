//! The descriptors this library owns besides the pool's fds: the engine's (the pool
//! file, its lock, the runtime file, found when it attaches) and the lock stand-ins
//! (`calls::locks`). Programs must not close or replace them (`fds::is_own`, which
//! adds the placeholder the pool's fds copy). Below the attach, which records the
//! engine's as it opens them.

use libc::c_int;
use parking_lot::RwLock;

use crate::guard::passing;

/// Whether `fd` is the engine's or a lock stand-in.
pub fn is_own(fd: c_int) -> bool {
    passing(|| ENGINE.read().contains(&fd) || KEPT.read().contains(&fd))
}

/// The engine's descriptors and the lock stand-ins.
pub fn listed() -> Vec<c_int> {
    passing(|| {
        let mut v = ENGINE.read().clone();
        v.extend(KEPT.read().iter());
        v
    })
}

/// The lock stand-in fds (see `calls::locks`), kept from programs as the engine's are.
static KEPT: RwLock<Vec<c_int>> = RwLock::new(Vec::new());

/// `fd` (a lock stand-in of this library) is the library's own until [`unkeep`].
pub fn keep(fd: c_int) {
    passing(|| KEPT.write().push(fd));
}

pub fn unkeep(fd: c_int) {
    passing(|| KEPT.write().retain(|&k| k != fd));
}

/// The engine's descriptors (the pool file, its lock, the runtime file), found when
/// it attached: the fds that appeared meanwhile.
static ENGINE: RwLock<Vec<c_int>> = RwLock::new(Vec::new());

/// The engine closes `gone` and keeps `new` (a fork child's own open of the pool
/// file, which the engine names: no look at which fds appeared).
pub fn engine_replaced(gone: &[c_int], new: &[c_int]) {
    passing(|| {
        let mut e = ENGINE.write();
        e.retain(|fd| !gone.contains(fd) || new.contains(fd));
        e.extend(new.iter().filter(|fd| !gone.contains(fd)));
    })
}

/// The process's open fds (from /proc/self/fd).
fn open_fds() -> Vec<c_int> {
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
    match lynxfs::runtime::out_of_the_way_range() {
        Some(range) => recording_moved(range, attach),
        None => recording_listed(attach),
    }
}

/// Whether `fd` is open.
fn is_open(fd: c_int) -> bool {
    // SAFETY: F_GETFD only asks whether the fd is open.
    unsafe { crate::real::fcntl64(fd, libc::F_GETFD, 0) >= 0 }
}

/// [`recording_own`] where the engine moves what it keeps into `range` (each to the
/// lowest free number there): its descriptors are among the first free numbers of
/// the range, looked at one by one before and after, instead of two listings of
/// /proc/self/fd (an open, two getdents and a close each, at every attach).
fn recording_moved<T>(range: std::ops::Range<i32>, attach: impl FnOnce() -> T) -> T {
    // More than the engine keeps (the pool file, its lock, the runtime file, the
    // stand-ins' directory): if every one is taken after, list them all instead.
    const LOOK: usize = 8;
    let free: Vec<c_int> = range.filter(|&fd| !is_open(fd)).take(LOOK).collect();
    let r = attach();
    let new: Vec<c_int> = free.iter().copied().filter(|&fd| is_open(fd)).collect();
    if new.len() == LOOK {
        let all = open_fds();
        passing(|| {
            ENGINE
                .write()
                .extend(all.into_iter().filter(|fd| *fd >= free[0]))
        });
    } else {
        passing(|| ENGINE.write().extend(new));
    }
    r
}

/// [`recording_own`] by two listings of /proc/self/fd: the fds that appeared.
fn recording_listed<T>(attach: impl FnOnce() -> T) -> T {
    let before = open_fds();
    let r = attach();
    let new: Vec<c_int> = open_fds()
        .into_iter()
        .filter(|fd| !before.contains(fd))
        // The listing's own fd is gone again by now.
        // SAFETY: F_GETFD only asks whether the fd is open.
        .filter(|&fd| unsafe { crate::real::fcntl64(fd, libc::F_GETFD, 0) } >= 0)
        .collect();
    passing(|| ENGINE.write().extend(new));
    r
}
