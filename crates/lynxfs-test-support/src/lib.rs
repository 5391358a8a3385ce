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
//! * [`layers`]: a crate's import graph read from its source, checked against a table
//!   of layers (no upward reference) and for circles between files.
//! * [`history`], [`history_run`]: concurrent histories of namespace calls through
//!   any front end, and a linearizability checker for them (issue 42); the
//!   `lynxfs-history` executable records one through libc.

pub mod built;
pub mod child;
pub mod history;
pub mod history_run;
pub mod layers;
pub mod scratch;
pub mod watchdog;

pub use watchdog::{wait_until, watchdog, Watchdog};
