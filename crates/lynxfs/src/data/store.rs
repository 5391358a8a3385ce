//! The storage seam: where file data lives. The data path ([`super::rw`]) reaches the
//! bytes of file data blocks only through a [`DataStore`], named by block number (an
//! extent's `pblk`), never by an address in the pool mapping; metadata (inodes, block
//! maps, directory logs, attribute blocks) stays in persistent memory and is reached
//! through [`crate::pmem`] directly.
//!
//! Today every pool keeps its data in persistent memory ([`PmData`]: the pool's data
//! blocks, written through a [`Batch`], so the crash checker's recording backend sees
//! each data store and flush). A store on another medium (a block device) implements
//! the same two traits, its writers ending in that medium's own durability proof
//! ([`Medium`]), and its blocks come from the allocator of file-data blocks
//! ([`crate::alloc::Allocators::data_blocks`]).

use crate::format::{Layout, BLOCK};
use crate::pmem::{Backend, Batch, Medium, Pm, Pmem};
use crate::pool::Pool;

/// Where a pool's file data blocks are read and written.
pub trait DataStore {
    /// The medium whose durability this store's writes need.
    type Medium: Medium;
    /// A group of writes made durable together.
    type Writer<'w>: DataWriter<Medium = Self::Medium>
    where
        Self: 'w;

    /// Copy bytes out from byte `at` of block `blk` on: `buf` may run on into the next
    /// blocks of one extent (consecutive blocks). The caller holds the file's lock.
    fn read(&self, blk: u64, at: u64, buf: &mut [u8]);

    /// [`Self::read`] for a reader that holds no lock: a writer may change the bytes
    /// while they are copied, so the caller validates afterwards (a sequence lock) and
    /// throws the bytes away if anything changed; the copy never leaves the store.
    fn read_racing(&self, blk: u64, at: u64, buf: &mut [u8]);

    /// Start a group of writes.
    fn writer(&self) -> Self::Writer<'_>;

    /// Where block `blk`'s bytes are in the pool file (FIEMAP's physical address).
    fn physical(&self, blk: u64) -> u64;
}

/// Writes of file data blocks, ended together.
#[must_use = "a data writer must end with flushed()"]
pub trait DataWriter {
    type Medium: Medium;

    /// Store `bytes` from byte `at` of block `blk` on (running on into the next blocks
    /// of one extent).
    fn write(&mut self, blk: u64, at: u64, bytes: &[u8]) -> &mut Self;

    /// Store `len` zero bytes from byte `at` of block `blk` on.
    fn zero(&mut self, blk: u64, at: u64, len: usize) -> &mut Self;

    /// End the group: its writes are on their way to the medium. In persistent memory
    /// the next fence of this thread (the one before the metadata commit that publishes
    /// them) makes them durable; a store on another medium makes them durable by its
    /// own flush, ordered before that commit by whoever publishes them.
    fn flushed(self);
}

/// File data in the pool's own data blocks.
pub struct PmData<'a, B: Backend> {
    pm: &'a Pm<B>,
    layout: &'a Layout,
}

impl<B: Backend> Pool<B> {
    /// The store of this pool's file data.
    #[inline]
    pub fn data(&self) -> PmData<'_, B> {
        PmData {
            pm: &self.pm,
            layout: &self.layout,
        }
    }
}

/// The pool offset of byte `at` of data block `blk`.
#[inline]
fn addr(layout: &Layout, blk: u64, at: u64) -> u64 {
    debug_assert!(at < BLOCK, "byte {at} of a block");
    layout.block_addr(blk) + at
}

impl<B: Backend> DataStore for PmData<'_, B> {
    type Medium = Pmem;
    type Writer<'w>
        = PmDataWriter<'w, B>
    where
        Self: 'w;

    #[inline]
    fn read(&self, blk: u64, at: u64, buf: &mut [u8]) {
        self.pm.read(addr(self.layout, blk, at), buf);
    }

    #[inline]
    fn read_racing(&self, blk: u64, at: u64, buf: &mut [u8]) {
        self.pm.read_racing(addr(self.layout, blk, at), buf);
    }

    #[inline]
    fn writer(&self) -> PmDataWriter<'_, B> {
        PmDataWriter {
            batch: self.pm.batch(),
            layout: self.layout,
        }
    }

    #[inline]
    fn physical(&self, blk: u64) -> u64 {
        self.layout.block_addr(blk)
    }
}

/// Data writes into the pool: stores flushed as they are made ([`Batch`]).
pub struct PmDataWriter<'a, B: Backend> {
    batch: Batch<'a, B>,
    layout: &'a Layout,
}

impl<B: Backend> DataWriter for PmDataWriter<'_, B> {
    type Medium = Pmem;

    #[inline]
    fn write(&mut self, blk: u64, at: u64, bytes: &[u8]) -> &mut Self {
        self.batch.write(addr(self.layout, blk, at), bytes);
        self
    }

    #[inline]
    fn zero(&mut self, blk: u64, at: u64, len: usize) -> &mut Self {
        self.batch.zero(addr(self.layout, blk, at), len);
        self
    }

    #[inline]
    fn flushed(self) {
        self.batch.flushed();
    }
}
