//! A hybrid pool's data device: positional reads and writes of its data area, and the
//! flush that makes them durable (a [`Durable<Disk>`] proof, made only by `fdatasync`).
//!
//! The I/O is buffered `pread`/`pwrite`: the kernel's page cache over the device is
//! the DRAM cache of device blocks (bounded by the kernel, reads served from it,
//! readahead on sequential reads, write-back until the flush). It is the one cache
//! every process attached to the pool shares, so a block one process writes is the
//! block another reads; a cache of each process's own would serve stale copies of
//! blocks freed and reused by another (docs/ARCHITECTURE.md, "The two seams").
//!
//! Measured with dd(1) on this machine's root file system (a virtual disk; a file of
//! 1 GiB, one run each, a loaded 2-core machine): 4 KiB writes each made durable
//! (`dsync`, the pattern of a hybrid write today) 2.4 ms each buffered, 2.1 ms with
//! O_DIRECT; 1 MiB writes then one flush, 503 MB/s buffered, 810 MB/s O_DIRECT;
//! 1 MiB reads from the disk, 706 MB/s buffered, 990 MB/s O_DIRECT, and 10.9 GB/s
//! buffered from the page cache. So buffered I/O stays (the flush dominates small
//! writes; cached reads, which O_DIRECT would lose, are the common case); O_DIRECT
//! for large aligned writes (1.6x here) remains a candidate: with FSMAC's
//! transactions (`data::txn`) writes no longer flush one by one, but O_DIRECT would
//! bypass the page cache every attached process shares (not tried). A large read
//! asks the kernel to read ahead of it ([`READ_AHEAD_MIN`]). io_uring was not tried:
//! a write is one `pwrite` into the page cache, a commit one `fdatasync`.
//!
//! Every failure is an error for the caller (EIO, or ENOSPC from a full file system
//! under a device file), never a panic; a test can make the device fail
//! ([`Device::fail`]) as a dying disk would.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

use super::{Disk, Durable};

/// Bytes of a data block on the device.
const BLOCK: u64 = 4096;

/// Reads of at least this many bytes (256 KiB) start the read of twice as many after
/// them ([`Device::read`]): measured on this machine's disk (a 256 MiB file read cold
/// in 1 MiB `pread`s, twice each): 82-88 MiB/s plain, 166-201 with
/// `POSIX_FADV_SEQUENTIAL`, 354-529 with `POSIX_FADV_WILLNEED` of the next 2 MiB.
const READ_AHEAD_MIN: usize = 256 << 10;

/// What a test makes the device do ([`Device::fail`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Fault {
    /// Work.
    None = 0,
    /// Every read, write and flush fails with EIO (a dead or removed disk).
    All = 1,
    /// Writes and flushes fail with EIO, reads work (a disk gone read-only).
    Writes = 2,
    /// Writes fail with ENOSPC (the file system under a device file is full).
    Full = 3,
}

/// An open data device: its file and where its data area is.
pub struct Device {
    file: File,
    path: PathBuf,
    data_off: u64,
    data_len: u64,
    fault: AtomicU8,
}

fn eio() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EIO)
}

impl Device {
    /// A device whose data area is `data_len` bytes at `data_off` of `file`.
    pub fn new(file: File, path: &Path, data_off: u64, data_len: u64) -> Device {
        Device {
            file,
            path: path.to_path_buf(),
            data_off,
            data_len,
            fault: AtomicU8::new(Fault::None as u8),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Make the device fail from now on (tests of a disk that dies mid-run).
    pub fn fail(&self, fault: Fault) {
        self.fault.store(fault as u8, Ordering::Relaxed);
    }

    fn fault(&self) -> u8 {
        self.fault.load(Ordering::Relaxed)
    }

    /// The device offset of byte `at` of block `blk`, if `len` bytes from there stay in
    /// the data area (a block number from a damaged map must not reach other bytes).
    #[inline]
    fn offset(&self, blk: u64, at: u64, len: usize) -> std::io::Result<u64> {
        let rel = blk
            .checked_mul(BLOCK)
            .and_then(|b| b.checked_add(at))
            .filter(|r| {
                r.checked_add(len as u64)
                    .is_some_and(|e| e <= self.data_len)
            })
            .ok_or_else(eio)?;
        Ok(self.data_off + rel)
    }

    /// The device offset of data block `blk` (FIEMAP's physical address).
    pub fn physical(&self, blk: u64) -> u64 {
        self.data_off + blk * BLOCK
    }

    /// Read `buf.len()` bytes from byte `at` of block `blk` on: all of them, or EIO
    /// (a device shorter than its header claims reads short).
    pub fn read(&self, blk: u64, at: u64, buf: &mut [u8]) -> std::io::Result<()> {
        if self.fault() == Fault::All as u8 {
            return Err(eio());
        }
        let off = self.offset(blk, at, buf.len())?;
        if buf.len() >= READ_AHEAD_MIN {
            self.read_ahead(off + buf.len() as u64, 2 * buf.len() as u64);
        }
        self.file
            .read_exact_at(buf, off)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => eio(),
                _ => e,
            })
    }

    /// Ask the kernel to start reading `len` bytes from device offset `off` (clipped
    /// to the data area) into its cache, without waiting: a large read is most often
    /// one of a sequential run, whose next pieces then come from memory while this
    /// one is copied. A hint: its failure changes nothing.
    fn read_ahead(&self, off: u64, len: u64) {
        let end = (off + len).min(self.data_off + self.data_len);
        if off >= end {
            return;
        }
        // SAFETY: posix_fadvise only reads its arguments; the descriptor is ours and
        // open for the call.
        unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                off as libc::off_t,
                (end - off) as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            );
        }
    }

    /// Write `bytes` from byte `at` of block `blk` on (into the page cache: durable at
    /// the next [`Self::sync`]).
    pub fn write(&self, blk: u64, at: u64, bytes: &[u8]) -> std::io::Result<()> {
        match self.fault() {
            f if f == Fault::All as u8 || f == Fault::Writes as u8 => return Err(eio()),
            f if f == Fault::Full as u8 => {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
            }
            _ => {}
        }
        let off = self.offset(blk, at, bytes.len())?;
        self.file.write_all_at(bytes, off)
    }

    /// Make every write so far durable: `fdatasync` (which also flushes the disk's
    /// volatile cache).
    pub fn sync(&self) -> std::io::Result<Durable<Disk>> {
        if self.fault() != Fault::None as u8 && self.fault() != Fault::Full as u8 {
            return Err(eio());
        }
        self.file.sync_data()?;
        Ok(Durable(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(len: u64) -> (tempfile::TempDir, Device) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dev");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.set_len(8192 + len).unwrap();
        (dir, Device::new(f, &path, 8192, len))
    }

    #[test]
    fn bytes_written_read_back_and_stay_in_the_data_area() {
        let (_d, dev) = device(4 * BLOCK);
        dev.write(1, 10, b"hello").unwrap();
        let mut b = [0u8; 5];
        dev.read(1, 10, &mut b).unwrap();
        assert_eq!(&b, b"hello");
        let _ = dev.sync().unwrap();
        assert!(dev.read(4, 0, &mut b).is_err(), "past the data area");
        assert!(
            dev.write(3, BLOCK - 2, b"abc").is_err(),
            "runs past the end"
        );
        assert!(dev.read(u64::MAX / 2, 0, &mut b).is_err(), "overflow");
    }

    #[test]
    fn a_failing_device_says_eio_and_a_full_one_enospc() {
        let (_d, dev) = device(4 * BLOCK);
        let mut b = [0u8; 5];
        dev.fail(Fault::Full);
        assert_eq!(
            dev.write(0, 0, b"x").unwrap_err().raw_os_error(),
            Some(libc::ENOSPC)
        );
        dev.fail(Fault::Writes);
        dev.read(0, 0, &mut b).unwrap();
        assert_eq!(dev.sync().unwrap_err().raw_os_error(), Some(libc::EIO));
        dev.fail(Fault::All);
        assert_eq!(
            dev.read(0, 0, &mut b).unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
    }

    #[test]
    fn a_device_shorter_than_claimed_reads_eio() {
        let (_d, dev) = device(4 * BLOCK);
        dev.file().set_len(8192 + BLOCK).unwrap();
        let mut b = [0u8; 16];
        let e = dev.read(2, 0, &mut b).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
    }
}
