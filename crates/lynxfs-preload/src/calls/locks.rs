//! Record locks (fcntl F_SETLK and friends, lockf) and flock on pool files. The
//! kernel keeps them, on the pool's stand-in file of the inode
//! ([`lynxfs::runtime::stand_ins`]), which every process attached to the pool opens,
//! the FUSE daemon included: a lock on a pool file is the same lock on its stand-in,
//! so a preloaded process, a program through the mount and any other attached
//! process exclude each other exactly as POSIX says (per process for classic locks,
//! per open file description for OFD locks and flock). The stand-in descriptors are
//! the library's own: programs cannot close them from under it.

use std::collections::HashMap;
use std::os::fd::IntoRawFd;

use libc::c_int;
use parking_lot::Mutex;

use super::err;
use crate::fds::{self, Open};
use crate::real;
use crate::state::Attached;

/// This process's stand-in fd per inode, for classic (per-process) locks.
static CLASSIC: Mutex<Option<HashMap<u64, c_int>>> = Mutex::new(None);

/// A new fd on the stand-in of `ino`, out of programs' way and kept from them.
fn open_stand_in(a: &Attached, ino: u64) -> lynxfs::Result<c_int> {
    let fd = match a.fs.lock_stand_in(ino) {
        Some(Ok(fd)) => fd,
        // Attached processes have stand-ins: missing or refused, the lock cannot be
        // one every path to the pool sees.
        Some(Err(_)) | None => return Err(err(libc::ENOLCK)),
    };
    let fd = lynxfs::runtime::out_of_the_way(std::fs::File::from(fd)).into_raw_fd();
    fds::keep(fd);
    Ok(fd)
}

/// This description's own open of its inode's stand-in (its OFD locks and its flock).
fn description_fd(a: &Attached, o: &Open) -> lynxfs::Result<c_int> {
    let fd = *o
        .lock_fd
        .get_or_init(|| open_stand_in(a, o.ino).unwrap_or(-1));
    if fd < 0 {
        Err(err(libc::ENOLCK))
    } else {
        Ok(fd)
    }
}

fn classic_fd(a: &Attached, ino: u64) -> lynxfs::Result<c_int> {
    ANY_CLASSIC.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut m = CLASSIC.lock();
    let m = m.get_or_insert_with(HashMap::new);
    if let Some(&fd) = m.get(&ino) {
        return Ok(fd);
    }
    let fd = open_stand_in(a, ino)?;
    m.insert(ino, fd);
    Ok(fd)
}

/// Whether this process ever took a classic lock (most never do: their closes then
/// skip the stand-in table).
static ANY_CLASSIC: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The process closed an fd of `ino`: POSIX drops its classic locks on the file.
pub fn closed(ino: u64) {
    if !ANY_CLASSIC.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let fd = CLASSIC.lock().as_ref().and_then(|m| m.get(&ino).copied());
    if let Some(fd) = fd {
        let all = unlock_all();
        // SAFETY: an fcntl on our own stand-in fd with a valid flock.
        unsafe { real::fcntl64(fd, libc::F_SETLK, &all as *const _ as libc::c_ulong) };
    }
}

fn unlock_all() -> libc::flock {
    // SAFETY: plain data: all-zero is valid (start 0, length 0: the whole file).
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = libc::F_UNLCK as i16;
    l.l_whence = libc::SEEK_SET as i16;
    l
}

/// As the kernel: a read lock needs an fd open for reading, a write lock one open
/// for writing (the stand-in is open for both), else EBADF.
fn check_access(a: &Attached, o: &Open, kind: c_int) -> lynxfs::Result<()> {
    let mode = a.fs.status_flags(o.handle)? & libc::O_ACCMODE;
    let ok = match kind {
        libc::F_RDLCK => mode != libc::O_WRONLY,
        libc::F_WRLCK => mode != libc::O_RDONLY,
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(err(libc::EBADF))
    }
}

/// Whether `cmd` is a record-lock command.
pub fn is_lock(cmd: c_int) -> bool {
    matches!(
        cmd,
        libc::F_GETLK
            | libc::F_SETLK
            | libc::F_SETLKW
            | libc::F_OFD_GETLK
            | libc::F_OFD_SETLK
            | libc::F_OFD_SETLKW
    )
}

/// A record-lock command on pool file `o`: positions relative to the file's
/// position or end are made absolute (the stand-in has neither), then the kernel
/// does the rest on the stand-in.
///
/// # Safety
/// `arg` is the caller's `struct flock` pointer (null gives EFAULT).
pub unsafe fn fcntl(
    a: &Attached,
    o: &Open,
    cmd: c_int,
    arg: *mut libc::flock,
) -> lynxfs::Result<c_int> {
    // SAFETY: the caller's flock, checked for null.
    let l = unsafe { arg.as_mut() }.ok_or(err(libc::EFAULT))?;
    let whence = l.l_whence as c_int;
    let base = match whence {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => a.fs.seek(o.handle, 0, libc::SEEK_CUR)? as i64,
        libc::SEEK_END => a.fs.fstat(o.handle)?.size as i64,
        _ => return Err(err(libc::EINVAL)),
    };
    let start = l.l_start.checked_add(base).ok_or(err(libc::EOVERFLOW))?;
    if !matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK) {
        check_access(a, o, l.l_type as c_int)?;
    }
    let mut abs = *l;
    abs.l_whence = libc::SEEK_SET as i16;
    abs.l_start = start;
    let ofd = matches!(
        cmd,
        libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW
    );
    let fd = if ofd {
        description_fd(a, o)?
    } else {
        classic_fd(a, o.ino)?
    };
    // SAFETY: an fcntl on our stand-in with a valid flock of ours.
    let r = unsafe { real::fcntl64(fd, cmd, &mut abs as *mut _ as libc::c_ulong) };
    if r < 0 {
        return Err(last_error());
    }
    if matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK) {
        // The answer's positions are absolute, which the caller accepts.
        *l = abs;
    }
    Ok(r)
}

fn last_error() -> lynxfs::Error {
    err(std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::ENOLCK))
}

/// flock on pool file `o`: the description's lock on the stand-in (flock locks
/// belong to the open file description, as the description's stand-in fd does).
pub fn flock(a: &Attached, o: &Open, op: c_int) -> lynxfs::Result<c_int> {
    let fd = description_fd(a, o)?;
    // SAFETY: flock on our own stand-in fd.
    if unsafe { real::flock(fd, op) } < 0 {
        return Err(last_error());
    }
    Ok(0)
}

/// lockf on pool file `o`, as the C library makes it of fcntl (whose own calls would
/// reach the kernel's fd, not the stand-in): a write lock of `len` bytes from the
/// file position (back from it for a negative `len`; 0 is to the end and beyond).
pub fn lockf(a: &Attached, o: &Open, cmd: c_int, len: libc::off64_t) -> lynxfs::Result<c_int> {
    // SAFETY: plain data: all-zero is valid and then filled in.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_whence = libc::SEEK_CUR as i16;
    l.l_len = len;
    let (fcmd, kind) = match cmd {
        libc::F_TEST => (libc::F_GETLK, libc::F_RDLCK),
        libc::F_ULOCK => (libc::F_SETLK, libc::F_UNLCK),
        libc::F_LOCK => (libc::F_SETLKW, libc::F_WRLCK),
        libc::F_TLOCK => (libc::F_SETLK, libc::F_WRLCK),
        _ => return Err(err(libc::EINVAL)),
    };
    l.l_type = kind as i16;
    // SAFETY: a flock of ours, live for the call.
    unsafe { fcntl(a, o, fcmd, &mut l) }?;
    // SAFETY: getpid only returns an id.
    let me = unsafe { libc::getpid() };
    if fcmd == libc::F_GETLK && l.l_type != libc::F_UNLCK as i16 && l.l_pid != me {
        return Err(err(libc::EACCES));
    }
    Ok(0)
}
