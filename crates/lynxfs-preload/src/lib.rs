//! liblynxfs_preload.so: unmodified, dynamically linked programs reach a LynxFS pool
//! at library speed. Loaded with `LD_PRELOAD` (`lynxfs run` sets it up), it replaces
//! the C library's file functions: a path under the pool's directory (`LYNXFS_AT`),
//! or an fd this library opened, is served by the engine in the calling thread;
//! every other path and fd goes to the C library untouched.
//!
//! Modules, in layers (docs/ARCHITECTURE.md, "The preload's layers"; each uses only
//! its own layer and those below, checked by tests/layers.rs): [`real`] (the C
//! library's own functions), [`guard`], [`cred`] and [`conv`] at the bottom; the
//! attach: [`state`] (the pool, the working directory), [`attach_lock`] and [`own`]
//! (the library's own descriptors); [`fds`] (the pool's fds); [`route`] (which paths
//! are the pool's); [`calls::hooks`] (what the families register for the process
//! hooks); [`calls`] (the replaced functions, by family). This file wires them
//! together at load.

// The replaced functions are the C library's, with its contracts (man pages) as
// their safety documentation.
#![allow(clippy::missing_safety_doc)]

pub mod attach_lock;
pub mod calls;
pub mod conv;
pub mod cred;
pub mod fds;
pub mod guard;
pub mod own;
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
    calls::hooks::register(&PROCESS_HOOKS);
    calls::process::remember_env();
    calls::process::init();
    calls::process::adopt_inherited();
    calls::streams::standard_streams();
    state::init();
    // SAFETY: registers a function that lives as long as the process.
    unsafe { libc::atexit(on_exit) };
}

/// The families' part in forks, execs and exits, run by `calls::process`.
static PROCESS_HOOKS: [&dyn calls::hooks::ProcessHooks; 2] =
    [&calls::locks::LockHooks, &calls::shared_map::MapHooks];

/// The engine's memory under a protection key, before any thread can enter the
/// engine (the guard in [`guard::Inside`] opens it for this library's calls).
fn protect() {
    use lynxfs::pmem::keys::{self, Protection};
    if keys::enable() == Protection::NoFreeKey {
        real::say("every memory protection key is taken: the pool runs without one");
    }
}

extern "C" fn on_exit() {
    calls::process::detach();
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
