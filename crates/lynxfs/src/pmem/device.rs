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
//! A device that is a file is made written on its file system a [`GROW_STEP`] at a
//! time before its first write there ([`Device::write`]), so that a commit's
//! `fdatasync` writes the data and flushes the disk's cache, and no longer makes the
//! file system journal the device file's block allocations (issue 43). The commit
//! stays one `fdatasync` of the whole device rather than `sync_file_range` of the
//! committing transaction's ranges and a flush: a transaction is pool-wide, so its
//! ranges are every file's writes since the last commit (recorded by every attached
//! process), and what `fdatasync` writes beyond them is only what the next
//! transaction has written meanwhile, which its own commit would write anyway.
//!
//! Every failure is an error for the caller (EIO, or ENOSPC from a full file system
//! under a device file), never a panic; a test can make the device fail
//! ([`Device::fail`]) as a dying disk would.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use super::{Disk, Durable};

/// Bytes of a data block on the device.
const BLOCK: u64 = 4096;

/// Reads of at least this many bytes (256 KiB) start the read of twice as many after
/// them ([`Device::read`]): measured on this machine's disk (a 256 MiB file read cold
/// in 1 MiB `pread`s, twice each): 82-88 MiB/s plain, 166-201 with
/// `POSIX_FADV_SEQUENTIAL`, 354-529 with `POSIX_FADV_WILLNEED` of the next 2 MiB.
const READ_AHEAD_MIN: usize = 256 << 10;

/// A device file's data area is made written (its holes filled with zeros, then one
/// `fdatasync`) this many bytes (16 MiB) at a time, before the first write there.
/// ext4 journals the allocation of a sparse file's blocks (and the conversion of
/// `fallocate`'s unwritten extents) at the next `fdatasync`, which made every commit
/// cost a journal commit as well as the data's flush; a block once written is an
/// overwrite, whose `fdatasync` is the data and one cache flush. (This kernel's
/// `FALLOC_FL_WRITE_ZEROES`, which would allocate written extents without the writes,
/// says EOPNOTSUPP on this machine's virtio disk, which offers no write-zeroes.)
pub const GROW_STEP: u64 = 16 << 20;

/// The byte of the device file whose OFD lock (advisory, far past any data) makes one
/// process at a time fill a step's holes: a write into a step waits until the step
/// is written, so no zeros ever land on bytes a write put there.
const GROW_LOCK: i64 = 1 << 62;

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
    /// One bit per [`GROW_STEP`] of the file: this process knows the step holds no
    /// hole (None: a block device, which has none).
    written: Option<Box<[AtomicU64]>>,
    /// The growth lock's part inside this process: an OFD lock is one per open file
    /// description, which this process's threads share.
    growing: std::sync::Mutex<()>,
}

fn eio() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EIO)
}

impl Device {
    /// A device whose data area is `data_len` bytes at `data_off` of `file`.
    pub fn new(file: File, path: &Path, data_off: u64, data_len: u64) -> Device {
        let steps = (data_off + data_len).div_ceil(GROW_STEP);
        let written = file
            .metadata()
            .is_ok_and(|m| m.is_file())
            .then(|| (0..steps.div_ceil(64)).map(|_| AtomicU64::new(0)).collect());
        Device {
            file,
            path: path.to_path_buf(),
            data_off,
            data_len,
            fault: AtomicU8::new(Fault::None as u8),
            written,
            growing: std::sync::Mutex::new(()),
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
        self.ensure_written(off, bytes.len() as u64)?;
        self.file.write_all_at(bytes, off)
    }

    /// Before a write of `len` bytes at device offset `off`: every [`GROW_STEP`] it
    /// touches is written on the file system under the device file (nothing to do
    /// for a block device, or a step this process has seen written).
    fn ensure_written(&self, off: u64, len: u64) -> std::io::Result<()> {
        let Some(bits) = &self.written else {
            return Ok(());
        };
        for step in off / GROW_STEP..=(off + len.max(1) - 1) / GROW_STEP {
            let (word, bit) = (&bits[(step / 64) as usize], 1u64 << (step % 64));
            if word.load(Ordering::Acquire) & bit == 0 {
                self.grow(step)?;
                word.fetch_or(bit, Ordering::Release);
            }
        }
        Ok(())
    }

    /// Fill the holes of the data area's part of step `step` with zeros and make
    /// that durable, under the device's growth lock (another process may be filling
    /// the same step; a hole is only ever a range no write has reached).
    fn grow(&self, step: u64) -> std::io::Result<()> {
        let start = (step * GROW_STEP).max(self.data_off);
        let end = ((step + 1) * GROW_STEP).min(self.data_off + self.data_len);
        let _alone = self.growing.lock().unwrap_or_else(|p| p.into_inner());
        self.grow_lock(libc::F_WRLCK)?;
        let filled = self.fill_holes(start, end);
        let _ = self.grow_lock(libc::F_UNLCK);
        filled
    }

    /// Take (waiting) or release the growth lock's OFD lock (`kind`: F_WRLCK or
    /// F_UNLCK). Here, not `runtime`'s helper: persistence sits below the runtime.
    fn grow_lock(&self, kind: libc::c_int) -> std::io::Result<()> {
        // SAFETY: a plain C struct; all-zero is a valid value that we then fill in.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = kind as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = GROW_LOCK;
        fl.l_len = 1;
        loop {
            // SAFETY: fcntl on a descriptor we own, with a pointer to a live flock.
            let r = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_OFD_SETLKW, &fl) };
            if r == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// Write zeros over every hole of `[start, end)`, then `fdatasync` if any was
    /// found, so that the file system's journal commits the blocks' allocation now,
    /// once for the whole step, and not in the next commit's flush.
    fn fill_holes(&self, start: u64, end: u64) -> std::io::Result<()> {
        let fd = self.file.as_raw_fd();
        let seek = |at: u64, whence: libc::c_int| -> std::io::Result<Option<u64>> {
            // SAFETY: lseek on a descriptor we own; it only moves the file offset,
            // which no positional read or write of ours uses.
            let r = unsafe { libc::lseek(fd, at as libc::off_t, whence) };
            match r {
                r if r >= 0 => Ok(Some(r as u64)),
                _ => match std::io::Error::last_os_error() {
                    e if e.raw_os_error() == Some(libc::ENXIO) => Ok(None),
                    e => Err(e),
                },
            }
        };
        let zeros = vec![0u8; 1 << 20];
        let mut at = start;
        let mut filled = false;
        while at < end {
            let Some(hole) = seek(at, libc::SEEK_HOLE)?.filter(|&h| h < end) else {
                break;
            };
            let stop = seek(hole, libc::SEEK_DATA)?.map_or(end, |d| d.min(end));
            let mut w = hole;
            while w < stop {
                let n = (stop - w).min(zeros.len() as u64) as usize;
                self.file.write_all_at(&zeros[..n], w)?;
                w += n as u64;
            }
            filled = true;
            at = stop;
        }
        if filled {
            self.file.sync_data()?;
        }
        Ok(())
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

    /// Where the first hole at or after `at` of the device's file is.
    fn hole_after(dev: &Device, at: u64) -> u64 {
        // SAFETY: lseek on the test's own descriptor; positional I/O ignores the offset.
        let r = unsafe { libc::lseek(dev.file().as_raw_fd(), at as libc::off_t, libc::SEEK_HOLE) };
        assert!(r >= 0, "{}", std::io::Error::last_os_error());
        r as u64
    }

    #[test]
    fn a_write_finds_its_step_written_and_keeps_what_was_there() {
        let (_d, dev) = device(2 * GROW_STEP);
        // Bytes already in the step (a device written before steps existed) stay.
        dev.file().write_all_at(b"old", 8192 + 5 * BLOCK).unwrap();
        dev.write(0, 0, b"new").unwrap();
        assert!(
            hole_after(&dev, 8192) >= GROW_STEP,
            "the first step still has a hole"
        );
        assert_eq!(
            hole_after(&dev, GROW_STEP),
            GROW_STEP,
            "the next step untouched"
        );
        let mut b = [0u8; 3];
        dev.read(0, 0, &mut b).unwrap();
        assert_eq!(&b, b"new");
        dev.read(5, 0, &mut b).unwrap();
        assert_eq!(&b, b"old");
        dev.read(7, 0, &mut b).unwrap();
        assert_eq!(b, [0; 3]);
        // A write across the step's end makes the next one written too.
        dev.write(GROW_STEP / BLOCK - 3, 0, &[7u8; 2 * BLOCK as usize])
            .unwrap();
        assert!(hole_after(&dev, GROW_STEP) >= 2 * GROW_STEP);
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
