//! What the process hooks (`calls::process`: fork, exec, spawn, load, exit) do for
//! the other families of calls. Each family that keeps something a new process or
//! program must get, or that must be settled at exit, registers its [`ProcessHooks`]
//! once at load (lib.rs), and the process hooks run every registered one instead of
//! reaching into the families: the record locks hand their stand-in fds on with the
//! descriptions (`calls::locks`), and shared mappings of pool files are written back
//! at exit (`calls::shared_map`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use libc::c_int;

use crate::fds::Open;
use crate::real;
use crate::state::Attached;

/// A family's part in forks, execs, spawns and exits. Each does nothing unless the
/// family says otherwise.
pub trait ProcessHooks: Sync {
    /// Description `o` is about to be shared with another process (a fork's child
    /// or a new program): what belongs to the description is made now, before the
    /// description is handed on, so that every holder has the same.
    fn sharing(&self, _a: &Attached, _o: &Open) {}

    /// A new program is about to start, inheriting `descriptions` (key and
    /// description) and, for an exec (`exec`), what the process itself holds: what
    /// it is handed of this family's.
    fn handing_on(&self, _descriptions: &[(u64, &Open)], _exec: bool) -> Passed {
        Passed::default()
    }

    /// The environment variable [`Passed::env`] sets: a caller's own value is not
    /// passed on.
    fn env_name(&self) -> Option<&'static str> {
        None
    }

    /// At load of a program that inherited descriptions, once they are adopted
    /// (`by_key`): it takes back what it was handed.
    fn adopting(&self, _a: &Attached, _by_key: &HashMap<u64, Arc<Open>>) {}

    /// The process leaves the pool (at exit).
    fn detaching(&self, _a: &Attached) {}
}

/// Fds opened to a new program (close-on-exec cleared) for as long as it takes to
/// start it, and the environment entry naming them.
#[derive(Default)]
pub struct Passed {
    pub fds: Vec<c_int>,
    pub env: Option<String>,
}

impl Passed {
    /// The new program did not start, or has its copies: close-on-exec again.
    pub fn restore(&self) {
        for &fd in &self.fds {
            // SAFETY: F_SETFD on an fd of this library's, opened to the program.
            unsafe { real::fcntl64(fd, libc::F_SETFD, libc::FD_CLOEXEC as libc::c_ulong) };
        }
    }
}

static REGISTERED: OnceLock<&'static [&'static dyn ProcessHooks]> = OnceLock::new();

/// At load: the families' hooks (a second call changes nothing).
pub fn register(all: &'static [&'static dyn ProcessHooks]) {
    let _ = REGISTERED.set(all);
}

/// The hooks registered at load (none before).
pub fn registered() -> &'static [&'static dyn ProcessHooks] {
    REGISTERED.get().copied().unwrap_or_default()
}
