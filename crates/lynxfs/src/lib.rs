//! LynxFS: a file system for persistent memory, in user space.
//!
//! Layers, each using only those below it: [`pmem`] (persistence), [`format`] (the
//! on-media structures), [`alloc`] (per-lane allocators), [`log`] (journals and
//! recovery), then the data path, the namespace and the API.

#![deny(unused_must_use)]

pub mod alloc;
pub mod api;
pub mod data;
pub mod error;
pub mod format;
pub mod fsck;
pub mod log;
pub mod meta;
pub mod pmem;
pub mod pool;
pub mod progress;
pub mod runtime;
pub mod time;

pub use api::{Atime, Fd, Fs, Opened, Session};
pub use data::DataMode;
pub use error::{Error, Result};
pub use meta::{Cred, DirEntry, RenameFlags, SetAttr, Stat, StatFs, TimeSet};
pub use pool::{Access, MkfsOptions, Pool};
pub use progress::{Progress, Quiet};
pub use time::Timestamp;
