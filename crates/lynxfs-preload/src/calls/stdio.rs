//! stdio: glibc's fopen opens files with internal calls a preload cannot replace,
//! so a pool file's FILE is a cookie stream (`super::streams`) over the replaced
//! read, write, lseek and close; `fileno` answers its fd.

use libc::{c_char, c_int, FILE};

use super::streams;
use crate::fds;
use crate::real;
use crate::route::{set_errno, Route};

/// open(2) flags for an fopen mode ("r", "w+", "ae", "wx", ...); EINVAL for others.
fn open_flags(mode: &[u8]) -> Option<c_int> {
    let (first, rest) = mode.split_first()?;
    let plus = rest.contains(&b'+');
    let mut f = match (first, plus) {
        (b'r', false) => libc::O_RDONLY,
        (b'r', true) => libc::O_RDWR,
        (b'w', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        (b'w', true) => libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
        (b'a', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        (b'a', true) => libc::O_RDWR | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    if rest.contains(&b'e') {
        f |= libc::O_CLOEXEC;
    }
    if rest.contains(&b'x') {
        f |= libc::O_EXCL;
    }
    Some(f)
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    if crate::guard::inside() || crate::state::config().is_none() {
        // SAFETY: the C library's fopen with the caller's arguments.
        return unsafe { real::fopen64(path, mode) };
    }
    // SAFETY: the caller's mode string.
    let Some(flags) = (unsafe { crate::state::cpath(mode) }).and_then(open_flags) else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    // SAFETY: the caller's path; the replaced openat.
    let fd = unsafe { super::open::open_at(libc::AT_FDCWD, path, flags, 0o666) };
    if fd < 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: an fd just opened, and the caller's mode.
    let f = unsafe { fdopen(fd, mode) };
    if f.is_null() {
        // errno is fdopen's.
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOMEM);
        // SAFETY: closing the fd opened above, which nothing else holds.
        unsafe { super::open::close(fd) };
        set_errno(e);
    }
    f
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: forwarded as received.
    unsafe { fopen64(path, mode) }
}

/// The C library's fclose; a kernel stream's fd number is free again (see
/// `fds::closed`; a pool stream's close goes through the replaced close).
#[no_mangle]
pub unsafe extern "C" fn fclose(f: *mut FILE) -> c_int {
    if !f.is_null() {
        // SAFETY: the caller's open stream.
        fds::closed(unsafe { libc::fileno(f) });
    }
    // SAFETY: the C library's fclose with the caller's stream.
    unsafe { real::fclose(f) }
}

#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    if fds::get(fd).is_some() {
        // SAFETY: a pool fd and the caller's mode.
        return unsafe { streams::stream(fd, mode) };
    }
    // SAFETY: the C library's fdopen with the caller's arguments.
    unsafe { real::fdopen(fd, mode) }
}

/// A stream reopened on a pool path, or a pool stream reopened: glibc's own freopen
/// would open the path with internal calls (not the pool) and cannot turn a FILE
/// into a cookie stream. As glibc does, the old stream is closed, the new file
/// takes the old fd's number, and a standard stream variable (`stdout`, ...) that
/// named the old FILE names the new one (the FILE itself changes).
#[no_mangle]
pub unsafe extern "C" fn freopen64(
    path: *const c_char,
    mode: *const c_char,
    f: *mut FILE,
) -> *mut FILE {
    // SAFETY: the caller's path (or null).
    let to_pool = unsafe { crate::state::cpath(path) }
        .is_some_and(|p| matches!(crate::route::route(libc::AT_FDCWD, p), Route::Pool(..)));
    let from_pool = streams::fd_of_stream(f).is_some();
    if crate::guard::inside() || f.is_null() || !(to_pool || from_pool) {
        // SAFETY: the C library's freopen with the caller's arguments.
        return unsafe { real::freopen64(path, mode, f) };
    }
    // SAFETY: the caller's mode string.
    let flags = unsafe { crate::state::cpath(mode) }.and_then(open_flags);
    if let (Some(own_fd), true, Some(flags)) = (streams::fd_of_stream(f), to_pool, flags) {
        // SAFETY: `f` is one of this library's open streams.
        if unsafe { same_direction(f, flags) } {
            // SAFETY: that stream, over `own_fd`; the caller's path.
            return unsafe { reopen_in_place(f, own_fd, path, flags) };
        }
    }
    // SAFETY: the caller's stream, still open.
    let old_fd = unsafe { fileno(f) };
    // SAFETY: the caller's stream, closed as freopen does first (its errors ignored).
    unsafe { libc::fclose(f) };
    let (Some(flags), false) = (flags, path.is_null()) else {
        // A pool stream's mode cannot change in place (no path to reopen).
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    // SAFETY: the caller's path; the replaced openat.
    let mut fd = unsafe { super::open::open_at(libc::AT_FDCWD, path, flags, 0o666) };
    if fd < 0 {
        return std::ptr::null_mut();
    }
    if old_fd >= 0 && fd != old_fd {
        // SAFETY: the replaced dup3 and close on fds of this call.
        unsafe {
            if super::fd::dup3(fd, old_fd, flags & libc::O_CLOEXEC) == old_fd {
                super::open::close(fd);
                fd = old_fd;
            }
        }
    }
    // SAFETY: an fd just opened, and the caller's mode.
    let g = unsafe { fdopen(fd, mode) };
    if g.is_null() {
        // SAFETY: the fd opened above, unused.
        unsafe { super::open::close(fd) };
        return g;
    }
    streams::replace_standard(f, g);
    g
}

extern "C" {
    // glibc's stdio_ext.h.
    fn __freadable(f: *mut FILE) -> c_int;
    fn __fwritable(f: *mut FILE) -> c_int;
    fn __fpurge(f: *mut FILE);
}

/// Whether stream `f` reads and writes as a file opened with `flags` would.
///
/// # Safety
/// `f` is an open stream.
unsafe fn same_direction(f: *mut FILE, flags: c_int) -> bool {
    let acc = flags & libc::O_ACCMODE;
    // SAFETY: the caller's open stream.
    let (reads, writes) = unsafe { (__freadable(f) != 0, __fwritable(f) != 0) };
    reads == (acc != libc::O_WRONLY) && writes == (acc != libc::O_RDONLY)
}

/// freopen of one of this library's streams onto a pool path, reading and writing as
/// before: the same FILE, now on the new file, as glibc's freopen keeps its FILE (a
/// program may hold the pointer: `FILE *log = stdout`, C++'s cout). The new file takes
/// the number of the stream's fd, which is the stream's cookie. If the path cannot be
/// opened the stream stays open on its old file (glibc's would be closed) and NULL
/// says why.
///
/// # Safety
/// `f` is one of this library's open streams, over `own_fd`; `path` a C string.
unsafe fn reopen_in_place(
    f: *mut FILE,
    own_fd: c_int,
    path: *const c_char,
    flags: c_int,
) -> *mut FILE {
    // SAFETY: the caller's open stream: what it buffered goes to the old file, what it
    // read ahead is dropped.
    unsafe {
        libc::fflush(f);
        __fpurge(f);
    }
    // SAFETY: the caller's path; the replaced openat.
    let fd = unsafe { super::open::open_at(libc::AT_FDCWD, path, flags, 0o666) };
    if fd < 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: the replaced dup3 and close, on fds of this call and the stream's own.
    let moved = unsafe { super::fd::dup3(fd, own_fd, flags & libc::O_CLOEXEC) } == own_fd;
    // SAFETY: the fd opened above, copied or not.
    unsafe { super::open::close(fd) };
    if !moved {
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's stream, now over the new file: its error and end-of-file
    // marks cleared and its position learned anew from the fd (0, or the end to come
    // for an append).
    unsafe {
        libc::clearerr(f);
        libc::fseeko64(f, 0, libc::SEEK_CUR);
    }
    f
}

#[no_mangle]
pub unsafe extern "C" fn freopen(
    path: *const c_char,
    mode: *const c_char,
    f: *mut FILE,
) -> *mut FILE {
    // SAFETY: forwarded as received.
    unsafe { freopen64(path, mode, f) }
}

#[no_mangle]
pub unsafe extern "C" fn fileno(f: *mut FILE) -> c_int {
    if let Some(fd) = streams::fd_of_stream(f) {
        return fd;
    }
    // SAFETY: the C library's fileno on the caller's stream.
    unsafe { real::fileno(f) }
}

#[no_mangle]
pub unsafe extern "C" fn fileno_unlocked(f: *mut FILE) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { fileno(f) }
}
