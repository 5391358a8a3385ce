//! A lane's redo journal: a record of (address, new 8-byte value) pairs with a CRC32C,
//! made live by one commit word. Replay is idempotent: applying a record twice leaves
//! the same words.

use super::layout::JOURNAL_SIZE;

pub const COMMIT: u64 = 0; // 0: empty; otherwise equals SEQ of the committed record
pub const SEQ: u64 = 8;
pub const COUNT_CRC: u64 = 16; // u32 count | u32 crc32c(seq, count, entries)
pub const ENTRIES: u64 = 64;
pub const ENTRY_LEN: u64 = 16;
pub const MAX_ENTRIES: usize = ((JOURNAL_SIZE - ENTRIES) / ENTRY_LEN) as usize;

/// CRC32C over the sequence number, the count and the entries.
pub fn record_crc(seq: u64, entries: &[(u64, u64)]) -> u32 {
    record_crc_encoded(seq, &encode_entries(entries))
}

/// `record_crc` over entries already encoded (one pass over contiguous bytes).
pub fn record_crc_encoded(seq: u64, encoded: &[u8]) -> u32 {
    let count = (encoded.len() / ENTRY_LEN as usize) as u32;
    let mut head = [0u8; 12];
    head[..8].copy_from_slice(&seq.to_le_bytes());
    head[8..].copy_from_slice(&count.to_le_bytes());
    super::crc::append(super::crc::append(0, &head), encoded)
}

/// [`encode_entries`] into `out` (room for `entries`): a record of a few words
/// (a rename's) encodes on the stack.
pub fn encode_entries_into<'b>(entries: &[(u64, u64)], out: &'b mut [u8]) -> &'b [u8] {
    let n = entries.len() * ENTRY_LEN as usize;
    for (chunk, (a, v)) in out[..n].chunks_exact_mut(ENTRY_LEN as usize).zip(entries) {
        chunk[..8].copy_from_slice(&a.to_le_bytes());
        chunk[8..].copy_from_slice(&v.to_le_bytes());
    }
    &out[..n]
}

pub fn encode_entries(entries: &[(u64, u64)]) -> Vec<u8> {
    let mut b = Vec::with_capacity(entries.len() * ENTRY_LEN as usize);
    for (a, v) in entries {
        b.extend_from_slice(&a.to_le_bytes());
        b.extend_from_slice(&v.to_le_bytes());
    }
    b
}
