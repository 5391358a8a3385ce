//! LynxFS: a file system for persistent memory, in user space.
//!
//! Layers, lowest first, each using only itself and those below it (drawn in
//! docs/ARCHITECTURE.md; `tests/layers.rs` fails on a reference upward): [`error`],
//! [`time`] and [`progress`]; [`pmem`] (persistence); [`format`](mod@format) (the
//! on-media structures and their codecs); [`runtime`] (the shared runtime region, its
//! locks and attachments); [`alloc`] (per-lane allocators); [`log`] (journals and
//! recovery); the namespace's shared state ([`meta::index`], [`meta::cachelet`],
//! [`meta::gate`], [`meta::free_slots`], [`meta::shared`]); [`pool`] (an open pool; it
//! lays out the runtime region); [`data`] (file data and attributes); the namespace
//! ([`meta`]); the API ([`api`]) and the checker ([`fsck`]).

#![deny(unused_must_use)]

pub mod alloc;
pub mod api;
pub mod cpu;
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
pub use error::{Error, Result};
pub use meta::{Cred, DirBatch, DirEntry, DirRef, RenameFlags, SetAttr, Stat, StatFs, TimeSet};
pub use pool::{Access, DataMode, MkfsOptions, Pool};
pub use progress::{Progress, Quiet};
pub use time::Timestamp;
