//! The edge between C and Rust: errno results, the panic guard every exported
//! function runs its body in, and the checked conversions of C arguments.

use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A failed call: a positive errno, returned to C negated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Errno(pub i32);

impl From<engine::Error> for Errno {
    fn from(e: engine::Error) -> Self {
        Errno(e.errno())
    }
}

/// What the body of an exported function returns.
pub(crate) type R<T> = Result<T, Errno>;

/// The largest count one read or write moves, as Linux's MAX_RW_COUNT: every count
/// fits in `ssize_t` and `int` with room to spare.
pub(crate) const MAX_RW: usize = 0x7fff_f000;

/// A C return type: an `int`, `ssize_t` or `off_t` holding a result or a `-errno`.
pub(crate) trait Ret {
    fn from_i64(v: i64) -> Self;
}

impl Ret for i32 {
    fn from_i64(v: i64) -> i32 {
        i32::try_from(v).unwrap_or(-libc::EOVERFLOW)
    }
}

impl Ret for isize {
    fn from_i64(v: i64) -> isize {
        isize::try_from(v).unwrap_or(-(libc::EOVERFLOW as isize))
    }
}

impl Ret for i64 {
    fn from_i64(v: i64) -> i64 {
        v
    }
}

/// Runs the body of an exported function: its error becomes `-errno`, and a panic
/// (a bug) is caught here, as unwinding into C is undefined, and becomes `-EIO`.
/// The body runs inside the engine: its memory is open to this thread for the call
/// (protection keys, `engine::pmem::keys`).
pub(crate) fn call<T: Ret>(body: impl FnOnce() -> R<i64>) -> T {
    let _key = engine::pmem::keys::Open::enter();
    let v = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(Errno(e))) => -i64::from(e),
        Err(_) => -i64::from(libc::EIO),
    };
    T::from_i64(v)
}

/// The one conversion of a C path (or xattr name) to what the engine's `Session`
/// takes (bytes, as the kernel's names): NULL is EFAULT.
pub(crate) fn path<'a>(p: *const c_char) -> R<&'a [u8]> {
    if p.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: not NULL, and the header requires a NUL-terminated string that lives
    // for the call.
    Ok(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// A caller's buffer of `n` bytes to fill (at most [`MAX_RW`] of them are used).
pub(crate) fn buf_mut<'a>(p: *mut c_void, n: usize) -> R<&'a mut [u8]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: not NULL, and the header requires `n` writable bytes at `p` that no one
    // else uses during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), n.min(MAX_RW)) })
}

/// A caller's buffer of `n` bytes to read (at most [`MAX_RW`] of them are used).
pub(crate) fn buf<'a>(p: *const c_void, n: usize) -> R<&'a [u8]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: not NULL, and the header requires `n` readable bytes at `p` for the call.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n.min(MAX_RW)) })
}

/// Stores `v` in a caller's out-parameter.
pub(crate) fn put<T>(p: *mut T, v: T) -> R<()> {
    if p.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: not NULL, and the header requires `p` to point to writable storage for a
    // `T`; `write` does not read (or drop) what was there.
    unsafe { p.write(v) };
    Ok(())
}

/// Copies `data` into a caller's buffer of `size` bytes, as getxattr(2) does: size 0
/// asks for the length only; a smaller buffer is ERANGE.
pub(crate) fn copy_out(data: &[u8], p: *mut c_void, size: usize) -> R<i64> {
    let len = i64::try_from(data.len()).map_err(|_| Errno(libc::E2BIG))?;
    if size == 0 {
        return Ok(len);
    }
    if data.len() > size {
        return Err(Errno(libc::ERANGE));
    }
    let dst = buf_mut(p, size)?;
    let dst = dst.get_mut(..data.len()).ok_or(Errno(libc::ERANGE))?;
    dst.copy_from_slice(data);
    Ok(len)
}

/// A file offset or length from C: negative ones are EINVAL.
pub(crate) fn offset(off: i64) -> R<u64> {
    u64::try_from(off).map_err(|_| Errno(libc::EINVAL))
}
