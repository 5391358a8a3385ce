//! A process that changes its ids (a server dropping root) is checked with its new
//! ones from then on: each of these calls the C library's, then takes the new ids.

use libc::{c_int, gid_t, size_t, uid_t};

use crate::real;
use crate::state;

/// The call's result; on success the pool's callers take the new ids.
fn then_refresh(r: c_int) -> c_int {
    if r == 0 {
        state::ids_changed();
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn setuid(u: uid_t) -> c_int {
    // SAFETY: the C library's setuid.
    then_refresh(unsafe { real::setuid(u) })
}

#[no_mangle]
pub unsafe extern "C" fn setgid(g: gid_t) -> c_int {
    // SAFETY: the C library's setgid.
    then_refresh(unsafe { real::setgid(g) })
}

#[no_mangle]
pub unsafe extern "C" fn seteuid(u: uid_t) -> c_int {
    // SAFETY: the C library's seteuid.
    then_refresh(unsafe { real::seteuid(u) })
}

#[no_mangle]
pub unsafe extern "C" fn setegid(g: gid_t) -> c_int {
    // SAFETY: the C library's setegid.
    then_refresh(unsafe { real::setegid(g) })
}

#[no_mangle]
pub unsafe extern "C" fn setreuid(r: uid_t, e: uid_t) -> c_int {
    // SAFETY: the C library's setreuid.
    then_refresh(unsafe { real::setreuid(r, e) })
}

#[no_mangle]
pub unsafe extern "C" fn setregid(r: gid_t, e: gid_t) -> c_int {
    // SAFETY: the C library's setregid.
    then_refresh(unsafe { real::setregid(r, e) })
}

#[no_mangle]
pub unsafe extern "C" fn setresuid(r: uid_t, e: uid_t, s: uid_t) -> c_int {
    // SAFETY: the C library's setresuid.
    then_refresh(unsafe { real::setresuid(r, e, s) })
}

#[no_mangle]
pub unsafe extern "C" fn setresgid(r: gid_t, e: gid_t, s: gid_t) -> c_int {
    // SAFETY: the C library's setresgid.
    then_refresh(unsafe { real::setresgid(r, e, s) })
}

#[no_mangle]
pub unsafe extern "C" fn setgroups(n: size_t, list: *const gid_t) -> c_int {
    // SAFETY: the C library's setgroups with the caller's list.
    then_refresh(unsafe { real::setgroups(n, list) })
}
