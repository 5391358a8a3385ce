//! The forwarder: a thread of the daemon's own that passes the changes other
//! processes attached to the pool make (names, attributes, data: the pool's change
//! notices, [`Fs::watch_changes`]) on to the kernel as invalidation notices, so cached
//! names, attributes and pages go stale for no longer than the notice takes
//! (microseconds), whatever the entry and attribute timeouts.

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use fuser::{INodeNo, Notifier};
use lynxfs::pmem::Backend;
use lynxfs::runtime::notices::{Change, Watcher};
use lynxfs::Fs;

/// How long the forwarder waits for changes before it looks whether to stop.
const FORWARD_SLICE: Duration = Duration::from_millis(100);

/// `FUSE_NOTIFY_INC_EPOCH` (Linux 6.16): every name the kernel caches is looked up
/// again before its next use. `fuser` 0.18 cannot send it.
const FUSE_NOTIFY_INC_EPOCH: i32 = 8;

/// A thread that passes the changes other attached processes make on to the kernel.
/// Dropping it stops the thread.
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts the [`Forwarder`] of a [`crate::LynxFuse`] (see
/// [`crate::LynxFuse::forward`]).
pub struct Forward<B: Backend> {
    pub(crate) fs: Arc<Fs<B>>,
    pub(crate) slot: Arc<Mutex<Option<Forwarder>>>,
    /// How far the kernel has been told: every change numbered below this (see
    /// [`Fs::changes_posted`]) has been passed on or was the daemon's own (see
    /// [`Forwarded`]).
    pub(crate) forwarded: Forwarded,
}

/// The number of the first change not yet passed on to the kernel, shared by the
/// forwarder (which raises it once a batch of invalidations is done) and the
/// adapter, whose opens keep the kernel's pages only when nothing another process
/// changed is still on its way ([`Forwarded::caught_up`]).
#[derive(Clone, Default)]
pub struct Forwarded(Arc<AtomicU64>);

impl Forwarded {
    /// Whether every change posted before this call has been passed on to the
    /// kernel: then what the kernel caches is what the pool holds (apart from changes
    /// made meanwhile, which an open file sees as late as any notice).
    /// The daemon's own changes, which the kernel made (and which do not wake the
    /// forwarder, see `lynxfs::runtime::notices`), count as passed on: those past
    /// the forwarder's position are looked at here (whole, published and the
    /// daemon's), and the position raised past them, so the next open looks only at
    /// the ones made since.
    pub fn caught_up<B: Backend>(&self, fs: &Fs<B>) -> bool {
        let at = self.0.load(Ordering::Acquire);
        match fs.own_changes_since(at) {
            Some(past) => {
                if past > at {
                    self.set(past);
                }
                true
            }
            None => false,
        }
    }

    /// Raised only: the forwarder and the opens' look at the daemon's own changes
    /// both raise it.
    fn set(&self, position: u64) {
        self.0.fetch_max(position, Ordering::AcqRel);
    }
}

impl<B: Backend> Forward<B> {
    /// Start passing the changes other processes attached to the pool make on to the
    /// kernel, from a thread of its own (a notice sent from a request handler could
    /// wait on the very directory lock the kernel holds for that request). Call once
    /// the session exists and before it serves: `notifier` and `device` are its own.
    /// Nothing is started for a pool no other process can attach. The thread stops
    /// when the session ends, before the pool is closed.
    pub fn start(&self, notifier: Notifier, device: OwnedFd) -> std::io::Result<()> {
        let Some(watcher) = self.fs.watch_changes() else {
            return Ok(());
        };
        // Changes posted before the watch began are not passed on: what the kernel
        // holds of them was read after them (the mount is new).
        self.forwarded.set(watcher.position());
        let forwarded = self.forwarded.clone();
        let inv = Invalidate {
            fs: self.fs.clone(),
            notifier,
            device,
            no_epoch_said: false,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("lynxfs-notices".to_string())
            .spawn(move || forward_loop(watcher, inv, &forwarded, &stop2))?;
        *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(Forwarder {
            stop,
            thread: Some(thread),
        });
        Ok(())
    }
}

/// Tells the kernel about changes it did not see (another process made them).
struct Invalidate<B: Backend> {
    fs: Arc<Fs<B>>,
    notifier: Notifier,
    /// The session's /dev/fuse descriptor, for what `fuser` cannot send.
    device: OwnedFd,
    /// The kernel refused FUSE_NOTIFY_INC_EPOCH (older than 6.16): said once.
    no_epoch_said: bool,
}

impl<B: Backend> Invalidate<B> {
    fn apply(&mut self, c: Change) {
        match c {
            Change::Name { parent, name, ino } => {
                if self.removed(ino) {
                    self.delete(parent, ino, &name);
                } else {
                    self.entry(parent, &name);
                }
                // The parent's mtime and link count, the file's ctime and link count.
                self.inode(parent, -1, 0);
                if ino != 0 {
                    self.inode(ino, -1, 0);
                }
            }
            Change::Attrs { ino } => self.inode(ino, -1, 0),
            Change::Data { ino, off, len } => self.inode(
                ino,
                i64::try_from(off).unwrap_or(i64::MAX),
                i64::try_from(len).unwrap_or(0),
            ),
            Change::Lost => self.everything(),
        }
    }

    /// Notices were missed: every name the kernel caches is looked up again
    /// (FUSE_NOTIFY_INC_EPOCH), and the attributes and pages of every inode it knows
    /// (each is held) are dropped.
    fn everything(&mut self) {
        if let Err(e) = self.inc_epoch() {
            if !self.no_epoch_said {
                self.no_epoch_said = true;
                eprintln!(
                    "lynxfs: the kernel cannot drop every cached name at once ({e}): after \
                     missed change notices, names may stay stale up to entry_timeout"
                );
            }
        }
        for ino in self.fs.held_inodes() {
            self.inode(ino, 0, 0);
        }
    }

    fn inc_epoch(&self) -> std::io::Result<()> {
        // struct fuse_out_header { u32 len; i32 error (the notice code); u64 unique 0 }
        let mut msg = [0u8; 16];
        msg[..4].copy_from_slice(&16u32.to_ne_bytes());
        msg[4..8].copy_from_slice(&FUSE_NOTIFY_INC_EPOCH.to_ne_bytes());
        // SAFETY: writes 16 bytes from a buffer of 16 to a descriptor we own.
        let n = unsafe { libc::write(self.device.as_raw_fd(), msg.as_ptr().cast(), msg.len()) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn entry(&self, parent: u64, name: &[u8]) {
        let r = self
            .notifier
            .inval_entry(INodeNo(parent), OsStr::from_bytes(name));
        report(r, || {
            format!("the name {:?} in {parent}", OsStr::from_bytes(name))
        });
    }

    /// Whether `ino`, whose name changed, has no name left (unlinked, removed, or
    /// freed already): the kernel may then drop the name and the file as deleted.
    fn removed(&self, ino: u64) -> bool {
        ino != 0 && self.fs.getattr(ino).map_or(true, |st| st.nlink == 0)
    }

    /// FUSE_NOTIFY_DELETE: the kernel drops the name and, its last link gone, the
    /// file, which is what raises IN_DELETE_SELF for watchers of the file (the only
    /// inotify event a FUSE daemon can cause). A directory the kernel still caches
    /// children of (ENOTEMPTY) or a mount point (EBUSY) only has its name dropped.
    fn delete(&self, parent: u64, ino: u64, name: &[u8]) {
        let r = self
            .notifier
            .delete(INodeNo(parent), INodeNo(ino), OsStr::from_bytes(name));
        if let Err(e) = &r {
            if matches!(e.raw_os_error(), Some(libc::ENOTEMPTY | libc::EBUSY)) {
                return self.entry(parent, name);
            }
        }
        report(r, || {
            format!("the removed name {:?} in {parent}", OsStr::from_bytes(name))
        });
    }

    fn inode(&self, ino: u64, off: i64, len: i64) {
        let r = self.notifier.inval_inode(INodeNo(ino), off, len);
        report(r, || format!("inode {ino}"));
    }
}

/// A notice the kernel refused, unless about something it does not cache (ENOENT)
/// or after the mount went (ENOTCONN, ENODEV).
pub(crate) fn report(r: std::io::Result<()>, what: impl FnOnce() -> String) {
    if let Err(e) = r {
        if !matches!(
            e.raw_os_error(),
            Some(libc::ENOENT | libc::ENOTCONN | libc::ENODEV)
        ) {
            eprintln!("lynxfs: invalidating {}: {e}", what());
        }
    }
}

fn forward_loop<B: Backend>(
    mut watcher: Watcher,
    mut inv: Invalidate<B>,
    forwarded: &Forwarded,
    stop: &AtomicBool,
) {
    // A test stops the forwarder here for good: it then reads no notice at all, and
    // opens after the daemon's own changes must still keep the kernel's pages.
    lynxfs::runtime::testing::stop_here("forward.start");
    while !stop.load(Ordering::Acquire) {
        for c in watcher.changes(FORWARD_SLICE) {
            // A test stops the forwarder here for good: the kernel then hears of no
            // other process's change, and opens must still read what the pool holds.
            lynxfs::runtime::testing::stop_here("forward.apply");
            inv.apply(c);
        }
        // Only now: each invalidation above is done when its notice is written.
        forwarded.set(watcher.position());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lynxfs::pmem::PmemBackend;
    use lynxfs::{Cred, MkfsOptions, Pool};

    /// An open after the daemon's own changes keeps the kernel's pages without the
    /// forwarder having read their notices (which do not wake it): here it never
    /// runs. Before: not caught up until the forwarder had read them.
    #[test]
    fn own_changes_leave_the_mount_caught_up_without_the_forwarder() {
        let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
        let pool = dir.path().join("pool");
        Pool::mkfs(&pool, &MkfsOptions::new(64 << 20), PmemBackend::default()).expect("mkfs");
        let fs = Fs::open(&pool).expect("attaching");
        let watcher = fs.watch_changes().expect("an attached pool has notices");
        let forwarded = Forwarded::default();
        forwarded.set(watcher.position());
        let s = fs.session(Cred::root());
        for i in 0..100 {
            let fd = s
                .open(format!("f{i}"), libc::O_CREAT | libc::O_WRONLY, 0o644)
                .unwrap();
            fs.pwrite(fd, b"bytes", 0).unwrap();
            fs.close_fd(fd).unwrap();
            s.chmod(format!("f{i}"), 0o600).unwrap();
        }
        assert!(fs.changes_posted() > watcher.position());
        assert!(forwarded.caught_up(&fs));
        assert_eq!(forwarded.0.load(Ordering::Acquire), fs.changes_posted());
        drop(watcher);
        fs.close().expect("close");
    }
}
