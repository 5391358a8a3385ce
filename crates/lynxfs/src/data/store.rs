//! The storage seam: where file data lives. The data path ([`super::rw`]) reaches the
//! bytes of file data blocks only through a [`DataStore`], named by block number (an
//! extent's `pblk`), never by an address in the pool mapping; metadata (inodes, block
//! maps, directory logs, attribute blocks, symlink targets) stays in persistent memory
//! and is reached through [`crate::pmem`] directly.
//!
//! An all-PM pool keeps its data in persistent memory ([`PmData`]: the pool's data
//! blocks, written through a [`Batch`], so the crash checker's recording backend sees
//! each data store and flush). A hybrid pool keeps it on its data device ([`DiskData`]:
//! block `b` at the device's data area, written with `pwrite` and made durable by
//! `fdatasync`, [`crate::pmem::device`]). [`Pool::data`] picks one ([`Data`], an enum,
//! so the all-PM path pays a branch, not a dynamic call). Blocks come from the
//! allocator of file-data blocks ([`crate::alloc::Allocators::data_blocks`]).

use crate::error::{Error, Result};
use crate::format::{Layout, BLOCK};
use crate::pmem::device::Device;
use crate::pmem::{Backend, Batch, Pm};
use crate::pool::Pool;

/// Where a pool's file data blocks are read and written.
pub trait DataStore {
    /// A group of writes made durable together.
    type Writer<'w>: DataWriter
    where
        Self: 'w;

    /// Copy bytes out from byte `at` of block `blk` on: `buf` may run on into the next
    /// blocks of one extent (consecutive blocks). The caller holds the file's lock.
    /// EIO when the medium fails (never in persistent memory).
    fn read(&self, blk: u64, at: u64, buf: &mut [u8]) -> Result<()>;

    /// [`Self::read`] for a reader that holds no lock: a writer may change the bytes
    /// while they are copied, so the caller validates afterwards (a sequence lock) and
    /// throws the bytes away if anything changed; the copy never leaves the store.
    fn read_racing(&self, blk: u64, at: u64, buf: &mut [u8]) -> Result<()>;

    /// Start a group of writes.
    fn writer(&self) -> Self::Writer<'_>;

    /// Where block `blk`'s bytes are on the medium: in the pool file, or on the data
    /// device (FIEMAP's physical address).
    fn physical(&self, blk: u64) -> u64;
}

/// Writes of file data blocks, ended together.
#[must_use = "a data writer must end with flushed()"]
pub trait DataWriter {
    /// Store `bytes` from byte `at` of block `blk` on (running on into the next blocks
    /// of one extent).
    fn write(&mut self, blk: u64, at: u64, bytes: &[u8]) -> &mut Self;

    /// Store `len` zero bytes from byte `at` of block `blk` on.
    fn zero(&mut self, blk: u64, at: u64, len: usize) -> &mut Self;

    /// End the group. In persistent memory its writes are on their way: the next fence
    /// of this thread (the one before the metadata commit that publishes them) makes
    /// them durable. On a data device of a pool with transactions they are in the page
    /// cache, and the commit of the transaction the caller joined (`data::txn`)
    /// flushes them before the inode's original is dropped; on one without, they are
    /// durable when this returns (`fdatasync`, a `Durable<Disk>`), before any commit
    /// that publishes them. An error (EIO, ENOSPC) means some may not have reached the
    /// medium: the caller publishes none.
    fn flushed(self) -> Result<()>;
}

/// File data in the pool's own data blocks.
pub struct PmData<'a, B: Backend> {
    pm: &'a Pm<B>,
    layout: &'a Layout,
}

/// File data on a hybrid pool's data device; the pool's backend hears of each write
/// and flush (the crash checker's recording backend logs them).
pub struct DiskData<'a, B: Backend> {
    dev: &'a Device,
    backend: &'a B,
    /// The pool commits in transactions (`data::txn`): a group of writes ends in the
    /// page cache, and the transaction's commit flushes it.
    txn: bool,
}

/// The store of a pool's file data: in the pool, or on its data device.
pub enum Data<'a, B: Backend> {
    Pm(PmData<'a, B>),
    Disk(DiskData<'a, B>),
}

impl<B: Backend> Pool<B> {
    /// The store of this pool's file data.
    #[inline]
    pub fn data(&self) -> Data<'_, B> {
        match self.device() {
            None => Data::Pm(self.pm_data()),
            Some(dev) => Data::Disk(DiskData {
                dev,
                backend: self.pm.backend(),
                txn: self.txn().is_some(),
            }),
        }
    }

    /// The pool's own data blocks as a store: where symlink targets are, in every pool
    /// (metadata, so a hybrid pool keeps them in persistent memory too).
    #[inline]
    pub fn pm_data(&self) -> PmData<'_, B> {
        PmData {
            pm: &self.pm,
            layout: &self.layout,
        }
    }
}

/// The engine's error for a failed device call: ENOSPC stays ENOSPC, anything else is
/// EIO (the caller's errno; the device's own words go nowhere a caller sees).
fn device_error(e: std::io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::ENOSPC) => Error::Errno(libc::ENOSPC),
        _ => Error::Errno(libc::EIO),
    }
}

/// The pool offset of byte `at` of data block `blk`.
#[inline]
fn addr(layout: &Layout, blk: u64, at: u64) -> u64 {
    debug_assert!(at < BLOCK, "byte {at} of a block");
    layout.block_addr(blk) + at
}

impl<B: Backend> DataStore for PmData<'_, B> {
    type Writer<'w>
        = PmDataWriter<'w, B>
    where
        Self: 'w;

    #[inline]
    fn read(&self, blk: u64, at: u64, buf: &mut [u8]) -> Result<()> {
        self.pm.read(addr(self.layout, blk, at), buf);
        Ok(())
    }

    #[inline]
    fn read_racing(&self, blk: u64, at: u64, buf: &mut [u8]) -> Result<()> {
        self.pm.read_racing(addr(self.layout, blk, at), buf);
        Ok(())
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
    fn flushed(self) -> Result<()> {
        self.batch.flushed();
        Ok(())
    }
}

impl<B: Backend> DataStore for DiskData<'_, B> {
    type Writer<'w>
        = DiskWriter<'w, B>
    where
        Self: 'w;

    fn read(&self, blk: u64, at: u64, buf: &mut [u8]) -> Result<()> {
        self.dev.read(blk, at, buf).map_err(device_error)
    }

    /// A copy through the kernel (`pread`): a racing writer's bytes may be torn, which
    /// the caller's validation throws away, as in persistent memory.
    fn read_racing(&self, blk: u64, at: u64, buf: &mut [u8]) -> Result<()> {
        self.read(blk, at, buf)
    }

    fn writer(&self) -> DiskWriter<'_, B> {
        DiskWriter {
            dev: self.dev,
            backend: self.backend,
            failed: None,
            txn: self.txn,
            run: Run::default(),
        }
    }

    fn physical(&self, blk: u64) -> u64 {
        self.dev.physical(blk)
    }
}

/// Data writes to the device: pieces that follow each other on the device gathered
/// into one `pwrite` (a 1 MiB write is 256 block pieces), the group's `fdatasync` at
/// the end (pools without transactions). The first failure is kept (later writes of
/// the group are skipped) and returned by [`DataWriter::flushed`].
pub struct DiskWriter<'a, B: Backend> {
    dev: &'a Device,
    backend: &'a B,
    failed: Option<std::io::Error>,
    txn: bool,
    run: Run,
}

/// Bytes gathered for one `pwrite` at byte `at` of block `blk`.
#[derive(Default)]
struct Run {
    blk: u64,
    at: u64,
    bytes: Vec<u8>,
}

/// The most bytes gathered before they are written (8 MiB).
const RUN_MAX: usize = 8 << 20;

impl<B: Backend> DiskWriter<'_, B> {
    /// Gather `bytes` (zeros when `None`) for byte `at` of block `blk` on: appended
    /// to the run when they follow it on the device, else the run is written first.
    fn gather(&mut self, blk: u64, at: u64, len: usize, bytes: Option<&[u8]>) {
        if self.failed.is_some() {
            return;
        }
        let here = blk * BLOCK + at;
        let r = &self.run;
        if !r.bytes.is_empty() && r.blk * BLOCK + r.at + r.bytes.len() as u64 != here {
            self.write_run();
        }
        if self.run.bytes.is_empty() {
            self.run.blk = blk;
            self.run.at = at;
        }
        match bytes {
            Some(b) => self.run.bytes.extend_from_slice(b),
            None => self.run.bytes.resize(self.run.bytes.len() + len, 0),
        }
        if self.run.bytes.len() >= RUN_MAX {
            self.write_run();
        }
    }

    /// Write the gathered run (one `pwrite`).
    fn write_run(&mut self) {
        if self.run.bytes.is_empty() || self.failed.is_some() {
            return;
        }
        let Run { blk, at, bytes } = &self.run;
        self.failed = self.dev.write(*blk, *at, bytes).err();
        if self.failed.is_none() {
            self.backend
                .device_written(self.dev.physical(*blk) + at, bytes);
        }
        self.run.bytes.clear();
    }
}

impl<B: Backend> DataWriter for DiskWriter<'_, B> {
    fn write(&mut self, blk: u64, at: u64, bytes: &[u8]) -> &mut Self {
        self.gather(blk, at, bytes.len(), Some(bytes));
        self
    }

    fn zero(&mut self, blk: u64, at: u64, len: usize) -> &mut Self {
        self.gather(blk, at, len, None);
        self
    }

    fn flushed(mut self) -> Result<()> {
        self.write_run();
        if let Some(e) = self.failed {
            return Err(device_error(e));
        }
        if self.txn {
            // The inode's original is in the undo area: the commit of its transaction
            // flushes these writes before the original is dropped.
            return Ok(());
        }
        let done = self.dev.sync().map(drop).map_err(device_error);
        if done.is_ok() {
            self.backend.device_synced();
        }
        done
    }
}

/// Writes of either store.
pub enum DataWriters<'a, B: Backend> {
    Pm(PmDataWriter<'a, B>),
    Disk(DiskWriter<'a, B>),
}

impl<B: Backend> DataStore for Data<'_, B> {
    type Writer<'w>
        = DataWriters<'w, B>
    where
        Self: 'w;

    #[inline]
    fn read(&self, blk: u64, at: u64, buf: &mut [u8]) -> Result<()> {
        match self {
            Data::Pm(s) => s.read(blk, at, buf),
            Data::Disk(s) => s.read(blk, at, buf),
        }
    }

    #[inline]
    fn read_racing(&self, blk: u64, at: u64, buf: &mut [u8]) -> Result<()> {
        match self {
            Data::Pm(s) => s.read_racing(blk, at, buf),
            Data::Disk(s) => s.read_racing(blk, at, buf),
        }
    }

    #[inline]
    fn writer(&self) -> DataWriters<'_, B> {
        match self {
            Data::Pm(s) => DataWriters::Pm(s.writer()),
            Data::Disk(s) => DataWriters::Disk(s.writer()),
        }
    }

    #[inline]
    fn physical(&self, blk: u64) -> u64 {
        match self {
            Data::Pm(s) => s.physical(blk),
            Data::Disk(s) => s.physical(blk),
        }
    }
}

impl<B: Backend> DataWriter for DataWriters<'_, B> {
    #[inline]
    fn write(&mut self, blk: u64, at: u64, bytes: &[u8]) -> &mut Self {
        match self {
            DataWriters::Pm(w) => drop(w.write(blk, at, bytes)),
            DataWriters::Disk(w) => drop(w.write(blk, at, bytes)),
        }
        self
    }

    #[inline]
    fn zero(&mut self, blk: u64, at: u64, len: usize) -> &mut Self {
        match self {
            DataWriters::Pm(w) => drop(w.zero(blk, at, len)),
            DataWriters::Disk(w) => drop(w.zero(blk, at, len)),
        }
        self
    }

    #[inline]
    fn flushed(self) -> Result<()> {
        match self {
            DataWriters::Pm(w) => w.flushed(),
            DataWriters::Disk(w) => w.flushed(),
        }
    }
}
