//! The on-media format: every persistent structure, byte by byte (docs/FORMAT.md).

pub(crate) mod crc;
pub mod dentry;
pub mod device;
pub mod dirlog;
pub mod extents;
pub mod inode;
pub mod journal;
pub mod layout;
pub mod superblock;
pub mod xattr;

pub use layout::{Geometry, Layout, BLOCK, ROOT_INO};
pub use superblock::Superblock;
