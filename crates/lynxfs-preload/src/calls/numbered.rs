//! Calls that make a kernel fd without naming a path: pipes, sockets, event and timer
//! fds. None serves the pool, but each takes the lowest free number, which a parked
//! spare (see `fds::park`) would hold: the spare is closed first, so the program gets
//! the number the kernel would have given it without this library.

use libc::{c_int, c_uint, sockaddr, socklen_t};

use crate::fds;

/// `numbered! { fn pipe(fds: *mut c_int) -> c_int; }` defines `pipe`, closing the
/// spare before calling the C library's own (`real::pipe`).
macro_rules! numbered {
    ($(fn $name:ident($($arg:ident: $t:ty),*) -> $r:ty;)*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $t),*) -> $r {
                fds::flush_spare();
                // SAFETY: the C library's own function, with the caller's arguments
                // and the caller's contract.
                unsafe { crate::real::$name($($arg),*) }
            }
        )*
    };
}

numbered! {
    fn pipe(fds: *mut c_int) -> c_int;
    fn pipe2(fds: *mut c_int, flags: c_int) -> c_int;
    fn socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int;
    fn socketpair(domain: c_int, kind: c_int, protocol: c_int, sv: *mut c_int) -> c_int;
    fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int;
    fn eventfd(initval: c_uint, flags: c_int) -> c_int;
    fn epoll_create(size: c_int) -> c_int;
    fn epoll_create1(flags: c_int) -> c_int;
    fn inotify_init() -> c_int;
    fn inotify_init1(flags: c_int) -> c_int;
    fn timerfd_create(clock: c_int, flags: c_int) -> c_int;
    fn signalfd(fd: c_int, mask: *const libc::sigset_t, flags: c_int) -> c_int;
    fn memfd_create(name: *const libc::c_char, flags: c_uint) -> c_int;
}
