//! open and its relatives, close.

use std::sync::Arc;

use libc::{c_char, c_int, c_uint, mode_t};

use super::{err, locks};
use crate::fds::{self, Open};
use crate::real;
use crate::route::at_path;
use crate::state::Caller;

/// Open `p` in the pool: an engine handle behind a reserved kernel fd.
/// `O_TMPFILE` makes a file in the directory `p` names, as O_CREAT does a named one
/// (the session applies the umask, unless a default ACL replaces it).
fn pool_open(s: &Caller, p: &[u8], flags: c_int, mode: mode_t) -> lynxfs::Result<c_int> {
    let o = s.open_file(p, flags, mode)?;
    install(s.fs(), o, flags & libc::O_CLOEXEC != 0)
}

/// A kernel fd for the engine's open `o` (closed again if none can be had).
fn install(fs: &lynxfs::Fs, o: lynxfs::Opened, cloexec: bool) -> lynxfs::Result<c_int> {
    let fd = match fds::reserve(cloexec) {
        Ok(fd) => fd,
        Err(e) => {
            let _ = fs.close_fd(o.fd);
            return Err(err(e));
        }
    };
    let open = Open::new(o.fd, o.ino, o.mode & libc::S_IFMT == libc::S_IFDIR);
    fds::insert(fd, Arc::new(open));
    fds::set_parkable(fd, cloexec);
    Ok(fd)
}

/// openat, for every member of the family.
///
/// # Safety
/// `path` is null or a valid C string.
pub unsafe fn open_at(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: the path is the caller's, valid for the call.
    unsafe {
        at_path(
            dirfd,
            path,
            |s, p| pool_open(s, p, flags, mode),
            |fd, p| {
                fds::flush_spare();
                let r = real::openat64(fd, p, flags, mode);
                // A number the kernel hands out is not one of ours (any more).
                fds::remove(r);
                r
            },
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { open_at(libc::AT_FDCWD, path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { open_at(libc::AT_FDCWD, path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: forwarded as received (the fortified form has no mode).
    unsafe { open_at(libc::AT_FDCWD, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { open_at(libc::AT_FDCWD, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { open_at(dirfd, path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { open_at(dirfd, path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { open_at(dirfd, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { open_at(dirfd, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
    // SAFETY: forwarded as received.
    unsafe { open_at(libc::AT_FDCWD, path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { creat(path, mode) }
}

/// Forgets `fd` if it is ours (true); the kernel fd is closed by the caller.
fn forget(fd: c_int) -> bool {
    match fds::remove(fd) {
        Some(o) => {
            // Closing any fd of a file drops the process's record locks on it (POSIX).
            locks::closed(o.ino);
            true
        }
        None => false,
    }
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if fds::is_spare(fd) {
        // Closed already, as far as the program knows.
        fds::flush_spare();
        crate::route::set_errno(libc::EBADF);
        return -1;
    }
    if fds::is_own(fd) {
        // The library's own descriptor stays; the program is told it closed.
        return 0;
    }
    if fds::marked(fd) {
        // Inside, with a pass through the fork gate, while the fd and lock tables
        // change: a fork meanwhile never copies one of their locks held.
        let _inside = crate::guard::Inside::enter();
        let parkable = fds::parkable(fd);
        if forget(fd) {
            return fds::park(fd, parkable);
        }
    }
    fds::closed(fd);
    // SAFETY: the C library's close on the caller's fd.
    unsafe { real::close(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    fds::flush_spare();
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        fds::closed(first.min(c_int::MAX as c_uint) as c_int);
    }
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        for (fd, _) in fds::all() {
            if (first..=last).contains(&(fd as c_uint)) {
                forget(fd);
            }
        }
    }
    if first > last {
        // SAFETY: the C library answers EINVAL.
        return unsafe { real::close_range(first, last, flags) };
    }
    // The library's own descriptors are left out of the range.
    let mut own: Vec<c_uint> = fds::own()
        .into_iter()
        .map(|p| p as c_uint)
        .filter(|p| (first..=last).contains(p))
        .collect();
    own.sort_unstable();
    own.dedup();
    let mut from = first;
    for p in own {
        if p > from {
            // SAFETY: the C library's close_range on the part below this one.
            let r = unsafe { real::close_range(from, p - 1, flags) };
            if r != 0 {
                return r;
            }
        }
        if p == c_uint::MAX {
            return 0;
        }
        from = p + 1;
    }
    if from > last {
        return 0;
    }
    // SAFETY: the C library's close_range on the rest.
    unsafe { real::close_range(from, last, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn closefrom(first: c_int) {
    // SAFETY: as close_range.
    unsafe { close_range(first.max(0) as c_uint, c_uint::MAX, 0) };
}
