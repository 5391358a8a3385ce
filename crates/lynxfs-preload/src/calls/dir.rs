//! Directories: getdents64, the opendir/readdir streams, and the working directory.

use std::ffi::CString;

use libc::{c_char, c_int, c_long, c_void, dirent64, size_t, ssize_t, DIR};

use super::{buf_mut, err, on_fd};
use crate::fds::{self, Open};
use crate::real;
use crate::route::{at_path, set_errno};
use crate::state::{self, Attached};

/// The fixed part of a `linux_dirent64` record: ino, off, reclen, type.
const HEAD: usize = 8 + 8 + 2 + 1;

/// Fills `buf` with `linux_dirent64` records from the directory's position on,
/// which it advances past what was returned (0 at the end).
fn fill(a: &Attached, o: &Open, buf: &mut [u8]) -> lynxfs::Result<usize> {
    if !o.is_dir {
        return Err(err(libc::ENOTDIR));
    }
    if a.fs.is_removed_dir(o.ino) {
        // Linux's getdents says ENOENT for a removed directory (IS_DEADDIR), which
        // readdir(3) takes as the end; the engine lists nothing there.
        return Err(err(libc::ENOENT));
    }
    let cookie = a.fs.seek(o.handle, 0, libc::SEEK_CUR)?;
    let max = (buf.len() / (HEAD + 5)).clamp(1, 512);
    let mut entries = lynxfs::DirBatch::new();
    state::with_cred(a, |c| {
        a.fs.readdir_into(o.ino, cookie, max, c, &mut entries)
    })?;
    let mut at = 0;
    let mut next = cookie;
    for e in entries.iter() {
        let len = (HEAD + e.name.len() + 1).next_multiple_of(8);
        if at + len > buf.len() {
            if at == 0 {
                return Err(err(libc::EINVAL));
            }
            break;
        }
        let r = &mut buf[at..at + len];
        r.fill(0);
        r[0..8].copy_from_slice(&e.ino.to_ne_bytes());
        r[8..16].copy_from_slice(&(e.next as i64).to_ne_bytes());
        r[16..18].copy_from_slice(&(len as u16).to_ne_bytes());
        r[18] = e.dtype;
        r[HEAD..HEAD + e.name.len()].copy_from_slice(e.name);
        at += len;
        next = e.next;
    }
    a.fs.seek(o.handle, next as i64, libc::SEEK_SET)?;
    Ok(at)
}

#[no_mangle]
pub unsafe extern "C" fn getdents64(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t {
    on_fd(
        fd,
        // SAFETY: the caller's buffer, valid for `n` bytes.
        |a, o| Ok(fill(a, o, unsafe { buf_mut(b, n) }?)? as ssize_t),
        // SAFETY: the C library's getdents64 with the caller's arguments.
        || unsafe { real::getdents64(fd, b, n) },
    )
}

/// A directory stream of the pool: a `DIR *` only this library hands out. It reads
/// the engine's entries directly (no getdents records in between), a batch at a time,
/// from the position of its fd's description.
#[repr(C)]
struct Stream {
    /// [`TAG`]: where the C library's own stream keeps its fd, never negative, so a
    /// look at the first 8 bytes of any `DIR` tells ours from the C library's
    /// without a lock or a registry.
    tag: [c_int; 2],
    fd: c_int,
    /// Kept from batch to batch: a listing allocates nothing per entry.
    batch: lynxfs::DirBatch,
    at: usize,
    /// The last batch was short: the engine had no more entries then, so the next
    /// readdir past it says "end" without asking again (once: a later call asks).
    end: bool,
    /// The record readdir returned last (valid until the next call).
    entry: dirent64,
    /// The position after the entry returned last (telldir).
    tell: i64,
}

/// A negative "fd" and "LYNX".
const TAG: [c_int; 2] = [-1, 0x4c59_4e58];

/// The most entries a batch asks the engine for.
const BATCH: usize = 256;

fn ours(d: *mut DIR) -> bool {
    if d.is_null() {
        return false;
    }
    // SAFETY: a stream the program passed: the C library's (whose first 8 bytes are
    // its fd and lock word) or ours (the tag); either way 8 readable bytes.
    unsafe { d.cast::<[c_int; 2]>().read() == TAG }
}

fn stream_for(fd: c_int) -> *mut DIR {
    let s = Box::new(Stream {
        tag: TAG,
        fd,
        batch: lynxfs::DirBatch::new(),
        at: 0,
        end: false,
        // SAFETY: plain data: all-zero is valid.
        entry: unsafe { std::mem::zeroed() },
        tell: 0,
    });
    Box::into_raw(s).cast()
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: the caller's path; the open is the replaced one.
    let fd = unsafe { super::open::open_at(libc::AT_FDCWD, path, flags, 0) };
    if fd < 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: an fd just opened (ours or the kernel's).
    unsafe { fdopendir(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut DIR {
    match fds::get(fd) {
        Some(o) if o.is_dir => stream_for(fd),
        Some(_) => {
            set_errno(libc::ENOTDIR);
            std::ptr::null_mut()
        }
        // SAFETY: the C library's fdopendir on a kernel fd.
        None => unsafe { real::fdopendir(fd) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn readdir64(d: *mut DIR) -> *mut dirent64 {
    if !ours(d) {
        // SAFETY: the C library's own stream.
        return unsafe { real::readdir64(d) };
    }
    // SAFETY: `d` is a Stream this library made and has not freed.
    let s = unsafe { &mut *d.cast::<Stream>() };
    if s.at >= s.batch.len() {
        if std::mem::take(&mut s.end) {
            return std::ptr::null_mut();
        }
        let got = match (fds::get(s.fd), state::attached_now()) {
            (Some(o), Some(a)) => {
                let _inside = crate::guard::Inside::enter();
                crate::guard::on_live_thread(|| next_batch(a, &o, &mut s.batch))
            }
            _ => Err(err(libc::EBADF)),
        };
        match got {
            Ok(()) if !s.batch.is_empty() => {
                s.end = s.batch.len() < BATCH;
                s.at = 0;
            }
            // The end of the directory leaves errno alone.
            Ok(()) => return std::ptr::null_mut(),
            Err(e) => {
                // Nothing half-read is returned by the next call, which asks again.
                s.batch.clear();
                set_errno(e.errno());
                return std::ptr::null_mut();
            }
        }
    }
    let Some(e) = s.batch.get(s.at) else {
        return std::ptr::null_mut();
    };
    s.entry.d_ino = e.ino;
    s.entry.d_off = e.next as i64;
    s.entry.d_type = e.dtype;
    s.entry.d_reclen = std::mem::size_of::<dirent64>() as u16;
    let n = e.name.len().min(s.entry.d_name.len() - 1);
    for (d, &c) in s.entry.d_name.iter_mut().zip(&e.name[..n]) {
        *d = c as c_char;
    }
    s.entry.d_name[n] = 0;
    s.tell = s.entry.d_off;
    s.at += 1;
    &mut s.entry
}

/// The next entries of directory `o` from its description's position, which moves
/// past them, into `b`.
fn next_batch(a: &Attached, o: &Open, b: &mut lynxfs::DirBatch) -> lynxfs::Result<()> {
    if !o.is_dir {
        return Err(err(libc::ENOTDIR));
    }
    let cookie = a.fs.seek(o.handle, 0, libc::SEEK_CUR)?;
    state::with_cred(a, |c| a.fs.readdir_into(o.ino, cookie, BATCH, c, b))?;
    if let Some(last) = b.last() {
        a.fs.seek(o.handle, last.next as i64, libc::SEEK_SET)?;
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn readdir(d: *mut DIR) -> *mut dirent64 {
    // SAFETY: forwarded (dirent and dirent64 are one layout on 64-bit Linux).
    unsafe { readdir64(d) }
}

#[no_mangle]
pub unsafe extern "C" fn readdir64_r(
    d: *mut DIR,
    entry: *mut dirent64,
    result: *mut *mut dirent64,
) -> c_int {
    // SAFETY: the caller's stream and buffers.
    unsafe {
        let e = readdir64(d);
        if e.is_null() {
            *result = std::ptr::null_mut();
            return 0;
        }
        *entry = *e;
        *result = entry;
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn readdir_r(
    d: *mut DIR,
    entry: *mut dirent64,
    result: *mut *mut dirent64,
) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { readdir64_r(d, entry, result) }
}

#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut DIR) -> c_int {
    if !ours(d) {
        // Its fd's number is free again (see `fds::closed`).
        // SAFETY: the C library's own stream, still open.
        crate::fds::closed(unsafe { libc::dirfd(d) });
        // SAFETY: the C library's own stream.
        return unsafe { real::closedir(d) };
    }
    // SAFETY: a Stream this library made; its tag is cleared before it is freed, so
    // a second closedir of it is not taken for ours.
    let s = unsafe {
        (*d.cast::<Stream>()).tag = [0; 2];
        Box::from_raw(d.cast::<Stream>())
    };
    // SAFETY: the stream's own fd, closed with the replaced close.
    unsafe { super::open::close(s.fd) }
}

#[no_mangle]
pub unsafe extern "C" fn dirfd(d: *mut DIR) -> c_int {
    if ours(d) {
        // SAFETY: a live Stream of ours.
        return unsafe { &*d.cast::<Stream>() }.fd;
    }
    // SAFETY: the C library's own stream.
    unsafe { real::dirfd(d) }
}

/// Moves a stream of ours to directory position `loc`, dropping what it buffered.
fn reposition(d: *mut DIR, loc: i64) {
    // SAFETY: the caller checked the stream is ours.
    let s = unsafe { &mut *d.cast::<Stream>() };
    s.at = 0;
    s.batch.clear();
    s.end = false;
    s.tell = loc;
    // SAFETY: the replaced lseek on the stream's own fd.
    unsafe { super::io::lseek64(s.fd, loc, libc::SEEK_SET) };
}

#[no_mangle]
pub unsafe extern "C" fn rewinddir(d: *mut DIR) {
    if ours(d) {
        return reposition(d, 0);
    }
    // SAFETY: the C library's own stream.
    unsafe { real::rewinddir(d) }
}

#[no_mangle]
pub unsafe extern "C" fn seekdir(d: *mut DIR, loc: c_long) {
    if ours(d) {
        return reposition(d, loc);
    }
    // SAFETY: the C library's own stream.
    unsafe { real::seekdir(d, loc) }
}

#[no_mangle]
pub unsafe extern "C" fn telldir(d: *mut DIR) -> c_long {
    if ours(d) {
        // SAFETY: a live Stream of ours.
        return unsafe { &*d.cast::<Stream>() }.tell;
    }
    // SAFETY: the C library's own stream.
    unsafe { real::telldir(d) }
}

// ---- the working directory ----

/// Also moves the kernel's working directory there (through the pool's mount, when
/// there is one), so programs the preload does not reach see the same directory.
fn follow_in_kernel(a: &Attached, ino: u64) {
    let Some(c) = state::config() else { return };
    let Ok(p) = a.fs.path_of(ino) else {
        return;
    };
    let mut k = c.at.clone();
    k.extend_from_slice(&p);
    if let Ok(k) = CString::new(k) {
        // SAFETY: a C string we own. Failure leaves the kernel's directory alone.
        unsafe { real::chdir(k.as_ptr()) };
    }
}

fn enter(a: &'static Attached, ino: u64) -> lynxfs::Result<c_int> {
    state::as_thread_mut(&mut a.cwd.write(), |s| s.fchdir(ino))?;
    state::set_cwd_in_pool(true);
    follow_in_kernel(a, ino);
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    // The directory the path led to, when that is in the pool.
    let found = std::cell::Cell::new(None);
    // SAFETY: the caller's path.
    let r = unsafe {
        at_path(
            libc::AT_FDCWD,
            path,
            |s, p| {
                found.set(Some(s.resolve(p, true)?));
                Ok(0)
            },
            |_, p| {
                let r = real::chdir(p);
                if r == 0 {
                    state::set_cwd_in_pool(false);
                }
                r
            },
        )
    };
    match (r, found.get(), state::attached_now()) {
        (0, Some(ino), Some(a)) => {
            let _inside = crate::guard::Inside::enter();
            enter(a, ino).unwrap_or_else(|e| {
                set_errno(e.errno());
                -1
            })
        }
        _ => r,
    }
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    on_fd(
        fd,
        |a, o| enter(a, o.ino),
        || {
            // SAFETY: the C library's fchdir on a kernel fd.
            let r = unsafe { real::fchdir(fd) };
            if r == 0 {
                state::set_cwd_in_pool(false);
            }
            r
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn getcwd(b: *mut c_char, n: size_t) -> *mut c_char {
    // A working directory in the pool not entered yet is entered now (see `state::init`).
    let in_pool = state::cwd_in_pool() && !crate::guard::inside();
    let a = if in_pool { state::attached() } else { None };
    let Some(a) = a.filter(|_| state::cwd_in_pool()) else {
        // SAFETY: the C library's getcwd with the caller's arguments.
        return unsafe { real::getcwd(b, n) };
    };
    let _inside = crate::guard::Inside::enter();
    let c = state::config().expect("attached, so configured");
    let cwd = a.cwd.read().cwd();
    let mut p = c.at.clone();
    match a.fs.path_of(cwd) {
        // The pool's root is the directory `at` itself (no trailing "/").
        Ok(rel) if rel == b"/" => {}
        Ok(rel) => {
            while p.last() == Some(&b'/') {
                p.pop();
            }
            p.extend_from_slice(&rel)
        }
        Err(e) => {
            set_errno(e.errno());
            return std::ptr::null_mut();
        }
    }
    if p.is_empty() {
        p.push(b'/');
    }
    p.push(0);
    if b.is_null() {
        // glibc's extension: a buffer of the size needed (or asked), for free().
        let size = if n == 0 { p.len() } else { n };
        if size < p.len() {
            set_errno(libc::ERANGE);
            return std::ptr::null_mut();
        }
        // SAFETY: a fresh allocation of `size` bytes, filled below.
        let m = unsafe { libc::malloc(size) }.cast::<c_char>();
        if m.is_null() {
            set_errno(libc::ENOMEM);
            return m;
        }
        // SAFETY: `m` holds `size` >= p.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(p.as_ptr().cast(), m, p.len()) };
        return m;
    }
    if n < p.len() {
        set_errno(libc::ERANGE);
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's buffer holds `n` >= p.len() bytes.
    unsafe { std::ptr::copy_nonoverlapping(p.as_ptr().cast(), b, p.len()) };
    b
}

#[no_mangle]
pub unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    // SAFETY: forwarded (a fresh allocation of the size needed).
    unsafe { getcwd(std::ptr::null_mut(), 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __getcwd_chk(b: *mut c_char, n: size_t, _l: size_t) -> *mut c_char {
    // SAFETY: forwarded as received.
    unsafe { getcwd(b, n) }
}
