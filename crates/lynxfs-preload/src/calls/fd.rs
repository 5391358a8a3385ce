//! dup, dup2, dup3 and fcntl: new fds for pool files share their open file
//! description (the table entry), as the kernel's dup does.

use libc::{c_int, c_ulong};

use super::{locks, on_fd};
use crate::fds;
use crate::real;

/// After the kernel gave `new` as a copy of `old`: it serves what `old` serves (and
/// a standard stream on it follows).
fn copied(old: c_int, new: c_int) {
    if new < 0 || new == old {
        return;
    }
    match fds::get(old) {
        Some(o) => fds::insert(new, o),
        None => {
            fds::remove(new);
        }
    }
    if (0..3).contains(&new) {
        super::streams::standard_stream_follows(new);
    }
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    fds::flush_spare();
    // SAFETY: the C library's dup on the caller's fd.
    let new = unsafe { real::dup(fd) };
    copied(fd, new);
    new
}

/// A copy onto the library's own descriptor would take it away: refused as the
/// kernel refuses a number it is busy with.
fn onto_own(new: c_int) -> bool {
    if fds::is_own(new) {
        crate::route::set_errno(libc::EBUSY);
        return true;
    }
    false
}

#[no_mangle]
pub unsafe extern "C" fn dup2(fd: c_int, new: c_int) -> c_int {
    if onto_own(new) {
        return -1;
    }
    fds::flush_spare();
    fds::closed(new);
    // `new`, if it was ours, is closed by the kernel: its entry goes in `copied`.
    // SAFETY: the C library's dup2 with the caller's arguments.
    let r = unsafe { real::dup2(fd, new) };
    copied(fd, r);
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup3(fd: c_int, new: c_int, flags: c_int) -> c_int {
    if onto_own(new) {
        return -1;
    }
    fds::flush_spare();
    fds::closed(new);
    super::streams::before_standard_copy(new);
    // SAFETY: the C library's dup3 with the caller's arguments.
    let r = unsafe { real::dup3(fd, new, flags) };
    copied(fd, r);
    r
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    if fds::is_spare(fd) {
        // Closed, as far as the program knows: the kernel says EBADF.
        fds::flush_spare();
    }
    if matches!(cmd, libc::F_DUPFD | libc::F_DUPFD_CLOEXEC) {
        fds::flush_spare();
        // SAFETY: the C library's fcntl with the caller's arguments.
        let r = unsafe { real::fcntl64(fd, cmd, arg) };
        copied(fd, r);
        return r;
    }
    if cmd == libc::F_SETFD {
        // A parked spare must be close-on-exec (see `fds::park`).
        fds::set_parkable(fd, false);
    }
    // Close-on-exec is the kernel fd's own flag: F_GETFD/F_SETFD go there.
    if !matches!(cmd, libc::F_GETFL | libc::F_SETFL) && !locks::is_lock(cmd) {
        // SAFETY: as above.
        return unsafe { real::fcntl64(fd, cmd, arg) };
    }
    on_fd(
        fd,
        |a, o| match cmd {
            libc::F_GETFL => a.fs.status_flags(o.handle),
            libc::F_SETFL => a.fs.set_status_flags(o.handle, arg as c_int).map(|()| 0),
            // SAFETY: for lock commands the argument is the caller's flock pointer.
            _ => unsafe { locks::fcntl(a, o, cmd, arg as *mut libc::flock) },
        },
        // SAFETY: as above.
        || unsafe { real::fcntl64(fd, cmd, arg) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { fcntl64(fd, cmd, arg) }
}

#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    on_fd(
        fd,
        |a, o| locks::flock(a, o, op),
        // SAFETY: the C library's flock with the caller's arguments.
        || unsafe { real::flock(fd, op) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn lockf64(fd: c_int, cmd: c_int, len: libc::off64_t) -> c_int {
    on_fd(
        fd,
        |a, o| locks::lockf(a, o, cmd, len),
        // SAFETY: the C library's lockf with the caller's arguments.
        || unsafe { real::lockf64(fd, cmd, len) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn lockf(fd: c_int, cmd: c_int, len: libc::off_t) -> c_int {
    // SAFETY: forwarded as received (off_t is 64 bits on the targets built for).
    unsafe { lockf64(fd, cmd, len) }
}
