//! Calls made while this library is already at work (the engine opening its own
//! files, Rust's standard library reading the environment) go straight to the C
//! library: they are never pool calls, and routing them could recurse.

use std::cell::Cell;

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Held while this library works on a call.
pub struct Inside {
    was: bool,
}

impl Inside {
    pub fn enter() -> Inside {
        Inside {
            was: INSIDE.try_with(|i| i.replace(true)).unwrap_or(true),
        }
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let was = self.was;
        let _ = INSIDE.try_with(|i| i.set(was));
    }
}

/// Whether the calling thread is inside this library already.
pub fn inside() -> bool {
    // A thread being torn down has no locals left: treat it as inside (C library).
    INSIDE.try_with(Cell::get).unwrap_or(true)
}
