//! The process's LynxFS fds. Each is a real kernel fd (an eventfd this library
//! creates), so fd numbers, `poll` on other fds, `close_range` and inheritance stay
//! the kernel's; the table says which engine handle serves it. Fds dup'd from one
//! another share one [`Open`], as they share one open file description.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use libc::c_int;

use crate::state;

/// One open file description of the pool in this process.
pub struct Open {
    /// The engine's handle.
    pub handle: lynxfs::Fd,
    pub ino: u64,
    pub is_dir: bool,
    /// A stand-in fd for this description's OFD record locks (see `calls::locks`).
    pub ofd_lock: OnceLock<c_int>,
}

impl Open {
    pub fn new(handle: lynxfs::Fd, ino: u64, is_dir: bool) -> Open {
        Open {
            handle,
            ino,
            is_dir,
            ofd_lock: OnceLock::new(),
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(&fd) = self.ofd_lock.get() {
            if fd >= 0 {
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
/// Entries at or above MARKED (rare: the lookup is then always made).
static HIGH: AtomicUsize = AtomicUsize::new(0);

/// A plain locked map: calls come from exit handlers too, after the thread's
/// thread-locals are gone (which lock-free maps need).
type Table = RwLock<HashMap<c_int, Arc<Open>>>;

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(Default::default)
}

fn marked(fd: c_int) -> bool {
    let i = fd as usize;
    if i < MARKED {
        MARKS[i / 64].load(Ordering::Acquire) & (1 << (i % 64)) != 0
    } else {
        HIGH.load(Ordering::Acquire) != 0
    }
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
    table().read().get(&fd).cloned()
}

/// `fd` (a kernel fd this library reserved) now serves `open`; an entry left over
/// from an fd the kernel closed behind our back is dropped.
pub fn insert(fd: c_int, open: Arc<Open>) {
    let old = table().write().insert(fd, open);
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
    let old = table().write().remove(&fd);
    if old.is_some() {
        mark(fd, false);
    }
    old
}

/// Every fd of ours, with its description.
pub fn all() -> Vec<(c_int, Arc<Open>)> {
    table()
        .read()
        .iter()
        .map(|(fd, o)| (*fd, o.clone()))
        .collect()
}

/// Reserve a kernel fd for a pool file: an eventfd, close-on-exec if asked.
pub fn reserve(cloexec: bool) -> Result<c_int, i32> {
    let flags = if cloexec { libc::EFD_CLOEXEC } else { 0 };
    // SAFETY: eventfd only creates a new fd.
    let fd = unsafe { libc::eventfd(0, flags) };
    if fd < 0 {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EMFILE))
    } else {
        Ok(fd)
    }
}
