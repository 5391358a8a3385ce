//! Extended attributes (POSIX ACLs among them) of pool files.

use libc::{c_char, c_int, c_void, size_t, ssize_t};

use super::{buf, buf_mut, err, on_fd};
use crate::real;
use crate::route::at_path;
use crate::state::{self, Attached};

/// A value or list into the caller's buffer: its length for size 0, ERANGE if it
/// does not fit.
fn answer(v: &[u8], out: *mut c_void, n: size_t) -> lynxfs::Result<ssize_t> {
    if n == 0 {
        return Ok(v.len() as ssize_t);
    }
    if v.len() > n {
        return Err(err(libc::ERANGE));
    }
    // SAFETY: the caller's buffer of `n` >= v.len() bytes.
    unsafe { buf_mut(out, v.len()) }?.copy_from_slice(v);
    Ok(v.len() as ssize_t)
}

fn name_of<'a>(name: *const c_char) -> lynxfs::Result<&'a [u8]> {
    // SAFETY: the caller's attribute name, null or a C string.
    unsafe { state::cpath(name) }.ok_or(err(libc::EFAULT))
}

fn list(names: Vec<Vec<u8>>) -> Vec<u8> {
    let mut all = Vec::new();
    for n in names {
        all.extend_from_slice(&n);
        all.push(0);
    }
    all
}

unsafe fn get(
    path: *const c_char,
    name: *const c_char,
    v: *mut c_void,
    n: size_t,
    follow: bool,
) -> ssize_t {
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            libc::AT_FDCWD,
            path,
            |s, p| {
                let name = name_of(name)?;
                let value = s.on_resolved(p, follow, |ino| s.fs().getxattr(ino, name, &s.cred))?;
                answer(&value, v, n)
            },
            |_, p| {
                if follow {
                    real::getxattr(p, name, v, n)
                } else {
                    real::lgetxattr(p, name, v, n)
                }
            },
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn getxattr(
    path: *const c_char,
    name: *const c_char,
    v: *mut c_void,
    n: size_t,
) -> ssize_t {
    // SAFETY: forwarded as received.
    unsafe { get(path, name, v, n, true) }
}

#[no_mangle]
pub unsafe extern "C" fn lgetxattr(
    path: *const c_char,
    name: *const c_char,
    v: *mut c_void,
    n: size_t,
) -> ssize_t {
    // SAFETY: forwarded as received.
    unsafe { get(path, name, v, n, false) }
}

#[no_mangle]
pub unsafe extern "C" fn fgetxattr(
    fd: c_int,
    name: *const c_char,
    v: *mut c_void,
    n: size_t,
) -> ssize_t {
    on_fd(
        fd,
        |a: &Attached, o| {
            answer(
                &state::with_cred(a, |c| a.fs.getxattr(o.ino, name_of(name)?, c))?,
                v,
                n,
            )
        },
        // SAFETY: the C library's fgetxattr with the caller's arguments.
        || unsafe { real::fgetxattr(fd, name, v, n) },
    )
}

unsafe fn set(
    path: *const c_char,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    flags: c_int,
    follow: bool,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            libc::AT_FDCWD,
            path,
            |s, p| {
                let (name, value) = (name_of(name)?, buf(v, n)?);
                s.on_held(p, follow, |ino| {
                    s.fs().setxattr(ino, name, value, flags, &s.cred)
                })
                .map(|()| 0)
            },
            |_, p| {
                if follow {
                    real::setxattr(p, name, v, n, flags)
                } else {
                    real::lsetxattr(p, name, v, n, flags)
                }
            },
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn setxattr(
    path: *const c_char,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { set(path, name, v, n, flags, true) }
}

#[no_mangle]
pub unsafe extern "C" fn lsetxattr(
    path: *const c_char,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { set(path, name, v, n, flags, false) }
}

#[no_mangle]
pub unsafe extern "C" fn fsetxattr(
    fd: c_int,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    flags: c_int,
) -> c_int {
    on_fd(
        fd,
        |a: &Attached, o| {
            // SAFETY: the caller's value of `n` bytes.
            let value = unsafe { buf(v, n) }?;
            state::with_cred(a, |c| a.fs.setxattr(o.ino, name_of(name)?, value, flags, c))
                .map(|()| 0)
        },
        // SAFETY: the C library's fsetxattr with the caller's arguments.
        || unsafe { real::fsetxattr(fd, name, v, n, flags) },
    )
}

unsafe fn list_at(path: *const c_char, out: *mut c_char, n: size_t, follow: bool) -> ssize_t {
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            libc::AT_FDCWD,
            path,
            |s, p| {
                let names = s.on_resolved(p, follow, |ino| s.fs().listxattr(ino, &s.cred))?;
                answer(&list(names), out.cast(), n)
            },
            |_, p| {
                if follow {
                    real::listxattr(p, out, n)
                } else {
                    real::llistxattr(p, out, n)
                }
            },
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn listxattr(path: *const c_char, out: *mut c_char, n: size_t) -> ssize_t {
    // SAFETY: forwarded as received.
    unsafe { list_at(path, out, n, true) }
}

#[no_mangle]
pub unsafe extern "C" fn llistxattr(path: *const c_char, out: *mut c_char, n: size_t) -> ssize_t {
    // SAFETY: forwarded as received.
    unsafe { list_at(path, out, n, false) }
}

#[no_mangle]
pub unsafe extern "C" fn flistxattr(fd: c_int, out: *mut c_char, n: size_t) -> ssize_t {
    on_fd(
        fd,
        |a: &Attached, o| {
            answer(
                &list(state::with_cred(a, |c| a.fs.listxattr(o.ino, c))?),
                out.cast(),
                n,
            )
        },
        // SAFETY: the C library's flistxattr with the caller's arguments.
        || unsafe { real::flistxattr(fd, out, n) },
    )
}

unsafe fn remove(path: *const c_char, name: *const c_char, follow: bool) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            libc::AT_FDCWD,
            path,
            |s, p| {
                let name = name_of(name)?;
                s.on_held(p, follow, |ino| s.fs().removexattr(ino, name, &s.cred))
                    .map(|()| 0)
            },
            |_, p| {
                if follow {
                    real::removexattr(p, name)
                } else {
                    real::lremovexattr(p, name)
                }
            },
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn removexattr(path: *const c_char, name: *const c_char) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { remove(path, name, true) }
}

#[no_mangle]
pub unsafe extern "C" fn lremovexattr(path: *const c_char, name: *const c_char) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { remove(path, name, false) }
}

#[no_mangle]
pub unsafe extern "C" fn fremovexattr(fd: c_int, name: *const c_char) -> c_int {
    on_fd(
        fd,
        |a: &Attached, o| {
            state::with_cred(a, |c| a.fs.removexattr(o.ino, name_of(name)?, c)).map(|()| 0)
        },
        // SAFETY: the C library's fremovexattr with the caller's arguments.
        || unsafe { real::fremovexattr(fd, name) },
    )
}
