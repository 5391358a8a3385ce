//! A directory log page: 4 KiB, a link to the next page, and 8-byte slots each holding
//! a dentry's pool offset (0 = empty). Slots are claimed in DRAM with a compare-and-swap
//! on the directory's tail and filled with one atomic store, so creates in one
//! directory need no lock.

use super::layout::BLOCK;

pub const NEXT: u64 = 0;
pub const OWNER: u64 = 8;
/// The readdir position of the page's slot 0, when set: `EXPLICIT | position`. Zero
/// (every page before compaction existed, and every page added since) means the
/// previous page's position plus [`SLOTS_PER_PAGE`] (the first page's: 0). Compaction
/// sets it on a page whose predecessor it unlinks, so no entry's offset moves.
pub const BASE: u64 = 16;
pub const EXPLICIT: u64 = 1 << 63;
pub const SLOTS: u64 = 64;
pub const SLOTS_PER_PAGE: u64 = (BLOCK - SLOTS) / 8;

pub fn slot_addr(page: u64, index: u64) -> u64 {
    debug_assert!(index < SLOTS_PER_PAGE);
    page + SLOTS + index * 8
}

/// The readdir position of a page's slot 0, given its `BASE` word and the position of
/// the page before it (`None` for the first page).
pub fn page_base(word: u64, prev: Option<u64>) -> u64 {
    if word & EXPLICIT != 0 {
        word & !EXPLICIT
    } else {
        prev.map_or(0, |p| p + SLOTS_PER_PAGE)
    }
}
