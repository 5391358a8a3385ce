//! LynxFS: a file system for persistent memory, in user space.
//!
//! Layers, each using only those below it: [`pmem`] (persistence), [`format`] (the
//! on-media structures), [`alloc`] (per-lane allocators), [`log`] (journals and
//! recovery), then the data path, the namespace and the API.

#![deny(unused_must_use)]

pub mod alloc;
pub mod error;
pub mod format;
pub mod log;
pub mod pmem;
pub mod pool;
pub mod time;

pub use error::{Error, Result};
pub use pool::{Access, MkfsOptions, Pool};
