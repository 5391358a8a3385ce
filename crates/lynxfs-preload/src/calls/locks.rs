//! Record locks (fcntl F_SETLK and friends) on pool files. The kernel keeps them:
//! each locked pool inode has a stand-in file in a directory of the caller's own
//! beside the pool's runtime state, and a lock on a pool file is the same lock on
//! its stand-in, so processes exclude each other exactly as POSIX says (per process
//! for classic locks, per open file description for OFD locks).

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;

use libc::c_int;
use parking_lot::Mutex;

use super::err;
use crate::fds::Open;
use crate::real;
use crate::state::{self, Attached};

/// This process's stand-in fd per inode, for classic (per-process) locks.
static CLASSIC: Mutex<Option<HashMap<u64, c_int>>> = Mutex::new(None);

/// The directory of stand-ins: one per user and pool, mode 0700.
fn dir() -> lynxfs::Result<Vec<u8>> {
    let c = state::config().ok_or(err(libc::ENOLCK))?;
    let md = std::fs::metadata(&c.pool).map_err(|_| err(libc::ENOLCK))?;
    let base = std::env::var_os("LYNXFS_RUNTIME_DIR").unwrap_or_else(|| "/dev/shm".into());
    // SAFETY: geteuid only returns an id.
    let uid = unsafe { libc::geteuid() };
    let mut d = base.as_bytes().to_vec();
    d.extend_from_slice(format!("/lynxfs-locks-{uid}-{}-{}", md.dev(), md.ino()).as_bytes());
    let cd = CString::new(d.clone()).map_err(|_| err(libc::ENOLCK))?;
    // SAFETY: a C string we own.
    unsafe { libc::mkdir(cd.as_ptr(), 0o700) };
    // Only a real directory of ours, nobody else's and not a symlink, holds stand-ins.
    let ok = std::fs::symlink_metadata(std::ffi::OsStr::from_bytes(&d))
        .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0);
    if !ok {
        return Err(err(libc::ENOLCK));
    }
    Ok(d)
}

/// A new fd on the stand-in of `ino`.
fn open_stand_in(ino: u64) -> lynxfs::Result<c_int> {
    let mut p = dir()?;
    p.extend_from_slice(format!("/{ino}").as_bytes());
    let p = CString::new(p).map_err(|_| err(libc::ENOLCK))?;
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    // SAFETY: a C string we own.
    let fd = unsafe { real::open64(p.as_ptr(), flags, 0o600) };
    if fd < 0 {
        return Err(err(libc::ENOLCK));
    }
    Ok(fd)
}

fn classic_fd(ino: u64) -> lynxfs::Result<c_int> {
    ANY_CLASSIC.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut m = CLASSIC.lock();
    let m = m.get_or_insert_with(HashMap::new);
    if let Some(&fd) = m.get(&ino) {
        return Ok(fd);
    }
    let fd = open_stand_in(ino)?;
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
        *o.ofd_lock
            .get_or_init(|| open_stand_in(o.ino).unwrap_or(-1))
    } else {
        classic_fd(o.ino)?
    };
    if fd < 0 {
        return Err(err(libc::ENOLCK));
    }
    // SAFETY: an fcntl on our stand-in with a valid flock of ours.
    let r = unsafe { real::fcntl64(fd, cmd, &mut abs as *mut _ as libc::c_ulong) };
    if r < 0 {
        return Err(err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOLCK)));
    }
    if matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK) {
        // The answer's positions are absolute, which the caller accepts.
        *l = abs;
    }
    Ok(r)
}
