//! The three durability backends. Each decides what "flush" and "fence" mean; the
//! stores themselves are the same plain CPU stores for all of them.

use std::cell::RefCell;
use std::sync::Arc;

use parking_lot::Mutex;

use super::flush::{self, FlushInstr};

/// What makes stores durable. Implementations are zero-sized or nearly so, and `Pm`
/// is generic over them, so the production path compiles to bare stores, flushes and
/// fences.
pub trait Backend: Send + Sync + 'static {
    /// Called after bytes were stored at `addr` (pool offset `off`).
    #[inline]
    fn stored(&self, _off: u64, _bytes: &[u8]) {}
    /// Start writing back `[addr, addr+len)` (pool offset `off`).
    fn flush(&self, addr: *const u8, off: u64, len: usize);
    /// Called after `len` bytes at `addr` (pool offset `off`) were written with
    /// `pwrite` to the pool file (see `pmem::through`) instead of stored: what they
    /// still need before the next fence. By default a flush, as a store's.
    #[inline]
    fn written_through_file(&self, addr: *const u8, off: u64, len: usize) {
        self.flush(addr, off, len);
    }
    /// Wait until every earlier flush of this thread is durable.
    fn fence(&self);
    /// Whether long copies may use non-temporal stores, which the fence makes durable
    /// with no flush (true only where `fence` is an `sfence`).
    #[inline]
    fn streams(&self) -> bool {
        false
    }
    /// A short name for `lynxfs info`.
    fn name(&self) -> String;
    /// Called after bytes were written to a hybrid pool's data device at byte `off`
    /// (not yet durable: the device's page cache holds them).
    #[inline]
    fn device_written(&self, _off: u64, _bytes: &[u8]) {}
    /// [`Self::device_written`] of `len` zero bytes.
    #[inline]
    fn device_zeroed(&self, off: u64, len: usize) {
        let _ = (off, len);
    }
    /// Called after the data device was flushed (`fdatasync`): every write before is
    /// durable.
    #[inline]
    fn device_synced(&self) {}
}

/// Real persistent memory, or tmpfs standing in for it: cache-line flushes + `sfence`.
#[derive(Clone, Copy, Debug)]
pub struct PmemBackend {
    instr: FlushInstr,
}

impl Default for PmemBackend {
    fn default() -> Self {
        PmemBackend {
            instr: flush::detected(),
        }
    }
}

impl Backend for PmemBackend {
    #[inline]
    fn flush(&self, addr: *const u8, _off: u64, len: usize) {
        flush::flush_range(self.instr, addr, len);
    }
    #[inline]
    fn fence(&self) {
        flush::sfence();
    }
    #[inline]
    fn streams(&self) -> bool {
        cfg!(target_arch = "x86_64")
    }
    /// Nothing to flush: on a DAX file the kernel's copy into persistent memory is
    /// the flushing one (the pmem driver's `copy_from_iter_flushcache`), and on tmpfs
    /// the page cache is the medium, which a flush would only fault into this
    /// process (a cache-line flush needs the page mapped), what the write avoided.
    #[inline]
    fn written_through_file(&self, _addr: *const u8, _off: u64, _len: usize) {}
    fn name(&self) -> String {
        format!("pmem ({} + sfence)", self.instr.name())
    }
}

thread_local! {
    /// Page ranges this thread flushed since its last fence, for `MsyncBackend`.
    static MSYNC_PENDING: RefCell<Vec<(usize, usize)>> = const { RefCell::new(Vec::new()) };
}

/// A pool file on an ordinary (disk) file system: a fence `msync`s the pages this
/// thread flushed since its previous fence.
#[derive(Clone, Copy, Debug, Default)]
pub struct MsyncBackend;

const PAGE: usize = 4096;

impl Backend for MsyncBackend {
    fn flush(&self, addr: *const u8, _off: u64, len: usize) {
        if len == 0 {
            return;
        }
        let start = addr as usize & !(PAGE - 1);
        let end = (addr as usize + len).div_ceil(PAGE) * PAGE;
        MSYNC_PENDING.with(|p| {
            let mut p = p.borrow_mut();
            match p.last_mut() {
                Some(last) if last.0 <= start && start <= last.1 => last.1 = last.1.max(end),
                _ => p.push((start, end)),
            }
        });
    }
    fn fence(&self) {
        MSYNC_PENDING.with(|p| {
            for (start, end) in p.borrow_mut().drain(..) {
                // SAFETY: the range covers whole pages of a live shared mapping (it was
                // flushed through a `Pm` that still owns it); msync only writes back.
                // A failure (EIO from the disk) cannot be reported through `fence`; it
                // surfaces as lost data after a crash, as with any msync caller.
                unsafe {
                    libc::msync(start as *mut libc::c_void, end - start, libc::MS_SYNC);
                }
            }
        });
    }
    fn name(&self) -> String {
        "msync".into()
    }
}

/// One persistence event, as the crash checker sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Store {
        off: u64,
        bytes: Vec<u8>,
    },
    Flush {
        off: u64,
        len: u64,
    },
    Fence,
    /// Bytes written to a hybrid pool's data device at byte `off` (lost, torn or
    /// reordered by a crash until the next `DeviceSync`).
    DeviceWrite {
        off: u64,
        bytes: Vec<u8>,
    },
    /// The data device flushed: every earlier `DeviceWrite` is durable.
    DeviceSync,
}

/// One event and the thread that made it: a fence orders only its own thread's
/// flushes, so the crash checker needs to know whose flush a fence covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tagged {
    pub thread: std::thread::ThreadId,
    pub event: Event,
}

/// Called by [`RecordingBackend`] after it records a fence (see `set_fence_hook`).
pub type FenceHook = Arc<dyn Fn() + Send + Sync>;

/// Tests: logs every store (with its bytes), flush and fence, in program order, each
/// tagged with its thread.
#[derive(Clone, Default)]
pub struct RecordingBackend {
    log: Arc<Mutex<Vec<Tagged>>>,
    hook: Arc<Mutex<Option<FenceHook>>>,
}

impl RecordingBackend {
    pub fn new() -> Self {
        Self::default()
    }
    /// Take the events recorded so far, leaving the log empty.
    pub fn take(&self) -> Vec<Event> {
        self.take_tagged().into_iter().map(|t| t.event).collect()
    }
    /// Take the events recorded so far with their threads, leaving the log empty.
    pub fn take_tagged(&self) -> Vec<Tagged> {
        std::mem::take(&mut *self.log.lock())
    }
    pub fn len(&self) -> usize {
        self.log.lock().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Run `hook` on the fencing thread after each recorded fence (or stop, with
    /// `None`): the crash checker's scheduler uses it to interleave two threads'
    /// operations at fence granularity.
    pub fn set_fence_hook(&self, hook: Option<FenceHook>) {
        *self.hook.lock() = hook;
    }
    fn record(&self, event: Event) {
        self.log.lock().push(Tagged {
            thread: std::thread::current().id(),
            event,
        });
    }
}

impl Backend for RecordingBackend {
    fn stored(&self, off: u64, bytes: &[u8]) {
        self.record(Event::Store {
            off,
            bytes: bytes.to_vec(),
        });
    }
    fn flush(&self, _addr: *const u8, off: u64, len: usize) {
        self.record(Event::Flush {
            off,
            len: len as u64,
        });
    }
    fn fence(&self) {
        self.record(Event::Fence);
        // Cloned out of the lock: the hook may block until another thread's turn.
        let hook = self.hook.lock().clone();
        if let Some(h) = hook {
            h();
        }
    }
    fn name(&self) -> String {
        "recording".into()
    }
    fn device_written(&self, off: u64, bytes: &[u8]) {
        self.record(Event::DeviceWrite {
            off,
            bytes: bytes.to_vec(),
        });
    }
    fn device_zeroed(&self, off: u64, len: usize) {
        self.device_written(off, &vec![0; len]);
    }
    fn device_synced(&self) {
        self.record(Event::DeviceSync);
    }
}
