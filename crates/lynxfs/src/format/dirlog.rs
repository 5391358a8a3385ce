//! A directory log page: 4 KiB, a link to the next page, and 8-byte slots each holding
//! a dentry's pool offset (0 = empty). Slots are claimed in DRAM with a compare-and-swap
//! on the directory's tail and filled with one atomic store, so creates in one
//! directory need no lock.

use super::layout::BLOCK;

pub const NEXT: u64 = 0;
pub const OWNER: u64 = 8;
pub const SLOTS: u64 = 64;
pub const SLOTS_PER_PAGE: u64 = (BLOCK - SLOTS) / 8;

pub fn slot_addr(page: u64, index: u64) -> u64 {
    debug_assert!(index < SLOTS_PER_PAGE);
    page + SLOTS + index * 8
}
