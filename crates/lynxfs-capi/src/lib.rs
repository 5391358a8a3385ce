//! The C API of LynxFS: `liblynxfs.so`, declared in `include/lynxfs.h`.
//!
//! A `lynxfs_t *` is an attached pool and one caller (the process's effective
//! credentials and a working directory). Calls mirror POSIX and return `-errno` on
//! failure, never setting `errno`. Every exported function checks its pointers, runs
//! its body under a panic guard ([`edge::call`]) and returns an error rather than
//! unwinding into C.

mod convert;
mod dirs;
mod edge;
mod files;
mod handle;
mod names;
mod xattrs;

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use edge::{call, path, put, Errno, R};
use engine::{Cred, Fs};
pub use handle::Lynx;

/// Runs when the library is loaded, before any thread of the program can call it:
/// the engine's memory goes under a protection key (`engine::pmem::keys`; a store
/// of the program into a pool faults), unless `LYNXFS_PROTECT=0`.
extern "C" fn on_load() {
    // Shuts the key in this thread again once made (it is open only inside calls).
    let _key = engine::pmem::keys::Open::enter();
    if std::env::var_os("LYNXFS_PROTECT").is_none_or(|v| v != "0") {
        engine::pmem::keys::enable();
    }
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

thread_local! {
    /// The text of the last failed `lynxfs_attach` of this thread.
    static ATTACH_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// The handle behind a `lynxfs_t *` from C: NULL is EINVAL.
fn lynx<'a>(p: *const Lynx) -> R<&'a Lynx> {
    // SAFETY: the header requires a handle from `lynxfs_attach` not yet detached (or
    // NULL, refused by `as_ref`); handles are only shared (`Lynx` is Sync).
    unsafe { p.as_ref() }.ok_or(Errno(libc::EINVAL))
}

/// The calling process's effective credentials, supplementary groups included.
fn process_cred() -> R<Cred> {
    // SAFETY: geteuid and getegid have no preconditions and cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // SAFETY: a size of 0 with a NULL list only asks for the number of groups.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let mut groups = vec![0; usize::try_from(n).map_err(|_| Errno(libc::EIO))?];
    // SAFETY: `groups` has room for `n` entries, the size passed.
    let got = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
    groups.truncate(usize::try_from(got).map_err(|_| Errno(libc::EIO))?);
    let mut cred = Cred::user(uid, gid);
    cred.groups = groups;
    Ok(cred)
}

/// Opens the pool at `pool` for this process: the error's text is kept for
/// `lynxfs_attach_error`.
fn attach(pool: *const c_char, flags: c_int) -> Result<Box<Lynx>, (i32, String)> {
    let p = path(pool).map_err(|e| (e.0, "pool path is NULL".to_string()))?;
    if flags != 0 {
        return Err((libc::EINVAL, format!("unknown attach flags {flags:#x}")));
    }
    let cred = process_cred().map_err(|e| (e.0, "cannot read the credentials".into()))?;
    let fs = Fs::open(Path::new(OsStr::from_bytes(p))).map_err(|e| (e.errno(), e.to_string()))?;
    Ok(Box::new(Lynx::new(fs, cred)))
}

fn set_attach_error(text: String) {
    let c = CString::new(text.replace('\0', " ")).unwrap_or_default();
    ATTACH_ERROR.with(|e| *e.borrow_mut() = c);
}

/// See `lynxfs_attach` in lynxfs.h.
///
/// # Safety
/// `pool` is NULL or a NUL-terminated string; `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_attach(
    pool: *const c_char,
    flags: c_int,
    err: *mut c_int,
) -> *mut Lynx {
    let _key = engine::pmem::keys::Open::enter();
    let r = catch_unwind(AssertUnwindSafe(|| attach(pool, flags)))
        .unwrap_or_else(|_| Err((libc::EIO, "internal error (a panic)".into())));
    match r {
        Ok(h) => {
            let _ = put(err, 0);
            Box::into_raw(h)
        }
        Err((e, text)) => {
            set_attach_error(text);
            // A NULL `err` is allowed: the caller reads the text instead.
            let _ = put(err, -e);
            std::ptr::null_mut()
        }
    }
}

/// See `lynxfs_attach_error` in lynxfs.h.
#[no_mangle]
pub extern "C" fn lynxfs_attach_error() -> *const c_char {
    ATTACH_ERROR.with(|e| e.borrow().as_ptr())
}

/// See `lynxfs_detach` in lynxfs.h.
///
/// # Safety
/// `fs` is NULL or a handle from `lynxfs_attach`, used by no other call now or after.
#[no_mangle]
pub unsafe extern "C" fn lynxfs_detach(fs: *mut Lynx) -> c_int {
    call(|| {
        if fs.is_null() {
            return Err(Errno(libc::EINVAL));
        }
        // SAFETY: a handle from `lynxfs_attach` (`Box::into_raw`), which the caller
        // gives up: the box is taken back once.
        let h = unsafe { Box::from_raw(fs) };
        h.detach().map(|()| 0)
    })
}
