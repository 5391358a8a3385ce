//! Persistence: the one door through which every byte reaches the pool.
//!
//! Writes are grouped in a [`Batch`]: each store is followed at once by a flush of its
//! cache lines, and the batch ends with a fence that yields a [`Durable`] proof. The
//! commit store of an operation ([`Pm::commit_u64`]) consumes such a proof, so code that
//! would commit before its prepared state is durable does not compile; a batch dropped
//! without its fence is caught in debug builds, and forgetting to use one is a
//! `must_use` error (the crate denies `unused_must_use`).
//!
//! A proof names the medium it covers ([`Medium`]): a fence makes persistent-memory
//! stores durable, not writes queued to a disk, so a commit that needs its prepared
//! state in persistent memory takes a `Durable<Pmem>` and a proof of any other medium
//! does not type-check there.

mod backend;
pub mod device;
pub mod flush;
pub mod keys;
mod map;
pub mod mappings;
mod through;

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub use backend::{Backend, Event, FenceHook, MsyncBackend, PmemBackend, RecordingBackend, Tagged};
pub use map::{dax_supported, flushes_suffice, on_tmpfs, MapMode, Mapping};

/// A medium whose writes a [`Durable`] proof can cover. Sealed: each medium's proof is
/// made only by the operation that makes its writes durable (for [`Pmem`], a fence),
/// so no code outside the persistence layer can make one up:
///
/// ```compile_fail
/// enum Tape {}
/// impl lynxfs::pmem::Medium for Tape {}
/// ```
pub trait Medium: sealed::Sealed {}

/// Persistent memory: stores flushed from the caches and ordered by a fence.
#[derive(Debug)]
pub enum Pmem {}
impl Medium for Pmem {}

/// A data device (a disk, or a file on one): writes made durable by `fdatasync`
/// ([`device::Device::sync`]).
#[derive(Debug)]
pub enum Disk {}
impl Medium for Disk {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Pmem {}
    impl Sealed for super::Disk {}
}

/// Proof that the writes of some set, on medium `M`, are durable: for persistent memory,
/// that a fence completed after their flushes.
#[must_use = "a Durable proof exists to be handed to the commit store that depends on it"]
#[derive(Debug)]
pub struct Durable<M: Medium = Pmem>(PhantomData<M>);

impl<M: Medium> Durable<M> {
    /// Two proofs of one medium taken in sequence are one proof.
    pub fn and(self, _other: Durable<M>) -> Durable<M> {
        self
    }
}

/// The mapped pool plus its durability backend.
pub struct Pm<B: Backend> {
    map: Mapping,
    backend: B,
    len: u64,
    through: through::Through,
}

impl<B: Backend> Pm<B> {
    pub fn new(map: Mapping, backend: B) -> Self {
        let len = map.len() as u64;
        Pm {
            map,
            backend,
            len,
            through: through::Through::off(),
        }
    }

    /// The pool file `fd` (open for as long as `self` lives) may take long writes to
    /// pages this process has not written yet, once [`Pm::start_write_through`] is
    /// called (see [`through`]).
    pub fn write_through(&mut self, fd: std::os::fd::RawFd) {
        if matches!(self.map.mode(), MapMode::Shared | MapMode::SharedSync) {
            self.through = through::Through::ready(fd, self.len);
        }
    }

    /// Write long runs of fresh pages with `pwrite` from now on: for a process that
    /// lives briefly and writes new data once (a preloaded `tar` or `cp`), not one
    /// that keeps rewriting the same pages (its faults come once; each page's first
    /// `pwrite` would be extra).
    pub fn start_write_through(&self) {
        self.through.start();
    }

    /// Map `[off, off+len)` into this process now, writable, so that its first
    /// stores take no page fault each (`MADV_POPULATE_WRITE`; bytes unchanged). Only
    /// for a shared mapping on a backend whose flushes are cache-line flushes: on the
    /// msync backend a write fault dirties the page for the disk, and private or
    /// anonymous memory would only gain pages of its own. Best effort (a kernel
    /// before 5.14 leaves the faults where they were).
    pub fn populate(&self, off: u64, len: u64) {
        let shared = matches!(self.map.mode(), MapMode::Shared | MapMode::SharedSync);
        if !shared || !self.backend.streams() {
            return;
        }
        let first = off / 4096 * 4096;
        let end = off.saturating_add(len).next_multiple_of(4096).min(self.len);
        if first >= end {
            return;
        }
        let p = self.ptr(first, (end - first) as usize);
        // SAFETY: `[p, p + end - first)` lies inside the mapping (`ptr` checked it) and
        // is page aligned (the mapping is); populating maps the pages without changing
        // a byte of them, so no access, atomic or not, can tell.
        unsafe {
            mappings::advise_own(p, (end - first) as usize, libc::MADV_POPULATE_WRITE);
        }
    }

    /// Bytes this process wrote to the pool file with `pwrite` (see [`through`]).
    pub fn bytes_written_through_file(&self) -> u64 {
        self.through.bytes()
    }

    /// Write through the mapping only from now on (the file's descriptor is about to
    /// be replaced).
    pub fn stop_write_through(&self) {
        self.through.stop();
    }

    /// A pool in fresh anonymous memory holding a copy of `img`: the state a machine
    /// would find after a power cut. Building it is not a write to a live pool.
    pub fn from_image(img: &[u8], backend: B) -> crate::Result<Self> {
        Ok(Self::new(Mapping::anonymous_copy(img)?, backend))
    }

    pub fn len(&self) -> u64 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn map_mode(&self) -> MapMode {
        self.map.mode()
    }
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The address of `[off, off+len)`. Callers validate offsets read from the pool
    /// before using them; this check is the last line against a logic error.
    #[inline]
    fn ptr(&self, off: u64, len: usize) -> *mut u8 {
        let end = off.checked_add(len as u64);
        assert!(
            matches!(end, Some(e) if e <= self.len),
            "pool access out of bounds: {off}+{len} > {}",
            self.len
        );
        // SAFETY: `off + len <= self.len` (checked above), so the result stays within
        // the mapping, which is `self.len` bytes long.
        unsafe { self.map.base().add(off as usize) }
    }

    /// Start loading the cache line at `off` into the cache, for a walk that knows its
    /// next reads ahead of time. Only a hint: an offset outside the pool is ignored.
    #[inline]
    pub fn prefetch(&self, off: u64) {
        if off >= self.len {
            return;
        }
        let p = self.ptr(off, 1);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch reads nothing architecturally and never faults; `p` lies
        // inside the mapping anyway.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }

    /// Copy `buf.len()` bytes at `off` out of the pool.
    #[inline]
    pub fn read(&self, off: u64, buf: &mut [u8]) {
        let p = self.ptr(off, buf.len());
        // SAFETY: `p` is valid for `buf.len()` bytes (bounds-checked), `buf` is a
        // distinct Rust buffer, and byte copies of plain memory have no invalid values.
        // Words that other threads change concurrently are read with `load_u64`; bytes
        // a writer may be storing meanwhile (file data beside the inplace mode's
        // in-place writes) are plain bytes, as argued at `read_racing`.
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) }
    }

    /// [`Pm::read`] by a reader that holds no lock while a writer, in this process or
    /// another, may store into the same bytes (a sequence-lock reader: the caller
    /// validates afterwards and throws the bytes away if a change raced with the copy;
    /// docs/CONSISTENCY.md, "Reads without a lock").
    #[inline]
    pub fn read_racing(&self, off: u64, buf: &mut [u8]) {
        let p = self.ptr(off, buf.len());
        // SAFETY: a sequence-lock read, done with a plain copy, not word-wise relaxed
        // atomic loads (which the memory model blesses, but which are not vectorised:
        // measured with callgrind, 4,717 instructions per 4 KiB `Fs::pread` against
        // 1,014 with this copy; RFC 3301's byte-wise atomic memcpy would be the
        // sanctioned form once it exists). Why it is sound:
        // - The copy stays in the mapping: `p` is bounds-checked for `buf.len()` bytes
        //   whatever the offset (the caller computed it from words a writer may be
        //   changing), and `buf` is a distinct Rust buffer.
        // - The bytes are `u8`: every bit pattern is a valid value, so a torn copy is
        //   wrong data, never an invalid value.
        // - The race: in the Rust (C++20) model a non-atomic read racing a store is a
        //   data race, undefined behaviour. The stores here are made through the pool
        //   mapping, often by another process, so the compiler sees none of them: no
        //   reference to the mapping exists, the pointer comes from `mmap`, and the copy
        //   is a `memcpy` of a runtime length, which it cannot elide, split into
        //   re-reads or reason about. LLVM, which compiles it, gives such a racing
        //   load a defined result (LangRef, "Memory Model for Concurrent Operations":
        //   it reads `undef`, not undefined behaviour), and the hardware gives each
        //   byte its old or new value (x86: no load tears below 8 aligned bytes).
        // - A torn value is never used: the caller's validation (`lock::unchanged`)
        //   starts with an acquire fence, which neither the compiler nor the CPU moves
        //   this copy's loads past (x86 keeps loads in order), and on failure the
        //   caller reads again under the lock, overwriting `buf` without having looked
        //   at a byte of it; nothing is branched on or indexed by the copied bytes.
        // - What a validated copy may still hold is what a reader under the shared
        //   hold sees too (the inplace mode's in-place stores beside readers: each
        //   byte old or new, the mode's promise).
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) }
    }

    /// Copy the 8-byte words from `off` (8-aligned) into `out`, as [`Pm::read`] does
    /// bytes: for a run of words no thread stores into meanwhile (a directory's log
    /// slots while it loads), where one copy beats a bounds-checked load per word.
    pub fn read_words(&self, off: u64, out: &mut [u64]) {
        assert_eq!(off % 8, 0, "unaligned word read at {off}");
        let p = self.ptr(off, std::mem::size_of_val(out));
        // SAFETY: `p` is valid for the whole of `out` (bounds-checked) and 8-aligned
        // (the mapping is page-aligned and `off` a multiple of 8); `out` is a distinct
        // Rust buffer, and every bit pattern is a valid u64. The caller's words have no
        // concurrent writer (the precondition above); were one to race anyway, the copy
        // is a plain memcpy of the mapping, as argued at `read_racing`.
        unsafe { std::ptr::copy_nonoverlapping(p.cast::<u64>(), out.as_mut_ptr(), out.len()) }
    }

    pub fn read_vec(&self, off: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read(off, &mut v);
        v
    }

    /// Atomically load the 8-byte word at `off` (8-aligned).
    #[inline]
    pub fn load_u64(&self, off: u64) -> u64 {
        assert_eq!(off % 8, 0, "unaligned 8-byte load at {off}");
        let p = self.ptr(off, 8);
        // SAFETY: `p` is in bounds and 8-aligned (the mapping is page-aligned and
        // `off` is a multiple of 8), so it is a valid `AtomicU64` for the mapping's life.
        unsafe { (*(p as *const AtomicU64)).load(Ordering::Acquire) }
    }

    /// Atomically load the 4-byte word at `off` (4-aligned).
    #[inline]
    pub fn load_u32(&self, off: u64) -> u32 {
        assert_eq!(off % 4, 0, "unaligned 4-byte load at {off}");
        let p = self.ptr(off, 4);
        // SAFETY: in bounds and 4-aligned, as for `load_u64`.
        unsafe { (*(p as *const AtomicU32)).load(Ordering::Acquire) }
    }

    /// Compare-and-swap the 8-byte word at `off`, without flushing: for words whose
    /// value only means something during this mount (the cachelet `nv_pointer`, stamped
    /// with the mount epoch), so durability is never needed.
    pub fn cas_volatile(&self, off: u64, old: u64, new: u64) -> Result<u64, u64> {
        assert_eq!(off % 8, 0, "unaligned 8-byte CAS at {off}");
        let p = self.ptr(off, 8);
        // SAFETY: in bounds and 8-aligned, so a valid `AtomicU64` (see `load_u64`).
        let r = unsafe {
            (*(p as *const AtomicU64)).compare_exchange(
                old,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
        };
        if r.is_ok() {
            self.backend.stored(off, &new.to_le_bytes());
        }
        r
    }

    /// Start a group of stores that will end with one fence.
    pub fn batch(&self) -> Batch<'_, B> {
        Batch {
            pm: self,
            open: false,
        }
    }

    /// A fence on its own: makes this thread's earlier flushes durable.
    pub fn fence(&self) -> Durable<Pmem> {
        self.backend.fence();
        Durable(PhantomData)
    }

    /// An operation's commit point: one 8-byte atomic store, flushed and fenced, made
    /// only once everything it publishes is durable in persistent memory (`_prepared`).
    pub fn commit_u64(&self, off: u64, val: u64, _prepared: Durable<Pmem>) -> Durable<Pmem> {
        let mut b = self.batch();
        b.write_u64(off, val);
        b.persist()
    }

    /// Copy the whole pool (tests and the crash checker).
    pub fn snapshot(&self) -> Vec<u8> {
        self.read_vec(0, self.len as usize)
    }
}

/// Stores that end with one fence. Each store is flushed as it is made.
#[must_use = "a batch must end with persist() or be handed on with flushed()"]
pub struct Batch<'a, B: Backend> {
    pm: &'a Pm<B>,
    open: bool,
}

impl<B: Backend> Batch<'_, B> {
    /// Store `bytes` at `off` and flush them. A long copy on a backend that streams
    /// writes its whole cache lines with non-temporal stores (no flush needed: the
    /// batch's fence orders them) and only its unaligned ends with cached stores.
    #[inline]
    pub fn write(&mut self, off: u64, bytes: &[u8]) -> &mut Self {
        let through = self.pm.through.fresh(off, bytes.len());
        self.write_via(off, bytes, through)
    }

    /// [`Batch::write`] through the pool file `through`, or the mapping.
    #[inline]
    fn write_via(&mut self, off: u64, bytes: &[u8], through: Option<i32>) -> &mut Self {
        let p = self.pm.ptr(off, bytes.len());
        // Before the flushes: a recording backend logs the store, then its flushes.
        self.pm.backend.stored(off, bytes);
        if let Some(fd) = through {
            let done = through::pwrite_all(fd, off, bytes);
            self.pm.through.wrote(done);
            self.pm.backend.written_through_file(p, off, done);
            if done < bytes.len() {
                // SAFETY: `done < bytes.len()`, so `p + done` stays in the checked range.
                let rest = unsafe { p.add(done) };
                self.cached(rest, off + done as u64, &bytes[done..]);
            }
        } else if bytes.len() >= flush::STREAM_MIN && self.pm.backend.streams() {
            let (head, lines) = flush::line_split(p, bytes.len());
            let (a, rest) = bytes.split_at(head);
            let (mid, tail) = rest.split_at(lines);
            self.cached(p, off, a);
            // SAFETY: `p + head` is line-aligned (`line_split`), `mid` is whole lines
            // and lies inside `[p, p + bytes.len())`, which is bounds-checked; the pool
            // mapping is never behind a Rust reference.
            unsafe { flush::stream_lines(p.add(head), mid) };
            // SAFETY: `head + lines <= bytes.len()`, so still inside the checked range.
            let t = unsafe { p.add(head + lines) };
            self.cached(t, off + (head + lines) as u64, tail);
        } else {
            self.cached(p, off, bytes);
        }
        self.open = true;
        self
    }

    /// Cached stores of `bytes` at `p` (pool offset `off`), then a flush of their lines.
    #[inline]
    fn cached(&self, p: *mut u8, off: u64, bytes: &[u8]) {
        // SAFETY: callers pass a `p` valid for `bytes.len()` bytes (bounds-checked by
        // `Pm::ptr`), and `bytes` is a separate Rust buffer. Concurrent readers of these
        // bytes only exist for regions the protocols in docs/CONSISTENCY.md make
        // invisible until committed.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
        self.pm.backend.flush(p, off, bytes.len());
    }

    /// Store `len` zero bytes at `off` and flush them.
    pub fn zero(&mut self, off: u64, len: usize) -> &mut Self {
        const Z: [u8; 4096] = [0; 4096];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(Z.len());
            // Zeros go through the mapping: they make room in a metadata block or
            // ahead of a file's data, whose writes follow at once (a `pwrite` here
            // would be one system call more, not one fault less).
            self.pm.through.mapped(off + done as u64, n);
            self.write_via(off + done as u64, &Z[..n], None);
            done += n;
        }
        self
    }

    /// Atomically store the 8-byte word at `off` (8-aligned) and flush it.
    #[inline]
    pub fn write_u64(&mut self, off: u64, val: u64) -> &mut Self {
        assert_eq!(off % 8, 0, "unaligned 8-byte store at {off}");
        let p = self.pm.ptr(off, 8);
        // SAFETY: in bounds and 8-aligned, so a valid `AtomicU64` (see `load_u64`).
        unsafe { (*(p as *const AtomicU64)).store(val, Ordering::Release) };
        self.pm.backend.stored(off, &val.to_le_bytes());
        self.pm.backend.flush(p, off, 8);
        self.open = true;
        self
    }

    /// Compare-and-swap the 8-byte word at `off` (8-aligned) from `old` to `new` and,
    /// if it swapped, flush it; `Err(current)` if the word was not `old`.
    #[inline]
    pub fn cas_u64(&mut self, off: u64, old: u64, new: u64) -> Result<(), u64> {
        assert_eq!(off % 8, 0, "unaligned 8-byte CAS at {off}");
        let p = self.pm.ptr(off, 8);
        // SAFETY: in bounds and 8-aligned, so a valid `AtomicU64` (see `load_u64`).
        let r = unsafe {
            (*(p as *const AtomicU64)).compare_exchange(
                old,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
        };
        r.map(|_| {
            self.pm.backend.stored(off, &new.to_le_bytes());
            self.pm.backend.flush(p, off, 8);
            self.open = true;
        })
    }

    /// Fence: everything stored through this batch is now durable.
    pub fn persist(mut self) -> Durable<Pmem> {
        self.open = false;
        self.pm.fence()
    }

    /// End the batch without a fence; a later fence of this thread covers it.
    pub fn flushed(mut self) {
        self.open = false;
    }
}

impl<B: Backend> Drop for Batch<'_, B> {
    fn drop(&mut self) {
        debug_assert!(
            !self.open || std::thread::panicking(),
            "a pmem batch was dropped without persist() or flushed()"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Streamed copies (long ones, split into a cached head, whole lines and a cached
    /// tail) land exactly where cached ones do, at every alignment.
    #[test]
    fn streamed_writes_store_every_byte_at_any_alignment() {
        let pm = Pm::new(Mapping::anonymous(1 << 16).unwrap(), PmemBackend::default());
        assert!(pm.backend().streams() || !cfg!(target_arch = "x86_64"));
        let src: Vec<u8> = (0..9000u32).map(|i| (i % 253) as u8 + 1).collect();
        for (off, len) in [
            (0, 4096),
            (3, 4096),
            (64, 256),
            (65, 300),
            (100, 8191),
            (17, 255),
        ] {
            let mut b = pm.batch();
            b.zero(0, 1 << 14);
            b.write(off, &src[..len]);
            let _ = b.persist();
            let got = pm.read_vec(0, 1 << 14);
            let mut want = vec![0u8; 1 << 14];
            want[off as usize..off as usize + len].copy_from_slice(&src[..len]);
            assert!(got == want, "write of {len} bytes at {off}");
        }
    }

    /// A batch's compare-and-swap stores and flushes only when the word held `old`.
    #[test]
    fn batch_cas_stores_and_flushes_only_on_a_match() {
        let rec = RecordingBackend::new();
        let pm = Pm::new(Mapping::anonymous(1 << 12).unwrap(), rec.clone());
        let mut b = pm.batch();
        b.write_u64(64, 7);
        let _ = b.persist();
        rec.take();
        let mut b = pm.batch();
        assert_eq!(b.cas_u64(64, 8, 9), Err(7));
        assert!(rec.take().is_empty(), "a failed swap logged something");
        assert_eq!(b.cas_u64(64, 7, 9), Ok(()));
        let _ = b.persist();
        assert_eq!(pm.load_u64(64), 9);
        assert_eq!(
            rec.take(),
            vec![
                Event::Store {
                    off: 64,
                    bytes: 9u64.to_le_bytes().to_vec()
                },
                Event::Flush { off: 64, len: 8 },
                Event::Fence
            ]
        );
    }
}
