//! The API: POSIX-shaped calls on paths and open handles, with a caller's credentials,
//! errors as errnos. `Fs` owns the pool and the namespace; a `Session` is one caller
//! (credentials, working directory, umask). Every front end (the FUSE mount, the
//! preload, the C API) reaches the engine through these, so each rule is kept once,
//! below them, and holds the same through all three.
//!
//! - `fs.rs`: `Fs` itself (open, close, sessions, the atime mode);
//! - `session.rs`, `names.rs`, `attrs.rs`: a caller's path calls;
//! - `inodes.rs`: the same calls by inode number (the FUSE adapter's);
//! - `open.rs`, `io.rs`, `size.rs`, `atime.rs`, `descriptions.rs`, `fiemap.rs`: open
//!   handles, their data, their sizes, reads' atime, shared descriptions, extents;
//! - `files.rs`: the open-file table (handle numbers, each handle's open file);
//! - `held.rs`: inode numbers held from outside; `nodes.rs`: what a create makes;
//!   `path.rs`: path resolution.

mod atime;
mod attrs;
mod descriptions;
pub mod fiemap;
mod files;
mod fs;
mod held;
mod inodes;
mod io;
mod names;
mod nodes;
mod open;
pub mod path;
#[cfg(test)]
mod removal_races;
mod session;
mod size;

pub use crate::meta::Namespace;
pub use crate::runtime::DescKey;
pub use fs::{Atime, Fs};
pub use open::Opened;
pub use session::Session;

/// An open file handle.
pub type Fd = u64;

/// The bit Linux sets (`__FMODE_EXEC`) in the flags of the open execve(2) makes, which
/// FUSE passes on; no open(2) caller can set it.
pub const FMODE_EXEC: i32 = 0o40;
