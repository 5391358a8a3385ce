//! A process that changes its ids (a server dropping root) is checked with its new
//! ones from then on: each of these calls the C library's, then takes the new ids
//! (see `cred`: the setuid family and setgroups change every thread's, setfsuid,
//! setfsgid, capset and a raw `syscall` only the calling thread's).

use libc::{c_char, c_int, c_long, c_void, gid_t, size_t, uid_t};

use crate::cred;

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

#[no_mangle]
pub unsafe extern "C" fn initgroups(user: *const c_char, group: gid_t) -> c_int {
    // SAFETY: the C library's initgroups (which sets the groups by an internal call
    // this library does not see) with the caller's arguments.
    then_refresh(unsafe { real::initgroups(user, group) })
}

/// setfsuid: the calling thread's only (the C library does not apply it to the
/// others). It answers the previous fs uid whether or not it changed it.
#[no_mangle]
pub unsafe extern "C" fn setfsuid(u: uid_t) -> c_int {
    // SAFETY: the C library's setfsuid.
    let r = unsafe { real::setfsuid(u) };
    cred::this_thread_changed();
    r
}

#[no_mangle]
pub unsafe extern "C" fn setfsgid(g: gid_t) -> c_int {
    // SAFETY: the C library's setfsgid.
    let r = unsafe { real::setfsgid(g) };
    cred::this_thread_changed();
    r
}

/// capset: the calling thread's capabilities.
#[no_mangle]
pub unsafe extern "C" fn capset(header: *mut c_void, data: *const c_void) -> c_int {
    // SAFETY: the C library's capset with the caller's structures.
    let r = unsafe { real::capset(header, data) };
    cred::this_thread_changed();
    r
}

/// syscall(): a credential call made this way changes only the calling thread's
/// (libcap's cap_set_proc, and programs that want exactly that). Declared with the
/// most arguments a system call takes: on x86-64 and AArch64 the variadic and fixed
/// conventions pass them alike (calls/mod.rs), and those the caller did not pass are
/// passed on unread, as the C library's own `syscall` reads them.
#[no_mangle]
pub unsafe extern "C" fn syscall(
    n: c_long,
    a: c_long,
    b: c_long,
    c: c_long,
    d: c_long,
    e: c_long,
    f: c_long,
) -> c_long {
    let key_call = match n {
        libc::SYS_pkey_free => Some(("pkey_free", a)),
        libc::SYS_pkey_mprotect => Some(("pkey_mprotect", d)),
        _ => None,
    };
    if let Some((call, key)) = key_call {
        if super::maps::key_refused(call, key as c_int) {
            return -1;
        }
    }
    // SAFETY: the C library's syscall with the caller's arguments and contract.
    let r = unsafe { real::syscall(n, a, b, c, d, e, f) };
    if cred::changes_credentials(n) {
        cred::this_thread_changed();
    }
    r
}
