//! The memory that holds the shared runtime state: a mapping shared by every process
//! attached to a pool (a file in `/dev/shm`), or anonymous shared memory for a pool
//! only this process uses (tests, crash images). Everything in it is an atomic word
//! addressed by offset, never a pointer, so each process may map it anywhere.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::io::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Arc;

use crate::pmem::mappings::{self, Kind, Registered};

pub(crate) const PAGE: usize = 4096;

/// One mapping of runtime memory.
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    /// The shared file, kept open for the mapping's life (its locks live on it).
    file: Option<File>,
    /// The range in the engine's registry, so that the host program's calls cannot
    /// replace it ([`crate::pmem::mappings`]).
    registered: Registered,
}

// SAFETY: the region is only ever accessed through atomics (`words`, `u32s`), which are
// safe to use from any thread; the pointer itself is never handed out.
unsafe impl Send for Region {}
// SAFETY: as for Send: shared access goes through atomic types only.
unsafe impl Sync for Region {}

impl Region {
    /// Zeroed shared memory of `len` bytes that only this process (and children it
    /// forks) can see. Pages are allocated when first touched.
    pub fn anonymous(len: usize) -> io::Result<Region> {
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len.max(1),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        Self::from_mmap(p, len, None)
    }

    /// Map `len` bytes of `file` shared. The caller has sized the file (a shorter file
    /// would fault on access).
    pub fn map_file(file: File, len: usize) -> io::Result<Region> {
        // SAFETY: a fresh mapping of a file we hold open, at a free address; no
        // existing memory is affected.
        let p = unsafe {
            mappings::map_placed(
                len.max(1),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        Self::from_mmap(p, len, Some(file))
    }

    fn from_mmap(p: *mut libc::c_void, len: usize, file: Option<File>) -> io::Result<Region> {
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Region {
            ptr: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
            file,
            registered: mappings::register(p.cast(), len.max(1), Kind::Runtime),
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }

    /// Bytes of the backing file's allocated pages (`lynxfs info` and the recovery
    /// benchmark show them); `None` for a region in private memory or a file that
    /// cannot be looked at.
    pub fn allocated_bytes(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        Some(self.file()?.metadata().ok()?.blocks() * 512)
    }

    /// `n` 64-bit words at byte offset `off` (8-aligned, inside the region).
    pub fn words(&self, off: usize, n: usize) -> &[AtomicU64] {
        self.check(off, n * 8, 8);
        // SAFETY: the range is inside the mapping (checked), aligned for u64 (checked;
        // the mapping is page aligned), and the memory is only accessed atomically,
        // for as long as `self` (hence the mapping) lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off).cast(), n) }
    }

    /// `n` 32-bit words at byte offset `off` (4-aligned, inside the region).
    pub fn u32s(&self, off: usize, n: usize) -> &[AtomicU32] {
        self.check(off, n * 4, 4);
        // SAFETY: as in `words`, for 4-byte words.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off).cast(), n) }
    }

    /// Give the memory behind `[off, off+len)` to the file's file system ahead of
    /// use, so that no later access to it can fault for want of room (a fault that
    /// finds the directory full kills the process with SIGBUS). ENOSPC when there is
    /// no room. Nothing to do for anonymous memory, which no file system limits.
    pub fn reserve(&self, off: usize, len: usize) -> io::Result<()> {
        self.check(off, len, 1);
        match &self.file {
            Some(f) => allocate(f, off, len),
            None => Ok(()),
        }
    }

    /// Map the pages of `[off, off+len)` into this process now, writable, so that
    /// the first operations to use them do not each stop for a page fault (a fault
    /// cost 2.7 µs on the 2-core EPYC VM of docs/DESIGN-NOTES.md, populating 1.3 µs a
    /// page). Only for
    /// a file's region, whose memory is reserved already: in anonymous memory it
    /// would allocate pages that may never be used. Best effort: a kernel without
    /// `MADV_POPULATE_WRITE` (before 5.14) leaves the faults where they were.
    pub fn populate(&self, off: usize, len: usize) {
        self.check(off, len, 1);
        if self.file.is_none() {
            return;
        }
        let first = off / PAGE * PAGE;
        let end = (off + len)
            .next_multiple_of(PAGE)
            .min(self.len.next_multiple_of(PAGE));
        if first >= end {
            return;
        }
        // SAFETY: [first, end) lies inside the mapping (checked; the mapping is whole
        // pages) and is page aligned. Populating faults the pages in without changing
        // a byte of them, so no access, atomic or not, can tell.
        unsafe {
            mappings::advise_own(
                self.ptr.as_ptr().add(first),
                end - first,
                libc::MADV_POPULATE_WRITE,
            );
        }
    }

    /// Set `[off, off+len)` to zeros, giving whole pages back to the system (so a
    /// large part that is reset does not become resident by being written). In a
    /// file, those pages are no longer reserved: the caller reserves them again
    /// ([`Region::reserve`]) before they are used.
    pub fn discard(&self, off: usize, len: usize) {
        self.check(off, len, 8);
        let end = off + len;
        let (a, b) = (
            off.next_multiple_of(PAGE).min(end),
            (end / PAGE * PAGE).max(off),
        );
        let (a, b) = if a < b { (a, b) } else { (end, end) };
        // SAFETY: [a, b) lies inside the mapping (checked above) and is page aligned;
        // MADV_REMOVE frees the shared pages, which then read as zeros. No reference
        // into the range is held as plain memory: every access is atomic.
        let removed = a == b
            || unsafe { mappings::advise_own(self.ptr.as_ptr().add(a), b - a, libc::MADV_REMOVE) }
                == 0;
        let zero = |from: usize, to: usize| {
            for w in self.words(from, (to - from) / 8) {
                w.store(0, std::sync::atomic::Ordering::Relaxed);
            }
        };
        if removed {
            zero(off, a);
            zero(b, end);
        } else {
            zero(off, end);
        }
    }

    /// Set `[off, off+len)` to zeros, keeping its memory: a file's pages stay
    /// reserved (written, not given back, since giving them back would let another
    /// user's file take their room); anonymous memory is given back
    /// ([`Region::discard`]).
    pub fn clear(&self, off: usize, len: usize) {
        if self.file.is_none() {
            return self.discard(off, len);
        }
        self.check(off, len, 8);
        for w in self.words(off, len / 8) {
            w.store(0, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// For each page from the one holding `off` to the one holding `off+len-1`, whether
    /// it has memory behind it. A walk of a sparse part reads only those: reading a
    /// page of shared memory never touched would give it memory.
    pub fn resident(&self, off: usize, len: usize) -> Vec<bool> {
        self.check(off, len, 1);
        let first = off / PAGE * PAGE;
        let pages = (off + len).div_ceil(PAGE) - first / PAGE;
        let mut v = vec![0u8; pages];
        // SAFETY: [first, first + pages pages) lies in the mapping (checked, and the
        // mapping's length is whole pages); mincore writes one byte per page into `v`,
        // which has that many.
        let r = unsafe {
            libc::mincore(
                self.ptr.as_ptr().add(first).cast(),
                pages * PAGE,
                v.as_mut_ptr(),
            )
        };
        if r != 0 {
            // Unknown: treat every page as touched (correct, only slower).
            return vec![true; pages];
        }
        v.into_iter().map(|b| b & 1 != 0).collect()
    }

    fn check(&self, off: usize, bytes: usize, align: usize) {
        assert!(
            off.is_multiple_of(align) && off.checked_add(bytes).is_some_and(|e| e <= self.len),
            "runtime region access out of bounds: {off}+{bytes} of {}",
            self.len
        );
    }
}

/// `fallocate` `[off, off+len)` of `file` (mode 0: allocate, size unchanged).
fn allocate(file: &File, off: usize, len: usize) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let (off, len) = (
        libc::off_t::try_from(off).map_err(io::Error::other)?,
        libc::off_t::try_from(len).map_err(io::Error::other)?,
    );
    loop {
        // SAFETY: fallocate on a descriptor we hold open; no memory is passed.
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, off, len) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // Out of the registry first: once unmapped, the addresses may be reused.
        drop(std::mem::replace(&mut self.registered, Registered::NONE));
        // SAFETY: unmaps exactly the mapping made in `from_mmap`; every borrow of it
        // (slices from `words`/`u32s`) is tied to `&self`, so none outlives this.
        unsafe {
            mappings::unmap_own(self.ptr.as_ptr(), self.len.max(1));
        }
    }
}

/// A part of a region owned by one subsystem (the index, the allocators, ...).
#[derive(Clone)]
pub struct Span {
    region: Arc<Region>,
    off: usize,
    bytes: usize,
}

impl Span {
    pub fn new(region: Arc<Region>, bytes: Range<usize>) -> Span {
        assert!(bytes.end <= region.len() && bytes.start.is_multiple_of(64));
        Span {
            region,
            off: bytes.start,
            bytes: bytes.len(),
        }
    }

    /// A span over fresh anonymous memory of `bytes` bytes (unit tests, in-memory pools).
    pub fn anonymous(bytes: usize) -> io::Result<Span> {
        let region = Arc::new(Region::anonymous(bytes)?);
        Ok(Span::new(region, 0..bytes))
    }

    /// The indexes of the span's 64-bit words that lie on pages with memory behind
    /// them (see [`Region::resident`]).
    pub fn resident_words(&self) -> impl Iterator<Item = usize> + '_ {
        let pages = self.region.resident(self.off, self.bytes.max(1));
        let first = self.off / PAGE * PAGE;
        (0..self.bytes / 8).filter(move |&i| pages[(self.off + i * 8 - first) / PAGE])
    }

    /// The span as 64-bit words.
    pub fn words(&self) -> &[AtomicU64] {
        self.region.words(self.off, self.bytes / 8)
    }

    /// The span as 32-bit words.
    pub fn u32s(&self) -> &[AtomicU32] {
        self.region.u32s(self.off, self.bytes / 4)
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Set every word to zero (a repair starting the state afresh), its memory still
    /// reserved ([`Region::clear`]).
    pub fn zero(&self) {
        self.region.clear(self.off, self.bytes / 8 * 8);
    }

    /// The part `[start, start+len)` (bytes, 64-aligned) of this span.
    pub fn sub(&self, start: usize, len: usize) -> Span {
        assert!(start.is_multiple_of(64) && start + len <= self.bytes);
        Span {
            region: self.region.clone(),
            off: self.off + start,
            bytes: len,
        }
    }
}

/// Lays out a region: hands out consecutive ranges, each page aligned, so every
/// attacher computes the same offsets from the same pool layout.
#[derive(Default)]
pub struct Carve {
    next: usize,
}

impl Carve {
    /// The next `bytes`, starting on a page (so a part can be reset page by page).
    pub fn take(&mut self, bytes: usize) -> Range<usize> {
        let start = self.next.next_multiple_of(PAGE);
        self.next = start + bytes;
        start..self.next
    }

    /// Bytes laid out so far (the region's size once everything is taken).
    pub fn total(&self) -> usize {
        self.next.next_multiple_of(PAGE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn spans_share_the_region_and_stay_in_bounds() {
        let mut c = Carve::default();
        let a = c.take(24);
        let b = c.take(8);
        assert_eq!(a, 0..24);
        assert_eq!(b.start, 4096, "page aligned");
        let r = Arc::new(Region::anonymous(c.total()).unwrap());
        let sa = Span::new(r.clone(), a);
        let sb = Span::new(r.clone(), b);
        sa.words()[2].store(7, Ordering::Relaxed);
        sb.words()[0].store(9, Ordering::Relaxed);
        assert_eq!(r.words(16, 1)[0].load(Ordering::Relaxed), 7);
        assert_eq!(r.words(4096, 1)[0].load(Ordering::Relaxed), 9);
        assert_eq!(sa.words().len(), 3);
    }

    #[test]
    fn discard_zeroes_whole_pages_and_edges_and_nothing_else() {
        let r = Region::anonymous(4 * 4096).unwrap();
        for w in r.words(0, 4 * 512) {
            w.store(u64::MAX, Ordering::Relaxed);
        }
        // From the middle of page 0 to the middle of page 2.
        r.discard(2048, 2 * 4096);
        let w = r.words(0, 4 * 512);
        let zero = |i: usize| w[i].load(Ordering::Relaxed) == 0;
        assert!((0..256).all(|i| !zero(i)), "before the range");
        assert!((256..1280).all(zero), "the range");
        assert!((1280..2048).all(|i| !zero(i)), "after the range");
    }

    /// Minor page faults of the calling thread so far.
    fn thread_faults() -> i64 {
        let mut u = std::mem::MaybeUninit::<libc::rusage>::uninit();
        // SAFETY: getrusage fills the struct it is given; checked before reading.
        unsafe {
            assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, u.as_mut_ptr()), 0);
            u.assume_init().ru_minflt
        }
    }

    #[test]
    fn a_populated_file_region_takes_no_fault_on_first_write() {
        let pages = 64;
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let touch = |populate: bool| {
            let f = File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(dir.path().join("region"))
                .unwrap();
            f.set_len((pages * PAGE) as u64).unwrap();
            let r = Region::map_file(f, pages * PAGE).unwrap();
            r.reserve(0, pages * PAGE).unwrap();
            if populate {
                r.populate(0, pages * PAGE);
            }
            let before = thread_faults();
            for p in 0..pages {
                r.words(p * PAGE, 1)[0].store(1, Ordering::Relaxed);
            }
            thread_faults() - before
        };
        assert!(
            touch(false) >= pages as i64 / 2,
            "the check sees first-write faults"
        );
        assert_eq!(touch(true), 0);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn access_past_the_end_panics_instead_of_reading_stray_memory() {
        let r = Region::anonymous(4096).unwrap();
        r.words(4096, 1);
    }
}
