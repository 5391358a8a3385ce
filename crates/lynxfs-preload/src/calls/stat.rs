//! The stat family, access, statfs.

use libc::{c_char, c_int, c_uint};
use lynxfs::Stat;

use super::{err, on_fd, put};
use crate::conv;
use crate::real;
use crate::route::{at_path, set_errno};
use crate::state::{self, Caller};

fn dev() -> u64 {
    state::attached_now().map_or(0, |a| a.dev)
}

/// The inode `p` names, following a final symlink unless `nofollow`.
fn stat_path(s: &Caller, p: &[u8], nofollow: bool) -> lynxfs::Result<Stat> {
    if nofollow {
        s.lstat(p)
    } else {
        s.stat(p)
    }
}

/// fstatat with every flag; an empty path with AT_EMPTY_PATH is the dirfd itself.
///
/// # Safety
/// `path` is null or a valid C string; `st` null or valid for a write.
unsafe fn stat_at(dirfd: c_int, path: *const c_char, st: *mut libc::stat64, flags: c_int) -> c_int {
    // SAFETY: the caller's path.
    if let Some(e) = bad_stat_call(unsafe { state::cpath(path) }, flags, 0) {
        set_errno(e);
        return -1;
    }
    if flags & libc::AT_EMPTY_PATH != 0
        // SAFETY: the caller's path.
        && unsafe { state::cpath(path) } == Some(b"")
        && (dirfd != libc::AT_FDCWD || !state::cwd_in_pool())
    {
        // SAFETY: forwarded.
        return unsafe { fstat64(dirfd, st) };
    }
    let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW != 0;
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            dirfd,
            path,
            |s, p| {
                let p: &[u8] = if p.is_empty() { b"." } else { p };
                put(st, conv::stat64(&stat_path(s, p, nofollow)?, dev())).map(|()| 0)
            },
            |fd, p| real::fstatat64(fd, p, st, flags),
        )
    }
}

/// The errors the kernel gives a stat call before looking at the path: unknown
/// flags or mask bits (EINVAL), an empty path without AT_EMPTY_PATH (ENOENT).
fn bad_stat_call(path: Option<&[u8]>, flags: c_int, mask: c_uint) -> Option<c_int> {
    let known = libc::AT_SYMLINK_NOFOLLOW
        | libc::AT_NO_AUTOMOUNT
        | libc::AT_EMPTY_PATH
        | libc::AT_STATX_SYNC_TYPE;
    let sync = flags & libc::AT_STATX_SYNC_TYPE;
    if flags & !known != 0
        || sync == libc::AT_STATX_SYNC_TYPE
        || mask & libc::STATX__RESERVED as c_uint != 0
    {
        return Some(libc::EINVAL);
    }
    (path == Some(b"") && flags & libc::AT_EMPTY_PATH == 0).then_some(libc::ENOENT)
}

#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, st: *mut libc::stat64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { stat_at(libc::AT_FDCWD, path, st, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, st: *mut libc::stat64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { stat_at(libc::AT_FDCWD, path, st, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn lstat64(path: *const c_char, st: *mut libc::stat64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { stat_at(libc::AT_FDCWD, path, st, libc::AT_SYMLINK_NOFOLLOW) }
}

#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, st: *mut libc::stat64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { lstat64(path, st) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { stat_at(dirfd, path, st, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { stat_at(dirfd, path, st, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, st: *mut libc::stat64) -> c_int {
    on_fd(
        fd,
        // SAFETY: the caller's buffer.
        |a, o| unsafe { put(st, conv::stat64(&a.fs.fstat(o.handle)?, a.dev)) }.map(|()| 0),
        // SAFETY: the C library's fstat with the caller's arguments.
        || unsafe { real::fstat64(fd, st) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, st: *mut libc::stat64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { fstat64(fd, st) }
}

// The stat ABI of programs built before glibc 2.33 (a version argument first).

#[no_mangle]
pub unsafe extern "C" fn __xstat64(_v: c_int, path: *const c_char, st: *mut libc::stat64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { stat_at(libc::AT_FDCWD, path, st, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __xstat(v: c_int, path: *const c_char, st: *mut libc::stat64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { __xstat64(v, path, st) }
}

#[no_mangle]
pub unsafe extern "C" fn __lxstat64(
    _v: c_int,
    path: *const c_char,
    st: *mut libc::stat64,
) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { stat_at(libc::AT_FDCWD, path, st, libc::AT_SYMLINK_NOFOLLOW) }
}

#[no_mangle]
pub unsafe extern "C" fn __lxstat(v: c_int, path: *const c_char, st: *mut libc::stat64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { __lxstat64(v, path, st) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat64(_v: c_int, fd: c_int, st: *mut libc::stat64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { fstat64(fd, st) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat(v: c_int, fd: c_int, st: *mut libc::stat64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { __fxstat64(v, fd, st) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstatat64(
    _v: c_int,
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { stat_at(dirfd, path, st, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstatat(
    v: c_int,
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { __fxstatat64(v, dirfd, path, st, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    st: *mut libc::statx,
) -> c_int {
    // SAFETY: the caller's path.
    if let Some(e) = bad_stat_call(unsafe { state::cpath(path) }, flags, mask) {
        set_errno(e);
        return -1;
    }
    let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW != 0;
    // SAFETY: the caller's path.
    let empty = unsafe { state::cpath(path) } == Some(b"");
    if flags & libc::AT_EMPTY_PATH != 0
        && empty
        && (dirfd != libc::AT_FDCWD || !state::cwd_in_pool())
    {
        return on_fd(
            dirfd,
            // SAFETY: the caller's buffer.
            |a, o| unsafe { put(st, conv::statx(&a.fs.fstat(o.handle)?, a.dev)) }.map(|()| 0),
            // SAFETY: the C library's statx with the caller's arguments.
            || unsafe { real::statx(dirfd, path, flags, mask, st) },
        );
    }
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            dirfd,
            path,
            |s, p| {
                let p: &[u8] = if p.is_empty() { b"." } else { p };
                put(st, conv::statx(&stat_path(s, p, nofollow)?, dev())).map(|()| 0)
            },
            |fd, p| real::statx(fd, p, flags, mask, st),
        )
    }
}

/// access: existence, then the permission bits asked, the whole walk as the
/// caller's real ids, or with AT_EACCESS (`effective`) as its fs ids (the kernel's
/// effective-id check).
fn access_pool(
    s: &Caller,
    p: &[u8],
    mode: c_int,
    nofollow: bool,
    effective: bool,
) -> lynxfs::Result<c_int> {
    if mode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
        return Err(err(libc::EINVAL));
    }
    let real;
    let s = if effective {
        s
    } else {
        let mut r = s.at(s.cwd());
        r.cred = crate::cred::for_access();
        real = r;
        &real
    };
    // A name replaced meanwhile is looked at again (`Session::on_resolved`).
    // F_OK (0) asks only that the inode live.
    s.on_resolved(p, !nofollow, |ino| s.fs().access(ino, &s.cred, mode as u32))?;
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW != 0;
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            dirfd,
            path,
            |s, p| access_pool(s, p, mode, nofollow, flags & libc::AT_EACCESS != 0),
            |fd, p| real::faccessat(fd, p, mode, flags),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn faccessat2(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { faccessat(dirfd, path, mode, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { faccessat(libc::AT_FDCWD, path, mode, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { faccessat(libc::AT_FDCWD, path, mode, libc::AT_EACCESS) }
}

#[no_mangle]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { euidaccess(path, mode) }
}

/// The FUSE file system's magic: what statfs says through the mount too.
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

fn statfs64_of(s: &lynxfs::StatFs) -> libc::statfs64 {
    // SAFETY: plain data: all-zero is valid.
    let mut f: libc::statfs64 = unsafe { std::mem::zeroed() };
    f.f_type = FUSE_SUPER_MAGIC;
    f.f_bsize = s.block_size as i64;
    f.f_frsize = s.block_size as i64;
    f.f_blocks = s.blocks;
    f.f_bfree = s.blocks_free;
    f.f_bavail = s.blocks_avail;
    f.f_files = s.files;
    f.f_ffree = s.files_free;
    f.f_namelen = s.name_max as i64;
    f
}

fn statvfs64_of(s: &lynxfs::StatFs) -> libc::statvfs64 {
    // SAFETY: plain data: all-zero is valid.
    let mut f: libc::statvfs64 = unsafe { std::mem::zeroed() };
    f.f_bsize = s.block_size;
    f.f_frsize = s.block_size;
    f.f_blocks = s.blocks;
    f.f_bfree = s.blocks_free;
    f.f_bavail = s.blocks_avail;
    f.f_files = s.files;
    f.f_ffree = s.files_free;
    f.f_favail = s.files_avail;
    f.f_namemax = s.name_max;
    f
}

/// statfs or statvfs of a path: the pool's figures in the caller's shape `T`.
///
/// # Safety
/// `path` is null or a valid C string; `st` null or valid for a write of a `T`.
unsafe fn path_info<T>(
    path: *const c_char,
    st: *mut T,
    shape: fn(&lynxfs::StatFs) -> T,
    kernel: unsafe fn(*const c_char, *mut T) -> c_int,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            libc::AT_FDCWD,
            path,
            |s, p| {
                s.resolve(p, true)?;
                put(st, shape(&s.statfs())).map(|()| 0)
            },
            |_, p| kernel(p, st),
        )
    }
}

/// fstatfs or fstatvfs: as [`path_info`], for an fd.
///
/// # Safety
/// `st` is null or valid for a write of a `T`.
unsafe fn fd_info<T>(
    fd: c_int,
    st: *mut T,
    shape: fn(&lynxfs::StatFs) -> T,
    kernel: unsafe fn(c_int, *mut T) -> c_int,
) -> c_int {
    on_fd(
        fd,
        // SAFETY: the caller's buffer.
        |a, _| unsafe { put(st, shape(&a.root.read().statfs())) }.map(|()| 0),
        // SAFETY: the C library's call with the caller's arguments.
        || unsafe { kernel(fd, st) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn statfs64(path: *const c_char, st: *mut libc::statfs64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { path_info(path, st, statfs64_of, real::statfs64) }
}

#[no_mangle]
pub unsafe extern "C" fn statfs(path: *const c_char, st: *mut libc::statfs64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { statfs64(path, st) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatfs64(fd: c_int, st: *mut libc::statfs64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { fd_info(fd, st, statfs64_of, real::fstatfs64) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatfs(fd: c_int, st: *mut libc::statfs64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { fstatfs64(fd, st) }
}

#[no_mangle]
pub unsafe extern "C" fn statvfs64(path: *const c_char, st: *mut libc::statvfs64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { path_info(path, st, statvfs64_of, real::statvfs64) }
}

#[no_mangle]
pub unsafe extern "C" fn statvfs(path: *const c_char, st: *mut libc::statvfs64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { statvfs64(path, st) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatvfs64(fd: c_int, st: *mut libc::statvfs64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { fd_info(fd, st, statvfs64_of, real::fstatvfs64) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatvfs(fd: c_int, st: *mut libc::statvfs64) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { fstatvfs64(fd, st) }
}
