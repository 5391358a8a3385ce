//! The stdio streams this library makes: a pool fd's FILE is a cookie stream over
//! the replaced read, write, lseek and close (glibc's stdio reads and writes with
//! internal calls a preload cannot replace), and the table of them. The standard
//! streams follow their fds: `calls::fd` has them follow a copy onto 0, 1 or 2, and
//! `calls::stdio` makes streams for fopen, fdopen and freopen.

use std::collections::HashMap;

use libc::{c_char, c_int, c_void, off64_t, size_t, ssize_t, FILE};
use parking_lot::Mutex;

use crate::fds;

type ReadFn = unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t;
type WriteFn = unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t;
type SeekFn = unsafe extern "C" fn(*mut c_void, *mut off64_t, c_int) -> c_int;
type CloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieIo {
    read: Option<ReadFn>,
    write: Option<WriteFn>,
    seek: Option<SeekFn>,
    close: Option<CloseFn>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut FILE;
}

/// The fd behind each cookie stream (the cookie is the fd itself).
static STREAMS: Mutex<Option<HashMap<usize, c_int>>> = Mutex::new(None);

fn fd_of(cookie: *mut c_void) -> c_int {
    cookie as usize as c_int
}

unsafe extern "C" fn cookie_read(c: *mut c_void, b: *mut c_char, n: size_t) -> ssize_t {
    // SAFETY: stdio's buffer of `n` bytes.
    unsafe { super::io::read(fd_of(c), b.cast(), n) }
}

unsafe extern "C" fn cookie_write(c: *mut c_void, b: *const c_char, n: size_t) -> ssize_t {
    // SAFETY: stdio's buffer of `n` bytes. stdio takes 0 as an error.
    let r = unsafe { super::io::write(fd_of(c), b.cast(), n) };
    r.max(0)
}

unsafe extern "C" fn cookie_seek(c: *mut c_void, off: *mut off64_t, whence: c_int) -> c_int {
    // SAFETY: stdio's offset pointer.
    unsafe {
        let r = super::io::lseek64(fd_of(c), *off, whence);
        if r < 0 {
            return -1;
        }
        *off = r;
    }
    0
}

unsafe extern "C" fn cookie_close(c: *mut c_void) -> c_int {
    let fd = fd_of(c);
    crate::guard::passing(|| {
        if let Some(m) = STREAMS.lock().as_mut() {
            m.retain(|_, v| *v != fd);
        }
    });
    // SAFETY: the stream's own fd, closed with the replaced close.
    unsafe { super::open::close(fd) }
}

/// A stream over pool fd `fd` with fopen's `mode`.
///
/// # Safety
/// `mode` is a valid C string.
pub unsafe fn stream(fd: c_int, mode: *const c_char) -> *mut FILE {
    let io = CookieIo {
        read: Some(cookie_read),
        write: Some(cookie_write),
        seek: Some(cookie_seek),
        close: Some(cookie_close),
    };
    // SAFETY: the cookie is the fd (an integer, never dereferenced).
    let f = unsafe { fopencookie(fd as usize as *mut c_void, mode, io) };
    if !f.is_null() {
        crate::guard::passing(|| {
            STREAMS
                .lock()
                .get_or_insert_with(HashMap::new)
                .insert(f as usize, fd)
        });
    }
    f
}

/// The pool fd behind stream `f`, if it is one of these streams.
pub fn fd_of_stream(f: *mut FILE) -> Option<c_int> {
    crate::guard::passing(|| {
        STREAMS
            .lock()
            .as_ref()
            .and_then(|m| m.get(&(f as usize)).copied())
    })
}

/// Points the C library's standard stream variable that names `old` at `new`.
pub fn replace_standard(old: *mut FILE, new: *mut FILE) {
    // SAFETY: only the addresses of the C library's stream variables are taken.
    let vars = [&raw mut stdin, &raw mut stdout, &raw mut stderr];
    for var in vars {
        // SAFETY: the C library's stream variables, read and written as C does.
        unsafe {
            if *var == old {
                *var = new;
            }
        }
    }
}

extern "C" {
    static mut stdin: *mut FILE;
    static mut stdout: *mut FILE;
    static mut stderr: *mut FILE;
}

/// The C library's own stdin, stdout and stderr, kept while a cookie stream stands
/// in for one of them (put back when its fd stops being a pool fd).
static ORIGINAL: Mutex<[usize; 3]> = Mutex::new([0; 3]);

/// The variable and mode of standard stream `fd` (0, 1 or 2).
fn standard(fd: c_int) -> Option<(*mut *mut FILE, &'static core::ffi::CStr)> {
    // SAFETY: only the addresses of the C library's stream variables are taken.
    match fd {
        0 => Some((&raw mut stdin, c"r")),
        1 => Some((&raw mut stdout, c"w")),
        2 => Some((&raw mut stderr, c"w")),
        _ => None,
    }
}

/// Standard stream `fd` follows what `fd` now is: a cookie stream if it is a pool fd
/// (the C library's stdio writes and reads with internal calls a preload cannot
/// replace), the C library's own stream otherwise.
pub fn standard_stream_follows(fd: c_int) {
    let Some((var, mode)) = standard(fd) else {
        return;
    };
    // The stream tables' locks are taken under a pass (`guard::passing`).
    crate::guard::passing(|| follow(fd, var, mode));
}

fn follow(fd: c_int, var: *mut *mut FILE, mode: &core::ffi::CStr) {
    // SAFETY: reading the C library's stream variable.
    let cur = unsafe { *var };
    let cookie_fd = STREAMS
        .lock()
        .as_ref()
        .and_then(|m| m.get(&(cur as usize)).copied());
    let pool = fds::get(fd).is_some();
    let mut orig = ORIGINAL.lock();
    if pool {
        if cookie_fd == Some(fd) {
            return;
        }
        // SAFETY: a pool fd and a valid mode.
        let f = unsafe { stream(fd, mode.as_ptr()) };
        if f.is_null() {
            return;
        }
        if fd == 2 {
            // SAFETY: a stream just made; stderr is unbuffered, as the C library's.
            unsafe { libc::setvbuf(f, std::ptr::null_mut(), libc::_IONBF, 0) };
        }
        if cookie_fd.is_none() {
            orig[fd as usize] = cur as usize;
        }
        // SAFETY: the program's own stream variable, now the cookie stream; the old
        // stream stays open (the C library's is kept to be put back).
        unsafe { *var = f };
    } else if cookie_fd.is_some() && orig[fd as usize] != 0 {
        // SAFETY: the C library's own stream for this fd, kept above.
        unsafe { *var = orig[fd as usize] as *mut FILE };
    }
}

/// At load: standard streams whose fds are pool fds (a program started with `> file`
/// in the pool) become cookie streams on the same fds.
pub fn standard_streams() {
    for fd in 0..3 {
        standard_stream_follows(fd);
    }
}

/// Before a copy onto standard fd `new`: what the program's stream buffered goes
/// where the fd pointed until now.
pub fn before_standard_copy(new: c_int) {
    if let Some((var, _)) = standard(new) {
        // SAFETY: flushing the program's own stream.
        unsafe { libc::fflush(*var) };
    }
}
