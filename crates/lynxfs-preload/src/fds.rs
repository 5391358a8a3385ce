//! The process's LynxFS fds. Each is a real kernel fd (an eventfd this library
//! creates), so fd numbers, `poll` on other fds, `close_range` and inheritance stay
//! the kernel's; the table says which engine handle serves it. Fds dup'd from one
//! another share one [`Open`], as they share one open file description.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use libc::c_int;

use crate::guard::passing;
use crate::own;
use crate::state;

/// One open file description of the pool in this process.
pub struct Open {
    /// The engine's handle.
    pub handle: lynxfs::Fd,
    pub ino: u64,
    pub is_dir: bool,
    /// This description's own open of its inode's lock stand-in, for its OFD record
    /// locks and its flock (see `calls::locks`).
    pub lock_fd: OnceLock<c_int>,
}

impl Open {
    pub fn new(handle: lynxfs::Fd, ino: u64, is_dir: bool) -> Open {
        Open {
            handle,
            ino,
            is_dir,
            lock_fd: OnceLock::new(),
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(&fd) = self.lock_fd.get() {
            if fd >= 0 {
                own::unkeep(fd);
                // SAFETY: closing the stand-in fd this description owned.
                unsafe { crate::real::close(fd) };
            }
        }
        if let Some(a) = state::attached_now() {
            let _inside = crate::guard::Inside::enter();
            // Closing cannot fail for a handle this table owned.
            let h = self.handle;
            let _ = crate::guard::on_live_thread(|| a.fs.close_fd(h));
        }
    }
}

/// Fds below this are marked in a bitmap, so a call on any other fd learns it is
/// not ours without a table lookup.
const MARKED: usize = 1 << 16;

static MARKS: [AtomicU64; MARKED / 64] = [const { AtomicU64::new(0) }; MARKED / 64];
/// Fds below MARKED whose kernel fd is a close-on-exec copy of the placeholder (made
/// by an open with O_CLOEXEC, flags unchanged since): a close may park them (see
/// [`park`]).
static PARKABLE: [AtomicU64; MARKED / 64] = [const { AtomicU64::new(0) }; MARKED / 64];
/// Entries at or above MARKED (rare: the lookup is then always made).
static HIGH: AtomicUsize = AtomicUsize::new(0);

/// Plain locked maps: calls come from exit handlers too, after the thread's
/// thread-locals are gone (which lock-free maps need). Sharded by fd number, so
/// threads working on different fds take different locks, and keyed by the number
/// itself (no SipHash on every call on a pool fd).
type Shard = RwLock<HashMap<c_int, Arc<Open>, BuildHasherDefault<FdHasher>>>;

const SHARDS: usize = 16;

static TABLE: [Shard; SHARDS] =
    [const { RwLock::new(HashMap::with_hasher(BuildHasherDefault::new())) }; SHARDS];

fn table(fd: c_int) -> &'static Shard {
    &TABLE[fd as usize % SHARDS]
}

/// An fd is its own hash: numbers are small and dense, and each shard's keys are
/// `SHARDS` apart, so spreading them over the map's buckets is all that is needed.
#[derive(Default)]
struct FdHasher(u64);

impl Hasher for FdHasher {
    fn finish(&self) -> u64 {
        // The map takes its bucket from the low bits and a tag from the top 7: a
        // multiply spreads the number into both.
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_i32(&mut self, n: i32) {
        self.0 = u64::from(n as u32) / SHARDS as u64;
    }
}

/// Whether `fd` may be one of ours (lock-free: no table is read), the test every
/// call on an fd makes first.
pub fn marked(fd: c_int) -> bool {
    let i = fd as usize;
    if i < MARKED {
        MARKS[i / 64].load(Ordering::Acquire) & (1 << (i % 64)) != 0
    } else {
        HIGH.load(Ordering::Acquire) != 0
    }
}

fn set_bit(bits: &[AtomicU64], fd: c_int, on: bool) {
    let i = fd as usize;
    if i < MARKED {
        let bit = 1 << (i % 64);
        if on {
            bits[i / 64].fetch_or(bit, Ordering::AcqRel);
        } else if bits[i / 64].load(Ordering::Relaxed) & bit != 0 {
            bits[i / 64].fetch_and(!bit, Ordering::AcqRel);
        }
    }
}

/// Pool fd `fd` is (or no longer is) a close-on-exec copy of the placeholder.
pub fn set_parkable(fd: c_int, on: bool) {
    if fd >= 0 {
        set_bit(&PARKABLE, fd, on);
    }
}

/// Whether a close may park `fd` (see [`park`]).
pub fn parkable(fd: c_int) -> bool {
    let i = fd as usize;
    fd >= 0 && i < MARKED && PARKABLE[i / 64].load(Ordering::Acquire) & (1 << (i % 64)) != 0
}

fn mark(fd: c_int, on: bool) {
    let i = fd as usize;
    if i < MARKED {
        let bit = 1 << (i % 64);
        if on {
            MARKS[i / 64].fetch_or(bit, Ordering::AcqRel);
        } else {
            MARKS[i / 64].fetch_and(!bit, Ordering::AcqRel);
        }
    } else if on {
        HIGH.fetch_add(1, Ordering::AcqRel);
    } else {
        HIGH.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The pool file behind `fd`, if `fd` is one of ours.
pub fn get(fd: c_int) -> Option<Arc<Open>> {
    if fd < 0 || !marked(fd) {
        return None;
    }
    passing(|| table(fd).read().get(&fd).cloned())
}

/// `fd` (a kernel fd this library reserved) now serves `open`; an entry left over
/// from an fd the kernel closed behind our back is dropped.
pub fn insert(fd: c_int, open: Arc<Open>) {
    set_parkable(fd, false);
    let old = passing(|| table(fd).write().insert(fd, open));
    // The old description (if the kernel reused the number) is dropped unlocked.
    let was = old.is_some();
    drop(old);
    let old = was;
    if !old {
        mark(fd, true);
    }
}

/// `fd` is no longer ours (closed, or reused by the kernel for something else).
pub fn remove(fd: c_int) -> Option<Arc<Open>> {
    if fd < 0 || !marked(fd) {
        return None;
    }
    let old = passing(|| table(fd).write().remove(&fd));
    if old.is_some() {
        mark(fd, false);
        set_parkable(fd, false);
    }
    old
}

/// Every fd of ours, with its description.
pub fn all() -> Vec<(c_int, Arc<Open>)> {
    passing(|| {
        TABLE
            .iter()
            .flat_map(|t| {
                t.read()
                    .iter()
                    .map(|(fd, o)| (*fd, o.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    })
}

/// The eventfd every unshared pool fd is a copy of (dup is far cheaper than a new
/// eventfd per open); out of programs' way, close-on-exec.
static PLACEHOLDER: OnceLock<Result<c_int, i32>> = OnceLock::new();

fn placeholder() -> Result<c_int, i32> {
    *PLACEHOLDER.get_or_init(|| {
        // Non-blocking: a program's read of a closed pool fd's number whose kernel fd
        // is kept (see `park`) fails at once (EAGAIN) instead of waiting forever.
        // SAFETY: eventfd only creates a new fd (the C library's own: this library's
        // `eventfd` would close the spare it may be about to take).
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(last_errno());
        }
        // SAFETY: moving our own fd up (as the engine's, see `out_of_the_way`).
        let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 1024 - 97) };
        if high >= 0 {
            // SAFETY: the low copy is ours and no longer needed.
            unsafe { crate::real::close(fd) };
            return Ok(high);
        }
        Ok(fd)
    })
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EMFILE)
}

/// A new eventfd (count 0).
pub fn new_eventfd(cloexec: bool) -> Result<c_int, i32> {
    let flags = if cloexec { libc::EFD_CLOEXEC } else { 0 };
    // SAFETY: eventfd only creates a new fd (the C library's own: this library's
    // `eventfd` would close the spare it may be about to take).
    let fd = unsafe { crate::real::eventfd(0, flags) };
    if fd < 0 {
        Err(last_errno())
    } else {
        Ok(fd)
    }
}

/// Reserve a kernel fd for a pool file, close-on-exec if asked: a copy of the
/// placeholder eventfd, until the description is shared (see `calls::process`).
/// The spare a close parked is taken when it is the number the kernel would give
/// (see [`park`]); else the kernel is asked.
pub fn reserve(cloexec: bool) -> Result<c_int, i32> {
    if cloexec {
        if let Some(fd) = take_spare() {
            return Ok(fd);
        }
    } else {
        flush_spare();
    }
    let p = placeholder()?;
    let cmd = if cloexec {
        libc::F_DUPFD_CLOEXEC
    } else {
        libc::F_DUPFD
    };
    // SAFETY: duplicating our own placeholder fd.
    let fd = unsafe { crate::real::fcntl64(p, cmd, 0) };
    if fd < 0 {
        Err(last_errno())
    } else {
        // The kernel gives the lowest free number: every one below is in use.
        DENSE.store(fd + 1, Ordering::Relaxed);
        Ok(fd)
    }
}

// The spare: a closed pool fd whose kernel fd (a close-on-exec copy of the placeholder)
// is kept for the next pool open, which then makes no system call, as the close made
// none. The program sees the number as free: the next pool open gets it exactly when
// the kernel would have given it, i.e. when every lower number is in use. What this
// library sees of the fd table says so: `DENSE` is a number below which every fd is
// in use (set from the kernel's own answers, lowered by every close it sees), and
// any call that may make a kernel fd (an open, a dup, a close_range, an exec of a
// non-close-on-exec open) first closes the spare for real, so the kernel's numbering
// is the program's. docs/GUIDE.md ("File descriptors") lists what stays the kernel's and
// what does not: calls this library does not see (a socket, a pipe) are numbered
// past the spare while it is parked, and /proc/self/fd lists it.

/// The parked spare fd, or -1.
static SPARE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);
/// Every fd below this number is in use, as far as this library has seen.
static DENSE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// The program closed pool fd `fd` (already out of the table), a close-on-exec
/// copy of the placeholder if `parkable`: park it as the spare if it is the number
/// the kernel would give next; else close it. Its result is close's.
pub fn park(fd: c_int, parkable: bool) -> c_int {
    if parkable
        && fd < DENSE.load(Ordering::Relaxed)
        && SPARE
            .compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    {
        DENSE.store(fd, Ordering::Relaxed);
        return 0;
    }
    closed(fd);
    // SAFETY: the kernel fd behind a pool fd this library made.
    unsafe { crate::real::close(fd) }
}

/// The spare, if the kernel would give its number now.
fn take_spare() -> Option<c_int> {
    let fd = SPARE.swap(-1, Ordering::AcqRel);
    if fd < 0 {
        return None;
    }
    if DENSE.load(Ordering::Relaxed) == fd {
        DENSE.store(fd + 1, Ordering::Relaxed);
        return Some(fd);
    }
    // SAFETY: the spare is ours and no longer wanted.
    unsafe { crate::real::close(fd) };
    None
}

/// Whether `fd` is the parked spare (to the program: a closed fd).
pub fn is_spare(fd: c_int) -> bool {
    fd >= 0 && SPARE.load(Ordering::Relaxed) == fd
}

/// Close the spare for real: the kernel is about to number a new fd (or to close a
/// range) as it would without this library.
#[inline]
pub fn flush_spare() {
    if SPARE.load(Ordering::Relaxed) >= 0 {
        let fd = SPARE.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: the spare is ours.
            unsafe { crate::real::close(fd) };
        }
    }
}

/// Fd `fd` was closed (or is about to be): a number below it may be free now.
#[inline]
pub fn closed(fd: c_int) {
    if fd >= 0 {
        DENSE.fetch_min(fd, Ordering::Relaxed);
    }
}

/// Whether `fd` is one of this library's own (the placeholder, the engine's, a lock
/// stand-in): programs must not close it from under the library.
pub fn is_own(fd: c_int) -> bool {
    matches!(PLACEHOLDER.get(), Some(Ok(p)) if *p == fd) || own::is_own(fd)
}

/// The library's own descriptors: programs must not close or replace them.
pub fn own() -> Vec<c_int> {
    let mut v = own::listed();
    if let Some(Ok(p)) = PLACEHOLDER.get() {
        v.push(*p);
    }
    v
}
