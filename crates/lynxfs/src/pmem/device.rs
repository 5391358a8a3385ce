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
//! A device that is a file grows a [`GROW_STEP`] at a time ahead of its writes, so
//! that a commit's `fdatasync` is, once the step has settled, the data and the disk's
//! cache flush, and no longer makes the file system journal the device file's block
//! allocations (issue 43). In a pool with transactions ([`Growth::Reserve`]) a write
//! into a step this process has not seen ready reserves it (`fallocate`: space
//! guaranteed before the write is accepted, no bytes written), and a commit, after its
//! turn, fills what writes left of the steps it reserved ([`Device::settle`]); in one
//! without ([`Growth::Fill`]) the step is zero-filled and flushed before the write.
//! Freed blocks drop their cached pages ([`Device::forget`]). The commit
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

/// A device file is grown this many bytes (16 MiB) at a time: a write's first touch of
/// a step reserves it ([`Growth::Reserve`]: `fallocate`, which allocates without
/// writing) or fills it ([`Growth::Fill`]: zeros over its holes, then one
/// `fdatasync`), and a commit fills the parts of a reserved step that no write covered
/// ([`Device::settle`]). ext4 journals the allocation of a sparse file's blocks, and the
/// conversion of `fallocate`'s unwritten extents, at the next `fdatasync`, which made
/// every commit cost a journal commit as well as the data's flush; a block once
/// written is an overwrite, whose `fdatasync` is the data and one cache flush. (This
/// kernel's `FALLOC_FL_WRITE_ZEROES`, which would allocate written extents without the
/// writes, says EOPNOTSUPP on this machine's virtio disk, which offers no
/// write-zeroes.)
pub const GROW_STEP: u64 = 16 << 20;

/// The most zeros one [`Device::settle`] writes (one step's worth): the commit that
/// runs it pays their copy into the page cache, so a backlog of partly written steps
/// is filled over several commits, not at once.
const FILL_BUDGET: u64 = GROW_STEP;

/// A settle fills a step this many bytes (1 MiB) at a time, each piece with the
/// pool's writers held off ([`Device::settle`]'s `alone`): a writer waits at most one
/// piece's copy.
const FILL_PIECE: u64 = 1 << 20;

/// The byte of the device file whose OFD lock (advisory, far past any data) makes one
/// process at a time fill a step's holes on a write ([`Growth::Fill`]): a write into a
/// step waits until the step is written, so no zeros ever land on bytes a write put
/// there.
const GROW_LOCK: i64 = 1 << 62;

/// How a device file's steps are made ready before writes land in them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Growth {
    /// Fill a step's holes with zeros and flush them before the first write there
    /// (pools without transactions: nothing could fill them later with the writers
    /// held off).
    Fill,
    /// Reserve a step (`fallocate`) at the first write there; commits fill what the
    /// writes left unwritten ([`Device::settle`], with the pool's writers held off).
    Reserve,
}

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
    /// What this process knows of the file's steps (None: a block device, which has
    /// no holes).
    steps: Option<Steps>,
    growth: Growth,
    /// The growth lock's part inside this process: an OFD lock is one per open file
    /// description, which this process's threads share.
    growing: std::sync::Mutex<()>,
}

/// Per [`GROW_STEP`] of a device file, bits of what this process knows (bitmaps of
/// atomics: no lock, so nothing a fork could copy held).
struct Steps {
    /// Writes may land in the step: reserved or written.
    ready: Box<[AtomicU64]>,
    /// Reserved by this process and not yet seen without holes ([`Device::settle`]).
    unsettled: Box<[AtomicU64]>,
    /// An unsettled step a settle has already seen with holes: the next one fills it.
    seen: Box<[AtomicU64]>,
}

impl Steps {
    fn new(steps: u64) -> Steps {
        let bits = || (0..steps.div_ceil(64)).map(|_| AtomicU64::new(0)).collect();
        Steps {
            ready: bits(),
            unsettled: bits(),
            seen: bits(),
        }
    }
}

/// Bit `step` of a bitmap: its word and mask.
fn bit(bits: &[AtomicU64], step: u64) -> (&AtomicU64, u64) {
    (&bits[(step / 64) as usize], 1u64 << (step % 64))
}

fn is_set(bits: &[AtomicU64], step: u64) -> bool {
    let (w, m) = bit(bits, step);
    w.load(Ordering::Acquire) & m != 0
}

fn set(bits: &[AtomicU64], step: u64) {
    let (w, m) = bit(bits, step);
    w.fetch_or(m, Ordering::Release);
}

fn clear(bits: &[AtomicU64], step: u64) {
    let (w, m) = bit(bits, step);
    w.fetch_and(!m, Ordering::Release);
}

/// The steps whose bit is set in `bits`.
fn set_steps(bits: &[AtomicU64]) -> Vec<u64> {
    let mut out = Vec::new();
    for (i, w) in bits.iter().enumerate() {
        let mut v = w.load(Ordering::Acquire);
        while v != 0 {
            out.push(i as u64 * 64 + u64::from(v.trailing_zeros()));
            v &= v - 1;
        }
    }
    out
}

fn eio() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EIO)
}

impl Device {
    /// A device whose data area is `data_len` bytes at `data_off` of `file`, whose
    /// steps grow as `growth` says.
    pub fn new(
        file: File,
        path: &Path,
        (data_off, data_len): (u64, u64),
        growth: Growth,
    ) -> Device {
        let steps = file
            .metadata()
            .is_ok_and(|m| m.is_file())
            .then(|| Steps::new((data_off + data_len).div_ceil(GROW_STEP)));
        Device {
            file,
            path: path.to_path_buf(),
            data_off,
            data_len,
            fault: AtomicU8::new(Fault::None as u8),
            steps,
            growth,
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

    /// Data blocks `[blk, blk + n)` were freed: drop their pages from the kernel's
    /// cache, as a file system drops a deleted file's. Kept, they would hold memory
    /// no reader wants, and writes into other blocks would take fresh pages instead
    /// of these: on this machine's VM a page the guest has not used lately makes the
    /// copy into it about 10x dearer (64 MiB of 1 MiB `pwrite`s into a new file on
    /// the root disk: 16-29 ms while pages freed just before last, 180-390 ms after;
    /// the device, whose cache only grew, paid that on every first write). Dirty
    /// pages are not dropped (their write-back starts; a block freed and already
    /// written again by its next owner keeps its bytes). A hint: its failure changes
    /// nothing.
    pub fn forget(&self, blk: u64, n: u64) {
        let Ok(off) = self.offset(blk, 0, 0) else {
            return;
        };
        let len = n
            .saturating_mul(BLOCK)
            .min(self.data_off + self.data_len - off);
        // SAFETY: posix_fadvise only reads its arguments; the descriptor is ours and
        // open for the call.
        unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                off as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
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
        self.ensure_room(off, bytes.len() as u64)?;
        self.file.write_all_at(bytes, off)
    }

    /// Before a write of `len` bytes at device offset `off`: every [`GROW_STEP`] it
    /// touches is ready on the file system under the device file, reserved or
    /// written (nothing to do for a block device, or a step this process has seen
    /// ready).
    fn ensure_room(&self, off: u64, len: u64) -> std::io::Result<()> {
        let Some(steps) = &self.steps else {
            return Ok(());
        };
        for step in off / GROW_STEP..=(off + len.max(1) - 1) / GROW_STEP {
            if is_set(&steps.ready, step) {
                continue;
            }
            match self.growth {
                Growth::Reserve => self.reserve(steps, step, (off, off + len.max(1)))?,
                Growth::Fill => {
                    self.grow(step)?;
                    set(&steps.ready, step);
                }
            }
        }
        Ok(())
    }

    /// The data area's part of step `step`: `[start, end)`.
    fn step_range(&self, step: u64) -> (u64, u64) {
        let start = (step * GROW_STEP).max(self.data_off);
        let end = ((step + 1) * GROW_STEP).min(self.data_off + self.data_len);
        (start, end)
    }

    /// Reserve step `step` for a write of device bytes `write`: `fallocate` its data
    /// area's part (it allocates the holes as unwritten extents, which read as zeros,
    /// and leaves allocated blocks alone), so no write-back there can find the file
    /// system full. A file system without `fallocate` gets the step filled instead;
    /// one too full for the whole step gets the write's own bytes reserved (the step
    /// stays unready: the next write there tries again).
    fn reserve(&self, steps: &Steps, step: u64, write: (u64, u64)) -> std::io::Result<()> {
        let (start, end) = self.step_range(step);
        match self.fallocate(start, end) {
            Ok(()) => {
                set(&steps.unsettled, step);
                set(&steps.ready, step);
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                self.grow(step)?;
                set(&steps.ready, step);
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                self.fallocate(write.0.max(start), write.1.min(end))
            }
            Err(e) => Err(e),
        }
    }

    /// Allocate `[start, end)` of the device file (keeping its size: a device cut
    /// short stays short).
    fn fallocate(&self, start: u64, end: u64) -> std::io::Result<()> {
        if start >= end {
            return Ok(());
        }
        loop {
            // SAFETY: fallocate on a descriptor we own; it reads only its arguments.
            let r = unsafe {
                libc::fallocate(
                    self.file.as_raw_fd(),
                    libc::FALLOC_FL_KEEP_SIZE,
                    start as libc::off_t,
                    (end - start) as libc::off_t,
                )
            };
            if r == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// Whether this process reserved steps a [`Self::settle`] has yet to look at.
    pub fn unsettled(&self) -> bool {
        self.steps
            .as_ref()
            .is_some_and(|s| s.unsettled.iter().any(|w| w.load(Ordering::Relaxed) != 0))
    }

    /// After a commit: settle the steps this process reserved. A step with no hole
    /// left (every byte data, written or in the page cache) is done. A step with
    /// holes the first time is left for the next commit (its writer may still be
    /// filling it: a sequential writer's steps are wholly data by its fsync, and fill
    /// nothing); the next time, its holes are written with zeros, [`FILL_PIECE`] at a
    /// time, each piece while `alone` holds every writer of the pool off (None: a
    /// writer is in flight, try at a later commit), and their write-back started, so
    /// that later commits there are overwrites. Zeros land only on holes, which no
    /// write has reached (a write's bytes are in the page cache until written back, and
    /// written extents after), and read as zeros before and after. At most
    /// [`FILL_BUDGET`] bytes of zeros per call; `filled` hears of each piece written
    /// (device offset, length).
    pub fn settle<G>(
        &self,
        alone: &dyn Fn() -> Option<G>,
        filled: &mut dyn FnMut(u64, usize),
    ) -> std::io::Result<()> {
        let Some(steps) = &self.steps else {
            return Ok(());
        };
        let size = self.file.metadata()?.len();
        let mut budget = FILL_BUDGET;
        for step in set_steps(&steps.unsettled) {
            let (start, end) = self.step_range(step);
            let end = end.min(size);
            if self.first_hole(start, end)?.is_none() {
                clear(&steps.unsettled, step);
                continue;
            }
            if !is_set(&steps.seen, step) {
                set(&steps.seen, step);
                continue;
            }
            if budget == 0 {
                break;
            }
            match self.fill_step((start, end), &mut budget, alone, filled)? {
                true => {
                    self.start_write_back(start, end);
                    clear(&steps.unsettled, step);
                }
                false => break,
            }
        }
        Ok(())
    }

    /// Fill the holes of `[start, end)` piece by piece, each while `alone` holds the
    /// writers off; true when done, false when a writer was in flight or `budget`
    /// ran out (what was filled stays filled).
    fn fill_step<G>(
        &self,
        (start, end): (u64, u64),
        budget: &mut u64,
        alone: &dyn Fn() -> Option<G>,
        filled: &mut dyn FnMut(u64, usize),
    ) -> std::io::Result<bool> {
        let mut at = start;
        while at < end {
            let stop = (at + FILL_PIECE).min(end);
            let Some(_alone) = alone() else {
                return Ok(false);
            };
            let wrote = self.zero_holes(at, stop, filled)?;
            *budget = budget.saturating_sub(wrote);
            at = stop;
            if *budget == 0 && at < end {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Ask the kernel to start writing `[start, end)` back, without waiting: the next
    /// commit's flush then finds the zeros of a fill mostly on the disk. A hint: its
    /// failure changes nothing.
    fn start_write_back(&self, start: u64, end: u64) {
        // SAFETY: sync_file_range on a descriptor we own; it reads only its arguments.
        unsafe {
            libc::sync_file_range(
                self.file.as_raw_fd(),
                start as libc::off64_t,
                (end - start) as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }

    /// Fill the holes of the data area's part of step `step` with zeros and make
    /// that durable, under the device's growth lock (another process may be filling
    /// the same step; a hole is only ever a range no write has reached).
    fn grow(&self, step: u64) -> std::io::Result<()> {
        let (start, end) = self.step_range(step);
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

    /// The seek of `whence` (SEEK_HOLE or SEEK_DATA) from `at`: None past the end of
    /// the file (ENXIO).
    fn seek(&self, at: u64, whence: libc::c_int) -> std::io::Result<Option<u64>> {
        // SAFETY: lseek on a descriptor we own; it only moves the file offset, which
        // no positional read or write of ours uses.
        let r = unsafe { libc::lseek(self.file.as_raw_fd(), at as libc::off_t, whence) };
        match r {
            r if r >= 0 => Ok(Some(r as u64)),
            _ => match std::io::Error::last_os_error() {
                e if e.raw_os_error() == Some(libc::ENXIO) => Ok(None),
                e => Err(e),
            },
        }
    }

    /// The first hole of `[at, end)` and where it stops (at `end` at most), if any.
    /// A hole is a range of the file with no blocks, or of unwritten extents with
    /// nothing in the page cache over them (ext4's SEEK_HOLE; cached pages, dirty or
    /// read, count as data).
    fn first_hole(&self, at: u64, end: u64) -> std::io::Result<Option<(u64, u64)>> {
        if at >= end {
            return Ok(None);
        }
        let Some(hole) = self.seek(at, libc::SEEK_HOLE)?.filter(|&h| h < end) else {
            return Ok(None);
        };
        let stop = self
            .seek(hole, libc::SEEK_DATA)?
            .map_or(end, |d| d.min(end));
        Ok(Some((hole, stop)))
    }

    /// Write zeros over every hole of `[start, end)`; the bytes written. `filled` hears
    /// of each hole filled.
    fn zero_holes(
        &self,
        start: u64,
        end: u64,
        filled: &mut dyn FnMut(u64, usize),
    ) -> std::io::Result<u64> {
        let zeros = vec![0u8; FILL_PIECE as usize];
        let (mut at, mut wrote) = (start, 0);
        while let Some((hole, stop)) = self.first_hole(at, end)? {
            let mut w = hole;
            while w < stop {
                let n = (stop - w).min(zeros.len() as u64) as usize;
                self.file.write_all_at(&zeros[..n], w)?;
                w += n as u64;
            }
            filled(hole, (stop - hole) as usize);
            wrote += stop - hole;
            at = stop;
        }
        Ok(wrote)
    }

    /// Write zeros over every hole of `[start, end)`, then `fdatasync` if any was
    /// found, so that the file system's journal commits the blocks' allocation now,
    /// once for the whole step, and not in the next commit's flush.
    fn fill_holes(&self, start: u64, end: u64) -> std::io::Result<()> {
        if self.zero_holes(start, end, &mut |_, _| {})? > 0 {
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
        device_growing(len, Growth::Fill)
    }

    /// A device file (on the disk: ext4 here) with `len` bytes of data area after 8 KiB.
    fn device_growing(len: u64, growth: Growth) -> (tempfile::TempDir, Device) {
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
        (dir, Device::new(f, &path, (8192, len), growth))
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

    /// Block 0 starts with the test's "new", block 5 with "old", block 7 with zeros.
    fn assert_new_old_and_zeros(dev: &Device) {
        let mut b = [0u8; 3];
        dev.read(0, 0, &mut b).unwrap();
        assert_eq!(&b, b"new");
        dev.read(5, 0, &mut b).unwrap();
        assert_eq!(&b, b"old");
        dev.read(7, 0, &mut b).unwrap();
        assert_eq!(b, [0; 3]);
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
        assert_new_old_and_zeros(&dev);
        // A write across the step's end makes the next one written too.
        dev.write(GROW_STEP / BLOCK - 3, 0, &[7u8; 2 * BLOCK as usize])
            .unwrap();
        assert!(hole_after(&dev, GROW_STEP) >= 2 * GROW_STEP);
    }

    /// Bytes of the device file's blocks (allocated: written or reserved).
    fn allocated(dev: &Device) -> u64 {
        use std::os::unix::fs::MetadataExt;
        dev.file().metadata().unwrap().blocks() * 512
    }

    /// A settle of `dev` with the writers held off (`alone`: whether it may); the
    /// pieces it filled.
    fn settle(dev: &Device, alone: bool) -> Vec<(u64, usize)> {
        let mut filled = Vec::new();
        dev.settle(&|| alone.then_some(()), &mut |o, n| filled.push((o, n)))
            .unwrap();
        filled
    }

    #[test]
    fn a_write_reserves_its_step_and_the_second_settle_fills_what_it_left() {
        let (_d, dev) = device_growing(2 * GROW_STEP, Growth::Reserve);
        dev.file().write_all_at(b"old", 8192 + 5 * BLOCK).unwrap();
        dev.write(0, 0, b"new").unwrap();
        assert!(allocated(&dev) >= GROW_STEP - 8192, "the step is reserved");
        assert!(allocated(&dev) < GROW_STEP + BLOCK, "and no more");
        assert_eq!(
            hole_after(&dev, GROW_STEP),
            GROW_STEP,
            "the next step untouched"
        );
        assert!(dev.unsettled());
        assert!(
            settle(&dev, true).is_empty(),
            "the first settle waits for the writer"
        );
        assert!(
            settle(&dev, false).is_empty(),
            "a writer in flight: nothing filled"
        );
        assert!(dev.unsettled());
        let filled = settle(&dev, true);
        assert!(!dev.unsettled());
        let bytes: u64 = filled.iter().map(|&(_, n)| n as u64).sum();
        assert!(
            bytes >= GROW_STEP - 8192 - 2 * BLOCK,
            "{bytes} bytes filled"
        );
        for (o, n) in filled {
            let (s, e) = (o, o + n as u64);
            assert!(
                s >= 8192 && e <= GROW_STEP,
                "{s}..{e} outside the step's data"
            );
            assert!(e <= 8192 || s >= 8192 + BLOCK, "{s}..{e} over the write");
            assert!(
                e <= 8192 + 5 * BLOCK || s >= 8192 + 6 * BLOCK,
                "{s}..{e} over old"
            );
        }
        assert!(
            hole_after(&dev, 8192) >= GROW_STEP,
            "the step has no hole left"
        );
        assert_new_old_and_zeros(&dev);
    }

    #[test]
    fn a_step_wholly_written_settles_with_no_fill() {
        let (_d, dev) = device_growing(GROW_STEP - 8192, Growth::Reserve);
        let piece = vec![9u8; 1 << 20];
        let mut at = 0;
        while at < GROW_STEP - 8192 {
            let n = (GROW_STEP - 8192 - at).min(piece.len() as u64) as usize;
            dev.write(at / BLOCK, 0, &piece[..n]).unwrap();
            at += n as u64;
        }
        assert!(settle(&dev, true).is_empty());
        assert!(!dev.unsettled());
    }

    #[test]
    fn a_settle_never_lengthens_a_device_cut_short() {
        let (_d, dev) = device_growing(4 * BLOCK, Growth::Reserve);
        dev.write(0, 0, b"x").unwrap();
        dev.file().set_len(8192 + BLOCK).unwrap();
        settle(&dev, true);
        settle(&dev, true);
        assert_eq!(dev.file().metadata().unwrap().len(), 8192 + BLOCK);
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
