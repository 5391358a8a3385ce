//! ioctl: the requests about a pool file's blocks, which the library's stand-in kernel
//! fd (an eventfd) cannot answer: FS_IOC_FIEMAP (its extents, as `filefrag` and `cp`
//! ask) and FIGETBSZ (its block size, which `filefrag` asks first). Every other
//! request, and every request on any other fd, goes to the C library unchanged.

use libc::{c_int, c_ulong, c_void};
use lynxfs::api::fiemap::{Fiemap, FiemapExtent, FS_IOC_FIEMAP};

use super::{err, on_fd};
use crate::fds::{self, Open};
use crate::real;
use crate::state::Attached;

/// FIGETBSZ: `_IO(0x00, 2)`, the block size as an int.
const FIGETBSZ: c_ulong = 2;

/// ioctl(2), variadic in C: the one optional argument (a pointer or an integer) is
/// read as a third fixed one (see the module doc of `calls`).
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    let ours = request == FS_IOC_FIEMAP as c_ulong || request == FIGETBSZ;
    if !ours || fds::get(fd).is_none() {
        // SAFETY: the C library's ioctl with the caller's arguments.
        return unsafe { real::ioctl(fd, request, arg) };
    }
    on_fd(
        fd,
        |a, o| {
            if request == FIGETBSZ {
                // SAFETY: for FIGETBSZ the argument is the caller's int.
                return unsafe { put(arg.cast::<c_int>(), lynxfs::format::BLOCK as c_int) };
            }
            // SAFETY: for FS_IOC_FIEMAP the argument is the caller's struct fiemap,
            // followed by room for its fm_extent_count extents.
            unsafe { fiemap(a, o, arg.cast::<Fiemap>()) }
        },
        // SAFETY: as above.
        || unsafe { real::ioctl(fd, request, arg) },
    )
}

/// Stores `v` at the caller's `p` (EFAULT for NULL).
///
/// # Safety
/// `p` is NULL or writable.
unsafe fn put<T>(p: *mut T, v: T) -> lynxfs::Result<c_int> {
    if p.is_null() {
        return Err(err(libc::EFAULT));
    }
    // SAFETY: not NULL, and the caller's to write (alignment not assumed).
    unsafe { p.write_unaligned(v) };
    Ok(0)
}

/// FS_IOC_FIEMAP on open file `o`: the header is read, answered and written back (also
/// on failure, as the kernel does), then the extents after it.
///
/// # Safety
/// `p` is NULL or the caller's `struct fiemap` with room for `fm_extent_count` extents.
unsafe fn fiemap(a: &Attached, o: &Open, p: *mut Fiemap) -> lynxfs::Result<c_int> {
    if p.is_null() {
        return Err(err(libc::EFAULT));
    }
    // SAFETY: the caller's header (alignment not assumed).
    let mut head = unsafe { p.read_unaligned() };
    let answer = a.fs.fiemap(o.handle, &mut head);
    // SAFETY: as above.
    unsafe { p.write_unaligned(head) };
    let extents = answer?;
    // SAFETY: the extents array follows the 32-byte header; the caller made room for
    // fm_extent_count of them, and `extents` holds no more.
    let dst = unsafe { p.add(1) }.cast::<FiemapExtent>();
    for (i, e) in extents.into_iter().enumerate() {
        // SAFETY: entry `i` < fm_extent_count of the caller's array.
        unsafe { dst.add(i).write_unaligned(e) };
    }
    Ok(0)
}
