//! liblynxfs_preload.so: unmodified, dynamically linked programs reach a LynxFS pool
//! at library speed. Loaded with `LD_PRELOAD` (`lynxfs run` sets it up), it replaces
//! the C library's file functions: a path under the pool's directory (`LYNXFS_AT`),
//! or an fd this library opened, is served by the engine in the calling thread;
//! every other path and fd goes to the C library untouched.
//!
//! Modules: [`state`] (the pool, the working directory), [`route`] (which paths are
//! the pool's), [`fds`] (the pool's fds), [`calls`] (the replaced functions, by
//! family), [`real`] (the C library's own functions).

// The replaced functions are the C library's, with its contracts (man pages) as
// their safety documentation.
#![allow(clippy::missing_safety_doc)]

pub mod attach_lock;
pub mod calls;
pub mod conv;
pub mod cred;
pub mod fds;
pub mod guard;
pub mod real;
pub mod route;
pub mod state;

/// Runs when the library is loaded, before the program's `main`.
extern "C" fn on_load() {
    // Registered first, so destroyed last: its absence tells exit handlers that the
    // thread-locals the engine needs are gone.
    guard::alive();
    let _inside = guard::Inside::enter();
    let Some(c) = state::config() else {
        return;
    };
    if c.protect {
        protect();
    }
    calls::process::remember_env();
    calls::process::init();
    calls::process::adopt_inherited();
    calls::stdio::standard_streams();
    state::init();
    // SAFETY: registers a function that lives as long as the process.
    unsafe { libc::atexit(on_exit) };
}

/// The engine's memory under a protection key, before any thread can enter the
/// engine (the guard in [`guard::Inside`] opens it for this library's calls).
fn protect() {
    use lynxfs::pmem::keys::{self, Protection};
    if keys::enable() == Protection::NoFreeKey {
        say("every memory protection key is taken: the pool runs without one");
    }
}

extern "C" fn on_exit() {
    calls::process::detach();
}

/// A message on stderr, prefixed with this library's name. Never fails: a program
/// may have closed its stderr (coreutils do at exit).
pub fn say(msg: &str) {
    let line = format!("liblynxfs_preload: {msg}\n");
    // SAFETY: a write of our own buffer to fd 2; its result does not matter.
    unsafe { real::write(2, line.as_ptr().cast(), line.len()) };
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

#[no_mangle]
pub unsafe extern "C" fn umask(mask: libc::mode_t) -> libc::mode_t {
    // SAFETY: the C library's umask.
    let old = unsafe { real::umask(mask) };
    state::set_umask(mask);
    old
}
