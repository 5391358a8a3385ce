//! Calls on descriptors: open/openat/close, read/write and their positional forms,
//! lseek, fstat, ftruncate, fsync, fiemap.

use std::ffi::{c_char, c_int, c_void};

use engine::api::fiemap::{Fiemap, FiemapExtent};

use crate::edge::{buf, buf_mut, call, offset, path, put};
use crate::{convert, lynx, Lynx};

/// # Safety
/// `fs` is NULL or a live handle; `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_open(
    fs: *const Lynx,
    path: *const c_char,
    flags: c_int,
    mode: libc::mode_t,
) -> c_int {
    lynxfs_openat(fs, crate::handle::AT_FDCWD, path, flags, mode)
}

/// # Safety
/// `fs` is NULL or a live handle; `p` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_openat(
    fs: *const Lynx,
    dirfd: c_int,
    p: *const c_char,
    flags: c_int,
    mode: libc::mode_t,
) -> c_int {
    call(|| {
        let h = lynx(fs)?;
        let p = path(p)?;
        let o = h.session_at(dirfd, |s| Ok(s.open_file(p, flags, mode)?))?;
        h.install(o).map(i64::from)
    })
}

/// # Safety
/// `fs` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_close(fs: *const Lynx, fd: c_int) -> c_int {
    call(|| lynx(fs)?.close(fd).map(|()| 0))
}

/// # Safety
/// `fs` is NULL or a live handle; `b` has `n` writable bytes (or `n` is 0).
#[no_mangle]
pub unsafe extern "C" fn lynxfs_read(
    fs: *const Lynx,
    fd: c_int,
    b: *mut c_void,
    n: usize,
) -> isize {
    call(|| {
        let h = lynx(fs)?;
        let efd = h.fd(fd)?;
        Ok(h.fs().read(efd, buf_mut(b, n)?)? as i64)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `b` has `n` readable bytes (or `n` is 0).
#[no_mangle]
pub unsafe extern "C" fn lynxfs_write(
    fs: *const Lynx,
    fd: c_int,
    b: *const c_void,
    n: usize,
) -> isize {
    call(|| {
        let h = lynx(fs)?;
        let efd = h.fd(fd)?;
        Ok(h.fs().write(efd, buf(b, n)?)? as i64)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `b` has `n` writable bytes (or `n` is 0).
#[no_mangle]
pub unsafe extern "C" fn lynxfs_pread(
    fs: *const Lynx,
    fd: c_int,
    b: *mut c_void,
    n: usize,
    off: libc::off_t,
) -> isize {
    call(|| {
        let h = lynx(fs)?;
        let efd = h.fd(fd)?;
        Ok(h.fs().pread(efd, buf_mut(b, n)?, offset(off)?)? as i64)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `b` has `n` readable bytes (or `n` is 0).
#[no_mangle]
pub unsafe extern "C" fn lynxfs_pwrite(
    fs: *const Lynx,
    fd: c_int,
    b: *const c_void,
    n: usize,
    off: libc::off_t,
) -> isize {
    call(|| {
        let h = lynx(fs)?;
        let efd = h.fd(fd)?;
        Ok(h.fs().pwrite(efd, buf(b, n)?, offset(off)?)? as i64)
    })
}

/// # Safety
/// `fs` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_lseek(
    fs: *const Lynx,
    fd: c_int,
    off: libc::off_t,
    whence: c_int,
) -> libc::off_t {
    call(|| {
        let h = lynx(fs)?;
        let pos = h.fs().seek(h.fd(fd)?, off, whence)?;
        i64::try_from(pos).map_err(|_| crate::Errno(libc::EOVERFLOW))
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `st` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_fstat(fs: *const Lynx, fd: c_int, st: *mut libc::stat) -> c_int {
    call(|| {
        let h = lynx(fs)?;
        let s = h.fs().fstat(h.fd(fd)?)?;
        put(st, convert::stat(&s)).map(|()| 0)
    })
}

/// # Safety
/// `fs` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_ftruncate(fs: *const Lynx, fd: c_int, len: libc::off_t) -> c_int {
    call(|| {
        let h = lynx(fs)?;
        h.fs().ftruncate(h.fd(fd)?, offset(len)?)?;
        Ok(0)
    })
}

/// # Safety
/// `fs` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_fsync(fs: *const Lynx, fd: c_int) -> c_int {
    call(|| {
        let h = lynx(fs)?;
        h.fs().fsync(h.fd(fd)?)?;
        Ok(0)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `fm` NULL or a `struct fiemap` followed by room for
/// its `fm_extent_count` extents.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_fiemap(fs: *const Lynx, fd: c_int, fm: *mut Fiemap) -> c_int {
    call(|| {
        let h = lynx(fs)?;
        let efd = h.fd(fd)?;
        if fm.is_null() {
            return Err(crate::Errno(libc::EFAULT));
        }
        // SAFETY: not NULL, and the caller's header (alignment not assumed).
        let mut head = unsafe { fm.read_unaligned() };
        let answer = h.fs().fiemap(efd, &mut head);
        // The header goes back also on failure, as the ioctl's does (EBADR names the
        // flags not supported in it).
        // SAFETY: as above.
        unsafe { fm.write_unaligned(head) };
        let extents = answer?;
        // SAFETY: the extents follow the header, with room for fm_extent_count of them
        // (the header's contract), and `extents` holds no more.
        let dst = unsafe { fm.add(1) }.cast::<FiemapExtent>();
        for (i, e) in extents.into_iter().enumerate() {
            // SAFETY: entry `i` < fm_extent_count of the caller's array.
            unsafe { dst.add(i).write_unaligned(e) };
        }
        Ok(0)
    })
}
