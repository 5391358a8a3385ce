//! mkstemp and its relatives, and mkdtemp: glibc makes the file with internal calls
//! a preload cannot replace, so a template in the pool is filled in and created here.

use libc::{c_char, c_int};

use crate::real;
use crate::route::{self, set_errno, Route};
use crate::state;

/// glibc's number of names tried before giving up (TMP_MAX).
const TRIES: u32 = 238_328;

const LETTERS: &[u8; 62] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// Whether `template` (with `suffix` trailing bytes kept) names a place in the pool.
///
/// # Safety
/// `template` is null or a valid C string.
unsafe fn in_pool(template: *const c_char) -> bool {
    // SAFETY: as this function's contract.
    let Some(t) = (unsafe { state::cpath(template) }) else {
        return false;
    };
    !crate::guard::inside() && matches!(route::route(libc::AT_FDCWD, t), Route::Pool(..))
}

/// The six X's before the suffix, or EINVAL.
///
/// # Safety
/// `template` is a valid, writable C string.
unsafe fn xs<'a>(template: *mut c_char, suffix: c_int) -> Option<&'a mut [u8]> {
    // SAFETY: as this function's contract.
    let len = unsafe { libc::strlen(template) };
    let suffix = usize::try_from(suffix).ok()?;
    if len < 6 + suffix {
        return None;
    }
    // SAFETY: within the string's `len` bytes.
    let x =
        unsafe { std::slice::from_raw_parts_mut(template.cast::<u8>().add(len - 6 - suffix), 6) };
    (x == b"XXXXXX").then_some(x)
}

fn fill(x: &mut [u8]) {
    let mut r = [0u8; 6];
    // SAFETY: getrandom writes at most r.len() bytes into `r`.
    let got = unsafe { libc::getrandom(r.as_mut_ptr().cast(), r.len(), 0) };
    if got != r.len() as isize {
        // Without the kernel's randomness, time and address still vary per try.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ (x.as_ptr() as u64);
        r = t.to_le_bytes()[..6].try_into().expect("6 bytes");
    }
    for (c, b) in x.iter_mut().zip(r) {
        *c = LETTERS[b as usize % LETTERS.len()];
    }
}

/// Tries names until `make` (an open or a mkdir, through the replaced calls) does
/// not answer EEXIST.
///
/// # Safety
/// `template` is a valid, writable C string.
unsafe fn make_unique(template: *mut c_char, suffix: c_int, make: impl Fn() -> c_int) -> c_int {
    // SAFETY: as this function's contract.
    let Some(x) = (unsafe { xs(template, suffix) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    for _ in 0..TRIES {
        fill(x);
        let r = make();
        if r >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return r;
        }
    }
    set_errno(libc::EEXIST);
    -1
}

#[no_mangle]
pub unsafe extern "C" fn mkostemps64(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
    // SAFETY: the caller's template.
    if !unsafe { in_pool(template) } {
        // SAFETY: the C library's mkostemps with the caller's arguments.
        return unsafe { real::mkostemps64(template, suffix, flags) };
    }
    let open = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | (flags & !libc::O_ACCMODE);
    // SAFETY: the caller's template; the replaced openat creates the file.
    unsafe {
        make_unique(template, suffix, || {
            super::open::open_at(libc::AT_FDCWD, template, open, 0o600)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn mkostemps(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { mkostemps64(template, suffix, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn mkstemps64(template: *mut c_char, suffix: c_int) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { mkostemps64(template, suffix, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn mkstemps(template: *mut c_char, suffix: c_int) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { mkostemps64(template, suffix, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn mkostemp64(template: *mut c_char, flags: c_int) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { mkostemps64(template, 0, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn mkostemp(template: *mut c_char, flags: c_int) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { mkostemps64(template, 0, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn mkstemp64(template: *mut c_char) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { mkostemps64(template, 0, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn mkstemp(template: *mut c_char) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { mkostemps64(template, 0, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn mkdtemp(template: *mut c_char) -> *mut c_char {
    // SAFETY: the caller's template.
    if !unsafe { in_pool(template) } {
        // SAFETY: the C library's mkdtemp with the caller's template.
        return unsafe { real::mkdtemp(template) };
    }
    // SAFETY: the caller's template; the replaced mkdir makes the directory.
    let r = unsafe { make_unique(template, 0, || super::names::mkdir(template, 0o700)) };
    if r < 0 {
        std::ptr::null_mut()
    } else {
        template
    }
}
