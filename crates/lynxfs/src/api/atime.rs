//! When a read updates atime: the mount's `Atime` mode and the NOATIME flag (the rule
//! and the store are the namespace's, `meta::atime`), with a per-handle memory that
//! lets relatime's common answer ("no update") skip the inode's times.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::format::inode;
use crate::meta::atime::relatime_due;
use crate::pmem::Backend;
use crate::time::now_ns;

use super::open::OpenFile;
use super::{Atime, Fs};

/// A read through a handle found that relatime asks for no atime update: none is
/// needed while the inode's ctime word is still `ctime` (every change of mtime,
/// ctime or atime other than a read's stores a new ctime) and the clock is before
/// `until` (the atime plus a day). Both 0 until a read finds so. Two readers may
/// store their pairs at once: a mixed pair is still one a read saw, or has the
/// earlier deadline, so it never skips an update that is due.
#[derive(Default)]
pub(super) struct QuietAtime {
    ctime: AtomicU64,
    until: AtomicU64,
}

/// relatime's day, in nanoseconds.
const DAY_NS: u64 = 24 * 3600 * 1_000_000_000;

impl<B: Backend> Fs<B> {
    /// A read's atime update, as the `Atime` mode says. Under relatime, a handle
    /// whose last read needed no update skips the check while nothing changed the
    /// inode's times and the day has not passed (two loads and a coarse clock).
    pub(super) fn touch_atime(&self, f: &OpenFile) {
        let mode = Atime::from_u8(self.atime.load(Ordering::Relaxed));
        if mode == Atime::Never {
            return;
        }
        let ino = f.ino;
        let ctime = self.ns.load(ino, inode::CTIME);
        if mode == Atime::Relative
            && ctime == f.atime.ctime.load(Ordering::Relaxed)
            && crate::time::now_coarse_ns() < f.atime.until.load(Ordering::Relaxed)
        {
            return;
        }
        if self.ns.inode_flags(ino) & crate::meta::flags::NOATIME != 0 {
            return;
        }
        let [a, m, c, _] = self.ns.times(ino);
        let now = now_ns();
        let due = mode == Atime::Strict || relatime_due(a, m, c, now);
        // An O_NOATIME description leaves a due update undone, and remembers nothing
        // (checked only when one is due: a shared description's flags are a lookup).
        if due && self.opened_noatime(f) {
            return;
        }
        let quiet_since = if due {
            self.ns.store_atime(ino, now);
            now
        } else {
            a.as_ns().unwrap_or(0)
        };
        if mode == Atime::Relative {
            f.atime.ctime.store(ctime, Ordering::Relaxed);
            f.atime
                .until
                .store(quiet_since.saturating_add(DAY_NS), Ordering::Relaxed);
        }
    }

    /// Whether a read of `ino` now would update its atime (the mount's `Atime` mode,
    /// the NOATIME flag; O_NOATIME descriptions aside): a cache that answers reads
    /// without asking (the FUSE daemon's kernel, keeping pages across opens) may do so
    /// only while this is false, or the update would be skipped.
    pub fn read_would_touch_atime(&self, ino: u64) -> bool {
        let mode = Atime::from_u8(self.atime.load(Ordering::Relaxed));
        if mode == Atime::Never || self.ns.inode_flags(ino) & crate::meta::flags::NOATIME != 0 {
            return false;
        }
        let [a, m, c, _] = self.ns.times(ino);
        mode == Atime::Strict || relatime_due(a, m, c, now_ns())
    }

    /// `f`'s description was opened (or set with F_SETFL) with O_NOATIME.
    fn opened_noatime(&self, f: &OpenFile) -> bool {
        self.flags_of(f)
            .is_ok_and(|flags| flags & libc::O_NOATIME != 0)
    }
}
