//! The atime policy's rule and its store: relatime (Linux's default) updates a file's
//! atime at a read only when it is not after the mtime or the ctime, or is a day old.

use crate::format::inode;
use crate::pmem::Backend;
use crate::time::Timestamp;

use super::Namespace;

/// relatime's day, in seconds.
const DAY_SECS: i64 = 24 * 3600;

/// Whether relatime updates an atime `a` at a read at `now`, given mtime `m` and ctime
/// `c`.
pub fn relatime_due(a: Timestamp, m: Timestamp, c: Timestamp, now: u64) -> bool {
    a <= m || a <= c || Timestamp::from_ns(now).sec.saturating_sub(a.sec) >= DAY_SECS
}

impl<B: Backend> Namespace<B> {
    /// A read's atime: `now` becomes `ino`'s atime (durable before it returns). The
    /// clock's time is plain: the word alone says it (`format::inode::time_word`), and
    /// no other word changes, so no lock or ctime goes with it.
    pub fn store_atime(&self, ino: u64, now: u64) {
        self.pool.settle(ino);
        let mut b = self.pool.pm.batch();
        b.write_u64(self.iaddr(ino) + inode::ATIME, now);
        let _ = b.persist();
    }
}
