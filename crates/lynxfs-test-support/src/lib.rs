//! What the workspace's tests share, in one place instead of copied from crate to
//! crate: a dev-dependency only, never part of a shipped binary.
//!
//! * [`watchdog`]: time bounds for a whole test ([`Watchdog`]) and for a condition
//!   ([`wait_until`]), so that a hang fails the run instead of stalling CI.
//! * [`child`]: children run within a time limit, alone in a process group when
//!   their descendants must die with them.
//! * [`built`]: executables and libraries `cargo test` does not build for a test (other
//!   packages' binaries, cdylibs), built once into the test's own target directory.
//! * [`scratch`]: directories anyone may write, a thread acting as another user, a
//!   tmpfs mounted for a test.

pub mod built;
pub mod child;
pub mod scratch;
pub mod watchdog;

pub use watchdog::{wait_until, watchdog, Watchdog};
