//! File data: the block map (extents inline, growing into a tree), copy-on-write
//! writes, truncate, fallocate, and extended attributes; the bytes of file data live
//! behind the storage seam ([`store`]).

pub mod map;
pub mod prealloc;
mod rw;
pub mod store;
pub mod txn;
pub mod xattr;

/// The data mode is the pool's (chosen at mkfs, changed per mount): `pool::DataMode`.
pub use crate::pool::DataMode;
pub use map::{LocalMap, MapCache};
pub use rw::{
    blocks_used, dir_pages, fallocate, file_extents, free_all, read_at, read_cached, read_hinted,
    read_link, seek_data_hole, truncate, write_at, write_fresh, FileExtent, EXTENT_LAST,
    FALLOC_KEEP_SIZE, FALLOC_PUNCH_HOLE, MAX_FILE,
};
