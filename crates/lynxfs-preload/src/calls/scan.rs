//! realpath and scandir: glibc implements them with internal calls a preload cannot
//! replace, so they are built here from the replaced calls (scandir over any
//! directory, through opendir/readdir; realpath resolving pool paths in the pool).

use libc::{c_char, c_int, dirent64, DIR};
use lynxfs::api::path::{walk_parent, Scope};

use super::err;
use crate::route::{at_path, set_errno};
use crate::state::{self, Caller};

/// The canonical absolute path of `p` in the pool, symlinks followed (Linux's
/// realpath: every component must exist). A path leaving the pool comes back as
/// `Error::Outside` (the caller resolves it outside).
fn real_in_pool(s: &Caller, p: &[u8]) -> lynxfs::Result<Vec<u8>> {
    let ns = s.fs().ns();
    let c = state::config().ok_or(err(libc::ENOENT))?;
    let (mut base, mut path) = (s.cwd(), p.to_vec());
    let mut links = 0;
    loop {
        let w = walk_parent(ns, base, &path, &s.cred, &mut links, Scope::Mounted)?;
        let mut out = c.at.clone();
        out.extend_from_slice(&ns.path_of(w.parent)?);
        if w.name.is_empty() {
            return Ok(if out.is_empty() { b"/".to_vec() } else { out });
        }
        let ino = ns.lookup(w.parent, &w.name, &s.cred)?;
        if ns.mode(ino) & libc::S_IFMT == libc::S_IFLNK {
            links += 1;
            if links > lynxfs::api::path::SYMLOOP_MAX {
                return Err(err(libc::ELOOP));
            }
            path = ns.readlink(ino)?;
            base = w.parent;
            continue;
        }
        if w.trailing_slash && !lynxfs::meta::is_dir(ns.mode(ino)) {
            return Err(err(libc::ENOTDIR));
        }
        if !out.ends_with(b"/") {
            out.push(b'/');
        }
        out.extend_from_slice(&w.name);
        return Ok(out);
    }
}

/// Copies `p` (no NUL) into `resolved` (PATH_MAX bytes) or a fresh allocation.
///
/// # Safety
/// `resolved` is null or valid for PATH_MAX bytes.
unsafe fn answer(p: &[u8], resolved: *mut c_char) -> lynxfs::Result<isize> {
    if p.len() >= libc::PATH_MAX as usize {
        return Err(err(libc::ENAMETOOLONG));
    }
    let out = if resolved.is_null() {
        // SAFETY: a fresh allocation for the caller to free().
        let m = unsafe { libc::malloc(p.len() + 1) }.cast::<c_char>();
        if m.is_null() {
            return Err(err(libc::ENOMEM));
        }
        m
    } else {
        resolved
    };
    // SAFETY: `out` holds at least p.len() + 1 bytes (PATH_MAX, or allocated so).
    unsafe {
        std::ptr::copy_nonoverlapping(p.as_ptr().cast(), out, p.len());
        *out.add(p.len()) = 0;
    }
    Ok(out as isize)
}

#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    // SAFETY: the caller's path and buffer.
    let r = unsafe {
        at_path(
            libc::AT_FDCWD,
            path,
            |s, p| answer(&real_in_pool(s, p)?, resolved),
            |_, p| crate::real::realpath(p, resolved) as isize,
        )
    };
    if r == -1 {
        std::ptr::null_mut()
    } else {
        r as *mut c_char
    }
}

#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    // SAFETY: forwarded; a null buffer asks for an allocation.
    unsafe { realpath(path, std::ptr::null_mut()) }
}

type Filter = Option<unsafe extern "C" fn(*const dirent64) -> c_int>;
type Compare =
    Option<unsafe extern "C" fn(*const *const dirent64, *const *const dirent64) -> c_int>;

/// scandir over an open stream (ours or the C library's, through the replaced
/// readdir): the entries `filter` keeps, each in its own allocation, sorted with
/// `compar`; the stream is closed.
///
/// # Safety
/// As scandir's arguments; `d` an open stream.
unsafe fn scan(
    d: *mut DIR,
    out: *mut *mut *mut dirent64,
    filter: Filter,
    compar: Compare,
) -> c_int {
    let mut list: Vec<*mut dirent64> = Vec::new();
    let fail = |list: &Vec<*mut dirent64>, e: c_int| {
        for &p in list {
            // SAFETY: our own allocations, not handed out.
            unsafe { libc::free(p.cast()) };
        }
        set_errno(e);
        -1
    };
    loop {
        set_errno(0);
        // SAFETY: the stream is open.
        let e = unsafe { super::dir::readdir64(d) };
        if e.is_null() {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            // SAFETY: closing the stream opened for this call.
            unsafe { super::dir::closedir(d) };
            if errno != 0 {
                return fail(&list, errno);
            }
            break;
        }
        // SAFETY: the caller's filter on a valid entry.
        if filter.is_some_and(|f| unsafe { f(e) } == 0) {
            continue;
        }
        // SAFETY: a fresh allocation the size of an entry, filled from `e`.
        let copy = unsafe { libc::malloc(std::mem::size_of::<dirent64>()) }.cast::<dirent64>();
        if copy.is_null() {
            // SAFETY: closing the stream opened for this call.
            unsafe { super::dir::closedir(d) };
            return fail(&list, libc::ENOMEM);
        }
        // SAFETY: both point to a whole dirent64.
        unsafe { copy.write(*e) };
        list.push(copy);
    }
    if let Some(c) = compar {
        // SAFETY: sorting our array of entry pointers with the caller's comparison,
        // whose arguments are pointers to elements.
        unsafe {
            libc::qsort(
                list.as_mut_ptr().cast(),
                list.len(),
                std::mem::size_of::<*mut dirent64>(),
                Some(std::mem::transmute::<
                    unsafe extern "C" fn(*const *const dirent64, *const *const dirent64) -> c_int,
                    unsafe extern "C" fn(*const libc::c_void, *const libc::c_void) -> c_int,
                >(c)),
            )
        };
    }
    let bytes = list.len().max(1) * std::mem::size_of::<*mut dirent64>();
    // SAFETY: a fresh array for the caller to free().
    let arr = unsafe { libc::malloc(bytes) }.cast::<*mut dirent64>();
    if arr.is_null() {
        return fail(&list, libc::ENOMEM);
    }
    // SAFETY: `arr` holds list.len() pointers; `out` is the caller's.
    unsafe {
        std::ptr::copy_nonoverlapping(list.as_ptr(), arr, list.len());
        *out = arr;
    }
    list.len() as c_int
}

#[no_mangle]
pub unsafe extern "C" fn scandir64(
    dir: *const c_char,
    out: *mut *mut *mut dirent64,
    filter: Filter,
    compar: Compare,
) -> c_int {
    // SAFETY: the caller's path; the replaced opendir.
    let d = unsafe { super::dir::opendir(dir) };
    if d.is_null() {
        return -1;
    }
    // SAFETY: an open stream and the caller's arguments.
    unsafe { scan(d, out, filter, compar) }
}

#[no_mangle]
pub unsafe extern "C" fn scandir(
    dir: *const c_char,
    out: *mut *mut *mut dirent64,
    filter: Filter,
    compar: Compare,
) -> c_int {
    // SAFETY: forwarded (dirent and dirent64 are one layout on 64-bit Linux).
    unsafe { scandir64(dir, out, filter, compar) }
}

#[no_mangle]
pub unsafe extern "C" fn scandirat(
    dirfd: c_int,
    dir: *const c_char,
    out: *mut *mut *mut dirent64,
    filter: Filter,
    compar: Compare,
) -> c_int {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: the caller's arguments; the replaced openat and fdopendir.
    unsafe {
        let fd = super::open::open_at(dirfd, dir, flags, 0);
        if fd < 0 {
            return -1;
        }
        let d = super::dir::fdopendir(fd);
        if d.is_null() {
            super::open::close(fd);
            return -1;
        }
        scan(d, out, filter, compar)
    }
}

#[no_mangle]
pub unsafe extern "C" fn scandirat64(
    dirfd: c_int,
    dir: *const c_char,
    out: *mut *mut *mut dirent64,
    filter: Filter,
    compar: Compare,
) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { scandirat(dirfd, dir, out, filter, compar) }
}
