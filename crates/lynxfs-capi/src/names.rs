//! Calls on paths: stat/lstat/fstatat, mkdir/mkdirat, unlink, rmdir, rename/renameat2,
//! link/linkat, symlink, readlink, truncate, chmod/chown/utimens, chdir/fchdir/getcwd,
//! statfs.

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::edge::{buf_mut, call, offset, path, put, Errno, R};
use crate::handle::AT_FDCWD;
use crate::{convert, lynx, Lynx};

/// Runs a call on one path of handle `fs` with the caller's session.
fn on_path(
    fs: *const Lynx,
    p: *const c_char,
    f: impl FnOnce(&engine::Session<'static, engine::pmem::PmemBackend>, &[u8]) -> R<()>,
) -> c_int {
    call(|| {
        let h = lynx(fs)?;
        let p = path(p)?;
        h.session(|s| f(s, p)).map(|()| 0)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `p` NULL or a string; `st` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_stat(
    fs: *const Lynx,
    p: *const c_char,
    st: *mut libc::stat,
) -> c_int {
    on_path(fs, p, |s, p| put(st, convert::stat(&s.stat(p)?)))
}

/// # Safety
/// `fs` is NULL or a live handle; `p` NULL or a string; `st` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_lstat(
    fs: *const Lynx,
    p: *const c_char,
    st: *mut libc::stat,
) -> c_int {
    on_path(fs, p, |s, p| put(st, convert::stat(&s.lstat(p)?)))
}

/// # Safety
/// `fs` is NULL or a live handle; `p` NULL or a string.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_mkdir(
    fs: *const Lynx,
    p: *const c_char,
    mode: libc::mode_t,
) -> c_int {
    on_path(fs, p, |s, p| Ok(s.mkdir(p, mode)?))
}

/// # Safety
/// `fs` is NULL or a live handle; `p` NULL or a string.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_unlink(fs: *const Lynx, p: *const c_char) -> c_int {
    on_path(fs, p, |s, p| Ok(s.unlink(p)?))
}

/// # Safety
/// `fs` is NULL or a live handle; `p` NULL or a string.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_rmdir(fs: *const Lynx, p: *const c_char) -> c_int {
    on_path(fs, p, |s, p| Ok(s.rmdir(p)?))
}

/// # Safety
/// `fs` is NULL or a live handle; `from` and `to` NULL or strings.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_rename(
    fs: *const Lynx,
    from: *const c_char,
    to: *const c_char,
) -> c_int {
    lynxfs_renameat2(fs, libc::AT_FDCWD, from, libc::AT_FDCWD, to, 0)
}

/// # Safety
/// `fs` is NULL or a live handle; `from` and `to` NULL or strings.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_renameat2(
    fs: *const Lynx,
    fromdir: c_int,
    from: *const c_char,
    todir: c_int,
    to: *const c_char,
    flags: c_uint,
) -> c_int {
    call(|| {
        let h = lynx(fs)?;
        let (from, to) = (path(from)?, path(to)?);
        if fromdir == todir {
            // One starting directory for both: the session positioned there.
            return h
                .session_at(fromdir, |s| Ok(s.rename(from, to, flags)?))
                .map(|()| 0);
        }
        let from = h.at_path(fromdir, from)?;
        let to = h.at_path(todir, to)?;
        h.session(|s| Ok(s.rename(&*from, &*to, flags)?))
            .map(|()| 0)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `old` and `new` NULL or strings.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_link(
    fs: *const Lynx,
    old: *const c_char,
    new: *const c_char,
) -> c_int {
    call(|| {
        let (h, old, new) = (lynx(fs)?, path(old)?, path(new)?);
        h.session(|s| Ok(s.link(old, new)?)).map(|()| 0)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `old` and `new` NULL or strings.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_linkat(
    fs: *const Lynx,
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
    flags: c_int,
) -> c_int {
    call(|| {
        let (h, old, new) = (lynx(fs)?, path(old)?, path(new)?);
        if flags & !(libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH) != 0 {
            return Err(Errno(libc::EINVAL));
        }
        if new.is_empty() || (old.is_empty() && flags & libc::AT_EMPTY_PATH == 0) {
            return Err(Errno(libc::ENOENT));
        }
        if old.is_empty() {
            // The file open as `olddir` (an O_TMPFILE file among them); the working
            // directory is a directory, which takes no link.
            if olddir == AT_FDCWD {
                return Err(Errno(libc::EPERM));
            }
            let efd = h.fd(olddir)?;
            return h
                .session_at(newdir, |s| Ok(s.link_fd(efd, new)?))
                .map(|()| 0);
        }
        let follow = flags & libc::AT_SYMLINK_FOLLOW != 0;
        if olddir == newdir {
            return h
                .session_at(olddir, |s| Ok(s.linkat(old, new, follow)?))
                .map(|()| 0);
        }
        let old = h.at_path(olddir, old)?;
        let new = h.at_path(newdir, new)?;
        h.session(|s| Ok(s.linkat(&*old, &*new, follow)?))
            .map(|()| 0)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `p` NULL or a string.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_mkdirat(
    fs: *const Lynx,
    dirfd: c_int,
    p: *const c_char,
    mode: libc::mode_t,
) -> c_int {
    call(|| {
        let (h, p) = (lynx(fs)?, path(p)?);
        h.session_at(dirfd, |s| Ok(s.mkdir(p, mode)?)).map(|()| 0)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `p` NULL or a string; `st` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_fstatat(
    fs: *const Lynx,
    dirfd: c_int,
    p: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    call(|| {
        let (h, p) = (lynx(fs)?, path(p)?);
        if flags & !(libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH) != 0 {
            return Err(Errno(libc::EINVAL));
        }
        let found = if p.is_empty() && flags & libc::AT_EMPTY_PATH != 0 {
            if dirfd == AT_FDCWD {
                h.session(|s| Ok(s.stat(".")?))?
            } else {
                h.fs().fstat(h.fd(dirfd)?)?
            }
        } else if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
            h.session_at(dirfd, |s| Ok(s.lstat(p)?))?
        } else {
            h.session_at(dirfd, |s| Ok(s.stat(p)?))?
        };
        put(st, convert::stat(&found)).map(|()| 0)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `target` and `linkpath` NULL or strings.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_symlink(
    fs: *const Lynx,
    target: *const c_char,
    linkpath: *const c_char,
) -> c_int {
    call(|| {
        let (h, target, link) = (lynx(fs)?, path(target)?, path(linkpath)?);
        h.session(|s| Ok(s.symlink(target, link)?)).map(|()| 0)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `p` NULL or a string; `b` has `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_readlink(
    fs: *const Lynx,
    p: *const c_char,
    b: *mut c_char,
    size: usize,
) -> isize {
    call(|| {
        let (h, p) = (lynx(fs)?, path(p)?);
        if size == 0 {
            return Err(Errno(libc::EINVAL));
        }
        let target = h.session(|s| Ok(s.readlink(p)?))?;
        // As readlink(2): no NUL added, a longer target cut to the buffer.
        let dst = buf_mut(b.cast::<c_void>(), size)?;
        let n = target.len().min(dst.len());
        dst[..n].copy_from_slice(&target[..n]);
        Ok(n as i64)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `p` NULL or a string.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_truncate(
    fs: *const Lynx,
    p: *const c_char,
    len: libc::off_t,
) -> c_int {
    on_path(fs, p, |s, p| Ok(s.truncate(p, offset(len)?)?))
}

/// # Safety
/// `fs` is NULL or a live handle; `p` NULL or a string.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_chmod(
    fs: *const Lynx,
    p: *const c_char,
    mode: libc::mode_t,
) -> c_int {
    on_path(fs, p, |s, p| Ok(s.chmod(p, mode)?))
}

/// An id of chown(2): -1 leaves it alone.
fn id(v: u32) -> Option<u32> {
    (v != u32::MAX).then_some(v)
}

/// # Safety
/// `fs` is NULL or a live handle; `p` NULL or a string.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_chown(
    fs: *const Lynx,
    p: *const c_char,
    uid: libc::uid_t,
    gid: libc::gid_t,
) -> c_int {
    on_path(fs, p, |s, p| Ok(s.chown(p, id(uid), id(gid))?))
}

/// # Safety
/// `fs` is NULL or a live handle; `p` NULL or a string; `times` NULL or two readable
/// `struct timespec`.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_utimens(
    fs: *const Lynx,
    p: *const c_char,
    times: *const libc::timespec,
) -> c_int {
    on_path(fs, p, |s, p| {
        let (atime, mtime) = if times.is_null() {
            (Some(engine::TimeSet::Now), Some(engine::TimeSet::Now))
        } else {
            // SAFETY: not NULL, and the header requires two `struct timespec` there.
            let t = unsafe { std::slice::from_raw_parts(times, 2) };
            (convert::time_set(&t[0])?, convert::time_set(&t[1])?)
        };
        Ok(s.utimens(p, atime, mtime)?)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `p` NULL or a string.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_chdir(fs: *const Lynx, p: *const c_char) -> c_int {
    call(|| {
        let (h, p) = (lynx(fs)?, path(p)?);
        h.session_mut(|s| Ok(s.chdir(p)?)).map(|()| 0)
    })
}

/// # Safety
/// `fs` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_fchdir(fs: *const Lynx, fd: c_int) -> c_int {
    call(|| {
        let h = lynx(fs)?;
        let ino = h.opened(fd)?.ino;
        h.session_mut(|s| Ok(s.fchdir(ino)?)).map(|()| 0)
    })
}

/// # Safety
/// `fs` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_umask(fs: *const Lynx, mask: libc::mode_t) -> c_int {
    call(|| {
        let h = lynx(fs)?;
        h.session_mut(|s| Ok(i64::from(s.set_umask(mask))))
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `b` has `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_getcwd(fs: *const Lynx, b: *mut c_char, size: usize) -> c_int {
    call(|| {
        let h = lynx(fs)?;
        let mut cwd = h.session(|s| Ok(s.getcwd()?))?.into_bytes();
        cwd.push(0);
        if b.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        crate::edge::copy_out(&cwd, b.cast::<c_void>(), size.max(1))
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_statfs(fs: *const Lynx, out: *mut libc::statvfs) -> c_int {
    call(|| {
        let h = lynx(fs)?;
        let s = h.session(|s| Ok(s.statfs()))?;
        put(out, convert::statvfs(&s)).map(|()| 0)
    })
}
