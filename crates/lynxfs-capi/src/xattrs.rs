//! Extended attributes: getxattr/setxattr/listxattr/removexattr on paths.

use std::ffi::{c_char, c_int, c_void};

use crate::edge::{buf, call, copy_out, path};
use crate::{lynx, Lynx};

/// # Safety
/// `fs` is NULL or a live handle; `p`, `name` NULL or strings; `value` has `size`
/// writable bytes (or `size` is 0).
#[no_mangle]
pub unsafe extern "C" fn lynxfs_getxattr(
    fs: *const Lynx,
    p: *const c_char,
    name: *const c_char,
    value: *mut c_void,
    size: usize,
) -> isize {
    call(|| {
        let (h, p, name) = (lynx(fs)?, path(p)?, path(name)?);
        let v = h.session(|s| Ok(s.getxattr(p, name)?))?;
        copy_out(&v, value, size)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `p`, `name` NULL or strings; `value` has `size`
/// readable bytes (or `size` is 0).
#[no_mangle]
pub unsafe extern "C" fn lynxfs_setxattr(
    fs: *const Lynx,
    p: *const c_char,
    name: *const c_char,
    value: *const c_void,
    size: usize,
    flags: c_int,
) -> c_int {
    call(|| {
        let (h, p, name) = (lynx(fs)?, path(p)?, path(name)?);
        let v = buf(value, size)?;
        h.session(|s| Ok(s.setxattr(p, name, v, flags)?))
            .map(|()| 0)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `p` NULL or a string; `list` has `size` writable
/// bytes (or `size` is 0).
#[no_mangle]
pub unsafe extern "C" fn lynxfs_listxattr(
    fs: *const Lynx,
    p: *const c_char,
    list: *mut c_char,
    size: usize,
) -> isize {
    call(|| {
        let (h, p) = (lynx(fs)?, path(p)?);
        let names = h.session(|s| Ok(s.listxattr(p)?))?;
        // As listxattr(2): each name followed by a NUL.
        let mut all = Vec::new();
        for n in names {
            all.extend_from_slice(&n);
            all.push(0);
        }
        copy_out(&all, list.cast::<c_void>(), size)
    })
}

/// # Safety
/// `fs` is NULL or a live handle; `p`, `name` NULL or strings.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_removexattr(
    fs: *const Lynx,
    p: *const c_char,
    name: *const c_char,
) -> c_int {
    call(|| {
        let (h, p, name) = (lynx(fs)?, path(p)?, path(name)?);
        h.session(|s| Ok(s.removexattr(p, name)?)).map(|()| 0)
    })
}
