//! Reading and writing: plain, positional, vectored; seeking, sizing, syncing,
//! advice, in-kernel copies and mappings of pool files.

use libc::{c_int, c_uint, c_void, iovec, off64_t, size_t, ssize_t};

use super::{buf, buf_mut, err, on_fd};
use crate::fds;
use crate::real;
use crate::state::{self, Attached};

fn read_into(a: &Attached, h: lynxfs::Fd, b: &mut [u8], at: Option<u64>) -> lynxfs::Result<usize> {
    match at {
        Some(off) => a.fs.pread(h, b, off),
        None => a.fs.read(h, b),
    }
}

fn write_from(a: &Attached, h: lynxfs::Fd, b: &[u8], at: Option<u64>) -> lynxfs::Result<usize> {
    match at {
        Some(off) => a.fs.pwrite(h, b, off),
        None => a.fs.write(h, b),
    }
}

fn offset(off: off64_t) -> lynxfs::Result<u64> {
    u64::try_from(off).map_err(|_| err(libc::EINVAL))
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t {
    on_fd(
        fd,
        // SAFETY: the caller's buffer, valid for `n` bytes.
        |a, o| Ok(read_into(a, o.handle, unsafe { buf_mut(b, n) }?, None)? as ssize_t),
        // SAFETY: the C library's read with the caller's arguments.
        || unsafe { real::read(fd, b, n) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, b: *mut c_void, n: size_t, _len: size_t) -> ssize_t {
    // SAFETY: forwarded (the fortified check was the compiler's).
    unsafe { read(fd, b, n) }
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, b: *const c_void, n: size_t) -> ssize_t {
    on_fd(
        fd,
        // SAFETY: the caller's buffer, valid for `n` bytes.
        |a, o| Ok(write_from(a, o.handle, unsafe { buf(b, n) }?, None)? as ssize_t),
        // SAFETY: the C library's write with the caller's arguments.
        || unsafe { real::write(fd, b, n) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, b: *mut c_void, n: size_t, off: off64_t) -> ssize_t {
    on_fd(
        fd,
        |a, o| {
            // SAFETY: the caller's buffer, valid for `n` bytes.
            Ok(read_into(a, o.handle, unsafe { buf_mut(b, n) }?, Some(offset(off)?))? as ssize_t)
        },
        // SAFETY: the C library's pread with the caller's arguments.
        || unsafe { real::pread64(fd, b, n, off) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, b: *mut c_void, n: size_t, off: off64_t) -> ssize_t {
    // SAFETY: forwarded as received.
    unsafe { pread64(fd, b, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    off: off64_t,
    _l: size_t,
) -> ssize_t {
    // SAFETY: forwarded as received.
    unsafe { pread64(fd, b, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    off: off64_t,
    _l: size_t,
) -> ssize_t {
    // SAFETY: forwarded as received.
    unsafe { pread64(fd, b, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, b: *const c_void, n: size_t, off: off64_t) -> ssize_t {
    on_fd(
        fd,
        // SAFETY: the caller's buffer, valid for `n` bytes.
        |a, o| Ok(write_from(a, o.handle, unsafe { buf(b, n) }?, Some(offset(off)?))? as ssize_t),
        // SAFETY: the C library's pwrite with the caller's arguments.
        || unsafe { real::pwrite64(fd, b, n, off) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, b: *const c_void, n: size_t, off: off64_t) -> ssize_t {
    // SAFETY: forwarded as received.
    unsafe { pwrite64(fd, b, n, off) }
}

/// The caller's iovec array.
///
/// # Safety
/// `iov` is valid for `n` entries, each naming a valid buffer.
unsafe fn iovecs<'a>(iov: *const iovec, n: c_int) -> lynxfs::Result<&'a [iovec]> {
    if !(0..=libc::UIO_MAXIOV).contains(&n) {
        return Err(err(libc::EINVAL));
    }
    // SAFETY: as this function's contract.
    unsafe { buf(iov.cast(), n as usize * std::mem::size_of::<iovec>()) }
        .map(|b| unsafe { std::slice::from_raw_parts(b.as_ptr().cast(), n as usize) })
}

/// readv: fill the buffers in turn until a short read.
fn readv_pool(
    a: &Attached,
    h: lynxfs::Fd,
    v: &[iovec],
    mut at: Option<u64>,
) -> lynxfs::Result<ssize_t> {
    let mut total = 0usize;
    for e in v {
        // SAFETY: each iovec names a buffer the caller made valid.
        let b = unsafe { buf_mut(e.iov_base, e.iov_len) }?;
        let got = read_into(a, h, b, at)?;
        total += got;
        at = at.map(|o| o + got as u64);
        if got < b.len() {
            break;
        }
    }
    Ok(total as ssize_t)
}

/// writev: one write of the gathered buffers, so it is as atomic as a write.
fn writev_pool(
    a: &Attached,
    h: lynxfs::Fd,
    v: &[iovec],
    at: Option<u64>,
) -> lynxfs::Result<ssize_t> {
    let mut all = Vec::new();
    for e in v {
        // SAFETY: each iovec names a buffer the caller made valid.
        all.extend_from_slice(unsafe { buf(e.iov_base, e.iov_len) }?);
    }
    Ok(write_from(a, h, &all, at)? as ssize_t)
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    on_fd(
        fd,
        // SAFETY: the caller's iovecs.
        |a, o| readv_pool(a, o.handle, unsafe { iovecs(iov, n) }?, None),
        // SAFETY: the C library's readv with the caller's arguments.
        || unsafe { real::readv(fd, iov, n) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    on_fd(
        fd,
        // SAFETY: the caller's iovecs.
        |a, o| writev_pool(a, o.handle, unsafe { iovecs(iov, n) }?, None),
        // SAFETY: the C library's writev with the caller's arguments.
        || unsafe { real::writev(fd, iov, n) },
    )
}

/// preadv/pwritev's offset: -1 (preadv2) means the file position.
fn at_or_pos(off: off64_t) -> lynxfs::Result<Option<u64>> {
    if off == -1 {
        Ok(None)
    } else {
        offset(off).map(Some)
    }
}

#[no_mangle]
pub unsafe extern "C" fn preadv64(fd: c_int, iov: *const iovec, n: c_int, off: off64_t) -> ssize_t {
    on_fd(
        fd,
        // SAFETY: the caller's iovecs.
        |a, o| readv_pool(a, o.handle, unsafe { iovecs(iov, n) }?, Some(offset(off)?)),
        // SAFETY: the C library's preadv with the caller's arguments.
        || unsafe { real::preadv64(fd, iov, n, off) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const iovec, n: c_int, off: off64_t) -> ssize_t {
    // SAFETY: forwarded as received.
    unsafe { preadv64(fd, iov, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const iovec,
    n: c_int,
    off: off64_t,
) -> ssize_t {
    on_fd(
        fd,
        // SAFETY: the caller's iovecs.
        |a, o| writev_pool(a, o.handle, unsafe { iovecs(iov, n) }?, Some(offset(off)?)),
        // SAFETY: the C library's pwritev with the caller's arguments.
        || unsafe { real::pwritev64(fd, iov, n, off) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const iovec, n: c_int, off: off64_t) -> ssize_t {
    // SAFETY: forwarded as received.
    unsafe { pwritev64(fd, iov, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn preadv64v2(
    fd: c_int,
    iov: *const iovec,
    n: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    on_fd(
        fd,
        // SAFETY: the caller's iovecs.
        |a, o| readv_pool(a, o.handle, unsafe { iovecs(iov, n) }?, at_or_pos(off)?),
        // SAFETY: the C library's preadv2 with the caller's arguments.
        || unsafe { real::preadv64v2(fd, iov, n, off, flags) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn preadv2(
    fd: c_int,
    iov: *const iovec,
    n: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: forwarded as received.
    unsafe { preadv64v2(fd, iov, n, off, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const iovec,
    n: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    on_fd(
        fd,
        // SAFETY: the caller's iovecs.
        |a, o| writev_pool(a, o.handle, unsafe { iovecs(iov, n) }?, at_or_pos(off)?),
        // SAFETY: the C library's pwritev2 with the caller's arguments.
        || unsafe { real::pwritev64v2(fd, iov, n, off, flags) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn pwritev2(
    fd: c_int,
    iov: *const iovec,
    n: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: forwarded as received.
    unsafe { pwritev64v2(fd, iov, n, off, flags) }
}

/// lseek: the engine answers every `whence`, SEEK_DATA and SEEK_HOLE from the file's
/// block map.
fn seek_pool(a: &Attached, h: lynxfs::Fd, off: off64_t, whence: c_int) -> lynxfs::Result<off64_t> {
    // At most the largest file size, far below off64_t::MAX.
    Ok(a.fs.seek(h, off, whence)? as off64_t)
}

#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
    on_fd(
        fd,
        |a, o| seek_pool(a, o.handle, off, whence),
        // SAFETY: the C library's lseek with the caller's arguments.
        || unsafe { real::lseek64(fd, off, whence) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
    // SAFETY: forwarded as received.
    unsafe { lseek64(fd, off, whence) }
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off64_t) -> c_int {
    on_fd(
        fd,
        |a, o| a.fs.ftruncate(o.handle, offset(len)?).map(|()| 0),
        // SAFETY: the C library's ftruncate with the caller's arguments.
        || unsafe { real::ftruncate64(fd, len) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: off64_t) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { ftruncate64(fd, len) }
}

#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int {
    on_fd(
        fd,
        |a, o| {
            let keep = libc::FALLOC_FL_KEEP_SIZE;
            if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 && mode & keep == 0 {
                // The kernel's check, before the file system's.
                return Err(super::err(libc::EOPNOTSUPP));
            }
            a.fs.fallocate(o.handle, mode, offset(off)?, offset(len)?)
                .map(|()| 0)
        },
        // SAFETY: the C library's fallocate with the caller's arguments.
        || unsafe { real::fallocate64(fd, mode, off, len) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { fallocate64(fd, mode, off, len) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, off: off64_t, len: off64_t) -> c_int {
    if fds::get(fd).is_none() {
        // SAFETY: the C library's fallocate; posix_fallocate answers an errno.
        let r = unsafe { real::fallocate64(fd, 0, off, len) };
        return if r == 0 { 0 } else { errno() };
    }
    // SAFETY: forwarded; posix_fallocate answers the errno instead of setting it.
    match unsafe { fallocate64(fd, 0, off, len) } {
        0 => 0,
        _ => errno(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, off: off64_t, len: off64_t) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { posix_fallocate64(fd, off, len) }
}

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    on_fd(
        fd,
        |a, o| a.fs.fsync(o.handle).map(|()| 0),
        // SAFETY: the C library's fsync on the caller's fd.
        || unsafe { real::fsync(fd) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    on_fd(
        fd,
        |a, o| a.fs.fsync(o.handle).map(|()| 0),
        // SAFETY: the C library's fdatasync on the caller's fd.
        || unsafe { real::fdatasync(fd) },
    )
}

/// sync(2): the kernel's caches, then the pool's (a hybrid pool commits its running
/// transaction, as fsync does; an all-PM pool has nothing pending). It attaches if a
/// pool is configured: `sync` is often a process of its own, and another process's
/// writes wait in the pool's shared transaction. Errors cannot be reported (sync
/// returns nothing), as the kernel's.
#[no_mangle]
pub unsafe extern "C" fn sync() {
    // SAFETY: the C library's sync takes nothing.
    unsafe { real::sync() };
    if crate::guard::inside() {
        return;
    }
    if let Some(a) = state::attached() {
        let _inside = crate::guard::Inside::enter();
        let _ = crate::guard::on_live_thread(|| a.fs.sync());
    }
}

/// syncfs(2) on a pool's descriptor commits the pool (see [`sync`]); others go to the
/// kernel.
#[no_mangle]
pub unsafe extern "C" fn syncfs(fd: c_int) -> c_int {
    on_fd(
        fd,
        |a, _| a.fs.sync().map(|()| 0),
        // SAFETY: the C library's syncfs on the caller's fd.
        || unsafe { real::syncfs(fd) },
    )
}

/// Advice changes nothing a pool does (its data is memory already).
#[no_mangle]
pub unsafe extern "C" fn posix_fadvise64(
    fd: c_int,
    off: off64_t,
    len: off64_t,
    advice: c_int,
) -> c_int {
    if fds::get(fd).is_none() {
        // SAFETY: the C library's posix_fadvise with the caller's arguments.
        return unsafe { real::posix_fadvise64(fd, off, len, advice) };
    }
    if !(0..=5).contains(&advice) || len < 0 {
        return libc::EINVAL;
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise(
    fd: c_int,
    off: off64_t,
    len: off64_t,
    advice: c_int,
) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { posix_fadvise64(fd, off, len, advice) }
}

/// Copies `n` bytes from `inp` to `out` with the replaced read and write (either may
/// be a pool fd); `ioff`/`ooff` are positions to use and advance instead of the
/// files' own, when given.
///
/// # Safety
/// `ioff` and `ooff` are null or valid.
unsafe fn copy(
    inp: c_int,
    ioff: *mut off64_t,
    out: c_int,
    ooff: *mut off64_t,
    n: size_t,
) -> ssize_t {
    let mut chunk = vec![0u8; n.min(1 << 20)];
    let mut done = 0usize;
    while done < n {
        let want = (n - done).min(chunk.len());
        // SAFETY: `chunk` is valid for `want` bytes; the offsets as the contract says.
        let got = unsafe {
            match ioff.as_mut() {
                Some(o) => pread64(inp, chunk.as_mut_ptr().cast(), want, *o),
                None => read(inp, chunk.as_mut_ptr().cast(), want),
            }
        };
        if got < 0 {
            return if done > 0 { done as ssize_t } else { -1 };
        }
        if got == 0 {
            break;
        }
        let got = got as usize;
        let mut put = 0usize;
        while put < got {
            // SAFETY: as above.
            let w = unsafe {
                let p = chunk[put..got].as_ptr().cast();
                match ooff.as_mut() {
                    Some(o) => pwrite64(out, p, got - put, *o + put as i64),
                    None => write(out, p, got - put),
                }
            };
            if w <= 0 {
                return if done + put > 0 {
                    (done + put) as ssize_t
                } else {
                    -1
                };
            }
            put += w as usize;
        }
        // SAFETY: as above.
        unsafe {
            if let Some(o) = ioff.as_mut() {
                *o += got as i64;
            }
            if let Some(o) = ooff.as_mut() {
                *o += got as i64;
            }
        }
        done += got;
    }
    done as ssize_t
}

#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    inp: c_int,
    off: *mut off64_t,
    n: size_t,
) -> ssize_t {
    if fds::get(out).is_none() && fds::get(inp).is_none() {
        // SAFETY: the C library's sendfile with the caller's arguments.
        return unsafe { real::sendfile64(out, inp, off, n) };
    }
    // SAFETY: `off` is the caller's (null or valid).
    unsafe { copy(inp, off, out, std::ptr::null_mut(), n) }
}

#[no_mangle]
pub unsafe extern "C" fn sendfile(out: c_int, inp: c_int, off: *mut off64_t, n: size_t) -> ssize_t {
    // SAFETY: forwarded as received.
    unsafe { sendfile64(out, inp, off, n) }
}

#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    inp: c_int,
    ioff: *mut off64_t,
    out: c_int,
    ooff: *mut off64_t,
    n: size_t,
    flags: c_uint,
) -> ssize_t {
    if fds::get(out).is_none() && fds::get(inp).is_none() {
        // SAFETY: the C library's copy_file_range with the caller's arguments.
        return unsafe { real::copy_file_range(inp, ioff, out, ooff, n, flags) };
    }
    if flags != 0 {
        crate::route::set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the offsets are the caller's (null or valid).
    unsafe { copy(inp, ioff, out, ooff, n) }
}

/// A private mapping of a pool file is a copy of its bytes (changes made to the file
/// afterwards are not seen: POSIX leaves that open for private mappings); a shared
/// one goes through the FUSE mount of the pool's directory, when there is one, and
/// through a memory file shared by the user's processes otherwise (see
/// [`super::shared_map`]).
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    if flags & libc::MAP_FIXED != 0 && super::maps::refused("mmap(MAP_FIXED)", addr, len) {
        return libc::MAP_FAILED;
    }
    let (Some(o), Some(a)) = (fds::get(fd), state::attached_now()) else {
        // SAFETY: the C library's mmap with the caller's arguments.
        return unsafe { real::mmap64(addr, len, prot, flags, fd, off) };
    };
    let _inside = crate::guard::Inside::enter();
    let r = if flags & libc::MAP_SHARED != 0 {
        // SAFETY: maps through the mount, or else a memory file, with the caller's
        // arguments.
        unsafe {
            map_through_mount(a, &o, addr, len, prot, flags, off).or_else(|e| {
                if e.errno() != libc::ENODEV {
                    return Err(e);
                }
                super::shared_map::map(a, &o, addr, len, prot, flags, off)
            })
        }
    } else {
        // SAFETY: a fresh private mapping, filled here.
        unsafe { map_copy(a, &o, addr, len, prot, flags, off) }
    };
    r.unwrap_or_else(|e| {
        crate::route::set_errno(e.errno());
        libc::MAP_FAILED
    })
}

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    // SAFETY: forwarded as received.
    unsafe { mmap64(addr, len, prot, flags, fd, off) }
}

/// # Safety
/// As mmap's.
unsafe fn map_copy(
    a: &Attached,
    o: &fds::Open,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    off: off64_t,
) -> lynxfs::Result<*mut c_void> {
    let off = offset(off)?;
    let anon = (flags & !libc::MAP_SHARED) | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    // SAFETY: an anonymous mapping (at the caller's address only if it asked).
    let p = unsafe { real::mmap64(addr, len, libc::PROT_READ | libc::PROT_WRITE, anon, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(err(errno()));
    }
    // SAFETY: `p` is a fresh writable mapping of `len` bytes.
    let dst = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) };
    let mut done = 0;
    while done < len {
        match a.fs.pread(o.handle, &mut dst[done..], off + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) => {
                // SAFETY: unmapping what was just mapped.
                unsafe { libc::munmap(p, len) };
                return Err(e);
            }
        }
    }
    // SAFETY: changing the protection of our own fresh mapping to the caller's.
    unsafe { libc::mprotect(p, len, prot) };
    Ok(p)
}

/// # Safety
/// As mmap's.
unsafe fn map_through_mount(
    a: &Attached,
    o: &fds::Open,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    off: off64_t,
) -> lynxfs::Result<*mut c_void> {
    let c = state::config().ok_or(err(libc::ENODEV))?;
    let mut path = c.at.clone();
    path.extend_from_slice(&a.fs.path_of(o.ino)?);
    let path = std::ffi::CString::new(path).map_err(|_| err(libc::ENODEV))?;
    let acc = if prot & libc::PROT_WRITE != 0 {
        libc::O_RDWR
    } else {
        libc::O_RDONLY
    };
    // SAFETY: a C string we own.
    let kfd = unsafe { real::open64(path.as_ptr(), acc | libc::O_CLOEXEC, 0) };
    if kfd < 0 {
        return Err(err(libc::ENODEV));
    }
    let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: fstat of the fd just opened, into a buffer of the right type.
    let same = unsafe { real::fstat64(kfd, st.as_mut_ptr()) } == 0
        // SAFETY: fstat succeeded.
        && unsafe { st.assume_init() }.st_ino == o.ino;
    let r = if same {
        // SAFETY: the C library's mmap of the mount's file, with the caller's arguments.
        unsafe { real::mmap64(addr, len, prot, flags, kfd, off) }
    } else {
        libc::MAP_FAILED
    };
    let e = errno();
    // SAFETY: closing the fd opened above; the mapping keeps the file.
    unsafe { real::close(kfd) };
    if !same {
        // No mount of this pool there: a shared mapping cannot be served.
        return Err(err(libc::ENODEV));
    }
    if r == libc::MAP_FAILED {
        return Err(err(e));
    }
    Ok(r)
}
