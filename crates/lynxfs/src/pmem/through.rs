//! Writing through the pool file: a long write to pool pages this process has not
//! written before goes to the file with `pwrite` instead of stores through the mapping.
//!
//! Why: a page of the pool file that this process never touched is not in its page
//! tables, so the first store to it stops for a page fault (2.9 µs on the 2-core VM
//! of docs/BENCHMARKS.md, "Writing fresh pages through the pool file"), once per 4 KiB.
//! A program that writes new files (tar, git, a compiler) writes mostly fresh pages,
//! once each: `tar -xf` of 72 MB took 21,700 faults, half its time. The kernel's copy
//! into the same page-cache pages needs no page-table entry of ours: one system call
//! per write instead of a fault per page. A page written a third time is written
//! through the mapping (a fault once, then plain stores), so a process that keeps
//! rewriting the same blocks pays two `pwrite`s per page.
//!
//! What is the same: the bytes land in the pages the mapping shows (the page cache of
//! a tmpfs or disk file, or the persistent memory of a DAX file, where the kernel's
//! copy is the flushing one, `copy_from_iter_flushcache`), so every reader of the
//! mapping sees them, and the caller's flush and fence rules are unchanged (the
//! backend decides what a write through the file still needs:
//! [`super::Backend::written_through_file`]). A failed `pwrite` (a full file system
//! under a sparse pool) falls back to the stores, whose fault handling reports it.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use super::map::Mapping;

/// Writes at least this long may go through the file; shorter ones (metadata: a
/// dentry, an inode, a log record) stay stores, which keep their lines in cache.
pub const MIN_LEN: usize = 1024;
const PAGE: u64 = 4096;

/// Writes of a page through the file before it is written through the mapping: a
/// block that a program fills in two writes (tar's 10 KiB records split every third
/// block) takes two `pwrite`s and no fault.
const WRITES_THROUGH: u64 = 2;
/// Pages per bitmap word: two bits each, the page's count of writes through the file
/// (0 to [`WRITES_THROUGH`]), or [`MAPPED`].
const PER_WORD: u64 = 32;
const MAPPED: u64 = 3;

/// The pool file's descriptor and, per pool page, how this process wrote it.
pub(super) struct Through {
    /// The pool file, open for the pool's life (-1: write through the mapping only).
    fd: AtomicI32,
    /// Two bits per pool page (see [`PER_WORD`]). In anonymous memory reserved, not
    /// committed: only the parts used take pages.
    pages: Option<Mapping>,
    /// Bytes written through the file so far (tests and `lynxfs info`-style reports).
    bytes: AtomicU64,
}

impl Through {
    /// Off: every write goes through the mapping.
    pub(super) fn off() -> Through {
        Through {
            fd: AtomicI32::new(-1),
            pages: None,
            bytes: AtomicU64::new(0),
        }
    }

    /// On, for a pool of `pool_len` bytes in the file open as `fd`; off when the
    /// page bitmap cannot be reserved.
    pub(super) fn on(fd: i32, pool_len: u64) -> Through {
        let words = pool_len.div_ceil(PAGE).div_ceil(PER_WORD) as usize;
        match Mapping::anonymous((words * 8).max(8)) {
            Ok(m) => Through {
                fd: AtomicI32::new(fd),
                pages: Some(m),
                bytes: AtomicU64::new(0),
            },
            Err(_) => Through::off(),
        }
    }

    /// Stop writing through the file (its descriptor is about to change: a fork's
    /// child opens the pool anew).
    pub(super) fn stop(&self) {
        self.fd.store(-1, Ordering::Release);
    }

    /// Count `n` bytes written through the file.
    pub(super) fn wrote(&self, n: usize) {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Bytes written through the file so far.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn words(&self) -> Option<&[AtomicU64]> {
        let m = self.pages.as_ref()?;
        // SAFETY: the mapping is `len` bytes of zero-filled, 8-aligned (page aligned)
        // anonymous memory owned by `self`, only ever accessed atomically.
        Some(unsafe { std::slice::from_raw_parts(m.base().cast::<AtomicU64>(), m.len() / 8) })
    }

    /// The descriptor to `pwrite` `[off, off+len)` to, when that range holds a page
    /// this process has written through the file fewer than [`WRITES_THROUGH`] times
    /// (their counts go up); else `None`, and the pages count as mapped from now on
    /// (the caller stores to them). Per-page counts are this process's own and only
    /// steer the choice: a race between two threads costs a fault or a `pwrite`.
    #[inline]
    pub(super) fn fresh(&self, off: u64, len: usize) -> Option<i32> {
        if len < MIN_LEN {
            return None;
        }
        let fd = self.fd.load(Ordering::Acquire);
        let words = self.words()?;
        let pages = off / PAGE..=(off + len as u64 - 1) / PAGE;
        let count = |page: u64| -> Option<(&AtomicU64, u32, u64)> {
            let word = words.get((page / PER_WORD) as usize)?;
            let shift = (page % PER_WORD * 2) as u32;
            Some((word, shift, word.load(Ordering::Relaxed) >> shift & MAPPED))
        };
        let mut through = false;
        for page in pages.clone() {
            let (word, shift, n) = count(page)?;
            if n < WRITES_THROUGH {
                through = true;
                if fd >= 0 {
                    word.fetch_add(1 << shift, Ordering::Relaxed);
                }
            }
        }
        if through && fd >= 0 {
            return Some(fd);
        }
        for page in pages {
            let (word, shift, n) = count(page)?;
            if n != MAPPED {
                word.fetch_or(MAPPED << shift, Ordering::Relaxed);
            }
        }
        None
    }
}

/// `pwrite` all of `bytes` at `off` of `fd`; how many bytes were written before an
/// error (all of them on success).
pub(super) fn pwrite_all(fd: i32, off: u64, bytes: &[u8]) -> usize {
    let mut done = 0;
    while done < bytes.len() {
        let rest = &bytes[done..];
        // SAFETY: `rest` is a live buffer of `rest.len()` bytes; `fd` is the pool
        // file, open for the pool's life (see `Through::fd`).
        let n = unsafe {
            libc::pwrite(
                fd,
                rest.as_ptr().cast(),
                rest.len(),
                (off + done as u64) as libc::off_t,
            )
        };
        match n {
            n if n > 0 => done += n as usize,
            -1 if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
            _ => break,
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_goes_through_the_file_twice_then_through_the_mapping() {
        let t = Through::on(7, 1 << 20);
        assert_eq!(t.fresh(0, 4096), Some(7), "first write of page 0");
        assert_eq!(t.fresh(100, 2000), Some(7), "second write of page 0");
        assert_eq!(t.fresh(0, 4096), None, "third: mapped");
        assert_eq!(t.fresh(0, 4096), None, "mapped stays mapped");
        assert_eq!(t.fresh(4000, 2000), Some(7), "page 1 is new, page 0 mapped");
        assert_eq!(t.fresh(4096, 4096), Some(7), "page 1 once more");
        assert_eq!(t.fresh(4096, 4096), None, "page 1 mapped");
        assert_eq!(t.fresh(3 * 4096, 100), None, "short writes never");
        assert_eq!(
            t.fresh(3 * 4096, 4096),
            Some(7),
            "page 3 was not counted by it"
        );
        assert_eq!(
            t.fresh(32 * 4096 - 512, 4096),
            Some(7),
            "across a bitmap word"
        );
        assert_eq!(t.fresh((1 << 20) + 4096, 4096), None, "outside the pool");
        t.stop();
        assert_eq!(t.fresh(8 * 4096, 4096), None, "stopped");
    }

    #[test]
    fn off_writes_through_the_mapping() {
        assert_eq!(Through::off().fresh(0, 1 << 16), None);
    }
}
