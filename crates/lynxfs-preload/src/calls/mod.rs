//! The C library functions this library replaces, by family. Each serves a pool path
//! or a pool fd and passes everything else to the C library untouched.
//!
//! Functions C declares variadic (`open`, `openat`, `fcntl`, `ioctl`, `mremap`) are defined here with
//! their fixed arguments plus the one optional argument they read: on x86-64 and
//! AArch64 Linux, the variadic and fixed calling conventions pass these integer
//! arguments in the same registers, so the value is the caller's when it passed one
//! (and unread otherwise).

pub mod dir;
pub mod fd;
pub mod hooks;
pub mod ids;
pub mod io;
pub mod ioctl;
pub mod locks;
pub mod maps;
pub mod names;
pub mod numbered;
pub mod open;
pub mod process;
pub mod scan;
pub mod shared_map;
pub mod stat;
pub mod stdio;
pub mod streams;
pub mod temp;
pub mod xattr;

use libc::c_int;

use crate::fds::{self, Open};
use crate::route::{set_errno, Fail};
use crate::state::{self, Attached};

/// Serves a call on `fd`: `pool` if it is one of ours, `kernel` otherwise.
pub fn on_fd<R: Fail>(
    fd: c_int,
    pool: impl FnOnce(&'static Attached, &Open) -> lynxfs::Result<R>,
    kernel: impl FnOnce() -> R,
) -> R {
    if fd < 0 || !fds::marked(fd) || crate::guard::inside() {
        return kernel();
    }
    // Inside before the table is read: a fork meanwhile never copies its lock held.
    let inside = crate::guard::Inside::enter();
    let Some(o) = fds::get(fd) else {
        // Not ours after all; the kernel's call may block, so outside again.
        drop(inside);
        return kernel();
    };
    let Some(a) = state::attached_now() else {
        set_errno(libc::EBADF);
        return R::FAIL;
    };
    match crate::guard::on_live_thread(|| pool(a, &o)) {
        Ok(v) => v,
        Err(e) => {
            set_errno(e.errno());
            R::FAIL
        }
    }
}

/// An errno as the engine's error.
pub fn err(e: i32) -> lynxfs::Error {
    lynxfs::Error::Errno(e)
}

/// The buffer a C caller passed, or EFAULT for a null one with a length.
///
/// # Safety
/// `p` is null or valid for `n` bytes for the lifetime chosen.
pub unsafe fn buf<'a>(p: *const libc::c_void, n: usize) -> lynxfs::Result<&'a [u8]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(err(libc::EFAULT));
    }
    // SAFETY: non-null and valid for `n` bytes, as the caller promises.
    Ok(unsafe { std::slice::from_raw_parts(p.cast(), n) })
}

/// As [`buf`], writable.
///
/// # Safety
/// `p` is null or valid for writes of `n` bytes for the lifetime chosen.
pub unsafe fn buf_mut<'a>(p: *mut libc::c_void, n: usize) -> lynxfs::Result<&'a mut [u8]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(err(libc::EFAULT));
    }
    // SAFETY: non-null and valid for writes of `n` bytes, as the caller promises.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast(), n) })
}

/// Writes `v` through a C out-pointer, EFAULT for null.
///
/// # Safety
/// `p` is null or valid for a write of a `T`.
pub unsafe fn put<T>(p: *mut T, v: T) -> lynxfs::Result<()> {
    if p.is_null() {
        return Err(err(libc::EFAULT));
    }
    // SAFETY: non-null and valid, as the caller promises.
    unsafe { p.write(v) };
    Ok(())
}
