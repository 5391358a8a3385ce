//! The API: POSIX-shaped calls on paths and open handles, with a caller's credentials,
//! errors as errnos. `Fs` owns the pool and the namespace; a `Session` is one caller
//! (credentials and working directory).

mod atime;
mod attrs;
mod descriptions;
mod fds;
pub mod fiemap;
mod fs;
mod held;
mod inodes;
mod io;
mod names;
mod nodes;
mod open;
pub mod path;
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
