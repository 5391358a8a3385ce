//! Writing through the pool file: a long write to pool pages this process has not
//! written before goes to the file with `pwrite` instead of stores through the mapping.
//!
//! Why: a page of the pool file that this process never touched is not in its page
//! tables, so the first store to it stops for a page fault (2.9 µs on the 2-core VM
//! of docs/DESIGN-NOTES.md, "Writing fresh pages through the pool file"), once per 4 KiB.
//! A program that writes new files (tar, git, a compiler) writes mostly fresh pages,
//! once each: `tar -xf` of 72 MB took 21,700 faults, half its time. The kernel's copy
//! into the same page-cache pages needs no page-table entry of ours: one system call
//! per write instead of a fault per page. A page's fourth long write is a store
//! through the mapping (a fault once, then plain stores), so a process that keeps
//! rewriting the same blocks pays three `pwrite`s per page; only short-lived
//! programs turn this on (the preload library, `Pm::start_write_through`).
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

/// Writes of a page through the file before it is written through the mapping: the
/// engine writes a file's partly filled last block whole (its tail zeros) and the rest
/// of it with the next `write`, and a preallocated block once more, so a page filled
/// by a program's consecutive writes takes up to three `pwrite`s and no fault.
const WRITES_THROUGH: u64 = 3;
/// Pages per bitmap word: two bits each, the page's count of writes through the file
/// (0 to [`WRITES_THROUGH`]), or [`MAPPED`].
const PER_WORD: u64 = 32;
const MAPPED: u64 = 3;

/// The pool file's descriptor and, per pool page, how this process wrote it.
pub(super) struct Through {
    /// The pool file, open for the pool's life.
    file: i32,
    /// `file` once writing through it is started (-1: write through the mapping
    /// only).
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
            file: -1,
            fd: AtomicI32::new(-1),
            pages: None,
            bytes: AtomicU64::new(0),
        }
    }

    /// Ready, for a pool of `pool_len` bytes in the file open as `fd`, until
    /// [`Through::start`]; off when the page bitmap cannot be reserved.
    pub(super) fn ready(fd: i32, pool_len: u64) -> Through {
        let words = pool_len.div_ceil(PAGE).div_ceil(PER_WORD) as usize;
        match Mapping::anonymous_as((words * 8).max(8), super::mappings::Kind::Private) {
            Ok(m) => Through {
                file: fd,
                fd: AtomicI32::new(-1),
                pages: Some(m),
                bytes: AtomicU64::new(0),
            },
            Err(_) => Through::off(),
        }
    }

    /// Start writing fresh pages through the file (nothing when not ready or
    /// stopped).
    pub(super) fn start(&self) {
        let _ = self
            .fd
            .compare_exchange(-1, self.file, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Stop writing through the file, for good (its descriptor is about to change: a
    /// fork's child opens the pool anew).
    pub(super) fn stop(&self) {
        self.fd.store(i32::MIN, Ordering::Release);
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
        let mut through = false;
        for page in pages {
            let (word, shift, n) = count(words, page)?;
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
        self.mapped(off, len);
        None
    }

    /// `[off, off+len)` is being stored through the mapping (long stores only: the
    /// pages of short ones stay as they were counted).
    #[inline]
    pub(super) fn mapped(&self, off: u64, len: usize) {
        let Some(words) = self.words().filter(|_| len >= MIN_LEN) else {
            return;
        };
        for page in off / PAGE..=(off + len as u64 - 1) / PAGE {
            match count(words, page) {
                Some((word, shift, n)) if n != MAPPED => {
                    word.fetch_or(MAPPED << shift, Ordering::Relaxed);
                }
                _ => {}
            }
        }
    }
}

/// Page `page`'s bitmap word, its shift and its count (`None` outside the pool).
#[inline]
fn count(words: &[AtomicU64], page: u64) -> Option<(&AtomicU64, u32, u64)> {
    let word = words.get((page / PER_WORD) as usize)?;
    let shift = (page % PER_WORD * 2) as u32;
    Some((word, shift, word.load(Ordering::Relaxed) >> shift & MAPPED))
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
    fn a_page_goes_through_the_file_three_times_then_through_the_mapping() {
        let t = Through::ready(7, 1 << 20);
        assert_eq!(t.fresh(9 * 4096, 4096), None, "not started");
        t.start();
        assert_eq!(t.fresh(9 * 4096, 4096), None, "stored to before: mapped");
        assert_eq!(t.fresh(0, 4096), Some(7), "page 0 whole, its tail zeros");
        assert_eq!(t.fresh(2048, 2048), Some(7), "the rest of page 0");
        assert_eq!(t.fresh(0, 4096), Some(7), "a third write of page 0");
        assert_eq!(t.fresh(0, 4096), None, "fourth: mapped");
        assert_eq!(t.fresh(0, 4096), None, "mapped stays mapped");
        assert_eq!(t.fresh(4000, 2000), Some(7), "page 1 is new, page 0 mapped");
        assert_eq!(t.fresh(5 * 4096, 100), None, "short writes never");
        assert_eq!(t.fresh(5 * 4096, 4096), Some(7), "page 5 not counted by it");
        t.mapped(6 * 4096, 4096);
        assert_eq!(t.fresh(6 * 4096, 4096), None, "zeroed through the mapping");
        assert_eq!(
            t.fresh(32 * 4096 - 512, 4096),
            Some(7),
            "across a bitmap word"
        );
        assert_eq!(t.fresh(31 * 4096, 1024), Some(7), "page 31 twice");
        assert_eq!(t.fresh(32 * 4096, 1024), Some(7), "page 32 twice");
        assert_eq!(t.fresh(31 * 4096, 8192), Some(7), "both a third time");
        assert_eq!(t.fresh(31 * 4096, 8192), None, "both mapped");
        assert_eq!(t.fresh((1 << 20) + 4096, 4096), None, "outside the pool");
        t.stop();
        t.start();
        assert_eq!(t.fresh(8 * 4096, 4096), None, "stopped for good");
    }

    #[test]
    fn off_writes_through_the_mapping() {
        let t = Through::off();
        t.start();
        assert_eq!(t.fresh(0, 1 << 16), None);
    }
}
