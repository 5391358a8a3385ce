//! Directory streams: opendir/fdopendir/readdir/closedir over the engine's readdir, a batch
//! at a time, the directory held open by a descriptor while the stream lives.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int};

use engine::DirEntry;
use parking_lot::Mutex;

use crate::edge::{call, path, put, Errno, R};
use crate::{lynx, Lynx};

/// Entries fetched from the engine per batch.
const BATCH: usize = 128;

/// Longest name in a `struct lynxfs_dirent` (its `d_name` has one byte more, the NUL).
const NAME_MAX: usize = 255;

/// `struct lynxfs_dirent` of lynxfs.h.
#[repr(C)]
pub struct Dirent {
    pub d_ino: u64,
    pub d_type: u8,
    pub d_name: [c_char; NAME_MAX + 1],
}

/// The stream behind a `lynxfs_dir_t *`.
pub struct Dir {
    /// The descriptor holding the directory open.
    fd: c_int,
    ino: u64,
    /// Where the next batch starts, entries fetched not yet returned, and whether
    /// the engine said there are no more.
    state: Mutex<(u64, VecDeque<DirEntry>, bool)>,
}

impl Dir {
    /// A stream over directory `ino`, open as descriptor `fd` (the stream's now).
    fn new(fd: c_int, ino: u64) -> Box<Dir> {
        Box::new(Dir {
            fd,
            ino,
            state: Mutex::new((0, VecDeque::new(), false)),
        })
    }

    /// The next entry, fetching a batch when none is left.
    fn next(&self, h: &Lynx) -> R<Option<DirEntry>> {
        let mut st = self.state.lock();
        let (next, queue, ended) = &mut *st;
        if queue.is_empty() && !*ended {
            let batch = h.fs().readdir(self.ino, *next, BATCH, h.cred())?;
            *ended = batch.is_empty();
            queue.extend(batch);
        }
        let e = queue.pop_front();
        if let Some(e) = &e {
            *next = e.next;
        }
        Ok(e)
    }
}

fn dirent(e: &DirEntry) -> R<Dirent> {
    let mut d = Dirent {
        d_ino: e.ino,
        d_type: e.dtype,
        d_name: [0; NAME_MAX + 1],
    };
    if e.name.len() > NAME_MAX {
        return Err(Errno(libc::ENAMETOOLONG));
    }
    for (dst, &src) in d.d_name.iter_mut().zip(&e.name) {
        *dst = src as c_char;
    }
    Ok(d)
}

/// # Safety
/// `fs` is NULL or a live handle; `p` NULL or a string; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_opendir(
    fs: *const Lynx,
    p: *const c_char,
    out: *mut *mut Dir,
) -> c_int {
    call(|| {
        let (h, p) = (lynx(fs)?, path(p)?);
        if out.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        let flags = libc::O_RDONLY | libc::O_DIRECTORY;
        let o = h.session(|s| Ok(s.open_file(p, flags, 0)?))?;
        let fd = h.install(o)?;
        put(out, Box::into_raw(Dir::new(fd, o.ino))).map(|()| 0)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_fdopendir(fs: *const Lynx, fd: c_int, out: *mut *mut Dir) -> c_int {
    call(|| {
        let h = lynx(fs)?;
        if out.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        let ino = h.dir_of(fd)?;
        put(out, Box::into_raw(Dir::new(fd, ino))).map(|()| 0)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `dir` NULL or a stream of it not closed; `ent` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_readdir(
    fs: *const Lynx,
    dir: *const Dir,
    ent: *mut Dirent,
) -> c_int {
    call(|| {
        let h = lynx(fs)?;
        // SAFETY: the header requires a stream from `lynxfs_opendir` not yet closed
        // (or NULL, refused); streams are only shared (`Dir` is Sync).
        let d = unsafe { dir.as_ref() }.ok_or(Errno(libc::EINVAL))?;
        if ent.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        match d.next(h)? {
            Some(e) => put(ent, dirent(&e)?).map(|()| 1),
            None => Ok(0),
        }
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `dir` NULL or a stream of it, used by no other call
/// now or after.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_closedir(fs: *const Lynx, dir: *mut Dir) -> c_int {
    call(|| {
        let h = lynx(fs)?;
        if dir.is_null() {
            return Err(Errno(libc::EINVAL));
        }
        // SAFETY: a stream from `lynxfs_opendir` (`Box::into_raw`) the caller gives up:
        // the box is taken back once.
        let d = unsafe { Box::from_raw(dir) };
        h.close(d.fd).map(|()| 0)
    })
}
