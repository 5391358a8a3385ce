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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;
    use crate::api::Fs;
    use crate::data::{file_extents, MapCache};
    use crate::pmem::{Event, RecordingBackend};
    use crate::{Cred, MkfsOptions};

    /// A write's bytes go through the store, so the crash checker's recording sees
    /// them: stored at the pool offset the store names for the file's block (the one
    /// FIEMAP reports), flushed, and fenced before the commit that publishes them.
    #[test]
    fn the_recording_sees_file_data_written_through_the_store() {
        let rec = RecordingBackend::new();
        let fs = Fs::in_memory(&MkfsOptions::new(16 << 20), rec.clone()).unwrap();
        let s = fs.session(Cred::root());
        let fd = s.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        let data: Vec<u8> = (0..BLOCK as usize).map(|i| (i % 251) as u8 + 1).collect();
        rec.take();
        assert_eq!(fs.pwrite(fd, &data, 0).unwrap(), data.len());
        let events = rec.take();

        let ino = s.stat("/f").unwrap().ino;
        let version = AtomicU64::new(0);
        let ext = file_extents(fs.pool(), ino, &MapCache::new(&version, 0, None)).unwrap();
        assert_eq!(ext.len(), 1, "one block written: {ext:?}");
        let blk = fs.pool().layout.block_of(ext[0].physical).unwrap();
        assert_eq!(fs.pool().data().physical(blk), ext[0].physical);

        let at = |want: &Event| events.iter().position(|e| e == want);
        let stored = at(&Event::Store {
            off: ext[0].physical,
            bytes: data.clone(),
        })
        .expect("the data's store recorded at the block's address");
        let flushed = events[stored..]
            .iter()
            .position(|e| matches!(e, Event::Flush { off, .. } if *off >= ext[0].physical && *off < ext[0].physical + BLOCK))
            .expect("its flush recorded");
        assert!(
            events[stored + flushed..].contains(&Event::Fence),
            "a fence after the data's flush: {events:?}"
        );
        let mut back = vec![0u8; data.len()];
        assert_eq!(fs.pread(fd, &mut back, 0).unwrap(), data.len());
        assert_eq!(back, data);
    }
}
